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
  return createRows(
      b, loc, {row(attention), row(update), tokenValue(scores), token(stream)},
      segments, {token(stream)}, 0,
      [](F32Math &, ValueRange) -> SmallVector<Value> { return {}; },
      [gate](F32Math &m, ValueRange a) -> SmallVector<Value> {
        Value f = m.add(a[0], a[1]), r = a[2], x = a[3];
        if (gate == Gate::one)
          return {m.add(x, f)};
        Value g = gate == Gate::sigmoid ? m.sigmoid(r) : r;
        return {m.add(x, m.mul(g, f))};
      },
      positions);
}
