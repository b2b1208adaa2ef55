// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass}))' | mod-opt -split-input-file | FileCheck %s
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80 library=cutlass}))' | FileCheck %s --check-prefix=A100
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass stream-rows=0 tile=large}))' | FileCheck %s --check-prefix=PINNED
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms))' | FileCheck %s --check-prefix=TILES
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cublas}))' 2>&1 | FileCheck %s --check-prefix=BADLIB
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass cutlass-from=1}))' | FileCheck %s --check-prefix=FROM
// RUN: not mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass cutlass-from=-1}))' 2>&1 | FileCheck %s --check-prefix=BADFROM
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass sm-count=8}))' | FileCheck %s --check-prefix=SPLIT8
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass wgrad-chunk-rows=256}))' | FileCheck %s --check-prefix=CHUNK
// RUN: mod-opt %s -split-input-file --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass tile=small}))' | FileCheck %s --check-prefix=SMALL

// library=cutlass: forward bf16 products with a plain epilogue, whose input
// is stored bf16 and whose weight gets a bf16 copy, run on CUTLASS above
// the few-row kernel's 64 rows. The tiles, clusters, stages, schedules and
// raster orders come from the part's description (CudaTargets.h):
// - sm_90a, f32 output over 4096 columns: the 64x128 pingpong tile (8
//   stages of 24 KiB beside the epilogue's 16 KiB) from 65 rows, walking
//   along N (one row tile, 32 column tiles); the 128x128 cooperative tile
//   from the rows where it gives 132 CTAs (ceil(132 / 32) = 5 row tiles:
//   513 rows), in clusters of two CTAs along the rows (5 row tiles), 6
//   stages of 32 KiB beside the epilogue's 32 KiB; the 128x256 tile from
//   ceil(132 / 16) = 9 row tiles (1025 rows), 4 stages.
// - a bf16 output keeps half the epilogue's bytes: the same stages here.
// - 128 columns: one column tile, so every variant walks along M; the
//   128x256 tile would pad 128 more columns; the 128x128 tile from
//   131 * 128 + 1 rows.
// - An elementwise `rows` epilogue (here y = product^2) runs there too, as
//   an epilogue visitor tree of the same stages (it reads no source).
// - An f32-stored input of a bf16 product, an f32 product (precision) over
//   a bf16-stored input (CUTLASS's f32 kernels read f32 operands: @f32
//   below) and the weight gradients keep the tile kernels (input
//   gradients: below).
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 513: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_n, from 1025: cutlass 128x256x64 cluster 2x1 stages 4 cooperative raster along_n>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 513: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_n, from 1025: cutlass 128x256x64 cluster 2x1 stages 4 cooperative raster along_n>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64, from 513: wgmma 128x128>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 513: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_n, from 1025: cutlass 128x256x64 cluster 2x1 stages 4 cooperative raster along_n>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 33665: mma 128x128>, epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>}
// sm_80 (108 SMs): the multistage tiles, two CTAs an SM on the smaller
// ones (6 and 5 stages of 12 and 16 KiB), one on the 128x256 tile (4 of
// 24 KiB); no clusters. 64x128 from 65 rows, 128x128 from
// ceil(216 / 32) = 7 row tiles (769 rows), 128x256 from ceil(108 / 16) = 7
// row tiles (769 rows too: it replaces the 128x128 tile there).
// A100-LABEL: modk.entry @forward
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 769: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_n>, epilogue = #modk.epilogue<none>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 769: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_n>, epilogue = #modk.epilogue<none>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<none>}
// Without the few-row kernel, the tiles below 64 rows (here pinned large:
// wgmma's); a pinned large tile runs every row count from 64 on, without a
// cluster where it has a single row tile.
// PINNED-LABEL: modk.entry @forward
// PINNED: modk.gemm {{.*}} {config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x256x64 cluster 1x1 stages 4 cooperative raster along_n>, epilogue = #modk.epilogue<none>}
// The default library: the hand-written tiles, TMA-fed.
// TILES-LABEL: modk.entry @forward
// TILES: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64 tma 264, from 513: wgmma 128x128 tma 132>, epilogue = #modk.epilogue<none>}
// BADLIB: modk-configure-gemms: library 'cublas'; expected tiles or cutlass
// cutlass-from=1 (tests on a GPU: every row count on CUTLASS): the first
// CUTLASS variant from one row, the few-row kernel for none.
// FROM-LABEL: modk.entry @forward
// FROM: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 1: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 513: cutlass 128x128x64
// BADFROM: modk-configure-gemms: cutlass-from -1; expected 0 (auto) or more
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 64, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wide", shape = [4096, 64], init = ones>, #modk.param<name = "narrow", shape = [128, 64], init = ones>, #modk.param<name = "r", shape = [8, 64], init = ones>]} {
  %wide = modk.param "wide" : memref<4096x64xf32>
  %narrow = modk.param "narrow" : memref<128x64xf32>
  %wr = modk.param "r" : memref<8x64xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %n = modk.alloc : memref<?x16x64xbf16>
  %y = modk.alloc : memref<?x16x4096xf32>
  modk.gemm %n, [%wide] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x64xbf16>, memref<4096x64xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
  %yb = modk.alloc : memref<?x16x4096xbf16>
  modk.gemm %n, [%wide] rows %seg -> %yb {epilogue = #modk.epilogue<none>} : memref<?x16x64xbf16>, memref<4096x64xf32>, memref<?x1xi64>, memref<?x16x4096xbf16>
  %q = modk.alloc : memref<?x16x128xf32>
  modk.gemm %n, [%narrow] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x16x64xbf16>, memref<128x64xf32>, memref<?x1xi64>, memref<?x16x128xf32>
  %x = modk.alloc : memref<?x16x64xf32>
  %z = modk.alloc : memref<?x16x4096xf32>
  modk.gemm %x, [%wide] rows %seg -> %z {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<4096x64xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
  %r = modk.alloc : memref<?x16x4096xf32>
  modk.gemm %n, [%wide] rows %seg -> %r {epilogue = #modk.epilogue<rows>} : memref<?x16x64xbf16>, memref<4096x64xf32>, memref<?x1xi64>, memref<?x16x4096xf32> epilogue {
  ^bb0(%prod: memref<?x16x4096xf32>):
    modk.rows ins(%prod : memref<?x16x4096xf32>) rows %seg : memref<?x1xi64> outs(%r : memref<?x16x4096xf32>) access(row -> row) reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %s = arith.mulf %e, %e : f32
      modk.yield %s : f32
    }
  }
  %h = modk.alloc : memref<?x16x8xf32>
  modk.gemm %n, [%wr] rows %seg -> %h {epilogue = #modk.epilogue<none>, precision = #modk.dtype<f32>} : memref<?x16x64xbf16>, memref<8x64xf32>, memref<?x1xi64>, memref<?x16x8xf32>
}

// -----

// A decode step's bf16 products run on CUTLASS above the few-row kernel's
// rows too, reading the weights' bf16 copies that the step makes current
// before it runs: a plain store, and a residual add in place over the
// step's dense rows (modk.decode_rows: one a sequence, so the host knows
// the count, B). Not on CUTLASS on sm_90a: the add in place over rows that
// the device counts (a routed layer's) in its `config`, whose
// device_rows_config is a grouped launch of it alone (its problem sized on
// the device; the step allocates its memory before its graph capture). A
// group's member takes the group's grouped launch (`grouped`), whose
// memory the step allocates before its capture too. sm_80's kernel stops
// at the count: the add over the routed rows too; its group's members
// launch one by one (sm_80 has no grouped launch).
// CHECK-LABEL: modk.entry @decode
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64, from 16769: wgmma 128x128>, device_rows_config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped>, epilogue = #modk.epilogue<none>, group = 0 : i64}
// A100-LABEL: modk.entry @decode
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<none>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<none>, group = 0 : i64}
modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<causal>], params = [#modk.param<name = "wq", shape = [128, 64], init = ones>, #modk.param<name = "wo", shape = [128, 128], init = ones>]} {
  %wq = modk.param "wq" : memref<128x64xf32>
  %wo = modk.param "wo" : memref<128x128xf32>
  %steps = modk.alloc : memref<?x1xi32>
  %active = modk.alloc : memref<?x1xi8>
  %pos = modk.alloc : memref<?x1xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.decode_rows(%steps, %active, %pos, %seg) : memref<?x1xi32>, memref<?x1xi8>, memref<?x1xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x1x64xbf16>
  %q = modk.alloc : memref<?x1x128xf32>
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>} : memref<?x1x64xbf16>, memref<128x64xf32>, memref<?x1xi64>, memref<?x1x128xf32>
  %a = modk.alloc : memref<?x1x128xbf16>
  %x = modk.alloc : memref<?x1x128xf32>
  modk.gemm %a, [%wo] rows %seg -> %x {epilogue = #modk.epilogue<rows>} : memref<?x1x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x1x128xf32> epilogue {
  ^bb0(%p: memref<?x1x128xf32>):
    modk.rows ins(%x, %p : memref<?x1x128xf32>, memref<?x1x128xf32>) rows %seg : memref<?x1xi64> outs(%x : memref<?x1x128xf32>) access(row, row -> row) reduce {
    ^bb0(%u: f32, %v: f32):
      modk.yield
    } body {
    ^bb0(%u: f32, %v: f32):
      %s = arith.addf %u, %v : f32
      modk.yield %s : f32
    }
  }
  %routed = modk.alloc : memref<?x1xi64>
  modk.gemm %a, [%wo] rows %routed -> %x {epilogue = #modk.epilogue<rows>} : memref<?x1x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x1x128xf32> epilogue {
  ^bb0(%p: memref<?x1x128xf32>):
    modk.rows ins(%x, %p : memref<?x1x128xf32>, memref<?x1x128xf32>) rows %routed : memref<?x1xi64> outs(%x : memref<?x1x128xf32>) access(row, row -> row) reduce {
    ^bb0(%u: f32, %v: f32):
      modk.yield
    } body {
    ^bb0(%u: f32, %v: f32):
      %s = arith.addf %u, %v : f32
      modk.yield %s : f32
    }
  }
  modk.gemm %n, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<none>, group = 0 : i64} : memref<?x1x64xbf16>, memref<128x64xf32>, memref<?x1xi64>, memref<?x1x128xf32>
}

// -----

// Input gradients (modk.gemm_dgrad, dA [rows, 4096] (+)= dY [rows, 64] W
// [64, 4096]) of a bf16 entry whose dY is stored bf16 run on CUTLASS where
// forward products would, on sm_90a: mma.sync below 64 rows (no few-row
// kernel for gradients), then the same tiles by the same rules over dA's
// 4096 columns. dA is f32. An accumulating gradient's epilogue reads dA
// (beta = 1): four stages of rows x 32 f32 beside the mainloop's instead
// of two, so 5 stages on 128x128 (6 where it stores) and 3 on 128x256 (4).
// An f32-stored dY keeps the tiles, and so does the default library. sm_80
// (108 SMs) takes them too, on its multistage tiles by the same rules: the
// 64x128 one from 64 rows, the 128x256 one from 769 (7 row tiles of 16
// column tiles: a wave of 108 CTAs, one an SM; the 128x128 tile would start
// there too, two CTAs an SM over 32 column tiles), its epilogue adding dA's
// old values from global memory (no stages taken).
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.gemm_dgrad{{.*}}{accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 513: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_n, from 1025: cutlass 128x256x64 cluster 2x1 stages 4 cooperative raster along_n>}
// CHECK: modk.gemm_dgrad{{.*}}{accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 513: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_n, from 1025: cutlass 128x256x64 cluster 2x1 stages 3 cooperative raster along_n>}
// CHECK: modk.gemm_dgrad{{.*}}{accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: wgmma 128x64, from 513: wgmma 128x128>}
// A100-LABEL: modk.entry @grad
// A100: modk.gemm_dgrad{{.*}}{accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 769: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_n>}
// A100: modk.gemm_dgrad{{.*}}{accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 769: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_n>}
// A100: modk.gemm_dgrad{{.*}}{accumulate = false, config = #modk.gemm_config<mma 64x64, from 769: mma 128x128>}
// PINNED-LABEL: modk.entry @grad
// PINNED: modk.gemm_dgrad{{.*}}{accumulate = false, config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x256x64 cluster 1x1 stages 4 cooperative raster along_n>}
// PINNED: modk.gemm_dgrad{{.*}}{accumulate = true, config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x256x64 cluster 1x1 stages 3 cooperative raster along_n>}
// TILES-LABEL: modk.entry @grad
// TILES: modk.gemm_dgrad{{.*}}{accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: wgmma 128x64 tma 264, from 513: wgmma 128x128 tma 132>}
// TILES-NOT: cutlass
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 64, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [64, 4096], init = ones>]} {
  %w = modk.param "w" : memref<64x4096xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %dy = modk.alloc : memref<?x16x64xbf16>
  %da = modk.alloc : memref<?x16x4096xf32>
  modk.gemm_dgrad(%dy, %w, %seg, %da) {accumulate = false} : memref<?x16x64xbf16>, memref<64x4096xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
  modk.gemm_dgrad(%dy, %w, %seg, %da) {accumulate = true} : memref<?x16x64xbf16>, memref<64x4096xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
  %dyf = modk.alloc : memref<?x16x64xf32>
  modk.gemm_dgrad(%dyf, %w, %seg, %da) {accumulate = false} : memref<?x16x64xf32>, memref<64x4096xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
}

// -----

// Weight gradients (modk.gemm_wgrad, dW [N, K] += dY^T A over the rows) of
// a bf16 entry whose dY and A are stored bf16 run on CUTLASS on sm_90a
// where the host knows their reduction, the row count (it is the bound,
// B x the buffer's rows: a dense layer's modk.identity_rows, a top-k
// selection of k rows); the tiles' variant stays below 64 rows of
// reduction and wherever CUTLASS declines. Where the output fills the part
// without a split over the rows (more 64x64 tiles than SMs): one kernel
// over the static output, the largest tile that still gives a wave of
// CTAs, its epilogue adding dW's old values (5 stages on 128x128).
// - 4096 x 1024: 128x128 (32 x 8 = 256 CTAs; 128x256 would give 128);
//   1024 x 1024: 64x128 (the smallest; 128x128 gives 64 CTAs).
// - A top-k selection's rows (k = the buffer's 4 rows a sequence) too.
// - A small output (128 x 128: one 128x128 tile) splits its reduction on
//   CUTLASS (split_k: stream-K's split-K mode, deterministic): the smallest
//   cooperative tile (stream-K runs no pingpong kernel), as many splits as
//   give a wave of CTAs, at most the part's 16 (132 / 1 tile); the tiles'
//   variant keeps its own split (split 66) below and where CUTLASS
//   declines. With 8 SMs, 8 splits; with a forced chunk size
//   (wgrad-chunk-rows) or only the pingpong tile (tile=small) the tiles'
//   split stays.
// - A causal selection's rows and rows of no known count (MoE experts')
//   run as a grouped launch of the product alone (`grouped`, no `group`),
//   whose setup kernel reads the row count, its reduction, on the device.
// - The tiles keep an f32 dY.
// sm_80 (108 SMs) takes the same products on its multistage tiles by the
// same rules (4096 x 1024: 128x256, 32 x 4 = 128 CTAs of one an SM; 1024 x
// 1024: 64x128). The small output splits its reduction on CUTLASS 2.x's
// serial split-K: the smallest tile (64x128, 2 output tiles), as many
// splits as give a wave (2 CTAs an SM x 108 / 2 tiles), at most 16. Its
// kernel reads the row count on the device, so the causal selection's rows
// and the experts' take CUTLASS too; an f32 dY keeps the tiles.
// CHECK-LABEL: modk.entry @wgrad
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x64 tma 264, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x64 tma 264, from 64: cutlass 128x128x64 cluster 1x1 stages 5 cooperative raster along_m split_k 16, split 66>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x128>}
// CHECK: modk.gemm_wgrad(%{{.*}}, %{{.*}}, %[[CSEG:.*]], %{{.*}}) {config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>}
// CHECK: modk.gemm_wgrad(%{{.*}}, %{{.*}}, %[[ESEG:.*]], %{{.*}}) {config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>}
// A100-LABEL: modk.entry @wgrad
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 128x128, from 64: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 128x128, from 64: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m split_k 16, split 54>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 128x128>}
// A100: modk.gemm_wgrad(%{{.*}}, %{{.*}}, %[[CSEG:.*]], %{{.*}}) {config = #modk.gemm_config<mma 128x128, from 64: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>}
// A100: modk.gemm_wgrad(%{{.*}}, %{{.*}}, %[[ESEG:.*]], %{{.*}}) {config = #modk.gemm_config<mma 128x128, from 64: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>}
// PINNED-LABEL: modk.entry @wgrad
// PINNED: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x256x64 cluster 2x1 stages 3 cooperative raster along_m>}
// PINNED: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x128 tma 132, from 64: cutlass 128x256x64 cluster 1x1 stages 3 cooperative raster along_m split_k 16, split 66>} : memref<?x16x128xbf16>
// SPLIT8-LABEL: modk.entry @wgrad
// SPLIT8: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x64 tma 16, from 64: cutlass 128x128x64 cluster 1x1 stages 5 cooperative raster along_m split_k 8, split 4>} : memref<?x16x128xbf16>
// CHUNK-LABEL: modk.entry @wgrad
// CHUNK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x64 tma 264, split 65535, chunk 256>} : memref<?x16x128xbf16>
// SMALL-LABEL: modk.entry @wgrad
// SMALL: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<wgmma 128x64 tma 264, split 66>} : memref<?x16x128xbf16>
// TILES-LABEL: modk.entry @wgrad
// TILES-NOT: cutlass
modk.entry @wgrad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 64, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = []} {
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %dy = modk.alloc : memref<?x16x4096xbf16>
  %a = modk.alloc : memref<?x16x1024xbf16>
  %dw = modk.output "grad.w" : memref<4096x1024xf32>
  modk.gemm_wgrad(%dy, %a, %seg, %dw) : memref<?x16x4096xbf16>, memref<?x16x1024xbf16>, memref<?x1xi64>, memref<4096x1024xf32>
  %dy2 = modk.alloc : memref<?x16x1024xbf16>
  %dw2 = modk.output "grad.w2" : memref<1024x1024xf32>
  modk.gemm_wgrad(%dy2, %a, %seg, %dw2) : memref<?x16x1024xbf16>, memref<?x16x1024xbf16>, memref<?x1xi64>, memref<1024x1024xf32>
  %r = modk.alloc : memref<?x16xf32>
  %tpos = modk.alloc : memref<?x4xi32>
  %tseg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  modk.route_select %r -> %tpos, %tseg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 0 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  %tdy = modk.alloc : memref<?x4x4096xbf16>
  %ta = modk.alloc : memref<?x4x1024xbf16>
  modk.gemm_wgrad(%tdy, %ta, %tseg, %dw) : memref<?x4x4096xbf16>, memref<?x4x1024xbf16>, memref<?x1xi64>, memref<4096x1024xf32>
  %sdy = modk.alloc : memref<?x16x128xbf16>
  %sa = modk.alloc : memref<?x16x128xbf16>
  %sdw = modk.output "grad.s" : memref<128x128xf32>
  modk.gemm_wgrad(%sdy, %sa, %seg, %sdw) : memref<?x16x128xbf16>, memref<?x16x128xbf16>, memref<?x1xi64>, memref<128x128xf32>
  %fdy = modk.alloc : memref<?x16x4096xf32>
  modk.gemm_wgrad(%fdy, %a, %seg, %dw) : memref<?x16x4096xf32>, memref<?x16x1024xbf16>, memref<?x1xi64>, memref<4096x1024xf32>
  %cs = modk.alloc : memref<?x16xf32>
  %cpos = modk.alloc : memref<?x16xi32>
  %cseg = modk.alloc : memref<?x1xi64>
  modk.route_select %r causal(%cs) -> %cpos, %cseg, %mask {causal_router = #modk.causal_router<predictor>, k = 16 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.gemm_wgrad(%dy, %a, %cseg, %dw) : memref<?x16x4096xbf16>, memref<?x16x1024xbf16>, memref<?x1xi64>, memref<4096x1024xf32>
  %eseg = modk.alloc : memref<?x1xi64>
  modk.gemm_wgrad(%dy, %a, %eseg, %dw) : memref<?x16x4096xbf16>, memref<?x16x1024xbf16>, memref<?x1xi64>, memref<4096x1024xf32>
}

// -----

// A residual add in place (x += a W^T: the `rows` epilogue is exactly
// x + product, stored into x, f32) over rows the host knows (a dense
// layer's: identity rows) runs on CUTLASS on sm_90a, its epilogue reading x
// (the source: the 128x128 tile keeps 5 stages instead of 6), and so does
// the same add into another buffer. Not on CUTLASS on sm_90a: the add in
// place over rows counted on the device (its kernel computes every row up
// to the bound, and a row past the count must keep its values); its
// device_rows_config is a grouped launch of it alone, whose problem the
// device sizes (the grouped kernel's stages). sm_80's kernel stops at the
// count and its epilogue tree reads the source from global memory: all
// three adds, with the store's stages, and no device_rows_config.
// CHECK-LABEL: modk.entry @residual
// CHECK: modk.gemm %{{.*}} -> %[[X:.*]] {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, device_rows_config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>}
// A100-LABEL: modk.entry @residual
// A100-NOT: device_rows_config
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
modk.entry @residual attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wo", shape = [128, 128], init = ones>]} {
  %wo = modk.param "wo" : memref<128x128xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x16xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x16x128xbf16>
  %x = modk.alloc : memref<?x16x128xf32>
  modk.gemm %n, [%wo] rows %all -> %x {epilogue = #modk.epilogue<rows>} : memref<?x16x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x16x128xf32> epilogue {
  ^bb0(%p: memref<?x16x128xf32>):
    modk.rows ins(%x, %p : memref<?x16x128xf32>, memref<?x16x128xf32>) rows %all : memref<?x1xi64> outs(%x : memref<?x16x128xf32>) access(row, row -> row) reduce {
    ^bb0(%a: f32, %b: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      modk.yield %s : f32
    }
  }
  %y = modk.alloc : memref<?x16x128xf32>
  modk.gemm %n, [%wo] rows %all -> %y {epilogue = #modk.epilogue<rows>} : memref<?x16x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x16x128xf32> epilogue {
  ^bb0(%p: memref<?x16x128xf32>):
    modk.rows ins(%x, %p : memref<?x16x128xf32>, memref<?x16x128xf32>) rows %all : memref<?x1xi64> outs(%y : memref<?x16x128xf32>) access(row, row -> row) reduce {
    ^bb0(%a: f32, %b: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      modk.yield %s : f32
    }
  }
  %some = modk.alloc : memref<?x1xi64>
  modk.gemm %n, [%wo] rows %some -> %x {epilogue = #modk.epilogue<rows>} : memref<?x16x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x16x128xf32> epilogue {
  ^bb0(%p: memref<?x16x128xf32>):
    modk.rows ins(%x, %p : memref<?x16x128xf32>, memref<?x16x128xf32>) rows %some : memref<?x1xi64> outs(%x : memref<?x16x128xf32>) access(row, row -> row) reduce {
    ^bb0(%a: f32, %b: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      modk.yield %s : f32
    }
  }
}

// -----

// A residual add in place over a causal router's selection: in `topk` mode
// the host knows the count (B k), in `causal` mode the device does. In an
// entry that serves both, `config` runs it on CUTLASS where the host knows
// the count, and device_rows_config is the grouped launch of it alone for
// `causal` mode; an entry of `topk` mode only needs none.
// CHECK-LABEL: modk.entry @selected
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>, device_rows_config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>}
// CHECK-LABEL: modk.entry @selected_topk
// CHECK-NOT: device_rows_config
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
modk.entry @selected attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "wo", shape = [128, 128], init = ones>]} {
  %wo = modk.param "wo" : memref<128x128xf32>
  %r = modk.alloc : memref<?x16xf32>
  %cs = modk.alloc : memref<?x16xf32>
  %cpos = modk.alloc : memref<?x16xi32>
  %cseg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  modk.route_select %r causal(%cs) -> %cpos, %cseg, %mask {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
  %n = modk.alloc : memref<?x16x128xbf16>
  %x = modk.alloc : memref<?x16x128xf32>
  modk.gemm %n, [%wo] rows %cseg -> %x {epilogue = #modk.epilogue<rows>} : memref<?x16x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x16x128xf32> epilogue {
  ^bb0(%p: memref<?x16x128xf32>):
    modk.rows ins(%x, %p : memref<?x16x128xf32>, memref<?x16x128xf32>) rows %cseg : memref<?x1xi64> outs(%x : memref<?x16x128xf32>) access(row, row -> row) reduce {
    ^bb0(%a: f32, %b: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      modk.yield %s : f32
    }
  }
}
modk.entry @selected_topk attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wo", shape = [128, 128], init = ones>]} {
  %wo = modk.param "wo" : memref<128x128xf32>
  %r = modk.alloc : memref<?x16xf32>
  %cs = modk.alloc : memref<?x16xf32>
  %cpos = modk.alloc : memref<?x16xi32>
  %cseg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  modk.route_select %r causal(%cs) -> %cpos, %cseg, %mask {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
  %n = modk.alloc : memref<?x16x128xbf16>
  %x = modk.alloc : memref<?x16x128xf32>
  modk.gemm %n, [%wo] rows %cseg -> %x {epilogue = #modk.epilogue<rows>} : memref<?x16x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x16x128xf32> epilogue {
  ^bb0(%p: memref<?x16x128xf32>):
    modk.rows ins(%x, %p : memref<?x16x128xf32>, memref<?x16x128xf32>) rows %cseg : memref<?x1xi64> outs(%x : memref<?x16x128xf32>) access(row, row -> row) reduce {
    ^bb0(%a: f32, %b: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      modk.yield %s : f32
    }
  }
}

// -----

// Elementwise `rows` epilogues (GemmOp::isElementwiseEpilogue) run on
// CUTLASS on sm_90a as epilogue visitor trees: SwiGLU's product with the
// gate (an f32 source beside a bf16 output: four stages of rows x 32 f32
// for the source beside the store's two of bf16, 7 stages on the 64x128
// tile instead of 8), and the bf16 store of values. The other `rows`
// epilogues without head pairs store by themselves (no TMA store, but
// the stages of an f32 store) over rows the host knows: one that
// stores at the rows' tokens (the routed block's gated scatter) and one
// that reads the column index. An epilogue over heads (RoPE) runs after
// the kernel, which stores the f32 product (the stages of an f32 store).
// Not on CUTLASS in its `config`: the gated scatter over rows counted on
// the device (the kernel computes every row up to the count it is given: a
// row past the count has no token to store at); its device_rows_config is
// a grouped launch of it alone, which computes exactly the rows the device
// counts (its problem sized on the device). sm_80 takes the elementwise ones, as
// CUTLASS 2.x epilogue visitor trees, with the store's stages (the source
// is read from global memory: SwiGLU keeps 6 stages on 64x128 and takes
// 128x256 too), RoPE (the plain f32 kernel, then the epilogue's row
// kernel) and the epilogues that store by themselves, over any rows (its
// kernel stops at the count on the device: no device_rows_config), as a
// CUTLASS 2.x tree whose root finishes each element (the f32 store's
// stages).
// CHECK-LABEL: modk.entry @elementwise
// CHECK: modk.gemm %{{.*}} -> %{{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 7 pingpong raster along_n, from 4097: cutlass 128x128x64 cluster 2x1 stages 4 cooperative raster along_m, from 8321: cutlass 128x256x64 cluster 2x1 stages 3 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} rows %[[ALL:[0-9]+]] -> {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, device_rows_config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} rows %[[ALL]] -> {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// A100-LABEL: modk.entry @elementwise
// A100: modk.gemm %{{.*}} -> %{{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 6785: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100-COUNT-4: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, from 27521: cutlass 128x128x32 cluster 1x1 stages 5 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100-NOT: device_rows_config
// A100-LABEL: modk.entry @gelu
modk.entry @elementwise attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 4, d_ff = 512, seq_len = 256, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wu", shape = [512, 128], init = ones>, #modk.param<name = "wv", shape = [128, 128], init = ones>]} {
  %wu = modk.param "wu" : memref<512x128xf32>
  %wv = modk.param "wv" : memref<128x128xf32>
  %pos = modk.alloc : memref<?x256xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x256xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x256x128xbf16>
  %gate = modk.alloc : memref<?x256x512xf32>
  %h = modk.alloc : memref<?x256x512xbf16>
  modk.gemm %n, [%wu] rows %all -> %h {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<512x128xf32>, memref<?x1xi64>, memref<?x256x512xbf16> epilogue {
  ^bb0(%p: memref<?x256x512xf32>):
    modk.rows ins(%gate, %p : memref<?x256x512xf32>, memref<?x256x512xf32>) rows %all : memref<?x1xi64> outs(%h : memref<?x256x512xbf16>) access(row, row -> row) reduce {
    ^bb0(%g: f32, %u: f32):
      modk.yield
    } body {
    ^bb0(%g: f32, %u: f32):
      %one = arith.constant 1.000000e+00 : f32
      %ng = arith.negf %g : f32
      %e = math.exp %ng : f32
      %d = arith.addf %e, %one : f32
      %silu = arith.divf %g, %d : f32
      %m = arith.mulf %silu, %u : f32
      modk.yield %m : f32
    }
  }
  %v = modk.alloc : memref<?x256x128xbf16>
  modk.gemm %n, [%wv] rows %all -> %v {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x256x128xbf16> epilogue {
  ^bb0(%p: memref<?x256x128xf32>):
    modk.rows ins(%p : memref<?x256x128xf32>) rows %all : memref<?x1xi64> outs(%v : memref<?x256x128xbf16>) access(row -> row) reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %t = arith.truncf %e : f32 to bf16
      %x = arith.extf %t : bf16 to f32
      modk.yield %x : f32
    }
  }
  %q = modk.alloc : memref<?x256x128xbf16>
  modk.gemm %n, [%wv] rows %all -> %q {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x256x128xbf16> epilogue {
  ^bb0(%p: memref<?x256x128xf32>):
    modk.rows ins(%p : memref<?x256x128xf32>) rows %all : memref<?x1xi64> tokens(%pos : memref<?x256xi32>) outs(%q : memref<?x256x128xbf16>) access(row -> row) attributes {head_dim = 32 : i64} reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %cos, %sin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
      %half = modk.rotate_half %e : f32
      %a = arith.mulf %half, %sin : f32
      %b = arith.mulf %e, %cos : f32
      %r = arith.addf %b, %a : f32
      modk.yield %r : f32
    }
  }
  %stream = modk.alloc : memref<?x256x128xf32>
  %gates = modk.alloc : memref<?x256xf32>
  modk.gemm %n, [%wv] rows %all -> %stream {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x256x128xf32> epilogue {
  ^bb0(%p: memref<?x256x128xf32>):
    modk.rows ins(%p, %gates, %stream : memref<?x256x128xf32>, memref<?x256xf32>, memref<?x256x128xf32>) rows %all : memref<?x1xi64> tokens(%pos : memref<?x256xi32>) outs(%stream : memref<?x256x128xf32>) access(row, token_value, token -> token) reduce {
    ^bb0(%a: f32, %g: f32, %x: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %g: f32, %x: f32):
      %ga = arith.mulf %g, %a : f32
      %s = arith.addf %x, %ga : f32
      modk.yield %s : f32
    }
  }
  %some = modk.alloc : memref<?x1xi64>
  modk.gemm %n, [%wv] rows %some -> %stream {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x256x128xf32> epilogue {
  ^bb0(%p: memref<?x256x128xf32>):
    modk.rows ins(%p, %gates, %stream : memref<?x256x128xf32>, memref<?x256xf32>, memref<?x256x128xf32>) rows %some : memref<?x1xi64> tokens(%pos : memref<?x256xi32>) outs(%stream : memref<?x256x128xf32>) access(row, token_value, token -> token) reduce {
    ^bb0(%a: f32, %g: f32, %x: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %g: f32, %x: f32):
      %ga = arith.mulf %g, %a : f32
      %s = arith.addf %x, %ga : f32
      modk.yield %s : f32
    }
  }
  %w = modk.alloc : memref<?x256x128xf32>
  modk.gemm %n, [%wv] rows %all -> %w {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<128x128xf32>, memref<?x1xi64>, memref<?x256x128xf32> epilogue {
  ^bb0(%p: memref<?x256x128xf32>):
    modk.rows ins(%p : memref<?x256x128xf32>) rows %all : memref<?x1xi64> outs(%w : memref<?x256x128xf32>) access(row -> row) reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %c = modk.column : f32
      %s = arith.mulf %e, %c : f32
      modk.yield %s : f32
    }
  }
}

// -----

// GELU's epilogue (erf) keeps to the CUTLASS tiles of at most 128x128 on
// sm_90a: on the 128x256 tile, beside its 128 f32 accumulators a thread,
// its registers spilled (nvcc 13). The same product with a plain store
// takes the 128x256 tile from 8321 rows. sm_80's tree does not spill on
// 128x256: GELU takes it as the plain store does.
// CHECK-LABEL: modk.entry @gelu
// CHECK: modk.gemm {{.*}} -> %{{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 4097: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m>, epilogue = #modk.epilogue<rows>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_n, from 4097: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m, from 8321: cutlass 128x256x64 cluster 2x1 stages 4 cooperative raster along_m>, epilogue = #modk.epilogue<none>}
// A100: modk.gemm {{.*}} -> %{{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 6785: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>, epilogue = #modk.epilogue<rows>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n, from 6785: cutlass 128x256x32 cluster 1x1 stages 4 multistage raster along_m>, epilogue = #modk.epilogue<none>}
modk.entry @gelu attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 4, d_ff = 512, seq_len = 256, mlp = gelu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wu", shape = [512, 128], init = ones>]} {
  %wu = modk.param "wu" : memref<512x128xf32>
  %pos = modk.alloc : memref<?x256xi32>
  %all = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %all : memref<?x256xi32>, memref<?x1xi64>
  %n = modk.alloc : memref<?x256x128xbf16>
  %h = modk.alloc : memref<?x256x512xbf16>
  modk.gemm %n, [%wu] rows %all -> %h {epilogue = #modk.epilogue<rows>} : memref<?x256x128xbf16>, memref<512x128xf32>, memref<?x1xi64>, memref<?x256x512xbf16> epilogue {
  ^bb0(%p: memref<?x256x512xf32>):
    modk.rows ins(%p : memref<?x256x512xf32>) rows %all : memref<?x1xi64> outs(%h : memref<?x256x512xbf16>) access(row -> row) reduce {
    ^bb0(%e: f32):
      modk.yield
    } body {
    ^bb0(%e: f32):
      %c = arith.constant 0.707106769 : f32
      %x = arith.mulf %e, %c : f32
      %erf = math.erf %x : f32
      %m = arith.mulf %e, %erf : f32
      modk.yield %m : f32
    }
  }
  %y = modk.alloc : memref<?x256x512xbf16>
  modk.gemm %n, [%wu] rows %all -> %y {epilogue = #modk.epilogue<none>} : memref<?x256x128xbf16>, memref<512x128xf32>, memref<?x1xi64>, memref<?x256x512xbf16>
}

// -----

// An f32 model's products (and a bf16 model's f32 ones: the causal
// predictor's) run CUTLASS 2.x's multistage kernels on both parts, as three
// TF32 products each (tf32x3: the f32 precision the tiles' 3xTF32 mma.sync
// keeps; CUTLASS has no wgmma mainloop that does). Their tile is the part's
// f32 one, 64x128x16 in eight warps of 32x32, one CTA an SM (a stage of
// 12 KiB: 6 stages), on sm_90a as on sm_80; they read the f32 input and
// weight themselves (no bf16 copy), whole 16-byte rows, and the row count
// on the device, so they take rows the device counts too (the causal
// selection's weight gradient, with no grouped launch). The small
// output's weight gradient splits on CUTLASS 2.x's serial split-K (as many
// splits as give 132 or 108 CTAs, at most 16). A weight whose rows are
// not whole 16-byte units (K = 30) keeps the tiles.
// CHECK-LABEL: modk.entry @f32
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_n>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 33665: mma 128x128>, epilogue = #modk.epilogue<none>}
// CHECK: modk.gemm_dgrad{{.*}}{accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m split_k 16, split 66>}
// CHECK: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m>}
// A100-LABEL: modk.entry @f32
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_n>, epilogue = #modk.epilogue<none>}
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 27521: mma 128x128>, epilogue = #modk.epilogue<none>}
// A100: modk.gemm_dgrad{{.*}}{accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 128x128, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m split_k 16, split 54>}
// A100: modk.gemm_wgrad{{.*}}{config = #modk.gemm_config<mma 128x128, from 64: cutlass 64x128x16 cluster 1x1 stages 6 multistage tf32x3 raster along_m>}
// TILES-LABEL: modk.entry @f32
// TILES-NOT: cutlass
modk.entry @f32 attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 64, n_layers = 1, n_heads = 1, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4096, 64], init = ones>, #modk.param<name = "odd", shape = [128, 30], init = ones>]} {
  %w = modk.param "w" : memref<4096x64xf32>
  %odd = modk.param "odd" : memref<128x30xf32>
  %pos = modk.alloc : memref<?x16xi32>
  %seg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %pos, %seg : memref<?x16xi32>, memref<?x1xi64>
  %x = modk.alloc : memref<?x16x64xf32>
  %y = modk.alloc : memref<?x16x4096xf32>
  modk.gemm %x, [%w] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<4096x64xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
  %xo = modk.alloc : memref<?x16x30xf32>
  %yo = modk.alloc : memref<?x16x128xf32>
  modk.gemm %xo, [%odd] rows %seg -> %yo {epilogue = #modk.epilogue<none>} : memref<?x16x30xf32>, memref<128x30xf32>, memref<?x1xi64>, memref<?x16x128xf32>
  %dy = modk.alloc : memref<?x16x64xf32>
  %da = modk.alloc : memref<?x16x4096xf32>
  modk.gemm_dgrad(%dy, %w, %seg, %da) {accumulate = true} : memref<?x16x64xf32>, memref<4096x64xf32>, memref<?x1xi64>, memref<?x16x4096xf32>
  %gdy = modk.alloc : memref<?x16x4096xf32>
  %ga = modk.alloc : memref<?x16x1024xf32>
  %dw = modk.output "grad.w" : memref<4096x1024xf32>
  modk.gemm_wgrad(%gdy, %ga, %seg, %dw) : memref<?x16x4096xf32>, memref<?x16x1024xf32>, memref<?x1xi64>, memref<4096x1024xf32>
  %sdy = modk.alloc : memref<?x16x128xf32>
  %sa = modk.alloc : memref<?x16x128xf32>
  %sdw = modk.output "grad.s" : memref<128x128xf32>
  modk.gemm_wgrad(%sdy, %sa, %seg, %sdw) : memref<?x16x128xf32>, memref<?x16x128xf32>, memref<?x1xi64>, memref<128x128xf32>
  %r = modk.alloc : memref<?x16xf32>
  %cs = modk.alloc : memref<?x16xf32>
  %cpos = modk.alloc : memref<?x16xi32>
  %cseg = modk.alloc : memref<?x1xi64>
  %mask = modk.alloc : memref<?x16xi32>
  modk.route_select %r causal(%cs) -> %cpos, %cseg, %mask {causal_router = #modk.causal_router<predictor>, k = 16 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
  modk.gemm_wgrad(%gdy, %ga, %cseg, %dw) : memref<?x16x4096xf32>, memref<?x16x1024xf32>, memref<?x1xi64>, memref<4096x1024xf32>
}
