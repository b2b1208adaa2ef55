// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-plan-memory))' %s -o %t.mlir
// RUN: mod-translate --modk-to-cpp %t.mlir | FileCheck %s --check-prefix=CPU
// RUN: not mod-translate --modk-to-cuda %t.mlir 2>&1 | FileCheck %s --check-prefix=CUDA

// A column window of a stacked product (modk-fuse-horizontal, a CPU
// fusion): the CPU row kernel reads it by its row stride (96), its pointer
// at the window's column; the CUDA emitter refuses any kernel that reads
// one, naming the operand, rather than reading it as contiguous rows.
// CPU: void modc_rows_0(int64_t rows, const float *in0, float *out0) {
// CPU: const auto *rin0 = in0 + i * 96;
// CPU: auto *rout0 = out0 + i * 32;
// CPU: modc_rows_0({{buf[0-9]+}}[B], ({{buf[0-9]+}} + 32), args->logits);
// CUDA: error: 'modk.rows' op reads a column window (operand 0, modk-fuse-horizontal), which CUDA kernels do not
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %tok = modk.input "tokens" : memref<?x16xi32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %s = modk.alloc : memref<?x16x96xf32>
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  %y = modk.output "logits" : memref<?x16x32xf32>
  modk.rows ins(%w : memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
}
