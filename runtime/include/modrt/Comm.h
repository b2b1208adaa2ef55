//===- Comm.h - Communicators for data-parallel training --------*- C++ -*-===//
//
// A Communicator connects the processes ("ranks") of one training job
// (docs/distributed.md). Three backends implement it:
//
//   single  one process, no library, always available;
//   mpi     MPI (Open MPI, MPICH), in the plugin libmodrt_mpi.so;
//   nccl    NCCL between GPUs, bootstrapped over MPI, in libmodrt_nccl.so.
//
// The MPI and NCCL backends live in plugins that modrt loads with dlopen
// only when a job asks for them, so modrt itself (and modrun run as one
// process) needs neither library at run time.
//
// Every collective takes a `what` naming it for errors, and gives up after
// the communicator's timeout instead of waiting forever: it then throws
// Error naming this rank and the collective. A rank that throws out of a
// collective (or anywhere in a distributed run) must call abort(), which
// ends every rank of the job.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_COMM_H
#define MODRT_COMM_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace modrt {

/// Options of Communicator::connect.
struct CommOptions {
  /// "auto" (mpi when a launcher started several ranks, else single),
  /// "single", "mpi" or "nccl".
  std::string backend = "auto";
  /// Seconds a collective may wait for the other ranks; > 0.
  double timeoutSeconds = 600;
  /// nccl: the CUDA device of this rank; -1: the rank's local index
  /// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) modulo the device count.
  int device = -1;
};

/// Rank and world size as a launcher (mpirun, srun, mpiexec) announces them
/// in the environment: OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/SIZE
/// (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun). Empty when none is
/// set. `source` names the variables read.
struct LaunchInfo {
  int rank = 0, size = 1;
  std::string source;
};
std::optional<LaunchInfo> launchInfoFromEnvironment();

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "single", "mpi" or "nccl".
  virtual const char *backend() const = 0;

  /// Every rank gives `bytes` bytes at `in`; `out` (size() * bytes) receives
  /// them in rank order on every rank.
  virtual void allGather(const void *in, size_t bytes, void *out,
                         const char *what) = 0;
  /// As allGather, with `counts[r]` bytes from rank r (the same `counts` on
  /// every rank); `out` receives them back to back in rank order.
  virtual void allGatherV(const void *in, const std::vector<size_t> &counts,
                          void *out, const char *what) = 0;
  /// Personalised exchange: this rank sends sendCounts[r] bytes from `in` at
  /// offset sendOffsets[r] to rank r, and receives recvCounts[r] bytes from
  /// rank r into `out` at offset recvOffsets[r].
  virtual void allToAllV(const void *in, const std::vector<size_t> &sendCounts,
                         const std::vector<size_t> &sendOffsets, void *out,
                         const std::vector<size_t> &recvCounts,
                         const std::vector<size_t> &recvOffsets,
                         const char *what) = 0;
  /// Ends every rank of the job with exit status `code` (MPI_Abort); the
  /// single-process backend exits this process. Never returns.
  [[noreturn]] virtual void abort(int code) noexcept = 0;

  /// The single-process communicator (rank 0 of 1).
  static std::unique_ptr<Communicator> single();
  /// The communicator `options.backend` asks for. "auto" picks mpi when
  /// launchInfoFromEnvironment() reports more than one rank, single
  /// otherwise. Throws Error naming what is missing (the plugin, the
  /// library) or what failed.
  static std::unique_ptr<Communicator> connect(const CommOptions &options);
};

/// Where the plugin of `backend` ("mpi", "nccl") is looked for, in order:
/// $MODRT_PLUGIN_DIR, the directory of the code that holds modrt (modrun's
/// own directory, or libmodrt.so's), that directory's ../lib, then the
/// loader's search path.
std::vector<std::string> commPluginCandidates(const std::string &backend);

/// What a plugin exports (extern "C"): a new communicator for `options`, or
/// null with a message (ending without a newline) in `error`.
using CommPluginCreate = Communicator *(*)(const CommOptions *options,
                                           char *error, size_t errorSize);
constexpr const char *kCommPluginSymbol = "modrt_comm_plugin_create";

//===----------------------------------------------------------------------===//
// The exact, order-fixed reduction of data-parallel training
//===----------------------------------------------------------------------===//

/// How a global batch of `batch` sequences is split between `parts` ranks
/// (or the parts of one process, TrainConfig::shards): part r takes
/// batch / parts sequences, one more for r < batch % parts, in order.
struct BatchSplit {
  std::vector<int64_t> counts, first;
  static BatchSplit of(int64_t batch, int64_t parts);
};

/// Accumulates the weighted sum of the parts' gradients in a fixed order.
/// Every path that trains (one process with one part, one process with
/// several parts, several ranks) computes each element as
///
///   acc = 0.0 (double); for part r = 0, 1, ...: acc += double(g_r) * n_r
///   g   = float(acc / N)
///
/// with g_r the part's mean gradient over its n_r sequences and N the global
/// batch, so the result does not depend on how the parts are spread over
/// ranks: P ranks give bit for bit what one process gives with P parts
/// (docs/distributed.md). With a single part, g = g_0 exactly.
void accumulatePart(const float *part, int64_t sequences, double *acc,
                    size_t count);
void finishAccumulation(const double *acc, int64_t batch, float *out,
                        size_t count);

/// The data-parallel gradient reduction over `comm`: `flat` holds this
/// rank's mean gradient over its `split.counts[rank]` sequences, all
/// parameters back to back; on return it holds the reduced gradient of the
/// global batch on every rank, computed as accumulatePart over the ranks in
/// rank order. Each rank reduces one slice of the elements (all-to-all of
/// the slices, then an all-gather of the results), so no rank holds more
/// than two copies of the gradient.
void reduceGradients(Communicator &comm, const BatchSplit &split,
                     std::vector<float> &flat);

} // namespace modrt

#endif // MODRT_COMM_H
