//===- modrun.cpp - Command-line front end of the modc runtime -----------===//
//
// modrun init | forward | grad | train | info: thin wrappers over
// modrt::Package and modrt::train so that a compiled package can be used and
// trained from the shell; modrun tokenize | show: the
// byte-level tokenizer of SPEC.md section 6 and a safetensors summary. Usage
// errors exit 2, runtime errors (modrt::Error) print "modrun: error: <msg>"
// and exit 1. Outputs are written atomically, so a failed run leaves no file
// behind.
//
//===----------------------------------------------------------------------===//
#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"
#include "modrt/Training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

using namespace modrt;

namespace {

const char *kMainUsage =
    "usage: modrun <command> [options]\n"
    "\n"
    "commands:\n"
    "  init     write freshly initialised weights for a package\n"
    "  forward  run the forward pass on a batch of tokens\n"
    "  grad     losses and gradients of one batch of tokens\n"
    "  train    train a package on text files (AdamW, checkpoints)\n"
    "  info     print a summary of a package\n"
    "  tokenize turn text files into a batch of byte-level tokens\n"
    "  show     list the tensors of a safetensors file\n"
    "\n"
    "Run 'modrun <command> --help' for the options of a command.\n";

const char *kInitUsage =
    "usage: modrun init PKG --seed N --out W.safetensors\n"
    "\n"
    "Writes the package's parameters initialised from its manifest (normal,\n"
    "ones, zeros); the values depend on the seed alone.\n";

const char *kForwardUsage =
    "usage: modrun forward PKG --weights W.safetensors --tokens T.safetensors\n"
    "                          --out OUT.safetensors [--mode topk|causal]\n"
    "\n"
    "T holds one I32 tensor 'tokens' of shape [B, seq_len]. OUT gets 'logits'\n"
    "(F32 [B, seq_len, vocab]) and 'routed.<l>' (I32 [B, seq_len], 1 = the\n"
    "token went through the block) for each routed layer l. Default mode:\n"
    "topk.\n";

const char *kGradUsage =
    "usage: modrun grad PKG --weights W.safetensors --tokens T.safetensors\n"
    "                       --out G.safetensors\n"
    "\n"
    "T holds one I32 tensor 'tokens' of shape [B, seq_len + 1]: inputs\n"
    "t[:, :seq_len], targets t[:, 1:]. G gets 'loss.total', 'loss.ce' and\n"
    "'loss.aux' (F32 [1]) and 'grad.<name>' for every parameter. W may be a\n"
    "checkpoint of modrun train.\n";

const char *kTrainUsage =
    "usage: modrun train PKG --data FILE... --out CKPT.safetensors\n"
    "                    --steps N --batch B --lr LR (--seed S | --weights W)\n"
    "                    [--resume CKPT] [--warmup W] [--weight-decay WD]\n"
    "                    [--clip C] [--eval-every K] [--save-every K]\n"
    "                    [--stop-after K] [--log run.csv]\n"
    "\n"
    "Trains on the bytes of the FILEs (concatenated; the last 10% held out)\n"
    "with AdamW and a learning rate warmed up linearly over W steps (default\n"
    "N/10, at most 100) then decayed by a cosine to LR/10 at step N.\n"
    "Defaults: --weight-decay 0.1, --clip 1.0 (0 disables), --save-every: the\n"
    "eval interval, else 100. The checkpoint (weights, AdamW moments, step,\n"
    "data position) is written at every save and at the end. --eval-every K\n"
    "reports the mean held-out cross-entropy every K steps. --stop-after K\n"
    "ends after step K of the N-step schedule. --resume CKPT continues a run\n"
    "exactly; the settings default to the checkpoint's.\n";

const char *kInfoUsage = "usage: modrun info PKG\n"
                         "\n"
                         "Prints the package's layers, parameters and "
                         "workspace size.\n";

const char *kTokenizeUsage =
    "usage: modrun tokenize FILE... --seq-len S [--batch B] [--offset N]\n"
    "                       --out T.safetensors\n"
    "\n"
    "Byte-level tokenizer (token = byte value, vocab 256): reads the FILEs'\n"
    "bytes concatenated in the order given and writes one I32 tensor 'tokens'\n"
    "of shape [B, S]: B consecutive windows of S bytes starting at byte\n"
    "offset N. Defaults: B = 1, N = 0. The corpus must hold N + B*S bytes.\n";

const char *kShowUsage =
    "usage: modrun show FILE.safetensors\n"
    "\n"
    "Lists the file's metadata and, one line per tensor: name, dtype, shape\n"
    "and the mean of its values (with min and max for I32 tensors; the mean\n"
    "of a 'routed.<l>' mask is the fraction of tokens routed).\n";

/// A mistake in the command line: exit 2 with the command's usage.
struct UsageError {
  std::string message;
  const char *usage;
};

/// Positional arguments plus --key value options of one subcommand.
struct Args {
  std::string pkg; ///< the first positional argument
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  /// Values of the list options (`lists` of parseArgs), in order.
  std::map<std::string, std::vector<std::string>> listValues;
  bool help = false;

  std::string require(const std::string &key, const char *usage) const {
    auto it = options.find(key);
    if (it == options.end())
      throw UsageError{fmt::format("missing --{}", key), usage};
    return it->second;
  }
};

/// Parses `argv`. `maxPositional` bounds the positional arguments (0: any
/// number); `missing` is the message when there is none.
/// Options named in `lists` take every following argument up to the next
/// option ("--data a.txt b.txt") and may repeat.
Args parseArgs(int argc, char **argv, const std::vector<std::string> &known,
               const char *usage, size_t maxPositional = 1,
               const char *missing = "missing package directory PKG",
               const std::vector<std::string> &lists = {}) {
  Args args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      args.help = true;
      return args;
    }
    if (a.rfind("--", 0) == 0) {
      std::string key = a.substr(2), value;
      size_t eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else {
        if (i + 1 >= argc)
          throw UsageError{fmt::format("option --{} needs a value", key),
                           usage};
        value = argv[++i];
      }
      if (std::find(known.begin(), known.end(), key) == known.end() &&
          std::find(lists.begin(), lists.end(), key) == lists.end())
        throw UsageError{fmt::format("unknown option --{}", key), usage};
      if (std::find(lists.begin(), lists.end(), key) != lists.end()) {
        std::vector<std::string> &values = args.listValues[key];
        if (eq != std::string::npos) {
          values.push_back(value);
          continue;
        }
        --i; // the value was taken above; collect it again with the rest
        size_t before = values.size();
        while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0)
          values.push_back(argv[++i]);
        if (values.size() == before)
          throw UsageError{fmt::format("option --{} needs a value", key),
                           usage};
        continue;
      }
      if (args.options.count(key))
        throw UsageError{fmt::format("option --{} given twice", key), usage};
      args.options[key] = value;
      continue;
    }
    if (maxPositional && args.positional.size() >= maxPositional)
      throw UsageError{fmt::format("unexpected argument '{}'", a), usage};
    args.positional.push_back(a);
  }
  if (args.positional.empty())
    throw UsageError{missing, usage};
  args.pkg = args.positional.front();
  return args;
}

/// Parses the value of option --`key` as a decimal integer >= `minimum`.
uint64_t parseUnsigned(const std::string &key, const std::string &text,
                       const char *usage, uint64_t minimum = 0) {
  const char *what =
      minimum == 0 ? "a non-negative integer" : "a positive integer";
  if (text.empty() || text[0] == '-' || text[0] == '+')
    throw UsageError{fmt::format("--{} must be {}, got '{}'", key, what, text),
                     usage};
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    throw UsageError{
        fmt::format("--{} must be {} below 2^64, got '{}'", key, what, text),
        usage};
  if (v < minimum)
    throw UsageError{fmt::format("--{} must be {}, got '{}'", key, what, text),
                     usage};
  return v;
}

uint64_t parseSeed(const std::string &text) {
  return parseUnsigned("seed", text, kInitUsage);
}

int runInit(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"seed", "out"}, kInitUsage);
  if (args.help) {
    std::fputs(kInitUsage, stdout);
    return 0;
  }
  uint64_t seed = parseSeed(args.require("seed", kInitUsage));
  std::string out = args.require("out", kInitUsage);
  Package pkg = Package::open(args.pkg);
  TensorMap weights = pkg.initWeights(seed);
  weights.metadata["modrun.seed"] = std::to_string(seed);
  weights.save(out);
  return 0;
}

int runForward(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"weights", "tokens", "out", "mode"},
                        kForwardUsage);
  if (args.help) {
    std::fputs(kForwardUsage, stdout);
    return 0;
  }
  std::string weightsPath = args.require("weights", kForwardUsage);
  std::string tokensPath = args.require("tokens", kForwardUsage);
  std::string out = args.require("out", kForwardUsage);
  RouteMode mode = RouteMode::TopK;
  if (args.options.count("mode")) {
    const std::string &m = args.options["mode"];
    if (m == "topk")
      mode = RouteMode::TopK;
    else if (m == "causal")
      mode = RouteMode::Causal;
    else
      throw UsageError{
          fmt::format("--mode must be topk or causal, got '{}'", m),
          kForwardUsage};
  }

  Package pkg = Package::open(args.pkg);
  const Manifest &man = pkg.manifest();
  TensorMap weights = loadWeights(weightsPath);
  try {
    pkg.checkWeights(weights);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", weightsPath, e.what()));
  }
  TensorMap tokenFile = TensorMap::load(tokensPath);
  const Tensor *tok = tokenFile.find("tokens");
  if (!tok)
    throw Error(fmt::format("{}: no tensor 'tokens' (expected I32 [B, {}])",
                            tokensPath, man.seqLen));
  if (tok->dtype != DType::I32 || tok->shape.size() != 2 ||
      tok->shape[1] != man.seqLen || tok->shape[0] < 1)
    throw Error(fmt::format("{}: tensor 'tokens' must be I32 [B, seq_len] = "
                            "[B, {}] with B >= 1, got {} {}",
                            tokensPath, man.seqLen, dtypeName(tok->dtype),
                            shapeString(tok->shape)));
  int64_t batch = tok->shape[0];
  std::vector<int32_t> tokens(tok->i32(), tok->i32() + tok->numel());
  ForwardResult r;
  try {
    r = pkg.forward(weights, tokens, batch, mode);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", tokensPath, e.what()));
  }

  TensorMap outMap;
  outMap.metadata["modrun.mode"] =
      mode == RouteMode::Causal ? "causal" : "topk";
  Tensor logits = Tensor::zeros(DType::F32, {r.batch, r.seqLen, r.vocab});
  std::memcpy(logits.data.data(), r.logits.data(), logits.byteSize());
  outMap.insert("logits", std::move(logits));
  for (size_t i = 0; i < man.routedLayers.size(); ++i) {
    Tensor mask = Tensor::zeros(DType::I32, {r.batch, r.seqLen});
    std::memcpy(mask.data.data(), r.routed[i].data(), mask.byteSize());
    outMap.insert(fmt::format("routed.{}", man.routedLayers[i]),
                  std::move(mask));
  }
  outMap.save(out);
  return 0;
}

int runGrad(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"weights", "tokens", "out"}, kGradUsage);
  if (args.help) {
    std::fputs(kGradUsage, stdout);
    return 0;
  }
  std::string weightsPath = args.require("weights", kGradUsage);
  std::string tokensPath = args.require("tokens", kGradUsage);
  std::string out = args.require("out", kGradUsage);

  Package pkg = Package::open(args.pkg);
  const Manifest &man = pkg.manifest();
  if (!man.supportsTraining)
    throw Error(fmt::format("{}: this package has no training entry points "
                            "(modc_grad, modc_adamw); recompile with this "
                            "modc",
                            args.pkg));
  TensorMap weights = loadWeights(weightsPath);
  try {
    pkg.checkWeights(weights);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", weightsPath, e.what()));
  }
  TensorMap tokenFile = TensorMap::load(tokensPath);
  const Tensor *tok = tokenFile.find("tokens");
  int64_t row = man.seqLen + 1;
  if (!tok)
    throw Error(fmt::format("{}: no tensor 'tokens' (expected I32 [B, "
                            "seq_len + 1] = [B, {}])",
                            tokensPath, row));
  if (tok->dtype != DType::I32 || tok->shape.size() != 2 ||
      tok->shape[1] != row || tok->shape[0] < 1)
    throw Error(fmt::format("{}: tensor 'tokens' must be I32 [B, seq_len + "
                            "1] = [B, {}] with B >= 1 (inputs t[:, :{}], "
                            "targets t[:, 1:]), got {} {}",
                            tokensPath, row, man.seqLen, dtypeName(tok->dtype),
                            shapeString(tok->shape)));
  std::vector<int32_t> tokens(tok->i32(), tok->i32() + tok->numel());
  GradResult r;
  try {
    r = pkg.grad(weights, tokens, tok->shape[0]);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", tokensPath, e.what()));
  }
  TensorMap outMap;
  auto scalar = [&](const char *name, double value) {
    Tensor t = Tensor::zeros(DType::F32, {1});
    t.f32()[0] = static_cast<float>(value);
    outMap.insert(name, std::move(t));
  };
  scalar("loss.total", r.losses.total);
  scalar("loss.ce", r.losses.ce);
  scalar("loss.aux", r.losses.aux);
  for (auto &[name, g] : r.grads)
    outMap.insert("grad." + name, std::move(g));
  outMap.save(out);
  return 0;
}

/// Parses --`key` as a finite number >= `minimum`.
double parseNumber(const std::string &key, const std::string &text,
                   const char *usage, double minimum, bool strict = false) {
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno || *end || !std::isfinite(v) || v < minimum ||
      (strict && v == minimum))
    throw UsageError{fmt::format("--{} must be a number {} {}, got '{}'", key,
                                 strict ? ">" : ">=", minimum, text),
                     usage};
  return v;
}

/// "1h02m", "3m07s", "12s".
std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600)
    return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60)
    return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

int runTrain(int argc, char **argv) {
  Args args = parseArgs(
      argc, argv,
      {"weights", "steps", "batch", "lr", "seed", "out", "eval-every", "log",
       "resume", "warmup", "weight-decay", "clip", "save-every", "stop-after"},
      kTrainUsage, /*maxPositional=*/1, "missing package directory PKG",
      /*lists=*/{"data"});
  if (args.help) {
    std::fputs(kTrainUsage, stdout);
    return 0;
  }
  const char *usage = kTrainUsage;
  auto has = [&](const char *key) { return args.options.count(key) > 0; };
  if (!args.listValues.count("data"))
    throw UsageError{"missing --data FILE...", usage};
  const std::vector<std::string> &dataFiles = args.listValues["data"];
  std::string out = args.require("out", usage);
  bool resume = has("resume");
  if (resume && has("weights"))
    throw UsageError{"--resume and --weights exclude each other (a "
                     "checkpoint holds its weights)",
                     usage};
  if (!resume) {
    for (const char *key : {"steps", "batch", "lr"})
      args.require(key, usage);
    if (!has("seed") && !has("weights"))
      throw UsageError{"missing --seed (or --weights) to initialise the "
                       "weights",
                       usage};
  }
  // Every value is checked before any file is opened.
  auto positive = [&](const char *key) -> std::optional<int64_t> {
    if (!has(key))
      return std::nullopt;
    return static_cast<int64_t>(std::min<uint64_t>(
        parseUnsigned(key, args.options[key], usage, 1), uint64_t(1) << 62));
  };
  auto number = [&](const char *key, bool strict) -> std::optional<double> {
    if (!has(key))
      return std::nullopt;
    return parseNumber(key, args.options[key], usage, 0, strict);
  };
  std::optional<int64_t> steps = positive("steps"),
                         batchOpt = positive("batch"),
                         evalEvery = positive("eval-every"),
                         saveEvery = positive("save-every"),
                         stopAfter = positive("stop-after"), warmup;
  std::optional<double> lr = number("lr", true),
                        weightDecay = number("weight-decay", false),
                        clip = number("clip", false);
  std::optional<uint64_t> seed;
  if (has("seed"))
    seed = parseUnsigned("seed", args.options["seed"], usage);
  if (has("warmup"))
    warmup = static_cast<int64_t>(std::min<uint64_t>(
        parseUnsigned("warmup", args.options["warmup"], usage), 1ull << 62));

  Package pkg = Package::open(args.pkg);
  const Manifest &man = pkg.manifest();
  if (!man.supportsTraining)
    throw Error(fmt::format("{}: this package has no training entry points "
                            "(modc_grad, modc_adamw); recompile with this "
                            "modc",
                            args.pkg));
  if (man.vocabSize < 256)
    throw Error(fmt::format("{}: modrun train reads byte-level text (tokens "
                            "0..255), but the model's vocab_size is {}",
                            args.pkg, man.vocabSize));

  TrainConfig config;
  TrainState state;
  int64_t batch = 0;
  std::optional<Checkpoint> ckpt;
  if (resume) {
    ckpt = loadCheckpoint(args.options["resume"], pkg);
    const CheckpointInfo &info = ckpt->info;
    config.steps = info.totalSteps;
    batch = info.batch;
    config.lr = info.lr;
    config.warmup = info.warmup;
    config.adamw = info.adamw;
    config.seed = info.seed;
  }
  // Explicit settings override the checkpoint's, with a note: the run then
  // no longer matches an uninterrupted one.
  std::vector<std::string> changed;
  auto apply = [&](const char *key, const auto &given, auto &setting) {
    if (!given)
      return;
    if (ckpt && *given != setting)
      changed.push_back(fmt::format("--{} {} (checkpoint: {})", key,
                                    args.options[key], setting));
    setting = *given;
  };
  apply("steps", steps, config.steps);
  apply("batch", batchOpt, batch);
  apply("lr", lr, config.lr);
  apply("seed", seed, config.seed);
  apply("weight-decay", weightDecay, config.adamw.weightDecay);
  apply("clip", clip, config.adamw.clipNorm);
  if (!ckpt)
    config.warmup = std::min<int64_t>(100, config.steps / 10);
  apply("warmup", warmup, config.warmup);
  config.evalEvery = evalEvery.value_or(0);
  config.saveEvery = saveEvery.value_or(0);
  config.stopAfter = stopAfter.value_or(0);
  config.outPath = out;
  if (has("log"))
    config.logPath = args.options["log"];

  Corpus corpus = Corpus::load(dataFiles, man.seqLen, batch);
  if (ckpt) {
    const CheckpointInfo &info = ckpt->info;
    if (info.dataBytes != corpus.size() || info.dataHash != corpus.hash())
      changed.push_back(fmt::format(
          "the data ({} bytes; checkpoint: {} "
          "bytes{})",
          corpus.size(), info.dataBytes,
          info.dataBytes == corpus.size() ? ", other content" : ""));
    if (info.step >= config.steps)
      throw Error(fmt::format("{}: checkpoint is at step {}, so --steps {} "
                              "leaves nothing to do",
                              args.options["resume"], info.step, config.steps));
    if (info.dataPosition >= corpus.trainBytes())
      throw Error(fmt::format("{}: data position {} is past the end of the "
                              "training split ({} bytes); resume with the "
                              "data it was trained on",
                              args.options["resume"], info.dataPosition,
                              corpus.trainBytes()));
    for (const std::string &c : changed)
      fmt::print(stderr,
                 "modrun: note: resuming with {}; the run will not "
                 "repeat an uninterrupted one\n",
                 c);
    state.weights = std::move(ckpt->weights);
    state.optimizer = std::move(ckpt->optimizer);
    state.dataPosition = info.dataPosition;
  } else {
    if (has("weights")) {
      state.weights = loadWeights(args.options["weights"]);
      try {
        pkg.checkWeights(state.weights);
      } catch (const Error &e) {
        throw Error(fmt::format("{}: {}", args.options["weights"], e.what()));
      }
      state.weights.metadata.clear();
    } else {
      state.weights = pkg.initWeights(config.seed);
    }
    state.optimizer = OptimizerState::zeros(man);
  }

  int64_t last = config.stopAfter > 0 ? std::min(config.stopAfter, config.steps)
                                      : config.steps;
  fmt::print(stderr,
             "modrun: training {} (seq_len {}) on {} bytes ({} held out), "
             "batch {}, steps {}..{} of {}\n",
             man.model.value("name", std::string("?")), man.seqLen,
             corpus.size(), corpus.heldOutBytes(), batch,
             state.optimizer.step + 1, last, config.steps);

  // Progress: one line rewritten in place on a terminal, otherwise a line
  // every ~5% of the run.
  bool tty = ::isatty(STDERR_FILENO) == 1;
  int64_t firstStep = state.optimizer.step + 1;
  int64_t every = std::max<int64_t>(1, (last - firstStep + 1) / 20);
  double elapsed = 0;
  size_t lastWidth = 0;
  auto onStep = [&](const StepRecord &r) {
    elapsed += r.seconds;
    double perStep = elapsed / static_cast<double>(r.step - firstStep + 1);
    std::string line = fmt::format(
        "step {}/{}  loss {:.4f}  lr {:.3g}  {:.0f} tok/s  ETA {}", r.step,
        r.totalSteps, r.losses.total, r.lr,
        static_cast<double>(batch * man.seqLen) / std::max(perStep, 1e-9),
        formatDuration(perStep * static_cast<double>(r.lastStep - r.step)));
    if (r.evalLoss)
      line += fmt::format("  eval {:.4f}", *r.evalLoss);
    bool show =
        r.evalLoss || r.step == r.lastStep || (r.step - firstStep) % every == 0;
    if (tty) {
      std::string pad(lastWidth > line.size() ? lastWidth - line.size() : 0,
                      ' ');
      fmt::print(stderr, "\r{}{}{}", line, pad, r.evalLoss ? "\n" : "");
      lastWidth = r.evalLoss ? 0 : line.size();
    } else if (show) {
      fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
  };
  try {
    train(pkg, corpus, config, state, onStep);
  } catch (...) {
    if (tty && lastWidth)
      std::fputc('\n', stderr);
    throw;
  }
  if (tty && lastWidth)
    std::fputc('\n', stderr);
  fmt::print(stderr, "modrun: step {} checkpoint written to {} in {}\n", last,
             out, formatDuration(elapsed));
  return 0;
}

int runInfo(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {}, kInfoUsage);
  if (args.help) {
    std::fputs(kInfoUsage, stdout);
    return 0;
  }
  Package pkg = Package::open(args.pkg);
  const Manifest &m = pkg.manifest();
  std::string name = m.model.value("name", std::string("(unnamed)"));
  fmt::print("package:   {}\n", pkg.directory());
  fmt::print("model:     {}\n", name);
  fmt::print("target:    {} (abi {}, compiled by modc {})\n", m.target,
             m.abiVersion, m.compilerVersion);
  fmt::print("shape:     seq_len {}, vocab {}, d_model {}\n", m.seqLen,
             m.vocabSize, m.dModel);
  fmt::print("layers:    {} ({} routed)\n", m.layers.size(),
             m.routedLayers.size());
  for (const LayerInfo &l : m.layers)
    fmt::print("  layer {:>3}  {:<6}  capacity {}/{}\n", l.index,
               l.routed ? "routed" : "dense", l.capacity, m.seqLen);
  uint64_t elems = 0;
  for (const ParamInfo &p : m.params) {
    uint64_t n = 1;
    for (int64_t d : p.shape)
      n *= static_cast<uint64_t>(d);
    elems += n;
  }
  fmt::print("params:    {} tensors, {} values, {} bytes (F32)\n",
             m.params.size(), elems, elems * 4);
  fmt::print("workspace: {} bytes per sequence\n", m.workspaceBytesPerSequence);
  fmt::print("modes:     topk{}\n", m.supportsCausal ? ", causal" : "");
  if (m.supportsTraining)
    fmt::print("training:  grad + adamw, {} bytes of workspace per sequence\n",
               m.gradWorkspaceBytesPerSequence);
  else
    fmt::print("training:  no (inference-only package)\n");
  return 0;
}

/// Appends up to `limit - corpus.size()` bytes of `path` to `corpus` and
/// returns the file's size in bytes. Throws Error naming the file when it
/// cannot be read or is empty.
uint64_t readCorpusFile(const std::string &path, std::string &corpus,
                        uint64_t limit) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: is a directory, not a text file", path));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  uint64_t size = 0;
  std::vector<char> buffer(1 << 16);
  while (true) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    std::streamsize got = in.gcount();
    if (got > 0) {
      uint64_t room = limit > corpus.size() ? limit - corpus.size() : 0;
      corpus.append(buffer.data(), static_cast<size_t>(std::min<uint64_t>(
                                       room, static_cast<uint64_t>(got))));
      size += static_cast<uint64_t>(got);
    }
    if (in.eof())
      break;
    if (!in)
      throw Error(fmt::format("{}: read failed after {} bytes: {}", path, size,
                              errno ? std::strerror(errno) : "I/O error"));
  }
  if (size == 0)
    throw Error(fmt::format("{}: file is empty (no bytes to tokenize)", path));
  return size;
}

int runTokenize(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"seq-len", "batch", "offset", "out"},
                        kTokenizeUsage, /*maxPositional=*/0,
                        "missing input FILE (one or more text files)");
  if (args.help) {
    std::fputs(kTokenizeUsage, stdout);
    return 0;
  }
  uint64_t seqLen = parseUnsigned(
      "seq-len", args.require("seq-len", kTokenizeUsage), kTokenizeUsage, 1);
  uint64_t batch = 1, offset = 0;
  if (args.options.count("batch"))
    batch = parseUnsigned("batch", args.options["batch"], kTokenizeUsage, 1);
  if (args.options.count("offset"))
    offset = parseUnsigned("offset", args.options["offset"], kTokenizeUsage);
  std::string out = args.require("out", kTokenizeUsage);

  uint64_t windowBytes = 0, needed = 0;
  if (__builtin_mul_overflow(batch, seqLen, &windowBytes) ||
      __builtin_add_overflow(offset, windowBytes, &needed) ||
      windowBytes > (uint64_t(1) << 40))
    throw UsageError{fmt::format("--batch {} times --seq-len {} is too large",
                                 batch, seqLen),
                     kTokenizeUsage};

  std::string corpus;
  uint64_t total = 0;
  for (const std::string &file : args.positional)
    total += readCorpusFile(file, corpus, needed);
  if (total < needed) {
    std::string files =
        args.positional.size() == 1
            ? args.positional.front()
            : fmt::format("the {} input files", args.positional.size());
    throw Error(fmt::format(
        "{} hold{} {} bytes; --batch {} x --seq-len {}{} needs {} bytes", files,
        args.positional.size() == 1 ? "s" : "", total, batch, seqLen,
        offset ? fmt::format(" from --offset {}", offset) : std::string(),
        needed));
  }

  Tensor tok = Tensor::zeros(
      DType::I32, {static_cast<int64_t>(batch), static_cast<int64_t>(seqLen)});
  int32_t *dst = tok.i32();
  for (uint64_t i = 0; i < windowBytes; ++i)
    dst[i] = static_cast<unsigned char>(corpus[offset + i]);
  TensorMap map;
  map.insert("tokens", std::move(tok));
  map.metadata["modrun.tokenizer"] = "bytes";
  map.metadata["modrun.offset"] = std::to_string(offset);
  std::string sources;
  for (const std::string &file : args.positional)
    sources += (sources.empty() ? "" : " ") + file;
  map.metadata["modrun.sources"] = sources;
  map.save(out);
  return 0;
}

int runShow(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {}, kShowUsage, /*maxPositional=*/1,
                        "missing safetensors FILE");
  if (args.help) {
    std::fputs(kShowUsage, stdout);
    return 0;
  }
  TensorMap map = TensorMap::load(args.pkg);
  fmt::print("{}: {} tensor{}\n", args.pkg, map.size(),
             map.size() == 1 ? "" : "s");
  for (const auto &[key, value] : map.metadata)
    fmt::print("  metadata {} = {}\n", key, value);
  size_t nameWidth = 0, shapeWidth = 0;
  for (const auto &[name, t] : map) {
    nameWidth = std::max(nameWidth, name.size());
    shapeWidth = std::max(shapeWidth, shapeString(t.shape).size());
  }
  for (const auto &[name, t] : map) {
    int64_t n = t.numel();
    std::string stats;
    if (n == 0) {
      stats = "(empty)";
    } else if (t.dtype == DType::I32) {
      const int32_t *v = t.i32();
      double sum = 0;
      int32_t lo = v[0], hi = v[0];
      for (int64_t i = 0; i < n; ++i) {
        sum += v[i];
        lo = std::min(lo, v[i]);
        hi = std::max(hi, v[i]);
      }
      stats = fmt::format("mean {:.6g}  min {}  max {}", sum / n, lo, hi);
    } else {
      const float *v = t.f32();
      double sum = 0;
      for (int64_t i = 0; i < n; ++i)
        sum += v[i];
      stats = fmt::format("mean {:.6g}", sum / n);
    }
    fmt::print("  {:<{}}  {}  {:<{}}  {}\n", name, nameWidth,
               dtypeName(t.dtype), shapeString(t.shape), shapeWidth, stats);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fputs(kMainUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kMainUsage, stdout);
    return 0;
  }
  try {
    if (cmd == "init")
      return runInit(argc - 2, argv + 2);
    if (cmd == "forward")
      return runForward(argc - 2, argv + 2);
    if (cmd == "grad")
      return runGrad(argc - 2, argv + 2);
    if (cmd == "train")
      return runTrain(argc - 2, argv + 2);
    if (cmd == "info")
      return runInfo(argc - 2, argv + 2);
    if (cmd == "tokenize")
      return runTokenize(argc - 2, argv + 2);
    if (cmd == "show")
      return runShow(argc - 2, argv + 2);
    fmt::print(stderr, "modrun: unknown command '{}'\n\n{}", cmd, kMainUsage);
    return 2;
  } catch (const UsageError &e) {
    fmt::print(stderr, "modrun: {}\n\n{}", e.message, e.usage);
    return 2;
  } catch (const Error &e) {
    fmt::print(stderr, "modrun: error: {}\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    // Not expected (bad_alloc and the like), but never a crash.
    fmt::print(stderr, "modrun: error: {}\n", e.what());
    return 1;
  }
}
