//===- CpuKernelsTest.cpp - Tests of the CPU kernel prelude --------------===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Checks every modk_cpu kernel against a naive fp64 implementation written
/// here straight from docs/model-format.md section 3 (sharing no code with the
/// header), on random normal inputs with fixed seeds. Float outputs must agree
/// to a relative error of 1e-5 (max abs error / max abs reference); integer
/// outputs must agree exactly.
///
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include "Bf16Expect.h"
#include "RowKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <vector>

namespace {

constexpr double kTol = 1e-5;

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
    if (std::isnan(got[i]))
      return INFINITY;
    maxErr = std::max(maxErr, std::fabs(double(got[i]) - ref[i]));
    maxRef = std::max(maxRef, std::fabs(ref[i]));
  }
  EXPECT_GT(maxRef, 0.0) << "degenerate reference";
  return maxErr / maxRef;
}

double silu64(double z) { return z / (1.0 + std::exp(-z)); }

void rmsnormRef(const float *x, int D, const float *w, double eps,
                double *out) {
  double ss = 0.0;
  for (int d = 0; d < D; ++d)
    ss += double(x[d]) * x[d];
  double inv = 1.0 / std::sqrt(ss / D + eps);
  for (int d = 0; d < D; ++d)
    out[d] = x[d] * inv * w[d];
}

//===----------------------------------------------------------------------===//
// Elementwise and row kernels
//===----------------------------------------------------------------------===//

// The embedding lookup as modc generates it (modk.rows with a lookup,
// test/common/RowKernels.mlir): a bit copy of each token's table row, and
// nothing past the rows.
TEST(CpuKernels, Embed) {
  constexpr int D = 37, V = 19;
  auto table = randn(V * D, 1);
  std::mt19937 rng(2);
  std::vector<int32_t> tok(36); // 12 sequences of 3 tokens
  for (auto &t : tok)
    t = int32_t(rng() % V);
  tok[0] = 0;
  tok[1] = V - 1;
  const int64_t rows = int64_t(tok.size()) - 3; // the last sequence unused
  std::vector<float> out(tok.size() * D, -7.0f);
  gen_cpu::embed19x37(rows, tok.data(), table.data(), out.data());
  for (int64_t i = 0; i < int64_t(tok.size()); ++i)
    for (int d = 0; d < D; ++d)
      ASSERT_EQ(out[i * D + d], i < rows ? table[tok[i] * D + d] : -7.0f)
          << "row " << i << " column " << d;
}

// RMSNorm as modc generates it (modk.rows, test/common/RowKernels.mlir).
TEST(CpuKernels, RmsNorm) {
  constexpr int D = 96;
  const int64_t rows = 37;
  auto x = randn(rows * D, 3, 2.0f), w = randn(D, 4);
  std::vector<float> out(rows * D);
  static_assert(D == 96, "gen_cpu::rmsnorm96");
  gen_cpu::rmsnorm96(rows, x.data(), w.data(), out.data());
  std::vector<double> ref(rows * D);
  for (int64_t i = 0; i < rows; ++i)
    rmsnormRef(&x[i * D], D, w.data(), 1e-5, &ref[i * D]);
  EXPECT_LE(relErr(out, ref), kTol);
}

template <int N, int K> void checkLinear(int64_t M, unsigned seed) {
  auto a = randn(std::max<int64_t>(M, 1) * K, seed);
  auto w = randn(N * K, seed + 1);
  std::vector<float> y(std::max<int64_t>(M, 1) * N, 12345.0f);
  modk_cpu::linear<N, K>(a.data(), M, w.data(), y.data());
  if (M == 0) {
    for (float v : y)
      ASSERT_EQ(v, 12345.0f) << "M = 0 must not write";
    return;
  }
  std::vector<double> ref(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int k = 0; k < K; ++k)
        acc += double(a[i * K + k]) * w[n * K + k];
      ref[i * N + n] = acc;
    }
  EXPECT_LE(relErr(y, ref), kTol) << "M = " << M;
}

TEST(CpuKernels, Linear) {
  checkLinear<48, 80>(0, 5);
  checkLinear<48, 80>(1, 6);
  checkLinear<48, 80>(13, 7);
  checkLinear<33, 17>(129, 8);
}

/// A product reading its input as a column window of a stacked buffer
/// (modk-fuse-horizontal: the down projection reads SwiGLU's columns):
/// sgemm's leading dimension is the window's row stride, and the result is
/// the bits of the product of a contiguous copy, plain and accumulating.
TEST(CpuKernels, LinearReadsColumnWindow) {
  constexpr int N = 48, K = 80, LDA = 2 * K + 3, Off = K + 3;
  for (int64_t M : {int64_t(1), int64_t(37), int64_t(300)}) {
    auto stacked = randn(M * LDA, 12), w = randn(N * K, 13),
         y0 = randn(M * N, 14);
    std::vector<float> a(M * K);
    for (int64_t i = 0; i < M; ++i)
      std::memcpy(&a[i * K], &stacked[i * LDA + Off], sizeof(float) * K);
    std::vector<float> want(M * N, NAN), got(M * N, NAN);
    modk_cpu::linear<N, K>(a.data(), M, w.data(), want.data());
    modk_cpu::linear<N, K, false, LDA>(stacked.data() + Off, M, w.data(),
                                       got.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * M * N))
        << M;
    auto wantAcc = y0, gotAcc = y0;
    modk_cpu::linear_residual<N, K>(a.data(), M, w.data(), wantAcc.data());
    modk_cpu::linear_residual<N, K, false, LDA>(stacked.data() + Off, M,
                                                w.data(), gotAcc.data());
    EXPECT_EQ(wantAcc, gotAcc) << M;
    EXPECT_NE(gotAcc, y0) << M;
  }
}

/// A generated RoPE kernel: (rows, pos, product, y).
using RopeKernel = void (*)(int64_t, const int32_t *, const float *, float *);

/// RoPE as modc generates it (a product's epilogue over heads, run as a
/// row kernel), f32 and rounded to bf16, against fp64; in place, as a
/// package runs it, and out of place the same.
template <int H, int HD>
void checkRope(RopeKernel rope, RopeKernel ropeRounded,
               const std::vector<int32_t> &pos, float theta, unsigned seed) {
  const int64_t rows = int64_t(pos.size());
  auto x = randn(rows * H * HD, seed);
  auto orig = x;
  rope(rows, pos.data(), x.data(), x.data());
  std::vector<float> outOfPlace(x.size(), 7.0f);
  rope(rows, pos.data(), orig.data(), outOfPlace.data());
  ASSERT_EQ(0, std::memcmp(outOfPlace.data(), x.data(),
                           sizeof(float) * x.size()));
  // Rounding as it rotates (a bf16 model's queries and keys): the same
  // rotation, each value rounded to bf16 once.
  auto rounded = orig;
  ropeRounded(rows, pos.data(), rounded.data(), rounded.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = modk_cpu::bf16_round(x[i]);
    ASSERT_EQ(0, std::memcmp(&rounded[i], &want, sizeof(float))) << i;
  }
  std::vector<double> ref(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int h = 0; h < H; ++h) {
      const float *xi = &orig[(i * H + h) * HD];
      double *ri = &ref[(i * H + h) * HD];
      for (int j = 0; j < HD / 2; ++j) {
        double th = std::pow(double(theta), -2.0 * j / HD);
        double a = double(pos[i]) * th;
        ri[j] = xi[j] * std::cos(a) - xi[j + HD / 2] * std::sin(a);
        ri[j + HD / 2] = xi[j + HD / 2] * std::cos(a) + xi[j] * std::sin(a);
      }
    }
  EXPECT_LE(relErr(x, ref), kTol);
}

TEST(CpuKernels, Rope) {
  checkRope<4, 32>(gen_cpu::rope4x32, gen_cpu::rope4x32Bf16,
                   {0, 1, 2, 17, 255, 1000, 4000, 4095, 8191}, 10000.0f, 9);
  checkRope<2, 128>(gen_cpu::rope2x128Theta5e5, gen_cpu::rope2x128Theta5e5Bf16,
                    {3, 4000, 4001, 32767, 100000}, 500000.0f, 10);
  checkRope<3, 24>(gen_cpu::rope3x24, gen_cpu::rope3x24Bf16, {0, 5, 4000},
                   10000.0f, 11);
}

// Row kernels reading column windows of a stacked product, as
// modk-fuse-horizontal leaves them: the same bits as the same kernels over
// contiguous copies of the columns (RoPE of K's columns of Q|K|V, SwiGLU
// of the gate's and up's columns), and fp64 for SwiGLU.
TEST(CpuKernels, ColumnWindows) {
  const std::vector<int32_t> pos = {0, 1, 2, 17, 255, 1000, 4000, 4095, 8191};
  const int64_t rows = int64_t(pos.size());
  auto qkv = randn(rows * 384, 31);
  std::vector<float> k(rows * 128), want(rows * 128, 7.0f),
      got(rows * 128, -7.0f);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(&k[i * 128], &qkv[i * 384 + 128], sizeof(float) * 128);
  gen_cpu::rope4x32(rows, pos.data(), k.data(), want.data());
  gen_cpu::ropeWindow4x32(rows, pos.data(), qkv.data() + 128, got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * got.size()));

  constexpr int N = 50;
  auto gu = randn(rows * 2 * N, 32, 4.0f);
  std::vector<float> gate(rows * N), up(rows * N);
  std::vector<double> ref(rows * N);
  for (int64_t i = 0; i < rows; ++i)
    for (int c = 0; c < N; ++c) {
      gate[i * N + c] = gu[i * 2 * N + c];
      up[i * N + c] = gu[i * 2 * N + N + c];
      ref[i * N + c] = silu64(gate[i * N + c]) * up[i * N + c];
    }
  std::vector<float> h(rows * N, 7.0f), hWindows(rows * N, -7.0f);
  gen_cpu::swiglu50(rows, gate.data(), up.data(), h.data());
  gen_cpu::swigluWindows50(rows, gu.data(), gu.data() + N, hWindows.data());
  EXPECT_EQ(0, std::memcmp(hWindows.data(), h.data(), sizeof(float) * h.size()));
  EXPECT_LE(relErr(hWindows, ref), kTol);
}

// The MLP's activations as modc generates them (gen_cpu::swiglu50,
// gen_cpu::gelu67): the rows epilogues of the up projection.
TEST(CpuKernels, SwiGlu) {
  constexpr int N = 50; // not a multiple of the vector width
  const int64_t rows = 9;
  auto gate = randn(rows * N, 12, 4.0f), up = randn(rows * N, 13);
  gate[0] = 40.0f;
  gate[1] = -40.0f;
  gate[2] = -100.0f;
  gate[3] = 95.0f;
  std::vector<double> ref(rows * N);
  for (size_t i = 0; i < ref.size(); ++i)
    ref[i] = silu64(gate[i]) * up[i];
  // Out of place into f32 and into bf16 (a bf16 model's hidden rows), then
  // in place.
  std::vector<float> out(rows * N, -7.0f);
  std::vector<modk_cpu::bf16> outBf16(rows * N);
  gen_cpu::swiglu50(rows, gate.data(), up.data(), out.data());
  gen_cpu::swiglu50Bf16(rows, gate.data(), up.data(), outBf16.data());
  expectRoundedCopy(outBf16, out, "swiglu");
  gen_cpu::swiglu50(rows, gate.data(), up.data(), up.data());
  EXPECT_EQ(0, std::memcmp(up.data(), out.data(), sizeof(float) * up.size()));
  EXPECT_LE(relErr(up, ref), kTol);
  // Also a per-element check so small outputs are not hidden by large ones.
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(up[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-30) << i;
}

TEST(CpuKernels, Gelu) {
  constexpr int N = 67;
  const int64_t rows = 11;
  auto x = randn(rows * N, 14, 3.0f);
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ref[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
  std::vector<float> out(rows * N, -7.0f);
  std::vector<modk_cpu::bf16> outBf16(rows * N);
  gen_cpu::gelu67(rows, x.data(), out.data());
  gen_cpu::gelu67Bf16(rows, x.data(), outBf16.data());
  expectRoundedCopy(outBf16, out, "gelu");
  gen_cpu::gelu67(rows, x.data(), x.data());
  EXPECT_EQ(0, std::memcmp(x.data(), out.data(), sizeof(float) * x.size()));
  EXPECT_LE(relErr(x, ref), kTol);
}

// The residual add as modc generates it (gen_cpu::add40).
TEST(CpuKernels, AddRows) {
  constexpr int D = 40;
  const int64_t rows = 7;
  auto x = randn(rows * D, 15), y = randn(rows * D, 16);
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ref[i] = double(x[i]) + y[i];
  std::vector<float> sum(x.size());
  gen_cpu::add40(rows, x.data(), y.data(), sum.data());
  EXPECT_LE(relErr(sum, ref), kTol);
  // Into bf16 (a gradient only products read): the f32 sum, rounded once.
  std::vector<modk_cpu::bf16> sumBf16(x.size());
  gen_cpu::add40Bf16(rows, x.data(), y.data(), sumBf16.data());
  expectRoundedCopy(sumBf16, sum, "add into bf16");
  // In place: the same sum.
  gen_cpu::add40(rows, x.data(), y.data(), x.data());
  EXPECT_EQ(x, sum);
}

// The bf16 rounding modc generates from arith.truncf/extf (the values a
// bf16 model's attention reads), against rounding by the definition: the
// nearer of the two bf16 neighbours of x, the even one on a tie.
TEST(CpuKernels, RoundBf16Rows) {
  constexpr int N = 48;
  const int64_t rows = 6;
  auto x = randn(rows * N, 18, 40.0f);
  // Ties (the 16 dropped bits exactly half), both parities, inf and NaN.
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u,
                              0x7f800000u, 0xff800000u, 0x7fc00001u,
                              0x7f7fffffu, 0x00018000u};
  for (size_t i = 0; i < std::size(special); ++i)
    std::memcpy(&x[3 * i], &special[i], sizeof(float));
  std::vector<float> y(x.size(), -1.0f);
  gen_cpu::roundBf16Rows48(rows, x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], sizeof(u));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i])) << i;
      continue;
    }
    float down, up;
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    std::memcpy(&down, &lo, sizeof(down));
    std::memcpy(&up, &hi, sizeof(up));
    // Past the largest bf16 the next step up is 2^128, which rounds to inf.
    const double upValue = std::isinf(up) ? std::copysign(0x1p128, x[i]) : up;
    const double dd = std::fabs(double(x[i]) - down),
                 du = std::fabs(upValue - x[i]);
    const float want =
        std::isinf(x[i]) ? x[i]
        : dd != du       ? (dd < du ? down : up)
                         : ((lo >> 16) & 1u ? up : down);
    EXPECT_EQ(y[i], want) << i << ": " << x[i];
  }
}

// A whole buffer's copy into bf16 (modk.copy, which modk-generalize writes
// as a row kernel over every row): each element rounded to the nearest.
TEST(CpuKernels, RoundingCopy) {
  constexpr int N = 37;
  const int64_t rows = 5;
  const auto x = randn(rows * N, 17);
  std::vector<modk_cpu::bf16> got(x.size());
  gen_cpu::roundingCopy37(rows, x.data(), got.data());
  expectRoundedCopy(got, x, "rounding copy");
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// fp64 causal attention straight from the spec.
std::vector<double> attentionRef(int H, int HD, const std::vector<float> &q,
                                 const std::vector<float> &k,
                                 const std::vector<float> &v,
                                 const std::vector<int64_t> &seg,
                                 const std::vector<int32_t> &pos) {
  const int64_t LD = int64_t(H) * HD;
  std::vector<double> out(q.size(), 0.0);
  for (size_t s = 0; s + 1 < seg.size(); ++s)
    for (int64_t i = seg[s]; i < seg[s + 1]; ++i)
      for (int h = 0; h < H; ++h) {
        std::vector<double> sc;
        std::vector<int64_t> js;
        for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
          if (pos[j] > pos[i])
            continue;
          double dot = 0.0;
          for (int d = 0; d < HD; ++d)
            dot += double(q[i * LD + h * HD + d]) * k[j * LD + h * HD + d];
          sc.push_back(dot / std::sqrt(double(HD)));
          js.push_back(j);
        }
        double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0.0;
        for (double &x : sc)
          sum += (x = std::exp(x - mx));
        for (size_t t = 0; t < js.size(); ++t)
          for (int d = 0; d < HD; ++d)
            out[i * LD + h * HD + d] +=
                sc[t] / sum * v[js[t] * LD + h * HD + d];
      }
  return out;
}

/// Segments of the given lengths with strictly increasing, non-contiguous
/// positions drawn from [0, S), as top-k or causal routing would produce.
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

template <int H, int HD>
void checkAttention(const std::vector<int64_t> &seg,
                    const std::vector<int32_t> &pos, unsigned seed,
                    float scale = 1.0f) {
  const int64_t rows = seg.back();
  const size_t n = size_t(rows) * H * HD;
  auto q = randn(n, seed, scale), k = randn(n, seed + 1, scale),
       v = randn(n, seed + 2);
  std::vector<float> out(n, NAN);
  modk_cpu::causal_attention<H, HD>(q.data(), k.data(), v.data(),
                                    int64_t(seg.size()) - 1, seg.data(),
                                    pos.data(), out.data());
  auto ref = attentionRef(H, HD, q, k, v, seg, pos);
  EXPECT_LE(relErr(out, ref), kTol) << "H=" << H << " HD=" << HD;
}

TEST(CpuKernels, AttentionGatheredSegments) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({1, 7, 64, 300}, 2048, 20, seg, pos);
  checkAttention<4, 32>(seg, pos, 21);
  checkAttention<8, 64>(seg, pos, 22);
  // Large logits exercise the max subtraction.
  checkAttention<4, 32>(seg, pos, 23, 4.0f);
}

TEST(CpuKernels, AttentionOddShapes) {
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  gatheredLayout({65, 2, 129, 63}, 500, 24, seg, pos);
  checkAttention<2, 128>(seg, pos, 25);
  checkAttention<3, 24>(seg, pos, 26); // head dim not a vector multiple
  checkAttention<1, 2>(seg, pos, 27);
}

TEST(CpuKernels, AttentionDense) {
  constexpr int S = 200;
  const int64_t B = 2;
  std::vector<int32_t> pos(B * S);
  std::vector<int64_t> seg(B + 1);
  modk_cpu::identity_segments<S>(B, pos.data(), seg.data());
  checkAttention<4, 32>(seg, pos, 28);
}

TEST(CpuKernels, AttentionEqualPositionsSeeEachOther) {
  // Positions are non-decreasing; equal positions are mutually visible.
  std::vector<int64_t> seg = {0, 6, 9};
  std::vector<int32_t> pos = {0, 2, 2, 5, 5, 5, 1, 1, 3};
  checkAttention<2, 32>(seg, pos, 29);
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

TEST(CpuKernels, IdentitySegments) {
  constexpr int S = 5;
  std::vector<int32_t> pos(3 * S, -1);
  std::vector<int64_t> seg(4, -1);
  modk_cpu::identity_segments<S>(3, pos.data(), seg.data());
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < S; ++i)
      ASSERT_EQ(pos[b * S + i], i);
  EXPECT_EQ(seg, (std::vector<int64_t>{0, 5, 10, 15}));
}

TEST(CpuKernels, SplitTokens) {
  constexpr int S = 6;
  const int64_t B = 3;
  std::vector<int32_t> tokens(B * (S + 1));
  std::iota(tokens.begin(), tokens.end(), 100);
  std::vector<int32_t> in(B * S + 1, -7), tg(B * S + 1, -7);
  modk_cpu::split_tokens<S>(tokens.data(), B, in.data(), tg.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) {
      EXPECT_EQ(in[b * S + i], tokens[b * (S + 1) + i]);
      EXPECT_EQ(tg[b * S + i], tokens[b * (S + 1) + i + 1]);
    }
  EXPECT_EQ(in[B * S], -7);
  EXPECT_EQ(tg[B * S], -7);
}

// RoPE's table holds a position's cosines, then its sines, each the angle
// in double with only cos and sin rounded; a position past the table gets
// the same values formed on the spot.
TEST(CpuKernels, RopeTable) {
  constexpr int HD = 12;
  const float theta = 500.0f;
  const int32_t positions = 40;
  const std::vector<float> table =
      modk_cpu::detail::ropeTable<HD>(theta, positions);
  ASSERT_EQ(table.size(), size_t(positions) * HD);
  const std::vector<float> none;
  for (int32_t p = 0; p < positions; ++p) {
    float row[HD];
    const float *formed =
        modk_cpu::detail::ropeTableRow<HD>(none, p, theta, row);
    EXPECT_EQ(formed, row);
    EXPECT_EQ(0, std::memcmp(formed, &table[size_t(p) * HD], sizeof(row)));
    for (int j = 0; j < HD / 2; ++j) {
      const double a = double(p) * std::pow(double(theta), -2.0 * j / HD);
      EXPECT_EQ(table[size_t(p) * HD + j], float(std::cos(a))) << p << " " << j;
      EXPECT_EQ(table[size_t(p) * HD + HD / 2 + j], float(std::sin(a)));
    }
  }
}

// The router over every token as modc generates it (a modk.rows with one
// sum a row: gen_cpu::router40x70), and with the RMSNorm statistics riding
// on it (modk-fuse-router-norm: gen_cpu::routerNorm40x70, eps 1e-5).
TEST(CpuKernels, Router) {
  constexpr int S = 40, D = 70;
  const int64_t B = 3, rows = B * S;
  auto x = randn(B * S * D, 30, 2.0f), w = randn(D, 31);
  std::vector<float> r(rows + 1, -7.0f), rFused(rows + 1, -7.0f),
      squares(rows + 1, -7.0f);
  gen_cpu::router40x70(rows, x.data(), w.data(), r.data());
  gen_cpu::routerNorm40x70(rows, x.data(), w.data(), rFused.data(),
                           squares.data());
  std::vector<double> refR(rows), refSquares(rows);
  for (int64_t t = 0; t < rows; ++t) {
    double acc = 0.0, sumSq = 0.0;
    for (int d = 0; d < D; ++d) {
      acc += double(w[d]) * x[t * D + d];
      sumSq += double(x[t * D + d]) * x[t * D + d];
    }
    refR[t] = acc;
    refSquares[t] = sumSq;
  }
  EXPECT_EQ(r[rows], -7.0f) << "wrote past the rows";
  EXPECT_EQ(squares[rows], -7.0f) << "wrote past the rows";
  r.pop_back();
  rFused.pop_back();
  squares.pop_back();
  EXPECT_LE(relErr(r, refR), kTol);
  EXPECT_LE(relErr(rFused, refR), kTol);
  EXPECT_LE(relErr(squares, refSquares), kTol);
}

/// Reference top-k: sort indices by (value desc, position asc) and keep the
/// first K, in ascending position.
std::vector<int32_t> topkRef(const float *r, int S, int K) {
  std::vector<int32_t> idx(S);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return r[a] > r[b]; });
  idx.resize(K);
  std::sort(idx.begin(), idx.end());
  return idx;
}

template <int S, int K>
void checkTopk(const std::vector<float> &r, int64_t B) {
  std::vector<int32_t> pos(B * K, -1), mask(B * S, -1);
  std::vector<int64_t> seg(B + 1, -1);
  modk_cpu::select_topk<S, K>(r.data(), B, pos.data(), seg.data(),
                              mask.data());
  for (int64_t b = 0; b < B; ++b) {
    auto ref = topkRef(r.data() + b * S, S, K);
    std::vector<int32_t> got(pos.begin() + b * K, pos.begin() + (b + 1) * K);
    ASSERT_EQ(got, ref) << "S=" << S << " K=" << K << " b=" << b;
    std::vector<int32_t> refMask(S, 0);
    for (int32_t i : ref)
      refMask[i] = 1;
    ASSERT_EQ(std::vector<int32_t>(mask.begin() + b * S,
                                   mask.begin() + (b + 1) * S),
              refMask);
    ASSERT_EQ(seg[b], b * K);
  }
  ASSERT_EQ(seg[B], B * K);
}

TEST(CpuKernels, TopkRandom) {
  const int64_t B = 3;
  auto r = randn(B * 256, 40);
  checkTopk<256, 32>(r, B);
  checkTopk<256, 1>(r, B);
  checkTopk<256, 255>(r, B);
  checkTopk<256, 256>(r, B);
}

TEST(CpuKernels, TopkTiesGoToLowerPosition) {
  const int64_t B = 4;
  std::mt19937 rng(41);
  std::vector<float> r(B * 64);
  for (float &x : r)
    x = float(int(rng() % 4)) - 1.0f; // only -1, 0, 1, 2: many ties
  checkTopk<64, 1>(r, B);
  checkTopk<64, 5>(r, B);
  checkTopk<64, 17>(r, B);
  checkTopk<64, 64>(r, B);
  // All equal: the first K positions win.
  std::vector<float> flat(2 * 64, 0.5f);
  checkTopk<64, 9>(flat, 2);
  // Explicit: r = {1, 3, 3, 0, 3}, K = 2 -> positions 1, 2.
  std::vector<float> small = {1, 3, 3, 0, 3};
  std::vector<int32_t> pos(2), mask(5);
  std::vector<int64_t> seg(2);
  modk_cpu::select_topk<5, 2>(small.data(), 1, pos.data(), seg.data(),
                              mask.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(mask, (std::vector<int32_t>{0, 1, 1, 0, 0}));
}

TEST(CpuKernels, TopkSignedZeroTiesAndNaNRanksLast) {
  // -0.0 and +0.0 tie (lower position wins); NaN ranks below -inf.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> r = {nan, -0.0f, 0.0f, -inf, nan, -0.0f, 1.0f, -2.0f};
  auto run = [&](auto kTag) {
    constexpr int K = decltype(kTag)::value;
    std::vector<int32_t> pos(K), mask(8);
    std::vector<int64_t> seg(2);
    modk_cpu::select_topk<8, K>(r.data(), 1, pos.data(), seg.data(),
                                mask.data());
    return pos;
  };
  EXPECT_EQ(run(std::integral_constant<int, 1>{}), (std::vector<int32_t>{6}));
  EXPECT_EQ(run(std::integral_constant<int, 2>{}), (std::vector<int32_t>{1, 6}));
  EXPECT_EQ(run(std::integral_constant<int, 3>{}),
            (std::vector<int32_t>{1, 2, 6}));
  EXPECT_EQ(run(std::integral_constant<int, 5>{}),
            (std::vector<int32_t>{1, 2, 5, 6, 7}));
  EXPECT_EQ(run(std::integral_constant<int, 6>{}),
            (std::vector<int32_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(run(std::integral_constant<int, 7>{}),
            (std::vector<int32_t>{0, 1, 2, 3, 5, 6, 7}));
}

TEST(CpuKernels, SelectCausal) {
  constexpr int S = 50;
  const int64_t B = 4;
  auto logit = randn(B * S, 42);
  logit[3] = 0.0f; // exactly zero is not routed
  logit[4] = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < S; ++i)
    logit[2 * S + i] = -1.0f - i; // a sequence with nothing routed
  std::vector<int32_t> pos(B * S, -1), mask(B * S, -1);
  std::vector<int64_t> seg(B + 1, -1);
  int64_t total = modk_cpu::select_causal<S>(logit.data(), B, pos.data(),
                                             seg.data(), mask.data());
  std::vector<int32_t> refPos, refMask(B * S, 0);
  std::vector<int64_t> refSeg = {0};
  for (int64_t b = 0; b < B; ++b) {
    for (int i = 0; i < S; ++i)
      if (logit[b * S + i] > 0.0f) {
        refPos.push_back(i);
        refMask[b * S + i] = 1;
      }
    refSeg.push_back(int64_t(refPos.size()));
  }
  ASSERT_GT(total, 0);
  ASSERT_EQ(total, int64_t(refPos.size()));
  EXPECT_EQ(std::vector<int32_t>(pos.begin(), pos.begin() + total), refPos);
  EXPECT_EQ(seg, refSeg);
  EXPECT_EQ(mask, refMask);
  EXPECT_EQ(mask[3], 0);
  EXPECT_EQ(mask[4], 0);
  EXPECT_EQ(seg[3], seg[2]);
}

/// A gathered layout over B sequences of length S: sequence b keeps lens[b]
/// positions.
void routedLayout(int S, const std::vector<int64_t> &lens, unsigned seed,
                  std::vector<int64_t> &seg, std::vector<int32_t> &pos) {
  gatheredLayout(lens, S, seed, seg, pos);
}

// The routed gather + RMSNorm as modc generates it (modk.rows with the
// stream as a token operand; gen_cpu::gatherRmsnorm32x48, eps 1e-5).
TEST(CpuKernels, GatherRmsNorm) {
  constexpr int S = 32, D = 48;
  static_assert(S == 32 && D == 48, "gen_cpu::gatherRmsnorm32x48");
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  routedLayout(S, {5, 0, 32, 1}, 50, seg, pos);
  const int64_t B = 4, rows = seg.back();
  auto x = randn(B * S * D, 51), w = randn(D, 52);
  std::vector<float> xs(rows * D), n(rows * D);
  gen_cpu::gatherRmsnorm32x48(rows, seg.data(), B, pos.data(), x.data(),
                              w.data(), xs.data(), n.data());
  std::vector<double> refN(rows * D);
  for (int64_t s = 0; s < B; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
      const float *src = &x[(s * S + pos[j]) * D];
      ASSERT_EQ(0, std::memcmp(&xs[j * D], src, sizeof(float) * D)) << j;
      rmsnormRef(src, D, w.data(), 1e-5, &refN[j * D]);
    }
  EXPECT_LE(relErr(n, refN), kTol);
}

// The gather that sums nothing (gen_cpu::gatherScale40x70): x[token] scaled
// by the RMSNorm scale of its token's sum of x^2 from the router's pass,
// times w; the same normalised rows as the gather that sums x^2 itself, to
// rounding.
TEST(CpuKernels, GatherScale) {
  constexpr int S = 40, D = 70;
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  routedLayout(S, {7, 0, 40}, 32, seg, pos);
  const int64_t B = 3, rows = seg.back();
  auto x = randn(B * S * D, 33), w = randn(D, 34), wr = randn(D, 35);
  std::vector<float> r(B * S), squares(B * S);
  gen_cpu::routerNorm40x70(B * S, x.data(), wr.data(), r.data(),
                           squares.data());
  std::vector<float> xs(rows * D), n(rows * D), xsRef(rows * D),
      nUnfused(rows * D);
  gen_cpu::gatherScale40x70(rows, seg.data(), B, pos.data(), x.data(),
                            w.data(), squares.data(), xs.data(), n.data());
  gen_cpu::gatherRmsnorm40x70(rows, seg.data(), B, pos.data(), x.data(),
                              w.data(), xsRef.data(), nUnfused.data());
  EXPECT_EQ(xs, xsRef);
  std::vector<double> refN(rows * D);
  for (int64_t s = 0; s < B; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j)
      rmsnormRef(&x[(s * S + pos[j]) * D], D, w.data(), 1e-5, &refN[j * D]);
  EXPECT_LE(relErr(n, refN), kTol);
  for (int64_t i = 0; i < rows * D; ++i)
    ASSERT_NEAR(n[i], nUnfused[i], 1e-6 * std::fabs(nUnfused[i]) + 1e-30) << i;
}

/// got and want agree to within a few f32 roundings, element by element.
void expectSameToRounding(const std::vector<float> &got,
                          const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-30) << i;
}

// The gathers fused into the selection (modk-fuse-select-gather): select_topk
// gathers each sequence's rows right after selecting them, gather_sequences
// after a causal selection. Against fp64 (the selection by topkRef, the
// gathered rows copied, RMSNorm by rmsnormRef), and against the same
// selection followed by the gather kernel of its own: the same selection
// and gathered rows, the same normalised rows to rounding (the compiler may
// order a row's vectorised sum of squares differently in the two).
TEST(CpuKernels, SelectGatherFused) {
  constexpr int S = 40, K = 9, D = 70;
  for (int64_t B : {1, 3}) {
    auto r = randn(B * S, 70), x = randn(B * S * D, 71), w = randn(D, 72);
    // Each token's sum of x^2, as the router's pass stores it.
    auto squares = randn(B * S, 73);
    for (float &v : squares)
      v = 0.5f * D + std::fabs(v) * D;
    // Top-k, fused, both gathers.
    std::vector<int32_t> pos(B * S, -1), mask(B * S, -1);
    std::vector<int64_t> seg(B + 1, -1);
    std::vector<float> xs(B * K * D, -7.0f), xn(B * K * D, -7.0f),
        ss(B * K * D, -7.0f), sn(B * K * D, -7.0f);
    modk_cpu::select_topk<S, K>(
        r.data(), B, pos.data(), seg.data(), mask.data(),
        gen_cpu::FusedGatherRmsnorm40x70{pos.data(), x.data(), w.data(),
                                         xs.data(), xn.data()});
    std::vector<int32_t> pos2(B * S, -1), mask2(B * S, -1);
    std::vector<int64_t> seg2(B + 1, -1);
    modk_cpu::select_topk<S, K>(
        r.data(), B, pos2.data(), seg2.data(), mask2.data(),
        gen_cpu::FusedGatherScale40x70{pos2.data(), x.data(), w.data(),
                                       squares.data(), ss.data(), sn.data()});
    ASSERT_EQ(seg[B], B * K);
    EXPECT_EQ(pos2, pos);
    std::vector<double> refN(B * K * D), refS(B * K * D);
    for (int64_t b = 0; b < B; ++b) {
      auto ref = topkRef(r.data() + b * S, S, K);
      ASSERT_EQ(
          std::vector<int32_t>(pos.begin() + b * K, pos.begin() + (b + 1) * K),
          ref)
          << "B=" << B << " b=" << b;
      for (int j = 0; j < K; ++j) {
        const int64_t row = b * K + j, token = b * S + ref[j];
        const float *src = &x[token * D];
        ASSERT_EQ(0, std::memcmp(&xs[row * D], src, sizeof(float) * D));
        ASSERT_EQ(0, std::memcmp(&ss[row * D], src, sizeof(float) * D));
        rmsnormRef(src, D, w.data(), 1e-5, &refN[row * D]);
        const double scale = 1.0 / std::sqrt(squares[token] / D + 1e-5);
        for (int c = 0; c < D; ++c)
          refS[row * D + c] = double(src[c]) * scale * w[c];
      }
    }
    EXPECT_LE(relErr(xn, refN), kTol);
    EXPECT_LE(relErr(sn, refS), kTol);
    // The unfused forms: the same selection, then the gather kernels.
    std::vector<float> uxs(B * K * D), uxn(B * K * D), uss(B * K * D),
        usn(B * K * D);
    std::vector<int32_t> upos(B * S, -1), umask(B * S, -1);
    std::vector<int64_t> useg(B + 1, -1);
    modk_cpu::select_topk<S, K>(r.data(), B, upos.data(), useg.data(),
                                umask.data());
    gen_cpu::gatherRmsnorm40x70(useg[B], useg.data(), B, upos.data(), x.data(),
                                w.data(), uxs.data(), uxn.data());
    gen_cpu::gatherScale40x70(useg[B], useg.data(), B, upos.data(), x.data(),
                              w.data(), squares.data(), uss.data(),
                              usn.data());
    EXPECT_EQ(upos, pos);
    EXPECT_EQ(umask, mask);
    EXPECT_EQ(useg, seg);
    EXPECT_EQ(uxs, xs);
    EXPECT_EQ(uss, ss);
    expectSameToRounding(xn, uxn);
    EXPECT_EQ(usn, sn); // no sums: the same operations on the same values

    // Causal: every sequence's routed tokens, then the fused gather a
    // sequence at a time, against the gather kernel after the selection.
    std::vector<int32_t> cpos(B * S, -1), cmask(B * S);
    std::vector<int64_t> cseg(B + 1);
    const int64_t total = modk_cpu::select_causal<S>(r.data(), B, cpos.data(),
                                                     cseg.data(), cmask.data());
    ASSERT_GT(total, 0);
    std::vector<float> cxs(B * S * D, -7.0f), cxn(B * S * D, -7.0f),
        rxs(B * S * D, -7.0f), rxn(B * S * D, -7.0f);
    modk_cpu::gather_sequences(
        B, cseg.data(),
        gen_cpu::FusedGatherRmsnorm40x70{cpos.data(), x.data(), w.data(),
                                         cxs.data(), cxn.data()});
    gen_cpu::gatherRmsnorm40x70(total, cseg.data(), B, cpos.data(), x.data(),
                                w.data(), rxs.data(), rxn.data());
    EXPECT_EQ(cxs, rxs);
    expectSameToRounding(cxn, rxn);
    EXPECT_EQ(cxn[total * D], -7.0f); // nothing past the routed rows
  }
}

// The causal predictor as modc generates it: fc1's product, then the row
// kernel p = sum_c silu(h_c + b1_c) fc2_c + b2 (gen_cpu::predictor24).
TEST(CpuKernels, Predictor) {
  constexpr int D = 40, HID = 24;
  for (int64_t rows : {0, 1, 11}) {
    auto x = randn(std::max<int64_t>(rows, 1) * D, 60);
    auto w1 = randn(HID * D, 61, 0.3f), b1 = randn(HID, 62),
         w2 = randn(HID, 63), b2 = randn(1, 64);
    std::vector<float> hidden(std::max<int64_t>(rows, 1) * HID),
        p(std::max<int64_t>(rows, 1), 777.0f);
    modk_cpu::linear<HID, D>(x.data(), rows, w1.data(), hidden.data());
    gen_cpu::predictor24(rows, hidden.data(), b1.data(), w2.data(), b2.data(),
                         p.data());
    if (rows == 0) {
      EXPECT_EQ(p[0], 777.0f);
      continue;
    }
    std::vector<double> ref(rows);
    for (int64_t i = 0; i < rows; ++i) {
      double acc = b2[0];
      for (int j = 0; j < HID; ++j) {
        double h = b1[j];
        for (int d = 0; d < D; ++d)
          h += double(w1[j * D + d]) * x[i * D + d];
        acc += double(w2[j]) * silu64(h);
      }
      ref[i] = acc;
    }
    EXPECT_LE(relErr(p, ref), kTol) << "rows = " << rows;
  }
}

/// The gated scatter as modc generates it (modk.rows writing the stream at
/// the rows' tokens, in place): x[t] += g(r[t]) * (a[j] + m[j]) for row j
/// at token t, with gate G (RowKernels.h) and S = 40, D = 32.
template <int G> void checkGateScaleScatter(unsigned seed) {
  constexpr int S = 40, D = 32;
  constexpr auto scatter = G == GateLinear    ? gen_cpu::scatterLinear40x32
                           : G == GateSigmoid ? gen_cpu::scatterSigmoid40x32
                                              : gen_cpu::scatterOne40x32;
  std::vector<int64_t> seg;
  std::vector<int32_t> pos;
  routedLayout(S, {10, 1, 0, 40, 3}, seed, seg, pos);
  const int64_t B = 5, rows = seg.back();
  auto x = randn(B * S * D, seed + 1), r = randn(B * S, seed + 2);
  auto a = randn(rows * D, seed + 3), m = randn(rows * D, seed + 4);
  auto orig = x;
  scatter(rows, seg.data(), B, pos.data(), a.data(), m.data(), r.data(),
          x.data(), x.data());
  std::vector<char> selected(B * S, 0);
  std::vector<float> got;
  std::vector<double> ref;
  for (int64_t s = 0; s < B; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
      const int64_t t = s * S + pos[j];
      selected[t] = 1;
      double g = G == GateLinear    ? double(r[t])
                 : G == GateSigmoid ? 1.0 / (1.0 + std::exp(-r[t]))
                                    : 1.0;
      for (int d = 0; d < D; ++d) {
        got.push_back(x[t * D + d]);
        ref.push_back(orig[t * D + d] +
                      g * (double(a[j * D + d]) + m[j * D + d]));
      }
    }
  EXPECT_LE(relErr(got, ref), kTol) << "gate " << G;
  for (int64_t t = 0; t < B * S; ++t) {
    if (!selected[t]) {
      ASSERT_EQ(0, std::memcmp(&x[t * D], &orig[t * D], sizeof(float) * D))
          << "unselected row " << t << " changed";
    }
  }
}

TEST(CpuKernels, GateScaleScatter) {
  checkGateScaleScatter<GateLinear>(70);
  checkGateScaleScatter<GateSigmoid>(80);
  checkGateScaleScatter<GateOne>(90);
}

TEST(CpuKernels, LargeShapesTakeTheParallelPaths) {
  // Sizes above the serial cut-off, so the OpenMP loops are exercised.
  constexpr int S = 512, D = 128, K = 96;
  const int64_t B = 16;
  auto x = randn(B * S * D, 100), w = randn(D, 101), r = randn(B * S, 102);
  checkTopk<S, K>(r, B);

  std::vector<float> n(B * S * D);
  gen_cpu::rmsnorm128(B * S, x.data(), w.data(), n.data());
  std::vector<double> refN(n.size());
  for (int64_t i = 0; i < B * S; ++i)
    rmsnormRef(&x[i * D], D, w.data(), 1e-6, &refN[i * D]);
  EXPECT_LE(relErr(n, refN), kTol);

  std::vector<int32_t> pos(B * K), mask(B * S);
  std::vector<int64_t> seg(B + 1);
  modk_cpu::select_topk<S, K>(r.data(), B, pos.data(), seg.data(),
                              mask.data());
  std::vector<float> xs(B * K * D), ns(B * K * D);
  static_assert(S == 512 && D == 128, "gen_cpu::*512x128");
  gen_cpu::gatherRmsnorm512x128(seg[B], seg.data(), B, pos.data(), x.data(),
                                w.data(), xs.data(), ns.data());
  std::vector<double> refNs(ns.size());
  for (int64_t s = 0; s < B; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
      const float *src = &x[(s * S + pos[j]) * D];
      ASSERT_EQ(0, std::memcmp(&xs[j * D], src, sizeof(float) * D)) << j;
      rmsnormRef(src, D, w.data(), 1e-6, &refNs[j * D]);
    }
  EXPECT_LE(relErr(ns, refNs), kTol);

  auto a = randn(B * K * D, 103), m = randn(B * K * D, 104);
  auto y = x;
  gen_cpu::scatterSigmoid512x128(seg[B], seg.data(), B, pos.data(), a.data(),
                                 m.data(), r.data(), y.data(), y.data());
  std::vector<float> got;
  std::vector<double> ref;
  for (int64_t s = 0; s < B; ++s)
    for (int64_t j = seg[s]; j < seg[s + 1]; ++j) {
      const int64_t t = s * S + pos[j];
      const double g = 1.0 / (1.0 + std::exp(-double(r[t])));
      for (int d = 0; d < D; ++d) {
        got.push_back(y[t * D + d]);
        ref.push_back(x[t * D + d] +
                      g * (double(a[j * D + d]) + m[j * D + d]));
      }
    }
  EXPECT_LE(relErr(got, ref), kTol);
  for (int64_t t = 0; t < B * S; ++t) {
    if (!mask[t]) {
      ASSERT_EQ(0, std::memcmp(&y[t * D], &x[t * D], sizeof(float) * D))
          << "unselected row " << t << " changed";
    }
  }
}

} // namespace
