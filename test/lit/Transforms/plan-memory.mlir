// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-plan-memory))' | FileCheck %s

// A dies at the first add; C, born at the second, takes its place. Each
// [B, 16] f32 buffer needs 64 bytes a sequence, padded to 128; the segment
// buffer likewise.
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: workspace_bytes_per_sequence = 384 : i64
// CHECK: %[[A:.*]] = modk.alloc {offset = 0 : i64} : memref<?x16xf32>
// CHECK: %[[B:.*]] = modk.alloc {offset = 128 : i64} : memref<?x16xf32>
// CHECK: %[[S:.*]] = modk.alloc {offset = 256 : i64} : memref<?x1xi64>
// CHECK: %[[C:.*]] = modk.alloc {offset = 0 : i64} : memref<?x16xf32>
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %a = modk.alloc : memref<?x16xf32>
  %b = modk.alloc : memref<?x16xf32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.add %a, %a rows %seg -> %b : memref<?x16xf32>, memref<?x16xf32>, memref<?x1xi64>, memref<?x16xf32>
  %c = modk.alloc : memref<?x16xf32>
  modk.add %b, %b rows %seg -> %c : memref<?x16xf32>, memref<?x16xf32>, memref<?x1xi64>, memref<?x16xf32>
}

// -----

// Buffers live at the same time never overlap. Placement follows first use:
// the row set (written first) goes first, then x and y (1024 bytes + 64).
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: workspace_bytes_per_sequence = 2432 : i64
// CHECK: modk.alloc {offset = 256 : i64} : memref<?x16x16xf32>
// CHECK: modk.alloc {offset = 1344 : i64} : memref<?x16x16xf32>
// CHECK: modk.alloc {offset = 0 : i64} : memref<?x1xi64>
// CHECK: modk.alloc {offset = 128 : i64} : memref<?x16xi32>
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x16x16xf32>
  %y = modk.alloc : memref<?x16x16xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %pos = modk.alloc : memref<?x16xi32>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  modk.add %x, %x rows %seg -> %y : memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x1xi64>, memref<?x16x16xf32>
  modk.attention %x, %y, %y rows %pos, %seg -> %x {n_heads = 2 : i64} : memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x16x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x16xf32>
}

// -----

// First use would leave a hole: x (128 bytes) and y (128) first, then z
// (320: 256 and its padding), live with y only, fits neither below y nor
// anywhere but above it: 576 bytes. Largest first puts z at 0, x there too
// (their live ranges do not meet) and y above z: 448 bytes, the most ever
// live at once (y and z). The pass keeps the smaller plan.
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: workspace_bytes_per_sequence = 448 : i64
// CHECK: %[[X:.*]] = modk.alloc {offset = 0 : i64} : memref<?x16xf32>
// CHECK: %[[Y:.*]] = modk.alloc {offset = 320 : i64} : memref<?x16xf32>
// CHECK: %[[Z:.*]] = modk.alloc {offset = 0 : i64} : memref<?x64xf32>
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x16xf32>
  %y = modk.alloc : memref<?x16xf32>
  %z = modk.alloc : memref<?x64xf32>
  modk.copy(%x, %y) : memref<?x16xf32>, memref<?x16xf32>
  modk.zero(%x) : memref<?x16xf32>
  modk.zero(%z) : memref<?x64xf32>
  modk.zero(%y) : memref<?x16xf32>
  modk.zero(%z) : memref<?x64xf32>
}
