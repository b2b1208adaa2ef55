// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-configure-gemms))' %S/emit-cpp.mlir -o %t.mlir
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-configure-gemms{arch=sm_80}))' %S/emit-cpp.mlir -o %t-sm80.mlir
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %S/emit-cpp.mlir -o %t-unconfigured.mlir
// RUN: mod-translate --modk-to-cuda %t.mlir | FileCheck %s
// RUN: mod-translate --modk-to-cuda --cuda-arch=sm_80 %t-sm80.mlir | FileCheck %s --check-prefix=SM80
// RUN: not mod-translate --modk-to-cuda %t-unconfigured.mlir 2>&1 | FileCheck %s --check-prefix=UNCONFIGURED
// RUN: modc compile %examples/tiny-mod-bf16.json --target cuda --arch sm_90a --emit=modk -o - > %t-bf16.mlir
// RUN: not mod-translate --modk-to-cuda --cuda-arch=sm_80 %t-bf16.mlir 2>&1 | FileCheck %s --check-prefix=WRONGARCH
// RUN: not mod-translate --modk-to-cuda --cuda-arch=sm_70 %t.mlir 2>&1 | FileCheck %s --check-prefix=BADARCH
// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-configure-gemms))' %S/emit-cpp.mlir -o %t-named.mlir
// RUN: not mod-translate --modk-to-cuda %t-named.mlir 2>&1 | FileCheck %s --check-prefix=NAMED
// RUN: not mod-translate --modk-to-cuda %inputs/unplanned.mlir 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-configure-gemms))' %S/emit-cpp.mlir | mod-translate --modk-to-cuda | FileCheck %s --check-prefix=GENERATED
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-fuse-row-epilogues,modk-configure-gemms))' %S/emit-cpp.mlir | mod-translate --modk-to-cuda | FileCheck %s --check-prefix=FUSED
// RUN: mod-translate --modk-to-cuda %t.mlir | FileCheck %s --check-prefix=COLSUM
// RUN: mod-translate --modk-to-cuda %t.mlir | FileCheck %s --check-prefix=PREDICTOR
// RUN: mod-translate --modk-to-cuda %t.mlir | FileCheck %s --check-prefix=LOSSES
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %S/../../common/RowKernels.mlir | mod-translate --modk-rows-to-cuda | FileCheck %s --check-prefix=WIDE
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-fuse-select-gather,modk-configure-gemms))' %S/emit-cpp.mlir | mod-translate --modk-to-cuda | FileCheck %s --check-prefix=SELGATHER
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-fuse-select-gather,modk-configure-gemms{gather-blocks=2}))' %S/emit-cpp.mlir | mod-translate --modk-to-cuda | FileCheck %s --check-prefix=SPLITGATHER

// The launch plan of emit-cpp.mlir (2 layers, layer 1 routed with k = 4 of
// 16, sigmoid gate, predictor router) emitted as CUDA: the same entries and
// buffers, kernels enqueued on the package stream with device row counts.
// CHECK: // Target: CUDA sm_90a.
// CHECK: namespace modk_cuda
// The GEMMs and attention run on tensor cores: TF32 mma.sync with the 3xTF32
// split (f32 accuracy), operands staged by cp.async.
// CHECK: asm("cvt.rna.tf32.f32
// CHECK: asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// CHECK: cp.async
// Each product's #modk.gemm_config becomes a GemmPlan, the attribute beside
// it; the calls name their plan (an f32 entry: mma.sync only, and the
// few-row kernel for the forward products' first 64 rows).
// CHECK: // The kernels of each product, chosen by modk-configure-gemms for sm_90a.
// CHECK-NEXT: // #modk.gemm_config<stream 8x4, from 65: mma 64x64, from 33665: mma 128x128>
// CHECK-NEXT: using [[PLAN:gemm_plan_[0-9]+]] = modk_cuda::detail::GemmPlan<1, 0, modk_cuda::detail::GemmVariant<0, modk_cuda::detail::PathStream, 8, 4, 0, false>, modk_cuda::detail::GemmVariant<65, modk_cuda::detail::PathMma, 64, 64, 0, false>, modk_cuda::detail::GemmVariant<33665, modk_cuda::detail::PathMma, 128, 128, 0, false>>;
// The input gradients' products: no few-row kernel.
// CHECK-NEXT: // #modk.gemm_config<mma 64x64, from 33665: mma 128x128>
// CHECK-NEXT: using gemm_plan_{{[0-9]+}} = modk_cuda::detail::GemmPlan<1, 0, modk_cuda::detail::GemmVariant<0, modk_cuda::detail::PathMma, 64, 64, 0, false>, modk_cuda::detail::GemmVariant<33665, modk_cuda::detail::PathMma, 128, 128, 0, false>>;
// The weight gradients: up to 264 chunks of their rows (two waves of 132).
// CHECK-NEXT: // #modk.gemm_config<mma 64x64, split 264>
// CHECK-NEXT: using gemm_plan_{{[0-9]+}} = modk_cuda::detail::GemmPlan<264, 0, modk_cuda::detail::GemmVariant<0, modk_cuda::detail::PathMma, 64, 64, 0, false>>;
// The row kernels of the same modk.rows regions as the CPU's (emit-cpp.mlir):
// the same statements, a warp per row, the sums by warp shuffles. The
// embedding lookup:
// CHECK-LABEL: __global__ __launch_bounds__(modk_cuda::detail::kThreads) void modc_rows_0(const int64_t *rows, const int32_t *in0, const float *in1, float *out0) {
// CHECK: const int64_t id0 = in0[i];
// CHECK-NEXT: for (int c = lane; c < 32; c += modk_cuda::kWarp) {
// CHECK-NEXT: const float x1 = static_cast<float>(in1[id0 * 32 + c]);
// CHECK-NEXT: out0[i * 32 + c] = x1;
// RMSNorm:
// CHECK-LABEL: __global__ __launch_bounds__(modk_cuda::detail::kThreads) void modc_rows_1(const int64_t *rows, const float *in0, const float *in1, float *out0) {
// CHECK-NEXT: const int64_t i = int64_t(blockIdx.x) * modk_cuda::detail::kRowWarps + threadIdx.x / modk_cuda::kWarp;
// CHECK-NEXT: if (i >= *rows)
// CHECK-NEXT: return;
// CHECK-NEXT: const int lane = threadIdx.x % modk_cuda::kWarp;
// CHECK-NEXT: float sum0 = 0.0f;
// CHECK-NEXT: for (int c = lane; c < 32; c += modk_cuda::kWarp) {
// CHECK-NEXT: const float x0 = static_cast<float>(in0[i * 32 + c]);
// CHECK-NEXT: const float t0 = __fmul_rn(x0, x0);
// CHECK-NEXT: sum0 += t0;
// CHECK-NEXT: }
// CHECK-NEXT: sum0 = modk_cuda::warpSum(sum0);
// CHECK-NEXT: const float t1 = sum0 / 32.0000000f;
// CHECK-NEXT: const float t2 = __fadd_rn(t1, 9.99999975e-06f);
// CHECK-NEXT: const float t3 = sqrtf(t2);
// CHECK-NEXT: const float t4 = 1.00000000f / t3;
// CHECK-NEXT: for (int c = lane; c < 32; c += modk_cuda::kWarp) {
// CHECK: out0[i * 32 + c] = t6;
// The router: a warp a row, its sum stored once by the first lane.
// CHECK: void modc_rows_[[ROUTER:[0-9]+]](const int64_t *rows, const float *in0, const float *in1, float *out0) {
// CHECK: const float t0 = __fmul_rn(x0, x1);
// CHECK-NEXT: sum0 += t0;
// CHECK-NEXT: }
// CHECK-NEXT: sum0 = modk_cuda::warpSum(sum0);
// CHECK-NEXT: if (lane == 0)
// CHECK-NEXT: out0[i] = sum0;
// CHECK-NEXT: }
// The routed rows' gather + RMSNorm: each warp finds its row's token.
// CHECK-LABEL: void modc_rows_{{[0-9]+}}(const int64_t *rows, const int64_t *seg, int64_t nseg, const int32_t *pos, const float *in0, const float *in1, float *out0, float *out1) {
// CHECK: const int64_t seq = modk_cuda::segmentOf(seg, nseg, i);
// CHECK-NEXT: const int64_t tok = pos[i];
// CHECK: const float x0 = static_cast<float>(in0[(seq * 16 + tok) * 32 + c]);
// CHECK: const float t1 = expf(t0);
// The AdamW update, generated from modk.optimizer: one launch over every
// parameter, a block a chunk, each chunk's parameter from the step's table;
// grad_scale and whether the norm is finite come from the device state
// adamw_norm left, decay from the parameter's flag. The other scalars come
// from device memory (a captured training step replays with each step's).
// Without bf16_copies no parameter has a copy (t.copy is null).
// CHECK: __global__ __launch_bounds__(modk_cuda::detail::kThreads) void modc_optimizer_update(const modk_cuda::AdamTensor *tensors, int count, int64_t chunks, const modk_cuda::AdamCtl *ctl, const float *scalars) {
// CHECK-NEXT: if (!ctl->finite)
// CHECK-NEXT: return;
// CHECK-NEXT: const float grad_scale = ctl->scale;
// CHECK-NEXT: const float decayed = scalars[0];
// CHECK-NEXT: const float beta1 = scalars[1];
// CHECK-NEXT: const float beta2 = scalars[2];
// CHECK-NEXT: const float eps = scalars[3];
// CHECK-NEXT: const float step_size = scalars[4];
// CHECK-NEXT: const float inv_sqrt_bc2 = scalars[5];
// CHECK: const modk_cuda::AdamTensor &t = modk_cuda::adamTensorOf(tensors, count, chunk);
// CHECK: const float decay = t.decays ? decayed : 1.0f;
// CHECK: const float {{t[0-9]+}} = sqrtf(
// CHECK: p[i] =
// CHECK-NEXT: m[i] =
// CHECK-NEXT: v[i] =
// CHECK-NEXT: if (t.copy)
// The gradient norm's terms: a block's f64 partial sum per chunk of every
// parameter, which adamw_norm launches once and adamFinish adds in order.
// CHECK: __global__ __launch_bounds__(modk_cuda::detail::kThreads) void modc_optimizer_norm(const modk_cuda::AdamTensor *tensors, int count, double *partial) {
// CHECK: const double [[GD:t[0-9]+]] = static_cast<double>(gi);
// CHECK-NEXT: const double [[SQ:t[0-9]+]] = __dmul_rn([[GD]], [[GD]]);
// CHECK-NEXT: acc += [[SQ]];
// CHECK: modk_cuda::blockSum(acc, scratch);
// CHECK: modc_abi_version(void) { return 7u; }
// CHECK: "arch": "sm_90a"
// CHECK: "target": "cuda"
// CHECK: constexpr int kArchMajor = 9, kArchMinor = 0;
// CHECK-NEXT: constexpr bool kArchExact = true;
// CHECK: modc_cuda_init(int32_t device)
// CHECK: no usable CUDA device
// CHECK: modc_cuda_sync(void)
// CHECK: is outside the vocabulary [0, 64)
// CHECK: modc_forward(const modc_forward_args *args)
// CHECK: compiled for seq_len 16
// CHECK: call modc_cuda_init first
// Every kernel reads the checked copy of the tokens, never args->tokens.
// CHECK: checkTokens("modc_forward", args->tokens, nullptr, safeTokens, B * 16, 16, s);
// CHECK: float *[[X:buf[0-9]+]] = reinterpret_cast<float *>(ws + B * 0);
// Row counts are device pointers (seg + B) with a static bound (B * rows).
// CHECK: if (B * 16 > 0)
// CHECK-NEXT: MODC_LAUNCH(modc_rows::modc_rows_0, unsigned(modk_cuda::ceilDiv(B * 16, modk_cuda::detail::kRowWarps)), modk_cuda::detail::kThreads, 0, s, [[SEG:buf[0-9]+]] + B, safeTokens, w0, [[X]]);
// CHECK: if (B * 16 > 0)
// CHECK-NEXT: MODC_LAUNCH(modc_rows::modc_rows_1, unsigned(modk_cuda::ceilDiv(B * 16, modk_cuda::detail::kRowWarps)), modk_cuda::detail::kThreads, 0, s, [[SEG]] + B, [[X]], w1,
// RoPE of the queries: the generated epilogue over heads of 16 in the
// GEMM's tiles, with the angle table modc_cuda_init built; where the
// plan's tile cannot hold it, the product, then the same math as a kernel
// in place.
// CHECK: modk.gemm [32 x 32] epilogue=rows
// CHECK-NEXT: {
// CHECK-NEXT: modk_cuda::detail::EpiArgs epi;
// CHECK-NEXT: epi.pos = [[POS:buf[0-9]+]];
// CHECK-NEXT: epi.ropeTable = modk_cuda::detail::ropeTableFor<16>(static_cast<float>(10000), 16, s);
// CHECK-NEXT: epi.ropePositions = 16;
// CHECK-NEXT: epi.operands[1] = (void *)([[Q:buf[0-9]+]]);
// CHECK-NEXT: const bool fused = modk_cuda::linear_rows_epilogue<32, 32, [[ROPE:[0-9]+]], 0, [[PLAN]]>(
// CHECK-NEXT: if (!fused) {
// CHECK-NEXT: modk_cuda::linear<32, 32, 0, [[PLAN]]>({{.*}}, [[Q]], s);
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_{{[0-9]+}}, {{.*}}, [[POS]], [[Q]], [[Q]], modk_cuda::detail::ropeTableFor<16>(static_cast<float>(10000), 16, s));
// CHECK: modk_cuda::causal_attention<2, 16, 0, 1>(
// The O-projection accumulates into the stream: the fused residual add,
// a functor generated from the GEMM's `rows` epilogue (modk-generalize,
// EPI below), whose buffers (the stream, read and written) travel in
// EpiArgs.
// CHECK: modk.gemm [32 x 32] epilogue=rows
// CHECK-NEXT: {
// CHECK-NEXT: modk_cuda::detail::EpiArgs epi;
// CHECK-NEXT: epi.operands[0] = (void *)([[X]]);
// CHECK-NEXT: epi.operands[2] = (void *)([[X]]);
// CHECK-NEXT: modk_cuda::linear_rows_epilogue<32, 32, {{[0-9]+}}, 0, [[PLAN]]>({{buf[0-9]+}}, [[SEG]] + B, B * 16, w5, epi, s);
// The gate product first, then the up projection with the SwiGLU epilogue.
// CHECK: modk_cuda::linear<64, 32, 0, [[PLAN]]>({{buf[0-9]+}}, [[SEG]] + B, B * 16, w7, [[G:buf[0-9]+]], s);
// CHECK: epi.operands[0] = (void *)([[G]]);
// CHECK: modk_cuda::linear_rows_epilogue<64, 32, {{[0-9]+}}, 0, [[PLAN]]>({{buf[0-9]+}}, [[SEG]] + B, B * 16, w8, epi, s);
// The generated router over every token, a warp a row; then the selection.
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_[[ROUTER]], unsigned(modk_cuda::ceilDiv(B * 16, modk_cuda::detail::kRowWarps)), modk_cuda::detail::kThreads, 0, s, {{buf[0-9]+}} + B, [[X]], w{{[0-9]+}}, [[R:buf[0-9]+]]);
// CHECK: modk.route_select layer 1 k=4
// CHECK-NEXT: if (causal) {
// CHECK-NEXT: modk_cuda::select_causal<16>(
// CHECK-NEXT: } else {
// CHECK-NEXT: modk_cuda::select_topk<16, 4>([[R]], B,
// CHECK-NEXT: }
// CHECK: modc_glue::decisions(args->causal_decisions
// The gather + RMSNorm: a warp per selected row, at most B * 16.
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_{{[0-9]+}}, unsigned(modk_cuda::ceilDiv(B * 16, modk_cuda::detail::kRowWarps)), modk_cuda::detail::kThreads, 0, s, [[RSEG:buf[0-9]+]] + B, [[RSEG]], B, [[POS:buf[0-9]+]], [[X]], w{{[0-9]+}},
// The routed block's last GEMM, then the gated scatter into the stream.
// CHECK: modk.gemm [32 x 64] epilogue=none
// CHECK-NEXT: modk_cuda::linear<32, 64, 0, [[PLAN]]>({{buf[0-9]+}}, [[RSEG]] + B, B * 16, w{{[0-9]+}}, [[M:buf[0-9]+]], s);
// CHECK: MODC_LAUNCH(modc_rows::modc_rows_{{[0-9]+}}, {{.*}}, s, [[RSEG]] + B, [[RSEG]], B, [[POS]], {{buf[0-9]+}}, [[M]], [[R]], [[X]], [[X]]);
// CHECK: if (profile) modcProfile(
// CHECK: launching the kernels
// CHECK: static size_t modc_forward_scratch_bytes(int64_t B)
// The AdamW step: its scalars written to the device by a kernel (in
// modk.optimizer's order), then the norm and the update.
// CHECK: const bool kBf16Copy[] = {false, false,
// CHECK: return modk_cuda::adamw_tensors(tensors, s);
// CHECK: modc_glue::AdamScalars values = {{[{][{]}}1.0f - args->lr * args->weight_decay, args->beta1, args->beta2, args->eps, step_size, inv_sqrt_bc2{{[}][}]}};
// CHECK-NEXT: MODC_LAUNCH(modc_glue::set_adam_scalars_kernel, 1, 32, 0, s, modcAdamScalars,
// CHECK: if (!scalarsWritten)
// CHECK: modk_cuda::adamw_norm(
// CHECK-NEXT: modc_rows::modc_optimizer_norm, tensors, kParams, chunks,
// CHECK: MODC_LAUNCH(modc_rows::modc_optimizer_update,
// CHECK-NEXT: unsigned(std::min<int64_t>(chunks, modk_cuda::detail::kMaxGrid)),
// CHECK-NEXT: modk_cuda::detail::kThreads, 0, s, tensors, kParams, chunks, ctl,
// CHECK-NEXT: modcAdamScalars);
// CHECK: modc_adamw(const modc_adamw_args *args) {
// CHECK-NEXT: return modc_adam::modcAdamwStep(args, /*scalarsWritten=*/false, /*gateLosses=*/nullptr);
// The training step: one CUDA graph, replayed while its arguments repeat;
// the scalars are written outside it before each replay.
// CHECK: modc_train_step(const modc_train_step_args *args) {
// CHECK: modc_adam::modcAdamwScalars(a, s);
// CHECK-NEXT: cudaError_t e = cudaGraphLaunch(graph.exec, s);
// CHECK: cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)
// CHECK: int32_t status = modc_grad(g);
// CHECK: status = modc_adam::modcAdamwStep(a, /*scalarsWritten=*/true, g->losses);
// CHECK: cudaStreamEndCapture(s, &captured);

// SM80: // Target: CUDA sm_80.
// SM80: "arch": "sm_80"
// SM80: constexpr int kArchMajor = 8, kArchMinor = 0;
// SM80-NEXT: constexpr bool kArchExact = false;

// BADARCH: unsupported CUDA architecture 'sm_70'; expected sm_90a or sm_80
// A row kernel with a column sum (the final RMSNorm's gradient, dw): a
// block of threads over the columns runs 32 rows, its sums block-wide; each
// thread keeps its columns of the weight and of the row in registers (the
// row read once for its sums and its elements) and its columns' partial
// sums, written as the block's partial row; reduceColumns adds the partial rows into dw in block order. The
// entry's scratch holds the partials.
// COLSUM: __global__ __launch_bounds__(modk_cuda::train_detail::colThreads<32>()) void modc_rows_[[NG:[0-9]+]](const int64_t *rows, const float *in0, const float *in1, const float *in2, float *out0, float *out1, float *partial) {
// COLSUM: const int64_t i0 = int64_t(blockIdx.x) * modk_cuda::train_detail::kRB;
// COLSUM: float col0[CT] = {};
// COLSUM: float v1[CT];
// COLSUM: v1[j] = c < 32 ? static_cast<float>(in1[c]) : 0.0f;
// COLSUM: for (int64_t i = i0; i < i1; ++i) {
// COLSUM-NEXT: float r0[CT];
// COLSUM-NEXT: float r2[CT];
// COLSUM: r0[j] = c < 32 ? static_cast<float>(in0[i * 32 + c]) : 0.0f;
// COLSUM: const float x0 = r0[j];
// COLSUM: sum0 = modk_cuda::blockSum(sum0, scratch);
// COLSUM-NEXT: sum1 = modk_cuda::blockSum(sum1, scratch);
// COLSUM: const int c = threadIdx.x + j * T;
// COLSUM: out0[i * 32 + c] = {{t[0-9]+}};
// COLSUM-NEXT: col0[j] += {{t[0-9]+}};
// COLSUM: partial[int64_t(blockIdx.x) * 32 + 0 + c] = col0[j];
// COLSUM: modc_grad(const modc_grad_args *args
// COLSUM: MODC_LAUNCH(modc_rows::modc_rows_[[NG]], unsigned(modk_cuda::ceilDiv(B * 16, modk_cuda::train_detail::kRB)), modk_cuda::train_detail::colThreads<32>(), 0, s, [[SEG:buf[0-9]+]] + B, {{buf[0-9]+}}, w[[FN:[0-9]+]], {{buf[0-9]+}}, {{buf[0-9]+}}, g[[FN]], (float *)scratch);
// COLSUM-NEXT: modk_cuda::train_detail::launchReduceColumns((const float *)scratch, 32, [[SEG]] + B, 0, modk_cuda::train_detail::ColOut{g[[FN]], g[[FN]], g[[FN]], 32, 0}, s);
// COLSUM: sizeof(float) * modk_cuda::row_reduce_scratch_floats(B * 16, 32)

// The predictor's gradient kernel: a block's partial row holds its two
// column sums (8 floats each), then its row total db2, which thread 0
// keeps; reduceColumns sends 8 columns to db1, 8 to dfc2, the last to db2.
// The products stay f32 (BF16 flag 0).
// PREDICTOR: float tot0 = 0.0f; // thread 0's
// PREDICTOR: const float x3 = static_cast<float>(in3[i]);
// PREDICTOR: if (threadIdx.x == 0)
// PREDICTOR-NEXT: tot0 += x3;
// PREDICTOR: partial[int64_t(blockIdx.x) * 17 + 0 + c] = col0[j];
// PREDICTOR: partial[int64_t(blockIdx.x) * 17 + 8 + c] = col1[j];
// PREDICTOR: if (threadIdx.x == 0)
// PREDICTOR-NEXT: partial[int64_t(blockIdx.x) * 17 + 16] = tot0;
// PREDICTOR: modc_forward(const modc_forward_args *args
// PREDICTOR: if (causal || args->causal_decisions) { // causal_only
// PREDICTOR-NEXT: // modk.gemm [8 x 32] epilogue=none
// PREDICTOR-NEXT: modk_cuda::linear<8, 32, 0, gemm_plan_{{[0-9]+}}>(
// PREDICTOR: modc_grad(const modc_grad_args *args
// Its loss, generated: two row totals, losses[2] and losses[0].
// PREDICTOR: launchReduceColumns((const float *)scratch, 2, {{buf[0-9]+}} + B, 0, modk_cuda::train_detail::ColOut{(args->losses + 2), (args->losses + 0), (args->losses + 0), 1, 1}, s);
// PREDICTOR: modk_cuda::linear<8, 32, 0, gemm_plan_{{[0-9]+}}>({{buf[0-9]+}}, {{buf[0-9]+}} + B, B * 16, w[[FC1:[0-9]+]], [[HG:buf[0-9]+]], s);
// PREDICTOR: launchReduceColumns((const float *)scratch, 17, {{buf[0-9]+}} + B, 0, modk_cuda::train_detail::ColOut{g{{[0-9]+}}, g{{[0-9]+}}, g{{[0-9]+}}, 8, 8}, s);
// PREDICTOR: modk_cuda::linear_wgrad<8, 32, 0, gemm_plan_{{[0-9]+}}>([[HG]],

// The cross-entropy's kernel: a block per 32 rows, the row's maximum and
// sums over the block, the loss in thread 0's totals.
// LOSSES: void modc_rows_{{[0-9]+}}(const int64_t *rows, const float *in0, const int32_t *in1, float *out0, float *out1, float *out2, float *partial) {
// LOSSES: float max0 = modk_cuda::negInf();
// LOSSES: max0 = fmaxf(max0, x0);
// LOSSES: max0 = modk_cuda::blockMax(max0, scratch);
// LOSSES: sum0 = modk_cuda::blockSum(sum0, scratch);
// LOSSES-NEXT: sum1 = modk_cuda::blockSum(sum1, scratch);
// LOSSES: static_cast<float>(n);
// LOSSES: logf(sum0);
// LOSSES: if (threadIdx.x == 0)
// LOSSES-NEXT: tot0 +=
// LOSSES: partial[int64_t(blockIdx.x) * 2 + 1] = tot1;
// LOSSES: modc_grad(const modc_grad_args *args
// LOSSES: cudaMemsetAsync(args->losses, 0, sizeof(*args->losses) * 3, s);
// LOSSES: launchReduceColumns((const float *)scratch, 2, {{buf[0-9]+}} + B, 0, modk_cuda::train_detail::ColOut{(args->losses + 1), (args->losses + 0), (args->losses + 0), 1, 1}, s);

// A row wider than a block keeps in registers (a 5000-class
// cross-entropy): no column slots, the row read from memory in a plain
// strided loop in each pass; a kernel of values a row only (the
// causal-router loss) declares no thread count, slots or scratch.
// WIDE: a row of 5000.
// WIDE-NEXT: modc_rows_94(
// WIDE-NEXT: constexpr int T = modk_cuda::train_detail::colThreads<5000>();
// WIDE-NEXT: __shared__ float scratch[32];
// WIDE-NEXT: const int64_t n = *rows;
// WIDE: for (int c = threadIdx.x; c < 5000; c += T) {
// WIDE-NEXT: const float x0 = static_cast<float>(in0[i * 5000 + c]);
// WIDE: void modc_rows_97(
// WIDE-NEXT: const int64_t n = *rows;

// NAMED: error: 'modk.embed' op is generated from its math: run modk-generalize before emitting
// UNPLANNED: has no memory plan; run modk-plan-memory first
// UNCONFIGURED: error: a CUDA product needs its kernels chosen: run modk-configure-gemms first
// WRONGARCH: error: the kernels chosen for this product need sm_90a (wgmma), not sm_80: run modk-configure-gemms{arch=sm_80}

// The routed block's gated scatter as its down projection's `rows`
// epilogue (modk-fuse-row-epilogues): a functor generated from the
// epilogue's region, which the GEMM's tiles call for each element of the
// product in registers (acc); its buffers travel in the GEMM's EpiArgs.
// RoPE's, the residual add's and SwiGLU's functors come first.
// FUSED: template <> struct RowsEpilogue<{{[0-9]+}}> {
// FUSED-NEXT: static constexpr int kHeadDim = 16;
// FUSED: template <> struct RowsEpilogue<{{[0-9]+}}> {
// FUSED-NEXT: static constexpr int kHeadDim = 0;
// FUSED-NEXT: static_assert(3 <= kEpiOperands
// FUSED: template <> struct RowsEpilogue<{{[0-9]+}}> {
// FUSED-NEXT: static constexpr int kHeadDim = 0;
// FUSED-NEXT: static_assert(3 <= kEpiOperands
// FUSED: template <> struct RowsEpilogue<[[EPI:[0-9]+]]> {
// FUSED-NEXT: static constexpr int kHeadDim = 0;
// FUSED-NEXT: static_assert(5 <= kEpiOperands, "EpiArgs holds the buffers");
// FUSED-NEXT: static __device__ __forceinline__ void store(float acc, const EpiArgs epi,
// FUSED: const int64_t seq = modk_cuda::segmentOf(seg, nseg, i);
// FUSED-NEXT: const int64_t tok = pos[i];
// FUSED: const float t0 = __fadd_rn(x0, acc);
// FUSED: out0[(seq * 16 + tok) * 32 + c] =
// (The dense blocks' down projections before it: the residual add's.)
// FUSED: epi.seg = [[SEG:buf[0-9]+]];
// FUSED-NEXT: epi.nseg = B;
// FUSED-NEXT: epi.pos = {{buf[0-9]+}};
// FUSED: modk_cuda::linear_rows_epilogue<32, 64, [[EPI]], 0, gemm_plan_{{[0-9]+}}>({{buf[0-9]+}}, [[SEG]] + B, B * 16, {{w[0-9]+}}, epi, s);
// FUSED-NEXT: }

// The gather + RMSNorm fused into the selection (modk-fuse-select-gather):
// a device functor for one row, every lane of a warp, its sequence given
// (no search of the segments). The top-k kernel's warps call it for the
// rows of the sequence its block has just selected; after a causal
// selection gather_sequences does, a block a sequence.
// SELGATHER: struct modc_gather_[[GF:[0-9]+]] {
// SELGATHER-NEXT: const int32_t *pos;
// SELGATHER: __device__ __forceinline__ void operator()(int64_t i, int64_t seq, int lane) const {
// SELGATHER-NEXT: const int64_t tok = pos[i];
// SELGATHER-NOT: segmentOf
// SELGATHER: sum0 = modk_cuda::warpSum(sum0);
// SELGATHER: // modk.route_select layer 1 k=4 + gather
// SELGATHER-NEXT: if (causal) {
// SELGATHER-NEXT: modk_cuda::select_causal<16>({{buf[0-9]+}}, B, [[POS:buf[0-9]+]], [[SEG:buf[0-9]+]], routed1, s);
// SELGATHER-NEXT: modk_cuda::gather_sequences<1>(B, [[SEG]], modc_rows::modc_gather_[[GF]]{[[POS]], [[X:buf[0-9]+]], w{{[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}}, s);
// SELGATHER-NEXT: } else {
// SELGATHER-NEXT: modk_cuda::select_topk<16, 4, 1>({{buf[0-9]+}}, B, [[POS]], [[SEG]], routed1, modc_rows::modc_gather_[[GF]]{[[POS]], [[X]], w{{[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}}, s);
// SELGATHER-NEXT: }
// SELGATHER-NOT: MODC_LAUNCH(modc_rows::modc_rows_{{[0-9]+}}, {{.*}}, [[SEG]] + B, [[SEG]], B, [[POS]], [[X]]
// SELGATHER: modk.gemm [32 x 32] epilogue=rows
// The selection's gather_blocks (modk-configure-gemms) is the kernels'
// blocks a sequence.
// SPLITGATHER: // modk.route_select layer 1 k=4 + gather
// SPLITGATHER: modk_cuda::gather_sequences<2>(B,
// SPLITGATHER: modk_cuda::select_topk<16, 4, 2>({{buf[0-9]+}}, B,

// The epilogues modk-fuse-epilogues named, generated: RoPE (functor 0, a
// pair of a head's columns at a time: x cos + rotate_half(x) sin, with
// rotate_half of the first half's element the second's, negated), the
// residual add (functor 1) and SwiGLU (functor 2, reading the gate
// product's rows).
// GENERATED: template <> struct RowsEpilogue<0> {
// GENERATED-NEXT: static constexpr int kHeadDim = 16;
// GENERATED: static __device__ __forceinline__ void storePair(float acc0, float acc1,
// GENERATED-NEXT: const EpiArgs epi, int64_t i, int64_t c) {
// GENERATED-NEXT: float *out0 = static_cast<float *>(epi.operands[1]);
// GENERATED-NEXT: const float2 cs = ropeAngleAt<16>(epi, epi.pos[i], int(c % 16));
// GENERATED-NEXT: const float rope_cos = cs.x, rope_sin = cs.y;
// GENERATED-NEXT: const float x0a = acc0, x0b = acc1;
// GENERATED-NEXT: const float [[NB:t[0-9]+]] = (-x0b);
// GENERATED-NEXT: const float [[A1:t[0-9]+]] = __fmul_rn([[NB]], rope_sin);
// GENERATED-NEXT: const float [[A2:t[0-9]+]] = __fmul_rn(x0a, rope_cos);
// GENERATED-NEXT: const float [[Y0:t[0-9]+]] = __fadd_rn([[A2]], [[A1]]);
// GENERATED-NEXT: const float [[CA:t[0-9]+]] = x0a;
// GENERATED-NEXT: const float [[B1:t[0-9]+]] = __fmul_rn([[CA]], rope_sin);
// GENERATED-NEXT: const float [[B2:t[0-9]+]] = __fmul_rn(x0b, rope_cos);
// GENERATED-NEXT: const float [[Y1:t[0-9]+]] = __fadd_rn([[B2]], [[B1]]);
// GENERATED-NEXT: out0[i * 32 + c] = [[Y0]];
// GENERATED-NEXT: out0[i * 32 + c + 8] = [[Y1]];
// GENERATED: template <> struct RowsEpilogue<1> {
// GENERATED-NEXT: static constexpr int kHeadDim = 0;
// GENERATED-NEXT: static_assert(3 <= kEpiOperands, "EpiArgs holds the buffers");
// GENERATED: const float x0 = static_cast<float>(in0[i * 32 + c]);
// GENERATED-NEXT: const float t0 = __fadd_rn(x0, acc);
// GENERATED-NEXT: out0[i * 32 + c] = t0;
// GENERATED: template <> struct RowsEpilogue<2> {
// GENERATED: const float x0 = static_cast<float>(in0[i * 64 + c]);
// GENERATED-NEXT: const float t0 = -x0;
// GENERATED-NEXT: const float t1 = expf(t0);
// GENERATED-NEXT: const float t2 = __fadd_rn(t1, 1.00000000f);
// GENERATED-NEXT: const float t3 = x0 / t2;
// GENERATED-NEXT: const float t4 = __fmul_rn(t3, acc);
// GENERATED-NEXT: out0[i * 64 + c] = t4;
