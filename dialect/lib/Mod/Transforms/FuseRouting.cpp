//===- FuseRouting.cpp - router + top-k + gather + RMSNorm ------*- C++ -*-===//

#include "modc/Dialect/Mod/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace modc {
#define GEN_PASS_DEF_FUSEROUTING
#include "modc/Dialect/Mod/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Matches rmsnorm(gather(x, topk(router(x)))) and replaces the chain by one
/// mod.route. The router and top-k results may have other users (the gated
/// residual reads both); they are redirected to the fused op's results.
struct FuseRouterChain : public OpRewritePattern<mod::RMSNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mod::RMSNormOp norm,
                                PatternRewriter &rewriter) const override {
    auto gather = norm.getInput().getDefiningOp<mod::GatherOp>();
    if (!gather)
      return rewriter.notifyMatchFailure(norm, "input is not a gather");
    auto topk = gather.getIndices().getDefiningOp<mod::TopKOp>();
    if (!topk)
      return rewriter.notifyMatchFailure(norm, "indices are not a top-k");
    auto router = topk.getScores().getDefiningOp<mod::RouterOp>();
    if (!router || router.getInput() != gather.getInput())
      return rewriter.notifyMatchFailure(
          norm, "scores are not the router of the gathered stream");
    // The gathered rows must be used only through the norm and the residual
    // add of the block, which read the fused op's `gathered` result instead.

    auto route = mod::RouteOp::create(
        rewriter, norm.getLoc(), router.getType(), topk.getType(),
        gather.getType(), norm.getType(), gather.getInput(),
        topk.getCausalScores(), router.getLayer(), topk.getK(),
        topk.getCausalRouter(), norm.getParam(), norm.getEps());
    rewriter.replaceOp(norm, route.getNormed());
    rewriter.replaceOp(gather, route.getGathered());
    rewriter.replaceOp(topk, route.getIndices());
    rewriter.replaceOp(router, route.getScores());
    return success();
  }
};

struct FuseRoutingPass : public modc::impl::FuseRoutingBase<FuseRoutingPass> {
  using FuseRoutingBase::FuseRoutingBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseRouterChain>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace
