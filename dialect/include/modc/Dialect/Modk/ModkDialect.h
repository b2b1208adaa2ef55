//===- ModkDialect.h - The kernel-level MoD dialect ---------------*- C++ -*-===//
#ifndef MODC_DIALECT_MODK_MODKDIALECT_H
#define MODC_DIALECT_MODK_MODKDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SmallPtrSet.h"

#include "modc/Dialect/ModelChoices.h"
#include "modc/Dialect/Modk/ModkDialect.h.inc"
#include "modc/Dialect/Modk/ModkEnums.h.inc"

namespace modc::modk {
/// One row of a #modk.gemm_config: from `minRows` rows on, the product runs
/// on `path` with a tileRows x tileCols output tile (TMA-fed on a persistent
/// grid of `tmaCtas` CTAs where nonzero; the epilogue as a kernel of its own
/// where `separateEpilogue`). A `cutlass` variant also names the tile's
/// reduction depth, its cluster, its pipeline stages, its schedule, the
/// order its CTAs walk the tiles and the reduction's split (the fields
/// below, unused by the other paths).
struct GemmVariant {
  int64_t minRows = 0;
  GemmPath path = GemmPath::mma;
  int64_t tileRows = 64, tileCols = 64;
  int64_t tmaCtas = 0;
  bool separateEpilogue = false;
  int64_t tileDepth = 0;
  int64_t clusterRows = 1, clusterCols = 1;
  int64_t stages = 0;
  CutlassSchedule schedule = CutlassSchedule::cooperative;
  RasterOrder raster = RasterOrder::along_m;
  int64_t splitK = 1;
  /// A `cutlass` variant of a group's members (modk-group-gemms): the
  /// group is one CUTLASS grouped (ptr-array) launch (docs/cuda.md,
  /// "CUTLASS").
  bool grouped = false;
  /// A `cutlass` variant of an f32 product: CUTLASS 2.x's multistage
  /// kernel on f32 operands, each product three TF32 products of their big
  /// and small halves (OpMultiplyAddFastF32), which keeps f32 precision
  /// (docs/cuda.md, "CUTLASS").
  bool tf32x3 = false;

  bool operator==(const GemmVariant &o) const {
    return minRows == o.minRows && path == o.path && tileRows == o.tileRows &&
           tileCols == o.tileCols && tmaCtas == o.tmaCtas &&
           separateEpilogue == o.separateEpilogue && tileDepth == o.tileDepth &&
           clusterRows == o.clusterRows && clusterCols == o.clusterCols &&
           stages == o.stages && schedule == o.schedule && raster == o.raster &&
           splitK == o.splitK && grouped == o.grouped && tf32x3 == o.tf32x3;
  }
};
inline llvm::hash_code hash_value(const GemmVariant &v) {
  return llvm::hash_combine(v.minRows, v.path, v.tileRows, v.tileCols,
                            v.tmaCtas, v.separateEpilogue, v.tileDepth,
                            v.clusterRows, v.clusterCols, v.stages, v.schedule,
                            v.raster, v.splitK, v.grouped, v.tf32x3);
}
} // namespace modc::modk

#define GET_ATTRDEF_CLASSES
#include "modc/Dialect/Modk/ModkAttrs.h.inc"

namespace modc::modk {
class RowsOp; // a GEMM's `rows` epilogue names it before it is declared

/// The most rows a sequence's selection may gather split over several
/// blocks (`gather_blocks` > 1): each block keeps the k positions in shared
/// memory (the CUDA select_topk).
constexpr int64_t kMaxSplitGatherRows = 8192;

/// The tiles of the CUDA few-row product kernel (`stream` in a
/// #modk.gemm_config): a CTA's rows and output columns, on CUDA cores (the
/// library's StreamTile) and, for bf16 products, on tensor cores
/// (StreamMmaTile: one mma.m16n8k8 tile wide, four tall).
constexpr int64_t kStreamTileRows = 8, kStreamTileCols = 4;
constexpr int64_t kStreamMmaTileRows = 64, kStreamMmaTileCols = 8;

/// The decode KV cache of a package (args->kv_cache): a causal prefill's
/// attention writes it, a decode step's reads and appends to it.
struct KVCacheResource
    : public mlir::SideEffects::Resource::Base<KVCacheResource> {
  llvm::StringRef getName() final { return "modk.kv_cache"; }
};

/// What an entry hands its caller besides its operands: the causal
/// decisions a forward pass reports (args->causal_decisions).
struct CallerOutputsResource
    : public mlir::SideEffects::Resource::Base<CallerOutputsResource> {
  llvm::StringRef getName() final { return "modk.caller_outputs"; }
};
} // namespace modc::modk

#include "modc/Dialect/Modk/ModkInterfaces.h.inc"

#define GET_OP_CLASSES
#include "modc/Dialect/Modk/ModkOps.h.inc"

namespace modc::modk {
/// The kernel that runs right before (after) `op` in its entry's plan,
/// workspace declarations (modk.alloc) aside; null at either end. The
/// fusion passes fuse kernels that are neighbours in execution order.
mlir::Operation *kernelBefore(mlir::Operation *op);
mlir::Operation *kernelAfter(mlir::Operation *op);

/// The ops of a kernel region's `block` whose values depend only on the
/// block arguments `invariant` accepts and on constants: what a kernel
/// computes once (a row, a step) rather than for every element. The
/// verifier of modk.rows and the emitters ask the same question.
llvm::SmallPtrSet<mlir::Operation *, 16>
invariantOps(mlir::Block &block,
             llvm::function_ref<bool(mlir::BlockArgument)> invariant);
} // namespace modc::modk

#endif // MODC_DIALECT_MODK_MODKDIALECT_H
