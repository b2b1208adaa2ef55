// Two entries of one kind (a planned @forward and a planned @step that is
// also a forward entry): a package has one entry of each kind.
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "x", vocab_size = 64, d_model = 32, n_layers = 0, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [], workspace_bytes_per_sequence = 0 : i64} {
}
modk.entry @step attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "x", vocab_size = 64, d_model = 32, n_layers = 0, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [], workspace_bytes_per_sequence = 0 : i64} {
}
