//===- Training.h - Data, schedule, checkpoints and the training loop -*- C++
//-*-===//
//
// The training side of the runtime. Every FLOP of the model, the loss, the
// gradient and the AdamW update runs in the package (Package::grad and
// Package::adamwStep); this file only reads text into byte-level batches,
// schedules the learning rate, writes and reads checkpoints, and drives the
// loop. Everything here is deterministic, so a run resumed from a checkpoint
// reproduces the uninterrupted run bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_TRAINING_H
#define MODRT_TRAINING_H

#include "modrt/Comm.h"
#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"
#include "modrt/Tokenizer.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace modrt {

/// Learning rate of update `step` (1-based) of a `totalSteps` run: linear
/// warmup from peak / warmup at step 1 to `peak` at step `warmup`, then a
/// cosine from `peak` down to peak * minRatio at step `totalSteps` (held
/// there after). warmup 0 starts the cosine at once. Throws Error on
/// arguments out of range (step < 1, totalSteps < 1, warmup < 0, peak not
/// finite or < 0, minRatio outside [0, 1]).
double learningRate(int64_t step, int64_t totalSteps, double peak,
                    int64_t warmup, double minRatio = 0.1);

/// FNV-1a 64 of `size` bytes, continuing from `hash`.
uint64_t fnv1a64(const void *data, size_t size,
                 uint64_t hash = 0xcbf29ce484222325ull);

/// Throws Error naming `path` when it is a directory or not a regular file:
/// text inputs (training data, tokenize's files) must be regular files, as
/// a device such as /dev/zero or a pipe may never end.
void requireRegularTextFile(const std::string &path);

/// Byte-level training text (docs/model-format.md section 6:
/// token = byte value), or the tokens of a BPE (fromTokens), split into a
/// training part and a held-out part.
///
/// The last 10% of the bytes (rounded up, and at least one batch of
/// batch * (seqLen + 1) bytes) are held out. Training windows are runs of
/// seqLen + 1 bytes (inputs t[:S], targets t[1:]), consecutive and
/// non-overlapping, read cyclically through the training part: a window that
/// passes its end continues at its start. The data position is the byte
/// offset in the training part where the next window begins.
class Corpus {
public:
  /// Largest corpus load() reads (all files together): the bytes are held
  /// in memory.
  static constexpr uint64_t kMaxBytes = uint64_t(4) << 30;

  /// Reads `files` and concatenates them in order. Throws Error naming a
  /// file that is missing, unreadable, empty, not a regular file (a device
  /// such as /dev/zero or a pipe, which could be endless), or past
  /// kMaxBytes, or saying the sizes when a part is shorter than one batch.
  static Corpus load(const std::vector<std::string> &files, int64_t seqLen,
                     int64_t batch);
  /// The same through `tokenizer`: the concatenated text is encoded
  /// (fromTokens) unless it is the byte tokenizer (fromBytes).
  static Corpus load(const std::vector<std::string> &files, int64_t seqLen,
                     int64_t batch, const Tokenizer &tokenizer);
  /// The same from bytes in memory; `what` names them in errors.
  static Corpus fromBytes(std::string bytes, int64_t seqLen, int64_t batch,
                          const std::string &what = "corpus");
  /// Token ids of another tokenizer (a BPE, modrt/Tokenizer.h) in place of
  /// bytes: every rule above holds with tokens for bytes (sizes, positions
  /// and messages count tokens; the hash is that of the ids as 32-bit
  /// little-endian integers). Throws Error as fromBytes does, or for a
  /// negative id.
  static Corpus fromTokens(std::vector<int32_t> tokens, int64_t seqLen,
                           int64_t batch, const std::string &what = "corpus");

  int64_t seqLen() const { return seqLen_; }
  int64_t batch() const { return batch_; }
  /// Bytes of one batch: batch * (seqLen + 1).
  uint64_t batchBytes() const;
  /// "bytes" or "tokens" (fromTokens): what size() and positions count.
  const char *unit() const { return tokenLevel_ ? "tokens" : "bytes"; }
  uint64_t size() const { return tokenLevel_ ? tokens_.size() : bytes.size(); }
  uint64_t trainBytes() const { return trainSize; }
  uint64_t heldOutBytes() const { return size() - trainSize; }
  /// FNV-1a 64 of all bytes (stored in checkpoints to notice other data).
  uint64_t hash() const { return hash_; }

  /// Writes the training batch starting at data position `position` into
  /// `tokens` ([batch, seqLen + 1], resized) and returns the position of the
  /// next batch. Throws Error if position >= trainBytes().
  uint64_t trainBatch(uint64_t position, std::vector<int32_t> &tokens) const;
  /// Windows first .. first + count - 1 of the training batch at
  /// `position` (a rank's or a part's share, docs/distributed.md) into
  /// `tokens` ([count, seqLen + 1]); returns the position of the next batch,
  /// as trainBatch does. Throws Error as trainBatch does, or for windows
  /// outside the batch.
  uint64_t trainWindows(uint64_t position, int64_t first, int64_t count,
                        std::vector<int32_t> &tokens) const;

  /// The fixed held-out batches: consecutive windows from the start of the
  /// held-out part, grouped into at most `maxBatches` full batches (at least
  /// one, since the held-out part holds one batch).
  std::vector<std::vector<int32_t>> heldOutBatches(size_t maxBatches = 8) const;

private:
  /// Checks that `total` units split into a training and a held-out part
  /// (messages name `what` and `unit`) and sets the sizes.
  void split(uint64_t total, int64_t seqLen, int64_t batch,
             const std::string &what, const char *unit);
  int32_t at(uint64_t i) const {
    return tokenLevel_ ? tokens_[i] : static_cast<unsigned char>(bytes[i]);
  }
  std::string bytes;
  std::vector<int32_t> tokens_;
  bool tokenLevel_ = false;
  uint64_t trainSize = 0, hash_ = 0;
  int64_t seqLen_ = 0, batch_ = 0;
};

/// What a checkpoint records besides tensors (its "__metadata__").
struct CheckpointInfo {
  int64_t step = 0;          ///< updates done
  uint64_t dataPosition = 0; ///< Corpus position of the next batch
  uint64_t seed = 0;         ///< seed the weights were initialised from
  int64_t totalSteps = 0;    ///< length of the learning-rate schedule
  int64_t batch = 0;
  double lr = 0; ///< peak learning rate
  int64_t warmup = 0;
  AdamWConfig adamw;
  std::string model;                    ///< model name (for messages)
  uint64_t modelHash = 0;               ///< Manifest::modelHash of the package
  uint64_t dataBytes = 0, dataHash = 0; ///< Corpus size and hash
};

/// A checkpoint read back.
struct Checkpoint {
  TensorMap weights;
  OptimizerState optimizer;
  CheckpointInfo info;
};

/// Writes one safetensors file atomically (TensorMap::save): the weights
/// under their names, the moments as "adam.m.<name>" and "adam.v.<name>",
/// and `info` in "__metadata__" with format "modc-checkpoint".
void saveCheckpoint(const std::string &path, const TensorMap &weights,
                    const OptimizerState &optimizer,
                    const CheckpointInfo &info);

/// Reads a checkpoint written by saveCheckpoint for `package`. Throws Error
/// if it is not a modc checkpoint, if it was written for another model
/// (manifest hash differs), or if a tensor is missing or misshapen.
Checkpoint loadCheckpoint(const std::string &path, const Package &package);

/// Loads weights from a safetensors file; a checkpoint gives its weights
/// without the optimizer moments.
TensorMap loadWeights(const std::string &path);

/// Settings of a training run.
struct TrainConfig {
  int64_t steps = 0;     ///< total updates (the schedule's length)
  int64_t stopAfter = 0; ///< stop after this step; 0: run to `steps`
  double lr = 1e-3;      ///< peak learning rate
  int64_t warmup = 0;
  double minLrRatio = 0.1;
  AdamWConfig adamw;
  uint64_t seed = 0;      ///< recorded in checkpoints
  int64_t evalEvery = 0;  ///< 0: never evaluate
  size_t evalBatches = 8; ///< held-out batches per evaluation (at most)
  /// Checkpoint every this many steps; 0: every evaluation, or every 100
  /// steps without evaluation. The last step is always saved.
  int64_t saveEvery = 0;
  std::string outPath; ///< checkpoint file (required)
  std::string logPath; ///< CSV log; empty: none
  /// Data-parallel training (docs/distributed.md): the ranks of the job;
  /// null or a single-process communicator: this process alone. Every rank
  /// calls train with the same package, data, state and settings (checked
  /// at the start); each computes the gradient of its part of every batch
  /// (BatchSplit), the parts are reduced in rank order (reduceGradients),
  /// and every rank applies the same update. Only rank 0 writes the
  /// checkpoint and the CSV log.
  Communicator *comm = nullptr;
  /// One process only: split every batch into this many parts and reduce
  /// them as that many ranks would, which gives bit for bit the run of
  /// `shards` ranks (docs/distributed.md). 1: the whole batch in one call.
  int64_t shards = 1;
};

/// An error that every rank of a job raises together with the same message
/// (a non-finite loss of the global batch, ranks that disagree at start-up):
/// rank 0 reports it and the ranks end normally. Any other Error on one
/// rank of a job must end the job (Communicator::abort).
class CollectiveError : public Error {
public:
  using Error::Error;
};

/// Compares `items` (a name and a hash each, the same names in the same
/// order on every rank) across the ranks of `comm`; throws CollectiveError
/// on every rank, naming the first item and the ranks that differ from
/// rank 0, when one does.
void requireSameOnAllRanks(
    Communicator &comm,
    const std::vector<std::pair<std::string, uint64_t>> &items);

/// Weights, moments and data position: everything a step changes.
struct TrainState {
  TensorMap weights;
  OptimizerState optimizer; ///< optimizer.step = updates done
  uint64_t dataPosition = 0;
};

/// How one MoE layer (docs/model-format.md section 7) decided the tokens
/// of a top-k forward pass: counts of ForwardResult::moe's decisions.
/// Tokens that do not reach the MLP (decision -1: a routed layer's skipped
/// tokens) are counted in `skipped` and in none of the shares.
struct MoeShares {
  int layer = 0;       ///< the layer's index
  int64_t kept = 0;    ///< kept by a real expert (e < E)
  int64_t noop = 0;    ///< sent to a no-op expert (E <= e < E + N)
  int64_t dropped = 0; ///< over capacity (e + E + N)
  int64_t skipped = 0; ///< did not reach the MLP (-1)
  /// Kept by each real expert (E entries): the rows its products run on.
  std::vector<int64_t> keptByExpert;
  /// Tokens that reached the MLP: the shares' denominator.
  int64_t reached() const { return kept + noop + dropped; }
  /// `count` as a percentage of reached() (0 when none reached it).
  double percent(int64_t count) const {
    return reached() > 0 ? 100.0 * static_cast<double>(count) /
                               static_cast<double>(reached())
                         : 0.0;
  }
};

/// Counts the decisions of `result` (a forward pass of a package with
/// manifest `m`) per MoE layer, in Manifest::moeLayers order; throws Error
/// naming the layer for a decision outside the encoding of
/// modc_forward_args::moe_decisions. Empty without MoE layers.
std::vector<MoeShares> countMoeShares(const Manifest &m,
                                      const ForwardResult &result);

/// The shares of a forward pass in top-k mode on the inputs t[:, :S] of
/// `tokens` ([batch, seqLen + 1], a held-out batch of Corpus). Empty
/// without MoE layers.
std::vector<MoeShares> measureMoeShares(const Package &package,
                                        const TensorMap &weights,
                                        const std::vector<int32_t> &tokens,
                                        int64_t batch);

/// What one step did, for progress reports.
struct StepRecord {
  int64_t step = 0, totalSteps = 0, lastStep = 0;
  Losses losses; ///< of this step's batch, before the update
  double lr = 0, gradNorm = 0;
  double seconds = 0; ///< wall time of grad + reduction + update
  double tokensPerSecond = 0; ///< of the global batch, all ranks together
  int ranks = 1;              ///< ranks of the job
  /// Wall time of this rank's collectives in the step (the loss all-gather
  /// and reduceGradients, waiting for slower ranks included), a part of
  /// `seconds`; 0 in one process (also with TrainConfig::shards).
  double commSeconds = 0;
  /// Bytes of the gradient that this rank puts into the reduction (all
  /// parameters, f32): the all-to-all and the all-gather of reduceGradients
  /// each send (P-1)/P of it to the other ranks. 0 in one process.
  uint64_t commBytes = 0;
  std::optional<double> evalLoss; ///< mean held-out cross-entropy
  /// MoE models, at each evaluation and at the last step: the MoE layers'
  /// shares on the first held-out batch (measureMoeShares). Empty
  /// otherwise.
  std::vector<MoeShares> moe;
  bool saved = false;             ///< a checkpoint was written after this step
};

/// Mean cross-entropy of `weights` over `batches` (each [batch, seqLen +
/// 1]), computed with Package::eval.
double evaluate(const Package &package, const TensorMap &weights,
                const std::vector<std::vector<int32_t>> &batches,
                int64_t batch);

/// Runs steps state.optimizer.step + 1 .. (stopAfter or steps): batch (or
/// this rank's part of it), grad, reduction across parts and ranks,
/// finite check of the losses, AdamW update with the scheduled learning
/// rate, finite check of the gradient norm, then evaluation, log row and
/// checkpoint as configured. `onStep` sees every step. A non-finite loss or
/// gradient norm throws CollectiveError naming the step; the checkpoint file then
/// keeps the last good state written before it. The CSV log is started
/// afresh at step 0 and appended to when resuming.
void train(const Package &package, const Corpus &corpus,
           const TrainConfig &config, TrainState &state,
           const std::function<void(const StepRecord &)> &onStep = nullptr);

} // namespace modrt

#endif // MODRT_TRAINING_H
