//===- ModDialect.cpp - The model-level MoD dialect -------------*- C++ -*-===//
//
// Verifiers reject what docs/model-format.md forbids: inconsistent shapes,
// capacities outside [1, seq_len], head dimensions that RoPE cannot rotate,
// routed layers outside the model. Gates, causal routers, activations,
// element types and schedules are enum attributes (ModelChoices.td): the
// parser refuses an unknown case.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Mod/ModDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace modc::mod;

#include "modc/Dialect/Mod/ModDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "modc/Dialect/Mod/ModAttrs.cpp.inc"

void ModDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "modc/Dialect/Mod/ModOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "modc/Dialect/Mod/ModAttrs.cpp.inc"
      >();
}

std::string modc::mod::blockParam(int64_t layer, llvm::StringRef suffix) {
  return ("blocks." + llvm::Twine(layer) + "." + suffix).str();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static ModelOp parentModel(Operation *op) {
  return op->getParentOfType<ModelOp>();
}

/// Checks that `type` is a ranked tensor [?, dims...] with the given static
/// dims (a dim of ShapedType::kDynamic in `dims` matches anything).
static LogicalResult checkShape(Operation *op, Type type, StringRef what,
                                ArrayRef<int64_t> dims) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || tensor.getRank() != (int64_t)dims.size() + 1)
    return op->emitOpError() << what << " must be a tensor of rank "
                             << dims.size() + 1 << ", got " << type;
  for (auto [i, want] : llvm::enumerate(dims)) {
    int64_t got = tensor.getDimSize(i + 1);
    if (want != ShapedType::kDynamic && got != want)
      return op->emitOpError() << what << " dimension " << i + 1 << " must be "
                               << want << ", got " << got;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ModelOp
//===----------------------------------------------------------------------===//

LogicalResult ModelOp::verify() {
  auto positive = [&](int64_t v, StringRef key) -> LogicalResult {
    if (v <= 0)
      return emitOpError() << key << " must be positive, got " << v;
    return success();
  };
  if (failed(positive(getVocabSize(), "vocab_size")) ||
      failed(positive(getDModel(), "d_model")) ||
      failed(positive(getNHeads(), "n_heads")) ||
      failed(positive(getDFf(), "d_ff")) ||
      failed(positive(getSeqLen(), "seq_len")))
    return failure();
  if (getNLayers() < 0)
    return emitOpError() << "n_layers must be >= 0, got " << getNLayers();
  if (getDModel() % getNHeads() != 0)
    return emitOpError() << "d_model (" << getDModel()
                         << ") must be divisible by n_heads (" << getNHeads()
                         << ")";
  if (getHeadDim() % 2 != 0)
    return emitOpError() << "head dimension d_model / n_heads = "
                         << getHeadDim() << " must be even for RoPE";
  if (std::optional<uint64_t> kv = getNKvHeads())
    if (int64_t(*kv) < 1 || int64_t(getNHeads()) % int64_t(*kv) != 0)
      return emitOpError() << "n_kv_heads (" << int64_t(*kv)
                           << ") must be positive and divide n_heads ("
                           << getNHeads() << ")";
  if (!(getNormEps().convertToDouble() > 0))
    return emitOpError() << "norm_eps must be positive";
  if (!(getRopeTheta().convertToDouble() > 0))
    return emitOpError() << "rope_theta must be positive";
  if (FloatAttr c = getCapacityAttr()) {
    double value = c.getValueAsDouble();
    if (!(value > 0 && value <= 1))
      return emitOpError() << "capacity must be in (0, 1], got " << value;
  }
  if (std::optional<int64_t> k = getCapacityTokens())
    if (*k < 1 || *k > getSeqLen())
      return emitOpError() << "capacity_tokens must be in [1, seq_len = "
                           << getSeqLen() << "], got " << *k;
  if (getCapacity() && getCapacityTokens())
    return emitOpError("capacity and capacity_tokens are exclusive");
  bool listed = getSchedule() == modc::Schedule::layers;
  if (listed != bool(getRoutedLayers()))
    return emitOpError("routed_layers is given exactly when the schedule is "
                       "layers");
  if (std::optional<ArrayRef<int64_t>> layers = getRoutedLayers()) {
    for (auto [i, layer] : llvm::enumerate(*layers)) {
      if (layer < 0 || layer >= getNLayers())
        return emitOpError() << "routed layer " << layer
                             << " is out of range [0, " << getNLayers() << ")";
      if (i > 0 && layer <= (*layers)[i - 1])
        return emitOpError("routed_layers must ascend, each layer once");
    }
  }
  // A gate makes the model Mixture-of-Depths; the passes then read every
  // routing attribute (docs/model-format.md section 1), so each must be
  // there. Without a gate they would be ignored silently.
  if (isMixtureOfDepths()) {
    if (!getCapacity() && !getCapacityTokens())
      return emitOpError("a Mixture-of-Depths model (it has a gate) needs "
                         "capacity or capacity_tokens");
    if (!getCausalRouter())
      return emitOpError("a Mixture-of-Depths model (it has a gate) needs "
                         "causal_router");
    if (!getAuxLossWeight())
      return emitOpError("a Mixture-of-Depths model (it has a gate) needs "
                         "aux_loss_weight");
    if (!getPredictorHidden())
      return emitOpError("a Mixture-of-Depths model (it has a gate) needs "
                         "predictor_hidden");
    double w = getAuxLossWeight()->convertToDouble();
    if (!(w >= 0 && std::isfinite(w)))
      return emitOpError() << "aux_loss_weight must be finite and >= 0, got "
                           << w;
    if (*getPredictorHidden() < 1)
      return emitOpError() << "predictor_hidden must be positive, got "
                           << *getPredictorHidden();
  } else if (getCapacityAttr() || getCapacityTokens() || getSchedule() ||
             getCausalRouter() || getAuxLossWeight() || getPredictorHidden()) {
    return emitOpError("capacity, capacity_tokens, schedule, causal_router, "
                       "aux_loss_weight and predictor_hidden describe routing: "
                       "they need a gate (a Mixture-of-Depths model)");
  }
  // Mixture-of-Experts MLPs (docs/model-format.md section 7): every moe_*
  // attribute or none.
  bool anyMoe = getMoeExperts() || getMoeNoopExperts() || getMoeDExpert() ||
                getMoeCapacityFactor() || getMoeBalanceLossWeight() ||
                getMoeSchedule() || getMoeLayers();
  if (!anyMoe)
    return success();
  if (!getMoeExperts() || !getMoeNoopExperts() || !getMoeDExpert() ||
      !getMoeCapacityFactor() || !getMoeBalanceLossWeight() ||
      !getMoeSchedule())
    return emitOpError("a Mixture-of-Experts model needs moe_experts, "
                       "moe_noop_experts, moe_d_expert, moe_capacity_factor, "
                       "moe_balance_loss_weight and moe_schedule");
  // The I64Attr getters return uint64_t: compare as signed.
  int64_t experts = int64_t(*getMoeExperts()),
          noop = int64_t(*getMoeNoopExperts()),
          dExpert = int64_t(*getMoeDExpert());
  if (experts < 1)
    return emitOpError() << "moe_experts must be >= 1, got " << experts;
  if (noop < 0)
    return emitOpError() << "moe_noop_experts must be >= 0, got " << noop;
  if (dExpert < 1)
    return emitOpError() << "moe_d_expert must be positive, got " << dExpert;
  double factor = getMoeCapacityFactor()->convertToDouble();
  if (!(factor > 0 && std::isfinite(factor)))
    return emitOpError() << "moe_capacity_factor must be finite and > 0, got "
                         << factor;
  double balance = getMoeBalanceLossWeight()->convertToDouble();
  if (!(balance >= 0 && std::isfinite(balance)))
    return emitOpError()
           << "moe_balance_loss_weight must be finite and >= 0, got "
           << balance;
  bool moeListed = *getMoeSchedule() == modc::Schedule::layers;
  if (moeListed != bool(getMoeLayers()))
    return emitOpError("moe_layers is given exactly when moe_schedule is "
                       "layers");
  if (std::optional<ArrayRef<int64_t>> layers = getMoeLayers())
    for (auto [i, layer] : llvm::enumerate(*layers)) {
      if (layer < 0 || layer >= getNLayers())
        return emitOpError() << "MoE layer " << layer << " is out of range [0, "
                             << getNLayers() << ")";
      if (i > 0 && layer <= (*layers)[i - 1])
        return emitOpError("moe_layers must ascend, each layer once");
    }
  return success();
}

static bool scheduled(modc::Schedule schedule,
                      std::optional<ArrayRef<int64_t>> layers, int64_t layer) {
  switch (schedule) {
  case modc::Schedule::all:
    return true;
  case modc::Schedule::none:
    return false;
  case modc::Schedule::layers:
    return layers && llvm::is_contained(*layers, layer);
  case modc::Schedule::every_other:
    break;
  }
  return layer % 2 == 1;
}

bool ModelOp::isRoutedLayer(int64_t layer) {
  return isMixtureOfDepths() &&
         scheduled(getScheduleOrDefault(), getRoutedLayers(), layer);
}

int64_t ModelOp::getRoutedCapacity() {
  int64_t seqLen = getSeqLen();
  int64_t k = seqLen;
  if (std::optional<int64_t> tokens = getCapacityTokens())
    k = *tokens;
  else if (FloatAttr c = getCapacityAttr())
    k = (int64_t)std::ceil(c.getValueAsDouble() * (double)seqLen);
  return std::clamp<int64_t>(k, 1, seqLen);
}

bool ModelOp::isMoeLayer(int64_t layer) {
  return hasMixtureOfExperts() && getMoeSchedule() &&
         scheduled(*getMoeSchedule(), getMoeLayers(), layer);
}

int64_t ModelOp::getExpertCapacity(int64_t layer) {
  int64_t n = isRoutedLayer(layer) ? getRoutedCapacity() : getSeqLen();
  double experts =
      (double)(getMoeExperts().value_or(1) + getMoeNoopExperts().value_or(0));
  double factor =
      getMoeCapacityFactor() ? getMoeCapacityFactor()->convertToDouble() : 1.0;
  int64_t c = (int64_t)std::ceil(factor * (double)n / experts);
  return std::clamp<int64_t>(c, 1, n);
}

//===----------------------------------------------------------------------===//
// Component ops
//===----------------------------------------------------------------------===//

LogicalResult TokensOp::verify() {
  ModelOp model = parentModel(*this);
  if (!model)
    return success();
  return checkShape(*this, getType(), "tokens",
                    {static_cast<int64_t>(model.getSeqLen())});
}

LogicalResult EmbedOp::verify() {
  ModelOp model = parentModel(*this);
  if (!model)
    return success();
  return checkShape(*this, getType(), "result",
                    {static_cast<int64_t>(model.getSeqLen()),
                     static_cast<int64_t>(model.getDModel())});
}

LogicalResult BlockOp::verify() {
  if (failed(checkShape(*this, getInput().getType(), "input",
                        {ShapedType::kDynamic, ShapedType::kDynamic})))
    return failure();
  ModelOp model = parentModel(*this);
  if (!model)
    return success();
  if (getLayer() < 0 || getLayer() >= model.getNLayers())
    return emitOpError() << "layer " << getLayer() << " is out of range [0, "
                         << model.getNLayers() << ")";
  if (std::optional<int64_t> k = getCapacity()) {
    if (*k < 1 || *k > model.getSeqLen())
      return emitOpError() << "capacity " << *k << " must be in [1, seq_len = "
                           << model.getSeqLen() << "]";
    if (!getGate() || !getCausalRouter())
      return emitOpError("a routed block needs a gate and a causal_router");
  }
  // docs/model-format.md section 7: an MoE layer's block carries C, and C
  // is the model's clamp(ceil(capacity_factor * n / (E + N)), 1, n).
  bool moe = model.isMoeLayer(getLayer());
  std::optional<int64_t> c = getMoeCapacity();
  if (moe != c.has_value())
    return emitOpError() << "layer " << getLayer()
                         << (moe ? " is an MoE layer of the model and needs "
                                   "moe_capacity"
                                 : " is not an MoE layer of the model: no "
                                   "moe_capacity");
  if (c) {
    // n: the block's own k once mod-expand-schedule has set it.
    int64_t expected = model.getExpertCapacity(getLayer());
    if (std::optional<int64_t> k = getCapacity()) {
      double experts =
          (double)(*model.getMoeExperts() + *model.getMoeNoopExperts());
      double factor = model.getMoeCapacityFactor()->convertToDouble();
      expected = std::clamp<int64_t>(
          (int64_t)std::ceil(factor * (double)*k / experts), 1, *k);
    }
    if (*c != expected)
      return emitOpError() << "moe_capacity " << *c
                           << " is not the model's expert capacity "
                           << expected;
  }
  return success();
}

LogicalResult RouterOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  if (in.getRank() != 3)
    return emitOpError("input must be [B, S, D]");
  return checkShape(*this, getType(), "scores", {in.getDimSize(1)});
}

LogicalResult PredictorOp::verify() {
  if (getHidden() <= 0)
    return emitOpError("hidden must be positive");
  auto in = cast<RankedTensorType>(getInput().getType());
  if (in.getRank() != 3)
    return emitOpError("input must be [B, S, D]");
  return checkShape(*this, getType(), "scores", {in.getDimSize(1)});
}

static LogicalResult verifySelection(Operation *op, int64_t k,
                                     modc::CausalRouter causalRouter,
                                     Value scores, Value causalScores,
                                     Type indicesType) {
  auto s = dyn_cast<RankedTensorType>(scores.getType());
  if (!s || s.getRank() != 2)
    return op->emitOpError("scores must be [B, S]");
  int64_t seqLen = s.getDimSize(1);
  if (k < 1 || k > seqLen)
    return op->emitOpError() << "k = " << k << " must be in [1, " << seqLen
                             << "]";
  if ((causalRouter == modc::CausalRouter::predictor) !=
      (causalScores != nullptr))
    return op->emitOpError(
        "causal scores are given exactly when causal_router is predictor");
  if (causalScores && causalScores.getType() != scores.getType())
    return op->emitOpError("causal scores must have the type of the scores");
  return checkShape(op, indicesType, "indices", {k});
}

LogicalResult TopKOp::verify() {
  return verifySelection(*this, getK(), getCausalRouter(), getScores(),
                         getCausalScores(), getType());
}

LogicalResult GatherOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto idx = cast<RankedTensorType>(getIndices().getType());
  if (in.getRank() != 3 || idx.getRank() != 2)
    return emitOpError("expects input [B, S, D] and indices [B, K]");
  return checkShape(*this, getType(), "result",
                    {idx.getDimSize(1), in.getDimSize(2)});
}

LogicalResult AttentionOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  if (in.getRank() != 3)
    return emitOpError("input must be [B, rows, D]");
  if (getPositions() &&
      failed(checkShape(*this, getPositions().getType(), "positions",
                        {in.getDimSize(1)})))
    return failure();
  return success();
}

LogicalResult MoeOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  if (in.getRank() != 3)
    return emitOpError("input must be [B, rows, D]");
  if (getType() != in || (getResidual() && getResidual().getType() != in))
    return emitOpError("result and residual must have the input's type");
  int64_t rows = in.getDimSize(1);
  if (getCapacity() < 1 ||
      (!ShapedType::isDynamic(rows) && getCapacity() > rows))
    return emitOpError() << "capacity " << getCapacity() << " must be in [1, "
                         << rows << "]";
  ModelOp model = parentModel(*this);
  if (model && !model.isMoeLayer(getLayer()))
    return emitOpError() << "layer " << getLayer()
                         << " is not an MoE layer of the model";
  return success();
}

LogicalResult GatedResidualOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto idx = cast<RankedTensorType>(getIndices().getType());
  if (in.getRank() != 3 || idx.getRank() != 2)
    return emitOpError("expects input [B, S, D] and indices [B, K]");
  if (failed(checkShape(*this, getUpdate().getType(), "update",
                        {idx.getDimSize(1), in.getDimSize(2)})) ||
      failed(checkShape(*this, getScores().getType(), "scores",
                        {in.getDimSize(1)})))
    return failure();
  if (getType() != getInput().getType())
    return emitOpError("result must have the type of the input");
  return success();
}

LogicalResult LMHeadOp::verify() {
  ModelOp model = parentModel(*this);
  if (!model)
    return success();
  return checkShape(*this, getType(), "logits",
                    {static_cast<int64_t>(model.getSeqLen()),
                     static_cast<int64_t>(model.getVocabSize())});
}

LogicalResult RouteOp::verify() {
  if (failed(verifySelection(*this, getK(), getCausalRouter(), getScores(),
                             getCausalScores(), getIndices().getType())))
    return failure();
  auto in = cast<RankedTensorType>(getInput().getType());
  if (getGathered().getType() != getNormed().getType())
    return emitOpError("gathered and normed rows must have one type");
  return checkShape(*this, getGathered().getType(), "gathered",
                    {static_cast<int64_t>(getK()), in.getDimSize(2)});
}

#define GET_OP_CLASSES
#include "modc/Dialect/Mod/ModOps.cpp.inc"
