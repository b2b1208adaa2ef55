// RUN: mod-opt %s --pass-pipeline='builtin.module(mod.model(mod-expand-blocks))' | FileCheck %s

// Dense block 0: norm, attention on every position, add, norm, mlp, add.
// CHECK-LABEL: mod.model @small
// CHECK:      %[[X:.*]] = mod.embed
// CHECK-NEXT: %[[N0:.*]] = mod.rmsnorm %[[X]] {{{.*}}param = "blocks.0.attn_norm.weight"}
// CHECK-NEXT: %[[A0:.*]] = mod.attention %[[N0]] {layer = 0 : i64} : tensor<?x16x32xf32>
// CHECK-NEXT: %[[H0:.*]] = mod.add %[[X]], %[[A0]]
// CHECK-NEXT: %[[M0N:.*]] = mod.rmsnorm %[[H0]] {{{.*}}param = "blocks.0.mlp_norm.weight"}
// CHECK-NEXT: %[[M0:.*]] = mod.mlp %[[M0N]] {layer = 0 : i64}
// CHECK-NEXT: %[[Y0:.*]] = mod.add %[[H0]], %[[M0]]
// Routed block 1: router on the raw stream, predictor, top-k, gather, the
// block on k = 4 rows at their original positions, gated residual.
// CHECK-NEXT: %[[R:.*]] = mod.router %[[Y0]] {layer = 1 : i64}
// CHECK-NEXT: %[[P:.*]] = mod.predictor %[[Y0]] {hidden = 8 : i64, layer = 1 : i64}
// CHECK-NEXT: %[[I:.*]] = mod.topk %[[R]] causal(%[[P]] : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, k = 4 : i64}
// CHECK-NEXT: %[[XS:.*]] = mod.gather %[[Y0]][%[[I]]] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
// CHECK-NEXT: %[[N1:.*]] = mod.rmsnorm %[[XS]] {{{.*}}param = "blocks.1.attn_norm.weight"} : tensor<?x4x32xf32>
// CHECK-NEXT: %[[A1:.*]] = mod.attention %[[N1]] positions(%[[I]] : tensor<?x4xi32>) {layer = 1 : i64}
// CHECK-NEXT: %[[H1:.*]] = mod.add %[[XS]], %[[A1]]
// CHECK-NEXT: %[[M1N:.*]] = mod.rmsnorm %[[H1]]
// CHECK-NEXT: %[[M1:.*]] = mod.mlp %[[M1N]] {layer = 1 : i64} : tensor<?x4x32xf32>
// CHECK-NEXT: %[[F:.*]] = mod.add %[[A1]], %[[M1]]
// CHECK-NEXT: %[[Y1:.*]] = mod.gated_residual %[[Y0]], %[[F]], %[[R]], %[[I]] {gate = #mod.gate<sigmoid>}
// CHECK-NEXT: mod.rmsnorm %[[Y1]] {{{.*}}param = "final_norm.weight"}
// CHECK-NOT: mod.block
mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %0 = mod.tokens : tensor<?x16xi32>
  %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %2 = mod.block %1 {layer = 0 : i64} : tensor<?x16x32xf32>
  %3 = mod.block %2 {capacity = 4 : i64, causal_router = #mod.causal_router<predictor>, gate = #mod.gate<sigmoid>, layer = 1 : i64} : tensor<?x16x32xf32>
  %4 = mod.rmsnorm %3 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
  %5 = mod.lm_head %4 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
  mod.return %5 : tensor<?x16x64xf32>
}
