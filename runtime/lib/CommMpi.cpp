//===- CommMpi.cpp - The MPI communicator (plugin libmodrt_mpi.so) -------===//
//
// Built when CMake finds MPI; loaded by Communicator::connect only when a
// job asks for the mpi backend (docs/distributed.md), so that modrt itself
// never needs libmpi. Collectives are MPI's non-blocking ones, completed by
// polling with MPI_Test against a deadline: a rank that was killed or hangs
// makes the others fail with an error after the timeout, never wait forever.
//
//===----------------------------------------------------------------------===//
#include "CommMpiCommon.h"

#include <cstdio>

namespace {
using namespace modrt;

class MpiComm final : public Communicator {
public:
  explicit MpiComm(const CommOptions &options) : world(options) {}
  int rank() const override { return world.rank; }
  int size() const override { return world.size; }
  const char *backend() const override { return "mpi"; }

  void allGather(const void *in, size_t bytes, void *out,
                 const char *what) override {
    MPI_Request req;
    world.check(MPI_Iallgather(in, world.count(bytes, what), MPI_BYTE, out,
                               world.count(bytes, what), MPI_BYTE, world.comm,
                               &req),
                what);
    world.wait(req, what);
  }
  void allGatherV(const void *in, const std::vector<size_t> &counts, void *out,
                  const char *what) override {
    std::vector<int> c, d;
    world.countsAndOffsets(counts, nullptr, c, d, what);
    MPI_Request req;
    world.check(MPI_Iallgatherv(in, c[world.rank], MPI_BYTE, out, c.data(),
                                d.data(), MPI_BYTE, world.comm, &req),
                what);
    world.wait(req, what);
  }
  void allToAllV(const void *in, const std::vector<size_t> &sendCounts,
                 const std::vector<size_t> &sendOffsets, void *out,
                 const std::vector<size_t> &recvCounts,
                 const std::vector<size_t> &recvOffsets,
                 const char *what) override {
    std::vector<int> sc, sd, rc, rd;
    world.countsAndOffsets(sendCounts, &sendOffsets, sc, sd, what);
    world.countsAndOffsets(recvCounts, &recvOffsets, rc, rd, what);
    MPI_Request req;
    world.check(MPI_Ialltoallv(in, sc.data(), sd.data(), MPI_BYTE, out,
                               rc.data(), rd.data(), MPI_BYTE, world.comm,
                               &req),
                what);
    world.wait(req, what);
  }
  [[noreturn]] void abort(int code) noexcept override { world.abort(code); }

private:
  MpiWorld world;
};
} // namespace

extern "C" __attribute__((visibility("default"))) modrt::Communicator *
modrt_comm_plugin_create(const modrt::CommOptions *options, char *error,
                         size_t errorSize) {
  try {
    return new MpiComm(*options);
  } catch (const std::exception &e) {
    std::snprintf(error, errorSize, "%s", e.what());
    return nullptr;
  }
}
