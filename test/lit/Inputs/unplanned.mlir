// A launch plan without a memory plan (modk-plan-memory has not run).
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "x", vocab_size = 64, d_model = 32, n_layers = 0, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
}
