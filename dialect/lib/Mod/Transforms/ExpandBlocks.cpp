//===- ExpandBlocks.cpp - Replace mod.block by its components ---*- C++ -*-===//

#include "modc/Dialect/Mod/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"

namespace modc {
#define GEN_PASS_DEF_EXPANDBLOCKS
#include "modc/Dialect/Mod/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

/// Builds the components of `block` (docs/model-format.md section 3) before
/// it and returns the value that replaces its result.
static Value expandBlock(OpBuilder &b, mod::ModelOp model,
                         mod::BlockOp block) {
  Location loc = block.getLoc();
  int64_t layer = block.getLayer();
  FloatAttr eps = model.getNormEpsAttr();
  auto norm = [&](Value v, StringRef which) -> Value {
    return mod::RMSNormOp::create(
        b, loc, v, b.getStringAttr(mod::blockParam(layer, which)), eps);
  };
  Value x = block.getInput();
  // The MLP sublayer: an MoE MLP (docs/model-format.md section 7) where the
  // block carries its expert capacity.
  auto mlp = [&](Value n) -> Value {
    if (std::optional<int64_t> c = block.getMoeCapacity())
      return mod::MoeOp::create(b, loc, n.getType(), n, /*residual=*/nullptr,
                                layer, *c);
    return mod::MlpOp::create(b, loc, n, layer);
  };

  if (!block.isRouted()) {
    Value a = mod::AttentionOp::create(b, loc, norm(x, "attn_norm.weight"),
                                       /*positions=*/nullptr, layer);
    Value h = mod::AddOp::create(b, loc, x, a);
    Value m = mlp(norm(h, "mlp_norm.weight"));
    return mod::AddOp::create(b, loc, h, m);
  }

  auto stream = cast<RankedTensorType>(x.getType());
  int64_t k = *block.getCapacity();
  CausalRouter causal = *block.getCausalRouter();
  auto scoresType = RankedTensorType::get(
      {ShapedType::kDynamic, stream.getDimSize(1)}, b.getF32Type());
  auto indicesType =
      RankedTensorType::get({ShapedType::kDynamic, k}, b.getI32Type());
  auto rowsType = RankedTensorType::get(
      {ShapedType::kDynamic, k, stream.getDimSize(2)}, b.getF32Type());

  Value r = mod::RouterOp::create(b, loc, scoresType, x, layer);
  Value p;
  if (causal == CausalRouter::predictor)
    p = mod::PredictorOp::create(b, loc, scoresType, x, layer,
                                 *model.getPredictorHidden());
  Value idx = mod::TopKOp::create(b, loc, indicesType, r, p, k, causal);
  Value xs = mod::GatherOp::create(b, loc, rowsType, x, idx);
  Value a =
      mod::AttentionOp::create(b, loc, norm(xs, "attn_norm.weight"), idx, layer);
  Value h = mod::AddOp::create(b, loc, xs, a);
  Value m = mlp(norm(h, "mlp_norm.weight"));
  Value f = mod::AddOp::create(b, loc, a, m);
  return mod::GatedResidualOp::create(b, loc, stream, x, f, r, idx,
                                      *block.getGate());
}

namespace {
struct ExpandBlocksPass
    : public modc::impl::ExpandBlocksBase<ExpandBlocksPass> {
  void runOnOperation() override {
    mod::ModelOp model = getOperation();
    SmallVector<mod::BlockOp> blocks;
    model.walk([&](mod::BlockOp block) { blocks.push_back(block); });
    for (mod::BlockOp block : blocks) {
      if (block.isRouted() && model.isMixtureOfDepths() &&
          *block.getCausalRouter() == CausalRouter::predictor &&
          !model.getPredictorHidden()) {
        block.emitOpError("predictor router needs predictor_hidden");
        return signalPassFailure();
      }
      OpBuilder b(block);
      Value result = expandBlock(b, model, block);
      block.getResult().replaceAllUsesWith(result);
      block.erase();
    }
  }
};
} // namespace
