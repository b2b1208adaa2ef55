// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(mod.model(mod-expand-schedule))' | FileCheck %s

// CHECK-LABEL: mod.model @every_other
// CHECK: mod.block %{{.*}} {layer = 0 : i64}
// CHECK: mod.block %{{.*}} {capacity = 2 : i64, causal_router = #mod.causal_router<aux_loss>, gate = #mod.gate<linear>, layer = 1 : i64}
// CHECK: mod.block %{{.*}} {layer = 2 : i64}
// CHECK: mod.block %{{.*}} {capacity = 2 : i64, causal_router = #mod.causal_router<aux_loss>, gate = #mod.gate<linear>, layer = 3 : i64}
mod.model @every_other attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 4 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 1.250000e-01 : f64, schedule = #mod.schedule<every_other>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
  %x2 = mod.block %x1 {layer = 1 : i64} : tensor<?x16x32xf32>
  %x3 = mod.block %x2 {layer = 2 : i64} : tensor<?x16x32xf32>
  %x4 = mod.block %x3 {layer = 3 : i64} : tensor<?x16x32xf32>
}

// -----

// CHECK-LABEL: mod.model @all
// CHECK: mod.block %{{.*}} {capacity = 8 : i64, {{.*}}layer = 0 : i64}
// CHECK: mod.block %{{.*}} {capacity = 8 : i64, {{.*}}layer = 1 : i64}
mod.model @all attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 5.000000e-01 : f64, schedule = #mod.schedule<all>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
  %x2 = mod.block %x1 {layer = 1 : i64} : tensor<?x16x32xf32>
}

// -----

// CHECK-LABEL: mod.model @none
// CHECK-NOT: capacity = {{[0-9]+}} : i64
// CHECK: mod.block %{{.*}} {layer = 1 : i64}
mod.model @none attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 5.000000e-01 : f64, schedule = #mod.schedule<none>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
  %x2 = mod.block %x1 {layer = 1 : i64} : tensor<?x16x32xf32>
}

// -----

// CHECK-LABEL: mod.model @list
// CHECK: mod.block %{{.*}} {capacity = 4 : i64, {{.*}}layer = 0 : i64}
// CHECK: mod.block %{{.*}} {layer = 1 : i64}
// CHECK: mod.block %{{.*}} {capacity = 4 : i64, {{.*}}layer = 2 : i64}
mod.model @list attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 3 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 2.500000e-01 : f64, routed_layers = array<i64: 0, 2>, schedule = #mod.schedule<layers>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
  %x2 = mod.block %x1 {layer = 1 : i64} : tensor<?x16x32xf32>
  %x3 = mod.block %x2 {layer = 2 : i64} : tensor<?x16x32xf32>
}

// -----

// k = ceil(0.3 * 10) = 3
// CHECK-LABEL: mod.model @ceil
// CHECK: mod.block %{{.*}} {capacity = 3 : i64
mod.model @ceil attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 1 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 10 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 3.000000e-01 : f64, schedule = #mod.schedule<all>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x10xi32>
  %x0 = mod.embed %t : (tensor<?x10xi32>) -> tensor<?x10x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x10x32xf32>
}

// -----

// ceil(0.001 * 16) = 1: never fewer than one token
// CHECK-LABEL: mod.model @clamp_low
// CHECK: mod.block %{{.*}} {capacity = 1 : i64
mod.model @clamp_low attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 1 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 1.000000e-03 : f64, schedule = #mod.schedule<all>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
}

// -----

// CHECK-LABEL: mod.model @tokens
// CHECK: mod.block %{{.*}} {capacity = 5 : i64
mod.model @tokens attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 1 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity_tokens = 5 : i64, schedule = #mod.schedule<all>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
}

// -----

// CHECK-LABEL: mod.model @full
// CHECK: mod.block %{{.*}} {capacity = 16 : i64
mod.model @full attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 1 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 1.000000e+00 : f64, schedule = #mod.schedule<all>, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.0e-02 : f64, predictor_hidden = 8 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
}

// -----

// A model without MoD settings keeps every block dense.
// CHECK-LABEL: mod.model @dense
// CHECK-NOT: capacity
// CHECK: mod.block %{{.*}} {layer = 1 : i64}
mod.model @dense attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %t = mod.tokens : tensor<?x16xi32>
  %x0 = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %x1 = mod.block %x0 {layer = 0 : i64} : tensor<?x16x32xf32>
  %x2 = mod.block %x1 {layer = 1 : i64} : tensor<?x16x32xf32>
}
