//===- EmitCpp.cpp - modk launch plan to C++ --------------------*- C++ -*-===//
//
// The generated file is: the kernel prelude (templates), the ABI structs,
// then `modc_forward`, which places every buffer at its planned offset and
// calls one specialised kernel per modk op, with every shape a compile-time
// constant. Nothing in it is model-independent except the prelude.
//
//===----------------------------------------------------------------------===//

#include "modc/Target/Package.h"

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

namespace {
class CppEmitter {
public:
  CppEmitter(modk::EntryOp entry, llvm::raw_ostream &os)
      : entry(entry), os(os), seqLen(entry.getSeqLen()) {}

  LogicalResult emit();

private:
  std::string name(Value v) { return names.lookup(v); }
  static std::string cType(Type element) {
    if (element.isF32())
      return "float";
    if (element.isInteger(32))
      return "int32_t";
    return "int64_t";
  }
  static int64_t width(Value v) {
    return cast<MemRefType>(v.getType()).getShape().back();
  }
  std::string rows(Value segments) { return name(segments) + "[B]"; }
  LogicalResult emitKernel(Operation *op);
  void emitGemm(modk::GemmOp op);

  modk::EntryOp entry;
  llvm::raw_ostream &os;
  int64_t seqLen;
  llvm::DenseMap<Value, std::string> names;
  bool causalCapable = false;
};
} // namespace

static std::string floatLiteral(double v) {
  return fmt::format("static_cast<float>({:.17g})", v);
}

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
    StringRef gate = *op.getGate();
    int gateKind = gate == "linear" ? 0 : gate == "sigmoid" ? 1 : 2;
    os << fmt::format("    modk_cpu::linear<{}, {}>({}, rows, {}, {});\n", n, k,
                      a, w, name(extra[0]));
    os << fmt::format("    modk_cpu::gate_scale_scatter<{}, {}, {}>({}, B, {}, "
                      "{}, {}, {}, {});\n",
                      seqLen, n, gateKind, y, name(op.getSegments()),
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
                      width(embed.getOutput()), name(embed.getTokens()), seqLen,
                      name(embed.getTable()), name(embed.getOutput()));
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
    os << "  if (causal) // only the causal decision reads the predictor\n";
    os << fmt::format("    modk_cpu::predictor<{}, {}>({}, B * {}, {}, {}, {}, "
                      "{}, {}, {});\n",
                      fc1[1], fc1[0], name(predictor.getInput()), seqLen,
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
    os << fmt::format("    modk_cpu::gather_rmsnorm<{}, {}>({}, B, {}, {}, {}, "
                      "{}, {}, {});\n",
                      seqLen, d, name(route.getInput()), seg, pos,
                      name(route.getNormWeight()),
                      floatLiteral(route.getEps().convertToDouble()),
                      name(route.getGathered()), name(route.getNormed()));
    os << "  }\n";
    return success();
  }
  return op->emitOpError("has no C++ emitter");
}

LogicalResult CppEmitter::emit() {
  if (!entry.getWorkspaceBytesPerSequence())
    return entry.emitOpError("has no memory plan; run modk-plan-memory first");
  for (Attribute m : entry.getModes())
    causalCapable |= cast<StringAttr>(m).getValue() == "causal";

  // Routed outputs are laid out [n_routed, B, S] in ascending layer order.
  std::map<int64_t, int> routedIndex;
  entry.walk([&](modk::OutputOp out) {
    StringRef n = out.getName();
    int64_t layer;
    if (n.consume_front("routed.") && !n.getAsInteger(10, layer))
      routedIndex[layer] = 0;
  });
  int next = 0;
  for (auto &[layer, index] : routedIndex)
    index = next++;

  std::string manifest = buildManifest(entry, "cpu");
  os << "// Generated by modc " MODC_VERSION " from model '"
     << fmt::format("{}", llvm::json::parse(entry.getModel())
                              ->getAsObject()
                              ->getString("name")
                              .value_or("model")
                              .str())
     << "'. Do not edit.\n";
  os << kPrelude << "\n";
  os << R"cpp(
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
typedef struct modc_forward_args {
  int64_t batch;
  int64_t seq_len;
  int32_t mode;
  const int32_t *tokens;
  const float *const *params;
  float *logits;
  int32_t *routed;
  void *workspace;
} modc_forward_args;
}

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
  int64_t perSequence = *entry.getWorkspaceBytesPerSequence();
  os << fmt::format("__attribute__((visibility(\"default\"))) uint64_t "
                    "modc_forward_workspace_bytes(int64_t batch) {{\n  return "
                    "batch < 1 ? 0 : (uint64_t)batch * {}u;\n}}\n",
                    perSequence);

  os << R"cpp(
__attribute__((visibility("default"))) int32_t
modc_forward(const modc_forward_args *args) {
  if (!args)
    return fail(1, "modc_forward: arguments are null");
  if (args->batch < 1)
    return fail(1, "modc_forward: batch must be >= 1, got " +
                       std::to_string(args->batch));
)cpp";
  os << fmt::format(
      "  if (args->seq_len != {0})\n    return fail(1, \"modc_forward: this "
      "package was compiled for seq_len {0}, got \" + "
      "std::to_string(args->seq_len));\n",
      seqLen);
  os << "  if (args->mode != 0 && args->mode != 1)\n    return fail(1, "
        "\"modc_forward: mode must be 0 (topk) or 1 (causal)\");\n";
  if (!causalCapable)
    os << "  if (args->mode == 1)\n    return fail(2, \"modc_forward: causal "
          "mode needs mod.causal_router aux_loss or predictor; this model has "
          "none\");\n";
  os << "  if (!args->tokens || !args->params || !args->logits || "
        "!args->workspace"
     << (routedIndex.empty() ? "" : " || !args->routed")
     << ")\n    return fail(1, \"modc_forward: a required pointer is "
        "null\");\n";
  // BLAS takes row counts as int: refuse batches whose rows would not fit.
  os << fmt::format("  if (args->batch > {0} / {1})\n    return fail(1, "
                    "\"modc_forward: batch \" + std::to_string(args->batch) + "
                    "\" is too large (at most {2})\");\n",
                    INT32_MAX, seqLen, INT32_MAX / seqLen);
  os << "  const int64_t B = args->batch;\n";
  os << "  const bool causal = args->mode == 1;\n  (void)causal;\n";
  os << fmt::format(
      "  for (int64_t i = 0; i < B * {0}; ++i)\n    if (args->tokens[i] < 0 || "
      "args->tokens[i] >= {1})\n      return fail(1, \"modc_forward: token \" "
      "+ std::to_string(args->tokens[i]) + \" at sequence \" + "
      "std::to_string(i / {0}) + \" position \" + std::to_string(i % {0}) + "
      "\" is outside the vocabulary [0, {1})\");\n",
      seqLen, entry.getVocabSize());
  os << "  char *ws = static_cast<char *>(args->workspace);\n  (void)ws;\n";

  // Name every buffer.
  llvm::StringMap<int> paramIndex;
  for (auto [i, p] : llvm::enumerate(entry.getParams()))
    paramIndex[cast<DictionaryAttr>(p).getAs<StringAttr>("name")] = i;
  int counter = 0;
  for (Operation &op : entry.getBody().front()) {
    if (auto param = dyn_cast<modk::ParamOp>(op)) {
      std::string n = fmt::format("w{}", paramIndex[param.getName()]);
      names[param] = n;
      os << fmt::format("  const float *{} = args->params[{}]; // {}\n", n,
                        paramIndex[param.getName()], param.getName().str());
    } else if (auto input = dyn_cast<modk::InputOp>(op)) {
      names[input] = "args->tokens";
    } else if (auto out = dyn_cast<modk::OutputOp>(op)) {
      StringRef n = out.getName();
      if (n == "logits") {
        names[out] = "args->logits";
      } else {
        int64_t layer;
        n.drop_front(strlen("routed.")).getAsInteger(10, layer);
        std::string var = fmt::format("routed{}", layer);
        os << fmt::format("  int32_t *{} = args->routed + (int64_t){} * B * "
                          "{};\n",
                          var, routedIndex[layer], seqLen);
        names[out] = var;
      }
    } else if (auto alloc = dyn_cast<modk::AllocOp>(op)) {
      std::string var = fmt::format("buf{}", counter++);
      std::string type = cType(alloc.getType().getElementType());
      names[alloc] = var;
      os << fmt::format("  {0} *{1} = reinterpret_cast<{0} *>(ws + B * {2});\n",
                        type, var, alloc.getOffset().value_or(0));
    }
  }
  // MODC_PROFILE=1 in the environment times every kernel of the plan.
  os << "  static const bool profile = std::getenv(\"MODC_PROFILE\") != nullptr;\n";
  os << "  auto tick = std::chrono::steady_clock::now();\n";
  int kernel = 0;
  for (Operation &op : entry.getBody().front()) {
    if (isa<modk::ParamOp, modk::InputOp, modk::OutputOp, modk::AllocOp>(op))
      continue;
    if (failed(emitKernel(&op)))
      return failure();
    std::string what = op.getName().getStringRef().str();
    if (auto gemm = dyn_cast<modk::GemmOp>(op))
      what += " " + gemm.getEpilogue().str();
    os << fmt::format("  if (profile) modcProfile({}, \"{}\", tick);\n",
                      kernel++, what);
  }
  os << "  return 0;\n}\n} // extern \"C\"\n";
  return success();
}

LogicalResult modc::emitCpp(ModuleOp module, llvm::raw_ostream &os) {
  auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
  if (entries.size() != 1)
    return module.emitError("expected exactly one modk.entry, found ")
           << entries.size();
  return CppEmitter(entries.front(), os).emit();
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
