// Compile-only check of the CUDA forward prelude with nvcc (not a test: the
// name keeps it out of the cuda_emu_tests glob). Instantiates every wrapper
// for the shapes of examples/tiny-mod.json and for d_model 1024 / 2048. The
// row kernels modc generates (modk.rows) are not in the prelude; the package
// tests compile them (test/lit/modc/*cuda-package.test):
//   nvcc -std=c++17 -O3 -arch=sm_90a -Xptxas -v -Icompiler/lib/Target/Cuda/prelude \
//        -c test/cuda_emu/nvcc_forward_check.cu -o /tmp/x.o
#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "CudaKernelsTrain.cuh" // the wgmma attention gradient (sm_90a only)
#include "GemmPlanHooks.h" // the plan of calls that name none

namespace {

template <int D, int H, int FF, int S, int V, int K, int HID>
void instantiate(cudaStream_t st) {
  using namespace modk_cuda;
  constexpr int HD = D / H;
  const float *cf = nullptr;
  float *f = nullptr;
  const int64_t *rows = nullptr;
  int64_t *seg = nullptr;
  int32_t *pos = nullptr, *mask = nullptr;
  const int32_t *tok = nullptr;
  const int64_t B = 8, maxRows = B * S;
  identity_segments<S>(B, pos, seg, st);
  linear<D, D>(cf, rows, maxRows, cf, f, st);
  linear<V, D>(cf, rows, maxRows, cf, f, st);
  linear_dgrad<D, D>(cf, rows, maxRows, cf, f, true, st);
  linear_dgrad<FF, D>(cf, rows, maxRows, cf, f, false, st);
  linear_wgrad<D, D>(cf, rows, maxRows, cf, f, st);
  linear_wgrad<FF, D>(cf, rows, maxRows, cf, f, st);
  linear_wgrad<D, D>(cf, rows, maxRows, cf, f, f, st); // split over the rows
  linear_wgrad<FF, D>(cf, rows, maxRows, cf, f, f, st);
  (void)linear_wgrad_scratch_floats<D, D>(maxRows);
  select_topk<S, K>(cf, B, pos, seg, mask, st);
  select_causal<S>(cf, B, pos, seg, mask, st);
  // The predictor's f32 products (fc1, and its weight gradient).
  linear<HID, D>(cf, rows, maxRows, cf, f, st);
  linear_wgrad<HID, D>(cf, rows, maxRows, cf, f, f, st);
  causal_attention<H, HD>(cf, cf, cf, B, seg, pos, S, f, st);
  cache_append<S, D>(cf, cf, B, seg, pos, tok, f, f, mask, st);
}

} // namespace

/// Attention at head dims off the models above: 40 and 72 (tensor-core
/// kernel, one and two P V batches), 20 (SIMT kernel).
void attentionHeadDims(cudaStream_t st) {
  using namespace modk_cuda;
  const float *cf = nullptr;
  float *f = nullptr;
  const int64_t *seg = nullptr;
  const int32_t *pos = nullptr;
  causal_attention<8, 40>(cf, cf, cf, 8, seg, pos, 256, f, st);
  causal_attention<8, 72>(cf, cf, cf, 8, seg, pos, 256, f, st);
  causal_attention<8, 20>(cf, cf, cf, 8, seg, pos, 256, f, st);
}

/// The products of a bf16 model (operands rounded to bf16, bf16 mma), the
/// rounding of q, k, v, attention on bf16 inputs, and training's buffers
/// stored as bf16.
template <int D, int H, int FF, int V>
void instantiateBf16(cudaStream_t st) {
  using namespace modk_cuda;
  const float *cf = nullptr;
  float *f = nullptr;
  const int64_t *rows = nullptr;
  const int32_t *pos = nullptr;
  const int64_t maxRows = 8 * 2048;
  linear<D, D, true>(cf, rows, maxRows, cf, f, st);
  linear<V, D, true>(cf, rows, maxRows, cf, f, st);
  linear<FF, D, true>(cf, rows, maxRows, cf, f, st);
  linear_dgrad<FF, D, true>(cf, rows, maxRows, cf, f, true, st);
  linear_dgrad<D, FF, true>(cf, rows, maxRows, cf, f, false, st);
  linear_wgrad<FF, D, true>(cf, rows, maxRows, cf, f, st);
  linear_wgrad<D, D, true>(cf, rows, maxRows, cf, f, f, st); // split
  // Training's stored bf16 activations: the weight gradients' B operand,
  // the activations' outputs.
  const bf16 *cb = nullptr;
  linear_wgrad<FF, D, true>(cf, rows, maxRows, cb, f, st);
  linear_wgrad<D, FF, true>(cf, rows, maxRows, cb, f, f, st); // split
  causal_attention<H, D / H, true>(cf, cf, cf, 8, rows, nullptr, 2048, f, st);
  // q, k and v stored as bf16 (modk-store-bf16), the output too where only
  // products read it.
  bf16 *b = nullptr;
  causal_attention<H, D / H, true>(cb, cb, cb, 8, rows, nullptr, 2048, b, st);
  // sm_90a's wgmma attention (head dims 64 and 128; others take the mma
  // kernel), with f32 and bf16 outputs, and grouped-query.
  causal_attention<H, D / H, true, 2>(cb, cb, cb, 8, rows, nullptr, 2048, b, st);
  causal_attention<H, D / H, true, 2>(cb, cb, cb, 8, rows, nullptr, 2048, f, st);
  causal_attention<H, D / H, true, 2, H / 4>(cb, cb, cb, 8, rows, nullptr, 2048,
                                              b, st);
  // Its gradient with the key side on wgmma (attnGradKeyWgmma), dv bf16 and
  // f32, o bf16 (D reads it rounded) and f32, and grouped-query
  // (test/cuda_emu/nvcc_train_check.cu compiles for sm_80 too: the mma.sync
  // gradient only).
  causal_attention_grad<H, D / H, true, 2>(cb, cb, cb, cb, cf, 8, rows, pos,
                                           2048, f, f, b, true, f, st);
  causal_attention_grad<H, D / H, true, 2>(cb, cb, cb, cf, cf, 8, rows, pos,
                                           2048, f, f, f, false, f, st);
  causal_attention_grad<H, D / H, true, 2, H / 4>(
      cb, cb, cb, cf, cf, 8, rows, pos, 2048, f, f, b, false, f, st);
  bf16 *cache = nullptr;
  cache_append<2048, D>(cf, cf, 8, rows, pos, pos, cache, cache, nullptr, st);
}

void modcForwardCheck(cudaStream_t st) {
  attentionHeadDims(st);
  instantiateBf16<128, 4, 512, 256>(st);
  instantiateBf16<1024, 16, 4096, 32000>(st);
  instantiateBf16<2048, 16, 8192, 32000>(st);
  instantiate<128, 4, 512, 256, 256, 32, 128>(st);
  instantiate<1024, 16, 4096, 2048, 32000, 256, 256>(st);
  instantiate<2048, 16, 8192, 2048, 32000, 256, 512>(st);
}
