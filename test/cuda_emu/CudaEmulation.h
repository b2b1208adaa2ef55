//===- CudaEmulation.h - Run CUDA kernels on CPU threads --------*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// Lets the CUDA kernel preludes compile as plain C++ (g++ -std=c++20) and run
/// on the CPU, so that their logic is tested where no GPU exists (CI). Every
/// thread of a block is a fiber with its own stack; the fibers of
/// a block take turns on one OS thread and blocks run one after another, so
/// a `__shared__` variable can be a function-local static. `__syncthreads`,
/// `__syncwarp` and the warp shuffles are real barriers among those fibers
/// (a thread runs on until it reaches one), which makes a missing barrier or
/// a wrong shuffle lane show up as a wrong result here as it would on a GPU.
///
/// Wait loops give way (modc_emu::spin), so a thread waiting on an mbarrier
/// lets the others run; a wait that nothing can end is reported as a
/// deadlock. A thread may also give way once without waiting for anything
/// (modc_emu::yield, as a wgmma wait does before it runs the wgmmas): it is
/// runnable, never part of a deadlock. TMA loads and mbarriers are emulated
/// here (they depend on the tensor map, which the emulated driver API
/// encodes).
///
/// Threads (and blocks) run in ascending order, every thread up to its next
/// barrier or shuffle in turn; or, under MODC_EMU_ORDER=reverse, in
/// descending order with each warp running ahead of the others up to its
/// next __syncthreads. A missing barrier shows in one of the two schedules,
/// whichever thread reads the other's data, and so does a warp overwriting
/// shared data after its shuffles while other warps still have to read it.
///
/// What a GPU leaves undefined is poisoned (every byte 0xFF: NaN as float or
/// bf16, -1 as an integer): memory from cudaMalloc, and dynamic shared
/// memory at the start of each block. A launch that a GPU would refuse stops
/// the program with the reason (a block of over 1024 threads, an empty or
/// oversized grid, dynamic shared memory above 48 KiB without the kernel's
/// cudaFuncSetAttribute, or above the 227 KiB an sm_90 block can have).
///
/// What it does not model: warp-synchronous code without `__syncwarp`,
/// memory ordering beyond the barriers, tensor-core instructions (inline
/// PTX), the initial contents of static `__shared__` arrays (zero, then what
/// the last block left), and speed. Kernels that use inline PTX must keep a
/// portable path for it (the preludes emulate their mma and wgmma
/// instructions themselves).
///
//===----------------------------------------------------------------------===//

#ifndef MODC_TEST_CUDA_EMULATION_H
#define MODC_TEST_CUDA_EMULATION_H

#include "TestCounters.h" // before the kernels, in every emulated unit

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <ucontext.h>
#include <tuple>
#include <utility>
#include <vector>

// Kernels become inline functions: a header of non-template kernels can be
// included by several test files of one binary, as a .cuh is by one .cu.
#define __global__ inline
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
struct __attribute__((aligned(8))) uint2 {
  unsigned x, y;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
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

namespace modc_emu {
inline std::mutex &launchMutex() {
  static std::mutex m;
  return m;
}
/// Whether threads and blocks run in descending order: MODC_EMU_ORDER, or
/// set by a test.
inline bool &reverseOrder() {
  static bool reverse = [] {
    const char *order = std::getenv("MODC_EMU_ORDER");
    if (!order || !*order || !std::strcmp(order, "forward"))
      return false;
    if (!std::strcmp(order, "reverse"))
      return true;
    std::fprintf(stderr,
                 "CUDA emulation: MODC_EMU_ORDER is '%s'; it must be forward "
                 "or reverse\n",
                 order);
    std::exit(2);
  }();
  return reverse;
}
/// The bytes a GPU leaves undefined are set to (see the file comment).
constexpr unsigned char kPoison = 0xFF;
} // namespace modc_emu

inline cudaError_t cudaGetLastError() { return cudaSuccess; }

namespace modc_emu {
/// Dynamic shared memory a block may use without opting in, and with.
constexpr long kDefaultDynamicShared = 48 * 1024;
constexpr long kMaxDynamicShared = 227 * 1024;
/// The dynamic shared memory each kernel opted into (cudaFuncSetAttribute).
inline std::map<const void *, long> &dynamicSharedLimits() {
  static std::map<const void *, long> limits;
  return limits;
}
/// Stops the program with the reason, where a GPU would fail or hang.
[[noreturn]] inline void fatal(const char *what) {
  std::fprintf(stderr, "CUDA emulation: %s\n", what);
  std::abort();
}
} // namespace modc_emu

template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...),
                                        cudaFuncAttribute attribute,
                                        int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > modc_emu::kMaxDynamicShared)
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(modc_emu::launchMutex());
  modc_emu::dynamicSharedLimits()[reinterpret_cast<const void *>(kernel)] =
      value;
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
// The _rn intrinsics round each result: the empty asm makes the product a
// value of its own, so that the compiler (-march=native, FMA contraction)
// cannot fuse it into a following add.
template <typename T> inline T roundedProduct(T a, T b) {
  T p = a * b;
  __asm__("" : "+g"(p));
  return p;
}
inline float __fmul_rn(float a, float b) { return roundedProduct(a, b); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dmul_rn(double a, double b) { return roundedProduct(a, b); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
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

// Switching fibers. glibc's swapcontext saves and restores the signal mask,
// two system calls a switch: they were 80 % of an emulated package's run.
// On x86-64 a switch here saves the callee-saved registers on the old stack
// and loads the new stack pointer, as a call would leave them. The fibers
// share their OS thread's floating-point environment: no kernel changes the
// rounding mode or the exception masks, so a switch leaves MXCSR and the
// x87 control word alone (loading them was 8 % of an emulated sampling
// run). Under AddressSanitizer, whose stack bookkeeping follows swapcontext
// (it intercepts it), the fibers keep ucontext.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MODC_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MODC_EMU_ASAN 1
#endif
#if defined(__x86_64__) && !defined(MODC_EMU_ASAN)
#define MODC_EMU_STACK_SWITCH 1

/// Saves the running context on its stack and *save = its stack pointer,
/// then resumes the context whose stack pointer is `load` (saved by this
/// function, or laid out by startFiber).
__attribute__((naked, noinline)) static void switchStacks(void ** /*save*/,
                                                         void * /*load*/) {
  asm("pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret");
}
#endif

/// One CUDA thread: a fiber on its own stack. Fibers of a block take turns
/// on one OS thread and give way at barriers, so a block costs no OS threads
/// and no locks.
struct Fiber {
#if MODC_EMU_STACK_SWITCH
  void *sp = nullptr; ///< where switchStacks resumes it
#else
  ucontext_t context;
#endif
  /// Spinning: gave way in a wait loop (an mbarrier wait); runs again on
  /// the next round. Yielded: gave way once, waiting for nothing (yield);
  /// runs on from there on the next round.
  enum State {
    Ready,
    Spinning,
    Yielded,
    AtBlockBarrier,
    AtWarpBarrier,
    Done
  } state = Ready;
  /// Its threadIdx, formed once a launch rather than at every resume.
  dim3 index;
  /// Warp exchanges (shuffles, votes) it has made in this block: their
  /// parity picks the warp's slots (Warp::slots).
  unsigned exchanges = 0;
};

/// One warp: a slot per lane for shuffles and votes, in two sets used in
/// turn. A lane writes exchange k's set only after the barrier of exchange
/// k - 1, which every lane reaches after reading exchange k - 2's values
/// from the same set: one barrier an exchange is enough.
struct Warp {
  uint64_t slots[2][32];
};

struct BlockState {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<unsigned char> dynamicShared;
#if MODC_EMU_STACK_SWITCH
  void *scheduler = nullptr;
#else
  ucontext_t scheduler;
#endif
  std::function<void()> body;
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

inline Warp &myWarp() { return currentBlock->warps[linearThread / 32]; }
inline int myLane() { return linearThread % 32; }

/// Parks the running fiber at a barrier until the scheduler releases it.
inline void parkAt(Fiber::State barrier) {
  Fiber &f = currentBlock->fibers[linearThread];
  f.state = barrier;
#if MODC_EMU_STACK_SWITCH
  switchStacks(&f.sp, currentBlock->scheduler);
#else
  swapcontext(&f.context, &currentBlock->scheduler);
#endif
}

/// Publishes this lane's `bits` to its warp and waits for every lane's:
/// returns the warp's 32 slots of this exchange.
inline const uint64_t *publish(uint64_t bits) {
  Fiber &f = currentBlock->fibers[linearThread];
  uint64_t *slots = myWarp().slots[f.exchanges++ & 1];
  slots[myLane()] = bits;
  parkAt(Fiber::AtWarpBarrier);
  return slots;
}

template <typename T> inline T exchange(T value, int srcLane, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  int lane = myLane();
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  const uint64_t *slots = publish(bits);
  int base = lane - lane % width;
  int src = base + ((srcLane % width) + width) % width;
  T out;
  uint64_t got = slots[src];
  std::memcpy(&out, &got, sizeof(T));
  return out;
}

/// Run by each thread as its kernel returns, where set: the PTX emulation
/// checks there that the thread left no asynchronous work behind.
inline void (*threadExitCheck)() = nullptr;

/// Fiber stacks, kept across launches (untouched pages cost nothing).
constexpr size_t kFiberStack = 256 * 1024;
inline char *fiberStack(int t) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  while ((int)stacks.size() <= t)
    stacks.emplace_back(new char[kFiberStack]);
  return stacks[t].get();
}

inline void fiberMain() {
  currentBlock->body();
  if (threadExitCheck)
    threadExitCheck();
  Fiber &f = currentBlock->fibers[linearThread];
  f.state = Fiber::Done;
#if MODC_EMU_STACK_SWITCH
  switchStacks(&f.sp, currentBlock->scheduler); // never resumed
  __builtin_unreachable();
#endif
  // Returning resumes the scheduler (uc_link).
}

/// Lays out a fresh fiber on `stack` that starts in fiberMain.
inline void startFiber(Fiber &f, char *stack, BlockState &state) {
#if MODC_EMU_STACK_SWITCH
  (void)state;
  // What switchStacks pops, from the top down: a return address for
  // fiberMain (never used; it leaves the stack 16-byte aligned at its
  // entry, as a call would), fiberMain to return to, six callee-saved
  // registers.
  auto **sp = reinterpret_cast<void **>(
      (reinterpret_cast<uintptr_t>(stack) + kFiberStack) & ~uintptr_t(15));
  *--sp = nullptr;
  *--sp = reinterpret_cast<void *>(&fiberMain);
  for (int i = 0; i < 6; ++i)
    *--sp = nullptr;
  f.sp = sp;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = kFiberStack;
  f.context.uc_link = &state.scheduler;
  makecontext(&f.context, fiberMain, 0);
#endif
}

/// Runs fiber f until it parks or ends.
inline void resumeFiber(Fiber &f, BlockState &state) {
#if MODC_EMU_STACK_SWITCH
  switchStacks(&state.scheduler, f.sp);
#else
  swapcontext(&state.scheduler, &f.context);
#endif
}

/// Whether TMA loads of the running block have yet to land (tmaLoad2d).
inline bool tmaLoadsPending();

/// Runs one block in rounds. In the default order a round runs every fiber,
/// ascending, until it parks or ends, then releases each warp whose live
/// lanes all wait at a warp barrier; in reverse order (reverseOrder()) the
/// warps take turns descending and each runs ahead, its lanes descending
/// and its warp barriers released at once, until its lanes wait at
/// __syncthreads, spin, yield or end. When no warp can move, the block is
/// released from __syncthreads. Threads that returned no longer count.
inline void runBlock(BlockState &state, dim3 block) {
  const int threads = (int)state.fibers.size();
  for (int t = 0; t < threads; ++t) {
    Fiber &f = state.fibers[t];
    startFiber(f, fiberStack(t), state);
    f.state = Fiber::Ready;
    f.index = dim3(unsigned(t % block.x), unsigned((t / block.x) % block.y),
                   unsigned(t / (block.x * block.y)));
    f.exchanges = 0;
  }
  // The scheduler's thread-locals, looked up once: a package is a shared
  // library, where each access to a thread_local calls __tls_get_addr (a
  // tenth of an emulated run's time when it was done at every resume).
  int &runningThread = linearThread;
  dim3 &runningIndex = threadIdx;
  const int warps = (threads + 31) / 32;
  // A round in which only spinning threads ran, and they spin still, can
  // change nothing: that is a deadlock. A thread that yielded waits for
  // nothing: resumed, it moves on, which is progress.
  bool progress = false, runnable = false;
  auto runThread = [&](int t) {
    Fiber &f = state.fibers[t];
    if (f.state != Fiber::Ready && f.state != Fiber::Spinning &&
        f.state != Fiber::Yielded)
      return;
    const bool wasSpinning = f.state == Fiber::Spinning;
    f.state = Fiber::Ready;
    runningThread = t;
    runningIndex = f.index;
    resumeFiber(f, state);
    runnable |= f.state == Fiber::Spinning || f.state == Fiber::Yielded;
    progress |= !(wasSpinning && f.state == Fiber::Spinning);
  };
  // Releases warp w if all its live lanes wait at a warp barrier.
  auto releaseWarp = [&](int w) {
    const int end = std::min(threads, w * 32 + 32);
    int live = 0, waiting = 0;
    for (int t = w * 32; t < end; ++t) {
      live += state.fibers[t].state != Fiber::Done;
      waiting += state.fibers[t].state == Fiber::AtWarpBarrier;
    }
    if (live == 0 || waiting != live)
      return false;
    for (int t = w * 32; t < end; ++t)
      if (state.fibers[t].state == Fiber::AtWarpBarrier)
        state.fibers[t].state = Fiber::Ready;
    return true;
  };
  for (;;) {
    progress = runnable = false;
    bool released = false;
    if (!reverseOrder()) {
      for (int t = 0; t < threads; ++t)
        runThread(t);
      for (int w = 0; w < warps; ++w)
        released |= releaseWarp(w);
    } else {
      for (int w = warps - 1; w >= 0; --w) {
        for (;;) {
          for (int t = std::min(threads, w * 32 + 32) - 1; t >= w * 32; --t)
            runThread(t);
          if (!releaseWarp(w))
            break;
          released = true;
        }
      }
    }
    bool anyLive = false, allAtBlock = true;
    for (const Fiber &f : state.fibers) {
      anyLive |= f.state != Fiber::Done;
      allAtBlock &= f.state == Fiber::Done || f.state == Fiber::AtBlockBarrier;
    }
    if (!anyLive) {
      // On a GPU a block must not end with copies still landing in its
      // shared memory.
      if (tmaLoadsPending())
        fatal("a block ended with a TMA load that no thread waited for");
      return;
    }
    if (released)
      continue;
    if (runnable) {
      if (!progress)
        fatal("deadlock: threads wait for a condition that no thread can "
              "change");
      continue;
    }
    if (!allAtBlock)
      fatal("deadlock: threads wait at different barriers");
    for (Fiber &f : state.fibers)
      if (f.state == Fiber::AtBlockBarrier)
        f.state = Fiber::Ready;
  }
}

/// Stream capture (cudaStreamBeginCapture .. EndCapture): work is recorded
/// instead of run, and a graph launch replays it.
struct Capture {
  bool active = false;
  std::vector<std::function<void()>> work;
};
inline Capture &capture() {
  static Capture c;
  return c;
}
/// Stops the program where `call` is made while a stream is being
/// captured: a GPU refuses it there (cudaErrorStreamCaptureUnsupported),
/// as it would allocate, free or wait, or read pageable host memory at the
/// graph's launch instead of now.
inline void refuseInCapture(const char *call) {
  if (capture().active) {
    const std::string what =
        std::string(call) + " while a stream is being captured into a graph";
    fatal(what.c_str());
  }
}
/// Runs `work` now, or records it while a stream is being captured.
inline void enqueue(std::function<void()> work) {
  if (capture().active)
    capture().work.push_back(std::move(work));
  else
    work();
}

template <typename... P, typename... A>
void runGrid(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
             A... args);

/// Under MODC_EMU_LAUNCH_LOG=FILE, appends each distinct launch to FILE as
/// 'launch SYMBOL THREADS DYNAMIC_SHARED_BYTES': what a GPU checks against
/// the kernel's compiled resources (registers, static shared memory, launch
/// bounds), which test/lit/Inputs/launch_limits.py compares with ptxas's
/// report. SYMBOL is the kernel's mangled name ('?' where the kernel is not
/// an exported symbol: emulated packages export theirs).
inline void logLaunch(const void *kernel, dim3 block, size_t shmem) {
  static const char *path = std::getenv("MODC_EMU_LAUNCH_LOG");
  if (!path || !*path)
    return;
  Dl_info info{};
  const char *name = dladdr(kernel, &info) && info.dli_sname &&
                             info.dli_saddr == kernel
                         ? info.dli_sname
                         : "?";
  std::string line = std::string("launch ") + name + " " +
                     std::to_string(block.x * block.y * block.z) + " " +
                     std::to_string(shmem) + "\n";
  std::lock_guard<std::mutex> lock(launchMutex());
  static std::set<std::string> logged;
  if (!logged.insert(line).second)
    return;
  if (FILE *f = std::fopen(path, "a")) {
    std::fputs(line.c_str(), f);
    std::fclose(f);
  } else {
    fatal("cannot append to MODC_EMU_LAUNCH_LOG");
  }
}

/// Refuses the launches a GPU would refuse (cudaErrorInvalidConfiguration,
/// or too much shared memory).
inline void checkLaunch(const void *kernel, dim3 grid, dim3 block,
                        size_t shmem) {
  logLaunch(kernel, block, shmem);
  const long threads = long(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    fatal("launch refused: a block of 1 to 1024 threads (z at most 64) is "
           "required");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535)
    fatal("launch refused: an empty grid, or grid.y or grid.z above 65535");
  if (long(shmem) > kDefaultDynamicShared) {
    std::lock_guard<std::mutex> lock(launchMutex());
    auto opted = dynamicSharedLimits().find(kernel);
    if (opted == dynamicSharedLimits().end() || long(shmem) > opted->second)
      fatal("launch refused: dynamic shared memory above 48 KiB needs "
             "cudaFuncSetAttribute(kernel, "
             "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first");
  }
}

/// Runs kernel(args...) over the grid: each block's threads on CPU threads.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
            cudaStream_t, A &&...args) {
  checkLaunch(reinterpret_cast<const void *>(kernel), grid, block, shmem);
  std::tuple<std::decay_t<A>...> saved(std::forward<A>(args)...);
  enqueue([=] {
    std::apply([&](auto... a) { runGrid(kernel, grid, block, shmem, a...); },
               saved);
  });
}

template <typename... P, typename... A>
void runGrid(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
             A... args) {
  const int threads = int(block.x * block.y * block.z);
  const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
  BlockState state;
  state.dynamicShared.resize(shmem + 16);
  state.fibers.resize(threads);
  state.warps.resize((threads + 31) / 32);
  std::tuple<A...> saved(args...);
  state.body = [&] { std::apply([&](auto &...a) { kernel(P(a)...); }, saved); };
  BlockState *outer = currentBlock;
  int outerThread = linearThread;
  currentBlock = &state;
  blockDim = block;
  gridDim = grid;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t b = reverseOrder() ? blocks - 1 - i : i;
    std::fill(state.dynamicShared.begin(), state.dynamicShared.end(), kPoison);
    blockIdx = dim3(unsigned(b % grid.x), unsigned((b / grid.x) % grid.y),
                    unsigned(b / (int64_t(grid.x) * grid.y)));
    runBlock(state, block);
  }
  currentBlock = outer;
  linearThread = outerThread;
}

} // namespace modc_emu


//===----------------------------------------------------------------------===//
// Runtime API of a generated package (device memory is host memory; one
// emulated device of compute capability 9.0; streams run in issue order)
//===----------------------------------------------------------------------===//

inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes,
                                   cudaStream_t = nullptr) {
  if (bytes)
    modc_emu::enqueue([=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                   cudaMemcpyKind kind,
                                   cudaStream_t = nullptr) {
  // Host memory here is pageable: a copy from or to it cannot be captured.
  if (kind != cudaMemcpyDeviceToDevice)
    modc_emu::refuseInCapture("cudaMemcpyAsync to or from host memory");
  if (bytes)
    modc_emu::enqueue([=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  modc_emu::refuseInCapture("cudaMemset");
  if (bytes)
    std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                              cudaMemcpyKind) {
  modc_emu::refuseInCapture("cudaMemcpy");
  if (bytes)
    std::memmove(dst, src, bytes);
  return cudaSuccess;
}
namespace modc_emu {
/// The device memory that is still allocated. A package keeps some device
/// buffers for the life of the process (RoPE tables, bf16 weight copies, the
/// scratch buffer) and never frees them: a GPU's driver frees what a process
/// leaves allocated when the process ends. The emulation does the same when
/// the process ends, so that LeakSanitizer reports only memory that would
/// leak on a GPU too: device memory that a package still frees by hand is
/// unaffected. Constructed at the first cudaMalloc, after the sanitizer
/// runtime, so it is destroyed before LeakSanitizer's check at exit.
/// One per process, shared by every emulated package in it (default
/// visibility: the dynamic linker makes it unique). cudaMalloc and cudaFree
/// are inline functions that the dynamic linker interposes across packages
/// wherever a call was not inlined, so one package's copy may free what
/// another's recorded; with a tracker per package that was a double free at
/// exit (several emulated packages in one test process).
struct DeviceAllocations {
  std::mutex mutex;
  std::set<void *> live;
  ~DeviceAllocations() {
    std::lock_guard<std::mutex> lock(mutex);
    for (void *p : live)
      std::free(p);
    live.clear();
    ended() = true;
  }
  /// Set when the process has freed its device memory: a cudaFree after
  /// that (a later destructor) is a no-op, a cudaMalloc untracked.
  static bool &ended() {
    static bool e = false; // trivially destructible: usable to the end
    return e;
  }
};
inline DeviceAllocations &deviceAllocations() {
  static DeviceAllocations a;
  return a;
}
} // namespace modc_emu

inline cudaError_t cudaMalloc(void **p, size_t bytes) {
  modc_emu::refuseInCapture("cudaMalloc");
  const size_t rounded = ((bytes + 255) / 256) * 256;
  *p = std::aligned_alloc(256, rounded);
  if (!*p)
    return cudaErrorInvalidValue;
  std::memset(*p, modc_emu::kPoison, rounded); // a GPU does not clear it
  if (!modc_emu::DeviceAllocations::ended()) {
    modc_emu::DeviceAllocations &a = modc_emu::deviceAllocations();
    std::lock_guard<std::mutex> lock(a.mutex);
    a.live.insert(*p);
  }
  return cudaSuccess;
}
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void **>(p), bytes);
}
inline cudaError_t cudaFree(void *p) {
  if (!p)
    return cudaSuccess;
  modc_emu::refuseInCapture("cudaFree");
  if (modc_emu::DeviceAllocations::ended())
    return cudaSuccess; // freed with the rest of the device memory
  modc_emu::DeviceAllocations &a = modc_emu::deviceAllocations();
  {
    std::lock_guard<std::mutex> lock(a.mutex);
    a.live.erase(p);
  }
  std::free(p);
  return cudaSuccess;
}
inline const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "emulated CUDA error";
}
inline cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}
struct cudaDeviceProp {
  char name[256] = "CPU emulation of a CUDA device";
  int major = 9, minor = 0, multiProcessorCount = 132;
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
  *p = cudaDeviceProp();
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr,
                                          int) {
  *value = cudaDeviceProp().multiProcessorCount;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  modc_emu::refuseInCapture("cudaDeviceSynchronize");
  return cudaSuccess;
}
constexpr unsigned cudaStreamNonBlocking = 1;
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  static int token;
  *s = &token;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  modc_emu::refuseInCapture("cudaStreamSynchronize");
  return cudaSuccess;
}
/// Events: kernels run at their launch here, so an event records the host
/// time at which it is recorded.
struct CudaEmuEvent {
  std::chrono::steady_clock::time_point at;
};
typedef CudaEmuEvent *cudaEvent_t;
inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new CudaEmuEvent{};
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
  modc_emu::refuseInCapture("cudaEventSynchronize");
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a,
                                        cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
enum cudaStreamCaptureMode { cudaStreamCaptureModeThreadLocal = 1 };
struct CudaEmuGraph {
  std::vector<std::function<void()>> work;
};
typedef CudaEmuGraph *cudaGraph_t;
typedef CudaEmuGraph *cudaGraphExec_t;
inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  modc_emu::capture().active = true;
  modc_emu::capture().work.clear();
  return cudaSuccess;
}
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1
};
inline cudaError_t cudaStreamIsCapturing(cudaStream_t,
                                         cudaStreamCaptureStatus *status) {
  *status = modc_emu::capture().active ? cudaStreamCaptureStatusActive
                                       : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
  *g = new CudaEmuGraph{std::move(modc_emu::capture().work)};
  modc_emu::capture() = modc_emu::Capture();
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                        unsigned long long) {
  *exec = new CudaEmuGraph(*g);
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t) {
  for (auto &w : g->work)
    w();
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// Tensor maps and the Tensor Memory Accelerator (sm_90): the driver API's
// cuTensorMapEncodeTiled (through cudaGetDriverEntryPointByVersion, as the
// generated code finds it), mbarriers and the 2-D tiled TMA load. The tensor
// map is opaque on a GPU; here it holds the encoded fields, checked against
// the requirements the driver API documents.
//===----------------------------------------------------------------------===//

typedef uint64_t cuuint64_t;
typedef uint32_t cuuint32_t;
enum CUresult { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 };
enum CUtensorMapDataType { CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9 };
enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_128B = 3
};
enum CUtensorMapL2promotion {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
};
enum CUtensorMapFloatOOBfill { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };
// Named as in cuda.h, so that kernels taking one mangle as nvcc's do.
struct alignas(64) CUtensorMap_st {
  unsigned long long opaque[16];
};
typedef CUtensorMap_st CUtensorMap;
#define __grid_constant__
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1
};
constexpr unsigned long long cudaEnableDefault = 0;

namespace modc_emu {

/// What an emulated tensor map holds (in CUtensorMap's 128 bytes).
struct TensorMapFields {
  const unsigned char *base;
  uint32_t elementBytes, rank;
  uint64_t dims[5], strides[5]; // strides in bytes; strides[0] = element
  uint32_t box[5];
  int swizzle;
};
static_assert(sizeof(TensorMapFields) <= sizeof(CUtensorMap),
              "the fields fit the opaque map");

inline CUresult encodeTensorMapTiled(
    CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
    const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
    const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  const uint32_t bytes = type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ? 2 : 0;
  bool ok = bytes != 0 && rank >= 1 && rank <= 5 &&
            reinterpret_cast<uintptr_t>(map) % 64 == 0 &&
            reinterpret_cast<uintptr_t>(address) % 16 == 0 &&
            interleave == CU_TENSOR_MAP_INTERLEAVE_NONE &&
            (swizzle == CU_TENSOR_MAP_SWIZZLE_NONE ||
             swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  TensorMapFields f{};
  f.base = static_cast<const unsigned char *>(address);
  f.elementBytes = bytes;
  f.rank = rank;
  f.swizzle = swizzle;
  for (uint32_t i = 0; ok && i < rank; ++i) {
    f.dims[i] = dims[i];
    f.box[i] = box[i];
    f.strides[i] = i == 0 ? bytes : strides[i - 1];
    // Only unit element strides are modelled.
    ok = dims[i] >= 1 && dims[i] <= (uint64_t(1) << 32) && box[i] >= 1 &&
         box[i] <= 256 && elementStrides[i] == 1 &&
         (i == 0 || (strides[i - 1] % 16 == 0 &&
                     strides[i - 1] < (uint64_t(1) << 40)));
  }
  ok = ok && box[0] * bytes % 16 == 0 &&
       (swizzle != CU_TENSOR_MAP_SWIZZLE_128B || box[0] * bytes <= 128);
  if (!ok)
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(map, 0, sizeof(CUtensorMap));
  std::memcpy(map, &f, sizeof(f));
  return CUDA_SUCCESS;
}

/// An mbarrier as its 8 bytes of shared memory hold it here: the expected
/// and pending arrival counts of the current phase, its parity, and the
/// transaction bytes still to come (signed: a copy may complete before its
/// bytes are expected).
struct Mbarrier {
  uint16_t expected, pending;
  int32_t txAndPhase; // tx bytes << 1 | phase parity
  int phase() const { return txAndPhase & 1; }
  int32_t tx() const { return txAndPhase >> 1; }
  void set(int32_t tx, int phase) { txAndPhase = int32_t(uint32_t(tx) << 1) | phase; }
  /// The phase completes when every arrival and every byte is in.
  void settle() {
    if (pending == 0 && tx() == 0) {
      pending = expected;
      set(0, phase() ^ 1);
    }
  }
};
static_assert(sizeof(Mbarrier) == 8, "an mbarrier is 8 bytes");

inline Mbarrier &mbarrier(uint64_t *bar) {
  return *reinterpret_cast<Mbarrier *>(bar);
}
inline void mbarrierInit(uint64_t *bar, unsigned count) {
  Mbarrier &b = mbarrier(bar);
  b.expected = b.pending = uint16_t(count);
  b.set(0, 0);
}
inline void mbarrierArriveExpectTx(uint64_t *bar, unsigned bytes) {
  Mbarrier &b = mbarrier(bar);
  b.set(b.tx() + int32_t(bytes), b.phase());
  if (b.pending == 0)
    fatal("more arrivals at an mbarrier than its count");
  --b.pending;
  b.settle();
}
/// mbarrier.arrive (no transaction bytes).
inline void mbarrierArrive(uint64_t *bar) { mbarrierArriveExpectTx(bar, 0); }
/// A 2-D TMA load issued and not yet landed: TMA copies asynchronously,
/// and the emulation lands a copy at the latest time a GPU may, when a
/// thread waits on its mbarrier's phase (mbarrierTryWaitParity), so a
/// thread that reads the destination before that wait sees what was there
/// before the copy.
struct PendingTmaLoad {
  unsigned char *dst;
  TensorMapFields map;
  int c0, c1;
  uint64_t *bar;
};
/// The running block's pending loads (blocks run one at a time on an OS
/// thread), in issue order.
inline std::vector<PendingTmaLoad> &pendingTmaLoads() {
  static thread_local std::vector<PendingTmaLoad> loads;
  return loads;
}
inline void landTmaLoad(const PendingTmaLoad &load);
/// Lands the pending loads that complete on `bar`, in issue order.
inline void landTmaLoads(uint64_t *bar) {
  std::vector<PendingTmaLoad> &loads = pendingTmaLoads();
  size_t kept = 0;
  for (size_t i = 0; i < loads.size(); ++i) {
    if (loads[i].bar == bar)
      landTmaLoad(loads[i]);
    else
      loads[kept++] = loads[i];
  }
  loads.resize(kept);
}
inline bool tmaLoadsPending() { return !pendingTmaLoads().empty(); }
/// mbarrier.try_wait.parity: whether the phase of that parity completed;
/// the loads still in flight on the barrier land first.
inline bool mbarrierTryWaitParity(uint64_t *bar, unsigned parity) {
  if (mbarrier(bar).phase() == int(parity & 1))
    landTmaLoads(bar);
  return mbarrier(bar).phase() != int(parity & 1);
}

/// cp.async.bulk.tensor.2d ... mbarrier::complete_tx::bytes: the box at
/// (c0, c1) (element coordinates, c0 the contiguous one) into dst, row after
/// row, zero outside the tensor; with the 128-byte swizzle, the 16-byte
/// chunk j of each 128 bytes lands at chunk j ^ (address bits 7..9), as the
/// address it is stored at gives them (so dst must be 1024-byte aligned for
/// the pattern to start at row 0). The copy lands when a thread waits on
/// the barrier (PendingTmaLoad), which then receives the box's bytes.
/// The 128-byte swizzle of a shared address: its 16-byte chunk index
/// (bits 4..6) XORed with bits 7..9 (TMA's SWIZZLE_128B, and the wgmma
/// descriptors' layout type 1 that read it).
inline uintptr_t swizzle128(uintptr_t at) { return at ^ ((at >> 7) & 7) << 4; }

inline void tmaLoad2d(void *dst, const CUtensorMap *map, int c0, int c1,
                      uint64_t *bar) {
  PendingTmaLoad load{static_cast<unsigned char *>(dst), {}, c0, c1, bar};
  std::memcpy(&load.map, map, sizeof(load.map));
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  if (load.map.rank != 2 ||
      d % (load.map.swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? 1024 : 128))
    fatal("a 2-D TMA load needs a 2-D map and an aligned shared destination");
  pendingTmaLoads().push_back(load);
}

inline void landTmaLoad(const PendingTmaLoad &load) {
  const TensorMapFields &f = load.map;
  const int c0 = load.c0, c1 = load.c1;
  const uintptr_t d = reinterpret_cast<uintptr_t>(load.dst);
  const uint32_t eb = f.elementBytes;
  for (uint32_t i1 = 0; i1 < f.box[1]; ++i1)
    for (uint32_t i0 = 0; i0 < f.box[0]; ++i0) {
      const int64_t g0 = int64_t(c0) + i0, g1 = int64_t(c1) + i1;
      uintptr_t at = d + (uintptr_t(i1) * f.box[0] + i0) * eb;
      if (f.swizzle == CU_TENSOR_MAP_SWIZZLE_128B)
        at = swizzle128(at);
      unsigned char *out = reinterpret_cast<unsigned char *>(at);
      if (g0 >= 0 && g1 >= 0 && uint64_t(g0) < f.dims[0] &&
          uint64_t(g1) < f.dims[1])
        std::memcpy(out, f.base + g0 * f.strides[0] + g1 * f.strides[1], eb);
      else
        std::memset(out, 0, eb);
    }
  Mbarrier &b = mbarrier(load.bar);
  b.set(b.tx() - int32_t(f.box[0] * f.box[1] * eb), b.phase());
  b.settle();
}

/// Gives way to the block's other threads (a wait loop's turn).
inline void spin() { parkAt(Fiber::Spinning); }
/// Gives way to the block's other threads once, waiting for nothing: they
/// run up to their next barrier, spin or yield before this thread goes on
/// (docs/cuda.md, "Testing without a GPU").
inline void yield() { parkAt(Fiber::Yielded); }

} // namespace modc_emu

inline cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **fn, unsigned, unsigned long long,
    cudaDriverEntryPointQueryResult *result) {
  const bool found = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *fn = found ? reinterpret_cast<void *>(&modc_emu::encodeTensorMapTiled)
              : nullptr;
  if (result)
    *result = found ? cudaDriverEntryPointSuccess
                    : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

inline void __syncthreads() {
  modc_emu::parkAt(modc_emu::Fiber::AtBlockBarrier);
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  modc_emu::parkAt(modc_emu::Fiber::AtWarpBarrier);
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
  const uint64_t *slots = modc_emu::publish(predicate ? 1 : 0);
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l)
    if (slots[l] == 1)
      bits |= 1u << l;
  return bits;
}
/// The lanes of the warp whose value equals this lane's (all 32 lanes take
/// part, as the kernels call it).
inline unsigned __match_any_sync(unsigned, unsigned value) {
  const uint64_t *slots = modc_emu::publish(value);
  unsigned peers = 0;
  for (int l = 0; l < 32; ++l)
    if (slots[l] == value)
      peers |= 1u << l;
  return peers;
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
