//===- TrainCommand.cpp - modrun train ------------------------------------===//
//
// Trains a package on text files (docs/cli.md, "modrun train"), alone or as
// one rank of a data-parallel job (docs/distributed.md). runTrain goes
// through the parts below in order: the options, the guards on the outputs,
// the job, the package, the settings (a checkpoint's when resuming), the
// data and the state to start from, then modrt::train with the progress
// display.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "modrt/Error.h"
#include "modrt/Training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <unistd.h>

using namespace modrt;

namespace modrun {
namespace {

const char kTrainUsage[] =
    "usage: modrun train PKG --data FILE... --out CKPT.safetensors\n"
    "                    --steps N --batch B --lr LR (--seed S | --weights W)\n"
    "                    [--resume CKPT] [--warmup W] [--weight-decay WD]\n"
    "                    [--clip C] [--eval-every K] [--save-every K]\n"
    "                    [--stop-after K] [--log run.csv] [--shards P]\n"
    "                    [--comm auto|single|mpi|nccl] [--comm-timeout SEC]\n"
    "                    [--rank-log DIR] [--tokenizer PATH]\n"
    "\n"
    "Trains on the bytes of the FILEs (concatenated; the last 10% held out),\n"
    "or on their tokens with --tokenizer or the package's tokenizer.json,\n"
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

/// The largest step count (--steps, --warmup, ...): steps are int64_t, and
/// 2^62 leaves room for the arithmetic on them.
constexpr uint64_t kMaxSteps = uint64_t(1) << 62;

void declareTrain(CommandLine &line) {
  packageArgument(line)
      .listOption("data", "FILE...", "required; text files, one corpus")
      .option("out", "CKPT.safetensors", "required; the checkpoint to write")
      .option("steps", "N", "total updates, at most 2^62")
      .option("batch", "B", "sequences per step, 1 to 2^20")
      .option("lr", "LR", "peak learning rate, > 0")
      .option("seed", "S", "seed of the initial weights")
      .option("weights", "W", "start from these weights")
      .option("resume", "CKPT", "continue a run from its checkpoint")
      .option("warmup", "W", "linear warmup steps (default N/10, <= 100)")
      .option("weight-decay", "WD", "AdamW weight decay (default 0.1)")
      .option("clip", "C", "gradient-norm clipping, 0: off (default 1.0)")
      .option("eval-every", "K", "held-out loss every K steps (default off)")
      .option("save-every", "K", "checkpoint every K steps")
      .option("stop-after", "K", "stop after step K of the N")
      .option("log", "run.csv", "a CSV row per step")
      .option("shards", "P", "split each batch as P ranks would (default 1)")
      .option("comm", "auto|single|mpi|nccl",
              "the communicator of a job (default auto)")
      .option("comm-timeout", "SEC",
              "how long a rank waits for the others (default 600)")
      .option("rank-log", "DIR", "ranks other than 0 log to DIR/rank-R.log");
  tokenizerOption(line);
}

//===----------------------------------------------------------------------===//
// The options
//===----------------------------------------------------------------------===//

/// What the line asks for, checked before any file is read. A setting not
/// given stays unset, so that a resumed run tells a setting given on the
/// line from one that defaults to the checkpoint's.
struct TrainOptions {
  std::string pkg, out;
  std::vector<std::string> data;
  std::optional<std::string> resume, weights, log, rankLog;
  std::optional<int64_t> steps, batch, evalEvery, saveEvery, stopAfter, warmup,
      shards;
  std::optional<double> lr, weightDecay, clip;
  std::optional<uint64_t> seed;
  CommOptions comm;
};

/// Reads and checks every option; throws UsageError (exit 2) for a mistake.
TrainOptions readTrainOptions(const CommandLine &line) {
  TrainOptions o;
  o.pkg = line.argument();
  o.data = line.requireList("data");
  o.out = line.require("out");
  auto text = [&](const char *key) -> std::optional<std::string> {
    return line.has(key) ? std::optional(line.text(key)) : std::nullopt;
  };
  o.resume = text("resume");
  o.weights = text("weights");
  o.log = text("log");
  o.rankLog = text("rank-log");
  if (o.resume && o.weights)
    throw line.mistake("--resume and --weights exclude each other (a "
                       "checkpoint holds its weights)");
  if (!o.resume) {
    for (const char *key : {"steps", "batch", "lr"})
      line.require(key);
    if (!line.has("seed") && !o.weights)
      throw line.mistake("missing --seed (or --weights) to initialise the "
                         "weights");
  }
  auto count = [&](const char *key, uint64_t minimum,
                   uint64_t maximum) -> std::optional<int64_t> {
    if (std::optional<uint64_t> v = line.integer(key, minimum, maximum))
      return static_cast<int64_t>(*v);
    return std::nullopt;
  };
  o.steps = count("steps", 1, kMaxSteps);
  o.batch = count("batch", 1, kMaxBatch);
  o.evalEvery = count("eval-every", 1, kMaxSteps);
  o.saveEvery = count("save-every", 1, kMaxSteps);
  o.stopAfter = count("stop-after", 1, kMaxSteps);
  o.lr = line.number("lr", 0, /*strict=*/true);
  o.weightDecay = line.number("weight-decay", 0);
  o.clip = line.number("clip", 0);
  o.seed = line.integer("seed");
  o.warmup = count("warmup", 0, kMaxSteps);
  o.shards = count("shards", 1, kMaxSteps);
  if (line.has("comm")) {
    o.comm.backend = line.text("comm");
    if (o.comm.backend != "auto" && o.comm.backend != "single" &&
        o.comm.backend != "mpi" && o.comm.backend != "nccl")
      throw line.mistake(fmt::format("--comm must be auto, single, mpi or "
                                     "nccl, got '{}'",
                                     o.comm.backend));
  }
  o.comm.timeoutSeconds = line.number("comm-timeout", 0, /*strict=*/true)
                              .value_or(o.comm.timeoutSeconds);
  if (o.shards && *o.shards > 1)
    if (std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
        launch && launch->size > 1)
      throw line.mistake(fmt::format("--shards is for one process; the {} "
                                     "ranks of this job split each batch {} "
                                     "ways already",
                                     launch->size, launch->size));
  return o;
}

//===----------------------------------------------------------------------===//
// The outputs
//===----------------------------------------------------------------------===//

/// Refuses a --out or --log that would overwrite an input or whose
/// directory does not exist, so that nothing is trained for an output that
/// cannot be written. --out may be --resume's checkpoint: it is replaced
/// whole at each save. Removes the temporaries of killed runs.
void guardOutputs(const TrainOptions &o) {
  std::vector<std::pair<std::string, std::string>> inputs;
  for (const std::string &file : o.data)
    inputs.push_back({"--data", file});
  refuseOverwritingInput("--out", o.out, inputs);
  requireOutputDirectory("--out", o.out);
  // Only rank 0 writes the checkpoint, and only it may judge temporaries
  // (another machine's process ids mean nothing here).
  std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
  if (!launch || launch->rank == 0)
    removeStaleTemporaries(o.out);
  if (o.log) {
    inputs.push_back({"--out", o.out});
    refuseOverwritingInput("--log", *o.log, inputs);
    requireOutputDirectory("--log", *o.log);
  }
}

//===----------------------------------------------------------------------===//
// The job
//===----------------------------------------------------------------------===//

/// Where this rank reports: rank 0 on stderr, the others in their
/// --rank-log file, or nowhere.
class Reporter {
public:
  explicit Reporter(std::FILE *to) : to_(to) {}
  void say(const std::string &text) const {
    if (to_) {
      std::fputs(text.c_str(), to_);
      std::fflush(to_);
    }
  }

private:
  std::FILE *to_;
};

/// Connects this process to its job (alone: a single-process
/// communicator) and opens this rank's --rank-log. From here on, an error on
/// one rank ends every rank (main).
Reporter joinJob(const TrainOptions &o) {
  gJob.comm = Communicator::connect(o.comm);
  const int rank = gJob.comm->rank();
  if (o.rankLog && rank > 0) {
    std::string path = fmt::format("{}/rank-{}.log", *o.rankLog, rank);
    errno = 0;
    gJob.rankLog = std::fopen(path.c_str(), "w");
    if (!gJob.rankLog)
      throw Error(fmt::format("--rank-log {}: cannot write {}: {}", *o.rankLog,
                              path,
                              errno ? std::strerror(errno) : "unknown error"));
  }
  return Reporter(rank == 0 ? stderr : gJob.rankLog);
}

//===----------------------------------------------------------------------===//
// The settings and the state to start from
//===----------------------------------------------------------------------===//

/// The run's settings and the notes on them. A resumed run starts from its
/// checkpoint's settings, a fresh one from the defaults of docs/cli.md;
/// the options given override either. Each note names a setting given
/// (or data) that differs from the checkpoint's: the run then no longer
/// repeats an uninterrupted one.
struct Settings {
  TrainConfig config;
  int64_t batch = 0;
  std::vector<std::string> notes;
};

Settings settle(const TrainOptions &o, const CommandLine &line,
                const std::optional<Checkpoint> &ckpt) {
  Settings s;
  TrainConfig &c = s.config;
  if (ckpt) {
    const CheckpointInfo &info = ckpt->info;
    c.steps = info.totalSteps;
    s.batch = info.batch;
    c.lr = info.lr;
    c.warmup = info.warmup;
    c.adamw = info.adamw;
    c.seed = info.seed;
  }
  auto apply = [&](const char *key, const auto &given, auto &setting) {
    if (!given)
      return;
    if (ckpt && *given != setting)
      s.notes.push_back(fmt::format("--{} {} (checkpoint: {})", key,
                                    line.text(key), setting));
    setting = *given;
  };
  apply("steps", o.steps, c.steps);
  apply("batch", o.batch, s.batch);
  apply("lr", o.lr, c.lr);
  apply("seed", o.seed, c.seed);
  apply("weight-decay", o.weightDecay, c.adamw.weightDecay);
  apply("clip", o.clip, c.adamw.clipNorm);
  if (!ckpt)
    c.warmup = std::min<int64_t>(100, c.steps / 10);
  apply("warmup", o.warmup, c.warmup);
  c.evalEvery = o.evalEvery.value_or(0);
  c.saveEvery = o.saveEvery.value_or(0);
  c.stopAfter = o.stopAfter.value_or(0);
  c.outPath = o.out;
  c.logPath = o.log.value_or("");
  c.comm = gJob.comm.get();
  c.shards = o.shards.value_or(1);
  return s;
}

/// Refuses a checkpoint that `config` leaves nothing to do or whose data
/// position lies past `corpus`'s training split; notes other data.
void checkResume(const Checkpoint &ckpt, const std::string &path,
                 const Corpus &corpus, Settings &s) {
  const CheckpointInfo &info = ckpt.info;
  if (info.dataBytes != corpus.size() || info.dataHash != corpus.hash())
    s.notes.push_back(
        fmt::format("the data ({} {}; checkpoint: {} {}{})", corpus.size(),
                    corpus.unit(), info.dataBytes, corpus.unit(),
                    info.dataBytes == corpus.size() ? ", other content" : ""));
  if (info.step >= s.config.steps)
    throw Error(fmt::format("{}: checkpoint is at step {}, so --steps {} "
                            "leaves nothing to do",
                            path, info.step, s.config.steps));
  if (info.dataPosition >= corpus.trainBytes())
    throw Error(fmt::format("{}: data position {} is past the end of the "
                            "training split ({} {}); resume with the "
                            "data it was trained on",
                            path, info.dataPosition, corpus.trainBytes(),
                            corpus.unit()));
}

/// The state training starts from: the checkpoint's (taken from `ckpt`),
/// else the --weights given or fresh weights from the seed, with zero
/// moments.
TrainState startState(const TrainOptions &o, const Package &pkg,
                      const TrainConfig &config,
                      std::optional<Checkpoint> &ckpt) {
  TrainState state;
  if (ckpt) {
    state.weights = std::move(ckpt->weights);
    state.optimizer = std::move(ckpt->optimizer);
    state.dataPosition = ckpt->info.dataPosition;
    return state;
  }
  if (o.weights) {
    state.weights = loadCheckedWeights(pkg, *o.weights);
    state.weights.metadata.clear();
  } else {
    state.weights = pkg.initWeights(config.seed);
  }
  state.optimizer = OptimizerState::zeros(pkg.manifest());
  return state;
}

/// "modrun: training M (seq_len S) on N bytes (H held out), batch B (how
/// the ranks or shards split it), steps F..L of N".
std::string describeRun(const Manifest &man, const Corpus &corpus,
                        const Settings &s, int64_t first, int64_t last) {
  const int ranks = gJob.comm->size();
  std::string parts;
  if (ranks > 1 || s.config.shards > 1) {
    int64_t n = ranks > 1 ? ranks : s.config.shards;
    // train refuses a batch smaller than n, once the ranks agree on it.
    BatchSplit split = BatchSplit::of(std::max(s.batch, n), n);
    bool even = split.counts.front() == split.counts.back();
    parts = fmt::format(
        " ({} {} of {}{} sequence{}{})", n, ranks > 1 ? "ranks" : "shards",
        split.counts.front(),
        even ? "" : fmt::format("..{}", split.counts.back()),
        even && split.counts.front() == 1 ? "" : "s",
        ranks > 1 ? fmt::format(", {} backend", gJob.comm->backend()) : "");
  }
  return fmt::format("modrun: training {} (seq_len {}) on {} {} ({} held "
                     "out), batch {}{}, steps {}..{} of {}\n",
                     man.model.value("name", std::string("?")), man.seqLen,
                     corpus.size(), corpus.unit(), corpus.heldOutBytes(),
                     s.batch, parts, first, last, s.config.steps);
}

//===----------------------------------------------------------------------===//
// The progress display
//===----------------------------------------------------------------------===//

/// The progress of the run (docs/cli.md, "Progress"): on a terminal one
/// line rewritten in place, otherwise a line every ~5% of the run and at
/// each evaluation. Ends a line left open when destroyed, so that an error
/// starts on a line of its own.
class Progress {
public:
  /// Steps `first`..`last` of `tokensPerStep` tokens each; `tty`: rank 0
  /// with stderr on a terminal.
  /// `moe`: the model has MoE layers, whose balance loss the line shows.
  Progress(const Reporter &report, bool tty, int64_t first, int64_t last,
           int64_t tokensPerStep, bool moe)
      : report_(report), tty_(tty), moe_(moe), first_(first),
        every_(std::max<int64_t>(1, (last - first + 1) / 20)),
        tokensPerStep_(static_cast<double>(tokensPerStep)) {}
  ~Progress() { endLine(); }

  void step(const StepRecord &r) {
    elapsed_ += r.seconds;
    double perStep = elapsed_ / static_cast<double>(r.step - first_ + 1);
    std::string line = fmt::format(
        "step {}/{}  loss {:.4f}{}  lr {:.3g}  {:.0f} tok/s  ETA {}", r.step,
        r.totalSteps, r.losses.total,
        moe_ ? fmt::format("  balance {:.4f}", r.losses.balance) : "", r.lr,
        tokensPerStep_ / std::max(perStep, 1e-9),
        formatDuration(perStep * static_cast<double>(r.lastStep - r.step)));
    if (r.evalLoss)
      line += fmt::format("  eval {:.4f}", *r.evalLoss);
    if (tty_) {
      std::string pad(width_ > line.size() ? width_ - line.size() : 0, ' ');
      fmt::print(stderr, "\r{}{}{}", line, pad, r.evalLoss ? "\n" : "");
      width_ = r.evalLoss ? 0 : line.size();
    } else if (r.evalLoss || r.step == r.lastStep ||
               (r.step - first_) % every_ == 0) {
      report_.say(line + "\n");
    }
    // The MoE layers' shares, measured at evaluations and at the last step
    // (docs/cli.md, "modrun train"), each on a line of its own.
    if (!r.moe.empty()) {
      endLine();
      for (const MoeShares &m : r.moe)
        report_.say(fmt::format(
            "moe layer {}: kept {:.1f} %, no-op {:.1f} %, dropped {:.1f} % of "
            "{} held-out tokens{}\n",
            m.layer, m.percent(m.kept), m.percent(m.noop), m.percent(m.dropped),
            m.reached(),
            m.skipped
                ? fmt::format(" ({} skipped the block, not counted)", m.skipped)
                : ""));
    }
    std::fflush(stderr);
  }

  /// Ends the line being rewritten, if any.
  void endLine() {
    if (tty_ && width_)
      std::fputc('\n', stderr);
    width_ = 0;
  }

  /// Wall time of the steps so far.
  double elapsed() const { return elapsed_; }

private:
  const Reporter &report_;
  bool tty_, moe_;
  int64_t first_, every_;
  double tokensPerStep_;
  double elapsed_ = 0;
  size_t width_ = 0; ///< of the line on the terminal; 0: none open
};

//===----------------------------------------------------------------------===//
// The command
//===----------------------------------------------------------------------===//

int runTrain(const CommandLine &line) {
  TrainOptions o = readTrainOptions(line);
  guardOutputs(o);
  Reporter report = joinJob(o);

  Package pkg = Package::open(o.pkg);
  requireTraining(pkg, o.pkg);
  Tokenizer tokenizer = commandTokenizer(line, &pkg, o.pkg, "train", true);
  const Manifest &man = pkg.manifest();

  std::optional<Checkpoint> ckpt;
  if (o.resume)
    ckpt = loadCheckpoint(*o.resume, pkg);
  Settings s = settle(o, line, ckpt);
  Corpus corpus = Corpus::load(o.data, man.seqLen, s.batch, tokenizer);
  if (ckpt)
    checkResume(*ckpt, *o.resume, corpus, s);
  for (const std::string &note : s.notes)
    report.say(fmt::format("modrun: note: resuming with {}; the run will not "
                           "repeat an uninterrupted one\n",
                           note));
  TrainState state = startState(o, pkg, s.config, ckpt);

  const TrainConfig &config = s.config;
  const int64_t first = state.optimizer.step + 1;
  const int64_t last = config.stopAfter > 0
                           ? std::min(config.stopAfter, config.steps)
                           : config.steps;
  report.say(describeRun(man, corpus, s, first, last));
  const int rank = gJob.comm->rank();
  Progress progress(report, rank == 0 && ::isatty(STDERR_FILENO) == 1, first,
                    last, s.batch * man.seqLen, !man.moeLayers.empty());
  train(pkg, corpus, config, state,
        [&](const StepRecord &r) { progress.step(r); });
  progress.endLine();
  report.say(fmt::format("modrun: step {} checkpoint {} {} in {}\n", last,
                         rank == 0 ? "written to" : "written by rank 0 to",
                         o.out, formatDuration(progress.elapsed())));
  return 0;
}

} // namespace

const Command kTrainCommand = {
    "train", "train a package on text files (AdamW, checkpoints)", kTrainUsage,
    declareTrain, runTrain};

} // namespace modrun
