//===- ModelLowering.cpp - The forward half of the lowering -----*- C++ -*-===//

#include "ModelLowering.h"
#include "modc/Conversion/ModToModk/Passes.h"
#include "modc/Dialect/Modk/Transforms/RowsBuilder.h"

#include <cmath>

using namespace mlir;
using namespace modc;
using namespace modc::lowering;

/// A GEMM without epilogue attributes; callers set the ones they need.
modk::GemmOp modc::lowering::createGemm(OpBuilder &b, Location loc, Value input,
                               ValueRange weights, Value segments,
                               ValueRange extra, Value output,
                               modk::Epilogue epilogue) {
  return modk::GemmOp::create(b, loc, input, weights, segments, extra, output,
                              epilogue, /*precision=*/nullptr,
                              /*causal_only=*/false);
}

Value ModelLowering::param(StringRef name, ArrayRef<int64_t> shape,
                           modk::ParamInit init, double std) {
  if (Value existing = paramValues.lookup(name))
    return existing;
  bool normal = init == modk::ParamInit::normal;
  // AdamW decays matrices only, not norm weights and biases.
  params.push_back(modk::ParamAttr::get(
      b.getContext(), name, shape, init,
      normal ? b.getF64FloatAttr(std) : FloatAttr(), /*decay=*/normal));
  OpBuilder::InsertionGuard guard(b);
  if (lastParam)
    b.setInsertionPointAfter(lastParam);
  else
    b.setInsertionPointToStart(body);
  auto op = modk::ParamOp::create(
      b, model.getLoc(), MemRefType::get(shape, b.getF32Type()), name);
  lastParam = op;
  paramValues[name] = op;
  return op;
}

Value ModelLowering::alloc(ArrayRef<int64_t> perSequence, Type element) {
  SmallVector<int64_t> shape = {ShapedType::kDynamic};
  shape.append(perSequence.begin(), perSequence.end());
  return modk::AllocOp::create(b, model.getLoc(),
                               MemRefType::get(shape, element), nullptr);
}

Value ModelLowering::output(StringRef name, ArrayRef<int64_t> perSequence,
                            Type element) {
  SmallVector<int64_t> shape = {ShapedType::kDynamic};
  shape.append(perSequence.begin(), perSequence.end());
  return modk::OutputOp::create(b, model.getLoc(),
                                MemRefType::get(shape, element), name);
}

RowSet ModelLowering::identityRows() {
  if (identity)
    return *identity;
  RowSet rows{alloc({stepRows()}, b.getI32Type()), alloc({1}, b.getI64Type())};
  if (decoding())
    modk::DecodeRowsOp::create(b, model.getLoc(), stepPositions, active,
                               rows.positions, rows.segments);
  else
    modk::IdentityRowsOp::create(b, model.getLoc(), rows.positions,
                                 rows.segments);
  identity = rows;
  return rows;
}

void ModelLowering::lowerAttention(mod::AttentionOp op) {
  Location loc = op.getLoc();
  int64_t layer = op.getLayer(), d = model.getDModel();
  Value n = buffers[op.getInput()];
  RowSet rows = rowSets[op.getInput()];
  int64_t r = rowsOf(op.getInput());
  Type f32 = b.getF32Type();
  // Grouped-query attention (docs/model-format.md section 3): K and V have
  // n_kv_heads heads of the query heads' width.
  int64_t kvHeads = model.getKvHeads(), kvd = kvHeads * model.getHeadDim();
  Value q = alloc({r, d}, f32), k = alloc({r, kvd}, f32),
        v = alloc({r, kvd}, f32);
  auto rope = [&](Value w, Value out, int64_t heads) {
    auto gemm = createGemm(b, loc, n, ValueRange{w}, rows.segments,
                                     ValueRange{rows.positions}, out, modk::Epilogue::rope);
    gemm.setNHeadsAttr(b.getI64IntegerAttr(heads));
    gemm.setRopeThetaAttr(model.getRopeThetaAttr());
  };
  rope(blockParam(layer, "attn.wq.weight", {d, d}), q, model.getNHeads());
  rope(blockParam(layer, "attn.wk.weight", {kvd, d}), k, kvHeads);
  createGemm(b, loc, n,
             ValueRange{blockParam(layer, "attn.wv.weight", {kvd, d})},
             rows.segments, ValueRange{}, v, modk::Epilogue::none);
  Value o = alloc({r, d}, f32);
  if (decoding())
    modk::DecodeAttentionOp::create(b, loc, q, k, v, rows.positions,
                                    rows.segments, active, o, layer,
                                    model.getNHeads());
  else
    modk::AttentionOp::create(b, loc, q, k, v, rows.positions, rows.segments, o,
                              model.getNHeads(), /*mainloop=*/nullptr);
  // The causal prefill: a package that decodes fills the KV cache from the
  // forward pass's keys and values.
  if (kind == EntryKind::forward && fillsKVCache())
    modk::CacheAppendOp::create(b, loc, k, v, rows.positions, rows.segments,
                                layer);
  Value wo = blockParam(layer, "attn.wo.weight", {d, d});
  // The residual add that follows is a modk.add of its own: whether it
  // becomes this GEMM's epilogue is modk-fuse-epilogues' decision.
  Value a = alloc({r, d}, f32);
  createGemm(b, loc, o, ValueRange{wo}, rows.segments, ValueRange{},
                       a, modk::Epilogue::none);
  buffers[op.getResult()] = a;
  rowSets[op.getResult()] = rows;
  saved[op] = {{"q", q}, {"k", k}, {"v", v}, {"o", o}};
}

/// Emits the MLP's up projection and its activation (a modk.activation of
/// its own, which modk-fuse-epilogues may fold into the GEMM) and returns
/// the activated rows. `prefix` names the weights (`mlp.`, or an expert's
/// `moe.experts.{e}.`), of hidden width `ff`. Training keeps the
/// pre-activations (saved under "gate", "up" and "hidden", each followed by
/// `prefix`) for the backward pass.
Value ModelLowering::lowerMlpUp(Operation *op, Value input, RowSet rows,
                                int64_t layer, StringRef prefix, int64_t ff) {
  Location loc = op->getLoc();
  int64_t d = model.getDModel();
  int64_t r = cast<MemRefType>(input.getType()).getDimSize(1);
  bool swiglu = model.getMlp() == Activation::swiglu;
  Value gate =
      swiglu ? blockParam(layer, (prefix + "w_gate.weight").str(), {ff, d})
             : Value();
  Value up = blockParam(layer, (prefix + "w_up.weight").str(), {ff, d});
  Type f32 = b.getF32Type();
  Value gatePre = swiglu ? alloc({r, ff}, f32) : Value();
  Value upPre = alloc({r, ff}, f32);
  Value hidden = alloc({r, ff}, f32);
  if (swiglu)
    createGemm(b, loc, input, ValueRange{gate}, rows.segments, ValueRange{},
               gatePre, modk::Epilogue::none);
  createGemm(b, loc, input, ValueRange{up}, rows.segments, ValueRange{},
             upPre, modk::Epilogue::none);
  modk::ActivationOp::create(b, loc, gatePre, upPre, rows.segments, hidden,
                             model.getMlp());
  if (training()) {
    saved[op][("gate" + prefix).str()] = gatePre;
    saved[op][("up" + prefix).str()] = upPre;
    saved[op][("hidden" + prefix).str()] = hidden;
  }
  return hidden;
}

void ModelLowering::lowerMoe(mod::MoeOp op) {
  Location loc = op.getLoc();
  int64_t layer = op.getLayer(), d = model.getDModel();
  int64_t experts = *model.getMoeExperts();
  int64_t width = experts + *model.getMoeNoopExperts();
  int64_t ff = *model.getMoeDExpert(), capacity = op.getCapacity();
  Value n = buffers[op.getInput()];
  RowSet rows = rowSets[op.getInput()];
  int64_t r = rowsOf(op.getInput());
  // An expert's rows a sequence: at most C, and no more than T has (a
  // decode step's one).
  int64_t perExpert = std::min(capacity, r);
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  // Step 1: the router's logits, in f32 in every model: they decide.
  Value logits = alloc({r, width}, f32);
  auto router = createGemm(
      b, loc, n, ValueRange{blockParam(layer, "moe.router.weight", {width, d})},
      rows.segments, ValueRange{}, logits, modk::Epilogue::none);
  router.setPrecisionAttr(modk::DTypeAttr::get(b.getContext(), DType::f32));
  // Step 2: softmax, choice and capacity, one pass over each sequence.
  Value probs = alloc({r, width}, f32), choice = alloc({r}, i32),
        gate = alloc({r}, f32);
  SmallVector<Value> positions, segments;
  for (int64_t e = 0; e < experts; ++e) {
    positions.push_back(alloc({perExpert}, i32));
    segments.push_back(alloc({1}, b.getI64Type()));
  }
  Value decisions;
  if (kind == EntryKind::forward)
    decisions = output(("moe." + Twine(layer)).str(),
                       {int64_t(model.getSeqLen())}, i32);
  // A decode step continues each sequence's running counts.
  modk::MoeSelectOp::create(
      b, loc, logits, rows.segments, decisions ? rows.positions : Value(),
      decoding() ? active : Value(), probs, choice, gate, positions, segments,
      decisions, layer, capacity, /*running_counts=*/decoding());
  // The causal prefill of a package that decodes starts those counts.
  if (kind == EntryKind::forward && fillsKVCache())
    modk::MoeCountOp::create(b, loc, choice, gate, rows.positions,
                             rows.segments, layer, experts);
  // Step 3: the experts add p[e] Expert_e(n) into T's rows: the residual's
  // (mod-fuse-residual), in place where nothing reads it later, else a copy;
  // or rows of zeros.
  Value target;
  if (Value residual = op.getResidual()) {
    target = buffers[residual];
    if (training() || !deadAfter(residual, op)) {
      target = like(target);
      modk::CopyOp::create(b, loc, buffers[residual], target);
    }
  } else {
    target = alloc({r, d}, f32);
    modk::ZeroOp::create(b, loc, target);
  }
  llvm::StringMap<Value> &keep = saved[op];
  keep["logits"] = logits;
  keep["probs"] = probs;
  keep["choice"] = choice;
  keep["gate"] = gate;
  // The experts in phases (the gathers, the up products, the down products
  // with their gated adds), so that each phase's products of the same shape
  // are neighbours that modk-group-gemms can run as one launch.
  auto prefixOf = [](int64_t e) {
    return ("moe.experts." + Twine(e) + ".").str();
  };
  SmallVector<Value> gathered, hidden;
  for (int64_t e = 0; e < experts; ++e) {
    gathered.push_back(alloc({perExpert, d}, f32));
    modk::createGatherRows(b, loc, n, segments[e], positions[e], gathered[e]);
  }
  for (int64_t e = 0; e < experts; ++e)
    hidden.push_back(lowerMlpUp(op, gathered[e], {positions[e], segments[e]},
                                layer, prefixOf(e), ff));
  for (int64_t e = 0; e < experts; ++e) {
    std::string prefix = prefixOf(e);
    Value out = alloc({perExpert, d}, f32);
    createGemm(b, loc, hidden[e],
               ValueRange{blockParam(layer, prefix + "w_down.weight", {d, ff})},
               segments[e], ValueRange{}, out, modk::Epilogue::none);
    modk::createGatedScatter(b, loc, Value(), out, gate, target, segments[e],
                             positions[e], Gate::linear);
    keep["positions" + prefix] = positions[e];
    keep["segments" + prefix] = segments[e];
    keep["gathered" + prefix] = gathered[e];
    keep["out" + prefix] = out;
  }
  buffers[op.getResult()] = target;
  rowSets[op.getResult()] = rows;
}

Value ModelLowering::allTokenRows() {
  // A decode step's dense row set (modk.decode_rows) already gives every
  // sequence its row, active or not, in order: the router scores those.
  return identityRows().segments;
}

Value ModelLowering::lowerRouter(Location loc, Value stream, int64_t layer) {
  Value scores = alloc({stepRows()}, b.getF32Type());
  Value weight =
      blockParam(layer, "router.weight", {1, int64_t(model.getDModel())});
  modk::createRouterRows(b, loc, buffers[stream], weight, allTokenRows(),
                         scores);
  return scores;
}

RowSet ModelLowering::lowerSelection(Operation *op, Value scores,
                                     Value causalScores, int64_t layer,
                                     int64_t k, CausalRouter causalRouter) {
  Location loc = op->getLoc();
  // Rows a sequence has here: seq_len, or one in a decode step.
  int64_t seqLen = stepRows();
  // Causal mode routes a varying number of tokens: room for all of them.
  // Training selects by top-k only.
  bool causal = causalRouter != CausalRouter::none && !training();
  if (!causal)
    causalRouter = CausalRouter::none;
  int64_t maxRows = causal ? seqLen : k;
  RowSet rows{alloc({maxRows}, b.getI32Type()), alloc({1}, b.getI64Type())};
  Value mask = readsTargets()
                   ? alloc({seqLen}, b.getI32Type())
                   : output(("routed." + Twine(layer)).str(), {seqLen},
                            b.getI32Type());
  Value causalBuffer = causalScores && causal ? buffers[causalScores] : Value();
  if (decoding())
    modk::DecodeSelectOp::create(b, loc, buffers[scores], stepPositions, active,
                                 rows.positions, rows.segments, mask,
                                 causalBuffer, layer, causalRouter);
  else
    modk::RouteSelectOp::create(
        b, loc, buffers[scores], causalBuffer, rows.positions, rows.segments,
        mask, b.getI64IntegerAttr(layer), b.getI64IntegerAttr(k),
        modk::CausalRouterAttr::get(b.getContext(), causalRouter),
        IntegerAttr());
  saved[op] = {{"mask", mask}};
  return rows;
}

std::pair<Value, Value> ModelLowering::lowerGather(Location loc, Value stream,
                                                   RowSet rows,
                                                   Value normWeight,
                                                   float eps) {
  // As many rows a sequence as the selection has room for.
  int64_t maxRows = cast<MemRefType>(rows.positions.getType()).getDimSize(1);
  Value gathered =
      alloc({maxRows, int64_t(model.getDModel())}, b.getF32Type());
  Value normed = normWeight
                     ? alloc({maxRows, int64_t(model.getDModel())}, b.getF32Type())
                     : Value();
  // A decode step's stream holds one token a sequence: no positions.
  modk::createGatherRows(b, loc, buffers[stream], rows.segments,
                         decoding() ? Value() : rows.positions, gathered,
                         normWeight, normed, eps);
  return {gathered, normed};
}

void ModelLowering::lowerRoute(mod::RouteOp op) {
  Location loc = op.getLoc();
  int64_t layer = op.getLayer(), d = model.getDModel();
  Value r = lowerRouter(loc, op.getInput(), layer);
  buffers[op.getScores()] = r;
  RowSet rows = lowerSelection(op, op.getScores(), op.getCausalScores(), layer,
                               op.getK(), op.getCausalRouter());
  Value normWeight = param(op.getNormParam(), {d}, modk::ParamInit::ones);
  auto [gathered, normed] = lowerGather(loc, op.getInput(), rows, normWeight,
                                        float(op.getEps().convertToDouble()));
  buffers[op.getGathered()] = gathered;
  buffers[op.getIndices()] = rows.positions;
  buffers[op.getNormed()] = normed;
  rowSets[op.getIndices()] = rows;
  rowSets[op.getGathered()] = rows;
  rowSets[op.getNormed()] = rows;
}

LogicalResult ModelLowering::lowerTopK(mod::TopKOp op) {
  auto router = op.getScores().getDefiningOp<mod::RouterOp>();
  if (!router)
    return op->emitOpError("selects from scores that are not a mod.router's");
  RowSet rows =
      lowerSelection(op, op.getScores(), op.getCausalScores(),
                     router.getLayer(), op.getK(), op.getCausalRouter());
  buffers[op] = rows.positions;
  rowSets[op] = rows;
  return success();
}

void ModelLowering::lowerGatedScatter(Location loc, Value stream,
                                      Value attention, Value update,
                                      Value scores, RowSet rows, Gate gate,
                                      Value result) {
  Value buffer = buffers[stream];
  if (training()) {
    // Keep the block's input for the backward pass; scatter into a copy.
    Value copy = like(buffer);
    modk::CopyOp::create(b, loc, buffer, copy);
    buffer = copy;
  }
  // A decode step's stream holds one token a sequence: no positions.
  modk::createGatedScatter(b, loc, attention, update, buffers[scores], buffer,
                           rows.segments, decoding() ? Value() : rows.positions,
                           gate);
  buffers[result] = buffer;
  rowSets[result] = rowSets[stream];
}

void ModelLowering::lowerMlpScatter(mod::MlpScatterOp op) {
  Location loc = op.getLoc();
  int64_t layer = op.getLayer(), d = model.getDModel(), ff = model.getDFf();
  RowSet rows = rowSets[op.getNormed()];
  int64_t r = rowsOf(op.getNormed());
  Value hidden =
      lowerMlpUp(op, buffers[op.getNormed()], rows, layer, "mlp.", ff);
  Value scratch = alloc({r, d}, b.getF32Type());
  if (training())
    saved[op]["m"] = scratch;
  Value down = blockParam(layer, "mlp.w_down.weight", {d, ff});
  // The down projection into the block's rows m, then the gated residual
  // at their tokens: x = x + g(r) (a + m). Whether the scatter becomes the
  // product's epilogue is modk-fuse-row-epilogues' decision.
  createGemm(b, loc, hidden, ValueRange{down}, rows.segments, ValueRange{},
             scratch, modk::Epilogue::none);
  lowerGatedScatter(loc, op.getInput(), buffers[op.getAttn()], scratch,
                    op.getScores(), rows, op.getGate(), op.getResult());
}

LogicalResult ModelLowering::lower(Operation *op) {
  Location loc = op->getLoc();
  Type f32 = b.getF32Type();
  // Rows a sequence has here: seq_len, or the one new token of a decode step.
  int64_t seqLen = stepRows(), d = model.getDModel();
  if (auto tokens = dyn_cast<mod::TokensOp>(op)) {
    if (decoding()) {
      auto column = [&](Type element) {
        return MemRefType::get({ShapedType::kDynamic, 1}, element);
      };
      buffers[tokens] = modk::InputOp::create(b, loc, column(b.getI32Type()),
                                              "tokens");
      stepPositions = modk::InputOp::create(b, loc, column(b.getI32Type()),
                                            "positions");
      active = modk::InputOp::create(b, loc, column(b.getIntegerType(8)),
                                     "active");
      return success();
    }
    if (!readsTargets()) {
      buffers[tokens] = modk::InputOp::create(
          b, loc,
          MemRefType::get({ShapedType::kDynamic, seqLen}, b.getI32Type()),
          "tokens");
      return success();
    }
    // Training reads [B, S + 1]: inputs t[:, :S] and next-token targets.
    Value all = modk::InputOp::create(
        b, loc,
        MemRefType::get({ShapedType::kDynamic, seqLen + 1}, b.getI32Type()),
        "tokens");
    Value inputs = alloc({seqLen}, b.getI32Type());
    targets = alloc({seqLen}, b.getI32Type());
    modk::SplitTokensOp::create(b, loc, all, inputs, targets);
    buffers[tokens] = inputs;
    return success();
  }
  if (auto embed = dyn_cast<mod::EmbedOp>(op)) {
    // The row set first: modk-generalize makes the lookup a row kernel over
    // the identity rows that run before it.
    rowSets[embed] = identityRows();
    Value x = alloc({seqLen, d}, f32);
    modk::EmbedOp::create(b, loc, buffers[embed.getTokens()],
                          param("embed.weight",
                                {static_cast<int64_t>(model.getVocabSize()), d},
                                modk::ParamInit::normal, 0.02),
                          x);
    buffers[embed] = x;
    return success();
  }
  if (auto norm = dyn_cast<mod::RMSNormOp>(op)) {
    RowSet rows = rowSets[norm.getInput()];
    Value out = alloc({rowsOf(norm.getInput()), widthOf(norm)}, f32);
    modk::RMSNormOp::create(b, loc, buffers[norm.getInput()],
                            param(norm.getParam(), {d}, modk::ParamInit::ones),
                            rows.segments, out, norm.getEps());
    buffers[norm] = out;
    rowSets[norm] = rows;
    return success();
  }
  if (auto attention = dyn_cast<mod::AttentionOp>(op)) {
    lowerAttention(attention);
    return success();
  }
  if (auto add = dyn_cast<mod::AddOp>(op)) {
    RowSet rows = rowSets[add.getLhs()];
    Value out = deadAfter(add.getLhs(), add)
                    ? buffers[add.getLhs()]
                    : alloc({rowsOf(add.getLhs()), widthOf(add)}, f32);
    modk::AddOp::create(b, loc, buffers[add.getLhs()], buffers[add.getRhs()],
                        rows.segments, out);
    buffers[add] = out;
    rowSets[add] = rows;
    return success();
  }
  if (auto mlp = dyn_cast<mod::MlpOp>(op)) {
    int64_t layer = mlp.getLayer(), ff = model.getDFf(),
            r = rowsOf(mlp.getInput());
    RowSet rows = rowSets[mlp.getInput()];
    Value hidden =
        lowerMlpUp(mlp, buffers[mlp.getInput()], rows, layer, "mlp.", ff);
    Value down = blockParam(layer, "mlp.w_down.weight", {d, ff});
    Value out = alloc({r, d}, f32);
    createGemm(b, loc, hidden, ValueRange{down}, rows.segments,
                         ValueRange{}, out, modk::Epilogue::none);
    buffers[mlp] = out;
    rowSets[mlp] = rows;
    return success();
  }
  if (auto moe = dyn_cast<mod::MoeOp>(op)) {
    lowerMoe(moe);
    return success();
  }
  if (auto predictor = dyn_cast<mod::PredictorOp>(op)) {
    int64_t layer = predictor.getLayer(), h = predictor.getHidden();
    Value hidden = alloc({seqLen, h}, f32), p = alloc({seqLen}, f32);
    // Separate statements: parameter order must not depend on the order in
    // which the compiler evaluates call arguments.
    Value fc1w = blockParam(layer, "predictor.fc1.weight", {h, d});
    Value fc1b = blockParam(layer, "predictor.fc1.bias", {h});
    Value fc2w = blockParam(layer, "predictor.fc2.weight", {1, h});
    Value fc2b = blockParam(layer, "predictor.fc2.bias", {1});
    auto kernel = modk::PredictorOp::create(b, loc, buffers[predictor.getInput()],
                                            fc1w, fc1b, fc2w, fc2b, hidden, p, false);
    // Forward: only the causal decision reads it. Training: its loss does;
    // decoding: every step's decision does.
    if (kind == EntryKind::forward)
      kernel.setCausalOnly(true);
    buffers[predictor] = p;
    return success();
  }
  if (auto route = dyn_cast<mod::RouteOp>(op)) {
    lowerRoute(route);
    return success();
  }
  if (auto scatter = dyn_cast<mod::MlpScatterOp>(op)) {
    if (!training() && !deadAfter(scatter.getInput(), op))
      return op->emitOpError("the residual stream is read after the routed "
                             "block's scatter; it cannot be updated in place");
    lowerMlpScatter(scatter);
    return success();
  }
  if (auto head = dyn_cast<mod::LMHeadOp>(op)) {
    int64_t v = model.getVocabSize();
    Value w = param(head.getParam(), {v, d}, modk::ParamInit::normal, 0.02);
    Value logits = readsTargets() ? alloc({seqLen, v}, f32)
                                  : output("logits", {seqLen, v}, f32);
    createGemm(b, loc, buffers[head.getInput()], ValueRange{w},
                         rowSets[head.getInput()].segments, ValueRange{},
                         logits, modk::Epilogue::none);
    buffers[head] = logits;
    rowSets[head] = rowSets[head.getInput()];
    return success();
  }
  // The routed block's ops one by one, where mod-fuse-routing and
  // mod-fuse-residual were switched off.
  if (auto router = dyn_cast<mod::RouterOp>(op)) {
    buffers[router] = lowerRouter(loc, router.getInput(), router.getLayer());
    return success();
  }
  if (auto topk = dyn_cast<mod::TopKOp>(op))
    return lowerTopK(topk);
  if (auto gather = dyn_cast<mod::GatherOp>(op)) {
    RowSet rows = rowSets[gather.getIndices()];
    buffers[gather] = lowerGather(loc, gather.getInput(), rows).first;
    rowSets[gather] = rows;
    return success();
  }
  if (auto residual = dyn_cast<mod::GatedResidualOp>(op)) {
    if (!training() && !deadAfter(residual.getInput(), op))
      return op->emitOpError("the residual stream is read after the routed "
                             "block's scatter; it cannot be updated in place");
    lowerGatedScatter(loc, residual.getInput(), Value(),
                      buffers[residual.getUpdate()], residual.getScores(),
                      rowSets[residual.getUpdate()], residual.getGate(),
                      residual.getResult());
    return success();
  }
  if (isa<mod::ReturnOp>(op))
    return success();
  if (isa<mod::BlockOp>(op))
    return op->emitOpError("run mod-expand-schedule and mod-expand-blocks "
                           "before convert-mod-to-modk");
  return op->emitOpError("cannot be lowered to modk");
}

modk::ModelAttr modc::modelAttrOf(mod::ModelOp model) {
  // The choices are the same enums in both dialects; the attributes'
  // verifiers check the sizes once more.
  MLIRContext *ctx = model.getContext();
  auto emitError = [&] { return model.emitOpError(); };
  modk::MoDConfigAttr modConfig;
  if (model.isMixtureOfDepths()) {
    ArrayRef<int64_t> layers =
        model.getRoutedLayers().value_or(ArrayRef<int64_t>());
    std::optional<int64_t> capacityTokens;
    if (model.getCapacityTokens())
      capacityTokens = *model.getCapacityTokens();
    modConfig = modk::MoDConfigAttr::getChecked(
        emitError, ctx, model.getCapacityAttr(), capacityTokens,
        model.getScheduleOrDefault(), layers, *model.getGate(),
        *model.getCausalRouter(), model.getAuxLossWeightAttr(),
        int64_t(*model.getPredictorHidden()));
    if (!modConfig)
      return nullptr;
  }
  modk::MoEConfigAttr moeConfig;
  if (model.hasMixtureOfExperts()) {
    SmallVector<int64_t> layers, capacities;
    for (int64_t l = 0, e = model.getNLayers(); l < e; ++l)
      if (model.isMoeLayer(l)) {
        layers.push_back(l);
        capacities.push_back(model.getExpertCapacity(l));
      }
    moeConfig = modk::MoEConfigAttr::getChecked(
        emitError, ctx, int64_t(*model.getMoeExperts()),
        int64_t(*model.getMoeNoopExperts()), int64_t(*model.getMoeDExpert()),
        model.getMoeCapacityFactorAttr(), model.getMoeBalanceLossWeightAttr(),
        ArrayRef<int64_t>(layers), ArrayRef<int64_t>(capacities));
    if (!moeConfig)
      return nullptr;
  }
  return modk::ModelAttr::getChecked(
      emitError, ctx, model.getSymName(), int64_t(model.getVocabSize()),
      int64_t(model.getDModel()), int64_t(model.getNLayers()),
      int64_t(model.getNHeads()),
      model.getNKvHeads() ? std::optional<int64_t>(*model.getNKvHeads())
                          : std::nullopt,
      int64_t(model.getDFf()), int64_t(model.getSeqLen()), model.getMlp(),
      model.getNormEpsAttr(), model.getRopeThetaAttr(),
      BoolAttr::get(ctx, model.getTieEmbeddings()), model.getDtype(), modConfig,
      moeConfig);
}

FailureOr<modk::EntryOp> ModelLowering::run() {
  // The forward entry goes before the model, the others after it.
  if (kind == EntryKind::forward)
    b.setInsertionPoint(model);
  else
    b.setInsertionPointAfter(model);
  bool causalRouter = model.isMixtureOfDepths() &&
                      *model.getCausalRouter() != CausalRouter::none;
  if (!decoding())
    modes.push_back(modk::RoutingMode::topk);
  if (decoding() || (!training() && causalRouter))
    modes.push_back(modk::RoutingMode::causal);
  SmallVector<Attribute> modeAttrs;
  for (modk::RoutingMode m : modes)
    modeAttrs.push_back(modk::RoutingModeAttr::get(b.getContext(), m));
  modk::ModelAttr modelAttr = modelAttrOf(model);
  if (!modelAttr)
    return failure();
  entry = modk::EntryOp::create(
      b, model.getLoc(), b.getStringAttr(modk::stringifyEntryKind(kind)),
      modk::EntryKindAttr::get(b.getContext(), kind), modelAttr,
      b.getArrayAttr({}), b.getArrayAttr(modeAttrs), nullptr);
  body = new Block();
  entry.getBody().push_back(body);
  b.setInsertionPointToEnd(body);
  for (Operation &op : model.getBody().front()) {
    if (failed(lower(&op)))
      return failure();
    forwardOps.push_back(&op);
  }
  if (kind == EntryKind::grad && failed(emitBackward()))
    return failure();
  if ((kind == EntryKind::eval || kind == EntryKind::eval_causal) &&
      failed(emitLosses()))
    return failure();
  entry.setParamsAttr(b.getArrayAttr(params));
  return entry;
}

