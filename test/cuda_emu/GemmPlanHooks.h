//===- GemmPlanHooks.h - The kernel tests' GEMM plan --------------*- C++ -*-===//
//
// Part of the modc project.
//
//===----------------------------------------------------------------------===//
///
/// \file
/// A package names, for every product, the GemmPlan modk-configure-gemms
/// chose (docs/cuda.md). The kernel tests call the CUDA library directly and
/// sweep the choices at run time, so the plan of their calls
/// (modk_cuda::DefaultGemmPlan, which the library leaves to its callers)
/// reads switches: the kernel family (or the few-row kernel), the tile, TMA
/// and its grid, and the weight gradient's chunk. By default it chooses as
/// the pass does for an sm_90a part of 132 SMs, but for the few-row kernel
/// (the Stream switch): the large tile where it gives a wave of CTAs (two
/// on mma.sync), wgmma for bf16 products from 64 rows where
/// MODC_CUDA_WGMMA (a test build for sm_90a, or the emulation) allows it.
///
/// Include after the CUDA preludes.
///
//===----------------------------------------------------------------------===//

#ifndef MODC_TEST_GEMM_PLAN_HOOKS_H
#define MODC_TEST_GEMM_PLAN_HOOKS_H

#include <cstdint>

/// A test build for sm_90a (nvcc) defines it 1: its bf16 products take
/// wgmma by default. The emulation runs every family, on mma.sync by default.
#ifndef MODC_CUDA_WGMMA
#define MODC_CUDA_WGMMA 0
#endif
#if defined(__CUDACC__)
#define MODC_TEST_WGMMA_BUILT MODC_CUDA_WGMMA
#else
#define MODC_TEST_WGMMA_BUILT 1
#endif

namespace gemm_hooks {
enum Path { Simt = 0, Mma = 1, Wgmma = 2, Stream = 3 };
/// Stream: products (not weight gradients) of up to this many rows take
/// the few-row kernel, the others mma.sync.
constexpr int64_t kStreamMaxRows = 64;
/// Stream: bf16 products of more rows than this take the few-row kernel on
/// tensor cores (StreamMmaTile), as modk-configure-gemms chooses.
constexpr int64_t kStreamSimtRows = 8;
/// The family of bf16 products (f32 products take mma.sync unless Simt).
constexpr int kDefaultPath =
#if defined(__CUDACC__) && MODC_CUDA_WGMMA
    Wgmma;
#else
    Mma;
#endif
inline int &path() {
  static int p = kDefaultPath;
  return p;
}
/// 0: the tile by problem size; 1: the small tile; 2: the large one (a
/// forced tile puts few-row bf16 products on wgmma too).
inline int &tile() {
  static int t = 0;
  return t;
}
/// Whether wgmma products whose operands allow it are fed by TMA.
inline bool &tma() {
  static bool on = true;
  return on;
}
/// CTAs of a TMA product's persistent grid (0: 132 SMs' worth).
inline int64_t &tmaCtas() {
  static int64_t n = 0;
  return n;
}
/// Rows of a weight gradient's chunk (0: no split).
inline int64_t &wgradChunk() {
  static int64_t n = 0;
  return n;
}

constexpr int64_t kSms = 132;

/// A variant whose TMA grid reads tmaCtas() at launch.
template <int P, int BM, int BN, bool TMA, bool Separate> struct Variant {
  static constexpr int64_t minRows = 0;
  static constexpr int path = P, tileRows = BM, tileCols = BN;
  static constexpr bool tma = TMA, separateEpilogue = Separate;
  static int64_t tmaCtas() {
    const int64_t pinned = gemm_hooks::tmaCtas();
    return pinned > 0 ? pinned : kSms * (BN == 64 ? 2 : 1);
  }
};
} // namespace gemm_hooks

struct modk_cuda::DefaultGemmPlan {
  /// A forced chunk splits every weight gradient; else up to as many
  /// chunks as bring the 64 x 64 output tiles to two waves of CTAs, where
  /// they are at most one.
  template <int N, int K> static int64_t maxSplits() {
    if (gemm_hooks::wgradChunk() > 0)
      return 65535;
    const int64_t tiles = modk_cuda::ceilDiv(N, 64) * modk_cuda::ceilDiv(K, 64);
    const int64_t target = 2 * gemm_hooks::kSms;
    return 2 * tiles > target ? 1 : modk_cuda::ceilDiv(target, tiles);
  }
  static int64_t chunkRows() { return gemm_hooks::wgradChunk(); }

  template <typename Product, typename F>
  static bool dispatch(int64_t rows, int64_t cols, F &&f) {
    namespace d = modk_cuda::detail;
    if constexpr (Product::streamOperands)
      if (gemm_hooks::path() == gemm_hooks::Stream &&
          rows <= gemm_hooks::kStreamMaxRows) {
        if constexpr (Product::bf16)
          if (rows > gemm_hooks::kStreamSimtRows)
            return f(gemm_hooks::Variant<d::PathStream, d::StreamMmaTile::BM,
                                         d::StreamMmaTile::BN, false, false>{});
        return f(gemm_hooks::Variant<d::PathStream, d::StreamTile::BM,
                                     d::StreamTile::BN, false, false>{});
      }
    const bool wgmmaRows = rows >= 64 || gemm_hooks::tile() != 0;
    if constexpr (Product::bf16 && MODC_TEST_WGMMA_BUILT)
      if (gemm_hooks::path() == gemm_hooks::Wgmma && wgmmaRows) {
        if constexpr (Product::tmaOperands)
          if (gemm_hooks::tma())
            return onPath<d::PathWgmma, true, Product>(rows, cols, f);
        return onPath<d::PathWgmma, false, Product>(rows, cols, f);
      }
#if !defined(__CUDACC__) // nvcc builds check the tensor-core kernels only
    if (gemm_hooks::path() == gemm_hooks::Simt)
      return onPath<d::PathSimt, false, Product>(rows, cols, f);
#endif
    return onPath<d::PathMma, false, Product>(rows, cols, f);
  }

private:
  /// The small tile, or the large one where it gives a wave of CTAs (two
  /// below wgmma) or is forced; the other where the epilogue does not fit
  /// the chosen one; the epilogue apart where it fits neither.
  template <int P, bool TMA, typename Product, typename F>
  static bool onPath(int64_t rows, int64_t cols, F &f) {
    namespace d = modk_cuda::detail;
    constexpr int SM = P == d::PathWgmma ? 128 : 64;
    constexpr int SN = 64, LM = 128, LN = 128;
    using Small = typename d::GemmTileFor<P, false, SM, SN>::T;
    using Large = typename d::GemmTileFor<P, false, LM, LN>::T;
    constexpr bool small = d::epilogueFits<Product::epilogue, Small>();
    constexpr bool large = d::epilogueFits<Product::epilogue, Large>();
    const int64_t minCtas = P == d::PathWgmma ? gemm_hooks::kSms
                                               : 2 * gemm_hooks::kSms;
    int choice = gemm_hooks::tile();
    if (choice == 0)
      choice = modk_cuda::ceilDiv(rows, LM) * modk_cuda::ceilDiv(cols, LN) >=
                       minCtas
                   ? 2
                   : 1;
    if constexpr (!small && !large)
      return f(gemm_hooks::Variant<P, SM, SN, TMA, true>{});
    if constexpr (large)
      if (choice == 2 || !small)
        return f(gemm_hooks::Variant<P, LM, LN, TMA, false>{});
    if constexpr (small)
      return f(gemm_hooks::Variant<P, SM, SN, TMA, false>{});
    return false;
  }
};

#endif // MODC_TEST_GEMM_PLAN_HOOKS_H
