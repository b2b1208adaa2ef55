//===- CudaKernels.cuh - CUDA forward kernel prelude ------------*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The forward kernels of modc's CUDA target: the CUDA twins of CpuKernels.h
/// (and of cache_append in CpuKernelsDecode.h, and of the products'
/// gradients linear_dgrad and linear_wgrad in CpuKernelsTrain.h, which sit
/// with the forward products), with the conventions of CudaCommon.cuh:
///  - device pointers, row-major f32;
///  - where the CPU kernel takes `int64_t rows`, these take
///    `const int64_t *rows, int64_t max_rows` (a device count, always
///    `seg + nseg`, and a static bound that sizes the grid; blocks past
///    `*rows` exit);
///  - the stream comes last; the wrappers only enqueue work.
///
/// Every kernel computes in f32 with the CPU kernel's semantics (selection
/// order and tie-breaking of the routers exactly; sums up to rounding).
/// The GEMM and flash-attention mainloops are the mainloop library
/// (Mainloops/Cuda: GemmTiles.cuh, FlashAttention.cuh); this file holds the
/// routing kernels (top-k and causal selection, the fused gather), RoPE's
/// angle tables, identity segments, the token split and the cache append,
/// and the host wrappers that launch the mainloops with the plan the
/// compiler chose (modk-configure-gemms, docs/cuda.md). What the small
/// kernels among them compute per item is defined once for both targets in
/// Shared/prelude/SmallKernels.h; here they get their grids.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_KERNELS_INCLUDED
#define MODC_CUDA_KERNELS_INCLUDED

#ifndef MODC_CUDA_COMMON_INCLUDED
#include "CudaCommon.cuh"
#endif
// The mainloops (Mainloops/Cuda), pasted before this file in a package.
#ifndef MODC_CUDA_GEMM_TILES_INCLUDED
#include "GemmTiles.cuh"
#endif
#ifndef MODC_CUDA_FLASH_ATTENTION_INCLUDED
#include "FlashAttention.cuh"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>
#if defined(__CUDACC__)
#include <cuda.h> // CUtensorMap and its enums (no driver library is linked)
#include <cuda_bf16.h>
#endif

namespace modk_cuda {

namespace detail {

//===----------------------------------------------------------------------===//
// Elementwise and row kernels
//===----------------------------------------------------------------------===//

/// Grid for a grid-stride loop over n items.
inline unsigned strideGrid(int64_t n) {
  const int64_t blocks = ceilDiv(n, kThreads);
  return unsigned(blocks < 1 ? 1 : blocks > kMaxGrid ? kMaxGrid : blocks);
}

/// f(e) for every item e < n of a small kernel (SmallKernels.h), a thread
/// an item (grid-stride).
template <typename F>
__global__ __launch_bounds__(kThreads) void forEachKernel(F f, int64_t n) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x)
    f(e);
}

/// Enqueues f(e) for every item e < f.items().
template <typename F> inline void forEachItem(const F &f, cudaStream_t stream) {
  const int64_t n = f.items();
  if (n <= 0)
    return;
  auto k = forEachKernel<F>;
  MODC_LAUNCH(k, strideGrid(n), kThreads, 0, stream, f, n);
}

/// RoPE's (cos, sin) of pair j < HD/2 at position p (modk_small::ropeAngle):
/// the generated RoPE kernels' angle where the table lacks the position.
template <int HD>
__device__ __forceinline__ float2 ropeAngle(int32_t p, int j, float theta) {
  float c, s;
  modk_small::ropeAngle<HD>(p, j, theta, c, s);
  return make_float2(c, s);
}

/// The (cos, sin) tables of the generated RoPE kernels and epilogues
/// (modk.rope_angle), built when a package initialises and kept for the
/// process (positions x HD / 2 float2 each: 1 MB at 2048
/// positions of head dim 128).
struct RopeTable {
  int hd;
  float theta;
  int32_t positions;
  float2 *table;
};
inline std::vector<RopeTable> &ropeTables() {
  static std::vector<RopeTable> tables;
  return tables;
}

/// The table of positions 0 .. positions - 1 for head dim HD and theta,
/// enqueued on `stream` when first asked for. Null while the stream is
/// being captured (a decode step: no allocation may happen inside a graph)
/// or where no device memory is left; modc_cuda_init asks for every table
/// of its package first, and fails if one cannot be made.
template <int HD>
inline const float2 *ropeTableFor(float theta, int32_t positions,
                                  cudaStream_t stream) {
  for (const RopeTable &t : ropeTables())
    if (t.hd == HD && t.theta == theta && t.positions >= positions)
      return t.table;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (positions <= 0 ||
      cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone)
    return nullptr;
  void *p = nullptr;
  const int64_t n = int64_t(positions) * (HD / 2);
  if (cudaMalloc(&p, size_t(n) * sizeof(float2)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  auto table = static_cast<float2 *>(p);
  forEachItem(modk_small::RopeTableEntries<HD, 2, 1>{static_cast<float *>(p),
                                                     positions, theta},
              stream);
  ropeTables().push_back({HD, theta, positions, table});
  return table;
}

/// The CPU's topkKey, high half: an order-preserving uint of the router
/// value, -0.0 folded into +0.0, NaN below every number.
__device__ __forceinline__ uint32_t topkBits(float r) {
  if (r != r)
    return 0u;
  if (r == 0.0f)
    r = 0.0f;
  const uint32_t u = __float_as_uint(r);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// The gather of a selection that gathers nothing: modk-fuse-select-gather
/// left the gather a kernel of its own.
struct NoGather {
  __device__ void operator()(int64_t, int64_t, int) const {}
};

/// One CTA per sequence. The K-th largest key T is found by a 4-pass radix
/// select (8 bits a pass); the selection is every key > T plus the first
/// `need` positions whose key is T (ties to the lower position, as the
/// CPU's (value, -position) order). Two block scans compact it in position
/// order. Each thread keeps its C consecutive keys in registers (one read of
/// the router values); the histogram adds are aggregated per warp (router
/// values share their top bits, so most land in one or two bins), and the
/// digit of each pass is found by a block scan over the bins, a bin a thread.
/// Then, with a Gather (modk-fuse-select-gather), the block's warps gather
/// the sequence's rows: gather(i, b, lane) by every lane of a warp, a warp
/// a row.
///
/// G > 1 (a gather's `gather_blocks`, modk-configure-gemms): G blocks a
/// sequence, each selecting the same rows (the scores are a few KiB, read
/// from L2), so that B sequences gather on B * G SMs rather than B. Block g
/// compacts the positions in shared memory, writes its share g of the
/// positions (K / G of them) and of the mask (S / G), and gathers the rows
/// of its share of the positions, which it wrote itself (the gather reads
/// them back from `pos` after a barrier).
template <int S, int K, int G, typename Gather>
__global__
__launch_bounds__(kThreads) void topkKernel(const float *r, int64_t B,
                                            int32_t *pos, int64_t *seg,
                                            int32_t *mask, Gather gather) {
  static_assert(K >= 1 && K <= S, "capacity must be in [1, S]");
  static_assert(G >= 1 && G <= K, "blocks a sequence must be in [1, K]");
  static_assert(G == 1 || K <= 8192, "a split gather keeps K positions in "
                                     "shared memory");
  static_assert(kThreads == 256, "a thread per radix bin");
  constexpr int C = (S + kThreads - 1) / kThreads; // positions per thread
  constexpr uint32_t kNoBin = 256;
  __shared__ int hist[256];
  __shared__ int scratch[32];
  __shared__ uint32_t selPrefix;
  __shared__ int selRemaining;
  __shared__ int32_t shared_pos[G > 1 ? K : 1];
  const int64_t b = blockIdx.x / G;
  const int g = int(blockIdx.x % G);
  const int tid = threadIdx.x;
  const int i0 = tid * C;

  uint32_t key[C];
  {
    const float *rb = r + b * S;
#pragma unroll
    for (int c = 0; c < C; ++c)
      key[c] = i0 + c < S ? topkBits(rb[i0 + c]) : 0u;
  }
  uint32_t prefix = 0, prefixMask = 0;
  int remaining = K; // keys still to select among those matching prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;
    __syncthreads();
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const bool counted = i0 + c < S && (key[c] & prefixMask) == prefix;
      const uint32_t bin = counted ? (key[c] >> shift) & 255u : kNoBin;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin != kNoBin && (threadIdx.x % kWarp) == __ffs(peers) - 1)
        atomicAdd(&hist[bin], __popc(peers));
    }
    __syncthreads();
    // Thread t holds bin 255 - t: `above` counts the keys in higher bins.
    // Exactly one bin has above < remaining <= above + count, since
    // 1 <= remaining <= the keys matching prefix (the histogram's total).
    const uint32_t digit = 255u - uint32_t(tid);
    const int count = hist[digit];
    int total = 0;
    const int above = blockExclusiveScan(count, scratch, &total);
    if (above < remaining && remaining <= above + count) {
      selPrefix = prefix | (digit << shift);
      selRemaining = remaining - above;
    }
    __syncthreads();
    prefix = selPrefix;
    remaining = selRemaining;
    prefixMask |= 255u << shift;
    // selPrefix is next written after the next pass's two barriers.
  }
  const uint32_t T = prefix;
  const int need = remaining; // keys equal to T that are selected

  // Pass 1: rank of each T-valued key among the T-valued keys.
  int eq = 0;
#pragma unroll
  for (int c = 0; c < C; ++c)
    eq += (i0 + c < S && key[c] == T) ? 1 : 0;
  int total = 0;
  int eqRank = blockExclusiveScan(eq, scratch, &total);
  // Pass 2: the selection flags, counted for the output ranks.
  int sel = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (i0 + c >= S)
      break;
    if (key[c] > T) {
      ++sel;
    } else if (key[c] == T) {
      sel += eqRank < need ? 1 : 0;
      ++eqRank;
    }
  }
  int outRank = blockExclusiveScan(sel, scratch, &total);
  eqRank -= eq;
  int32_t *mb = mask + b * S;
  int32_t *pb = pos + b * K;
  // This block's shares: positions [k0, k1) of the K, mask [s0, s1).
  const int k0 = g * K / G, k1 = (g + 1) * K / G;
  const int s0 = g * S / G, s1 = (g + 1) * S / G;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i = i0 + c;
    if (i >= S)
      break;
    bool chosen = key[c] > T;
    if (key[c] == T) {
      chosen = eqRank < need;
      ++eqRank;
    }
    if (G == 1 || (i >= s0 && i < s1))
      mb[i] = chosen ? 1 : 0;
    if (chosen) {
      if constexpr (G == 1)
        pb[outRank] = i;
      else
        shared_pos[outRank] = i;
      ++outRank;
    }
  }
  if (tid == 0 && g == 0) {
    seg[b] = b * K;
    if (b == 0)
      seg[B] = B * K;
  }
  if constexpr (G > 1) {
    __syncthreads(); // the compaction is in shared memory
    for (int j = k0 + tid; j < k1; j += kThreads)
      pb[j] = shared_pos[j];
  }
  if constexpr (!std::is_same_v<Gather, NoGather>) {
    __syncthreads(); // this block's share of the positions is written
    const int warp = tid / kWarp, lane = tid % kWarp;
    for (int64_t i = b * K + k0 + warp; i < b * K + k1; i += kRowWarps)
      gather(i, b, lane);
  }
}

/// The fused gather after a causal selection (whose compaction spans the
/// sequences): G blocks a sequence, a warp a row, the blocks' warps taking
/// the rows in turn.
template <int G, typename Gather>
__global__
__launch_bounds__(kThreads) void gatherSequencesKernel(const int64_t *seg,
                                                       Gather gather) {
  const int64_t b = blockIdx.x / G;
  const int g = int(blockIdx.x % G);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int64_t i = seg[b] + g * kRowWarps + warp; i < seg[b + 1];
       i += G * kRowWarps)
    gather(i, b, lane);
}

/// One CTA: the sequences one after another, each an ordered compaction of
/// its routed tokens (logit > 0) after those of the earlier sequences.
template <int S>
__global__ __launch_bounds__(kThreads) void causalSelectKernel(
    const float *logit, int64_t B, int32_t *pos, int64_t *seg, int32_t *mask) {
  constexpr int C = (S + kThreads - 1) / kThreads;
  __shared__ int scratch[32];
  const int tid = threadIdx.x;
  const int i0 = tid * C;
  int64_t offset = 0;
  for (int64_t b = 0; b < B; ++b) {
    const float *lb = logit + b * S;
    int cnt = 0;
    for (int c = 0; c < C; ++c) {
      const int i = i0 + c;
      cnt += (i < S && modk_small::routes(lb[i])) ? 1 : 0;
    }
    int total = 0;
    int64_t at = offset + blockExclusiveScan(cnt, scratch, &total);
    for (int c = 0; c < C && i0 + c < S; ++c)
      at += modk_small::causalSelectToken<S>(logit, b, i0 + c, at, pos, mask);
    if (tid == 0)
      seg[b] = offset;
    offset += total;
  }
  if (tid == 0)
    seg[B] = offset;
}

/// Prefill of the decode cache. Grid (row chunks of 8 warps, nseg): every
/// CTA finds the segment's count n (the first row that is not appended) and
/// copies its chunk's rows below n, a warp a row.
template <int S, int D, int KS, int VS, typename TK, typename TV, typename C>
__global__ __launch_bounds__(kThreads) void cacheAppendKernel(
    const TK *k, const TV *v, const int64_t *seg, const int32_t *pos,
    const int32_t *lengths, C *cache_k, C *cache_v, int32_t *counts) {
  __shared__ int64_t scratch[32];
  const int64_t s = blockIdx.y;
  const int64_t base = seg[s], rows = seg[s + 1] - base;
  int64_t first = rows;
  for (int64_t j = threadIdx.x; j < rows; j += blockDim.x)
    if (!modk_small::prefillAppends(pos, lengths, s, base + j)) {
      first = j;
      break;
    }
  const int64_t n = blockMinI64(first, scratch);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    counts[s] = int32_t(n);
  const int64_t j = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (j >= n)
    return;
  for (int d = threadIdx.x % kWarp; d < D; d += kWarp)
    modk_small::prefillElement<S, D, KS, VS>(k, v, s, j, base + j, d, cache_k,
                                             cache_v);
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Host wrappers
//===----------------------------------------------------------------------===//

/// modc_cuda_params_version: the caller's version of the parameters (0:
/// unknown: every call rounds the weights again).
inline void declare_params_version(uint64_t version) {
  detail::WeightCopies &w = detail::weightCopies();
  if (version != w.version)
    ++w.generation;
  w.version = version;
}

/// The parameters were written by an AdamW step: no copy is current but
/// those the step wrote itself (`updated`, its bf16_copies), which hold
/// the new values.
inline void params_written(const bf16 *const *updated = nullptr,
                           int count = 0) {
  detail::WeightCopies &w = detail::weightCopies();
  ++w.generation;
  for (detail::WeightCopy &c : w.copies)
    for (int i = 0; i < count; ++i)
      if (updated[i] && c.copy == updated[i]) {
        c.generation = w.generation;
        c.epoch = w.epoch;
      }
}

/// Opened for its call by every entry but decode (the forward pass and
/// training's entries): the bf16 products that TMA feeds read bf16 copies
/// of their weights rounded in this call, or at the declared parameters'
/// current generation (detail::weightCopyFor). Copies no call has used for
/// detail::kWeightCopyIdleCalls calls are freed.
struct WeightCopyScope {
  WeightCopyScope() {
    detail::WeightCopies &w = detail::weightCopies();
    ++w.epoch;
    w.open = true;
  }
  ~WeightCopyScope() {
    detail::WeightCopies &w = detail::weightCopies();
    w.open = false;
    auto idle = [&](const detail::WeightCopy &c) {
      return w.epoch - c.epoch >= detail::kWeightCopyIdleCalls;
    };
    for (detail::WeightCopy &c : w.copies)
      if (idle(c))
        cudaFree(c.copy);
    w.copies.erase(std::remove_if(w.copies.begin(), w.copies.end(), idle),
                   w.copies.end());
  }
  WeightCopyScope(const WeightCopyScope &) = delete;
  WeightCopyScope &operator=(const WeightCopyScope &) = delete;
};

/// y[m, n] = sum_k a[m, k] w[n, k] for m < *rows; w is [N, K]. BF16 (here
/// and in every product below): both operands rounded to bf16, f32
/// accumulation (a bf16 model).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA, typename TC>
inline void linear(const TA *a, const int64_t *rows, int64_t max_rows,
                   const float *w, TC *y, cudaStream_t stream) {
  detail::linearEpi<N, K, detail::EpiStore, BF16, PLAN>(a, rows, max_rows, w,
                                                        nullptr, y, stream);
}

/// da[m, k] (+)= sum_n dy[m, n] w[n, k] for m < *rows. In a bf16 product
/// dy may be stored as bf16 (modk-store-bf16).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TD = float>
inline void linear_dgrad(const TD *dy, const int64_t *rows, int64_t max_rows,
                         const float *w, float *da, bool accumulate,
                         cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  if (accumulate)
    detail::launchGemm<PLAN, true, false, 1, detail::EpiAdd, BF16>(
        dy, N, w, K, da, K, da, max_rows, K, N, rows, stream);
  else
    detail::launchGemm<PLAN, true, false, 1, detail::EpiStore, BF16>(
        dy, N, w, K, da, K, nullptr, max_rows, K, N, rows, stream);
}

/// dw[n, k] += sum_{m < *rows} dy[m, n] a[m, k]; one CTA per output tile
/// reduces over all rows (deterministic, no atomics). The overload with
/// scratch below splits the rows where the output has few tiles. In a bf16
/// product `dy` and `a` may be stored as bf16 (modk-store-bf16).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA = float, typename TD = float>
inline void linear_wgrad(const TD *dy, const int64_t *rows, int64_t max_rows,
                         const TA *a, float *dw, cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  // L: the rows' bound (the kernels read the count on the device; the TMA
  // kernel's maps reach the bound).
  detail::launchGemm<PLAN, false, false, 2, detail::EpiAdd, BF16>(
      dy, N, a, K, dw, K, dw, N, K, max_rows, rows, stream);
}

/// Floats of scratch the split linear_wgrad needs for at most max_rows rows
/// (0 where the shapes do not split).
template <int N, int K, typename PLAN = DefaultGemmPlan>
inline int64_t linear_wgrad_scratch_floats(int64_t max_rows) {
  const detail::WgradSplit s = detail::wgradSplit<N, K, PLAN>(max_rows);
  return s.splits > 1 ? s.splits * int64_t(N) * K : 0;
}

/// linear_wgrad with the rows split in chunks where the output has few tiles
/// (detail::wgradSplit, from N, K and max_rows): chunk z's partial product
/// goes to scratch[z * N * K ..], then one kernel adds the partials of the
/// chunks that hold rows to dw in chunk order (deterministic: the result
/// depends on *rows and max_rows, never on the run). `scratch`:
/// linear_wgrad_scratch_floats<N, K>(max_rows) floats (null: no split).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA = float, typename TD = float>
inline void linear_wgrad(const TD *dy, const int64_t *rows, int64_t max_rows,
                         const TA *a, float *dw, float *scratch,
                         cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  const detail::WgradSplit s = detail::wgradSplit<N, K, PLAN>(max_rows);
  if (s.splits <= 1 || scratch == nullptr) {
    linear_wgrad<N, K, BF16, PLAN>(dy, rows, max_rows, a, dw, stream);
    return;
  }
  detail::launchGemm<PLAN, false, false, 3, detail::EpiStore, BF16>(
      dy, N, a, K, scratch, K, nullptr, N, K, s.chunk, rows, stream,
      unsigned(s.splits), max_rows);
  auto k = detail::splitSumKernel;
  MODC_LAUNCH(k, detail::strideGrid(int64_t(N) * K), detail::kThreads, 0,
              stream, scratch, int64_t(N) * K, s.splits, s.chunk, rows, dw);
}

/// The product a w^T (w is [N, K]) finished by the package's generated
/// epilogue I (modk.gemm's `rows` epilogue, detail::RowsEpilogue<I>), which
/// reads its buffers from epi and writes its outputs; the product itself is
/// never stored. False where the plan's tile for the row count cannot hold
/// the epilogue (one over heads, RoPE, where a warp's columns are not whole
/// heads): nothing was enqueued, and the caller runs the product, then the
/// epilogue as a kernel.
template <int N, int K, int I, bool BF16 = false,
          typename PLAN = DefaultGemmPlan, typename TA>
inline bool linear_rows_epilogue(const TA *a, const int64_t *rows,
                                 int64_t max_rows, const float *w,
                                 const detail::EpiArgs &epi,
                                 cudaStream_t stream) {
  const bool fused = detail::linearEpi<N, K, detail::epiRows<I>(), BF16, PLAN>(
      a, rows, max_rows, w, epi, static_cast<float *>(nullptr), stream);
  if (fused && detail::epiHeadDim<detail::epiRows<I>()>() > 0)
    MODC_TEST_COUNT(fusedRopeLaunches);
  return fused;
}

/// The products of a group (modk.gemm's `group`, modk-group-gemms): for
/// each member z, y_z[m, n] = sum_k a_z[m, k] w_z[n, k] for m < *rows_z, in
/// one launch; every member's rows are at most max_rows.
template <int N, int K, int G, bool BF16 = false,
          typename PLAN = DefaultGemmPlan, typename TA, typename TC>
inline void linear_group(const detail::GemmGroup<G, TA, float, TC> &group,
                         int64_t max_rows, cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  detail::launchGemmGroup<PLAN, detail::EpiStore, BF16>(group, K, N, max_rows,
                                                        N, K, stream);
}

/// linear_group with every member's product finished by the generated
/// epilogue I (linear_rows_epilogue), each from its own EpiArgs.
template <int N, int K, int I, int G, bool BF16 = false,
          typename PLAN = DefaultGemmPlan, typename TA>
inline void
linear_rows_epilogue_group(const detail::GemmGroup<G, TA, float, float> &group,
                           int64_t max_rows, cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  detail::launchGemmGroup<PLAN, detail::epiRows<I>(), BF16>(group, K, N,
                                                            max_rows, N, K,
                                                            stream);
}

/// A decode step's sibling products of one input (modk.gemm's `siblings`,
/// modk-group-siblings: its queries', keys' and values'): member z of Sibs
/// (detail::GemmSibling<N, EPI, TC>) is a w_z^T over the K-wide rows of a,
/// finished by its epilogue (a store into c[z], or the generated epilogue
/// from epi[z]), all in one launch of the few-row kernel where PLAN takes
/// it for max_rows rows. False where it does not: nothing was enqueued,
/// and the caller runs each member as its own launch. IN_ORDER
/// (`siblings_in_order`): each CTA runs every member in turn, so that a
/// member's epilogue may read an earlier member's output (SwiGLU's up
/// projection, its gate's product).
template <int K, bool BF16, bool IN_ORDER, typename PLAN, typename... Sibs,
          typename TA>
inline bool linear_siblings(const TA *a, const int64_t *rows, int64_t max_rows,
                            const float *const (&w)[sizeof...(Sibs)],
                            void *const (&c)[sizeof...(Sibs)],
                            const detail::EpiArgs (&epi)[sizeof...(Sibs)],
                            cudaStream_t stream) {
  return detail::launchGemmSiblings<PLAN, K, BF16, IN_ORDER, TA, Sibs...>(
      a, rows, max_rows, w, c, epi, stream);
}

/// pos[b*S + i] = i, seg[b] = b*S (B + 1 entries).
template <int S>
inline void identity_segments(int64_t B, int32_t *pos, int64_t *seg,
                              cudaStream_t stream) {
  detail::forEachItem(modk_small::IdentitySegments<S>{B, pos, seg}, stream);
}

/// tokens [B, S + 1] -> inputs[b, i] = tokens[b, i], targets[b, i] =
/// tokens[b, i + 1] (both [B, S]).
template <int S>
inline void split_tokens(const int32_t *tokens, int64_t B, int32_t *inputs,
                         int32_t *targets, cudaStream_t stream) {
  detail::forEachItem(modk_small::SplitTokens<S>{tokens, B, inputs, targets},
                      stream);
}

/// Top-k routing with the CPU's selection and tie-breaking: per sequence the
/// K largest r (ties to the lower position, NaN below every number), in
/// ascending position at pos[b*K ..]; seg[b] = b*K (B + 1 entries); mask.
/// With a Gather (modk-fuse-select-gather), each sequence's G blocks then
/// gather its rows: gather(i, b, lane), a warp a row.
template <int S, int K, int G = 1, typename Gather = detail::NoGather>
inline void select_topk(const float *r, int64_t B, int32_t *pos, int64_t *seg,
                        int32_t *mask, Gather gather, cudaStream_t stream) {
  if (B <= 0) {
    cudaMemsetAsync(seg, 0, sizeof(int64_t), stream);
    return;
  }
  auto k = detail::topkKernel<S, K, G, Gather>;
  MODC_LAUNCH(k, unsigned(B * G), detail::kThreads, 0, stream, r, B, pos, seg,
              mask, gather);
}
template <int S, int K>
inline void select_topk(const float *r, int64_t B, int32_t *pos, int64_t *seg,
                        int32_t *mask, cudaStream_t stream) {
  select_topk<S, K>(r, B, pos, seg, mask, detail::NoGather{}, stream);
}

/// gather(i, b, lane) for the rows i of every sequence b (a warp a row, G
/// blocks a sequence): a fused gather after a causal selection.
template <int G = 1, typename Gather>
inline void gather_sequences(int64_t B, const int64_t *seg, Gather gather,
                             cudaStream_t stream) {
  if (B <= 0)
    return;
  auto k = detail::gatherSequencesKernel<G, Gather>;
  MODC_LAUNCH(k, unsigned(B * G), detail::kThreads, 0, stream, seg, gather);
}

/// Causal routing: token (b, i) routed iff logits[b*S + i] > 0; routed rows
/// of all sequences packed in order (pos), seg the prefix (B + 1 entries;
/// seg[B] is the routed count), mask the 0/1 decisions.
template <int S>
inline void select_causal(const float *logits, int64_t B, int32_t *pos,
                          int64_t *seg, int32_t *mask, cudaStream_t stream) {
  auto k = detail::causalSelectKernel<S>;
  MODC_LAUNCH(k, 1, detail::kThreads, 0, stream, logits, B, pos, seg, mask);
}

/// Causal multi-head attention over segments (the CPU's causal_attention):
/// q and out are [rows, H * HD], k and v [rows, KVH * HD], rows = seg[nseg];
/// row i attends to the rows j of its segment with pos[j] <= pos[i], scale
/// 1/sqrt(HD), head h with key/value head h / (H / KVH) (grouped-query
/// attention where KVH < H, docs/model-format.md section 3).
/// `max_seg_rows` bounds the rows of one segment (S, or K for a top-k row
/// set) and sizes the grid. `Mainloop` is the compiler's choice
/// (modk-configure-gemms): 2 (wgmma) runs attentionWgmmaKernel (sm_90a,
/// TMA and wgmma on bf16 q, k, v; P rounded to bf16) where the head dim is
/// 64 or 128, q, k and v are bf16 arrays and TMA can read them; 1 (mma), or
/// 2 where wgmma cannot run, attentionTcKernel (tensor cores, 3xTF32) where
/// attentionTcHeadDim<HD> allows; else attentionKernel (SIMT f32). BF16: q,
/// k, v hold bf16 values (a bf16 model); the result is the same, with fewer
/// tensor-core instructions. q, k, v: float, or bf16 (a bf16 model's,
/// modk-store-bf16: widened as the tiles are loaded). out: float, or bf16
/// (rounded) where only products read it.
template <int H, int HD, bool BF16 = false, int Mainloop = 1, int KVH = H,
          typename TQ, typename TK, typename TV, typename Out>
inline void causal_attention(const TQ *q, const TK *k, const TV *v,
                             int64_t nseg, const int64_t *seg,
                             const int32_t *pos, int64_t max_seg_rows,
                             Out *out, cudaStream_t stream) {
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  static_assert(Mainloop >= 0 && Mainloop <= 2, "simt, mma or wgmma");
  if (nseg <= 0 || max_seg_rows <= 0)
    return;
  if constexpr (Mainloop == 2 && detail::attentionWgmmaHeadDim<HD> &&
                std::is_same_v<TQ, bf16> && std::is_same_v<TK, bf16> &&
                std::is_same_v<TV, bf16>) {
    const dim3 tiles(unsigned(ceilDiv(max_seg_rows, detail::kAttnWgBQ)),
                     unsigned(H), unsigned(nseg));
    if (detail::launchAttentionWgmma<H, HD, KVH>(
            tiles, q, k, v, nseg * max_seg_rows, seg, pos, out, stream))
      return;
  }
  constexpr bool TensorCores = Mainloop >= 1;
  const dim3 grid(unsigned(ceilDiv(max_seg_rows, detail::kAttnBQ)), unsigned(H),
                  unsigned(nseg));
  if constexpr (TensorCores && detail::attentionTcHeadDim<HD>) {
    detail::launchAttention<true, H, HD, KVH, BF16>(grid, q, k, v, seg, pos,
                                                    out, stream);
  } else {
    detail::launchAttention<false, H, HD, KVH, false>(grid, q, k, v, seg, pos,
                                                      out, stream);
  }
}

/// Prefill of a layer's decode cache (the CPU's cache_append): row j of
/// sequence s goes to cache slot j while pos[j] < lengths[s]; counts[s]
/// ends as the number appended. k, v are [rows, D] of float or bf16, rows
/// KS and VS elements apart; the caches [nseg, S, D] of C: float, or bf16
/// (a bf16 model: k and v hold bf16 values).
template <int S, int D, int KS = D, int VS = D, typename TK, typename TV,
          typename C>
inline void cache_append(const TK *k, const TV *v, int64_t nseg,
                         const int64_t *seg, const int32_t *pos,
                         const int32_t *lengths, C *cache_k, C *cache_v,
                         int32_t *counts, cudaStream_t stream) {
  if (nseg <= 0)
    return;
  auto kern = detail::cacheAppendKernel<S, D, KS, VS, TK, TV, C>;
  MODC_LAUNCH(kern,
              dim3(unsigned(ceilDiv(S, detail::kRowWarps)), unsigned(nseg)),
              detail::kThreads, 0, stream, k, v, seg, pos, lengths, cache_k,
              cache_v, counts);
}

//===----------------------------------------------------------------------===//
// Mixture-of-Experts MLPs (docs/model-format.md section 7)
//===----------------------------------------------------------------------===//

namespace detail {
/// A thread a sequence: its rows' choices and gates and its experts' counts.
template <int W, int E, int C>
__global__ void moeChooseKernel(const float *z, int64_t B, const int64_t *seg,
                                float *probs, int32_t *choice, float *gate,
                                const int32_t *running,
                                const uint8_t *active, int32_t *counts) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < B)
    modk_small::moeChooseSequence<W, E, C>(
        z, seg[b], seg[b + 1] - seg[b], probs, choice, gate,
        running ? running + b * E : nullptr, !active || active[b],
        counts + b * E);
}

/// A thread an expert: its segment offsets, the sequences' counts summed
/// in order.
template <int E>
__global__ void moeExpertSegmentsKernel(int64_t B, const int32_t *counts,
                                        modk_small::ExpertRows<E> rows) {
  const int e = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (e >= E)
    return;
  int64_t at = 0;
  for (int64_t b = 0; b < B; ++b) {
    rows.seg[e][b] = at;
    at += counts[b * E + e];
  }
  rows.seg[e][B] = at;
}

/// A thread a sequence: its kept rows into the experts' row sets, and its
/// decisions where the caller asked for them.
template <int RT, int W, int E, int S>
__global__ void moeFillKernel(int64_t B, const int64_t *seg,
                              const int32_t *pos, const int32_t *choice,
                              const float *gate,
                              modk_small::ExpertRows<E> rows,
                              int32_t *decisions, const int32_t *counts,
                              int32_t *running) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= B)
    return;
  if (running)
    for (int e = 0; e < E; ++e)
      running[b * E + e] += counts[b * E + e];
  const int64_t first = seg[b], n = seg[b + 1] - seg[b];
  modk_small::moeFillSequence<E, RT>(b, first, n, choice, gate, rows);
  if (decisions)
    modk_small::moeDecisionsSequence<W, E, S>(b, first, n, pos, choice, gate,
                                              decisions);
}

/// A thread a sequence: the causal prefill's decode state.
template <int E>
__global__ void moeCountKernel(int64_t B, const int64_t *seg,
                               const int32_t *pos, const int32_t *choice,
                               const float *gate, const int32_t *lengths,
                               int32_t *counts) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < B)
    modk_small::moeCountSequence<E>(seg[b], seg[b + 1] - seg[b], pos, choice,
                                    gate, lengths[b], counts + b * E);
}

/// One thread: the balance loss over every row in order (the CPU's sums),
/// added into the losses, and the gradient coefficients.
template <int W>
__global__ void moeBalanceKernel(const float *probs, const int32_t *choice,
                                 int64_t B, const int64_t *seg, float *losses,
                                 double weight, int64_t n_moe, float *coef) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  const int64_t rows = seg[B];
  if (rows <= 0)
    return;
  modk_small::moeBalanceLoss<W>(probs, choice, rows, losses, weight, n_moe,
                                coef);
}

/// A thread a row: the router logits' gradient.
template <int W>
__global__ void moeRouterGradKernel(const float *probs, const int32_t *choice,
                                    const float *dgate, int64_t B,
                                    const int64_t *seg, const float *coef,
                                    float *dlogits) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < seg[B])
    modk_small::moeRouterGradRow<W>(probs + r * W, choice[r], dgate[r], coef,
                                    dlogits + r * W);
}
} // namespace detail

/// modk.moe_select (the CPU's moe_select); `counts`: B E ints of scratch.
template <int RT, int W, int E, int C, int S>
inline void moe_select(const float *z, int64_t B, const int64_t *seg,
                       const int32_t *pos, float *probs, int32_t *choice,
                       float *gate, modk_small::ExpertRows<E> rows,
                       int32_t *decisions, int32_t *running,
                       const uint8_t *active, int32_t *counts,
                       cudaStream_t stream) {
  const unsigned blocks = unsigned(ceilDiv(B, detail::kThreads));
  auto choose = detail::moeChooseKernel<W, E, C>;
  MODC_LAUNCH(choose, blocks, detail::kThreads, 0, stream, z, B, seg, probs,
              choice, gate, running, active, counts);
  auto segments = detail::moeExpertSegmentsKernel<E>;
  MODC_LAUNCH(segments, unsigned(ceilDiv(E, detail::kThreads)),
              detail::kThreads, 0, stream, B, counts, rows);
  auto fill = detail::moeFillKernel<RT, W, E, S>;
  MODC_LAUNCH(fill, blocks, detail::kThreads, 0, stream, B, seg, pos, choice,
              gate, rows, decisions, counts, running);
}

/// modk.moe_count (the CPU's moe_count).
template <int E>
inline void moe_count(int64_t B, const int64_t *seg, const int32_t *pos,
                      const int32_t *choice, const float *gate,
                      const int32_t *lengths, int32_t *counts,
                      cudaStream_t stream) {
  auto count = detail::moeCountKernel<E>;
  MODC_LAUNCH(count, unsigned(ceilDiv(B, detail::kThreads)), detail::kThreads,
              0, stream, B, seg, pos, choice, gate, lengths, counts);
}

/// modk.moe_balance (the CPU's moe_balance); `coef`: 2 W floats of
/// scratch.
template <int RT, int W>
inline void moe_balance(const float *probs, const int32_t *choice,
                        const float *dgate, int64_t B, const int64_t *seg,
                        float *dlogits, float *losses, double weight,
                        int64_t n_moe, float *coef, cudaStream_t stream) {
  auto balance = detail::moeBalanceKernel<W>;
  MODC_LAUNCH(balance, 1, 1, 0, stream, probs, choice, B, seg, losses, weight,
              n_moe, coef);
  if (!dlogits)
    return;
  auto grad = detail::moeRouterGradKernel<W>;
  MODC_LAUNCH(grad, unsigned(ceilDiv(B * RT, detail::kThreads)),
              detail::kThreads, 0, stream, probs, choice, dgate, B, seg, coef,
              dlogits);
}

} // namespace modk_cuda

#endif // MODC_CUDA_KERNELS_INCLUDED
