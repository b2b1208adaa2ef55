// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-row-epilogues))' | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-row-epilogues{enabled=false}))' | FileCheck %s --check-prefix=OFF
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-row-epilogues{own-rows=false}))' | FileCheck %s --check-prefix=TOKENS

// A routed block's gated scatter, x[tok] = x[tok] + r[tok] * (a + m), is
// the only reader of the down projection's rows m and runs right after it:
// it becomes the GEMM's `rows` epilogue, writing the stream x; m's buffer
// goes.
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.alloc : memref<?x4x32xf32>{{$}}
// CHECK-NOT: modk.alloc : memref<?x4x32xf32>{{$}}
// CHECK: modk.gemm %[[H:.*]], [%[[WD:.*]]] rows %[[SEG:.*]] -> %[[X:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P:.*]]: memref<?x4x32xf32>):
// CHECK-NEXT: modk.rows ins(%[[A:.*]], %[[P]], %[[R:.*]], %[[X]] : {{.*}}) rows %[[SEG]] : memref<?x1xi64> tokens(%[[POS:.*]] : memref<?x4xi32>) outs(%[[X]] : memref<?x16x32xf32>)
// CHECK: arith.mulf
// CHECK: }
// CHECK-NEXT: }
// CHECK-NOT: modk.rows
// OFF-LABEL: modk.entry @forward
// OFF: modk.gemm {{.*}} -> %[[M:.*]] {epilogue = #modk.epilogue<none>}
// OFF-NEXT: modk.rows ins(%{{.*}}, %[[M]],
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wd", shape = [32, 64], init = normal, std = 2.000000e-02 : f64>]} {
  %wd = modk.param "wd" : memref<32x64xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %pos = modk.alloc : memref<?x4xi32>
  %x = modk.alloc : memref<?x16x32xf32>
  %r = modk.alloc : memref<?x16xf32>
  %a = modk.alloc : memref<?x4x32xf32>
  %h = modk.alloc : memref<?x4x64xf32>
  %m = modk.alloc : memref<?x4x32xf32>
  modk.gemm %h, [%wd] rows %seg -> %m {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.rows ins(%a, %m, %r, %x : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%x : memref<?x16x32xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%a0: f32, %a1: f32, %a2: f32, %a3: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32, %a1: f32, %a2: f32, %a3: f32):
    %f = arith.addf %a0, %a1 : f32
    %g = arith.mulf %a2, %f : f32
    %y = arith.addf %a3, %g : f32
    modk.yield %y : f32
  }
}

// -----

// Not fused:
//  - training keeps the down projection's rows m for the backward pass (a
//    second reader);
//  - an RMSNorm after a GEMM sums over whole rows, which a tile does not
//    hold;
//  - a kernel that writes the GEMM's own input (other tiles still read it).
// (A kernel that reads its output at one access and writes it at another
// does not verify: modk-invalid.mlir, @access_in_place.)
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} : {{.*}}xf32>{{$}}
// CHECK-NEXT: modk.rows
// CHECK: modk.copy
// CHECK: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} : {{.*}}xf32>{{$}}
// CHECK-NEXT: modk.rows
// CHECK: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} : {{.*}}xf32>{{$}}
// CHECK-NEXT: modk.rows
// CHECK-NOT: epilogue<rows>
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wd", shape = [32, 64], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wo", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "w", shape = [32], init = ones>]} {
  %wd = modk.param "wd" : memref<32x64xf32>
  %wo = modk.param "wo" : memref<32x32xf32>
  %w = modk.param "w" : memref<32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %pos = modk.alloc : memref<?x4xi32>
  %x = modk.alloc : memref<?x16x32xf32>
  %a = modk.alloc : memref<?x4x32xf32>
  %h = modk.alloc : memref<?x4x64xf32>
  %m = modk.alloc : memref<?x4x32xf32>
  modk.gemm %h, [%wd] rows %seg -> %m {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.rows ins(%a, %m, %x : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%x : memref<?x16x32xf32>) access(row, row, token -> token) reduce {
  ^bb0(%a0: f32, %a1: f32, %a2: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32, %a1: f32, %a2: f32):
    %f = arith.addf %a0, %a1 : f32
    %y = arith.addf %a2, %f : f32
    modk.yield %y : f32
  }
  %keep = modk.alloc : memref<?x4x32xf32>
  modk.copy(%m, %keep) : memref<?x4x32xf32>, memref<?x4x32xf32>
  %o = modk.alloc : memref<?x4x32xf32>
  %n = modk.alloc : memref<?x4x32xf32>
  modk.gemm %a, [%wo] rows %seg -> %o {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.rows ins(%o, %w : memref<?x4x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> outs(%n : memref<?x4x32xf32>) access(row, column -> row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    %sq = arith.mulf %a0, %a0 : f32
    modk.yield %sq : f32
  } body {
  ^bb0(%a0: f32, %a1: f32, %s: f32):
    %y = arith.mulf %a0, %s : f32
    modk.yield %y : f32
  }
  %o2 = modk.alloc : memref<?x4x32xf32>
  modk.gemm %a, [%wo] rows %seg -> %o2 {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.rows ins(%o2, %a : memref<?x4x32xf32>, memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%a : memref<?x4x32xf32>) access(row, row -> row) reduce {
  ^bb0(%a0: f32, %a1: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32, %a1: f32):
    %y = arith.addf %a0, %a1 : f32
    modk.yield %y : f32
  }
}

// -----

// A kernel written at the product's own rows (here GELU, as
// `--no-fuse=activation` leaves it) is fused by default, and left a kernel
// of its own with own-rows=false (modc sets it when --no-fuse names
// activation or residual-add); the scatter written at tokens is fused
// either way (the first case above, TOKENS).
// CHECK-LABEL: modk.entry @own_rows
// CHECK: modk.gemm {{.*}} -> %[[H:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P:.*]]: memref<?x4x64xf32>):
// CHECK-NEXT: modk.rows ins(%[[P]] : memref<?x4x64xf32>) rows %{{.*}} outs(%[[H]] : memref<?x4x64xf32>) access(row -> row)
// TOKENS: epilogue = #modk.epilogue<rows>
// TOKENS-LABEL: modk.entry @own_rows
// TOKENS: modk.gemm {{.*}} -> %[[U:.*]] {epilogue = #modk.epilogue<none>}
// TOKENS-NEXT: modk.rows ins(%[[U]] : memref<?x4x64xf32>)
// TOKENS-NOT: epilogue<rows>
modk.entry @own_rows attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w1", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w1 = modk.param "w1" : memref<64x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x4x32xf32>
  %u = modk.alloc : memref<?x4x64xf32>
  %h = modk.alloc : memref<?x4x64xf32>
  modk.gemm %n, [%w1] rows %seg -> %u {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.rows ins(%u : memref<?x4x64xf32>) rows %seg : memref<?x1xi64> outs(%h : memref<?x4x64xf32>) access(row -> row) reduce {
  ^bb0(%a0: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32):
    %e = math.erf %a0 : f32
    %y = arith.mulf %a0, %e : f32
    modk.yield %y : f32
  }
}

// -----

// A kernel with a column sum (a weight's gradient, summed over the rows)
// cannot finish a GEMM's tiles, each of which holds only some rows: though
// it is the product's only reader, right after it, it stays a kernel.
// CHECK-LABEL: modk.entry @column_sum
// CHECK: modk.gemm {{.*}} -> %[[P:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.rows ins(%[[P]], %{{.*}} : memref<?x4x32xf32>, memref<?x4x32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}} : memref<32xf32>) access(row, row -> column_sum)
// CHECK-NOT: epilogue<rows>
modk.entry @column_sum attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "s", shape = [32], init = ones>]} {
  %w = modk.param "w" : memref<32x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x4x32xf32>
  %x = modk.alloc : memref<?x4x32xf32>
  %p = modk.alloc : memref<?x4x32xf32>
  %ds = modk.output "grad.s" : memref<32xf32>
  modk.gemm %n, [%w] rows %seg -> %p {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
  modk.rows ins(%p, %x : memref<?x4x32xf32>, memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%ds : memref<32xf32>) access(row, row -> column_sum) reduce {
  ^bb0(%a0: f32, %a1: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32, %a1: f32):
    %y = arith.mulf %a0, %a1 : f32
    modk.yield %y : f32
  }
}

// -----

// A GEMM the forward entry runs only where causal decisions are read
// (causal_only, the predictor's) and an elementwise kernel that always
// runs: fusing them would move the kernel under the GEMM's guard, so they
// stay two kernels.
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.gemm {{.*}} -> %[[U:.*]] {causal_only, epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.rows ins(%[[U]] : memref<?x4x64xf32>)
// CHECK-NOT: epilogue<rows>
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "w1", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w1 = modk.param "w1" : memref<64x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x4x32xf32>
  %u = modk.alloc : memref<?x4x64xf32>
  %h = modk.alloc : memref<?x4x64xf32>
  modk.gemm %n, [%w1] rows %seg -> %u {causal_only, epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.rows ins(%u : memref<?x4x64xf32>) rows %seg : memref<?x1xi64> outs(%h : memref<?x4x64xf32>) access(row -> row) reduce {
  ^bb0(%a0: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32):
    %e = math.erf %a0 : f32
    %y = arith.mulf %a0, %e : f32
    modk.yield %y : f32
  }
}

// -----

// The same two, both causal_only, fuse; the fused GEMM keeps causal_only.
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.gemm {{.*}} {causal_only, epilogue = #modk.epilogue<rows>}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "w1", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w1 = modk.param "w1" : memref<64x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x4x32xf32>
  %u = modk.alloc : memref<?x4x64xf32>
  %h = modk.alloc : memref<?x4x64xf32>
  modk.gemm %n, [%w1] rows %seg -> %u {causal_only, epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
  modk.rows ins(%u : memref<?x4x64xf32>) rows %seg : memref<?x1xi64> outs(%h : memref<?x4x64xf32>) access(row -> row) attributes {causal_only} reduce {
  ^bb0(%a0: f32):
    modk.yield
  } body {
  ^bb0(%a0: f32):
    %e = math.erf %a0 : f32
    %y = arith.mulf %a0, %e : f32
    modk.yield %y : f32
  }
}
