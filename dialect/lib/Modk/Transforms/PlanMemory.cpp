//===- PlanMemory.cpp - Place workspace buffers by liveness -----*- C++ -*-===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/DenseMap.h"

#include <numeric>

namespace modc {
#define GEN_PASS_DEF_PLANMEMORY
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
struct Interval {
  modk::AllocOp alloc;
  int64_t first, last, size;
  int64_t offset = -1;
};

/// Places the intervals one by one in `order`, each at the lowest offset
/// where it overlaps no buffer already placed that is live at the same time
/// (first fit). Returns the bytes the placement spans.
int64_t placeInOrder(MutableArrayRef<Interval> intervals,
                     ArrayRef<unsigned> order) {
  int64_t total = 0;
  SmallVector<Interval *> placed;
  for (unsigned index : order) {
    Interval &it = intervals[index];
    SmallVector<Interval *> live;
    for (Interval *p : placed)
      if (p->first <= it.last && p->last >= it.first)
        live.push_back(p);
    llvm::sort(live, [](Interval *a, Interval *b) {
      return a->offset < b->offset;
    });
    int64_t offset = 0;
    for (Interval *p : live) {
      if (p->offset - offset >= it.size)
        break;
      offset = std::max(offset, p->offset + p->size);
    }
    it.offset = offset;
    total = std::max(total, offset + it.size);
    placed.push_back(&it);
  }
  return total;
}

/// First-fit placement, tried in three orders: by first use, largest first
/// and latest last use first (ties by first use). Each order leaves gaps
/// another avoids (a change of one buffer's size, bf16 storage for one, can
/// make first use leave a larger hole), so the plan keeps the smallest,
/// the earlier order on a tie (docs/compiler.md, stage 6, compares it with
/// the most bytes ever live at once).
struct PlanMemoryPass : public modc::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    modk::EntryOp entry = getOperation();
    DenseMap<Operation *, int64_t> order;
    int64_t index = 0;
    // The members of a group (modk-group-gemms: neighbouring kernels with
    // one `group` number) run at once, as one launch: one time, so that no
    // member's buffer takes the place of another's that dies before it.
    IntegerAttr group;
    for (Operation &op : entry.getBody().front()) {
      auto own = op.getAttrOfType<IntegerAttr>("group");
      if (!own || own != group)
        ++index;
      group = own;
      order[&op] = index;
    }

    SmallVector<Interval> intervals;
    for (auto alloc : entry.getBody().front().getOps<modk::AllocOp>()) {
      Interval it{alloc, INT64_MAX, -1, alloc.getBytesPerSequence()};
      // The buffer's users, and those of its views (modk.column_window):
      // a kernel that reads a window reads the buffer.
      SmallVector<Value> views = {alloc.getResult()};
      while (!views.empty()) {
        Value buffer = views.pop_back_val();
        for (Operation *user : buffer.getUsers()) {
          if (auto view = dyn_cast<ViewLikeOpInterface>(user))
            if (view.getViewSource() == buffer)
              views.push_back(view.getViewDest());
          // A use inside a kernel's region (a GEMM's epilogue) is the
          // kernel's.
          Operation *kernel =
              entry.getBody().front().findAncestorOpInBlock(*user);
          it.first = std::min(it.first, order.lookup(kernel));
          it.last = std::max(it.last, order.lookup(kernel));
        }
      }
      if (it.last < 0) { // never used: no memory at all
        it.first = it.last = order[alloc];
        it.size = 0;
      }
      intervals.push_back(it);
    }

    SmallVector<unsigned> byFirstUse(intervals.size());
    std::iota(byFirstUse.begin(), byFirstUse.end(), 0u);
    llvm::stable_sort(byFirstUse, [&](unsigned a, unsigned b) {
      return intervals[a].first < intervals[b].first;
    });
    SmallVector<unsigned> bySize(byFirstUse);
    llvm::stable_sort(bySize, [&](unsigned a, unsigned b) {
      return intervals[a].size > intervals[b].size;
    });
    SmallVector<unsigned> byLastUse(byFirstUse);
    llvm::stable_sort(byLastUse, [&](unsigned a, unsigned b) {
      return intervals[a].last > intervals[b].last;
    });
    ArrayRef<unsigned> best = byFirstUse;
    int64_t bestTotal = placeInOrder(intervals, byFirstUse);
    for (ArrayRef<unsigned> order : {ArrayRef<unsigned>(bySize),
                                     ArrayRef<unsigned>(byLastUse)}) {
      const int64_t total = placeInOrder(intervals, order);
      if (total < bestTotal) {
        best = order;
        bestTotal = total;
      }
    }
    const int64_t total = placeInOrder(intervals, best);

    Builder b(entry.getContext());
    for (Interval &it : intervals)
      it.alloc.setOffsetAttr(b.getI64IntegerAttr(it.offset));
    entry.setWorkspaceBytesPerSequenceAttr(b.getI64IntegerAttr(total));
  }
};
} // namespace
