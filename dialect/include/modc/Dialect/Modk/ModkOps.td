//===- ModkOps.td - Operations of the modk dialect ---------*- tablegen -*-===//

#ifndef MODC_DIALECT_MODK_OPS
#define MODC_DIALECT_MODK_OPS

include "modc/Dialect/Modk/ModkAttrs.td"
include "modc/Dialect/Modk/ModkInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ViewLikeInterface.td"

//===----------------------------------------------------------------------===//
// Memory effects: each kernel declares what it reads and writes of its
// buffer operands (destination style), and of the package state it touches
// beyond them (the KV cache; the causal decisions returned to the caller).
//===----------------------------------------------------------------------===//

def Modk_KVCache : Resource<"::modc::modk::KVCacheResource">;
def Modk_CallerOutputs : Resource<"::modc::modk::CallerOutputsResource">;
def Modk_Read : Arg<AnyMemRef, "read", [MemRead]>;
def Modk_Written : Arg<AnyMemRef, "written", [MemWrite]>;
def Modk_ReadWritten : Arg<AnyMemRef, "read and written", [MemRead, MemWrite]>;
def Modk_OptionalRead : Arg<Optional<AnyMemRef>, "read", [MemRead]>;
def Modk_OptionalWritten : Arg<Optional<AnyMemRef>, "written", [MemWrite]>;
def Modk_VariadicRead : Arg<Variadic<AnyMemRef>, "read", [MemRead]>;
def Modk_VariadicReadWritten : Arg<Variadic<AnyMemRef>, "read and written",
                                   [MemRead, MemWrite]>;

//===----------------------------------------------------------------------===//
// Entry functions and buffers
//===----------------------------------------------------------------------===//

// The parameters of an entry or of the optimizer, in ABI order.
def Modk_ParamList
    : TypedArrayAttrBase<Modk_ParamAttr, "parameters in ABI order">;

def Modk_EntryOp : Modk_Op<"entry", [Symbol, SingleBlock, NoTerminator,
                                     IsolatedFromAbove]> {
  let summary = "An entry point of the package: its launch plan";
  let description = [{
    The body is the launch plan: kernels in execution order. `kind` says
    what the entry computes, and so which package function it becomes
    (`#modk.entry_kind<forward>`: modc_forward); an entry named like a kind
    (@grad) has that kind. `params` lists
    every parameter of the model in ABI order (name, shape, init).
    `model` is the normalised model description the plan was made from
    (`#modk.model`). `workspace_bytes_per_sequence` is set by `modk-plan-memory`.
    A bf16 model (`dtype = bf16` in `model`) makes every matrix
    product (gemm, gemm_dgrad, gemm_wgrad) read its operands rounded to bf16
    and accumulate in f32, and rounds the query, key and value rows that
    attention reads (and the KV cache holds) to bf16: the values bf16
    storage gives. Everything else stays f32.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Modk_EntryKindAttr:$kind,
                   Modk_ModelAttr:$model, Modk_ParamList:$params,
                   TypedArrayAttrBase<Modk_RoutingModeAttr, "routing modes">:$modes,
                   OptionalAttr<I64Attr>:$workspace_bytes_per_sequence);
  let extraClassDeclaration = [{
    int64_t getSeqLen() { return getModel().getSeqLen(); }
    int64_t getVocabSize() { return getModel().getVocabSize(); }
    /// Whether the entry's products and attention inputs are bf16.
    bool isBf16() { return getModel().getDtype() == DType::bf16; }
    /// Whether the entry routes in `mode` (its `modes`).
    bool servesMode(RoutingMode mode) {
      return llvm::is_contained(getModes(),
                                RoutingModeAttr::get(getContext(), mode));
    }
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def Modk_ParamOp : Modk_Op<"param", [HasParent<"EntryOp">]> {
  let summary = "A model parameter, passed by the runtime";
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyStaticShapeMemRef:$buffer);
  let assemblyFormat = "$name attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def Modk_InputOp : Modk_Op<"input", [HasParent<"EntryOp">]> {
  let summary = "An input of the entry point ([B, ...])";
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyMemRef:$buffer);
  let assemblyFormat = "$name attr-dict `:` type($buffer)";
}

def Modk_OutputOp : Modk_Op<"output", [HasParent<"EntryOp">]> {
  let summary = "An output of the entry point ([B, ...]), written by kernels";
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyMemRef:$buffer);
  let assemblyFormat = "$name attr-dict `:` type($buffer)";
}

def Modk_AllocOp : Modk_Op<"alloc", [HasParent<"EntryOp">]> {
  let summary = "A workspace buffer of [B, static dims...]";
  let description = [{
    `offset` (bytes per sequence) is assigned by `modk-plan-memory`: the
    buffer lives at workspace + B * offset.
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset);
  let results = (outs AnyMemRef:$buffer);
  let assemblyFormat = "attr-dict `:` type($buffer)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Bytes one sequence of this buffer needs, padded so that B sequences
    /// also hold the one extra element segment buffers carry, aligned to 64.
    int64_t getBytesPerSequence();
  }];
}

def Modk_ColumnWindowOp : Modk_Op<"column_window",
    [Pure, DeclareOpInterfaceMethods<ViewLikeOpInterface>]> {
  let summary = "Columns [offset, offset + width) of a row buffer";
  let description = [{
    A view of the buffer's rows, each `width` columns wide from column
    `offset` (the result's last dimension), with the source's row stride:
    the member of a stacked product that modk-fuse-horizontal hands to the
    kernels that read it. The CPU row kernels read such windows (a kernel
    that maps elements only); modk-plan-memory keeps the source live while
    a window of it is read.

    ```mlir
    %k = modk.column_window %qkv[128] : memref<?x16x384xf32>
        to memref<?x16x128xf32, strided<[6144, 384, 1], offset: 128>>
    ```
  }];
  let arguments = (ins AnyMemRef:$source, I64Attr:$offset);
  let results = (outs AnyMemRef:$window);
  let assemblyFormat = [{
    $source `[` $offset `]` attr-dict `:` type($source) `to` type($window)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The window's type: columns [offset, offset + width) of `source`.
    static ::mlir::MemRefType windowType(::mlir::MemRefType source,
                                         int64_t offset, int64_t width);
    /// The row stride (elements) of `type`: its layout's for a window, else
    /// its last dimension.
    static int64_t rowStride(::mlir::MemRefType type);
  }];
}

//===----------------------------------------------------------------------===//
// Kernels (destination style: outputs are operands)
//===----------------------------------------------------------------------===//

def Modk_IdentityRowsOp : Modk_Op<"identity_rows"> {
  let summary = "Row set of a dense layer: every position, in order";
  let arguments = (ins Modk_Written:$positions, Modk_Written:$segments);
  let assemblyFormat = "`->` $positions `,` $segments attr-dict `:` type(operands)";
}

def Modk_EmbedOp : Modk_Op<"embed"> {
  let summary = "out[b, i] = table[tokens[b, i]] (modk-generalize: a modk.rows lookup)";
  let arguments = (ins Modk_Read:$tokens, Modk_Read:$table, Modk_Written:$output);
  let assemblyFormat = "$tokens `,` $table `->` $output attr-dict `:` type(operands)";
}

def Modk_RMSNormOp : Modk_Op<"rmsnorm"> {
  let summary = "RMSNorm of the rows of a row set";
  let arguments = (ins Modk_Read:$input, Modk_Read:$weight,
                   Modk_Read:$segments, Modk_Written:$output, F64Attr:$eps);
  let assemblyFormat = "$input `,` $weight `rows` $segments `->` $output attr-dict `:` type(operands)";
}

def Modk_GemmOp : Modk_Op<"gemm", [AttrSizedOperandSegments, NoTerminator,
                                     RecursiveMemoryEffects,
                                     DeclareOpInterfaceMethods<Modk_ColumnWindowReader>]> {
  let summary = "y = a . W^T on the rows of a row set, with a fused epilogue";
  let description = [{
    Epilogues:
    - `none`: y = a W^T; with several weights (modk-fuse-horizontal), the
      weights stacked along N: y = a [W_1; ...; W_g]^T, the members'
      products side by side in each row.
    - `rope`: then RoPE at the row's original position (extra: positions).
    - `residual_add`: y = a W^T + residual (extra: residual; may be y).
    - `swiglu`: weights (W_gate, W_up): y = silu(a W_gate^T) * (a W_up^T)
      (extra: scratch rows for a W_gate^T).
    - `gelu`: y = gelu(a W^T).
    - `rows`: the product is never stored; the region's one `modk.rows`
      (no sums) finishes each element where it is computed, its block
      argument standing for the product [B, rows, N]. y is that op's one
      output, which it may write at the rows' tokens (the routed block's
      gated scatter into the residual stream). Set by modk-generalize
      (from `rope`, `residual_add`, `gelu`, `swiglu`) and
      modk-fuse-row-epilogues. RoPE's is a modk.rows over heads
      (`head_dim`).
    The emitters take `none` and `rows`; modk-generalize rewrites the
    named epilogues.
    `round_bf16` (set by modk-store-bf16 in a bf16 entry; modk-generalize
    writes it into the `rows` epilogue): the output rows are rounded to
    bf16 values as they are stored, in an f32 buffer: the queries, keys
    and values that attention reads. `precision`: the
    products' precision where it is not the entry's dtype (the causal
    predictor's f32 products in a bf16 model, set by modk-generalize).
    `causal_only`: the forward entry runs it only where causal decisions
    are read (the predictor's kernels). `config` (set by
    modk-configure-gemms for a CUDA target): the kernels that run it.
    `device_rows_config` (set by the same pass, on sm_90a): the kernels
    that run it where the device counts its rows and its epilogue must
    not touch a row past the count (a gated scatter in `causal` mode, a
    residual add in place): a CUTLASS grouped launch of it alone, whose
    problem the device sizes; `config` then serves rows whose count the
    host knows.
    `group` (set by modk-group-gemms for a CUDA target): neighbouring
    products with the same number are independent products of one shape,
    epilogue and configuration that run as one grouped launch.
    `siblings` (set by modk-group-siblings for a CUDA target): neighbouring
    products with the same number read one input on one row set, each
    with its own weight, epilogue and output (a decode step's queries,
    keys and values), and run as one launch of the few-row kernel where
    their configuration takes it. `siblings_in_order` (on every member):
    each CTA runs the members' columns one after another, so that a later
    member's elementwise epilogue may read an earlier member's output at
    the same element (SwiGLU's up projection reading its gate's product).
  }];
  let arguments = (ins Modk_Read:$input, Modk_VariadicRead:$weights,
                   Modk_Read:$segments, Modk_VariadicReadWritten:$extra,
                   Modk_ReadWritten:$output, Modk_EpilogueAttr:$epilogue,
                   OptionalAttr<I64Attr>:$n_heads,
                   OptionalAttr<F64Attr>:$rope_theta, UnitAttr:$round_bf16,
                   OptionalAttr<Modk_GemmConfigAttr>:$config,
                   OptionalAttr<Modk_GemmConfigAttr>:$device_rows_config,
                   OptionalAttr<Modk_DTypeAttr>:$precision,
                   UnitAttr:$causal_only, OptionalAttr<I64Attr>:$group,
                   OptionalAttr<I64Attr>:$siblings,
                   UnitAttr:$siblings_in_order);
  let regions = (region AnyRegion:$fused_rows);
  let builders = [
    // A product as lowering and the fusions make it: not yet configured,
    // grouped or rounded (the later passes set those attributes).
    OpBuilder<(ins "::mlir::Value":$input, "::mlir::ValueRange":$weights,
                   "::mlir::Value":$segments, "::mlir::ValueRange":$extra,
                   "::mlir::Value":$output, "Epilogue":$epilogue,
                   "DTypeAttr":$precision, "bool":$causal_only), [{
      build($_builder, $_state, input, weights, segments, extra, output,
            epilogue, /*n_heads=*/nullptr, /*rope_theta=*/nullptr,
            /*round_bf16=*/false, /*config=*/nullptr,
            /*device_rows_config=*/nullptr, precision, causal_only,
            /*group=*/nullptr, /*siblings=*/nullptr,
            /*siblings_in_order=*/false);
    }]>
  ];
  let assemblyFormat = [{
    $input `,` `[` $weights `]` `rows` $segments
    (`extra` `(` $extra^ `)`)? `->` $output attr-dict `:` type(operands)
    (`epilogue` $fused_rows^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The modk.rows that is the epilogue (`rows`), or null.
    RowsOp getEpilogueRows();
    /// The buffer r of a `rows` epilogue that is exactly y = r + product,
    /// r and y f32 read and written at the row (a residual add: a GEMM
    /// that adds into y computes it, in place where r is y); else null.
    ::mlir::Value getAddedBuffer();
    /// Whether the `rows` epilogue is elementwise at the row, the form of a
    /// GEMM library's epilogue (CUTLASS's visitor trees): y[i, c] =
    /// f(product[i, c], s[i, c]) through arith and math ops only, with at
    /// most one other buffer s (f32 or bf16, y's shape; y itself in place),
    /// y f32 or bf16 stored at the row, and no tokens, heads, sums or
    /// column indices. `source`, where given, is set to s (null where f
    /// reads the product only).
    bool isElementwiseEpilogue(::mlir::Value *source = nullptr);
    /// The output's N: the weight's, or with `none` the weights' stacked.
    int64_t getStackedN();
    /// Whether the products round their operands to bf16: `precision`
    /// where it is set, else the entry's dtype.
    bool productsBf16();
    /// Whether `config` or `device_rows_config` reads the weight through a
    /// bf16 copy (GemmConfigAttr::readsWeightCopy).
    bool readsWeightCopy(bool decode);
  }];
}

def Modk_AttentionOp : Modk_Op<"attention",
    [DeclareOpInterfaceMethods<Modk_ColumnWindowReader>]> {
  let summary = "Causal attention within each sequence of a row set";
  let description = [{
    `mainloop` (set by modk-configure-gemms for a CUDA target): `mma` or
    `simt`.
  }];
  let arguments = (ins Modk_Read:$q, Modk_Read:$k, Modk_Read:$v,
                   Modk_Read:$positions, Modk_Read:$segments,
                   Modk_Written:$output, I64Attr:$n_heads,
                   OptionalAttr<Modk_GemmPathAttr>:$mainloop);
  let assemblyFormat = [{
    $q `,` $k `,` $v `rows` $positions `,` $segments `->` $output attr-dict
    `:` type(operands)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The key/value heads: k's width over the head dim (grouped-query
    /// attention where fewer than n_heads, docs/model-format.md section 3).
    int64_t getKvHeads();
  }];
}

def Modk_CacheAppendOp : Modk_Op<"cache_append",
    [MemoryEffects<[MemWrite<Modk_KVCache>]>,
     DeclareOpInterfaceMethods<Modk_ColumnWindowReader>]> {
  let summary = "The causal prefill: a pass's keys and values into a KV cache";
  let description = [{
    Where the caller passes a KV cache to the forward entry, appends the
    keys `k` and values `v` of the rows of `segments` (at `positions`) to
    layer `layer`'s cache, each sequence's rows up to its prefill length
    (docs/runtime.md). The lowering places one after each attention of the
    forward entry of a package that decodes.
  }];
  let arguments = (ins Modk_Read:$k, Modk_Read:$v, Modk_Read:$positions,
                   Modk_Read:$segments, I64Attr:$layer);
  let assemblyFormat = [{
    $k `,` $v `rows` $positions `,` $segments attr-dict `:` type(operands)
  }];
  let hasVerifier = 1;
}

def Modk_AddOp : Modk_Op<"add"> {
  let summary = "y = a + b on the rows of a row set (y may be a, or bf16)";
  let arguments = (ins Modk_Read:$lhs, Modk_Read:$rhs, Modk_Read:$segments,
                   Modk_Written:$output);
  let assemblyFormat = "$lhs `,` $rhs `rows` $segments `->` $output attr-dict `:` type(operands)";
}

def Modk_PredictorOp : Modk_Op<"predictor"> {
  let summary = "Causal predictor logits p = fc2(silu(fc1 x + b1)) + b2";
  let description = [{
    With `causal_only` (the forward entry) the kernel runs only in `causal`
    mode, the only reader of its output there; training always runs it.
    modk-generalize writes it as fc1's product (f32) and a modk.rows.
  }];
  let arguments = (ins Modk_Read:$input, Modk_Read:$fc1_weight,
                   Modk_Read:$fc1_bias, Modk_Read:$fc2_weight,
                   Modk_Read:$fc2_bias, Modk_Written:$hidden, Modk_Written:$output,
                   UnitAttr:$causal_only);
  let hasVerifier = 1;
  let assemblyFormat = [{
    $input `,` `[` $fc1_weight `,` $fc1_bias `,` $fc2_weight `,` $fc2_bias `]`
    `scratch` $hidden `->` $output attr-dict `:` type(operands)
  }];
}

def Modk_RouteSelectOp : Modk_Op<"route_select",
    [NoTerminator, RecursiveMemoryEffects,
     MemoryEffects<[MemWrite<Modk_CallerOutputs>]>]> {
  let summary = "Selection + ordered compaction from the router's scores";
  let description = [{
    A routed layer's selection, between its router and its gather, which
    are modk.rows from the lowering on: per sequence, from the router
    scores r, the
    selection (top-k in `topk` mode; causal decision in `causal` mode),
    positions in ascending order, segment offsets and the routing mask
    output. The selection is a hand-written mainloop (a radix select).

    With a `gather` region (modk-fuse-select-gather), the region's one
    `modk.rows` (no column sums), over the rows and positions this op
    writes, runs in the selection's kernel: in `topk` mode on CUDA each
    sequence's thread block gathers the rows it has just selected, on the
    CPU the parallel region that selects gathers every selected row. In
    `causal` mode, whose compaction spans every sequence, it runs after
    the selection.

    `gather_blocks` (CUDA; set by modk-configure-gemms with the gather
    region): the thread blocks each sequence's selection and fused gather
    run on. Each block selects the sequence's k rows again (a few KiB of
    scores from L2) and gathers its share of them, so that B sequences
    fill more than B SMs.
  }];
  let arguments = (ins Modk_Read:$scores, Modk_OptionalRead:$causal_scores,
                   Modk_Written:$positions, Modk_Written:$segments,
                   Modk_Written:$mask, I64Attr:$layer, I64Attr:$k,
                   Modk_CausalRouterAttr:$causal_router,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$gather_blocks);
  let regions = (region AnyRegion:$fused_gather);
  let assemblyFormat = [{
    $scores (`causal` `(` $causal_scores^ `)`)?
    `->` $positions `,` $segments `,` $mask
    attr-dict `:` type(operands) (`gather` $fused_gather^)?
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The modk.rows of the `gather` region, or null.
    RowsOp getGatherRows();
    /// The positions a fused gather reads at: those this op writes.
    mlir::Value getGatherPositions() { return getPositions(); }
    /// The buffers the selection decides from or writes besides its rows:
    /// a fused gather may not read or write them.
    llvm::SmallVector<mlir::Value> getSelectionBuffers() {
      return {getScores(), getMask(), getCausalScores()};
    }
  }];
}

def Modk_MoeSelectOp : Modk_Op<"moe_select", [AttrSizedOperandSegments,
    MemoryEffects<[MemWrite<Modk_CallerOutputs>]>]> {
  let summary = "An MoE layer's expert choice and capacity, per sequence";
  let description = [{
    Steps 1 and 2 of docs/model-format.md section 7 for the rows T that
    reach an MoE MLP (`segments`, at token `positions`), in one pass over
    each sequence: from the router's logits z [B, rows, E+N],
    p = softmax(z) (`probs`), the choice e = argmax z (ties to the lower
    index, `choice`), and, walking the rows in order, whether each is kept:
    e < E and fewer than `capacity` earlier rows of its sequence were kept
    by e. `gate` holds p[e] for a kept row and 0 for the others (a kept
    row's p[e] >= 1 / (E+N) is never 0).

    Expert e's rows are a row set of their own: `expert_positions[e]`
    [B, capacity] and `expert_segments[e]`, compacted across the sequences
    in order. A position is the row's index in T's buffers relative to its
    sequence's first row there (b * rows): the expert kernels read n and the
    gate, and add into T's rows, at `seq * rows + position`, which is T's
    row also where T's rows are compacted across the sequences (a causal
    selection's).

    `decisions` (optional, [B, seq_len] at the tokens): e for a kept row or
    a no-op choice, e + E + N for a row over capacity, -1 for a token that
    does not reach the MLP.

    `running_counts` (a decode step): the capacity also counts the rows
    each expert kept in the sequence's earlier steps, the decode state that
    the caller passes (docs/runtime.md), to which this step's kept rows are
    added. `active` (a decode step's): a row of a sequence that is not
    active is never kept, counted or computed by an expert.
  }];
  let arguments = (ins Modk_Read:$logits, Modk_Read:$segments,
                   Modk_OptionalRead:$positions, Modk_OptionalRead:$active,
                   Modk_Written:$probs,
                   Modk_Written:$choice, Modk_Written:$gate,
                   Arg<Variadic<AnyMemRef>, "written", [MemWrite]>:$expert_positions,
                   Arg<Variadic<AnyMemRef>, "written", [MemWrite]>:$expert_segments,
                   Modk_OptionalWritten:$decisions,
                   I64Attr:$layer, I64Attr:$capacity,
                   UnitAttr:$running_counts);
  let assemblyFormat = [{
    $logits `rows` $segments (`at` $positions^)? (`active` $active^)? `->`
    $probs `,` $choice `,`
    $gate `experts` `(` $expert_positions `)` `(` $expert_segments `)`
    (`decisions` $decisions^)? attr-dict `:` type(operands)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// E: the real experts, one row set each.
    int64_t getNumExperts() { return getExpertPositions().size(); }
    /// E + N: the router's width.
    int64_t getRouterWidth();
  }];
}

def Modk_MoeCountOp : Modk_Op<"moe_count"> {
  let summary = "The causal prefill of an MoE layer's decode state";
  let description = [{
    Where the caller passes a KV cache to the forward entry (the causal
    prefill), counts, per sequence and real expert, the rows of T
    (`segments`, at token `positions`) that the layer kept at positions
    below the sequence's prefill length: the running counts that decoding
    continues from (docs/model-format.md section 7). The lowering places one
    after each modk.moe_select of the forward entry of a package that
    decodes.
  }];
  let arguments = (ins Modk_Read:$choice, Modk_Read:$gate,
                   Modk_Read:$positions, Modk_Read:$segments, I64Attr:$layer,
                   I64Attr:$n_experts);
  let assemblyFormat = [{
    $choice `,` $gate `rows` $positions `,` $segments attr-dict `:`
    type(operands)
  }];
}

//===----------------------------------------------------------------------===//
// Generated row kernels
//===----------------------------------------------------------------------===//

def Modk_AccessArrayAttr
    : TypedArrayAttrBase<Modk_AccessAttr, "an access per operand">;

def Modk_RowsOp : Modk_Op<"rows", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Modk_ColumnWindowReader>]> {
  let summary = "A row-wise kernel whose math is its regions";
  let description = [{
    For every row i of the row set (rows [0, seg[B]) of the row buffers),
    with every column c in [0, width), each operand is read or written as
    its access (`access(<inputs> -> <outputs>)`, one `#modk.access` each)
    says; the verifier checks each access against the operand's shape:
    - `row`: element (i, c) of a row buffer [B, rows, width]. Every row
      buffer, `row_value` and `ids` operand shares one [B, rows].
    - `token`: element c of the row's token in a buffer [B, T, width]: row
      i of sequence s (rows [seg[s], seg[s+1])) is token t = s * T + p,
      where p is `positions`[i] (the `tokens` operand), or 0 without it
      (then T = 1). This is how a routed block gathers the rows it selected
      and scatters its update back into the residual stream.
    - `row_value`: one value a row, [B, rows]; an i32 input is a class a
      row (a target), read as f32 (below 2^24 in magnitude).
    - `token_value`: one value at the row's token, [B, T] (a router score,
      or its gradient).
    - `column` (input): one value a column, [width] or [1, width] (a
      router's weight).
    - `scalar` (input): one value, [1] (a bias).
    - `table` (input) and `ids` (input): the table [V, width], V > 1, read
      at row id(i), where id(i) is the `ids` input's i32 value at row i, in
      [0, V) (the caller validates it). The regions do not read `ids`. This
      is how the embedding lookup is a row kernel. A kernel has at most one
      `ids` input, and one exactly where it has a table or a scatter.
    - `scatter` (output): the lookup's adjoint. The value `body` yields at
      (i, c) is added to element (id(i), c), rows with equal ids in row
      order, so the sums do not depend on the thread count. Such a kernel
      has that one output, f32, and maps elements (no sums, maxima, token
      accesses or head_dim): the embedding's gradient.
    - `column_sum` (output, f32): for each column c, the sum over the rows
      of the values `body` yields for it at (i, c), added to what it holds
      (a weight's gradient), in an order that does not depend on the thread
      count.
    - `row_sum` (output [1], f32): the sum over the rows of a value a row,
      added to what it holds, in the column sums' order. Column sums and row
      sums together are at most three a kernel (kMaxColumnSums).
    An output `row_value`, `token_value` or `row_sum` is stored once a row:
    the value `body` yields for it must depend only on the row's sums (and
    values a row, token or kernel, and constants).

    The regions:
    - `maxima` (optional) gets the elements of the inputs as f32 and yields
      terms whose maximum over c is taken (a softmax's row max);
    - `reduce` gets the elements (then the maxima) and yields the terms of
      the row's sums; each yielded value is summed over c;
    - `body` gets the elements, the maxima, then the row's sums, and yields
      the value of each output at (i, c), stored as the output's element
      type (bf16: rounded to the nearest, ties to even).
    The regions hold `arith` and `math` ops on f32 (and i1 conditions),
    `modk.column` (the element's column) and `modk.row_count`; the emitters
    generate each target's kernel from them (docs/compiler.md). An output
    may be an input (in place), with the same access: every element of a
    row is read before any of that row is written.
    `causal_only`: the forward entry runs it only where causal decisions
    are read (the predictor's kernels).
    `head_dim` = HD (RoPE): the row is heads of HD columns, and `body` may
    read `modk.rotate_half` (an input's element at the partner column of
    its head) and `modk.rope_angle` (at the row's position, `positions`
    without token accesses). Such a kernel maps elements: it reads `row`,
    `column` and `scalar` inputs and writes `row` outputs.

    ```mlir
    modk.rows ins(%x, %w : memref<?x16x32xf32>, memref<32xf32>)
        rows %seg : memref<?xi64> outs(%y : memref<?x16x32xf32>)
        access(row, column -> row)
    reduce {
    ^bb0(%xc: f32, %wc: f32):
      %sq = arith.mulf %xc, %xc : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%xc: f32, %wc: f32, %ss: f32):
      ...
      modk.yield %yc : f32
    }
    ```
  }];
  let arguments = (ins Variadic<AnyMemRef>:$inputs, AnyMemRef:$segments,
                   Optional<AnyMemRef>:$positions,
                   Variadic<AnyMemRef>:$outputs,
                   Modk_AccessArrayAttr:$input_access,
                   Modk_AccessArrayAttr:$output_access,
                   UnitAttr:$causal_only, OptionalAttr<I64Attr>:$head_dim);
  let regions = (region SizedRegion<1>:$reduce, SizedRegion<1>:$body,
                 MaxSizedRegion<1>:$maxima);
  let assemblyFormat = [{
    (`ins` `(` $inputs^ `:` type($inputs) `)`)? `rows` $segments `:`
    type($segments) (`tokens` `(` $positions^ `:` type($positions) `)`)?
    `outs` `(` $outputs `:` type($outputs) `)`
    `access` `(` custom<Accesses>($input_access, $output_access) `)`
    attr-dict-with-keyword (`maxima` $maxima^)? `reduce` $reduce `body` $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// Elements of a row: the last dimension of the first operand (the
    /// outputs, then the inputs) that holds rows of elements (row, token,
    /// table or scatter), else of the first column vector or column sum;
    /// 1 where every operand holds one value a row, token or kernel.
    int64_t getWidth();
    /// How input `j` is read.
    Access getInputAccessAt(unsigned j);
    /// How output `k` is written.
    Access getOutputAccessAt(unsigned k);
    /// How operand `index` (the inputs, then the outputs) is addressed.
    Access getAccess(unsigned index);
    /// Whether operand `index` (the inputs, then the outputs) is read or
    /// written at its row's token (`token` or `token_value`).
    bool isTokenOperand(unsigned index);
    /// Whether some operand is addressed at its row's token.
    bool hasTokenOperands();
    /// Whether input `j` holds one value a row, a token or a kernel: loaded
    /// once a row rather than an element at a time.
    bool isLoadedOnceARow(unsigned j);
    /// Whether output `k` is stored once a row (`row_value` or
    /// `token_value`).
    bool isStoredOnceARow(unsigned k);
    /// Whether output `k` is stored an element at a time (`row`, `token`
    /// or `scatter`).
    bool isStoredPerElement(unsigned k);
    /// The `ids` input, if the kernel has one.
    std::optional<unsigned> getIdsInput();
    /// Whether some operand is a table or a scatter (a lookup).
    bool hasLookups() { return getIdsInput().has_value(); }
    /// Whether input `index` may be a modk.column_window: a `row` input of
    /// a kernel that maps elements at its rows (no sums, maxima, lookups
    /// or token accesses); the CPU row kernels index it by its row stride.
    /// Such a window may also be an output: written in place.
    bool readsWindowAt(unsigned index);
    /// The outputs that sum over the rows, as output indices, in the order
    /// of a kernel's partial sums: the column sums (width floats each),
    /// then the row sums (a float each).
    llvm::SmallVector<unsigned> getRowSumOutputs();
    /// Whether some output sums over the rows: a column sum or a row sum.
    bool hasRowSums() { return !getRowSumOutputs().empty(); }
    /// Column sums and row sums a kernel adds at most (the CUDA
    /// reduction's outputs).
    static constexpr unsigned kMaxColumnSums = 3;
    /// Whether `arg`, an argument of `body`, is the same for every element
    /// of a row: one of the row's sums or maxima, or an input loaded once a
    /// row.
    bool isRowInvariantArgument(mlir::BlockArgument arg);
    /// The number of sums per row that `reduce` yields.
    unsigned getNumReductions();
    /// The number of maxima per row that `maxima` yields (0 without it).
    unsigned getNumMaxima();
    /// Operand `index` of the inputs followed by the outputs.
    mlir::Value getInputOrOutput(unsigned index);
    /// Appends `output`, written with `access` (the caller extends `body`'s
    /// yield).
    void appendOutput(mlir::Value output, Access access);
  }];
  let builders = [
    OpBuilder<(ins "mlir::ValueRange":$inputs, "llvm::ArrayRef<Access>":$inputAccess,
                   "mlir::Value":$segments, "mlir::Value":$positions,
                   "mlir::ValueRange":$outputs, "llvm::ArrayRef<Access>":$outputAccess)>
  ];
}

def Modk_ColumnOp : Modk_Op<"column", [Pure, HasParent<"RowsOp">]> {
  let summary = "The column of the element a modk.rows region computes";
  let description = [{
    As f32 (exact: rows are narrower than 2^24). With a class read from an
    i32 input, `arith.cmpf oeq` picks the element at that class (the
    target's logit of a cross-entropy).
  }];
  let results = (outs F32:$column);
  let assemblyFormat = "attr-dict `:` type($column)";
}

def Modk_RopeAngleOp : Modk_Op<"rope_angle", [Pure, HasParent<"RowsOp">]> {
  let summary = "cos and sin of the RoPE angle of a modk.rows element";
  let description = [{
    In a modk.rows with `head_dim` = HD, the element at column c has the
    pair index j = (c mod HD) mod HD/2, and its row the position p (the
    op's `positions` at the row). The angle a = p * theta^(-2j / HD) is
    formed in double; cos a and sin a are rounded to f32
    (docs/model-format.md, RoPE). Only `body` reads it.
  }];
  let arguments = (ins F64Attr:$theta);
  let results = (outs F32:$cos, F32:$sin);
  let assemblyFormat = "attr-dict `:` type($cos) `,` type($sin)";
  let hasVerifier = 1;
}

def Modk_RotateHalfOp : Modk_Op<"rotate_half", [Pure, HasParent<"RowsOp">]> {
  let summary = "An input's element at the partner column of its head, signed";
  let description = [{
    In a modk.rows with `head_dim` = HD, where `element` is the body's
    argument for input x (a row buffer) at column c: -x[c + HD/2] in the
    first half of c's head, x[c - HD/2] in the second. RoPE is then
    x cos + rotate_half(x) sin, and its transpose x cos - rotate_half(x) sin.
  }];
  let arguments = (ins F32:$element);
  let results = (outs F32:$result);
  let assemblyFormat = "$element attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Modk_RowCountOp : Modk_Op<"row_count", [Pure, HasParent<"RowsOp">]> {
  let summary = "The number of rows of a modk.rows's row set, as f32";
  let description = [{
    seg[B], known only when the kernel runs (B is the caller's): a mean
    over the rows scales by its reciprocal.
  }];
  let results = (outs F32:$count);
  let assemblyFormat = "attr-dict `:` type($count)";
}

def Modk_OptimizerOp : Modk_Op<"optimizer", [Symbol, IsolatedFromAbove,
    SingleBlock, DeclareOpInterfaceMethods<OpAsmOpInterface,
                                           ["getAsmBlockArgumentNames"]>]> {
  let summary = "The optimizer step: an element-wise update of every parameter";
  let description = [{
    The `modc_adamw` function of a training package. `params` lists the
    parameters it updates (those of the training entry, in ABI order: name,
    shape, and `decay`, whether weight decay applies). For every element of
    every parameter, `body` gets the parameter p, its gradient g, the first
    and second moments m and v, then the step's scalars, all f32:

    | argument | value (docs/model-format.md, "The AdamW step") |
    |---|---|
    | `grad_scale` | clip_norm / ‖g‖ where clipping applies, else 1 |
    | `decay` | 1 − lr · weight_decay (weight_decay = 0 where `decay` is false) |
    | `beta1`, `beta2`, `eps` | as given |
    | `step_size` | lr / (1 − beta1^step), formed in f64 |
    | `inv_sqrt_bc2` | 1 / sqrt(1 − beta2^step), formed in f64 |

    and yields the new p, m and v. The host forms the scalars once a step
    from the global gradient norm ‖g‖ over every parameter: `norm` gets a
    gradient element g (f32) and yields its term of ‖g‖², an f64 (g², in
    f64), and ‖g‖² is the sum of the terms over every element of every
    parameter, in f64, in an order that does not depend on the thread
    count. The emitters generate each target's kernels from both regions,
    as they do for `modk.rows`: the norm's sum, and the element loop of the
    update, with what depends only on the scalars hoisted out of it. A
    non-finite ‖g‖ updates nothing.

    `bf16_copies` (set by modk-keep-bf16-weights for a CUDA target), one
    flag a parameter: the parameter also lives on the device as bf16, the
    copy that the bf16 products fed by TMA read. The update writes the new
    p, rounded to bf16, into that copy as it writes p, so no call rounds
    the weights again.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Modk_ParamList:$params,
                   OptionalAttr<DenseBoolArrayAttr>:$bf16_copies);
  let regions = (region SizedRegion<1>:$body, MaxSizedRegion<1>:$norm);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body (`norm` $norm^)?";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The body's arguments: the elements, then the step's scalars.
    static llvm::ArrayRef<llvm::StringLiteral> getArgumentNames() {
      static constexpr llvm::StringLiteral names[] = {
          "p", "g", "m", "v", "grad_scale", "decay", "beta1", "beta2", "eps",
          "step_size", "inv_sqrt_bc2"};
      return names;
    }
    /// The element arguments (p, g, m, v) that precede the scalars.
    static constexpr unsigned kElements = 4;
    /// The values the body yields: the new p, m and v.
    static constexpr unsigned kResults = 3;
    /// Whether parameter `index` keeps a bf16 copy (`bf16_copies`).
    bool keepsBf16Copy(size_t index) {
      std::optional<llvm::ArrayRef<bool>> copies = getBf16Copies();
      return copies && index < copies->size() && (*copies)[index];
    }
  }];
}

def Modk_YieldOp : Modk_Op<"yield", [Pure, Terminator, ReturnLike,
                                     ParentOneOf<["RowsOp", "OptimizerOp"]>]> {
  let summary = "The values of a modk.rows or modk.optimizer region at one element";
  // f64: the gradient norm's terms (modk.optimizer's `norm`).
  let arguments = (ins Variadic<AnyTypeOf<[F32, F64]>>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

//===----------------------------------------------------------------------===//
// Training kernels (the `grad` entry). Outputs come last among the operands;
// `accumulate` kernels add into their outputs.
//===----------------------------------------------------------------------===//

class Modk_GenericOp<string mnemonic, list<Trait> traits = []>
    : Modk_Op<mnemonic, traits> {
  let assemblyFormat = "`(` operands `)` attr-dict `:` type(operands)";
}

def Modk_MoeBalanceOp : Modk_Op<"moe_balance", [AttrSizedOperandSegments]> {
  let summary = "An MoE layer's balance loss and its router's gradient";
  let description = [{
    Over every row of `segments` (the N rows of the batch that reach the
    MoE MLP), with p = `probs` and e = `choice`: frac_c (the share of rows
    with e = c) and mean_p_c, then L_bal = (E+N) sum_c frac_c mean_p_c
    (docs/model-format.md section 7). It adds L_bal / n_moe into
    losses[3] and weight L_bal / n_moe into losses[0], the row sums in row
    order (the same float sums in every entry). With `dlogits`, the
    gradient of the router's logits of each row: dp_c = [c = e] dgate +
    weight (E+N) frac_c / (N n_moe), dz = p (dp - <dp, p>); the choices
    and frac are constants.
  }];
  let arguments = (ins Modk_Read:$probs, Modk_Read:$choice,
                   Modk_OptionalRead:$dgate, Modk_Read:$segments,
                   Modk_OptionalWritten:$dlogits, Modk_ReadWritten:$losses,
                   F64Attr:$weight, I64Attr:$n_moe);
  let assemblyFormat = [{
    $probs `,` $choice (`dgate` $dgate^)? `rows` $segments
    (`->` $dlogits^)? `losses` $losses attr-dict `:` type(operands)
  }];
  let hasVerifier = 1;
}

def Modk_ZeroOp : Modk_GenericOp<"zero"> {
  let summary = "Fills a whole buffer with zeros";
  let arguments = (ins Modk_Written:$output);
}

def Modk_CopyOp : Modk_GenericOp<"copy"> {
  let summary = "Copies a whole [B, ...] buffer (f32 into bf16: rounded)";
  let arguments = (ins Modk_Read:$input, Modk_Written:$output);
}

def Modk_SplitTokensOp : Modk_GenericOp<"split_tokens"> {
  let summary = "tokens [B, S+1] -> inputs t[:, :S] and targets t[:, 1:]";
  let arguments = (ins Modk_Read:$tokens, Modk_Written:$inputs,
                   Modk_Written:$targets);
}

def Modk_ActivationOp : Modk_GenericOp<"activation"> {
  let summary = "u = silu(gate) * up (swiglu) or u = gelu(pre), out of place";
  let description = [{
    Training keeps the pre-activations for the backward pass, so the
    activation is not fused into the GEMM epilogue there. `gate` is absent
    for gelu.
  }];
  let arguments = (ins Modk_OptionalRead:$gate, Modk_Read:$up,
                   Modk_Read:$segments, Modk_Written:$output, Modk_ActivationAttr:$kind);
}

def Modk_CrossEntropyOp : Modk_GenericOp<"cross_entropy"> {
  let summary = "Mean next-token cross-entropy and its gradient";
  let description = [{
    losses = [total, ce, aux]: sets total = ce = mean(-log softmax[target])
    and aux = 0; dlogits = (softmax - onehot) / rows. modk-generalize
    writes it as a modk.rows with a `maxima` region (docs/compiler.md).
  }];
  let arguments = (ins Modk_Read:$logits, Modk_Read:$targets,
                   Modk_Written:$dlogits, Modk_ReadWritten:$losses);
}

def Modk_BCELossOp : Modk_GenericOp<"bce_loss"> {
  let summary = "Causal-router loss of one routed layer and its gradient";
  let description = [{
    BCEWithLogits(z, mask) summed over [B, S] and scaled by 1 / (B S n_routed):
    added to losses[2] (aux) and, times `weight`, to losses[0] (total);
    dz += weight * (sigmoid(z) - mask) / (B S n_routed). modk-generalize
    writes it as a modk.rows with two row totals (docs/compiler.md).
  }];
  let arguments = (ins Modk_Read:$logits, Modk_Read:$mask, Modk_Written:$dlogits,
                   Modk_ReadWritten:$losses, F64Attr:$weight, I64Attr:$n_routed);
}

// The loss-only forms of the two losses: the `eval` entry reads the losses
// and needs no gradient buffers (docs/compiler.md, mod-generate-eval).
def Modk_CrossEntropyLossOp : Modk_GenericOp<"cross_entropy_loss"> {
  let summary = "Mean next-token cross-entropy, without its gradient";
  let description = [{
    losses = [total, ce, aux]: sets total = ce = mean(-log softmax[target])
    and aux = 0, bit for bit as modk.cross_entropy does.
  }];
  let arguments = (ins Modk_Read:$logits, Modk_Read:$targets,
                   Modk_ReadWritten:$losses);
}

def Modk_BCELossValueOp : Modk_GenericOp<"bce_loss_value"> {
  let summary = "Causal-router loss of one routed layer, without its gradient";
  let description = [{
    What modk.bce_loss adds to losses[2] and losses[0], bit for bit, with no
    gradient written.
  }];
  let arguments = (ins Modk_Read:$logits, Modk_Read:$mask, Modk_ReadWritten:$losses,
                   F64Attr:$weight, I64Attr:$n_routed);
}

def Modk_GemmDgradOp : Modk_GenericOp<"gemm_dgrad"> {
  let summary = "dA (+)= dY . W on the rows of a row set";
  let description = [{
    `group` (set by modk-group-gemms for a CUDA target): neighbouring input
    gradients with the same number are independent products of one shape,
    accumulation and configuration that run as one grouped launch, as
    modk.gemm's.
  }];
  let arguments = (ins Modk_Read:$dy, Modk_Read:$weight, Modk_Read:$segments,
                   Modk_ReadWritten:$da, BoolAttr:$accumulate,
                   OptionalAttr<Modk_GemmConfigAttr>:$config,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$group);
  let builders = [
    // Before modk-group-gemms: no group.
    OpBuilder<(ins "::mlir::Value":$dy, "::mlir::Value":$weight,
                   "::mlir::Value":$segments, "::mlir::Value":$da,
                   "bool":$accumulate, "GemmConfigAttr":$config), [{
      build($_builder, $_state, dy, weight, segments, da, accumulate, config,
            ::mlir::IntegerAttr());
    }]>
  ];
  let hasVerifier = 1;
}

def Modk_GemmWgradOp : Modk_GenericOp<"gemm_wgrad"> {
  let summary = "dW += dY^T . A over the rows of a row set";
  let description = [{
    `overwrite` (set by modk-fold-zero-fills): dW = dY^T . A, dW's old values
    neither read nor kept (a product of no rows writes zeros).
    `precision`: as modk.gemm's, where it is not the entry's dtype.
    `group` (set by modk-group-gemms for a CUDA target): neighbouring weight
    gradients with the same number are independent products of one shape,
    precision and configuration that run as one grouped launch, as
    modk.gemm's.
  }];
  let arguments = (ins Modk_Read:$dy, Modk_Read:$input, Modk_Read:$segments,
                   Modk_ReadWritten:$dw, OptionalAttr<Modk_GemmConfigAttr>:$config,
                   OptionalAttr<Modk_DTypeAttr>:$precision,
                   OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$group,
                   UnitAttr:$overwrite);
  let builders = [
    // Before modk-group-gemms and modk-fold-zero-fills: no group, adding.
    OpBuilder<(ins "::mlir::Value":$dy, "::mlir::Value":$input,
                   "::mlir::Value":$segments, "::mlir::Value":$dw,
                   "GemmConfigAttr":$config, "DTypeAttr":$precision), [{
      build($_builder, $_state, dy, input, segments, dw, config, precision,
            ::mlir::IntegerAttr(), ::mlir::UnitAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// Whether the products round their operands to bf16 (modk.gemm's).
    bool productsBf16();
  }];
  let hasVerifier = 1;
}

def Modk_RMSNormGradOp : Modk_GenericOp<"rmsnorm_grad"> {
  let summary = "dx (+)= and dw += the gradient of RMSNorm";
  let arguments = (ins Modk_Read:$input, Modk_Read:$weight, Modk_Read:$dy,
                   Modk_Read:$segments, Modk_ReadWritten:$dx, Modk_ReadWritten:$dw,
                   F64Attr:$eps, BoolAttr:$accumulate);
}

def Modk_RopeGradOp : Modk_GenericOp<"rope_grad"> {
  let summary = "output = the transpose of RoPE (rotation by -angle) of grad";
  let description = [{
    Out of place, so that the rotated gradient can be stored as bf16 (a
    bf16 model's products read it) while attention_grad's output stays f32.
  }];
  let arguments = (ins Modk_Read:$grad, Modk_Read:$positions,
                   Modk_Read:$segments, Modk_Written:$output, I64Attr:$n_heads,
                   F64Attr:$rope_theta);
}

def Modk_AttentionGradOp : Modk_GenericOp<"attention_grad",
    [DeclareOpInterfaceMethods<Modk_ColumnWindowReader>]> {
  let summary = "dq, dk, dv of causal attention within each sequence";
  let arguments = (ins Modk_Read:$q, Modk_Read:$k, Modk_Read:$v,
                   Modk_Read:$o, Modk_Read:$dout, Modk_Read:$positions,
                   Modk_Read:$segments, Modk_Written:$dq, Modk_Written:$dk,
                   Modk_Written:$dv, I64Attr:$n_heads,
                   OptionalAttr<Modk_GemmPathAttr>:$mainloop);
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The key/value heads: k's width over the head dim (grouped-query
    /// attention where fewer than n_heads, docs/model-format.md section 3).
    int64_t getKvHeads();
  }];
}

def Modk_ActivationGradOp : Modk_GenericOp<"activation_grad",
                                          [AttrSizedOperandSegments]> {
  let summary = "Gradients of the pre-activations of swiglu or gelu";
  let arguments = (ins Modk_OptionalRead:$gate, Modk_Read:$up,
                   Modk_Read:$du, Modk_Read:$segments,
                   Modk_OptionalWritten:$dgate, Modk_Written:$dup, Modk_ActivationAttr:$kind);
  let hasVerifier = 1;
}

def Modk_ScatterGradOp : Modk_GenericOp<"scatter_grad"> {
  let summary = "Gradient of the gated scatter: df = g(r) dy, dr += g'(r)<dy, f>";
  let arguments = (ins Modk_Read:$dy, Modk_Read:$scores, Modk_Read:$update,
                   Modk_Read:$positions, Modk_Read:$segments, Modk_Written:$df,
                   Modk_Written:$dscores, Modk_GateAttr:$gate);
}

def Modk_GatherGradOp : Modk_GenericOp<"gather_grad"> {
  let summary = "dx[seq, pos_j] += dxs_j";
  let arguments = (ins Modk_Read:$dgathered, Modk_Read:$positions,
                   Modk_Read:$segments, Modk_ReadWritten:$dx);
}

def Modk_RouterGradOp : Modk_GenericOp<"router_grad"> {
  let summary = "dx += dr w and dw += sum dr x for r = w . x";
  let arguments = (ins Modk_Read:$input, Modk_Read:$weight,
                   Modk_Read:$dscores, Modk_ReadWritten:$dx, Modk_ReadWritten:$dw);
}

def Modk_PredictorGradOp : Modk_GenericOp<"predictor_grad"> {
  let summary = "Gradients of the predictor's parameters (input stop-gradient)";
  let description = [{
    modk-generalize writes it as fc1's product again, a modk.rows with
    column sums and a row total, and a gemm_wgrad.
  }];
  let arguments = (ins Modk_Read:$input, Modk_Read:$fc1_weight,
                   Modk_Read:$fc1_bias, Modk_Read:$fc2_weight, Modk_Read:$dp,
                   Modk_ReadWritten:$hidden, Modk_ReadWritten:$dfc1_weight,
                   Modk_ReadWritten:$dfc1_bias, Modk_ReadWritten:$dfc2_weight,
                   Modk_ReadWritten:$dfc2_bias);
}

def Modk_EmbedGradOp : Modk_GenericOp<"embed_grad"> {
  let summary = "dtable[token] += dx";
  let arguments = (ins Modk_Read:$tokens, Modk_Read:$dx, Modk_ReadWritten:$dtable);
}

//===----------------------------------------------------------------------===//
// Decode-step kernels (the `decode` entry): one row per sequence, per-layer
// KV caches that hold only the tokens that went through the layer.
//===----------------------------------------------------------------------===//

def Modk_DecodeRowsOp : Modk_GenericOp<"decode_rows"> {
  let summary = "Row set of a dense layer in a decode step: one row a sequence";
  let arguments = (ins Modk_Read:$step_positions, Modk_Read:$active,
                   Modk_Written:$positions, Modk_Written:$segments);
}

def Modk_DecodeAttentionOp : Modk_GenericOp<"decode_attention",
    [MemoryEffects<[MemRead<Modk_KVCache>, MemWrite<Modk_KVCache>]>]> {
  let summary = "Append K, V of each row to its layer cache; attend over it";
  let description = [{
    For each row of an active sequence: K and V (RoPE'd at the row's original
    position) are appended to the sequence's cache of layer `layer`, then the
    row's query attends over every cached token of that sequence and layer.
    Routed layers pass only their routed rows, so their caches hold only
    routed tokens.
  }];
  let arguments = (ins Modk_Read:$q, Modk_Read:$k, Modk_Read:$v,
                   Modk_Read:$positions, Modk_Read:$segments,
                   Modk_Read:$active, Modk_Written:$output, I64Attr:$layer,
                   I64Attr:$n_heads);
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The key/value heads: k's width over the head dim (grouped-query
    /// attention where fewer than n_heads, docs/model-format.md section 3).
    int64_t getKvHeads();
  }];
}

def Modk_DecodeSelectOp : Modk_Op<"decode_select",
    [NoTerminator, RecursiveMemoryEffects]> {
  let summary = "Causal decision per sequence and compaction (router and gather are modk.rows)";
  let description = [{
    A decode step's selection, between its router and its gather + RMSNorm,
    which are modk.rows from the lowering on (the router over every
    sequence's token, the gather over the routed ones): from the scores r
    (and the
    predictor's logits), sequence b goes through the layer iff active[b]
    and its decision > 0; routed rows are compacted in sequence order.

    With a `gather` region (modk-fuse-select-gather), the region's one
    `modk.rows` (over the rows this op writes, no column sums) runs in the
    same kernel, right after the compaction: each routed sequence's row is
    gathered by the block (CUDA) or loop (CPU) that compacted it.
  }];
  let arguments = (ins Modk_Read:$scores, Modk_Read:$step_positions,
                   Modk_Read:$active, Modk_Written:$positions,
                   Modk_Written:$segments, Modk_Written:$mask,
                   Modk_OptionalRead:$causal_scores, I64Attr:$layer,
                   Modk_CausalRouterAttr:$causal_router);
  let regions = (region AnyRegion:$fused_gather);
  let assemblyFormat = [{
    `(` operands `)` attr-dict `:` type(operands) (`gather` $fused_gather^)?
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The modk.rows of the `gather` region, or null.
    RowsOp getGatherRows();
    /// None: a decode step's gather reads one token a sequence.
    mlir::Value getGatherPositions() { return {}; }
    /// The buffers the selection decides from or writes besides its rows:
    /// a fused gather may not read or write them.
    llvm::SmallVector<mlir::Value> getSelectionBuffers() {
      return {getScores(), getMask(), getCausalScores(), getActive(),
              getStepPositions()};
    }
  }];
}

#endif // MODC_DIALECT_MODK_OPS
