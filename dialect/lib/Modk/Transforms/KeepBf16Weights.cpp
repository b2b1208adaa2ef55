//===- KeepBf16Weights.cpp - Weights that live on the device as bf16 -----===//
//
// A CUDA product fed by TMA (or a CUTLASS kernel) reads its weight as bf16
// from global memory. Which weights need that copy follows from the
// products' configurations, so it is decided here, on the IR, and
// recorded on the modk.optimizer: the update that writes a flagged
// parameter writes its bf16 copy too (docs/cuda.md, "bf16 weights").
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "llvm/ADT/StringSet.h"

namespace modc {
#define GEN_PASS_DEF_KEEPBF16WEIGHTS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The parameter name behind `weight` (a modk.param, perhaps viewed), or
/// an empty string.
StringRef paramName(Value weight) {
  if (auto param = modk::viewedBuffer(weight).getDefiningOp<modk::ParamOp>())
    return param.getName();
  return {};
}

struct KeepBf16WeightsPass
    : public modc::impl::KeepBf16WeightsBase<KeepBf16WeightsPass> {
  using KeepBf16WeightsBase::KeepBf16WeightsBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto optimizers = llvm::to_vector(module.getOps<modk::OptimizerOp>());
    if (optimizers.empty())
      return;
    if (!enabled)
      return;
    llvm::StringSet<> streamed;
    for (modk::EntryOp entry : module.getOps<modk::EntryOp>()) {
      bool decode = entry.getKind() == modk::EntryKind::decode;
      entry.walk([&](Operation *op) {
        if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
          // Its device_rows_config too: a grouped launch of it alone
          // (docs/cuda.md, "CUTLASS").
          if (gemm.productsBf16() && gemm.readsWeightCopy(decode))
            for (Value w : gemm.getWeights())
              streamed.insert(paramName(w));
        } else if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op)) {
          modk::GemmConfigAttr config = dgrad.getConfigAttr();
          if (entry.isBf16() && config && config.readsWeightCopy(decode))
            streamed.insert(paramName(dgrad.getWeight()));
        }
      });
    }
    streamed.erase("");
    for (modk::OptimizerOp optimizer : optimizers) {
      SmallVector<bool> copies;
      for (auto p : optimizer.getParams().getAsRange<modk::ParamAttr>())
        copies.push_back(streamed.contains(p.getName()));
      if (llvm::is_contained(copies, true))
        optimizer.setBf16Copies(copies);
    }
  }
};
} // namespace
