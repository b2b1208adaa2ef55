//===- BufferQueries.cpp - What the plan's kernels do to buffers -*- C++
//-*-===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

using namespace mlir;
using namespace modc;

Value modk::viewedBuffer(Value v) {
  while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
    v = view.getViewSource();
  return v;
}

bool modk::touches(Operation *op, Value buffer) {
  return op
      ->walk([&](Operation *nested) {
        for (Value v : nested->getOperands())
          if (viewedBuffer(v) == buffer)
            return WalkResult::interrupt();
        return WalkResult::advance();
      })
      .wasInterrupted();
}

bool modk::mayWrite(Operation *op, Value buffer) {
  return op
      ->walk([&](Operation *nested) {
        auto effects = dyn_cast<MemoryEffectOpInterface>(nested);
        if (!effects)
          return touches(nested, buffer) ? WalkResult::interrupt()
                                         : WalkResult::advance();
        SmallVector<MemoryEffects::EffectInstance> instances;
        effects.getEffects(instances);
        for (const MemoryEffects::EffectInstance &e : instances) {
          if (!isa<MemoryEffects::Write>(e.getEffect()))
            continue;
          Value written = e.getValue();
          // A write to no named buffer may be to any of them, unless it is
          // to a resource of its own (the KV cache).
          if ((!written &&
               isa<SideEffects::DefaultResource>(e.getResource())) ||
              (written && viewedBuffer(written) == buffer))
            return WalkResult::interrupt();
        }
        return WalkResult::advance();
      })
      .wasInterrupted();
}

modk::HostRowCount modk::hostRowCount(Value segments, MemRefType type,
                                      int64_t *k) {
  if (type.getRank() < 2 || ShapedType::isDynamic(type.getDimSize(1)))
    return HostRowCount::device;
  if (coversEveryRow(segments, type))
    return HostRowCount::bound;
  // A decode step's dense rows: one a sequence (seg[b] = b), B in all.
  if (type.getDimSize(1) == 1 &&
      llvm::any_of(segments.getUsers(), [&](Operation *user) {
        auto rows = dyn_cast<DecodeRowsOp>(user);
        return rows && rows.getSegments() == segments;
      }))
    return HostRowCount::bound;
  for (Operation *user : segments.getUsers()) {
    auto route = dyn_cast<RouteSelectOp>(user);
    if (!route || route.getSegments() != segments)
      continue;
    if (k)
      *k = route.getK();
    bool alwaysTopk = route.getCausalRouter() == modc::CausalRouter::none &&
                      !route.getCausalScores();
    return alwaysTopk && route.getK() == type.getDimSize(1)
               ? HostRowCount::bound
               : HostRowCount::topk;
  }
  return HostRowCount::device;
}

bool modk::coversEveryRow(Value segments, MemRefType type) {
  return type.getRank() >= 2 &&
         llvm::any_of(segments.getUsers(), [&](Operation *user) {
           auto identity = dyn_cast<IdentityRowsOp>(user);
           return identity && identity.getSegments() == segments &&
                  cast<MemRefType>(identity.getPositions().getType())
                          .getDimSize(1) == type.getDimSize(1);
         });
}

Value modk::groupMemberSegments(Operation *op) {
  if (auto rows = dyn_cast<RowsOp>(op))
    return rows.getSegments();
  if (auto gemm = dyn_cast<GemmOp>(op))
    return gemm.getSegments();
  if (auto dgrad = dyn_cast<GemmDgradOp>(op))
    return dgrad.getSegments();
  return cast<GemmWgradOp>(op).getSegments();
}
