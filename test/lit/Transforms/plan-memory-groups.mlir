// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-plan-memory))' | FileCheck %s

// modk-plan-memory with groups (modk-group-gemms): the members of a group
// run as one launch, so a buffer the first member reads last and one the
// second member writes first are live at once and never share memory.
// Without the group the second takes the first's place.
// CHECK-LABEL: modk.entry @grouped
// CHECK: %[[A:.*]] = modk.alloc {offset = [[OA:[0-9]+]] : i64} : memref<?x6x32xf32>
// CHECK-NOT: offset = [[OA]] :
// CHECK: modk.rows ins(%[[A]] :
// CHECK-LABEL: modk.entry @apart
// CHECK: %[[A:.*]] = modk.alloc {offset = [[OA:[0-9]+]] : i64} : memref<?x6x32xf32>
// CHECK: %[[B:.*]] = modk.alloc {offset = [[OA]] : i64} : memref<?x6x32xf32>
// CHECK: modk.rows ins(%[[A]] :
// CHECK: outs(%[[B]] :
modk.entry @grouped attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %p0 = modk.alloc : memref<?x6xi32>
  %p1 = modk.alloc : memref<?x6xi32>
  modk.identity_rows -> %p0, %s0 : memref<?x6xi32>, memref<?x1xi64>
  modk.identity_rows -> %p1, %s1 : memref<?x6xi32>, memref<?x1xi64>
  %a = modk.alloc : memref<?x6x32xf32>
  %x1 = modk.alloc : memref<?x6x32xf32>
  modk.zero(%a) : memref<?x6x32xf32>
  modk.zero(%x1) : memref<?x6x32xf32>
  %h0 = modk.alloc : memref<?x6x32xf32>
  %b = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%a : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%h0 : memref<?x6x32xf32>) access(row -> row) attributes {group = 0 : i64} reduce {
  ^bb0(%v: f32):
    modk.yield
  } body {
  ^bb0(%v: f32):
    %n = arith.negf %v : f32
    modk.yield %n : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%b : memref<?x6x32xf32>) access(row -> row) attributes {group = 0 : i64} reduce {
  ^bb0(%v: f32):
    modk.yield
  } body {
  ^bb0(%v: f32):
    %n = arith.negf %v : f32
    modk.yield %n : f32
  }
  modk.copy(%h0, %b) : memref<?x6x32xf32>, memref<?x6x32xf32>
}

// -----

modk.entry @apart attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %p0 = modk.alloc : memref<?x6xi32>
  %p1 = modk.alloc : memref<?x6xi32>
  modk.identity_rows -> %p0, %s0 : memref<?x6xi32>, memref<?x1xi64>
  modk.identity_rows -> %p1, %s1 : memref<?x6xi32>, memref<?x1xi64>
  %a = modk.alloc : memref<?x6x32xf32>
  %x1 = modk.alloc : memref<?x6x32xf32>
  modk.zero(%a) : memref<?x6x32xf32>
  modk.zero(%x1) : memref<?x6x32xf32>
  %h0 = modk.alloc : memref<?x6x32xf32>
  %b = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%a : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%h0 : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%v: f32):
    modk.yield
  } body {
  ^bb0(%v: f32):
    %n = arith.negf %v : f32
    modk.yield %n : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%b : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%v: f32):
    modk.yield
  } body {
  ^bb0(%v: f32):
    %n = arith.negf %v : f32
    modk.yield %n : f32
  }
  modk.copy(%h0, %b) : memref<?x6x32xf32>, memref<?x6x32xf32>
}
