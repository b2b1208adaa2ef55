//===- CpuKernelsDecodeTest.cpp - Tests of the CPU decode kernels ---------===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Checks the modk_cpu decode-step kernels (CpuKernelsDecode.h) against fp64
/// references written here from docs/model-format.md sections 3-4, on random
/// normal inputs with fixed seeds:
///  - decode_attention stepped token by token through 40 positions, with a
///    random subset of tokens routed (only those appended, RoPE at original
///    positions on compacted rows), equals causal attention by position over
///    the routed set; several sequences of different lengths, inactive
///    sequences and a dense layer (every token) in the same steps;
///  - a large batch against a pre-filled cache (the parallel path, more keys
///    than one softmax block), prefill-style chunks of several rows, and the
///    overflow guard (NaN out, nothing appended, counts unchanged);
///  - decode_rows and decode_select: compaction, masks, inactive rows, a
///    decision of exactly +0 or -0 (not routed), NaN, r aliased as decision;
///  - a decode step's gather + RMSNorm and gated scatter, as modc generates
///    them (modk.rows, test/common/RowKernels.mlir): values, bit-exact
///    copies and untouched rows (memcmp), and the gather's bit-identity with
///    the forward form at S = 1.
///
//===----------------------------------------------------------------------===//

// The emitter pastes the three headers in this order; including them in
// sequence checks that the guards allow it.
// clang-format off
#include "CpuKernels.h"
#include "CpuKernelsTrain.h"
#include "CpuKernelsDecode.h"
// clang-format on

#include "RowKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

constexpr double kTol = 1e-5;
constexpr float kTheta = 10000.0f;

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

/// max |got - ref| / max |ref|; the reference must not be all zeros.
double relErr(const std::vector<float> &got, const std::vector<double> &ref) {
  EXPECT_EQ(got.size(), ref.size());
  double maxErr = 0.0, maxRef = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(double(got[i])))
      return INFINITY;
    maxErr = std::max(maxErr, std::fabs(double(got[i]) - ref[i]));
    maxRef = std::max(maxRef, std::fabs(ref[i]));
  }
  EXPECT_GT(maxRef, 0.0) << "degenerate reference";
  return maxErr / maxRef;
}

void rmsnormRef(const float *x, int D, const float *w, double eps,
                double *out) {
  double ss = 0.0;
  for (int d = 0; d < D; ++d)
    ss += double(x[d]) * x[d];
  const double inv = 1.0 / std::sqrt(ss / D + eps);
  for (int d = 0; d < D; ++d)
    out[d] = x[d] * inv * w[d];
}

/// fp64 rotate-half RoPE of one [H * HD] row at position p.
std::vector<double> ropeRef(const float *x, int H, int HD, int32_t p) {
  std::vector<double> y(size_t(H) * HD);
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < HD / 2; ++j) {
      const double a = double(p) * std::pow(double(kTheta), -2.0 * j / HD);
      const double x0 = x[h * HD + j], x1 = x[h * HD + j + HD / 2];
      y[h * HD + j] = x0 * std::cos(a) - x1 * std::sin(a);
      y[h * HD + j + HD / 2] = x1 * std::cos(a) + x0 * std::sin(a);
    }
  return y;
}

/// RoPE in place on `rows` rows of [H * HD] at positions pos: ropeRef
/// stored as f32 (the queries and keys decode_attention reads; RoPE itself
/// is generated and checked in CpuKernels.Rope).
void ropeInPlace(float *x, int H, int HD, int64_t rows, const int32_t *pos) {
  for (int64_t i = 0; i < rows; ++i) {
    float *row = x + i * H * HD;
    const std::vector<double> y = ropeRef(row, H, HD, pos[i]);
    for (size_t e = 0; e < y.size(); ++e)
      row[e] = float(y[e]);
  }
}

/// fp64 attention of one query row (all heads) over keys/values [n, H * HD].
std::vector<double> attendRef(const std::vector<double> &q,
                              const std::vector<std::vector<double>> &ks,
                              const std::vector<std::vector<double>> &vs, int H,
                              int HD) {
  std::vector<double> out(size_t(H) * HD, 0.0);
  const size_t n = ks.size();
  for (int h = 0; h < H; ++h) {
    std::vector<double> s(n);
    double mx = -INFINITY;
    for (size_t t = 0; t < n; ++t) {
      double acc = 0.0;
      for (int d = 0; d < HD; ++d)
        acc += q[h * HD + d] * ks[t][h * HD + d];
      s[t] = acc / std::sqrt(double(HD));
      mx = std::max(mx, s[t]);
    }
    double l = 0.0;
    for (size_t t = 0; t < n; ++t)
      l += (s[t] = std::exp(s[t] - mx));
    for (size_t t = 0; t < n; ++t)
      for (int d = 0; d < HD; ++d)
        out[h * HD + d] += s[t] / l * vs[t][h * HD + d];
  }
  return out;
}

std::vector<double> toD(const float *p, size_t n) {
  return std::vector<double>(p, p + n);
}

//===----------------------------------------------------------------------===//
// Row sets and routing
//===----------------------------------------------------------------------===//

TEST(CpuKernelsDecode, DecodeRows) {
  constexpr int S = 32;
  const int64_t B = 6;
  const std::vector<int32_t> positions = {0, 31, 7, -3, 999, 12};
  const std::vector<uint8_t> active = {1, 1, 1, 0, 0, 0};
  std::vector<int32_t> pos(B, -77);
  std::vector<int64_t> seg(B + 1, -77);
  modk_cpu::decode_rows<S>(positions.data(), active.data(), B, pos.data(),
                           seg.data());
  const std::vector<int32_t> wantPos = {0, 31, 7, 0, 31, 12};
  for (int64_t b = 0; b <= B; ++b)
    EXPECT_EQ(seg[b], b);
  EXPECT_EQ(pos, wantPos);
}

TEST(CpuKernelsDecode, DecodeRouteWithRouterAsDecision) {
  constexpr int D = 40; // not a multiple of the vector width
  const int64_t B = 9;
  auto x = randn(B * D, 1), w = randn(D, 2);
  // Sequence 4's residual is all zeros: r is exactly 0, which is not > 0.
  std::fill(x.begin() + 4 * D, x.begin() + 5 * D, 0.0f);
  // Inactive sequence 2 has r = |w|^2 > 0 (still not routed); active
  // sequence 7 has r = -|w|^2 < 0.
  for (int d = 0; d < D; ++d) {
    x[2 * D + d] = w[d];
    x[7 * D + d] = -w[d];
  }
  const std::vector<uint8_t> active = {1, 1, 0, 1, 1, 1, 0, 1, 1};
  std::vector<int32_t> positions(B);
  for (int64_t b = 0; b < B; ++b)
    positions[b] = int32_t(3 * b + 1);

  std::vector<float> r(B, -5.0f);
  std::vector<int32_t> pos(B, -1), mask(B, -1);
  std::vector<int64_t> seg(B + 1, -1);
  // The step's router as modc generates it (gen_cpu::router1x40: one sum a
  // row over every sequence's token), then the selection with r as its own
  // decision (the aux_loss router).
  static_assert(D == 40, "gen_cpu::router1x40");
  gen_cpu::router1x40(B, x.data(), w.data(), r.data());
  modk_cpu::decode_select(B, r.data(), positions.data(), active.data(),
                          pos.data(), seg.data(), mask.data());

  std::vector<double> refR(B);
  for (int64_t b = 0; b < B; ++b) {
    double acc = 0.0;
    for (int d = 0; d < D; ++d)
      acc += double(w[d]) * x[b * D + d];
    refR[b] = acc;
  }
  EXPECT_LE(relErr(r, refR), kTol);
  EXPECT_EQ(r[4], 0.0f);

  // Bit-identical to the router with the RMSNorm statistics riding on it
  // (modk-fuse-router-norm, the default in both entries): a decode step
  // makes the forward pass's decisions.
  std::vector<float> rFused(B, -1.0f), squares(B);
  gen_cpu::routerNorm1x40(B, x.data(), w.data(), rFused.data(), squares.data());
  EXPECT_EQ(0, std::memcmp(r.data(), rFused.data(), sizeof(float) * B));

  int64_t c = 0, nActiveSkipped = 0, nInactivePositive = 0;
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(seg[b], c) << b;
    const bool routed = active[b] && r[b] > 0.0f;
    EXPECT_EQ(mask[b], routed ? 1 : 0) << b;
    if (routed)
      EXPECT_EQ(pos[c++], positions[b]);
    nActiveSkipped += active[b] && !routed;
    nInactivePositive += !active[b] && r[b] > 0.0f;
  }
  EXPECT_EQ(seg[B], c);
  EXPECT_EQ(mask[4], 0) << "r == 0 exactly must not route";
  EXPECT_EQ(mask[2], 0) << "inactive sequences are never routed";
  EXPECT_EQ(mask[7], 0);
  EXPECT_GT(c, 0);
  EXPECT_GT(nActiveSkipped, 1);
  EXPECT_GT(nInactivePositive, 0);
}

TEST(CpuKernelsDecode, DecodeRouteWithPredictorLogits) {
  const int64_t B = 10;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logit = {1.5f, 0.0f,   -0.0f, -2.0f, nan,
                                    3.0f, 1e-30f, inf,   0.25f, -inf};
  const std::vector<uint8_t> active = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1};
  const std::vector<int32_t> positions = {5, 0, 9, 2, 4, 7, 1, 6, 3, 8};
  std::vector<int32_t> pos(B, -1), mask(B, -1);
  std::vector<int64_t> seg(B + 1, -1);
  modk_cpu::decode_select(B, logit.data(), positions.data(), active.data(),
                          pos.data(), seg.data(), mask.data());
  const std::vector<int32_t> wantMask = {1, 0, 0, 0, 0, 0, 1, 1, 1, 0};
  const std::vector<int64_t> wantSeg = {0, 1, 1, 1, 1, 1, 1, 2, 3, 4, 4};
  EXPECT_EQ(mask, wantMask);
  EXPECT_EQ(seg, wantSeg);
  EXPECT_EQ(std::vector<int32_t>(pos.begin(), pos.begin() + 4),
            (std::vector<int32_t>{5, 1, 6, 3}));

  // Nothing active: no rows.
  const std::vector<uint8_t> none(B, 0);
  modk_cpu::decode_select(B, logit.data(), positions.data(), none.data(),
                          pos.data(), seg.data(), mask.data());
  for (int64_t b = 0; b <= B; ++b)
    EXPECT_EQ(seg[b], 0);
  for (int64_t b = 0; b < B; ++b)
    EXPECT_EQ(mask[b], 0);
}

//===----------------------------------------------------------------------===//
// Gather and scatter
//===----------------------------------------------------------------------===//

// A decode step's gather + RMSNorm (gen_cpu::decodeGatherRmsnorm48, eps
// 1e-5): row j of sequence b reads the stream's row b.
TEST(CpuKernelsDecode, GatherRmsNorm) {
  constexpr int D = 48;
  static_assert(D == 48, "gen_cpu::decodeGatherRmsnorm48");
  const int64_t B = 7;
  auto x = randn(B * D, 5, 2.0f), w = randn(D, 6);
  const std::vector<int64_t> seg = {0, 1, 1, 2, 3, 3, 3, 4};
  const int64_t rows = seg[B];
  std::vector<float> xs((rows + 1) * D, 42.0f), n((rows + 1) * D, 42.0f);
  gen_cpu::decodeGatherRmsnorm48(rows, seg.data(), B, x.data(), w.data(),
                                 xs.data(), n.data());
  std::vector<double> ref(rows * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = seg[b]; j < seg[b + 1]; ++j) {
      EXPECT_EQ(0, std::memcmp(&xs[j * D], &x[b * D], sizeof(float) * D))
          << "row " << j;
      rmsnormRef(&x[b * D], D, w.data(), 1e-5, &ref[j * D]);
    }
  EXPECT_LE(relErr(std::vector<float>(n.begin(), n.begin() + rows * D), ref),
            kTol);
  for (int d = 0; d < D; ++d) {
    ASSERT_EQ(xs[rows * D + d], 42.0f) << "wrote past the rows";
    ASSERT_EQ(n[rows * D + d], 42.0f) << "wrote past the rows";
  }

  // Bit-identical to the forward form (positions) with S = 1, which modc
  // generates from the same region.
  std::vector<int32_t> pos0(rows, 0);
  std::vector<float> xs1(rows * D), n1(rows * D);
  gen_cpu::gatherRmsnorm1x48(rows, seg.data(), B, pos0.data(), x.data(),
                             w.data(), xs1.data(), n1.data());
  EXPECT_EQ(0, std::memcmp(xs.data(), xs1.data(), sizeof(float) * rows * D));
  EXPECT_EQ(0, std::memcmp(n.data(), n1.data(), sizeof(float) * rows * D));
}

/// A decode step's gated scatter (gen_cpu::decodeScatter*36): x[b] +=
/// g(r[b]) * (a[j] + m[j]) for the one row j of sequence b, in place.
template <int G> void checkGateScaleScatter(unsigned seed) {
  constexpr int D = 36;
  constexpr auto scatter = G == GateLinear    ? gen_cpu::decodeScatterLinear36
                           : G == GateSigmoid ? gen_cpu::decodeScatterSigmoid36
                                              : gen_cpu::decodeScatterOne36;
  const int64_t B = 8;
  const std::vector<int32_t> routed = {0, 1, 1, 0, 1, 0, 0, 1};
  std::vector<int64_t> seg(B + 1, 0);
  for (int64_t b = 0; b < B; ++b)
    seg[b + 1] = seg[b] + routed[b];
  const int64_t rows = seg[B];
  auto x = randn(B * D, seed), r = randn(B, seed + 1);
  auto a = randn(rows * D, seed + 2), m = randn(rows * D, seed + 3);
  auto y = x;
  scatter(rows, seg.data(), B, a.data(), m.data(), r.data(), y.data(),
          y.data());
  std::vector<float> got;
  std::vector<double> ref;
  for (int64_t b = 0; b < B; ++b) {
    if (!routed[b]) {
      EXPECT_EQ(0, std::memcmp(&y[b * D], &x[b * D], sizeof(float) * D))
          << "unrouted sequence " << b << " changed";
      continue;
    }
    const int64_t j = seg[b];
    double g = 1.0;
    if (G == GateLinear)
      g = r[b];
    else if (G == GateSigmoid)
      g = 1.0 / (1.0 + std::exp(-double(r[b])));
    for (int d = 0; d < D; ++d) {
      got.push_back(y[b * D + d]);
      ref.push_back(x[b * D + d] + g * (double(a[j * D + d]) + m[j * D + d]));
    }
  }
  EXPECT_LE(relErr(got, ref), kTol);
  // No comparison with a forward form at S = 1, as the gather has: a
  // [B, 1, D] stream always gets the decode form (modk-generalize), and both
  // forms are generated from one region.
}

TEST(CpuKernelsDecode, GateScaleScatter) {
  checkGateScaleScatter<GateLinear>(10);
  checkGateScaleScatter<GateSigmoid>(20);
  checkGateScaleScatter<GateOne>(30);
}

//===----------------------------------------------------------------------===//
// Attention against the KV cache
//===----------------------------------------------------------------------===//

/// Steps B sequences token by token through T = 40 positions, as a model
/// with one dense and one routed layer would. Sequence b is active at step
/// t iff t < len[b]; its token is routed with probability 1/2 (via
/// decode_select on predictor logits). The routed layer's cache receives only
/// routed tokens; the dense layer's cache every active token. Every output
/// row is compared with fp64 causal attention by position over the tokens
/// its layer holds, with fp64 RoPE of the raw q and k.
template <int S, int H, int HD> void checkSteppedDecode(unsigned seed) {
  constexpr int T = 40;
  constexpr int64_t LD = int64_t(H) * HD;
  static_assert(S >= T, "cache must hold the whole sequence");
  const std::vector<int> len = {T, 23, 31, 0, 1};
  const int64_t B = int64_t(len.size());
  // Raw (pre-RoPE) q, k, v of token (b, t): [B, T, LD].
  auto qRaw = randn(B * T * LD, seed), kRaw = randn(B * T * LD, seed + 1),
       vRaw = randn(B * T * LD, seed + 2);
  std::mt19937 rng(seed + 3);
  std::vector<uint8_t> isRouted(B * T);
  for (auto &v : isRouted)
    v = uint8_t(rng() & 1);
  isRouted[0 * T + 0] = 0; // sequence 0's first routed token is not at 0

  const float sentinel = 7.0f;
  std::vector<float> ckR(B * S * LD, sentinel), cvR(B * S * LD, sentinel);
  std::vector<float> ckD(B * S * LD, sentinel), cvD(B * S * LD, sentinel);
  std::vector<int32_t> cntR(B, 0), cntD(B, 0);
  // Outputs per token (NaN = not produced).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> outR(B * T * LD, nan), outD(B * T * LD, nan);

  std::vector<int32_t> positions(B), pos(B), mask(B);
  std::vector<uint8_t> active(B);
  std::vector<int64_t> seg(B + 1);
  std::vector<float> logit(B);
  std::vector<float> q(B * LD), k(B * LD), v(B * LD), out(B * LD);
  for (int t = 0; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      positions[b] = t;
      active[b] = t < len[b];
      logit[b] = isRouted[b * T + t] ? 0.5f + float(b) : -1.0f;
    }

    // Dense layer: every sequence has its row.
    modk_cpu::decode_rows<S>(positions.data(), active.data(), B, pos.data(),
                             seg.data());
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(&q[b * LD], &qRaw[(b * T + t) * LD], sizeof(float) * LD);
      std::memcpy(&k[b * LD], &kRaw[(b * T + t) * LD], sizeof(float) * LD);
      std::memcpy(&v[b * LD], &vRaw[(b * T + t) * LD], sizeof(float) * LD);
    }
    ropeInPlace(q.data(), H, HD, B, pos.data());
    ropeInPlace(k.data(), H, HD, B, pos.data());
    std::fill(out.begin(), out.end(), 123.0f);
    const auto cntDBefore = cntD;
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        ckD.data(), cvD.data(), cntD.data(), out.data());
    for (int64_t b = 0; b < B; ++b) {
      if (!active[b]) {
        EXPECT_EQ(cntD[b], cntDBefore[b]) << "inactive sequence appended";
        for (int64_t d = 0; d < LD; ++d)
          ASSERT_EQ(out[b * LD + d], 0.0f) << "inactive row not zeroed";
        continue;
      }
      EXPECT_EQ(cntD[b], cntDBefore[b] + 1);
      std::memcpy(&outD[(b * T + t) * LD], &out[b * LD], sizeof(float) * LD);
    }

    // Routed layer: rows only for routed sequences, compacted.
    modk_cpu::decode_select(B, logit.data(), positions.data(), active.data(),
                            pos.data(), seg.data(), mask.data());
    for (int64_t b = 0; b < B; ++b) {
      ASSERT_EQ(mask[b], int(active[b] && isRouted[b * T + t]));
      for (int64_t j = seg[b]; j < seg[b + 1]; ++j) {
        std::memcpy(&q[j * LD], &qRaw[(b * T + t) * LD], sizeof(float) * LD);
        std::memcpy(&k[j * LD], &kRaw[(b * T + t) * LD], sizeof(float) * LD);
        std::memcpy(&v[j * LD], &vRaw[(b * T + t) * LD], sizeof(float) * LD);
      }
    }
    const int64_t rows = seg[B];
    ropeInPlace(q.data(), H, HD, rows, pos.data());
    ropeInPlace(k.data(), H, HD, rows, pos.data());
    const auto cntRBefore = cntR;
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        ckR.data(), cvR.data(), cntR.data(), out.data());
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_EQ(cntR[b], cntRBefore[b] + (seg[b + 1] - seg[b]));
      for (int64_t j = seg[b]; j < seg[b + 1]; ++j)
        std::memcpy(&outR[(b * T + t) * LD], &out[j * LD], sizeof(float) * LD);
    }
  }

  // References and final cache state.
  std::vector<float> got;
  std::vector<double> ref;
  for (int layer = 0; layer < 2; ++layer) {
    const bool dense = layer == 0;
    const auto &outL = dense ? outD : outR;
    const auto &cnt = dense ? cntD : cntR;
    const auto &ck = dense ? ckD : ckR;
    const auto &cv = dense ? cvD : cvR;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<std::vector<double>> ks, vs;
      for (int t = 0; t < len[b]; ++t) {
        if (!dense && !isRouted[b * T + t])
          continue;
        ks.push_back(ropeRef(&kRaw[(b * T + t) * LD], H, HD, t));
        vs.push_back(toD(&vRaw[(b * T + t) * LD], LD));
        const auto qr = ropeRef(&qRaw[(b * T + t) * LD], H, HD, t);
        const auto o = attendRef(qr, ks, vs, H, HD);
        got.insert(got.end(), &outL[(b * T + t) * LD],
                   &outL[(b * T + t) * LD] + LD);
        ref.insert(ref.end(), o.begin(), o.end());
      }
      EXPECT_EQ(cnt[b], int32_t(ks.size()))
          << "layer " << layer << " seq " << b;
      // The cache holds exactly the held tokens' v; the rest is untouched.
      for (size_t i = 0; i < vs.size(); ++i)
        for (int64_t d = 0; d < LD; ++d)
          ASSERT_EQ(double(cv[(b * S + int64_t(i)) * LD + d]), vs[i][d]);
      for (int64_t i = int64_t(ks.size()) * LD; i < S * LD; ++i) {
        ASSERT_EQ(ck[b * S * LD + i], sentinel) << "wrote past counts";
        ASSERT_EQ(cv[b * S * LD + i], sentinel) << "wrote past counts";
      }
    }
  }
  ASSERT_FALSE(ref.empty());
  EXPECT_LE(relErr(got, ref), kTol);
}

TEST(CpuKernelsDecode, SteppedRoutedDecodeEqualsCausalAttention) {
  checkSteppedDecode<40, 2, 16>(100); // cache exactly full at the end
  checkSteppedDecode<48, 3, 12>(200); // head dim not a vector multiple
  checkSteppedDecode<64, 1, 64>(300);
}

/// One step of a large batch against a pre-filled cache: counts spread over
/// [0, S) so that the (row, head) loop runs in parallel and long rows span
/// several softmax blocks. Slots at or past counts hold NaN, so reading one
/// would show. Covers inactive rows and a full cache (overflow).
TEST(CpuKernelsDecode, LargeBatchAgainstPrefilledCache) {
  constexpr int S = 200, H = 4, HD = 32;
  constexpr int64_t LD = int64_t(H) * HD;
  const int64_t B = 24;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto ck = randn(B * S * LD, 400), cv = randn(B * S * LD, 401);
  auto q = randn(B * LD, 402), k = randn(B * LD, 403), v = randn(B * LD, 404);
  std::mt19937 rng(405);
  std::vector<int32_t> counts(B), positions(B);
  std::vector<uint8_t> active(B);
  for (int64_t b = 0; b < B; ++b) {
    counts[b] = int32_t(rng() % S);
    active[b] = (b % 5) != 3;
  }
  counts[0] = 0;     // first token
  counts[1] = S - 1; // fills the cache exactly
  counts[2] = S;     // full: refused
  counts[3] = 150;   // inactive (b % 5 == 3)
  for (int64_t b = 0; b < B; ++b) {
    positions[b] = counts[b];
    for (int64_t i = int64_t(counts[b]) * LD; i < S * LD; ++i)
      ck[b * S * LD + i] = cv[b * S * LD + i] = nan;
  }
  std::vector<int32_t> pos(B);
  std::vector<int64_t> seg(B + 1);
  modk_cpu::decode_rows<S>(positions.data(), active.data(), B, pos.data(),
                           seg.data());
  const auto ck0 = ck, cv0 = cv;
  const auto counts0 = counts;
  std::vector<float> out(B * LD, 123.0f);
  modk_cpu::decode_attention<S, H, HD>(
      q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
      ck.data(), cv.data(), counts.data(), out.data());

  std::vector<float> got;
  std::vector<double> ref;
  for (int64_t b = 0; b < B; ++b) {
    const size_t off = size_t(b) * S * LD, n = size_t(S) * LD;
    if (!active[b] || counts0[b] >= S) {
      EXPECT_EQ(counts[b], counts0[b]) << b;
      EXPECT_EQ(0, std::memcmp(&ck[off], &ck0[off], n * sizeof(float))) << b;
      EXPECT_EQ(0, std::memcmp(&cv[off], &cv0[off], n * sizeof(float))) << b;
      for (int64_t d = 0; d < LD; ++d) {
        if (!active[b])
          ASSERT_EQ(out[b * LD + d], 0.0f) << b;
        else
          ASSERT_TRUE(std::isnan(out[b * LD + d])) << b;
      }
      continue;
    }
    EXPECT_EQ(counts[b], counts0[b] + 1) << b;
    const int64_t c = counts0[b];
    EXPECT_EQ(0, std::memcmp(&ck[off + c * LD], &k[b * LD], LD * 4)) << b;
    EXPECT_EQ(0, std::memcmp(&cv[off + c * LD], &v[b * LD], LD * 4)) << b;
    std::vector<std::vector<double>> ks, vs;
    for (int64_t t = 0; t <= c; ++t) {
      ks.push_back(toD(&ck[off + t * LD], LD));
      vs.push_back(toD(&cv[off + t * LD], LD));
    }
    const auto o = attendRef(toD(&q[b * LD], LD), ks, vs, H, HD);
    got.insert(got.end(), &out[b * LD], &out[b * LD] + LD);
    ref.insert(ref.end(), o.begin(), o.end());
  }
  EXPECT_LE(relErr(got, ref), kTol);
}

/// Several rows of one sequence in a call (a prefill chunk) append in row
/// order and each sees the rows before it: feeding 130 tokens in uneven
/// chunks equals full causal attention. Two sequences, chunked differently.
TEST(CpuKernelsDecode, ChunkedRowsEqualCausalAttention) {
  constexpr int S = 140, H = 2, HD = 8;
  constexpr int64_t LD = int64_t(H) * HD;
  constexpr int T = 130;
  const int64_t B = 2;
  auto qAll = randn(B * T * LD, 500), kAll = randn(B * T * LD, 501),
       vAll = randn(B * T * LD, 502);
  const std::vector<std::vector<int>> chunks = {{1, 63, 2, 0, 64},
                                                {0, 70, 1, 1, 58}};
  std::vector<float> ck(B * S * LD), cv(B * S * LD);
  std::vector<int32_t> counts(B, 0);
  std::vector<float> outAll(B * T * LD);
  const std::vector<uint8_t> active(B, 1);
  int done[2] = {0, 0};
  for (size_t step = 0; step < chunks[0].size(); ++step) {
    std::vector<int64_t> seg(B + 1, 0);
    for (int64_t b = 0; b < B; ++b)
      seg[b + 1] = seg[b] + chunks[b][step];
    const int64_t rows = seg[B];
    std::vector<float> q(rows * LD + 1), k(rows * LD + 1), v(rows * LD + 1),
        out(rows * LD + 1);
    std::vector<int32_t> pos(rows + 1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = seg[b]; j < seg[b + 1]; ++j) {
        const int64_t t = done[b] + (j - seg[b]);
        pos[j] = int32_t(t);
        std::memcpy(&q[j * LD], &qAll[(b * T + t) * LD], LD * 4);
        std::memcpy(&k[j * LD], &kAll[(b * T + t) * LD], LD * 4);
        std::memcpy(&v[j * LD], &vAll[(b * T + t) * LD], LD * 4);
      }
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        ck.data(), cv.data(), counts.data(), out.data());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = seg[b]; j < seg[b + 1]; ++j)
        std::memcpy(&outAll[(b * T + pos[j]) * LD], &out[j * LD], LD * 4);
      done[b] += chunks[b][step];
      EXPECT_EQ(counts[b], done[b]);
    }
  }
  std::vector<double> ref(B * T * LD);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<double>> ks, vs;
    for (int t = 0; t < T; ++t) {
      ks.push_back(toD(&kAll[(b * T + t) * LD], LD));
      vs.push_back(toD(&vAll[(b * T + t) * LD], LD));
      const auto o = attendRef(toD(&qAll[(b * T + t) * LD], LD), ks, vs, H, HD);
      std::copy(o.begin(), o.end(), &ref[(b * T + t) * LD]);
    }
  }
  EXPECT_LE(relErr(outAll, ref), kTol);
}

/// A causal prefill fills the cache from K and V read as columns of a
/// stacked product (modk-fuse-horizontal, docs/compiler.md): row j of
/// sequence s goes to slot n of s while pos[j] < lengths[s], read by the
/// row strides KS and VS; the other columns never reach the cache.
TEST(CpuKernelsDecode, CacheAppendReadsColumnWindows) {
  constexpr int S = 12, D = 16, KS = 3 * D, VS = 2 * D + 5, VOff = 3;
  const std::vector<int64_t> seg = {0, 5, 5, 12};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> lengths = {3, 0, 7};
  const int64_t B = 3, rows = seg[B];
  auto qkv = randn(rows * KS, 600), vs = randn(rows * VS, 601);
  const float *k = qkv.data() + D, *v = vs.data() + VOff;
  std::vector<float> ck(B * S * D, NAN), cv(B * S * D, NAN);
  std::vector<int32_t> counts(B, 0);
  modk_cpu::cache_append<S, D, KS, VS>(k, v, B, seg.data(), pos.data(),
                                       lengths.data(), ck.data(), cv.data(),
                                       counts.data());
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(counts[b], lengths[b]) << b;
    for (int32_t t = 0; t < lengths[b]; ++t) {
      const int64_t j = seg[b] + t;
      EXPECT_EQ(0, std::memcmp(&ck[(b * S + t) * D], k + j * KS, D * 4)) << j;
      EXPECT_EQ(0, std::memcmp(&cv[(b * S + t) * D], v + j * VS, D * 4)) << j;
    }
    for (int32_t t = lengths[b]; t < S; ++t) // nothing past the prompt
      EXPECT_TRUE(std::isnan(ck[(b * S + t) * D])) << b << " " << t;
  }
}

/// The overflow guard: a full cache refuses the token (NaN out, nothing
/// written, count unchanged), also part-way through a chunk; negative counts
/// are refused the same way.
TEST(CpuKernelsDecode, OverflowIsRefused) {
  constexpr int S = 8, H = 1, HD = 4;
  constexpr int64_t LD = H * HD;
  const int64_t B = 4;
  auto ck = randn(B * S * LD, 600), cv = randn(B * S * LD, 601);
  const auto ck0 = ck, cv0 = cv;
  // Sequence 0 full, 1 with room, 2 one slot left but two rows, 3 corrupt.
  std::vector<int32_t> counts = {S, 3, S - 1, -1};
  const std::vector<uint8_t> active(B, 1);
  const std::vector<int64_t> seg = {0, 1, 2, 4, 5};
  const int64_t rows = seg[B];
  auto q = randn(rows * LD, 602), k = randn(rows * LD, 603),
       v = randn(rows * LD, 604);
  const std::vector<int32_t> pos = {S, 3, S - 1, S, 0};
  std::vector<float> out(rows * LD, 123.0f);
  modk_cpu::decode_attention<S, H, HD>(
      q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
      ck.data(), cv.data(), counts.data(), out.data());
  EXPECT_EQ(counts, (std::vector<int32_t>{S, 4, S, -1}));
  auto rowIsNaN = [&](int64_t j) {
    for (int64_t d = 0; d < LD; ++d)
      if (!std::isnan(out[j * LD + d]))
        return false;
    return true;
  };
  auto rowIsFinite = [&](int64_t j) {
    for (int64_t d = 0; d < LD; ++d)
      if (!std::isfinite(out[j * LD + d]))
        return false;
    return true;
  };
  EXPECT_TRUE(rowIsNaN(0));
  EXPECT_TRUE(rowIsFinite(1));
  EXPECT_TRUE(rowIsFinite(2)) << "the last free slot is still used";
  EXPECT_TRUE(rowIsNaN(3)) << "the row after it overflows";
  EXPECT_TRUE(rowIsNaN(4));
  // Only the two accepted rows were written.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t) {
      const bool written = (b == 1 && t == 3) || (b == 2 && t == S - 1);
      const size_t o = size_t((b * S + t) * LD);
      const float *wantK = written ? &k[seg[b] * LD] : &ck0[o];
      const float *wantV = written ? &v[seg[b] * LD] : &cv0[o];
      EXPECT_EQ(0, std::memcmp(&ck[o], wantK, LD * 4)) << b << " " << t;
      EXPECT_EQ(0, std::memcmp(&cv[o], wantV, LD * 4)) << b << " " << t;
    }
}

} // namespace

/// Grouped-query attention in a decode step (docs/model-format.md sections 3
/// and 4): the cache holds KVH heads a token, and each step's output is, bit
/// for bit, that of multi-head attention over a cache of the key/value heads
/// repeated for their groups (query head h reads head h / (H / KVH)).
TEST(CpuKernelsDecode, GroupedQueryAttention) {
  constexpr int S = 20, H = 4, KVH = 2, HD = 8, G = H / KVH;
  constexpr int64_t B = 3, D = H * HD, DK = KVH * HD;
  std::vector<float> ck(B * S * DK, NAN), cv(B * S * DK, NAN);
  std::vector<float> ckr(B * S * D, NAN), cvr(B * S * D, NAN);
  std::vector<int32_t> cnt(B, 0), cntr(B, 0), positions(B);
  std::vector<uint8_t> active = {1, 0, 1};
  std::vector<int32_t> pos(B);
  std::vector<int64_t> seg(B + 1);
  for (int t = 0; t < 9; ++t) {
    for (int64_t b = 0; b < B; ++b)
      positions[b] = t;
    active[1] = t % 3 == 0; // sequence 1 pauses
    modk_cpu::decode_rows<S>(positions.data(), active.data(), B, pos.data(),
                             seg.data());
    auto q = randn(B * D, 300 + t), k = randn(B * DK, 400 + t),
         v = randn(B * DK, 500 + t);
    std::vector<float> kr(B * D), vr(B * D);
    for (int64_t j = 0; j < B; ++j)
      for (int h = 0; h < H; ++h)
        for (int c = 0; c < HD; ++c) {
          kr[j * D + h * HD + c] = k[j * DK + h / G * HD + c];
          vr[j * D + h * HD + c] = v[j * DK + h / G * HD + c];
        }
    std::vector<float> out(B * D, NAN), outr(B * D, NAN);
    modk_cpu::decode_attention<S, H, HD, KVH>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        ck.data(), cv.data(), cnt.data(), out.data());
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), kr.data(), vr.data(), B, seg.data(), pos.data(),
        active.data(), ckr.data(), cvr.data(), cntr.data(), outr.data());
    ASSERT_EQ(cnt, cntr);
    ASSERT_EQ(0, std::memcmp(out.data(), outr.data(), sizeof(float) * B * D))
        << "step " << t;
  }
  // The cache holds each token's KVH heads once.
  for (int64_t b = 0; b < B; ++b)
    for (int32_t i = 0; i < cnt[b]; ++i)
      for (int h = 0; h < H; ++h)
        for (int c = 0; c < HD; ++c) {
          ASSERT_EQ(ck[(b * S + i) * DK + h / G * HD + c],
                    ckr[(b * S + i) * D + h * HD + c]);
          ASSERT_EQ(cv[(b * S + i) * DK + h / G * HD + c],
                    cvr[(b * S + i) * D + h * HD + c]);
        }
}
