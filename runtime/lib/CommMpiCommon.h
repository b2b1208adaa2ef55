//===- CommMpiCommon.h - MPI start-up and timed waits of the plugins -----===//
//
// What the mpi and nccl plugins share (docs/distributed.md): MPI_Init with
// errors returned instead of aborting, rank and size, and waiting for a
// non-blocking request against the communicator's timeout.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_LIB_COMMMPICOMMON_H
#define MODRT_LIB_COMMMPICOMMON_H

#include "modrt/Comm.h"
#include "modrt/Error.h"

#include <fmt/format.h>
// The C API only: no MPI C++ bindings (libmpi_cxx) needed.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>
#include <vector>

namespace modrt {

struct MpiWorld {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeout = 600;
  bool initialisedHere = false;

  explicit MpiWorld(const CommOptions &options)
      : timeout(options.timeoutSeconds) {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) !=
          MPI_SUCCESS)
        throw Error("MPI_Init failed; is this process started by mpirun, "
                    "mpiexec or srun?");
      initialisedHere = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  ~MpiWorld() {
    if (comm != MPI_COMM_NULL)
      MPI_Comm_free(&comm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (initialisedHere && !finalized)
      MPI_Finalize();
  }
  MpiWorld(const MpiWorld &) = delete;
  MpiWorld &operator=(const MpiWorld &) = delete;

  void check(int rc, const char *what) const {
    if (rc == MPI_SUCCESS)
      return;
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(fmt::format("{} failed: {}", what,
                            std::string(text, static_cast<size_t>(len))));
  }

  /// Completes `req`, or throws Error after `timeout` seconds. Polls with
  /// short sleeps so that a waiting rank leaves the CPU to the others.
  void wait(MPI_Request &req, const char *what) const {
    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    auto deadline =
        start + std::chrono::duration_cast<clock::duration>(
                    std::chrono::duration<double>(timeout));
    int done = 0;
    for (unsigned spin = 0;; ++spin) {
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done)
        return;
      if (clock::now() > deadline)
        throw Error(fmt::format(
            "{} did not complete within {} s: another rank stopped "
            "answering (killed, stuck, or failed without ending the job); "
            "ending the job (--comm-timeout sets the limit)",
            what, timeout));
      if (spin > 100)
        std::this_thread::sleep_for(std::chrono::microseconds(
            spin > 2000 ? 1000 : 50));
    }
  }

  int count(size_t bytes, const char *what) const {
    if (bytes > static_cast<size_t>(INT_MAX))
      throw Error(fmt::format("{}: {} bytes are more than one MPI message "
                              "carries (2^31 - 1)",
                              what, bytes));
    return static_cast<int>(bytes);
  }
  /// MPI's int counts and offsets from byte sizes (offsets back to back
  /// when `offsets` is null).
  void countsAndOffsets(const std::vector<size_t> &counts,
                        const std::vector<size_t> *offsets,
                        std::vector<int> &c, std::vector<int> &d,
                        const char *what) const {
    if (counts.size() != static_cast<size_t>(size) ||
        (offsets && offsets->size() != counts.size()))
      throw Error(fmt::format("{}: {} counts for {} ranks", what,
                              counts.size(), size));
    size_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      c.push_back(count(counts[r], what));
      d.push_back(count(offsets ? (*offsets)[r] : at, what));
      at += counts[r];
    }
  }

  [[noreturn]] void abort(int code) const noexcept {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
};

} // namespace modrt

#endif // MODRT_LIB_COMMMPICOMMON_H
