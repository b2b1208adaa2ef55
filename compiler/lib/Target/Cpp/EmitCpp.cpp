//===- EmitCpp.cpp - modk launch plan to C++ --------------------*- C++ -*-===//
//
// The generated file is: the kernel prelude (templates), the ABI structs,
// then `modc_forward`, which places every buffer at its planned offset and
// calls one specialised kernel per modk op, with every shape a compile-time
// constant. Nothing in it is model-independent except the prelude.
//
//===----------------------------------------------------------------------===//

#include "../PlanEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>

#include <fmt/format.h>

using namespace mlir;
using namespace modc;

static const char kPrelude[] =
#include "CpuKernelsPrelude.inc"
    ;
static const char kTrainPrelude[] =
#include "CpuKernelsTrainPrelude.inc"
    ;
static const char kDecodePrelude[] =
#include "CpuKernelsDecodePrelude.inc"
    ;

namespace {
class CppEmitter : public PlanEmitter {
public:
  using PlanEmitter::PlanEmitter;
  LogicalResult emit();

private:
  std::string rows(Value segments) { return name(segments) + "[B]"; }
  LogicalResult emitKernel(Operation *op);
  void emitGemm(modk::GemmOp op);
  LogicalResult emitEntry(modk::EntryOp entry);
  void emitAdamW(modk::EntryOp grad);
};
} // namespace

void CppEmitter::emitGemm(modk::GemmOp op) {
  auto weightShape = cast<MemRefType>(op.getWeights()[0].getType()).getShape();
  int64_t n = weightShape[0], k = weightShape[1];
  std::string a = name(op.getInput()), y = name(op.getOutput());
  std::string w = name(op.getWeights()[0]), m = rows(op.getSegments());
  StringRef e = op.getEpilogue();
  os << fmt::format("  {{ // modk.gemm [{} x {}] epilogue={}\n", n, k,
                    e.str());
  os << fmt::format("    const int64_t rows = {};\n", m);
  if (e == "none" || e == "gelu" || e == "rope") {
    os << fmt::format("    modk_cpu::linear<{}, {}>({}, rows, {}, {});\n", n, k,
                      a, w, y);
    if (e == "gelu")
      os << fmt::format("    modk_cpu::gelu<{}>({}, rows);\n", n, y);
    if (e == "rope") {
      int64_t heads = *op.getNHeads();
      os << fmt::format("    modk_cpu::rope<{}, {}>({}, rows, {}, {});\n",
                        heads, n / heads, y, name(op.getExtra()[0]),
                        floatLiteral(op.getRopeTheta()->convertToDouble()));
    }
  } else if (e == "residual_add") {
    // Accumulate into the stream: beta = 1 is the fused residual add.
    std::string residual = name(op.getExtra()[0]);
    if (residual != y)
      os << fmt::format("    std::memcpy({}, {}, sizeof(float) * rows * {});\n",
                        y, residual, n);
    os << fmt::format(
        "    if (rows > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, "
        "(int)rows, {0}, {1}, 1.0f, {2}, {1}, {3}, {1}, 1.0f, {4}, {0});\n",
        n, k, a, w, y);
  } else if (e == "swiglu") {
    std::string gated = name(op.getExtra()[0]);
    os << fmt::format("    modk_cpu::linear<{}, {}>({}, rows, {}, {});\n", n, k,
                      a, w, gated);
    os << fmt::format("    modk_cpu::linear<{}, {}>({}, rows, {}, {});\n", n, k,
                      a, name(op.getWeights()[1]), y);
    os << fmt::format("    modk_cpu::swiglu<{}>({}, {}, rows);\n", n, gated, y);
  } else if (e == "gate_scale_scatter") {
    auto extra = op.getExtra();
    int gate = gateKind(*op.getGate());
    os << fmt::format("    modk_cpu::linear<{}, {}>({}, rows, {}, {});\n", n, k,
                      a, w, name(extra[0]));
    if (entry.getSymName() == "decode")
      os << fmt::format("    modk_cpu::decode_gate_scale_scatter<{}, {}>({}, B, "
                        "{}, {}, {}, {});\n",
                        n, gate, y, name(op.getSegments()), name(extra[1]),
                        name(extra[2]), name(extra[0]));
    else
      os << fmt::format("    modk_cpu::gate_scale_scatter<{}, {}, {}>({}, B, {}, "
                        "{}, {}, {}, {});\n",
                        seqLen, n, gate, y, name(op.getSegments()),
                        name(extra[3]), name(extra[1]), name(extra[2]),
                        name(extra[0]));
  }
  os << "  }\n";
}

LogicalResult CppEmitter::emitKernel(Operation *op) {
  if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
    emitGemm(gemm);
    return success();
  }
  if (auto ids = dyn_cast<modk::IdentityRowsOp>(op)) {
    os << fmt::format("  modk_cpu::identity_segments<{}>(B, {}, {});\n", seqLen,
                      name(ids.getPositions()), name(ids.getSegments()));
    return success();
  }
  if (auto embed = dyn_cast<modk::EmbedOp>(op)) {
    os << fmt::format("  modk_cpu::embed<{}>({}, B * {}, {}, {});\n",
                      width(embed.getOutput()), name(embed.getTokens()),
                      width(embed.getTokens()), name(embed.getTable()),
                      name(embed.getOutput()));
    return success();
  }
  if (auto norm = dyn_cast<modk::RMSNormOp>(op)) {
    os << fmt::format("  modk_cpu::rmsnorm<{}>({}, {}, {}, {}, {});\n",
                      width(norm.getOutput()), name(norm.getInput()),
                      rows(norm.getSegments()), name(norm.getWeight()),
                      floatLiteral(norm.getEps().convertToDouble()),
                      name(norm.getOutput()));
    return success();
  }
  if (auto attn = dyn_cast<modk::AttentionOp>(op)) {
    int64_t heads = attn.getNHeads();
    os << fmt::format(
        "  modk_cpu::causal_attention<{}, {}>({}, {}, {}, B, {}, {}, {});\n",
        heads, width(attn.getQ()) / heads, name(attn.getQ()),
        name(attn.getK()), name(attn.getV()), name(attn.getSegments()),
        name(attn.getPositions()), name(attn.getOutput()));
    if (hasDecode && attn.getLayer() && entry.getSymName() == "forward") {
      // Causal prefill: the same keys and values fill the decode cache.
      int64_t layer = *attn.getLayer(), d = width(attn.getK());
      os << fmt::format(
          "  if (args->kv_cache)\n    modk_cpu::cache_append<{0}, {1}>({2}, {3}, "
          "B, {4}, {5}, args->prefill_lengths, args->kv_cache + (int64_t){6} * "
          "B * {0} * {1}, args->kv_cache + (int64_t){7} * B * {0} * {1}, "
          "args->kv_counts + (int64_t){8} * B);\n",
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
      os << fmt::format("  std::memcpy({}, {}, sizeof(float) * {} * {});\n",
                        out, lhs, rows(add.getSegments()), d);
    os << fmt::format("  modk_cpu::add_inplace<{}>({}, {}, {});\n", d, out,
                      name(add.getRhs()), rows(add.getSegments()));
    return success();
  }
  if (auto predictor = dyn_cast<modk::PredictorOp>(op)) {
    auto fc1 = cast<MemRefType>(predictor.getFc1Weight().getType()).getShape();
    if (predictor.getCausalOnly())
      os << "  if (causal || args->causal_decisions) // only causal decisions "
            "read it\n";
    os << fmt::format("    modk_cpu::predictor<{}, {}>({}, B * {}, {}, {}, {}, "
                      "{}, {}, {});\n",
                      fc1[1], fc1[0], name(predictor.getInput()),
                      cast<MemRefType>(predictor.getInput().getType()).getDimSize(1),
                      name(predictor.getFc1Weight()),
                      name(predictor.getFc1Bias()),
                      name(predictor.getFc2Weight()),
                      name(predictor.getFc2Bias()), name(predictor.getHidden()),
                      name(predictor.getOutput()));
    return success();
  }
  if (auto route = dyn_cast<modk::RouteSelectGatherOp>(op)) {
    int64_t d = width(route.getGathered());
    std::string pos = name(route.getPositions()), seg = name(route.getSegments());
    std::string mask = name(route.getMask()), r = name(route.getScores());
    os << fmt::format("  {{ // modk.route_select_gather layer {} k={}\n",
                      route.getLayer(), route.getK());
    os << fmt::format("    modk_cpu::router_logits<{}, {}>({}, B, {}, {});\n",
                      seqLen, d, name(route.getInput()),
                      name(route.getRouterWeight()), r);
    StringRef causal = route.getCausalRouter();
    if (causal != "none") {
      std::string logits =
          causal == "predictor" ? name(route.getCausalScores()) : r;
      os << fmt::format("    if (causal)\n      modk_cpu::select_causal<{}>({}, "
                        "B, {}, {}, {});\n    else\n  ",
                        seqLen, logits, pos, seg, mask);
    }
    os << fmt::format("    modk_cpu::select_topk<{}, {}>({}, B, {}, {}, {});\n",
                      seqLen, route.getK(), r, pos, seg, mask);
    if (causal != "none") {
      // The causal decision of every token on this pass's stream, on request.
      std::string logits =
          causal == "predictor" ? name(route.getCausalScores()) : r;
      os << fmt::format("    if (args->causal_decisions)\n      for (int64_t i = "
                        "0; i < B * {0}; ++i)\n        args->causal_decisions"
                        "[(int64_t){1} * B * {0} + i] = {2}[i] > 0.0f;\n",
                        seqLen, routedIndex[route.getLayer()], logits);
    }
    os << fmt::format("    modk_cpu::gather_rmsnorm<{}, {}>({}, B, {}, {}, {}, "
                      "{}, {}, {});\n",
                      seqLen, d, name(route.getInput()), seg, pos,
                      name(route.getNormWeight()),
                      floatLiteral(route.getEps().convertToDouble()),
                      name(route.getGathered()), name(route.getNormed()));
    os << "  }\n";
    return success();
  }
  if (auto zero = dyn_cast<modk::ZeroOp>(op)) {
    Value out = zero.getOutput();
    os << fmt::format("  std::memset({}, 0, sizeof(*{}) * {});\n", name(out),
                      name(out), elements(out));
    return success();
  }
  if (auto copy = dyn_cast<modk::CopyOp>(op)) {
    Value out = copy.getOutput();
    os << fmt::format("  std::memcpy({}, {}, sizeof(*{}) * {});\n", name(out),
                      name(copy.getInput()), name(out), elements(out));
    return success();
  }
  if (auto split = dyn_cast<modk::SplitTokensOp>(op)) {
    os << fmt::format("  for (int64_t b = 0; b < B; ++b)\n"
                      "    for (int64_t i = 0; i < {0}; ++i) {{\n"
                      "      {1}[b * {0} + i] = {3}[b * {4} + i];\n"
                      "      {2}[b * {0} + i] = {3}[b * {4} + i + 1];\n"
                      "    }}\n",
                      seqLen, name(split.getInputs()), name(split.getTargets()),
                      name(split.getTokens()), seqLen + 1);
    return success();
  }
  if (auto act = dyn_cast<modk::ActivationOp>(op)) {
    int64_t n = width(act.getOutput());
    std::string out = name(act.getOutput()), r = rows(act.getSegments());
    os << fmt::format("  std::memcpy({}, {}, sizeof(float) * {} * {});\n", out,
                      name(act.getUp()), r, n);
    if (act.getKind() == "swiglu")
      os << fmt::format("  modk_cpu::swiglu<{}>({}, {}, {});\n", n,
                        name(act.getGate()), out, r);
    else
      os << fmt::format("  modk_cpu::gelu<{}>({}, {});\n", n, out, r);
    return success();
  }
  if (auto ce = dyn_cast<modk::CrossEntropyOp>(op)) {
    int64_t vocab = width(ce.getLogits());
    std::string l = name(ce.getLosses());
    os << fmt::format(
        "  {{ // mean next-token cross-entropy\n"
        "    const int64_t rows = B * {0};\n"
        "    const double sum = modk_cpu::cross_entropy<{1}>({2}, {3}, rows, "
        "1.0f / (float)rows, {4});\n"
        "    {5}[1] = (float)(sum / (double)rows);\n"
        "    {5}[0] = {5}[1];\n    {5}[2] = 0.0f;\n  }}\n",
        seqLen, vocab, name(ce.getLogits()), name(ce.getTargets()),
        name(ce.getDlogits()), l);
    return success();
  }
  if (auto bce = dyn_cast<modk::BCELossOp>(op)) {
    std::string l = name(bce.getLosses());
    double weight = bce.getWeight().convertToDouble();
    os << fmt::format(
        "  {{ // causal-router loss, mean over [B, S] and routed layers\n"
        "    const double scale = 1.0 / ((double)B * {0} * {1});\n"
        "    const double sum = modk_cpu::bce_with_logits<{0}>({2}, {3}, B, "
        "(float)({4:.17g} * scale), {5});\n"
        "    {6}[2] += (float)(sum * scale);\n"
        "    {6}[0] += (float)({4:.17g} * sum * scale);\n  }}\n",
        seqLen, bce.getNRouted(), name(bce.getLogits()), name(bce.getMask()),
        weight, name(bce.getDlogits()), l);
    return success();
  }
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op)) {
    auto w = cast<MemRefType>(dgrad.getWeight().getType()).getShape();
    os << fmt::format("  modk_cpu::linear_dgrad<{}, {}>({}, {}, {}, {}, {});\n",
                      w[0], w[1], name(dgrad.getDy()), rows(dgrad.getSegments()),
                      name(dgrad.getWeight()), name(dgrad.getDa()),
                      dgrad.getAccumulate() ? "true" : "false");
    return success();
  }
  if (auto wgrad = dyn_cast<modk::GemmWgradOp>(op)) {
    auto w = cast<MemRefType>(wgrad.getDw().getType()).getShape();
    os << fmt::format("  modk_cpu::linear_wgrad<{}, {}>({}, {}, {}, {}, true);\n",
                      w[0], w[1], name(wgrad.getDy()), rows(wgrad.getSegments()),
                      name(wgrad.getInput()), name(wgrad.getDw()));
    return success();
  }
  if (auto norm = dyn_cast<modk::RMSNormGradOp>(op)) {
    os << fmt::format(
        "  modk_cpu::rmsnorm_grad<{}>({}, {}, {}, {}, {}, {}, {}, {});\n",
        width(norm.getInput()), name(norm.getInput()), rows(norm.getSegments()),
        name(norm.getWeight()), floatLiteral(norm.getEps().convertToDouble()),
        name(norm.getDy()), name(norm.getDx()), name(norm.getDw()),
        norm.getAccumulate() ? "true" : "false");
    return success();
  }
  if (auto rope = dyn_cast<modk::RopeGradOp>(op)) {
    int64_t heads = rope.getNHeads();
    os << fmt::format("  modk_cpu::rope_grad<{}, {}>({}, {}, {}, {});\n", heads,
                      width(rope.getGrad()) / heads, name(rope.getGrad()),
                      rows(rope.getSegments()), name(rope.getPositions()),
                      floatLiteral(rope.getRopeTheta().convertToDouble()));
    return success();
  }
  if (auto attn = dyn_cast<modk::AttentionGradOp>(op)) {
    int64_t heads = attn.getNHeads();
    os << fmt::format("  modk_cpu::causal_attention_grad<{}, {}>({}, {}, {}, {}, "
                      "{}, B, {}, {}, {}, {}, {});\n",
                      heads, width(attn.getQ()) / heads, name(attn.getQ()),
                      name(attn.getK()), name(attn.getV()), name(attn.getO()),
                      name(attn.getDout()), name(attn.getSegments()),
                      name(attn.getPositions()), name(attn.getDq()),
                      name(attn.getDk()), name(attn.getDv()));
    return success();
  }
  if (auto act = dyn_cast<modk::ActivationGradOp>(op)) {
    int64_t n = width(act.getUp());
    if (act.getKind() == "swiglu")
      os << fmt::format("  modk_cpu::swiglu_grad<{}>({}, {}, {}, {}, {}, {});\n",
                        n, name(act.getGate()), name(act.getUp()),
                        name(act.getDu()), rows(act.getSegments()),
                        name(act.getDgate()), name(act.getDup()));
    else
      os << fmt::format("  modk_cpu::gelu_grad<{}>({}, {}, {}, {});\n", n,
                        name(act.getUp()), name(act.getDu()),
                        rows(act.getSegments()), name(act.getDup()));
    return success();
  }
  if (auto scatter = dyn_cast<modk::ScatterGradOp>(op)) {
    int gate = gateKind(scatter.getGate());
    os << fmt::format("  modk_cpu::gate_scale_scatter_grad<{}, {}, {}>({}, B, {}, "
                      "{}, {}, {}, {}, {});\n",
                      seqLen, width(scatter.getDy()), gate,
                      name(scatter.getDy()), name(scatter.getSegments()),
                      name(scatter.getPositions()), name(scatter.getScores()),
                      name(scatter.getUpdate()), name(scatter.getDf()),
                      name(scatter.getDscores()));
    return success();
  }
  if (auto gather = dyn_cast<modk::GatherGradOp>(op)) {
    os << fmt::format("  modk_cpu::gather_grad<{}, {}>({}, B, {}, {}, {});\n",
                      seqLen, width(gather.getDx()), name(gather.getDgathered()),
                      name(gather.getSegments()), name(gather.getPositions()),
                      name(gather.getDx()));
    return success();
  }
  if (auto router = dyn_cast<modk::RouterGradOp>(op)) {
    os << fmt::format("  modk_cpu::router_grad<{}, {}>({}, B, {}, {}, {}, {});\n",
                      seqLen, width(router.getInput()), name(router.getInput()),
                      name(router.getWeight()), name(router.getDscores()),
                      name(router.getDx()), name(router.getDw()));
    return success();
  }
  if (auto pred = dyn_cast<modk::PredictorGradOp>(op)) {
    auto fc1 = cast<MemRefType>(pred.getFc1Weight().getType()).getShape();
    os << fmt::format("  modk_cpu::predictor_grad<{}, {}>({}, B * {}, {}, {}, {}, "
                      "{}, {}, {}, {}, {}, {});\n",
                      fc1[1], fc1[0], name(pred.getInput()), seqLen,
                      name(pred.getFc1Weight()), name(pred.getFc1Bias()),
                      name(pred.getFc2Weight()), name(pred.getDp()),
                      name(pred.getHidden()), name(pred.getDfc1Weight()),
                      name(pred.getDfc1Bias()), name(pred.getDfc2Weight()),
                      name(pred.getDfc2Bias()));
    return success();
  }
  if (auto embed = dyn_cast<modk::EmbedGradOp>(op)) {
    os << fmt::format("  modk_cpu::embed_grad<{}>({}, B * {}, {}, {});\n",
                      width(embed.getDtable()), name(embed.getTokens()), seqLen,
                      name(embed.getDx()), name(embed.getDtable()));
    return success();
  }
  if (auto rowsOp = dyn_cast<modk::DecodeRowsOp>(op)) {
    os << fmt::format("  modk_cpu::decode_rows<{}>({}, {}, B, {}, {});\n",
                      seqLen, name(rowsOp.getStepPositions()),
                      name(rowsOp.getActive()), name(rowsOp.getPositions()),
                      name(rowsOp.getSegments()));
    return success();
  }
  if (auto attn = dyn_cast<modk::DecodeAttentionOp>(op)) {
    int64_t heads = attn.getNHeads(), d = width(attn.getQ());
    // Layer l's cache: K then V, each [B, seq_len, d_model].
    os << fmt::format(
        "  {{ // layer {0} KV cache\n"
        "    float *cacheK = args->kv_cache + (int64_t){1} * B * {2} * {3};\n"
        "    float *cacheV = cacheK + B * {2} * {3};\n"
        "    modk_cpu::decode_attention<{2}, {4}, {5}>({6}, {7}, {8}, B, {9}, "
        "{10}, {11}, cacheK, cacheV, args->kv_counts + (int64_t){0} * B, "
        "{12});\n  }}\n",
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
    os << fmt::format("  {{ // modk.decode_route layer {}\n", route.getLayer());
    os << fmt::format("    modk_cpu::decode_route<{}>({}, B, {}, {}, {}, {}, {}, "
                      "{}, {}, {});\n",
                      d, name(route.getInput()), name(route.getRouterWeight()),
                      decision, name(route.getStepPositions()),
                      name(route.getActive()), r, name(route.getPositions()),
                      name(route.getSegments()), name(route.getMask()));
    os << fmt::format("    modk_cpu::decode_gather_rmsnorm<{}>({}, B, {}, {}, {}, "
                      "{}, {});\n  }}\n",
                      d, name(route.getInput()), name(route.getSegments()),
                      name(route.getNormWeight()),
                      floatLiteral(route.getEps().convertToDouble()),
                      name(route.getGathered()), name(route.getNormed()));
    return success();
  }
  return op->emitOpError("has no C++ emitter");
}

LogicalResult CppEmitter::emit() {
  modk::EntryOp forward, grad, decode;
  if (failed(classifyEntries(forward, grad, decode)))
    return failure();

  std::string manifest = buildManifest(entries, "cpu");
  emitBanner(forward);
  os << kPrelude << "\n";
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
)cpp";
  os << abiStructs();
  os << R"cpp(
namespace {
thread_local std::string lastError;
int32_t fail(int32_t status, std::string message) {
  lastError = std::move(message);
  return status;
}
/// Prints the time since `tick` for kernel `index` and restarts the clock.
void modcProfile(int index, const char *what,
                 std::chrono::steady_clock::time_point &tick) {
  auto now = std::chrono::steady_clock::now();
  std::fprintf(stderr, "modc profile: kernel %3d %-32s %9.3f ms\n", index, what,
               std::chrono::duration<double, std::milli>(now - tick).count());
  tick = now;
}
} // namespace

extern "C" {
__attribute__((visibility("default"))) const char *modc_last_error(void) {
  return lastError.c_str();
}
)cpp";
  os << fmt::format("__attribute__((visibility(\"default\"))) uint32_t "
                    "modc_abi_version(void) {{ return {}u; }}\n",
                    kPackageAbiVersion);
  os << "__attribute__((visibility(\"default\"))) const char "
        "*modc_manifest_json(void) {\n  return R\"modcmanifest("
     << manifest << ")modcmanifest\";\n}\n";
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
    os << fmt::format("__attribute__((visibility(\"default\"))) uint64_t "
                      "modc_kv_cache_bytes(int64_t batch) {{\n  return batch < 1 "
                      "? 0 : (uint64_t)batch * {}u;\n}}\n",
                      kvCacheBytesPerSequence(layers, seqLen, dModel));
  }
  os << "} // extern \"C\"\n";
  return success();
}

LogicalResult CppEmitter::emitEntry(modk::EntryOp e) {
  beginEntry(e);
  bool isGrad = e.getSymName() == "grad";
  bool isDecode = e.getSymName() == "decode";
  std::string fn = functionName(e);
  emitEntryPrologue(e, "__attribute__((visibility(\"default\")))");
  if (hasDecode && !isDecode && !isGrad)
    os << fmt::format(
        "  if (args->kv_cache)\n    for (int64_t b = 0; b < args->batch; ++b)\n"
        "      if (args->prefill_lengths[b] < 0 || args->prefill_lengths[b] > "
        "{0})\n        return fail(1, \"modc_forward: prefill length \" + "
        "std::to_string(args->prefill_lengths[b]) + \" of sequence \" + "
        "std::to_string(b) + \" is outside [0, {0}]\");\n",
        seqLen);
  int64_t tokensPerSequence = isGrad ? seqLen + 1 : seqLen;
  if (isDecode)
    os << fmt::format(
        "  for (int64_t b = 0; b < B; ++b) {{\n"
        "    if (!args->active[b])\n      continue;\n"
        "    if (args->tokens[b] < 0 || args->tokens[b] >= {1})\n"
        "      return fail(1, \"modc_decode: token \" + "
        "std::to_string(args->tokens[b]) + \" of sequence \" + "
        "std::to_string(b) + \" is outside the vocabulary [0, {1})\");\n"
        "    if (args->positions[b] < 0 || args->positions[b] >= {0})\n"
        "      return fail(1, \"modc_decode: position \" + "
        "std::to_string(args->positions[b]) + \" of sequence \" + "
        "std::to_string(b) + \" is outside the context [0, {0})\");\n  }}\n",
        seqLen, e.getVocabSize());
  else
    os << fmt::format(
      "  for (int64_t i = 0; i < B * {0}; ++i)\n    if (args->tokens[i] < 0 || "
      "args->tokens[i] >= {1})\n      return fail(1, \"{2}: token \" "
      "+ std::to_string(args->tokens[i]) + \" at sequence \" + "
      "std::to_string(i / {0}) + \" position \" + std::to_string(i % {0}) + "
      "\" is outside the vocabulary [0, {1})\");\n",
      tokensPerSequence, e.getVocabSize(), fn);
  emitBufferNames(e);
  // MODC_PROFILE=1 in the environment times every kernel of the plan.
  os << "  static const bool profile = std::getenv(\"MODC_PROFILE\") != nullptr;\n";
  os << "  auto tick = std::chrono::steady_clock::now();\n";
  int kernel = 0;
  for (Operation &op : e.getBody().front()) {
    if (!isKernel(op))
      continue;
    if (failed(emitKernel(&op)))
      return failure();
    std::string what = op.getName().getStringRef().str();
    if (auto gemm = dyn_cast<modk::GemmOp>(op))
      what += " " + gemm.getEpilogue().str();
    os << fmt::format("  if (profile) modcProfile({}, \"{}\", tick);\n",
                      kernel++, what);
  }
  os << "  return 0;\n}\n";
  return success();
}

void CppEmitter::emitAdamW(modk::EntryOp grad) {
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
  os << fmt::format(R"cpp(__attribute__((visibility("default"))) int32_t
modc_adamw(const modc_adamw_args *args) {{
  static const int64_t kSizes[] = {{{0}}};
  static const bool kDecay[] = {{{1}}};
  constexpr int kParams = {2};
  if (!args || !args->params || !args->grads || !args->m || !args->v)
    return fail(1, "modc_adamw: a required pointer is null");
  if (args->step < 1)
    return fail(1, "modc_adamw: step must be >= 1, got " + std::to_string(args->step));
  double squares = 0.0;
  for (int i = 0; i < kParams; ++i)
    squares += modk_cpu::sum_squares(args->grads[i], kSizes[i]);
  const double norm = std::sqrt(squares);
  if (args->grad_norm)
    *args->grad_norm = (float)norm;
  // A non-finite gradient must not reach the weights.
  if (!std::isfinite(norm))
    return fail(1, "modc_adamw: the gradient norm is not finite");
  const float scale = args->clip_norm > 0 && norm > args->clip_norm
                          ? (float)(args->clip_norm / norm) : 1.0f;
  for (int i = 0; i < kParams; ++i)
    modk_cpu::adamw(args->params[i], args->grads[i], args->m[i], args->v[i],
                    kSizes[i], args->lr, args->beta1, args->beta2, args->eps,
                    kDecay[i] ? args->weight_decay : 0.0f, scale, args->step);
  return 0;
}}
)cpp",
                    sizes, decay, grad.getParams().size());
}

LogicalResult modc::emitCpp(ModuleOp module, llvm::raw_ostream &os) {
  auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
  if (entries.empty())
    return module.emitError("expected a modk.entry to emit");
  return CppEmitter(entries, os).emit();
}

void modc::registerModkToCppTranslation() {
  TranslateFromMLIRRegistration registration(
      "modk-to-cpp", "Emit the C++ source of a CPU package",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("expected a builtin.module");
        return emitCpp(module, os);
      },
      [](DialectRegistry &registry) {
        registry.insert<modk::ModkDialect, memref::MemRefDialect>();
      });
}
