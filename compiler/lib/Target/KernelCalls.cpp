//===- KernelCalls.cpp - The kernel calls both emitters share ---*- C++ -*-===//
//
// The CPU and CUDA kernel libraries mirror each other: the same template, the
// same operands in the same order. So the calls of most modk ops are written
// here once, as KernelCalls, and each emitter renders them for its target
// (modk_cpu:: or modk_cuda::, the row-count form, the stream, scratch). What
// a target writes its own way goes through PlanEmitter's hooks.
//
//===----------------------------------------------------------------------===//

#include "PlanEmitter.h"

#include "Cuda/CutlassGemms.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace mlir;
using namespace modc;

void PlanEmitter::writeCall(StringRef ns, const KernelCall &call,
                            ArrayRef<std::string> args, int indent) {
  std::vector<std::string> templateArgs;
  for (int64_t a : call.templateArgs)
    templateArgs.push_back(std::to_string(a));
  if (!call.devicePlan.empty())
    templateArgs.push_back(call.devicePlan);
  std::string templ = templateArgs.empty()
                          ? std::string()
                          : fmt::format("<{}>", fmt::join(templateArgs, ", "));
  os << fmt::format("{:{}}{}{}::{}{}({});\n", "", indent,
                    call.result.empty() ? "" : call.result + " = ",
                    call.ns.empty() ? ns.str() : call.ns, call.fn, templ,
                    fmt::join(args, ", "));
}

void PlanEmitter::addKvHeads(KernelCall &call, int64_t heads, int64_t kvHeads,
                             Value q, Value k, Value v,
                             std::optional<modk::GemmPath> mainloop) {
  if (kvHeads == heads)
    return;
  // The strides are every one's, window or not; they replace the window
  // strides that the shared template arguments may have.
  call.templateArgs.resize(2);
  for (Value buffer : {q, k, v})
    call.hostTemplateArgs.push_back(
        modk::ColumnWindowOp::rowStride(cast<MemRefType>(buffer.getType())));
  call.hostTemplateArgs.push_back(kvHeads);
  // Both flags, then n_kv_heads; no mainloop: the kernel's default, the
  // tensor cores.
  call.deviceTemplateArgs = {entry.isBf16() ? 1 : 0,
                             mainloop ? attentionMainloopArg(*mainloop) : 1,
                             kvHeads};
}

KernelCall PlanEmitter::decodeAttentionCall(modk::DecodeAttentionOp op,
                                            std::string cacheK,
                                            std::string cacheV) {
  int64_t heads = op.getNHeads(), d = width(op.getQ());
  std::vector<int64_t> sizes{seqLen, heads, d / heads};
  // Grouped-query attention: the cache holds n_kv_heads heads.
  if (op.getKvHeads() != heads)
    sizes.push_back(op.getKvHeads());
  return {"decode_attention",
          std::move(sizes),
          {name(op.getQ()), name(op.getK()), name(op.getV()), "B",
           name(op.getSegments()), name(op.getPositions()),
           name(op.getActive()), std::move(cacheK), std::move(cacheV),
           fmt::format("args->kv_counts + (int64_t){} * B", op.getLayer()),
           name(op.getOutput())}};
}

static const char *boolLiteral(bool b) { return b ? "true" : "false"; }

std::string PlanEmitter::kvCacheRegion(int64_t layer, bool values,
                                       int64_t d) {
  std::string cache =
      entry.isBf16()
          ? fmt::format("reinterpret_cast<{}::bf16 *>(args->kv_cache)",
                        kernelNamespace())
          : std::string("args->kv_cache");
  return fmt::format("{} + (int64_t){} * B * {} * {}", cache,
                     2 * layer + (values ? 1 : 0), seqLen, d);
}

/// The CPU kernels read column windows (modk-fuse-horizontal; each kernel
/// says which operands, modk::ColumnWindowReader); the CUDA ones do not.
LogicalResult PlanEmitter::checkColumnWindows(Operation *op) {
  if (!targetIsCuda())
    return success();
  for (OpOperand &use : op->getOpOperands())
    if (use.get().getDefiningOp<modk::ColumnWindowOp>())
      return op->emitOpError() << "reads a column window (operand "
                               << use.getOperandNumber()
                               << ", modk-fuse-horizontal), which CUDA "
                                  "kernels do not";
  return success();
}

std::vector<int64_t> PlanEmitter::windowStrides(ValueRange buffers) {
  std::vector<int64_t> strides;
  bool window = false;
  for (Value v : buffers) {
    window |= bool(v.getDefiningOp<modk::ColumnWindowOp>());
    strides.push_back(
        modk::ColumnWindowOp::rowStride(cast<MemRefType>(v.getType())));
  }
  return window ? strides : std::vector<int64_t>();
}

LogicalResult PlanEmitter::checkGemmEmittable(modk::GemmOp gemm) {
  modk::Epilogue e = gemm.getEpilogue();
  if (e != modk::Epilogue::none && e != modk::Epilogue::rows)
    return gemm.emitOpError("with a ")
           << modk::stringifyEpilogue(e)
           << " epilogue is generated from its math: run modk-generalize "
              "before emitting";
  if (gemm.getRoundBf16() ||
      (e == modk::Epilogue::none && holdsBf16(gemm.getOutput())))
    return gemm.emitOpError("rounds its output to bf16: modk-generalize "
                            "writes that rounding as a `rows` epilogue; run "
                            "it before emitting");
  size_t stacked = gemm.getWeights().size();
  if (stacked > 1 && targetIsCuda())
    return gemm.emitOpError("stacks ")
           << stacked
           << " weights (modk-fuse-horizontal), which the CUDA "
              "emitter does not; the pass is for CPU targets";
  return success();
}

LogicalResult PlanEmitter::emitKernel(Operation *op) {
  if (failed(checkColumnWindows(op)))
    return failure();
  if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
    if (failed(checkGemmEmittable(gemm)))
      return failure();
    size_t stacked = gemm.getWeights().size();
    int64_t n = gemm.getStackedN();
    int64_t k = cast<MemRefType>(gemm.getWeights()[0].getType()).getDimSize(1);
    int indent = openGroup(fmt::format(
        "modk.gemm [{} x {}]{} epilogue={}", n, k,
        stacked > 1 ? fmt::format(" ({} stacked)", stacked) : std::string(),
        modk::stringifyEpilogue(gemm.getEpilogue()).str()));
    emitGemm(gemm, indent);
    closeGroup();
    return success();
  }
  if (auto rows = dyn_cast<modk::RowsOp>(op)) {
    emitRowKernelLaunch(rows, rowKernelOf.lookup(rows));
    return success();
  }
  if (isa<modk::RMSNormOp, modk::AddOp, modk::ActivationOp,
          modk::ActivationGradOp, modk::GatherGradOp, modk::ScatterGradOp,
          modk::RMSNormGradOp, modk::RouterGradOp, modk::RopeGradOp,
          modk::EmbedOp, modk::EmbedGradOp, modk::PredictorOp,
          modk::PredictorGradOp>(op))
    return op->emitOpError("is generated from its math: run modk-generalize "
                           "before emitting");
  if (auto ids = dyn_cast<modk::IdentityRowsOp>(op)) {
    emitCall({"identity_segments",
              {width(ids.getPositions())},
              {"B", name(ids.getPositions()), name(ids.getSegments())}});
    return success();
  }
  if (auto split = dyn_cast<modk::SplitTokensOp>(op)) {
    emitCall({"split_tokens",
              {seqLen},
              {name(split.getTokens()), "B", name(split.getInputs()),
               name(split.getTargets())}});
    return success();
  }
  if (auto attn = dyn_cast<modk::AttentionOp>(op)) {
    int64_t heads = attn.getNHeads();
    // The CUDA grid covers the most rows a segment can hold (S, or k in
    // top-k).
    KernelCall call{
        "causal_attention",
        {heads, width(attn.getQ()) / heads},
        {name(attn.getQ()), name(attn.getK()), name(attn.getV()), "B",
         name(attn.getSegments()), name(attn.getPositions()),
         KernelArg::deviceOnly(fmt::format(
             "{}", cast<MemRefType>(attn.getQ().getType()).getDimSize(1))),
         name(attn.getOutput())}};
    // Its inputs are bf16 values: the tensor cores skip their zero tf32
    // lo parts (the same result; the CPU kernel has nothing to skip). Then
    // the configured mainloop.
    call.deviceTemplateArgs = attentionTemplateArgs(attn.getMainloop());
    // Q, K and V may be windows of one stacked product (CPU).
    llvm::append_range(call.templateArgs,
                       windowStrides({attn.getQ(), attn.getK(), attn.getV()}));
    addKvHeads(call, heads, attn.getKvHeads(), attn.getQ(), attn.getK(),
               attn.getV(), attn.getMainloop());
    emitCall(call);
    return success();
  }
  if (auto append = dyn_cast<modk::CacheAppendOp>(op)) {
    // The causal prefill, where the caller passes a KV cache.
    int64_t layer = append.getLayer(), d = width(append.getK());
    std::vector<int64_t> sizes{seqLen, d};
    llvm::append_range(sizes, windowStrides({append.getK(), append.getV()}));
    os << "  if (args->kv_cache)\n";
    emitCall({"cache_append",
              std::move(sizes),
              {name(append.getK()), name(append.getV()), "B",
               name(append.getSegments()), name(append.getPositions()),
               "args->prefill_lengths", kvCacheRegion(layer, false, d),
               kvCacheRegion(layer, true, d),
               fmt::format("args->kv_counts + (int64_t){} * B", layer)}},
             4);
    return success();
  }
  if (auto route = dyn_cast<modk::RouteSelectOp>(op)) {
    int64_t k = route.getK();
    std::string pos = name(route.getPositions()),
                seg = name(route.getSegments());
    std::string mask = name(route.getMask()), r = name(route.getScores());
    modc::CausalRouter causal = route.getCausalRouter();
    std::string logits = causal == modc::CausalRouter::predictor
                             ? name(route.getCausalScores())
                             : r;
    modk::RowsOp gather = route.getGatherRows();
    int indent =
        openGroup(fmt::format("modk.route_select layer {} k={}{}",
                              route.getLayer(), k, gather ? " + gather" : ""));
    std::string pad(indent, ' ');
    KernelCall topk{"select_topk", {seqLen, k}, {r, "B", pos, seg, mask}};
    // A fused gather (modk-fuse-select-gather) runs in the top-k kernel, a
    // sequence as soon as it is selected; after a causal selection, whose
    // compaction spans the sequences, a sequence at a time. On CUDA each
    // sequence takes `gather_blocks` blocks (modk-configure-gemms).
    std::optional<uint64_t> blocks = route.getGatherBlocks();
    if (gather) {
      if (blocks)
        topk.deviceTemplateArgs.push_back(int64_t(*blocks));
      topk.args.push_back(gatherFunctor(gather));
    }
    if (causal != modc::CausalRouter::none) {
      os << pad << "if (causal) {\n";
      emitCall({"select_causal", {seqLen}, {logits, "B", pos, seg, mask}},
               indent + 2);
      if (gather) {
        KernelCall sequences{
            "gather_sequences", {}, {"B", seg, gatherFunctor(gather)}};
        if (blocks)
          sequences.deviceTemplateArgs.push_back(int64_t(*blocks));
        emitCall(sequences, indent + 2);
      }
      os << pad << "} else {\n";
      emitCall(topk, indent + 2);
      os << pad << "}\n";
      // The causal decision of every token on this pass's stream, on request
      // (modc_forward's argument).
      if (entry.getKind() == modk::EntryKind::forward) {
        os << pad << "if (args->causal_decisions)\n";
        emitCausalDecisions(routedIndex[route.getLayer()], logits, indent + 2);
      }
    } else {
      emitCall(topk, indent);
    }
    closeGroup();
    return success();
  }
  if (auto zero = dyn_cast<modk::ZeroOp>(op)) {
    Value out = zero.getOutput();
    emitMemset(name(out),
               fmt::format("sizeof(*{}) * {}", name(out), elements(out)));
    return success();
  }
  if (auto copy = dyn_cast<modk::CopyOp>(op)) {
    Value in = copy.getInput(), out = copy.getOutput();
    if (cast<MemRefType>(in.getType()).getElementType() ==
        cast<MemRefType>(out.getType()).getElementType()) {
      emitMemcpy(name(out), name(in),
                 fmt::format("sizeof(*{}) * {}", name(out), elements(out)));
      return success();
    }
    // modk-generalize writes a copy into another element type as a row
    // kernel that rounds as it stores.
    return copy.emitOpError()
           << "copies into another element type: modk-generalize writes "
              "that rounding as a modk.rows; run it before emitting";
  }
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op)) {
    auto w = cast<MemRefType>(dgrad.getWeight().getType()).getShape();
    emitGemmDgrad(dgrad,
                  withGemmPlan({"linear_dgrad",
                                gemmShape(w[0], w[1]),
                                {name(dgrad.getDy()),
                                 rowsArg(dgrad.getSegments(), dgrad.getDy()),
                                 name(dgrad.getWeight()), name(dgrad.getDa()),
                                 boolLiteral(dgrad.getAccumulate())}},
                               dgrad));
    return success();
  }
  if (auto wgrad = dyn_cast<modk::GemmWgradOp>(op)) {
    auto w = cast<MemRefType>(wgrad.getDw().getType()).getShape();
    if (wgrad.getOverwrite() && targetIsCuda())
      return op->emitOpError("overwrites its weight gradient "
                             "(modk-fold-zero-fills), which the CUDA kernels "
                             "do not; the pass is for CPU targets");
    // The CUDA kernel always accumulates; the CPU one is told whether to
    // (not where modk-fold-zero-fills let it write the gradient). On CUDA a
    // small weight splits the rows into chunks whose partials are summed in a
    // fixed order (scratch), so few output tiles still fill the GPU.
    KernelCall call = withGemmPlan(
        {"linear_wgrad",
         gemmShape(w[0], w[1], wgrad),
         {name(wgrad.getDy()), rowsArg(wgrad.getSegments(), wgrad.getDy()),
          name(wgrad.getInput()), name(wgrad.getDw()),
          KernelArg::hostOnly(boolLiteral(!wgrad.getOverwrite()))}},
        wgrad);
    std::string plan = call.devicePlan.empty() ? "" : ", " + call.devicePlan;
    call = std::move(call).withScratch(
        "float",
        fmt::format("sizeof(float) * "
                    "modk_cuda::linear_wgrad_scratch_floats<{}, {}{}>({})",
                    w[0], w[1], plan, maxRows(wgrad.getDy())));
    // On CUDA, a configuration with a single CUTLASS variant (sm_90a's:
    // its rows proven to be the bound, modk-configure-gemms; sm_80's: any
    // rows) calls the CUTLASS plan's entry point, which falls back on the
    // tiles' plan and their scratch; a `grouped` one is emitted by the
    // target (docs/cuda.md, "CUTLASS").
    if (std::string cutlass = cutlassWgradPlan(wgrad);
        !cutlass.empty() && !call.devicePlan.empty()) {
      call.ns = "modc_cutlass";
      call.templateArgs = {w[0], w[1]};
      call.deviceTemplateArgs.clear();
      call.devicePlan += ", " + cutlass;
    }
    emitGemmWgrad(wgrad, call);
    return success();
  }
  if (auto attn = dyn_cast<modk::AttentionGradOp>(op)) {
    int64_t heads = attn.getNHeads();
    KernelCall call =
        KernelCall{
            "causal_attention_grad",
            {heads, width(attn.getQ()) / heads},
            {name(attn.getQ()), name(attn.getK()), name(attn.getV()),
             name(attn.getO()), name(attn.getDout()), "B",
             name(attn.getSegments()), name(attn.getPositions()),
             KernelArg::deviceOnly(fmt::format(
                 "{}", cast<MemRefType>(attn.getQ().getType()).getDimSize(1))),
             name(attn.getDq()), name(attn.getDk()), name(attn.getDv()),
             // A bf16 model's D reads o rounded, as wo's products read it
             // (docs/model-format.md, "bf16 models").
             boolLiteral(entry.isBf16())}}
            .withScratch("float",
                         fmt::format("sizeof(float) * modk_cuda::"
                                     "attention_grad_scratch_floats<{}>({})",
                                     heads, maxRows(attn.getQ())));
    // As in the forward: bf16 inputs, fewer tensor-core instructions; the
    // configured mainloop.
    call.deviceTemplateArgs = attentionTemplateArgs(attn.getMainloop());
    llvm::append_range(call.templateArgs,
                       windowStrides({attn.getQ(), attn.getK(), attn.getV()}));
    addKvHeads(call, heads, attn.getKvHeads(), attn.getQ(), attn.getK(),
               attn.getV(), attn.getMainloop());
    emitCall(call);
    return success();
  }
  if (auto attn = dyn_cast<modk::DecodeAttentionOp>(op)) {
    // Layer l's cache: K then V, each [B, seq_len, n_kv_heads * head_dim].
    int64_t l = attn.getLayer(), d = width(attn.getK());
    emitCall(decodeAttentionCall(attn, kvCacheRegion(l, false, d),
                                 kvCacheRegion(l, true, d)));
    return success();
  }
  if (auto rowsOp = dyn_cast<modk::DecodeRowsOp>(op)) {
    emitCall({"decode_rows",
              {seqLen},
              {name(rowsOp.getStepPositions()), name(rowsOp.getActive()), "B",
               name(rowsOp.getPositions()), name(rowsOp.getSegments())}});
    return success();
  }
  if (auto route = dyn_cast<modk::DecodeSelectOp>(op)) {
    std::string decision =
        route.getCausalRouter() == modc::CausalRouter::predictor
            ? name(route.getCausalScores())
            : name(route.getScores());
    // A fused gather (modk-fuse-select-gather) runs in the compaction's
    // kernel, after it.
    modk::RowsOp gather = route.getGatherRows();
    int indent =
        openGroup(fmt::format("modk.decode_select layer {}{}", route.getLayer(),
                              gather ? " + gather" : ""));
    KernelCall select{"decode_select",
                      {},
                      {"B", decision, name(route.getStepPositions()),
                       name(route.getActive()), name(route.getPositions()),
                       name(route.getSegments()), name(route.getMask())}};
    if (gather)
      select.args.push_back(gatherFunctor(gather));
    emitCall(select, indent);
    closeGroup();
    return success();
  }
  if (auto select = dyn_cast<modk::MoeSelectOp>(op)) {
    int64_t rows = cast<MemRefType>(select.getLogits().getType()).getDimSize(1);
    int64_t experts = select.getNumExperts();
    std::vector<std::string> positions, segments;
    for (Value v : select.getExpertPositions())
      positions.push_back(name(v));
    for (Value v : select.getExpertSegments())
      segments.push_back(name(v));
    std::string expertRows =
        fmt::format("modk_small::ExpertRows<{}>{{{{{}}}, {{{}}}}}", experts,
                    fmt::join(positions, ", "), fmt::join(segments, ", "));
    int indent =
        openGroup(fmt::format("modk.moe_select layer {} C={}",
                              select.getLayer(), select.getCapacity()));
    // A decode step's running counts: the caller's decode state.
    std::string running =
        select.getRunningCounts()
            ? fmt::format("args->moe_counts + (int64_t){} * B * {}",
                          moeIndex[select.getLayer()], experts)
            : std::string("nullptr");
    emitCall(
        KernelCall{"moe_select",
                   {rows, select.getRouterWidth(), experts,
                    int64_t(select.getCapacity()), seqLen},
                   {name(select.getLogits()), "B", name(select.getSegments()),
                    nameOrNull(select.getPositions()), name(select.getProbs()),
                    name(select.getChoice()), name(select.getGate()),
                    expertRows, nameOrNull(select.getDecisions()), running,
                    nameOrNull(select.getActive())}}
            .withScratch("int32_t",
                         fmt::format("sizeof(int32_t) * B * {}", experts)),
        indent);
    closeGroup();
    return success();
  }
  if (auto count = dyn_cast<modk::MoeCountOp>(op)) {
    // The causal prefill, where the caller passes a KV cache.
    int64_t experts = count.getNExperts();
    os << "  if (args->kv_cache && args->moe_counts)\n";
    emitCall({"moe_count",
              {experts},
              {"B", name(count.getSegments()), name(count.getPositions()),
               name(count.getChoice()), name(count.getGate()),
               "args->prefill_lengths",
               fmt::format("args->moe_counts + (int64_t){} * B * {}",
                           moeIndex[count.getLayer()], experts)}},
             4);
    return success();
  }
  if (auto balance = dyn_cast<modk::MoeBalanceOp>(op)) {
    emitCall(
        KernelCall{
            "moe_balance",
            {cast<MemRefType>(balance.getProbs().getType()).getDimSize(1),
             width(balance.getProbs())},
            {name(balance.getProbs()), name(balance.getChoice()),
             nameOrNull(balance.getDgate()), "B", name(balance.getSegments()),
             nameOrNull(balance.getDlogits()), name(balance.getLosses()),
             fmt::format("{}", balance.getWeight().convertToDouble()),
             fmt::format("{}", balance.getNMoe())}}
            .withScratch("float", fmt::format("sizeof(float) * {}",
                                              2 * width(balance.getProbs()))));
    return success();
  }
  return emitTargetKernel(op);
}
