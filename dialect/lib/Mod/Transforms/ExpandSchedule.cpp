//===- ExpandSchedule.cpp - Decide routed blocks and capacities -*- C++ -*-===//

#include "modc/Dialect/Mod/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

namespace modc {
#define GEN_PASS_DEF_EXPANDSCHEDULE
#include "modc/Dialect/Mod/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Annotates routed blocks with their static capacity, gate and router.
struct ExpandSchedulePass
    : public modc::impl::ExpandScheduleBase<ExpandSchedulePass> {
  void runOnOperation() override {
    mod::ModelOp model = getOperation();
    if (!model.isMixtureOfDepths())
      return;
    int64_t seqLen = model.getSeqLen();
    int64_t k;
    if (std::optional<int64_t> tokens = model.getCapacityTokens()) {
      k = *tokens;
    } else {
      // ceil(c * S) in double; a product like 0.125 * 256 is exact.
      double c = model.getCapacityAttr().getValueAsDouble();
      k = (int64_t)std::ceil(c * (double)seqLen);
    }
    k = std::clamp<int64_t>(k, 1, seqLen);

    Schedule schedule = model.getScheduleOrDefault();
    auto isRouted = [&](int64_t layer) {
      switch (schedule) {
      case Schedule::all:
        return true;
      case Schedule::none:
        return false;
      case Schedule::layers:
        return llvm::is_contained(*model.getRoutedLayers(), layer);
      case Schedule::every_other:
        break;
      }
      return layer % 2 == 1;
    };

    Builder b(model.getContext());
    model.walk([&](mod::BlockOp block) {
      if (!isRouted(block.getLayer()))
        return;
      block.setCapacityAttr(b.getI64IntegerAttr(k));
      block.setGateAttr(model.getGateAttr());
      block.setCausalRouterAttr(model.getCausalRouterAttr());
    });
  }
};
} // namespace
