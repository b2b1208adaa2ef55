//===- ModkDialect.cpp - The kernel-level MoD dialect -----------*- C++ -*-===//

#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace modc::modk;

#include "modc/Dialect/Modk/ModkDialect.cpp.inc"
#include "modc/Dialect/Modk/ModkEnums.cpp.inc"

#include "llvm/ADT/TypeSwitch.h"
#define GET_ATTRDEF_CLASSES
#include "modc/Dialect/Modk/ModkAttrs.cpp.inc"

void ModkDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "modc/Dialect/Modk/ModkOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "modc/Dialect/Modk/ModkAttrs.cpp.inc"
      >();
}

/// Row width (elements) of a [B, rows, width] or [B, width] buffer.
static int64_t lastDim(Value v) {
  return cast<MemRefType>(v.getType()).getShape().back();
}

LogicalResult EntryOp::verify() {
  for (Attribute p : getParams()) {
    auto dict = dyn_cast<DictionaryAttr>(p);
    if (!dict || !dict.getAs<StringAttr>("name") ||
        !dict.getAs<ArrayAttr>("shape") || !dict.getAs<StringAttr>("init"))
      return emitOpError("each params entry needs name, shape and init");
  }
  for (Attribute m : getModes()) {
    auto mode = dyn_cast<StringAttr>(m);
    if (!mode || (mode.getValue() != "topk" && mode.getValue() != "causal"))
      return emitOpError("modes must be 'topk' or 'causal'");
  }
  return success();
}

LogicalResult ParamOp::verify() {
  auto entry = (*this)->getParentOfType<EntryOp>();
  for (Attribute p : entry.getParams()) {
    auto dict = cast<DictionaryAttr>(p);
    if (dict.getAs<StringAttr>("name").getValue() != getName())
      continue;
    SmallVector<int64_t> shape;
    for (Attribute d : dict.getAs<ArrayAttr>("shape"))
      shape.push_back(cast<IntegerAttr>(d).getInt());
    if (ArrayRef<int64_t>(shape) != getType().getShape())
      return emitOpError() << "shape of '" << getName()
                           << "' differs from the entry's params list";
    return success();
  }
  return emitOpError() << "'" << getName()
                       << "' is not in the entry's params list";
}

LogicalResult AllocOp::verify() {
  MemRefType type = getType();
  if (type.getRank() < 1 || !type.isDynamicDim(0))
    return emitOpError("buffers are [B, ...] with a dynamic batch dimension");
  for (int64_t i = 1; i < type.getRank(); ++i)
    if (type.isDynamicDim(i))
      return emitOpError("only the batch dimension may be dynamic");
  if (std::optional<int64_t> offset = getOffset())
    if (*offset < 0 || *offset % 64 != 0)
      return emitOpError("offset must be a non-negative multiple of 64");
  return success();
}

int64_t AllocOp::getBytesPerSequence() {
  MemRefType type = getType();
  int64_t elems = 1;
  for (int64_t i = 1; i < type.getRank(); ++i)
    elems *= type.getDimSize(i);
  int64_t bytes = elems * (type.getElementTypeBitWidth() / 8);
  return llvm::alignTo(bytes, 64) + 64;
}

/// Weights and extra operands each epilogue takes.
static std::pair<size_t, size_t> gemmOperandCounts(Epilogue e) {
  switch (e) {
  case Epilogue::none:
  case Epilogue::gelu:
    return {1, 0};
  case Epilogue::rope:
  case Epilogue::residual_add:
    return {1, 1};
  case Epilogue::swiglu:
    return {2, 1};
  case Epilogue::gate_scale_scatter:
    return {1, 4};
  }
  llvm_unreachable("unknown epilogue");
}

LogicalResult GemmOp::verify() {
  Epilogue e = getEpilogue();
  auto [w, x] = gemmOperandCounts(e);
  if (getWeights().size() != w || getExtra().size() != x)
    return emitOpError() << "epilogue '" << stringifyEpilogue(e) << "' takes "
                         << w << " weight(s) and " << x
                         << " extra operand(s)";
  if (e == Epilogue::rope && (!getNHeads() || !getRopeTheta()))
    return emitOpError("the rope epilogue needs n_heads and rope_theta");
  if (e == Epilogue::gate_scale_scatter && !getGate())
    return emitOpError("the gate_scale_scatter epilogue needs a gate");
  for (Value w : getWeights()) {
    auto shape = cast<MemRefType>(w.getType()).getShape();
    if (shape.size() != 2 || shape[1] != lastDim(getInput()))
      return emitOpError("weights must be [N, K] with K the input width");
  }
  int64_t n = cast<MemRefType>(getWeights()[0].getType()).getShape()[0];
  Value rowsOut =
      e == Epilogue::gate_scale_scatter ? getExtra()[0] : getOutput();
  if (lastDim(rowsOut) != n)
    return emitOpError() << "output width " << lastDim(rowsOut)
                         << " differs from the weight's N = " << n;
  return success();
}

LogicalResult AttentionOp::verify() {
  int64_t width = lastDim(getQ());
  if (getNHeads() <= 0 || width % getNHeads() != 0 ||
      (width / getNHeads()) % 2 != 0)
    return emitOpError("width must split into n_heads even head dimensions");
  if (lastDim(getK()) != width || lastDim(getV()) != width ||
      lastDim(getOutput()) != width)
    return emitOpError("q, k, v and output must have one width");
  return success();
}

LogicalResult RouteSelectGatherOp::verify() {
  CausalRouter c = getCausalRouter();
  if ((c == CausalRouter::predictor) != (getCausalScores() != nullptr))
    return emitOpError("causal scores are given exactly for the predictor");
  auto scores = cast<MemRefType>(getScores().getType());
  int64_t seqLen = scores.getShape().back();
  if (getK() < 1 || getK() > seqLen)
    return emitOpError() << "k = " << getK() << " must be in [1, " << seqLen
                         << "]";
  int64_t rows = cast<MemRefType>(getGathered().getType()).getDimSize(1);
  int64_t needed = c == CausalRouter::none ? getK() : seqLen;
  if (rows < needed)
    return emitOpError() << "gathered buffer holds " << rows
                         << " rows a sequence, needs " << needed;
  return success();
}

LogicalResult ActivationGradOp::verify() {
  bool swiglu = getKind() == Activation::swiglu;
  if (swiglu != (getGate() != nullptr) || swiglu != (getDgate() != nullptr))
    return emitOpError("gate and dgate are given exactly for swiglu");
  return success();
}

#define GET_OP_CLASSES
#include "modc/Dialect/Modk/ModkOps.cpp.inc"
