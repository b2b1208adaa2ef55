// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-generalize,modk-fuse-select-gather))' | FileCheck %s
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-generalize,modk-fuse-select-gather{enabled=false}))' | FileCheck %s --check-prefix=OFF

// Fused: the gather + RMSNorm of the selected rows (generalized from
// route_select_gather: a modk.rows over the rows and positions the
// selection writes, right after it) moves into the selection's `gather`
// region; nothing of it is left after the selection.
// CHECK-LABEL: modk.entry @routed
// CHECK: modk.route_select %[[R:.*]] causal(%{{.*}}) -> %[[POS:.*]], %[[SEG:.*]], %[[MASK:.*]] {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : {{.*}} gather {
// CHECK-NEXT: modk.rows ins(%[[X:.*]], %{{.*}} : memref<?x16x32xf32>, memref<32xf32>) rows %[[SEG]] : memref<?x1xi64> tokens(%[[POS]] : memref<?x16xi32>) outs(%{{.*}}, %{{.*}} : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column -> row, row) reduce {
// CHECK: math.sqrt
// CHECK: modk.yield
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NOT: tokens(%[[POS]]
// CHECK: modk.gemm
// Switched off: the gather stays a kernel of its own.
// OFF-LABEL: modk.entry @routed
// OFF-NOT: gather {
// OFF: modk.route_select %{{.*}} causal(%{{.*}}) -> %[[POS:.*]], %[[SEG:.*]], %{{.*}} {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>{{$}}
// OFF-NEXT: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x16x32xf32>, memref<32xf32>) rows %[[SEG]] : memref<?x1xi64> tokens(%[[POS]] : memref<?x16xi32>)
// OFF-NOT: gather {
modk.entry @routed attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "q.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %wq = modk.param "q.weight" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %p = modk.alloc : memref<?x16xf32>
  %r = modk.alloc : memref<?x16xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %xs = modk.alloc : memref<?x16x32xf32>
  %xn = modk.alloc : memref<?x16x32xf32>
  %mask = modk.alloc : memref<?x16xi32>
  %q = modk.alloc : memref<?x16x32xf32>
  %ipos1 = modk.alloc : memref<?x16xi32>
  %iseg1 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos1, %iseg1 : memref<?x16xi32>, memref<?x1xi64>
  modk.rows ins(%x, %rw : memref<?x16x32xf32>, memref<1x32xf32>) rows %iseg1 : memref<?x1xi64> outs(%r : memref<?x16xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %xw = arith.mulf %a0, %a1 : f32
    modk.yield %xw : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %s0: f32):
    modk.yield %s0 : f32
  }
  modk.route_select %r causal(%p) -> %pos, %seg, %mask {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.rows ins(%x, %nw : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%xs, %xn : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column -> row, row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a0 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %ss: f32):
    %rx_eps = arith.constant 1.000000e-05 : f32
    %rx_width = arith.constant 32.0 : f32
    %rx_mean = arith.divf %ss, %rx_width : f32
    %rx_var = arith.addf %rx_mean, %rx_eps : f32
    %rx_root = math.sqrt %rx_var : f32
    %rx_one = arith.constant 1.0 : f32
    %rx_scale = arith.divf %rx_one, %rx_root : f32
    %rx_t = arith.mulf %b0, %rx_scale : f32
    %rx_n = arith.mulf %rx_t, %b1 : f32
    modk.yield %b0, %rx_n : f32, f32
  }
  modk.gemm %xn, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// Not fused: another kernel runs between the selection and the gather (it
// would then run before that kernel).
// CHECK-LABEL: modk.entry @not_next
// CHECK-NOT: gather {
// CHECK: modk.zero
// CHECK-NEXT: modk.rows
modk.entry @not_next attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x16x32xf32>
  %r = modk.alloc : memref<?x16xf32>
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  %xs = modk.alloc : memref<?x4x32xf32>
  %z = modk.alloc : memref<?x16xf32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.zero(%z) : memref<?x16xf32>
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs : memref<?x4x32xf32>) access(token -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
}

// -----

// Not fused: a kernel over another row set is not the gather.
// CHECK-LABEL: modk.entry @other_rows
// CHECK-NOT: gather {
// CHECK: modk.route_select
// CHECK-NEXT: modk.rows
modk.entry @other_rows attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x16x32xf32>
  %r = modk.alloc : memref<?x16xf32>
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  %seg2 = modk.alloc : memref<?x1xi64>
  %y = modk.alloc : memref<?x16x32xf32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg2 : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
}

// -----

// Not fused: a gather with a column sum adds over every sequence's rows.
// CHECK-LABEL: modk.entry @column_sum
// CHECK-NOT: gather {
// CHECK: modk.route_select
// CHECK-NEXT: modk.rows
modk.entry @column_sum attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm.weight.grad", shape = [32], init = zeros>]} {
  %x = modk.alloc : memref<?x16x32xf32>
  %r = modk.alloc : memref<?x16xf32>
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  %xs = modk.alloc : memref<?x4x32xf32>
  %dw = modk.param "norm.weight.grad" : memref<32xf32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs, %dw : memref<?x4x32xf32>, memref<32xf32>) access(token -> row, column_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a, %a : f32, f32
  }
}

// -----

// Not fused: other sequences may still be selecting while one is
// gathered, so a kernel that reads the scores must wait for them all.
// CHECK-LABEL: modk.entry @reads_scores
// CHECK-NOT: gather {
// CHECK: modk.route_select
// CHECK-NEXT: modk.rows
modk.entry @reads_scores attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x16x32xf32>
  %r = modk.alloc : memref<?x16xf32>
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  %xs = modk.alloc : memref<?x4x32xf32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.rows ins(%x, %r : memref<?x16x32xf32>, memref<?x16xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs : memref<?x4x32xf32>) access(token, token_value -> row) reduce {
  ^bb0(%a: f32, %s: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %s: f32):
    %y = arith.mulf %a, %s : f32
    modk.yield %y : f32
  }
}

// -----

// A decode step: the gather of the routed sequences' one token each (no
// positions) moves into decode_select's region, run by the block that
// compacts the routed sequences.
// CHECK-LABEL: modk.entry @decode
// CHECK: modk.decode_select(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[DSEG:.*]], %{{.*}}) {causal_router = #modk.causal_router<aux_loss>, layer = 1 : i64} : {{.*}} gather {
// CHECK-NEXT: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x1x32xf32>, memref<32xf32>) rows %[[DSEG]] : memref<?x1xi64> outs(
// CHECK: math.sqrt
// CHECK: modk.yield
// CHECK-NEXT: }
// CHECK-NEXT: }
// CHECK-NEXT: modk.gemm
// OFF-LABEL: modk.entry @decode
// OFF-NOT: gather {
modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<causal>], params = [#modk.param<name = "router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "q.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %rw = modk.param "router.weight" : memref<1x32xf32>
  %nw = modk.param "norm.weight" : memref<32xf32>
  %wq = modk.param "q.weight" : memref<32x32xf32>
  %x = modk.alloc : memref<?x1x32xf32>
  %step = modk.alloc : memref<?x1xi32>
  %active = modk.alloc : memref<?x1xi8>
  %r = modk.alloc : memref<?x1xf32>
  %pos = modk.alloc : memref<?x1xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %xs = modk.alloc : memref<?x1x32xf32>
  %xn = modk.alloc : memref<?x1x32xf32>
  %mask = modk.alloc : memref<?x1xi32>
  %q = modk.alloc : memref<?x1x32xf32>
  %ipos2 = modk.alloc : memref<?x1xi32>
  %iseg2 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos2, %iseg2 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x, %rw : memref<?x1x32xf32>, memref<1x32xf32>) rows %iseg2 : memref<?x1xi64> outs(%r : memref<?x1xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %xw = arith.mulf %a0, %a1 : f32
    modk.yield %xw : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %s0: f32):
    modk.yield %s0 : f32
  }
  modk.decode_select(%r, %step, %active, %pos, %seg, %mask) {causal_router = #modk.causal_router<aux_loss>, layer = 1 : i64} : memref<?x1xf32>, memref<?x1xi32>, memref<?x1xi8>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi32>
  modk.rows ins(%x, %nw : memref<?x1x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> outs(%xs, %xn : memref<?x1x32xf32>, memref<?x1x32xf32>) access(token, column -> row, row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a0 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%b0: f32, %b1: f32, %ss: f32):
    %rx_eps = arith.constant 1.000000e-05 : f32
    %rx_width = arith.constant 32.0 : f32
    %rx_mean = arith.divf %ss, %rx_width : f32
    %rx_var = arith.addf %rx_mean, %rx_eps : f32
    %rx_root = math.sqrt %rx_var : f32
    %rx_one = arith.constant 1.0 : f32
    %rx_scale = arith.divf %rx_one, %rx_root : f32
    %rx_t = arith.mulf %b0, %rx_scale : f32
    %rx_n = arith.mulf %rx_t, %b1 : f32
    modk.yield %b0, %rx_n : f32, f32
  }
  modk.gemm %xn, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
}
