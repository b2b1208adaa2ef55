//===- GenerateGrad.cpp - Derive the training entry from the model -*- C++ -*-===//

#include "ModelLowering.h"
#include "modc/Conversion/ModToModk/Passes.h"

namespace modc {
#define GEN_PASS_DEF_GENERATEGRAD
#include "modc/Conversion/ModToModk/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Builds `modk.entry @grad` beside each mod.model; the model stays for
/// convert-mod-to-modk, which builds the forward entry from the same ops.
struct GenerateGradPass
    : public modc::impl::GenerateGradBase<GenerateGradPass> {
  void runOnOperation() override {
    SmallVector<mod::ModelOp> models(getOperation().getOps<mod::ModelOp>());
    for (mod::ModelOp model : models) {
      lowering::ModelLowering modelLowering(model, modk::EntryKind::grad);
      if (failed(modelLowering.run()))
        return signalPassFailure();
    }
  }
};
} // namespace
