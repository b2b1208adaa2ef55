//===- CudaKernels.cuh - CUDA forward kernel prelude ------------*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The forward kernels of modc's CUDA target: the CUDA twins of CpuKernels.h
/// (and of cache_append in CpuKernelsDecode.h), with the conventions of
/// CudaCommon.cuh:
///  - device pointers, row-major f32;
///  - where the CPU kernel takes `int64_t rows`, these take
///    `const int64_t *rows, int64_t max_rows` (a device count, always
///    `seg + nseg`, and a static bound that sizes the grid; blocks past
///    `*rows` exit);
///  - the stream comes last; the wrappers only enqueue work.
///
/// Every kernel computes in f32 with the CPU kernel's semantics (selection
/// order and tie-breaking of the routers exactly; sums up to rounding).
/// The GEMMs are one kernel family with an index map per operand layout and
/// an epilogue parameter, in three mainloops: mma.m16n8k8 on tf32 with the
/// 3xTF32 split (near-f32 accuracy, sm_80 and later; cp.async
/// double-buffered shared tiles; a bf16 model's products on bf16 mma),
/// warpgroup wgmma (sm_90a, bf16) from shared tiles the threads round, or,
/// for operands stored as bf16, a persistent warp-specialised wgmma kernel
/// fed by TMA, and a tiled SIMT f32 kernel (register micro-tiles, a
/// register prefetch of the next tile); the epilogues fused (RoPE too where
/// a warp holds whole heads). Which mainloop and tile a product runs is its
/// caller's GemmPlan, chosen by the compiler (modk-configure-gemms,
/// docs/cuda.md): nothing is chosen at run time but the plan's row range.
/// The weight gradient reduces over the rows in one CTA per output
/// tile, or, with scratch and few output tiles, in fixed row chunks whose
/// partials a second kernel adds in chunk order; deterministic either way
/// (no float atomics). causal_attention likewise runs on tensor
/// cores (3xTF32 Q K^T and P V, online softmax in f32 registers) for head
/// dims that are multiples of 8 up to 128, else on a SIMT f32 kernel; which
/// one is again the caller's template argument (the compiler's choice).
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_KERNELS_INCLUDED
#define MODC_CUDA_KERNELS_INCLUDED

#ifndef MODC_CUDA_COMMON_INCLUDED
#include "CudaCommon.cuh"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>
#if defined(__CUDACC__)
#include <cuda.h> // CUtensorMap and its enums (no driver library is linked)
#include <cuda_bf16.h>
#endif

namespace modk_cuda {

/// The GemmPlan of a product whose caller names none. Packages always name
/// theirs; a program that calls the library without one defines this type
/// (complete before the calls are instantiated).
struct DefaultGemmPlan;

namespace detail {

constexpr int kThreads = 256;    ///< threads of most blocks
constexpr int kRowWarps = 8;     ///< rows per block of the warp-per-row kernels
constexpr int kMaxGrid = 1 << 16; ///< elementwise grids are capped (grid-stride)

__device__ __forceinline__ int64_t minI64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__device__ __forceinline__ float geluf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
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

//===----------------------------------------------------------------------===//
// GEMM: C[m, n] = epilogue(sum_l A(m, l) B(l, n))
//===----------------------------------------------------------------------===//

/// Epilogues of the GEMM (idx = m * ldc + n):
enum Epilogue {
  EpiStore = 0,    ///< C = acc
  EpiAdd = 1,      ///< C = aux[idx] + acc (aux may be C: accumulate)
  EpiGelu = 2,     ///< C = gelu(acc)
  EpiSwiglu = 3,   ///< C = silu(aux[idx]) * acc
  EpiBiasSilu = 4, ///< C = silu(acc + aux[n])
  EpiStoreBf16 = 5, ///< C = bf16(acc): values attention reads in a bf16 model
  /// From here, epiRope<HD, Round>(): C = rope(acc) per head of HD columns
  /// at the row's position (then rounded to bf16 when Round): the queries
  /// and keys. Only tiles whose warps hold whole heads take it
  /// (epilogueFits).
  EpiRopeFirst = 64,
};

template <int HD, bool Round> __host__ __device__ constexpr int epiRope() {
  static_assert(HD > 0 && HD % 16 == 0, "fused RoPE pairs whole m16n8 columns");
  return EpiRopeFirst + 2 * HD + (Round ? 1 : 0);
}
__host__ __device__ constexpr bool isEpiRope(int epi) { return epi >= EpiRopeFirst; }
__host__ __device__ constexpr int epiRopeHeadDim(int epi) { return (epi - EpiRopeFirst) / 2; }
__host__ __device__ constexpr bool epiRopeRounds(int epi) { return (epi - EpiRopeFirst) % 2 == 1; }

/// What an epilogue reads besides the accumulator. A plain pointer converts
/// to it (the aux of the elementwise epilogues). Device code takes it by
/// value: a reference to the kernel parameter would copy it to the stack.
struct EpiArgs {
  /// EpiAdd, EpiSwiglu: per output element; EpiBiasSilu: per column.
  const float *aux = nullptr;
  /// RoPE: the position of each row, below ropePositions, and the (cos,
  /// sin) table of positions 0 .. ropePositions - 1 (ropeTableFor).
  const int32_t *pos = nullptr;
  const float2 *ropeTable = nullptr;
  int32_t ropePositions = 0;
  EpiArgs() = default;
  EpiArgs(const float *aux) : aux(aux) {}
};

/// RoPE's (cos, sin) for pair j of a head of HD at position p: the angle in
/// double, only cos and sin rounded (modk_cpu::ropeRotate's values).
template <int HD>
__device__ __forceinline__ float2 ropeAngle(int32_t p, int j, float theta) {
  const double a = static_cast<double>(p) *
                   pow(static_cast<double>(theta), -2.0 * j / HD);
  return make_float2(static_cast<float>(cos(a)), static_cast<float>(sin(a)));
}

/// The angle of pair j at position p from the epilogue's table. Positions
/// are below the table's length (linear_rope's contract; clamped only so
/// that a broken contract cannot read outside the table). No angle is
/// computed here: the double-precision sin and cos would take the GEMM's
/// registers (spills on the small TMA tile).
template <int HD>
__device__ __forceinline__ float2 ropeAngleAt(const EpiArgs epi, int32_t p,
                                              int j) {
  p = p < 0 ? 0 : (p < epi.ropePositions ? p : epi.ropePositions - 1);
  return epi.ropeTable[int64_t(p) * (HD / 2) + j];
}

/// Rotates the pair (x0, x1) = (x[j], x[j + HD / 2]) by (cos, sin) =
/// (cs.x, cs.y). Rounded products and sums (no fused multiply-add), so that
/// every CUDA kernel that rotates (the GEMM epilogue, rope, rope_grad) gives
/// the same bits.
__device__ __forceinline__ void ropeRotatePair(float &x0, float &x1,
                                               float2 cs) {
  const float y0 = __fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y));
  const float y1 = __fadd_rn(__fmul_rn(x1, cs.x), __fmul_rn(x0, cs.y));
  x0 = y0;
  x1 = y1;
}

/// The epilogue applied to acc, the sum at output idx (column n); not RoPE,
/// which pairs columns (storeAccumulators).
template <int EPI>
__device__ __forceinline__ float gemmEpilogue(float acc, const EpiArgs epi,
                                              int64_t idx, int64_t n) {
  static_assert(!isEpiRope(EPI), "RoPE is applied to column pairs");
  if (EPI == EpiStore)
    return acc;
  if (EPI == EpiAdd)
    return epi.aux[idx] + acc;
  if (EPI == EpiGelu)
    return geluf(acc);
  if (EPI == EpiSwiglu)
    return siluf(epi.aux[idx]) * acc;
  if (EPI == EpiStoreBf16)
    return bf16Round(acc);
  return siluf(acc + epi.aux[n]);
}

/// The element types a GEMM may take besides f32 (a bf16 model's buffers
/// that only products read, modk-store-bf16): A and B as bf16 in a bf16
/// product (the forward's activations, the gradients of the activation and
/// of the values, the activations a weight gradient reduces over their
/// rows), C as bf16 where the epilogue neither reads C nor splits the
/// reduction.
template <typename TA, typename TB, typename TC, bool AK, int EPI, bool BF,
          int DYN>
constexpr bool gemmTypesOk() {
  constexpr bool aOk =
      std::is_same<TA, float>::value || (std::is_same<TA, bf16>::value && BF);
  constexpr bool bOk =
      std::is_same<TB, float>::value || (std::is_same<TB, bf16>::value && BF);
  constexpr bool cOk =
      std::is_same<TC, float>::value ||
      (std::is_same<TC, bf16>::value && DYN != 3 &&
       (EPI == EpiStore || EPI == EpiGelu || EPI == EpiSwiglu ||
        EPI == EpiStoreBf16 || isEpiRope(EPI)));
  return aOk && bOk && cOk;
}

/// Tile shapes: BM x BN outputs per CTA of 256 threads, BK reduction steps
/// per shared tile, TM x TN outputs per thread (in groups of 4 rows/columns
/// spread over the tile, so that a warp's float4 shared reads do not conflict).
template <int BM_, int BN_, int BK_, int TM_, int TN_, int MINB_>
struct GemmTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int MINB = MINB_; // CTAs per SM the registers must allow
  static constexpr int TX = BN / TN, TY = BM / TM;
  static_assert(TX * TY == kThreads, "one output micro-tile per thread");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles in groups of 4");
  static_assert(BM * BK % kThreads == 0 && BN * BK % kThreads == 0,
                "tile loads split evenly over the threads");
  static constexpr int LA = BM * BK / kThreads, LB = BN * BK / kThreads;
  static constexpr int PAD = 4; // keeps float4 alignment of the rows
  static constexpr int WarpCols = 0; // no m16n8 fragments (epilogueFits)
};
using GemmSmall = GemmTile<64, 64, 16, 4, 4, 2>;
using GemmLarge = GemmTile<128, 128, 8, 8, 8, 2>;

/// DYN == 3 of the GEMM kernels: the reduction rows 0 .. *dynRows split in
/// chunks of `chunk` rows (L, the kernel argument), chunk z = blockIdx.z
/// (the last chunk of the grid takes every row left). The kernel moves A
/// and B to the chunk's first row, k0 = z * chunk, and C to partial z
/// (C + z * M * ldc). Returns the chunk's length: <= 0 for a chunk past the
/// rows, whose CTAs write nothing (splitSumKernel does not read them).
__device__ __forceinline__ int64_t splitChunk(int64_t chunk,
                                              const int64_t *dynRows,
                                              int64_t &k0) {
  const int64_t z = blockIdx.z;
  k0 = z * chunk;
  const int64_t len = *dynRows - k0;
  return z + 1 < int64_t(gridDim.z) ? minI64(len, chunk) : len;
}

/// The start both GEMM kernels share: the sizes a DYN mode reads on the
/// device (DYN 1: M, 2: L, 3: the split chunk, which also moves A, B and C to
/// it) and the CTA's tile origin (m0, n0). False when the CTA has nothing to
/// do; the whole CTA then returns.
template <bool AK, bool BKc, int DYN, int BM, int BN, typename TA, typename TB,
          typename TC>
__device__ __forceinline__ bool
gemmCta(const TA *__restrict__ &A, int64_t lda,
        const TB *__restrict__ &B, int64_t ldb, TC *&C, int64_t ldc,
        int64_t &M, int64_t Ncols, int64_t &L,
        const int64_t *dynRows, int64_t &m0, int64_t &n0) {
  if (DYN == 1)
    M = *dynRows;
  if (DYN == 2)
    L = *dynRows;
  if (DYN == 3) {
    int64_t k0;
    L = splitChunk(L, dynRows, k0);
    A += AK ? k0 : k0 * lda;
    B += BKc ? k0 : k0 * ldb;
    C += int64_t(blockIdx.z) * M * ldc;
  }
  m0 = int64_t(blockIdx.y) * BM;
  n0 = int64_t(blockIdx.x) * BN;
  return m0 < M && n0 < Ncols && !(DYN == 3 && L <= 0);
}

/// Tile coordinates of load slot idx of an operand tile (row r among ROWS in
/// the M or N dimension, column c among BK in the reduction), consecutive
/// slots along the operand's contiguous dimension in global memory (the
/// reduction when KC).
template <bool KC, int ROWS, int BK>
__device__ __forceinline__ void tileSlot(int idx, int &r, int &c) {
  r = KC ? idx / BK : idx % ROWS;
  c = KC ? idx % BK : idx / ROWS;
}

/// The GEMM kernel. A(m, l) is A[m * lda + l] when AK (reduction dimension
/// contiguous) and A[l * lda + m] otherwise; B(l, n) is B[n * ldb + l] when BK
/// and B[l * ldb + n] otherwise. M = *dynRows when DYN == 1 (else M is the
/// argument), and the reduction length L = *dynRows when DYN == 2. DYN == 3
/// is the split reduction (splitReduction): the reduction length is *dynRows,
/// the L argument the chunk length, and CTA z of the grid's z dimension
/// writes its chunk's partial product. BF: the operands are rounded to bf16
/// as they enter shared memory (a bf16 model's products). TA, TB, TC: the
/// element types of A, B and C (gemmTypesOk).
template <typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, TM = T::TM, TN = T::TN;
  constexpr int PAD = T::PAD, LA = T::LA, LB = T::LB;
  int64_t m0, n0;
  if (!gemmCta<AK, BKc, DYN, BM, BN>(A, lda, B, ldb, C, ldc, M, Ncols, L,
                                     dynRows, m0, n0))
    return;

  __shared__ __align__(16) float As[2][BK][BM + PAD];
  __shared__ __align__(16) float Bs[2][BK][BN + PAD];

  const int tid = threadIdx.x;
  const int tx = tid % T::TX, ty = tid / T::TX;
  const int mValid = int(minI64(BM, M - m0));
  const int nValid = int(minI64(BN, Ncols - n0));

  // This thread's load slots: tile coordinates (row r in the M or N
  // dimension, column c in the reduction) and the 32-bit offset of each
  // element from the tile's first element.
  float ra[LA], rb[LB];
  auto slotA = [&](int i, int &r, int &c) {
    tileSlot<AK, BM, BK>(tid + i * kThreads, r, c);
  };
  auto slotB = [&](int i, int &r, int &c) {
    tileSlot<BKc, BN, BK>(tid + i * kThreads, r, c);
  };
  // In-tile offsets fit in 32 bits (the wrappers' widths are < 2^24).
  const int ilda = int(lda), ildb = int(ldb);
  const TA *Abase = A + (AK ? m0 * lda : m0);
  const TB *Bbase = B + (BKc ? n0 * ldb : n0);
  // Loads tile k0 of A and B into registers (zero outside the matrices).
  auto loadTile = [&](int64_t k0) {
    const int kValid = int(minI64(BK, L - k0));
    const TA *At = Abase + (AK ? k0 : k0 * lda);
    const TB *Bt = Bbase + (BKc ? k0 : k0 * ldb);
#pragma unroll
    for (int i = 0; i < LA; ++i) {
      int r, c;
      slotA(i, r, c);
      const int off = AK ? r * ilda + c : c * ilda + r;
      ra[i] = (r < mValid && c < kValid) ? float(At[off]) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < LB; ++i) {
      int r, c;
      slotB(i, r, c);
      const int off = BKc ? r * ildb + c : c * ildb + r;
      rb[i] = (r < nValid && c < kValid) ? float(Bt[off]) : 0.0f;
    }
  };
  auto storeTile = [&](int buf) {
#pragma unroll
    for (int i = 0; i < LA; ++i) {
      int r, c;
      slotA(i, r, c);
      As[buf][c][r] = BF ? bf16Round(ra[i]) : ra[i];
    }
#pragma unroll
    for (int i = 0; i < LB; ++i) {
      int r, c;
      slotB(i, r, c);
      Bs[buf][c][r] = BF ? bf16Round(rb[i]) : rb[i];
    }
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
      acc[i][j] = 0.0f;

  constexpr int GM = TM / 4, GN = TN / 4;          // groups of 4
  constexpr int SM = BM / GM, SN = BN / GN;        // group strides
  const int64_t ntiles = (L + BK - 1) / BK;
  if (ntiles > 0) {
    loadTile(0);
    storeTile(0);
    __syncthreads();
  }
  for (int64_t t = 0; t < ntiles; ++t) {
    const int buf = int(t & 1);
    if (t + 1 < ntiles)
      loadTile((t + 1) * BK); // global loads in flight during the math
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        const float4 v =
            *reinterpret_cast<const float4 *>(&As[buf][kk][g * SM + ty * 4]);
        a[g * 4 + 0] = v.x;
        a[g * 4 + 1] = v.y;
        a[g * 4 + 2] = v.z;
        a[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < GN; ++g) {
        const float4 v =
            *reinterpret_cast<const float4 *>(&Bs[buf][kk][g * SN + tx * 4]);
        b[g * 4 + 0] = v.x;
        b[g * 4 + 1] = v.y;
        b[g * 4 + 2] = v.z;
        b[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (t + 1 < ntiles) {
      // The other buffer was last read in iteration t - 1, before the
      // barrier that ended it, so it can be filled now.
      storeTile(buf ^ 1);
      __syncthreads();
    }
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = (i / 4) * SM + ty * 4 + i % 4;
    if (r >= mValid)
      continue;
    const int64_t row = (m0 + r) * ldc;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int c = (j / 4) * SN + tx * 4 + j % 4;
      if (c >= nValid)
        continue;
      const int64_t idx = row + n0 + c;
      C[idx] = TC(gemmEpilogue<EPI>(acc[i][j], epi, idx, n0 + c));
    }
  }
}

//===----------------------------------------------------------------------===//
// Tensor cores: mma.m16n8k8 on tf32 operands, f32 accuracy by 3xTF32
//===----------------------------------------------------------------------===//

/// cvt.rna.tf32.f32: x rounded to tf32 (10 mantissa bits, to nearest, ties
/// away from zero), returned as its f32 bit pattern (low 13 bits zero).
__device__ __forceinline__ uint32_t tf32_rna(float x) {
#if defined(__CUDACC__)
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#else
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fffffffu; // NaN stays NaN (canonical)
  if ((u & 0x7f800000u) != 0x7f800000u)
    u += 0x1000u; // half an ulp of tf32 on the magnitude: ties go away from 0
  return u & 0xffffe000u; // (a carry out of the largest binade gives inf)
#endif
}

/// The 3xTF32 split: x = hi + lo + O(2^-22 |x|), hi = tf32(x), lo = tf32(x -
/// hi) (x - hi is exact in f32).
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi,
                                           uint32_t &lo) {
  hi = tf32_rna(x);
  lo = tf32_rna(x - __uint_as_float(hi));
}

#if !defined(__CUDACC__)
/// Emulation of the warp-wide mma: each lane posts its fragment registers
/// here and reads the others' after a __syncwarp (blocks run one at a time
/// on one OS thread, so one buffer per warp index serves every block). Two
/// slots, alternated per exchange, so that one __syncwarp per exchange
/// suffices: a lane overwrites slot p only two exchanges later, after every
/// lane has passed the barrier of the exchange in between and so has
/// finished reading slot p.
struct MmaExchange {
  static constexpr int Words = 64; ///< registers a lane may post at once
  uint32_t w[2][kWarp][Words];
  uint8_t parity[kWarp];
};
inline MmaExchange &mmaExchange(int warp) {
  static thread_local MmaExchange x[1024 / kWarp];
  return x[warp];
}

/// Posts `n` registers of this lane; returns the warp's slot to read after
/// the __syncwarp that the caller does next.
inline const uint32_t (*mmaPost(const uint32_t *regs, int n))[MmaExchange::Words] {
  const int tid = int(threadIdx.x + blockDim.x * (threadIdx.y +
                                                  blockDim.y * threadIdx.z));
  const int lane = tid % kWarp;
  MmaExchange &x = mmaExchange(tid / kWarp);
  const int p = x.parity[lane];
  x.parity[lane] = uint8_t(p ^ 1);
  for (int i = 0; i < n; ++i)
    x.w[p][lane][i] = regs[i];
  return x.w[p];
}

inline int mmaLane() {
  return int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y *
                                                       threadIdx.z)) %
         kWarp;
}

/// Rows g and g + 8 of the A whose fragment of lane l is registers ao..ao+3
/// of slot[l], as the tf32 values the tensor core reads (the low 13 bits
/// ignored): A[row][k] is register (row >= 8) + 2 (k >= 4) of lane
/// (row % 8) * 4 + k % 4.
inline void mmaEmuRowsA(float rows[2][8],
                        const uint32_t (*slot)[MmaExchange::Words], int ao) {
  const int g = mmaLane() >> 2;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 8; ++k)
      rows[h][k] =
          __uint_as_float(slot[g * 4 + k % 4][ao + h + 2 * (k / 4)] & 0xffffe000u);
}

/// Columns 2t and 2t + 1 of the B whose fragment of lane l is registers bo,
/// bo+1 of slot[l]: B[k][col] is register (k >= 4) of lane col * 4 + k % 4.
inline void mmaEmuColsB(float cols[2][8],
                        const uint32_t (*slot)[MmaExchange::Words], int bo) {
  const int t = mmaLane() & 3;
  for (int e = 0; e < 2; ++e)
    for (int k = 0; k < 8; ++k)
      cols[e][k] =
          __uint_as_float(slot[(2 * t + e) * 4 + k % 4][bo + k / 4] & 0xffffe000u);
}

/// This lane's d = A B + c: the eight exact products added to c in k order.
inline void mmaEmuDot(float d[4], const float rows[2][8],
                      const float cols[2][8], const float c[4]) {
  float out[4];
  for (int i = 0; i < 4; ++i) {
    float s = c[i];
    for (int k = 0; k < 8; ++k)
      s = fmaf(rows[i >> 1][k], cols[i & 1][k], s);
    out[i] = s;
  }
  for (int i = 0; i < 4; ++i)
    d[i] = out[i];
}
#endif

/// d = A B + c with A 16x8 (row), B 8x8 (col), tf32 operands and f32
/// accumulators, for the whole warp (every lane must call it). Fragments as
/// the PTX ISA's "Matrix Fragments for mma.m16n8k8" (.tf32), with g =
/// lane >> 2 and t = lane % 4:
///   a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4];
///   b0 = B[t][g], b1 = B[t+4][g];
///   c0,c1 = C[g][2t], C[g][2t+1]; c2,c3 = C[g+8][2t], C[g+8][2t+1].
/// d may be c. The emulation reads only the tf32 bits of the operands (the
/// hardware ignores the low 13) and adds the eight exact products to c in k
/// order with f32 rounding; the hardware's internal order and rounding of
/// that sum are not specified by PTX, so results may differ in the last bits.
__device__ __forceinline__ void mma_tf32_m16n8k8(float d[4],
                                                 const uint32_t a[4],
                                                 const uint32_t b[2],
                                                 const float c[4]) {
#if defined(__CUDACC__)
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%10, %11, %12, %13};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
  const uint32_t regs[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const auto slot = mmaPost(regs, 6);
  __syncwarp();
  float ra[2][8], cb[2][8];
  mmaEmuRowsA(ra, slot, 0);
  mmaEmuColsB(cb, slot, 4);
  mmaEmuDot(d, ra, cb, c);
#endif
}

/// One k8 step of a warp's MI x NI tiles of 16x8 in 3xTF32. fragA(i, a)
/// gives A fragment i (4 f32 registers), fragB(j, b) B fragment j (2); each
/// is split into tf32 hi + lo, and for each (i, j) t = a_lo b_hi + a_hi b_lo
/// + a_hi b_hi (three mma_tf32_m16n8k8 from zero, small terms first), then
/// acc += t. Summing the step apart from acc puts one f32 rounding per k8
/// step on the large accumulator instead of 24 (blocked summation: at
/// K = 1000 the error is below the SIMT kernel's). On the GPU the B
/// fragments are split first and A one tile at a time (fewer live
/// registers; with MI = 1, A first and each B fragment at its mmas). The
/// emulation exchanges all the fragments at once (one
/// __syncwarp instead of 3 MI NI) and computes the same mmas in the same
/// order with the same lane arithmetic (mmaEmuRowsA, mmaEmuColsB, mmaEmuDot).
/// SplitA = false (SplitB = false) says every A (B) value is a tf32 value
/// already (a bf16 one, say): its lo part is zero, and the mma of that lo
/// part is skipped, which leaves every sum as it was (its products are
/// zeros); both false: one mma instead of three.
template <int MI, int NI, bool SplitA = true, bool SplitB = true,
          typename FA, typename FB>
__device__ __forceinline__ void mma3xTf32(float (&acc)[MI][NI][4], FA fragA,
                                          FB fragB) {
#if defined(__CUDACC__)
  if constexpr (MI == 1) {
    // One A tile (the attention kernel): A split once, each B fragment
    // split just before its mmas (4 live B registers instead of 4 NI).
    float a[4];
    fragA(0, a);
    uint32_t ahi[4], alo[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      tf32_split(a[e], ahi[e], alo[e]);
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      float b[2];
      fragB(j, b);
      uint32_t bhi[2], blo[2];
      tf32_split(b[0], bhi[0], blo[0]);
      tf32_split(b[1], bhi[1], blo[1]);
      float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if constexpr (SplitA)
        mma_tf32_m16n8k8(t, alo, bhi, t);
      if constexpr (SplitB)
        mma_tf32_m16n8k8(t, ahi, blo, t);
      mma_tf32_m16n8k8(t, ahi, bhi, t);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[0][j][e] += t[e];
    }
  } else {
    uint32_t bhi[NI][2], blo[NI][2];
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      float b[2];
      fragB(j, b);
      tf32_split(b[0], bhi[j][0], blo[j][0]);
      tf32_split(b[1], bhi[j][1], blo[j][1]);
    }
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      float a[4];
      fragA(i, a);
      uint32_t ahi[4], alo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        tf32_split(a[e], ahi[e], alo[e]);
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (SplitA)
          mma_tf32_m16n8k8(t, alo, bhi[j], t);
        if constexpr (SplitB)
          mma_tf32_m16n8k8(t, ahi, blo[j], t);
        mma_tf32_m16n8k8(t, ahi, bhi[j], t);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[i][j][e] += t[e];
      }
    }
  }
#else
  // Posted: a_hi of tile i at 4i, a_lo at 4 MI + 4i, b_hi of tile j at
  // 8 MI + 2j, b_lo at 8 MI + 2 NI + 2j.
  constexpr int AL = 4 * MI, BH = 8 * MI, BL = 8 * MI + 2 * NI;
  static_assert(BL + 2 * NI <= MmaExchange::Words, "too many fragments");
  uint32_t regs[BL + 2 * NI];
  for (int i = 0; i < MI; ++i) {
    float a[4];
    fragA(i, a);
    for (int e = 0; e < 4; ++e)
      tf32_split(a[e], regs[4 * i + e], regs[AL + 4 * i + e]);
  }
  for (int j = 0; j < NI; ++j) {
    float b[2];
    fragB(j, b);
    for (int e = 0; e < 2; ++e)
      tf32_split(b[e], regs[BH + 2 * j + e], regs[BL + 2 * j + e]);
  }
  const auto slot = mmaPost(regs, BL + 2 * NI);
  __syncwarp();
  float rhi[MI][2][8], rlo[MI][2][8], chi[NI][2][8], clo[NI][2][8];
  for (int i = 0; i < MI; ++i) {
    mmaEmuRowsA(rhi[i], slot, 4 * i);
    mmaEmuRowsA(rlo[i], slot, AL + 4 * i);
  }
  for (int j = 0; j < NI; ++j) {
    mmaEmuColsB(chi[j], slot, BH + 2 * j);
    mmaEmuColsB(clo[j], slot, BL + 2 * j);
  }
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j) {
      float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (SplitA)
        mmaEmuDot(t, rlo[i], chi[j], t);
      if (SplitB)
        mmaEmuDot(t, rhi[i], clo[j], t);
      mmaEmuDot(t, rhi[i], chi[j], t);
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] += t[e];
    }
#endif
}

//===----------------------------------------------------------------------===//
// Tensor cores on bf16 operands: mma.m16n8k8, f32 accumulators
//===----------------------------------------------------------------------===//

/// Two f32 values rounded to bf16 (to nearest, ties to even) and packed as
/// the .bf16x2 register of an mma fragment: lo in the low half.
__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
#if defined(__CUDACC__)
  __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&p);
#else
  return (__float_as_uint(bf16Round(lo)) >> 16) |
         (__float_as_uint(bf16Round(hi)) & 0xffff0000u);
#endif
}

#if !defined(__CUDACC__)
/// The f32 value of the bf16 in half h (0: low) of a .bf16x2 register.
inline float bf16Half(uint32_t reg, int h) {
  return __uint_as_float(h ? reg & 0xffff0000u : reg << 16);
}
#endif

/// d = A B + c with A 16x8 (row), B 8x8 (col), bf16 operands and f32
/// accumulators, for the whole warp. Fragments as the PTX ISA's "Matrix
/// Fragments for mma.m16n8k8" (.bf16), with g = lane >> 2, t = lane % 4,
/// the lower index of each pair in the low half:
///   a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1]; b0 = B[2t, 2t+1][g];
///   c0,c1 = C[g][2t], C[g][2t+1]; c2,c3 = C[g+8][2t], C[g+8][2t+1].
/// The products of bf16 values are exact in f32; the emulation adds them to
/// c in k order (the hardware's order of that sum is not specified).
__device__ __forceinline__ void mma_bf16_m16n8k8(float d[4],
                                                 const uint32_t a[2],
                                                 uint32_t b, const float c[4]) {
#if defined(__CUDACC__)
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                 "f"(c[3]));
#else
  const uint32_t regs[3] = {a[0], a[1], b};
  const auto slot = mmaPost(regs, 3);
  __syncwarp();
  const int g = mmaLane() >> 2, t = mmaLane() & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float s = c[i];
    for (int k = 0; k < 8; ++k) {
      // A[row][k]: lane (row % 8) * 4 + k / 2, register row >= 8;
      // B[k][col]: lane col * 4 + k / 2; half k % 2 of each.
      const float av = bf16Half(slot[(row % 8) * 4 + k / 2][row >= 8], k % 2);
      const float bv = bf16Half(slot[col * 4 + k / 2][2], k % 2);
      s = fmaf(av, bv, s);
    }
    out[i] = s;
  }
  for (int i = 0; i < 4; ++i)
    d[i] = out[i];
#endif
}

/// A shared-memory address as PTX takes it (the emulation: the pointer's low
/// 32 bits, which the emulated wgmma matches against its anchor).
__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
#if defined(__CUDACC__)
  return uint32_t(__cvta_generic_to_shared(p));
#else
  return uint32_t(reinterpret_cast<uintptr_t>(p));
#endif
}

/// Asynchronous 4-byte copy global -> shared (cp.async, sm_80+), or zero
/// into *dst when !in (src-size 0: src is not read). The emulation copies at
/// once.
__device__ __forceinline__ void copyAsync4(float *dst, const float *src,
                                           bool in) {
#if defined(__CUDACC__)
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   sharedAddress(dst)),
               "l"(src), "r"(in ? 4 : 0));
#else
  *dst = in ? *src : 0.0f;
#endif
}

/// Asynchronous 16-byte copy global -> shared (cp.async.cg, sm_80+; both
/// addresses 16-byte aligned), or 16 zero bytes into dst when !in (src is
/// not read). The emulation copies at once.
__device__ __forceinline__ void copyAsync16(float *dst, const float *src,
                                            bool in) {
#if defined(__CUDACC__)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   sharedAddress(dst)),
               "l"(src), "r"(in ? 16 : 0));
#else
  for (int i = 0; i < 4; ++i)
    dst[i] = in ? src[i] : 0.0f;
#endif
}

__device__ __forceinline__ void copyAsyncCommit() {
#if defined(__CUDACC__)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until at most N committed copy groups of this thread are pending.
template <int N> __device__ __forceinline__ void copyAsyncWait() {
#if defined(__CUDACC__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/// acc[NT] (16 x 8 NT, rows of A16 from `a`, columns = rows of `b`) += A B^T
/// over the head dim: per k8 step one mma3xTf32 with A = rows
/// a[0..15][kk..kk+7] and B = b[8j + g][kk + t] (both [row][HD + 4] in
/// shared), UNROLL k8 steps unrolled at a time. SplitA / SplitB false: a / b
/// hold tf32 values (bf16 ones), whose zero lo parts mma3xTf32 skips. Q K^T
/// of the attention kernels, forward and backward.
template <int HD, int NT, bool SplitA, bool SplitB, int UNROLL>
__device__ __forceinline__ void addRowProducts(float (&acc)[1][NT][4],
                                               const float *a,
                                               const float *b) {
  constexpr int LDS = HD + 4;
  const int lane = threadIdx.x % kWarp, g = lane >> 2, tg = lane & 3;
#pragma unroll UNROLL
  for (int kk = 0; kk < HD; kk += 8) {
    auto fragA = [&](int, float (&f)[4]) {
      const float *r = a + g * LDS + kk + tg;
      f[0] = r[0];
      f[1] = r[8 * LDS];
      f[2] = r[4];
      f[3] = r[8 * LDS + 4];
    };
    auto fragB = [&](int j, float (&f)[2]) {
      const float *r = b + (8 * j + g) * LDS + kk + tg;
      f[0] = r[0];
      f[1] = r[4];
    };
    mma3xTf32<1, NT, SplitA, SplitB>(acc, fragA, fragB);
  }
}

/// Whether every pointer is 16-byte aligned: the attention kernels copy
/// their tiles 16 bytes at a time then (copyHeadRows's `vec`).
template <typename... P>
__device__ __forceinline__ bool aligned16(const P *...p) {
  return ((reinterpret_cast<uintptr_t>(p) | ...) & 15u) == 0;
}

/// Starts the copy of rows r0 .. r0 + valid of one head (HD columns at hoff
/// of a [rows, H * HD] tensor) into dst[ROWS][HD + 4], zero past valid, with
/// cp.async (16 bytes when `vec`: src 16-byte aligned, else 4), by the
/// block's T threads. Does not commit. Shared by the attention kernels,
/// forward and backward.
template <int H, int HD, int ROWS, int T>
__device__ __forceinline__ void copyHeadRows(float *dst, const float *src,
                                             int64_t r0, int64_t hoff,
                                             int valid, bool vec) {
  constexpr int64_t LDG = int64_t(H) * HD;
  constexpr int LDS = HD + 4, C4 = HD / 4;
  for (int e = threadIdx.x; e < ROWS * C4; e += T) {
    const int r = e / C4, d = (e % C4) * 4;
    const bool in = r < valid;
    const float *sp = in ? src + (r0 + r) * LDG + hoff + d : src;
    float *dp = dst + r * LDS + d;
    if (vec) {
      copyAsync16(dp, sp, in);
    } else {
#pragma unroll
      for (int x = 0; x < 4; ++x)
        copyAsync4(dp + x, in ? sp + x : src, in);
    }
  }
}

/// Tensor-core tile shapes: BM x BN outputs per CTA of 8 warps in a WM x WN
/// grid, each warp a (BM / WM) x (BN / WN) tile of MI x NI mma tiles (16x8),
/// BK = 16 reduction steps per shared tile (two k8 steps).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int MINB_>
struct TcTile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_;
  static_assert(BK % 8 == 0, "whole k8 steps");
  static constexpr int MINB = MINB_; // CTAs per SM the registers must allow
  static_assert(WM * WN * kWarp == kThreads, "8 warps");
  static constexpr int WTM = BM / WM, WTN = BN / WN; // a warp's tile
  static constexpr int MI = WTM / 16, NI = WTN / 8;
  static_assert(MI * 16 == WTM && NI * 8 == WTN, "warp tiles of whole mmas");
  static_assert(BM * BK % kThreads == 0 && BN * BK % kThreads == 0,
                "tile loads split evenly over the threads");
  static constexpr int LA = BM * BK / kThreads, LB = BN * BK / kThreads;
  static constexpr int WarpCols = WTN; // a warp's accumulator columns
};
using TcSmall = TcTile<64, 64, 16, 2, 4, 2>;
using TcLarge = TcTile<128, 128, 8, 2, 4, 1>;

/// Shared layout of an R x BK operand tile (R rows of M or N, BK reduction
/// columns). With the reduction contiguous in global memory (KC) it is
/// [r][k] with stride BK + 4, else [k][r] with stride R + 8; either way the
/// stride puts the 8 groups x 4 lanes of an mma fragment read on 32
/// different banks, and the [k][r] tile's stores (consecutive r) as well.
template <int R, int BK, bool KC> struct TcSmem {
  static constexpr int LD = KC ? BK + 4 : R + 8;
  static_assert(KC ? (LD % 8 == 4) : (LD % 32 == 8), "conflict-free stride");
  static constexpr int Size = KC ? R * LD : BK * LD;
  __device__ static constexpr int at(int r, int k) {
    return KC ? r * LD + k : k * LD + r;
  }
};

/// Sets MI x NI m16n8 fragments (acc[i][j][4], as storeAccumulators reads
/// them) to zero.
template <int MI, int NI>
__device__ __forceinline__ void zeroFragments(float (&acc)[MI][NI][4]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] = 0.0f;
}

/// Writes a warp's MI x NI m16n8 accumulator fragments through the epilogue,
/// inside mValid x nValid of the CTA's tile at (m0, n0): the layout of
/// mma.m16n8k8 and of each warp's 16 rows of a wgmma, acc[i][j][2h + e]
/// being row r0 + 16 i + g + 8 h, column c0 + 8 j + 2 t + e (g = lane >> 2,
/// t = lane % 4).
///
/// RoPE (isEpiRope) pairs column x of a head with column x + HD / 2, which
/// is fragment j + HD / 16 of the same thread when the warp's NI * 8
/// columns are whole heads, starting at a head (epilogueFits): the rotation
/// happens in registers.
template <int EPI, int MI, int NI, typename TC>
__device__ __forceinline__ void
storeAccumulators(const float (&acc)[MI][NI][4], TC *C, int64_t ldc,
                  const EpiArgs epi, int64_t m0, int64_t n0, int r0, int c0,
                  int mValid, int nValid) {
  const int g = (threadIdx.x % kWarp) >> 2, tg = threadIdx.x & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + i * 16 + g + 8 * h;
      if (r >= mValid)
        continue;
      const int64_t row = (m0 + r) * ldc;
      if constexpr (isEpiRope(EPI)) {
        constexpr int HD = epiRopeHeadDim(EPI), Half = HD / 2;
        static_assert(NI * 8 % HD == 0, "a warp's columns are whole heads");
        const int32_t p = epi.pos[m0 + r];
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          if (j * 8 % HD >= Half)
            continue; // the second half of a head: rotated with the first
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            // Heads are whole inside nValid (the width is H * HD).
            const int c = c0 + j * 8 + 2 * tg + e;
            if (c >= nValid)
              continue;
            float x0 = acc[i][j][2 * h + e], x1 = acc[i][j + Half / 8][2 * h + e];
            ropeRotatePair(x0, x1, ropeAngleAt<HD>(epi, p, j * 8 % HD + 2 * tg + e));
            if (epiRopeRounds(EPI)) {
              x0 = bf16Round(x0);
              x1 = bf16Round(x1);
            }
            C[row + n0 + c] = TC(x0);
            C[row + n0 + c + Half] = TC(x1);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = c0 + j * 8 + 2 * tg + e;
            if (c >= nValid)
              continue;
            const int64_t idx = row + n0 + c;
            C[idx] =
                TC(gemmEpilogue<EPI>(acc[i][j][2 * h + e], epi, idx, n0 + c));
          }
      }
    }
}

/// Starts the cp.async copy of an operand tile into `dst` (TcSmem<ROWS, BK,
/// KC> layout): element (r, c) (row r of ROWS, reduction step c of BK) from
/// src[r * ld + c] when KC, else src[c * ld + r]; zero outside rValid x
/// kValid (`any`, a valid address, stands in for what is not read). Each
/// thread copies its L elements, consecutive threads along the contiguous
/// dimension: with `vec` (runs 16-byte aligned) as runs of 4 in one 16-byte
/// copy (4 at a time where a run crosses the matrix's edge), else one by one.
template <int ROWS, int BK, bool KC, int L>
__device__ __forceinline__ void copyTcTile(float *dst, const float *src, int ld,
                                           int rValid, int kValid, bool vec,
                                           const float *any) {
  using S = TcSmem<ROWS, BK, KC>;
  const int tid = threadIdx.x;
  auto copyOne = [&](int r, int c) {
    const bool in = r < rValid && c < kValid;
    copyAsync4(dst + S::at(r, c), in ? src + (KC ? r * ld + c : c * ld + r) : any,
               in);
  };
  if (vec) {
    static_assert(L % 4 == 0, "whole runs of 4 per thread");
#pragma unroll
    for (int j = 0; j < L / 4; ++j) {
      const int run = tid + j * kThreads;
      const int r = KC ? run / (BK / 4) : run % (ROWS / 4) * 4;
      const int c = KC ? run % (BK / 4) * 4 : run / (ROWS / 4);
      const int rEnd = KC ? r + 1 : r + 4, cEnd = KC ? c + 4 : c + 1;
      const bool full = rEnd <= rValid && cEnd <= kValid;
      if (full || r >= rValid || c >= kValid) {
        copyAsync16(dst + S::at(r, c),
                    full ? src + (KC ? r * ld + c : c * ld + r) : any, full);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          copyOne(KC ? r : r + e, KC ? c + e : c);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < L; ++i) {
    int r, c;
    tileSlot<KC, ROWS, BK>(tid + i * kThreads, r, c);
    copyOne(r, c);
  }
}

/// Stores an operand tile held as bf16 in global memory into `dst`
/// (TcSmem<ROWS, BK, KC> layout) as f32, with plain loads: element (r, c)
/// from src[r * ld + c] when KC, else src[c * ld + r]; zero outside
/// rValid x kValid. The caller's barrier publishes it, as for copyTcTile.
template <int ROWS, int BK, bool KC, int L>
__device__ __forceinline__ void storeTcTileWidened(float *dst, const bf16 *src,
                                                   int ld, int rValid,
                                                   int kValid) {
  using S = TcSmem<ROWS, BK, KC>;
#pragma unroll
  for (int i = 0; i < L; ++i) {
    int r, c;
    tileSlot<KC, ROWS, BK>(int(threadIdx.x) + i * kThreads, r, c);
    dst[S::at(r, c)] = r < rValid && c < kValid
                           ? float(src[KC ? r * ld + c : c * ld + r])
                           : 0.0f;
  }
}

/// The tensor-core twin of gemmKernel (same arguments, layouts, DYN, split
/// and epilogues): A and B tiles zero-filled past the matrices, copied with
/// cp.async into double-buffered shared tiles (the next tile's copy in
/// flight during the math); each k8 step splits the
/// fragments into tf32 hi/lo and adds lo*hi + hi*lo + hi*hi (small terms
/// first, three mma.m16n8k8) to the f32 accumulators (mma3xTf32). BF: one
/// bf16 mma.m16n8k8 per k8 step instead, on the operands rounded to bf16 as
/// the fragments are formed (a bf16 model's products). A bf16 A or B (TA,
/// TB) is read into registers and stored widened (not copied by cp.async:
/// its shared tile stays f32).
template <typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmTcKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, MI = T::MI, NI = T::NI;
  constexpr int LA = T::LA, LB = T::LB;
  using SA = TcSmem<BM, BK, AK>;
  using SB = TcSmem<BN, BK, BKc>;
  int64_t m0, n0;
  // Whole CTAs only: every warp below runs the mma loop in full.
  if (!gemmCta<AK, BKc, DYN, BM, BN>(A, lda, B, ldb, C, ldc, M, Ncols, L,
                                     dynRows, m0, n0))
    return;

  __shared__ __align__(16) float As[2][SA::Size];
  __shared__ __align__(16) float Bs[2][SB::Size];

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane >> 2, tg = lane & 3;
  const int wm0 = (warp / T::WN) * T::WTM, wn0 = (warp % T::WN) * T::WTN;
  const int mValid = int(minI64(BM, M - m0));
  const int nValid = int(minI64(BN, Ncols - n0));

  const TA *Abase = A + (AK ? m0 * lda : m0);
  const TB *Bbase = B + (BKc ? n0 * ldb : n0);
  // 16-byte copies where the operand's runs along its contiguous dimension
  // start 16-byte aligned (m0, n0 and the k tiles are multiples of 4).
  const bool vecA = lda % 4 == 0 && aligned16(Abase);
  const bool vecB = ldb % 4 == 0 && aligned16(Bbase);
  // Starts the copy of tile k0 into buffer buf (zero outside the matrices).
  auto copyTile = [&](int64_t k0, int buf) {
    const int kValid = int(minI64(BK, L - k0));
    if constexpr (std::is_same<TA, float>::value)
      copyTcTile<BM, BK, AK, LA>(As[buf], Abase + (AK ? k0 : k0 * lda),
                                 int(lda), mValid, kValid, vecA, A);
    else
      storeTcTileWidened<BM, BK, AK, LA>(As[buf], Abase + (AK ? k0 : k0 * lda),
                                         int(lda), mValid, kValid);
    if constexpr (std::is_same<TB, float>::value)
      copyTcTile<BN, BK, BKc, LB>(Bs[buf], Bbase + (BKc ? k0 : k0 * ldb),
                                  int(ldb), nValid, kValid, vecB, B);
    else
      storeTcTileWidened<BN, BK, BKc, LB>(Bs[buf],
                                          Bbase + (BKc ? k0 : k0 * ldb),
                                          int(ldb), nValid, kValid);
    copyAsyncCommit();
  };

  float acc[MI][NI][4];
  zeroFragments(acc);

  const int64_t ntiles = (L + BK - 1) / BK;
  if (ntiles > 0)
    copyTile(0, 0);
  for (int64_t t = 0; t < ntiles; ++t) {
    const int buf = int(t & 1);
    // Tile t + 1 goes into the other buffer (last read in iteration t - 1,
    // before the barrier that ended it) while tile t is used.
    if (t + 1 < ntiles) {
      copyTile((t + 1) * BK, buf ^ 1);
      copyAsyncWait<1>();
    } else {
      copyAsyncWait<0>();
    }
    __syncthreads(); // tile t is in shared memory for every thread
    const float *as = As[buf], *bs = Bs[buf];
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      if constexpr (BF) {
        // Columns 2t, 2t + 1 of the k8 step in each register.
        uint32_t fb[NI];
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const int n = wn0 + j * 8 + g;
          fb[j] = packBf16x2(bs[SB::at(n, kk + 2 * tg)],
                             bs[SB::at(n, kk + 2 * tg + 1)]);
        }
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const int r = wm0 + i * 16 + g;
          const uint32_t fa[2] = {
              packBf16x2(as[SA::at(r, kk + 2 * tg)],
                         as[SA::at(r, kk + 2 * tg + 1)]),
              packBf16x2(as[SA::at(r + 8, kk + 2 * tg)],
                         as[SA::at(r + 8, kk + 2 * tg + 1)])};
#pragma unroll
          for (int j = 0; j < NI; ++j)
            mma_bf16_m16n8k8(acc[i][j], fa, fb[j], acc[i][j]);
        }
        continue;
      }
      auto fragA = [&](int i, float (&f)[4]) {
        const int r = wm0 + i * 16 + g;
        f[0] = as[SA::at(r, kk + tg)];
        f[1] = as[SA::at(r + 8, kk + tg)];
        f[2] = as[SA::at(r, kk + tg + 4)];
        f[3] = as[SA::at(r + 8, kk + tg + 4)];
      };
      auto fragB = [&](int j, float (&f)[2]) {
        const int n = wn0 + j * 8 + g;
        f[0] = bs[SB::at(n, kk + tg)];
        f[1] = bs[SB::at(n, kk + tg + 4)];
      };
      mma3xTf32<MI, NI>(acc, fragA, fragB);
    }
    __syncthreads(); // buffer buf is read by all before it is refilled
  }
  storeAccumulators<EPI>(acc, C, ldc, epi, m0, n0, wm0, wn0, mValid, nValid);
}

//===----------------------------------------------------------------------===//
// Warpgroup tensor cores on bf16 operands (sm_90a): wgmma.mma_async
//===----------------------------------------------------------------------===//

/// The wgmma matrix descriptor of a K-major bf16 operand in shared memory
/// without swizzle (PTX ISA, "Matrix Descriptor Format"): core matrices of 8
/// rows x 8 bf16 (16 bytes a row, 128 contiguous bytes), `lbo` bytes between
/// core matrices adjacent along K and `sbo` between those adjacent along M
/// (or N). Start address, LBO and SBO in 16-byte units at bits 0, 16 and 32;
/// base offset (bits 49-51) zero; `layout` (bits 62-63) 0 for no swizzle
/// (wgmmaDescriptorSw128 sets the 128-byte swizzle).
__device__ __forceinline__ uint64_t wgmmaDescriptor(const void *operand,
                                                    uint32_t lbo, uint32_t sbo,
                                                    uint64_t layout = 0) {
  return uint64_t((sharedAddress(operand) & 0x3ffffu) >> 4) |
         uint64_t((lbo >> 4) & 0x3fffu) << 16 |
         uint64_t((sbo >> 4) & 0x3fffu) << 32 | layout << 62;
}

#if !defined(__CUDACC__)
/// An operand of the emulated wgmma, read through its descriptor the way the
/// hardware reads it: the address comes from the descriptor's 18 bits,
/// resolved against `anchor` (a shared address at or below the operand,
/// within 256 KB), so that a wrong start, LBO or SBO reads wrong values here
/// as it would on a GPU. Three layouts are modelled: K-major without swizzle
/// (core matrices LBO apart along K, SBO apart along the rows), K-major with
/// the 128-byte swizzle (a 128-byte row per operand row, 8-row groups SBO
/// apart) and, for a transposed operand (`mnMajor`: wgmma's imm-trans 1),
/// MN-major with the 128-byte swizzle (a 128-byte row of 64 rows' elements
/// per reduction step, 8-step groups SBO apart, 64-row groups LBO apart:
/// the PTX ISA's canonical layout ((8 x 16 B, n), (8, k)) : ((16 B, LBO),
/// (128 B, SBO))); with the swizzle the 16-byte chunk index is XORed with
/// address bits 7..9, as TMA stores it.
struct WgmmaOperandView {
  const unsigned char *start;
  uint32_t lbo, sbo;
  bool swizzle128, mnMajor;
  WgmmaOperandView(uint64_t desc, const void *anchor, bool transposed)
      : mnMajor(transposed) {
    const unsigned layout = unsigned(desc >> 62);
    if ((layout != 0 && layout != 1) || ((desc >> 49) & 7u) != 0) {
      std::fprintf(stderr, "emulated wgmma: only unswizzled and 128-byte "
                           "swizzled descriptors with base offset 0 are "
                           "modelled\n");
      std::abort();
    }
    swizzle128 = layout == 1;
    if (mnMajor && !swizzle128) {
      std::fprintf(stderr, "emulated wgmma: a transposed operand is modelled "
                           "with the 128-byte swizzle only\n");
      std::abort();
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(anchor);
    uintptr_t s = (a & ~uintptr_t(0x3ffff)) | uintptr_t(desc & 0x3fffu) << 4;
    if (s < a)
      s += 0x40000;
    start = reinterpret_cast<const unsigned char *>(s);
    lbo = uint32_t((desc >> 16) & 0x3fffu) << 4;
    sbo = uint32_t((desc >> 32) & 0x3fffu) << 4;
  }
  /// Element (row, k) of the operand (row along M or N), as f32.
  float at(int row, int k) const {
    uint16_t h;
    uintptr_t at = reinterpret_cast<uintptr_t>(start);
    if (mnMajor) {
      at = modc_emu::swizzle128(at + (row / 64) * lbo + (k / 8) * sbo +
                                (k % 8) * 128 + (row % 64) * 2);
    } else if (swizzle128) {
      at += (row / 8) * sbo;
      at = modc_emu::swizzle128(at + (row % 8) * 128 + k * 2);
    } else {
      at += (row / 8) * sbo + (k / 8) * lbo + (row % 8) * 16 + (k % 8) * 2;
    }
    std::memcpy(&h, reinterpret_cast<const unsigned char *>(at), 2);
    return __uint_as_float(uint32_t(h) << 16);
  }
};
#endif

#define MODC_WG_ACC8(j)                                                        \
  "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3]),                  \
      "+f"(d[j + 1][0]), "+f"(d[j + 1][1]), "+f"(d[j + 1][2]), "+f"(d[j + 1][3])

/// d (64 x N, f32) += A (64 x 16) B (16 x N): A and B bf16 in shared memory
/// (wgmmaDescriptor: A 64 rows, B N rows; K-major, or MN-major where TRANS_A
/// or TRANS_B, wgmma's imm-trans-a/b: the 128-byte swizzled layout of
/// wgmmaDescriptorMnSw128), issued by the whole
/// warpgroup (128 threads; every one calls it). The accumulator fragment is
/// the PTX ISA's for wgmma.mma_async .m64nNk16 (f32): with w the warp of the
/// warpgroup, g = lane >> 2, t = lane % 4,
///   d[j][2h + e] = D[16w + g + 8h][8j + 2t + e]
/// (each warp's 16 rows an m16n8 fragment per 8 columns, as storeAccumulators
/// writes them).
/// Asynchronous: issue between wgmmaFence and wgmmaCommit, and touch d again
/// only after wgmmaWait. `anchor` (any shared address at or below both
/// operands, within 256 KB) is for the emulation, which computes at once:
/// the products of bf16 values are exact in f32 and added to d in k order
/// (the hardware's order of that sum is not specified).
template <int N, bool TRANS_A = false, bool TRANS_B = false>
__device__ __forceinline__ void wgmmaBf16(float (&d)[N / 8][4], uint64_t descA,
                                          uint64_t descB, const void *anchor) {
  static_assert(N == 64 || N == 128, "wgmma widths of the GEMM tiles");
#if defined(__CUDACC__)
  (void)anchor;
  if constexpr (N == 64)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
        "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : MODC_WG_ACC8(0), MODC_WG_ACC8(2), MODC_WG_ACC8(4), MODC_WG_ACC8(6)
        : "l"(descA), "l"(descB), "n"(1), "n"(int(TRANS_A)),
          "n"(int(TRANS_B)));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
        "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "
        "%29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
        "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : MODC_WG_ACC8(0), MODC_WG_ACC8(2), MODC_WG_ACC8(4), MODC_WG_ACC8(6),
          MODC_WG_ACC8(8), MODC_WG_ACC8(10), MODC_WG_ACC8(12),
          MODC_WG_ACC8(14)
        : "l"(descA), "l"(descB), "n"(1), "n"(int(TRANS_A)),
          "n"(int(TRANS_B)));
#else
  const WgmmaOperandView a(descA, anchor, TRANS_A), b(descB, anchor, TRANS_B);
  const int tid = int(threadIdx.x + blockDim.x * (threadIdx.y +
                                                  blockDim.y * threadIdx.z));
  const int w = (tid % 128) / kWarp, g = (tid % kWarp) >> 2, t = tid % 4;
  for (int j = 0; j < N / 8; ++j)
    for (int x = 0; x < 4; ++x) { // x = 2h + e
      const int row = 16 * w + g + 8 * (x / 2), col = 8 * j + 2 * t + x % 2;
      float s = d[j][x];
      for (int k = 0; k < 16; ++k)
        s = fmaf(a.at(row, k), b.at(col, k), s);
      d[j][x] = s;
    }
#endif
}
#undef MODC_WG_ACC8

/// Keeps the compiler from moving accesses of the accumulators across the
/// wgmma fences (their registers are the asynchronous wgmma's meanwhile).
template <int J>
__device__ __forceinline__ void wgmmaPinAccumulators(float (&d)[J][4]) {
#if defined(__CUDACC__)
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      asm volatile("" : "+f"(d[j][x])::"memory");
#else
  (void)d;
#endif
}

/// Orders this warpgroup's earlier register and shared accesses before the
/// wgmmas that follow (wgmma.fence).
template <int J>
__device__ __forceinline__ void wgmmaFence(float (&d)[J][4]) {
  wgmmaPinAccumulators(d);
#if defined(__CUDACC__)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

/// Closes the group of wgmmas issued since the last commit.
__device__ __forceinline__ void wgmmaCommit() {
#if defined(__CUDACC__)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/// Waits until at most PENDING committed wgmma groups are in flight; d is
/// then the wgmmas' result.
template <int PENDING, int J>
__device__ __forceinline__ void wgmmaWait(float (&d)[J][4]) {
#if defined(__CUDACC__)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
  wgmmaPinAccumulators(d);
}

/// Makes this thread's shared stores visible to the async proxy (the wgmma
/// operand reads): after the stores, before the barrier that publishes them.
__device__ __forceinline__ void fenceProxyAsync() {
#if defined(__CUDACC__)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/// wgmma tile shapes: BM x BN outputs per CTA of two warpgroups, each a 64 x
/// BN slab (one m64nBNk16 wgmma per k16 step), BK = 32 reduction steps per
/// shared tile.
template <int BN_, int MINB_> struct WgTile {
  static constexpr int BM = 128, BN = BN_, BK = 32, MINB = MINB_;
  static_assert(BM / 64 * 128 == kThreads, "a warpgroup per 64 rows");
  static constexpr int WarpCols = BN; // every warp holds whole rows
};
using WgSmall = WgTile<64, 2>;
using WgLarge = WgTile<128, 1>;

/// Shared layout of an R x BK bf16 operand tile for wgmma (K-major, no
/// swizzle): row block r / 8 holds BK / 8 core matrices of 128 bytes, core
/// matrix k / 8 of it holding k % 8 of row r % 8 at byte 16 (r % 8) + 2 (k % 8).
/// So LBO = 128 and SBO = the row block's bytes.
template <int R, int BK> struct WgSmem {
  static_assert(R % 64 == 0 && BK % 16 == 0, "whole wgmma operands");
  static constexpr uint32_t LBO = 128, SBO = BK / 8 * 128;
  static constexpr int Bytes = R * BK * 2;
  /// Per thread: chunks of 8 reduction steps of one row (16 bytes).
  static constexpr int Chunks = R * BK / 8 / kThreads;
  static_assert(Chunks * kThreads * 8 == R * BK, "chunks split evenly");
  /// Byte offset of the chunk of row r, steps 8 kb .. 8 kb + 7.
  __device__ static constexpr int chunkAt(int r, int kb) {
    return (r / 8 * (BK / 8) + kb) * 128 + (r % 8) * 16;
  }
  /// The row and step block of chunk c. With the reduction contiguous in
  /// global memory (KC) the 8 threads of a 16-byte store phase take rows
  /// r..r+7 of one block and a warp reads 8 whole rows of 128 bytes; else
  /// consecutive threads take consecutive rows (coalesced per step).
  template <bool KC> __device__ static void chunkSlot(int c, int &r, int &kb) {
    if (KC) {
      r = c / (8 * (BK / 8)) * 8 + c % 8;
      kb = c / 8 % (BK / 8);
    } else {
      r = c % R;
      kb = c / R;
    }
  }
};

/// This thread's chunks of an R x BK operand tile (element (r, k) at
/// src[r * ld + k] when KC, else src[k * ld + r]; zero outside rValid x
/// kValid), rounded to bf16 and packed in pairs. `vec`: KC rows may be read
/// 16 bytes at a time (src 16-byte aligned, ld a multiple of 16 bytes): a
/// bf16 src's 8 steps as they are, an f32 src's as two float4.
template <int R, int BK, bool KC, typename TS>
__device__ __forceinline__ void
wgLoadChunks(uint32_t (&v)[WgSmem<R, BK>::Chunks][4], const TS *src,
             int64_t ld, int rValid, int kValid, bool vec) {
  using S = WgSmem<R, BK>;
#pragma unroll
  for (int i = 0; i < S::Chunks; ++i) {
    int r, kb;
    S::template chunkSlot<KC>(int(threadIdx.x) + i * kThreads, r, kb);
    const int k = kb * 8;
    float x[8];
    if (KC && vec && r < rValid && k + 8 <= kValid) {
      if constexpr (std::is_same<TS, bf16>::value) {
        const uint4 raw = *reinterpret_cast<const uint4 *>(src + r * ld + k);
        v[i][0] = raw.x, v[i][1] = raw.y, v[i][2] = raw.z, v[i][3] = raw.w;
        continue; // already packed bf16 pairs
      } else {
        const float4 *p = reinterpret_cast<const float4 *>(src + r * ld + k);
        const float4 lo = p[0], hi = p[1];
        x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
        x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = r < rValid && k + e < kValid
                   ? float(src[KC ? r * ld + k + e : (k + e) * ld + r])
                   : 0.0f;
    }
#pragma unroll
    for (int p = 0; p < 4; ++p)
      v[i][p] = packBf16x2(x[2 * p], x[2 * p + 1]);
  }
}

/// Stores the chunks of wgLoadChunks into the tile at `dst` (WgSmem layout);
/// the caller fences them (fenceProxyAsync) for the wgmmas that read them.
template <int R, int BK, bool KC>
__device__ __forceinline__ void
wgStoreChunks(unsigned char *dst, const uint32_t (&v)[WgSmem<R, BK>::Chunks][4]) {
  using S = WgSmem<R, BK>;
#pragma unroll
  for (int i = 0; i < S::Chunks; ++i) {
    int r, kb;
    S::template chunkSlot<KC>(int(threadIdx.x) + i * kThreads, r, kb);
    *reinterpret_cast<uint4 *>(dst + S::chunkAt(r, kb)) =
        make_uint4(v[i][0], v[i][1], v[i][2], v[i][3]);
  }
}

/// The wgmma twin of gemmTcKernel for bf16 products on sm_90a (same
/// arguments, layouts, DYN, split and epilogues): each tile of A and B is
/// read into registers, rounded to bf16 and stored K-major into shared memory
/// (double-buffered: the next tile is read from global memory while the
/// wgmmas of this one run), and each warpgroup adds its 64 x BN slab with one
/// wgmma per k16 step.
template <typename T, bool AK, bool BKc, int DYN, int EPI, typename TA,
          typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmWgKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK;
  using SA = WgSmem<BM, BK>;
  using SB = WgSmem<BN, BK>;
  int64_t m0, n0;
  // Whole CTAs only: every warpgroup issues its wgmmas in full.
  if (!gemmCta<AK, BKc, DYN, BM, BN>(A, lda, B, ldb, C, ldc, M, Ncols, L,
                                     dynRows, m0, n0))
    return;

  __shared__ __align__(128) unsigned char tiles[2][SA::Bytes + SB::Bytes];

  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / kWarp;
  const int mValid = int(minI64(BM, M - m0));
  const int nValid = int(minI64(BN, Ncols - n0));
  const TA *Abase = A + (AK ? m0 * lda : m0);
  const TB *Bbase = B + (BKc ? n0 * ldb : n0);
  const bool vecA =
      AK && lda % (16 / sizeof(TA)) == 0 && aligned16(Abase);
  const bool vecB =
      BKc && ldb % (16 / sizeof(TB)) == 0 && aligned16(Bbase);

  uint32_t ra[SA::Chunks][4], rb[SB::Chunks][4];
  auto read = [&](int64_t k0) {
    const int kValid = int(minI64(BK, L - k0));
    wgLoadChunks<BM, BK, AK>(ra, Abase + (AK ? k0 : k0 * lda), lda, mValid,
                             kValid, vecA);
    wgLoadChunks<BN, BK, BKc>(rb, Bbase + (BKc ? k0 : k0 * ldb), ldb, nValid,
                              kValid, vecB);
  };
  auto write = [&](int buf) {
    wgStoreChunks<BM, BK, AK>(tiles[buf], ra);
    wgStoreChunks<BN, BK, BKc>(tiles[buf] + SA::Bytes, rb);
    fenceProxyAsync();
  };

  // One m16n8 fragment row (storeAccumulators' MI = 1) per warp.
  float acc[1][BN / 8][4];
  zeroFragments(acc);

  const int64_t ntiles = (L + BK - 1) / BK;
  if (ntiles > 0) {
    read(0);
    write(0);
  }
  __syncthreads(); // tile 0 is in shared memory for every warpgroup
  for (int64_t t = 0; t < ntiles; ++t) {
    const int buf = int(t & 1);
    const unsigned char *a = tiles[buf] + wg * 64 * BK * 2; // this slab's rows
    const unsigned char *b = tiles[buf] + SA::Bytes;
    wgmmaFence(acc[0]);
#pragma unroll
    for (int s = 0; s < BK / 16; ++s) // k16 step s: core matrices 2s, 2s + 1
      wgmmaBf16<BN>(acc[0], wgmmaDescriptor(a + 2 * s * SA::LBO, SA::LBO, SA::SBO),
                    wgmmaDescriptor(b + 2 * s * SB::LBO, SB::LBO, SB::SBO),
                    tiles);
    wgmmaCommit();
    // Tile t + 1 goes into the other buffer, whose wgmmas (iteration t - 1)
    // every warpgroup waited for before the barrier that ended it.
    if (t + 1 < ntiles) {
      read((t + 1) * BK);
      write(buf ^ 1);
    }
    wgmmaWait<0>(acc[0]);
    __syncthreads(); // tile t + 1 is stored; buffer buf is no longer read
  }
  storeAccumulators<EPI>(acc, C, ldc, epi, m0, n0, wg * 64 + warp * 16, 0,
                         mValid, nValid);
}

/// Whether tile T can run epilogue EPI: RoPE rotates in registers, so each
/// warp's accumulator columns (T::WarpCols) must be whole heads.
template <int EPI, typename T> __host__ __device__ constexpr bool epilogueFits() {
  return !isEpiRope(EPI) ||
         (T::WarpCols > 0 && T::WarpCols % epiRopeHeadDim(EPI) == 0);
}

/// The epilogue's name in traces.
constexpr const char *epilogueName(int epi) {
  return isEpiRope(epi)        ? "rope"
         : epi == EpiStore     ? "store"
         : epi == EpiAdd       ? "add"
         : epi == EpiGelu      ? "gelu"
         : epi == EpiSwiglu    ? "swiglu"
         : epi == EpiBiasSilu  ? "bias_silu"
         : epi == EpiStoreBf16 ? "store_bf16"
                               : "?";
}

/// MODC_CUDA_TRACE_GEMMS=1 in the environment: each GEMM launch prints its
/// kernel, shape, tile and epilogue to stderr (which path a product took).
inline void traceGemm(const char *path, int64_t M, int64_t Ncols, int64_t L,
                      int BM, int BN, int epi) {
  static const bool on = [] {
    const char *env = std::getenv("MODC_CUDA_TRACE_GEMMS");
    return env && *env && std::strcmp(env, "0") != 0;
  }();
  if (on)
    std::fprintf(stderr,
                 "modc gemm: %s %lld x %lld x %lld, tile %d x %d, epilogue %s\n",
                 path, (long long)M, (long long)Ncols, (long long)L, BM, BN,
                 epilogueName(epi));
}

//===----------------------------------------------------------------------===//
// TMA-fed wgmma (sm_90a): both operands bf16 in global memory
//===----------------------------------------------------------------------===//

/// The wgmma descriptor of a K-major bf16 operand stored with the 128-byte
/// swizzle, as TMA writes it (PTX ISA, "Matrix Descriptor Format"; layout
/// type 1 at bits 62-63): one 128-byte row per operand row (64 bf16 of the
/// reduction), the 16-byte chunk j of row r at chunk j ^ (r % 8), 8-row
/// groups SBO = 1024 bytes apart; LBO is unused (the k16 step stays within
/// a row) and set to 16 bytes. The start may be advanced within the row by
/// 32 bytes a k16 step: the swizzle is applied to the address bits, so the
/// tile itself must be 1024-byte aligned (base offset 0).
__device__ __forceinline__ uint64_t wgmmaDescriptorSw128(const void *operand) {
  return wgmmaDescriptor(operand, 16, 1024, 1);
}

/// The wgmma descriptor of an MN-major (transposed) bf16 operand stored with
/// the 128-byte swizzle, as TMA writes boxes of 64 elements along M (or N)
/// by `steps` reduction steps: one 128-byte row per reduction step (the 64
/// elements of a 64-row group), 8-step groups SBO = 1024 bytes apart, and
/// the 64-row groups LBO = steps * 128 bytes apart (PTX ISA, "Matrix
/// Descriptor Format", MN-major layouts: the leading dimension is M or N).
/// The start advances by 2048 bytes (16 rows of 128 bytes) a k16 step; the
/// tile must be 1024-byte aligned.
__device__ __forceinline__ uint64_t wgmmaDescriptorMnSw128(const void *operand,
                                                           int steps) {
  return wgmmaDescriptor(operand, uint32_t(steps) * 128, 1024, 1);
}

/// mbarrier.init (shared::cta): `count` arrivals complete a phase.
__device__ __forceinline__ void mbarrierInit(uint64_t *bar, unsigned count) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(
                   sharedAddress(bar)),
               "r"(count)
               : "memory");
#else
  modc_emu::mbarrierInit(bar, count);
#endif
}

/// Makes initialised mbarriers visible to the async proxy (TMA), before the
/// barrier that publishes them.
__device__ __forceinline__ void fenceMbarrierInit() {
#if defined(__CUDACC__)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// This thread's arrival, announcing `bytes` that TMA copies will complete.
__device__ __forceinline__ void mbarrierArriveExpectTx(uint64_t *bar,
                                                       unsigned bytes) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   sharedAddress(bar)),
               "r"(bytes)
               : "memory");
#else
  modc_emu::mbarrierArriveExpectTx(bar, bytes);
#endif
}

/// Waits until the phase of parity `parity` of the mbarrier has completed.
__device__ __forceinline__ void mbarrierWait(uint64_t *bar, unsigned parity) {
#if defined(__CUDACC__)
  // A phase that has not completed after ~2^34 cycles (seconds; a stage
  // takes microseconds) never will: a lost TMA load. Trap, so that the
  // launch fails with an error instead of hanging the process. (No printf:
  // a call here would make ptxas serialize the kernel's wgmmas.)
  constexpr long long kHangCycles = 1LL << 34;
  const long long start = clock64();
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(sharedAddress(bar)), "r"(parity)
                 : "memory");
    if (!done && clock64() - start > kHangCycles)
      __trap();
  }
#else
  while (!modc_emu::mbarrierTryWaitParity(bar, parity))
    modc_emu::spin();
#endif
}

/// TMA: the box of `map` at element coordinates (c0 along the contiguous
/// dimension, c1 along the rows) into shared `dst`, completing its bytes on
/// `bar` (cp.async.bulk.tensor.2d, zero outside the tensor).
__device__ __forceinline__ void tmaLoad2d(void *dst, const CUtensorMap *map,
                                          int c0, int c1, uint64_t *bar) {
#if defined(__CUDACC__)
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
                   sharedAddress(dst)),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(sharedAddress(bar)),
               "r"(c0), "r"(c1)
               : "memory");
#else
  modc_emu::tmaLoad2d(dst, map, c0, c1, bar);
#endif
}

/// This thread's arrival on the mbarrier (no transaction bytes).
__device__ __forceinline__ void mbarrierArrive(uint64_t *bar) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(
                   sharedAddress(bar))
               : "memory");
#else
  modc_emu::mbarrierArrive(bar);
#endif
}

/// Threads of a TMA GEMM CTA: a producer warpgroup (one thread issues the
/// loads) and two consumer warpgroups (the wgmmas and the epilogue).
constexpr int kTmaThreads = 384;
constexpr int kTmaConsumerWarps = 8;

/// TMA GEMM tiles: BM x BN outputs per tile, a 64 x BN slab for each
/// consumer warpgroup, BK = 64 reduction steps a stage (one swizzled
/// 128-byte row per operand row), STAGES stages in flight: as many as the
/// shared memory of MINB CTAs an SM holds (227 KB on sm_90).
template <int BN_, int MINB_, int STAGES_> struct TmaTile {
  static constexpr int BM = 128, BN = BN_, BK = 64, MINB = MINB_;
  static constexpr int STAGES = STAGES_;
  static constexpr int WarpCols = BN; // every warp holds whole rows
  static constexpr int ABytes = BM * BK * 2, BBytes = BN * BK * 2;
  static constexpr int StageBytes = ABytes + BBytes;
  /// Dynamic shared memory: the stages plus room to align them to 1024.
  static constexpr int SmemBytes = STAGES * StageBytes + 1024;
  static_assert(ABytes % 1024 == 0 && BBytes % 1024 == 0,
                "every operand tile 1024-byte aligned (the swizzle)");
  static_assert(MINB * SmemBytes <= 227 * 1024, "the stages fit an SM");
};
using TmaSmall = TmaTile<64, 2, 4>;  // 97 KB: two CTAs an SM
using TmaLarge = TmaTile<128, 1, 6>; // 193 KB

/// The wgmma GEMM fed by TMA: C = epilogue(A B^T), A [M, L] and B [Ncols, L]
/// bf16 in global memory, each either K-major (AK, BKc: the reduction
/// contiguous, a box of BK steps by BM or BN rows) or MN-major (the rows
/// contiguous, the layout of gemmKernel's !AK / !BKc: boxes of 64 rows by
/// BK steps, one per 64-row group), described by the tensor maps (128-byte
/// swizzle). The products of training's backward pass are the MN-major
/// ones: the input gradient reads the weight's bf16 copy MN-major, the
/// weight gradient reads the output gradient and the activations MN-major,
/// reducing over their rows.
/// Persistent and warp-specialised: CTA b takes work items b, b + grid, ...;
/// an item is an output tile (row-major over the tile grid) and, for the
/// split reduction (DYN 3), a chunk of the reduction, chunk-major. Thread 0
/// of the producer warpgroup streams every k-tile of those items through the
/// STAGES stages: it waits until a stage is empty, then loads it, the stage
/// completing on its `full` mbarrier. The consumer warpgroups wait for a
/// full stage, issue one wgmma per k16 step and keep one group in flight;
/// once a k-tile's wgmmas completed, each consumer warp arrives on that
/// stage's `empty` mbarrier. So the loads of the next item run during this
/// item's epilogue. k-tile number it (counted over all of the CTA's items)
/// uses stage it % STAGES for the (it / STAGES)-th time: `full` phase
/// it / STAGES, and `empty` phase it / STAGES - 1 must have completed (on a
/// fresh barrier the phase before the first counts as completed).
/// DYN as gemmKernel's: 1, M = *dynRows; 2, L = *dynRows; 3, the reduction
/// *dynRows split into chunks of L steps (the last item's chunk takes every
/// step left), item z's partial product stored at C + z * M * ldc. A
/// device-sized reduction (DYN 2, 3) is a row count: the maps reach the
/// rows' bound, so the steps of the last k-tile past the chunk's end are
/// someone else's rows or stale: the consumer threads zero them in A and B
/// (their 128-byte rows: MN-major operands only) and meet on the `zeroed`
/// mbarrier before their wgmmas.
template <typename T, bool AK, bool BKc, int DYN, int EPI, typename TC>
__global__ __launch_bounds__(kTmaThreads, T::MINB) void gemmTmaKernel(
    const __grid_constant__ CUtensorMap mapA,
    const __grid_constant__ CUtensorMap mapB, TC *C, int64_t ldc,
    const EpiArgs epi, int64_t M, int64_t Ncols, int64_t L,
    const int64_t *dynRows, int64_t splits) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, S = T::STAGES;
  static_assert(DYN <= 1 || (!AK && !BKc),
                "a device-sized reduction runs over rows: MN-major operands");
  static_assert(DYN != 3 || EPI == EpiStore, "partial products are stored");
  int64_t total = L; // the reduction's steps (DYN 3: every chunk's)
  if (DYN == 1)
    M = *dynRows;
  if (DYN == 2 || DYN == 3)
    total = *dynRows;
  if (DYN != 3)
    splits = 1;
  const int64_t tilesN = (Ncols + BN - 1) / BN;
  const int64_t tiles = (M + BM - 1) / BM * tilesN;
  if (int64_t(blockIdx.x) >= tiles * splits)
    return; // the whole CTA, before any barrier

  MODC_DYNAMIC_SHARED(unsigned char, smemRaw);
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~uintptr_t(1023));
  __shared__ __align__(8) uint64_t full[S], empty[S], zeroed;

  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbarrierInit(&full[s], 1);
      mbarrierInit(&empty[s], kTmaConsumerWarps);
    }
    mbarrierInit(&zeroed, kTmaConsumerWarps * kWarp);
    fenceMbarrierInit();
  }
  __syncthreads(); // the only block barrier: the roles part here

  // Work item w: its output tile, its reduction steps [k0, k0 + len).
  auto item = [&](int64_t w, int64_t &m0, int64_t &n0, int64_t &k0,
                  int64_t &len) {
    const int64_t z = w / tiles, tile = w % tiles;
    m0 = (tile / tilesN) * BM, n0 = (tile % tilesN) * BN;
    k0 = DYN == 3 ? z * L : 0;
    len = DYN == 3 ? (z + 1 < splits ? minI64(total - k0, L) : total - k0)
                   : total;
  };

  if (wg == 0) {
    if (tid != 0)
      return;
    int64_t it = 0;
    for (int64_t w = blockIdx.x; w < tiles * splits; w += gridDim.x) {
      int64_t m0, n0, k0, len;
      item(w, m0, n0, k0, len);
      for (int64_t kt = 0; kt * BK < len; ++kt, ++it) {
        const int st = int(it % S);
        const unsigned use = unsigned(it / S);
        mbarrierWait(&empty[st], (use & 1) ^ 1);
        unsigned char *stage = smem + st * T::StageBytes;
        const int k = int(k0 + kt * BK);
        mbarrierArriveExpectTx(&full[st], T::StageBytes);
        if (AK) {
          tmaLoad2d(stage, &mapA, k, int(m0), &full[st]);
        } else {
          for (int j = 0; j < BM / 64; ++j)
            tmaLoad2d(stage + j * BK * 128, &mapA, int(m0) + 64 * j, k,
                      &full[st]);
        }
        unsigned char *b = stage + T::ABytes;
        if (BKc) {
          tmaLoad2d(b, &mapB, k, int(n0), &full[st]);
        } else {
          for (int j = 0; j < BN / 64; ++j)
            tmaLoad2d(b + j * BK * 128, &mapB, int(n0) + 64 * j, k, &full[st]);
        }
      }
    }
    return;
  }

  const int slab = wg - 1, warp = (tid % 128) / kWarp, lane = tid % kWarp;
  int64_t it = 0;
  unsigned zeroings = 0; // uses of `zeroed` so far
  for (int64_t w = blockIdx.x; w < tiles * splits; w += gridDim.x) {
    int64_t m0, n0, k0, len;
    item(w, m0, n0, k0, len);
    const int mValid = int(minI64(BM, M - m0));
    const int nValid = int(minI64(BN, Ncols - n0));
    // One m16n8 fragment row (storeAccumulators' MI = 1) per warp.
    float acc[1][BN / 8][4];
    zeroFragments(acc);
    int64_t kt = 0;
    for (; kt * BK < len; ++kt, ++it) {
      const int st = int(it % S);
      mbarrierWait(&full[st], unsigned(it / S) & 1);
      unsigned char *stage = smem + st * T::StageBytes;
      // A's slab: rows 64 slab .. 64 slab + 63 (K-major: 64 rows of 128
      // bytes; MN-major: the slab-th 64-row group, BK rows of 128 bytes).
      static_assert(BK == 64, "a 64-row group or slab is 8 KB either way");
      unsigned char *a = stage + slab * 64 * 128;
      unsigned char *b = stage + T::ABytes;
      if constexpr (DYN == 2 || DYN == 3) {
        const int steps = int(minI64(BK, len - kt * BK));
        if (steps < BK) {
          // Steps [steps, BK): their 128-byte rows in each 64-row group of
          // A and B (all 8 chunks, wherever the swizzle put them).
          constexpr int groups = BM / 64 + BN / 64;
          const int rows = BK - steps;
          for (int i = tid - 128; i < groups * rows * 8;
               i += kTmaConsumerWarps * kWarp) {
            const int chunk = i % 8, row = steps + i / 8 % rows;
            const int group = i / 8 / rows; // A's groups, then B's
            *reinterpret_cast<uint4 *>(stage + group * BK * 128 + row * 128 +
                                       chunk * 16) = make_uint4(0, 0, 0, 0);
          }
          fenceProxyAsync();
          mbarrierArrive(&zeroed);
          mbarrierWait(&zeroed, zeroings & 1);
          ++zeroings;
        }
      }
      // The lanes may leave the wait loops apart; the .aligned wgmma
      // instructions need the warp converged.
      __syncwarp();
      wgmmaFence(acc[0]);
#pragma unroll
      for (int s = 0; s < BK / 16; ++s) // k16 step s
        wgmmaBf16<BN, !AK, !BKc>(
            acc[0],
            AK ? wgmmaDescriptorSw128(a + 32 * s)
               : wgmmaDescriptorMnSw128(a + 2048 * s, BK),
            BKc ? wgmmaDescriptorSw128(b + 32 * s)
                : wgmmaDescriptorMnSw128(b + 2048 * s, BK),
            smem);
      wgmmaCommit();
      wgmmaWait<1>(acc[0]); // this warp's wgmmas of k-tile it - 1 are done
      if (kt > 0 && lane == 0)
        mbarrierArrive(&empty[(it - 1) % S]);
    }
    wgmmaWait<0>(acc[0]);
    if (kt > 0 && lane == 0)
      mbarrierArrive(&empty[(it - 1) % S]);
    if (DYN == 3 && len <= 0)
      continue; // a chunk past the rows: splitSumKernel does not read it
    TC *out = DYN == 3 ? C + (w / tiles) * M * ldc : C;
    storeAccumulators<EPI>(acc, out, ldc, epi, m0, n0, slab * 64 + warp * 16, 0,
                           mValid, nValid);
  }
}

/// Test hook: TMA kernel launches and weight roundings so far (host
/// counters), so that a check can tell that the TMA path ran.
struct TmaStats {
  int64_t launches = 0, roundings = 0;
};
inline TmaStats &tmaStats() {
  static TmaStats stats;
  return stats;
}

/// cuTensorMapEncodeTiled, from the driver through the runtime (the package
/// links no driver library); null where the driver lacks it.
using EncodeTiledFn = CUresult (*)(CUtensorMap *, CUtensorMapDataType,
                                   cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *,
                                   const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);
inline EncodeTiledFn encodeTiledFn() {
  static const EncodeTiledFn fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                         cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

/// The tensor map of a K-contiguous bf16 operand of `rows` rows of L
/// elements, `ld` apart, read in boxes of 64 x boxRows with the 128-byte
/// swizzle (rows and steps past the operand read as zero). False where TMA
/// cannot read it (alignment, stride, or no driver support).
inline bool encodeOperandMap(CUtensorMap &map, const bf16 *base, int64_t rows,
                             int64_t L, int64_t ld, int boxRows) {
  const EncodeTiledFn encode = encodeTiledFn();
  if (!encode || reinterpret_cast<uintptr_t>(base) % 16 != 0 ||
      (ld * 2) % 16 != 0 || rows <= 0 || L <= 0)
    return false;
  const cuuint64_t dims[2] = {cuuint64_t(L), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld * 2)};
  const cuuint32_t box[2] = {64, cuuint32_t(boxRows)};
  const cuuint32_t unit[2] = {1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                const_cast<bf16 *>(base), dims, strides, box, unit,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/// Launches gemmTmaKernel on tile T; false (nothing launched) where the
/// operands cannot be described to TMA or the kernel cannot get its shared
/// memory, so that the caller takes the wgmma kernel that reads them itself.
/// `kBound`: the reduction steps the operands hold (L, or for a
/// device-sized reduction the rows' bound); `splits` chunks of L steps for
/// DYN 3; a persistent grid of at most `ctas` CTAs (the configuration's).
template <typename T, bool AK, bool BKc, int DYN, int EPI, typename TC>
inline bool launchGemmTmaTile(const bf16 *A, int64_t lda, const bf16 *B,
                              int64_t ldb, TC *C, int64_t ldc, const EpiArgs &epi,
                              int64_t M, int64_t Ncols, int64_t L,
                              int64_t kBound, const int64_t *dynRows,
                              cudaStream_t stream, int64_t splits,
                              int64_t ctas) {
  alignas(64) CUtensorMap mapA, mapB;
  // K-major: boxes of 64 steps by the tile's rows; MN-major: boxes of 64
  // rows by BK steps.
  const bool mapped =
      (AK ? encodeOperandMap(mapA, A, M, kBound, lda, T::BM)
          : encodeOperandMap(mapA, A, kBound, M, lda, T::BK)) &&
      (BKc ? encodeOperandMap(mapB, B, Ncols, kBound, ldb, T::BN)
           : encodeOperandMap(mapB, B, kBound, Ncols, ldb, T::BK));
  if (!mapped)
    return false;
  auto kernel = gemmTmaKernel<T, AK, BKc, DYN, EPI, TC>;
  static const bool sized =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           T::SmemBytes) == cudaSuccess;
  if (!sized)
    return false;
  // M is the bound of the rows (DYN 1: the kernel reads the count).
  const int64_t items =
      ceilDiv(M, T::BM) * ceilDiv(Ncols, T::BN) * (DYN == 3 ? splits : 1);
  MODC_LAUNCH(kernel, unsigned(items < ctas ? items : ctas), kTmaThreads,
              T::SmemBytes, stream,
              mapA, mapB, C, ldc, epi, M, Ncols, L, dynRows, splits);
  ++tmaStats().launches;
  traceGemm("tma+wgmma", M, Ncols, L, T::BM, T::BN, EPI);
  return true;
}

//===----------------------------------------------------------------------===//
// bf16 copies of the weights, for TMA
//===----------------------------------------------------------------------===//

/// TMA copies bytes, so a product it feeds needs its weight as bf16 in
/// global memory, while the parameters stay f32 (master weights). A forward
/// entry opens a WeightCopyScope; within it the first GEMM that asks for a
/// weight enqueues its rounding into a package-held copy, and later GEMMs of
/// the call reuse it. Every call rounds again (the caller may have changed
/// the weights between calls), so a copy is never stale, unless the caller
/// declared the parameters' version (modc_cuda_params_version): then a copy
/// rounded at the current generation of that version is reused. Outside a
/// scope (decode, training) no copy is made.
struct WeightCopy {
  const float *src;
  int64_t count;
  bf16 *copy;
  uint64_t epoch;      ///< the call that last used it
  uint64_t generation; ///< the parameters' generation it was rounded at
};
struct WeightCopies {
  std::vector<WeightCopy> copies;
  uint64_t epoch = 0;
  bool open = false;
  /// The version the caller declared for the parameters (0: none, every
  /// call rounds), and a generation that changes with every new version and
  /// every AdamW step (which writes the parameters itself).
  uint64_t version = 0, generation = 1;
};
inline WeightCopies &weightCopies() {
  static WeightCopies w;
  return w;
}

/// Copies unused for this many calls are freed (their weights moved).
constexpr uint64_t kWeightCopyIdleCalls = 16;

__global__ void roundToBf16Kernel(const float *__restrict__ src,
                                  bf16 *__restrict__ dst, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += step)
    dst[i] = bf16(src[i]);
}

/// The bf16 copy of the `count` floats at w, rounded in this call; null
/// outside a WeightCopyScope or where no device memory is left.
inline const bf16 *weightCopyFor(const float *w, int64_t count,
                                 cudaStream_t stream) {
  WeightCopies &all = weightCopies();
  if (!all.open || count <= 0)
    return nullptr;
  WeightCopy *found = nullptr;
  for (WeightCopy &c : all.copies)
    if (c.src == w && c.count == count)
      found = &c;
  if (!found) {
    void *p = nullptr;
    if (cudaMalloc(&p, size_t(count) * sizeof(bf16)) != cudaSuccess) {
      cudaGetLastError(); // out of memory: this product reads f32 instead
      return nullptr;
    }
    all.copies.push_back({w, count, static_cast<bf16 *>(p), 0, 0});
    found = &all.copies.back();
  }
  // Rounded already in this call, or at the declared parameters' current
  // generation: reused as it is.
  const bool current = all.version != 0 && found->generation == all.generation;
  if (found->epoch != all.epoch && !current) {
    MODC_LAUNCH(roundToBf16Kernel,
                unsigned(std::min<int64_t>(ceilDiv(count, kThreads), kMaxGrid)),
                kThreads,
                0, stream, w, found->copy, count);
    ++tmaStats().roundings;
  }
  found->epoch = all.epoch;
  found->generation = all.generation;
  return found->copy;
}

/// Whether a product's operands can go to TMA: a bf16 A (K-major: the
/// forward's activations, the input gradient's output gradient; MN-major:
/// the weight gradient's output gradient) and a B that is either a weight
/// (f32, rounded into its bf16 copy; K-major in the forward, MN-major in
/// the input gradient) or stored bf16 (the weight gradient's activations).
/// A reduction sized on the device (DYN 2, 3: the weight gradient's rows)
/// runs over rows, so both operands are MN-major there.
template <typename TA, typename TB, bool AK, bool BKc, int DYN>
constexpr bool tmaOperandsOk() {
  constexpr bool weightB = std::is_same<TB, float>::value && DYN <= 1;
  return std::is_same<TA, bf16>::value &&
         (std::is_same<TB, bf16>::value || weightB) &&
         (DYN <= 1 || (!AK && !BKc));
}

/// The GEMM kernel families: SIMT f32, mma.sync (3xTF32 or bf16) and wgmma
/// (bf16 on sm_90a), as #modk.gemm_config names them.
enum GemmPath { PathSimt, PathMma, PathWgmma };

/// The library's tiles by family and shape (modk-configure-gemms knows the
/// same list); TMA: the stages fed by TMA.
template <int P, bool TMA, int BM, int BN> struct GemmTileFor {
  static_assert(P < 0, "the kernel library has no such GEMM tile");
};
template <> struct GemmTileFor<PathSimt, false, 64, 64> { using T = GemmSmall; };
template <> struct GemmTileFor<PathSimt, false, 128, 128> { using T = GemmLarge; };
template <> struct GemmTileFor<PathMma, false, 64, 64> { using T = TcSmall; };
template <> struct GemmTileFor<PathMma, false, 128, 128> { using T = TcLarge; };
template <> struct GemmTileFor<PathWgmma, false, 128, 64> { using T = WgSmall; };
template <> struct GemmTileFor<PathWgmma, false, 128, 128> { using T = WgLarge; };
template <> struct GemmTileFor<PathWgmma, true, 128, 64> { using T = TmaSmall; };
template <> struct GemmTileFor<PathWgmma, true, 128, 128> { using T = TmaLarge; };

/// The TMA path of a bf16 product with tmaOperandsOk on tile T: B's bf16
/// copy where B is a weight, the launch on at most `ctas` CTAs. False where
/// it cannot run (no weight copy outside a WeightCopyScope, operands TMA
/// cannot describe, no driver support): nothing was enqueued then but
/// perhaps the weight's rounding, and the caller takes the wgmma kernel
/// that reads its operands itself. `kBound` and `splits` as for
/// launchGemmTmaTile (kBound 0: unknown, no TMA).
template <typename T, bool AK, bool BKc, int DYN, int EPI, typename TB,
          typename TC>
inline bool launchGemmTma(const bf16 *A, int64_t lda, const TB *B,
                          int64_t ldb, TC *C, int64_t ldc, const EpiArgs &epi,
                          int64_t M, int64_t Ncols, int64_t L, int64_t kBound,
                          const int64_t *dynRows, cudaStream_t stream,
                          int64_t splits, int64_t ctas) {
  constexpr bool weightB = std::is_same<TB, float>::value;
  if ((weightB && !weightCopies().open) || kBound <= 0 || ctas <= 0 ||
      lda % 8 != 0 || ldb % 8 != 0 ||
      reinterpret_cast<uintptr_t>(A) % 16 != 0 || !encodeTiledFn())
    return false;
  const bf16 *Bbf16;
  if constexpr (weightB) {
    // The weight [rows, ldb]: Ncols rows in the forward (K-major), the
    // reduction's L in the input gradient (MN-major): the same copy.
    Bbf16 = weightCopyFor(B, (BKc ? Ncols : L) * ldb, stream);
    if (!Bbf16)
      return false;
  } else {
    Bbf16 = B;
  }
  return launchGemmTmaTile<T, AK, BKc, DYN, EPI>(A, lda, Bbf16, ldb, C, ldc,
                                                 epi, M, Ncols, L, kBound,
                                                 dynRows, stream, splits, ctas);
}

#if defined(__CUDACC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the GEMM kernels need sm_80 or later"
#endif

/// The kernel of a path and tile (only that one is instantiated).
template <int P, typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
inline auto gemmKernelFor() {
  if constexpr (P == PathWgmma) {
    static_assert(BF, "wgmma runs the bf16 products only");
    return gemmWgKernel<T, AK, BKc, DYN, EPI, TA, TB, TC>;
  } else if constexpr (P == PathMma) {
    return gemmTcKernel<T, AK, BKc, DYN, EPI, BF, TA, TB, TC>;
  } else {
    return gemmKernel<T, AK, BKc, DYN, EPI, BF, TA, TB, TC>;
  }
}

/// One row of a product's configuration (#modk.gemm_config, chosen by
/// modk-configure-gemms, docs/cuda.md): from MinRows rows on, kernel family
/// P on a BM x BN tile, fed by TMA on a persistent grid of TmaCtas CTAs
/// where nonzero, the epilogue as a kernel of its own where
/// SeparateEpilogue. The library reads a variant through `path`,
/// `tileRows`, `tileCols`, `tma`, `separateEpilogue` and `tmaCtas()`.
template <int64_t MinRows, int P, int BM, int BN, int64_t TmaCtas = 0,
          bool SeparateEpilogue = false>
struct GemmVariant {
  static constexpr int64_t minRows = MinRows;
  static constexpr int path = P, tileRows = BM, tileCols = BN;
  static constexpr bool tma = TmaCtas > 0;
  static constexpr bool separateEpilogue = SeparateEpilogue;
  static constexpr int64_t tmaCtas() { return TmaCtas; }
};

/// The first type of a pack.
template <typename First, typename...> struct FirstOf {
  using type = First;
};

/// What a plan may look at besides the rows and columns: the product's
/// epilogue, whether it rounds its operands to bf16, and whether its
/// operand types allow TMA (tmaOperandsOk).
template <int EPI, bool BF, bool TmaOperands> struct GemmProduct {
  static constexpr int epilogue = EPI;
  static constexpr bool bf16 = BF, tmaOperands = TmaOperands;
};

/// A product's configuration: its variants by ascending MinRows (the first
/// from 0), and for a weight gradient the split of its rows (up to
/// MaxSplits chunks; ChunkRows > 0 fixes a chunk's rows).
/// `dispatch<Product>(rows, cols, f)` calls f with the variant of `rows`.
/// Callers of the library may pass any type with the same members (the
/// kernel tests pass one that sweeps the choices).
template <int64_t MaxSplits, int64_t ChunkRows, typename... V> struct GemmPlan {
  static_assert(sizeof...(V) > 0, "a GEMM plan needs a variant");
  template <int N, int K> static constexpr int64_t maxSplits() {
    return MaxSplits;
  }
  static constexpr int64_t chunkRows() { return ChunkRows; }
  template <typename Product, typename F>
  static bool dispatch(int64_t rows, int64_t /*cols*/, F &&f) {
    return pick<V...>(rows, f);
  }

private:
  template <typename First, typename... Rest, typename F>
  static bool pick(int64_t rows, F &f) {
    if constexpr (sizeof...(Rest) > 0) {
      using Next = typename FirstOf<Rest...>::type;
      static_assert(Next::minRows > First::minRows, "variants by rows");
      if (rows >= Next::minRows)
        return pick<Rest...>(rows, f);
    }
    return f(First{});
  }
};

/// C = epilogue(A B) on variant V: its tile on its path; a TMA variant's
/// kernel where its operands can be described to TMA, else the wgmma
/// kernel of the same tile. False only where V's tile cannot hold the
/// epilogue (V says separateEpilogue): nothing is enqueued, and the caller
/// runs the product with a plain store, then the epilogue as a kernel.
template <typename V, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
inline bool launchGemmVariant(const TA *A, int64_t lda, const TB *B,
                              int64_t ldb, TC *C, int64_t ldc,
                              const EpiArgs &epi, int64_t M, int64_t Ncols,
                              int64_t L, const int64_t *dynRows,
                              cudaStream_t stream, unsigned splits,
                              int64_t kBound) {
  constexpr int P = V::path;
  using T = typename GemmTileFor<P, false, V::tileRows, V::tileCols>::T;
  if constexpr (!epilogueFits<EPI, T>()) {
    static_assert(V::separateEpilogue,
                  "the configured tile cannot hold this epilogue");
    return false;
  } else {
    static_assert(P != PathWgmma || BF, "wgmma runs the bf16 products only");
    if constexpr (V::tma) {
      static_assert(tmaOperandsOk<TA, TB, AK, BKc, DYN>(),
                    "TMA configured for operands it cannot read");
      using TT = typename GemmTileFor<P, true, V::tileRows, V::tileCols>::T;
      if (launchGemmTma<TT, AK, BKc, DYN, EPI>(
              A, lda, B, ldb, C, ldc, epi, M, Ncols, L, kBound, dynRows,
              stream, splits, V::tmaCtas()))
        return true;
    }
    auto kernel = gemmKernelFor<P, T, AK, BKc, DYN, EPI, BF, TA, TB, TC>();
    traceGemm(P == PathWgmma ? "wgmma" : P == PathMma ? "mma.sync" : "simt", M,
              Ncols, L, T::BM, T::BN, EPI);
    MODC_LAUNCH(kernel,
                dim3(unsigned(ceilDiv(Ncols, T::BN)),
                     unsigned(ceilDiv(M, T::BM)), splits),
                kThreads, 0, stream, A, lda, B, ldb, C, ldc, epi, M, Ncols, L,
                dynRows);
    return true;
  }
}

/// C = epilogue(A B) on the variant of PLAN (a GemmPlan) for M rows.
/// `splits` CTAs along z (DYN == 3 only: the chunks of the split
/// reduction). `kBound`: for DYN 3, the bound of the rows the chunks split
/// (the TMA kernel's maps reach it; 0: unknown, no TMA); otherwise L. BF:
/// the operands are rounded to bf16. A and C may hold bf16 where gemmTypesOk
/// allows. False only where the variant keeps the epilogue (RoPE) apart:
/// nothing was enqueued then.
template <typename PLAN, bool AK, bool BKc, int DYN, int EPI, bool BF = false,
          typename TA = float, typename TB = float, typename TC = float>
inline bool launchGemm(const TA *A, int64_t lda, const TB *B, int64_t ldb,
                       TC *C, int64_t ldc, const EpiArgs &epi, int64_t M,
                       int64_t Ncols, int64_t L, const int64_t *dynRows,
                       cudaStream_t stream, unsigned splits = 1,
                       int64_t kBound = 0) {
  static_assert(gemmTypesOk<TA, TB, TC, AK, EPI, BF, DYN>(),
                "bf16 A or B needs a bf16 product; bf16 C an epilogue that "
                "does not read C");
  static_assert(!isEpiRope(EPI) || DYN != 3, "RoPE of a partial product");
  if (M <= 0 || Ncols <= 0)
    return true;
  using Product =
      GemmProduct<EPI, BF, tmaOperandsOk<TA, TB, AK, BKc, DYN>()>;
  return PLAN::template dispatch<Product>(M, Ncols, [&](auto variant) {
    return launchGemmVariant<decltype(variant), AK, BKc, DYN, EPI, BF>(
        A, lda, B, ldb, C, ldc, epi, M, Ncols, L, dynRows, stream, splits,
        DYN == 3 ? kBound : L);
  });
}

/// y[M, N] = epilogue(a[M, K] w[N, K]^T), M = *rows (or n when rows is null).
/// The GEMM's in-tile offsets are 32-bit: widths below 2^24.
template <int N, int K> constexpr bool gemmWidthsOk() {
  return N > 0 && K > 0 && N < (1 << 24) && K < (1 << 24);
}

template <int N, int K, int EPI, bool BF, typename PLAN, typename TA,
          typename TC>
inline bool linearEpi(const TA *a, const int64_t *rows, int64_t max_rows,
                      const float *w, const EpiArgs &epi, TC *y,
                      cudaStream_t stream) {
  static_assert(gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  if (rows)
    return launchGemm<PLAN, true, true, 1, EPI, BF>(a, K, w, K, y, N, epi,
                                                    max_rows, N, K, rows,
                                                    stream);
  return launchGemm<PLAN, true, true, 0, EPI, BF>(a, K, w, K, y, N, epi,
                                                  max_rows, N, K, nullptr,
                                                  stream);
}

//===----------------------------------------------------------------------===//
// Weight gradient with the rows split (deterministic split-K)
//===----------------------------------------------------------------------===//

/// The split of a weight gradient's rows: `splits` chunks of `chunk` rows
/// (the last takes every row left); splits == 1: no split.
struct WgradSplit {
  int64_t splits, chunk;
};

constexpr int64_t kWgradMinChunk = 256;  ///< rows of a chunk, at least
constexpr int64_t kWgradChunkAlign = 16; ///< whole k tiles of every GEMM

/// The split of an [N, K] weight gradient over at most max_rows rows by
/// PLAN: its chunkRows() where positive, else up to maxSplits<N, K>()
/// chunks (chosen by modk-configure-gemms from the output's tiles and the
/// part's SMs), each of at least kWgradMinChunk rows (a multiple of
/// kWgradChunkAlign); at most 65535 chunks (the grid's z).
template <int N, int K, typename PLAN>
inline WgradSplit wgradSplit(int64_t max_rows) {
  const int64_t maxSplits = PLAN::template maxSplits<N, K>();
  if (max_rows <= 0 || (maxSplits <= 1 && PLAN::chunkRows() <= 0))
    return {1, max_rows > 0 ? max_rows : 0};
  int64_t chunk = PLAN::chunkRows();
  if (chunk <= 0) {
    int64_t want = maxSplits;
    const int64_t most = max_rows / kWgradMinChunk;
    want = want < most ? want : most;
    if (want <= 1)
      return {1, max_rows};
    chunk = ceilDiv(ceilDiv(max_rows, want), kWgradChunkAlign) *
            kWgradChunkAlign;
  }
  if (ceilDiv(max_rows, chunk) > 65535)
    chunk = ceilDiv(max_rows, 65535);
  return {ceilDiv(max_rows, chunk), chunk};
}

/// dw[i] += sum over the chunks z that hold rows (z * chunk < *rows, at most
/// `splits`) of part[z * n + i], in chunk order, for i < n.
__global__ __launch_bounds__(kThreads) void splitSumKernel(
    const float *__restrict__ part, int64_t n, int64_t splits, int64_t chunk,
    const int64_t *rows, float *dw) {
  const int64_t r = *rows;
  int64_t nz = r > 0 ? (r + chunk - 1) / chunk : 0;
  nz = minI64(nz, splits);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t z = 0; z < nz; ++z)
      s += part[z * n + i];
    dw[i] += s;
  }
}

//===----------------------------------------------------------------------===//
// Elementwise and row kernels
//===----------------------------------------------------------------------===//

/// Grid for a grid-stride loop over n items.
inline unsigned strideGrid(int64_t n) {
  const int64_t blocks = ceilDiv(n, kThreads);
  return unsigned(blocks < 1 ? 1 : blocks > kMaxGrid ? kMaxGrid : blocks);
}

__device__ __forceinline__ int64_t rowsOr(const int64_t *rows, int64_t n) {
  return rows ? *rows : n;
}

template <int D>
__global__ __launch_bounds__(kThreads) void embedKernel(
    const int32_t *tokens, int64_t n, const float *table, float *out) {
  const int64_t total = n * D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / D, d = e % D;
    out[e] = table[int64_t(tokens[i]) * D + d];
  }
}

template <int N>
__global__
__launch_bounds__(kThreads) void roundBf16Kernel(float *x,
                                                 const int64_t *rows) {
  const int64_t total = *rows * N;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x)
    x[e] = bf16Round(x[e]);
}

/// RoPE: one CTA of 64 threads per row. Thread t takes the pair index j of
/// its lane within a head group and the heads of its group; the angles
/// (ropeAngle) and the rotation (ropeRotatePair) are the fused epilogue's.
/// Round: the rotated values are rounded to bf16 (a bf16 model's queries
/// and keys).
template <int H, int HD, bool Round>
__global__ __launch_bounds__(64) void ropeKernel(float *x, const int64_t *rows,
                                                 const int32_t *pos,
                                                 float theta) {
  static_assert(HD % 2 == 0, "rope needs an even head dimension");
  constexpr int Half = HD / 2;
  constexpr int Lanes = Half < 64 ? Half : 64; // threads per head
  constexpr int Groups = 64 / Lanes;            // heads processed at once
  const int64_t i = blockIdx.x;
  if (i >= *rows)
    return;
  const int g = threadIdx.x / Lanes;
  if (g >= Groups)
    return;
  for (int j = threadIdx.x % Lanes; j < Half; j += Lanes) {
    const float2 cs = ropeAngle<HD>(pos[i], j, theta);
    for (int h = g; h < H; h += Groups) {
      float *xh = x + (i * H + h) * HD;
      float x0 = xh[j], x1 = xh[j + Half];
      ropeRotatePair(x0, x1, cs);
      xh[j] = Round ? bf16Round(x0) : x0;
      xh[j + Half] = Round ? bf16Round(x1) : x1;
    }
  }
}

/// Fills table[p * HD / 2 + j] = ropeAngle<HD>(p, j) for p < positions.
template <int HD>
__global__ __launch_bounds__(kThreads) void ropeTableKernel(float2 *table,
                                                            int32_t positions,
                                                            float theta) {
  const int64_t n = int64_t(positions) * (HD / 2);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x)
    table[e] = ropeAngle<HD>(int32_t(e / (HD / 2)), int(e % (HD / 2)), theta);
}

/// The (cos, sin) tables of the fused RoPE epilogue, built on first use and
/// kept for the process (positions x HD / 2 float2 each: 1 MB at 2048
/// positions of head dim 128).
struct RopeTable {
  int hd;
  float theta;
  int32_t positions;
  float2 *table;
};
inline std::vector<RopeTable> &ropeTables() {
  static std::vector<RopeTable> tables;
  return tables;
}

/// The table of positions 0 .. positions - 1 for head dim HD and theta,
/// enqueued on `stream` when first asked for. Null (RoPE then takes its own
/// kernel) while the stream is being captured (a decode step: no allocation
/// may happen inside a graph) or where no device memory is left.
template <int HD>
inline const float2 *ropeTableFor(float theta, int32_t positions,
                                  cudaStream_t stream) {
  for (const RopeTable &t : ropeTables())
    if (t.hd == HD && t.theta == theta && t.positions >= positions)
      return t.table;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (positions <= 0 ||
      cudaStreamIsCapturing(stream, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone)
    return nullptr;
  void *p = nullptr;
  const int64_t n = int64_t(positions) * (HD / 2);
  if (cudaMalloc(&p, size_t(n) * sizeof(float2)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  auto table = static_cast<float2 *>(p);
  MODC_LAUNCH(ropeTableKernel<HD>,
              unsigned(std::min<int64_t>(ceilDiv(n, kThreads), kMaxGrid)),
              kThreads, 0, stream, table, positions, theta);
  ropeTables().push_back({HD, theta, positions, table});
  return table;
}

/// Test hook: GEMM launches that applied RoPE in their epilogue (host
/// counter).
inline int64_t &fusedRopeLaunches() {
  static int64_t n = 0;
  return n;
}

template <int S>
__global__ __launch_bounds__(kThreads) void identityKernel(int64_t B,
                                                          int32_t *pos,
                                                          int64_t *seg) {
  const int64_t total = B * S;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       e <= total + B; e += int64_t(gridDim.x) * blockDim.x) {
    if (e < total)
      pos[e] = int32_t(e % S);
    else
      seg[e - total] = (e - total) * S;
  }
}

/// r[t] = w . x[t], one warp per row.
template <int D>
__global__ __launch_bounds__(kThreads) void routerKernel(const float *x,
                                                        int64_t rows,
                                                        const float *w,
                                                        float *r) {
  const int64_t t = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (t >= rows)
    return;
  const int lane = threadIdx.x % kWarp;
  const float *xt = x + t * D;
  float acc = 0.0f;
  for (int d = lane; d < D; d += kWarp)
    acc = fmaf(w[d], xt[d], acc);
  acc = warpSum(acc);
  if (lane == 0)
    r[t] = acc;
}

/// The CPU's topkKey, high half: an order-preserving uint of the router
/// value, -0.0 folded into +0.0, NaN below every number.
__device__ __forceinline__ uint32_t topkBits(float r) {
  if (r != r)
    return 0u;
  if (r == 0.0f)
    r = 0.0f;
  const uint32_t u = __float_as_uint(r);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// One CTA per sequence. The K-th largest key T is found by a 4-pass radix
/// select (8 bits a pass); the selection is every key > T plus the first
/// `need` positions whose key is T (ties to the lower position, as the
/// CPU's (value, -position) order). Two block scans compact it in position
/// order. Each thread keeps its C consecutive keys in registers (one read of
/// the router values); the histogram adds are aggregated per warp (router
/// values share their top bits, so most land in one or two bins), and the
/// digit of each pass is found by a block scan over the bins, a bin a thread.
template <int S, int K>
__global__ __launch_bounds__(kThreads) void topkKernel(const float *r,
                                                      int64_t B, int32_t *pos,
                                                      int64_t *seg,
                                                      int32_t *mask) {
  static_assert(K >= 1 && K <= S, "capacity must be in [1, S]");
  static_assert(kThreads == 256, "a thread per radix bin");
  constexpr int C = (S + kThreads - 1) / kThreads; // positions per thread
  constexpr uint32_t kNoBin = 256;
  __shared__ int hist[256];
  __shared__ int scratch[32];
  __shared__ uint32_t selPrefix;
  __shared__ int selRemaining;
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x;
  const int i0 = tid * C;

  uint32_t key[C];
  {
    const float *rb = r + b * S;
#pragma unroll
    for (int c = 0; c < C; ++c)
      key[c] = i0 + c < S ? topkBits(rb[i0 + c]) : 0u;
  }
  uint32_t prefix = 0, prefixMask = 0;
  int remaining = K; // keys still to select among those matching prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;
    __syncthreads();
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const bool counted = i0 + c < S && (key[c] & prefixMask) == prefix;
      const uint32_t bin = counted ? (key[c] >> shift) & 255u : kNoBin;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin != kNoBin && (threadIdx.x % kWarp) == __ffs(peers) - 1)
        atomicAdd(&hist[bin], __popc(peers));
    }
    __syncthreads();
    // Thread t holds bin 255 - t: `above` counts the keys in higher bins.
    // Exactly one bin has above < remaining <= above + count, since
    // 1 <= remaining <= the keys matching prefix (the histogram's total).
    const uint32_t digit = 255u - uint32_t(tid);
    const int count = hist[digit];
    int total = 0;
    const int above = blockExclusiveScan(count, scratch, &total);
    if (above < remaining && remaining <= above + count) {
      selPrefix = prefix | (digit << shift);
      selRemaining = remaining - above;
    }
    __syncthreads();
    prefix = selPrefix;
    remaining = selRemaining;
    prefixMask |= 255u << shift;
    // selPrefix is next written after the next pass's two barriers.
  }
  const uint32_t T = prefix;
  const int need = remaining; // keys equal to T that are selected

  // Pass 1: rank of each T-valued key among the T-valued keys.
  int eq = 0;
#pragma unroll
  for (int c = 0; c < C; ++c)
    eq += (i0 + c < S && key[c] == T) ? 1 : 0;
  int total = 0;
  int eqRank = blockExclusiveScan(eq, scratch, &total);
  // Pass 2: the selection flags, counted for the output ranks.
  int sel = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (i0 + c >= S)
      break;
    if (key[c] > T) {
      ++sel;
    } else if (key[c] == T) {
      sel += eqRank < need ? 1 : 0;
      ++eqRank;
    }
  }
  int outRank = blockExclusiveScan(sel, scratch, &total);
  eqRank -= eq;
  int32_t *mb = mask + b * S;
  int32_t *pb = pos + b * K;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int i = i0 + c;
    if (i >= S)
      break;
    bool chosen = key[c] > T;
    if (key[c] == T) {
      chosen = eqRank < need;
      ++eqRank;
    }
    mb[i] = chosen ? 1 : 0;
    if (chosen)
      pb[outRank++] = i;
  }
  if (tid == 0) {
    seg[b] = b * K;
    if (b == 0)
      seg[B] = B * K;
  }
}

/// One CTA: the sequences one after another, each an ordered compaction of
/// its routed tokens (logit > 0) after those of the earlier sequences.
template <int S>
__global__ __launch_bounds__(kThreads) void causalSelectKernel(
    const float *logit, int64_t B, int32_t *pos, int64_t *seg, int32_t *mask) {
  constexpr int C = (S + kThreads - 1) / kThreads;
  __shared__ int scratch[32];
  const int tid = threadIdx.x;
  const int i0 = tid * C;
  int64_t offset = 0;
  for (int64_t b = 0; b < B; ++b) {
    const float *lb = logit + b * S;
    int cnt = 0;
    for (int c = 0; c < C; ++c) {
      const int i = i0 + c;
      cnt += (i < S && lb[i] > 0.0f) ? 1 : 0;
    }
    int total = 0;
    int64_t at = offset + blockExclusiveScan(cnt, scratch, &total);
    for (int c = 0; c < C; ++c) {
      const int i = i0 + c;
      if (i >= S)
        break;
      const bool routed = lb[i] > 0.0f;
      mask[b * S + i] = routed ? 1 : 0;
      if (routed)
        pos[at++] = i;
    }
    if (tid == 0)
      seg[b] = offset;
    offset += total;
  }
  if (tid == 0)
    seg[B] = offset;
}

/// p[i] = fc2_w . hidden[i] + fc2_b, one warp per row.
template <int HID>
__global__ __launch_bounds__(kThreads) void predictorOutKernel(
    const float *hidden, int64_t rows, const float *fc2_w, const float *fc2_b,
    float *p) {
  const int64_t i = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (i >= rows)
    return;
  const int lane = threadIdx.x % kWarp;
  float acc = 0.0f;
  for (int j = lane; j < HID; j += kWarp)
    acc = fmaf(fc2_w[j], hidden[i * HID + j], acc);
  acc = warpSum(acc);
  if (lane == 0)
    p[i] = acc + fc2_b[0];
}

/// Prefill of the decode cache. Grid (row chunks of 8 warps, nseg): every
/// CTA finds the segment's count n (the first row that is not appended) and
/// copies its chunk's rows below n, a warp a row.
template <int S, int D, typename C>
__global__ __launch_bounds__(kThreads) void cacheAppendKernel(
    const float *k, const float *v, const int64_t *seg, const int32_t *pos,
    const int32_t *lengths, C *cache_k, C *cache_v, int32_t *counts) {
  __shared__ int64_t scratch[32];
  const int64_t s = blockIdx.y;
  const int64_t base = seg[s], rows = seg[s + 1] - base;
  const int32_t len = lengths[s];
  int64_t first = rows;
  for (int64_t j = threadIdx.x; j < rows; j += blockDim.x)
    if (pos[base + j] >= len) {
      first = j;
      break;
    }
  const int64_t n = blockMinI64(first, scratch);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    counts[s] = int32_t(n);
  const int64_t j = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / kWarp;
  if (j >= n)
    return;
  const int lane = threadIdx.x % kWarp;
  const float *ks = k + (base + j) * D, *vs = v + (base + j) * D;
  C *kd = cache_k + (s * S + j) * D, *vd = cache_v + (s * S + j) * D;
  for (int d = lane; d < D; d += kWarp) {
    kd[d] = ks[d];
    vd[d] = vs[d];
  }
}

//===----------------------------------------------------------------------===//
// Causal attention (flash-style)
//===----------------------------------------------------------------------===//

constexpr int kAttnBQ = 64;  ///< queries per CTA
constexpr int kAttnBKV = 64; ///< keys per shared tile

/// Shared memory layout of the attention kernel (floats).
template <int HD> struct AttnSmem {
  static constexpr int QLD = kAttnBQ + 4;  // Qs[HD][QLD]: scaled, transposed
  static constexpr int KLD = kAttnBKV + 4; // Ks[HD][KLD]: transposed
  static constexpr int VLD = HD;           // Vs[BKV][VLD]
  static constexpr int PLD = kAttnBQ + 4;  // Ps[BKV][PLD]: transposed
  // Ps reuses the key tile's memory: the scores are in registers by then.
  static constexpr int KP = HD * KLD > kAttnBKV * PLD ? HD * KLD
                                                      : kAttnBKV * PLD;
  static constexpr int Q = 0;
  static constexpr int Kt = Q + HD * QLD;
  static constexpr int P = Kt;
  static constexpr int V = Kt + KP;
  static constexpr int QPos = V + kAttnBKV * VLD; // int32 [BQ]
  static constexpr int KPos = QPos + kAttnBQ;     // int32 [BKV]
  static constexpr int Floats = KPos + kAttnBKV;
  static constexpr size_t Bytes = size_t(Floats) * sizeof(float);
};

/// CTA (query tile, head, segment), 256 threads as 16 x 16: thread (ty, tx)
/// owns query rows ty*4 + i (i < 4), score columns tx*4 + c (c < 4) and
/// output columns tx + 16*c. Online softmax in f32 with the running max
/// subtracted; keys j of the segment with pos[j] <= pos[i] are attended.
template <int H, int HD, typename Out>
__global__ __launch_bounds__(kThreads) void attentionKernel(
    const float *__restrict__ q, const float *__restrict__ k,
    const float *__restrict__ v, const int64_t *seg, const int32_t *pos,
    Out *__restrict__ out) {
  using L = AttnSmem<HD>;
  constexpr int BQ = kAttnBQ, BKV = kAttnBKV;
  constexpr int DC = (HD + 15) / 16; // output columns per thread
  constexpr int64_t LD = int64_t(H) * HD;
  const int64_t s = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  // Later query tiles see more keys: they get the lower block indices, so
  // they are scheduled first.
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= n)
    return;
  const int qn = int(minI64(BQ, n - i0));

  MODC_DYNAMIC_SHARED(float, smem);
  float *Qs = smem + L::Q, *Ks = smem + L::Kt, *Vs = smem + L::V,
        *Ps = smem + L::P;
  int32_t *qpos = reinterpret_cast<int32_t *>(smem + L::QPos);
  int32_t *kpos = reinterpret_cast<int32_t *>(smem + L::KPos);

  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const float *qh = q + (base + i0) * LD + int64_t(h) * HD;
  for (int e = tid; e < BQ * HD; e += kThreads) {
    const int r = e / HD, d = e % HD;
    Qs[d * L::QLD + r] = r < qn ? qh[int64_t(r) * LD + d] * scale : 0.0f;
  }
  for (int r = tid; r < BQ; r += kThreads)
    qpos[r] = r < qn ? ps[i0 + r] : 0x7fffffff; // padding rows see every key
  const int32_t lastPos = ps[i0 + qn - 1];

  float o[4][DC], mrow[4], lrow[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    mrow[i] = -INFINITY;
    lrow[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < DC; ++c)
      o[i][c] = 0.0f;
  }

  // Positions ascend within a segment: the keys to visit are a prefix.
  for (int64_t k0 = 0; k0 < n && ps[k0] <= lastPos; k0 += BKV) {
    const int kc = int(minI64(BKV, n - k0));
    __syncthreads(); // the previous tile is consumed (and Qs is written)
    const float *kh = k + (base + k0) * LD + int64_t(h) * HD;
    const float *vh = v + (base + k0) * LD + int64_t(h) * HD;
    for (int e = tid; e < BKV * HD; e += kThreads) {
      const int c = e / HD, d = e % HD;
      const bool ok = c < kc;
      Ks[d * L::KLD + c] = ok ? kh[int64_t(c) * LD + d] : 0.0f;
      Vs[c * L::VLD + d] = ok ? vh[int64_t(c) * LD + d] : 0.0f;
    }
    for (int c = tid; c < BKV; c += kThreads)
      kpos[c] = c < kc ? ps[k0 + c] : 0x7fffffff;
    __syncthreads();

    // Scores of rows ty*4 + i, keys tx*4 + c.
    float sc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        sc[i][c] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < HD; ++d) {
      const float4 qa = *reinterpret_cast<const float4 *>(&Qs[d * L::QLD + ty * 4]);
      const float4 kb = *reinterpret_cast<const float4 *>(&Ks[d * L::KLD + tx * 4]);
      const float qv[4] = {qa.x, qa.y, qa.z, qa.w};
      const float kv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          sc[i][c] = fmaf(qv[i], kv[c], sc[i][c]);
    }
    __syncthreads(); // Ks is read by all before Ps (its memory) is written

    // Online softmax; the 16 threads of a row are one half-warp.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int32_t qp = qpos[ty * 4 + i];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (kpos[tx * 4 + c] > qp)
          sc[i][c] = -INFINITY;
        mx = fmaxf(mx, sc[i][c]);
      }
      for (int off = 8; off > 0; off /= 2)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      // Key 0 of the segment is seen by every query, so the first tile
      // makes mnew finite for every row.
      const float mnew = fmaxf(mrow[i], mx);
      const float alpha = expf(mrow[i] - mnew);
      mrow[i] = mnew;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = expf(sc[i][c] - mnew);
        sum += p;
        Ps[(tx * 4 + c) * L::PLD + ty * 4 + i] = p;
      }
      for (int off = 8; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
      lrow[i] = lrow[i] * alpha + sum;
#pragma unroll
      for (int c = 0; c < DC; ++c)
        o[i][c] *= alpha;
    }
    __syncthreads();

    // O += P V over the tile's keys (masked keys have p = 0).
#pragma unroll 4
    for (int c = 0; c < kc; ++c) {
      const float4 pa = *reinterpret_cast<const float4 *>(&Ps[c * L::PLD + ty * 4]);
      const float pv[4] = {pa.x, pa.y, pa.z, pa.w};
#pragma unroll
      for (int dc = 0; dc < DC; ++dc) {
        const int d = tx + 16 * dc;
        const float vv = (HD % 16 == 0 || d < HD) ? Vs[c * L::VLD + d] : 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          o[i][dc] = fmaf(pv[i], vv, o[i][dc]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= qn)
      continue;
    const float inv = 1.0f / lrow[i];
    Out *dst = out + (base + i0 + r) * LD + int64_t(h) * HD;
#pragma unroll
    for (int dc = 0; dc < DC; ++dc) {
      const int d = tx + 16 * dc;
      if (HD % 16 == 0 || d < HD)
        dst[d] = Out(o[i][dc] * inv);
    }
  }
}

//===----------------------------------------------------------------------===//
// Causal attention on tensor cores (3xTF32 mma.m16n8k8)
//===----------------------------------------------------------------------===//

constexpr int kAttnTcThreads = 128; ///< 4 warps of 16 query rows

/// Head dims with a tensor-core attention kernel: whole k8 steps of Q K^T
/// and n8 tiles of P V (HD % 8 == 0), and at most 128 (the accumulators of
/// a thread stay in registers).
template <int HD>
constexpr bool attentionTcHeadDim = HD > 0 && HD % 8 == 0 && HD <= 128;

/// The launch bounds' minimum CTAs per SM of attentionTcKernel: 2 below head
/// dim 32 (ptxas's own allocation spilled 4-12 bytes at head dims 16 and 24
/// on bf16 inputs), none (0) from 32 on, where its allocation spills nothing
/// with fewer registers (an explicit bound takes head dim 64 from 145 to 209
/// registers and makes 128 spill).
constexpr int attnTcMinBlocks(int hd) { return hd < 32 ? 2 : 0; }

/// Shared memory of attentionTcKernel (floats). Q (scaled), K and V tiles
/// are [row][LD] with LD = HD + 4 = 4 (mod 8): the fragment reads (8 rows g
/// x 4 columns t of Q and K; rows 2t, 2t + 1 x 8 columns g of V) fall on 32
/// different banks, and every row starts 16-byte aligned for cp.async.
/// Key positions are double-buffered: tile t + 1's are written while tile
/// t's are read by the softmax.
template <int HD> struct AttnTcSmem {
  static constexpr int LD = HD + 4;
  static_assert(LD % 8 == 4, "conflict-free stride");
  static constexpr int Q = 0;
  static constexpr int K = Q + kAttnBQ * LD;
  static constexpr int V = K + kAttnBKV * LD;
  static constexpr int KPos = V + kAttnBKV * LD; // int32 [2][BKV]
  static constexpr int Floats = KPos + 2 * kAttnBKV;
  static constexpr size_t Bytes = size_t(Floats) * sizeof(float);
};

/// The tensor-core twin of attentionKernel (same grid, arguments, masking
/// and online softmax): CTA (query tile of 64, head, segment) of 4 warps,
/// warp w owning query rows 16w .. 16w + 15 (lane: rows g, g + 8 with g =
/// lane / 4, t = lane % 4).
///  - S = Q K^T: per k8 step of the head dim, mma3xTf32 over the warp's
///    16 x 64 scores (8 n8 tiles) from Qs and Ks, in f32 registers;
///  - masking (pos[key] > pos[query] -> -inf) and the online softmax in f32
///    registers: row max over the quad (two shuffles), the running sums kept
///    per lane and added over the quad at the end;
///  - O += P V from the score registers, no shared round trip: the C
///    fragment of lane (g, t) holds keys 2t, 2t + 1 of its rows, used as A
///    columns t and t + 4 of the mma, with V rows 2t and 2t + 1 as B rows t
///    and t + 4 (the keys of a k8 step permuted, which the sum ignores);
///  - K and V tiles are copied with cp.async (16 bytes when k and v are
///    16-byte aligned, else 4) into one buffer each, as two copy groups:
///    tile t + 1's keys are copied during the softmax and P V of tile t,
///    its values during the next Q K^T.
/// A warp whose rows all precede the tile's first key (or that has no rows)
/// skips the tile's math but not its barriers.
/// BF: q, k, v hold bf16 values (a bf16 model), which tf32 holds exactly:
/// the mmas of their zero lo parts are skipped (Q K^T: one mma instead of
/// three where the scaled queries stay bf16, i.e. 1/sqrt(HD) is a power of
/// two; P V: two), with the same result.
template <int H, int HD, bool BF, typename Out>
__global__ __launch_bounds__(kAttnTcThreads, attnTcMinBlocks(HD)) void attentionTcKernel(
    const float *__restrict__ q, const float *__restrict__ k,
    const float *__restrict__ v, const int64_t *seg, const int32_t *pos,
    Out *__restrict__ out) {
  static_assert(attentionTcHeadDim<HD>, "head dim of the tensor-core kernel");
  using L = AttnTcSmem<HD>;
  constexpr int BQ = kAttnBQ, BKV = kAttnBKV, LDS = L::LD;
  constexpr int NT = BKV / 8;                 // n8 score tiles of a warp
  constexpr int DT = HD / 8;                  // k8 steps of S, n8 tiles of O
  constexpr int D1 = DT < 8 ? DT : 8;         // O tiles in the first batch
  constexpr int D2 = DT - D1;                 // and in the second
  constexpr int64_t LD = int64_t(H) * HD;
  constexpr int32_t kNoPos = 0x7fffffff;
  // Whether q * 1/sqrt(HD) is bf16 when q is: HD a power of 4.
  constexpr bool kScaleExact = (HD & (HD - 1)) == 0 && (HD & 0x55555555) != 0;
  constexpr bool kSplitQ = !(BF && kScaleExact), kSplitKV = !BF;
  const int64_t s = blockIdx.z;
  const int h = blockIdx.y;
  const int64_t base = seg[s], n = seg[s + 1] - base;
  // Later query tiles see more keys: they get the lower block indices.
  const int64_t i0 = int64_t(gridDim.x - 1 - blockIdx.x) * BQ;
  if (i0 >= n)
    return;
  const int qn = int(minI64(BQ, n - i0));

  MODC_DYNAMIC_SHARED(float, smem);
  float *Qs = smem + L::Q, *Ks = smem + L::K, *Vs = smem + L::V;
  int32_t *kposBuf = reinterpret_cast<int32_t *>(smem + L::KPos);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane >> 2, tg = lane & 3;
  const int wr = warp * 16; // the warp's first query row
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  const int32_t *ps = pos + base;
  const int64_t hoff = int64_t(h) * HD;
  const bool vec = aligned16(k, v);

  // Starts the copy of the key (or value) rows k0 .. k0 + kc of this head
  // into dst (zero past kc) as one copy group.
  static_assert(LDS == HD + 4, "copyHeadRows's row stride");
  auto copyTile = [&](float *dst, const float *src, int64_t k0, int kc) {
    copyHeadRows<H, HD, BKV, kAttnTcThreads>(dst, src, base + k0, hoff, kc,
                                             vec);
    copyAsyncCommit();
  };
  auto copyKeys = [&](int64_t k0, int buf) {
    const int kc = int(minI64(BKV, n - k0));
    copyTile(Ks, k, k0, kc);
    for (int c = tid; c < BKV; c += kAttnTcThreads)
      kposBuf[buf * BKV + c] = c < kc ? ps[k0 + c] : kNoPos;
  };
  auto copyValues = [&](int64_t k0) {
    copyTile(Vs, v, k0, int(minI64(BKV, n - k0)));
  };

  copyKeys(0, 0);
  copyValues(0);
  const float *qh = q + (base + i0) * LD + hoff;
  for (int e = tid; e < BQ * HD; e += kAttnTcThreads) {
    const int r = e / HD, d = e % HD;
    Qs[r * LDS + d] = r < qn ? qh[int64_t(r) * LD + d] * scale : 0.0f;
  }

  // Positions of this lane's rows; rows past qn see every key (unused).
  const int32_t lastPos = ps[i0 + qn - 1];
  int32_t qp[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    qp[hh] = r < qn ? ps[i0 + r] : kNoPos;
  }
  const bool warpRows = wr < qn;
  const int32_t warpMaxPos = wr + 15 < qn ? ps[i0 + wr + 15] : kNoPos;

  float o1[1][D1][4], o2[1][D2 > 0 ? D2 : 1][4], mrow[2], lrow[2];
  zeroFragments(o1);
  zeroFragments(o2);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    mrow[hh] = -INFINITY;
    lrow[hh] = 0.0f;
  }

  // Positions ascend within a segment: the keys to visit are a prefix.
  int64_t k0 = 0;
  for (int t = 0;; ++t) {
    const int64_t k1 = k0 + BKV;
    const bool more = k1 < n && ps[k1] <= lastPos;
    copyAsyncWait<1>(); // this tile's keys are in (its values may not be)
    __syncthreads();    // ... for every thread (and Qs is written)
    const int32_t *kpos = kposBuf + (t & 1) * BKV;
    const bool active = warpRows && kpos[0] <= warpMaxPos;

    float sc[1][NT][4];
    zeroFragments(sc);
    if (active) // fully unrolled
      addRowProducts<HD, NT, kSplitQ, kSplitKV, DT>(sc, Qs + wr * LDS, Ks);
    __syncthreads(); // every warp has read this tile's keys
    if (more)
      copyKeys(k1, (t + 1) & 1);

    if (active) {
      // Masking and the online softmax; column 8j + 2t + (e & 1), row
      // g + 8 (e >> 1). Key 0 of the segment is seen by every row, so the
      // first tile makes the running max finite (the guard is for safety).
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kpos[8 * j + 2 * tg + (e & 1)] > qp[e >> 1])
            sc[0][j][e] = -INFINITY;
          mx[e >> 1] = fmaxf(mx[e >> 1], sc[0][j][e]);
        }
      float msub[2], alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
        const float mnew = fmaxf(mrow[hh], mx[hh]);
        msub[hh] = mnew == -INFINITY ? 0.0f : mnew;
        alpha[hh] = expf(mrow[hh] - msub[hh]);
        mrow[hh] = mnew;
      }
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = expf(sc[0][j][e] - msub[e >> 1]);
          sc[0][j][e] = p;
          rs[e >> 1] += p;
        }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh)
        lrow[hh] = lrow[hh] * alpha[hh] + rs[hh];
#pragma unroll
      for (int j = 0; j < D1; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o1[0][j][e] *= alpha[e >> 1];
      if constexpr (D2 > 0) {
#pragma unroll
        for (int j = 0; j < D2; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            o2[0][j][e] *= alpha[e >> 1];
      }
    }

    if (more)
      copyAsyncWait<1>(); // this tile's values are in (the next keys may not be)
    else
      copyAsyncWait<0>();
    __syncthreads();

    if (active) {
      // O += P V, k8 step kb over keys 8kb .. 8kb + 7 (masked keys have
      // p = 0; keys past the segment have zero values).
#pragma unroll
      for (int kb = 0; kb < NT; ++kb) {
        auto fragP = [&](int, float (&f)[4]) {
          f[0] = sc[0][kb][0]; // row g,     key 2t     -> A column t
          f[1] = sc[0][kb][2]; // row g + 8, key 2t
          f[2] = sc[0][kb][1]; // row g,     key 2t + 1 -> A column t + 4
          f[3] = sc[0][kb][3]; // row g + 8, key 2t + 1
        };
        const float *vr = Vs + (8 * kb + 2 * tg) * LDS + g;
        auto fragV1 = [&](int j, float (&f)[2]) {
          f[0] = vr[8 * j];
          f[1] = vr[LDS + 8 * j];
        };
        mma3xTf32<1, D1, true, kSplitKV>(o1, fragP, fragV1);
        if constexpr (D2 > 0) {
          auto fragV2 = [&](int j, float (&f)[2]) {
            f[0] = vr[8 * (D1 + j)];
            f[1] = vr[LDS + 8 * (D1 + j)];
          };
          mma3xTf32<1, D2, true, kSplitKV>(o2, fragP, fragV2);
        }
      }
    }
    if (!more)
      break;
    __syncthreads(); // every warp has read this tile's values
    copyValues(k1);
    k0 = k1;
  }

#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    lrow[hh] += __shfl_xor_sync(0xffffffffu, lrow[hh], 1);
    lrow[hh] += __shfl_xor_sync(0xffffffffu, lrow[hh], 2);
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = wr + g + 8 * hh;
    if (r >= qn)
      continue;
    const float inv = 1.0f / lrow[hh];
    Out *dst = out + (base + i0 + r) * LD + hoff + 2 * tg;
#pragma unroll
    for (int j = 0; j < D1; ++j) {
      dst[8 * j] = Out(o1[0][j][2 * hh] * inv);
      dst[8 * j + 1] = Out(o1[0][j][2 * hh + 1] * inv);
    }
    if constexpr (D2 > 0) {
#pragma unroll
      for (int j = 0; j < D2; ++j) {
        dst[8 * (D1 + j)] = Out(o2[0][j][2 * hh] * inv);
        dst[8 * (D1 + j) + 1] = Out(o2[0][j][2 * hh + 1] * inv);
      }
    }
  }
}

/// Launches the tensor-core attention kernel (TC; BF: on bf16 inputs) or
/// the SIMT one; only the chosen kernel is instantiated.
template <bool TC, int H, int HD, bool BF, typename Out>
inline void launchAttention(dim3 grid, const float *q, const float *k,
                            const float *v, const int64_t *seg,
                            const int32_t *pos, Out *out,
                            cudaStream_t stream) {
  auto kern = [] {
    if constexpr (TC)
      return attentionTcKernel<H, HD, BF, Out>;
    else
      return attentionKernel<H, HD, Out>;
  }();
  constexpr size_t bytes = [] {
    if constexpr (TC)
      return AttnTcSmem<HD>::Bytes;
    else
      return AttnSmem<HD>::Bytes;
  }();
  static bool configured = false; // the attribute is per function
  if (!configured) {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(bytes));
    configured = true;
  }
  MODC_LAUNCH(kern, grid, TC ? kAttnTcThreads : kThreads, bytes, stream, q, k,
              v, seg, pos, out);
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Host wrappers
//===----------------------------------------------------------------------===//

/// modc_cuda_params_version: the caller's version of the parameters (0:
/// unknown, every forward call rounds the weights again).
inline void declare_params_version(uint64_t version) {
  detail::WeightCopies &w = detail::weightCopies();
  if (version != w.version)
    ++w.generation;
  w.version = version;
}

/// The parameters were written (an AdamW step): no copy is current.
inline void params_written() { ++detail::weightCopies().generation; }

/// Opened by a forward entry for its call: the bf16 products that TMA feeds
/// read bf16 copies of their weights rounded in this call, or at the
/// declared parameters' current generation (detail::weightCopyFor). Copies
/// no call has used for a while are freed.
struct WeightCopyScope {
  WeightCopyScope() {
    detail::WeightCopies &w = detail::weightCopies();
    ++w.epoch;
    w.open = true;
  }
  ~WeightCopyScope() {
    detail::WeightCopies &w = detail::weightCopies();
    w.open = false;
    auto idle = [&](const detail::WeightCopy &c) {
      return w.epoch - c.epoch >= detail::kWeightCopyIdleCalls;
    };
    for (detail::WeightCopy &c : w.copies)
      if (idle(c))
        cudaFree(c.copy);
    w.copies.erase(std::remove_if(w.copies.begin(), w.copies.end(), idle),
                   w.copies.end());
  }
  WeightCopyScope(const WeightCopyScope &) = delete;
  WeightCopyScope &operator=(const WeightCopyScope &) = delete;
};

/// y[m, n] = sum_k a[m, k] w[n, k] for m < *rows; w is [N, K]. BF16 (here
/// and in every product below): both operands rounded to bf16, f32
/// accumulation (a bf16 model).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA, typename TC>
inline void linear(const TA *a, const int64_t *rows, int64_t max_rows,
                   const float *w, TC *y, cudaStream_t stream) {
  detail::linearEpi<N, K, detail::EpiStore, BF16, PLAN>(a, rows, max_rows, w,
                                                        nullptr, y, stream);
}

/// y = residual + a w^T (residual may be y).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA>
inline void linear_residual(const TA *a, const int64_t *rows,
                            int64_t max_rows, const float *w,
                            const float *residual, float *y,
                            cudaStream_t stream) {
  detail::linearEpi<N, K, detail::EpiAdd, BF16, PLAN>(a, rows, max_rows, w,
                                                      residual, y, stream);
}

/// y = gelu(a w^T), exact GELU.
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA, typename TC>
inline void linear_gelu(const TA *a, const int64_t *rows, int64_t max_rows,
                        const float *w, TC *y, cudaStream_t stream) {
  detail::linearEpi<N, K, detail::EpiGelu, BF16, PLAN>(a, rows, max_rows, w,
                                                       nullptr, y, stream);
}

/// gate_scratch = a w_gate^T; y = silu(gate_scratch) * (a w_up^T), the CPU's
/// linear + linear + swiglu (gate_scratch keeps the gate pre-activation).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA, typename TC>
inline void linear_swiglu(const TA *a, const int64_t *rows, int64_t max_rows,
                          const float *w_gate, const float *w_up,
                          float *gate_scratch, TC *y, cudaStream_t stream) {
  detail::linearEpi<N, K, detail::EpiStore, BF16, PLAN>(
      a, rows, max_rows, w_gate, nullptr, gate_scratch, stream);
  detail::linearEpi<N, K, detail::EpiSwiglu, BF16, PLAN>(
      a, rows, max_rows, w_up, gate_scratch, y, stream);
}

/// da[m, k] (+)= sum_n dy[m, n] w[n, k] for m < *rows. In a bf16 product
/// dy may be stored as bf16 (modk-store-bf16).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TD = float>
inline void linear_dgrad(const TD *dy, const int64_t *rows, int64_t max_rows,
                         const float *w, float *da, bool accumulate,
                         cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  if (accumulate)
    detail::launchGemm<PLAN, true, false, 1, detail::EpiAdd, BF16>(
        dy, N, w, K, da, K, da, max_rows, K, N, rows, stream);
  else
    detail::launchGemm<PLAN, true, false, 1, detail::EpiStore, BF16>(
        dy, N, w, K, da, K, nullptr, max_rows, K, N, rows, stream);
}

/// dw[n, k] += sum_{m < *rows} dy[m, n] a[m, k]; one CTA per output tile
/// reduces over all rows (deterministic, no atomics). The overload with
/// scratch below splits the rows where the output has few tiles. In a bf16
/// product `dy` and `a` may be stored as bf16 (modk-store-bf16).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA = float, typename TD = float>
inline void linear_wgrad(const TD *dy, const int64_t *rows, int64_t max_rows,
                         const TA *a, float *dw, cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  // L: the rows' bound (the kernels read the count on the device; the TMA
  // kernel's maps reach the bound).
  detail::launchGemm<PLAN, false, false, 2, detail::EpiAdd, BF16>(
      dy, N, a, K, dw, K, dw, N, K, max_rows, rows, stream);
}

/// Floats of scratch the split linear_wgrad needs for at most max_rows rows
/// (0 where the shapes do not split).
template <int N, int K, typename PLAN = DefaultGemmPlan>
inline int64_t linear_wgrad_scratch_floats(int64_t max_rows) {
  const detail::WgradSplit s = detail::wgradSplit<N, K, PLAN>(max_rows);
  return s.splits > 1 ? s.splits * int64_t(N) * K : 0;
}

/// linear_wgrad with the rows split in chunks where the output has few tiles
/// (detail::wgradSplit, from N, K and max_rows): chunk z's partial product
/// goes to scratch[z * N * K ..], then one kernel adds the partials of the
/// chunks that hold rows to dw in chunk order (deterministic: the result
/// depends on *rows and max_rows, never on the run). `scratch`:
/// linear_wgrad_scratch_floats<N, K>(max_rows) floats (null: no split).
template <int N, int K, bool BF16 = false, typename PLAN = DefaultGemmPlan,
          typename TA = float, typename TD = float>
inline void linear_wgrad(const TD *dy, const int64_t *rows, int64_t max_rows,
                         const TA *a, float *dw, float *scratch,
                         cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  const detail::WgradSplit s = detail::wgradSplit<N, K, PLAN>(max_rows);
  if (s.splits <= 1 || scratch == nullptr) {
    linear_wgrad<N, K, BF16, PLAN>(dy, rows, max_rows, a, dw, stream);
    return;
  }
  detail::launchGemm<PLAN, false, false, 3, detail::EpiStore, BF16>(
      dy, N, a, K, scratch, K, nullptr, N, K, s.chunk, rows, stream,
      unsigned(s.splits), max_rows);
  auto k = detail::splitSumKernel;
  MODC_LAUNCH(k, detail::strideGrid(int64_t(N) * K), detail::kThreads, 0,
              stream, scratch, int64_t(N) * K, s.splits, s.chunk, rows, dw);
}

/// Rotary embedding in place on x[rows, H * HD] at positions pos (the CPU's
/// ropeRotate: rotate-half per head, angles in double). RoundBf16: then
/// rounded to bf16 (rope then round_bf16 in one pass).
template <int H, int HD, bool RoundBf16 = false>
inline void rope(float *x, const int64_t *rows, int64_t max_rows,
                 const int32_t *pos, float theta, cudaStream_t stream) {
  if (max_rows <= 0)
    return;
  auto k = detail::ropeKernel<H, HD, RoundBf16>;
  MODC_LAUNCH(k, unsigned(max_rows), 64, 0, stream, x, rows, pos, theta);
}

/// y = rope(a w^T), w is [H * HD, K], at positions pos[i] in [0,
/// positions) (a sequence's). BF16: bf16 operands, and y (the queries or
/// keys of a bf16 model) rounded to bf16 after the rotation. The rotation is
/// the GEMM's epilogue, reading the angle table, where the product's tile
/// holds whole heads in each warp (HD a multiple of 16 that divides a
/// warp's columns: the wgmma and TMA tiles up to 128, the mma.sync tiles up
/// to 16 or 32), else (or with no table) a second kernel.
template <int H, int HD, int K, bool BF16 = false,
          typename PLAN = DefaultGemmPlan, typename TA>
inline void linear_rope(const TA *a, const int64_t *rows, int64_t max_rows,
                        const float *w, const int32_t *pos, float theta,
                        int32_t positions, float *y, cudaStream_t stream) {
  if constexpr (HD % 16 == 0) {
    detail::EpiArgs epi;
    epi.pos = pos;
    epi.ropeTable = detail::ropeTableFor<HD>(theta, positions, stream);
    epi.ropePositions = positions;
    if (epi.ropeTable &&
        detail::linearEpi<H * HD, K, detail::epiRope<HD, BF16>(), BF16, PLAN>(
            a, rows, max_rows, w, epi, y, stream)) {
      ++detail::fusedRopeLaunches();
      return;
    }
  }
  linear<H * HD, K, BF16, PLAN>(a, rows, max_rows, w, y, stream);
  rope<H, HD, BF16>(y, rows, max_rows, pos, theta, stream);
}

/// y = bf16(a w^T) with bf16 operands: the values of a bf16 model (linear
/// then round_bf16 in one pass).
template <int N, int K, typename PLAN = DefaultGemmPlan, typename TA>
inline void linear_to_bf16(const TA *a, const int64_t *rows,
                           int64_t max_rows, const float *w, float *y,
                           cudaStream_t stream) {
  detail::linearEpi<N, K, detail::EpiStoreBf16, true, PLAN>(
      a, rows, max_rows, w, nullptr, y, stream);
}

namespace detail {
/// Launches an elementwise kernel(args...) over at most max_rows rows of N
/// (a grid-stride loop; the kernel reads the row count on the device).
template <int N, typename Kernel, typename... Args>
inline void launchRowsOfN(Kernel kernel, int64_t max_rows, cudaStream_t stream,
                          Args... args) {
  if (max_rows <= 0)
    return;
  MODC_LAUNCH(kernel, strideGrid(max_rows * N), kThreads, 0, stream, args...);
}
} // namespace detail

/// x[rows, N] rounded to bf16 in place (the query, key and value rows of a
/// bf16 model): the CPU's round_bf16.
template <int N>
inline void round_bf16(float *x, const int64_t *rows, int64_t max_rows,
                       cudaStream_t stream) {
  detail::launchRowsOfN<N>(detail::roundBf16Kernel<N>, max_rows, stream, x,
                           rows);
}

/// out[i] = table[tokens[i]] for i < n (n a host count); table is [V, D].
template <int D>
inline void embed(const int32_t *tokens, int64_t n, const float *table,
                  float *out, cudaStream_t stream) {
  if (n <= 0)
    return;
  auto k = detail::embedKernel<D>;
  MODC_LAUNCH(k, detail::strideGrid(n * D), detail::kThreads, 0, stream, tokens,
              n, table, out);
}

/// dst[rows, N] = src rounded to bf16 (modk_cpu::store_rows into bf16: what
/// the products read), by the kernel that rounds the weights' copies.
/// `rows` is known on the host (a whole buffer).
template <int N>
inline void store_rows(const float *src, int64_t rows, bf16 *dst,
                       cudaStream_t stream) {
  if (rows <= 0)
    return;
  MODC_LAUNCH(detail::roundToBf16Kernel, detail::strideGrid(rows * N),
              detail::kThreads, 0, stream, src, dst, rows * N);
}

/// pos[b*S + i] = i, seg[b] = b*S (B + 1 entries).
template <int S>
inline void identity_segments(int64_t B, int32_t *pos, int64_t *seg,
                              cudaStream_t stream) {
  auto k = detail::identityKernel<S>;
  MODC_LAUNCH(k, detail::strideGrid(B * S + B + 1), detail::kThreads, 0, stream,
              B, pos, seg);
}

/// r[t] = w . x[t] for the B*S rows of x[B*S, D].
template <int S, int D>
inline void router_logits(const float *x, int64_t B, const float *w, float *r,
                          cudaStream_t stream) {
  if (B <= 0)
    return;
  auto k = detail::routerKernel<D>;
  MODC_LAUNCH(k, unsigned(ceilDiv(B * S, detail::kRowWarps)), detail::kThreads,
              0, stream, x, B * S, w, r);
}

/// Top-k routing with the CPU's selection and tie-breaking: per sequence the
/// K largest r (ties to the lower position, NaN below every number), in
/// ascending position at pos[b*K ..]; seg[b] = b*K (B + 1 entries); mask.
template <int S, int K>
inline void select_topk(const float *r, int64_t B, int32_t *pos, int64_t *seg,
                        int32_t *mask, cudaStream_t stream) {
  if (B <= 0) {
    cudaMemsetAsync(seg, 0, sizeof(int64_t), stream);
    return;
  }
  auto k = detail::topkKernel<S, K>;
  MODC_LAUNCH(k, unsigned(B), detail::kThreads, 0, stream, r, B, pos, seg,
              mask);
}

/// Causal routing: token (b, i) routed iff logits[b*S + i] > 0; routed rows
/// of all sequences packed in order (pos), seg the prefix (B + 1 entries;
/// seg[B] is the routed count), mask the 0/1 decisions.
template <int S>
inline void select_causal(const float *logits, int64_t B, int32_t *pos,
                          int64_t *seg, int32_t *mask, cudaStream_t stream) {
  auto k = detail::causalSelectKernel<S>;
  MODC_LAUNCH(k, 1, detail::kThreads, 0, stream, logits, B, pos, seg, mask);
}

/// Causal-routing predictor on n (host) rows: hidden = silu(x fc1_w^T +
/// fc1_b), out = hidden . fc2_w + fc2_b.
template <int D, int HID, typename PLAN = DefaultGemmPlan>
inline void predictor(const float *x, int64_t n, const float *fc1_w,
                      const float *fc1_b, const float *fc2_w,
                      const float *fc2_b, float *hidden, float *out,
                      cudaStream_t stream) {
  if (n <= 0)
    return;
  detail::linearEpi<HID, D, detail::EpiBiasSilu, false, PLAN>(
      x, nullptr, n, fc1_w, fc1_b, hidden, stream);
  auto k = detail::predictorOutKernel<HID>;
  MODC_LAUNCH(k, unsigned(ceilDiv(n, detail::kRowWarps)), detail::kThreads, 0,
              stream, hidden, n, fc2_w, fc2_b, out);
}

/// Causal multi-head attention over segments (the CPU's causal_attention):
/// q, k, v, out are [rows, H * HD], rows = seg[nseg]; row i attends to the
/// rows j of its segment with pos[j] <= pos[i], scale 1/sqrt(HD).
/// `max_seg_rows` bounds the rows of one segment (S, or K for a top-k row
/// set) and sizes the grid. Runs attentionTcKernel (tensor cores, 3xTF32)
/// where TensorCores (the compiler's mainloop choice) and
/// attentionTcHeadDim<HD> allow, else attentionKernel (SIMT f32). BF16: q, k, v
/// hold bf16 values (a bf16 model); the result is the same, with fewer
/// tensor-core instructions. out: float, or bf16 (rounded) where only
/// products read it.
template <int H, int HD, bool BF16 = false, bool TensorCores = true,
          typename Out>
inline void causal_attention(const float *q, const float *k, const float *v,
                             int64_t nseg, const int64_t *seg,
                             const int32_t *pos, int64_t max_seg_rows,
                             Out *out, cudaStream_t stream) {
  if (nseg <= 0 || max_seg_rows <= 0)
    return;
  const dim3 grid(unsigned(ceilDiv(max_seg_rows, detail::kAttnBQ)), unsigned(H),
                  unsigned(nseg));
  if constexpr (TensorCores && detail::attentionTcHeadDim<HD>) {
    detail::launchAttention<true, H, HD, BF16>(grid, q, k, v, seg, pos, out,
                                               stream);
  } else {
    detail::launchAttention<false, H, HD, false>(grid, q, k, v, seg, pos, out,
                                                 stream);
  }
}

/// Prefill of a layer's decode cache (the CPU's cache_append): row j of
/// sequence s goes to cache slot counts while pos[j] < lengths[s]; counts[s]
/// ends as the number appended. k, v are [rows, D]; the caches [nseg, S, D]
/// of C: float, or bf16 (a bf16 model: k and v hold bf16 values).
template <int S, int D, typename C>
inline void cache_append(const float *k, const float *v, int64_t nseg,
                         const int64_t *seg, const int32_t *pos,
                         const int32_t *lengths, C *cache_k, C *cache_v,
                         int32_t *counts, cudaStream_t stream) {
  if (nseg <= 0)
    return;
  auto kern = detail::cacheAppendKernel<S, D, C>;
  MODC_LAUNCH(kern,
              dim3(unsigned(ceilDiv(S, detail::kRowWarps)), unsigned(nseg)),
              detail::kThreads, 0, stream, k, v, seg, pos, lengths, cache_k,
              cache_v, counts);
}

} // namespace modk_cuda

#endif // MODC_CUDA_KERNELS_INCLUDED
