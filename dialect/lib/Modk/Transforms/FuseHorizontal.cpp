//===- FuseHorizontal.cpp - Sibling products as one stacked GEMM -*- C++ -*-===//
//
// Q, K and V are three products of the same normalised rows, and so are
// SwiGLU's gate and up projections. Stacked along N they are one product:
// the input is read once, and one larger GEMM runs nearer the machine's
// peak than three small ones. Each member's epilogue then reads its columns
// of the stacked product through a modk.column_window (docs/compiler.md,
// stage 5f'). Where every reader of a member's result can read its window
// (modk::ColumnWindowReader: element-wise row kernels, attention's q, k and
// v on the CPU), the member's buffer goes: a plain member's readers read
// the window, and an epilogue writes its window in place (RoPE).
//
// Not fused (the group ends before such a product):
//  - a product of another input or row set, or of another K, precision or
//    causal_only;
//  - one with a CUDA configuration (the pass runs for CPU targets);
//  - one whose `rows` epilogue writes or reads at tokens, or reads the
//    product other than as an element of its row;
//  - groups of products with fewer than `min-rows` rows a sequence
//    (measured: docs/compiler.md).
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace modc {
#define GEN_PASS_DEF_FUSEHORIZONTAL
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Whether every use of `buffer` but `except` can read a window in its
/// place (then the buffer goes): a modk.rows of the entry that maps
/// elements, or attention's q, k and v (modk::ColumnWindowReader).
bool windowServesEveryReader(Value buffer, Operation *except = nullptr) {
  for (OpOperand &use : buffer.getUses()) {
    Operation *user = use.getOwner();
    if (user == except)
      continue;
    auto reader = dyn_cast<modk::ColumnWindowReader>(user);
    if (!reader || !isa<modk::EntryOp>(user->getParentOp()) ||
        !reader.readsWindowOperand(use.getOperandNumber()))
      return false; // a GEMM, a GEMM's epilogue, a gradient...
  }
  return true;
}

/// Makes `epilogue` (a member's, now reading its window) write that window
/// in place of its output buffer, where it writes one f32 buffer of the
/// window's shape that every other reader can read as a window: RoPE's Q
/// and K then live in the stacked product, which attention reads.
void finishInWindow(modk::RowsOp epilogue, Value window,
                    RewriterBase &rewriter) {
  if (epilogue.getOutputs().size() != 1 ||
      !llvm::is_contained(epilogue.getInputs(), window))
    return;
  Value output = epilogue.getOutputs().front();
  auto outType = cast<MemRefType>(output.getType());
  auto windowType = cast<MemRefType>(window.getType());
  if (!output.getDefiningOp<modk::AllocOp>() ||
      outType.getShape() != windowType.getShape() ||
      outType.getElementType() != windowType.getElementType() ||
      llvm::is_contained(epilogue.getInputs(), output) ||
      !windowServesEveryReader(output, epilogue))
    return;
  rewriter.replaceAllUsesWith(output, window);
  rewriter.eraseOp(output.getDefiningOp());
}

/// Whether `gemm` can join a group that `first` opened.
bool joins(modk::GemmOp gemm, modk::GemmOp first) {
  auto k = [](modk::GemmOp g) {
    return cast<MemRefType>(g.getWeights()[0].getType()).getDimSize(1);
  };
  return gemm.getInput() == first.getInput() &&
         gemm.getSegments() == first.getSegments() && k(gemm) == k(first) &&
         gemm.getPrecisionAttr() == first.getPrecisionAttr() &&
         gemm.getCausalOnly() == first.getCausalOnly();
}

/// Whether `gemm` can be a member of a stacked product: a plain f32
/// product, or one whose `rows` epilogue maps the product's elements at
/// its own rows.
bool stackable(modk::GemmOp gemm) {
  if (gemm.getConfig() || gemm.getRoundBf16() || gemm.getWeights().size() != 1)
    return false;
  auto out = dyn_cast<MemRefType>(gemm.getOutput().getType());
  if (gemm.getEpilogue() == modk::Epilogue::none)
    return out && out.getElementType().isF32() &&
           gemm.getOutput().getDefiningOp<modk::AllocOp>();
  modk::RowsOp rows = gemm.getEpilogueRows();
  if (gemm.getEpilogue() != modk::Epilogue::rows || !rows)
    return false;
  Value product = gemm.getFusedRows().front().getArgument(0);
  for (auto [j, in] : llvm::enumerate(rows.getInputs()))
    if (in == product && !rows.readsWindowAt(j))
      return false;
  return true;
}

/// A copy of `window` into `output`, rows `segments`, at the rewriter's
/// insertion point.
void createCopy(RewriterBase &rewriter, Location loc, Value window,
                Value segments, Value output) {
  auto rows = modk::RowsOp::create(
      rewriter, loc, ValueRange{window}, {modk::Access::row}, segments,
      /*positions=*/Value(), ValueRange{output}, {modk::Access::row});
  OpBuilder::InsertionGuard guard(rewriter);
  Type f32 = rewriter.getF32Type();
  rewriter.createBlock(&rows.getReduce(), {}, {f32}, {loc});
  modk::YieldOp::create(rewriter, loc, ValueRange{});
  Block *body = rewriter.createBlock(&rows.getBody(), {}, {f32}, {loc});
  modk::YieldOp::create(rewriter, loc, ValueRange{body->getArgument(0)});
}

/// Replaces the products of `group` by one stacked product and a window
/// of it for each member.
void stack(ArrayRef<modk::GemmOp> group, RewriterBase &rewriter) {
  modk::GemmOp first = group.front();
  Location loc = first.getLoc();
  Value segments = first.getSegments();
  auto inputType = cast<MemRefType>(first.getInput().getType());
  SmallVector<Value> weights;
  int64_t n = 0;
  for (modk::GemmOp gemm : group) {
    weights.push_back(gemm.getWeights()[0]);
    n += cast<MemRefType>(gemm.getWeights()[0].getType()).getDimSize(0);
  }
  SmallVector<int64_t> shape(inputType.getShape());
  shape.back() = n;
  auto stackedType = MemRefType::get(shape, rewriter.getF32Type());

  // The stacked product and its windows where the first member was...
  rewriter.setInsertionPoint(first);
  Value stacked = modk::AllocOp::create(rewriter, loc, stackedType, nullptr);
  modk::GemmOp::create(rewriter, loc, first.getInput(), weights,
                       first.getSegments(), ValueRange{}, stacked,
                       modk::Epilogue::none, first.getPrecisionAttr(),
                       first.getCausalOnly());
  SmallVector<Value> windows;
  int64_t offset = 0;
  for (modk::GemmOp gemm : group) {
    int64_t width =
        cast<MemRefType>(gemm.getWeights()[0].getType()).getDimSize(0);
    windows.push_back(modk::ColumnWindowOp::create(
        rewriter, loc,
        modk::ColumnWindowOp::windowType(stackedType, offset, width), stacked,
        rewriter.getI64IntegerAttr(offset)));
    offset += width;
  }
  Operation *afterWindows = windows.back().getDefiningOp();

  // ... then the members' epilogues, in the members' order, where the last
  // member was (a later epilogue may read an earlier member's output).
  rewriter.setInsertionPointAfter(group.back());
  SmallVector<std::pair<modk::RowsOp, Value>> epilogues;
  for (auto [member, window] : llvm::zip(group, windows)) {
    modk::GemmOp gemm = member;
    if (modk::RowsOp epilogue = gemm.getEpilogueRows()) {
      IRMapping map;
      map.map(gemm.getFusedRows().front().getArgument(0), window);
      epilogues.push_back(
          {cast<modk::RowsOp>(rewriter.clone(*epilogue, map)), window});
    }
  }
  SmallVector<Value> plainOutputs;
  for (modk::GemmOp gemm : group) {
    if (gemm.getEpilogue() == modk::Epilogue::none)
      plainOutputs.push_back(gemm.getOutput());
    else
      plainOutputs.push_back(Value());
    rewriter.eraseOp(gemm);
  }

  // A plain member's output: its window where every reader can read that,
  // else a copy of the window, right after the windows (before any
  // epilogue that reads it).
  rewriter.setInsertionPointAfter(afterWindows);
  for (auto [output, window] : llvm::zip(plainOutputs, windows)) {
    if (!output)
      continue;
    if (!windowServesEveryReader(output)) {
      createCopy(rewriter, loc, window, segments, output);
      continue;
    }
    rewriter.replaceAllUsesWith(output, window);
    if (auto alloc = output.getDefiningOp<modk::AllocOp>())
      rewriter.eraseOp(alloc);
  }
  // Then each epilogue's output, which may have become a window's reader
  // just above (SwiGLU's gate).
  for (auto [epilogue, window] : epilogues)
    finishInWindow(epilogue, window, rewriter);
}

struct FuseHorizontalPass
    : public modc::impl::FuseHorizontalBase<FuseHorizontalPass> {
  using FuseHorizontalBase::FuseHorizontalBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    // Groups of consecutive stackable products (allocations between them
    // aside), taken first: stacking erases them.
    SmallVector<SmallVector<modk::GemmOp>> groups;
    SmallVector<modk::GemmOp> group;
    auto close = [&] {
      if (group.size() > 1 &&
          cast<MemRefType>(group.front().getInput().getType()).getDimSize(1) >=
              minRows)
        groups.push_back(group);
      group.clear();
    };
    for (Operation &op : getOperation().getBody().front()) {
      if (isa<modk::AllocOp>(op))
        continue;
      auto gemm = dyn_cast<modk::GemmOp>(op);
      if (!gemm || !stackable(gemm)) {
        close();
        continue;
      }
      if (!group.empty() && !joins(gemm, group.front()))
        close();
      // A member's input or weights must not be an earlier member's output.
      if (llvm::any_of(group, [&](modk::GemmOp member) {
            return llvm::is_contained(gemm->getOperands(), member.getOutput());
          }))
        close();
      group.push_back(gemm);
    }
    close();
    IRRewriter rewriter(&getContext());
    for (ArrayRef<modk::GemmOp> members : groups)
      stack(members, rewriter);
  }
};
} // namespace
