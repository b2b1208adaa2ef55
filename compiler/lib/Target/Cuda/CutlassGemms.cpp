//===- CutlassGemms.cpp - CUTLASS kernels of a CUDA package -----*- C++ -*-===//
//
// A product whose #modk.gemm_config has `cutlass` variants runs, from the
// first such variant's rows on, a CUTLASS kernel: on sm_90a a TMA
// warp-specialised kernel from CUTLASS 3.x's collective builders
// (cooperative or pingpong, in clusters), on sm_80, and for an f32
// product (`tf32x3`) on both parts, a CUTLASS 2.x multistage tensor-op
// kernel; a generated elementwise epilogue is an epilogue
// visitor tree on both, over the same generated math. On sm_90a the members
// of a group whose variants are `grouped` (an MoE layer's experts) run as
// one CUTLASS grouped (ptr-array) launch instead. Each distinct
// variant is one kernel type in model.cu, its template arguments read from
// the variant and, for what the variant leaves to the part (sm_80's warp tile,
// the shared memory a CTA may take), from the same description
// modk-configure-gemms chose it from (modc/Dialect/Modk/CudaTargets.h). Below
// that row count, and wherever a CUTLASS kernel cannot run (no bf16 copy of the
// weight, an unaligned operand, the CPU emulation of CUDA), the product runs
// the hand-written tiles of the same configuration. docs/cuda.md, "CUTLASS".
//
//===----------------------------------------------------------------------===//

#include "CutlassGemms.h"
#include "../PlanEmitter.h"

#include "modc/Dialect/Modk/CudaTargets.h"
#include "modc/Target/Package.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SHA256.h"

#include <fmt/format.h>

#include <map>
#include <set>

using namespace mlir;
using namespace modc;

#ifndef MODC_CUTLASS_VERSION
#define MODC_CUTLASS_VERSION ""
#endif
#ifndef MODC_CUTLASS_INCLUDE_DIR
#define MODC_CUTLASS_INCLUDE_DIR ""
#endif
#ifndef MODC_CUTLASS_UTIL_INCLUDE_DIR
#define MODC_CUTLASS_UTIL_INCLUDE_DIR ""
#endif

bool modc::hasCutlassVariant(modk::GemmConfigAttr config) {
  return config && llvm::any_of(config.getVariants(), [](const auto &v) {
           return v.path == modk::GemmPath::cutlass;
         });
}

bool modc::isCutlassGrouped(modk::GemmConfigAttr config) {
  return config && llvm::any_of(config.getVariants(), [](const auto &v) {
           return v.path == modk::GemmPath::cutlass && v.grouped;
         });
}

bool modc::isCutlassMultistage(modk::GemmConfigAttr config) {
  return config && llvm::any_of(config.getVariants(), [](const auto &v) {
           return v.path == modk::GemmPath::cutlass &&
                  v.schedule == modk::CutlassSchedule::multistage;
         });
}

bool modc::usesCutlass(ArrayRef<modk::EntryOp> entries) {
  for (modk::EntryOp e : entries) {
    WalkResult walk = e.walk([](Operation *op) {
      return hasCutlassVariant(
                 op->getAttrOfType<modk::GemmConfigAttr>("config")) ||
                     hasCutlassVariant(op->getAttrOfType<modk::GemmConfigAttr>(
                         cuda::kDeviceRowsConfig))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return true;
  }
  return false;
}

StringRef modc::cutlassVersion() { return MODC_CUTLASS_VERSION; }

std::vector<std::string> modc::cutlassIncludeDirs() {
  std::vector<std::string> dirs;
  for (StringRef dir :
       {MODC_CUTLASS_INCLUDE_DIR, MODC_CUTLASS_UTIL_INCLUDE_DIR})
    if (!dir.empty())
      dirs.push_back(dir.str());
  return dirs;
}

// model.cu's side of the CUTLASS kernels: each kernel is a translation
// unit of its own (kernels/cutlass_<hash>.cu), and model.cu calls its plain
// host launcher through Launcher. Under the CPU emulation of CUDA (no
// __CUDACC__) no launcher is declared and every plan declines, so that the
// products run their hand-written tiles there.
static const char kModelSide[] = R"cpp(
// ---- CUTLASS kernels (docs/cuda.md, "CUTLASS") ----
namespace modc_cutlass {
/// A plan's variant: from MinRows rows (the bound) on, kernel type G.
template <int64_t MinRows, typename G> struct Variant {
  static constexpr int64_t minRows = MinRows;
  using Gemm = G;
};
/// Whether operands of type T are the package's bf16: the hand-written
/// tiles' BF16 flag for a product that runs CUTLASS where it can (a bf16
/// product's operands are stored bf16 there, an f32 product's f32).
template <typename T>
constexpr bool kBf16Operands = std::is_same<T, modk_cuda::bf16>::value;
} // namespace modc_cutlass
#if defined(__CUDACC__)
namespace modc_cutlass {
/// The launcher of a kernel file: y[m, n] = a[m, k] w[n, k]^T for the rows
/// below *rows (CUTLASS 2.x's kernels) or the bound m (sm_90a's 3.x ones),
/// a and w of the kernel's operand type (bf16, or f32 for tf32x3), y of its
/// output type, finished by the kernel's epilogue, which may read `src`
/// (the same shape as y; null where it reads none); false where CUTLASS
/// declines the product.
using LaunchFn = bool (*)(const void *a, const int64_t *rows, const void *w,
                          const void *src, void *y, int64_t m, int64_t n,
                          int64_t k, cudaStream_t s);
/// A kernel type of model.cu: its kernel file's launcher, over operands In.
template <LaunchFn Launch, typename In = modk_cuda::bf16> struct Launcher {
  using Operand = In;
  template <typename TC>
  static bool run(const In *a, const int64_t *rows, const In *w,
                  const void *src, TC *y, int64_t m, int64_t n, int64_t k,
                  cudaStream_t s) {
    return Launch(a, rows, w, src, y, m, n, k, s);
  }
};

/// The weight a kernel over operands In reads: a bf16 kernel the weight's
/// bf16 copy (null where it cannot be had), an f32 (tf32x3) one the f32
/// weight itself.
inline const modk_cuda::bf16 *weightOperand(const modk_cuda::bf16 *,
                                            const float *w, int64_t count,
                                            cudaStream_t s) {
  return modk_cuda::detail::weightCopyToRead(w, count, s);
}
inline const float *weightOperand(const float *, const float *w, int64_t,
                                  cudaStream_t) {
  return w;
}
} // namespace modc_cutlass
#endif // __CUDACC__
)cpp";

// The start of every kernel file: the package's bf16 type (by layout: the
// launcher takes untyped pointers), CUTLASS's headers and the project's
// kernel templates over them (kSm90 or kSm80 follow).
static const char kKernelCommon[] = R"cpp(#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
namespace modk_cuda {
/// The package's bf16 (its bits, the output type's name), rounded to
/// nearest even from f32 as the package's is.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  __host__ __device__ bf16(float x) : bits(cutlass::bfloat16_t(x).raw()) {}
  __host__ __device__ operator float() const {
    return float(cutlass::bfloat16_t::bitcast(bits));
  }
};
} // namespace modk_cuda

namespace modc_cutlass {
using Bf16 = cutlass::bfloat16_t;
/// The element CUTLASS stores for the package's output element.
template <typename TC> struct OutputOf {
  using type = float;
};
template <> struct OutputOf<modk_cuda::bf16> {
  using type = cutlass::bfloat16_t;
};
/// Rows of reduction a weight gradient's split (or a chunk of a group's
/// member) takes at least: the tiles' kWgradMinChunk.
constexpr int64_t kMinSplitRows = 256;
} // namespace modc_cutlass
)cpp";

static const char kSm90[] =
    R"cpp(#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

namespace modc_cutlass {

/// The SMs of the current device, asked once (the persistent grid's size).
inline cutlass::KernelHardwareInfo hardwareInfo() {
  static const cutlass::KernelHardwareInfo info = [] {
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count =
        cutlass::KernelHardwareInfo::query_device_multiprocessor_count(
            hw.device_id);
    return hw;
  }();
  return info;
}

/// Runs CUTLASS's device adapter Adapter on `args` with `workspace` on
/// stream s: false where CUTLASS declines the problem or cannot initialise
/// or launch it (nothing launched then but perhaps a setup kernel).
template <class Adapter>
inline bool runAdapter(const typename Adapter::Arguments &args,
                       void *workspace, cudaStream_t s) {
  Adapter gemm;
  return gemm.can_implement(args) == cutlass::Status::kSuccess &&
         gemm.initialize(args, workspace, s) == cutlass::Status::kSuccess &&
         gemm.run(s) == cutlass::Status::kSuccess;
}

/// A generated epilogue's compute node: Math::apply (the product's
/// modk.rows, element by element) on each element of a fragment of the
/// accumulators and, where the tree reads one, of the source.
template <typename Math> struct ComputeOf {
  template <typename Fragment> struct Fn {
    template <typename... Source>
    CUTLASS_DEVICE Fragment operator()(Fragment const &acc,
                                       Source const &...source) const {
      Fragment out;
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < int(Fragment::kElements); ++e)
        out[e] = Math::apply(acc[e], source[e]...);
      return out;
    }
  };
};

/// The epilogue visitor tree of a product whose epilogue is Math over the
/// accumulators and the source C of elements Source (void: none), storing
/// Out (rounded to nearest); with no Math, a plain store.
template <typename Out, typename Math, typename Source> struct EpilogueTree {
  using Compute = cutlass::epilogue::fusion::Sm90Compute<
      ComputeOf<Math>::template Fn, Out, float,
      cutlass::FloatRoundStyle::round_to_nearest>;
  using type = cutlass::epilogue::fusion::Sm90EVT<
      Compute, cutlass::epilogue::fusion::Sm90AccFetch,
      cutlass::epilogue::fusion::Sm90SrcFetch<Source>>;
  /// The tree's arguments, the collective's Args (src: the source, which
  /// the collective loads): its nodes' defaults.
  template <typename Args> static Args arguments(const void *) {
    return Args{};
  }
};
template <typename Out, typename Math> struct EpilogueTree<Out, Math, void> {
  using type = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<
          ComputeOf<Math>::template Fn, Out, float,
          cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  template <typename Args> static Args arguments(const void *) {
    return Args{};
  }
};
template <typename Out> struct EpilogueTree<Out, void, void> {
  using type = cutlass::epilogue::fusion::LinearCombination<Out, float, void,
                                                             float>;
  /// alpha 1, beta 0.
  template <typename Args> static Args arguments(const void *) {
    return Args{};
  }
};

/// What a node that stores by itself (Sm90StoreAtRows and the grouped
/// Sm90StoreAtRowsGroup) answers in CUTLASS's visitor interface beside its
/// arguments and callbacks: no workspace, no producer loads, no C.
struct StoreNodeBase {
  /// The collective's element where it stores no D (its tile's layouts).
  using ElementAux = float;
  struct SharedStorage {};
  template <class ProblemShape, class Arguments>
  static size_t get_workspace_size(ProblemShape const &, Arguments const &) {
    return 0;
  }
  template <class ProblemShape, class Arguments>
  static cutlass::Status
  initialize_workspace(ProblemShape const &, Arguments const &, void *,
                       cudaStream_t,
                       cutlass::CudaHostAdapter * = nullptr) {
    return cutlass::Status::kSuccess;
  }
  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }
  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(
      cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const &) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }
};

/// A product's epilogue that finishes each element with its own loads and
/// stores (Store::apply at the element's row and column, a generated
/// epilogue such as the routed block's gated scatter into the stream at the
/// rows' tokens), as the tree's one node over the accumulators: the
/// visitor interface of CUTLASS's epilogue nodes, storing nothing by TMA.
template <typename Store> struct Sm90StoreAtRows : StoreNodeBase {
  struct Arguments {
    typename Store::Args epi;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const &,
                                                  Arguments const &args,
                                                  void *) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const &, Arguments const &) {
    return true;
  }

  CUTLASS_HOST_DEVICE Sm90StoreAtRows() {}
  CUTLASS_HOST_DEVICE Sm90StoreAtRows(Params const &params,
                                      SharedStorage const &)
      : params(params) {}

  /// The thread's elements: tCcD their coordinates in the CTA's tile
  /// (relative), residue the tile's extent within the problem, (m0, n0)
  /// the tile's first row and column.
  template <class CoordTensor, class Residue>
  struct ConsumerStoreCallbacks
      : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(CoordTensor tCcD, Residue residue,
                                          int64_t m0, int64_t n0,
                                          Params const &params)
        : tCcD(tCcD), residue(residue), m0(m0), n0(n0), params(params) {}
    CoordTensor tCcD;
    Residue residue;
    int64_t m0, n0;
    Params const &params;

    template <typename ElementAccumulator, typename ElementInput,
              int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<ElementInput, FragmentSize>
    visit(cutlass::Array<ElementAccumulator, FragmentSize> const &,
          int epi_v, int epi_m, int epi_n,
          cutlass::Array<ElementInput, FragmentSize> const &frg_input) {
      auto coords = tCcD(cute::_, cute::_, cute::_, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < FragmentSize; ++e) {
        auto rc = coords(epi_v * FragmentSize + e);
        if (cute::elem_less(rc, residue))
          Store::apply(float(frg_input[e]), params.epi,
                       m0 + int64_t(cute::get<0>(rc)),
                       n0 + int64_t(cute::get<1>(rc)));
      }
      return frg_input;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const &args) {
    const int64_t m0 = int64_t(cute::get<0>(args.tile_coord_mnkl)) *
                       cute::size<0>(args.tile_shape_mnk);
    const int64_t n0 = int64_t(cute::get<1>(args.tile_coord_mnkl)) *
                       cute::size<1>(args.tile_shape_mnk);
    return ConsumerStoreCallbacks<decltype(args.tCcD),
                                  decltype(args.residue_tCcD)>(
        args.tCcD, args.residue_tCcD, m0, n0, params);
  }

  Params params;
};

/// The epilogue of Store (Sm90StoreAtRows): Sm90Gemm's Math for a product
/// whose epilogue stores by itself.
template <typename Store> struct AtRows {};

template <typename Out, typename Store>
struct EpilogueTree<Out, AtRows<Store>, void> {
  using type = cutlass::epilogue::fusion::Sm90EVT<
      Sm90StoreAtRows<Store>, cutlass::epilogue::fusion::Sm90AccFetch>;
  /// The tree's arguments: the epilogue's buffers (src: its Args).
  template <typename Args> static Args arguments(const void *src) {
    return Args{{}, {*static_cast<const typename Store::Args *>(src)}};
  }
};

/// Whether Sm90Gemm's Math is an epilogue that stores by itself.
template <typename Math> struct StoresAtRows : std::false_type {};
template <typename Store>
struct StoresAtRows<AtRows<Store>> : std::true_type {};

/// y[M, N] = a[M, K] w[N, K]^T on sm_90a: bf16 operands read by TMA
/// (K-major), f32 accumulation, a BM x BN x BK tile in clusters of CM x CN
/// CTAs, Stages stages, the pingpong or the cooperative TMA
/// warp-specialised kernel on a persistent grid walking the tiles along M
/// or N, and an epilogue storing TC (f32 or bf16) by TMA: a plain store,
/// or with Math the product's generated epilogue as a visitor tree
/// (EpilogueTree), which reads the source C (elements Source; void: none)
/// where it has one, by TMA (in place where C is y); with AtRows<Store>,
/// Store's own loads and stores at each element, and no TMA store.
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool Pingpong,
          bool AlongN, typename TC, int SharedBytes, typename Math = void,
          typename Source = void>
struct Sm90Gemm {
  using Out = typename OutputOf<TC>::type;
  using SourceElement = typename OutputOf<Source>::type;
  using C = std::conditional_t<std::is_void_v<Source>, void, SourceElement>;
  static constexpr bool kStoresAtRows = StoresAtRows<Math>::value;
  using D = std::conditional_t<kStoresAtRows, void, Out>;
  using Tree = EpilogueTree<Out, Math, C>;
  static constexpr int kOutAlign = 16 / int(sizeof(Out));
  static constexpr int kSourceAlign =
      std::is_void_v<Source> ? kOutAlign : 16 / int(sizeof(SourceElement));
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using KernelSchedule =
      std::conditional_t<Pingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule =
      std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                         cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, C,
      cutlass::layout::RowMajor, kSourceAlign, D, cutlass::layout::RowMajor,
      kOutAlign, EpilogueSchedule, typename Tree::type>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16,
      cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::ColumnMajor, 8,
      float, Tile, Cluster, cutlass::gemm::collective::StageCount<Stages>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(sizeof(typename Kernel::SharedStorage) <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues the product over m rows (the bound: the kernel computes every
  /// row below it); false where CUTLASS declines it.
  static bool run(const Bf16 *a, const int64_t * /*rows*/, const Bf16 *w,
                  const void *src, TC *y, int64_t m, int64_t n, int64_t k,
                  cudaStream_t s) {
    typename Kernel::StrideA strideA{};
    typename Kernel::StrideB strideB{};
    typename Kernel::StrideC strideC{};
    typename Kernel::StrideD strideD{};
    cute::get<0>(strideA) = k;
    cute::get<0>(strideB) = k;
    cute::get<0>(strideC) = n;
    cute::get<0>(strideD) = n;
    // src: the source C, or the buffers of an epilogue that stores by
    // itself (then no C and no D).
    if ((kStoresAtRows || !std::is_void_v<Source>) != (src != nullptr))
      return false;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(m), int(n), int(k), 1},
        {a, strideA, w, strideB},
        {Tree::template arguments<
             typename Epilogue::FusionCallbacks::Arguments>(src),
         kStoresAtRows ? nullptr : static_cast<const SourceElement *>(src),
         strideC,
         kStoresAtRows ? nullptr : reinterpret_cast<Out *>(y),
         strideD},
        hardwareInfo()};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    return runAdapter<Adapter>(args, nullptr, s);
  }
};
} // namespace modc_cutlass
)cpp";

// An input gradient's kernel on sm_90a (appended after kSm90 to the
// files of modk.gemm_dgrad's variants only, so that forward kernel files
// keep their text): the reduction runs along W's rows, so W is read
// N-major instead of K-major, and an accumulating gradient adds dA's old
// values in the epilogue (beta = 1, read by TMA).
static const char kSm90Dgrad[] = R"cpp(
namespace modc_cutlass {

/// da[M, K] (+)= dy[M, N] w[N, K] on sm_90a: the launcher's (m, n, k) are
/// (M, K, N). dy bf16 row-major (K-major for the product), w bf16 [N, K]
/// row-major (N-major for the product, MN-major wgmma operands), f32
/// accumulation, da f32. Accumulate: the epilogue adds da's old values
/// (beta = 1, read in place by TMA), else it stores. The tile, cluster,
/// stages, schedule and raster as in Sm90Gemm.
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool Pingpong,
          bool AlongN, bool Accumulate, int SharedBytes>
struct Sm90Dgrad {
  using Source = std::conditional_t<Accumulate, float, void>;
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using KernelSchedule =
      std::conditional_t<Pingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule =
      std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                         cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Source,
      cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4,
      EpilogueSchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16,
      cutlass::layout::RowMajor, 8, Bf16, cutlass::layout::RowMajor, 8, float,
      Tile, Cluster, cutlass::gemm::collective::StageCount<Stages>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(sizeof(typename Kernel::SharedStorage) <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues the product over m rows (the bound: the kernel computes every
  /// row below it); false where CUTLASS declines it.
  static bool run(const Bf16 *dy, const int64_t * /*rows*/, const Bf16 *w,
                  const void * /*src*/, float *da, int64_t m, int64_t n,
                  int64_t k, cudaStream_t s) {
    typename Kernel::StrideA strideA{};
    typename Kernel::StrideB strideB{};
    typename Kernel::StrideC strideC{};
    typename Kernel::StrideD strideD{};
    cute::get<0>(strideA) = k; // dy's rows: N apart
    cute::get<1>(strideB) = n; // w's rows (the reduction): K apart
    cute::get<0>(strideC) = n;
    cute::get<0>(strideD) = n;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(m), int(n), int(k), 1},
        {dy, strideA, w, strideB},
        {{1.0f, Accumulate ? 1.0f : 0.0f},
         Accumulate ? da : nullptr,
         strideC,
         da,
         strideD},
        hardwareInfo()};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    return runAdapter<Adapter>(args, nullptr, s);
  }
};
} // namespace modc_cutlass
)cpp";

// A weight gradient's kernel on sm_90a (appended after kSm90 to the files
// of modk.gemm_wgrad's variants only, so that the other kernel files keep
// their text): the reduction runs along the rows of both operands, so both
// are read MN-major, and the epilogue adds dW's old values (beta = 1).
static const char kSm90Wgrad[] = R"cpp(
namespace modc_cutlass {

/// dw[M, N] += dy[K, M]^T a[K, N] on sm_90a, a weight gradient: the
/// launcher's (m, n, k) are (N, K, rows) of dW [N, K] and its K = rows
/// reduction, a count the host knows (modk-configure-gemms takes CUTLASS
/// only there). dy [rows, N] and a [rows, K] bf16 row-major (M-major and
/// N-major for the product, MN-major wgmma operands), f32 accumulation,
/// dw f32 read by TMA and added to in the epilogue. No split over the
/// rows: every output tile sums its rows in one CTA, in order
/// (deterministic). The tile, cluster, stages, schedule and raster as in
/// Sm90Gemm.
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool Pingpong,
          bool AlongN, int SharedBytes>
struct Sm90Wgrad {
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using KernelSchedule =
      std::conditional_t<Pingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule =
      std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                         cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, float,
      cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4,
      EpilogueSchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16,
      cutlass::layout::ColumnMajor, 8, Bf16, cutlass::layout::RowMajor, 8,
      float, Tile, Cluster, cutlass::gemm::collective::StageCount<Stages>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(sizeof(typename Kernel::SharedStorage) <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues dw += dy^T a over k rows (all of them: the count is the
  /// bound); false where CUTLASS declines it.
  static bool run(const Bf16 *dy, const int64_t * /*rows*/, const Bf16 *a,
                  const void * /*src*/, float *dw, int64_t m, int64_t n,
                  int64_t k, cudaStream_t s) {
    typename Kernel::StrideA strideA{};
    typename Kernel::StrideB strideB{};
    typename Kernel::StrideC strideC{};
    typename Kernel::StrideD strideD{};
    cute::get<1>(strideA) = m; // dy's rows (the reduction): M apart
    cute::get<1>(strideB) = n; // a's rows: N apart
    cute::get<0>(strideC) = n;
    cute::get<0>(strideD) = n;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(m), int(n), int(k), 1},
        {dy, strideA, a, strideB},
        {{1.0f, 1.0f}, dw, strideC, dw, strideD},
        hardwareInfo()};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    return runAdapter<Adapter>(args, nullptr, s);
  }
};
} // namespace modc_cutlass
)cpp";

// A grouped kernel's own device memory (appended before the kernel of
// every grouped kernel file, on either part).
static const char kGroupMemory[] = R"cpp(
namespace modc_cutlass {
/// At least `bytes` of a grouped kernel's own device memory in `memory`
/// (`capacity` bytes so far): the members' arrays and CUTLASS's workspace.
/// It grows only outside a stream capture, which cannot allocate: false
/// where it would have to grow inside one, or cannot be had. Launches on
/// one stream take it in turn.
inline bool reserveGroupMemory(char *&memory, size_t &capacity, size_t bytes,
                               cudaStream_t s) {
  if (bytes <= capacity)
    return true;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone ||
      cudaStreamSynchronize(s) != cudaSuccess)
    return false;
  cudaFree(memory);
  memory = nullptr;
  capacity = 0;
  if (cudaMalloc(&memory, bytes) != cudaSuccess) {
    memory = nullptr;
    return false;
  }
  capacity = bytes;
  return true;
}
} // namespace modc_cutlass
)cpp";

// A group's kernel on sm_90a (appended after kSm90 to the files of grouped
// variants only, so that the other kernel files keep their text): CUTLASS's
// grouped (ptr-array) GEMM over the members of a modk-group-gemms group,
// whose problems and pointers a small kernel writes on the device from the
// members' row counts before it runs (no host sync). docs/cuda.md,
// "CUTLASS".
static const char kSm90Group[] = R"cpp(
#include <cutlass/gemm/group_array_problem_shape.hpp>

namespace modc_cutlass {

/// A generated epilogue that stores by itself (Store, as Sm90StoreAtRows)
/// in a grouped launch: each member's buffers from a device table of the
/// members' arguments, indexed by the tile's member (the L of its
/// coordinates, the group in a ptr-array kernel).
template <typename Store> struct Sm90StoreAtRowsGroup : StoreNodeBase {
  using Member = typename Sm90StoreAtRows<Store>::Params;
  struct Arguments {
    const Member *table = nullptr;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const &,
                                                  Arguments const &args,
                                                  void *) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const &, Arguments const &args) {
    return args.table != nullptr;
  }

  CUTLASS_HOST_DEVICE Sm90StoreAtRowsGroup() {}
  CUTLASS_HOST_DEVICE Sm90StoreAtRowsGroup(Params const &params,
                                           SharedStorage const &)
      : params(params) {}

  /// Sm90StoreAtRows' callbacks over the tile's member's arguments.
  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const &args) {
    const int64_t m0 = int64_t(cute::get<0>(args.tile_coord_mnkl)) *
                       cute::size<0>(args.tile_shape_mnk);
    const int64_t n0 = int64_t(cute::get<1>(args.tile_coord_mnkl)) *
                       cute::size<1>(args.tile_shape_mnk);
    const int member = int(cute::get<3>(args.tile_coord_mnkl));
    return typename Sm90StoreAtRows<Store>::template ConsumerStoreCallbacks<
        decltype(args.tCcD), decltype(args.residue_tCcD)>(
        args.tCcD, args.residue_tCcD, m0, n0, params.table[member]);
  }

  Params params;
};

/// A grouped kernel's epilogue: EpilogueTree's, but an epilogue that
/// stores by itself reads its member's buffers (Sm90StoreAtRowsGroup).
template <typename Out, typename Math, typename Source> struct GroupTree {
  using type = typename EpilogueTree<Out, Math, Source>::type;
  template <typename Args, typename Table> static Args arguments(Table *) {
    return Args{};
  }
};
template <typename Out, typename Store>
struct GroupTree<Out, AtRows<Store>, void> {
  using type = cutlass::epilogue::fusion::Sm90EVT<
      Sm90StoreAtRowsGroup<Store>, cutlass::epilogue::fusion::Sm90AccFetch>;
  template <typename Args, typename Table>
  static Args arguments(Table *table) {
    return Args{{}, {table}};
  }
};

/// A member's arguments for an epilogue that stores by itself (the
/// table Sm90StoreAtRowsGroup reads), or a stand-in for the others.
template <typename Math> struct MemberArgs {
  struct type {
    StoreArgs epi;
  };
};
template <typename Store> struct MemberArgs<AtRows<Store>> {
  using type = typename Sm90StoreAtRows<Store>::Params;
};

/// The members of a grouped launch as the kernel reads them (G: its
/// Sm90GroupGemm), written on the device by groupSetupKernel.
template <typename G> struct GroupArrays {
  typename G::Problem::UnderlyingProblemShape problems[kMaxGroup];
  const Bf16 *a[kMaxGroup];
  const Bf16 *w[kMaxGroup];
  const typename G::NonVoidC *c[kMaxGroup];
  typename G::NonVoidD *d[kMaxGroup];
  typename G::Kernel::InternalStrideA strideA[kMaxGroup];
  typename G::Kernel::InternalStrideB strideB[kMaxGroup];
  typename G::Kernel::InternalStrideC strideC[kMaxGroup];
  typename G::Kernel::InternalStrideD strideD[kMaxGroup];
  typename G::Member store[kMaxGroup];
};

/// Writes member z's problem (its rows: the count on the device, 0 for an
/// empty member), pointers, strides and epilogue arguments; a thread a
/// member.
template <typename G>
__global__ void groupSetupKernel(const GroupTable table, int n, int k,
                                 GroupArrays<G> *arrays) {
  const int z = int(threadIdx.x);
  if (z >= table.members)
    return;
  const GroupTable::Member &m = table.member[z];
  const int64_t rows = *m.rows;
  arrays->problems[z] = cute::make_shape(int(rows > 0 ? rows : 0), n, k);
  arrays->a[z] = static_cast<const Bf16 *>(m.a);
  arrays->w[z] = static_cast<const Bf16 *>(m.w);
  arrays->c[z] = static_cast<const typename G::NonVoidC *>(m.src);
  arrays->d[z] = static_cast<typename G::NonVoidD *>(m.y);
  typename G::Kernel::InternalStrideA sa{};
  typename G::Kernel::InternalStrideB sb{};
  typename G::Kernel::InternalStrideC sc{};
  typename G::Kernel::InternalStrideD sd{};
  cute::get<0>(sa) = k;
  cute::get<0>(sb) = k;
  cute::get<0>(sc) = n;
  cute::get<0>(sd) = n;
  arrays->strideA[z] = sa;
  arrays->strideB[z] = sb;
  arrays->strideC[z] = sc;
  arrays->strideD[z] = sd;
  arrays->store[z] = typename G::Member{m.store};
}

/// Sm90Gemm's product over the members of a group, one launch: member z's
/// y_z[M_z, N] = a_z[M_z, K] w_z[N, K]^T over the M_z rows the device
/// counts, the same tile, cluster, stages, schedule, raster and epilogue
/// (each member reading its own source, storing its own y, or storing by
/// itself with its own buffers), CUTLASS's ptr-array kernel over a
/// GroupProblemShape.
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool Pingpong,
          bool AlongN, typename TC, int SharedBytes, typename Math = void,
          typename Source = void>
struct Sm90GroupGemm {
  using Out = typename OutputOf<TC>::type;
  using SourceElement = typename OutputOf<Source>::type;
  using C = std::conditional_t<std::is_void_v<Source>, void, SourceElement>;
  static constexpr bool kStoresAtRows = StoresAtRows<Math>::value;
  using D = std::conditional_t<kStoresAtRows, void, Out>;
  using Tree = GroupTree<Out, Math, C>;
  static constexpr int kOutAlign = 16 / int(sizeof(Out));
  static constexpr int kSourceAlign =
      std::is_void_v<Source> ? kOutAlign : 16 / int(sizeof(SourceElement));
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using Problem = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using KernelSchedule = std::conditional_t<
      Pingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<
      Pingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
      cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, C,
      cutlass::layout::RowMajor *, kSourceAlign, D,
      cutlass::layout::RowMajor *, kOutAlign, EpilogueSchedule,
      typename Tree::type>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16,
      cutlass::layout::RowMajor *, 8, Bf16, cutlass::layout::ColumnMajor *, 8,
      float, Tile, Cluster, cutlass::gemm::collective::StageCount<Stages>,
      KernelSchedule>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(sizeof(typename Kernel::SharedStorage) <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");
  using NonVoidC = std::conditional_t<std::is_void_v<C>, Out, C>;
  using NonVoidD = std::conditional_t<std::is_void_v<D>, Out, D>;
  using Member = typename MemberArgs<Math>::type;
  using Arrays = GroupArrays<Sm90GroupGemm>;

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues the group's product (n columns, k reduction): the members'
  /// problems written on the device, then one grouped launch; false where
  /// CUTLASS declines it or its device memory cannot be had (not in a
  /// stream capture: the first call outside one allocates it).
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  cudaStream_t s) {
    if (table.members < 0 || table.members > kMaxGroup)
      return false;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {table.members, nullptr, nullptr},
        {},
        {},
        hardwareInfo()};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    // The members' arrays, then CUTLASS's workspace (its descriptors), in
    // memory of this kernel's own, sized for the most members: launches on
    // one stream take it in turn. A table of no members only allocates it
    // (GroupPlan::reserve).
    static char *memory = nullptr;
    static size_t capacity = 0;
    const size_t arraysBytes = (sizeof(Arrays) + 255) / 256 * 256;
    args.problem_shape.num_groups = kMaxGroup;
    const size_t bytes = arraysBytes + Adapter::get_workspace_size(args);
    args.problem_shape.num_groups = table.members;
    if (!reserveGroupMemory(memory, capacity, bytes, s) || table.members == 0)
      return false;
    Arrays *arrays = reinterpret_cast<Arrays *>(memory);
    args.problem_shape.problem_shapes = arrays->problems;
    args.mainloop = {arrays->a, arrays->strideA, arrays->w, arrays->strideB};
    args.epilogue.thread =
        Tree::template arguments<typename Epilogue::FusionCallbacks::Arguments>(
            arrays->store);
    if constexpr (!std::is_void_v<C>)
      args.epilogue.ptr_C = arrays->c;
    args.epilogue.dC = arrays->strideC;
    if constexpr (!std::is_void_v<D>)
      args.epilogue.ptr_D = arrays->d;
    args.epilogue.dD = arrays->strideD;
    groupSetupKernel<Sm90GroupGemm>
        <<<1, 32, 0, s>>>(table, int(n), int(k), arrays);
    if (cudaPeekAtLastError() != cudaSuccess)
      return false;
    return runAdapter<Adapter>(args, memory + arraysBytes, s);
  }
};
} // namespace modc_cutlass
)cpp";

// A gradient group's kernel on sm_90a (appended after kSm90Group to the
// files of grouped modk.gemm_dgrad and modk.gemm_wgrad variants only):
// CUTLASS's grouped (ptr-array) GEMM over the members' input gradients or
// weight gradients, with the single gradients' operand layouts and
// epilogues (Sm90Dgrad, Sm90Wgrad). docs/cuda.md, "CUTLASS".
static const char kSm90GradGroup[] = R"cpp(
namespace modc_cutlass {

/// Writes member z's problem, pointers and strides for Sm90GradGroup G: an
/// input gradient's (M, N, K) = (its row count on the device, K, N), a
/// weight gradient's (N, K, its row count on the device: the reduction); an
/// empty member has no rows (M = 0: no tiles). A thread a member.
template <typename G>
__global__ void groupSetupKernelGrad(const GroupTable table, int n, int k,
                                     GroupArrays<G> *arrays) {
  const int z = int(threadIdx.x);
  if (z >= table.members)
    return;
  const GroupTable::Member &m = table.member[z];
  const int64_t rows = *m.rows;
  const int count = int(rows > 0 ? rows : 0);
  typename G::Kernel::InternalStrideA sa{};
  typename G::Kernel::InternalStrideB sb{};
  typename G::Kernel::InternalStrideC sc{};
  typename G::Kernel::InternalStrideD sd{};
  if constexpr (G::kWgrad) {
    // dw[n, k] += dy[rows, n]^T a[rows, k]: both read MN-major.
    arrays->problems[z] = cute::make_shape(count > 0 ? n : 0, k, count);
    cute::get<1>(sa) = n; // dy's rows (the reduction): n apart
    cute::get<1>(sb) = k; // a's rows: k apart
    cute::get<0>(sc) = k; // dw's rows: k apart
    cute::get<0>(sd) = k;
  } else {
    // da[rows, n] (+)= dy[rows, k] w[k, n]: w read N-major.
    arrays->problems[z] = cute::make_shape(count, n, k);
    cute::get<0>(sa) = k; // dy's rows: k apart
    cute::get<1>(sb) = n; // w's rows (the reduction): n apart
    cute::get<0>(sc) = n; // da's rows: n apart
    cute::get<0>(sd) = n;
  }
  arrays->a[z] = static_cast<const Bf16 *>(m.a);
  arrays->w[z] = static_cast<const Bf16 *>(m.w);
  arrays->c[z] = static_cast<const float *>(m.src);
  arrays->d[z] = static_cast<float *>(m.y);
  arrays->strideA[z] = sa;
  arrays->strideB[z] = sb;
  arrays->strideC[z] = sc;
  arrays->strideD[z] = sd;
}

/// The gradients of a group's members, one launch: Wgrad, each member's
/// dw[N, K] += dy[rows, N]^T a[rows, K] over the rows the device counts (its
/// reduction; the launcher's (n, k) are (N, K)), dy and a bf16 MN-major,
/// dw f32 added to in the epilogue (beta = 1), no split over the rows:
/// every output tile of a member sums its rows in one CTA, in order
/// (deterministic); else each member's da[rows, K] (+)= dy[rows, N] w[N, K]
/// (Sm90Dgrad's layouts; the launcher's (n, k) are (K, N)), adding da's old
/// values where Accumulate (beta = 1). The tile, cluster, stages, schedule
/// and raster as in Sm90Gemm.
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool Pingpong,
          bool AlongN, bool Wgrad, bool Accumulate, int SharedBytes>
struct Sm90GradGroup {
  static constexpr bool kWgrad = Wgrad;
  static constexpr bool kAdds = Wgrad || Accumulate;
  using C = std::conditional_t<kAdds, float, void>;
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using Problem = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using KernelSchedule = std::conditional_t<
      Pingpong, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<
      Pingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
      cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, C,
      cutlass::layout::RowMajor *, 4, float, cutlass::layout::RowMajor *, 4,
      EpilogueSchedule>::CollectiveOp;
  using LayoutA = std::conditional_t<Wgrad, cutlass::layout::ColumnMajor,
                                     cutlass::layout::RowMajor>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, LayoutA *, 8,
      Bf16, cutlass::layout::RowMajor *, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCount<Stages>,
      KernelSchedule>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(sizeof(typename Kernel::SharedStorage) <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");
  using NonVoidC = float;
  using NonVoidD = float;
  using Member = typename MemberArgs<void>::type;
  using Arrays = GroupArrays<Sm90GradGroup>;

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues the group's gradients: the members' problems written on the
  /// device, then one grouped launch; false where CUTLASS declines it or
  /// its device memory cannot be had (as Sm90GroupGemm::run).
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  cudaStream_t s) {
    if (table.members < 1 || table.members > kMaxGroup ||
        !table.sourcesWhere(kAdds))
      return false;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {table.members, nullptr, nullptr},
        {},
        {},
        hardwareInfo()};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    static char *memory = nullptr;
    static size_t capacity = 0;
    const size_t arraysBytes = (sizeof(Arrays) + 255) / 256 * 256;
    args.problem_shape.num_groups = kMaxGroup;
    const size_t bytes = arraysBytes + Adapter::get_workspace_size(args);
    args.problem_shape.num_groups = table.members;
    if (!reserveGroupMemory(memory, capacity, bytes, s))
      return false;
    Arrays *arrays = reinterpret_cast<Arrays *>(memory);
    args.problem_shape.problem_shapes = arrays->problems;
    args.mainloop = {arrays->a, arrays->strideA, arrays->w, arrays->strideB};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = kAdds ? 1.0f : 0.0f;
    if constexpr (kAdds)
      args.epilogue.ptr_C = arrays->c;
    args.epilogue.dC = arrays->strideC;
    args.epilogue.ptr_D = arrays->d;
    args.epilogue.dD = arrays->strideD;
    groupSetupKernelGrad<Sm90GradGroup>
        <<<1, 32, 0, s>>>(table, int(n), int(k), arrays);
    if (cudaPeekAtLastError() != cudaSuccess)
      return false;
    return runAdapter<Adapter>(args, memory + arraysBytes, s);
  }
};
} // namespace modc_cutlass
)cpp";

// A weight gradient's kernel on sm_90a whose reduction splits (appended
// after kSm90 to the files of modk.gemm_wgrad's variants with split_k > 1
// only, so that the other kernel files keep their text): Sm90Wgrad's
// layouts and epilogue under CUTLASS's stream-K tile scheduler in its
// split-K mode with the deterministic reduction. docs/cuda.md, "CUTLASS".
static const char kSm90WgradSplit[] = R"cpp(
namespace modc_cutlass {

/// Sm90Wgrad with its reduction (the rows) split into at most SplitK
/// chunks, as many as give every chunk kMinSplitRows rows: CUTLASS's
/// stream-K scheduler (cutlass::gemm::StreamKScheduler) in its split-K
/// mode, each output tile's splits on CTAs of their own, their partial
/// sums reduced in a workspace in split order (ReductionMode::
/// Deterministic: each split waits for the one before it), the last split
/// adding the sum of the others to its own and running the epilogue (dw
/// read by TMA and added to, beta = 1). Deterministic: the result depends
/// on the rows and the split count, never on the run. The cooperative
/// kernel only (CUTLASS's pingpong kernel takes no stream-K scheduler).
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool AlongN,
          int SplitK, int SharedBytes>
struct Sm90WgradSplit {
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, float,
      cutlass::layout::RowMajor, 4, float, cutlass::layout::RowMajor, 4,
      cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16,
      cutlass::layout::ColumnMajor, 8, Bf16, cutlass::layout::RowMajor, 8,
      float, Tile, Cluster, cutlass::gemm::collective::StageCount<Stages>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue,
      cutlass::gemm::StreamKScheduler>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(sizeof(typename Kernel::SharedStorage) <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");
  static_assert(SplitK > 1, "a split kernel splits");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues dw += dy^T a over k rows (all of them: the count is the
  /// bound), split where the workspace (the package's scratch, `bytes` of
  /// it) holds CUTLASS's (one partial tile per output tile and the splits'
  /// barriers), unsplit otherwise (no workspace); false where CUTLASS
  /// declines it.
  static bool run(const Bf16 *dy, const int64_t * /*rows*/, const Bf16 *a,
                  float *dw, int64_t m, int64_t n, int64_t k, void *workspace,
                  size_t bytes, cudaStream_t s) {
    typename Kernel::StrideA strideA{};
    typename Kernel::StrideB strideB{};
    typename Kernel::StrideC strideC{};
    typename Kernel::StrideD strideD{};
    cute::get<1>(strideA) = m; // dy's rows (the reduction): M apart
    cute::get<1>(strideB) = n; // a's rows: N apart
    cute::get<0>(strideC) = n;
    cute::get<0>(strideD) = n;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(m), int(n), int(k), 1},
        {dy, strideA, a, strideB},
        {{1.0f, 1.0f}, dw, strideC, dw, strideD},
        hardwareInfo()};
    using Scheduler = typename Kernel::TileScheduler;
    using Raster = typename Scheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    args.scheduler.reduction_mode = Scheduler::ReductionMode::Deterministic;
    auto split = [&](int64_t splits) {
      args.scheduler.splits = int(splits > 1 ? splits : 1);
      args.scheduler.decomposition_mode =
          splits > 1 ? Scheduler::DecompositionMode::SplitK
                     : Scheduler::DecompositionMode::DataParallel;
    };
    const int64_t most = k / kMinSplitRows;
    split(most < SplitK ? most : SplitK);
    if (args.scheduler.splits > 1 &&
        (workspace == nullptr || Adapter::get_workspace_size(args) > bytes))
      split(1); // the scratch cannot hold the partials: no split
    const size_t need = Adapter::get_workspace_size(args);
    if (need > bytes || (need > 0 && workspace == nullptr))
      return false;
    return runAdapter<Adapter>(args, need > 0 ? workspace : nullptr, s);
  }
};
} // namespace modc_cutlass
)cpp";

// The chunks of a weight gradients' group whose reductions split (appended
// before the split kernel of such a group's kernel file, on either
// generation): each member's rows in chunks, each chunk an extra problem of
// the grouped launch storing its partial product, and the kernel that adds
// each member's partials to its dW in chunk order. docs/cuda.md, "CUTLASS".
static const char kGroupSplit[] = R"cpp(
namespace modc_cutlass {

/// A member's chunks: of `chunk` rows each (whole k tiles of 64, at least
/// kMinSplitRows), the last taking the rows left, at most `splits` of
/// them; `count` of them hold rows (0 for an empty member).
struct MemberChunks {
  int64_t chunk, count;
};
__host__ __device__ inline MemberChunks memberChunks(int64_t rows,
                                                     int64_t splits) {
  if (rows <= 0)
    return {kMinSplitRows, 0};
  int64_t chunk = (rows + splits - 1) / splits;
  chunk = chunk < kMinSplitRows ? kMinSplitRows : (chunk + 63) / 64 * 64;
  return {chunk, (rows + chunk - 1) / chunk};
}

/// A chunk of a member's rows: the member, `first`, its first row, and
/// `rows`, its rows (0 for a chunk past the member's: no problem); `part`,
/// where its partial product of n k floats goes (member z's chunk c at
/// (z * splits + c) n k of the package's scratch).
struct ChunkOf {
  const GroupTable::Member *member;
  int64_t first, rows;
  float *part;
};

/// The chunk of this thread of a split group's setup kernel (blockIdx.x the
/// member, threadIdx.x the chunk, of Splits slots, `splits` of them in
/// use) and its problem's index, z * Splits + c; false for a thread past
/// the members or the slots.
template <int Splits>
__device__ inline bool chunkSlot(const GroupTable &table, int splits,
                                 int64_t nk, float *scratch, int &problem,
                                 ChunkOf &chunk) {
  const int z = int(blockIdx.x);
  const int c = int(threadIdx.x);
  if (z >= table.members || c >= Splits)
    return false;
  const GroupTable::Member &m = table.member[z];
  const int64_t rows = *m.rows;
  const MemberChunks ch = memberChunks(rows, splits);
  const int64_t first = c < ch.count ? c * ch.chunk : 0;
  int64_t len = c < ch.count ? rows - first : 0;
  len = c + 1 < ch.count ? ch.chunk : len;
  problem = z * Splits + c;
  chunk = {&m, first, len,
           scratch + (int64_t(z) * splits + (len > 0 ? c : 0)) * nk};
  return true;
}

/// dw_z[i] += the sum of member z's (blockIdx.y's) partials over its
/// chunks that hold rows, in chunk order, for i < nk. A template over the
/// group's kernel G, as every kernel of a kernel file: the package links
/// the files together, and each G is one file's.
template <typename G>
__global__ void splitSumKernelGroup(const GroupTable table, int64_t nk,
                                    int splits, const float *part) {
  const int z = int(blockIdx.y);
  if (z >= table.members)
    return;
  const GroupTable::Member &m = table.member[z];
  const MemberChunks ch = memberChunks(*m.rows, splits);
  const float *mine = part + int64_t(z) * splits * nk;
  float *dw = static_cast<float *>(m.y);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nk;
       i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t c = 0; c < ch.count; ++c)
      sum += mine[c * nk + i];
    dw[i] += sum;
  }
}

/// The chunks a member that a split group's launch of at most SplitK takes
/// where the scratch holds `chunks` partials a member (below 2: none, the
/// group runs unsplit).
template <int SplitK>
inline int groupSplits(const float *scratch, int64_t chunks) {
  return scratch ? int(chunks < SplitK ? chunks : SplitK) : 0;
}

/// Whether a split launch takes `table` (its weight gradients add to their
/// dW, their source) and `scratch` (16-byte aligned).
inline bool splitTakes(const GroupTable &table, const float *scratch) {
  return table.members >= 1 && table.members <= kMaxGroup &&
         table.sourcesWhere(true) &&
         reinterpret_cast<uintptr_t>(scratch) % 16 == 0;
}

/// Enqueues splitSumKernelGroup<G> over the members' nk outputs.
template <typename G>
inline bool sumSplits(const GroupTable &table, int64_t nk, int splits,
                      const float *scratch, cudaStream_t s) {
  int64_t blocks = (nk + 255) / 256;
  blocks = blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks;
  splitSumKernelGroup<G>
      <<<dim3(unsigned(blocks), unsigned(table.members)), 256, 0, s>>>(
          table, nk, splits, scratch);
  return cudaPeekAtLastError() == cudaSuccess;
}
} // namespace modc_cutlass
)cpp";

// A weight gradients' group on sm_90a whose reductions split (appended
// after kSm90GradGroup to the files of grouped modk.gemm_wgrad variants
// with split_k > 1 only): the members' rows in chunks, each chunk an extra
// problem of Sm90GradGroup's grouped launch storing its partial product,
// then a kernel that adds each member's partials to its dW in chunk order.
// docs/cuda.md, "CUTLASS".
static const char kSm90WgradGroupSplit[] = R"cpp(
namespace modc_cutlass {

/// The problems of a split weight gradients' group G (Sm90WgradGroupSplit):
/// member z's chunk c is problem z * Splits + c.
template <typename G, int Splits> struct SplitArrays {
  static constexpr int kProblems = kMaxGroup * Splits;
  typename G::Problem::UnderlyingProblemShape problems[kProblems];
  const Bf16 *a[kProblems];
  const Bf16 *w[kProblems];
  const float *c[kProblems];
  float *d[kProblems];
  typename G::Kernel::InternalStrideA strideA[kProblems];
  typename G::Kernel::InternalStrideB strideB[kProblems];
  typename G::Kernel::InternalStrideC strideC[kProblems];
  typename G::Kernel::InternalStrideD strideD[kProblems];
};

/// Writes the problems of member blockIdx.x's chunks (a thread a chunk, a
/// thread for each of Splits slots): chunk c of dw[n, k] += dy[rows, n]^T
/// a[rows, k] is dy's and a's rows from c * chunk, its partial product
/// stored at part[(z * splits + c) n k] (beta 0); a slot past the member's
/// chunks has no problem (M = 0).
template <typename G, int Splits>
__global__ void groupSetupKernelSplit(const GroupTable table, int n, int k,
                                      int splits, float *part,
                                      SplitArrays<G, Splits> *arrays) {
  int p;
  ChunkOf chunk;
  if (!chunkSlot<Splits>(table, splits, int64_t(n) * k, part, p, chunk))
    return;
  const int64_t k0 = chunk.first, len = chunk.rows;
  typename G::Kernel::InternalStrideA sa{};
  typename G::Kernel::InternalStrideB sb{};
  typename G::Kernel::InternalStrideC sc{};
  typename G::Kernel::InternalStrideD sd{};
  arrays->problems[p] = cute::make_shape(len > 0 ? n : 0, k, int(len));
  cute::get<1>(sa) = n; // dy's rows (the reduction): n apart
  cute::get<1>(sb) = k; // a's rows: k apart
  cute::get<0>(sc) = k;
  cute::get<0>(sd) = k;
  arrays->a[p] = static_cast<const Bf16 *>(chunk.member->a) + k0 * n;
  arrays->w[p] = static_cast<const Bf16 *>(chunk.member->w) + k0 * k;
  arrays->c[p] = chunk.part; // not read (beta 0)
  arrays->d[p] = chunk.part;
  arrays->strideA[p] = sa;
  arrays->strideB[p] = sb;
  arrays->strideC[p] = sc;
  arrays->strideD[p] = sd;
}

/// Sm90GradGroup's weight gradients (dw[N, K] += dy[rows, N]^T a[rows, K]
/// each member, its reduction the member's row count on the device) with
/// each member's rows split into at most SplitK chunks of at least
/// kMinSplitRows rows (memberChunks, from the count on the device): every
/// chunk a problem of one grouped launch storing its partial product in
/// the package's scratch (member z's chunk c at (z * splits + c) N K), then
/// splitSumKernelGroup adds each member's partials to its dW in chunk order
/// (deterministic: the result depends on the rows and the split count,
/// never on the run). `chunks`: the partials the scratch holds a member
/// (splits = min(SplitK, chunks)); below 2, or without scratch, Sm90GradGroup
/// adds every member's product to its dW in one problem (no split).
template <int BM, int BN, int BK, int CM, int CN, int Stages, bool Pingpong,
          bool AlongN, int SplitK, int SharedBytes>
struct Sm90WgradGroupSplit {
  using Base = Sm90GradGroup<BM, BN, BK, CM, CN, Stages, Pingpong, AlongN,
                             true, false, SharedBytes>;
  using Problem = typename Base::Problem;
  using Kernel = typename Base::Kernel;
  using Adapter = typename Base::Adapter;
  using Arrays = SplitArrays<Sm90WgradGroupSplit, SplitK>;
  static_assert(SplitK > 1 && SplitK <= 32,
                "a split group's chunks: a warp of its setup kernel");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::device_kernel<Kernel>; }

  /// Enqueues the group's weight gradients: split where the scratch holds
  /// two partials a member or more, else unsplit (Sm90GradGroup); false
  /// where CUTLASS declines it or its device memory cannot be had (as
  /// Sm90GroupGemm::run).
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  float *scratch, int64_t chunks, cudaStream_t s) {
    const int splits = groupSplits<SplitK>(scratch, chunks);
    if (splits < 2)
      return Base::run(table, n, k, s);
    if (!splitTakes(table, scratch))
      return false;
    const int problems = table.members * SplitK;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {problems, nullptr, nullptr},
        {},
        {},
        hardwareInfo()};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.raster_order = AlongN ? Raster::AlongN : Raster::AlongM;
    // The problems' arrays, then CUTLASS's workspace, in memory of this
    // kernel's own (as Sm90GroupGemm's).
    static char *memory = nullptr;
    static size_t capacity = 0;
    const size_t arraysBytes = (sizeof(Arrays) + 255) / 256 * 256;
    args.problem_shape.num_groups = Arrays::kProblems;
    const size_t bytes = arraysBytes + Adapter::get_workspace_size(args);
    args.problem_shape.num_groups = problems;
    if (!reserveGroupMemory(memory, capacity, bytes, s))
      return false;
    Arrays *arrays = reinterpret_cast<Arrays *>(memory);
    args.problem_shape.problem_shapes = arrays->problems;
    args.mainloop = {arrays->a, arrays->strideA, arrays->w, arrays->strideB};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = arrays->c;
    args.epilogue.dC = arrays->strideC;
    args.epilogue.ptr_D = arrays->d;
    args.epilogue.dD = arrays->strideD;
    // Every problem slot of the members' chunks, written (those past
    // `splits` chunks: none, M = 0).
    groupSetupKernelSplit<Sm90WgradGroupSplit, SplitK>
        <<<table.members, SplitK, 0, s>>>(table, int(n), int(k), splits,
                                          scratch, arrays);
    if (cudaPeekAtLastError() != cudaSuccess)
      return false;
    if (!runAdapter<Adapter>(args, memory + arraysBytes, s))
      return false;
    return sumSplits<Sm90WgradGroupSplit>(table, n * k, splits, scratch, s);
  }
};
} // namespace modc_cutlass
)cpp";

// The kernel templates of CUTLASS 2.x (after kKernelCommon): sm_80's, and
// an f32 product's on either part (tf32x3), over the operand element In.
static const char kSm80[] =
    R"cpp(#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/kernel/default_gemm.h>

namespace modc_cutlass {

/// The order CTAs walk the output tiles (CUTLASS 2.x's threadblock swizzle
/// interface): along M (blockIdx.x over the row tiles, so that consecutive
/// CTAs share the weight's columns) or along N.
template <bool AlongN> struct Raster {
  CUTLASS_HOST_DEVICE static cutlass::gemm::GemmCoord
  get_tiled_shape(cutlass::gemm::GemmCoord problem,
                  cutlass::gemm::GemmCoord tile, int slices) {
    return {(problem.m() + tile.m() - 1) / tile.m(),
            (problem.n() + tile.n() - 1) / tile.n(), slices};
  }
  CUTLASS_HOST_DEVICE static dim3
  get_grid_shape(cutlass::gemm::GemmCoord tiles) {
    return AlongN ? dim3(tiles.n(), tiles.m(), tiles.k())
                  : dim3(tiles.m(), tiles.n(), tiles.k());
  }
  CUTLASS_HOST_DEVICE static int get_log_tile(cutlass::gemm::GemmCoord) {
    return 0;
  }
  CUTLASS_DEVICE static cutlass::gemm::GemmCoord get_tile_offset(int) {
    return AlongN ? cutlass::gemm::GemmCoord{int(blockIdx.y), int(blockIdx.x),
                                             int(blockIdx.z)}
                  : cutlass::gemm::GemmCoord{int(blockIdx.x), int(blockIdx.y),
                                             int(blockIdx.z)};
  }
  CUTLASS_DEVICE static cutlass::gemm::GemmCoord
  get_tile_offset(cutlass::gemm::GemmCoord) {
    return get_tile_offset(0);
  }
};

/// The extent an epilogue visitor tree's nodes read and write within
/// (GemmWithEpilogueVisitor's own copy of the rows): clipped with the
/// problem's; nothing for the other kernels.
template <typename Params>
CUTLASS_DEVICE auto clipTreeRows(Params &params, int rows, int)
    -> decltype(void(cute::get<0>(params.problem_shape) = rows)) {
  cute::get<0>(params.problem_shape) = rows;
}
template <typename Params>
CUTLASS_DEVICE void clipTreeRows(Params &, int, long) {}

/// The tensor-core math of CUTLASS 2.x's kernels over operands In: bf16 on
/// mma.sync m16n8k16, or f32 (tf32x3) on m16n8k8 as three TF32 products
/// (OpMultiplyAddFastF32: each operand split into a big and a small TF32
/// half, all products but the small halves' summed), which keeps f32
/// precision. kAlign: operands of a 16-byte access.
template <typename In> struct Sm80Math {
  using Instruction = cutlass::gemm::GemmShape<16, 8, 16>;
  using Operator = cutlass::arch::OpMultiplyAdd;
  static constexpr int kAlign = 8;
};
template <> struct Sm80Math<float> {
  using Instruction = cutlass::gemm::GemmShape<16, 8, 8>;
  using Operator = cutlass::arch::OpMultiplyAddFastF32;
  static constexpr int kAlign = 4;
};

/// Whether `kernel` may take `bytes` of dynamic shared memory: past 48 KiB
/// it must ask the device first.
template <typename KernelFn>
inline bool allowShared(KernelFn kernel, int bytes) {
  return bytes < 48 * 1024 ||
         cudaFuncSetAttribute(kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              bytes) == cudaSuccess;
}

/// A CUTLASS 2.x GEMM kernel over the rows the device counts (the row
/// count stays on the device, docs/cuda.md). Where they are the output's
/// rows, a CTA whose rows all lie at or past *rows exits, and the others
/// read and write no row past it. Where they are the reduction
/// (CountsReduction: a weight gradient's), every CTA runs and reads no row
/// past *rows: a split of the reduction past them adds nothing, and still
/// takes its turn in a serial split's order.
template <typename Kernel, bool CountsReduction>
__global__ __launch_bounds__(Kernel::kThreadCount) void rowCountKernel(
    typename Kernel::Params params, const int64_t *rows) {
  if constexpr (CountsReduction) {
    if (rows && *rows < params.problem_size.k())
      params.problem_size.k() = int(*rows > 0 ? *rows : 0);
  } else {
    const int64_t count = rows ? *rows : int64_t(params.problem_size.m());
    const cutlass::gemm::GemmCoord tile =
        typename Kernel::ThreadblockSwizzle{}.get_tile_offset(
            params.swizzle_log_tile);
    if (int64_t(tile.m()) * Kernel::Mma::Shape::kM >= count)
      return;
    if (count < params.problem_size.m()) {
      params.problem_size.m() = int(count);
      clipTreeRows(params, int(count), 0);
    }
  }
  extern __shared__ int4 modcCutlassShared[];
  Kernel op;
  op(params,
     *reinterpret_cast<typename Kernel::SharedStorage *>(modcCutlassShared));
}

/// A CUTLASS 2.x multistage GEMM under rowCountKernel: operands A and B of
/// element In (Sm80Math: bf16, or f32 as tf32x3) and layouts LayoutA and
/// LayoutB by cp.async, f32 accumulation on mma.sync, a BM x BN x BK tile
/// of WM x WN warp tiles, Stages stages, the thread-level epilogue
/// EpilogueOp storing (or adding to) a row-major output of its element
/// type. CountsReduction: the
/// device's row count is the reduction's (a weight gradient's), not the
/// output's. SplitKSerial: the reduction may split into slices whose CTAs
/// add to the output one after the other, in slice order, each waiting on
/// its output tile's semaphore (CUTLASS 2.x's serial split-K).
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          bool AlongN, typename LayoutA, typename LayoutB, typename EpilogueOp,
          int SharedBytes, bool CountsReduction = false,
          bool SplitKSerial = false>
struct Sm80Multistage {
  using Out = typename EpilogueOp::ElementOutput;
  using Math = Sm80Math<In>;
  using Kernel = typename cutlass::gemm::kernel::DefaultGemm<
      In, LayoutA, Math::kAlign, In, LayoutB, Math::kAlign, Out,
      cutlass::layout::RowMajor, float, cutlass::arch::OpClassTensorOp,
      cutlass::arch::Sm80, cutlass::gemm::GemmShape<BM, BN, BK>,
      cutlass::gemm::GemmShape<WM, WN, BK>, typename Math::Instruction,
      EpilogueOp, Raster<AlongN>, Stages, SplitKSerial,
      typename Math::Operator>::GemmKernel;
  static constexpr int kShared = int(sizeof(typename Kernel::SharedStorage));
  static_assert(kShared <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &rowCountKernel<Kernel, CountsReduction>; }

  /// Output tiles of `problem`: a serial split's semaphores, one each.
  static int64_t outputTiles(cutlass::gemm::GemmCoord problem) {
    return int64_t((problem.m() + BM - 1) / BM) * ((problem.n() + BN - 1) / BN);
  }

  /// Enqueues d = EpilogueOp(a b[, c]) over the *rows rows below
  /// problem.m(), or of problem.k() where CountsReduction (rows null: all
  /// of them), a and b of leading dimensions lda and ldb, c (the old values
  /// the epilogue reads, if any) and d of rows problem.n() apart, the
  /// reduction in `slices` (SplitKSerial; outputTiles semaphores, which
  /// the stream zeroes first); false where CUTLASS declines it.
  static bool run(cutlass::gemm::GemmCoord problem, const In *a, int64_t lda,
                  const In *b, int64_t ldb, Out *c, Out *d,
                  typename EpilogueOp::Params epilogue, const int64_t *rows,
                  cudaStream_t s, int slices = 1, int *semaphores = nullptr) {
    if (slices > 1 && (!SplitKSerial || semaphores == nullptr))
      return false;
    typename Kernel::Mma::IteratorA::TensorRef refA(const_cast<In *>(a),
                                                     LayoutA(int(lda)));
    typename Kernel::Mma::IteratorB::TensorRef refB(const_cast<In *>(b),
                                                     LayoutB(int(ldb)));
    typename Kernel::Epilogue::OutputTileIterator::TensorRef refC(
        c, cutlass::layout::RowMajor(problem.n()));
    typename Kernel::Epilogue::OutputTileIterator::TensorRef refD(
        d, cutlass::layout::RowMajor(problem.n()));
    if (Kernel::can_implement(problem, refA, refB, refC, refD) !=
        cutlass::Status::kSuccess)
      return false;
    static const bool sharedSet = allowShared(kernel(), kShared);
    if (!sharedSet)
      return false;
    if (slices > 1 &&
        cudaMemsetAsync(semaphores, 0, sizeof(int) * outputTiles(problem),
                        s) != cudaSuccess)
      return false;
    const cutlass::gemm::GemmCoord tiles =
        Raster<AlongN>::get_tiled_shape(problem, {BM, BN, BK}, slices);
    typename Kernel::Params params(problem, tiles, refA, refB, refC, refD,
                                   epilogue, slices > 1 ? semaphores : nullptr);
    kernel()<<<Raster<AlongN>::get_grid_shape(tiles), Kernel::kThreadCount,
               kShared, s>>>(params, rows);
    return cudaPeekAtLastError() == cudaSuccess;
  }
};

/// y[M, N] = a[M, K] w[N, K]^T on CUTLASS 2.x: Sm80Multistage over a (K
/// major) and w (K major) of element In, a plain epilogue storing TC.
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          bool AlongN, typename TC, int SharedBytes>
struct Sm80Gemm {
  using Out = typename OutputOf<TC>::type;
  using EpilogueOp = cutlass::epilogue::thread::LinearCombination<
      Out, 128 / cutlass::sizeof_bits<Out>::value, float, float,
      cutlass::epilogue::thread::ScaleType::Nothing>;
  using Product =
      Sm80Multistage<In, BM, BN, BK, WM, WN, Stages, AlongN,
                     cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,
                     EpilogueOp, SharedBytes>;

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return Product::kernel(); }

  /// Enqueues the product over the *rows rows below the bound m; false
  /// where CUTLASS declines it.
  static bool run(const In *a, const int64_t *rows, const In *w,
                  const void *src, TC *y, int64_t m, int64_t n, int64_t k,
                  cudaStream_t s) {
    if (src)
      return false;
    Out *out = reinterpret_cast<Out *>(y);
    // C is y itself, never read (no beta).
    return Product::run({int(m), int(n), int(k)}, a, k, w, k, out, out, {},
                        rows, s);
  }
};
} // namespace modc_cutlass
)cpp";

// An input gradient's kernel on sm_80 (appended after kSm80 to those
// kernel files only, so that the other kernel files keep their text).
static const char kSm80Dgrad[] = R"cpp(
namespace modc_cutlass {

/// da[M, K] (+)= dy[M, N] w[N, K] on CUTLASS 2.x: the launcher's (m, n, k)
/// are (M, K, N). dy row-major (K major for the product) and w [N, K]
/// row-major (the reduction runs along its rows) of element In, da f32.
/// Accumulate: the epilogue adds da's old values (D = acc + C), else it
/// stores. Over the *rows rows the device counts (rowCountKernel); the
/// tile, warp tile, stages and raster as in Sm80Gemm.
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          bool AlongN, bool Accumulate, int SharedBytes>
struct Sm80Dgrad {
  using EpilogueOp = cutlass::epilogue::thread::LinearCombination<
      float, 4, float, float,
      Accumulate ? cutlass::epilogue::thread::ScaleType::NoBetaScaling
                 : cutlass::epilogue::thread::ScaleType::Nothing>;
  using Product =
      Sm80Multistage<In, BM, BN, BK, WM, WN, Stages, AlongN,
                     cutlass::layout::RowMajor, cutlass::layout::RowMajor,
                     EpilogueOp, SharedBytes>;

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return Product::kernel(); }

  /// Enqueues the product over the *rows rows below the bound m; false
  /// where CUTLASS declines it.
  static bool run(const In *dy, const int64_t *rows, const In *w,
                  const void * /*src*/, float *da, int64_t m, int64_t n,
                  int64_t k, cudaStream_t s) {
    return Product::run({int(m), int(n), int(k)}, dy, k, w, n, da, da, {},
                        rows, s);
  }
};
} // namespace modc_cutlass
)cpp";

// A weight gradient's kernel on sm_80 (appended after kSm80 to those kernel
// files only): the reduction runs along the rows of both operands, which
// the device counts, and may split (serial split-K). docs/cuda.md,
// "CUTLASS".
static const char kSm80Wgrad[] = R"cpp(
namespace modc_cutlass {

/// dw[M, N] += dy[K, M]^T a[K, N] on CUTLASS 2.x, a weight gradient: the
/// launcher's (m, n, k) are (N, K, rows) of dW [N, K] and its K = rows
/// reduction, at most k rows, *rows of them where the device counts them
/// (rowCountKernel clips the reduction). dy [rows, N] row-major
/// (column-major as the product's A) and a [rows, K] row-major of element
/// In, dw f32 added to in the epilogue (D = acc + C). SplitK 1: every
/// output tile sums its rows in one CTA, in order. SplitK > 1: the bound's
/// rows split into at most SplitK slices of at least kMinSplitRows rows
/// (CUTLASS 2.x's serial split-K), each slice's CTA adding its partial sum
/// to dW after the slice before it has (a semaphore an output tile, in the
/// package's scratch). Deterministic either way: the order of the
/// additions follows the rows and the slices, never the run. The tile,
/// warp tile, stages and raster as in Sm80Gemm.
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          bool AlongN, int SplitK, int SharedBytes>
struct Sm80Wgrad {
  using EpilogueOp = cutlass::epilogue::thread::LinearCombination<
      float, 4, float, float,
      cutlass::epilogue::thread::ScaleType::NoBetaScaling>;
  using Product =
      Sm80Multistage<In, BM, BN, BK, WM, WN, Stages, AlongN,
                     cutlass::layout::ColumnMajor, cutlass::layout::RowMajor,
                     EpilogueOp, SharedBytes, true, (SplitK > 1)>;
  static_assert(SplitK >= 1, "a split count");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return Product::kernel(); }

  /// Enqueues dw += dy^T a over the *rows rows below k, unsplit; false
  /// where CUTLASS declines it.
  static bool run(const In *dy, const int64_t *rows, const In *a,
                  const void * /*src*/, float *dw, int64_t m, int64_t n,
                  int64_t k, cudaStream_t s) {
    return Product::run({int(m), int(n), int(k)}, dy, m, a, n, dw, dw, {},
                        rows, s);
  }

  /// Enqueues dw += dy^T a over the *rows rows below k, split where k
  /// gives two slices of kMinSplitRows rows or more and the workspace (the
  /// package's scratch, `bytes` of it) holds the semaphores, unsplit
  /// otherwise; false where CUTLASS declines it.
  static bool run(const In *dy, const int64_t *rows, const In *a, float *dw,
                  int64_t m, int64_t n, int64_t k, void *workspace,
                  size_t bytes, cudaStream_t s) {
    const cutlass::gemm::GemmCoord problem{int(m), int(n), int(k)};
    int64_t slices = k / kMinSplitRows;
    slices = slices < SplitK ? slices : SplitK;
    if (slices > 1 && (workspace == nullptr ||
                       sizeof(int) * size_t(Product::outputTiles(problem)) >
                           bytes))
      slices = 1; // the scratch cannot hold the semaphores: no split
    if (slices > 1) {
      // Whole k tiles a slice, none of them empty at the bound.
      const int64_t steps = (k + BK - 1) / BK;
      const int64_t per = (steps + slices - 1) / slices;
      slices = (steps + per - 1) / per;
    }
    return Product::run(problem, dy, m, a, n, dw, dw, {}, rows, s,
                        int(slices), static_cast<int *>(workspace));
  }
};
} // namespace modc_cutlass
)cpp";

// A gradient group's kernel on sm_80 (appended after kSm80 to the files of
// grouped modk.gemm_dgrad and modk.gemm_wgrad variants only): CUTLASS
// 2.x's grouped GEMM over the members' input or weight gradients, with the
// single gradients' layouts and epilogues (Sm80Dgrad, Sm80Wgrad), its
// problems read on the device. docs/cuda.md, "CUTLASS".
static const char kSm80GradGroup[] = R"cpp(#include <cutlass/device_kernel.h>
#include <cutlass/gemm/kernel/default_gemm_grouped.h>

namespace modc_cutlass {

/// The problems of an Sm80GradGroup launch over operands In as its kernel
/// reads them (at most Problems of them), written on the device by a setup
/// kernel: groupSetupKernel80 (a problem a member) or
/// groupSetupKernelSplit80 (a problem a member's chunk).
template <typename In, int Problems> struct Sm80GroupArrays {
  cutlass::gemm::GemmCoord problems[Problems];
  In *a[Problems];
  In *b[Problems];
  float *c[Problems];
  float *d[Problems];
  int64_t lda[Problems], ldb[Problems], ldc[Problems], ldd[Problems];
};

/// Writes member z's problem, pointers and leading dimensions for
/// Sm80GradGroup G: a weight gradient's (M, N, K) = (N, K, its row count on
/// the device: the reduction), dy column-major as A; an input gradient's
/// (its row count on the device, K, N); an empty member has no tiles (M =
/// 0). A thread a member.
template <typename G>
__global__ void groupSetupKernel80(const GroupTable table, int n, int k,
                                   typename G::Arrays *arrays) {
  const int z = int(threadIdx.x);
  if (z >= table.members)
    return;
  const GroupTable::Member &m = table.member[z];
  const int64_t rows = *m.rows;
  const int count = int(rows > 0 ? rows : 0);
  if constexpr (G::kWgrad) {
    // dw[n, k] += dy[rows, n]^T a[rows, k].
    arrays->problems[z] = cutlass::gemm::GemmCoord(count > 0 ? n : 0, k, count);
    arrays->lda[z] = n; // dy's rows (the reduction): n apart
    arrays->ldb[z] = k; // a's rows: k apart
  } else {
    // da[rows, n] (+)= dy[rows, k] w[k, n].
    arrays->problems[z] = cutlass::gemm::GemmCoord(count, n, k);
    arrays->lda[z] = k; // dy's rows: k apart
    arrays->ldb[z] = n; // w's rows (the reduction): n apart
  }
  arrays->ldc[z] = G::kWgrad ? k : n;
  arrays->ldd[z] = G::kWgrad ? k : n;
  using In = typename G::Operand;
  arrays->a[z] = static_cast<In *>(const_cast<void *>(m.a));
  arrays->b[z] = static_cast<In *>(const_cast<void *>(m.w));
  // C is read only where the members add (dw, an accumulating da).
  arrays->c[z] = static_cast<float *>(m.src ? const_cast<void *>(m.src) : m.y);
  arrays->d[z] = static_cast<float *>(m.y);
}

/// The gradients of a group's members over operands In (bf16, or f32 as
/// tf32x3), one launch of CUTLASS 2.x's grouped GEMM (its problems,
/// pointers and leading dimensions in device memory of its own, the rows
/// counted on the device, a persistent grid whose CTAs walk every member's
/// tiles in turn): Wgrad, each member's
/// dw[N, K] += dy[rows, N]^T a[rows, K] over the rows the device counts (its
/// reduction; the launcher's (n, k) are (N, K)), every output tile summing
/// its rows in one CTA, in order (deterministic); else each member's
/// da[rows, K] (+)= dy[rows, N] w[N, K] (the launcher's (n, k) are (K,
/// N)), adding da's old values where Accumulate. The epilogue adds with
/// D = acc + C (alpha 1, beta 1; beta 0 reads no C and stores, as a split
/// group's chunks do: Sm80WgradGroupSplit). The tile, warp tile and
/// stages as in Sm80Gemm.
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          bool Wgrad, bool Accumulate, int SharedBytes>
struct Sm80GradGroup {
  using Operand = In;
  using Math = Sm80Math<In>;
  static constexpr bool kWgrad = Wgrad;
  static constexpr bool kAdds = Wgrad || Accumulate;
  using EpilogueOp =
      cutlass::epilogue::thread::LinearCombination<float, 4, float, float>;
  using LayoutA = std::conditional_t<Wgrad, cutlass::layout::ColumnMajor,
                                     cutlass::layout::RowMajor>;
  using Kernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      In, LayoutA, cutlass::ComplexTransform::kNone, Math::kAlign, In,
      cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone,
      Math::kAlign, float, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<BM, BN, BK>,
      cutlass::gemm::GemmShape<WM, WN, BK>, typename Math::Instruction,
      EpilogueOp,
      cutlass::gemm::threadblock::GemmBatchedIdentityThreadblockSwizzle,
      Stages, cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly,
      typename Math::Operator>::GemmKernel;
  static constexpr int kShared = int(sizeof(typename Kernel::SharedStorage));
  static_assert(kShared <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");
  using Arrays = Sm80GroupArrays<In, kMaxGroup>;

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &cutlass::Kernel<Kernel>; }

  /// Enqueues the kernel over the first `problems` problems of `arrays`
  /// (written on the stream before it), D = acc + beta C, on a persistent
  /// grid of as many CTAs as the device holds at once; false where it
  /// cannot launch.
  template <typename A>
  static bool launch(A *arrays, int problems, float beta, cudaStream_t s) {
    static const int ctas = [] {
      int device = 0, sms = 0, perSm = 0;
      cudaGetDevice(&device);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      if (!allowShared(kernel(), kShared))
        return 0;
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &perSm, kernel(), Kernel::kThreadCount, kShared);
      return sms * perSm;
    }();
    if (ctas <= 0)
      return false;
    typename Kernel::Arguments args(
        arrays->problems, problems, ctas, {1.0f, beta}, arrays->a, arrays->b,
        arrays->c, arrays->d, arrays->lda, arrays->ldb, arrays->ldc,
        arrays->ldd);
    typename Kernel::Params params(args);
    kernel()<<<ctas, Kernel::kThreadCount, kShared, s>>>(params);
    return cudaPeekAtLastError() == cudaSuccess;
  }

  /// Enqueues the group's gradients: the members' problems written on the
  /// device, then one grouped launch of as many CTAs as the device holds at
  /// once; false where its device memory cannot be had (as
  /// reserveGroupMemory: not in a stream capture) or the launch fails. A
  /// table of no members only allocates the memory (GroupPlan::reserve).
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  cudaStream_t s) {
    if (table.members < 0 || table.members > kMaxGroup ||
        !table.sourcesWhere(kAdds))
      return false;
    static char *memory = nullptr;
    static size_t capacity = 0;
    if (!reserveGroupMemory(memory, capacity, sizeof(Arrays), s) ||
        table.members == 0)
      return false;
    Arrays *arrays = reinterpret_cast<Arrays *>(memory);
    groupSetupKernel80<Sm80GradGroup>
        <<<1, 32, 0, s>>>(table, int(n), int(k), arrays);
    if (cudaPeekAtLastError() != cudaSuccess)
      return false;
    return launch(arrays, table.members, kAdds ? 1.0f : 0.0f, s);
  }
};
} // namespace modc_cutlass
)cpp";

// A weight gradients' group on CUTLASS 2.x whose reductions split
// (appended after kSm80GradGroup and kGroupSplit to the files of grouped
// modk.gemm_wgrad variants with split_k > 1 only): CUTLASS 2.x's grouped
// GEMM splits no reduction, so each member's chunks are extra problems of
// the launch, as on sm_90a (Sm90WgradGroupSplit). docs/cuda.md, "CUTLASS".
static const char kSm80WgradGroupSplit[] = R"cpp(
namespace modc_cutlass {

/// Writes the problems of member blockIdx.x's chunks for Sm80WgradGroupSplit
/// G (a thread a chunk, a thread for each of Splits slots): chunk c of
/// dw[n, k] += dy[rows, n]^T a[rows, k] is dy's and a's rows from the
/// chunk's first, (M, N, K) = (n, k, its rows), its partial product stored
/// in the scratch (beta 0); a slot past the member's chunks has no tiles
/// (M = 0).
template <typename G, int Splits>
__global__ void groupSetupKernelSplit80(const GroupTable table, int n, int k,
                                        int splits, float *part,
                                        typename G::Arrays *arrays) {
  int p;
  ChunkOf chunk;
  if (!chunkSlot<Splits>(table, splits, int64_t(n) * k, part, p, chunk))
    return;
  const GroupTable::Member &m = *chunk.member;
  using In = typename G::Operand;
  arrays->problems[p] =
      cutlass::gemm::GemmCoord(chunk.rows > 0 ? n : 0, k, int(chunk.rows));
  arrays->lda[p] = n; // dy's rows (the reduction): n apart
  arrays->ldb[p] = k; // a's rows: k apart
  arrays->ldc[p] = k;
  arrays->ldd[p] = k;
  arrays->a[p] = static_cast<In *>(const_cast<void *>(m.a)) + chunk.first * n;
  arrays->b[p] = static_cast<In *>(const_cast<void *>(m.w)) + chunk.first * k;
  arrays->c[p] = chunk.part; // not read (beta 0)
  arrays->d[p] = chunk.part;
}

/// Sm80GradGroup's weight gradients with each member's rows split into at
/// most SplitK chunks of at least kMinSplitRows rows (memberChunks, from
/// the count on the device): every chunk a problem of one grouped launch
/// storing its partial product in the package's scratch (member z's chunk
/// c at (z * splits + c) N K), then splitSumKernelGroup adds each member's
/// partials to its dW in chunk order (deterministic: the result depends on
/// the rows and the split count, never on the run). `chunks`: the partials
/// the scratch holds a member (splits = min(SplitK, chunks)); below 2, or
/// without scratch, Sm80GradGroup adds every member's product to its dW in
/// one problem (no split).
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          int SplitK, int SharedBytes>
struct Sm80WgradGroupSplit {
  using Base = Sm80GradGroup<In, BM, BN, BK, WM, WN, Stages, true, false,
                             SharedBytes>;
  using Operand = In;
  using Arrays = Sm80GroupArrays<In, kMaxGroup * SplitK>;
  static_assert(SplitK > 1 && SplitK <= 32,
                "a split group's chunks: a warp of its setup kernel");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return Base::kernel(); }

  /// Enqueues the group's weight gradients: split where the scratch holds
  /// two partials a member or more, else unsplit (Sm80GradGroup); false
  /// where its device memory cannot be had (as reserveGroupMemory) or a
  /// launch fails.
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  float *scratch, int64_t chunks, cudaStream_t s) {
    const int splits = groupSplits<SplitK>(scratch, chunks);
    if (splits < 2)
      return Base::run(table, n, k, s);
    if (!splitTakes(table, scratch))
      return false;
    static char *memory = nullptr;
    static size_t capacity = 0;
    if (!reserveGroupMemory(memory, capacity, sizeof(Arrays), s))
      return false;
    Arrays *arrays = reinterpret_cast<Arrays *>(memory);
    groupSetupKernelSplit80<Sm80WgradGroupSplit, SplitK>
        <<<table.members, SplitK, 0, s>>>(table, int(n), int(k), splits,
                                          scratch, arrays);
    if (cudaPeekAtLastError() != cudaSuccess ||
        !Base::launch(arrays, table.members * SplitK, 0.0f, s))
      return false;
    return sumSplits<Sm80WgradGroupSplit>(table, n * k, splits, scratch, s);
  }
};
} // namespace modc_cutlass
)cpp";

// The kernel of a product with an elementwise `rows` epilogue on sm_80
// (appended after kSm80 to those kernel files only, so that the plain
// ones keep their text): CUTLASS 2.x's epilogue visitor tree, whose nodes
// take the same compute functor as sm_90a's tree (ComputeOf over the
// file's Math). CUTLASS 2.x's thread-level epilogue functors
// (cutlass::epilogue::thread) see the source only as C, of the output's
// element type, read where beta is not zero; the tree reads a source of
// its own element type (SwiGLU's f32 gate beside a bf16 y) and computes
// Math once an element with no alpha or beta around it.
static const char kSm80Tree[] = R"cpp(
#include <cutlass/epilogue/threadblock/fusion/visitors.hpp>
#include <cutlass/gemm/kernel/default_gemm_universal_with_visitor.h>

namespace modc_cutlass {

/// A generated epilogue's compute node (VisitorCompute's ComputeFn):
/// Math::apply (the product's modk.rows, element by element) on each
/// element of a fragment of the accumulators and, where the tree reads
/// one, of the source. The same functor as sm_90a's trees.
template <typename Math> struct ComputeOf {
  template <typename Fragment> struct Fn {
    template <typename... Source>
    CUTLASS_DEVICE Fragment operator()(Fragment const &acc,
                                       Source const &...source) const {
      Fragment out;
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < int(Fragment::kElements); ++e)
        out[e] = Math::apply(acc[e], source[e]...);
      return out;
    }
  };
};

/// The epilogue visitor tree of Sm80TreeGemm over the output tile's thread
/// map Map: Math over the accumulators and, where Source (CUTLASS's
/// element) is not void, the source's elements, which each thread loads
/// from global memory at the elements it stores (in place where the
/// source is y); y stored as Out, rounded to nearest. Rows and columns
/// past the problem's extent are neither read nor written.
template <typename Map, typename Out, typename Math, typename Source>
struct Sm80Tree {
  using Stride = cute::Stride<int64_t, cute::_1, int64_t>;
  using Compute = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorCompute<
          ComputeOf<Math>::template Fn, Out, float,
          cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::threadblock::VisitorAccFetch,
      cutlass::epilogue::threadblock::VisitorAuxLoad<Map, Source, Stride>>;
  using type = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorAuxStore<
          Map, Out, cutlass::FloatRoundStyle::round_to_nearest, Stride>,
      Compute>;
  /// The nodes' arguments: the source's and y's rows, n elements apart.
  static typename type::Arguments arguments(const void *src, Out *y,
                                            int64_t n) {
    return {{{},
             {static_cast<Source *>(const_cast<void *>(src)), Source(0),
              {n, cute::_1{}, 0}},
             {}},
            {y, {n, cute::_1{}, 0}}};
  }
};
template <typename Map, typename Out, typename Math>
struct Sm80Tree<Map, Out, Math, void> {
  using Stride = cute::Stride<int64_t, cute::_1, int64_t>;
  using Compute = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorCompute<
          ComputeOf<Math>::template Fn, Out, float,
          cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::threadblock::VisitorAccFetch>;
  using type = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorAuxStore<
          Map, Out, cutlass::FloatRoundStyle::round_to_nearest, Stride>,
      Compute>;
  static typename type::Arguments arguments(const void *, Out *y,
                                            int64_t n) {
    return {{{}, {}}, {y, {n, cute::_1{}, 0}}};
  }
};

/// The epilogue of Store (Sm80StoreAtRows): Sm80TreeGemm's Math for a
/// product whose epilogue stores by itself.
template <typename Store> struct AtRows {};

/// A product's epilogue that finishes each element with its own loads and
/// stores (Store::apply at the element's row and column, a generated
/// epilogue such as the routed block's gated scatter into the stream at the
/// rows' tokens), as the tree's root over the accumulators: CUTLASS 2.x's
/// visitor interface (VisitorAuxStore's partition of the output tile by
/// Map), storing nothing of its own. Rows and columns past the problem's
/// extent (its rows clipped to the count) are not finished.
template <typename Map, typename Store> struct Sm80StoreAtRows {
  struct Arguments {
    typename Store::Args epi;
  };
  using Params = Arguments;
  struct SharedStorage {};

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const &,
                                                  Arguments const &args,
                                                  void *) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const &, Arguments const &) {
    return 0;
  }

  CUTLASS_HOST_DEVICE Sm80StoreAtRows() {}
  CUTLASS_HOST_DEVICE Sm80StoreAtRows(Params const &params,
                                      SharedStorage const &)
      : params_ptr(&params) {}
  Params const *params_ptr;

  /// tC_r: the thread's f32 values of one step of the output tile, tC_c:
  /// their coordinates in the problem, a step a slice.
  template <class RTensor, class CTensor, class ProblemShape>
  struct Callbacks : cutlass::epilogue::threadblock::EmptyCallbacks {
    CUTLASS_DEVICE Callbacks(RTensor &&tC_r, CTensor &&tC_c,
                             ProblemShape problem_shape,
                             Params const *params_ptr)
        : tC_r(cute::forward<RTensor>(tC_r)),
          tC_c(cute::forward<CTensor>(tC_c)), problem_shape(problem_shape),
          params_ptr(params_ptr) {}
    RTensor tC_r;
    CTensor tC_c;
    ProblemShape problem_shape;
    Params const *params_ptr;

    template <class ElementAccumulator, class ElementInput, int FragmentSize>
    CUTLASS_DEVICE auto
    visit(int, int, int, int frg_idx,
          cutlass::Array<ElementAccumulator, FragmentSize> const &,
          cutlass::Array<ElementInput, FragmentSize> const &frg_input) {
      cutlass::NumericArrayConverter<float, ElementInput, FragmentSize>
          convert{};
      cute::Tensor frg =
          cute::recast<cutlass::Array<float, FragmentSize>>(
              cute::coalesce(tC_r));
      frg(frg_idx) = convert(frg_input);
      return frg_input;
    }

    CUTLASS_DEVICE void end_step(int step_idx) {
      cute::Tensor coords = tC_c(cute::_, cute::_, cute::_, step_idx);
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < int(cute::size(tC_r)); ++e)
        if (cute::elem_less(coords(e), problem_shape))
          Store::apply(tC_r(e), params_ptr->epi,
                       int64_t(cute::get<0>(coords(e))),
                       int64_t(cute::get<1>(coords(e))));
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord tile_offset,
                                    int thread_idx,
                                    ProblemShape problem_shape) {
    // The layout of a row-major f32 output (never read or written), for the
    // values' register tensor, and the coordinates' identity tensor.
    cute::Tensor mOut = cute::make_tensor(
        cute::make_gmem_ptr(static_cast<float *>(nullptr)), problem_shape,
        cute::make_stride(int64_t(cute::get<1>(problem_shape)), cute::_1{},
                          int64_t(0)));
    cute::Tensor tC_g = cute::group_modes<3, 6>(
        Map::partition(mOut, thread_idx, tile_offset));
    cute::Tensor tC_r = cute::make_tensor_like(cute::take<0, 3>(tC_g));
    cute::Tensor tC_c = cute::group_modes<3, 6>(Map::partition(
        cute::make_identity_tensor(problem_shape), thread_idx, tile_offset));
    return Callbacks<decltype(tC_r), decltype(tC_c), ProblemShape>(
        cute::move(tC_r), cute::move(tC_c), problem_shape, params_ptr);
  }
};

template <typename Map, typename Out, typename Store>
struct Sm80Tree<Map, Out, AtRows<Store>, void> {
  using type = cutlass::epilogue::threadblock::Sm80EVT<
      Sm80StoreAtRows<Map, Store>,
      cutlass::epilogue::threadblock::VisitorAccFetch>;
  /// The node's arguments: the epilogue's buffers (src: its Args).
  static typename type::Arguments arguments(const void *src, Out *,
                                            int64_t) {
    return {{}, {*static_cast<const typename Store::Args *>(src)}};
  }
};

/// Whether Sm80TreeGemm's Math is an epilogue that stores by itself.
template <typename Math> struct StoresAtRows : std::false_type {};
template <typename Store>
struct StoresAtRows<AtRows<Store>> : std::true_type {};

/// y[M, N] = Math(a[M, K] w[N, K]^T[, src[M, N]]) on CUTLASS 2.x: Sm80Gemm's
/// mainloop (the same tile, warps, stages and raster) and, as its
/// epilogue, the product's generated epilogue as a visitor tree
/// (Sm80Tree) in one step of the output tile at a time, reading the
/// source src of elements Source (void: none; y itself in place), storing
/// TC (f32 or bf16), or with AtRows<Store> Store's own loads and stores
/// at each element (src: its StoreArgs). Under rowCountKernel, so that
/// rows past the count are neither read nor written.
template <typename In, int BM, int BN, int BK, int WM, int WN, int Stages,
          bool AlongN, typename TC, int SharedBytes, typename Math,
          typename Source = void>
struct Sm80TreeGemm {
  using Out = typename OutputOf<TC>::type;
  using SourceElement = typename OutputOf<Source>::type;
  using C = std::conditional_t<std::is_void_v<Source>, void, SourceElement>;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Out>::value;
  using TileShape = cutlass::gemm::GemmShape<BM, BN, BK>;
  using WarpShape = cutlass::gemm::GemmShape<WM, WN, BK>;
  /// One epilogue stage: the accumulators' shared memory of the plain
  /// kernel, within the mainloop's stages.
  using Map = cutlass::epilogue::threadblock::OutputTileThreadLayout<
      TileShape, WarpShape, Out, kAlign, 1>;
  using Tree = Sm80Tree<Map, Out, Math, C>;
  using Mma = Sm80Math<In>;
  using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      In, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone,
      Mma::kAlign, In, cutlass::layout::ColumnMajor,
      cutlass::ComplexTransform::kNone, Mma::kAlign, Out,
      cutlass::layout::RowMajor, kAlign, float, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, TileShape,
      WarpShape, typename Mma::Instruction, typename Tree::type,
      Raster<AlongN>, Stages, typename Mma::Operator, 1>::GemmKernel;
  static constexpr int kShared = int(sizeof(typename Kernel::SharedStorage));
  static_assert(kShared <= SharedBytes,
                "the configured stages do not fit the part's shared memory "
                "(modc/Dialect/Modk/CudaTargets.h)");

  /// The kernel, instantiated (a build check takes its address).
  static auto kernel() { return &rowCountKernel<Kernel, false>; }

  /// Enqueues the product over the *rows rows below the bound m, its
  /// epilogue reading src where it reads a source; false where CUTLASS
  /// declines it.
  static bool run(const In *a, const int64_t *rows, const In *w,
                  const void *src, TC *y, int64_t m, int64_t n, int64_t k,
                  cudaStream_t s) {
    if ((StoresAtRows<Math>::value || !std::is_void_v<Source>) !=
        (src != nullptr))
      return false;
    cutlass::gemm::GemmCoord problem{int(m), int(n), int(k)};
    // Rows of whole 16-byte units: y's and the source's.
    if (Kernel::can_implement(problem) != cutlass::Status::kSuccess ||
        (!std::is_void_v<Source> &&
         n * int64_t(sizeof(SourceElement)) % 16 != 0))
      return false;
    static const bool sharedSet = allowShared(kernel(), kShared);
    if (!sharedSet)
      return false;
    // The kernel reads A and W through their leading dimensions (k); C and
    // D are the tree's (no pointers of the kernel's own).
    typename Kernel::Arguments args(
        cutlass::gemm::GemmUniversalMode::kGemm, problem, 1,
        Tree::arguments(src, reinterpret_cast<Out *>(y), n), a, w, nullptr,
        nullptr, 0, 0, 0, 0, k, k, 0, 0);
    typename Kernel::Params params(args, 0, 0);
    kernel()<<<Raster<AlongN>::get_grid_shape(params.grid_tiled_shape),
               Kernel::kThreadCount, kShared, s>>>(params, rows);
    return cudaPeekAtLastError() == cudaSuccess;
  }
};
} // namespace modc_cutlass
)cpp";

// A kernel file's bf16 rounding where its epilogue's math rounds (the
// generator's name for it): round to nearest, ties to even, as the
// package's prelude does.
static const char kBf16Round[] = R"cpp(
namespace modk_cuda {
namespace detail {
__device__ __forceinline__ float bf16Round(float x) {
  return float(cutlass::bfloat16_t(x));
}
} // namespace detail
} // namespace modk_cuda
)cpp";

/// The buffers of an epilogue that stores by itself (Sm90StoreAtRows),
/// for both sides of its launcher: model.cu fills it from the tiles'
/// EpiArgs (kStoreArgsOf), whose names its Store reads.
static std::string storeArgsText() {
  return fmt::format(R"cpp(
namespace modc_cutlass {{
/// The buffers of a product's epilogue that stores by itself, named as
/// the tiles' EpiArgs names them: the row set's segments (nseg + 1
/// entries) and positions, and the buffers in the slots its Store reads.
struct alignas(16) StoreArgs {{
  const int64_t *seg;
  int64_t nseg;
  const int32_t *pos;
  void *operands[{}];
}};
}} // namespace modc_cutlass
)cpp",
                     PlanEmitter::kEpilogueOperands);
}

// model.cu's StoreArgs of an epilogue's EpiArgs.
static const char kStoreArgsOf[] = R"cpp(
namespace modc_cutlass {
inline StoreArgs storeArgsOf(const modk_cuda::detail::EpiArgs &epi) {
  static_assert(sizeof(StoreArgs::operands) == sizeof(epi.operands),
                "the epilogue's slots");
  StoreArgs args{epi.seg, epi.nseg, epi.pos, {}};
  for (int j = 0; j < modk_cuda::detail::kEpiOperands; ++j)
    args.operands[j] = epi.operands[j];
  return args;
}
} // namespace modc_cutlass
)cpp";

/// The members of a grouped launch (a group whose variants are `grouped`),
/// for both sides of its launcher: model.cu fills it, the kernel file's
/// groupSetupKernel reads it as a kernel parameter. Needs StoreArgs.
static std::string groupTableText() {
  return R"cpp(
namespace modc_cutlass {
/// The most members of a grouped launch (modk_cuda::detail::kMaxGemmGroup).
constexpr int kMaxGroup = 16;
/// A grouped launch's members: member z's input a, weight w (its bf16
/// copy when launched), epilogue source src (null: none), output y, row
/// count on the device (rows), and the buffers of an epilogue that stores
/// by itself (store).
struct GroupTable {
  struct Member {
    const void *a;
    const void *w;
    const void *src;
    void *y;
    const int64_t *rows;
    StoreArgs store;
  };
  int members = 0;
  Member member[kMaxGroup];

  /// Whether every member has an epilogue source exactly where `adds` (a
  /// gradient group whose epilogue adds to the old values, its source).
  bool sourcesWhere(bool adds) const {
    for (int z = 0; z < members; ++z)
      if ((member[z].src != nullptr) != adds)
        return false;
    return true;
  }
};
} // namespace modc_cutlass
)cpp";
}

// The entry point of a grouped launch on CUTLASS (only where a group's
// variants are `grouped`): the caller runs the tiles' grouped launch where
// it returns false.
static const char kGroupPlan[] = R"cpp(
namespace modc_cutlass {
static_assert(kMaxGroup == modk_cuda::detail::kMaxGemmGroup,
              "a grouped launch's members");
#if defined(__CUDACC__)
/// The launcher of a grouped kernel file: the members of `table` (a
/// GroupTable, the weights' bf16 copies), n columns, k reduction.
using GroupLaunchFn = bool (*)(const void *table, int64_t n, int64_t k,
                               cudaStream_t s);
/// A grouped kernel type of model.cu: its kernel file's launcher, over
/// operands In.
template <GroupLaunchFn Launch, typename In = modk_cuda::bf16>
struct GroupLauncher {
  using Operand = In;
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  float * /*scratch*/, int64_t /*chunks*/, cudaStream_t s) {
    return Launch(&table, n, k, s);
  }
};
/// The launcher of a grouped kernel file whose weight gradients split their
/// rows (split_k): as GroupLaunchFn, the members' partials in `scratch`,
/// `chunks` of them a member at most (n k floats each; below 2: no split).
using GroupSplitLaunchFn = bool (*)(const void *table, int64_t n, int64_t k,
                                    float *scratch, int64_t chunks,
                                    cudaStream_t s);
template <GroupSplitLaunchFn Launch, typename In = modk_cuda::bf16>
struct GroupSplitLauncher {
  using Operand = In;
  static bool run(const GroupTable &table, int64_t n, int64_t k,
                  float *scratch, int64_t chunks, cudaStream_t s) {
    return Launch(&table, n, k, scratch, chunks, s);
  }
};
#endif

/// A group's CUTLASS variants by ascending MinRows: run() enqueues the one
/// of the members' row bound over every member (each member's weight on
/// its bf16 copy, unless weightCopies is false, a weight gradient's w being
/// its input A, or the kernels are f32 ones, which read the weight
/// itself), or returns false (below the first variant's rows, a
/// weight without a copy, an unaligned operand, CUTLASS declining, the CPU
/// emulation): nothing but perhaps weights' rounding was enqueued then.
template <typename... V> struct GroupPlan {
  /// Allocates, outside a stream capture, every variant's device memory (a
  /// launch from a captured graph, a decode step's, cannot allocate it).
  static void reserve(cudaStream_t s) {
#if defined(__CUDACC__)
    const GroupTable none{};
    (V::Gemm::run(none, 0, 0, nullptr, 0, s), ...);
#else
    (void)s;
#endif
  }

  static bool run(const GroupTable &table, int64_t maxRows, int64_t n,
                  int64_t k, cudaStream_t s, bool weightCopies = true,
                  float *scratch = nullptr, int64_t chunks = 0) {
#if defined(__CUDACC__)
    return pick<V...>(table, maxRows, n, k, s, weightCopies, scratch, chunks);
#else
    (void)table, (void)maxRows, (void)n, (void)k, (void)s, (void)weightCopies,
        (void)scratch, (void)chunks;
    return false;
#endif
  }

#if defined(__CUDACC__)
private:
  template <typename First, typename... Rest>
  static bool pick(const GroupTable &table, int64_t maxRows, int64_t n,
                   int64_t k, cudaStream_t s, bool weightCopies,
                   float *scratch, int64_t chunks) {
    if constexpr (sizeof...(Rest) > 0) {
      using Next = typename modk_cuda::detail::FirstOf<Rest...>::type;
      static_assert(Next::minRows > First::minRows, "variants by rows");
      if (maxRows >= Next::minRows)
        return pick<Rest...>(table, maxRows, n, k, s, weightCopies, scratch,
                             chunks);
    }
    if (maxRows < First::minRows)
      return false;
    GroupTable copy = table;
    weightCopies &= kBf16Operands<typename First::Gemm::Operand>;
    for (int z = 0; z < copy.members; ++z) {
      GroupTable::Member &m = copy.member[z];
      if (reinterpret_cast<uintptr_t>(m.a) % 16 != 0 ||
          reinterpret_cast<uintptr_t>(m.src) % 16 != 0 ||
          reinterpret_cast<uintptr_t>(m.y) % 16 != 0 ||
          (!weightCopies && reinterpret_cast<uintptr_t>(m.w) % 16 != 0))
        return false;
      if (weightCopies)
        m.w = modk_cuda::detail::weightCopyToRead(
            static_cast<const float *>(m.w), n * k, s);
      if (!m.w)
        return false;
    }
    modk_cuda::detail::traceGemm("cutlass", maxRows, n, k, 0, 0, "group");
    return First::Gemm::run(copy, n, k, scratch, chunks, s);
  }
#endif
};

/// The members of a group (GroupTable) over at most maxRows rows each, N
/// columns, K reduction, as one CUTLASS grouped launch where it runs; false
/// where it does not (the caller launches the tiles' group).
template <int N, int K, typename CutlassPlan>
inline bool linear_group(const GroupTable &table, int64_t maxRows,
                         cudaStream_t s) {
  return CutlassPlan::run(table, maxRows, N, K, s);
}

/// The input gradients of a group (da (+)= dy w, w [N, K] each member's
/// weight) over at most maxRows rows each, as one CUTLASS grouped launch
/// where it runs (its kernel adds where the members accumulate); false
/// where it does not (the caller launches the tiles' group).
template <int N, int K, typename CutlassPlan>
inline bool linear_dgrad_group(const GroupTable &table, int64_t maxRows,
                               cudaStream_t s) {
  return CutlassPlan::run(table, maxRows, K, N, s);
}

/// The weight gradients of a group (dw [N, K] += dy^T a, w: each member's
/// bf16 input a) over at most maxRows rows each, each member's reduction
/// its row count on the device, as one CUTLASS grouped launch where it
/// runs (a kernel that splits the rows keeps its partials in `scratch`, as
/// many a member as the tiles' split of TilePlan takes); false where it
/// does not (the caller launches the tiles' group).
template <int N, int K, typename CutlassPlan, typename TilePlan>
inline bool linear_wgrad_group(const GroupTable &table, int64_t maxRows,
                               float *scratch, cudaStream_t s) {
  const int64_t chunks =
      scratch ? modk_cuda::detail::wgradSplit<N, K, TilePlan>(maxRows).splits
              : 0;
  return CutlassPlan::run(table, maxRows, N, K, s, /*weightCopies=*/false,
                          chunks > 1 ? scratch : nullptr, chunks);
}
} // namespace modc_cutlass
)cpp";

// The rows' sequences (modk_small::segmentOf, the package's own, pasted
// whole) for a kernel file whose Store reads at the rows' tokens.
static const char kSegmentOf[] =
#include "SmallKernelsPrelude.inc"
    R"cpp(
namespace modk_cuda {
using modk_small::segmentOf;
} // namespace modk_cuda
)cpp";

// The plan and the product's entry point, on every target: under the
// emulation every plan declines.
static const char kPlan[] = R"cpp(
namespace modc_cutlass {
/// A product's CUTLASS variants by ascending MinRows: run() enqueues the
/// one of the row bound on the weight's bf16 copy (in a decode step, one
/// that holds the weight's current values; an f32 product's kernels read
/// the weight itself), its epilogue reading src where it reads a source,
/// or returns false (below the first variant's rows, no copy of the
/// weight, an unaligned operand, CUTLASS declining, the CPU emulation):
/// nothing but perhaps the weight's rounding was enqueued then.
template <typename... V> struct Plan {
  template <typename TA, typename TC>
  static bool run(const TA *a, const int64_t *rows, int64_t maxRows,
                  const float *w, const void *src, TC *y, int64_t n,
                  int64_t k, cudaStream_t s) {
#if defined(__CUDACC__)
    return pick<V...>(a, rows, maxRows, w, src, y, n, k, s);
#else
    (void)a, (void)rows, (void)maxRows, (void)w, (void)src, (void)y, (void)n,
        (void)k, (void)s;
    return false;
#endif
  }

#if defined(__CUDACC__)
private:
  template <typename First, typename... Rest, typename TA, typename TC>
  static bool pick(const TA *a, const int64_t *rows, int64_t maxRows,
                   const float *w, const void *src, TC *y, int64_t n,
                   int64_t k, cudaStream_t s) {
    static_assert(std::is_same<TA, typename First::Gemm::Operand>::value,
                  "a plan's kernels read the product's operand type");
    if constexpr (sizeof...(Rest) > 0) {
      using Next = typename modk_cuda::detail::FirstOf<Rest...>::type;
      static_assert(Next::minRows > First::minRows, "variants by rows");
      if (maxRows >= Next::minRows)
        return pick<Rest...>(a, rows, maxRows, w, src, y, n, k, s);
    }
    if (maxRows < First::minRows ||
        reinterpret_cast<uintptr_t>(a) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(src) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(y) % 16 != 0)
      return false;
    const TA *wb = weightOperand(a, w, n * k, s);
    if (!wb)
      return false;
    modk_cuda::detail::traceGemm("cutlass", maxRows, n, k, 0, 0,
                                 src ? "epilogue" : "store");
    return First::Gemm::run(a, rows, wb, src, y, maxRows, n, k, s);
  }
#endif
};

/// y[m, n] = sum_k a[m, k] w[n, k] for m < *rows: on the CUTLASS plan
/// where it runs, over cutlassRows rows (the count where the host knows it,
/// else the bound), else on the hand-written tiles of TilePlan.
template <int N, int K, typename TilePlan, typename CutlassPlan,
          typename TA, typename TC>
inline void linear(const TA *a, const int64_t *rows, int64_t maxRows,
                   int64_t cutlassRows, const float *w, TC *y,
                   cudaStream_t s) {
  if (cutlassRows > 0 &&
      CutlassPlan::run(a, rows, cutlassRows, w, nullptr, y, N, K, s))
    return;
  modk_cuda::linear<N, K, kBf16Operands<TA>, TilePlan>(a, rows, maxRows, w, y,
                                                      s);
}
} // namespace modc_cutlass
)cpp";

// The entry point of a product with a `rows` epilogue on CUTLASS (only
// where one runs there): the caller runs the tiles, with the generated
// epilogue, where it returns false.
static const char kEpiloguePlan[] = R"cpp(
namespace modc_cutlass {
/// y[m, n] = f(sum_k a[m, k] w[n, k], src[m, n]) for m < *rows on the
/// CUTLASS plan over maxRows rows (the count where the host knows it; 0:
/// not here), whose kernels' epilogue is the product's f (a residual add:
/// y += ..., src being y); false where it does not run (nothing but
/// perhaps the weight's rounding was enqueued then).
template <int N, int K, typename CutlassPlan, typename TA, typename TC>
inline bool linear_epilogue(const TA *a, const int64_t *rows,
                            int64_t maxRows, const float *w, const void *src,
                            TC *y, cudaStream_t s) {
  return maxRows > 0 && CutlassPlan::run(a, rows, maxRows, w, src, y, N, K, s);
}
} // namespace modc_cutlass
)cpp";

// An input gradient's entry point (only where a modk.gemm_dgrad runs on
// CUTLASS): its plan's kernels add or store as the product was configured.
static const char kDgradPlan[] = R"cpp(
namespace modc_cutlass {
/// da[m, k] (+)= sum_n dy[m, n] w[n, k] for m < *rows: on the CUTLASS plan
/// where it runs (its kernels add when the product accumulates), else on
/// the hand-written tiles of TilePlan.
template <int N, int K, typename TilePlan, typename CutlassPlan,
          typename TD>
inline void linear_dgrad(const TD *dy, const int64_t *rows, int64_t maxRows,
                         const float *w, float *da, bool accumulate,
                         cudaStream_t s) {
  if (maxRows > 0 &&
      CutlassPlan::run(dy, rows, maxRows, w, nullptr, da, K, N, s))
    return;
  modk_cuda::linear_dgrad<N, K, kBf16Operands<TD>, TilePlan>(
      dy, rows, maxRows, w, da, accumulate, s);
}
} // namespace modc_cutlass
)cpp";

// A weight gradient's plan and entry point (only where a modk.gemm_wgrad
// runs on CUTLASS): its one kernel from its variant's rows of reduction on,
// over the row count the host knows (the bound), else the tiles.
static const char kWgradPlan[] = R"cpp(
namespace modc_cutlass {
#if defined(__CUDACC__)
/// The launcher of a kernel file whose weight gradient splits its
/// reduction (split_k): dw[m, n] += dy[k, m]^T a[k, n] over at most k rows
/// (*rows where the kernel reads the device's count: sm_80's), its split's
/// partials or semaphores in `workspace` (`bytes` of it, the package's
/// scratch; unsplit where they do not fit); false where CUTLASS declines
/// the product.
using WgradSplitLaunchFn = bool (*)(const void *dy, const int64_t *rows,
                                    const void *a, float *dw, int64_t m,
                                    int64_t n, int64_t k, void *workspace,
                                    size_t bytes, cudaStream_t s);
/// A split weight gradient's kernel type of model.cu: its file's launcher,
/// over operands In.
template <WgradSplitLaunchFn Launch, typename In = modk_cuda::bf16>
struct WgradSplitLauncher {
  using Operand = In;
  static bool run(const In *dy, const int64_t *rows, const In *a, float *dw,
                  int64_t m, int64_t n, int64_t k, void *workspace,
                  size_t bytes, cudaStream_t s) {
    return Launch(dy, rows, a, dw, m, n, k, workspace, bytes, s);
  }
};
template <typename G> struct IsWgradSplit : std::false_type {};
template <WgradSplitLaunchFn Launch, typename In>
struct IsWgradSplit<WgradSplitLauncher<Launch, In>> : std::true_type {};
#endif

/// A weight gradient's CUTLASS variant V: run() enqueues it over at most
/// maxRows rows (sm_90a's kernels: every row of the set, as
/// modk-configure-gemms takes them only where the count is the bound;
/// sm_80's: the *rows rows the device counts), a kernel that splits the
/// rows with its partials or semaphores in `workspace` (`bytes`), or
/// returns false (below V's rows, an unaligned operand, CUTLASS declining,
/// the CPU emulation).
template <typename V> struct WgradPlan {
  template <typename TA>
  static bool run(const TA *dy, const int64_t *rows, int64_t maxRows,
                  const TA *a, float *dw, int64_t n, int64_t k,
                  void *workspace, size_t bytes, cudaStream_t s) {
#if defined(__CUDACC__)
    static_assert(std::is_same<TA, typename V::Gemm::Operand>::value,
                  "a plan's kernels read the product's operand type");
    if (maxRows < V::minRows || reinterpret_cast<uintptr_t>(dy) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(a) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(dw) % 16 != 0)
      return false;
    if constexpr (IsWgradSplit<typename V::Gemm>::value) {
      modk_cuda::detail::traceGemm("cutlass", n, k, maxRows, 0, 0,
                                   "wgrad add, split");
      return V::Gemm::run(dy, rows, a, dw, n, k, maxRows, workspace, bytes,
                          s);
    } else {
      modk_cuda::detail::traceGemm("cutlass", n, k, maxRows, 0, 0,
                                   "wgrad add");
      return V::Gemm::run(dy, rows, a, nullptr, dw, n, k, maxRows, s);
    }
#else
    (void)dy, (void)rows, (void)maxRows, (void)a, (void)dw, (void)n, (void)k,
        (void)workspace, (void)bytes, (void)s;
    return false;
#endif
  }
};

/// dw[n, k] += sum_m dy[m, n] a[m, k] over the maxRows rows: on the
/// CUTLASS plan where it runs (a kernel that splits the rows keeps its
/// partials in `scratch`, the floats the tiles' split takes), else on the
/// hand-written tiles of TilePlan (their split over the rows in
/// `scratch`).
template <int N, int K, typename TilePlan, typename CutlassPlan,
          typename TA>
inline void linear_wgrad(const TA *dy, const int64_t *rows, int64_t maxRows,
                         const TA *a, float *dw, float *scratch,
                         cudaStream_t s) {
  const size_t bytes =
      scratch ? sizeof(float) *
                    size_t(modk_cuda::linear_wgrad_scratch_floats<N, K,
                                                                  TilePlan>(
                        maxRows))
              : 0;
  if (maxRows > 0 &&
      CutlassPlan::run(dy, rows, maxRows, a, dw, N, K, scratch, bytes, s))
    return;
  modk_cuda::linear_wgrad<N, K, kBf16Operands<TA>, TilePlan>(
      dy, rows, maxRows, a, dw, scratch, s);
}
} // namespace modc_cutlass
)cpp";

/// Whether `op`'s output is bf16 (a forward product's may be).
static bool bf16OutputOf(Operation *op) {
  auto gemm = dyn_cast<modk::GemmOp>(op);
  return gemm &&
         cast<MemRefType>(gemm.getOutput().getType()).getElementType().isBF16();
}

/// What a product's CUTLASS kernels compute: a forward product (y = a
/// w^T), one with an elementwise `rows` epilogue, one whose `rows` epilogue
/// stores by itself (sm_90a: the routed block's gated scatter), one whose
/// `rows` epilogue runs after it over the f32 product it stores (over heads:
/// RoPE), an input gradient (dA = dY w) that stores or adds, or a weight
/// gradient (dW += dY^T A).
enum class ProductKind {
  forward,
  forwardEpilogue,
  forwardStore,
  forwardStaged,
  dgrad,
  dgradAccumulate,
  wgrad
};

static ProductKind kindOf(Operation *op) {
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op))
    return dgrad.getAccumulate() ? ProductKind::dgradAccumulate
                                 : ProductKind::dgrad;
  if (isa<modk::GemmWgradOp>(op))
    return ProductKind::wgrad;
  auto gemm = cast<modk::GemmOp>(op);
  if (gemm.getEpilogue() == modk::Epilogue::rows)
    return gemm.isElementwiseEpilogue()          ? ProductKind::forwardEpilogue
           : gemm.getEpilogueRows().getHeadDim() ? ProductKind::forwardStaged
                                                 : ProductKind::forwardStore;
  return ProductKind::forward;
}

/// Whether a product's operands (a forward product's input, a gradient's
/// dY) are stored f32, as a tf32x3 kernel reads them.
static bool operandsF32(Operation *op) {
  Value operand = isa<modk::GemmOp>(op) ? cast<modk::GemmOp>(op).getInput()
                  : isa<modk::GemmDgradOp>(op)
                      ? cast<modk::GemmDgradOp>(op).getDy()
                      : cast<modk::GemmWgradOp>(op).getDy();
  return cast<MemRefType>(operand.getType()).getElementType().isF32();
}

/// The C++ element type of a buffer: float or the package's bf16.
static const char *elementTypeOf(Value buffer) {
  return cast<MemRefType>(buffer.getType()).getElementType().isBF16()
             ? "modk_cuda::bf16"
             : "float";
}

/// The source an epilogue's kernel reads (GemmOp::isElementwiseEpilogue),
/// or null.
static Value epilogueSource(Operation *op) {
  Value source;
  auto gemm = dyn_cast<modk::GemmOp>(op);
  if (gemm && gemm.getEpilogue() == modk::Epilogue::rows)
    gemm.isElementwiseEpilogue(&source);
  return source;
}

/// The math of a product's epilogue (a `rows` epilogue's: the struct Math
/// of its kernel file, elementwiseEpilogueMath, or the struct Store of one
/// that stores by itself, rowsEpilogueStore; the same text on both parts),
/// else empty.
static FailureOr<std::string> epilogueMath(Operation *op) {
  if (kindOf(op) == ProductKind::forwardEpilogue)
    return elementwiseEpilogueMath(op, "Math");
  if (kindOf(op) == ProductKind::forwardStore)
    return rowsEpilogueStore(op, "Store");
  return std::string();
}

/// The line after a variant that names what its kernel computes.
static std::string kindText(Operation *op) {
  switch (kindOf(op)) {
  case ProductKind::forward:
    return bf16OutputOf(op) ? " -> bf16" : " -> f32";
  case ProductKind::forwardEpilogue: {
    Value source = epilogueSource(op);
    std::string reads =
        !source ? ""
        : source == cast<modk::GemmOp>(op).getOutput()
            ? fmt::format(" and y's {} (in place)", elementTypeOf(source))
            : fmt::format(" and a source's {}", elementTypeOf(source));
    return fmt::format(" -> {} = Math(acc{})",
                       bf16OutputOf(op) ? "bf16" : "f32", reads);
  }
  case ProductKind::forwardStore:
    return " -> Store(acc): its own loads and stores";
  case ProductKind::forwardStaged:
    return " -> f32, staged for its epilogue over heads";
  case ProductKind::dgrad:
    return " dgrad -> f32";
  case ProductKind::dgradAccumulate:
    return " dgrad += f32";
  case ProductKind::wgrad:
    return " wgrad += f32";
  }
  llvm_unreachable("unknown product kind");
}

/// The key of a product's CUTLASS plan: its configuration (`config`, or
/// another of its configuration attributes) and what its kernels compute
/// (kindText, epilogueMath).
static std::string planKey(Operation *op, StringRef attribute = "config") {
  auto config = op->getAttrOfType<modk::GemmConfigAttr>(attribute);
  std::string key;
  llvm::raw_string_ostream os(key);
  FailureOr<std::string> math = epilogueMath(op);
  os << config << kindText(op) << "\n"
     << (succeeded(math) ? *math : std::string("(no epilogue)"));
  return key;
}

LogicalResult CutlassGemms::emitKernelType(raw_ostream &os,
                                           const modk::GemmVariant &v,
                                           bool bf16Output,
                                           const std::string &name,
                                           Operation *op) {
  ProductKind kind = kindOf(op);
  const cuda::CudaPart *part = cuda::findCudaPart(arch);
  // bf16 products on the part's kernels, f32 ones on CUTLASS 2.x's tf32x3
  // kernels (on both parts).
  const cuda::CutlassTarget *lib =
      part ? &cuda::cutlassTarget(*part, v.tf32x3) : nullptr;
  const cuda::CutlassTile *tile =
      lib ? cuda::findCutlassTile(*lib, v.tileRows, v.tileCols, v.tileDepth)
          : nullptr;
  if (!tile)
    return op->emitError("CUTLASS tile ")
           << v.tileRows << "x" << v.tileCols << "x" << v.tileDepth
           << " is not in " << arch << "'s description of "
           << (v.tf32x3 ? "f32" : "bf16")
           << " products: run modk-configure-gemms{arch=" << arch
           << " library=cutlass}";
  if (bool f32 = operandsF32(op); f32 != v.tf32x3)
    return op->emitError("a CUTLASS variant ")
           << (v.tf32x3 ? "marked" : "not marked")
           << " tf32x3 on a product whose operands are stored "
           << (f32 ? "f32" : "bf16")
           << ": run modk-configure-gemms{arch=" << arch << " library=cutlass}";
  bool sm90 = lib->collectiveBuilders();
  // The operand element of CUTLASS 2.x's kernel templates.
  const char *in = v.tf32x3 ? "float" : "Bf16";
  // A split reduction (split_k): a weight gradient's rows on sm_90a, by
  // the stream-K scheduler (the cooperative kernel only) or, in a group, as
  // chunks of each member's rows (at most a warp of them, its setup
  // kernel's threads). docs/cuda.md, "CUTLASS".
  if (v.splitK != 1 && kind != ProductKind::wgrad)
    return op->emitError("CUTLASS splits the reduction of weight gradients ")
           << "only (split_k " << v.splitK << ")";
  if (v.splitK != 1 && !v.grouped && sm90 &&
      v.schedule != modk::CutlassSchedule::cooperative)
    return op->emitError("CUTLASS's stream-K scheduler, which splits a "
                         "weight gradient's rows, runs the cooperative "
                         "kernel only, not ")
           << modk::stringifyCutlassSchedule(v.schedule);
  if (v.splitK > 32 && v.grouped)
    return op->emitError("a grouped weight gradient splits each member's "
                         "rows into at most 32 chunks, not ")
           << v.splitK;
  if (sm90 == (v.schedule == modk::CutlassSchedule::multistage) ||
      (!sm90 && (v.clusterRows != 1 || v.clusterCols != 1)))
    return op->emitError("the CUTLASS schedule ")
           << modk::stringifyCutlassSchedule(v.schedule) << " in clusters of "
           << v.clusterRows << "x" << v.clusterCols << " does not run on "
           << arch;
  const char *out = bf16Output ? "modk_cuda::bf16" : "float";
  bool forward =
      kind == ProductKind::forward || kind == ProductKind::forwardEpilogue ||
      kind == ProductKind::forwardStore || kind == ProductKind::forwardStaged;
  // A `rows` epilogue: the visitor tree of the file's Math (and the
  // source's element type where it reads one), CUTLASS 3.x's on sm_90a,
  // 2.x's on sm_80 (Sm80TreeGemm).
  std::string epilogue;
  if (kind == ProductKind::forwardEpilogue) {
    Value source = epilogueSource(op);
    epilogue = source ? fmt::format(", Math, {}", elementTypeOf(source))
                      : std::string(", Math");
  } else if (kind == ProductKind::forwardStore) {
    epilogue = ", modc_cutlass::AtRows<Store>";
  }
  int64_t shared = cuda::sharedBytesPerBlock(*part) / tile->ctasPerSm;
  bool alongN = v.raster == modk::RasterOrder::along_n;
  bool gradient = kind == ProductKind::wgrad || kind == ProductKind::dgrad ||
                  kind == ProductKind::dgradAccumulate;
  if (v.grouped && ((!sm90 && !gradient) || kind == ProductKind::forwardStaged))
    return op->emitError("CUTLASS runs grouped forward products on sm_90a ")
           << "only, not on " << arch
           << ": run modk-configure-gemms{arch=" << arch << " library=cutlass}";
  if (kind == ProductKind::wgrad && v.grouped && v.splitK > 1 && !sm90)
    os << fmt::format("using {} = modc_cutlass::Sm80WgradGroupSplit<{}, {}, "
                      "{}, {}, {}, {}, {}, {}, {}>;\n",
                      name, in, v.tileRows, v.tileCols, v.tileDepth,
                      tile->warpRows, tile->warpCols, v.stages, v.splitK,
                      shared);
  else if (gradient && v.grouped && !sm90)
    os << fmt::format("using {} = modc_cutlass::Sm80GradGroup<{}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}, {}>;\n",
                      name, in, v.tileRows, v.tileCols, v.tileDepth,
                      tile->warpRows, tile->warpCols, v.stages,
                      kind == ProductKind::wgrad,
                      kind == ProductKind::dgradAccumulate, shared);
  else if (kind == ProductKind::wgrad && !sm90)
    os << fmt::format("using {} = modc_cutlass::Sm80Wgrad<{}, {}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}>;\n",
                      name, in, v.tileRows, v.tileCols, v.tileDepth,
                      tile->warpRows, tile->warpCols, v.stages, alongN,
                      v.splitK, shared);
  else if (!forward && !sm90)
    os << fmt::format("using {} = modc_cutlass::Sm80Dgrad<{}, {}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}>;\n",
                      name, in, v.tileRows, v.tileCols, v.tileDepth,
                      tile->warpRows, tile->warpCols, v.stages, alongN,
                      kind == ProductKind::dgradAccumulate, shared);
  else if (kind == ProductKind::wgrad && v.grouped && v.splitK > 1)
    os << fmt::format("using {} = modc_cutlass::Sm90WgradGroupSplit<{}, {}, "
                      "{}, {}, {}, {}, {}, {}, {}, {}>;\n",
                      name, v.tileRows, v.tileCols, v.tileDepth, v.clusterRows,
                      v.clusterCols, v.stages,
                      v.schedule == modk::CutlassSchedule::pingpong, alongN,
                      v.splitK, shared);
  else if (kind == ProductKind::wgrad && v.splitK > 1)
    os << fmt::format("using {} = modc_cutlass::Sm90WgradSplit<{}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}>;\n",
                      name, v.tileRows, v.tileCols, v.tileDepth, v.clusterRows,
                      v.clusterCols, v.stages, alongN, v.splitK, shared);
  else if (!forward && v.grouped)
    os << fmt::format("using {} = modc_cutlass::Sm90GradGroup<{}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}, {}, {}>;\n",
                      name, v.tileRows, v.tileCols, v.tileDepth, v.clusterRows,
                      v.clusterCols, v.stages,
                      v.schedule == modk::CutlassSchedule::pingpong, alongN,
                      kind == ProductKind::wgrad,
                      kind == ProductKind::dgradAccumulate, shared);
  else if (kind == ProductKind::wgrad)
    os << fmt::format("using {} = modc_cutlass::Sm90Wgrad<{}, {}, {}, {}, {}, "
                      "{}, {}, {}, {}>;\n",
                      name, v.tileRows, v.tileCols, v.tileDepth, v.clusterRows,
                      v.clusterCols, v.stages,
                      v.schedule == modk::CutlassSchedule::pingpong, alongN,
                      shared);
  else if (!forward)
    os << fmt::format("using {} = modc_cutlass::Sm90Dgrad<{}, {}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}>;\n",
                      name, v.tileRows, v.tileCols, v.tileDepth, v.clusterRows,
                      v.clusterCols, v.stages,
                      v.schedule == modk::CutlassSchedule::pingpong, alongN,
                      kind == ProductKind::dgradAccumulate, shared);
  else if (sm90)
    os << fmt::format("using {} = modc_cutlass::{}<{}, {}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}{}>;\n",
                      name, v.grouped ? "Sm90GroupGemm" : "Sm90Gemm",
                      v.tileRows, v.tileCols, v.tileDepth, v.clusterRows,
                      v.clusterCols, v.stages,
                      v.schedule == modk::CutlassSchedule::pingpong, alongN,
                      out, shared, epilogue);
  else
    os << fmt::format("using {} = modc_cutlass::{}<{}, {}, {}, {}, {}, {}, "
                      "{}, {}, {}, {}{}>;\n",
                      name,
                      kind == ProductKind::forwardEpilogue ||
                              kind == ProductKind::forwardStore
                          ? "Sm80TreeGemm"
                          : "Sm80Gemm",
                      in, v.tileRows, v.tileCols, v.tileDepth, tile->warpRows,
                      tile->warpCols, v.stages, alongN, out, shared, epilogue);
  return success();
}

/// The end of a kernel file: the plain host launcher model.cu declares
/// and calls (kModelSide's LaunchFn), named after the file.
static std::string launcherText(StringRef name, ProductKind kind,
                                StringRef operand) {
  const char *what =
      kind == ProductKind::forward ? "y[m, n] = a[m, k] w[n, k]^T"
      : kind == ProductKind::forwardEpilogue
          ? "y[m, n] = f(a[m, k] w[n, k]^T, src[m, n])"
      : kind == ProductKind::forwardStore
          ? "Store(a[m, k] w[n, k]^T) at (m, n), src its StoreArgs"
      : kind == ProductKind::wgrad ? "y[m, n] += a[k, m]^T w[k, n]"
                                   : "y[m, n] (+)= a[m, k] w[k, n]";
  return fmt::format(R"cpp(
/// The launcher model.cu calls: {1} on this kernel,
/// false where CUTLASS declines the product (docs/cuda.md, "CUTLASS").
extern "C" bool {0}(const void *a, const int64_t *rows, const void *w,
                   const void *src, void *y, int64_t m, int64_t n, int64_t k,
                   cudaStream_t s) {{
  return modc_cutlass::Gemm::run(static_cast<const {2} *>(a), rows,
                                 static_cast<const {2} *>(w), src,
                                 static_cast<modc_cutlass::Output *>(y), m, n,
                                 k, s);
}}
)cpp",
                     name.str(), what, operand.str());
}

/// The end of a kernel file whose weight gradient splits its rows: its
/// host launcher (kWgradPlan's WgradSplitLaunchFn), named after the file.
static std::string wgradSplitLauncherText(StringRef name, StringRef operand) {
  return fmt::format(R"cpp(
/// The launcher model.cu calls: y[m, n] += a[k, m]^T w[k, n] on this kernel
/// over at most k rows (*rows on sm_80, which reads the device's count),
/// its reduction split with its partials or semaphores in `workspace`
/// (`bytes` of it), false where CUTLASS declines the product (docs/cuda.md,
/// "CUTLASS").
extern "C" bool {0}(const void *dy, const int64_t *rows, const void *a,
                   float *dw, int64_t m, int64_t n, int64_t k,
                   void *workspace, size_t bytes, cudaStream_t s) {{
  return modc_cutlass::Gemm::run(static_cast<const {1} *>(dy), rows,
                                 static_cast<const {1} *>(a), dw, m, n, k,
                                 workspace, bytes, s);
}}
)cpp",
                     name.str(), operand.str());
}

/// The end of a grouped kernel file whose weight gradients split their
/// rows: its host launcher (kGroupPlan's GroupSplitLaunchFn).
static std::string groupSplitLauncherText(StringRef name) {
  return fmt::format(R"cpp(
/// The launcher model.cu calls: the members of a GroupTable as one grouped
/// launch of this kernel, each member's rows split into chunks whose
/// partials go to `scratch` (at most `chunks` a member), false where
/// CUTLASS declines it (docs/cuda.md, "CUTLASS").
extern "C" bool {0}(const void *table, int64_t n, int64_t k, float *scratch,
                   int64_t chunks, cudaStream_t s) {{
  return modc_cutlass::Gemm::run(
      *static_cast<const modc_cutlass::GroupTable *>(table), n, k, scratch,
      chunks, s);
}}
)cpp",
                     name.str());
}

/// The end of a grouped kernel file: its host launcher (kGroupPlan's
/// GroupLaunchFn), named after the file.
static std::string groupLauncherText(StringRef name) {
  return fmt::format(R"cpp(
/// The launcher model.cu calls: the members of a GroupTable as one grouped
/// launch of this kernel, false where CUTLASS declines it (docs/cuda.md,
/// "CUTLASS").
extern "C" bool {0}(const void *table, int64_t n, int64_t k,
                   cudaStream_t s) {{
  return modc_cutlass::Gemm::run(
      *static_cast<const modc_cutlass::GroupTable *>(table), n, k, s);
}}
)cpp",
                     name.str());
}

LogicalResult CutlassGemms::emit(raw_ostream &os,
                                 std::vector<CudaKernelFile> &files,
                                 int onlyKernel) {
  if (!usesCutlass(entries))
    return success();
  const cuda::CudaPart *part = cuda::findCudaPart(arch);
  if (!part)
    return modk::EntryOp(entries.front()).emitError("no CUDA part '")
           << arch << "'";
  // One kernel type per distinct variant and output type (printed with the
  // variant beside it), each a kernel file named after its text (identical
  // files are one), one plan per distinct configuration.
  std::map<std::string, std::string> kernels;
  std::set<std::string> paths;
  std::string launchers, types, planText;
  llvm::raw_string_ostream launchersOs(launchers), typesOs(types),
      plansOs(planText);
  {
    // The plan of one configuration attribute of a product: `config`, or
    // a forward product's device_rows_config (its one-member grouped
    // launch).
    auto addPlan = [&](Operation *op, StringRef attribute) {
      auto config = op->getAttrOfType<modk::GemmConfigAttr>(attribute);
      if (!hasCutlassVariant(config))
        return WalkResult::advance();
      std::string key = planKey(op, attribute);
      if (plans.count(key))
        return WalkResult::advance();
      ProductKind kind = kindOf(op);
      // A staged product is stored f32 whatever y's type.
      bool bf16Output = kind != ProductKind::forwardStaged && bf16OutputOf(op);
      FailureOr<std::string> math = epilogueMath(op);
      if (failed(math))
        return WalkResult::interrupt();
      bool grouped = isCutlassGrouped(config);
      // A gradient group's plan is a GroupPlan (kGroupPlan's entry points).
      if (kind == ProductKind::wgrad)
        hasWgrad |= !grouped;
      else if (kind == ProductKind::forwardEpilogue ||
               kind == ProductKind::forwardStore ||
               kind == ProductKind::forwardStaged)
        hasEpilogue = true;
      else if (kind != ProductKind::forward)
        hasDgrad |= !grouped;
      hasStore |= kind == ProductKind::forwardStore;
      bool gradient = kind == ProductKind::wgrad ||
                      kind == ProductKind::dgrad ||
                      kind == ProductKind::dgradAccumulate;
      hasGroup |= grouped;
      std::vector<std::string> variants;
      for (const modk::GemmVariant &v : config.getVariants()) {
        if (v.path != modk::GemmPath::cutlass)
          continue;
        modk::GemmVariant shape = v;
        shape.minRows = 0;
        std::string text;
        llvm::raw_string_ostream textOs(text);
        textOs << modk::GemmConfigAttr::get(op->getContext(), {shape}, 1, 0)
               << (kind == ProductKind::forwardStaged ? " -> f32"
                                                      : kindText(op));
        // Kernels of one text and one epilogue math are one.
        auto [it, added] = kernels.try_emplace(
            text + "\n" + *math,
            fmt::format("modc_cutlass_gemm_{}", kernels.size()));
        // A weight gradient whose rows split (split_k): a kernel of its
        // own kind, with a launcher that takes the partials' memory.
        bool split = kind == ProductKind::wgrad && v.splitK > 1;
        // CUTLASS 3.x's kernels (sm_90a's bf16 ones) or 2.x's (`multistage`:
        // sm_80's, and every f32 product's, tf32x3), over bf16 or f32
        // operands; emitKernelType checks the schedule against the part.
        bool sm90 = v.schedule != modk::CutlassSchedule::multistage;
        const char *operand = v.tf32x3 ? "float" : "modc_cutlass::Bf16";
        if (added) {
          std::string body =
              "// A CUTLASS kernel of a modc package, a translation unit of "
              "its own:\n// model.cu calls its launcher (docs/cuda.md, "
              "\"CUTLASS\").\n// " +
              text + "\n" + kKernelCommon + (sm90 ? kSm90 : kSm80) +
              (!sm90 && (kind == ProductKind::forwardEpilogue ||
                         kind == ProductKind::forwardStore)
                   ? kSm80Tree
               : v.grouped                                   ? ""
               : kind == ProductKind::wgrad && split && sm90 ? kSm90WgradSplit
               : kind == ProductKind::wgrad ? (sm90 ? kSm90Wgrad : kSm80Wgrad)
               : kind == ProductKind::dgrad ||
                       kind == ProductKind::dgradAccumulate
                   ? (sm90 ? kSm90Dgrad : kSm80Dgrad)
                   : "");
          // The epilogue's math may round to bf16 as the package does; an
          // epilogue that stores by itself reads its buffers from a
          // StoreArgs and may find the rows' sequences.
          if (StringRef(*math).contains("modk_cuda::detail::bf16Round"))
            body += kBf16Round;
          if (kind == ProductKind::forwardStore)
            body += storeArgsText() + kSegmentOf;
          // A grouped launch's kernel: its members' table (which holds
          // StoreArgs) and the ptr-array kernel's template, a gradient
          // group's over its layouts (Sm90GradGroup).
          // sm_80's: CUTLASS 2.x's grouped GEMM over the gradients'
          // layouts (Sm80GradGroup).
          if (v.grouped && sm90)
            body +=
                (kind == ProductKind::forwardStore ? std::string()
                                                   : storeArgsText()) +
                groupTableText() + kGroupMemory + kSm90Group +
                (gradient ? kSm90GradGroup : "") +
                (split ? std::string(kGroupSplit) + kSm90WgradGroupSplit : "");
          else if (v.grouped)
            body +=
                storeArgsText() + groupTableText() + kGroupMemory +
                kSm80GradGroup +
                (split ? std::string(kGroupSplit) + kSm80WgradGroupSplit : "");
          body += "\nnamespace modc_cutlass {\n" + *math;
          llvm::raw_string_ostream bodyOs(body);
          if (failed(emitKernelType(bodyOs, v, bf16Output, "Gemm", op)))
            return WalkResult::interrupt();
          bodyOs << "using Output = "
                 << (bf16Output ? "modk_cuda::bf16" : "float")
                 << ";\n} // namespace modc_cutlass\n";
          // Named after its text: the same kernel is the same file, in
          // every package (the kernel cache's unit, docs/cuda.md).
          std::string hash =
              llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(body)),
                          /*LowerCase=*/true)
                  .substr(0, 16);
          std::string launcher = "modc_cutlass_" + hash;
          std::string path = "kernels/cutlass_" + hash + ".cu";
          // A staged product's kernel is the plain f32 one (one file).
          body += v.grouped && split ? groupSplitLauncherText(launcher)
                  : v.grouped        ? groupLauncherText(launcher)
                  : split            ? wgradSplitLauncherText(launcher, operand)
                                     : launcherText(launcher,
                                         kind == ProductKind::forwardStaged
                                                        ? ProductKind::forward
                                                        : kind,
                                                    operand);
          if (int(kernels.size()) - 1 == onlyKernel)
            os << body;
          if (paths.insert(path).second) {
            files.push_back({path, body});
            launchersOs << "extern \"C\" bool " << launcher
                        << (v.grouped && split
                                ? "(const void *, int64_t, int64_t, float *, "
                                  "int64_t, cudaStream_t);\n"
                            : v.grouped ? "(const void *, int64_t, int64_t, "
                                          "cudaStream_t);\n"
                            : split
                                ? "(const void *, const int64_t *, const "
                                  "void *, float *, int64_t, int64_t, "
                                  "int64_t, void *, size_t, cudaStream_t);\n"
                                : "(const void *, const int64_t *, const "
                                  "void *, const void *, void *, int64_t, "
                                  "int64_t, int64_t, cudaStream_t);\n");
          }
          typesOs << "// " << text << ": " << path << "\nusing " << it->second
                  << " = modc_cutlass::"
                  << (v.grouped && split ? "GroupSplitLauncher<"
                      : v.grouped        ? "GroupLauncher<"
                      : split            ? "WgradSplitLauncher<"
                                         : "Launcher<")
                  << launcher << (v.tf32x3 ? ", float" : "") << ">;\n";
        }
        variants.push_back(fmt::format("modc_cutlass::Variant<{}, {}>",
                                       v.minRows, it->second));
      }
      // A weight gradient's plan is named after its key: the call's
      // emitter (KernelCalls.cpp) names it without this object.
      std::string name =
          kind == ProductKind::wgrad && !grouped
              ? cutlassWgradPlan(op)
              : fmt::format("modc_cutlass_plan_{}", plans.size());
      plans[key] = name;
      plansOs << "// " << config << kindText(op) << "\nusing " << name
              << " = modc_cutlass::"
              << (grouped                      ? "GroupPlan<"
                  : kind == ProductKind::wgrad ? "WgradPlan<"
                                               : "Plan<");
      llvm::interleaveComma(variants, plansOs);
      plansOs << ">;\n";
      return WalkResult::advance();
    };
    // The device_rows_config plans after every other: their kernels
    // follow.
    for (StringRef attribute :
         {StringRef("config"), StringRef(cuda::kDeviceRowsConfig)})
      for (modk::EntryOp e : entries) {
        WalkResult walk = e.walk([&](Operation *op) {
          if (!isa<modk::GemmOp, modk::GemmDgradOp, modk::GemmWgradOp>(op))
            return WalkResult::advance();
          return addPlan(op, attribute);
        });
        if (walk.wasInterrupted())
          return failure();
      }
  }
  if (onlyKernel >= 0) {
    // A build check: that kernel's file alone.
    if (onlyKernel >= int(kernels.size()))
      return modk::EntryOp(entries.front()).emitError("the package has ")
             << kernels.size() << " CUTLASS kernels, no kernel " << onlyKernel;
    return success();
  }
  os << kModelSide << kPlan << (hasEpilogue ? kEpiloguePlan : "")
     << (hasStore || hasGroup ? storeArgsText() : std::string())
     << (hasStore ? kStoreArgsOf : "")
     << (hasGroup ? groupTableText() + kGroupPlan : std::string())
     << (hasDgrad ? kDgradPlan : "") << (hasWgrad ? kWgradPlan : "");
  // The kernel types: their files' launchers; under the emulation only
  // declared (no plan uses them there).
  os << "#if defined(__CUDACC__)\n" << launchers << types << "#else\n";
  for (const auto &kernel : kernels)
    os << "struct " << kernel.second << ";\n";
  os << "#endif\n" << planText;
  return success();
}

std::string modc::cutlassWgradPlan(Operation *op) {
  // A grouped one's plan is its group's (CutlassGemms::groupPlanOf).
  auto config = op->getAttrOfType<modk::GemmConfigAttr>("config");
  if (!isa<modk::GemmWgradOp>(op) || !hasCutlassVariant(config) ||
      isCutlassGrouped(config))
    return {};
  // A weight gradient's key is the same on every part.
  std::string key = planKey(op);
  return "modc_cutlass_wgrad_" +
         llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(key)),
                     /*LowerCase=*/true)
             .substr(0, 16);
}

std::string CutlassGemms::planOf(Operation *op) const {
  if (isCutlassGrouped(op->getAttrOfType<modk::GemmConfigAttr>("config")))
    return {};
  return anyPlanOf(op);
}

std::string CutlassGemms::groupPlanOf(Operation *op) const {
  if (!isCutlassGrouped(op->getAttrOfType<modk::GemmConfigAttr>("config")))
    return {};
  return anyPlanOf(op);
}

std::string CutlassGemms::deviceRowsPlanOf(Operation *op) const {
  return anyPlanOf(op, cuda::kDeviceRowsConfig);
}

std::string CutlassGemms::anyPlanOf(Operation *op, StringRef attribute) const {
  if (!isa<modk::GemmOp, modk::GemmDgradOp, modk::GemmWgradOp>(op) ||
      !hasCutlassVariant(op->getAttrOfType<modk::GemmConfigAttr>(attribute)))
    return {};
  auto it = plans.find(planKey(op, attribute));
  return it == plans.end() ? std::string() : it->second;
}
