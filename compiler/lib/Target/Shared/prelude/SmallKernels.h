//===- SmallKernels.h - The small kernels of both targets, once -*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// What the small kernels of both targets compute, defined once: the row
/// sets of dense layers and decode steps, the decisions and compaction
/// entries of the causal and decode-step selections, the prefill of the KV
/// cache, the split of a batch's tokens, RoPE's angles and the segment of a
/// row. Each is a function of one item (an element, a token, a sequence);
/// a kernel whose items are independent is a struct with `items()` and
/// `operator()(e)`. The CPU prelude (Cpp/prelude) loops over the items, the
/// CUDA prelude (Cuda/prelude) gives each item a thread; what stays with
/// each target is only the launch, and the scan or search that orders the
/// items of a selection (docs/compiler.md, docs/cuda.md).
///
/// Both emitters paste this header before their preludes. It compiles as
/// C++ (the CPU package, and the CUDA emulation of test/cuda_emu) and under
/// nvcc, where every function is `__host__ __device__`. It needs only the
/// standard <cmath> and <cstdint>.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_SMALL_KERNELS_INCLUDED
#define MODC_SMALL_KERNELS_INCLUDED

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MODC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MODC_HOST_DEVICE inline
#endif

namespace modk_small {

//===----------------------------------------------------------------------===//
// Segments and RoPE
//===----------------------------------------------------------------------===//

/// Segment of row j < seg[nseg]: the s with seg[s] <= j < seg[s + 1] (a
/// binary search; empty segments hold no row).
MODC_HOST_DEVICE int64_t segmentOf(const int64_t *seg, int64_t nseg,
                                   int64_t j) {
  int64_t lo = 0, hi = nseg; // seg[lo] <= j < seg[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (seg[mid] <= j)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/// RoPE's cos and sin of pair j < HD/2 at position p: the angle
/// p theta^(-2j/HD) in double, only cos and sin rounded, so long positions
/// keep full f32 accuracy (docs/model-format.md).
template <int HD>
MODC_HOST_DEVICE void ropeAngle(int32_t p, int j, float theta, float &c,
                                float &s) {
  const double a =
      static_cast<double>(p) * pow(static_cast<double>(theta), -2.0 * j / HD);
  c = static_cast<float>(cos(a));
  s = static_cast<float>(sin(a));
}

/// Entry e = p * HD/2 + j of a table of RoPE's angles at positions
/// 0 .. positions - 1: the cosine at table[p * HD + j * Step], the sine Gap
/// floats after it. The CPU's table (Step 1, Gap HD/2) holds a position's
/// cosines, then its sines; CUDA's (Step 2, Gap 1) its (cos, sin) pairs.
template <int HD, int Step, int Gap> struct RopeTableEntries {
  float *table;
  int32_t positions;
  float theta;
  MODC_HOST_DEVICE int64_t items() const {
    return int64_t(positions) * (HD / 2);
  }
  MODC_HOST_DEVICE void operator()(int64_t e) const {
    const int32_t p = int32_t(e / (HD / 2));
    const int j = int(e % (HD / 2));
    float *at = table + int64_t(p) * HD + j * Step;
    ropeAngle<HD>(p, j, theta, at[0], at[Gap]);
  }
};

//===----------------------------------------------------------------------===//
// Row sets
//===----------------------------------------------------------------------===//

/// Entry e of the row set of a dense layer, B sequences of S tokens: the
/// B * S positions pos[b * S + i] = i, then the B + 1 offsets seg[b] = b * S.
template <int S> struct IdentitySegments {
  int64_t B;
  int32_t *pos;
  int64_t *seg;
  MODC_HOST_DEVICE int64_t items() const { return B * S + B + 1; }
  MODC_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t rows = B * S;
    if (e < rows)
      pos[e] = int32_t(e % S);
    else
      seg[e - rows] = (e - rows) * S;
  }
};

/// Entry b <= B of the row set of a dense layer in a decode step. Every
/// sequence gets its row, active or not, so that buffers indexed by b stay
/// aligned with the rows: seg[b] = b, seg[B] = B, pos[b] = positions[b]. An
/// inactive sequence's position is not checked by the caller, so it is
/// clamped to [0, S) to keep RoPE and any position-indexed table in range.
template <int S> struct DecodeRows {
  const int32_t *positions;
  const uint8_t *active;
  int64_t B;
  int32_t *pos;
  int64_t *seg;
  MODC_HOST_DEVICE int64_t items() const { return B + 1; }
  MODC_HOST_DEVICE void operator()(int64_t b) const {
    seg[b] = b;
    if (b == B)
      return;
    int32_t p = positions[b];
    if (!active[b])
      p = p < 0 ? 0 : (p > S - 1 ? S - 1 : p);
    pos[b] = p;
  }
};

/// Element e = b * S + i of the split of a batch's tokens [B, S + 1] into
/// inputs[b, i] = tokens[b, i] and targets[b, i] = tokens[b, i + 1].
template <int S> struct SplitTokens {
  const int32_t *tokens;
  int64_t B;
  int32_t *inputs, *targets;
  MODC_HOST_DEVICE int64_t items() const { return B * S; }
  MODC_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t b = e / S, i = e % S;
    inputs[e] = tokens[b * (S + 1) + i];
    targets[e] = tokens[b * (S + 1) + i + 1];
  }
};

//===----------------------------------------------------------------------===//
// Causal and decode-step selection
//===----------------------------------------------------------------------===//

/// Whether a causal decision routes its token: logit > 0, so a NaN or a
/// zero of either sign is not routed.
MODC_HOST_DEVICE bool routes(float logit) { return logit > 0.0f; }

/// Token i of sequence b in a causal selection, whose compaction takes the
/// sequences in order: its decision into mask[b * S + i] and, routed, its
/// position i into pos[at], where `at` counts the routed tokens before it
/// (of this sequence and the earlier ones). Returns 1 if routed, else 0.
template <int S>
MODC_HOST_DEVICE int causalSelectToken(const float *logit, int64_t b, int i,
                                       int64_t at, int32_t *pos,
                                       int32_t *mask) {
  const bool routed = routes(logit[b * S + i]);
  mask[b * S + i] = routed ? 1 : 0;
  if (routed)
    pos[at] = i;
  return routed ? 1 : 0;
}

/// Whether sequence b routes in a decode step: it is active and its
/// decision (the router's score or the predictor's logit) routes it.
MODC_HOST_DEVICE bool decodeRoutes(const float *decision, const uint8_t *active,
                                   int64_t b) {
  return active[b] && routes(decision[b]);
}

/// Sequence b's entries of a decode step's selection, compacted in b order:
/// seg[b] = at, the routed sequences before b; mask[b]; and, routed,
/// pos[at] = positions[b].
MODC_HOST_DEVICE void decodeSelectEntry(int64_t b, int64_t at, bool routed,
                                        const int32_t *positions, int32_t *pos,
                                        int64_t *seg, int32_t *mask) {
  seg[b] = at;
  mask[b] = routed ? 1 : 0;
  if (routed)
    pos[at] = positions[b];
}

//===----------------------------------------------------------------------===//
// Prefill of the KV cache
//===----------------------------------------------------------------------===//

/// Whether the prefill appends row j of sequence s to a layer's cache: its
/// position is inside the sequence's prompt. A sequence's rows ascend in
/// position, so it appends its first rows up to the first that is not, and
/// the cache keeps position order.
MODC_HOST_DEVICE bool prefillAppends(const int32_t *pos, const int32_t *lengths,
                                     int64_t s, int64_t j) {
  return pos[j] < lengths[s];
}

/// Element d of the prefill's copy of row j into cache slot n of sequence
/// s: cache_k[s, n, d] = k[j, d] and cache_v[s, n, d] = v[j, d]. The caches
/// are [.., S, D] of C (float, or bf16: rounded); k's and v's rows are KS
/// and VS elements apart, of TK and TV (float, or bf16: widened exactly).
template <int S, int D, int KS, int VS, typename C, typename TK, typename TV>
MODC_HOST_DEVICE void prefillElement(const TK *k, const TV *v, int64_t s,
                                     int64_t n, int64_t j, int d, C *cache_k,
                                     C *cache_v) {
  const int64_t slot = (s * S + n) * D + d;
  cache_k[slot] = C(static_cast<float>(k[j * KS + d]));
  cache_v[slot] = C(static_cast<float>(v[j * VS + d]));
}

//===----------------------------------------------------------------------===//
// Mixture-of-Experts MLPs (docs/model-format.md section 7)
//===----------------------------------------------------------------------===//

/// The real experts' row sets that modk.moe_select writes: each one's
/// positions [B, C] and segment offsets [B + 1], compacted in sequence
/// order.
template <int E> struct ExpertRows {
  int32_t *pos[E];
  int64_t *seg[E];
};

/// Row r of an MoE layer's router logits z (W = E + N of them): the softmax
/// p into `probs`, and the choice argmax z (ties go to the lower index),
/// whose probability goes to `chosen`.
template <int W>
MODC_HOST_DEVICE int moeChooseRow(const float *z, float *probs, float *chosen) {
  int e = 0;
  float max = z[0];
  for (int c = 1; c < W; ++c)
    if (z[c] > max) {
      max = z[c];
      e = c;
    }
  float sum = 0.0f;
  for (int c = 0; c < W; ++c) {
    probs[c] = expf(z[c] - max);
    sum += probs[c];
  }
  const float inv = 1.0f / sum;
  for (int c = 0; c < W; ++c)
    probs[c] *= inv;
  *chosen = probs[e];
  return e;
}

/// One sequence's rows [first, first + n) of the rows T that reach an MoE
/// MLP, in order: each row's probabilities and choice, whether it is kept
/// (a real expert that has kept fewer than C of the sequence's earlier
/// rows: `before[e]` of earlier passes, a decode step's running counts, or
/// none where null, plus this pass's), its gate (p[e] if kept, else 0), and
/// counts[e], the rows expert e keeps in this pass. A sequence that does
/// not `keep` (an inactive one of a decode step) keeps no row.
template <int W, int E, int C>
MODC_HOST_DEVICE void
moeChooseSequence(const float *z, int64_t first, int64_t n, float *probs,
                  int32_t *choice, float *gate, const int32_t *before,
                  bool keep, int32_t *counts) {
  for (int e = 0; e < E; ++e)
    counts[e] = 0;
  for (int64_t r = first; r < first + n; ++r) {
    float chosen;
    const int e = moeChooseRow<W>(z + r * W, probs + r * W, &chosen);
    choice[r] = e;
    const bool kept = keep && e < E && (before ? before[e] : 0) + counts[e] < C;
    if (kept)
      ++counts[e];
    gate[r] = kept ? chosen : 0.0f;
  }
}

/// The causal prefill's decode state of sequence b (docs/model-format.md
/// section 7): counts[e], the rows of its prompt (positions below
/// `length`) that real expert e kept.
template <int E>
MODC_HOST_DEVICE void moeCountSequence(int64_t first, int64_t n,
                                       const int32_t *pos,
                                       const int32_t *choice, const float *gate,
                                       int32_t length, int32_t *counts) {
  for (int e = 0; e < E; ++e)
    counts[e] = 0;
  for (int64_t r = first; r < first + n; ++r)
    if (gate[r] > 0.0f && pos[r] < length)
      ++counts[choice[r]];
}

/// Sequence b's kept rows into their experts' row sets, in order, from
/// each expert's segment offset: a row's position is its index in T's
/// [B, RT] buffers relative to the sequence's first row there, b RT.
template <int E, int RT>
MODC_HOST_DEVICE void moeFillSequence(int64_t b, int64_t first, int64_t n,
                                      const int32_t *choice, const float *gate,
                                      ExpertRows<E> rows) {
  int64_t at[E]; // each expert's next row
  for (int e = 0; e < E; ++e)
    at[e] = rows.seg[e][b];
  for (int64_t r = first; r < first + n; ++r)
    if (gate[r] > 0.0f) {
      const int e = choice[r];
      rows.pos[e][at[e]++] = int32_t(r - b * RT);
    }
}

/// Sequence b's decisions at its S tokens: -1 where no row reaches the MLP,
/// else the choice e, plus W where a real expert dropped the row over
/// capacity.
template <int W, int E, int S>
MODC_HOST_DEVICE void
moeDecisionsSequence(int64_t b, int64_t first, int64_t n, const int32_t *pos,
                     const int32_t *choice, const float *gate,
                     int32_t *decisions) {
  for (int i = 0; i < S; ++i)
    decisions[b * S + i] = -1;
  for (int64_t r = first; r < first + n; ++r) {
    const int e = choice[r];
    const bool dropped = e < E && !(gate[r] > 0.0f);
    decisions[b * S + pos[r]] = dropped ? e + W : e;
  }
}

/// The balance loss over the `rows` rows of T (docs/model-format.md
/// section 7): count[c], the rows that chose c, and psum[c], the sum of
/// their p[c], in row order and in double, give L_bal = W sum_c frac_c
/// mean_p_c. Adds L_bal / n_moe into losses[3] and weight L_bal / n_moe
/// into losses[0], and writes coef[c], the gradient of the latter in each
/// row's p[c]: weight W frac_c / (rows n_moe).
template <int W>
MODC_HOST_DEVICE void moeBalanceLoss(const float *probs, const int32_t *choice,
                                     int64_t rows, float *losses, double weight,
                                     int64_t n_moe, float *coef) {
  double count[W], psum[W];
  for (int c = 0; c < W; ++c)
    count[c] = psum[c] = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    count[choice[r]] += 1.0;
    for (int c = 0; c < W; ++c)
      psum[c] += probs[r * W + c];
  }
  const double n = double(rows);
  double loss = 0.0;
  for (int c = 0; c < W; ++c)
    loss += (count[c] / n) * (psum[c] / n);
  loss *= W;
  losses[3] += float(loss / double(n_moe));
  losses[0] += float(weight * loss / double(n_moe));
  for (int c = 0; c < W; ++c)
    coef[c] = float(weight * W * count[c] / (n * n * double(n_moe)));
}

/// Row r's router-logit gradient: dp_c = [c = e] dgate + coef_c, then
/// dz = p (dp - <dp, p>), the softmax's transpose.
template <int W>
MODC_HOST_DEVICE void moeRouterGradRow(const float *probs, int e, float dgate,
                                       const float *coef, float *dz) {
  float dot = 0.0f;
  for (int c = 0; c < W; ++c)
    dot += ((c == e ? dgate : 0.0f) + coef[c]) * probs[c];
  for (int c = 0; c < W; ++c)
    dz[c] = probs[c] * ((c == e ? dgate : 0.0f) + coef[c] - dot);
}

} // namespace modk_small

#endif // MODC_SMALL_KERNELS_INCLUDED
