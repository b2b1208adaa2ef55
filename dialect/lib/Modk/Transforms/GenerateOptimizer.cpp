//===- GenerateOptimizer.cpp - The AdamW step as a modk.optimizer -*- C++
//-*-===//
//
// The optimizer's update of one parameter element is math like any row
// kernel's, so it is IR too: the emitters generate modc_adamw's element
// loop for each target from the modk.optimizer region this pass writes,
// instead of pasting a hand-written update per target, and the gradient
// norm's sum from its `norm` region. The arithmetic and its order are
// those of docs/model-format.md, "The AdamW step".
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/F32Math.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

namespace modc {
#define GEN_PASS_DEF_GENERATEOPTIMIZER
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The decoupled AdamW update (torch.optim.AdamW) of one element.
void buildAdamWBody(OpBuilder &b, Location loc, Block &block) {
  F32Math f{b, loc};
  auto arg = [&](StringRef name) {
    auto names = modk::OptimizerOp::getArgumentNames();
    return block.getArgument(unsigned(llvm::find(names, name) - names.begin()));
  };
  // One op at a time, so that the IR's order does not depend on the order
  // in which C++ evaluates arguments.
  Value beta1 = arg("beta1"), beta2 = arg("beta2");
  Value g = f.mul(arg("g"), arg("grad_scale"));
  Value mKeep = f.mul(beta1, arg("m"));
  Value mNew = f.mul(f.sub(f.c(1.0), beta1), g);
  Value m = f.add(mKeep, mNew);
  Value vKeep = f.mul(beta2, arg("v"));
  Value vNew = f.mul(f.mul(f.sub(f.c(1.0), beta2), g), g);
  Value v = f.add(vKeep, vNew);
  Value denominator = f.add(f.mul(f.sqrt(v), arg("inv_sqrt_bc2")), arg("eps"));
  Value decayed = f.mul(arg("p"), arg("decay"));
  Value update = f.div(f.mul(arg("step_size"), m), denominator);
  Value p = f.sub(decayed, update);
  modk::YieldOp::create(b, loc, ValueRange{p, m, v});
}

/// An element's term of the squared gradient norm: g * g, in f64, so that
/// the sum of a large model's squares loses nothing to f32 rounding.
void buildNormBody(OpBuilder &b, Location loc, Block &block) {
  Value g = arith::ExtFOp::create(b, loc, b.getF64Type(), block.getArgument(0));
  Value square = arith::MulFOp::create(b, loc, g, g);
  modk::YieldOp::create(b, loc, ValueRange{square});
}

struct GenerateOptimizerPass
    : public modc::impl::GenerateOptimizerBase<GenerateOptimizerPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!module.getOps<modk::OptimizerOp>().empty())
      return;
    for (modk::EntryOp entry : module.getOps<modk::EntryOp>()) {
      if (entry.getKind() != modk::EntryKind::grad)
        continue;
      OpBuilder b(entry->getContext());
      b.setInsertionPointAfter(entry);
      auto optimizer = modk::OptimizerOp::create(b, entry.getLoc(), "adamw",
                                                 entry.getParams(),
                                                 /*bf16_copies=*/nullptr);
      SmallVector<Type> types(modk::OptimizerOp::getArgumentNames().size(),
                              b.getF32Type());
      SmallVector<Location> locs(types.size(), entry.getLoc());
      Block *block = b.createBlock(&optimizer.getBody(), {}, types, locs);
      b.setInsertionPointToStart(block);
      buildAdamWBody(b, entry.getLoc(), *block);
      Block *norm = b.createBlock(&optimizer.getNorm(), {}, {b.getF32Type()},
                                  {entry.getLoc()});
      b.setInsertionPointToStart(norm);
      buildNormBody(b, entry.getLoc(), *norm);
      return;
    }
  }
};
} // namespace
