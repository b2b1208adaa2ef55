//===- CpuKernelsDecode.h - CPU decode-step kernels for models --*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The decode-step (sampling) kernels of modc's CPU target: one new token per
/// active sequence, attention against a per-layer KV cache, and causal routing
/// of that token (docs/model-format.md sections 3-4,
/// runtime/include/modrt/abi.h `modc_decode_args`). The C++ emitter pastes
/// CpuKernels.h, CpuKernelsTrain.h (when the package trains) and then this
/// header verbatim into every generated `model.cpp` with a decode entry; the
/// conventions of CpuKernels.h hold:
///  - row-major f32;
///  - the residual stream of a step is [B, D], row b = sequence b;
///  - a row set of a step has `seg` with B + 1 entries: rows
///    [seg[b], seg[b+1]) (0 or 1 of them in a decode step) belong to
///    sequence b, and pos[j] is the ORIGINAL position of row j, so the
///    generated RoPE kernels rotate compacted rows unchanged;
///  - the KV cache of one layer is K and V, each [B, S, H * HD]; counts[b]
///    is the number of tokens of sequence b that layer holds. A routed
///    layer's cache holds only the routed tokens, in position order, with
///    RoPE applied at their original positions, so every cached token of a
///    sequence is earlier than its new token and causal attention needs no
///    positions;
///  - cblas is never called here (and never inside a parallel region).
///
/// A decode step's router, gather + RMSNorm and gated scatter are row
/// kernels modc generates (modk.rows) from the same regions as the forward
/// pass's, so that a decode step makes the forward pass's routing decisions
/// (CpuKernelsDecode.DecodeRouteWithRouterAsDecision checks the router's
/// bits).
///
//===----------------------------------------------------------------------===//

#ifndef MODC_TARGET_CPP_PRELUDE_CPUKERNELSDECODE_H
#define MODC_TARGET_CPP_PRELUDE_CPUKERNELSDECODE_H

// When the emitter pastes the headers in sequence, CpuKernels.h is already in
// and the include (which would not resolve next to model.cpp) is skipped.
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
// Row sets of a step
//===----------------------------------------------------------------------===//

/// Row set of a dense layer in a decode step (modk_small::DecodeRows):
/// seg[b] = b, seg[B] = B, pos[b] = positions[b], an inactive sequence's
/// position clamped to [0, S).
template <int S>
inline void decode_rows(const int32_t *positions, const uint8_t *active,
                        int64_t B, int32_t *pos, int64_t *seg) {
  static_assert(S >= 1, "decode needs at least one position");
  detail::forEachItem(
      modk_small::DecodeRows<S>{positions, active, B, pos, seg});
}

/// Causal routing of one decode step from its router scores (a row kernel
/// modc generates before this one): sequence b is routed iff active[b] and
/// decision[b] > 0 (a NaN or a zero of either sign is not routed).
/// `decision` is the router's r (the aux_loss router) or the predictor
/// logits [B]. Routed sequences are compacted in b order: seg[b] is the
/// number of routed sequences before b, seg[B] the total, pos[j] =
/// positions[b] for the row j of sequence b, and mask[b] = 1 if routed else
/// 0. With a Gather (modk-fuse-select-gather), row j of routed sequence b
/// is then gathered: gather(b, j, j + 1).
template <typename Gather = NoGather>
inline void decode_select(int64_t B, const float *decision,
                          const int32_t *positions, const uint8_t *active,
                          int32_t *pos, int64_t *seg, int32_t *mask,
                          Gather gather = {}) {
  int64_t c = 0;
  for (int64_t b = 0; b < B; ++b) {
    const bool routed = modk_small::decodeRoutes(decision, active, b);
    modk_small::decodeSelectEntry(b, c, routed, positions, pos, seg, mask);
    c += routed ? 1 : 0;
  }
  seg[B] = c;
  if constexpr (!std::is_same_v<Gather, NoGather>) {
#pragma omp parallel for if (c * Gather::width > detail::kMinParallelWork)
    for (int64_t b = 0; b < B; ++b)
      if (mask[b])
        gather(b, seg[b], seg[b] + 1);
  }
}

//===----------------------------------------------------------------------===//
// Attention against the KV cache
//===----------------------------------------------------------------------===//

namespace detail {

/// Keys per block of the decode attention's online softmax (a multiple of
/// every vector width).
constexpr int kDecodeBK = 64;

/// q[0:N] . x[0:N] with x float or bf16, in one order of operations for
/// both element types (whole vectors, one horizontal sum, then the scalar
/// tail), written out rather than left to `omp simd`: the compiler vectorises
/// the two instantiations differently on some ISAs (AVX2), and a bf16 cache
/// must give the same bits as an f32 cache holding the same values.
template <int N, typename C>
inline float dotRow(const float *q, const C *x) {
  VecF acc = VecF{};
  int d = 0;
  for (; d + kVW <= N; d += kVW)
    acc += loadu(q + d) * loadu(x + d);
  float s = hsum(acc);
  for (; d < N; ++d)
    s += q[d] * static_cast<float>(x[d]);
  return s;
}

/// acc[0:N] += p * x[0:N] with x float or bf16, in the same operations for
/// both element types (see dotRow).
template <int N, typename C>
inline void axpyRow(float *acc, float p, const C *x) {
  const VecF pv = splat(p);
  int d = 0;
  for (; d + kVW <= N; d += kVW)
    storeu(acc + d, loadu(acc + d) + pv * loadu(x + d));
  for (; d < N; ++d)
    acc[d] += p * static_cast<float>(x[d]);
}

/// out[0:HD] = softmax_t(q . k_t / sqrt(HD)) v_t over the n >= 1 cached keys
/// t of one head; key t is at kc + t * LD and value t at vc + t * LD, with
/// LD = H * HD (H: the cache's heads, the key/value heads). Streams blocks of
/// kDecodeBK keys with a max-subtracted online softmax, so no S-sized buffer is
/// needed. As in causal_attention, q is scaled before the dot products. Out:
/// float, or bf16 (rounded as it is stored).
template <int H, int HD, typename TQ, typename C, typename Out>
inline void decodeAttendHead(const TQ *q, const C *kc, const C *vc, int64_t n,
                             Out *out) {
  constexpr int64_t LD = static_cast<int64_t>(H) * HD;
  constexpr int BK = kDecodeBK;
  static_assert(BK % kVW == 0, "key block must be whole vectors");
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  alignas(64) float qs[HD];
  alignas(64) float acc[HD];
  alignas(64) float sc[BK];
  for (int d = 0; d < HD; ++d) {
    qs[d] = static_cast<float>(q[d]) * scale;
    acc[d] = 0.0f;
  }
  float mrun = -std::numeric_limits<float>::infinity();
  float lrun = 0.0f;
  for (int64_t t0 = 0; t0 < n; t0 += BK) {
    const int kn = static_cast<int>(std::min<int64_t>(BK, n - t0));
    float bmax = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < kn; ++t) {
      const float s = dotRow<HD>(qs, kc + (t0 + t) * LD);
      sc[t] = s;
      bmax = std::max(bmax, s);
    }
    // Padding lanes are -inf, which vexp maps to exactly 0.
    for (int t = kn; t < BK; ++t)
      sc[t] = -std::numeric_limits<float>::infinity();
    const float mnew = std::max(mrun, bmax);
    // mrun is -inf on the first block, whose key 0 makes mnew finite for
    // finite inputs, so alpha is 0 there and acc (zero) stays zero.
    const float alpha = std::exp(mrun - mnew);
    VecF sum = VecF{};
    const int kv = (kn + kVW - 1) / kVW * kVW;
    for (int t = 0; t < kv; t += kVW) {
      const VecF p = vexp(loadu(sc + t) - mnew);
      storeu(sc + t, p);
      sum += p;
    }
    lrun = lrun * alpha + hsum(sum);
#pragma omp simd
    for (int d = 0; d < HD; ++d)
      acc[d] *= alpha;
    for (int t = 0; t < kn; ++t)
      axpyRow<HD>(acc, sc[t], vc + (t0 + t) * LD);
    mrun = mnew;
  }
  const float inv = 1.0f / lrun;
  for (int d = 0; d < HD; ++d)
    out[d] = Out(acc[d] * inv);
}

} // namespace detail

/// Attention of one decode step against one layer's KV cache. q and out are
/// [seg[B], H * HD], k and v [seg[B], KVH * HD] (q and k already RoPE'd at
/// the rows' original positions); cache_k and cache_v are
/// [B, S, KVH * HD]; counts is [B]. Query head h reads key/value head
/// h / (H / KVH) (grouped-query attention, docs/model-format.md section 3).
///
/// For each row j of sequence b with active[b], in row order:
///  - k[j] and v[j] are appended at cache[b][counts[b]] and counts[b] grows
///    by one;
///  - out[j] = softmax(q_j . k_t / sqrt(HD)) v_t per head over the cached
///    tokens t < counts[b] (the new count): every earlier cached token plus
///    the row itself. A decode step has at most one row per sequence; with
///    several (a prefill chunk in position order) each row also sees the
///    rows of its sequence before it, which is causal attention again.
/// A full cache is refused: when counts[b] is already S (or out of [0, S)),
/// nothing is appended, counts[b] stays, and out[j] is all NaN; the caller
/// checks positions beforehand, this only keeps memory safe.
/// Rows of an inactive sequence get a zero out row and append nothing.
///
/// `pos` is not read: every cached token is earlier than the new one by
/// construction. It is taken so that the call mirrors causal_attention.
/// Appends run serially (they are B row copies); the (row, head) pairs run in
/// parallel when the step reads enough of the cache. The cache holds floats,
/// or bf16 (C = bf16: a bf16 model, whose keys and values are bf16 values);
/// q, k and v hold floats, or bf16 (modk-store-bf16), widened exactly; out
/// holds floats, or bf16 (modk-store-bf16, where only products read it:
/// rounded as it is stored).
template <int S, int H, int HD, int KVH = H, typename TQ, typename TK,
          typename TV, typename C, typename Out>
inline void decode_attention(const TQ *q, const TK *k, const TV *v, int64_t B,
                             const int64_t *seg, const int32_t *pos,
                             const uint8_t *active, C *cache_k, C *cache_v,
                             int32_t *counts, Out *out) {
  static_assert(S >= 1, "decode needs at least one position");
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  (void)pos;
  constexpr int64_t LD = static_cast<int64_t>(H) * HD;
  constexpr int64_t LDK = static_cast<int64_t>(KVH) * HD;
  const int64_t rows = seg[B];
  if (rows <= 0)
    return;

  // Per row: its sequence and the number of keys it attends to; 0 marks an
  // inactive row, -1 a refused (overflowing) one.
  static thread_local std::vector<int64_t> rowSeq, rowKeys;
  rowSeq.resize(rows);
  rowKeys.resize(rows);
  int64_t work = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = seg[b]; j < seg[b + 1]; ++j) {
      rowSeq[j] = b;
      if (!active[b]) {
        rowKeys[j] = 0;
        continue;
      }
      const int32_t c = counts[b];
      if (c < 0 || c >= S) {
        rowKeys[j] = -1;
        continue;
      }
      const int64_t slot = (b * S + c) * LDK;
      detail::storeRow(cache_k + slot, k + j * LDK, LDK);
      detail::storeRow(cache_v + slot, v + j * LDK, LDK);
      counts[b] = c + 1;
      rowKeys[j] = c + 1;
      work += c + 1;
    }
  }

  const int64_t *rs = rowSeq.data(), *rk = rowKeys.data();
  const int64_t items = rows * H;
  const bool parallel = work * LDK > detail::kMinParallelWork;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t j = it / H;
    const int64_t h = it % H;
    Out *o = out + j * LD + h * HD;
    const int64_t n = rk[j];
    if (n == 0) {
      std::fill(o, o + HD, Out(0.0f));
    } else if (n < 0) {
      std::fill(o, o + HD, Out(std::numeric_limits<float>::quiet_NaN()));
    } else {
      const int64_t base = rs[j] * S * LDK + h / (H / KVH) * HD;
      detail::decodeAttendHead<KVH, HD>(q + j * LD + h * HD, cache_k + base,
                                        cache_v + base, n, o);
    }
  }
}

/// Prefill: appends K and V of the rows of a full-sequence (causal) forward
/// pass to a layer's cache, row j of sequence s when pos[j] < lengths[s]
/// (prompts of different lengths share one padded pass). Rows of a sequence
/// come in ascending position, so the cache keeps position order; counts[s]
/// must be 0 on entry (an empty sequence) and ends as the number appended.
/// C: the cache's element type (float, or bf16). KS, VS: the row strides of
/// k and v, which hold floats or bf16.
template <int S, int D, int KS = D, int VS = D, typename TK, typename TV,
          typename C>
inline void cache_append(const TK *k, const TV *v, int64_t nseg,
                         const int64_t *seg, const int32_t *pos,
                         const int32_t *lengths, C *cache_k, C *cache_v,
                         int32_t *counts) {
#pragma omp parallel for if (nseg > 1)
  for (int64_t s = 0; s < nseg; ++s) {
    int32_t n = 0;
    for (int64_t j = seg[s];
         j < seg[s + 1] && modk_small::prefillAppends(pos, lengths, s, j);
         ++j, ++n)
      for (int d = 0; d < D; ++d)
        modk_small::prefillElement<S, D, KS, VS>(k, v, s, n, j, d, cache_k,
                                                 cache_v);
    counts[s] = n;
  }
}

} // namespace modk_cpu

#endif // MODC_TARGET_CPP_PRELUDE_CPUKERNELSDECODE_H
