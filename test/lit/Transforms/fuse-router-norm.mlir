// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-router-norm))' | FileCheck %s
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-router-norm{enabled=false}))' | FileCheck %s --check-prefix=OFF

// A routed layer as the lowering writes it: the router over every token
// (the identity row set), the selection, and the gather + RMSNorm at the
// selected tokens, whose one sum (x^2) reads only the stream. Fused: the
// router's kernel sums x^2 too and stores it once a row in a new [B, S]
// buffer; the gather reads it at its token and sums nothing.
// CHECK-LABEL: modk.entry @routed
// CHECK: modk.identity_rows
// CHECK-NEXT: %[[R:.*]] = modk.alloc : memref<?x16xf32>
// CHECK-NEXT: %[[S:.*]] = modk.alloc : memref<?x16xf32>
// CHECK-NEXT: modk.rows ins(%[[X:.*]], %[[RW:.*]] : memref<?x16x32xf32>, memref<1x32xf32>) rows %[[ALL:.*]] : memref<?x1xi64> outs(%[[R]], %[[S]] : memref<?x16xf32>, memref<?x16xf32>) access(row, column -> row_value, row_value) reduce {
// CHECK-NEXT: ^bb0(%[[A0:.*]]: f32, %[[A1:.*]]: f32):
// CHECK-NEXT: %[[XW:.*]] = arith.mulf %[[A0]], %[[A1]] : f32
// CHECK-NEXT: %[[XX:.*]] = arith.mulf %[[A0]], %[[A0]] : f32
// CHECK-NEXT: modk.yield %[[XW]], %[[XX]] : f32, f32
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %[[SUMR:.*]]: f32, %[[SUMSQ:.*]]: f32):
// CHECK-NEXT: modk.yield %[[SUMR]], %[[SUMSQ]] : f32, f32
// CHECK: modk.route_select %[[R]] causal(%{{.*}}) -> %[[POS:.*]], %[[SEG:.*]], %{{.*}} {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64}
// CHECK: modk.rows ins(%[[X]], %{{.*}}, %[[S]] : memref<?x16x32xf32>, memref<32xf32>, memref<?x16xf32>) rows %[[SEG]] : memref<?x1xi64> tokens(%[[POS]] : memref<?x16xi32>) outs(%{{.*}}, %{{.*}} : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column, token_value -> row, row) reduce {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: modk.yield
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%[[GX:.*]]: f32, %[[GW:.*]]: f32, %[[GS:.*]]: f32):
// CHECK: arith.divf %[[GS]]
// CHECK: math.sqrt
// CHECK: %[[T:.*]] = arith.mulf %[[GX]], %{{.*}} : f32
// CHECK-NEXT: %[[N:.*]] = arith.mulf %[[T]], %[[GW]] : f32
// CHECK-NEXT: modk.yield %[[GX]], %[[N]] : f32, f32
// Switched off: nothing changes.
// OFF-LABEL: modk.entry @routed
// OFF: access(row, column -> row_value)
// OFF: access(token, column -> row, row)
// OFF-NOT: token_value
modk.entry @routed attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %p = modk.alloc : memref<?x16xf32>
  %ipos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos, %all : memref<?x16xi32>, memref<?x1xi64>
  %r = modk.alloc : memref<?x16xf32>
  modk.rows ins(%x, %rw : memref<?x16x32xf32>, memref<1x32xf32>) rows %all : memref<?x1xi64> outs(%r : memref<?x16xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %xw = arith.mulf %a0, %a1 : f32
    modk.yield %xw : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %s: f32):
    modk.yield %s : f32
  }
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  modk.route_select %r causal(%p) -> %pos, %seg, %mask {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
  %xs = modk.alloc : memref<?x16x32xf32>
  %xn = modk.alloc : memref<?x16x32xf32>
  modk.rows ins(%x, %nw : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%xs, %xn : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column -> row, row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a0 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %ss: f32):
    %eps = arith.constant 1.000000e-05 : f32
    %width = arith.constant 3.200000e+01 : f32
    %mean = arith.divf %ss, %width : f32
    %var = arith.addf %mean, %eps : f32
    %root = math.sqrt %var : f32
    %one = arith.constant 1.000000e+00 : f32
    %scale = arith.divf %one, %root : f32
    %t = arith.mulf %b0, %scale : f32
    %n = arith.mulf %t, %b1 : f32
    modk.yield %b0, %n : f32, f32
  }
}

// -----

// A decode step: the router over every sequence's token (an identity row
// set of one token a sequence), the gather over the routed ones with no
// positions. The same fusion: the gather reads each sequence's sum.
// CHECK-LABEL: modk.entry @decode
// CHECK: access(row, column -> row_value, row_value)
// CHECK: modk.decode_select
// CHECK: modk.rows ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<?x1x32xf32>, memref<32xf32>, memref<?x1xf32>) rows %{{.*}} : memref<?x1xi64> outs({{.*}}) access(token, column, token_value -> row, row)
modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<causal>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %x = modk.alloc : memref<?x1x32xf32>
  %step = modk.alloc : memref<?x1xi32>
  %active = modk.alloc : memref<?x1xi8>
  %ipos = modk.alloc : memref<?x1xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos, %all : memref<?x1xi32>, memref<?x1xi64>
  %r = modk.alloc : memref<?x1xf32>
  modk.rows ins(%x, %rw : memref<?x1x32xf32>, memref<1x32xf32>) rows %all : memref<?x1xi64> outs(%r : memref<?x1xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %xw = arith.mulf %a0, %a1 : f32
    modk.yield %xw : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %s: f32):
    modk.yield %s : f32
  }
  %pos = modk.alloc : memref<?x1xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x1xi32>
  modk.decode_select(%r, %step, %active, %pos, %seg, %mask) {causal_router = #modk.causal_router<aux_loss>, layer = 1 : i64} : memref<?x1xf32>, memref<?x1xi32>, memref<?x1xi8>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi32>
  %xs = modk.alloc : memref<?x1x32xf32>
  %xn = modk.alloc : memref<?x1x32xf32>
  modk.rows ins(%x, %nw : memref<?x1x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> outs(%xs, %xn : memref<?x1x32xf32>, memref<?x1x32xf32>) access(token, column -> row, row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a0 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %ss: f32):
    %one = arith.constant 1.000000e+00 : f32
    %root = math.sqrt %ss : f32
    %scale = arith.divf %one, %root : f32
    %n = arith.mulf %b0, %scale : f32
    modk.yield %b0, %n : f32, f32
  }
}

// -----

// Not fused:
//  - the stream is written between the two kernels (the sums would be of
//    other values);
//  - the sums read another input than the token one (the norm weight);
//  - the earlier kernel is not over every row (a routed row set).
// CHECK-LABEL: modk.entry @unfused
// CHECK-NOT: token_value
// CHECK-NOT: row_value, row_value
modk.entry @unfused attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %ipos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos, %all : memref<?x16xi32>, memref<?x1xi64>
  %r = modk.alloc : memref<?x16xf32>
  modk.rows ins(%x, %rw : memref<?x16x32xf32>, memref<1x32xf32>) rows %all : memref<?x1xi64> outs(%r : memref<?x16xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %xw = arith.mulf %a0, %a1 : f32
    modk.yield %xw : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %s: f32):
    modk.yield %s : f32
  }
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.zero(%x) : memref<?x16x32xf32>
  %xs = modk.alloc : memref<?x4x32xf32>
  %xn = modk.alloc : memref<?x4x32xf32>
  modk.rows ins(%x, %nw : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs, %xn : memref<?x4x32xf32>, memref<?x4x32xf32>) access(token, column -> row, row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a0 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %ss: f32):
    %n = arith.mulf %b0, %ss : f32
    modk.yield %b0, %n : f32, f32
  }
  modk.rows ins(%x, %nw : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs : memref<?x4x32xf32>) access(token, column -> row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a1 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %ss: f32):
    %n = arith.mulf %b0, %ss : f32
    modk.yield %n : f32
  }
  %r4 = modk.alloc : memref<?x4xf32>
  modk.rows ins(%xs, %rw : memref<?x4x32xf32>, memref<1x32xf32>) rows %seg : memref<?x1xi64> outs(%r4 : memref<?x4xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %xw = arith.mulf %a0, %a1 : f32
    modk.yield %xw : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %s: f32):
    modk.yield %s : f32
  }
}
