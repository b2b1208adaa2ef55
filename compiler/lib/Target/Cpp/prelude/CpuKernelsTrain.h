//===- CpuKernelsTrain.h - CPU training kernels for models ------*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The backward (training) kernels of modc's CPU target that are not
/// generated: the gradients of the products (around sgemm) and of
/// attention (the losses, the row kernels, the embedding's gradient and
/// the AdamW step, its gradient norm and its update, are generated from
/// modk.rows and modk.optimizer). The
/// C++ emitter pastes CpuKernels.h and then this header verbatim into every
/// generated `model.cpp` with a training entry; the same conventions hold
/// (docs/model-format.md sections 3-5):
///  - row-major f32, `rows` a runtime row count, segments and positions as in
///    CpuKernels.h;
///  - "accumulate" means the kernel adds into its output, which the caller
///    zeroed first; "overwrite" means it does not read the output;
///  - cblas is only called outside OpenMP parallel regions;
///  - every reduction over rows is deterministic: rows are cut into chunks
///    whose size depends only on the row count, each chunk is reduced
///    serially, and the chunk results are added in chunk order. Results are
///    therefore bit-identical for any thread count.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_TARGET_CPP_PRELUDE_CPUKERNELSTRAIN_H
#define MODC_TARGET_CPP_PRELUDE_CPUKERNELSTRAIN_H

// When the emitter pastes both headers, CpuKernels.h is already in and the
// include (which would not resolve next to model.cpp) is skipped.
#ifndef MODC_TARGET_CPP_PRELUDE_CPUKERNELS_H
#include "CpuKernels.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace modk_cpu {

//===----------------------------------------------------------------------===//
// Linear, norm and elementwise gradients
//===----------------------------------------------------------------------===//

/// Slice `slice` of `slices` of linear_dgrad: da's columns [first, end)
/// (detail::sliceRange over K), a grouped product's tile (run_group); one
/// slice of one is the whole product.
template <int N, int K, bool BF16 = false, typename TD = float>
inline void linear_dgrad_slice(int slice, int slices, const TD *dy, int64_t M,
                               const float *w, float *da, bool accumulate) {
  static_assert(BF16 || std::is_same_v<TD, float>,
                "bf16 operands are for bf16 products");
  int64_t first, end;
  detail::sliceRange(K, slice, slices, first, end);
  if (M <= 0 || first == end)
    return;
  const int64_t count = end - first;
  const float *dyf, *wr;
  int64_t ldw;
  if constexpr (BF16) {
    dyf = detail::bf16Copy(dy, M * N, 0);
    wr = detail::bf16CopyBlock(w + first, N, count, K, 1);
    ldw = count;
  } else {
    dyf = dy;
    wr = w + first;
    ldw = K;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M),
              static_cast<int>(count), N, 1.0f, dyf, N, wr,
              static_cast<int>(ldw), accumulate ? 1.0f : 0.0f, da + first, K);
}

/// Slice `slice` of `slices` of linear_wgrad: dw's rows [first, end)
/// (detail::sliceRange over N), a grouped product's tile (run_group); one
/// slice of one is the whole product.
template <int N, int K, bool BF16 = false, typename TA = float,
          typename TD = float>
inline void linear_wgrad_slice(int slice, int slices, const TD *dy, int64_t M,
                               const TA *a, float *dw, bool accumulate) {
  static_assert(BF16 ||
                    (std::is_same_v<TA, float> && std::is_same_v<TD, float>),
                "bf16 operands are for bf16 products");
  int64_t first, end;
  detail::sliceRange(N, slice, slices, first, end);
  if (first == end)
    return;
  const int64_t count = end - first;
  if (M <= 0) {
    if (!accumulate)
      std::memset(dw + first * K, 0, sizeof(float) * count * K);
    return;
  }
  const float *af, *dyf;
  int64_t ldd;
  if constexpr (BF16) {
    dyf = detail::bf16CopyBlock(dy + first, M, count, N, 0);
    af = detail::bf16Copy(a, M * K, 1);
    ldd = count;
  } else {
    dyf = dy + first;
    af = a;
    ldd = N;
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(count),
              K, static_cast<int>(M), 1.0f, dyf, static_cast<int>(ldd), af, K,
              accumulate ? 1.0f : 0.0f, dw + first * K, K);
}

/// da[M, K] (+)= dy[M, N] * w[N, K] (w in nn.Linear layout). M may be 0.
/// BF16: both operands rounded to bf16 (a bf16 model; da stays f32; dy may
/// then hold bf16: TD). Must not be called from inside an OpenMP parallel
/// region.
template <int N, int K, bool BF16 = false, typename TD = float>
inline void linear_dgrad(const TD *dy, int64_t M, const float *w, float *da,
                         bool accumulate) {
  linear_dgrad_slice<N, K, BF16>(0, 1, dy, M, w, da, accumulate);
}

/// dw[N, K] (+)= dy[M, N]^T * a[M, K]. M may be 0 (then dw is zeroed unless
/// accumulating). BF16: both operands rounded to bf16 (dy and a may then
/// hold bf16: TD, TA). Must not be called from inside an OpenMP parallel
/// region.
template <int N, int K, bool BF16 = false, typename TA = float,
          typename TD = float>
inline void linear_wgrad(const TD *dy, int64_t M, const TA *a, float *dw,
                         bool accumulate) {
  linear_wgrad_slice<N, K, BF16>(0, 1, dy, M, a, dw, accumulate);
}

//===----------------------------------------------------------------------===//
// Causal attention backward
//===----------------------------------------------------------------------===//

namespace detail {

/// Attention backward tiling; each can be overridden with -D for
/// experiments:
///  - MODK_CPU_ATTNG_BQ: query rows per block (64);
///  - MODK_CPU_ATTNG_BK: keys per block, a multiple of kVW (64);
///  - MODK_CPU_ATTNG_R: maximum rows per register tile (8; the register file
///    usually limits it first).
#ifndef MODK_CPU_ATTNG_BQ
#define MODK_CPU_ATTNG_BQ 64
#endif
#ifndef MODK_CPU_ATTNG_BK
#define MODK_CPU_ATTNG_BK 64
#endif
#ifndef MODK_CPU_ATTNG_R
#define MODK_CPU_ATTNG_R 8
#endif
#ifndef MODK_CPU_ATTNG_SPARE
#define MODK_CPU_ATTNG_SPARE 1
#endif
constexpr int kAgBQ = MODK_CPU_ATTNG_BQ;
constexpr int kAgBK = MODK_CPU_ATTNG_BK;

/// C[r][0 : NV*kVW] (+)= sum_k A[r*ars + k*aks] * B[k*bks + (0 : NV*kVW)] for
/// r < R: the register-blocked core of every product in the backward. A is
/// read as broadcast scalars, so any strides (transposes) are free.
template <int R, int NV, bool Acc>
inline void mmTile(const float *A, int64_t ars, int64_t aks, const float *B,
                   int64_t bks, int K, float *C, int64_t crs) {
  VecF acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = Acc ? loadu(C + r * crs + v * kVW) : VecF{};
  for (int k = 0; k < K; ++k) {
    VecF b[NV];
    for (int v = 0; v < NV; ++v)
      b[v] = loadu(B + k * bks + v * kVW);
    for (int r = 0; r < R; ++r) {
      const VecF a = splat(A[r * ars + k * aks]);
      for (int v = 0; v < NV; ++v)
        acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      storeu(C + r * crs + v * kVW, acc[r][v]);
}

/// The leftover rows < RR of an R-row blocked product, dispatched to a tile
/// of exactly that height.
template <int RR, int NV, bool Acc>
inline void mmTail(int rem, const float *A, int64_t ars, int64_t aks,
                   const float *B, int64_t bks, int K, float *C, int64_t crs) {
  if constexpr (RR > 0) {
    if (rem == RR)
      mmTile<RR, NV, Acc>(A, ars, aks, B, bks, K, C, crs);
    else
      mmTail<RR - 1, NV, Acc>(rem, A, ars, aks, B, bks, K, C, crs);
  }
}

/// `rows` x (NVT vectors) product: column chunks of at most 4 vectors, each
/// with as many rows per register tile as the register file allows.
template <int NVT, bool Acc>
inline void mm(int rows, const float *A, int64_t ars, int64_t aks,
               const float *B, int64_t bks, int K, float *C, int64_t crs) {
  if constexpr (NVT > 0) {
    constexpr int NV = NVT < 4 ? NVT : 4;
    constexpr int Rraw = (kNumVecRegs - NV - MODK_CPU_ATTNG_SPARE) / NV;
    constexpr int R = Rraw > MODK_CPU_ATTNG_R ? MODK_CPU_ATTNG_R
                      : Rraw < 1              ? 1
                                              : Rraw;
    int r = 0;
    for (; r + R <= rows; r += R)
      mmTile<R, NV, Acc>(A + r * ars, ars, aks, B, bks, K, C + r * crs, crs);
    mmTail<R - 1, NV, Acc>(rows - r, A + r * ars, ars, aks, B, bks, K,
                           C + r * crs, crs);
    mm<NVT - NV, Acc>(rows, A, ars, aks, B + NV * kVW, bks, K, C + NV * kVW,
                      crs);
  }
}

/// Backward of one (segment, key/value head) of causal_attention, entirely
/// on this thread (so dK and dV need no cross-thread reduction): the query
/// heads of the group, H / KVH of them (one without grouped-query
/// attention), one after the other in head order, each adding to the
/// group's dK and dV. Flash-attention-2 order: an outer loop over key
/// blocks keeps that block's dK, dV in cache while the query blocks that
/// see it stream past; dQ accumulates in a per-segment buffer. The softmax
/// statistics are recomputed first. QS, KS, VS: the row strides of q, k
/// and v, which hold TQ, TK, TVin (float, or bf16: widened exactly); o holds
/// TO, and D reads it rounded to bf16 where roundO (causal_attention_grad).
template <int H, int KVH, int HD, int QS, int KS, int VS, typename TQ,
          typename TK, typename TVin, typename TO, typename TV>
inline void attentionGradItem(const TQ *q, const TK *k, const TVin *v,
                              const TO *o, const float *dout,
                              const int64_t *seg, const int32_t *pos, int64_t s,
                              int kvh, float *dq, float *dk, TV *dv,
                              bool roundO) {
  constexpr int BQ = kAgBQ, BK = kAgBK;
  constexpr int NB = BK / kVW;             // vectors per score row
  constexpr int DV = (HD + kVW - 1) / kVW; // vectors per head row
  constexpr int HDP = DV * kVW;            // padded head dim
  constexpr int64_t LD = int64_t(H) * HD;  // q, o, dout, dq rows
  constexpr int64_t LDK = int64_t(KVH) * HD; // dk, dv rows
  constexpr int G = H / KVH;                 // query heads of the group
  static_assert(BK % kVW == 0, "key block must be whole vectors");

  const int64_t base = seg[s];
  const int64_t n = seg[s + 1] - base;
  if (n <= 0)
    return;
  const int32_t *ps = pos + base;
  const int64_t koff = int64_t(kvh) * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int64_t ntile = (n + BK - 1) / BK;
  const int64_t np = ntile * BK; // padded row count

  // Per-thread scratch, grown on demand and kept across calls.
  static thread_local std::vector<float> buf;
  static thread_local std::vector<int64_t> limBuf;
  const int64_t need =
      6 * np * HDP + 2 * HD * np + 2 * np + 2 * BK * HDP + 2 * BQ * BK;
  if (int64_t(buf.size()) < need)
    buf.resize(need);
  if (int64_t(limBuf.size()) < n)
    limBuf.resize(n);
  float *Qs = buf.data();     // [np][HDP] q * scale
  float *Ks = Qs + np * HDP;  // [np][HDP] k rows
  float *dOs = Ks + np * HDP; // [np][HDP] dout rows
  float *dQ = dOs + np * HDP; // [np][HDP] dQ / scale accumulator
  float *Kt = dQ + np * HDP;  // [ntile][HD][BK] keys transposed
  float *Vt = Kt + HD * np;   // [ntile][HD][BK] values transposed
  float *lse = Vt + HD * np;  // [np] log-sum-exp of the scaled scores
  float *Dd = lse + np;       // [np] rowsum(dout * o)
  float *dKb = Dd + np;       // [BK][HDP]
  float *dVb = dKb + BK * HDP;
  float *Sb = dVb + BK * HDP; // [BQ][BK] scores, then P
  float *dPb = Sb + BQ * BK;  // [BQ][BK] dP, then dS
  float *dKs = dPb + BQ * BK; // [np][HDP] the group's dK
  float *dVs = dKs + np * HDP; // [np][HDP] the group's dV
  int64_t *lim = limBuf.data();

  // Pack this key/value head: zero padding keeps padded lanes finite and
  // inert.
  std::memset(Ks, 0, sizeof(float) * np * HDP);
  std::memset(Kt, 0, sizeof(float) * 2 * HD * np);
  std::memset(dKs, 0, sizeof(float) * 2 * np * HDP);
  for (int64_t i = 0; i < n; ++i) {
    const TK *ki = k + (base + i) * KS + koff;
    const TVin *vi = v + (base + i) * VS + koff;
    for (int d = 0; d < HD; ++d)
      Ks[i * HDP + d] = static_cast<float>(ki[d]);
    float *kt = Kt + (i / BK) * HD * BK + i % BK;
    float *vt = Vt + (i / BK) * HD * BK + i % BK;
    for (int d = 0; d < HD; ++d) {
      kt[d * BK] = static_cast<float>(ki[d]);
      vt[d * BK] = static_cast<float>(vi[d]);
    }
  }
  // lim[r]: keys [0, lim[r]) are visible to query r (as in the forward).
  int64_t prev = 0;
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = std::max(r + 1, prev);
    while (l < n && ps[l] <= ps[r])
      ++l;
    lim[r] = prev = l;
  }

  VecI lane;
  for (int c = 0; c < kVW; ++c)
    lane[c] = c;
  const float ninf = -std::numeric_limits<float>::infinity();

  for (int g = 0; g < G; ++g) {
    const int64_t hoff = (int64_t(kvh) * G + g) * HD;
    // Pack this query head.
    std::memset(Qs, 0, sizeof(float) * np * HDP);
    std::memset(dOs, 0, sizeof(float) * 2 * np * HDP);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = (base + i) * LD + hoff;
      const TQ *qi = q + (base + i) * QS + hoff;
      float dd = 0.0f;
      for (int d = 0; d < HD; ++d) {
        Qs[i * HDP + d] = static_cast<float>(qi[d]) * scale;
        dOs[i * HDP + d] = dout[row + d];
        // An explicit fma: the same bits whatever o's type (a contraction
        // the compiler chose could differ between the two).
        const float od = static_cast<float>(o[row + d]);
        dd = std::fma(dout[row + d], roundO ? bf16_round(od) : od, dd);
      }
      Dd[i] = dd;
    }

    // Pass 1: log-sum-exp of every query row (online max and sum).
    for (int64_t i0 = 0; i0 < n; i0 += BQ) {
      const int qn = static_cast<int>(std::min<int64_t>(BQ, n - i0));
      float mrow[BQ], lrow[BQ];
      for (int r = 0; r < qn; ++r) {
        mrow[r] = ninf;
        lrow[r] = 0.0f;
      }
      for (int64_t k0 = 0; k0 < lim[i0 + qn - 1]; k0 += BK) {
        mm<NB, false>(qn, Qs + i0 * HDP, HDP, 1, Kt + k0 * HD, BK, HD, Sb, BK);
        for (int r = 0; r < qn; ++r) {
          const int64_t valid = lim[i0 + r] - k0;
          if (valid <= 0)
            continue;
          float *sr = Sb + r * BK;
          const VecI vl =
              lane - static_cast<int32_t>(std::min<int64_t>(valid, BK));
          VecF mx = splat(ninf);
          for (int b = 0; b < NB; ++b)
            mx = vmax(
                mx, select(vl + b * kVW < 0, loadu(sr + b * kVW), splat(ninf)));
          const float mnew = std::max(mrow[r], hmax(mx));
          VecF sum = VecF{};
          for (int b = 0; b < NB; ++b)
            sum += vexp(
                select(vl + b * kVW < 0, loadu(sr + b * kVW), splat(ninf)) -
                mnew);
          lrow[r] = lrow[r] * std::exp(mrow[r] - mnew) + hsum(sum);
          mrow[r] = mnew;
        }
      }
      for (int r = 0; r < qn; ++r)
        lse[i0 + r] = mrow[r] + std::log(lrow[r]);
    }

    // Pass 2: per key block, every query block that sees it.
    for (int64_t k0 = 0; k0 < n; k0 += BK) {
      const int kc = static_cast<int>(std::min<int64_t>(BK, n - k0));
      std::memset(dKb, 0, sizeof(float) * 2 * BK * HDP);
      const float *Ktj = Kt + k0 * HD, *Vtj = Vt + k0 * HD;
      // First query that sees key k0; lim is non-decreasing.
      const int64_t rs = std::upper_bound(lim, lim + n, k0) - lim;
      for (int64_t i0 = rs; i0 < n; i0 += BQ) {
        const int qn = static_cast<int>(std::min<int64_t>(BQ, n - i0));
        // S = Qs K^T, dP = dO V^T.
        mm<NB, false>(qn, Qs + i0 * HDP, HDP, 1, Ktj, BK, HD, Sb, BK);
        mm<NB, false>(qn, dOs + i0 * HDP, HDP, 1, Vtj, BK, HD, dPb, BK);
        // P = exp(S - lse) on visible keys, dS = P (dP - D).
        for (int r = 0; r < qn; ++r) {
          const int64_t valid = std::min<int64_t>(lim[i0 + r] - k0, BK);
          const VecI vl = lane - static_cast<int32_t>(valid);
          const VecF l = splat(lse[i0 + r]), dd = splat(Dd[i0 + r]);
          float *sr = Sb + r * BK, *dr = dPb + r * BK;
          for (int b = 0; b < NB; ++b) {
            const VecF p =
                select(vl + b * kVW < 0, vexp(loadu(sr + b * kVW) - l), VecF{});
            storeu(sr + b * kVW, p);
            storeu(dr + b * kVW, p * (loadu(dr + b * kVW) - dd));
          }
        }
        // dV += P^T dO, dK += dS^T Qs, dQ += dS K.
        mm<DV, true>(kc, Sb, 1, BK, dOs + i0 * HDP, HDP, qn, dVb, HDP);
        mm<DV, true>(kc, dPb, 1, BK, Qs + i0 * HDP, HDP, qn, dKb, HDP);
        mm<DV, true>(qn, dPb, BK, 1, Ks + k0 * HDP, HDP, kc, dQ + i0 * HDP,
                     HDP);
      }
      // The group's sums, in head order (0 + x is x: one head, as before).
      for (int c = 0; c < kc; ++c)
        for (int d = 0; d < HD; ++d) {
          dKs[(k0 + c) * HDP + d] += dKb[c * HDP + d];
          dVs[(k0 + c) * HDP + d] += dVb[c * HDP + d];
        }
    }
    for (int64_t i = 0; i < n; ++i) {
      float *dst = dq + (base + i) * LD + hoff;
      for (int d = 0; d < HD; ++d)
        dst[d] = dQ[i * HDP + d] * scale;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = (base + i) * LDK + koff;
    std::memcpy(dk + row, dKs + i * HDP, sizeof(float) * HD);
    if constexpr (std::is_same_v<TV, float>) {
      std::memcpy(dv + row, dVs + i * HDP, sizeof(float) * HD);
    } else {
      for (int d = 0; d < HD; ++d)
        dv[row + d] = TV(dVs[i * HDP + d]);
    }
  }
}

} // namespace detail

/// Backward of causal_attention. q, k are after RoPE, v, o (the forward
/// output before the O projection) and dout are [rows, H * HD] (k, v, dk
/// and dv [rows, KVH * HD]: grouped-query attention, docs/model-format.md
/// section 3) with rows = seg[nseg]; writes dq, dk, dv (overwrite). The
/// probabilities are recomputed (flash-attention-2 style): lse from a first
/// pass over the scores, then D_i = rowsum(dout_i o_i), dP = dout V^T, dS = P
/// (dP - D), dq = dS K / sqrt(HD), dk = dS^T q / sqrt(HD), dv = P^T dout. One
/// OpenMP work item per (segment, key/value head), so the result is
/// deterministic.
/// dv may be bf16 (rounded as stored: modk-store-bf16, only products read it).
/// q, k and v rows are QS, KS and VS elements apart (columns of one stacked
/// product: modk-fuse-horizontal, docs/compiler.md); they hold float, or
/// bf16 (a bf16 model's, modk-store-bf16: widened exactly). round_o (a bf16
/// model): D reads o rounded to bf16, as the O projection's products read it
/// (docs/model-format.md, "bf16 models"), so that o may be stored as bf16
/// (modk-store-bf16) with the same result.
template <int H, int HD, int QS = H *HD, int KS = H *HD, int VS = H *HD,
          int KVH = H, typename TQ, typename TK, typename TVin, typename TO,
          typename TV>
inline void causal_attention_grad(const TQ *q, const TK *k, const TVin *v,
                                  const TO *o, const float *dout, int64_t nseg,
                                  const int64_t *seg, const int32_t *pos,
                                  float *dq, float *dk, TV *dv, bool round_o) {
  struct Item {
    int64_t seg, len;
  };
  static thread_local std::vector<Item> items;
  items.clear();
  for (int64_t s = 0; s < nseg; ++s)
    if (seg[s + 1] > seg[s])
      items.push_back({s, seg[s + 1] - seg[s]});
  // Longest segments first (cost is quadratic in the length).
  std::stable_sort(items.begin(), items.end(),
                   [](const Item &a, const Item &b) { return a.len > b.len; });
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  const int64_t nitems = static_cast<int64_t>(items.size()) * KVH;
  const Item *it = items.data();
  const int64_t rows = seg[nseg];
#pragma omp parallel for schedule(dynamic, 1) if (rows * H * HD >              \
                                                  detail::kMinParallelWork)
  for (int64_t t = 0; t < nitems; ++t)
    detail::attentionGradItem<H, KVH, HD, QS, KS, VS>(
        q, k, v, o, dout, seg, pos, it[t / KVH].seg, static_cast<int>(t % KVH),
        dq, dk, dv, round_o);
}

} // namespace modk_cpu

#endif // MODC_TARGET_CPP_PRELUDE_CPUKERNELSTRAIN_H
