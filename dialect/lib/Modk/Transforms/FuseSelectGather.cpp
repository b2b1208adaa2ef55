//===- FuseSelectGather.cpp - Gather the rows where they are selected ----===//
//
// A routed layer selects k rows a sequence (a radix select and an ordered
// compaction, modk.route_select) and then gathers them from the residual
// stream with their attention-norm (a modk.rows at the positions it
// selected; docs/model-format.md section 3, steps 2 and 3). Each
// sequence's gather needs only that sequence's positions, so it can run in
// the kernel that selects them, right after the selection: the selection's
// `gather` region. The rows are then gathered with no second launch and no
// second pass over the sequences.
//
// A decode step's selection (modk.decode_select: one token a sequence, the
// routed sequences compacted) is fused the same way: the one block that
// compacts then gathers the routed rows.
//
// Not fused:
//  - a kernel that is not the one right after the selection, or not over
//    the rows and positions it writes (then it is not the gather);
//  - one with column sums (they add over every sequence's rows);
//  - one that reads or writes the selection's scores or mask: other
//    sequences may still be selecting when a sequence is gathered.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace modc {
#define GEN_PASS_DEF_FUSESELECTGATHER
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Moves the gather after `select` (a modk.route_select or a decode step's
/// modk.decode_select) into its `gather` region where that is safe: the
/// next kernel, over the rows and positions the selection writes, with no
/// column sums, touching none of its selection buffers. Failure (nothing
/// changed) otherwise.
template <typename SelectOp>
LogicalResult fuseGatherIntoSelect(SelectOp select, RewriterBase &rewriter) {
  Region &region = select.getFusedGather();
  if (!region.empty())
    return failure();
  auto rows = dyn_cast_or_null<modk::RowsOp>(modk::kernelAfter(select));
  if (!rows || rows.getSegments() != select.getSegments() ||
      rows.getPositions() != select.getGatherPositions() ||
      rows.hasRowSums())
    return failure();
  SmallVector<Value> selection = select.getSelectionBuffers();
  for (Value v : rows->getOperands())
    if (llvm::is_contained(selection, v))
      return failure();
  // Buffers allocated between the two move before the selection, which
  // then holds their writer.
  SmallVector<Operation *> allocs;
  for (Value v : rows->getOperands()) {
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != select->getBlock() ||
        def->isBeforeInBlock(select))
      continue;
    if (!isa<modk::AllocOp>(def))
      return failure();
    allocs.push_back(def);
  }
  for (Operation *alloc : allocs)
    rewriter.moveOpBefore(alloc, select);
  Block *block = rewriter.createBlock(&region);
  rewriter.moveOpBefore(rows, block, block->end());
  return success();
}

struct FuseSelectGatherPass
    : public modc::impl::FuseSelectGatherBase<FuseSelectGatherPass> {
  using FuseSelectGatherBase::FuseSelectGatherBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    SmallVector<Operation *> selects;
    for (Operation &op : getOperation().getBody().front())
      if (isa<modk::RouteSelectOp, modk::DecodeSelectOp>(op))
        selects.push_back(&op);
    IRRewriter rewriter(&getContext());
    for (Operation *op : selects) {
      if (auto route = dyn_cast<modk::RouteSelectOp>(op))
        (void)fuseGatherIntoSelect(route, rewriter);
      else
        (void)fuseGatherIntoSelect(cast<modk::DecodeSelectOp>(op), rewriter);
    }
  }
};
} // namespace
