//===- CudaBf16EmuTest.cpp - bf16 products of the CUDA kernels (emulated) -===//
//
// A bf16 model's products round both operands to bf16 and accumulate in f32:
// the CUDA GEMMs (bf16 mma.m16n8k8 on the tensor-core path, rounded shared
// tiles on the SIMT path) against an fp64 product of the rounded operands
// and against the CPU prelude's bf16 GEMMs; the rounding itself against its
// definition; the mma's fragment layout against a plain 16x8x8 product;
// the bf16 KV cache (prefill and decode steps) against the f32 one.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "CudaKernelsDecode.cuh"
#include "CudaKernelsTrain.cuh"
#include "GemmPlanHooks.h" // the plan of calls that name none

#include "CpuKernels.h"
#include "CpuKernelsDecode.h"
#include "CpuKernelsTrain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "EmuTestData.h"
#include "TensorCoreChecks.h"

#define MODC_ROW_KERNELS_CUDA 1
#include "RowKernels.h"

namespace {
using namespace modc_emu_test;
using modc_tc_check::forEachBf16GemmPath;
using modk_cuda::detail::bf16Round;

TEST(CudaBf16, RoundingMatchesDefinitionAndCpu) {
  auto bits = [](float x) { return __float_as_uint(x); };
  const float ulp = 0x1p-7f;                              // bf16 ulp at 1
  EXPECT_EQ(bits(bf16Round(1.0f + 0x1p-8f)), bits(1.0f)); // tie: to even
  EXPECT_EQ(bits(bf16Round(1.0f + 3 * 0x1p-8f)), bits(1.0f + 2 * ulp));
  EXPECT_EQ(bits(bf16Round(-(1.0f + 3 * 0x1p-8f))), bits(-(1.0f + 2 * ulp)));
  EXPECT_EQ(bits(bf16Round(std::nextafter(1.0f + 0x1p-8f, 2.0f))),
            bits(1.0f + ulp));
  EXPECT_EQ(bits(bf16Round(std::numeric_limits<float>::max())),
            bits(INFINITY)); // past the largest bf16
  EXPECT_EQ(bits(bf16Round(INFINITY)), bits(INFINITY));
  EXPECT_EQ(bits(bf16Round(-0.0f)), bits(-0.0f));
  EXPECT_TRUE(std::isnan(bf16Round(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(bf16Round(__uint_as_float(0x7f800001u))));
  for (float x : randomFloats(1 << 14, 3001, -300.0f, 300.0f)) {
    ASSERT_EQ(double(bf16Round(x)), bf16Exact(x)) << x;
    ASSERT_EQ(bits(bf16Round(x)), bits(modk_cpu::bf16_round(x))) << x;
  }
}

/// |got - want| <= tol * max(1, |want|) for every element.
void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double tol, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 8; ++i)
    if (!(std::fabs(got[i] - want[i]) <=
          tol * std::max(1.0, std::fabs(want[i])))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i];
      ++bad;
    }
}

/// y = a w^T with bf16 operands: the CUDA wrapper, the CPU prelude and an
/// fp64 product of the rounded operands agree to f32 accumulation error;
/// the f32 product is farther off than that (the rounding really happens).
template <int N, int K> void checkLinearBf16(int64_t rows, uint32_t seed) {
  auto a = randomFloats(rows * K, seed),
       w = randomFloats(int64_t(N) * K, seed + 1);
  std::vector<double> exact(rows * N), exactF32(rows * N);
  for (int64_t m = 0; m < rows; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0.0, s32 = 0.0;
      for (int k = 0; k < K; ++k) {
        s += bf16Exact(a[m * K + k]) * bf16Exact(w[n * K + k]);
        s32 += double(a[m * K + k]) * w[n * K + k];
      }
      exact[m * N + n] = s;
      exactF32[m * N + n] = s32;
    }
  std::vector<float> cpu(rows * N);
  modk_cpu::linear<N, K, true>(a.data(), rows, w.data(), cpu.data());
  expectClose(cpu, exact, 1e-5, "CPU bf16 linear");
  double offF32 = 0.0;
  for (size_t i = 0; i < exact.size(); ++i)
    offF32 = std::max(offF32, std::fabs(exact[i] - exactF32[i]));
  EXPECT_GT(offF32, 1e-3) << "bf16 and f32 products should differ";
  forEachBf16GemmPath([&] {
    std::vector<float> y(rows * N, kSentinel);
    int64_t dRows = rows;
    modk_cuda::linear<N, K, true>(a.data(), &dRows, rows, w.data(), y.data(),
                                  nullptr);
    expectClose(y, exact, 1e-5, "CUDA bf16 linear");
  });
}

TEST(CudaBf16, Linear) {
  checkLinearBf16<70, 45>(37, 3201);
  checkLinearBf16<130, 64>(129, 3202);
  // Few rows (decode steps): the CPU rounds the weight as it reads it, in
  // blocks of 512 columns.
  checkLinearBf16<40, 700>(1, 3203);
  checkLinearBf16<33, 1100>(16, 3204);
  checkLinearBf16<24, 40>(17, 3205);
}

/// The residual form (y += a w^T) with few and with many rows, on the CPU.
TEST(CudaBf16, LinearResidualFewAndManyRows) {
  constexpr int N = 30, K = 600;
  for (int64_t rows : {3, 40}) {
    auto a = randomFloats(rows * K, 3250 + rows), w = randomFloats(N * K, 3251);
    auto y0 = randomFloats(rows * N, 3252);
    std::vector<double> want(rows * N);
    for (int64_t m = 0; m < rows; ++m)
      for (int n = 0; n < N; ++n) {
        double s = y0[m * N + n];
        for (int k = 0; k < K; ++k)
          s += bf16Exact(a[m * K + k]) * bf16Exact(w[n * K + k]);
        want[m * N + n] = s;
      }
    std::vector<float> y(y0);
    modk_cpu::linear_residual<N, K, true>(a.data(), rows, w.data(), y.data());
    SCOPED_TRACE(testing::Message() << rows << " rows");
    expectClose(y, want, 1e-5, "CPU bf16 linear_residual");
  }
}

/// dgrad and wgrad (unsplit and split) with bf16 operands against fp64.
TEST(CudaBf16, DgradAndWgrad) {
  constexpr int N = 40, K = 72;
  const int64_t rows = 300;
  auto dy = randomFloats(rows * N, 3301), w = randomFloats(N * K, 3302);
  auto a = randomFloats(rows * K, 3303);
  std::vector<double> da(rows * K, 0.0), dw(N * K, 0.0);
  for (int64_t m = 0; m < rows; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        da[m * K + k] += bf16Exact(dy[m * N + n]) * bf16Exact(w[n * K + k]);
        dw[n * K + k] += bf16Exact(dy[m * N + n]) * bf16Exact(a[m * K + k]);
      }
  std::vector<float> cpuDa(rows * K), cpuDw(N * K, 0.0f);
  modk_cpu::linear_dgrad<N, K, true>(dy.data(), rows, w.data(), cpuDa.data(),
                                     false);
  modk_cpu::linear_wgrad<N, K, true>(dy.data(), rows, a.data(), cpuDw.data(),
                                     false);
  expectClose(cpuDa, da, 1e-5, "CPU bf16 dgrad");
  expectClose(cpuDw, dw, 1e-5, "CPU bf16 wgrad");
  // dy and a stored as bf16 (modk-store-bf16: the gradients of the
  // activation and of the values): the bits of the f32 operands, which
  // the products round the same way.
  std::vector<modk_cuda::bf16> dyB(dy.begin(), dy.end()), aB(a.begin(), a.end());
  {
    std::vector<modk_cpu::bf16> cdy(dy.begin(), dy.end()), ca(a.begin(), a.end());
    std::vector<float> da2(rows * K), dw2(N * K, 0.0f);
    modk_cpu::linear_dgrad<N, K, true>(cdy.data(), rows, w.data(), da2.data(),
                                       false);
    modk_cpu::linear_wgrad<N, K, true>(cdy.data(), rows, ca.data(), dw2.data(),
                                       false);
    EXPECT_EQ(0, std::memcmp(da2.data(), cpuDa.data(), sizeof(float) * da2.size()));
    EXPECT_EQ(0, std::memcmp(dw2.data(), cpuDw.data(), sizeof(float) * dw2.size()));
  }
  forEachBf16GemmPath([&] {
    int64_t dRows = rows;
    std::vector<float> gotDa(rows * K, kSentinel), gotDw(N * K, 0.0f);
    modk_cuda::linear_dgrad<N, K, true>(dy.data(), &dRows, rows, w.data(),
                                        gotDa.data(), false, nullptr);
    modk_cuda::linear_wgrad<N, K, true>(dy.data(), &dRows, rows, a.data(),
                                        gotDw.data(), nullptr);
    expectClose(gotDa, da, 1e-5, "CUDA bf16 dgrad");
    expectClose(gotDw, dw, 1e-5, "CUDA bf16 wgrad");
    std::vector<float> bDa(rows * K, kSentinel), bDw(N * K, 0.0f);
    modk_cuda::linear_dgrad<N, K, true>(dyB.data(), &dRows, rows, w.data(),
                                        bDa.data(), false, nullptr);
    modk_cuda::linear_wgrad<N, K, true>(dyB.data(), &dRows, rows, aB.data(),
                                        bDw.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(bDa.data(), gotDa.data(), sizeof(float) * bDa.size()))
        << "dgrad of a bf16 dy";
    EXPECT_EQ(0, std::memcmp(bDw.data(), gotDw.data(), sizeof(float) * bDw.size()))
        << "wgrad of bf16 dy and a";
    // Split into row chunks (scratch), summed in chunk order.
    gemm_hooks::wgradChunk() = 64;
    const int64_t floats = modk_cuda::linear_wgrad_scratch_floats<N, K>(rows);
    ASSERT_GT(floats, 0);
    std::vector<float> scratch(floats), splitDw(N * K, 0.0f),
        splitBDw(N * K, 0.0f);
    modk_cuda::linear_wgrad<N, K, true>(dy.data(), &dRows, rows, a.data(),
                                        splitDw.data(), scratch.data(),
                                        nullptr);
    modk_cuda::linear_wgrad<N, K, true>(dyB.data(), &dRows, rows, aB.data(),
                                        splitBDw.data(), scratch.data(),
                                        nullptr);
    gemm_hooks::wgradChunk() = 0;
    expectClose(splitDw, dw, 1e-5, "CUDA bf16 split wgrad");
    EXPECT_EQ(0, std::memcmp(splitBDw.data(), splitDw.data(),
                             sizeof(float) * splitDw.size()))
        << "split wgrad of bf16 dy and a";
  });
}

/// Attention inputs of a bf16 model: two sequences (70 dense rows, then 45
/// rows at every other position) and bf16 q, k, v of LD columns.
struct Bf16AttentionInputs {
  std::vector<int64_t> seg = {0, 70, 115};
  std::vector<int32_t> pos;
  std::vector<float> q, k, v;
  static constexpr int64_t kMaxSegRows = 70;
  Bf16AttentionInputs(int ld, uint32_t seed) {
    for (int i = 0; i < 70; ++i)
      pos.push_back(i);
    for (int i = 0; i < 45; ++i)
      pos.push_back(2 * i + 1);
    q = randomFloats(rows() * ld, seed, -2, 2);
    k = randomFloats(rows() * ld, seed + 1, -2, 2);
    v = randomFloats(rows() * ld, seed + 2);
    for (auto *t : {&q, &k, &v})
      for (float &x : *t)
        x = bf16Round(x);
  }
  int64_t rows() const { return seg.back(); }
};

/// causal_attention<H, HD, true> (bf16 inputs: the tensor cores skip the
/// mmas of zero tf32 lo parts) gives exactly what the full 3xTF32 kernel
/// gives on the same bf16 q, k, v: head dims whose scale keeps the queries
/// bf16 (16, 64: one mma for Q K^T) and others (32, 40, 128).
template <int H, int HD> void checkAttentionBf16(uint32_t seed) {
  constexpr int LD = H * HD;
  Bf16AttentionInputs in(LD, seed);
  const int64_t rows = in.rows();
  std::vector<float> full(rows * LD), skipped(rows * LD);
  modk_cuda::causal_attention<H, HD>(in.q.data(), in.k.data(), in.v.data(), 2,
                                     in.seg.data(), in.pos.data(),
                                     in.kMaxSegRows, full.data(), nullptr);
  modk_cuda::causal_attention<H, HD, true>(
      in.q.data(), in.k.data(), in.v.data(), 2, in.seg.data(), in.pos.data(),
      in.kMaxSegRows, skipped.data(), nullptr);
  for (int64_t i = 0; i < rows * LD; ++i)
    ASSERT_EQ(skipped[i], full[i]) << "HD " << HD << " element " << i;
}

/// The same for the backward: causal_attention_grad<H, HD, true> gives the
/// dq, dk, dv of the full 3xTF32 kernels on bf16 q, k, v (o and dout f32).
template <int H, int HD> void checkAttentionGradBf16(uint32_t seed) {
  constexpr int LD = H * HD;
  Bf16AttentionInputs in(LD, seed);
  const int64_t rows = in.rows();
  auto o = randomFloats(rows * LD, seed + 3),
       dout = randomFloats(rows * LD, seed + 4);
  std::vector<float> grads[2][3];
  for (int bf = 0; bf < 2; ++bf) {
    for (auto &g : grads[bf])
      g.assign(rows * LD, kSentinel);
    std::vector<float> scratch(
        modk_cuda::attention_grad_scratch_floats<H>(rows));
    auto run = [&](auto grad) {
      grad(in.q.data(), in.k.data(), in.v.data(), o.data(), dout.data(), 2,
           in.seg.data(), in.pos.data(), in.kMaxSegRows, grads[bf][0].data(),
           grads[bf][1].data(), grads[bf][2].data(), false, scratch.data(),
           nullptr);
    };
    if (bf)
      run(modk_cuda::causal_attention_grad<H, HD, true>);
    else
      run(modk_cuda::causal_attention_grad<H, HD>);
  }
  const char *names[3] = {"dq", "dk", "dv"};
  for (int g = 0; g < 3; ++g)
    for (int64_t i = 0; i < rows * LD; ++i)
      ASSERT_EQ(grads[1][g][i], grads[0][g][i])
          << names[g] << " HD " << HD << " element " << i;
}

TEST(CudaBf16, AttentionGradSkipsZeroLoPartsExactly) {
  checkAttentionGradBf16<2, 16>(3801);
  checkAttentionGradBf16<1, 40>(3802);
  checkAttentionGradBf16<1, 128>(3803);
}

TEST(CudaBf16, AttentionSkipsZeroLoPartsExactly) {
  checkAttentionBf16<2, 16>(3501);
  checkAttentionBf16<1, 64>(3502);
  checkAttentionBf16<2, 32>(3503);
  checkAttentionBf16<1, 40>(3504);
  checkAttentionBf16<1, 128>(3505);
}

/// fp64 causal attention of q [rows, H * HD] against k, v [rows, KVH * HD]
/// (query head h with key/value head h / (H / KVH); row i of a segment sees
/// its rows j with pos[j] <= pos[i]) and, given dout and the o the kernels
/// are passed (D = rowsum(dout * o), as they compute it), the gradients dq,
/// dk, dv.
struct Attention64 {
  std::vector<double> o, dq, dk, dv;
};
template <typename T>
Attention64 attention64(int H, int KVH, int HD, const std::vector<T> &q,
                        const std::vector<T> &k, const std::vector<T> &v,
                        const std::vector<int64_t> &seg,
                        const std::vector<int32_t> &pos,
                        const std::vector<float> *dout = nullptr,
                        const std::vector<float> *o = nullptr) {
  const int64_t LD = int64_t(H) * HD, LDK = int64_t(KVH) * HD;
  const int64_t rows = seg.back();
  const double scale = 1.0 / std::sqrt(double(HD));
  Attention64 r;
  r.o.assign(rows * LD, 0.0);
  r.dq.assign(rows * LD, 0.0);
  r.dk.assign(rows * LDK, 0.0);
  r.dv.assign(rows * LDK, 0.0);
  auto at = [](const std::vector<T> &x, int64_t i) {
    return double(float(x[i]));
  };
  for (size_t s = 0; s + 1 < seg.size(); ++s)
    for (int64_t i = seg[s]; i < seg[s + 1]; ++i)
      for (int h = 0; h < H; ++h) {
        const int64_t qo = i * LD + h * HD, kh = int64_t(h / (H / KVH)) * HD;
        std::vector<int64_t> js;
        std::vector<double> p;
        for (int64_t j = seg[s]; j < seg[s + 1]; ++j)
          if (pos[j] <= pos[i]) {
            double dot = 0.0;
            for (int d = 0; d < HD; ++d)
              dot += at(q, qo + d) * at(k, j * LDK + kh + d);
            js.push_back(j);
            p.push_back(dot * scale);
          }
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0.0;
        for (double &x : p)
          sum += (x = std::exp(x - mx));
        for (double &x : p)
          x /= sum;
        for (size_t t = 0; t < js.size(); ++t)
          for (int d = 0; d < HD; ++d)
            r.o[qo + d] += p[t] * at(v, js[t] * LDK + kh + d);
        if (!dout)
          continue;
        double D = 0.0;
        for (int d = 0; d < HD; ++d)
          D += double((*dout)[qo + d]) * double((*o)[qo + d]);
        for (size_t t = 0; t < js.size(); ++t) {
          const int64_t ko = js[t] * LDK + kh;
          double dp = 0.0;
          for (int d = 0; d < HD; ++d)
            dp += double((*dout)[qo + d]) * at(v, ko + d);
          const double ds = p[t] * (dp - D);
          for (int d = 0; d < HD; ++d) {
            r.dq[qo + d] += ds * at(k, ko + d) * scale;
            r.dk[ko + d] += ds * at(q, qo + d) * scale;
            r.dv[ko + d] += p[t] * double((*dout)[qo + d]);
          }
        }
      }
  return r;
}

/// x stored as T from element `at` on (at 1: a bf16 array that is not
/// 16-byte aligned, read one value at a time).
template <typename T>
std::vector<T> storedAs(const std::vector<float> &x, int at = 0) {
  std::vector<T> y(at + x.size(), T(0.0f));
  std::copy(x.begin(), x.end(), y.begin() + at);
  return y;
}

/// A bf16 model's attention gradient (round_o): D = rowsum(dout * o) reads
/// o rounded to bf16, as the O projection's products read it, so that o may
/// be stored as bf16 (modk-store-bf16). The CUDA kernels (TC or SIMT) and
/// the CPU ones, on o as f32 and as bf16 (from element `at` on CUDA), against
/// the fp64 gradients with that D; o's two storages give the same bits, and
/// the rounding is visible (the fp64 gradients with the unrounded D, `exact`,
/// differ by more than the tolerance).
template <int H, int HD, int KVH, bool TC>
void checkRoundedOutputGrad(
    const std::vector<float> &q, const std::vector<float> &k,
    const std::vector<float> &v, const std::vector<float> &o,
    const std::vector<float> &dout, const Bf16AttentionInputs &layout,
    const Attention64 &exact, const std::string &what, int at) {
  constexpr int LD = H * HD, LDK = KVH * HD;
  const int64_t rows = layout.rows(), nseg = int64_t(layout.seg.size()) - 1;
  std::vector<float> oRounded(o.size());
  for (size_t e = 0; e < o.size(); ++e)
    oRounded[e] = bf16Round(o[e]);
  const Attention64 want = attention64(H, KVH, HD, q, k, v, layout.seg,
                                       layout.pos, &dout, &oRounded);
  double moved = 0.0;
  for (int64_t e = 0; e < rows * LD; ++e)
    moved = std::max(moved, std::fabs(want.dq[e] - exact.dq[e]) /
                                std::max(1.0, std::fabs(exact.dq[e])));
  EXPECT_GT(moved, 1e-4) << "rounding o moves dq, " << what;
  const auto obs = storedAs<modk_cuda::bf16>(o, at);
  const auto oc = storedAs<modk_cpu::bf16>(o);
  std::vector<float> scratch(modk_cuda::attention_grad_scratch_floats<H>(rows));
  std::vector<float> dq[4], dk[4], dv[4];
  for (int i = 0; i < 4; ++i) {
    dq[i].assign(rows * LD, kSentinel);
    dk[i].assign(rows * LDK, kSentinel);
    dv[i].assign(rows * LDK, kSentinel);
  }
  auto cuda = [&](int i, auto *oIn) {
    modk_cuda::causal_attention_grad<H, HD, true, TC, KVH>(
        q.data(), k.data(), v.data(), oIn, dout.data(), nseg, layout.seg.data(),
        layout.pos.data(), layout.kMaxSegRows, dq[i].data(), dk[i].data(),
        dv[i].data(), true, scratch.data(), nullptr);
  };
  auto cpu = [&](int i, auto *oIn) {
    modk_cpu::causal_attention_grad<H, HD, LD, LDK, LDK, KVH>(
        q.data(), k.data(), v.data(), oIn, dout.data(), nseg, layout.seg.data(),
        layout.pos.data(), dq[i].data(), dk[i].data(), dv[i].data(), true);
  };
  cuda(0, o.data());
  cuda(1, obs.data() + at);
  cpu(2, o.data());
  cpu(3, oc.data());
  const char *kernels[4] = {"CUDA", "CUDA, o bf16", "CPU", "CPU, o bf16"};
  for (int i = 0; i < 4; ++i) {
    const std::string w =
        std::string(kernels[i]) + " gradients, rounded o, " + what;
    expectClose(dq[i], want.dq, 1e-4, ("dq, " + w).c_str());
    expectClose(dk[i], want.dk, 1e-4, ("dk, " + w).c_str());
    expectClose(dv[i], want.dv, 1e-4, ("dv, " + w).c_str());
  }
  for (int i = 0; i < 4; i += 2)
    for (const auto *g : {dq, dk, dv})
      ASSERT_EQ(0, std::memcmp(g[i].data(), g[i + 1].data(),
                               sizeof(float) * g[i].size()))
          << kernels[i + 1] << " against f32 o, " << what;
}

/// Attention reading q, k and v stored as bf16 (modk-store-bf16): the
/// CUDA kernels (the tensor-core ones, TC, or the SIMT ones) widen the bf16
/// tiles as they load them, the CPU ones as they pack them. On fresh bf16
/// values (none zero) both give exactly what they give on f32 arrays of the
/// same values, and agree with fp64: the forward and the gradients (dv also
/// stored bf16, as the pass stores it). `at`: the CUDA arrays' first element
/// (1: not 16-byte aligned).
template <int H, int HD, int KVH, bool TC>
void checkBf16Storage(uint32_t seed, int at = 0) {
  constexpr int LD = H * HD, LDK = KVH * HD;
  Bf16AttentionInputs layout(1, seed);
  const int64_t rows = layout.rows();
  auto values = [](size_t n, uint32_t seed) {
    auto x = randomFloats(n, seed, -2.0f, 2.0f);
    for (float &e : x) {
      e = bf16Round(e);
      if (e == 0.0f)
        e = 0.75f;
    }
    return x;
  };
  const auto q = values(rows * LD, seed + 10),
             k = values(rows * LDK, seed + 11),
             v = values(rows * LDK, seed + 12);
  const auto qbs = storedAs<modk_cuda::bf16>(q, at),
             kbs = storedAs<modk_cuda::bf16>(k, at),
             vbs = storedAs<modk_cuda::bf16>(v, at);
  const modk_cuda::bf16 *qb = qbs.data() + at, *kb = kbs.data() + at,
                        *vb = vbs.data() + at;
  const auto qc = storedAs<modk_cpu::bf16>(q), kc = storedAs<modk_cpu::bf16>(k),
             vc = storedAs<modk_cpu::bf16>(v);
  const std::string what = "HD " + std::to_string(HD) + " KVH " +
                           std::to_string(KVH) +
                           (TC ? " tensor cores" : " SIMT");
  const auto &seg = layout.seg;
  const auto &pos = layout.pos;
  const int64_t nseg = int64_t(seg.size()) - 1;

  // Forward.
  std::vector<float> outF(rows * LD, kSentinel), outB(rows * LD, kSentinel),
      cpuF(rows * LD), cpuB(rows * LD);
  modk_cuda::causal_attention<H, HD, true, TC, KVH>(
      q.data(), k.data(), v.data(), nseg, seg.data(), pos.data(),
      layout.kMaxSegRows, outF.data(), nullptr);
  modk_cuda::causal_attention<H, HD, true, TC, KVH>(
      qb, kb, vb, nseg, seg.data(), pos.data(), layout.kMaxSegRows, outB.data(),
      nullptr);
  modk_cpu::causal_attention<H, HD, LD, LDK, LDK, KVH>(
      q.data(), k.data(), v.data(), nseg, seg.data(), pos.data(), cpuF.data());
  modk_cpu::causal_attention<H, HD, LD, LDK, LDK, KVH>(
      qc.data(), kc.data(), vc.data(), nseg, seg.data(), pos.data(),
      cpuB.data());
  const Attention64 fwd = attention64(H, KVH, HD, q, k, v, seg, pos);
  // The reference from the bf16 arrays themselves: the same values.
  ASSERT_EQ(attention64(H, KVH, HD, qc, kc, vc, seg, pos).o, fwd.o);
  expectClose(outB, fwd.o, 2e-5, ("CUDA forward, " + what).c_str());
  expectClose(cpuB, fwd.o, 2e-5, ("CPU forward, " + what).c_str());
  ASSERT_EQ(0,
            std::memcmp(outB.data(), outF.data(), sizeof(float) * outF.size()))
      << "CUDA forward on bf16 arrays, " << what;
  ASSERT_EQ(0,
            std::memcmp(cpuB.data(), cpuF.data(), sizeof(float) * cpuF.size()))
      << "CPU forward on bf16 arrays, " << what;

  // Backward, with o the forward's output and a fresh dout.
  const std::vector<float> o(cpuF);
  const auto dout = randomFloats(rows * LD, seed + 13);
  const Attention64 bwd = attention64(H, KVH, HD, q, k, v, seg, pos, &dout, &o);
  std::vector<float> scratch(modk_cuda::attention_grad_scratch_floats<H>(rows));
  std::vector<float> dq[4], dk[4];
  std::vector<modk_cuda::bf16> dvG[2];
  std::vector<modk_cpu::bf16> dvC[2];
  for (int i = 0; i < 4; ++i) {
    dq[i].assign(rows * LD, kSentinel);
    dk[i].assign(rows * LDK, kSentinel);
  }
  for (int i = 0; i < 2; ++i) {
    dvG[i].assign(rows * LDK, modk_cuda::bf16(kSentinel));
    dvC[i].assign(rows * LDK, modk_cpu::bf16(kSentinel));
  }
  modk_cuda::causal_attention_grad<H, HD, true, TC, KVH>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), layout.kMaxSegRows, dq[0].data(), dk[0].data(), dvG[0].data(),
      false, scratch.data(), nullptr);
  modk_cuda::causal_attention_grad<H, HD, true, TC, KVH>(
      qb, kb, vb, o.data(), dout.data(), nseg, seg.data(), pos.data(),
      layout.kMaxSegRows, dq[1].data(), dk[1].data(), dvG[1].data(), false,
      scratch.data(), nullptr);
  modk_cpu::causal_attention_grad<H, HD, LD, LDK, LDK, KVH>(
      q.data(), k.data(), v.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq[2].data(), dk[2].data(), dvC[0].data(), false);
  modk_cpu::causal_attention_grad<H, HD, LD, LDK, LDK, KVH>(
      qc.data(), kc.data(), vc.data(), o.data(), dout.data(), nseg, seg.data(),
      pos.data(), dq[3].data(), dk[3].data(), dvC[1].data(), false);
  const char *kernels[4] = {"CUDA", "CUDA bf16", "CPU", "CPU bf16"};
  for (int i = 0; i < 4; ++i) {
    const std::string w = std::string(kernels[i]) + " gradients, " + what;
    expectClose(dq[i], bwd.dq, 1e-4, ("dq, " + w).c_str());
    expectClose(dk[i], bwd.dk, 1e-4, ("dk, " + w).c_str());
    std::vector<float> dv(rows * LDK);
    for (int64_t e = 0; e < rows * LDK; ++e)
      dv[e] = i < 2 ? float(dvG[i][e]) : float(dvC[i - 2][e]);
    // dv is rounded to bf16 as stored: within half a bf16 step more.
    expectClose(dv, bwd.dv, 0x1p-8 + 1e-4, ("dv, " + w).c_str());
  }
  for (int i = 0; i < 4; i += 2) {
    ASSERT_EQ(0, std::memcmp(dq[i].data(), dq[i + 1].data(),
                             sizeof(float) * dq[i].size()))
        << kernels[i] << " dq on bf16 arrays, " << what;
    ASSERT_EQ(0, std::memcmp(dk[i].data(), dk[i + 1].data(),
                             sizeof(float) * dk[i].size()))
        << kernels[i] << " dk on bf16 arrays, " << what;
  }
  for (int64_t e = 0; e < rows * LDK; ++e) {
    ASSERT_EQ(dvG[0][e].bits, dvG[1][e].bits)
        << "CUDA dv " << e << ", " << what;
    ASSERT_EQ(dvC[0][e].bits, dvC[1][e].bits) << "CPU dv " << e << ", " << what;
  }
  checkRoundedOutputGrad<H, HD, KVH, TC>(q, k, v, o, dout, layout, bwd, what,
                                         at);
}

TEST(CudaBf16, AttentionReadsBf16StorageTensorCores) {
  checkBf16Storage<2, 16, 2, true>(3901); // Q K^T of one mma (scale exact)
  checkBf16Storage<2, 32, 1, true>(3902); // grouped-query
  checkBf16Storage<1, 40, 1, true>(3903);
  checkBf16Storage<1, 40, 1, true>(3905, 1); // not 16-byte aligned
  checkBf16Storage<1, 128, 1, true>(3904);
}

TEST(CudaBf16, AttentionReadsBf16StorageSimt) {
  checkBf16Storage<2, 16, 2, false>(3911);
  checkBf16Storage<4, 6, 2, false>(3912); // head dim not a multiple of 4
}

/// The inputs of the wgmma attention checks, q [bound, LD] and k, v
/// [bound, LDK] with bound = nseg * maxSegRows: four segments (one of six
/// key tiles, more than the gradient kernels' rings have stages, so that a
/// stage released early is refilled while it is read; one ending inside a
/// key tile, one on a tile's edge, two with position gaps), fresh values rounded to bf16 (q, k, v as f32
/// for the fp64 references) and stored as bf16 (qb, kb, vb) with NaN in
/// every row past the segments.
struct WgmmaAttentionInputs {
  static constexpr int64_t maxSegRows = 330, nseg = 4,
                           bound = nseg * maxSegRows;
  std::vector<int64_t> seg = {0};
  std::vector<int32_t> pos;
  int64_t rows = 0;
  std::vector<float> q, k, v;
  std::vector<modk_cuda::bf16> qb, kb, vb;

  WgmmaAttentionInputs(uint32_t seed, int64_t LD, int64_t LDK) {
    const int64_t lens[nseg] = {330, 37, 64, 129};
    std::mt19937 gen(seed);
    for (int64_t s = 0; s < nseg; ++s) {
      int32_t p = 0;
      for (int64_t i = 0; i < lens[s]; ++i) {
        pos.push_back(p);
        p += s == 1 ? 3 : s == 3 ? 1 + int32_t(gen() % 4) : 1;
      }
      seg.push_back(seg.back() + lens[s]);
    }
    rows = seg.back();
    q = values(LD, seed + 1, -2, 2);
    k = values(LDK, seed + 2, -2, 2);
    v = values(LDK, seed + 3, -1, 1);
    qb = stored(q, LD);
    kb = stored(k, LDK);
    vb = stored(v, LDK);
  }

private:
  static std::vector<float> values(int64_t ld, uint32_t seed, float lo,
                                   float hi) {
    auto x = randomFloats(size_t(bound * ld), seed, lo, hi);
    for (float &e : x)
      e = bf16Round(e);
    return x;
  }
  std::vector<modk_cuda::bf16> stored(const std::vector<float> &x,
                                      int64_t ld) const {
    std::vector<modk_cuda::bf16> y(x.begin(), x.end());
    for (int64_t e = rows * ld; e < bound * ld; ++e)
      y[e].bits = 0xffffu; // NaN
    return y;
  }
};

/// The wgmma attention kernel (causal_attention's mainloop 2:
/// attentionWgmmaKernel, TMA and wgmma on bf16 q, k, v) against fp64 on
/// fresh bf16 values: four segments, one longer than a query tile (128
/// rows) and several key tiles, others ending inside a tile or on its edge,
/// positions dense, every third, or with gaps; the rows past the last
/// segment (which ends a row into its third key tile) hold NaN, as stale
/// memory may, so a value row past a segment that reached O would show. P is
/// rounded to bf16 for P V (a relative 2^-9 a probability), so the bound is
/// looser than the f32 kernels' 2e-5, and the mean error is checked too. Out:
/// float, or bf16 (rounded once more).
template <int H, int HD, int KVH, typename Out = float>
void checkAttentionWgmma(uint32_t seed) {
  constexpr int LD = H * HD, LDK = KVH * HD;
  const WgmmaAttentionInputs in(seed, LD, LDK);
  const int64_t maxSegRows = in.maxSegRows, nseg = in.nseg, bound = in.bound,
                rows = in.rows;
  const std::vector<int64_t> &seg = in.seg;
  const std::vector<int32_t> &pos = in.pos;
  const std::vector<float> &q = in.q, &k = in.k, &v = in.v;
  const std::vector<modk_cuda::bf16> &qb = in.qb, &kb = in.kb, &vb = in.vb;
  std::vector<Out> out(bound * LD, Out(kSentinel));
  const int64_t before = modk_cuda::detail::attentionWgmmaLaunches();
  modk_cuda::causal_attention<H, HD, true, 2, KVH>(
      qb.data(), kb.data(), vb.data(), nseg, seg.data(), pos.data(), maxSegRows,
      out.data(), nullptr);
  ASSERT_EQ(modk_cuda::detail::attentionWgmmaLaunches(), before + 1)
      << "the wgmma kernel ran";
  const Attention64 want = attention64(H, KVH, HD, q, k, v, seg, pos);
  const std::string what = "wgmma attention, HD " + std::to_string(HD) +
                           " KVH " + std::to_string(KVH);
  std::vector<float> got(rows * LD);
  for (int64_t e = 0; e < rows * LD; ++e)
    got[e] = float(out[e]);
  const double outRounding = std::is_same_v<Out, float> ? 0.0 : 0x1p-8;
  expectClose(got, want.o, 2.5e-3 + outRounding, what.c_str());
  double sum = 0.0;
  for (int64_t e = 0; e < rows * LD; ++e)
    sum += std::fabs(got[e] - want.o[e]);
  EXPECT_LT(sum / double(rows * LD), 3e-4 + outRounding / 4) << what;
  for (int64_t e = rows * LD; e < bound * LD; ++e)
    ASSERT_EQ(float(out[e]), float(Out(kSentinel)))
        << what << ": element " << e << " past the segments was written";
}

TEST(CudaBf16, AttentionWgmmaMatchesFp64) {
  checkAttentionWgmma<2, 64, 2>(4101);
  checkAttentionWgmma<1, 128, 1>(4102);
  checkAttentionWgmma<4, 64, 2>(4103); // grouped-query
  checkAttentionWgmma<2, 128, 1, modk_cuda::bf16>(4104);
}

/// The largest |got - want| / max(1, |want|) over the elements.
double maxScaledError(const std::vector<float> &got,
                      const std::vector<double> &want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) /
                                std::max(1.0, std::fabs(want[i])));
  return worst;
}

/// The attention gradient on wgmma (causal_attention_grad's mainloop 2:
/// attnGradQueryWgmma and attnGradKeyWgmma, TMA and wgmma on bf16 q, k, v)
/// against fp64 and the mma.sync backward, on fresh bf16 q, k, v, f32 dout
/// and o (bf16 in the wgmma run; D reads it rounded, as a bf16 model's
/// does), over the segments of checkAttentionWgmma (longer than a key
/// tile and several query tiles, ending inside a tile, positions with gaps)
/// with every row past the last segment NaN in q, k, v, dout and o. P, dS
/// and dO are rounded to bf16 for the products (a relative 2^-9 each), so
/// the bound on dq, dk and dv is 2e-2 of max(1, |want|) (dv rounded to bf16
/// as stored: half a bf16 step more) and the mean error under 1e-3; the f32
/// 3xTF32 kernels stay within 1e-4. DV: dv's type. `at`: 1 puts dout one
/// float past a 16-byte boundary (the staging loads it a value at a time),
/// 2 puts q, k and v one bf16 past it, where TMA cannot read them: both
/// sides run their mma.sync kernels, bit for bit mainloop 1's.
template <int H, int HD, int KVH, typename DV = modk_cuda::bf16>
void checkAttentionGradWgmma(uint32_t seed, int at = 0) {
  constexpr int LD = H * HD, LDK = KVH * HD;
  const WgmmaAttentionInputs in(seed, LD, LDK);
  const int64_t maxSegRows = in.maxSegRows, nseg = in.nseg, bound = in.bound,
                rows = in.rows;
  const std::vector<int64_t> &seg = in.seg;
  const std::vector<int32_t> &pos = in.pos;
  const std::vector<float> &q = in.q, &k = in.k, &v = in.v;
  const std::vector<modk_cuda::bf16> &qbs = in.qb, &kbs = in.kb, &vbs = in.vb;
  auto shifted = [&](const std::vector<modk_cuda::bf16> &x) {
    std::vector<modk_cuda::bf16> y(x.size() + 1);
    std::copy(x.begin(), x.end(), y.begin() + (at == 2 ? 1 : 0));
    return y;
  };
  const auto qba = shifted(qbs), kba = shifted(kbs), vba = shifted(vbs);
  const int qkvAt = at == 2 ? 1 : 0;
  const modk_cuda::bf16 *qb = qba.data() + qkvAt, *kb = kba.data() + qkvAt,
                        *vb = vba.data() + qkvAt;
  const Attention64 fwd = attention64(H, KVH, HD, q, k, v, seg, pos);
  std::vector<float> o(bound * LD, NAN), dout(bound * LD, NAN);
  const auto fresh = randomFloats(size_t(rows * LD), seed + 4);
  for (int64_t e = 0; e < rows * LD; ++e) {
    o[e] = float(fwd.o[e]);
    dout[e] = fresh[e];
  }
  // A bf16 model's D reads o rounded (round_o): the wgmma run reads o
  // stored as bf16, the mma.sync run the f32 o, which it rounds.
  std::vector<float> oRounded(o.size());
  for (size_t e = 0; e < o.size(); ++e)
    oRounded[e] = bf16Round(o[e]);
  const std::vector<modk_cuda::bf16> ob(o.begin(), o.end());
  const Attention64 want =
      attention64(H, KVH, HD, q, k, v, seg, pos, &dout, &oRounded);
  std::vector<float> doutAt(dout.size() + 1);
  std::copy(dout.begin(), dout.end(), doutAt.begin() + (at == 1 ? 1 : 0));
  const float *doutP = doutAt.data() + (at == 1 ? 1 : 0);
  const std::string what = "wgmma attention gradient, HD " +
                           std::to_string(HD) + " KVH " + std::to_string(KVH);

  std::vector<float> scratch(
      modk_cuda::attention_grad_scratch_floats<H>(bound));
  std::vector<float> dq[2], dk[2], dv[2];
  for (int m = 0; m < 2; ++m) {
    dq[m].assign(bound * LD, kSentinel);
    dk[m].assign(bound * LDK, kSentinel);
    std::vector<DV> dvOut(bound * LDK, DV(kSentinel));
    const int64_t before = modk_cuda::detail::attentionGradWgmmaLaunches();
    if (m == 0)
      modk_cuda::causal_attention_grad<H, HD, true, 2, KVH>(
          qb, kb, vb, ob.data(), doutP, nseg, seg.data(), pos.data(),
          maxSegRows, dq[m].data(), dk[m].data(), dvOut.data(), true,
          scratch.data(), nullptr);
    else
      modk_cuda::causal_attention_grad<H, HD, true, 1, KVH>(
          qb, kb, vb, o.data(), doutP, nseg, seg.data(), pos.data(), maxSegRows,
          dq[m].data(), dk[m].data(), dvOut.data(), true, scratch.data(),
          nullptr);
    ASSERT_EQ(modk_cuda::detail::attentionGradWgmmaLaunches(),
              before + (m == 0 && at != 2 ? 2 : 0))
        << "both wgmma kernels ran on mainloop 2 only, " << what;
    for (int64_t e = rows * LD; e < bound * LD; ++e)
      ASSERT_EQ(dq[m][e], kSentinel) << what << ": dq " << e << " written";
    for (int64_t e = rows * LDK; e < bound * LDK; ++e) {
      ASSERT_EQ(dk[m][e], kSentinel) << what << ": dk " << e << " written";
      ASSERT_EQ(float(dvOut[e]), float(DV(kSentinel)))
          << what << ": dv " << e << " written";
    }
    dq[m].resize(rows * LD);
    dk[m].resize(rows * LDK);
    dv[m].resize(rows * LDK);
    for (int64_t e = 0; e < rows * LDK; ++e)
      dv[m][e] = float(dvOut[e]);
  }
  const double dvRounding = std::is_same_v<DV, float> ? 0.0 : 0x1p-8;
  if (at == 2)
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> *g[3] = {dq, dk, dv};
      ASSERT_EQ(0, std::memcmp(g[i][0].data(), g[i][1].data(),
                               sizeof(float) * g[i][0].size()))
          << what << ": mainloop 2 without TMA differs from mainloop 1";
    }
  // The mma.sync backward, as checked elsewhere.
  expectClose(dq[1], want.dq, 1e-4, ("mma dq, " + what).c_str());
  expectClose(dk[1], want.dk, 1e-4, ("mma dk, " + what).c_str());
  expectClose(dv[1], want.dv, 1e-4 + dvRounding, ("mma dv, " + what).c_str());
  expectClose(dq[0], want.dq, 2e-2, ("dq, " + what).c_str());
  expectClose(dk[0], want.dk, 2e-2, ("dk, " + what).c_str());
  expectClose(dv[0], want.dv, 2e-2 + dvRounding, ("dv, " + what).c_str());
  const std::vector<double> dqMma(dq[1].begin(), dq[1].end()),
      dkMma(dk[1].begin(), dk[1].end()), dvMma(dv[1].begin(), dv[1].end());
  expectClose(dq[0], dqMma, 2e-2, ("dq against mma, " + what).c_str());
  expectClose(dk[0], dkMma, 2e-2, ("dk against mma, " + what).c_str());
  expectClose(dv[0], dvMma, 2e-2 + dvRounding,
              ("dv against mma, " + what).c_str());
  const char *names[3] = {"dq", "dk", "dv"};
  const std::vector<float> *gots[3] = {&dq[0], &dk[0], &dv[0]},
                           *mmas[3] = {&dq[1], &dk[1], &dv[1]};
  const std::vector<double> *refs[3] = {&want.dq, &want.dk, &want.dv};
  for (int i = 0; i < 3; ++i) {
    double sum = 0.0;
    for (size_t e = 0; e < gots[i]->size(); ++e)
      sum += std::fabs((*gots[i])[e] - (*refs[i])[e]);
    const double mean = sum / double(gots[i]->size());
    EXPECT_LT(mean, 1e-3) << names[i] << " mean, " << what;
    std::printf("%s: %s max scaled error %.2e (mma %.2e), mean %.2e\n",
                what.c_str(), names[i], maxScaledError(*gots[i], *refs[i]),
                maxScaledError(*mmas[i], *refs[i]), mean);
  }
}

TEST(CudaBf16, AttentionGradWgmmaMatchesFp64) {
  checkAttentionGradWgmma<2, 64, 2>(4201);
  checkAttentionGradWgmma<1, 128, 1>(4202);
  checkAttentionGradWgmma<4, 64, 2>(4203);         // grouped-query
  checkAttentionGradWgmma<4, 128, 1, float>(4204); // grouped-query, f32 dv
  checkAttentionGradWgmma<2, 64, 2>(4205, 1);      // dout not aligned
  checkAttentionGradWgmma<2, 128, 1>(4206, 2);     // no TMA: mma.sync
}

/// got[i] is a bf16 value within one bf16 step of want[i] (an f32 sum on
/// either side of a rounding boundary), and most are equal.
void expectBf16Close(const std::vector<float> &got,
                     const std::vector<float> &want, size_t n,
                     const char *what) {
  size_t equal = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(__float_as_uint(got[i]) & 0xffffu, 0u) << what << " " << i;
    ASSERT_LE(std::fabs(got[i] - want[i]), 0x1p-7f * std::fabs(want[i]))
        << what << " " << i << ": " << got[i] << " vs " << want[i];
    equal += got[i] == want[i];
  }
  EXPECT_GE(equal, n * 99 / 100) << what;
}

/// The rounding in RoPE's generated epilogue (rounded after the rotation)
/// against the CPU's bf16 linear and generated RoPE (which rounds too), on
/// every GEMM path (head dim 32: the epilogue runs in the GEMM's tiles on
/// the large mma.sync tile and on wgmma). The values' rounding is a
/// generated `rows` epilogue too (modk-generalize), checked in the
/// packages (test/gpu, bf16.test).
TEST(CudaBf16, FusedRounding) {
  constexpr int H = 2, HD = 32, N = H * HD, K = 40;
  const int64_t rows = 50, maxRows = 53;
  auto a = randomFloats(maxRows * K, 3601), w = randomFloats(N * K, 3602);
  std::vector<int32_t> pos(maxRows);
  for (int64_t i = 0; i < maxRows; ++i)
    pos[i] = int32_t(3 * i + 1);
  std::vector<float> q(rows * N);
  modk_cpu::linear<N, K, true>(a.data(), rows, w.data(), q.data());
  gen_cpu::rope2x32Bf16(rows, pos.data(), q.data(), q.data());
  forEachBf16GemmPath([&] {
    int64_t dRows = rows;
    std::vector<float> gq(maxRows * N, kSentinel);
    rope_kernels::linearRope<N, K, rope_kernels::rope2x32Bf16Epilogue, true>(
        rope_kernels::rope2x32Bf16, a.data(), &dRows, maxRows, w.data(),
        pos.data(),
        modk_cuda::detail::ropeTableFor<HD>(10000.0f, 3 * int32_t(maxRows),
                                            nullptr),
        3 * int32_t(maxRows), gq.data(), nullptr);
    expectBf16Close(gq, q, rows * N, "RoPE epilogue, rounded");
    for (int64_t i = rows * N; i < maxRows * N; ++i)
      ASSERT_EQ(gq[i], kSentinel) << i;
  });
}

/// A bf16 KV cache holds the bf16 keys and values of a bf16 model exactly:
/// prefill (cache_append) and decode steps (decode_attention) give the same
/// outputs as with an f32 cache, on the CPU bit for bit, on CUDA (emulated)
/// within 1e-5 of the CPU, and the bf16 cache holds the f32 cache's values.
TEST(CudaBf16, KvCacheMatchesF32Cache) {
  constexpr int S = 300, H = 2, HD = 16, LD = H * HD;
  const int64_t B = 3;
  auto bf16Values = [](size_t n, uint32_t seed) {
    auto v = randomFloats(n, seed, -2.0f, 2.0f);
    for (float &x : v)
      x = bf16Round(x);
    return v;
  };
  std::vector<float> cpuK(B * S * LD, 0.0f), cpuV(B * S * LD, 0.0f);
  std::vector<modk_cpu::bf16> cpuKb(B * S * LD), cpuVb(B * S * LD);
  std::vector<modk_cuda::bf16> gpuKb(B * S * LD), gpuVb(B * S * LD);
  std::vector<int32_t> countsF(B), countsB(B), countsG(B);

  // Prefill: sequences of 200, 1 and 290 tokens in one padded pass.
  std::vector<int64_t> seg = {0, S, 2 * S, 3 * S};
  std::vector<int32_t> pos(B * S), lengths = {200, 1, 290};
  for (int64_t i = 0; i < B * S; ++i)
    pos[i] = int32_t(i % S);
  auto k = bf16Values(B * S * LD, 3701), v = bf16Values(B * S * LD, 3702);
  modk_cpu::cache_append<S, LD>(k.data(), v.data(), B, seg.data(), pos.data(),
                                lengths.data(), cpuK.data(), cpuV.data(),
                                countsF.data());
  modk_cpu::cache_append<S, LD>(k.data(), v.data(), B, seg.data(), pos.data(),
                                lengths.data(), cpuKb.data(), cpuVb.data(),
                                countsB.data());
  modk_cuda::cache_append<S, LD>(k.data(), v.data(), B, seg.data(), pos.data(),
                                 lengths.data(), gpuKb.data(), gpuVb.data(),
                                 countsG.data(), nullptr);
  ASSERT_EQ(countsF, countsB);
  ASSERT_EQ(countsF, countsG);
  auto expectCacheEqual = [&] {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < countsF[b] * LD; ++e) {
        const int64_t i = b * S * LD + e;
        ASSERT_EQ(float(cpuKb[i]), cpuK[i]) << i;
        ASSERT_EQ(float(cpuVb[i]), cpuV[i]) << i;
        ASSERT_EQ(cpuKb[i].bits, gpuKb[i].bits) << i;
        ASSERT_EQ(cpuVb[i].bits, gpuVb[i].bits) << i;
      }
  };
  expectCacheEqual();

  // Decode steps: one row a sequence, the second sequence paused once.
  std::vector<int64_t> stepSeg = {0, 1, 2, 3};
  std::vector<int32_t> stepPos(B, 0);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<uint8_t> active = {1, uint8_t(step != 1), 1};
    auto q = randomFloats(B * LD, 3710 + step, -2.0f, 2.0f);
    auto sk = bf16Values(B * LD, 3720 + step), sv = bf16Values(B * LD, 3730 + step);
    std::vector<float> outF(B * LD), outB(B * LD), outG(B * LD);
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), sk.data(), sv.data(), B, stepSeg.data(), stepPos.data(),
        active.data(), cpuK.data(), cpuV.data(), countsF.data(), outF.data());
    modk_cpu::decode_attention<S, H, HD>(
        q.data(), sk.data(), sv.data(), B, stepSeg.data(), stepPos.data(),
        active.data(), cpuKb.data(), cpuVb.data(), countsB.data(), outB.data());
    modk_cuda::decode_attention<S, H, HD>(
        q.data(), sk.data(), sv.data(), B, stepSeg.data(), stepPos.data(),
        active.data(), gpuKb.data(), gpuVb.data(), countsG.data(), outG.data(),
        nullptr);
    ASSERT_EQ(countsF, countsB);
    ASSERT_EQ(countsF, countsG);
    for (int64_t i = 0; i < B * LD; ++i) {
      ASSERT_EQ(__float_as_uint(outB[i]), __float_as_uint(outF[i])) << i;
      ASSERT_NEAR(outG[i], outF[i], 1e-5 * std::max(1.0f, std::fabs(outF[i])))
          << i;
    }
    expectCacheEqual();
  }
}


} // namespace
