//===- CudaKernelsTrainEmuTest.cpp - CUDA training kernels vs the CPU -----===//
//
// Every wrapper of CudaKernelsTrain.cuh runs through the CPU emulation and is
// compared with the CPU prelude function (modk_cpu) on the same random
// inputs: dynamic row counts below the static bound (with sentinels past the
// rows that must survive), several segments of different lengths, B > 1,
// repeated tokens, and AdamW with clipping on and off and a non-finite
// gradient.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "CudaKernelsTrain.cuh"
#include "GemmPlanHooks.h" // the plan of calls that name none

#include "CpuKernels.h"
#include "CpuKernelsTrain.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "EmuTestData.h"
#define MODC_ROW_KERNELS_CUDA 1
#include "RowKernels.h"

namespace {
using namespace modc_emu_test;

/// causal_attention_grad on the tensor-core mainloop (tc) or the SIMT one:
/// the compiler's choice for a package, both here.
template <int H, int HD, typename... Args>
void attentionGradOn(int tc, Args... args) {
  if (tc)
    modk_cuda::causal_attention_grad<H, HD, false, true>(args...);
  else
    modk_cuda::causal_attention_grad<H, HD, false, false>(args...);
}



/// |got - want| <= tol * (|want| + max|want|/10) elementwise over [0, n):
/// relative, with a floor so entries near zero compare at the array's scale.
void expectClose(const float *got, const float *want, size_t n, double tol,
                 const char *what) {
  double maxAbs = 0.0;
  for (size_t i = 0; i < n; ++i)
    maxAbs = std::max(maxAbs, std::fabs(double(want[i])));
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    const double g = got[i], w = want[i];
    const double lim = tol * (std::fabs(w) + 0.1 * maxAbs) + 1e-30;
    if (!(std::fabs(g - w) <= lim)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w
                    << " (tol " << lim << ")";
      ++bad;
    }
  }
}

void expectClose(const std::vector<float> &got, const std::vector<float> &want,
                 double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  expectClose(got.data(), want.data(), got.size(), tol, what);
}

void expectSentinel(const float *p, size_t n, const char *what) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != kSentinel) {
      ADD_FAILURE() << what << ": element " << i << " past the rows changed";
      return;
    }
}

/// Segments of the given lengths (each <= S): seg[0..B], sorted distinct
/// positions in [0, S) per segment.
struct Routing {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
};
Routing makeRouting(const std::vector<int64_t> &lens, int S, unsigned seed) {
  std::mt19937 gen(seed);
  Routing r;
  r.seg.push_back(0);
  for (int64_t len : lens) {
    std::vector<int32_t> all(S);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    all.resize(len);
    std::sort(all.begin(), all.end());
    r.pos.insert(r.pos.end(), all.begin(), all.end());
    r.seg.push_back(r.seg.back() + len);
  }
  return r;
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// The generated cross-entropy of V classes on the CPU (the reference) and
/// on CUDA, launched as the emitter launches it: the two row totals (the
/// mean loss into losses[1] and losses[0]) in one partial row of 2 floats.
template <int V> void checkCrossEntropy(int64_t rows, bool alias) {
  constexpr auto cpu = V == 100   ? gen_cpu::crossEntropy100
                       : V == 256 ? gen_cpu::crossEntropy256
                       : V == 600 ? gen_cpu::crossEntropy600
                                  : gen_cpu::crossEntropy5000;
  constexpr auto cuda = V == 100   ? gen_cuda::crossEntropy100
                        : V == 256 ? gen_cuda::crossEntropy256
                        : V == 600 ? gen_cuda::crossEntropy600
                                   : gen_cuda::crossEntropy5000;
  auto logits = randomFloats(rows * V, 11 + V, -4.0f, 4.0f);
  auto targets = randomInts(rows, 12, 0, V - 1);
  std::vector<float> wantD(rows * V), wantL = {0.0f, 0.0f, 0.0f};
  cpu(rows, logits.data(), targets.data(), wantD.data(), &wantL[1], &wantL[0]);
  std::vector<float> in = logits, gotD(rows * V, kSentinel);
  std::vector<float> losses = {0.0f, 0.0f, 0.0f};
  std::vector<float> scratch(modk_cuda::row_reduce_scratch_floats(rows, 2));
  float *dst = alias ? in.data() : gotD.data();
  int64_t dRows = rows;
  const modk_cuda::train_detail::ColOut out{&losses[1], &losses[0],
                                            &losses[0], 1, 1};
  gen_cuda::launchColumnSums<V>(cuda, &dRows, rows, out, 2, scratch.data(),
                                in.data(), targets.data(), dst, &losses[1],
                                &losses[0]);
  expectClose(dst, wantD.data(), wantD.size(), 1e-5, "dlogits");
  EXPECT_NEAR(losses[1], wantL[1], 1e-5 * std::fabs(wantL[1]));
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(losses[2], 0.0f);

  if constexpr (V == 100) {
    // Into bf16 (a bf16 model's logits gradient, which only products
    // read): the f32 gradient rounded, the same losses.
    const modk_cuda::bf16 unset(kSentinel);
    std::vector<modk_cuda::bf16> gotBf16(rows * V, unset);
    std::vector<float> lossesBf16 = {0.0f, 0.0f, 0.0f};
    const modk_cuda::train_detail::ColOut outBf16{
        &lossesBf16[1], &lossesBf16[0], &lossesBf16[0], 1, 1};
    gen_cuda::launchColumnSums<V>(gen_cuda::crossEntropy100Bf16, &dRows, rows,
                                  outBf16, 2, scratch.data(), logits.data(),
                                  targets.data(), gotBf16.data(),
                                  &lossesBf16[1], &lossesBf16[0]);
    expectBf16Of(gotBf16, dst, rows * V, unset, "dlogits into bf16");
    EXPECT_EQ(lossesBf16, losses);
  }
}

TEST(CudaTrainKernels, CrossEntropyMatchesCpu) {
  checkCrossEntropy<100>(7, false);  // V not a multiple of 32
  checkCrossEntropy<256>(5, false);
  checkCrossEntropy<600>(40, false); // more columns than threads, two blocks
  checkCrossEntropy<256>(4, true);   // dlogits aliases logits
  checkCrossEntropy<5000>(3, true);  // rows read from memory, not registers
}

TEST(CudaTrainKernels, BceWithLogitsMatchesCpu) {
  constexpr int S = 40;
  const int64_t B = 3, rows = B * S;
  auto z = randomFloats(rows, 21, -6.0f, 6.0f);
  auto mask = randomInts(rows, 22, 0, 1);
  auto dz0 = randomFloats(rows, 23);
  std::vector<float> lossInit = {1.5f, 2.5f, 0.25f};
  // The generated kernel (weight 0.3, two routed layers) on each target;
  // the two row totals aux and total in one partial row on CUDA.
  std::vector<float> wantDz = dz0, wantL = lossInit;
  gen_cpu::bce40(rows, z.data(), mask.data(), wantDz.data(), wantDz.data(),
                 &wantL[2], &wantL[0]);
  std::vector<float> gotDz = dz0, gotL = lossInit;
  std::vector<float> scratch(modk_cuda::row_reduce_scratch_floats(rows, 2));
  int64_t dRows = rows;
  gen_cuda::launchColumnSums<S>(
      gen_cuda::bce40, &dRows, rows,
      modk_cuda::train_detail::ColOut{&gotL[2], &gotL[0], &gotL[0], 1, 1}, 2,
      scratch.data(), z.data(), mask.data(), gotDz.data(), gotDz.data(),
      &gotL[2], &gotL[0]);
  expectClose(gotDz, wantDz, 1e-6, "dz");
  expectClose(gotL, wantL, 1e-6, "losses");
  EXPECT_EQ(gotL[1], lossInit[1]);
}

//===----------------------------------------------------------------------===//
// Norm, rope, activations
//===----------------------------------------------------------------------===//

/// modc's generated RMSNorm gradient of width D (eps 1e-5) on both targets:
/// the CPU's into wantDx/wantDw, CUDA's into gotDx/gotDw.
template <int D>
void rmsnormGradBoth(bool acc, int64_t rows, int64_t maxRows, const float *x,
                     const float *w, const float *dy, float *wantDx,
                     float *wantDw, float *gotDx, float *gotDw,
                     float *scratch) {
  static_assert(D == 96 || D == 300 || D == 64, "gen_*::rmsnormGrad<D>");
  const int64_t devRows = rows;
  if (D == 96 && !acc) {
    gen_cpu::rmsnormGrad96(rows, x, w, dy, wantDx, wantDw);
    gen_cuda::launchColumnSum<D>(gen_cuda::rmsnormGrad96, &devRows, maxRows,
                                 gotDw, scratch, x, w, dy, gotDx, gotDw);
  } else if (D == 96) {
    gen_cpu::rmsnormGradAcc96(rows, x, w, dy, wantDx, wantDx, wantDw);
    gen_cuda::launchColumnSum<D>(gen_cuda::rmsnormGradAcc96, &devRows, maxRows,
                                 gotDw, scratch, x, w, dy, gotDx, gotDx, gotDw);
  } else if (D == 300 && acc) {
    gen_cpu::rmsnormGradAcc300(rows, x, w, dy, wantDx, wantDx, wantDw);
    gen_cuda::launchColumnSum<D>(gen_cuda::rmsnormGradAcc300, &devRows, maxRows,
                                 gotDw, scratch, x, w, dy, gotDx, gotDx, gotDw);
  } else if (D == 64 && !acc) {
    gen_cpu::rmsnormGrad64(rows, x, w, dy, wantDx, wantDw);
    gen_cuda::launchColumnSum<D>(gen_cuda::rmsnormGrad64, &devRows, maxRows,
                                 gotDw, scratch, x, w, dy, gotDx, gotDw);
  } else {
    ADD_FAILURE() << "no generated RMSNorm gradient of " << D << " acc " << acc;
  }
}

template <int D> void checkRmsnormGrad(int64_t rows, int64_t maxRows, bool acc) {
  auto x = randomFloats(maxRows * D, 41 + D);
  auto w = randomFloats(D, 42, 0.5f, 1.5f);
  auto dy = randomFloats(maxRows * D, 43);
  auto dx0 = randomFloats(maxRows * D, 44);
  auto dw0 = randomFloats(D, 45);
  std::vector<float> wantDx = dx0, wantDw = dw0;
  std::vector<float> gotDx = dx0, gotDw = dw0;
  std::fill(gotDx.begin() + rows * D, gotDx.end(), kSentinel);
  std::vector<float> scratch(modk_cuda::row_reduce_scratch_floats(maxRows, D));
  rmsnormGradBoth<D>(acc, rows, maxRows, x.data(), w.data(), dy.data(),
                     wantDx.data(), wantDw.data(), gotDx.data(), gotDw.data(),
                     scratch.data());
  expectClose(gotDx.data(), wantDx.data(), rows * D, 1e-5, "dx");
  expectSentinel(gotDx.data() + rows * D, (maxRows - rows) * D, "dx");
  expectClose(gotDw, wantDw, 1e-4, "dw");
  // And against f64.
  std::vector<double> refDw(dw0.begin(), dw0.end());
  for (int64_t i = 0; i < rows; ++i) {
    const float *xi = &x[i * D], *gi = &dy[i * D];
    double ss = 0.0, dot = 0.0;
    for (int d = 0; d < D; ++d) {
      ss += double(xi[d]) * xi[d];
      dot += double(gi[d]) * w[d] * xi[d];
    }
    const double inv = 1.0 / std::sqrt(ss / D + 1e-5);
    for (int d = 0; d < D; ++d) {
      const double dx =
          inv * (double(gi[d]) * w[d] - xi[d] * dot * inv * inv / D) +
          (acc ? double(dx0[i * D + d]) : 0.0);
      ASSERT_NEAR(gotDx[i * D + d], dx, 1e-4 * (1.0 + std::fabs(dx))) << i;
      refDw[d] += double(gi[d]) * xi[d] * inv;
    }
  }
  for (int d = 0; d < D; ++d)
    ASSERT_NEAR(gotDw[d], refDw[d], 1e-4 * (1.0 + std::fabs(refDw[d]))) << d;
}

TEST(CudaTrainKernels, RmsnormGradMatchesCpu) {
  checkRmsnormGrad<96>(37, 50, false);
  checkRmsnormGrad<96>(37, 50, true);
  checkRmsnormGrad<300>(70, 75, true); // two columns a thread, three blocks
  checkRmsnormGrad<64>(0, 8, false);   // no rows: dw unchanged
}

// RoPE's transpose as modc generates it (modk.rows over heads), against
// the CPU's, from the angle table a package builds and without one.
TEST(CudaTrainKernels, RopeGradMatchesCpu) {
  constexpr int H = 3, HD = 16;
  const int64_t rows = 9, maxRows = 12;
  auto dy = randomFloats(maxRows * H * HD, 51);
  auto pos = randomInts(maxRows, 52, 0, 5000);
  const float theta = 10000.0f;
  std::vector<float> want(rows * H * HD);
  gen_cpu::ropeGrad3x16(rows, pos.data(), dy.data(), want.data());
  std::vector<float> got(maxRows * H * HD, kSentinel);
  int64_t devRows = rows;
  gen_cuda::launch(gen_cuda::ropeGrad3x16, &devRows, maxRows, pos.data(),
                   dy.data(), got.data(), nullptr);
  expectClose(got.data(), want.data(), rows * H * HD, 1e-6, "dx");
  expectSentinel(got.data() + rows * H * HD, (maxRows - rows) * H * HD, "dx");

  // The angles from the table (what a package passes): the same bits.
  const float2 *table =
      modk_cuda::detail::ropeTableFor<HD>(theta, 5000, nullptr);
  ASSERT_NE(table, nullptr);
  std::vector<float> fromTable(maxRows * H * HD, kSentinel);
  gen_cuda::launch(gen_cuda::ropeGrad3x16, &devRows, maxRows, pos.data(),
                   dy.data(), fromTable.data(), table);
  expectClose(fromTable.data(), got.data(), rows * H * HD, 0.0,
              "dx from the table");

  // In place (dx = dy): the same values.
  std::vector<float> inPlace = dy;
  gen_cuda::launch(gen_cuda::ropeGrad3x16, &devRows, maxRows, pos.data(),
                   inPlace.data(), inPlace.data(), table);
  expectClose(inPlace.data(), got.data(), rows * H * HD, 0.0, "dx in place");

  // Into bf16 (a bf16 model's rotated gradients, which only products read):
  // the f32 result, rounded.
  const modk_cuda::bf16 unset(kSentinel);
  std::vector<modk_cuda::bf16> gotBf16(maxRows * H * HD, unset);
  gen_cuda::launch(gen_cuda::ropeGrad3x16Bf16, &devRows, maxRows, pos.data(),
                   dy.data(), gotBf16.data(), table);
  expectBf16Of(gotBf16, got.data(), rows * H * HD, unset, "dx into bf16");
}

// The activations' gradients modc generates for both targets (modk.rows).
TEST(CudaTrainKernels, SwigluAndGeluGradMatchCpu) {
  constexpr int N = 50; // gen_cpu::swigluGrad50 and the others
  const int64_t rows = 13, maxRows = 20;
  auto gate = randomFloats(maxRows * N, 61, -5.0f, 5.0f);
  auto up = randomFloats(maxRows * N, 62, -3.0f, 3.0f);
  auto du = randomFloats(maxRows * N, 63);
  std::vector<float> wantG(rows * N), wantU(rows * N);
  gen_cpu::swigluGrad50(rows, gate.data(), up.data(), du.data(), wantG.data(),
                        wantU.data());
  std::vector<float> gotG(maxRows * N, kSentinel), gotU(maxRows * N, kSentinel);
  int64_t devRows = rows;
  gen_cuda::launch(gen_cuda::swigluGrad50, &devRows, maxRows, gate.data(),
                   up.data(), du.data(), gotG.data(), gotU.data());
  expectClose(gotG.data(), wantG.data(), rows * N, 1e-5, "dgate");
  expectClose(gotU.data(), wantU.data(), rows * N, 1e-5, "dup");
  expectSentinel(gotG.data() + rows * N, (maxRows - rows) * N, "dgate");
  expectSentinel(gotU.data() + rows * N, (maxRows - rows) * N, "dup");

  std::vector<float> wantP(rows * N), gotP(maxRows * N, kSentinel);
  gen_cpu::geluGrad50(rows, gate.data(), du.data(), wantP.data());
  gen_cuda::launch(gen_cuda::geluGrad50, &devRows, maxRows, gate.data(),
                   du.data(), gotP.data());
  expectClose(gotP.data(), wantP.data(), rows * N, 1e-5, "dpre");
  expectSentinel(gotP.data() + rows * N, (maxRows - rows) * N, "dpre");

  // Into bf16 (a bf16 model's gradients that only products read): the f32
  // results, rounded.
  const modk_cuda::bf16 unset(kSentinel);
  std::vector<modk_cuda::bf16> bG(maxRows * N, unset), bU(maxRows * N, unset),
      bP(maxRows * N, unset);
  gen_cuda::launch(gen_cuda::swigluGrad50Bf16, &devRows, maxRows, gate.data(),
                   up.data(), du.data(), bG.data(), bU.data());
  gen_cuda::launch(gen_cuda::geluGrad50Bf16, &devRows, maxRows, gate.data(),
                   du.data(), bP.data());
  expectBf16Of(bG, gotG.data(), rows * N, unset, "dgate into bf16");
  expectBf16Of(bU, gotU.data(), rows * N, unset, "dup into bf16");
  expectBf16Of(bP, gotP.data(), rows * N, unset, "dpre into bf16");
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// The generated scatter-add of the embedding's gradient: each table row
/// has one owning block, which adds its rows in row order, so the result is
/// the CPU kernel's bit for bit (and the same again).
TEST(CudaTrainKernels, EmbedGradRepeatedTokensIsExact) {
  constexpr int D = 40;
  const int64_t rows = 300, V = 9; // every token repeats many times
  auto tokens = randomInts(rows, 71, 0, V - 1);
  auto dx = randomFloats(rows * D, 72);
  auto table0 = randomFloats(V * D, 73);
  std::vector<float> want = table0, got = table0, again = table0;
  gen_cpu::embedGrad9x40(rows, dx.data(), tokens.data(), want.data());
  gen_cuda::launchScatter<D>(gen_cuda::embedGrad9x40, &rows, rows, dx.data(),
                             tokens.data(), got.data());
  gen_cuda::launchScatter<D>(gen_cuda::embedGrad9x40, &rows, rows, dx.data(),
                             tokens.data(), again.data());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "element " << i;
  EXPECT_EQ(got, again);
  // And both are the sum: every row reached its table row once.
  std::vector<double> ref(table0.begin(), table0.end());
  for (int64_t i = 0; i < rows; ++i)
    for (int d = 0; d < D; ++d)
      ref[tokens[i] * D + d] += dx[i * D + d];
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-4 * (1 + std::abs(ref[i]))) << i;
}

TEST(CudaTrainKernels, EmbedGradWideRowsAndManyBuckets) {
  constexpr int D = 300; // two columns a thread
  const int64_t rows = 20, V = 600; // tokens beyond the block count
  auto tokens = randomInts(rows, 74, 0, V - 1);
  tokens[3] = tokens[11] = tokens[17] = 513; // a repeat across blocks' wrap
  auto dx = randomFloats(rows * D, 75);
  auto table0 = randomFloats(V * D, 76);
  std::vector<float> want = table0, got = table0;
  gen_cpu::embedGrad600x300(rows, dx.data(), tokens.data(), want.data());
  gen_cuda::launchScatter<D>(gen_cuda::embedGrad600x300, &rows, rows,
                             dx.data(), tokens.data(), got.data());
  EXPECT_EQ(got, want);
  EXPECT_NE(got, table0);
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

/// The gated scatter's generated gradient (S = 16, D = 40) on both targets
/// against an f64 reference: df[j] = g(r[t]) dy[t], dr[t] += g'(r[t])
/// <dy[t], f[j]>; rows past the row set are not written.
template <int G> void checkScatterGrad() {
  constexpr int S = 16, D = 40;
  const std::vector<int64_t> lens = {5, 0, 9};
  const int64_t B = 3, maxRows = 20;
  Routing rt = makeRouting(lens, S, 81 + G);
  const int64_t rows = rt.seg[B];
  rt.pos.resize(maxRows, 0);
  auto dy = randomFloats(B * S * D, 82);
  auto r = randomFloats(B * S, 83, -2.0f, 2.0f);
  auto f = randomFloats(maxRows * D, 84);
  auto dr0 = randomFloats(B * S, 85);
  std::vector<float> wantDf(maxRows * D, kSentinel), wantDr = dr0;
  std::vector<float> gotDf(maxRows * D, kSentinel), gotDr = dr0;
  if constexpr (G == GateOne) {
    gen_cpu::scatterGradOne16x40(rows, rt.seg.data(), B, rt.pos.data(),
                                 dy.data(), wantDf.data());
    gen_cuda::launch(gen_cuda::scatterGradOne16x40, rt.seg.data() + B, maxRows,
                     rt.seg.data(), B, rt.pos.data(), dy.data(), gotDf.data());
  } else {
    constexpr auto cpu = G == GateLinear ? gen_cpu::scatterGradLinear16x40
                                         : gen_cpu::scatterGradSigmoid16x40;
    constexpr auto cuda = G == GateLinear ? gen_cuda::scatterGradLinear16x40
                                          : gen_cuda::scatterGradSigmoid16x40;
    cpu(rows, rt.seg.data(), B, rt.pos.data(), dy.data(), f.data(), r.data(),
        wantDr.data(), wantDf.data(), wantDr.data());
    gen_cuda::launch(cuda, rt.seg.data() + B, maxRows, rt.seg.data(), B,
                     rt.pos.data(), dy.data(), f.data(), r.data(), gotDr.data(),
                     gotDf.data(), gotDr.data());
  }
  // The element products are the same on both targets; the dot product's
  // order differs (SIMD lanes, warp lanes).
  expectClose(gotDf.data(), wantDf.data(), rows * D, 1e-6, "df");
  expectSentinel(gotDf.data() + rows * D, (maxRows - rows) * D, "df");
  expectClose(gotDr, wantDr, 1e-5, "dr");
  std::vector<double> refDr(dr0.begin(), dr0.end());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = rt.seg[b]; j < rt.seg[b + 1]; ++j) {
      const int64_t t = b * S + rt.pos[j];
      const double rt64 = r[t], s = 1.0 / (1.0 + std::exp(-rt64));
      const double g = G == GateLinear ? rt64 : G == GateSigmoid ? s : 1.0;
      const double slope = G == GateLinear    ? 1.0
                           : G == GateSigmoid ? s * (1 - s)
                                              : 0.0;
      double dot = 0.0;
      for (int d = 0; d < D; ++d) {
        const double want = g * double(dy[t * D + d]);
        ASSERT_NEAR(gotDf[j * D + d], want, 1e-6 * (1.0 + std::fabs(want)));
        dot += double(dy[t * D + d]) * f[j * D + d];
      }
      refDr[t] += slope * dot;
    }
  for (size_t t = 0; t < refDr.size(); ++t)
    ASSERT_NEAR(gotDr[t], refDr[t], 1e-5 * (1.0 + std::fabs(refDr[t]))) << t;
}

TEST(CudaTrainKernels, GateScaleScatterGradMatchesCpu) {
  checkScatterGrad<GateLinear>();
  checkScatterGrad<GateSigmoid>();
  checkScatterGrad<GateOne>();
}

TEST(CudaTrainKernels, GatherGradMatchesCpu) {
  constexpr int S = 16, D = 40;
  const int64_t B = 3, maxRows = 24;
  Routing rt = makeRouting({7, 3, 11}, S, 91);
  const int64_t rows = rt.seg[B];
  rt.pos.resize(maxRows, 0);
  auto dxs = randomFloats(maxRows * D, 92);
  auto dx0 = randomFloats(B * S * D, 93);
  std::vector<float> want = dx0, got = dx0;
  // The kernel modc generates (8 gathered rows a sequence), both targets,
  // and an f64 reference.
  static_assert(S == 16 && D == 40, "gen_*::gatherGrad16x40");
  gen_cpu::gatherGrad16x40(rows, rt.seg.data(), B, rt.pos.data(), dxs.data(),
                           want.data(), want.data());
  gen_cuda::launch(gen_cuda::gatherGrad16x40, rt.seg.data() + B, maxRows,
                   rt.seg.data(), B, rt.pos.data(), dxs.data(), got.data(),
                   got.data());
  EXPECT_EQ(got, want); // one add per element, same as the CPU
  std::vector<double> ref(dx0.begin(), dx0.end());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = rt.seg[b]; j < rt.seg[b + 1]; ++j)
      for (int d = 0; d < D; ++d)
        ref[(b * S + rt.pos[j]) * D + d] += double(dxs[j * D + d]);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(want[i], ref[i], 1e-6 * (1.0 + std::fabs(ref[i]))) << i;
}

/// The gathers' gradients of three experts of one selection as one grouped
/// launch (modk-group-gemms; docs/cuda.md, "Grouped row kernels"): each
/// member adds its rows into the one stream gradient at its own tokens,
/// exactly as its single launch does. One member fills its row set (8 rows
/// a sequence), one has a few rows, one none; entries past a member's rows
/// hold positions of other tokens and rows of NaN, never read.
TEST(CudaTrainKernels, GroupedGatherGradsMatchTheSingleLaunches) {
  constexpr int S = 16, D = 40, C = 8, M = 3;
  const int64_t B = 3, maxRows = B * C;
  const std::vector<std::vector<int64_t>> lens = {
      {8, 8, 8}, {3, 0, 5}, {0, 0, 0}};
  // Each sequence's tokens dealt out to the members: no token twice.
  std::mt19937 gen(95);
  std::vector<Routing> rt(M);
  for (int m = 0; m < M; ++m)
    rt[m].seg.push_back(0);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> all(S);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), gen);
    size_t next = 0;
    for (int m = 0; m < M; ++m) {
      std::vector<int32_t> mine(all.begin() + next,
                                all.begin() + next + lens[m][b]);
      next += lens[m][b];
      std::sort(mine.begin(), mine.end());
      rt[m].pos.insert(rt[m].pos.end(), mine.begin(), mine.end());
      rt[m].seg.push_back(rt[m].seg.back() + lens[m][b]);
    }
  }
  std::vector<std::vector<float>> dxs(M);
  for (int m = 0; m < M; ++m) {
    const int64_t rows = rt[m].seg[B];
    dxs[m] = randomFloats(maxRows * D, 96 + m);
    std::fill(dxs[m].begin() + rows * D, dxs[m].end(),
              std::numeric_limits<float>::quiet_NaN());
    rt[m].pos.resize(maxRows, int32_t(m)); // other members' tokens, maybe
  }
  auto dx0 = randomFloats(B * S * D, 99);
  std::vector<float> want = dx0, got = dx0;
  for (int m = 0; m < M; ++m)
    gen_cuda::launch(gen_cuda::gatherGrad16x40, rt[m].seg.data() + B, maxRows,
                     rt[m].seg.data(), B, rt[m].pos.data(), dxs[m].data(),
                     want.data(), want.data());
  gen_cuda::GatherGrad16x40Group<M> group;
  for (int m = 0; m < M; ++m) {
    gen_cuda::GatherGrad16x40Member &e = group.m[m];
    e.rows = rt[m].seg.data() + B; // the count, on the device
    e.seg = rt[m].seg.data();
    e.nseg = B;
    e.pos = rt[m].pos.data();
    e.in0 = dxs[m].data();
    e.in1 = e.out0 = got.data(); // dx, in place
  }
  MODC_LAUNCH(
      gen_cuda::gatherGrad16x40Grouped<M>,
      dim3(unsigned(modk_cuda::ceilDiv(maxRows, modk_cuda::detail::kRowWarps)),
           unsigned(M)),
      modk_cuda::detail::kThreads, 0, nullptr, group);
  EXPECT_EQ(got, want);
  // And the f64 reference: every member's rows added at its tokens, the
  // other tokens untouched.
  std::vector<double> ref(dx0.begin(), dx0.end());
  for (int m = 0; m < M; ++m)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = rt[m].seg[b]; j < rt[m].seg[b + 1]; ++j)
        for (int d = 0; d < D; ++d)
          ref[(b * S + rt[m].pos[j]) * D + d] += double(dxs[m][j * D + d]);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], 1e-6 * (1.0 + std::fabs(ref[i]))) << i;
}

template <int S, int D> void checkRouterGrad(int64_t B) {
  auto x = randomFloats(B * S * D, 101 + D);
  auto w = randomFloats(D, 102);
  auto dr = randomFloats(B * S, 103);
  auto dx0 = randomFloats(B * S * D, 104);
  auto dw0 = randomFloats(D, 105);
  std::vector<float> wantDx = dx0, wantDw = dw0;
  std::vector<float> gotDx = dx0, gotDw = dw0;
  // The kernels modc generates, both targets, over the B * S tokens.
  static_assert((S == 16 && D == 40) || (S == 24 && D == 300),
                "gen_*::routerGrad<S>x<D>");
  constexpr auto cpu =
      S == 16 ? gen_cpu::routerGrad16x40 : gen_cpu::routerGrad24x300;
  constexpr auto cuda =
      S == 16 ? gen_cuda::routerGrad16x40 : gen_cuda::routerGrad24x300;
  const int64_t rows = B * S;
  cpu(rows, x.data(), w.data(), dr.data(), wantDx.data(), wantDx.data(),
      wantDw.data());
  std::vector<float> scratch(modk_cuda::row_reduce_scratch_floats(rows, D));
  gen_cuda::launchColumnSum<D>(cuda, &rows, rows, gotDw.data(), scratch.data(),
                               x.data(), w.data(), dr.data(), gotDx.data(),
                               gotDx.data(), gotDw.data());
  expectClose(gotDx, wantDx, 1e-6, "dx");
  expectClose(gotDw, wantDw, 1e-4, "dw");
  // And against f64.
  std::vector<double> refDw(dw0.begin(), dw0.end());
  for (int64_t t = 0; t < rows; ++t)
    for (int d = 0; d < D; ++d) {
      const double want = dx0[t * D + d] + double(dr[t]) * w[d];
      ASSERT_NEAR(gotDx[t * D + d], want, 1e-6 * (1.0 + std::fabs(want)));
      refDw[d] += double(dr[t]) * x[t * D + d];
    }
  for (int d = 0; d < D; ++d)
    ASSERT_NEAR(gotDw[d], refDw[d], 1e-4 * (1.0 + std::fabs(refDw[d]))) << d;
}

// Two column sums in one generated kernel: the CUDA partial rows hold both
// sums, which reduceColumns sends to their two outputs.
TEST(CudaTrainKernels, TwoColumnSumsMatchCpu) {
  constexpr int W = 40;
  const int64_t rows = 70, maxRows = 80; // three blocks, the last partial
  auto x = randomFloats(maxRows * W, 131), y = randomFloats(maxRows * W, 132);
  auto a0 = randomFloats(W, 133), b0 = randomFloats(W, 134);
  std::vector<float> wantA = a0, wantB = b0, gotA = a0, gotB = b0;
  gen_cpu::twoColumnSums40(rows, x.data(), y.data(), wantA.data(),
                           wantB.data());
  std::vector<float> scratch(
      modk_cuda::row_reduce_scratch_floats(maxRows, 2 * W));
  gen_cuda::launchColumnSums<W>(
      gen_cuda::twoColumnSums40, &rows, maxRows,
      modk_cuda::train_detail::ColOut{gotA.data(), gotB.data(), gotB.data(), W,
                                      W},
      2 * W, scratch.data(), x.data(), y.data(), gotA.data(), gotB.data());
  expectClose(gotA, wantA, 1e-5, "a");
  expectClose(gotB, wantB, 1e-5, "b");
  for (int c = 0; c < W; ++c) {
    double ra = a0[c], rb = b0[c];
    for (int64_t i = 0; i < rows; ++i) {
      ra += x[i * W + c];
      rb += double(x[i * W + c]) * y[i * W + c];
    }
    ASSERT_NEAR(gotA[c], ra, 1e-4 * (1.0 + std::fabs(ra))) << c;
    ASSERT_NEAR(gotB[c], rb, 1e-4 * (1.0 + std::fabs(rb))) << c;
  }
}

TEST(CudaTrainKernels, RouterGradMatchesCpu) {
  checkRouterGrad<16, 40>(3);
  checkRouterGrad<24, 300>(2);
}

TEST(CudaTrainKernels, PredictorGradMatchesCpu) {
  constexpr int D = 40, HID = 24, S = 20;
  const int64_t B = 2, rows = B * S;
  auto x = randomFloats(rows * D, 111);
  auto fc1w = randomFloats(HID * D, 112, -0.3f, 0.3f);
  auto fc1b = randomFloats(HID, 113);
  auto fc2w = randomFloats(HID, 114);
  auto dp = randomFloats(rows, 115);
  auto d1w = randomFloats(HID * D, 116), d1b = randomFloats(HID, 117),
       d2w = randomFloats(HID, 118), d2b = randomFloats(1, 119);
  // As modc generates it on each target: fc1's product again, the row
  // kernel (dz in place of h; the column sums db1, dfc2 and the row total
  // db2 in one partial row of 2 HID + 1 floats on CUDA), then dfc1 += dz^T x.
  std::vector<float> wh(rows * HID), w1w = d1w, w1b = d1b, w2w = d2w, w2b = d2b;
  modk_cpu::linear<HID, D>(x.data(), rows, fc1w.data(), wh.data());
  gen_cpu::predictorGrad24(rows, wh.data(), fc1b.data(), fc2w.data(),
                           dp.data(), wh.data(), w1b.data(), w2w.data(),
                           w2b.data());
  modk_cpu::linear_wgrad<HID, D>(wh.data(), rows, x.data(), w1w.data(), true);
  std::vector<float> gh(rows * HID, kSentinel), g1w = d1w, g1b = d1b, g2w = d2w,
                                                g2b = d2b;
  int64_t dRows = rows;
  modk_cuda::linear<HID, D>(x.data(), &dRows, rows, fc1w.data(), gh.data(),
                            nullptr);
  std::vector<float> scratch(
      modk_cuda::row_reduce_scratch_floats(rows, 2 * HID + 1));
  gen_cuda::launchColumnSums<HID>(
      gen_cuda::predictorGrad24, &dRows, rows,
      modk_cuda::train_detail::ColOut{g1b.data(), g2w.data(), g2b.data(), HID,
                                      HID},
      2 * HID + 1, scratch.data(), gh.data(), fc1b.data(), fc2w.data(),
      dp.data(), gh.data(), g1b.data(), g2w.data(), g2b.data());
  std::vector<float> wgradScratch(
      modk_cuda::linear_wgrad_scratch_floats<HID, D>(rows));
  modk_cuda::linear_wgrad<HID, D>(gh.data(), &dRows, rows, x.data(),
                                  g1w.data(), wgradScratch.data(), nullptr);
  expectClose(gh, wh, 1e-4, "hidden (dpre)");
  expectClose(g1w, w1w, 1e-4, "dfc1_w");
  expectClose(g1b, w1b, 1e-4, "dfc1_b");
  expectClose(g2w, w2w, 1e-4, "dfc2_w");
  expectClose(g2b, w2b, 1e-4, "dfc2_b");
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Worst error of the attention gradients, per path (0 SIMT, 1 tensor
/// cores), relative to the largest magnitude of the reference array.
double worstAttentionGradError[2] = {0.0, 0.0};

double relativeError(const float *got, const float *want, size_t n) {
  double maxAbs = 0.0, worst = 0.0;
  for (size_t i = 0; i < n; ++i)
    maxAbs = std::max(maxAbs, std::fabs(double(want[i])));
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])));
  return maxAbs > 0.0 ? worst / maxAbs : worst;
}

template <int H, int HD>
void checkAttentionGrad(const std::vector<int64_t> &lens, int S, unsigned seed,
                        bool dense, bool duplicates = false, int offset = 0) {
  constexpr int64_t LD = int64_t(H) * HD;
  const int64_t B = lens.size();
  Routing rt = makeRouting(lens, S, seed);
  if (dense)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = rt.seg[b]; i < rt.seg[b + 1]; ++i)
        rt.pos[i] = int32_t(i - rt.seg[b]);
  // Equal neighbouring positions see each other; i = 32 puts a pair across
  // the key-tile boundary, so query 31 sees key 32 of the next tile.
  if (duplicates)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = rt.seg[b] + 2; i < rt.seg[b + 1]; i += 3)
        rt.pos[i] = rt.pos[i - 1];
  const int64_t rows = rt.seg[B], maxRows = rows + 5;
  rt.pos.resize(maxRows, 0);
  // Inputs start `offset` floats into their buffers (offset 1: not 16-byte
  // aligned, the tensor-core kernels' 4-byte copies).
  auto q = randomFloats(maxRows * LD + offset, seed + 1, -2.0f, 2.0f);
  auto k = randomFloats(maxRows * LD + offset, seed + 2, -2.0f, 2.0f);
  auto v = randomFloats(maxRows * LD + offset, seed + 3);
  auto o = randomFloats(maxRows * LD + offset, seed + 4);
  auto dout = randomFloats(maxRows * LD + offset, seed + 5);
  const float *qp = q.data() + offset, *kp = k.data() + offset,
              *vp = v.data() + offset, *op = o.data() + offset,
              *dop = dout.data() + offset;
  std::vector<float> wq(rows * LD), wk(rows * LD), wv(rows * LD);
  modk_cpu::causal_attention_grad<H, HD>(qp, kp, vp, op, dop, B, rt.seg.data(),
                                         rt.pos.data(), wq.data(), wk.data(),
                                         wv.data(), false);
  // Both paths where the head dim has a tensor-core kernel.
  constexpr bool hasTc = modk_cuda::train_detail::attentionGradTcHeadDim<HD>;
  for (int tc = 0; tc <= (hasTc ? 1 : 0); ++tc) {
    SCOPED_TRACE(tc ? "tensor cores" : "SIMT");
    std::vector<float> gq(maxRows * LD, kSentinel),
        gk(maxRows * LD, kSentinel), gv(maxRows * LD, kSentinel);
    std::vector<float> scratch(
        modk_cuda::attention_grad_scratch_floats<H>(maxRows));
    attentionGradOn<H, HD>(tc, qp, kp, vp, op, dop, B, rt.seg.data(),
                           rt.pos.data(), int64_t(S), gq.data(), gk.data(),
                           gv.data(), false, scratch.data(), nullptr);
    expectClose(gq.data(), wq.data(), rows * LD, 1e-4, "dq");
    expectClose(gk.data(), wk.data(), rows * LD, 1e-4, "dk");
    expectClose(gv.data(), wv.data(), rows * LD, 1e-4, "dv");
    expectSentinel(gq.data() + rows * LD, (maxRows - rows) * LD, "dq");
    expectSentinel(gk.data() + rows * LD, (maxRows - rows) * LD, "dk");
    expectSentinel(gv.data() + rows * LD, (maxRows - rows) * LD, "dv");
    // dv into bf16 (a bf16 model: only products read it): gv rounded, the
    // other gradients unchanged.
    const modk_cuda::bf16 unset(kSentinel);
    std::vector<modk_cuda::bf16> bv(maxRows * LD, unset);
    std::vector<float> gq2(maxRows * LD, kSentinel), gk2(maxRows * LD, kSentinel);
    attentionGradOn<H, HD>(tc, qp, kp, vp, op, dop, B, rt.seg.data(),
                           rt.pos.data(), int64_t(S), gq2.data(), gk2.data(),
                           bv.data(), false, scratch.data(), nullptr);
    expectBf16Of(bv, gv.data(), rows * LD, unset, "dv into bf16");
    EXPECT_EQ(0, std::memcmp(gq2.data(), gq.data(), sizeof(float) * gq.size()));
    EXPECT_EQ(0, std::memcmp(gk2.data(), gk.data(), sizeof(float) * gk.size()));
    const std::vector<float> *got[3] = {&gq, &gk, &gv}, *want[3] = {&wq, &wk, &wv};
    for (int t = 0; t < 3; ++t)
      worstAttentionGradError[tc] = std::max(
          worstAttentionGradError[tc],
          relativeError(got[t]->data(), want[t]->data(), rows * LD));
  }
}

/// Grouped-query attention's backward (docs/model-format.md section 3): dk
/// and dv of KVH heads, each the sum over its H / KVH query heads, on both
/// kernels against the CPU prelude's (test/kernels checks that one bit for
/// bit against multi-head attention over the repeated heads).
template <int H, int KVH, int HD>
void checkGroupedQueryAttentionGrad(const std::vector<int64_t> &lens, int S,
                                    unsigned seed) {
  constexpr int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  const int64_t B = lens.size();
  Routing rt = makeRouting(lens, S, seed);
  const int64_t rows = rt.seg[B], maxRows = rows + 5;
  rt.pos.resize(maxRows, 0);
  auto q = randomFloats(maxRows * LD, seed + 1, -2.0f, 2.0f);
  auto k = randomFloats(maxRows * LDK, seed + 2, -2.0f, 2.0f);
  auto v = randomFloats(maxRows * LDK, seed + 3);
  auto o = randomFloats(maxRows * LD, seed + 4);
  auto dout = randomFloats(maxRows * LD, seed + 5);
  std::vector<float> wq(rows * LD), wk(rows * LDK), wv(rows * LDK);
  modk_cpu::causal_attention_grad<H, HD, LD, LDK, LDK, KVH>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), B, rt.seg.data(),
      rt.pos.data(), wq.data(), wk.data(), wv.data(), false);
  constexpr bool hasTc = modk_cuda::train_detail::attentionGradTcHeadDim<HD>;
  for (int tc = 0; tc <= (hasTc ? 1 : 0); ++tc) {
    SCOPED_TRACE(tc ? "tensor cores" : "SIMT");
    std::vector<float> gq(maxRows * LD, kSentinel),
        gk(maxRows * LDK, kSentinel), gv(maxRows * LDK, kSentinel);
    std::vector<float> scratch(
        modk_cuda::attention_grad_scratch_floats<H>(maxRows));
    if (tc)
      modk_cuda::causal_attention_grad<H, HD, false, true, KVH>(
          q.data(), k.data(), v.data(), o.data(), dout.data(), B, rt.seg.data(),
          rt.pos.data(), int64_t(S), gq.data(), gk.data(), gv.data(), false,
          scratch.data(), nullptr);
    else
      modk_cuda::causal_attention_grad<H, HD, false, false, KVH>(
          q.data(), k.data(), v.data(), o.data(), dout.data(), B, rt.seg.data(),
          rt.pos.data(), int64_t(S), gq.data(), gk.data(), gv.data(), false,
          scratch.data(), nullptr);
    expectClose(gq.data(), wq.data(), rows * LD, 1e-4, "dq");
    expectClose(gk.data(), wk.data(), rows * LDK, 1e-4, "dk");
    expectClose(gv.data(), wv.data(), rows * LDK, 1e-4, "dv");
    expectSentinel(gk.data() + rows * LDK, (maxRows - rows) * LDK, "dk");
    expectSentinel(gv.data() + rows * LDK, (maxRows - rows) * LDK, "dv");
  }
}

TEST(CudaTrainKernels, AttentionGradGroupedQuery) {
  checkGroupedQueryAttentionGrad<4, 2, 16>({37, 5, 0, 70}, 100, 141);
  checkGroupedQueryAttentionGrad<4, 1, 8>({40, 33}, 40, 142);
  checkGroupedQueryAttentionGrad<6, 2, 12>({50, 9}, 64, 143);
}

TEST(CudaTrainKernels, AttentionGradRoutedSegments) {
  // Lengths across tile boundaries (32), one empty, sparse positions.
  checkAttentionGrad<2, 16>({37, 5, 0, 70}, 100, 121, false);
}

TEST(CudaTrainKernels, AttentionGradDensePositions) {
  checkAttentionGrad<2, 8>({40, 33}, 40, 131, true);
}

TEST(CudaTrainKernels, AttentionGradDuplicatePositions) {
  checkAttentionGrad<1, 12>({45, 31}, 80, 141, false, true);
}

// Head dims that are not a multiple of 4 (a model's d_model / n_heads is
// any even number): the SIMT kernels pad their columns to one.
TEST(CudaTrainKernels, AttentionGradHeadDimsNotMultiplesOf4) {
  checkAttentionGrad<3, 6>({37, 5, 0, 40}, 64, 171, false);
  checkAttentionGrad<2, 10>({33, 20}, 40, 172, true, false, 1);
  checkAttentionGrad<1, 2>({45, 31}, 80, 173, false, true);
}

// The SIMT attention kernels' tiles grow with the head dim, and a block
// has at most 227 KiB on sm_90a and 163 KiB on sm_80 (docs/cuda.md).
// modk-configure-gemms refuses larger heads by its own count of these
// bytes, 200 HD + 128 floats forward and 128 (HD padded to 4, plus 1) +
// 2176 backward (configure-gemms-attention-shared.mlir: heads of 288 and
// 208 are the largest it takes); the kernels' layouts must agree.
TEST(CudaTrainKernels, SimtAttentionSharedMemoryMatchesTheCompiler) {
  namespace d = modk_cuda::detail;
  namespace td = modk_cuda::train_detail;
  constexpr size_t h100 = 227 * 1024, a100 = 163 * 1024;
  EXPECT_EQ(d::AttnSmem<136>::Bytes, 4u * (200 * 136 + 128));
  EXPECT_EQ(d::AttnSmem<256>::Bytes, 4u * (200 * 256 + 128));
  EXPECT_LE(d::AttnSmem<288>::Bytes, h100);
  EXPECT_GT(d::AttnSmem<290>::Bytes, h100);
  EXPECT_LE(d::AttnSmem<208>::Bytes, a100);
  EXPECT_GT(d::AttnSmem<210>::Bytes, a100);
  EXPECT_EQ(sizeof(float) * td::attnGradSmemFloats<290>(),
            4u * (128 * (292 + 1) + 2176));
  EXPECT_LE(sizeof(float) * td::attnGradSmemFloats<288>(), h100);
  EXPECT_LE(sizeof(float) * td::attnGradSmemFloats<208>(), a100);
}

TEST(CudaTrainKernels, AttentionGradHeadDim64) {
  checkAttentionGrad<1, 64>({50, 12}, 64, 151, false);
}

// Tensor-core head dims with several 64-row (owned) and 32-row (looped)
// tiles per segment, sparse and duplicate positions, an empty segment.
TEST(CudaTrainKernels, AttentionGradTensorCoresHeadDim32) {
  checkAttentionGrad<2, 32>({150, 0, 33, 97}, 200, 161, false);
  checkAttentionGrad<1, 32>({129, 64}, 300, 162, false, true);
}

TEST(CudaTrainKernels, AttentionGradTensorCoresHeadDim64) {
  checkAttentionGrad<1, 64>({140, 65, 7}, 256, 163, false);
}

TEST(CudaTrainKernels, AttentionGradTensorCoresUnalignedAndOddChunks) {
  checkAttentionGrad<2, 32>({70, 33}, 120, 165, false, false, 1);
  // Head dim 72: 9 n8 tiles, accumulated in 3 chunks of 3.
  checkAttentionGrad<1, 72>({66, 31}, 100, 166, false, true);
}

TEST(CudaTrainKernels, AttentionGradTensorCoresHeadDim128) {
  checkAttentionGrad<1, 128>({130, 0, 40}, 180, 164, false, true);
}

TEST(CudaTrainKernels, ReductionsAreBitwiseRepeatable) {
  // Same inputs twice: parameter gradients and attention grads are equal
  // bit for bit (no atomics; the emulation's thread timing varies per run).
  constexpr int D = 64, H = 2, HD = 16;
  const int64_t rows = 45, maxRows = 64;
  auto x = randomFloats(maxRows * D, 171), w = randomFloats(D, 172);
  auto dy = randomFloats(maxRows * D, 173);
  std::vector<float> scratch(modk_cuda::row_reduce_scratch_floats(maxRows, D));
  std::vector<float> dx1(maxRows * D), dx2(maxRows * D), dw1(D, 0.5f),
      dw2(D, 0.5f);
  const int64_t devRows = rows;
  static_assert(D == 64, "gen_cuda::rmsnormGrad64");
  gen_cuda::launchColumnSum<D>(gen_cuda::rmsnormGrad64, &devRows, maxRows,
                               dw1.data(), scratch.data(), x.data(), w.data(),
                               dy.data(), dx1.data(), dw1.data());
  gen_cuda::launchColumnSum<D>(gen_cuda::rmsnormGrad64, &devRows, maxRows,
                               dw2.data(), scratch.data(), x.data(), w.data(),
                               dy.data(), dx2.data(), dw2.data());
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);

  Routing rt = makeRouting({40, 9}, 64, 174);
  const int64_t n = rt.seg[2], LD = H * HD;
  auto q = randomFloats(n * LD, 175), k = randomFloats(n * LD, 176),
       v = randomFloats(n * LD, 177), o = randomFloats(n * LD, 178),
       dout = randomFloats(n * LD, 179);
  std::vector<float> as(modk_cuda::attention_grad_scratch_floats<H>(n));
  for (int tc = 0; tc <= 1; ++tc) { // SIMT and tensor-core attention
    std::vector<float> out[2][3];
    for (auto &run : out) {
      for (auto &t : run)
        t.assign(n * LD, 0.0f);
      attentionGradOn<H, HD>(tc, q.data(), k.data(), v.data(), o.data(),
                             dout.data(), 2, rt.seg.data(), rt.pos.data(), 64,
                             run[0].data(), run[1].data(), run[2].data(), false,
                             as.data(), nullptr);
    }
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(out[0][t], out[1][t]) << "output " << t << " path " << tc;
  }
}

TEST(CudaTrainKernels, AttentionGradWorstErrors) {
  // Reports the worst errors of the attention tests above (declared
  // earlier, so run earlier), relative to each array's largest magnitude.
  std::printf("attention_grad worst relative error: SIMT %.3g, tensor cores "
              "%.3g\n",
              worstAttentionGradError[0], worstAttentionGradError[1]);
  EXPECT_LT(worstAttentionGradError[1], 1e-5);
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

struct AdamCase {
  std::vector<std::vector<float>> p, g, m, v;
};

AdamCase makeAdamCase(const std::vector<int64_t> &sizes, unsigned seed) {
  AdamCase c;
  for (size_t i = 0; i < sizes.size(); ++i) {
    c.p.push_back(randomFloats(sizes[i], seed + 10 * i + 1));
    c.g.push_back(randomFloats(sizes[i], seed + 10 * i + 2, -0.05f, 0.05f));
    c.m.push_back(randomFloats(sizes[i], seed + 10 * i + 3, -0.01f, 0.01f));
    c.v.push_back(randomFloats(sizes[i], seed + 10 * i + 4, 1e-6f, 1e-4f));
  }
  return c;
}

/// The step's scalars of modk.optimizer after grad_scale, as modc_adamw
/// forms them (docs/model-format.md, "The AdamW step").
struct StepScalars {
  float beta1, beta2, eps, stepSize, invSqrtBc2;
  StepScalars(int64_t step, float lr, float b1, float b2, float eps)
      : beta1(b1), beta2(b2), eps(eps) {
    const double bc1 = 1.0 - std::pow(double(b1), double(step));
    const double bc2 = 1.0 - std::pow(double(b2), double(step));
    stepSize = static_cast<float>(lr / bc1);
    invSqrtBc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  }
};

/// The CPU package's modc_adamw: the norm, then the generated CPU update;
/// returns false on a non-finite norm.
bool cpuAdamw(AdamCase &c, const std::vector<int64_t> &sizes,
              const bool *decay, int64_t step, float lr, float b1, float b2,
              float eps, float wd, float clip, float *gradNorm) {
  double squares = 0.0;
  for (size_t i = 0; i < sizes.size(); ++i)
    squares += gen_cpu::gradNormTerms(c.g[i].data(), sizes[i]);
  const double norm = std::sqrt(squares);
  *gradNorm = (float)norm;
  if (!std::isfinite(norm))
    return false;
  const float scale =
      clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f;
  const StepScalars k(step, lr, b1, b2, eps);
  for (size_t i = 0; i < sizes.size(); ++i)
    gen_cpu::adamwUpdate(sizes[i], c.p[i].data(), c.g[i].data(), c.m[i].data(),
                         c.v[i].data(), scale,
                         1.0f - lr * (decay[i] ? wd : 0.0f), k.beta1, k.beta2,
                         k.eps, k.stepSize, k.invSqrtBc2);
  return true;
}

/// The CUDA package's modc_adamw: the parameter table, adamw_norm, then the
/// generated CUDA update of every parameter in one launch, launched as the
/// package launches it. `copies[i]`, where not empty, is parameter i's bf16
/// copy, which the update writes.
void runCudaAdamw(AdamCase &c, const std::vector<int64_t> &sizes,
                  const bool *decay, int64_t step, float lr, float b1, float b2,
                  float eps, float wd, float clip, float *gradNorm,
                  std::vector<std::vector<modk_cuda::bf16>> &copies) {
  const int n = int(sizes.size());
  std::vector<modk_cuda::AdamTensor> tensors(n);
  int64_t chunks = 0;
  for (int i = 0; i < n; ++i) {
    tensors[i] = {c.p[i].data(), c.g[i].data(), c.m[i].data(), c.v[i].data(),
                  copies[i].empty() ? nullptr : copies[i].data(), sizes[i],
                  chunks, decay[i] ? 1 : 0};
    chunks += modk_cuda::adamChunks(sizes[i]);
  }
  const modk_cuda::AdamTensor *table = modk_cuda::adamw_tensors(tensors, nullptr);
  ASSERT_NE(table, nullptr);
  std::vector<double> scratch(
      modk_cuda::adamw_scratch_bytes(sizes.data(), n) / 8 + 1);
  const modk_cuda::AdamCtl *ctl = modk_cuda::adamw_norm(
      gen_cuda::gradNormTerms, table, n, chunks, clip, gradNorm,
      scratch.data(), nullptr);
  const StepScalars k(step, lr, b1, b2, eps);
  // The step's scalars in device memory, in modk.optimizer's order after
  // grad_scale (decayed, beta1, beta2, eps, step_size, inv_sqrt_bc2).
  const float scalars[] = {1.0f - lr * wd, k.beta1,    k.beta2,
                           k.eps,          k.stepSize, k.invSqrtBc2};
  // Fewer blocks than chunks, so that a block updates several chunks.
  MODC_LAUNCH(gen_cuda::adamwUpdate, unsigned(std::max<int64_t>(1, chunks / 2)),
              modk_cuda::detail::kThreads, 0, nullptr, table, n, chunks, ctl,
              scalars);
}

void checkAdamw(float clip, bool expectClipped, bool poison) {
  // 20000: 3 chunks; an empty parameter owns none.
  const std::vector<int64_t> sizes = {1000, 37, 0, 20000};
  const bool decay[] = {true, false, true, true};
  const int64_t step = 3;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  AdamCase base = makeAdamCase(sizes, 161);
  if (poison)
    base.g[3][12345] = std::numeric_limits<float>::quiet_NaN();
  AdamCase want = base, got = base;
  // Parameters 0 and 3 keep bf16 copies, holding their values before the
  // step (as optimizerCopyOf leaves them).
  std::vector<std::vector<modk_cuda::bf16>> copies(sizes.size());
  for (size_t i : {size_t(0), size_t(3)})
    for (float x : base.p[i])
      copies[i].push_back(modk_cuda::bf16(x));
  const auto before = copies;
  float wantNorm = -1.0f, gotNorm = -1.0f;
  const bool ok =
      cpuAdamw(want, sizes, decay, step, lr, b1, b2, eps, wd, clip, &wantNorm);
  runCudaAdamw(got, sizes, decay, step, lr, b1, b2, eps, wd, clip, &gotNorm,
               copies);
  EXPECT_EQ(ok, !poison);
  if (poison) {
    EXPECT_FALSE(std::isfinite(gotNorm));
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(got.p[i], base.p[i]) << "params " << i << " touched";
      EXPECT_EQ(got.m[i], base.m[i]) << "m " << i << " touched";
      EXPECT_EQ(got.v[i], base.v[i]) << "v " << i << " touched";
      for (size_t j = 0; j < copies[i].size(); ++j)
        ASSERT_EQ(float(copies[i][j]), float(before[i][j]))
            << "bf16 copy " << i << " touched at " << j;
    }
    return;
  }
  EXPECT_NEAR(gotNorm, wantNorm, 1e-6 * wantNorm);
  EXPECT_EQ(clip > 0 && wantNorm > clip, expectClipped);
  for (size_t i = 0; i < sizes.size(); ++i) {
    expectClose(got.p[i], want.p[i], 1e-5, "params");
    expectClose(got.m[i], want.m[i], 1e-5, "m");
    expectClose(got.v[i], want.v[i], 1e-5, "v");
    // The copy is the new master rounded to bf16, element for element.
    for (size_t j = 0; j < copies[i].size(); ++j)
      ASSERT_EQ(float(copies[i][j]), float(modk_cuda::bf16(got.p[i][j])))
          << "bf16 copy " << i << " at " << j;
  }
}

// A step that writes a parameter's bf16 copy leaves it current: the next
// call's products reuse it without rounding the weight again, while a
// weight the step did not copy is rounded again.
TEST(CudaTrainKernels, AdamwKeepsBf16CopiesCurrent) {
  namespace d = modk_cuda::detail;
  std::vector<float> a = randomFloats(300, 5), b = randomFloats(200, 6);
  modk_cuda::declare_params_version(41);
  auto roundings = [] { return d::tmaStats().roundings; };
  const modk_cuda::bf16 *copyA, *copyB;
  {
    modk_cuda::WeightCopyScope scope; // a forward: rounds both
    const int64_t r0 = roundings();
    copyA = d::weightCopyFor(a.data(), 300, nullptr);
    copyB = d::weightCopyFor(b.data(), 200, nullptr);
    EXPECT_EQ(roundings() - r0, 2);
  }
  // The step: a's copy is current, so the optimizer takes it as it is.
  int64_t r0 = roundings();
  modk_cuda::bf16 *stepA = d::optimizerCopyOf(a.data(), 300, nullptr);
  EXPECT_EQ(stepA, copyA);
  EXPECT_EQ(roundings(), r0);
  for (float &x : a)
    x *= 0.5f; // what the update writes, master and copy alike
  for (int i = 0; i < 300; ++i)
    stepA[i] = modk_cuda::bf16(a[i]);
  for (float &x : b)
    x *= 0.5f;
  const modk_cuda::bf16 *written[] = {stepA, nullptr};
  modk_cuda::params_written(written, 2);
  {
    modk_cuda::WeightCopyScope scope; // the next forward: rounds b only
    r0 = roundings();
    EXPECT_EQ(d::weightCopyFor(a.data(), 300, nullptr), copyA);
    EXPECT_EQ(d::weightCopyFor(b.data(), 200, nullptr), copyB);
    EXPECT_EQ(roundings() - r0, 1);
    for (int i = 0; i < 200; ++i)
      ASSERT_EQ(float(copyB[i]), float(modk_cuda::bf16(b[i]))) << i;
  }
  // New values from the caller (a new version): the optimizer rounds first.
  modk_cuda::declare_params_version(42);
  r0 = roundings();
  d::optimizerCopyOf(a.data(), 300, nullptr);
  EXPECT_EQ(roundings() - r0, 1);
  modk_cuda::declare_params_version(0);
}

TEST(CudaTrainKernels, AdamwClippingActive) { checkAdamw(0.5f, true, false); }
TEST(CudaTrainKernels, AdamwClippingInactive) {
  checkAdamw(1000.0f, false, false);
}
TEST(CudaTrainKernels, AdamwNoClipNorm) { checkAdamw(0.0f, false, false); }
TEST(CudaTrainKernels, AdamwNonFiniteGradientLeavesWeights) {
  checkAdamw(1.0f, false, true);
}

} // namespace
