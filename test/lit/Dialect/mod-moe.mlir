// docs/model-format.md section 7: mod.model carries the MoE settings and
// each MoE block its expert capacity C; they print and parse back, and the
// verifiers reject what section 7 forbids.
// RUN: mod-opt %s -split-input-file | mod-opt -split-input-file | FileCheck %s

// Staged: layer 1 is routed with k = ceil(0.5 * 16) = 8, so
// C = ceil(1.5 * 8 / 3) = 4; layer 0 is dense, C = ceil(1.5 * 16 / 3) = 8.
// CHECK-LABEL: mod.model @staged
// CHECK-SAME: moe_balance_loss_weight = 5.000000e-02 : f64, moe_capacity_factor = 1.500000e+00 : f64, moe_d_expert = 32 : i64, moe_experts = 2 : i64, moe_noop_experts = 1 : i64, moe_schedule = #mod.schedule<all>
// CHECK: mod.block %{{.*}} {layer = 0 : i64, moe_capacity = 8 : i64}
// CHECK: mod.block %{{.*}} {layer = 1 : i64, moe_capacity = 4 : i64}
mod.model @staged attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<aux_loss>, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8 : i64, schedule = #mod.schedule<every_other>, moe_experts = 2 : i64, moe_noop_experts = 1 : i64, moe_d_expert = 32 : i64, moe_capacity_factor = 1.5 : f64, moe_balance_loss_weight = 0.05 : f64, moe_schedule = #mod.schedule<all>} {
  %t = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %0 = mod.block %x {layer = 0 : i64, moe_capacity = 8 : i64} : tensor<?x16x32xf32>
  %1 = mod.block %0 {layer = 1 : i64, moe_capacity = 4 : i64} : tensor<?x16x32xf32>
  %n = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
  %l = mod.lm_head %n {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
  mod.return %l : tensor<?x16x64xf32>
}

// -----

// Integrated, MoE on listed layers only, after mod-expand-schedule gave the
// routed block its own k: C follows the block's k = 4, ceil(1.0 * 4 / 4) = 1.
// CHECK-LABEL: mod.model @listed
// CHECK-SAME: moe_layers = array<i64: 1>
// CHECK: mod.block %{{.*}} {layer = 0 : i64}
// CHECK: mod.block %{{.*}} {capacity = 4 : i64, causal_router = #mod.causal_router<none>, gate = #mod.gate<linear>, layer = 1 : i64, moe_capacity = 1 : i64}
mod.model @listed attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<gelu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 1 : i64, moe_noop_experts = 3 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.0 : f64, moe_schedule = #mod.schedule<layers>, moe_layers = array<i64: 1>} {
  %t = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %0 = mod.block %x {layer = 0 : i64} : tensor<?x16x32xf32>
  %1 = mod.block %0 {layer = 1 : i64, capacity = 4 : i64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, moe_capacity = 1 : i64} : tensor<?x16x32xf32>
  %n = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
  %l = mod.lm_head %n {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
  mod.return %l : tensor<?x16x64xf32>
}
