module {
  mod.model @l attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 5.000000e-01 : f64, causal_router = #mod.causal_router<aux_loss>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<linear>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 3 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 32 : i64, rope_theta = 1.000000e+04 : f64, routed_layers = array<i64: 0, 2>, schedule = #mod.schedule<layers>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.block %1 {layer = 0 : i64} : tensor<?x16x32xf32>
    %3 = mod.block %2 {layer = 1 : i64} : tensor<?x16x32xf32>
    %4 = mod.block %3 {layer = 2 : i64} : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.lm_head %5 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %6 : tensor<?x16x64xf32>
  }
}
