// A launch plan without a memory plan (modk-plan-memory has not run).
modk.entry @forward attributes {model = "{\22name\22:\22x\22,\22n_layers\22:0}", modes = ["topk"], params = [], seq_len = 16 : i64, vocab_size = 64 : i64} {
}
