//===- PlanMemory.cpp - Place workspace buffers by liveness -----*- C++ -*-===//

#include "modc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace modc {
#define GEN_PASS_DEF_PLANMEMORY
#include "modc/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
struct Interval {
  modk::AllocOp alloc;
  int64_t first, last, size;
  int64_t offset = -1;
};

/// First-fit placement in order of first use: a buffer may take any gap left
/// by buffers whose last use comes strictly before its first use.
struct PlanMemoryPass : public modc::impl::PlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    modk::EntryOp entry = getOperation();
    DenseMap<Operation *, int64_t> order;
    int64_t index = 0;
    for (Operation &op : entry.getBody().front())
      order[&op] = index++;

    SmallVector<Interval> intervals;
    for (auto alloc : entry.getBody().front().getOps<modk::AllocOp>()) {
      Interval it{alloc, INT64_MAX, -1, alloc.getBytesPerSequence()};
      for (Operation *user : alloc->getUsers()) {
        it.first = std::min(it.first, order[user]);
        it.last = std::max(it.last, order[user]);
      }
      if (it.last < 0) { // never used: no memory at all
        it.first = it.last = order[alloc];
        it.size = 0;
      }
      intervals.push_back(it);
    }
    llvm::stable_sort(intervals, [](const Interval &a, const Interval &b) {
      return a.first < b.first;
    });

    int64_t total = 0;
    SmallVector<Interval *> placed;
    for (Interval &it : intervals) {
      // Gaps among the buffers still live at it.first, sorted by offset.
      SmallVector<Interval *> live;
      for (Interval *p : placed)
        if (p->last >= it.first)
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

    Builder b(entry.getContext());
    for (Interval &it : intervals)
      it.alloc.setOffsetAttr(b.getI64IntegerAttr(it.offset));
    entry.setWorkspaceBytesPerSequenceAttr(b.getI64IntegerAttr(total));
  }
};
} // namespace
