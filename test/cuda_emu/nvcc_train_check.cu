// nvcc compile check of CudaKernelsTrain.cuh (not part of the *Test.cpp
// glob): pastes the preludes as the CUDA emitter does and instantiates every
// training wrapper at examples/tiny-mod.json's shapes (d_model 128, 4 heads,
// d_ff 512, seq_len 256) and at d_model 1024, 16 heads, d_ff 4096, seq_len
// 2048, and at head dim 128 (the losses are generated row kernels, compiled
// with a package). Compile only:
//   nvcc -std=c++17 -O3 -arch=sm_90a -Xptxas -v -c nvcc_train_check.cu \
//     -I compiler/lib/Target/Cuda/prelude -o /tmp/x.o
#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "CudaKernelsTrain.cuh"
#include "CudaKernelsDecode.cuh" // all preludes together, as in model.cu
#include "GemmPlanHooks.h" // the plan of calls that name none

namespace {

// A stand-in for a package's generated modc_optimizer_norm, which
// adamw_norm launches.
__global__ void normTerms(const modk_cuda::AdamTensor *tensors, int count,
                          double *partial) {
  const modk_cuda::AdamTensor &t =
      modk_cuda::adamTensorOf(tensors, count, blockIdx.x);
  if (threadIdx.x == 0 && t.n > 0)
    partial[blockIdx.x] = double(t.g[0]) * t.g[0];
}

template <int D, int H, int FF, int S>
void instantiate(cudaStream_t st) {
  using namespace modk_cuda;
  constexpr int HD = D / H;
  float *f = nullptr;
  int32_t *i32 = nullptr;
  int64_t *seg = nullptr;
  const int64_t B = 2, maxRows = B * S;
  split_tokens<S>(i32, B, i32, i32, st);
  causal_attention_grad<H, HD>(f, f, f, f, f, B, seg, i32, S, f, f, f, false, f,
                               st);
  // A bf16 model's (q, k, v bf16: fewer mmas).
  causal_attention_grad<H, HD, true>(f, f, f, f, f, B, seg, i32, S, f, f, f,
                                     false, f, st);
  // Its q, k, v and o stored as bf16 (modk-store-bf16; D reads o rounded),
  // and dv.
  const bf16 *cb = nullptr;
  bf16 *b = nullptr;
  causal_attention_grad<H, HD, true>(cb, cb, cb, cb, f, B, seg, i32, S, f, f, b,
                                     true, f, st);
  const std::vector<AdamTensor> tensors = {
      {f, f, f, f, nullptr, D, 0, 1}};
  adamw_norm(normTerms, adamw_tensors(tensors, st), 1, adamChunks(D), 1.0f, f,
             f, st);
}

} // namespace

void modc_nvcc_train_check(cudaStream_t st) {
  instantiate<128, 4, 512, 256>(st);
  instantiate<1024, 16, 4096, 2048>(st);
  instantiate<2048, 16, 8192, 1024>(st); // head dim 128
  // Attention backward at head dims 8 and 72 (9 n8 tiles in 3 chunks).
  float *f = nullptr;
  int32_t *i32 = nullptr;
  int64_t *seg = nullptr;
  modk_cuda::causal_attention_grad<2, 8>(f, f, f, f, f, 2, seg, i32, 256, f, f,
                                         f, false, f, st);
  modk_cuda::causal_attention_grad<4, 72>(f, f, f, f, f, 2, seg, i32, 256, f, f,
                                          f, false, f, st);
  // The SIMT kernels: head dim 12 (no tensor-core kernel), and 10, whose
  // columns are padded to 12.
  modk_cuda::causal_attention_grad<3, 12>(f, f, f, f, f, 2, seg, i32, 256, f, f,
                                          f, false, f, st);
  modk_cuda::causal_attention_grad<2, 10>(f, f, f, f, f, 2, seg, i32, 256, f, f,
                                          f, false, f, st);
}
