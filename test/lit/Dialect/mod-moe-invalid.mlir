// docs/model-format.md section 7: the verifiers of the MoE attributes.
// RUN: mod-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{a Mixture-of-Experts model needs moe_experts, moe_noop_experts, moe_d_expert, moe_capacity_factor, moe_balance_loss_weight and moe_schedule}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64} {
}

// -----

// expected-error @+1 {{moe_experts must be >= 1, got 0}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 0 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+1 {{moe_noop_experts must be >= 0, got -1}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = -1 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+1 {{moe_d_expert must be positive, got 0}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 0 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+1 {{moe_capacity_factor must be finite and > 0, got 0}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 0.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+1 {{moe_balance_loss_weight must be finite and >= 0, got -1}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = -1.0 : f64, moe_schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+1 {{moe_layers is given exactly when moe_schedule is layers}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>, moe_layers = array<i64: 1>} {
}

// -----

// expected-error @+1 {{MoE layer 2 is out of range [0, 2)}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<layers>, moe_layers = array<i64: 0, 2>} {
}

// -----

// expected-error @+1 {{moe_layers must ascend, each layer once}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<layers>, moe_layers = array<i64: 1, 1>} {
}

// -----

mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>} {
  %t = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %0 = mod.block %x {layer = 0 : i64, moe_capacity = 4 : i64} : tensor<?x16x32xf32>
  // expected-error @+1 {{layer 1 is an MoE layer of the model and needs moe_capacity}}
  %1 = mod.block %0 {layer = 1 : i64} : tensor<?x16x32xf32>
}

// -----

mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<all>} {
  %t = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  // expected-error @+1 {{moe_capacity 5 is not the model's expert capacity 4}}
  %0 = mod.block %x {layer = 0 : i64, moe_capacity = 5 : i64} : tensor<?x16x32xf32>
  %1 = mod.block %0 {layer = 1 : i64, moe_capacity = 4 : i64} : tensor<?x16x32xf32>
}

// -----

mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, moe_experts = 2 : i64, moe_noop_experts = 2 : i64, moe_d_expert = 16 : i64, moe_capacity_factor = 1.0 : f64, moe_balance_loss_weight = 0.01 : f64, moe_schedule = #mod.schedule<layers>, moe_layers = array<i64: 1>} {
  %t = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %t : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  // expected-error @+1 {{layer 0 is not an MoE layer of the model: no moe_capacity}}
  %0 = mod.block %x {layer = 0 : i64, moe_capacity = 4 : i64} : tensor<?x16x32xf32>
  %1 = mod.block %0 {layer = 1 : i64, moe_capacity = 4 : i64} : tensor<?x16x32xf32>
}
