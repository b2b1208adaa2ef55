//===- PlanEmitter.h - What the C++ and CUDA emitters share -----*- C++ -*-===//
//
// Both emitters walk the same modk launch plans: the same entries, the same
// buffer names at the same workspace offsets, the same ABI structs and the
// same host-side argument checks. Most kernel calls have the same shape too
// (the same template, the same operands in the same order), so PlanEmitter
// describes them once (KernelCall, KernelCalls.cpp) and each emitter only
// renders them for its target: the namespace, the row-count form, CUDA's
// stream and scratch. The ops whose code really differs per target
// (emitTargetKernel) stay in the emitters.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_LIB_TARGET_PLANEMITTER_H
#define MODC_LIB_TARGET_PLANEMITTER_H

#include "modc/Target/Package.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <string>
#include <vector>

namespace modc {

/// The attribute that exports a package's C entry points.
inline constexpr char kExport[] = "__attribute__((visibility(\"default\")))";

/// A double as a C++ float expression that rounds exactly as the CPU does.
std::string floatLiteral(double v);

/// The C++ type of a buffer's `element` in a kernel namespace's code
/// (modk_cpu or modk_cuda: its bf16).
std::string cElementType(mlir::Type element, llvm::StringRef kernelNamespace);

/// The element math of `gemm`'s elementwise epilogue
/// (GemmOp::isElementwiseEpilogue) as a CUDA struct `name` whose
/// `static float apply(float acc[, float xJ])` returns y[i, c] from the
/// product's element and the source's: the generator of the tiles'
/// epilogue functor, for a GEMM library's epilogue (CutlassGemms.cpp).
/// Fails, with a diagnostic on the product, where its epilogue has another
/// form.
mlir::FailureOr<std::string> elementwiseEpilogueMath(mlir::Operation *gemm,
                                                     llvm::StringRef name);

/// `gemm`'s `rows` epilogue (no head pairs) as a CUDA struct `name` whose
/// `static void apply(float acc, const StoreArgs &epi, int64_t i, int64_t
/// c)` finishes element (i, c) of the product with the epilogue's own
/// loads and stores (the routed block's gated scatter at the rows'
/// tokens): the statements of the tiles' epilogue functor, over a
/// StoreArgs that has EpiArgs' names (CutlassGemms.cpp). Fails, with a
/// diagnostic on the product, where it has another epilogue.
mlir::FailureOr<std::string> rowsEpilogueStore(mlir::Operation *gemm,
                                               llvm::StringRef name);

/// One argument of a kernel call. Most are written the same for both targets;
/// the other kinds mark where the CPU and CUDA kernels' signatures part.
struct KernelArg {
  enum Kind {
    Same,
    /// The row count of a row set: `seg[B]` on the CPU; on CUDA, where the
    /// count stays on the device, `seg + B, bound`: the pointer and the most
    /// rows the set can hold, which sizes the grid.
    Rows,
    /// Only the CPU kernel takes it.
    HostOnly,
    /// Only the CUDA kernel takes it (a grid bound).
    DeviceOnly,
  };
  KernelArg(std::string text) : text(std::move(text)) {}
  KernelArg(const char *text) : text(text) {}
  static KernelArg hostOnly(std::string text) {
    return KernelArg(HostOnly, std::move(text));
  }
  static KernelArg deviceOnly(std::string text) {
    return KernelArg(DeviceOnly, std::move(text));
  }

  Kind kind = Same;
  /// The argument; for Rows, the name of the segments.
  std::string text;
  /// For Rows: the most rows of the set, an expression in B.
  std::string bound;

private:
  friend class PlanEmitter;
  KernelArg(Kind kind, std::string text) : kind(kind), text(std::move(text)) {}
};

/// A call of the kernel template `fn<templateArgs>(args)`, as both targets
/// write it; each emitter renders it (emitCall).
struct KernelCall {
  std::string fn;
  std::vector<int64_t> templateArgs;
  std::vector<KernelArg> args;
  /// Template arguments only the CUDA kernel takes, after templateArgs.
  std::vector<int64_t> deviceTemplateArgs;
  /// Template arguments only the CPU kernel takes, after templateArgs.
  std::vector<int64_t> hostTemplateArgs;
  /// A CUDA product's GemmPlan (the name of its #modk.gemm_config), the
  /// last template argument; empty elsewhere.
  std::string devicePlan;
  /// CUDA kernels that reduce in a fixed order take a scratch pointer after
  /// their arguments: its element type and the bytes it needs (an expression
  /// in B). Empty when the kernel takes none; the CPU never does.
  std::string scratchType, scratchBytes;
  /// Where the call's result goes (`const bool fused`), if it is kept.
  std::string result;
  /// The namespace of `fn` where it is not the target's kernel library's
  /// (a CUTLASS plan's entry point, modc_cutlass); empty elsewhere.
  std::string ns;

  KernelCall withScratch(std::string type, std::string bytes) && {
    scratchType = std::move(type);
    scratchBytes = std::move(bytes);
    return std::move(*this);
  }
};

class PlanEmitter {
public:
  PlanEmitter(llvm::ArrayRef<modk::EntryOp> entries, llvm::raw_ostream &os);
  virtual ~PlanEmitter() = default;
  /// The buffers a `rows` epilogue may name (the mainloop's EpiArgs slots).
  static constexpr unsigned kEpilogueOperands = 8;

protected:
  /// The C names of the package's entry points, by entry.
  static std::string functionName(modk::EntryOp e);

  /// Fails where `op` reads a column window that its kernel cannot.
  mlir::LogicalResult checkColumnWindows(mlir::Operation *op);
  /// The row strides of `buffers` where one is a column window (their
  /// widths otherwise), else nothing: the trailing template arguments of
  /// the CPU kernels that read windows (attention, the KV-cache append, a
  /// product's input).
  static std::vector<int64_t> windowStrides(mlir::ValueRange buffers);
  /// Adds grouped-query attention's template arguments to the call of an
  /// attention kernel whose k has fewer heads than q (docs/model-format.md
  /// section 3): the CPU kernels take q's, k's and v's row strides and then
  /// n_kv_heads, the CUDA kernels their two flags and then n_kv_heads. With
  /// as many key/value heads as heads, the call is left as it is.
  void addKvHeads(KernelCall &call, int64_t heads, int64_t kvHeads,
                  mlir::Value q, mlir::Value k, mlir::Value v,
                  std::optional<modk::GemmPath> mainloop);
  std::string name(mlir::Value v) { return names.lookup(v); }
  /// An optional operand's name, or `nullptr` where it is absent.
  std::string nameOrNull(mlir::Value v) {
    return v ? name(v) : std::string("nullptr");
  }
  /// The C type of a buffer element (bf16: the target's bf16 struct).
  std::string cType(mlir::Type element) const;
  /// Whether buffer v holds bf16 (modk-store-bf16).
  static bool holdsBf16(mlir::Value v) {
    return mlir::cast<mlir::MemRefType>(v.getType()).getElementType().isBF16();
  }
  /// Innermost dimension of a buffer.
  static int64_t width(mlir::Value v);
  /// Elements of a whole buffer: B times the per-sequence elements when the
  /// leading dimension is the batch.
  static std::string elements(mlir::Value v);
  /// Most rows a row set over the [B, R, ...] buffer can hold: B * R.
  static std::string maxRows(mlir::Value buffer);

  /// Finds the entries (forward required), checks their memory plans and
  /// that they index the same parameters; sets hasDecode, eval and
  /// evalCausal.
  mlir::LogicalResult classifyEntries(modk::EntryOp &forward,
                                      modk::EntryOp &grad,
                                      modk::EntryOp &decode);
  /// Starts entry `e`: routed-layer indices, causal capability, name map.
  void beginEntry(modk::EntryOp e);
  /// The `// Generated by modc ...` banner line.
  void emitBanner(modk::EntryOp forward);
  /// The package ABI as the runtime declares it: the text of
  /// runtime/include/modrt/abi.h, embedded when modc is built.
  static const char *abiHeader();
  /// What both files have after the kernel preludes: the standard headers
  /// (and `extraIncludes`), the ABI structs, and the last error with fail()
  /// in an anonymous namespace, left open for the target's own helpers.
  void emitHostSupport(llvm::StringRef extraIncludes);
  /// The entries' functions: forward, then grad and modc_adamw, then eval,
  /// then decode and modc_kv_cache_bytes.
  mlir::LogicalResult emitEntries(modk::EntryOp forward, modk::EntryOp grad,
                                  modk::EntryOp decode);
  virtual mlir::LogicalResult emitEntry(modk::EntryOp e) = 0;
  virtual void emitAdamW(modk::EntryOp grad) = 0;
  /// Writes `<fn>_workspace_bytes` and the opening of `<fn>(args)` with the
  /// checks that need only host-visible arguments (batch, seq_len, mode,
  /// pointers, capabilities), then `B` and `causal`.
  void emitEntryPrologue(modk::EntryOp e, llvm::StringRef exportAttr);
  /// Declares a variable for every param, output and workspace buffer of
  /// the entry (at its planned offset), naming each in `names`.
  void emitBufferNames(modk::EntryOp e);
  /// The kernels of the plan in order, skipping buffer declarations.
  static bool isKernel(mlir::Operation &op);
  /// The AdamW step's tables, as C initializers: each parameter's elements
  /// (`kSizes`) and whether weight decay applies to it (`kDecay`).
  static void adamwTables(modk::EntryOp grad, std::string &sizes,
                          std::string &decay);
  /// The host statements of modc_adamw that form the step's scalars
  /// `step_size` and `inv_sqrt_bc2` from `args`.
  static std::string optimizerStepScalars();
  /// The arguments of modc_optimizer_update after the elements' pointers,
  /// in the order of modk.optimizer's scalars, for parameter `i` of
  /// modc_adamw's loop (CUDA: `ctl`, the device state, for grad_scale, and
  /// for decay the decayed value, which the kernel picks per parameter).
  static std::vector<std::string> optimizerScalarArgs(bool cuda);
  /// Fails unless the module has the modk.optimizer of `grad`'s parameters.
  mlir::LogicalResult checkOptimizer(modk::EntryOp grad);
  /// Bytes of KV cache a sequence needs, for modc_kv_cache_bytes.
  int64_t kvCacheBytes(modk::EntryOp decode) const;
  /// Writes the kernels of entry `e` in plan order, each followed by its
  /// MODC_PROFILE line: `modcProfile(index, what, <profileArgs>)`.
  mlir::LogicalResult emitKernels(modk::EntryOp e, llvm::StringRef profileArgs);

  //===--- Kernel calls (KernelCalls.cpp) ---------------------------------===//

  /// Writes the kernel calls of `op`: here the ops whose calls both targets
  /// share, through emitCall and the hooks below; emitTargetKernel the rest.
  mlir::LogicalResult emitKernel(mlir::Operation *op);
  /// Fails where `gemm` is not in the form the emitters print: an epilogue
  /// modk-generalize has not written out, a bf16 output it has not rounded,
  /// or stacked weights on CUDA.
  mlir::LogicalResult checkGemmEmittable(modk::GemmOp gemm);
  /// What emitKernels writes for kernel `op` of the plan: emitKernel's
  /// calls, unless the target runs `op` with others (the CPU's groups).
  virtual mlir::LogicalResult emitPlannedKernel(mlir::Operation *op) {
    return emitKernel(op);
  }
  /// The row count of the row set `segments` over `buffer`, as a Rows
  /// argument.
  KernelArg rowsArg(mlir::Value segments, mlir::Value buffer) {
    KernelArg arg(KernelArg::Rows, name(segments));
    arg.bound = maxRows(buffer);
    return arg;
  }
  /// `args` and, in a bf16 entry, a last template argument 1: the kernel's
  /// BF16 flag (products round their operands, attention knows its inputs
  /// are bf16).
  std::vector<int64_t> withBf16Flag(std::vector<int64_t> args,
                                    mlir::Operation *product = nullptr) {
    if (productsBf16(product))
      args.push_back(1);
    return args;
  }
  /// Whether `product` (a modk.gemm or gemm_wgrad, or any kernel of the
  /// entry: null)
  /// rounds its operands to bf16: a modk.gemm's precision, else the entry's
  /// dtype.
  bool productsBf16(mlir::Operation *product) {
    if (auto gemm = llvm::dyn_cast_or_null<modk::GemmOp>(product))
      return gemm.productsBf16();
    if (auto wgrad = llvm::dyn_cast_or_null<modk::GemmWgradOp>(product))
      return wgrad.productsBf16();
    return entry.isBf16();
  }
  /// The CUDA attention kernels' template arguments after H and HD: the
  /// BF16 flag, then the configured mainloop (modk-configure-gemms) as
  /// causal_attention's `Mainloop`; only the flag where none was configured.
  std::vector<int64_t> attentionTemplateArgs(
      std::optional<modk::GemmPath> mainloop) {
    if (!mainloop)
      return withBf16Flag({});
    return {entry.isBf16() ? 1 : 0, attentionMainloopArg(*mainloop)};
  }
  /// causal_attention's and causal_attention_grad's `Mainloop`: 0 SIMT, 1
  /// mma.sync, 2 wgmma.
  static int64_t attentionMainloopArg(modk::GemmPath mainloop) {
    switch (mainloop) {
    case modk::GemmPath::mma:
      return 1;
    case modk::GemmPath::wgmma:
      return 2;
    default:
      return 0;
    }
  }
  /// The template arguments of a product over an [n, k] weight.
  std::vector<int64_t> gemmShape(int64_t n, int64_t k,
                                 mlir::Operation *product = nullptr) {
    return withBf16Flag({n, k}, product);
  }
  /// `call` of a product `op` (a modk.gemm, gemm_dgrad, gemm_wgrad or
  /// predictor) with its GemmPlan where the target has one (CUDA): then the
  /// BF16 flag before it is written even where it is 0.
  KernelCall withGemmPlan(KernelCall call, mlir::Operation *op) {
    std::string plan = gemmPlanName(op);
    if (plan.empty())
      return call;
    if (!productsBf16(op))
      call.deviceTemplateArgs.push_back(0);
    call.devicePlan = std::move(plan);
    return call;
  }
  /// The name of `op`'s GemmPlan in the generated source (CUDA), or empty.
  virtual std::string gemmPlanName(mlir::Operation *op) { return {}; }
  /// Whether the target computes `op` (a GEMM's `rows` epilogue) without a
  /// row kernel of its own: no kernel is generated for it.
  virtual bool epilogueNeedsNoKernel(modk::RowsOp op) { return false; }
  /// Layer `layer`'s keys (or `values`) in args->kv_cache, [B, S, d] each,
  /// as a pointer to the cache's elements: floats, or bf16 in a bf16 entry
  /// (half the bytes; its keys and values are bf16 values already).
  std::string kvCacheRegion(int64_t layer, bool values, int64_t d);
  /// The namespace of the target's kernels (modk_cpu, modk_cuda).
  virtual const char *kernelNamespace() const = 0;
  bool targetIsCuda() const {
    return llvm::StringRef(kernelNamespace()) == "modk_cuda";
  }
  /// A decode step's attention over layer l's KV cache at cacheK, cacheV.
  KernelCall decodeAttentionCall(modk::DecodeAttentionOp op, std::string cacheK,
                                 std::string cacheV);
  /// Writes `ns::fn<T...>(args);` at `indent` spaces, with the arguments
  /// already rendered for the target.
  void writeCall(llvm::StringRef ns, const KernelCall &call,
                 llvm::ArrayRef<std::string> args, int indent);

  //===--- Kernels generated from modk.rows (RowKernels.cpp) ---------------===//

  /// Numbers the distinct row kernels of all entries (identical ops share
  /// one): modc_rows_<n>.
  void collectRowKernels();
  /// Writes the definition of every row kernel for the target.
  mlir::LogicalResult emitRowKernelDefinitions();
  /// What makes two row kernels the same kernel: operand types and math.
  static std::string rowKernelKey(modk::RowsOp op);
  /// The kernel's parameters: the segments (unless `segments` is false: a
  /// gather functor, told the sequence) and positions of a kernel with
  /// token operands, the inputs, then the outputs; one declaration each.
  std::vector<std::string> rowKernelParamList(modk::RowsOp op, bool segments);
  /// Those of a row kernel, as its parameter list.
  std::string rowKernelParams(modk::RowsOp op);
  /// The buffers a call passes for those parameters.
  std::vector<std::string> rowKernelArgs(modk::RowsOp op, bool segments = true);
  /// A buffer of `op`'s row set (not addressed at tokens): its rows bound
  /// the row count.
  static mlir::Value rowBuffer(modk::RowsOp op);
  std::vector<modk::RowsOp> rowKernels;
  /// CUDA: the distinct `rows` epilogues of GEMMs, each a functor
  /// modk_cuda::detail::RowsEpilogue<n> that the GEMM's tiles apply to
  /// each element of the product (rowKernelOf gives n).
  std::vector<modk::RowsOp> rowEpilogues;
  /// The distinct gathers fused into a selection (modk-fuse-select-gather),
  /// each a functor modc_gather_<n> that the selection's kernel calls for
  /// the rows of each sequence it has selected (rowKernelOf gives n).
  std::vector<modk::RowsOp> rowGathers;
  llvm::DenseMap<mlir::Operation *, int> rowKernelOf;
  /// CUDA: the kernel modc_rows_<n> of a GEMM's epilogue over heads
  /// (RoPE), which runs on the stored product where the GEMM's tile cannot
  /// hold the epilogue.
  llvm::DenseMap<mlir::Operation *, int> separateKernelOf;
  /// Writes the modc_gather_<n> functors.
  mlir::LogicalResult emitGatherDefinitions();
  /// `op`'s gather functor, initialised with its buffers.
  std::string gatherFunctor(modk::RowsOp op);
  /// The module's modk.optimizer, if it has one.
  modk::OptimizerOp optimizer;
  /// Writes modc_optimizer_update(n, p, g, m, v, scalars...): the element
  /// loop of `optimizer`'s body over one parameter (part of the row
  /// kernels' definitions).
  mlir::LogicalResult emitOptimizerKernel();
  /// Writes modc_optimizer_norm, the squared gradient norm's sum over a
  /// tensor, from the optimizer's `norm` region.
  mlir::LogicalResult emitOptimizerNorm();
  /// Writes the RowsEpilogue specializations (CUDA).
  mlir::LogicalResult emitRowEpilogueDefinitions();
  /// The kernel of a modk.rows with head_dim (RoPE): pairs of columns.
  mlir::LogicalResult emitHeadKernel(modk::RowsOp op, int index);
  /// The kernel of a modk.rows that scatter-adds into a table at the rows'
  /// ids (the embedding's gradient), in row order.
  mlir::LogicalResult emitScatterKernel(modk::RowsOp op, int index);
  /// modc_rows_<index>'s grouped form (CUDA, a warp-per-row kernel):
  /// modc_rows_<index>_grouped<M>, whose grid's y picks the member of a
  /// group (modk-group-gemms) from a table of their buffers and row counts.
  mlir::LogicalResult emitGroupedRowKernel(modk::RowsOp op, int index);
  /// The CUDA argument of a head_dim kernel's angle table (or nullptr).
  std::string ropeTableArg(modk::RowsOp op);
  /// Statements (one a line) that declare `epi`, the EpiArgs of `gemm`'s
  /// `rows` epilogue: its row set and its buffers in their slots.
  std::string rowEpilogueArgs(modk::GemmOp gemm);

  //===--- What each target writes its own way ----------------------------===//

  /// Launches row kernel `index` (modc_rows_<index>) for `op`.
  virtual void emitRowKernelLaunch(modk::RowsOp op, int index) = 0;
  /// Renders `call` for the target at `indent` spaces.
  virtual void emitCall(const KernelCall &call, int indent = 2) = 0;
  /// The kernels of the ops whose code differs per target, beyond a call's
  /// arguments (GEMM epilogues, losses, copies of tokens, the KV cache).
  virtual mlir::LogicalResult emitTargetKernel(mlir::Operation *op) = 0;
  /// A GEMM and its fused epilogue, inside the group emitKernel opened.
  virtual void emitGemm(modk::GemmOp op, int indent) = 0;
  /// An input gradient's product, `call` its kernel library's call: CUDA
  /// calls a CUTLASS plan instead where one is configured.
  virtual void emitGemmDgrad(modk::GemmDgradOp op, const KernelCall &call) {
    emitCall(call);
  }
  /// A weight gradient's product, `call` its kernel library's call: CUDA
  /// launches the members of a group (modk-group-gemms) as one call.
  virtual void emitGemmWgrad(modk::GemmWgradOp op, const KernelCall &call) {
    emitCall(call);
  }
  /// Rows the host copies of a row set over `buffer`: the row count itself
  /// on the CPU, its static bound on CUDA (the count is on the device).
  virtual std::string hostRows(mlir::Value segments, mlir::Value buffer) = 0;
  /// Copies `bytes` (an expression) from src to dst; sets dst's to zero.
  virtual void emitMemcpy(llvm::StringRef dst, llvm::StringRef src,
                          llvm::StringRef bytes) = 0;
  virtual void emitMemset(llvm::StringRef dst, llvm::StringRef bytes) = 0;
  /// Opens the group of calls of one op, under `comment`; returns the indent
  /// of its calls. closeGroup ends it.
  virtual int openGroup(llvm::StringRef comment) = 0;
  virtual void closeGroup() = 0;
  /// Writes (at `indent`) the causal decision of every token of the pass,
  /// `logits > 0`, into routed layer `index`'s args->causal_decisions.
  virtual void emitCausalDecisions(int index, llvm::StringRef logits,
                                   int indent) = 0;

  llvm::ArrayRef<modk::EntryOp> entries;
  modk::EntryOp entry;
  /// Index of each routed layer in the [n_routed, ...] outputs.
  std::map<int64_t, int> routedIndex;
  /// MoE layer -> its index among the MoE layers (docs/runtime.md).
  std::map<int64_t, int> moeIndex;
  /// The package has a decode entry: its forward can prefill the KV cache.
  bool hasDecode = false;
  /// The loss-only entries (modc_eval, modc_eval_causal), when the plan has
  /// them.
  modk::EntryOp eval, evalCausal;
  /// Whether `e` reads tokens [B, S + 1] (inputs and next-token targets):
  /// the training entry and the loss-only ones.
  static bool takesTargets(modk::EntryOp e) {
    modk::EntryKind kind = e.getKind();
    return kind == modk::EntryKind::grad || kind == modk::EntryKind::eval ||
           kind == modk::EntryKind::eval_causal;
  }
  llvm::raw_ostream &os;
  int64_t seqLen;
  llvm::DenseMap<mlir::Value, std::string> names;
  bool causalCapable = false;
};

} // namespace modc

#endif // MODC_LIB_TARGET_PLANEMITTER_H
