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
/// per-block partials that adamFinish sums in a fixed order, so results are
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

/// Bytes of device scratch adamw_norm needs (16 bytes of state, then a double
/// per 8192 gradient elements of each tensor).
inline int64_t adamw_scratch_bytes(const int64_t *sizes, int nparams) {
  int64_t blocks = 0;
  for (int i = 0; i < nparams; ++i)
    blocks += ceilDiv(sizes[i] > 0 ? sizes[i] : 0, train_detail::kNormChunk);
  return train_detail::kAdamCtlBytes + blocks * int64_t(sizeof(double));
}

/// The first half of an optimizer step: the global gradient norm
/// sqrt(sum of the terms) (f64, fixed order) into *grad_norm (device float,
/// may be null), each tensor's terms summed by `normPartial`, the
/// package's generated modc_optimizer_norm (a block's partial per
/// kNormChunk elements), and the step's device state, which it returns: the
/// clip factor
/// clip_norm > 0 && norm > clip_norm ? clip_norm / norm : 1 and whether the
/// norm is finite. The generated modc_optimizer_update then updates each
/// tensor (nothing where the norm is not finite); the host reads *grad_norm
/// back to report it. grads: a host array of nparams device pointers;
/// sizes: a host array. `scratch`: device memory of
/// adamw_scratch_bytes(sizes, nparams) bytes, 8-byte aligned.
inline const AdamCtl *adamw_norm(void (*normPartial)(const float *, int64_t,
                                                     double *),
                                 const float *const *grads,
                                 const int64_t *sizes, int nparams,
                                 float clip_norm, float *grad_norm,
                                 void *scratch, cudaStream_t stream) {
  using namespace train_detail;
  AdamCtl *ctl = static_cast<AdamCtl *>(scratch);
  double *partial = reinterpret_cast<double *>(
      static_cast<unsigned char *>(scratch) + kAdamCtlBytes);
  int64_t off = 0;
  for (int i = 0; i < nparams; ++i) {
    const int64_t nb = ceilDiv(sizes[i] > 0 ? sizes[i] : 0, kNormChunk);
    if (nb > 0)
      MODC_LAUNCH(normPartial, (unsigned)nb, detail::kThreads, 0, stream,
                  grads[i], sizes[i], partial + off);
    off += nb;
  }
  auto fin = adamFinish<0>;
  MODC_LAUNCH(fin, 1, 256, 0, stream, static_cast<const double *>(partial),
              off, clip_norm, grad_norm, ctl);
  return ctl;
}

} // namespace modk_cuda

#endif // MODC_CUDA_KERNELS_TRAIN_INCLUDED
