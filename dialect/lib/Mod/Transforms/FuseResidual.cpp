//===- FuseResidual.cpp - gate scale + scatter into the MLP -----*- C++ -*-===//

#include "modc/Dialect/Mod/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace modc {
#define GEN_PASS_DEF_FUSERESIDUAL
#include "modc/Dialect/Mod/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Matches gated_residual(x, add(a, mlp(n)), r, idx) where the add and the
/// MLP have no other users, and replaces it by mod.mlp_scatter.
struct FuseGatedResidual : public OpRewritePattern<mod::GatedResidualOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mod::GatedResidualOp residual,
                                PatternRewriter &rewriter) const override {
    auto add = residual.getUpdate().getDefiningOp<mod::AddOp>();
    if (!add || !add->hasOneUse())
      return rewriter.notifyMatchFailure(residual, "update is not a lone add");
    auto mlp = add.getRhs().getDefiningOp<mod::MlpOp>();
    Value attn = add.getLhs();
    if (!mlp) {
      mlp = add.getLhs().getDefiningOp<mod::MlpOp>();
      attn = add.getRhs();
    }
    if (!mlp || !mlp->hasOneUse())
      return rewriter.notifyMatchFailure(residual, "no lone MLP in the update");

    Value fused = mod::MlpScatterOp::create(
        rewriter, residual.getLoc(), residual.getType(), mlp.getInput(), attn,
        residual.getInput(), residual.getScores(), residual.getIndices(),
        mlp.getLayer(), residual.getGate());
    rewriter.replaceOp(residual, fused);
    rewriter.eraseOp(add);
    rewriter.eraseOp(mlp);
    return success();
  }
};

/// Matches add(h, moe(n)) where the MoE MLP has no other user and no
/// residual yet, and makes h its residual: the lowering then adds the
/// experts' rows into h's rows, and rows no expert keeps are never touched
/// (docs/model-format.md section 7).
struct FuseMoeResidual : public OpRewritePattern<mod::AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(mod::AddOp add,
                                PatternRewriter &rewriter) const override {
    Value residual = add.getLhs();
    auto moe = add.getRhs().getDefiningOp<mod::MoeOp>();
    if (!moe) {
      moe = add.getLhs().getDefiningOp<mod::MoeOp>();
      residual = add.getRhs();
    }
    if (!moe || !moe->hasOneUse() || moe.getResidual())
      return rewriter.notifyMatchFailure(add, "no lone MoE MLP in the sum");
    // The residual must be defined before the MoE op that now reads it.
    if (Operation *def = residual.getDefiningOp();
        def && !def->isBeforeInBlock(moe))
      return rewriter.notifyMatchFailure(add, "residual defined after the MoE");
    rewriter.modifyOpInPlace(
        moe, [&] { moe.getResidualMutable().assign(residual); });
    rewriter.replaceOp(add, moe.getResult());
    return success();
  }
};

struct FuseResidualPass
    : public modc::impl::FuseResidualBase<FuseResidualPass> {
  using FuseResidualBase::FuseResidualBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseGatedResidual, FuseMoeResidual>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace
