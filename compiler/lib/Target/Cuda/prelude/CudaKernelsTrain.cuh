//===- CudaKernelsTrain.cuh - CUDA training kernels for models -*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The backward (training) kernels of modc's CUDA target: the losses, the
/// gradient of every forward kernel, and the AdamW step. Each host wrapper
/// mirrors the CPU prelude function of the same name in CpuKernelsTrain.h
/// (same template parameters, same semantics), with the conventions of
/// CudaCommon.cuh: device pointers; where the CPU kernel takes `int64_t rows`
/// this one takes `const int64_t *rows` (device, = seg + nseg) and a static
/// bound `int64_t max_rows`; kernels that take segments (nseg, seg) size
/// their grid by nseg * S, or, for attention, by `max_seg_rows` after `pos`,
/// as the forward kernels in CudaKernels.cuh do; the stream comes last.
///
/// Determinism: no kernel here uses float atomics. Every reduction over rows
/// (parameter gradients, losses, the gradient norm) writes per-block partials
/// that a second kernel sums in a fixed order, so results are bit-identical
/// from run to run. Those partials live in caller-provided scratch whose size
/// is given by the `*_scratch_floats` / `*_scratch_bytes` helpers next to each
/// wrapper.
///
/// Scatter-style gradients (gather_grad, gate_scale_scatter_grad) assume, as
/// the CPU does, that no two gathered rows map to the same stream row.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_KERNELS_TRAIN_INCLUDED
#define MODC_CUDA_KERNELS_TRAIN_INCLUDED

#ifndef MODC_CUDA_COMMON_INCLUDED
#include "CudaCommon.cuh"
#endif
#ifndef MODC_CUDA_KERNELS_INCLUDED
#include "CudaKernels.cuh" // the tensor-core building blocks (mma3xTf32, cp.async)
#endif

#include <cmath>
#include <cstdint>

namespace modk_cuda {

/// Router gate kinds (the template parameter G of gate_scale_scatter_grad),
/// numbered as modk_cpu::Gate: g = r, g = sigmoid(r), g = 1.
namespace train_gate {
constexpr int kLinear = 0, kSigmoid = 1, kOne = 2;
} // namespace train_gate

namespace train_detail {

/// Rows per block of the row-reduction kernels (one partial row each).
constexpr int kRB = 32;

/// Threads of a block that covers W columns: a multiple of 32, at most 256.
template <int W> __host__ __device__ constexpr int colThreads() {
  return W >= 256 ? 256 : ((W + 31) / 32) * 32;
}


__device__ __forceinline__ float sigmoidf_(float z) {
  return 1.0f / (1.0f + expf(-z));
}

/// Where the columns of a row reduction go: column w < n0 to p0[w], then n1
/// columns to p1, the rest to p2 (all accumulate).
struct ColOut {
  float *p0, *p1, *p2;
  int n0, n1;
};

/// out[w] += sum over the blocks b < ceil(rows / kRB) of partial[b][w], in
/// block order. rows = *rowsDev when given, else rowsHost.
template <int RB>
__global__ void reduceColumns(const float *partial, int W,
                              const int64_t *rowsDev, int64_t rowsHost,
                              ColOut out) {
  const int w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= W)
    return;
  const int64_t rows = rowsDev ? *rowsDev : rowsHost;
  const int64_t nb = (rows + RB - 1) / RB;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b)
    acc += partial[b * W + w];
  float *dst = w < out.n0             ? out.p0 + w
               : w < out.n0 + out.n1 ? out.p1 + (w - out.n0)
                                     : out.p2 + (w - out.n0 - out.n1);
  *dst += acc;
}

inline void launchReduceColumns(const float *partial, int W,
                                const int64_t *rowsDev, int64_t rowsHost,
                                ColOut out, cudaStream_t stream) {
  auto k = reduceColumns<kRB>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(W, 256), 256, 0, stream, partial, W,
              rowsDev, rowsHost, out);
}

} // namespace train_detail

/// Floats of scratch for a row reduction of width W over at most max_rows.
inline int64_t row_reduce_scratch_floats(int64_t max_rows, int64_t W) {
  return ceilDiv(max_rows > 0 ? max_rows : 0, train_detail::kRB) * W;
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

namespace train_detail {

template <int V, typename Out>
__global__ void __launch_bounds__(colThreads<V>())
    crossEntropyRows(const float *logits, const int32_t *targets, float scale,
                     Out *dlogits, double *rowLoss) {
  constexpr int T = colThreads<V>();
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  const int64_t i = blockIdx.x;
  const float *z = logits + i * V;
  const int t = targets[i];
  const float zt = z[t]; // before any write: dlogits may alias logits
  float mx = negInf();
  for (int c = threadIdx.x; c < V; c += T)
    mx = fmaxf(mx, z[c]);
  mx = blockMax(mx, fscratch);
  float part = 0.0f;
  for (int c = threadIdx.x; c < V; c += T)
    part += expf(z[c] - mx);
  const double sum = blockSum(part, dscratch);
  const float f = static_cast<float>(scale / sum);
  // Each thread rewrites only the columns it read; none without dlogits
  // (the eval entry: the loss alone).
  Out *dz = dlogits ? dlogits + i * V : nullptr;
  for (int c = threadIdx.x; dz && c < V; c += T) {
    float val = expf(z[c] - mx) * f;
    if (c == t)
      val -= scale;
    dz[c] = Out(val);
  }
  if (threadIdx.x == 0)
    rowLoss[i] = double(mx) + log(sum) - double(zt);
}

template <int Unused>
__global__ void crossEntropyFinish(const double *rowLoss, int64_t rows,
                                   float *losses) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x)
    acc += rowLoss[i];
  const double total = blockSum(acc, scratch);
  if (threadIdx.x == 0) {
    losses[1] = static_cast<float>(total / double(rows));
    losses[0] = losses[1];
    losses[2] = 0.0f;
  }
}

template <int S>
__global__ void bceKernel(const float *z, const int32_t *target, int64_t n,
                          float gradScale, double scale, double weight,
                          float *dz, float *losses) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double zi = z[i], ti = target[i] ? 1.0 : 0.0;
    const double e = exp(-fabs(zi));
    acc += fmax(zi, 0.0) - zi * ti + log1p(e);
    if (!dz) // the eval entry: the loss alone
      continue;
    const double sg = zi >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    dz[i] += static_cast<float>(double(gradScale) * (sg - ti));
  }
  const double total = blockSum(acc, scratch);
  if (threadIdx.x == 0) {
    losses[2] += static_cast<float>(total * scale);
    losses[0] += static_cast<float>(weight * total * scale);
  }
}

} // namespace train_detail

/// Bytes of scratch cross_entropy needs for `rows` rows (a double per row).
inline int64_t cross_entropy_scratch_bytes(int64_t rows) {
  return (rows > 0 ? rows : 0) * int64_t(sizeof(double));
}

/// Softmax cross-entropy over logits[rows, V] (rows = B * S, a host count),
/// targets in [0, V). Writes dlogits = scale * (softmax - onehot) (overwrite;
/// may alias logits, or be bf16: rounded, a bf16 model's logits gradient,
/// which only products read; null: none) and, on the device, losses[1] =
/// mean row loss, losses[0] = losses[1], losses[2] = 0 (what the CPU emitter
/// does on the host with modk_cpu::cross_entropy's sum). The row losses are
/// summed in double in a fixed order. `scratch`:
/// cross_entropy_scratch_bytes(rows).
template <int V, typename Out>
inline void cross_entropy(const float *logits, const int32_t *targets,
                          int64_t rows, float scale, Out *dlogits,
                          float *losses, double *scratch, cudaStream_t stream) {
  using namespace train_detail;
  if (rows > 0) {
    auto k = crossEntropyRows<V, Out>;
    MODC_LAUNCH(k, (unsigned)rows, colThreads<V>(), 0, stream, logits, targets,
                scale, dlogits, scratch);
  }
  auto f = crossEntropyFinish<0>;
  MODC_LAUNCH(f, 1, 256, 0, stream, scratch, rows, losses);
}

/// Binary cross-entropy with logits over the B*S entries of z (the causal
/// router loss), everything the CPU emitter's bce_loss does, on the device:
/// with sum = SUM of max(z,0) - z t + log(1 + e^-|z|) (double),
///   dz += (float)(weight * scale) * (sigmoid(z) - t)   (accumulate; none
///                                                       when dz is null),
///   losses[2] += (float)(sum * scale),
///   losses[0] += (float)(weight * sum * scale),
/// where the emitter passes scale = 1.0 / ((double)B * S * n_routed) and
/// weight = the op's weight. One block, fixed summation order; no scratch.
template <int S>
inline void bce_with_logits(const float *z, const int32_t *target, int64_t B,
                            double weight, double scale, float *dz,
                            float *losses, cudaStream_t stream) {
  auto k = train_detail::bceKernel<S>;
  const float gradScale = static_cast<float>(weight * scale);
  MODC_LAUNCH(k, 1, 256, 0, stream, z, target, B * S, gradScale, scale, weight,
              dz, losses);
}

//===----------------------------------------------------------------------===//
// Norm and elementwise gradients
//===----------------------------------------------------------------------===//

namespace train_detail {

template <int D>
__global__ void __launch_bounds__(colThreads<D>())
    rmsnormGradRows(const float *x, const int64_t *rowsp, const float *w,
                    float eps, const float *dy, float *dx, bool accumulate,
                    float *partial) {
  constexpr int T = colThreads<D>(), CT = (D + T - 1) / T;
  __shared__ float scratch[32];
  const int64_t rows = *rowsp;
  const int64_t i0 = int64_t(blockIdx.x) * kRB;
  if (i0 >= rows)
    return;
  const int64_t i1 = detail::minI64(rows, i0 + kRB);
  float pdw[CT], wr[CT];
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int d = threadIdx.x + c * T;
    pdw[c] = 0.0f;
    wr[c] = d < D ? w[d] : 0.0f;
  }
  for (int64_t i = i0; i < i1; ++i) {
    float xv[CT], gv[CT];
    float ss = 0.0f, dot = 0.0f;
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int d = threadIdx.x + c * T;
      xv[c] = d < D ? x[i * D + d] : 0.0f;
      gv[c] = d < D ? dy[i * D + d] : 0.0f;
      ss += xv[c] * xv[c];
      dot += gv[c] * wr[c] * xv[c];
    }
    ss = blockSum(ss, scratch);
    dot = blockSum(dot, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
    const float cc = dot * inv * inv / static_cast<float>(D);
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int d = threadIdx.x + c * T;
      if (d < D) {
        const float val = inv * (gv[c] * wr[c] - xv[c] * cc);
        dx[i * D + d] = accumulate ? dx[i * D + d] + val : val;
        pdw[c] += gv[c] * xv[c] * inv;
      }
    }
  }
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int d = threadIdx.x + c * T;
    if (d < D)
      partial[int64_t(blockIdx.x) * D + d] = pdw[c];
  }
}

template <int H, int HD, typename Out>
__global__ void ropeGradKernel(const float *dy, const int64_t *rowsp,
                               const int32_t *pos, float theta, Out *dx) {
  constexpr int Half = HD / 2;
  constexpr int T = colThreads<H * Half>();
  __shared__ float cs[Half], sn[Half];
  const int64_t i = blockIdx.x;
  if (i >= *rowsp)
    return;
  // The forward's angles (exactly modk_cpu::ropeRotate's), sin negated:
  // the inverse rotation.
  for (int j = threadIdx.x; j < Half; j += T) {
    const float2 a = detail::ropeAngle<HD>(pos[i], j, theta);
    cs[j] = a.x;
    sn[j] = -a.y;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < H * Half; e += T) {
    const int h = e / Half, j = e % Half;
    const int64_t at = (i * H + h) * HD + j;
    float x0 = dy[at], x1 = dy[at + Half];
    detail::ropeRotatePair(x0, x1, make_float2(cs[j], sn[j]));
    dx[at] = Out(x0);
    dx[at + Half] = Out(x1);
  }
}

} // namespace train_detail

/// Gradient of RMSNorm on [rows, D] (modk_cpu::rmsnorm_grad):
/// dx (+)= inv * (dy w - x * mean(dy w xhat) * inv), dw += sum over rows of
/// dy * xhat (always accumulates, deterministic). `scratch`:
/// rmsnorm_grad_scratch_floats<D>(max_rows) floats.
template <int D>
inline int64_t rmsnorm_grad_scratch_floats(int64_t max_rows) {
  return row_reduce_scratch_floats(max_rows, D);
}
template <int D>
inline void rmsnorm_grad(const float *x, const int64_t *rows, int64_t max_rows,
                         const float *w, float eps, const float *dy, float *dx,
                         float *dw, bool accumulate_dx, float *scratch,
                         cudaStream_t stream) {
  using namespace train_detail;
  if (max_rows <= 0)
    return;
  auto k = rmsnormGradRows<D>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(max_rows, kRB), colThreads<D>(), 0, stream,
              x, rows, w, eps, dy, dx, accumulate_dx, scratch);
  launchReduceColumns(scratch, D, rows, 0, ColOut{dw, dw, dw, D, 0}, stream);
}

/// Transpose of rope (modk_cpu::rope_grad): dx = dy[rows, H * HD] rotated
/// by minus the angle, angles formed in double as the CPU does. dx may be dy
/// (in place), or bf16 (rounded: modk-store-bf16, only products read it).
template <int H, int HD, typename Out>
inline void rope_grad(const float *dy, const int64_t *rows, int64_t max_rows,
                      const int32_t *pos, float theta, Out *dx,
                      cudaStream_t stream) {
  static_assert(HD % 2 == 0, "rope needs an even head dimension");
  if (max_rows <= 0)
    return;
  auto k = train_detail::ropeGradKernel<H, HD, Out>;
  MODC_LAUNCH(k, (unsigned)max_rows, train_detail::colThreads<H *(HD / 2)>(),
              0, stream, dy, rows, pos, theta, dx);
}

//===----------------------------------------------------------------------===//
// Embedding and token gradients
//===----------------------------------------------------------------------===//

namespace train_detail {

/// Vocabulary buckets of embed_grad: block b owns the table rows v with
/// v % kEmbedBuckets == b and adds the matching dx rows in row order.
constexpr int kEmbedBuckets = 256;

template <int D>
__global__ void __launch_bounds__(colThreads<D>())
    embedGradKernel(const int32_t *tokens, int64_t rows, const float *dx,
                    float *dtable) {
  constexpr int T = colThreads<D>(), CT = (D + T - 1) / T;
  __shared__ int32_t tok[T];
  const unsigned b = blockIdx.x, nb = gridDim.x;
  for (int64_t base = 0; base < rows; base += T) {
    const int64_t i = base + threadIdx.x;
    __syncthreads(); // the previous chunk is consumed
    tok[threadIdx.x] = i < rows ? tokens[i] : -1;
    __syncthreads();
    const int n = static_cast<int>(detail::minI64(T, rows - base));
    for (int e = 0; e < n; ++e) {
      const int32_t tk = tok[e];
      if (tk < 0 || unsigned(tk) % nb != b)
        continue;
      float *dst = dtable + int64_t(tk) * D;
      const float *src = dx + (base + e) * D;
#pragma unroll
      for (int c = 0; c < CT; ++c) {
        const int d = threadIdx.x + c * T;
        if (d < D)
          dst[d] += src[d];
      }
    }
  }
}

template <int S>
__global__ void splitTokensKernel(const int32_t *tokens, int64_t B,
                                  int32_t *inputs, int32_t *targets) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= B * S)
    return;
  const int64_t b = e / S, i = e % S;
  inputs[e] = tokens[b * (S + 1) + i];
  targets[e] = tokens[b * (S + 1) + i + 1];
}

} // namespace train_detail

/// dtable[tokens[i]] += dx[i] for i < rows (rows = B * S, host); dtable is
/// [V, D]. Tokens may repeat: each table row is owned by one block, which
/// adds its rows in row order, so the result is deterministic (and equal to
/// the CPU's). Tokens must be in [0, V).
template <int D>
inline void embed_grad(const int32_t *tokens, int64_t rows, const float *dx,
                       float *dtable, cudaStream_t stream) {
  using namespace train_detail;
  if (rows <= 0)
    return;
  // Any bucket count gives the same result (each table row has one owner).
  auto k = embedGradKernel<D>;
  MODC_LAUNCH(k, (unsigned)(rows < kEmbedBuckets ? rows : kEmbedBuckets),
              colThreads<D>(), 0, stream, tokens, rows, dx, dtable);
}

/// tokens [B, S + 1] -> inputs[b, i] = tokens[b, i], targets[b, i] =
/// tokens[b, i + 1] (both [B, S]).
template <int S>
inline void split_tokens(const int32_t *tokens, int64_t B, int32_t *inputs,
                         int32_t *targets, cudaStream_t stream) {
  if (B <= 0)
    return;
  auto k = train_detail::splitTokensKernel<S>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(B * S, 256), 256, 0, stream, tokens, B,
              inputs, targets);
}

//===----------------------------------------------------------------------===//
// Routing gradients
//===----------------------------------------------------------------------===//

namespace train_detail {

/// One warp per gathered row j (8 a block).
template <int S, int D, int G>
__global__ void scatterGradKernel(const float *dy, int64_t nseg,
                                  const int64_t *seg, const int32_t *pos,
                                  const float *r, const float *f, float *df,
                                  float *dr) {
  const int lane = threadIdx.x % kWarp;
  const int64_t j = int64_t(blockIdx.x) * (blockDim.x / kWarp) +
                    threadIdx.x / kWarp;
  if (j >= seg[nseg])
    return; // the whole warp leaves
  const int64_t s = segmentOf(seg, nseg, j);
  const int64_t t = s * S + pos[j];
  float g = 1.0f, gp = 0.0f;
  if (G == train_gate::kLinear) {
    g = r[t];
    gp = 1.0f;
  } else if (G == train_gate::kSigmoid) {
    g = sigmoidf_(r[t]);
    gp = g * (1.0f - g);
  }
  const float *dyt = dy + t * D, *fj = f + j * D;
  float *dfj = df + j * D;
  float dot = 0.0f;
  for (int d = lane; d < D; d += kWarp) {
    dfj[d] = g * dyt[d];
    dot += dyt[d] * fj[d];
  }
  dot = warpSum(dot);
  if (G != train_gate::kOne && lane == 0)
    dr[t] += gp * dot;
}

template <int S, int D>
__global__ void gatherGradKernel(const float *dxs, int64_t nseg,
                                 const int64_t *seg, const int32_t *pos,
                                 float *dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t j = int64_t(blockIdx.x) * (blockDim.x / kWarp) +
                    threadIdx.x / kWarp;
  if (j >= seg[nseg])
    return;
  const int64_t s = segmentOf(seg, nseg, j);
  float *dst = dx + (s * S + pos[j]) * D;
  const float *src = dxs + j * D;
  for (int d = lane; d < D; d += kWarp)
    dst[d] += src[d];
}

template <int D>
__global__ void __launch_bounds__(colThreads<D>())
    routerGradRows(const float *x, int64_t rows, const float *w,
                   const float *dr, float *dx, float *partial) {
  constexpr int T = colThreads<D>(), CT = (D + T - 1) / T;
  const int64_t i0 = int64_t(blockIdx.x) * kRB;
  if (i0 >= rows)
    return;
  const int64_t i1 = detail::minI64(rows, i0 + kRB);
  float pdw[CT], wr[CT];
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int d = threadIdx.x + c * T;
    pdw[c] = 0.0f;
    wr[c] = d < D ? w[d] : 0.0f;
  }
  for (int64_t t = i0; t < i1; ++t) {
    const float g = dr[t];
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int d = threadIdx.x + c * T;
      if (d < D) {
        dx[t * D + d] += g * wr[c];
        pdw[c] += g * x[t * D + d];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int d = threadIdx.x + c * T;
    if (d < D)
      partial[int64_t(blockIdx.x) * D + d] = pdw[c];
  }
}

/// C[m, n] (+)= sum_k A[m*sam + k*sak] * B[k*sbk + n*sbn]: a plain 32x32-tile
/// SIMT GEMM (256 threads, 4 outputs each) whose k order is fixed, for the
/// predictor's small products.
/// (No __launch_bounds__: with it nvcc 13 caps the kernel at 64 registers
/// and spills; without it, 72 registers and no spills.)
template <int Unused>
__global__ void gemmSimt(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam,
             int64_t sak, const float *B, int64_t sbk, int64_t sbn, float *C,
             int64_t ldc, bool accumulate) {
  __shared__ float As[32][33], Bs[32][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t m0 = int64_t(blockIdx.y) * 32, n0 = int64_t(blockIdx.x) * 32;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * 32; e += 256) {
      const int a = e / 32, b = e % 32;
      const int64_t m = m0 + a, k = k0 + b;
      As[a][b] = m < M && k < K ? A[m * sam + k * sak] : 0.0f;
      const int64_t kk = k0 + a, n = n0 + b;
      Bs[a][b] = kk < K && n < N ? B[kk * sbk + n * sbn] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < 32; ++k) {
      const float bv = Bs[k][tx];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        acc[i] += As[ty + 8 * i][k] * bv;
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty + 8 * i, n = n0 + tx;
    if (m < M && n < N)
      C[m * ldc + n] = accumulate ? C[m * ldc + n] + acc[i] : acc[i];
  }
}

inline void launchGemmSimt(int64_t M, int64_t N, int64_t K, const float *A,
                           int64_t sam, int64_t sak, const float *B,
                           int64_t sbk, int64_t sbn, float *C, int64_t ldc,
                           bool accumulate, cudaStream_t stream) {
  if (M <= 0 || N <= 0)
    return;
  auto k = gemmSimt<0>;
  MODC_LAUNCH(k, dim3((unsigned)ceilDiv(N, 32), (unsigned)ceilDiv(M, 32)), 256,
              0, stream, M, N, K, A, sam, sak, B, sbk, sbn, C, ldc, accumulate);
}

template <int HID>
__global__ void __launch_bounds__(colThreads<HID>())
    predictorGradRows(int64_t rows, const float *fc1_b, const float *fc2_w,
                      const float *dp, float *hidden, float *partial) {
  constexpr int T = colThreads<HID>(), CT = (HID + T - 1) / T;
  constexpr int W = 2 * HID + 1;
  const int64_t i0 = int64_t(blockIdx.x) * kRB;
  if (i0 >= rows)
    return;
  const int64_t i1 = detail::minI64(rows, i0 + kRB);
  float pb[CT], pw[CT], b1[CT], w2[CT];
  float pg = 0.0f;
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int j = threadIdx.x + c * T;
    pb[c] = pw[c] = 0.0f;
    b1[c] = j < HID ? fc1_b[j] : 0.0f;
    w2[c] = j < HID ? fc2_w[j] : 0.0f;
  }
  for (int64_t i = i0; i < i1; ++i) {
    const float g = dp[i];
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int j = threadIdx.x + c * T;
      if (j < HID) {
        float *hij = hidden + i * HID + j;
        const float z = *hij + b1[c];
        const float s = sigmoidf_(z);
        const float dpre = g * w2[c] * (s * (1.0f + z * (1.0f - s)));
        pw[c] += g * (z * s);
        pb[c] += dpre;
        *hij = dpre;
      }
    }
    pg += g;
  }
  float *out = partial + int64_t(blockIdx.x) * W;
#pragma unroll
  for (int c = 0; c < CT; ++c) {
    const int j = threadIdx.x + c * T;
    if (j < HID) {
      out[j] = pb[c];
      out[HID + j] = pw[c];
    }
  }
  if (threadIdx.x == 0)
    out[2 * HID] = pg;
}

} // namespace train_detail

/// Gradient of gate_scale_scatter (x[t] += g(r[t]) f[j], t = s*S + pos[j]):
/// df[j] = g(r[t]) dy[t] (overwrite, [rows, D], rows = seg[nseg] <= nseg * S)
/// and dr[t] += g'(r[t]) <dy[t], f[j]> (accumulate). G is a train_gate value
/// (0 linear, 1 sigmoid, 2 one; = modk_cuda::Gate); with kOne, r and dr are
/// unused (may be null). The grid covers nseg * S rows; rows past seg[nseg]
/// exit.
template <int S, int D, int G>
inline void gate_scale_scatter_grad(const float *dy, int64_t nseg,
                                    const int64_t *seg, const int32_t *pos,
                                    const float *r, const float *f, float *df,
                                    float *dr, cudaStream_t stream) {
  static_assert(G == train_gate::kLinear || G == train_gate::kSigmoid ||
                    G == train_gate::kOne,
                "unknown gate");
  if (nseg <= 0)
    return;
  auto k = train_detail::scatterGradKernel<S, D, G>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(nseg * S, 8), 256, 0, stream, dy, nseg, seg,
              pos, r, f, df, dr);
}

/// Gradient of the gather x[s*S + pos[j]] -> xs[j]: dx[s*S + pos[j]] += dxs[j]
/// for j < seg[nseg] <= nseg * S (the grid covers nseg * S rows).
template <int S, int D>
inline void gather_grad(const float *dxs, int64_t nseg, const int64_t *seg,
                        const int32_t *pos, float *dx, cudaStream_t stream) {
  if (nseg <= 0)
    return;
  auto k = train_detail::gatherGradKernel<S, D>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(nseg * S, 8), 256, 0, stream, dxs, nseg, seg,
              pos, dx);
}

/// Gradient of r[t] = w . x[t] over the B*S rows: dx[t] += dr[t] w and
/// dw += sum_t dr[t] x[t] (both accumulate; dw deterministic). `scratch`:
/// router_grad_scratch_floats<S, D>(B) floats.
template <int S, int D>
inline int64_t router_grad_scratch_floats(int64_t B) {
  return row_reduce_scratch_floats(B * S, D);
}
template <int S, int D>
inline void router_grad(const float *x, int64_t B, const float *w,
                        const float *dr, float *dx, float *dw, float *scratch,
                        cudaStream_t stream) {
  using namespace train_detail;
  const int64_t rows = B * S;
  if (rows <= 0)
    return;
  auto k = routerGradRows<D>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(rows, kRB), colThreads<D>(), 0, stream, x,
              rows, w, dr, dx, scratch);
  launchReduceColumns(scratch, D, nullptr, rows, ColOut{dw, dw, dw, D, 0},
                      stream);
}

/// Gradient of the causal-routing predictor p = fc2_w . silu(fc1_w x + fc1_b)
/// + fc2_b for the parameters only (modk_cpu::predictor_grad), rows = B * S
/// (host). Accumulates into dfc1_w [HID, D], dfc1_b [HID], dfc2_w [1, HID],
/// dfc2_b [1]. `hidden` [rows, HID] is scratch; on return it holds
/// dp * fc2_w * silu'(pre). `scratch`: predictor_grad_scratch_floats<D,
/// HID>(rows) floats. Self-contained (its own SIMT GEMMs, fixed k order).
template <int D, int HID>
inline int64_t predictor_grad_scratch_floats(int64_t rows) {
  return row_reduce_scratch_floats(rows, 2 * HID + 1);
}
template <int D, int HID>
inline void predictor_grad(const float *x, int64_t rows, const float *fc1_w,
                           const float *fc1_b, const float *fc2_w,
                           const float *dp, float *hidden, float *dfc1_w,
                           float *dfc1_b, float *dfc2_w, float *dfc2_b,
                           float *scratch, cudaStream_t stream) {
  using namespace train_detail;
  if (rows <= 0)
    return;
  // hidden = x fc1_w^T (recomputed).
  launchGemmSimt(rows, HID, D, x, D, 1, fc1_w, 1, D, hidden, HID, false,
                 stream);
  auto k = predictorGradRows<HID>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(rows, kRB), colThreads<HID>(), 0, stream,
              rows, fc1_b, fc2_w, dp, hidden, scratch);
  launchReduceColumns(scratch, 2 * HID + 1, nullptr, rows,
                      ColOut{dfc1_b, dfc2_w, dfc2_b, HID, HID}, stream);
  // dfc1_w += dpre^T x.
  launchGemmSimt(HID, D, rows, hidden, 1, HID, x, D, 1, dfc1_w, D, true,
                 stream);
}

//===----------------------------------------------------------------------===//
// Causal attention backward
//===----------------------------------------------------------------------===//

namespace train_detail {

/// Query rows and keys per tile, threads per block. Thread t works on row
/// t / 4 of its tile and on every fourth key (or head column) from t % 4.
constexpr int kAgBQ = 32, kAgBK = 32, kAgThreads = 128;

template <int HD> constexpr int attnGradSmemFloats() {
  return (2 * kAgBQ + 2 * kAgBK) * (HD + 1) + 2 * kAgBK * (kAgBQ + 1) +
         2 * kAgBQ;
}

/// Query side: per (query tile, head, segment), the log-sum-exp of every
/// query row (online over the key tiles), D = rowsum(dout * o), both stored
/// to stats[(row * H + h) * 2 + {0, 1}] for the key side, then
/// dq = scale * sum_keys dS K with dS = P (dP - D), P = exp(S - lse).
template <int H, int HD>
__global__ void __launch_bounds__(kAgThreads)
    attnGradQuery(const float *q, const float *k, const float *v,
                  const float *o, const float *dout, const int64_t *seg,
                  const int32_t *pos, float *dq, float *stats) {
  constexpr int BQ = kAgBQ, BK = kAgBK, P = HD + 1, NI = BK / 4, ND = HD / 4;
  constexpr int64_t LD = int64_t(H) * HD;
  static_assert(HD % 4 == 0, "head dim must be a multiple of 4");
  MODC_DYNAMIC_SHARED(float, sm);
  float *Qs = sm, *dOs = Qs + BQ * P, *Ks = dOs + BQ * P, *Vs = Ks + BK * P;
  float *dSs = Vs + BK * P; // [BQ][BK + 1]

  const int s = blockIdx.z, h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  const int64_t i0 = int64_t(blockIdx.x) * BQ;
  if (i0 >= n)
    return;
  const int qn = static_cast<int>(detail::minI64(BQ, n - i0));
  const int t = threadIdx.x, r = t >> 2, g = t & 3;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t hoff = int64_t(h) * HD;
  const float ninf = negInf();

  for (int e = t; e < BQ * HD; e += kAgThreads) {
    const int rr = e / HD, d = e % HD;
    const bool ok = rr < qn;
    const int64_t src = (base + i0 + rr) * LD + hoff + d;
    Qs[rr * P + d] = ok ? q[src] * scale : 0.0f;
    dOs[rr * P + d] = ok ? dout[src] : 0.0f;
  }
  const int64_t qi = i0 + r;
  float dd = 0.0f;
  if (r < qn) {
#pragma unroll
    for (int c = 0; c < ND; ++c) {
      const int64_t src = (base + qi) * LD + hoff + g + 4 * c;
      dd += dout[src] * o[src];
    }
  }
  dd += __shfl_xor_sync(0xffffffffu, dd, 1);
  dd += __shfl_xor_sync(0xffffffffu, dd, 2);
  const int32_t pq = r < qn ? ps[qi] : 0;
  const int64_t last = i0 + qn - 1;
  const int32_t plast = ps[last];

  // Pass 1: online max and sum of the visible scores of row r.
  float m = ninf, l = 0.0f;
  for (int64_t k0 = 0; k0 < n && (k0 <= last || ps[k0] <= plast); k0 += BK) {
    __syncthreads();
    for (int e = t; e < BK * HD; e += kAgThreads) {
      const int cc = e / HD, d = e % HD;
      Ks[cc * P + d] =
          k0 + cc < n ? k[(base + k0 + cc) * LD + hoff + d] : 0.0f;
    }
    __syncthreads();
    float sv[NI];
    float mt = ninf;
#pragma unroll
    for (int c = 0; c < NI; ++c) {
      const int cc = g + 4 * c;
      const int64_t j = k0 + cc;
      const bool vis = r < qn && j < n && (j <= qi || ps[j] <= pq);
      float acc = 0.0f;
#pragma unroll 8
      for (int d = 0; d < HD; ++d)
        acc += Qs[r * P + d] * Ks[cc * P + d];
      sv[c] = vis ? acc : ninf;
      mt = fmaxf(mt, sv[c]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float mnew = fmaxf(m, mt);
    const float msafe = mnew == ninf ? 0.0f : mnew;
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < NI; ++c)
      sum += expf(sv[c] - msafe);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = (m == ninf ? 0.0f : l * expf(m - mnew)) + sum;
    m = mnew;
  }
  const float lse = m + logf(l);
  if (g == 0 && r < qn) {
    stats[((base + qi) * H + h) * 2] = lse;
    stats[((base + qi) * H + h) * 2 + 1] = dd;
  }

  // Pass 2: dQ.
  float acc[ND];
#pragma unroll
  for (int c = 0; c < ND; ++c)
    acc[c] = 0.0f;
  for (int64_t k0 = 0; k0 < n && (k0 <= last || ps[k0] <= plast); k0 += BK) {
    __syncthreads();
    for (int e = t; e < BK * HD; e += kAgThreads) {
      const int cc = e / HD, d = e % HD;
      const bool ok = k0 + cc < n;
      const int64_t src = (base + k0 + cc) * LD + hoff + d;
      Ks[cc * P + d] = ok ? k[src] : 0.0f;
      Vs[cc * P + d] = ok ? v[src] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < NI; ++c) {
      const int cc = g + 4 * c;
      const int64_t j = k0 + cc;
      const bool vis = r < qn && j < n && (j <= qi || ps[j] <= pq);
      float sc = 0.0f, dp = 0.0f;
#pragma unroll 8
      for (int d = 0; d < HD; ++d) {
        sc += Qs[r * P + d] * Ks[cc * P + d];
        dp += dOs[r * P + d] * Vs[cc * P + d];
      }
      const float p = vis ? expf(sc - lse) : 0.0f;
      dSs[r * (BK + 1) + cc] = p * (dp - dd);
    }
    __syncthreads();
    for (int cc = 0; cc < BK; ++cc) {
      const float ds = dSs[r * (BK + 1) + cc];
#pragma unroll
      for (int c = 0; c < ND; ++c)
        acc[c] += ds * Ks[cc * P + g + 4 * c];
    }
  }
  if (r < qn) {
#pragma unroll
    for (int c = 0; c < ND; ++c)
      dq[(base + qi) * LD + hoff + g + 4 * c] = acc[c] * scale;
  }
}

/// Key side: per (key tile, head, segment), over every query tile that sees
/// the keys: dV = sum P^T dO, dK = sum dS^T (q * scale).
template <int H, int HD, typename TV>
__global__ void __launch_bounds__(kAgThreads)
    attnGradKey(const float *q, const float *k, const float *v,
                const float *dout, const int64_t *seg, const int32_t *pos,
                const float *stats, float *dk, TV *dv) {
  constexpr int BQ = kAgBQ, BK = kAgBK, P = HD + 1, NI = BQ / 4, ND = HD / 4;
  constexpr int64_t LD = int64_t(H) * HD;
  MODC_DYNAMIC_SHARED(float, sm);
  float *Qs = sm, *dOs = Qs + BQ * P, *Ks = dOs + BQ * P, *Vs = Ks + BK * P;
  float *Ps = Vs + BK * P;       // [BK][BQ + 1]
  float *dSs = Ps + BK * (BQ + 1); // [BK][BQ + 1]
  float *lseS = dSs + BK * (BQ + 1), *DdS = lseS + BQ;

  const int s = blockIdx.z, h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  const int64_t k0 = int64_t(blockIdx.x) * BK;
  if (k0 >= n)
    return;
  const int kc = static_cast<int>(detail::minI64(BK, n - k0));
  const int t = threadIdx.x, c = t >> 2, g = t & 3;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t hoff = int64_t(h) * HD;
  const int64_t kj = k0 + c;
  const int32_t pk = c < kc ? ps[kj] : 0;

  for (int e = t; e < BK * HD; e += kAgThreads) {
    const int cc = e / HD, d = e % HD;
    const bool ok = cc < kc;
    const int64_t src = (base + k0 + cc) * LD + hoff + d;
    Ks[cc * P + d] = ok ? k[src] : 0.0f;
    Vs[cc * P + d] = ok ? v[src] : 0.0f;
  }
  // First query that sees key k0: positions ascend, so only queries just
  // before k0 with the same position can.
  int64_t qs = k0;
  while (qs > 0 && ps[qs - 1] >= ps[k0])
    --qs;

  float accK[ND], accV[ND];
#pragma unroll
  for (int i = 0; i < ND; ++i)
    accK[i] = accV[i] = 0.0f;
  for (int64_t q0 = qs / BQ * BQ; q0 < n; q0 += BQ) {
    const int qn = static_cast<int>(detail::minI64(BQ, n - q0));
    __syncthreads();
    for (int e = t; e < BQ * HD; e += kAgThreads) {
      const int rr = e / HD, d = e % HD;
      const bool ok = rr < qn;
      const int64_t src = (base + q0 + rr) * LD + hoff + d;
      Qs[rr * P + d] = ok ? q[src] * scale : 0.0f;
      dOs[rr * P + d] = ok ? dout[src] : 0.0f;
    }
    for (int e = t; e < BQ; e += kAgThreads) {
      const bool ok = e < qn;
      lseS[e] = ok ? stats[((base + q0 + e) * H + h) * 2] : 0.0f;
      DdS[e] = ok ? stats[((base + q0 + e) * H + h) * 2 + 1] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      const int rr = g + 4 * i;
      const int64_t qi = q0 + rr;
      const bool vis = c < kc && rr < qn && (kj <= qi || pk <= ps[qi]);
      float sc = 0.0f, dp = 0.0f;
#pragma unroll 8
      for (int d = 0; d < HD; ++d) {
        sc += Qs[rr * P + d] * Ks[c * P + d];
        dp += dOs[rr * P + d] * Vs[c * P + d];
      }
      const float p = vis ? expf(sc - lseS[rr]) : 0.0f;
      Ps[c * (BQ + 1) + rr] = p;
      dSs[c * (BQ + 1) + rr] = p * (dp - DdS[rr]);
    }
    __syncthreads();
    for (int rr = 0; rr < BQ; ++rr) {
      const float pv = Ps[c * (BQ + 1) + rr], ds = dSs[c * (BQ + 1) + rr];
#pragma unroll
      for (int i = 0; i < ND; ++i) {
        accV[i] += pv * dOs[rr * P + g + 4 * i];
        accK[i] += ds * Qs[rr * P + g + 4 * i];
      }
    }
  }
  if (c < kc) {
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      const int64_t dst = (base + kj) * LD + hoff + g + 4 * i;
      dk[dst] = accK[i];
      dv[dst] = TV(accV[i]);
    }
  }
}


//===----------------------------------------------------------------------===//
// Causal attention backward on tensor cores (3xTF32 mma.m16n8k8)
//===----------------------------------------------------------------------===//

/// Threads of the tensor-core kernels: on the query side 4 warps of 16
/// queries; on the key side 8 warps, warps w and w + 4 owning the same 16
/// keys, w accumulating their dV and w + 4 their dK (one HD-wide accumulator
/// tile a lane instead of two: no spills at head dim 128).
constexpr int kAgTcThreads = 128, kAgTcKeyThreads = 256;
/// Rows a CTA owns (16 a warp, or a warp pair) and rows of the tiles it
/// loops over (keys on the query side, queries on the key side).
constexpr int kAgTcOwn = 64, kAgTcTile = 32;

/// Head dims of the tensor-core backward: those of the forward kernel.
template <int HD>
constexpr bool attentionGradTcHeadDim = detail::attentionTcHeadDim<HD>;

/// n8 tiles of the head dim handled by one mma3xTf32 call: the largest
/// divisor of dt that is at most 8 (the emulation's fragment exchange holds
/// 8 + 4 * 8 words at most per call, as in attentionTcKernel's two batches).
__host__ __device__ constexpr int agChunk(int dt) {
  for (int w = dt < 8 ? dt : 8; w > 1; --w)
    if (dt % w == 0)
      return w;
  return 1;
}

/// Shared memory of the tensor-core kernels (floats): two [64][LD] arrays
/// (the owned rows: Q and dO on the query side, K and V on the key side),
/// two [32][LD] arrays (the looped tile: K and V, or Q and dO), and three
/// vectors of 32 (the tile's key positions; or its query positions, lse
/// and D). LD = HD + 4 = 4 (mod 8) as in AttnTcSmem: the fragment reads fall
/// on 32 different banks and rows start 16-byte aligned for cp.async.
template <int HD> struct AttnGradTcSmem {
  static constexpr int TILE = kAgTcTile;
  static constexpr int LD = HD + 4;
  static_assert(LD % 8 == 4, "conflict-free stride");
  static constexpr int Own0 = 0;
  static constexpr int Own1 = Own0 + kAgTcOwn * LD;
  static constexpr int Tile0 = Own1 + kAgTcOwn * LD;
  static constexpr int Tile1 = Tile0 + TILE * LD;
  static constexpr int Vec = Tile1 + TILE * LD; // 3 x [TILE]
  static constexpr int Floats = Vec + 3 * TILE;
  static constexpr int Bytes = Floats * int(sizeof(float));
};

/// acc[NT] = A B^T over the head dim (detail::addRowProducts from zero),
/// two k8 steps unrolled at a time (fewer live fragment loads).
template <int HD, int NT, bool SplitA = true, bool SplitB = true>
__device__ __forceinline__ void agRowProducts(float (&acc)[1][NT][4],
                                              const float *a, const float *b) {
  detail::zeroFragments(acc);
  detail::addRowProducts<HD, NT, SplitA, SplitB, 2>(acc, a, b);
}

/// acc += X B with X the 16 x 8 NT register tile x (C-fragment layout of
/// agRowProducts) and B = b[0 .. 8 NT)[0 .. HD) in shared ([row][LD]). As in
/// attentionTcKernel's P V: the C fragment of lane (g, t) holds columns 2t,
/// 2t + 1 of each n8 tile, used as A columns t and t + 4, with B rows 2t and
/// 2t + 1 as B rows t and t + 4. acc is HD / 8 n8 tiles in NC chunks of DW.
/// SplitB false: b holds tf32 (bf16) values.
template <int HD, int NT, int NC, int DW, bool SplitB = true>
__device__ __forceinline__ void agRegTimesRows(float (&acc)[NC][1][DW][4],
                                               const float (&x)[1][NT][4],
                                               const float *b) {
  constexpr int LDS = HD + 4;
  const int lane = threadIdx.x % kWarp, g = lane >> 2, tg = lane & 3;
#pragma unroll
  for (int kb = 0; kb < NT; ++kb) {
    auto fragX = [&](int, float (&f)[4]) {
      f[0] = x[0][kb][0]; // row g,     column 2t     -> A column t
      f[1] = x[0][kb][2]; // row g + 8, column 2t
      f[2] = x[0][kb][1]; // row g,     column 2t + 1 -> A column t + 4
      f[3] = x[0][kb][3]; // row g + 8, column 2t + 1
    };
    const float *br = b + (8 * kb + 2 * tg) * LDS + g;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      auto fragB = [&](int j, float (&f)[2]) {
        f[0] = br[8 * (c * DW + j)];
        f[1] = br[LDS + 8 * (c * DW + j)];
      };
      detail::mma3xTf32<1, DW, true, SplitB>(acc[c], fragX, fragB);
    }
  }
}

/// Writes the warp's 16 x HD accumulator tile times `mul` to rows
/// r0 + (16w + g + 8 hh) < valid of dst (one head of [rows, H * HD]; TD
/// float, or bf16: rounded).
template <int H, int HD, int NC, int DW, typename TD>
__device__ __forceinline__ void agStoreRows(TD *dst, int64_t r0,
                                            int64_t hoff, int wr, int valid,
                                            const float (&acc)[NC][1][DW][4],
                                            float mul) {
  constexpr int64_t LDG = int64_t(H) * HD;
  const int lane = threadIdx.x % kWarp, g = lane >> 2, tg = lane & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    if (r >= valid)
      continue;
    TD *p = dst + (r0 + r) * LDG + hoff + 2 * tg;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int j = 0; j < DW; ++j) {
        p[8 * (c * DW + j)] = TD(acc[c][0][j][2 * hh] * mul);
        p[8 * (c * DW + j) + 1] = TD(acc[c][0][j][2 * hh + 1] * mul);
      }
  }
}

/// Tensor-core query side (same grid, statistics and result as
/// attnGradQuery): CTA (64 queries, head, segment), warp w owning queries
/// 16w .. 16w + 15 (lane: rows g, g + 8), over the visible prefix of 32-key
/// tiles, twice. Pass 1: S = (Q K^T) * scale (mma3xTf32), masking
/// (pos[key] > pos[query]) and the online max and sum in registers -> lse;
/// D = rowsum(dO * O) in f32; both to stats. Pass 2: S again and dP = dO V^T,
/// dS = P (dP - D) with P = exp(S - lse), in registers, and dQ += dS K from
/// them (A from the score registers, as the forward's P V); dq = dQ * scale.
/// Tiles are copied with cp.async; a warp whose queries all precede the
/// tile's first key skips its math (P = 0 there) but not its barriers.
/// BF: q, k, v hold bf16 values (a bf16 model): the mmas of their zero tf32
/// lo parts are skipped, with the same result.
template <int H, int HD, bool BF>
__global__ __launch_bounds__(kAgTcThreads) void attnGradQueryTc(
    const float *__restrict__ q, const float *__restrict__ k,
    const float *__restrict__ v, const float *__restrict__ o,
    const float *__restrict__ dout, const int64_t *seg, const int32_t *pos,
    float *__restrict__ dq, float *__restrict__ stats) {
  static_assert(attentionGradTcHeadDim<HD>, "head dim of the tensor-core kernel");
  using L = AttnGradTcSmem<HD>;
  constexpr int BQ = kAgTcOwn, BK = kAgTcTile, LDS = L::LD;
  constexpr int T = kAgTcThreads;
  constexpr int NT = BK / 8, DT = HD / 8, DW = agChunk(DT), NC = DT / DW;
  constexpr int64_t LDG = int64_t(H) * HD;
  constexpr int32_t kNoPos = 0x7fffffff;
  const int s = blockIdx.z, h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  // Later query tiles see more keys: they get the lower block indices.
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= n)
    return;
  const int qn = int(detail::minI64(BQ, n - i0));

  MODC_DYNAMIC_SHARED(float, sm);
  float *Qs = sm + L::Own0, *dOs = sm + L::Own1;
  float *Ks = sm + L::Tile0, *Vs = sm + L::Tile1;
  int32_t *kposS = reinterpret_cast<int32_t *>(sm + L::Vec);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane >> 2, tg = lane & 3, wr = warp * 16;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t hoff = int64_t(h) * HD;
  const bool vec = detail::aligned16(q, k, v, dout);

  detail::copyHeadRows<H, HD, BQ, T>(Qs, q, base + i0, hoff, qn, vec);
  detail::copyHeadRows<H, HD, BQ, T>(dOs, dout, base + i0, hoff, qn, vec);
  detail::copyAsyncCommit();

  // This lane's rows: positions (rows past qn see every key; unused) and
  // D = rowsum(dout * o), each lane a quarter of the columns.
  int32_t qp[2];
  float Dd[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    qp[hh] = r < qn ? ps[i0 + r] : kNoPos;
    float dd = 0.0f;
    if (r < qn) {
      const int64_t row = (base + i0 + r) * LDG + hoff;
      for (int d = tg; d < HD; d += 4)
        dd += dout[row + d] * o[row + d];
    }
    dd += __shfl_xor_sync(0xffffffffu, dd, 1);
    dd += __shfl_xor_sync(0xffffffffu, dd, 2);
    Dd[hh] = dd;
  }
  const int32_t lastPos = ps[i0 + qn - 1];
  const bool warpRows = wr < qn;
  const int32_t warpMaxPos = ps[i0 + (wr + 15 < qn ? wr + 15 : qn - 1)];

  // Copies key tile k0 (and its values when withV) and waits for it.
  auto loadTile = [&](int64_t k0, bool withV) {
    const int kc = int(detail::minI64(BK, n - k0));
    __syncthreads(); // every warp is done with the previous tile
    detail::copyHeadRows<H, HD, BK, T>(Ks, k, base + k0, hoff, kc, vec);
    if (withV)
      detail::copyHeadRows<H, HD, BK, T>(Vs, v, base + k0, hoff, kc, vec);
    detail::copyAsyncCommit();
    for (int c = tid; c < BK; c += T)
      kposS[c] = c < kc ? ps[k0 + c] : kNoPos;
    detail::copyAsyncWait<0>();
    __syncthreads();
  };

  // Pass 1: online max and sum of the visible scaled scores.
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
  for (int64_t k0 = 0; k0 < n && ps[k0] <= lastPos; k0 += BK) {
    loadTile(k0, false);
    if (!(warpRows && kposS[0] <= warpMaxPos))
      continue;
    float sc[1][NT][4];
    agRowProducts<HD, NT, !BF, !BF>(sc, Qs + wr * LDS, Ks);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = kposS[8 * j + 2 * tg + (e & 1)] > qp[e >> 1]
                            ? -INFINITY
                            : sc[0][j][e] * scale;
        sc[0][j][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    float msub[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
      const float mnew = fmaxf(mrow[hh], mx[hh]);
      msub[hh] = mnew == -INFINITY ? 0.0f : mnew;
      lrow[hh] *= expf(mrow[hh] - msub[hh]);
      mrow[hh] = mnew;
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        rs[e >> 1] += expf(sc[0][j][e] - msub[e >> 1]);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      lrow[hh] += rs[hh];
  }
  float lse[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    lrow[hh] += __shfl_xor_sync(0xffffffffu, lrow[hh], 1);
    lrow[hh] += __shfl_xor_sync(0xffffffffu, lrow[hh], 2);
    lse[hh] = mrow[hh] + logf(lrow[hh]);
    const int r = wr + g + 8 * hh;
    if (tg == 0 && r < qn) {
      stats[((base + i0 + r) * H + h) * 2] = lse[hh];
      stats[((base + i0 + r) * H + h) * 2 + 1] = Dd[hh];
    }
  }

  // Pass 2: dQ.
  float acc[NC][1][DW][4];
#pragma unroll
  for (int c = 0; c < NC; ++c)
    detail::zeroFragments(acc[c]);
  for (int64_t k0 = 0; k0 < n && ps[k0] <= lastPos; k0 += BK) {
    loadTile(k0, true);
    if (!(warpRows && kposS[0] <= warpMaxPos))
      continue;
    float sc[1][NT][4], dp[1][NT][4];
    agRowProducts<HD, NT, !BF, !BF>(sc, Qs + wr * LDS, Ks);
    agRowProducts<HD, NT, true, !BF>(dp, dOs + wr * LDS, Vs);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = kposS[8 * j + 2 * tg + (e & 1)] > qp[e >> 1]
                            ? 0.0f
                            : expf(sc[0][j][e] * scale - lse[e >> 1]);
        sc[0][j][e] = p * (dp[0][j][e] - Dd[e >> 1]);
      }
    agRegTimesRows<HD, NT, NC, DW, !BF>(acc, sc, Ks);
  }
  agStoreRows<H, HD, NC, DW>(dq, base + i0, hoff, wr, qn, acc, scale);
}

/// Tensor-core key side (same grid and result as attnGradKey): CTA (64
/// keys, head, segment) of 8 warps, warps w and w + 4 owning keys 16 (w % 4)
/// .. + 15, over the 32-query tiles from the first that sees key k0 to the
/// segment's end. Both warps form S^T = (K Q^T) * scale (mma3xTf32) and
/// P^T = exp(S^T - lse) masked, in registers (lse and D from the query
/// side's stats); warp w adds dV += P^T dO, warp w + 4 forms dP^T = V dO^T,
/// dS^T = P^T (dP^T - D) and adds dK += dS^T Q, both from the registers;
/// dk = dK * scale. BF: as attnGradQueryTc's.
template <int H, int HD, bool BF, typename TV>
__global__ __launch_bounds__(kAgTcKeyThreads, 1) void attnGradKeyTc(
    const float *__restrict__ q, const float *__restrict__ k,
    const float *__restrict__ v, const float *__restrict__ dout,
    const int64_t *seg, const int32_t *pos, const float *__restrict__ stats,
    float *__restrict__ dk, TV *__restrict__ dv) {
  static_assert(attentionGradTcHeadDim<HD>, "head dim of the tensor-core kernel");
  using L = AttnGradTcSmem<HD>;
  constexpr int BK = kAgTcOwn, BQ = kAgTcTile, LDS = L::LD;
  constexpr int T = kAgTcKeyThreads;
  constexpr int NT = BQ / 8, DT = HD / 8, DW = agChunk(DT), NC = DT / DW;
  constexpr int32_t kNoPos = 0x7fffffff;
  const int s = blockIdx.z, h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  const int64_t k0 = int64_t(blockIdx.x) * BK;
  if (k0 >= n)
    return;
  const int kc = int(detail::minI64(BK, n - k0));

  MODC_DYNAMIC_SHARED(float, sm);
  float *Ks = sm + L::Own0, *Vs = sm + L::Own1;
  float *Qs = sm + L::Tile0, *dOs = sm + L::Tile1;
  int32_t *qposS = reinterpret_cast<int32_t *>(sm + L::Vec);
  float *lseS = sm + L::Vec + BQ, *DdS = lseS + BQ;

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane >> 2, tg = lane & 3, wr = (warp % 4) * 16;
  const bool dkWarp = warp >= 4;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t hoff = int64_t(h) * HD;
  const bool vec = detail::aligned16(q, k, v, dout);

  detail::copyHeadRows<H, HD, BK, T>(Ks, k, base + k0, hoff, kc, vec);
  detail::copyHeadRows<H, HD, BK, T>(Vs, v, base + k0, hoff, kc, vec);
  detail::copyAsyncCommit();

  // This lane's keys (past kc: no query sees them).
  int32_t kp[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    kp[hh] = r < kc ? ps[k0 + r] : kNoPos;
  }
  const bool warpKeys = wr < kc;
  const int32_t warpMinPos = warpKeys ? ps[k0 + wr] : kNoPos;
  // First query that sees key k0: positions ascend, so only queries just
  // before k0 with the same position can.
  int64_t qs = k0;
  while (qs > 0 && ps[qs - 1] >= ps[k0])
    --qs;

  float acc[NC][1][DW][4]; // dV (warps 0-3) or dK (warps 4-7)
#pragma unroll
  for (int c = 0; c < NC; ++c)
    detail::zeroFragments(acc[c]);
  for (int64_t q0 = qs / BQ * BQ; q0 < n; q0 += BQ) {
    const int qn = int(detail::minI64(BQ, n - q0));
    __syncthreads(); // every warp is done with the previous tile
    detail::copyHeadRows<H, HD, BQ, T>(Qs, q, base + q0, hoff, qn, vec);
    detail::copyHeadRows<H, HD, BQ, T>(dOs, dout, base + q0, hoff, qn, vec);
    detail::copyAsyncCommit();
    for (int e = tid; e < BQ; e += T) {
      const bool ok = e < qn;
      const int64_t st = ((base + q0 + e) * H + h) * 2;
      qposS[e] = ok ? ps[q0 + e] : -1; // padded queries see no key
      lseS[e] = ok ? stats[st] : 0.0f;
      DdS[e] = ok ? stats[st + 1] : 0.0f;
    }
    detail::copyAsyncWait<0>();
    __syncthreads();
    if (!(warpKeys && qposS[qn - 1] >= warpMinPos))
      continue;
    float pt[1][NT][4];
    agRowProducts<HD, NT, !BF, !BF>(pt, Ks + wr * LDS, Qs);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = 8 * j + 2 * tg + (e & 1);
        pt[0][j][e] = kp[e >> 1] > qposS[qc]
                          ? 0.0f
                          : expf(pt[0][j][e] * scale - lseS[qc]);
      }
    if (!dkWarp) {
      agRegTimesRows<HD, NT, NC, DW>(acc, pt, dOs);
    } else {
      float dst[1][NT][4];
      agRowProducts<HD, NT, !BF, true>(dst, Vs + wr * LDS, dOs);
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dst[0][j][e] =
              pt[0][j][e] * (dst[0][j][e] - DdS[8 * j + 2 * tg + (e & 1)]);
      agRegTimesRows<HD, NT, NC, DW, !BF>(acc, dst, Qs);
    }
  }
  if (dkWarp)
    agStoreRows<H, HD, NC, DW>(dk, base + k0, hoff, wr, kc, acc, scale);
  else
    agStoreRows<H, HD, NC, DW>(dv, base + k0, hoff, wr, kc, acc, 1.0f);
}

/// Launches the tensor-core backward (TC; BF: on bf16 inputs) or the SIMT
/// one; only the chosen kernels are instantiated.
template <bool TC, int H, int HD, bool BF, typename TV>
inline void launchAttentionGrad(int64_t nseg, int64_t max_seg_rows,
                                const float *q, const float *k, const float *v,
                                const float *o, const float *dout,
                                const int64_t *seg, const int32_t *pos,
                                float *dq, float *dk, TV *dv, float *stats,
                                cudaStream_t stream) {
  if constexpr (TC) {
    constexpr int smemQ = AttnGradTcSmem<HD>::Bytes, smemK = smemQ;
    auto kq = attnGradQueryTc<H, HD, BF>;
    auto kk = attnGradKeyTc<H, HD, BF, TV>;
    static bool configured = false; // the attribute is per function
    if (!configured) {
      cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smemQ);
      cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smemK);
      configured = true;
    }
    const dim3 gq((unsigned)ceilDiv(max_seg_rows, kAgTcOwn), H, (unsigned)nseg);
    MODC_LAUNCH(kq, gq, kAgTcThreads, smemQ, stream, q, k, v, o, dout, seg,
                pos, dq, stats);
    const dim3 gk((unsigned)ceilDiv(max_seg_rows, kAgTcOwn), H, (unsigned)nseg);
    MODC_LAUNCH(kk, gk, kAgTcKeyThreads, smemK, stream, q, k, v, dout, seg, pos,
                static_cast<const float *>(stats), dk, dv);
  } else {
    constexpr int smem = attnGradSmemFloats<HD>() * int(sizeof(float));
    auto kq = attnGradQuery<H, HD>;
    auto kk = attnGradKey<H, HD, TV>;
    if (smem > 48 * 1024) {
      cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
      cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
    }
    const dim3 gq((unsigned)ceilDiv(max_seg_rows, kAgBQ), H, (unsigned)nseg);
    MODC_LAUNCH(kq, gq, kAgThreads, smem, stream, q, k, v, o, dout, seg, pos,
                dq, stats);
    const dim3 gk((unsigned)ceilDiv(max_seg_rows, kAgBK), H, (unsigned)nseg);
    MODC_LAUNCH(kk, gk, kAgThreads, smem, stream, q, k, v, dout, seg, pos,
                static_cast<const float *>(stats), dk, dv);
  }
}

} // namespace train_detail

/// Floats of scratch causal_attention_grad needs: lse and D per (row, head).
template <int H>
inline int64_t attention_grad_scratch_floats(int64_t max_rows) {
  return 2 * (max_rows > 0 ? max_rows : 0) * H;
}

/// Backward of causal_attention (modk_cpu::causal_attention_grad). q, k are
/// after RoPE; v, o (the forward output before the O projection) and dout are
/// [rows, H * HD] with rows = seg[nseg]; writes dq, dk, dv (overwrite) for
/// rows < seg[nseg]. Key j of a segment is visible to query i iff j <= i or
/// pos[j] <= pos[i] (positions ascend within a segment), as in the forward.
/// max_seg_rows bounds every segment's length (S, or the routed capacity) and
/// sizes the grid, as in causal_attention. `scratch`:
/// attention_grad_scratch_floats<H>(max_rows) floats for any max_rows >=
/// seg[nseg] (nseg * max_seg_rows will do). Two kernels (query side writes dq and the softmax
/// statistics, key side dk and dv); no atomics, deterministic. For head dims
/// that are multiples of 8 up to 128 they run on tensor cores (3xTF32
/// mma.m16n8k8, f32 accuracy: attnGradQueryTc, attnGradKeyTc) where
/// TensorCores (the compiler's mainloop choice), else on the SIMT kernels
/// (attnGradQuery, attnGradKey); same scratch either way.
/// BF16: q, k, v hold bf16 values (a bf16 model); the same result, with
/// fewer tensor-core instructions. dv may be bf16 (rounded as stored:
/// modk-store-bf16, only products read it).
template <int H, int HD, bool BF16 = false, bool TensorCores = true,
          typename TV = float>
inline void causal_attention_grad(const float *q, const float *k,
                                  const float *v, const float *o,
                                  const float *dout, int64_t nseg,
                                  const int64_t *seg, const int32_t *pos,
                                  int64_t max_seg_rows, float *dq, float *dk,
                                  TV *dv, float *scratch,
                                  cudaStream_t stream) {
  using namespace train_detail;
  if (nseg <= 0 || max_seg_rows <= 0)
    return;
  if constexpr (TensorCores && attentionGradTcHeadDim<HD>) {
    launchAttentionGrad<true, H, HD, BF16, TV>(nseg, max_seg_rows, q, k, v, o,
                                               dout, seg, pos, dq, dk, dv,
                                               scratch, stream);
  } else {
    launchAttentionGrad<false, H, HD, false, TV>(nseg, max_seg_rows, q, k, v, o,
                                             dout, seg, pos, dq, dk, dv,
                                             scratch, stream);
  }
}

//===----------------------------------------------------------------------===//
// Optimiser
//===----------------------------------------------------------------------===//

namespace train_detail {

/// Elements per block of the sum of squares (one double partial each).
constexpr int64_t kSqChunk = 8192;

/// Device state of one AdamW step, at the start of its scratch.
struct AdamCtl {
  float scale; // gradient clip factor
  int finite;  // the gradient norm is finite
  double squares;
};
constexpr int64_t kAdamCtlBytes = 16;
static_assert(sizeof(AdamCtl) <= kAdamCtlBytes, "AdamCtl grew");

template <int Unused>
__global__ void sumSquaresPartial(const float *g, int64_t n, double *out) {
  __shared__ double scratch[32];
  const int64_t i0 = int64_t(blockIdx.x) * kSqChunk;
  const int64_t i1 = detail::minI64(n, i0 + kSqChunk);
  double acc = 0.0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
    acc += double(g[i]) * double(g[i]);
  const double total = blockSum(acc, scratch);
  if (threadIdx.x == 0)
    out[blockIdx.x] = total;
}

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

template <int Unused>
__global__ void adamwUpdate(float *p, const float *g, float *m, float *v,
                            int64_t n, float beta1, float beta2, float eps,
                            float stepSize, float invSqrtBc2, float decay,
                            const AdamCtl *ctl) {
  if (!ctl->finite)
    return; // a non-finite gradient must not reach the weights
  const float scale = ctl->scale;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay;
    p[i] = pi - stepSize * mi / (sqrtf(vi) * invSqrtBc2 + eps);
  }
}

} // namespace train_detail

/// Bytes of device scratch adamw_step needs (16 bytes of state, then a double
/// per 8192 gradient elements of each tensor).
inline int64_t adamw_scratch_bytes(const int64_t *sizes, int nparams) {
  int64_t blocks = 0;
  for (int i = 0; i < nparams; ++i)
    blocks += ceilDiv(sizes[i] > 0 ? sizes[i] : 0, train_detail::kSqChunk);
  return train_detail::kAdamCtlBytes + blocks * int64_t(sizeof(double));
}

/// One AdamW step over all parameter tensors, as the CPU's modc_adamw:
/// the global gradient norm sqrt(sum g^2) (f64, fixed order) is written to
/// *grad_norm (device float, may be null); clip = clip_norm > 0 && norm >
/// clip_norm ? clip_norm / norm : 1; then modk_cpu::adamw on each tensor with
/// grad_scale = clip and weight_decay = decay[i] ? weight_decay : 0. If the
/// norm is not finite, no parameter, m or v is touched (the kernels read the
/// norm on the device); the host reads *grad_norm back to report it.
/// params, grads, m, v: host arrays of nparams device pointers; sizes, decay:
/// host arrays; step >= 1 (the caller checks). `scratch`: device memory of
/// adamw_scratch_bytes(sizes, nparams) bytes, 8-byte aligned.
inline void adamw_step(float *const *params, const float *const *grads,
                       float *const *m, float *const *v, const int64_t *sizes,
                       const bool *decay, int nparams, int64_t step, float lr,
                       float beta1, float beta2, float eps, float weight_decay,
                       float clip_norm, float *grad_norm, void *scratch,
                       cudaStream_t stream) {
  using namespace train_detail;
  AdamCtl *ctl = static_cast<AdamCtl *>(scratch);
  double *partial = reinterpret_cast<double *>(
      static_cast<unsigned char *>(scratch) + kAdamCtlBytes);
  int64_t off = 0;
  auto sq = sumSquaresPartial<0>;
  for (int i = 0; i < nparams; ++i) {
    const int64_t nb = ceilDiv(sizes[i] > 0 ? sizes[i] : 0, kSqChunk);
    if (nb > 0)
      MODC_LAUNCH(sq, (unsigned)nb, 256, 0, stream, grads[i], sizes[i],
                  partial + off);
    off += nb;
  }
  auto fin = adamFinish<0>;
  MODC_LAUNCH(fin, 1, 256, 0, stream, static_cast<const double *>(partial),
              off, clip_norm, grad_norm, ctl);
  // Host constants exactly as modk_cpu::adamw forms them.
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const float stepSize = static_cast<float>(lr / bc1);
  const float invSqrtBc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  auto up = adamwUpdate<0>;
  for (int i = 0; i < nparams; ++i) {
    if (sizes[i] <= 0)
      continue;
    const float wd = decay[i] ? weight_decay : 0.0f;
    const float dec = 1.0f - lr * wd;
    const int64_t nb = ceilDiv(sizes[i], 256);
    MODC_LAUNCH(up, (unsigned)(nb < 65536 ? nb : 65536), 256, 0, stream,
                params[i], grads[i], m[i], v[i], sizes[i], beta1, beta2, eps,
                stepSize, invSqrtBc2, dec,
                static_cast<const AdamCtl *>(ctl));
  }
}

} // namespace modk_cuda

#endif // MODC_CUDA_KERNELS_TRAIN_INCLUDED
