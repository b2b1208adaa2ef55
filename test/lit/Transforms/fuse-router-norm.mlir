// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-router-norm))' | FileCheck %s
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-router-norm{enabled=false}))' | FileCheck %s --check-prefix=OFF
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-router-norm,modk-generalize))' | FileCheck %s --check-prefix=ROWS

// Fused: the routed layer's router pass gets a stats buffer, one f32 a
// token like its scores.
// CHECK-LABEL: modk.entry @routed
// (the entry's two such buffers, p and r, then the new one)
// CHECK-COUNT-3: = modk.alloc : memref<?x16xf32>
// CHECK-NEXT: modk.route_select_gather {{.*}} -> {{.*}}, %{{.*}} stats(%{{.*}}) {causal_router
// Switched off: nothing changes.
// OFF-LABEL: modk.entry @routed
// OFF-NOT: stats(
// OFF: modk.route_select_gather
// OFF-NOT: stats(
// Generalized: one kernel over every token of the stream (an identity row
// set) with two sums a row, w . x and x^2, storing r and the token's scale
// once a row; the selection from r; a gather with no sums.
// ROWS-LABEL: modk.entry @routed
// ROWS: modk.identity_rows -> %{{.*}}, %[[ALL:.*]] : memref<?x16xi32>, memref<?x1xi64>
// ROWS-NEXT: modk.rows ins(%[[X:.*]], %[[RW:.*]] : memref<?x16x32xf32>, memref<1x32xf32>) rows %[[ALL]] : memref<?x1xi64> outs(%[[R:.*]], %[[S:.*]] : memref<?x16xf32>, memref<?x16xf32>) access(row, column -> row_value, row_value) reduce {
// ROWS-NEXT: ^bb0(%[[A0:.*]]: f32, %[[A1:.*]]: f32):
// ROWS-NEXT: %[[XW:.*]] = arith.mulf %[[A0]], %[[A1]] : f32
// ROWS-NEXT: %[[XX:.*]] = arith.mulf %[[A0]], %[[A0]] : f32
// ROWS-NEXT: modk.yield %[[XW]], %[[XX]] : f32, f32
// ROWS-NEXT: } body {
// ROWS-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %[[SUMR:.*]]: f32, %[[SUMSQ:.*]]: f32):
// ROWS: math.sqrt
// ROWS: %[[SCALE:.*]] = arith.divf
// ROWS-NEXT: modk.yield %[[SUMR]], %[[SCALE]] : f32, f32
// ROWS: modk.route_select %[[R]] causal(%{{.*}}) -> %[[POS:.*]], %[[SEG:.*]], %{{.*}} {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64}
// ROWS-NEXT: modk.rows ins(%[[X]], %[[S]], %{{.*}} : memref<?x16x32xf32>, memref<?x16xf32>, memref<32xf32>) rows %[[SEG]] : memref<?x1xi64> tokens(%[[POS]] : memref<?x16xi32>) outs(%{{.*}}, %{{.*}} : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, token_value, column -> row, row) reduce {
// ROWS-NEXT: ^bb0
// ROWS-NEXT: modk.yield
// ROWS-NEXT: } body {
// ROWS-NEXT: ^bb0(%[[GX:.*]]: f32, %[[GS:.*]]: f32, %[[GW:.*]]: f32):
// ROWS-NEXT: %[[T:.*]] = arith.mulf %[[GX]], %[[GS]] : f32
// ROWS-NEXT: %[[N:.*]] = arith.mulf %[[T]], %[[GW]] : f32
// ROWS-NEXT: modk.yield %[[GX]], %[[N]] : f32, f32
modk.entry @routed attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "down.weight", shape = [32, 64], init = normal, std = 2.000000e-02 : f64>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %wd = modk.param "down.weight" : memref<32x64xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %p = modk.alloc : memref<?x16xf32>
  %r = modk.alloc : memref<?x16xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %xs = modk.alloc : memref<?x16x32xf32>
  %xn = modk.alloc : memref<?x16x32xf32>
  %mask = modk.alloc : memref<?x16xi32>
  %h = modk.alloc : memref<?x16x64xf32>
  %m = modk.alloc : memref<?x16x32xf32>
  %a = modk.alloc : memref<?x16x32xf32>
  modk.route_select_gather %x, %rw, %nw causal(%p) -> %r, %pos, %seg, %xs, %xn, %mask {causal_router = #modk.causal_router<predictor>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64} : memref<?x16x32xf32>, memref<1x32xf32>, memref<32xf32>, memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>
}

// -----

// Not fused: a decode step's router and norm both read only the one token
// of each sequence; nothing would be shared.
// CHECK-LABEL: modk.entry @decode
// CHECK-NOT: stats(
// CHECK: modk.decode_route
modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<causal>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "down.weight", shape = [32, 64], init = normal, std = 2.000000e-02 : f64>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %wd = modk.param "down.weight" : memref<32x64xf32>
  %x = modk.alloc : memref<?x1x32xf32>
  %step = modk.alloc : memref<?x1xi32>
  %active = modk.alloc : memref<?x1xi8>
  %r = modk.alloc : memref<?x1xf32>
  %pos = modk.alloc : memref<?x1xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %xs = modk.alloc : memref<?x1x32xf32>
  %xn = modk.alloc : memref<?x1x32xf32>
  %mask = modk.alloc : memref<?x1xi32>
  %h = modk.alloc : memref<?x1x64xf32>
  %m = modk.alloc : memref<?x1x32xf32>
  %a = modk.alloc : memref<?x1x32xf32>
  modk.decode_route(%x, %rw, %nw, %step, %active, %r, %pos, %seg, %xs, %xn, %mask) {causal_router = #modk.causal_router<aux_loss>, eps = 1.000000e-05 : f64, layer = 1 : i64} : memref<?x1x32xf32>, memref<1x32xf32>, memref<32xf32>, memref<?x1xi32>, memref<?x1xi8>, memref<?x1xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1x32xf32>, memref<?x1x32xf32>, memref<?x1xi32>
}
