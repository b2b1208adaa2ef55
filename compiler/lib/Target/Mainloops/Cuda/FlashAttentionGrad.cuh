//===- FlashAttentionGrad.cuh - CUDA causal attention backward -*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The backward pass of causal flash attention on modc's CUDA target: a
/// query-side kernel (dq and the softmax statistics) and a key-side kernel
/// (dk, dv), on SIMT f32 or on tensor cores (3xTF32 mma.m16n8k8) as the
/// compiler chose (modk-configure-gemms, docs/cuda.md); no atomics, so the
/// gradients repeat bit for bit. Built on the tiles of FlashAttention.cuh
/// and GemmTiles.cuh; a package with a training entry pastes it after them.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_FLASH_ATTENTION_GRAD_INCLUDED
#define MODC_CUDA_FLASH_ATTENTION_GRAD_INCLUDED

#ifndef MODC_CUDA_FLASH_ATTENTION_INCLUDED
#include "FlashAttention.cuh"
#endif

namespace modk_cuda {

//===----------------------------------------------------------------------===//
// Causal attention backward
//===----------------------------------------------------------------------===//

namespace train_detail {

/// Attention's output as the backward's D = rowsum(dout * o) reads it:
/// widened exactly from bf16, and rounded to bf16 where roundO (a bf16
/// model, causal_attention_grad's round_o). D's sums use explicit fmas, so
/// that o's two storages give the same bits whatever the compiler
/// contracts.
template <typename TO>
__device__ __forceinline__ float outputValue(TO x, bool roundO) {
  const float f = static_cast<float>(x);
  return roundO ? detail::bf16Round(f) : f;
}

/// Query rows and keys per tile, threads per block. Thread t works on row
/// t / 4 of its tile and on every fourth key (or head column) from t % 4.
constexpr int kAgBQ = 32, kAgBK = 32, kAgThreads = 128;

/// The SIMT kernels' head width: HD rounded up to a multiple of 4, so that
/// each of a row's 4 threads owns HDP / 4 columns. Columns [HD, HDP) of the
/// shared tiles hold zeros and are never stored (a head dim is any even
/// number: docs/model-format.md).
template <int HD> __host__ __device__ constexpr int agPaddedHeadDim() {
  return (HD + 3) / 4 * 4;
}

template <int HD> constexpr int attnGradSmemFloats() {
  return (2 * kAgBQ + 2 * kAgBK) * (agPaddedHeadDim<HD>() + 1) +
         2 * kAgBK * (kAgBQ + 1) + 2 * kAgBQ;
}

/// Query side: per (query tile, head, segment), the log-sum-exp of every
/// query row (online over the key tiles), D = rowsum(dout * o), both stored
/// to stats[(row * H + h) * 2 + {0, 1}] for the key side, then
/// dq = scale * sum_keys dS K with dS = P (dP - D), P = exp(S - lse).
/// k and v have KVH heads: head h reads key/value head h / (H / KVH)
/// (grouped-query attention, docs/model-format.md section 3). q, k, v: TQ,
/// TK, TVin (float, or bf16: widened as loaded); o: TO, which D reads as
/// outputValue gives it (rounded to bf16 where roundO).
template <int H, int HD, int KVH, typename TQ, typename TK, typename TVin,
          typename TO>
__global__ void __launch_bounds__(kAgThreads)
    attnGradQuery(const TQ *q, const TK *k, const TVin *v, const TO *o,
                  const float *dout, const int64_t *seg, const int32_t *pos,
                  float *dq, float *stats, bool roundO) {
  constexpr int HDP = agPaddedHeadDim<HD>();
  constexpr int BQ = kAgBQ, BK = kAgBK, P = HDP + 1, NI = BK / 4, ND = HDP / 4;
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  // Whether column `col` of a thread's is one of the head's (always, where
  // HD is a multiple of 4).
  auto inHead = [](int col) { return HDP == HD || col < HD; };
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
  const int64_t khoff = int64_t(h / (H / KVH)) * HD; // its key/value head
  const float ninf = negInf();

  for (int e = t; e < BQ * HDP; e += kAgThreads) {
    const int rr = e / HDP, d = e % HDP;
    const bool ok = rr < qn && inHead(d);
    const int64_t src = (base + i0 + rr) * LD + hoff + d;
    Qs[rr * P + d] = ok ? float(q[src]) * scale : 0.0f;
    dOs[rr * P + d] = ok ? dout[src] : 0.0f;
  }
  const int64_t qi = i0 + r;
  float dd = 0.0f;
  if (r < qn) {
#pragma unroll
    for (int c = 0; c < ND; ++c) {
      const int64_t src = (base + qi) * LD + hoff + g + 4 * c;
      if (inHead(g + 4 * c))
        dd = fmaf(dout[src], outputValue(o[src], roundO), dd);
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
    for (int e = t; e < BK * HDP; e += kAgThreads) {
      const int cc = e / HDP, d = e % HDP;
      Ks[cc * P + d] = k0 + cc < n && inHead(d)
                           ? float(k[(base + k0 + cc) * LDK + khoff + d])
                           : 0.0f;
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
    for (int e = t; e < BK * HDP; e += kAgThreads) {
      const int cc = e / HDP, d = e % HDP;
      const bool ok = k0 + cc < n && inHead(d);
      const int64_t src = (base + k0 + cc) * LDK + khoff + d;
      Ks[cc * P + d] = ok ? float(k[src]) : 0.0f;
      Vs[cc * P + d] = ok ? float(v[src]) : 0.0f;
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
      if (inHead(g + 4 * c))
        dq[(base + qi) * LD + hoff + g + 4 * c] = acc[c] * scale;
  }
}

/// Key side: per (key tile, key/value head, segment), over the H / KVH
/// query heads of the key/value head in order and every query tile of each
/// that sees the keys: dV = sum P^T dO, dK = sum dS^T (q * scale).
template <int H, int HD, int KVH, typename TQ, typename TK, typename TVin,
          typename TV>
__global__ void __launch_bounds__(kAgThreads)
    attnGradKey(const TQ *q, const TK *k, const TVin *v,
                const float *dout, const int64_t *seg, const int32_t *pos,
                const float *stats, float *dk, TV *dv) {
  constexpr int HDP = agPaddedHeadDim<HD>();
  constexpr int BQ = kAgBQ, BK = kAgBK, P = HDP + 1, NI = BQ / 4, ND = HDP / 4;
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  constexpr int G = H / KVH; // query heads of a key/value head
  auto inHead = [](int col) { return HDP == HD || col < HD; };
  MODC_DYNAMIC_SHARED(float, sm);
  float *Qs = sm, *dOs = Qs + BQ * P, *Ks = dOs + BQ * P, *Vs = Ks + BK * P;
  float *Ps = Vs + BK * P;       // [BK][BQ + 1]
  float *dSs = Ps + BK * (BQ + 1); // [BK][BQ + 1]
  float *lseS = dSs + BK * (BQ + 1), *DdS = lseS + BQ;

  const int s = blockIdx.z, kvh = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  const int64_t k0 = int64_t(blockIdx.x) * BK;
  if (k0 >= n)
    return;
  const int kc = static_cast<int>(detail::minI64(BK, n - k0));
  const int t = threadIdx.x, c = t >> 2, g = t & 3;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t khoff = int64_t(kvh) * HD;
  const int64_t kj = k0 + c;
  const int32_t pk = c < kc ? ps[kj] : 0;

  for (int e = t; e < BK * HDP; e += kAgThreads) {
    const int cc = e / HDP, d = e % HDP;
    const bool ok = cc < kc && inHead(d);
    const int64_t src = (base + k0 + cc) * LDK + khoff + d;
    Ks[cc * P + d] = ok ? float(k[src]) : 0.0f;
    Vs[cc * P + d] = ok ? float(v[src]) : 0.0f;
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
  // The group's query heads in order, each over its query tiles.
  for (int gi = 0; gi < G; ++gi) {
    const int h = kvh * G + gi;
    const int64_t hoff = int64_t(h) * HD;
    for (int64_t q0 = qs / BQ * BQ; q0 < n; q0 += BQ) {
      const int qn = static_cast<int>(detail::minI64(BQ, n - q0));
      __syncthreads();
      for (int e = t; e < BQ * HDP; e += kAgThreads) {
        const int rr = e / HDP, d = e % HDP;
        const bool ok = rr < qn && inHead(d);
        const int64_t src = (base + q0 + rr) * LD + hoff + d;
        Qs[rr * P + d] = ok ? float(q[src]) * scale : 0.0f;
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
  }
  if (c < kc) {
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      if (!inHead(g + 4 * i))
        continue;
      const int64_t dst = (base + kj) * LDK + khoff + g + 4 * i;
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
/// tile a lane instead of two), w passing P^T to w + 4 through shared memory
/// (w + 4 holds no P^T while it forms dP^T: head dim 128 fits the registers
/// without spills, docs/cuda.md).
constexpr int kAgTcThreads = 128, kAgTcKeyThreads = 256;
/// Rows a CTA owns (16 a warp, or a warp pair) and rows of the tiles it
/// loops over (keys on the query side, queries on the key side).
constexpr int kAgTcOwn = 64, kAgTcTile = 32;

/// CTAs of the key side an SM is to hold (its launch bounds): two at head
/// dims up to 16 (at most 128 registers a thread, as they took before P^T
/// went through shared memory), else one (up to 255).
__host__ __device__ constexpr int agTcKeyBlocks(int hd) {
  return hd <= 16 ? 2 : 1;
}

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
/// and D), then on the key side P^T and the key positions. LD = HD + 4 =
/// 4 (mod 8) as in AttnTcSmem: the fragment reads fall on 32 different
/// banks and rows start 16-byte aligned for cp.async.
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
  /// The key side's P^T fragments after those (16-byte aligned: every
  /// offset above is a multiple of 4 floats), passed from the dV warps to
  /// the dK warps: [4 warp pairs][TILE / 8 n8 tiles][32 lanes][4].
  static constexpr int Pt = Floats;
  static_assert(Pt % 4 == 0, "float4 fragments");
  /// Then the positions of its 64 keys (read as needed: fewer registers).
  static constexpr int Kpos = Pt + 4 * (TILE / 8) * 32 * 4;
  static constexpr int KeyFloats = Kpos + kAgTcOwn;
  static constexpr int KeyBytes = KeyFloats * int(sizeof(float));
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
/// Tiles are copied with cp.async (bf16 q, k, v: loaded 16 bytes at a time
/// and widened as stored, detail::loadHeadRows); a warp whose queries all
/// precede the tile's first key skips its math (P = 0 there) but not its
/// barriers.
/// BF: q, k, v hold bf16 values (a bf16 model): the mmas of their zero tf32
/// lo parts are skipped, with the same result.
/// KVH: the key/value heads, as attnGradQuery's; TQ, TK, TVin: q's, k's
/// and v's elements, float or bf16; TO and roundO: o's, as attnGradQuery's.
template <int H, int HD, int KVH, bool BF, typename TQ, typename TK,
          typename TVin, typename TO>
__global__ __launch_bounds__(kAgTcThreads) void attnGradQueryTc(
    const TQ *__restrict__ q, const TK *__restrict__ k,
    const TVin *__restrict__ v, const TO *__restrict__ o,
    const float *__restrict__ dout, const int64_t *seg, const int32_t *pos,
    float *__restrict__ dq, float *__restrict__ stats, bool roundO) {
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
  const int64_t khoff = int64_t(h / (H / KVH)) * HD; // its key/value head
  const bool vec = detail::aligned16(q, k, v, dout);

  detail::loadHeadRows<H, HD, BQ, T>(Qs, q, base + i0, hoff, qn, vec);
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
        dd = fmaf(dout[row + d], outputValue(o[row + d], roundO), dd);
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
    detail::loadHeadRows<KVH, HD, BK, T>(Ks, k, base + k0, khoff, kc, vec);
    if (withV)
      detail::loadHeadRows<KVH, HD, BK, T>(Vs, v, base + k0, khoff, kc, vec);
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
    float msub[2], alpha[2], rs[2] = {0.0f, 0.0f};
    detail::onlineRowMax(mrow, mx, msub, alpha,
                         [](float x) { return expf(x); });
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      lrow[hh] *= alpha[hh];
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
  detail::quadRowSums(lrow);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
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
/// segment's end. Warp w forms S^T = (K Q^T) * scale (mma3xTf32) and P^T =
/// exp(S^T - lse) masked, in registers (lse and D from the query side's
/// stats), and stores P^T to shared memory (each lane its own fragments)
/// while warp w + 4 forms dP^T = V dO^T; after a barrier warp w adds dV +=
/// P^T dO from its registers, and warp w + 4 reads P^T (the same lane's
/// fragments, the same bits), forms dS^T = P^T (dP^T - D) and adds dK +=
/// dS^T Q; dk = dK * scale. Every sum is that of each warp forming P^T
/// itself, in the same order. BF: as attnGradQueryTc's.
/// KVH: the key/value heads; a CTA's keys are those of key/value head
/// blockIdx.y, summed over its H / KVH query heads in order, as
/// attnGradKey's. TQ, TK, TVin: as attnGradQueryTc's.
template <int H, int HD, int KVH, bool BF, typename TQ, typename TK,
          typename TVin, typename TV>
__global__ __launch_bounds__(kAgTcKeyThreads, agTcKeyBlocks(HD)) void
attnGradKeyTc(
    const TQ *__restrict__ q, const TK *__restrict__ k,
    const TVin *__restrict__ v, const float *__restrict__ dout,
    const int64_t *seg, const int32_t *pos, const float *__restrict__ stats,
    float *__restrict__ dk, TV *__restrict__ dv) {
  static_assert(attentionGradTcHeadDim<HD>, "head dim of the tensor-core kernel");
  using L = AttnGradTcSmem<HD>;
  constexpr int BK = kAgTcOwn, BQ = kAgTcTile, LDS = L::LD;
  constexpr int T = kAgTcKeyThreads;
  constexpr int NT = BQ / 8, DT = HD / 8, DW = agChunk(DT), NC = DT / DW;
  constexpr int32_t kNoPos = 0x7fffffff;
  constexpr int G = H / KVH; // query heads of a key/value head
  const int s = blockIdx.z, kvh = blockIdx.y;
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
  int32_t *kposS = reinterpret_cast<int32_t *>(sm + L::Kpos);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane >> 2, tg = lane & 3, wr = (warp % 4) * 16;
  const bool dkWarp = warp >= 4;
  // This lane's P^T fragments (n8 tile j at ptFrag[j * kWarp]), written by
  // the dV warp and read by the same lane of the dK warp.
  float4 *ptFrag =
      reinterpret_cast<float4 *>(sm + L::Pt) + (warp % 4) * NT * kWarp + lane;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t khoff = int64_t(kvh) * HD;
  const bool vec = detail::aligned16(q, k, v, dout);

  detail::loadHeadRows<KVH, HD, BK, T>(Ks, k, base + k0, khoff, kc, vec);
  detail::loadHeadRows<KVH, HD, BK, T>(Vs, v, base + k0, khoff, kc, vec);
  detail::copyAsyncCommit();

  // The keys' positions (past kc: no query sees them); this lane's are
  // those of rows wr + g and wr + g + 8.
  for (int c = tid; c < BK; c += T)
    kposS[c] = c < kc ? ps[k0 + c] : kNoPos;
  const bool warpKeys = wr < kc;
  // First query that sees key k0: positions ascend, so only queries just
  // before k0 with the same position can.
  int64_t qs = k0;
  while (qs > 0 && ps[qs - 1] >= ps[k0])
    --qs;

  float acc[NC][1][DW][4]; // dV (warps 0-3) or dK (warps 4-7)
#pragma unroll
  for (int c = 0; c < NC; ++c)
    detail::zeroFragments(acc[c]);
  // The group's query heads in order, each over its query tiles, by their
  // first row in the arrays (base + q0: fewer values live over the loop).
  const int64_t rowStart = base + qs / BQ * BQ, rowEnd = base + n;
  for (int gi = 0; gi < G; ++gi) {
    const int h = kvh * G + gi;
    const int64_t hoff = int64_t(h) * HD;
    for (int64_t row = rowStart; row < rowEnd; row += BQ) {
      const int qn = int(detail::minI64(BQ, rowEnd - row));
      __syncthreads(); // every warp is done with the previous tile
      detail::loadHeadRows<H, HD, BQ, T>(Qs, q, row, hoff, qn, vec);
      detail::copyHeadRows<H, HD, BQ, T>(dOs, dout, row, hoff, qn, vec);
      detail::copyAsyncCommit();
      for (int e = tid; e < BQ; e += T) {
        const bool ok = e < qn;
        const int64_t st = ((row + e) * H + h) * 2;
        qposS[e] = ok ? pos[row + e] : -1; // padded queries see no key
        lseS[e] = ok ? stats[st] : 0.0f;
        DdS[e] = ok ? stats[st + 1] : 0.0f;
      }
      detail::copyAsyncWait<0>();
      __syncthreads();
      // Both warps of a pair skip the tile or neither (same keys), and
      // every warp reaches the barrier below.
      const bool live = warpKeys && qposS[qn - 1] >= kposS[wr];
      // The dV warp forms P^T and hands it to its dK warp through ptFrag;
      // the dK warp forms dP^T = V dO^T meanwhile.
      float x[1][NT][4]; // P^T (dV warps) or dP^T, then dS^T (dK warps)
      if (live) {
        if (!dkWarp) {
          agRowProducts<HD, NT, !BF, !BF>(x, Ks + wr * LDS, Qs);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int qc = 8 * j + 2 * tg + (e & 1);
              x[0][j][e] = kposS[wr + g + 8 * (e >> 1)] > qposS[qc]
                               ? 0.0f
                               : expf(x[0][j][e] * scale - lseS[qc]);
            }
            ptFrag[j * kWarp] =
                make_float4(x[0][j][0], x[0][j][1], x[0][j][2], x[0][j][3]);
          }
        } else {
          agRowProducts<HD, NT, !BF, true>(x, Vs + wr * LDS, dOs);
        }
      }
      __syncthreads(); // P^T is in shared memory
      if (!live)
        continue;
      if (!dkWarp) {
        agRegTimesRows<HD, NT, NC, DW>(acc, x, dOs);
      } else {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const float4 p = ptFrag[j * kWarp];
          const float pj[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
          for (int e = 0; e < 4; ++e)
            x[0][j][e] = pj[e] * (x[0][j][e] - DdS[8 * j + 2 * tg + (e & 1)]);
        }
        agRegTimesRows<HD, NT, NC, DW, !BF>(acc, x, Qs);
      }
    }
  }
  if (dkWarp)
    agStoreRows<KVH, HD, NC, DW>(dk, base + k0, khoff, wr, kc, acc, scale);
  else
    agStoreRows<KVH, HD, NC, DW>(dv, base + k0, khoff, wr, kc, acc, 1.0f);
}

//===----------------------------------------------------------------------===//
// Causal attention backward on Hopper (sm_90a): the key side on wgmma
//===----------------------------------------------------------------------===//

constexpr int kAgWgBK = 128; ///< keys per CTA
constexpr int kAgWgBQ = 64;  ///< queries per tile

/// Shared memory of attnGradKeyWgmmaRing (bytes), every tile 1024-byte
/// aligned for the 128-byte swizzle and laid out as TMA stores boxes of 64
/// columns by 64 rows (HD / 64 groups of 64 rows x 128 bytes,
/// AttnWgmmaSmem's layout): the CTA's K and V (two 64-row slabs each, one a
/// consumer warpgroup), at head dim 128 each consumer's P^T and dS^T, then
/// the producer's ring of `Stages` stages, each a query tile's Q and dO and
/// its query positions, lse (log2 domain) and D ([3][kAgWgBQ] words, padded
/// to 1024 bytes).
template <int HD> struct AttnGradWgmmaSmem {
  static constexpr int Groups = HD / 64;
  static constexpr int GroupBytes = 64 * 128; ///< 64 rows of 128 bytes
  static constexpr int KBytes = kAgWgBK / 64 * Groups * GroupBytes;
  static constexpr int QBytes = kAgWgBQ / 64 * Groups * GroupBytes;
  /// At head dim 128 a consumer's P^T and dS^T (64 keys x 64 queries, bf16,
  /// K-major: one 128-byte swizzled row a key) are the A operands of its dV
  /// and dK from shared memory: in registers they would not fit beside dK,
  /// dV and the next tile's S^T and dP^T.
  static constexpr bool SmemA = HD == 128;
  static constexpr int PdSBytes = 2 * 64 * 128; ///< a consumer's P^T, dS^T
  static constexpr int K = 0, V = KBytes, PdS = 2 * KBytes;
  static constexpr int Ring = PdS + (SmemA ? 2 * PdSBytes : 0);
  static constexpr int DO = QBytes, Vec = 2 * QBytes; ///< within a stage
  static_assert(3 * kAgWgBQ * 4 <= 1024, "a stage's vectors");
  static constexpr int StageBytes = 2 * QBytes + 1024;
  static constexpr int Stages = HD == 64 ? 4 : 3;
  /// Plus room to align the tiles to 1024 bytes.
  static constexpr size_t Bytes = size_t(Ring + Stages * StageBytes) + 1024;
  static_assert(Bytes <= 227 * 1024, "a block's shared memory on sm_90");
};

/// Stores rows [0, ROWS) of one head of dout ([rows, H * HD] f32, from row
/// `row0`, head columns from `hoff`) to `dst` as bf16 in the 128-byte
/// swizzled layout TMA gives the Q tiles (64-row slabs of HD / 64 groups of
/// 64 rows x 128 bytes; the 16-byte chunk c of row r at chunk c ^ (r % 8)),
/// rows from `valid` on as zeros; T threads, this one `tid`. `vec`: dout
/// 16-byte aligned. The caller fences the stores for the wgmmas
/// (fenceProxyAsync).
template <int H, int HD, int ROWS, int T>
__device__ __forceinline__ void
stageDoutBf16(unsigned char *dst, const float *dout, int64_t row0, int64_t hoff,
              int valid, bool vec, int tid) {
  constexpr int64_t LD = int64_t(H) * HD;
#pragma unroll 1
  for (int i = tid; i < ROWS * HD / 8; i += T) {
    const int r = i / (HD / 8), c = i % (HD / 8);
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (r < valid) {
      const float *src = dout + (row0 + r) * LD + hoff + 8 * c;
      float x[8];
      if (vec) {
        const float4 lo = *reinterpret_cast<const float4 *>(src);
        const float4 hi = *reinterpret_cast<const float4 *>(src + 4);
        x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
        x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[e] = src[e];
      }
      val = make_uint4(
          detail::packBf16x2(x[0], x[1]), detail::packBf16x2(x[2], x[3]),
          detail::packBf16x2(x[4], x[5]), detail::packBf16x2(x[6], x[7]));
    }
    *reinterpret_cast<uint4 *>(dst + ((r / 64) * (HD / 64) + c / 8) * 8192 +
                               (r % 64) * 128 + ((c % 8) ^ (r % 8)) * 16) = val;
  }
}

/// attnGradKeyWgmma at head dims 64 and 128: CTA (128 keys, key/value
/// head, segment) over the 64-query tiles from the first that sees key k0
/// to the segment's end, each for the H / KVH query heads of the key/value
/// head in head order (tile t: query tile t / (H / KVH), head t % (H /
/// KVH)).
///  - Warp specialised, as attentionWgmmaKernel: warpgroup 0 produces. Its
///    thread 0 loads the CTA's K and V once by TMA and each tile's Q into a
///    ring of `Stages` stages; its 128 threads load the tile's dO (f32 in
///    memory: TMA copies, it cannot convert), round it to bf16 and store it
///    into the stage in the same 128-byte swizzled layout, with the tile's
///    positions, lse (times log2 e) and D from the query side's stats;
///    once Q has landed they zero its rows past the segment (they may hold
///    NaN: 0 * NaN in dS^T Q would reach dK), fence their stores for the
///    async proxy, and each producer warp arrives on the stage's `full`
///    mbarrier. A stage is refilled once the eight consumer warps have
///    arrived on its `empty` mbarrier. setmaxnreg moves registers from the
///    producer's warpgroup to the consumers'.
///  - Consumer warpgroup w (1 or 2) owns keys 64 (w - 1) .. + 63: per tile
///    it forms S^T = K Q^T and dP^T = V dO^T (m64n64k16, both operands
///    K-major in shared memory), P^T = exp2(S^T scale log2 e - lse) masked
///    (pos[key] > pos[query]; keys past the segment and padded queries
///    never visible) and dS^T = P^T (dP^T - D) in f32, rounded to bf16 as
///    wgmma's A operand of dV += P^T dO and dK += dS^T Q (m64nHDk16, B
///    MN-major in shared memory); dk = dK scale. At head dim 64 that A is in
///    registers; at 128 (L::SmemA), where dK and dV alone take 128 registers
///    a thread, in the consumer's own K-major tiles in shared memory, as
///    FlashAttention-3 keeps P and dS there: its four warps meet (an
///    mbarrier) once all their wgmmas of tile t - 1 have retired, store,
///    fence for the async proxy and meet again before the wgmmas read it.
///  - Each consumer overlaps its elementwise work with its products, as the
///    forward overlaps its softmax with P V: it issues S^T and dP^T for tile
///    t, then dV and dK for tile t - 1, waits for the first group alone
///    (wgmma.wait_group 2) and forms tile t's P^T and dS^T in f32 while dV
///    and dK run; once those are waited for, tile t - 1's stage goes back
///    to the producer and tile t's P^T and dS^T are rounded into the
///    registers or shared tiles they read (none is written while a wgmma
///    reads it).
///    Issuing the next tile's S^T and dP^T ahead instead would hold a
///    second pair of score accumulators (64 registers a thread).
///  - The tiles whose queries all precede a consumer's first key (a prefix:
///    positions ascend, and query tiles are the outer order) are waited for
///    and released without math; every other tile runs the same uniform
///    loop, masked.
///  - Rows of V or K past the segment (NaN possible) reach only the rows of
///    dS^T, dK and dV of keys past the segment, which are not stored.
/// The sums run in a fixed order (query tiles, then heads): no atomics.
template <int H, int HD, int KVH, typename TV>
__device__ __forceinline__ void
attnGradKeyWgmmaRing(const CUtensorMap &mapQ, const CUtensorMap &mapK,
                     const CUtensorMap &mapV, const float *__restrict__ dout,
                     const int64_t *seg, const int32_t *pos,
                     const float *__restrict__ stats, float *__restrict__ dk,
                     TV *__restrict__ dv) {
  using L = AttnGradWgmmaSmem<HD>;
  using Regs = detail::AttnWgRegisters;
  constexpr int BK = kAgWgBK, BQ = kAgWgBQ, S = L::Stages;
  constexpr int G = L::Groups, GB = L::GroupBytes;
  constexpr int GH = H / KVH; // query heads of a key/value head
  constexpr int64_t LDK = int64_t(KVH) * HD;
  constexpr int32_t kNoPos = 0x7fffffff;
  const int s = blockIdx.z, kvh = blockIdx.y;
  const int64_t k0 = int64_t(blockIdx.x) * BK;
  if (k0 >= seg[s + 1] - seg[s])
    return; // the whole CTA, before any barrier
  // The CTA's rows and query tiles, derived by each role after setmaxnreg
  // (as is the lane): ptxas 13 spilled a value live across it.
  struct Geometry {
    int64_t base, n, qFirst;
    const int32_t *ps;
    int kc, queryTiles, tiles;
  };
  auto geometry = [&] {
    Geometry g;
    g.base = seg[s];
    g.n = seg[s + 1] - g.base;
    g.kc = int(detail::minI64(BK, g.n - k0));
    g.ps = pos + g.base;
    // First query that sees key k0: positions ascend, so only queries just
    // before k0 with the same position can.
    int64_t qs = k0;
    while (qs > 0 && g.ps[qs - 1] >= g.ps[k0])
      --qs;
    g.qFirst = qs / BQ * BQ;
    g.queryTiles = int((g.n - g.qFirst + BQ - 1) / BQ);
    g.tiles = GH * g.queryTiles;
    return g;
  };

  MODC_DYNAMIC_SHARED(unsigned char, smemRaw);
  // Aligned by an offset from the shared array, not through an integer, so
  // that nvcc still knows the tiles' accesses as shared ones.
  unsigned char *smem =
      smemRaw + ((1024u - (detail::sharedAddress(smemRaw) & 1023u)) & 1023u);
  unsigned char *kTile = smem + L::K, *vTile = smem + L::V;
  unsigned char *ring = smem + L::Ring;
  __shared__ __align__(8) uint64_t kvFull, qLanded[S], full[S], empty[S];
  __shared__ __align__(8) uint64_t written[2]; // a consumer's four warps

  // The warpgroup, warp-uniform where ptxas can see it (a shuffle from lane
  // 0): the consumers' shared addresses and wgmma descriptors derived from
  // it go to uniform registers.
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (tid == 0) {
    detail::mbarrierInit(&kvFull, 1);
    for (int st = 0; st < S; ++st) {
      detail::mbarrierInit(&qLanded[st], 1);
      detail::mbarrierInit(&full[st], 4);  // the producer warps
      detail::mbarrierInit(&empty[st], 8); // the consumer warps
    }
    detail::mbarrierInit(&written[0], 4);
    detail::mbarrierInit(&written[1], 4);
    detail::fenceMbarrierInit();
  }
  __syncthreads(); // the only block barrier: the roles part here

  if (wg == 0) {
    detail::setMaxRegistersDec<Regs::Producer>();
    const Geometry geo = geometry();
    const int lane = tid % kWarp;
    const int64_t base = geo.base, n = geo.n;
    const int32_t *ps = geo.ps;
    const int tiles = geo.tiles;
    if (tid == 0) {
      detail::mbarrierArriveExpectTx(&kvFull, 2 * L::KBytes);
      for (int slab = 0; slab < BK / 64; ++slab)
        for (int g = 0; g < G; ++g) {
          const int row = int(base + k0) + 64 * slab;
          detail::tmaLoad2d(kTile + (slab * G + g) * GB, &mapK,
                            kvh * HD + 64 * g, row, &kvFull);
          detail::tmaLoad2d(vTile + (slab * G + g) * GB, &mapV,
                            kvh * HD + 64 * g, row, &kvFull);
        }
    }
    const bool vecDout = detail::aligned16(dout);
#pragma unroll 1
    for (int t = 0; t < tiles; ++t) {
      const int st = t % S;
      const unsigned use = unsigned(t / S) & 1; // the stage's use parity
      const int h = kvh * GH + t % GH;
      const int64_t q0 = geo.qFirst + int64_t(t / GH) * BQ; // head t % GH
      const int qn = int(detail::minI64(BQ, n - q0));
      unsigned char *stage = ring + st * L::StageBytes;
      detail::mbarrierWait(&empty[st], use ^ 1);
      if (tid == 0) {
        detail::mbarrierArriveExpectTx(&qLanded[st], L::QBytes);
        for (int g = 0; g < G; ++g)
          detail::tmaLoad2d(stage + g * GB, &mapQ, h * HD + 64 * g,
                            int(base + q0), &qLanded[st]);
      }
      stageDoutBf16<H, HD, BQ, 128>(stage + L::DO, dout, base + q0,
                                    int64_t(h) * HD, qn, vecDout, tid);
      int32_t *qposS = reinterpret_cast<int32_t *>(stage + L::Vec);
      float *lseS = reinterpret_cast<float *>(qposS + BQ), *DdS = lseS + BQ;
      for (int e = tid; e < BQ; e += 128) {
        const bool ok = e < qn;
        const int64_t at = ((base + q0 + e) * H + h) * 2;
        qposS[e] = ok ? ps[q0 + e] : -1; // padded queries see no key
        lseS[e] = ok ? stats[at] * 1.4426950408889634f : 0.0f;
        DdS[e] = ok ? stats[at + 1] : 0.0f;
      }
      detail::mbarrierWait(&qLanded[st], use);
      if (qn < BQ) // Q rows qn .. BQ: zero
        detail::zeroSwizzledRows<G, 128>(stage, qn, tid);
      detail::fenceProxyAsync(); // dO's stores and Q's zeros, for the wgmmas
      __syncwarp();
      if (lane == 0)
        detail::mbarrierArrive(&full[st]);
    }
    // K and V are the consumers' (their waits do not trap): a lost load
    // traps here.
    if (tid == 0)
      detail::mbarrierWait(&kvFull, 0);
    return;
  }

  detail::setMaxRegistersInc<Regs::Consumer>();
  const Geometry geo = geometry();
  const int64_t base = geo.base, n = geo.n, qFirst = geo.qFirst;
  const int32_t *ps = geo.ps;
  const int kc = geo.kc, queryTiles = geo.queryTiles, tiles = geo.tiles;
  const int cw = wg - 1; // the consumer warpgroup: keys 64 cw .. 64 cw + 63
  const int lane = tid % kWarp, warp = (tid % 128) / kWarp;
  const int gq = lane >> 2, tq = lane & 3;
  const float scale = 1.0f / sqrtf(float(HD));
  const float scaleLog2 = 1.4426950408889634f * scale;
  // This lane's keys: rows 64 cw + 16 warp + gq + 8 hh of the CTA's.
  int32_t kp[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = 64 * cw + 16 * warp + gq + 8 * hh;
    kp[hh] = r < kc ? ps[k0 + r] : kNoPos;
  }
  const int32_t cwFirstPos = 64 * cw < kc ? ps[k0 + 64 * cw] : kNoPos;
  const unsigned char *kSlab = kTile + cw * G * GB,
                      *vSlab = vTile + cw * G * GB;
  unsigned char *pT = smem + L::PdS + cw * L::PdSBytes,
                *dsT = pT + L::PdSBytes / 2;
  // The query tiles whose queries all precede this warpgroup's keys: a
  // prefix, as positions ascend.
  int skipped = 0;
  while (skipped < queryTiles &&
         ps[detail::minI64(qFirst + int64_t(skipped + 1) * BQ, n) - 1] <
             cwFirstPos)
    ++skipped;
  const int first = skipped * GH;

  auto release = [&](int st) {
    __syncwarp();
    if (lane == 0)
      detail::mbarrierArrive(&empty[st]);
  };
  auto acquire = [&](int t) {
    const int st = t % S;
    detail::mbarrierWaitUntrapped(&full[st], unsigned(t / S) & 1);
    // The lanes may leave the wait apart; .aligned wgmma needs the warp
    // converged.
    __syncwarp();
    return st;
  };
  // The tiles this warpgroup does not see: waited for and released, as the
  // producer streams them for the other one.
  for (int t = 0; t < first; ++t)
    release(acquire(t));

  float dV[HD / 8][4], dK[HD / 8][4];
  detail::zeroAccumulators(dV);
  detail::zeroAccumulators(dK);
  // S^T = K Q^T and dP^T = V dO^T over stage st, committed as one group.
  auto issueScores = [&](float(&sc)[BQ / 8][4], float(&dp)[BQ / 8][4], int st) {
    const unsigned char *qT = ring + st * L::StageBytes, *dOT = qT + L::DO;
    detail::zeroAccumulators(sc);
    detail::zeroAccumulators(dp);
    detail::wgmmaFence(sc);
    detail::wgmmaPinAccumulators(dp);
    // Each step's descriptors as their tile's plus the step's offset in
    // 16-byte units: shared addresses stay below 2^18, so the start address
    // field does not carry.
    const uint64_t kD = detail::wgmmaDescriptorSw128(kSlab),
                   vD = detail::wgmmaDescriptorSw128(vSlab),
                   qD = detail::wgmmaDescriptorSw128(qT),
                   dOD = detail::wgmmaDescriptorSw128(dOT);
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) { // k16 step k of the head dim
      const int at = ((k / 4) * GB + 32 * (k % 4)) >> 4;
      detail::wgmmaBf16<BQ>(sc, kD + at, qD + at, smem);
    }
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) {
      const int at = ((k / 4) * GB + 32 * (k % 4)) >> 4;
      detail::wgmmaBf16<BQ>(dp, vD + at, dOD + at, smem);
    }
    detail::wgmmaCommit();
  };
  // dV += P^T dO over stage st, P^T as wgmma's A fragments (a k16 step of
  // queries each; at head dim 128, L::SmemA, this warpgroup's tile in shared
  // memory instead), committed as one group.
  auto issueDv = [&](const uint32_t(&pa)[BQ / 16][4], int st) {
    const unsigned char *dOT = ring + st * L::StageBytes + L::DO;
    detail::wgmmaFence(dV);
#pragma unroll
    for (int kb = 0; kb < BQ / 16; ++kb) { // queries 16 kb .. 16 kb + 15
      const uint64_t b = detail::wgmmaDescriptorMnSw128(dOT + 2048 * kb, BQ);
      if constexpr (L::SmemA)
        detail::wgmmaBf16<HD, false, true>(
            dV, detail::wgmmaDescriptorSw128(pT + 32 * kb), b, smem);
      else
        detail::wgmmaBf16RegA<HD, true>(dV, pa[kb], b, smem);
    }
    detail::wgmmaCommit();
  };
  // dK += dS^T Q over stage st, as issueDv.
  auto issueDk = [&](const uint32_t(&da)[BQ / 16][4], int st) {
    const unsigned char *qT = ring + st * L::StageBytes;
    detail::wgmmaFence(dK);
#pragma unroll
    for (int kb = 0; kb < BQ / 16; ++kb) {
      const uint64_t b = detail::wgmmaDescriptorMnSw128(qT + 2048 * kb, BQ);
      if constexpr (L::SmemA)
        detail::wgmmaBf16<HD, false, true>(
            dK, detail::wgmmaDescriptorSw128(dsT + 32 * kb), b, smem);
      else
        detail::wgmmaBf16RegA<HD, true>(dK, da[kb], b, smem);
    }
    detail::wgmmaCommit();
  };
  // Key row gq + 8 (e >> 1) of the warp's 16, query column 8j + 2tq + (e &
  // 1) of stage st: P^T in f32 into sc, in place.
  auto probabilities = [&](float(&sc)[BQ / 8][4], int st) {
    const int32_t *qposS =
        reinterpret_cast<const int32_t *>(ring + st * L::StageBytes + L::Vec);
    const float *lseS = reinterpret_cast<const float *>(qposS + BQ);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = 8 * j + 2 * tq + (e & 1);
        sc[j][e] = kp[e >> 1] > qposS[qc]
                       ? 0.0f
                       : exp2f(sc[j][e] * scaleLog2 - lseS[qc]);
      }
  };
  // dS^T = P^T (dP^T - D) in f32 into dp, in place.
  auto scoreGrads = [&](const float(&sc)[BQ / 8][4], float(&dp)[BQ / 8][4],
                        int st) {
    const float *DdS =
        reinterpret_cast<const float *>(ring + st * L::StageBytes + L::Vec) +
        2 * BQ;
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dp[j][e] = sc[j][e] * (dp[j][e] - DdS[8 * j + 2 * tq + (e & 1)]);
  };
  // x rounded to bf16 as wgmma's A fragments (rows g and g + 8).
  auto roundA = [](const float(&x)[BQ / 8][4], uint32_t(&a)[BQ / 16][4]) {
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      a[j / 2][2 * (j % 2)] = detail::packBf16x2(x[j][0], x[j][1]);
      a[j / 2][2 * (j % 2) + 1] = detail::packBf16x2(x[j][2], x[j][3]);
    }
  };
  // The four warps of this warpgroup meet (on `written`, untrapped: they
  // complete its phases themselves).
  unsigned meetings = 0;
  auto meet = [&] {
    __syncwarp();
    if (lane == 0)
      detail::mbarrierArrive(&written[cw]);
    detail::mbarrierWaitUntrapped(&written[cw], meetings & 1);
    ++meetings;
    __syncwarp();
  };
  // x rounded to bf16 into `tile` as wgmma's K-major A operand: key row r
  // of the warpgroup's 64, 128 bytes, the 16-byte chunk j (8 queries) at
  // chunk j ^ (r % 8), as TMA's 128-byte swizzle lays out K. This lane's
  // rows have r % 8 = gq: chunk j's offset is chunk 0's xor 16 j.
  const int aOffset = (16 * warp + gq) * 128 + 16 * gq + 4 * tq;
  auto storeA = [&](const float(&x)[BQ / 8][4], unsigned char *tile) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int j = 0; j < BQ / 8; ++j)
        *reinterpret_cast<uint32_t *>(tile + 1024 * hh + (aOffset ^ (16 * j))) =
            detail::packBf16x2(x[j][2 * hh], x[j][2 * hh + 1]);
  };
  // Tile t's P^T and dS^T as the A operands of its dV and dK: rounded into
  // registers, or at head dim 128 into shared memory once every warp's
  // wgmmas of tile t - 1 have retired, then fenced and met on.
  auto toOperands = [&](const float(&sc)[BQ / 8][4],
                        const float(&dp)[BQ / 8][4], uint32_t(&pa)[BQ / 16][4],
                        uint32_t(&da)[BQ / 16][4]) {
    if constexpr (L::SmemA) {
      meet();
      storeA(sc, pT);
      storeA(dp, dsT);
      detail::fenceProxyAsync();
      meet();
    } else {
      roundA(sc, pa);
      roundA(dp, da);
    }
  };

  detail::mbarrierWaitUntrapped(&kvFull, 0);
  __syncwarp();
  if (first < tiles) {
    uint32_t pa[BQ / 16][4], da[BQ / 16][4];
    float sc[BQ / 8][4], dp[BQ / 8][4];
    int prev = acquire(first);
    issueScores(sc, dp, prev);
    detail::wgmmaWait<0>(sc);
    detail::wgmmaPinAccumulators(dp);
    // Tile t's S^T and dP^T, then tile t - 1's dV and dK, which run
    // while tile t's elementwise work does.
    probabilities(sc, prev);
    scoreGrads(sc, dp, prev);
    toOperands(sc, dp, pa, da);
    for (int t = first + 1; t < tiles; ++t) {
      const int st = acquire(t);
      issueScores(sc, dp, st);
      issueDv(pa, prev);
      issueDk(da, prev);
      detail::wgmmaWait<2>(sc); // S^T and dP^T are in; dV, dK may run
      detail::wgmmaPinAccumulators(dp);
      probabilities(sc, st);
      scoreGrads(sc, dp, st);
      detail::wgmmaWait<0>(dV); // tile t - 1 is summed; pa, da are free
      detail::wgmmaPinAccumulators(dK);
      release(prev);
      toOperands(sc, dp, pa, da);
      prev = st;
    }
    issueDv(pa, prev);
    issueDk(da, prev);
    detail::wgmmaWait<0>(dV);
    detail::wgmmaPinAccumulators(dK);
    release(prev);
  }

#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = 64 * cw + 16 * warp + gq + 8 * hh;
    if (r >= kc)
      continue;
    const int64_t at = (base + k0 + r) * LDK + int64_t(kvh) * HD + 2 * tq;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      dk[at + 8 * j] = dK[j][2 * hh] * scale;
      dk[at + 8 * j + 1] = dK[j][2 * hh + 1] * scale;
      dv[at + 8 * j] = TV(dV[j][2 * hh]);
      dv[at + 8 * j + 1] = TV(dV[j][2 * hh + 1]);
    }
  }
}

/// wgmma key side (attnGradKeyTc's grid and result up to the rounding of
/// P^T, dS^T and dO to bf16): attnGradKeyWgmmaRing.
template <int H, int HD, int KVH, typename TV>
__global__ __launch_bounds__(detail::kAttnWgThreads, 1) void attnGradKeyWgmma(
    const __grid_constant__ CUtensorMap mapQ,
    const __grid_constant__ CUtensorMap mapK,
    const __grid_constant__ CUtensorMap mapV, const float *__restrict__ dout,
    const int64_t *seg, const int32_t *pos, const float *__restrict__ stats,
    float *__restrict__ dk, TV *__restrict__ dv) {
  static_assert(detail::attentionWgmmaHeadDim<HD>,
                "head dim of the wgmma kernel");
  attnGradKeyWgmmaRing<H, HD, KVH>(mapQ, mapK, mapV, dout, seg, pos, stats, dk,
                                   dv);
}

/// Launches attnGradKeyWgmma over q [rows, H * HD] and k, v [rows, KVH *
/// HD] (rows: the bound of every segment's rows) after the query side's
/// stats; false (nothing launched) where TMA cannot read them or the kernel
/// cannot get its shared memory, so that the caller runs attnGradKeyTc.
template <int H, int HD, int KVH, typename TV>
inline bool launchAttnGradKeyWgmma(int64_t nseg, int64_t max_seg_rows,
                                   const bf16 *q, const bf16 *k, const bf16 *v,
                                   const float *dout, const int64_t *seg,
                                   const int32_t *pos, const float *stats,
                                   float *dk, TV *dv, cudaStream_t stream) {
  alignas(64) CUtensorMap mapQ, mapK, mapV;
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  const int64_t rows = nseg * max_seg_rows;
  if (!detail::encodeOperandMap(mapQ, q, rows, LD, LD, kAgWgBQ) ||
      !detail::encodeOperandMap(mapK, k, rows, LDK, LDK, 64) ||
      !detail::encodeOperandMap(mapV, v, rows, LDK, LDK, 64))
    return false;
  auto kernel = attnGradKeyWgmma<H, HD, KVH, TV>;
  constexpr size_t bytes = AttnGradWgmmaSmem<HD>::Bytes;
  static const bool sized =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(bytes)) == cudaSuccess;
  if (!sized)
    return false;
  const dim3 grid(unsigned(ceilDiv(max_seg_rows, kAgWgBK)), unsigned(KVH),
                  unsigned(nseg));
  MODC_LAUNCH(kernel, grid, detail::kAttnWgThreads, bytes, stream, mapQ, mapK,
              mapV, dout, seg, pos, stats, dk, dv);
  MODC_TEST_COUNT(attentionGradWgmmaLaunches);
  return true;
}

/// Threads and queries of attnGradQueryWgmma: a producer warpgroup and two
/// consumer warpgroups of 64 queries each, over 64-key tiles.
constexpr int kAgWgQueryRows = 128;

/// Shared memory of attnGradQueryWgmma (bytes), as AttnGradWgmmaSmem: the
/// CTA's Q and dO (two 64-row slabs each, one a consumer warpgroup), then a
/// ring of `Stages` stages, each a key tile's K and V and its key positions
/// (padded to 1024 bytes).
template <int HD> struct AttnGradQueryWgmmaSmem {
  static constexpr int Groups = HD / 64;
  static constexpr int GroupBytes = 64 * 128;
  static constexpr int QBytes = kAgWgQueryRows / 64 * Groups * GroupBytes;
  static constexpr int TileBytes = Groups * GroupBytes; ///< 64 keys
  static constexpr int Q = 0, DO = QBytes, Ring = 2 * QBytes;
  static constexpr int V = TileBytes, Kpos = 2 * TileBytes; ///< in a stage
  static constexpr int StageBytes = 2 * TileBytes + 1024;
  static constexpr int Stages = HD == 64 ? 4 : 3;
  static constexpr size_t Bytes = size_t(Ring + Stages * StageBytes) + 1024;
};

/// wgmma query side (attnGradQueryTc's grid, up to its 128-query CTAs, and
/// result up to the rounding of dS and dO to bf16): CTA (128 queries, head,
/// segment), over the 64-key tiles its last query sees, twice (step u: tile
/// u % tiles, pass u / tiles).
///  - Warp specialised, as attnGradKeyWgmmaRing: warpgroup 0 produces. It
///    loads Q by TMA and stages dO (rounded to bf16, stageDoutBf16) once,
///    then streams each step's K tile (and in pass 2 its V tile) by TMA
///    with the tile's key positions through a ring of `Stages` stages on
///    full/empty mbarriers; in pass 2 it zeroes K's rows past the segment
///    once they have landed (0 x NaN would reach dQ). setmaxnreg moves
///    registers to the consumers.
///  - Consumer warpgroup w (1 or 2) owns queries 64 (w - 1) .. + 63 and
///    visits the prefix of the tiles its rows see (the others are waited
///    for and released without math). Pass 1: S = Q K^T (m64n64k16),
///    masked (pos[key] > pos[query]; keys past the segment never visible),
///    the online max and sum in f32 in the log2 domain -> lse; D =
///    rowsum(dO * O) in f32 from memory; both to stats (natural log) for
///    the key side.
///  - Pass 2: S again and dP = dO V^T, P = exp2(S scale log2 e - lse)
///    masked, dS = P (dP - D) in f32, zero where masked (V rows past the
///    segment may be NaN), rounded to bf16 in registers as the A operand of
///    dQ += dS K (m64nHDk16, K read MN-major); dq = dQ scale. A consumer
///    issues tile u's S and dP, then tile u - 1's dQ, and forms tile u's dS
///    while dQ runs (as attnGradKeyWgmmaRing).
template <int H, int HD, int KVH, typename TO>
__global__ __launch_bounds__(detail::kAttnWgThreads, 1) void attnGradQueryWgmma(
    const __grid_constant__ CUtensorMap mapQ,
    const __grid_constant__ CUtensorMap mapK,
    const __grid_constant__ CUtensorMap mapV, const TO *__restrict__ o,
    const float *__restrict__ dout, const int64_t *seg, const int32_t *pos,
    float *__restrict__ dq, float *__restrict__ stats, bool roundO) {
  static_assert(detail::attentionWgmmaHeadDim<HD>,
                "head dim of the wgmma kernel");
  using L = AttnGradQueryWgmmaSmem<HD>;
  using Regs = detail::AttnWgRegisters;
  constexpr int BQ = kAgWgQueryRows, BK = 64, S = L::Stages;
  constexpr int G = L::Groups, GB = L::GroupBytes;
  constexpr int64_t LD = int64_t(H) * HD;
  constexpr int32_t kNoPos = 0x7fffffff;
  const int s = blockIdx.z, h = blockIdx.y;
  // Later query tiles see more keys: they get the lower block indices.
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= seg[s + 1] - seg[s])
    return; // the whole CTA, before any barrier
  // The CTA's rows and key tiles, derived by each role after setmaxnreg
  // (as attnGradKeyWgmmaRing's).
  struct Geometry {
    int64_t base, n;
    const int32_t *ps;
    int qn, tiles;
  };
  auto geometry = [&] {
    Geometry g;
    g.base = seg[s];
    g.n = seg[s + 1] - g.base;
    g.qn = int(detail::minI64(BQ, g.n - i0));
    g.ps = pos + g.base;
    const int32_t lastPos = g.ps[i0 + g.qn - 1];
    g.tiles = 1; // the key tiles the CTA visits: a prefix
    while (int64_t(g.tiles) * BK < g.n &&
           g.ps[int64_t(g.tiles) * BK] <= lastPos)
      ++g.tiles;
    return g;
  };

  MODC_DYNAMIC_SHARED(unsigned char, smemRaw);
  // Aligned as attnGradKeyWgmmaRing's: its accesses stay shared ones.
  unsigned char *smem =
      smemRaw + ((1024u - (detail::sharedAddress(smemRaw) & 1023u)) & 1023u);
  unsigned char *ring = smem + L::Ring;
  __shared__ __align__(8) uint64_t qLanded, qFull, landed[S], full[S], empty[S];

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int hcol = h * HD, kvcol = (h / (H / KVH)) * HD;
  if (tid == 0) {
    detail::mbarrierInit(&qLanded, 1);
    detail::mbarrierInit(&qFull, 4); // the producer warps
    for (int st = 0; st < S; ++st) {
      detail::mbarrierInit(&landed[st], 1);
      detail::mbarrierInit(&full[st], 4);  // the producer warps
      detail::mbarrierInit(&empty[st], 8); // the consumer warps
    }
    detail::fenceMbarrierInit();
  }
  __syncthreads(); // the only block barrier: the roles part here

  if (wg == 0) {
    detail::setMaxRegistersDec<Regs::Producer>();
    const Geometry geo = geometry();
    const int lane = tid % kWarp, tiles = geo.tiles;
    const int64_t base = geo.base, n = geo.n;
    if (tid == 0) {
      detail::mbarrierArriveExpectTx(&qLanded, L::QBytes);
      for (int slab = 0; slab < BQ / 64; ++slab)
        for (int g = 0; g < G; ++g)
          detail::tmaLoad2d(smem + L::Q + (slab * G + g) * GB, &mapQ,
                            hcol + 64 * g, int(base + i0) + 64 * slab,
                            &qLanded);
    }
    stageDoutBf16<H, HD, BQ, 128>(smem + L::DO, dout, base + i0, hcol, geo.qn,
                                  detail::aligned16(dout), tid);
    detail::mbarrierWait(&qLanded, 0);
    detail::fenceProxyAsync(); // dO's stores, for the wgmmas
    __syncwarp();
    if (lane == 0)
      detail::mbarrierArrive(&qFull);
#pragma unroll 1
    for (int u = 0; u < 2 * tiles; ++u) {
      const int st = u % S;
      const unsigned use = unsigned(u / S) & 1; // the stage's use parity
      const bool withV = u >= tiles;
      const int64_t k0 = int64_t(u % tiles) * BK;
      const int kc = int(detail::minI64(BK, n - k0));
      unsigned char *stage = ring + st * L::StageBytes;
      detail::mbarrierWait(&empty[st], use ^ 1);
      if (tid == 0) {
        detail::mbarrierArriveExpectTx(&landed[st],
                                       (withV ? 2 : 1) * L::TileBytes);
        for (int g = 0; g < G; ++g) {
          detail::tmaLoad2d(stage + g * GB, &mapK, kvcol + 64 * g,
                            int(base + k0), &landed[st]);
          if (withV)
            detail::tmaLoad2d(stage + L::V + g * GB, &mapV, kvcol + 64 * g,
                              int(base + k0), &landed[st]);
        }
      }
      int32_t *kposS = reinterpret_cast<int32_t *>(stage + L::Kpos);
      for (int c = tid; c < BK; c += 128)
        kposS[c] = c < kc ? geo.ps[k0 + c] : kNoPos;
      detail::mbarrierWait(&landed[st], use);
      if (withV && kc < BK) // K rows kc .. BK: zero (pass 2 reads K for dQ)
        detail::zeroSwizzledRows<G, 128>(stage, kc, tid);
      detail::fenceProxyAsync();
      __syncwarp();
      if (lane == 0)
        detail::mbarrierArrive(&full[st]);
    }
    return;
  }

  detail::setMaxRegistersInc<Regs::Consumer>();
  const Geometry geo = geometry();
  const int64_t base = geo.base;
  const int32_t *ps = geo.ps;
  const int qn = geo.qn, tiles = geo.tiles;
  const int slab = wg - 1, lane = tid % kWarp, warp = (tid % 128) / kWarp;
  const int gq = lane >> 2, tq = lane & 3;
  const float scale = 1.0f / sqrtf(float(HD));
  const float scaleLog2 = 1.4426950408889634f * scale;
  const int sr = 64 * slab; // the warpgroup's first query row
  const bool slabRows = sr < qn;
  const int32_t slabLastPos =
      slabRows ? ps[i0 + (qn < sr + 64 ? qn : sr + 64) - 1] : kNoPos;
  // The tiles the slab visits in each pass: a prefix of the CTA's.
  int visits = 0;
  while (slabRows && visits < tiles && ps[int64_t(visits) * BK] <= slabLastPos)
    ++visits;
  int32_t qp[2]; // this lane's rows' positions (kNoPos past the segment)
  float Dd[2];   // and D = rowsum(dO * O), each lane a quarter of the columns
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = sr + 16 * warp + gq + 8 * hh;
    qp[hh] = r < qn ? ps[i0 + r] : kNoPos;
    float dd = 0.0f;
    if (r < qn) {
      const int64_t row = (base + i0 + r) * LD + hcol;
      for (int d = tq; d < HD; d += 4)
        dd = fmaf(dout[row + d], outputValue(o[row + d], roundO), dd);
    }
    dd += __shfl_xor_sync(0xffffffffu, dd, 1);
    dd += __shfl_xor_sync(0xffffffffu, dd, 2);
    Dd[hh] = dd;
  }
  const unsigned char *qSlab = smem + L::Q + slab * G * GB;
  const unsigned char *dOSlab = smem + L::DO + slab * G * GB;

  auto release = [&](int st) {
    __syncwarp();
    if (lane == 0)
      detail::mbarrierArrive(&empty[st]);
  };
  auto acquire = [&](int u) {
    const int st = u % S;
    detail::mbarrierWaitUntrapped(&full[st], unsigned(u / S) & 1);
    __syncwarp(); // .aligned wgmma needs the warp converged
    return st;
  };
  // The steps of a pass the slab does not see: waited for and released.
  auto drain = [&](int from, int to) {
    for (int u = from; u < to; ++u)
      release(acquire(u));
  };
  // S = Q K^T over stage st's K tile (and, with dP, dP = dO V^T over its V
  // tile), committed as one group.
  auto issueS = [&](float(&sc)[BK / 8][4], int st) {
    const unsigned char *kT = ring + st * L::StageBytes;
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) { // k16 step k of the head dim
      const int at = (k / 4) * GB + 32 * (k % 4);
      detail::wgmmaBf16<BK>(sc, detail::wgmmaDescriptorSw128(qSlab + at),
                            detail::wgmmaDescriptorSw128(kT + at), smem);
    }
  };
  auto issueDp = [&](float(&dp)[BK / 8][4], int st) {
    const unsigned char *vT = ring + st * L::StageBytes + L::V;
#pragma unroll
    for (int k = 0; k < HD / 16; ++k) {
      const int at = (k / 4) * GB + 32 * (k % 4);
      detail::wgmmaBf16<BK>(dp, detail::wgmmaDescriptorSw128(dOSlab + at),
                            detail::wgmmaDescriptorSw128(vT + at), smem);
    }
  };
  auto kposOf = [&](int st) {
    return reinterpret_cast<const int32_t *>(ring + st * L::StageBytes +
                                             L::Kpos);
  };

  // Pass 1: the online max and sum of the visible scaled scores.
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f}, lse2[2];
  detail::mbarrierWaitUntrapped(&qFull, 0);
  __syncwarp();
  for (int u = 0; u < visits; ++u) {
    const int st = acquire(u);
    const int32_t *kposS = kposOf(st);
    float sc[BK / 8][4];
    detail::zeroAccumulators(sc);
    detail::wgmmaFence(sc);
    issueS(sc, st);
    detail::wgmmaCommit();
    detail::wgmmaWait<0>(sc);
    release(st);
    // Row gq + 8 (e >> 1) of the warp's 16, key column 8j + 2tq + (e & 1).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < BK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * tq + (e & 1);
        const float x =
            kposS[c] > qp[e >> 1] ? -INFINITY : sc[j][e] * scaleLog2;
        sc[j][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    float msub[2], alpha[2], rs[2] = {0.0f, 0.0f};
    detail::onlineRowMax(mrow, mx, msub, alpha,
                         [](float x) { return exp2f(x); });
#pragma unroll
    for (int j = 0; j < BK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        rs[e >> 1] += exp2f(sc[j][e] - msub[e >> 1]);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      lrow[hh] = lrow[hh] * alpha[hh] + rs[hh];
  }
  drain(visits, tiles);
  detail::quadRowSums(lrow);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    lse2[hh] = mrow[hh] + log2f(lrow[hh]);
    const int r = sr + 16 * warp + gq + 8 * hh;
    if (tq == 0 && r < qn) {
      stats[((base + i0 + r) * H + h) * 2] = lse2[hh] * 0.6931471805599453f;
      stats[((base + i0 + r) * H + h) * 2 + 1] = Dd[hh];
    }
  }

  // Pass 2: dQ. Tile u's S and dP, then tile u - 1's dQ, which runs while
  // tile u's dS is formed.
  float dQ[HD / 8][4];
  detail::zeroAccumulators(dQ);
  // Stage st's dS = P (dP - D) into dp, in f32, zero where masked.
  auto scoreGrads = [&](const float(&sc)[BK / 8][4], float(&dp)[BK / 8][4],
                        int st) {
    const int32_t *kposS = kposOf(st);
#pragma unroll
    for (int j = 0; j < BK / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * j + 2 * tq + (e & 1);
        dp[j][e] = kposS[c] > qp[e >> 1]
                       ? 0.0f
                       : exp2f(sc[j][e] * scaleLog2 - lse2[e >> 1]) *
                             (dp[j][e] - Dd[e >> 1]);
      }
  };
  auto roundA = [](const float(&x)[BK / 8][4], uint32_t(&a)[BK / 16][4]) {
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
      a[j / 2][2 * (j % 2)] = detail::packBf16x2(x[j][0], x[j][1]);
      a[j / 2][2 * (j % 2) + 1] = detail::packBf16x2(x[j][2], x[j][3]);
    }
  };
  auto issueScores = [&](float(&sc)[BK / 8][4], float(&dp)[BK / 8][4], int st) {
    detail::zeroAccumulators(sc);
    detail::zeroAccumulators(dp);
    detail::wgmmaFence(sc);
    detail::wgmmaPinAccumulators(dp);
    issueS(sc, st);
    issueDp(dp, st);
    detail::wgmmaCommit();
  };
  // dQ += dS K over stage st's K tile (read MN-major), dS as wgmma's A
  // fragments (a k16 step of keys each), committed as one group.
  auto issueDq = [&](const uint32_t(&da)[BK / 16][4], int st) {
    const unsigned char *kT = ring + st * L::StageBytes;
    detail::wgmmaFence(dQ);
#pragma unroll
    for (int kb = 0; kb < BK / 16; ++kb) // keys 16 kb .. 16 kb + 15
      detail::wgmmaBf16RegA<HD, true>(
          dQ, da[kb], detail::wgmmaDescriptorMnSw128(kT + 2048 * kb, BK), smem);
    detail::wgmmaCommit();
  };
  if (visits > 0) {
    uint32_t da[BK / 16][4];
    float sc[BK / 8][4], dp[BK / 8][4];
    int prev = acquire(tiles);
    issueScores(sc, dp, prev);
    detail::wgmmaWait<0>(sc);
    detail::wgmmaPinAccumulators(dp);
    scoreGrads(sc, dp, prev);
    roundA(dp, da);
    for (int u = tiles + 1; u < tiles + visits; ++u) {
      const int st = acquire(u);
      issueScores(sc, dp, st);
      issueDq(da, prev);
      detail::wgmmaWait<1>(sc); // S and dP are in; dQ may still run
      detail::wgmmaPinAccumulators(dp);
      scoreGrads(sc, dp, st);
      detail::wgmmaWait<0>(dQ); // tile u - 1 is summed; da is free
      release(prev);
      roundA(dp, da);
      prev = st;
    }
    issueDq(da, prev);
    detail::wgmmaWait<0>(dQ);
    release(prev);
  }
  drain(tiles + visits, 2 * tiles);

#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = sr + 16 * warp + gq + 8 * hh;
    if (r >= qn)
      continue;
    float *dst = dq + (base + i0 + r) * LD + hcol + 2 * tq;
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      dst[8 * j] = dQ[j][2 * hh] * scale;
      dst[8 * j + 1] = dQ[j][2 * hh + 1] * scale;
    }
  }
}

/// Launches attnGradQueryWgmma (as launchAttnGradKeyWgmma); false (nothing
/// launched) where it cannot run, so that the caller runs attnGradQueryTc.
template <int H, int HD, int KVH, typename TO>
inline bool launchAttnGradQueryWgmma(int64_t nseg, int64_t max_seg_rows,
                                     const bf16 *q, const bf16 *k,
                                     const bf16 *v, const TO *o, bool roundO,
                                     const float *dout, const int64_t *seg,
                                     const int32_t *pos, float *dq,
                                     float *stats, cudaStream_t stream) {
  alignas(64) CUtensorMap mapQ, mapK, mapV;
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  const int64_t rows = nseg * max_seg_rows;
  if (!detail::encodeOperandMap(mapQ, q, rows, LD, LD, 64) ||
      !detail::encodeOperandMap(mapK, k, rows, LDK, LDK, 64) ||
      !detail::encodeOperandMap(mapV, v, rows, LDK, LDK, 64))
    return false;
  auto kernel = attnGradQueryWgmma<H, HD, KVH, TO>;
  constexpr size_t bytes = AttnGradQueryWgmmaSmem<HD>::Bytes;
  static const bool sized =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(bytes)) == cudaSuccess;
  if (!sized)
    return false;
  const dim3 grid(unsigned(ceilDiv(max_seg_rows, kAgWgQueryRows)), unsigned(H),
                  unsigned(nseg));
  MODC_LAUNCH(kernel, grid, detail::kAttnWgThreads, bytes, stream, mapQ, mapK,
              mapV, o, dout, seg, pos, dq, stats, roundO);
  MODC_TEST_COUNT(attentionGradWgmmaLaunches);
  return true;
}

/// Launches the backward on mainloop ML (causal_attention_grad's) on
/// tensor cores (ML 1, or 2: the wgmma kernels where they can run; BF: on
/// bf16 inputs) or the SIMT one (ML 0); only the chosen kernels are
/// instantiated.
template <int ML, int H, int HD, int KVH, bool BF, typename TQ, typename TK,
          typename TVin, typename TO, typename TV>
inline void launchAttentionGrad(int64_t nseg, int64_t max_seg_rows, const TQ *q,
                                const TK *k, const TVin *v, const TO *o,
                                bool roundO, const float *dout,
                                const int64_t *seg, const int32_t *pos,
                                float *dq, float *dk, TV *dv, float *stats,
                                cudaStream_t stream) {
  if constexpr (ML >= 1) {
    constexpr bool wgmma = ML == 2 && detail::attentionWgmmaHeadDim<HD> &&
                           std::is_same_v<TQ, bf16> &&
                           std::is_same_v<TK, bf16> &&
                           std::is_same_v<TVin, bf16>;
    bool queryDone = false;
    if constexpr (wgmma)
      queryDone = launchAttnGradQueryWgmma<H, HD, KVH>(nseg, max_seg_rows, q, k,
                                                       v, o, roundO, dout, seg,
                                                       pos, dq, stats, stream);
    if (!queryDone) {
      constexpr int smemQ = AttnGradTcSmem<HD>::Bytes;
      auto kq = attnGradQueryTc<H, HD, KVH, BF, TQ, TK, TVin, TO>;
      static bool configured = false; // the attribute is per function
      if (!configured) {
        cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smemQ);
        configured = true;
      }
      const dim3 gq((unsigned)ceilDiv(max_seg_rows, kAgTcOwn), H,
                    (unsigned)nseg);
      MODC_LAUNCH(kq, gq, kAgTcThreads, smemQ, stream, q, k, v, o, dout, seg,
                  pos, dq, stats, roundO);
    }
    if constexpr (wgmma) {
      if (launchAttnGradKeyWgmma<H, HD, KVH>(nseg, max_seg_rows, q, k, v, dout,
                                             seg, pos, stats, dk, dv, stream))
        return;
    }
    constexpr int smemK = AttnGradTcSmem<HD>::KeyBytes;
    auto kk = attnGradKeyTc<H, HD, KVH, BF, TQ, TK, TVin, TV>;
    static bool configuredKey = false;
    if (!configuredKey) {
      cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smemK);
      configuredKey = true;
    }
    const dim3 gk((unsigned)ceilDiv(max_seg_rows, kAgTcOwn), KVH,
                  (unsigned)nseg);
    MODC_LAUNCH(kk, gk, kAgTcKeyThreads, smemK, stream, q, k, v, dout, seg, pos,
                static_cast<const float *>(stats), dk, dv);
  } else {
    constexpr int smem = attnGradSmemFloats<HD>() * int(sizeof(float));
    auto kq = attnGradQuery<H, HD, KVH, TQ, TK, TVin, TO>;
    auto kk = attnGradKey<H, HD, KVH, TQ, TK, TVin, TV>;
    if (smem > 48 * 1024) {
      cudaFuncSetAttribute(kq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
      cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           smem);
    }
    const dim3 gq((unsigned)ceilDiv(max_seg_rows, kAgBQ), H, (unsigned)nseg);
    MODC_LAUNCH(kq, gq, kAgThreads, smem, stream, q, k, v, o, dout, seg, pos,
                dq, stats, roundO);
    const dim3 gk((unsigned)ceilDiv(max_seg_rows, kAgBK), KVH, (unsigned)nseg);
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
/// [rows, H * HD] (k, v, dk and dv [rows, KVH * HD]: grouped-query attention,
/// a key/value head's gradients summed over its H / KVH query heads in
/// head order) with rows = seg[nseg]; writes dq, dk, dv (overwrite) for
/// rows < seg[nseg]. Key j of a segment is visible to query i iff j <= i or
/// pos[j] <= pos[i] (positions ascend within a segment), as in the forward.
/// max_seg_rows bounds every segment's length (S, or the routed capacity) and
/// sizes the grid, as in causal_attention. `scratch`:
/// attention_grad_scratch_floats<H>(max_rows) floats for any max_rows >=
/// seg[nseg] (nseg * max_seg_rows will do). Two kernels (query side writes dq
/// and the softmax statistics, key side dk and dv); no atomics, deterministic.
/// For head dims that are multiples of 8 up to 128 they run on tensor cores
/// (3xTF32 mma.m16n8k8, f32 accuracy: attnGradQueryTc, attnGradKeyTc) where
/// `Mainloop` (the compiler's choice, modk-configure-gemms; as
/// causal_attention's) is 1, or 2 where wgmma cannot run; 2 runs
/// attnGradQueryWgmma and attnGradKeyWgmma (sm_90a, TMA and wgmma; P, dS and
/// dO rounded to bf16) where the head dim is 64 or 128, q, k and v are bf16
/// arrays and TMA can read them (each side falls back on its mma.sync kernel
/// on its own); 0 the SIMT kernels (attnGradQuery, attnGradKey); same
/// scratch either way.
/// BF16: q, k, v hold bf16 values (a bf16 model); the same result, with
/// fewer tensor-core instructions. q, k and v may be bf16 (a bf16 model's,
/// modk-store-bf16: widened as the tiles are loaded), and dv (rounded as
/// stored: only products read it).
/// round_o (a bf16 model): D reads o rounded to bf16, as the O projection's
/// products read it (docs/model-format.md, "bf16 models"); o may then be
/// bf16 (modk-store-bf16), with the same result.
template <int H, int HD, bool BF16 = false, int Mainloop = 1, int KVH = H,
          typename TQ = float, typename TK = float, typename TVin = float,
          typename TO = float, typename TV = float>
inline void causal_attention_grad(const TQ *q, const TK *k, const TVin *v,
                                  const TO *o, const float *dout, int64_t nseg,
                                  const int64_t *seg, const int32_t *pos,
                                  int64_t max_seg_rows, float *dq, float *dk,
                                  TV *dv, bool round_o, float *scratch,
                                  cudaStream_t stream) {
  using namespace train_detail;
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  static_assert(Mainloop >= 0 && Mainloop <= 2, "simt, mma or wgmma");
  if (nseg <= 0 || max_seg_rows <= 0)
    return;
  if constexpr (Mainloop >= 1 && attentionGradTcHeadDim<HD>) {
    launchAttentionGrad<Mainloop, H, HD, KVH, BF16>(
        nseg, max_seg_rows, q, k, v, o, round_o, dout, seg, pos, dq, dk, dv,
        scratch, stream);
  } else {
    launchAttentionGrad<0, H, HD, KVH, false>(nseg, max_seg_rows, q, k, v, o,
                                              round_o, dout, seg, pos, dq, dk,
                                              dv, scratch, stream);
  }
}

} // namespace modk_cuda

#endif // MODC_CUDA_FLASH_ATTENTION_GRAD_INCLUDED
