// RUN: mod-opt %s -split-input-file --mod-generate-decode | FileCheck %s
// RUN: mod-opt %s -split-input-file --mod-generate-decode --convert-mod-to-modk | FileCheck %s --check-prefix=PREFILL
// RUN: mod-opt %s -split-input-file --convert-mod-to-modk | FileCheck %s --check-prefix=NODECODE

// The forward entry of a package that decodes fills the KV cache: a
// modk.cache_append after each attention, of that layer's keys and values
// at the attention's rows. Without a decode entry (and in the decode entry
// itself, whose attention appends its own row) there is none.
// PREFILL-LABEL: modk.entry @forward attributes {kind = #modk.entry_kind<forward>
// PREFILL: modk.attention %{{[0-9]+}}, %[[K0:[0-9]+]], %[[V0:[0-9]+]] rows %[[P0:[0-9]+]], %[[S0:[0-9]+]] ->
// PREFILL-NEXT: modk.cache_append %[[K0]], %[[V0]] rows %[[P0]], %[[S0]] {layer = 0 : i64}
// PREFILL: modk.attention %{{[0-9]+}}, %[[K1:[0-9]+]], %[[V1:[0-9]+]] rows %[[P1:[0-9]+]], %[[S1:[0-9]+]] ->
// PREFILL-NEXT: modk.cache_append %[[K1]], %[[V1]] rows %[[P1]], %[[S1]] {layer = 1 : i64}
// PREFILL-LABEL: modk.entry @decode attributes {kind = #modk.entry_kind<decode>
// PREFILL-NOT: modk.cache_append
// PREFILL-LABEL: modk.entry @forward
// PREFILL-NOT: modk.cache_append
// NODECODE-NOT: modk.cache_append

// The decode step of a dense block followed by a routed one (sigmoid gate,
// predictor router): one row per sequence, per-layer KV caches.
// CHECK-LABEL: modk.entry @decode
// CHECK-SAME: modes = [#modk.mode<causal>]
// CHECK: %[[TOK:.*]] = modk.input "tokens" : memref<?x1xi32>
// CHECK: %[[POS:.*]] = modk.input "positions" : memref<?x1xi32>
// CHECK: %[[ACT:.*]] = modk.input "active" : memref<?x1xi8>
// CHECK: modk.decode_rows(%[[POS]], %[[ACT]], %[[DPOS:.*]], %[[DSEG:.*]]) :
// Dense layer 0: every active sequence appends to the layer-0 cache.
// CHECK: modk.decode_attention({{.*}}, %[[DPOS]], %[[DSEG]], %[[ACT]], %{{.*}}) {layer = 0 : i64, n_heads = 2 : i64}
// Routed layer 1: the predictor decides per sequence; only routed rows run
// the block and append to the layer-1 cache.
// CHECK: modk.predictor %[[X:[0-9]+]], {{.*}} -> %[[P:[0-9]+]] :
// The router scores every sequence's token, active or not: the step's
// dense row set, which modk.decode_rows gives every sequence (no second
// row set, no kernel more); the decision compacts the routed sequences'
// rows, and the gather + RMSNorm reads each one's token.
// CHECK-NOT: modk.identity_rows
// CHECK: modk.rows ins(%[[X]], %{{.*}} : memref<?x1x32xf32>, memref<1x32xf32>) rows %[[DSEG]] : memref<?x1xi64> outs(%[[R:[0-9]+]] : memref<?x1xf32>) access(row, column -> row_value)
// CHECK: %[[MASK:.*]] = modk.output "routed.1" : memref<?x1xi32>
// CHECK-NEXT: modk.decode_select(%[[R]], %[[POS]], %[[ACT]], %[[RPOS:[0-9]+]], %[[RSEG:[0-9]+]], %[[MASK]], %[[P]]) {causal_router = #modk.causal_router<predictor>, layer = 1 : i64}
// CHECK: modk.rows ins(%[[X]], %{{.*}} : memref<?x1x32xf32>, memref<32xf32>) rows %[[RSEG]] : memref<?x1xi64> outs({{.*}}) access(token, column -> row, row)
// CHECK: modk.gemm {{.*}} rows %[[RSEG]] extra(%[[RPOS]]) -> %{{.*}} {epilogue = #modk.epilogue<rope>
// CHECK: modk.decode_attention({{.*}}, %[[RPOS]], %[[RSEG]], %[[ACT]], %{{.*}}) {layer = 1 : i64, n_heads = 2 : i64}
// The gated scatter: the down projection into the block's rows, then
// x = x + sigmoid(r) (a + m) at the routed sequences' one token (no
// positions: the stream holds one token a sequence).
// CHECK: modk.gemm {{.*}} rows %[[RSEG]] -> %[[DM:[0-9]+]] {epilogue = #modk.epilogue<none>} : memref<?x1x64xf32>, memref<32x64xf32>
// CHECK-NEXT: modk.rows ins(%{{.*}}, %[[DM]], %[[R]], %[[X]] : {{.*}}) rows %[[RSEG]] : memref<?x1xi64> outs(%[[X]] : memref<?x1x32xf32>) access(row, row, token_value, token -> token)
// CHECK: modk.output "logits" : memref<?x1x64xf32>
module {
  mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "blocks.0.attn_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.attention %2 {layer = 0 : i64} : tensor<?x16x32xf32>
    %4 = mod.add %1, %3 : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "blocks.0.mlp_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.mlp %5 {layer = 0 : i64} : tensor<?x16x32xf32>
    %7 = mod.add %4, %6 : tensor<?x16x32xf32>
    %8 = mod.predictor %7 {hidden = 8 : i64, layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
    %scores, %indices, %gathered, %normed = mod.route %7 causal(%8 : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
    %9 = mod.attention %normed positions(%indices : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %10 = mod.add %gathered, %9 : tensor<?x4x32xf32>
    %11 = mod.rmsnorm %10 {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %12 = mod.mlp_scatter %11, %9, %7, %scores, %indices {gate = #mod.gate<sigmoid>, layer = 1 : i64} : (tensor<?x4x32xf32>, tensor<?x4x32xf32>, tensor<?x16x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %13 = mod.rmsnorm %12 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %14 = mod.lm_head %13 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %14 : tensor<?x16x64xf32>
  }
}

// -----

// Routed layers without a causal router cannot decode: no decode entry.
// CHECK-LABEL: mod.model @small
// CHECK-NOT: modk.entry @decode
module {
  mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<none>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 32 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "blocks.0.attn_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.attention %2 {layer = 0 : i64} : tensor<?x16x32xf32>
    %4 = mod.add %1, %3 : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "blocks.0.mlp_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.mlp %5 {layer = 0 : i64} : tensor<?x16x32xf32>
    %7 = mod.add %4, %6 : tensor<?x16x32xf32>
    %scores, %indices, %gathered, %normed = mod.route %7 {causal_router = #mod.causal_router<none>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
    %8 = mod.attention %normed positions(%indices : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %9 = mod.add %gathered, %8 : tensor<?x4x32xf32>
    %10 = mod.rmsnorm %9 {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %11 = mod.mlp_scatter %10, %8, %7, %scores, %indices {gate = #mod.gate<sigmoid>, layer = 1 : i64} : (tensor<?x4x32xf32>, tensor<?x4x32xf32>, tensor<?x16x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %12 = mod.rmsnorm %11 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %13 = mod.lm_head %12 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %13 : tensor<?x16x64xf32>
  }
}
