//===- Trainer.cpp - Data, schedule, checkpoints and the training loop ---===//
//
// No model math lives here: the loop moves bytes between the corpus, the
// package's modc_grad and modc_adamw, the CSV log and checkpoint files. All
// choices (windows, held-out batches, the schedule) depend on the step and
// the data position alone, so a resumed run repeats the uninterrupted one.
//
//===----------------------------------------------------------------------===//
#include "modrt/Error.h"
#include "modrt/Training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

using namespace modrt;

//===----------------------------------------------------------------------===//
// Learning rate
//===----------------------------------------------------------------------===//

double modrt::learningRate(int64_t step, int64_t totalSteps, double peak,
                           int64_t warmup, double minRatio) {
  if (totalSteps < 1)
    throw Error(fmt::format("learning rate: total steps must be >= 1, got {}",
                            totalSteps));
  if (step < 1)
    throw Error(fmt::format("learning rate: step must be >= 1, got {}", step));
  if (warmup < 0)
    throw Error(
        fmt::format("learning rate: warmup must be >= 0, got {}", warmup));
  if (!std::isfinite(peak) || peak < 0)
    throw Error(fmt::format(
        "learning rate: peak must be finite and >= 0, got {}", peak));
  if (!(minRatio >= 0 && minRatio <= 1))
    throw Error(fmt::format(
        "learning rate: minimum ratio must be in [0, 1], got {}", minRatio));
  if (step <= warmup)
    return peak * (static_cast<double>(step) / static_cast<double>(warmup));
  if (step >= totalSteps)
    return peak * minRatio;
  double progress = static_cast<double>(step - warmup) /
                    static_cast<double>(totalSteps - warmup);
  constexpr double kPi = 3.141592653589793238462643383279502884;
  double cosine = 0.5 * (1.0 + std::cos(kPi * progress));
  return peak * (minRatio + (1.0 - minRatio) * cosine);
}

uint64_t modrt::fnv1a64(const void *data, size_t size, uint64_t hash) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

//===----------------------------------------------------------------------===//
// Corpus
//===----------------------------------------------------------------------===//

void modrt::requireRegularTextFile(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: is a directory, not a text file", path));
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(fmt::format("{}: not a regular file (a device or a pipe, "
                            "which may never end); give a text file",
                            path));
}

namespace {
/// Appends the bytes of `path` to `out`; throws Error naming the file when
/// it is missing, unreadable or empty.
void appendFile(const std::string &path, std::string &out) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(fmt::format("{}: no such file", path));
  requireRegularTextFile(path);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  size_t before = out.size();
  std::vector<char> buffer(1 << 16);
  while (true) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    std::streamsize got = in.gcount();
    if (got > 0)
      out.append(buffer.data(), static_cast<size_t>(got));
    if (out.size() > Corpus::kMaxBytes)
      throw Error(fmt::format("{}: the training data exceed {} bytes (4 GiB), "
                              "the most modrun holds in memory; use a part "
                              "of it",
                              path, Corpus::kMaxBytes));
    if (in.eof())
      break;
    if (!in)
      throw Error(fmt::format("{}: read failed after {} bytes: {}", path,
                              out.size() - before,
                              errno ? std::strerror(errno) : "I/O error"));
  }
  if (out.size() == before)
    throw Error(fmt::format("{}: file is empty (no bytes to train on)", path));
}

/// The bytes of every training data file, in order, and how messages
/// name them (the file, or "the N data files").
std::string readDataFiles(const std::vector<std::string> &files,
                          std::string &what) {
  if (files.empty())
    throw Error("no training data files given");
  std::string bytes;
  for (const std::string &file : files)
    appendFile(file, bytes);
  what = files.size() == 1 ? files.front()
                           : fmt::format("the {} data files", files.size());
  return bytes;
}
} // namespace

Corpus Corpus::load(const std::vector<std::string> &files, int64_t seqLen,
                    int64_t batch) {
  std::string what;
  std::string bytes = readDataFiles(files, what);
  return fromBytes(std::move(bytes), seqLen, batch, what);
}

Corpus Corpus::load(const std::vector<std::string> &files, int64_t seqLen,
                    int64_t batch, const Tokenizer &tokenizer) {
  if (tokenizer.isBytes())
    return load(files, seqLen, batch);
  std::string what;
  std::string bytes = readDataFiles(files, what);
  std::vector<int32_t> tokens = tokenizer.encode(bytes);
  bytes = std::string();
  return fromTokens(std::move(tokens), seqLen, batch, what);
}

uint64_t Corpus::batchBytes() const {
  return static_cast<uint64_t>(batch_) * static_cast<uint64_t>(seqLen_ + 1);
}

Corpus Corpus::fromBytes(std::string bytes, int64_t seqLen, int64_t batch,
                         const std::string &what) {
  Corpus c;
  c.split(bytes.size(), seqLen, batch, what, "bytes");
  c.hash_ = fnv1a64(bytes.data(), bytes.size());
  c.bytes = std::move(bytes);
  return c;
}

Corpus Corpus::fromTokens(std::vector<int32_t> tokens, int64_t seqLen,
                          int64_t batch, const std::string &what) {
  Corpus c;
  c.split(tokens.size(), seqLen, batch, what, "tokens");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0)
      throw Error(
          fmt::format("{}: token {} is negative ({})", what, i, tokens[i]));
  c.hash_ = fnv1a64(tokens.data(), tokens.size() * sizeof(int32_t));
  c.tokens_ = std::move(tokens);
  c.tokenLevel_ = true;
  return c;
}

void Corpus::split(uint64_t total, int64_t seqLen, int64_t batch,
                   const std::string &what, const char *unit) {
  if (seqLen < 1 || batch < 1)
    throw Error(fmt::format("corpus: seq_len and batch must be >= 1, got {} "
                            "and {}",
                            seqLen, batch));
  uint64_t window = static_cast<uint64_t>(seqLen) + 1, batchBytes;
  if (__builtin_mul_overflow(window, static_cast<uint64_t>(batch), &batchBytes))
    throw Error(fmt::format("corpus: batch {} is too large", batch));
  if (total == 0)
    throw Error(fmt::format("{}: no {} to train on", what, unit));
  uint64_t held = std::max<uint64_t>((total + 9) / 10, batchBytes);
  std::string shape = fmt::format("one batch of {} x (seq_len {} + 1) = {} {}",
                                  batch, seqLen, batchBytes, unit);
  if (total < batchBytes)
    throw Error(fmt::format("{}: {} {}; the held-out split (the last 10%) "
                            "needs at least {}",
                            what, total, unit, shape));
  if (total - held < batchBytes)
    throw Error(fmt::format("{}: {} {}; after holding out the last {} "
                            "{} the training split has {} {}, less than "
                            "{} (need at least {} {} in all)",
                            what, total, unit, held, unit, total - held, unit,
                            shape, 2 * batchBytes, unit));
  trainSize = total - held;
  seqLen_ = seqLen;
  batch_ = batch;
}

uint64_t Corpus::trainBatch(uint64_t position,
                            std::vector<int32_t> &tokens) const {
  return trainWindows(position, 0, batch_, tokens);
}

uint64_t Corpus::trainWindows(uint64_t position, int64_t first, int64_t count,
                              std::vector<int32_t> &tokens) const {
  if (position >= trainSize)
    throw Error(fmt::format("data position {} is outside the training split "
                            "of {} {}",
                            position, trainSize, unit()));
  if (first < 0 || count < 0 || first + count > batch_)
    throw Error(fmt::format("windows {}..{} are outside a batch of {}", first,
                            first + count, batch_));
  const uint64_t window = static_cast<uint64_t>(seqLen_) + 1;
  uint64_t n = static_cast<uint64_t>(count) * window;
  tokens.resize(n);
  uint64_t p =
      (position + (static_cast<uint64_t>(first) * window) % trainSize) %
      trainSize;
  for (uint64_t i = 0; i < n; ++i) {
    tokens[i] = at(p);
    if (++p == trainSize)
      p = 0;
  }
  // The next batch starts after the whole batch, wherever this part ends.
  return (position + batchBytes() % trainSize) % trainSize;
}

std::vector<std::vector<int32_t>>
Corpus::heldOutBatches(size_t maxBatches) const {
  uint64_t n = batchBytes();
  uint64_t count =
      std::min<uint64_t>(std::max<size_t>(maxBatches, 1), heldOutBytes() / n);
  std::vector<std::vector<int32_t>> batches(count);
  for (uint64_t b = 0; b < count; ++b) {
    const uint64_t first = trainSize + b * n;
    batches[b].resize(n);
    for (uint64_t i = 0; i < n; ++i)
      batches[b][i] = at(first + i);
  }
  return batches;
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

namespace {
constexpr const char *kCheckpointFormat = "modc-checkpoint";

/// Shortest text that reads back as the same double.
std::string exact(double x) { return fmt::format("{}", x); }

std::string hex(uint64_t x) { return fmt::format("{:016x}", x); }

/// Metadata accessors that name the checkpoint and key on failure.
struct MetaReader {
  const std::string &path;
  const std::map<std::string, std::string> &meta;

  const std::string &text(const std::string &key) const {
    auto it = meta.find(key);
    if (it == meta.end())
      throw Error(fmt::format("{}: checkpoint metadata lacks '{}'", path, key));
    return it->second;
  }
  [[noreturn]] void bad(const std::string &key, const char *what) const {
    throw Error(fmt::format("{}: checkpoint metadata '{}' = \"{}\" is not {}",
                            path, key, text(key), what));
  }
  uint64_t unsignedValue(const std::string &key, int base = 10) const {
    const std::string &t = text(key);
    errno = 0;
    char *end = nullptr;
    unsigned long long v = std::strtoull(t.c_str(), &end, base);
    if (t.empty() || t[0] == '-' || t[0] == '+' || errno || *end)
      bad(key, base == 16 ? "a hexadecimal integer" : "an integer >= 0");
    return v;
  }
  int64_t signedValue(const std::string &key) const {
    uint64_t v = unsignedValue(key);
    if (v > static_cast<uint64_t>(INT64_MAX))
      bad(key, "an integer in range");
    return static_cast<int64_t>(v);
  }
  double number(const std::string &key) const {
    const std::string &t = text(key);
    errno = 0;
    char *end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    if (t.empty() || errno || *end || !std::isfinite(v))
      bad(key, "a finite number");
    return v;
  }
};
} // namespace

void modrt::saveCheckpoint(const std::string &path, const TensorMap &weights,
                           const OptimizerState &optimizer,
                           const CheckpointInfo &info) {
  TensorMap out;
  auto copyAll = [&](const TensorMap &from, const std::string &prefix) {
    for (const auto &[name, tensor] : from)
      out.insert(prefix + name, tensor);
  };
  copyAll(weights, "");
  copyAll(optimizer.m, "adam.m.");
  copyAll(optimizer.v, "adam.v.");
  auto &md = out.metadata;
  md["format"] = kCheckpointFormat;
  md["step"] = std::to_string(info.step);
  md["data_position"] = std::to_string(info.dataPosition);
  md["seed"] = std::to_string(info.seed);
  md["total_steps"] = std::to_string(info.totalSteps);
  md["batch"] = std::to_string(info.batch);
  md["lr"] = exact(info.lr);
  md["warmup"] = std::to_string(info.warmup);
  md["beta1"] = exact(info.adamw.beta1);
  md["beta2"] = exact(info.adamw.beta2);
  md["eps"] = exact(info.adamw.eps);
  md["weight_decay"] = exact(info.adamw.weightDecay);
  md["clip"] = exact(info.adamw.clipNorm);
  md["model"] = info.model;
  md["manifest_hash"] = hex(info.modelHash);
  md["data_bytes"] = std::to_string(info.dataBytes);
  md["data_hash"] = hex(info.dataHash);
  out.save(path);
}

Checkpoint modrt::loadCheckpoint(const std::string &path,
                                 const Package &package) {
  TensorMap file = TensorMap::load(path);
  const Manifest &m = package.manifest();
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kCheckpointFormat)
    throw Error(fmt::format("{}: not a modc checkpoint (its __metadata__ has "
                            "no format \"{}\"; modrun train writes them)",
                            path, kCheckpointFormat));
  MetaReader r{path, file.metadata};
  Checkpoint c;
  CheckpointInfo &info = c.info;
  info.model = r.text("model");
  info.modelHash = r.unsignedValue("manifest_hash", 16);
  std::string name = m.model.value("name", std::string("?"));
  if (info.modelHash != m.modelHash)
    throw Error(fmt::format("{}: checkpoint is for model \"{}\" (manifest hash "
                            "{}), but package {} is model \"{}\" (manifest "
                            "hash {}); resume with the package it was "
                            "trained with",
                            path, info.model, hex(info.modelHash),
                            package.directory(), name, hex(m.modelHash)));
  info.step = r.signedValue("step");
  info.dataPosition = r.unsignedValue("data_position");
  info.seed = r.unsignedValue("seed");
  info.totalSteps = r.signedValue("total_steps");
  info.batch = r.signedValue("batch");
  info.lr = r.number("lr");
  info.warmup = r.signedValue("warmup");
  info.adamw.beta1 = r.number("beta1");
  info.adamw.beta2 = r.number("beta2");
  info.adamw.eps = r.number("eps");
  info.adamw.weightDecay = r.number("weight_decay");
  info.adamw.clipNorm = r.number("clip");
  info.dataBytes = r.unsignedValue("data_bytes");
  info.dataHash = r.unsignedValue("data_hash", 16);

  // Split the tensors by prefix; the package checks names and shapes.
  for (auto &[tname, tensor] : file) {
    if (tname.rfind("adam.m.", 0) == 0)
      c.optimizer.m.insert(tname.substr(7), std::move(tensor));
    else if (tname.rfind("adam.v.", 0) == 0)
      c.optimizer.v.insert(tname.substr(7), std::move(tensor));
    else
      c.weights.insert(tname, std::move(tensor));
  }
  c.optimizer.step = info.step;
  try {
    package.checkWeights(c.weights);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  for (auto *moments : {&c.optimizer.m, &c.optimizer.v}) {
    const char *prefix = moments == &c.optimizer.m ? "adam.m." : "adam.v.";
    for (const ParamInfo &p : m.params) {
      const Tensor *t = moments->find(p.name);
      if (!t || t->dtype != DType::F32 || t->shape != p.shape)
        throw Error(fmt::format(
            "{}: optimizer moment '{}{}' is {}, expected "
            "F32 {}",
            path, prefix, p.name,
            t ? fmt::format("{} {}", dtypeName(t->dtype), shapeString(t->shape))
              : std::string("missing"),
            shapeString(p.shape)));
    }
    if (moments->size() != m.params.size())
      throw Error(fmt::format("{}: optimizer moments {}* name tensors that "
                              "are not parameters of this package",
                              path, prefix));
  }
  return c;
}

TensorMap modrt::loadWeights(const std::string &path) {
  TensorMap file = TensorMap::load(path);
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kCheckpointFormat)
    return file;
  TensorMap weights;
  for (auto &[name, tensor] : file)
    if (name.rfind("adam.", 0) != 0)
      weights.insert(name, std::move(tensor));
  weights.metadata = file.metadata;
  return weights;
}

//===----------------------------------------------------------------------===//
// The training loop
//===----------------------------------------------------------------------===//

double modrt::evaluate(const Package &package, const TensorMap &weights,
                       const std::vector<std::vector<int32_t>> &batches,
                       int64_t batch) {
  if (batches.empty())
    throw Error("evaluate: no held-out batches");
  // The compiled loss-only entry: the training entry's losses without its
  // backward pass (docs/runtime.md).
  double sum = 0;
  for (const std::vector<int32_t> &tokens : batches)
    sum += package.eval(weights, tokens, batch).ce;
  return sum / static_cast<double>(batches.size());
}

std::vector<MoeShares> modrt::countMoeShares(const Manifest &m,
                                             const ForwardResult &result) {
  std::vector<MoeShares> shares;
  if (result.moe.size() != m.moeLayers.size())
    throw Error(fmt::format("the forward pass returned decisions for {} MoE "
                            "layers, the manifest lists {}",
                            result.moe.size(), m.moeLayers.size()));
  const int64_t E = m.moeExperts, EN = m.moeExperts + m.moeNoopExperts;
  for (size_t l = 0; l < m.moeLayers.size(); ++l) {
    MoeShares s;
    s.layer = m.moeLayers[l];
    s.keptByExpert.assign(static_cast<size_t>(E), 0);
    // The encoding of modc_forward_args::moe_decisions (docs/runtime.md).
    for (int32_t d : result.moe[l]) {
      if (d == -1)
        ++s.skipped;
      else if (d >= 0 && d < E) {
        ++s.kept;
        ++s.keptByExpert[static_cast<size_t>(d)];
      } else if (d >= E && d < EN)
        ++s.noop;
      else if (d >= EN && d < EN + E)
        ++s.dropped;
      else
        throw Error(fmt::format("MoE layer {}: the package returned decision "
                                "{}, outside [-1, 2E + N = {})",
                                s.layer, d, EN + E));
    }
    shares.push_back(s);
  }
  return shares;
}

std::vector<MoeShares>
modrt::measureMoeShares(const Package &package, const TensorMap &weights,
                        const std::vector<int32_t> &tokens, int64_t batch) {
  const Manifest &m = package.manifest();
  if (m.moeLayers.empty())
    return {};
  const int64_t S = m.seqLen;
  if (batch < 1 || tokens.size() != static_cast<size_t>(batch * (S + 1)))
    throw Error(fmt::format("measureMoeShares: tokens must be [B, seq_len + "
                            "1] = [{}, {}], got {} values",
                            batch, S + 1, tokens.size()));
  std::vector<int32_t> inputs(static_cast<size_t>(batch * S));
  for (int64_t b = 0; b < batch; ++b)
    std::copy(tokens.begin() + b * (S + 1), tokens.begin() + b * (S + 1) + S,
              inputs.begin() + b * S);
  return countMoeShares(
      m, package.forward(weights, inputs, batch, RouteMode::TopK));
}

namespace {
struct FileCloser {
  void operator()(std::FILE *f) const {
    if (f)
      std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

const char *kLogHeader = "step,loss,ce,aux,lr,grad_norm,tokens_per_s,eval_loss,"
                         "comm_s,comm_bytes,balance\n";

/// Opens the CSV log: fresh with a header, or appended to when resuming
/// into a log that exists.
FilePtr openLog(const std::string &path, bool resuming) {
  std::error_code ec;
  bool append = resuming && std::filesystem::exists(path, ec) &&
                std::filesystem::file_size(path, ec) > 0;
  errno = 0;
  FilePtr f(std::fopen(path.c_str(), append ? "a" : "w"));
  if (!f)
    throw Error(fmt::format("{}: cannot open log for writing: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  if (!append)
    std::fputs(kLogHeader, f.get());
  return f;
}

/// The losses in an error message; the balance loss for MoE models only.
std::string lossText(const Losses &l, bool moe) {
  return fmt::format("total {}, ce {}, aux {}{}", l.total, l.ce, l.aux,
                     moe ? fmt::format(", balance {}", l.balance) : "");
}
} // namespace

void modrt::requireSameOnAllRanks(
    Communicator &comm,
    const std::vector<std::pair<std::string, uint64_t>> &items) {
  const size_t n = items.size(), ranks = static_cast<size_t>(comm.size());
  std::vector<uint64_t> mine(n), all(n * ranks);
  for (size_t i = 0; i < n; ++i)
    mine[i] = items[i].second;
  comm.allGather(mine.data(), n * sizeof(uint64_t), all.data(),
                 "the start-up comparison of the ranks");
  for (size_t i = 0; i < n; ++i) {
    std::vector<std::string> differ;
    for (size_t r = 1; r < ranks; ++r)
      if (all[r * n + i] != all[i])
        differ.push_back(fmt::format("rank {} has {}", r, hex(all[r * n + i])));
    if (!differ.empty()) {
      std::string list;
      for (const std::string &d : differ)
        list += (list.empty() ? "" : ", ") + d;
      throw CollectiveError(fmt::format(
          "the ranks do not agree on the {}: rank 0 has hash {}, {}; every "
          "rank must start from the same package, weights, data and settings",
          items[i].first, hex(all[i]), list));
    }
  }
}

namespace {
/// FNV-1a 64 of the file at `path` ("" when it cannot be read: the package
/// opened it already, so that does not happen in practice).
uint64_t fileHash(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = fnv1a64(nullptr, 0);
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h = fnv1a64(buffer.data(), static_cast<size_t>(in.gcount()), h);
  }
  return h;
}

uint64_t tensorsHash(const TensorMap &tensors, uint64_t h) {
  for (const auto &[name, t] : tensors) {
    h = fnv1a64(name.data(), name.size(), h);
    h = fnv1a64(t.data.data(), t.byteSize(), h);
  }
  return h;
}

/// The parameters back to back, in manifest order.
void flatten(const Manifest &m, const TensorMap &tensors,
             std::vector<float> &flat) {
  size_t at = 0;
  for (const ParamInfo &p : m.params) {
    const Tensor *t = tensors.find(p.name);
    size_t n = t->byteSize() / sizeof(float);
    if (flat.size() < at + n)
      flat.resize(at + n);
    std::memcpy(flat.data() + at, t->f32(), n * sizeof(float));
    at += n;
  }
  flat.resize(at);
}

void unflatten(const Manifest &m, const std::vector<float> &flat,
               TensorMap &tensors) {
  size_t at = 0;
  for (const ParamInfo &p : m.params) {
    Tensor *t = tensors.find(p.name);
    size_t n = t->byteSize() / sizeof(float);
    std::memcpy(t->f32(), flat.data() + at, n * sizeof(float));
    at += n;
  }
}
} // namespace

void modrt::train(const Package &package, const Corpus &corpus,
                  const TrainConfig &config, TrainState &state,
                  const std::function<void(const StepRecord &)> &onStep) {
  const Manifest &m = package.manifest();
  if (config.steps < 1)
    throw Error(fmt::format("train: steps must be >= 1, got {}", config.steps));
  if (config.outPath.empty())
    throw Error("train: no checkpoint path given");
  if (corpus.seqLen() != m.seqLen)
    throw Error(fmt::format("train: corpus windows are for seq_len {}, the "
                            "model's seq_len is {}",
                            corpus.seqLen(), m.seqLen));
  const int ranks = config.comm ? config.comm->size() : 1;
  const int rank = config.comm ? config.comm->rank() : 0;
  if (config.shards < 1)
    throw Error(fmt::format("train: shards must be >= 1, got {}",
                            config.shards));
  if (ranks > 1 && config.shards > 1)
    throw Error(fmt::format("train: --shards {} is for one process; the {} "
                            "ranks of this job split each batch {} ways "
                            "already",
                            config.shards, ranks, ranks));
  const int64_t parts = ranks > 1 ? ranks : config.shards;
  int64_t last = config.stopAfter > 0 ? std::min(config.stopAfter, config.steps)
                                      : config.steps;
  int64_t first = state.optimizer.step + 1;
  if (first > last)
    throw Error(fmt::format("train: already at step {}; nothing to do up to "
                            "step {}",
                            state.optimizer.step, last));
  int64_t saveEvery = config.saveEvery > 0   ? config.saveEvery
                      : config.evalEvery > 0 ? config.evalEvery
                                             : 100;
  // Validated once up front so a bad setting fails before any work.
  learningRate(last, config.steps, config.lr, config.warmup, config.minLrRatio);

  if (ranks > 1) {
    // Every rank must compute the same thing: compare what goes in.
    uint64_t settings = fnv1a64(nullptr, 0);
    auto mix = [&](const auto &v) { settings = fnv1a64(&v, sizeof v, settings); };
    for (int64_t v : {config.steps, config.stopAfter, config.warmup,
                      config.evalEvery, config.saveEvery, corpus.batch(),
                      static_cast<int64_t>(config.evalBatches)})
      mix(v);
    for (double v : {config.lr, config.minLrRatio, config.adamw.beta1,
                     config.adamw.beta2, config.adamw.eps,
                     config.adamw.weightDecay, config.adamw.clipNorm})
      mix(v);
    mix(config.seed);
    uint64_t start = tensorsHash(state.weights, fnv1a64(nullptr, 0));
    start = tensorsHash(state.optimizer.m, start);
    start = tensorsHash(state.optimizer.v, start);
    start = fnv1a64(&state.optimizer.step, sizeof state.optimizer.step, start);
    start = fnv1a64(&state.dataPosition, sizeof state.dataPosition, start);
    requireSameOnAllRanks(
        *config.comm,
        {{"package library (libmodel.so)",
          fileHash(package.directory() + "/libmodel.so")},
         {"model (manifest hash)", m.modelHash},
         {"training data", corpus.hash()},
         {"start weights, optimizer state and data position", start},
         {"training settings", settings}});
  }
  BatchSplit split;
  try {
    split = BatchSplit::of(corpus.batch(), parts);
  } catch (const Error &e) {
    // The ranks agree on the batch by now: they all stop here.
    throw CollectiveError(e.what());
  }

  std::vector<std::vector<int32_t>> heldOut;
  if (config.evalEvery > 0)
    heldOut = corpus.heldOutBatches(config.evalBatches);
  // MoE models report their layers' shares on the first held-out batch
  // (docs/cli.md, "modrun train"), also when nothing else is evaluated.
  const bool hasMoe = !m.moeLayers.empty();
  if (hasMoe && heldOut.empty())
    heldOut = corpus.heldOutBatches(1);
  FilePtr log;
  if (!config.logPath.empty() && rank == 0)
    log = openLog(config.logPath, first > 1);

  CheckpointInfo info;
  info.seed = config.seed;
  info.totalSteps = config.steps;
  info.batch = corpus.batch();
  info.lr = config.lr;
  info.warmup = config.warmup;
  info.adamw = config.adamw;
  info.model = m.model.value("name", std::string("?"));
  info.modelHash = m.modelHash;
  info.dataBytes = corpus.size();
  info.dataHash = corpus.hash();
  int64_t lastSaved = -1;

  auto fail = [&](int64_t step, const std::string &what) {
    std::string kept =
        lastSaved >= 0
            ? fmt::format("the last good checkpoint is {} (step {})",
                          config.outPath, lastSaved)
            : fmt::format("no checkpoint was written in this run (the first "
                          "was due at step {}); {} is unchanged",
                          std::min(last, (first - 1) / saveEvery * saveEvery +
                                             saveEvery),
                          config.outPath);
    // Every rank sees the same global losses and norm, so all stop here.
    throw CollectiveError(
        fmt::format("step {}: {}; training stopped, {}", step, what, kept));
  };

  const int64_t tokensPerStep = corpus.batch() * m.seqLen;
  std::vector<int32_t> tokens;
  TensorMap grads;
  for (const ParamInfo &param : m.params)
    grads.insert(param.name, Tensor::zeros(DType::F32, param.shape));
  // The reduction rewrites the gradients on the host, so they stay there
  // when the batch is split; weights and moments are only written by the
  // package and stay on the device.
  const bool splitBatch = parts > 1;
  TensorMap partGrads;
  std::vector<float> flat;
  std::vector<double> acc;
  if (splitBatch && ranks == 1)
    for (const ParamInfo &param : m.params)
      partGrads.insert(param.name, Tensor::zeros(DType::F32, param.shape));
  // CUDA packages keep the training state on the GPU between steps; the
  // host copies are brought up to date for checkpoints and when the guards
  // go (also on an error). CPU packages ignore this.
  ResidentTensors resident[] = {
      package.keepOnDevice(state.weights),
      splitBatch ? ResidentTensors() : package.keepOnDevice(grads),
      package.keepOnDevice(state.optimizer.m),
      package.keepOnDevice(state.optimizer.v)};
  for (int64_t step = first; step <= last; ++step) {
    StepRecord rec;
    rec.step = step;
    rec.totalSteps = config.steps;
    rec.lastStep = last;
    rec.ranks = ranks;
    auto start = std::chrono::steady_clock::now();
    uint64_t next = 0;
    rec.lr = learningRate(step, config.steps, config.lr, config.warmup,
                          config.minLrRatio);
    std::optional<double> stepNorm; // the norm of a step run as one call
    if (!splitBatch) {
      next = corpus.trainBatch(state.dataPosition, tokens);
      // One call: a CUDA package runs it as one CUDA graph (docs/cuda.md);
      // the update happens only where the losses are finite, as below.
      TrainStepResult r =
          package.trainStep(state.weights, tokens, corpus.batch(), grads,
                            state.optimizer, rec.lr, config.adamw);
      rec.losses = r.losses;
      stepNorm = r.gradNorm;
    } else {
      // The losses and gradients of the parts, combined in part order
      // (accumulatePart, docs/distributed.md): the same arithmetic whether
      // the parts run here one after another or on the ranks of a job.
      std::vector<double> partLosses(4 * static_cast<size_t>(parts));
      if (ranks == 1) {
        for (int64_t p = 0; p < parts; ++p) {
          next = corpus.trainWindows(state.dataPosition, split.first[p],
                                     split.counts[p], tokens);
          Losses l =
              package.grad(state.weights, tokens, split.counts[p], partGrads);
          partLosses[4 * p] = l.total;
          partLosses[4 * p + 1] = l.ce;
          partLosses[4 * p + 2] = l.aux;
          partLosses[4 * p + 3] = l.balance;
          flatten(m, partGrads, flat);
          if (p == 0)
            acc.assign(flat.size(), 0.0);
          accumulatePart(flat.data(), split.counts[p], acc.data(), acc.size());
        }
        finishAccumulation(acc.data(), corpus.batch(), flat.data(),
                           flat.size());
      } else {
        next = corpus.trainWindows(state.dataPosition, split.first[rank],
                                   split.counts[rank], tokens);
        Losses l = package.grad(state.weights, tokens, split.counts[rank],
                                grads);
        double mine[4] = {l.total, l.ce, l.aux, l.balance};
        flatten(m, grads, flat);
        // The collectives alone are timed (flatten and unflatten are local
        // copies); a rank that finishes its part first waits here for the
        // others, so load imbalance shows as communication time.
        auto commStart = std::chrono::steady_clock::now();
        config.comm->allGather(mine, sizeof mine, partLosses.data(),
                               "the loss all-gather");
        reduceGradients(*config.comm, split, flat);
        rec.commSeconds = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - commStart)
                              .count();
        rec.commBytes = flat.size() * sizeof(float);
      }
      unflatten(m, flat, grads);
      double sums[4] = {0, 0, 0, 0};
      for (int64_t p = 0; p < parts; ++p)
        for (int k = 0; k < 4; ++k)
          sums[k] +=
              partLosses[4 * p + k] * static_cast<double>(split.counts[p]);
      const double n = static_cast<double>(corpus.batch());
      rec.losses = Losses{sums[0] / n, sums[1] / n, sums[2] / n, sums[3] / n};
    }
    if (!std::isfinite(rec.losses.total) || !std::isfinite(rec.losses.ce) ||
        !std::isfinite(rec.losses.aux) || !std::isfinite(rec.losses.balance))
      fail(step, fmt::format("loss is not finite ({})",
                             lossText(rec.losses, hasMoe)));
    rec.gradNorm =
        stepNorm ? *stepNorm
                 : package.adamwStep(state.weights, grads, state.optimizer,
                                     rec.lr, config.adamw);
    if (!std::isfinite(rec.gradNorm))
      fail(step, fmt::format("gradient norm is not finite ({}; loss {})",
                             rec.gradNorm, lossText(rec.losses, hasMoe)));
    state.dataPosition = next;
    rec.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    rec.tokensPerSecond =
        rec.seconds > 0 ? static_cast<double>(tokensPerStep) / rec.seconds : 0;

    const bool evalStep =
        config.evalEvery > 0 && (step % config.evalEvery == 0 || step == last);
    if (evalStep) {
      if (ranks == 1) {
        rec.evalLoss =
            evaluate(package, state.weights, heldOut, corpus.batch());
      } else {
        // Held-out batch j is evaluated by rank j % ranks; the sum runs in
        // batch order as evaluate's does, so the value is the same.
        std::vector<double> mine(heldOut.size(), 0.0),
            all(heldOut.size() * static_cast<size_t>(ranks));
        for (size_t j = static_cast<size_t>(rank); j < heldOut.size();
             j += static_cast<size_t>(ranks))
          mine[j] = package.eval(state.weights, heldOut[j], corpus.batch()).ce;
        config.comm->allGather(mine.data(), mine.size() * sizeof(double),
                               all.data(), "the held-out loss all-gather");
        double sum = 0;
        for (size_t j = 0; j < heldOut.size(); ++j)
          sum += all[(j % static_cast<size_t>(ranks)) * heldOut.size() + j];
        rec.evalLoss = sum / static_cast<double>(heldOut.size());
      }
    }
    // Every rank holds the same weights, so every rank measures the same
    // shares; no collective is needed.
    if (hasMoe && (evalStep || step == last))
      rec.moe = measureMoeShares(package, state.weights, heldOut.front(),
                                 corpus.batch());
    if (log) {
      std::fputs(fmt::format("{},{},{},{},{},{},{:.1f},{},{:.6f},{},{}\n", step,
                             rec.losses.total, rec.losses.ce, rec.losses.aux,
                             rec.lr, rec.gradNorm, rec.tokensPerSecond,
                             rec.evalLoss ? exact(*rec.evalLoss) : "",
                             rec.commSeconds, rec.commBytes, rec.losses.balance)
                     .c_str(),
                 log.get());
      if (std::fflush(log.get()) != 0 || std::ferror(log.get()))
        throw Error(fmt::format("{}: write failed: {}", config.logPath,
                                std::strerror(errno)));
    }
    if (step % saveEvery == 0 || step == last) {
      info.step = state.optimizer.step;
      info.dataPosition = state.dataPosition;
      package.syncFromDevice(state.weights);
      package.syncFromDevice(state.optimizer.m);
      package.syncFromDevice(state.optimizer.v);
      // Every rank holds the same state; rank 0 writes it (atomically).
      if (rank == 0)
        saveCheckpoint(config.outPath, state.weights, state.optimizer, info);
      lastSaved = step;
      rec.saved = true;
    }
    if (onStep)
      onStep(rec);
  }
}
