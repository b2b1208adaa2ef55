//===- GenerateDecode.cpp - Derive the decode-step entry --------*- C++ -*-===//

#include "ModelLowering.h"
#include "modc/Conversion/ModToModk/Passes.h"

namespace modc {
#define GEN_PASS_DEF_GENERATEDECODE
#include "modc/Conversion/ModToModk/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Builds `modk.entry @decode` beside each mod.model that can decode: dense
/// models, and MoD models with a causal router (top-k needs the future).
struct GenerateDecodePass
    : public modc::impl::GenerateDecodeBase<GenerateDecodePass> {
  void runOnOperation() override {
    SmallVector<mod::ModelOp> models(getOperation().getOps<mod::ModelOp>());
    for (mod::ModelOp model : models) {
      bool hasRoute = false;
      model.walk([&](Operation *op) {
        hasRoute |= isa<mod::RouteOp, mod::TopKOp>(op);
      });
      if (hasRoute && *model.getCausalRouter() == CausalRouter::none)
        continue;
      lowering::ModelLowering modelLowering(model, modk::EntryKind::decode);
      if (failed(modelLowering.run()))
        return signalPassFailure();
    }
  }
};
} // namespace
