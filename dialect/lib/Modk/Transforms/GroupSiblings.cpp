//===- GroupSiblings.cpp - A decode step's products of one input -*- C++
//-*-===//
//
// A decode step is bound by its launches: each product of its few rows
// reads one weight once. The queries', keys' and values' products read one
// input on one row set; marked as siblings they run as one launch of the
// few-row kernel, z the member, each with its own weight, epilogue and
// output (docs/compiler.md, stage 6''; docs/cuda.md). The pass
// decides; the CUDA emitter prints one call for the marked neighbours.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace modc {
#define GEN_PASS_DEF_GROUPSIBLINGS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The most members a sibling launch takes (kMaxGemmSiblings in the CUDA
/// prelude's GemmTiles.cuh).
constexpr size_t kMaxSiblings = 4;

/// Whether `gemm` may be a sibling at all: one weight, no group, run
/// unconditionally, configured with the few-row kernel first and no
/// CUTLASS variant.
bool siblingCandidate(modk::GemmOp gemm) {
  if (gemm.getGroupAttr() || gemm.getSiblingsAttr() || gemm.getCausalOnly() ||
      gemm.getWeights().size() != 1)
    return false;
  modk::GemmConfigAttr config = gemm.getConfigAttr();
  if (!config || config.getVariants().empty() ||
      config.getVariants().front().path != modk::GemmPath::stream)
    return false;
  return llvm::none_of(config.getVariants(), [](const modk::GemmVariant &v) {
    return v.path == modk::GemmPath::cutlass;
  });
}

/// The reduction (K) of `gemm`'s weight.
int64_t reductionOf(modk::GemmOp gemm) {
  return cast<MemRefType>(gemm.getWeights()[0].getType()).getDimSize(1);
}

/// The rows up to which `gemm`'s configuration takes the few-row kernel
/// (its first variant): the next variant's first row, or none.
int64_t fewRowsBound(modk::GemmOp gemm) {
  ArrayRef<modk::GemmVariant> variants = gemm.getConfigAttr().getVariants();
  return variants.size() > 1 ? variants[1].minRows : -1;
}

/// Whether `candidate` runs like `first` but for its weight, epilogue and
/// output: the same input, row set, reduction and bf16 rounding, and the
/// few-row kernel up to the same rows (so any member's plan decides for
/// all).
bool sameOperands(modk::GemmOp candidate, modk::GemmOp first) {
  return candidate.getInput() == first.getInput() &&
         candidate.getSegments() == first.getSegments() &&
         reductionOf(candidate) == reductionOf(first) &&
         candidate.productsBf16() == first.productsBf16() &&
         fewRowsBound(candidate) == fewRowsBound(first);
}

/// Whether `a` may write a buffer that `b` reads or writes (they may not
/// run in one launch).
bool writesWhatOtherTouches(Operation *a, Operation *b) {
  bool conflict = false;
  a->walk([&](Operation *nested) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(nested);
    if (!effects)
      return;
    SmallVector<MemoryEffects::EffectInstance> instances;
    effects.getEffects(instances);
    for (const MemoryEffects::EffectInstance &e : instances)
      if (isa<MemoryEffects::Write>(e.getEffect()) && e.getValue() &&
          isa<MemRefType>(e.getValue().getType()) &&
          !a->isAncestor(e.getValue().getParentRegion()->getParentOp()) &&
          modk::touches(b, modk::viewedBuffer(e.getValue())))
        conflict = true;
  });
  return conflict;
}

struct GroupSiblings : modc::impl::GroupSiblingsBase<GroupSiblings> {
  using GroupSiblingsBase::GroupSiblingsBase;

  void runOnOperation() override {
    modk::EntryOp entry = getOperation();
    if (!enabled || entry.getKind() != modk::EntryKind::decode)
      return;
    Builder b(&getContext());
    int64_t next = 0;
    Block &body = entry.getBody().front();
    for (Operation *op = &body.front(); op; op = op->getNextNode()) {
      auto first = dyn_cast<modk::GemmOp>(op);
      if (!first || !siblingCandidate(first))
        continue;
      SmallVector<modk::GemmOp> members{first};
      for (auto candidate = dyn_cast_or_null<modk::GemmOp>(op->getNextNode());
           candidate && members.size() < kMaxSiblings &&
           siblingCandidate(candidate) && sameOperands(candidate, first) &&
           llvm::none_of(members,
                         [&](modk::GemmOp m) {
                           return writesWhatOtherTouches(m, candidate) ||
                                  writesWhatOtherTouches(candidate, m);
                         });
           candidate = dyn_cast_or_null<modk::GemmOp>(candidate->getNextNode()))
        members.push_back(candidate);
      if (members.size() < 2)
        continue;
      for (modk::GemmOp m : members)
        m.setSiblingsAttr(b.getI64IntegerAttr(next));
      ++next;
      op = members.back();
    }
  }
};
} // namespace
