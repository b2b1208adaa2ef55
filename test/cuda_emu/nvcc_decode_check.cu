//===- nvcc_decode_check.cu - Instantiates the CUDA decode kernels --------===//
//
// Not a test of its own (the name stays out of the *Test.cpp glob): compiled
// by hand with nvcc to check that every decode wrapper instantiates for real
// model shapes and that ptxas neither fails nor spills:
//   nvcc -std=c++17 -O3 -arch=sm_90a -Xptxas -v -c nvcc_decode_check.cu
// (from compiler/lib/Target/Cuda/prelude with -I., or with -I to it). The
// preludes are included in the emitter's order, so name clashes show too.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "CudaKernelsDecode.cuh"
#include "GemmPlanHooks.h" // the plan of calls that name none

namespace {

/// Every decode wrapper of a model with d_model D, H heads and seq_len S
/// (a step's router, gather + RMSNorm and gated scatter are generated row
/// kernels, compiled by the package tests).
template <int S, int D, int H>
void instantiate(const float *x, int64_t B, const int32_t *positions,
                 const uint8_t *active, int32_t *pos, int64_t *seg,
                 const float *w, float *r, int32_t *mask, float *a, float *kc,
                 float *vc, int32_t *counts, float *scratch,
                 cudaStream_t stream) {
  using namespace modk_cuda;
  decode_rows<S>(positions, active, B, pos, seg, stream);
  decode_select(B, r, positions, active, pos, seg, mask, stream);
  decode_attention<S, H, D / H>(x, x, x, B, seg, pos, active, kc, vc, counts,
                                a, stream);
  decode_attention<S, H, D / H>(x, x, x, B, seg, pos, active, kc, vc, counts,
                                a, scratch, stream);
  // A bf16 model's cache.
  bf16 *kb = reinterpret_cast<bf16 *>(kc), *vb = reinterpret_cast<bf16 *>(vc);
  decode_attention<S, H, D / H>(x, x, x, B, seg, pos, active, kb, vb, counts,
                                a, scratch, stream);
  // Its q, k and v stored as bf16 (modk-store-bf16).
  const bf16 *xb = reinterpret_cast<const bf16 *>(x);
  decode_attention<S, H, D / H>(xb, xb, xb, B, seg, pos, active, kb, vb, counts,
                                a, scratch, stream);
}

} // namespace

void modc_decode_check(const float *x, int64_t B, const int32_t *positions,
                       const uint8_t *active, int32_t *pos, int64_t *seg,
                       const float *w, float *r, int32_t *mask, float *a,
                       float *kc, float *vc, int32_t *counts, float *scratch,
                       cudaStream_t stream) {
  // examples/tiny-mod.json: d_model 128, 4 heads, seq_len 256.
  instantiate<256, 128, 4>(x, B, positions, active, pos, seg, w, r, mask, a,
                           kc, vc, counts, scratch, stream);
  // A 2048-wide model: 16 heads of 128, seq_len 2048.
  instantiate<2048, 2048, 16>(x, B, positions, active, pos, seg, w, r, mask, a,
                              kc, vc, counts, scratch, stream);
}
