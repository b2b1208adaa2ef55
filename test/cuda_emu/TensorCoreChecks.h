//===- TensorCoreChecks.h - Tensor-core checks, emulated and on a GPU -*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The checks of what the emulation cannot prove by itself: that the
/// tensor-core instructions are used as the PTX ISA documents them. The same
/// kernels and checks run two ways:
///  - compiled as C++ against CudaEmulation.h (cuda_emu_tests, everywhere),
///    where the preludes' emulated mma and wgmma implement the ISA's layouts
///    as read from its text;
///  - compiled by nvcc and run on a GPU (test/gpu/tensor_core_check.cu), where
///    the hardware implements them, so a misreading shows up as a failure.
/// The checks: the fragment layouts of mma.m16n8k8 (tf32, bf16), the wgmma
/// descriptors and accumulator layout (m64n64k16, m64n128k16 .bf16, on
/// shared layouts unlike the GEMM kernel's), and the bf16 GEMMs (forward,
/// dgrad, wgrad split and unsplit) on every path and tile against fp64.
/// Tolerances allow for the tensor cores' own order of summation: a wrong
/// layout is off by the size of the values, not by rounding.
///
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_CUDA_EMU_TENSORCORECHECKS_H
#define MODC_TEST_CUDA_EMU_TENSORCORECHECKS_H

#include "TestCounters.h" // before the kernels (the GPU build)
#include "CudaCommon.cuh"
#include "CudaKernels.cuh"
#include "CudaKernelsDecode.cuh"
#include "CudaKernelsTrain.cuh"
#include "GemmPlanHooks.h" // the plan of calls that name none
#include "RowKernelsCuda.h" // the generated RoPE epilogues (after the preludes)

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "EmuTestData.h"

namespace modc_tc_check {
using namespace modc_emu_test;

/// A copy of a host vector in device memory (host memory under emulation).
template <typename T> class DeviceCopy {
public:
  explicit DeviceCopy(const std::vector<T> &host) : n(host.size()) {
    void *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
      return;
    }
    ptr = static_cast<T *>(p);
    cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  DeviceCopy(const DeviceCopy &) = delete;
  DeviceCopy &operator=(const DeviceCopy &) = delete;
  ~DeviceCopy() { cudaFree(ptr); }
  T *get() const { return ptr; }
  /// Waits for the device, then copies back (a launch error is a failure).
  std::vector<T> read() const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess)
        << cudaGetErrorString(cudaGetLastError());
    cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

private:
  T *ptr = nullptr;
  size_t n;
};

/// Checks D = A B + C for `count` problems of M x N x K (A [M][K], B [K][N],
/// C and D [M][N], row-major, problem p at p * size): the products of the
/// operand values are exact, and whatever order the hardware adds them in,
/// D is within a few roundings per term of the fp64 sum.
inline void expectProducts(const std::vector<float> &A,
                           const std::vector<float> &B,
                           const std::vector<float> &C,
                           const std::vector<float> &D, int count, int M,
                           int N, int K, const char *what) {
  int bad = 0;
  for (int p = 0; p < count; ++p)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        const float *a = &A[size_t(p) * M * K], *b = &B[size_t(p) * K * N];
        double want = C[(size_t(p) * M + m) * N + n], mag = std::fabs(want);
        for (int k = 0; k < K; ++k) {
          const double prod = double(a[m * K + k]) * b[k * N + n];
          want += prod;
          mag += std::fabs(prod);
        }
        const float got = D[(size_t(p) * M + m) * N + n];
        if (!(std::fabs(got - want) <= (K + 2) * 0x1p-23 * mag) && bad++ < 8)
          ADD_FAILURE() << what << ", problem " << p << ": D[" << m << "]["
                        << n << "] = " << got << ", want " << want;
      }
}

//===----------------------------------------------------------------------===//
// mma.m16n8k8 fragments
//===----------------------------------------------------------------------===//

/// Where register i of lane (g, t) of an m16n8 accumulator fragment lives
/// in a [16][8] row-major matrix: [g + 8 (i >> 1)][2t + (i & 1)].
__device__ inline int accumulatorAt(int g, int t, int i) {
  return (g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1);
}

/// One warp per 16x8x8 problem w: D = A B + C with A [16][8], B [8][8], C and
/// D [16][8] row-major, the fragments placed as the PTX ISA documents them
/// for mma.m16n8k8 .tf32 (g = groupID = lane >> 2, t = threadID_in_group):
///   a_i: row g (a0, a2) or g + 8 (a1, a3), column t (a0, a1) or t + 4;
///   b_i: row t (b0) or t + 4 (b1), column g;
///   c_i: row g (c0, c1) or g + 8 (c2, c3), column 2t + (i & 1).
__global__ void mmaTf32FragmentKernel(const float *A, const float *B,
                                      const float *C, float *D) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const float *a = A + w * 128, *b = B + w * 64, *c = C + w * 128;
  const uint32_t af[4] = {__float_as_uint(a[g * 8 + t]),
                          __float_as_uint(a[(g + 8) * 8 + t]),
                          __float_as_uint(a[g * 8 + t + 4]),
                          __float_as_uint(a[(g + 8) * 8 + t + 4])};
  const uint32_t bf[2] = {__float_as_uint(b[t * 8 + g]),
                          __float_as_uint(b[(t + 4) * 8 + g])};
  float cf[4], d[4];
  for (int i = 0; i < 4; ++i)
    cf[i] = c[accumulatorAt(g, t, i)];
  modk_cuda::detail::mma_tf32_m16n8k8(d, af, bf, cf);
  for (int i = 0; i < 4; ++i)
    D[w * 128 + accumulatorAt(g, t, i)] = d[i];
}

/// The same for mma.m16n8k8 .bf16 (element 2i of a pair in the low half):
/// a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1], b0 = B[2t..2t+1][g]; c as
/// for .tf32. A and B hold bf16 values already.
__global__ void mmaBf16FragmentKernel(const float *A, const float *B,
                                      const float *C, float *D) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const float *a = A + w * 128, *b = B + w * 64, *c = C + w * 128;
  auto pair = [](float lo, float hi) {
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
  };
  const uint32_t af[2] = {
      pair(a[g * 8 + 2 * t], a[g * 8 + 2 * t + 1]),
      pair(a[(g + 8) * 8 + 2 * t], a[(g + 8) * 8 + 2 * t + 1])};
  const uint32_t bf = pair(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]);
  float cf[4], d[4];
  for (int i = 0; i < 4; ++i)
    cf[i] = c[accumulatorAt(g, t, i)];
  modk_cuda::detail::mma_bf16_m16n8k8(d, af, bf, cf);
  for (int i = 0; i < 4; ++i)
    D[w * 128 + accumulatorAt(g, t, i)] = d[i];
}

/// Host roundings of the test inputs (the kernels' are device functions),
/// for finite values: tf32 to nearest with ties away from zero (cvt.rna),
/// bf16 by its definition (bf16Exact).
inline float tf32Value(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float bf16Value(float x) { return float(bf16Exact(x)); }

/// Two warps with different problems, three launches each.
template <typename Kernel, typename Round>
void checkMmaFragments(Kernel kernel, Round round, uint32_t seed,
                       const char *what) {
  constexpr int W = 2;
  for (uint32_t s = 0; s < 3; ++s) {
    MmaProblems p(W, seed + s, round);
    DeviceCopy<float> A(p.A), B(p.B), C(p.C), D(p.D);
    MODC_LAUNCH(kernel, 1, W * 32, 0, nullptr, A.get(), B.get(), C.get(),
                D.get());
    expectProducts(p.A, p.B, p.C, D.read(), W, 16, 8, 8, what);
  }
}

inline void checkMmaTf32Fragments() {
  checkMmaFragments(mmaTf32FragmentKernel, tf32Value, 901, "mma .tf32");
}

inline void checkMmaBf16Fragments() {
  checkMmaFragments(mmaBf16FragmentKernel, bf16Value, 3101, "mma .bf16");
}

//===----------------------------------------------------------------------===//
// wgmma: descriptors and accumulators
//===----------------------------------------------------------------------===//

/// One warpgroup computes D = A B + C (64 x N x 16, A [64][16], B [16][N],
/// C and D [64][N]) with one wgmma, A and B placed in shared memory as the
/// PTX ISA's K-major unswizzled core matrices (8 rows x 16 bytes), here with
/// layouts unlike the GEMM kernel's: A's row blocks adjacent (SBO 128) and
/// its two k halves 1 KB apart (LBO), B's k halves adjacent (LBO 128) and its
/// row blocks 256 bytes apart, both behind 48 bytes of other data. The
/// accumulators are placed as the ISA documents them (register 4j + 2h + e):
///   d[j][2h + e] = D[16w + g + 8h][8j + 2t + e].
template <int N>
__global__ void wgmmaFragmentKernel(const float *A, const float *B,
                                    const float *C, float *D) {
  constexpr uint32_t aLbo = 1024, aSbo = 128, bLbo = 128, bSbo = 256;
  constexpr int kPad = 48, aBytes = 2048, bBytes = N / 8 * 256;
  __shared__ __align__(128) unsigned char smem[kPad + aBytes + bBytes];
  unsigned char *a = smem + kPad, *b = a + aBytes;
  auto put = [](unsigned char *base, uint32_t lbo, uint32_t sbo, int row,
                int k, float x) {
    *reinterpret_cast<uint16_t *>(base + row / 8 * sbo + k / 8 * lbo +
                                  row % 8 * 16 + k % 8 * 2) =
        uint16_t(__float_as_uint(x) >> 16); // a bf16 value already
  };
  const int tid = threadIdx.x;
  for (int i = tid; i < 64 * 16; i += 128)
    put(a, aLbo, aSbo, i / 16, i % 16, A[i]);
  for (int i = tid; i < N * 16; i += 128) // B[k][n] at B[k * N + n]
    put(b, bLbo, bSbo, i % N, i / N, B[i]);
  modk_cuda::detail::fenceProxyAsync();
  __syncthreads();
  const int w = tid / 32, g = (tid % 32) >> 2, t = tid & 3;
  // d[j][2h + e] is D[16w + g + 8h][8j + 2t + e].
  auto at = [&](int j, int x) {
    return (16 * w + g + 8 * (x / 2)) * N + 8 * j + 2 * t + x % 2;
  };
  float d[N / 8][4];
  for (int j = 0; j < N / 8; ++j)
    for (int x = 0; x < 4; ++x)
      d[j][x] = C[at(j, x)];
  modk_cuda::detail::wgmmaFence(d);
  modk_cuda::detail::wgmmaBf16<N>(
      d, modk_cuda::detail::wgmmaDescriptor(a, aLbo, aSbo),
      modk_cuda::detail::wgmmaDescriptor(b, bLbo, bSbo), smem);
  modk_cuda::detail::wgmmaCommit();
  modk_cuda::detail::wgmmaWait<0>(d);
  for (int j = 0; j < N / 8; ++j)
    for (int x = 0; x < 4; ++x)
      D[at(j, x)] = d[j][x];
}

template <int N> void checkWgmmaFragments(uint32_t seed) {
  auto A = randomFloats(64 * 16, seed, -4, 4),
       B = randomFloats(16 * N, seed + 1, -4, 4);
  for (auto *m : {&A, &B})
    for (float &x : *m)
      x = bf16Value(x);
  const auto C = randomFloats(64 * N, seed + 2, -8, 8);
  DeviceCopy<float> dA(A), dB(B), dC(C),
      dD(std::vector<float>(64 * N, kSentinel));
  MODC_LAUNCH(wgmmaFragmentKernel<N>, 1, 128, 0, nullptr, dA.get(), dB.get(),
              dC.get(), dD.get());
  expectProducts(A, B, C, dD.read(), 1, 64, N, 16,
                 N == 64 ? "wgmma m64n64k16" : "wgmma m64n128k16");
}

/// Both wgmma widths of the GEMM kernel, and (emulated, where the
/// descriptor is a host function) its fields as the PTX ISA places them:
/// start, LBO, SBO in 16-byte units at bits 0, 16, 32; base offset and
/// swizzle zero.
inline void checkWgmmaDescriptorsAndFragments() {
  checkWgmmaFragments<64>(3150);
  checkWgmmaFragments<128>(3160);
#if !defined(__CUDACC__)
  alignas(16) static unsigned char tile[64];
  const uint64_t desc = modk_cuda::detail::wgmmaDescriptor(tile + 32, 128, 512);
  EXPECT_EQ(desc & 0x3fff,
            ((reinterpret_cast<uintptr_t>(tile) + 32) & 0x3ffff) >> 4);
  EXPECT_EQ((desc >> 16) & 0x3fff, 8u);
  EXPECT_EQ((desc >> 32) & 0x3fff, 32u);
  EXPECT_EQ(desc >> 46, 0u);
#endif
}

//===----------------------------------------------------------------------===//
// bf16 GEMMs on every path
//===----------------------------------------------------------------------===//

/// |got - want| within f32 accumulation of the terms' magnitudes (mag).
inline void expectGemm(const std::vector<float> &got,
                       const std::vector<double> &want,
                       const std::vector<double> &mag, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 8; ++i)
    if (!(std::fabs(got[i] - want[i]) <= 0x1p-18 * mag[i] + 1e-30)) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i] << " (terms' magnitude " << mag[i] << ")";
      ++bad;
    }
}

/// y = a w^T, da = dy w and dw += dy^T a (unsplit and split in row chunks)
/// with bf16 operands, rows of them, against fp64 of the rounded operands.
template <int N, int K> void checkBf16Gemms(int64_t rows, uint32_t seed) {
  const auto a = randomFloats(rows * K, seed), w = randomFloats(N * K, seed + 1),
             dy = randomFloats(rows * N, seed + 2);
  std::vector<double> y(rows * N, 0.0), yMag(rows * N, 0.0);
  std::vector<double> da(rows * K, 0.0), daMag(rows * K, 0.0);
  std::vector<double> dw(N * K, 0.0), dwMag(N * K, 0.0);
  for (int64_t m = 0; m < rows; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        const double fw = bf16Exact(a[m * K + k]) * bf16Exact(w[n * K + k]);
        const double fd = bf16Exact(dy[m * N + n]) * bf16Exact(w[n * K + k]);
        const double fg = bf16Exact(dy[m * N + n]) * bf16Exact(a[m * K + k]);
        y[m * N + n] += fw, yMag[m * N + n] += std::fabs(fw);
        da[m * K + k] += fd, daMag[m * K + k] += std::fabs(fd);
        dw[n * K + k] += fg, dwMag[n * K + k] += std::fabs(fg);
      }
  DeviceCopy<float> dA(a), dW(w), dDy(dy);
  DeviceCopy<int64_t> dRows(std::vector<int64_t>{rows});
  DeviceCopy<float> dY(std::vector<float>(rows * N, kSentinel));
  modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), rows, dW.get(), dY.get(),
                                nullptr);
  expectGemm(dY.read(), y, yMag, "bf16 linear");
  DeviceCopy<float> dDa(std::vector<float>(rows * K, kSentinel));
  modk_cuda::linear_dgrad<N, K, true>(dDy.get(), dRows.get(), rows, dW.get(),
                                      dDa.get(), false, nullptr);
  expectGemm(dDa.read(), da, daMag, "bf16 dgrad");
  DeviceCopy<float> dDw(std::vector<float>(N * K, 0.0f));
  modk_cuda::linear_wgrad<N, K, true>(dDy.get(), dRows.get(), rows, dA.get(),
                                      dDw.get(), nullptr);
  expectGemm(dDw.read(), dw, dwMag, "bf16 wgrad");
  if (rows <= 64)
    return;
  // The rows in chunks of 64 (scratch), the partials summed in chunk order.
  gemm_hooks::wgradChunk() = 64;
  const int64_t floats = modk_cuda::linear_wgrad_scratch_floats<N, K>(rows);
  EXPECT_GT(floats, 0);
  DeviceCopy<float> scratch(std::vector<float>(std::max<int64_t>(floats, 1)));
  DeviceCopy<float> dDwSplit(std::vector<float>(N * K, 0.0f));
  modk_cuda::linear_wgrad<N, K, true>(dDy.get(), dRows.get(), rows, dA.get(),
                                      dDwSplit.get(), scratch.get(), nullptr);
  gemm_hooks::wgradChunk() = 0;
  expectGemm(dDwSplit.read(), dw, dwMag, "bf16 split wgrad");
}

/// Runs f on each GEMM path a bf16 product can take, each tile choice (a
/// forced tile puts few-row products on wgmma too): under emulation SIMT,
/// mma.sync and wgmma; compiled by nvcc the tensor-core paths of the build
/// (mma.sync, and wgmma where MODC_CUDA_WGMMA).
template <typename F> void forEachBf16GemmPath(F f) {
#if defined(__CUDACC__)
  const int first = 1, last = MODC_CUDA_WGMMA ? 2 : 1;
#else
  const int first = 0, last = 2;
#endif
  const char *names[3] = {"SIMT", "mma.sync", "wgmma"};
  for (int path = first; path <= last; ++path) {
    gemm_hooks::path() = path;
    for (int tile = 0; tile <= 2; ++tile) {
      gemm_hooks::tile() = tile;
      SCOPED_TRACE(testing::Message() << names[path] << ", tile " << tile);
      f();
    }
  }
  gemm_hooks::tile() = 0;
  gemm_hooks::path() = gemm_hooks::kDefaultPath;
}

/// x (a bf16 value) as the bf16 the kernels store: its high 16 bits.
inline modk_cuda::bf16 bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  modk_cuda::bf16 b;
  b.bits = static_cast<uint16_t>(u >> 16);
  return b;
}

/// Expects got[i] to be want[i] bit for bit (NaN only where want is NaN).
inline void expectSameBits(const std::vector<float> &got,
                           const std::vector<float> &want, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 8; ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                    << want[i];
      ++bad;
    }
}

/// A bf16 model's buffers that only products read are stored as bf16
/// (modk-store-bf16). A product reading its A from such a buffer, one
/// writing its output to one, and a weight gradient reading its activations
/// (B) from one must give exactly what the f32 arrays holding the same
/// values give: the same bits (only the loads and stores differ).
/// `offset` elements before A's first row: 0 keeps its rows 16-byte
/// aligned where K allows, 1 makes every 16-byte read take the fallback.
template <int N, int K>
void checkBf16StoredOperands(int64_t rows, int offset, uint32_t seed) {
  auto a = randomFloats(rows * K, seed);
  for (float &x : a)
    x = bf16Value(x);
  const auto w = randomFloats(N * K, seed + 1),
             w2 = randomFloats(N * K, seed + 2);
  std::vector<modk_cuda::bf16> aBits(offset + rows * K);
  for (int64_t i = 0; i < rows * K; ++i)
    aBits[offset + i] = bf16Bits(a[i]);
  DeviceCopy<float> dA(a), dW(w), dW2(w2);
  DeviceCopy<modk_cuda::bf16> dAb(aBits);
  const modk_cuda::bf16 *aStored = dAb.get() + offset;
  DeviceCopy<int64_t> dRows(std::vector<int64_t>{rows});
  const std::vector<float> sentinel(rows * N, kSentinel);
  auto readBf16 = [&](DeviceCopy<modk_cuda::bf16> &d) {
    std::vector<float> out;
    for (modk_cuda::bf16 b : d.read())
      out.push_back(float(b));
    return out;
  };
  auto rounded = [](std::vector<float> v) {
    for (float &x : v)
      x = bf16Value(x);
    return v;
  };

  // A stored as bf16, output f32 (the attention output into wo, the LM head).
  DeviceCopy<float> want(sentinel), got(sentinel);
  modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), rows, dW.get(),
                                want.get(), nullptr);
  modk_cuda::linear<N, K, true>(aStored, dRows.get(), rows, dW.get(),
                                got.get(), nullptr);
  expectSameBits(got.read(), want.read(), "linear, bf16 A");

  // Both stored as bf16 (a product into bf16 rows): the f32 result
  // rounded.
  const std::vector<modk_cuda::bf16> unset(rows * N, bf16Bits(kSentinel));
  DeviceCopy<float> upWant(sentinel);
  DeviceCopy<modk_cuda::bf16> upGot(unset);
  modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), rows, dW2.get(),
                                upWant.get(), nullptr);
  modk_cuda::linear<N, K, true>(aStored, dRows.get(), rows, dW2.get(),
                                upGot.get(), nullptr);
  expectSameBits(readBf16(upGot), rounded(upWant.read()),
                 "linear, bf16 A and y");

  // The weight gradient's activations stored as bf16 (its B operand, rows
  // along the reduction), accumulated into a nonzero dw: unsplit, and split
  // in row chunks whose partials are summed in order.
  const auto dy = randomFloats(rows * N, seed + 3),
             dwStart = randomFloats(N * K, seed + 4);
  DeviceCopy<float> dDy(dy);
  // And against fp64 of the rounded operands, so that the shared path is
  // not merely consistent with itself.
  std::vector<double> dwRef(dwStart.begin(), dwStart.end()), dwMag(N * K);
  for (int64_t i = 0; i < N * K; ++i)
    dwMag[i] = std::fabs(dwStart[i]);
  for (int64_t m = 0; m < rows; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        const double t = double(bf16Value(dy[m * N + n])) * a[m * K + k];
        dwRef[n * K + k] += t;
        dwMag[n * K + k] += std::fabs(t);
      }
  for (int64_t chunk : {int64_t(0), int64_t(16)}) {
    SCOPED_TRACE(testing::Message() << "wgrad row chunk " << chunk);
    gemm_hooks::wgradChunk() = chunk;
    const int64_t floats =
        chunk ? modk_cuda::linear_wgrad_scratch_floats<N, K>(rows) : 0;
    DeviceCopy<float> scratch(std::vector<float>(std::max<int64_t>(floats, 1)));
    float *scratchPtr = floats ? scratch.get() : nullptr;
    DeviceCopy<float> dwWant(dwStart), dwGot(dwStart);
    modk_cuda::linear_wgrad<N, K, true>(dDy.get(), dRows.get(), rows, dA.get(),
                                        dwWant.get(), scratchPtr, nullptr);
    modk_cuda::linear_wgrad<N, K, true>(dDy.get(), dRows.get(), rows, aStored,
                                        dwGot.get(), scratchPtr, nullptr);
    expectSameBits(dwGot.read(), dwWant.read(), "wgrad, bf16 activations");
    expectGemm(dwGot.read(), dwRef, dwMag, "wgrad, bf16 activations, fp64");
  }
  gemm_hooks::wgradChunk() = 0;
}

/// Stored bf16 operands on aligned and unaligned rows, ragged edges, few
/// rows and many.
inline void checkBf16StoredOperandShapes() {
  checkBf16StoredOperands<70, 45>(37, 0, 3501);
  checkBf16StoredOperands<64, 48>(130, 0, 3502);
  checkBf16StoredOperands<64, 48>(130, 1, 3503);
  checkBf16StoredOperands<136, 40>(5, 0, 3504);
}

/// Puts bf16 products on the wgmma path, the TMA kernel's family, for its
/// lifetime; then restores the defaults (the tile override and the TMA CTA
/// limit too).
struct OnWgmmaPath {
  OnWgmmaPath() { gemm_hooks::path() = gemm_hooks::Wgmma; }
  ~OnWgmmaPath() {
    gemm_hooks::tile() = 0;
    gemm_hooks::tmaCtas() = 0;
    gemm_hooks::path() = gemm_hooks::kDefaultPath;
  }
};

/// On both TMA tiles: runs `run` (the products under test, returning their
/// results) on the wgmma kernel that reads its operands itself, then on the
/// TMA kernel in a WeightCopyScope once per persistent-grid CTA limit of
/// `ctaLimits` (0: a CTA a tile; one or a few CTAs take several tiles each,
/// the stages' phases carried from tile to tile), and hands each TMA result
/// to check(viaTma, direct, tmaStats before the TMA run). Call it within
/// OnWgmmaPath.
template <typename Run, typename Check>
void compareTmaWithWgmma(std::initializer_list<int> ctaLimits, Run run,
                         Check check) {
  namespace d = modk_cuda::detail;
  for (int tile = 1; tile <= 2; ++tile) {
    SCOPED_TRACE(testing::Message() << "tile " << tile);
    gemm_hooks::tile() = tile;
    gemm_hooks::tma() = false;
    const auto direct = run();
    gemm_hooks::tma() = true;
    for (int ctas : ctaLimits) {
      SCOPED_TRACE(testing::Message() << "CTAs " << ctas);
      gemm_hooks::tmaCtas() = ctas;
      const d::TmaStats before = d::tmaStats();
      decltype(run()) viaTma;
      {
        modk_cuda::WeightCopyScope scope;
        viaTma = run();
      }
      check(viaTma, direct, before);
    }
    gemm_hooks::tmaCtas() = 0;
  }
  gemm_hooks::tile() = 0;
}

/// The TMA-fed wgmma kernel (sm_90a; bf16 A stored, the weight's bf16 copy
/// rounded in the forward call): `count` rows on the device of a bound of
/// `bound`, on both tiles, against fp64 of the rounded operands and bit for
/// bit against the wgmma kernel that reads its operands itself (the same
/// k16 wgmmas in the same order); every epilogue a forward product uses;
/// rows past the count untouched; a weight changed between calls is rounded
/// again, one used twice in a call is rounded once, copies of a declared
/// parameters' version are reused until it or an AdamW step changes them,
/// and copies left unused are freed.
template <int N, int K>
void checkTmaGemms(int64_t count, int64_t bound, uint32_t seed) {
  using modk_cuda::bf16;
  namespace d = modk_cuda::detail;
  auto a = randomFloats(bound * K, seed);
  for (float &x : a)
    x = bf16Value(x);
  const auto w = randomFloats(N * K, seed + 1), w2 = randomFloats(N * K, seed + 2),
             res = randomFloats(bound * N, seed + 3);
  std::vector<bf16> aBits(bound * K);
  for (int64_t i = 0; i < bound * K; ++i)
    aBits[i] = bf16Bits(a[i]);
  DeviceCopy<bf16> dA(aBits);
  DeviceCopy<float> dW(w), dW2(w2), dRes(res);
  DeviceCopy<int64_t> dRows(std::vector<int64_t>{count});
  auto reference = [&](const std::vector<float> &weights,
                       std::vector<double> &mag) {
    std::vector<double> y(bound * N, kSentinel);
    mag.assign(bound * N, 0.0);
    for (int64_t m = 0; m < count; ++m)
      for (int n = 0; n < N; ++n) {
        double sum = 0.0;
        for (int k = 0; k < K; ++k) {
          const double f = bf16Exact(a[m * K + k]) * bf16Exact(weights[n * K + k]);
          sum += f, mag[m * N + n] += std::fabs(f);
        }
        y[m * N + n] = sum;
      }
    return y;
  };
  const std::vector<float> sentinel(bound * N, kSentinel);
  const std::vector<bf16> unset(bound * N, bf16Bits(kSentinel));
  auto widen = [](const std::vector<bf16> &v) {
    std::vector<float> out;
    for (bf16 b : v)
      out.push_back(float(b));
    return out;
  };
  // Every stored form on the current path, each product a different one:
  // linear (both weights), the accumulating epilogue (residual add, as the
  // backward's products use it), and products into bf16 rows (widened).
  auto run = [&]() {
    std::vector<std::vector<float>> out;
    DeviceCopy<float> y(sentinel), yr(sentinel), y2(sentinel);
    DeviceCopy<bf16> up(unset), into(unset);
    modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), bound, dW.get(),
                                  y.get(), nullptr);
    d::linearEpi<N, K, d::EpiAdd, true, modk_cuda::DefaultGemmPlan>(
        dA.get(), dRows.get(), bound, dW.get(), dRes.get(), yr.get(),
        nullptr);
    modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), bound, dW2.get(),
                                  y2.get(), nullptr);
    modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), bound, dW2.get(),
                                  up.get(), nullptr);
    modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), bound, dW.get(),
                                  into.get(), nullptr);
    out.push_back(y.read());
    out.push_back(yr.read());
    out.push_back(y2.read());
    out.push_back(widen(up.read()));
    out.push_back(widen(into.read()));
    return out;
  };
  const char *what[5] = {"linear", "residual add", "linear W2",
                         "W2 into bf16", "W into bf16"};

  OnWgmmaPath onWgmma;
  std::vector<double> mag;
  const std::vector<double> want = reference(w, mag);
  compareTmaWithWgmma({0, 1, 3}, run,
                      [&](const std::vector<std::vector<float>> &viaTma,
                          const std::vector<std::vector<float>> &direct,
                          const d::TmaStats &before) {
                        // Five products, two weights: each rounded once.
                        EXPECT_EQ(d::tmaStats().launches - before.launches, 5);
                        EXPECT_EQ(d::tmaStats().roundings - before.roundings, 2);
                        expectGemm(viaTma[0], want, mag,
                                   "TMA linear against fp64");
                        for (int i = 0; i < 5; ++i)
                          expectSameBits(viaTma[i], direct[i], what[i]);
                      });
  for (int tile = 1; tile <= 2; ++tile) {
    SCOPED_TRACE(testing::Message() << "tile " << tile);
    gemm_hooks::tile() = tile;
    // New weight values at the same address: the next call rounds again.
    auto changed = randomFloats(N * K, seed + 10 + tile);
    cudaMemcpy(dW.get(), changed.data(), changed.size() * sizeof(float),
               cudaMemcpyHostToDevice);
    DeviceCopy<float> y(sentinel);
    {
      modk_cuda::WeightCopyScope scope;
      modk_cuda::linear<N, K, true>(dA.get(), dRows.get(), bound, dW.get(),
                                    y.get(), nullptr);
    }
    std::vector<double> changedMag;
    expectGemm(y.read(), reference(changed, changedMag), changedMag,
               "TMA linear after the weight changed");
    cudaMemcpy(dW.get(), w.data(), w.size() * sizeof(float),
               cudaMemcpyHostToDevice);
  }
  // A declared version of the parameters: the copies of its first call are
  // reused by the next, rounded again after a new version or an AdamW step
  // (params_written); the results stay the bits of the direct kernel.
  gemm_hooks::tile() = 1;
  gemm_hooks::tma() = false;
  const auto direct = run();
  gemm_hooks::tma() = true;
  auto roundingsOfOneCall = [&]() {
    const int64_t before = d::tmaStats().roundings;
    std::vector<std::vector<float>> out;
    {
      modk_cuda::WeightCopyScope scope;
      out = run();
    }
    for (int i = 0; i < 5; ++i)
      expectSameBits(out[i], direct[i], what[i]);
    return d::tmaStats().roundings - before;
  };
  modk_cuda::declare_params_version(7);
  EXPECT_EQ(roundingsOfOneCall(), 2) << "first call of version 7";
  EXPECT_EQ(roundingsOfOneCall(), 0) << "version 7 again";
  modk_cuda::params_written();
  EXPECT_EQ(roundingsOfOneCall(), 2) << "after an AdamW step";
  EXPECT_EQ(roundingsOfOneCall(), 0) << "and again";
  modk_cuda::declare_params_version(8);
  EXPECT_EQ(roundingsOfOneCall(), 2) << "version 8";
  modk_cuda::declare_params_version(0);
  EXPECT_EQ(roundingsOfOneCall(), 2) << "unknown version";
  EXPECT_EQ(roundingsOfOneCall(), 2) << "unknown version, every call";
  gemm_hooks::tile() = 0;

  // Copies no call has used for kWeightCopyIdleCalls calls are freed.
  EXPECT_FALSE(d::weightCopies().copies.empty());
  for (uint64_t i = 0; i < d::kWeightCopyIdleCalls; ++i)
    modk_cuda::WeightCopyScope idle;
  EXPECT_TRUE(d::weightCopies().copies.empty());
}

/// TMA shapes: more tiles along the reduction than stages (the refill) with
/// a ragged last one, ragged rows and columns on both tiles, rows on the
/// device below the bound, and few rows.
inline void checkTmaGemmShapes() {
  checkTmaGemms<136, 456>(130, 130, 3601);
  checkTmaGemms<72, 64>(100, 160, 3602);
  checkTmaGemms<64, 40>(5, 5, 3603);
}

/// The backward products on the TMA kernel (sm_90a), as training runs them
/// on a bf16 model's stored gradients: the input gradient da (+)= dy w of a
/// bf16 dy (`count` rows on the device of a bound of `bound`) reading the
/// weight's bf16 copy MN-major, and the weight gradient dw += dy^T a of bf16
/// dy and a, both MN-major over the rows, unsplit and split into row chunks
/// of 48 (chunk ends inside a 64-step k-tile). The rows past the count hold
/// NaN, which the kernel must not read (it zeroes the steps past a chunk's
/// end). On both tiles and persistent grids of every CTA, one and three
/// CTAs: bit for bit against the wgmma kernel that reads its operands
/// itself, and against fp64 of the rounded operands.
template <int N, int K>
void checkTmaBackward(int64_t count, int64_t bound, uint32_t seed) {
  using modk_cuda::bf16;
  namespace d = modk_cuda::detail;
  auto dy = randomFloats(bound * N, seed), a = randomFloats(bound * K, seed + 1);
  const auto w = randomFloats(N * K, seed + 2),
             daInit = randomFloats(bound * K, seed + 3),
             dwInit = randomFloats(N * K, seed + 4);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < bound * N; ++i)
    dy[i] = i < count * N ? bf16Value(dy[i]) : nan;
  for (int64_t i = 0; i < bound * K; ++i)
    a[i] = i < count * K ? bf16Value(a[i]) : nan;
  auto toBits = [](const std::vector<float> &v) {
    std::vector<bf16> out;
    for (float x : v)
      out.push_back(bf16Bits(x));
    return out;
  };
  DeviceCopy<bf16> dDy(toBits(dy)), dA(toBits(a));
  DeviceCopy<float> dW(w);
  DeviceCopy<int64_t> dRows(std::vector<int64_t>{count});

  std::vector<double> da(bound * K, kSentinel), daMag(bound * K, 0.0),
      dw(N * K, 0.0), dwMag(N * K, 0.0);
  for (int64_t m = 0; m < count; ++m)
    for (int k = 0; k < K; ++k) {
      double s = 0.0;
      for (int n = 0; n < N; ++n) {
        const double f = double(dy[m * N + n]) * bf16Exact(w[n * K + k]);
        s += f, daMag[m * K + k] += std::fabs(f);
      }
      da[m * K + k] = s;
    }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int64_t m = 0; m < count; ++m) {
        const double f = double(dy[m * N + n]) * double(a[m * K + k]);
        dw[n * K + k] += f, dwMag[n * K + k] += std::fabs(f);
      }

  // da, da accumulated onto daInit, dw added to zeros, split dw.
  auto run = [&]() {
    const std::vector<float> sentinel(bound * K, kSentinel),
        zeros(N * K, 0.0f);
    DeviceCopy<float> outDa(sentinel), accDa(daInit), outDw(zeros),
        splitDw(zeros);
    modk_cuda::linear_dgrad<N, K, true>(dDy.get(), dRows.get(), bound, dW.get(),
                                        outDa.get(), false, nullptr);
    modk_cuda::linear_dgrad<N, K, true>(dDy.get(), dRows.get(), bound, dW.get(),
                                        accDa.get(), true, nullptr);
    modk_cuda::linear_wgrad<N, K, true>(dDy.get(), dRows.get(), bound, dA.get(),
                                        outDw.get(), nullptr);
    gemm_hooks::wgradChunk() = 48;
    const int64_t floats = modk_cuda::linear_wgrad_scratch_floats<N, K>(bound);
    EXPECT_GT(floats, 0);
    DeviceCopy<float> scratch(std::vector<float>(floats, kSentinel));
    modk_cuda::linear_wgrad<N, K, true>(dDy.get(), dRows.get(), bound, dA.get(),
                                        splitDw.get(), scratch.get(), nullptr);
    gemm_hooks::wgradChunk() = 0;
    return std::vector<std::vector<float>>{outDa.read(), accDa.read(),
                                           outDw.read(), splitDw.read()};
  };
  const char *what[4] = {"dgrad", "dgrad accumulated", "wgrad",
                         "split wgrad"};

  OnWgmmaPath onWgmma;
  compareTmaWithWgmma({0, 1, 3}, run,
                      [&](const std::vector<std::vector<float>> &viaTma,
                          const std::vector<std::vector<float>> &direct,
                          const d::TmaStats &before) {
                        // Four products on TMA, one weight rounded once.
                        EXPECT_EQ(d::tmaStats().launches - before.launches, 4);
                        EXPECT_EQ(d::tmaStats().roundings - before.roundings, 1);
                        for (int i = 0; i < 4; ++i)
                          expectSameBits(viaTma[i], direct[i], what[i]);
                        expectGemm(viaTma[0], da, daMag,
                                   "TMA dgrad against fp64");
                        expectGemm(viaTma[2], dw, dwMag,
                                   "TMA wgrad against fp64");
                        expectGemm(viaTma[3], dw, dwMag,
                                   "TMA split wgrad against fp64");
                      });
}

/// Backward TMA shapes: rows on the device below the bound and not a
/// multiple of the 64-step k-tile, more k-tiles than stages, ragged output
/// tiles (N, K not multiples of 64 or 128), and rows within one k-tile.
inline void checkTmaBackwardShapes() {
  checkTmaBackward<136, 72>(450, 520, 3701);
  checkTmaBackward<64, 200>(100, 100, 3702);
  checkTmaBackward<72, 64>(37, 64, 3703);
}

//===----------------------------------------------------------------------===//
// RoPE in the GEMM epilogue (modc's generated epilogue over heads)
//===----------------------------------------------------------------------===//

/// The GEMM path a product of `rows` rows (the static bound) takes now, as
/// launchGemm picks it: 0 SIMT, 1 mma.sync, 2 wgmma.
inline int currentGemmPath(bool bf16Product, int64_t rows) {
  if (gemm_hooks::path() == gemm_hooks::Simt)
    return 0;
  const bool wgmma = MODC_TEST_WGMMA_BUILT && gemm_hooks::path() == gemm_hooks::Wgmma;
  const bool wgmmaRows = rows >= 64 || gemm_hooks::tile() != 0;
  return bf16Product && wgmma && wgmmaRows ? 2 : 1;
}

/// Whether path `path` has a tile whose warps hold whole heads of the
/// generated epilogue I.
template <int I> bool ropeFitsPath(int path) {
  namespace d = modk_cuda::detail;
  constexpr int epi = d::epiRows<I>();
  static_assert(d::epiHeadDim<epi>() > 0, "a RoPE epilogue");
  if (path == 2)
    return d::epilogueFits<epi, d::WgSmall>() || d::epilogueFits<epi, d::WgLarge>();
  if (path == 1)
    return d::epilogueFits<epi, d::TcSmall>() || d::epilogueFits<epi, d::TcLarge>();
  return false;
}

/// The epilogue arguments modc passes a RoPE epilogue: the positions, the
/// angle table of `positions` positions, and the output y.
template <int HD>
modk_cuda::detail::EpiArgs ropeArgs(const int32_t *pos, float theta,
                                    int32_t positions, float *y) {
  modk_cuda::detail::EpiArgs epi;
  epi.pos = pos;
  epi.ropeTable = modk_cuda::detail::ropeTableFor<HD>(theta, positions, nullptr);
  epi.ropePositions = positions;
  epi.operands[1] = y;
  EXPECT_NE(epi.ropeTable, nullptr);
  return epi;
}

/// y = rope(a w^T) for `count` rows of a bound of `bound`, H heads of HD, at
/// random positions below `positions` (the last one among them), theta
/// 10^4: the product (bf16 operands when BF) with the generated epilogue
/// Plain in the GEMM's tiles where the path has a tile that holds whole
/// heads in each warp. Checked against fp64 (the angles' cos and sin
/// rounded to f32, as modc forms them); bit for bit against the GEMM
/// followed by the same math as a kernel (plain, in place); then as a
/// package runs it (rope_kernels::linearRope), with BF the epilogue
/// Rounded, whose values are the plain ones rounded to bf16; rows past the
/// count untouched; fused exactly where a tile fits.
template <int H, int HD, int K, bool BF, int Plain, int Rounded>
void checkFusedRope(rope_kernels::Kernel plain, rope_kernels::Kernel rounded,
                    int64_t count, int64_t bound, int32_t positions,
                    uint32_t seed) {
  namespace d = modk_cuda::detail;
  constexpr int N = H * HD, Half = HD / 2;
  const float theta = 10000.0f;
  const auto a = randomFloats(bound * K, seed), w = randomFloats(N * K, seed + 1);
  auto pos = randomInts(bound, seed + 2, 0, positions - 1);
  pos[count / 2] = positions - 1;
  DeviceCopy<float> dA(a), dW(w);
  DeviceCopy<int32_t> dPos(pos);
  DeviceCopy<int64_t> dRows(std::vector<int64_t>{count});
  const std::vector<float> sentinel(bound * N, kSentinel);
  auto operand = [](float x) { return BF ? bf16Exact(x) : double(x); };

  std::vector<double> want(bound * N, kSentinel), mag(bound * N, 0.0);
  for (int64_t m = 0; m < count; ++m) {
    std::vector<double> y(N, 0.0), ym(N, 0.0);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        const double f = operand(a[m * K + k]) * operand(w[n * K + k]);
        y[n] += f, ym[n] += std::fabs(f);
      }
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < Half; ++j) {
        const double angle = pos[m] * std::pow(double(theta), -2.0 * j / HD);
        const double c = float(std::cos(angle)), s = float(std::sin(angle));
        const int x0 = h * HD + j, x1 = x0 + Half;
        want[m * N + x0] = y[x0] * c - y[x1] * s;
        want[m * N + x1] = y[x1] * c + y[x0] * s;
        // The rotation's own rounding is far below the products' bound.
        mag[m * N + x0] = mag[m * N + x1] = ym[x0] + ym[x1] + 1e-30;
      }
  }

  const int path = currentGemmPath(BF, bound);
  const bool fits = ropeFitsPath<Plain>(path);
  const int64_t fusedBefore = d::fusedRopeLaunches();
  DeviceCopy<float> fused(sentinel), unfused(sentinel);
  const bool wasFused =
      d::linearEpi<N, K, d::epiRows<Plain>(), BF, modk_cuda::DefaultGemmPlan>(
          dA.get(), dRows.get(), bound, dW.get(),
          ropeArgs<HD>(dPos.get(), theta, positions, fused.get()),
          static_cast<float *>(nullptr), nullptr);
  EXPECT_EQ(wasFused, fits) << "path " << path << ", head dim " << HD;
  modk_cuda::linear<N, K, BF>(dA.get(), dRows.get(), bound, dW.get(),
                              unfused.get(), nullptr);
  MODC_LAUNCH(plain, unsigned(modk_cuda::ceilDiv(bound, d::kRowWarps)),
              d::kThreads, 0, nullptr, dRows.get(), dPos.get(),
              unfused.get(), unfused.get(),
              d::ropeTableFor<HD>(theta, positions, nullptr));
  const std::vector<float> viaEpilogue = fused.read();
  if (wasFused) {
    expectGemm(viaEpilogue, want, mag, "RoPE epilogue against fp64");
    expectSameBits(viaEpilogue, unfused.read(), "RoPE epilogue against kernel");
  }
  expectGemm(unfused.read(), want, mag, "GEMM then RoPE kernel against fp64");

  // As a package runs it: fused where the path fits; with BF the rounding
  // epilogue, whose values are the rotated ones rounded.
  DeviceCopy<float> q(sentinel);
  constexpr int Last = BF ? Rounded : Plain;
  EXPECT_EQ(fits,
            (rope_kernels::linearRope<N, K, Last, BF>(
                BF ? rounded : plain, dA.get(), dRows.get(), bound, dW.get(),
                dPos.get(), d::ropeTableFor<HD>(theta, positions, nullptr),
                positions, q.get(), nullptr)));
  EXPECT_EQ(d::fusedRopeLaunches() - fusedBefore, fits ? 1 : 0);
  std::vector<float> expected = unfused.read();
  if (BF)
    for (int64_t i = 0; i < count * N; ++i)
      expected[i] = bf16Value(expected[i]);
  expectSameBits(q.read(), expected, BF ? "RoPE, rounded" : "RoPE");
}

/// Head dims 16 (every tensor-core tile), 32 (the large mma.sync tile), 64
/// (wgmma only) and 128 (the large wgmma tile), and 8, 4 and 2 (none);
/// ragged rows, rows on the device below the bound, few rows (which stay on
/// mma.sync).
inline void checkFusedRopeShapes() {
  using namespace rope_kernels;
  checkFusedRope<3, 16, 40, true, rope3x16Epilogue, rope3x16Bf16Epilogue>(
      rope3x16, rope3x16Bf16, 37, 40, 64, 3701);
  checkFusedRope<4, 32, 48, true, rope4x32Epilogue, rope4x32Bf16Epilogue>(
      rope4x32, rope4x32Bf16, 130, 140, 100, 3702);
  checkFusedRope<2, 64, 64, true, rope2x64Epilogue, rope2x64Bf16Epilogue>(
      rope2x64, rope2x64Bf16, 70, 70, 128, 3703);
  checkFusedRope<2, 128, 32, true, rope2x128Epilogue, rope2x128Bf16Epilogue>(
      rope2x128, rope2x128Bf16, 100, 129, 5000, 3704);
  checkFusedRope<3, 16, 40, false, rope3x16Epilogue, rope3x16Bf16Epilogue>(
      rope3x16, rope3x16Bf16, 37, 40, 64, 3705);
  checkFusedRope<4, 32, 48, false, rope4x32Epilogue, rope4x32Bf16Epilogue>(
      rope4x32, rope4x32Bf16, 130, 140, 100, 3706);
  // Head dims below 16: a column's partner is not a whole n8 fragment away,
  // so no tile holds the rotation; the product, then the kernel.
  checkFusedRope<4, 8, 40, true, rope4x8Epilogue, rope4x8Bf16Epilogue>(
      rope4x8, rope4x8Bf16, 37, 40, 64, 3707);
  checkFusedRope<6, 4, 24, false, rope6x4Epilogue, rope6x4Bf16Epilogue>(
      rope6x4, rope6x4Bf16, 70, 75, 100, 3708);
  checkFusedRope<5, 2, 16, true, rope5x2Epilogue, rope5x2Bf16Epilogue>(
      rope5x2, rope5x2Bf16, 33, 33, 64, 3709);
}

/// The rounding RoPE epilogue I on the TMA kernel (a forward product: bf16
/// A, the weight's bf16 copy), on both tiles where the head fits, bit for
/// bit against the wgmma kernel that reads its operands itself.
template <int H, int HD, int K, int I>
void checkTmaRope(int64_t count, int64_t bound, uint32_t seed) {
  using modk_cuda::bf16;
  namespace d = modk_cuda::detail;
  constexpr int N = H * HD;
  const auto a = randomFloats(bound * K, seed), w = randomFloats(N * K, seed + 1);
  const auto pos = randomInts(bound, seed + 2, 0, 199);
  std::vector<bf16> aBits;
  for (float x : a)
    aBits.push_back(bf16Bits(bf16Value(x)));
  DeviceCopy<bf16> dA(aBits);
  DeviceCopy<float> dW(w);
  DeviceCopy<int32_t> dPos(pos);
  DeviceCopy<int64_t> dRows(std::vector<int64_t>{count});
  const std::vector<float> sentinel(bound * N, kSentinel);
  auto run = [&]() {
    DeviceCopy<float> q(sentinel);
    EXPECT_TRUE((modk_cuda::linear_rows_epilogue<N, K, I, true>(
        dA.get(), dRows.get(), bound, dW.get(),
        ropeArgs<HD>(dPos.get(), 10000.0f, 200, q.get()), nullptr)));
    return q.read();
  };
  OnWgmmaPath onWgmma;
  SCOPED_TRACE(testing::Message() << "head dim " << HD);
  compareTmaWithWgmma({0, 2}, run,
                      [&](const std::vector<float> &viaTma,
                          const std::vector<float> &direct,
                          const d::TmaStats &before) {
                        EXPECT_EQ(d::tmaStats().launches - before.launches, 1);
                        expectSameBits(viaTma, direct, "RoPE epilogue on TMA");
                      });
}

inline void checkTmaRopeShapes() {
  using namespace rope_kernels;
  checkTmaRope<3, 64, 128, rope3x64Bf16Epilogue>(130, 140, 3801);
  checkTmaRope<2, 128, 64, rope2x128Bf16Epilogue>(100, 100, 3802);
}

/// The GEMM shapes: ragged edges in every dimension, few rows and many; on
/// a GPU also one of the benchmark's reductions (K 1024: the emulation's
/// GemmLongReduction covers long reductions at less cost).
inline void checkBf16GemmShapes() {
  checkBf16Gemms<70, 45>(37, 3401);
  checkBf16Gemms<130, 64>(129, 3402);
  checkBf16Gemms<40, 72>(300, 3403);
#if defined(__CUDACC__)
  checkBf16Gemms<256, 1024>(200, 3404);
#endif
}

} // namespace modc_tc_check

#endif // MODC_TEST_CUDA_EMU_TENSORCORECHECKS_H
