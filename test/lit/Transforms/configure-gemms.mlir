// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms))' | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80}))' | FileCheck %s --check-prefix=A100
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{sm-count=114}))' | FileCheck %s --check-prefix=SMS
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{path=mma tma=false tile=large wgrad-chunk-rows=64 gather-blocks=3}))' | FileCheck %s --check-prefix=PINNED
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{path=simt}))' | FileCheck %s --check-prefix=SIMT
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_70}))' 2>&1 | FileCheck %s --check-prefix=BADARCH
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80 path=wgmma}))' 2>&1 | FileCheck %s --check-prefix=NOWGMMA
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{sm-count=40}))' | FileCheck %s --check-prefix=FEWSMS
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{gather-blocks=-1}))' 2>&1 | FileCheck %s --check-prefix=BADBLOCKS
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{stream-rows=16}))' | FileCheck %s --check-prefix=STREAM16
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{stream-rows=0}))' | FileCheck %s --check-prefix=NOSTREAM
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{stream-rows=-2}))' 2>&1 | FileCheck %s --check-prefix=BADSTREAM
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{stream-simt-rows=0}))' | FileCheck %s --check-prefix=MMAONLY
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{stream-simt-rows=64}))' | FileCheck %s --check-prefix=SIMTONLY
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{stream-simt-rows=-1}))' 2>&1 | FileCheck %s --check-prefix=BADSIMT

// A bf16 training entry on sm_90a (132 SMs). The forward products of up to
// 64 rows (decode-sized) take the few-row kernel (stream), whatever their
// epilogue (the mma.sync variant below 64 rows goes), then wgmma (from 65;
// the input gradient's from 64, below it mma.sync), and the large tile
// from the rows where it still gives a wave of CTAs: 132 CTAs of 128 x 128
// over 128 columns need 131 * 128 + 1 rows. The gradients' products never
// take the few-row kernel (it reads the reduction contiguous).
// - The queries (RoPE, heads of 64): the few-row kernel and the wgmma
//   tiles hold it (no mma.sync tile does: see stream-rows=16 below). Their bf16-stored input is fed by TMA on a persistent
//   grid of two CTAs an SM on the small tile, one on the large.
// - An f32-stored input cannot be read by TMA: the same kernels without it.
// - The weight gradient of a 128 x 64 weight has 128 rows of output, known
//   statically: one variant. Its two 64 x 64 output tiles split the rows in
//   up to 132 chunks (two waves); a 2048 x 2048 weight's 1024 tiles do not.
// - The predictor's products, f32 in a bf16 entry (precision, set by
//   modk-generalize): mma.sync, two waves of 64 x 64 CTAs, and its weight
//   gradient on mma.sync where the entry's bf16 ones take wgmma.
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.gemm %{{.*}} -> %[[Q:.*]] {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, epilogue = #modk.epilogue<rows>
// CHECK: modk.gemm %{{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64, from 16769: wgmma 128x128>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 33665: mma 128x128>, epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>}
// CHECK-NEXT: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 64x64, split 264>, precision = #modk.dtype<f32>}
// Attention: the mma.sync flash kernels for heads of 64; heads of 12 are
// no multiple of 8: SIMT.
// CHECK: modk.attention {{.*}} {mainloop = #modk.gemm_path<mma>, n_heads = 2 : i64}
// CHECK: modk.attention {{.*}} {mainloop = #modk.gemm_path<simt>, n_heads = 2 : i64}
// CHECK: modk.gemm_dgrad{{.*}} {accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>}
// CHECK: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<wgmma 128x64 tma 264, split 132>}
// CHECK: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<wgmma 128x128 tma 132>}
// An A100 (sm_80, 108 SMs): mma.sync for every product, two waves of 108.
// A100-LABEL: modk.entry @grad
// A100: config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: mma 64x64 separate_epilogue, from 27521: mma 128x128 separate_epilogue>
// A100: config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: mma 64x64, from 27521: mma 128x128>
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 27521: mma 128x128>, epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>}
// A100: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 64x64, split 108>}
// An sm_90a part of 114 SMs (sm-count): the waves and grids follow.
// SMS-LABEL: modk.entry @grad
// SMS: config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64 tma 228, from 14465: wgmma 128x128 tma 114>
// Pinned choices (what tests and benchmarks compile with): every product
// on one kernel at any rows; the RoPE epilogue fits no mma.sync tile; every
// weight gradient in chunks of 64 rows.
// PINNED-LABEL: modk.entry @grad
// PINNED: config = #modk.gemm_config<mma 128x128 separate_epilogue>
// PINNED: config = #modk.gemm_config<mma 128x128>
// PINNED: modk.attention {{.*}} {mainloop = #modk.gemm_path<mma>
// PINNED: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 128x128, split 65535, chunk 64>}
// path=simt: every product and attention on the SIMT kernels.
// SIMT-LABEL: modk.entry @grad
// SIMT: config = #modk.gemm_config<simt 64x64 separate_epilogue, from 33665: simt 128x128 separate_epilogue>
// SIMT: modk.attention {{.*}} {mainloop = #modk.gemm_path<simt>
// stream-rows=16: the few-row kernel takes part of mma.sync's rows, which
// keep 17 to 63 (RoPE apart there: no mma.sync tile's warps hold a head);
// a bf16 product's few rows past 8 on its tensor-core tile (64x8), an f32
// product's all on the CUDA-core tile (8x4); stream-rows=0: none.
// STREAM16-LABEL: modk.entry @grad
// STREAM16: config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 17: mma 64x64 separate_epilogue, from 64: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, epilogue = #modk.epilogue<rows>
// STREAM16: config = #modk.gemm_config<stream 8x4, from 17: mma 64x64, from 33665: mma 128x128>, epilogue = #modk.epilogue<none>, precision
// NOSTREAM-LABEL: modk.entry @grad
// NOSTREAM: config = #modk.gemm_config<mma 64x64 separate_epilogue, from 64: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>
// NOSTREAM-NOT: stream
// NOSTREAM-LABEL: modk.entry @decode
// BADSTREAM: modk-configure-gemms: stream-rows -2; expected 0 (none) or more
// stream-simt-rows=0: a bf16 product's few rows all on tensor cores;
// stream-simt-rows=64: none of them (f32 products never).
// MMAONLY-LABEL: modk.entry @grad
// MMAONLY: config = #modk.gemm_config<stream 64x8, from 65: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, epilogue = #modk.epilogue<rows>
// MMAONLY: config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 33665: mma 128x128>, epilogue = #modk.epilogue<none>, precision
// SIMTONLY-LABEL: modk.entry @grad
// SIMTONLY: config = #modk.gemm_config<stream 8x4, from 65: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, epilogue = #modk.epilogue<rows>
// SIMTONLY-NOT: stream 64x8
// SIMTONLY-LABEL: modk.entry @decode
// BADSIMT: modk-configure-gemms: stream-simt-rows -1; expected 0 (tensor cores at any rows) or more
// BADARCH: error: modk-configure-gemms: unknown arch 'sm_70'; expected sm_90a or sm_80
// NOWGMMA: error: modk-configure-gemms: sm_80 has no wgmma
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wq", shape = [128, 64], init = ones>, #modk.param<name = "wo", shape = [128, 64], init = ones>, #modk.param<name = "w1", shape = [8, 64], init = ones>, #modk.param<name = "b1", shape = [8], init = ones>, #modk.param<name = "w2", shape = [1, 8], init = ones>, #modk.param<name = "b2", shape = [1], init = ones>, #modk.param<name = "wbig", shape = [2048, 2048], init = ones>]} {
  %wq = modk.param "wq" : memref<128x64xf32>
  %wo = modk.param "wo" : memref<128x64xf32>
  %w1 = modk.param "w1" : memref<8x64xf32>
  %b1 = modk.param "b1" : memref<8xf32>
  %w2 = modk.param "w2" : memref<1x8xf32>
  %b2 = modk.param "b2" : memref<1xf32>
  %wbig = modk.param "wbig" : memref<2048x2048xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x16x64xbf16>
  %x = modk.alloc : memref<?x16x64xf32>
  %q = modk.alloc : memref<?x16x128xf32>
  // RoPE, as modk-generalize writes it: an epilogue over heads of 64.
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<rows>} : memref<?x16x64xbf16>, memref<128x64xf32>, memref<?x1xi64>, memref<?x16x128xf32> epilogue {
  ^bb0(%prod: memref<?x16x128xf32>):
    modk.rows ins(%prod : memref<?x16x128xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%q : memref<?x16x128xf32>) access(row -> row) attributes {head_dim = 64 : i64} reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %rc, %rsin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %rh = modk.rotate_half %e : f32
      %rhs = arith.mulf %rh, %rsin : f32
      %ec = arith.mulf %e, %rc : f32
      %ry = arith.addf %ec, %rhs : f32
      modk.yield %ry : f32
    }
  }
  %o = modk.alloc : memref<?x16x128xf32>
  modk.gemm %x, [%wo] rows %seg -> %o {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<128x64xf32>, memref<?x1xi64>, memref<?x16x128xf32>
  %h = modk.alloc : memref<?x16x8xf32>
  %p = modk.alloc : memref<?x16xf32>
  modk.gemm %x, [%w1] rows %seg -> %h {epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>} : memref<?x16x64xf32>, memref<8x64xf32>, memref<?x1xi64>, memref<?x16x8xf32>
  modk.gemm_wgrad(%h, %x, %seg, %w1) {precision = #modk.dtype<f32>} : memref<?x16x8xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<8x64xf32>
  %att = modk.alloc : memref<?x16x128xf32>
  modk.attention %q, %q, %q rows %pos, %seg -> %att {n_heads = 2 : i64} : memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x128xf32>
  %q12 = modk.alloc : memref<?x16x24xf32>
  %att12 = modk.alloc : memref<?x16x24xf32>
  modk.attention %q12, %q12, %q12 rows %pos, %seg -> %att12 {n_heads = 2 : i64} : memref<?x16x24xf32>, memref<?x16x24xf32>, memref<?x16x24xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x24xf32>
  %dq = modk.alloc : memref<?x16x128xbf16>
  %dn = modk.alloc : memref<?x16x64xf32>
  modk.gemm_dgrad(%dq, %wq, %seg, %dn) {accumulate = false} : memref<?x16x128xbf16>, memref<128x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  %dwq = modk.output "grad.wq" : memref<128x64xf32>
  modk.gemm_wgrad(%dq, %n, %seg, %dwq) : memref<?x16x128xbf16>, memref<?x16x64xbf16>, memref<?x1xi64>, memref<128x64xf32>
  %dy = modk.alloc : memref<?x16x2048xbf16>
  %a = modk.alloc : memref<?x16x2048xbf16>
  %dwbig = modk.output "grad.wbig" : memref<2048x2048xf32>
  modk.gemm_wgrad(%dy, %a, %seg, %dwbig) : memref<?x16x2048xbf16>, memref<?x16x2048xbf16>, memref<?x1xi64>, memref<2048x2048xf32>
}

// -----

// Decode makes no bf16 weight copies (no WeightCopyScope): its products
// read their weights themselves, never through TMA. Its batch's rows (up
// to 64) take the few-row kernel. A wide product (32768 columns, 256 large
// tiles across) fills a wave on the large wgmma tile at any row count.
// CHECK-LABEL: modk.entry @decode
// CHECK: config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64, from 16769: wgmma 128x128>
// CHECK: config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x128>, epilogue = #modk.epilogue<none>, round_bf16
modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<causal>], params = [#modk.param<name = "wq", shape = [128, 64], init = ones>, #modk.param<name = "wv", shape = [32768, 64], init = ones>]} {
  %wq = modk.param "wq" : memref<128x64xf32>
  %wv = modk.param "wv" : memref<32768x64xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x64xbf16>
  %q = modk.alloc : memref<?x128xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x64xbf16>, memref<128x64xf32>, memref<?x1xi64>, memref<?x128xf32>
  %x = modk.alloc : memref<?x64xf32>
  %v = modk.alloc : memref<?x32768xf32>
  modk.gemm %x, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>, round_bf16} : memref<?x64xf32>, memref<32768x64xf32>, memref<?x1xi64>, memref<?x32768xf32>
}

// -----

// A selection with a fused gather runs on k / 16 blocks a sequence (each
// selects again and gathers its 16 rows), at most a quarter of the SMs:
// 16 on 132, 108 or 114 SMs, 10 (ceil(40 / 4)) on 40; pinned to 3. A
// selection that gathers nothing runs a block a sequence: no attribute.
// CHECK-LABEL: modk.entry @select_gather
// CHECK: modk.route_select {{.*}} {causal_router = #modk.causal_router<none>, gather_blocks = 16 : i64, k = 256 : i64, layer = 1 : i64} : {{.*}} gather {
// CHECK: modk.route_select {{.*}} {causal_router = #modk.causal_router<none>, k = 256 : i64, layer = 2 : i64} : {{.*}}xi32>{{$}}
// A100-LABEL: modk.entry @select_gather
// A100: gather_blocks = 16 : i64
// SMS-LABEL: modk.entry @select_gather
// SMS: gather_blocks = 16 : i64
// FEWSMS: gather_blocks = 10 : i64
// PINNED-LABEL: modk.entry @select_gather
// PINNED: gather_blocks = 3 : i64
// BADBLOCKS: modk-configure-gemms: gather-blocks -1; expected 0 (auto) or more
modk.entry @select_gather attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 2048, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x2048x32xf32>
  %r = modk.alloc : memref<?x2048xf32>
  %pos = modk.alloc : memref<?x256xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x2048xi32>
  %xs = modk.alloc : memref<?x256x32xf32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 256 : i64, layer = 1 : i64} : memref<?x2048xf32>, memref<?x256xi32>, memref<?x1xi64>, memref<?x2048xi32> gather {
    modk.rows ins(%x : memref<?x2048x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x256xi32>) outs(%xs : memref<?x256x32xf32>) access(token -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  %r2 = modk.alloc : memref<?x2048xf32>
  %pos2 = modk.alloc : memref<?x256xi32>
  %seg2 = modk.alloc : memref<?x1xi64>
  %mask2 = modk.alloc : memref<?x2048xi32>
  modk.route_select %r2 -> %pos2, %seg2, %mask2 {causal_router = #modk.causal_router<none>, k = 256 : i64, layer = 2 : i64} : memref<?x2048xf32>, memref<?x256xi32>, memref<?x1xi64>, memref<?x2048xi32>
}

// -----

// Above k = 8192 the positions would not fit a block's shared memory: one
// block a sequence, also where gather-blocks is pinned.
// CHECK-LABEL: modk.entry @select_gather_large_k
// CHECK: gather_blocks = 1 : i64
// PINNED-LABEL: modk.entry @select_gather_large_k
// PINNED: gather_blocks = 1 : i64
modk.entry @select_gather_large_k attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 10000, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %x = modk.alloc : memref<?x10000x32xf32>
  %r = modk.alloc : memref<?x10000xf32>
  %pos = modk.alloc : memref<?x9000xi32>
  %seg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x10000xi32>
  %xs = modk.alloc : memref<?x9000x32xf32>
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 9000 : i64, layer = 1 : i64} : memref<?x10000xf32>, memref<?x9000xi32>, memref<?x1xi64>, memref<?x10000xi32> gather {
    modk.rows ins(%x : memref<?x10000x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x9000xi32>) outs(%xs : memref<?x9000x32xf32>) access(token -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
}

// -----

// RoPE finishes a column with its partner half a head further, in the same
// thread's registers: a tile holds it where each warp's columns are whole
// heads and the partner is a whole n8 fragment away, a head dim that is a
// multiple of 16. Heads of 8 divide the mma.sync tiles' warp columns (32)
// but pair columns 4 apart, in one fragment: every tile keeps the epilogue
// apart (the product, then the kernel); heads of 16 fit both tiles.
// CHECK-LABEL: modk.entry @rope_small_heads
// CHECK: modk.gemm {{.*}} -> %{{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64 separate_epilogue, from 33665: mma 128x128 separate_epilogue>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} -> %{{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 33665: mma 128x128>, epilogue = #modk.epilogue<rows>}
modk.entry @rope_small_heads attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 4, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wq", shape = [32, 32], init = ones>]} {
  %wq = modk.param "wq" : memref<32x32xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %q8 = modk.alloc : memref<?x16x32xf32>
  modk.gemm %x, [%wq] rows %seg -> %q8 {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32> epilogue {
  ^bb0(%prod: memref<?x16x32xf32>):
    modk.rows ins(%prod : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%q8 : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 8 : i64} reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %rc, %rsin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %rh = modk.rotate_half %e : f32
      %rhs = arith.mulf %rh, %rsin : f32
      %ec = arith.mulf %e, %rc : f32
      %ry = arith.addf %ec, %rhs : f32
      modk.yield %ry : f32
    }
  }
  %q16 = modk.alloc : memref<?x16x32xf32>
  modk.gemm %x, [%wq] rows %seg -> %q16 {epilogue = #modk.epilogue<rows>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32> epilogue {
  ^bb0(%prod: memref<?x16x32xf32>):
    modk.rows ins(%prod : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%q16 : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %rc, %rsin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %rh = modk.rotate_half %e : f32
      %rhs = arith.mulf %rh, %rsin : f32
      %ec = arith.mulf %e, %rc : f32
      %ry = arith.addf %ec, %rhs : f32
      modk.yield %ry : f32
    }
  }
}
