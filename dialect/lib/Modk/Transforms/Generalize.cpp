//===- Generalize.cpp - Named row kernels to modk.rows ----------*- C++ -*-===//
//
// The row-wise kernels of the plan (RMSNorm, the residual add, the MLP's
// activation and its gradient, the gradients of a routed block's gather and
// gated scatter, the causal predictor and its gradient, and the losses), and
// the GEMM epilogues that modk-fuse-epilogues named (residual add, GELU,
// SwiGLU), are rewritten into modk.rows ops whose regions spell their math in
// arith and math ops, so that the emitters generate each target's kernel from
// one description instead of calling a hand-written kernel per target. The
// arithmetic is that of docs/model-format.md section 3 in the order of
// operations the numerics tests pin.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"
#include "modc/Dialect/Modk/Transforms/RowsBuilder.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace modc {
#define GEN_PASS_DEF_GENERALIZE
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
using modk::RegionFn;

using modk::rmsnormElement;
using modk::rmsnormScale;

using modk::Accessed;
using modk::column;
using modk::columnSum;
using modk::ids;
using modk::row;
using modk::rowSum;
using modk::rowValue;
using modk::scalar;
using modk::scatter;
using modk::table;
using modk::token;
using modk::tokenValue;

/// Creates a modk.rows before `op` (modk::createRows at `op`'s location).
modk::RowsOp createRows(PatternRewriter &rewriter, Operation *op,
                        ArrayRef<Accessed> inputs, Value segments,
                        ArrayRef<Accessed> outputs, unsigned reductions,
                        RegionFn reduce, RegionFn body,
                        Value positions = Value(),
                        std::optional<RegionFn> maxima = std::nullopt) {
  return modk::createRows(rewriter, op->getLoc(), inputs, segments, outputs,
                          reductions, reduce, body, positions, maxima);
}

/// Replaces `op` by the modk.rows that createRows builds.
void replaceWithRows(PatternRewriter &rewriter, Operation *op,
                     ArrayRef<Accessed> inputs, Value segments,
                     ArrayRef<Accessed> outputs, unsigned reductions,
                     RegionFn reduce, RegionFn body, Value positions = Value(),
                     std::optional<RegionFn> maxima = std::nullopt) {
  createRows(rewriter, op, inputs, segments, outputs, reductions, reduce, body,
             positions, maxima);
  rewriter.eraseOp(op);
}

SmallVector<Value> noSums(F32Math &, ValueRange) { return {}; }

/// A region that yields its first argument: a copy's element, or a row's
/// maximum that is the element itself.
SmallVector<Value> firstArgument(F32Math &, ValueRange a) { return {a[0]}; }

/// y = x / sqrt(mean(x^2) + eps) * w (docs/model-format.md section 3).
struct RMSNormToRows : OpRewritePattern<modk::RMSNormOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::RMSNormOp op,
                                PatternRewriter &rewriter) const override {
    double width = cast<MemRefType>(op.getOutput().getType()).getShape().back();
    float eps = float(op.getEps().convertToDouble());
    replaceWithRows(rewriter, op, {row(op.getInput()), column(op.getWeight())},
                    op.getSegments(), {row(op.getOutput())}, 1,
                    modk::squareOfFirst,
                    [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
                      return {rmsnormElement(m, a[0], a[1], a[2], width, eps)};
                    });
    return success();
  }
};

/// The segments of the identity row set (every token of every sequence, in
/// order) of `buffer`, a [B, T, ...] buffer of T tokens a sequence: the
/// entry's modk.identity_rows of that shape that runs before `op` (or a
/// decode step's modk.decode_rows, whose segments are the same: a row for
/// every sequence, active or not), or a new one right before `op`.
Value identitySegments(PatternRewriter &rewriter, Operation *op, Value buffer) {
  int64_t tokens = cast<MemRefType>(buffer.getType()).getDimSize(1);
  Value found;
  auto consider = [&](Operation *rows, Value positions, Value segments) {
    if (!found && rows->isBeforeInBlock(op) &&
        cast<MemRefType>(positions.getType()).getDimSize(1) == tokens)
      found = segments;
  };
  op->getParentOfType<modk::EntryOp>().walk([&](Operation *rows) {
    if (auto identity = dyn_cast<modk::IdentityRowsOp>(rows))
      consider(rows, identity.getPositions(), identity.getSegments());
    else if (auto decode = dyn_cast<modk::DecodeRowsOp>(rows))
      consider(rows, decode.getPositions(), decode.getSegments());
  });
  if (found)
    return found;
  Location loc = op->getLoc();
  auto alloc = [&](int64_t dim, Type element) -> Value {
    return modk::AllocOp::create(
        rewriter, loc, MemRefType::get({ShapedType::kDynamic, dim}, element),
        IntegerAttr());
  };
  Value positions = alloc(tokens, rewriter.getI32Type());
  Value segments = alloc(1, rewriter.getI64Type());
  modk::IdentityRowsOp::create(rewriter, loc, positions, segments);
  return segments;
}

/// y = a + b.
struct AddToRows : OpRewritePattern<modk::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::AddOp op,
                                PatternRewriter &rewriter) const override {
    replaceWithRows(rewriter, op, {row(op.getLhs()), row(op.getRhs())},
                    op.getSegments(), {row(op.getOutput())}, 0, noSums,
                    [](F32Math &m, ValueRange a) -> SmallVector<Value> {
                      return {m.add(a[0], a[1])};
                    });
    return success();
  }
};

/// The MLP's activations (docs/model-format.md section 3).
Value swigluElement(F32Math &m, Value gate, Value up) {
  return m.mul(m.silu(gate), up);
}
Value geluElement(F32Math &m, Value x) {
  return m.mul(m.mul(m.c(0.5), x),
               m.add(m.c(1.0), m.erf(m.mul(x, m.c(0.70710678118654752)))));
}

/// The head width of RoPE over `heads` heads of `rows`' rows, or nothing
/// where the rows do not split into heads of an even width.
std::optional<int64_t> ropeHeadDim(Value rows, int64_t heads) {
  int64_t width = cast<MemRefType>(rows.getType()).getShape().back();
  if (heads <= 0 || width % heads != 0 || (width / heads) % 2 != 0)
    return std::nullopt;
  return width / heads;
}

/// Creates RoPE over heads of `headDim` as a modk.rows from `x` into `y`
/// at the rows' `positions` (docs/model-format.md): y = x cos +
/// rotate_half(x) sin, or with `transpose` its transpose x cos -
/// rotate_half(x) sin; then rounded to bf16 where `roundBf16`.
void createRopeRows(PatternRewriter &rewriter, Operation *op, Value x,
                    Value segments, Value positions, Value y, int64_t headDim,
                    double theta, bool transpose, bool roundBf16) {
  modk::RowsOp rows = createRows(
      rewriter, op, {row(x)}, segments, {row(y)}, 0, noSums,
      [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
        auto [cos, sin] = m.ropeAngle(theta);
        Value rs = m.mul(m.rotateHalf(a[0]), sin);
        Value xc = m.mul(a[0], cos);
        Value r = transpose ? m.sub(xc, rs) : m.add(xc, rs);
        return {roundBf16 ? m.roundBf16(r) : r};
      },
      positions);
  rows.setHeadDimAttr(rewriter.getI64IntegerAttr(headDim));
}

/// The named epilogues of a GEMM become its `rows` epilogue: a modk.rows in
/// the GEMM's region, whose block argument is the product, finishes each
/// element as it is computed.
///  - residual_add: y = r + a W^T;
///  - gelu: y = gelu(a W^T);
///  - swiglu: the gate product g = a W_gate^T becomes a plain GEMM into its
///    scratch rows first, then y = silu(g) * (a W_up^T);
///  - a plain product that modk-store-bf16 marked `round_bf16` (the values
///    attention reads in a bf16 entry): y = bf16(a W^T), held as f32;
///  - a plain product into a bf16 buffer (one that only products read):
///    y = a W^T, rounded as it is stored;
///  - rope: y = x cos + rotate_half(x) sin at the row's position, per head
///    (the queries and keys), then bf16(y) where it is `round_bf16`.
/// modk-fuse-epilogues and modk-store-bf16 decided these; this spells their
/// math.
struct NamedEpilogueToRows : OpRewritePattern<modk::GemmOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::GemmOp op,
                                PatternRewriter &rewriter) const override {
    modk::Epilogue e = op.getEpilogue();
    const bool rounded = e == modk::Epilogue::none && op.getRoundBf16();
    const bool storedBf16 =
        e == modk::Epilogue::none && op.getWeights().size() == 1 &&
        cast<MemRefType>(op.getOutput().getType()).getElementType().isBF16();
    const bool rope = e == modk::Epilogue::rope;
    if (e != modk::Epilogue::residual_add && e != modk::Epilogue::gelu &&
        e != modk::Epilogue::swiglu && !rounded && !storedBf16 && !rope)
      return failure();
    if (op.getRoundBf16() && !rounded && !rope)
      return rewriter.notifyMatchFailure(op, "rounds its output for attention");
    std::optional<int64_t> headDim;
    if (rope && !(headDim = ropeHeadDim(op.getOutput(), *op.getNHeads())))
      return rewriter.notifyMatchFailure(op, "heads of an odd width");
    const bool roundRope = rope && op.getRoundBf16();
    const double theta = rope ? op.getRopeTheta()->convertToDouble() : 0.0;
    SmallVector<Value> extra(op.getExtra());
    if (e == modk::Epilogue::swiglu) {
      rewriter.setInsertionPoint(op);
      modk::GemmOp::create(rewriter, op.getLoc(), op.getInput(),
                           op.getWeights()[0], op.getSegments(), ValueRange{},
                           extra[0], modk::Epilogue::none,
                           op.getPrecisionAttr(), op.getCausalOnly());
    }
    Value up = op.getWeights().back();
    rewriter.modifyOpInPlace(op, [&] {
      op.getWeightsMutable().assign(up);
      op.getExtraMutable().clear();
      op.setEpilogue(modk::Epilogue::rows);
      op.setRoundBf16(false);
      op.removeNHeadsAttr();
      op.removeRopeThetaAttr();
    });
    auto outType = cast<MemRefType>(op.getOutput().getType());
    Block *block = rewriter.createBlock(
        &op.getFusedRows(), {},
        {MemRefType::get(outType.getShape(), rewriter.getF32Type())},
        {op.getLoc()});
    Value product = block->getArgument(0);
    rewriter.setInsertionPointToEnd(block);
    auto rows = [&](ArrayRef<Accessed> inputs, RegionFn body) {
      createRows(rewriter, op, inputs, op.getSegments(), {row(op.getOutput())},
                 0, noSums, body);
    };
    if (rope)
      createRopeRows(rewriter, op, product, op.getSegments(), extra[0],
                     op.getOutput(), *headDim, theta, /*transpose=*/false,
                     roundRope);
    else if (rounded)
      rows({row(product)}, [](F32Math &m, ValueRange a) -> SmallVector<Value> {
        return {m.roundBf16(a[0])};
      });
    else if (storedBf16)
      rows({row(product)}, firstArgument);
    else if (e == modk::Epilogue::residual_add)
      rows({row(extra[0]), row(product)},
           [](F32Math &m, ValueRange a) -> SmallVector<Value> {
             return {m.add(a[0], a[1])};
           });
    else if (e == modk::Epilogue::gelu)
      rows({row(product)}, [](F32Math &m, ValueRange a) -> SmallVector<Value> {
        return {geluElement(m, a[0])};
      });
    else
      rows({row(extra[0]), row(product)},
           [](F32Math &m, ValueRange a) -> SmallVector<Value> {
             return {swigluElement(m, a[0], a[1])};
           });
    return success();
  }
};

/// A copy of an f32 buffer into bf16 (a gradient that only products read,
/// modk-store-bf16): a row kernel over every row whose body is the element,
/// rounded as it is stored. A copy within one element type stays a copy.
struct RoundingCopyToRows : OpRewritePattern<modk::CopyOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::CopyOp op,
                                PatternRewriter &rewriter) const override {
    auto in = cast<MemRefType>(op.getInput().getType());
    auto out = cast<MemRefType>(op.getOutput().getType());
    if (in.getElementType() == out.getElementType())
      return failure();
    if (in.getRank() != 3)
      return rewriter.notifyMatchFailure(op, "not a buffer of rows");
    replaceWithRows(rewriter, op, {row(op.getInput())},
                    identitySegments(rewriter, op, op.getInput()),
                    {row(op.getOutput())}, 0, noSums, firstArgument);
    return success();
  }
};

/// u = silu(gate) * up, or u = gelu(pre).
struct ActivationToRows : OpRewritePattern<modk::ActivationOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::ActivationOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getKind() == modc::Activation::swiglu) {
      replaceWithRows(rewriter, op, {row(op.getGate()), row(op.getUp())},
                      op.getSegments(), {row(op.getOutput())}, 0, noSums,
                      [](F32Math &m, ValueRange a) -> SmallVector<Value> {
                        return {swigluElement(m, a[0], a[1])};
                      });
      return success();
    }
    replaceWithRows(rewriter, op, {row(op.getUp())}, op.getSegments(),
                    {row(op.getOutput())}, 0, noSums,
                    [](F32Math &m, ValueRange a) -> SmallVector<Value> {
                      return {geluElement(m, a[0])};
                    });
    return success();
  }
};

/// swiglu: dgate = du up s (1 + g (1 - s)), dup = du g s with s =
/// sigmoid(g); gelu: dpre = du (Phi(x) + x phi(x)).
struct ActivationGradToRows : OpRewritePattern<modk::ActivationGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::ActivationGradOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getKind() == modc::Activation::swiglu) {
      replaceWithRows(
          rewriter, op, {row(op.getGate()), row(op.getUp()), row(op.getDu())},
          op.getSegments(), {row(op.getDgate()), row(op.getDup())}, 0, noSums,
          [](F32Math &m, ValueRange a) -> SmallVector<Value> {
            Value g = a[0], u = a[1], du = a[2];
            Value s = m.sigmoid(g);
            Value dsilu = m.mul(s, m.add(m.c(1.0), m.mul(g, m.sub(m.c(1.0), s))));
            return {m.mul(m.mul(du, u), dsilu), m.mul(du, m.mul(g, s))};
          });
      return success();
    }
    replaceWithRows(rewriter, op, {row(op.getUp()), row(op.getDu())},
                    op.getSegments(), {row(op.getDup())}, 0, noSums,
                    [](F32Math &m, ValueRange a) -> SmallVector<Value> {
                      Value x = a[0], du = a[1];
                      Value pdf = m.mul(m.c(0.39894228040143268),
                                        m.exp(m.mul(m.mul(m.c(-0.5), x), x)));
                      return {m.mul(du, m.add(m.normalCdf(x), m.mul(x, pdf)))};
                    });
    return success();
  }
};

/// The gradient of a routed block's gather (docs/model-format.md section
/// 5): dx[token] = dx[token] + dxs[row] for each selected row, at its token
/// (distinct tokens within a row set: no two rows add into one).
struct GatherGradToRows : OpRewritePattern<modk::GatherGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::GatherGradOp op,
                                PatternRewriter &rewriter) const override {
    replaceWithRows(
        rewriter, op, {row(op.getDgathered()), token(op.getDx())},
        op.getSegments(), {token(op.getDx())}, 0, noSums,
        [](F32Math &m, ValueRange a) -> SmallVector<Value> {
          return {m.add(a[1], a[0])};
        },
        op.getPositions());
    return success();
  }
};

/// The gradient of the gated scatter x[t] += g(r[t]) f[j], t the token of
/// selected row j (docs/model-format.md section 5): df[j] = g(r[t]) dy[t]
/// and dr[t] = dr[t] + g'(r[t]) <dy[t], f[j]>, the dot product the row's
/// one sum. With the gate `one` (g = 1) the router gets no gradient:
/// df = dy, and r and dr are not touched.
struct ScatterGradToRows : OpRewritePattern<modk::ScatterGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::ScatterGradOp op,
                                PatternRewriter &rewriter) const override {
    modc::Gate gate = op.getGate();
    if (gate == modc::Gate::one) {
      replaceWithRows(rewriter, op, {token(op.getDy())}, op.getSegments(),
                      {row(op.getDf())}, 0, noSums, firstArgument,
                      op.getPositions());
      return success();
    }
    // Inputs dy (token), f, r (token), dr (token); outputs df, dr (token).
    replaceWithRows(
        rewriter, op,
        {token(op.getDy()), row(op.getUpdate()), tokenValue(op.getScores()),
         tokenValue(op.getDscores())},
        op.getSegments(), {row(op.getDf()), tokenValue(op.getDscores())}, 1,
        [](F32Math &m, ValueRange a) -> SmallVector<Value> {
          return {m.mul(a[0], a[1])};
        },
        [gate](F32Math &m, ValueRange a) -> SmallVector<Value> {
          Value dy = a[0], r = a[2], dr = a[3], dot = a[4];
          if (gate == modc::Gate::linear) // g = r, g' = 1
            return {m.mul(r, dy), m.add(dr, dot)};
          Value g = m.sigmoid(r);
          Value slope = m.mul(g, m.sub(m.c(1.0), g)); // g' = g (1 - g)
          return {m.mul(g, dy), m.add(dr, m.mul(slope, dot))};
        },
        op.getPositions());
    return success();
  }
};

/// The gradient of y = x / sqrt(mean(x^2) + eps) * w (docs/model-format.md
/// section 5) on the rows: two sums a row, ss = sum x^2 and
/// dot = sum dy w x; with inv = 1 / sqrt(ss / D + eps),
/// dx = inv (dy w - x dot inv^2 / D), added to dx when `accumulate`, and
/// the column sum dw += dy x inv.
struct RMSNormGradToRows : OpRewritePattern<modk::RMSNormGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::RMSNormGradOp op,
                                PatternRewriter &rewriter) const override {
    double width = cast<MemRefType>(op.getInput().getType()).getShape().back();
    float eps = float(op.getEps().convertToDouble());
    bool accumulate = op.getAccumulate();
    SmallVector<Accessed> inputs = {row(op.getInput()), column(op.getWeight()),
                                    row(op.getDy())};
    if (accumulate)
      inputs.push_back(row(op.getDx()));
    unsigned nIn = inputs.size();
    replaceWithRows(
        rewriter, op, inputs, op.getSegments(),
        {row(op.getDx()), columnSum(op.getDw())}, 2,
        [](F32Math &m, ValueRange a) -> SmallVector<Value> {
          return {m.mul(a[0], a[0]), m.mul(m.mul(a[2], a[1]), a[0])};
        },
        [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
          Value x = a[0], w = a[1], dy = a[2];
          Value ss = a[nIn], dot = a[nIn + 1];
          Value inv = rmsnormScale(m, ss, width, eps);
          // mean(dy w xhat) * inv, folded so xhat is never formed.
          Value c = m.div(m.mul(m.mul(dot, inv), inv), m.c(width));
          Value dx = m.mul(inv, m.sub(m.mul(dy, w), m.mul(x, c)));
          if (accumulate)
            dx = m.add(a[3], dx);
          return {dx, m.mul(m.mul(dy, x), inv)};
        });
    return success();
  }
};

/// The transpose of RoPE (docs/model-format.md, RoPE): each head's pairs
/// rotated by minus their angle, dx = dy cos - rotate_half(dy) sin, out of
/// place (dx may be bf16: only products read it).
struct RopeGradToRows : OpRewritePattern<modk::RopeGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::RopeGradOp op,
                                PatternRewriter &rewriter) const override {
    std::optional<int64_t> headDim = ropeHeadDim(op.getGrad(), op.getNHeads());
    if (!headDim)
      return rewriter.notifyMatchFailure(op, "heads of an odd width");
    createRopeRows(rewriter, op, op.getGrad(), op.getSegments(),
                   op.getPositions(), op.getOutput(), *headDim,
                   op.getRopeTheta().convertToDouble(), /*transpose=*/true,
                   /*roundBf16=*/false);
    rewriter.eraseOp(op);
    return success();
  }
};

/// The gradient of the router r = w . x over every token (the identity row
/// set of the stream's tokens; docs/model-format.md section 5): dx = dx + dr w at every element, dr the
/// row's one value, and the column sum dw += dr x.
struct RouterGradToRows : OpRewritePattern<modk::RouterGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::RouterGradOp op,
                                PatternRewriter &rewriter) const override {
    Value all = identitySegments(rewriter, op, op.getInput());
    replaceWithRows(rewriter, op,
                    {row(op.getInput()), column(op.getWeight()),
                     rowValue(op.getDscores()), row(op.getDx())},
                    all, {row(op.getDx()), columnSum(op.getDw())}, 0, noSums,
                    [](F32Math &m, ValueRange a) -> SmallVector<Value> {
                      Value x = a[0], w = a[1], dr = a[2], dx = a[3];
                      return {m.add(dx, m.mul(dr, w)), m.mul(dr, x)};
                    });
    return success();
  }
};

/// The embedding lookup x[b, i] = table[tokens[b, i]] (docs/model-format.md
/// section 3) over every token (the identity row set of the tokens): a row
/// kernel whose one input element is the table's, at the token's row.
struct EmbedToRows : OpRewritePattern<modk::EmbedOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::EmbedOp op,
                                PatternRewriter &rewriter) const override {
    Value all = identitySegments(rewriter, op, op.getTokens());
    replaceWithRows(
        rewriter, op, {ids(op.getTokens()), table(op.getTable())}, all,
        {row(op.getOutput())}, 0, noSums,
        [](F32Math &, ValueRange a) -> SmallVector<Value> { return {a[1]}; });
    return success();
  }
};

/// The embedding's gradient dtable[tokens[b, i]] += dx[b, i] (the
/// lookup's adjoint) over every token: a row kernel that scatter-adds each
/// row's element into the table row its token selects, rows with equal
/// tokens in row order.
struct EmbedGradToRows : OpRewritePattern<modk::EmbedGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::EmbedGradOp op,
                                PatternRewriter &rewriter) const override {
    Value all = identitySegments(rewriter, op, op.getTokens());
    replaceWithRows(rewriter, op, {row(op.getDx()), ids(op.getTokens())}, all,
                    {scatter(op.getDtable())}, 0, noSums, firstArgument);
    return success();
  }
};

/// A product of the causal predictor over every token of `input` (the
/// identity row set `all`): f32 even in a bf16 model, where the predictor
/// stays outside the bf16 rule (docs/model-format.md, bf16 models).
modk::GemmOp createPredictorProduct(PatternRewriter &rewriter, Location loc,
                                    Value input, Value weight, Value all,
                                    Value output, bool causalOnly) {
  return modk::GemmOp::create(
      rewriter, loc, input, weight, all, ValueRange{}, output,
      modk::Epilogue::none,
      modk::DTypeAttr::get(rewriter.getContext(), modc::DType::f32),
      causalOnly);
}

/// The causal predictor p = fc2 . silu(fc1 x + b1) + b2
/// (docs/model-format.md section 4) over every token: fc1's product into
/// the hidden rows h, then a modk.rows with one sum a row,
/// sum_c silu(h_c + b1_c) fc2_c, and p = sum + b2 stored once a row. In a
/// forward entry both run only where causal decisions are read.
struct PredictorToRows : OpRewritePattern<modk::PredictorOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::PredictorOp op,
                                PatternRewriter &rewriter) const override {
    Value all = identitySegments(rewriter, op, op.getInput());
    bool causalOnly = op.getCausalOnly();
    createPredictorProduct(rewriter, op.getLoc(), op.getInput(),
                           op.getFc1Weight(), all, op.getHidden(), causalOnly);
    // Inputs h, b1, fc2 (a vector [1, H]), b2 (a scalar [1]).
    modk::RowsOp rows = createRows(
        rewriter, op,
        {row(op.getHidden()), column(op.getFc1Bias()),
         column(op.getFc2Weight()), scalar(op.getFc2Bias())},
        all, {rowValue(op.getOutput())}, 1,
        [](F32Math &m, ValueRange a) -> SmallVector<Value> {
          return {m.mul(m.silu(m.add(a[0], a[1])), a[2])};
        },
        [](F32Math &m, ValueRange a) -> SmallVector<Value> {
          return {m.add(a[4], a[3])};
        });
    rows.setCausalOnly(causalOnly);
    rewriter.eraseOp(op);
    return success();
  }
};

/// The gradient of the predictor's parameters (docs/model-format.md
/// section 5; its input is behind a stop-gradient): fc1's product again
/// into h, then a modk.rows over every token with z = h + b1,
/// s = sigmoid(z) and g = dp, the row's one value:
/// dz = g fc2 s (1 + z (1 - s)) in place of h, the column sums
/// db1 += dz and dfc2 += g z s, and the row total db2 += g; then
/// dfc1 += dz^T x. All f32, like the forward.
struct PredictorGradToRows : OpRewritePattern<modk::PredictorGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(modk::PredictorGradOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value all = identitySegments(rewriter, op, op.getInput());
    Value hidden = op.getHidden();
    createPredictorProduct(rewriter, loc, op.getInput(), op.getFc1Weight(),
                           all, hidden, /*causalOnly=*/false);
    createRows(
        rewriter, op,
        {row(hidden), column(op.getFc1Bias()), column(op.getFc2Weight()),
         rowValue(op.getDp())},
        all,
        {row(hidden), columnSum(op.getDfc1Bias()),
         columnSum(op.getDfc2Weight()), rowSum(op.getDfc2Bias())},
        0, noSums, [](F32Math &m, ValueRange a) -> SmallVector<Value> {
          Value z = m.add(a[0], a[1]), w2 = a[2], g = a[3];
          Value s = m.sigmoid(z);
          Value dz = m.mul(m.mul(g, w2),
                           m.mul(s, m.add(m.c(1.0),
                                          m.mul(z, m.sub(m.c(1.0), s)))));
          return {dz, dz, m.mul(g, m.mul(z, s)), g};
        });
    modk::GemmWgradOp::create(
        rewriter, loc, hidden, op.getInput(), all, op.getDfc1Weight(), nullptr,
        modk::DTypeAttr::get(rewriter.getContext(), modc::DType::f32));
    rewriter.eraseOp(op);
    return success();
  }
};

/// Element `index` of the losses [total, ce, aux] as a buffer [1] of its
/// own (a memref.subview), into which a row total adds.
Value lossElement(PatternRewriter &rewriter, Location loc, Value losses,
                  int64_t index) {
  return memref::SubViewOp::create(rewriter, loc, losses,
                                   ArrayRef<OpFoldResult>{
                                       rewriter.getIndexAttr(index)},
                                   ArrayRef<OpFoldResult>{
                                       rewriter.getIndexAttr(1)},
                                   ArrayRef<OpFoldResult>{
                                       rewriter.getIndexAttr(1)});
}

/// The mean next-token cross-entropy (docs/model-format.md section 4) over
/// every token: `losses` is zeroed, then a modk.rows over the logits z and
/// the target t of a row (an i32 class) finds the row's maximum m, sums
/// s = sum_c e^(z_c - m) and the target's logit z_t = sum_c [c == t] z_c,
/// and adds (m + log s - z_t) / rows into losses[1] (ce) and losses[0]
/// (total) as row totals: the mean over the rows. With `dlogits`, it
/// writes the gradient of that mean, (softmax(z) - onehot(t)) / rows.
void crossEntropyRows(PatternRewriter &rewriter, Operation *op, Value logits,
                      Value targets, Value dlogits, Value losses) {
  Location loc = op->getLoc();
  Value all = identitySegments(rewriter, op, logits);
  modk::ZeroOp::create(rewriter, loc, losses);
  SmallVector<Accessed> outputs;
  if (dlogits)
    outputs.push_back(row(dlogits));
  outputs.push_back(rowSum(lossElement(rewriter, loc, losses, 1)));
  outputs.push_back(rowSum(lossElement(rewriter, loc, losses, 0)));
  auto isTarget = [](F32Math &m, Value t) {
    return m.eq(modk::ColumnOp::create(m.b, m.loc, m.b.getF32Type()), t);
  };
  // Inputs z, t; the body reads z, t, m, then the sums s and z_t.
  replaceWithRows(
      rewriter, op, {row(logits), rowValue(targets)}, all, outputs, 2,
      [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
        Value z = a[0], t = a[1], max = a[2];
        return {m.exp(m.sub(z, max)), m.select(isTarget(m, t), z, m.c(0.0))};
      },
      [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
        Value z = a[0], t = a[1], max = a[2], s = a[3], zt = a[4];
        Value inv = m.div(m.c(1.0), modk::RowCountOp::create(
                                        m.b, m.loc, m.b.getF32Type()));
        Value loss = m.mul(m.sub(m.add(max, m.log(s)), zt), inv);
        if (!dlogits)
          return {loss, loss};
        Value p = m.mul(m.exp(m.sub(z, max)), m.div(inv, s));
        Value dz = m.sub(p, m.select(isTarget(m, t), inv, m.c(0.0)));
        return {dz, loss, loss};
      },
      Value(), RegionFn(firstArgument)); // the row's maximum of z
}

/// One routed layer's causal-router loss (docs/model-format.md section 4):
/// BCEWithLogits(z, y) = max(z, 0) - z y + log(1 + e^-|z|) of every token's
/// logit z and top-k membership y (an i32 0 or 1), scaled by
/// 1 / (rows n_routed) (the mean over the tokens and the routed layers),
/// added into losses[2] (aux) and, times `weight`, losses[0] (total) as
/// row totals. With `dz`, it adds the gradient of weight times that,
/// weight (sigmoid(z) - y) / (rows n_routed), with the sigmoid formed from
/// e^-|z| only (no overflow).
void bceRows(PatternRewriter &rewriter, Operation *op, Value logits,
             Value mask, Value dz, Value losses, double weight,
             int64_t nRouted) {
  Location loc = op->getLoc();
  Value all = identitySegments(rewriter, op, logits);
  SmallVector<Accessed> inputs = {rowValue(logits), rowValue(mask)}, outputs;
  if (dz) {
    inputs.push_back(rowValue(dz));
    outputs.push_back(rowValue(dz));
  }
  outputs.push_back(rowSum(lossElement(rewriter, loc, losses, 2)));
  outputs.push_back(rowSum(lossElement(rewriter, loc, losses, 0)));
  replaceWithRows(
      rewriter, op, inputs, all, outputs, 0, noSums,
      [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
        Value z = a[0], y = a[1];
        Value rows = modk::RowCountOp::create(m.b, m.loc, m.b.getF32Type());
        Value scale = m.div(m.c(1.0), m.mul(rows, m.c(double(nRouted))));
        Value e = m.exp(m.neg(m.abs(z)));
        Value loss =
            m.add(m.sub(m.max(z, m.c(0.0)), m.mul(z, y)), m.log1p(e));
        Value aux = m.mul(loss, scale);
        Value total = m.mul(aux, m.c(weight));
        if (!dz)
          return {aux, total};
        Value onePlusE = m.add(m.c(1.0), e);
        Value sigmoid = m.select(m.ge(z, m.c(0.0)), m.div(m.c(1.0), onePlusE),
                                 m.div(e, onePlusE));
        Value grad = m.mul(m.mul(m.c(weight), scale), m.sub(sigmoid, y));
        return {m.add(a[2], grad), aux, total};
      });
}

/// The two losses and their loss-only forms (the eval entry's): the same
/// row kernels, the loss-only ones without the gradient.
template <typename LossOp> struct LossToRows : OpRewritePattern<LossOp> {
  using OpRewritePattern<LossOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(LossOp op,
                                PatternRewriter &rewriter) const override {
    constexpr bool withGradient =
        std::is_same_v<LossOp, modk::CrossEntropyOp> ||
        std::is_same_v<LossOp, modk::BCELossOp>;
    Value gradient;
    if constexpr (withGradient)
      gradient = op.getDlogits();
    if constexpr (std::is_same_v<LossOp, modk::CrossEntropyOp> ||
                  std::is_same_v<LossOp, modk::CrossEntropyLossOp>)
      crossEntropyRows(rewriter, op, op.getLogits(), op.getTargets(),
                       gradient, op.getLosses());
    else
      bceRows(rewriter, op, op.getLogits(), op.getMask(), gradient,
              op.getLosses(), op.getWeight().convertToDouble(),
              op.getNRouted());
    return success();
  }
};

struct GeneralizePass : public modc::impl::GeneralizeBase<GeneralizePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns
        .add<RMSNormToRows, AddToRows, ActivationToRows, ActivationGradToRows,
             GatherGradToRows, ScatterGradToRows, RMSNormGradToRows,
             RouterGradToRows, RopeGradToRows, NamedEpilogueToRows,
             RoundingCopyToRows, EmbedToRows, EmbedGradToRows, PredictorToRows,
             PredictorGradToRows, LossToRows<modk::CrossEntropyOp>,
             LossToRows<modk::CrossEntropyLossOp>, LossToRows<modk::BCELossOp>,
             LossToRows<modk::BCELossValueOp>>(&getContext());
    // One walk, each op rewritten where it stands: the plan's order is its
    // execution order, and nothing is folded or erased as dead.
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};
} // namespace
