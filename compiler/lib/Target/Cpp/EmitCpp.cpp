//===- EmitCpp.cpp - modk launch plan to C++ --------------------*- C++ -*-===//
//
// The generated file is: the kernel prelude (templates), the ABI structs,
// then `modc_forward`, which places every buffer at its planned offset and
// calls one specialised kernel per modk op, with every shape a compile-time
// constant. Nothing in it is model-independent except the prelude.
//
//===----------------------------------------------------------------------===//

#include "../PlanEmitter.h"

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace mlir;
using namespace modc;

static const char kSmallKernels[] =
#include "SmallKernelsPrelude.inc"
    ;
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
  CppEmitter(llvm::ArrayRef<modk::EntryOp> entries, llvm::raw_ostream &os,
             const CpuIsa *cpuIsa)
      : PlanEmitter(entries, os), cpuIsa(cpuIsa) {}
  LogicalResult emit();
  /// Only the kernels generated from modk.rows (the kernel tests' input).
  LogicalResult emitRowKernels() {
    collectRowKernels();
    return emitGeneratedKernels();
  }

private:
  const CpuIsa *cpuIsa;
  /// The kernels generated from the IR (row kernels, fused gathers, the
  /// optimizer's), compiled without contracting a product and a sum into a
  /// fused multiply-add: GCC contracts by the code around them, so the
  /// same math gave other bits in another kernel (docs/compiler.md,
  /// stage 7). CUDA rounds each operation for the same reason.
  LogicalResult emitGeneratedKernels() {
    os << "#if defined(__GNUC__) && !defined(__clang__)\n"
          "#pragma GCC push_options\n"
          "#pragma GCC optimize(\"fp-contract=off\")\n"
          "#endif\n";
    if (failed(emitRowKernelDefinitions()))
      return failure();
    os << "#if defined(__GNUC__) && !defined(__clang__)\n"
          "#pragma GCC pop_options\n"
          "#endif\n\n";
    return success();
  }
  const char *kernelNamespace() const override { return "modk_cpu"; }
  LogicalResult emitEntry(modk::EntryOp entry) override;
  void emitAdamW(modk::EntryOp grad) override;

  // PlanEmitter's hooks: row counts are host values here (seg[B]).
  void emitCall(const KernelCall &call, int indent = 2) override;
  void emitRowKernelLaunch(modk::RowsOp op, int index) override {
    writeRowKernelCall(op, index, 2 + tileIndent);
  }
  /// Extra indentation of a kernel's code inside a group's tile (a whole
  /// member: emitPlannedKernel), so that the switch over members reads.
  int tileIndent = 0;
  /// The call of row kernel `index` for `op`, at `indent` spaces.
  void writeRowKernelCall(modk::RowsOp op, int index, int indent) {
    std::vector<std::string> args = rowKernelArgs(op);
    os << fmt::format("{:{}}modc_rows_{}({}[B], {});\n", "", indent, index,
                      name(op.getSegments()), fmt::join(args, ", "));
  }
  LogicalResult emitTargetKernel(Operation *op) override;
  /// A group of kernels (modk-group-gemms) runs as the tiles of one
  /// parallel region (modk_cpu::run_group), written at its first member.
  LogicalResult emitPlannedKernel(Operation *op) override;
  /// Member `op`'s tile `slice` of a group whose members run in slices
  /// (slicedWidth).
  void emitGroupSlice(Operation *op, int indent);
  bool epilogueNeedsNoKernel(modk::RowsOp op) override;
  void emitGemm(modk::GemmOp op, int indent) override;
  std::string hostRows(Value segments, Value) override {
    return name(segments) + "[B]";
  }
  void emitMemcpy(StringRef dst, StringRef src, StringRef bytes) override {
    os << fmt::format("  std::memcpy({}, {}, {});\n", dst.str(), src.str(),
                      bytes.str());
  }
  void emitMemset(StringRef dst, StringRef bytes) override {
    os << fmt::format("  std::memset({}, 0, {});\n", dst.str(), bytes.str());
  }
  // A block of its own, so that a GEMM can name its row count.
  int openGroup(StringRef comment) override {
    os << std::string(2 + tileIndent, ' ') << "{ // " << comment << "\n";
    return 4 + tileIndent;
  }
  void closeGroup() override {
    os << std::string(2 + tileIndent, ' ') << "}\n";
  }
  void emitCausalDecisions(int index, StringRef logits, int indent) override;
};
} // namespace

void CppEmitter::emitCall(const KernelCall &call, int indent) {
  std::vector<std::string> args;
  for (const KernelArg &arg : call.args) {
    if (arg.kind == KernelArg::Rows)
      args.push_back(arg.text + "[B]");
    else if (arg.kind != KernelArg::DeviceOnly)
      args.push_back(arg.text);
  }
  if (call.hostTemplateArgs.empty()) {
    writeCall(kernelNamespace(), call, args, indent);
    return;
  }
  KernelCall withHostArgs = call;
  llvm::append_range(withHostArgs.templateArgs, call.hostTemplateArgs);
  writeCall(kernelNamespace(), withHostArgs, args, indent);
}

void CppEmitter::emitCausalDecisions(int index, StringRef logits, int indent) {
  os << fmt::format("{0:{1}}for (int64_t i = 0; i < B * {2}; ++i)\n"
                    "{0:{1}}  args->causal_decisions[(int64_t){3} * B * {2} + "
                    "i] = {4}[i] > 0.0f;\n",
                    "", indent, seqLen, index, logits.str());
}

bool CppEmitter::epilogueNeedsNoKernel(modk::RowsOp op) {
  return bool(cast<modk::GemmOp>(op->getParentOp()).getAddedBuffer());
}

void CppEmitter::emitGemm(modk::GemmOp op, int indent) {
  auto weightShape = cast<MemRefType>(op.getWeights()[0].getType()).getShape();
  int64_t n = op.getStackedN(), k = weightShape[1];
  std::string a = name(op.getInput()), y = name(op.getOutput());
  std::string w = name(op.getWeights()[0]);
  modk::Epilogue e = op.getEpilogue();
  // The template arguments: N, K, the bf16 flag, then the input's row
  // stride where it is a column window (an f32 product only).
  std::vector<int64_t> shape = gemmShape(n, k, op);
  if (std::vector<int64_t> lda = windowStrides(op.getInput()); !lda.empty()) {
    shape.resize(3, 0);
    shape.push_back(lda.front());
  }
  os << fmt::format("{:{}}const int64_t rows = {};\n", "", indent,
                    hostRows(op.getSegments(), op.getInput()));
  if (op.getWeights().size() > 1) {
    // A stacked product (modk-fuse-horizontal): the weights one after
    // another in a per-thread buffer, then one sgemm.
    SmallVector<std::string> counts, pointers;
    for (Value weight : op.getWeights()) {
      counts.push_back(
          std::to_string(cast<MemRefType>(weight.getType()).getDimSize(0)));
      pointers.push_back(name(weight));
    }
    os << fmt::format(
        "{:{}}const float *stacked = modk_cpu::stack_weights<{}, {}>({});\n",
        "", indent, k, fmt::join(counts, ", "), fmt::join(pointers, ", "));
    w = "stacked";
  }
  if (e == modk::Epilogue::rows) {
    if (Value residual = op.getAddedBuffer()) {
      // y = r + a W^T: sgemm accumulates into y (beta = 1), r copied first
      // when it is another buffer.
      if (residual != op.getOutput())
        os << fmt::format(
            "{:{}}std::memcpy({}, {}, sizeof(float) * rows * {});\n", "",
            indent, y, name(residual), n);
      emitCall({"linear_residual", shape, {a, "rows", w, y}},
               indent);
      return;
    }
    modk::RowsOp epilogue = op.getEpilogueRows();
    Value product = op.getFusedRows().front().getArgument(0);
    if (epilogue.getHeadDim() && epilogue.getInputs() == ValueRange(product) &&
        product.getType() == op.getOutput().getType()) {
      // RoPE reads only the product and writes y of its type: sgemm writes
      // y, and the kernel finishes it in place (it loads a pair's two
      // elements before it stores either).
      names[product] = y;
      emitCall({"linear", shape, {a, "rows", w, y}}, indent);
      writeRowKernelCall(epilogue, rowKernelOf.lookup(epilogue), indent);
      return;
    }
    // sgemm stores the whole product: it is staged in a per-thread buffer
    // (no workspace), then the generated row kernel finishes it.
    names[product] = "product";
    os << fmt::format("{:{}}float *product = modk_cpu::staged_rows<{}>(rows);\n",
                      "", indent, n);
    emitCall({"linear", shape, {a, "rows", w, "product"}}, indent);
    writeRowKernelCall(epilogue, rowKernelOf.lookup(epilogue), indent);
    return;
  }
  // A plain f32 product: the other epilogues, and the rounding store of a
  // bf16 output, are `rows` epilogues by now (modk-generalize).
  emitCall({"linear", shape, {a, "rows", w, y}}, indent);
}

/// Whether `op` follows `previous` in one group: modk-group-gemms' `group`,
/// the same number on neighbouring kernels of one kind.
static bool inGroupAfter(Operation *previous, Operation *op) {
  auto group = op ? op->getAttrOfType<IntegerAttr>("group") : nullptr;
  return group && previous && previous->getName() == op->getName() &&
         previous->getAttrOfType<IntegerAttr>("group") == group;
}

/// The output columns that a grouped kernel's tiles slice: a product's N
/// (without an epilogue), an input gradient's K, a weight gradient's rows;
/// 0 where each member is one tile (a product with an epilogue, a row
/// kernel).
static int64_t slicedWidth(Operation *op) {
  if (auto gemm = dyn_cast<modk::GemmOp>(op))
    return gemm.getEpilogue() == modk::Epilogue::none ? gemm.getStackedN() : 0;
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op))
    return cast<MemRefType>(dgrad.getWeight().getType()).getDimSize(1);
  if (auto wgrad = dyn_cast<modk::GemmWgradOp>(op))
    return cast<MemRefType>(wgrad.getDw().getType()).getDimSize(0);
  return 0;
}

static const char *boolLiteral(bool b) { return b ? "true" : "false"; }

LogicalResult CppEmitter::emitPlannedKernel(Operation *op) {
  auto group = op->getAttrOfType<IntegerAttr>("group");
  if (!group)
    return emitKernel(op);
  // A later member ran in the tiles of the group's first.
  if (inGroupAfter(op->getPrevNode(), op))
    return success();
  SmallVector<Operation *> members{op};
  while (inGroupAfter(members.back(), members.back()->getNextNode()))
    members.push_back(members.back()->getNextNode());
  if (members.size() < 2)
    return emitKernel(op);
  // Each member's row count orders the tiles; the kernel library picks the
  // slices of a member whose output it can slice.
  SmallVector<std::string> rows;
  for (Operation *m : members)
    rows.push_back(name(modk::groupMemberSegments(m)) + "[B]");
  int64_t width = slicedWidth(op);
  os << fmt::format("  {{ // group {}: {} x {}\n", group.getInt(),
                    members.size(), op->getName().getStringRef().str());
  os << fmt::format("    const int64_t groupRows[{}] = {{{}}};\n",
                    members.size(), fmt::join(rows, ", "));
  os << fmt::format("    modk_cpu::run_group<{}>(groupRows, {}, "
                    "[&](int member, int slice, int slices) {{\n",
                    members.size(),
                    width ? fmt::format("modk_cpu::group_slices({})", width)
                          : std::string("1"));
  os << "      (void)slice, (void)slices;\n      switch (member) {\n";
  for (auto [z, m] : llvm::enumerate(members)) {
    os << fmt::format("      case {}: {{\n", z);
    if (!width) {
      tileIndent = 6;
      LogicalResult emitted = emitKernel(m);
      tileIndent = 0;
      if (failed(emitted))
        return failure();
    } else {
      auto gemm = dyn_cast<modk::GemmOp>(m);
      if (failed(checkColumnWindows(m)) ||
          (gemm && failed(checkGemmEmittable(gemm))))
        return failure();
      emitGroupSlice(m, 8);
    }
    os << "        break;\n      }\n";
  }
  os << "      }\n    });\n  }\n";
  return success();
}

void CppEmitter::emitGroupSlice(Operation *op, int indent) {
  std::string pad(indent, ' ');
  if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
    // Slices of N: the weights read in place, stacked or not.
    int64_t k = cast<MemRefType>(gemm.getWeights()[0].getType()).getDimSize(1);
    std::vector<int64_t> lda = windowStrides(gemm.getInput());
    SmallVector<std::string> counts, weights;
    for (Value weight : gemm.getWeights()) {
      counts.push_back(
          std::to_string(cast<MemRefType>(weight.getType()).getDimSize(0)));
      weights.push_back(name(weight));
    }
    os << fmt::format("{}modk_cpu::linear_slice<{}, {}, {}, {}>(slice, "
                      "slices, {}, {}[B], {}, {});\n",
                      pad, k, gemm.productsBf16() ? 1 : 0,
                      lda.empty() ? k : lda.front(), fmt::join(counts, ", "),
                      name(gemm.getInput()), name(gemm.getSegments()),
                      name(gemm.getOutput()), fmt::join(weights, ", "));
    return;
  }
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op)) {
    auto w = cast<MemRefType>(dgrad.getWeight().getType()).getShape();
    os << fmt::format("{}modk_cpu::linear_dgrad_slice<{}>(slice, slices, "
                      "{}, {}[B], {}, {}, {});\n",
                      pad, fmt::join(gemmShape(w[0], w[1]), ", "),
                      name(dgrad.getDy()), name(dgrad.getSegments()),
                      name(dgrad.getWeight()), name(dgrad.getDa()),
                      boolLiteral(dgrad.getAccumulate()));
    return;
  }
  auto wgrad = cast<modk::GemmWgradOp>(op);
  auto w = cast<MemRefType>(wgrad.getDw().getType()).getShape();
  os << fmt::format("{}modk_cpu::linear_wgrad_slice<{}>(slice, slices, "
                    "{}, {}[B], {}, {}, {});\n",
                    pad, fmt::join(gemmShape(w[0], w[1], wgrad), ", "),
                    name(wgrad.getDy()), name(wgrad.getSegments()),
                    name(wgrad.getInput()), name(wgrad.getDw()),
                    boolLiteral(!wgrad.getOverwrite()));
}

LogicalResult CppEmitter::emitTargetKernel(Operation *op) {
  return op->emitOpError("has no C++ emitter");
}

LogicalResult CppEmitter::emit() {
  modk::EntryOp forward, grad, decode;
  if (failed(classifyEntries(forward, grad, decode)))
    return failure();

  std::string manifest = buildManifest(entries, "cpu", "", cpuIsa);
  collectRowKernels();
  emitBanner(forward);
  os << kSmallKernels << "\n" << kPrelude << "\n";
  if (grad)
    os << kTrainPrelude << "\n";
  if (decode)
    os << kDecodePrelude << "\n";
  emitHostSupport("");
  if (failed(emitGeneratedKernels()))
    return failure();
  os << R"cpp(/// Prints the time since `tick` for kernel `index` and restarts the clock.
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
  if (failed(emitEntries(forward, grad, decode)))
    return failure();
  os << "} // extern \"C\"\n";
  return success();
}

LogicalResult CppEmitter::emitEntry(modk::EntryOp e) {
  beginEntry(e);
  bool isGrad = takesTargets(e); // grad or eval: tokens [B, S + 1]
  bool isDecode = e.getKind() == modk::EntryKind::decode;
  std::string fn = functionName(e);
  emitEntryPrologue(e, kExport);
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
  if (failed(emitKernels(e, "tick")))
    return failure();
  os << "  return 0;\n}\n";
  return success();
}

void CppEmitter::emitAdamW(modk::EntryOp grad) {
  std::string sizes, decay;
  adamwTables(grad, sizes, decay);
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
    squares += modc_optimizer_norm(args->grads[i], kSizes[i]);
  const double norm = std::sqrt(squares);
  if (args->grad_norm)
    *args->grad_norm = (float)norm;
  // A non-finite gradient must not reach the weights.
  if (!std::isfinite(norm))
    return fail(1, "modc_adamw: the gradient norm is not finite");
  const float scale = args->clip_norm > 0 && norm > args->clip_norm
                          ? (float)(args->clip_norm / norm) : 1.0f;
{3}  for (int i = 0; i < kParams; ++i)
    modc_optimizer_update(kSizes[i], args->params[i], args->grads[i],
                          args->m[i], args->v[i], {4});
  return 0;
}}
)cpp",
                    sizes, decay, grad.getParams().size(),
                    optimizerStepScalars(),
                    fmt::join(optimizerScalarArgs(/*cuda=*/false), ", "));
}

LogicalResult modc::emitCpp(ModuleOp module, llvm::raw_ostream &os,
                            const CpuIsa *cpuIsa) {
  auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
  if (entries.empty())
    return module.emitError("expected a modk.entry to emit");
  return CppEmitter(entries, os, cpuIsa).emit();
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
  TranslateFromMLIRRegistration rows(
      "modk-rows-to-cpp",
      "Emit only the CPU kernels of the modk.rows ops (for kernel tests)",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module || module.getOps<modk::EntryOp>().empty())
          return op->emitError("expected a builtin.module of modk.entry ops");
        auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
        return CppEmitter(entries, os, nullptr).emitRowKernels();
      },
      [](DialectRegistry &registry) {
        registry.insert<modk::ModkDialect, memref::MemRefDialect>();
      });
}
