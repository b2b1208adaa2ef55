//===- ConfigureGemms.cpp - Each product's CUDA kernels --------*- C++ -*-===//
//
// The CUDA kernel library has GEMM mainloops in three families (SIMT f32,
// mma.sync, wgmma; the last also TMA-fed), each in a small and a large tile,
// and a few-row kernel for forward products of a handful of rows (decode).
// Which one a product runs is a function of the part (SMs, shared memory,
// instructions), the product's shape and its operands' storage, all known
// here but the row count, which depends on the batch. So the choice is made
// here, as a table by rows (#modk.gemm_config), and the emitter hands it to
// the library as a template argument: nothing is chosen at run time.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/CudaTargets.h"
#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <limits>

namespace modc {
#define GEN_PASS_DEF_CONFIGUREGEMMS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;
using modk::GemmPath;
using modk::GemmVariant;

namespace {
// The parts a CUDA package is compiled for: modc/Dialect/Modk/CudaTargets.h,
// which the CUDA emitter reads too.
using cuda::CudaPart;

/// A tile of the kernel library: rows x cols outputs a CTA, a warp's
/// accumulator columns (0: no m16n8 fragments; a RoPE epilogue needs whole
/// heads in them), CTAs an SM its registers allow, dynamic shared memory.
struct Tile {
  int64_t rows, cols, warpCols, ctasPerSm, sharedBytes;
};
struct PathTiles {
  Tile small, large;
};
// The library's tiles (compiler/lib/Target/Mainloops/Cuda/GemmTiles.cuh,
// GemmTileFor).
constexpr PathTiles kSimtTiles = {{64, 64, 0, 2, 0}, {128, 128, 0, 2, 0}};
constexpr PathTiles kMmaTiles = {{64, 64, 16, 2, 0}, {128, 128, 32, 1, 0}};
constexpr PathTiles kWgmmaTiles = {{128, 64, 64, 2, 0}, {128, 128, 128, 1, 0}};
// TMA stages: 4 of (16 + 8) KiB, 6 of (16 + 16) KiB, plus 1 KiB alignment.
constexpr PathTiles kTmaTiles = {{128, 64, 64, 2, 4 * 24576 + 1024},
                                 {128, 128, 128, 1, 6 * 32768 + 1024}};

/// Below this many rows a bf16 product stays on mma.sync: a wgmma tile has
/// 128 rows, and few-row products (decode) are weight-bandwidth bound.
constexpr int64_t kWgmmaMinRows = 64;
constexpr int64_t kAnyRows = std::numeric_limits<int64_t>::max();

/// A selection's fused gather split over blocks (select_topk): rows a block
/// gathers at least.
constexpr int64_t kGatherRowsPerBlock = 16;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// What the configuration of one product depends on.
struct Product {
  int64_t cols;          ///< output columns
  int64_t staticRows;    ///< the row count where it is static (0: not)
  bool bf16;             ///< operands rounded to bf16
  bool tmaOperands;      ///< operands TMA can read (stored bf16, aligned)
  int64_t ropeHeadDim;   ///< a RoPE epilogue's head width (0: none)
  bool forward = false;  ///< a modk.gemm (the few-row kernel may run it)
};

class ConfigureGemmsPass
    : public modc::impl::ConfigureGemmsBase<ConfigureGemmsPass> {
public:
  using ConfigureGemmsBase::ConfigureGemmsBase;

  /// Checks the options once per pipeline, not once per entry.
  LogicalResult initialize(MLIRContext *ctx) override {
    Location loc = UnknownLoc::get(ctx);
    target = cuda::findCudaPart(arch);
    if (!target)
      return emitError(loc) << "modk-configure-gemms: unknown arch '" << arch
                            << "'; expected sm_90a or sm_80";
    forcedPath = llvm::StringSwitch<int>(path)
                     .Case("auto", -1)
                     .Case("simt", int(GemmPath::simt))
                     .Case("mma", int(GemmPath::mma))
                     .Case("wgmma", int(GemmPath::wgmma))
                     .Default(-2);
    if (forcedPath == -2)
      return emitError(loc) << "modk-configure-gemms: path '" << path
                            << "'; expected auto, simt, mma or wgmma";
    forcedTile =
        llvm::StringSwitch<int>(tile).Case("auto", 0).Case("small", 1).Case(
            "large", 2).Default(-1);
    if (forcedTile < 0)
      return emitError(loc) << "modk-configure-gemms: tile '" << tile
                            << "'; expected auto, small or large";
    // Each count option and what its 0 means.
    struct CountOption {
      const char *name;
      int64_t value;
      const char *zero;
    };
    for (const CountOption &option : {
             CountOption{"sm-count", smCount, "auto"},
             {"tma-ctas", tmaCtas, "auto"},
             {"wgrad-chunk-rows", wgradChunkRows, "auto"},
             {"gather-blocks", gatherBlocks, "auto"},
             {"cutlass-from", cutlassFrom, "auto"},
             {"stream-rows", streamRows, "none"},
             {"stream-simt-rows", streamSimtRows, "tensor cores at any rows"},
         })
      if (option.value < 0)
        return emitError(loc)
               << "modk-configure-gemms: " << option.name << " " << option.value
               << "; expected 0 (" << option.zero << ") or more";
    if (library != "tiles" && library != "cutlass")
      return emitError(loc) << "modk-configure-gemms: library '" << library
                            << "'; expected tiles or cutlass";
    if (forcedPath == int(GemmPath::wgmma) && !target->wgmma)
      return emitError(loc)
             << "modk-configure-gemms: " << arch << " has no wgmma";
    if (attention != "auto" && attention != "wgmma")
      return emitError(loc) << "modk-configure-gemms: attention '" << attention
                            << "'; expected auto or wgmma";
    if (attention == "wgmma" && !target->wgmma)
      return emitError(loc) << "modk-configure-gemms: attention=wgmma needs "
                               "sm_90a; "
                            << arch << " has no wgmma";
    sms = smCount > 0 ? smCount : target->sms;
    return success();
  }

  void runOnOperation() override {
    modk::EntryOp entry = getOperation();
    bool bf16 = entry.isBf16();
    // A weight's bf16 copy for TMA is made within a call's WeightCopyScope,
    // which every entry but decode opens. A decode step's CUTLASS products
    // read instead the copies that the step makes current before it runs
    // (modk-keep-bf16-weights flags their weights; docs/cuda.md, "CUTLASS").
    bool weightCopies = entry.getKind() != modk::EntryKind::decode;
    MLIRContext *ctx = &getContext();
    WalkResult walk = entry.walk([&](Operation *op) {
      if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
        auto w = cast<MemRefType>(gemm.getWeights()[0].getType()).getShape();
        // Operands TMA (and CUTLASS) can read: the input stored bf16, whole
        // 16-byte rows of the weight's bf16 copy.
        bool aligned = isBf16(gemm.getInput()) && w[1] % 8 == 0;
        Product p{w[0], 0, gemm.productsBf16(), weightCopies && aligned, 0};
        // An f32 product's CUTLASS kernel (tf32x3) reads the f32 input and
        // weight themselves: whole 16-byte rows of both.
        bool f32Operands = isF32(gemm.getInput()) && w[1] % 4 == 0;
        if (modk::RowsOp rows = gemm.getEpilogueRows())
          if (std::optional<uint64_t> hd = rows.getHeadDim())
            p.ropeHeadDim = *hd; // pairs of a head (RoPE)
        p.forward = true;
        // An epilogue that reads a source (a residual add's y, SwiGLU's
        // gate) loads it on sm_90a into shared memory, which leaves fewer
        // stages.
        int64_t storeBytes = 0, sourceBytes = 0;
        // A group's member (modk-group-gemms) on sm_90a: the group is one
        // CUTLASS grouped launch whose problems the device sizes from the
        // members' row counts, so every member computes exactly its rows
        // (docs/cuda.md, "CUTLASS").
        bool grouped = gemm.getGroupAttr() && libOf(p).collectiveBuilders();
        // A decode step's CUTLASS products read the copies the step makes
        // current, its groups too: their grouped launches' device memory
        // is reserved before the step's graph capture (docs/cuda.md).
        bool copied = p.bf16 ? aligned : f32Operands;
        bool cutlass =
            onCutlass(gemm, libOf(p), storeBytes, sourceBytes, grouped);
        gemm.setConfigAttr(
            cutlass && copied
                ? configureCutlass(ctx, p, storeBytes, sourceBytes,
                                   heavyEpilogue(gemm, libOf(p)), grouped)
                : configure(ctx, p));
        // An epilogue that must not touch a row past the count, over rows
        // the device counts (in `causal` mode, or always), outside a group:
        // on sm_90a a grouped launch of this one member computes exactly
        // them, its problem sized on the device (docs/cuda.md, "CUTLASS").
        // Its variants are `device_rows_config`; `config` keeps what runs
        // where the host knows the count (a selection's in `topk` mode).
        if (!grouped && copied && deviceCountedExact(gemm, entry, libOf(p)) &&
            onCutlass(gemm, libOf(p), storeBytes, sourceBytes,
                      /*grouped=*/true))
          gemm.setDeviceRowsConfigAttr(
              configureCutlass(ctx, p, storeBytes, sourceBytes,
                               heavyEpilogue(gemm, libOf(p)), true));
      } else if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op)) {
        // dA [rows, K] = dY [rows, N] W [N, K].
        auto w = cast<MemRefType>(dgrad.getWeight().getType()).getShape();
        Product p{w[1], 0, bf16,
                  weightCopies && isBf16(dgrad.getDy()) && w[0] % 8 == 0 &&
                      w[1] % 8 == 0,
                  0};
        // On CUTLASS where a forward product would be: bf16 operands that
        // TMA (sm_90a) or cp.async (sm_80) reads, dY stored bf16 and W's
        // bf16 copy, or in an f32 product (tf32x3) dY and W themselves,
        // whole 16-byte rows (docs/cuda.md, "CUTLASS"); dA is f32, its old
        // values added where it accumulates. A group's member
        // (modk-group-gemms): its group is one CUTLASS grouped launch, each
        // member's rows sized on the device (CUTLASS 2.x's grouped GEMM on
        // sm_80 and for f32 products).
        bool grouped = bool(dgrad.getGroupAttr());
        bool operands =
            p.bf16 ? p.tmaOperands
                   : isF32(dgrad.getDy()) && w[0] % 4 == 0 && w[1] % 4 == 0;
        bool cutlass = library == "cutlass" && forcedPath < 0 && operands &&
                       w[1] * 4 % libOf(p).alignmentBytes == 0;
        dgrad.setConfigAttr(
            cutlass ? configureCutlass(ctx, p, 4, dgrad.getAccumulate() ? 4 : 0,
                                       false, grouped)
                    : configure(ctx, p));
      } else if (auto wgrad = dyn_cast<modk::GemmWgradOp>(op)) {
        // dW [N, K] += dY^T A over the rows: N rows of output, static.
        auto w = cast<MemRefType>(wgrad.getDw().getType()).getShape();
        Product p{w[1], w[0], wgrad.productsBf16(),
                  isBf16(wgrad.getDy()) && isBf16(wgrad.getInput()) &&
                      w[0] % 8 == 0 && w[1] % 8 == 0,
                  0};
        bool operands = p.bf16
                            ? p.tmaOperands
                            : isF32(wgrad.getDy()) && isF32(wgrad.getInput()) &&
                                  w[0] % 4 == 0 && w[1] % 4 == 0;
        int64_t split = wgradSplit(w[0], w[1]);
        // On CUTLASS: dY and A stored bf16 (f32 in an f32 product, tf32x3),
        // read MN-major (by TMA on sm_90a, cp.async on sm_80), dW f32 added
        // to in the epilogue.
        // sm_90a's kernel fixes its reduction, the row count, on the host:
        // a single product takes it where the host knows the count
        // (rowsAreBound); a group's members (modk-group-gemms) are one
        // grouped launch whose setup kernel reads each member's count on
        // the device: any rows, and so is a single product over rows the
        // device counts (a grouped launch of it alone, `grouped` with no
        // `group`). CUTLASS 2.x's kernel (sm_80's, an f32 product's)
        // reads the count on the device: any rows, its groups too (its
        // grouped GEMM). Where the output (the members' outputs together)
        // does not fill the part, CUTLASS's kernel splits its reduction
        // too, deterministically (split_k, configureCutlassWgrad): a
        // group's members' rows in chunks, extra problems of its grouped
        // launch, on either generation. A forced chunk size
        // (wgrad-chunk-rows) keeps the tiles' split. The tiles
        // keep their split for the rows below CUTLASS's and wherever it
        // declines. docs/cuda.md, "CUTLASS".
        int64_t members = groupMembers(wgrad);
        bool grouped = members > 1;
        bool sm90 = libOf(p).collectiveBuilders();
        bool fills =
            grouped ? wgradSplit(w[0] * members, w[1]) == 1 : split == 1;
        bool alone = sm90 && !grouped &&
                     !rowsAreBound(wgrad.getSegments(), wgrad.getDy());
        bool cutlass = library == "cutlass" && forcedPath < 0 && operands &&
                       (fills || wgradChunkRows == 0) &&
                       w[1] * 4 % libOf(p).alignmentBytes == 0;
        wgrad.setConfigAttr(cutlass ? configureCutlassWgrad(ctx, p, members,
                                                            grouped || alone,
                                                            fills ? 1 : split)
                                    : configure(ctx, p, split));
      } else if (auto route = dyn_cast<modk::RouteSelectOp>(op)) {
        if (route.getGatherRows())
          route.setGatherBlocksAttr(IntegerAttr::get(
              IntegerType::get(ctx, 64), selectGatherBlocks(route.getK())));
      } else if (auto attn = dyn_cast<modk::AttentionOp>(op)) {
        if (failed(configureAttention(attn, false)))
          return WalkResult::interrupt();
      } else if (auto grad = dyn_cast<modk::AttentionGradOp>(op)) {
        if (failed(configureAttention(grad, true)))
          return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      signalPassFailure();
  }

private:
  /// What CUTLASS offers product p on the part: the bf16 kernels, or for
  /// an f32 product the tf32x3 ones (cuda::cutlassTarget).
  const cuda::CutlassTarget &libOf(const Product &p) const {
    return cuda::cutlassTarget(*target, !p.bf16);
  }

  static bool isBf16(Value v) {
    return cast<MemRefType>(v.getType()).getElementType().isBF16();
  }
  static bool isF32(Value v) {
    return cast<MemRefType>(v.getType()).getElementType().isF32();
  }

  /// Whether `gemm`'s epilogue math calls erf (GELU) on sm_90a's kernels
  /// (`lib`): beside a 128x256 tile's accumulators (128 f32 a thread) its
  /// registers spill there (20 bytes with nvcc 13), so it keeps to the
  /// smaller CUTLASS tiles. CUTLASS 2.x's tree finishes the tile a row step
  /// at a time: its 128x256 kernel does not spill (docs/cuda.md,
  /// "CUTLASS").
  static bool heavyEpilogue(modk::GemmOp gemm, const cuda::CutlassTarget &lib) {
    modk::RowsOp rows = gemm.getEpilogueRows();
    if (!rows || !lib.collectiveBuilders())
      return false;
    WalkResult walk = rows.walk([](Operation *o) {
      return o->getName().getStringRef() == "math.erf" ? WalkResult::interrupt()
                                                       : WalkResult::advance();
    });
    return walk.wasInterrupted();
  }

  /// Whether `gemm` runs on sm_90a's kernels (`lib`: CUTLASS 3.x's grouped
  /// launches) an
  /// epilogue that must not touch a row past the count (one that stores by
  /// itself, at its rows' tokens: the gated scatter; or an elementwise one
  /// that reads y in place) over rows whose count is the device's in a
  /// mode of `entry` (modk::hostRowCount: the device's, or a selection's
  /// in an entry that serves `causal` mode).
  bool deviceCountedExact(modk::GemmOp gemm, modk::EntryOp entry,
                          const cuda::CutlassTarget &lib) const {
    if (library != "cutlass" || forcedPath >= 0 || !lib.collectiveBuilders() ||
        gemm.getEpilogue() != modk::Epilogue::rows)
      return false;
    Value source;
    bool exact = gemm.isElementwiseEpilogue(&source)
                     ? source == gemm.getOutput()
                     : !gemm.getEpilogueRows().getHeadDim();
    switch (modk::hostRowCount(gemm.getSegments(),
                               cast<MemRefType>(gemm.getInput().getType()))) {
    case modk::HostRowCount::bound:
      return false;
    case modk::HostRowCount::topk:
      return exact && entry.servesMode(modk::RoutingMode::causal);
    case modk::HostRowCount::device:
      return exact;
    }
    llvm_unreachable("unknown row count");
  }

  /// The members of a weight gradient's group (modk-group-gemms: its
  /// neighbours of the same `group`), 1 outside a group.
  static int64_t groupMembers(modk::GemmWgradOp wgrad) {
    IntegerAttr group = wgrad.getGroupAttr();
    if (!group)
      return 1;
    auto same = [&](Operation *o) {
      auto other = dyn_cast_or_null<modk::GemmWgradOp>(o);
      return other && other.getGroupAttr() == group;
    };
    Operation *first = wgrad;
    while (same(first->getPrevNode()))
      first = first->getPrevNode();
    int64_t members = 0;
    for (Operation *o = first; same(o); o = o->getNextNode())
      ++members;
    return members;
  }

  /// Whether the rows of `segments` are always every row `buffer` can hold
  /// (its bound, B x its second dimension), so that the host knows the
  /// count (modk::hostRowCount): a dense layer's or a top-k selection's of
  /// k = that dimension without a causal router.
  static bool rowsAreBound(Value segments, Value buffer) {
    return modk::hostRowCount(segments, cast<MemRefType>(buffer.getType())) ==
           modk::HostRowCount::bound;
  }

  /// Flash attention's mainloop: mma.sync where the head dim is a multiple
  /// of 8 up to 128 (the tensor-core kernels' fragments), else SIMT; with
  /// attention=wgmma, attention or its gradient whose q, k and v are stored
  /// bf16 (`bf16Inputs`) at head dim 64 or 128 takes the TMA and wgmma
  /// kernels (sm_90a; P, the gradient's dS and dO rounded to bf16,
  /// docs/cuda.md).
  modk::GemmPathAttr attentionMainloop(MLIRContext *ctx, int64_t headDim,
                                       bool bf16Inputs) const {
    if (bf16Inputs && attention == "wgmma" &&
        forcedPath != int(GemmPath::simt) && (headDim == 64 || headDim == 128))
      return modk::GemmPathAttr::get(ctx, GemmPath::wgmma);
    bool tensorCores = forcedPath != int(GemmPath::simt) && headDim > 0 &&
                       headDim % 8 == 0 && headDim <= 128;
    return modk::GemmPathAttr::get(
        ctx, tensorCores ? GemmPath::mma : GemmPath::simt);
  }

  /// Whether q, k and v are stored bf16 (modk-store-bf16), as the wgmma
  /// kernels read them.
  template <typename AttentionLikeOp>
  static bool storedBf16(AttentionLikeOp op) {
    return llvm::all_of(
        ValueRange{op.getQ(), op.getK(), op.getV()}, [](Value v) {
          return cast<MemRefType>(v.getType()).getElementType().isBF16();
        });
  }

  /// Sets the mainloop of attention or its gradient, and refuses heads
  /// its kernels cannot hold on the part.
  template <typename AttentionLikeOp>
  LogicalResult configureAttention(AttentionLikeOp op, bool backward) {
    int64_t headDim = cast<MemRefType>(op.getQ().getType()).getShape().back() /
                      op.getNHeads();
    modk::GemmPathAttr mainloop =
        attentionMainloop(&getContext(), headDim, storedBf16(op));
    op.setMainloopAttr(mainloop);
    return checkAttentionShared(op, headDim, mainloop.getValue(), backward);
  }

  /// Dynamic shared memory (bytes) a block of the SIMT flash-attention
  /// kernels takes over heads of `headDim`. The forward kernel
  /// (Mainloops/Cuda/FlashAttention.cuh, AttnSmem) holds Q and K transposed
  /// in rows of 64 + 4, the scores in K's place, V [64][HD] and 128
  /// positions; the backward's (FlashAttentionGrad.cuh, attnGradSmemFloats)
  /// four tiles of 32 rows of the head padded to a multiple of 4, plus one,
  /// two [32][33] score tiles and 64 statistics. The tensor-core kernels
  /// take head dims up to 128, which fit every part.
  static int64_t simtAttentionSharedBytes(int64_t headDim, bool backward) {
    if (!backward)
      return 4 * (68 * headDim + std::max<int64_t>(68 * headDim, 64 * 68) +
                  64 * headDim + 128);
    return 4 * (128 * ((headDim + 3) / 4 * 4 + 1) + 2 * 32 * 33 + 64);
  }

  /// The largest even head dim whose SIMT attention kernels fit a block of
  /// `part`.
  static int64_t largestSimtHeadDim(const CudaPart &part) {
    int64_t hd = 2;
    while (simtAttentionSharedBytes(hd + 2, false) <= part.sharedBytesPerSm &&
           simtAttentionSharedBytes(hd + 2, true) <= part.sharedBytesPerSm)
      hd += 2;
    return hd;
  }

  /// Refuses attention whose kernel could not start on the part: a block
  /// may have at most the part's shared memory (docs/cuda.md), and the SIMT
  /// kernels' tiles grow with the head dim.
  LogicalResult checkAttentionShared(Operation *op, int64_t headDim,
                                     GemmPath mainloop, bool backward) const {
    if (mainloop != GemmPath::simt)
      return success();
    int64_t bytes = simtAttentionSharedBytes(headDim, backward);
    if (bytes <= target->sharedBytesPerSm)
      return success();
    InFlightDiagnostic diag =
        op->emitError()
        << "attention" << (backward ? "'s gradient" : "") << " over heads of "
        << headDim << " needs " << bytes
        << " bytes of shared memory a block on the CUDA kernel for head "
           "dims above 128, more than a block of "
        << target->arch << " (" << target->name << ") has ("
        << target->sharedBytesPerSm << "); the CUDA target takes head dims "
        << "(d_model / n_heads) up to ";
    llvm::interleave(
        cuda::kCudaParts, diag,
        [&](const CudaPart &part) {
          diag << largestSimtHeadDim(part) << " on " << part.arch;
        },
        ", ");
    return failure();
  }

  /// Blocks a sequence for a selection with a fused gather: enough that
  /// a few sequences fill the part (a quarter of its SMs each), at least
  /// kGatherRowsPerBlock rows a block (two a warp), and one where the k
  /// positions would not fit a block's shared memory.
  int64_t selectGatherBlocks(int64_t k) const {
    if (k > modk::kMaxSplitGatherRows)
      return 1;
    if (gatherBlocks > 0)
      return std::min(gatherBlocks.getValue(), k);
    return std::clamp<int64_t>(k / kGatherRowsPerBlock, 1,
                               ceilDiv(sms, 4));
  }

  /// The tiles of a path, TMA-fed or not.
  static const PathTiles &tilesOf(GemmPath path, bool tma) {
    if (path == GemmPath::simt)
      return kSimtTiles;
    if (path == GemmPath::mma)
      return kMmaTiles;
    return tma ? kTmaTiles : kWgmmaTiles;
  }

  /// Whether a tile of `path` can hold the product's epilogue: RoPE
  /// rotates a column with the one half a head further, in the same
  /// thread's registers, which needs whole heads in each warp's columns and
  /// the partner a whole n8 fragment away (a head dim that is a multiple of
  /// 16).
  static bool fits(const Tile &t, const Product &p) {
    return p.ropeHeadDim == 0 ||
           (p.ropeHeadDim % 16 == 0 && t.warpCols > 0 &&
            t.warpCols % p.ropeHeadDim == 0);
  }

  /// Whether TMA stages of `t` fit the part's shared memory.
  bool sharedFits(const Tile &t) const {
    return t.ctasPerSm * t.sharedBytes <= target->sharedBytesPerSm;
  }

  /// The variants of `path` over rows [from, until): the small tile below
  /// the row count from which the large one gives `waves` waves of CTAs,
  /// the large one from there (or a forced tile throughout); the other tile
  /// where the chosen one cannot hold the epilogue.
  void addPathVariants(SmallVectorImpl<GemmVariant> &out, GemmPath path,
                       int64_t from, int64_t until, const Product &p) const {
    bool fed = path == GemmPath::wgmma && tma.getValue() && p.tmaOperands &&
               sharedFits(kTmaTiles.small) && sharedFits(kTmaTiles.large);
    const PathTiles &tiles = tilesOf(path, fed);
    int64_t waves = path == GemmPath::wgmma ? 1 : 2;
    // ceil(rows / L.rows) * ceil(cols / L.cols) >= waves * SMs from here.
    int64_t need = ceilDiv(waves * sms, ceilDiv(p.cols, tiles.large.cols));
    int64_t largeFrom = need <= 1 ? 0 : (need - 1) * tiles.large.rows + 1;
    if (forcedTile != 0)
      largeFrom = forcedTile == 2 ? 0 : kAnyRows;
    if (p.staticRows > 0) // one variant: the choice at the known rows
      largeFrom = p.staticRows >= largeFrom ? 0 : kAnyRows;
    auto add = [&](int64_t start, bool large) {
      const Tile *t = large ? &tiles.large : &tiles.small;
      const Tile *other = large ? &tiles.small : &tiles.large;
      if (!fits(*t, p) && fits(*other, p))
        std::swap(t, other);
      GemmVariant v;
      v.minRows = start;
      v.path = path;
      v.tileRows = t->rows;
      v.tileCols = t->cols;
      v.separateEpilogue = !fits(*t, p);
      if (fed)
        v.tmaCtas = tmaCtas > 0 ? tmaCtas : sms * t->ctasPerSm;
      if (!out.empty() && out.back().path == v.path &&
          out.back().tileRows == v.tileRows &&
          out.back().tileCols == v.tileCols &&
          out.back().tmaCtas == v.tmaCtas &&
          out.back().separateEpilogue == v.separateEpilogue)
        return; // the same kernel as the rows below
      out.push_back(v);
    };
    if (from < std::min(largeFrom, until))
      add(from, false);
    if (std::max(largeFrom, from) < until)
      add(std::max(largeFrom, from), true);
  }

  /// The configuration of one product (`maxSplits`: a weight gradient's).
  modk::GemmConfigAttr configure(MLIRContext *ctx, const Product &p,
                                 int64_t maxSplits = 1) const {
    SmallVector<GemmVariant> variants;
    GemmPath tensorPath = GemmPath::mma;
    bool wgmma = target->wgmma && p.bf16;
    if (forcedPath >= 0) {
      tensorPath = GemmPath(forcedPath);
      if (tensorPath == GemmPath::wgmma && !p.bf16)
        tensorPath = GemmPath::mma; // wgmma runs bf16 products only
      wgmma = false;
    }
    if (wgmma && forcedTile == 0 && p.staticRows == 0) {
      addPathVariants(variants, GemmPath::mma, 0, kWgmmaMinRows, p);
      addPathVariants(variants, GemmPath::wgmma, kWgmmaMinRows, kAnyRows, p);
    } else if (wgmma && (forcedTile != 0 || p.staticRows >= kWgmmaMinRows)) {
      addPathVariants(variants, GemmPath::wgmma, 0, kAnyRows, p);
    } else {
      addPathVariants(variants, tensorPath, 0, kAnyRows, p);
    }
    if (p.forward && streamRows > 0 && forcedPath < 0 && forcedTile == 0)
      variants = withFewRowKernel(variants, p.bf16);
    return modk::GemmConfigAttr::get(ctx, variants, maxSplits,
                                     maxSplits > 1 ? wgradChunkRows : 0);
  }

  /// Whether library=cutlass runs `gemm` on CUTLASS: output rows (f32 or
  /// bf16) whose pitch is whole 16-byte units, and
  ///  - a plain epilogue (a store by TMA of `storeBytes` an element);
  ///  - an elementwise `rows` epilogue (GemmOp::isElementwiseEpilogue: a
  ///    residual add, SwiGLU's product with the gate, GELU, the bf16
  ///    store), which the emitter writes as an epilogue visitor tree over
  ///    its math: on sm_90a CUTLASS 3.x's, storing y by TMA, on sm_80
  ///    CUTLASS 2.x's, reading the source from and storing y to global
  ///    memory; `sourceBytes` is set to the bytes of its source's elements
  ///    (0: none), which TMA loads too on sm_90a;
  ///  - another `rows` epilogue without head pairs (the routed block's
  ///    gated scatter into the stream at the rows' tokens), which the
  ///    emitter writes as a visitor node that finishes each element with
  ///    the epilogue's own loads and stores (on sm_90a no TMA store; the
  ///    stages count an f32 store's shared memory all the same);
  ///  - an epilogue over heads (RoPE): the kernel stores the f32 product
  ///    (in y where y is f32, else in the entry's scratch), and the
  ///    epilogue runs as its row kernel after it;
  /// sm_80's kernel stops at the count on the device (rowCountKernel): any
  /// rows. The sm_90a kernel computes every row up to the count it is
  /// given, so an epilogue that reads y in place, or stores elsewhere than
  /// at its row, runs there only over rows whose count the host knows
  /// (modk::hostRowCount: always, or a selection's in `topk` mode): a row
  /// past the count must neither change y nor store at a token it does not
  /// have. A `grouped` member's launch computes exactly the rows the
  /// device counts (its problem's rows): any rows. `lib`: the kernels the
  /// product's precision takes (sm_80's are CUTLASS 2.x's, and so are
  /// every f32 product's).
  bool onCutlass(modk::GemmOp gemm, const cuda::CutlassTarget &lib,
                 int64_t &storeBytes, int64_t &sourceBytes,
                 bool grouped = false) const {
    storeBytes = sourceBytes = 0;
    if (library != "cutlass" || forcedPath >= 0)
      return false;
    auto bytesOf = [](Value v) -> int64_t {
      Type element = cast<MemRefType>(v.getType()).getElementType();
      return element.isF32() ? 4 : element.isBF16() ? 2 : 0;
    };
    auto out = cast<MemRefType>(gemm.getOutput().getType());
    int64_t bytes = bytesOf(gemm.getOutput());
    if (bytes == 0 || out.getShape().back() * bytes % lib.alignmentBytes != 0)
      return false;
    if (gemm.getEpilogue() == modk::Epilogue::none) {
      storeBytes = bytes;
      return true;
    }
    if (gemm.getEpilogue() != modk::Epilogue::rows)
      return false;
    bool sm90 = lib.collectiveBuilders();
    // In `topk` mode a selection's count is B x k (the emitter passes it);
    // in `causal` mode the call declines at run time where it must not
    // pass the count (the tiles run).
    bool known = grouped || modk::hostRowCount(
                                gemm.getSegments(),
                                cast<MemRefType>(gemm.getInput().getType())) !=
                                modk::HostRowCount::device;
    Value source;
    if (gemm.isElementwiseEpilogue(&source)) {
      if (sm90 && source == gemm.getOutput() && !known)
        return false;
      if (source) {
        sourceBytes = bytesOf(source);
        if (cast<MemRefType>(source.getType()).getShape().back() * sourceBytes %
                lib.alignmentBytes !=
            0)
          return false;
      }
      storeBytes = bytes;
      return true;
    }
    // RoPE pairs the columns of a head, which a tile's epilogue does not
    // hold together: on both parts the kernel stores the f32 product (the
    // plain kernel) and the epilogue's row kernel finishes it (any rows).
    // Another epilogue stores by itself: on sm_90a over rows whose count
    // the host knows, with no TMA store, but the stages leave an f32
    // store's shared memory all the same (seven 128x128 stages beside none
    // overflow the kernel's shared storage: its alignment and barriers); on
    // sm_80 over any rows (its kernel stops at the count), in the f32
    // store's stages.
    storeBytes = 4;
    modk::RowsOp rows = gemm.getEpilogueRows();
    if (rows && rows.getHeadDim())
      return true;
    return rows && (known || !sm90);
  }

  /// `lib`'s CUTLASS tiles, smallest first, or the one that `tile=`
  /// forces.
  ArrayRef<cuda::CutlassTile>
  cutlassTiles(const cuda::CutlassTarget &lib) const {
    ArrayRef<cuda::CutlassTile> table = lib.tileList();
    if (forcedTile == 1)
      return table.take_front();
    if (forcedTile == 2)
      return table.take_back();
    return table;
  }

  /// Tile t's CUTLASS variant from minRows rows on, for `rowTiles` tiles of
  /// output rows and p's columns: clusters along the rows where there are
  /// rows for them, rasters along the longer side; tf32x3 where the
  /// product is f32.
  static GemmVariant cutlassVariant(const cuda::CutlassTile &t, int64_t minRows,
                                    int64_t rowTiles, int64_t stages,
                                    const Product &p) {
    const int64_t cols = p.cols;
    GemmVariant v;
    v.tf32x3 = !p.bf16;
    v.minRows = minRows;
    v.path = GemmPath::cutlass;
    v.tileRows = t.rows;
    v.tileCols = t.cols;
    v.tileDepth = t.depth;
    v.clusterRows = rowTiles >= t.clusterRows ? t.clusterRows : 1;
    v.stages = stages;
    v.schedule = t.schedule;
    v.raster = rowTiles >= ceilDiv(cols, t.cols) ? modk::RasterOrder::along_m
                                                 : modk::RasterOrder::along_n;
    return v;
  }

  /// Marks `v` as a group's grouped launch's variant where `grouped`. On
  /// CUTLASS 2.x (`lib`) that is its grouped GEMM, whose CTAs walk each
  /// member's tiles along N (a row of tiles after another): the raster it
  /// runs, whatever the member's shape.
  static void markGrouped(GemmVariant &v, bool grouped,
                          const cuda::CutlassTarget &lib) {
    v.grouped = grouped;
    if (grouped && !lib.collectiveBuilders())
      v.raster = modk::RasterOrder::along_n;
  }

  /// The configuration of a product on CUTLASS: the tile kernels'
  /// variants below `from` rows (a forward product's few-row kernel's, or
  /// mma.sync's below 64 without it), then the part's CUTLASS tiles,
  /// smallest first, each from the row count where it gives a wave of CTAs;
  /// a larger tile only where it pads no more columns than the one before
  /// it. `sourceBytes` (0: none): the epilogue reads a source of elements
  /// of that size (an accumulating input gradient's or a residual add's old
  /// values, SwiGLU's gate), whose shared memory takes stages. `heavy`:
  /// the epilogue's math keeps to tiles of at most 128x128
  /// (heavyEpilogue). `grouped`: the variants are a group's grouped
  /// launch's (their stages leave its descriptors' shared memory).
  modk::GemmConfigAttr configureCutlass(MLIRContext *ctx, const Product &p,
                                        int64_t outputBytes,
                                        int64_t sourceBytes = 0,
                                        bool heavy = false,
                                        bool grouped = false) const {
    const int64_t from = cutlassFrom > 0               ? cutlassFrom
                         : p.forward && streamRows > 0 ? streamRows + 1
                                                       : kWgmmaMinRows;
    SmallVector<GemmVariant> variants;
    for (const GemmVariant &v : configure(ctx, p).getVariants())
      if (v.minRows < from)
        variants.push_back(v);
    ArrayRef<cuda::CutlassTile> table = cutlassTiles(libOf(p));
    const cuda::CutlassTile *previous = nullptr;
    for (const cuda::CutlassTile &t : table) {
      int64_t stages = cuda::cutlassStages(*target, libOf(p), t, outputBytes,
                                           sourceBytes, grouped);
      if (stages == 0 || (heavy && t.rows * t.cols > 128 * 128))
        continue;
      int64_t start = from;
      if (previous) {
        if (ceilDiv(p.cols, t.cols) * t.cols >
            ceilDiv(p.cols, previous->cols) * previous->cols)
          continue;
        // ceil(rows / t.rows) * ceil(cols / t.cols) >= CTAs an SM x SMs.
        int64_t need = ceilDiv(t.ctasPerSm * sms, ceilDiv(p.cols, t.cols));
        start = std::max(from, need <= 1 ? 0 : (need - 1) * t.rows + 1);
      }
      GemmVariant v =
          cutlassVariant(t, start, ceilDiv(start, t.rows), stages, p);
      markGrouped(v, grouped, libOf(p));
      while (!variants.empty() && variants.back().minRows >= start)
        variants.pop_back(); // the larger tile from the same rows on
      variants.push_back(v);
      previous = &t;
    }
    if (variants.empty() || variants.back().path != GemmPath::cutlass)
      return configure(ctx, p); // no CUTLASS tile fits the part
    return modk::GemmConfigAttr::get(ctx, variants, 1, 0);
  }

  /// The configuration of a weight gradient on CUTLASS: the tiles'
  /// configuration (`tileSplits`: their split over the rows, 1: none),
  /// then from kWgmmaMinRows rows of reduction (the rows; below, the tiles)
  /// one CUTLASS kernel over the static output, dW [N, K], its epilogue
  /// adding dW's old values. `grouped` (set where `members` > 1: a group's
  /// members): one grouped launch over all their outputs, each member's
  /// reduction read on the device (its variant `grouped`, its stages
  /// leaving its descriptors' shared memory). Where the output fills the
  /// part (tileSplits 1): the largest tile of the part that still gives a
  /// wave of CTAs over its N rows and pads no more columns than the smaller
  /// ones, no split. Else the reduction splits (cutlassWgradSplit).
  modk::GemmConfigAttr configureCutlassWgrad(MLIRContext *ctx, const Product &p,
                                             int64_t members, bool grouped,
                                             int64_t tileSplits) const {
    SmallVector<GemmVariant> variants(
        configure(ctx, p, tileSplits).getVariants());
    ArrayRef<cuda::CutlassTile> table = cutlassTiles(libOf(p));
    std::optional<GemmVariant> chosen;
    const int64_t from = cutlassFrom > 0 ? cutlassFrom : kWgmmaMinRows;
    if (tileSplits > 1) {
      chosen = cutlassWgradSplit(p, members, grouped);
    } else {
      const cuda::CutlassTile *previous = nullptr;
      for (const cuda::CutlassTile &t : table) {
        int64_t stages =
            cuda::cutlassStages(*target, libOf(p), t, 4, 4, grouped);
        if (stages == 0)
          continue;
        if (previous) {
          if (ceilDiv(p.cols, t.cols) * t.cols >
              ceilDiv(p.cols, previous->cols) * previous->cols)
            continue;
          // members x ceil(N / t.rows) x ceil(K / t.cols) >= CTAs an SM x
          // SMs.
          if (members * ceilDiv(p.staticRows, t.rows) *
                      ceilDiv(p.cols, t.cols) <
                  t.ctasPerSm * sms &&
              forcedTile == 0)
            continue;
        }
        chosen =
            cutlassVariant(t, from, ceilDiv(p.staticRows, t.rows), stages, p);
        markGrouped(*chosen, grouped, libOf(p));
        previous = &t;
      }
    }
    if (!chosen)
      return configure(ctx, p, tileSplits); // no CUTLASS tile fits the part
    chosen->minRows = from;
    while (!variants.empty() && variants.back().minRows >= chosen->minRows)
      variants.pop_back();
    variants.push_back(*chosen);
    return modk::GemmConfigAttr::get(ctx, variants, tileSplits, 0);
  }

  /// The CUTLASS variant of a weight gradient whose output tiles (the
  /// `members`' together) do not fill the part: the part's smallest tile
  /// that splits (sm_90a: a cooperative one, as CUTLASS's stream-K
  /// scheduler, which splits a single product's reduction, runs the
  /// cooperative kernel only; CUTLASS 2.x: any, its serial split-K; a
  /// group on either splits each member's rows into chunks, extra
  /// problems of its grouped launch), whose reduction splits into as many
  /// chunks as
  /// bring its CTAs to a wave (CTAs an SM x SMs), at most the part's
  /// maxSplitK (`split_k`; 1: the tile's output alone fills the part).
  /// Unset where the part has no such tile or splits nothing.
  std::optional<GemmVariant>
  cutlassWgradSplit(const Product &p, int64_t members, bool grouped) const {
    const cuda::CutlassTarget &lib = libOf(p);
    if (lib.maxSplitK <= 1)
      return std::nullopt;
    for (const cuda::CutlassTile &t : cutlassTiles(lib)) {
      int64_t stages = cuda::cutlassStages(*target, lib, t, 4, 4, grouped);
      if (stages == 0 || (lib.collectiveBuilders() &&
                          t.schedule != modk::CutlassSchedule::cooperative))
        continue;
      int64_t tiles =
          members * ceilDiv(p.staticRows, t.rows) * ceilDiv(p.cols, t.cols);
      GemmVariant v =
          cutlassVariant(t, 0, ceilDiv(p.staticRows, t.rows), stages, p);
      v.splitK = std::clamp<int64_t>(ceilDiv(t.ctasPerSm * sms, tiles), 1,
                                     lib.maxSplitK);
      markGrouped(v, grouped, lib);
      return v;
    }
    return std::nullopt;
  }

  /// `variants` with rows up to streamRows on the few-row kernel (a bf16
  /// product's above streamSimtRows on its tensor-core tile, which reads
  /// the weight once for up to 64 rows, where the CUDA-core tile reads it
  /// once for each 8): the variants from there on start after it, those it
  /// covers whole go.
  SmallVector<GemmVariant> withFewRowKernel(ArrayRef<GemmVariant> variants,
                                            bool bf16) const {
    GemmVariant stream;
    stream.path = GemmPath::stream;
    stream.tileRows = modk::kStreamTileRows;
    stream.tileCols = modk::kStreamTileCols;
    SmallVector<GemmVariant> out;
    if (!bf16 || streamSimtRows > 0)
      out.push_back(stream);
    if (bf16 && streamSimtRows < streamRows) {
      stream.tileRows = modk::kStreamMmaTileRows;
      stream.tileCols = modk::kStreamMmaTileCols;
      stream.minRows = out.empty() ? 0 : streamSimtRows + 1;
      out.push_back(stream);
    }
    const int64_t from = streamRows + 1;
    for (auto [i, v] : llvm::enumerate(variants)) {
      int64_t until = i + 1 < variants.size() ? variants[i + 1].minRows
                                              : kAnyRows;
      if (until <= from)
        continue;
      out.push_back(v);
      out.back().minRows = std::max(v.minRows, from);
    }
    return out;
  }

  /// Chunks a weight gradient's rows may split into: as many as bring its
  /// 64 x 64 output tiles to two waves of CTAs, where they are at most one
  /// wave (1: no split). A forced chunk size splits every weight gradient.
  int64_t wgradSplit(int64_t n, int64_t k) const {
    if (wgradChunkRows > 0)
      return 65535;
    int64_t tiles = ceilDiv(n, 64) * ceilDiv(k, 64);
    int64_t target2 = 2 * sms;
    if (2 * tiles > target2)
      return 1;
    return std::min<int64_t>(ceilDiv(target2, tiles), 65535);
  }

  const cuda::CudaPart *target = nullptr;
  int64_t sms = 0;
  int forcedPath = -1, forcedTile = 0;
};
} // namespace
