// Round trip of every mod op: print, parse again, print the same.
// RUN: mod-opt %s | mod-opt | FileCheck %s

// CHECK-LABEL: mod.model @small
mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  // CHECK: mod.tokens : tensor<?x16xi32>
  %0 = mod.tokens : tensor<?x16xi32>
  // CHECK: mod.embed %{{.*}} : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  // CHECK: mod.block %{{.*}} {layer = 0 : i64}
  %2 = mod.block %1 {layer = 0 : i64} : tensor<?x16x32xf32>
  // CHECK: mod.block %{{.*}} {capacity = 4 : i64, causal_router = #mod.causal_router<predictor>, gate = #mod.gate<sigmoid>, layer = 1 : i64}
  %3 = mod.block %2 {capacity = 4 : i64, causal_router = #mod.causal_router<predictor>, gate = #mod.gate<sigmoid>, layer = 1 : i64} : tensor<?x16x32xf32>
  // CHECK: mod.router %{{.*}} {layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
  %8 = mod.router %3 {layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
  // CHECK: mod.predictor %{{.*}} {hidden = 8 : i64, layer = 1 : i64}
  %9 = mod.predictor %3 {hidden = 8 : i64, layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
  // CHECK: mod.topk %{{.*}} causal(%{{.*}} : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
  %10 = mod.topk %8 causal(%9 : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
  // CHECK: mod.gather %{{.*}}[%{{.*}}] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
  %11 = mod.gather %3[%10] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
  // CHECK: mod.rmsnorm %{{.*}} {eps = 1.000000e-05 : f64, param = "blocks.1.attn_norm.weight"} : tensor<?x4x32xf32>
  %12 = mod.rmsnorm %11 {eps = 1.000000e-05 : f64, param = "blocks.1.attn_norm.weight"} : tensor<?x4x32xf32>
  // CHECK: mod.attention %{{.*}} positions(%{{.*}} : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
  %13 = mod.attention %12 positions(%10 : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
  // CHECK: mod.add
  %14 = mod.add %11, %13 : tensor<?x4x32xf32>
  // CHECK: mod.mlp %{{.*}} {layer = 1 : i64} : tensor<?x4x32xf32>
  %16 = mod.mlp %14 {layer = 1 : i64} : tensor<?x4x32xf32>
  %17 = mod.add %13, %16 : tensor<?x4x32xf32>
  // CHECK: mod.gated_residual {{.*}} {gate = #mod.gate<sigmoid>}
  %18 = mod.gated_residual %3, %17, %8, %10 {gate = #mod.gate<sigmoid>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
  // CHECK: mod.route %{{.*}} causal(%{{.*}} : tensor<?x16xf32>) {{.*}}k = 4 : i64{{.*}} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
  %r, %idx, %xs, %n = mod.route %18 causal(%9 : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
  // CHECK: mod.mlp_scatter {{.*}} {gate = #mod.gate<sigmoid>, layer = 1 : i64}
  %y = mod.mlp_scatter %n, %13, %18, %r, %idx {gate = #mod.gate<sigmoid>, layer = 1 : i64} : (tensor<?x4x32xf32>, tensor<?x4x32xf32>, tensor<?x16x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
  // CHECK: mod.lm_head %{{.*}} {param = "embed.weight"}
  %20 = mod.lm_head %y {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
  // CHECK: mod.return
  mod.return %20 : tensor<?x16x64xf32>
}
