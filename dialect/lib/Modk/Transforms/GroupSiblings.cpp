//===- GroupSiblings.cpp - A decode step's products, one launch -*- C++ -*-===//
//
// A decode step is bound by its launches: each product of its few rows
// reads one weight once. The queries', keys' and values' products read one
// input on one row set; marked as siblings they run as one launch of the
// few-row kernel, z the member, each with its own weight, epilogue and
// output. SwiGLU's gate and up projections are siblings in order: each CTA
// runs the gate's columns, then the up projection's, whose epilogue reads
// the gate's product (docs/compiler.md, stage 6''). The pass
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

/// The output columns (N) of `gemm`'s weight.
int64_t columnsOf(modk::GemmOp gemm) {
  return cast<MemRefType>(gemm.getWeights()[0].getType()).getDimSize(0);
}

/// `gemm`'s few-row kernel variants (its leading `stream` ones: the
/// CUDA-core tile, the tensor-core tile or both) and the rows from which
/// the next variant takes over (-1: none).
std::pair<SmallVector<modk::GemmVariant>, int64_t>
fewRowsPlan(modk::GemmOp gemm) {
  std::pair<SmallVector<modk::GemmVariant>, int64_t> plan = {{}, -1};
  for (const modk::GemmVariant &v : gemm.getConfigAttr().getVariants()) {
    if (v.path != modk::GemmPath::stream) {
      plan.second = v.minRows;
      break;
    }
    plan.first.push_back(v);
  }
  return plan;
}

/// Whether `candidate` runs like `first` but for its weight, epilogue and
/// output: the same input, row set, reduction and bf16 rounding, and the
/// same few-row kernel tiles up to the same rows (so any member's plan
/// decides for all).
bool sameOperands(modk::GemmOp candidate, modk::GemmOp first) {
  return candidate.getInput() == first.getInput() &&
         candidate.getSegments() == first.getSegments() &&
         reductionOf(candidate) == reductionOf(first) &&
         candidate.productsBf16() == first.productsBf16() &&
         fewRowsPlan(candidate) == fewRowsPlan(first);
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

/// Whether `later`'s epilogue reads `earlier`'s product elementwise at the
/// same element and nothing else of it, `earlier` storing it plainly over
/// as many columns: then a CTA that runs `earlier`'s columns and then
/// `later`'s may run both (SwiGLU's gate and up projections).
bool readsInOrder(modk::GemmOp later, modk::GemmOp earlier) {
  Value source;
  return earlier.getEpilogue() == modk::Epilogue::none &&
         later.isElementwiseEpilogue(&source) && source &&
         source == earlier.getOutput() &&
         columnsOf(later) == columnsOf(earlier) &&
         !writesWhatOtherTouches(later, earlier);
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
      bool inOrder = false;
      for (auto candidate = dyn_cast_or_null<modk::GemmOp>(op->getNextNode());
           candidate && members.size() < kMaxSiblings &&
           siblingCandidate(candidate) && sameOperands(candidate, first);
           candidate =
               dyn_cast_or_null<modk::GemmOp>(candidate->getNextNode())) {
        // Independent of every member, or reading one elementwise at the
        // same element (then every CTA runs the members in order).
        bool independent = true, ordered = false;
        for (modk::GemmOp m : members) {
          if (!writesWhatOtherTouches(m, candidate) &&
              !writesWhatOtherTouches(candidate, m))
            continue;
          independent = false;
          ordered = readsInOrder(candidate, m);
          if (!ordered)
            break;
        }
        if (!independent && !ordered)
          break;
        inOrder = inOrder || ordered;
        members.push_back(candidate);
      }
      if (members.size() < 2)
        continue;
      // In order, every member has as many columns (one grid for all).
      if (inOrder && llvm::any_of(members, [&](modk::GemmOp m) {
            return columnsOf(m) != columnsOf(first);
          }))
        continue;
      for (modk::GemmOp m : members) {
        m.setSiblingsAttr(b.getI64IntegerAttr(next));
        m.setSiblingsInOrder(inOrder);
      }
      ++next;
      op = members.back();
    }
  }
};
} // namespace
