//===- RowsBuilder.h - Building modk.rows kernels ----------------*- C++
//-*-===//
//
// The lowering (convert-mod-to-modk) and modk-generalize write row kernels
// as modk.rows ops whose regions hold their math: each operand with its
// declared access (docs/compiler.md, stage 5e, "Operand access"), the
// regions built through F32Math.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_DIALECT_MODK_TRANSFORMS_ROWSBUILDER_H
#define MODC_DIALECT_MODK_TRANSFORMS_ROWSBUILDER_H

#include "modc/Dialect/Modk/ModkDialect.h"
#include "modc/Dialect/Modk/Transforms/F32Math.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace modc::modk {

/// Builds one region of a modk.rows: gets the block's arguments, returns
/// what it yields.
using RegionFn = llvm::function_ref<llvm::SmallVector<mlir::Value>(
    F32Math &, mlir::ValueRange args)>;

/// An operand of a modk.rows and how the kernel addresses it.
struct Accessed {
  mlir::Value value;
  Access access;
};
inline Accessed row(mlir::Value v) { return {v, Access::row}; }
inline Accessed token(mlir::Value v) { return {v, Access::token}; }
inline Accessed rowValue(mlir::Value v) { return {v, Access::row_value}; }
inline Accessed tokenValue(mlir::Value v) { return {v, Access::token_value}; }
inline Accessed column(mlir::Value v) { return {v, Access::column}; }
inline Accessed scalar(mlir::Value v) { return {v, Access::scalar}; }
inline Accessed table(mlir::Value v) { return {v, Access::table}; }
inline Accessed ids(mlir::Value v) { return {v, Access::ids}; }
inline Accessed columnSum(mlir::Value v) { return {v, Access::column_sum}; }
inline Accessed rowSum(mlir::Value v) { return {v, Access::row_sum}; }
inline Accessed scatter(mlir::Value v) { return {v, Access::scatter}; }

/// Creates a modk.rows over `inputs` into `outputs` on the row set
/// `segments` at the builder's insertion point, each operand addressed as
/// it says, with `reduce` and `body` building its regions. `positions` are
/// the rows' positions within their sequences where token accesses need
/// them (none: one token a sequence). `maxima`, where given, builds the
/// region whose values' maxima over the row `reduce` and `body` get after
/// the elements. The builder's insertion point is left after the op.
RowsOp createRows(mlir::OpBuilder &b, mlir::Location loc,
                  llvm::ArrayRef<Accessed> inputs, mlir::Value segments,
                  llvm::ArrayRef<Accessed> outputs, unsigned reductions,
                  RegionFn reduce, RegionFn body,
                  mlir::Value positions = mlir::Value(),
                  std::optional<RegionFn> maxima = std::nullopt);

/// The routed block's gated residual (docs/model-format.md section 3, step
/// 5) at the insertion point: for each row of `segments`, at its token,
/// stream = stream + g(r) * (a + m), with `attention` a, the MLP's rows
/// `update` m and the router `scores` r read at the token (without
/// `attention`, `update` is the whole branch a + m); g(r) = r,
/// sigmoid(r) or 1 by `gate`. `positions`: the rows' positions, or none
/// where the stream holds one token a sequence (a decode step). Tokens that
/// skip the block are neither read nor written.
RowsOp createGatedScatter(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value attention, mlir::Value update,
                          mlir::Value scores, mlir::Value stream,
                          mlir::Value segments, mlir::Value positions,
                          Gate gate);

/// RMSNorm's scale of a row from its sum of squares: 1 / sqrt(sum / width +
/// eps) (docs/model-format.md section 3).
mlir::Value rmsnormScale(F32Math &m, mlir::Value squares, double width,
                         float eps);
/// One element of RMSNorm: x * rmsnormScale(squares) * w.
mlir::Value rmsnormElement(F32Math &m, mlir::Value x, mlir::Value w,
                           mlir::Value squares, double width, float eps);
/// A reduce region for RMSNorm: the square of the first argument.
llvm::SmallVector<mlir::Value> squareOfFirst(F32Math &m, mlir::ValueRange a);

/// The router of a routed layer (docs/model-format.md section 3, step 2) at
/// the insertion point: r = w . x for every row of `allRows`, the row set of
/// every token of `stream`, stored once a row into `scores`.
RowsOp createRouterRows(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value stream, mlir::Value weight,
                        mlir::Value allRows, mlir::Value scores);

/// The gather of a routed layer's selected tokens (step 3): for each row of
/// `segments`, gathered = stream[token], read at the row's `positions`
/// (none: one token a sequence). With `normWeight`, the same kernel also
/// writes normed = rmsnorm(gathered; w) (the attention norm of the routed
/// rows, a sum a row).
RowsOp createGatherRows(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::Value stream, mlir::Value segments,
                        mlir::Value positions, mlir::Value gathered,
                        mlir::Value normWeight = mlir::Value(),
                        mlir::Value normed = mlir::Value(), float eps = 0);

} // namespace modc::modk

#endif // MODC_DIALECT_MODK_TRANSFORMS_ROWSBUILDER_H
