// The row kernels the kernel tests run (test/kernels, test/cuda_emu): named
// ops that modk-generalize turns into modk.rows, and that
// `mod-translate --modk-rows-to-cpp` / `--modk-rows-to-cuda` generate, as
// modc does for a package. Kernel n is modc_rows_<n>, in the order below;
// every op differs from the others (width, element type, sequence length,
// eps, gate, or forward and decode form), so none is shared. RowKernels.h
// names them.
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 1, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 1, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "w96", shape = [96], init = ones>, #modk.param<name = "w128", shape = [128], init = ones>, #modk.param<name = "w90", shape = [90], init = ones>, #modk.param<name = "rw48", shape = [1, 48], init = ones>, #modk.param<name = "w48", shape = [48], init = ones>, #modk.param<name = "rw128", shape = [1, 128], init = ones>, #modk.param<name = "rw70", shape = [1, 70], init = ones>, #modk.param<name = "w70", shape = [70], init = ones>, #modk.param<name = "wd32", shape = [32, 8], init = ones>, #modk.param<name = "wd128", shape = [128, 8], init = ones>, #modk.param<name = "wd70", shape = [70, 8], init = ones>, #modk.param<name = "rw64", shape = [1, 64], init = ones>, #modk.param<name = "w64", shape = [64], init = ones>, #modk.param<name = "rw96", shape = [1, 96], init = ones>, #modk.param<name = "rw32", shape = [1, 32], init = ones>, #modk.param<name = "w32", shape = [32], init = ones>, #modk.param<name = "wd36", shape = [36, 8], init = ones>, #modk.param<name = "wd64", shape = [64, 8], init = ones>, #modk.param<name = "wd200", shape = [200, 8], init = ones>, #modk.param<name = "rw40", shape = [1, 40], init = ones>, #modk.param<name = "w40", shape = [40], init = ones>, #modk.param<name = "ngw24", shape = [24], init = ones>, #modk.param<name = "ngdw24", shape = [24], init = ones>, #modk.param<name = "ngw64", shape = [64], init = ones>, #modk.param<name = "ngdw64", shape = [64], init = ones>, #modk.param<name = "ngw96", shape = [96], init = ones>, #modk.param<name = "ngdw96", shape = [96], init = ones>, #modk.param<name = "ngw128", shape = [128], init = ones>, #modk.param<name = "ngdw128", shape = [128], init = ones>, #modk.param<name = "ngw256", shape = [256], init = ones>, #modk.param<name = "ngdw256", shape = [256], init = ones>, #modk.param<name = "ngw300", shape = [300], init = ones>, #modk.param<name = "ngdw300", shape = [300], init = ones>, #modk.param<name = "rgw24", shape = [1, 24], init = ones>, #modk.param<name = "rgdw24", shape = [1, 24], init = ones>, #modk.param<name = "rgw128", shape = [1, 128], init = ones>, #modk.param<name = "rgdw128", shape = [1, 128], init = ones>, #modk.param<name = "rgw40", shape = [1, 40], init = ones>, #modk.param<name = "rgdw40", shape = [1, 40], init = ones>, #modk.param<name = "rgw300", shape = [1, 300], init = ones>, #modk.param<name = "rgdw300", shape = [1, 300], init = ones>, #modk.param<name = "csa", shape = [40], init = ones>, #modk.param<name = "csb", shape = [1, 40], init = ones>, #modk.param<name = "etable", shape = [19, 37], init = ones>, #modk.param<name = "gtable40", shape = [9, 40], init = ones>, #modk.param<name = "gtable300", shape = [600, 300], init = ones>, #modk.param<name = "pw1_24", shape = [24, 40], init = ones>, #modk.param<name = "pb1_24", shape = [24], init = ones>, #modk.param<name = "pw2_24", shape = [1, 24], init = ones>, #modk.param<name = "pb2_24", shape = [1], init = ones>, #modk.param<name = "pw1_70", shape = [70, 40], init = ones>, #modk.param<name = "pb1_70", shape = [70], init = ones>, #modk.param<name = "pw2_70", shape = [1, 70], init = ones>, #modk.param<name = "pb2_70", shape = [1], init = ones>, #modk.param<name = "gw1_12_10", shape = [10, 12], init = ones>, #modk.param<name = "gb1_12_10", shape = [10], init = ones>, #modk.param<name = "gw2_12_10", shape = [1, 10], init = ones>, #modk.param<name = "gd1w_12_10", shape = [10, 12], init = ones>, #modk.param<name = "gd1b_12_10", shape = [10], init = ones>, #modk.param<name = "gd2w_12_10", shape = [1, 10], init = ones>, #modk.param<name = "gd2b_12_10", shape = [1], init = ones>, #modk.param<name = "gw1_128_128", shape = [128, 128], init = ones>, #modk.param<name = "gb1_128_128", shape = [128], init = ones>, #modk.param<name = "gw2_128_128", shape = [1, 128], init = ones>, #modk.param<name = "gd1w_128_128", shape = [128, 128], init = ones>, #modk.param<name = "gd1b_128_128", shape = [128], init = ones>, #modk.param<name = "gd2w_128_128", shape = [1, 128], init = ones>, #modk.param<name = "gd2b_128_128", shape = [1], init = ones>, #modk.param<name = "gw1_40_24", shape = [24, 40], init = ones>, #modk.param<name = "gb1_40_24", shape = [24], init = ones>, #modk.param<name = "gw2_40_24", shape = [1, 24], init = ones>, #modk.param<name = "gd1w_40_24", shape = [24, 40], init = ones>, #modk.param<name = "gd1b_40_24", shape = [24], init = ones>, #modk.param<name = "gd2w_40_24", shape = [1, 24], init = ones>, #modk.param<name = "gd2b_40_24", shape = [1], init = ones>, #modk.param<name = "rpw48", shape = [48, 8], init = ones>, #modk.param<name = "rpw64", shape = [64, 8], init = ones>, #modk.param<name = "rpw66", shape = [66, 8], init = ones>, #modk.param<name = "rpw72", shape = [72, 8], init = ones>, #modk.param<name = "rpw96", shape = [96, 8], init = ones>, #modk.param<name = "rpw128", shape = [128, 8], init = ones>, #modk.param<name = "rpw192", shape = [192, 8], init = ones>, #modk.param<name = "rpw256", shape = [256, 8], init = ones>, #modk.param<name = "rpw512", shape = [512, 8], init = ones>, #modk.param<name = "rpw32", shape = [32, 8], init = ones>, #modk.param<name = "rpw24", shape = [24, 8], init = ones>, #modk.param<name = "rpw10", shape = [10, 8], init = ones>]} {
  %w96 = modk.param "w96" : memref<96xf32>
  %w128 = modk.param "w128" : memref<128xf32>
  %w90 = modk.param "w90" : memref<90xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x96 = modk.alloc : memref<?x1x96xf32>
  %x128 = modk.alloc : memref<?x1x128xf32>
  %x90 = modk.alloc : memref<?x1x90xf32>
  %a40 = modk.alloc : memref<?x1x40xf32>
  %b40 = modk.alloc : memref<?x1x40xbf16>
  %a33 = modk.alloc : memref<?x1x33xf32>
  %b33 = modk.alloc : memref<?x1x33xbf16>
  %a67 = modk.alloc : memref<?x1x67xf32>
  %b67 = modk.alloc : memref<?x1x67xbf16>
  %a50 = modk.alloc : memref<?x1x50xf32>
  %b50 = modk.alloc : memref<?x1x50xbf16>
  %a40b = modk.alloc : memref<?x2x40xf32>
  %b40b = modk.alloc : memref<?x2x40xbf16>
  %b90 = modk.alloc : memref<?x1x90xbf16>
  // 0, 1: RMSNorm (CpuKernels.RmsNorm; the parallel path, eps 1e-6).
  modk.rmsnorm %x96, %w96 rows %seg -> %x96 {eps = 1.000000e-05 : f64} : memref<?x1x96xf32>, memref<96xf32>, memref<?x1xi64>, memref<?x1x96xf32>
  modk.rmsnorm %x128, %w128 rows %seg -> %x128 {eps = 1.000000e-06 : f64} : memref<?x1x128xf32>, memref<128xf32>, memref<?x1xi64>, memref<?x1x128xf32>
  // 2, 3: swiglu's gradient into f32, into bf16 (N = 40).
  modk.activation_grad(%a40, %a40, %a40, %seg, %a40, %a40) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1xi64>, memref<?x1x40xf32>, memref<?x1x40xf32>
  modk.activation_grad(%a40, %a40, %a40, %seg, %b40, %b40) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1xi64>, memref<?x1x40xbf16>, memref<?x1x40xbf16>
  // 4, 5: gelu's gradient into f32, into bf16 (N = 33).
  modk.activation_grad(%a33, %a33, %seg, %a33) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x33xf32>, memref<?x1x33xf32>, memref<?x1xi64>, memref<?x1x33xf32>
  modk.activation_grad(%a33, %a33, %seg, %b33) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x33xf32>, memref<?x1x33xf32>, memref<?x1xi64>, memref<?x1x33xbf16>
  // 6, 7: RMSNorm and the residual add of D = 90 (CudaKernels.RmsnormAndAdd).
  modk.rmsnorm %x90, %w90 rows %seg -> %x90 {eps = 1.000000e-05 : f64} : memref<?x1x90xf32>, memref<90xf32>, memref<?x1xi64>, memref<?x1x90xf32>
  modk.add %x90, %x90 rows %seg -> %x90 : memref<?x1x90xf32>, memref<?x1x90xf32>, memref<?x1xi64>, memref<?x1x90xf32>
  // 8, 9: gelu into f32, into bf16 (N = 67).
  modk.activation(%a67, %seg, %a67) {kind = #modk.activation<gelu>} : memref<?x1x67xf32>, memref<?x1xi64>, memref<?x1x67xf32>
  modk.activation(%a67, %seg, %b67) {kind = #modk.activation<gelu>} : memref<?x1x67xf32>, memref<?x1xi64>, memref<?x1x67xbf16>
  // 10, 11: swiglu into f32, into bf16 (N = 50).
  modk.activation(%a50, %a50, %seg, %a50) {kind = #modk.activation<swiglu>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xf32>
  modk.activation(%a50, %a50, %seg, %b50) {kind = #modk.activation<swiglu>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xbf16>
  // 12-15: the activations' gradients of N = 50, into f32 and bf16.
  modk.activation_grad(%a50, %a50, %a50, %seg, %a50, %a50) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xf32>, memref<?x1x50xf32>
  modk.activation_grad(%a50, %a50, %a50, %seg, %b50, %b50) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xbf16>, memref<?x1x50xbf16>
  modk.activation_grad(%a50, %a50, %seg, %a50) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xf32>
  modk.activation_grad(%a50, %a50, %seg, %b50) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xbf16>
  // 16, 17: the residual add of D = 40, into f32 and bf16.
  modk.add %a40b, %a40b rows %seg -> %a40b : memref<?x2x40xf32>, memref<?x2x40xf32>, memref<?x1xi64>, memref<?x2x40xf32>
  modk.add %a40b, %a40b rows %seg -> %b40b : memref<?x2x40xf32>, memref<?x2x40xf32>, memref<?x1xi64>, memref<?x2x40xbf16>
  // 18: the add of D = 90 into bf16.
  modk.add %x90, %x90 rows %seg -> %b90 : memref<?x1x90xf32>, memref<?x1x90xf32>, memref<?x1xi64>, memref<?x1x90xbf16>
  // The routed blocks' kernels, modk.rows as the lowering writes them: the
  // router over every token (the identity row set), the gather + RMSNorm of
  // the selected ones at their tokens, and the gated scatter after a plain
  // GEMM (the selections and the GEMMs are not row kernels). Their buffers:
  %rw48 = modk.param "rw48" : memref<1x48xf32>
  %w48 = modk.param "w48" : memref<48xf32>
  %x32x48 = modk.alloc : memref<?x32x48xf32>
  %p32 = modk.alloc : memref<?x32xf32>
  %r32 = modk.alloc : memref<?x32xf32>
  %pos32 = modk.alloc : memref<?x32xi32>
  %mask32 = modk.alloc : memref<?x32xi32>
  %xs32x48 = modk.alloc : memref<?x32x48xf32>
  %xn32x48 = modk.alloc : memref<?x32x48xf32>
  %rw128 = modk.param "rw128" : memref<1x128xf32>
  %x512x128 = modk.alloc : memref<?x512x128xf32>
  %p512 = modk.alloc : memref<?x512xf32>
  %r512 = modk.alloc : memref<?x512xf32>
  %pos512 = modk.alloc : memref<?x512xi32>
  %mask512 = modk.alloc : memref<?x512xi32>
  %xs512x128 = modk.alloc : memref<?x512x128xf32>
  %xn512x128 = modk.alloc : memref<?x512x128xf32>
  %rw70 = modk.param "rw70" : memref<1x70xf32>
  %w70 = modk.param "w70" : memref<70xf32>
  %x40x70 = modk.alloc : memref<?x40x70xf32>
  %p40 = modk.alloc : memref<?x40xf32>
  %r40 = modk.alloc : memref<?x40xf32>
  %pos40 = modk.alloc : memref<?x40xi32>
  %mask40 = modk.alloc : memref<?x40xi32>
  %xs40x70 = modk.alloc : memref<?x40x70xf32>
  %xn40x70 = modk.alloc : memref<?x40x70xf32>
  %x1x48 = modk.alloc : memref<?x1x48xf32>
  %p1 = modk.alloc : memref<?x1xf32>
  %r1 = modk.alloc : memref<?x1xf32>
  %pos1 = modk.alloc : memref<?x1xi32>
  %mask1 = modk.alloc : memref<?x1xi32>
  %xs1x48 = modk.alloc : memref<?x1x48xf32>
  %xn1x48 = modk.alloc : memref<?x1x48xf32>
  %wd32 = modk.param "wd32" : memref<32x8xf32>
  %x40x32 = modk.alloc : memref<?x40x32xf32>
  %h40 = modk.alloc : memref<?x40x8xf32>
  %m40x32 = modk.alloc : memref<?x40x32xf32>
  %a40x32 = modk.alloc : memref<?x40x32xf32>
  %wd128 = modk.param "wd128" : memref<128x8xf32>
  %h512 = modk.alloc : memref<?x512x8xf32>
  %m512x128 = modk.alloc : memref<?x512x128xf32>
  %a512x128 = modk.alloc : memref<?x512x128xf32>
  %wd70 = modk.param "wd70" : memref<70x8xf32>
  %m40x70 = modk.alloc : memref<?x40x70xf32>
  %a40x70 = modk.alloc : memref<?x40x70xf32>
  %step = modk.alloc : memref<?x1xi32>
  %active = modk.alloc : memref<?x1xi8>
  %rw64 = modk.param "rw64" : memref<1x64xf32>
  %w64 = modk.param "w64" : memref<64xf32>
  %x1x64 = modk.alloc : memref<?x1x64xf32>
  %xs1x64 = modk.alloc : memref<?x1x64xf32>
  %xn1x64 = modk.alloc : memref<?x1x64xf32>
  %x1x128 = modk.alloc : memref<?x1x128xf32>
  %xs1x128 = modk.alloc : memref<?x1x128xf32>
  %xn1x128 = modk.alloc : memref<?x1x128xf32>
  %rw96 = modk.param "rw96" : memref<1x96xf32>
  %x1x96 = modk.alloc : memref<?x1x96xf32>
  %xs1x96 = modk.alloc : memref<?x1x96xf32>
  %xn1x96 = modk.alloc : memref<?x1x96xf32>
  %rw32 = modk.param "rw32" : memref<1x32xf32>
  %w32 = modk.param "w32" : memref<32xf32>
  %x1x32 = modk.alloc : memref<?x1x32xf32>
  %xs1x32 = modk.alloc : memref<?x1x32xf32>
  %xn1x32 = modk.alloc : memref<?x1x32xf32>
  %wd36 = modk.param "wd36" : memref<36x8xf32>
  %x1x36 = modk.alloc : memref<?x1x36xf32>
  %h1 = modk.alloc : memref<?x1x8xf32>
  %m1x36 = modk.alloc : memref<?x1x36xf32>
  %a1x36 = modk.alloc : memref<?x1x36xf32>
  %wd64 = modk.param "wd64" : memref<64x8xf32>
  %m1x64 = modk.alloc : memref<?x1x64xf32>
  %a1x64 = modk.alloc : memref<?x1x64xf32>
  %wd200 = modk.param "wd200" : memref<200x8xf32>
  %x1x200 = modk.alloc : memref<?x1x200xf32>
  %m1x200 = modk.alloc : memref<?x1x200xf32>
  %a1x200 = modk.alloc : memref<?x1x200xf32>
  // 19-26: each routed layer's router over every token (r = w . x: 19,
  // 21, 23, 25), then the gather + RMSNorm of the selected tokens (20, 22,
  // 24, 26): S = 32, D = 48 (CpuKernels.GatherRmsNorm); S = 512, D = 128,
  // eps 1e-6 (the parallel path); S = 40, D = 70 (CpuKernels.Router,
  // CudaKernels.GatherRmsnorm); S = 1, D = 48, the forward form
  // CpuKernelsDecode.GatherRmsNorm compares its decode form with.
  %ipos1 = modk.alloc : memref<?x32xi32>
  %iseg1 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos1, %iseg1 : memref<?x32xi32>, memref<?x1xi64>
  modk.rows ins(%x32x48, %rw48 : memref<?x32x48xf32>, memref<1x48xf32>) rows %iseg1 : memref<?x1xi64> outs(%r32 : memref<?x32xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x32x48, %w48 : memref<?x32x48xf32>, memref<48xf32>) rows %seg : memref<?x1xi64> tokens(%pos32 : memref<?x32xi32>) outs(%xs32x48, %xn32x48 : memref<?x32x48xf32>, memref<?x32x48xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 48.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos2 = modk.alloc : memref<?x512xi32>
  %iseg2 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos2, %iseg2 : memref<?x512xi32>, memref<?x1xi64>
  modk.rows ins(%x512x128, %rw128 : memref<?x512x128xf32>, memref<1x128xf32>) rows %iseg2 : memref<?x1xi64> outs(%r512 : memref<?x512xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x512x128, %w128 : memref<?x512x128xf32>, memref<128xf32>) rows %seg : memref<?x1xi64> tokens(%pos512 : memref<?x512xi32>) outs(%xs512x128, %xn512x128 : memref<?x512x128xf32>, memref<?x512x128xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-06 : f32
      %width = arith.constant 128.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos3 = modk.alloc : memref<?x40xi32>
  %iseg3 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos3, %iseg3 : memref<?x40xi32>, memref<?x1xi64>
  modk.rows ins(%x40x70, %rw70 : memref<?x40x70xf32>, memref<1x70xf32>) rows %iseg3 : memref<?x1xi64> outs(%r40 : memref<?x40xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x40x70, %w70 : memref<?x40x70xf32>, memref<70xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%xs40x70, %xn40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 70.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos4 = modk.alloc : memref<?x1xi32>
  %iseg4 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos4, %iseg4 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x48, %rw48 : memref<?x1x48xf32>, memref<1x48xf32>) rows %iseg4 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x48, %w48 : memref<?x1x48xf32>, memref<48xf32>) rows %seg : memref<?x1xi64> tokens(%pos1 : memref<?x1xi32>) outs(%xs1x48, %xn1x48 : memref<?x1x48xf32>, memref<?x1x48xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 48.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  // 27-33: the gated scatter into the stream: S = 40, D = 32, gates linear,
  // sigmoid, one (CpuKernels.GateScaleScatter); S = 512, D = 128, sigmoid;
  // S = 40, D = 70, the three gates (CudaKernels.GateScaleScatter).
  modk.gemm %h40, [%wd32] rows %seg -> %m40x32 {epilogue = #modk.epilogue<none>} : memref<?x40x8xf32>, memref<32x8xf32>, memref<?x1xi64>, memref<?x40x32xf32>
  modk.rows ins(%a40x32, %m40x32, %r40, %x40x32 : memref<?x40x32xf32>, memref<?x40x32xf32>, memref<?x40xf32>, memref<?x40x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%x40x32 : memref<?x40x32xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %gf = arith.mulf %e2, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h40, [%wd32] rows %seg -> %m40x32 {epilogue = #modk.epilogue<none>} : memref<?x40x8xf32>, memref<32x8xf32>, memref<?x1xi64>, memref<?x40x32xf32>
  modk.rows ins(%a40x32, %m40x32, %r40, %x40x32 : memref<?x40x32xf32>, memref<?x40x32xf32>, memref<?x40xf32>, memref<?x40x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%x40x32 : memref<?x40x32xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %nr = arith.negf %e2 : f32
    %er = math.exp %nr : f32
    %c1 = arith.constant 1.000000e+00 : f32
    %den = arith.addf %er, %c1 : f32
    %g = arith.divf %c1, %den : f32
    %gf = arith.mulf %g, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h40, [%wd32] rows %seg -> %m40x32 {epilogue = #modk.epilogue<none>} : memref<?x40x8xf32>, memref<32x8xf32>, memref<?x1xi64>, memref<?x40x32xf32>
  modk.rows ins(%a40x32, %m40x32, %r40, %x40x32 : memref<?x40x32xf32>, memref<?x40x32xf32>, memref<?x40xf32>, memref<?x40x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%x40x32 : memref<?x40x32xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %y = arith.addf %e3, %f : f32
    modk.yield %y : f32
  }
  modk.gemm %h512, [%wd128] rows %seg -> %m512x128 {epilogue = #modk.epilogue<none>} : memref<?x512x8xf32>, memref<128x8xf32>, memref<?x1xi64>, memref<?x512x128xf32>
  modk.rows ins(%a512x128, %m512x128, %r512, %x512x128 : memref<?x512x128xf32>, memref<?x512x128xf32>, memref<?x512xf32>, memref<?x512x128xf32>) rows %seg : memref<?x1xi64> tokens(%pos512 : memref<?x512xi32>) outs(%x512x128 : memref<?x512x128xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %nr = arith.negf %e2 : f32
    %er = math.exp %nr : f32
    %c1 = arith.constant 1.000000e+00 : f32
    %den = arith.addf %er, %c1 : f32
    %g = arith.divf %c1, %den : f32
    %gf = arith.mulf %g, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h40, [%wd70] rows %seg -> %m40x70 {epilogue = #modk.epilogue<none>} : memref<?x40x8xf32>, memref<70x8xf32>, memref<?x1xi64>, memref<?x40x70xf32>
  modk.rows ins(%a40x70, %m40x70, %r40, %x40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>, memref<?x40xf32>, memref<?x40x70xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%x40x70 : memref<?x40x70xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %gf = arith.mulf %e2, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h40, [%wd70] rows %seg -> %m40x70 {epilogue = #modk.epilogue<none>} : memref<?x40x8xf32>, memref<70x8xf32>, memref<?x1xi64>, memref<?x40x70xf32>
  modk.rows ins(%a40x70, %m40x70, %r40, %x40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>, memref<?x40xf32>, memref<?x40x70xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%x40x70 : memref<?x40x70xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %nr = arith.negf %e2 : f32
    %er = math.exp %nr : f32
    %c1 = arith.constant 1.000000e+00 : f32
    %den = arith.addf %er, %c1 : f32
    %g = arith.divf %c1, %den : f32
    %gf = arith.mulf %g, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h40, [%wd70] rows %seg -> %m40x70 {epilogue = #modk.epilogue<none>} : memref<?x40x8xf32>, memref<70x8xf32>, memref<?x1xi64>, memref<?x40x70xf32>
  modk.rows ins(%a40x70, %m40x70, %r40, %x40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>, memref<?x40xf32>, memref<?x40x70xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%x40x70 : memref<?x40x70xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %y = arith.addf %e3, %f : f32
    modk.yield %y : f32
  }
  // 34-42: a decode step's router over every sequence's token and its
  // gather + RMSNorm (one token a sequence) of D = 48 (the router is 25's
  // kernel; gather 34: CpuKernelsDecode.GatherRmsNorm), then of 64, 128, 96,
  // 32 (routers 35, 37, 39, 41; gathers 36, 38, 40, 42:
  // CudaDecodeKernels.DecodeRoute*).
  %ipos8 = modk.alloc : memref<?x1xi32>
  %iseg8 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos8, %iseg8 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x48, %rw48 : memref<?x1x48xf32>, memref<1x48xf32>) rows %iseg8 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x48, %w48 : memref<?x1x48xf32>, memref<48xf32>) rows %seg : memref<?x1xi64> outs(%xs1x48, %xn1x48 : memref<?x1x48xf32>, memref<?x1x48xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 48.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos9 = modk.alloc : memref<?x1xi32>
  %iseg9 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos9, %iseg9 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x64, %rw64 : memref<?x1x64xf32>, memref<1x64xf32>) rows %iseg9 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x64, %w64 : memref<?x1x64xf32>, memref<64xf32>) rows %seg : memref<?x1xi64> outs(%xs1x64, %xn1x64 : memref<?x1x64xf32>, memref<?x1x64xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 64.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos10 = modk.alloc : memref<?x1xi32>
  %iseg10 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos10, %iseg10 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x128, %rw128 : memref<?x1x128xf32>, memref<1x128xf32>) rows %iseg10 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x128, %w128 : memref<?x1x128xf32>, memref<128xf32>) rows %seg : memref<?x1xi64> outs(%xs1x128, %xn1x128 : memref<?x1x128xf32>, memref<?x1x128xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 128.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos11 = modk.alloc : memref<?x1xi32>
  %iseg11 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos11, %iseg11 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x96, %rw96 : memref<?x1x96xf32>, memref<1x96xf32>) rows %iseg11 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x96, %w96 : memref<?x1x96xf32>, memref<96xf32>) rows %seg : memref<?x1xi64> outs(%xs1x96, %xn1x96 : memref<?x1x96xf32>, memref<?x1x96xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 96.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos12 = modk.alloc : memref<?x1xi32>
  %iseg12 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos12, %iseg12 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x32, %rw32 : memref<?x1x32xf32>, memref<1x32xf32>) rows %iseg12 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x32, %w32 : memref<?x1x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> outs(%xs1x32, %xn1x32 : memref<?x1x32xf32>, memref<?x1x32xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 32.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  // 43-49: a decode step's gated scatter (a [B, 1, D] stream: the decode
  // form, one token a sequence): D = 36, the three gates
  // (CpuKernelsDecode.GateScaleScatter); D = 64, the three gates, and
  // D = 200, sigmoid (CudaDecodeKernels.DecodeGateScaleScatterMatchesCpu).
  modk.gemm %h1, [%wd36] rows %seg -> %m1x36 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<36x8xf32>, memref<?x1xi64>, memref<?x1x36xf32>
  modk.rows ins(%a1x36, %m1x36, %r1, %x1x36 : memref<?x1x36xf32>, memref<?x1x36xf32>, memref<?x1xf32>, memref<?x1x36xf32>) rows %seg : memref<?x1xi64> outs(%x1x36 : memref<?x1x36xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %gf = arith.mulf %e2, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h1, [%wd36] rows %seg -> %m1x36 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<36x8xf32>, memref<?x1xi64>, memref<?x1x36xf32>
  modk.rows ins(%a1x36, %m1x36, %r1, %x1x36 : memref<?x1x36xf32>, memref<?x1x36xf32>, memref<?x1xf32>, memref<?x1x36xf32>) rows %seg : memref<?x1xi64> outs(%x1x36 : memref<?x1x36xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %nr = arith.negf %e2 : f32
    %er = math.exp %nr : f32
    %c1 = arith.constant 1.000000e+00 : f32
    %den = arith.addf %er, %c1 : f32
    %g = arith.divf %c1, %den : f32
    %gf = arith.mulf %g, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h1, [%wd36] rows %seg -> %m1x36 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<36x8xf32>, memref<?x1xi64>, memref<?x1x36xf32>
  modk.rows ins(%a1x36, %m1x36, %r1, %x1x36 : memref<?x1x36xf32>, memref<?x1x36xf32>, memref<?x1xf32>, memref<?x1x36xf32>) rows %seg : memref<?x1xi64> outs(%x1x36 : memref<?x1x36xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %y = arith.addf %e3, %f : f32
    modk.yield %y : f32
  }
  modk.gemm %h1, [%wd64] rows %seg -> %m1x64 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<64x8xf32>, memref<?x1xi64>, memref<?x1x64xf32>
  modk.rows ins(%a1x64, %m1x64, %r1, %x1x64 : memref<?x1x64xf32>, memref<?x1x64xf32>, memref<?x1xf32>, memref<?x1x64xf32>) rows %seg : memref<?x1xi64> outs(%x1x64 : memref<?x1x64xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %gf = arith.mulf %e2, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h1, [%wd64] rows %seg -> %m1x64 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<64x8xf32>, memref<?x1xi64>, memref<?x1x64xf32>
  modk.rows ins(%a1x64, %m1x64, %r1, %x1x64 : memref<?x1x64xf32>, memref<?x1x64xf32>, memref<?x1xf32>, memref<?x1x64xf32>) rows %seg : memref<?x1xi64> outs(%x1x64 : memref<?x1x64xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %nr = arith.negf %e2 : f32
    %er = math.exp %nr : f32
    %c1 = arith.constant 1.000000e+00 : f32
    %den = arith.addf %er, %c1 : f32
    %g = arith.divf %c1, %den : f32
    %gf = arith.mulf %g, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  modk.gemm %h1, [%wd64] rows %seg -> %m1x64 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<64x8xf32>, memref<?x1xi64>, memref<?x1x64xf32>
  modk.rows ins(%a1x64, %m1x64, %r1, %x1x64 : memref<?x1x64xf32>, memref<?x1x64xf32>, memref<?x1xf32>, memref<?x1x64xf32>) rows %seg : memref<?x1xi64> outs(%x1x64 : memref<?x1x64xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %y = arith.addf %e3, %f : f32
    modk.yield %y : f32
  }
  modk.gemm %h1, [%wd200] rows %seg -> %m1x200 {epilogue = #modk.epilogue<none>} : memref<?x1x8xf32>, memref<200x8xf32>, memref<?x1xi64>, memref<?x1x200xf32>
  modk.rows ins(%a1x200, %m1x200, %r1, %x1x200 : memref<?x1x200xf32>, memref<?x1x200xf32>, memref<?x1xf32>, memref<?x1x200xf32>) rows %seg : memref<?x1xi64> outs(%x1x200 : memref<?x1x200xf32>) access(row, row, token_value, token -> token) reduce {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    modk.yield
  } body {
  ^bb0(%e0: f32, %e1: f32, %e2: f32, %e3: f32):
    %f = arith.addf %e0, %e1 : f32
    %nr = arith.negf %e2 : f32
    %er = math.exp %nr : f32
    %c1 = arith.constant 1.000000e+00 : f32
    %den = arith.addf %er, %c1 : f32
    %g = arith.divf %c1, %den : f32
    %gf = arith.mulf %g, %f : f32
    %y = arith.addf %e3, %gf : f32
    modk.yield %y : f32
  }
  // 50, 51: the router of S = 40, D = 70 with the RMSNorm statistics
  // riding on it (as modk-fuse-router-norm writes it: r and each token's
  // sum of x^2), then the gather that reads that sum at its token and sums
  // nothing (CpuKernels.Router, GatherScale,
  // CudaKernels.*). 52-55: the router and gather of S = 1, D = 40,
  // unfused, then fused: a decode step's router is bit for bit both of
  // these routers (CpuKernelsDecode.DecodeRouteWithRouterAsDecision).
  %st40 = modk.alloc : memref<?x40xf32>
  %st1 = modk.alloc : memref<?x1xf32>
  %rw40 = modk.param "rw40" : memref<1x40xf32>
  %w40 = modk.param "w40" : memref<40xf32>
  %x1x40 = modk.alloc : memref<?x1x40xf32>
  %xs1x40 = modk.alloc : memref<?x1x40xf32>
  %xn1x40 = modk.alloc : memref<?x1x40xf32>
  %ipos5 = modk.alloc : memref<?x40xi32>
  %iseg5 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos5, %iseg5 : memref<?x40xi32>, memref<?x1xi64>
  modk.rows ins(%x40x70, %rw70 : memref<?x40x70xf32>, memref<1x70xf32>) rows %iseg5 : memref<?x1xi64> outs(%r40, %st40 : memref<?x40xf32>, memref<?x40xf32>) access(row, column -> row_value, row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      %xx = arith.mulf %a0, %a0 : f32
      modk.yield %xw, %xx : f32, f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32, %s1: f32):
      modk.yield %s0, %s1 : f32, f32
    }
  modk.rows ins(%x40x70, %w70, %st40 : memref<?x40x70xf32>, memref<70xf32>, memref<?x40xf32>) rows %seg : memref<?x1xi64> tokens(%pos40 : memref<?x40xi32>) outs(%xs40x70, %xn40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>) access(token, column, token_value -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32, %a2: f32):
      modk.yield
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 70.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos6 = modk.alloc : memref<?x1xi32>
  %iseg6 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos6, %iseg6 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x40, %rw40 : memref<?x1x40xf32>, memref<1x40xf32>) rows %iseg6 : memref<?x1xi64> outs(%r1 : memref<?x1xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
  modk.rows ins(%x1x40, %w40 : memref<?x1x40xf32>, memref<40xf32>) rows %seg : memref<?x1xi64> tokens(%pos1 : memref<?x1xi32>) outs(%xs1x40, %xn1x40 : memref<?x1x40xf32>, memref<?x1x40xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 40.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  %ipos7 = modk.alloc : memref<?x1xi32>
  %iseg7 = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %ipos7, %iseg7 : memref<?x1xi32>, memref<?x1xi64>
  modk.rows ins(%x1x40, %rw40 : memref<?x1x40xf32>, memref<1x40xf32>) rows %iseg7 : memref<?x1xi64> outs(%r1, %st1 : memref<?x1xf32>, memref<?x1xf32>) access(row, column -> row_value, row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      %xx = arith.mulf %a0, %a0 : f32
      modk.yield %xw, %xx : f32, f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32, %s1: f32):
      modk.yield %s0, %s1 : f32, f32
    }
  modk.rows ins(%x1x40, %w40, %st1 : memref<?x1x40xf32>, memref<40xf32>, memref<?x1xf32>) rows %seg : memref<?x1xi64> tokens(%pos1 : memref<?x1xi32>) outs(%xs1x40, %xn1x40 : memref<?x1x40xf32>, memref<?x1x40xf32>) access(token, column, token_value -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32, %a2: f32):
      modk.yield
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %eps = arith.constant 1.000000e-05 : f32
      %width = arith.constant 40.0 : f32
      %mean = arith.divf %ss, %width : f32
      %var = arith.addf %mean, %eps : f32
      %root = math.sqrt %var : f32
      %one = arith.constant 1.0 : f32
      %scale = arith.divf %one, %root : f32
      %xs = arith.mulf %b0, %scale : f32
      %n = arith.mulf %xs, %b1 : f32
      modk.yield %b0, %n : f32, f32
    }
  // 56, 57: the gradient of the routed gather, dx[token] += dxs[row] at
  // each selected row's token: S = 64, D = 300 (CpuKernelsTrain.GatherGrad)
  // and S = 16, D = 40 with 8 gathered rows a sequence
  // (CudaTrainKernels.GatherGradMatchesCpu).
  %dxs64x300 = modk.alloc : memref<?x64x300xf32>
  %dx64x300 = modk.alloc : memref<?x64x300xf32>
  %gpos64 = modk.alloc : memref<?x64xi32>
  %dxs8x40 = modk.alloc : memref<?x8x40xf32>
  %dx16x40 = modk.alloc : memref<?x16x40xf32>
  %gpos8 = modk.alloc : memref<?x8xi32>
  modk.gather_grad(%dxs64x300, %gpos64, %seg, %dx64x300) : memref<?x64x300xf32>, memref<?x64xi32>, memref<?x1xi64>, memref<?x64x300xf32>
  modk.gather_grad(%dxs8x40, %gpos8, %seg, %dx16x40) : memref<?x8x40xf32>, memref<?x8xi32>, memref<?x1xi64>, memref<?x16x40xf32>
  // 58 .. 64: the gradient of the gated scatter, df[row] = g(r) dy[token]
  // and dr[token] += g'(r) <dy[token], f[row]>: S = 16, D = 12 with the
  // gates linear, sigmoid and one; S = 256, D = 160 sigmoid
  // (CpuKernelsTrain.GateScaleScatterGrad); S = 16, D = 40 with the three
  // gates (CudaTrainKernels.GateScaleScatterGradMatchesCpu).
  %sr16 = modk.alloc : memref<?x16xf32>
  %sdr16 = modk.alloc : memref<?x16xf32>
  %spos16 = modk.alloc : memref<?x16xi32>
  %sr256 = modk.alloc : memref<?x256xf32>
  %sdr256 = modk.alloc : memref<?x256xf32>
  %spos256 = modk.alloc : memref<?x256xi32>
  %sdy16x12 = modk.alloc : memref<?x16x12xf32>
  %sf16x12 = modk.alloc : memref<?x16x12xf32>
  %sdf16x12 = modk.alloc : memref<?x16x12xf32>
  %sdy256x160 = modk.alloc : memref<?x256x160xf32>
  %sf256x160 = modk.alloc : memref<?x256x160xf32>
  %sdf256x160 = modk.alloc : memref<?x256x160xf32>
  %sdy16x40 = modk.alloc : memref<?x16x40xf32>
  %sf16x40 = modk.alloc : memref<?x16x40xf32>
  %sdf16x40 = modk.alloc : memref<?x16x40xf32>
  modk.scatter_grad(%sdy16x12, %sr16, %sf16x12, %spos16, %seg, %sdf16x12, %sdr16) {gate = #modk.gate<linear>} : memref<?x16x12xf32>, memref<?x16xf32>, memref<?x16x12xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x12xf32>, memref<?x16xf32>
  modk.scatter_grad(%sdy16x12, %sr16, %sf16x12, %spos16, %seg, %sdf16x12, %sdr16) {gate = #modk.gate<sigmoid>} : memref<?x16x12xf32>, memref<?x16xf32>, memref<?x16x12xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x12xf32>, memref<?x16xf32>
  modk.scatter_grad(%sdy16x12, %sr16, %sf16x12, %spos16, %seg, %sdf16x12, %sdr16) {gate = #modk.gate<one>} : memref<?x16x12xf32>, memref<?x16xf32>, memref<?x16x12xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x12xf32>, memref<?x16xf32>
  modk.scatter_grad(%sdy256x160, %sr256, %sf256x160, %spos256, %seg, %sdf256x160, %sdr256) {gate = #modk.gate<sigmoid>} : memref<?x256x160xf32>, memref<?x256xf32>, memref<?x256x160xf32>, memref<?x256xi32>, memref<?x1xi64>, memref<?x256x160xf32>, memref<?x256xf32>
  modk.scatter_grad(%sdy16x40, %sr16, %sf16x40, %spos16, %seg, %sdf16x40, %sdr16) {gate = #modk.gate<linear>} : memref<?x16x40xf32>, memref<?x16xf32>, memref<?x16x40xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x40xf32>, memref<?x16xf32>
  modk.scatter_grad(%sdy16x40, %sr16, %sf16x40, %spos16, %seg, %sdf16x40, %sdr16) {gate = #modk.gate<sigmoid>} : memref<?x16x40xf32>, memref<?x16xf32>, memref<?x16x40xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x40xf32>, memref<?x16xf32>
  modk.scatter_grad(%sdy16x40, %sr16, %sf16x40, %spos16, %seg, %sdf16x40, %sdr16) {gate = #modk.gate<one>} : memref<?x16x40xf32>, memref<?x16xf32>, memref<?x16x40xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x40xf32>, memref<?x16xf32>
  // 65 .. 73: RMSNorm's gradient (two sums a row, dw a column sum), eps
  // 1e-5, by D and whether dx accumulates: 24, 96, 256 both ways
  // (CpuKernelsTrain.RmsNormGrad), 128 (its thread-count determinism test),
  // 300 accumulating and 64 (CudaTrainKernels.RmsnormGradMatchesCpu).
  %ngx24 = modk.alloc : memref<?x1x24xf32>
  %ngw24 = modk.param "ngw24" : memref<24xf32>
  %ngdw24 = modk.param "ngdw24" : memref<24xf32>
  %ngx64 = modk.alloc : memref<?x1x64xf32>
  %ngw64 = modk.param "ngw64" : memref<64xf32>
  %ngdw64 = modk.param "ngdw64" : memref<64xf32>
  %ngx96 = modk.alloc : memref<?x1x96xf32>
  %ngw96 = modk.param "ngw96" : memref<96xf32>
  %ngdw96 = modk.param "ngdw96" : memref<96xf32>
  %ngx128 = modk.alloc : memref<?x1x128xf32>
  %ngw128 = modk.param "ngw128" : memref<128xf32>
  %ngdw128 = modk.param "ngdw128" : memref<128xf32>
  %ngx256 = modk.alloc : memref<?x1x256xf32>
  %ngw256 = modk.param "ngw256" : memref<256xf32>
  %ngdw256 = modk.param "ngdw256" : memref<256xf32>
  %ngx300 = modk.alloc : memref<?x1x300xf32>
  %ngw300 = modk.param "ngw300" : memref<300xf32>
  %ngdw300 = modk.param "ngdw300" : memref<300xf32>
  modk.rmsnorm_grad(%ngx24, %ngw24, %ngx24, %seg, %ngx24, %ngdw24) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x1x24xf32>, memref<24xf32>, memref<?x1x24xf32>, memref<?x1xi64>, memref<?x1x24xf32>, memref<24xf32>
  modk.rmsnorm_grad(%ngx24, %ngw24, %ngx24, %seg, %ngx24, %ngdw24) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x1x24xf32>, memref<24xf32>, memref<?x1x24xf32>, memref<?x1xi64>, memref<?x1x24xf32>, memref<24xf32>
  modk.rmsnorm_grad(%ngx96, %ngw96, %ngx96, %seg, %ngx96, %ngdw96) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x1x96xf32>, memref<96xf32>, memref<?x1x96xf32>, memref<?x1xi64>, memref<?x1x96xf32>, memref<96xf32>
  modk.rmsnorm_grad(%ngx96, %ngw96, %ngx96, %seg, %ngx96, %ngdw96) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x1x96xf32>, memref<96xf32>, memref<?x1x96xf32>, memref<?x1xi64>, memref<?x1x96xf32>, memref<96xf32>
  modk.rmsnorm_grad(%ngx256, %ngw256, %ngx256, %seg, %ngx256, %ngdw256) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x1x256xf32>, memref<256xf32>, memref<?x1x256xf32>, memref<?x1xi64>, memref<?x1x256xf32>, memref<256xf32>
  modk.rmsnorm_grad(%ngx256, %ngw256, %ngx256, %seg, %ngx256, %ngdw256) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x1x256xf32>, memref<256xf32>, memref<?x1x256xf32>, memref<?x1xi64>, memref<?x1x256xf32>, memref<256xf32>
  modk.rmsnorm_grad(%ngx128, %ngw128, %ngx128, %seg, %ngx128, %ngdw128) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x1x128xf32>, memref<128xf32>, memref<?x1x128xf32>, memref<?x1xi64>, memref<?x1x128xf32>, memref<128xf32>
  modk.rmsnorm_grad(%ngx300, %ngw300, %ngx300, %seg, %ngx300, %ngdw300) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x1x300xf32>, memref<300xf32>, memref<?x1x300xf32>, memref<?x1xi64>, memref<?x1x300xf32>, memref<300xf32>
  modk.rmsnorm_grad(%ngx64, %ngw64, %ngx64, %seg, %ngx64, %ngdw64) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x1x64xf32>, memref<64xf32>, memref<?x1x64xf32>, memref<?x1xi64>, memref<?x1x64xf32>, memref<64xf32>
  // 74 .. 77: the router's gradient over every token (its identity row
  // set): dx += dr w, and dw += dr x a column sum; S x D = 5 x 24 and
  // 256 x 128 (CpuKernelsTrain.RouterGrad), 16 x 40 and 24 x 300
  // (CudaTrainKernels.RouterGradMatchesCpu).
  %rgx5x24 = modk.alloc : memref<?x5x24xf32>
  %rgdx5x24 = modk.alloc : memref<?x5x24xf32>
  %rgw24 = modk.param "rgw24" : memref<1x24xf32>
  %rgdw24 = modk.param "rgdw24" : memref<1x24xf32>
  %rgdr5 = modk.alloc : memref<?x5xf32>
  modk.router_grad(%rgx5x24, %rgw24, %rgdr5, %rgdx5x24, %rgdw24) : memref<?x5x24xf32>, memref<1x24xf32>, memref<?x5xf32>, memref<?x5x24xf32>, memref<1x24xf32>
  %rgx256x128 = modk.alloc : memref<?x256x128xf32>
  %rgdx256x128 = modk.alloc : memref<?x256x128xf32>
  %rgw128 = modk.param "rgw128" : memref<1x128xf32>
  %rgdw128 = modk.param "rgdw128" : memref<1x128xf32>
  %rgdr256 = modk.alloc : memref<?x256xf32>
  modk.router_grad(%rgx256x128, %rgw128, %rgdr256, %rgdx256x128, %rgdw128) : memref<?x256x128xf32>, memref<1x128xf32>, memref<?x256xf32>, memref<?x256x128xf32>, memref<1x128xf32>
  %rgx16x40 = modk.alloc : memref<?x16x40xf32>
  %rgdx16x40 = modk.alloc : memref<?x16x40xf32>
  %rgw40 = modk.param "rgw40" : memref<1x40xf32>
  %rgdw40 = modk.param "rgdw40" : memref<1x40xf32>
  %rgdr16 = modk.alloc : memref<?x16xf32>
  modk.router_grad(%rgx16x40, %rgw40, %rgdr16, %rgdx16x40, %rgdw40) : memref<?x16x40xf32>, memref<1x40xf32>, memref<?x16xf32>, memref<?x16x40xf32>, memref<1x40xf32>
  %rgx24x300 = modk.alloc : memref<?x24x300xf32>
  %rgdx24x300 = modk.alloc : memref<?x24x300xf32>
  %rgw300 = modk.param "rgw300" : memref<1x300xf32>
  %rgdw300 = modk.param "rgdw300" : memref<1x300xf32>
  %rgdr24 = modk.alloc : memref<?x24xf32>
  modk.router_grad(%rgx24x300, %rgw300, %rgdr24, %rgdx24x300, %rgdw300) : memref<?x24x300xf32>, memref<1x300xf32>, memref<?x24xf32>, memref<?x24x300xf32>, memref<1x300xf32>
  // 78: two column sums in one kernel, W = 40: a += x and b += x * y
  // (CpuKernelsTrain.TwoColumnSums, CudaTrainKernels.TwoColumnSumsMatchCpu;
  // no named op has two yet).
  %csx = modk.alloc : memref<?x1x40xf32>
  %csy = modk.alloc : memref<?x1x40xf32>
  %csa = modk.param "csa" : memref<40xf32>
  %csb = modk.param "csb" : memref<1x40xf32>
  modk.rows ins(%csx, %csy : memref<?x1x40xf32>, memref<?x1x40xf32>) rows %seg : memref<?x1xi64> outs(%csa, %csb : memref<40xf32>, memref<1x40xf32>) access(row, row -> column_sum, column_sum) reduce {
  ^bb0(%cx: f32, %cy: f32):
    modk.yield
  } body {
  ^bb0(%cx: f32, %cy: f32):
    %cxy = arith.mulf %cx, %cy : f32
    modk.yield %cx, %cxy : f32, f32
  }
  // Gathers fused into their selection (modk-fuse-select-gather), S = 40,
  // k = 9, D = 70: the functors modc_gather_0 (the gather + RMSNorm, one
  // sum a row, eps 1e-5) and modc_gather_1 (the gather that reads
  // each token's sum of x^2 from the router's pass), which select_topk and gather_sequences call
  // (CpuKernels.SelectGatherFused, CudaKernels.SelectGatherFused).
  %sgr = modk.alloc : memref<?x40xf32>
  %sgpos = modk.alloc : memref<?x40xi32>
  %sgseg = modk.alloc : memref<?x1xi64>
  %sgmask = modk.alloc : memref<?x40xi32>
  %sgsquares = modk.alloc : memref<?x40xf32>
  modk.route_select %sgr -> %sgpos, %sgseg, %sgmask {causal_router = #modk.causal_router<none>, k = 9 : i64, layer = 1 : i64} : memref<?x40xf32>, memref<?x40xi32>, memref<?x1xi64>, memref<?x40xi32> gather {
    modk.rows ins(%x40x70, %w70 : memref<?x40x70xf32>, memref<70xf32>) rows %sgseg : memref<?x1xi64> tokens(%sgpos : memref<?x40xi32>) outs(%xs40x70, %xn40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>) access(token, column -> row, row) reduce {
    ^bb0(%gx: f32, %gw: f32):
      %gsq = arith.mulf %gx, %gx : f32
      modk.yield %gsq : f32
    } body {
    ^bb0(%gx: f32, %gw: f32, %gss: f32):
      %geps = arith.constant 9.99999974E-6 : f32
      %gd = arith.constant 7.000000e+01 : f32
      %gmean = arith.divf %gss, %gd : f32
      %gvar = arith.addf %gmean, %geps : f32
      %grms = math.sqrt %gvar : f32
      %gone = arith.constant 1.000000e+00 : f32
      %ginv = arith.divf %gone, %grms : f32
      %gt = arith.mulf %gx, %ginv : f32
      %gn = arith.mulf %gt, %gw : f32
      modk.yield %gx, %gn : f32, f32
    }
  }
  modk.route_select %sgr -> %sgpos, %sgseg, %sgmask {causal_router = #modk.causal_router<none>, k = 9 : i64, layer = 1 : i64} : memref<?x40xf32>, memref<?x40xi32>, memref<?x1xi64>, memref<?x40xi32> gather {
    modk.rows ins(%x40x70, %w70, %sgsquares : memref<?x40x70xf32>, memref<70xf32>, memref<?x40xf32>) rows %sgseg : memref<?x1xi64> tokens(%sgpos : memref<?x40xi32>) outs(%xs40x70, %xn40x70 : memref<?x40x70xf32>, memref<?x40x70xf32>) access(token, column, token_value -> row, row) reduce {
    ^bb0(%hx: f32, %hw: f32, %hss: f32):
      modk.yield
    } body {
    ^bb0(%hx: f32, %hw: f32, %hss: f32):
      %heps = arith.constant 9.99999974E-6 : f32
      %hd = arith.constant 7.000000e+01 : f32
      %hmean = arith.divf %hss, %hd : f32
      %hvar = arith.addf %hmean, %heps : f32
      %hrms = math.sqrt %hvar : f32
      %hone = arith.constant 1.000000e+00 : f32
      %hinv = arith.divf %hone, %hrms : f32
      %ht = arith.mulf %hx, %hinv : f32
      %hn = arith.mulf %ht, %hw : f32
      modk.yield %hx, %hn : f32, f32
    }
  }
  // A decode step's gather + RMSNorm (D = 64, eps 1e-5) fused into its
  // compaction (modk-fuse-select-gather): the functor modc_gather_2 that
  // decode_select calls for each routed sequence's row
  // (CudaDecodeKernels.DecodeRouteFusedGatherMatchesCpu).
  %dgpos = modk.alloc : memref<?x1xi32>
  %dgseg = modk.alloc : memref<?x1xi64>
  %dgmask = modk.alloc : memref<?x1xi32>
  modk.decode_select(%r1, %step, %active, %dgpos, %dgseg, %dgmask) {causal_router = #modk.causal_router<aux_loss>, layer = 1 : i64} : memref<?x1xf32>, memref<?x1xi32>, memref<?x1xi8>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi32> gather {
    modk.rows ins(%x1x64, %w64 : memref<?x1x64xf32>, memref<64xf32>) rows %dgseg : memref<?x1xi64> outs(%xs1x64, %xn1x64 : memref<?x1x64xf32>, memref<?x1x64xf32>) access(token, column -> row, row) reduce {
    ^bb0(%dx: f32, %dw: f32):
      %dsq = arith.mulf %dx, %dx : f32
      modk.yield %dsq : f32
    } body {
    ^bb0(%dx: f32, %dw: f32, %dss: f32):
      %deps = arith.constant 9.99999974E-6 : f32
      %dd = arith.constant 6.400000e+01 : f32
      %dmean = arith.divf %dss, %dd : f32
      %dvar = arith.addf %dmean, %deps : f32
      %drms = math.sqrt %dvar : f32
      %done = arith.constant 1.000000e+00 : f32
      %dinv = arith.divf %done, %drms : f32
      %dt = arith.mulf %dx, %dinv : f32
      %dn = arith.mulf %dt, %dw : f32
      modk.yield %dx, %dn : f32, f32
    }
  }
  // 79: the embedding lookup, V = 19, D = 37, three tokens a sequence
  // (modk-generalize: a row kernel with a lookup; CpuKernels.Embed,
  // CudaKernels.Embed).
  %etable = modk.param "etable" : memref<19x37xf32>
  %etok = modk.alloc : memref<?x3xi32>
  %eout = modk.alloc : memref<?x3x37xf32>
  modk.embed %etok, %etable -> %eout : memref<?x3xi32>, memref<19x37xf32>, memref<?x3x37xf32>
  // 80, 81: the causal predictor's row kernel (modk-generalize: fc1's
  // product, then p = sum_c silu(h_c + b1_c) fc2_c + b2, one sum a row),
  // D = 40 and H = 24, 70: (rows, h, b1, fc2, b2, p) (CpuKernels.Predictor,
  // CudaKernels.Predictor).
  %px40 = modk.alloc : memref<?x1x40xf32>
  %pp = modk.alloc : memref<?x1xf32>
  %pw1_24 = modk.param "pw1_24" : memref<24x40xf32>
  %pb1_24 = modk.param "pb1_24" : memref<24xf32>
  %pw2_24 = modk.param "pw2_24" : memref<1x24xf32>
  %pb2_24 = modk.param "pb2_24" : memref<1xf32>
  %ph24 = modk.alloc : memref<?x1x24xf32>
  modk.predictor %px40, [%pw1_24, %pb1_24, %pw2_24, %pb2_24] scratch %ph24 -> %pp : memref<?x1x40xf32>, memref<24x40xf32>, memref<24xf32>, memref<1x24xf32>, memref<1xf32>, memref<?x1x24xf32>, memref<?x1xf32>
  %pw1_70 = modk.param "pw1_70" : memref<70x40xf32>
  %pb1_70 = modk.param "pb1_70" : memref<70xf32>
  %pw2_70 = modk.param "pw2_70" : memref<1x70xf32>
  %pb2_70 = modk.param "pb2_70" : memref<1xf32>
  %ph70 = modk.alloc : memref<?x1x70xf32>
  modk.predictor %px40, [%pw1_70, %pb1_70, %pw2_70, %pb2_70] scratch %ph70 -> %pp : memref<?x1x40xf32>, memref<70x40xf32>, memref<70xf32>, memref<1x70xf32>, memref<1xf32>, memref<?x1x70xf32>, memref<?x1xf32>
  // 82, 83, 84: its gradient's row kernel (dz in place of h; the column
  // sums db1, dfc2 and the row total db2), H = 10, 128, 24:
  // (rows, h, b1, fc2, dp, h, db1, dfc2, db2) (CpuKernelsTrain.PredictorGrad,
  // CudaTrainKernels.PredictorGradMatchesCpu).
  %gw1_12_10 = modk.param "gw1_12_10" : memref<10x12xf32>
  %gb1_12_10 = modk.param "gb1_12_10" : memref<10xf32>
  %gw2_12_10 = modk.param "gw2_12_10" : memref<1x10xf32>
  %gd1w_12_10 = modk.param "gd1w_12_10" : memref<10x12xf32>
  %gd1b_12_10 = modk.param "gd1b_12_10" : memref<10xf32>
  %gd2w_12_10 = modk.param "gd2w_12_10" : memref<1x10xf32>
  %gd2b_12_10 = modk.param "gd2b_12_10" : memref<1xf32>
  %gx12_10 = modk.alloc : memref<?x1x12xf32>
  %gh12_10 = modk.alloc : memref<?x1x10xf32>
  %gdp12_10 = modk.alloc : memref<?x1xf32>
  modk.predictor_grad(%gx12_10, %gw1_12_10, %gb1_12_10, %gw2_12_10, %gdp12_10, %gh12_10, %gd1w_12_10, %gd1b_12_10, %gd2w_12_10, %gd2b_12_10) : memref<?x1x12xf32>, memref<10x12xf32>, memref<10xf32>, memref<1x10xf32>, memref<?x1xf32>, memref<?x1x10xf32>, memref<10x12xf32>, memref<10xf32>, memref<1x10xf32>, memref<1xf32>
  %gw1_128_128 = modk.param "gw1_128_128" : memref<128x128xf32>
  %gb1_128_128 = modk.param "gb1_128_128" : memref<128xf32>
  %gw2_128_128 = modk.param "gw2_128_128" : memref<1x128xf32>
  %gd1w_128_128 = modk.param "gd1w_128_128" : memref<128x128xf32>
  %gd1b_128_128 = modk.param "gd1b_128_128" : memref<128xf32>
  %gd2w_128_128 = modk.param "gd2w_128_128" : memref<1x128xf32>
  %gd2b_128_128 = modk.param "gd2b_128_128" : memref<1xf32>
  %gx128_128 = modk.alloc : memref<?x1x128xf32>
  %gh128_128 = modk.alloc : memref<?x1x128xf32>
  %gdp128_128 = modk.alloc : memref<?x1xf32>
  modk.predictor_grad(%gx128_128, %gw1_128_128, %gb1_128_128, %gw2_128_128, %gdp128_128, %gh128_128, %gd1w_128_128, %gd1b_128_128, %gd2w_128_128, %gd2b_128_128) : memref<?x1x128xf32>, memref<128x128xf32>, memref<128xf32>, memref<1x128xf32>, memref<?x1xf32>, memref<?x1x128xf32>, memref<128x128xf32>, memref<128xf32>, memref<1x128xf32>, memref<1xf32>
  %gw1_40_24 = modk.param "gw1_40_24" : memref<24x40xf32>
  %gb1_40_24 = modk.param "gb1_40_24" : memref<24xf32>
  %gw2_40_24 = modk.param "gw2_40_24" : memref<1x24xf32>
  %gd1w_40_24 = modk.param "gd1w_40_24" : memref<24x40xf32>
  %gd1b_40_24 = modk.param "gd1b_40_24" : memref<24xf32>
  %gd2w_40_24 = modk.param "gd2w_40_24" : memref<1x24xf32>
  %gd2b_40_24 = modk.param "gd2b_40_24" : memref<1xf32>
  %gx40_24 = modk.alloc : memref<?x1x40xf32>
  %gh40_24 = modk.alloc : memref<?x1x24xf32>
  %gdp40_24 = modk.alloc : memref<?x1xf32>
  modk.predictor_grad(%gx40_24, %gw1_40_24, %gb1_40_24, %gw2_40_24, %gdp40_24, %gh40_24, %gd1w_40_24, %gd1b_40_24, %gd2w_40_24, %gd2b_40_24) : memref<?x1x40xf32>, memref<24x40xf32>, memref<24xf32>, memref<1x24xf32>, memref<?x1xf32>, memref<?x1x24xf32>, memref<24x40xf32>, memref<24xf32>, memref<1x24xf32>, memref<1xf32>
  // 85-94: the mean cross-entropy (modk-generalize: the row's maximum, the
  // sums of e^(z - m) and of the target's logit, the row's loss / rows into
  // the two row totals losses[1] and losses[0], and dlogits), V = 50, 256, 3,
  // 64, 100, 600 and 5000 (wider than a CUDA block keeps in registers);
  // V = 50 and 100 into bf16; V = 50 without the gradient (the eval form):
  // (rows, z, t, dz, ce, total) and (rows, z, t, ce, total)
  // (CpuKernelsTrain.CrossEntropy*, CudaTrainKernels.CrossEntropyMatchesCpu).
  %losses = modk.output "losses" : memref<3xf32>
  %lt = modk.alloc : memref<?x1xi32>
  %lz50 = modk.alloc : memref<?x1x50xf32>
  modk.cross_entropy(%lz50, %lt, %lz50, %losses) : memref<?x1x50xf32>, memref<?x1xi32>, memref<?x1x50xf32>, memref<3xf32>
  %lz256 = modk.alloc : memref<?x1x256xf32>
  modk.cross_entropy(%lz256, %lt, %lz256, %losses) : memref<?x1x256xf32>, memref<?x1xi32>, memref<?x1x256xf32>, memref<3xf32>
  %lz3 = modk.alloc : memref<?x1x3xf32>
  modk.cross_entropy(%lz3, %lt, %lz3, %losses) : memref<?x1x3xf32>, memref<?x1xi32>, memref<?x1x3xf32>, memref<3xf32>
  %lz64 = modk.alloc : memref<?x1x64xf32>
  modk.cross_entropy(%lz64, %lt, %lz64, %losses) : memref<?x1x64xf32>, memref<?x1xi32>, memref<?x1x64xf32>, memref<3xf32>
  %ld50 = modk.alloc : memref<?x1x50xbf16>
  modk.cross_entropy(%lz50, %lt, %ld50, %losses) : memref<?x1x50xf32>, memref<?x1xi32>, memref<?x1x50xbf16>, memref<3xf32>
  modk.cross_entropy_loss(%lz50, %lt, %losses) : memref<?x1x50xf32>, memref<?x1xi32>, memref<3xf32>
  %lz100 = modk.alloc : memref<?x1x100xf32>
  modk.cross_entropy(%lz100, %lt, %lz100, %losses) : memref<?x1x100xf32>, memref<?x1xi32>, memref<?x1x100xf32>, memref<3xf32>
  %ld100 = modk.alloc : memref<?x1x100xbf16>
  modk.cross_entropy(%lz100, %lt, %ld100, %losses) : memref<?x1x100xf32>, memref<?x1xi32>, memref<?x1x100xbf16>, memref<3xf32>
  %lz600 = modk.alloc : memref<?x1x600xf32>
  modk.cross_entropy(%lz600, %lt, %lz600, %losses) : memref<?x1x600xf32>, memref<?x1xi32>, memref<?x1x600xf32>, memref<3xf32>
  %lz5000 = modk.alloc : memref<?x1x5000xf32>
  modk.cross_entropy(%lz5000, %lt, %lz5000, %losses) : memref<?x1x5000xf32>, memref<?x1xi32>, memref<?x1x5000xf32>, memref<3xf32>
  // 95, 96, 97: a routed layer's causal-router loss, weight 0.3 of two
  // routed layers, S = 37 with its gradient and without (the eval form),
  // S = 40 with it: (rows, z, y, dz, dz, aux, total) and
  // (rows, z, y, aux, total), rows = B S (CpuKernelsTrain.BceWithLogits,
  // CudaTrainKernels.BceWithLogitsMatchesCpu).
  %bz37 = modk.alloc : memref<?x37xf32>
  %by37 = modk.alloc : memref<?x37xi32>
  %bd37 = modk.alloc : memref<?x37xf32>
  modk.bce_loss(%bz37, %by37, %bd37, %losses) {n_routed = 2 : i64, weight = 3.000000e-01 : f64} : memref<?x37xf32>, memref<?x37xi32>, memref<?x37xf32>, memref<3xf32>
  modk.bce_loss_value(%bz37, %by37, %losses) {n_routed = 2 : i64, weight = 3.000000e-01 : f64} : memref<?x37xf32>, memref<?x37xi32>, memref<3xf32>
  %bz40 = modk.alloc : memref<?x40xf32>
  %by40 = modk.alloc : memref<?x40xi32>
  %bd40 = modk.alloc : memref<?x40xf32>
  modk.bce_loss(%bz40, %by40, %bd40, %losses) {n_routed = 2 : i64, weight = 3.000000e-01 : f64} : memref<?x40xf32>, memref<?x40xi32>, memref<?x40xf32>, memref<3xf32>
  // 98: the bf16 rounding of the values attention reads in a bf16 model
  // (modk-generalize writes it as their product's `rows` epilogue; here a
  // row kernel of N = 48): y = bf16(x), held as f32
  // (CpuKernels.RoundBf16Rows, CudaKernels.RoundBf16Rows).
  %rx48 = modk.alloc : memref<?x1x48xf32>
  %ry48 = modk.alloc : memref<?x1x48xf32>
  modk.rows ins(%rx48 : memref<?x1x48xf32>) rows %seg : memref<?x1xi64> outs(%ry48 : memref<?x1x48xf32>) access(row -> row) reduce {
  ^bb0(%x: f32):
    modk.yield
  } body {
  ^bb0(%x: f32):
    %narrow = arith.truncf %x : f32 to bf16
    %wide = arith.extf %narrow : bf16 to f32
    modk.yield %wide : f32
  }
  // 99-103: RoPE's transpose (modk.rope_grad, which modk-generalize writes
  // as a modk.rows over heads), (rows, pos, dy, dx): H = 3, HD = 8 into f32
  // and into bf16 (CpuKernelsTrain.RopeGrad); H = 8, HD = 64
  // (RopeGradInvertsRope); H = 3, HD = 16 into f32 and into bf16
  // (CudaTrainKernels.RopeGradMatchesCpu).
  %rp = modk.alloc : memref<?x1xi32>
  %rg24 = modk.alloc : memref<?x1x24xf32>
  %rd24 = modk.alloc : memref<?x1x24xf32>
  %rb24 = modk.alloc : memref<?x1x24xbf16>
  modk.rope_grad(%rg24, %rp, %seg, %rd24) {n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x24xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1x24xf32>
  modk.rope_grad(%rg24, %rp, %seg, %rb24) {n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x24xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1x24xbf16>
  %rg512 = modk.alloc : memref<?x1x512xf32>
  modk.rope_grad(%rg512, %rp, %seg, %rg512) {n_heads = 8 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x512xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1x512xf32>
  %rg48 = modk.alloc : memref<?x1x48xf32>
  %rb48 = modk.alloc : memref<?x1x48xbf16>
  modk.rope_grad(%rg48, %rp, %seg, %rg48) {n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x48xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1x48xf32>
  modk.rope_grad(%rg48, %rp, %seg, %rb48) {n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x48xf32>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1x48xbf16>
  // 104-123: RoPE in the epilogue of the product of the queries and keys
  // (modk-generalize writes it as a `rows` epilogue over heads; bf16: then
  // rounded). The CPU runs it as a row kernel (rows, pos, product, y); CUDA
  // as RowsEpilogue<0..19> in the same order, and as the kernel
  // modc_rows_<n> (rows, pos, product, y, table) where a tile cannot hold
  // it (CpuKernels.Rope, CudaKernels.LinearRope*, CudaBf16.FusedRounding,
  // TensorCores.RopeEpilogue*). Named in RowKernels.h.
  %ra = modk.alloc : memref<?x1x8xf32>
  %rpw128 = modk.param "rpw128" : memref<128x8xf32>
  %rk128 = modk.alloc : memref<?x1x128xf32>
  modk.gemm %ra, [%rpw128] rows %seg extra(%rp) -> %rk128 {epilogue = #modk.epilogue<rope>, n_heads = 4 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<128x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x128xf32>
  modk.gemm %ra, [%rpw128] rows %seg extra(%rp) -> %rk128 {epilogue = #modk.epilogue<rope>, n_heads = 4 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<128x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x128xf32>
  %rpw256 = modk.param "rpw256" : memref<256x8xf32>
  %rk256 = modk.alloc : memref<?x1x256xf32>
  modk.gemm %ra, [%rpw256] rows %seg extra(%rp) -> %rk256 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 5.000000e+05 : f64} : memref<?x1x8xf32>, memref<256x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x256xf32>
  modk.gemm %ra, [%rpw256] rows %seg extra(%rp) -> %rk256 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 5.000000e+05 : f64, round_bf16} : memref<?x1x8xf32>, memref<256x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x256xf32>
  %rpw72 = modk.param "rpw72" : memref<72x8xf32>
  %rk72 = modk.alloc : memref<?x1x72xf32>
  modk.gemm %ra, [%rpw72] rows %seg extra(%rp) -> %rk72 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<72x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x72xf32>
  modk.gemm %ra, [%rpw72] rows %seg extra(%rp) -> %rk72 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<72x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x72xf32>
  %rpw512 = modk.param "rpw512" : memref<512x8xf32>
  %rk512 = modk.alloc : memref<?x1x512xf32>
  modk.gemm %ra, [%rpw512] rows %seg extra(%rp) -> %rk512 {epilogue = #modk.epilogue<rope>, n_heads = 8 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<512x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x512xf32>
  %rpw66 = modk.param "rpw66" : memref<66x8xf32>
  %rk66 = modk.alloc : memref<?x1x66xf32>
  modk.gemm %ra, [%rpw66] rows %seg extra(%rp) -> %rk66 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<66x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x66xf32>
  modk.gemm %ra, [%rpw66] rows %seg extra(%rp) -> %rk66 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 5.000000e+05 : f64} : memref<?x1x8xf32>, memref<66x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x66xf32>
  %rpw96 = modk.param "rpw96" : memref<96x8xf32>
  %rk96 = modk.alloc : memref<?x1x96xf32>
  modk.gemm %ra, [%rpw96] rows %seg extra(%rp) -> %rk96 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<96x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x96xf32>
  modk.gemm %ra, [%rpw96] rows %seg extra(%rp) -> %rk96 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<96x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x96xf32>
  %rpw64 = modk.param "rpw64" : memref<64x8xf32>
  %rk64 = modk.alloc : memref<?x1x64xf32>
  modk.gemm %ra, [%rpw64] rows %seg extra(%rp) -> %rk64 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<64x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x64xf32>
  %rpw48 = modk.param "rpw48" : memref<48x8xf32>
  %rk48 = modk.alloc : memref<?x1x48xf32>
  modk.gemm %ra, [%rpw48] rows %seg extra(%rp) -> %rk48 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<48x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x48xf32>
  modk.gemm %ra, [%rpw48] rows %seg extra(%rp) -> %rk48 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<48x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x48xf32>
  modk.gemm %ra, [%rpw128] rows %seg extra(%rp) -> %rk128 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<128x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x128xf32>
  modk.gemm %ra, [%rpw256] rows %seg extra(%rp) -> %rk256 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<256x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x256xf32>
  %rpw192 = modk.param "rpw192" : memref<192x8xf32>
  %rk192 = modk.alloc : memref<?x1x192xf32>
  modk.gemm %ra, [%rpw192] rows %seg extra(%rp) -> %rk192 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<192x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x192xf32>
  modk.gemm %ra, [%rpw128] rows %seg extra(%rp) -> %rk128 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<128x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x128xf32>
  modk.gemm %ra, [%rpw256] rows %seg extra(%rp) -> %rk256 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<256x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x256xf32>
  modk.gemm %ra, [%rpw192] rows %seg extra(%rp) -> %rk192 {epilogue = #modk.epilogue<rope>, n_heads = 3 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<192x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x192xf32>
  // 124, 125: RoPE (4 x 32, as rope4x32) and SwiGLU (N = 50, as swiglu50)
  // reading column windows of stacked products (modk-fuse-horizontal):
  // columns [128, 256) of rows of 384, and [0, 50) and [50, 100) of rows
  // of 100.
  %stacked384 = modk.alloc : memref<?x1x384xf32>
  %window128 = modk.column_window %stacked384[128] : memref<?x1x384xf32> to memref<?x1x128xf32, strided<[384, 384, 1], offset: 128>>
  modk.rows ins(%window128 : memref<?x1x128xf32, strided<[384, 384, 1], offset: 128>>) rows %seg : memref<?x1xi64> tokens(%rp : memref<?x1xi32>) outs(%rk128 : memref<?x1x128xf32>) access(row -> row) attributes {head_dim = 32 : i64} reduce {
  ^bb0(%w0: f32):
    modk.yield
  } body {
  ^bb0(%w0: f32):
    %cos, %sin = modk.rope_angle {theta = 1.000000e+04 : f64} : f32, f32
    %wr = modk.rotate_half %w0 : f32
    %wrs = arith.mulf %wr, %sin : f32
    %wxc = arith.mulf %w0, %cos : f32
    %wy = arith.addf %wxc, %wrs : f32
    modk.yield %wy : f32
  }
  %stacked100 = modk.alloc : memref<?x1x100xf32>
  %gate50 = modk.column_window %stacked100[0] : memref<?x1x100xf32> to memref<?x1x50xf32, strided<[100, 100, 1]>>
  %up50 = modk.column_window %stacked100[50] : memref<?x1x100xf32> to memref<?x1x50xf32, strided<[100, 100, 1], offset: 50>>
  modk.rows ins(%gate50, %up50 : memref<?x1x50xf32, strided<[100, 100, 1]>>, memref<?x1x50xf32, strided<[100, 100, 1], offset: 50>>) rows %seg : memref<?x1xi64> outs(%a50 : memref<?x1x50xf32>) access(row, row -> row) reduce {
  ^bb0(%g0: f32, %u0: f32):
    modk.yield
  } body {
  ^bb0(%g0: f32, %u0: f32):
    %one = arith.constant 1.000000e+00 : f32
    %gn = arith.negf %g0 : f32
    %ge = math.exp %gn : f32
    %gd = arith.addf %ge, %one : f32
    %gs = arith.divf %g0, %gd : f32
    %gy = arith.mulf %gs, %u0 : f32
    modk.yield %gy : f32
  }
  // 126, 127: the embedding's gradient, a scatter-add of each row into
  // the table row its token selects (modk-generalize: a row kernel whose
  // output is a lookup's table), V = 9, D = 40 and V = 600, D = 300 (more
  // table rows than the CUDA kernel's blocks): (rows, dx, tokens, table)
  // (CpuKernelsTrain.EmbedGradRepeatedTokens, CudaTrainKernels.EmbedGrad*).
  %gtable40 = modk.param "gtable40" : memref<9x40xf32>
  %gtok = modk.alloc : memref<?x300xi32>
  %gdx40 = modk.alloc : memref<?x300x40xf32>
  modk.embed_grad(%gtok, %gdx40, %gtable40) : memref<?x300xi32>, memref<?x300x40xf32>, memref<9x40xf32>
  %gtable300 = modk.param "gtable300" : memref<600x300xf32>
  %gdx300 = modk.alloc : memref<?x300x300xf32>
  modk.embed_grad(%gtok, %gdx300, %gtable300) : memref<?x300xi32>, memref<?x300x300xf32>, memref<600x300xf32>
  // 128: a whole buffer's copy into bf16 (an f32 gradient that only
  // products read; modk-generalize writes it as a row kernel over every row
  // of the identity row set, rounding as it stores), D = 37: (rows, x, y)
  // (CpuKernels.RoundingCopy, CudaKernels.RoundingCopy).
  %cpos = modk.alloc : memref<?x3xi32>
  %cseg = modk.alloc : memref<?x1xi64>
  modk.identity_rows -> %cpos, %cseg : memref<?x3xi32>, memref<?x1xi64>
  %cx37 = modk.alloc : memref<?x3x37xf32>
  %cy37 = modk.alloc : memref<?x3x37xbf16>
  modk.copy(%cx37, %cy37) : memref<?x3x37xf32>, memref<?x3x37xbf16>
  // 129-134: RoPE epilogues of head dims below 16 (4x8, 6x4, 5x2; each
  // f32, then rounded to bf16), whose rotation pairs are not whole n8
  // fragments apart, so no tensor-core tile holds them: the product, then
  // the kernel (TensorCores.RopeEpilogueOnEveryPath). RowsEpilogue<20..25>.
  %rpw32 = modk.param "rpw32" : memref<32x8xf32>
  %rk32 = modk.alloc : memref<?x1x32xf32>
  modk.gemm %ra, [%rpw32] rows %seg extra(%rp) -> %rk32 {epilogue = #modk.epilogue<rope>, n_heads = 4 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<32x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x32xf32>
  modk.gemm %ra, [%rpw32] rows %seg extra(%rp) -> %rk32 {epilogue = #modk.epilogue<rope>, n_heads = 4 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<32x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x32xf32>
  %rpw24 = modk.param "rpw24" : memref<24x8xf32>
  %rk24 = modk.alloc : memref<?x1x24xf32>
  modk.gemm %ra, [%rpw24] rows %seg extra(%rp) -> %rk24 {epilogue = #modk.epilogue<rope>, n_heads = 6 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<24x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x24xf32>
  modk.gemm %ra, [%rpw24] rows %seg extra(%rp) -> %rk24 {epilogue = #modk.epilogue<rope>, n_heads = 6 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<24x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x24xf32>
  %rpw10 = modk.param "rpw10" : memref<10x8xf32>
  %rk10 = modk.alloc : memref<?x1x10xf32>
  modk.gemm %ra, [%rpw10] rows %seg extra(%rp) -> %rk10 {epilogue = #modk.epilogue<rope>, n_heads = 5 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x1x8xf32>, memref<10x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x10xf32>
  modk.gemm %ra, [%rpw10] rows %seg extra(%rp) -> %rk10 {epilogue = #modk.epilogue<rope>, n_heads = 5 : i64, rope_theta = 1.000000e+04 : f64, round_bf16} : memref<?x1x8xf32>, memref<10x8xf32>, memref<?x1xi64>, memref<?x1xi32>, memref<?x1x10xf32>
  // 57 again, on three experts' row sets as one group (modk-group-gemms):
  // the CUDA emitter writes its grouped form modc_rows_57_grouped<M> too
  // (CudaTrainKernels.GroupedGatherGradsMatchTheSingleLaunches).
  %ggseg0 = modk.alloc : memref<?x1xi64>
  %ggseg1 = modk.alloc : memref<?x1xi64>
  %ggpos0 = modk.alloc : memref<?x8xi32>
  %ggpos1 = modk.alloc : memref<?x8xi32>
  %ggdxs0 = modk.alloc : memref<?x8x40xf32>
  %ggdxs1 = modk.alloc : memref<?x8x40xf32>
  modk.rows ins(%ggdxs0, %dx16x40 : memref<?x8x40xf32>, memref<?x16x40xf32>) rows %ggseg0 : memref<?x1xi64> tokens(%ggpos0 : memref<?x8xi32>) outs(%dx16x40 : memref<?x16x40xf32>) access(row, token -> token) attributes {group = 0 : i64} reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %b, %a : f32
    modk.yield %s : f32
  }
  modk.rows ins(%ggdxs1, %dx16x40 : memref<?x8x40xf32>, memref<?x16x40xf32>) rows %ggseg1 : memref<?x1xi64> tokens(%ggpos1 : memref<?x8xi32>) outs(%dx16x40 : memref<?x16x40xf32>) access(row, token -> token) attributes {group = 0 : i64} reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %b, %a : f32
    modk.yield %s : f32
  }
}
// The optimizer's element update and gradient norm terms:
// modk-generate-optimizer writes `modk.optimizer @adamw` beside this
// (empty) training entry, and the translation emits them as
// modc_optimizer_update and modc_optimizer_norm (CpuKernelsTrain.AdamW,
// CpuKernelsTrain.GradNormTerms, CudaTrainKernels.Adamw*).
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 1, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 1, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4, 4], init = normal, std = 2.000000e-02 : f64, decay = true>]} {
}
