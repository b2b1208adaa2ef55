//===- FuseCopies.cpp - Copies stored by their sources' writers -*- C++ -*-===//
//
// Training copies whole [B, S, width] buffers: the first gradient that
// reaches a tensor is copied into the buffer that later contributions add
// to, and a bf16 model rounds an f32 gradient into the bf16 copy that the
// products read (modk-store-bf16; modk-generalize writes that copy as a row
// kernel whose body is the element). Where the copied buffer was last
// written, at every element, by an element-wise row kernel of the plan,
// that kernel stores the copy too: one more output, which gets the element
// the kernel yields for the source (rounded as it is stored where the copy
// is bf16). The copy's pass over memory goes (docs/compiler.md, stage 5h).
//
// Not fused:
//  - a source whose last writer is not a modk.rows of the plan over every
//    row of the buffer (a GEMM and its epilogue, a kernel at tokens or over
//    a routed row set, RoPE's kernel over heads, a kernel the forward pass
//    may skip, a column sum);
//  - a source that another op may write, or a copy that another op reads
//    or writes, between that kernel and the copy;
//  - a bf16 source (the kernel yields the element before it is rounded),
//    or a source or copy that is a view (a column window).
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace modc {
#define GEN_PASS_DEF_FUSECOPIES
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
using modk::coversEveryRow;
using modk::mayWrite;
using modk::touches;

/// The source and destination of a whole-buffer copy: a modk.copy, or the
/// row kernel that modk-generalize writes for one (one input, one output of
/// its shape, over every row, whose body yields the element).
std::optional<std::pair<Value, Value>> copiedBuffers(Operation *op) {
  if (auto copy = dyn_cast<modk::CopyOp>(op))
    return std::make_pair(copy.getInput(), copy.getOutput());
  auto rows = dyn_cast<modk::RowsOp>(op);
  if (!rows || rows.getInputs().size() != 1 || rows.getOutputs().size() != 1 ||
      rows.getInputAccessAt(0) != modk::Access::row ||
      rows.getOutputAccessAt(0) != modk::Access::row || rows.getPositions() ||
      rows.getHeadDim() || rows.getCausalOnly() || rows.getNumMaxima() != 0 ||
      rows.getNumReductions() != 0)
    return std::nullopt;
  Value in = rows.getInputs().front(), out = rows.getOutputs().front();
  auto inType = cast<MemRefType>(in.getType());
  auto outType = cast<MemRefType>(out.getType());
  Block &body = rows.getBody().front();
  Operation *yield = body.getTerminator();
  if (&body.front() != yield || yield->getNumOperands() != 1 ||
      yield->getOperand(0) != body.getArgument(0) ||
      inType.getShape() != outType.getShape() ||
      !coversEveryRow(rows.getSegments(), inType))
    return std::nullopt;
  return std::make_pair(in, out);
}

/// The index of `source` among the outputs of `producer` where the kernel
/// writes it at every element of every row of the buffer, or none.
std::optional<unsigned> elementOutput(modk::RowsOp producer, Value source) {
  if (producer.getCausalOnly() || producer.getHeadDim() ||
      producer.hasLookups() || llvm::count(producer.getOutputs(), source) != 1)
    return std::nullopt;
  unsigned index =
      llvm::find(producer.getOutputs(), source) - producer.getOutputs().begin();
  if (producer.getOutputAccessAt(index) != modk::Access::row ||
      !coversEveryRow(producer.getSegments(),
                      cast<MemRefType>(source.getType())))
    return std::nullopt;
  return index;
}

/// Makes the last writer of the copy's source store the copy too, and
/// erases the copy, where that is safe (see the file comment).
LogicalResult fuseCopy(Operation *copy, RewriterBase &rewriter) {
  std::optional<std::pair<Value, Value>> buffers = copiedBuffers(copy);
  if (!buffers)
    return failure();
  auto [source, dest] = *buffers;
  auto destAlloc = dest.getDefiningOp<modk::AllocOp>();
  if (!destAlloc || !source.getDefiningOp<modk::AllocOp>() ||
      !cast<MemRefType>(source.getType()).getElementType().isF32() ||
      cast<MemRefType>(source.getType()).getShape() !=
          cast<MemRefType>(dest.getType()).getShape())
    return failure();
  Operation *writer = nullptr;
  for (Operation *op = copy->getPrevNode(); op && !writer;
       op = op->getPrevNode()) {
    if (op == destAlloc)
      continue;
    if (touches(op, dest))
      return failure();
    if (mayWrite(op, source))
      writer = op;
  }
  auto producer = dyn_cast_or_null<modk::RowsOp>(writer);
  if (!producer || touches(producer, dest))
    return failure();
  std::optional<unsigned> index = elementOutput(producer, source);
  if (!index)
    return failure();
  if (producer->isBeforeInBlock(destAlloc))
    rewriter.moveOpBefore(destAlloc, producer);
  Operation *yield = producer.getBody().front().getTerminator();
  rewriter.modifyOpInPlace(producer, [&] {
    producer.appendOutput(dest, modk::Access::row);
    yield->insertOperands(yield->getNumOperands(), yield->getOperand(*index));
  });
  rewriter.eraseOp(copy);
  return success();
}

struct FuseCopiesPass : public modc::impl::FuseCopiesBase<FuseCopiesPass> {
  using FuseCopiesBase::FuseCopiesBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    SmallVector<Operation *> copies;
    for (Operation &op : getOperation().getBody().front())
      if (copiedBuffers(&op))
        copies.push_back(&op);
    IRRewriter rewriter(&getContext());
    for (Operation *copy : copies)
      (void)fuseCopy(copy, rewriter);
  }
};
} // namespace
