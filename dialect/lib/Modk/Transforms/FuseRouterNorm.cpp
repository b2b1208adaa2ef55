//===- FuseRouterNorm.cpp - Row sums in an earlier pass over rows -*- C++
//-*-===//
//
// A routed layer's router reads every token of the stream (r = w . x); the
// gather of the tokens it selects reads them again, and the attention norm
// in the same kernel sums x^2 over each of them first. Where a modk.rows
// reads a buffer at its rows' tokens and its sums depend only on that
// buffer, and an earlier modk.rows reads every row of the same buffer,
// unwritten in between, the earlier kernel can sum the same terms as it
// passes: one more sum and one more value a row, stored once a row. The
// later kernel then reads each sum at its token instead of summing the row
// again: it has no sums, so it reads its rows once (docs/model-format.md
// section 3, steps 2 and 3; docs/compiler.md, modk-fuse-router-norm).
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace modc {
#define GEN_PASS_DEF_FUSEROUTERNORM
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The buffer that every argument `rows`' reduce region reads is: an input
/// read at the row's token. Nothing where the sums read another input (or
/// none), or where the kernel is not a plain kernel of sums.
Value tokenBufferOfSums(modk::RowsOp rows) {
  if (rows.getNumReductions() == 0 || rows.getNumMaxima() != 0 ||
      rows.getHeadDim() || rows.getCausalOnly())
    return Value();
  Value buffer;
  for (BlockArgument arg : rows.getReduce().front().getArguments()) {
    if (arg.use_empty())
      continue;
    unsigned j = arg.getArgNumber();
    Value input = rows.getInputs()[j];
    if (rows.getInputAccessAt(j) != modk::Access::token ||
        (buffer && buffer != input))
      return Value();
    buffer = input;
  }
  return buffer;
}

/// The input of `rows` that reads `buffer` at every row, where `rows` is a
/// kernel over every row of that buffer (the identity row set) with no
/// token accesses, maxima or sums over the rows; -1 otherwise.
int rowInputOver(modk::RowsOp rows, Value buffer) {
  auto type = cast<MemRefType>(buffer.getType());
  if (rows.getNumMaxima() != 0 || rows.hasTokenOperands() ||
      rows.hasRowSums() || rows.getHeadDim() || rows.getCausalOnly() ||
      !modk::coversEveryRow(rows.getSegments(), type))
    return -1;
  for (auto [j, input] : llvm::enumerate(rows.getInputs()))
    if (input == buffer && rows.getInputAccessAt(j) == modk::Access::row)
      return int(j);
  return -1;
}

/// The latest modk.rows before `reader` that reads every row of `buffer`,
/// with nothing between them that may write it.
modk::RowsOp earlierPassOver(Operation *reader, Value buffer) {
  for (Operation *op = reader->getPrevNode(); op; op = op->getPrevNode()) {
    if (auto rows = dyn_cast<modk::RowsOp>(op);
        rows && rowInputOver(rows, buffer) >= 0)
      return rows;
    if (modk::mayWrite(op, buffer))
      return nullptr;
  }
  return nullptr;
}

SmallVector<modk::Access> accessesOf(ArrayAttr accesses) {
  return llvm::map_to_vector(accesses, [](Attribute a) {
    return cast<modk::AccessAttr>(a).getValue();
  });
}

/// Clones the ops of `from` (but its terminator) to the end of `into`,
/// `from`'s arguments as `args`; returns what `from` yields, mapped.
SmallVector<Value> cloneBody(OpBuilder &b, Block &from, ValueRange args,
                             IRMapping &map) {
  map.map(from.getArguments(), args);
  for (Operation &op : from.without_terminator())
    b.clone(op, map);
  return llvm::map_to_vector(from.getTerminator()->getOperands(),
                             [&](Value v) { return map.lookupOrDefault(v); });
}

/// Moves the sums of `reader` into `pass`, which reads every row of their
/// `buffer` at input `passInput`: `pass` stores each sum once a row into a
/// new [B, S] buffer, and `reader` reads it at its token.
void hoistSums(IRRewriter &rewriter, modk::RowsOp reader, modk::RowsOp pass,
               unsigned passInput, Value buffer) {
  Location loc = pass.getLoc();
  Type f32 = rewriter.getF32Type();
  auto streamType = cast<MemRefType>(buffer.getType());
  unsigned nSums = reader.getNumReductions();
  unsigned passSums = pass.getNumReductions();
  unsigned nPassInputs = pass.getInputs().size();
  unsigned nReaderInputs = reader.getInputs().size();

  // One f32 a token of the buffer for each sum.
  rewriter.setInsertionPoint(pass);
  SmallVector<Value> sums;
  for (unsigned s = 0; s < nSums; ++s)
    sums.push_back(modk::AllocOp::create(
        rewriter, loc,
        MemRefType::get(streamType.getShape().take_front(2), f32),
        IntegerAttr()));

  // The pass over every row: its sums, then the reader's, each stored.
  SmallVector<Value> outputs(pass.getOutputs());
  outputs.append(sums);
  SmallVector<modk::Access> outAccess = accessesOf(pass.getOutputAccess());
  outAccess.append(nSums, modk::Access::row_value);
  auto fusedPass = modk::RowsOp::create(
      rewriter, loc, pass.getInputs(), accessesOf(pass.getInputAccess()),
      pass.getSegments(), pass.getPositions(), outputs, outAccess);
  {
    OpBuilder::InsertionGuard guard(rewriter);
    SmallVector<Type> types(nPassInputs, f32);
    SmallVector<Location> locs(nPassInputs, loc);
    Block *reduce =
        rewriter.createBlock(&fusedPass.getReduce(), {}, types, locs);
    IRMapping passMap, readerMap;
    SmallVector<Value> terms = cloneBody(rewriter, pass.getReduce().front(),
                                         reduce->getArguments(), passMap);
    // The reader's sums read only the buffer: its arguments there are the
    // pass's element of the buffer.
    SmallVector<Value> readerArgs(nReaderInputs,
                                  reduce->getArgument(passInput));
    terms.append(
        cloneBody(rewriter, reader.getReduce().front(), readerArgs, readerMap));
    modk::YieldOp::create(rewriter, loc, terms);

    types.append(passSums + nSums, f32);
    locs.append(passSums + nSums, loc);
    Block *body = rewriter.createBlock(&fusedPass.getBody(), {}, types, locs);
    IRMapping bodyMap;
    SmallVector<Value> values = cloneBody(
        rewriter, pass.getBody().front(),
        body->getArguments().take_front(nPassInputs + passSums), bodyMap);
    for (BlockArgument sum : body->getArguments().take_back(nSums))
      values.push_back(sum);
    modk::YieldOp::create(rewriter, loc, values);
  }
  rewriter.eraseOp(pass);

  // The reader: its sums read at its token, and nothing left to sum.
  rewriter.setInsertionPoint(reader);
  SmallVector<Value> inputs(reader.getInputs());
  inputs.append(sums);
  SmallVector<modk::Access> inAccess = accessesOf(reader.getInputAccess());
  inAccess.append(nSums, modk::Access::token_value);
  auto fusedReader = modk::RowsOp::create(
      rewriter, reader.getLoc(), inputs, inAccess, reader.getSegments(),
      reader.getPositions(), reader.getOutputs(),
      accessesOf(reader.getOutputAccess()));
  {
    OpBuilder::InsertionGuard guard(rewriter);
    SmallVector<Type> types(nReaderInputs + nSums, f32);
    SmallVector<Location> locs(nReaderInputs + nSums, reader.getLoc());
    rewriter.createBlock(&fusedReader.getReduce(), {}, types, locs);
    modk::YieldOp::create(rewriter, reader.getLoc(), ValueRange{});
    Block *body = rewriter.createBlock(&fusedReader.getBody(), {}, types, locs);
    IRMapping map;
    // The body's arguments were the elements, then the sums: now the sums
    // are the new inputs' values, in the same order.
    SmallVector<Value> values = cloneBody(rewriter, reader.getBody().front(),
                                          body->getArguments(), map);
    modk::YieldOp::create(rewriter, reader.getLoc(), values);
  }
  rewriter.eraseOp(reader);
}

struct FuseRouterNormPass
    : public modc::impl::FuseRouterNormBase<FuseRouterNormPass> {
  using FuseRouterNormBase::FuseRouterNormBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    IRRewriter rewriter(&getContext());
    // Taken first: each fusion replaces both kernels.
    SmallVector<modk::RowsOp> readers;
    for (auto rows : getOperation().getBody().front().getOps<modk::RowsOp>())
      if (tokenBufferOfSums(rows))
        readers.push_back(rows);
    for (modk::RowsOp reader : readers) {
      Value buffer = tokenBufferOfSums(reader);
      modk::RowsOp pass = earlierPassOver(reader, buffer);
      if (!pass)
        continue;
      hoistSums(rewriter, reader, pass, unsigned(rowInputOver(pass, buffer)),
                buffer);
    }
  }
};
} // namespace
