// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fold-zero-fills))' | FileCheck %s
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fold-zero-fills{enabled=false}))' | FileCheck %s --check-prefix=OFF

// Folded: the first op after the fill that touches the weight gradient is
// its product (a product on other buffers runs in between), which now
// writes it. A second product into the same gradient (a tied weight's)
// still adds.
// CHECK-LABEL: modk.entry @folded
// CHECK-NOT: modk.zero
// CHECK: modk.gemm %
// CHECK-NEXT: modk.gemm_wgrad(%[[DY:.*]], %[[A:.*]], %[[ALL:.*]], %[[DW:.*]]) {overwrite} :
// CHECK-NEXT: modk.gemm_wgrad(%[[DY]], %[[A]], %[[ALL]], %[[DW]]) :
// The other gradient is read by a copy before its product: its fill stays.
// CHECK-NEXT: modk.zero(%[[DW2:.*]]) : memref<32x32xf32>
// CHECK-NEXT: modk.copy(%[[DW2]]
// CHECK-NEXT: modk.gemm_wgrad(%[[DY]], %[[A]], %[[ALL]], %[[DW2]]) :
// OFF-LABEL: modk.entry @folded
// OFF: modk.zero(%[[DW:.*]]) : memref<32x32xf32>
// OFF-NOT: overwrite
modk.entry @folded attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "q.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wq = modk.param "q.weight" : memref<32x32xf32>
  %dw = modk.output "grad.q.weight" : memref<32x32xf32>
  %dw2 = modk.output "grad.k.weight" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x16xi32>, memref<?x1xi64>
  %a = modk.alloc : memref<?x16x32xf32>
  %dy = modk.alloc : memref<?x16x32xf32>
  %seen = modk.output "seen" : memref<32x32xf32>
  modk.zero(%dw) : memref<32x32xf32>
  modk.gemm %a, [%wq] rows %all -> %dy {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm_wgrad(%dy, %a, %all, %dw) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  modk.gemm_wgrad(%dy, %a, %all, %dw) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  modk.zero(%dw2) : memref<32x32xf32>
  modk.copy(%dw2, %seen) : memref<32x32xf32>, memref<32x32xf32>
  modk.gemm_wgrad(%dy, %a, %all, %dw2) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
}

// -----

// Not folded: the first op after the fill is an input gradient that adds
// into the buffer, not a weight gradient product.
// CHECK-LABEL: modk.entry @not_a_wgrad
// CHECK: modk.zero(%[[DA:.*]]) : memref<?x16x32xf32>
// CHECK-NEXT: modk.gemm_dgrad
// CHECK-NOT: overwrite
modk.entry @not_a_wgrad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "q.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wq = modk.param "q.weight" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x16xi32>, memref<?x1xi64>
  %dy = modk.alloc : memref<?x16x32xf32>
  %da = modk.alloc : memref<?x16x32xf32>
  modk.zero(%da) : memref<?x16x32xf32>
  modk.gemm_dgrad(%dy, %wq, %all, %da) {accumulate = true} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}
