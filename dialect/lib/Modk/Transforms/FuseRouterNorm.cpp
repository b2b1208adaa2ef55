//===- FuseRouterNorm.cpp - RMSNorm statistics in the router pass -*- C++
//-*-===//
//
// The router of a routed layer reads every token of the stream; the
// RMSNorm of the tokens it selects reads them again to sum x^2. Giving the
// router's pass that sum too (a second sum over the same elements) leaves
// the gather with no reduction of its own: it reads the selected rows once
// and scales them by the scale the router's pass stored for their token
// (docs/model-format.md section 3, steps 2 and 3). The decision is a
// `stats` buffer on modk.route_select_gather, which modk-generalize spells
// as the two kernels.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace modc {
#define GEN_PASS_DEF_FUSEROUTERNORM
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
struct GiveRouterNormStats : OpRewritePattern<modk::RouteSelectGatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::RouteSelectGatherOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getNormStats())
      return failure(); // decided already
    // One f32 a token, as the router's scores.
    Value stats = modk::AllocOp::create(
        rewriter, op.getLoc(), op.getScores().getType(), IntegerAttr());
    rewriter.modifyOpInPlace(op,
                             [&] { op.getNormStatsMutable().assign(stats); });
    return success();
  }
};

struct FuseRouterNormPass
    : public modc::impl::FuseRouterNormBase<FuseRouterNormPass> {
  using FuseRouterNormBase::FuseRouterNormBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    RewritePatternSet patterns(&getContext());
    patterns.add<GiveRouterNormStats>(&getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};
} // namespace
