// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-group-gemms))' | FileCheck %s
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-group-gemms{rows=false}))' | FileCheck %s --check-prefix=OFF
// RUN: mod-opt %s --split-input-file --pass-pipeline='builtin.module(modk.entry(modk-group-gemms{enabled=false}))' | FileCheck %s --check-prefix=OFF

// modk-group-gemms on the experts' row kernels (docs/compiler.md, stage 5i):
// row kernels that generate one warp-per-row kernel, on row sets of their
// own, that do not depend on each other, get one `group` number; a later
// one moves up next to the first. Switched off (rows=false, or the whole
// pass), none has a group.
// OFF-NOT: group =

// The gated scatters' gradients of two experts of one modk.moe_select: each
// reads the stream's gradient at its tokens, writes its expert's dExpert
// and each of its tokens' gate gradient into one buffer %dp (at tokens of
// different experts: disjoint). Expert 0's activation gradient between
// them reads expert 0's output only: expert 1's kernel moves up past it.
// CHECK-LABEL: modk.entry @scatter_grads
// CHECK: modk.moe_select {{.*}} experts(%[[P0:.*]], %[[P1:.*]]) (%[[S0:.*]], %[[S1:.*]]) {capacity
// CHECK: modk.rows ins(%[[DS:.*]], %{{.*}}, %[[G:.*]] : {{.*}}) rows %[[S0]] : memref<?x1xi64> tokens(%[[P0]] : memref<?x6xi32>) outs(%[[DY0:.*]], %[[DP:.*]] : {{.*}}) access(token, row, token_value -> row, token_value) attributes {group = [[SG:[0-9]+]] : i64}
// CHECK: modk.rows ins(%[[DS]], %{{.*}}, %[[G]] : {{.*}}) rows %[[S1]] : memref<?x1xi64> tokens(%[[P1]] : memref<?x6xi32>) outs(%{{.*}}, %[[DP]] : {{.*}}) access(token, row, token_value -> row, token_value) attributes {group = [[SG]] : i64}
// CHECK: modk.rows ins(%[[DY0]] : memref<?x6x32xf32>) rows %[[S0]] : memref<?x1xi64> outs(%{{.*}} : memref<?x6x32xf32>) access(row -> row) reduce {
modk.entry @scatter_grads attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "moe-group", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, moe = <n_experts = 2, noop_experts = 1, d_expert = 48, capacity_factor = 1.000000e+00 : f64, balance_loss_weight = 5.000000e-02 : f64, layers = [0], capacities = [6]>>, modes = [#modk.mode<topk>], params = []} {
  %all = modk.alloc : memref<?x1xi64>
  %logits = modk.alloc : memref<?x16x3xf32>
  %probs = modk.alloc : memref<?x16x3xf32>
  %choice = modk.alloc : memref<?x16xi32>
  %gate = modk.alloc : memref<?x16xf32>
  %p0 = modk.alloc : memref<?x6xi32>
  %p1 = modk.alloc : memref<?x6xi32>
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  modk.moe_select %logits rows %all -> %probs, %choice, %gate experts(%p0, %p1) (%s0, %s1) {capacity = 6 : i64, layer = 0 : i64} : memref<?x16x3xf32>, memref<?x1xi64>, memref<?x16x3xf32>, memref<?x16xi32>, memref<?x16xf32>, memref<?x6xi32>, memref<?x6xi32>, memref<?x1xi64>, memref<?x1xi64>
  %ds = modk.alloc : memref<?x16x32xf32>
  %y0 = modk.alloc : memref<?x6x32xf32>
  %y1 = modk.alloc : memref<?x6x32xf32>
  %dp = modk.alloc : memref<?x16xf32>
  %dy0 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%ds, %y0, %gate : memref<?x16x32xf32>, memref<?x6x32xf32>, memref<?x16xf32>) rows %s0 : memref<?x1xi64> tokens(%p0 : memref<?x6xi32>) outs(%dy0, %dp : memref<?x6x32xf32>, memref<?x16xf32>) access(token, row, token_value -> row, token_value) reduce {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    modk.yield %m : f32
  } body {
  ^bb0(%a: f32, %b: f32, %c: f32, %sum: f32):
    %m = arith.mulf %c, %a : f32
    modk.yield %m, %sum : f32, f32
  }
  %dh0 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%dy0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%dh0 : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
  %dy1 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%ds, %y1, %gate : memref<?x16x32xf32>, memref<?x6x32xf32>, memref<?x16xf32>) rows %s1 : memref<?x1xi64> tokens(%p1 : memref<?x6xi32>) outs(%dy1, %dp : memref<?x6x32xf32>, memref<?x16xf32>) access(token, row, token_value -> row, token_value) reduce {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %m = arith.mulf %a, %b : f32
    modk.yield %m : f32
  } body {
  ^bb0(%a: f32, %b: f32, %c: f32, %sum: f32):
    %m = arith.mulf %c, %a : f32
    modk.yield %m, %sum : f32, f32
  }
}

// -----

// The gathers' gradients: each expert's dx adds into the stream's gradient
// %ds at its tokens (disjoint, as above): one group.
// CHECK-LABEL: modk.entry @gather_grads
// CHECK: modk.rows ins(%{{.*}}, %[[DS:.*]] : {{.*}}) rows %{{.*}} tokens({{.*}}) outs(%[[DS]] : memref<?x16x32xf32>) access(row, token -> token) attributes {group = [[GG:[0-9]+]] : i64}
// CHECK: modk.rows ins(%{{.*}}, %[[DS]] : {{.*}}) rows %{{.*}} tokens({{.*}}) outs(%[[DS]] : memref<?x16x32xf32>) access(row, token -> token) attributes {group = [[GG]] : i64}
modk.entry @gather_grads attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "moe-group", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, moe = <n_experts = 2, noop_experts = 1, d_expert = 48, capacity_factor = 1.000000e+00 : f64, balance_loss_weight = 5.000000e-02 : f64, layers = [0], capacities = [6]>>, modes = [#modk.mode<topk>], params = []} {
  %all = modk.alloc : memref<?x1xi64>
  %logits = modk.alloc : memref<?x16x3xf32>
  %probs = modk.alloc : memref<?x16x3xf32>
  %choice = modk.alloc : memref<?x16xi32>
  %gate = modk.alloc : memref<?x16xf32>
  %p0 = modk.alloc : memref<?x6xi32>
  %p1 = modk.alloc : memref<?x6xi32>
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  modk.moe_select %logits rows %all -> %probs, %choice, %gate experts(%p0, %p1) (%s0, %s1) {capacity = 6 : i64, layer = 0 : i64} : memref<?x16x3xf32>, memref<?x1xi64>, memref<?x16x3xf32>, memref<?x16xi32>, memref<?x16xf32>, memref<?x6xi32>, memref<?x6xi32>, memref<?x1xi64>, memref<?x1xi64>
  %ds = modk.alloc : memref<?x16x32xf32>
  %dx0 = modk.alloc : memref<?x6x32xf32>
  %dx1 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%dx0, %ds : memref<?x6x32xf32>, memref<?x16x32xf32>) rows %s0 : memref<?x1xi64> tokens(%p0 : memref<?x6xi32>) outs(%ds : memref<?x16x32xf32>) access(row, token -> token) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %b, %a : f32
    modk.yield %s : f32
  }
  modk.rows ins(%dx1, %ds : memref<?x6x32xf32>, memref<?x16x32xf32>) rows %s1 : memref<?x1xi64> tokens(%p1 : memref<?x6xi32>) outs(%ds : memref<?x16x32xf32>) access(row, token -> token) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %b, %a : f32
    modk.yield %s : f32
  }
}

// -----

// Not grouped: the same kernel on two row sets, but the second reads what
// the first writes (%h0): it must run after it.
// CHECK-LABEL: modk.entry @dependent
// CHECK-NOT: group =
// CHECK: modk.rows ins(%{{.*}} : memref<?x6x32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%[[H0:.*]] : memref<?x6x32xf32>) access(row -> row) reduce {
// CHECK-NOT: group =
// CHECK: modk.rows ins(%[[H0]] : memref<?x6x32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}} : memref<?x6x32xf32>) access(row -> row) reduce {
// CHECK-NOT: group =
modk.entry @dependent attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "moe-group", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %x0 = modk.alloc : memref<?x6x32xf32>
  %h0 = modk.alloc : memref<?x6x32xf32>
  %h1 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%x0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%h0 : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
  modk.rows ins(%h0 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%h1 : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
}

// -----

// Not grouped: two kernels that write one buffer at their rows (row
// access: the first rows of each set meet), and two that sum over their
// rows (a column sum: a block's partials, which the grouped kernel has
// not).
// CHECK-LABEL: modk.entry @same_rows_written
// CHECK-NOT: group =
modk.entry @same_rows_written attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "moe-group", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %x0 = modk.alloc : memref<?x6x32xf32>
  %x1 = modk.alloc : memref<?x6x32xf32>
  %h = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%x0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%h : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%h : memref<?x6x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
  %c0 = modk.output "grad.a.weight" : memref<32xf32>
  %c1 = modk.output "grad.b.weight" : memref<32xf32>
  modk.rows ins(%x0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%c0 : memref<32xf32>) access(row -> column_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%c1 : memref<32xf32>) access(row -> column_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
}
