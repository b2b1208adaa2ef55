// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %s | mod-translate --modk-to-cpp | FileCheck %s
// RUN: not mod-translate --modk-to-cpp %s 2>&1 | FileCheck %s --check-prefix=NAMED
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-fuse-row-epilogues))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=FUSED
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=COLSUM
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize,modk-fuse-select-gather))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=SELGATHER
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=PREDICTOR
// RUN: mod-opt --pass-pipeline='builtin.module(modk.entry(modk-generalize))' %s | not mod-translate --modk-to-cpp 2>&1 | FileCheck %s --check-prefix=NO-OPTIMIZER
// RUN: not mod-translate --modk-to-cpp %inputs/unplanned.mlir 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// RUN: not mod-translate --modk-to-cpp %inputs/two-forward-entries.mlir 2>&1 | FileCheck %s --check-prefix=TWO-FORWARD
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=LOSSES
// RUN: mod-opt --pass-pipeline='builtin.module(modk-generate-optimizer,modk.entry(modk-generalize))' %s | mod-translate --modk-to-cpp | FileCheck %s --check-prefix=EMBEDGRAD

// The planned launch plan of a 2-layer model (layer 1 routed, k = 4 of 16,
// sigmoid gate, predictor router), emitted as C++ specialised on its shapes.
// CHECK: namespace modk_cpu
// The row kernels, generated from the modk.rows regions. First the
// embedding lookup: each row's token selects the table's row (a lookup).
// CHECK-LABEL: void modc_rows_0(int64_t rows, const int32_t *in0, const float *in1, float *out0) {
// CHECK-NEXT: #pragma omp parallel for if (rows * 32 > modk_cpu::detail::kMinParallelWork)
// CHECK-NEXT: for (int64_t i = 0; i < rows; ++i) {
// CHECK-NEXT: const int64_t id0 = in0[i];
// CHECK-NEXT: const auto *rin1 = in1 + id0 * 32;
// CHECK-NEXT: auto *rout0 = out0 + i * 32;
// CHECK-NEXT: #pragma omp simd
// CHECK-NEXT: for (int64_t c = 0; c < 32; ++c) {
// CHECK-NEXT: const float x1 = static_cast<float>(rin1[c]);
// CHECK-NEXT: rout0[c] = x1;
// RMSNorm: the sum of squares in one SIMD pass, the row's scale once, then
// the elements.
// CHECK-LABEL: void modc_rows_1(int64_t rows, const float *in0, const float *in1, float *out0) {
// CHECK-NEXT: #pragma omp parallel for if (rows * 32 > modk_cpu::detail::kMinParallelWork)
// CHECK-NEXT: for (int64_t i = 0; i < rows; ++i) {
// CHECK-NEXT: const auto *rin0 = in0 + i * 32;
// CHECK-NEXT: auto *rout0 = out0 + i * 32;
// CHECK-NEXT: float sum0 = 0.0f;
// CHECK-NEXT: #pragma omp simd reduction(+ : sum0)
// CHECK-NEXT: for (int64_t c = 0; c < 32; ++c) {
// CHECK-NEXT: const float x0 = static_cast<float>(rin0[c]);
// CHECK-NEXT: const float t0 = x0 * x0;
// CHECK-NEXT: sum0 += t0;
// CHECK-NEXT: }
// CHECK-NEXT: const float t1 = sum0 / 32.0000000f;
// CHECK-NEXT: const float t2 = t1 + 9.99999975e-06f;
// CHECK-NEXT: const float t3 = std::sqrt(t2);
// CHECK-NEXT: const float t4 = 1.00000000f / t3;
// CHECK-NEXT: #pragma omp simd
// CHECK-NEXT: for (int64_t c = 0; c < 32; ++c) {
// CHECK-NEXT: const float x0 = static_cast<float>(rin0[c]);
// CHECK-NEXT: const float x1 = static_cast<float>(in1[c]);
// CHECK-NEXT: const float t5 = x0 * t4;
// CHECK-NEXT: const float t6 = t5 * x1;
// CHECK-NEXT: rout0[c] = t6;
// SwiGLU: the up projection's epilogue in the forward (over the staged
// product, in1) and training's activation, one kernel: silu through the
// vectorisable exp.
// CHECK-LABEL: void modc_rows_{{[0-9]+}}(int64_t rows, const float *in0, const float *in1, float *out0) {
// CHECK-NOT: sum0
// CHECK: const float t0 = -x0;
// CHECK-NEXT: const float t1 = modk_cpu::detail::expLanes(t0);
// CHECK-NEXT: const float t2 = t1 + 1.00000000f;
// CHECK-NEXT: const float t3 = x0 / t2;
// CHECK-NEXT: const float t4 = t3 * x1;
// CHECK-NEXT: rout0[c] = t4;
// The router: one sum a row, stored once a row.
// CHECK: void modc_rows_[[ROUTER:[0-9]+]](int64_t rows, const float *in0, const float *in1, float *out0) {
// CHECK: #pragma omp simd reduction(+ : sum0)
// CHECK-NEXT: for (int64_t c = 0; c < 32; ++c) {
// CHECK-NEXT: const float x0 = static_cast<float>(rin0[c]);
// CHECK-NEXT: const float x1 = static_cast<float>(in1[c]);
// CHECK-NEXT: const float t0 = x0 * x1;
// CHECK-NEXT: sum0 += t0;
// CHECK-NEXT: }
// CHECK-NEXT: out0[i] = sum0;
// CHECK-NEXT: }
// CHECK-NEXT: }
// The routed block's gather + RMSNorm: the stream read at each selected
// row's token (sequence seq, position tok), the copy and the norm written at
// the row.
// CHECK-LABEL: void modc_rows_{{[0-9]+}}(int64_t rows, const int64_t *seg, int64_t nseg, const int32_t *pos, const float *in0, const float *in1, float *out0, float *out1) {
// CHECK: const int64_t seq = modk_cpu::detail::segmentOf(seg, nseg, i);
// CHECK-NEXT: const int64_t tok = pos[i];
// CHECK-NEXT: const auto *rin0 = in0 + (seq * 16 + tok) * 32;
// CHECK-NEXT: auto *rout0 = out0 + i * 32;
// CHECK-NEXT: auto *rout1 = out1 + i * 32;
// CHECK: const float x0 = static_cast<float>(rin0[c]);
// CHECK-NEXT: const float t0 = x0 * x0;
// CHECK: rout0[c] = x0;
// CHECK-NEXT: rout1[c] = t6;
// The gated scatter: the sigmoid of the token's router score once a row,
// then x[token] = x[token] + g * (a + m).
// CHECK-LABEL: const float *in2, const float *in3, float *out0) {
// CHECK: const float x2 = static_cast<float>(in2[(seq * 16 + tok)]);
// CHECK-NEXT: const auto *rin0 = in0 + i * 32;
// CHECK-NEXT: const auto *rin1 = in1 + i * 32;
// CHECK-NEXT: const auto *rin3 = in3 + (seq * 16 + tok) * 32;
// CHECK-NEXT: auto *rout0 = out0 + (seq * 16 + tok) * 32;
// CHECK-NEXT: const float t0 = -x2;
// CHECK-NEXT: const float t1 = modk_cpu::detail::expLanes(t0);
// CHECK-NEXT: const float t2 = t1 + 1.00000000f;
// CHECK-NEXT: const float t3 = 1.00000000f / t2;
// CHECK-NEXT: #pragma omp simd
// CHECK: const float t4 = x0 + x1;
// CHECK-NEXT: const float t5 = t3 * t4;
// CHECK-NEXT: const float t6 = x3 + t5;
// CHECK-NEXT: rout0[c] = t6;
// Its gradient: two outputs from one pass.
// CHECK-LABEL: const float *in2, float *out0, float *out1) {
// CHECK: auto *rout0 = out0 + i * 64;
// CHECK-NEXT: auto *rout1 = out1 + i * 64;
// CHECK: rout0[c] =
// CHECK-NEXT: rout1[c] =
// The AdamW update, generated from modk.optimizer @adamw: what depends
// only on the step's scalars once, then one SIMD loop over the elements,
// every element read before p, m and v are written.
// CHECK-LABEL: void modc_optimizer_update(int64_t n, float *p, const float *g, float *m, float *v, float grad_scale, float decay, float beta1, float beta2, float eps, float step_size, float inv_sqrt_bc2) {
// CHECK-NEXT: const float [[OMB1:t[0-9]+]] = 1.00000000f - beta1;
// CHECK-NEXT: const float [[OMB2:t[0-9]+]] = 1.00000000f - beta2;
// CHECK-NEXT: #pragma omp parallel for simd if (n > modk_cpu::detail::kMinParallelWork)
// CHECK-NEXT: for (int64_t i = 0; i < n; ++i) {
// CHECK-NEXT: const float pi = p[i];
// CHECK-NEXT: const float gi = g[i];
// CHECK-NEXT: const float mi = m[i];
// CHECK-NEXT: const float vi = v[i];
// CHECK-NEXT: const float [[G:t[0-9]+]] = gi * grad_scale;
// CHECK: const float [[M:t[0-9]+]] = {{t[0-9]+}} + {{t[0-9]+}};
// CHECK: const float [[V:t[0-9]+]] = {{t[0-9]+}} + {{t[0-9]+}};
// CHECK-NEXT: const float {{t[0-9]+}} = std::sqrt([[V]]);
// CHECK: const float [[P:t[0-9]+]] = {{t[0-9]+}} - {{t[0-9]+}};
// CHECK-NEXT: p[i] = [[P]];
// CHECK-NEXT: m[i] = [[M]];
// CHECK-NEXT: v[i] = [[V]];
// The gradient norm's terms, from the optimizer's `norm` region: g * g
// in f64, summed over fixed chunks added in order.
// CHECK-LABEL: double modc_optimizer_norm(const float *g, int64_t n) {
// CHECK: modk_cpu::detail::chunkedReduce<double>(
// CHECK: #pragma omp simd reduction(+ : acc)
// CHECK-NEXT: for (int64_t i = i0; i < i1; ++i) {
// CHECK-NEXT: const float gi = g[i];
// CHECK-NEXT: const double [[GD:t[0-9]+]] = static_cast<double>(gi);
// CHECK-NEXT: const double [[SQ:t[0-9]+]] = [[GD]] * [[GD]];
// CHECK-NEXT: acc += [[SQ]];
// CHECK: modc_abi_version(void) { return 7u; }
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
// CHECK: modc_rows_0([[SEG0:buf[0-9]+]][B], args->tokens, w0, [[X]]);
// CHECK: modc_rows_1([[SEG0]][B], [[X]], w1, {{buf[0-9]+}});
// RoPE of the queries and keys: sgemm into q, then the generated kernel
// over heads of 16, in place at the rows' positions.
// CHECK: modk.gemm [32 x 32] epilogue=rows
// CHECK-NEXT: const int64_t rows =
// CHECK-NEXT: modk_cpu::linear<32, 32>({{buf[0-9]+}}, rows, w{{[0-9]+}}, [[Q:buf[0-9]+]]);
// CHECK-NEXT: modc_rows_[[ROPE:[0-9]+]]({{buf[0-9]+}}[B], {{buf[0-9]+}}, [[Q]], [[Q]]);
// CHECK: modk_cpu::causal_attention<2, 16>(
// The O-projection accumulates into the stream: the fused residual add.
// Its `rows` epilogue is y = y + product, which the CPU runs as sgemm's
// beta = 1: no staging.
// CHECK: modk.gemm [32 x 32] epilogue=rows
// CHECK-NEXT: const int64_t rows =
// CHECK-NEXT: modk_cpu::linear_residual<32, 32>({{buf[0-9]+}}, rows, w5, [[X]]);
// SwiGLU: the gate product, then the up projection staged and finished by
// the row kernel generated from its epilogue.
// CHECK: modk_cpu::linear<64, 32>({{buf[0-9]+}}, rows, w7, [[G:buf[0-9]+]]);
// CHECK: modk.gemm [64 x 32] epilogue=rows
// CHECK-NEXT: const int64_t rows =
// CHECK-NEXT: float *product = modk_cpu::staged_rows<64>(rows);
// CHECK-NEXT: modk_cpu::linear<64, 32>({{buf[0-9]+}}, rows, w8, product);
// CHECK-NEXT: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], [[G]], product, {{buf[0-9]+}});
// The predictor, generated, under one guard: only where causal decisions
// are read. fc1's product (f32), then a row kernel with one sum a row.
// CHECK: if (causal || args->causal_decisions) { // causal_only
// CHECK-NEXT: { // modk.gemm [8 x 32] epilogue=none
// CHECK-NEXT: const int64_t rows =
// CHECK-NEXT: modk_cpu::linear<8, 32>([[X]], rows, w{{[0-9]+}}, [[H:buf[0-9]+]]);
// CHECK-NEXT: }
// CHECK-NEXT: if (profile)
// CHECK-NEXT: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], [[H]], w{{[0-9]+}}, w{{[0-9]+}}, w{{[0-9]+}}, [[P:buf[0-9]+]]);
// CHECK-NEXT: if (profile)
// CHECK-NEXT: }
// The router, generated: r = w . x over every token (the identity row set
// of the embedding), then the hand-written selection from r.
// CHECK: modc_rows_[[ROUTER]]([[ALL:buf[0-9]+]][B], [[X]], w{{[0-9]+}}, [[R:buf[0-9]+]]);
// CHECK: modk.route_select layer 1 k=4
// CHECK-NEXT: if (causal) {
// CHECK-NEXT: modk_cpu::select_causal<16>(
// CHECK-NEXT: } else {
// CHECK-NEXT: modk_cpu::select_topk<16, 4>([[R]], B, [[POS:buf[0-9]+]], [[SEG:buf[0-9]+]], routed1);
// CHECK-NEXT: }
// On request, the causal decision (predictor p > 0) of every token.
// CHECK-NEXT: if (args->causal_decisions)
// CHECK-NEXT: for (int64_t i = 0; i < B * 16; ++i)
// CHECK-NEXT: args->causal_decisions[(int64_t)0 * B * 16 + i] = [[P]][i] > 0.0f;
// The gather + RMSNorm of the selected rows (the generated kernel above).
// CHECK: modc_rows_[[GATHER:[0-9]+]]([[SEG]][B], [[SEG]], B, [[POS]], [[X]], w{{[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}});
// Gathered GEMMs run on the rows the selection made.
// CHECK: const int64_t rows = [[SEG]][B];
// The routed block's attention residual, in place on its gathered rows, and
// its MLP norm: the dense layers' kernel again (modc_rows_1).
// CHECK: modc_rows_{{[0-9]+}}([[SEG]][B], [[G:buf[0-9]+]], {{buf[0-9]+}}, [[G]]);
// CHECK-NEXT: if (profile)
// CHECK-NEXT: modc_rows_1([[SEG]][B], [[G]], w{{[0-9]+}}, {{buf[0-9]+}});
// The down projection into its scratch rows, then the generated gated
// scatter into the stream at the selected positions.
// CHECK: modk.gemm [32 x 64] epilogue=none
// CHECK-NEXT: const int64_t rows = [[SEG]][B];
// CHECK-NEXT: modk_cpu::linear<32, 64>({{buf[0-9]+}}, rows, w{{[0-9]+}}, [[M:buf[0-9]+]]);
// CHECK: modc_rows_{{[0-9]+}}([[SEG]][B], [[SEG]], B, [[POS]], {{buf[0-9]+}}, [[M]], [[R]], [[X]], [[X]]);
// CHECK: return 0;
// The training entry: losses, then gradients in reverse order.
// CHECK: modc_grad_workspace_bytes(int64_t batch)
// CHECK: modc_grad(const modc_grad_args *args)
// CHECK: float *g0 = args->grads[0]; // embed.weight
// The mean cross-entropy, generated: the losses zeroed, then one row
// kernel over every token that adds the mean loss into losses[1] (ce) and
// losses[0] (total), two row totals, and writes dlogits.
// CHECK: std::memset(args->losses, 0, sizeof(*args->losses) * 3);
// CHECK-NEXT: if (profile)
// CHECK-NEXT: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], {{buf[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}, (args->losses + 1), (args->losses + 0));
// The gated scatter's gradient, generated (sigmoid gate): df[row] =
// g(r) dy[token] and dr[token] += g'(r) <dy[token], f[row]>, dr read and
// written at the token.
// CHECK: modc_rows_{{[0-9]+}}([[SSEG:buf[0-9]+]][B], [[SSEG]], B, {{buf[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}, [[DR:buf[0-9]+]], {{buf[0-9]+}}, [[DR]]);
// CHECK: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], {{buf[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}});
// CHECK: modk_cpu::causal_attention_grad<2, 16>(
// RoPE's transpose, generated over heads of 16 columns, in place at the
// rows' positions.
// CHECK: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], {{buf[0-9]+}}, [[DY:buf[0-9]+]], [[DY]]);
// The gather's gradient, generated: dx[token] += dxs[row], in place at
// each selected row's token.
// CHECK: modc_rows_[[GG:[0-9]+]]([[GSEG:buf[0-9]+]][B], [[GSEG]], B, [[GPOS:buf[0-9]+]], {{buf[0-9]+}}, [[GDX:buf[0-9]+]], [[GDX]]);
// The router's gradient, generated over every token: dx += dr w, and the
// router weight's gradient dw += dr x, a column sum.
// CHECK: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], {{buf[0-9]+}}, w[[RW:[0-9]+]], {{buf[0-9]+}}, [[RDX:buf[0-9]+]], [[RDX]], g[[RW]]);
// The predictor learns the top-k membership; its input gets no gradient.
// Its loss, generated: dp += its gradient in place, and the loss into
// losses[2] (aux) and, weighted, losses[0] (total).
// CHECK: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], {{buf[0-9]+}}, {{buf[0-9]+}}, [[DP:buf[0-9]+]], [[DP]], (args->losses + 2), (args->losses + 0));
// Its gradient, generated: fc1's product again, a row kernel (dz in place
// of h, two column sums and a row total), then dfc1 += dz^T x.
// CHECK: modk_cpu::linear<8, 32>([[PX:buf[0-9]+]], rows, w[[FC1:[0-9]+]], [[HG:buf[0-9]+]]);
// CHECK: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], [[HG]], w{{[0-9]+}}, w{{[0-9]+}}, [[DP]], [[HG]], g{{[0-9]+}}, g{{[0-9]+}}, g{{[0-9]+}});
// CHECK-NEXT: if (profile)
// CHECK-NEXT: modk_cpu::linear_wgrad<8, 32>([[HG]], {{buf[0-9]+}}[B], [[PX]], g[[FC1]], true);
// The embedding's gradient: the generated scatter-add (its kernel: EMBEDGRAD).
// CHECK: modc_rows_{{[0-9]+}}({{buf[0-9]+}}[B], {{buf[0-9]+}}, {{buf[0-9]+}}, g0);
// CHECK-NOT: embed_grad
// CHECK: return 0;
// The embedding's gradient, a scatter-add: each thread owns a block of 16
// columns and visits every row in order, adding it at its token's row.
// EMBEDGRAD:      /// modk.rows: 2 input(s), a scatter-add into the rows of a table at the rows' ids, 32 wide.
// EMBEDGRAD-NEXT: void modc_rows_[[EG:[0-9]+]](int64_t rows, const float *in0, const int32_t *in1, float *out0) {
// EMBEDGRAD-NEXT: #pragma omp parallel for schedule(static)
// EMBEDGRAD-NEXT: for (int64_t c0 = 0; c0 < 32; c0 += 16) {
// EMBEDGRAD-NEXT: const int64_t c1 = c0 + 16 < 32 ? c0 + 16 : 32;
// EMBEDGRAD-NEXT: for (int64_t i = 0; i < rows; ++i) {
// EMBEDGRAD-NEXT: const int64_t id1 = in1[i];
// EMBEDGRAD-NEXT: const auto *rin0 = in0 + i * 32;
// EMBEDGRAD-NEXT: auto *rout0 = out0 + id1 * 32;
// EMBEDGRAD-NEXT: #pragma omp simd
// EMBEDGRAD-NEXT: for (int64_t c = c0; c < c1; ++c) {
// EMBEDGRAD-NEXT: const float x0 = static_cast<float>(rin0[c]);
// EMBEDGRAD-NEXT: rout0[c] += x0;
// EMBEDGRAD:      modc_rows_[[EG]]({{buf[0-9]+}}[B], {{buf[0-9]+}}, {{buf[0-9]+}}, g0);
// The cross-entropy's kernel: the row's maximum (a max reduction), then
// the sums of e^(z - m) and of the target's logit (the element whose column
// is the row's class), then the row's loss / rows into both totals.
// LOSSES: void modc_rows_{{[0-9]+}}(int64_t rows, const float *in0, const int32_t *in1, float *out0, float *out1, float *out2) {
// LOSSES: const float x1 = static_cast<float>(in1[i]);
// LOSSES-NEXT: const auto *rin0 = in0 + i * 64;
// LOSSES-NEXT: auto *rout0 = out0 + i * 64;
// LOSSES-NEXT: float max0 = -std::numeric_limits<float>::infinity();
// LOSSES-NEXT: #pragma omp simd reduction(max : max0)
// LOSSES: max0 = max0 > x0 ? max0 : x0;
// LOSSES: #pragma omp simd reduction(+ : sum0, sum1)
// LOSSES: const float [[COL:t[0-9]+]] = static_cast<float>(c);
// LOSSES-NEXT: const bool [[HIT:t[0-9]+]] = [[COL]] == x1;
// LOSSES-NEXT: const float {{t[0-9]+}} = [[HIT]] ? x0 : 0.00000000f;
// LOSSES: const float [[N:t[0-9]+]] = static_cast<float>(rows);
// LOSSES: std::log(sum0);
// LOSSES: part[0] += [[LOSS:t[0-9]+]];
// LOSSES-NEXT: part[1] += [[LOSS]];
// LOSSES: out1[0] += sums[0];
// LOSSES-NEXT: out2[0] += sums[1];
// The causal-router loss's kernel: one value a token, the sigmoid from
// e^-|z| only.
// LOSSES: void modc_rows_{{[0-9]+}}(int64_t rows, const float *in0, const int32_t *in1, const float *in2, float *out0, float *out1, float *out2) {
// LOSSES: std::fabs(x0);
// LOSSES: std::log1p(
// LOSSES: std::fmax(x0, 0.00000000f);
// LOSSES: const bool {{t[0-9]+}} = x0 >= 0.00000000f;
// LOSSES: part[0] +=
// LOSSES-NEXT: part[1] +=
// AdamW over every parameter; norms and biases are not decayed.
// CHECK: modc_adamw(const modc_adamw_args *args)
// CHECK: static const bool kDecay[] = {true, false, true,
// CHECK: squares += modc_optimizer_norm(args->grads[i], kSizes[i]);
// The step's scalars on the host, then the generated update of each
// parameter.
// CHECK: const float step_size = static_cast<float>(args->lr / bc1);
// CHECK: modc_optimizer_update(kSizes[i], args->params[i], args->grads[i],
// CHECK-NEXT: args->m[i], args->v[i], scale, 1.0f - args->lr * (kDecay[i] ? args->weight_decay : 0.0f), args->beta1, args->beta2, args->eps, step_size, inv_sqrt_bc2);

// RMSNorm's gradient (the final norm's, dx overwritten): two sums a row,
// dx at each element, and the weight's gradient a column sum, added in
// row chunks in a fixed order (chunkedReduce) straight into dw.
// COLSUM: void modc_rows_[[NG:[0-9]+]](int64_t rows, const float *in0, const float *in1, const float *in2, float *out0, float *out1) {
// COLSUM-NEXT: float *sums = out1;
// COLSUM-NEXT: modk_cpu::detail::chunkedReduce<float>(
// COLSUM-NEXT: rows, 32, sums, rows * 32 > modk_cpu::detail::kMinParallelWork,
// COLSUM-NEXT: [&](int64_t i0, int64_t i1, float *part) {
// COLSUM-NEXT: for (int64_t i = i0; i < i1; ++i) {
// COLSUM-NEXT: const auto *rin0 = in0 + i * 32;
// COLSUM-NEXT: const auto *rin2 = in2 + i * 32;
// COLSUM-NEXT: auto *rout0 = out0 + i * 32;
// COLSUM-NEXT: float sum0 = 0.0f;
// COLSUM-NEXT: float sum1 = 0.0f;
// COLSUM-NEXT: #pragma omp simd reduction(+ : sum0, sum1)
// COLSUM: #pragma omp simd
// COLSUM: rout0[c] = [[DX:t[0-9]+]];
// COLSUM-NEXT: part[0 + c] += [[DW:t[0-9]+]];
// COLSUM-NEXT: }
// COLSUM-NEXT: }
// COLSUM-NEXT: });
// COLSUM-NEXT: }
// COLSUM: modc_grad(const modc_grad_args *args)
// COLSUM: modc_rows_[[NG]]({{buf[0-9]+}}[B], {{buf[0-9]+}}, w[[FN:[0-9]+]], {{buf[0-9]+}}, {{buf[0-9]+}}, g[[FN]]);

// The predictor's kernels. Forward: b2 is a scalar, loaded once a row,
// and p = sum + b2 is stored once a row.
// PREDICTOR: void modc_rows_{{[0-9]+}}(int64_t rows, const float *in0, const float *in1, const float *in2, const float *in3, float *out0) {
// PREDICTOR: const float x3 = static_cast<float>(in3[0]);
// PREDICTOR-NEXT: const auto *rin0 = in0 + i * 8;
// PREDICTOR-NEXT: float sum0 = 0.0f;
// PREDICTOR: const float x2 = static_cast<float>(in2[c]);
// PREDICTOR: sum0 += {{t[0-9]+}};
// PREDICTOR-NEXT: }
// PREDICTOR-NEXT: const float [[PV:t[0-9]+]] = sum0 + x3;
// PREDICTOR-NEXT: out0[i] = [[PV]];
// Gradient: the column sums db1 and dfc2 (8 floats each), then the row
// total db2 (one float), added to their outputs in chunk order.
// PREDICTOR: std::vector<float> sumBuffer(17, 0.0f);
// PREDICTOR: rows, 17, sums,
// PREDICTOR: const float x3 = static_cast<float>(in3[i]);
// PREDICTOR-NEXT: const auto *rin0 = in0 + i * 8;
// PREDICTOR-NEXT: auto *rout0 = out0 + i * 8;
// PREDICTOR-NEXT: part[16] += x3;
// PREDICTOR: rout0[c] = [[DZ:t[0-9]+]];
// PREDICTOR-NEXT: part[0 + c] += [[DZ]];
// PREDICTOR-NEXT: part[8 + c] += {{t[0-9]+}};
// PREDICTOR: out1[c] += sums[0 + c];
// PREDICTOR: out2[c] += sums[8 + c];
// PREDICTOR-NEXT: out3[0] += sums[16];

// NAMED: error: 'modk.embed' op is generated from its math: run modk-generalize before emitting
// NO-OPTIMIZER: error: 'modk.entry' op is a training entry without a modk.optimizer for modc_adamw (run modk-generate-optimizer)
// The gather + RMSNorm fused into the selection (modk-fuse-select-gather):
// a functor over a sequence's rows, its sequence given (no search of the
// segments), which select_topk calls for each sequence right after
// selecting it; after a causal selection gather_sequences calls it.
// SELGATHER: struct modc_gather_[[GF:[0-9]+]] {
// SELGATHER-NEXT: const int32_t *pos;
// SELGATHER: void operator()(int64_t seq, int64_t i0, int64_t i1) const {
// SELGATHER-NEXT: for (int64_t i = i0; i < i1; ++i) {
// SELGATHER-NEXT: const int64_t tok = pos[i];
// SELGATHER-NOT: segmentOf
// SELGATHER: const auto *rin0 = in0 + (seq * 16 + tok) * 32;
// SELGATHER: x0 = static_cast<float>(rin0[c]);
// SELGATHER: { // modk.route_select layer 1 k=4 + gather
// SELGATHER-NEXT: if (causal) {
// SELGATHER-NEXT: modk_cpu::select_causal<16>({{buf[0-9]+}}, B, [[POS:buf[0-9]+]], [[SEG:buf[0-9]+]], routed1);
// SELGATHER-NEXT: modk_cpu::gather_sequences(B, [[SEG]], modc_gather_[[GF]]{[[POS]], [[X:buf[0-9]+]], w{{[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}});
// SELGATHER-NEXT: } else {
// SELGATHER-NEXT: modk_cpu::select_topk<16, 4>({{buf[0-9]+}}, B, [[POS]], [[SEG]], routed1, modc_gather_[[GF]]{[[POS]], [[X]], w{{[0-9]+}}, {{buf[0-9]+}}, {{buf[0-9]+}}});
// SELGATHER-NEXT: }
// No gather kernel of its own is left between the selection and the
// gathered rows' first GEMM.
// SELGATHER-NOT: modc_rows_{{[0-9]+}}([[SEG]][B], [[SEG]], B, [[POS]], [[X]]
// SELGATHER: modk.gemm [32 x 32] epilogue=rows
// UNPLANNED: error: 'modk.entry' op has no memory plan; run modk-plan-memory first
// TWO-FORWARD: two-forward-entries.mlir:5:1: error: 'modk.entry' op is a second forward entry; a package has one of each kind

module {
  modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "small", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, mod = <capacity = 2.500000e-01 : f64, schedule = every_other, gate = sigmoid, causal_router = predictor, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8>>, modes = [#modk.mode<topk>, #modk.mode<causal>], params = [#modk.param<name = "embed.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.0.attn.wq.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn.wk.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn.wv.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn.wo.weight", shape = [32, 32], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.mlp_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.0.mlp.w_gate.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.mlp.w_up.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.mlp.w_down.weight", shape = [32, 64], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.predictor.fc1.weight", shape = [8, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.predictor.fc1.bias", shape = [8], init = zeros>, #modk.param<name = "blocks.1.predictor.fc2.weight", shape = [1, 8], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.predictor.fc2.bias", shape = [1], init = zeros>, #modk.param<name = "blocks.1.router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.1.attn.wq.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn.wk.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn.wv.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn.wo.weight", shape = [32, 32], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.mlp_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.1.mlp.w_gate.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.mlp.w_up.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.mlp.w_down.weight", shape = [32, 64], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "final_norm.weight", shape = [32], init = ones>], workspace_bytes_per_sequence = 17408 : i64} {
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
    %27 = modk.alloc {offset = 2112 : i64} : memref<?x16xi32>
    %28 = modk.alloc {offset = 2240 : i64} : memref<?x1xi64>
    modk.identity_rows -> %27, %28 : memref<?x16xi32>, memref<?x1xi64>
    modk.embed %25, %0 -> %26 : memref<?x16xi32>, memref<64x32xf32>, memref<?x16x32xf32>
    %29 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %26, %1 rows %28 -> %29 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %30 = modk.alloc {offset = 4480 : i64} : memref<?x16x32xf32>
    %31 = modk.alloc {offset = 6592 : i64} : memref<?x16x32xf32>
    %32 = modk.alloc {offset = 8704 : i64} : memref<?x16x32xf32>
    modk.gemm %29, [%2] rows %28 extra(%27) -> %30 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %29, [%3] rows %28 extra(%27) -> %31 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %29, [%4] rows %28 -> %32 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %33 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.attention %30, %31, %32 rows %27, %28 -> %33 {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm %33, [%5] rows %28 extra(%26) -> %26 {epilogue = #modk.epilogue<residual_add>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>
    %34 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %26, %6 rows %28 -> %34 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %35 = modk.alloc {offset = 4480 : i64} : memref<?x16x64xf32>
    %36 = modk.alloc {offset = 8640 : i64} : memref<?x16x64xf32>
    modk.gemm %34, [%7, %8] rows %28 extra(%36) -> %35 {epilogue = #modk.epilogue<swiglu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
    modk.gemm %35, [%9] rows %28 extra(%26) -> %26 {epilogue = #modk.epilogue<residual_add>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>
    %37 = modk.alloc {offset = 2368 : i64} : memref<?x16x8xf32>
    %38 = modk.alloc {offset = 2112 : i64} : memref<?x16xf32>
    modk.predictor %26, [%10, %11, %12, %13] scratch %37 -> %38 {causal_only} : memref<?x16x32xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>, memref<?x16x8xf32>, memref<?x16xf32>
    %39 = modk.alloc {offset = 2368 : i64} : memref<?x16xf32>
    %40 = modk.alloc {offset = 2496 : i64} : memref<?x16xi32>
    %41 = modk.alloc {offset = 2624 : i64} : memref<?x1xi64>
    %42 = modk.alloc {offset = 2752 : i64} : memref<?x16x32xf32>
    %43 = modk.alloc {offset = 4864 : i64} : memref<?x16x32xf32>
    %44 = modk.output "routed.1" : memref<?x16xi32>
    %ipos1 = modk.alloc : memref<?x16xi32>
    %iseg1 = modk.alloc : memref<?x1xi64>
    modk.identity_rows -> %ipos1, %iseg1 : memref<?x16xi32>, memref<?x1xi64>
    modk.rows ins(%26, %14 : memref<?x16x32xf32>, memref<1x32xf32>) rows %iseg1 : memref<?x1xi64> outs(%39 : memref<?x16xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
    modk.route_select %39 causal(%38) -> %40, %41, %44 {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16xi32>
    modk.rows ins(%26, %15 : memref<?x16x32xf32>, memref<32xf32>) rows %41 : memref<?x1xi64> tokens(%40 : memref<?x16xi32>) outs(%42, %43 : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %rx_eps = arith.constant 1.000000e-05 : f32
      %rx_width = arith.constant 32.0 : f32
      %rx_mean = arith.divf %ss, %rx_width : f32
      %rx_var = arith.addf %rx_mean, %rx_eps : f32
      %rx_root = math.sqrt %rx_var : f32
      %rx_one = arith.constant 1.0 : f32
      %rx_scale = arith.divf %rx_one, %rx_root : f32
      %rx_t = arith.mulf %b0, %rx_scale : f32
      %rx_n = arith.mulf %rx_t, %b1 : f32
      modk.yield %b0, %rx_n : f32, f32
    }
    %45 = modk.alloc {offset = 6976 : i64} : memref<?x16x32xf32>
    %46 = modk.alloc {offset = 9088 : i64} : memref<?x16x32xf32>
    %47 = modk.alloc {offset = 11200 : i64} : memref<?x16x32xf32>
    modk.gemm %43, [%16] rows %41 extra(%40) -> %45 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %43, [%17] rows %41 extra(%40) -> %46 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %43, [%18] rows %41 -> %47 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %48 = modk.alloc {offset = 4864 : i64} : memref<?x16x32xf32>
    modk.attention %45, %46, %47 rows %40, %41 -> %48 {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    %49 = modk.alloc {offset = 6976 : i64} : memref<?x16x32xf32>
    modk.gemm %48, [%19] rows %41 -> %49 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.add %42, %49 rows %41 -> %42 : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %50 = modk.alloc {offset = 4864 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %42, %20 rows %41 -> %50 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %51 = modk.alloc {offset = 9088 : i64} : memref<?x16x64xf32>
    %52 = modk.alloc {offset = 13248 : i64} : memref<?x16x64xf32>
    modk.gemm %50, [%21, %22] rows %41 extra(%52) -> %51 {epilogue = #modk.epilogue<swiglu>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
    %53 = modk.alloc {offset = 2752 : i64} : memref<?x16x32xf32>
    modk.gemm %51, [%23] rows %41 -> %53 {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.rows ins(%49, %53, %39, %26 : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>) rows %41 : memref<?x1xi64> tokens(%40 : memref<?x16xi32>) outs(%26 : memref<?x16x32xf32>) access(row, row, token_value, token -> token) reduce {
    ^bb0(%ga: f32, %gm: f32, %gr: f32, %gx: f32):
      modk.yield
    } body {
    ^bb0(%ga: f32, %gm: f32, %gr: f32, %gx: f32):
      %gf = arith.addf %ga, %gm : f32
      %gn = arith.negf %gr : f32
      %ge = math.exp %gn : f32
      %g1 = arith.constant 1.000000e+00 : f32
      %gd = arith.addf %ge, %g1 : f32
      %gs = arith.divf %g1, %gd : f32
      %gp = arith.mulf %gs, %gf : f32
      %gy = arith.addf %gx, %gp : f32
      modk.yield %gy : f32
    }
    %54 = modk.alloc {offset = 2368 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %26, %24 rows %28 -> %54 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %55 = modk.output "logits" : memref<?x16x64xf32>
    modk.gemm %54, [%0] rows %28 -> %55 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
  }
  modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "small", vocab_size = 64, d_model = 32, n_layers = 2, n_heads = 2, d_ff = 64, seq_len = 16, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32, mod = <capacity = 2.500000e-01 : f64, schedule = every_other, gate = sigmoid, causal_router = predictor, aux_loss_weight = 1.000000e-02 : f64, predictor_hidden = 8>>, modes = [#modk.mode<topk>], params = [#modk.param<name = "embed.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.0.attn.wq.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn.wk.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn.wv.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn.wo.weight", shape = [32, 32], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.mlp_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.0.mlp.w_gate.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.mlp.w_up.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.mlp.w_down.weight", shape = [32, 64], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.predictor.fc1.weight", shape = [8, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.predictor.fc1.bias", shape = [8], init = zeros>, #modk.param<name = "blocks.1.predictor.fc2.weight", shape = [1, 8], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.predictor.fc2.bias", shape = [1], init = zeros>, #modk.param<name = "blocks.1.router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.1.attn.wq.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn.wk.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn.wv.weight", shape = [32, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.attn.wo.weight", shape = [32, 32], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.mlp_norm.weight", shape = [32], init = ones>, #modk.param<name = "blocks.1.mlp.w_gate.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.mlp.w_up.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.1.mlp.w_down.weight", shape = [32, 64], init = normal, std = 1.000000e-02 : f64, decay = true>, #modk.param<name = "final_norm.weight", shape = [32], init = ones>], workspace_bytes_per_sequence = 54528 : i64} {
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
    %25 = modk.input "tokens" : memref<?x17xi32>
    %26 = modk.alloc {offset = 0 : i64} : memref<?x16xi32>
    %27 = modk.alloc {offset = 128 : i64} : memref<?x16xi32>
    modk.split_tokens(%25, %26, %27) : memref<?x17xi32>, memref<?x16xi32>, memref<?x16xi32>
    %28 = modk.alloc {offset = 256 : i64} : memref<?x16x32xf32>
    %29 = modk.alloc {offset = 2368 : i64} : memref<?x16xi32>
    %30 = modk.alloc {offset = 2496 : i64} : memref<?x1xi64>
    modk.identity_rows -> %29, %30 : memref<?x16xi32>, memref<?x1xi64>
    modk.embed %26, %0 -> %28 : memref<?x16xi32>, memref<64x32xf32>, memref<?x16x32xf32>
    %31 = modk.alloc {offset = 2624 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %28, %1 rows %30 -> %31 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %32 = modk.alloc {offset = 4736 : i64} : memref<?x16x32xf32>
    %33 = modk.alloc {offset = 6848 : i64} : memref<?x16x32xf32>
    %34 = modk.alloc {offset = 8960 : i64} : memref<?x16x32xf32>
    modk.gemm %31, [%2] rows %30 extra(%29) -> %32 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %31, [%3] rows %30 extra(%29) -> %33 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16xi32>, memref<?x16x32xf32>
    modk.gemm %31, [%4] rows %30 -> %34 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %35 = modk.alloc {offset = 11072 : i64} : memref<?x16x32xf32>
    modk.attention %32, %33, %34 rows %29, %30 -> %35 {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    %36 = modk.alloc {offset = 13184 : i64} : memref<?x16x32xf32>
    modk.gemm %35, [%5] rows %30 -> %36 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %37 = modk.alloc {offset = 15296 : i64} : memref<?x16x32xf32>
    modk.add %28, %36 rows %30 -> %37 : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %38 = modk.alloc {offset = 13184 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %37, %6 rows %30 -> %38 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %39 = modk.alloc {offset = 25728 : i64} : memref<?x16x64xf32>
    %40 = modk.alloc {offset = 21568 : i64} : memref<?x16x64xf32>
    %41 = modk.alloc {offset = 17408 : i64} : memref<?x16x64xf32>
    modk.gemm %38, [%7] rows %30 -> %41 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
    modk.gemm %38, [%8] rows %30 -> %40 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
    modk.activation(%41, %40, %30, %39) {kind = #modk.activation<swiglu>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
    %42 = modk.alloc {offset = 29888 : i64} : memref<?x16x32xf32>
    modk.gemm %39, [%9] rows %30 -> %42 {epilogue = #modk.epilogue<none>} : memref<?x16x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %43 = modk.alloc {offset = 32000 : i64} : memref<?x16x32xf32>
    modk.add %37, %42 rows %30 -> %43 : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %44 = modk.alloc {offset = 29888 : i64} : memref<?x16x8xf32>
    %45 = modk.alloc {offset = 30464 : i64} : memref<?x16xf32>
    modk.predictor %43, [%10, %11, %12, %13] scratch %44 -> %45 : memref<?x16x32xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>, memref<?x16x8xf32>, memref<?x16xf32>
    %46 = modk.alloc {offset = 29888 : i64} : memref<?x16xf32>
    %47 = modk.alloc {offset = 30016 : i64} : memref<?x4xi32>
    %48 = modk.alloc {offset = 30144 : i64} : memref<?x1xi64>
    %49 = modk.alloc {offset = 30592 : i64} : memref<?x4x32xf32>
    %50 = modk.alloc {offset = 31168 : i64} : memref<?x4x32xf32>
    %51 = modk.alloc {offset = 30272 : i64} : memref<?x16xi32>
    %ipos2 = modk.alloc : memref<?x16xi32>
    %iseg2 = modk.alloc : memref<?x1xi64>
    modk.identity_rows -> %ipos2, %iseg2 : memref<?x16xi32>, memref<?x1xi64>
    modk.rows ins(%43, %14 : memref<?x16x32xf32>, memref<1x32xf32>) rows %iseg2 : memref<?x1xi64> outs(%46 : memref<?x16xf32>) access(row, column -> row_value) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %xw = arith.mulf %a0, %a1 : f32
      modk.yield %xw : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %s0: f32):
      modk.yield %s0 : f32
    }
    modk.route_select %46 -> %47, %48, %51 {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
    modk.rows ins(%43, %15 : memref<?x16x32xf32>, memref<32xf32>) rows %48 : memref<?x1xi64> tokens(%47 : memref<?x4xi32>) outs(%49, %50 : memref<?x4x32xf32>, memref<?x4x32xf32>) access(token, column -> row, row) reduce {
    ^bb0(%a0: f32, %a1: f32):
      %sq = arith.mulf %a0, %a0 : f32
      modk.yield %sq : f32
    } body {
    ^bb0(%b0: f32, %b1: f32, %ss: f32):
      %rx_eps = arith.constant 1.000000e-05 : f32
      %rx_width = arith.constant 32.0 : f32
      %rx_mean = arith.divf %ss, %rx_width : f32
      %rx_var = arith.addf %rx_mean, %rx_eps : f32
      %rx_root = math.sqrt %rx_var : f32
      %rx_one = arith.constant 1.0 : f32
      %rx_scale = arith.divf %rx_one, %rx_root : f32
      %rx_t = arith.mulf %b0, %rx_scale : f32
      %rx_n = arith.mulf %rx_t, %b1 : f32
      modk.yield %b0, %rx_n : f32, f32
    }
    %52 = modk.alloc {offset = 34112 : i64} : memref<?x4x32xf32>
    %53 = modk.alloc {offset = 34688 : i64} : memref<?x4x32xf32>
    %54 = modk.alloc {offset = 35264 : i64} : memref<?x4x32xf32>
    modk.gemm %50, [%16] rows %48 extra(%47) -> %52 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4xi32>, memref<?x4x32xf32>
    modk.gemm %50, [%17] rows %48 extra(%47) -> %53 {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4xi32>, memref<?x4x32xf32>
    modk.gemm %50, [%18] rows %48 -> %54 {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    %55 = modk.alloc {offset = 35840 : i64} : memref<?x4x32xf32>
    modk.attention %52, %53, %54 rows %47, %48 -> %55 {n_heads = 2 : i64} : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>
    %56 = modk.alloc {offset = 36416 : i64} : memref<?x4x32xf32>
    modk.gemm %55, [%19] rows %48 -> %56 {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    %57 = modk.alloc {offset = 36992 : i64} : memref<?x4x32xf32>
    modk.add %49, %56 rows %48 -> %57 : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    %58 = modk.alloc {offset = 37568 : i64} : memref<?x4x32xf32>
    modk.rmsnorm %57, %20 rows %48 -> %58 {eps = 1.000000e-05 : f64} : memref<?x4x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    %59 = modk.alloc {offset = 40320 : i64} : memref<?x4x64xf32>
    %60 = modk.alloc {offset = 39232 : i64} : memref<?x4x64xf32>
    %61 = modk.alloc {offset = 38144 : i64} : memref<?x4x64xf32>
    modk.gemm %58, [%21] rows %48 -> %61 {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
    modk.gemm %58, [%22] rows %48 -> %60 {epilogue = #modk.epilogue<none>} : memref<?x4x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x64xf32>
    modk.activation(%61, %60, %48, %59) {kind = #modk.activation<swiglu>} : memref<?x4x64xf32>, memref<?x4x64xf32>, memref<?x1xi64>, memref<?x4x64xf32>
    %62 = modk.alloc {offset = 43520 : i64} : memref<?x4x32xf32>
    %63 = modk.alloc {offset = 41408 : i64} : memref<?x16x32xf32>
    modk.copy(%43, %63) : memref<?x16x32xf32>, memref<?x16x32xf32>
    modk.gemm %59, [%23] rows %48 -> %62 {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.rows ins(%56, %62, %46, %63 : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>) rows %48 : memref<?x1xi64> tokens(%47 : memref<?x4xi32>) outs(%63 : memref<?x16x32xf32>) access(row, row, token_value, token -> token) reduce {
    ^bb0(%ga: f32, %gm: f32, %gr: f32, %gx: f32):
      modk.yield
    } body {
    ^bb0(%ga: f32, %gm: f32, %gr: f32, %gx: f32):
      %gf = arith.addf %ga, %gm : f32
      %gn = arith.negf %gr : f32
      %ge = math.exp %gn : f32
      %g1 = arith.constant 1.000000e+00 : f32
      %gd = arith.addf %ge, %g1 : f32
      %gs = arith.divf %g1, %gd : f32
      %gp = arith.mulf %gs, %gf : f32
      %gy = arith.addf %gx, %gp : f32
      modk.yield %gy : f32
    }
    %64 = modk.alloc {offset = 44096 : i64} : memref<?x16x32xf32>
    modk.rmsnorm %63, %24 rows %30 -> %64 {eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    %65 = modk.alloc {offset = 46208 : i64} : memref<?x16x64xf32>
    modk.gemm %64, [%0] rows %30 -> %65 {epilogue = #modk.epilogue<none>} : memref<?x16x32xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x64xf32>
    %66 = modk.output "losses" : memref<3xf32>
    %67 = modk.output "grad.embed.weight" : memref<64x32xf32>
    modk.zero(%67) : memref<64x32xf32>
    %68 = modk.output "grad.blocks.0.attn_norm.weight" : memref<32xf32>
    modk.zero(%68) : memref<32xf32>
    %69 = modk.output "grad.blocks.0.attn.wq.weight" : memref<32x32xf32>
    modk.zero(%69) : memref<32x32xf32>
    %70 = modk.output "grad.blocks.0.attn.wk.weight" : memref<32x32xf32>
    modk.zero(%70) : memref<32x32xf32>
    %71 = modk.output "grad.blocks.0.attn.wv.weight" : memref<32x32xf32>
    modk.zero(%71) : memref<32x32xf32>
    %72 = modk.output "grad.blocks.0.attn.wo.weight" : memref<32x32xf32>
    modk.zero(%72) : memref<32x32xf32>
    %73 = modk.output "grad.blocks.0.mlp_norm.weight" : memref<32xf32>
    modk.zero(%73) : memref<32xf32>
    %74 = modk.output "grad.blocks.0.mlp.w_gate.weight" : memref<64x32xf32>
    modk.zero(%74) : memref<64x32xf32>
    %75 = modk.output "grad.blocks.0.mlp.w_up.weight" : memref<64x32xf32>
    modk.zero(%75) : memref<64x32xf32>
    %76 = modk.output "grad.blocks.0.mlp.w_down.weight" : memref<32x64xf32>
    modk.zero(%76) : memref<32x64xf32>
    %77 = modk.output "grad.blocks.1.predictor.fc1.weight" : memref<8x32xf32>
    modk.zero(%77) : memref<8x32xf32>
    %78 = modk.output "grad.blocks.1.predictor.fc1.bias" : memref<8xf32>
    modk.zero(%78) : memref<8xf32>
    %79 = modk.output "grad.blocks.1.predictor.fc2.weight" : memref<1x8xf32>
    modk.zero(%79) : memref<1x8xf32>
    %80 = modk.output "grad.blocks.1.predictor.fc2.bias" : memref<1xf32>
    modk.zero(%80) : memref<1xf32>
    %81 = modk.output "grad.blocks.1.router.weight" : memref<1x32xf32>
    modk.zero(%81) : memref<1x32xf32>
    %82 = modk.output "grad.blocks.1.attn_norm.weight" : memref<32xf32>
    modk.zero(%82) : memref<32xf32>
    %83 = modk.output "grad.blocks.1.attn.wq.weight" : memref<32x32xf32>
    modk.zero(%83) : memref<32x32xf32>
    %84 = modk.output "grad.blocks.1.attn.wk.weight" : memref<32x32xf32>
    modk.zero(%84) : memref<32x32xf32>
    %85 = modk.output "grad.blocks.1.attn.wv.weight" : memref<32x32xf32>
    modk.zero(%85) : memref<32x32xf32>
    %86 = modk.output "grad.blocks.1.attn.wo.weight" : memref<32x32xf32>
    modk.zero(%86) : memref<32x32xf32>
    %87 = modk.output "grad.blocks.1.mlp_norm.weight" : memref<32xf32>
    modk.zero(%87) : memref<32xf32>
    %88 = modk.output "grad.blocks.1.mlp.w_gate.weight" : memref<64x32xf32>
    modk.zero(%88) : memref<64x32xf32>
    %89 = modk.output "grad.blocks.1.mlp.w_up.weight" : memref<64x32xf32>
    modk.zero(%89) : memref<64x32xf32>
    %90 = modk.output "grad.blocks.1.mlp.w_down.weight" : memref<32x64xf32>
    modk.zero(%90) : memref<32x64xf32>
    %91 = modk.output "grad.final_norm.weight" : memref<32xf32>
    modk.zero(%91) : memref<32xf32>
    %92 = modk.alloc {offset = 50368 : i64} : memref<?x16x64xf32>
    modk.cross_entropy(%65, %27, %92, %66) : memref<?x16x64xf32>, memref<?x16xi32>, memref<?x16x64xf32>, memref<3xf32>
    %93 = modk.alloc {offset = 46208 : i64} : memref<?x16x32xf32>
    modk.gemm_dgrad(%92, %0, %30, %93) {accumulate = false} : memref<?x16x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%92, %64, %30, %67) : memref<?x16x64xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<64x32xf32>
    %94 = modk.alloc {offset = 44096 : i64} : memref<?x16x32xf32>
    modk.rmsnorm_grad(%63, %24, %93, %30, %94, %91) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<32xf32>
    %95 = modk.alloc {offset = 41408 : i64} : memref<?x4x32xf32>
    modk.add %56, %62 rows %48 -> %95 : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    %96 = modk.alloc {offset = 36416 : i64} : memref<?x4x32xf32>
    %97 = modk.alloc {offset = 128 : i64} : memref<?x16xf32>
    modk.zero(%97) : memref<?x16xf32>
    modk.scatter_grad(%94, %46, %95, %47, %48, %96, %97) {gate = #modk.gate<sigmoid>} : memref<?x16x32xf32>, memref<?x16xf32>, memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<?x16xf32>
    %98 = modk.alloc {offset = 41408 : i64} : memref<?x4x64xf32>
    modk.gemm_dgrad(%96, %23, %48, %98) {accumulate = false} : memref<?x4x32xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x4x64xf32>
    modk.gemm_wgrad(%96, %59, %48, %90) : memref<?x4x32xf32>, memref<?x4x64xf32>, memref<?x1xi64>, memref<32x64xf32>
    %99 = modk.alloc {offset = 40320 : i64} : memref<?x4x64xf32>
    %100 = modk.alloc {offset = 42496 : i64} : memref<?x4x64xf32>
    modk.activation_grad(%61, %60, %98, %48, %100, %99) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x4x64xf32>, memref<?x4x64xf32>, memref<?x4x64xf32>, memref<?x1xi64>, memref<?x4x64xf32>, memref<?x4x64xf32>
    %101 = modk.alloc {offset = 38144 : i64} : memref<?x4x32xf32>
    modk.gemm_dgrad(%99, %22, %48, %101) {accumulate = false} : memref<?x4x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.gemm_wgrad(%99, %58, %48, %89) : memref<?x4x64xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<64x32xf32>
    modk.gemm_dgrad(%100, %21, %48, %101) {accumulate = true} : memref<?x4x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.gemm_wgrad(%100, %58, %48, %88) : memref<?x4x64xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<64x32xf32>
    %102 = modk.alloc {offset = 37568 : i64} : memref<?x4x32xf32>
    modk.rmsnorm_grad(%57, %20, %101, %48, %102, %87) {accumulate = false, eps = 1.000000e-05 : f64} : memref<?x4x32xf32>, memref<32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<32xf32>
    modk.add %96, %102 rows %48 -> %96 : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    %103 = modk.alloc {offset = 36992 : i64} : memref<?x4x32xf32>
    modk.gemm_dgrad(%96, %19, %48, %103) {accumulate = false} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.gemm_wgrad(%96, %55, %48, %86) : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    %104 = modk.alloc {offset = 36416 : i64} : memref<?x4x32xf32>
    %105 = modk.alloc {offset = 38144 : i64} : memref<?x4x32xf32>
    %106 = modk.alloc {offset = 38720 : i64} : memref<?x4x32xf32>
    modk.attention_grad(%52, %53, %54, %55, %103, %47, %48, %104, %105, %106) {n_heads = 2 : i64} : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x4x32xf32>
    modk.rope_grad(%104, %47, %48, %104) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.rope_grad(%105, %47, %48, %105) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x4x32xf32>
    %107 = modk.alloc {offset = 34112 : i64} : memref<?x4x32xf32>
    modk.gemm_dgrad(%104, %16, %48, %107) {accumulate = false} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.gemm_wgrad(%104, %50, %48, %83) : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    modk.gemm_dgrad(%105, %17, %48, %107) {accumulate = true} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.gemm_wgrad(%105, %50, %48, %84) : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    modk.gemm_dgrad(%106, %18, %48, %107) {accumulate = true} : memref<?x4x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>
    modk.gemm_wgrad(%106, %50, %48, %85) : memref<?x4x32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    modk.rmsnorm_grad(%49, %15, %107, %48, %102, %82) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x4x32xf32>, memref<32xf32>, memref<?x4x32xf32>, memref<?x1xi64>, memref<?x4x32xf32>, memref<32xf32>
    modk.gather_grad(%102, %47, %48, %94) : memref<?x4x32xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.router_grad(%43, %14, %97, %94, %81) : memref<?x16x32xf32>, memref<1x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>, memref<1x32xf32>
    %108 = modk.alloc {offset = 128 : i64} : memref<?x16xf32>
    modk.zero(%108) : memref<?x16xf32>
    modk.bce_loss(%45, %51, %108, %66) {n_routed = 1 : i64, weight = 1.000000e-02 : f64} : memref<?x16xf32>, memref<?x16xi32>, memref<?x16xf32>, memref<3xf32>
    %109 = modk.alloc {offset = 29888 : i64} : memref<?x16x8xf32>
    modk.predictor_grad(%43, %10, %11, %12, %108, %109, %77, %78, %79, %80) : memref<?x16x32xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<?x16xf32>, memref<?x16x8xf32>, memref<8x32xf32>, memref<8xf32>, memref<1x8xf32>, memref<1xf32>
    %110 = modk.alloc {offset = 29888 : i64} : memref<?x16x32xf32>
    modk.copy(%94, %110) : memref<?x16x32xf32>, memref<?x16x32xf32>
    %111 = modk.alloc {offset = 32000 : i64} : memref<?x16x64xf32>
    modk.gemm_dgrad(%110, %9, %30, %111) {accumulate = false} : memref<?x16x32xf32>, memref<32x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>
    modk.gemm_wgrad(%110, %39, %30, %76) : memref<?x16x32xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<32x64xf32>
    %112 = modk.alloc {offset = 25728 : i64} : memref<?x16x64xf32>
    %113 = modk.alloc {offset = 36160 : i64} : memref<?x16x64xf32>
    modk.activation_grad(%41, %40, %111, %30, %113, %112) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x16x64xf32>, memref<?x1xi64>, memref<?x16x64xf32>, memref<?x16x64xf32>
    %114 = modk.alloc {offset = 17408 : i64} : memref<?x16x32xf32>
    modk.gemm_dgrad(%112, %8, %30, %114) {accumulate = false} : memref<?x16x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%112, %38, %30, %75) : memref<?x16x64xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<64x32xf32>
    modk.gemm_dgrad(%113, %7, %30, %114) {accumulate = true} : memref<?x16x64xf32>, memref<64x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%113, %38, %30, %74) : memref<?x16x64xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<64x32xf32>
    modk.rmsnorm_grad(%37, %6, %114, %30, %94, %73) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<32xf32>
    %115 = modk.alloc {offset = 13184 : i64} : memref<?x16x32xf32>
    modk.copy(%94, %115) : memref<?x16x32xf32>, memref<?x16x32xf32>
    %116 = modk.alloc {offset = 15296 : i64} : memref<?x16x32xf32>
    modk.gemm_dgrad(%115, %5, %30, %116) {accumulate = false} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%115, %35, %30, %72) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    %117 = modk.alloc {offset = 13184 : i64} : memref<?x16x32xf32>
    %118 = modk.alloc {offset = 17408 : i64} : memref<?x16x32xf32>
    %119 = modk.alloc {offset = 19520 : i64} : memref<?x16x32xf32>
    modk.attention_grad(%32, %33, %34, %35, %116, %29, %30, %117, %118, %119) {n_heads = 2 : i64} : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x16x32xf32>
    modk.rope_grad(%117, %29, %30, %117) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.rope_grad(%118, %29, %30, %118) {n_heads = 2 : i64, rope_theta = 1.000000e+04 : f64} : memref<?x16x32xf32>, memref<?x16xi32>, memref<?x1xi64>, memref<?x16x32xf32>
    %120 = modk.alloc {offset = 4736 : i64} : memref<?x16x32xf32>
    modk.gemm_dgrad(%117, %2, %30, %120) {accumulate = false} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%117, %31, %30, %69) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    modk.gemm_dgrad(%118, %3, %30, %120) {accumulate = true} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%118, %31, %30, %70) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    modk.gemm_dgrad(%119, %4, %30, %120) {accumulate = true} : memref<?x16x32xf32>, memref<32x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>
    modk.gemm_wgrad(%119, %31, %30, %71) : memref<?x16x32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<32x32xf32>
    modk.rmsnorm_grad(%28, %1, %120, %30, %94, %68) {accumulate = true, eps = 1.000000e-05 : f64} : memref<?x16x32xf32>, memref<32xf32>, memref<?x16x32xf32>, memref<?x1xi64>, memref<?x16x32xf32>, memref<32xf32>
    modk.embed_grad(%26, %94, %67) : memref<?x16xi32>, memref<?x16x32xf32>, memref<64x32xf32>
  }
}

// The routed block's gated scatter as its down projection's `rows`
// epilogue (modk-fuse-row-epilogues): sgemm writes whole products, so the
// product is staged per thread (no workspace) and the row kernel generated
// from the epilogue's region finishes it at the selected tokens.
// FUSED: void modc_rows_[[SCATTER:[0-9]+]](int64_t rows, const int64_t *seg, int64_t nseg, const int32_t *pos, const float *in0, const float *in1, const float *in2, const float *in3, float *out0) {
// FUSED: auto *rout0 = out0 + (seq * 16 + tok) * 32;
// FUSED: rout0[c] =
// (The dense blocks' down projections before it accumulate: sgemm's beta.)
// FUSED: float *product = modk_cpu::staged_rows<32>(rows);
// FUSED-NEXT: modk_cpu::linear<32, 64>({{buf[0-9]+}}, rows, {{w[0-9]+}}, product);
// FUSED-NEXT: modc_rows_[[SCATTER]]([[SEG:buf[0-9]+]][B], [[SEG]], B, {{buf[0-9]+}}, {{buf[0-9]+}}, product, {{buf[0-9]+}}, [[X:buf[0-9]+]], [[X]]);
