//===- CudaCommon.cuh - Conventions shared by the CUDA preludes -*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The CUDA emitter pastes the small kernels both targets share
/// (Shared/prelude/SmallKernels.h) and this header first, then the mainloops
/// (Mainloops/Cuda: GemmTiles.cuh, FlashAttention.cuh), CudaKernels.cuh and,
/// when the package has those entries, FlashAttentionGrad.cuh with
/// CudaKernelsTrain.cuh and CudaKernelsDecode.cuh, at the top of every
/// generated `model.cu`.
///
/// Conventions (the CPU prelude's, with device pointers):
///  - Every tensor pointer is a device pointer; row-major f32.
///  - Row counts are not known on the host: the routing kernels write them on
///    the device. Where a CPU kernel takes `int64_t rows`, the CUDA one takes
///    `const int64_t *rows` (a device pointer, always `seg + nseg`) and a
///    static bound `max_rows` that sizes the grid; blocks past `*rows` exit.
///    No kernel plan ever waits on the device to learn a count, so a plan is
///    one stream of launches (and a decode step can be one CUDA graph).
///  - Every host wrapper takes the stream last and only enqueues work.
///
/// The same sources compile as plain C++ against test/cuda_emu/CudaEmulation.h,
/// which runs each block's threads on CPU threads, so the kernels' logic is
/// tested on machines without a GPU.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_COMMON_INCLUDED
#define MODC_CUDA_COMMON_INCLUDED

#include <cstdint>
#include <cstring>

#ifndef MODC_SMALL_KERNELS_INCLUDED
#include "../../Shared/prelude/SmallKernels.h"
#endif

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define MODC_LAUNCH(kernel, grid, block, shmem, stream, ...)                   \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
/// Dynamic shared memory of the running kernel, as `type *name`.
#define MODC_DYNAMIC_SHARED(type, name)                                        \
  extern __shared__ __align__(16) unsigned char modc_dynamic_smem[];           \
  type *name = reinterpret_cast<type *>(modc_dynamic_smem)
#else
#include "CudaEmulation.h"
#endif

// A host-side count that a test reads (test/cuda_emu/TestCounters.h defines
// it before the kernels); nothing in a package.
#ifndef MODC_TEST_COUNT
#define MODC_TEST_COUNT(counter) ((void)0)
#endif

namespace modk_cuda {

constexpr int kWarp = 32;

/// Blocks needed to cover n items with `per` items a block.
inline int64_t ceilDiv(int64_t n, int64_t per) { return (n + per - 1) / per; }

struct SumOp {
  template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return fmaxf(a, b);
  }
};

/// `op` over the 32 lanes of a warp (butterfly: every lane gets the result,
/// combined in the same order on every run).
template <typename T, typename Op>
__device__ __forceinline__ T warpReduce(T v, Op op) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// `op` over the block (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the result, the warps' partials combined in warp order.
/// `scratch` is 32 values of shared memory.
template <typename T, typename Op>
__device__ __forceinline__ T blockReduce(T v, T *scratch, Op op) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = warpReduce(v, op);
  __syncthreads(); // scratch may still be read by a previous call
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w)
    total = op(total, scratch[w]);
  return total;
}

__device__ __forceinline__ float warpSum(float v) { return warpReduce(v, SumOp()); }
__device__ __forceinline__ float warpMax(float v) { return warpReduce(v, MaxOp()); }
__device__ __forceinline__ float blockSum(float v, float *scratch) {
  return blockReduce(v, scratch, SumOp());
}
__device__ __forceinline__ double blockSum(double v, double *scratch) {
  return blockReduce(v, scratch, SumOp());
}
__device__ __forceinline__ float blockMax(float v, float *scratch) {
  return blockReduce(v, scratch, MaxOp());
}

__device__ __forceinline__ float negInf() { return __uint_as_float(0xff800000u); }

using modk_small::segmentOf;

/// The bits of a float and back, on the device or the host.
__host__ __device__ inline uint32_t floatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}
__host__ __device__ inline float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

/// A bf16 in device memory: a bf16 model's KV cache, the buffers only its
/// products read (modk-store-bf16) and the weights' copies for TMA hold
/// bf16 in half the bytes (the CPU prelude's bf16). From a float it rounds
/// to nearest, ties to even (the CPU's bf16_round); to a float it is exact.
/// Host code converts too (a test reading a device buffer back): a
/// __device__-only conversion called there compiles, silently, to a host
/// stub that ends the process.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  __host__ __device__ bf16(float x) {
    uint32_t u = floatBits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      u |= 0x00400000u;
    else
      u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  __host__ __device__ operator float() const {
    return bitsFloat(static_cast<uint32_t>(bits) << 16);
  }
};


namespace detail {

constexpr int kThreads = 256;    ///< threads of most blocks
constexpr int kRowWarps = 8;     ///< rows per block of the warp-per-row kernels
constexpr int kMaxGrid = 1 << 16; ///< elementwise grids are capped (grid-stride)
/// The most row kernels one grouped launch runs (modk-group-gemms'
/// max-members): their table (modc_rows_<n>_group) is a kernel parameter.
/// (inline: a package without groups leaves it unused, which nvcc would
/// report of a plain constexpr.)
inline constexpr int kMaxRowGroup = 16;

__device__ __forceinline__ int64_t minI64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

/// x rounded to the nearest bf16 (ties to even), as the f32 of the same
/// value: the CPU prelude's bf16_round, bit for bit (NaN stays NaN).
__device__ __forceinline__ float bf16Round(float x) {
  return float(bf16(x));
}

/// Exclusive prefix sum over the block of one int per thread (blockDim a
/// multiple of 32, at most 1024); `*total` gets the block's sum. `scratch`
/// is 32 ints of shared memory. Every thread of the block must call it.
__device__ __forceinline__ int blockExclusiveScan(int v, int *scratch,
                                                  int *total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  int inc = v;
  for (int o = 1; o < kWarp; o *= 2) {
    const int t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o)
      inc += t;
  }
  __syncthreads(); // scratch may still be read by a previous call
  if (lane == kWarp - 1)
    scratch[warp] = inc;
  __syncthreads();
  int before = 0, sum = 0;
  for (int w = 0; w < warps; ++w) {
    const int s = scratch[w];
    before += w < warp ? s : 0;
    sum += s;
  }
  *total = sum;
  return before + inc - v;
}

/// Minimum over the block (same contract as blockExclusiveScan).
__device__ __forceinline__ int64_t blockMinI64(int64_t v, int64_t *scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const int64_t t = __shfl_xor_sync(0xffffffffu, v, o);
    v = t < v ? t : v;
  }
  __syncthreads();
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  int64_t m = scratch[0];
  for (int w = 1; w < warps; ++w)
    m = scratch[w] < m ? scratch[w] : m;
  return m;
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Column sums over rows, deterministic (the weight gradients, and the
// generated row kernels' column sums)
//===----------------------------------------------------------------------===//

namespace train_detail {

/// Rows per block of the row-reduction kernels (one partial row each).
constexpr int kRB = 32;

/// Blocks of a generated scatter-add kernel (the embedding's gradient):
/// block b owns the table rows whose id % kScatterBlocks == b and adds its
/// rows in row order, so any count gives the same result.
constexpr int kScatterBlocks = 256;

/// Elements per block of the generated gradient norm's sum
/// (modc_optimizer_norm: one double partial each).
constexpr int64_t kNormChunk = 8192;

/// Threads of a block that covers W columns: a multiple of 32, at most 256.
template <int W> __host__ __device__ constexpr int colThreads() {
  return W >= 256 ? 256 : ((W + 31) / 32) * 32;
}

/// Where the columns of a row reduction go: column w < n0 to p0[w], then n1
/// columns to p1, the rest to p2 (all accumulate).
struct ColOut {
  float *p0, *p1, *p2;
  int n0, n1;
};

/// out[w] += sum over the blocks b < ceil(rows / kRB) of partial[b][w], in
/// block order. rows = *rowsDev when given, else rowsHost.
template <int RB>
__global__ void reduceColumns(const float *partial, int W,
                              const int64_t *rowsDev, int64_t rowsHost,
                              ColOut out) {
  const int w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= W)
    return;
  const int64_t rows = rowsDev ? *rowsDev : rowsHost;
  const int64_t nb = (rows + RB - 1) / RB;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b)
    acc += partial[b * W + w];
  float *dst = w < out.n0            ? out.p0 + w
               : w < out.n0 + out.n1 ? out.p1 + (w - out.n0)
                                     : out.p2 + (w - out.n0 - out.n1);
  *dst += acc;
}

inline void launchReduceColumns(const float *partial, int W,
                                const int64_t *rowsDev, int64_t rowsHost,
                                ColOut out, cudaStream_t stream) {
  auto k = reduceColumns<kRB>;
  MODC_LAUNCH(k, (unsigned)ceilDiv(W, 256), 256, 0, stream, partial, W, rowsDev,
              rowsHost, out);
}

} // namespace train_detail

/// Floats of scratch for a row reduction of width W over at most max_rows.
inline int64_t row_reduce_scratch_floats(int64_t max_rows, int64_t W) {
  return ceilDiv(max_rows > 0 ? max_rows : 0, train_detail::kRB) * W;
}

/// Device state of one optimizer step, at the start of its scratch
/// (adamw_norm writes it; the generated modc_optimizer_update reads it).
struct AdamCtl {
  float scale; // gradient clip factor: modk.optimizer's grad_scale
  int finite;  // the gradient norm is finite
  double squares;
};

/// One parameter of an optimizer step, as the generated
/// modc_optimizer_norm and modc_optimizer_update read it: both kernels
/// cover every parameter in one launch, a block a chunk of kNormChunk
/// elements (train_detail::kNormChunk), the chunks numbered through the
/// parameters in ABI order.
struct AdamTensor {
  float *p;
  const float *g;
  float *m;
  float *v;
  bf16 *copy;          ///< the parameter's bf16 copy (bf16_copies), or null
  int64_t n;           ///< elements
  int64_t firstChunk;  ///< the chunks of the parameters before it
  int64_t decays;      ///< weight decay applies (the manifest's "decay")
};

/// The parameter that chunk `chunk` belongs to: the last with firstChunk <=
/// chunk (a parameter of no element owns no chunk).
__host__ __device__ inline const AdamTensor &
adamTensorOf(const AdamTensor *tensors, int count, int64_t chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tensors[mid].firstChunk <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return tensors[lo];
}

} // namespace modk_cuda

#if !defined(__CUDACC__)
// The CPU emulation's forms of the PTX wrappers that the mainloops and
// preludes define for nvcc only (test/cuda_emu; never in a package).
#include "PtxEmulation.h"
#endif

#endif // MODC_CUDA_COMMON_INCLUDED
