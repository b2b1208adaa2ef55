//===- EmitCuda.cpp - modk launch plan to CUDA C++ --------------*- C++ -*-===//
//
// The generated model.cu is: the CUDA kernel preludes (templates), the ABI
// structs, the device API of CUDA packages (modc_cuda_*), then one host
// function per entry that places every buffer at its planned offset in the
// device workspace and enqueues one specialised kernel per modk op on the
// package's stream. Row counts stay on the device (CudaCommon.cuh), so no
// entry waits for the GPU; the decode step is captured once into a CUDA
// graph and replayed.
//
//===----------------------------------------------------------------------===//

#include "../PlanEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/JSON.h"

#include <fmt/format.h>

using namespace mlir;
using namespace modc;

static const char kCommonPrelude[] =
#include "CudaCommonPrelude.inc"
    ;
static const char kPrelude[] =
#include "CudaKernelsPrelude.inc"
    ;
static const char kTrainPrelude[] =
#include "CudaKernelsTrainPrelude.inc"
    ;
static const char kDecodePrelude[] =
#include "CudaKernelsDecodePrelude.inc"
    ;

static const char kExport[] = "__attribute__((visibility(\"default\")))";

namespace {
class CudaEmitter : public PlanEmitter {
public:
  CudaEmitter(ArrayRef<modk::EntryOp> entries, llvm::raw_ostream &os,
              StringRef arch)
      : PlanEmitter(entries, os), arch(arch) {}
  LogicalResult emit();

private:
  /// The device pointer to the row count of a row set: seg[B].
  std::string rows(Value segments) { return name(segments) + " + B"; }
  LogicalResult emitKernel(Operation *op);
  void emitGemm(modk::GemmOp op);
  LogicalResult emitEntry(modk::EntryOp entry);
  /// Notes that a kernel of the entry needs `bytesExpr` bytes of scratch
  /// (an expression in B): the entry sizes one buffer for the largest.
  void needScratch(std::string bytesExpr) {
    scratchNeeds.push_back(std::move(bytesExpr));
  }
  void emitDeviceApi();
  void emitAdamW(modk::EntryOp grad);

  std::string arch;
  std::vector<std::string> scratchNeeds;
};
} // namespace

void CudaEmitter::emitGemm(modk::GemmOp op) {
  auto weightShape = cast<MemRefType>(op.getWeights()[0].getType()).getShape();
  int64_t n = weightShape[0], k = weightShape[1];
  std::string a = name(op.getInput()), y = name(op.getOutput());
  std::string w = name(op.getWeights()[0]);
  std::string m = rows(op.getSegments()), bound = maxRows(op.getInput());
  StringRef e = op.getEpilogue();
  os << fmt::format("  // modk.gemm [{} x {}] epilogue={}\n", n, k, e.str());
  if (e == "none") {
    os << fmt::format("  modk_cuda::linear<{}, {}>({}, {}, {}, {}, {}, s);\n", n,
                      k, a, m, bound, w, y);
  } else if (e == "gelu") {
    os << fmt::format("  modk_cuda::linear_gelu<{}, {}>({}, {}, {}, {}, {}, s);\n",
                      n, k, a, m, bound, w, y);
  } else if (e == "rope") {
    int64_t heads = *op.getNHeads();
    os << fmt::format(
        "  modk_cuda::linear_rope<{}, {}, {}>({}, {}, {}, {}, {}, {}, {}, s);\n",
        heads, n / heads, k, a, m, bound, w, name(op.getExtra()[0]),
        floatLiteral(op.getRopeTheta()->convertToDouble()), y);
  } else if (e == "residual_add") {
    os << fmt::format(
        "  modk_cuda::linear_residual<{}, {}>({}, {}, {}, {}, {}, {}, s);\n", n,
        k, a, m, bound, w, name(op.getExtra()[0]), y);
  } else if (e == "swiglu") {
    os << fmt::format(
        "  modk_cuda::linear_swiglu<{}, {}>({}, {}, {}, {}, {}, {}, {}, s);\n",
        n, k, a, m, bound, w, name(op.getWeights()[1]), name(op.getExtra()[0]),
        y);
  } else if (e == "gate_scale_scatter") {
    auto extra = op.getExtra();
    int gate = gateKind(*op.getGate());
    os << fmt::format("  modk_cuda::linear<{}, {}>({}, {}, {}, {}, {}, s);\n", n,
                      k, a, m, bound, w, name(extra[0]));
    if (entry.getSymName() == "decode")
      os << fmt::format("  modk_cuda::decode_gate_scale_scatter<{}, {}>({}, B, "
                        "{}, {}, {}, {}, s);\n",
                        n, gate, y, name(op.getSegments()), name(extra[1]),
                        name(extra[2]), name(extra[0]));
    else
      os << fmt::format("  modk_cuda::gate_scale_scatter<{}, {}, {}>({}, B, {}, "
                        "{}, {}, {}, {}, s);\n",
                        seqLen, n, gate, y, name(op.getSegments()),
                        name(extra[3]), name(extra[1]), name(extra[2]),
                        name(extra[0]));
  }
}

LogicalResult CudaEmitter::emitKernel(Operation *op) {
  if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
    emitGemm(gemm);
    return success();
  }
  if (auto ids = dyn_cast<modk::IdentityRowsOp>(op)) {
    os << fmt::format("  modk_cuda::identity_segments<{}>(B, {}, {}, s);\n",
                      seqLen, name(ids.getPositions()), name(ids.getSegments()));
    return success();
  }
  if (auto embed = dyn_cast<modk::EmbedOp>(op)) {
    os << fmt::format("  modk_cuda::embed<{}>({}, B * {}, {}, {}, s);\n",
                      width(embed.getOutput()), name(embed.getTokens()),
                      width(embed.getTokens()), name(embed.getTable()),
                      name(embed.getOutput()));
    return success();
  }
  if (auto norm = dyn_cast<modk::RMSNormOp>(op)) {
    os << fmt::format("  modk_cuda::rmsnorm<{}>({}, {}, {}, {}, {}, {}, s);\n",
                      width(norm.getOutput()), name(norm.getInput()),
                      rows(norm.getSegments()), maxRows(norm.getInput()),
                      name(norm.getWeight()),
                      floatLiteral(norm.getEps().convertToDouble()),
                      name(norm.getOutput()));
    return success();
  }
  if (auto attn = dyn_cast<modk::AttentionOp>(op)) {
    int64_t heads = attn.getNHeads();
    // The grid covers the most rows a segment can hold (S, or k in top-k).
    os << fmt::format("  modk_cuda::causal_attention<{}, {}>({}, {}, {}, B, {}, "
                      "{}, {}, {}, s);\n",
                      heads, width(attn.getQ()) / heads, name(attn.getQ()),
                      name(attn.getK()), name(attn.getV()),
                      name(attn.getSegments()), name(attn.getPositions()),
                      cast<MemRefType>(attn.getQ().getType()).getDimSize(1),
                      name(attn.getOutput()));
    if (hasDecode && attn.getLayer() && entry.getSymName() == "forward") {
      // Causal prefill: the same keys and values fill the decode cache.
      int64_t layer = *attn.getLayer(), d = width(attn.getK());
      os << fmt::format(
          "  if (args->kv_cache)\n    modk_cuda::cache_append<{0}, {1}>({2}, "
          "{3}, B, {4}, {5}, args->prefill_lengths, args->kv_cache + "
          "(int64_t){6} * B * {0} * {1}, args->kv_cache + (int64_t){7} * B * "
          "{0} * {1}, args->kv_counts + (int64_t){8} * B, s);\n",
          seqLen, d, name(attn.getK()), name(attn.getV()),
          name(attn.getSegments()), name(attn.getPositions()), 2 * layer,
          2 * layer + 1, layer);
    }
    return success();
  }
  if (auto add = dyn_cast<modk::AddOp>(op)) {
    int64_t d = width(add.getOutput());
    std::string out = name(add.getOutput()), lhs = name(add.getLhs());
    if (out != lhs)
      os << fmt::format("  cudaMemcpyAsync({}, {}, sizeof(float) * {} * {}, "
                        "cudaMemcpyDeviceToDevice, s);\n",
                        out, lhs, maxRows(add.getOutput()), d);
    os << fmt::format("  modk_cuda::add_inplace<{}>({}, {}, {}, {}, s);\n", d,
                      out, name(add.getRhs()), rows(add.getSegments()),
                      maxRows(add.getOutput()));
    return success();
  }
  if (auto predictor = dyn_cast<modk::PredictorOp>(op)) {
    auto fc1 = cast<MemRefType>(predictor.getFc1Weight().getType()).getShape();
    if (predictor.getCausalOnly())
      os << "  if (causal || args->causal_decisions) // only causal decisions "
            "read it\n  ";
    os << fmt::format(
        "  modk_cuda::predictor<{}, {}>({}, B * {}, {}, {}, {}, {}, {}, {}, "
        "s);\n",
        fc1[1], fc1[0], name(predictor.getInput()),
        cast<MemRefType>(predictor.getInput().getType()).getDimSize(1),
        name(predictor.getFc1Weight()), name(predictor.getFc1Bias()),
        name(predictor.getFc2Weight()), name(predictor.getFc2Bias()),
        name(predictor.getHidden()), name(predictor.getOutput()));
    return success();
  }
  if (auto route = dyn_cast<modk::RouteSelectGatherOp>(op)) {
    int64_t d = width(route.getGathered());
    std::string pos = name(route.getPositions()), seg = name(route.getSegments());
    std::string mask = name(route.getMask()), r = name(route.getScores());
    os << fmt::format("  // modk.route_select_gather layer {} k={}\n",
                      route.getLayer(), route.getK());
    os << fmt::format("  modk_cuda::router_logits<{}, {}>({}, B, {}, {}, s);\n",
                      seqLen, d, name(route.getInput()),
                      name(route.getRouterWeight()), r);
    StringRef causal = route.getCausalRouter();
    std::string logits =
        causal == "predictor" ? name(route.getCausalScores()) : r;
    if (causal != "none")
      os << fmt::format("  if (causal)\n    modk_cuda::select_causal<{}>({}, B, "
                        "{}, {}, {}, s);\n  else\n  ",
                        seqLen, logits, pos, seg, mask);
    os << fmt::format("  modk_cuda::select_topk<{}, {}>({}, B, {}, {}, {}, s);\n",
                      seqLen, route.getK(), r, pos, seg, mask);
    if (causal != "none")
      // The causal decision of every token on this pass's stream, on request.
      os << fmt::format("  if (args->causal_decisions)\n    "
                        "modc_glue::decisions(args->causal_decisions + "
                        "(int64_t){1} * B * {0}, {2}, B * {0}, s);\n",
                        seqLen, routedIndex[route.getLayer()], logits);
    os << fmt::format("  modk_cuda::gather_rmsnorm<{}, {}>({}, B, {}, {}, {}, "
                      "{}, {}, {}, s);\n",
                      seqLen, d, name(route.getInput()), seg, pos,
                      name(route.getNormWeight()),
                      floatLiteral(route.getEps().convertToDouble()),
                      name(route.getGathered()), name(route.getNormed()));
    return success();
  }
  if (auto zero = dyn_cast<modk::ZeroOp>(op)) {
    Value out = zero.getOutput();
    os << fmt::format("  cudaMemsetAsync({}, 0, sizeof(*{}) * {}, s);\n",
                      name(out), name(out), elements(out));
    return success();
  }
  if (auto copy = dyn_cast<modk::CopyOp>(op)) {
    Value out = copy.getOutput();
    os << fmt::format("  cudaMemcpyAsync({}, {}, sizeof(*{}) * {}, "
                      "cudaMemcpyDeviceToDevice, s);\n",
                      name(out), name(copy.getInput()), name(out),
                      elements(out));
    return success();
  }
  if (auto split = dyn_cast<modk::SplitTokensOp>(op)) {
    os << fmt::format("  modk_cuda::split_tokens<{}>({}, B, {}, {}, s);\n",
                      seqLen, name(split.getTokens()), name(split.getInputs()),
                      name(split.getTargets()));
    return success();
  }
  if (auto act = dyn_cast<modk::ActivationOp>(op)) {
    int64_t n = width(act.getOutput());
    std::string out = name(act.getOutput()), r = rows(act.getSegments());
    std::string bound = maxRows(act.getOutput());
    os << fmt::format("  cudaMemcpyAsync({}, {}, sizeof(float) * {} * {}, "
                      "cudaMemcpyDeviceToDevice, s);\n",
                      out, name(act.getUp()), bound, n);
    if (act.getKind() == "swiglu")
      os << fmt::format("  modk_cuda::swiglu<{}>({}, {}, {}, {}, s);\n", n,
                        name(act.getGate()), out, r, bound);
    else
      os << fmt::format("  modk_cuda::gelu<{}>({}, {}, {}, s);\n", n, out, r,
                        bound);
    return success();
  }
  if (auto ce = dyn_cast<modk::CrossEntropyOp>(op)) {
    int64_t vocab = width(ce.getLogits());
    needScratch(fmt::format("modk_cuda::cross_entropy_scratch_bytes(B * {})",
                            seqLen));
    os << fmt::format("  modk_cuda::cross_entropy<{}>({}, {}, B * {}, 1.0f / "
                      "(float)(B * {}), {}, {}, (double *)scratch, s);\n",
                      vocab, name(ce.getLogits()), name(ce.getTargets()),
                      seqLen, seqLen, name(ce.getDlogits()),
                      name(ce.getLosses()));
    return success();
  }
  if (auto bce = dyn_cast<modk::BCELossOp>(op)) {
    // Mean over [B, S] and the routed layers.
    os << fmt::format("  modk_cuda::bce_with_logits<{0}>({1}, {2}, B, {4:.17g}, "
                      "1.0 / ((double)B * {0} * {3}), {5}, {6}, s);\n",
                      seqLen, name(bce.getLogits()), name(bce.getMask()),
                      bce.getNRouted(), bce.getWeight().convertToDouble(),
                      name(bce.getDlogits()), name(bce.getLosses()));
    return success();
  }
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op)) {
    auto w = cast<MemRefType>(dgrad.getWeight().getType()).getShape();
    os << fmt::format(
        "  modk_cuda::linear_dgrad<{}, {}>({}, {}, {}, {}, {}, {}, s);\n", w[0],
        w[1], name(dgrad.getDy()), rows(dgrad.getSegments()),
        maxRows(dgrad.getDy()), name(dgrad.getWeight()), name(dgrad.getDa()),
        dgrad.getAccumulate() ? "true" : "false");
    return success();
  }
  if (auto wgrad = dyn_cast<modk::GemmWgradOp>(op)) {
    auto w = cast<MemRefType>(wgrad.getDw().getType()).getShape();
    os << fmt::format(
        "  modk_cuda::linear_wgrad<{}, {}>({}, {}, {}, {}, {}, s);\n", w[0],
        w[1], name(wgrad.getDy()), rows(wgrad.getSegments()),
        maxRows(wgrad.getDy()), name(wgrad.getInput()), name(wgrad.getDw()));
    return success();
  }
  if (auto norm = dyn_cast<modk::RMSNormGradOp>(op)) {
    needScratch(fmt::format("sizeof(float) * "
                            "modk_cuda::rmsnorm_grad_scratch_floats<{}>({})",
                            width(norm.getInput()), maxRows(norm.getInput())));
    os << fmt::format("  modk_cuda::rmsnorm_grad<{}>({}, {}, {}, {}, {}, {}, {}, "
                      "{}, {}, (float *)scratch, s);\n",
                      width(norm.getInput()), name(norm.getInput()),
                      rows(norm.getSegments()), maxRows(norm.getInput()),
                      name(norm.getWeight()),
                      floatLiteral(norm.getEps().convertToDouble()),
                      name(norm.getDy()), name(norm.getDx()), name(norm.getDw()),
                      norm.getAccumulate() ? "true" : "false");
    return success();
  }
  if (auto rope = dyn_cast<modk::RopeGradOp>(op)) {
    int64_t heads = rope.getNHeads();
    os << fmt::format("  modk_cuda::rope_grad<{}, {}>({}, {}, {}, {}, {}, s);\n",
                      heads, width(rope.getGrad()) / heads, name(rope.getGrad()),
                      rows(rope.getSegments()), maxRows(rope.getGrad()),
                      name(rope.getPositions()),
                      floatLiteral(rope.getRopeTheta().convertToDouble()));
    return success();
  }
  if (auto attn = dyn_cast<modk::AttentionGradOp>(op)) {
    int64_t heads = attn.getNHeads();
    needScratch(fmt::format(
        "sizeof(float) * modk_cuda::attention_grad_scratch_floats<{}>({})",
        heads, maxRows(attn.getQ())));
    os << fmt::format("  modk_cuda::causal_attention_grad<{}, {}>({}, {}, {}, "
                      "{}, {}, B, {}, {}, {}, {}, {}, {}, (float *)scratch, "
                      "s);\n",
                      heads, width(attn.getQ()) / heads, name(attn.getQ()),
                      name(attn.getK()), name(attn.getV()), name(attn.getO()),
                      name(attn.getDout()), name(attn.getSegments()),
                      name(attn.getPositions()),
                      cast<MemRefType>(attn.getQ().getType()).getDimSize(1),
                      name(attn.getDq()), name(attn.getDk()),
                      name(attn.getDv()));
    return success();
  }
  if (auto act = dyn_cast<modk::ActivationGradOp>(op)) {
    int64_t n = width(act.getUp());
    if (act.getKind() == "swiglu")
      os << fmt::format(
          "  modk_cuda::swiglu_grad<{}>({}, {}, {}, {}, {}, {}, {}, s);\n", n,
          name(act.getGate()), name(act.getUp()), name(act.getDu()),
          rows(act.getSegments()), maxRows(act.getUp()), name(act.getDgate()),
          name(act.getDup()));
    else
      os << fmt::format("  modk_cuda::gelu_grad<{}>({}, {}, {}, {}, {}, s);\n", n,
                        name(act.getUp()), name(act.getDu()),
                        rows(act.getSegments()), maxRows(act.getUp()),
                        name(act.getDup()));
    return success();
  }
  if (auto scatter = dyn_cast<modk::ScatterGradOp>(op)) {
    int gate = gateKind(scatter.getGate());
    os << fmt::format("  modk_cuda::gate_scale_scatter_grad<{}, {}, {}>({}, B, "
                      "{}, {}, {}, {}, {}, {}, s);\n",
                      seqLen, width(scatter.getDy()), gate,
                      name(scatter.getDy()), name(scatter.getSegments()),
                      name(scatter.getPositions()), name(scatter.getScores()),
                      name(scatter.getUpdate()), name(scatter.getDf()),
                      name(scatter.getDscores()));
    return success();
  }
  if (auto gather = dyn_cast<modk::GatherGradOp>(op)) {
    os << fmt::format("  modk_cuda::gather_grad<{}, {}>({}, B, {}, {}, {}, s);\n",
                      seqLen, width(gather.getDx()), name(gather.getDgathered()),
                      name(gather.getSegments()), name(gather.getPositions()),
                      name(gather.getDx()));
    return success();
  }
  if (auto router = dyn_cast<modk::RouterGradOp>(op)) {
    needScratch(fmt::format(
        "sizeof(float) * modk_cuda::router_grad_scratch_floats<{}, {}>(B)",
        seqLen, width(router.getInput())));
    os << fmt::format(
        "  modk_cuda::router_grad<{}, {}>({}, B, {}, {}, {}, {}, (float "
        "*)scratch, s);\n",
        seqLen,
        width(router.getInput()), name(router.getInput()),
        name(router.getWeight()), name(router.getDscores()),
        name(router.getDx()), name(router.getDw()));
    return success();
  }
  if (auto pred = dyn_cast<modk::PredictorGradOp>(op)) {
    auto fc1 = cast<MemRefType>(pred.getFc1Weight().getType()).getShape();
    needScratch(fmt::format("sizeof(float) * "
                            "modk_cuda::predictor_grad_scratch_floats<{}, "
                            "{}>(B * {})",
                            fc1[1], fc1[0], seqLen));
    os << fmt::format("  modk_cuda::predictor_grad<{}, {}>({}, B * {}, {}, {}, "
                      "{}, {}, {}, {}, {}, {}, {}, (float *)scratch, s);\n",
                      fc1[1], fc1[0], name(pred.getInput()), seqLen,
                      name(pred.getFc1Weight()), name(pred.getFc1Bias()),
                      name(pred.getFc2Weight()), name(pred.getDp()),
                      name(pred.getHidden()), name(pred.getDfc1Weight()),
                      name(pred.getDfc1Bias()), name(pred.getDfc2Weight()),
                      name(pred.getDfc2Bias()));
    return success();
  }
  if (auto embed = dyn_cast<modk::EmbedGradOp>(op)) {
    os << fmt::format("  modk_cuda::embed_grad<{}>({}, B * {}, {}, {}, s);\n",
                      width(embed.getDtable()), name(embed.getTokens()), seqLen,
                      name(embed.getDx()), name(embed.getDtable()));
    return success();
  }
  if (auto rowsOp = dyn_cast<modk::DecodeRowsOp>(op)) {
    os << fmt::format("  modk_cuda::decode_rows<{}>({}, {}, B, {}, {}, s);\n",
                      seqLen, name(rowsOp.getStepPositions()),
                      name(rowsOp.getActive()), name(rowsOp.getPositions()),
                      name(rowsOp.getSegments()));
    return success();
  }
  if (auto attn = dyn_cast<modk::DecodeAttentionOp>(op)) {
    int64_t heads = attn.getNHeads(), d = width(attn.getQ());
    // Layer l's cache: K then V, each [B, seq_len, d_model].
    os << fmt::format(
        "  modk_cuda::decode_attention<{2}, {4}, {5}>({6}, {7}, {8}, B, {9}, "
        "{10}, {11}, args->kv_cache + (int64_t){1} * B * {2} * {3}, "
        "args->kv_cache + (int64_t){1} * B * {2} * {3} + B * {2} * {3}, "
        "args->kv_counts + (int64_t){0} * B, {12}, s);\n",
        attn.getLayer(), 2 * attn.getLayer(), seqLen, d, heads, d / heads,
        name(attn.getQ()), name(attn.getK()), name(attn.getV()),
        name(attn.getSegments()), name(attn.getPositions()),
        name(attn.getActive()), name(attn.getOutput()));
    return success();
  }
  if (auto route = dyn_cast<modk::DecodeRouteOp>(op)) {
    int64_t d = width(route.getGathered());
    std::string r = name(route.getScores());
    std::string decision = route.getCausalRouter() == "predictor"
                               ? name(route.getCausalScores())
                               : r;
    os << fmt::format("  // modk.decode_route layer {}\n", route.getLayer());
    os << fmt::format("  modk_cuda::decode_route<{}>({}, B, {}, {}, {}, {}, {}, "
                      "{}, {}, {}, s);\n",
                      d, name(route.getInput()), name(route.getRouterWeight()),
                      decision, name(route.getStepPositions()),
                      name(route.getActive()), r, name(route.getPositions()),
                      name(route.getSegments()), name(route.getMask()));
    os << fmt::format("  modk_cuda::decode_gather_rmsnorm<{}>({}, B, {}, {}, {}, "
                      "{}, {}, s);\n",
                      d, name(route.getInput()), name(route.getSegments()),
                      name(route.getNormWeight()),
                      floatLiteral(route.getEps().convertToDouble()),
                      name(route.getGathered()), name(route.getNormed()));
    return success();
  }
  return op->emitOpError("has no CUDA emitter");
}

/// Device selection, memory, copies and the status check: what a runtime
/// needs to drive the entries without linking CUDA itself.
void CudaEmitter::emitDeviceApi() {
  // sm_90a code runs on compute capability 9.0 only; sm_80 code (with its PTX)
  // on 8.0 and later.
  bool exact = StringRef(arch).ends_with("a");
  int archNumber = 0;
  StringRef(arch).drop_front(3).take_while(llvm::isDigit).getAsInteger(10,
                                                                     archNumber);
  os << fmt::format(R"cpp(
namespace {{
constexpr int kArchMajor = {0}, kArchMinor = {1};
constexpr bool kArchExact = {2};
cudaStream_t modcStream = nullptr;
bool modcReady = false;
/// First invalid token index seen on the device (~0 when none), and which
/// entry read it, for modc_cuda_sync's message.
unsigned long long *modcBadToken = nullptr;
const char *modcTokenEntry = "";
int64_t modcTokensPerSequence = 1;

/// Device scratch shared by the entries (one stream runs them in order);
/// grows, never shrinks. Null when the allocation fails.
char *modcScratchBuffer = nullptr;
size_t modcScratchCapacity = 0;
char *modcScratch(size_t bytes) {{
  bytes = bytes < 256 ? 256 : bytes;
  if (bytes <= modcScratchCapacity)
    return modcScratchBuffer;
  cudaStreamSynchronize(modcStream);
  cudaFree(modcScratchBuffer);
  modcScratchBuffer = nullptr;
  modcScratchCapacity = 0;
  if (cudaMalloc(&modcScratchBuffer, bytes) != cudaSuccess) {{
    modcScratchBuffer = nullptr;
    return nullptr;
  }}
  modcScratchCapacity = bytes;
  return modcScratchBuffer;
}}

int32_t cudaFail(const char *fn, const char *what, cudaError_t e) {{
  return fail(3, std::string(fn) + ": " + what + ": " + cudaGetErrorString(e));
}}
/// Arms the device token check of an entry that reads `n` tokens.
void checkTokens(const char *fn, const int32_t *tokens, const uint8_t *active,
                 int32_t *safe, int64_t n, int64_t perSequence,
                 cudaStream_t s) {{
  modcTokenEntry = fn;
  modcTokensPerSequence = perSequence;
  cudaMemsetAsync(modcBadToken, 0xff, sizeof(*modcBadToken), s);
  modc_glue::check_tokens(tokens, active, n, {3}, safe, modcBadToken, s);
}}
}} // namespace

extern "C" {{
{4} const char *modc_cuda_arch(void) {{ return "{5}"; }}

/// The cudaStream_t the entries enqueue on (null before modc_cuda_init), for
/// tools that time them with CUDA events.
{4} void *modc_cuda_stream(void) {{ return (void *)modcStream; }}

{4} int32_t modc_cuda_init(int32_t device) {{
  if (modcReady)
    return 0;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return fail(3, std::string("modc_cuda_init: no usable CUDA device (") +
                       (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") +
                       "); this package was compiled for {5}: run it on a GPU "
                       "or compile the model with --target cpu");
  if (device < 0 || device >= count)
    return fail(1, "modc_cuda_init: device " + std::to_string(device) +
                       " does not exist (" + std::to_string(count) +
                       " found)");
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
    return cudaFail("modc_cuda_init", "cudaGetDeviceProperties", e);
  bool fits = kArchExact ? prop.major == kArchMajor && prop.minor == kArchMinor
                         : prop.major * 10 + prop.minor >= kArchMajor * 10 + kArchMinor;
  if (!fits)
    return fail(3, "modc_cuda_init: this package was compiled for {5}; device " +
                       std::to_string(device) + " (" + prop.name +
                       ") is sm_" + std::to_string(prop.major) +
                       std::to_string(prop.minor) +
                       ": recompile with --arch sm_" + std::to_string(prop.major) +
                       std::to_string(prop.minor) + (prop.major == 9 ? "a" : ""));
  if ((e = cudaSetDevice(device)) != cudaSuccess)
    return cudaFail("modc_cuda_init", "cudaSetDevice", e);
  if ((e = cudaStreamCreateWithFlags(&modcStream, cudaStreamNonBlocking)) !=
      cudaSuccess)
    return cudaFail("modc_cuda_init", "cudaStreamCreate", e);
  if ((e = cudaMalloc(&modcBadToken, sizeof(*modcBadToken))) != cudaSuccess)
    return cudaFail("modc_cuda_init", "cudaMalloc", e);
  cudaMemset(modcBadToken, 0xff, sizeof(*modcBadToken));
  modcReady = true;
  return 0;
}}

{4} int32_t modc_cuda_alloc(uint64_t bytes, void **out) {{
  if (!out)
    return fail(1, "modc_cuda_alloc: out is null");
  *out = nullptr;
  if (bytes == 0)
    return 0;
  cudaError_t e = cudaMalloc(out, bytes);
  if (e != cudaSuccess)
    return fail(3, "modc_cuda_alloc: cannot allocate " + std::to_string(bytes) +
                       " bytes of device memory: " + cudaGetErrorString(e));
  return 0;
}}

{4} int32_t modc_cuda_free(void *p) {{
  cudaError_t e = cudaFree(p);
  return e == cudaSuccess ? 0 : cudaFail("modc_cuda_free", "cudaFree", e);
}}

/// kind: 0 host to device, 1 device to host, 2 device to device. Ordered
/// after the work already enqueued; returns when the copy is done.
{4} int32_t modc_cuda_copy(void *dst, const void *src, uint64_t bytes,
                             int32_t kind) {{
  if (kind < 0 || kind > 2)
    return fail(1, "modc_cuda_copy: kind must be 0, 1 or 2");
  if (bytes == 0)
    return 0;
  const cudaMemcpyKind kinds[] = {{cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                  cudaMemcpyDeviceToDevice}};
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kinds[kind], modcStream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(modcStream);
  return e == cudaSuccess ? 0 : cudaFail("modc_cuda_copy", "cudaMemcpy", e);
}}

{4} int32_t modc_cuda_memset(void *p, int32_t value, uint64_t bytes) {{
  cudaError_t e = cudaMemsetAsync(p, value, bytes, modcStream);
  return e == cudaSuccess ? 0 : cudaFail("modc_cuda_memset", "cudaMemset", e);
}}

/// Waits for the enqueued work; reports a kernel fault or an invalid token
/// the last entry found (its outputs are then not to be used).
{4} int32_t modc_cuda_sync(void) {{
  if (!modcReady)
    return fail(3, "modc_cuda_sync: call modc_cuda_init first");
  cudaError_t e = cudaStreamSynchronize(modcStream);
  if (e != cudaSuccess)
    return cudaFail("modc_cuda_sync", "a kernel failed", e);
  unsigned long long bad = ~0ull;
  cudaMemcpy(&bad, modcBadToken, sizeof(bad), cudaMemcpyDeviceToHost);
  if (bad != ~0ull) {{
    cudaMemset(modcBadToken, 0xff, sizeof(*modcBadToken));
    return fail(1, std::string(modcTokenEntry) + ": token at sequence " +
                       std::to_string(bad / modcTokensPerSequence) +
                       " position " + std::to_string(bad % modcTokensPerSequence) +
                       " is outside the vocabulary [0, {3}); the outputs are "
                       "invalid");
  }}
  return 0;
}}
}} // extern "C"
)cpp",
                    archNumber / 10, archNumber % 10, exact ? "true" : "false",
                    modk::EntryOp(entries.front()).getVocabSize(), kExport,
                    arch);
}

LogicalResult CudaEmitter::emit() {
  modk::EntryOp forward, grad, decode;
  if (failed(classifyEntries(forward, grad, decode)))
    return failure();
  std::string manifest = buildManifest(entries, "cuda", arch);
  emitBanner(forward);
  os << "// Target: CUDA " << arch << ".\n";
  os << kCommonPrelude << "\n" << kPrelude << "\n";
  if (grad)
    os << kTrainPrelude << "\n";
  if (decode)
    os << kDecodePrelude << "\n";
  os << R"cpp(
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
)cpp";
  os << abiStructs();
  os << R"cpp(
namespace {
thread_local std::string lastError;
int32_t fail(int32_t status, std::string message) {
  lastError = std::move(message);
  return status;
}
/// Waits for kernel `index` and prints the time since `tick`.
void modcProfile(int index, const char *what, cudaStream_t s,
                 std::chrono::steady_clock::time_point &tick) {
  cudaStreamSynchronize(s);
  auto now = std::chrono::steady_clock::now();
  std::fprintf(stderr, "modc profile: kernel %3d %-32s %9.3f ms\n", index, what,
               std::chrono::duration<double, std::milli>(now - tick).count());
  tick = now;
}
} // namespace

namespace modc_glue {
__global__ void check_tokens_kernel(const int32_t *tokens,
                                    const uint8_t *active, int64_t n,
                                    int32_t vocab, int32_t *safe,
                                    unsigned long long *bad) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  bool valid = tokens[i] >= 0 && tokens[i] < vocab;
  if (!valid && (!active || active[i]))
    atomicMin(bad, (unsigned long long)i);
  safe[i] = valid ? tokens[i] : 0;
}
/// Copies the tokens into `safe`, with 0 for any outside [0, vocab), and
/// records in *bad the least index of such a token (among the active ones
/// when `active` is given: a decode step). The kernels read only `safe`, so
/// a bad token costs a reported error, never an access out of bounds.
inline void check_tokens(const int32_t *tokens, const uint8_t *active,
                         int64_t n, int32_t vocab, int32_t *safe,
                         unsigned long long *bad, cudaStream_t s) {
  auto k = check_tokens_kernel;
  MODC_LAUNCH(k, (unsigned)modk_cuda::ceilDiv(n, 256), 256, 0, s, tokens,
              active, n, vocab, safe, bad);
}
__global__ void decisions_kernel(int32_t *out, const float *logits, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = logits[i] > 0.0f;
}
/// out[i] = logits[i] > 0: the causal decision of every token.
inline void decisions(int32_t *out, const float *logits, int64_t n,
                      cudaStream_t s) {
  auto k = decisions_kernel;
  MODC_LAUNCH(k, (unsigned)modk_cuda::ceilDiv(n, 256), 256, 0, s, out, logits,
              n);
}
} // namespace modc_glue

extern "C" {
)cpp";
  os << fmt::format("{} const char *modc_last_error(void) {{\n  return "
                    "lastError.c_str();\n}}\n",
                    kExport);
  os << fmt::format("{} uint32_t modc_abi_version(void) {{ return {}u; }}\n",
                    kExport, kPackageAbiVersion);
  os << kExport << " const char *modc_manifest_json(void) {\n  return "
     << "R\"modcmanifest(" << manifest << ")modcmanifest\";\n}\n";
  os << "} // extern \"C\"\n";
  emitDeviceApi();
  os << "extern \"C\" {\n";
  if (failed(emitEntry(forward)))
    return failure();
  if (grad) {
    if (failed(emitEntry(grad)))
      return failure();
    emitAdamW(grad);
  }
  if (decode) {
    if (failed(emitEntry(decode)))
      return failure();
    int64_t layers = 0, dModel = 0;
    if (auto model = llvm::json::parse(decode.getModel())) {
      layers = model->getAsObject()->getInteger("n_layers").value_or(0);
      dModel = model->getAsObject()->getInteger("d_model").value_or(0);
    }
    os << fmt::format("{} uint64_t modc_kv_cache_bytes(int64_t batch) {{\n  "
                      "return batch < 1 ? 0 : (uint64_t)batch * {}u;\n}}\n",
                      kExport, kvCacheBytesPerSequence(layers, seqLen, dModel));
  }
  os << "} // extern \"C\"\n";
  return success();
}

LogicalResult CudaEmitter::emitEntry(modk::EntryOp e) {
  beginEntry(e);
  bool isGrad = e.getSymName() == "grad";
  bool isDecode = e.getSymName() == "decode";
  std::string fn = functionName(e);
  // Scratch of the kernels that reduce in a fixed order (deterministic
  // gradients): one buffer for the largest, sized after the plan is walked.
  scratchNeeds.clear();
  os << fmt::format("static size_t {}_scratch_bytes(int64_t B);\n", fn);
  emitEntryPrologue(e, kExport);
  os << fmt::format("  if (!modcReady)\n    return fail(3, \"{}: call "
                    "modc_cuda_init first\");\n",
                    fn);
  os << "  cudaStream_t s = modcStream;\n";
  // The checked copy of the tokens lives after the kernels' scratch.
  int64_t tokensPerSequence = isGrad ? seqLen + 1 : isDecode ? 1 : seqLen;
  os << fmt::format(
      "  const size_t tokenOffset = ({0}_scratch_bytes(B) + 255) / 256 * 256;\n"
      "  char *scratch = modcScratch(tokenOffset + sizeof(int32_t) * B * {1});\n"
      "  if (!scratch)\n    return fail(3, \"{0}: cannot allocate \" + "
      "std::to_string(tokenOffset + sizeof(int32_t) * B * {1}) + \" bytes of "
      "device scratch\");\n"
      "  int32_t *safeTokens = reinterpret_cast<int32_t *>(scratch + "
      "tokenOffset);\n",
      fn, tokensPerSequence);
  os << "  static const bool profile = std::getenv(\"MODC_PROFILE\") != nullptr;\n";
  os << "  auto tick = std::chrono::steady_clock::now();\n";
  if (isDecode) {
    // One decode step is many small kernels: capture them once per set of
    // arguments (pointers, batch, parameter table) and replay the graph.
    os << R"cpp(  static cudaGraphExec_t graph = nullptr;
  static modc_decode_args graphArgs;
  static std::vector<const float *> graphParams;
  static char *graphScratch = nullptr;
  const size_t nParams = )cpp"
       << e.getParams().size() << R"cpp(;
  bool sameGraph = graph && graphScratch == scratch &&
                   std::memcmp(&graphArgs, args, sizeof(*args)) == 0 &&
                   std::equal(graphParams.begin(), graphParams.end(), args->params);
  if (!profile && sameGraph) {
    cudaError_t e = cudaGraphLaunch(graph, s);
    return e == cudaSuccess ? 0 : cudaFail("modc_decode", "cudaGraphLaunch", e);
  }
  if (!profile && cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) !=
                      cudaSuccess)
    return fail(3, "modc_decode: cannot capture the decode step");
)cpp";
  }
  os << fmt::format("  checkTokens(\"{}\", args->tokens, {}, safeTokens, B * "
                    "{}, {}, s);\n",
                    fn, isDecode ? "args->active" : "nullptr",
                    tokensPerSequence, tokensPerSequence);
  emitBufferNames(e);
  e.walk([&](modk::InputOp input) {
    if (input.getName() == "tokens")
      names[input] = "safeTokens";
  });
  int kernel = 0;
  for (Operation &op : e.getBody().front()) {
    if (!isKernel(op))
      continue;
    if (failed(emitKernel(&op)))
      return failure();
    std::string what = op.getName().getStringRef().str();
    if (auto gemm = dyn_cast<modk::GemmOp>(op))
      what += " " + gemm.getEpilogue().str();
    os << fmt::format("  if (profile) modcProfile({}, \"{}\", s, tick);\n",
                      kernel++, what);
  }
  if (isDecode)
    os << R"cpp(  if (!profile) {
    cudaGraph_t captured = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &captured);
    if (e != cudaSuccess)
      return cudaFail("modc_decode", "capturing the decode step", e);
    if (graph)
      cudaGraphExecDestroy(graph);
    graph = nullptr;
    e = cudaGraphInstantiate(&graph, captured, 0);
    cudaGraphDestroy(captured);
    if (e != cudaSuccess)
      return cudaFail("modc_decode", "cudaGraphInstantiate", e);
    graphArgs = *args;
    graphParams.assign(args->params, args->params + nParams);
    graphScratch = scratch;
    e = cudaGraphLaunch(graph, s);
    if (e != cudaSuccess)
      return cudaFail("modc_decode", "cudaGraphLaunch", e);
  }
)cpp";
  os << fmt::format("  cudaError_t launched = cudaGetLastError();\n  if "
                    "(launched != cudaSuccess)\n    return cudaFail(\"{}\", "
                    "\"launching the kernels\", launched);\n  return 0;\n}}\n",
                    fn);
  os << fmt::format("static size_t {}_scratch_bytes(int64_t B) {{\n  (void)B;\n"
                    "  size_t bytes = 0;\n",
                    fn);
  for (const std::string &need : scratchNeeds)
    os << fmt::format("  bytes = std::max<size_t>(bytes, {});\n", need);
  os << "  return bytes;\n}\n";
  return success();
}

void CudaEmitter::emitAdamW(modk::EntryOp grad) {
  std::string sizes, decay;
  for (Attribute p : grad.getParams()) {
    auto dict = cast<DictionaryAttr>(p);
    int64_t n = 1;
    for (Attribute d : dict.getAs<ArrayAttr>("shape"))
      n *= cast<IntegerAttr>(d).getInt();
    auto flag = dict.getAs<BoolAttr>("decay");
    sizes += fmt::format("{}, ", n);
    decay += flag && flag.getValue() ? "true, " : "false, ";
  }
  os << fmt::format(R"cpp({0} int32_t
modc_adamw(const modc_adamw_args *args) {{
  static const int64_t kSizes[] = {{{1}}};
  static const bool kDecay[] = {{{2}}};
  constexpr int kParams = {3};
  if (!args || !args->params || !args->grads || !args->m || !args->v ||
      !args->grad_norm)
    return fail(1, "modc_adamw: a required pointer is null");
  if (args->step < 1)
    return fail(1, "modc_adamw: step must be >= 1, got " + std::to_string(args->step));
  if (!modcReady)
    return fail(3, "modc_adamw: call modc_cuda_init first");
  cudaStream_t s = modcStream;
  char *scratch = modcScratch(modk_cuda::adamw_scratch_bytes(kSizes, kParams));
  if (!scratch)
    return fail(3, "modc_adamw: cannot allocate device scratch");
  // The update kernels skip when the norm is not finite, so a bad gradient
  // never reaches the weights; the norm is read back to say so, as the CPU
  // package does.
  modk_cuda::adamw_step(args->params, args->grads, args->m, args->v, kSizes,
                        kDecay, kParams, args->step, args->lr, args->beta1,
                        args->beta2, args->eps, args->weight_decay,
                        args->clip_norm, args->grad_norm, scratch, s);
  float norm = 0.0f;
  cudaError_t e = cudaMemcpyAsync(&norm, args->grad_norm, sizeof(float),
                                  cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(s);
  if (e != cudaSuccess)
    return cudaFail("modc_adamw", "the AdamW step", e);
  if (!std::isfinite(norm))
    return fail(1, "modc_adamw: the gradient norm is not finite");
  return 0;
}}
)cpp",
                    kExport, sizes, decay, grad.getParams().size());
}

LogicalResult modc::emitCuda(ModuleOp module, llvm::raw_ostream &os,
                             llvm::StringRef arch) {
  auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
  if (entries.empty())
    return module.emitError("expected a modk.entry to emit");
  if (!isSupportedCudaArch(arch))
    return module.emitError("unsupported CUDA architecture '")
           << arch << "'; expected sm_90a or sm_80";
  return CudaEmitter(entries, os, arch).emit();
}

bool modc::isSupportedCudaArch(llvm::StringRef arch) {
  return arch == "sm_90a" || arch == "sm_80";
}

void modc::registerModkToCudaTranslation() {
  static llvm::cl::opt<std::string> arch(
      "cuda-arch", llvm::cl::desc("CUDA architecture of --modk-to-cuda"),
      llvm::cl::init("sm_90a"));
  TranslateFromMLIRRegistration registration(
      "modk-to-cuda", "Emit the CUDA source of a GPU package",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("expected a builtin.module");
        return emitCuda(module, os, arch);
      },
      [](DialectRegistry &registry) {
        registry.insert<modk::ModkDialect, memref::MemRefDialect>();
      });
}
