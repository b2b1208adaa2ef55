//===- ModelLowering.h - mod.model to modk entries (internal) ---*- C++ -*-===//
//
// The model body is a single block of tensor ops in execution order, so the
// lowering walks it once, giving every tensor a buffer and emitting the
// kernels that compute it. The forward entry updates the residual stream in
// place where the old value is dead afterwards, which is what makes the
// routed block's scatter touch only the selected rows. The training entry
// keeps every activation the backward pass reads, then walks the same ops in
// reverse and emits their gradient kernels.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_LIB_CONVERSION_MODELLOWERING_H
#define MODC_LIB_CONVERSION_MODELLOWERING_H

#include "modc/Dialect/Mod/ModDialect.h"
#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace modc::lowering {
using namespace mlir;

/// The losses output: total, cross-entropy, aux, balance
/// (docs/runtime.md).
constexpr int64_t kLosses = 4;

/// A GEMM without epilogue attributes; callers set the ones they need.
modk::GemmOp createGemm(OpBuilder &b, Location loc, Value input,
                        ValueRange weights, Value segments, ValueRange extra,
                        Value output, modk::Epilogue epilogue);

/// The rows a buffer holds: positions [B, rows] and segment offsets [B(+1)].
struct RowSet {
  Value positions, segments;
};

/// Which entry point a lowering builds (#modk.entry_kind). eval is
/// training's forward pass and losses without the backward pass;
/// eval_causal the forward entry's pass in causal mode and its
/// cross-entropy (GenerateEval.cpp).
using modk::EntryKind;

class ModelLowering {
public:
  ModelLowering(mod::ModelOp model, EntryKind kind)
      : model(model), b(model.getContext()), kind(kind) {}

  /// Builds the entry before the model op.
  FailureOr<modk::EntryOp> run();

private:
  // Entry-level objects.
  Value param(StringRef name, ArrayRef<int64_t> shape, modk::ParamInit init,
              double std = 0);
  Value alloc(ArrayRef<int64_t> perSequence, Type element);
  Value output(StringRef name, ArrayRef<int64_t> perSequence, Type element);
  RowSet identityRows();

  // One method per mod op.
  LogicalResult lower(Operation *op);
  void lowerAttention(mod::AttentionOp op);
  void lowerRoute(mod::RouteOp op);
  void lowerMlpScatter(mod::MlpScatterOp op);
  LogicalResult lowerTopK(mod::TopKOp op);
  /// The routed block's pieces, shared by its fused and unfused ops:
  /// - the router's scores r = w . x of every token of `stream`;
  Value lowerRouter(Location loc, Value stream, int64_t layer);
  /// - the selection from `scores` (top-k, or the causal decision), whose
  ///   routing mask `op`'s backward reads; the rows it selects;
  RowSet lowerSelection(Operation *op, Value scores, Value causalScores,
                        int64_t layer, int64_t k, CausalRouter causalRouter);
  /// - the gather of the selected rows of `stream` (as many a sequence as
  ///   `rows` has room for), and with `normWeight` their RMSNorm:
  ///   {gathered, normed};
  std::pair<Value, Value> lowerGather(Location loc, Value stream, RowSet rows,
                                      Value normWeight = Value(),
                                      float eps = 0);
  /// - the gated residual x[token] += g(r) (a + u) into `result`'s buffer
  ///   (`attention` a may be absent).
  void lowerGatedScatter(Location loc, Value stream, Value attention,
                         Value update, Value scores, RowSet rows, Gate gate,
                         Value result);
  /// The segments of every token of the stream (the router's rows).
  Value allTokenRows();
  Value lowerMlpUp(Operation *op, Value input, RowSet rows, int64_t layer,
                   StringRef prefix, int64_t ff);
  /// The MoE MLP (docs/model-format.md section 7): router, modk.moe_select,
  /// and each expert's gather, products and gated add into T's rows.
  void lowerMoe(mod::MoeOp op);

  /// True when no op after `op` reads `v`: its buffer may be overwritten.
  /// Training keeps every value for the backward pass; so does eval, whose
  /// losses must be grad's bit for bit (the same kernels).
  bool deadAfter(Value v, Operation *op) {
    return !training() && llvm::all_of(v.getUsers(), [&](Operation *user) {
      return user == op || user->isBeforeInBlock(op);
    });
  }
  /// Grad and eval: training's forward pass on tokens [B, S + 1], in top-k.
  bool training() const {
    return kind == EntryKind::grad || kind == EntryKind::eval;
  }
  bool decoding() const { return kind == EntryKind::decode; }
  /// Whether the module holds a decode entry (mod-generate-decode runs
  /// before this lowering): the forward entry then fills its KV cache.
  bool fillsKVCache() {
    auto module = model->getParentOfType<ModuleOp>();
    return module &&
           llvm::any_of(module.getOps<modk::EntryOp>(), [](modk::EntryOp e) {
             return e.getKind() == EntryKind::decode;
           });
  }
  /// Entries whose tokens are [B, S + 1] (inputs and next-token targets) and
  /// whose logits and routing masks stay in the workspace: grad, eval and
  /// eval_causal.
  bool readsTargets() const {
    return training() || kind == EntryKind::eval_causal;
  }
  /// Rows a sequence has in this entry: seq_len, or one in a decode step.
  int64_t stepRows() { return decoding() ? 1 : model.getSeqLen(); }

  // The backward half (ModelLoweringGrad.cpp).
  LogicalResult emitBackward();
  /// Eval's losses: grad's loss kernels in grad's order, loss-only forms;
  /// eval_causal's cross-entropy (GenerateEval.cpp).
  LogicalResult emitLosses();
  LogicalResult backward(Operation *op);
  void backwardAttention(mod::AttentionOp op);
  void backwardMlp(Operation *op, Value input, Value dm, int64_t layer);
  /// The MLP's gradients on the rows `rows` of `n` (weights named by
  /// `prefix`, as lowerMlpUp's): returns dn, a new buffer.
  Value backwardMlpRows(Operation *op, Value n, RowSet rows, Value dm,
                        int64_t layer, StringRef prefix);
  void backwardMoe(mod::MoeOp op);
  /// MoE layers: one mod.moe each; the balance loss is their mean.
  int64_t countMoeLayers() {
    int64_t n = 0;
    model.walk([&](mod::MoeOp) { ++n; });
    return n;
  }
  void backwardRoute(mod::RouteOp op);
  /// The routed block's pieces, shared by its fused and unfused ops.
  void backwardGather(Location loc, Value input, Value gathered, RowSet rows);
  void backwardSelection(Operation *op, Value scores,
                         CausalRouter causalRouter);
  void backwardRouter(Location loc, Value input, Value scores, int64_t layer);
  /// The gated residual's gradients: `dbranch` of the branch (its value
  /// `branch` read at the rows), the scores', and the stream's, which passes
  /// through unchanged.
  void backwardGatedScatter(Location loc, Value result, Value input,
                            Value scores, Value branch, RowSet rows, Gate gate,
                            Value dbranch);
  /// The mod.route or mod.topk that reads `predictor`'s causal scores.
  Operation *selectionReading(Operation *predictor);
  /// Routed layers: one selection (mod.route or mod.topk) each.
  int64_t countRoutedLayers() {
    int64_t n = 0;
    model.walk([&](Operation *op) { n += isa<mod::RouteOp, mod::TopKOp>(op); });
    return n;
  }
  /// Adds `grad` into the gradient of `tensor`; the first contribution is
  /// taken as the gradient buffer itself when `owned`, copied otherwise.
  void contribute(Value tensor, Value grad, bool owned);
  /// The gradient buffer of `tensor`, zero-filled if nothing reached it yet.
  Value gradOf(Value tensor);
  /// The gradient output of parameter `name` (zeroed at the start).
  Value paramGrad(StringRef name);
  Value paramValue(StringRef name) { return paramValues.lookup(name); }
  Value like(Value buffer) {
    return modk::AllocOp::create(b, model.getLoc(),
                                 cast<MemRefType>(buffer.getType()), nullptr);
  }
  /// Rows a sequence of `tensor`'s buffer holds: k for top-k selections,
  /// but seq_len when causal routing may select every token.
  int64_t rowsOf(Value tensor) {
    return cast<MemRefType>(buffers.lookup(tensor).getType()).getDimSize(1);
  }
  int64_t widthOf(Value tensor) {
    return cast<RankedTensorType>(tensor.getType()).getShape().back();
  }
  double linearStd(StringRef which) {
    // Output projections are scaled down with depth (GPT-2), the rest 0.02.
    if (which == "attn.wo.weight" || which.ends_with("w_down.weight"))
      return 0.02 / std::sqrt(2.0 * std::max<int64_t>(1, model.getNLayers()));
    return 0.02;
  }
  Value blockParam(int64_t layer, StringRef which, ArrayRef<int64_t> shape) {
    using modk::ParamInit;
    ParamInit init = which.ends_with("norm.weight") ? ParamInit::ones
                     : which.ends_with("bias")      ? ParamInit::zeros
                                                    : ParamInit::normal;
    return param(mod::blockParam(layer, which), shape, init,
                 init == ParamInit::normal ? linearStd(which) : 0);
  }

  mod::ModelOp model;
  OpBuilder b;
  modk::EntryOp entry;
  Block *body = nullptr;
  Operation *lastParam = nullptr;
  SmallVector<Attribute> params;
  llvm::StringMap<Value> paramValues;
  std::optional<RowSet> identity;
  DenseMap<Value, Value> buffers;   // tensor -> buffer
  DenseMap<Value, RowSet> rowSets;  // tensor -> the rows its buffer holds
  SmallVector<modk::RoutingMode> modes;

  EntryKind kind;
  /// Buffers the backward pass reads, by forward op and role.
  DenseMap<Operation *, llvm::StringMap<Value>> saved;
  DenseMap<Value, Value> grads;     // tensor -> its gradient buffer
  llvm::StringMap<Value> paramGrads;
  Value losses, targets;            // training and eval only
  int64_t nRouted = 0;              // training only: routed layers
  int64_t nMoe = 0;                 // training only: MoE layers
  Value stepPositions, active;      // decoding only
  SmallVector<Operation *> forwardOps;
};
} // namespace modc::lowering

#endif // MODC_LIB_CONVERSION_MODELLOWERING_H
