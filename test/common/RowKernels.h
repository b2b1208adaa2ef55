//===- RowKernels.h - The generated row kernels the tests run ---*- C++ -*-===//
//
// The kernels modc generates from the modk.rows ops of
// test/common/RowKernels.mlir (test/cmake/RowKernels.cmake), named after the
// ops they come from. Include after the CPU prelude (CpuKernels.h) and, for
// the CUDA ones, after the CUDA preludes with MODC_ROW_KERNELS_CUDA defined.
// Each translation unit gets its own copy of the CPU kernels (an anonymous
// namespace); the CUDA ones are in namespace modc_rows, as in a package, and
// inline under the emulation (__global__).
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_COMMON_ROWKERNELS_H
#define MODC_TEST_COMMON_ROWKERNELS_H

#include <cstdint>

namespace {
/// The router gate g(r) of a gated kernel (docs/model-format.md): g = r,
/// g = sigmoid(r), g = 1; the tests pick a generated kernel by it.
enum Gate { GateLinear, GateSigmoid, GateOne };

namespace rows_cpu {
#include "RowKernelsCpu.inc"
} // namespace rows_cpu

/// The CPU kernels of RowKernels.mlir: (row count, inputs..., outputs...).
namespace gen_cpu {
constexpr auto rmsnorm96 = rows_cpu::modc_rows_0;      // eps 1e-5
constexpr auto rmsnorm128 = rows_cpu::modc_rows_1;     // eps 1e-6
constexpr auto swigluGrad40 = rows_cpu::modc_rows_2;   // -> f32, f32
constexpr auto swigluGrad40Bf16 = rows_cpu::modc_rows_3;
constexpr auto geluGrad33 = rows_cpu::modc_rows_4;
constexpr auto geluGrad33Bf16 = rows_cpu::modc_rows_5;
constexpr auto rmsnorm90 = rows_cpu::modc_rows_6;      // eps 1e-5
constexpr auto add90 = rows_cpu::modc_rows_7;
constexpr auto gelu67 = rows_cpu::modc_rows_8;
constexpr auto gelu67Bf16 = rows_cpu::modc_rows_9;
constexpr auto swiglu50 = rows_cpu::modc_rows_10;
constexpr auto swiglu50Bf16 = rows_cpu::modc_rows_11;
constexpr auto swigluGrad50 = rows_cpu::modc_rows_12;
constexpr auto swigluGrad50Bf16 = rows_cpu::modc_rows_13;
constexpr auto geluGrad50 = rows_cpu::modc_rows_14;
constexpr auto geluGrad50Bf16 = rows_cpu::modc_rows_15;
constexpr auto add40 = rows_cpu::modc_rows_16;
constexpr auto add40Bf16 = rows_cpu::modc_rows_17;
// The routed blocks' kernels; the forward forms take
// (rows, seg, nseg, pos, ...), the decode forms (one token a sequence)
// (rows, seg, nseg, ...), where rows = seg[nseg].
// The router over every token: (rows, x, w, r), rows = B * S.
constexpr auto router40x70 = rows_cpu::modc_rows_23;
// With the RMSNorm statistics (modk-fuse-router-norm): (rows, x, w, r,
// sum of x^2); then the gather that reads that sum, (..., x, norm weight,
// sum of x^2, gathered, normed).
constexpr auto routerNorm40x70 = rows_cpu::modc_rows_50;
constexpr auto gatherScale40x70 = rows_cpu::modc_rows_51;
constexpr auto router1x40 = rows_cpu::modc_rows_52;
constexpr auto routerNorm1x40 = rows_cpu::modc_rows_54;
// Gather + RMSNorm: (..., stream x, norm weight, gathered, normed).
constexpr auto gatherRmsnorm32x48 = rows_cpu::modc_rows_20;   // S 32, eps 1e-5
constexpr auto gatherRmsnorm512x128 = rows_cpu::modc_rows_22; // eps 1e-6
constexpr auto gatherRmsnorm40x70 = rows_cpu::modc_rows_24;   // eps 1e-5
constexpr auto gatherRmsnorm1x48 = rows_cpu::modc_rows_26;    // S 1, eps 1e-5
// Gated scatter, x[tok] += g(r[tok]) * (a[row] + m[row]) in place:
// (..., a, m, r, x, x).
constexpr auto scatterLinear40x32 = rows_cpu::modc_rows_27;
constexpr auto scatterSigmoid40x32 = rows_cpu::modc_rows_28;
constexpr auto scatterOne40x32 = rows_cpu::modc_rows_29;
constexpr auto scatterSigmoid512x128 = rows_cpu::modc_rows_30;
constexpr auto scatterLinear40x70 = rows_cpu::modc_rows_31;
constexpr auto scatterSigmoid40x70 = rows_cpu::modc_rows_32;
constexpr auto scatterOne40x70 = rows_cpu::modc_rows_33;
// A decode step's (eps 1e-5; the scatter needs at most one row a sequence).
// Its router over every sequence's token: (rows, x, w, r), rows = B (that
// of D = 48 is router1x48's kernel: the same op).
constexpr auto decodeRouter64 = rows_cpu::modc_rows_35;
constexpr auto decodeRouter128 = rows_cpu::modc_rows_37;
constexpr auto decodeRouter96 = rows_cpu::modc_rows_39;
constexpr auto decodeRouter32 = rows_cpu::modc_rows_41;
constexpr auto decodeGatherRmsnorm48 = rows_cpu::modc_rows_34;
constexpr auto decodeGatherRmsnorm64 = rows_cpu::modc_rows_36;
constexpr auto decodeGatherRmsnorm128 = rows_cpu::modc_rows_38;
constexpr auto decodeGatherRmsnorm96 = rows_cpu::modc_rows_40;
constexpr auto decodeGatherRmsnorm32 = rows_cpu::modc_rows_42;
constexpr auto decodeScatterLinear36 = rows_cpu::modc_rows_43;
constexpr auto decodeScatterSigmoid36 = rows_cpu::modc_rows_44;
constexpr auto decodeScatterOne36 = rows_cpu::modc_rows_45;
constexpr auto decodeScatterLinear64 = rows_cpu::modc_rows_46;
constexpr auto decodeScatterSigmoid64 = rows_cpu::modc_rows_47;
constexpr auto decodeScatterOne64 = rows_cpu::modc_rows_48;
constexpr auto decodeScatterSigmoid200 = rows_cpu::modc_rows_49;
// The AdamW update of modk.optimizer @adamw: (n, p, g, m, v, grad_scale,
// decay, beta1, beta2, eps, step_size, inv_sqrt_bc2).
constexpr auto adamwUpdate = rows_cpu::modc_optimizer_update;
// The squared gradient norm's terms of one tensor, summed in f64 in fixed
// chunks: (g, n) -> double.
constexpr auto gradNormTerms = rows_cpu::modc_optimizer_norm;
// The gather's gradient, dx[token] += dxs[row] in place:
// (rows, seg, nseg, pos, dxs, dx, dx).
constexpr auto gatherGrad64x300 = rows_cpu::modc_rows_56;
constexpr auto gatherGrad16x40 = rows_cpu::modc_rows_57;
// The gated scatter's gradient, S x D, by gate: linear and sigmoid
// (rows, seg, nseg, pos, dy, f, r, dr, df, dr), one (rows, seg, nseg, pos,
// dy, df).
constexpr auto scatterGradLinear16x12 = rows_cpu::modc_rows_58;
constexpr auto scatterGradSigmoid16x12 = rows_cpu::modc_rows_59;
constexpr auto scatterGradOne16x12 = rows_cpu::modc_rows_60;
constexpr auto scatterGradSigmoid256x160 = rows_cpu::modc_rows_61;
constexpr auto scatterGradLinear16x40 = rows_cpu::modc_rows_62;
constexpr auto scatterGradSigmoid16x40 = rows_cpu::modc_rows_63;
constexpr auto scatterGradOne16x40 = rows_cpu::modc_rows_64;
// RMSNorm's gradient, eps 1e-5, by D: (rows, x, w, dy, dx, dw), and when dx
// accumulates (rows, x, w, dy, dx, dx, dw); dw always accumulates.
constexpr auto rmsnormGrad24 = rows_cpu::modc_rows_65;
constexpr auto rmsnormGradAcc24 = rows_cpu::modc_rows_66;
constexpr auto rmsnormGrad96 = rows_cpu::modc_rows_67;
constexpr auto rmsnormGradAcc96 = rows_cpu::modc_rows_68;
constexpr auto rmsnormGrad256 = rows_cpu::modc_rows_69;
constexpr auto rmsnormGradAcc256 = rows_cpu::modc_rows_70;
constexpr auto rmsnormGrad128 = rows_cpu::modc_rows_71;
constexpr auto rmsnormGradAcc300 = rows_cpu::modc_rows_72;
constexpr auto rmsnormGrad64 = rows_cpu::modc_rows_73;
// The router's gradient over B * S rows: (rows, x, w, dr, dx, dx, dw).
constexpr auto routerGrad5x24 = rows_cpu::modc_rows_74;
constexpr auto routerGrad256x128 = rows_cpu::modc_rows_75;
constexpr auto routerGrad16x40 = rows_cpu::modc_rows_76;
constexpr auto routerGrad24x300 = rows_cpu::modc_rows_77;
// Two column sums, W = 40: (rows, x, y, a, b) with a += x, b += x * y.
constexpr auto twoColumnSums40 = rows_cpu::modc_rows_78;
// The embedding lookup, V = 19, D = 37: (rows, tokens, table, out).
constexpr auto embed19x37 = rows_cpu::modc_rows_79;
// The causal predictor after fc1's product h (hidden width H):
// (rows, h, b1, fc2, b2, p), p = sum_c silu(h_c + b1_c) fc2_c + b2.
constexpr auto predictor24 = rows_cpu::modc_rows_80;
constexpr auto predictor70 = rows_cpu::modc_rows_81;
// Its gradient after fc1's product again: (rows, h, b1, fc2, dp, h, db1,
// dfc2, db2): dz in place of h, the column sums db1 += dz and
// dfc2 += dp silu(z), the row total db2 += dp.
constexpr auto predictorGrad10 = rows_cpu::modc_rows_82;
constexpr auto predictorGrad128 = rows_cpu::modc_rows_83;
constexpr auto predictorGrad24 = rows_cpu::modc_rows_84;
// The mean cross-entropy over V classes: (rows, z, t, dz, ce, total), the
// row totals ce += and total += sum of the rows' losses / rows, and
// dz = (softmax(z) - onehot(t)) / rows (overwrite; dz may be z); the loss
// alone: (rows, z, t, ce, total).
constexpr auto crossEntropy50 = rows_cpu::modc_rows_85;
constexpr auto crossEntropy256 = rows_cpu::modc_rows_86;
constexpr auto crossEntropy3 = rows_cpu::modc_rows_87;
constexpr auto crossEntropy64 = rows_cpu::modc_rows_88;
constexpr auto crossEntropy50Bf16 = rows_cpu::modc_rows_89;
constexpr auto crossEntropyLoss50 = rows_cpu::modc_rows_90;
constexpr auto crossEntropy100 = rows_cpu::modc_rows_91;
constexpr auto crossEntropy100Bf16 = rows_cpu::modc_rows_92;
constexpr auto crossEntropy600 = rows_cpu::modc_rows_93;
constexpr auto crossEntropy5000 = rows_cpu::modc_rows_94;
// A routed layer's causal-router loss, weight 0.3, two routed layers, S
// tokens a sequence: (rows, z, y, dz, dz, aux, total) with
// aux += sum BCE(z, y) / (2 rows), total += 0.3 of that and
// dz += 0.3 (sigmoid(z) - y) / (2 rows); the loss alone: (rows, z, y, aux,
// total).
constexpr auto bce37 = rows_cpu::modc_rows_95;
constexpr auto bceLoss37 = rows_cpu::modc_rows_96;
constexpr auto bce40 = rows_cpu::modc_rows_97;
constexpr auto roundBf16Rows48 = rows_cpu::modc_rows_98;
// RoPE's transpose, dx = dy cos - rotate_half(dy) sin per head:
// (rows, pos, dy, dx), dx may be dy.
constexpr auto ropeGrad3x8 = rows_cpu::modc_rows_99;
constexpr auto ropeGrad3x8Bf16 = rows_cpu::modc_rows_100;
constexpr auto ropeGrad8x64 = rows_cpu::modc_rows_101;
constexpr auto ropeGrad3x16 = rows_cpu::modc_rows_102;
constexpr auto ropeGrad3x16Bf16 = rows_cpu::modc_rows_103;
// RoPE of a product's rows, as its epilogue over heads: (rows, pos,
// product, y), y may be the product; HxHD, theta 10^4 unless named, Bf16:
// then rounded to bf16 values.
constexpr auto rope4x32 = rows_cpu::modc_rows_104;
constexpr auto rope4x32Bf16 = rows_cpu::modc_rows_105;
constexpr auto rope2x128Theta5e5 = rows_cpu::modc_rows_106;
constexpr auto rope2x128Theta5e5Bf16 = rows_cpu::modc_rows_107;
constexpr auto rope3x24 = rows_cpu::modc_rows_108;
constexpr auto rope3x24Bf16 = rows_cpu::modc_rows_109;
constexpr auto rope8x64 = rows_cpu::modc_rows_110;
constexpr auto rope3x22 = rows_cpu::modc_rows_111;
constexpr auto rope3x22Theta5e5 = rows_cpu::modc_rows_112;
constexpr auto rope3x32 = rows_cpu::modc_rows_113;
constexpr auto rope3x32Bf16 = rows_cpu::modc_rows_114;
constexpr auto rope2x32Bf16 = rows_cpu::modc_rows_115;
constexpr auto rope3x16 = rows_cpu::modc_rows_116;
constexpr auto rope3x16Bf16 = rows_cpu::modc_rows_117;
constexpr auto rope2x64Bf16 = rows_cpu::modc_rows_118;
constexpr auto rope2x128Bf16 = rows_cpu::modc_rows_119;
constexpr auto rope3x64Bf16 = rows_cpu::modc_rows_120;
constexpr auto rope2x64 = rows_cpu::modc_rows_121;
constexpr auto rope2x128 = rows_cpu::modc_rows_122;
constexpr auto rope3x64 = rows_cpu::modc_rows_123;
// The same RoPE as rope4x32 and SwiGLU as swiglu50, reading column windows
// of stacked products (modk-fuse-horizontal): (rows, pos, stacked + 128, y)
// over rows of 384, and (rows, stacked, stacked + 50, y) over rows of 100.
constexpr auto ropeWindow4x32 = rows_cpu::modc_rows_124;
constexpr auto swigluWindows50 = rows_cpu::modc_rows_125;
// The embedding's gradient, table[tokens[i]] += dx[i] in row order:
// (rows, dx, tokens, table), V = 9, D = 40 and V = 600, D = 300.
constexpr auto embedGrad9x40 = rows_cpu::modc_rows_126;
constexpr auto embedGrad600x300 = rows_cpu::modc_rows_127;
// A whole buffer's copy into bf16, rounded as stored, D = 37: (rows, x, y).
constexpr auto roundingCopy37 = rows_cpu::modc_rows_128;
// RoPE at head dims below 16 (4x8, 6x4, 5x2; each then rounded to bf16):
// (rows, pos, product, y).
constexpr auto rope4x8 = rows_cpu::modc_rows_129;
constexpr auto rope4x8Bf16 = rows_cpu::modc_rows_130;
constexpr auto rope6x4 = rows_cpu::modc_rows_131;
constexpr auto rope6x4Bf16 = rows_cpu::modc_rows_132;
constexpr auto rope5x2 = rows_cpu::modc_rows_133;
constexpr auto rope5x2Bf16 = rows_cpu::modc_rows_134;
// Gathers fused into the selection, S = 40, D = 70: functors {pos, x, w,
// gathered, normed} (RMSNorm, eps 1e-5) and {pos, x, scale, w, gathered,
// normed}, for select_topk and gather_sequences.
using FusedGatherRmsnorm40x70 = rows_cpu::modc_gather_0;
using FusedGatherScale40x70 = rows_cpu::modc_gather_1;
// A decode step's gather + RMSNorm fused into decode_select, D = 64:
// {x, w, gathered, normed}.
using FusedDecodeGatherRmsnorm64 = rows_cpu::modc_gather_2;
} // namespace gen_cpu

} // namespace

#ifdef MODC_ROW_KERNELS_CUDA
#include "RowKernelsCuda.h"

namespace {
namespace rows_cuda = ::modc_rows;

/// The CUDA kernels, launched as the CUDA emitter does: a warp per row over
/// `maxRows` rows, of which the kernel reads how many there are (`*rows`).
namespace gen_cuda {
template <typename... Params, typename... Args>
void launch(void (*kernel)(const int64_t *, Params...), const int64_t *rows,
            int64_t maxRows, Args... args) {
  if (maxRows > 0)
    MODC_LAUNCH(kernel,
                unsigned(modk_cuda::ceilDiv(maxRows,
                                            modk_cuda::detail::kRowWarps)),
                modk_cuda::detail::kThreads, 0, nullptr, rows, args...);
}
constexpr auto rmsnorm90 = rows_cuda::modc_rows_6;
constexpr auto add90 = rows_cuda::modc_rows_7;
constexpr auto gelu67 = rows_cuda::modc_rows_8;
constexpr auto gelu67Bf16 = rows_cuda::modc_rows_9;
constexpr auto swiglu50 = rows_cuda::modc_rows_10;
constexpr auto swiglu50Bf16 = rows_cuda::modc_rows_11;
constexpr auto swigluGrad50 = rows_cuda::modc_rows_12;
constexpr auto swigluGrad50Bf16 = rows_cuda::modc_rows_13;
constexpr auto geluGrad50 = rows_cuda::modc_rows_14;
constexpr auto geluGrad50Bf16 = rows_cuda::modc_rows_15;
constexpr auto add90Bf16 = rows_cuda::modc_rows_18;
// The routed blocks' kernels, as gen_cpu's.
constexpr auto router40x70 = rows_cuda::modc_rows_23;
constexpr auto routerNorm40x70 = rows_cuda::modc_rows_50;
constexpr auto gatherScale40x70 = rows_cuda::modc_rows_51;
constexpr auto router1x40 = rows_cuda::modc_rows_52;
constexpr auto routerNorm1x40 = rows_cuda::modc_rows_54;
constexpr auto gatherRmsnorm40x70 = rows_cuda::modc_rows_24;
constexpr auto scatterLinear40x70 = rows_cuda::modc_rows_31;
constexpr auto scatterSigmoid40x70 = rows_cuda::modc_rows_32;
constexpr auto scatterOne40x70 = rows_cuda::modc_rows_33;
constexpr auto decodeRouter64 = rows_cuda::modc_rows_35;
constexpr auto decodeRouter128 = rows_cuda::modc_rows_37;
constexpr auto decodeRouter96 = rows_cuda::modc_rows_39;
constexpr auto decodeRouter32 = rows_cuda::modc_rows_41;
constexpr auto decodeGatherRmsnorm64 = rows_cuda::modc_rows_36;
constexpr auto decodeGatherRmsnorm128 = rows_cuda::modc_rows_38;
constexpr auto decodeGatherRmsnorm96 = rows_cuda::modc_rows_40;
constexpr auto decodeGatherRmsnorm32 = rows_cuda::modc_rows_42;
constexpr auto decodeScatterLinear64 = rows_cuda::modc_rows_46;
constexpr auto decodeScatterSigmoid64 = rows_cuda::modc_rows_47;
constexpr auto decodeScatterOne64 = rows_cuda::modc_rows_48;
constexpr auto decodeScatterSigmoid200 = rows_cuda::modc_rows_49;
// As gen_cpu's, with the device state (AdamCtl) for grad_scale and the
// other scalars read from a device array; launched as modc_adamw launches it.
constexpr auto adamwUpdate = rows_cuda::modc_optimizer_update;
// A block's partial sum of the terms per kNormChunk elements: (g, n,
// partial), launched by modk_cuda::adamw_norm.
constexpr auto gradNormTerms = rows_cuda::modc_optimizer_norm;
constexpr auto gatherGrad16x40 = rows_cuda::modc_rows_57;
// Its grouped form (modk-group-gemms): a table of M members' row counts
// and buffers, the grid's y the member.
using GatherGrad16x40Member = rows_cuda::modc_rows_57_member;
template <int M> using GatherGrad16x40Group = rows_cuda::modc_rows_57_group<M>;
template <int M>
constexpr auto gatherGrad16x40Grouped = rows_cuda::modc_rows_57_grouped<M>;
constexpr auto scatterGradLinear16x40 = rows_cuda::modc_rows_62;
constexpr auto scatterGradSigmoid16x40 = rows_cuda::modc_rows_63;
constexpr auto scatterGradOne16x40 = rows_cuda::modc_rows_64;
constexpr auto rmsnormGrad96 = rows_cuda::modc_rows_67;
constexpr auto rmsnormGradAcc96 = rows_cuda::modc_rows_68;
constexpr auto rmsnormGradAcc300 = rows_cuda::modc_rows_72;
constexpr auto rmsnormGrad64 = rows_cuda::modc_rows_73;
constexpr auto routerGrad16x40 = rows_cuda::modc_rows_76;
constexpr auto routerGrad24x300 = rows_cuda::modc_rows_77;
constexpr auto twoColumnSums40 = rows_cuda::modc_rows_78;
constexpr auto embed19x37 = rows_cuda::modc_rows_79;
constexpr auto predictor70 = rows_cuda::modc_rows_81;
constexpr auto predictorGrad24 = rows_cuda::modc_rows_84;
constexpr auto crossEntropy100 = rows_cuda::modc_rows_91;
constexpr auto crossEntropy100Bf16 = rows_cuda::modc_rows_92;
constexpr auto crossEntropy256 = rows_cuda::modc_rows_86;
constexpr auto crossEntropy600 = rows_cuda::modc_rows_93;
constexpr auto crossEntropy5000 = rows_cuda::modc_rows_94;
constexpr auto bce40 = rows_cuda::modc_rows_97;
constexpr auto roundBf16Rows48 = rows_cuda::modc_rows_98;
// As gen_cpu's, with the angle table last (null: each angle formed from
// theta; a package passes the one modc_cuda_init built).
constexpr auto ropeGrad3x16 = rows_cuda::modc_rows_102;
constexpr auto ropeGrad3x16Bf16 = rows_cuda::modc_rows_103;
// RoPE (RowKernelsCuda.h).
using namespace rope_kernels;
// As gen_cpu's: kernels reading column windows of stacked products (the
// RoPE one with the angle table last).
constexpr auto ropeWindow4x32 = rows_cuda::modc_rows_124;
constexpr auto swigluWindows50 = rows_cuda::modc_rows_125;
constexpr auto embedGrad9x40 = rows_cuda::modc_rows_126;
constexpr auto embedGrad600x300 = rows_cuda::modc_rows_127;
constexpr auto roundingCopy37 = rows_cuda::modc_rows_128;

/// A scatter-add kernel (the embedding's gradient), launched as the CUDA
/// emitter does: kScatterBlocks blocks, each owning the table rows of its
/// ids modulo the grid, of W columns' threads.
template <int W, typename... Params, typename... Args>
void launchScatter(void (*kernel)(const int64_t *, Params...),
                   const int64_t *rows, int64_t maxRows, Args... args) {
  namespace td = modk_cuda::train_detail;
  if (maxRows > 0)
    MODC_LAUNCH(kernel, unsigned(td::kScatterBlocks), td::colThreads<W>(), 0,
                nullptr, rows, args...);
}
using FusedGatherRmsnorm40x70 = rows_cuda::modc_gather_0;
using FusedGatherScale40x70 = rows_cuda::modc_gather_1;
using FusedDecodeGatherRmsnorm64 = rows_cuda::modc_gather_2;

/// A kernel with column sums of W columns (and row totals), launched as
/// the CUDA emitter does: a block per kRB of the `maxRows` rows writes its
/// partial row of `floats` sums (the column sums, then the totals) into
/// `scratch` (row_reduce_scratch_floats(maxRows, floats) floats), which
/// reduceColumns adds into `out` (the first out.n0 columns to out.p0, the
/// next out.n1 to out.p1, the rest to out.p2) in block order.
template <int W, typename... Params, typename... Args>
void launchColumnSums(void (*kernel)(const int64_t *, Params...),
                      const int64_t *rows, int64_t maxRows,
                      modk_cuda::train_detail::ColOut out, int floats,
                      float *scratch, Args... args) {
  namespace td = modk_cuda::train_detail;
  if (maxRows <= 0)
    return;
  MODC_LAUNCH(kernel, unsigned(modk_cuda::ceilDiv(maxRows, td::kRB)),
              td::colThreads<W>(), 0, nullptr, rows, args..., scratch);
  td::launchReduceColumns(scratch, floats, rows, 0, out, nullptr);
}

/// launchColumnSums of a kernel with one column sum, into `sums`.
template <int W, typename... Params, typename... Args>
void launchColumnSum(void (*kernel)(const int64_t *, Params...),
                     const int64_t *rows, int64_t maxRows, float *sums,
                     float *scratch, Args... args) {
  launchColumnSums<W>(kernel, rows, maxRows,
                      modk_cuda::train_detail::ColOut{sums, sums, sums, W, 0},
                      W, scratch, args...);
}
} // namespace gen_cuda
} // namespace
#endif

#endif // MODC_TEST_COMMON_ROWKERNELS_H
