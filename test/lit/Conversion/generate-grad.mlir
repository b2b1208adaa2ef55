// RUN: mod-opt %s --mod-generate-grad | FileCheck %s

// The training entry of a dense block followed by a routed one (k = 4 of 16,
// sigmoid gate, predictor router). The model stays for convert-mod-to-modk.
// CHECK: mod.model @small
// CHECK-LABEL: modk.entry @grad
// CHECK-SAME: modes = [#modk.mode<topk>]
// Inputs and next-token targets from [B, S + 1].
// CHECK: %[[T:.*]] = modk.input "tokens" : memref<?x17xi32>
// CHECK: modk.split_tokens(%[[T]], %[[IN:.*]], %[[TGT:.*]]) :
// Training keeps pre-activations: no activation fused into the GEMM.
// CHECK: modk.activation({{.*}}) {kind = #modk.activation<swiglu>}
// CHECK-NOT: epilogue = "swiglu"
// CHECK-NOT: epilogue = "residual_add"
// The predictor runs in training (its loss reads it).
// CHECK: modk.predictor %{{.*}} -> %[[P:[0-9]+]] :
// Training selects by top-k only: k rows a sequence.
// CHECK: modk.rows ins(%[[X1:[0-9]+]], %{{.*}} : memref<?x16x32xf32>, memref<1x32xf32>) {{.*}} outs(%[[R:[0-9]+]] : memref<?x16xf32>) access(row, column -> row_value)
// CHECK: modk.route_select %[[R]] -> %[[POS:[0-9]+]], %[[SEG:[0-9]+]], %[[MASK:[0-9]+]] {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64}
// CHECK-NEXT: %[[XS:[0-9]+]] = modk.alloc : memref<?x4x32xf32>
// CHECK: modk.rows ins(%[[X1]], {{.*}} tokens(%[[POS]] : memref<?x4xi32>) outs(%[[XS]], {{.*}}) access(token, column -> row, row)
// The scatter writes into a copy: the block input is kept for the backward.
// CHECK: modk.gemm {{.*}} rows %[[SEG]] -> %[[M:[0-9]+]] {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>
// CHECK: modk.copy(%[[X1]], %[[Y:[0-9]+]])
// CHECK-NEXT: modk.rows ins(%[[A:[0-9]+]], %[[M]], %[[R]], %[[Y]] : {{.*}}) rows %[[SEG]] : memref<?x1xi64> tokens(%[[POS]] : {{.*}}) outs(%[[Y]] : {{.*}}) access(row, row, token_value, token -> token)
// Losses and zeroed parameter gradients.
// CHECK: %[[L:.*]] = modk.output "losses" : memref<4xf32>
// CHECK: %[[GE:.*]] = modk.output "grad.embed.weight" : memref<64x32xf32>
// CHECK-NEXT: modk.zero(%[[GE]])
// CHECK: %[[GR:.*]] = modk.output "grad.blocks.1.router.weight" : memref<1x32xf32>
// CHECK: modk.cross_entropy(%{{.*}}, %[[TGT]], %{{.*}}, %[[L]])
// Tied head: its weight gradient goes to embed.weight.
// CHECK: modk.gemm_wgrad(%{{.*}}, %{{.*}}, %{{.*}}, %[[GE]])
// The gate gradient dr = g'(r) <dy, f> with f = a + m, on the k rows.
// CHECK: modk.add %[[A]], %[[M]] rows %[[SEG]] -> %[[F:[0-9]+]]
// CHECK: modk.scatter_grad(%{{.*}}, %[[R]], %[[F]], %[[POS]], %[[SEG]], %{{.*}}, %[[DR:[0-9]+]]) {gate = #modk.gate<sigmoid>}
// GEMM gradients of the routed block run on its gathered rows only.
// CHECK: modk.gemm_dgrad({{.*}}, %[[SEG]], {{.*}}) {accumulate = false} : memref<?x4x32xf32>
// CHECK: modk.attention_grad({{.*}}, %[[POS]], %[[SEG]], %[[DQR:[0-9]+]], %[[DKR:[0-9]+]], %{{[0-9]+}}) {n_heads = 2 : i64}
// The transpose of RoPE, out of place: the products read the new buffers.
// CHECK: modk.rope_grad(%[[DQR]], %[[POS]], %[[SEG]], %[[DQ:[0-9]+]]) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64}
// CHECK: modk.rope_grad(%[[DKR]], %[[POS]], %[[SEG]], %[[DK:[0-9]+]])
// CHECK: modk.gemm_dgrad(%[[DQ]],
// CHECK: modk.gemm_wgrad(%[[DQ]],
// CHECK: modk.gemm_dgrad(%[[DK]],
// CHECK: modk.gemm_wgrad(%[[DK]],
// The gathered rows' gradient is scattered back; the router learns.
// CHECK: modk.gather_grad(%{{.*}}, %[[POS]], %[[SEG]], %[[DX:[0-9]+]])
// CHECK: modk.router_grad(%[[X1]], %{{.*}}, %[[DR]], %[[DX]], %[[GR]])
// The predictor's loss (weight 0.01, one routed layer) trains it alone.
// CHECK: modk.bce_loss(%[[P]], %[[MASK]], %{{.*}}, %[[L]]) {n_routed = 1 : i64, weight = 1.000000e-02 : f64}
// CHECK: modk.predictor_grad(%[[X1]],
// CHECK: modk.embed_grad(%[[IN]],
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
