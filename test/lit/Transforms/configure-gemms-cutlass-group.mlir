// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass}))' | mod-opt | FileCheck %s
// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80 library=cutlass}))' | FileCheck %s --check-prefix=A100
// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{library=cutlass sm-count=8}))' | mod-opt | FileCheck %s --check-prefix=SM8
// RUN: mod-opt %s --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms{arch=sm_80 library=cutlass sm-count=8}))' | FileCheck %s --check-prefix=A100-GRAD

// A group of MoE experts' products (modk-group-gemms' `group`) on sm_90a
// with library=cutlass: the members' CUTLASS variants are `grouped`, one
// CUTLASS grouped (ptr-array) launch over the members, whose problems the
// device sizes from the members' row counts (docs/cuda.md, "CUTLASS").
// Each member then computes exactly its rows, so the experts' rows, which
// only the device counts, take CUTLASS there: the gate products (a plain
// f32 store), the up products (SwiGLU over each member's own gate, a
// bf16 store) and the down products (the gated scatter into the stream
// at each member's tokens, which stores by itself). The variants are the
// single product's (stages as the descriptors' shared memory leaves). The
// same gated scatter outside a group keeps the tiles in its `config` (its
// count is the device's) and takes the same variants in its
// device_rows_config: a grouped launch of itself alone, which the emitter
// tries first. sm_80 has no grouped variants: its members take the single
// product's CUTLASS variants (launched one by one, each kernel stopping at
// its member's count on the device).
// CHECK-LABEL: modk.entry @experts
// CHECK-COUNT-2: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 8321: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped, from 16769: cutlass 128x256x64 cluster 2x1 stages 4 cooperative raster along_m grouped>, epilogue = #modk.epilogue<none>, group = 0 : i64}
// CHECK-COUNT-2: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 7 pingpong raster along_m grouped, from 8321: cutlass 128x128x64 cluster 2x1 stages 4 cooperative raster along_m grouped, from 16769: cutlass 128x256x64 cluster 2x1 stages 3 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>, group = 1 : i64}
// CHECK-COUNT-2: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>, group = 2 : i64}
// CHECK: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: wgmma 128x64 tma 264, from 16769: wgmma 128x128 tma 132>, device_rows_config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped>, epilogue = #modk.epilogue<rows>}
// A100-LABEL: modk.entry @experts
// A100-NOT: grouped
// A100-NOT: device_rows_config
// A100: modk.gemm {{.*}} {config = #modk.gemm_config<stream 8x4, from 9: stream 64x8, from 65: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m, {{.*}}>, epilogue = #modk.epilogue<none>, group = 0 : i64}
// A100-NOT: grouped
// A100-LABEL: modk.entry @expert_grads
modk.entry @experts attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 4, d_ff = 512, seq_len = 256, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wg0", shape = [256, 128], init = ones>, #modk.param<name = "wg1", shape = [256, 128], init = ones>, #modk.param<name = "wd0", shape = [128, 256], init = ones>, #modk.param<name = "wd1", shape = [128, 256], init = ones>]} {
  %wg0 = modk.param "wg0" : memref<256x128xf32>
  %wg1 = modk.param "wg1" : memref<256x128xf32>
  %wd0 = modk.param "wd0" : memref<128x256xf32>
  %wd1 = modk.param "wd1" : memref<128x256xf32>
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %p0 = modk.alloc : memref<?x40xi32>
  %p1 = modk.alloc : memref<?x40xi32>
  %x0 = modk.alloc : memref<?x40x128xbf16>
  %x1 = modk.alloc : memref<?x40x128xbf16>
  %g0 = modk.alloc : memref<?x40x256xf32>
  %g1 = modk.alloc : memref<?x40x256xf32>
  modk.gemm %x0, [%wg0] rows %s0 -> %g0 {epilogue = #modk.epilogue<none>, group = 0 : i64} : memref<?x40x128xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x256xf32>
  modk.gemm %x1, [%wg1] rows %s1 -> %g1 {epilogue = #modk.epilogue<none>, group = 0 : i64} : memref<?x40x128xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x256xf32>
  %h0 = modk.alloc : memref<?x40x256xbf16>
  %h1 = modk.alloc : memref<?x40x256xbf16>
  modk.gemm %x0, [%wg0] rows %s0 -> %h0 {epilogue = #modk.epilogue<rows>, group = 1 : i64} : memref<?x40x128xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x256xbf16> epilogue {
  ^bb0(%p: memref<?x40x256xf32>):
    modk.rows ins(%g0, %p : memref<?x40x256xf32>, memref<?x40x256xf32>) rows %s0 : memref<?x1xi64> outs(%h0 : memref<?x40x256xbf16>) access(row, row -> row) reduce {
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
  modk.gemm %x1, [%wg1] rows %s1 -> %h1 {epilogue = #modk.epilogue<rows>, group = 1 : i64} : memref<?x40x128xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x256xbf16> epilogue {
  ^bb0(%p: memref<?x40x256xf32>):
    modk.rows ins(%g1, %p : memref<?x40x256xf32>, memref<?x40x256xf32>) rows %s1 : memref<?x1xi64> outs(%h1 : memref<?x40x256xbf16>) access(row, row -> row) reduce {
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
  %stream = modk.alloc : memref<?x256x128xf32>
  %gates = modk.alloc : memref<?x256xf32>
  modk.gemm %h0, [%wd0] rows %s0 -> %stream {epilogue = #modk.epilogue<rows>, group = 2 : i64} : memref<?x40x256xbf16>, memref<128x256xf32>, memref<?x1xi64>, memref<?x256x128xf32> epilogue {
  ^bb0(%p: memref<?x40x128xf32>):
    modk.rows ins(%p, %gates, %stream : memref<?x40x128xf32>, memref<?x256xf32>, memref<?x256x128xf32>) rows %s0 : memref<?x1xi64> tokens(%p0 : memref<?x40xi32>) outs(%stream : memref<?x256x128xf32>) access(row, token_value, token -> token) reduce {
    ^bb0(%a: f32, %g: f32, %x: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %g: f32, %x: f32):
      %ga = arith.mulf %g, %a : f32
      %s = arith.addf %x, %ga : f32
      modk.yield %s : f32
    }
  }
  modk.gemm %h1, [%wd1] rows %s1 -> %stream {epilogue = #modk.epilogue<rows>, group = 2 : i64} : memref<?x40x256xbf16>, memref<128x256xf32>, memref<?x1xi64>, memref<?x256x128xf32> epilogue {
  ^bb0(%p: memref<?x40x128xf32>):
    modk.rows ins(%p, %gates, %stream : memref<?x40x128xf32>, memref<?x256xf32>, memref<?x256x128xf32>) rows %s1 : memref<?x1xi64> tokens(%p1 : memref<?x40xi32>) outs(%stream : memref<?x256x128xf32>) access(row, token_value, token -> token) reduce {
    ^bb0(%a: f32, %g: f32, %x: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %g: f32, %x: f32):
      %ga = arith.mulf %g, %a : f32
      %s = arith.addf %x, %ga : f32
      modk.yield %s : f32
    }
  }
  modk.gemm %h0, [%wd0] rows %s0 -> %stream {epilogue = #modk.epilogue<rows>} : memref<?x40x256xbf16>, memref<128x256xf32>, memref<?x1xi64>, memref<?x256x128xf32> epilogue {
  ^bb0(%p: memref<?x40x128xf32>):
    modk.rows ins(%p, %gates, %stream : memref<?x40x128xf32>, memref<?x256xf32>, memref<?x256x128xf32>) rows %s0 : memref<?x1xi64> tokens(%p0 : memref<?x40xi32>) outs(%stream : memref<?x256x128xf32>) access(row, token_value, token -> token) reduce {
    ^bb0(%a: f32, %g: f32, %x: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %g: f32, %x: f32):
      %ga = arith.mulf %g, %a : f32
      %s = arith.addf %x, %ga : f32
      modk.yield %s : f32
    }
  }
}

// The experts' gradient groups (modk-group-gemms' `group` on
// modk.gemm_dgrad and modk.gemm_wgrad) on sm_90a: an input gradients'
// group whose members store dA and one whose members add to it (beta = 1,
// fewer stages for the source) take the single input gradient's CUTLASS
// variants, `grouped`. A weight gradients' group is one grouped launch
// whose setup kernel reads each member's reduction, its row count, on the
// device, so the experts' rows (counted on the device) take CUTLASS there;
// a single weight gradient over them outside a group (the last) is a
// grouped launch of itself alone (`grouped`, no `group`: a member's split
// into chunks as a group's where its output does not fill the part). Where
// the
// members' outputs together fill the part without a split over the rows
// (two 256 x 128 weights, 16 tiles of 64 x 64, on 8 SMs: sm-count=8) no
// split: each member's output tile sums its rows in one CTA, in order.
// Where they do not (on 132 SMs) the grouped kernel splits each member's
// rows into chunks, extra problems of the launch writing partials that a
// kernel adds to each dW in chunk order (deterministic): the smallest
// cooperative tile, as many chunks as give a wave (132 / 4 tiles of
// 128 x 128), at most the part's 16 (split_k 16); the tiles' variant keeps
// its own split (split 33) below 64 rows and where CUTLASS declines.
// sm_80 runs the gradient groups on CUTLASS 2.x's grouped GEMM, which
// reads each member's row count on the device too (the multistage tiles,
// `grouped`, along N: the order that kernel walks a member's tiles). A
// weight gradients' group whose outputs do not fill the part (on 108 SMs;
// with 8 the two 256 x 128 outputs fill it) splits each member's rows
// into chunks, extra problems of that grouped GEMM, as on sm_90a
// (split_k 16: 2 members of 4 output tiles of 64x128 on 108 SMs of 2
// CTAs, at most 16). Its single
// weight gradient reads the row count on the device, so the one outside a
// group takes CUTLASS, its reduction split (serial split-K: 4 output tiles
// of 64x128 on 8 SMs of 2 CTAs, 4 splits).
// CHECK-LABEL: modk.entry @expert_grads
// CHECK-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped>, group = 3 : i64}
// CHECK-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 16769: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>, group = 4 : i64}
// CHECK-COUNT-2: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<wgmma 128x64 tma 264, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m split_k 16 grouped, split 33>, group = 5 : i64}
// CHECK: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<wgmma 128x64 tma 264, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m split_k 16 grouped, split 33>} :
// SM8-LABEL: modk.entry @expert_grads
// SM8-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 897: cutlass 128x128x64 cluster 2x1 stages 6 cooperative raster along_m grouped>, group = 3 : i64}
// SM8-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped, from 897: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m grouped>, group = 4 : i64}
// SM8-COUNT-2: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<wgmma 128x64 tma 16, from 64: cutlass 64x128x64 cluster 1x1 stages 8 pingpong raster along_m grouped>, group = 5 : i64}
// SM8: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<wgmma 128x64 tma 16, from 64: cutlass 128x128x64 cluster 2x1 stages 5 cooperative raster along_m split_k 4 grouped, split 2>} :
// A100-GRAD-LABEL: modk.entry @expert_grads
// A100-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n grouped, {{.*}}>, group = 3 : i64}
// A100-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n grouped, {{.*}}>, group = 4 : i64}
// A100-COUNT-2: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n split_k 16 grouped, split 27>, group = 5 : i64}
// A100: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m split_k 16, split 27>}
// A100-GRAD-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = false, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n grouped, from 1921: cutlass 128x128x32 cluster 1x1 stages 4 multistage raster along_n grouped>, group = 3 : i64}
// A100-GRAD-COUNT-2: modk.gemm_dgrad{{.*}} {accumulate = true, config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n grouped, from 1921: cutlass 128x128x32 cluster 1x1 stages 4 multistage raster along_n grouped>, group = 4 : i64}
// A100-GRAD-COUNT-2: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_n grouped>, group = 5 : i64}
// A100-GRAD: modk.gemm_wgrad{{.*}} {config = #modk.gemm_config<mma 64x64, from 64: cutlass 64x128x32 cluster 1x1 stages 6 multistage raster along_m split_k 4, split 2>}
modk.entry @expert_grads attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 128, n_layers = 1, n_heads = 4, d_ff = 512, seq_len = 256, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = bf16>, modes = [#modk.mode<topk>], params = [#modk.param<name = "wg0", shape = [256, 128], init = ones>, #modk.param<name = "wg1", shape = [256, 128], init = ones>, #modk.param<name = "wu0", shape = [256, 128], init = ones>, #modk.param<name = "wu1", shape = [256, 128], init = ones>]} {
  %wg0 = modk.param "wg0" : memref<256x128xf32>
  %wg1 = modk.param "wg1" : memref<256x128xf32>
  %wu0 = modk.param "wu0" : memref<256x128xf32>
  %wu1 = modk.param "wu1" : memref<256x128xf32>
  %s0 = modk.alloc : memref<?x1xi64>
  %s1 = modk.alloc : memref<?x1xi64>
  %x0 = modk.alloc : memref<?x40x128xbf16>
  %x1 = modk.alloc : memref<?x40x128xbf16>
  %dg0 = modk.alloc : memref<?x40x256xbf16>
  %dg1 = modk.alloc : memref<?x40x256xbf16>
  %du0 = modk.alloc : memref<?x40x256xbf16>
  %du1 = modk.alloc : memref<?x40x256xbf16>
  %dx0 = modk.alloc : memref<?x40x128xf32>
  %dx1 = modk.alloc : memref<?x40x128xf32>
  %gg0 = modk.output "grad.wg0" : memref<256x128xf32>
  %gg1 = modk.output "grad.wg1" : memref<256x128xf32>
  modk.gemm_dgrad(%dg0, %wg0, %s0, %dx0) {accumulate = false, group = 3 : i64} : memref<?x40x256xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x128xf32>
  modk.gemm_dgrad(%dg1, %wg1, %s1, %dx1) {accumulate = false, group = 3 : i64} : memref<?x40x256xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x128xf32>
  modk.gemm_dgrad(%du0, %wu0, %s0, %dx0) {accumulate = true, group = 4 : i64} : memref<?x40x256xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x128xf32>
  modk.gemm_dgrad(%du1, %wu1, %s1, %dx1) {accumulate = true, group = 4 : i64} : memref<?x40x256xbf16>, memref<256x128xf32>, memref<?x1xi64>, memref<?x40x128xf32>
  modk.gemm_wgrad(%dg0, %x0, %s0, %gg0) {group = 5 : i64} : memref<?x40x256xbf16>, memref<?x40x128xbf16>, memref<?x1xi64>, memref<256x128xf32>
  modk.gemm_wgrad(%dg1, %x1, %s1, %gg1) {group = 5 : i64} : memref<?x40x256xbf16>, memref<?x40x128xbf16>, memref<?x1xi64>, memref<256x128xf32>
  modk.gemm_wgrad(%dg0, %x0, %s0, %gg0) : memref<?x40x256xbf16>, memref<?x40x128xbf16>, memref<?x1xi64>, memref<256x128xf32>
}
