//===- EmulationSelfTest.cpp - The CUDA emulation itself ------------------===//
//
// The CPU emulation is what tests the CUDA kernels without a GPU, so it is
// checked first: block sums, shuffles, barriers, dynamic shared memory and
// threads that leave early.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace {

__global__ void blockSumKernel(const float *x, int64_t n, float *out) {
  __shared__ float scratch[32];
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    v += x[blockIdx.x * n + i];
  float total = modk_cuda::blockSum(v, scratch);
  if (threadIdx.x == 0)
    out[blockIdx.x] = total;
}

__global__ void reverseKernel(const int *in, int *out) {
  MODC_DYNAMIC_SHARED(int, tile);
  tile[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] =
      tile[blockDim.x - 1 - threadIdx.x];
}

__global__ void earlyExitKernel(int limit, int *out) {
  __shared__ int count;
  if (threadIdx.x == 0)
    count = 0;
  __syncthreads();
  if ((int)threadIdx.x >= limit)
    return; // the rest must not wait for these threads
  atomicAdd(&count, 1);
  __syncthreads();
  if (threadIdx.x == 0)
    out[blockIdx.x] = count;
}

__global__ void shuffleKernel(int *out) {
  int lane = threadIdx.x % 32;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, lane * 10, 3) +
                     __shfl_xor_sync(0xffffffffu, lane, 1) * 1000;
  unsigned ballot = __ballot_sync(0xffffffffu, lane % 2);
  if (lane == 0)
    out[64 + threadIdx.x / 32] = (int)(ballot == 0xaaaaaaaau);
}

TEST(CudaEmulation, BlockSumOverThreeBlocks) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int64_t n = 300;
  std::vector<float> x(3 * n), out(3);
  for (float &v : x)
    v = dist(gen);
  auto k = blockSumKernel;
  MODC_LAUNCH(k, 3, 96, 0, nullptr, x.data(), n, out.data());
  for (int b = 0; b < 3; ++b) {
    double ref = std::accumulate(x.begin() + b * n, x.begin() + (b + 1) * n, 0.0);
    EXPECT_NEAR(out[b], ref, 1e-4) << "block " << b;
  }
}

TEST(CudaEmulation, DynamicSharedAndBarrier) {
  std::vector<int> in(2 * 64), out(2 * 64);
  std::iota(in.begin(), in.end(), 5);
  auto k = reverseKernel;
  MODC_LAUNCH(k, 2, 64, 64 * sizeof(int), nullptr, in.data(), out.data());
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t)
      EXPECT_EQ(out[b * 64 + t], in[b * 64 + 63 - t]);
}

TEST(CudaEmulation, ThreadsThatReturnDoNotHoldTheBarrier) {
  std::vector<int> out(4, -1);
  auto k = earlyExitKernel;
  MODC_LAUNCH(k, 4, 128, 0, nullptr, 37, out.data());
  for (int v : out)
    EXPECT_EQ(v, 37);
}

TEST(CudaEmulation, ShufflesAndBallot) {
  std::vector<int> out(66, -1);
  auto k = shuffleKernel;
  MODC_LAUNCH(k, 1, 64, 0, nullptr, out.data());
  for (int t = 0; t < 64; ++t) {
    int lane = t % 32;
    int down = (lane + 3 < 32 ? lane + 3 : lane) * 10;
    EXPECT_EQ(out[t], down + (lane ^ 1) * 1000) << "thread " << t;
  }
  EXPECT_EQ(out[64], 1);
  EXPECT_EQ(out[65], 1);
}

} // namespace
