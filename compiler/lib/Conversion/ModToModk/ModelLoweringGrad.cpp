//===- ModelLoweringGrad.cpp - The backward half of the lowering -*- C++ -*-===//
//
// Reverse-mode differentiation of the forward plan, op by op in reverse
// order: each mod op's backward reads the activations its forward saved and
// the gradient of its result, and contributes to the gradients of its
// operands. Parameter gradients are entry outputs, zeroed first and then
// accumulated into by every kernel that reaches them. Top-k is a constant
// selection (docs/model-format.md section 5).
//
//===----------------------------------------------------------------------===//

#include "ModelLowering.h"
#include "modc/Dialect/Modk/Transforms/RowsBuilder.h"

using namespace mlir;
using namespace modc;
using namespace modc::lowering;

Value ModelLowering::paramGrad(StringRef name) {
  if (Value grad = paramGrads.lookup(name))
    return grad;
  Value param = paramValues.lookup(name);
  Value grad = modk::OutputOp::create(b, model.getLoc(), param.getType(),
                                      ("grad." + name).str());
  modk::ZeroOp::create(b, model.getLoc(), grad);
  paramGrads[name] = grad;
  return grad;
}

Value ModelLowering::gradOf(Value tensor) {
  if (Value grad = grads.lookup(tensor))
    return grad;
  Value grad = like(buffers[tensor]);
  modk::ZeroOp::create(b, model.getLoc(), grad);
  grads[tensor] = grad;
  return grad;
}

void ModelLowering::contribute(Value tensor, Value grad, bool owned) {
  Value &existing = grads[tensor];
  if (!existing) {
    if (owned) {
      existing = grad;
    } else {
      existing = like(grad);
      modk::CopyOp::create(b, model.getLoc(), grad, existing);
    }
    return;
  }
  // Out of place: the sum is a new buffer, which a bf16 model may store as
  // bf16 where only products read it (modk-store-bf16).
  Value sum = like(existing);
  modk::AddOp::create(b, model.getLoc(), existing, grad,
                      rowSets[tensor].segments, sum);
  existing = sum;
}

/// Name of the parameter behind a `modk.param` value.
static StringRef paramName(Value param) {
  return cast<modk::ParamOp>(param.getDefiningOp()).getName();
}

void ModelLowering::backwardAttention(mod::AttentionOp op) {
  Location loc = op.getLoc();
  int64_t layer = op.getLayer();
  Value da = grads.lookup(op.getResult());
  if (!da)
    return;
  llvm::StringMap<Value> &s = saved[op];
  RowSet rows = rowSets[op.getInput()];
  Value n = buffers[op.getInput()];
  auto weight = [&](StringRef which) {
    return paramValue(mod::blockParam(layer, which));
  };
  Value wq = weight("attn.wq.weight"), wk = weight("attn.wk.weight"),
        wv = weight("attn.wv.weight"), wo = weight("attn.wo.weight");

  // O projection.
  Value dout = like(s["o"]);
  modk::GemmDgradOp::create(b, loc, da, wo, rows.segments, dout, false, nullptr);
  modk::GemmWgradOp::create(b, loc, da, s["o"], rows.segments,
                            paramGrad(paramName(wo)), nullptr, nullptr);
  // Softmax attention, then the transpose of RoPE on dq and dk (out of
  // place: the rotated gradients feed only the products).
  Value dqRoped = like(s["q"]), dkRoped = like(s["k"]), dv = like(s["v"]);
  modk::AttentionGradOp::create(b, loc, s["q"], s["k"], s["v"], s["o"], dout,
                                rows.positions, rows.segments, dqRoped,
                                dkRoped, dv, model.getNHeads(),
                                /*mainloop=*/nullptr);
  Value dq = like(s["q"]), dk = like(s["k"]);
  // dk has the key/value heads (grouped-query attention).
  for (auto [roped, g, heads] :
       {std::tuple{dqRoped, dq, int64_t(model.getNHeads())},
        {dkRoped, dk, model.getKvHeads()}})
    modk::RopeGradOp::create(b, loc, roped, rows.positions, rows.segments, g,
                             heads, model.getRopeTheta());
  // Q, K, V projections.
  Value dn = like(n);
  bool first = true;
  for (auto [g, w] : {std::pair{dq, wq}, {dk, wk}, {dv, wv}}) {
    modk::GemmDgradOp::create(b, loc, g, w, rows.segments, dn, !first, nullptr);
    modk::GemmWgradOp::create(b, loc, g, n, rows.segments,
                              paramGrad(paramName(w)), nullptr, nullptr);
    first = false;
  }
  contribute(op.getInput(), dn, /*owned=*/true);
}

void ModelLowering::backwardMlp(Operation *op, Value input, Value dm,
                                int64_t layer) {
  Value dn =
      backwardMlpRows(op, buffers[input], rowSets[input], dm, layer, "mlp.");
  contribute(input, dn, /*owned=*/true);
}

Value ModelLowering::backwardMlpRows(Operation *op, Value n, RowSet rows,
                                     Value dm, int64_t layer,
                                     StringRef prefix) {
  Location loc = op->getLoc();
  llvm::StringMap<Value> &s = saved[op];
  auto get = [&](StringRef what) { return s.lookup((what + prefix).str()); };
  bool swiglu = model.getMlp() == Activation::swiglu;
  auto weight = [&](StringRef which) {
    return paramValue(mod::blockParam(layer, (prefix + which).str()));
  };
  Value down = weight("w_down.weight"), up = weight("w_up.weight");
  Value gate = swiglu ? weight("w_gate.weight") : Value();

  Value du = like(get("hidden"));
  modk::GemmDgradOp::create(b, loc, dm, down, rows.segments, du, false, nullptr);
  modk::GemmWgradOp::create(b, loc, dm, get("hidden"), rows.segments,
                            paramGrad(paramName(down)), nullptr, nullptr);
  Value dup = like(get("up"));
  Value dgate = swiglu ? like(get("gate")) : Value();
  modk::ActivationGradOp::create(b, loc, swiglu ? get("gate") : Value(),
                                 get("up"), du, rows.segments, dgate, dup,
                                 model.getMlp());
  Value dn = like(n);
  modk::GemmDgradOp::create(b, loc, dup, up, rows.segments, dn, false, nullptr);
  modk::GemmWgradOp::create(b, loc, dup, n, rows.segments,
                            paramGrad(paramName(up)), nullptr, nullptr);
  if (swiglu) {
    modk::GemmDgradOp::create(b, loc, dgate, gate, rows.segments, dn, true, nullptr);
    modk::GemmWgradOp::create(b, loc, dgate, n, rows.segments,
                              paramGrad(paramName(gate)), nullptr, nullptr);
  }
  return dn;
}

void ModelLowering::backwardMoe(mod::MoeOp op) {
  Location loc = op.getLoc();
  int64_t layer = op.getLayer();
  Value dy = grads.lookup(op.getResult());
  llvm::StringMap<Value> &s = saved[op];
  RowSet rows = rowSets[op.getInput()];
  Value n = buffers[op.getInput()];
  // The gradient of each kept row's gate p[e] (0 elsewhere), and of n.
  Value dgate = like(s["gate"]), dn = like(n);
  modk::ZeroOp::create(b, loc, dgate);
  modk::ZeroOp::create(b, loc, dn);
  if (dy) {
    for (int64_t e = 0, experts = *model.getMoeExperts(); e < experts; ++e) {
      std::string prefix = ("moe.experts." + Twine(e) + ".").str();
      RowSet expertRows{s["positions" + prefix], s["segments" + prefix]};
      Value out = s["out" + prefix];
      // m = p[e] Expert(n) at the row's place in T: dExpert = p[e] dm and
      // dp[e] = <dm, Expert(n)>.
      Value dout = like(out);
      modk::createRows(
          b, loc,
          {modk::token(dy), modk::row(out), modk::tokenValue(s["gate"])},
          expertRows.segments, {modk::row(dout), modk::tokenValue(dgate)}, 1,
          [](F32Math &m, ValueRange a) -> SmallVector<Value> {
            return {m.mul(a[0], a[1])};
          },
          [](F32Math &m, ValueRange a) -> SmallVector<Value> {
            return {m.mul(a[2], a[0]), a[3]};
          },
          expertRows.positions);
      Value dgathered = backwardMlpRows(op, s["gathered" + prefix], expertRows,
                                        dout, layer, prefix);
      // The gathered rows' gradient back to their rows of T.
      modk::GatherGradOp::create(b, loc, dgathered, expertRows.positions,
                                 expertRows.segments, dn);
    }
  }
  // The router: softmax's gradient from the gates' and the balance loss's
  // (docs/model-format.md section 7), then its product's.
  Value router = paramValue(mod::blockParam(layer, "moe.router.weight"));
  Value dlogits = like(s["logits"]);
  modk::MoeBalanceOp::create(b, loc, s["probs"], s["choice"], dgate,
                             rows.segments, dlogits, losses,
                             *model.getMoeBalanceLossWeight(), nMoe);
  modk::GemmDgradOp::create(b, loc, dlogits, router, rows.segments, dn, true,
                            nullptr);
  modk::GemmWgradOp::create(b, loc, dlogits, n, rows.segments,
                            paramGrad(paramName(router)), nullptr, nullptr);
  contribute(op.getInput(), dn, /*owned=*/true);
  // residual + m: the residual's gradient is the result's.
  if (dy && op.getResidual())
    contribute(op.getResidual(), dy, /*owned=*/true);
}

void ModelLowering::backwardRoute(mod::RouteOp op) {
  Location loc = op.getLoc();
  RowSet rows = rowSets[op.getIndices()];
  Value xs = buffers[op.getGathered()];

  // Attention norm of the gathered rows.
  if (Value dn = grads.lookup(op.getNormed())) {
    Value normWeight = paramValue(op.getNormParam());
    bool accumulate = grads.count(op.getGathered());
    Value dxs = accumulate ? grads[op.getGathered()] : like(xs);
    modk::RMSNormGradOp::create(b, loc, xs, normWeight, dn, rows.segments, dxs,
                                paramGrad(op.getNormParam()), op.getEps(),
                                accumulate);
    grads[op.getGathered()] = dxs;
  }
  backwardGather(loc, op.getInput(), op.getGathered(), rows);
  backwardSelection(op, op.getScores(), op.getCausalRouter());
  backwardRouter(loc, op.getInput(), op.getScores(), op.getLayer());
}

void ModelLowering::backwardGather(Location loc, Value input, Value gathered,
                                   RowSet rows) {
  // Gathered rows back to their positions in the stream.
  if (Value dxs = grads.lookup(gathered))
    modk::GatherGradOp::create(b, loc, dxs, rows.positions, rows.segments,
                               gradOf(input));
}

void ModelLowering::backwardSelection(Operation *op, Value scores,
                                      CausalRouter causalRouter) {
  // Top-k is a constant selection; the aux_loss router learns the top-k
  // membership as well.
  if (causalRouter == CausalRouter::aux_loss)
    modk::BCELossOp::create(b, op->getLoc(), buffers[scores], saved[op]["mask"],
                            gradOf(scores), losses, *model.getAuxLossWeight(),
                            nRouted);
}

void ModelLowering::backwardRouter(Location loc, Value input, Value scores,
                                   int64_t layer) {
  // Router scores r = w . x.
  if (Value dr = grads.lookup(scores)) {
    Value router = paramValue(mod::blockParam(layer, "router.weight"));
    modk::RouterGradOp::create(b, loc, buffers[input], router, dr,
                               gradOf(input), paramGrad(paramName(router)));
  }
}

void ModelLowering::backwardGatedScatter(Location loc, Value result,
                                         Value input, Value scores,
                                         Value branch, RowSet rows, Gate gate,
                                         Value dbranch) {
  Value dy = grads.lookup(result);
  modk::ScatterGradOp::create(b, loc, dy, buffers[scores], branch,
                              rows.positions, rows.segments, dbranch,
                              gradOf(scores), gate);
  // Every token's gradient passes through the residual unchanged.
  contribute(input, dy, /*owned=*/true);
}

Operation *ModelLowering::selectionReading(Operation *predictor) {
  for (Operation *user : predictor->getUsers())
    if (isa<mod::RouteOp, mod::TopKOp>(user))
      return user;
  return nullptr;
}

LogicalResult ModelLowering::backward(Operation *op) {
  Location loc = op->getLoc();
  if (isa<mod::ReturnOp, mod::TokensOp>(op))
    return success();
  if (auto head = dyn_cast<mod::LMHeadOp>(op)) {
    Value logits = buffers[head];
    Value dlogits = like(logits);
    modk::CrossEntropyOp::create(b, loc, logits, targets, dlogits, losses);
    RowSet rows = rowSets[head.getInput()];
    Value w = paramValue(head.getParam());
    Value dn = like(buffers[head.getInput()]);
    modk::GemmDgradOp::create(b, loc, dlogits, w, rows.segments, dn, false, nullptr);
    modk::GemmWgradOp::create(b, loc, dlogits, buffers[head.getInput()],
                              rows.segments, paramGrad(head.getParam()),
                              nullptr, nullptr);
    contribute(head.getInput(), dn, /*owned=*/true);
    return success();
  }
  if (auto norm = dyn_cast<mod::RMSNormOp>(op)) {
    Value dy = grads.lookup(norm.getResult());
    if (!dy)
      return success();
    Value x = norm.getInput();
    bool accumulate = grads.count(x);
    Value dx = accumulate ? grads[x] : like(buffers[x]);
    modk::RMSNormGradOp::create(b, loc, buffers[x], paramValue(norm.getParam()),
                                dy, rowSets[x].segments, dx,
                                paramGrad(norm.getParam()), norm.getEps(),
                                accumulate);
    grads[x] = dx;
    return success();
  }
  if (auto add = dyn_cast<mod::AddOp>(op)) {
    Value dc = grads.lookup(add.getResult());
    if (!dc)
      return success();
    // The result's gradient is not read again: the lhs may take it over once
    // the rhs has its copy.
    contribute(add.getRhs(), dc, /*owned=*/false);
    contribute(add.getLhs(), dc, /*owned=*/true);
    return success();
  }
  if (auto attention = dyn_cast<mod::AttentionOp>(op)) {
    backwardAttention(attention);
    return success();
  }
  if (auto mlp = dyn_cast<mod::MlpOp>(op)) {
    if (Value dm = grads.lookup(mlp.getResult()))
      backwardMlp(mlp, mlp.getInput(), dm, mlp.getLayer());
    return success();
  }
  if (auto moe = dyn_cast<mod::MoeOp>(op)) {
    backwardMoe(moe);
    return success();
  }
  if (auto scatter = dyn_cast<mod::MlpScatterOp>(op)) {
    if (!grads.lookup(scatter.getResult()))
      return success();
    RowSet rows = rowSets[scatter.getNormed()];
    Value a = buffers[scatter.getAttn()];
    Value f = like(a);
    modk::AddOp::create(b, loc, a, saved[op]["m"], rows.segments, f);
    Value df = like(a);
    backwardGatedScatter(loc, scatter.getResult(), scatter.getInput(),
                         scatter.getScores(), f, rows, scatter.getGate(), df);
    backwardMlp(op, scatter.getNormed(), df, scatter.getLayer());
    contribute(scatter.getAttn(), df, /*owned=*/true);
    return success();
  }
  if (auto residual = dyn_cast<mod::GatedResidualOp>(op)) {
    if (!grads.lookup(residual.getResult()))
      return success();
    Value update = buffers[residual.getUpdate()];
    Value df = like(update);
    backwardGatedScatter(loc, residual.getResult(), residual.getInput(),
                         residual.getScores(), update,
                         rowSets[residual.getUpdate()], residual.getGate(), df);
    contribute(residual.getUpdate(), df, /*owned=*/true);
    return success();
  }
  if (auto gather = dyn_cast<mod::GatherOp>(op)) {
    backwardGather(loc, gather.getInput(), gather, rowSets[gather]);
    return success();
  }
  if (auto topk = dyn_cast<mod::TopKOp>(op)) {
    backwardSelection(op, topk.getScores(), topk.getCausalRouter());
    return success();
  }
  if (auto router = dyn_cast<mod::RouterOp>(op)) {
    backwardRouter(loc, router.getInput(), router, router.getLayer());
    return success();
  }
  if (auto route = dyn_cast<mod::RouteOp>(op)) {
    backwardRoute(route);
    return success();
  }
  if (auto predictor = dyn_cast<mod::PredictorOp>(op)) {
    // Its loss teaches it the top-k membership of the selection that reads
    // it.
    Operation *selection = selectionReading(predictor);
    if (!selection)
      return op->emitOpError("is not read by a mod.route or mod.topk");
    int64_t layer = predictor.getLayer(), h = predictor.getHidden();
    Value p = buffers[predictor];
    Value dp = like(p);
    modk::ZeroOp::create(b, loc, dp);
    modk::BCELossOp::create(b, loc, p, saved[selection]["mask"], dp, losses,
                            *model.getAuxLossWeight(), nRouted);
    Value hidden =
        alloc({static_cast<int64_t>(model.getSeqLen()), h}, b.getF32Type());
    auto weight = [&](StringRef which) {
      return paramValue(mod::blockParam(layer, which));
    };
    Value fc1w = weight("predictor.fc1.weight"),
          fc1b = weight("predictor.fc1.bias"),
          fc2w = weight("predictor.fc2.weight"),
          fc2b = weight("predictor.fc2.bias");
    modk::PredictorGradOp::create(
        b, loc, buffers[predictor.getInput()], fc1w, fc1b, fc2w, dp, hidden,
        paramGrad(paramName(fc1w)), paramGrad(paramName(fc1b)),
        paramGrad(paramName(fc2w)), paramGrad(paramName(fc2b)));
    return success();
  }
  if (auto embed = dyn_cast<mod::EmbedOp>(op)) {
    if (Value dx = grads.lookup(embed.getResult()))
      modk::EmbedGradOp::create(b, loc, buffers[embed.getTokens()], dx,
                                paramGrad("embed.weight"));
    return success();
  }
  return op->emitOpError("has no backward rule");
}

LogicalResult ModelLowering::emitBackward() {
  Location loc = model.getLoc();
  losses = modk::OutputOp::create(
      b, loc, MemRefType::get({kLosses}, b.getF32Type()), "losses");
  // L_aux is the mean over routed layers: each layer's loss is scaled by it.
  nRouted = countRoutedLayers();
  nMoe = countMoeLayers();
  // Every parameter has a gradient output, zero where nothing reaches it.
  for (Attribute p : params)
    paramGrad(cast<modk::ParamAttr>(p).getName());
  for (Operation *op : llvm::reverse(forwardOps))
    if (failed(backward(op)))
      return failure();
  return success();
}
