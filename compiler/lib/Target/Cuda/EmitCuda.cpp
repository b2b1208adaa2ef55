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
#include "CutlassGemms.h"

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/StringSet.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

using namespace mlir;
using namespace modc;

static const char kSmallKernels[] =
#include "SmallKernelsPrelude.inc"
    ;
static const char kCommonPrelude[] =
#include "CudaCommonPrelude.inc"
    ;
// The mainloop library (lib/Target/Mainloops/Cuda): GEMM tiles and flash
// attention forward and backward, the only kernel bodies besides the
// preludes not generated.
static const char kGemmTiles[] =
#include "CudaGemmTiles.inc"
    ;
static const char kFlashAttention[] =
#include "CudaFlashAttention.inc"
    ;
static const char kFlashAttentionGrad[] =
#include "CudaFlashAttentionGrad.inc"
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

namespace {
/// The most row kernels a grouped launch runs (kMaxRowGroup in
/// CudaCommon.cuh): their table is a kernel parameter.
constexpr size_t kMaxRowGroup = 16;

class CudaEmitter : public PlanEmitter {
public:
  CudaEmitter(ArrayRef<modk::EntryOp> entries, llvm::raw_ostream &os,
              StringRef arch,
              std::vector<CudaKernelFile> *kernelFiles = nullptr)
      : PlanEmitter(entries, os), arch(arch), cutlass(entries, arch),
        kernelFiles(kernelFiles) {}
  LogicalResult emit();
  /// Only the kernels generated from modk.rows (the kernel tests' input).
  LogicalResult emitRowKernels() {
    collectRowKernels();
    if (failed(emitNamedRowKernels()))
      return failure();
    return emitRowEpilogueDefinitions();
  }
  /// The row kernels in namespace modc_rows: named kernels (not in the
  /// anonymous namespace) keep one mangled name in the PTX and in the host
  /// code, which the launch checks of the emulation match up.
  LogicalResult emitNamedRowKernels() {
    os << "namespace modc_rows {\n";
    if (failed(emitRowKernelDefinitions()) || failed(emitGroupedRowKernels()))
      return failure();
    os << "} // namespace modc_rows\n";
    return success();
  }
  const char *kernelNamespace() const override { return "modk_cuda"; }
  /// The parameters (index, elements) that decode entry `e`'s few-row bf16
  /// products stream from bf16 copies, and its CUTLASS products read: those
  /// modk-keep-bf16-weights flagged (modk.optimizer's bf16_copies) that
  /// such a product reads.
  std::vector<std::pair<size_t, int64_t>> decodeWeightCopies(modk::EntryOp e) {
    std::vector<std::pair<size_t, int64_t>> copied;
    if (!optimizer)
      return copied;
    llvm::StringSet<> flagged, streamed;
    for (auto [i, p] : llvm::enumerate(
             optimizer.getParams().getAsRange<modk::ParamAttr>()))
      if (optimizer.keepsBf16Copy(i))
        flagged.insert(p.getName());
    e.walk([&](modk::GemmOp gemm) {
      if (!gemm.productsBf16() || !gemm.readsWeightCopy(/*decode=*/true))
        return;
      for (Value w : gemm.getWeights())
        if (auto param = w.getDefiningOp<modk::ParamOp>())
          streamed.insert(param.getName());
    });
    for (auto [i, p] :
         llvm::enumerate(e.getParams().getAsRange<modk::ParamAttr>()))
      if (flagged.contains(p.getName()) && streamed.contains(p.getName()))
        copied.push_back({i, ShapedType::getNumElements(p.getShape())});
    return copied;
  }

  std::string gemmPlanName(Operation *op) override {
    auto config = op->getAttrOfType<modk::GemmConfigAttr>("config");
    return config ? gemmPlans.lookup(config) : std::string();
  }
  /// Names every product's #modk.gemm_config (identical ones share a
  /// name) and writes each as a GemmPlan alias, the attribute beside it.
  /// Fails where a product has none (modk-configure-gemms did not run).
  LogicalResult emitGemmPlans();

private:
  LogicalResult emitEntry(modk::EntryOp entry) override;
  /// Notes that a kernel of the entry needs `bytesExpr` bytes of scratch
  /// (an expression in B): the entry sizes one buffer for the largest.
  void needScratch(std::string bytesExpr) {
    scratchNeeds.push_back(std::move(bytesExpr));
  }
  void emitDeviceApi();
  void emitAdamW(modk::EntryOp grad) override;
  /// modc_train_step: modc_grad and the AdamW step as one CUDA graph.
  void emitTrainStep(modk::EntryOp grad);

  // PlanEmitter's hooks: row counts stay on the device (seg + B), so the host
  // sizes copies and grids by the most rows a row set can hold; every call
  // is enqueued on the stream `s`.
  void emitCall(const KernelCall &call, int indent = 2) override;
  void emitRowKernelLaunch(modk::RowsOp op, int index) override {
    if (!emitRowGroup(op))
      emitOneRowKernelLaunch(op, index);
  }
  /// Whether row kernel `op` has a grouped form (emitGroupedRowKernel):
  /// a warp-per-row kernel.
  static bool hasGroupedRowKernel(modk::RowsOp op) {
    return !op.getHeadDim() && !op.hasRowSums() &&
           op.getOutputAccessAt(0) != modk::Access::scatter;
  }
  /// Whether row kernel `op` follows `previous` in one group
  /// (modk-group-gemms' `group`, the same number on neighbours, both
  /// guarded alike).
  static bool inRowGroupAfter(Operation *previous, Operation *op) {
    auto before = dyn_cast_or_null<modk::RowsOp>(previous);
    auto rows = dyn_cast_or_null<modk::RowsOp>(op);
    auto group = op ? op->getAttrOfType<IntegerAttr>("group") : nullptr;
    return before && rows && group &&
           before->getAttrOfType<IntegerAttr>("group") == group &&
           before.getCausalOnly() == rows.getCausalOnly();
  }
  /// The members of the group of row kernels that `op` opens: it and its
  /// neighbours in the group (inRowGroupAfter).
  static SmallVector<modk::RowsOp> rowGroupFrom(modk::RowsOp op) {
    SmallVector<modk::RowsOp> members{op};
    while (inRowGroupAfter(members.back(), members.back()->getNextNode()))
      members.push_back(cast<modk::RowsOp>(members.back()->getNextNode()));
    return members;
  }
  /// Whether `members` run as one launch: of one generated kernel with a
  /// grouped form, whose grid (the most rows a member's set can hold) is
  /// every member's, at most kMaxRowGroup of them.
  bool launchesAsOne(ArrayRef<modk::RowsOp> members) {
    modk::RowsOp first = members.front();
    if (members.size() < 2 || members.size() > kMaxRowGroup ||
        !hasGroupedRowKernel(first))
      return false;
    return llvm::all_of(members, [&](modk::RowsOp m) {
      return rowKernelOf.lookup(m) == rowKernelOf.lookup(first) &&
             maxRows(rowBuffer(m)) == maxRows(rowBuffer(first));
    });
  }
  /// The grouped forms of the row kernels that a group runs as one launch.
  LogicalResult emitGroupedRowKernels();
  /// The launch of the group of row kernels that `op` opens: one kernel
  /// over every member, or one launch each where they are not one kernel
  /// of a grouped form. Nothing for a later member (the first launched
  /// it); false where `op` has no group.
  bool emitRowGroup(modk::RowsOp op);
  void emitOneRowKernelLaunch(modk::RowsOp op, int index) {
    // A warp per row: the grid covers the most rows the set can hold, the
    // kernel reads how many it has.
    std::string bound = maxRows(rowBuffer(op));
    std::vector<std::string> args = rowKernelArgs(op);
    if (op.hasRowSums()) {
      emitColumnSumLaunch(op, index, bound, args);
      return;
    }
    if (op.getOutputAccessAt(0) == modk::Access::scatter) {
      // A scatter-add: each block owns the table rows of its ids modulo the
      // grid, whose size changes nothing but the speed.
      os << fmt::format(
          "  if ({0} > 0)\n    MODC_LAUNCH(modc_rows::modc_rows_{1}, "
          "unsigned(modk_cuda::train_detail::kScatterBlocks), "
          "modk_cuda::train_detail::colThreads<{2}>(), 0, s, {3} + B, "
          "{4});\n",
          bound, index, op.getWidth(), name(op.getSegments()),
          fmt::join(args, ", "));
      return;
    }
    os << fmt::format("  if ({0} > 0)\n    MODC_LAUNCH(modc_rows::modc_rows_{1}, "
                      "unsigned(modk_cuda::ceilDiv({0}, "
                      "modk_cuda::detail::kRowWarps)), "
                      "modk_cuda::detail::kThreads, 0, s, {2} + B, {3});\n",
                      bound, index, name(op.getSegments()),
                      fmt::join(args, ", "));
  }
  /// A row kernel with column sums: a block per kRB rows writes its
  /// partial sums into the scratch, then reduceColumns adds them to the
  /// outputs in block order.
  void emitColumnSumLaunch(modk::RowsOp op, int index, const std::string &bound,
                           std::vector<std::string> args) {
    int64_t width = op.getWidth();
    // A block's partial row, in the generated kernel's order: the column
    // sums, then the row totals (a float each).
    std::vector<std::string> outs;
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (unsigned k : op.getRowSumOutputs()) {
      outs.push_back(name(op.getOutputs()[k]));
      sizes.push_back(op.getOutputAccessAt(k) == modk::Access::row_sum ? 1
                                                                       : width);
      total += sizes.back();
    }
    needScratch(fmt::format(
        "sizeof(float) * modk_cuda::row_reduce_scratch_floats({}, {})", bound,
        total));
    args.push_back("(float *)scratch");
    // ColOut: the first sizes[0] columns to outs[0], the next sizes[1] to
    // outs[1], the rest to outs[2].
    while (outs.size() < 3)
      outs.push_back(outs.back());
    sizes.resize(3, 0);
    os << fmt::format(
        "  if ({0} > 0) {{\n"
        "    MODC_LAUNCH(modc_rows::modc_rows_{1}, "
        "unsigned(modk_cuda::ceilDiv({0}, modk_cuda::train_detail::kRB)), "
        "modk_cuda::train_detail::colThreads<{2}>(), 0, s, {3} + B, {4});\n"
        "    modk_cuda::train_detail::launchReduceColumns((const float "
        "*)scratch, {5}, {3} + B, 0, modk_cuda::train_detail::ColOut{{{6}, "
        "{7}, {8}, {9}, {10}}}, s);\n"
        "  }}\n",
        bound, index, width, name(op.getSegments()), fmt::join(args, ", "),
        total, outs[0], outs[1], outs[2], sizes[0], sizes[1]);
  }
  LogicalResult emitTargetKernel(Operation *op) override;
  void emitGemm(modk::GemmOp op, int indent) override;
  /// One product's calls.
  void emitOneGemm(modk::GemmOp op, int indent);
  /// The rows a CUTLASS kernel of `op` computes, an expression: on sm_90a,
  /// whose kernel computes every row up to the count it is given, the
  /// count where the host knows it (modk::hostRowCount; a selection's B k
  /// in `topk` mode), else the bound, or 0 (decline: the tiles run) for an
  /// `exact` epilogue, which must not touch a row past the count; on sm_80
  /// the bound (its kernel reads the count).
  std::string cutlassRows(modk::GemmOp op, const KernelArg &rows,
                          bool exact) const;
  /// The row bound a one-member grouped launch of `op` (its
  /// device_rows_config) is given, an expression: where the device counts
  /// the rows (`causal` mode for a selection's), else 0 (it declines).
  std::string deviceRows(modk::GemmOp op, const KernelArg &rows) const;
  /// The members of a group (modk-group-gemms) as one grouped launch.
  void emitGemmGroup(ArrayRef<modk::GemmOp> members, int indent);
  /// Sibling products of one input (modk-group-siblings) as one launch of
  /// the few-row kernel, each member its own launch where that declines.
  void emitGemmSiblings(ArrayRef<modk::GemmOp> members, int indent);
  void emitGemmDgrad(modk::GemmDgradOp op, const KernelCall &call) override;
  void emitGemmWgrad(modk::GemmWgradOp op, const KernelCall &call) override;
  /// The members of a group of gradient products (modk.gemm_dgrad or
  /// gemm_wgrad, modk-group-gemms) that `op` opens, as one grouped launch;
  /// false where `op` launches alone (no group, or one of several kernels).
  /// Nothing is written for a later member: the first launched it.
  bool emitGradGroup(Operation *op);
  std::string hostRows(Value, Value buffer) override { return maxRows(buffer); }
  void emitMemcpy(StringRef dst, StringRef src, StringRef bytes) override {
    os << fmt::format("  cudaMemcpyAsync({}, {}, {}, cudaMemcpyDeviceToDevice, "
                      "s);\n",
                      dst.str(), src.str(), bytes.str());
  }
  void emitMemset(StringRef dst, StringRef bytes) override {
    os << fmt::format("  cudaMemsetAsync({}, 0, {}, s);\n", dst.str(),
                      bytes.str());
  }
  int openGroup(StringRef comment) override {
    os << "  // " << comment << "\n";
    return 2;
  }
  void closeGroup() override {}
  void emitCausalDecisions(int index, StringRef logits, int indent) override;
  /// modc_cuda_init's statements that build RoPE's angle tables.
  std::string ropeTableBuilds();

  std::string arch;
  /// The products on CUTLASS kernels (`cutlass` variants).
  CutlassGemms cutlass;
  /// Where the CUTLASS kernel files go (null: none wanted).
  std::vector<CudaKernelFile> *kernelFiles;
  std::vector<std::string> scratchNeeds;
  llvm::DenseMap<Attribute, std::string> gemmPlans;
};
} // namespace

void CudaEmitter::emitCall(const KernelCall &call, int indent) {
  std::vector<std::string> args;
  for (const KernelArg &arg : call.args) {
    if (arg.kind == KernelArg::Rows)
      args.push_back(arg.text + " + B, " + arg.bound);
    else if (arg.kind != KernelArg::HostOnly)
      args.push_back(arg.text);
  }
  if (!call.scratchBytes.empty()) {
    needScratch(call.scratchBytes);
    args.push_back("(" + call.scratchType + " *)scratch");
  }
  args.push_back("s");
  if (call.deviceTemplateArgs.empty()) {
    writeCall(kernelNamespace(), call, args, indent);
    return;
  }
  KernelCall withDeviceArgs = call;
  llvm::append_range(withDeviceArgs.templateArgs, call.deviceTemplateArgs);
  writeCall(kernelNamespace(), withDeviceArgs, args, indent);
}

/// The kernel library's name of a GEMM kernel family (GemmTiles.cuh).
static const char *libraryPathName(modk::GemmPath path) {
  switch (path) {
  case modk::GemmPath::simt:
    return "Simt";
  case modk::GemmPath::mma:
    return "Mma";
  case modk::GemmPath::wgmma:
    return "Wgmma";
  case modk::GemmPath::stream:
    return "Stream";
  case modk::GemmPath::cutlass: // CutlassGemms, not the tiles' plan
    break;
  }
  llvm_unreachable("unknown GEMM path");
}

LogicalResult CudaEmitter::emitGemmPlans() {
  os << "// The kernels of each product, chosen by modk-configure-gemms for "
     << arch << ".\n";
  for (modk::EntryOp e : entries) {
    WalkResult walk = e.walk([&](Operation *op) {
      if (isa<modk::AttentionOp, modk::AttentionGradOp>(op) &&
          !op->hasAttr("mainloop")) {
        op->emitError("CUDA attention needs its mainloop chosen: run "
                      "modk-configure-gemms first");
        return WalkResult::interrupt();
      }
      if (isa<modk::AttentionOp, modk::AttentionGradOp>(op) &&
          op->getAttrOfType<modk::GemmPathAttr>("mainloop").getValue() ==
              modk::GemmPath::wgmma &&
          arch != "sm_90a") {
        op->emitError("the wgmma attention")
            << (isa<modk::AttentionGradOp>(op) ? " gradient" : "")
            << " kernel needs sm_90a, not " << arch
            << ": run modk-configure-gemms{arch=" << arch << "}";
        return WalkResult::interrupt();
      }
      if (!isa<modk::GemmOp, modk::GemmDgradOp, modk::GemmWgradOp>(op))
        return WalkResult::advance();
      auto config = op->getAttrOfType<modk::GemmConfigAttr>("config");
      if (!config) {
        op->emitError("a CUDA product needs its kernels chosen: run "
                      "modk-configure-gemms first");
        return WalkResult::interrupt();
      }
      for (const modk::GemmVariant &v : config.getVariants())
        if ((v.path == modk::GemmPath::wgmma || v.tmaCtas > 0) &&
            arch != "sm_90a") {
          op->emitError("the kernels chosen for this product need sm_90a "
                        "(wgmma), not ")
              << arch << ": run modk-configure-gemms{arch=" << arch << "}";
          return WalkResult::interrupt();
        }
      if (gemmPlans.count(config))
        return WalkResult::advance();
      std::string planName = fmt::format("gemm_plan_{}", gemmPlans.size());
      gemmPlans[config] = planName;
      std::vector<std::string> variants;
      for (const modk::GemmVariant &v : config.getVariants())
        if (v.path != modk::GemmPath::cutlass) // CutlassGemms' plan
          variants.push_back(fmt::format(
              "modk_cuda::detail::GemmVariant<{}, modk_cuda::detail::Path{}, "
              "{}, {}, {}, {}>",
              v.minRows, libraryPathName(v.path), v.tileRows, v.tileCols,
              v.tmaCtas, v.separateEpilogue ? "true" : "false"));
      std::string text;
      llvm::raw_string_ostream attr(text);
      attr << config;
      os << fmt::format("// {}\nusing {} = modk_cuda::detail::GemmPlan<{}, {}, "
                        "{}>;\n",
                        text, planName, config.getMaxSplits(),
                        config.getChunkRows(), fmt::join(variants, ", "));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  return success();
}

void CudaEmitter::emitCausalDecisions(int index, StringRef logits, int indent) {
  os << fmt::format("{0:{1}}modc_glue::decisions(args->causal_decisions + "
                    "(int64_t){2} * B * {3}, {4}, B * {3}, s);\n",
                    "", indent, index, seqLen, logits.str());
}

LogicalResult CudaEmitter::emitGroupedRowKernels() {
  std::set<int> done;
  for (modk::EntryOp e : entries)
    for (auto rows : e.getBody().front().getOps<modk::RowsOp>()) {
      if (!rows->getAttrOfType<IntegerAttr>("group") ||
          inRowGroupAfter(rows->getPrevNode(), rows) ||
          !launchesAsOne(rowGroupFrom(rows)))
        continue;
      int index = rowKernelOf.lookup(rows);
      if (done.insert(index).second &&
          failed(emitGroupedRowKernel(rowKernels[index], index)))
        return failure();
    }
  return success();
}

bool CudaEmitter::emitRowGroup(modk::RowsOp op) {
  auto group = op->getAttrOfType<IntegerAttr>("group");
  if (!group)
    return false;
  if (inRowGroupAfter(op->getPrevNode(), op))
    return true;
  SmallVector<modk::RowsOp> members = rowGroupFrom(op);
  if (!launchesAsOne(members)) {
    for (modk::RowsOp m : members)
      emitOneRowKernelLaunch(m, rowKernelOf.lookup(m));
    return true;
  }
  // The table of the members' row counts and buffers, in the kernel's
  // parameter order, then one launch whose grid's y is the member.
  int index = rowKernelOf.lookup(op);
  std::string bound = maxRows(rowBuffer(op));
  os << fmt::format("  {{ // group {}: {} row kernels modc_rows_{}\n"
                    "    modc_rows::modc_rows_{}_group<{}> group;\n",
                    group.getInt(), members.size(), index, index,
                    members.size());
  for (auto [y, m] : llvm::enumerate(members))
    os << fmt::format("    group.m[{}] = {{{} + B, {}}};\n", y,
                      name(m.getSegments()), fmt::join(rowKernelArgs(m), ", "));
  os << fmt::format(
      "    if ({0} > 0)\n      MODC_LAUNCH(modc_rows::modc_rows_{1}_grouped<"
      "{2}>, dim3(unsigned(modk_cuda::ceilDiv({0}, "
      "modk_cuda::detail::kRowWarps)), {2}u), modk_cuda::detail::kThreads, 0, "
      "s, group);\n  }}\n",
      bound, index, members.size());
  return true;
}

/// The products that `op` launches with it: its neighbours from it on
/// whose attribute `attr` (a group's or siblings' number) is `number`;
/// none where the product before it has that number (it launched them).
static SmallVector<modk::GemmOp>
neighboursLaunchedBy(modk::GemmOp op, StringRef attr, IntegerAttr number) {
  auto same = [&](Operation *other) {
    return isa_and_nonnull<modk::GemmOp>(other) &&
           other->getAttrOfType<IntegerAttr>(attr) == number;
  };
  SmallVector<modk::GemmOp> members;
  if (same(op->getPrevNode()))
    return members;
  for (Operation *g = op; same(g); g = g->getNextNode())
    members.push_back(cast<modk::GemmOp>(g));
  return members;
}

void CudaEmitter::emitGemm(modk::GemmOp op, int indent) {
  if (IntegerAttr siblings = op.getSiblingsAttr()) {
    // The first sibling launches its neighbours of the same number
    // (modk-group-siblings); the others were launched with it.
    SmallVector<modk::GemmOp> members =
        neighboursLaunchedBy(op, "siblings", siblings);
    if (!members.empty())
      emitGemmSiblings(members, indent);
    return;
  }
  IntegerAttr group = op.getGroupAttr();
  if (!group) {
    emitOneGemm(op, indent);
    return;
  }
  // The group's first product launches the neighbours of its group; the
  // others were launched with it.
  SmallVector<modk::GemmOp> members = neighboursLaunchedBy(op, "group", group);
  if (members.empty())
    return;
  // One kernel for all: the same plan and epilogue functor, and the tiles'
  // library or CUTLASS's grouped launch (a CUTLASS product that is not
  // grouped launches on its own).
  bool grouped = !cutlass.groupPlanOf(op).empty();
  bool oneKernel =
      (members.size() > 1 && cutlass.planOf(op).empty()) || grouped;
  for (modk::GemmOp m : members)
    oneKernel = oneKernel && gemmPlanName(m) == gemmPlanName(op) &&
                (op.getEpilogue() != modk::Epilogue::rows ||
                 rowKernelOf.lookup(m.getEpilogueRows()) ==
                     rowKernelOf.lookup(op.getEpilogueRows()));
  if (oneKernel) {
    emitGemmGroup(members, indent);
    return;
  }
  for (modk::GemmOp m : members)
    emitOneGemm(m, indent);
}

void CudaEmitter::emitGemmGroup(ArrayRef<modk::GemmOp> members, int indent) {
  modk::GemmOp first = members.front();
  auto weightShape =
      cast<MemRefType>(first.getWeights()[0].getType()).getShape();
  int64_t n = weightShape[0], k = weightShape[1];
  int64_t size = int64_t(members.size());
  bool epilogue = first.getEpilogue() == modk::Epilogue::rows;
  // On sm_90a a group whose variants are `grouped` runs as one CUTLASS
  // grouped launch from their rows on, over a table of the members'
  // buffers of its own (docs/cuda.md, "CUTLASS"); the tiles' grouped
  // launch below them and wherever it declines.
  std::string groupPlan = cutlass.groupPlanOf(first);
  std::string pad(indent, ' ');
  auto element = [&](Value v) {
    return fmt::format("std::remove_cv_t<std::remove_pointer_t<decltype({})>>",
                       name(v));
  };
  // The table of the members' buffers (modk_cuda::detail::GemmGroup), then
  // one launch over it.
  os << fmt::format("{}{{ // group {}: {} products\n", pad,
                    first.getGroupAttr().getInt(), size);
  os << fmt::format("{}  modk_cuda::detail::GemmGroup<{}, {}, float, {}> "
                    "group;\n",
                    pad, size, element(first.getInput()),
                    epilogue ? std::string("float")
                             : element(first.getOutput()));
  if (!groupPlan.empty())
    os << pad << "  modc_cutlass::GroupTable cutlassGroup;\n";
  for (auto [z, member] : llvm::enumerate(members)) {
    modk::GemmOp m = member;
    os << pad << "  {\n";
    if (epilogue) {
      std::string args = rowEpilogueArgs(m);
      for (StringRef line : llvm::split(StringRef(args).rtrim(), '\n'))
        os << pad << "    " << line << "\n";
      os << fmt::format("{}    group.epi[{}] = epi;\n", pad, z);
    } else {
      os << fmt::format("{}    group.c[{}] = {};\n", pad, z,
                        name(m.getOutput()));
    }
    if (!groupPlan.empty()) {
      // The member's source (an elementwise epilogue's; SwiGLU's gate) and
      // output, or the buffers of an epilogue that stores by itself.
      Value source;
      bool storesItself = epilogue && !m.isElementwiseEpilogue(&source);
      os << fmt::format("{}    cutlassGroup.member[{}] = {{{}, {}, {}, {}, "
                        "{} + B, {}}};\n",
                        pad, z, name(m.getInput()), name(m.getWeights()[0]),
                        source ? name(source) : "nullptr",
                        storesItself ? "nullptr" : name(m.getOutput()),
                        name(m.getSegments()),
                        storesItself ? "modc_cutlass::storeArgsOf(epi)" : "{}");
    }
    os << fmt::format("{0}    group.a[{1}] = {2};\n{0}    group.b[{1}] = {3};\n"
                      "{0}    group.rows[{1}] = {4} + B;\n{0}  }}\n",
                      pad, z, name(m.getInput()), name(m.getWeights()[0]),
                      name(m.getSegments()));
  }
  std::vector<int64_t> shape =
      epilogue
          ? std::vector<int64_t>{n, k,
                                 rowKernelOf.lookup(first.getEpilogueRows()),
                                 size}
          : std::vector<int64_t>{n, k, size};
  std::string bound = rowsArg(first.getSegments(), first.getInput()).bound;
  KernelCall call{epilogue ? "linear_rows_epilogue_group" : "linear_group",
                  withBf16Flag(shape, first),
                  {"group", KernelArg(bound)}};
  if (!groupPlan.empty()) {
    os << fmt::format("{}  cutlassGroup.members = {};\n", pad, size);
    os << fmt::format("{}  if (!modc_cutlass::linear_group<{}, {}, {}>("
                      "cutlassGroup, {}, s))\n",
                      pad, n, k, groupPlan, bound);
  }
  emitCall(withGemmPlan(std::move(call), first),
           indent + (groupPlan.empty() ? 2 : 4));
  os << pad << "}\n";
}

void CudaEmitter::emitGemmSiblings(ArrayRef<modk::GemmOp> members, int indent) {
  modk::GemmOp first = members.front();
  int64_t k = cast<MemRefType>(first.getWeights()[0].getType()).getDimSize(1);
  int64_t size = int64_t(members.size());
  std::string pad(indent, ' ');
  // Each member's weight, and its output or its epilogue's arguments.
  os << fmt::format("{}{{ // siblings {}: {} products of one input\n", pad,
                    first.getSiblingsAttr().getInt(), size);
  os << fmt::format("{}  modk_cuda::detail::EpiArgs sibEpi[{}];\n", pad, size);
  os << fmt::format("{}  void *sibOut[{}] = {{}};\n", pad, size);
  std::vector<std::string> kinds, weights;
  for (auto [z, member] : llvm::enumerate(members)) {
    modk::GemmOp m = member;
    int64_t n = cast<MemRefType>(m.getWeights()[0].getType()).getDimSize(0);
    weights.push_back(name(m.getWeights()[0]));
    if (m.getEpilogue() == modk::Epilogue::rows) {
      os << pad << "  {\n";
      std::string args = rowEpilogueArgs(m);
      for (StringRef line : llvm::split(StringRef(args).rtrim(), '\n'))
        os << pad << "    " << line << "\n";
      os << fmt::format("{}    sibEpi[{}] = epi;\n{}  }}\n", pad, z, pad);
      kinds.push_back(fmt::format("modk_cuda::detail::GemmSibling<{}, "
                                  "modk_cuda::detail::epiRows<{}>(), float>",
                                  n, rowKernelOf.lookup(m.getEpilogueRows())));
    } else {
      os << fmt::format("{}  sibOut[{}] = {};\n", pad, z, name(m.getOutput()));
      kinds.push_back(fmt::format(
          "modk_cuda::detail::GemmSibling<{}, modk_cuda::detail::EpiStore, "
          "std::remove_cv_t<std::remove_pointer_t<decltype({})>>>",
          n, name(m.getOutput())));
    }
  }
  os << fmt::format("{}  const float *sibW[] = {{{}}};\n", pad,
                    llvm::join(weights, ", "));
  // One launch of the few-row kernel where the plan takes it for the rows;
  // otherwise each member as its own launch.
  KernelArg rows = rowsArg(first.getSegments(), first.getInput());
  os << fmt::format("{}  if (!modk_cuda::linear_siblings<{}, {}, {}, {}, "
                    "{}>({}, {} + B, {}, sibW, sibOut, sibEpi, s)) {{\n",
                    pad, k, productsBf16(first) ? 1 : 0,
                    first.getSiblingsInOrder() ? 1 : 0, gemmPlanName(first),
                    llvm::join(kinds, ", "), name(first.getInput()), rows.text,
                    rows.bound);
  for (modk::GemmOp m : members)
    emitOneGemm(m, indent + 4);
  os << pad << "  }\n" << pad << "}\n";
}

void CudaEmitter::emitOneGemm(modk::GemmOp op, int indent) {
  auto weightShape = cast<MemRefType>(op.getWeights()[0].getType()).getShape();
  int64_t n = weightShape[0], k = weightShape[1];
  std::string a = name(op.getInput()), y = name(op.getOutput());
  std::string w = name(op.getWeights()[0]);
  KernelArg rows = rowsArg(op.getSegments(), op.getInput());
  modk::Epilogue e = op.getEpilogue();
  // The epilogues are fused into the GEMM kernel (modk-generalize wrote
  // them, RoPE and bf16 rounding included, as `rows` epilogues).
  std::vector<int64_t> shape = gemmShape(n, k, op);
  // Each call names the product's plan (#modk.gemm_config).
  auto call = [&](KernelCall c) {
    emitCall(withGemmPlan(std::move(c), op), indent);
  };
  if (e == modk::Epilogue::rows) {
    // The generated functor finishes each element in the tile (EpiArgs
    // carries its buffers); the product is never stored.
    std::string pad(indent, ' ');
    os << pad << "{\n";
    std::string args = rowEpilogueArgs(op);
    for (StringRef line : llvm::split(StringRef(args).rtrim(), '\n'))
      os << pad << "  " << line << "\n";
    modk::RowsOp epilogue = op.getEpilogueRows();
    KernelCall fused = withGemmPlan(
        {"linear_rows_epilogue",
         withBf16Flag({n, k, rowKernelOf.lookup(epilogue)}, op),
         {a, rows, w, "epi"}},
        op);
    if (!epilogue.getHeadDim()) {
      std::string plan = cutlass.planOf(op);
      std::string devicePlan = cutlass.deviceRowsPlanOf(op);
      if (!plan.empty() || !devicePlan.empty()) {
        // On CUTLASS from its variants' rows, the epilogue in its kernel
        // (reading its source, if any: a residual add's y, SwiGLU's gate),
        // the tiles with the generated epilogue below them.
        // An epilogue that stores by itself (the routed block's gated
        // scatter) reads its buffers from a StoreArgs instead.
        Value source;
        std::string src = "nullptr";
        bool storesItself = !op.isElementwiseEpilogue(&source);
        if (storesItself) {
          os << pad
             << "  const modc_cutlass::StoreArgs sa = "
                "modc_cutlass::storeArgsOf(epi);\n";
          src = "&sa";
        } else if (source) {
          src = name(source);
        }
        // An epilogue that reads y in place or stores by itself computes
        // exactly the rows it is given: none where the count is the
        // device's. There a grouped launch of this one product
        // (device_rows_config) computes the rows the device counts, its
        // problem sized on the device; else the tiles run.
        bool exact = storesItself || (source && source == op.getOutput());
        std::vector<std::string> tries;
        if (!plan.empty())
          tries.push_back(fmt::format(
              "modc_cutlass::linear_epilogue<{}, {}, {}>({}, {} + B, {}, {}, "
              "{}, {}, s)",
              n, k, plan, a, rows.text, cutlassRows(op, rows, exact), w, src,
              y));
        if (!devicePlan.empty()) {
          os << pad << "  modc_cutlass::GroupTable cutlassRows;\n"
             << pad << "  cutlassRows.members = 1;\n";
          os << fmt::format("{}  cutlassRows.member[0] = {{{}, {}, {}, {}, "
                            "{} + B, {}}};\n",
                            pad, a, w, source ? name(source) : "nullptr",
                            storesItself ? "nullptr" : y,
                            name(op.getSegments()), storesItself ? "sa" : "{}");
          tries.push_back(fmt::format(
              "modc_cutlass::linear_group<{}, {}, {}>(cutlassRows, {}, s)", n,
              k, devicePlan, deviceRows(op, rows)));
        }
        os << pad << "  if (!" << llvm::join(tries, " &&\n" + pad + "      !")
           << ")\n";
        emitCall(fused, indent + 4);
      } else {
        emitCall(fused, indent + 2);
      }
      os << pad << "}\n";
      return;
    }
    // An epilogue over heads (RoPE) where the plan's tile for the row
    // count cannot hold it: the product (the region's f32 argument), then
    // the epilogue's kernel over it, generated from the same modk.rows. An
    // f32 y holds the product and is finished in place (the kernel loads a
    // pair before it stores it); a bf16 y (queries and keys stored as bf16,
    // modk-store-bf16) cannot, so the product is staged in the entry's
    // scratch, which the kernel reads as it stores y. Only a variant marked
    // separateEpilogue ever declines (a static_assert of the tiles), so
    // only a plan with one needs the scratch.
    //
    // On CUTLASS (from its variants' rows) the kernel stores the f32
    // product, staged the same way, and the epilogue's kernel runs after it.
    std::string plan = cutlass.planOf(op);
    Value product = op.getFusedRows().front().getArgument(0);
    std::string staged = y;
    if (cast<MemRefType>(op.getOutput().getType()).getElementType() !=
        cast<MemRefType>(product.getType()).getElementType()) {
      modk::GemmConfigAttr config = op.getConfigAttr();
      if (!plan.empty() ||
          (config &&
           llvm::any_of(config.getVariants(), [](const modk::GemmVariant &v) {
             return v.separateEpilogue;
           })))
        needScratch(
            fmt::format("sizeof(float) * size_t({}) * {}", rows.bound, n));
      staged = "(float *)scratch";
    }
    if (!plan.empty()) {
      os << fmt::format("{}  const bool onCutlass = "
                        "modc_cutlass::linear_epilogue<{}, {}, {}>({}, {} + "
                        "B, {}, {}, nullptr, {}, s);\n",
                        pad, n, k, plan, a, rows.text,
                        cutlassRows(op, rows, false), w, staged);
      os << pad << "  bool fused = false;\n" << pad << "  if (!onCutlass)\n";
      fused.result = "fused";
      emitCall(fused, indent + 4);
    } else {
      fused.result = "const bool fused";
      emitCall(fused, indent + 2);
    }
    os << pad << "  if (!fused) {\n";
    if (!plan.empty())
      os << pad << "    if (!onCutlass)\n";
    emitCall(withGemmPlan({"linear", shape, {a, rows, w, staged}}, op),
             indent + (plan.empty() ? 4 : 6));
    names[product] = staged;
    emitRowKernelLaunch(epilogue, separateKernelOf.lookup(epilogue));
    os << pad << "  }\n" << pad << "}\n";
  } else if (e == modk::Epilogue::none) {
    if (std::string plan = cutlass.planOf(op); !plan.empty()) {
      // CUTLASS from its variants' rows, the tiles' plan below them.
      os << fmt::format("{:{}}modc_cutlass::linear<{}, {}, {}, {}>({}, {} + B, "
                        "{}, {}, {}, {}, s);\n",
                        "", indent, n, k, gemmPlanName(op), plan, a, rows.text,
                        rows.bound, cutlassRows(op, rows, false), w, y);
      return;
    }
    call({"linear", shape, {a, rows, w, y}});
  }
}

std::string CudaEmitter::deviceRows(modk::GemmOp op,
                                    const KernelArg &rows) const {
  // A selection's count is the host's (B k) in `topk` mode, where the
  // single kernel runs.
  if (modk::hostRowCount(op.getSegments(),
                         cast<MemRefType>(op.getInput().getType())) ==
      modk::HostRowCount::topk)
    return fmt::format("(causal ? {} : 0)", rows.bound);
  return rows.bound;
}

std::string CudaEmitter::cutlassRows(modk::GemmOp op, const KernelArg &rows,
                                     bool exact) const {
  // CUTLASS 2.x's kernels (sm_80's, and every f32 product's, tf32x3) read
  // the count on the device: the bound sizes them.
  if (isCutlassMultistage(op.getConfigAttr()))
    return rows.bound;
  int64_t k = 0;
  std::string device = exact ? "0" : rows.bound;
  switch (modk::hostRowCount(op.getSegments(),
                             cast<MemRefType>(op.getInput().getType()), &k)) {
  case modk::HostRowCount::bound:
    return rows.bound;
  case modk::HostRowCount::topk:
    // seg[b] = b k in `topk` mode: the first B k rows.
    return fmt::format("(causal ? {} : B * {})", device, k);
  case modk::HostRowCount::device:
    return device;
  }
  llvm_unreachable("unknown row count");
}

bool CudaEmitter::emitGradGroup(Operation *op) {
  auto group = op->getAttrOfType<IntegerAttr>("group");
  if (!group)
    return false;
  auto sameGroup = [&](Operation *other) {
    return other && other->getName() == op->getName() &&
           other->getAttrOfType<IntegerAttr>("group") == group;
  };
  // The group's first product launches the neighbours of its group.
  if (sameGroup(op->getPrevNode()))
    return true;
  SmallVector<Operation *> members;
  for (Operation *m = op; sameGroup(m); m = m->getNextNode())
    members.push_back(m);
  // One kernel for all: the same plan (a CUTLASS variant's rows take the
  // tiles' plan in a group, as forward groups take no TMA).
  if (members.size() < 2 || llvm::any_of(members, [&](Operation *m) {
        return gemmPlanName(m) != gemmPlanName(op);
      }))
    return false;
  auto dgrad = dyn_cast<modk::GemmDgradOp>(op);
  auto wgrad = dyn_cast<modk::GemmWgradOp>(op);
  // dy, the other operand, the output and the rows of each member.
  auto operands = [&](Operation *m) {
    if (auto d = dyn_cast<modk::GemmDgradOp>(m))
      return std::array<Value, 4>{d.getDy(), d.getWeight(), d.getDa(),
                                  d.getSegments()};
    auto w = cast<modk::GemmWgradOp>(m);
    return std::array<Value, 4>{w.getDy(), w.getInput(), w.getDw(),
                                w.getSegments()};
  };
  auto element = [&](Value v) {
    return fmt::format("std::remove_cv_t<std::remove_pointer_t<decltype({})>>",
                       name(v));
  };
  // [N, K]: the weight's shape (dgrad), the weight gradient's (wgrad).
  auto shape =
      cast<MemRefType>(operands(op)[dgrad ? 1 : 2].getType()).getShape();
  int64_t n = shape[0], k = shape[1], size = int64_t(members.size());
  // On sm_90a a group whose variants are `grouped` runs as one CUTLASS
  // grouped launch from their rows on, over a table of the members'
  // buffers of its own; the tiles' grouped launch below them and wherever
  // it declines (docs/cuda.md, "CUTLASS").
  std::string groupPlan = cutlass.groupPlanOf(op);
  os << fmt::format("  {{ // group {}: {} {}\n", group.getInt(), size,
                    dgrad ? "input gradients" : "weight gradients");
  os << fmt::format("    modk_cuda::detail::GemmGroup<{}, {}, {}, float> "
                    "group;\n",
                    size, element(operands(op)[0]),
                    dgrad ? std::string("float") : element(operands(op)[1]));
  if (!groupPlan.empty())
    os << "    modc_cutlass::GroupTable cutlassGroup;\n";
  for (auto [z, m] : llvm::enumerate(members)) {
    auto [dy, b, c, rows] = operands(m);
    os << fmt::format("    {{\n      group.a[{0}] = {1};\n      group.b[{0}] "
                      "= {2};\n      group.c[{0}] = {3};\n      "
                      "group.rows[{0}] = {4} + B;\n",
                      z, name(dy), name(b), name(c), name(rows));
    // The member's dY, W (its bf16 copy when launched) or A, the old values
    // its epilogue adds (an accumulating dA, dW) and its output.
    bool adds = !dgrad || cast<modk::GemmDgradOp>(m).getAccumulate();
    if (!groupPlan.empty())
      os << fmt::format("      cutlassGroup.member[{}] = {{{}, {}, {}, {}, {} "
                        "+ B, {{}}}};\n",
                        z, name(dy), name(b), adds ? name(c) : "nullptr",
                        name(c), name(rows));
    os << "    }\n";
  }
  std::string bound = rowsArg(operands(op)[3], operands(op)[0]).bound;
  KernelCall call{dgrad ? "linear_dgrad_group" : "linear_wgrad_group",
                  withBf16Flag({n, k, size}, op),
                  {"group", KernelArg(bound)}};
  if (dgrad)
    call.args.push_back(KernelArg(dgrad.getAccumulate() ? "true" : "false"));
  call = withGemmPlan(std::move(call), op);
  if (wgrad)
    call = std::move(call).withScratch(
        "float",
        fmt::format("sizeof(float) * "
                    "modk_cuda::linear_wgrad_group_scratch_floats<{}, {}, {}, "
                    "{}>({})",
                    n, k, size, call.devicePlan, bound));
  if (!groupPlan.empty()) {
    os << fmt::format("    cutlassGroup.members = {};\n", size);
    // A weight gradients' group may split its rows (split_k): its partials
    // go to the tiles' scratch, as many a member as the tiles' split takes
    // (docs/cuda.md, "CUTLASS").
    if (wgrad)
      os << fmt::format("    if (!modc_cutlass::linear_wgrad_group<{}, {}, {}, "
                        "{}>(cutlassGroup, {}, (float *)scratch, s))\n",
                        n, k, groupPlan, call.devicePlan, bound);
    else
      os << fmt::format("    if (!modc_cutlass::linear_dgrad_group<{}, {}, "
                        "{}>(cutlassGroup, {}, s))\n",
                        n, k, groupPlan, bound);
  }
  emitCall(call, groupPlan.empty() ? 4 : 6);
  os << "  }\n";
  return true;
}

void CudaEmitter::emitGemmWgrad(modk::GemmWgradOp op, const KernelCall &call) {
  if (emitGradGroup(op))
    return;
  // A weight gradient over rows the device counts, outside a group, whose
  // CUTLASS variants are `grouped` (sm_90a): a grouped launch of it alone,
  // whose setup kernel reads its reduction, the row count, on the device;
  // its split's partials in the tiles' scratch, as a group's. The tiles
  // below its rows and wherever it declines (docs/cuda.md, "CUTLASS").
  std::string groupPlan = cutlass.groupPlanOf(op);
  if (groupPlan.empty() || call.devicePlan.empty()) {
    emitCall(call);
    return;
  }
  auto w = cast<MemRefType>(op.getDw().getType()).getShape();
  os << "  {\n    modc_cutlass::GroupTable cutlassRows;\n"
     << "    cutlassRows.members = 1;\n";
  os << fmt::format("    cutlassRows.member[0] = {{{}, {}, {}, {}, {} + B, "
                    "{{}}}};\n",
                    name(op.getDy()), name(op.getInput()), name(op.getDw()),
                    name(op.getDw()), name(op.getSegments()));
  os << fmt::format("    if (!modc_cutlass::linear_wgrad_group<{}, {}, {}, "
                    "{}>(cutlassRows, {}, (float *)scratch, s))\n",
                    w[0], w[1], groupPlan, call.devicePlan,
                    rowsArg(op.getSegments(), op.getDy()).bound);
  emitCall(call, 6);
  os << "  }\n";
}

void CudaEmitter::emitGemmDgrad(modk::GemmDgradOp op, const KernelCall &call) {
  if (emitGradGroup(op))
    return;
  std::string plan = cutlass.planOf(op);
  if (plan.empty()) {
    emitCall(call);
    return;
  }
  // CUTLASS from its variants' rows (its kernels store or add as the
  // product accumulates), the tiles' plan below them.
  auto w = cast<MemRefType>(op.getWeight().getType()).getShape();
  KernelArg rows = rowsArg(op.getSegments(), op.getDy());
  os << fmt::format("  modc_cutlass::linear_dgrad<{}, {}, {}, {}>({}, {} + B, "
                    "{}, {}, {}, {}, s);\n",
                    w[0], w[1], gemmPlanName(op), plan, name(op.getDy()),
                    rows.text, rows.bound, name(op.getWeight()),
                    name(op.getDa()), op.getAccumulate() ? "true" : "false");
}

LogicalResult CudaEmitter::emitTargetKernel(Operation *op) {
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
/// First active sequence whose decode position is outside the context
/// (~0 when none).
unsigned long long *modcBadPosition = nullptr;
/// The scalars of the AdamW step in flight (modc_glue::AdamScalars), on
/// the device so that a captured training step replays with each step's.
float *modcAdamScalars = nullptr;

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
  modc_glue::check_range(tokens, active, n, {3}, safe, modcBadToken, s);
}}
/// Arms the device check of a decode step's positions (each active one in
/// the context [0, {6})).
void checkPositions(const int32_t *positions, const uint8_t *active,
                    int32_t *safe, int64_t B, cudaStream_t s) {{
  cudaMemsetAsync(modcBadPosition, 0xff, sizeof(*modcBadPosition), s);
  modc_glue::check_range(positions, active, B, {6}, safe, modcBadPosition, s);
}}
/// The index a device check recorded (~0 when none), the check re-armed.
unsigned long long takeBad(unsigned long long *flag) {{
  unsigned long long bad = ~0ull;
  cudaMemcpy(&bad, flag, sizeof(bad), cudaMemcpyDeviceToHost);
  if (bad != ~0ull)
    cudaMemset(flag, 0xff, sizeof(*flag));
  return bad;
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
  if ((e = cudaMalloc(&modcBadPosition, sizeof(*modcBadPosition))) != cudaSuccess)
    return cudaFail("modc_cuda_init", "cudaMalloc", e);
  cudaMemset(modcBadPosition, 0xff, sizeof(*modcBadPosition));
  if ((e = cudaMalloc(&modcAdamScalars, sizeof(modc_glue::AdamScalars))) !=
      cudaSuccess)
    return cudaFail("modc_cuda_init", "cudaMalloc", e);
{7}  modcReady = true;
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

/// The version of the parameters the following calls read (0: unknown).
/// Every entry but decode reuses the bf16 weight copies of an earlier call
/// while the version it declared stays the same and no modc_adamw ran since.
{4} int32_t modc_cuda_params_version(uint64_t version) {{
  modk_cuda::declare_params_version(version);
  return 0;
}}

/// Waits for the enqueued work; reports a kernel fault or an invalid token
/// the last entry found (its outputs are then not to be used).
{4} int32_t modc_cuda_sync(void) {{
  if (!modcReady)
    return fail(3, "modc_cuda_sync: call modc_cuda_init first");
  cudaError_t e = cudaStreamSynchronize(modcStream);
  if (e != cudaSuccess)
    return cudaFail("modc_cuda_sync", "a kernel failed", e);
  unsigned long long bad = takeBad(modcBadToken);
  if (bad != ~0ull)
    return fail(1, std::string(modcTokenEntry) + ": token at sequence " +
                       std::to_string(bad / modcTokensPerSequence) +
                       " position " + std::to_string(bad % modcTokensPerSequence) +
                       " is outside the vocabulary [0, {3}); the outputs are "
                       "invalid");
  bad = takeBad(modcBadPosition);
  if (bad != ~0ull)
    return fail(1, "modc_decode: the position of sequence " +
                       std::to_string(bad) +
                       " is outside the context [0, {6}); the outputs are "
                       "invalid");
  return 0;
}}
}} // extern "C"
)cpp",
                    archNumber / 10, archNumber % 10, exact ? "true" : "false",
                    modk::EntryOp(entries.front()).getVocabSize(), kExport,
                    arch, seqLen, ropeTableBuilds());
}

std::string CudaEmitter::ropeTableBuilds() {
  // RoPE's angle tables, built before any entry runs: a captured decode
  // step cannot allocate one (ropeTableFor).
  std::set<std::pair<int64_t, double>> tables;
  for (modk::EntryOp e : entries)
    e.walk([&](modk::RopeAngleOp angle) {
      auto rows = cast<modk::RowsOp>(angle->getParentOp());
      tables.insert({int64_t(*rows.getHeadDim()),
                     angle.getTheta().convertToDouble()});
    });
  std::string text;
  for (auto [hd, theta] : tables)
    text += fmt::format(
        "  if (!modk_cuda::detail::ropeTableFor<{}>({}, {}, modcStream))\n"
        "    return fail(3, \"modc_cuda_init: cannot allocate RoPE's angle "
        "table: \" + std::string(cudaGetErrorString(cudaGetLastError())));\n",
        hd, floatLiteral(theta), seqLen);
  return text;
}

LogicalResult CudaEmitter::emit() {
  modk::EntryOp forward, grad, decode;
  if (failed(classifyEntries(forward, grad, decode)))
    return failure();
  std::string manifest = buildManifest(entries, "cuda", arch);
  collectRowKernels();
  emitBanner(forward);
  os << "// Target: CUDA " << arch << ".\n";
  os << kSmallKernels << "\n"
     << kCommonPrelude << "\n"
     << kGemmTiles << "\n"
     << kFlashAttention << "\n"
     << kPrelude << "\n";
  std::vector<CudaKernelFile> ignored;
  if (failed(emitGemmPlans()) ||
      failed(cutlass.emit(os, kernelFiles ? *kernelFiles : ignored)))
    return failure();
  if (grad)
    os << kFlashAttentionGrad << "\n" << kTrainPrelude << "\n";
  if (decode)
    os << kDecodePrelude << "\n";
  if (failed(emitNamedRowKernels()) || failed(emitRowEpilogueDefinitions()))
    return failure();
  emitHostSupport("#include <vector>\n");
  os << R"cpp(/// MODC_PROFILE: a CUDA event after each kernel group of an entry, timed
/// when the entry ends, so that each time is the GPU's, with no host wait
/// between the kernels.
struct ModcProfile {
  struct Mark {
    int index;
    const char *what;
    cudaEvent_t end;
  };
  cudaEvent_t start = nullptr;
  std::vector<Mark> marks;
};
void modcProfileStart(ModcProfile &p, cudaStream_t s) {
  cudaEventCreate(&p.start);
  cudaEventRecord(p.start, s);
}
/// Marks the end of kernel group `index` on the stream.
void modcProfile(int index, const char *what, cudaStream_t s, ModcProfile &p) {
  cudaEvent_t e = nullptr;
  cudaEventCreate(&e);
  cudaEventRecord(e, s);
  p.marks.push_back({index, what, e});
}
/// Waits for the entry's kernels and prints each group's time.
void modcProfileFlush(ModcProfile &p) {
  if (!p.start)
    return;
  cudaEvent_t prev = p.start;
  if (!p.marks.empty())
    cudaEventSynchronize(p.marks.back().end);
  for (const ModcProfile::Mark &m : p.marks) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, prev, m.end);
    std::fprintf(stderr, "modc profile: kernel %3d %-32s %9.3f ms\n", m.index,
                 m.what, double(ms));
    prev = m.end;
  }
  for (const ModcProfile::Mark &m : p.marks)
    cudaEventDestroy(m.end);
  cudaEventDestroy(p.start);
  p = ModcProfile();
}
} // namespace

namespace modc_glue {
__global__ void check_range_kernel(const int32_t *values,
                                   const uint8_t *active, int64_t n,
                                   int32_t limit, int32_t *safe,
                                   unsigned long long *bad) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  bool valid = values[i] >= 0 && values[i] < limit;
  if (!valid && (!active || active[i]))
    atomicMin(bad, (unsigned long long)i);
  safe[i] = valid ? values[i] : 0;
}
/// Copies `values` (tokens, or a decode step's positions) into `safe`, with
/// 0 for any outside [0, limit), and records in *bad the least index of such
/// a value (among the active ones when `active` is given: a decode step).
/// The kernels read only `safe`, so a bad value costs a reported error,
/// never an access out of bounds.
inline void check_range(const int32_t *values, const uint8_t *active,
                        int64_t n, int32_t limit, int32_t *safe,
                        unsigned long long *bad, cudaStream_t s) {
  auto k = check_range_kernel;
  MODC_LAUNCH(k, (unsigned)modk_cuda::ceilDiv(n, 256), 256, 0, s, values,
              active, n, limit, safe, bad);
}
__global__ void decisions_kernel(int32_t *out, const float *logits, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = logits[i] > 0.0f;
}
/// The scalars of an AdamW step that modc_optimizer_update reads from
/// device memory (modcAdamScalars), in modk.optimizer's order.
struct AdamScalars {
  float values[8];
};
__global__ void set_adam_scalars_kernel(float *dst, AdamScalars scalars) {
  if (threadIdx.x < 8)
    dst[threadIdx.x] = scalars.values[threadIdx.x];
}
/// modc_train_step's AdamW step is skipped where a loss is not finite, as
/// modrt::train stops before the update then.
__global__ void gate_on_losses_kernel(modk_cuda::AdamCtl *ctl,
                                      const float *losses) {
  if (threadIdx.x != 0)
    return;
  for (int i = 0; i < 4; ++i)
    if (!(fabsf(losses[i]) <= 3.40282347e+38f)) // false for NaN
      ctl->finite = 0;
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
  if (failed(emitEntries(forward, grad, decode)))
    return failure();
  os << "} // extern \"C\"\n";
  return success();
}

LogicalResult CudaEmitter::emitEntry(modk::EntryOp e) {
  beginEntry(e);
  bool isGrad = takesTargets(e); // grad or eval: tokens [B, S + 1]
  bool isDecode = e.getKind() == modk::EntryKind::decode;
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
  // Every entry but decode rounds the weights its bf16 products read
  // through TMA (sm_90a) into bf16 copies, once a call: the forward products
  // and training's input gradients read them.
  if (!isDecode)
    os << "  modk_cuda::WeightCopyScope weightCopies;\n";
  // The checked copy of the tokens lives after the kernels' scratch.
  int64_t tokensPerSequence = isGrad ? seqLen + 1 : isDecode ? 1 : seqLen;
  // A decode step's checked positions follow them.
  int64_t checkedPerSequence = tokensPerSequence + (isDecode ? 1 : 0);
  os << fmt::format(
      "  const size_t tokenOffset = ({0}_scratch_bytes(B) + 255) / 256 * 256;\n"
      "  char *scratch = modcScratch(tokenOffset + sizeof(int32_t) * B * {1});\n"
      "  if (!scratch)\n    return fail(3, \"{0}: cannot allocate \" + "
      "std::to_string(tokenOffset + sizeof(int32_t) * B * {1}) + \" bytes of "
      "device scratch\");\n"
      "  int32_t *safeTokens = reinterpret_cast<int32_t *>(scratch + "
      "tokenOffset);\n",
      fn, checkedPerSequence);
  if (isDecode)
    os << "  int32_t *safePositions = safeTokens + B;\n";
  os << "  static const bool profile = std::getenv(\"MODC_PROFILE\") != nullptr;\n";
  os << "  ModcProfile tick;\n  if (profile)\n    modcProfileStart(tick, s);\n";
  if (isDecode) {
    // The weights its few-row products stream from bf16 copies, and its
    // CUTLASS products read, made current before the step runs or replays
    // (outside the capture).
    std::vector<std::pair<size_t, int64_t>> copied = decodeWeightCopies(e);
    std::string indices, counts;
    for (auto [index, count] : copied) {
      indices += fmt::format("{}, ", index);
      counts += fmt::format("{}, ", count);
    }
    // The grouped launches' device memory (CUTLASS: the groups', and the
    // one-member launches of device_rows_config), allocated outside the
    // capture.
    std::set<std::string> reserved;
    e.walk([&](modk::GemmOp gemm) {
      for (const std::string &plan :
           {cutlass.groupPlanOf(gemm), cutlass.deviceRowsPlanOf(gemm)})
        if (!plan.empty() && reserved.insert(plan).second)
          os << "  " << plan << "::reserve(s);\n";
    });
    os << fmt::format(R"cpp(  // The weights streamed from their bf16 copies (bf16_copies).
  constexpr int kCopies = {0};
  static const size_t kCopyParams[kCopies + 1] = {{{1}}};
  static const int64_t kCopyCounts[kCopies + 1] = {{{2}}};
  const float *copyWeights[kCopies + 1] = {{}};
  const modk_cuda::bf16 *copies[kCopies + 1] = {{}};
  for (int i = 0; i < kCopies; ++i)
    copyWeights[i] = args->params[kCopyParams[i]];
  modk_cuda::detail::refreshDecodeCopies(copyWeights, kCopyCounts, kCopies,
                                         copies, s);
)cpp",
                      copied.size(), indices, counts);
    // One decode step is many small kernels: capture them once per set of
    // arguments (pointers, batch, parameter table, weight copies) and
    // replay the graph.
    os << R"cpp(  static cudaGraphExec_t graph = nullptr;
  static modc_decode_args graphArgs;
  static std::vector<const float *> graphParams;
  static std::vector<const modk_cuda::bf16 *> graphCopies;
  static char *graphScratch = nullptr;
  const size_t nParams = )cpp"
       << e.getParams().size() << R"cpp(;
  // The parameter table is compared by content: callers may rebuild it.
  modc_decode_args key = *args;
  key.params = nullptr;
  bool sameGraph = graph && graphScratch == scratch &&
                   std::memcmp(&graphArgs, &key, sizeof(key)) == 0 &&
                   std::equal(graphParams.begin(), graphParams.end(), args->params) &&
                   std::equal(graphCopies.begin(), graphCopies.end(), copies);
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
  if (isDecode)
    os << "  checkPositions(args->positions, args->active, safePositions, B, "
          "s);\n";
  emitBufferNames(e);
  e.walk([&](modk::InputOp input) {
    if (input.getName() == "tokens")
      names[input] = "safeTokens";
    if (input.getName() == "positions")
      names[input] = "safePositions";
  });
  if (failed(emitKernels(e, "s, tick")))
    return failure();
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
    graphArgs = key;
    graphParams.assign(args->params, args->params + nParams);
    graphCopies.assign(copies, copies + kCopies);
    graphScratch = scratch;
    e = cudaGraphLaunch(graph, s);
    if (e != cudaSuccess)
      return cudaFail("modc_decode", "cudaGraphLaunch", e);
  }
)cpp";
  os << fmt::format("  if (profile)\n    modcProfileFlush(tick);\n"
                    "  cudaError_t launched = cudaGetLastError();\n  if "
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
  std::string sizes, decay, copies;
  adamwTables(grad, sizes, decay);
  for (size_t i = 0, e = grad.getParams().size(); i < e; ++i)
    copies += optimizer.keepsBf16Copy(i) ? "true, " : "false, ";
  // modc_optimizer_update reads the step's scalars but grad_scale from
  // device memory (modcAdamScalars), in modk.optimizer's order.
  std::vector<std::string> scalars;
  for (const std::string &arg : optimizerScalarArgs(/*cuda=*/true))
    if (arg != "ctl")
      scalars.push_back(arg);
  // The helpers have C++ linkage: the entries are emitted in extern "C".
  os << fmt::format(R"cpp(}} // extern "C"
namespace {{
namespace modc_adam {{
const int64_t kSizes[] = {{{0}}};
const bool kDecay[] = {{{1}}};
// modk.optimizer's bf16_copies: the parameters kept on the device as bf16.
const bool kBf16Copy[] = {{{2}}};
constexpr int kParams = {3};

/// The refusals of modc_adamw's host-visible arguments (0: none).
int32_t modcAdamwCheck(const modc_adamw_args *args) {{
  if (!args || !args->params || !args->grads || !args->m || !args->v ||
      !args->grad_norm)
    return fail(1, "modc_adamw: a required pointer is null");
  if (args->step < 1)
    return fail(1, "modc_adamw: step must be >= 1, got " + std::to_string(args->step));
  if (!modcReady)
    return fail(3, "modc_adamw: call modc_cuda_init first");
  return 0;
}}

/// Every parameter in one device table, so that the norm and the update are
/// one launch each; `written` gets each parameter's bf16 copy (null where
/// it keeps none), which the update writes with the master. Rounds the
/// copies that are not current and uploads the table when it changed, so a
/// second call with the same arguments enqueues nothing. Null where no
/// device memory is left.
const modk_cuda::AdamTensor *modcAdamwTable(const modc_adamw_args *args,
                                   const modk_cuda::bf16 **written,
                                   int64_t &chunks, cudaStream_t s) {{
  std::vector<modk_cuda::AdamTensor> tensors(kParams);
  chunks = 0;
  for (int i = 0; i < kParams; ++i) {{
    modk_cuda::bf16 *copy =
        kBf16Copy[i] ? modk_cuda::detail::optimizerCopyOf(args->params[i],
                                                          kSizes[i], s)
                     : nullptr;
    tensors[i] = {{args->params[i], args->grads[i], args->m[i], args->v[i],
                  copy, kSizes[i], chunks, kDecay[i] ? 1 : 0}};
    written[i] = copy;
    chunks += modk_cuda::adamChunks(kSizes[i]);
  }}
  return modk_cuda::adamw_tensors(tensors, s);
}}

/// Enqueues the write of the step's scalars into modcAdamScalars: a kernel
/// with them as its arguments, so that nothing waits on the host.
void modcAdamwScalars(const modc_adamw_args *args, cudaStream_t s) {{
{4}  modc_glue::AdamScalars values = {{{{{5}}}}};
  MODC_LAUNCH(modc_glue::set_adam_scalars_kernel, 1, 32, 0, s, modcAdamScalars,
              values);
}}

/// The AdamW step. `scalarsWritten`: the caller wrote the step's scalars
/// (a captured training step writes them before each replay, outside the
/// graph). `gateLosses` (device, may be null): the update is skipped where
/// one of these four losses is not finite, as where the norm is not.
int32_t modcAdamwStep(const modc_adamw_args *args, bool scalarsWritten,
             const float *gateLosses) {{
  if (int32_t status = modcAdamwCheck(args))
    return status;
  cudaStream_t s = modcStream;
  char *scratch = modcScratch(modk_cuda::adamw_scratch_bytes(kSizes, kParams));
  if (!scratch)
    return fail(3, "modc_adamw: cannot allocate device scratch");
  const modk_cuda::bf16 *written[kParams];
  int64_t chunks = 0;
  const modk_cuda::AdamTensor *tensors = modcAdamwTable(args, written, chunks, s);
  if (!tensors)
    return fail(3, "modc_adamw: cannot copy the parameter table to the device");
  if (!scalarsWritten)
    modcAdamwScalars(args, s);
  // The update kernel skips when the norm is not finite, so a bad gradient
  // never reaches the weights; the caller reads *grad_norm to know. Nothing
  // here waits for the device.
  const modk_cuda::AdamCtl *ctl = modk_cuda::adamw_norm(
      modc_rows::modc_optimizer_norm, tensors, kParams, chunks, args->clip_norm,
      args->grad_norm, scratch, s);
  if (gateLosses)
    MODC_LAUNCH(modc_glue::gate_on_losses_kernel, 1, 32, 0, s,
                const_cast<modk_cuda::AdamCtl *>(ctl), gateLosses);
  if (chunks > 0)
    MODC_LAUNCH(modc_rows::modc_optimizer_update,
                unsigned(std::min<int64_t>(chunks, modk_cuda::detail::kMaxGrid)),
                modk_cuda::detail::kThreads, 0, s, tensors, kParams, chunks, ctl,
                modcAdamScalars);
  // The weights changed: the forward's bf16 copies of them are stale, but
  // for those the update wrote.
  modk_cuda::params_written(written, kParams);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return cudaFail("modc_adamw", "launching the AdamW step", e);
  return 0;
}}
}} // namespace modc_adam
}} // namespace
extern "C" {{

{6} int32_t
modc_adamw(const modc_adamw_args *args) {{
  return modc_adam::modcAdamwStep(args, /*scalarsWritten=*/false, /*gateLosses=*/nullptr);
}}
)cpp",
                    sizes, decay, copies, grad.getParams().size(),
                    optimizerStepScalars(), fmt::join(scalars, ", "), kExport);
  emitTrainStep(grad);
}

void CudaEmitter::emitTrainStep(modk::EntryOp grad) {
  int64_t tokensPerSequence = seqLen + 1;
  os << fmt::format(R"cpp(}} // extern "C"
namespace {{
/// modc_train_step's CUDA graph and what it baked in (docs/cuda.md, "A
/// training step is one CUDA graph").
struct ModcTrainGraph {{
  cudaGraphExec_t exec = nullptr;
  /// The arguments with the pointer tables' contents beside them; the
  /// scalars that modcAdamScalars carries are zeroed.
  modc_grad_args grad{{}};
  modc_adamw_args adamw{{}};
  std::vector<const void *> tables;
  char *scratch = nullptr;
  const modk_cuda::AdamTensor *adamTable = nullptr;
  /// The bf16 weight copies the graph reads or writes, with their weights.
  std::vector<std::pair<const float *, const modk_cuda::bf16 *>> copies;
  bool sameArguments(const ModcTrainGraph &o) const {{
    return std::memcmp(&grad, &o.grad, sizeof(grad)) == 0 &&
           std::memcmp(&adamw, &o.adamw, sizeof(adamw)) == 0 &&
           tables == o.tables && scratch == o.scratch &&
           adamTable == o.adamTable;
  }}
}};

/// The key of a step: what a graph of it bakes in but the copies.
ModcTrainGraph modcTrainKey(const modc_train_step_args *args, char *scratch,
                            const modk_cuda::AdamTensor *adamTable) {{
  ModcTrainGraph key;
  key.grad = args->grad;
  key.grad.params = nullptr;
  key.grad.grads = nullptr;
  key.adamw = args->adamw;
  key.adamw.params = key.adamw.m = key.adamw.v = nullptr;
  key.adamw.grads = nullptr;
  // In device memory (modcAdamScalars), written before each replay.
  key.adamw.step = 0;
  key.adamw.lr = key.adamw.beta1 = key.adamw.beta2 = key.adamw.eps =
      key.adamw.weight_decay = 0.0f;
  const int n = modc_adam::kParams;
  const void *const *tables[] = {{
      (const void *const *)args->grad.params, (const void *const *)args->grad.grads,
      (const void *const *)args->adamw.params, (const void *const *)args->adamw.grads,
      (const void *const *)args->adamw.m, (const void *const *)args->adamw.v}};
  for (const void *const *t : tables)
    key.tables.insert(key.tables.end(), t, t + n);
  key.scratch = scratch;
  key.adamTable = adamTable;
  return key;
}}

/// Whether weight `src`'s copy is still `copy` (a copy idle too long is
/// freed, and its memory may go to another).
bool modcCopyHeld(const std::pair<const float *, const modk_cuda::bf16 *> &c) {{
  for (const modk_cuda::detail::WeightCopy &w :
       modk_cuda::detail::weightCopies().copies)
    if (w.src == c.first && w.copy == c.second)
      return true;
  return false;
}}

/// Marks the copies a graph uses as used by this call, so that none is
/// freed as idle while the graph reads it.
void modcTouchCopies(
    const std::vector<std::pair<const float *, const modk_cuda::bf16 *>> &used) {{
  modk_cuda::detail::WeightCopies &w = modk_cuda::detail::weightCopies();
  for (modk_cuda::detail::WeightCopy &c : w.copies)
    if (std::find(used.begin(), used.end(), std::make_pair(
            static_cast<const float *>(c.src),
            static_cast<const modk_cuda::bf16 *>(c.copy))) != used.end())
      c.epoch = w.epoch;
}}

/// The step uncaptured: modc_grad, then the AdamW step, skipped where a
/// loss is not finite.
int32_t modcTrainStepUncaptured(const modc_train_step_args *args) {{
  if (int32_t status = modc_grad(&args->grad))
    return status;
  return modc_adam::modcAdamwStep(&args->adamw, /*scalarsWritten=*/false,
                         args->grad.losses);
}}
}} // namespace
extern "C" {{

/// One training step, modc_grad then modc_adamw, captured once into a CUDA
/// graph and replayed while its arguments repeat (docs/cuda.md).
{0} int32_t
modc_train_step(const modc_train_step_args *args) {{
  if (!args)
    return fail(1, "modc_train_step: arguments are null");
  if (!modcReady)
    return fail(3, "modc_train_step: call modc_cuda_init first");
  // MODC_TRAIN_GRAPH=0 turns the graph off, =trace prints what each call
  // does; profiling times each kernel and the GEMM trace prints each call's
  // launches, so both run uncaptured.
  static const char *graphEnv = std::getenv("MODC_TRAIN_GRAPH");
  static const bool graphs = !(graphEnv && std::strcmp(graphEnv, "0") == 0) &&
                             std::getenv("MODC_PROFILE") == nullptr &&
                             modk_cuda::detail::tracingGemms() == 0;
  static const bool trace = graphEnv && std::strcmp(graphEnv, "trace") == 0;
  auto note = [](const char *what) {{
    if (trace)
      std::fprintf(stderr, "modc_train_step: %s\n", what);
  }};
  const modc_grad_args *g = &args->grad;
  const modc_adamw_args *a = &args->adamw;
  // Arguments the entries refuse are refused by them, uncaptured.
  if (!graphs || g->batch < 1 || g->batch > {1} / {2} || g->seq_len != {3} ||
      !g->tokens || !g->params || !g->grads || !g->losses || !g->workspace ||
      modc_adam::modcAdamwCheck(a) != 0) {{
    note("uncaptured");
    return modcTrainStepUncaptured(args);
  }}
  cudaStream_t s = modcStream;
  // Everything the step allocates, rounds or uploads happens here, outside
  // the graph: scratch for both entries (neither grows it then), the bf16
  // copies made current, the AdamW table uploaded.
  const size_t gradScratch =
      (modc_grad_scratch_bytes(g->batch) + 255) / 256 * 256 +
      sizeof(int32_t) * g->batch * {2};
  char *scratch = modcScratch(std::max<size_t>(
      gradScratch, modk_cuda::adamw_scratch_bytes(modc_adam::kSizes,
                                                  modc_adam::kParams)));
  if (!scratch)
    return fail(3, "modc_train_step: cannot allocate device scratch");
  const modk_cuda::bf16 *written[modc_adam::kParams];
  int64_t chunks = 0;
  const modk_cuda::AdamTensor *adamTable =
      modc_adam::modcAdamwTable(a, written, chunks, s);
  if (!adamTable)
    return fail(3, "modc_train_step: cannot copy the parameter table to the device");
  static ModcTrainGraph graph, warm;
  static bool warmed = false;
  ModcTrainGraph key = modcTrainKey(args, scratch, adamTable);
  bool replay = graph.exec && key.sameArguments(graph);
  for (const auto &c : graph.copies)
    replay = replay && modcCopyHeld(c);
  for (int i = 0; i < modc_adam::kParams; ++i)
    replay = replay &&
             (!written[i] ||
              std::find(graph.copies.begin(), graph.copies.end(),
                        std::make_pair(static_cast<const float *>(a->params[i]),
                                       written[i])) != graph.copies.end());
  if (replay) {{
    // The host's side of what the captured calls did: modc_grad's token
    // check and weight-copy call, modc_adamw's scalars and copies.
    modcTokenEntry = "modc_grad";
    modcTokensPerSequence = {2};
    {{
      modk_cuda::WeightCopyScope call;
      modcTouchCopies(graph.copies);
    }}
    modc_adam::modcAdamwScalars(a, s);
    cudaError_t e = cudaGraphLaunch(graph.exec, s);
    if (e != cudaSuccess)
      return cudaFail("modc_train_step", "cudaGraphLaunch", e);
    modk_cuda::params_written(written, modc_adam::kParams);
    note("replayed");
    return 0;
  }}
  // New arguments: the first step with them runs uncaptured (it makes any
  // weight copy the products ask for: no allocation may happen in a
  // capture), the second is captured.
  if (!warmed || !key.sameArguments(warm)) {{
    warm = key;
    warmed = true;
    note("uncaptured (new arguments)");
    return modcTrainStepUncaptured(args);
  }}
  if (graph.exec)
    cudaGraphExecDestroy(graph.exec);
  graph = ModcTrainGraph();
  modk_cuda::detail::WeightCopies &copies = modk_cuda::detail::weightCopies();
  // A copy that the AdamW step does not write is rounded in the graph (it
  // is stale after every step), and none is freed as idle in the capture.
  for (modk_cuda::detail::WeightCopy &c : copies.copies) {{
    if (std::find(written, written + modc_adam::kParams, c.copy) ==
        written + modc_adam::kParams)
      c.generation = 0;
    c.epoch = copies.epoch;
  }}
  const modk_cuda::detail::WeightCopies before = copies;
  modc_adam::modcAdamwScalars(a, s);
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    return fail(3, "modc_train_step: cannot capture the training step");
  int32_t status = modc_grad(g);
  if (status == 0)
    status = modc_adam::modcAdamwStep(a, /*scalarsWritten=*/true, g->losses);
  cudaGraph_t captured = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &captured);
  if (e == cudaSuccess && status == 0)
    e = cudaGraphInstantiate(&graph.exec, captured, 0);
  if (captured)
    cudaGraphDestroy(captured);
  if (status != 0 || e != cudaSuccess) {{
    // Nothing captured ran: the copies' state goes back to before it (a
    // copy made in the capture, never rounded, is freed).
    cudaGetLastError();
    for (const modk_cuda::detail::WeightCopy &c : copies.copies)
      if (std::none_of(before.copies.begin(), before.copies.end(),
                       [&](const modk_cuda::detail::WeightCopy &b) {{
                         return b.copy == c.copy;
                       }}))
        cudaFree(c.copy);
    copies = before;
    graph = ModcTrainGraph();
    warmed = false;
    if (status != 0)
      return status;
    note("uncaptured (the capture failed)");
    return modcTrainStepUncaptured(args);
  }}
  ModcTrainGraph made = key;
  made.exec = graph.exec;
  for (const modk_cuda::detail::WeightCopy &c : copies.copies)
    if (c.epoch == copies.epoch)
      made.copies.push_back({{c.src, c.copy}});
  for (int i = 0; i < modc_adam::kParams; ++i) {{
    std::pair<const float *, const modk_cuda::bf16 *> c{{a->params[i], written[i]}};
    if (written[i] &&
        std::find(made.copies.begin(), made.copies.end(), c) == made.copies.end())
      made.copies.push_back(c);
  }}
  graph = made;
  e = cudaGraphLaunch(graph.exec, s);
  if (e != cudaSuccess)
    return cudaFail("modc_train_step", "cudaGraphLaunch", e);
  note("captured");
  return 0;
}}
)cpp",
                    kExport, INT32_MAX, tokensPerSequence, seqLen);
}

LogicalResult modc::emitCuda(ModuleOp module, llvm::raw_ostream &os,
                             llvm::StringRef arch,
                             std::vector<CudaKernelFile> *kernelFiles) {
  auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
  if (entries.empty())
    return module.emitError("expected a modk.entry to emit");
  if (!isSupportedCudaArch(arch))
    return module.emitError("unsupported CUDA architecture '")
           << arch << "'; expected sm_90a or sm_80";
  if (kernelFiles || !usesCutlass(entries))
    return CudaEmitter(entries, os, arch, kernelFiles).emit();
  // One stream of every source file, each after a line naming it
  // (split-file's format), so that --emit=source shows the kernel files.
  std::vector<CudaKernelFile> files;
  std::string model;
  llvm::raw_string_ostream modelOs(model);
  if (failed(CudaEmitter(entries, modelOs, arch, &files).emit()))
    return failure();
  os << "//--- model.cu\n" << model;
  for (const CudaKernelFile &file : files)
    os << "//--- " << file.path << "\n" << file.text;
  return success();
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
  static llvm::cl::opt<int> cutlassKernel(
      "cutlass-kernel",
      llvm::cl::desc("The CUTLASS kernel --modk-cutlass-kernel-to-cuda emits "
                     "(0: the first)"),
      llvm::cl::init(0));
  TranslateFromMLIRRegistration cutlassKernels(
      "modk-cutlass-kernel-to-cuda",
      "Emit one CUTLASS kernel of the configured products, instantiated, as "
      "a source of its own (a build check)",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module || module.getOps<modk::EntryOp>().empty())
          return op->emitError("expected a builtin.module of modk.entry ops");
        auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
        if (!usesCutlass(entries))
          return op->emitError("no product runs on CUTLASS: run "
                               "modk-configure-gemms{library=cutlass}");
        std::vector<CudaKernelFile> files;
        return CutlassGemms(entries, arch).emit(os, files, cutlassKernel);
      },
      [](DialectRegistry &registry) {
        registry.insert<modk::ModkDialect, memref::MemRefDialect>();
      });
  TranslateFromMLIRRegistration rows(
      "modk-rows-to-cuda",
      "Emit only the CUDA kernels and GEMM epilogues of the modk.rows ops "
      "(for kernel tests)",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module || module.getOps<modk::EntryOp>().empty())
          return op->emitError("expected a builtin.module of modk.entry ops");
        auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
        return CudaEmitter(entries, os, arch).emitRowKernels();
      },
      [](DialectRegistry &registry) {
        registry.insert<modk::ModkDialect, memref::MemRefDialect>();
      });
}
