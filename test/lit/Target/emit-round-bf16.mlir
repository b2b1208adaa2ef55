// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-plan-memory))' %s | not mod-translate --modk-to-cpp 2>&1 | FileCheck %s --check-prefix=NAMED
// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-plan-memory,modk-configure-gemms))' %s | not mod-translate --modk-to-cuda 2>&1 | FileCheck %s --check-prefix=NAMED
// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-generalize,modk-plan-memory))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=CPU
// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-generalize,modk-plan-memory,modk-configure-gemms))' %s | mod-translate --modk-to-cuda | FileCheck %s --check-prefix=CUDA

// A bf16 entry's values (modk-store-bf16 marks their product `round_bf16`)
// are rounded by the IR: modk-generalize writes the rounding as the
// product's `rows` epilogue (arith.truncf to bf16 and back), which the
// emitters generate. No emitter rounds by the attribute's name: given the
// plan without generalize, both refuse it.
// NAMED: error: 'modk.gemm' op rounds its output to bf16: modk-generalize writes that rounding as a `rows` epilogue; run it before emitting

// On the CPU, sgemm into the staged product, then the generated kernel.
// CPU:      void modc_rows_[[K:[0-9]+]](int64_t rows, const float *in0, float *out0) {
// CPU:      const float [[T:t[0-9]+]] = modk_cpu::bf16_round(x0);
// CPU-NEXT: const float [[E:t[0-9]+]] = [[T]];
// CPU-NEXT: rout0[c] = [[E]];
// CPU:      modk_cpu::linear<32, 32, 1>({{buf[0-9]+}}, rows, w0, product);
// CPU-NEXT: modc_rows_[[K]]({{.*}}, product, {{buf[0-9]+}});
// CPU-NOT:  round_bf16

// On CUDA, the tile calls the generated epilogue on each element in registers.
// CUDA:      template <> struct RowsEpilogue<[[K:[0-9]+]]> {
// CUDA:      const float [[T:t[0-9]+]] = modk_cuda::detail::bf16Round(acc);
// CUDA:      modk_cuda::linear_rows_epilogue<32, 32, [[K]], 1, gemm_plan_{{[0-9]+}}>(
// CUDA-NOT:  round_bf16
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "x", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wv", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wv = modk.param "wv" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  modk.gemm %x, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>, round_bf16} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}
