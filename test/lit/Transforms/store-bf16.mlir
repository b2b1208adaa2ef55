// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-store-bf16,modk-plan-memory))' | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-store-bf16))' | FileCheck %s --check-prefix=ROUND
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-store-bf16{activations=false}))' | FileCheck %s --check-prefix=F32ACT

// The prefixes ROUND and F32ACT check that the pass also decides which GEMMs round their output to
// bf16 values as they store it (round_bf16): the one whose output attention
// reads as q, k and v, not the swiglu or down projections, whose outputs
// have other readers. That is the model's semantics, so it is decided with
// activations=false (modc --f32-activations) too, where every buffer stays
// f32.
// ROUND-LABEL: modk.entry @forward
// ROUND: modk.gemm {{.*}} -> %{{.*}} {epilogue = #modk.epilogue<none>, round_bf16}
// ROUND: modk.gemm {{.*}} {epilogue = #modk.epilogue<swiglu>} :
// ROUND: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} :
// F32ACT-LABEL: modk.entry @forward
// F32ACT-NOT: xbf16>
// F32ACT: modk.gemm {{.*}} -> %{{.*}} {epilogue = #modk.epilogue<none>, round_bf16} : memref<?x16x32xf32>
// F32ACT-NOT: xbf16>
// F32ACT: modk.gemm {{.*}} {epilogue = #modk.epilogue<swiglu>} :
// F32ACT: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} :

// A bf16 forward entry: the normalised rows (read only by GEMMs), the q/k/v
// rows (written rounded, round_bf16, and read only by attention), the swiglu
// hidden rows (written by a GEMM epilogue that rounds, read by the down
// projection) and the attention output become bf16. The residual stream,
// the swiglu gate scratch and the down projection's output (added to the
// stream) stay f32. bf16 buffers take half the bytes: 9600 a sequence
// against 12672 all f32 (the bf16 q/k/v rows share bytes that other
// buffers need at the peak either way).
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: dtype = bf16
// CHECK-SAME: workspace_bytes_per_sequence = 9600
// CHECK: %[[X:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: %[[N:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[Q:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.gemm %[[N]], [%{{.*}}] rows %{{.*}} -> %[[Q]] {epilogue = #modk.epilogue<none>, round_bf16}
// CHECK: %[[O:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.attention %[[Q]], %[[Q]], %[[Q]] rows {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>, memref<?x16x32xbf16>,
// CHECK: %[[H:.*]] = modk.alloc {{.*}} : memref<?x16x64xbf16>
// CHECK: %[[G:.*]] = modk.alloc {{.*}} : memref<?x16x64xf32>
// CHECK: %[[D:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32], init = ones>, #modk.param<name = "wq", shape = [32, 32], init = ones>, #modk.param<name = "wg", shape = [64, 32], init = ones>, #modk.param<name = "wu", shape = [64, 32], init = ones>, #modk.param<name = "wd", shape = [32, 64], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %wg = modk.param "wg" : memref<64x32xf32>
  %wu = modk.param "wu" : memref<64x32xf32>
  %wd = modk.param "wd" : memref<32x64xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  %h = modk.alloc : memref<?x16x64xf32>
  %g = modk.alloc : memref<?x16x64xf32>
  modk.gemm %o, [%wg, %wu] rows %seg extra(%g) -> %h {epilogue = #modk.epilogue<swiglu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
  %d = modk.alloc : memref<?x16x32xf32>
  modk.gemm %h, [%wd] rows %seg -> %d {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.add %x, %d rows %seg -> %x : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// The same plan without dtype bf16 keeps f32 arrays and rounds nothing.
// CHECK-LABEL: modk.entry @forward
// CHECK-NOT: bf16
// ROUND-LABEL: modk.entry @forward
// ROUND-NOT: round_bf16
// ROUND-LABEL: modk.entry @grad
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32], init = ones>, #modk.param<name = "wq", shape = [32, 32], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// A bf16 @grad entry: the weight gradient reads the activations as a
// product operand, so the normalised rows (read by the forward GEMMs and
// by gemm_wgrad) and the swiglu output (written by the out-of-place
// activation) become bf16. So do the gradients of the pre-activations, of
// the values and the rotated gradient of the queries (rope_grad's output),
// which their writers round and only the backward products read, the
// queries (rounded by their product, read by attention and attention_grad)
// and attention's output (attention_grad's D reads it rounded, as the
// products do). The pre-activations stay f32 (activation_grad reads them),
// and so do the output
// gradient (attention_grad and activation_grad read it), the queries'
// gradient before the rotation (rope_grad reads it) and a gradient that
// rope_grad rotates in place (the keys'), and the logits.
// CHECK-LABEL: modk.entry @grad
// CHECK: %[[N:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[Q:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[O:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[G:.*]] = modk.alloc {{.*}} : memref<?x16x64xf32>
// CHECK: %[[U:.*]] = modk.alloc {{.*}} : memref<?x16x64xf32>
// CHECK: %[[H:.*]] = modk.alloc {{.*}} : memref<?x16x64xbf16>
// CHECK: modk.activation(%[[G]], %[[U]], %{{.*}}, %[[H]])
// CHECK: %[[DD:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: modk.gemm_wgrad(%[[DD]], %[[H]], %{{.*}}, %{{.*}}) : memref<?x16x32xf32>, memref<?x16x64xbf16>
// CHECK: %[[DH:.*]] = modk.alloc {{.*}} : memref<?x16x64xf32>
// CHECK: modk.gemm_dgrad(%[[DD]], %{{.*}}, %{{.*}}, %[[DH]]) {{.*}} : memref<?x16x32xf32>
// CHECK: %[[DG:.*]] = modk.alloc {{.*}} : memref<?x16x64xbf16>
// CHECK: %[[DU:.*]] = modk.alloc {{.*}} : memref<?x16x64xbf16>
// CHECK: modk.activation_grad(%[[G]], %[[U]], %[[DH]], %{{.*}}, %[[DG]], %[[DU]])
// CHECK: modk.gemm_wgrad(%[[DG]], %[[N]], %{{.*}}, %{{.*}}) : memref<?x16x64xbf16>, memref<?x16x32xbf16>
// CHECK: modk.gemm_dgrad(%[[DU]], {{.*}} : memref<?x16x64xbf16>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
// CHECK: %[[DQ:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: %[[DK:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: %[[DV:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.attention_grad(%[[Q]], %[[Q]], %[[Q]], %[[O]], %[[DD]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>, memref<?x16x32xbf16>, memref<?x16x32xbf16>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xbf16>
// CHECK: modk.gemm_wgrad(%[[DD]], %[[O]], %{{.*}}, %{{.*}}) : memref<?x16x32xf32>, memref<?x16x32xbf16>
// CHECK: %[[DQR:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.rope_grad(%[[DQ]], %{{.*}}, %{{.*}}, %[[DQR]]) {{.*}} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xbf16>
// CHECK: modk.gemm_wgrad(%[[DQR]], %[[N]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>
// CHECK: modk.rope_grad(%[[DK]], %{{.*}}, %{{.*}}, %[[DK]]) {{.*}} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
// CHECK: modk.gemm_wgrad(%[[DK]], %[[N]], {{.*}} : memref<?x16x32xf32>, memref<?x16x32xbf16>
// CHECK: modk.gemm_wgrad(%[[DV]], %[[N]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>
// A copy of the output gradient (a dense block's branch) and an out-of-place
// sum (a routed block's two paths) that only products read are rounding
// writes; a sum in place stays f32 (the buffer is read as an operand).
// CHECK: %[[DB:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.copy(%[[DD]], %[[DB]]) : memref<?x16x32xf32>, memref<?x16x32xbf16>
// CHECK: modk.gemm_wgrad(%[[DB]], %[[N]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>
// CHECK: %[[DS:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.add %[[DD]], %[[DD]] rows %{{.*}} -> %[[DS]] : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xbf16>
// CHECK: modk.gemm_wgrad(%[[DS]], %[[N]], {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>
// CHECK: %[[DI:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: modk.add %[[DI]], %[[DD]] rows %{{.*}} -> %[[DI]] : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
// CHECK: modk.gemm_wgrad(%[[DI]], %[[N]], {{.*}} : memref<?x16x32xf32>, memref<?x16x32xbf16>
// The logits' gradient, which cross_entropy rounds and the head's products
// read; the logits stay f32.
// CHECK: %[[L:.*]] = modk.alloc {{.*}} : memref<?x16x64xf32>
// CHECK: %[[DL:.*]] = modk.alloc {{.*}} : memref<?x16x64xbf16>
// CHECK: modk.cross_entropy(%[[L]], %{{.*}}, %[[DL]], %{{.*}}) : memref<?x16x64xf32>, memref<?x16xi32>, memref<?x16x64xbf16>, memref<3xf32>
// CHECK: modk.gemm_wgrad(%[[DL]], %[[N]], {{.*}} : memref<?x16x64xbf16>, memref<?x16x32xbf16>
// CHECK-NOT: xbf16
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32], init = ones>, #modk.param<name = "wq", shape = [32, 32], init = ones>, #modk.param<name = "wg", shape = [64, 32], init = ones>, #modk.param<name = "wu", shape = [64, 32], init = ones>, #modk.param<name = "wd", shape = [32, 64], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %wg = modk.param "wg" : memref<64x32xf32>
  %wu = modk.param "wu" : memref<64x32xf32>
  %wd = modk.param "wd" : memref<32x64xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  %g = modk.alloc : memref<?x16x64xf32>
  modk.gemm %n, [%wg] rows %seg -> %g {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  %u = modk.alloc : memref<?x16x64xf32>
  modk.gemm %n, [%wu] rows %seg -> %u {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  %h = modk.alloc : memref<?x16x64xf32>
  modk.activation(%g, %u, %seg, %h) {kind = #modk.activation<swiglu>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  %dd = modk.alloc : memref<?x16x32xf32>
  modk.gemm %h, [%wd] rows %seg -> %dd {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %dwd = modk.output "grad.wd" : memref<32x64xf32>
  modk.gemm_wgrad(%dd, %h, %seg, %dwd) : memref<?x16x32xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<32x64xf32>
  %dh = modk.alloc : memref<?x16x64xf32>
  modk.gemm_dgrad(%dd, %wd, %seg, %dh) {accumulate = false} : memref<?x16x32xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  %dgate = modk.alloc : memref<?x16x64xf32>
  %dup = modk.alloc : memref<?x16x64xf32>
  modk.activation_grad(%g, %u, %dh, %seg, %dgate, %dup) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
  %dwg = modk.output "grad.wg" : memref<64x32xf32>
  modk.gemm_wgrad(%dgate, %n, %seg, %dwg) : memref<?x16x64xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<64x32xf32>
  %dn = modk.alloc : memref<?x16x32xf32>
  modk.gemm_dgrad(%dup, %wu, %seg, %dn) {accumulate = false} : memref<?x16x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %dq = modk.alloc : memref<?x16x32xf32>
  %dk = modk.alloc : memref<?x16x32xf32>
  %dv = modk.alloc : memref<?x16x32xf32>
  modk.attention_grad(%q, %q, %q, %o, %dd, %pos, %seg, %dq, %dk, %dv) {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>
  %dwq = modk.output "grad.wq" : memref<32x32xf32>
  modk.gemm_wgrad(%dd, %o, %seg, %dwq) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  %dqr = modk.alloc : memref<?x16x32xf32>
  modk.rope_grad(%dq, %pos, %seg, %dqr) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  %dwq2 = modk.output "grad.wq2" : memref<32x32xf32>
  modk.gemm_wgrad(%dqr, %n, %seg, %dwq2) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  modk.rope_grad(%dk, %pos, %seg, %dk) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  %dwk = modk.output "grad.wk" : memref<32x32xf32>
  modk.gemm_wgrad(%dk, %n, %seg, %dwk) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  %dwv = modk.output "grad.wv" : memref<32x32xf32>
  modk.gemm_wgrad(%dv, %n, %seg, %dwv) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  %dbranch = modk.alloc : memref<?x16x32xf32>
  modk.copy(%dd, %dbranch) : memref<?x16x32xf32>, memref<?x16x32xf32>
  %dwo = modk.output "grad.wo" : memref<32x32xf32>
  modk.gemm_wgrad(%dbranch, %n, %seg, %dwo) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  %dsum = modk.alloc : memref<?x16x32xf32>
  modk.add %dd, %dd rows %seg -> %dsum : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %dwo3 = modk.output "grad.wo3" : memref<32x32xf32>
  modk.gemm_wgrad(%dsum, %n, %seg, %dwo3) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  %dinplace = modk.alloc : memref<?x16x32xf32>
  modk.add %dinplace, %dd rows %seg -> %dinplace : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %dwo4 = modk.output "grad.wo4" : memref<32x32xf32>
  modk.gemm_wgrad(%dinplace, %n, %seg, %dwo4) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
  %logits = modk.alloc : memref<?x16x64xf32>
  %losses = modk.output "losses" : memref<3xf32>
  %dlogits = modk.alloc : memref<?x16x64xf32>
  modk.cross_entropy(%logits, %pos, %dlogits, %losses) : memref<?x16x64xf32>, memref<?x16xi32>, memref<?x16x64xf32>, memref<3xf32>
  %dwe = modk.output "grad.we" : memref<64x32xf32>
  modk.gemm_wgrad(%dlogits, %n, %seg, %dwe) : memref<?x16x64xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<64x32xf32>
}

// -----

// Queries, keys and values are bf16 where every write stores bf16 values
// (a product the pass marks round_bf16) and every read takes bf16:
// attention and the KV cache's appends. Not with activations=false.
// CHECK-LABEL: modk.entry @forward
// CHECK: %[[N:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[O:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: %[[Q:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.gemm %{{.*}} -> %[[Q]] {epilogue = #modk.epilogue<none>, round_bf16}
// CHECK: %[[K:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[V:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: modk.attention %[[Q]], %[[K]], %[[V]] {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>, memref<?x16x32xbf16>,
// CHECK: modk.cache_append %[[K]], %[[V]] {{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>,
// F32ACT-LABEL: modk.entry @forward
// F32ACT-NOT: xbf16>
// F32ACT: modk.cache_append
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32], init = ones>, #modk.param<name = "wq", shape = [32, 32], init = ones>, #modk.param<name = "wk", shape = [32, 32], init = ones>, #modk.param<name = "wv", shape = [32, 32], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %wk = modk.param "wk" : memref<32x32xf32>
  %wv = modk.param "wv" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %k = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wk] rows %seg -> %k {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.attention %q, %k, %v rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.cache_append %k, %v rows %pos, %seg {layer = 0 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>
}

// -----

// The queries and keys that RoPE's epilogue writes are bf16 like the
// values: the epilogue rounds after the rotation (where the CUDA GEMM's
// tile cannot hold it, the emitter stages the f32 product in the entry's
// scratch). What stays f32: an attention's inputs where one is written
// without rounding (an RMSNorm's output would be rounded: new values),
// all of them (bf16 together or not at all).
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.gemm {{.*}} -> %[[Q:[0-9]+]] {epilogue = #modk.epilogue<rope>, {{.*}}, round_bf16} : memref<?x16x32xbf16>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xbf16>
// CHECK: modk.gemm {{.*}} -> %[[K:[0-9]+]] {epilogue = #modk.epilogue<rope>, {{.*}}, round_bf16} : memref<?x16x32xbf16>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xbf16>
// CHECK: modk.attention %[[Q]], %[[K]], %{{.*}} : memref<?x16x32xbf16>, memref<?x16x32xbf16>, memref<?x16x32xbf16>,
// CHECK: modk.attention {{.*}} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>,
// F32ACT-NOT: xbf16>
// F32ACT: modk.gemm {{.*}} {epilogue = #modk.epilogue<rope>, {{.*}}, round_bf16} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
// F32ACT-NOT: xbf16>
// F32ACT: modk.attention
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [32], init = ones>, #modk.param<name = "wq", shape = [32, 32], init = ones>, #modk.param<name = "wk", shape = [32, 32], init = ones>, #modk.param<name = "wv", shape = [32, 32], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %wk = modk.param "wk" : memref<32x32xf32>
  %wv = modk.param "wv" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg extra(%pos) -> %q {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
  %k = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wk] rows %seg extra(%pos) -> %k {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.attention %q, %k, %v rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q2 = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q2 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %v2 = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %v2 {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.attention %q2, %q2, %v2 rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// A decode step's queries, keys and values, read by decode_attention
// (which appends the keys and values to the cache). Its output, which an
// add reads here, stays f32 (the next case has wo's product read it).
// CHECK-LABEL: modk.entry @decode
// CHECK-COUNT-3: modk.gemm {{.*}} round_bf16} : memref<?x1x32xbf16>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xbf16>
// CHECK: modk.decode_attention({{.*}}) {{.*}} : memref<?x1x32xbf16>, memref<?x1x32xbf16>, memref<?x1x32xbf16>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi8>, memref<?x1x32xf32>
// F32ACT-LABEL: modk.entry @decode
// F32ACT-NOT: xbf16>
// F32ACT: modk.decode_attention
modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<causal>], params = [#modk.param<name = "w", shape = [32], init = ones>, #modk.param<name = "wq", shape = [32, 32], init = ones>, #modk.param<name = "wk", shape = [32, 32], init = ones>, #modk.param<name = "wv", shape = [32, 32], init = ones>]} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %wk = modk.param "wk" : memref<32x32xf32>
  %wv = modk.param "wv" : memref<32x32xf32>
  %x = modk.alloc : memref<?x1x32xf32>
  %pos = modk.alloc : memref<?x1xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %active = modk.alloc : memref<?x1xi8>
  %n = modk.alloc : memref<?x1x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x1x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %q = modk.alloc : memref<?x1x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %k = modk.alloc : memref<?x1x32xf32>
  modk.gemm %n, [%wk] rows %seg -> %k {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %v = modk.alloc : memref<?x1x32xf32>
  modk.gemm %n, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %o = modk.alloc : memref<?x1x32xf32>
  modk.decode_attention(%q, %k, %v, %pos, %seg, %active, %o) {layer = 0 : i64, n_heads = 2 : i64} : memref<?x1x32xf32>, memref<?x1x32xf32>, memref<?x1x32xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi8>, memref<?x1x32xf32>
  modk.add %x, %o rows %seg -> %x : memref<?x1x32xf32>, memref<?x1x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
}

// -----

// Decode attention's output where only wo's product reads it: bf16, which
// decode_attention rounds as it stores (as attention does in the forward).
// CHECK-LABEL: modk.entry @decode_wo
// CHECK: modk.decode_attention({{.*}}) {{.*}} : memref<?x1x32xbf16>, memref<?x1x32xbf16>, memref<?x1x32xbf16>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi8>, memref<?x1x32xbf16>
// CHECK: modk.gemm {{.*}} : memref<?x1x32xbf16>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
// F32ACT-LABEL: modk.entry @decode_wo
// F32ACT-NOT: xbf16>
modk.entry @decode_wo attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<causal>], params = [#modk.param<name = "wq", shape = [32, 32], init = ones>, #modk.param<name = "wk", shape = [32, 32], init = ones>, #modk.param<name = "wv", shape = [32, 32], init = ones>, #modk.param<name = "wo", shape = [32, 32], init = ones>]} {
  %wq = modk.param "wq" : memref<32x32xf32>
  %wk = modk.param "wk" : memref<32x32xf32>
  %wv = modk.param "wv" : memref<32x32xf32>
  %wo = modk.param "wo" : memref<32x32xf32>
  %n = modk.alloc : memref<?x1x32xf32>
  %x = modk.alloc : memref<?x1x32xf32>
  %pos = modk.alloc : memref<?x1xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %active = modk.alloc : memref<?x1xi8>
  %q = modk.alloc : memref<?x1x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %k = modk.alloc : memref<?x1x32xf32>
  modk.gemm %n, [%wk] rows %seg -> %k {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %v = modk.alloc : memref<?x1x32xf32>
  modk.gemm %n, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
  %o = modk.alloc : memref<?x1x32xf32>
  modk.decode_attention(%q, %k, %v, %pos, %seg, %active, %o) {layer = 0 : i64, n_heads = 2 : i64} : memref<?x1x32xf32>, memref<?x1x32xf32>, memref<?x1x32xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi8>, memref<?x1x32xf32>
  modk.gemm %o, [%wo] rows %seg -> %x {epilogue = #modk.epilogue<none>} : memref<?x1x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x1x32xf32>
}
