//===- CudaKernelsDecode.cuh - CUDA decode-step kernels ---------*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The decode-step kernels of modc's CUDA target: the twins of
/// Target/Cpp/prelude/CpuKernelsDecode.h (same names, template parameters and
/// semantics; device pointers; the stream last). The CUDA emitter pastes this
/// header after CudaCommon.cuh and CudaKernels.cuh.
///
/// A decode step is meant to be captured in one CUDA graph, so every wrapper
/// only enqueues kernels: no wrapper synchronises, allocates, or reads device
/// memory on the host. How many sequences route at a layer is known only on
/// the device (seg[B]); grids are sized by the static bound B (at most one row
/// a sequence in a decode step) and blocks past seg[B] exit.
///
/// Conventions of a decode step (CpuKernelsDecode.h): the residual stream is
/// [B, D], row b = sequence b; a row set has seg with B + 1 entries, rows
/// [seg[b], seg[b+1]) belong to sequence b; the KV cache of one layer is K and
/// V, each [B, S, H * HD]; counts[b] is the number of tokens sequence b holds
/// in that layer.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_KERNELS_DECODE_INCLUDED
#define MODC_CUDA_KERNELS_DECODE_INCLUDED

#ifndef MODC_CUDA_COMMON_INCLUDED
#include "CudaCommon.cuh"
#endif

#include <cstdint>

namespace modk_cuda {

namespace decode_detail {

/// Threads of the row-wise decode kernels (the cache append, the split-K
/// combine).
constexpr int kRowThreads = 128;
/// Threads of the single-CTA routing scan (one tile of B per iteration).
constexpr int kScanThreads = 256;

/// Attention: threads per block, and keys per tile (one key a thread in the
/// score phase).
constexpr int kAttnThreads = 128;
constexpr int kAttnBK = kAttnThreads;
/// Split-K: at least this many keys per split (one tile), and splits are
/// added only while (rows * heads * splits) stays under about this many CTAs
/// (two waves of a 132-SM H100; more rows need no split).
constexpr int kAttnMinSplitKeys = kAttnBK;
constexpr int64_t kAttnTargetCtas = 264;
/// Partial results (one per (row, head, split)) the built-in split-K scratch
/// holds; the split count is capped so that a step fits.
constexpr int64_t kAttnScratchPartials = 4096;

__device__ __forceinline__ float quietNaN() {
  return __int_as_float(0x7fc00000);
}

/// Four consecutive floats (16-byte aligned on the device).
#if defined(__CUDACC__)
__device__ __forceinline__ float4 load4(const float *p) {
  return *reinterpret_cast<const float4 *>(p);
}
#endif

/// Four consecutive bf16 as floats (8-byte aligned on the device).
#if defined(__CUDACC__)
__device__ __forceinline__ float4 load4(const bf16 *p) {
  const uint2 u = *reinterpret_cast<const uint2 *>(p);
  return make_float4(
      __uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
      __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
#endif

//===----------------------------------------------------------------------===//
// Row sets and routing
//===----------------------------------------------------------------------===//

/// One CTA: the ordered compaction of the routed sequences (a block-wide
/// prefix sum over tiles of kScanThreads sequences, carried across tiles).
/// Then, with a Gather (modk-fuse-select-gather), the block's warps gather
/// the routed rows: gather(seg[b], b, lane), a warp a row.
template <int NT = kScanThreads, typename Gather = detail::NoGather>
__global__ void __launch_bounds__(NT)
    decodeRouteScanKernel(int64_t B, const float *decision,
                          const int32_t *positions, const uint8_t *active,
                          int32_t *pos, int64_t *seg, int32_t *mask,
                          Gather gather = {}) {
  __shared__ int warpTotals[NT / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  constexpr int warps = NT / kWarp;
  int64_t carry = 0;
  for (int64_t b0 = 0; b0 < B; b0 += NT) {
    const int64_t b = b0 + threadIdx.x;
    const bool routed = b < B && modk_small::decodeRoutes(decision, active, b);
    const unsigned ballot = __ballot_sync(0xffffffffu, routed ? 1 : 0);
    const int inWarp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0)
      warpTotals[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < warps; ++w) {
      before += w < warp ? warpTotals[w] : 0;
      total += warpTotals[w];
    }
    const int64_t index = carry + before + inWarp;
    if (b < B)
      modk_small::decodeSelectEntry(b, index, routed, positions, pos, seg,
                                    mask);
    carry += total;
    __syncthreads(); // warpTotals is rewritten by the next tile
  }
  if (threadIdx.x == 0)
    seg[B] = carry;
  if constexpr (!std::is_same_v<Gather, detail::NoGather>) {
    __syncthreads(); // every sequence's mask and row are written
    for (int64_t b = warp; b < B; b += warps)
      if (mask[b])
        gather(seg[b], b, lane);
  }
}

//===----------------------------------------------------------------------===//
// Attention against the KV cache
//===----------------------------------------------------------------------===//
//
// Two kernels, ordered by the stream:
//  1. append (a block per sequence): reads counts[b], copies the K and V rows
//     of its active rows into the cache, then writes counts[b]. Each row's
//     number of keys n (0: inactive, -1: refused, full cache) and sequence b
//     are left in the first two floats of each head's slice of out[j] (bit
//     patterns); `out` is the op's own output, which the memory plan never
//     overlaps with q, k or v (they are all live at this op). With split-K
//     it also zeroes its rows' arrival counters.
//  2. attend (a block per (row, head, split)): reads its row's n and b from
//     out, scores a range of keys a tile at a time with an online softmax.
//     With one split it writes out directly; with several it writes the
//     split's (max, sum, unnormalised accumulator) to the scratch, and the
//     split that arrives last at its (row, head) counter combines them:
//     rescales and sums the splits in split order (the same arithmetic
//     whichever split arrives last), so no third kernel runs.
// The appends of kernel 1 are visible to kernel 2 because the kernels are
// consecutive in one stream; counts is written only by kernel 1, after its own
// block read it, and read by no later kernel of the step.

/// Bit patterns of the per-row metadata the append leaves in `out`.
__device__ __forceinline__ void putInt(float *p, int32_t v) {
  *p = __int_as_float(v);
}
__device__ __forceinline__ int32_t getInt(const float *p) {
  return __float_as_int(*p);
}

/// The first 8 bytes of a head's output slice o (elements TO: float, or
/// bf16 where only products read the output, modk-store-bf16), where the
/// append leaves the row's metadata for the attend kernel: two int32 bit
/// patterns.
template <int HD, typename TO> __device__ __forceinline__ float *metaOf(TO *o) {
  static_assert(HD * sizeof(TO) >= 2 * sizeof(float) &&
                    (HD * sizeof(TO)) % sizeof(float) == 0,
                "a head's output holds its row's metadata, 4-byte aligned");
  return reinterpret_cast<float *>(o);
}

/// The built-in split-K scratch of one head size: kAttnScratchPartials
/// partial results of HD + 2 floats, then an arrival counter for each (row,
/// head) (at most kAttnScratchPartials / 2 of them: two splits or more).
template <int HD>
__device__ float
    attnScratch[kAttnScratchPartials * (HD + 2) + kAttnScratchPartials / 2];

/// The partial results of a step: the caller's scratch, or the built-in one
/// when that is null.
template <int HD> __device__ __forceinline__ float *partialsOf(float *scratch) {
  return scratch != nullptr ? scratch : attnScratch<HD>;
}

/// Floats of split-K scratch for `items` (row, head) pairs in `nsplit`
/// splits: their partial results, then an int32 arrival counter each.
template <int HD>
MODC_HOST_DEVICE int64_t attnScratchFloats(int64_t items, int nsplit) {
  return items * nsplit * (HD + 2) + items;
}

/// The arrival counters of a step of `items` (row, head) pairs in `nsplit`
/// splits, after its partial results.
template <int HD>
__device__ __forceinline__ int32_t *arrivalsOf(float *scratch, int64_t items,
                                               int nsplit) {
  return reinterpret_cast<int32_t *>(partialsOf<HD>(scratch) +
                                     items * nsplit * (HD + 2));
}

/// Appends k and v (KVH heads a row: grouped-query attention,
/// docs/model-format.md section 3) and writes each query head's metadata.
/// With split-K (nsplit > 1) it also zeroes the attend kernel's arrival
/// counter of each (row, head) of its rows j < B in `scratch`.
template <int S, int H, int HD, int KVH, typename TK, typename TV, typename C,
          typename TO>
__global__ void __launch_bounds__(kRowThreads)
    decodeAppendKernel(const TK *k, const TV *v, int64_t B, const int64_t *seg,
                       const uint8_t *active, C *cacheK, C *cacheV,
                       int32_t *counts, TO *out, int nsplit, float *scratch) {
  int32_t *arrivals =
      nsplit > 1 ? arrivalsOf<HD>(scratch, B * H, nsplit) : nullptr;
  constexpr int64_t LD = static_cast<int64_t>(H) * HD;
  constexpr int64_t LDK = static_cast<int64_t>(KVH) * HD;
  const int64_t b = blockIdx.x;
  const int64_t first = seg[b], last = seg[b + 1];
  if (first == last)
    return;
  const bool act = active[b] != 0;
  const int32_t c0 = counts[b];
  const bool valid = act && c0 >= 0 && c0 < S;
  for (int64_t j = first; j < last; ++j) {
    const int64_t i = j - first;
    const int64_t c = c0 + i; // the row's slot
    int32_t n = 0;
    if (act)
      n = valid && c < S ? static_cast<int32_t>(c + 1) : -1;
    if (n > 0) {
      const int64_t slot = (b * S + c) * LDK;
      for (int64_t e = threadIdx.x; e < LDK; e += blockDim.x) {
        cacheK[slot + e] = C(float(k[j * LDK + e]));
        cacheV[slot + e] = C(float(v[j * LDK + e]));
      }
    }
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
      float *meta = metaOf<HD>(out + j * LD + h * HD);
      putInt(meta, n);
      putInt(meta + 1, static_cast<int32_t>(b));
      if (arrivals != nullptr && j < B)
        arrivals[j * H + h] = 0;
    }
  }
  __syncthreads(); // every thread has read counts[b]
  if (threadIdx.x == 0 && valid) {
    const int64_t appended = S - c0 < last - first ? S - c0 : last - first;
    counts[b] = static_cast<int32_t>(c0 + appended);
  }
}

/// Keys of each split of n keys: whole tiles, so short caches use only the
/// first splits (the others are empty).
__device__ __forceinline__ int64_t splitKeys(int64_t n, int nsplit) {
  const int64_t per = (n + nsplit - 1) / nsplit;
  return (per + kAttnBK - 1) / kAttnBK * kAttnBK;
}

/// A value another block wrote in this kernel, read past this SM's L1
/// (which may hold the line from an earlier step).
__device__ __forceinline__ float loadCoherent(const float *p) {
  return *static_cast<const volatile float *>(p);
}

/// Split-K: called by every thread of each split's block of (row j, head
/// h) once its partial result is written; true in the block that arrives
/// last, which may then read every split's (arrivals are counted past the
/// partials: attnScratchFloats). `arrived` is the block's shared count.
template <int HD>
__device__ __forceinline__ bool arriveLast(float *partials, int64_t j, int h,
                                           int ns, int32_t &arrived) {
  __threadfence(); // this thread's writes, before its block arrives
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t *count =
        arrivalsOf<HD>(partials, static_cast<int64_t>(gridDim.x) * gridDim.y,
                       ns) +
        j * gridDim.y + h;
    arrived = atomicAdd(count, 1) + 1;
  }
  __syncthreads();
  const bool last = arrived == ns;
  if (last)
    __threadfence(); // the other splits' writes, before this block reads
  return last;
}

/// out[j]'s head h (o) from the ns splits' partial results: the splits
/// rescaled to their common max and summed in split order.
template <int H, int HD, int NT, typename TO>
__device__ void combineSplits(float *partials, int64_t j, int h, int ns,
                              TO *o) {
  const float *part = partialsOf<HD>(partials) + (j * H + h) * ns * (HD + 2);
  float mmax = negInf();
  for (int s = 0; s < ns; ++s)
    mmax = fmaxf(mmax, loadCoherent(part + s * (HD + 2)));
  for (int d = threadIdx.x; d < HD; d += NT) {
    float l = 0.0f, acc = 0.0f;
    for (int s = 0; s < ns; ++s) {
      const float *ps = part + s * (HD + 2);
      const float sum = loadCoherent(ps + 1);
      if (sum == 0.0f)
        continue; // an empty split (its max is -inf)
      const float wgt = expf(loadCoherent(ps) - mmax);
      l += sum * wgt;
      acc += loadCoherent(ps + 2 + d) * wgt;
    }
    o[d] = TO(acc * (1.0f / l));
  }
}

/// Query head h attends over the cache of key/value head h / (H / KVH).
template <int S, int H, int HD, int KVH, typename TQ, typename C, typename TO>
__global__ void __launch_bounds__(kAttnThreads)
    decodeAttendKernel(const TQ *q, int64_t B, const int64_t *seg,
                       const C *cacheK, const C *cacheV, int nsplit,
                       float *partials, TO *out) {
  constexpr int NT = kAttnThreads;
  constexpr int BK = kAttnBK;
  constexpr int64_t LD = static_cast<int64_t>(H) * HD;
  constexpr int64_t LDK = static_cast<int64_t>(KVH) * HD; // a cached token
  // Accumulator layout: NG groups of HD threads split the keys of a tile
  // (HD <= NT), or each thread owns DPT dims (HD > NT).
  constexpr int NG = HD <= NT ? NT / HD : 1;
  constexpr int DPT = HD <= NT ? 1 : (HD + NT - 1) / NT;
  __shared__ float qs[HD];
  __shared__ float sc[BK];
  __shared__ float red[kWarp];
  __shared__ float groupAcc[NG > 1 ? NG * HD : 1];
  __shared__ int32_t arrived; // arriveLast's count

  // Rows beyond the grid (several rows a sequence, a prefill chunk) are
  // taken by the blocks in turn, unsplit: only rows j < gridDim.x (= B) have
  // partial results, so the scratch holds B rows.
  const int64_t rows = seg[B];
  for (int64_t j = blockIdx.x; j < rows; j += gridDim.x) {
    const int h = blockIdx.y;
    const int split = blockIdx.z;
    const int ns = j < gridDim.x ? nsplit : 1;
    if (split >= ns)
      continue; // uniform over the block
    const int tid = threadIdx.x;
    TO *o = out + j * LD + h * HD;
    const int32_t n = getInt(metaOf<HD>(o));
    const int64_t b = getInt(metaOf<HD>(o) + 1);
    if (ns == 1)
      __syncthreads(); // every thread has read n and b before o is written
    if (n <= 0) {
      // Inactive (zero row) or refused (NaN row); with several splits the
      // last to arrive writes it, once every split has read n and b.
      if (ns == 1 || arriveLast<HD>(partials, j, h, ns, arrived))
        for (int d = tid; d < HD; d += NT)
          o[d] = TO(n == 0 ? 0.0f : quietNaN());
      continue;
    }
    const int64_t per = splitKeys(n, ns);
    const int64_t tBegin = per * split;
    const int64_t tEnd = tBegin + per < n ? tBegin + per : n;

    const float scale = 1.0f / sqrtf(static_cast<float>(HD));
    for (int d = tid; d < HD; d += NT)
      qs[d] = float(q[j * LD + h * HD + d]) * scale;
    __syncthreads();

    // The head's offset in int, as before grouped-query attention: a 64-bit
    // product here costs the kernel a register spill.
    const int64_t base = b * S * LDK + (h / (H / KVH)) * HD;
    const int g = tid / HD; // the group of this thread (HD <= NT)
    float acc[DPT];
    for (int e = 0; e < DPT; ++e)
      acc[e] = 0.0f;
    float mrun = negInf(), lrun = 0.0f;
    for (int64_t t0 = tBegin; t0 < tEnd; t0 += BK) {
      const int kn = tEnd - t0 < BK ? static_cast<int>(tEnd - t0) : BK;
      // Scores: one key a thread.
      float s = negInf();
      if (tid < kn) {
        const C *kt = cacheK + base + (t0 + tid) * LDK;
        float dot = 0.0f;
        if constexpr (HD % 4 == 0) {
          for (int d = 0; d < HD; d += 4) {
            const float4 kv = load4(kt + d);
            dot += qs[d] * kv.x;
            dot += qs[d + 1] * kv.y;
            dot += qs[d + 2] * kv.z;
            dot += qs[d + 3] * kv.w;
          }
        } else {
          for (int d = 0; d < HD; ++d)
            dot += qs[d] * kt[d];
        }
        s = dot;
      }
      const float mnew = fmaxf(mrun, blockMax(s, red));
      // mrun is -inf on the first tile, whose key 0 makes mnew finite for
      // finite inputs, so alpha is 0 there and acc (zero) stays zero.
      const float alpha = expf(mrun - mnew);
      const float p = tid < kn ? expf(s - mnew) : 0.0f;
      sc[tid] = p;
      lrun = lrun * alpha + blockSum(p, red); // blockSum's barriers publish sc
      for (int e = 0; e < DPT; ++e)
        acc[e] *= alpha;
      if (HD <= NT) {
        if (g < NG) {
          const C *vt = cacheV + base + t0 * LDK + tid % HD;
          for (int t = g; t < kn; t += NG)
            acc[0] += sc[t] * vt[t * LDK];
        }
      } else {
        for (int t = 0; t < kn; ++t) {
          const float pt = sc[t];
          const C *vt = cacheV + base + (t0 + t) * LDK;
          for (int e = 0; e < DPT; ++e) {
            const int d = tid + e * NT;
            if (d < HD)
              acc[e] += pt * vt[d];
          }
        }
      }
      mrun = mnew;
      __syncthreads(); // sc is rewritten by the next tile
    }
    if (NG > 1) {
      if (g < NG)
        groupAcc[g * HD + tid % HD] = acc[0];
      __syncthreads();
      if (tid < HD) {
        float total = 0.0f;
        for (int gg = 0; gg < NG; ++gg)
          total += groupAcc[gg * HD + tid];
        acc[0] = total;
      }
    }
    if (ns == 1) {
      // An empty range cannot happen here (n >= 1 keys, one split).
      const float inv = 1.0f / lrun;
      for (int e = 0; e < DPT; ++e) {
        const int d = HD <= NT ? tid : tid + e * NT;
        if (d < HD)
          o[d] = TO(acc[e] * inv);
      }
    } else {
      // An empty split leaves max -inf, sum 0 and a zero accumulator.
      float *part = partialsOf<HD>(partials) +
                    ((j * H + h) * ns + split) * (HD + 2);
      if (tid == 0) {
        part[0] = mrun;
        part[1] = lrun;
      }
      for (int e = 0; e < DPT; ++e) {
        const int d = HD <= NT ? tid : tid + e * NT;
        if (d < HD)
          part[2 + d] = acc[e];
      }
      if (arriveLast<HD>(partials, j, h, ns, arrived))
        combineSplits<H, HD, NT>(partials, j, h, ns, o);
    }

    __syncthreads(); // qs, sc and groupAcc are rewritten by the next row
  }
}

/// Splits for a step of at most B rows (host side; B is the static bound).
template <int S, int H>
inline int attnSplits(int64_t B, int64_t capacityPartials) {
  const int64_t items = B * H;
  if (items <= 0 || items * 2 > kAttnTargetCtas)
    return 1;
  int64_t n = (kAttnTargetCtas + items - 1) / items;
  const int64_t maxByKeys = (S + kAttnMinSplitKeys - 1) / kAttnMinSplitKeys;
  if (n > maxByKeys)
    n = maxByKeys;
  if (n > capacityPartials / items)
    n = capacityPartials / items;
  return n < 2 ? 1 : static_cast<int>(n);
}

/// Enqueues the append and the attention with `nsplit` splits; with
/// nsplit > 1, `scratch` holds attnScratchFloats<HD>(B * H, nsplit) floats,
/// or is null for the built-in attnScratch<HD> (nsplit * B * H at most
/// kAttnScratchPartials).
template <int S, int H, int HD, int KVH = H, typename TQ, typename TK,
          typename TV, typename C, typename TO>
inline void decodeAttentionLaunch(const TQ *q, const TK *k, const TV *v,
                                  int64_t B, const int64_t *seg,
                                  const uint8_t *active, C *cacheK, C *cacheV,
                                  int32_t *counts, TO *out, int nsplit,
                                  float *scratch, cudaStream_t stream) {
  if (B <= 0)
    return;
  auto append = decodeAppendKernel<S, H, HD, KVH, TK, TV, C, TO>;
  MODC_LAUNCH(append, dim3(unsigned(B)), dim3(kRowThreads), 0, stream, k, v, B,
              seg, active, cacheK, cacheV, counts, out, nsplit, scratch);
  auto attend = decodeAttendKernel<S, H, HD, KVH, TQ, C, TO>;
  MODC_LAUNCH(attend, dim3(unsigned(B), H, nsplit), dim3(kAttnThreads), 0,
              stream, q, B, seg, static_cast<const C *>(cacheK),
              static_cast<const C *>(cacheV), nsplit, scratch, out);
}

} // namespace decode_detail

//===----------------------------------------------------------------------===//
// Host wrappers (enqueue only)
//===----------------------------------------------------------------------===//

/// Row set of a dense layer in a decode step: seg[b] = b (B + 1 entries),
/// pos[b] = positions[b], an inactive sequence's position clamped to [0, S).
template <int S>
inline void decode_rows(const int32_t *positions, const uint8_t *active,
                        int64_t B, int32_t *pos, int64_t *seg,
                        cudaStream_t stream) {
  static_assert(S >= 1, "decode needs at least one position");
  detail::forEachItem(
      modk_small::DecodeRows<S>{positions, active, B, pos, seg}, stream);
}

/// Causal routing of one decode step from its router scores (a row kernel
/// modc generates, earlier on the stream): sequence b is routed iff
/// active[b] and decision[b] > 0; routed sequences are compacted in b order
/// into seg (B + 1 entries, seg[B] the routed count), pos and mask, as the
/// CPU's decode_select.
/// With a Gather (modk-fuse-select-gather), the same block then gathers the
/// routed rows.
template <typename Gather>
inline void decode_select(int64_t B, const float *decision,
                          const int32_t *positions, const uint8_t *active,
                          int32_t *pos, int64_t *seg, int32_t *mask,
                          Gather gather, cudaStream_t stream) {
  using namespace decode_detail;
  auto scan = decodeRouteScanKernel<kScanThreads, Gather>;
  MODC_LAUNCH(scan, dim3(1), dim3(kScanThreads), 0, stream, B, decision,
              positions, active, pos, seg, mask, gather);
}
inline void decode_select(int64_t B, const float *decision,
                          const int32_t *positions, const uint8_t *active,
                          int32_t *pos, int64_t *seg, int32_t *mask,
                          cudaStream_t stream) {
  decode_select(B, decision, positions, active, pos, seg, mask,
                detail::NoGather{}, stream);
}

/// Floats of split-K scratch decode_attention may use for at most B rows
/// (for the overload that takes the scratch).
template <int S, int H, int HD>
inline int64_t decode_attention_scratch_floats(int64_t B) {
  const int nsplit = decode_detail::attnSplits<S, H>(B, INT64_MAX / 2);
  return nsplit > 1 ? decode_detail::attnScratchFloats<HD>(B * H, nsplit) : 0;
}

/// Attention of one decode step against one layer's KV cache, with the CPU
/// semantics (CpuKernelsDecode.h): for each row j of an active sequence b,
/// k[j] and v[j] are appended at cache[b][counts[b]] and counts[b] grows; then
/// out[j] attends per head over the counts[b] (new count) cached tokens. A row
/// that would overflow the cache (counts[b] not in [0, S)) appends nothing and
/// gets a NaN row; rows of an inactive sequence get a zero row. q and out
/// are [seg[B], H * HD], k and v [seg[B], KVH * HD] (query head h attends
/// with key/value head h / (H / KVH): grouped-query attention,
/// docs/model-format.md section 3), and `out` must not overlap q, k or v;
/// cache_k and cache_v are [B, S, KVH * HD] of C (float, or bf16 in a bf16
/// model, whose keys and values are bf16 values); counts is [B]. q, k and v
/// hold float, or bf16 (modk-store-bf16), widened exactly; out holds float, or
/// bf16 (modk-store-bf16, where only products read it: rounded as it is
/// stored). `pos` is not read. Several
/// rows of one sequence (a prefill chunk, in position order) are allowed as
/// on the CPU; rows past B are attended without splits.
///
/// Long caches with few rows are split over several CTAs (flash-decoding);
/// this overload keeps the partial results in a scratch buffer of the module
/// (one per head size), so decode steps of one model that run concurrently
/// on different streams must use the overload below instead.
template <int S, int H, int HD, int KVH = H, typename TQ, typename TK,
          typename TV, typename C, typename TO>
inline void decode_attention(const TQ *q, const TK *k, const TV *v, int64_t B,
                             const int64_t *seg, const int32_t *pos,
                             const uint8_t *active, C *cache_k, C *cache_v,
                             int32_t *counts, TO *out, cudaStream_t stream) {
  using namespace decode_detail;
  static_assert(S >= 1, "decode needs at least one position");
  static_assert(HD >= 2, "the append's row metadata needs two floats a head");
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  (void)pos;
  const int nsplit = attnSplits<S, H>(B, kAttnScratchPartials);
  decodeAttentionLaunch<S, H, HD, KVH>(q, k, v, B, seg, active, cache_k, cache_v,
                                  counts, out, nsplit, nullptr, stream);
}

/// As above, with the caller's split-K scratch of
/// decode_attention_scratch_floats<S, H, HD>(B) floats (null: the built-in
/// scratch, as above).
template <int S, int H, int HD, int KVH = H, typename TQ, typename TK,
          typename TV, typename C, typename TO>
inline void decode_attention(const TQ *q, const TK *k, const TV *v, int64_t B,
                             const int64_t *seg, const int32_t *pos,
                             const uint8_t *active, C *cache_k, C *cache_v,
                             int32_t *counts, TO *out, float *scratch,
                             cudaStream_t stream) {
  using namespace decode_detail;
  static_assert(S >= 1, "decode needs at least one position");
  static_assert(HD >= 2, "the append's row metadata needs two floats a head");
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  (void)pos;
  const int nsplit =
      attnSplits<S, H>(B, scratch ? INT64_MAX / 2 : kAttnScratchPartials);
  decodeAttentionLaunch<S, H, HD, KVH>(q, k, v, B, seg, active, cache_k, cache_v,
                                  counts, out, nsplit, scratch, stream);
}

} // namespace modk_cuda

#endif // MODC_CUDA_KERNELS_DECODE_INCLUDED
