//===- F32Math.h - Building the f32 math of kernel regions ------*- C++ -*-===//
//
// The passes that write kernel math as IR (modk-generalize's modk.rows,
// modk-generate-optimizer's modk.optimizer) build it through F32Math, so
// that their formulas read like those of docs/model-format.md.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_DIALECT_MODK_TRANSFORMS_F32MATH_H
#define MODC_DIALECT_MODK_TRANSFORMS_F32MATH_H

#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

namespace modc {

/// Builds the f32 math of a region: a thin layer over OpBuilder so that the
/// formulas read like the formulas of the docs.
struct F32Math {
  mlir::OpBuilder &b;
  mlir::Location loc;
  mlir::Value c(double v) {
    return mlir::arith::ConstantOp::create(b, loc, b.getF32FloatAttr(float(v)));
  }
  mlir::Value add(mlir::Value x, mlir::Value y) {
    return mlir::arith::AddFOp::create(b, loc, x, y);
  }
  mlir::Value sub(mlir::Value x, mlir::Value y) {
    return mlir::arith::SubFOp::create(b, loc, x, y);
  }
  mlir::Value mul(mlir::Value x, mlir::Value y) {
    return mlir::arith::MulFOp::create(b, loc, x, y);
  }
  mlir::Value div(mlir::Value x, mlir::Value y) {
    return mlir::arith::DivFOp::create(b, loc, x, y);
  }
  mlir::Value neg(mlir::Value x) {
    return mlir::arith::NegFOp::create(b, loc, x);
  }
  mlir::Value exp(mlir::Value x) {
    return mlir::math::ExpOp::create(b, loc, x);
  }
  mlir::Value erf(mlir::Value x) {
    return mlir::math::ErfOp::create(b, loc, x);
  }
  mlir::Value sqrt(mlir::Value x) {
    return mlir::math::SqrtOp::create(b, loc, x);
  }
  mlir::Value log(mlir::Value x) {
    return mlir::math::LogOp::create(b, loc, x);
  }
  /// log(1 + x), accurate for small x.
  mlir::Value log1p(mlir::Value x) {
    return mlir::math::Log1pOp::create(b, loc, x);
  }
  mlir::Value abs(mlir::Value x) {
    return mlir::math::AbsFOp::create(b, loc, x);
  }
  /// The larger of x and y (the other where one is NaN).
  mlir::Value max(mlir::Value x, mlir::Value y) {
    return mlir::arith::MaxNumFOp::create(b, loc, x, y);
  }
  /// x == y, x >= y: false where either is NaN.
  mlir::Value eq(mlir::Value x, mlir::Value y) {
    return mlir::arith::CmpFOp::create(b, loc, mlir::arith::CmpFPredicate::OEQ,
                                       x, y);
  }
  mlir::Value ge(mlir::Value x, mlir::Value y) {
    return mlir::arith::CmpFOp::create(b, loc, mlir::arith::CmpFPredicate::OGE,
                                       x, y);
  }
  /// cond ? x : y.
  mlir::Value select(mlir::Value cond, mlir::Value x, mlir::Value y) {
    return mlir::arith::SelectOp::create(b, loc, cond, x, y);
  }
  /// sigmoid(z) = 1 / (e^-z + 1).
  mlir::Value sigmoid(mlir::Value z) {
    return div(c(1.0), add(exp(neg(z)), c(1.0)));
  }
  /// silu(z) = z / (e^-z + 1).
  mlir::Value silu(mlir::Value z) { return div(z, add(exp(neg(z)), c(1.0))); }
  /// x rounded to the nearest bf16 (ties to even), as the f32 of that value:
  /// what a bf16 store keeps (docs/model-format.md, bf16 models).
  mlir::Value roundBf16(mlir::Value x) {
    mlir::Value narrow =
        mlir::arith::TruncFOp::create(b, loc, b.getBF16Type(), x);
    return mlir::arith::ExtFOp::create(b, loc, b.getF32Type(), narrow);
  }
  /// RoPE's (cos, sin) of the element's angle (modk.rope_angle).
  std::pair<mlir::Value, mlir::Value> ropeAngle(double theta) {
    auto angle = modk::RopeAngleOp::create(b, loc, b.getF32Type(),
                                           b.getF32Type(),
                                           b.getF64FloatAttr(theta));
    return {angle.getCos(), angle.getSin()};
  }
  /// x's element at the partner column of its head, signed
  /// (modk.rotate_half): RoPE is x cos + rotate_half(x) sin.
  mlir::Value rotateHalf(mlir::Value x) {
    return modk::RotateHalfOp::create(b, loc, b.getF32Type(), x);
  }
  /// The exact GELU's Phi(x) = 0.5 (1 + erf(x / sqrt 2)).
  mlir::Value normalCdf(mlir::Value x) {
    return mul(c(0.5), add(c(1.0), erf(mul(x, c(0.70710678118654752)))));
  }
};

} // namespace modc

#endif // MODC_DIALECT_MODK_TRANSFORMS_F32MATH_H
