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
/// Moves the gather after `route` into its `gather` region where that is
/// safe; failure (nothing changed) otherwise.
LogicalResult fuseGatherIntoSelect(modk::RouteSelectOp route,
                                   RewriterBase &rewriter) {
  if (!route.getFusedGather().empty())
    return failure();
  auto rows = dyn_cast_or_null<modk::RowsOp>(modk::kernelAfter(route));
  if (!rows || rows.getSegments() != route.getSegments() ||
      rows.getPositions() != route.getPositions() || rows.hasColumnSums())
    return failure();
  for (Value v : rows->getOperands())
    if (v == route.getScores() || v == route.getMask() ||
        v == route.getCausalScores())
      return failure();
  Block *block = rewriter.createBlock(&route.getFusedGather());
  rewriter.moveOpBefore(rows, block, block->end());
  return success();
}

struct FuseSelectGatherPass
    : public modc::impl::FuseSelectGatherBase<FuseSelectGatherPass> {
  using FuseSelectGatherBase::FuseSelectGatherBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    SmallVector<modk::RouteSelectOp> routes(
        getOperation().getBody().front().getOps<modk::RouteSelectOp>());
    IRRewriter rewriter(&getContext());
    for (modk::RouteSelectOp route : routes)
      (void)fuseGatherIntoSelect(route, rewriter);
  }
};
} // namespace
