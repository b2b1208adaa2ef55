// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-generalize))' | FileCheck %s
// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-generalize))' | mod-opt --verify-roundtrip | FileCheck %s --check-prefix=ROUNDTRIP

// ROUNDTRIP-COUNT-1: modk.rows
// The causal predictor of a bf16 forward entry (causal_only): fc1's product
// stays f32 (precision), both kernels keep causal_only, and the row kernel
// sums silu(h + b1) * fc2 over a row, b2 a scalar input [1], p stored once
// a row.
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.gemm %[[PX:.*]], [%[[PW1:.*]]] rows %[[PALL:.*]] -> %[[PH:.*]] {causal_only, epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>}
// CHECK-NEXT: modk.rows ins(%[[PH]], %{{.*}}, %{{.*}}, %{{.*}} : memref<?x16x8xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>) rows %[[PALL]] : memref<?x1xi64> outs(%{{.*}} : memref<?x16xf32>) access(row, column, column, scalar -> row_value) attributes {causal_only} reduce {
// CHECK-NEXT: ^bb0(%[[H:.*]]: f32, %[[B1:.*]]: f32, %[[W2:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[Z:.*]] = arith.addf %[[H]], %[[B1]] : f32
// CHECK: %[[SILU:.*]] = arith.divf %[[Z]], %{{.*}} : f32
// CHECK-NEXT: %[[TERM:.*]] = arith.mulf %[[SILU]], %[[W2]] : f32
// CHECK-NEXT: modk.yield %[[TERM]] : f32
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32, %[[B2:.*]]: f32, %[[SUM:.*]]: f32):
// CHECK-NEXT: %[[P:.*]] = arith.addf %[[SUM]], %[[B2]] : f32
// CHECK-NEXT: modk.yield %[[P]] : f32
// CHECK-NOT: modk.predictor
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "w1", shape = [8, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "b1", shape = [8], init = zeros>, #modk.param<name = "w2", shape = [1, 8], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "b2", shape = [1], init = zeros>]} {
  %w1 = modk.param "w1" : memref<8x32xf32>
  %b1 = modk.param "b1" : memref<8xf32>
  %w2 = modk.param "w2" : memref<1x8xf32>
  %b2 = modk.param "b2" : memref<1xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %h = modk.alloc : memref<?x16x8xf32>
  %p = modk.alloc : memref<?x16xf32>
  modk.predictor %x, [%w1, %b1, %w2, %b2] scratch %h -> %p {causal_only} : memref<?x16x32xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>, memref<?x16x8xf32>, memref<?x16xf32>
}
