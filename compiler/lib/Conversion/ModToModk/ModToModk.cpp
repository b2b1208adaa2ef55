//===- ModToModk.cpp - Lower mod.model to the forward entry -----*- C++ -*-===//

#include "ModelLowering.h"
#include "modc/Conversion/ModToModk/Passes.h"

namespace modc {
#define GEN_PASS_DEF_CONVERTMODTOMODK
#include "modc/Conversion/ModToModk/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
struct ConvertModToModkPass
    : public modc::impl::ConvertModToModkBase<ConvertModToModkPass> {
  void runOnOperation() override {
    SmallVector<mod::ModelOp> models(getOperation().getOps<mod::ModelOp>());
    for (mod::ModelOp model : models) {
      lowering::ModelLowering modelLowering(model, modk::EntryKind::forward);
      FailureOr<modk::EntryOp> entry = modelLowering.run();
      if (failed(entry))
        return signalPassFailure();
      model.erase();
    }
  }
};
} // namespace
