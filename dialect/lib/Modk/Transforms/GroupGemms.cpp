//===- GroupGemms.cpp - Same-shape products, one launch ----*- C++ -*-===//
//
// The experts of an MoE MLP are E products of one shape, each on its own
// few rows: on a GPU, E launches of a few CTAs each. Marked as one group,
// they run as one launch whose grid holds every member's tiles
// (docs/compiler.md, "The MoE MLP"; docs/cuda.md, "Grouped products").
// The same holds for their gradients' products (modk.gemm_dgrad,
// modk.gemm_wgrad). The pass decides which products may share a launch and
// moves later members up next to the first, with the kernels between that
// a member needs; the CUDA emitter prints what it marked. The experts' row
// kernels between the products (their gathers, activations and gated
// scatters, and in the backward those kernels' gradients) are grouped the
// same way: one generated row kernel, one launch, a member per grid row.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/OperationSupport.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <unordered_map>

namespace modc {
#define GEN_PASS_DEF_GROUPGEMMS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The most members a group may have: the grouped kernels' table of
/// buffers is a kernel parameter of at most this many entries
/// (modk_cuda::detail::kMaxGemmGroup in GemmTiles.cuh).
constexpr int64_t kMaxGroupMembers = 16;

/// Kernels a dependence chain of a member may move up with it, at most:
/// an expert's few row kernels between two of its products, not a layer.
constexpr size_t kMaxMovedWithMember = 16;

/// The products a group holds: forward products and the two gradient
/// products of the backward.
bool isProduct(Operation *op) {
  return isa<modk::GemmOp, modk::GemmDgradOp, modk::GemmWgradOp>(op);
}

IntegerAttr groupOf(Operation *op) {
  return op->getAttrOfType<IntegerAttr>("group");
}

/// Whether product `op` may be a member of a group at all.
bool groupable(Operation *op) {
  if (groupOf(op))
    return false;
  auto gemm = dyn_cast<modk::GemmOp>(op);
  // A gradient product has no epilogue: every one may.
  if (!gemm)
    return true;
  if (gemm.getCausalOnly())
    return false;
  if (gemm.getEpilogue() == modk::Epilogue::none)
    return true;
  // A head epilogue (RoPE) may run apart from the product, which a grouped
  // launch does not do.
  modk::RowsOp rows = gemm.getEpilogueRows();
  return gemm.getEpilogue() == modk::Epilogue::rows && rows &&
         !rows.getHeadDim();
}

/// Whether row kernel `op` may be a member of a group: a warp-per-row
/// kernel of the entry (the CUDA emitter's grouped launch runs that kind
/// only): no sums over the rows (column or row totals, a block's partials),
/// no scatter into a table, not over heads (RoPE, its own kernel), not
/// causal_only (a guarded launch) and without results.
bool groupableRows(Operation *op) {
  auto rows = dyn_cast<modk::RowsOp>(op);
  if (!rows || groupOf(op) || op->getNumResults() != 0 ||
      rows.getCausalOnly() || rows.getHeadDim() || rows.hasRowSums())
    return false;
  for (unsigned k = 0, e = rows.getOutputs().size(); k < e; ++k)
    if (rows.getOutputAccessAt(k) == modk::Access::scatter)
      return false;
  return true;
}

/// Whether `op` may open or join a group: a product (groupable) or a row
/// kernel (groupableRows).
bool mayGroup(Operation *op, bool rows) {
  if (isProduct(op))
    return groupable(op);
  return rows && groupableRows(op);
}

/// Whether `a` and `b` are the same kernel on other buffers: equal
/// attributes, operand types and epilogue regions, whatever buffers their
/// operands name.
bool sameKernel(Operation *a, Operation *b) {
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

/// What an op of the entry does to its buffers, as viewedBuffer gives
/// them: the buffers it or an op nested in it names, those it may write
/// (modk::mayWrite's reading of the effects), whether it may write a
/// buffer it does not name, and whether every effect it declares is on a
/// buffer it names (no resource of its own, such as the KV cache).
struct BufferUse {
  llvm::SmallSetVector<Value, 8> named, written;
  bool writesAny = false, onlyNamed = true;
};

class BufferUses {
public:
  /// The uses of `op`, computed once. The reference stays valid while
  /// other ops' are added (a node-based map: conflict and independent hold
  /// two at once).
  const BufferUse &of(Operation *op) {
    auto [it, inserted] = uses.try_emplace(op);
    if (inserted)
      compute(op, it->second);
    return it->second;
  }

  /// Whether `a` writes a buffer `b` names or `b` one `a` names: they may
  /// not swap.
  bool conflict(Operation *a, Operation *b) {
    const BufferUse &ua = of(a), &ub = of(b);
    auto writes = [](const BufferUse &w, const BufferUse &r) {
      if (w.writesAny && !r.named.empty())
        return true;
      return llvm::any_of(r.named,
                          [&](Value v) { return w.written.contains(v); });
    };
    return writes(ua, ub) || writes(ub, ua);
  }

private:
  static void compute(Operation *op, BufferUse &use) {
    // A view or arithmetic names buffers without touching them.
    if (isMemoryEffectFree(op))
      return;
    for (Value v : usedFromOutside(op))
      if (isa<MemRefType>(v.getType()))
        use.named.insert(modk::viewedBuffer(v));
    op->walk([&](Operation *nested) {
      auto effects = dyn_cast<MemoryEffectOpInterface>(nested);
      if (!effects) {
        for (Value v : nested->getOperands())
          if (isa<MemRefType>(v.getType()))
            use.written.insert(modk::viewedBuffer(v));
        return;
      }
      SmallVector<MemoryEffects::EffectInstance> instances;
      effects.getEffects(instances);
      for (const MemoryEffects::EffectInstance &e : instances) {
        Value value = e.getValue();
        if (!value) {
          use.onlyNamed = false;
          if (isa<MemoryEffects::Write>(e.getEffect()) &&
              isa<SideEffects::DefaultResource>(e.getResource()))
            use.writesAny = true;
          continue;
        }
        if (isa<MemoryEffects::Write>(e.getEffect()))
          use.written.insert(modk::viewedBuffer(value));
      }
    });
  }

  std::unordered_map<Operation *, BufferUse> uses;
};

/// Whether `access` reaches a buffer at a row's token only: its row of
/// the stream (`token`) or its one value there (`token_value`).
bool atToken(modk::Access access) {
  return access == modk::Access::token || access == modk::Access::token_value;
}

/// The tokens at which `rows` reads and writes `buffer`: its tokens
/// operand where every access to `buffer` is at those tokens; null
/// otherwise.
Value tokensOf(modk::RowsOp rows, Value buffer) {
  if (!rows || !rows.getPositions())
    return Value();
  for (auto [j, in] : llvm::enumerate(rows.getInputs()))
    if (modk::viewedBuffer(in) == buffer && !atToken(rows.getInputAccessAt(j)))
      return Value();
  for (auto [k, out] : llvm::enumerate(rows.getOutputs()))
    if (modk::viewedBuffer(out) == buffer &&
        !atToken(rows.getOutputAccessAt(k)))
      return Value();
  return rows.getPositions();
}

/// The row set of a member that writes `buffer` at tokens: a product's
/// `rows` epilogue (writing its output) or a row kernel, where every access
/// to `buffer` is at its tokens (tokensOf); null otherwise.
Value tokensWriting(Operation *op, Value buffer) {
  if (auto rows = dyn_cast<modk::RowsOp>(op))
    return tokensOf(rows, buffer);
  auto gemm = dyn_cast<modk::GemmOp>(op);
  if (!gemm || modk::viewedBuffer(gemm.getOutput()) != buffer)
    return Value();
  return tokensOf(gemm.getEpilogueRows(), buffer);
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

/// Whether members `a` and `b` both reach `buffer` at the tokens of two
/// different experts of one modk.moe_select only, which share no token
/// (docs/model-format.md section 7: a token goes to one expert at most):
/// two products' `rows` epilogues adding into the stream, or two row
/// kernels (the gated scatters, the gathers' gradients adding into the
/// stream's gradient, the gated scatters' gradients writing each token's
/// gate gradient). A gradient product writes the first rows of its
/// output, so two of them into one buffer always meet.
bool disjointExpertAdds(Operation *a, Operation *b, Value buffer) {
  Value ta = tokensWriting(a, buffer), tb = tokensWriting(b, buffer);
  if (!ta || !tb || ta == tb)
    return false;
  modk::MoeSelectOp select = expertSelect(ta);
  return select && select == expertSelect(tb);
}

/// Whether running members `a` and `b` in either order, or at once, gives
/// the same result: neither writes a buffer that the other names, but for
/// disjointExpertAdds.
bool independent(Operation *a, Operation *b, BufferUses &uses) {
  const BufferUse &ua = uses.of(a), &ub = uses.of(b);
  if (ua.writesAny || ub.writesAny)
    return false;
  for (Value buffer : ub.named)
    if (ua.written.contains(buffer) && !disjointExpertAdds(a, b, buffer))
      return false;
  for (Value buffer : ua.named)
    if (ub.written.contains(buffer) && !disjointExpertAdds(a, b, buffer))
      return false;
  return true;
}

/// Whether kernel `op` may move up past kernels it does not depend on: a
/// product without a group or a row kernel, with no results and every
/// effect on buffers it names.
bool movable(Operation *op, BufferUses &uses) {
  return (isa<modk::RowsOp>(op) || isProduct(op)) && !groupOf(op) &&
         op->getNumResults() == 0 && uses.of(op).onlyNamed &&
         !uses.of(op).writesAny;
}

/// How candidate `op` joins the group that runs from `first` to `last`:
/// `before`, the kernels between `last` and `op` that `op` depends on
/// (they write what it, or another of them, reads or writes, or read what
/// it writes), which move before `first`, in their order; `allocs`, the
/// modk.allocs of buffers they or `op` name that are defined inside the
/// group's span, which move before `first` too.
struct Move {
  SmallVector<Operation *> before, allocs;
};

/// Whether `op` can move up to right after `last` (an earlier op of its
/// block, the group's last member; `first` its first): the kernels between
/// that it depends on move before `first` (at most kMaxMovedWithMember of
/// them, none that the group's kernels or the others they pass depend
/// on), and what `op` and they use is defined before where they go, or by
/// a modk.alloc (which moves up too).
bool canMoveUpTo(Operation *op, Operation *first, Operation *last,
                 BufferUses &uses, Move &move) {
  move = Move();
  // The kernels between that `op` depends on, directly or through one
  // another, from the nearest back.
  SmallVector<Operation *> chain{op};
  for (Operation *between = op->getPrevNode(); between != last;
       between = between->getPrevNode()) {
    if (isa<modk::AllocOp>(between))
      continue;
    if (llvm::none_of(chain,
                      [&](Operation *c) { return uses.conflict(between, c); }))
      continue;
    if (!movable(between, uses) || chain.size() > kMaxMovedWithMember)
      return false;
    chain.push_back(between);
  }
  move.before.assign(chain.rbegin(), std::prev(chain.rend()));
  // Each moves before `first`, past the kernels from `first` on that stay.
  llvm::SmallPtrSet<Operation *, 8> moving(move.before.begin(),
                                           move.before.end());
  for (Operation *dep : move.before)
    for (Operation *passed = first; passed != dep;
         passed = passed->getNextNode())
      if (!moving.contains(passed) && !isa<modk::AllocOp>(passed) &&
          uses.conflict(passed, dep))
        return false;
  // Values: defined before where each goes, or by a modk.alloc that moves.
  auto defined = [&](Operation *user, Operation *bound) {
    for (Value v : usedFromOutside(user)) {
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != user->getBlock() ||
          def->isBeforeInBlock(bound) || def == bound)
        continue;
      if (!isa<modk::AllocOp>(def))
        return false;
      if (!llvm::is_contained(move.allocs, def))
        move.allocs.push_back(def);
    }
    return true;
  };
  // A kernel that moves before `first` needs its values defined before it.
  if (Operation *boundary = first->getPrevNode()) {
    for (Operation *dep : move.before)
      if (!defined(dep, boundary))
        return false;
  } else if (!move.before.empty()) {
    return false;
  }
  return defined(op, last);
}

struct GroupGemms : modc::impl::GroupGemmsBase<GroupGemms> {
  using GroupGemmsBase::GroupGemmsBase;

  /// Checks the options once per pipeline, not once per entry.
  LogicalResult initialize(MLIRContext *ctx) override {
    if (maxMembers < 0 || maxMembers > kMaxGroupMembers)
      return emitError(UnknownLoc::get(ctx))
             << "modk-group-gemms: max-members " << maxMembers.getValue()
             << "; expected 0 to " << kMaxGroupMembers
             << ", the most products a grouped kernel's table holds "
                "(kMaxGemmGroup)";
    return success();
  }

  void runOnOperation() override {
    if (!enabled)
      return;
    Block &body = getOperation().getBody().front();
    Builder b(&getContext());
    BufferUses uses;
    int64_t next = 0;
    for (Operation *op = &body.front(); op; op = op->getNextNode()) {
      Operation *first = op;
      if (!mayGroup(first, rows))
        continue;
      SmallVector<Operation *> members{first};
      Operation *last = first;
      for (Operation *candidate = first->getNextNode();
           candidate && int64_t(members.size()) < maxMembers;) {
        Operation *after = candidate->getNextNode();
        Move move;
        // Products of one row set are the stacking's (modk-fuse-horizontal):
        // a group is of products (or row kernels) on row sets of their own,
        // whose rows are too few to fill the GPU alone.
        if (mayGroup(candidate, rows) && sameKernel(candidate, first) &&
            llvm::all_of(members,
                         [&](Operation *m) {
                           return modk::groupMemberSegments(m) !=
                                      modk::groupMemberSegments(candidate) &&
                                  independent(m, candidate, uses);
                         }) &&
            canMoveUpTo(candidate, first, last, uses, move)) {
          // The allocations and the kernels it needs go before the group,
          // which stays a run of neighbouring products.
          for (Operation *alloc : move.allocs)
            alloc->moveBefore(first);
          for (Operation *dep : move.before)
            dep->moveBefore(first);
          if (candidate->getPrevNode() != last)
            candidate->moveAfter(last);
          members.push_back(candidate);
          last = candidate;
        }
        candidate = after;
      }
      if (members.size() < 2)
        continue;
      for (Operation *member : members)
        member->setAttr("group", b.getI64IntegerAttr(next));
      ++next;
      op = last;
    }
  }
};
} // namespace
