// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-store-bf16,modk-plan-memory))' | FileCheck %s

// A bf16 forward entry: the normalised rows (read only by GEMMs), the swiglu
// hidden rows (written by a GEMM epilogue that rounds, read by the down
// projection) and the attention output become bf16. The residual stream,
// the q/k/v rows (attention reads them), the swiglu gate scratch and the
// down projection's output (added to the stream) stay f32. bf16 buffers
// take half the bytes: 9728 a sequence against 12800 all f32.
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: dtype = "bf16"
// CHECK-SAME: workspace_bytes_per_sequence = 9728
// CHECK: %[[X:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: %[[N:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[Q:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
// CHECK: %[[O:.*]] = modk.alloc {{.*}} : memref<?x16x32xbf16>
// CHECK: %[[H:.*]] = modk.alloc {{.*}} : memref<?x16x64xbf16>
// CHECK: %[[G:.*]] = modk.alloc {{.*}} : memref<?x16x64xf32>
// CHECK: %[[D:.*]] = modk.alloc {{.*}} : memref<?x16x32xf32>
modk.entry @forward attributes {dtype = "bf16", model = "{}", modes = ["topk"], params = [{init = "ones", name = "w", shape = [32]}, {init = "ones", name = "wq", shape = [32, 32]}, {init = "ones", name = "wg", shape = [64, 32]}, {init = "ones", name = "wu", shape = [64, 32]}, {init = "ones", name = "wd", shape = [32, 64]}], seq_len = 16 : i64, vocab_size = 64 : i64} {
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
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = "none"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %o = modk.alloc : memref<?x16x32xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  %h = modk.alloc : memref<?x16x64xf32>
  %g = modk.alloc : memref<?x16x64xf32>
  modk.gemm %o, [%wg, %wu] rows %seg extra(%g) -> %h {epilogue = "swiglu"} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
  %d = modk.alloc : memref<?x16x32xf32>
  modk.gemm %h, [%wd] rows %seg -> %d {epilogue = "none"} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  modk.add %x, %d rows %seg -> %x : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}

// -----

// The same plan without dtype bf16, or as a @grad entry, keeps f32 arrays.
// CHECK-LABEL: modk.entry @forward
// CHECK-NOT: bf16
// CHECK-LABEL: modk.entry @grad
// CHECK-NOT: xbf16
modk.entry @forward attributes {model = "{}", modes = ["topk"], params = [{init = "ones", name = "w", shape = [32]}, {init = "ones", name = "wq", shape = [32, 32]}], seq_len = 16 : i64, vocab_size = 64 : i64} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = "none"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}
modk.entry @grad attributes {dtype = "bf16", model = "{}", modes = ["topk"], params = [{init = "ones", name = "w", shape = [32]}, {init = "ones", name = "wq", shape = [32, 32]}], seq_len = 16 : i64, vocab_size = 64 : i64} {
  %w = modk.param "w" : memref<32xf32>
  %wq = modk.param "wq" : memref<32x32xf32>
  %x = modk.alloc : memref<?x16x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x16x32xf32>
  modk.rmsnorm %x, %w rows %seg -> %n {eps = 1.0e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  %q = modk.alloc : memref<?x16x32xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = "none"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
}
