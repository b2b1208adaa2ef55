//===- BufferQueries.h - What the plan's kernels do to buffers --*- C++ -*-===//
//
// Questions the modk fusion passes ask before moving work between kernels:
// which buffer a value views, whether an op may write a buffer, whether a
// row set covers every row of a buffer.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_DIALECT_MODK_TRANSFORMS_BUFFERQUERIES_H
#define MODC_DIALECT_MODK_TRANSFORMS_BUFFERQUERIES_H

#include "modc/Dialect/Modk/ModkDialect.h"

namespace modc::modk {

/// The buffer `v` views (through column windows and subviews), or v.
mlir::Value viewedBuffer(mlir::Value v);

/// Whether `op` or an op nested in it has `buffer`, or a view of it, as an
/// operand.
bool touches(mlir::Operation *op, mlir::Value buffer);

/// Whether `op` or an op nested in it may write `buffer` or a view of it:
/// by its declared memory effects, or, where an op declares none, by
/// having it as an operand.
bool mayWrite(mlir::Operation *op, mlir::Value buffer);

/// Whether `segments` is a row set of every row of a [B, S, ...] buffer of
/// `type`: the segments that a modk.identity_rows of S positions a sequence
/// writes.
bool coversEveryRow(mlir::Value segments, mlir::MemRefType type);

/// What the host knows of the row count of `segments` over a [B, S, ...]
/// buffer of `type`: what a kernel that computes every row up to the count
/// it is given (CUTLASS's on sm_90a) may take.
enum class HostRowCount {
  /// Always the bound, B x S: a dense layer's rows (coversEveryRow), a
  /// decode step's dense rows (modk.decode_rows, S = 1) or a top-k
  /// selection of k = S rows a sequence without a causal router.
  bound,
  /// B x k in `topk` mode (a top-k selection of k rows a sequence, which
  /// writes seg[b] = b k), the device's in `causal` mode (a causal
  /// router's selection); `k` is set.
  topk,
  /// The device's only (an MoE layer's experts' rows).
  device,
};
HostRowCount hostRowCount(mlir::Value segments, mlir::MemRefType type,
                          int64_t *k = nullptr);

/// The row set of a kernel that modk-group-gemms may put in a group: a
/// modk.gemm, modk.gemm_dgrad, modk.gemm_wgrad or modk.rows.
mlir::Value groupMemberSegments(mlir::Operation *op);

} // namespace modc::modk

#endif // MODC_DIALECT_MODK_TRANSFORMS_BUFFERQUERIES_H
