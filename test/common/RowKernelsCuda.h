//===- RowKernelsCuda.h - The generated CUDA row kernels --------*- C++ -*-===//
//
// The CUDA kernels and GEMM epilogues modc generates from
// test/common/RowKernels.mlir (RowKernels.h names the kernels), once per
// translation unit. Include after the CUDA preludes (the mainloops'
// RowsEpilogue and EpiArgs). The tensor-core checks include it alone: the
// GPU build has no CPU prelude.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_COMMON_ROWKERNELSCUDA_H
#define MODC_TEST_COMMON_ROWKERNELSCUDA_H

#include "RowKernelsCuda.inc"

/// RoPE of a product's rows (RowKernels.mlir 104-123 and 129-134; gen_cpu names the
/// CPU forms alike): HxHD, theta 10^4 unless named, Bf16: rounded to bf16
/// values. <name> is the kernel (rows, pos, product, y, angle table), y may
/// be the product; <name>Epilogue the index I of the same math as a GEMM's
/// epilogue, RowsEpilogue<I>, whose EpiArgs carry pos, the table and y in
/// operands[1].
namespace rope_kernels {
constexpr auto rope4x32 = modc_rows::modc_rows_104;
constexpr int rope4x32Epilogue = 0;
constexpr auto rope4x32Bf16 = modc_rows::modc_rows_105;
constexpr int rope4x32Bf16Epilogue = 1;
constexpr auto rope2x128Theta5e5 = modc_rows::modc_rows_106;
constexpr int rope2x128Theta5e5Epilogue = 2;
constexpr auto rope2x128Theta5e5Bf16 = modc_rows::modc_rows_107;
constexpr int rope2x128Theta5e5Bf16Epilogue = 3;
constexpr auto rope3x24 = modc_rows::modc_rows_108;
constexpr int rope3x24Epilogue = 4;
constexpr auto rope3x24Bf16 = modc_rows::modc_rows_109;
constexpr int rope3x24Bf16Epilogue = 5;
constexpr auto rope8x64 = modc_rows::modc_rows_110;
constexpr int rope8x64Epilogue = 6;
constexpr auto rope3x22 = modc_rows::modc_rows_111;
constexpr int rope3x22Epilogue = 7;
constexpr auto rope3x22Theta5e5 = modc_rows::modc_rows_112;
constexpr int rope3x22Theta5e5Epilogue = 8;
constexpr auto rope3x32 = modc_rows::modc_rows_113;
constexpr int rope3x32Epilogue = 9;
constexpr auto rope3x32Bf16 = modc_rows::modc_rows_114;
constexpr int rope3x32Bf16Epilogue = 10;
constexpr auto rope2x32Bf16 = modc_rows::modc_rows_115;
constexpr int rope2x32Bf16Epilogue = 11;
constexpr auto rope3x16 = modc_rows::modc_rows_116;
constexpr int rope3x16Epilogue = 12;
constexpr auto rope3x16Bf16 = modc_rows::modc_rows_117;
constexpr int rope3x16Bf16Epilogue = 13;
constexpr auto rope2x64Bf16 = modc_rows::modc_rows_118;
constexpr int rope2x64Bf16Epilogue = 14;
constexpr auto rope2x128Bf16 = modc_rows::modc_rows_119;
constexpr int rope2x128Bf16Epilogue = 15;
constexpr auto rope3x64Bf16 = modc_rows::modc_rows_120;
constexpr int rope3x64Bf16Epilogue = 16;
constexpr auto rope2x64 = modc_rows::modc_rows_121;
constexpr int rope2x64Epilogue = 17;
constexpr auto rope2x128 = modc_rows::modc_rows_122;
constexpr int rope2x128Epilogue = 18;
constexpr auto rope3x64 = modc_rows::modc_rows_123;
constexpr int rope3x64Epilogue = 19;
// Head dims below 16 (RowKernels.mlir 129-134): no tile holds them.
constexpr auto rope4x8 = modc_rows::modc_rows_129;
constexpr int rope4x8Epilogue = 20;
constexpr auto rope4x8Bf16 = modc_rows::modc_rows_130;
constexpr int rope4x8Bf16Epilogue = 21;
constexpr auto rope6x4 = modc_rows::modc_rows_131;
constexpr int rope6x4Epilogue = 22;
constexpr auto rope6x4Bf16 = modc_rows::modc_rows_132;
constexpr int rope6x4Bf16Epilogue = 23;
constexpr auto rope5x2 = modc_rows::modc_rows_133;
constexpr int rope5x2Epilogue = 24;
constexpr auto rope5x2Bf16 = modc_rows::modc_rows_134;
constexpr int rope5x2Bf16Epilogue = 25;

/// The signature of the kernels above.
using Kernel = void (*)(const int64_t *, const int32_t *, const float *,
                        float *, const float2 *);

/// What modc emits for a product with the RoPE epilogue I (`kernel` the
/// same math): the epilogue in the GEMM's tiles where the plan's tile for
/// the row count holds whole heads, else the product, then the kernel in
/// place. True where it was fused.
template <int N, int K, int I, bool BF = false, typename TA>
bool linearRope(Kernel kernel, const TA *a, const int64_t *rows,
                int64_t maxRows, const float *w, const int32_t *pos,
                const float2 *table, int32_t positions, float *y,
                cudaStream_t s) {
  modk_cuda::detail::EpiArgs epi;
  epi.pos = pos;
  epi.ropeTable = table;
  epi.ropePositions = positions;
  epi.operands[1] = y;
  if (modk_cuda::linear_rows_epilogue<N, K, I, BF>(a, rows, maxRows, w, epi,
                                                   s))
    return true;
  modk_cuda::linear<N, K, BF>(a, rows, maxRows, w, y, s);
  if (maxRows > 0)
    MODC_LAUNCH(kernel,
                unsigned(modk_cuda::ceilDiv(maxRows,
                                            modk_cuda::detail::kRowWarps)),
                modk_cuda::detail::kThreads, 0, s, rows, pos, y, y, table);
  return false;
}
} // namespace rope_kernels

#endif // MODC_TEST_COMMON_ROWKERNELSCUDA_H
