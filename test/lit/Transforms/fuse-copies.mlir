// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-generalize,modk-fuse-copies))' | FileCheck %s
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-generalize,modk-fuse-copies{enabled=false}))' | FileCheck %s --check-prefix=OFF

// Fused: the RMSNorm (a row kernel over every row) is the last writer of
// %y; a product that touches neither buffer runs in between. The rounding
// copy into bf16 (a row kernel by modk-generalize) and the plain f32 copy
// become outputs of the RMSNorm's kernel, which yields its element for
// each; no copy is left.
// CHECK-LABEL: modk.entry @fused
// CHECK: %[[YB:.*]] = modk.alloc : memref<?x16x32xbf16>
// CHECK-NEXT: %[[YC:.*]] = modk.alloc : memref<?x16x32xf32>
// CHECK-NEXT: modk.rows ins(%[[X:.*]], %{{.*}} : memref<?x16x32xf32>, memref<32xf32>) rows %[[ALL:.*]] : memref<?x1xi64> outs(%[[Y:.*]], %[[YB]], %[[YC]] : memref<?x16x32xf32>, memref<?x16x32xbf16>, memref<?x16x32xf32>) access(row, column -> row, row, row) reduce {
// CHECK: body {
// CHECK: math.sqrt
// CHECK: modk.yield %[[E:.*]], %[[E]], %[[E]] : f32, f32, f32
// CHECK: modk.gemm %[[X]]
// CHECK-NOT: modk.copy
// CHECK-NOT: modk.rows
// CHECK: modk.gemm %[[YB]]
// Switched off: the copy into bf16 is a row kernel of its own, the f32
// copy a copy.
// OFF-LABEL: modk.entry @fused
// OFF: outs(%[[Y:.*]] : memref<?x16x32xf32>)
// OFF: modk.gemm
// OFF: modk.rows ins(%[[Y]] : memref<?x16x32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}} : memref<?x16x32xbf16>) access(row -> row) reduce {
// OFF: modk.copy(%[[Y]], %{{.*}}) : memref<?x16x32xf32>, memref<?x16x32xf32>
modk.entry @fused attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "q.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w = modk.param "norm.weight" : memref<32xf32>
  %wq = modk.param "q.weight" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %y = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %all -> %y {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %x, [%wq] rows %all -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %yb = modk.alloc : memref<?x16x32xbf16>
  modk.copy(%y, %yb) : memref<?x16x32xf32>, memref<?x16x32xbf16>
  %yc = modk.alloc : memref<?x16x32xf32>
  modk.copy(%y, %yc) : memref<?x16x32xf32>, memref<?x16x32xf32>
  %z = modk.alloc : memref<?x16x32xf32>
  modk.gemm %yb, [%wq] rows %all -> %z {epilogue = #modk.epilogue<none>} : memref<?x16x32xbf16>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// Not fused: a product writes the source after the row kernel (its last
// writer is a GEMM); the copy into bf16 stays a row kernel of its own.
// CHECK-LABEL: modk.entry @gemm_writes_source
// CHECK: outs(%[[Y:.*]] : memref<?x16x32xf32>)
// CHECK: modk.gemm %{{.*}}, [%{{.*}}] rows %{{.*}} -> %[[Y]]
// CHECK-NEXT: %[[YB:.*]] = modk.alloc : memref<?x16x32xbf16>
// CHECK-NEXT: modk.rows ins(%[[Y]] : memref<?x16x32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%[[YB]] : memref<?x16x32xbf16>) access(row -> row)
modk.entry @gemm_writes_source attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "q.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w = modk.param "norm.weight" : memref<32xf32>
  %wq = modk.param "q.weight" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %y = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %all -> %y {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm %x, [%wq] rows %all -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %yb = modk.alloc : memref<?x16x32xbf16>
  modk.copy(%y, %yb) : memref<?x16x32xf32>, memref<?x16x32xbf16>
}

// -----

// Not fused: the last writer runs over a routed row set (it writes only
// the selected rows), and the copy's destination is read before the copy.
// CHECK-LABEL: modk.entry @not_every_row
// CHECK: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x16x32xf32>, memref<32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}} : memref<?x16x32xf32>) access(row, column -> row) reduce
// CHECK: modk.copy(%{{.*}}, %{{.*}}) : memref<?x16x32xf32>, memref<?x16x32xf32>
// CHECK: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x16x32xf32>, memref<32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}} : memref<?x16x32xf32>) access(row, column -> row) reduce
// CHECK: modk.zero
// CHECK-NEXT: modk.copy
modk.entry @not_every_row attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm.weight", shape = [32], init = ones>]} {
  %w = modk.param "norm.weight" : memref<32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x16xi32>, memref<?x1xi64>
  %routed = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %y = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %routed -> %y {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %yc = modk.alloc : memref<?x16x32xf32>
  modk.copy(%y, %yc) : memref<?x16x32xf32>, memref<?x16x32xf32>
  %u = modk.alloc : memref<?x16x32xf32>
  %uc = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %all -> %u {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.zero(%uc) : memref<?x16x32xf32>
  modk.copy(%u, %uc) : memref<?x16x32xf32>, memref<?x16x32xf32>
}
