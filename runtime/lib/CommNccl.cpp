//===- CommNccl.cpp - The NCCL communicator (plugin libmodrt_nccl.so) ----===//
//
// Built when CMake finds NCCL, the CUDA runtime and MPI; loaded by
// Communicator::connect for --comm nccl (docs/distributed.md). MPI starts
// the job (rank, size, and the broadcast of NCCL's unique id); NCCL moves
// the data between the GPUs. The interface hands host buffers, which are
// staged through one device buffer per collective. Waits poll the stream
// and ncclCommGetAsyncError against the timeout; on a timeout or an
// asynchronous NCCL error the NCCL communicator is aborted and Error thrown.
//
//===----------------------------------------------------------------------===//
#include "CommMpiCommon.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>

namespace {
using namespace modrt;

class NcclComm final : public Communicator {
public:
  explicit NcclComm(const CommOptions &options) : world(options) {
    int devices = 0;
    cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (devices < 1)
      throw Error("the nccl backend needs a GPU, and this machine has none");
    int device = options.device;
    if (device < 0) {
      int local = 0;
      for (const char *name :
           {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
        if (const char *v = std::getenv(name)) {
          local = std::atoi(v);
          break;
        }
      device = local % devices;
    }
    if (device >= devices)
      throw Error(fmt::format("CUDA device {} does not exist ({} found)",
                              device, devices));
    cuda(cudaSetDevice(device), "cudaSetDevice");
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
         "cudaStreamCreate");
    ncclUniqueId id;
    if (world.rank == 0)
      nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Request req;
    world.check(MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, world.comm, &req),
                "the NCCL id broadcast");
    world.wait(req, "the NCCL id broadcast");
    nccl(ncclCommInitRank(&comm, world.size, id, world.rank),
         "ncclCommInitRank");
  }
  ~NcclComm() override {
    if (buffer)
      cudaFree(buffer);
    if (comm)
      ncclCommDestroy(comm);
    if (stream)
      cudaStreamDestroy(stream);
  }

  int rank() const override { return world.rank; }
  int size() const override { return world.size; }
  const char *backend() const override { return "nccl"; }

  void allGather(const void *in, size_t bytes, void *out,
                 const char *what) override {
    size_t total = bytes * static_cast<size_t>(world.size);
    char *send = stage(in, bytes, bytes + total, what);
    char *recv = send + bytes;
    nccl(ncclAllGather(send, recv, bytes, ncclUint8, comm, stream), what);
    finish(recv, out, total, what);
  }
  void allGatherV(const void *in, const std::vector<size_t> &counts, void *out,
                  const char *what) override {
    size_t total = 0;
    for (size_t c : counts)
      total += c;
    size_t mine = counts.at(static_cast<size_t>(world.rank));
    char *send = stage(in, mine, mine + total, what);
    char *recv = send + mine;
    nccl(ncclGroupStart(), what);
    size_t at = 0;
    for (int r = 0; r < world.size; ++r) {
      nccl(ncclBroadcast(send, recv + at, counts[static_cast<size_t>(r)],
                         ncclUint8, r, comm, stream),
           what);
      at += counts[static_cast<size_t>(r)];
    }
    nccl(ncclGroupEnd(), what);
    finish(recv, out, total, what);
  }
  void allToAllV(const void *in, const std::vector<size_t> &sendCounts,
                 const std::vector<size_t> &sendOffsets, void *out,
                 const std::vector<size_t> &recvCounts,
                 const std::vector<size_t> &recvOffsets,
                 const char *what) override {
    size_t inBytes = 0, outBytes = 0;
    for (size_t r = 0; r < sendCounts.size(); ++r) {
      inBytes = std::max(inBytes, sendOffsets[r] + sendCounts[r]);
      outBytes = std::max(outBytes, recvOffsets[r] + recvCounts[r]);
    }
    char *send = stage(in, inBytes, inBytes + outBytes, what);
    char *recv = send + inBytes;
    nccl(ncclGroupStart(), what);
    for (int r = 0; r < world.size; ++r) {
      size_t i = static_cast<size_t>(r);
      nccl(ncclSend(send + sendOffsets[i], sendCounts[i], ncclUint8, r, comm,
                    stream),
           what);
      nccl(ncclRecv(recv + recvOffsets[i], recvCounts[i], ncclUint8, r, comm,
                    stream),
           what);
    }
    nccl(ncclGroupEnd(), what);
    finish(recv, out, outBytes, what);
  }
  [[noreturn]] void abort(int code) noexcept override {
    if (comm)
      ncclCommAbort(comm);
    comm = nullptr;
    world.abort(code);
  }

private:
  MpiWorld world;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  char *buffer = nullptr;
  size_t capacity = 0;

  void cuda(cudaError_t rc, const char *what) const {
    if (rc != cudaSuccess)
      throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)));
  }
  void nccl(ncclResult_t rc, const char *what) const {
    if (rc != ncclSuccess && rc != ncclInProgress)
      throw Error(fmt::format("{} failed (NCCL): {}", what,
                              ncclGetErrorString(rc)));
  }
  /// Copies `bytes` of `in` to the start of a device buffer of at least
  /// `total` bytes, and returns it.
  char *stage(const void *in, size_t bytes, size_t total, const char *what) {
    if (total > capacity) {
      if (buffer)
        cuda(cudaFree(buffer), what);
      buffer = nullptr;
      cuda(cudaMalloc(reinterpret_cast<void **>(&buffer), total), what);
      capacity = total;
    }
    if (bytes)
      cuda(cudaMemcpyAsync(buffer, in, bytes, cudaMemcpyHostToDevice, stream),
           what);
    return buffer;
  }
  /// Waits for the stream against the timeout, then copies the result out.
  void finish(const char *recv, void *out, size_t bytes, const char *what) {
    if (bytes)
      cuda(cudaMemcpyAsync(out, recv, bytes, cudaMemcpyDeviceToHost, stream),
           what);
    using clock = std::chrono::steady_clock;
    auto deadline = clock::now() +
                    std::chrono::duration_cast<clock::duration>(
                        std::chrono::duration<double>(world.timeout));
    for (unsigned spin = 0;; ++spin) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess)
        return;
      if (q != cudaErrorNotReady)
        cuda(q, what);
      ncclResult_t async = ncclSuccess;
      nccl(ncclCommGetAsyncError(comm, &async), what);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm);
        comm = nullptr;
        nccl(async, what);
      }
      if (clock::now() > deadline) {
        ncclCommAbort(comm);
        comm = nullptr;
        throw Error(fmt::format(
            "{} did not complete within {} s: another rank stopped "
            "answering (killed, stuck, or failed without ending the job); "
            "ending the job (--comm-timeout sets the limit)",
            what, world.timeout));
      }
      if (spin > 100)
        std::this_thread::sleep_for(
            std::chrono::microseconds(spin > 2000 ? 1000 : 50));
    }
  }
};
} // namespace

extern "C" __attribute__((visibility("default"))) modrt::Communicator *
modrt_comm_plugin_create(const modrt::CommOptions *options, char *error,
                         size_t errorSize) {
  try {
    return new NcclComm(*options);
  } catch (const std::exception &e) {
    std::snprintf(error, errorSize, "%s", e.what());
    return nullptr;
  }
}
