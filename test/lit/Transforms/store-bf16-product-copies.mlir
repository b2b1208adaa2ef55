// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-store-bf16{product-copies=true}))' | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-store-bf16))' | FileCheck %s --check-prefix=OFF

// modk-store-bf16's product-copies (CUDA targets): a gradient that the
// backward products read and other kernels also read or update stays f32,
// and the products read a bf16 copy of it, one copy for each write: a copy
// before the first product after the write, read until the next write. A
// product that reads the buffer before any write, or an operand nothing
// writes in the entry (%x), is left alone.
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.gemm_dgrad(%[[DF:[0-9]+]], {{.*}} : memref<?x16x32xf32>,
// CHECK-NEXT: modk.add {{.*}} -> %[[DF]]
// CHECK-NEXT: %[[C1:[0-9]+]] = modk.alloc : memref<?x16x32xbf16>
// CHECK-NEXT: modk.copy(%[[DF]], %[[C1]]) : memref<?x16x32xf32>, memref<?x16x32xbf16>
// CHECK-NEXT: modk.gemm_dgrad(%[[C1]], {{.*}} : memref<?x16x32xbf16>,
// CHECK-NEXT: modk.gemm_wgrad(%[[C1]], %[[X:[0-9]+]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xf32>,
// CHECK-NEXT: modk.add %[[DF]], %[[X]] rows %{{[0-9]+}} -> %[[DF]]
// CHECK-NEXT: %[[C2:[0-9]+]] = modk.alloc : memref<?x16x32xbf16>
// CHECK-NEXT: modk.copy(%[[DF]], %[[C2]])
// CHECK-NEXT: modk.gemm_wgrad(%[[C2]], %[[X]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xf32>,
// Without the option: no copies.
// OFF-LABEL: modk.entry @grad
// OFF-NOT: modk.copy
// OFF-NOT: xbf16
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32, 32], init = ones>]} {
  %w = modk.param "w" : memref<32x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %df = modk.alloc : memref<?x16x32xf32>
  %dx = modk.alloc : memref<?x16x32xf32>
  %dw = modk.output "grad.w" : memref<32x32xf32>
  modk.gemm_dgrad(%df, %w, %seg, %dx) {accumulate = false} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.add %x, %x rows %seg -> %df : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm_dgrad(%df, %w, %seg, %dx) {accumulate = false} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm_wgrad(%df, %x, %seg, %dw) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  modk.add %df, %x rows %seg -> %df : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm_wgrad(%df, %x, %seg, %dw) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
}

// -----

// An f32 model rounds nothing: no copies.
// CHECK-LABEL: modk.entry @grad_f32
// CHECK-NOT: modk.copy
// CHECK-NOT: xbf16
modk.entry @grad_f32 attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32, 32], init = ones>]} {
  %w = modk.param "w" : memref<32x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %df = modk.alloc : memref<?x16x32xf32>
  %dw = modk.output "grad.w" : memref<32x32xf32>
  modk.add %x, %x rows %seg -> %df : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm_wgrad(%df, %x, %seg, %dw) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  modk.add %df, %x rows %seg -> %df : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}
