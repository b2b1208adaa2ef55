module {
  mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 5.000000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 16 : i64, d_model = 8 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<linear>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 8 : i64, tie_embeddings = true, vocab_size = 16 : i64} {
    %0 = mod.tokens : tensor<?x8xi32>
    %1 = mod.embed %0 : (tensor<?x8xi32>) -> tensor<?x8x8xf32>
    %2 = mod.block %1 {layer = 0 : i64} : tensor<?x8x8xf32>
    %3 = mod.block %2 {layer = 1 : i64} : tensor<?x8x8xf32>
    %4 = mod.rmsnorm %3 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x8x8xf32>
    %5 = mod.lm_head %4 {param = "embed.weight"} : (tensor<?x8x8xf32>) -> tensor<?x8x16xf32>
    mod.return %5 : tensor<?x8x16xf32>
  }
}
