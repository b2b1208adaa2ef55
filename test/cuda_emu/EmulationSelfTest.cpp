//===- EmulationSelfTest.cpp - The CUDA emulation itself ------------------===//
//
// The CPU emulation is what tests the CUDA kernels without a GPU, so it is
// checked first: block sums, shuffles, barriers, dynamic shared memory,
// threads that leave early, and the checks it adds: the reverse order that
// exposes a missing barrier, the poisoned undefined memory, the refused
// launches, wgmma, TMA and cp.async run as late as a GPU may run them.
//
//===----------------------------------------------------------------------===//

#include "CudaCommon.cuh"

#include <gtest/gtest.h>

#include <cmath>
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

// Each thread reads its left neighbour's write with no barrier between.
__global__ void missingBarrierKernel(int *out) {
  MODC_DYNAMIC_SHARED(int, tile);
  tile[threadIdx.x] = int(threadIdx.x) + 1;
  out[threadIdx.x] = threadIdx.x ? tile[threadIdx.x - 1] : 0;
}

/// Runs the emulated blocks' threads in one order for a scope.
struct ScopedOrder {
  bool saved = modc_emu::reverseOrder();
  explicit ScopedOrder(bool reverse) { modc_emu::reverseOrder() = reverse; }
  ~ScopedOrder() { modc_emu::reverseOrder() = saved; }
};

TEST(CudaEmulation, ReverseOrderExposesAMissingBarrier) {
  // Ascending order happens to run the writer first; descending runs the
  // reader first, which then finds the poisoned (0xFF) shared memory.
  auto k = missingBarrierKernel;
  std::vector<int> forward(64), reverse(64);
  {
    ScopedOrder order(false);
    MODC_LAUNCH(k, 1, 64, 64 * sizeof(int), nullptr, forward.data());
  }
  {
    ScopedOrder order(true);
    MODC_LAUNCH(k, 1, 64, 64 * sizeof(int), nullptr, reverse.data());
  }
  for (int t = 1; t < 64; ++t) {
    EXPECT_EQ(forward[t], t) << "thread " << t;
    EXPECT_EQ(reverse[t], -1) << "thread " << t;
  }
  // With the barrier, both orders agree (DynamicSharedAndBarrier, reversed).
  ScopedOrder order(true);
  std::vector<int> in(64), out(64);
  std::iota(in.begin(), in.end(), 5);
  auto good = reverseKernel;
  MODC_LAUNCH(good, 1, 64, 64 * sizeof(int), nullptr, in.data(), out.data());
  for (int t = 0; t < 64; ++t)
    EXPECT_EQ(out[t], in[63 - t]);
}

// Two block sums through one scratch array without the barrier that keeps a
// warp from overwriting it (after its shuffles) before the others have read
// the first sum; thread 0 reports both.
__global__ void racingSumsKernel(float *out) {
  __shared__ float scratch[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float total[2];
  for (int call = 0; call < 2; ++call) {
    float v = modk_cuda::warpSum(float(call + 1));
    if (lane == 0)
      scratch[warp] = v;
    __syncthreads();
    total[call] = 0.0f;
    for (int w = 0; w < int(blockDim.x / 32); ++w)
      total[call] += scratch[w];
  }
  if (threadIdx.x == 0) {
    out[0] = total[0];
    out[1] = total[1];
  }
}

TEST(CudaEmulation, ReverseOrderLetsAWarpRunAhead) {
  // In rounds every thread reads the first sum before any passes a shuffle,
  // so the race stays hidden; when warp 1 runs ahead it overwrites its
  // slot before warp 0 reads the first sum.
  auto k = racingSumsKernel;
  std::vector<float> forward(2), reverse(2);
  {
    ScopedOrder order(false);
    MODC_LAUNCH(k, 1, 64, 0, nullptr, forward.data());
  }
  {
    ScopedOrder order(true);
    MODC_LAUNCH(k, 1, 64, 0, nullptr, reverse.data());
  }
  EXPECT_EQ(forward[0], 64.0f);
  EXPECT_EQ(forward[1], 128.0f);
  EXPECT_EQ(reverse[0], 32.0f + 64.0f); // warp 1's second sum, read early
  EXPECT_EQ(reverse[1], 128.0f);
}

// Block b reads its dynamic shared memory before writing it.
__global__ void sharedAtStartKernel(float *out) {
  MODC_DYNAMIC_SHARED(float, tile);
  if (threadIdx.x == 0) {
    out[blockIdx.x] = tile[0];
    tile[0] = 1.0f; // what a next block must not see
  }
}

TEST(CudaEmulation, UndefinedMemoryIsPoisoned) {
  float *device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 10 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 10; ++i)
    EXPECT_TRUE(std::isnan(device[i])) << i;
  std::vector<float> out(3, 0.0f);
  auto k = sharedAtStartKernel;
  MODC_LAUNCH(k, 3, 32, sizeof(float), nullptr, out.data());
  for (int b = 0; b < 3; ++b)
    EXPECT_TRUE(std::isnan(out[b])) << "block " << b;
  cudaFree(device);
}

// wgmma runs when a wait retires its group (PtxEmulation.h): as late as a
// GPU may run it. A and B: 64 x 16 and 64 x 16 bf16 ones, K-major core
// matrices without swizzle (8 rows of 16 bytes; row blocks 128 bytes
// apart, the two k halves 1 KB apart), so every product element is 16
// times the value of B.
constexpr int kWgOperandBytes = 2048;
__device__ uint64_t onesOperand(unsigned char *at, float value) {
  for (int i = threadIdx.x; i < kWgOperandBytes / 2; i += blockDim.x)
    reinterpret_cast<uint16_t *>(at)[i] =
        uint16_t(__float_as_uint(value) >> 16);
  return uint64_t((reinterpret_cast<uintptr_t>(at) & 0x3ffffu) >> 4) |
         uint64_t(1024 >> 4) << 16 | uint64_t(128 >> 4) << 32;
}

// Two groups into d1 and d2; records d1[0][0] and d2[0][0] after the
// commit, after wait<1> and after wait<0>, and between the first wait and
// the second overwrites B's shared memory with twos.
__global__ void wgmmaAtTheWaitKernel(float *seen) {
  __shared__ __align__(128) unsigned char smem[2 * kWgOperandBytes];
  const uint64_t a = onesOperand(smem, 1.0f),
                 b = onesOperand(smem + kWgOperandBytes, 1.0f);
  __syncthreads();
  float d1[8][4] = {}, d2[8][4] = {};
  using namespace modk_cuda::detail;
  wgmmaFence(d1);
  wgmmaBf16<64>(d1, a, b, smem);
  wgmmaCommit();
  wgmmaBf16<64>(d2, a, b, smem);
  wgmmaCommit();
  float *mine = seen + 6 * threadIdx.x;
  mine[0] = d1[0][0];
  mine[1] = d2[0][0];
  wgmmaWait<1>(d1);
  mine[2] = d1[0][0];
  mine[3] = d2[0][0];
  __syncthreads();
  onesOperand(smem + kWgOperandBytes, 2.0f);
  __syncthreads();
  wgmmaWait<0>(d2);
  mine[4] = d1[0][0];
  mine[5] = d2[0][0];
}

// A wgmma wait gives the other threads a turn before its wgmmas run
// (docs/cuda.md, "Testing without a GPU"): warpgroup 0 issues a wgmma over
// B, releases B on an mbarrier before its wait, as a consumer releasing a
// stage too early would, and warpgroup 1 overwrites B with twos once
// released. The wgmma reads the twos, in either thread order.
__global__ void wgmmaWaitYieldsKernel(float *seen) {
  __shared__ __align__(128) unsigned char smem[2 * kWgOperandBytes];
  __shared__ __align__(8) uint64_t released;
  using namespace modk_cuda::detail;
  const int tid = threadIdx.x;
  if (tid == 0)
    mbarrierInit(&released, 128);
  const uint64_t a = onesOperand(smem, 1.0f),
                 b = onesOperand(smem + kWgOperandBytes, 1.0f);
  __syncthreads();
  if (tid >= 128) {
    mbarrierWait(&released, 0);
    const uint16_t two = uint16_t(__float_as_uint(2.0f) >> 16);
    for (int i = tid - 128; i < kWgOperandBytes / 2; i += 128)
      reinterpret_cast<uint16_t *>(smem + kWgOperandBytes)[i] = two;
    return;
  }
  float d[8][4] = {};
  wgmmaFence(d);
  wgmmaBf16<64>(d, a, b, smem);
  wgmmaCommit();
  mbarrierArrive(&released);
  wgmmaWait<0>(d);
  seen[tid] = d[0][0];
}

TEST(CudaEmulation, WgmmaWaitLetsOtherThreadsRunFirst) {
  std::vector<float> seen(128, -1.0f);
  auto k = wgmmaWaitYieldsKernel;
  MODC_LAUNCH(k, 1, 256, 0, nullptr, seen.data());
  EXPECT_EQ(seen, std::vector<float>(128, 32.0f));
}

__global__ void wgmmaNeverWaitedKernel(int *) {
  __shared__ __align__(128) unsigned char smem[2 * kWgOperandBytes];
  const uint64_t a = onesOperand(smem, 1.0f),
                 b = onesOperand(smem + kWgOperandBytes, 1.0f);
  __syncthreads();
  float d[8][4] = {};
  modk_cuda::detail::wgmmaBf16<64>(d, a, b, smem);
  modk_cuda::detail::wgmmaCommit();
}

TEST(CudaEmulation, WgmmaRunsWhenAWaitRetiresIt) {
  std::vector<float> seen(6 * 128, -1.0f);
  auto k = wgmmaAtTheWaitKernel;
  MODC_LAUNCH(k, 1, 128, 0, nullptr, seen.data());
  for (int t = 0; t < 128; ++t) {
    const float *mine = seen.data() + 6 * t;
    // Nothing before a wait; wait<1> retires the first group only; the
    // second reads B as it is at wait<0>.
    EXPECT_EQ(mine[0], 0.0f) << t;
    EXPECT_EQ(mine[1], 0.0f) << t;
    EXPECT_EQ(mine[2], 16.0f) << t;
    EXPECT_EQ(mine[3], 0.0f) << t;
    EXPECT_EQ(mine[4], 16.0f) << t;
    EXPECT_EQ(mine[5], 32.0f) << t;
  }
}

TEST(CudaEmulationDeathTest, RefusesAWgmmaNeverWaitedFor) {
  auto k = wgmmaNeverWaitedKernel;
  EXPECT_DEATH(MODC_LAUNCH(k, 1, 128, 0, nullptr, nullptr),
               "ended with 1 wgmma\\(s\\) and 0 cp.async copies not "
               "waited for");
}

// cp.async lands a copy when cp.async.wait_group retires its group
// (PtxEmulation.h). Two groups of one copy each into a shared float.
__global__ void copyAtTheWaitKernel(const float *src, float *seen) {
  __shared__ float dst[2];
  using namespace modk_cuda::detail;
  dst[0] = dst[1] = -1.0f;
  copyAsync4(&dst[0], &src[0], true);
  copyAsyncCommit();
  copyAsync4(&dst[1], &src[1], true);
  copyAsyncCommit();
  seen[0] = dst[0];
  copyAsyncWait<1>();
  seen[1] = dst[0];
  seen[2] = dst[1];
  copyAsyncWait<0>();
  seen[3] = dst[1];
}

TEST(CudaEmulation, CopyAsyncLandsWhenAWaitRetiresIt) {
  const std::vector<float> src = {5.0f, 7.0f};
  std::vector<float> seen(4, 0.0f);
  auto k = copyAtTheWaitKernel;
  MODC_LAUNCH(k, 1, 1, 0, nullptr, src.data(), seen.data());
  EXPECT_EQ(seen, (std::vector<float>{-1.0f, 5.0f, -1.0f, 7.0f}));
}

// TMA lands a copy when a thread waits on its mbarrier (CudaEmulation.h):
// as late as a GPU may land it. One 8 x 8 bf16 box, no swizzle.
CUtensorMap boxMap(modk_cuda::bf16 *tensor) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {8, 8}, strides[1] = {16};
  const cuuint32_t box[2] = {8, 8}, elementStrides[2] = {1, 1};
  EXPECT_EQ(modc_emu::encodeTensorMapTiled(
                &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, tensor, dims,
                strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
            CUDA_SUCCESS);
  return map;
}

// Thread 0 fills the box with 2, issues the load (ones) and records the
// box's first element before and after waiting on the barrier.
__global__ void tmaAtTheWaitKernel(const CUtensorMap *map, float *seen) {
  __shared__ __align__(128) modk_cuda::bf16 box[64];
  __shared__ uint64_t full;
  using namespace modk_cuda::detail;
  if (threadIdx.x != 0)
    return;
  for (int i = 0; i < 64; ++i)
    box[i] = modk_cuda::bf16(2.0f);
  mbarrierInit(&full, 1);
  mbarrierArriveExpectTx(&full, 128);
  tmaLoad2d(box, map, 0, 0, &full);
  seen[0] = float(box[0]);
  mbarrierWait(&full, 0);
  seen[1] = float(box[0]);
}

__global__ void tmaNeverWaitedKernel(const CUtensorMap *map, float *) {
  __shared__ __align__(128) modk_cuda::bf16 box[64];
  __shared__ uint64_t full;
  using namespace modk_cuda::detail;
  mbarrierInit(&full, 1);
  mbarrierArriveExpectTx(&full, 128);
  tmaLoad2d(box, map, 0, 0, &full);
}

TEST(CudaEmulation, TmaLandsWhenItsBarrierIsWaitedOn) {
  std::vector<modk_cuda::bf16> tensor(64, modk_cuda::bf16(1.0f));
  const CUtensorMap map = boxMap(tensor.data());
  std::vector<float> seen(2, -1.0f);
  auto k = tmaAtTheWaitKernel;
  MODC_LAUNCH(k, 1, 32, 0, nullptr, &map, seen.data());
  EXPECT_EQ(seen[0], 2.0f) << "the box before the wait";
  EXPECT_EQ(seen[1], 1.0f) << "the box after the wait";
}

TEST(CudaEmulationDeathTest, RefusesATmaLoadNeverWaitedFor) {
  std::vector<modk_cuda::bf16> tensor(64, modk_cuda::bf16(1.0f));
  const CUtensorMap map = boxMap(tensor.data());
  auto k = tmaNeverWaitedKernel;
  EXPECT_DEATH(MODC_LAUNCH(k, 1, 1, 0, nullptr, &map, nullptr),
               "a block ended with a TMA load that no thread waited for");
}

__global__ void noopKernel(int *) {}
__global__ void optedInKernel(int *) {}

TEST(CudaEmulationDeathTest, RefusesWhatAGpuRefuses) {
  auto k = noopKernel;
  EXPECT_DEATH(MODC_LAUNCH(k, 1, 1025, 0, nullptr, nullptr),
               "block of 1 to 1024 threads");
  EXPECT_DEATH(MODC_LAUNCH(k, 0, 32, 0, nullptr, nullptr), "empty grid");
  EXPECT_DEATH(MODC_LAUNCH(k, dim3(1, 65536), 32, 0, nullptr, nullptr),
               "grid.y or grid.z above 65535");
  EXPECT_DEATH(MODC_LAUNCH(k, 1, 32, 48 * 1024 + 16, nullptr, nullptr),
               "above 48 KiB needs cudaFuncSetAttribute");
  // Opting in allows up to the size opted into, and no more than 227 KiB.
  auto big = optedInKernel;
  EXPECT_EQ(cudaFuncSetAttribute(big,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(big,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 100 * 1024),
            cudaSuccess);
  MODC_LAUNCH(big, 1, 32, 100 * 1024, nullptr, nullptr);
  EXPECT_DEATH(MODC_LAUNCH(big, 1, 32, 100 * 1024 + 4, nullptr, nullptr),
               "above 48 KiB needs cudaFuncSetAttribute");
}

// What a GPU refuses in a stream capture (a CUDA graph): allocations,
// frees, waits and copies from or to pageable host memory. Kernels,
// device-to-device copies and memsets are captured, and run at the launch.
TEST(CudaEmulationDeathTest, RefusesWhatACaptureCannotHold) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int *device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 2 * sizeof(int)), cudaSuccess);
  int host = 7;
  auto inCapture = [&](auto call) {
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    call();
  };
  EXPECT_DEATH(inCapture([] {
                 void *p = nullptr;
                 cudaMalloc(&p, 64);
               }),
               "cudaMalloc while a stream is being captured");
  EXPECT_DEATH(inCapture([&] { cudaFree(device); }), "cudaFree while");
  EXPECT_DEATH(inCapture([&] { cudaStreamSynchronize(s); }),
               "cudaStreamSynchronize while");
  EXPECT_DEATH(inCapture([&] {
                 cudaMemcpyAsync(device, &host, sizeof(int),
                                 cudaMemcpyHostToDevice, s);
               }),
               "cudaMemcpyAsync to or from host memory while");
  EXPECT_DEATH(inCapture([&] {
                 cudaMemcpy(&host, device, sizeof(int), cudaMemcpyDeviceToHost);
               }),
               "cudaMemcpy while");
  // Captured work runs at each launch of the graph, not at its capture.
  ASSERT_EQ(cudaMemset(device, 0, 2 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(device, 1, sizeof(int), s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(device + 1, device, sizeof(int),
                            cudaMemcpyDeviceToDevice, s),
            cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(device[0], 0);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(device[0], 0x01010101);
  EXPECT_EQ(device[1], 0x01010101);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(device);
}

} // namespace
