//===- CpuKernelsTrainTest.cpp - Tests of the CPU training kernels --------===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Checks every modk_cpu training kernel (CpuKernelsTrain.h) against fp64
/// references written here from docs/model-format.md sections 3-5, sharing
/// no code with the header, on random normal inputs with fixed seeds:
///  - each backward kernel against the analytic fp64 gradient (relative error
///    max |got - ref| / max |ref| <= 1e-4);
///  - the analytic fp64 gradients of the non-trivial kernels against central
///    finite differences (h = 1e-5) of an fp64 forward, so that the
///    references themselves are checked against the forward definition;
///  - accumulate flags with pre-filled outputs, overwrite with NaN-filled
///    outputs, M = 0, repeated tokens, determinism across thread counts.
///
//===----------------------------------------------------------------------===//

#include "CpuKernelsTrain.h"

#include "Bf16Expect.h"
#include "RowKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

constexpr double kTol = 1e-4;   // kernel vs fp64 analytic
constexpr double kFdTol = 1e-6; // fp64 analytic vs finite differences
constexpr double kFdH = 1e-5;

using Vec = std::vector<double>;

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

Vec toD(const std::vector<float> &v) { return Vec(v.begin(), v.end()); }

/// max |got - ref| / max |ref|; the reference must not be all zeros.
template <typename T> double relErr(const std::vector<T> &got, const Vec &ref) {
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

/// Central finite differences of f at x, every coordinate.
Vec fdGrad(const std::function<double(const Vec &)> &f, Vec x) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdH;
    const double fp = f(x);
    x[i] = x0 - kFdH;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * kFdH);
  }
  return g;
}

double dot(const Vec &a, const Vec &b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

double sigmoid64(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double silu64(double z) { return z * sigmoid64(z); }
double siluGrad64(double z) {
  const double s = sigmoid64(z);
  return s + z * s * (1.0 - s);
}

/// Segments of the given lengths with strictly increasing, gapped positions
/// drawn from [0, S).
void gatheredLayout(const std::vector<int64_t> &lens, int S, unsigned seed,
                    std::vector<int64_t> &seg, std::vector<int32_t> &pos) {
  std::mt19937 rng(seed);
  seg.assign(1, 0);
  pos.clear();
  for (int64_t n : lens) {
    std::vector<int32_t> all(S);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(n);
    std::sort(all.begin(), all.end());
    pos.insert(pos.end(), all.begin(), all.end());
    seg.push_back(seg.back() + n);
  }
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

/// The generated cross-entropy kernel of V classes (RowKernels.h): the
/// mean loss into losses[1] and losses[0] as row totals, the gradient of
/// that mean.
template <int V> constexpr auto crossEntropyKernel() {
  static_assert(V == 50 || V == 256 || V == 3 || V == 64,
                "RowKernels.mlir generates these");
  return V == 50    ? gen_cpu::crossEntropy50
         : V == 256 ? gen_cpu::crossEntropy256
         : V == 3   ? gen_cpu::crossEntropy3
                    : gen_cpu::crossEntropy64;
}

template <int V>
void checkCrossEntropy(int64_t rows, unsigned seed, bool alias) {
  auto z = randn(rows * V, seed, 3.0f);
  std::mt19937 rng(seed + 1);
  std::vector<int32_t> t(rows);
  for (auto &x : t)
    x = int32_t(rng() % V);
  // The mean over the rows (docs/model-format.md section 4).
  const double scale = 1.0 / double(rows);
  Vec refG(rows * V);
  double refL = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -INFINITY, sum = 0.0;
    for (int c = 0; c < V; ++c)
      mx = std::max(mx, double(z[i * V + c]));
    for (int c = 0; c < V; ++c)
      sum += std::exp(z[i * V + c] - mx);
    refL += (mx + std::log(sum) - z[i * V + t[i]]) * scale;
    for (int c = 0; c < V; ++c)
      refG[i * V + c] =
          scale * (std::exp(z[i * V + c] - mx) / sum - (c == t[i] ? 1.0 : 0.0));
  }
  std::vector<float> dz(rows * V, NAN);
  // The losses as the entry zeroes them; the kernel adds into [1] and [0].
  float losses[3] = {0.0f, 0.0f, 0.0f};
  if (alias) {
    dz = z;
    crossEntropyKernel<V>()(rows, dz.data(), t.data(), dz.data(), losses + 1,
                            losses);
  } else {
    crossEntropyKernel<V>()(rows, z.data(), t.data(), dz.data(), losses + 1,
                            losses);
  }
  EXPECT_NEAR(losses[1], refL, 1e-5 * std::fabs(refL)) << "V=" << V;
  EXPECT_EQ(losses[0], losses[1]) << "V=" << V;
  EXPECT_EQ(losses[2], 0.0f) << "V=" << V;
  EXPECT_LE(relErr(dz, refG), kTol) << "V=" << V;
  // Each row's gradient sums to zero.
  double worst = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0.0;
    for (int c = 0; c < V; ++c)
      s += dz[i * V + c];
    worst = std::max(worst, std::fabs(s));
  }
  EXPECT_LE(worst, 1e-5 * scale);
  if constexpr (V == 50) {
    // Into bf16 (a bf16 model's logits gradient, which only products
    // read): the same loss, and the f32 gradient rounded once; and the loss
    // alone (the eval entry's kernel): the same sums, bit for bit.
    std::vector<modk_cpu::bf16> dzBf16(rows * V);
    float lossesBf16[3] = {0.0f, 0.0f, 0.0f};
    gen_cpu::crossEntropy50Bf16(rows, z.data(), t.data(), dzBf16.data(),
                                lossesBf16 + 1, lossesBf16);
    EXPECT_EQ(lossesBf16[1], losses[1]);
    EXPECT_EQ(lossesBf16[0], losses[0]);
    expectRoundedCopy(dzBf16, dz, "dlogits into bf16");
    float lossOnly[3] = {0.0f, 0.0f, 0.0f};
    gen_cpu::crossEntropyLoss50(rows, z.data(), t.data(), lossOnly + 1,
                                lossOnly);
    EXPECT_EQ(lossOnly[1], losses[1]);
    EXPECT_EQ(lossOnly[0], losses[0]);
  }
}

TEST(CpuKernelsTrain, CrossEntropy) {
  checkCrossEntropy<50>(13, 1, false);   // vocab not a vector multiple
  checkCrossEntropy<256>(300, 2, false); // parallel path
  checkCrossEntropy<256>(7, 3, true);    // dlogits aliases logits
  checkCrossEntropy<3>(5, 4, false);     // shorter than one vector
}

TEST(CpuKernelsTrain, CrossEntropyLargeLogitsStayFinite) {
  constexpr int V = 64;
  std::vector<float> z(2 * V, 0.0f);
  z[3] = 1000.0f;
  z[V + 7] = -1000.0f;
  std::vector<int32_t> t = {5, 7};
  std::vector<float> dz(2 * V);
  float losses[3] = {0.0f, 0.0f, 0.0f};
  gen_cpu::crossEntropy64(2, z.data(), t.data(), dz.data(), losses + 1,
                          losses);
  // Row 0: lse = 1000, loss 1000; row 1: lse = log(63 + e^-1000), loss
  // log(63) + 1000; their mean.
  EXPECT_NEAR(losses[1], (1000.0 + std::log(63.0) + 1000.0) / 2.0, 1e-3);
  for (float g : dz)
    EXPECT_TRUE(std::isfinite(g));
  // The gradient of the mean: softmax - onehot, over two rows.
  EXPECT_NEAR(dz[3], 0.5, 1e-6);
  EXPECT_NEAR(dz[5], -0.5, 1e-6);
}

TEST(CpuKernelsTrain, BceWithLogits) {
  constexpr int S = 37;
  const int64_t B = 3, rows = B * S;
  // The kernel's constants (RowKernels.mlir): weight 0.3, two routed layers.
  const double weight = 0.3, nRouted = 2.0;
  auto z = randn(rows, 5, 4.0f);
  z[0] = 60.0f;
  z[1] = -60.0f;
  std::mt19937 rng(6);
  std::vector<int32_t> t(rows);
  for (auto &x : t)
    x = int32_t(rng() % 2);
  t[0] = 0;
  t[1] = 1;
  auto pre = randn(rows, 7);
  std::vector<float> dz = pre;
  const float init[3] = {1.5f, 2.5f, 0.25f};
  float losses[3] = {init[0], init[1], init[2]};
  gen_cpu::bce37(rows, z.data(), t.data(), dz.data(), dz.data(), losses + 2,
                 losses);
  double refL = 0.0;
  Vec refD(rows);
  const double scale = 1.0 / (double(rows) * nRouted);
  for (int64_t i = 0; i < rows; ++i) {
    const double zi = z[i], ti = t[i];
    // -log sigmoid(z) = log(1 + e^-z), -log(1 - sigmoid(z)) = log(1 + e^z),
    // in long double (no overflow at |z| = 60).
    const long double zl = zi;
    refL += double(ti ? std::log1p(std::exp(-zl)) : std::log1p(std::exp(zl)));
    const long double p = 1.0L / (1.0L + std::exp(-zl));
    refD[i] = pre[i] + weight * scale * (double(p) - ti);
  }
  // Summed in f32 over 111 terms: a relative error of at most 111 ulp.
  const double aux = refL * scale;
  EXPECT_NEAR(losses[2], init[2] + aux, 1e-5 * (init[2] + aux));
  EXPECT_NEAR(losses[0], init[0] + weight * aux,
              1e-5 * (init[0] + weight * aux));
  EXPECT_EQ(losses[1], init[1]);
  EXPECT_LE(relErr(dz, refD), 1e-6);
  // The loss alone (the eval entry's kernel): the same sums, bit for bit.
  float lossOnly[3] = {init[0], init[1], init[2]};
  gen_cpu::bceLoss37(rows, z.data(), t.data(), lossOnly + 2, lossOnly);
  EXPECT_EQ(lossOnly[2], losses[2]);
  EXPECT_EQ(lossOnly[0], losses[0]);
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

template <int N, int K> void checkLinearGrads(int64_t M, unsigned seed) {
  const int64_t Mp = std::max<int64_t>(M, 1);
  auto dy = randn(Mp * N, seed), w = randn(N * K, seed + 1),
       a = randn(Mp * K, seed + 2);
  for (bool acc : {false, true}) {
    auto preA = randn(Mp * K, seed + 3), preW = randn(N * K, seed + 4);
    std::vector<float> da = acc ? preA : std::vector<float>(Mp * K, NAN);
    std::vector<float> dw = acc ? preW : std::vector<float>(N * K, NAN);
    modk_cpu::linear_dgrad<N, K>(dy.data(), M, w.data(), da.data(), acc);
    modk_cpu::linear_wgrad<N, K>(dy.data(), M, a.data(), dw.data(), acc);
    Vec refW(N * K);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        double s = acc ? preW[n * K + k] : 0.0;
        for (int64_t i = 0; i < M; ++i)
          s += double(dy[i * N + n]) * a[i * K + k];
        refW[n * K + k] = s;
      }
    if (M == 0) {
      // Nothing to write for da; dw is the empty sum (zero) or unchanged.
      for (size_t i = 0; i < da.size(); ++i) {
        if (acc) {
          ASSERT_EQ(da[i], preA[i]);
        } else {
          ASSERT_TRUE(std::isnan(da[i]));
        }
      }
      for (size_t i = 0; i < dw.size(); ++i)
        ASSERT_EQ(double(dw[i]), refW[i]) << "M = 0, acc " << acc;
      continue;
    }
    Vec refA(M * K);
    for (int64_t i = 0; i < M; ++i)
      for (int k = 0; k < K; ++k) {
        double s = acc ? preA[i * K + k] : 0.0;
        for (int n = 0; n < N; ++n)
          s += double(dy[i * N + n]) * w[n * K + k];
        refA[i * K + k] = s;
      }
    EXPECT_LE(relErr(da, refA), kTol) << "M=" << M << " acc=" << acc;
    EXPECT_LE(relErr(dw, refW), kTol) << "M=" << M << " acc=" << acc;
  }
}

TEST(CpuKernelsTrain, LinearGrads) {
  checkLinearGrads<48, 80>(0, 10);
  checkLinearGrads<48, 80>(1, 11);
  checkLinearGrads<48, 80>(37, 12);
  checkLinearGrads<7, 3>(300, 13);
}

//===----------------------------------------------------------------------===//
// Groups of products (modk-group-gemms): slices run by run_group
//===----------------------------------------------------------------------===//

/// A grouped product's tiles (run_group over members of 0, 5 and 37 rows,
/// four slices each) compute what the member's whole product computes and
/// the fp64 reference (not always bit for bit: OpenBLAS picks its kernels
/// by shape, and a slice is a smaller product): the forward product of a
/// stacked weight whose parts (24 and 56 rows) the slices cross, read in place;
/// the input gradient's slices of K, plain and accumulating; the weight
/// gradient's slices of N, whose member of no rows zeroes its gradient or
/// leaves it. Then the same in bf16 (operands rounded, dy stored as bf16).
template <bool BF16> void checkGroupSlices(unsigned seed) {
  // Against the whole product: f32 rounding of other partial sums only.
  constexpr double kSameTol = 1e-6;
  constexpr int N1 = 24, N2 = 56, N = N1 + N2, K = 40, Members = 3;
  constexpr int Slices = 4;
  const int64_t rows[Members] = {5, 0, 37};
  using TD = std::conditional_t<BF16, modk_cpu::bf16, float>;
  std::vector<float> w1 = randn(N1 * K, seed), w2 = randn(N2 * K, seed + 1);
  std::vector<float> stackedW(w1);
  stackedW.insert(stackedW.end(), w2.begin(), w2.end());
  std::vector<std::vector<float>> a(Members), y(Members), dyF(Members);
  std::vector<std::vector<TD>> dy(Members);
  for (int m = 0; m < Members; ++m) {
    a[m] = randn(std::max<int64_t>(rows[m], 1) * K, seed + 10 + m);
    y[m].assign(std::max<int64_t>(rows[m], 1) * N, NAN);
    dyF[m] = randn(std::max<int64_t>(rows[m], 1) * N, seed + 20 + m);
    for (float v : dyF[m])
      dy[m].push_back(TD(v));
  }
  // Every tile runs once: the members hold 42 rows, enough for parallel
  // tiles (kGroupParallelRows) where OpenBLAS is the OpenMP build.
  static_assert(modk_cpu::detail::kGroupParallelRows <= 42);
  const bool parallel = openblas_get_parallel() == 2;
  std::vector<int> runs(Members * Slices, 0);
  modk_cpu::run_group<Members>(rows, Slices, [&](int m, int slice, int n) {
    EXPECT_EQ(n, parallel ? Slices : 1);
#pragma omp atomic
    ++runs[m * Slices + slice];
    modk_cpu::linear_slice<K, BF16, K, N1, N2>(
        slice, n, a[m].data(), rows[m], y[m].data(), w1.data(), w2.data());
  });
  for (int m = 0; m < Members; ++m)
    for (int slice = 0; slice < Slices; ++slice)
      EXPECT_EQ(runs[m * Slices + slice], parallel || slice == 0 ? 1 : 0);
  auto round = [](float v) { return BF16 ? modk_cpu::bf16_round(v) : v; };
  for (int m = 0; m < Members; ++m) {
    if (rows[m] == 0)
      continue;
    std::vector<float> whole(rows[m] * N, NAN);
    modk_cpu::linear<N, K, BF16>(a[m].data(), rows[m], stackedW.data(),
                                 whole.data());
    EXPECT_LE(relErr(y[m], Vec(whole.begin(), whole.end())), kSameTol)
        << "member " << m;
    Vec ref(rows[m] * N);
    for (int64_t i = 0; i < rows[m]; ++i)
      for (int n = 0; n < N; ++n) {
        double s = 0.0;
        for (int k = 0; k < K; ++k)
          s += double(round(a[m][i * K + k])) * round(stackedW[n * K + k]);
        ref[i * N + n] = s;
      }
    EXPECT_LE(relErr(y[m], ref), kTol) << "member " << m;
  }
  for (bool acc : {false, true}) {
    std::vector<std::vector<float>> da(Members), dw(Members);
    std::vector<std::vector<float>> preA(Members), preW(Members);
    for (int m = 0; m < Members; ++m) {
      preA[m] = randn(std::max<int64_t>(rows[m], 1) * K, seed + 30 + m);
      preW[m] = randn(N * K, seed + 40 + m);
      da[m] = acc ? preA[m] : std::vector<float>(preA[m].size(), NAN);
      dw[m] = acc ? preW[m] : std::vector<float>(N * K, NAN);
    }
    modk_cpu::run_group<Members>(rows, Slices, [&](int m, int slice, int n) {
      modk_cpu::linear_dgrad_slice<N, K, BF16>(
          slice, n, dy[m].data(), rows[m], stackedW.data(), da[m].data(), acc);
    });
    modk_cpu::run_group<Members>(rows, Slices, [&](int m, int slice, int n) {
      modk_cpu::linear_wgrad_slice<N, K, BF16>(slice, n, dy[m].data(), rows[m],
                                               a[m].data(), dw[m].data(), acc);
    });
    for (int m = 0; m < Members; ++m) {
      std::vector<float> wantA = acc ? preA[m] : da[m];
      std::vector<float> wantW = acc ? preW[m] : std::vector<float>(N * K, NAN);
      modk_cpu::linear_dgrad<N, K, BF16>(dy[m].data(), rows[m], stackedW.data(),
                                         wantA.data(), acc);
      modk_cpu::linear_wgrad<N, K, BF16>(dy[m].data(), rows[m], a[m].data(),
                                         wantW.data(), acc);
      if (rows[m] > 0) {
        EXPECT_LE(relErr(da[m], Vec(wantA.begin(), wantA.end())), kSameTol)
            << "member " << m << " acc " << acc;
        EXPECT_LE(relErr(dw[m], Vec(wantW.begin(), wantW.end())), kSameTol)
            << "member " << m << " acc " << acc;
      }
      Vec refW(N * K);
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) {
          double s = acc ? preW[m][n * K + k] : 0.0;
          for (int64_t i = 0; i < rows[m]; ++i)
            s += double(round(dyF[m][i * N + n])) * round(a[m][i * K + k]);
          refW[n * K + k] = s;
        }
      if (rows[m] == 0) {
        // The empty sum: zero, or the gradient as it was.
        for (size_t i = 0; i < refW.size(); ++i)
          ASSERT_EQ(double(dw[m][i]), refW[i]) << "acc " << acc;
        continue;
      }
      EXPECT_LE(relErr(dw[m], refW), kTol) << "member " << m;
      Vec refA(rows[m] * K);
      for (int64_t i = 0; i < rows[m]; ++i)
        for (int k = 0; k < K; ++k) {
          double s = acc ? preA[m][i * K + k] : 0.0;
          for (int n = 0; n < N; ++n)
            s += double(round(dyF[m][i * N + n])) * round(stackedW[n * K + k]);
          refA[i * K + k] = s;
        }
      EXPECT_LE(relErr(da[m], refA), kTol) << "member " << m;
    }
  }
}

TEST(CpuKernelsTrain, GroupSlicesF32) { checkGroupSlices<false>(70); }
TEST(CpuKernelsTrain, GroupSlicesBf16) { checkGroupSlices<true>(80); }

/// run_group starts the members with the most rows first (ties in member
/// order); run with one thread, the tiles run in that order. Members with
/// fewer rows together than kGroupParallelRows (a decode step's) run whole,
/// one slice each, in member order.
TEST(CpuKernelsTrain, GroupRunsLargestMembersFirst) {
  if (openblas_get_parallel() != 2)
    GTEST_SKIP() << "OpenBLAS is not the OpenMP build: groups run serially";
  const int64_t rows[5] = {3, 40, 0, 40, 7};
  std::vector<std::tuple<int, int, int>> seen;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  modk_cpu::run_group<5>(rows, 2, [&](int m, int slice, int slices) {
    seen.emplace_back(m, slice, slices);
  });
  const std::vector<std::tuple<int, int, int>> want = {
      {1, 0, 2}, {1, 1, 2}, {3, 0, 2}, {3, 1, 2}, {4, 0, 2},
      {4, 1, 2}, {0, 0, 2}, {0, 1, 2}, {2, 0, 2}, {2, 1, 2}};
  EXPECT_EQ(seen, want);
  seen.clear();
  const int64_t few[3] = {0, 5, 2};
  modk_cpu::run_group<3>(few, 4, [&](int m, int slice, int slices) {
    seen.emplace_back(m, slice, slices);
  });
  omp_set_num_threads(threads);
  const std::vector<std::tuple<int, int, int>> whole = {
      {0, 0, 1}, {1, 0, 1}, {2, 0, 1}};
  EXPECT_EQ(seen, whole);
}

//===----------------------------------------------------------------------===//
// RMSNorm
//===----------------------------------------------------------------------===//

/// fp64 forward of rmsnorm, then L = sum(dy * y).
double rmsnormLoss(const Vec &x, const Vec &w, const Vec &dy, int D,
                   double eps) {
  const int64_t rows = x.size() / D;
  double L = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0.0;
    for (int d = 0; d < D; ++d)
      ss += x[i * D + d] * x[i * D + d];
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    for (int d = 0; d < D; ++d)
      L += dy[i * D + d] * x[i * D + d] * inv * w[d];
  }
  return L;
}

/// Analytic fp64 gradient of rmsnormLoss w.r.t. x and w.
void rmsnormGradRef(const Vec &x, const Vec &w, const Vec &dy, int D,
                    double eps, Vec &dx, Vec &dw) {
  const int64_t rows = x.size() / D;
  dx.assign(x.size(), 0.0);
  dw.assign(D, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double *xi = &x[i * D], *gi = &dy[i * D];
    double ss = 0.0, gwx = 0.0;
    for (int d = 0; d < D; ++d) {
      ss += xi[d] * xi[d];
      gwx += gi[d] * w[d] * xi[d];
    }
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    for (int d = 0; d < D; ++d) {
      dx[i * D + d] = gi[d] * w[d] * inv - xi[d] * gwx * inv * inv * inv / D;
      dw[d] += gi[d] * xi[d] * inv;
    }
  }
}

TEST(CpuKernelsTrain, RmsNormGradFiniteDifferences) {
  const int D = 24, rows = 5;
  const double eps = 1e-5;
  auto x = toD(randn(rows * D, 20, 2.0f)), w = toD(randn(D, 21)),
       dy = toD(randn(rows * D, 22));
  Vec dx, dw;
  rmsnormGradRef(x, w, dy, D, eps, dx, dw);
  auto fdx =
      fdGrad([&](const Vec &xx) { return rmsnormLoss(xx, w, dy, D, eps); }, x);
  auto fdw =
      fdGrad([&](const Vec &ww) { return rmsnormLoss(x, ww, dy, D, eps); }, w);
  EXPECT_LE(relErr(dx, fdx), kFdTol);
  EXPECT_LE(relErr(dw, fdw), kFdTol);
}

/// modc's generated RMSNorm gradient of width D: dx overwritten, or added
/// to (acc); dw always accumulates.
template <int D>
void rmsnormGrad(const float *x, int64_t rows, const float *w, const float *dy,
                 float *dx, float *dw, bool acc) {
  static_assert(D == 24 || D == 96 || D == 256 || D == 128,
                "gen_cpu::rmsnormGrad<D>");
  constexpr auto over = D == 24    ? gen_cpu::rmsnormGrad24
                        : D == 96  ? gen_cpu::rmsnormGrad96
                        : D == 256 ? gen_cpu::rmsnormGrad256
                                   : gen_cpu::rmsnormGrad128;
  if (!acc) {
    over(rows, x, w, dy, dx, dw);
  } else if constexpr (D == 128) {
    ADD_FAILURE() << "no accumulating kernel of 128";
  } else {
    constexpr auto add = D == 24   ? gen_cpu::rmsnormGradAcc24
                         : D == 96 ? gen_cpu::rmsnormGradAcc96
                                   : gen_cpu::rmsnormGradAcc256;
    add(rows, x, w, dy, dx, dx, dw);
  }
}

template <int D> void checkRmsNormGrad(int64_t rows, unsigned seed) {
  const float eps = 1e-5f;
  auto x = randn(rows * D, seed, 2.0f), w = randn(D, seed + 1),
       dy = randn(rows * D, seed + 2);
  Vec rdx, rdw;
  rmsnormGradRef(toD(x), toD(w), toD(dy), D, eps, rdx, rdw);
  for (bool acc : {false, true}) {
    auto preX = randn(rows * D, seed + 3), preW = randn(D, seed + 4);
    std::vector<float> dx = acc ? preX : std::vector<float>(rows * D, NAN);
    std::vector<float> dw = preW; // dw always accumulates
    rmsnormGrad<D>(x.data(), rows, w.data(), dy.data(), dx.data(), dw.data(),
                   acc);
    Vec ex = rdx, ew = rdw;
    for (size_t i = 0; i < ex.size(); ++i)
      ex[i] += acc ? preX[i] : 0.0;
    for (int d = 0; d < D; ++d)
      ew[d] += preW[d];
    EXPECT_LE(relErr(dx, ex), kTol) << "D=" << D << " acc=" << acc;
    EXPECT_LE(relErr(dw, ew), kTol) << "D=" << D << " acc=" << acc;
  }
}

TEST(CpuKernelsTrain, RmsNormGrad) {
  checkRmsNormGrad<24>(5, 23);
  checkRmsNormGrad<96>(37, 24);
  checkRmsNormGrad<256>(1000, 25); // parallel path
}

TEST(CpuKernelsTrain, RmsNormGradDeterministicAcrossThreadCounts) {
  constexpr int D = 128;
  const int64_t rows = 3001;
  auto x = randn(rows * D, 26), w = randn(D, 27), dy = randn(rows * D, 28);
  std::vector<float> dx1(rows * D), dw1(D, 0.0f), dx2(rows * D), dw2(D, 0.0f);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  rmsnormGrad<D>(x.data(), rows, w.data(), dy.data(), dx1.data(), dw1.data(),
                 false);
  omp_set_num_threads(std::max(2, saved));
  rmsnormGrad<D>(x.data(), rows, w.data(), dy.data(), dx2.data(), dw2.data(),
                 false);
  omp_set_num_threads(saved);
  EXPECT_EQ(0, std::memcmp(dw1.data(), dw2.data(), sizeof(float) * D));
  EXPECT_EQ(0, std::memcmp(dx1.data(), dx2.data(), sizeof(float) * rows * D));
}

//===----------------------------------------------------------------------===//
// RoPE
//===----------------------------------------------------------------------===//

/// fp64 rope from the spec, L = sum(dy * rope(x)).
double ropeLoss(const Vec &x, const Vec &dy, int H, int HD,
                const std::vector<int32_t> &pos, double theta) {
  const int64_t rows = pos.size();
  const int half = HD / 2;
  double L = 0.0;
  for (int64_t i = 0; i < rows; ++i)
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < half; ++j) {
        const double a = pos[i] * std::pow(theta, -2.0 * j / HD);
        const int64_t o = (i * H + h) * HD;
        const double x0 = x[o + j], x1 = x[o + j + half];
        L += dy[o + j] * (x0 * std::cos(a) - x1 * std::sin(a)) +
             dy[o + j + half] * (x1 * std::cos(a) + x0 * std::sin(a));
      }
  return L;
}

/// Analytic: the transpose of the rotation applied to dy.
Vec ropeGradRef(const Vec &dy, int H, int HD, const std::vector<int32_t> &pos,
                double theta) {
  const int half = HD / 2;
  Vec g(dy.size());
  for (size_t i = 0; i < pos.size(); ++i)
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < half; ++j) {
        const double a = pos[i] * std::pow(theta, -2.0 * j / HD);
        const int64_t o = (i * H + h) * HD;
        const double g0 = dy[o + j], g1 = dy[o + j + half];
        g[o + j] = g0 * std::cos(a) + g1 * std::sin(a);
        g[o + j + half] = -g0 * std::sin(a) + g1 * std::cos(a);
      }
  return g;
}

TEST(CpuKernelsTrain, RopeGrad) {
  constexpr int H = 3, HD = 8;
  std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 30000};
  const int64_t rows = pos.size();
  const double theta = 10000.0;
  auto x = toD(randn(rows * H * HD, 30)), dy = toD(randn(rows * H * HD, 31));
  auto ref = ropeGradRef(dy, H, HD, pos, theta);
  auto fd = fdGrad(
      [&](const Vec &xx) { return ropeLoss(xx, dy, H, HD, pos, theta); }, x);
  EXPECT_LE(relErr(ref, fd), kFdTol);
  const std::vector<float> dyF(dy.begin(), dy.end());
  std::vector<float> g(dy.size());
  gen_cpu::ropeGrad3x8(rows, pos.data(), dyF.data(), g.data());
  EXPECT_LE(relErr(g, ref), kTol);
  // Into bf16 (only products read a bf16 model's rotated gradients): the
  // f32 result, rounded once.
  std::vector<modk_cpu::bf16> gBf16(dy.size());
  gen_cpu::ropeGrad3x8Bf16(rows, pos.data(), dyF.data(), gBf16.data());
  expectRoundedCopy(gBf16, g, "rope_grad into bf16");
}

TEST(CpuKernelsTrain, RopeGradInvertsRope) {
  // rope_grad after rope is the identity (rotations are orthogonal); large
  // shape for the parallel path, in place.
  constexpr int H = 8, HD = 64;
  const int64_t rows = 700;
  std::vector<int32_t> pos(rows);
  for (int64_t i = 0; i < rows; ++i)
    pos[i] = int32_t(3 * i + 1);
  auto x = randn(rows * H * HD, 32);
  auto y = x;
  gen_cpu::rope8x64(rows, pos.data(), y.data(), y.data());
  gen_cpu::ropeGrad8x64(rows, pos.data(), y.data(), y.data());
  EXPECT_LE(relErr(y, toD(x)), 1e-5);
}

//===----------------------------------------------------------------------===//
// SwiGLU and GELU
//===----------------------------------------------------------------------===//

TEST(CpuKernelsTrain, SwiGluGrad) {
  constexpr int N = 40; // gen_cpu::swigluGrad40: modc generates it
  for (int64_t rows : {int64_t(3), int64_t(2000)}) {
    const int64_t n = rows * N;
    auto g = randn(n, 40, 3.0f), u = randn(n, 41), du = randn(n, 42);
    g[0] = 30.0f;
    g[1] = -30.0f;
    g[2] = 0.0f;
    std::vector<float> dg(n, NAN), dup(n, NAN);
    gen_cpu::swigluGrad40(rows, g.data(), u.data(), du.data(), dg.data(),
                          dup.data());
    Vec rg(n), ru(n);
    for (int64_t i = 0; i < n; ++i) {
      rg[i] = double(du[i]) * u[i] * siluGrad64(g[i]);
      ru[i] = double(du[i]) * silu64(g[i]);
    }
    EXPECT_LE(relErr(dg, rg), kTol) << rows;
    EXPECT_LE(relErr(dup, ru), kTol) << rows;
    // Into bf16 (a bf16 model's gradients that only products read).
    std::vector<modk_cpu::bf16> dgB(n), dupB(n);
    gen_cpu::swigluGrad40Bf16(rows, g.data(), u.data(), du.data(), dgB.data(),
                              dupB.data());
    expectRoundedCopy(dgB, dg, "dgate into bf16");
    expectRoundedCopy(dupB, dup, "dup into bf16");
    if (rows == 3) {
      // The references against FD of L = sum(du * silu(g) * u).
      auto gd = toD(g), ud = toD(u), dud = toD(du);
      auto loss = [&](const Vec &gg, const Vec &uu) {
        double L = 0.0;
        for (int64_t i = 0; i < n; ++i)
          L += dud[i] * silu64(gg[i]) * uu[i];
        return L;
      };
      EXPECT_LE(
          relErr(rg, fdGrad([&](const Vec &gg) { return loss(gg, ud); }, gd)),
          kFdTol);
      EXPECT_LE(
          relErr(ru, fdGrad([&](const Vec &uu) { return loss(gd, uu); }, ud)),
          kFdTol);
    }
  }
}

double gelu64(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

TEST(CpuKernelsTrain, GeluGrad) {
  constexpr int N = 33; // gen_cpu::geluGrad33
  for (int64_t rows : {int64_t(4), int64_t(3000)}) {
    const int64_t n = rows * N;
    auto x = randn(n, 50, 2.5f), du = randn(n, 51);
    std::vector<float> dx(n, NAN);
    gen_cpu::geluGrad33(rows, x.data(), du.data(), dx.data());
    std::vector<modk_cpu::bf16> dxB(n);
    gen_cpu::geluGrad33Bf16(rows, x.data(), du.data(), dxB.data());
    expectRoundedCopy(dxB, dx, "dpre into bf16");
    Vec ref(n);
    for (int64_t i = 0; i < n; ++i) {
      const double xi = x[i];
      ref[i] = du[i] * (0.5 * (1.0 + std::erf(xi / std::sqrt(2.0))) +
                        xi * std::exp(-0.5 * xi * xi) / std::sqrt(2.0 * M_PI));
    }
    EXPECT_LE(relErr(dx, ref), kTol);
    if (rows == 4) {
      auto dud = toD(du);
      auto fd = fdGrad(
          [&](const Vec &xx) {
            double L = 0.0;
            for (int64_t i = 0; i < n; ++i)
              L += dud[i] * gelu64(xx[i]);
            return L;
          },
          toD(x));
      EXPECT_LE(relErr(ref, fd), kFdTol);
    }
  }
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// fp64 causal attention forward: out for all rows; scores scaled 1/sqrt(HD).
Vec attnForward(int H, int HD, const Vec &q, const Vec &k, const Vec &v,
                const std::vector<int64_t> &seg,
                const std::vector<int32_t> &pos) {
  const int64_t LD = int64_t(H) * HD;
  Vec out(q.size(), 0.0);
  for (size_t s = 0; s + 1 < seg.size(); ++s)
    for (int64_t i = seg[s]; i < seg[s + 1]; ++i)
      for (int h = 0; h < H; ++h) {
        std::vector<double> sc;
        std::vector<int64_t> js;
        for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
          if (pos[j] > pos[i])
            continue;
          double d = 0.0;
          for (int e = 0; e < HD; ++e)
            d += q[i * LD + h * HD + e] * k[j * LD + h * HD + e];
          sc.push_back(d / std::sqrt(double(HD)));
          js.push_back(j);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0.0;
        for (double &x : sc)
          sum += (x = std::exp(x - mx));
        for (size_t t = 0; t < js.size(); ++t)
          for (int e = 0; e < HD; ++e)
            out[i * LD + h * HD + e] +=
                sc[t] / sum * v[js[t] * LD + h * HD + e];
      }
  return out;
}

/// Analytic fp64 gradients of L = sum(dout * attn(q, k, v)) written
/// directly from softmax calculus (explicit P and dP, no recomputation trick).
/// With roundedO (a bf16 model's rule, docs/model-format.md): the softmax
/// gradient's sum_l P_l dP_l = dout_i . o_i is taken as dout_i . roundedO_i,
/// the attention output as the O projection reads it.
void attnGradRef(int H, int HD, const Vec &q, const Vec &k, const Vec &v,
                 const Vec &dout, const std::vector<int64_t> &seg,
                 const std::vector<int32_t> &pos, Vec &dq, Vec &dk, Vec &dv,
                 const Vec *roundedO = nullptr) {
  const int64_t LD = int64_t(H) * HD;
  const double sc = 1.0 / std::sqrt(double(HD));
  dq.assign(q.size(), 0.0);
  dk.assign(q.size(), 0.0);
  dv.assign(q.size(), 0.0);
  for (size_t s = 0; s + 1 < seg.size(); ++s)
    for (int64_t i = seg[s]; i < seg[s + 1]; ++i)
      for (int h = 0; h < H; ++h) {
        std::vector<int64_t> js;
        std::vector<double> p;
        for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
          if (pos[j] > pos[i])
            continue;
          double d = 0.0;
          for (int e = 0; e < HD; ++e)
            d += q[i * LD + h * HD + e] * k[j * LD + h * HD + e];
          p.push_back(d * sc);
          js.push_back(j);
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0.0;
        for (double &x : p)
          sum += (x = std::exp(x - mx));
        for (double &x : p)
          x /= sum;
        // dP_j = dout_i . v_j; dS_j = P_j (dP_j - sum_l P_l dP_l).
        std::vector<double> dP(js.size());
        double avg = 0.0;
        for (size_t t = 0; t < js.size(); ++t) {
          double d = 0.0;
          for (int e = 0; e < HD; ++e)
            d += dout[i * LD + h * HD + e] * v[js[t] * LD + h * HD + e];
          dP[t] = d;
          avg += p[t] * d;
        }
        if (roundedO) {
          avg = 0.0;
          for (int e = 0; e < HD; ++e)
            avg += dout[i * LD + h * HD + e] * (*roundedO)[i * LD + h * HD + e];
        }
        for (size_t t = 0; t < js.size(); ++t) {
          const double dS = p[t] * (dP[t] - avg) * sc;
          for (int e = 0; e < HD; ++e) {
            dq[i * LD + h * HD + e] += dS * k[js[t] * LD + h * HD + e];
            dk[js[t] * LD + h * HD + e] += dS * q[i * LD + h * HD + e];
            dv[js[t] * LD + h * HD + e] += p[t] * dout[i * LD + h * HD + e];
          }
        }
      }
}

TEST(CpuKernelsTrain, AttentionGradFiniteDifferences) {
  // The fp64 analytic reference against FD of the fp64 forward; segments of
  // lengths 1, 5, 40 with gapped positions, plus equal positions.
  const int H = 2, HD = 8;
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({1, 5, 40}, 100, 60, seg, pos);
  seg.push_back(seg.back() + 4);
  for (int32_t p : {3, 3, 6, 6})
    pos.push_back(p);
  const size_t n = size_t(seg.back()) * H * HD;
  auto q = toD(randn(n, 61)), k = toD(randn(n, 62)), v = toD(randn(n, 63)),
       dout = toD(randn(n, 64));
  Vec dq, dk, dv;
  attnGradRef(H, HD, q, k, v, dout, seg, pos, dq, dk, dv);
  auto L = [&](const Vec &qq, const Vec &kk, const Vec &vv) {
    return dot(dout, attnForward(H, HD, qq, kk, vv, seg, pos));
  };
  EXPECT_LE(relErr(dq, fdGrad([&](const Vec &x) { return L(x, k, v); }, q)),
            kFdTol);
  EXPECT_LE(relErr(dk, fdGrad([&](const Vec &x) { return L(q, x, v); }, k)),
            kFdTol);
  EXPECT_LE(relErr(dv, fdGrad([&](const Vec &x) { return L(q, k, x); }, v)),
            kFdTol);
}

template <int H, int HD>
void checkAttentionGrad(const std::vector<int64_t> &seg,
                        const std::vector<int32_t> &pos, unsigned seed,
                        float scale = 1.0f) {
  const size_t n = size_t(seg.back()) * H * HD;
  auto q = randn(n, seed, scale), k = randn(n, seed + 1, scale),
       v = randn(n, seed + 2), dout = randn(n, seed + 3);
  const int64_t nseg = int64_t(seg.size()) - 1;
  std::vector<float> o(n);
  modk_cpu::causal_attention<H, HD>(q.data(), k.data(), v.data(), nseg,
                                    seg.data(), pos.data(), o.data());
  std::vector<float> dq(n, NAN), dk(n, NAN), dv(n, NAN);
  modk_cpu::causal_attention_grad<H, HD>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq.data(), dk.data(), dv.data(), false);
  Vec rq, rk, rv;
  attnGradRef(H, HD, toD(q), toD(k), toD(v), toD(dout), seg, pos, rq, rk, rv);
  EXPECT_LE(relErr(dq, rq), kTol) << "dq H=" << H << " HD=" << HD;
  EXPECT_LE(relErr(dk, rk), kTol) << "dk H=" << H << " HD=" << HD;
  EXPECT_LE(relErr(dv, rv), kTol) << "dv H=" << H << " HD=" << HD;
  // dv stored as bf16 (a bf16 model, where only products read it): the f32
  // result rounded, bit for bit.
  std::vector<modk_cpu::bf16> dvBf16(n);
  std::vector<float> dq2(n, NAN), dk2(n, NAN);
  modk_cpu::causal_attention_grad<H, HD>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq2.data(), dk2.data(), dvBf16.data(), false);
  expectRoundedCopy(dvBf16, dv, "dv into bf16");
  // A bf16 model (round_o): D reads o rounded to bf16. Against the fp64
  // reference with that D (which the unrounded D misses), dv untouched; o
  // stored as bf16 (modk-store-bf16) gives the same bits.
  Vec oRounded(n);
  for (size_t i = 0; i < n; ++i)
    oRounded[i] = modk_cpu::bf16_round(o[i]);
  Vec bq, bk, bv;
  attnGradRef(H, HD, toD(q), toD(k), toD(v), toD(dout), seg, pos, bq, bk, bv,
              &oRounded);
  std::vector<float> dq3(n, NAN), dk3(n, NAN), dv3(n, NAN);
  modk_cpu::causal_attention_grad<H, HD>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq3.data(), dk3.data(), dv3.data(), true);
  EXPECT_LE(relErr(dq3, bq), kTol) << "dq, rounded o, H=" << H;
  EXPECT_LE(relErr(dk3, bk), kTol) << "dk, rounded o, H=" << H;
  EXPECT_GT(relErr(dq, bq), kTol) << "the rounding of o is visible in dq";
  EXPECT_EQ(0, std::memcmp(dv3.data(), dv.data(), sizeof(float) * n));
  std::vector<modk_cpu::bf16> oBf16(o.begin(), o.end());
  std::vector<float> dq4(n, NAN), dk4(n, NAN), dv4(n, NAN);
  modk_cpu::causal_attention_grad<H, HD>(
      q.data(), k.data(), v.data(), oBf16.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq4.data(), dk4.data(), dv4.data(), true);
  EXPECT_EQ(0, std::memcmp(dq4.data(), dq3.data(), sizeof(float) * n));
  EXPECT_EQ(0, std::memcmp(dk4.data(), dk3.data(), sizeof(float) * n));
}

TEST(CpuKernelsTrain, AttentionGradGatheredSegments) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({1, 5, 40}, 100, 65, seg, pos);
  checkAttentionGrad<2, 8>(seg, pos, 66);
  gatheredLayout({1, 5, 40, 130, 300}, 2048, 67, seg, pos);
  checkAttentionGrad<4, 32>(seg, pos, 68);
  checkAttentionGrad<8, 64>(seg, pos, 69);
  checkAttentionGrad<4, 32>(seg, pos, 70, 3.0f); // peaked softmax
}

TEST(CpuKernelsTrain, AttentionGradOddShapes) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({65, 2, 129, 63, 64}, 500, 71, seg, pos);
  checkAttentionGrad<2, 128>(seg, pos, 72);
  checkAttentionGrad<3, 24>(seg, pos, 73); // head dim not a vector multiple
  checkAttentionGrad<1, 2>(seg, pos, 74);
}

TEST(CpuKernelsTrain, AttentionGradDenseAndEqualPositions) {
  constexpr int S = 200;
  std::vector<int32_t> pos(2 * S);
  std::vector<int64_t> seg(3);
  modk_cpu::identity_segments<S>(2, pos.data(), seg.data());
  checkAttentionGrad<4, 32>(seg, pos, 75);
  std::vector<int64_t> seg2 = {0, 6, 9};
  std::vector<int32_t> pos2 = {0, 2, 2, 5, 5, 5, 1, 1, 3};
  checkAttentionGrad<2, 32>(seg2, pos2, 76);
}

/// Grouped-query attention (docs/model-format.md section 3): KVH key/value
/// heads, query head h reading head h / (H / KVH). The kernels must give
/// the bits of multi-head attention over K and V with each key/value head
/// repeated for its group (Hugging Face's repeat_kv): the same outputs and
/// dq, and dk and dv the group's per-head gradients summed in head order.
template <int H, int KVH, int HD>
void checkGroupedQueryAttention(const std::vector<int64_t> &seg,
                                const std::vector<int32_t> &pos,
                                unsigned seed) {
  constexpr int G = H / KVH, D = H * HD, DK = KVH * HD;
  const int64_t rows = seg.back(), nseg = int64_t(seg.size()) - 1;
  const size_t n = size_t(rows) * D, nk = size_t(rows) * DK;
  auto q = randn(n, seed), k = randn(nk, seed + 1), v = randn(nk, seed + 2),
       dout = randn(n, seed + 3);
  std::vector<float> kr(n), vr(n); // repeated for every query head
  for (int64_t i = 0; i < rows; ++i)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < HD; ++c) {
        kr[i * D + h * HD + c] = k[i * DK + h / G * HD + c];
        vr[i * D + h * HD + c] = v[i * DK + h / G * HD + c];
      }
  std::vector<float> o(n, NAN), oRef(n, NAN);
  modk_cpu::causal_attention<H, HD, D, DK, DK, KVH>(
      q.data(), k.data(), v.data(), nseg, seg.data(), pos.data(), o.data());
  modk_cpu::causal_attention<H, HD>(q.data(), kr.data(), vr.data(), nseg,
                                    seg.data(), pos.data(), oRef.data());
  EXPECT_EQ(0, std::memcmp(o.data(), oRef.data(), sizeof(float) * n))
      << "forward H=" << H << " KVH=" << KVH;
  std::vector<float> dq(n, NAN), dk(nk, NAN), dv(nk, NAN);
  modk_cpu::causal_attention_grad<H, HD, D, DK, DK, KVH>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq.data(), dk.data(), dv.data(), false);
  std::vector<float> dqr(n, NAN), dkr(n, NAN), dvr(n, NAN);
  modk_cpu::causal_attention_grad<H, HD>(
      q.data(), kr.data(), vr.data(), oRef.data(), dout.data(), nseg,
      seg.data(), pos.data(), dqr.data(), dkr.data(), dvr.data(), false);
  EXPECT_EQ(0, std::memcmp(dq.data(), dqr.data(), sizeof(float) * n))
      << "dq H=" << H << " KVH=" << KVH;
  std::vector<float> dkSum(nk, 0.0f), dvSum(nk, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < HD; ++c) {
        dkSum[i * DK + h / G * HD + c] += dkr[i * D + h * HD + c];
        dvSum[i * DK + h / G * HD + c] += dvr[i * D + h * HD + c];
      }
  EXPECT_EQ(0, std::memcmp(dk.data(), dkSum.data(), sizeof(float) * nk))
      << "dk H=" << H << " KVH=" << KVH;
  EXPECT_EQ(0, std::memcmp(dv.data(), dvSum.data(), sizeof(float) * nk))
      << "dv H=" << H << " KVH=" << KVH;
  // And against the fp64 reference of the repeated heads.
  Vec rq, rk, rv;
  attnGradRef(H, HD, toD(q), toD(kr), toD(vr), toD(dout), seg, pos, rq, rk, rv);
  EXPECT_LE(relErr(dq, rq), kTol);
}

TEST(CpuKernelsTrain, GroupedQueryAttention) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({1, 5, 40, 70}, 200, 81, seg, pos);
  checkGroupedQueryAttention<4, 2, 8>(seg, pos, 82);
  checkGroupedQueryAttention<4, 1, 8>(seg, pos, 83); // multi-query
  checkGroupedQueryAttention<6, 2, 16>(seg, pos, 84);
  checkGroupedQueryAttention<4, 4, 8>(seg, pos, 85); // multi-head
}

/// Benchmark, not run by default: --gtest_also_run_disabled_tests.
/// Q, K and V read as columns of stacked products (modk-fuse-horizontal,
/// docs/compiler.md): q and k windows of one [rows, 3D] buffer, v a window
/// of a [rows, 2D + 5] one at column 3, their other columns random. The
/// forward and backward read each by its row stride and give the bits they
/// give for contiguous copies.
template <int H, int HD>
void checkAttentionWindows(const std::vector<int64_t> &seg,
                           const std::vector<int32_t> &pos, unsigned seed) {
  constexpr int D = H * HD, QKS = 3 * D, VS = 2 * D + 5, VOff = 3;
  const int64_t rows = seg.back(), nseg = int64_t(seg.size()) - 1;
  const size_t n = size_t(rows) * D;
  auto qk = randn(size_t(rows) * QKS, seed), vs = randn(size_t(rows) * VS, seed + 1);
  auto dout = randn(n, seed + 2);
  std::vector<float> q(n), k(n), v(n);
  for (int64_t i = 0; i < rows; ++i)
    for (int c = 0; c < D; ++c) {
      q[i * D + c] = qk[i * QKS + c];
      k[i * D + c] = qk[i * QKS + D + c];
      v[i * D + c] = vs[i * VS + VOff + c];
    }
  std::vector<float> o(n, NAN), ow(n, NAN);
  modk_cpu::causal_attention<H, HD>(q.data(), k.data(), v.data(), nseg,
                                    seg.data(), pos.data(), o.data());
  modk_cpu::causal_attention<H, HD, QKS, QKS, VS>(
      qk.data(), qk.data() + D, vs.data() + VOff, nseg, seg.data(), pos.data(),
      ow.data());
  EXPECT_EQ(0, std::memcmp(o.data(), ow.data(), sizeof(float) * n))
      << "forward H=" << H << " HD=" << HD;
  std::vector<float> dq(n, NAN), dk(n, NAN), dv(n, NAN);
  std::vector<float> dqw(n, NAN), dkw(n, NAN), dvw(n, NAN);
  modk_cpu::causal_attention_grad<H, HD>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq.data(), dk.data(), dv.data(), false);
  modk_cpu::causal_attention_grad<H, HD, QKS, QKS, VS>(
      qk.data(), qk.data() + D, vs.data() + VOff, o.data(), dout.data(), nseg,
      seg.data(), pos.data(), dqw.data(), dkw.data(), dvw.data(), false);
  EXPECT_EQ(0, std::memcmp(dq.data(), dqw.data(), sizeof(float) * n)) << "dq";
  EXPECT_EQ(0, std::memcmp(dk.data(), dkw.data(), sizeof(float) * n)) << "dk";
  EXPECT_EQ(0, std::memcmp(dv.data(), dvw.data(), sizeof(float) * n)) << "dv";
  // And the contiguous result is the right one (fp64).
  Vec rq, rk, rv;
  attnGradRef(H, HD, toD(q), toD(k), toD(v), toD(dout), seg, pos, rq, rk, rv);
  EXPECT_LE(relErr(dqw, rq), kTol);
  EXPECT_LE(relErr(dvw, rv), kTol);
}

TEST(CpuKernelsTrain, AttentionReadsColumnWindows) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({1, 5, 40, 130}, 300, 77, seg, pos);
  checkAttentionWindows<4, 32>(seg, pos, 78);
  checkAttentionWindows<3, 24>(seg, pos, 79); // head dim not a vector multiple
}

TEST(CpuKernelsTrain, DISABLED_AttentionGradBenchmark) {
  constexpr int S = 1024, H = 8, HD = 64;
  const int64_t B = 4;
  std::vector<int32_t> pos(B * S);
  std::vector<int64_t> seg(B + 1);
  modk_cpu::identity_segments<S>(B, pos.data(), seg.data());
  const size_t n = size_t(B) * S * H * HD;
  auto q = randn(n, 80), k = randn(n, 81), v = randn(n, 82),
       dout = randn(n, 83);
  std::vector<float> o(n), dq(n), dk(n), dv(n);
  auto time = [&](auto fn) {
    fn();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - t0)
                                .count());
    }
    return best;
  };
  const double tf = time([&] {
    modk_cpu::causal_attention<H, HD>(q.data(), k.data(), v.data(), B,
                                      seg.data(), pos.data(), o.data());
  });
  const double tb = time([&] {
    modk_cpu::causal_attention_grad<H, HD>(
        q.data(), k.data(), v.data(), o.data(), dout.data(), B, seg.data(),
        pos.data(), dq.data(), dk.data(), dv.data(), false);
  });
  // Causal flops: forward 2 matmuls, backward 5 matmuls of S*S/2*HD each.
  const double mm = double(B) * H * S * double(S) / 2 * HD * 2;
  std::printf("B=%ld S=%d H=%d HD=%d threads=%d\n", long(B), S, H, HD,
              omp_get_max_threads());
  std::printf("forward  %.2f ms  %.1f GFLOP/s\n", tf * 1e3, 2 * mm / tf * 1e-9);
  std::printf("backward %.2f ms  %.1f GFLOP/s (5-matmul count; 6 done)\n",
              tb * 1e3, 5 * mm / tb * 1e-9);
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

template <int G> double gate64(double r) {
  return G == GateLinear ? r : G == GateSigmoid ? sigmoid64(r) : 1.0;
}

template <int S, int D, int G>
void checkGateScaleScatterGrad(const std::vector<int64_t> &seg,
                               const std::vector<int32_t> &pos, unsigned seed,
                               bool fd) {
  const int64_t nseg = int64_t(seg.size()) - 1, rows = seg.back();
  auto dy = randn(nseg * S * D, seed), r = randn(nseg * S, seed + 1),
       f = randn(rows * D, seed + 2), pre = randn(nseg * S, seed + 3);
  std::vector<float> df(rows * D, NAN), dr = pre;
  // The kernel modc generates for this shape and gate.
  if constexpr (G == GateOne) {
    static_assert(S == 16 && D == 12, "gen_cpu::scatterGradOne16x12");
    gen_cpu::scatterGradOne16x12(rows, seg.data(), nseg, pos.data(), dy.data(),
                                 df.data());
  } else {
    constexpr auto kernel = S == 256 ? gen_cpu::scatterGradSigmoid256x160
                            : G == GateLinear
                                ? gen_cpu::scatterGradLinear16x12
                                : gen_cpu::scatterGradSigmoid16x12;
    static_assert((S == 16 && D == 12) ||
                      (S == 256 && D == 160 && G == GateSigmoid),
                  "gen_cpu::scatterGrad*");
    kernel(rows, seg.data(), nseg, pos.data(), dy.data(), f.data(), r.data(),
           dr.data(), df.data(), dr.data());
  }
  Vec rdf(rows * D), rdr(pre.begin(), pre.end()), rdrOnly(nseg * S, 0.0);
  for (int64_t s = 0; s < nseg; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
      const int64_t t = s * S + pos[j];
      const double rt = r[t];
      const double gp = G == GateLinear    ? 1.0
                        : G == GateSigmoid ? sigmoid64(rt) * (1 - sigmoid64(rt))
                                           : 0.0;
      double d = 0.0;
      for (int e = 0; e < D; ++e) {
        rdf[j * D + e] = gate64<G>(rt) * dy[t * D + e];
        d += double(dy[t * D + e]) * f[j * D + e];
      }
      rdr[t] += gp * d;
      rdrOnly[t] += gp * d;
    }
  EXPECT_LE(relErr(df, rdf), kTol) << "G=" << G;
  EXPECT_LE(relErr(dr, rdr), kTol) << "G=" << G;
  if (G == GateOne) {
    for (size_t i = 0; i < dr.size(); ++i)
      ASSERT_EQ(dr[i], pre[i]) << "GateOne has no router gradient";
  }
  if (!fd)
    return;
  // L = sum(dy * y), y = x + scatter(g(r) f): FD in f and r.
  auto dyd = toD(dy);
  auto L = [&](const Vec &rr, const Vec &ff) {
    double acc = 0.0;
    for (int64_t s = 0; s < nseg; ++s)
      for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
        const int64_t t = s * S + pos[j];
        for (int e = 0; e < D; ++e)
          acc += dyd[t * D + e] * gate64<G>(rr[t]) * ff[j * D + e];
      }
    return acc;
  };
  auto rd = toD(r), fdv = toD(f);
  EXPECT_LE(relErr(rdf, fdGrad([&](const Vec &x) { return L(rd, x); }, fdv)),
            kFdTol);
  if (G != GateOne) {
    EXPECT_LE(
        relErr(rdrOnly, fdGrad([&](const Vec &x) { return L(x, fdv); }, rd)),
        kFdTol);
  }
}

TEST(CpuKernelsTrain, GateScaleScatterGrad) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({3, 7, 1}, 16, 90, seg, pos);
  checkGateScaleScatterGrad<16, 12, GateLinear>(seg, pos, 91, true);
  checkGateScaleScatterGrad<16, 12, GateSigmoid>(seg, pos, 92, true);
  checkGateScaleScatterGrad<16, 12, GateOne>(seg, pos, 93, true);
  gatheredLayout({100, 128, 7, 128}, 256, 94, seg, pos);
  checkGateScaleScatterGrad<256, 160, GateSigmoid>(seg, pos, 95, false);
}

TEST(CpuKernelsTrain, GatherGrad) {
  constexpr int S = 64, D = 300;
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({10, 64, 0, 33}, S, 100, seg, pos);
  const int64_t nseg = int64_t(seg.size()) - 1, rows = seg.back();
  auto dxs = randn(rows * D, 101), pre = randn(nseg * S * D, 102);
  std::vector<float> dx = pre;
  // The kernel modc generates (gen_cpu::gatherGrad64x300), in place.
  static_assert(S == 64 && D == 300, "gen_cpu::gatherGrad64x300");
  gen_cpu::gatherGrad64x300(rows, seg.data(), nseg, pos.data(), dxs.data(),
                            dx.data(), dx.data());
  Vec ref(pre.begin(), pre.end());
  for (int64_t s = 0; s < nseg; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j)
      for (int e = 0; e < D; ++e)
        ref[(s * S + pos[j]) * D + e] += dxs[j * D + e];
  EXPECT_LE(relErr(dx, ref), 1e-6);
}

template <int S, int D> void checkRouterGrad(int64_t B, unsigned seed) {
  auto x = randn(B * S * D, seed), w = randn(D, seed + 1),
       dr = randn(B * S, seed + 2), preX = randn(B * S * D, seed + 3),
       preW = randn(D, seed + 4);
  std::vector<float> dx = preX, dw = preW;
  // The kernel modc generates, over the B * S tokens.
  static_assert((S == 5 && D == 24) || (S == 256 && D == 128),
                "gen_cpu::routerGrad<S>x<D>");
  constexpr auto kernel =
      S == 5 ? gen_cpu::routerGrad5x24 : gen_cpu::routerGrad256x128;
  kernel(B * S, x.data(), w.data(), dr.data(), dx.data(), dx.data(), dw.data());
  Vec rx(preX.begin(), preX.end()), rw(preW.begin(), preW.end());
  for (int64_t t = 0; t < B * S; ++t)
    for (int d = 0; d < D; ++d) {
      rx[t * D + d] += double(dr[t]) * w[d];
      rw[d] += double(dr[t]) * x[t * D + d];
    }
  EXPECT_LE(relErr(dx, rx), kTol);
  EXPECT_LE(relErr(dw, rw), kTol);
}

// Two column sums in one generated kernel (the CPU sums them in one
// buffer, then adds each into its output): a += sum of x, b += sum x * y.
TEST(CpuKernelsTrain, TwoColumnSums) {
  constexpr int W = 40;
  const int64_t rows = 1000; // rows * W past the parallel threshold
  auto x = randn(rows * W, 120), y = randn(rows * W, 121), a0 = randn(W, 122),
       b0 = randn(W, 123);
  std::vector<float> a = a0, b = b0;
  gen_cpu::twoColumnSums40(rows, x.data(), y.data(), a.data(), b.data());
  Vec ra(a0.begin(), a0.end()), rb(b0.begin(), b0.end());
  for (int64_t i = 0; i < rows; ++i)
    for (int c = 0; c < W; ++c) {
      ra[c] += x[i * W + c];
      rb[c] += double(x[i * W + c]) * y[i * W + c];
    }
  EXPECT_LE(relErr(a, ra), kTol);
  EXPECT_LE(relErr(b, rb), kTol);
}

TEST(CpuKernelsTrain, RouterGrad) {
  checkRouterGrad<5, 24>(2, 110);
  checkRouterGrad<256, 128>(4, 111); // parallel path
}

/// fp64 predictor forward, L = sum(dp * p).
double predictorLoss(const Vec &x, int64_t rows, int D, int HID, const Vec &w1,
                     const Vec &b1, const Vec &w2, const Vec &b2,
                     const Vec &dp) {
  double L = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double p = b2[0];
    for (int j = 0; j < HID; ++j) {
      double z = b1[j];
      for (int d = 0; d < D; ++d)
        z += w1[j * D + d] * x[i * D + d];
      p += w2[j] * silu64(z);
    }
    L += dp[i] * p;
  }
  return L;
}

template <int D, int HID>
void checkPredictorGrad(int64_t rows, unsigned seed, bool fd) {
  auto x = randn(rows * D, seed), w1 = randn(HID * D, seed + 1, 0.3f),
       b1 = randn(HID, seed + 2), w2 = randn(HID, seed + 3),
       b2 = randn(1, seed + 4), dp = randn(rows, seed + 5);
  auto p1w = randn(HID * D, seed + 6), p1b = randn(HID, seed + 7),
       p2w = randn(HID, seed + 8), p2b = randn(1, seed + 9);
  std::vector<float> hidden(rows * HID, NAN), g1w = p1w, g1b = p1b, g2w = p2w,
                                              g2b = p2b;
  // As modc generates it: fc1's product again, the row kernel (dz in place
  // of h, the column sums db1 and dfc2, the row total db2), then
  // dfc1 += dz^T x.
  static_assert(HID == 10 || HID == 128, "gen_cpu::predictorGrad<HID>");
  constexpr auto grad =
      HID == 10 ? gen_cpu::predictorGrad10 : gen_cpu::predictorGrad128;
  modk_cpu::linear<HID, D>(x.data(), rows, w1.data(), hidden.data());
  grad(rows, hidden.data(), b1.data(), w2.data(), dp.data(), hidden.data(),
       g1b.data(), g2w.data(), g2b.data());
  modk_cpu::linear_wgrad<HID, D>(hidden.data(), rows, x.data(), g1w.data(),
                                 true);
  // Analytic fp64.
  Vec r1w(HID * D, 0.0), r1b(HID, 0.0), r2w(HID, 0.0), r2b(1, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    r2b[0] += dp[i];
    for (int j = 0; j < HID; ++j) {
      double z = b1[j];
      for (int d = 0; d < D; ++d)
        z += double(w1[j * D + d]) * x[i * D + d];
      r2w[j] += dp[i] * silu64(z);
      const double dz = dp[i] * w2[j] * siluGrad64(z);
      r1b[j] += dz;
      for (int d = 0; d < D; ++d)
        r1w[j * D + d] += dz * x[i * D + d];
    }
  }
  auto plus = [](const Vec &a, const std::vector<float> &b) {
    Vec c = a;
    for (size_t i = 0; i < c.size(); ++i)
      c[i] += b[i];
    return c;
  };
  EXPECT_LE(relErr(g1w, plus(r1w, p1w)), kTol);
  EXPECT_LE(relErr(g1b, plus(r1b, p1b)), kTol);
  EXPECT_LE(relErr(g2w, plus(r2w, p2w)), kTol);
  EXPECT_LE(relErr(g2b, plus(r2b, p2b)), kTol);
  if (!fd)
    return;
  auto xd = toD(x), w1d = toD(w1), b1d = toD(b1), w2d = toD(w2), b2d = toD(b2),
       dpd = toD(dp);
  EXPECT_LE(relErr(r1w, fdGrad(
                            [&](const Vec &a) {
                              return predictorLoss(xd, rows, D, HID, a, b1d,
                                                   w2d, b2d, dpd);
                            },
                            w1d)),
            kFdTol);
  EXPECT_LE(relErr(r1b, fdGrad(
                            [&](const Vec &a) {
                              return predictorLoss(xd, rows, D, HID, w1d, a,
                                                   w2d, b2d, dpd);
                            },
                            b1d)),
            kFdTol);
  EXPECT_LE(relErr(r2w, fdGrad(
                            [&](const Vec &a) {
                              return predictorLoss(xd, rows, D, HID, w1d, b1d,
                                                   a, b2d, dpd);
                            },
                            w2d)),
            kFdTol);
  EXPECT_LE(relErr(r2b, fdGrad(
                            [&](const Vec &a) {
                              return predictorLoss(xd, rows, D, HID, w1d, b1d,
                                                   w2d, a, dpd);
                            },
                            b2d)),
            kFdTol);
}

TEST(CpuKernelsTrain, PredictorGrad) {
  checkPredictorGrad<12, 10>(7, 120, true);
  checkPredictorGrad<128, 128>(1000, 121, false); // parallel path
}

//===----------------------------------------------------------------------===//
// Embedding, norms, optimiser
//===----------------------------------------------------------------------===//

/// The embedding's gradient, generated as a scatter-add (modk-generalize):
/// rows with equal tokens add in row order, so the result is the f32 sum in
/// row order bit for bit, at any thread count, and the fp64 sum to 1e-5.
TEST(CpuKernelsTrain, EmbedGradRepeatedTokens) {
  constexpr int D = 40, V = 9;
  for (int64_t rows : {int64_t(50), int64_t(2000)}) {
    std::mt19937 rng(130);
    std::vector<int32_t> tok(rows);
    for (auto &t : tok)
      t = int32_t(rng() % V);
    tok[0] = tok[1] = tok[2] = 4;
    auto dx = randn(rows * D, 131), pre = randn(V * D, 132);
    std::vector<float> table = pre, inOrder = pre;
    gen_cpu::embedGrad9x40(rows, dx.data(), tok.data(), table.data());
    Vec ref(pre.begin(), pre.end());
    for (int64_t i = 0; i < rows; ++i)
      for (int d = 0; d < D; ++d) {
        ref[tok[i] * D + d] += dx[i * D + d];
        inOrder[tok[i] * D + d] += dx[i * D + d];
      }
    EXPECT_LE(relErr(table, ref), 1e-5) << rows;
    EXPECT_EQ(table, inOrder) << rows;
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      std::vector<float> again = pre;
      omp_set_num_threads(threads);
      gen_cpu::embedGrad9x40(rows, dx.data(), tok.data(), again.data());
      EXPECT_EQ(again, table) << rows << " rows, " << threads << " threads";
    }
    omp_set_num_threads(saved);
  }
  // Wider than a thread's block of columns, with more table rows.
  constexpr int DW = 300, VW = 600;
  const int64_t rows = 700;
  std::vector<int32_t> tok(rows);
  for (int64_t i = 0; i < rows; ++i)
    tok[i] = int32_t((i * 37) % VW);
  tok[5] = tok[9] = 599;
  auto dx = randn(rows * DW, 133), pre = randn(size_t(VW) * DW, 134);
  std::vector<float> table = pre;
  gen_cpu::embedGrad600x300(rows, dx.data(), tok.data(), table.data());
  Vec ref(pre.begin(), pre.end());
  for (int64_t i = 0; i < rows; ++i)
    for (int d = 0; d < DW; ++d)
      ref[tok[i] * DW + d] += dx[i * DW + d];
  EXPECT_LE(relErr(table, ref), 1e-5);
}

/// The generated gradient norm's sum (modk.optimizer's `norm`: g * g in
/// f64) of a tensor, against the plain f64 sum, and the same bits at any
/// thread count (fixed chunks, added in order).
TEST(CpuKernelsTrain, GradNormTerms) {
  for (int64_t n : {int64_t(1), int64_t(1001), int64_t(300000)}) {
    auto x = randn(n, 140 + unsigned(n % 7));
    double ref = 0.0;
    for (float v : x)
      ref += double(v) * v;
    const double got = gen_cpu::gradNormTerms(x.data(), n);
    EXPECT_NEAR(got, ref, 1e-12 * ref) << n;
    const int saved = omp_get_max_threads();
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(gen_cpu::gradNormTerms(x.data(), n), got) << n << " " << threads;
    }
    omp_set_num_threads(saved);
  }
}

/// One AdamW step of the generated update (modk.optimizer @adamw), with the
/// step's scalars formed as modc_adamw forms them (docs/model-format.md,
/// "The AdamW step").
void adamwStep(float *p, const float *g, float *m, float *v, int64_t n,
               float lr, float beta1, float beta2, float eps, float weightDecay,
               float gradScale, int64_t step) {
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  gen_cpu::adamwUpdate(n, p, g, m, v, gradScale, 1.0f - lr * weightDecay, beta1,
                       beta2, eps, static_cast<float>(lr / bc1),
                       static_cast<float>(1.0 / std::sqrt(bc2)));
}

TEST(CpuKernelsTrain, AdamW) {
  const int64_t n = 50000; // parallel path
  auto p = randn(n, 150), m0 = randn(n, 151, 0.1f);
  const std::vector<float> p0 = p;
  std::vector<float> m = m0, v(n);
  auto v0 = randn(n, 152, 0.1f);
  for (int64_t i = 0; i < n; ++i)
    v[i] = v0[i] * v0[i];
  Vec pr(p.begin(), p.end()), mr(m.begin(), m.end()), vr(v.begin(), v.end());
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
  for (int64_t step = 1; step <= 3; ++step) {
    auto g = randn(n, 160 + unsigned(step));
    adamwStep(p.data(), g.data(), m.data(), v.data(), n, float(lr), float(b1),
              float(b2), float(eps), float(wd), float(gs), step);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i] * gs;
      mr[i] = b1 * mr[i] + (1 - b1) * gi;
      vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
      const double mh = mr[i] / (1 - std::pow(b1, step));
      const double vh = vr[i] / (1 - std::pow(b2, step));
      pr[i] -= lr * wd * pr[i];
      pr[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  // Compare the total update, not p itself (p barely moves in 3 steps).
  std::vector<float> dp(n);
  Vec dpr(n);
  for (int64_t i = 0; i < n; ++i) {
    dp[i] = p[i] - p0[i];
    dpr[i] = pr[i] - p0[i];
  }
  EXPECT_LE(relErr(dp, dpr), 1e-4);
  EXPECT_LE(relErr(m, mr), 1e-6);
  EXPECT_LE(relErr(v, vr), 1e-6);
}

} // namespace
