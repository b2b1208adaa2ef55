// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-horizontal))' | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-horizontal{enabled=false}))' | FileCheck %s --check-prefix=OFF
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-fuse-horizontal{min-rows=32}))' | FileCheck %s --check-prefix=FEW

// Q, K and V of the same rows: one product of the three weights stacked,
// [16 rows, 96 columns] a sequence. Attention reads q, k and v as windows
// (modk::ColumnWindowReader), so Q's and K's RoPE epilogues finish their
// windows in place and V is read where it is: the three buffers go.
// CHECK-LABEL: modk.entry @qkv
// CHECK-COUNT-2: modk.alloc : memref<?x16x32xf32>{{$}}
// CHECK-NEXT: %[[S:.*]] = modk.alloc : memref<?x16x96xf32>
// CHECK-NEXT: modk.gemm %[[X:.*]], [%[[WQ:.*]], %[[WK:.*]], %[[WV:.*]]] rows %[[SEG:.*]] -> %[[S]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: %[[Q:.*]] = modk.column_window %[[S]][0] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1]>>
// CHECK-NEXT: %[[K:.*]] = modk.column_window %[[S]][32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
// CHECK-NEXT: %[[V:.*]] = modk.column_window %[[S]][64] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 64>>
// CHECK-NEXT: modk.rows ins(%[[Q]] : {{.*}}) rows %[[SEG]] : {{.*}} outs(%[[Q]] : memref<?x16x32xf32, strided<[1536, 96, 1]>>) access(row -> row) attributes {head_dim = 16 : i64}
// CHECK: modk.rotate_half
// CHECK: modk.rows ins(%[[K]] : {{.*}}) rows %[[SEG]] : {{.*}} outs(%[[K]] : memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>) access(row -> row) attributes {head_dim = 16 : i64}
// CHECK: modk.attention %[[Q]], %[[K]], %[[V]] rows
// CHECK-NOT: modk.gemm
// OFF-LABEL: modk.entry @qkv
// OFF-COUNT-3: modk.gemm %{{.*}}, [%{{[a-z0-9]*}}] rows
// OFF-NOT: modk.column_window
// FEW-LABEL: modk.entry @qkv
// FEW-NOT: modk.column_window
// FEW: modk.attention
modk.entry @qkv attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wq", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wk", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wv", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wq = modk.param "wq" : memref<32x32xf32>
  %wk = modk.param "wk" : memref<32x32xf32>
  %wv = modk.param "wv" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  %k = modk.alloc : memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  modk.gemm %x, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32> epilogue {
  ^bb0(%p: memref<?x16x32xf32>):
    modk.rows ins(%p : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%q : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
    ^bb0(%a0: f32):
      modk.yield
    } body {
    ^bb0(%a0: f32):
      %cos, %sin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %r = modk.rotate_half %a0 : f32
      %rs = arith.mulf %r, %sin : f32
      %xc = arith.mulf %a0, %cos : f32
      %y = arith.addf %xc, %rs : f32
      modk.yield %y : f32
    }
  }
  modk.gemm %x, [%wk] rows %seg -> %k {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32> epilogue {
  ^bb0(%p: memref<?x16x32xf32>):
    modk.rows ins(%p : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%k : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
    ^bb0(%a0: f32):
      modk.yield
    } body {
    ^bb0(%a0: f32):
      %cos, %sin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %r = modk.rotate_half %a0 : f32
      %rs = arith.mulf %r, %sin : f32
      %xc = arith.mulf %a0, %cos : f32
      %y = arith.addf %xc, %rs : f32
      modk.yield %y : f32
    }
  }
  modk.gemm %x, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.attention %q, %k, %v rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
}


// -----

// As above, but weight gradients, which cannot read a window, also read K
// and V: K's RoPE writes K's own buffer from its window, and V is copied
// out of its window; attention reads those buffers.
// CHECK-LABEL: modk.entry @qkv_more_readers
// CHECK: %[[S:.*]] = modk.alloc : memref<?x16x96xf32>
// CHECK-NEXT: modk.gemm %{{.*}}, [%{{.*}}, %{{.*}}, %{{.*}}] rows %[[SEG:.*]] -> %[[S]]
// CHECK-NEXT: %[[Q:.*]] = modk.column_window %[[S]][0]
// CHECK-NEXT: %[[K0:.*]] = modk.column_window %[[S]][32]
// CHECK-NEXT: %[[V0:.*]] = modk.column_window %[[S]][64]
// CHECK-NEXT: modk.rows ins(%[[V0]] : {{.*}}) rows %[[SEG]] : memref<?x1xi64> outs(%[[V:.*]] : memref<?x16x32xf32>)
// CHECK: modk.yield %arg0 : f32
// CHECK: modk.rows ins(%[[Q]] : {{.*}}) outs(%[[Q]] : {{.*}}) access(row -> row) attributes {head_dim = 16 : i64}
// CHECK: modk.rows ins(%[[K0]] : {{.*}}) outs(%[[K:.*]] : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64}
// CHECK: modk.attention %[[Q]], %[[K]], %[[V]] rows
// CHECK: modk.gemm_wgrad(%{{.*}}, %[[K]],
// CHECK: modk.gemm_wgrad(%{{.*}}, %[[V]],
modk.entry @qkv_more_readers attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wq", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wk", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wv", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wo", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wq = modk.param "wq" : memref<32x32xf32>
  %wk = modk.param "wk" : memref<32x32xf32>
  %wv = modk.param "wv" : memref<32x32xf32>
  %wo = modk.param "wo" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  %k = modk.alloc : memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  %dwk = modk.output "grad.wo" : memref<32x32xf32>
  modk.gemm %x, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32> epilogue {
  ^bb0(%p: memref<?x16x32xf32>):
    modk.rows ins(%p : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%q : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
    ^bb0(%a0: f32):
      modk.yield
    } body {
    ^bb0(%a0: f32):
      %cos, %sin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %r = modk.rotate_half %a0 : f32
      %rs = arith.mulf %r, %sin : f32
      %xc = arith.mulf %a0, %cos : f32
      %y = arith.addf %xc, %rs : f32
      modk.yield %y : f32
    }
  }
  modk.gemm %x, [%wk] rows %seg -> %k {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32> epilogue {
  ^bb0(%p: memref<?x16x32xf32>):
    modk.rows ins(%p : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%k : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
    ^bb0(%a0: f32):
      modk.yield
    } body {
    ^bb0(%a0: f32):
      %cos, %sin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %r = modk.rotate_half %a0 : f32
      %rs = arith.mulf %r, %sin : f32
      %xc = arith.mulf %a0, %cos : f32
      %y = arith.addf %xc, %rs : f32
      modk.yield %y : f32
    }
  }
  modk.gemm %x, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.attention %q, %k, %v rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm_wgrad(%o, %k, %seg, %dwk) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  modk.gemm_wgrad(%o, %v, %seg, %dwk) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
}
// -----

// SwiGLU's gate and up projections: the up projection's epilogue reads the
// gate's product, and nothing else does, so it reads the gate's window and
// the gate's buffer goes (no copy). Its output, which only the down
// projection reads (an f32 product reads a window by its leading
// dimension), is the up projection's window, written in place: no buffer
// of [16, 64] is left. The down projection reads another input: not a
// member.
// CHECK-LABEL: modk.entry @gate_up
// CHECK-NOT: modk.alloc : memref<?x16x64xf32>{{$}}
// CHECK: %[[S:.*]] = modk.alloc : memref<?x16x128xf32>
// CHECK-NEXT: modk.gemm %{{.*}}, [%{{.*}}, %{{.*}}] rows %[[SEG:.*]] -> %[[S]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: %[[G:.*]] = modk.column_window %[[S]][0]
// CHECK-NEXT: %[[U:.*]] = modk.column_window %[[S]][64]
// CHECK-NEXT: modk.rows ins(%[[G]], %[[U]] : {{.*}}) rows %[[SEG]] : memref<?x1xi64> outs(%[[U]] : memref<?x16x64xf32, strided<[2048, 128, 1], offset: 64>>)
// CHECK: math.exp
// CHECK: modk.gemm %[[U]], [%{{.*}}] rows %[[SEG]] -> %{{.*}} {epilogue = #modk.epilogue<none>}
// OFF-LABEL: modk.entry @gate_up
// OFF-NOT: modk.column_window
modk.entry @gate_up attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wg", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wu", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wd", shape = [32, 64], init = normal, std = 2.000000e-02 : f64>]} {
  %wg = modk.param "wg" : memref<64x32xf32>
  %wu = modk.param "wu" : memref<64x32xf32>
  %wd = modk.param "wd" : memref<32x64xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %g = modk.alloc : memref<?x16x64xf32>
  %h = modk.alloc : memref<?x16x64xf32>
  %y = modk.alloc : memref<?x16x32xf32>
  modk.gemm %x, [%wg] rows %seg -> %g {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  modk.gemm %x, [%wu] rows %seg -> %h {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32> epilogue {
  ^bb0(%p: memref<?x16x64xf32>):
    modk.rows ins(%g, %p : memref<?x16x64xf32>, memref<?x16x64xf32>) rows %seg : memref<?x1xi64> outs(%h : memref<?x16x64xf32>) access(row, row -> row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      modk.yield
    } body {
    ^bb0(%a0: f32, %a1: f32):
      %one = arith.constant 1.000000e+00 : f32
      %n = arith.negf %a0 : f32
      %e = math.exp %n : f32
      %d = arith.addf %e, %one : f32
      %s = arith.divf %a0, %d : f32
      %r = arith.mulf %s, %a1 : f32
      modk.yield %r : f32
    }
  }
  modk.gemm %h, [%wd] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// Not stacked: the second product reads another input than the first, and
// the third reads the second's output.
// CHECK-LABEL: modk.entry @apart
// CHECK-NOT: modk.column_window
// CHECK-COUNT-3: modk.gemm %{{.*}}, [%{{[a-z0-9]*}}] rows
modk.entry @apart attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wa", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wb", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wc", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wa = modk.param "wa" : memref<32x32xf32>
  %wb = modk.param "wb" : memref<32x32xf32>
  %wc = modk.param "wc" : memref<32x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %z = modk.alloc : memref<?x16x32xf32>
  %a = modk.alloc : memref<?x16x32xf32>
  %b = modk.alloc : memref<?x16x32xf32>
  %c = modk.alloc : memref<?x16x32xf32>
  modk.gemm %x, [%wa] rows %seg -> %a {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm %z, [%wb] rows %seg -> %b {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.gemm %b, [%wc] rows %seg -> %c {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}
