//===- modrun.cpp - Command-line front end of the modc runtime -----------===//
//
// modrun init | forward | grad | train | sample | eval | info: thin wrappers
// over modrt::Package, modrt::train and modrt::generate so that a compiled
// package can be used, trained and sampled from the shell; modrun
// tokenize | show: the byte-level tokenizer of docs/model-format.md section 6
// and a safetensors summary. Usage errors exit 2, runtime errors
// (modrt::Error) print "modrun: error: <msg>" and exit 1. Outputs are written
// atomically, so a failed run leaves no file behind.
//
//===----------------------------------------------------------------------===//
#include "modrt/Comm.h"
#include "modrt/Error.h"
#include "modrt/Generate.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"
#include "modrt/Training.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <signal.h>
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
    "  sample   generate text from a prompt (causal routing, KV cache)\n"
    "  eval     held-out loss in topk and causal mode, router agreement\n"
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
    "                    [--stop-after K] [--log run.csv] [--shards P]\n"
    "                    [--comm auto|single|mpi|nccl] [--comm-timeout SEC]\n"
    "                    [--rank-log DIR]\n"
    "\n"
    "Trains on the bytes of the FILEs (concatenated; the last 10% held out)\n"
    "with AdamW and a learning rate warmed up linearly over W steps (default\n"
    "N/10, at most 100) then decayed by a cosine to LR/10 at step N.\n"
    "Defaults: --weight-decay 0.1, --clip 1.0 (0 disables), --save-every: the\n"
    "eval interval, else 100. The checkpoint (weights, AdamW moments, step,\n"
    "data position) is written at every save and at the end. --eval-every K\n"
    "reports the mean held-out cross-entropy every K steps. --stop-after K\n"
    "ends after step K of the N-step schedule. --resume CKPT continues a run\n"
    "exactly; the settings default to the checkpoint's.\n"
    "\n"
    "Data-parallel (docs/distributed.md): started by mpirun or srun, each\n"
    "rank trains on its part of every batch of B and the gradients are\n"
    "summed in rank order; --comm picks the backend (auto: mpi when launched\n"
    "as several ranks), --comm-timeout how long a rank waits for the others\n"
    "(default 600 s), --rank-log DIR where ranks other than 0 write their\n"
    "progress (DIR/rank-R.log). --shards P in one process splits each batch\n"
    "as P ranks would, for the same result bit for bit.\n";

const char *kSampleUsage =
    "usage: modrun sample PKG --weights W (--prompt TEXT | --prompt-file F |\n"
    "                     --batch-file F) --max-new N [--temperature T]\n"
    "                     [--top-k K] [--top-p P] [--seed S]\n"
    "\n"
    "Generates up to N bytes after the prompt (byte-level tokens), one token\n"
    "at a time with the package's KV cache and causal routing, and streams\n"
    "them to stdout (then a newline). --prompt-file takes the file's bytes\n"
    "as they are. --batch-file runs one prompt per line (the line without\n"
    "its newline) as one batch and prints each output at the end under a\n"
    "'=== F line L ===' label. Prompt plus generated text must fit the\n"
    "model's context (seq_len): a larger N is clamped, with a note. Defaults:\n"
    "--temperature 1 (0 = greedy), --top-k 0 (all tokens), --top-p 1 (all),\n"
    "--seed 0. W may be a checkpoint of modrun train.\n";

const char *kEvalUsage =
    "usage: modrun eval PKG --weights W --data FILE... [--batch B]\n"
    "                   [--batches N]\n"
    "\n"
    "Evaluates on the held-out part of the FILEs, split as modrun train\n"
    "splits it with the same --batch (last 10%, at least one batch): up to N\n"
    "batches of B windows of seq_len + 1 bytes. Prints the mean next-token\n"
    "cross-entropy with top-k routing (training) and with causal routing\n"
    "(sampling), and for each routed layer how often the causal router's\n"
    "decision agrees with top-k membership on the top-k pass. Defaults:\n"
    "--batch 8, --batches 8. W may be a checkpoint of modrun train.\n";

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

/// The communicator of a data-parallel `train` (docs/distributed.md), so
/// that main can end every rank when one fails; null otherwise.
std::unique_ptr<Communicator> gComm;
/// Where a rank other than 0 writes its progress and errors (--rank-log);
/// null: nowhere (its errors still go to stderr).
std::FILE *gRankLog = nullptr;

/// A mistake in the command line: exit 2 with the command's usage.
struct UsageError {
  std::string message;
  const char *usage;
};

/// Whether paths `a` and `b` name one file: the same existing file by any
/// path (links included), or the same path once normalised.
bool sameFile(const std::string &a, const std::string &b) {
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec))
    return std::filesystem::equivalent(a, b, ec);
  auto normal = [&](const std::string &p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec),
                                             ec);
  };
  return normal(a) == normal(b);
}

/// Refuses an output that would overwrite an input: `out` (given as
/// `outFlag`) against each (flag, path) of `inputs`. Checked before any
/// work, so the input is never touched.
void refuseOverwritingInput(
    const std::string &outFlag, const std::string &out,
    const std::vector<std::pair<std::string, std::string>> &inputs) {
  for (const auto &[flag, path] : inputs)
    if (sameFile(out, path))
      throw Error(fmt::format("{} {} is the same file as {} {}: writing it "
                              "would destroy that file; choose another {}",
                              outFlag, out, flag, path, outFlag));
}

/// Refuses an output file whose directory does not exist, before any work
/// (a training run would otherwise fail only at its first save).
void requireOutputDirectory(const std::string &outFlag,
                            const std::string &out) {
  std::filesystem::path parent = std::filesystem::path(out).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw Error(fmt::format("{} {}: directory {} does not exist", outFlag, out,
                            parent.string()));
}

/// Removes the temporary files `OUT.tmp.PID` that a process writing `out`
/// left behind when it was killed (a file system without O_TMPFILE names
/// them while writing), when PID no longer runs; says so for each.
void removeStaleTemporaries(const std::string &out) {
  namespace fs = std::filesystem;
  fs::path outPath(out);
  fs::path dir = outPath.parent_path().empty() ? fs::path(".")
                                               : outPath.parent_path();
  const std::string prefix = outPath.filename().string() + ".tmp.";
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size())
      continue;
    std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos ||
        digits.size() > 9)
      continue;
    pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue; // that process still runs (or is not ours to judge)
    if (fs::remove(e.path(), ec))
      fmt::print(stderr,
                 "modrun: removed {}, a temporary checkpoint of process {}, "
                 "which no longer runs\n",
                 e.path().string(), pid);
  }
}

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

/// Parses the value of option --`key` as a decimal integer in [`minimum`,
/// `maximum`]. A value past `maximum` is refused, never capped: a capped
/// value would run another job than the one asked for (docs/errors.md).
uint64_t parseUnsigned(const std::string &key, const std::string &text,
                       const char *usage, uint64_t minimum = 0,
                       uint64_t maximum = UINT64_MAX) {
  const char *what =
      minimum == 0 ? "a non-negative integer" : "a positive integer";
  if (text.empty() || text[0] == '-' || text[0] == '+')
    throw UsageError{fmt::format("--{} must be {}, got '{}'", key, what, text),
                     usage};
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  bool tooLarge = errno == ERANGE || v > maximum;
  if (*end != '\0' || (errno != 0 && errno != ERANGE) ||
      (tooLarge && maximum == UINT64_MAX))
    throw UsageError{
        fmt::format("--{} must be {} below 2^64, got '{}'", key, what, text),
        usage};
  if (tooLarge)
    throw UsageError{fmt::format("--{} must be an integer in [{}, {}], got "
                                 "'{}'",
                                 key, minimum, maximum, text),
                     usage};
  if (v < minimum)
    throw UsageError{fmt::format("--{} must be {}, got '{}'", key, what, text),
                     usage};
  return v;
}

/// The largest --batch of train and eval: B x (seq_len + 1) bytes per batch
/// stay far from overflow for any seq_len a model may have (at most 2^20).
constexpr uint64_t kMaxBatch = uint64_t(1) << 20;
/// The largest step count (--steps, --warmup, ...): steps are int64_t, and
/// 2^62 leaves room for the arithmetic on them.
constexpr uint64_t kMaxSteps = uint64_t(1) << 62;

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
  refuseOverwritingInput("--out", out,
                         {{"PKG/manifest.json", args.pkg + "/manifest.json"},
                          {"PKG/libmodel.so", args.pkg + "/libmodel.so"}});
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
  refuseOverwritingInput("--out", out,
                         {{"--weights", weightsPath}, {"--tokens", tokensPath}});
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
  refuseOverwritingInput("--out", out,
                         {{"--weights", weightsPath}, {"--tokens", tokensPath}});

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
       "resume", "warmup", "weight-decay", "clip", "save-every", "stop-after",
       "shards", "comm", "comm-timeout", "rank-log"},
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
  {
    // --out may be --resume's checkpoint (updated in place), not the data.
    std::vector<std::pair<std::string, std::string>> inputs;
    for (const std::string &file : dataFiles)
      inputs.push_back({"--data", file});
    refuseOverwritingInput("--out", out, inputs);
    requireOutputDirectory("--out", out);
    // Only rank 0 writes the checkpoint, and only it may judge temporaries
    // (another machine's process ids mean nothing here).
    std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
    if (!launch || launch->rank == 0)
      removeStaleTemporaries(out);
    if (has("log")) {
      inputs.push_back({"--out", out});
      refuseOverwritingInput("--log", args.options["log"], inputs);
      requireOutputDirectory("--log", args.options["log"]);
    }
  }
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
    uint64_t maximum = std::string(key) == "batch" ? kMaxBatch : kMaxSteps;
    return static_cast<int64_t>(
        parseUnsigned(key, args.options[key], usage, 1, maximum));
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
    warmup = static_cast<int64_t>(
        parseUnsigned("warmup", args.options["warmup"], usage, 0, kMaxSteps));
  std::optional<int64_t> shards = positive("shards");
  CommOptions commOptions;
  if (has("comm")) {
    commOptions.backend = args.options["comm"];
    if (commOptions.backend != "auto" && commOptions.backend != "single" &&
        commOptions.backend != "mpi" && commOptions.backend != "nccl")
      throw UsageError{fmt::format("--comm must be auto, single, mpi or nccl, "
                                   "got '{}'",
                                   commOptions.backend),
                       usage};
  }
  if (has("comm-timeout"))
    commOptions.timeoutSeconds =
        parseNumber("comm-timeout", args.options["comm-timeout"], usage, 0,
                    /*strict=*/true);

  if (std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
      launch && launch->size > 1 && shards && *shards > 1)
    throw UsageError{fmt::format("--shards is for one process; the {} ranks "
                                 "of this job split each batch {} ways already",
                                 launch->size, launch->size),
                     usage};

  // The job: from here on, an error on one rank ends every rank (main).
  gComm = Communicator::connect(commOptions);
  const int rank = gComm->rank(), ranks = gComm->size();
  if (has("rank-log") && rank > 0) {
    std::string path = fmt::format("{}/rank-{}.log", args.options["rank-log"],
                                   rank);
    errno = 0;
    gRankLog = std::fopen(path.c_str(), "w");
    if (!gRankLog)
      throw Error(fmt::format("--rank-log {}: cannot write {}: {}",
                              args.options["rank-log"], path,
                              errno ? std::strerror(errno) : "unknown error"));
  }
  // Rank 0 reports on stderr; the others into their --rank-log file.
  std::FILE *report = rank == 0 ? stderr : gRankLog;
  auto say = [&](const std::string &text) {
    if (report) {
      std::fputs(text.c_str(), report);
      std::fflush(report);
    }
  };

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
  config.comm = gComm.get();
  config.shards = shards.value_or(1);

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
      say(fmt::format("modrun: note: resuming with {}; the run will not "
                      "repeat an uninterrupted one\n",
                      c));
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
  std::string parts;
  if (ranks > 1 || config.shards > 1) {
    int64_t n = ranks > 1 ? ranks : config.shards;
    // train refuses a batch smaller than n, once the ranks agree on it.
    BatchSplit split = BatchSplit::of(std::max(batch, n), n);
    bool even = split.counts.front() == split.counts.back();
    parts = fmt::format(" ({} {} of {}{} sequence{}{})", n,
                        ranks > 1 ? "ranks" : "shards", split.counts.front(),
                        even ? "" : fmt::format("..{}", split.counts.back()),
                        even && split.counts.front() == 1 ? "" : "s",
                        ranks > 1 ? fmt::format(", {} backend",
                                                gComm->backend())
                                  : "");
  }
  say(fmt::format("modrun: training {} (seq_len {}) on {} bytes ({} held "
                  "out), batch {}{}, steps {}..{} of {}\n",
                  man.model.value("name", std::string("?")), man.seqLen,
                  corpus.size(), corpus.heldOutBytes(), batch, parts,
                  state.optimizer.step + 1, last, config.steps));

  // Progress: one line rewritten in place on a terminal, otherwise a line
  // every ~5% of the run.
  bool tty = rank == 0 && ::isatty(STDERR_FILENO) == 1;
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
      say(line + "\n");
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
  say(fmt::format("modrun: step {} checkpoint {} {} in {}\n", last,
                  rank == 0 ? "written to" : "written by rank 0 to", out,
                  formatDuration(elapsed)));
  return 0;
}

/// Bytes of a prompt file (exactly as stored). Throws Error naming it.
std::string readPromptFile(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: is a directory, not a prompt file", path));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    throw Error(fmt::format("{}: read failed", path));
  return text;
}

/// Loads weights (or a checkpoint's) and checks them against the package,
/// naming the file in errors.
TensorMap loadCheckedWeights(const Package &pkg, const std::string &path) {
  TensorMap weights = loadWeights(path);
  try {
    pkg.checkWeights(weights);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  return weights;
}

int runSample(int argc, char **argv) {
  const char *usage = kSampleUsage;
  Args args = parseArgs(argc, argv,
                        {"weights", "prompt", "prompt-file", "batch-file",
                         "max-new", "temperature", "top-k", "top-p", "seed"},
                        usage);
  if (args.help) {
    std::fputs(usage, stdout);
    return 0;
  }
  auto has = [&](const char *key) { return args.options.count(key) > 0; };
  std::string weightsPath = args.require("weights", usage);
  int sources = has("prompt") + has("prompt-file") + has("batch-file");
  if (sources != 1)
    throw UsageError{sources == 0 ? "missing --prompt, --prompt-file or "
                                    "--batch-file"
                                  : "give one of --prompt, --prompt-file and "
                                    "--batch-file",
                     usage};
  int maxNew = static_cast<int>(parseUnsigned(
      "max-new", args.require("max-new", usage), usage, 0, INT_MAX));
  SamplingConfig config;
  if (has("temperature"))
    config.temperature =
        parseNumber("temperature", args.options["temperature"], usage, 0);
  if (has("top-k"))
    config.topK = static_cast<int>(
        parseUnsigned("top-k", args.options["top-k"], usage, 0, INT_MAX));
  if (has("top-p")) {
    config.topP = parseNumber("top-p", args.options["top-p"], usage, 0,
                              /*strict=*/true);
    if (config.topP > 1)
      throw UsageError{fmt::format("--top-p must be in (0, 1], got '{}'",
                                   args.options["top-p"]),
                       usage};
  }
  if (has("seed"))
    config.seed = parseUnsigned("seed", args.options["seed"], usage);

  // Prompts and their names for messages.
  std::vector<std::string> prompts, labels;
  bool batchMode = has("batch-file");
  if (has("prompt")) {
    prompts.push_back(args.options["prompt"]);
    labels.push_back("--prompt");
  } else if (has("prompt-file")) {
    prompts.push_back(readPromptFile(args.options["prompt-file"]));
    labels.push_back(args.options["prompt-file"]);
  } else {
    const std::string &path = args.options["batch-file"];
    std::string text = readPromptFile(path);
    size_t start = 0, line = 1;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      std::string p = text.substr(
          start, end == std::string::npos ? std::string::npos : end - start);
      if (!p.empty() && p.back() == '\r')
        p.pop_back();
      prompts.push_back(p);
      labels.push_back(fmt::format("{} line {}", path, line));
      if (end == std::string::npos)
        break;
      start = end + 1;
      ++line;
    }
    if (prompts.empty())
      throw Error(fmt::format("{}: file is empty (one prompt per line)", path));
  }

  Package pkg = Package::open(args.pkg);
  const Manifest &man = pkg.manifest();
  pkg.requireDecode();
  // A prompt has at least one byte, so a one-token context never has room.
  if (maxNew > 0 && man.seqLen < 2)
    throw Error(fmt::format("{}: the model's context is 1 token (seq_len 1), "
                            "which any prompt fills: nothing can be "
                            "generated; compile the model with seq_len 2 or "
                            "more",
                            args.pkg));
  // Validate every prompt before loading weights or generating anything.
  for (size_t b = 0; b < prompts.size(); ++b) {
    tokenizePrompt(man, prompts[b], labels[b]);
    int64_t len = static_cast<int64_t>(prompts[b].size());
    if (maxNew > 0 && len >= man.seqLen)
      throw Error(fmt::format("{} is {} bytes and fills the model's context "
                              "of {} tokens (seq_len): no room to generate; "
                              "use at most {} bytes",
                              labels[b], len, man.seqLen, man.seqLen - 1));
  }
  for (size_t b = 0; b < prompts.size(); ++b) {
    int64_t room = man.seqLen - static_cast<int64_t>(prompts[b].size());
    if (maxNew > room)
      fmt::print(stderr,
                 "modrun: note: --max-new {} clamped to {} for {}: prompt "
                 "({} bytes) plus generated bytes must fit the model's "
                 "context (seq_len {})\n",
                 maxNew, room, labels[b], prompts[b].size(), man.seqLen);
  }
  TensorMap weights = loadCheckedWeights(pkg, weightsPath);

  auto start = std::chrono::steady_clock::now();
  uint64_t produced = 0;
  std::vector<std::string> out = generate(
      pkg, weights, prompts, maxNew, config,
      [&](size_t, const std::string &piece) {
        ++produced;
        if (!batchMode) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        }
      });
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  if (batchMode) {
    for (size_t b = 0; b < out.size(); ++b) {
      fmt::print("=== {} ===\n", labels[b]);
      std::fwrite(out[b].data(), 1, out[b].size(), stdout);
      std::fputc('\n', stdout);
    }
  } else {
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  fmt::print(stderr,
             "modrun: {} byte{} generated for {} prompt{} in {:.2f}s "
             "({:.0f} bytes/s)\n",
             produced, produced == 1 ? "" : "s", prompts.size(),
             prompts.size() == 1 ? "" : "s", seconds,
             static_cast<double>(produced) / std::max(seconds, 1e-9));
  return 0;
}

int runEval(int argc, char **argv) {
  const char *usage = kEvalUsage;
  Args args = parseArgs(argc, argv, {"weights", "batch", "batches"}, usage,
                        /*maxPositional=*/1, "missing package directory PKG",
                        /*lists=*/{"data"});
  if (args.help) {
    std::fputs(usage, stdout);
    return 0;
  }
  std::string weightsPath = args.require("weights", usage);
  if (!args.listValues.count("data"))
    throw UsageError{"missing --data FILE...", usage};
  int64_t batch = 8;
  uint64_t maxBatches = 8;
  if (args.options.count("batch"))
    batch = static_cast<int64_t>(
        parseUnsigned("batch", args.options["batch"], usage, 1, kMaxBatch));
  if (args.options.count("batches"))
    maxBatches = parseUnsigned("batches", args.options["batches"], usage, 1);

  Package pkg = Package::open(args.pkg);
  const Manifest &man = pkg.manifest();
  if (man.vocabSize < 256)
    throw Error(fmt::format("{}: modrun eval reads byte-level text (tokens "
                            "0..255), but the model's vocab_size is {}",
                            args.pkg, man.vocabSize));
  TensorMap weights = loadCheckedWeights(pkg, weightsPath);
  Corpus corpus = Corpus::load(args.listValues["data"], man.seqLen, batch);
  std::vector<std::vector<int32_t>> batches =
      corpus.heldOutBatches(static_cast<size_t>(maxBatches));

  const int64_t S = man.seqLen;
  const size_t nRouted = man.routedLayers.size();
  const bool dense = nRouted == 0;
  double ceTopk = 0, ceCausal = 0;
  std::vector<uint64_t> agree(nRouted, 0), decided(nRouted, 0),
      topkRouted(nRouted, 0), causalRouted(nRouted, 0);
  std::vector<int32_t> inputs(static_cast<size_t>(batch * S));
  for (const std::vector<int32_t> &tokens : batches) {
    for (int64_t b = 0; b < batch; ++b)
      std::copy(tokens.begin() + b * (S + 1),
                tokens.begin() + b * (S + 1) + S, inputs.begin() + b * S);
    // The top-k loss is the training loss: the compiled loss-only entry
    // (modc_eval), mean over the batch's B * S predictions.
    ceTopk += pkg.eval(weights, tokens, batch).ce *
              static_cast<double>(batch * S);
    if (dense) // no routing to report; causal mode is top-k mode
      continue;
    std::vector<std::vector<int32_t>> decisions;
    ForwardResult topk =
        pkg.forward(weights, inputs, batch, RouteMode::TopK, &decisions);
    for (size_t l = 0; l < nRouted; ++l)
      for (size_t i = 0; i < topk.routed[l].size(); ++i) {
        topkRouted[l] += topk.routed[l][i] != 0;
        if (!decisions.empty()) {
          decided[l] += decisions[l][i] != 0;
          agree[l] += (decisions[l][i] != 0) == (topk.routed[l][i] != 0);
        }
      }
    if (man.supportsCausal) {
      // The loss of causal routing: modc_eval_causal.
      ceCausal += pkg.eval(weights, tokens, batch, RouteMode::Causal).ce *
                  static_cast<double>(batch * S);
      ForwardResult causal =
          pkg.forward(weights, inputs, batch, RouteMode::Causal);
      for (size_t l = 0; l < nRouted; ++l)
        for (int32_t r : causal.routed[l])
          causalRouted[l] += r != 0;
    }
  }
  const double n = static_cast<double>(batches.size()) *
                   static_cast<double>(batch) * static_cast<double>(S);
  fmt::print("model:     {} (seq_len {}, {} routed layer{}, causal router "
             "{})\n",
             man.model.value("name", std::string("?")), S, nRouted,
             nRouted == 1 ? "" : "s", dense ? "-" : man.causalRouter);
  fmt::print("held out:  {} batch{} x {} x {} tokens ({:.0f} predictions) "
             "from {} held-out bytes\n",
             batches.size(), batches.size() == 1 ? "" : "es", batch, S, n,
             corpus.heldOutBytes());
  fmt::print("loss topk:   {:.4f}  (perplexity {:.3f})\n", ceTopk / n,
             std::exp(ceTopk / n));
  if (man.supportsCausal)
    fmt::print("loss causal: {:.4f}  (perplexity {:.3f})\n", ceCausal / n,
               std::exp(ceCausal / n));
  else if (dense)
    fmt::print("loss causal: {:.4f}  (dense model: same as topk)\n",
               ceTopk / n);
  else
    fmt::print("loss causal: n/a (causal_router none: no causal mode)\n");
  if (!dense) {
    fmt::print("\n{:>5}  {:>8}  {:>12}  {:>12}  {:>9}  {:>13}\n", "layer",
               "capacity", "topk routed", "causal says", "agreement",
               "causal routed");
    for (size_t l = 0; l < nRouted; ++l) {
      const LayerInfo &info = man.layers[man.routedLayers[l]];
      auto frac = [&](uint64_t c) { return static_cast<double>(c) / n; };
      std::string says = "n/a", agreement = "n/a", causal = "n/a";
      if (man.supportsCausal) {
        says = fmt::format("{:.4f}", frac(decided[l]));
        agreement = fmt::format("{:.4f}", frac(agree[l]));
        causal = fmt::format("{:.4f}", frac(causalRouted[l]));
      }
      fmt::print("{:>5}  {:>8.4f}  {:>12.4f}  {:>12}  {:>9}  {:>13}\n",
                 info.index,
                 static_cast<double>(info.capacity) / static_cast<double>(S),
                 frac(topkRouted[l]), says, agreement, causal);
    }
    fmt::print("\ntopk routed: fraction of tokens in the top-k; causal says: "
               "fraction the causal\nrouter would route, on the topk pass; "
               "agreement: fraction where the two agree;\ncausal routed: "
               "fraction routed in causal mode (its own residual stream).\n");
  }
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
  fmt::print("target:    {}{} (abi {}, compiled by modc {})\n", m.target,
             m.arch.empty() ? "" : " " + m.arch,
             m.abiVersion, m.compilerVersion);
  if (m.target == "cpu") {
    std::string features = fmt::format("{}", fmt::join(m.cpuFeatures, " "));
    fmt::print("cpu:       --march={} ({})\n", m.cpuMarch,
               features.empty() ? "baseline ISA" : features);
  }
  fmt::print("shape:     seq_len {}, vocab {}, d_model {}, dtype {}\n",
             m.seqLen, m.vocabSize, m.dModel, m.dtype);
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
  if (m.supportsEval)
    fmt::print("eval:      losses only, {} bytes of workspace per sequence{}\n",
               m.evalWorkspaceBytesPerSequence,
               m.supportsEvalCausal
                   ? fmt::format(" ({} in causal mode)",
                                 m.evalCausalWorkspaceBytesPerSequence)
                   : "");
  else
    fmt::print("training:  no (inference-only package)\n");
  if (m.supportsDecode)
    fmt::print("decode:    yes, {} bytes of KV cache and {} bytes of "
               "workspace per sequence\n",
               m.kvCacheBytesPerSequence, m.decodeWorkspaceBytesPerSequence);
  else if (!m.routedLayers.empty() && m.causalRouter == "none")
    fmt::print("decode:    no (routed layers with causal_router none)\n");
  else
    fmt::print("decode:    no (compiled without a decode entry)\n");
  return 0;
}

/// Appends up to `limit - corpus.size()` bytes of `path` to `corpus` (it
/// reads no further) and returns the file's size in bytes. Throws Error
/// naming the file when it is not a regular file (a device such as
/// /dev/zero or a pipe could be endless), cannot be read or is empty.
uint64_t readCorpusFile(const std::string &path, std::string &corpus,
                        uint64_t limit) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(fmt::format("{}: cannot open: {}", path,
                            std::strerror(ENOENT)));
  requireRegularTextFile(path);
  uint64_t size = std::filesystem::file_size(path, ec);
  if (ec)
    throw Error(fmt::format("{}: cannot read its size: {}", path,
                            ec.message()));
  if (size == 0)
    throw Error(fmt::format("{}: file is empty (no bytes to tokenize)", path));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  uint64_t room = limit > corpus.size() ? limit - corpus.size() : 0;
  uint64_t want = std::min(room, size);
  size_t start = corpus.size();
  corpus.resize(start + want);
  in.read(corpus.data() + start, static_cast<std::streamsize>(want));
  if (static_cast<uint64_t>(in.gcount()) != want)
    throw Error(fmt::format("{}: read failed after {} of {} bytes: {}", path,
                            in.gcount(), want,
                            errno ? std::strerror(errno) : "I/O error"));
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
  {
    std::vector<std::pair<std::string, std::string>> inputs;
    for (const std::string &file : args.positional)
      inputs.push_back({"FILE", file});
    refuseOverwritingInput("--out", out, inputs);
  }

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

/// The rank of this process in a job with several ranks, else -1.
int rankOfJob() {
  if (gComm)
    return gComm->size() > 1 ? gComm->rank() : -1;
  try {
    std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
    return launch && launch->size > 1 ? launch->rank : -1;
  } catch (const Error &) {
    return -1;
  }
}

/// Prints "modrun: error: MSG". In a job, an error of this rank alone
/// names the rank (and goes to its --rank-log too); a collective one is
/// printed by rank 0 only.
void reportError(const std::string &message, bool collective) {
  int rank = rankOfJob();
  std::string text;
  if (rank < 0 || (collective && rank == 0))
    text = fmt::format("modrun: error: {}\n", message);
  else if (!collective)
    text = fmt::format("modrun: error: rank {}{}: {}\n", rank,
                       gComm ? fmt::format(" of {}", gComm->size()) : "",
                       message);
  if (!text.empty() && (!collective || rank <= 0))
    std::fputs(text.c_str(), stderr);
  if (gRankLog)
    std::fputs(fmt::format("modrun: error: {}\n", message).c_str(), gRankLog);
  std::fflush(stderr);
  if (gRankLog)
    std::fflush(gRankLog);
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
    if (cmd == "train") {
      int status = runTrain(argc - 2, argv + 2);
      gComm.reset(); // MPI_Finalize while the process is whole
      return status;
    }
    if (cmd == "sample")
      return runSample(argc - 2, argv + 2);
    if (cmd == "eval")
      return runEval(argc - 2, argv + 2);
    if (cmd == "info")
      return runInfo(argc - 2, argv + 2);
    if (cmd == "tokenize")
      return runTokenize(argc - 2, argv + 2);
    if (cmd == "show")
      return runShow(argc - 2, argv + 2);
    fmt::print(stderr, "modrun: unknown command '{}'\n\n{}", cmd, kMainUsage);
    return 2;
  } catch (const UsageError &e) {
    // Rank 0 of a job prints the usage; the others name themselves in one
    // line, since their command line may differ (mpirun A : B).
    int rank = rankOfJob();
    if (rank <= 0)
      fmt::print(stderr, "modrun: {}\n\n{}", e.message, e.usage);
    else
      fmt::print(stderr, "modrun: rank {}: {}\n", rank, e.message);
    if (gComm && gComm->size() > 1)
      gComm->abort(2);
    return 2;
  } catch (const CollectiveError &e) {
    // Every rank raised it together (docs/distributed.md): rank 0 reports,
    // and the ranks end normally.
    reportError(e.what(), /*collective=*/true);
    gComm.reset();
    return 1;
  } catch (const std::exception &e) {
    // Error, or not expected (bad_alloc and the like), but never a crash.
    // On one rank of a job, the rank names itself and ends the job.
    reportError(e.what(), /*collective=*/false);
    if (gComm && gComm->size() > 1)
      gComm->abort(1);
    return 1;
  }
}
