// The modk verifiers: epilogue operand counts, shapes, buffer rules.
// RUN: mod-opt %s -split-input-file -verify-diagnostics

func.func @swiglu_needs_two_weights(%a: memref<?x16x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %s: memref<?x16x64xf32>, %y: memref<?x16x64xf32>) {
  // expected-error @+1 {{epilogue 'swiglu' takes 2 weight(s) and 1 extra operand(s)}}
  modk.gemm %a, [%w] rows %seg extra(%s) -> %y {epilogue = #modk.epilogue<swiglu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
  return
}

// -----

// The epilogue is an enum: the parser names the cases there are.
func.func @unknown_epilogue(%a: memref<?x16x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x64xf32>) {
  // expected-error @+2 {{expected ::modc::modk::Epilogue to be one of: none, rope, residual_add, swiglu, gelu, rows}}
  // expected-error @+1 {{failed to parse Modk_EpilogueAttr parameter 'value'}}
  modk.gemm %a, [%w] rows %seg -> %y {epilogue = #modk.epilogue<relu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  return
}

// -----

// A string where the enum belongs is refused, naming the attribute.
func.func @string_epilogue(%a: memref<?x16x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x64xf32>) {
  // expected-error @+1 {{attribute 'epilogue' failed to satisfy constraint}}
  modk.gemm %a, [%w] rows %seg -> %y {epilogue = "none"} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  return
}

// -----

// The gate is an enum: the parser names the gates there are.
func.func @unknown_gate(%dy: memref<?x16x32xf32>, %r: memref<?x16xf32>, %m: memref<?x4x32xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %df: memref<?x4x32xf32>, %dr: memref<?x16xf32>) {
  // expected-error @+2 {{expected ::modc::Gate to be one of: linear, sigmoid, one}}
  // expected-error @+1 {{failed to parse Modk_GateAttr parameter 'value'}}
  "modk.scatter_grad"(%dy, %r, %m, %pos, %seg, %df, %dr) <{gate = #modk.gate<tanh>}> : (memref<?x16x32xf32>, memref<?x16xf32>, memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<?x16xf32>) -> ()
  return
}

// -----

func.func @rope_needs_heads(%a: memref<?x16x32xf32>, %w: memref<32x32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x16xi32>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{the rope epilogue needs n_heads and rope_theta}}
  modk.gemm %a, [%w] rows %seg extra(%pos) -> %y {epilogue = #modk.epilogue<rope>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
  return
}

// -----

func.func @weight_width(%a: memref<?x16x32xf32>, %w: memref<64x16xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x64xf32>) {
  // expected-error @+1 {{weights must be [N, K] with K the input width}}
  modk.gemm %a, [%w] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x16xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  return
}

// -----

func.func @output_width(%a: memref<?x16x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{output width 32 differs from the weights' N = 64}}
  modk.gemm %a, [%w] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

// A stacked product's output holds every member's columns.
func.func @stacked_width(%a: memref<?x16x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x64xf32>) {
  // expected-error @+1 {{output width 64 differs from the weights' N = 128}}
  modk.gemm %a, [%w, %w] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  return
}

// -----

// Only `none` stacks weights (modk-fuse-horizontal moves epilogues out).
func.func @stacked_epilogue(%a: memref<?x16x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x128xf32>) {
  // expected-error @+1 {{epilogue 'gelu' takes 1 weight(s) and 0 extra operand(s)}}
  modk.gemm %a, [%w, %w] rows %seg -> %y {epilogue = #modk.epilogue<gelu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x128xf32>
  return
}

// -----

func.func @window_outside(%s: memref<?x16x96xf32>) {
  // expected-error @+1 {{columns [80, 80 + 32) are outside the source's 96}}
  %w = modk.column_window %s[80] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 80>>
  return
}

// -----

func.func @window_layout(%s: memref<?x16x96xf32>) {
  // expected-error @+1 {{the window's type must be 'memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>'}}
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[512, 32, 1], offset: 32>>
  return
}

// -----

func.func @window_of_window(%s: memref<?x16x64xf32, strided<[1536, 96, 1], offset: 32>>) {
  // expected-error @+1 {{the source must be a contiguous row buffer}}
  %w = modk.column_window %s[0] : memref<?x16x64xf32, strided<[1536, 96, 1], offset: 32>> to memref<?x16x32xf32, strided<[1024, 64, 1]>>
  return
}

// -----

func.func @attention_heads(%q: memref<?x16x32xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>) {
  // expected-error @+1 {{width must split into n_heads even head dimensions}}
  modk.attention %q, %q, %q rows %pos, %seg -> %q {n_heads = 32 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

func.func @causal_needs_room(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>) {
  // expected-error @+1 {{positions hold 4 rows a sequence, needs 16}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<aux_loss>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  return
}

// -----

func.func @k_out_of_range(%r: memref<?x16xf32>, %pos: memref<?x20xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>) {
  // expected-error @+1 {{k = 20 must be in [1, 16]}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 20 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x20xi32>, memref<?x1xi64>, memref<?x16xi32>
  return
}

// -----

modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = ones>]} {
  // expected-error @+1 {{buffers are [B, ...] with a dynamic batch dimension}}
  %0 = modk.alloc : memref<4x16xf32>
}

// -----

modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = ones>]} {
  // expected-error @+1 {{offset must be a non-negative multiple of 64}}
  %0 = modk.alloc {offset = 8 : i64} : memref<?x16xf32>
}

// -----

modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = ones>]} {
  // expected-error @+1 {{'v' is not in the entry's params list}}
  %0 = modk.param "v" : memref<4xf32>
}

// -----

modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = ones>]} {
  // expected-error @+1 {{shape of 'w' differs from the entry's params list}}
  %0 = modk.param "w" : memref<8xf32>
}

// -----

// expected-error @+1 {{parameter 'w' is listed twice}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = ones>, #modk.param<name = "w", shape = [4], init = zeros>]} {
}

// -----

// expected-error @+1 {{parameter 'w': std is given exactly for the normal init}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4, 4], init = normal>]} {
}

// -----

// expected-error @+1 {{parameter 'w': std is given exactly for the normal init}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = ones, std = 2.000000e-02 : f64>]} {
}

// -----

// expected-error @+1 {{parameter 'w': std must be positive and finite}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4, 4], init = normal, std = 0.000000e+00 : f64>]} {
}

// -----

// expected-error @+2 {{expected ::modc::modk::ParamInit to be one of: normal, ones, zeros}}
// expected-error @+1 {{failed to parse Modk_ParamAttr parameter 'init'}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4], init = uniform>]} {
}

// -----

// expected-error @+2 {{expected ::modc::modk::RoutingMode to be one of: topk, causal}}
// expected-error @+1 {{failed to parse Modk_RoutingModeAttr parameter 'value'}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<greedy>], params = []} {
}

// -----

// `column`: a vector of the row width, [width] or [1, width].
func.func @rows_input_shape(%x: memref<?x16x32xf32>, %w: memref<16xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{input 1 is read or written at 'column', which needs f32 or bf16 [32] or [1, 32]; it is 'memref<16xf32>'}}
  modk.rows ins(%x, %w : memref<?x16x32xf32>, memref<16xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row, column -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// The body takes the inputs' elements, then the row's sums.
func.func @rows_body_arguments(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{'body' takes 2 f32 arguments, has 1}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    modk.yield %s : f32
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// One value per output.
func.func @rows_body_results(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{'body' must yield 1 values, one per output}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a, %a : f32, f32
  }
  return
}

// -----

// Only arith and math: what both emitters can generate.
func.func @rows_foreign_op(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>, %s: memref<f32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    // expected-error @+1 {{is not allowed in a kernel region: only arith and math ops are}}
    %c = memref.load %s[] : memref<f32>
    modk.yield %c : f32
  }
  return
}

// -----

// bf16 only as a rounding: arith.truncf to bf16 read by arith.extf alone.
func.func @rows_bf16_value(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    // expected-error @+1 {{rounds to bf16 in a kernel region: only arith.extf back to f32 may read it}}
    %b = arith.truncf %a : f32 to bf16
    %c = arith.addf %b, %b : bf16
    %d = arith.extf %c : bf16 to f32
    modk.yield %d : f32
  }
  return
}

// -----

// Row buffers of one row set share their shape.
func.func @rows_row_shapes(%x: memref<?x8x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{output 0 has rows 'memref<?x16x32xf32>', but the row buffers have [B, 8]}}
  modk.rows ins(%x : memref<?x8x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// A token operand of 16 tokens a sequence needs the rows' positions.
func.func @rows_tokens_need_positions(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 0 holds 16 tokens a sequence: give the rows' positions}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(token -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// Positions are i32, one a row.
func.func @rows_positions_type(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x4xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{positions must be [B, rows] of i32}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi64>) outs(%y : memref<?x4x32xf32>) access(token -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// A GEMM's `rows` epilogue cannot sum over a row: a tile holds part of it.
func.func @gemm_rows_epilogue_sums(%h: memref<?x4x64xf32>, %w: memref<32x64xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{an epilogue's modk.rows cannot sum over its row}}
  modk.gemm %h, [%w] rows %seg -> %y {epilogue = #modk.epilogue<rows>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32> epilogue {
  ^bb0(%p: memref<?x4x32xf32>):
    modk.rows ins(%p : memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(row -> row) reduce {
    ^bb0(%a: f32):
      %sq = arith.mulf %a, %a : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%a: f32, %s: f32):
      %r = arith.mulf %a, %s : f32
      modk.yield %r : f32
    }
  }
  return
}

// -----

// Nor can it sum over the rows into a column sum: a tile holds some rows.
func.func @gemm_rows_epilogue_column_sum(%h: memref<?x4x64xf32>, %w: memref<32x64xf32>, %seg: memref<?x1xi64>, %ds: memref<32xf32>) {
  // expected-error @+1 {{an epilogue's modk.rows cannot have column sums: a tile holds some of the rows}}
  modk.gemm %h, [%w] rows %seg -> %ds {epilogue = #modk.epilogue<rows>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<32xf32> epilogue {
  ^bb0(%p: memref<?x4x32xf32>):
    modk.rows ins(%p : memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%ds : memref<32xf32>) access(row -> column_sum) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// The epilogue writes the GEMM's output, and reads the product at its row.
func.func @gemm_rows_epilogue_output(%h: memref<?x4x64xf32>, %w: memref<32x64xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>, %z: memref<?x4x32xf32>) {
  // expected-error @+1 {{the epilogue's one output must be the GEMM's output}}
  modk.gemm %h, [%w] rows %seg -> %y {epilogue = #modk.epilogue<rows>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32> epilogue {
  ^bb0(%p: memref<?x4x32xf32>):
    modk.rows ins(%p : memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%z : memref<?x4x32xf32>) access(row -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// The product argument is the product: f32, of its shape.
func.func @gemm_rows_epilogue_product(%h: memref<?x4x64xf32>, %w: memref<32x64xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{the product argument must be an f32 buffer of the input's rows and the weight's N = 32}}
  modk.gemm %h, [%w] rows %seg -> %y {epilogue = #modk.epilogue<rows>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32> epilogue {
  ^bb0(%p: memref<?x4x32xbf16>):
    modk.rows ins(%p : memref<?x4x32xbf16>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(row -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// Only the `rows` epilogue has a region.
func.func @gemm_region_without_rows(%h: memref<?x4x64xf32>, %w: memref<32x64xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{only the `rows` epilogue has a region}}
  modk.gemm %h, [%w] rows %seg -> %y {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32> epilogue {
  ^bb0(%p: memref<?x4x32xf32>):
    modk.rows ins(%p : memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(row -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// The model attribute is typed: its verifier names the field at fault.
// expected-error @+1 {{d_model / n_heads must be an even whole number, got 32 / 32}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 32, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
}

// -----

// expected-error @+2 {{a MoD configuration has one of capacity and capacity_tokens}}
// expected-error @+1 {{failed to parse Modk_ModelAttr parameter 'mod'}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, mod = <capacity = 5.000000e-01 : f64, capacity_tokens = 4, schedule = all, gate = sigmoid, causal_router = none, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8>>, modes = [#modk.mode<topk>], params = []} {
}

// -----

// expected-error @+2 {{layers lists the routed layers of schedule 'layers' only}}
// expected-error @+1 {{failed to parse Modk_ModelAttr parameter 'mod'}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, mod = <capacity = 5.000000e-01 : f64, schedule = all, layers = [1], gate = sigmoid, causal_router = none, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8>>, modes = [#modk.mode<topk>], params = []} {
}

// -----

// expected-error @+1 {{routed layer 2 is not in [0, 2)}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, mod = <capacity = 5.000000e-01 : f64, schedule = layers, layers = [1, 2], gate = sigmoid, causal_router = none, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8>>, modes = [#modk.mode<topk>], params = []} {
}

// -----

// A choice outside the enum is a parse error naming the field.
// expected-error @+2 {{expected ::modc::Activation to be one of: swiglu, gelu}}
// expected-error @+1 {{failed to parse Modk_ModelAttr parameter 'mlp'}}
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 2, d_ff = 64, seq_len = 16, mlp = relu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
}


// -----

// expected-error @+1 {{updates no parameter: params is empty}}
modk.optimizer @adamw attributes {params = []} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  modk.yield %p, %m, %v : f32, f32, f32
}

// -----

// expected-error @+1 {{parameter 'w' needs a shape of positive sizes}}
modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4, 0], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  modk.yield %p, %m, %v : f32, f32, f32
}

// -----

// expected-error @+1 {{'body' takes 11 f32 arguments, has 4}}
modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32):
  modk.yield %p, %m, %v : f32, f32, f32
}

// -----

// expected-error @+1 {{'body' must yield 3 values, one per output}}
modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  modk.yield %p, %m : f32, f32
}

// -----

modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  // expected-error @+1 {{is not allowed in a kernel region: only arith and math ops are}}
  %0 = memref.alloc() : memref<1xf32>
  modk.yield %p, %m, %v : f32, f32, f32
}

// -----

// An output [B, rows] holds one value a row: the body must yield it from
// the row's sums, not from an element.
func.func @rows_row_value_from_element(%x: memref<?x16x32xf32>, %w: memref<1x32xf32>, %seg: memref<?x1xi64>, %r: memref<?x16xf32>) {
  // expected-error @+1 {{output 0 holds one value a row, but 'body' yields an element's value for it}}
  modk.rows ins(%x, %w : memref<?x16x32xf32>, memref<1x32xf32>) rows %seg : memref<?x1xi64> outs(%r : memref<?x16xf32>) access(row, column -> row_value) reduce {
  ^bb0(%a: f32, %b: f32):
    %p = arith.mulf %a, %b : f32
    modk.yield %p : f32
  } body {
  ^bb0(%a: f32, %b: f32, %s: f32):
    %p = arith.mulf %a, %s : f32
    modk.yield %p : f32
  }
  return
}

// -----

// A value stored once a row at its token ([B, T], a token operand) must
// come from the row's sums too, not from an element.
func.func @rows_token_value_from_element(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x16xi32>, %r: memref<?x16xf32>) {
  // expected-error @+1 {{output 0 holds one value a row, but 'body' yields an element's value for it}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%r : memref<?x16xf32>) access(token -> token_value) reduce {
  ^bb0(%a: f32):
    %p = arith.mulf %a, %a : f32
    modk.yield %p : f32
  } body {
  ^bb0(%a: f32, %s: f32):
    %p = arith.mulf %a, %s : f32
    modk.yield %p : f32
  }
  return
}

// -----

// An output at `row` is a buffer [B, rows, width], not of higher rank.
func.func @rows_rank4_output(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %v: memref<?x16x32x2xf32>) {
  // expected-error @+1 {{output 0 is read or written at 'row', which needs f32 or bf16 [B, rows, 32]; it is 'memref<?x16x32x2xf32>'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%v : memref<?x16x32x2xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// An operand that is both an input and an output has one access: a column
// sum is not also read as a weight vector.
func.func @rows_column_sum_is_input(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %dw: memref<32xf32>) {
  // expected-error @+1 {{output 0 is input 1 but written at 'column_sum', read at 'column'}}
  modk.rows ins(%x, %dw : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> outs(%dw : memref<32xf32>) access(row, column -> column_sum) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// Column sums are f32 (they accumulate).
func.func @rows_column_sum_bf16(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %dw: memref<32xbf16>) {
  // expected-error @+1 {{output 0 is read or written at 'column_sum', which needs f32 [32] or [1, 32]; it is 'memref<32xbf16>'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%dw : memref<32xbf16>) access(row -> column_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// A column sum holds the row width.
func.func @rows_column_sum_width(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %dw: memref<1x16xf32>) {
  // expected-error @+1 {{output 0 is read or written at 'column_sum', which needs f32 [32] or [1, 32]; it is 'memref<1x16xf32>'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%dw : memref<1x16xf32>) access(row -> column_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// At most three column sums a kernel (CUDA's reduction writes three).
func.func @rows_four_column_sums(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %a0: memref<32xf32>, %a1: memref<32xf32>, %a2: memref<32xf32>, %a3: memref<32xf32>) {
  // expected-error @+1 {{has 4 column and row sums; a kernel adds at most 3}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%a0, %a1, %a2, %a3 : memref<32xf32>, memref<32xf32>, memref<32xf32>, memref<32xf32>) access(row -> column_sum, column_sum, column_sum, column_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a, %a, %a, %a : f32, f32, f32, f32
  }
  return
}

// -----

// A row total ([1] in a kernel wider than one column) sums one value a row:
// the body's value for it must not be an element's.
func.func @rows_total_of_elements(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %t: memref<1xf32>) {
  // expected-error @+1 {{output 0 sums one value a row, but 'body' yields an element's value for it}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%t : memref<1xf32>) access(row -> row_sum) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// Row totals accumulate in f32, like column sums.
func.func @rows_total_bf16(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %t: memref<1xbf16>) {
  // expected-error @+1 {{output 0 is read or written at 'row_sum', which needs f32 [1]; it is 'memref<1xbf16>'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%t : memref<1xbf16>) access(row -> row_sum) reduce {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    modk.yield %s : f32
  } body {
  ^bb0(%a: f32, %s: f32):
    modk.yield %s : f32
  }
  return
}

// -----

// A row sum is not also read as a scalar: an operand has one access.
func.func @rows_total_is_input(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %t: memref<1xf32>) {
  // expected-error @+1 {{output 0 is input 1 but written at 'row_sum', read at 'scalar'}}
  modk.rows ins(%x, %t : memref<?x16x32xf32>, memref<1xf32>) rows %seg : memref<?x1xi64> outs(%t : memref<1xf32>) access(row, scalar -> row_sum) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// Column sums and row totals together are at most three a kernel.
func.func @rows_sums_and_totals(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %a0: memref<32xf32>, %a1: memref<32xf32>, %a2: memref<32xf32>, %t: memref<1xf32>) {
  // expected-error @+1 {{has 4 column and row sums; a kernel adds at most 3}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%a0, %a1, %a2, %t : memref<32xf32>, memref<32xf32>, memref<32xf32>, memref<1xf32>) access(row -> column_sum, column_sum, column_sum, row_sum) reduce {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    modk.yield %s : f32
  } body {
  ^bb0(%a: f32, %s: f32):
    modk.yield %a, %a, %a, %s : f32, f32, f32, f32
  }
  return
}

// -----

// An input of one value a row has the rows of the row buffers.
func.func @rows_row_value_input_shape(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %dr: memref<?x8xf32>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{input 1 has rows 'memref<?x8xf32>', but the row buffers have [B, 16]}}
  modk.rows ins(%x, %dr : memref<?x16x32xf32>, memref<?x8xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row, row_value -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    %p = arith.mulf %a, %b : f32
    modk.yield %p : f32
  }
  return
}

// -----

// A gather fused into a selection runs a sequence at a time, as soon as
// the selection has written that sequence's rows: it must be over those.
func.func @gather_other_rows(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>, %seg2: memref<?x1xi64>, %x: memref<?x16x32xf32>, %xs: memref<?x4x32xf32>) {
  // expected-error @+1 {{the gather's rows and tokens must be the ones this op selects}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32> gather {
    modk.rows ins(%x : memref<?x16x32xf32>) rows %seg2 : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs : memref<?x4x32xf32>) access(token -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// Other sequences may still be selecting while one is gathered: the
// gather cannot read the mask the selection writes.
func.func @gather_reads_mask(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>, %x: memref<?x16x32xf32>, %xs: memref<?x4x32xf32>) {
  // expected-error @+1 {{the gather cannot read or write the selection's scores or mask}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32> gather {
    modk.rows ins(%x, %r : memref<?x16x32xf32>, memref<?x16xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs : memref<?x4x32xf32>) access(token, token_value -> row) reduce {
    ^bb0(%a: f32, %s: f32):
      modk.yield
    } body {
    ^bb0(%a: f32, %s: f32):
      %y = arith.mulf %a, %s : f32
      modk.yield %y : f32
    }
  }
  return
}

// -----

// The region holds the gather and nothing else.
func.func @gather_region_not_rows(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>, %xs: memref<?x4x32xf32>) {
  // expected-error @+1 {{the `gather` region holds one modk.rows}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32> gather {
    modk.zero(%xs) : memref<?x4x32xf32>
  }
  return
}

// -----

// A decode step's gather reads one token a sequence, at the row's
// sequence: it has no positions.
func.func @decode_gather_positions(%r: memref<?x1xf32>, %step: memref<?x1xi32>, %active: memref<?x1xi8>, %pos: memref<?x1xi32>, %seg: memref<?x1xi64>, %mask: memref<?x1xi32>, %x: memref<?x1x32xf32>, %xs: memref<?x1x32xf32>) {
  // expected-error @+1 {{the gather's rows and tokens must be the ones this op selects}}
  modk.decode_select(%r, %step, %active, %pos, %seg, %mask) {causal_router = #modk.causal_router<aux_loss>, layer = 1 : i64} : memref<?x1xf32>, memref<?x1xi32>, memref<?x1xi8>, memref<?x1xi32>, memref<?x1xi64>, memref<?x1xi32> gather {
    modk.rows ins(%x : memref<?x1x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x1xi32>) outs(%xs : memref<?x1x32xf32>) access(token -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// A table is read at the row's id: the kernel needs an ids input.
func.func @rows_lookup_pairs(%t: memref<?x4xi32>, %e: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{reads a table or scatters without an ids input}}
  modk.rows ins(%t, %e : memref<?x4xi32>, memref<64x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(row_value, table -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// A lookup's ids are i32, one a row.
func.func @rows_lookup_ids_type(%t: memref<?x4xf32>, %e: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 0 is read or written at 'ids', which needs i32 [B, rows]; it is 'memref<?x4xf32>'}}
  modk.rows ins(%t, %e : memref<?x4xf32>, memref<64x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(ids, table -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// A lookup's table is [V, width] with V > 1 (a [1, width] input is a vector).
func.func @rows_lookup_table_shape(%t: memref<?x4xi32>, %e: memref<1x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 1 is read or written at 'table', which needs f32 or bf16 [V, 32] with V > 1; it is 'memref<1x32xf32>'}}
  modk.rows ins(%t, %e : memref<?x4xi32>, memref<1x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(ids, table -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// The table's rows hold the row width.
func.func @rows_lookup_table_width(%t: memref<?x4xi32>, %e: memref<64x16xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 1 is read or written at 'table', which needs f32 or bf16 [V, 32] with V > 1; it is 'memref<64x16xf32>'}}
  modk.rows ins(%t, %e : memref<?x4xi32>, memref<64x16xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(ids, table -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// The ids address the table; the regions cannot read them as an element.
func.func @rows_lookup_ids_read(%t: memref<?x4xi32>, %e: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 0 holds a lookup's ids: the regions cannot read it}}
  modk.rows ins(%t, %e : memref<?x4xi32>, memref<64x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(ids, table -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    modk.yield %s : f32
  }
  return
}

// -----

// causal_only names the forward entry's condition (its mode, its caller's
// causal decisions): a training entry has none.
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [8, 32], init = normal, std = 2.000000e-02 : f64>]} {
  %w = modk.param "w" : memref<8x32xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x16x32xf32>
  %h = modk.alloc : memref<?x16x8xf32>
  // expected-error @+1 {{'modk.gemm' op is causal_only in @grad: only the forward entry runs kernels on causal decisions}}
  modk.gemm %x, [%w] rows %seg -> %h {causal_only, epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<8x32xf32>, memref<?x1xi64>, memref<?x16x8xf32>
}

// -----

modk.entry @decode attributes {kind = #modk.entry_kind<decode>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<causal>], params = []} {
  %seg = modk.alloc : memref<?x1xi64>
  %x = modk.alloc : memref<?x1x32xf32>
  // expected-error @+1 {{'modk.rows' op is causal_only in @decode: only the forward entry runs kernels on causal decisions}}
  modk.rows ins(%x : memref<?x1x32xf32>) rows %seg : memref<?x1xi64> outs(%x : memref<?x1x32xf32>) access(row -> row) attributes {causal_only} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
}

// -----

// `maxima`, where present, yields the terms whose maxima `reduce` and
// `body` read.
func.func @rows_empty_maxima(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{'maxima' must yield at least one value}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) maxima {
  ^bb0(%a: f32):
    modk.yield
  } reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// The row's maxima follow the elements in `reduce` (and `body`).
func.func @rows_reduce_without_maxima(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{'reduce' takes 2 f32 arguments, has 1}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) maxima {
  ^bb0(%a: f32):
    modk.yield %a : f32
  } reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %m: f32):
    %d = arith.subf %a, %m : f32
    modk.yield %d : f32
  }
  return
}

// -----

// An i32 input holds one class a row (a target, at `row_value`), not
// elements.
func.func @rows_i32_elements(%x: memref<?x16x32xi32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{input 0 is read or written at 'row', which needs f32 or bf16 [B, rows, 32]; it is 'memref<?x16x32xi32>'}}
  modk.rows ins(%x : memref<?x16x32xi32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// An element's column exists only inside a row kernel's regions.
func.func @column_outside_rows() {
  // expected-error @+1 {{expects parent op 'modk.rows'}}
  %c = modk.column : f32
  return
}

// -----

// gather_blocks splits a fused gather over blocks: without one it means
// nothing.
func.func @gather_blocks_without_gather(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>) {
  // expected-error @+1 {{gather_blocks configures a fused gather; this op has no `gather` region}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, gather_blocks = 2 : i64, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  return
}

// -----

// Each block gathers at least one of the k rows.
func.func @gather_blocks_above_k(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>, %x: memref<?x16x32xf32>, %xs: memref<?x4x32xf32>) {
  // expected-error @+1 {{gather_blocks 5 exceeds the 4 rows a sequence gathers}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, gather_blocks = 5 : i64, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32> gather {
    modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%xs : memref<?x4x32xf32>) access(token -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// A positive count of blocks.
func.func @gather_blocks_zero(%r: memref<?x16xf32>, %pos: memref<?x4xi32>, %seg: memref<?x1xi64>, %mask: memref<?x16xi32>) {
  // expected-error @+1 {{attribute 'gather_blocks' failed to satisfy constraint}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, gather_blocks = 0 : i64, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
  return
}

// -----

// Above 8192 rows a sequence, a block cannot keep the positions in shared
// memory: the selection gathers on one block a sequence.
func.func @gather_blocks_large_k(%r: memref<?x10000xf32>, %pos: memref<?x9000xi32>, %seg: memref<?x1xi64>, %mask: memref<?x10000xi32>, %x: memref<?x10000x32xf32>, %xs: memref<?x9000x32xf32>) {
  // expected-error @+1 {{gather_blocks 2 needs k <= 8192 (each block keeps the k positions in shared memory); k is 9000}}
  modk.route_select %r -> %pos, %seg, %mask {causal_router = #modk.causal_router<none>, gather_blocks = 2 : i64, k = 9000 : i64, layer = 1 : i64} : memref<?x10000xf32>, memref<?x9000xi32>, memref<?x1xi64>, memref<?x10000xi32> gather {
    modk.rows ins(%x : memref<?x10000x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x9000xi32>) outs(%xs : memref<?x9000x32xf32>) access(token -> row) reduce {
    ^bb0(%a: f32):
      modk.yield
    } body {
    ^bb0(%a: f32):
      modk.yield %a : f32
    }
  }
  return
}

// -----

// The few-row kernel has one tile.
func.func @stream_tile(%x: memref<?x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x64xf32>) {
  // expected-error @+1 {{variant 0: the stream kernel's tile is 8x4 (or 64x8 on tensor cores) and holds every epilogue}}
  modk.gemm %x, [%w] rows %seg -> %y {config = #modk.gemm_config<stream 16x4, from 17: mma 64x64>, epilogue = #modk.epilogue<none>} : memref<?x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x64xf32>
  return
}

// -----

// tf32x3 (an f32 product on CUTLASS) names CUTLASS 2.x's multistage kernels.
func.func @tf32x3_on_wgmma(%x: memref<?x32xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x64xf32>) {
  // expected-error @+1 {{variant 1: tf32x3 (f32 products on CUTLASS) runs CUTLASS 2.x's multistage kernels only}}
  modk.gemm %x, [%w] rows %seg -> %y {config = #modk.gemm_config<mma 64x64, from 65: cutlass 64x128x16 cluster 1x1 stages 6 cooperative tf32x3 raster along_m>, epilogue = #modk.epilogue<none>} : memref<?x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x64xf32>
  return
}

// -----

// It reads A and W with the reduction contiguous: forward products only.
func.func @stream_dgrad(%dy: memref<?x64xf32>, %w: memref<64x32xf32>, %seg: memref<?x1xi64>, %dx: memref<?x32xf32>) {
  // expected-error @+1 {{the stream kernel runs forward products (modk.gemm) only}}
  modk.gemm_dgrad(%dy, %w, %seg, %dx) {accumulate = false, config = #modk.gemm_config<stream 8x4, from 17: mma 64x64>} : memref<?x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x32xf32>
  return
}

// -----

// RoPE's ops pair a head's columns: only a modk.rows with head_dim has them.
func.func @rotate_half_without_heads(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    // expected-error @+1 {{needs a modk.rows with head_dim}}
    %r = modk.rotate_half %a : f32
    modk.yield %r : f32
  }
  return
}

// -----

func.func @rope_angle_in_reduce(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x16xi32>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%y : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
  ^bb0(%a: f32):
    // expected-error @+1 {{may be read only in a modk.rows's 'body'}}
    %c, %s = modk.rope_angle {theta = 1.0e+04 : f64} : f32, f32
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

func.func @rope_angle_without_positions(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    // expected-error @+1 {{needs the rows' positions}}
    %c, %s = modk.rope_angle {theta = 1.0e+04 : f64} : f32, f32
    %y0 = arith.mulf %a, %c : f32
    modk.yield %y0 : f32
  }
  return
}

// -----

func.func @odd_head_dim(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{head_dim 12 must be even and divide the row width 32}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 12 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// A kernel over heads maps elements: no column sums (or row values).
func.func @heads_with_column_sum(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>, %dw: memref<32xf32>) {
  // expected-error @+1 {{with head_dim only maps elements: operand 2 is read or written at 'column_sum'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y, %dw : memref<?x16x32xf32>, memref<32xf32>) access(row -> row, column_sum) attributes {head_dim = 16 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a, %a : f32, f32
  }
  return
}

// -----

func.func @rotate_half_of_a_vector(%x: memref<?x16x32xf32>, %w: memref<32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x16xi32>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x, %w : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%y : memref<?x16x32xf32>) access(row, column -> row) attributes {head_dim = 16 : i64} reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    // expected-error @+1 {{reads input 1, which is not a row buffer}}
    %r = modk.rotate_half %b : f32
    modk.yield %r : f32
  }
  return
}

// -----

// One angle an element: the generated kernels form it once.
func.func @two_rope_angles(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x16xi32>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x16xi32>) outs(%y : memref<?x16x32xf32>) access(row -> row) attributes {head_dim = 16 : i64} reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    // expected-error @+1 {{is read once a body: an element has one angle}}
    %c, %s = modk.rope_angle {theta = 1.0e+04 : f64} : f32, f32
    %c2, %s2 = modk.rope_angle {theta = 5.0e+05 : f64} : f32, f32
    %y0 = arith.mulf %a, %c : f32
    %y1 = arith.mulf %y0, %c2 : f32
    modk.yield %y1 : f32
  }
  return
}

// -----

// A window is read a row at a time by its row stride: not by a kernel
// with row sums.
func.func @window_in_sums(%s: memref<?x16x96xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  // expected-error @+1 {{input 0 is a column window, which only a kernel that maps elements at its rows may read}}
  modk.rows ins(%w : memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    %q = arith.mulf %a, %a : f32
    modk.yield %q : f32
  } body {
  ^bb0(%a: f32, %ss: f32):
    %r = arith.mulf %a, %ss : f32
    modk.yield %r : f32
  }
  return
}

// -----

// A kernel writes a window only in place: the window it reads there.
func.func @window_written_elsewhere(%s: memref<?x16x96xf32>, %seg: memref<?x1xi64>, %x: memref<?x16x32xf32>) {
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  // expected-error @+1 {{writes a column window other than in place (an input it reads as a window)}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%w : memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// Attention reads q, k and v as windows, and nothing else: not its output.
func.func @window_attention_output(%s: memref<?x16x96xf32>, %q: memref<?x16x32xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>) {
  // expected-error @+1 {{is operand 5 of modk.attention, which cannot read a column window}}
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  modk.attention %q, %q, %q rows %pos, %seg -> %w {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  return
}

// -----

// A bf16 product rounds a contiguous copy of its input: it reads no
// window (an f32 one does, by its leading dimension).
func.func @window_bf16_gemm_input(%s: memref<?x16x96xf32>, %wt: memref<32x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{is operand 0 of modk.gemm, which cannot read a column window}}
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  modk.gemm %w, [%wt] rows %seg -> %y {epilogue = #modk.epilogue<none>, precision = #modk.dtype<bf16>} : memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
  return
}

// -----

// Nor does a weight's gradient read one.
func.func @window_wgrad_input(%s: memref<?x16x96xf32>, %dy: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %dw: memref<32x32xf32>) {
  // expected-error @+1 {{is operand 1 of modk.gemm_wgrad, which cannot read a column window}}
  %w = modk.column_window %s[32] : memref<?x16x96xf32> to memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>
  modk.gemm_wgrad(%dy, %w, %seg, %dw) : memref<?x16x32xf32>, memref<?x16x32xf32, strided<[1536, 96, 1], offset: 32>>, memref<?x1xi64>, memref<32x32xf32>
  return
}

// -----

// A scatter-add (a lookup whose table is an output) is its kernel's one
// output: the generated kernels own parts of the table, not rows.
func.func @scatter_with_second_output(%dx: memref<?x4x32xf32>, %t: memref<?x4xi32>, %seg: memref<?x1xi64>, %g: memref<64x32xf32>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{scatters into output 0: it must be its one output and not an input, of a kernel that maps elements (no sums, maxima, token accesses or head_dim)}}
  modk.rows ins(%dx, %t : memref<?x4x32xf32>, memref<?x4xi32>) rows %seg : memref<?x1xi64> outs(%g, %y : memref<64x32xf32>, memref<?x4x32xf32>) access(row, ids -> scatter, row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a, %a : f32, f32
  }
  return
}

// -----

// Nor does it sum over the row.
func.func @scatter_with_sums(%dx: memref<?x4x32xf32>, %t: memref<?x4xi32>, %seg: memref<?x1xi64>, %g: memref<64x32xf32>) {
  // expected-error @+1 {{scatters into output 0}}
  modk.rows ins(%dx, %t : memref<?x4x32xf32>, memref<?x4xi32>) rows %seg : memref<?x1xi64> outs(%g : memref<64x32xf32>) access(row, ids -> scatter) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  } body {
  ^bb0(%a: f32, %b: f32, %s: f32):
    %r = arith.mulf %a, %s : f32
    modk.yield %r : f32
  }
  return
}

// -----

// The optimizer's gradient norm is IR too: its `norm` region is required.
// expected-error @+1 {{needs a 'norm' region: an element's term of the squared gradient norm}}
modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  modk.yield %p, %m, %v : f32, f32, f32
}

// -----

// Its term is an f64: the sum over a model's gradients is in f64.
// expected-error @+1 {{'norm' must yield an f64 term (the sum is in f64)}}
modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  modk.yield %p, %m, %v : f32, f32, f32
} norm {
^bb0(%g: f32):
  %sq = arith.mulf %g, %g : f32
  modk.yield %sq : f32
}

// -----

// f64 only in the norm: a row kernel computes f32.
func.func @rows_f64(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    // expected-error @+1 {{in a kernel region must compute f32 (or i1)}}
    %d = arith.extf %a : f32 to f64
    %t = arith.truncf %d : f64 to f32
    modk.yield %t : f32
  }
  return
}

// -----

// Each operand declares its access: one for each input and output.
func.func @access_count(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{declares 2 input and 1 output accesses for 1 inputs and 1 outputs}}
  "modk.rows"(%x, %seg, %y) <{input_access = [#modk.access<row>, #modk.access<row>], output_access = [#modk.access<row>], operandSegmentSizes = array<i32: 1, 1, 0, 1>}> ({
  ^bb0(%a: f32):
    modk.yield
  }, {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }, {
  }) : (memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>) -> ()
  return
}

// -----

// An access is a keyword of #modk.access.
func.func @access_unknown(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{unknown access 'diagonal'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(diagonal -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// Sums over the rows are outputs.
func.func @access_input_side(%x: memref<?x16x32xf32>, %w: memref<32xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{input 1 cannot be read at 'column_sum': an output's access}}
  modk.rows ins(%x, %w : memref<?x16x32xf32>, memref<32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row, column_sum -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// A weight vector is an input.
func.func @access_output_side(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %w: memref<32xf32>) {
  // expected-error @+1 {{output 0 cannot be written at 'column': an input's access}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%w : memref<32xf32>) access(row -> column) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// `row`: element (i, c) of a row buffer [B, rows, width].
func.func @access_row(%x: memref<?x16xf32>, %y: memref<?x16x32xf32>, %seg: memref<?x1xi64>) {
  // expected-error @+1 {{input 0 is read or written at 'row', which needs f32 or bf16 [B, rows, 32]; it is 'memref<?x16xf32>'}}
  modk.rows ins(%x : memref<?x16xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// `token`: element c of the row's token in [B, T, width].
func.func @access_token(%x: memref<?x16x16xf32>, %seg: memref<?x1xi64>, %pos: memref<?x4xi32>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 0 is read or written at 'token', which needs f32 or bf16 [B, T, 32]; it is 'memref<?x16x16xf32>'}}
  modk.rows ins(%x : memref<?x16x16xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%y : memref<?x4x32xf32>) access(token -> row) reduce {
  ^bb0(%a: f32):
    modk.yield
  } body {
  ^bb0(%a: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// `row_value`: one value a row, [B, rows].
func.func @access_row_value(%x: memref<?x16x32xf32>, %r: memref<?x16x2xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{input 1 is read or written at 'row_value', which needs f32 or bf16 [B, rows] (or i32 classes, as an input); it is 'memref<?x16x2xf32>'}}
  modk.rows ins(%x, %r : memref<?x16x32xf32>, memref<?x16x2xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row, row_value -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// An i32 value a row is a class: only an input reads one.
func.func @access_row_value_class_output(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %t: memref<?x16xi32>) {
  // expected-error @+1 {{output 0 is read or written at 'row_value', which needs f32 or bf16 [B, rows] (or i32 classes, as an input); it is 'memref<?x16xi32>'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%t : memref<?x16xi32>) access(row -> row_value) reduce {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    modk.yield %s : f32
  } body {
  ^bb0(%a: f32, %s: f32):
    modk.yield %s : f32
  }
  return
}

// -----

// `token_value`: one value at the row's token, [B, T].
func.func @access_token_value(%x: memref<?x16x32xf32>, %r: memref<16xf32>, %seg: memref<?x1xi64>, %pos: memref<?x4xi32>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{input 1 is read or written at 'token_value', which needs f32 or bf16 [B, T] (or i32 classes, as an input); it is 'memref<16xf32>'}}
  modk.rows ins(%x, %r : memref<?x16x32xf32>, memref<16xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%y : memref<?x4x32xf32>) access(token, token_value -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// `scalar`: one value, [1].
func.func @access_scalar(%x: memref<?x16x32xf32>, %b: memref<2xf32>, %seg: memref<?x1xi64>, %y: memref<?x16x32xf32>) {
  // expected-error @+1 {{input 1 is read or written at 'scalar', which needs f32 or bf16 [1]; it is 'memref<2xf32>'}}
  modk.rows ins(%x, %b : memref<?x16x32xf32>, memref<2xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x16x32xf32>) access(row, scalar -> row) reduce {
  ^bb0(%a: f32, %c: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %c: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// `row_sum`: an f32 [1] that a value a row adds into.
func.func @access_row_sum(%x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %l: memref<2xf32>) {
  // expected-error @+1 {{output 0 is read or written at 'row_sum', which needs f32 [1]; it is 'memref<2xf32>'}}
  modk.rows ins(%x : memref<?x16x32xf32>) rows %seg : memref<?x1xi64> outs(%l : memref<2xf32>) access(row -> row_sum) reduce {
  ^bb0(%a: f32):
    %s = arith.mulf %a, %a : f32
    modk.yield %s : f32
  } body {
  ^bb0(%a: f32, %s: f32):
    modk.yield %s : f32
  }
  return
}

// -----

// `scatter`: an f32 table [V, width] that the rows add into.
func.func @access_scatter(%dx: memref<?x4x32xf32>, %t: memref<?x4xi32>, %seg: memref<?x1xi64>, %dt: memref<64x32xbf16>) {
  // expected-error @+1 {{output 0 is read or written at 'scatter', which needs f32 [V, 32] with V > 1; it is 'memref<64x32xbf16>'}}
  modk.rows ins(%dx, %t : memref<?x4x32xf32>, memref<?x4xi32>) rows %seg : memref<?x1xi64> outs(%dt : memref<64x32xbf16>) access(row, ids -> scatter) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a : f32
  }
  return
}

// -----

// A scatter is the kernel's one output.
func.func @access_scatter_alone(%dx: memref<?x4x32xf32>, %t: memref<?x4xi32>, %seg: memref<?x1xi64>, %dt: memref<64x32xf32>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{scatters into output 0: it must be its one output and not an input, of a kernel that maps elements (no sums, maxima, token accesses or head_dim)}}
  modk.rows ins(%dx, %t : memref<?x4x32xf32>, memref<?x4xi32>) rows %seg : memref<?x1xi64> outs(%dt, %y : memref<64x32xf32>, memref<?x4x32xf32>) access(row, ids -> scatter, row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %a, %a : f32, f32
  }
  return
}

// -----

// Ids address a table; a kernel has one ids input.
func.func @access_two_ids(%t: memref<?x4xi32>, %u: memref<?x4xi32>, %e: memref<64x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{has 2 ids inputs; a kernel has one}}
  modk.rows ins(%t, %u, %e : memref<?x4xi32>, memref<?x4xi32>, memref<64x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(ids, ids, table -> row) reduce {
  ^bb0(%a: f32, %b: f32, %c: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32, %c: f32):
    modk.yield %c : f32
  }
  return
}

// -----

// Ids without a table address nothing.
func.func @access_ids_alone(%t: memref<?x4xi32>, %x: memref<?x4x32xf32>, %seg: memref<?x1xi64>, %y: memref<?x4x32xf32>) {
  // expected-error @+1 {{has an ids input but no table or scatter}}
  modk.rows ins(%t, %x : memref<?x4xi32>, memref<?x4x32xf32>) rows %seg : memref<?x1xi64> outs(%y : memref<?x4x32xf32>) access(ids, row -> row) reduce {
  ^bb0(%a: f32, %b: f32):
    modk.yield
  } body {
  ^bb0(%a: f32, %b: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// In place: an output that is an input is written where it is read.
func.func @access_in_place(%a: memref<?x16x32xf32>, %x: memref<?x16x32xf32>, %seg: memref<?x1xi64>, %pos: memref<?x4xi32>) {
  // expected-error @+1 {{output 0 is input 1 but written at 'token', read at 'row'}}
  modk.rows ins(%a, %x : memref<?x16x32xf32>, memref<?x16x32xf32>) rows %seg : memref<?x1xi64> tokens(%pos : memref<?x4xi32>) outs(%x : memref<?x16x32xf32>) access(row, row -> token) reduce {
  ^bb0(%b: f32, %c: f32):
    modk.yield
  } body {
  ^bb0(%b: f32, %c: f32):
    modk.yield %b : f32
  }
  return
}

// -----

// An entry named like a kind has that kind: @grad computes the gradient.
// expected-error @+1 {{is named @grad but its kind is forward}}
modk.entry @grad attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
}

// -----

// An entry's kind is one of #modk.entry_kind.
// expected-error @+2 {{expected ::modc::modk::EntryKind to be one of: forward, grad, decode, eval, eval_causal}}
// expected-error @+1 {{failed to parse Modk_EntryKindAttr parameter 'value'}}
modk.entry @step attributes {kind = #modk.entry_kind<train>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
}

// -----

// Only the forward entry fills the KV cache (the causal prefill).
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 64, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = []} {
  %seg = modk.alloc : memref<?x1xi64>
  %pos = modk.alloc : memref<?x16xi32>
  %k = modk.alloc : memref<?x16x32xf32>
  %v = modk.alloc : memref<?x16x32xf32>
  // expected-error @+1 {{is in a grad entry: only the forward entry fills the KV cache}}
  modk.cache_append %k, %v rows %pos, %seg {layer = 0 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>
}

// -----

// Keys and values of one width.
func.func @cache_append_widths(%k: memref<?x16x32xf32>, %v: memref<?x16x16xf32>, %pos: memref<?x16xi32>, %seg: memref<?x1xi64>) {
  // expected-error @+1 {{k and v must have one width}}
  modk.cache_append %k, %v rows %pos, %seg {layer = 0 : i64} : memref<?x16x32xf32>, memref<?x16x16xf32>, memref<?x16xi32>, memref<?x1xi64>
  return
}
