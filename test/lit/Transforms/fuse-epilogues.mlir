// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-epilogues))' | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-epilogues{residual-add=false activation=false}))' | FileCheck %s --check-prefix=OFF

// A dense block: the O-projection's rows are read only by the residual add,
// which becomes its epilogue, in place on the stream; the rows' buffer goes.
// The MLP's gate and up projections are read only by the activation: one
// GEMM with the swiglu epilogue (the gate rows stay as its scratch).
// CHECK-LABEL: modk.entry @forward
// CHECK-NOT: modk.alloc : memref<?x16x64xf32>{{$}}
// CHECK: modk.gemm %[[O:.*]], [%[[WO:.*]]] rows %[[SEG:.*]] extra(%[[X:.*]]) -> %[[X]] {epilogue = #modk.epilogue<residual_add>}
// CHECK-NOT: modk.add
// CHECK: modk.gemm %[[N:.*]], [%[[WG:.*]], %[[WU:.*]]] rows %[[SEG]] extra(%[[G:.*]]) -> %[[H:.*]] {epilogue = #modk.epilogue<swiglu>}
// CHECK-NOT: modk.activation
// CHECK: modk.gemm %[[H]], [%{{.*}}] rows %[[SEG]] extra(%[[X]]) -> %[[X]] {epilogue = #modk.epilogue<residual_add>}
// With both fusions off, the plan is left as it was.
// OFF-LABEL: modk.entry @forward
// OFF: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>}
// OFF-NEXT: modk.add
// OFF: modk.activation
// OFF: modk.add
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wo", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wg", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wu", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wd", shape = [32, 64], init = normal, std = 2.000000e-02 : f64>]} {
  %wo = modk.param "wo" : memref<32x32xf32>
  %wg = modk.param "wg" : memref<64x32xf32>
  %wu = modk.param "wu" : memref<64x32xf32>
  %wd = modk.param "wd" : memref<32x64xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  %n = modk.alloc : memref<?x16x32xf32>
  %a = modk.alloc : memref<?x16x32xf32>
  modk.gemm %o, [%wo] rows %seg -> %a {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.add %x, %a rows %seg -> %x : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %g = modk.alloc : memref<?x16x64xf32>
  %u = modk.alloc : memref<?x16x64xf32>
  %h = modk.alloc : memref<?x16x64xf32>
  modk.gemm %n, [%wg] rows %seg -> %g {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  modk.gemm %n, [%wu] rows %seg -> %u {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  modk.activation(%g, %u, %seg, %h) {kind = #modk.activation<swiglu>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  %m = modk.alloc : memref<?x16x32xf32>
  modk.gemm %h, [%wd] rows %seg -> %m {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.add %x, %m rows %seg -> %x : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// Not fused: values with a second reader. A routed block's attention rows
// are added to its gathered rows and also read by the gated scatter (here a
// later add stands for it), so they must be stored. Training's
// pre-activations are read again by the activation's gradient. A gelu with
// a plain GEMM before it, read only by it, is fused.
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.gemm %{{.*}}, [%{{.*}}] rows %{{.*}} -> %[[A:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.add %[[XS:.*]], %[[A]] rows
// CHECK: modk.add %{{.*}}, %[[A]] rows
// CHECK: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.activation(%[[GP:.*]], %[[UP:.*]], %{{.*}}, %{{.*}}) {kind = #modk.activation<swiglu>}
// CHECK: modk.activation_grad(%[[GP]], %[[UP]],
// CHECK: modk.gemm %{{.*}}, [%{{.*}}] rows %{{.*}} -> %{{.*}} {epilogue = #modk.epilogue<gelu>}
// CHECK-NOT: modk.activation(
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wo", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wg", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wu", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wo = modk.param "wo" : memref<32x32xf32>
  %wg = modk.param "wg" : memref<64x32xf32>
  %wu = modk.param "wu" : memref<64x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %xs = modk.alloc : memref<?x4x32xf32>
  %y = modk.alloc : memref<?x4x32xf32>
  %o = modk.alloc : memref<?x4x32xf32>
  %a = modk.alloc : memref<?x4x32xf32>
  modk.gemm %o, [%wo] rows %seg -> %a {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.add %xs, %a rows %seg -> %xs : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.add %y, %a rows %seg -> %y : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  %g = modk.alloc : memref<?x4x64xf32>
  %u = modk.alloc : memref<?x4x64xf32>
  %h = modk.alloc : memref<?x4x64xf32>
  %dh = modk.alloc : memref<?x4x64xf32>
  %dg = modk.alloc : memref<?x4x64xf32>
  %du = modk.alloc : memref<?x4x64xf32>
  modk.gemm %xs, [%wg] rows %seg -> %g {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.gemm %xs, [%wu] rows %seg -> %u {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.activation(%g, %u, %seg, %h) {kind = #modk.activation<swiglu>} : memref<?x4x64xf32>, memref<?x4x64xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.activation_grad(%g, %u, %dh, %seg, %dg, %du) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x4x64xf32>, memref<?x4x64xf32>, memref<?x4x64xf32>, memref<?x1xi64>, memref<?x4x64xf32>, memref<?x4x64xf32>
  %p = modk.alloc : memref<?x4x64xf32>
  %q = modk.alloc : memref<?x4x64xf32>
  modk.gemm %xs, [%wu] rows %seg -> %p {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.activation(%p, %seg, %q) {kind = #modk.activation<gelu>} : memref<?x4x64xf32>, memref<?x1xi64>, memref<?x4x64xf32>
}
