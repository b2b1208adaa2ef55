// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms))' 2> %t.h100.err | FileCheck %s --check-prefix=H100
// RUN: FileCheck %s --check-prefix=H100-ERR < %t.h100.err
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80}))' 2> %t.a100.err | FileCheck %s --check-prefix=A100
// RUN: FileCheck %s --check-prefix=A100-ERR < %t.a100.err
//
// Head dims above 128 take the SIMT flash-attention kernels, whose tiles
// grow with the head: a block of the forward kernel holds 200 * HD + 128
// floats. A block has at most 227 KiB on sm_90a and 163 KiB on sm_80, so
// heads of 288 (230,912 bytes) fit an H100's block, and of 208 (166,912
// bytes, exactly 163 KiB) an A100's. modk-configure-gemms refuses what
// would not start on the part, naming both limits, rather than leave it to
// a launch error on the GPU.
//
// H100-LABEL: modk.entry @heads_208
// H100: modk.attention {{.*}}mainloop = #modk.gemm_path<simt>
// H100: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<simt>
// H100-LABEL: modk.entry @heads_256
// H100: modk.attention {{.*}}mainloop = #modk.gemm_path<simt>
// H100-LABEL: modk.entry @heads_288
// H100: modk.attention {{.*}}mainloop = #modk.gemm_path<simt>
// H100-NOT: modk.entry @heads_290
// H100-ERR: error: attention over heads of 290 needs 232512 bytes of shared memory a block on the CUDA kernel for head dims above 128, more than a block of sm_90a (H100 SXM) has (232448); the CUDA target takes head dims (d_model / n_heads) up to 288 on sm_90a, 208 on sm_80
// H100-ERR-NOT: error:
//
// A100-LABEL: modk.entry @heads_208
// A100: modk.attention {{.*}}mainloop = #modk.gemm_path<simt>
// A100: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<simt>
// A100-NOT: modk.entry
// A100-ERR: error: attention over heads of 256 needs 205312 bytes of shared memory a block on the CUDA kernel for head dims above 128, more than a block of sm_80 (A100 SXM) has (166912); the CUDA target takes head dims (d_model / n_heads) up to 288 on sm_90a, 208 on sm_80
// A100-ERR: error: attention over heads of 288 needs 230912 bytes
// A100-ERR: error: attention over heads of 290 needs 232512 bytes

modk.entry @heads_208 attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 416, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x416xf32>
  %o = modk.alloc : memref<?x16x416xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x416xf32>
  modk.attention_grad(%q, %q, %q, %o, %o, %pos, %seg, %q, %q, %q) {n_heads = 2 : i64} : memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x416xf32>, memref<?x16x416xf32>, memref<?x16x416xf32>
}

// -----

modk.entry @heads_256 attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 512, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x512xf32>
  %o = modk.alloc : memref<?x16x512xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x512xf32>, memref<?x16x512xf32>, memref<?x16x512xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x512xf32>
}

// -----

modk.entry @heads_288 attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 576, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x576xf32>
  %o = modk.alloc : memref<?x16x576xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x576xf32>, memref<?x16x576xf32>, memref<?x16x576xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x576xf32>
}

// -----

modk.entry @heads_290 attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 580, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x580xf32>
  %o = modk.alloc : memref<?x16x580xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x580xf32>, memref<?x16x580xf32>, memref<?x16x580xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x580xf32>
}
