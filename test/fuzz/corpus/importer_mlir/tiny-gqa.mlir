module {
  mod.model @"tiny-gqa" attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 1.250000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 512 : i64, d_model = 128 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<linear>, mlp = #mod.activation<swiglu>, n_heads = 8 : i64, n_kv_heads = 2 : i64, n_layers = 4 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 128 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 256 : i64, tie_embeddings = true, vocab_size = 256 : i64} {
    %0 = mod.tokens : tensor<?x256xi32>
    %1 = mod.embed %0 : (tensor<?x256xi32>) -> tensor<?x256x128xf32>
    %2 = mod.block %1 {layer = 0 : i64} : tensor<?x256x128xf32>
    %3 = mod.block %2 {layer = 1 : i64} : tensor<?x256x128xf32>
    %4 = mod.block %3 {layer = 2 : i64} : tensor<?x256x128xf32>
    %5 = mod.block %4 {layer = 3 : i64} : tensor<?x256x128xf32>
    %6 = mod.rmsnorm %5 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x256x128xf32>
    %7 = mod.lm_head %6 {param = "embed.weight"} : (tensor<?x256x128xf32>) -> tensor<?x256x256xf32>
    mod.return %7 : tensor<?x256x256xf32>
  }
}
