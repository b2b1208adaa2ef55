//===- GenerateEval.cpp - Derive the loss-only entry -------------*- C++ -*-===//
//
// `modk.entry @eval` is what `modrun eval` and modrt::evaluate run: the
// training entry's forward pass (the same kernels in the same order, top-k
// selection, tokens [B, S + 1]) and its losses, with no backward pass. Its
// losses are those of @grad bit for bit, so held-out and training losses
// are the same function; without gradient buffers its workspace is smaller
// (docs/compiler.md, stage 5a'). `modk.entry @eval_causal`, for models with a
// causal router, is the forward entry's pass in causal mode (what sampling
// runs) and its cross-entropy: the held-out loss of causal routing.
//
//===----------------------------------------------------------------------===//

#include "ModelLowering.h"
#include "modc/Conversion/ModToModk/Passes.h"

namespace modc {
#define GEN_PASS_DEF_GENERATEEVAL
#include "modc/Conversion/ModToModk/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;
using namespace modc::lowering;

LogicalResult ModelLowering::emitLosses() {
  Location loc = model.getLoc();
  losses = modk::OutputOp::create(
      b, loc, MemRefType::get({kLosses}, b.getF32Type()), "losses");
  nRouted = countRoutedLayers();
  nMoe = countMoeLayers();
  // Causal mode has no causal-router loss: the router is what selects.
  if (kind == EntryKind::eval_causal) {
    for (Operation *op : forwardOps)
      if (auto head = dyn_cast<mod::LMHeadOp>(op))
        modk::CrossEntropyLossOp::create(b, loc, buffers[head], targets,
                                         losses);
    return success();
  }
  // The order of emitBackward: the cross-entropy sets the losses, then each
  // routed layer's causal-router loss adds to them, last layer first. The
  // float sums are then the same as in @grad.
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (auto head = dyn_cast<mod::LMHeadOp>(op)) {
      modk::CrossEntropyLossOp::create(b, loc, buffers[head], targets, losses);
    } else if (isa<mod::RouteOp, mod::TopKOp>(op)) {
      auto route = dyn_cast<mod::RouteOp>(op);
      auto topk = dyn_cast<mod::TopKOp>(op);
      CausalRouter causalRouter =
          route ? route.getCausalRouter() : topk.getCausalRouter();
      Value scores = route ? route.getScores() : topk.getScores();
      if (causalRouter == CausalRouter::aux_loss)
        modk::BCELossValueOp::create(b, loc, buffers[scores], saved[op]["mask"],
                                     losses, *model.getAuxLossWeight(),
                                     nRouted);
    } else if (isa<mod::MoeOp>(op)) {
      // The balance loss, where @grad's backward adds it.
      modk::MoeBalanceOp::create(
          b, loc, saved[op]["probs"], saved[op]["choice"], Value(),
          rowSets[op->getOperand(0)].segments, Value(), losses,
          *model.getMoeBalanceLossWeight(), nMoe);
    } else if (auto predictor = dyn_cast<mod::PredictorOp>(op)) {
      Operation *selection = selectionReading(predictor);
      if (!selection)
        return op->emitOpError("is not read by a mod.route or mod.topk");
      modk::BCELossValueOp::create(b, loc, buffers[predictor],
                                   saved[selection]["mask"], losses,
                                   *model.getAuxLossWeight(), nRouted);
    }
  }
  return success();
}

namespace {
/// Builds `modk.entry @eval` beside each mod.model, and `@eval_causal` where
/// the model has a causal mode; the model stays for the passes after it.
struct GenerateEvalPass
    : public modc::impl::GenerateEvalBase<GenerateEvalPass> {
  void runOnOperation() override {
    SmallVector<mod::ModelOp> models(getOperation().getOps<mod::ModelOp>());
    for (mod::ModelOp model : models) {
      // Each entry goes right after the model: @eval_causal first keeps it
      // after @eval.
      if (model.isMixtureOfDepths() &&
          *model.getCausalRouter() != CausalRouter::none) {
        ModelLowering causal(model, EntryKind::eval_causal);
        if (failed(causal.run()))
          return signalPassFailure();
      }
      ModelLowering modelLowering(model, EntryKind::eval);
      if (failed(modelLowering.run()))
        return signalPassFailure();
    }
  }
};
} // namespace
