//===- FuseEpilogues.cpp - Row kernels into GEMM epilogues ------*- C++ -*-===//
//
// The lowering writes every GEMM plainly (epilogue `none`) followed by the
// row kernels that consume its output: the residual add, the MLP's
// activation. Where a GEMM's output has no reader but that kernel, the
// kernel becomes the GEMM's epilogue: its rows are finished while they are
// still in registers (CUDA) or cache (CPU), and the intermediate buffer is
// gone. A value with another reader (training's pre-activations, which the
// backward pass reads; a routed block's attention rows, which the gated
// scatter reads) must stay in memory, so it is not fused.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace modc {
#define GEN_PASS_DEF_FUSEEPILOGUES
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The GEMM with epilogue `none` that writes `buffer` as the kernel right
/// before `next` (workspace declarations aside), if nothing but that GEMM
/// and `reader` uses `buffer`; null otherwise.
modk::GemmOp soleProducer(Value buffer, Operation *next, Operation *reader) {
  auto gemm = dyn_cast_or_null<modk::GemmOp>(modk::kernelBefore(next));
  if (!gemm || gemm.getOutput() != buffer ||
      gemm.getEpilogue() != modk::Epilogue::none || gemm.getRoundBf16())
    return nullptr;
  for (Operation *user : buffer.getUsers())
    if (user != gemm && user != reader)
      return nullptr;
  return gemm;
}

/// Erases the workspace buffer `v` once nothing uses it.
void eraseIfDead(PatternRewriter &rewriter, Value v) {
  if (auto alloc = v.getDefiningOp<modk::AllocOp>())
    if (alloc->use_empty())
      rewriter.eraseOp(alloc);
}

/// y = residual + a W^T: the add into the GEMM (epilogue residual_add).
struct FuseResidualAdd : OpRewritePattern<modk::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::AddOp add,
                                PatternRewriter &rewriter) const override {
    for (auto [product, residual] :
         {std::pair(add.getRhs(), add.getLhs()),
          std::pair(add.getLhs(), add.getRhs())}) {
      modk::GemmOp gemm = soleProducer(product, add, add);
      if (!gemm || gemm.getSegments() != add.getSegments() ||
          residual == product)
        continue;
      rewriter.setInsertionPoint(add);
      modk::GemmOp::create(rewriter, gemm.getLoc(), gemm.getInput(),
                           gemm.getWeights(), gemm.getSegments(),
                           ValueRange{residual}, add.getOutput(),
                           modk::Epilogue::residual_add,
                           gemm.getPrecisionAttr(), gemm.getCausalOnly());
      rewriter.eraseOp(add);
      rewriter.eraseOp(gemm);
      eraseIfDead(rewriter, product);
      return success();
    }
    return rewriter.notifyMatchFailure(add, "no GEMM output read only here");
  }
};

/// h = silu(a Wg^T) * (a Wu^T) or gelu(a Wu^T): the activation into the
/// GEMM (epilogue swiglu, with the gate rows as its scratch, or gelu).
struct FuseActivation : OpRewritePattern<modk::ActivationOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::ActivationOp act,
                                PatternRewriter &rewriter) const override {
    modk::GemmOp up = soleProducer(act.getUp(), act, act);
    if (!up || up.getSegments() != act.getSegments())
      return rewriter.notifyMatchFailure(act, "up rows have other readers");
    if (act.getKind() == modc::Activation::gelu) {
      rewriter.setInsertionPoint(act);
      modk::GemmOp::create(rewriter, up.getLoc(), up.getInput(),
                           up.getWeights(), up.getSegments(), ValueRange{},
                           act.getOutput(), modk::Epilogue::gelu,
                           up.getPrecisionAttr(), up.getCausalOnly());
      Value upRows = act.getUp();
      rewriter.eraseOp(act);
      rewriter.eraseOp(up);
      eraseIfDead(rewriter, upRows);
      return success();
    }
    // The gate's GEMM right before the up projection's, on the same rows.
    modk::GemmOp gate = soleProducer(act.getGate(), up, act);
    if (!gate || gate.getInput() != up.getInput() ||
        gate.getSegments() != up.getSegments())
      return rewriter.notifyMatchFailure(act, "gate rows have other readers");
    // The swiglu epilogue keeps a W_gate^T in the gate's buffer (scratch).
    rewriter.setInsertionPoint(act);
    modk::GemmOp::create(rewriter, up.getLoc(), up.getInput(),
                         ValueRange{gate.getWeights()[0], up.getWeights()[0]},
                         up.getSegments(), ValueRange{act.getGate()},
                         act.getOutput(), modk::Epilogue::swiglu,
                         up.getPrecisionAttr(), up.getCausalOnly());
    Value upRows = act.getUp();
    rewriter.eraseOp(act);
    rewriter.eraseOp(up);
    rewriter.eraseOp(gate);
    eraseIfDead(rewriter, upRows);
    return success();
  }
};

struct FuseEpiloguesPass
    : public modc::impl::FuseEpiloguesBase<FuseEpiloguesPass> {
  using FuseEpiloguesBase::FuseEpiloguesBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    if (residualAdd)
      patterns.add<FuseResidualAdd>(&getContext());
    if (activation)
      patterns.add<FuseActivation>(&getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};
} // namespace
