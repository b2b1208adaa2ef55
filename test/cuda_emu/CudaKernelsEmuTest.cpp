//===- CudaKernelsEmuTest.cpp - CUDA forward kernels vs the CPU prelude ---===//
//
// Every wrapper of CudaKernels.cuh runs through the CPU emulation of CUDA and
// is compared with its CPU prelude twin on the same random inputs: f32
// results to a relative 1e-5, routing decisions (positions, segments, masks)
// exactly. Shapes are small (one CPU thread per CUDA thread) and chosen to
// not be multiples of the tiles; dynamic row counts stay below their bounds
// and the rows past them must keep a sentinel. The row kernels modc generates
// (test/common/RowKernels.h) are compared the same way, CUDA against CPU.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "GemmPlanHooks.h" // the plan of calls that name none

#include "CpuKernels.h"
#include "CpuKernelsDecode.h"
#include "CpuKernelsTrain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "EmuTestData.h"
#define MODC_ROW_KERNELS_CUDA 1
#include "RowKernels.h"

namespace {
using namespace modc_emu_test;

/// causal_attention on the tensor-core mainloop (tc) or the SIMT one: the
/// compiler's choice for a package, both here.
template <int H, int HD, typename... Args> void attentionOn(int tc, Args... args) {
  if (tc)
    modk_cuda::causal_attention<H, HD, false, true>(args...);
  else
    modk_cuda::causal_attention<H, HD, false, false>(args...);
}


/// The GEMM path under test (-1: none, 0: SIMT, 1: tensor cores) and the
/// worst |got - want| / max(1, |want|) seen on each path.
int gemmPathUnderTest = -1;
double worstGemmError[2] = {0.0, 0.0};

/// |got - want| <= tol * max(1, |want|) elementwise over [0, n).
void expectClose(const float *got, const float *want, size_t n,
                 const char *what, float tol = 1e-5f) {
  if (gemmPathUnderTest >= 0)
    for (size_t i = 0; i < n; ++i)
      worstGemmError[gemmPathUnderTest] =
          std::max(worstGemmError[gemmPathUnderTest],
                   double(std::fabs(got[i] - want[i])) /
                       std::max(1.0, double(std::fabs(want[i]))));
  int bad = 0;
  for (size_t i = 0; i < n && bad < 8; ++i) {
    const float scale = std::max(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tol * scale)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i];
      ++bad;
    }
  }
}

void expectSentinel(const float *p, size_t from, size_t to, const char *what) {
  for (size_t i = from; i < to; ++i)
    if (p[i] != kSentinel) {
      ADD_FAILURE() << what << "[" << i << "] was written past the rows";
      return;
    }
}

/// Runs the test body under each GEMM tile choice.
struct TileGuard {
  explicit TileGuard(int c) { gemm_hooks::tile() = c; }
  ~TileGuard() { gemm_hooks::tile() = 0; }
};

/// Runs f once on the SIMT GEMM and once on the tensor-core GEMM.
template <typename F> void forEachGemmPath(F f) {
  for (int tc = 0; tc <= 1; ++tc) {
    gemm_hooks::path() = tc ? gemm_hooks::Mma : gemm_hooks::Simt;
    gemmPathUnderTest = tc;
    {
      SCOPED_TRACE(tc ? "tensor-core GEMM" : "SIMT GEMM");
      f();
    }
    gemmPathUnderTest = -1;
    gemm_hooks::path() = gemm_hooks::Mma;
  }
}

//===----------------------------------------------------------------------===//
// Tensor-core mma (emulated): fragment layout and tf32 rounding
//===----------------------------------------------------------------------===//

using modk_cuda::detail::mma_tf32_m16n8k8;
using modk_cuda::detail::tf32_rna;

TEST(CudaKernels, Tf32Rounding) {
  auto bits = [](float x) { return __float_as_uint(x); };
  const float one = 1.0f, ulp = 0x1p-10f; // tf32 ulp at 1
  EXPECT_EQ(tf32_rna(one), bits(one));
  EXPECT_EQ(tf32_rna(one + 0x1p-11f), bits(one + ulp)); // tie: away from 0
  EXPECT_EQ(tf32_rna(-(one + 0x1p-11f)), bits(-(one + ulp)));
  EXPECT_EQ(tf32_rna(one + 3 * 0x1p-11f), bits(one + 2 * ulp)); // tie: away
  EXPECT_EQ(tf32_rna(std::nextafter(one + 0x1p-11f, 0.0f)), bits(one));
  EXPECT_EQ(tf32_rna(std::nextafter(one + 0x1p-11f, 2.0f)), bits(one + ulp));
  EXPECT_EQ(tf32_rna(std::nextafter(2.0f, 0.0f)), bits(2.0f)); // carry
  EXPECT_EQ(tf32_rna(0.0f), 0u);
  EXPECT_EQ(tf32_rna(-0.0f), 0x80000000u);
  EXPECT_EQ(tf32_rna(INFINITY), bits(INFINITY));
  EXPECT_EQ(tf32_rna(-INFINITY), bits(-INFINITY));
  EXPECT_TRUE(std::isnan(__uint_as_float(
      tf32_rna(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(__uint_as_float(tf32_rna(__uint_as_float(0x7f800001u)))));
  EXPECT_EQ(tf32_rna(0x1p-130f + 0x1p-149f), bits(0x1p-130f)); // subnormals
  EXPECT_EQ(tf32_rna(0x1p-140f), 0u); // below half the least tf32 subnormal
  EXPECT_EQ(tf32_rna(0x1p-137f), bits(0x1p-136f)); // a tie: away from 0
  // The 3xTF32 split keeps 22 bits or more: |x - hi - lo| <= 2^-22 |x|.
  auto v = randomFloats(4096, 930, -1000, 1000);
  for (float x : v) {
    uint32_t hi, lo;
    modk_cuda::detail::tf32_split(x, hi, lo);
    ASSERT_EQ(hi & 0x1fffu, 0u);
    ASSERT_EQ(lo & 0x1fffu, 0u);
    const double err = std::fabs(double(x) - __uint_as_float(hi) -
                                 __uint_as_float(lo));
    ASSERT_LE(err, 0x1p-22 * std::fabs(x)) << x;
  }
}

/// The batched 3xTF32 step of the GEMM (one exchange for a warp's MI x NI
/// tiles under the emulation) equals 3 MI NI single mmas on the split
/// fragments, each (i, j) summed from zero and then added to acc.
template <int MI, int NI>
__global__ void mma3xKernel(const float *in, float *batched, float *single) {
  const int lane = threadIdx.x % 32;
  const float *p = in + lane * (4 * MI + 2 * NI);
  auto fragA = [&](int i, float (&f)[4]) {
    for (int e = 0; e < 4; ++e)
      f[e] = p[4 * i + e];
  };
  auto fragB = [&](int j, float (&f)[2]) {
    for (int e = 0; e < 2; ++e)
      f[e] = p[4 * MI + 2 * j + e];
  };
  float acc[MI][NI][4], ref[MI][NI][4];
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j)
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] = ref[i][j][e] = float(lane + i - j + e) * 0.25f;
  modk_cuda::detail::mma3xTf32<MI, NI>(acc, fragA, fragB);
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j) {
      float a[4], b[2];
      fragA(i, a);
      fragB(j, b);
      uint32_t ahi[4], alo[4], bhi[2], blo[2];
      for (int e = 0; e < 4; ++e)
        modk_cuda::detail::tf32_split(a[e], ahi[e], alo[e]);
      for (int e = 0; e < 2; ++e)
        modk_cuda::detail::tf32_split(b[e], bhi[e], blo[e]);
      float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_tf32_m16n8k8(t, alo, bhi, t);
      mma_tf32_m16n8k8(t, ahi, blo, t);
      mma_tf32_m16n8k8(t, ahi, bhi, t);
      for (int e = 0; e < 4; ++e)
        ref[i][j][e] += t[e];
    }
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j)
      for (int e = 0; e < 4; ++e) {
        batched[((lane * MI + i) * NI + j) * 4 + e] = acc[i][j][e];
        single[((lane * MI + i) * NI + j) * 4 + e] = ref[i][j][e];
      }
}

TEST(CudaKernels, Mma3xTf32MatchesSingleMmas) {
  constexpr int MI = 2, NI = 3;
  auto in = randomFloats(32 * (4 * MI + 2 * NI), 940, -2, 2);
  std::vector<float> batched(32 * MI * NI * 4), single(32 * MI * NI * 4);
  MODC_LAUNCH((mma3xKernel<MI, NI>), 1, 32, 0, nullptr, in.data(),
              batched.data(), single.data());
  for (size_t i = 0; i < batched.size(); ++i)
    ASSERT_EQ(__float_as_uint(batched[i]), __float_as_uint(single[i])) << i;
}

//===----------------------------------------------------------------------===//
// GEMMs (each on the SIMT and on the tensor-core path)
//===----------------------------------------------------------------------===//

template <int N, int K>
void checkLinear(int64_t rows, int64_t maxRows, uint32_t seed) {
  auto a = randomFloats(maxRows * K, seed);
  auto w = randomFloats(int64_t(N) * K, seed + 1);
  for (int tile = 0; tile <= 2; ++tile) {
    TileGuard guard(tile);
    std::vector<float> y(maxRows * N, kSentinel), ref(maxRows * N, kSentinel);
    int64_t dRows = rows;
    modk_cuda::linear<N, K>(a.data(), &dRows, maxRows, w.data(), y.data(),
                            nullptr);
    modk_cpu::linear<N, K>(a.data(), rows, w.data(), ref.data());
    SCOPED_TRACE(testing::Message() << "tile " << tile << " N " << N << " K "
                                    << K << " rows " << rows);
    expectClose(y.data(), ref.data(), rows * N, "linear");
    expectSentinel(y.data(), rows * N, maxRows * N, "linear");
  }
}

TEST(CudaKernels, LinearOddShapes) {
  forEachGemmPath([] {
    checkLinear<70, 45>(37, 50, 1);
    checkLinear<96, 64>(64, 64, 2);
    checkLinear<130, 19>(129, 140, 3);
    checkLinear<5, 3>(1, 7, 4);
    checkLinear<33, 17>(0, 9, 5);
  });
}

// The MLP's activations as modc generates them (modk.rows): the same
// element math the up projection's rows epilogue runs.
TEST(CudaKernels, Gelu) {
  constexpr int N = 67;
  static_assert(N == 67, "gen_cuda::gelu67");
  const int64_t maxRows = 45, rows = 41;
  auto pre = randomFloats(maxRows * N, 21, -4, 4);
  std::vector<float> ref(maxRows * N, kSentinel);
  for (int64_t i = 0; i < rows * N; ++i)
    ref[i] = float(0.5 * pre[i] * (1.0 + std::erf(pre[i] / std::sqrt(2.0))));
  std::vector<float> g(pre);
  for (int64_t i = rows * N; i < maxRows * N; ++i)
    g[i] = kSentinel;
  gen_cuda::launch(gen_cuda::gelu67, &rows, maxRows, g.data(), g.data());
  expectClose(g.data(), ref.data(), rows * N, "gelu");
  expectSentinel(g.data(), rows * N, maxRows * N, "gelu");
  // Into bf16 (a bf16 model's hidden rows): the f32 result, rounded.
  const modk_cuda::bf16 unset(kSentinel);
  std::vector<modk_cuda::bf16> gb(maxRows * N, unset);
  gen_cuda::launch(gen_cuda::gelu67Bf16, &rows, maxRows, pre.data(),
                   gb.data());
  expectBf16Of(gb, g.data(), rows * N, unset, "gelu into bf16");
}

TEST(CudaKernels, Swiglu) {
  constexpr int N = 50;
  static_assert(N == 50, "gen_cuda::swiglu50");
  const int64_t maxRows = 40, rows = 29;
  auto gate = randomFloats(maxRows * N, 31, -6, 6),
       up = randomFloats(maxRows * N, 32, -2, 2);
  std::vector<float> ref(maxRows * N, kSentinel);
  for (int64_t i = 0; i < rows * N; ++i)
    ref[i] = float(double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * up[i]);
  for (int64_t i = rows * N; i < maxRows * N; ++i)
    up[i] = kSentinel;
  const modk_cuda::bf16 unset(kSentinel);
  std::vector<modk_cuda::bf16> yb(maxRows * N, unset);
  // Into bf16, and in place into up.
  gen_cuda::launch(gen_cuda::swiglu50Bf16, &rows, maxRows, gate.data(),
                   up.data(), yb.data());
  gen_cuda::launch(gen_cuda::swiglu50, &rows, maxRows, gate.data(), up.data(),
                   up.data());
  expectBf16Of(yb, up.data(), rows * N, unset, "swiglu into bf16");
  expectClose(up.data(), ref.data(), rows * N, "swiglu");
  expectSentinel(up.data(), rows * N, maxRows * N, "swiglu");
}

/// The generated CUDA row kernels over column windows of a stacked product
/// (the CUDA target does not stack products yet; its kernels index a
/// window by its row stride all the same): the same bits as the CUDA
/// kernels over contiguous copies, close to the CPU's window kernels, and
/// no write past the rows.
TEST(CudaKernels, ColumnWindows) {
  constexpr int N = 50;
  const int64_t maxRows = 40, rows = 29;
  auto gu = randomFloats(maxRows * 2 * N, 41, -6, 6);
  std::vector<float> gate(maxRows * N), up(maxRows * N);
  for (int64_t i = 0; i < maxRows; ++i)
    for (int c = 0; c < N; ++c) {
      gate[i * N + c] = gu[i * 2 * N + c];
      up[i * N + c] = gu[i * 2 * N + N + c];
    }
  std::vector<float> h(maxRows * N, kSentinel), hw(maxRows * N, kSentinel),
      hcpu(maxRows * N, kSentinel);
  gen_cuda::launch(gen_cuda::swiglu50, &rows, maxRows, gate.data(), up.data(),
                   h.data());
  gen_cuda::launch(gen_cuda::swigluWindows50, &rows, maxRows, gu.data(),
                   gu.data() + N, hw.data());
  gen_cpu::swigluWindows50(rows, gu.data(), gu.data() + N, hcpu.data());
  EXPECT_EQ(0, std::memcmp(hw.data(), h.data(), sizeof(float) * rows * N));
  // The targets' exp differ in their last bits.
  expectClose(hw.data(), hcpu.data(), rows * N, "swiglu over windows");
  expectSentinel(hw.data(), rows * N, maxRows * N, "swiglu over windows");

  // RoPE of K's columns [128, 256) of rows of Q|K|V, 4 heads of 32.
  auto qkv = randomFloats(maxRows * 384, 42, -2, 2);
  std::vector<float> k(maxRows * 128);
  for (int64_t i = 0; i < maxRows; ++i)
    std::memcpy(&k[i * 128], &qkv[i * 384 + 128], sizeof(float) * 128);
  std::vector<int32_t> pos(maxRows);
  for (int64_t i = 0; i < maxRows; ++i)
    pos[i] = int32_t(i * 37 % 1024);
  std::vector<float> y(maxRows * 128, kSentinel), yw(maxRows * 128, kSentinel),
      ycpu(maxRows * 128, kSentinel);
  gen_cuda::launch(gen_cuda::rope4x32, &rows, maxRows, pos.data(), k.data(),
                   y.data(), static_cast<const float2 *>(nullptr));
  gen_cuda::launch(gen_cuda::ropeWindow4x32, &rows, maxRows, pos.data(),
                   qkv.data() + 128, yw.data(),
                   static_cast<const float2 *>(nullptr));
  gen_cpu::ropeWindow4x32(rows, pos.data(), qkv.data() + 128, ycpu.data());
  EXPECT_EQ(0, std::memcmp(yw.data(), y.data(), sizeof(float) * rows * 128));
  for (int64_t i = 0; i < rows * 128; ++i)
    ASSERT_NEAR(yw[i], ycpu[i], 1e-6f * (1.0f + std::fabs(ycpu[i]))) << i;
  expectSentinel(yw.data(), rows * 128, maxRows * 128, "rope over a window");
}

/// n token positions in [0, bound) (RoPE's angles).
std::vector<int32_t> randomPositions(int64_t n, uint32_t seed, int32_t bound) {
  std::vector<int32_t> pos(n);
  std::mt19937 gen(seed);
  for (auto &p : pos)
    p = int32_t(gen() % uint32_t(bound));
  return pos;
}

/// RoPE as modc generates it: in the product's epilogue on every path (a
/// head dim of 22, which no tensor-core tile holds: the product, then the
/// epilogue's kernel), and the kernel alone at another theta, against the
/// CPU's generated forms.
TEST(CudaKernels, LinearRopeAndRope) {
  forEachGemmPath([] {
    constexpr int H = 3, HD = 22, K = 26, N = H * HD;
    const int64_t maxRows = 30, rows = 27;
    auto a = randomFloats(maxRows * K, 41), w = randomFloats(N * K, 42);
    auto pos = randomPositions(maxRows, 43, 5000);
    const float theta = 10000.0f;
    std::vector<float> y(maxRows * N, kSentinel), ref(maxRows * N, kSentinel);
    rope_kernels::linearRope<N, K, rope_kernels::rope3x22Epilogue>(
        gen_cuda::rope3x22, a.data(), &rows, maxRows, w.data(), pos.data(),
        modk_cuda::detail::ropeTableFor<HD>(theta, 5000, nullptr), 5000,
        y.data(), nullptr);
    modk_cpu::linear<N, K>(a.data(), rows, w.data(), ref.data());
    std::vector<float> pre(ref);
    gen_cpu::rope3x22(rows, pos.data(), ref.data(), ref.data());
    expectClose(y.data(), ref.data(), rows * N, "RoPE epilogue");
    expectSentinel(y.data(), rows * N, maxRows * N, "RoPE epilogue");
    gen_cuda::launch(gen_cuda::rope3x22Theta5e5, &rows, maxRows, pos.data(),
                     pre.data(), pre.data(), nullptr);
    std::vector<float> ref2(maxRows * N, kSentinel);
    modk_cpu::linear<N, K>(a.data(), rows, w.data(), ref2.data());
    gen_cpu::rope3x22Theta5e5(rows, pos.data(), ref2.data(), ref2.data());
    expectClose(pre.data(), ref2.data(), rows * N, "RoPE kernel");
    expectSentinel(pre.data(), rows * N, maxRows * N, "RoPE kernel");
  });
}

/// The few-row kernel (decode's products) against fp64 on fresh inputs:
/// f32 and bf16 products, f32 and stored-bf16 activations, reductions in
/// 4-element runs (K % 4 == 0) and one element at a time, row counts below
/// and above a CTA's 8 rows, up to the pass's 64; rows past *rows keep the
/// sentinel.
template <int N, int K, bool BF16, typename TA>
void checkFewRows(int64_t rows, int64_t maxRows, uint32_t seed) {
  auto a32 = randomFloats(maxRows * K, seed), w = randomFloats(N * K, seed + 1);
  std::vector<TA> a(a32.begin(), a32.end());
  auto value = [&](double x) { return BF16 ? bf16Exact(x) : x; };
  std::vector<float> want(rows * N);
  for (int64_t m = 0; m < rows; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0.0;
      for (int k = 0; k < K; ++k)
        s += value(float(a[m * K + k])) * value(w[n * K + k]);
      want[m * N + n] = float(s);
    }
  std::vector<float> y(maxRows * N, kSentinel);
  const int64_t launches = modk_cuda::detail::streamLaunches();
  modk_cuda::linear<N, K, BF16>(a.data(), &rows, maxRows, w.data(), y.data(),
                                nullptr);
  EXPECT_EQ(launches + (maxRows > 0 ? 1 : 0),
            modk_cuda::detail::streamLaunches());
  SCOPED_TRACE(testing::Message() << "N " << N << " K " << K << " rows "
                                  << rows << " bf16 " << BF16);
  expectClose(y.data(), want.data(), rows * N, "few-row linear");
  expectSentinel(y.data(), rows * N, maxRows * N, "few-row linear");
}

struct StreamPathGuard {
  StreamPathGuard() { gemm_hooks::path() = gemm_hooks::Stream; }
  ~StreamPathGuard() { gemm_hooks::path() = gemm_hooks::kDefaultPath; }
};

TEST(CudaKernels, LinearFewRows) {
  StreamPathGuard guard;
  checkFewRows<40, 700, false, float>(1, 4, 61);
  checkFewRows<33, 1100, false, float>(16, 16, 62);
  checkFewRows<96, 64, false, float>(9, 12, 63);
  checkFewRows<5, 3, false, float>(3, 5, 64);
  checkFewRows<70, 45, true, float>(8, 10, 65);
  checkFewRows<64, 256, true, float>(13, 16, 66);
  checkFewRows<64, 256, true, modk_cuda::bf16>(7, 8, 67);
  checkFewRows<24, 37, true, modk_cuda::bf16>(2, 3, 68);
  // Up to the pass's bound (64 rows: eight CTAs along the rows; in a bf16
  // product one CTA on tensor cores, with a partial reduction step).
  checkFewRows<40, 130, true, float>(64, 64, 69);
  checkFewRows<40, 136, true, modk_cuda::bf16>(33, 40, 71);
  checkFewRows<33, 64, false, float>(37, 40, 70);
}

/// A grouped launch (modk.gemm's `group`): G products with their own
/// inputs, weights, row counts (some empty, one at the bound) and outputs
/// in one launch, each against its own fp64 product; rows past a member's
/// count stay unwritten.
template <int N, int K, int G, bool BF16>
void checkLinearGroup(int64_t maxRows, uint32_t seed) {
  std::vector<std::vector<float>> a(G), w(G), y(G);
  std::vector<int64_t> rows(G);
  modk_cuda::detail::GemmGroup<G, float, float, float> group;
  std::mt19937 pick(seed);
  for (int z = 0; z < G; ++z) {
    a[z] = randomFloats(maxRows * K, seed + 3 * z);
    w[z] = randomFloats(int64_t(N) * K, seed + 3 * z + 1);
    y[z].assign(maxRows * N, kSentinel);
    rows[z] = z == 0 ? maxRows : z == 1 ? 0 : int64_t(pick() % (maxRows + 1));
    group.a[z] = a[z].data();
    group.b[z] = w[z].data();
    group.c[z] = y[z].data();
    group.rows[z] = &rows[z];
  }
  const int64_t launches = modk_cuda::detail::groupedLaunches();
  modk_cuda::linear_group<N, K, G, BF16>(group, maxRows, nullptr);
  EXPECT_EQ(launches + 1, modk_cuda::detail::groupedLaunches());
  auto value = [&](float x) { return BF16 ? bf16Exact(x) : double(x); };
  for (int z = 0; z < G; ++z) {
    std::vector<float> want(rows[z] * N);
    for (int64_t m = 0; m < rows[z]; ++m)
      for (int n = 0; n < N; ++n) {
        double sum = 0.0;
        for (int k = 0; k < K; ++k)
          sum += value(a[z][m * K + k]) * value(w[z][n * K + k]);
        want[m * N + n] = float(sum);
      }
    SCOPED_TRACE(testing::Message() << "member " << z << " of " << G << ", "
                                    << rows[z] << " rows of " << maxRows);
    expectClose(y[z].data(), want.data(), rows[z] * N, "grouped linear", 1e-5f);
    expectSentinel(y[z].data(), rows[z] * N, maxRows * N, "grouped linear");
  }
}

TEST(CudaKernels, LinearGroup) {
  // Each tile family, then the few-row kernel.
  forEachGemmPath([] {
    checkLinearGroup<70, 45, 3, false>(50, 81);
    checkLinearGroup<96, 64, 4, true>(130, 82);
  });
  StreamPathGuard guard;
  checkLinearGroup<40, 70, 3, false>(12, 83);
  checkLinearGroup<24, 37, 2, true>(5, 84);
  // bf16 past 8 rows: the few-row kernel on tensor cores.
  checkLinearGroup<24, 100, 3, true>(40, 85);
}

/// A sibling launch (modk.gemm's `siblings`): products of one input with
/// their own weights, widths and outputs (f32 and bf16 stores) in one launch
/// of the few-row kernel, each the same bits as its own launch; rows past
/// the count stay unwritten. Off the few-row kernel it launches nothing
/// and says so.
template <bool BF16> void checkLinearSiblings(int64_t rows, uint32_t seed) {
  constexpr int K = 72, N0 = 40, N1 = 24, N2 = 40;
  const int64_t maxRows = rows + 3;
  auto a = randomFloats(maxRows * K, seed);
  auto w0 = randomFloats(N0 * K, seed + 1), w1 = randomFloats(N1 * K, seed + 2),
       w2 = randomFloats(N2 * K, seed + 3);
  std::vector<float> y0(maxRows * N0, kSentinel), y2(maxRows * N2, kSentinel);
  std::vector<modk_cuda::bf16> y1(maxRows * N1, modk_cuda::bf16(kSentinel));
  using modk_cuda::detail::EpiStore;
  using modk_cuda::detail::GemmSibling;
  const float *w[3] = {w0.data(), w1.data(), w2.data()};
  void *c[3] = {y0.data(), y1.data(), y2.data()};
  const modk_cuda::detail::EpiArgs epi[3] = {};
  const int64_t siblings = modk_cuda::detail::siblingLaunches();
  EXPECT_TRUE(
      (modk_cuda::linear_siblings<K, BF16, false, modk_cuda::DefaultGemmPlan,
                                  GemmSibling<N0, EpiStore, float>,
                                  GemmSibling<N1, EpiStore, modk_cuda::bf16>,
                                  GemmSibling<N2, EpiStore, float>>(
          a.data(), &rows, maxRows, w, c, epi, nullptr)));
  EXPECT_EQ(siblings + 1, modk_cuda::detail::siblingLaunches());
  std::vector<float> r0(maxRows * N0, kSentinel), r2(maxRows * N2, kSentinel);
  std::vector<modk_cuda::bf16> r1(maxRows * N1, modk_cuda::bf16(kSentinel));
  modk_cuda::linear<N0, K, BF16>(a.data(), &rows, maxRows, w0.data(), r0.data(),
                                 nullptr);
  modk_cuda::linear<N1, K, BF16>(a.data(), &rows, maxRows, w1.data(), r1.data(),
                                 nullptr);
  modk_cuda::linear<N2, K, BF16>(a.data(), &rows, maxRows, w2.data(), r2.data(),
                                 nullptr);
  SCOPED_TRACE(testing::Message() << rows << " rows, bf16 " << BF16);
  auto bitsOf = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  };
  for (size_t i = 0; i < y0.size(); ++i)
    ASSERT_EQ(bitsOf(y0[i]), bitsOf(r0[i])) << "member 0 at " << i;
  for (size_t i = 0; i < y1.size(); ++i)
    ASSERT_EQ(bitsOf(float(y1[i])), bitsOf(float(r1[i])))
        << "member 1 at " << i;
  for (size_t i = 0; i < y2.size(); ++i)
    ASSERT_EQ(bitsOf(y2[i]), bitsOf(r2[i])) << "member 2 at " << i;
  expectSentinel(y0.data(), rows * N0, maxRows * N0, "sibling 0");
}

/// Siblings in order (`siblings_in_order`): each CTA runs member 0 (a
/// plain store into y) and then member 1, whose epilogue reads y at its
/// own elements (y = aux + product, aux = y): the bits of the two products'
/// own launches one after the other.
template <bool BF16>
void checkLinearSiblingsInOrder(int64_t rows, uint32_t seed) {
  constexpr int K = 40, N = 36;
  const int64_t maxRows = rows + 2;
  auto a = randomFloats(maxRows * K, seed);
  auto w0 = randomFloats(N * K, seed + 1), w1 = randomFloats(N * K, seed + 2);
  std::vector<float> y(maxRows * N, kSentinel), ref(maxRows * N, kSentinel);
  using namespace modk_cuda::detail;
  const float *w[2] = {w0.data(), w1.data()};
  void *c[2] = {y.data(), y.data()};
  EpiArgs epi[2] = {};
  epi[1].aux = y.data();
  const int64_t siblings = siblingLaunches();
  EXPECT_TRUE(
      (modk_cuda::linear_siblings<K, BF16, true, modk_cuda::DefaultGemmPlan,
                                  GemmSibling<N, EpiStore, float>,
                                  GemmSibling<N, EpiAdd, float>>(
          a.data(), &rows, maxRows, w, c, epi, nullptr)));
  EXPECT_EQ(siblings + 1, siblingLaunches());
  EpiArgs addRef;
  addRef.aux = ref.data();
  linearEpi<N, K, EpiStore, BF16, modk_cuda::DefaultGemmPlan>(
      a.data(), &rows, maxRows, w0.data(), EpiArgs{}, ref.data(), nullptr);
  linearEpi<N, K, EpiAdd, BF16, modk_cuda::DefaultGemmPlan>(
      a.data(), &rows, maxRows, w1.data(), addRef, ref.data(), nullptr);
  SCOPED_TRACE(testing::Message() << rows << " rows in order, bf16 " << BF16);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(std::memcmp(&y[i], &ref[i], sizeof(float)), 0)
        << "element " << i << ": " << y[i] << " against " << ref[i];
}

TEST(CudaKernels, LinearSiblings) {
  {
    StreamPathGuard guard;
    checkLinearSiblings<false>(5, 91);
    checkLinearSiblings<true>(13, 92);
    checkLinearSiblingsInOrder<false>(9, 95);
    checkLinearSiblingsInOrder<true>(3, 96);
    checkLinearSiblingsInOrder<true>(21, 97); // on tensor cores
  }
  // Off the few-row kernel: nothing launched, the caller runs each member.
  auto a = randomFloats(8 * 16, 93), w = randomFloats(8 * 16, 94);
  std::vector<float> y(8 * 8, kSentinel);
  const float *ws[2] = {w.data(), w.data()};
  void *c[2] = {y.data(), y.data()};
  const modk_cuda::detail::EpiArgs epi[2] = {};
  const int64_t rows = 8, launches = modk_cuda::detail::siblingLaunches();
  using Store =
      modk_cuda::detail::GemmSibling<8, modk_cuda::detail::EpiStore, float>;
  EXPECT_FALSE(
      (modk_cuda::linear_siblings<16, false, false, modk_cuda::DefaultGemmPlan,
                                  Store, Store>(a.data(), &rows, rows, ws, c,
                                                epi, nullptr)));
  EXPECT_EQ(launches, modk_cuda::detail::siblingLaunches());
  expectSentinel(y.data(), 0, 8 * 8, "declined siblings");
}

/// RoPE in the few-row kernel's epilogue (its CTAs hold rotation pairs),
/// f32 and rounded to bf16, against the CPU product and rotation.
TEST(CudaKernels, LinearRopeFewRows) {
  StreamPathGuard guard;
  // K: every warp of a CTA holds part of the reduction.
  constexpr int H = 3, HD = 32, K = 520, N = H * HD;
  const int64_t maxRows = 12, rows = 11;
  auto a = randomFloats(maxRows * K, 71), w = randomFloats(N * K, 72);
  auto pos = randomPositions(maxRows, 73, 3000);
  const float theta = 10000.0f;
  std::vector<float> ref(maxRows * N, kSentinel);
  modk_cpu::linear<N, K>(a.data(), rows, w.data(), ref.data());
  gen_cpu::rope3x32(rows, pos.data(), ref.data(), ref.data());
  const int64_t fused = modk_cuda::detail::fusedRopeLaunches(),
                launches = modk_cuda::detail::streamLaunches();
  const float2 *table = modk_cuda::detail::ropeTableFor<HD>(theta, 3000, nullptr);
  std::vector<float> y(maxRows * N, kSentinel);
  EXPECT_TRUE((rope_kernels::linearRope<N, K, rope_kernels::rope3x32Epilogue>(
      gen_cuda::rope3x32, a.data(), &rows, maxRows, w.data(), pos.data(),
      table, 3000, y.data(), nullptr)));
  EXPECT_EQ(fused + 1, modk_cuda::detail::fusedRopeLaunches());
  EXPECT_EQ(launches + 1, modk_cuda::detail::streamLaunches());
  expectClose(y.data(), ref.data(), rows * N, "few-row RoPE");
  expectSentinel(y.data(), rows * N, maxRows * N, "few-row RoPE");
  // bf16 operands, the rotated values rounded: the CPU's bf16 product,
  // rotation and rounding.
  std::vector<float> refBf(maxRows * N, kSentinel), yBf(maxRows * N, kSentinel);
  modk_cpu::linear<N, K, true>(a.data(), rows, w.data(), refBf.data());
  gen_cpu::rope3x32Bf16(rows, pos.data(), refBf.data(), refBf.data());
  EXPECT_TRUE(
      (rope_kernels::linearRope<N, K, rope_kernels::rope3x32Bf16Epilogue, true>(
          gen_cuda::rope3x32Bf16, a.data(), &rows, maxRows, w.data(),
          pos.data(), table, 3000, yBf.data(), nullptr)));
  // One bf16 ulp (2^-8 relative) where the f32 sums straddle a rounding
  // boundary.
  expectClose(yBf.data(), refBf.data(), rows * N, "few-row bf16 RoPE",
              1.0f / 128);
  expectSentinel(yBf.data(), rows * N, maxRows * N, "few-row bf16 RoPE");
}

template <int N, int K>
void checkDgrad(int64_t rows, int64_t maxRows, uint32_t seed) {
  auto dy = randomFloats(maxRows * N, seed), w = randomFloats(N * K, seed + 1);
  auto init = randomFloats(maxRows * K, seed + 2);
  for (int tile = 1; tile <= 2; ++tile) {
    TileGuard guard(tile);
    for (bool acc : {false, true}) {
      SCOPED_TRACE(testing::Message() << "tile " << tile << " acc " << acc);
      std::vector<float> da(maxRows * K, kSentinel), ref(init);
      if (acc)
        std::copy(init.begin(), init.begin() + rows * K, da.begin());
      modk_cuda::linear_dgrad<N, K>(dy.data(), &rows, maxRows, w.data(),
                                    da.data(), acc, nullptr);
      modk_cpu::linear_dgrad<N, K>(dy.data(), rows, w.data(), ref.data(), acc);
      expectClose(da.data(), ref.data(), rows * K, "linear_dgrad");
      expectSentinel(da.data(), rows * K, maxRows * K, "linear_dgrad");
    }
  }
}

TEST(CudaKernels, LinearDgrad) {
  forEachGemmPath([] {
    checkDgrad<70, 45>(37, 50, 51);
    checkDgrad<24, 130>(65, 66, 52);
  });
}

/// Sets the chunk rows of the split weight gradient (0: by shape).
struct WgradChunkGuard {
  explicit WgradChunkGuard(int64_t c) {
    gemm_hooks::wgradChunk() = c;
  }
  ~WgradChunkGuard() { gemm_hooks::wgradChunk() = 0; }
};

/// Worst |got - exact| / max(1, |exact|) of the weight gradients against a
/// double reference: [path][0 unsplit, 1 split].
/// [path][2]: worst |split - unsplit| / max(1, |unsplit|).
double worstWgradError[2][3] = {};

/// Tolerance of a weight gradient summed in f32 over `rows` rows against the
/// exact sum: 1e-5 up to 256 rows, then growing as sqrt(rows) (the f32 sum
/// of one output over ~3000 rows is itself ~1e-5 off, split or not).
float wgradTolerance(int64_t rows) {
  return 1e-5f * float(std::max(1.0, std::sqrt(double(rows) / 256.0)));
}

/// got against the double reference (tolerance wgradTolerance(rows)), kept
/// out of the errors against the CPU; records the worst error as `kind`.
void expectCloseExact(const float *got, const std::vector<double> &exact,
                      int64_t rows, int kind, const char *what) {
  const int path = gemmPathUnderTest;
  gemmPathUnderTest = -1;
  std::vector<float> want(exact.begin(), exact.end());
  expectClose(got, want.data(), want.size(), what, wgradTolerance(rows));
  for (size_t i = 0; i < exact.size(); ++i)
    worstWgradError[path][kind] =
        std::max(worstWgradError[path][kind],
                 std::fabs(double(got[i]) - exact[i]) /
                     std::max(1.0, std::fabs(exact[i])));
  gemmPathUnderTest = path;
}

/// The split linear_wgrad (scratch overload) from init on dyp, ap (NaN past
/// rows) under chunk override `chunk`: close to the exact sum and to the
/// unsplit wrapper's result (and to the CPU's, ref, for <= 256 rows, where
/// that is within 1e-5 of exact), bitwise the same on a second run, scratch
/// read only where written (it starts as NaN) and not written past
/// linear_wgrad_scratch_floats. Returns the number of chunks.
template <int N, int K>
int64_t checkSplitWgrad(const std::vector<float> &dyp,
                        const std::vector<float> &ap, int64_t rows,
                        int64_t maxRows, const std::vector<float> &init,
                        const std::vector<float> &ref,
                        const std::vector<double> &exact,
                        const std::vector<float> &unsplit, int64_t chunk) {
  WgradChunkGuard chunkGuard(chunk);
  SCOPED_TRACE(testing::Message() << "split, chunk override " << chunk);
  const int64_t floats = modk_cuda::linear_wgrad_scratch_floats<N, K>(maxRows);
  const int64_t splits = modk_cuda::detail::wgradSplit<N, K, modk_cuda::DefaultGemmPlan>(maxRows).splits;
  EXPECT_EQ(floats, splits > 1 ? splits * N * K : 0);
  std::vector<float> runs[2];
  for (auto &dw : runs) {
    dw = init;
    constexpr int64_t kGuard = 64;
    std::vector<float> scratch(floats + kGuard,
                               std::numeric_limits<float>::quiet_NaN());
    std::fill(scratch.begin() + floats, scratch.end(), kSentinel);
    modk_cuda::linear_wgrad<N, K>(dyp.data(), &rows, maxRows, ap.data(),
                                  dw.data(), scratch.data(), nullptr);
    expectSentinel(scratch.data(), floats, floats + kGuard, "wgrad scratch");
  }
  if (rows <= 256)
    expectClose(runs[0].data(), ref.data(), N * K, "split linear_wgrad");
  expectCloseExact(runs[0].data(), exact, rows, 1,
                   "split linear_wgrad vs exact");
  {
    const int path = gemmPathUnderTest;
    gemmPathUnderTest = -1;
    expectClose(runs[0].data(), unsplit.data(), N * K,
                "split vs unsplit linear_wgrad", wgradTolerance(rows));
    for (int i = 0; i < N * K; ++i)
      worstWgradError[path][2] =
          std::max(worstWgradError[path][2],
                   std::fabs(double(runs[0][i]) - unsplit[i]) /
                       std::max(1.0, std::fabs(double(unsplit[i]))));
    gemmPathUnderTest = path;
  }
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(),
                           sizeof(float) * N * K))
      << "split linear_wgrad differs between two runs";
  return splits;
}

/// linear_wgrad (unsplit) against the CPU (up to 256 rows) and the exact
/// sum, then the split overload under each chunk override in `chunks`.
/// Returns the most chunks seen.
template <int N, int K>
int64_t checkWgrad(int64_t rows, int64_t maxRows, uint32_t seed,
                   std::initializer_list<int64_t> chunks = {0, 16, 20}) {
  auto dy = randomFloats(maxRows * N, seed), a = randomFloats(maxRows * K, seed + 1);
  auto init = randomFloats(N * K, seed + 2);
  // Rows past *rows hold NaN: they must not be read.
  std::vector<float> dyp(dy), ap(a);
  for (int64_t i = rows * N; i < maxRows * N; ++i)
    dyp[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = rows * K; i < maxRows * K; ++i)
    ap[i] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> ref(init);
  modk_cpu::linear_wgrad<N, K>(dy.data(), rows, a.data(), ref.data(), true);
  std::vector<double> exact(init.begin(), init.end());
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      double acc = 0.0;
      for (int64_t m = 0; m < rows; ++m)
        acc += double(dy[m * N + n]) * a[m * K + k];
      exact[n * K + k] += acc;
    }
  int64_t most = 1;
  for (int tile = 1; tile <= 2; ++tile) {
    TileGuard guard(tile);
    SCOPED_TRACE(testing::Message() << "tile " << tile << " rows " << rows);
    std::vector<float> dw(init);
    modk_cuda::linear_wgrad<N, K>(dyp.data(), &rows, maxRows, ap.data(),
                                  dw.data(), nullptr);
    if (rows <= 256)
      expectClose(dw.data(), ref.data(), N * K, "linear_wgrad");
    expectCloseExact(dw.data(), exact, rows, 0, "linear_wgrad vs exact");
    for (int64_t chunk : chunks)
      most = std::max(most, checkSplitWgrad<N, K>(dyp, ap, rows, maxRows, init,
                                                  ref, exact, dw, chunk));
  }
  return most;
}

TEST(CudaKernels, LinearWgrad) {
  forEachGemmPath([] {
    checkWgrad<70, 45>(37, 50, 61);
    checkWgrad<130, 20>(75, 80, 62);
    checkWgrad<9, 7>(0, 5, 63);
    checkWgrad<40, 33>(200, 203, 64);
  });
}

/// Shapes the split serves: few output tiles, many rows. With the chunks
/// chosen by shape (override 0) the split must be real; rows below max_rows
/// (NaN past them), rows on a chunk boundary, within the first chunk, none.
TEST(CudaKernels, LinearWgradSplit) {
  forEachGemmPath([] {
    EXPECT_EQ(11, (checkWgrad<8, 12>(2777, 3000, 65, {0})));
    EXPECT_EQ(188, (checkWgrad<8, 12>(2777, 3000, 66, {16})));
    EXPECT_EQ(4, (checkWgrad<24, 70>(1000, 1100, 67, {0})));
    EXPECT_EQ(23, (checkWgrad<24, 70>(1000, 1100, 67, {48})));
    checkWgrad<70, 24>(608, 1100, 68, {0, 304});
    checkWgrad<8, 12>(5, 3000, 69, {0});
    checkWgrad<8, 12>(0, 600, 70, {0, 16});
    checkWgrad<130, 9>(512, 520, 71, {256, 20});
  });
  for (int p = 0; p < 2; ++p)
    std::printf("[ info ] wgrad (%s), worst |dw - exact| / max(1, |exact|): "
                "unsplit %.3g, split %.3g; |split - unsplit| / max(1, "
                "|unsplit|) %.3g\n",
                p ? "tensor cores" : "SIMT", worstWgradError[p][0],
                worstWgradError[p][1], worstWgradError[p][2]);
}

/// A weight gradient's plan with up to S chunks (modk-configure-gemms
/// chooses S from the output's tiles: test/lit/Transforms/configure-gemms).
template <int64_t S>
using SplitPlan = modk_cuda::detail::GemmPlan<
    S, 0, modk_cuda::detail::GemmVariant<0, modk_cuda::detail::PathMma, 64, 64>>;

/// The chunks of the benchmark shapes' splits (B*S = 16384 rows) on a
/// 132-SM part: a 128 x 128 weight (up to 66 chunks) in 64 chunks of 256
/// rows, 512 x 128 (17) in 17, 1024 x 512 (3) in 3; no split where the plan
/// has none (the output tiles already fill the GPU), or with too few rows.
TEST(CudaKernels, LinearWgradSplitPlan) {
  using modk_cuda::detail::wgradSplit;
  EXPECT_EQ(64, (wgradSplit<128, 128, SplitPlan<66>>(16384).splits));
  EXPECT_EQ(256, (wgradSplit<128, 128, SplitPlan<66>>(16384).chunk));
  EXPECT_EQ(64 * 128 * 128,
            (modk_cuda::linear_wgrad_scratch_floats<128, 128, SplitPlan<66>>(
                16384)));
  EXPECT_EQ(17, (wgradSplit<128, 128, SplitPlan<17>>(16384).splits));
  EXPECT_EQ(976, (wgradSplit<128, 128, SplitPlan<17>>(16384).chunk));
  EXPECT_EQ(3, (wgradSplit<128, 128, SplitPlan<3>>(16384).splits));
  EXPECT_EQ(1, (wgradSplit<128, 128, SplitPlan<1>>(16384).splits));
  EXPECT_EQ(0, (modk_cuda::linear_wgrad_scratch_floats<2048, 2048,
                                                       SplitPlan<1>>(16384)));
  EXPECT_EQ(0, (modk_cuda::linear_wgrad_scratch_floats<128, 128,
                                                       SplitPlan<66>>(300)));
  EXPECT_EQ(0, (modk_cuda::linear_wgrad_scratch_floats<128, 128,
                                                       SplitPlan<66>>(0)));
  for (int64_t maxRows :
       {int64_t(1), int64_t(257), int64_t(1000), int64_t(16384),
        int64_t(100000), int64_t(1) << 26}) {
    const auto s = wgradSplit<128, 128, SplitPlan<66>>(maxRows);
    EXPECT_GE(s.splits, 1);
    EXPECT_LE(s.splits, 65535);
    EXPECT_GE(s.splits * s.chunk, maxRows);
    EXPECT_LT((s.splits - 1) * s.chunk, maxRows);
  }
  WgradChunkGuard chunkGuard(1); // more chunks than the grid's z allows
  EXPECT_EQ(50000, (wgradSplit<64, 64, modk_cuda::DefaultGemmPlan>(100000).splits));
}

/// Row counts of a group's members: the first full, the second empty,
/// the others anywhere from 0 to maxRows.
std::vector<int64_t> groupRows(int g, int64_t maxRows, uint32_t seed) {
  std::mt19937 pick(seed);
  std::vector<int64_t> rows(g);
  for (int z = 0; z < g; ++z)
    rows[z] = z == 0 ? maxRows : z == 1 ? 0 : int64_t(pick() % (maxRows + 1));
  return rows;
}

/// A grouped input gradient (modk.gemm_dgrad's `group`): G members with
/// their own dy, weights, row counts and da in one launch, storing and
/// accumulating, each against its own fp64 product (from its init where it
/// accumulates) and bitwise against the single linear_dgrad of the same
/// member; rows past a member's count keep the sentinel.
template <int N, int K, int G, bool BF16, typename TD = float>
void checkDgradGroup(int64_t maxRows, uint32_t seed) {
  const std::vector<int64_t> rows = groupRows(G, maxRows, seed);
  std::vector<std::vector<TD>> dy(G);
  std::vector<std::vector<float>> w(G), init(G);
  for (int z = 0; z < G; ++z) {
    auto d = randomFloats(maxRows * N, seed + 5 * z + 1);
    dy[z].assign(d.begin(), d.end());
    w[z] = randomFloats(int64_t(N) * K, seed + 5 * z + 2);
    init[z] = randomFloats(maxRows * K, seed + 5 * z + 3);
  }
  auto value = [&](double x) { return BF16 ? bf16Exact(x) : x; };
  for (bool acc : {false, true}) {
    SCOPED_TRACE(testing::Message() << "accumulate " << acc);
    std::vector<std::vector<float>> da(G), single(G);
    modk_cuda::detail::GemmGroup<G, TD, float, float> group;
    for (int z = 0; z < G; ++z) {
      da[z].assign(maxRows * K, kSentinel);
      if (acc)
        std::copy(init[z].begin(), init[z].begin() + rows[z] * K,
                  da[z].begin());
      single[z] = da[z];
      group.a[z] = dy[z].data();
      group.b[z] = w[z].data();
      group.c[z] = da[z].data();
      group.rows[z] = &rows[z];
    }
    const int64_t launches = modk_cuda::detail::groupedLaunches();
    modk_cuda::linear_dgrad_group<N, K, G, BF16>(group, maxRows, acc, nullptr);
    EXPECT_EQ(launches + 1, modk_cuda::detail::groupedLaunches());
    for (int z = 0; z < G; ++z) {
      modk_cuda::linear_dgrad<N, K, BF16>(dy[z].data(), &rows[z], maxRows,
                                          w[z].data(), single[z].data(), acc,
                                          nullptr);
      std::vector<float> want(rows[z] * K);
      for (int64_t m = 0; m < rows[z]; ++m)
        for (int k = 0; k < K; ++k) {
          double sum = acc ? double(init[z][m * K + k]) : 0.0;
          for (int n = 0; n < N; ++n)
            sum += value(float(dy[z][m * N + n])) * value(w[z][n * K + k]);
          want[m * K + k] = float(sum);
        }
      SCOPED_TRACE(testing::Message() << "member " << z << " of " << G << ", "
                                      << rows[z] << " rows of " << maxRows);
      expectClose(da[z].data(), want.data(), rows[z] * K, "grouped dgrad");
      expectSentinel(da[z].data(), rows[z] * K, maxRows * K, "grouped dgrad");
      EXPECT_EQ(0, std::memcmp(da[z].data(), single[z].data(),
                               sizeof(float) * maxRows * K))
          << "grouped dgrad differs from the member's own launch";
    }
  }
}

/// A grouped weight gradient (modk.gemm_wgrad's `group`) with its
/// scratch, split or not (chunk override `chunk`): each member's dw against
/// init + its fp64 sum over its rows (NaN past them in dy and a: they must
/// not be read), bitwise against the member's own split linear_wgrad and
/// on a second run (deterministic); the scratch not written past
/// linear_wgrad_group_scratch_floats. Returns the chunks a member's rows
/// split in.
template <int N, int K, int G, bool BF16, typename TD = float,
          typename TA = float>
int64_t checkWgradGroup(int64_t maxRows, uint32_t seed, int64_t chunk) {
  WgradChunkGuard chunkGuard(chunk);
  const std::vector<int64_t> rows = groupRows(G, maxRows, seed);
  std::vector<std::vector<TD>> dy(G);
  std::vector<std::vector<TA>> a(G);
  std::vector<std::vector<float>> init(G);
  std::vector<std::vector<double>> exact(G);
  auto value = [&](double x) { return BF16 ? bf16Exact(x) : x; };
  for (int z = 0; z < G; ++z) {
    auto d = randomFloats(maxRows * N, seed + 5 * z + 1);
    auto x = randomFloats(maxRows * K, seed + 5 * z + 2);
    init[z] = randomFloats(int64_t(N) * K, seed + 5 * z + 3);
    exact[z].assign(init[z].begin(), init[z].end());
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        double sum = 0.0;
        for (int64_t m = 0; m < rows[z]; ++m)
          sum +=
              value(float(TD(d[m * N + n]))) * value(float(TA(x[m * K + k])));
        exact[z][n * K + k] += sum;
      }
    for (int64_t i = rows[z] * N; i < maxRows * N; ++i)
      d[i] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = rows[z] * K; i < maxRows * K; ++i)
      x[i] = std::numeric_limits<float>::quiet_NaN();
    dy[z].assign(d.begin(), d.end());
    a[z].assign(x.begin(), x.end());
  }
  const int64_t floats =
      modk_cuda::linear_wgrad_group_scratch_floats<N, K, G>(maxRows);
  const auto split =
      modk_cuda::detail::wgradSplit<N, K, modk_cuda::DefaultGemmPlan>(maxRows);
  EXPECT_EQ(floats, split.splits > 1 ? G * split.splits * N * K : 0);
  std::vector<std::vector<float>> runs[2];
  for (auto &dw : runs) {
    dw = init;
    constexpr int64_t kGuard = 64;
    std::vector<float> scratch(floats + kGuard,
                               std::numeric_limits<float>::quiet_NaN());
    std::fill(scratch.begin() + floats, scratch.end(), kSentinel);
    modk_cuda::detail::GemmGroup<G, TD, TA, float> group;
    for (int z = 0; z < G; ++z) {
      group.a[z] = dy[z].data();
      group.b[z] = a[z].data();
      group.c[z] = dw[z].data();
      group.rows[z] = &rows[z];
    }
    const int64_t launches = modk_cuda::detail::groupedLaunches();
    modk_cuda::linear_wgrad_group<N, K, G, BF16>(group, maxRows, scratch.data(),
                                                 nullptr);
    EXPECT_EQ(launches + 1, modk_cuda::detail::groupedLaunches());
    expectSentinel(scratch.data(), floats, floats + kGuard,
                   "grouped wgrad scratch");
  }
  for (int z = 0; z < G; ++z) {
    SCOPED_TRACE(testing::Message() << "member " << z << " of " << G << ", "
                                    << rows[z] << " rows of " << maxRows << ", "
                                    << split.splits << " chunks");
    std::vector<float> want(exact[z].begin(), exact[z].end());
    expectClose(runs[0][z].data(), want.data(), N * K, "grouped wgrad",
                wgradTolerance(rows[z]));
    EXPECT_EQ(0, std::memcmp(runs[0][z].data(), runs[1][z].data(),
                             sizeof(float) * N * K))
        << "grouped wgrad differs between two runs";
    std::vector<float> single(init[z]);
    std::vector<float> scratch(
        modk_cuda::linear_wgrad_scratch_floats<N, K>(maxRows));
    modk_cuda::linear_wgrad<N, K, BF16>(dy[z].data(), &rows[z], maxRows,
                                        a[z].data(), single.data(),
                                        scratch.data(), nullptr);
    EXPECT_EQ(
        0, std::memcmp(runs[0][z].data(), single.data(), sizeof(float) * N * K))
        << "grouped wgrad differs from the member's own launch";
  }
  return split.splits;
}

TEST(CudaKernels, GradGroup) {
  forEachGemmPath([] {
    for (int tile = 0; tile <= 2; ++tile) {
      TileGuard guard(tile);
      SCOPED_TRACE(testing::Message() << "tile " << tile);
      checkDgradGroup<70, 45, 3, false>(50, 91);
      checkDgradGroup<48, 32, 4, true>(70, 92);
      checkDgradGroup<24, 40, 3, true, modk_cuda::bf16>(20, 93);
      EXPECT_EQ(1, (checkWgradGroup<70, 45, 3, false>(50, 94, 0)));
      EXPECT_EQ(4, (checkWgradGroup<40, 33, 3, false>(61, 95, 16)));
      EXPECT_EQ(4, (checkWgradGroup<48, 32, 4, true>(64, 96, 16)));
      EXPECT_EQ(
          3,
          (checkWgradGroup<24, 40, 2, true, modk_cuda::bf16, modk_cuda::bf16>(
              40, 97, 16)));
    }
  });
  // wgmma (bf16, without TMA: a group has no tensor maps, and a member
  // must match its own launch bitwise), on each tile.
  gemm_hooks::path() = gemm_hooks::Wgmma;
  gemm_hooks::tma() = false;
  for (int tile = 1; tile <= 2; ++tile) {
    TileGuard guard(tile);
    SCOPED_TRACE(testing::Message() << "wgmma, tile " << tile);
    checkDgradGroup<48, 32, 4, true>(70, 98);
    EXPECT_EQ(5, (checkWgradGroup<48, 32, 3, true>(66, 99, 16)));
    EXPECT_EQ(
        1, (checkWgradGroup<48, 40, 2, true, modk_cuda::bf16, modk_cuda::bf16>(
               30, 100, 0)));
  }
  gemm_hooks::tma() = true;
  gemm_hooks::path() = gemm_hooks::kDefaultPath;
}

/// A long reduction (K = 1000, not a multiple of the tiles) against a double
/// reference (the f32 CPU kernel is itself ~1e-5 off here): the tensor-core
/// path (one rounding on the accumulator per k8 step) must be as close as
/// the SIMT path (one per k).
TEST(CudaKernels, GemmLongReduction) {
  constexpr int N = 40, K = 1000;
  const int64_t maxRows = 36, rows = 33;
  auto a = randomFloats(maxRows * K, 171), w = randomFloats(N * K, 172);
  const std::vector<float> exact = referenceProduct(a, K, w, K, rows, N, K);
  double err[2] = {0, 0};
  const int path = gemmPathUnderTest;
  forEachGemmPath([&] {
    const int p = gemmPathUnderTest;
    gemmPathUnderTest = -1; // not part of the errors against the CPU
    // One tile size: the order of each output's sum does not depend on it.
    TileGuard guard(1);
    std::vector<float> y(maxRows * N, kSentinel);
    modk_cuda::linear<N, K>(a.data(), &rows, maxRows, w.data(), y.data(),
                            nullptr);
    expectClose(y.data(), exact.data(), rows * N, "linear K 1000",
                p ? 1e-5f : 2e-5f);
    expectSentinel(y.data(), rows * N, maxRows * N, "linear K 1000");
    for (int64_t i = 0; i < rows * N; ++i)
      err[p] = std::max(err[p], std::fabs(double(y[i]) - exact[i]) /
                                    std::max(1.0, std::fabs(double(exact[i]))));
    gemmPathUnderTest = p;
  });
  gemmPathUnderTest = path;
  std::printf("[ info ] K 1000, worst |y - exact| / max(1, |exact|): SIMT "
              "%.3g, tensor cores %.3g\n",
              err[0], err[1]);
  EXPECT_LE(err[1], err[0]);
}

/// Operands whose rows are longer than the reduction (leading dimension 48,
/// 45 steps used): their rows are 16-byte aligned, so the tensor-core GEMM
/// copies runs of 4, and the run at steps 44..47 crosses the reduction's end
/// (one element copied, three zero). Both operand layouts (y = a w^T with
/// the reduction contiguous; the transposed product with the rows
/// contiguous), every tile, against fp64.
TEST(CudaKernels, GemmRunsAcrossTheReductionEnd) {
  constexpr int M = 37, N = 70, K = 45, LD = 48;
  auto a = randomFloats(M * LD, 7301), w = randomFloats(N * LD, 7302);
  const std::vector<float> want = referenceProduct(a, LD, w, LD, M, N, K);
  // The same operands stored transposed: element (m, k) at at[k * LDT + m].
  constexpr int LDT = 40, LDW = 72;
  std::vector<float> at(K * LDT, kSentinel), wt(K * LDW, kSentinel);
  for (int k = 0; k < K; ++k) {
    for (int m = 0; m < M; ++m)
      at[k * LDT + m] = a[m * LD + k];
    for (int n = 0; n < N; ++n)
      wt[k * LDW + n] = w[n * LD + k];
  }
  forEachGemmPath([&] {
    for (int tile = 0; tile <= 2; ++tile) {
      TileGuard guard(tile);
      SCOPED_TRACE(testing::Message() << "tile " << tile);
      std::vector<float> y(M * N, kSentinel), yt(M * N, kSentinel);
      modk_cuda::detail::launchGemm<modk_cuda::DefaultGemmPlan, true, true, 0,
                                    modk_cuda::detail::EpiStore>(
          a.data(), LD, w.data(), LD, y.data(), N, nullptr, M, N, K, nullptr,
          nullptr);
      expectClose(y.data(), want.data(), M * N, "reduction contiguous");
      modk_cuda::detail::launchGemm<modk_cuda::DefaultGemmPlan, false, false, 0,
                                    modk_cuda::detail::EpiStore>(
          at.data(), LDT, wt.data(), LDW, yt.data(), N, nullptr, M, N, K,
          nullptr, nullptr);
      expectClose(yt.data(), want.data(), M * N, "rows contiguous");
    }
  });
}

//===----------------------------------------------------------------------===//
// Row kernels
//===----------------------------------------------------------------------===//

TEST(CudaKernels, Embed) {
  constexpr int D = 37, V = 19;
  const int64_t n = 45;
  auto table = randomFloats(V * D, 71);
  std::vector<int32_t> tokens(n);
  std::mt19937 gen(72);
  for (auto &t : tokens)
    t = int32_t(gen() % V);
  std::vector<float> out((n + 2) * D, kSentinel), ref((n + 2) * D, kSentinel);
  // The generated lookup (test/common/RowKernels.mlir) on both targets; the
  // launch covers two rows more than the count on the device.
  gen_cuda::launch(gen_cuda::embed19x37, &n, n + 2, tokens.data(), table.data(),
                   out.data());
  gen_cpu::embed19x37(n, tokens.data(), table.data(), ref.data());
  EXPECT_EQ(out, ref);
  for (int64_t i = 0; i < n; ++i)
    for (int d = 0; d < D; ++d)
      ASSERT_EQ(out[i * D + d], table[tokens[i] * D + d]);
}

// The RMSNorm and residual add modc generates for both targets (modk.rows).
TEST(CudaKernels, RmsnormAndAdd) {
  constexpr int D = 90;
  const int64_t maxRows = 21, rows = 18;
  auto x = randomFloats(maxRows * D, 81, -3, 3), w = randomFloats(D, 82);
  std::vector<float> y(maxRows * D, kSentinel), ref(maxRows * D, kSentinel);
  gen_cuda::launch(gen_cuda::rmsnorm90, &rows, maxRows, x.data(), w.data(),
                   y.data());
  gen_cpu::rmsnorm90(rows, x.data(), w.data(), ref.data());
  expectClose(y.data(), ref.data(), rows * D, "rmsnorm");
  expectSentinel(y.data(), rows * D, maxRows * D, "rmsnorm");

  auto b = randomFloats(maxRows * D, 83);
  std::vector<float> s(maxRows * D, kSentinel), sref(rows * D);
  gen_cuda::launch(gen_cuda::add90, &rows, maxRows, x.data(), b.data(),
                   s.data());
  gen_cpu::add90(rows, x.data(), b.data(), sref.data());
  expectClose(s.data(), sref.data(), rows * D, "add", 0.0f);
  expectSentinel(s.data(), rows * D, maxRows * D, "add");
  std::vector<float> inPlace(x);
  gen_cuda::launch(gen_cuda::add90, &rows, maxRows, inPlace.data(), b.data(),
                   inPlace.data());
  expectClose(inPlace.data(), sref.data(), rows * D, "add in place", 0.0f);
  // Into bf16 (a gradient only products read): the f32 sum, rounded.
  const modk_cuda::bf16 unset(kSentinel);
  std::vector<modk_cuda::bf16> sb(maxRows * D, unset);
  gen_cuda::launch(gen_cuda::add90Bf16, &rows, maxRows, x.data(), b.data(),
                   sb.data());
  expectBf16Of(sb, sref.data(), rows * D, unset, "add into bf16");
}

// A whole buffer's copy into bf16 (modk.copy, a generated row kernel by
// modk-generalize): each element rounded, the rows past the count left.
TEST(CudaKernels, RoundingCopy) {
  constexpr int D = 37;
  const int64_t rows = 7, maxRows = 9;
  auto x = randomFloats(maxRows * D, 84);
  const modk_cuda::bf16 unset(kSentinel);
  std::vector<modk_cuda::bf16> xb(maxRows * D, unset);
  gen_cuda::launch(gen_cuda::roundingCopy37, &rows, maxRows, x.data(),
                   xb.data());
  expectBf16Of(xb, x.data(), rows * D, unset, "rounding copy");
}

// The generated bf16 rounding (arith.truncf/extf; the values attention
// reads in a bf16 model) rounds the rows below the count, by definition and
// as the CPU's, and leaves the others.
TEST(CudaKernels, RoundBf16Rows) {
  constexpr int N = 48;
  const int64_t rows = 5, maxRows = 7;
  auto x = randomFloats(maxRows * N, 3401, -50.0f, 50.0f);
  std::vector<float> got(maxRows * N, kSentinel), cpu(rows * N);
  gen_cuda::launch(gen_cuda::roundBf16Rows48, &rows, maxRows, x.data(),
                   got.data());
  gen_cpu::roundBf16Rows48(rows, x.data(), cpu.data());
  for (int64_t i = 0; i < rows * N; ++i) {
    ASSERT_EQ(double(got[i]), bf16Exact(x[i])) << i;
    ASSERT_EQ(__float_as_uint(got[i]), __float_as_uint(cpu[i])) << i;
  }
  expectSentinel(got.data(), rows * N, maxRows * N, "rounding");
}

TEST(CudaKernels, IdentitySegments) {
  constexpr int S = 37;
  const int64_t B = 3;
  std::vector<int32_t> pos(B * S, -7), rpos(B * S, -7);
  std::vector<int64_t> seg(B + 1, -7), rseg(B + 1, -7);
  modk_cuda::identity_segments<S>(B, pos.data(), seg.data(), nullptr);
  modk_cpu::identity_segments<S>(B, rpos.data(), rseg.data());
  EXPECT_EQ(pos, rpos);
  EXPECT_EQ(seg, rseg);
}

TEST(CudaKernels, SplitTokens) {
  constexpr int S = 10;
  const int64_t B = 3;
  auto tokens = randomInts(B * (S + 1), 31, 0, 99);
  std::vector<int32_t> in(B * S, -7), tg(B * S, -7), rin(in), rtg(tg);
  modk_cuda::split_tokens<S>(tokens.data(), B, in.data(), tg.data(), nullptr);
  modk_cpu::split_tokens<S>(tokens.data(), B, rin.data(), rtg.data());
  EXPECT_EQ(in, rin);
  EXPECT_EQ(tg, rtg);
}

// RoPE's table of (cos, sin) pairs holds the CPU table's values, and the
// angle the generated kernels form past the table is the CPU's too.
TEST(CudaKernels, RopeTableMatchesCpu) {
  constexpr int HD = 12;
  const float theta = 500.0f;
  const int32_t positions = 40;
  const float2 *table =
      modk_cuda::detail::ropeTableFor<HD>(theta, positions, nullptr);
  ASSERT_NE(table, nullptr);
  const std::vector<float> cpu =
      modk_cpu::detail::ropeTable<HD>(theta, positions);
  for (int32_t p = 0; p < positions; ++p)
    for (int j = 0; j < HD / 2; ++j) {
      const float2 cs = table[p * (HD / 2) + j];
      EXPECT_EQ(cs.x, cpu[p * HD + j]) << p << " " << j;
      EXPECT_EQ(cs.y, cpu[p * HD + HD / 2 + j]) << p << " " << j;
    }
  const std::vector<float> none;
  for (int32_t p : {positions, 4095, 70000}) {
    float row[HD];
    const float *want = modk_cpu::detail::ropeTableRow<HD>(none, p, theta, row);
    for (int j = 0; j < HD / 2; ++j) {
      const float2 cs = modk_cuda::detail::ropeAngle<HD>(p, j, theta);
      EXPECT_EQ(cs.x, want[j]) << p << " " << j;
      EXPECT_EQ(cs.y, want[HD / 2 + j]) << p << " " << j;
    }
  }
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

// The generated router over every token (one sum a row), and with the
// RMSNorm statistics riding on it (modk-fuse-router-norm), CUDA against CPU.
TEST(CudaKernels, Router) {
  constexpr int S = 40, D = 70;
  const int64_t B = 3, rows = B * S;
  auto x = randomFloats(B * S * D, 91), w = randomFloats(D, 92);
  std::vector<float> r(rows + 1, kSentinel), ref(rows + 1, kSentinel);
  gen_cuda::launch(gen_cuda::router40x70, &rows, rows, x.data(), w.data(),
                   r.data());
  gen_cpu::router40x70(rows, x.data(), w.data(), ref.data());
  expectClose(r.data(), ref.data(), rows + 1, "router");
  std::vector<float> rf(rows + 1, kSentinel), squares(rows + 1, kSentinel),
      refSquares(rows + 1, kSentinel);
  gen_cuda::launch(gen_cuda::routerNorm40x70, &rows, rows, x.data(), w.data(),
                   rf.data(), squares.data());
  gen_cpu::routerNorm40x70(rows, x.data(), w.data(), ref.data(),
                           refSquares.data());
  expectClose(rf.data(), ref.data(), rows + 1, "router with statistics");
  expectClose(squares.data(), refSquares.data(), rows + 1,
              "RMSNorm sum of squares");
}

template <int S, int K, int G = 1>
void checkTopk(const std::vector<float> &r, int64_t B) {
  std::vector<int32_t> pos(B * K + 1, -7), rpos(B * K + 1, -7);
  std::vector<int64_t> seg(B + 2, -7), rseg(B + 2, -7);
  std::vector<int32_t> mask(B * S, -7), rmask(B * S, -7);
  modk_cuda::select_topk<S, K, G>(r.data(), B, pos.data(), seg.data(),
                                  mask.data(), modk_cuda::detail::NoGather{},
                                  nullptr);
  modk_cpu::select_topk<S, K>(r.data(), B, rpos.data(), rseg.data(),
                              rmask.data());
  SCOPED_TRACE(testing::Message() << "S " << S << " K " << K << " B " << B
                                  << " blocks a sequence " << G);
  EXPECT_EQ(pos, rpos);
  EXPECT_EQ(seg, rseg);
  EXPECT_EQ(mask, rmask);
}

/// Router values with many ties: few distinct values, signed zeros, NaN, inf.
std::vector<float> tiedScores(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float vals[] = {0.25f, -0.5f, 0.0f, -0.0f, 1.5f, nan, -inf, inf, 0.25f};
  std::vector<float> r(n);
  for (auto &v : r)
    v = vals[gen() % 9];
  return r;
}

TEST(CudaKernels, SelectTopk) {
  checkTopk<64, 8>(randomFloats(3 * 64, 101), 3);
  checkTopk<40, 7>(randomFloats(2 * 40, 102), 2);
  checkTopk<300, 37>(randomFloats(2 * 300, 103), 2);
  checkTopk<64, 8>(tiedScores(3 * 64, 104), 3);
  checkTopk<64, 30>(tiedScores(2 * 64, 105), 2);
  checkTopk<300, 100>(tiedScores(2 * 300, 106), 2);
  checkTopk<1000, 125>(tiedScores(2 * 1000, 109), 2); // 4 positions a thread
  checkTopk<1000, 999>(randomFloats(1000, 110), 1);
  checkTopk<2048, 256>(randomFloats(2 * 2048, 112), 2); // the bench's shape
  checkTopk<2048, 256>(tiedScores(2 * 2048, 113), 2);
  // Split over blocks, each writing its share of the positions and mask.
  checkTopk<2048, 256, 16>(randomFloats(2 * 2048, 114), 2);
  checkTopk<300, 100, 7>(tiedScores(3 * 300, 115), 3);
  checkTopk<17, 1>(tiedScores(4 * 17, 107), 4);
  checkTopk<17, 17>(tiedScores(2 * 17, 108), 2);
  checkTopk<16, 5>(std::vector<float>(2 * 16, 0.75f), 2); // all equal
  // Values that differ only in their low bits.
  std::vector<float> close(2 * 50);
  for (size_t i = 0; i < close.size(); ++i)
    close[i] = std::nextafter(1.0f, 2.0f) * (1.0f + 1e-7f * float(i % 5));
  checkTopk<50, 9>(close, 2);
}

TEST(CudaKernels, SelectCausal) {
  constexpr int S = 45;
  const int64_t B = 4;
  auto logit = randomFloats(B * S, 111);
  for (int i = 0; i < S; ++i)
    logit[2 * S + i] = -1.0f; // an empty sequence
  logit[3] = std::numeric_limits<float>::quiet_NaN();
  logit[4] = 0.0f;
  std::vector<int32_t> pos(B * S + 1, -7), rpos(B * S + 1, -7);
  std::vector<int64_t> seg(B + 2, -7), rseg(B + 2, -7);
  std::vector<int32_t> mask(B * S, -7), rmask(B * S, -7);
  modk_cuda::select_causal<S>(logit.data(), B, pos.data(), seg.data(),
                              mask.data(), nullptr);
  const int64_t c = modk_cpu::select_causal<S>(logit.data(), B, rpos.data(),
                                               rseg.data(), rmask.data());
  EXPECT_EQ(seg[B], c);
  EXPECT_EQ(pos, rpos);
  EXPECT_EQ(seg, rseg);
  EXPECT_EQ(mask, rmask);

  // Long sequences: more positions than threads.
  constexpr int S2 = 600;
  auto l2 = randomFloats(2 * S2, 112);
  std::vector<int32_t> p2(2 * S2, -7), rp2(2 * S2, -7), m2(2 * S2), rm2(2 * S2);
  std::vector<int64_t> s2(3), rs2(3);
  modk_cuda::select_causal<S2>(l2.data(), 2, p2.data(), s2.data(), m2.data(),
                               nullptr);
  modk_cpu::select_causal<S2>(l2.data(), 2, rp2.data(), rs2.data(), rm2.data());
  EXPECT_EQ(p2, rp2);
  EXPECT_EQ(s2, rs2);
  EXPECT_EQ(m2, rm2);
}

/// A routed row set from top-k and one from causal routing (B sequences of S).
struct RowSet {
  std::vector<int32_t> pos;
  std::vector<int64_t> seg;
  int64_t rows() const { return seg.back(); }
};

template <int S, int K> RowSet topkRows(int64_t B, uint32_t seed) {
  auto r = randomFloats(B * S, seed);
  RowSet rs{std::vector<int32_t>(B * K), std::vector<int64_t>(B + 1)};
  std::vector<int32_t> mask(B * S);
  modk_cpu::select_topk<S, K>(r.data(), B, rs.pos.data(), rs.seg.data(),
                              mask.data());
  return rs;
}

template <int S> RowSet causalRows(int64_t B, uint32_t seed) {
  auto r = randomFloats(B * S, seed);
  for (int i = 0; i < S; ++i)
    r[(B - 1) * S + i] = -1.0f; // last sequence empty
  RowSet rs{std::vector<int32_t>(B * S), std::vector<int64_t>(B + 1)};
  std::vector<int32_t> mask(B * S);
  modk_cpu::select_causal<S>(r.data(), B, rs.pos.data(), rs.seg.data(),
                             mask.data());
  return rs;
}

/// The routed gather + RMSNorm as modc generates it (modk.rows with the
/// stream as a token operand), CUDA against CPU: launched over the row
/// buffer's capacity B * S, the row count on the device (seg + B).
template <int S, int D>
void checkGatherRmsnorm(const RowSet &rs, int64_t B, uint32_t seed) {
  static_assert(S == 40 && D == 70, "gen_cuda::gatherRmsnorm40x70");
  auto x = randomFloats(B * S * D, seed, -2, 2), w = randomFloats(D, seed + 1);
  const int64_t rows = rs.rows(), cap = B * S;
  std::vector<float> g(cap * D, kSentinel), n(cap * D, kSentinel);
  std::vector<float> rg(cap * D, kSentinel), rn(cap * D, kSentinel);
  gen_cuda::launch(gen_cuda::gatherRmsnorm40x70, rs.seg.data() + B, cap,
                   rs.seg.data(), B, rs.pos.data(), x.data(), w.data(),
                   g.data(), n.data());
  gen_cpu::gatherRmsnorm40x70(rows, rs.seg.data(), B, rs.pos.data(), x.data(),
                              w.data(), rg.data(), rn.data());
  EXPECT_EQ(g, rg);
  expectClose(n.data(), rn.data(), rows * D, "gather_rmsnorm");
  expectSentinel(n.data(), rows * D, cap * D, "gather_rmsnorm");
}

TEST(CudaKernels, GatherRmsnorm) {
  checkGatherRmsnorm<40, 70>(topkRows<40, 9>(3, 121), 3, 122);
  checkGatherRmsnorm<40, 70>(causalRows<40>(3, 123), 3, 124);
}

/// The gather that reads the router pass's sums of x^2
/// (modk-fuse-router-norm), CUDA against CPU.
template <int S, int D>
void checkGatherScale(const RowSet &rs, int64_t B, uint32_t seed) {
  static_assert(S == 40 && D == 70, "gen_cuda::gatherScale40x70");
  auto x = randomFloats(B * S * D, seed, -2, 2), w = randomFloats(D, seed + 1),
       squares = randomFloats(B * S, seed + 2, 0.5f * D, 2.0f * D);
  const int64_t rows = rs.rows(), cap = B * S;
  std::vector<float> g(cap * D, kSentinel), n(cap * D, kSentinel);
  std::vector<float> rg(cap * D, kSentinel), rn(cap * D, kSentinel);
  gen_cuda::launch(gen_cuda::gatherScale40x70, rs.seg.data() + B, cap,
                   rs.seg.data(), B, rs.pos.data(), x.data(), w.data(),
                   squares.data(), g.data(), n.data());
  gen_cpu::gatherScale40x70(rows, rs.seg.data(), B, rs.pos.data(), x.data(),
                            w.data(), squares.data(), rg.data(), rn.data());
  EXPECT_EQ(g, rg);
  expectClose(n.data(), rn.data(), rows * D, "gather_scale");
  expectSentinel(n.data(), rows * D, cap * D, "gather_scale");
}

TEST(CudaKernels, GatherScale) {
  checkGatherScale<40, 70>(topkRows<40, 9>(3, 125), 3, 126);
  checkGatherScale<40, 70>(causalRows<40>(3, 127), 3, 128);
}

/// The gathers fused into the selection (modk-fuse-select-gather), CUDA
/// against CPU: the top-k kernel's warps gather the rows its block has just
/// selected; after a causal selection gather_sequences does; G blocks a
/// sequence (`gather_blocks`), each selecting again and writing and
/// gathering its share. (The CPU's fused forms are checked against fp64 and
/// against the unfused kernels in CpuKernels.SelectGatherFused.)
template <int G> void checkSelectGatherFused() {
  constexpr int S = 40, K = 9, D = 70;
  SCOPED_TRACE(testing::Message() << G << " blocks a sequence");
  for (int64_t B : {1, 5}) {
    auto r = randomFloats(B * S, 130), x = randomFloats(B * S * D, 131, -2, 2),
         w = randomFloats(D, 132),
         squares = randomFloats(B * S, 133, 0.5f * D, 2.0f * D);
    const int64_t cap = B * S;
    std::vector<int32_t> pos(cap, -7), rpos(cap, -7), mask(cap, -7),
        rmask(cap, -7);
    std::vector<int64_t> seg(B + 1, -7), rseg(B + 1, -7);
    std::vector<float> xs(cap * D, kSentinel), xn(cap * D, kSentinel),
        rxs(cap * D, kSentinel), rxn(cap * D, kSentinel);
    modk_cuda::select_topk<S, K, G>(
        r.data(), B, pos.data(), seg.data(), mask.data(),
        gen_cuda::FusedGatherRmsnorm40x70{pos.data(), x.data(), w.data(),
                                          xs.data(), xn.data()},
        nullptr);
    modk_cpu::select_topk<S, K>(
        r.data(), B, rpos.data(), rseg.data(), rmask.data(),
        gen_cpu::FusedGatherRmsnorm40x70{rpos.data(), x.data(), w.data(),
                                         rxs.data(), rxn.data()});
    EXPECT_EQ(pos, rpos);
    EXPECT_EQ(seg, rseg);
    EXPECT_EQ(mask, rmask);
    EXPECT_EQ(xs, rxs);
    expectClose(xn.data(), rxn.data(), B * K * D, "fused gather_rmsnorm");
    expectSentinel(xn.data(), B * K * D, cap * D, "fused gather_rmsnorm");

    std::vector<float> sn(cap * D, kSentinel), rsn(cap * D, kSentinel);
    modk_cuda::select_topk<S, K, G>(
        r.data(), B, pos.data(), seg.data(), mask.data(),
        gen_cuda::FusedGatherScale40x70{pos.data(), x.data(), w.data(),
                                        squares.data(), xs.data(), sn.data()},
        nullptr);
    modk_cpu::select_topk<S, K>(
        r.data(), B, rpos.data(), rseg.data(), rmask.data(),
        gen_cpu::FusedGatherScale40x70{rpos.data(), x.data(), w.data(),
                                       squares.data(), rxs.data(), rsn.data()});
    EXPECT_EQ(xs, rxs);
    expectClose(sn.data(), rsn.data(), B * K * D, "fused gather_scale");
    expectSentinel(sn.data(), B * K * D, cap * D, "fused gather_scale");

    // Causal, the last sequence empty.
    for (int i = 0; i < S; ++i)
      r[(B - 1) * S + i] = -1.0f;
    std::vector<float> cxs(cap * D, kSentinel), cxn(cap * D, kSentinel),
        rcxs(cap * D, kSentinel), rcxn(cap * D, kSentinel);
    modk_cuda::select_causal<S>(r.data(), B, pos.data(), seg.data(),
                                mask.data(), nullptr);
    modk_cuda::gather_sequences<G>(
        B, seg.data(),
        gen_cuda::FusedGatherRmsnorm40x70{pos.data(), x.data(), w.data(),
                                          cxs.data(), cxn.data()},
        nullptr);
    const int64_t total = modk_cpu::select_causal<S>(r.data(), B, rpos.data(),
                                                     rseg.data(), rmask.data());
    modk_cpu::gather_sequences(
        B, rseg.data(),
        gen_cpu::FusedGatherRmsnorm40x70{rpos.data(), x.data(), w.data(),
                                         rcxs.data(), rcxn.data()});
    EXPECT_EQ(seg, rseg);
    EXPECT_EQ(cxs, rcxs);
    expectClose(cxn.data(), rcxn.data(), total * D, "causal fused gather");
    expectSentinel(cxn.data(), total * D, cap * D, "causal fused gather");
  }
}

TEST(CudaKernels, SelectGatherFused) {
  checkSelectGatherFused<1>();
  checkSelectGatherFused<4>(); // shares of 2 and 3 rows, 10 mask positions
  checkSelectGatherFused<9>(); // a row a block
}

// The causal predictor as modc generates it on both targets: fc1's
// product, then the row kernel p = sum_c silu(h_c + b1_c) fc2_c + b2.
TEST(CudaKernels, Predictor) {
  forEachGemmPath([] {
    constexpr int D = 40, HID = 70;
    const int64_t n = 75;
    auto x = randomFloats(n * D, 131), f1 = randomFloats(HID * D, 132),
         b1 = randomFloats(HID, 133), f2 = randomFloats(HID, 134),
         b2 = randomFloats(1, 135);
    std::vector<float> h(n * HID), p(n + 1, kSentinel), rh(n * HID),
        rp(n + 1, kSentinel);
    int64_t rows = n;
    modk_cuda::linear<HID, D>(x.data(), &rows, n, f1.data(), h.data(),
                              nullptr);
    gen_cuda::launch(gen_cuda::predictor70, &rows, n, h.data(), b1.data(),
                     f2.data(), b2.data(), p.data());
    modk_cpu::linear<HID, D>(x.data(), n, f1.data(), rh.data());
    gen_cpu::predictor70(n, rh.data(), b1.data(), f2.data(), b2.data(),
                         rp.data());
    expectClose(h.data(), rh.data(), n * HID, "predictor hidden");
    expectClose(p.data(), rp.data(), n + 1, "predictor");
  });
}

/// The gated scatter as modc generates it, x[t] += g(r[t]) * (a[j] + f[j])
/// in place for row j at token t (G: 0 linear, 1 sigmoid, 2 one), CUDA
/// against CPU.
template <int S, int D, int G>
void checkScatter(const RowSet &rs, int64_t B, uint32_t seed) {
  static_assert(S == 40 && D == 70, "gen_cuda::scatter*40x70");
  constexpr auto cudaKernel = G == 0   ? gen_cuda::scatterLinear40x70
                              : G == 1 ? gen_cuda::scatterSigmoid40x70
                                       : gen_cuda::scatterOne40x70;
  constexpr auto cpuKernel = G == 0   ? gen_cpu::scatterLinear40x70
                             : G == 1 ? gen_cpu::scatterSigmoid40x70
                                      : gen_cpu::scatterOne40x70;
  const int64_t cap = B * S;
  auto x = randomFloats(B * S * D, seed), r = randomFloats(B * S, seed + 1, -3, 3),
       a = randomFloats(cap * D, seed + 2), f = randomFloats(cap * D, seed + 3);
  std::vector<float> y(x), ref(x);
  gen_cuda::launch(cudaKernel, rs.seg.data() + B, cap, rs.seg.data(), B,
                   rs.pos.data(), a.data(), f.data(), r.data(), y.data(),
                   y.data());
  cpuKernel(rs.rows(), rs.seg.data(), B, rs.pos.data(), a.data(), f.data(),
            r.data(), ref.data(), ref.data());
  SCOPED_TRACE(testing::Message() << "gate " << G);
  expectClose(y.data(), ref.data(), y.size(), "gate_scale_scatter");
  // Unselected rows stay bit-identical.
  for (size_t i = 0; i < y.size(); ++i)
    if (ref[i] == x[i])
      ASSERT_EQ(y[i], x[i]);
}

TEST(CudaKernels, GateScaleScatter) {
  checkScatter<40, 70, 0>(topkRows<40, 9>(3, 141), 3, 142);
  checkScatter<40, 70, 1>(topkRows<40, 9>(3, 143), 3, 144);
  checkScatter<40, 70, 2>(causalRows<40>(3, 145), 3, 146);
}

//===----------------------------------------------------------------------===//
// Attention and the decode cache prefill
//===----------------------------------------------------------------------===//

/// Worst |got - cpu| / max(1, |cpu|) of the attention tests on each kernel
/// (0: SIMT, 1: tensor cores).
double worstAttentionError[2] = {0.0, 0.0};

/// causal_attention<H, HD> on both kernels (the tensor-core one where the
/// head dim has it) against the CPU prelude. `offset` floats shift q, k, v
/// and out off their 16-byte alignment (the 4-byte copies of the K/V tiles).
template <int H, int HD>
void checkAttention(const RowSet &rs, int64_t B, int64_t maxSegRows,
                    uint32_t seed, int offset = 0) {
  constexpr int LD = H * HD;
  const int64_t rows = rs.rows(), cap = rows + 3;
  auto q = randomFloats(cap * LD + offset, seed, -2, 2),
       k = randomFloats(cap * LD + offset, seed + 1, -2, 2),
       v = randomFloats(cap * LD + offset, seed + 2);
  std::vector<float> ref(cap * LD, kSentinel);
  modk_cpu::causal_attention<H, HD>(q.data() + offset, k.data() + offset,
                                    v.data() + offset, B, rs.seg.data(),
                                    rs.pos.data(), ref.data());
  constexpr bool hasTc = modk_cuda::detail::attentionTcHeadDim<HD>;
  for (int tc = 0; tc <= (hasTc ? 1 : 0); ++tc) {
    std::vector<float> out(cap * LD + offset, kSentinel);
    attentionOn<H, HD>(tc, q.data() + offset, k.data() + offset,
                       v.data() + offset, B, rs.seg.data(), rs.pos.data(),
                       maxSegRows, out.data() + offset, nullptr);
    SCOPED_TRACE(testing::Message()
                 << (tc ? "tensor cores" : "SIMT") << ", H " << H << " HD "
                 << HD << " rows " << rows << " offset " << offset);
    const float *o = out.data() + offset;
    for (int64_t i = 0; i < rows * LD; ++i)
      worstAttentionError[tc] =
          std::max(worstAttentionError[tc],
                   double(std::fabs(o[i] - ref[i])) /
                       std::max(1.0, double(std::fabs(ref[i]))));
    expectClose(o, ref.data(), rows * LD, "causal_attention");
    expectSentinel(o, rows * LD, cap * LD, "causal_attention");
  }
}

TEST(CudaKernels, CausalAttentionDense) {
  constexpr int S = 80; // two query and key tiles, the second partial
  RowSet dense{std::vector<int32_t>(2 * S), std::vector<int64_t>(3)};
  modk_cpu::identity_segments<S>(2, dense.pos.data(), dense.seg.data());
  checkAttention<2, 32>(dense, 2, S, 151);
}

TEST(CudaKernels, CausalAttentionRouted) {
  checkAttention<2, 24>(topkRows<70, 20>(3, 152), 3, 20, 153);
  checkAttention<3, 16>(causalRows<90>(3, 154), 3, 90, 155);
}

TEST(CudaKernels, CausalAttentionEqualPositions) {
  // Non-decreasing positions with repeats: equal positions see each other.
  RowSet rs;
  rs.seg = {0, 70, 75};
  for (int i = 0; i < 70; ++i)
    rs.pos.push_back(i / 3);
  for (int i = 0; i < 5; ++i)
    rs.pos.push_back(7);
  checkAttention<1, 40>(rs, 2, 72, 156);
}

TEST(CudaKernels, CausalAttentionTensorCoreHeadDims) {
  // Head dims 32, 64, 128 of the tensor-core kernel over several query and
  // key tiles (the last partial), dense and with sparse (routed) positions.
  constexpr int S = 150;
  RowSet dense{std::vector<int32_t>(S), std::vector<int64_t>(2)};
  modk_cpu::identity_segments<S>(1, dense.pos.data(), dense.seg.data());
  checkAttention<2, 32>(dense, 1, S, 171);
  checkAttention<1, 64>(topkRows<200, 140>(2, 172), 2, 140, 173);
  checkAttention<1, 128>(causalRows<170>(3, 174), 3, 170, 175);
  // 8 + 1 output tiles (two P V batches, the second of one tile); k and v
  // off 16-byte alignment (4-byte copies).
  checkAttention<1, 72>(topkRows<100, 70>(1, 176), 1, 70, 177, 1);
  // A head dim without a tensor-core kernel stays on the SIMT one.
  checkAttention<2, 20>(topkRows<70, 20>(2, 178), 2, 20, 179);
}

/// Grouped-query attention (docs/model-format.md section 3): k and v of KVH
/// heads, head h reading key/value head h / (H / KVH), on both kernels
/// against the CPU prelude's (which test/kernels checks bit for bit against
/// multi-head attention over the repeated heads).
template <int H, int KVH, int HD>
void checkGroupedQueryAttention(const RowSet &rs, int64_t B, int64_t maxSegRows,
                                uint32_t seed) {
  constexpr int LD = H * HD, LDK = KVH * HD;
  const int64_t rows = rs.rows(), cap = rows + 3;
  auto q = randomFloats(cap * LD, seed, -2, 2),
       k = randomFloats(cap * LDK, seed + 1, -2, 2),
       v = randomFloats(cap * LDK, seed + 2);
  std::vector<float> ref(cap * LD, kSentinel);
  modk_cpu::causal_attention<H, HD, LD, LDK, LDK, KVH>(
      q.data(), k.data(), v.data(), B, rs.seg.data(), rs.pos.data(),
      ref.data());
  constexpr bool hasTc = modk_cuda::detail::attentionTcHeadDim<HD>;
  for (int tc = 0; tc <= (hasTc ? 1 : 0); ++tc) {
    std::vector<float> out(cap * LD, kSentinel);
    if (tc)
      modk_cuda::causal_attention<H, HD, false, true, KVH>(
          q.data(), k.data(), v.data(), B, rs.seg.data(), rs.pos.data(),
          maxSegRows, out.data(), nullptr);
    else
      modk_cuda::causal_attention<H, HD, false, false, KVH>(
          q.data(), k.data(), v.data(), B, rs.seg.data(), rs.pos.data(),
          maxSegRows, out.data(), nullptr);
    SCOPED_TRACE(testing::Message() << (tc ? "tensor cores" : "SIMT") << ", H "
                                    << H << " KVH " << KVH << " HD " << HD);
    expectClose(out.data(), ref.data(), rows * LD, "grouped-query attention");
    expectSentinel(out.data(), rows * LD, cap * LD, "grouped-query attention");
  }
}

TEST(CudaKernels, CausalAttentionGroupedQuery) {
  constexpr int S = 80;
  RowSet dense{std::vector<int32_t>(2 * S), std::vector<int64_t>(3)};
  modk_cpu::identity_segments<S>(2, dense.pos.data(), dense.seg.data());
  checkGroupedQueryAttention<4, 2, 32>(dense, 2, S, 191);
  checkGroupedQueryAttention<4, 1, 16>(topkRows<70, 20>(3, 192), 3, 20, 193);
  checkGroupedQueryAttention<6, 3, 20>(causalRows<90>(2, 194), 2, 90, 195);
}

TEST(CudaKernels, CacheAppend) {
  constexpr int S = 30, D = 44;
  const int64_t B = 3;
  RowSet rs = causalRows<S>(B, 161);
  rs.seg = {0, 0, 0, 0};
  {
    // A routed row set with a second sequence that is cut by its length.
    auto r = randomFloats(B * S, 162);
    std::vector<int32_t> mask(B * S);
    rs.pos.assign(B * S, 0);
    modk_cpu::select_causal<S>(r.data(), B, rs.pos.data(), rs.seg.data(),
                               mask.data());
  }
  const int64_t rows = rs.rows();
  auto k = randomFloats(rows * D + 1, 163), v = randomFloats(rows * D + 1, 164);
  std::vector<int32_t> lengths = {S, 11, 0};
  std::vector<float> ck(B * S * D, kSentinel), cv(B * S * D, kSentinel);
  std::vector<float> rck(ck), rcv(cv);
  std::vector<int32_t> counts(B, 0), rcounts(B, 0);
  modk_cuda::cache_append<S, D>(k.data(), v.data(), B, rs.seg.data(),
                                rs.pos.data(), lengths.data(), ck.data(),
                                cv.data(), counts.data(), nullptr);
  modk_cpu::cache_append<S, D>(k.data(), v.data(), B, rs.seg.data(),
                               rs.pos.data(), lengths.data(), rck.data(),
                               rcv.data(), rcounts.data());
  EXPECT_EQ(counts, rcounts);
  EXPECT_EQ(ck, rck);
  EXPECT_EQ(cv, rcv);
}

/// The prefill reads K and V as columns of wider rows (KS and VS floats
/// apart, a stacked product's windows on the CPU) as the CPU does, into f32
/// and bf16 caches.
TEST(CudaKernels, CacheAppendReadsColumnWindows) {
  constexpr int S = 12, D = 16, KS = 3 * D, VS = 2 * D + 5, VOff = 3;
  const std::vector<int64_t> seg = {0, 5, 5, 12};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> lengths = {3, 0, 7};
  const int64_t B = 3, rows = seg[B];
  auto qkv = randomFloats(rows * KS, 165), vs = randomFloats(rows * VS, 166);
  const float *k = qkv.data() + D, *v = vs.data() + VOff;
  std::vector<float> ck(B * S * D, kSentinel), cv(ck), rck(ck), rcv(ck);
  std::vector<int32_t> counts(B, 0), rcounts(B, 0);
  modk_cuda::cache_append<S, D, KS, VS>(k, v, B, seg.data(), pos.data(),
                                        lengths.data(), ck.data(), cv.data(),
                                        counts.data(), nullptr);
  modk_cpu::cache_append<S, D, KS, VS>(k, v, B, seg.data(), pos.data(),
                                       lengths.data(), rck.data(), rcv.data(),
                                       rcounts.data());
  EXPECT_EQ(counts, rcounts);
  EXPECT_EQ(counts, lengths);
  EXPECT_EQ(ck, rck);
  EXPECT_EQ(cv, rcv);
  std::vector<modk_cuda::bf16> bk(B * S * D), bv(bk);
  std::vector<modk_cpu::bf16> rbk(B * S * D), rbv(rbk);
  modk_cuda::cache_append<S, D, KS, VS>(k, v, B, seg.data(), pos.data(),
                                        lengths.data(), bk.data(), bv.data(),
                                        counts.data(), nullptr);
  modk_cpu::cache_append<S, D, KS, VS>(k, v, B, seg.data(), pos.data(),
                                       lengths.data(), rbk.data(), rbv.data(),
                                       rcounts.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t e = 0; e < lengths[b] * D; ++e) {
      ASSERT_EQ(bk[b * S * D + e].bits, rbk[b * S * D + e].bits) << b << e;
      ASSERT_EQ(bv[b * S * D + e].bits, rbv[b * S * D + e].bits) << b << e;
    }
}

/// Last (tests run in file order): the worst GEMM and attention errors seen
/// above.
TEST(CudaKernels, GemmAccuracyReport) {
  std::printf("[ info ] GEMM tests, worst |got - cpu| / max(1, |cpu|): "
              "SIMT %.3g, tensor cores (3xTF32) %.3g\n",
              worstGemmError[0], worstGemmError[1]);
  std::printf("[ info ] attention tests, worst |got - cpu| / max(1, |cpu|): "
              "SIMT %.3g, tensor cores (3xTF32) %.3g\n",
              worstAttentionError[0], worstAttentionError[1]);
}

} // namespace
