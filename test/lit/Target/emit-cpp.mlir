// RUN: mod-translate --modk-to-cpp %s | FileCheck %s
// RUN: not mod-translate --modk-to-cpp %inputs/unplanned.mlir 2>&1 | FileCheck %s --check-prefix=UNPLANNED

// The planned launch plan of a 2-layer model (layer 1 routed, k = 4 of 16,
// sigmoid gate, predictor router), emitted as C++ specialised on its shapes.
// CHECK: namespace modk_cpu
// CHECK: modc_abi_version(void) { return 1u; }
// CHECK: modc_manifest_json(void)
// CHECK: "workspace_bytes_per_sequence": [[WS:[0-9]+]]
// CHECK: "capacity": 4,
// CHECK: modc_forward_workspace_bytes(int64_t batch)
// CHECK-NEXT: return batch < 1 ? 0 : (uint64_t)batch * [[WS]]u;
// CHECK: modc_forward(const modc_forward_args *args)
// CHECK: compiled for seq_len 16
// CHECK: is outside the vocabulary [0, 64)
// CHECK: const float *w0 = args->params[0]; // embed.weight
// CHECK: float *[[X:buf[0-9]+]] = reinterpret_cast<float *>(ws + B * 0);
// CHECK: int32_t *routed1 = args->routed + (int64_t)0 * B * 16;
// CHECK: modk_cpu::embed<32>(args->tokens, B * 16, w0, [[X]]);
// CHECK: modk_cpu::rope<2, 16>(
// CHECK: modk_cpu::causal_attention<2, 16>(
// The O-projection accumulates into the stream: the fused residual add.
// CHECK: cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, 32, 32, 1.0f, {{buf[0-9]+}}, 32, w5, 32, 1.0f, [[X]], 32);
// CHECK: modk_cpu::swiglu<64>(
// CHECK: if (causal) // only the causal decision reads the predictor
// CHECK-NEXT: modk_cpu::predictor<32, 8>([[X]], B * 16,
// CHECK: modk.route_select_gather layer 1 k=4
// CHECK-NEXT: modk_cpu::router_logits<16, 32>([[X]], B, w{{[0-9]+}}, [[R:buf[0-9]+]]);
// CHECK-NEXT: if (causal)
// CHECK-NEXT: modk_cpu::select_causal<16>(
// CHECK-NEXT: else
// CHECK-NEXT: modk_cpu::select_topk<16, 4>([[R]], B, [[POS:buf[0-9]+]], [[SEG:buf[0-9]+]], routed1);
// CHECK-NEXT: modk_cpu::gather_rmsnorm<16, 32>([[X]], B, [[SEG]], [[POS]],
// Gathered GEMMs run on the rows the selection made.
// CHECK: const int64_t rows = [[SEG]][B];
// The down projection's epilogue scales by the sigmoid gate (1) and scatters
// into the stream at the selected positions.
// CHECK: modk.gemm [32 x 64] epilogue=gate_scale_scatter
// CHECK: modk_cpu::gate_scale_scatter<16, 32, 1>([[X]], B, [[SEG]], [[POS]], [[R]],
// CHECK: return 0;

// UNPLANNED: error: 'modk.entry' op has no memory plan; run modk-plan-memory first

module {
  modk.entry @forward attributes {model = "{\22d_ff\22:64,\22d_model\22:32,\22dtype\22:\22f32\22,\22mlp\22:\22swiglu\22,\22mod\22:{\22aux_loss_weight\22:0.01,\22capacity\22:0.25,\22causal_router\22:\22predictor\22,\22gate\22:\22sigmoid\22,\22predictor_hidden\22:8,\22schedule\22:\22every_other\22},\22n_heads\22:2,\22n_layers\22:2,\22name\22:\22small\22,\22norm_eps\22:1.0000000000000001e-05,\22rope_theta\22:10000,\22seq_len\22:16,\22tie_embeddings\22:true,\22vocab_size\22:64}", modes = ["topk", "causal"], params = [{init = "normal", name = "embed.weight", shape = [64, 32], std = 2.000000e-02 : f64}, {init = "ones", name = "blocks.0.attn_norm.weight", shape = [32]}, {init = "normal", name = "blocks.0.attn.wq.weight", shape = [32, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.0.attn.wk.weight", shape = [32, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.0.attn.wv.weight", shape = [32, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.0.attn.wo.weight", shape = [32, 32], std = 1.000000e-02 : f64}, {init = "ones", name = "blocks.0.mlp_norm.weight", shape = [32]}, {init = "normal", name = "blocks.0.mlp.w_gate.weight", shape = [64, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.0.mlp.w_up.weight", shape = [64, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.0.mlp.w_down.weight", shape = [32, 64], std = 1.000000e-02 : f64}, {init = "normal", name = "blocks.1.predictor.fc1.weight", shape = [8, 32], std = 2.000000e-02 : f64}, {init = "zeros", name = "blocks.1.predictor.fc1.bias", shape = [8]}, {init = "normal", name = "blocks.1.predictor.fc2.weight", shape = [1, 8], std = 2.000000e-02 : f64}, {init = "zeros", name = "blocks.1.predictor.fc2.bias", shape = [1]}, {init = "normal", name = "blocks.1.router.weight", shape = [1, 32], std = 2.000000e-02 : f64}, {init = "ones", name = "blocks.1.attn_norm.weight", shape = [32]}, {init = "normal", name = "blocks.1.attn.wq.weight", shape = [32, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.1.attn.wk.weight", shape = [32, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.1.attn.wv.weight", shape = [32, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.1.attn.wo.weight", shape = [32, 32], std = 1.000000e-02 : f64}, {init = "ones", name = "blocks.1.mlp_norm.weight", shape = [32]}, {init = "normal", name = "blocks.1.mlp.w_gate.weight", shape = [64, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.1.mlp.w_up.weight", shape = [64, 32], std = 2.000000e-02 : f64}, {init = "normal", name = "blocks.1.mlp.w_down.weight", shape = [32, 64], std = 1.000000e-02 : f64}, {init = "ones", name = "final_norm.weight", shape = [32]}], seq_len = 16 : i64, vocab_size = 64 : i64, workspace_bytes_per_sequence = 17408 : i64} {
    %0 = modk.param "embed.weight" : memref<64x32xf32>
    %1 = modk.param "blocks.0.attn_norm.weight" : memref<32xf32>
    %2 = modk.param "blocks.0.attn.wq.weight" : memref<32x32xf32>
    %3 = modk.param "blocks.0.attn.wk.weight" : memref<32x32xf32>
    %4 = modk.param "blocks.0.attn.wv.weight" : memref<32x32xf32>
    %5 = modk.param "blocks.0.attn.wo.weight" : memref<32x32xf32>
    %6 = modk.param "blocks.0.mlp_norm.weight" : memref<32xf32>
    %7 = modk.param "blocks.0.mlp.w_gate.weight" : memref<64x32xf32>
    %8 = modk.param "blocks.0.mlp.w_up.weight" : memref<64x32xf32>
    %9 = modk.param "blocks.0.mlp.w_down.weight" : memref<32x64xf32>
    %10 = modk.param "blocks.1.predictor.fc1.weight" : memref<8x32xf32>
    %11 = modk.param "blocks.1.predictor.fc1.bias" : memref<8xf32>
    %12 = modk.param "blocks.1.predictor.fc2.weight" : memref<1x8xf32>
    %13 = modk.param "blocks.1.predictor.fc2.bias" : memref<1xf32>
    %14 = modk.param "blocks.1.router.weight" : memref<1x32xf32>
    %15 = modk.param "blocks.1.attn_norm.weight" : memref<32xf32>
    %16 = modk.param "blocks.1.attn.wq.weight" : memref<32x32xf32>
    %17 = modk.param "blocks.1.attn.wk.weight" : memref<32x32xf32>
    %18 = modk.param "blocks.1.attn.wv.weight" : memref<32x32xf32>
    %19 = modk.param "blocks.1.attn.wo.weight" : memref<32x32xf32>
    %20 = modk.param "blocks.1.mlp_norm.weight" : memref<32xf32>
    %21 = modk.param "blocks.1.mlp.w_gate.weight" : memref<64x32xf32>
    %22 = modk.param "blocks.1.mlp.w_up.weight" : memref<64x32xf32>
    %23 = modk.param "blocks.1.mlp.w_down.weight" : memref<32x64xf32>
    %24 = modk.param "final_norm.weight" : memref<32xf32>
    %25 = modk.input "tokens" : memref<?x16xi32>
    %26 = modk.alloc {offset = 0 : i64} : memref<?x16x32xf32>
    modk.embed %25, %0 -> %26 : memref<?x16xi32>, memref<64x32xf32>, memref<?x16x32xf32>
    %27 = modk.alloc {offset = 2112 : i64} : memref<?x16xi32>
    %28 = modk.alloc {offset = 2240 : i64} : memref<?x1xi64>
    modk.identity_rows -> %27, %28 : memref<?x16xi32>, memref<?x1xi64>
    %29 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %26, %1 rows %28 -> %29 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %30 = modk.alloc {offset = 4480 : i64} : memref<?x16x32xf32>
    %31 = modk.alloc {offset = 6592 : i64} : memref<?x16x32xf32>
    %32 = modk.alloc {offset = 8704 : i64} : memref<?x16x32xf32>
    modk.gemm %29, [%2] rows %28 extra(%27) -> %30 {epilogue = "rope", n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %29, [%3] rows %28 extra(%27) -> %31 {epilogue = "rope", n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %29, [%4] rows %28 -> %32 {epilogue = "none"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %33 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.attention %30, %31, %32 rows %27, %28 -> %33 {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm %33, [%5] rows %28 extra(%26) -> %26 {epilogue = "residual_add"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>
    %34 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %26, %6 rows %28 -> %34 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %35 = modk.alloc {offset = 4480 : i64} : memref<?x16x64xf32>
    %36 = modk.alloc {offset = 8640 : i64} : memref<?x16x64xf32>
    modk.gemm %34, [%7, %8] rows %28 extra(%36) -> %35 {epilogue = "swiglu"} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
    modk.gemm %35, [%9] rows %28 extra(%26) -> %26 {epilogue = "residual_add"} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>
    %37 = modk.alloc {offset = 2368 : i64} : memref<?x16x8xf32>
    %38 = modk.alloc {offset = 2112 : i64} : memref<?x16xf32>
    modk.predictor %26, [%10, %11, %12, %13] scratch %37 -> %38 : memref<?x16x32xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>, memref<?x16x8xf32>, memref<?x16xf32>
    %39 = modk.alloc {offset = 2368 : i64} : memref<?x16xf32>
    %40 = modk.alloc {offset = 2496 : i64} : memref<?x16xi32>
    %41 = modk.alloc {offset = 2624 : i64} : memref<?x1xi64>
    %42 = modk.alloc {offset = 2752 : i64} : memref<?x16x32xf32>
    %43 = modk.alloc {offset = 4864 : i64} : memref<?x16x32xf32>
    %44 = modk.output "routed.1" : memref<?x16xi32>
    modk.route_select_gather %26, %14, %15 causal(%38) -> %39, %40, %41, %42, %43, %44 {causal_router = "predictor", eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64} : memref<?x16x32xf32>, memref<1x32xf32>, memref<32xf32>, memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>
    %45 = modk.alloc {offset = 6976 : i64} : memref<?x16x32xf32>
    %46 = modk.alloc {offset = 9088 : i64} : memref<?x16x32xf32>
    %47 = modk.alloc {offset = 11200 : i64} : memref<?x16x32xf32>
    modk.gemm %43, [%16] rows %41 extra(%40) -> %45 {epilogue = "rope", n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %43, [%17] rows %41 extra(%40) -> %46 {epilogue = "rope", n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %43, [%18] rows %41 -> %47 {epilogue = "none"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %48 = modk.alloc {offset = 4864 : i64} : memref<?x16x32xf32>
    modk.attention %45, %46, %47 rows %40, %41 -> %48 {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    %49 = modk.alloc {offset = 6976 : i64} : memref<?x16x32xf32>
    modk.gemm %48, [%19] rows %41 -> %49 {epilogue = "none"} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.add %42, %49 rows %41 -> %42 : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %50 = modk.alloc {offset = 4864 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %42, %20 rows %41 -> %50 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %51 = modk.alloc {offset = 9088 : i64} : memref<?x16x64xf32>
    %52 = modk.alloc {offset = 13248 : i64} : memref<?x16x64xf32>
    modk.gemm %50, [%21, %22] rows %41 extra(%52) -> %51 {epilogue = "swiglu"} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
    %53 = modk.alloc {offset = 2752 : i64} : memref<?x16x32xf32>
    modk.gemm %51, [%23] rows %41 extra(%53, %39, %49, %40) -> %26 {epilogue = "gate_scale_scatter", gate = "sigmoid"} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x16x32xf32>
    %54 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %26, %24 rows %28 -> %54 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %55 = modk.output "logits" : memref<?x16x64xf32>
    modk.gemm %54, [%0] rows %28 -> %55 {epilogue = "none"} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  }
}
