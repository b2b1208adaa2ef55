//===- GemmTiles.cuh - The CUDA GEMM mainloops -------------------*- CUDA -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The hand-written GEMM mainloops of modc's CUDA target, one kernel family
/// with an index map per operand layout and an epilogue parameter: a tiled
/// SIMT f32 kernel, mma.m16n8k8 on tf32 with the 3xTF32 split (and on bf16
/// operands), warpgroup wgmma (sm_90a), and a persistent warp-specialised
/// wgmma kernel fed by TMA; the GemmPlan dispatch that runs the variant the
/// compiler chose (modk-configure-gemms, docs/cuda.md) and the weight
/// gradient's deterministic row split. What runs around them (row kernels,
/// routing, the epilogues' math outside the tile) is generated or lives in
/// the prelude (Cuda/prelude). A package pastes this file after
/// CudaCommon.cuh and before the preludes.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_CUDA_GEMM_TILES_INCLUDED
#define MODC_CUDA_GEMM_TILES_INCLUDED

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

//===----------------------------------------------------------------------===//
// GEMM: C[m, n] = epilogue(sum_l A(m, l) B(l, n))
//===----------------------------------------------------------------------===//

/// Epilogues of the GEMM (idx = m * ldc + n):
enum Epilogue {
  EpiStore = 0,    ///< C = acc
  EpiAdd = 1,      ///< C = aux[idx] + acc (aux may be C: accumulate)
  /// From here to EpiRowsEnd, epiRows<I>(): a generated epilogue
  /// (modk.gemm's `rows` epilogue): RowsEpilogue<I>::store(acc, epi, m, n)
  /// finishes each element and writes it where its math says (C unused).
  EpiRowsFirst = 32,
  EpiRowsEnd = 64,
};

template <int I> __host__ __device__ constexpr int epiRows() {
  static_assert(I >= 0 && I < EpiRowsEnd - EpiRowsFirst,
                "generated epilogues are numbered below 32");
  return EpiRowsFirst + I;
}
__host__ __device__ constexpr bool isEpiRows(int epi) {
  return epi >= EpiRowsFirst && epi < EpiRowsEnd;
}

/// The generated epilogue I of a package: a struct with `kHeadDim` and
/// `static __device__ void store(float acc, const EpiArgs epi, int64_t m,
/// int64_t n)` for the element at row m, column n of the product. With
/// kHeadDim = HD > 0 (RoPE: modk.rows with head_dim) it pairs columns
/// instead: `storePair(acc0, acc1, epi, m, n)` finishes columns n and
/// n + HD/2 of a head (n in its first half) together; only tiles whose
/// warps hold whole heads take it (epilogueFits). modc writes one
/// specialization per distinct `rows` epilogue.
template <int I> struct RowsEpilogue;

/// The head width of epilogue EPI where it pairs a head's columns
/// (RowsEpilogue<I>::kHeadDim), else 0.
template <int EPI> __host__ __device__ constexpr int epiHeadDim() {
  if constexpr (isEpiRows(EPI))
    return RowsEpilogue<EPI - EpiRowsFirst>::kHeadDim;
  else
    return 0;
}

/// Buffer slots of a generated epilogue in EpiArgs (modc checks its
/// epilogues against the same number; each RowsEpilogue asserts it).
constexpr int kEpiOperands = 8;

/// What an epilogue reads besides the accumulator. A plain pointer converts
/// to it (the aux of the elementwise epilogues). Device code takes it by
/// value: a reference to the kernel parameter would copy it to the stack.
struct EpiArgs {
  /// EpiAdd: per output element.
  const float *aux = nullptr;
  /// RoPE: the position of each row, below ropePositions, and the (cos,
  /// sin) table of positions 0 .. ropePositions - 1 (ropeTableFor).
  const int32_t *pos = nullptr;
  const float2 *ropeTable = nullptr;
  int32_t ropePositions = 0;
  /// A generated epilogue (isEpiRows): the row set's segments (nseg + 1
  /// entries) for the rows' sequences, `pos` for their tokens, and its
  /// buffers, in the slots its RowsEpilogue reads.
  const int64_t *seg = nullptr;
  int64_t nseg = 0;
  void *operands[kEpiOperands] = {};
  EpiArgs() = default;
  EpiArgs(const float *aux) : aux(aux) {}
};

/// The most products one grouped launch runs (modk-group-gemms'
/// max-members): the table below is a kernel parameter.
constexpr int kMaxGemmGroup = 16;

/// A grouped launch's products (modk.gemm's `group`): member z's input,
/// weight, output, row count and epilogue buffers; the grid's z picks the
/// member. The members share their shapes and their kernel.
template <int G, typename TA, typename TB, typename TC> struct GemmGroup {
  static_assert(G >= 1 && G <= kMaxGemmGroup, "1 to kMaxGemmGroup members");
  const TA *a[G] = {};
  const TB *b[G] = {};
  TC *c[G] = {};
  const int64_t *rows[G] = {};
  EpiArgs epi[G];
};

/// The angle of pair j at position p from the epilogue's table. Positions
/// are below the table's length (a sequence's; clamped only so
/// that a broken contract cannot read outside the table). No angle is
/// computed here: the double-precision sin and cos would take the GEMM's
/// registers (spills on the small TMA tile).
template <int HD>
__device__ __forceinline__ float2 ropeAngleAt(const EpiArgs epi, int32_t p,
                                              int j) {
  p = p < 0 ? 0 : (p < epi.ropePositions ? p : epi.ropePositions - 1);
  return epi.ropeTable[int64_t(p) * (HD / 2) + j];
}

/// The epilogue applied to acc, the sum at output idx; not a generated
/// one (RowsEpilogue).
template <int EPI>
__device__ __forceinline__ float gemmEpilogue(float acc, const EpiArgs epi,
                                              int64_t idx) {
  static_assert(EPI == EpiStore || EPI == EpiAdd,
                "elementwise epilogues are EpiStore and EpiAdd");
  if (EPI == EpiAdd)
    return epi.aux[idx] + acc;
  return acc;
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
      (std::is_same<TC, bf16>::value && DYN != 3 && EPI == EpiStore);
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

/// A CTA's chunk z of the `count` chunks of a split reduction (DYN == 3):
/// blockIdx.z of gridDim.z in a single product's launch (splitOfGrid), the
/// member's own chunk in a grouped one.
struct SplitAt {
  int64_t z, count;
};

__device__ __forceinline__ SplitAt splitOfGrid() {
  return {int64_t(blockIdx.z), int64_t(gridDim.z)};
}

/// A grouped launch's member (GemmGroup) for this CTA, and its chunk of a
/// split reduction (DYN == 3): grid z is member * splits + chunk; without a
/// split, z is the member.
template <int DYN>
__device__ __forceinline__ int memberAt(int64_t splits, SplitAt &split) {
  if constexpr (DYN == 3) {
    split = {int64_t(blockIdx.z) % splits, splits};
    return int(int64_t(blockIdx.z) / splits);
  } else {
    split = {0, 1};
    return int(blockIdx.z);
  }
}

/// DYN == 3 of the GEMM kernels: the reduction rows 0 .. *dynRows split in
/// chunks of `chunk` rows (L, the kernel argument), chunk split.z of
/// split.count (the last chunk takes every row left). The kernel moves A
/// and B to the chunk's first row, k0 = z * chunk, and C to partial z
/// (C + z * M * ldc). Returns the chunk's length: <= 0 for a chunk past the
/// rows, whose CTAs write nothing (splitSumKernel does not read them).
__device__ __forceinline__ int64_t splitChunk(int64_t chunk,
                                              const int64_t *dynRows,
                                              const SplitAt split,
                                              int64_t &k0) {
  const int64_t z = split.z;
  k0 = z * chunk;
  const int64_t len = *dynRows - k0;
  return z + 1 < split.count ? minI64(len, chunk) : len;
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
        const int64_t *dynRows, const SplitAt split, int64_t &m0,
        int64_t &n0) {
  if (DYN == 1)
    M = *dynRows;
  if (DYN == 2)
    L = *dynRows;
  if (DYN == 3) {
    int64_t k0;
    L = splitChunk(L, dynRows, split, k0);
    A += AK ? k0 : k0 * lda;
    B += BKc ? k0 : k0 * ldb;
    C += split.z * M * ldc;
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
/// is the split reduction (splitChunk): the reduction length is *dynRows,
/// the L argument the chunk length, and CTA z of the grid's z dimension
/// writes its chunk's partial product. BF: the operands are rounded to bf16
/// as they enter shared memory (a bf16 model's products). TA, TB, TC: the
/// element types of A, B and C (gemmTypesOk).
template <typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__device__ __forceinline__ void gemmKernelBody(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows,
    const SplitAt split) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, TM = T::TM, TN = T::TN;
  constexpr int PAD = T::PAD, LA = T::LA, LB = T::LB;
  int64_t m0, n0;
  if (!gemmCta<AK, BKc, DYN, BM, BN>(A, lda, B, ldb, C, ldc, M, Ncols, L,
                                     dynRows, split, m0, n0))
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
      if constexpr (isEpiRows(EPI))
        RowsEpilogue<EPI - EpiRowsFirst>::store(acc[i][j], epi, m0 + r,
                                                n0 + c);
      else
        C[idx] = TC(gemmEpilogue<EPI>(acc[i][j], epi, idx));
    }
  }
}

template <typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  gemmKernelBody<T, AK, BKc, DYN, EPI, BF, TA, TB, TC>(
      A, lda, B, ldb, C, ldc, epi, M, Ncols, L, dynRows, splitOfGrid());
}

/// gemmKernel on a member of a group of G products (GemmGroup) and, for a
/// split reduction (DYN == 3), on one of its `splits` chunks: grid z is
/// member * splits + chunk (memberAt).
template <int G, typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmKernelGroup(
    const GemmGroup<G, TA, TB, TC> group, int64_t lda, int64_t ldb,
    int64_t ldc, int64_t M, int64_t Ncols, int64_t L, int64_t splits) {
  SplitAt split;
  const int z = memberAt<DYN>(splits, split);
  gemmKernelBody<T, AK, BKc, DYN, EPI, BF, TA, TB, TC>(
      group.a[z], lda, group.b[z], ldb, group.c[z], ldc, group.epi[z], M,
      Ncols, L, group.rows[z], split);
}

//===----------------------------------------------------------------------===//
// Tensor cores: mma.m16n8k8 on tf32 operands, f32 accuracy by 3xTF32
//===----------------------------------------------------------------------===//

/// cvt.rna.tf32.f32: x rounded to tf32 (10 mantissa bits, to nearest, ties
/// away from zero), returned as its f32 bit pattern (low 13 bits zero).
#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
#endif

/// The 3xTF32 split: x = hi + lo + O(2^-22 |x|), hi = tf32(x), lo = tf32(x -
/// hi) (x - hi is exact in f32).
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi,
                                           uint32_t &lo) {
  hi = tf32_rna(x);
  lo = tf32_rna(x - __uint_as_float(hi));
}

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
#if defined(__CUDACC__)
__device__ __forceinline__ void mma_tf32_m16n8k8(float d[4],
                                                 const uint32_t a[4],
                                                 const uint32_t b[2],
                                                 const float c[4]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%10, %11, %12, %13};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
#endif

/// One k8 step of a warp's MI x NI tiles of 16x8 in 3xTF32. fragA(i, a)
/// gives A fragment i (4 f32 registers), fragB(j, b) B fragment j (2); each
/// is split into tf32 hi + lo, and for each (i, j) t = a_lo b_hi + a_hi b_lo
/// + a_hi b_hi (three mma_tf32_m16n8k8 from zero, small terms first), then
/// acc += t. Summing the step apart from acc puts one f32 rounding per k8
/// step on the large accumulator instead of 24 (blocked summation, which
/// keeps the error below the SIMT kernel's; docs/cuda.md). On the GPU the B
/// fragments are split first and A one tile at a time (fewer live
/// registers; with MI = 1, A first and each B fragment at its mmas). The
/// emulation exchanges all the fragments at once (one
/// __syncwarp instead of 3 MI NI) and computes the same mmas in the same
/// order with the same lane arithmetic (test/cuda_emu/PtxEmulation.h).
/// SplitA = false (SplitB = false) says every A (B) value is a tf32 value
/// already (a bf16 one, say): its lo part is zero, and the mma of that lo
/// part is skipped, which leaves every sum as it was (its products are
/// zeros); both false: one mma instead of three.
#if defined(__CUDACC__)
template <int MI, int NI, bool SplitA = true, bool SplitB = true, typename FA,
          typename FB>
__device__ __forceinline__ void mma3xTf32(float (&acc)[MI][NI][4], FA fragA,
                                          FB fragB) {
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
}
#endif

//===----------------------------------------------------------------------===//
// Tensor cores on bf16 operands: mma.m16n8k8, f32 accumulators
//===----------------------------------------------------------------------===//

/// Two f32 values rounded to bf16 (to nearest, ties to even) and packed as
/// the .bf16x2 register of an mma fragment: lo in the low half.
#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
  __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&p);
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
#if defined(__CUDACC__)
__device__ __forceinline__ void mma_bf16_m16n8k8(float d[4],
                                                 const uint32_t a[2],
                                                 uint32_t b, const float c[4]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                 "f"(c[3]));
}
#endif

/// A shared-memory address as PTX takes it (the emulation: the pointer's low
/// 32 bits, which the emulated wgmma matches against its anchor).
#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
#endif

/// Asynchronous 4-byte copy global -> shared (cp.async, sm_80+), or zero
/// into *dst when !in (src-size 0: src is not read). The emulation copies at
/// once.
#if defined(__CUDACC__)
__device__ __forceinline__ void copyAsync4(float *dst, const float *src,
                                           bool in) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   sharedAddress(dst)),
               "l"(src), "r"(in ? 4 : 0));
}
#endif

/// Asynchronous 16-byte copy global -> shared (cp.async.cg, sm_80+; both
/// addresses 16-byte aligned), or 16 zero bytes into dst when !in (src is
/// not read). The emulation copies at once.
#if defined(__CUDACC__)
__device__ __forceinline__ void copyAsync16(float *dst, const float *src,
                                            bool in) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   sharedAddress(dst)),
               "l"(src), "r"(in ? 16 : 0));
}
#endif

#if defined(__CUDACC__)
__device__ __forceinline__ void copyAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
#endif

/// Waits until at most N committed copy groups of this thread are pending.
#if defined(__CUDACC__)
template <int N> __device__ __forceinline__ void copyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

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
/// BK reduction steps per shared tile (whole k8 steps: 16 on the small
/// tile, 8 on the large).
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
/// A generated epilogue over heads (epiHeadDim, RoPE) pairs column x of a
/// head with column x + HD / 2, which is fragment j + HD / 16 of the same
/// thread when the warp's NI * 8 columns are whole heads, starting at a
/// head, and HD is a multiple of 16 (epilogueFits): the pair is finished in
/// registers.
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
      if constexpr (epiHeadDim<EPI>() > 0) {
        constexpr int HD = epiHeadDim<EPI>(), Half = HD / 2;
        static_assert(NI * 8 % HD == 0, "a warp's columns are whole heads");
        static_assert(HD % 16 == 0, "a column's partner is n8 fragments away");
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
            RowsEpilogue<EPI - EpiRowsFirst>::storePair(
                acc[i][j][2 * h + e], acc[i][j + Half / 8][2 * h + e], epi,
                m0 + r, n0 + c);
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
            if constexpr (isEpiRows(EPI))
              RowsEpilogue<EPI - EpiRowsFirst>::store(acc[i][j][2 * h + e],
                                                      epi, m0 + r, n0 + c);
            else
              C[idx] = TC(gemmEpilogue<EPI>(acc[i][j][2 * h + e], epi, idx));
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
__device__ __forceinline__ void gemmTcKernelBody(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows,
    const SplitAt split) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK, MI = T::MI, NI = T::NI;
  constexpr int LA = T::LA, LB = T::LB;
  using SA = TcSmem<BM, BK, AK>;
  using SB = TcSmem<BN, BK, BKc>;
  int64_t m0, n0;
  // Whole CTAs only: every warp below runs the mma loop in full.
  if (!gemmCta<AK, BKc, DYN, BM, BN>(A, lda, B, ldb, C, ldc, M, Ncols, L,
                                     dynRows, split, m0, n0))
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

template <typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmTcKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  gemmTcKernelBody<T, AK, BKc, DYN, EPI, BF, TA, TB, TC>(
      A, lda, B, ldb, C, ldc, epi, M, Ncols, L, dynRows, splitOfGrid());
}

/// gemmTcKernel on a member (and chunk) of a group, as gemmKernelGroup.
template <int G, typename T, bool AK, bool BKc, int DYN, int EPI, bool BF,
          typename TA, typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmTcKernelGroup(
    const GemmGroup<G, TA, TB, TC> group, int64_t lda, int64_t ldb,
    int64_t ldc, int64_t M, int64_t Ncols, int64_t L, int64_t splits) {
  SplitAt split;
  const int z = memberAt<DYN>(splits, split);
  gemmTcKernelBody<T, AK, BKc, DYN, EPI, BF, TA, TB, TC>(
      group.a[z], lda, group.b[z], ldb, group.c[z], ldc, group.epi[z], M,
      Ncols, L, group.rows[z], split);
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
#if defined(__CUDACC__)
template <int N, bool TRANS_A = false, bool TRANS_B = false>
__device__ __forceinline__ void wgmmaBf16(float (&d)[N / 8][4], uint64_t descA,
                                          uint64_t descB, const void *anchor) {
  static_assert(N == 64 || N == 128, "wgmma widths of the GEMM tiles");
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
          MODC_WG_ACC8(8), MODC_WG_ACC8(10), MODC_WG_ACC8(12), MODC_WG_ACC8(14)
        : "l"(descA), "l"(descB), "n"(1), "n"(int(TRANS_A)), "n"(int(TRANS_B)));
}
#endif
#undef MODC_WG_ACC8

/// Keeps the compiler from moving accesses of the accumulators across the
/// wgmma fences (their registers are the asynchronous wgmma's meanwhile).
#if defined(__CUDACC__)
template <int J>
__device__ __forceinline__ void wgmmaPinAccumulators(float (&d)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      asm volatile("" : "+f"(d[j][x])::"memory");
}
#endif

/// Orders this warpgroup's earlier register and shared accesses before the
/// wgmmas that follow (wgmma.fence).
#if defined(__CUDACC__)
template <int J>
__device__ __forceinline__ void wgmmaFence(float (&d)[J][4]) {
  wgmmaPinAccumulators(d);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
#endif

/// Closes the group of wgmmas issued since the last commit.
#if defined(__CUDACC__)
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
#endif

/// Waits until at most PENDING committed wgmma groups are in flight; d is
/// then the wgmmas' result.
#if defined(__CUDACC__)
template <int PENDING, int J>
__device__ __forceinline__ void wgmmaWait(float (&d)[J][4]) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
  wgmmaPinAccumulators(d);
}
#endif

/// Makes this thread's shared stores visible to the async proxy (the wgmma
/// operand reads): after the stores, before the barrier that publishes them.
#if defined(__CUDACC__)
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

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
__device__ __forceinline__ void gemmWgKernelBody(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows,
    const SplitAt split) {
  constexpr int BM = T::BM, BN = T::BN, BK = T::BK;
  using SA = WgSmem<BM, BK>;
  using SB = WgSmem<BN, BK>;
  int64_t m0, n0;
  // Whole CTAs only: every warpgroup issues its wgmmas in full.
  if (!gemmCta<AK, BKc, DYN, BM, BN>(A, lda, B, ldb, C, ldc, M, Ncols, L,
                                     dynRows, split, m0, n0))
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

template <typename T, bool AK, bool BKc, int DYN, int EPI, typename TA,
          typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmWgKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  gemmWgKernelBody<T, AK, BKc, DYN, EPI, TA, TB, TC>(
      A, lda, B, ldb, C, ldc, epi, M, Ncols, L, dynRows, splitOfGrid());
}

/// gemmWgKernel on a member (and chunk) of a group, as gemmKernelGroup.
template <int G, typename T, bool AK, bool BKc, int DYN, int EPI, typename TA,
          typename TB, typename TC>
__global__ __launch_bounds__(kThreads, T::MINB) void gemmWgKernelGroup(
    const GemmGroup<G, TA, TB, TC> group, int64_t lda, int64_t ldb,
    int64_t ldc, int64_t M, int64_t Ncols, int64_t L, int64_t splits) {
  SplitAt split;
  const int z = memberAt<DYN>(splits, split);
  gemmWgKernelBody<T, AK, BKc, DYN, EPI, TA, TB, TC>(
      group.a[z], lda, group.b[z], ldb, group.c[z], ldc, group.epi[z], M,
      Ncols, L, group.rows[z], split);
}

/// Whether tile T can run epilogue EPI: RoPE rotates in registers, so each
/// warp's accumulator columns (T::WarpCols) must be whole heads, and a
/// column's partner HD / 2 further must be a whole n8 fragment away in the
/// same thread (storeAccumulators): HD a multiple of 16.
/// (if constexpr: nvcc warns of a zero divisor even in a branch not taken.)
template <int EPI, typename T> __host__ __device__ constexpr bool epilogueFits() {
  constexpr int head = epiHeadDim<EPI>();
  if constexpr (head == 0)
    return true;
  else
    return head % 16 == 0 && T::WarpCols > 0 && T::WarpCols % head == 0;
}

/// The epilogue's name in traces: a generated one over heads (RoPE) is
/// "rows over heads".
template <int EPI> constexpr const char *epilogueName() {
  return epiHeadDim<EPI>() > 0 ? "rows over heads"
         : isEpiRows(EPI)      ? "rows"
         : EPI == EpiStore     ? "store"
         : EPI == EpiAdd       ? "add"
                               : "?";
}

/// MODC_CUDA_TRACE_GEMMS=1 in the environment: each GEMM launch prints its
/// kernel, shape, tile and epilogue to stderr (which path a product took);
/// =2 also each rounding of a weight into its bf16 copy.
inline int tracingGemms() {
  static const int level = [] {
    const char *env = std::getenv("MODC_CUDA_TRACE_GEMMS");
    if (!env || !*env || std::strcmp(env, "0") == 0)
      return 0;
    return std::strcmp(env, "2") == 0 ? 2 : 1;
  }();
  return level;
}
inline void traceGemm(const char *path, int64_t M, int64_t Ncols, int64_t L,
                      int BM, int BN, const char *epilogue) {
  if (tracingGemms())
    std::fprintf(stderr,
                 "modc gemm: %s %lld x %lld x %lld, tile %d x %d, epilogue %s\n",
                 path, (long long)M, (long long)Ncols, (long long)L, BM, BN,
                 epilogue);
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
#if defined(__CUDACC__)
__device__ __forceinline__ void mbarrierInit(uint64_t *bar, unsigned count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sharedAddress(bar)),
      "r"(count)
      : "memory");
}
#endif

/// Makes initialised mbarriers visible to the async proxy (TMA), before the
/// barrier that publishes them.
#if defined(__CUDACC__)
__device__ __forceinline__ void fenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
#endif

/// This thread's arrival, announcing `bytes` that TMA copies will complete.
#if defined(__CUDACC__)
__device__ __forceinline__ void mbarrierArriveExpectTx(uint64_t *bar,
                                                       unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   sharedAddress(bar)),
               "r"(bytes)
               : "memory");
}
#endif

#if defined(__CUDACC__)
/// One try of the wait below: whether the phase of parity `parity` of the
/// mbarrier has completed (mbarrier.try_wait, which may wait a while).
__device__ __forceinline__ bool mbarrierTryWait(uint64_t *bar,
                                                unsigned parity) {
  uint32_t done;
  asm volatile("{\n.reg .pred p;\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(sharedAddress(bar)), "r"(parity)
               : "memory");
  return done != 0;
}

/// Waits until the phase of parity `parity` of the mbarrier has completed.
__device__ __forceinline__ void mbarrierWait(uint64_t *bar, unsigned parity) {
  // A phase that has not completed after ~2^34 cycles (seconds; a stage
  // takes microseconds) never will: a lost TMA load. Trap, so that the
  // launch fails with an error instead of hanging the process. (No printf:
  // a call here would make ptxas serialize the kernel's wgmmas.)
  constexpr long long kHangCycles = 1LL << 34;
  const long long start = clock64();
  while (!mbarrierTryWait(bar, parity))
    if (clock64() - start > kHangCycles)
      __trap();
}
#endif

/// TMA: the box of `map` at element coordinates (c0 along the contiguous
/// dimension, c1 along the rows) into shared `dst`, completing its bytes on
/// `bar` (cp.async.bulk.tensor.2d, zero outside the tensor).
#if defined(__CUDACC__)
__device__ __forceinline__ void tmaLoad2d(void *dst, const CUtensorMap *map,
                                          int c0, int c1, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
                   sharedAddress(dst)),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(sharedAddress(bar)),
               "r"(c0), "r"(c1)
               : "memory");
}
#endif

/// This thread's arrival on the mbarrier (no transaction bytes).
#if defined(__CUDACC__)
__device__ __forceinline__ void mbarrierArrive(uint64_t *bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sharedAddress(bar))
      : "memory");
}
#endif

/// Threads of a TMA GEMM CTA: a producer warpgroup (one thread issues the
/// loads) and two consumer warpgroups (the wgmmas and the epilogue).
inline constexpr int kTmaThreads = 384;
inline constexpr int kTmaConsumerWarps = 8;

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
  MODC_TEST_COUNT(tmaLaunches);
  traceGemm("tma+wgmma", M, Ncols, L, T::BM, T::BN, epilogueName<EPI>());
  return true;
}

//===----------------------------------------------------------------------===//
// bf16 copies of the weights, for TMA
//===----------------------------------------------------------------------===//

/// TMA copies bytes, so a product it feeds needs its weight as bf16 in
/// global memory, while the parameters stay f32 (master weights). Every
/// entry but decode (forward, and training's grad and evals) opens a
/// WeightCopyScope; within it the first GEMM that asks for a weight
/// enqueues its rounding into a package-held copy, and later GEMMs of the
/// call reuse it (training's input gradients read the copy its forward
/// products made). Every call rounds again (the caller may have changed
/// the weights between calls), so a copy is never stale, unless the caller
/// declared the parameters' version (modc_cuda_params_version): then a copy
/// rounded at the current generation of that version is reused; an AdamW
/// step (params_written) makes every copy old. Outside a scope (decode) no
/// copy is made: launchGemmTma declines, and the product takes the wgmma
/// kernel, which reads the f32 weight itself.
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

/// The copy of the `count` floats at w, allocated where there is none;
/// null where no device memory is left.
inline WeightCopy *findWeightCopy(const float *w, int64_t count) {
  WeightCopies &all = weightCopies();
  for (WeightCopy &c : all.copies)
    if (c.src == w && c.count == count)
      return &c;
  void *p = nullptr;
  if (cudaMalloc(&p, size_t(count) * sizeof(bf16)) != cudaSuccess) {
    cudaGetLastError(); // out of memory: the products read f32 instead
    return nullptr;
  }
  all.copies.push_back({w, count, static_cast<bf16 *>(p), 0, 0});
  return &all.copies.back();
}

/// Whether copy `c` holds its weight's values as the caller declared them
/// (modc_cuda_params_version) at their current generation.
inline bool copyIsCurrent(const WeightCopy &c) {
  const WeightCopies &all = weightCopies();
  return all.version != 0 && c.generation == all.generation;
}

/// Enqueues the rounding of c's weight into it, which makes it current.
inline void roundInto(WeightCopy &c, cudaStream_t stream) {
  if (tracingGemms() >= 2)
    std::fprintf(stderr, "modc gemm: weight of %lld rounded into its bf16 copy\n",
                 (long long)c.count);
  MODC_LAUNCH(roundToBf16Kernel,
              unsigned(std::min<int64_t>(ceilDiv(c.count, kThreads), kMaxGrid)),
              kThreads, 0, stream, c.src, c.copy, c.count);
  MODC_TEST_COUNT(tmaRoundings);
  c.generation = weightCopies().generation;
}

/// The bf16 copy of the `count` floats at w, rounded in this call; null
/// outside a WeightCopyScope or where no device memory is left.
inline const bf16 *weightCopyFor(const float *w, int64_t count,
                                 cudaStream_t stream) {
  if (!weightCopies().open || count <= 0)
    return nullptr;
  WeightCopy *found = findWeightCopy(w, count);
  if (!found)
    return nullptr;
  // Rounded already in this call, or current: reused as it is.
  if (found->epoch != weightCopies().epoch && !copyIsCurrent(*found))
    roundInto(*found, stream);
  found->epoch = weightCopies().epoch;
  return found->copy;
}

/// The copy of the `count` floats at w where one holds their current
/// values (rounded in this call, or current: copyIsCurrent); null where
/// there is none. Never rounds: what the few-row kernel reads instead of
/// the f32 weight, half the bytes, the same bf16 values.
inline const bf16 *currentCopyOf(const float *w, int64_t count) {
  const WeightCopies &all = weightCopies();
  for (const WeightCopy &c : all.copies)
    if (c.src == w && c.count == count)
      return copyIsCurrent(c) || (all.open && c.epoch == all.epoch) ? c.copy
                                                                    : nullptr;
  return nullptr;
}

/// The copy a CUTLASS product reads for the `count` floats at w: rounded in
/// this call (weightCopyFor) or, outside a WeightCopyScope (a decode step),
/// the copy the step made current before it ran (currentCopyOf); null
/// where there is neither.
inline const bf16 *weightCopyToRead(const float *w, int64_t count,
                                    cudaStream_t stream) {
  if (const bf16 *copy = weightCopyFor(w, count, stream))
    return copy;
  return currentCopyOf(w, count);
}

/// A decode step's weights that it streams from bf16 copies (modk.optimizer's
/// bf16_copies, read by a few-row product of the decode entry): made
/// current before the step runs (or its graph replays), by rounding those
/// that are not, so that the step itself never rounds; `copies` gets each
/// copy (null where the caller declared no parameters' version, or where no
/// memory is left: that product streams the f32 weight). A decode graph
/// captured over these copies is replayed only while they are the same.
inline void refreshDecodeCopies(const float *const *weights,
                                const int64_t *counts, int n,
                                const bf16 **copies, cudaStream_t stream) {
  WeightCopies &all = weightCopies();
  for (int i = 0; i < n; ++i) {
    copies[i] = nullptr;
    // Without a declared version every call would round: more bytes than
    // the f32 weight it saves reading.
    if (all.version == 0 || counts[i] <= 0)
      continue;
    WeightCopy *c = findWeightCopy(weights[i], counts[i]);
    if (!c)
      continue;
    if (!copyIsCurrent(*c))
      roundInto(*c, stream);
    c->epoch = all.epoch; // in use: not freed as idle
    copies[i] = c->copy;
  }
}

/// The optimizer's view of parameter w's bf16 copy (modk.optimizer's
/// bf16_copies): the copy, holding w's values before the step (so that a
/// step the norm refuses leaves it right), which the update then writes
/// with the new values; null where no device memory is left (the forward
/// then rounds the weight itself). After the step, optimizerWrote marks it
/// current.
inline bf16 *optimizerCopyOf(const float *w, int64_t count,
                             cudaStream_t stream) {
  if (count <= 0)
    return nullptr;
  WeightCopy *found = findWeightCopy(w, count);
  if (!found)
    return nullptr;
  if (!copyIsCurrent(*found))
    roundInto(*found, stream);
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

//===----------------------------------------------------------------------===//
// Few-row products: the weight streamed once
//===----------------------------------------------------------------------===//

/// A product of a few rows (decode's batch) reads its weight once and is
/// bound by that read: a tile kernel gives it N / BN CTAs, each walking the
/// whole reduction for 64 rows it does not have. Here a CTA of kStreamThreads
/// threads makes BN output columns for BM rows (more rows: more CTAs along
/// y, reading the columns again, from L2), its threads splitting the
/// reduction in runs of 4 (16-byte weight loads); the partial sums meet in
/// shared memory, and the epilogue runs on the totals. With RoPE a CTA's
/// columns are BN / 2 rotation pairs (x, x + HD / 2) of a head, so any tile
/// holds the epilogue. Products only (A and B with the reduction
/// contiguous, rows from the host or the device): never a weight gradient.
struct StreamTile {
  static constexpr int BM = 8, BN = 4;
  static constexpr bool mma = false;
};

/// The few-row kernel on tensor cores, for bf16 products of more rows than
/// StreamTile's 8, which it would read the weight again for: a CTA makes
/// BN = 8 columns (one mma.m16n8k8 tile wide) for up to BM = 64 rows (four
/// 16-row tiles), so that the weight is read once up to 64 rows. Its warps
/// split the reduction in steps of 32: in a step each thread loads 8
/// consecutive elements of its weight row and of its two rows of each
/// 16-row tile, and four mma.m16n8k8 take them as pairs (8t + 2j, 8t + 2j +
/// 1) of mma j, a permutation of the step's reduction that A and B share.
/// The warps' sums meet in shared memory and the epilogue runs on the
/// totals, as on StreamTile.
struct StreamMmaTile {
  static constexpr int BM = 64, BN = 8;
  static constexpr bool mma = true;
};
constexpr int kStreamThreads = 128;

/// Whether a product's operands suit the few-row kernel: both with the
/// reduction contiguous, rows from the host or the device.
template <bool AK, bool BKc, int DYN> constexpr bool streamOperandsOk() {
  return AK && BKc && DYN <= 1;
}

/// 4 (or 1: W) consecutive elements of an operand as floats, rounded to
/// bf16 in a bf16 product.
template <int W, bool BF, typename T>
__device__ __forceinline__ void loadStreamRun(const T *p, float (&x)[4]) {
  if constexpr (W == 4 && std::is_same<T, float>::value) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else if constexpr (W == 4) { // bf16: one 8-byte load
    const uint2 v = *reinterpret_cast<const uint2 *>(p);
    x[0] = bitsFloat(v.x << 16), x[1] = bitsFloat(v.x & 0xffff0000u);
    x[2] = bitsFloat(v.y << 16), x[3] = bitsFloat(v.y & 0xffff0000u);
  } else {
    x[0] = float(p[0]);
  }
  if constexpr (BF && std::is_same<T, float>::value)
#pragma unroll
    for (int e = 0; e < W; ++e)
      x[e] = bf16Round(x[e]);
}

/// A thread's partial sums over the reduction steps l0, l0 + step, ... below
/// L, W at a time: acc[c][r] for column c of cols (-1: none) and row r <
/// rows of A.
template <int W, bool BF, int BM, int BN, typename TA, typename TB>
__device__ __forceinline__ void
streamPartials(float (&acc)[BN][BM], const TA *A, int64_t lda, const TB *B,
               int64_t ldb, const int64_t (&cols)[BN], int rows, int64_t l0,
               int64_t L, int64_t step) {
  for (int64_t l = l0; l + W <= L; l += step) {
    float a[BM][4];
#pragma unroll
    for (int r = 0; r < BM; ++r)
      if (r < rows)
        loadStreamRun<W, BF>(A + r * lda + l, a[r]);
      else
#pragma unroll
        for (int e = 0; e < 4; ++e)
          a[r][e] = 0.0f; // rows past M: sums never stored
#pragma unroll
    for (int c = 0; c < BN; ++c) {
      if (cols[c] < 0)
        continue;
      float b[4];
      loadStreamRun<W, BF>(B + cols[c] * ldb + l, b);
#pragma unroll
      for (int r = 0; r < BM; ++r)
#pragma unroll
        for (int e = 0; e < W; ++e)
          acc[c][r] = fmaf(a[r][e], b[e], acc[c][r]);
    }
  }
}

/// 8 consecutive elements p[l .. l + 8) of an operand (those at or past L
/// zero), rounded to bf16 and packed in pairs: v[j] holds elements 2j and
/// 2j + 1. vec: p's runs of 4 may be loaded whole (loadStreamRun).
template <typename T>
__device__ __forceinline__ void loadMmaRun(const T *p, int64_t l, int64_t L,
                                           bool vec, uint32_t (&v)[4]) {
  float x[2][4];
  if (vec && l + 8 <= L) {
    loadStreamRun<4, false>(p + l, x[0]);
    loadStreamRun<4, false>(p + l + 4, x[1]);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[e / 4][e % 4] = l + e < L ? float(p[l + e]) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    v[j] = packBf16x2(x[j / 2][2 * (j % 2)], x[j / 2][2 * (j % 2) + 1]);
}

/// A thread's partial sums on tensor cores (StreamMmaTile) over the
/// reduction steps of 32 from l0, `step` apart: acc[i] is the mma.m16n8k8
/// accumulator of 16-row tile i (rows past `rows` read as zero; tiles past
/// them skipped, warp-uniformly); this thread's weight row is `col` (-1:
/// past the columns, read as zero).
template <int MT, typename TA, typename TB>
__device__ __forceinline__ void
streamMmaPartials(float (&acc)[MT][4], const TA *A, int64_t lda, const TB *B,
                  int64_t ldb, int64_t col, int rows, int64_t l0, int64_t L,
                  int64_t step, bool vec) {
  const int lane = int(threadIdx.x) % kWarp, g = lane >> 2, t = lane & 3;
  for (int64_t k0 = l0; k0 < L; k0 += step) {
    const int64_t l = k0 + 8 * t;
    uint32_t b[4] = {0u, 0u, 0u, 0u};
    if (col >= 0)
      loadMmaRun(B + col * ldb, l, L, vec, b);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      if (16 * i >= rows)
        break;
      uint32_t lo[4] = {0u, 0u, 0u, 0u}, hi[4] = {0u, 0u, 0u, 0u};
      if (16 * i + g < rows)
        loadMmaRun(A + (16 * i + g) * lda, l, L, vec, lo);
      if (16 * i + g + 8 < rows)
        loadMmaRun(A + (16 * i + g + 8) * lda, l, L, vec, hi);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t a[2] = {lo[j], hi[j]};
        mma_bf16_m16n8k8(acc[i], a, b[j], acc[i]);
      }
    }
  }
}

/// Output column c of a few-row CTA: its c-th of BN in a row, or with RoPE
/// of its BN / 2 rotation pairs (x, x + HD / 2) of a head (-1: past Ncols).
/// Computed where it is needed rather than kept in an array, which a
/// run-time index would put in local memory.
template <int EPI, int BN>
__device__ __forceinline__ int64_t streamColumn(int c, int64_t Ncols) {
  int64_t n = int64_t(blockIdx.x) * BN + c;
  if constexpr (epiHeadDim<EPI>() > 0) {
    constexpr int Half = epiHeadDim<EPI>() / 2;
    const int64_t pair = int64_t(blockIdx.x) * (BN / 2) + c / 2;
    n = (pair / Half) * 2 * Half + pair % Half + (c % 2) * Half;
  }
  return n < Ncols ? n : -1;
}

/// The epilogue of a few-row CTA's output (row r, column c), from the
/// totals total[c * BM + r]: with RoPE the even column of each pair stores
/// both.
template <int BM, int BN, int EPI, typename TC>
__device__ __forceinline__ void
streamStore(const float *total, int c, int r, int rows, int64_t Ncols,
            int64_t m0, TC *C, int64_t ldc, const EpiArgs &epi) {
  const int64_t n = streamColumn<EPI, BN>(c, Ncols);
  if (r >= rows || n < 0)
    return;
  const int64_t m = m0 + r;
  if constexpr (epiHeadDim<EPI>() > 0) {
    if (c % 2 == 1)
      return; // finished with its pair's first column
    RowsEpilogue<EPI - EpiRowsFirst>::storePair(
        total[c * BM + r], total[(c + 1) * BM + r], epi, m, n);
  } else if constexpr (isEpiRows(EPI)) {
    RowsEpilogue<EPI - EpiRowsFirst>::store(total[c * BM + r], epi, m, n);
  } else {
    const int64_t idx = m * ldc + n;
    C[idx] = TC(gemmEpilogue<EPI>(total[c * BM + r], epi, idx));
  }
}

template <typename T, bool DYN, int EPI, bool BF, typename TA, typename TB,
          typename TC>
__device__ __forceinline__ void
gemmStreamKernelBody(const TA *__restrict__ A, int64_t lda,
                     const TB *__restrict__ B, int64_t ldb, TC *C, int64_t ldc,
                     const EpiArgs epi, int64_t M, int64_t Ncols, int64_t L,
                     const int64_t *dynRows) {
  constexpr int BM = T::BM, BN = T::BN;
  constexpr int kWarps = kStreamThreads / kWarp;
  static_assert(!T::mma || (BF && BN == 8 && BM % 16 == 0),
                "the tensor-core few-row kernel runs bf16 products, one "
                "mma tile wide");
  if (DYN)
    M = *dynRows;
  const int64_t m0 = int64_t(blockIdx.y) * BM;
  if (m0 >= M)
    return;
  const int rows = int(minI64(BM, M - m0));
  A += m0 * lda;
  // 4-element runs where every run starts 16-byte aligned (8 for bf16 A),
  // then the remainder (or everything) one element at a time.
  const bool vec = L % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 &&
                   (reinterpret_cast<uintptr_t>(A) % (4 * sizeof(TA))) == 0 &&
                   (reinterpret_cast<uintptr_t>(B) % (4 * sizeof(TB))) == 0;
  const int tid = threadIdx.x;
  const int lane = tid % kWarp, warp = tid / kWarp;
  __shared__ float part[kWarps][BN * BM];
  __shared__ float total[BN * BM];
  if constexpr (T::mma) {
    // Each warp's sums of the whole tile over its steps, then the CTA's.
    constexpr int MT = BM / 16;
    float acc[MT][4] = {};
    streamMmaPartials(acc, A, lda, B, ldb,
                      streamColumn<EPI, BN>(lane >> 2, Ncols), rows, 32 * warp,
                      L, 32 * kWarps, vec);
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        part[warp][(2 * t + e % 2) * BM + 16 * i + g + 8 * (e / 2)] = acc[i][e];
  } else {
    int64_t cols[BN];
#pragma unroll
    for (int c = 0; c < BN; ++c)
      cols[c] = streamColumn<EPI, BN>(c, Ncols);
    float acc[BN][BM] = {};
    if (vec) {
      streamPartials<4, BF>(acc, A, lda, B, ldb, cols, rows, 4 * tid, L,
                            4 * kStreamThreads);
    } else {
      streamPartials<1, BF>(acc, A, lda, B, ldb, cols, rows, tid, L,
                            kStreamThreads);
    }
    // The warp's sums, then the CTA's.
#pragma unroll
    for (int c = 0; c < BN; ++c)
#pragma unroll
      for (int r = 0; r < BM; ++r) {
        float v = acc[c][r];
#pragma unroll
        for (int o = kWarp / 2; o > 0; o /= 2)
          v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
          part[warp][c * BM + r] = v;
      }
  }
  __syncthreads();
  for (int i = tid; i < BN * BM; i += kStreamThreads) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      s += part[w][i];
    total[i] = s;
  }
  __syncthreads();
  auto store = [&](int i) {
    streamStore<BM, BN, EPI>(total, i / BM, i % BM, rows, Ncols, m0, C, ldc,
                             epi);
  };
  if constexpr (isEpiRows(EPI)) {
    // Not unrolled: a generated epilogue inlined once for each output a
    // thread stores made ptxas spill in sibling launches on sm_80 (a plain
    // store spills the other way round).
#pragma unroll 1
    for (int i = tid; i < BN * BM; i += kStreamThreads)
      store(i);
  } else {
    for (int i = tid; i < BN * BM; i += kStreamThreads)
      store(i);
  }
}

template <typename T, bool DYN, int EPI, bool BF, typename TA, typename TB,
          typename TC>
__global__ __launch_bounds__(kStreamThreads) void gemmStreamKernel(
    const TA *__restrict__ A, int64_t lda, const TB *__restrict__ B,
    int64_t ldb, TC *C, int64_t ldc, const EpiArgs epi, int64_t M,
    int64_t Ncols, int64_t L, const int64_t *dynRows) {
  gemmStreamKernelBody<T, DYN, EPI, BF, TA, TB, TC>(A, lda, B, ldb, C, ldc, epi,
                                                    M, Ncols, L, dynRows);
}

/// gemmStreamKernel on member blockIdx.z of a group of G products.
template <typename T, int G, bool DYN, int EPI, bool BF, typename TA,
          typename TB, typename TC>
__global__ __launch_bounds__(kStreamThreads) void gemmStreamKernelGroup(
    const GemmGroup<G, TA, TB, TC> group, int64_t lda, int64_t ldb, int64_t ldc,
    int64_t M, int64_t Ncols, int64_t L) {
  const int z = blockIdx.z;
  gemmStreamKernelBody<T, DYN, EPI, BF, TA, TB, TC>(
      group.a[z], lda, group.b[z], ldb, group.c[z], ldc, group.epi[z], M, Ncols,
      L, group.rows[z]);
}

/// The most members of a sibling launch (modk-group-siblings); an
/// enumerator, which nvcc does not report where no package uses it.
enum : int { kMaxGemmSiblings = 4 };

/// A member of a sibling launch (launchGemmSiblings): N output columns,
/// finished by epilogue EPI (EpiStore: stored into its output, of element
/// TC; a generated `rows` epilogue: by its functor, from its EpiArgs).
template <int N, int EPI, typename TC> struct GemmSibling {
  static constexpr int n = N, epi = EPI;
  using C = TC;
};

/// The members' weights, outputs and epilogue arguments of a sibling
/// launch.
template <int G, typename TB> struct GemmSiblingTable {
  using Weight = TB;
  const TB *b[G];
  void *c[G];
  EpiArgs epi[G];
};

/// Member Z (Sib) of a sibling launch: gemmStreamKernel's body on its
/// weight, epilogue and output; CTAs past its columns have nothing to do.
template <typename T, bool BF, typename Sib, int Z, int G, typename TA,
          typename TB>
__device__ __forceinline__ void
gemmSiblingMember(const TA *A, int64_t lda, const GemmSiblingTable<G, TB> &t,
                  int64_t M, int64_t L, const int64_t *dynRows) {
  if (int64_t(blockIdx.x) * T::BN >= Sib::n)
    return;
  gemmStreamKernelBody<T, true, Sib::epi, BF, TA, TB, typename Sib::C>(
      A, lda, t.b[Z], L, static_cast<typename Sib::C *>(t.c[Z]), Sib::n,
      t.epi[Z], M, Sib::n, L, dynRows);
}

/// The members this CTA runs, each one's table entries at a constant index
/// (no local copy of the table): the member of blockIdx.z, or with InOrder
/// (`siblings_in_order`) every member in turn, so that a member's epilogue
/// may read an earlier member's output at its own elements, which this CTA
/// stored before the barriers of the later member's body.
template <typename T, bool InOrder, bool BF, typename TA, typename TB,
          typename... Sibs, int... Z>
__device__ __forceinline__ void
gemmSiblingsOfBlock(const TA *A, int64_t lda,
                    const GemmSiblingTable<sizeof...(Sibs), TB> &t, int64_t M,
                    int64_t L, const int64_t *dynRows,
                    std::integer_sequence<int, Z...>) {
  ((InOrder || int(blockIdx.z) == Z
        ? gemmSiblingMember<T, BF, Sibs, Z>(A, lda, t, M, L, dynRows)
        : void()),
   ...);
}

/// The few-row kernel on sibling products of one A [*dynRows, L]: member
/// blockIdx.z of Sibs (modk-group-siblings' `siblings`), or with InOrder
/// every member in each CTA, one after another.
template <typename T, bool InOrder, bool BF, typename TA, typename TB,
          typename... Sibs>
__global__ __launch_bounds__(kStreamThreads) void gemmStreamKernelSiblings(
    const TA *__restrict__ A, int64_t lda,
    const GemmSiblingTable<sizeof...(Sibs), TB> t, int64_t M, int64_t L,
    const int64_t *dynRows) {
  gemmSiblingsOfBlock<T, InOrder, BF, TA, TB, Sibs...>(
      A, lda, t, M, L, dynRows,
      std::make_integer_sequence<int, int(sizeof...(Sibs))>{});
}

/// The GEMM kernel families: SIMT f32, mma.sync (3xTF32 or bf16) and wgmma
/// (bf16 on sm_90a), as #modk.gemm_config names them.
/// PathStream: few-row products (gemmStreamKernel).
enum GemmPath { PathSimt, PathMma, PathWgmma, PathStream };

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
template <> struct GemmTileFor<PathStream, false, StreamTile::BM, StreamTile::BN> {
  using T = StreamTile;
};
template <>
struct GemmTileFor<PathStream, false, StreamMmaTile::BM, StreamMmaTile::BN> {
  using T = StreamMmaTile;
};

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
/// epilogue, whether it rounds its operands to bf16, whether its operand
/// types allow TMA (tmaOperandsOk), and whether it may take the few-row
/// kernel (a product, not a weight gradient).
template <int EPI, bool BF, bool TmaOperands, bool StreamOperands>
struct GemmProduct {
  static constexpr int epilogue = EPI;
  static constexpr bool bf16 = BF, tmaOperands = TmaOperands;
  static constexpr bool streamOperands = StreamOperands;
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

/// C = epilogue(A B) on variant V: its tile on its path (the few-row
/// kernel holds every epilogue); a TMA variant's kernel where its operands
/// can be described to TMA, else the wgmma kernel of the same tile. False
/// only where V's tile cannot hold the epilogue (V says separateEpilogue):
/// nothing is enqueued, and the caller runs the product with a plain store,
/// then the epilogue as a kernel.
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
  if constexpr (P == PathStream) {
    static_assert(streamOperandsOk<AK, BKc, DYN>() && !V::tma,
                  "the few-row kernel runs products, not weight gradients");
    MODC_TEST_COUNT(streamLaunches);
    // With RoPE a CTA has BN / 2 pairs of columns: as many CTAs.
    const dim3 grid(unsigned(ceilDiv(Ncols, T::BN)),
                    unsigned(ceilDiv(M, T::BM)));
    // A bf16 product streams its weight's current bf16 copy where there is
    // one: half the bytes, the values it would round the f32 weight to.
    if constexpr (BF && std::is_same<TB, float>::value) {
      if (const bf16 *copy = currentCopyOf(B, Ncols * ldb)) {
        traceGemm("stream bf16-weight", M, Ncols, L, T::BM, T::BN,
                  epilogueName<EPI>());
        MODC_LAUNCH((gemmStreamKernel<T, DYN == 1, EPI, BF, TA, bf16, TC>),
                    grid, kStreamThreads, 0, stream, A, lda, copy, ldb, C, ldc,
                    epi, M, Ncols, L, dynRows);
        return true;
      }
    }
    traceGemm("stream", M, Ncols, L, T::BM, T::BN, epilogueName<EPI>());
    MODC_LAUNCH((gemmStreamKernel<T, DYN == 1, EPI, BF, TA, TB, TC>), grid,
                kStreamThreads, 0, stream, A, lda, B, ldb, C, ldc, epi, M,
                Ncols, L, dynRows);
    return true;
  } else if constexpr (!epilogueFits<EPI, T>()) {
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
              Ncols, L, T::BM, T::BN, epilogueName<EPI>());
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
  static_assert(epiHeadDim<EPI>() == 0 || DYN != 3,
                "a head epilogue of a partial product");
  if (M <= 0 || Ncols <= 0)
    return true;
  using Product = GemmProduct<EPI, BF, tmaOperandsOk<TA, TB, AK, BKc, DYN>(),
                              streamOperandsOk<AK, BKc, DYN>()>;
  return PLAN::template dispatch<Product>(M, Ncols, [&](auto variant) {
    return launchGemmVariant<decltype(variant), AK, BKc, DYN, EPI, BF>(
        A, lda, B, ldb, C, ldc, epi, M, Ncols, L, dynRows, stream, splits,
        DYN == 3 ? kBound : L);
  });
}

/// Family P's kernel on tile T for a member of a group of G products (and
/// a chunk of its split reduction: gemmKernelGroup), with the layouts and
/// DYN of the single launch.
template <int P, int G, typename T, bool AK, bool BKc, int DYN, int EPI,
          bool BF, typename TA, typename TB, typename TC>
inline auto gemmGroupKernelFor() {
  if constexpr (P == PathWgmma) {
    static_assert(BF, "wgmma runs the bf16 products only");
    return gemmWgKernelGroup<G, T, AK, BKc, DYN, EPI, TA, TB, TC>;
  } else if constexpr (P == PathMma) {
    return gemmTcKernelGroup<G, T, AK, BKc, DYN, EPI, BF, TA, TB, TC>;
  } else {
    return gemmKernelGroup<G, T, AK, BKc, DYN, EPI, BF, TA, TB, TC>;
  }
}

/// Every member z's C = epilogue(A B) (launchGemm's layouts, DYN and
/// arguments, with member z's buffers and row count from the table) in one
/// launch: grid z is the member (member * splits + chunk for a split
/// reduction, DYN == 3), each member's tiles run the variant of PLAN for M,
/// the bound of every member's rows (a weight gradient's output rows). A
/// TMA variant runs the wgmma kernel of its tile (a tensor map per member
/// is not part of the group's table); the few-row kernel (products only)
/// streams every member's bf16 weight copy where each has a current one.
template <typename PLAN, bool AK, bool BKc, int DYN, int EPI, bool BF, int G,
          typename TA, typename TB, typename TC>
inline void launchGemmGroupOn(const GemmGroup<G, TA, TB, TC> &group,
                              int64_t lda, int64_t ldb, int64_t ldc,
                              int64_t M, int64_t Ncols, int64_t L,
                              int64_t splits, cudaStream_t stream) {
  static_assert(gemmTypesOk<TA, TB, TC, AK, EPI, BF, DYN>(),
                "bf16 A or B needs a bf16 product; bf16 C a plain store");
  static_assert(epiHeadDim<EPI>() == 0,
                "modk-group-gemms leaves epilogues over heads ungrouped");
  if (M <= 0 || Ncols <= 0)
    return;
  using Product = GemmProduct<EPI, BF, tmaOperandsOk<TA, TB, AK, BKc, DYN>(),
                              streamOperandsOk<AK, BKc, DYN>()>;
  PLAN::template dispatch<Product>(M, Ncols, [&](auto variant) {
    using V = decltype(variant);
    constexpr int P = V::path;
    using T = typename GemmTileFor<P, false, V::tileRows, V::tileCols>::T;
    MODC_TEST_COUNT(groupedLaunches);
    const dim3 grid(unsigned(ceilDiv(Ncols, T::BN)),
                    unsigned(ceilDiv(M, T::BM)), unsigned(G * splits));
    if constexpr (P == PathStream) {
      static_assert(streamOperandsOk<AK, BKc, DYN>() && !V::tma,
                    "the few-row kernel runs products, not weight gradients");
      MODC_TEST_COUNT(streamLaunches);
      if constexpr (BF && std::is_same<TB, float>::value) {
        GemmGroup<G, TA, bf16, TC> copies;
        bool every = true;
        for (int z = 0; z < G; ++z) {
          copies.a[z] = group.a[z];
          copies.b[z] = currentCopyOf(group.b[z], Ncols * ldb);
          copies.c[z] = group.c[z];
          copies.rows[z] = group.rows[z];
          copies.epi[z] = group.epi[z];
          every = every && copies.b[z] != nullptr;
        }
        if (every) {
          traceGemm("stream bf16-weight group", M, Ncols, L, T::BM, T::BN,
                    epilogueName<EPI>());
          MODC_LAUNCH(
              (gemmStreamKernelGroup<T, G, true, EPI, BF, TA, bf16, TC>), grid,
              kStreamThreads, 0, stream, copies, lda, ldb, ldc, M, Ncols, L);
          return true;
        }
      }
      traceGemm("stream group", M, Ncols, L, T::BM, T::BN,
                epilogueName<EPI>());
      MODC_LAUNCH((gemmStreamKernelGroup<T, G, true, EPI, BF, TA, TB, TC>),
                  grid, kStreamThreads, 0, stream, group, lda, ldb, ldc, M,
                  Ncols, L);
    } else {
      static_assert(epilogueFits<EPI, T>(),
                    "the configured tile cannot hold this epilogue");
      auto kernel =
          gemmGroupKernelFor<P, G, T, AK, BKc, DYN, EPI, BF, TA, TB, TC>();
      traceGemm(P == PathWgmma ? "wgmma group"
                : P == PathMma ? "mma.sync group"
                               : "simt group",
                M, Ncols, L, T::BM, T::BN, epilogueName<EPI>());
      MODC_LAUNCH(kernel, grid, kThreads, 0, stream, group, lda, ldb, ldc, M,
                  Ncols, L, splits);
    }
    return true;
  });
}

/// Every member z's C = epilogue(A B^T) (A [*rows[z], L], B [Ncols, L],
/// both with the reduction contiguous) in one launch, each member's tiles
/// on the variant of PLAN for maxRows (launchGemmGroupOn).
template <typename PLAN, int EPI, bool BF, int G, typename TA, typename TC>
inline void launchGemmGroup(const GemmGroup<G, TA, float, TC> &group,
                            int64_t lda, int64_t ldc, int64_t maxRows,
                            int64_t Ncols, int64_t L, cudaStream_t stream) {
  launchGemmGroupOn<PLAN, true, true, 1, EPI, BF>(group, lda, L, ldc, maxRows,
                                                  Ncols, L, 1, stream);
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

/// Sibling products of one input a [*rows, K] (modk-group-siblings): member
/// z's product a w_z^T finished by its epilogue (Sibs: GemmSibling), all in
/// one launch of the few-row kernel, z the member, where PLAN takes that
/// kernel for max_rows rows and either every member or none has a current
/// bf16 weight copy to stream; false otherwise (nothing was enqueued: the
/// caller runs each member as its own launch). InOrder: each CTA runs
/// every member's columns in turn (every member has as many), so that a
/// member's epilogue may read an earlier one's output at its elements.
template <typename PLAN, int K, bool BF, bool InOrder, typename TA,
          typename... Sibs>
inline bool
launchGemmSiblings(const TA *a, const int64_t *rows, int64_t max_rows,
                   const float *const (&w)[sizeof...(Sibs)],
                   void *const (&c)[sizeof...(Sibs)],
                   const EpiArgs (&epi)[sizeof...(Sibs)], cudaStream_t stream) {
  constexpr int G = sizeof...(Sibs);
  static_assert(G >= 2 && G <= kMaxGemmSiblings, "2 to kMaxGemmSiblings");
  static_assert((gemmWidthsOk<Sibs::n, K>() && ...),
                "GEMM widths must be in [1, 2^24)");
  constexpr int64_t cols[G] = {Sibs::n...};
  constexpr int64_t maxCols = std::max({int64_t(Sibs::n)...});
  if (max_rows <= 0)
    return true;
  using Product = GemmProduct<EpiStore, BF, false, true>;
  return PLAN::template dispatch<Product>(max_rows, maxCols, [&](auto variant) {
    using V = decltype(variant);
    if constexpr (V::path != PathStream) {
      return false;
    } else {
      static_assert(!InOrder || ((Sibs::n == maxCols) && ...),
                    "siblings in order have as many columns");
      using T =
          typename GemmTileFor<PathStream, false, V::tileRows, V::tileCols>::T;
      const dim3 grid(unsigned(ceilDiv(maxCols, T::BN)),
                      unsigned(ceilDiv(max_rows, T::BM)), InOrder ? 1 : G);
      auto launch = [&](const auto &table) {
        using TB = typename std::decay_t<decltype(table)>::Weight;
        MODC_TEST_COUNT(streamLaunches);
        MODC_TEST_COUNT(siblingLaunches);
        traceGemm(std::is_same<TB, bf16>::value ? "stream bf16-weight siblings"
                                                : "stream siblings",
                  max_rows, maxCols, K, T::BM, T::BN, "siblings");
        MODC_LAUNCH((gemmStreamKernelSiblings<T, InOrder, BF, TA, TB, Sibs...>),
                    grid, kStreamThreads, 0, stream, a, int64_t(K), table,
                    max_rows, int64_t(K), rows);
        return true;
      };
      GemmSiblingTable<G, float> plain;
      for (int z = 0; z < G; ++z) {
        plain.b[z] = w[z];
        plain.c[z] = c[z];
        plain.epi[z] = epi[z];
      }
      if constexpr (BF) {
        // A bf16 product streams its weight's current bf16 copy where
        // there is one: every member's, or none's.
        GemmSiblingTable<G, bf16> copies;
        int copied = 0;
        for (int z = 0; z < G; ++z) {
          copies.b[z] = currentCopyOf(w[z], cols[z] * K);
          copies.c[z] = c[z];
          copies.epi[z] = epi[z];
          copied += copies.b[z] != nullptr;
        }
        if (copied == G)
          return launch(copies);
        if (copied != 0)
          return false;
      }
      return launch(plain);
    }
  });
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
__device__ __forceinline__ void splitSumBody(const float *__restrict__ part,
                                             int64_t n, int64_t splits,
                                             int64_t chunk, const int64_t *rows,
                                             float *dw) {
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

__global__ __launch_bounds__(kThreads) void splitSumKernel(
    const float *__restrict__ part, int64_t n, int64_t splits, int64_t chunk,
    const int64_t *rows, float *dw) {
  splitSumBody(part, n, splits, chunk, rows, dw);
}

/// The weight gradients a grouped split sums its partials into: member z's
/// row count and dw.
template <int G> struct WgradSums {
  const int64_t *rows[G] = {};
  float *dw[G] = {};
};

/// splitSumKernel for member blockIdx.y of a group, whose partials follow
/// the members' in `part` (splits * n floats a member).
template <int G>
__global__ __launch_bounds__(kThreads) void splitSumGroupKernel(
    const float *__restrict__ part, int64_t n, int64_t splits, int64_t chunk,
    const WgradSums<G> sums) {
  const int z = blockIdx.y;
  splitSumBody(part + int64_t(z) * splits * n, n, splits, chunk, sums.rows[z],
               sums.dw[z]);
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Grouped gradient products (modk.gemm_dgrad's and gemm_wgrad's `group`)
//===----------------------------------------------------------------------===//

/// The input gradients of a group: for each member z, da_z[m, k] (+)=
/// sum_n dy_z[m, n] w_z[n, k] for m < *rows_z (linear_dgrad), in one launch;
/// group.a holds the dy, group.b the weights [N, K], group.c the da, and
/// every member's rows are at most max_rows.
template <int N, int K, int G, bool BF16 = false,
          typename PLAN = DefaultGemmPlan, typename TD>
inline void
linear_dgrad_group(const detail::GemmGroup<G, TD, float, float> &group,
                   int64_t max_rows, bool accumulate, cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  if (!accumulate) {
    detail::launchGemmGroupOn<PLAN, true, false, 1, detail::EpiStore, BF16>(
        group, N, K, K, max_rows, K, N, 1, stream);
    return;
  }
  // Each member adds into its own da (EpiAdd reads it through its aux).
  detail::GemmGroup<G, TD, float, float> adds = group;
  for (int z = 0; z < G; ++z)
    adds.epi[z] = detail::EpiArgs(group.c[z]);
  detail::launchGemmGroupOn<PLAN, true, false, 1, detail::EpiAdd, BF16>(
      adds, N, K, K, max_rows, K, N, 1, stream);
}

/// Floats of scratch linear_wgrad_group needs for G members of at most
/// max_rows rows: G times linear_wgrad_scratch_floats (0 where the shapes
/// do not split).
template <int N, int K, int G, typename PLAN = DefaultGemmPlan>
inline int64_t linear_wgrad_group_scratch_floats(int64_t max_rows) {
  const detail::WgradSplit s = detail::wgradSplit<N, K, PLAN>(max_rows);
  return s.splits > 1 ? G * s.splits * int64_t(N) * K : 0;
}

/// The weight gradients of a group: for each member z, dw_z[n, k] +=
/// sum_{m < *rows_z} dy_z[m, n] a_z[m, k] (linear_wgrad with scratch), in
/// one launch; group.a holds the dy, group.b the a, group.c the dw. Where
/// the shapes split the rows (detail::wgradSplit), each member's chunks go
/// to its own partials in scratch (grid z: member * splits + chunk), then
/// one kernel adds each member's partials of the chunks that hold its rows
/// to its dw in chunk order: each dw is what linear_wgrad gives it, on any
/// run. `scratch`: linear_wgrad_group_scratch_floats<N, K, G>(max_rows)
/// floats (null: no split).
template <int N, int K, int G, bool BF16 = false,
          typename PLAN = DefaultGemmPlan, typename TD, typename TA>
inline void linear_wgrad_group(const detail::GemmGroup<G, TD, TA, float> &group,
                               int64_t max_rows, float *scratch,
                               cudaStream_t stream) {
  static_assert(detail::gemmWidthsOk<N, K>(), "GEMM widths must be in [1, 2^24)");
  const detail::WgradSplit s = detail::wgradSplit<N, K, PLAN>(max_rows);
  const int64_t nk = int64_t(N) * K;
  if (s.splits <= 1 || scratch == nullptr) {
    detail::GemmGroup<G, TD, TA, float> adds = group;
    for (int z = 0; z < G; ++z)
      adds.epi[z] = detail::EpiArgs(group.c[z]);
    detail::launchGemmGroupOn<PLAN, false, false, 2, detail::EpiAdd, BF16>(
        adds, N, K, K, N, K, max_rows, 1, stream);
    return;
  }
  const int64_t blocks = ceilDiv(nk, detail::kThreads);
  const unsigned sumBlocks =
      unsigned(blocks < 1 ? 1 : blocks > detail::kMaxGrid ? detail::kMaxGrid : blocks);
  if (G * s.splits > 65535) {
    // More chunks than the grid's z holds: the members one by one (the
    // split linear_wgrad's launches), each on its part of the scratch.
    for (int z = 0; z < G; ++z) {
      float *part = scratch + z * s.splits * nk;
      detail::launchGemm<PLAN, false, false, 3, detail::EpiStore, BF16>(
          group.a[z], N, group.b[z], K, part, K, nullptr, N, K, s.chunk,
          group.rows[z], stream, unsigned(s.splits), max_rows);
      auto k = detail::splitSumKernel;
      MODC_LAUNCH(k, sumBlocks, detail::kThreads, 0, stream, part, nk,
                  s.splits, s.chunk, group.rows[z], group.c[z]);
    }
    return;
  }
  detail::GemmGroup<G, TD, TA, float> parts = group;
  detail::WgradSums<G> sums;
  for (int z = 0; z < G; ++z) {
    parts.c[z] = scratch + z * s.splits * nk;
    parts.epi[z] = detail::EpiArgs();
    sums.rows[z] = group.rows[z];
    sums.dw[z] = group.c[z];
  }
  detail::launchGemmGroupOn<PLAN, false, false, 3, detail::EpiStore, BF16>(
      parts, N, K, K, N, K, s.chunk, s.splits, stream);
  auto k = detail::splitSumGroupKernel<G>;
  MODC_LAUNCH(k, dim3(sumBlocks, unsigned(G)), detail::kThreads, 0, stream,
              scratch, nk, s.splits, s.chunk, sums);
}

} // namespace modk_cuda

#endif // MODC_CUDA_GEMM_TILES_INCLUDED
