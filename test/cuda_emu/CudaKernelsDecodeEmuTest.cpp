//===- CudaKernelsDecodeEmuTest.cpp - CUDA decode kernels vs the CPU ------===//
//
// The decode-step kernels of CudaKernelsDecode.cuh, run through the CPU
// emulation, against their CPU twins of CpuKernelsDecode.h on the same random
// inputs: routing decisions, positions, segments, counts and caches must be
// identical, floats within a relative error of 1e-5. A decode step's gather +
// RMSNorm and gated scatter are the kernels modc generates (RowKernels.h),
// CUDA against CPU.
//
//===----------------------------------------------------------------------===//

// The CPU prelude first: the emulation's macros (__shared__, __device__, ...)
// must not reach it.
#include "CpuKernels.h"
#include "CpuKernelsDecode.h"

#include "CudaCommon.cuh"
#include "CudaKernels.cuh" // the generated row kernels' launch constants
#include "CudaKernelsDecode.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "EmuTestData.h"
#define MODC_ROW_KERNELS_CUDA 1
#include "RowKernels.h"

namespace {
using namespace modc_emu_test;


std::vector<uint8_t> randomActive(size_t n, uint32_t seed, double pActive) {
  std::mt19937 gen(seed);
  std::bernoulli_distribution dist(pActive);
  std::vector<uint8_t> v(n);
  for (uint8_t &a : v)
    a = dist(gen) ? 1 : 0;
  return v;
}

/// |got - want| <= 1e-5 * scale elementwise, where scale is the largest
/// magnitude of `want` over each group of `group` values (a head's or a row's
/// output vector), at least 1e-30. NaNs must match.
void expectClose(const std::vector<float> &got, const std::vector<float> &want,
                 size_t count, size_t group, const std::string &what) {
  ASSERT_GE(got.size(), count);
  ASSERT_GE(want.size(), count);
  int reported = 0;
  for (size_t g0 = 0; g0 < count; g0 += group) {
    float scale = 1e-30f;
    for (size_t i = g0; i < g0 + group && i < count; ++i)
      if (!std::isnan(want[i]))
        scale = std::max(scale, std::fabs(want[i]));
    for (size_t i = g0; i < g0 + group && i < count; ++i) {
      bool ok;
      if (std::isnan(want[i]))
        ok = std::isnan(got[i]);
      else
        ok = std::fabs(got[i] - want[i]) <= 1e-5f * scale;
      if (!ok && reported++ < 8)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                      << want[i] << " (scale " << scale << ")";
    }
  }
}

template <typename T>
void expectEqualPrefix(const std::vector<T> &got, const std::vector<T> &want,
                       size_t count, const std::string &what) {
  ASSERT_GE(got.size(), count);
  ASSERT_GE(want.size(), count);
  for (size_t i = 0; i < count; ++i)
    ASSERT_EQ(got[i], want[i]) << what << "[" << i << "]";
}

void expectBitEqual(const std::vector<float> &got,
                    const std::vector<float> &want, const std::string &what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
}

//===----------------------------------------------------------------------===//
// decode_rows
//===----------------------------------------------------------------------===//

TEST(CudaDecodeKernels, DecodeRowsMatchesCpu) {
  constexpr int S = 64;
  for (int64_t B : {int64_t(0), int64_t(1), int64_t(37), int64_t(300)}) {
    std::mt19937 gen(11 + B);
    std::uniform_int_distribution<int32_t> posDist(-20, S + 20);
    std::vector<int32_t> positions(B + 1);
    for (int32_t &p : positions)
      p = posDist(gen);
    std::vector<uint8_t> active = randomActive(B + 1, 12 + B, 0.6);
    std::vector<int32_t> posG(B + 1, -7), posC(B + 1, -7);
    std::vector<int64_t> segG(B + 1, -7), segC(B + 1, -7);
    modk_cuda::decode_rows<S>(positions.data(), active.data(), B, posG.data(),
                              segG.data(), nullptr);
    modk_cpu::decode_rows<S>(positions.data(), active.data(), B, posC.data(),
                             segC.data());
    expectEqualPrefix(posG, posC, B, "pos");
    expectEqualPrefix(segG, segC, B + 1, "seg");
  }
}

//===----------------------------------------------------------------------===//
// The router, decode_select and the gather + RMSNorm
//===----------------------------------------------------------------------===//

/// The generated router of a decode step (one sum a row over every
/// sequence's token) of width D, CUDA or CPU.
template <int D, bool Cuda> constexpr auto decodeRouter() {
  static_assert(D == 64 || D == 128 || D == 96 || D == 32,
                "no gen_*::decodeRouter of this width");
  if constexpr (Cuda)
    return D == 64    ? gen_cuda::decodeRouter64
           : D == 128 ? gen_cuda::decodeRouter128
           : D == 96  ? gen_cuda::decodeRouter96
                      : gen_cuda::decodeRouter32;
  else
    return D == 64    ? gen_cpu::decodeRouter64
           : D == 128 ? gen_cpu::decodeRouter128
           : D == 96  ? gen_cpu::decodeRouter96
                      : gen_cpu::decodeRouter32;
}

/// The generated gather + RMSNorm of a decode step (eps 1e-5) of width D,
/// CUDA or CPU.
template <int D, bool Cuda> constexpr auto decodeGather() {
  static_assert(D == 64 || D == 128 || D == 96 || D == 32,
                "no gen_*::decodeGatherRmsnorm of this width");
  if constexpr (Cuda)
    return D == 64    ? gen_cuda::decodeGatherRmsnorm64
           : D == 128 ? gen_cuda::decodeGatherRmsnorm128
           : D == 96  ? gen_cuda::decodeGatherRmsnorm96
                      : gen_cuda::decodeGatherRmsnorm32;
  else
    return D == 64    ? gen_cpu::decodeGatherRmsnorm64
           : D == 128 ? gen_cpu::decodeGatherRmsnorm128
           : D == 96  ? gen_cpu::decodeGatherRmsnorm96
                      : gen_cpu::decodeGatherRmsnorm32;
}

struct RouteResult {
  std::vector<float> r;
  std::vector<int32_t> pos, mask;
  std::vector<int64_t> seg;
  std::vector<float> gathered, normed;

  /// Every output one entry (or row) past B, filled with a value no kernel
  /// writes, so that a write past the rows shows.
  static RouteResult poisoned(int64_t B, int64_t D) {
    RouteResult o;
    o.r.assign(B + 1, -3.0f);
    o.pos.assign(B + 1, -9);
    o.mask.assign(B + 1, -9);
    o.seg.assign(B + 1, -9);
    o.gathered.assign((B + 1) * D, -5.0f);
    o.normed.assign((B + 1) * D, -5.0f);
    return o;
  }
};

/// Runs route + gather through the CUDA kernels (Cuda) or the CPU ones. With
/// `predictor` the decision is `logits`, else r itself (aliased).
template <int D, bool Cuda>
RouteResult runRoute(const std::vector<float> &x, int64_t B,
                     const std::vector<float> &w, const std::vector<float> &nw,
                     const std::vector<float> *logits,
                     const std::vector<int32_t> &positions,
                     const std::vector<uint8_t> &active) {
  RouteResult o = RouteResult::poisoned(B, D);
  const float *decision = logits ? logits->data() : o.r.data();
  constexpr auto router = decodeRouter<D, Cuda>();
  constexpr auto gather = decodeGather<D, Cuda>();
  if constexpr (Cuda) {
    // The router's row count: every sequence (the identity row set's
    // seg[B] = B, on the device).
    gen_cuda::launch(router, &B, B, x.data(), w.data(), o.r.data());
    modk_cuda::decode_select(B, decision, positions.data(), active.data(),
                             o.pos.data(), o.seg.data(), o.mask.data(),
                             nullptr);
    // At most one row a sequence: B rows bound the launch; the count is
    // read on the device (seg + B).
    gen_cuda::launch(gather, o.seg.data() + B, B, o.seg.data(), B, x.data(),
                     nw.data(), o.gathered.data(), o.normed.data());
  } else {
    router(B, x.data(), w.data(), o.r.data());
    modk_cpu::decode_select(B, decision, positions.data(), active.data(),
                            o.pos.data(), o.seg.data(), o.mask.data());
    gather(o.seg[B], o.seg.data(), B, x.data(), nw.data(), o.gathered.data(),
           o.normed.data());
  }
  return o;
}

template <int D>
void checkRoute(int64_t B, uint32_t seed, bool predictor, double pActive) {
  SCOPED_TRACE("D " + std::to_string(D) + " B " + std::to_string(B) +
               (predictor ? " predictor" : " aux_loss"));
  std::vector<float> x = randomFloats(B * D + 1, seed);
  std::vector<float> w = randomFloats(D, seed + 1);
  std::vector<float> nw = randomFloats(D, seed + 2, 0.5f, 1.5f);
  std::vector<float> logits = randomFloats(B + 1, seed + 3);
  // Decisions that must not route: zeros of both signs and a NaN.
  if (B > 5) {
    logits[1] = 0.0f;
    logits[3] = -0.0f;
    logits[5] = std::nanf("");
  }
  std::vector<int32_t> positions(B + 1);
  for (int64_t b = 0; b <= B; ++b)
    positions[b] = static_cast<int32_t>((b * 7 + seed) % 97);
  std::vector<uint8_t> active = randomActive(B + 1, seed + 4, pActive);
  const std::vector<float> *dec = predictor ? &logits : nullptr;
  RouteResult g = runRoute<D, true>(x, B, w, nw, dec, positions, active);
  RouteResult c = runRoute<D, false>(x, B, w, nw, dec, positions, active);
  // r is a dot product with cancellation, so its error is relative to the
  // vector r (max |r|), not to each (possibly tiny) entry.
  expectClose(g.r, c.r, B, B > 0 ? B : 1, "r");
  // Identical decisions (checked, not assumed: a decision within rounding
  // of 0 would show here).
  expectEqualPrefix(g.mask, c.mask, B, "mask");
  expectEqualPrefix(g.seg, c.seg, B + 1, "seg");
  const int64_t rows = c.seg[B];
  expectEqualPrefix(g.pos, c.pos, rows, "pos");
  // The gather is a bit copy; beyond the rows nothing is written.
  expectBitEqual(std::vector<float>(g.gathered.begin(), g.gathered.end()),
                 c.gathered, "gathered");
  expectClose(g.normed, c.normed, rows * D, D, "normed");
  for (int64_t i = rows * D; i < (B + 1) * D; ++i)
    ASSERT_EQ(g.normed[i], -5.0f) << "normed written past the rows";
}

/// The decode gather fused into decode_select (modk-fuse-select-gather), D =
/// 64: the compaction's block (CUDA) or loop (CPU) gathers each routed
/// sequence's row. Both against the unfused CPU kernels, and the CPU's
/// normalised rows against fp64.
TEST(CudaDecodeKernels, DecodeRouteFusedGatherMatchesCpu) {
  constexpr int D = 64;
  for (int64_t B : {int64_t(1), int64_t(37), int64_t(300)}) {
    SCOPED_TRACE("B " + std::to_string(B));
    const uint32_t seed = 140 + uint32_t(B);
    std::vector<float> x = randomFloats(B * D + 1, seed);
    std::vector<float> w = randomFloats(D, seed + 1);
    std::vector<float> nw = randomFloats(D, seed + 2, 0.5f, 1.5f);
    std::vector<int32_t> positions(B + 1);
    for (int64_t b = 0; b <= B; ++b)
      positions[b] = static_cast<int32_t>((b * 5 + seed) % 89);
    std::vector<uint8_t> active = randomActive(B + 1, seed + 4, 0.8);
    RouteResult ref =
        runRoute<D, false>(x, B, w, nw, nullptr, positions, active);
    const int64_t rows = ref.seg[B];
    for (bool cuda : {false, true}) {
      SCOPED_TRACE(cuda ? "CUDA" : "CPU");
      RouteResult o = RouteResult::poisoned(B, D);
      if (cuda) {
        gen_cuda::launch(gen_cuda::decodeRouter64, &B, B, x.data(), w.data(),
                         o.r.data());
        modk_cuda::decode_select(
            B, o.r.data(), positions.data(), active.data(), o.pos.data(),
            o.seg.data(), o.mask.data(),
            gen_cuda::FusedDecodeGatherRmsnorm64{
                x.data(), nw.data(), o.gathered.data(), o.normed.data()},
            nullptr);
      } else {
        gen_cpu::decodeRouter64(B, x.data(), w.data(), o.r.data());
        modk_cpu::decode_select(
            B, o.r.data(), positions.data(), active.data(), o.pos.data(),
            o.seg.data(), o.mask.data(),
            gen_cpu::FusedDecodeGatherRmsnorm64{
                x.data(), nw.data(), o.gathered.data(), o.normed.data()});
      }
      expectEqualPrefix(o.mask, ref.mask, B, "mask");
      expectEqualPrefix(o.seg, ref.seg, B + 1, "seg");
      expectEqualPrefix(o.pos, ref.pos, rows, "pos");
      expectBitEqual(o.gathered, ref.gathered, "gathered");
      expectClose(o.normed, ref.normed, rows * D, D, "normed");
      for (int64_t i = rows * D; i < (B + 1) * D; ++i)
        ASSERT_EQ(o.normed[i], -5.0f) << "normed written past the rows";
      if (cuda)
        continue;
      // fp64: row seg[b] of routed sequence b is x[b] normalised, times nw.
      for (int64_t b = 0; b < B; ++b) {
        if (!o.mask[b])
          continue;
        const float *xb = &x[b * D];
        double ss = 0.0;
        for (int c = 0; c < D; ++c)
          ss += double(xb[c]) * xb[c];
        const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
        for (int c = 0; c < D; ++c) {
          const double want = double(xb[c]) * inv * nw[c];
          ASSERT_NEAR(o.normed[o.seg[b] * D + c], want,
                      1e-5 * std::fabs(want) + 1e-6)
              << "b " << b << " c " << c;
        }
      }
    }
  }
}

TEST(CudaDecodeKernels, DecodeRouteAuxLossMatchesCpu) {
  checkRoute<64>(37, 101, /*predictor=*/false, 0.7);
  checkRoute<128>(300, 102, false, 0.8); // more than one scan tile
  checkRoute<96>(5, 103, false, 1.0);
}

TEST(CudaDecodeKernels, DecodeRoutePredictorMatchesCpu) {
  checkRoute<64>(41, 201, /*predictor=*/true, 0.7);
  checkRoute<128>(530, 202, true, 0.5); // three scan tiles
}

TEST(CudaDecodeKernels, DecodeRouteNoneRoutedAndEmptyBatch) {
  checkRoute<32>(29, 301, false, 0.0); // nobody active: zero rows
  checkRoute<32>(0, 302, false, 1.0);  // no sequences at all
  checkRoute<32>(1, 303, true, 1.0);
}

//===----------------------------------------------------------------------===//
// The gated scatter of a decode step
//===----------------------------------------------------------------------===//

/// The generated gated scatter of a decode step, CUDA or CPU: D = 64 with
/// each gate, D = 200 with the sigmoid.
template <int D, int G, bool Cuda> constexpr auto decodeScatter() {
  static_assert(D == 64 || (D == 200 && G == GateSigmoid),
                "no gen_*::decodeScatter of this width and gate");
  if constexpr (Cuda)
    return D == 200           ? gen_cuda::decodeScatterSigmoid200
           : G == GateLinear  ? gen_cuda::decodeScatterLinear64
           : G == GateSigmoid ? gen_cuda::decodeScatterSigmoid64
                              : gen_cuda::decodeScatterOne64;
  else
    return D == 200           ? gen_cpu::decodeScatterSigmoid200
           : G == GateLinear  ? gen_cpu::decodeScatterLinear64
           : G == GateSigmoid ? gen_cpu::decodeScatterSigmoid64
                              : gen_cpu::decodeScatterOne64;
}

template <int D, int G> void checkScatter(uint32_t seed) {
  SCOPED_TRACE("D " + std::to_string(D) + " gate " + std::to_string(G));
  // Rows per sequence: 0 or 1, with empty ones between. A decode step routes
  // at most one row a sequence (its one token; the gathered buffers hold one
  // row a sequence), and the generated scatter needs rows at distinct
  // tokens: each row writes x[b] = x[b] + g * (a + m) on its own, so two
  // rows of one sequence would race on x[b]. (The hand-written kernel this
  // replaced also took several rows a sequence, a prefill chunk, which no
  // decode step makes.)
  const std::vector<int> rowsPer = {1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1};
  const int64_t B = static_cast<int64_t>(rowsPer.size());
  std::vector<int64_t> seg(B + 1, 0);
  for (int64_t b = 0; b < B; ++b)
    seg[b + 1] = seg[b] + rowsPer[b];
  const int64_t rows = seg[B];
  std::vector<float> x = randomFloats(B * D, seed);
  std::vector<float> r = randomFloats(B, seed + 1, -3.0f, 3.0f);
  std::vector<float> a = randomFloats(rows * D, seed + 2);
  std::vector<float> m = randomFloats(rows * D, seed + 3);
  std::vector<float> xg = x, xc = x;
  gen_cuda::launch(decodeScatter<D, G, true>(), seg.data() + B, B, seg.data(),
                   B, a.data(), m.data(), r.data(), xg.data(), xg.data());
  decodeScatter<D, G, false>()(rows, seg.data(), B, a.data(), m.data(),
                               r.data(), xc.data(), xc.data());
  expectClose(xg, xc, B * D, D, "x");
  for (int64_t b = 0; b < B; ++b)
    if (rowsPer[b] == 0)
      for (int d = 0; d < D; ++d)
        ASSERT_EQ(std::memcmp(&xg[b * D + d], &x[b * D + d], 4), 0)
            << "sequence " << b << " without a row was written";
}

TEST(CudaDecodeKernels, DecodeGateScaleScatterMatchesCpu) {
  checkScatter<64, GateLinear>(401);
  checkScatter<64, GateSigmoid>(402);
  checkScatter<64, GateOne>(403);
  checkScatter<200, GateSigmoid>(404); // two column blocks, a tail
}

//===----------------------------------------------------------------------===//
// decode_attention
//===----------------------------------------------------------------------===//

/// A CPU and a CUDA copy of one layer's cache, stepped side by side.
template <int S, int H, int HD> struct CachePair {
  static constexpr int64_t LD = static_cast<int64_t>(H) * HD;
  int64_t B;
  std::vector<float> kG, vG, kC, vC;
  std::vector<int32_t> countsG, countsC;

  /// Fills sequence b's first fill[b] slots with random K, V (slots past the
  /// fill hold garbage that must never be read).
  CachePair(int64_t B, const std::vector<int32_t> &fill, uint32_t seed)
      : B(B) {
    kC = randomFloats(B * S * LD, seed);
    vC = randomFloats(B * S * LD, seed + 1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = std::max(fill[b], 0); t < S; ++t)
        for (int64_t e = 0; e < LD; ++e) {
          kC[(b * S + t) * LD + e] = 1e30f; // poison: would show in out
          vC[(b * S + t) * LD + e] = std::nanf("");
        }
    kG = kC;
    vG = vC;
    countsC = fill;
    countsG = fill;
  }

  /// One step: rows by seg (their q, k, v random by seed), through both. The
  /// CUDA side uses `nsplit` splits when > 0, else the public wrapper.
  void step(const std::vector<int64_t> &seg, const std::vector<uint8_t> &active,
            uint32_t seed, int nsplit = 0, bool callerScratch = false) {
    const int64_t rows = seg[B];
    std::vector<float> q = randomFloats(rows * LD + 1, seed, -2.0f, 2.0f);
    std::vector<float> k = randomFloats(rows * LD + 1, seed + 1, -2.0f, 2.0f);
    std::vector<float> v = randomFloats(rows * LD + 1, seed + 2);
    std::vector<int32_t> pos(rows + 1, 0);
    std::vector<float> outG((rows + 1) * LD, -4.0f), outC((rows + 1) * LD, -4.0f);
    if (nsplit > 0) {
      std::vector<float> scratch(
          modk_cuda::decode_detail::attnScratchFloats<HD>(B * H, nsplit) + 1,
          -8.0f);
      modk_cuda::decode_detail::decodeAttentionLaunch<S, H, HD>(
          q.data(), k.data(), v.data(), B, seg.data(), active.data(),
          kG.data(), vG.data(), countsG.data(), outG.data(), nsplit,
          scratch.data(), nullptr);
    } else if (callerScratch) {
      const int64_t floats =
          modk_cuda::decode_attention_scratch_floats<S, H, HD>(B);
      std::vector<float> scratch(floats + 1, -8.0f);
      modk_cuda::decode_attention<S, H, HD>(
          q.data(), k.data(), v.data(), B, seg.data(), pos.data(),
          active.data(), kG.data(), vG.data(), countsG.data(), outG.data(),
          floats ? scratch.data() : nullptr, nullptr);
    } else {
      modk_cuda::decode_attention<S, H, HD>(
          q.data(), k.data(), v.data(), B, seg.data(), pos.data(),
          active.data(), kG.data(), vG.data(), countsG.data(), outG.data(),
          nullptr);
    }
    modk_cpu::decode_attention<S, H, HD>(q.data(), k.data(), v.data(), B,
                                         seg.data(), pos.data(), active.data(),
                                         kC.data(), vC.data(), countsC.data(),
                                         outC.data());
    expectEqualPrefix(countsG, countsC, B, "counts");
    expectBitEqual(kG, kC, "cache K");
    expectBitEqual(vG, vC, "cache V");
    expectClose(outG, outC, rows * LD, HD, "out");
    for (int64_t i = rows * LD; i < (rows + 1) * LD; ++i)
      ASSERT_EQ(outG[i], -4.0f) << "out written past the rows";
  }

  /// One step as `step`, with out stored as bf16 (modk-store-bf16, where
  /// only wo's product reads it): the CPU's is its f32 output rounded, bit
  /// for bit, and the GPU's (whose append leaves each head's metadata in
  /// the first 8 bytes of its bf16 slice) within a bf16 rounding of it.
  void stepBf16Out(const std::vector<int64_t> &seg,
                   const std::vector<uint8_t> &active, uint32_t seed,
                   int nsplit = 0) {
    const int64_t rows = seg[B];
    std::vector<float> q = randomFloats(rows * LD + 1, seed, -2.0f, 2.0f);
    std::vector<float> k = randomFloats(rows * LD + 1, seed + 1, -2.0f, 2.0f);
    std::vector<float> v = randomFloats(rows * LD + 1, seed + 2);
    std::vector<int32_t> pos(rows + 1, 0);
    const size_t n = size_t((rows + 1) * LD);
    std::vector<modk_cuda::bf16> outG(n, modk_cuda::bf16(-4.0f));
    std::vector<modk_cpu::bf16> outC(n, modk_cpu::bf16(-4.0f));
    std::vector<float> outF(n, -4.0f);
    if (nsplit > 0) {
      std::vector<float> scratch(
          modk_cuda::decode_detail::attnScratchFloats<HD>(B * H, nsplit) + 1,
          -8.0f);
      modk_cuda::decode_detail::decodeAttentionLaunch<S, H, HD>(
          q.data(), k.data(), v.data(), B, seg.data(), active.data(), kG.data(),
          vG.data(), countsG.data(), outG.data(), nsplit, scratch.data(),
          nullptr);
    } else {
      modk_cuda::decode_attention<S, H, HD>(
          q.data(), k.data(), v.data(), B, seg.data(), pos.data(),
          active.data(), kG.data(), vG.data(), countsG.data(), outG.data(),
          nullptr);
    }
    // The f32 output from a copy of the cache, then the bf16 one.
    std::vector<float> kF = kC, vF = vC;
    std::vector<int32_t> countsF = countsC;
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        kF.data(), vF.data(), countsF.data(), outF.data());
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        kC.data(), vC.data(), countsC.data(), outC.data());
    expectEqualPrefix(countsG, countsC, B, "counts");
    expectBitEqual(kG, kC, "cache K");
    expectBitEqual(vG, vC, "cache V");
    std::vector<float> gotG(n), gotC(n);
    for (size_t i = 0; i < n; ++i) {
      gotG[i] = float(outG[i]);
      gotC[i] = float(outC[i]);
      if (i < size_t(rows * LD) && !std::isnan(outF[i]))
        ASSERT_EQ(outC[i].bits, modk_cpu::bf16(outF[i]).bits)
            << "the CPU's bf16 out at " << i << " is not its f32 out rounded";
    }
    // Both round sums that agree to about 1e-5: at most a bf16 step apart.
    int reported = 0;
    for (size_t i = 0; i < size_t(rows * LD); ++i) {
      const bool ok = std::isnan(gotC[i])
                          ? std::isnan(gotG[i])
                          : std::fabs(gotG[i] - gotC[i]) <=
                                std::ldexp(std::fabs(gotC[i]), -7) + 1e-30f;
      if (!ok && reported++ < 8)
        ADD_FAILURE() << "bf16 out[" << i << "]: got " << gotG[i] << ", want "
                      << gotC[i];
    }
    for (size_t i = size_t(rows * LD); i < n; ++i)
      ASSERT_EQ(gotG[i], -4.0f) << "bf16 out written past the rows";
  }
};

/// seg of a decode step: one row for each sequence with routed[b].
std::vector<int64_t> segOf(const std::vector<uint8_t> &routed) {
  std::vector<int64_t> seg(routed.size() + 1, 0);
  for (size_t b = 0; b < routed.size(); ++b)
    seg[b + 1] = seg[b] + (routed[b] ? 1 : 0);
  return seg;
}

TEST(CudaDecodeKernels, SplitCountOfThePublicWrapper) {
  using modk_cuda::decode_detail::attnSplits;
  using modk_cuda::decode_detail::kAttnScratchPartials;
  EXPECT_EQ((attnSplits<512, 2>(5, kAttnScratchPartials)), 4);
  EXPECT_EQ((attnSplits<2048, 16>(1, kAttnScratchPartials)), 16);
  EXPECT_EQ((attnSplits<2048, 16>(64, kAttnScratchPartials)), 1);
  EXPECT_EQ((attnSplits<100, 4>(1, kAttnScratchPartials)), 1);
  EXPECT_EQ((attnSplits<256, 4>(0, kAttnScratchPartials)), 1);
}

/// Several decode steps in a row, each compared with the CPU: caches of
/// different fill levels (empty, short, longer than one split, about to be
/// full), inactive sequences, sequences with no routed row, a full cache
/// refused (NaN rows), through the public wrapper (4 splits here).
TEST(CudaDecodeKernels, DecodeAttentionStepsMatchCpu) {
  constexpr int S = 512, H = 2, HD = 32;
  const int64_t B = 6;
  CachePair<S, H, HD> cache(B, {0, 1, 130, 300, 509, 77}, 501);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<uint8_t> active = {1, 1, 1, 1, 1, uint8_t(step % 2)};
    // Sequence 2 routes only every other step; 5 is inactive on even steps.
    std::vector<uint8_t> routed = {1, 1, uint8_t(step % 2 == 0), 1, 1, 1};
    cache.step(segOf(routed), active, 600 + 10 * step);
  }
  // Sequence 4 reached S and was refused at the last step.
  EXPECT_EQ(cache.countsC[4], S);
}

TEST(CudaDecodeKernels, DecodeAttentionForcedSplitsMatchCpu) {
  constexpr int S = 512, H = 2, HD = 32;
  const int64_t B = 4;
  for (int nsplit : {1, 2, 3, 7}) {
    SCOPED_TRACE("nsplit " + std::to_string(nsplit));
    CachePair<S, H, HD> cache(B, {5, 200, 511, 384}, 701 + nsplit);
    std::vector<uint8_t> active = {1, 0, 1, 1};
    for (int step = 0; step < 2; ++step)
      cache.step(segOf({1, 1, 1, 1}), active, 800 + step, nsplit);
  }
}

TEST(CudaDecodeKernels, DecodeAttentionCallerScratchMatchesCpu) {
  constexpr int S = 384, H = 1, HD = 64;
  const int64_t B = 3;
  CachePair<S, H, HD> cache(B, {383, 250, 2}, 901);
  for (int step = 0; step < 3; ++step)
    cache.step(segOf({1, 1, uint8_t(step != 1)}), {1, 1, 1}, 910 + step, 0,
               /*callerScratch=*/true);
}

/// Several rows of one sequence in a step (a prefill chunk): each sees the
/// rows before it; the cache overflows in the middle of a chunk.
TEST(CudaDecodeKernels, DecodeAttentionSeveralRowsPerSequence) {
  constexpr int S = 160, H = 2, HD = 16;
  const int64_t B = 4;
  CachePair<S, H, HD> cache(B, {0, 157, 40, 3}, 1001);
  std::vector<int64_t> seg = {0, 3, 7, 7, 9}; // 3, 4 (2 refused), 0, 2 rows
  for (int nsplit : {0, 1, 2})
    cache.step(seg, {1, 1, 1, 0}, 1010 + nsplit, nsplit);
}

/// Head sizes around the block size: several key groups (HD 8), one thread a
/// dim (HD 128), several dims a thread (HD 256), and one that is not a
/// multiple of 4 (HD 6).
TEST(CudaDecodeKernels, DecodeAttentionHeadSizes) {
  {
    CachePair<300, 3, 8> cache(2, {100, 299}, 1101);
    cache.step(segOf({1, 1}), {1, 1}, 1110);
    cache.step(segOf({1, 1}), {1, 1}, 1120, 3);
  }
  {
    CachePair<200, 1, 128> cache(2, {0, 150}, 1201);
    cache.step(segOf({1, 1}), {1, 1}, 1210);
    cache.step(segOf({1, 1}), {1, 1}, 1220, 2);
  }
  {
    CachePair<150, 1, 256> cache(2, {20, 140}, 1301);
    cache.step(segOf({1, 1}), {1, 1}, 1310);
    cache.step(segOf({0, 1}), {1, 1}, 1320, 2);
  }
  {
    CachePair<140, 2, 6> cache(3, {1, 135, 60}, 1401);
    cache.step(segOf({1, 1, 1}), {1, 1, 1}, 1410);
    cache.step(segOf({1, 1, 1}), {1, 0, 1}, 1420, 2);
  }
}

/// Decode attention's output stored as bf16 (a bf16 model, where only wo's
/// product reads it): zero rows of inactive sequences, NaN rows of a full
/// cache, unsplit and split, and a head of 4 bf16 (the least that holds
/// the append's 8 bytes of metadata).
TEST(CudaDecodeKernels, DecodeAttentionBf16OutputMatchesCpu) {
  {
    CachePair<512, 2, 32> cache(4, {0, 130, 511, 60}, 1501);
    for (int step = 0; step < 2; ++step)
      cache.stepBf16Out(segOf({1, 1, 1, 1}), {1, 1, 1, uint8_t(step)},
                        1510 + step);
    cache.stepBf16Out(segOf({1, 1, 0, 1}), {1, 1, 1, 1}, 1520, 3);
  }
  {
    CachePair<64, 3, 4> cache(2, {10, 40}, 1601);
    cache.stepBf16Out(segOf({1, 1}), {1, 1}, 1610);
    cache.stepBf16Out(segOf({1, 1}), {1, 1}, 1620, 2);
  }
}

/// Nothing routed at all: no kernel may touch the cache, counts or out.
/// Grouped-query attention in a decode step (docs/model-format.md sections 3
/// and 4): a cache of KVH heads a token, query head h attending with
/// key/value head h / (H / KVH), against the CPU prelude's, unsplit and
/// split over CTAs.
TEST(CudaDecodeKernels, DecodeAttentionGroupedQuery) {
  constexpr int S = 300, H = 4, KVH = 2, HD = 16;
  constexpr int64_t B = 3, LD = H * HD, LDK = KVH * HD;
  std::vector<float> kG(B * S * LDK, 0.0f), vG(kG), kC(kG), vC(kG);
  std::vector<int32_t> countsG = {0, 5, 0}, countsC = countsG;
  std::vector<uint8_t> active = {1, 0, 1};
  std::vector<int64_t> seg = {0, 1, 2, 3};
  std::vector<int32_t> pos(B, 0);
  for (int t = 0; t < 70; ++t) {
    auto q = randomFloats(B * LD, 700 + t, -2.0f, 2.0f);
    auto k = randomFloats(B * LDK, 800 + t, -2.0f, 2.0f);
    auto v = randomFloats(B * LDK, 900 + t);
    std::vector<float> outG(B * LD, -4.0f), outC(B * LD, -4.0f);
    modk_cuda::decode_attention<S, H, HD, KVH>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        kG.data(), vG.data(), countsG.data(), outG.data(), nullptr);
    modk_cpu::decode_attention<S, H, HD, KVH>(
        q.data(), k.data(), v.data(), B, seg.data(), pos.data(), active.data(),
        kC.data(), vC.data(), countsC.data(), outC.data());
    expectEqualPrefix(countsG, countsC, B, "counts");
    expectBitEqual(kG, kC, "cache K");
    expectBitEqual(vG, vC, "cache V");
    expectClose(outG, outC, B * LD, HD, "out");
  }
}

TEST(CudaDecodeKernels, DecodeAttentionZeroRows) {
  constexpr int S = 256, H = 2, HD = 16;
  CachePair<S, H, HD> cache(3, {4, 0, 255}, 1501);
  cache.step(segOf({0, 0, 0}), {1, 1, 1}, 1510);
  cache.step(segOf({0, 0, 0}), {1, 1, 1}, 1520, 3);
}

} // namespace
