//===- FoldZeroFills.cpp - Weight gradients written, not zeroed first -----===//
//
// Training zeroes every weight gradient before the backward pass, and each
// modk.gemm_wgrad then adds dY^T A into it. Where the first op after the
// zero fill that touches the gradient is a weight gradient product that
// writes it whole (and reads it through no other operand), that product
// can write dW = dY^T A instead: the fill's pass over memory goes, and so
// does the product's read of the zeros (docs/compiler.md, stage 5j). A
// second product into the same gradient (a tied embedding's) still adds.
//
// Not folded: a fill whose gradient another op touches first (a kernel
// that adds into it at tokens, a norm's weight gradient), or that the
// first product reads too, or writes through a view, or reaches from
// inside a region (a product that may not run).
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

namespace modc {
#define GEN_PASS_DEF_FOLDZEROFILLS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The weight gradient product that first touches what `fill` zeroed, where
/// it may write the gradient instead of adding to it; else null.
modk::GemmWgradOp firstWriter(modk::ZeroOp fill) {
  Value grad = fill.getOutput();
  for (Operation *op = fill->getNextNode(); op; op = op->getNextNode()) {
    if (!modk::touches(op, grad))
      continue;
    auto wgrad = dyn_cast<modk::GemmWgradOp>(op);
    if (!wgrad || wgrad.getOverwrite() || wgrad.getDw() != grad ||
        modk::viewedBuffer(wgrad.getDy()) == grad ||
        modk::viewedBuffer(wgrad.getInput()) == grad ||
        modk::viewedBuffer(wgrad.getSegments()) == grad)
      return nullptr;
    return wgrad;
  }
  return nullptr;
}

struct FoldZeroFillsPass
    : public modc::impl::FoldZeroFillsBase<FoldZeroFillsPass> {
  using FoldZeroFillsBase::FoldZeroFillsBase;

  void runOnOperation() override {
    if (!enabled)
      return;
    SmallVector<modk::ZeroOp> fills;
    getOperation().walk([&](modk::ZeroOp fill) { fills.push_back(fill); });
    for (modk::ZeroOp fill : fills) {
      if (modk::viewedBuffer(fill.getOutput()) != fill.getOutput())
        continue;
      if (modk::GemmWgradOp wgrad = firstWriter(fill)) {
        wgrad.setOverwrite(true);
        fill->erase();
      }
    }
  }
};
} // namespace
