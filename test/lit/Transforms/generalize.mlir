// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-generalize))' | FileCheck %s
// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-generalize))' | mod-opt --verify-roundtrip | FileCheck %s --check-prefix=ROUNDTRIP

// Every named row kernel becomes a modk.rows whose regions spell its math;
// kernels of other kinds (here a GEMM) are left as they are, in place.
// ROUNDTRIP-COUNT-26: modk.rows

// RMSNorm: the sum of squares is the reduction; the body scales each
// element by 1 / sqrt(sum / D + eps) and the weight (a vector of D).
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.rows ins(%[[X:.*]], %[[W:.*]] : memref<?x16x32xf32>, memref<32xf32>) rows %[[SEG:.*]] : memref<?x1xi64> outs(%[[N:.*]] : memref<?x16x32xbf16>) access(row, column -> row) reduce {
// CHECK-NEXT: ^bb0(%[[XR:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[XR]], %[[XR]] : f32
// CHECK-NEXT: modk.yield %[[SQ]] : f32
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%[[XE:.*]]: f32, %[[WE:.*]]: f32, %[[SUM:.*]]: f32):
// CHECK-DAG: %[[D:.*]] = arith.constant 3.200000e+01 : f32
// CHECK-DAG: %[[EPS:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK: %[[MEAN:.*]] = arith.divf %[[SUM]], %[[D]] : f32
// CHECK: %[[VAR:.*]] = arith.addf %[[MEAN]], %[[EPS]] : f32
// CHECK: %[[RMS:.*]] = math.sqrt %[[VAR]] : f32
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[INV:.*]] = arith.divf %[[ONE]], %[[RMS]] : f32
// CHECK: %[[XS:.*]] = arith.mulf %[[XE]], %[[INV]] : f32
// CHECK: %[[Y:.*]] = arith.mulf %[[XS]], %[[WE]] : f32
// CHECK: modk.yield %[[Y]] : f32
// CHECK: modk.gemm
// The residual add, in place: no reduction, one sum.
// CHECK: modk.rows ins(%[[S:.*]], %[[A:.*]] : memref<?x16x32xf32>, memref<?x16x32xf32>) rows %[[SEG]] : memref<?x1xi64> outs(%[[S]] : memref<?x16x32xf32>) access(row, row -> row) reduce {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: modk.yield{{$}}
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%[[L:.*]]: f32, %[[R:.*]]: f32):
// CHECK-NEXT: %[[SUMLR:.*]] = arith.addf %[[L]], %[[R]] : f32
// CHECK-NEXT: modk.yield %[[SUMLR]] : f32
// CHECK-NOT: modk.rmsnorm
// CHECK-NOT: modk.add
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm.weight", shape = [32], init = ones>, #modk.param<name = "wq.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w = modk.param "norm.weight" : memref<32xf32>
  %wq = modk.param "wq.weight" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %n = modk.alloc : memref<?x16x32xbf16>
  %a = modk.alloc : memref<?x16x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xbf16>
  modk.gemm %n, [%wq] rows %seg -> %a {epilogue = #modk.epilogue<none>} : memref<?x16x32xbf16>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.add %x, %a rows %seg -> %x : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// The training entry's activations and their gradients.
// swiglu: u = silu(g) * up, silu(g) = g / (exp(-g) + 1).
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.rows ins(%[[G:.*]], %[[U:.*]] : memref<?x16x64xf32>, memref<?x16x64xf32>) rows %{{.*}} outs(%{{.*}} : memref<?x16x64xf32>) access(row, row -> row)
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[GE:.*]]: f32, %[[UE:.*]]: f32):
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[NG:.*]] = arith.negf %[[GE]] : f32
// CHECK-NEXT: %[[E:.*]] = math.exp %[[NG]] : f32
// CHECK-NEXT: %[[DEN:.*]] = arith.addf %[[E]], %[[ONE]] : f32
// CHECK-NEXT: %[[SILU:.*]] = arith.divf %[[GE]], %[[DEN]] : f32
// CHECK-NEXT: %[[H:.*]] = arith.mulf %[[SILU]], %[[UE]] : f32
// CHECK-NEXT: modk.yield %[[H]] : f32
// gelu: 0.5 x (1 + erf(x / sqrt 2)).
// CHECK: modk.rows ins(%{{.*}} : memref<?x16x64xf32>) rows
// CHECK: math.erf
// swiglu's gradient: two outputs (dgate, dup) from one body.
// CHECK: modk.rows ins(%{{.*}}, %{{.*}}, %{{.*}} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x16x64xf32>) rows %{{.*}} outs(%{{.*}}, %{{.*}} : memref<?x16x64xbf16>, memref<?x16x64xbf16>) access(row, row, row -> row, row)
// CHECK: math.exp
// CHECK: modk.yield %{{.*}}, %{{.*}} : f32, f32
// gelu's gradient: du (Phi(x) + x phi(x)), phi through exp(-x^2 / 2).
// CHECK: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x16x64xf32>, memref<?x16x64xf32>) rows
// CHECK-DAG: arith.constant 0.398942292 : f32
// CHECK-DAG: math.erf
// CHECK-DAG: math.exp
// CHECK-NOT: modk.activation
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %g = modk.alloc : memref<?x16x64xf32>
  %u = modk.alloc : memref<?x16x64xf32>
  %h = modk.alloc : memref<?x16x64xf32>
  %dg = modk.alloc : memref<?x16x64xbf16>
  %du = modk.alloc : memref<?x16x64xbf16>
  %seg = modk.alloc : memref<?x1xi64>
  modk.activation(%g, %u, %seg, %h) {kind = #modk.activation<swiglu>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  modk.activation(%u, %seg, %h) {kind = #modk.activation<gelu>} : memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  modk.activation_grad(%g, %u, %h, %seg, %dg, %du) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xbf16>, memref<?x16x64xbf16>
  modk.activation_grad(%u, %h, %seg, %du) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xbf16>
}

// The epilogues modk-fuse-epilogues named become `rows` epilogues: the
// GEMM's region holds a modk.rows whose block argument is the product.
// The residual add reads the stream and writes it at the row; GELU is the
// product's alone (here into bf16 rows); SwiGLU's gate product becomes a
// plain GEMM into its scratch rows first, which the up projection's
// epilogue reads. RoPE keeps its name (it pairs columns), and with it
// its rounding to bf16 (round_bf16); a plain product that modk-store-bf16
// told to round (a bf16 model's values) rounds in a `rows` epilogue:
// arith.truncf to bf16 and back.
// CHECK-LABEL: modk.entry @epilogues
// CHECK: modk.gemm %[[EA:.*]], [%[[EWO:.*]]] rows %[[ESEG:.*]] -> %[[EX:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P1:.*]]: memref<?x16x32xf32>):
// CHECK-NEXT: modk.rows ins(%[[EX]], %[[P1]] : memref<?x16x32xf32>, memref<?x16x32xf32>) rows %[[ESEG]] : memref<?x1xi64> outs(%[[EX]] : memref<?x16x32xf32>) access(row, row -> row) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[RX:.*]]: f32, %[[RP:.*]]: f32):
// CHECK-NEXT: %[[RS:.*]] = arith.addf %[[RX]], %[[RP]] : f32
// CHECK-NEXT: modk.yield %[[RS]] : f32
// CHECK: modk.gemm %[[EN:.*]], [%[[EW1:.*]]] rows %[[ESEG]] -> %[[EH:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P2:.*]]: memref<?x16x64xf32>):
// CHECK-NEXT: modk.rows ins(%[[P2]] : memref<?x16x64xf32>) rows %[[ESEG]] : memref<?x1xi64> outs(%[[EH]] : memref<?x16x64xbf16>) access(row -> row) reduce {
// CHECK: math.erf
// CHECK: modk.gemm %[[EN]], [%[[EWG:.*]]] rows %[[ESEG]] -> %[[EG:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.gemm %[[EN]], [%[[EWU:.*]]] rows %[[ESEG]] -> %[[EU:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P3:.*]]: memref<?x16x64xf32>):
// CHECK-NEXT: modk.rows ins(%[[EG]], %[[P3]] : memref<?x16x64xf32>, memref<?x16x64xf32>) rows %[[ESEG]] : memref<?x1xi64> outs(%[[EU]] : memref<?x16x64xf32>) access(row, row -> row) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[SG:.*]]: f32, %[[SU:.*]]: f32):
// CHECK: math.exp
// RoPE: a `rows` epilogue over heads of 16 at the rows' positions, the
// product's element times cos plus its rotate_half times sin; the queries
// of a bf16 model rounded after the rotation.
// CHECK: modk.gemm %[[EN]], [%[[EWO]]] rows %[[ESEG]] -> %[[EQ:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P5:.*]]: memref<?x16x32xf32>):
// CHECK-NEXT: modk.rows ins(%[[P5]] : memref<?x16x32xf32>) rows %[[ESEG]] : memref<?x1xi64> tokens(%[[EPOS:.*]] : memref<?x16xi32>) outs(%[[EQ]] : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[QX:.*]]: f32):
// CHECK-NEXT: %[[COS:.*]], %[[SIN:.*]] = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
// CHECK-NEXT: %[[QR:.*]] = modk.rotate_half %[[QX]] : f32
// CHECK-NEXT: %[[QRS:.*]] = arith.mulf %[[QR]], %[[SIN]] : f32
// CHECK-NEXT: %[[QXC:.*]] = arith.mulf %[[QX]], %[[COS]] : f32
// CHECK-NEXT: %[[QY:.*]] = arith.addf %[[QXC]], %[[QRS]] : f32
// CHECK-NEXT: modk.yield %[[QY]] : f32
// CHECK: modk.gemm %[[EN]], [%[[EWO]]] rows %[[ESEG]] -> %[[EQ]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK: attributes {head_dim = 16 : i64} reduce {
// CHECK: %[[QY2:.*]] = arith.addf
// CHECK-NEXT: %[[QB:.*]] = arith.truncf %[[QY2]] : f32 to bf16
// CHECK-NEXT: %[[QE:.*]] = arith.extf %[[QB]] : bf16 to f32
// CHECK-NEXT: modk.yield %[[QE]] : f32
// CHECK: modk.gemm %[[EN]], [%[[EWO]]] rows %[[ESEG]] -> %[[EV:.*]] {epilogue = #modk.epilogue<rows>} : {{.*}} epilogue {
// CHECK-NEXT: ^bb0(%[[P4:.*]]: memref<?x16x32xf32>):
// CHECK-NEXT: modk.rows ins(%[[P4]] : memref<?x16x32xf32>) rows %[[ESEG]] : memref<?x1xi64> outs(%[[EV]] : memref<?x16x32xf32>) access(row -> row) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[VP:.*]]: f32):
// CHECK-NEXT: %[[VB:.*]] = arith.truncf %[[VP]] : f32 to bf16
// CHECK-NEXT: %[[VR:.*]] = arith.extf %[[VB]] : bf16 to f32
// CHECK-NEXT: modk.yield %[[VR]] : f32
// CHECK-NOT: round_bf16
// CHECK-NOT: residual_add
// CHECK-NOT: epilogue<gelu>
// CHECK-NOT: epilogue<swiglu>
// CHECK-NOT: epilogue<rope>
modk.entry @epilogues attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wo", shape = [32, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "w1", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wg", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "wu", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %wo = modk.param "wo" : memref<32x32xf32>
  %w1 = modk.param "w1" : memref<64x32xf32>
  %wg = modk.param "wg" : memref<64x32xf32>
  %wu = modk.param "wu" : memref<64x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %pos = modk.alloc : memref<?x16xi32>
  %a = modk.alloc : memref<?x16x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %n = modk.alloc : memref<?x16x32xf32>
  %h = modk.alloc : memref<?x16x64xbf16>
  %g = modk.alloc : memref<?x16x64xf32>
  %u = modk.alloc : memref<?x16x64xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  modk.gemm %a, [%wo] rows %seg extra(%x) -> %x {epilogue = #modk.epilogue<residual_add>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>
  modk.gemm %n, [%w1] rows %seg -> %h {epilogue = #modk.epilogue<gelu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xbf16>
  modk.gemm %n, [%wg, %wu] rows %seg extra(%g) -> %u {epilogue = #modk.epilogue<swiglu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
  modk.gemm %n, [%wo] rows %seg extra(%pos) -> %q {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
  modk.gemm %n, [%wo] rows %seg extra(%pos) -> %q {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
  modk.gemm %n, [%wo] rows %seg -> %v {epilogue = #modk.epilogue<none>, round_bf16} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// The gradient of a routed block's gather: dx[token] += dxs[row] at each
// selected row's token, in place (token operands: dx read and written).
// CHECK-LABEL: modk.entry @gather_grad
// CHECK: modk.rows ins(%[[DXS:.*]], %[[DX:.*]] : memref<?x4x32xf32>, memref<?x16x32xf32>) rows %{{.*}} : memref<?x1xi64> tokens(%{{.*}} : memref<?x4xi32>) outs(%[[DX]] : memref<?x16x32xf32>) access(row, token -> token) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[GS:.*]]: f32, %[[GD:.*]]: f32):
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[GD]], %[[GS]] : f32
// CHECK-NEXT: modk.yield %[[SUM]] : f32
// CHECK-NOT: modk.gather_grad
modk.entry @gather_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %dxs = modk.alloc : memref<?x4x32xf32>
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %dx = modk.alloc : memref<?x16x32xf32>
  modk.gather_grad(%dxs, %pos, %seg, %dx) : memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// The gradient of the gated scatter: one sum a row, <dy[token], f[row]>;
// df[row] = g(r) dy[token] at every element, and dr[token] = dr[token] +
// g'(r) * sum once a row (a token scalar output, read and written at the
// token). Sigmoid: g' = g (1 - g). The gate `one` leaves r and dr alone.
// CHECK-LABEL: modk.entry @scatter_grad
// CHECK: modk.rows ins(%[[DY:.*]], %[[F:.*]], %[[R:.*]], %[[DR:.*]] : memref<?x16x32xf32>, memref<?x4x32xf32>, memref<?x16xf32>, memref<?x16xf32>) rows %{{.*}} : memref<?x1xi64> tokens(%{{.*}} : memref<?x4xi32>) outs(%[[DF:.*]], %[[DR]] : memref<?x4x32xf32>, memref<?x16xf32>) access(token, row, token_value, token_value -> row, token_value) reduce {
// CHECK-NEXT: ^bb0(%[[RDY:.*]]: f32, %[[RF:.*]]: f32, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[TERM:.*]] = arith.mulf %[[RDY]], %[[RF]] : f32
// CHECK-NEXT: modk.yield %[[TERM]] : f32
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[BDY:.*]]: f32, %{{.*}}: f32, %[[BR:.*]]: f32, %[[BDR:.*]]: f32, %[[DOT:.*]]: f32):
// CHECK: %[[G:.*]] = arith.divf
// CHECK: %[[ONEMG:.*]] = arith.subf %{{.*}}, %[[G]] : f32
// CHECK-NEXT: %[[SLOPE:.*]] = arith.mulf %[[G]], %[[ONEMG]] : f32
// CHECK-NEXT: %[[DFV:.*]] = arith.mulf %[[G]], %[[BDY]] : f32
// CHECK-NEXT: %[[STEP:.*]] = arith.mulf %[[SLOPE]], %[[DOT]] : f32
// CHECK-NEXT: %[[DRV:.*]] = arith.addf %[[BDR]], %[[STEP]] : f32
// CHECK-NEXT: modk.yield %[[DFV]], %[[DRV]] : f32, f32
// CHECK: modk.rows ins(%[[DY]] : memref<?x16x32xf32>) rows %{{.*}} : memref<?x1xi64> tokens(%{{.*}} : memref<?x4xi32>) outs(%[[DF]] : memref<?x4x32xf32>) access(token -> row) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[ODY:.*]]: f32):
// CHECK-NEXT: modk.yield %[[ODY]] : f32
// CHECK-NOT: modk.scatter_grad
modk.entry @scatter_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %dy = modk.alloc : memref<?x16x32xf32>
  %r = modk.alloc : memref<?x16xf32>
  %f = modk.alloc : memref<?x4x32xf32>
  %pos = modk.alloc : memref<?x4xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %df = modk.alloc : memref<?x4x32xf32>
  %dr = modk.alloc : memref<?x16xf32>
  modk.scatter_grad(%dy, %r, %f, %pos, %seg, %df, %dr) {gate = #modk.gate<sigmoid>} : memref<?x16x32xf32>, memref<?x16xf32>, memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<?x16xf32>
  modk.scatter_grad(%dy, %r, %f, %pos, %seg, %df, %dr) {gate = #modk.gate<one>} : memref<?x16x32xf32>, memref<?x16xf32>, memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<?x16xf32>
}

// RMSNorm's gradient: two sums a row (x^2 and dy w x); dx at every element
// (here added to dx: accumulate), and dw, an output of the row width, a
// column sum of dy x / rms.
// CHECK-LABEL: modk.entry @rmsnorm_grad
// CHECK: modk.rows ins(%[[X:.*]], %[[W:.*]], %[[DY:.*]], %[[DX:.*]] : memref<?x16x32xf32>, memref<32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>) rows %{{.*}} : memref<?x1xi64> outs(%[[DX]], %[[DW:.*]] : memref<?x16x32xf32>, memref<32xf32>) access(row, column, row, row -> row, column_sum) reduce {
// CHECK-NEXT: ^bb0(%[[RX:.*]]: f32, %[[RW:.*]]: f32, %[[RDY:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[RX]], %[[RX]] : f32
// CHECK-NEXT: %[[GW:.*]] = arith.mulf %[[RDY]], %[[RW]] : f32
// CHECK-NEXT: %[[GWX:.*]] = arith.mulf %[[GW]], %[[RX]] : f32
// CHECK-NEXT: modk.yield %[[SQ]], %[[GWX]] : f32, f32
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[BX:.*]]: f32, %[[BW:.*]]: f32, %[[BDY:.*]]: f32, %[[BDX:.*]]: f32, %[[SS:.*]]: f32, %[[DOT:.*]]: f32):
// CHECK: %[[ROOT:.*]] = math.sqrt
// CHECK: %[[INV:.*]] = arith.divf %{{.*}}, %[[ROOT]] : f32
// CHECK: %[[DXV:.*]] = arith.mulf %[[INV]], %{{.*}} : f32
// CHECK-NEXT: %[[ACC:.*]] = arith.addf %[[BDX]], %[[DXV]] : f32
// CHECK-NEXT: %[[GX:.*]] = arith.mulf %[[BDY]], %[[BX]] : f32
// CHECK-NEXT: %[[DWV:.*]] = arith.mulf %[[GX]], %[[INV]] : f32
// CHECK-NEXT: modk.yield %[[ACC]], %[[DWV]] : f32, f32
// CHECK-NOT: modk.rmsnorm_grad
modk.entry @rmsnorm_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %dy = modk.alloc : memref<?x16x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %dx = modk.alloc : memref<?x16x32xf32>
  %dw = modk.output "grad.w" : memref<32xf32>
  modk.rmsnorm_grad(%x, %w, %dy, %seg, %dx, %dw) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<32xf32>
}

// The router's gradient, over every token (the identity row set, found
// before it): dx = dx + dr w with dr one value a row ([B, S]), and the
// column sum dw += dr x. No sums.
// CHECK-LABEL: modk.entry @router_grad
// CHECK: modk.identity_rows -> %{{.*}}, %[[ALL:.*]] :
// CHECK: modk.rows ins(%[[X:.*]], %[[W:.*]], %[[DR:.*]], %[[DX:.*]] : memref<?x16x32xf32>, memref<1x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>) rows %[[ALL]] : memref<?x1xi64> outs(%[[DX]], %[[DW:.*]] : memref<?x16x32xf32>, memref<1x32xf32>) access(row, column, row_value, row -> row, column_sum) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[BX:.*]]: f32, %[[BW:.*]]: f32, %[[BDR:.*]]: f32, %[[BDX:.*]]: f32):
// CHECK-NEXT: %[[STEP:.*]] = arith.mulf %[[BDR]], %[[BW]] : f32
// CHECK-NEXT: %[[NDX:.*]] = arith.addf %[[BDX]], %[[STEP]] : f32
// CHECK-NEXT: %[[NDW:.*]] = arith.mulf %[[BDR]], %[[BX]] : f32
// CHECK-NEXT: modk.yield %[[NDX]], %[[NDW]] : f32, f32
// CHECK-NOT: modk.router_grad
modk.entry @router_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "r", shape = [1, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w = modk.param "r" : memref<1x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %dr = modk.alloc : memref<?x16xf32>
  %dx = modk.alloc : memref<?x16x32xf32>
  %dw = modk.output "grad.r" : memref<1x32xf32>
  modk.router_grad(%x, %w, %dr, %dx, %dw) : memref<?x16x32xf32>, memref<1x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>, memref<1x32xf32>
}

// The embedding lookup, over every token (the identity row set, found
// before it): a modk.rows whose table input is read at each row's token
// (lookups = [table, ids]), and whose body yields the table's element.
// CHECK-LABEL: modk.entry @embed
// CHECK: modk.identity_rows -> %{{.*}}, %[[ALL:.*]] :
// CHECK: modk.rows ins(%[[TOK:.*]], %[[TABLE:.*]] : memref<?x16xi32>, memref<64x32xf32>) rows %[[ALL]] : memref<?x1xi64> outs(%[[X:.*]] : memref<?x16x32xf32>) access(ids, table -> row) reduce {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: modk.yield
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %[[E:.*]]: f32):
// CHECK-NEXT: modk.yield %[[E]] : f32
// CHECK-NOT: modk.embed
modk.entry @embed attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "embed.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %table = modk.param "embed.weight" : memref<64x32xf32>
  %tok = modk.input "tokens" : memref<?x16xi32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  modk.embed %tok, %table -> %x : memref<?x16xi32>, memref<64x32xf32>, memref<?x16x32xf32>
}

// A decode step's lookup, one token a sequence, with no identity row set
// before it: the pass makes one (T = 1) right before the lookup.
// CHECK-LABEL: modk.entry @decode_embed
// CHECK: %[[DPOS:.*]] = modk.alloc : memref<?x1xi32>
// CHECK-NEXT: %[[DSEG:.*]] = modk.alloc : memref<?x1xi64>
// CHECK-NEXT: modk.identity_rows -> %[[DPOS]], %[[DSEG]] : memref<?x1xi32>, memref<?x1xi64>
// CHECK-NEXT: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x1xi32>, memref<64x32xf32>) rows %[[DSEG]] : memref<?x1xi64> outs(%{{.*}} : memref<?x1x32xf32>) access(ids, table -> row) reduce {
modk.entry @decode_embed attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<causal>], params = [#modk.param<name = "embed.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %table = modk.param "embed.weight" : memref<64x32xf32>
  %tok = modk.input "tokens" : memref<?x1xi32>
  %x = modk.alloc : memref<?x1x32xf32>
  modk.embed %tok, %table -> %x : memref<?x1xi32>, memref<64x32xf32>, memref<?x1x32xf32>
}

// The embedding's gradient, the lookup's adjoint: a modk.rows over every
// token whose one output is the lookup's table (lookups = [2, 1]: output
// 0 after the two inputs, at the ids of input 1), a scatter-add of each
// row's element, dtable[tok] += dx.
// CHECK-LABEL: modk.entry @embed_grad
// CHECK: modk.identity_rows -> %{{.*}}, %[[GALL0:.*]] :
// CHECK: modk.rows ins(%[[GDX:.*]], %[[GTOK:.*]] : memref<?x16x32xf32>, memref<?x16xi32>) rows %[[GALL0]] : memref<?x1xi64> outs(%[[GT:.*]] : memref<64x32xf32>) access(row, ids -> scatter) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[D:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: modk.yield %[[D]] : f32
// CHECK-NOT: modk.embed_grad
modk.entry @embed_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "embed.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %dt = modk.output "grad.embed.weight" : memref<64x32xf32>
  %tok = modk.input "tokens" : memref<?x16xi32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %dx = modk.alloc : memref<?x16x32xf32>
  modk.embed_grad(%tok, %dx, %dt) : memref<?x16xi32>, memref<?x16x32xf32>, memref<64x32xf32>
}

// The predictor's gradient (its forward: generalize-predictor.mlir): fc1's
// product again (f32, never causal_only), then one row
// kernel with dz in place of h, the column sums db1 [8] and dfc2 [1, 8] and
// the row total db2 [1], each from dp, the row's one value; then
// dfc1 += dz^T x, f32.
// CHECK-LABEL: modk.entry @predictor_grad
// CHECK: modk.gemm %[[GX:.*]], [%[[GW1:.*]]] rows %[[GALL:.*]] -> %[[GH:.*]] {epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>}
// CHECK-NEXT: modk.rows ins(%[[GH]], %{{.*}}, %{{.*}}, %[[DP:.*]] : memref<?x16x8xf32>, memref<8xf32>, memref<1x8xf32>, memref<?x16xf32>) rows %[[GALL]] : memref<?x1xi64> outs(%[[GH]], %{{.*}}, %{{.*}}, %{{.*}} : memref<?x16x8xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>) access(row, column, column, row_value -> row, column_sum, column_sum, row_sum) reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32, %[[G:.*]]: f32):
// CHECK: modk.yield %[[DZ:.*]], %[[DZ]], %{{.*}}, %[[G]] : f32, f32, f32, f32
// CHECK: modk.gemm_wgrad(%[[GH]], %[[GX]], %[[GALL]], %{{.*}}) {precision = #modk.dtype<f32>}
// CHECK-NOT: modk.predictor_grad
modk.entry @predictor_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w1", shape = [8, 32], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "b1", shape = [8], init = zeros>, #modk.param<name = "w2", shape = [1, 8], init = normal, std = 2.000000e-02 : f64>, #modk.param<name = "b2", shape = [1], init = zeros>, #modk.param<name = "dw1", shape = [8, 32], init = zeros>, #modk.param<name = "db1", shape = [8], init = zeros>, #modk.param<name = "dw2", shape = [1, 8], init = zeros>, #modk.param<name = "db2", shape = [1], init = zeros>]} {
  %w1 = modk.param "w1" : memref<8x32xf32>
  %b1 = modk.param "b1" : memref<8xf32>
  %w2 = modk.param "w2" : memref<1x8xf32>
  %dw1 = modk.param "dw1" : memref<8x32xf32>
  %db1 = modk.param "db1" : memref<8xf32>
  %dw2 = modk.param "dw2" : memref<1x8xf32>
  %db2 = modk.param "db2" : memref<1xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %dp = modk.alloc : memref<?x16xf32>
  %h = modk.alloc : memref<?x16x8xf32>
  modk.predictor_grad(%x, %w1, %b1, %w2, %dp, %h, %dw1, %db1, %dw2, %db2) : memref<?x16x32xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<?x16xf32>, memref<?x16x8xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>
}

// The losses of a training entry. The cross-entropy zeroes the losses, then
// one row kernel over every token: `maxima` finds the row's maximum m, the
// sums are e^(z - m) and the target's logit (the element whose column
// equals the row's class t, an i32 read as f32), and the body writes the
// gradient of the mean, (e^(z - m) / s - [c == t]) / rows, and yields the
// row's loss / rows twice: the row totals losses[1] (ce) and losses[0]
// (total), windows of the losses. The causal-router loss adds into
// losses[2] (aux) and losses[0]; its gradient accumulates into dz in place.
// CHECK-LABEL: modk.entry @losses
// CHECK: %[[L:.*]] = modk.output "losses" : memref<3xf32>
// CHECK: modk.zero(%[[L]]) : memref<3xf32>
// CHECK-NEXT: %[[CE:.*]] = memref.subview %[[L]][1] [1] [1] : memref<3xf32> to memref<1xf32, strided<[1], offset: 1>>
// CHECK-NEXT: %[[TOT:.*]] = memref.subview %[[L]][0] [1] [1] : memref<3xf32> to memref<1xf32, strided<[1]>>
// CHECK-NEXT: modk.rows ins(%[[Z:.*]], %[[T:.*]] : memref<?x16x64xf32>, memref<?x16xi32>) rows %{{.*}} : memref<?x1xi64> outs(%[[DZ:.*]], %[[CE]], %[[TOT]] : memref<?x16x64xf32>, memref<1xf32, strided<[1], offset: 1>>, memref<1xf32, strided<[1]>>) access(row, row_value -> row, row_sum, row_sum) maxima {
// CHECK-NEXT: ^bb0(%[[MZ:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: modk.yield %[[MZ]] : f32
// CHECK-NEXT: } reduce {
// CHECK-NEXT: ^bb0(%[[RZ:.*]]: f32, %[[RT:.*]]: f32, %[[RM:.*]]: f32):
// CHECK-NEXT: %[[SH:.*]] = arith.subf %[[RZ]], %[[RM]] : f32
// CHECK-NEXT: %[[E:.*]] = math.exp %[[SH]] : f32
// CHECK-NEXT: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[COL:.*]] = modk.column : f32
// CHECK-NEXT: %[[HIT:.*]] = arith.cmpf oeq, %[[COL]], %[[RT]] : f32
// CHECK-NEXT: %[[ZT:.*]] = arith.select %[[HIT]], %[[RZ]], %[[ZERO]] : f32
// CHECK-NEXT: modk.yield %[[E]], %[[ZT]] : f32, f32
// CHECK-NEXT: } body {
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %[[BM:.*]]: f32, %[[BS:.*]]: f32, %[[BZT:.*]]: f32):
// CHECK-NEXT: %[[N:.*]] = modk.row_count : f32
// CHECK: %[[LOG:.*]] = math.log %[[BS]] : f32
// CHECK-NEXT: %[[LSE:.*]] = arith.addf %[[BM]], %[[LOG]] : f32
// CHECK-NEXT: %[[ROW:.*]] = arith.subf %[[LSE]], %[[BZT]] : f32
// CHECK-NEXT: %[[LOSS:.*]] = arith.mulf %[[ROW]], %{{.*}} : f32
// CHECK: modk.yield %{{.*}}, %[[LOSS]], %[[LOSS]] : f32, f32, f32
// CHECK: %[[AUX:.*]] = memref.subview %[[L]][2] [1] [1]
// CHECK-NEXT: %[[TOT2:.*]] = memref.subview %[[L]][0] [1] [1]
// CHECK-NEXT: modk.rows ins(%[[R:.*]], %[[Y:.*]], %[[DR:.*]] : memref<?x16xf32>, memref<?x16xi32>, memref<?x16xf32>) rows %{{.*}} : memref<?x1xi64> outs(%[[DR]], %[[AUX]], %[[TOT2]] : memref<?x16xf32>, memref<1xf32, strided<[1], offset: 2>>, memref<1xf32, strided<[1]>>) access(row_value, row_value, row_value -> row_value, row_sum, row_sum) reduce {
// CHECK: math.absf
// CHECK: math.log1p
// CHECK: arith.maxnumf
// CHECK: arith.cmpf oge
// CHECK: modk.yield %{{.*}}, %[[A:.*]], %[[W:.*]] : f32, f32, f32
// CHECK-NOT: modk.cross_entropy
// CHECK-NOT: modk.bce_loss
modk.entry @losses attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %l = modk.output "losses" : memref<3xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %z = modk.alloc : memref<?x16x64xf32>
  %t = modk.alloc : memref<?x16xi32>
  %dz = modk.alloc : memref<?x16x64xf32>
  modk.cross_entropy(%z, %t, %dz, %l) : memref<?x16x64xf32>, memref<?x16xi32>, memref<?x16x64xf32>, memref<3xf32>
  %r = modk.alloc : memref<?x16xf32>
  %y = modk.alloc : memref<?x16xi32>
  %dr = modk.alloc : memref<?x16xf32>
  modk.bce_loss(%r, %y, %dr, %l) {n_routed = 2 : i64, weight = 1.000000e-02 : f64} : memref<?x16xf32>, memref<?x16xi32>, memref<?x16xf32>, memref<3xf32>
}

// The eval entry's forms: the same kernels without the gradients.
// CHECK-LABEL: modk.entry @eval_losses
// CHECK: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x16x64xf32>, memref<?x16xi32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}}, %{{.*}} : memref<1xf32, strided<[1], offset: 1>>, memref<1xf32, strided<[1]>>) access(row, row_value -> row_sum, row_sum) maxima {
// CHECK: modk.yield %[[ELOSS:.*]], %[[ELOSS]] : f32, f32
// CHECK: modk.rows ins(%{{.*}}, %{{.*}} : memref<?x16xf32>, memref<?x16xi32>) rows %{{.*}} : memref<?x1xi64> outs(%{{.*}}, %{{.*}} : memref<1xf32, strided<[1], offset: 2>>, memref<1xf32, strided<[1]>>) access(row_value, row_value -> row_sum, row_sum) reduce {
modk.entry @eval_losses attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %l = modk.output "losses" : memref<3xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %z = modk.alloc : memref<?x16x64xf32>
  %t = modk.alloc : memref<?x16xi32>
  modk.cross_entropy_loss(%z, %t, %l) : memref<?x16x64xf32>, memref<?x16xi32>, memref<3xf32>
  %r = modk.alloc : memref<?x16xf32>
  %y = modk.alloc : memref<?x16xi32>
  modk.bce_loss_value(%r, %y, %l) {n_routed = 2 : i64, weight = 1.000000e-02 : f64} : memref<?x16xf32>, memref<?x16xi32>, memref<3xf32>
}

// RoPE's transpose: a modk.rows over heads, dx = dy cos - rotate_half(dy)
// sin, out of place (dx may be bf16).
// CHECK-LABEL: modk.entry @rope_grad
// CHECK: modk.rows ins(%[[DY:.*]] : memref<?x16x32xf32>) rows %[[RSEG:.*]] : memref<?x1xi64> tokens(%[[RPOS:.*]] : memref<?x16xi32>) outs(%[[DXB:.*]] : memref<?x16x32xbf16>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
// CHECK: } body {
// CHECK-NEXT: ^bb0(%[[GY:.*]]: f32):
// CHECK-NEXT: %[[GC:.*]], %[[GS:.*]] = modk.rope_angle {theta = 5.000000e+05 : f64} : f32, f32
// CHECK-NEXT: %[[GR:.*]] = modk.rotate_half %[[GY]] : f32
// CHECK-NEXT: %[[GRS:.*]] = arith.mulf %[[GR]], %[[GS]] : f32
// CHECK-NEXT: %[[GYC:.*]] = arith.mulf %[[GY]], %[[GC]] : f32
// CHECK-NEXT: %[[GD:.*]] = arith.subf %[[GYC]], %[[GRS]] : f32
// CHECK-NEXT: modk.yield %[[GD]] : f32
// CHECK-NOT: modk.rope_grad
modk.entry @rope_grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 5.000000e+05 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %seg = modk.alloc : memref<?x1xi64>
  %pos = modk.alloc : memref<?x16xi32>
  %dy = modk.alloc : memref<?x16x32xf32>
  %dx = modk.alloc : memref<?x16x32xbf16>
  modk.rope_grad(%dy, %pos, %seg, %dx) {n_heads = 2 : i64, rope_theta = 5.000000e+05 : f64} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xbf16>
}
