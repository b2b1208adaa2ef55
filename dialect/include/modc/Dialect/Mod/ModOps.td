//===- ModOps.td - Operations of the mod dialect -----------*- tablegen -*-===//
//
// Shapes: tokens tensor<?xSxi32>, residual stream tensor<?xSxDxf32>, router
// scores tensor<?xSxf32>, selections tensor<?xKxi32> (original positions in
// ascending order), gathered rows tensor<?xKxDxf32>. `?` is the batch.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MOD_OPS
#define MODC_DIALECT_MOD_OPS

include "modc/Dialect/Mod/ModAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------===//

def Mod_ModelOp : Mod_Op<"model", [Symbol, SingleBlock, NoTerminator,
                                   IsolatedFromAbove]> {
  let summary = "A Mixture-of-Depths language model";
  let description = [{
    Holds the configuration of docs/model-format.md section 1. Before
    `mod-expand-schedule` the model carries `schedule` and `capacity` (or
    `capacity_tokens`); after it, every routed `mod.block` carries its own
    static capacity.

    ```mlir
    mod.model @tiny attributes {vocab_size = 256 : i64, d_model = 64 : i64, ...} {
      %t = mod.tokens : tensor<?x16xi32>
      ...
      mod.return %logits : tensor<?x16x256xf32>
    }
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    I64Attr:$vocab_size, I64Attr:$d_model, I64Attr:$n_layers,
    I64Attr:$n_heads, I64Attr:$d_ff, I64Attr:$seq_len,
    Mod_ActivationAttr:$mlp, F64Attr:$norm_eps, F64Attr:$rope_theta,
    BoolAttr:$tie_embeddings, Mod_DTypeAttr:$dtype,
    // Mixture-of-Depths settings; absent for a dense model.
    OptionalAttr<F64Attr>:$capacity,
    OptionalAttr<I64Attr>:$capacity_tokens,
    // `layers` lists the routed layers in `routed_layers`, ascending.
    OptionalAttr<Mod_ScheduleAttr>:$schedule,
    OptionalAttr<DenseI64ArrayAttr>:$routed_layers,
    OptionalAttr<Mod_GateAttr>:$gate,
    OptionalAttr<Mod_CausalRouterAttr>:$causal_router,
    OptionalAttr<F64Attr>:$aux_loss_weight,
    OptionalAttr<I64Attr>:$predictor_hidden,
    // Key/value heads of grouped-query attention (docs/model-format.md
    // section 3); absent means n_heads.
    OptionalAttr<I64Attr>:$n_kv_heads,
    // Mixture-of-Experts MLPs (docs/model-format.md section 7), all present
    // or all absent: E real experts of hidden width d_expert, N no-op
    // experts, and the layers whose MLP is MoE (`moe_layers` when the
    // schedule is `layers`). Each MoE block carries its capacity C.
    OptionalAttr<I64Attr>:$moe_experts,
    OptionalAttr<I64Attr>:$moe_noop_experts,
    OptionalAttr<I64Attr>:$moe_d_expert,
    OptionalAttr<F64Attr>:$moe_capacity_factor,
    OptionalAttr<F64Attr>:$moe_balance_loss_weight,
    OptionalAttr<Mod_ScheduleAttr>:$moe_schedule,
    OptionalAttr<DenseI64ArrayAttr>:$moe_layers
  );
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t getHeadDim() { return getDModel() / getNHeads(); }
    /// The key/value heads: n_kv_heads, or n_heads where it is absent.
    int64_t getKvHeads() { return getNKvHeads().value_or(getNHeads()); }
    /// True when the model has any MoD settings at all.
    bool isMixtureOfDepths() { return getGate().has_value(); }
    /// The schedule; a model written without one routes every other layer.
    ::modc::Schedule getScheduleOrDefault() {
      return getSchedule().value_or(::modc::Schedule::every_other);
    }
    /// Whether layer `layer` is routed under the model's schedule.
    bool isRoutedLayer(int64_t layer);
    /// The capacity k of a routed layer (docs/model-format.md section 1).
    int64_t getRoutedCapacity();
    /// True when the model has MoE MLPs (docs/model-format.md section 7).
    bool hasMixtureOfExperts() { return getMoeExperts().has_value(); }
    /// Whether layer `layer`'s MLP is an MoE MLP.
    bool isMoeLayer(int64_t layer);
    /// The expert capacity C of MoE layer `layer`:
    /// clamp(ceil(capacity_factor * n / (E + N)), 1, n), n = seq_len on a
    /// dense layer and k on a routed one.
    int64_t getExpertCapacity(int64_t layer);
  }];
}

def Mod_TokensOp : Mod_Op<"tokens", [Pure]> {
  let summary = "The input token ids [B, S]";
  let results = (outs TensorOf<[I32]>:$tokens);
  let assemblyFormat = "attr-dict `:` type($tokens)";
  let hasVerifier = 1;
}

def Mod_ReturnOp : Mod_Op<"return", [HasParent<"ModelOp">]> {
  let summary = "The logits of the model";
  let arguments = (ins TensorOf<[F32]>:$logits);
  let assemblyFormat = "$logits attr-dict `:` type($logits)";
}

def Mod_EmbedOp : Mod_Op<"embed", [Pure]> {
  let summary = "Token embedding lookup (embed.weight)";
  let arguments = (ins TensorOf<[I32]>:$tokens);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = "$tokens attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mod_BlockOp : Mod_Op<"block", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "One transformer block, dense or routed";
  let description = [{
    A dense block has no `capacity`. A routed block has the static capacity k
    (1 <= k <= seq_len), its gate and its causal router. `mod-expand-blocks`
    replaces each block by its components. A block whose MLP is a
    Mixture of Experts (docs/model-format.md section 7) carries the expert
    capacity C in `moe_capacity`, a compile-time constant computed at import;
    the model carries E, N, d_expert and the balance loss weight.
  }];
  let arguments = (ins TensorOf<[F32]>:$input, I64Attr:$layer,
                   OptionalAttr<I64Attr>:$capacity,
                   OptionalAttr<Mod_GateAttr>:$gate,
                   OptionalAttr<Mod_CausalRouterAttr>:$causal_router,
                   OptionalAttr<I64Attr>:$moe_capacity);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isRouted() { return getCapacity().has_value(); }
  }];
}

//===----------------------------------------------------------------------===//
// Block components
//===----------------------------------------------------------------------===//

def Mod_RMSNormOp : Mod_Op<"rmsnorm", [Pure, SameOperandsAndResultType]> {
  let summary = "x / sqrt(mean(x^2) + eps) * weight";
  let arguments = (ins TensorOf<[F32]>:$input, StrAttr:$param, F64Attr:$eps);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Mod_RouterOp : Mod_Op<"router", [Pure]> {
  let summary = "Router logits r_i = router . x_i on the raw residual stream";
  let arguments = (ins TensorOf<[F32]>:$input, I64Attr:$layer);
  let results = (outs TensorOf<[F32]>:$scores);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mod_PredictorOp : Mod_Op<"predictor", [Pure]> {
  let summary = "Causal predictor p_i = fc2(silu(fc1(stopgrad(x_i))))";
  let arguments = (ins TensorOf<[F32]>:$input, I64Attr:$layer, I64Attr:$hidden);
  let results = (outs TensorOf<[F32]>:$scores);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mod_TopKOp : Mod_Op<"topk", [Pure]> {
  let summary = "Per-sequence selection of the k highest router scores";
  let description = [{
    In `topk` mode: the k largest scores, ties to the lower position, indices
    in ascending position order. When `causal_router` is not `none`, sampling
    mode instead routes token i iff its causal score (the router's own score
    for `aux_loss`, the predictor's `causal_scores` for `predictor`) is > 0.
  }];
  let arguments = (ins TensorOf<[F32]>:$scores,
                   Optional<TensorOf<[F32]>>:$causal_scores,
                   I64Attr:$k, Mod_CausalRouterAttr:$causal_router);
  let results = (outs TensorOf<[I32]>:$indices);
  let assemblyFormat =
      "$scores (`causal` `(` $causal_scores^ `:` type($causal_scores) `)`)? attr-dict `:` type($scores) `->` type($indices)";
  let hasVerifier = 1;
}

def Mod_GatherOp : Mod_Op<"gather", [Pure]> {
  let summary = "Rows of the residual stream at the selected positions";
  let arguments = (ins TensorOf<[F32]>:$input, TensorOf<[I32]>:$indices);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = "$input `[` $indices `]` attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mod_AttentionOp : Mod_Op<"attention", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Causal multi-head self-attention with RoPE at original positions";
  let description = [{
    Q, K, V and output projections of layer `layer`. Without `positions` the
    rows are the positions 0..S-1; with them, row j sits at original position
    positions[j] (RoPE and the causal mask both use it).
  }];
  let arguments = (ins TensorOf<[F32]>:$input,
                   Optional<TensorOf<[I32]>>:$positions, I64Attr:$layer);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat =
      "$input (`positions` `(` $positions^ `:` type($positions) `)`)? attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Mod_MlpOp : Mod_Op<"mlp", [Pure, SameOperandsAndResultType]> {
  let summary = "The feed-forward network of layer `layer` (swiglu or gelu)";
  let arguments = (ins TensorOf<[F32]>:$input, I64Attr:$layer);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Mod_MoeOp : Mod_Op<"moe", [Pure]> {
  let summary = "Top-1 Mixture-of-Experts MLP of layer `layer` (in place of mod.mlp)";
  let description = [{
    The MoE MLP sublayer of docs/model-format.md section 7 on the rows n
    that reach it (every token of a dense layer, the k selected ones of a
    routed layer): router softmax p, expert choice e (ties to the lower
    index), the per-sequence expert capacity `capacity` in row order, and
    m_i = p_i[e_i] Expert_{e_i}(n_i) for the kept rows, 0 for the others.
    The result is m; with `residual` (mod-fuse-residual) it is residual + m,
    which the lowering writes by adding into the residual's rows: rows that
    no expert keeps are never touched.
  }];
  let arguments = (ins TensorOf<[F32]>:$input,
                   Optional<TensorOf<[F32]>>:$residual, I64Attr:$layer,
                   I64Attr:$capacity);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input (`residual` `(` $residual^ `:` type($residual) `)`)? attr-dict
    `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Mod_AddOp : Mod_Op<"add", [Pure, SameOperandsAndResultType]> {
  let summary = "Elementwise sum (residual connection)";
  let arguments = (ins TensorOf<[F32]>:$lhs, TensorOf<[F32]>:$rhs);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Mod_GatedResidualOp : Mod_Op<"gated_residual", [Pure]> {
  let summary = "y_i = x_i + g(r_i) f_i for selected i; y_i = x_i otherwise";
  let arguments = (ins TensorOf<[F32]>:$input, TensorOf<[F32]>:$update,
                   TensorOf<[F32]>:$scores, TensorOf<[I32]>:$indices,
                   Mod_GateAttr:$gate);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $update `,` $scores `,` $indices attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Mod_LMHeadOp : Mod_Op<"lm_head", [Pure]> {
  let summary = "Logits = x . W^T (lm_head.weight, or embed.weight when tied)";
  let arguments = (ins TensorOf<[F32]>:$input, StrAttr:$param);
  let results = (outs TensorOf<[F32]>:$logits);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fused ops created by the fusion passes
//===----------------------------------------------------------------------===//

def Mod_RouteOp : Mod_Op<"route", [Pure]> {
  let summary = "Fused router + top-k + gather + RMSNorm (mod-fuse-routing)";
  let description = [{
    One pass over the residual stream: router scores, per-sequence selection
    of k tokens, the gathered rows and their attention-norm.
  }];
  let arguments = (ins TensorOf<[F32]>:$input,
                   Optional<TensorOf<[F32]>>:$causal_scores,
                   I64Attr:$layer, I64Attr:$k, Mod_CausalRouterAttr:$causal_router,
                   StrAttr:$norm_param, F64Attr:$eps);
  let results = (outs TensorOf<[F32]>:$scores, TensorOf<[I32]>:$indices,
                      TensorOf<[F32]>:$gathered, TensorOf<[F32]>:$normed);
  let assemblyFormat =
      "$input (`causal` `(` $causal_scores^ `:` type($causal_scores) `)`)? attr-dict `:` type($input) `->` type(results)";
  let hasVerifier = 1;
}

def Mod_MlpScatterOp : Mod_Op<"mlp_scatter", [Pure]> {
  let summary = "Fused MLP + gate-scale-scatter epilogue (mod-fuse-residual)";
  let description = [{
    y = x; y[idx_j] = x[idx_j] + g(r[idx_j]) * (attn_j + mlp(normed)_j). The
    down projection's epilogue writes the selected rows of the residual stream
    in place; skipped rows are never touched.
  }];
  let arguments = (ins TensorOf<[F32]>:$normed, TensorOf<[F32]>:$attn,
                   TensorOf<[F32]>:$input, TensorOf<[F32]>:$scores,
                   TensorOf<[I32]>:$indices, I64Attr:$layer, Mod_GateAttr:$gate);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $normed `,` $attn `,` $input `,` $scores `,` $indices attr-dict `:`
    functional-type(operands, results)
  }];
}

#endif // MODC_DIALECT_MOD_OPS
