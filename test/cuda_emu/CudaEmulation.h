//===- CudaEmulation.h - Run CUDA kernels on CPU threads --------*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Lets the CUDA kernel preludes compile as plain C++ (g++ -std=c++20) and run
/// on the CPU, so that their logic is tested where no GPU exists (CI). Every
/// thread of a block is a CPU thread; blocks run one after another, so a
/// `__shared__` variable can be a function-local static. `__syncthreads`,
/// `__syncwarp` and the warp shuffles are real barriers among those threads,
/// which makes a missing barrier or a wrong shuffle lane show up as a wrong
/// result here as it would on a GPU.
///
/// What it does not model: warp-synchronous code without `__syncwarp`, memory
/// ordering beyond the barriers, tensor-core instructions (inline PTX), and
/// speed. Kernels that use inline PTX must keep a portable path for it.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_TEST_CUDA_EMULATION_H
#define MODC_TEST_CUDA_EMULATION_H

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one at a time, so one static per kernel is the block's memory.
#define __shared__ static
#define __constant__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1)
      : x(x), y(y), z(z) {}
};
using uint3 = dim3;

struct float2 {
  float x, y;
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct int2 {
  int x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

//===----------------------------------------------------------------------===//
// Runtime API subset (synchronous; the host pointers are the device's)
//===----------------------------------------------------------------------===//

typedef void *cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes,
                                   cudaStream_t = nullptr) {
  if (bytes)
    std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                   cudaMemcpyKind, cudaStream_t = nullptr) {
  if (bytes)
    std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// Device intrinsics
//===----------------------------------------------------------------------===//

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return std::min(1.0f, std::max(0.0f, x)); }
inline void sincosf_(float x, float *s, float *c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
#define sincosf(x, s, c) sincosf_((x), (s), (c))
#define __sincosf(x, s, c) sincosf_((x), (s), (c))
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <typename T> inline T __ldg(const T *p) { return *p; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }

namespace modc_emu {

/// A barrier whose members may leave (a thread that returned from the
/// kernel no longer holds the others back, as on a GPU).
class Barrier {
public:
  void reset(int n) {
    std::lock_guard<std::mutex> lock(mutex);
    expected = n;
    arrived = 0;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t phase = generation;
    if (++arrived >= expected) {
      release();
    } else {
      cv.wait(lock, [&] { return generation != phase; });
    }
  }
  void drop() {
    std::lock_guard<std::mutex> lock(mutex);
    --expected;
    if (expected > 0 && arrived >= expected)
      release();
  }

private:
  void release() {
    arrived = 0;
    ++generation;
    cv.notify_all();
  }
  std::mutex mutex;
  std::condition_variable cv;
  int expected = 0, arrived = 0;
  uint64_t generation = 0;
};

/// One warp: a barrier and a slot per lane for shuffles and votes.
struct Warp {
  Barrier barrier;
  uint64_t slots[32];
};

struct BlockState {
  Barrier block;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<unsigned char> dynamicShared;
};

inline thread_local BlockState *currentBlock = nullptr;
inline thread_local int linearThread = 0;
inline std::mutex &atomicMutex() {
  static std::mutex m;
  return m;
}
inline unsigned char *dynamicSharedBase() {
  return currentBlock->dynamicShared.data();
}

inline Warp &myWarp() { return *currentBlock->warps[linearThread / 32]; }
inline int myLane() { return linearThread % 32; }

template <typename T> inline T exchange(T value, int srcLane, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  Warp &w = myWarp();
  int lane = myLane();
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  w.slots[lane] = bits;
  w.barrier.wait();
  int base = lane - lane % width;
  int src = base + ((srcLane % width) + width) % width;
  T out;
  uint64_t got = w.slots[src];
  std::memcpy(&out, &got, sizeof(T));
  w.barrier.wait();
  return out;
}

/// Runs kernel(args...) over the grid: each block's threads on CPU threads.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
            cudaStream_t, A &&...args) {
  const int threads = int(block.x * block.y * block.z);
  const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
  if (threads <= 0 || blocks <= 0)
    return;
  BlockState state;
  state.dynamicShared.assign(shmem + 16, 0);
  for (int w = 0; w * 32 < threads; ++w)
    state.warps.push_back(std::make_unique<Warp>());
  Barrier between; // all threads, between blocks
  between.reset(threads);
  dim3 current;
  auto resetBlock = [&](int64_t index) {
    state.block.reset(threads);
    for (size_t w = 0; w < state.warps.size(); ++w)
      state.warps[w]->barrier.reset(std::min(32, threads - int(w) * 32));
    current = dim3(unsigned(index % grid.x),
                   unsigned((index / grid.x) % grid.y),
                   unsigned(index / (int64_t(grid.x) * grid.y)));
  };
  resetBlock(0);
  std::tuple<std::decay_t<A>...> saved(std::forward<A>(args)...);
  auto body = [&](int t) {
    currentBlock = &state;
    linearThread = t;
    blockDim = block;
    gridDim = grid;
    threadIdx = dim3(unsigned(t % block.x), unsigned((t / block.x) % block.y),
                     unsigned(t / (block.x * block.y)));
    for (int64_t b = 0; b < blocks; ++b) {
      blockIdx = current;
      std::apply([&](auto &...a) { kernel(P(a)...); }, saved);
      state.block.drop();
      myWarp().barrier.drop();
      between.wait();
      if (t == 0 && b + 1 < blocks)
        resetBlock(b + 1);
      between.wait();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(body, t);
  for (std::thread &th : pool)
    th.join();
}

} // namespace modc_emu

inline void __syncthreads() { modc_emu::currentBlock->block.wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  modc_emu::myWarp().barrier.wait();
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return modc_emu::exchange(v, src, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  return modc_emu::exchange(v, modc_emu::myLane() ^ mask, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  int lane = modc_emu::myLane() % width;
  int src = lane + int(delta) < width ? lane + int(delta) : lane;
  return modc_emu::exchange(v, modc_emu::myLane() - lane + src, 32);
}
template <typename T>
inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  int lane = modc_emu::myLane() % width;
  int src = lane >= int(delta) ? lane - int(delta) : lane;
  return modc_emu::exchange(v, modc_emu::myLane() - lane + src, 32);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  modc_emu::Warp &w = modc_emu::myWarp();
  w.slots[modc_emu::myLane()] = predicate ? 1 : 0;
  w.barrier.wait();
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l)
    if (w.slots[l] == 1)
      bits |= 1u << l;
  w.barrier.wait();
  return bits;
}
inline int __syncthreads_or(int predicate) {
  static int any;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
    any = 0;
  __syncthreads();
  if (predicate) {
    std::lock_guard<std::mutex> lock(modc_emu::atomicMutex());
    any = 1;
  }
  __syncthreads();
  return any;
}

template <typename T> inline T atomicAdd(T *p, T v) {
  std::lock_guard<std::mutex> lock(modc_emu::atomicMutex());
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T> inline T atomicMax(T *p, T v) {
  std::lock_guard<std::mutex> lock(modc_emu::atomicMutex());
  T old = *p;
  *p = std::max(old, v);
  return old;
}
template <typename T> inline T atomicMin(T *p, T v) {
  std::lock_guard<std::mutex> lock(modc_emu::atomicMutex());
  T old = *p;
  *p = std::min(old, v);
  return old;
}
template <typename T> inline T atomicCAS(T *p, T compare, T v) {
  std::lock_guard<std::mutex> lock(modc_emu::atomicMutex());
  T old = *p;
  if (old == compare)
    *p = v;
  return old;
}
template <typename T> inline T atomicExch(T *p, T v) {
  std::lock_guard<std::mutex> lock(modc_emu::atomicMutex());
  T old = *p;
  *p = v;
  return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

#define MODC_LAUNCH(kernel, grid, block, shmem, stream, ...)                   \
  ::modc_emu::launch(kernel, dim3(grid), dim3(block), (shmem), (stream),       \
                     __VA_ARGS__)
#define MODC_DYNAMIC_SHARED(type, name)                                        \
  type *name = reinterpret_cast<type *>(::modc_emu::dynamicSharedBase())

#endif // MODC_TEST_CUDA_EMULATION_H
