// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(mod.model(mod-fuse-routing))' | FileCheck %s

// router + top-k + gather + attention-norm become one mod.route; the router
// scores and the indices keep feeding the attention and the gated residual.
// CHECK-LABEL: mod.model @small
// CHECK-NOT: mod.router
// CHECK-NOT: mod.topk
// CHECK-NOT: mod.gather
// CHECK: %[[P:.*]] = mod.predictor
// CHECK: %[[S:.*]], %[[I:.*]], %[[G:.*]], %[[N:.*]] = mod.route %{{.*}} causal(%[[P]] : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"}
// CHECK: %[[A:.*]] = mod.attention %[[N]] positions(%[[I]] : tensor<?x4xi32>)
// CHECK: mod.add %[[G]], %[[A]]
// CHECK: mod.gated_residual %{{.*}}, %{{.*}}, %[[S]], %[[I]]
mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "blocks.0.attn_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.attention %2 {layer = 0 : i64} : tensor<?x16x32xf32>
    %4 = mod.add %1, %3 : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "blocks.0.mlp_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.mlp %5 {layer = 0 : i64} : tensor<?x16x32xf32>
    %7 = mod.add %4, %6 : tensor<?x16x32xf32>
    %8 = mod.router %7 {layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
    %9 = mod.predictor %7 {hidden = 8 : i64, layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
    %10 = mod.topk %8 causal(%9 : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
    %11 = mod.gather %7[%10] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
    %12 = mod.rmsnorm %11 {eps = 1.000000e-05 : f64, param = "blocks.1.attn_norm.weight"} : tensor<?x4x32xf32>
    %13 = mod.attention %12 positions(%10 : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %14 = mod.add %11, %13 : tensor<?x4x32xf32>
    %15 = mod.rmsnorm %14 {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %16 = mod.mlp %15 {layer = 1 : i64} : tensor<?x4x32xf32>
    %17 = mod.add %13, %16 : tensor<?x4x32xf32>
    %18 = mod.gated_residual %7, %17, %8, %10 {gate = #mod.gate<sigmoid>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %19 = mod.rmsnorm %18 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %20 = mod.lm_head %19 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %20 : tensor<?x16x64xf32>
}

// -----

// The router reads another stream than the one gathered: no fusion.
// CHECK-LABEL: mod.model @mismatch
// CHECK: mod.router
// CHECK: mod.topk
// CHECK: mod.gather
// CHECK-NOT: mod.route
mod.model @mismatch attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %0 = mod.tokens : tensor<?x16xi32>
  %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %2 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %r = mod.router %1 {layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
  %i = mod.topk %r {causal_router = #mod.causal_router<none>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
  %g = mod.gather %2[%i] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
  %n = mod.rmsnorm %g {eps = 1.000000e-05 : f64, param = "blocks.1.attn_norm.weight"} : tensor<?x4x32xf32>
  mod.return %n : tensor<?x4x32xf32>
}
