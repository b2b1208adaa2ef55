// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{attention=wgmma}))' | FileCheck %s --check-prefix=WGMMA
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms))' | FileCheck %s --check-prefix=AUTO
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{attention=wgmma path=simt}))' | FileCheck %s --check-prefix=SIMT
// RUN: not mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80 attention=wgmma}))' 2>&1 | FileCheck %s --check-prefix=SM80
// RUN: not mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{attention=fast}))' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{attention=wgmma},modk-plan-memory))' -o %t.mlir
// RUN: not mod-translate --split-input-file --modk-to-cuda --cuda-arch=sm_80 %t.mlir 2>&1 | FileCheck %s --check-prefix=EMIT80
//
// attention=wgmma puts attention and its gradient whose q, k and v are
// stored bf16 at head dims 64 and 128 on the TMA and wgmma kernels
// (sm_90a); f32 q/k/v, other head dims and sm_80 keep mma.sync. The
// default stays mma.sync until the kernels have run on a GPU
// (docs/cuda.md).
//
// WGMMA-LABEL: modk.entry @bf16_hd64
// WGMMA: modk.attention {{.*}}mainloop = #modk.gemm_path<wgmma>
// The gradient of f32 q, k, v:
// WGMMA: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<mma>
// WGMMA-LABEL: modk.entry @bf16_hd128_gqa
// WGMMA: modk.attention {{.*}}mainloop = #modk.gemm_path<wgmma>
// WGMMA-LABEL: modk.entry @bf16_hd32
// WGMMA: modk.attention {{.*}}mainloop = #modk.gemm_path<mma>
// WGMMA-LABEL: modk.entry @f32_hd64
// WGMMA: modk.attention {{.*}}mainloop = #modk.gemm_path<mma>
// WGMMA-LABEL: modk.entry @grad_bf16_hd64_gqa
// WGMMA: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<wgmma>
// WGMMA-LABEL: modk.entry @grad_bf16_hd128
// WGMMA: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<wgmma>
// WGMMA-LABEL: modk.entry @grad_bf16_hd32
// WGMMA: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<mma>
//
// AUTO-LABEL: modk.entry @bf16_hd64
// AUTO: modk.attention {{.*}}mainloop = #modk.gemm_path<mma>
// AUTO-LABEL: modk.entry @bf16_hd128_gqa
// AUTO: modk.attention {{.*}}mainloop = #modk.gemm_path<mma>
// AUTO-LABEL: modk.entry @grad_bf16_hd64_gqa
// AUTO: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<mma>
//
// SIMT-LABEL: modk.entry @bf16_hd64
// SIMT: modk.attention {{.*}}mainloop = #modk.gemm_path<simt>
// SIMT-LABEL: modk.entry @grad_bf16_hd64_gqa
// SIMT: modk.attention_grad{{.*}}mainloop = #modk.gemm_path<simt>
//
// SM80: modk-configure-gemms: attention=wgmma needs sm_90a; sm_80 has no wgmma
// BAD: modk-configure-gemms: attention 'fast'; expected auto or wgmma
// The emitter refuses the kernel for another arch than it was chosen for.
// EMIT80: error: the wgmma attention kernel needs sm_90a, not sm_80: run modk-configure-gemms{arch=sm_80}
// EMIT80: error: the wgmma attention gradient kernel needs sm_90a, not sm_80: run modk-configure-gemms{arch=sm_80}

modk.entry @bf16_hd64 attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x128xbf16>
  %o = modk.alloc : memref<?x16x128xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x128xbf16>, memref<?x16x128xbf16>, memref<?x16x128xbf16>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x128xf32>
  %f = modk.alloc : memref<?x16x128xf32>
  modk.attention_grad(%f, %f, %f, %o, %o, %pos, %seg, %f, %f, %f) {n_heads = 2 : i64} : memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>
}

// -----

modk.entry @bf16_hd128_gqa attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 512, n_layers = 1, n_heads = 4, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x512xbf16>
  %kv = modk.alloc : memref<?x16x256xbf16>
  %o = modk.alloc : memref<?x16x512xbf16>
  modk.attention %q, %kv, %kv rows %pos, %seg -> %o {n_heads = 4 : i64, kv_heads = 2 : i64} : memref<?x16x512xbf16>, memref<?x16x256xbf16>, memref<?x16x256xbf16>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x512xbf16>
}

// -----

modk.entry @bf16_hd32 attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 64, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x64xbf16>
  %o = modk.alloc : memref<?x16x64xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x64xbf16>, memref<?x16x64xbf16>, memref<?x16x64xbf16>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x64xf32>
}

// -----

modk.entry @f32_hd64 attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x128xf32>
  %o = modk.alloc : memref<?x16x128xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %o {n_heads = 2 : i64} : memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x128xf32>
}

// -----

// A package's entries: the emitter refuses the gradient's kernel on sm_80.
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 256, n_layers = 1, n_heads = 4, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
}

modk.entry @grad_bf16_hd64_gqa attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 256, n_layers = 1, n_heads = 4, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x256xbf16>
  %kv = modk.alloc : memref<?x16x128xbf16>
  %o = modk.alloc : memref<?x16x256xf32>
  %dq = modk.alloc : memref<?x16x256xf32>
  %dkv = modk.alloc : memref<?x16x128xf32>
  modk.attention_grad(%q, %kv, %kv, %o, %o, %pos, %seg, %dq, %dkv, %dkv) {n_heads = 4 : i64} : memref<?x16x256xbf16>, memref<?x16x128xbf16>, memref<?x16x128xbf16>, memref<?x16x256xf32>, memref<?x16x256xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x256xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>
}

// -----

modk.entry @grad_bf16_hd128 attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 256, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x256xbf16>
  %kv = modk.alloc : memref<?x16x256xbf16>
  %o = modk.alloc : memref<?x16x256xf32>
  %dq = modk.alloc : memref<?x16x256xf32>
  %dkv = modk.alloc : memref<?x16x256xf32>
  modk.attention_grad(%q, %kv, %kv, %o, %o, %pos, %seg, %dq, %dkv, %dkv) {n_heads = 2 : i64} : memref<?x16x256xbf16>, memref<?x16x256xbf16>, memref<?x16x256xbf16>, memref<?x16x256xf32>, memref<?x16x256xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x256xf32>, memref<?x16x256xf32>, memref<?x16x256xf32>
}

// -----

modk.entry @grad_bf16_hd32 attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 64, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %q = modk.alloc : memref<?x16x64xbf16>
  %kv = modk.alloc : memref<?x16x64xbf16>
  %o = modk.alloc : memref<?x16x64xf32>
  %dq = modk.alloc : memref<?x16x64xf32>
  %dkv = modk.alloc : memref<?x16x64xf32>
  modk.attention_grad(%q, %kv, %kv, %o, %o, %pos, %seg, %dq, %dkv, %dkv) {n_heads = 2 : i64} : memref<?x16x64xbf16>, memref<?x16x64xbf16>, memref<?x16x64xbf16>, memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x16x64xf32>
}
