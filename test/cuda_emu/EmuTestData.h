//===- EmuTestData.h - Random inputs of the CUDA kernel tests ---*- C++ -*-===//
//
// Shared by the emulation tests of the forward, training and decode kernels:
// fresh random inputs from a fixed seed, never exact zeros.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_CUDA_EMU_EMUTESTDATA_H
#define MODC_TEST_CUDA_EMU_EMUTESTDATA_H

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace modc_emu_test {

/// Written past the rows a kernel may touch, to see that it did not.
constexpr float kSentinel = 12345.0f;

/// n floats uniform in [lo, hi), an exact zero replaced by (lo + hi) / 2 + 0.25.
inline std::vector<float> randomFloats(size_t n, uint32_t seed,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v) {
    x = dist(gen);
    if (x == 0.0f)
      x = (lo + hi) / 2 + 0.25f;
  }
  return v;
}

/// n integers uniform in [lo, hi].
inline std::vector<int32_t> randomInts(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t &x : v)
    x = dist(gen);
  return v;
}

/// x rounded to bf16 by its definition: 8 significant bits, to nearest,
/// ties to even (the default mode of nearbyint). Host code, written apart
/// from the kernels' bit arithmetic that the tests check against it.
inline double bf16Exact(double x) {
  if (x == 0.0 || !std::isfinite(x))
    return x;
  int e;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

/// y[m][n] = sum_k a[m * lda + k] w[n * ldw + k] for m < M, n < N, k < K, in
/// fp64, rounded once to f32: the reference of the GEMM tests.
inline std::vector<float> referenceProduct(const std::vector<float> &a,
                                           int64_t lda,
                                           const std::vector<float> &w,
                                           int64_t ldw, int64_t M, int64_t N,
                                           int64_t K) {
  std::vector<float> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += double(a[m * lda + k]) * w[n * ldw + k];
      y[m * N + n] = float(s);
    }
  return y;
}

/// Random operands of W warps' 16x8x8 problems (A [W][16][8] and B [W][8][8]
/// in [-4, 4) as values of the operand type, by `round`; C [W][16][8] in
/// [-8, 8)), and D [W][16][8] filled with kSentinel.
struct MmaProblems {
  std::vector<float> A, B, C, D;
  template <typename Round>
  MmaProblems(int W, uint32_t seed, Round round)
      : A(randomFloats(W * 128, seed, -4, 4)),
        B(randomFloats(W * 64, seed + 10, -4, 4)),
        C(randomFloats(W * 128, seed + 20, -8, 8)), D(W * 128, kSentinel) {
    for (float &x : A)
      x = round(x);
    for (float &x : B)
      x = round(x);
  }
};

/// got[0, count) holds want[0, count) rounded to bf16 (what a bf16 model's
/// stored buffer must hold), and got[count, size) is untouched (unset).
/// Bf16: modk_cuda::bf16, whose float constructor rounds to nearest even.
template <typename Bf16>
void expectBf16Of(const std::vector<Bf16> &got, const float *want,
                  size_t count, Bf16 unset, const char *what) {
  for (size_t i = 0; i < got.size(); ++i) {
    const uint16_t expect = i < count ? Bf16(want[i]).bits : unset.bits;
    if (got[i].bits != expect) {
      ADD_FAILURE() << what << "[" << i << "]: bits " << got[i].bits
                    << " instead of " << expect
                    << (i < count ? "" : " (past the rows)");
      return;
    }
  }
}

} // namespace modc_emu_test

#endif // MODC_TEST_CUDA_EMU_EMUTESTDATA_H
