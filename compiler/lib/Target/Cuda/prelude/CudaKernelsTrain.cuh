//===- CudaKernelsTrain.cuh - CUDA training kernels for models -*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The training kernels of modc's CUDA target that are not generated: the
/// launches of the AdamW step's gradient norm, whose sum adamFinish
/// finishes (the split of a batch's tokens is in CudaKernels.cuh; the
/// losses, the row kernels, the embedding's gradient and the AdamW step's
/// norm terms and update are generated from modk.rows and modk.optimizer).
/// The products' gradients (linear_dgrad, linear_wgrad) sit with the
/// forward products in CudaKernels.cuh; attention's gradient is flash
/// attention's backward in the mainloop library
/// (Mainloops/Cuda/FlashAttentionGrad.cuh), included below. The
/// conventions are CudaCommon.cuh's: device pointers, row counts on the
/// device, the stream last.
///
/// Determinism: no kernel here uses float atomics. The gradient norm writes
/// per-chunk partials that adamFinish sums in a fixed order, so results are
/// bit-identical from run to run. Those partials live in caller-provided
/// scratch of adamw_scratch_bytes.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_KERNELS_TRAIN_INCLUDED
#define MODC_CUDA_KERNELS_TRAIN_INCLUDED

#ifndef MODC_CUDA_COMMON_INCLUDED
#include "CudaCommon.cuh"
#endif
#ifndef MODC_CUDA_KERNELS_INCLUDED
#include "CudaKernels.cuh" // with the mainloops (mma3xTf32, cp.async)
#endif
// Flash attention's backward (Mainloops/Cuda), pasted before this file in a
// package.
#ifndef MODC_CUDA_FLASH_ATTENTION_GRAD_INCLUDED
#include "FlashAttentionGrad.cuh"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace modk_cuda {

//===----------------------------------------------------------------------===//
// Optimiser
//===----------------------------------------------------------------------===//

namespace train_detail {

constexpr int64_t kAdamCtlBytes = 16;
static_assert(sizeof(AdamCtl) <= kAdamCtlBytes, "AdamCtl grew");

template <int Unused>
__global__ void adamFinish(const double *partial, int64_t count,
                           float clip_norm, float *grad_norm, AdamCtl *ctl) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    acc += partial[i];
  const double squares = blockSum(acc, scratch);
  if (threadIdx.x == 0) {
    const double norm = sqrt(squares);
    if (grad_norm)
      *grad_norm = static_cast<float>(norm);
    ctl->squares = squares;
    ctl->finite = norm <= 1.7976931348623157e308 ? 1 : 0; // false for NaN
    ctl->scale = clip_norm > 0 && norm > clip_norm
                     ? static_cast<float>(clip_norm / norm)
                     : 1.0f;
  }
}

} // namespace train_detail

/// Chunks of kNormChunk elements in `n` elements.
inline int64_t adamChunks(int64_t n) {
  return ceilDiv(n > 0 ? n : 0, train_detail::kNormChunk);
}

/// Bytes of device scratch adamw_norm needs: 16 bytes of state, then a
/// double per chunk of every parameter.
inline int64_t adamw_scratch_bytes(const int64_t *sizes, int nparams) {
  int64_t chunks = 0;
  for (int i = 0; i < nparams; ++i)
    chunks += adamChunks(sizes[i]);
  return train_detail::kAdamCtlBytes + chunks * int64_t(sizeof(double));
}

namespace train_detail {
/// The parameter table on the device, and what was last uploaded into it.
struct AdamTable {
  AdamTensor *device = nullptr;
  size_t capacity = 0;
  std::vector<AdamTensor> uploaded;
};
inline AdamTable &adamTable() {
  static AdamTable table;
  return table;
}
} // namespace train_detail

/// The device copy of `tensors`, uploaded only when it differs from the
/// last one: the device pointers, sizes and flags stay the same from step
/// to step, so a training run uploads it once. Null where no device memory
/// is left.
inline const AdamTensor *adamw_tensors(const std::vector<AdamTensor> &tensors,
                                       cudaStream_t stream) {
  train_detail::AdamTable &t = train_detail::adamTable();
  const size_t bytes = tensors.size() * sizeof(AdamTensor);
  if (t.uploaded.size() == tensors.size() &&
      std::memcmp(t.uploaded.data(), tensors.data(), bytes) == 0)
    return t.device;
  if (t.capacity < tensors.size()) {
    cudaFree(t.device);
    t.device = nullptr;
    t.capacity = 0;
    t.uploaded.clear();
    void *p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess)
      return nullptr;
    t.device = static_cast<AdamTensor *>(p);
    t.capacity = tensors.size();
  }
  // `uploaded` is the source and lives on: a copy from pageable memory has
  // read it by the time the call returns, and it changes only here.
  t.uploaded = tensors;
  if (cudaMemcpyAsync(t.device, t.uploaded.data(), bytes,
                      cudaMemcpyHostToDevice, stream) != cudaSuccess) {
    t.uploaded.clear();
    return nullptr;
  }
  return t.device;
}

/// The first half of an optimizer step: the global gradient norm
/// sqrt(sum of the terms) (f64, fixed order) into *grad_norm (device float,
/// may be null), and the step's device state, which it returns: the clip
/// factor clip_norm > 0 && norm > clip_norm ? clip_norm / norm : 1 and
/// whether the norm is finite. `normPartial` is the package's generated
/// modc_optimizer_norm: one launch, a block's partial per chunk of every
/// parameter (`chunks` of them), which adamFinish adds in chunk order. The
/// generated modc_optimizer_update then updates every parameter in one
/// launch (nothing where the norm is not finite). `tensors`: the device
/// table of adamw_tensors. `scratch`: device memory of
/// adamw_scratch_bytes bytes, 8-byte aligned. Nothing waits on the host.
inline const AdamCtl *adamw_norm(void (*normPartial)(const AdamTensor *, int,
                                                     double *),
                                 const AdamTensor *tensors, int count,
                                 int64_t chunks, float clip_norm,
                                 float *grad_norm, void *scratch,
                                 cudaStream_t stream) {
  using namespace train_detail;
  AdamCtl *ctl = static_cast<AdamCtl *>(scratch);
  double *partial = reinterpret_cast<double *>(
      static_cast<unsigned char *>(scratch) + kAdamCtlBytes);
  if (chunks > 0)
    MODC_LAUNCH(normPartial, unsigned(chunks), detail::kThreads, 0, stream,
                tensors, count, partial);
  auto fin = adamFinish<0>;
  MODC_LAUNCH(fin, 1, 256, 0, stream, static_cast<const double *>(partial),
              chunks, clip_norm, grad_norm, ctl);
  return ctl;
}

} // namespace modk_cuda

#endif // MODC_CUDA_KERNELS_TRAIN_INCLUDED
