//===- CpuKernels.h - CPU kernel prelude for generated models ---*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// The CPU kernel library of modc. The C++ emitter pastes this header verbatim
/// at the top of every generated `model.cpp` and then writes specialised
/// functions that call these templates with the plan's static shapes. The
/// result is built with `-O3 -march=native -fopenmp` (modc's `--march` names
/// another CPU) and linked to OpenBLAS.
///
/// Conventions (see docs/internals.md and docs/model-format.md section 3):
///  - All tensors are row-major f32 unless stated otherwise.
///  - `rows` is a runtime row count.
///  - Segments: rows [seg[s], seg[s+1]) are sequence s, in ascending original
///    position; pos[i] is the original position of row i.
///  - cblas is called outside OpenMP parallel regions, because the default
///    Debian OpenBLAS is the pthreads build and does not nest; only the
///    tiles of a group of products (run_group) call it inside one, and only
///    with the OpenMP build, which then runs each call on its own thread.
///
/// The header is self-contained: only standard headers, <cblas.h>, <omp.h>
/// and the small kernels both targets share (Shared/prelude/SmallKernels.h,
/// which the emitter pastes before this header).
///
//===----------------------------------------------------------------------===//

#ifndef MODC_TARGET_CPP_PRELUDE_CPUKERNELS_H
#define MODC_TARGET_CPP_PRELUDE_CPUKERNELS_H

#ifndef MODC_SMALL_KERNELS_INCLUDED
#include "../../Shared/prelude/SmallKernels.h"
#endif

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <type_traits>
#include <utility>
#include <vector>

namespace modk_cpu {

//===----------------------------------------------------------------------===//
// Portable SIMD helpers (GCC/Clang vector extensions)
//===----------------------------------------------------------------------===//

namespace detail {

// The vector width follows the target so that one VecF is one register;
// the compiler lowers the generic operations to the native instructions.
#if defined(__AVX512F__)
#define MODK_CPU_VW 16
constexpr int kNumVecRegs = 32;
#elif defined(__AVX__)
#define MODK_CPU_VW 8
constexpr int kNumVecRegs = 16;
#else
#define MODK_CPU_VW 4
constexpr int kNumVecRegs = 16;
#endif

/// Number of f32 lanes in one VecF.
constexpr int kVW = MODK_CPU_VW;
typedef float VecF __attribute__((vector_size(MODK_CPU_VW * 4)));
typedef int32_t VecI __attribute__((vector_size(MODK_CPU_VW * 4)));
#undef MODK_CPU_VW

/// Unaligned load/store; memcpy compiles to a single vector move.
inline VecF loadu(const float *p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void storeu(float *p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
/// Into a buffer of another element type (bf16): each lane converted.
template <typename Out> inline void storeu(Out *p, VecF v) {
  for (int l = 0; l < kVW; ++l)
    p[l] = Out(v[l]);
}
template <size_t... I>
inline VecF splatImpl(float x, std::index_sequence<I...>) {
  return VecF{((void)I, x)...};
}
/// Broadcast. An element-wise initialiser becomes one vbroadcastss; `VecF{}
/// + x` would keep a real add (0 + -0 is +0) and a lane loop gets masked.
inline VecF splat(float x) {
  return splatImpl(x, std::make_index_sequence<kVW>{});
}

/// Lane-wise `mask ? a : b`, where mask lanes are all-ones or zero. Bit
/// operations instead of `?:` keep this valid for both GCC and Clang.
inline VecF select(VecI mask, VecF a, VecF b) {
  return (VecF)(((VecI)a & mask) | ((VecI)b & ~mask));
}
inline VecF vmax(VecF a, VecF b) { return select(a > b, a, b); }

inline float hmax(VecF v) {
  float r = v[0];
  for (int i = 1; i < kVW; ++i)
    r = std::max(r, v[i]);
  return r;
}
inline float hsum(VecF v) {
  float r = 0.0f;
  for (int i = 0; i < kVW; ++i)
    r += v[i];
  return r;
}

/// Vectorised exp(x) with about 2 ulp relative error (Cephes expf scheme).
/// Lanes below -87.33 (including -inf) give exactly 0 so masked attention
/// scores vanish; lanes above 88.37 are clamped to a large finite value.
inline VecF vexp(VecF x) {
  const VecF lo = splat(-87.3365447f), hi = splat(88.3762626647949f);
  VecI under = x < lo;
  x = select(x < lo, lo, x);
  x = select(x > hi, hi, x);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick; exact for |n| < 2^22.
  const VecF magic = splat(12582912.0f);
  VecF n = (x * 1.44269504088896341f + magic) - magic;
  // r = x - n ln 2, Cody-Waite split so r is exact.
  VecF r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VecF p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // A NaN lane (its result is NaN from p) takes exponent 0 here: the
  // conversion of NaN to an integer is undefined.
  VecI e = (__builtin_convertvector(select(n == n, n, VecF{}), VecI) + 127)
           << 23;
  return select(under, VecF{}, p * (VecF)e);
}

/// exp(x) of one lane: vexp's arithmetic, branch-free, so that the `omp
/// simd` loops of generated row kernels that call it stay vectorised (a
/// call of std::exp would make them scalar).
inline float expLanes(float x) {
  const bool under = x < -87.3365447f;
  x = under ? -87.3365447f : x;
  x = x > 88.3762626647949f ? 88.3762626647949f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // NaN (the result is NaN from p) takes exponent 0: converting NaN to an
  // integer is undefined, and so would be the shift of what it gave.
  const int32_t bits = ((n == n ? static_cast<int32_t>(n) : 0) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return under ? 0.0f : p * scale;
}

using modk_small::segmentOf;

/// f(e) for every item e < f.items() of a small kernel (SmallKernels.h), in
/// order.
template <typename F> inline void forEachItem(const F &f) {
  const int64_t n = f.items();
  for (int64_t e = 0; e < n; ++e)
    f(e);
}

/// Rows below this run serially: OpenMP start-up would cost more than it saves.
constexpr int64_t kMinParallelWork = 1 << 15;

/// Row chunk size of deterministic reductions over n rows: at most about 64
/// chunks, so the partial buffers stay small, and never fewer than 16 rows.
/// Depends only on n, never on the thread count.
inline int64_t reduceChunk(int64_t n) {
  return std::max<int64_t>(16, (n + 63) / 64);
}

/// out[0:W] += sum over rows i < n of the per-row contributions that
/// `body(i0, i1, partial)` adds into its zeroed `partial[0:W]` for the rows
/// [i0, i1). Chunks run in parallel when `parallel`; the partials are then
/// summed in chunk order, so the result is independent of the thread count.
template <typename T, typename F>
inline void chunkedReduce(int64_t n, int64_t W, T *out, bool parallel, F body) {
  if (n <= 0)
    return;
  const int64_t chunk = reduceChunk(n);
  const int64_t nchunks = (n + chunk - 1) / chunk;
  static thread_local std::vector<T> partial;
  if (int64_t(partial.size()) < nchunks * W)
    partial.resize(nchunks * W);
  T *pp = partial.data();
#pragma omp parallel for schedule(static) if (parallel && nchunks > 1)
  for (int64_t c = 0; c < nchunks; ++c) {
    T *pc = pp + c * W;
    std::fill(pc, pc + W, T(0));
    body(c * chunk, std::min(n, (c + 1) * chunk), pc);
  }
#pragma omp parallel for schedule(static) if (parallel &&                      \
                                              nchunks * W > kMinParallelWork)
  for (int64_t w = 0; w < W; ++w) {
    T acc = T(0);
    for (int64_t c = 0; c < nchunks; ++c)
      acc += pp[c * W + w];
    out[w] += acc;
  }
}

} // namespace detail

//===----------------------------------------------------------------------===//
// bf16 storage
//===----------------------------------------------------------------------===//

/// x rounded to the nearest bf16 (8 significant bits, ties to even), as the
/// f32 of the same value: what storing x as bf16 keeps. NaN stays NaN;
/// magnitudes past the largest bf16 round to inf.
inline float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  // Without a branch, so that loops over it vectorise.
  const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t nan = (u | 0x00400000u) & 0xffff0000u; // stays a NaN
  u = (u & 0x7fffffffu) > 0x7f800000u ? nan : nearest;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

/// A bf16 in memory: a bf16 model's KV cache and the buffers only its
/// products read (modk-store-bf16) hold bf16 in half the bytes. From a float
/// it rounds (bf16_round); to a float it is exact, so a bf16 value stored
/// and read back is unchanged.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  bf16(float x) {
    const float r = bf16_round(x);
    uint32_t u;
    std::memcpy(&u, &r, sizeof(u));
    bits = static_cast<uint16_t>(u >> 16);
  }
  operator float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &u, sizeof(x));
    return x;
  }
};

namespace detail {
/// kVW bf16 values widened to floats (exact).
inline VecF loadu(const bf16 *p) {
  VecF v;
  for (int l = 0; l < kVW; ++l)
    v[l] = static_cast<float>(p[l]);
  return v;
}

/// dst[0 .. n) = src[0 .. n) as elements C (float, or bf16: rounded) from
/// elements T (float, or bf16).
template <typename C, typename T>
inline void storeRow(C *dst, const T *src, int64_t n) {
  if constexpr (std::is_same_v<C, T>)
    std::memcpy(dst, src, sizeof(C) * n);
  else
    for (int64_t i = 0; i < n; ++i)
      dst[i] = C(static_cast<float>(src[i]));
}
} // namespace detail

//===----------------------------------------------------------------------===//
// bf16 models: products of bf16 operands, accumulated in f32
//===----------------------------------------------------------------------===//

namespace detail {
/// Elements from which roundBf16 uses threads: it is memory-bound, and
/// waking threads costs more than rounding fewer than this.
constexpr int64_t kBf16RoundParallel = int64_t(1) << 20;

/// out[i] = bf16_round(x[i]) for i < n (out may be x), in chunks of a plain
/// simd loop: GCC leaves the serial fallback of an `omp parallel for simd`
/// with a false `if` unvectorised.
inline void roundBf16(float *out, const float *x, int64_t n) {
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kBf16RoundParallel)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = (c + 1) * kChunk < n ? (c + 1) * kChunk : n;
#pragma omp simd
    for (int64_t i = c * kChunk; i < end; ++i)
      out[i] = bf16_round(x[i]);
  }
}

/// out[i] = x[i] for i < n: bf16 values need no rounding, only widening
/// (exact).
inline void roundBf16(float *out, const bf16 *x, int64_t n) {
#pragma omp parallel for simd if (n > kBf16RoundParallel)
  for (int64_t i = 0; i < n; ++i)
    out[i] = x[i];
}

/// A per-thread f32 scratch buffer of at least n floats, one per `slot`
/// (0, 1: bf16Copy's operands; 2: outputs staged before a bf16 store; 3:
/// a stacked product's weights), reused by the next call with that slot.
inline float *scratchFloats(int64_t n, int slot) {
  static thread_local std::vector<float> scratch[4];
  std::vector<float> &buf = scratch[slot];
  if (static_cast<int64_t>(buf.size()) < n)
    buf.resize(static_cast<size_t>(n));
  return buf.data();
}

/// x[0 .. n) rounded to bf16 (or widened, when x holds bf16) into scratch
/// slot `slot`: the operands of a bf16 product. Products of bf16 values are
/// exact in f32, so sgemm on the rounded copies is a bf16 GEMM with f32
/// accumulation.
template <typename T>
inline const float *bf16Copy(const T *x, int64_t n, int slot) {
  float *buf = scratchFloats(n, slot);
  roundBf16(buf, x, n);
  return buf;
}

/// A [rows, cols] block of x whose rows are `ld` elements apart, rounded
/// to bf16 (or widened) into scratch slot `slot`, its rows contiguous: the
/// operand of a grouped product's slice (run_group), or of a whole product
/// (ld == cols: bf16Copy).
template <typename T>
inline const float *bf16CopyBlock(const T *x, int64_t rows, int64_t cols,
                                  int64_t ld, int slot) {
  if (ld == cols)
    return bf16Copy(x, rows * cols, slot);
  float *buf = scratchFloats(rows * cols, slot);
  for (int64_t r = 0; r < rows; ++r)
    roundBf16(buf + r * cols, x + r * ld, cols);
  return buf;
}

/// Rows up to which a bf16 product rounds the weight in cache-sized blocks.
constexpr int64_t kBf16FewRows = 16;

/// y[M, count] = a[M, K] * w[count, K]^T + beta * y, y's rows LDC floats
/// apart: `count` output columns of a product (all N of them, or a slice of
/// a grouped product's, run_group), w the weight's first row of them. The
/// operands are rounded to bf16 first when BF16 (a may then hold bf16:
/// TA). a's rows are LDA floats apart (a column window of a stacked
/// product: modk-fuse-horizontal), f32 only. At most kBf16FewRows rows
/// (decode steps), a bf16 product rounds the weight a block of rows at a
/// time (128 KB, which stays in cache for the product), so it is read from
/// memory once; a rounded copy of all of it would cost more than the
/// product at so few rows.
template <int K, bool BF16, int LDA, int LDC, typename TA>
inline void linearColumns(const TA *a, int64_t M, const float *w, int64_t count,
                          float beta, float *y) {
  static_assert(BF16 || std::is_same_v<TA, float>,
                "bf16 operands are for bf16 products");
  static_assert(LDA == K || !BF16, "a bf16 product reads contiguous rows");
  if (M <= 0 || count <= 0)
    return;
  if constexpr (BF16) {
    const float *ar = bf16Copy(a, M * K, 0);
    if (M <= kBf16FewRows) {
      constexpr int64_t kBlockFloats = int64_t(1) << 15;
      constexpr int64_t kRows = kBlockFloats / K > 0 ? kBlockFloats / K : 1;
      for (int64_t n0 = 0; n0 < count; n0 += kRows) {
        const int64_t rows = count - n0 < kRows ? count - n0 : kRows;
        const float *wr = bf16Copy(w + n0 * K, rows * K, 1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
                    static_cast<int>(M), static_cast<int>(rows), K, 1.0f, ar, K,
                    wr, K, beta, y + n0, LDC);
      }
      return;
    }
    const float *wr = bf16Copy(w, count * K, 1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M),
                static_cast<int>(count), K, 1.0f, ar, K, wr, K, beta, y, LDC);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M),
                static_cast<int>(count), K, 1.0f, a, LDA, w, K, beta, y, LDC);
  }
}

/// y[M, N] = a[M, K] * w^T + beta * y: every column of the product.
template <int N, int K, bool BF16, int LDA, typename TA>
inline void linearBeta(const TA *a, int64_t M, const float *w, float beta,
                       float *y) {
  linearColumns<K, BF16, LDA, N>(a, M, w, N, beta, y);
}

/// Slice `slice` of `slices` of `width` columns: [first, end).
inline void sliceRange(int64_t width, int slice, int slices, int64_t &first,
                       int64_t &end) {
  first = width * slice / slices;
  end = width * (slice + 1) / slices;
}
} // namespace detail

/// y[M, N] = a[M, K] * w^T with w in nn.Linear layout [N, K]. M may be 0.
/// BF16: both operands rounded to bf16, f32 accumulation (a bf16 model; a
/// may be stored as bf16). Must not be called from inside an OpenMP
/// parallel region. LDA: a's row stride (f32 products).
template <int N, int K, bool BF16 = false, int LDA = K, typename TA>
inline void linear(const TA *a, int64_t M, const float *w, float *y) {
  detail::linearBeta<N, K, BF16, LDA>(a, M, w, 0.0f, y);
}

/// y[M, N] += a[M, K] * w^T: the fused residual add.
template <int N, int K, bool BF16 = false, int LDA = K, typename TA>
inline void linear_residual(const TA *a, int64_t M, const float *w,
                            float *y) {
  detail::linearBeta<N, K, BF16, LDA>(a, M, w, 1.0f, y);
}

/// The weights of a stacked product (modk-fuse-horizontal): w_1 [N_1, K],
/// ..., w_g [N_g, K] one after another, [N_1 + ... + N_g, K], in a
/// per-thread buffer that the next call reuses.
template <int K, int... N, typename... W>
inline const float *stack_weights(const W *...w) {
  static_assert(sizeof...(N) == sizeof...(W), "a row count per weight");
  float *stacked = detail::scratchFloats((int64_t(N) + ...) * K, 3);
  float *at = stacked;
  ((std::memcpy(at, w, sizeof(float) * int64_t(N) * K), at += int64_t(N) * K),
   ...);
  return stacked;
}

//===----------------------------------------------------------------------===//
// Groups of products (modk-group-gemms)
//===----------------------------------------------------------------------===//

/// The most slices into which run_group splits each member of a group
/// whose output has `width` columns (a product's N, an input gradient's K,
/// a weight gradient's rows): slices of at least 128 columns, at most 4,
/// so that the threads share even one member's work, and each slice still
/// packs a whole panel of the weight.
constexpr int group_slices(int64_t width) {
  return width >= 512 ? 4 : width >= 256 ? 2 : 1;
}

namespace detail {
/// Rows of all members below which a group runs on the calling thread: a
/// decode step's experts hold a few rows, whose products cost less than
/// waking the threads.
constexpr int64_t kGroupParallelRows = 32;

/// order[0 .. members): the members by decreasing row count, ties in
/// member order (an insertion sort: a group has at most 16 members).
inline void groupOrder(const int64_t *rows, int members, int *order) {
  for (int m = 0; m < members; ++m) {
    int at = m;
    for (; at > 0 && rows[order[at - 1]] < rows[m]; --at)
      order[at] = order[at - 1];
    order[at] = m;
  }
}

/// run_group's loop, compiled once for every group: tile(context, member,
/// slice, slices) over the tiles, the members in groupOrder.
inline void runGroupTiles(const int64_t *rows, int members, int maxSlices,
                          void (*tile)(void *, int, int, int), void *context) {
  // sgemm runs inside a parallel region, on its caller's thread, with
  // OpenBLAS's OpenMP build (openblas_get_parallel() 2) only.
  static const bool nests = openblas_get_parallel() == 2;
  int64_t total = 0;
  for (int m = 0; m < members; ++m)
    total += rows[m];
  if (!nests || total < kGroupParallelRows) {
    // One whole member at a time, each sgemm on OpenBLAS's threads.
    for (int m = 0; m < members; ++m)
      tile(context, m, 0, 1);
    return;
  }
  int order[16];
  groupOrder(rows, members, order);
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < members * maxSlices; ++t)
    tile(context, order[t / maxSlices], t % maxSlices, maxSlices);
}
} // namespace detail

/// The kernels of a group (modk-group-gemms: an MoE layer's experts, which
/// touch no buffer another member writes) as the tiles of one parallel
/// region: tile(member, slice, slices) for every member and each of its
/// `maxSlices` slices, the members with the most rows first, so that the
/// smallest fill in at the end. Waking the threads once for the group, and
/// giving each tile one thread, is what a group saves over a product a
/// member, each of which spreads its few rows over every thread. A tile's
/// sgemm runs on its own thread only with OpenBLAS's OpenMP build; with
/// another, and where the members hold fewer than kGroupParallelRows rows
/// together, each member runs whole (one slice), one after another.
template <int Members, typename Tile>
inline void run_group(const int64_t (&rows)[Members], int maxSlices,
                      Tile &&tile) {
  static_assert(Members <= 16, "modk-group-gemms groups at most 16 members");
  detail::runGroupTiles(
      rows, Members, maxSlices,
      [](void *context, int member, int slice, int slices) {
        (*static_cast<std::remove_reference_t<Tile> *>(context))(member, slice,
                                                                 slices);
      },
      &tile);
}

/// Slice `slice` of `slices` of y[M, N] = a[M, K] * [w_1; ...; w_g]^T, N =
/// N_1 + ... + N_g: a grouped product's tile (run_group). One weight, or
/// the weights of a stacked product (modk-fuse-horizontal), which a slice
/// reads in place where linear reads stack_weights' copy.
template <int K, bool BF16, int LDA, int... N, typename TA, typename... W>
inline void linear_slice(int slice, int slices, const TA *a, int64_t M,
                         float *y, const W *...w) {
  static_assert(sizeof...(N) == sizeof...(W), "a row count per weight");
  constexpr int64_t kN = (int64_t(N) + ...);
  int64_t first, end;
  detail::sliceRange(kN, slice, slices, first, end);
  const float *weights[] = {w...};
  const int64_t counts[] = {N...};
  int64_t part = 0;
  for (size_t p = 0; p < sizeof...(N); part += counts[p], ++p) {
    const int64_t lo = std::max(first, part);
    const int64_t hi = std::min(end, part + counts[p]);
    if (lo < hi)
      detail::linearColumns<K, BF16, LDA, kN>(
          a, M, weights[p] + (lo - part) * K, hi - lo, 0.0f, y + lo);
  }
}

/// An f32 staging buffer for a [rows, N] GEMM product that its generated
/// `rows` epilogue finishes; per thread, reused by the next call.
template <int N> inline float *staged_rows(int64_t rows) {
  return detail::scratchFloats(rows * N, 2);
}

namespace detail {
/// RoPE's angles at positions 0 .. positions - 1 (a sequence's), HD floats
/// a position: the HD/2 cosines, then the HD/2 sines (modk_small::ropeAngle).
/// The generated RoPE kernels build one when first called and keep it.
template <int HD>
inline std::vector<float> ropeTable(float theta, int32_t positions) {
  std::vector<float> table(static_cast<size_t>(positions) * HD);
  forEachItem(modk_small::RopeTableEntries<HD, 1, HD / 2>{table.data(),
                                                          positions, theta});
  return table;
}

/// The angles of position p as ropeTable lays them out: its row where the
/// table holds p (a sequence's positions), else formed into `row` (HD
/// floats).
template <int HD>
inline const float *ropeTableRow(const std::vector<float> &table, int32_t p,
                                 float theta, float *row) {
  if (p >= 0 && static_cast<size_t>(p) * HD < table.size())
    return table.data() + static_cast<size_t>(p) * HD;
  for (int j = 0; j < HD / 2; ++j)
    modk_small::ropeAngle<HD>(p, j, theta, row[j], row[HD / 2 + j]);
  return row;
}
} // namespace detail

//===----------------------------------------------------------------------===//
// Causal attention (flash-style, blocked over queries and keys)
//===----------------------------------------------------------------------===//

namespace detail {

/// Attention tiling, chosen for Zen 4 (AVX-512); each can be overridden
/// with -D for experiments:
///  - MODK_CPU_ATTN_BQ: query rows per work item (64);
///  - MODK_CPU_ATTN_NB: vectors per key tile, BK = NB * kVW keys (4);
///  - MODK_CPU_ATTN_R: query rows per QK^T register block (8);
///  - MODK_CPU_ATTN_PVREGS: accumulator registers of the PV block (all).
/// R = 8 and PVREGS = 32 slightly oversubscribe the 32 zmm registers on
/// purpose: the larger register blocks save more loads than the few spills
/// cost.
#ifndef MODK_CPU_ATTN_BQ
#define MODK_CPU_ATTN_BQ 64
#endif
#ifndef MODK_CPU_ATTN_NB
#define MODK_CPU_ATTN_NB 4
#endif
#ifndef MODK_CPU_ATTN_R
#define MODK_CPU_ATTN_R 8
#endif
#ifndef MODK_CPU_ATTN_PVREGS
#define MODK_CPU_ATTN_PVREGS kNumVecRegs
#endif
constexpr int kAttnBK = MODK_CPU_ATTN_NB * kVW;
constexpr int kAttnBQ = MODK_CPU_ATTN_BQ;

/// One work item of causal_attention: query rows [i0, i0 + BQ) of one
/// (segment, head).
struct AttnItem {
  int64_t seg;
  int32_t head;
  int32_t qblock;
};

/// Sizes of the packed key/value tiles of one (tile, head).
template <int HD> struct AttnTile {
  static constexpr int BK = kAttnBK;
  static constexpr int DV = (HD + kVW - 1) / kVW; // vectors per value row
  static constexpr int HDP = DV * kVW;            // padded head dim
  static constexpr int64_t KSize = int64_t(HD) * BK;
  static constexpr int64_t VSize = int64_t(BK) * HDP;
};

/// Packs key tile `tile` (global tile index, first row `r0`, `kc` valid rows)
/// for every key/value head (H of them here): keys transposed to [HD][BK] so
/// scores vectorise over keys, values to [BK][HDP]; missing keys and padding
/// are zero. KS, VS: the row strides of k and v, elements TK and TV (float,
/// or bf16: widened, exactly).
template <int H, int HD, int KS, int VS, typename TK, typename TV>
inline void packKVTile(const TK *k, const TV *v, int64_t r0, int kc,
                       int64_t tile, float *pk, float *pv) {
  using T = AttnTile<HD>;
  for (int h = 0; h < H; ++h) {
    float *kt = pk + (tile * H + h) * T::KSize;
    float *vt = pv + (tile * H + h) * T::VSize;
    std::memset(kt, 0, sizeof(float) * T::KSize);
    std::memset(vt, 0, sizeof(float) * T::VSize);
    for (int c = 0; c < kc; ++c) {
      const TK *ks = k + (r0 + c) * KS + h * HD;
      for (int d = 0; d < HD; ++d)
        kt[d * T::BK + c] = float(ks[d]);
      const TV *vs = v + (r0 + c) * VS + h * HD;
      if constexpr (std::is_same_v<TV, float>)
        std::memcpy(vt + c * T::HDP, vs, sizeof(float) * HD);
      else
        for (int d = 0; d < HD; ++d)
          vt[c * T::HDP + d] = float(vs[d]);
    }
  }
}

/// Processes one work item. `pk`/`pv` are this (segment, head)'s packed
/// tiles, consecutive tiles tileStrideK/V floats apart; QS: q's row stride
/// (q float, or bf16: widened). Scratch is on the stack and sized by HD.
template <int H, int HD, int QS, typename TQ, typename Out>
inline void attentionBlock(const TQ *q, const int64_t *seg, const int32_t *pos,
                           const float *pk, const float *pv,
                           int64_t tileStrideK, int64_t tileStrideV, Out *out,
                           const AttnItem &item) {
  using T = AttnTile<HD>;
  constexpr int BQ = kAttnBQ, BK = kAttnBK;
  constexpr int NB = BK / kVW; // vectors per score row
  constexpr int DV = T::DV, HDP = T::HDP;
  constexpr int64_t LD = static_cast<int64_t>(H) * HD; // row stride
  // Register blocking: R query rows share each loaded K vector, RP query
  // rows share each loaded V row.
  constexpr int R = kNumVecRegs >= 32 ? MODK_CPU_ATTN_R : 2;
  // RP is a power of two <= 8 so it divides BQ.
  constexpr int RPraw = (MODK_CPU_ATTN_PVREGS) / DV;
  constexpr int RP = RPraw >= 8 ? 8 : RPraw >= 4 ? 4 : RPraw >= 2 ? 2 : 1;
  static_assert(BQ % R == 0 && BQ % RP == 0, "query block tiling");

  alignas(64) float Qp[BQ * HD]; // scaled queries
  alignas(64) float Sb[BQ * BK]; // scores, then probabilities
  alignas(64) float Oacc[BQ * HDP];
  float mrow[BQ], lrow[BQ], alpha[BQ];
  int64_t lim[BQ];

  const int64_t base = seg[item.seg];
  const int64_t n = seg[item.seg + 1] - base;
  const int32_t *ps = pos + base;
  const int64_t i0 = static_cast<int64_t>(item.qblock) * BQ;
  const int qn = static_cast<int>(std::min<int64_t>(BQ, n - i0));
  if (qn <= 0)
    return;
  const int qnR = (qn + R - 1) / R * R;
  const int qnP = (qn + RP - 1) / RP * RP;
  const int64_t hoff = static_cast<int64_t>(item.head) * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));

  // lim[r]: keys [0, lim[r]) have pos <= pos of query r. Positions ascend, so
  // the valid keys form a prefix and lim is non-decreasing in r.
  int64_t prev = 0;
  for (int r = 0; r < qn; ++r) {
    const int64_t i = i0 + r;
    int64_t l = std::max(i + 1, prev);
    while (l < n && ps[l] <= ps[i])
      ++l;
    lim[r] = prev = l;
  }
  const int64_t kend = lim[qn - 1];
  const int64_t kfull = lim[0];

  for (int r = 0; r < qnR; ++r) {
    if (r < qn) {
      const TQ *src = q + (base + i0 + r) * QS + hoff;
      for (int d = 0; d < HD; ++d)
        Qp[r * HD + d] = float(src[d]) * scale;
    } else {
      for (int d = 0; d < HD; ++d)
        Qp[r * HD + d] = 0.0f;
    }
  }
  for (int r = 0; r < BQ; ++r) {
    mrow[r] = -std::numeric_limits<float>::infinity();
    lrow[r] = 0.0f;
    alpha[r] = 1.0f;
  }
  std::memset(Oacc, 0, sizeof(float) * qnP * HDP);

  for (int64_t k0 = 0; k0 < kend; k0 += BK) {
    const int kc = static_cast<int>(std::min<int64_t>(BK, kend - k0));
    const float *Kt = pk + (k0 / BK) * tileStrideK;
    const float *Vp = pv + (k0 / BK) * tileStrideV;

    // S = Qp Kt: R rows x BK keys per step, accumulators in registers.
    for (int rg = 0; rg < qnR; rg += R) {
      VecF acc[R][NB];
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b)
          acc[r][b] = VecF{};
      for (int d = 0; d < HD; ++d) {
        VecF kv[NB];
        for (int b = 0; b < NB; ++b)
          kv[b] = loadu(Kt + d * BK + b * kVW);
        for (int r = 0; r < R; ++r) {
          const VecF qb = splat(Qp[(rg + r) * HD + d]);
          for (int b = 0; b < NB; ++b)
            acc[r][b] += qb * kv[b];
        }
      }
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b)
          storeu(Sb + (rg + r) * BK + b * kVW, acc[r][b]);
    }

    // Online softmax update per query row.
    const bool needMask = k0 + BK > kfull;
    for (int r = 0; r < qn; ++r) {
      float *sr = Sb + r * BK;
      if (needMask) {
        const int64_t valid = std::max<int64_t>(0, lim[r] - k0);
        for (int64_t c = valid; c < BK; ++c)
          sr[c] = -std::numeric_limits<float>::infinity();
      }
      VecF mx = loadu(sr);
      for (int b = 1; b < NB; ++b)
        mx = vmax(mx, loadu(sr + b * kVW));
      const float mnew = std::max(mrow[r], hmax(mx));
      // mrow starts at -inf; the first tile always holds key 0, which every
      // query may see, so mnew is finite here.
      alpha[r] = std::exp(mrow[r] - mnew);
      mrow[r] = mnew;
      VecF sum = VecF{};
      for (int b = 0; b < NB; ++b) {
        const VecF p = vexp(loadu(sr + b * kVW) - mnew);
        storeu(sr + b * kVW, p);
        sum += p;
      }
      lrow[r] = lrow[r] * alpha[r] + hsum(sum);
    }
    for (int r = qn; r < qnP; ++r) {
      alpha[r] = 1.0f;
      std::memset(Sb + r * BK, 0, sizeof(float) * BK);
    }

    // O = alpha * O + P V: RP rows share each loaded value row.
    for (int rg = 0; rg < qnP; rg += RP) {
      VecF acc[RP][DV];
      for (int r = 0; r < RP; ++r) {
        const VecF a = splat(alpha[rg + r]);
        for (int b = 0; b < DV; ++b)
          acc[r][b] = loadu(Oacc + (rg + r) * HDP + b * kVW) * a;
      }
      for (int c = 0; c < kc; ++c) {
        VecF vv[DV];
        for (int b = 0; b < DV; ++b)
          vv[b] = loadu(Vp + c * HDP + b * kVW);
        for (int r = 0; r < RP; ++r) {
          const VecF pb = splat(Sb[(rg + r) * BK + c]);
          for (int b = 0; b < DV; ++b)
            acc[r][b] += pb * vv[b];
        }
      }
      for (int r = 0; r < RP; ++r)
        for (int b = 0; b < DV; ++b)
          storeu(Oacc + (rg + r) * HDP + b * kVW, acc[r][b]);
    }
  }

  for (int r = 0; r < qn; ++r) {
    const float inv = 1.0f / lrow[r];
    Out *dst = out + (base + i0 + r) * LD + hoff;
    for (int d = 0; d < HD; ++d)
      dst[d] = Out(Oacc[r * HDP + d] * inv);
  }
}

} // namespace detail

/// Causal multi-head attention over segments. q and out are [rows, H * HD],
/// k and v [rows, KVH * HD] with rows = seg[nseg] (out float, or bf16:
/// rounded); q, k and v rows QS, KS and VS elements apart (columns of one
/// stacked product: modk-fuse-horizontal, docs/compiler.md). q, k and v hold
/// float, or bf16 (a bf16 model's, modk-store-bf16: widened as they are
/// read, exactly). For row i in segment s and
/// head h, out = softmax_j(q_i . k_j / sqrt(HD)) v_j over the rows j of segment
/// s with pos[j] <= pos[i] (positions must be non-decreasing in a segment;
/// equal positions see each other), k and v of key/value head
/// h / (H / KVH): grouped-query attention where KVH < H, the grouping of
/// docs/model-format.md section 3 (KVH = H: multi-head attention).
///
/// Flash-style: keys and values are first packed once into per-(tile,
/// key/value head) blocks (keys transposed); then each (segment, head, block of
/// 64 queries) is one OpenMP work item that streams those tiles with an online,
/// max-subtracted softmax, so no score matrix is ever materialised. The
/// packing buffer is cached per calling thread and only grows.
template <int H, int HD, int QS = H *HD, int KS = H *HD, int VS = H *HD,
          int KVH = H, typename TQ, typename TK, typename TV, typename Out>
inline void causal_attention(const TQ *q, const TK *k, const TV *v,
                             int64_t nseg, const int64_t *seg,
                             const int32_t *pos, Out *out) {
  static_assert(KVH >= 1 && H % KVH == 0, "n_kv_heads divides n_heads");
  using T = detail::AttnTile<HD>;
  constexpr int BQ = detail::kAttnBQ, BK = detail::kAttnBK;
  static thread_local std::vector<float> packK, packV;
  static thread_local std::vector<int64_t> tileOff;
  static thread_local std::vector<detail::AttnItem> items;

  tileOff.assign(nseg + 1, 0);
  items.clear();
  for (int64_t s = 0; s < nseg; ++s) {
    const int64_t n = seg[s + 1] - seg[s];
    tileOff[s + 1] = tileOff[s] + (n + BK - 1) / BK;
    const int32_t nb = static_cast<int32_t>((n + BQ - 1) / BQ);
    for (int32_t b = 0; b < nb; ++b)
      for (int32_t h = 0; h < H; ++h)
        items.push_back({s, h, b});
  }
  const int64_t ntiles = tileOff[nseg];
  if (ntiles == 0)
    return;
  if (int64_t(packK.size()) < ntiles * KVH * T::KSize) {
    packK.resize(ntiles * KVH * T::KSize);
    packV.resize(ntiles * KVH * T::VSize);
  }
  float *pk = packK.data(), *pv = packV.data();
  const int64_t *toff = tileOff.data();

  // Later query blocks see more keys: schedule the biggest first.
  std::stable_sort(items.begin(), items.end(),
                   [](const detail::AttnItem &a, const detail::AttnItem &b) {
                     return a.qblock > b.qblock;
                   });
  const int64_t nitems = static_cast<int64_t>(items.size());
  const detail::AttnItem *it = items.data();
  const int64_t rows = seg[nseg];
#pragma omp parallel if (rows * H * HD > detail::kMinParallelWork)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntiles; ++t) {
      const int64_t s = detail::segmentOf(toff, nseg, t);
      const int64_t r0 = seg[s] + (t - toff[s]) * BK;
      const int kc = static_cast<int>(std::min<int64_t>(BK, seg[s + 1] - r0));
      detail::packKVTile<KVH, HD, KS, VS>(k, v, r0, kc, t, pk, pv);
    }
    // The implicit barrier above publishes the packed tiles.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < nitems; ++t) {
      const detail::AttnItem &w = it[t];
      const int64_t first = toff[w.seg] * KVH + w.head / (H / KVH);
      detail::attentionBlock<H, HD, QS, TQ, Out>(
          q, seg, pos, pk + first * T::KSize, pv + first * T::VSize,
          KVH * T::KSize, KVH * T::VSize, out, w);
    }
  }
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

/// Dense layout: pos[b*S + i] = i, seg[b] = b*S, seg[B] = B*S.
template <int S>
inline void identity_segments(int64_t B, int32_t *pos, int64_t *seg) {
  detail::forEachItem(modk_small::IdentitySegments<S>{B, pos, seg});
}

/// tokens [B, S + 1] -> inputs[b, i] = tokens[b, i], targets[b, i] =
/// tokens[b, i + 1] (both [B, S]).
template <int S>
inline void split_tokens(const int32_t *tokens, int64_t B, int32_t *inputs,
                         int32_t *targets) {
  detail::forEachItem(modk_small::SplitTokens<S>{tokens, B, inputs, targets});
}

namespace detail {
/// Maps a router value to a key whose unsigned order is the selection order:
/// larger value first, equal values by lower position. -0.0 and +0.0 are
/// equal (they tie), and every NaN ranks below every number, -inf included.
inline uint64_t topkKey(float r, int32_t i) {
  uint32_t u;
  if (std::isnan(r)) {
    u = 0;
  } else {
    if (r == 0.0f)
      r = 0.0f; // fold -0.0 into +0.0
    std::memcpy(&u, &r, sizeof(u));
    // Order-preserving float -> uint transform. Non-NaN values land in
    // [0x007FFFFF (-inf), 0xFF800000 (+inf)], so 0 is free for NaN.
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
  return (static_cast<uint64_t>(u) << 32) |
         (0xFFFFFFFFu - static_cast<uint32_t>(i));
}
} // namespace detail

/// The gather of a selection that gathers nothing: modk-fuse-select-gather
/// left the gather a kernel of its own.
struct NoGather {
  static constexpr int64_t width = 0;
  void operator()(int64_t, int64_t, int64_t) const {}
};

/// Top-k routing: for each sequence b, the K largest r[b*S + i] (ties go to
/// the lower position; NaN ranks below every number, NaNs among themselves by
/// lower position) are written in ascending position order to
/// pos[b*K .. b*K + K); seg[b] = b*K, seg[B] = B*K; mask[b*S + i] = 1 if
/// selected else 0. Each (value, position) pair gets a distinct 64-bit key
/// and nth_element partitions on it: expected O(S) per sequence.
/// With a Gather (modk-fuse-select-gather: a generated functor, rows of
/// Gather::width), the same parallel region then gathers the selected
/// rows, gather(b, i, i + 1) for row i of sequence b, over all the rows at
/// once, so that one sequence's rows are spread over the threads too.
template <int S, int K, typename Gather = NoGather>
inline void select_topk(const float *r, int64_t B, int32_t *pos, int64_t *seg,
                        int32_t *mask, Gather gather = {}) {
  static_assert(K >= 1 && K <= S, "capacity must be in [1, S]");
  constexpr bool gathers = !std::is_same_v<Gather, NoGather>;
  const bool parallel =
      (B > 1 && B * S > 4096) ||
      (gathers && B * K * Gather::width > detail::kMinParallelWork);
#pragma omp parallel if (parallel)
  {
    std::vector<uint64_t> keys(K < S ? S : 0); // per-thread scratch
#pragma omp for
    for (int64_t b = 0; b < B; ++b) {
      const float *rb = r + b * S;
      int32_t *mb = mask + b * S;
      if (K == S) {
        for (int i = 0; i < S; ++i)
          mb[i] = 1;
      } else {
        for (int i = 0; i < S; ++i)
          keys[i] = detail::topkKey(rb[i], i);
        std::nth_element(keys.begin(), keys.begin() + (K - 1), keys.end(),
                         [](uint64_t a, uint64_t c) { return a > c; });
        for (int i = 0; i < S; ++i)
          mb[i] = 0;
        for (int j = 0; j < K; ++j)
          mb[0xFFFFFFFFu - static_cast<uint32_t>(keys[j])] = 1;
      }
      // Scanning the mask emits the selection in ascending position order.
      int32_t *pb = pos + b * K;
      int c = 0;
      for (int i = 0; i < S; ++i)
        if (mb[i])
          pb[c++] = i;
      seg[b] = b * K;
    }
    if constexpr (gathers) {
      // (The loop above ends with a barrier: every row is selected.)
#pragma omp for
      for (int64_t i = 0; i < B * K; ++i)
        gather(i / K, i, i + 1);
    }
  }
  seg[B] = B * K;
}

/// gather(b, i, i + 1) for every row i of every sequence b (seg, B + 1
/// offsets): a fused gather after a causal selection, whose compaction
/// spans the sequences.
template <typename Gather>
inline void gather_sequences(int64_t B, const int64_t *seg, Gather gather) {
  const int64_t rows = seg[B];
#pragma omp parallel for if (rows * Gather::width > detail::kMinParallelWork)
  for (int64_t i = 0; i < rows; ++i)
    gather(detail::segmentOf(seg, B, i), i, i + 1);
}

/// Causal routing: row b*S+i is routed iff logit[b*S + i] > 0 (a NaN logit is
/// not routed). Routed rows of all sequences are packed in order: pos holds
/// their positions, seg the cumulative offsets, mask the 0/1 decision per
/// token. Returns the total number of routed rows.
template <int S>
inline int64_t select_causal(const float *logit, int64_t B, int32_t *pos,
                             int64_t *seg, int32_t *mask) {
  int64_t c = 0;
  for (int64_t b = 0; b < B; ++b) {
    seg[b] = c;
    for (int i = 0; i < S; ++i)
      c += modk_small::causalSelectToken<S>(logit, b, i, c, pos, mask);
  }
  seg[B] = c;
  return c;
}

//===----------------------------------------------------------------------===//
// Mixture-of-Experts MLPs (docs/model-format.md section 7)
//===----------------------------------------------------------------------===//

/// modk.moe_select: for the rows of T (seg, B + 1 offsets; RT rows a
/// sequence in T's buffers), the softmax, choice and gate of each row, and
/// each real expert's kept rows in `rows`. With `decisions`, each token's
/// decision ([B, S]; pos: T's tokens). With `running` (a decode step: [B, E],
/// the rows each expert kept in earlier steps), the capacity counts them
/// too, and the kept rows are added to them; a sequence that is not
/// `active` (where given) keeps no row.
template <int RT, int W, int E, int C, int S>
inline void moe_select(const float *z, int64_t B, const int64_t *seg,
                       const int32_t *pos, float *probs, int32_t *choice,
                       float *gate, modk_small::ExpertRows<E> rows,
                       int32_t *decisions, int32_t *running,
                       const uint8_t *active) {
  std::vector<int32_t> counts(size_t(B) * E);
  const bool parallel = B > 1 && B * RT * W > detail::kMinParallelWork;
#pragma omp parallel for if (parallel)
  for (int64_t b = 0; b < B; ++b)
    modk_small::moeChooseSequence<W, E, C>(
        z, seg[b], seg[b + 1] - seg[b], probs, choice, gate,
        running ? running + b * E : nullptr, !active || active[b],
        counts.data() + b * E);
  // Each expert's rows, compacted in sequence order.
  for (int e = 0; e < E; ++e) {
    int64_t at = 0;
    for (int64_t b = 0; b < B; ++b) {
      rows.seg[e][b] = at;
      at += counts[size_t(b) * E + e];
    }
    rows.seg[e][B] = at;
  }
  if (running)
    for (int64_t i = 0; i < B * E; ++i)
      running[i] += counts[size_t(i)];
#pragma omp parallel for if (parallel)
  for (int64_t b = 0; b < B; ++b) {
    modk_small::moeFillSequence<E, RT>(b, seg[b], seg[b + 1] - seg[b], choice,
                                       gate, rows);
    if (decisions)
      modk_small::moeDecisionsSequence<W, E, S>(b, seg[b], seg[b + 1] - seg[b],
                                                pos, choice, gate, decisions);
  }
}

/// modk.moe_count: the causal prefill's decode state, counts [B, E], from
/// the rows of T that the forward pass kept at positions below each
/// sequence's prefill length.
template <int E>
inline void moe_count(int64_t B, const int64_t *seg, const int32_t *pos,
                      const int32_t *choice, const float *gate,
                      const int32_t *lengths, int32_t *counts) {
  for (int64_t b = 0; b < B; ++b)
    modk_small::moeCountSequence<E>(seg[b], seg[b + 1] - seg[b], pos, choice,
                                    gate, lengths[b], counts + b * E);
}

/// modk.moe_balance: the balance loss over the N = seg[B] rows of T, added
/// into losses[3] and (times weight) losses[0] divided by n_moe; with
/// dlogits, each row's router-logit gradient. Counts and means are summed
/// in row order in double.
template <int RT, int W>
inline void moe_balance(const float *probs, const int32_t *choice,
                        const float *dgate, int64_t B, const int64_t *seg,
                        float *dlogits, float *losses, double weight,
                        int64_t n_moe) {
  const int64_t rows = seg[B];
  if (rows <= 0)
    return;
  float coef[W];
  modk_small::moeBalanceLoss<W>(probs, choice, rows, losses, weight, n_moe,
                                coef);
  if (!dlogits)
    return;
#pragma omp parallel for if (rows * W > detail::kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r)
    modk_small::moeRouterGradRow<W>(probs + r * W, choice[r], dgate[r], coef,
                                    dlogits + r * W);
}

} // namespace modk_cpu

#endif // MODC_TARGET_CPP_PRELUDE_CPUKERNELS_H
