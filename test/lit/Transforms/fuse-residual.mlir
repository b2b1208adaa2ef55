// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(mod.model(mod-fuse-residual))' | FileCheck %s

// gated_residual(x, add(a, mlp(n)), r, idx) becomes mod.mlp_scatter: the MLP
// of the selected rows writes x[idx] + g(r) (a + m) in its epilogue.
// CHECK-LABEL: mod.model @small
// CHECK: %[[S:.*]], %[[I:.*]], %[[G:.*]], %[[N:.*]] = mod.route
// CHECK: %[[A:.*]] = mod.attention %[[N]]
// CHECK: %[[H:.*]] = mod.add %[[G]], %[[A]]
// CHECK: %[[MN:.*]] = mod.rmsnorm %[[H]]
// CHECK-NOT: mod.mlp %
// CHECK-NOT: mod.gated_residual
// CHECK: %[[Y:.*]] = mod.mlp_scatter %[[MN]], %[[A]], %{{.*}}, %[[S]], %[[I]] {gate = #mod.gate<sigmoid>, layer = 1 : i64}
// CHECK: mod.rmsnorm %[[Y]] {{{.*}}final_norm.weight
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
    %12 = mod.mlp %11 {layer = 1 : i64} : tensor<?x4x32xf32>
    %13 = mod.add %9, %12 : tensor<?x4x32xf32>
    %14 = mod.gated_residual %7, %13, %scores, %indices {gate = #mod.gate<sigmoid>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %15 = mod.rmsnorm %14 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %16 = mod.lm_head %15 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %16 : tensor<?x16x64xf32>
}

// -----

// The update f = a + m feeds two residuals: it must exist, no fusion.
// CHECK-LABEL: mod.model @shared_update
// CHECK: mod.mlp
// CHECK: mod.gated_residual
// CHECK-NOT: mod.mlp_scatter
mod.model @shared_update attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %0 = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %r = mod.router %x {layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
  %i = mod.topk %r {causal_router = #mod.causal_router<none>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
  %g = mod.gather %x[%i] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
  %m = mod.mlp %g {layer = 1 : i64} : tensor<?x4x32xf32>
  %f = mod.add %g, %m : tensor<?x4x32xf32>
  %y = mod.gated_residual %x, %f, %r, %i {gate = #mod.gate<linear>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
  %z = mod.gated_residual %y, %f, %r, %i {gate = #mod.gate<linear>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
  mod.return %z : tensor<?x16x32xf32>
}
