// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-plan-memory))' %s -o %t.mlir
// RUN: mod-translate --modk-to-cuda %t.mlir | FileCheck %s
// RUN: mod-translate --modk-to-cpp %t.mlir | FileCheck %s --check-prefix=CPU

// The CUDA emitter's launches of row kernels marked as groups
// (modk-group-gemms; docs/cuda.md, "Grouped row kernels"): a group of one
// warp-per-row kernel is one launch of its grouped form, a table of the
// members' row counts and buffers and the grid's y the member. Where the
// members cannot run as one kernel (kernels with column sums, members of
// different kernels, a lone member) each launches on its own, in order.
// The CPU emitter runs every member as it runs any row kernel.
// CHECK: template <int M> struct modc_rows_0_group {
// CHECK: void modc_rows_0_grouped(const __grid_constant__ modc_rows_0_group<M> group) {
// CHECK-NOT: _grouped(
// CHECK-LABEL: modc_forward(const modc_forward_args *args) {
// CHECK: { // group 0: 2 row kernels modc_rows_0
// CHECK-NEXT: modc_rows::modc_rows_0_group<2> group;
// CHECK-NEXT: group.m[0] = {[[S0:buf[0-9]+]] + B, [[X0:buf[0-9]+]], [[H0:buf[0-9]+]]};
// CHECK-NEXT: group.m[1] = {[[S1:buf[0-9]+]] + B, [[X1:buf[0-9]+]], [[H1:buf[0-9]+]]};
// CHECK-NEXT: if (B * 6 > 0)
// CHECK-NEXT: MODC_LAUNCH(modc_rows::modc_rows_0_grouped<2>, dim3(unsigned(modk_cuda::ceilDiv(B * 6, modk_cuda::detail::kRowWarps)), 2u), modk_cuda::detail::kThreads, 0, s, group);
// CHECK-NEXT: }
// The column sums: a block's partials and their sum each, one by one.
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_1, {{.*}}, s, [[S0]] + B, [[X0]], g0, (float *)scratch);
// CHECK: launchReduceColumns(
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_1, {{.*}}, s, [[S1]] + B, [[X1]], g1, (float *)scratch);
// CHECK: launchReduceColumns(
// Two kernels under one number, then a lone member: one launch each.
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_2, {{.*}}, s, [[S0]] + B, [[X0]], {{buf[0-9]+}});
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_3, {{.*}}, s, [[S1]] + B, [[X1]], {{buf[0-9]+}});
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_0, {{.*}}, s, [[S0]] + B, [[H0]], {{buf[0-9]+}});
// CHECK-NOT: _grouped
// CHECK-NOT: row kernels
// CPU-NOT: _grouped
// CPU-LABEL: modc_forward(
// CPU-COUNT-2: modc_rows_0(
// CPU: modc_rows_1(
// CPU: modc_rows_1(
// CPU: modc_rows_2(
// CPU: modc_rows_3(
// CPU: modc_rows_0(

modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "moe-group", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "a.weight", shape = [32], init = ones>, #modk.param<name = "b.weight", shape = [32], init = ones>]} {
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %p0 = modk.alloc : memref<?x6xi32>
  %p1 = modk.alloc : memref<?x6xi32>
  modk.identity_rows -> %p0, %s0 : memref<?x6xi32>, memref<?x1xi64>
  modk.identity_rows -> %p1, %s1 : memref<?x6xi32>, memref<?x1xi64>
  %x0 = modk.alloc : memref<?x6x32xf32>
  %x1 = modk.alloc : memref<?x6x32xf32>
  %h0 = modk.alloc : memref<?x6x32xf32>
  %h1 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%x0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%h0 : memref<?x6x32xf32>) access(row -> row) attributes {group = 0 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%h1 : memref<?x6x32xf32>) access(row -> row) attributes {group = 0 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
  %c0 = modk.output "grad.a.weight" : memref<32xf32>
  %c1 = modk.output "grad.b.weight" : memref<32xf32>
  modk.rows ins(%x0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%c0 : memref<32xf32>) access(row -> column_sum) attributes {group = 1 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%c1 : memref<32xf32>) access(row -> column_sum) attributes {group = 1 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  %y0 = modk.alloc : memref<?x6x32xf32>
  %y1 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%x0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%y0 : memref<?x6x32xf32>) access(row -> row) attributes {group = 2 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.mulf %a, %a : f32
    modk.yield %n : f32
  }
  modk.rows ins(%x1 : memref<?x6x32xf32>) rows %s1 : memref<?x1xi64> outs(%y1 : memref<?x6x32xf32>) access(row -> row) attributes {group = 2 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.addf %a, %a : f32
    modk.yield %n : f32
  }
  %z0 = modk.alloc : memref<?x6x32xf32>
  modk.rows ins(%h0 : memref<?x6x32xf32>) rows %s0 : memref<?x1xi64> outs(%z0 : memref<?x6x32xf32>) access(row -> row) attributes {group = 3 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    modk.yield %n : f32
  }
}
