// The verifiers reject what docs/model-format.md forbids.
// RUN: mod-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{d_model (30) must be divisible by n_heads (4)}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 30 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 4 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
}

// -----

// expected-error @+1 {{head dimension d_model / n_heads = 3 must be even for RoPE}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 12 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 4 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
}

// -----

// expected-error @+1 {{capacity must be in (0, 1], got 1.5}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 1.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+1 {{routed layer 2 is out of range [0, 2)}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, routed_layers = array<i64: 0, 2>, schedule = #mod.schedule<layers>} {
}

// -----

// expected-error @+1 {{routed_layers must ascend, each layer once}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 3 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8 : i64, routed_layers = array<i64: 2, 0>, schedule = #mod.schedule<layers>} {
}

// -----

// expected-error @+1 {{routed_layers must ascend, each layer once}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 3 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8 : i64, routed_layers = array<i64: 1, 1>, schedule = #mod.schedule<layers>} {
}

// -----

// expected-error @+1 {{routed_layers is given exactly when the schedule is layers}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 3 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8 : i64, schedule = #mod.schedule<layers>} {
}

// -----

// expected-error @+1 {{routed_layers is given exactly when the schedule is layers}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 3 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8 : i64, routed_layers = array<i64: 1>, schedule = #mod.schedule<all>} {
}

// -----

// The choices are enum attributes: the parser refuses an unknown case.
// expected-error @+2 {{expected ::modc::Gate to be one of: linear, sigmoid, one}}
// expected-error @+1 {{failed to parse Mod_GateAttr parameter 'value'}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<relu>, causal_router = #mod.causal_router<none>, schedule = #mod.schedule<all>} {
}

// -----

// expected-error @+2 {{expected ::modc::Activation to be one of: swiglu, gelu}}
// expected-error @+1 {{failed to parse Mod_ActivationAttr parameter 'value'}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<relu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
}

// -----

// A string where the choice belongs: the verifier names the attribute.
// expected-error @+1 {{attribute 'causal_router' failed to satisfy constraint: how a routed layer decides causally}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64, capacity = 0.5 : f64, gate = #mod.gate<linear>, causal_router = "none", schedule = #mod.schedule<all>} {
}

// -----

mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %0 = mod.tokens : tensor<?x16xi32>
  %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  // expected-error @+1 {{layer 2 is out of range [0, 2)}}
  %2 = mod.block %1 {layer = 2 : i64} : tensor<?x16x32xf32>
}

// -----

mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %0 = mod.tokens : tensor<?x16xi32>
  %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  // expected-error @+1 {{capacity 17 must be in [1, seq_len = 16]}}
  %2 = mod.block %1 {capacity = 17 : i64, gate = #mod.gate<linear>, causal_router = #mod.causal_router<none>, layer = 1 : i64} : tensor<?x16x32xf32>
}

// -----

mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  // expected-error @+1 {{tokens dimension 1 must be 16, got 8}}
  %0 = mod.tokens : tensor<?x8xi32>
}

// -----

func.func @topk_too_large(%r: tensor<?x16xf32>) {
  // expected-error @+1 {{k = 17 must be in [1, 16]}}
  %0 = mod.topk %r {causal_router = #mod.causal_router<none>, k = 17 : i64} : tensor<?x16xf32> -> tensor<?x17xi32>
  return
}

// -----

func.func @topk_predictor_without_scores(%r: tensor<?x16xf32>) {
  // expected-error @+1 {{causal scores are given exactly when causal_router is predictor}}
  %0 = mod.topk %r {causal_router = #mod.causal_router<predictor>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
  return
}

// -----

func.func @topk_wrong_result(%r: tensor<?x16xf32>) {
  // expected-error @+1 {{indices dimension 1 must be 4, got 5}}
  %0 = mod.topk %r {causal_router = #mod.causal_router<none>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x5xi32>
  return
}

// -----

func.func @gather_rows(%x: tensor<?x16x32xf32>, %i: tensor<?x4xi32>) {
  // expected-error @+1 {{result dimension 1 must be 4, got 5}}
  %0 = mod.gather %x[%i] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x5x32xf32>
  return
}

// -----

func.func @residual_gate(%x: tensor<?x16x32xf32>, %f: tensor<?x4x32xf32>, %r: tensor<?x16xf32>, %i: tensor<?x4xi32>) {
  // expected-error @+2 {{expected ::modc::Gate to be one of: linear, sigmoid, one}}
  // expected-error @+1 {{failed to parse Mod_GateAttr parameter 'value'}}
  %0 = mod.gated_residual %x, %f, %r, %i {gate = #mod.gate<tanh>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
  return
}

// -----

func.func @attention_positions(%n: tensor<?x4x32xf32>, %i: tensor<?x3xi32>) {
  // expected-error @+1 {{positions dimension 1 must be 4, got 3}}
  %0 = mod.attention %n positions(%i : tensor<?x3xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
  return
}

// -----

// A gate makes the model Mixture-of-Depths: the routing attributes the
// passes read must all be there (found by fuzzing: the passes crashed).
// expected-error @+1 {{a Mixture-of-Depths model (it has a gate) needs capacity or capacity_tokens}}
mod.model @no_capacity attributes {aux_loss_weight = 1.000000e-02 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 16 : i64, d_model = 8 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<linear>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 8 : i64, tie_embeddings = true, vocab_size = 16 : i64} {
}

// -----

// expected-error @+1 {{a Mixture-of-Depths model (it has a gate) needs aux_loss_weight}}
mod.model @no_aux_weight attributes {capacity = 5.000000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 16 : i64, d_model = 8 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<linear>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 8 : i64, tie_embeddings = true, vocab_size = 16 : i64} {
}

// -----

// Routing attributes without a gate would be ignored: refused.
// expected-error @+1 {{they need a gate (a Mixture-of-Depths model)}}
mod.model @capacity_without_gate attributes {capacity = 5.000000e-01 : f64, d_ff = 16 : i64, d_model = 8 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 8 : i64, tie_embeddings = true, vocab_size = 16 : i64} {
}
