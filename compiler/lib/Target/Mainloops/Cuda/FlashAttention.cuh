//===- FlashAttention.cuh - The CUDA causal attention mainloops -*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Causal flash attention of modc's CUDA target: a SIMT f32 kernel and a
/// tensor-core kernel (3xTF32 mma.m16n8k8 for Q K^T and P V, online softmax
/// in f32 registers), over the rows of a row set by their positions. Which
/// one runs is the caller's template argument, set by modk-configure-gemms
/// (docs/cuda.md). Uses the mma building blocks of GemmTiles.cuh; a package
/// pastes this file after it.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_FLASH_ATTENTION_INCLUDED
#define MODC_CUDA_FLASH_ATTENTION_INCLUDED

#ifndef MODC_CUDA_GEMM_TILES_INCLUDED
#include "GemmTiles.cuh"
#endif

namespace modk_cuda {
namespace detail {

//===----------------------------------------------------------------------===//
// Causal attention (flash-style)
//===----------------------------------------------------------------------===//

constexpr int kAttnBQ = 64;  ///< queries per CTA
constexpr int kAttnBKV = 64; ///< keys per shared tile

/// The tiles' loads of one head's rows r0 .. r0 + valid (HD columns at hoff
/// of a [rows, H * HD] tensor) into dst[ROWS][HD + 4] as f32, zero past
/// valid, by the block's T threads. f32 rows go by cp.async
/// (copyHeadRows: the caller commits and waits). bf16 rows (a bf16 model's
/// queries, keys and values, modk-store-bf16) are loaded into registers,
/// 16 bytes (8 values) at a time when `vec` (src 16-byte aligned) and HD is
/// a multiple of 8, else one value at a time, widened (exactly) and stored:
/// done when the call returns, so the callers' waits and barriers order
/// them as they order the copies. One load at a time a thread (unroll 1):
/// unrolled, ptxas issued every load of the tile first and the kernels
/// spilled (sm_80: attentionTcKernel 44 bytes and attnGradQueryTc 16 at
/// head dim 32; sm_90a: attnGradKeyTc 20 at head dim 128), and the
/// loads of one value at a time (the other path, instantiated either way)
/// did the most harm.
template <int H, int HD, int ROWS, int T>
__device__ __forceinline__ void loadHeadRows(float *dst, const float *src,
                                             int64_t r0, int64_t hoff,
                                             int valid, bool vec) {
  copyHeadRows<H, HD, ROWS, T>(dst, src, r0, hoff, valid, vec);
}
template <int H, int HD, int ROWS, int T>
__device__ __forceinline__ void loadHeadRows(float *dst, const bf16 *src,
                                             int64_t r0, int64_t hoff,
                                             int valid, bool vec) {
  constexpr int64_t LDG = int64_t(H) * HD;
  constexpr int LDS = HD + 4;
  if (HD % 8 == 0 && vec) {
    // Rows of dst start 16-byte aligned (LDS a multiple of 4), and so does
    // every 8-value group of src (LDG and hoff multiples of 8).
    constexpr int C8 = HD / 8;
#pragma unroll 1
    for (int e = threadIdx.x; e < ROWS * C8; e += T) {
      const int r = e / C8, d = (e % C8) * 8;
      uint4 raw = make_uint4(0u, 0u, 0u, 0u);
      if (r < valid)
        raw = *reinterpret_cast<const uint4 *>(src + (r0 + r) * LDG + hoff + d);
      float4 *dp = reinterpret_cast<float4 *>(dst + r * LDS + d);
      dp[0] = make_float4(bitsFloat(raw.x << 16), bitsFloat(raw.x & 0xffff0000u),
                          bitsFloat(raw.y << 16), bitsFloat(raw.y & 0xffff0000u));
      dp[1] = make_float4(bitsFloat(raw.z << 16), bitsFloat(raw.z & 0xffff0000u),
                          bitsFloat(raw.w << 16), bitsFloat(raw.w & 0xffff0000u));
    }
  } else {
#pragma unroll 1
    for (int e = threadIdx.x; e < ROWS * HD; e += T) {
      const int r = e / HD, d = e % HD;
      dst[r * LDS + d] =
          r < valid ? float(src[(r0 + r) * LDG + hoff + d]) : 0.0f;
    }
  }
}

/// Shared memory layout of the attention kernel (floats).
template <int HD> struct AttnSmem {
  static constexpr int QLD = kAttnBQ + 4;  // Qs[HD][QLD]: scaled, transposed
  static constexpr int KLD = kAttnBKV + 4; // Ks[HD][KLD]: transposed
  static constexpr int VLD = HD;           // Vs[BKV][VLD]
  static constexpr int PLD = kAttnBQ + 4;  // Ps[BKV][PLD]: transposed
  // Ps reuses the key tile's memory: the scores are in registers by then.
  static constexpr int KP = HD * KLD > kAttnBKV * PLD ? HD * KLD
                                                      : kAttnBKV * PLD;
  static constexpr int Q = 0;
  static constexpr int Kt = Q + HD * QLD;
  static constexpr int P = Kt;
  static constexpr int V = Kt + KP;
  static constexpr int QPos = V + kAttnBKV * VLD; // int32 [BQ]
  static constexpr int KPos = QPos + kAttnBQ;     // int32 [BKV]
  static constexpr int Floats = KPos + kAttnBKV;
  static constexpr size_t Bytes = size_t(Floats) * sizeof(float);
};

/// CTA (query tile, head, segment), 256 threads as 16 x 16: thread (ty, tx)
/// owns query rows ty*4 + i (i < 4), score columns tx*4 + c (c < 4) and
/// output columns tx + 16*c. Online softmax in f32 with the running max
/// subtracted; keys j of the segment with pos[j] <= pos[i] are attended.
/// k and v have KVH heads (rows of KVH * HD): head h reads key/value head
/// h / (H / KVH), grouped-query attention (docs/model-format.md section 3).
/// q, k, v: TQ, TK, TV (float, or bf16: widened as loaded).
template <int H, int HD, int KVH, typename TQ, typename TK, typename TV,
          typename Out>
__global__ __launch_bounds__(kThreads) void attentionKernel(
    const TQ *__restrict__ q, const TK *__restrict__ k,
    const TV *__restrict__ v, const int64_t *seg, const int32_t *pos,
    Out *__restrict__ out) {
  using L = AttnSmem<HD>;
  constexpr int BQ = kAttnBQ, BKV = kAttnBKV;
  constexpr int DC = (HD + 15) / 16; // output columns per thread
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  const int64_t s = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t khoff = int64_t(h / (H / KVH)) * HD;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  // Later query tiles see more keys: they get the lower block indices, so
  // they are scheduled first.
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= n)
    return;
  const int qn = int(minI64(BQ, n - i0));

  MODC_DYNAMIC_SHARED(float, smem);
  float *Qs = smem + L::Q, *Ks = smem + L::Kt, *Vs = smem + L::V,
        *Ps = smem + L::P;
  int32_t *qpos = reinterpret_cast<int32_t *>(smem + L::QPos);
  int32_t *kpos = reinterpret_cast<int32_t *>(smem + L::KPos);

  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const TQ *qh = q + (base + i0) * LD + int64_t(h) * HD;
  for (int e = tid; e < BQ * HD; e += kThreads) {
    const int r = e / HD, d = e % HD;
    Qs[d * L::QLD + r] = r < qn ? float(qh[int64_t(r) * LD + d]) * scale : 0.0f;
  }
  for (int r = tid; r < BQ; r += kThreads)
    qpos[r] = r < qn ? ps[i0 + r] : 0x7fffffff; // padding rows see every key
  const int32_t lastPos = ps[i0 + qn - 1];

  float o[4][DC], mrow[4], lrow[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    mrow[i] = -INFINITY;
    lrow[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < DC; ++c)
      o[i][c] = 0.0f;
  }

  // Positions ascend within a segment: the keys to visit are a prefix.
  for (int64_t k0 = 0; k0 < n && ps[k0] <= lastPos; k0 += BKV) {
    const int kc = int(minI64(BKV, n - k0));
    __syncthreads(); // the previous tile is consumed (and Qs is written)
    const TK *kh = k + (base + k0) * LDK + khoff;
    const TV *vh = v + (base + k0) * LDK + khoff;
    for (int e = tid; e < BKV * HD; e += kThreads) {
      const int c = e / HD, d = e % HD;
      const bool ok = c < kc;
      Ks[d * L::KLD + c] = ok ? float(kh[int64_t(c) * LDK + d]) : 0.0f;
      Vs[c * L::VLD + d] = ok ? float(vh[int64_t(c) * LDK + d]) : 0.0f;
    }
    for (int c = tid; c < BKV; c += kThreads)
      kpos[c] = c < kc ? ps[k0 + c] : 0x7fffffff;
    __syncthreads();

    // Scores of rows ty*4 + i, keys tx*4 + c.
    float sc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        sc[i][c] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < HD; ++d) {
      const float4 qa = *reinterpret_cast<const float4 *>(&Qs[d * L::QLD + ty * 4]);
      const float4 kb = *reinterpret_cast<const float4 *>(&Ks[d * L::KLD + tx * 4]);
      const float qv[4] = {qa.x, qa.y, qa.z, qa.w};
      const float kv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          sc[i][c] = fmaf(qv[i], kv[c], sc[i][c]);
    }
    __syncthreads(); // Ks is read by all before Ps (its memory) is written

    // Online softmax; the 16 threads of a row are one half-warp.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int32_t qp = qpos[ty * 4 + i];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (kpos[tx * 4 + c] > qp)
          sc[i][c] = -INFINITY;
        mx = fmaxf(mx, sc[i][c]);
      }
      for (int off = 8; off > 0; off /= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      // Key 0 of the segment is seen by every query, so the first tile
      // makes mnew finite for every row.
      const float mnew = fmaxf(mrow[i], mx);
      const float alpha = expf(mrow[i] - mnew);
      mrow[i] = mnew;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = expf(sc[i][c] - mnew);
        sum += p;
        Ps[(tx * 4 + c) * L::PLD + ty * 4 + i] = p;
      }
      for (int off = 8; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
      lrow[i] = lrow[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < DC; ++c)
        o[i][c] *= alpha;
    }
    __syncthreads();

    // O += P V over the tile's keys (masked keys have p = 0).
#pragma unroll 4
    for (int c = 0; c < kc; ++c) {
      const float4 pa = *reinterpret_cast<const float4 *>(&Ps[c * L::PLD + ty * 4]);
      const float pv[4] = {pa.x, pa.y, pa.z, pa.w};
#pragma unroll
      for (int dc = 0; dc < DC; ++dc) {
        const int d = tx + 16 * dc;
        const float vv = (HD % 16 == 0 || d < HD) ? Vs[c * L::VLD + d] : 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          o[i][dc] = fmaf(pv[i], vv, o[i][dc]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= qn)
      continue;
    const float inv = 1.0f / lrow[i];
    Out *dst = out + (base + i0 + r) * LD + int64_t(h) * HD;
#pragma unroll
    for (int dc = 0; dc < DC; ++dc) {
      const int d = tx + 16 * dc;
      if (HD % 16 == 0 || d < HD)
        dst[d] = Out(o[i][dc] * inv);
    }
  }
}

/// One step of the online softmax's running max for a lane's two rows (g
/// and g + 8 of its warp's 16, in the m16n8 accumulator layout): mx holds
/// the max of this lane's scores of the tile and is reduced here over the
/// quad (a row's four lanes); msub is the max to subtract from the tile's
/// scores (0 while the row has seen no key), and alpha = exp(old max -
/// msub), which rescales the running sums and outputs, through `exp`
/// (expf, or exp2f on scores in the log2 domain).
template <typename Exp>
__device__ __forceinline__ void onlineRowMax(float (&mrow)[2], float (&mx)[2],
                                             float (&msub)[2],
                                             float (&alpha)[2], Exp exp) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
    const float mnew = fmaxf(mrow[hh], mx[hh]);
    msub[hh] = mnew == -INFINITY ? 0.0f : mnew;
    alpha[hh] = exp(mrow[hh] - msub[hh]);
    mrow[hh] = mnew;
  }
}

/// Sums a lane's two rows' partial softmax sums (g and g + 8, as
/// onlineRowMax's rows) over the quad, so that every lane of a row holds
/// the row's sum.
__device__ __forceinline__ void quadRowSums(float (&sum)[2]) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 1);
    sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 2);
  }
}

//===----------------------------------------------------------------------===//
// Causal attention on tensor cores (3xTF32 mma.m16n8k8)
//===----------------------------------------------------------------------===//

constexpr int kAttnTcThreads = 128; ///< 4 warps of 16 query rows

/// Head dims with a tensor-core attention kernel: whole k8 steps of Q K^T
/// and n8 tiles of P V (HD % 8 == 0), and at most 128 (the accumulators of
/// a thread stay in registers).
template <int HD>
constexpr bool attentionTcHeadDim = HD > 0 && HD % 8 == 0 && HD <= 128;

/// The launch bounds' minimum CTAs per SM of attentionTcKernel: 2 below head
/// dim 32, where ptxas's own allocation spills (head dims 16 and 24 on bf16
/// inputs); none (0) from 32 on, where its own allocation spills nothing and
/// an explicit bound makes it worse (more registers, spills at head dim
/// 128). A package's ptxas-report.txt (docs/cuda.md) lists the registers
/// and spills of each kernel.
constexpr int attnTcMinBlocks(int hd) { return hd < 32 ? 2 : 0; }

/// Shared memory of attentionTcKernel (floats). Q (scaled), K and V tiles
/// are [row][LD] with LD = HD + 4 = 4 (mod 8): the fragment reads (8 rows g
/// x 4 columns t of Q and K; rows 2t, 2t + 1 x 8 columns g of V) fall on 32
/// different banks, and every row starts 16-byte aligned for cp.async.
/// Key positions are double-buffered: tile t + 1's are written while tile
/// t's are read by the softmax.
template <int HD> struct AttnTcSmem {
  static constexpr int LD = HD + 4;
  static_assert(LD % 8 == 4, "conflict-free stride");
  static constexpr int Q = 0;
  static constexpr int K = Q + kAttnBQ * LD;
  static constexpr int V = K + kAttnBKV * LD;
  static constexpr int KPos = V + kAttnBKV * LD; // int32 [2][BKV]
  static constexpr int Floats = KPos + 2 * kAttnBKV;
  static constexpr size_t Bytes = size_t(Floats) * sizeof(float);
};

/// The tensor-core twin of attentionKernel (same grid, arguments, masking
/// and online softmax): CTA (query tile of 64, head, segment) of 4 warps,
/// warp w owning query rows 16w .. 16w + 15 (lane: rows g, g + 8 with g =
/// lane / 4, t = lane % 4).
///  - S = Q K^T: per k8 step of the head dim, mma3xTf32 over the warp's
///    16 x 64 scores (8 n8 tiles) from Qs and Ks, in f32 registers;
///  - masking (pos[key] > pos[query] -> -inf) and the online softmax in f32
///    registers: row max over the quad (two shuffles), the running sums kept
///    per lane and added over the quad at the end;
///  - O += P V from the score registers, no shared round trip: the C
///    fragment of lane (g, t) holds keys 2t, 2t + 1 of its rows, used as A
///    columns t and t + 4 of the mma, with V rows 2t and 2t + 1 as B rows t
///    and t + 4 (the keys of a k8 step permuted, which the sum ignores);
///  - K and V tiles are copied with cp.async (16 bytes when k and v are
///    16-byte aligned, else 4) into one buffer each, as two copy groups:
///    tile t + 1's keys are copied during the softmax and P V of tile t,
///    its values during the next Q K^T. bf16 tiles (TK, TV: a bf16 model's,
///    modk-store-bf16) are loaded 16 bytes at a time and widened to f32 as
///    they are stored (loadHeadRows), at the same points: the f32 tiles, and
///    so the mmas and the result, are those of f32 inputs of the same
///    values.
/// A warp whose rows all precede the tile's first key (or that has no rows)
/// skips the tile's math but not its barriers.
/// BF: q, k, v hold bf16 values (a bf16 model), which tf32 holds exactly:
/// the mmas of their zero lo parts are skipped (Q K^T: one mma instead of
/// three where the scaled queries stay bf16, i.e. 1/sqrt(HD) is a power of
/// two; P V: two), with the same result.
/// KVH: the key/value heads, as attentionKernel's; TQ, TK, TV: q's, k's and
/// v's elements, float or bf16.
template <int H, int HD, int KVH, bool BF, typename TQ, typename TK,
          typename TV, typename Out>
__global__ __launch_bounds__(kAttnTcThreads, attnTcMinBlocks(HD)) void attentionTcKernel(
    const TQ *__restrict__ q, const TK *__restrict__ k,
    const TV *__restrict__ v, const int64_t *seg, const int32_t *pos,
    Out *__restrict__ out) {
  static_assert(attentionTcHeadDim<HD>, "head dim of the tensor-core kernel");
  using L = AttnTcSmem<HD>;
  constexpr int BQ = kAttnBQ, BKV = kAttnBKV, LDS = L::LD;
  constexpr int NT = BKV / 8;                 // n8 score tiles of a warp
  constexpr int DT = HD / 8;                  // k8 steps of S, n8 tiles of O
  constexpr int D1 = DT < 8 ? DT : 8;         // O tiles in the first batch
  constexpr int D2 = DT - D1;                 // and in the second
  constexpr int64_t LD = int64_t(H) * HD;
  constexpr int32_t kNoPos = 0x7fffffff;
  // Whether q * 1/sqrt(HD) is bf16 when q is: HD a power of 4.
  constexpr bool kScaleExact = (HD & (HD - 1)) == 0 && (HD & 0x55555555) != 0;
  constexpr bool kSplitQ = !(BF && kScaleExact), kSplitKV = !BF;
  const int64_t s = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  // Later query tiles see more keys: they get the lower block indices.
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= n)
    return;
  const int qn = int(minI64(BQ, n - i0));

  MODC_DYNAMIC_SHARED(float, smem);
  float *Qs = smem + L::Q, *Ks = smem + L::K, *Vs = smem + L::V;
  int32_t *kposBuf = reinterpret_cast<int32_t *>(smem + L::KPos);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane >> 2, tg = lane & 3;
  const int wr = warp * 16; // the warp's first query row
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t hoff = int64_t(h) * HD;
  const int64_t khoff = int64_t(h / (H / KVH)) * HD; // its key/value head
  const bool vec = aligned16(k, v);

  // Starts the copy of the key (or value) rows k0 .. k0 + kc of this head
  // into dst (zero past kc) as one copy group.
  static_assert(LDS == HD + 4, "loadHeadRows's row stride");
  auto copyTile = [&](float *dst, const auto *src, int64_t k0, int kc) {
    loadHeadRows<KVH, HD, BKV, kAttnTcThreads>(dst, src, base + k0, khoff, kc,
                                               vec);
    copyAsyncCommit();
  };
  auto copyKeys = [&](int64_t k0, int buf) {
    const int kc = int(minI64(BKV, n - k0));
    copyTile(Ks, k, k0, kc);
    for (int c = tid; c < BKV; c += kAttnTcThreads)
      kposBuf[buf * BKV + c] = c < kc ? ps[k0 + c] : kNoPos;
  };
  auto copyValues = [&](int64_t k0) {
    copyTile(Vs, v, k0, int(minI64(BKV, n - k0)));
  };

  copyKeys(0, 0);
  copyValues(0);
  const TQ *qh = q + (base + i0) * LD + hoff;
  for (int e = tid; e < BQ * HD; e += kAttnTcThreads) {
    const int r = e / HD, d = e % HD;
    Qs[r * LDS + d] = r < qn ? float(qh[int64_t(r) * LD + d]) * scale : 0.0f;
  }

  // Positions of this lane's rows; rows past qn see every key (unused).
  const int32_t lastPos = ps[i0 + qn - 1];
  int32_t qp[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    qp[hh] = r < qn ? ps[i0 + r] : kNoPos;
  }
  const bool warpRows = wr < qn;
  const int32_t warpMaxPos = wr + 15 < qn ? ps[i0 + wr + 15] : kNoPos;

  float o1[1][D1][4], o2[1][D2 > 0 ? D2 : 1][4], mrow[2], lrow[2];
  zeroFragments(o1);
  zeroFragments(o2);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    mrow[hh] = -INFINITY;
    lrow[hh] = 0.0f;
  }

  // Positions ascend within a segment: the keys to visit are a prefix.
  int64_t k0 = 0;
  for (int t = 0;; ++t) {
    const int64_t k1 = k0 + BKV;
    const bool more = k1 < n && ps[k1] <= lastPos;
    copyAsyncWait<1>(); // this tile's keys are in (its values may not be)
    __syncthreads();    // ... for every thread (and Qs is written)
    const int32_t *kpos = kposBuf + (t & 1) * BKV;
    const bool active = warpRows && kpos[0] <= warpMaxPos;

    float sc[1][NT][4];
    zeroFragments(sc);
    if (active) // fully unrolled
      addRowProducts<HD, NT, kSplitQ, kSplitKV, DT>(sc, Qs + wr * LDS, Ks);
    __syncthreads(); // every warp has read this tile's keys
    if (more)
      copyKeys(k1, (t + 1) & 1);

    if (active) {
      // Masking and the online softmax; column 8j + 2t + (e & 1), row
      // g + 8 (e >> 1). Key 0 of the segment is seen by every row, so the
      // first tile makes the running max finite (the guard is for safety).
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kpos[8 * j + 2 * tg + (e & 1)] > qp[e >> 1])
            sc[0][j][e] = -INFINITY;
          mx[e >> 1] = fmaxf(mx[e >> 1], sc[0][j][e]);
        }
      float msub[2], alpha[2], rs[2] = {0.0f, 0.0f};
      onlineRowMax(mrow, mx, msub, alpha, [](float x) { return expf(x); });
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = expf(sc[0][j][e] - msub[e >> 1]);
          sc[0][j][e] = p;
          rs[e >> 1] += p;
        }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        lrow[hh] = lrow[hh] * alpha[hh] + rs[hh];
#pragma unroll
      for (int j = 0; j < D1; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o1[0][j][e] *= alpha[e >> 1];
      if constexpr (D2 > 0) {
#pragma unroll
        for (int j = 0; j < D2; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            o2[0][j][e] *= alpha[e >> 1];
      }
    }

    if (more)
      copyAsyncWait<1>(); // this tile's values are in (the next keys may not be)
    else
      copyAsyncWait<0>();
    __syncthreads();

    if (active) {
      // O += P V, k8 step kb over keys 8kb .. 8kb + 7 (masked keys have
      // p = 0; keys past the segment have zero values).
#pragma unroll
      for (int kb = 0; kb < NT; ++kb) {
        auto fragP = [&](int, float (&f)[4]) {
          f[0] = sc[0][kb][0]; // row g,     key 2t     -> A column t
          f[1] = sc[0][kb][2]; // row g + 8, key 2t
          f[2] = sc[0][kb][1]; // row g,     key 2t + 1 -> A column t + 4
          f[3] = sc[0][kb][3]; // row g + 8, key 2t + 1
        };
        const float *vr = Vs + (8 * kb + 2 * tg) * LDS + g;
        auto fragV1 = [&](int j, float (&f)[2]) {
          f[0] = vr[8 * j];
          f[1] = vr[LDS + 8 * j];
        };
        mma3xTf32<1, D1, true, kSplitKV>(o1, fragP, fragV1);
        if constexpr (D2 > 0) {
          auto fragV2 = [&](int j, float (&f)[2]) {
            f[0] = vr[8 * (D1 + j)];
            f[1] = vr[LDS + 8 * (D1 + j)];
          };
          mma3xTf32<1, D2, true, kSplitKV>(o2, fragP, fragV2);
        }
      }
    }
    if (!more)
      break;
    __syncthreads(); // every warp has read this tile's values
    copyValues(k1);
    k0 = k1;
  }

  quadRowSums(lrow);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    if (r >= qn)
      continue;
    const float inv = 1.0f / lrow[hh];
    Out *dst = out + (base + i0 + r) * LD + hoff + 2 * tg;
#pragma unroll
    for (int j = 0; j < D1; ++j) {
      dst[8 * j] = Out(o1[0][j][2 * hh] * inv);
      dst[8 * j + 1] = Out(o1[0][j][2 * hh + 1] * inv);
    }
    if constexpr (D2 > 0) {
#pragma unroll
      for (int j = 0; j < D2; ++j) {
        dst[8 * (D1 + j)] = Out(o2[0][j][2 * hh] * inv);
        dst[8 * (D1 + j) + 1] = Out(o2[0][j][2 * hh + 1] * inv);
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Causal attention on Hopper (sm_90a): wgmma fed by TMA, bf16 q, k, v
//===----------------------------------------------------------------------===//

/// d (64 x N, f32) += A (64 x 16) B (16 x N) with A from registers: the
/// warpgroup's 64 x 16 bf16 fragment, each warp's 16 rows as the A fragment
/// of mma.m16n8k16 (PTX ISA, "Register Fragments" of wgmma .m64nNk16, A
/// .bf16), with g = lane >> 2, t = lane % 4 and the lower column of each
/// pair in the low half:
///   a[0] = A[16w + g][2t, 2t+1],     a[1] = A[16w + g + 8][2t, 2t+1],
///   a[2] = A[16w + g][2t+8, 2t+9],   a[3] = A[16w + g + 8][2t+8, 2t+9].
/// B bf16 in shared memory (wgmmaBf16's descriptor; MN-major where
/// TRANS_B). Accumulators, fences and waits as wgmmaBf16's.
#if defined(__CUDACC__)
#define MODC_ATTN_ACC8(j)                                                      \
  "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3]),                  \
      "+f"(d[j + 1][0]), "+f"(d[j + 1][1]), "+f"(d[j + 1][2]), "+f"(d[j + 1][3])
template <int N, bool TRANS_B = false>
__device__ __forceinline__ void wgmmaBf16RegA(float (&d)[N / 8][4],
                                              const uint32_t (&a)[4],
                                              uint64_t descB,
                                              const void *anchor) {
  static_assert(N == 64 || N == 128, "the attention's wgmma widths");
  (void)anchor;
  if constexpr (N == 64)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
        "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : MODC_ATTN_ACC8(0), MODC_ATTN_ACC8(2), MODC_ATTN_ACC8(4),
          MODC_ATTN_ACC8(6)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "n"(1),
          "n"(int(TRANS_B)));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
        "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, "
        "1, %70;\n}\n"
        : MODC_ATTN_ACC8(0), MODC_ATTN_ACC8(2), MODC_ATTN_ACC8(4),
          MODC_ATTN_ACC8(6), MODC_ATTN_ACC8(8), MODC_ATTN_ACC8(10),
          MODC_ATTN_ACC8(12), MODC_ATTN_ACC8(14)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "n"(1),
          "n"(int(TRANS_B)));
}
#undef MODC_ATTN_ACC8
#endif

/// setmaxnreg (sm_90a): the warpgroup's registers a thread, raised to or
/// lowered to N, so that a warp-specialised kernel's producer gives its
/// registers to the consumers. Every thread of the warpgroup runs it.
#if defined(__CUDACC__)
template <int N> __device__ __forceinline__ void setMaxRegistersInc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setMaxRegistersDec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

/// mbarrierWait without its hang trap, for the consumer warpgroups of a
/// warp-specialised kernel whose consumers need more registers than the
/// launch's own (168 a thread at 384 threads): ptxas 13 holds a region that
/// may trap to that entry count whatever setmaxnreg raised it to, and
/// serialises its wgmmas (C7512) and spills. A consumer waits only on
/// phases that the producer completes after its own trapping waits
/// (mbarrierWait), or whose loss stalls a trapping producer wait, so a lost
/// TMA load still fails the launch instead of hanging it.
#if defined(__CUDACC__)
__device__ __forceinline__ void mbarrierWaitUntrapped(uint64_t *bar,
                                                      unsigned parity) {
  while (!mbarrierTryWait(bar, parity)) {
  }
}
#else
__device__ __forceinline__ void mbarrierWaitUntrapped(uint64_t *bar,
                                                      unsigned parity) {
  mbarrierWait(bar, parity);
}
#endif

/// Registers a thread after setmaxnreg in the warp-specialised attention
/// kernels (attentionWgmmaKernel, attnGradKeyWgmma): the producer's
/// warpgroup gives its registers to the two consumers' (128 x 40 + 256 x
/// 232 <= 64 K registers an SM).
struct AttnWgRegisters {
  static constexpr int Producer = 40, Consumer = 232;
};

/// Zeroes rows [from, 64) of a 64-row tile in the 128-byte swizzled layout
/// TMA gives it (G groups of 64 rows x 128 bytes), whole 128-byte rows, by
/// T threads from `tid`: the rows that TMA loaded past a segment (the next
/// segment's, or stale memory, which may hold NaN). The caller fences the
/// stores for the async proxy before the wgmmas that read the tile.
template <int G, int T>
__device__ __forceinline__ void zeroSwizzledRows(unsigned char *tile, int from,
                                                 int tid) {
  const int rows = 64 - from;
  for (int i = tid; i < G * rows * 8; i += T) {
    const int chunk = i % 8, row = from + i / 8 % rows;
    *reinterpret_cast<uint4 *>(tile + (i / 8 / rows) * 8192 + row * 128 +
                               chunk * 16) = make_uint4(0u, 0u, 0u, 0u);
  }
}

/// Zeroes a warpgroup's wgmma accumulators.
template <int J>
__device__ __forceinline__ void zeroAccumulators(float (&d)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      d[j][e] = 0.0f;
}

/// Threads of attentionWgmmaKernel: a producer warpgroup (one thread issues
/// the TMA loads) and two consumer warpgroups of 64 query rows each.
constexpr int kAttnWgThreads = 384;
constexpr int kAttnWgBQ = 128;  ///< queries per CTA
constexpr int kAttnWgBKV = 64;  ///< keys per stage

/// Head dims of the wgmma kernel: whole 64-column groups (a 128-byte
/// swizzled row each) that one m64n64 or m64n128 wgmma covers.
template <int HD> constexpr bool attentionWgmmaHeadDim = HD == 64 || HD == 128;

/// Shared memory of attentionWgmmaKernel (bytes), every tile 1024-byte
/// aligned for the 128-byte swizzle. A tile of R rows is HD / 64 groups of
/// R rows x 128 bytes (64 columns), as TMA stores boxes of 64 columns x R
/// rows: Q as two 64-row slabs (one a consumer warpgroup), then the stages,
/// each a K tile and a V tile of kAttnWgBKV rows.
template <int HD> struct AttnWgmmaSmem {
  static constexpr int Groups = HD / 64;
  static constexpr int GroupBytes = 64 * 128; ///< 64 rows of 128 bytes
  static constexpr int QBytes = kAttnWgBQ / 64 * Groups * GroupBytes;
  static constexpr int TileBytes = kAttnWgBKV / 64 * Groups * GroupBytes;
  static constexpr int StageBytes = 2 * TileBytes; ///< K, then V
  static constexpr int Stages = HD == 64 ? 4 : 3;
  /// Plus room to align the tiles to 1024 bytes.
  static constexpr size_t Bytes = size_t(QBytes + Stages * StageBytes) + 1024;
};

/// Causal flash attention for Hopper, on a bf16 model's bf16 q, k and v
/// (modk-store-bf16): the same grid arguments, masking and result as
/// attentionTcKernel's up to the rounding of P (below), over query tiles of
/// 128 rows.
///  - Warp specialised: thread 0 of warpgroup 0 loads the CTA's Q (two
///    64-row slabs) once and streams its K and V tiles of 64 keys through
///    `Stages` stages by TMA (128-byte swizzle), each completing on its
///    `full` mbarrier; warpgroups 1 and 2 each own a 64-row slab of
///    queries, and every consumer warp arrives on the stage's `empty`
///    mbarrier once it is done with it.
///  - S = Q K^T: one m64n64k16 wgmma per k16 step of the head dim, both
///    operands K-major in shared memory; scaled by log2(e) / sqrt(HD) in f32
///    so that the online softmax runs on exp2.
///  - P is rounded to bf16 in the registers that held S and is wgmma's A
///    operand for O += P V (m64nHDk16, one per 16 keys), V MN-major in
///    shared memory: no shared round trip. That rounding (a relative 2^-9
///    of each probability) is the one difference from attentionTcKernel,
///    whose P stays f32; the row sums are of the f32 probabilities.
///  - Each consumer warpgroup overlaps its own softmax with its products
///    (FlashAttention-3's intra-warpgroup pipelining): it issues S for tile
///    t, then O += P V for tile t - 1, waits for S alone and runs tile t's
///    softmax in f32 while P V runs; once that product is waited for, O is
///    rescaled and tile t's P is rounded into the registers P V reads
///    (none of them is written while a wgmma reads it). The two consumer
///    warpgroups also run apart, so that one's softmax overlaps the
///    other's products. setmaxnreg moves registers from the producer's
///    warpgroup to the consumers'.
///  - Keys are visited while their positions can be seen by the CTA's last
///    query (positions ascend within a segment), and a slab whose rows all
///    precede a tile's first key skips its math. Within a tile that a
///    slab's rows do not all see, keys past the segment or after a row's
///    position are masked (-inf). The values past the segment are rows of
///    the next segment or stale memory, whose NaN 0 * NaN would carry into
///    O: a consumer warpgroup zeroes those rows of V in shared memory before
///    its P V (after TMA's writes, fenced for the async proxy).
/// KVH: the key/value heads (grouped-query attention, as attentionKernel's).
template <int H, int HD, int KVH, typename Out>
__global__ __launch_bounds__(kAttnWgThreads, 1) void attentionWgmmaKernel(
    const __grid_constant__ CUtensorMap mapQ,
    const __grid_constant__ CUtensorMap mapK,
    const __grid_constant__ CUtensorMap mapV, const int64_t *seg,
    const int32_t *pos, Out *__restrict__ out) {
  static_assert(attentionWgmmaHeadDim<HD>, "head dim of the wgmma kernel");
  using L = AttnWgmmaSmem<HD>;
  constexpr int BQ = kAttnWgBQ, BKV = kAttnWgBKV, S = L::Stages;
  constexpr int G = L::Groups, GB = L::GroupBytes;
  constexpr int64_t LD = int64_t(H) * HD;
  constexpr int32_t kNoPos = 0x7fffffff;
  const int64_t s = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= n)
    return; // the whole CTA, before any barrier
  const int qn = int(minI64(BQ, n - i0));
  const int32_t *ps = pos + base;
  const int32_t lastPos = ps[i0 + qn - 1];
  // The key tiles the CTA visits: a prefix (positions ascend).
  int tiles = 1;
  while (int64_t(tiles) * BKV < n && ps[int64_t(tiles) * BKV] <= lastPos)
    ++tiles;

  MODC_DYNAMIC_SHARED(unsigned char, smemRaw);
  // Aligned by an offset from the shared array, not through an integer, so
  // that nvcc still knows the tiles' accesses as shared ones.
  unsigned char *smem =
      smemRaw + ((1024u - (sharedAddress(smemRaw) & 1023u)) & 1023u);
  unsigned char *qTile = smem, *stages = smem + L::QBytes;
  __shared__ __align__(8) uint64_t qFull, full[S], empty[S], zeroed[2];

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    mbarrierInit(&qFull, 1);
    for (int st = 0; st < S; ++st) {
      mbarrierInit(&full[st], 1);
      mbarrierInit(&empty[st], 8); // the consumer warps
    }
    for (int w = 0; w < 2; ++w)
      mbarrierInit(&zeroed[w], 128);
    fenceMbarrierInit();
  }
  __syncthreads(); // the only block barrier: the roles part here

  const int hcol = h * HD, kvcol = (h / (H / KVH)) * HD;
  if (wg == 0) {
    setMaxRegistersDec<AttnWgRegisters::Producer>();
    if (tid != 0)
      return;
    mbarrierArriveExpectTx(&qFull, L::QBytes);
    for (int slab = 0; slab < BQ / 64; ++slab)
      for (int g = 0; g < G; ++g)
        tmaLoad2d(qTile + (slab * G + g) * GB, &mapQ, hcol + 64 * g,
                  int(base + i0) + 64 * slab, &qFull);
    for (int t = 0; t < tiles; ++t) {
      const int st = t % S;
      mbarrierWait(&empty[st], (unsigned(t / S) & 1) ^ 1);
      unsigned char *stage = stages + st * L::StageBytes;
      mbarrierArriveExpectTx(&full[st], L::StageBytes);
      const int row = int(base) + t * BKV;
      for (int g = 0; g < G; ++g) {
        tmaLoad2d(stage + g * GB, &mapK, kvcol + 64 * g, row, &full[st]);
        tmaLoad2d(stage + L::TileBytes + g * GB, &mapV, kvcol + 64 * g, row,
                  &full[st]);
      }
    }
    return;
  }

  setMaxRegistersInc<AttnWgRegisters::Consumer>();
  const int slab = wg - 1, lane = tid % kWarp, warp = (tid % 128) / kWarp;
  const int gq = lane >> 2, tq = lane & 3;
  const int sr = 64 * slab; // the slab's first query row
  const bool slabRows = sr < qn;
  const int slabEnd = qn < sr + 64 ? qn : sr + 64;
  const int32_t slabFirstPos = slabRows ? ps[i0 + sr] : kNoPos;
  const int32_t slabLastPos = slabRows ? ps[i0 + slabEnd - 1] : kNoPos;
  int32_t qp[2]; // this lane's rows' positions (kNoPos past the segment)
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = sr + 16 * warp + gq + 8 * hh;
    qp[hh] = r < qn ? ps[i0 + r] : kNoPos;
  }
  const float scaleLog2 = 1.4426950408889634f / sqrtf(float(HD));
  const unsigned char *qSlab = qTile + slab * G * GB;

  float o[HD / 8][4], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
  zeroAccumulators(o);
  unsigned zeroings = 0;
  // The tiles the slab visits: a prefix of the CTA's (positions ascend),
  // none where it has no rows. Every tile is waited for and released.
  int visits = 0;
  while (slabRows && visits < tiles && ps[int64_t(visits) * BKV] <= slabLastPos)
    ++visits;
  if (slabRows)
    mbarrierWait(&qFull, 0);
  auto release = [&](int st) {
    __syncwarp();
    if (lane == 0)
      mbarrierArrive(&empty[st]);
  };
  // Waits for tile t's stage and zeroes the rows of its V past the segment
  // (whole 128-byte rows of every group); returns the stage.
  auto acquire = [&](int t) {
    const int st = t % S;
    const int kc = int(minI64(BKV, n - int64_t(t) * BKV));
    mbarrierWait(&full[st], unsigned(t / S) & 1);
    if (kc < BKV) {
      zeroSwizzledRows<G, 128>(stages + st * L::StageBytes + L::TileBytes, kc,
                               tid % 128);
      fenceProxyAsync();
      mbarrierArrive(&zeroed[slab]);
      mbarrierWait(&zeroed[slab], zeroings & 1);
      ++zeroings;
    }
    // The lanes may leave the waits apart; .aligned wgmma needs the warp
    // converged.
    __syncwarp();
    return st;
  };
  // S = Q K^T over stage st's K tile, committed as one group.
  auto issueS = [&](float(&sc)[BKV / 8][4], int st) {
    const unsigned char *kTile = stages + st * L::StageBytes;
    zeroAccumulators(sc);
    wgmmaFence(sc);
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) // k16 step k of the head dim
      wgmmaBf16<BKV>(
          sc, wgmmaDescriptorSw128(qSlab + (k / 4) * GB + 32 * (k % 4)),
          wgmmaDescriptorSw128(kTile + (k / 4) * GB + 32 * (k % 4)), smem);
    wgmmaCommit();
  };
  // O += P V over stage st's V tile, P as wgmma's A fragments (a k16 step
  // each), committed as one group.
  auto issuePV = [&](const uint32_t(&p)[BKV / 16][4], int st) {
    const unsigned char *vTile = stages + st * L::StageBytes + L::TileBytes;
    wgmmaFence(o);
#pragma unroll
    for (int kb = 0; kb < BKV / 16; ++kb) // keys 16 kb .. 16 kb + 15
      wgmmaBf16RegA<HD, true>(
          o, p[kb], wgmmaDescriptorMnSw128(vTile + 2048 * kb, BKV), smem);
    wgmmaCommit();
  };
  // Tile t's online softmax over its scores sc: the f32 probabilities into
  // pf, the row maxima and sums updated, and the factor alpha that
  // rescales O.
  auto softmax = [&](const float(&sc)[BKV / 8][4], int t,
                     float(&pf)[BKV / 8][4], float(&alpha)[2]) {
    const int64_t k0 = int64_t(t) * BKV;
    const int kc = int(minI64(BKV, n - k0));
    // Scores in the log2 domain; column 8j + 2t + (e & 1), row g + 8 (e >>
    // 1) of the warp's 16. Masking only where some row of the slab does
    // not see every key of the tile.
    const bool seesAll = kc == BKV && ps[k0 + BKV - 1] <= slabFirstPos;
#pragma unroll
    for (int j = 0; j < BKV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pf[j][e] = sc[j][e] * scaleLog2;
        if (!seesAll) {
          const int c = 8 * j + 2 * tq + (e & 1);
          if (c >= kc || ps[k0 + c] > qp[e >> 1])
            pf[j][e] = -INFINITY;
        }
      }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < BKV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        mx[e >> 1] = fmaxf(mx[e >> 1], pf[j][e]);
    float msub[2], rs[2] = {0.0f, 0.0f};
    onlineRowMax(mrow, mx, msub, alpha, [](float v) { return exp2f(v); });
#pragma unroll
    for (int j = 0; j < BKV / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        pf[j][e] = exp2f(pf[j][e] - msub[e >> 1]);
        rs[e >> 1] += pf[j][e];
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      lrow[hh] = lrow[hh] * alpha[hh] + rs[hh];
  };
  // O rescaled by alpha, and P rounded to bf16 as wgmma's A fragments:
  // after the wait for the P V that read the previous P.
  auto rescaleAndRound = [&](const float(&alpha)[2],
                             const float(&pf)[BKV / 8][4],
                             uint32_t(&p)[BKV / 16][4]) {
#pragma unroll
    for (int j = 0; j < HD / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[j][e] *= alpha[e >> 1];
#pragma unroll
    for (int j = 0; j < BKV / 8; ++j) {
      p[j / 2][2 * (j % 2)] = packBf16x2(pf[j][0], pf[j][1]);     // row g
      p[j / 2][2 * (j % 2) + 1] = packBf16x2(pf[j][2], pf[j][3]); // row g + 8
    }
  };

  if (visits > 0) {
    // Tile 0's scores and softmax; its P V waits for tile 1's S.
    uint32_t p[BKV / 16][4];
    int prev = acquire(0);
    {
      float sc[BKV / 8][4], pf[BKV / 8][4], alpha[2];
      issueS(sc, prev);
      wgmmaWait<0>(sc);
      softmax(sc, 0, pf, alpha);
      rescaleAndRound(alpha, pf, p);
    }
    for (int t = 1; t < visits; ++t) {
      // S of tile t, then P V of tile t - 1, which runs while tile t's
      // softmax does (FlashAttention-3's intra-warpgroup overlap).
      const int st = acquire(t);
      float sc[BKV / 8][4], pf[BKV / 8][4], alpha[2];
      issueS(sc, st);
      issuePV(p, prev);
      wgmmaWait<1>(sc); // S is in; P V may still run
      softmax(sc, t, pf, alpha);
      wgmmaWait<0>(o); // O holds tiles 0 .. t - 1; p is free
      release(prev);
      rescaleAndRound(alpha, pf, p);
      prev = st;
    }
    issuePV(p, prev);
    wgmmaWait<0>(o);
    release(prev);
  }
  // The tiles the slab does not visit: waited for and released, as the
  // producer streams them for the other slab.
  for (int t = visits; t < tiles; ++t) {
    const int st = t % S;
    mbarrierWait(&full[st], unsigned(t / S) & 1);
    release(st);
  }
  if (!slabRows)
    return;

  quadRowSums(lrow);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = sr + 16 * warp + gq + 8 * hh;
    if (r >= qn)
      continue;
    const float inv = 1.0f / lrow[hh];
    Out *dst = out + (base + i0 + r) * LD + hcol + 2 * tq;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      dst[8 * j] = Out(o[j][2 * hh] * inv);
      dst[8 * j + 1] = Out(o[j][2 * hh + 1] * inv);
    }
  }
}

/// Launches attentionWgmmaKernel over q [rows, H * HD] and k, v [rows, KVH
/// * HD] (rows: the bound of every segment's rows); false (nothing
/// launched) where TMA cannot read them or the kernel cannot get its shared
/// memory, so that the caller runs attentionTcKernel.
template <int H, int HD, int KVH, typename Out>
inline bool launchAttentionWgmma(dim3 grid, const bf16 *q, const bf16 *k,
                                 const bf16 *v, int64_t rows,
                                 const int64_t *seg, const int32_t *pos,
                                 Out *out, cudaStream_t stream) {
  alignas(64) CUtensorMap mapQ, mapK, mapV;
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  if (!encodeOperandMap(mapQ, q, rows, LD, LD, 64) ||
      !encodeOperandMap(mapK, k, rows, LDK, LDK, kAttnWgBKV) ||
      !encodeOperandMap(mapV, v, rows, LDK, LDK, kAttnWgBKV))
    return false;
  auto kernel = attentionWgmmaKernel<H, HD, KVH, Out>;
  constexpr size_t bytes = AttnWgmmaSmem<HD>::Bytes;
  static const bool sized =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(bytes)) == cudaSuccess;
  if (!sized)
    return false;
  MODC_LAUNCH(kernel, grid, kAttnWgThreads, bytes, stream, mapQ, mapK, mapV,
              seg, pos, out);
  MODC_TEST_COUNT(attentionWgmmaLaunches);
  return true;
}

/// Launches the tensor-core attention kernel (TC; BF: on bf16 inputs) or
/// the SIMT one; only the chosen kernel is instantiated.
template <bool TC, int H, int HD, int KVH, bool BF, typename TQ, typename TK,
          typename TV, typename Out>
inline void launchAttention(dim3 grid, const TQ *q, const TK *k, const TV *v,
                            const int64_t *seg, const int32_t *pos, Out *out,
                            cudaStream_t stream) {
  auto kern = [] {
    if constexpr (TC)
      return attentionTcKernel<H, HD, KVH, BF, TQ, TK, TV, Out>;
    else
      return attentionKernel<H, HD, KVH, TQ, TK, TV, Out>;
  }();
  constexpr size_t bytes = [] {
    if constexpr (TC)
      return AttnTcSmem<HD>::Bytes;
    else
      return AttnSmem<HD>::Bytes;
  }();
  static bool configured = false; // the attribute is per function
  if (!configured) {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(bytes));
    configured = true;
  }
  MODC_LAUNCH(kern, grid, TC ? kAttnTcThreads : kThreads, bytes, stream, q, k,
              v, seg, pos, out);
}

} // namespace detail
} // namespace modk_cuda

#endif // MODC_CUDA_FLASH_ATTENTION_INCLUDED
