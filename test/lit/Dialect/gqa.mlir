// Grouped-query attention (docs/model-format.md section 3): the verifiers of
// mod.model's n_kv_heads and of the attention ops' key/value widths.
// RUN: mod-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// Two key/value heads of four: k and v are [rows, 2 * 8].
// CHECK-LABEL: mod.model @gqa
// CHECK-SAME: n_kv_heads = 2 : i64
mod.model @gqa attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 4 : i64, n_kv_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
}

// -----

// expected-error @+1 {{n_kv_heads (3) must be positive and divide n_heads (4)}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 4 : i64, n_kv_heads = 3 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
}

// -----

// expected-error @+1 {{n_kv_heads (0) must be positive and divide n_heads (4)}}
mod.model @m attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 4 : i64, n_kv_heads = 0 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
}

// -----

// Multi-query (one key/value head) and grouped-query attention verify.
// CHECK-LABEL: func.func @attention_kv_heads
// CHECK: modk.attention {{.*}} {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x8xf32>, memref<?x16x8xf32>
// CHECK: modk.attention {{.*}} {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>
func.func @attention_kv_heads(%q: memref<?x16x32xf32>, %k1: memref<?x16x8xf32>, %k2: memref<?x16x16xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>, %o: memref<?x16x32xf32>) {
  modk.attention %q, %k1, %k1 rows %pos, %seg -> %o {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x8xf32>, memref<?x16x8xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.attention %q, %k2, %k2 rows %pos, %seg -> %o {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

// Three key/value heads do not divide four heads.
func.func @attention_kv_not_dividing(%q: memref<?x16x32xf32>, %k: memref<?x16x24xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>, %o: memref<?x16x32xf32>) {
  // expected-error @+1 {{k's width 24 must be n_kv_heads heads of 8, n_kv_heads dividing n_heads (4)}}
  modk.attention %q, %k, %k rows %pos, %seg -> %o {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x24xf32>, memref<?x16x24xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

// Not whole heads.
func.func @attention_kv_partial_head(%q: memref<?x16x32xf32>, %k: memref<?x16x12xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>, %o: memref<?x16x32xf32>) {
  // expected-error @+1 {{k's width 12 must be n_kv_heads heads of 8}}
  modk.attention %q, %k, %k rows %pos, %seg -> %o {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x12xf32>, memref<?x16x12xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

func.func @attention_kv_widths(%q: memref<?x16x32xf32>, %k: memref<?x16x16xf32>, %v: memref<?x16x8xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>, %o: memref<?x16x32xf32>) {
  // expected-error @+1 {{k and v must have one width}}
  modk.attention %q, %k, %v rows %pos, %seg -> %o {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x8xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

func.func @attention_output_width(%q: memref<?x16x32xf32>, %k: memref<?x16x16xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>, %o: memref<?x16x16xf32>) {
  // expected-error @+1 {{q and output must have one width}}
  modk.attention %q, %k, %k rows %pos, %seg -> %o {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x16xf32>
  return
}

// -----

// The gradient: dq has q's width, dk and dv k's.
func.func @attention_grad_widths(%q: memref<?x16x32xf32>, %k: memref<?x16x16xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>, %dk: memref<?x16x32xf32>) {
  // expected-error @+1 {{dk and dv must have k's width}}
  modk.attention_grad(%q, %k, %k, %q, %q, %pos, %seg, %q, %dk, %k) {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @attention_grad_gqa
// CHECK: modk.attention_grad
func.func @attention_grad_gqa(%q: memref<?x16x32xf32>, %k: memref<?x16x16xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>) {
  modk.attention_grad(%q, %k, %k, %q, %q, %pos, %seg, %q, %k, %k) {n_heads = 4 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>
  return
}

// -----

func.func @decode_attention_kv(%q: memref<?x1x32xf32>, %k: memref<?x1x24xf32>, %pos: memref<?x1xi32>, %seg: memref<?x1xi64>, %active: memref<?x1xi8>) {
  // expected-error @+1 {{k's width 24 must be n_kv_heads heads of 8, n_kv_heads dividing n_heads (4)}}
  modk.decode_attention(%q, %k, %k, %pos, %seg, %active, %q) {layer = 0 : i64, n_heads = 4 : i64} : memref<?x1x32xf32>, memref<?x1x24xf32>, memref<?x1x24xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi8>, memref<?x1x32xf32>
  return
}
