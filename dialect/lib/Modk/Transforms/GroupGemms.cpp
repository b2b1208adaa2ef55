//===- GroupGemms.cpp - Same-shape products, one launch ----*- C++ -*-===//
//
// The experts of an MoE MLP are E products of one shape, each on its own
// few rows: on a GPU, E launches of a few CTAs each. Marked as one group,
// they run as one launch whose grid holds every member's tiles
// (docs/compiler.md, "The MoE MLP"; docs/cuda.md, "Grouped products").
// The pass decides which products may share a launch and moves later
// members up next to the first; the CUDA emitter prints what it marked.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/OperationSupport.h"

namespace modc {
#define GEN_PASS_DEF_GROUPGEMMS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// Whether `gemm` may be a member of a group at all.
bool groupable(modk::GemmOp gemm) {
  if (gemm.getCausalOnly() || gemm.getGroup())
    return false;
  if (gemm.getEpilogue() == modk::Epilogue::none)
    return true;
  // A head epilogue (RoPE) may run apart from the product, which a grouped
  // launch does not do.
  modk::RowsOp rows = gemm.getEpilogueRows();
  return gemm.getEpilogue() == modk::Epilogue::rows && rows &&
         !rows.getHeadDim();
}

/// Whether `a` and `b` are the same kernel on other buffers: equal
/// attributes, operand types and epilogue regions, whatever buffers their
/// operands name.
bool sameKernel(modk::GemmOp a, modk::GemmOp b) {
  llvm::DenseMap<Value, Value> inside;
  auto check = [&](Value lhs, Value rhs) -> LogicalResult {
    if (Value mapped = inside.lookup(lhs))
      return success(mapped == rhs);
    return success(lhs.getType() == rhs.getType());
  };
  auto mark = [&](Value lhs, Value rhs) { inside[lhs] = rhs; };
  return OperationEquivalence::isEquivalentTo(
      a, b, check, mark, OperationEquivalence::IgnoreLocations);
}

/// The values `op` and the ops nested in it use that are defined outside
/// it.
SmallVector<Value> usedFromOutside(Operation *op) {
  SmallVector<Value> used;
  op->walk([&](Operation *inner) {
    for (Value v : inner->getOperands())
      if (!op->isAncestor(v.getParentRegion()->getParentOp()))
        used.push_back(v);
  });
  return used;
}

/// The buffers `op` or an op nested in it names, as viewedBuffer gives
/// them.
SmallVector<Value> buffersOf(Operation *op) {
  llvm::SetVector<Value> buffers;
  for (Value v : usedFromOutside(op))
    if (isa<MemRefType>(v.getType()))
      buffers.insert(modk::viewedBuffer(v));
  return buffers.takeVector();
}

/// The row set of a member's epilogue that writes `buffer` at tokens:
/// the tokens operand of its modk.rows where every access to `buffer` is
/// at those tokens; null otherwise.
Value tokensWriting(modk::GemmOp gemm, Value buffer) {
  modk::RowsOp rows = gemm.getEpilogueRows();
  if (!rows || !rows.getPositions() ||
      modk::viewedBuffer(gemm.getOutput()) != buffer)
    return Value();
  for (auto [j, in] : llvm::enumerate(rows.getInputs()))
    if (modk::viewedBuffer(in) == buffer &&
        rows.getInputAccessAt(j) != modk::Access::token)
      return Value();
  for (auto [k, out] : llvm::enumerate(rows.getOutputs()))
    if (modk::viewedBuffer(out) == buffer &&
        rows.getOutputAccessAt(k) != modk::Access::token)
      return Value();
  return rows.getPositions();
}

/// The modk.moe_select that writes `tokens` as an expert's positions,
/// where nothing else writes them; null otherwise.
modk::MoeSelectOp expertSelect(Value tokens) {
  modk::MoeSelectOp select;
  for (Operation *user : tokens.getUsers()) {
    auto s = dyn_cast<modk::MoeSelectOp>(user);
    if (s && llvm::is_contained(s.getExpertPositions(), tokens) && !select) {
      select = s;
      continue;
    }
    if (modk::mayWrite(user, tokens))
      return {};
  }
  return select;
}

/// Whether `a` and `b` both add into `buffer` at the tokens of two
/// different experts of one modk.moe_select, which share no token
/// (docs/model-format.md section 7: a token goes to one expert at most).
bool disjointExpertAdds(modk::GemmOp a, modk::GemmOp b, Value buffer) {
  Value ta = tokensWriting(a, buffer), tb = tokensWriting(b, buffer);
  if (!ta || !tb || ta == tb)
    return false;
  modk::MoeSelectOp select = expertSelect(ta);
  return select && select == expertSelect(tb);
}

/// Whether running `a` and `b` in either order, or at once, gives the same
/// result: neither writes a buffer that the other names.
bool independent(modk::GemmOp a, modk::GemmOp b) {
  for (Value buffer : buffersOf(b))
    if (modk::mayWrite(a, buffer) && !disjointExpertAdds(a, b, buffer))
      return false;
  for (Value buffer : buffersOf(a))
    if (modk::mayWrite(b, buffer) && !disjointExpertAdds(a, b, buffer))
      return false;
  return true;
}

/// Whether `op` can move up to right after `after` (an earlier op of its
/// block): no op in between writes what `op` names, or names what `op`
/// writes, and what `op` uses is defined before `after`, or by a
/// modk.alloc in between (which `allocs` gets, to move up too).
bool canMoveUpTo(Operation *op, Operation *after,
                 SmallVectorImpl<Operation *> &allocs) {
  allocs.clear();
  for (Value v : usedFromOutside(op)) {
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != op->getBlock() ||
        def->isBeforeInBlock(after) || def == after)
      continue;
    if (!isa<modk::AllocOp>(def))
      return false;
    if (!llvm::is_contained(allocs, def))
      allocs.push_back(def);
  }
  SmallVector<Value> mine = buffersOf(op);
  for (Operation *between = after->getNextNode(); between != op;
       between = between->getNextNode()) {
    for (Value buffer : mine)
      if (modk::mayWrite(between, buffer))
        return false;
    for (Value buffer : buffersOf(between))
      if (modk::mayWrite(op, buffer))
        return false;
  }
  return true;
}

struct GroupGemms : modc::impl::GroupGemmsBase<GroupGemms> {
  using GroupGemmsBase::GroupGemmsBase;

  void runOnOperation() override {
    if (!enabled)
      return;
    Block &body = getOperation().getBody().front();
    Builder b(&getContext());
    int64_t next = 0;
    for (Operation *op = &body.front(); op; op = op->getNextNode()) {
      auto first = dyn_cast<modk::GemmOp>(op);
      if (!first || !groupable(first))
        continue;
      SmallVector<modk::GemmOp> members{first};
      Operation *last = first;
      for (Operation *candidate = first->getNextNode();
           candidate && int64_t(members.size()) < maxMembers;) {
        Operation *after = candidate->getNextNode();
        auto gemm = dyn_cast<modk::GemmOp>(candidate);
        SmallVector<Operation *> allocs;
        // Products of one row set are the stacking's (modk-fuse-horizontal):
        // a group is of products on row sets of their own, whose rows are
        // too few to fill the GPU alone.
        if (gemm && groupable(gemm) && sameKernel(gemm, first) &&
            llvm::all_of(members,
                         [&](modk::GemmOp m) {
                           return m.getSegments() != gemm.getSegments() &&
                                  independent(m, gemm);
                         }) &&
            canMoveUpTo(gemm, last, allocs)) {
          // Its buffers' allocations go before the group, which stays a
          // run of neighbouring products.
          for (Operation *alloc : allocs)
            alloc->moveBefore(first);
          if (gemm->getPrevNode() != last)
            gemm->moveAfter(last);
          members.push_back(gemm);
          last = gemm;
        }
        candidate = after;
      }
      if (members.size() < 2)
        continue;
      for (modk::GemmOp member : members)
        member.setGroupAttr(b.getI64IntegerAttr(next));
      ++next;
      op = last;
    }
  }
};
} // namespace
