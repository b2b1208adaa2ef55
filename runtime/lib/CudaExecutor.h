//===- CudaExecutor.h - Running CUDA packages from host buffers -*- C++ -*-===//
//
// The runtime's public calls (Package::forward, grad, eval, adamwStep, and
// the raw calls DecodeSession makes) build argument blocks over host
// memory. For a CUDA package this executor mirrors them on the device
// through the package's own device API (modrt/abi.h, modc_cuda_*), so modrt
// links no CUDA: inputs are copied up, the entry runs, outputs are copied
// down. A KV cache stays on the device between decode steps (its host buffer
// is only the key), so a decode step moves tokens, counts and logits, not
// the cache.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_LIB_CUDAEXECUTOR_H
#define MODRT_LIB_CUDAEXECUTOR_H

#include "modrt/Package.h"
#include "modrt/abi.h"

#include <map>
#include <memory>
#include <string>

namespace modrt {

/// The entry points of a package, as resolved from libmodel.so.
struct EntryPoints {
  decltype(&::modc_forward) forward = nullptr;
  decltype(&::modc_grad) grad = nullptr;
  decltype(&::modc_eval) eval = nullptr;
  decltype(&::modc_eval_causal) evalCausal = nullptr;
  decltype(&::modc_adamw) adamw = nullptr;
  decltype(&::modc_decode) decode = nullptr;
  decltype(&::modc_last_error) lastError = nullptr;
};

class CudaExecutor {
public:
  /// Resolves the device API from `handle`; throws Error naming a missing
  /// symbol. The GPU is not touched until the first call.
  CudaExecutor(void *handle, std::string dir, const Manifest &manifest,
               EntryPoints entries);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor &) = delete;
  CudaExecutor &operator=(const CudaExecutor &) = delete;

  /// The package's architecture ("sm_90a").
  std::string arch() const;

  /// Marks a host pointer table (one pointer per param) as resident: while
  /// pinned, a table uploaded from it is not uploaded again, and what grad
  /// and adamw write into it stays on the device until syncHost (see
  /// Package::keepOnDevice). Pins nest; the last unpin brings the host copy
  /// up to date.
  void pin(const std::vector<const float *> &table);
  void unpin(const std::vector<const float *> &table);
  /// Copies into the host table the device values that are newer (no-op
  /// when the host copy is current).
  void syncHost(const std::vector<const float *> &table);

  uint64_t bytesToDevice() const { return copiedToDevice; }
  uint64_t bytesToHost() const { return copiedToHost; }

  // Each runs the entry on device mirrors of the host buffers in `args`
  // (sized by the manifest and args.batch) and copies the outputs back;
  // throws Error with the package's message on failure.
  void forward(const modc_forward_args &args, uint64_t workspaceBytes);
  void grad(const modc_grad_args &args, uint64_t workspaceBytes);
  /// modc_eval, or modc_eval_causal when `causal`.
  void eval(const modc_eval_args &args, uint64_t workspaceBytes, bool causal);
  void adamw(const modc_adamw_args &args);
  /// Whether the package exports modc_train_step (one CUDA graph a step).
  bool hasTrainStep() const { return api.trainStep != nullptr; }
  /// grad then adamw through modc_train_step: the losses and the norm are
  /// read after the step. A non-finite loss or norm is reported in them,
  /// not thrown: the package then updated nothing.
  void trainStep(const modc_grad_args &grad, const modc_adamw_args &adamw,
                 uint64_t workspaceBytes);
  void decode(const modc_decode_args &args, uint64_t workspaceBytes,
              uint64_t kvCacheBytes);

private:
  struct DeviceApi {
    decltype(&::modc_cuda_init) init = nullptr;
    decltype(&::modc_cuda_arch) arch = nullptr;
    decltype(&::modc_cuda_alloc) alloc = nullptr;
    decltype(&::modc_cuda_free) free = nullptr;
    decltype(&::modc_cuda_copy) copy = nullptr;
    decltype(&::modc_cuda_memset) memset = nullptr;
    decltype(&::modc_cuda_sync) sync = nullptr;
    /// Optional (null in older packages).
    decltype(&::modc_cuda_params_version) paramsVersion = nullptr;
    decltype(&::modc_train_step) trainStep = nullptr;
  };
  struct Slot {
    void *device = nullptr;
    uint64_t capacity = 0;
  };

  /// Initialises the device on first use; throws the package's message.
  void ready();
  /// Throws Error("<what> failed (status N): <package message>") unless OK.
  void check(int32_t status, const char *what);
  /// A device buffer of at least `bytes` kept under `role` between calls.
  void *slot(const std::string &role, uint64_t bytes);
  /// slot(role, bytes) holding a copy of `host`.
  void *upload(const std::string &role, const void *host, uint64_t bytes);
  /// Copy (and count) `bytes` to or from the device; nothing when the host
  /// pointer is null or bytes is 0.
  void copyToDevice(void *device, const void *host, uint64_t bytes);
  void download(void *host, const void *device, uint64_t bytes);
  /// Device copies of every param (`table` role prefix), in manifest order.
  /// The table itself is kept, so its address is the same on every call (a
  /// decode step's CUDA graph is replayed only while its arguments repeat).
  const std::vector<float *> &uploadParams(const std::string &table,
                                           const float *const *host);
  const std::vector<float *> &paramSlots(const std::string &table);
  uint64_t paramBytes(size_t i) const;

  std::string dir;
  const Manifest &manifest;
  EntryPoints entries;
  DeviceApi api;
  bool initialised = false;
  uint64_t copiedToDevice = 0, copiedToHost = 0;
  std::map<std::string, Slot> slots;
  std::map<std::string, std::vector<float *>> tables;
  /// The version declared for the device "params" table
  /// (modc_cuda_params_version): a new one at every copy into it.
  uint64_t paramsVersion = 0;
  /// Pinned host tables, with their pin counts.
  std::map<std::vector<const float *>, int> resident;
  /// What a device table holds for a pinned host table: its values (host
  /// empty: no pinned host table), and whether they are newer than the
  /// host's (written by grad or adamw, not yet brought back).
  struct Mirror {
    std::vector<const float *> host;
    bool newer = false;
  };
  std::map<std::string, Mirror> mirrors;
  std::vector<const float *> key(const float *const *host) const {
    return {host, host + manifest.params.size()};
  }
  /// Device `table` is about to be overwritten for host table `next`: the
  /// pinned host table it was newer than gets those values first.
  void flushBefore(const std::string &table,
                   const std::vector<const float *> &next);
  /// After an entry wrote device `table` for host `host`: a pinned host
  /// table is left behind (brought back later by syncHost), any other gets
  /// the values now.
  void deliver(const std::string &table, const std::vector<float *> &device,
               float *const *host);
};

} // namespace modrt

#endif // MODRT_LIB_CUDAEXECUTOR_H
