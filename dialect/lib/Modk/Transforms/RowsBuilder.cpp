//===- RowsBuilder.cpp - Building modk.rows kernels --------------*- C++
//-*-===//

#include "modc/Dialect/Modk/Transforms/RowsBuilder.h"

#include "llvm/ADT/SmallVectorExtras.h"

using namespace mlir;
using namespace modc;
using namespace modc::modk;

RowsOp modk::createRows(OpBuilder &b, Location loc, ArrayRef<Accessed> inputs,
                        Value segments, ArrayRef<Accessed> outputs,
                        unsigned reductions, RegionFn reduce, RegionFn body,
                        Value positions, std::optional<RegionFn> maxima) {
  auto values = [](ArrayRef<Accessed> operands) {
    return llvm::map_to_vector(operands,
                               [](const Accessed &a) { return a.value; });
  };
  auto accesses = [](ArrayRef<Accessed> operands) {
    return llvm::map_to_vector(operands,
                               [](const Accessed &a) { return a.access; });
  };
  auto rows = RowsOp::create(b, loc, values(inputs), accesses(inputs), segments,
                             positions, values(outputs), accesses(outputs));
  Type f32 = b.getF32Type();
  auto fill = [&](Region &region, unsigned args, RegionFn fn) {
    SmallVector<Type> types(args, f32);
    SmallVector<Location> locs(args, loc);
    // createBlock moves the insertion point into the block: the guard
    // restores the one after the op for what the caller creates next.
    OpBuilder::InsertionGuard guard(b);
    Block *block = b.createBlock(&region, {}, types, locs);
    b.setInsertionPointToStart(block);
    F32Math math{b, loc};
    SmallVector<Value> results = fn(math, block->getArguments());
    YieldOp::create(b, loc, results);
  };
  unsigned nMaxima = 0;
  if (maxima) {
    fill(rows.getMaxima(), inputs.size(), *maxima);
    nMaxima = rows.getNumMaxima();
  }
  fill(rows.getReduce(), inputs.size() + nMaxima, reduce);
  fill(rows.getBody(), inputs.size() + nMaxima + reductions, body);
  return rows;
}

RowsOp modk::createGatedScatter(OpBuilder &b, Location loc, Value attention,
                                Value update, Value scores, Value stream,
                                Value segments, Value positions, Gate gate) {
  SmallVector<Accessed> inputs;
  if (attention)
    inputs.push_back(row(attention));
  inputs.append({row(update), tokenValue(scores), token(stream)});
  const unsigned u = attention ? 1 : 0;
  return createRows(
      b, loc, inputs, segments, {token(stream)}, 0,
      [](F32Math &, ValueRange) -> SmallVector<Value> { return {}; },
      [gate, u](F32Math &m, ValueRange a) -> SmallVector<Value> {
        Value f = u ? m.add(a[0], a[1]) : a[0], r = a[u + 1], x = a[u + 2];
        if (gate == Gate::one)
          return {m.add(x, f)};
        Value g = gate == Gate::sigmoid ? m.sigmoid(r) : r;
        return {m.add(x, m.mul(g, f))};
      },
      positions);
}

Value modk::rmsnormScale(F32Math &m, Value squares, double width, float eps) {
  return m.div(m.c(1.0), m.sqrt(m.add(m.div(squares, m.c(width)), m.c(eps))));
}

Value modk::rmsnormElement(F32Math &m, Value x, Value w, Value squares,
                           double width, float eps) {
  return m.mul(m.mul(x, rmsnormScale(m, squares, width, eps)), w);
}

SmallVector<Value> modk::squareOfFirst(F32Math &m, ValueRange a) {
  return {m.mul(a[0], a[0])};
}

RowsOp modk::createRouterRows(OpBuilder &b, Location loc, Value stream,
                              Value weight, Value allRows, Value scores) {
  return createRows(
      b, loc, {row(stream), column(weight)}, allRows, {rowValue(scores)}, 1,
      [](F32Math &m, ValueRange a) -> SmallVector<Value> {
        return {m.mul(a[0], a[1])};
      },
      [](F32Math &, ValueRange a) -> SmallVector<Value> { return {a[2]}; });
}

RowsOp modk::createGatherRows(OpBuilder &b, Location loc, Value stream,
                              Value segments, Value positions, Value gathered,
                              Value normWeight, Value normed, float eps) {
  auto noSums = [](F32Math &, ValueRange) -> SmallVector<Value> { return {}; };
  if (!normWeight)
    return createRows(
        b, loc, {token(stream)}, segments, {row(gathered)}, 0, noSums,
        [](F32Math &, ValueRange a) -> SmallVector<Value> { return {a[0]}; },
        positions);
  double width = cast<MemRefType>(normed.getType()).getShape().back();
  return createRows(
      b, loc, {token(stream), column(normWeight)}, segments,
      {row(gathered), row(normed)}, 1, squareOfFirst,
      [&](F32Math &m, ValueRange a) -> SmallVector<Value> {
        return {a[0], rmsnormElement(m, a[0], a[1], a[2], width, eps)};
      },
      positions);
}
