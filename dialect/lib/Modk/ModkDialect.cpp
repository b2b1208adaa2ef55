//===- ModkDialect.cpp - The kernel-level MoD dialect -----------*- C++ -*-===//

#include "modc/Dialect/Modk/ModkDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SmallVectorExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace modc;
using namespace modc::modk;

#include "modc/Dialect/Modk/ModkDialect.cpp.inc"
#include "modc/Dialect/Modk/ModkEnums.cpp.inc"
#include "modc/Dialect/Modk/ModkInterfaces.cpp.inc"

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

//===----------------------------------------------------------------------===//
// #modk.gemm_config
//===----------------------------------------------------------------------===//

// <variant (, variant)* (, split N)? (, chunk N)?>, a variant being
// (from ROWS:)? PATH ROWSxCOLS (tma CTAS)? (separate_epilogue)?, or for a
// CUTLASS kernel (from ROWS:)? cutlass ROWSxCOLSxDEPTH cluster MxN stages N
// SCHEDULE (tf32x3)? raster ORDER (split_k N)? (grouped)?
/// The fields of a `cutlass` variant after its tile (`depth`, the tile's
/// third extent): cluster MxN stages N SCHEDULE (tf32x3)? raster ORDER
/// (split_k N)? (grouped)?
static LogicalResult parseCutlassVariant(AsmParser &parser, GemmVariant &v,
                                         int64_t depth) {
  v.tileDepth = depth;
  SmallVector<int64_t, 2> cluster;
  SMLoc clusterLoc = parser.getCurrentLocation();
  if (parser.parseKeyword("cluster") ||
      parser.parseDimensionList(cluster, /*allowDynamic=*/false,
                                /*withTrailingX=*/false))
    return failure();
  if (cluster.size() != 2)
    return parser.emitError(clusterLoc, "a cluster is ROWSxCOLUMNS of CTAs");
  v.clusterRows = cluster[0];
  v.clusterCols = cluster[1];
  if (parser.parseKeyword("stages") || parser.parseInteger(v.stages))
    return failure();
  std::string name;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseKeywordOrString(&name))
    return failure();
  std::optional<CutlassSchedule> schedule = symbolizeCutlassSchedule(name);
  if (!schedule)
    return parser.emitError(loc, "unknown CUTLASS schedule '")
           << name << "'; expected cooperative, pingpong or multistage";
  v.schedule = *schedule;
  v.tf32x3 = succeeded(parser.parseOptionalKeyword("tf32x3"));
  loc = parser.getCurrentLocation();
  if (parser.parseKeyword("raster") || parser.parseKeywordOrString(&name))
    return failure();
  std::optional<RasterOrder> raster = symbolizeRasterOrder(name);
  if (!raster)
    return parser.emitError(loc, "unknown raster order '")
           << name << "'; expected along_m or along_n";
  v.raster = *raster;
  if (succeeded(parser.parseOptionalKeyword("split_k")) &&
      parser.parseInteger(v.splitK))
    return failure();
  v.grouped = succeeded(parser.parseOptionalKeyword("grouped"));
  return success();
}

Attribute GemmConfigAttr::parse(AsmParser &parser, Type) {
  SmallVector<GemmVariant> variants;
  int64_t maxSplits = 1, chunkRows = 0;
  if (parser.parseLess())
    return {};
  do {
    if (succeeded(parser.parseOptionalKeyword("split"))) {
      if (parser.parseInteger(maxSplits))
        return {};
      continue;
    }
    if (succeeded(parser.parseOptionalKeyword("chunk"))) {
      if (parser.parseInteger(chunkRows))
        return {};
      continue;
    }
    GemmVariant v;
    if (succeeded(parser.parseOptionalKeyword("from")) &&
        (parser.parseInteger(v.minRows) || parser.parseColon()))
      return {};
    std::string pathName;
    SMLoc pathLoc = parser.getCurrentLocation();
    if (parser.parseKeywordOrString(&pathName))
      return {};
    std::optional<GemmPath> path = symbolizeGemmPath(pathName);
    if (!path) {
      parser.emitError(pathLoc, "unknown GEMM path '")
          << pathName << "'; expected simt, mma, wgmma or stream";
      return {};
    }
    v.path = *path;
    SmallVector<int64_t, 2> tile;
    SMLoc tileLoc = parser.getCurrentLocation();
    if (parser.parseDimensionList(tile, /*allowDynamic=*/false,
                                  /*withTrailingX=*/false))
      return {};
    bool cutlass = v.path == GemmPath::cutlass;
    if (tile.size() != (cutlass ? 3u : 2u)) {
      parser.emitError(tileLoc, cutlass ? "a CUTLASS tile is ROWSxCOLUMNSxDEPTH"
                                        : "a tile is ROWSxCOLUMNS");
      return {};
    }
    v.tileRows = tile[0];
    v.tileCols = tile[1];
    if (cutlass) {
      if (failed(parseCutlassVariant(parser, v, tile[2])))
        return {};
      variants.push_back(v);
      continue;
    }
    if (succeeded(parser.parseOptionalKeyword("tma")) &&
        parser.parseInteger(v.tmaCtas))
      return {};
    v.separateEpilogue =
        succeeded(parser.parseOptionalKeyword("separate_epilogue"));
    variants.push_back(v);
  } while (succeeded(parser.parseOptionalComma()));
  if (parser.parseGreater())
    return {};
  return parser.getChecked<GemmConfigAttr>(parser.getContext(), variants,
                                           maxSplits, chunkRows);
}

void GemmConfigAttr::print(AsmPrinter &printer) const {
  printer << "<";
  llvm::interleaveComma(getVariants(), printer, [&](const GemmVariant &v) {
    if (v.minRows != 0)
      printer << "from " << v.minRows << ": ";
    printer << stringifyGemmPath(v.path) << " " << v.tileRows << "x"
            << v.tileCols;
    if (v.path == GemmPath::cutlass) {
      printer << "x" << v.tileDepth << " cluster " << v.clusterRows << "x"
              << v.clusterCols << " stages " << v.stages << " "
              << stringifyCutlassSchedule(v.schedule)
              << (v.tf32x3 ? " tf32x3" : "") << " raster "
              << stringifyRasterOrder(v.raster);
      if (v.splitK != 1)
        printer << " split_k " << v.splitK;
      if (v.grouped)
        printer << " grouped";
      return;
    }
    if (v.tmaCtas)
      printer << " tma " << v.tmaCtas;
    if (v.separateEpilogue)
      printer << " separate_epilogue";
  });
  if (getMaxSplits() != 1)
    printer << ", split " << getMaxSplits();
  if (getChunkRows() != 0)
    printer << ", chunk " << getChunkRows();
  printer << ">";
}

bool GemmConfigAttr::readsWeightCopy(bool decode) const {
  return llvm::any_of(getVariants(), [&](const GemmVariant &v) {
    return (v.path == GemmPath::cutlass && !v.tf32x3) ||
           (v.path == GemmPath::wgmma && v.tmaCtas > 0) ||
           (decode && v.path == GemmPath::stream);
  });
}

LogicalResult
GemmConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       ArrayRef<GemmVariant> variants, int64_t maxSplits,
                       int64_t chunkRows) {
  if (variants.empty())
    return emitError() << "a GEMM configuration needs at least one variant";
  if (variants.front().minRows != 0)
    return emitError() << "the first variant must cover rows from 0, not "
                       << variants.front().minRows;
  for (auto [i, v] : llvm::enumerate(variants)) {
    if (i > 0 && v.minRows <= variants[i - 1].minRows)
      return emitError() << "variant " << i << " starts at " << v.minRows
                         << " rows, not after the previous one's "
                         << variants[i - 1].minRows;
    if (v.tileRows <= 0 || v.tileCols <= 0)
      return emitError() << "variant " << i << " has an empty tile";
    if (v.tmaCtas < 0 || (v.tmaCtas > 0 && v.path != GemmPath::wgmma))
      return emitError() << "variant " << i
                         << ": only wgmma kernels are fed by TMA, on a "
                            "positive number of CTAs";
    if (v.path == GemmPath::cutlass &&
        (v.tileDepth <= 0 || v.clusterRows <= 0 || v.clusterCols <= 0 ||
         v.stages < 2 || v.splitK < 1 || v.separateEpilogue))
      return emitError() << "variant " << i
                         << ": a CUTLASS kernel needs a tile depth, a "
                            "cluster, at least 2 stages and a split of 1 or "
                            "more, and keeps its epilogue";
    if (v.tf32x3 && (v.path != GemmPath::cutlass ||
                     v.schedule != CutlassSchedule::multistage))
      return emitError() << "variant " << i
                         << ": tf32x3 (f32 products on CUTLASS) runs "
                            "CUTLASS 2.x's multistage kernels only";
    if (v.path != GemmPath::cutlass &&
        (v.tileDepth != 0 || v.clusterRows != 1 || v.clusterCols != 1 ||
         v.stages != 0 || v.splitK != 1))
      return emitError() << "variant " << i
                         << ": only CUTLASS kernels have a depth, a "
                            "cluster, stages and a split";
    if (v.path == GemmPath::stream &&
        (!((v.tileRows == kStreamTileRows && v.tileCols == kStreamTileCols) ||
           (v.tileRows == kStreamMmaTileRows &&
            v.tileCols == kStreamMmaTileCols)) ||
         v.separateEpilogue))
      return emitError() << "variant " << i << ": the stream kernel's tile is "
                         << kStreamTileRows << "x" << kStreamTileCols << " (or "
                         << kStreamMmaTileRows << "x" << kStreamMmaTileCols
                         << " on tensor cores) and holds every epilogue";
  }
  if (maxSplits < 1 || chunkRows < 0)
    return emitError() << "split must be at least 1 and chunk at least 0";
  return success();
}

LogicalResult ParamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef name, ArrayRef<int64_t> shape,
                                ParamInit init, FloatAttr std, bool) {
  if (name.empty())
    return emitError() << "a parameter needs a name";
  if (shape.empty() || llvm::any_of(shape, [](int64_t d) { return d <= 0; }))
    return emitError() << "parameter '" << name
                       << "' needs a shape of positive sizes";
  if ((init == ParamInit::normal) != bool(std))
    return emitError() << "parameter '" << name
                       << "': std is given exactly for the normal init";
  if (std &&
      !(std.getValueAsDouble() > 0 && std::isfinite(std.getValueAsDouble())))
    return emitError() << "parameter '" << name
                       << "': std must be positive and finite";
  return success();
}

LogicalResult
MoDConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      FloatAttr capacity, std::optional<int64_t> capacityTokens,
                      Schedule schedule, ArrayRef<int64_t> layers, Gate,
                      CausalRouter, FloatAttr auxLossWeight,
                      int64_t predictorHidden) {
  if (bool(capacity) == capacityTokens.has_value())
    return emitError() << "a MoD configuration has one of capacity and "
                          "capacity_tokens";
  if (capacity && !(capacity.getValueAsDouble() > 0 &&
                    capacity.getValueAsDouble() <= 1))
    return emitError() << "capacity must be in (0, 1], got "
                       << capacity.getValueAsDouble();
  if (capacityTokens && *capacityTokens < 1)
    return emitError() << "capacity_tokens must be positive, got "
                       << *capacityTokens;
  // `layers` with no list routes nothing, as the empty list in the model
  // file does.
  if (schedule != Schedule::layers && !layers.empty())
    return emitError() << "layers lists the routed layers of schedule "
                          "'layers' only";
  if (!auxLossWeight || predictorHidden < 1)
    return emitError() << "a MoD configuration needs aux_loss_weight and a "
                          "positive predictor_hidden";
  return success();
}

LogicalResult ModelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef, int64_t vocabSize, int64_t dModel,
                                int64_t nLayers, int64_t nHeads,
                                std::optional<int64_t> nKvHeads, int64_t dFf,
                                int64_t seqLen, Activation, FloatAttr normEps,
                                FloatAttr ropeTheta, BoolAttr, DType,
                                MoDConfigAttr mod, MoEConfigAttr moe) {
  for (auto [value, key] :
       {std::pair{vocabSize, "vocab_size"}, {dModel, "d_model"},
        {nHeads, "n_heads"}, {dFf, "d_ff"}, {seqLen, "seq_len"}})
    if (value < 1)
      return emitError() << key << " must be positive, got " << value;
  if (nLayers < 0)
    return emitError() << "n_layers must be >= 0, got " << nLayers;
  if (dModel % nHeads != 0 || (dModel / nHeads) % 2 != 0)
    return emitError() << "d_model / n_heads must be an even whole number, got "
                       << dModel << " / " << nHeads;
  if (nKvHeads && (*nKvHeads < 1 || nHeads % *nKvHeads != 0))
    return emitError() << "n_kv_heads must be positive and divide n_heads, "
                          "got "
                       << *nKvHeads << " of " << nHeads;
  if (!(normEps.getValueAsDouble() > 0) || !(ropeTheta.getValueAsDouble() > 0))
    return emitError() << "norm_eps and rope_theta must be positive";
  if (mod)
    for (int64_t layer : mod.getLayers())
      if (layer < 0 || layer >= nLayers)
        return emitError() << "routed layer " << layer << " is not in [0, "
                           << nLayers << ")";
  if (moe)
    for (auto [layer, capacity] :
         llvm::zip_equal(moe.getLayers(), moe.getCapacities()))
      if (layer < 0 || layer >= nLayers || capacity > seqLen)
        return emitError() << "MoE layer " << layer << " (capacity " << capacity
                           << ") is not in [0, " << nLayers
                           << ") or holds more than seq_len";
  return success();
}

LogicalResult
MoEConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t nExperts, int64_t noopExperts, int64_t dExpert,
                      FloatAttr capacityFactor, FloatAttr balanceLossWeight,
                      ArrayRef<int64_t> layers, ArrayRef<int64_t> capacities) {
  if (nExperts < 1 || noopExperts < 0 || dExpert < 1)
    return emitError() << "an MoE configuration needs n_experts >= 1, "
                          "noop_experts >= 0 and d_expert >= 1";
  if (!capacityFactor || !balanceLossWeight ||
      !(capacityFactor.getValueAsDouble() > 0) ||
      !(balanceLossWeight.getValueAsDouble() >= 0))
    return emitError() << "an MoE configuration needs capacity_factor > 0 "
                          "and balance_loss_weight >= 0";
  if (layers.size() != capacities.size())
    return emitError() << "an MoE configuration lists a capacity for each of "
                          "its layers";
  for (size_t i = 0; i < layers.size(); ++i)
    if (capacities[i] < 1 || (i > 0 && layers[i] <= layers[i - 1]))
      return emitError() << "MoE layers ascend and have a capacity >= 1";
  return success();
}

Operation *modc::modk::kernelBefore(Operation *op) {
  Operation *prev = op->getPrevNode();
  while (prev && isa<AllocOp>(prev))
    prev = prev->getPrevNode();
  return prev;
}

Operation *modc::modk::kernelAfter(Operation *op) {
  Operation *next = op->getNextNode();
  while (next && isa<AllocOp>(next))
    next = next->getNextNode();
  return next;
}

/// Row width (elements) of a [B, rows, width] or [B, width] buffer.
static int64_t lastDim(Value v) {
  return cast<MemRefType>(v.getType()).getShape().back();
}

LogicalResult EntryOp::verify() {
  // A name that is a kind's is that kind: @grad computes the gradient.
  if (std::optional<EntryKind> named = symbolizeEntryKind(getSymName());
      named && *named != getKind())
    return emitOpError() << "is named @" << getSymName() << " but its kind is "
                         << stringifyEntryKind(getKind());
  llvm::StringSet<> names;
  for (auto p : getParams().getAsRange<ParamAttr>())
    if (!names.insert(p.getName()).second)
      return emitOpError() << "parameter '" << p.getName()
                           << "' is listed twice";
  return success();
}

LogicalResult ParamOp::verify() {
  auto entry = (*this)->getParentOfType<EntryOp>();
  for (auto p : entry.getParams().getAsRange<ParamAttr>()) {
    if (p.getName() != getName())
      continue;
    if (p.getShape() != getType().getShape())
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

MemRefType ColumnWindowOp::windowType(MemRefType source, int64_t offset,
                                      int64_t width) {
  SmallVector<int64_t> shape(source.getShape());
  shape.back() = width;
  // The source's strides: static, since only the batch dimension (the
  // outermost) is dynamic.
  SmallVector<int64_t> strides = source.getStridesAndOffset().first;
  return MemRefType::get(shape, source.getElementType(),
                         StridedLayoutAttr::get(source.getContext(), offset,
                                                strides));
}

int64_t ColumnWindowOp::rowStride(MemRefType type) {
  if (auto layout = dyn_cast<StridedLayoutAttr>(type.getLayout()))
    if (type.getRank() >= 2)
      return layout.getStrides()[type.getRank() - 2];
  return type.getShape().back();
}

Value ColumnWindowOp::getViewSource() { return getSource(); }

LogicalResult ColumnWindowOp::verify() {
  auto source = cast<MemRefType>(getSource().getType());
  auto window = cast<MemRefType>(getWindow().getType());
  if (!source.getLayout().isIdentity() || source.getRank() < 2 ||
      ShapedType::isDynamic(source.getShape().back()))
    return emitOpError("the source must be a contiguous row buffer");
  int64_t width = window.getRank() == source.getRank()
                      ? window.getShape().back()
                      : ShapedType::kDynamic;
  int64_t offset = getOffset();
  if (ShapedType::isDynamic(width) || width <= 0 || offset < 0 ||
      offset + width > source.getShape().back())
    return emitOpError() << "columns [" << offset << ", " << offset << " + "
                         << width << ") are outside the source's "
                         << source.getShape().back();
  if (window != windowType(source, offset, width))
    return emitOpError() << "the window's type must be "
                         << windowType(source, offset, width);
  // Its readers index it by its row stride (modk.rows says in detail why
  // it cannot, in its verifier).
  for (OpOperand &use : getWindow().getUses()) {
    Operation *user = use.getOwner();
    auto reader = dyn_cast<ColumnWindowReader>(user);
    if (isa<RowsOp>(user) ||
        (reader && reader.readsWindowOperand(use.getOperandNumber())))
      continue;
    return emitOpError() << "is operand " << use.getOperandNumber() << " of "
                         << user->getName()
                         << ", which cannot read a column window";
  }
  return success();
}

/// Weights and extra operands each epilogue takes.
static std::pair<size_t, size_t> gemmOperandCounts(Epilogue e) {
  switch (e) {
  case Epilogue::none:
  case Epilogue::gelu:
  case Epilogue::rows:
    return {1, 0};
  case Epilogue::rope:
  case Epilogue::residual_add:
    return {1, 1};
  case Epilogue::swiglu:
    return {2, 1};
  }
  llvm_unreachable("unknown epilogue");
}

/// `causal_only` names a condition of the forward entry (its mode and its
/// caller's causal_decisions): no other entry has it.
static LogicalResult verifyCausalOnly(Operation *op, bool causalOnly) {
  if (!causalOnly)
    return success();
  auto entry = op->getParentOfType<EntryOp>();
  if (entry && entry.getKind() != EntryKind::forward)
    return op->emitOpError("is causal_only in @")
           << entry.getSymName()
           << ": only the forward entry runs kernels on causal decisions";
  return success();
}

LogicalResult GemmOp::verify() {
  Epilogue e = getEpilogue();
  auto [w, x] = gemmOperandCounts(e);
  // `none` may stack several weights along N (modk-fuse-horizontal).
  bool stacks = e == Epilogue::none && getWeights().size() > 1;
  if ((getWeights().size() != w && !stacks) || getExtra().size() != x)
    return emitOpError() << "epilogue '" << stringifyEpilogue(e) << "' takes "
                         << w << " weight(s) and " << x
                         << " extra operand(s)";
  if (stacks && getConfig())
    return emitOpError("a stacked product has no CUDA kernel configuration");
  if (e == Epilogue::rope && (!getNHeads() || !getRopeTheta()))
    return emitOpError("the rope epilogue needs n_heads and rope_theta");
  for (Value w : getWeights()) {
    auto shape = cast<MemRefType>(w.getType()).getShape();
    if (shape.size() != 2 || shape[1] != lastDim(getInput()))
      return emitOpError("weights must be [N, K] with K the input width");
  }
  int64_t n = getStackedN();
  if (lastDim(getOutput()) != n)
    return emitOpError() << "output width " << lastDim(getOutput())
                         << " differs from the weights' N = " << n;
  return verifyCausalOnly(*this, getCausalOnly());
}

int64_t GemmOp::getStackedN() {
  if (getEpilogue() != Epilogue::none)
    return cast<MemRefType>(getWeights()[0].getType()).getShape()[0];
  int64_t n = 0;
  for (Value w : getWeights())
    n += cast<MemRefType>(w.getType()).getShape()[0];
  return n;
}

RowsOp GemmOp::getEpilogueRows() {
  Region &region = getFusedRows();
  if (getEpilogue() != Epilogue::rows || region.empty() ||
      region.front().empty())
    return nullptr;
  return dyn_cast<RowsOp>(region.front().front());
}

Value GemmOp::getAddedBuffer() {
  RowsOp rows = getEpilogueRows();
  if (!rows || rows.getPositions() || rows.getHeadDim())
    return {};
  Block &body = rows.getBody().front();
  if (!llvm::hasNItems(body, 2))
    return {};
  auto add = dyn_cast<arith::AddFOp>(body.front());
  if (!add || body.back().getOperands() != ValueRange(add.getResult()))
    return {};
  auto inputOf = [&](Value v) -> Value {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &body ? rows.getInputs()[arg.getArgNumber()]
                                          : Value();
  };
  Value product = getFusedRows().front().getArgument(0);
  Value lhs = inputOf(add.getLhs()), rhs = inputOf(add.getRhs());
  Value addend = lhs == product ? rhs : rhs == product ? lhs : Value();
  Value y = getOutput();
  if (!addend || addend == product || addend.getType() != y.getType() ||
      !cast<MemRefType>(y.getType()).getElementType().isF32())
    return {};
  return addend;
}

bool GemmOp::isElementwiseEpilogue(Value *source) {
  RowsOp rows = getEpilogueRows();
  if (!rows || rows.getPositions() || rows.getHeadDim() ||
      rows.hasTokenOperands() || rows.getNumMaxima() != 0 ||
      rows.getOutputs().size() != 1 || rows.getOutputs()[0] != getOutput() ||
      rows.getOutputAccessAt(0) != Access::row)
    return false;
  Block &body = rows.getBody().front();
  // Only the inputs' elements: no sums (the epilogue's reduce is empty).
  if (body.getNumArguments() != rows.getInputs().size() ||
      body.getTerminator()->getNumOperands() != 1)
    return false;
  Value product = getFusedRows().front().getArgument(0);
  auto yType = cast<MemRefType>(getOutput().getType());
  auto storable = [](Type element) {
    return element.isF32() || element.isBF16();
  };
  // Whole rows (no column windows): the library's row pitch is y's width.
  if (!storable(yType.getElementType()) || !yType.getLayout().isIdentity())
    return false;
  Value other;
  for (auto [j, in] : llvm::enumerate(rows.getInputs())) {
    if (rows.getInputAccessAt(j) != Access::row)
      return false;
    if (in == product)
      continue;
    auto type = cast<MemRefType>(in.getType());
    if (other || type.getShape() != yType.getShape() ||
        !type.getLayout().isIdentity() || !storable(type.getElementType()))
      return false;
    other = in;
  }
  // The math: arith and math ops only (no column index, row count or
  // head pairs), which every target's generator prints.
  for (Operation &o : body.without_terminator()) {
    StringRef dialect = o.getDialect() ? o.getDialect()->getNamespace() : "";
    if (dialect != "arith" && dialect != "math")
      return false;
  }
  if (source)
    *source = other;
  return true;
}

/// A product's precision: `precision` where it is set, else the entry's
/// dtype.
static bool precisionIsBf16(Operation *op, std::optional<DType> precision) {
  if (precision)
    return *precision == DType::bf16;
  auto entry = op->getParentOfType<EntryOp>();
  return entry && entry.isBf16();
}

LogicalResult PredictorOp::verify() {
  return verifyCausalOnly(*this, getCausalOnly());
}

bool GemmOp::productsBf16() {
  return precisionIsBf16(*this, getPrecision());
}

bool GemmOp::readsWeightCopy(bool decode) {
  for (GemmConfigAttr config : {getConfigAttr(), getDeviceRowsConfigAttr()})
    if (config && config.readsWeightCopy(decode))
      return true;
  return false;
}

bool GemmWgradOp::productsBf16() {
  return precisionIsBf16(*this, getPrecision());
}

/// The few-row kernel reads A and W with the reduction contiguous: forward
/// products only.
static LogicalResult verifyNoStreamVariant(Operation *op,
                                           std::optional<GemmConfigAttr> config) {
  if (config)
    for (const GemmVariant &v : config->getVariants())
      if (v.path == GemmPath::stream)
        return op->emitOpError("the stream kernel runs forward products "
                               "(modk.gemm) only");
  return success();
}

LogicalResult GemmDgradOp::verify() {
  return verifyNoStreamVariant(*this, getConfig());
}

LogicalResult GemmWgradOp::verify() {
  return verifyNoStreamVariant(*this, getConfig());
}

LogicalResult GemmOp::verifyRegions() {
  Region &region = getFusedRows();
  if (getEpilogue() != Epilogue::rows) {
    if (!region.empty())
      return emitOpError("only the `rows` epilogue has a region");
    return success();
  }
  if (!region.hasOneBlock() || region.front().getNumArguments() != 1)
    return emitOpError("the `rows` epilogue needs a region of one block with "
                       "one argument, the product");
  Block &block = region.front();
  BlockArgument product = block.getArgument(0);
  auto productType = dyn_cast<MemRefType>(product.getType());
  auto inputShape = cast<MemRefType>(getInput().getType()).getShape();
  int64_t n = cast<MemRefType>(getWeights()[0].getType()).getShape()[0];
  if (!productType || !productType.getElementType().isF32() ||
      productType.getShape().drop_back() != inputShape.drop_back() ||
      productType.getShape().back() != n)
    return emitOpError("the product argument must be an f32 buffer of the "
                       "input's rows and the weight's N = ")
           << n;
  auto rows = getEpilogueRows();
  if (!rows || !llvm::hasSingleElement(block))
    return emitOpError("the `rows` epilogue region holds one modk.rows");
  if (rows.getNumReductions() != 0 || rows.getNumMaxima() != 0)
    return emitOpError("an epilogue's modk.rows cannot sum over its row: a "
                       "tile holds part of a row");
  if (rows.hasRowSums())
    return emitOpError("an epilogue's modk.rows cannot have column sums: a "
                       "tile holds some of the rows");
  if (rows.getSegments() != getSegments())
    return emitOpError("the epilogue's rows must be the product's rows");
  if (rows.getOutputs().size() != 1 || rows.getOutputs()[0] != getOutput())
    return emitOpError("the epilogue's one output must be the GEMM's output");
  if (!product.hasOneUse())
    return emitOpError("the epilogue reads the product exactly once");
  OpOperand &use = *product.use_begin();
  unsigned index = use.getOperandNumber();
  if (index >= rows.getInputs().size() || rows.isTokenOperand(index))
    return emitOpError("the epilogue reads the product as an input at its "
                       "row, not at a token");
  return success();
}

/// The checks the attention ops share: q splits into n_heads even heads,
/// and k and v into whole heads of that width, n_kv_heads of them, which
/// divides n_heads (grouped-query attention, docs/model-format.md section
/// 3). `outputs`: the buffers of q's width (the output, dq).
template <typename AttentionLikeOp>
static LogicalResult verifyAttentionWidths(AttentionLikeOp op,
                                           ValueRange outputs,
                                           ValueRange kvOutputs = {}) {
  int64_t width = lastDim(op.getQ()), heads = op.getNHeads();
  if (heads <= 0 || width % heads != 0 || (width / heads) % 2 != 0)
    return op.emitOpError("width must split into n_heads even head dimensions");
  for (Value out : outputs)
    if (lastDim(out) != width)
      return op.emitOpError("q and output must have one width");
  int64_t kvWidth = lastDim(op.getK()), hd = width / heads;
  if (lastDim(op.getV()) != kvWidth)
    return op.emitOpError("k and v must have one width");
  for (Value out : kvOutputs)
    if (lastDim(out) != kvWidth)
      return op.emitOpError("dk and dv must have k's width");
  if (kvWidth % hd != 0 || kvWidth == 0 || heads % (kvWidth / hd) != 0)
    return op.emitOpError()
           << "k's width " << kvWidth << " must be n_kv_heads heads of " << hd
           << ", n_kv_heads dividing n_heads (" << heads << ")";
  return success();
}

template <typename AttentionLikeOp>
static int64_t kvHeadsOf(AttentionLikeOp op) {
  return lastDim(op.getK()) / (lastDim(op.getQ()) / op.getNHeads());
}

LogicalResult AttentionOp::verify() {
  return verifyAttentionWidths(*this, {getOutput()});
}
int64_t AttentionOp::getKvHeads() { return kvHeadsOf(*this); }

LogicalResult AttentionGradOp::verify() {
  return verifyAttentionWidths(*this, {getO(), getDout(), getDq()},
                               {getDk(), getDv()});
}
int64_t AttentionGradOp::getKvHeads() { return kvHeadsOf(*this); }

LogicalResult DecodeAttentionOp::verify() {
  return verifyAttentionWidths(*this, {getOutput()});
}
int64_t DecodeAttentionOp::getKvHeads() { return kvHeadsOf(*this); }

/// The checks both routing ops share: causal scores exactly for the
/// predictor, k within the sequence, and `held` (the named buffer's rows a
/// sequence) enough for every row the selection may make.
template <typename RoutingOp>
static LogicalResult verifyRouting(RoutingOp op, Value held,
                                   StringRef heldName) {
  CausalRouter c = op.getCausalRouter();
  if ((c == CausalRouter::predictor) != (op.getCausalScores() != nullptr))
    return op.emitOpError("causal scores are given exactly for the predictor");
  int64_t seqLen =
      cast<MemRefType>(op.getScores().getType()).getShape().back();
  int64_t k = op.getK();
  if (k < 1 || k > seqLen)
    return op.emitOpError() << "k = " << k << " must be in [1, " << seqLen
                            << "]";
  int64_t rows = cast<MemRefType>(held.getType()).getDimSize(1);
  int64_t needed = c == CausalRouter::none ? k : seqLen;
  if (rows < needed)
    return op.emitOpError() << heldName << " " << rows
                            << " rows a sequence, needs " << needed;
  return success();
}

LogicalResult RouteSelectOp::verify() {
  return verifyRouting(*this, getPositions(), "positions hold");
}

LogicalResult MoeBalanceOp::verify() {
  auto probs = cast<MemRefType>(getProbs().getType());
  if (probs.getRank() != 3 || !probs.getElementType().isF32())
    return emitOpError("probs must be f32 [B, rows, E+N]");
  if (bool(getDgate()) != bool(getDlogits()))
    return emitOpError("dgate and dlogits come together (the gradient)");
  if (getDlogits() && getDlogits().getType() != probs)
    return emitOpError("dlogits must have the probs' type");
  auto losses = cast<MemRefType>(getLosses().getType());
  if (losses.getRank() != 1 || losses.getDimSize(0) < 4)
    return emitOpError("losses must hold [total, ce, aux, balance]");
  if (getNMoe() < 1)
    return emitOpError("n_moe must be positive");
  return success();
}

int64_t MoeSelectOp::getRouterWidth() {
  return cast<MemRefType>(getLogits().getType()).getShape().back();
}

LogicalResult MoeSelectOp::verify() {
  auto logits = cast<MemRefType>(getLogits().getType());
  if (logits.getRank() != 3 || !logits.getElementType().isF32())
    return emitOpError("logits must be f32 [B, rows, E+N]");
  int64_t rows = logits.getDimSize(1), width = getRouterWidth();
  int64_t experts = getNumExperts();
  if (experts < 1 || experts > width ||
      getExpertSegments().size() != size_t(experts))
    return emitOpError() << "needs one row set (positions and segments) for "
                            "each of 1..E+N = "
                         << width << " real experts";
  if (getProbs().getType() != logits)
    return emitOpError("probs must have the logits' type");
  auto perRow = [&](Value v, Type element) {
    auto t = cast<MemRefType>(v.getType());
    return t.getRank() == 2 && t.getDimSize(1) == rows &&
           t.getElementType() == element;
  };
  Builder b(getContext());
  if (!perRow(getChoice(), b.getI32Type()) ||
      !perRow(getGate(), b.getF32Type()))
    return emitOpError() << "choice and gate must be i32 and f32 [B, " << rows
                         << "]";
  if (getCapacity() < 1)
    return emitOpError() << "capacity must be positive, got " << getCapacity();
  // An expert keeps at most C rows of a sequence, and no more than a pass
  // has (a decode step's one row).
  int64_t expertRows = std::min<int64_t>(getCapacity(), rows);
  for (auto [pos, seg] :
       llvm::zip_equal(getExpertPositions(), getExpertSegments())) {
    auto p = cast<MemRefType>(pos.getType());
    auto s = cast<MemRefType>(seg.getType());
    if (p.getRank() != 2 || p.getDimSize(1) != expertRows ||
        !p.getElementType().isInteger(32) || !s.getElementType().isInteger(64))
      return emitOpError() << "an expert's rows are i32 positions [B, "
                           << expertRows << "] and i64 segments";
  }
  if (getDecisions() && !getPositions() &&
      cast<MemRefType>(getDecisions().getType()).getDimSize(1) != rows)
    return emitOpError("decisions at tokens other than the rows need the "
                       "rows' positions");
  return success();
}

/// The modk.rows of a selection's `gather` region, or null.
static RowsOp gatherRowsOf(Region &region) {
  if (region.empty() || region.front().empty())
    return nullptr;
  return dyn_cast<RowsOp>(region.front().front());
}

/// The rules of a selection's `gather` region (modk-fuse-select-gather):
/// one modk.rows over the rows (`segments`) and tokens (`positions`, or
/// none) that the selection writes, with no column sums, touching none of
/// `selection` (what the selection reads or writes besides those).
static LogicalResult verifyGatherRegion(Operation *op, Region &region,
                                        Value segments, Value positions,
                                        ArrayRef<Value> selection) {
  if (region.empty())
    return success();
  if (!region.hasOneBlock() || region.front().getNumArguments() != 0)
    return op->emitOpError(
        "the `gather` region is one block without arguments");
  RowsOp rows = gatherRowsOf(region);
  if (!rows || !llvm::hasSingleElement(region.front()))
    return op->emitOpError("the `gather` region holds one modk.rows");
  // It runs a sequence at a time, as soon as that sequence is selected.
  if (rows.getSegments() != segments || rows.getPositions() != positions)
    return op->emitOpError("the gather's rows and tokens must be the ones "
                           "this op selects");
  if (rows.hasRowSums())
    return op->emitOpError("the gather cannot have column sums: each "
                           "sequence's rows are done on their own");
  for (Value v : rows->getOperands())
    if (v && llvm::is_contained(selection, v))
      return op->emitOpError("the gather cannot read or write the "
                             "selection's scores or mask");
  return success();
}

RowsOp RouteSelectOp::getGatherRows() { return gatherRowsOf(getFusedGather()); }

LogicalResult RouteSelectOp::verifyRegions() {
  if (std::optional<uint64_t> blocks = getGatherBlocks()) {
    if (getFusedGather().empty())
      return emitOpError("gather_blocks configures a fused gather; this op "
                         "has no `gather` region");
    if (*blocks > getK())
      return emitOpError("gather_blocks ")
             << *blocks << " exceeds the " << getK()
             << " rows a sequence gathers";
    if (*blocks > 1 && getK() > kMaxSplitGatherRows)
      return emitOpError("gather_blocks ")
             << *blocks << " needs k <= " << kMaxSplitGatherRows
             << " (each block keeps the k positions in shared memory); k is "
             << getK();
  }
  return verifyGatherRegion(*this, getFusedGather(), getSegments(),
                            getGatherPositions(), getSelectionBuffers());
}

RowsOp DecodeSelectOp::getGatherRows() {
  return gatherRowsOf(getFusedGather());
}

LogicalResult DecodeSelectOp::verifyRegions() {
  return verifyGatherRegion(*this, getFusedGather(), getSegments(),
                            getGatherPositions(), getSelectionBuffers());
}

LogicalResult ActivationGradOp::verify() {
  bool swiglu = getKind() == Activation::swiglu;
  if (swiglu != (getGate() != nullptr) || swiglu != (getDgate() != nullptr))
    return emitOpError("gate and dgate are given exactly for swiglu");
  return success();
}

//===----------------------------------------------------------------------===//
// modk.rows
//===----------------------------------------------------------------------===//

/// Whether `access` reads or writes rows of elements of the row width.
static bool holdsElementRows(Access access) {
  return access == Access::row || access == Access::token ||
         access == Access::table || access == Access::scatter;
}

/// Whether `v`, addressed with `access`, holds rows of elements in the
/// shape that access needs: [B, rows or T, width] or a table [V, width].
static bool holdsElementRows(Access access, Value v) {
  int64_t rank = cast<MemRefType>(v.getType()).getRank();
  return holdsElementRows(access) &&
         rank == (access == Access::row || access == Access::token ? 3 : 2);
}

int64_t RowsOp::getWidth() {
  // The outputs first, then the inputs: a kernel's rows are those it
  // writes.
  unsigned nIn = getInputs().size(), n = nIn + getOutputs().size();
  SmallVector<unsigned> order = llvm::to_vector(llvm::seq(nIn, n));
  llvm::append_range(order, llvm::seq(0u, nIn));
  for (unsigned i : order)
    if (holdsElementRows(getAccess(i), getInputOrOutput(i)))
      return lastDim(getInputOrOutput(i));
  for (unsigned i : order)
    if (getAccess(i) == Access::column || getAccess(i) == Access::column_sum)
      return lastDim(getInputOrOutput(i));
  return 1;
}

Access RowsOp::getInputAccessAt(unsigned j) {
  return cast<AccessAttr>(getInputAccess()[j]).getValue();
}

Access RowsOp::getOutputAccessAt(unsigned k) {
  return cast<AccessAttr>(getOutputAccess()[k]).getValue();
}

Access RowsOp::getAccess(unsigned index) {
  unsigned nIn = getInputs().size();
  return index < nIn ? getInputAccessAt(index) : getOutputAccessAt(index - nIn);
}

bool RowsOp::isTokenOperand(unsigned index) {
  Access access = getAccess(index);
  return access == Access::token || access == Access::token_value;
}

bool RowsOp::hasTokenOperands() {
  for (unsigned i = 0, e = getInputs().size() + getOutputs().size(); i < e; ++i)
    if (isTokenOperand(i))
      return true;
  return false;
}

bool RowsOp::isLoadedOnceARow(unsigned j) {
  Access access = getInputAccessAt(j);
  return access == Access::row_value || access == Access::token_value ||
         access == Access::scalar;
}

bool RowsOp::isStoredOnceARow(unsigned k) {
  Access access = getOutputAccessAt(k);
  return access == Access::row_value || access == Access::token_value;
}

bool RowsOp::isStoredPerElement(unsigned k) {
  return holdsElementRows(getOutputAccessAt(k));
}

std::optional<unsigned> RowsOp::getIdsInput() {
  for (unsigned j = 0, e = getInputs().size(); j < e; ++j)
    if (getInputAccessAt(j) == Access::ids)
      return j;
  return std::nullopt;
}

SmallVector<unsigned> RowsOp::getRowSumOutputs() {
  SmallVector<unsigned> sums;
  for (Access kind : {Access::column_sum, Access::row_sum})
    for (unsigned k = 0, e = getOutputs().size(); k < e; ++k)
      if (getOutputAccessAt(k) == kind)
        sums.push_back(k);
  return sums;
}

bool RowsOp::isRowInvariantArgument(BlockArgument arg) {
  return arg.getArgNumber() >= getInputs().size() ||
         isLoadedOnceARow(arg.getArgNumber());
}

bool RowsOp::readsWindowAt(unsigned index) {
  if (getNumReductions() != 0 || getNumMaxima() != 0 || hasTokenOperands() ||
      hasLookups() || hasRowSums())
    return false;
  return getInputAccessAt(index) == Access::row;
}

bool RowsOp::readsWindowOperand(unsigned operandNumber) {
  for (auto [j, in] : llvm::enumerate(getInputsMutable()))
    if (in.getOperandNumber() == operandNumber)
      return readsWindowAt(j);
  // An output window is written in place: it is also an input, read as a
  // window.
  for (OpOperand &out : getOutputsMutable())
    if (out.getOperandNumber() == operandNumber)
      for (auto [j, in] : llvm::enumerate(getInputs()))
        if (in == out.get() && readsWindowAt(j))
          return true;
  return false;
}

/// q, k and v: the CPU attention kernels take each one's row stride.
template <typename AttentionLikeOp>
static bool readsQKVWindow(AttentionLikeOp op, unsigned operandNumber) {
  return operandNumber == op.getQMutable().getOperandNumber() ||
         operandNumber == op.getKMutable().getOperandNumber() ||
         operandNumber == op.getVMutable().getOperandNumber();
}

bool AttentionOp::readsWindowOperand(unsigned operandNumber) {
  return readsQKVWindow(*this, operandNumber);
}

bool CacheAppendOp::readsWindowOperand(unsigned operandNumber) {
  return operandNumber == getKMutable().getOperandNumber() ||
         operandNumber == getVMutable().getOperandNumber();
}

LogicalResult CacheAppendOp::verify() {
  if (lastDim(getK()) != lastDim(getV()))
    return emitOpError("k and v must have one width");
  if (getLayer() < 0)
    return emitOpError("layer must be non-negative");
  auto entry = (*this)->getParentOfType<EntryOp>();
  if (entry && entry.getKind() != EntryKind::forward)
    return emitOpError("is in a ")
           << stringifyEntryKind(entry.getKind())
           << " entry: only the forward entry fills the KV cache";
  return success();
}

bool AttentionGradOp::readsWindowOperand(unsigned operandNumber) {
  return readsQKVWindow(*this, operandNumber);
}

bool GemmOp::readsWindowOperand(unsigned operandNumber) {
  // An f32 product's input, read by sgemm with the window's row stride as
  // its leading dimension; a bf16 product rounds a contiguous copy, and a
  // CUDA one (`config`) loads tiles of contiguous rows.
  return operandNumber == getInputMutable().getOperandNumber() &&
         !productsBf16() && !getConfig();
}

unsigned RowsOp::getNumReductions() {
  return getReduce().front().getTerminator()->getNumOperands();
}

unsigned RowsOp::getNumMaxima() {
  Region &maxima = getMaxima();
  return maxima.empty() ? 0 : maxima.front().getTerminator()->getNumOperands();
}

Value RowsOp::getInputOrOutput(unsigned index) {
  unsigned nIn = getInputs().size();
  return index < nIn ? getInputs()[index] : getOutputs()[index - nIn];
}

/// The access attributes of `accesses`.
static ArrayAttr accessArray(MLIRContext *context, ArrayRef<Access> accesses) {
  return ArrayAttr::get(
      context, llvm::map_to_vector(accesses, [&](Access a) -> Attribute {
        return AccessAttr::get(context, a);
      }));
}

void RowsOp::appendOutput(Value output, Access access) {
  getOutputsMutable().append(output);
  SmallVector<Attribute> accesses(getOutputAccess().getValue());
  accesses.push_back(AccessAttr::get(getContext(), access));
  setOutputAccessAttr(ArrayAttr::get(getContext(), accesses));
}

void RowsOp::build(OpBuilder &builder, OperationState &state, ValueRange inputs,
                   ArrayRef<Access> inputAccess, Value segments,
                   Value positions, ValueRange outputs,
                   ArrayRef<Access> outputAccess) {
  MLIRContext *context = builder.getContext();
  build(builder, state, inputs, segments, positions, outputs,
        accessArray(context, inputAccess), accessArray(context, outputAccess),
        /*causal_only=*/nullptr, /*head_dim=*/nullptr);
}

/// access(<input accesses> -> <output accesses>): the keywords of the
/// accesses, in operand order.
static ParseResult parseAccesses(OpAsmParser &parser, ArrayAttr &inputs,
                                 ArrayAttr &outputs) {
  MLIRContext *context = parser.getContext();
  auto parseList = [&](ArrayAttr &into, bool untilArrow) -> ParseResult {
    SmallVector<Access> accesses;
    auto parseOne = [&]() -> ParseResult {
      SMLoc loc = parser.getCurrentLocation();
      StringRef keyword;
      if (parser.parseKeyword(&keyword))
        return failure();
      std::optional<Access> access = symbolizeAccess(keyword);
      if (!access)
        return parser.emitError(loc) << "unknown access '" << keyword << "'";
      accesses.push_back(*access);
      return success();
    };
    bool empty = untilArrow ? parser.parseOptionalArrow().succeeded() : false;
    if (!empty) {
      if (parser.parseCommaSeparatedList(parseOne))
        return failure();
      if (untilArrow && parser.parseArrow())
        return failure();
    }
    into = accessArray(context, accesses);
    return success();
  };
  return failure(parseList(inputs, /*untilArrow=*/true) ||
                 parseList(outputs, /*untilArrow=*/false));
}

static void printAccesses(OpAsmPrinter &printer, Operation *, ArrayAttr inputs,
                          ArrayAttr outputs) {
  auto printList = [&](ArrayAttr list) {
    llvm::interleaveComma(list, printer, [&](Attribute a) {
      printer << stringifyAccess(cast<AccessAttr>(a).getValue());
    });
  };
  printList(inputs);
  printer << (inputs.empty() ? "-> " : " -> ");
  printList(outputs);
}

void RowsOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  for (OpOperand &in : getInputsMutable())
    effects.emplace_back(MemoryEffects::Read::get(), &in);
  effects.emplace_back(MemoryEffects::Read::get(), &getSegmentsMutable());
  for (OpOperand &pos : getPositionsMutable())
    effects.emplace_back(MemoryEffects::Read::get(), &pos);
  for (auto [k, out] : llvm::enumerate(getOutputsMutable())) {
    // A column sum, a row sum or a scatter-add adds to what its output
    // holds.
    Access access = getOutputAccessAt(k);
    if (access == Access::column_sum || access == Access::row_sum ||
        access == Access::scatter)
      effects.emplace_back(MemoryEffects::Read::get(), &out);
    effects.emplace_back(MemoryEffects::Write::get(), &out);
  }
}

/// Element types a row kernel loads and stores.
static bool isRowElement(Type t) { return t.isF32() || t.isBF16(); }

/// The accesses an input may declare, and those an output may.
static bool isInputAccess(Access a) {
  return a != Access::column_sum && a != Access::row_sum &&
         a != Access::scatter;
}
static bool isOutputAccess(Access a) {
  return a == Access::row || a == Access::token || a == Access::row_value ||
         a == Access::token_value || a == Access::column_sum ||
         a == Access::row_sum || a == Access::scatter;
}

/// Checks operand `index` of `op` (`what`: "input 2") against its declared
/// access; `width` is the row width and `rows` the row buffers' [B, rows],
/// set by the first row buffer.
static LogicalResult verifyAccess(RowsOp op, unsigned index, StringRef what,
                                  int64_t width,
                                  std::optional<ArrayRef<int64_t>> &rows) {
  Value v = op.getInputOrOutput(index);
  auto type = cast<MemRefType>(v.getType());
  ArrayRef<int64_t> shape = type.getShape();
  Type element = type.getElementType();
  Access access = op.getAccess(index);
  std::string accessName = stringifyAccess(access).str();
  auto refuse = [&](const Twine &expected) {
    return op.emitOpError()
           << what << " is read or written at '" << accessName
           << "', which needs " << expected << "; it is " << type;
  };
  auto sameRows = [&](ArrayRef<int64_t> shapeOfRows) -> LogicalResult {
    if (rows && shapeOfRows != *rows)
      return op.emitOpError()
             << what << " has rows " << type
             << ", but the row buffers have [B, " << rows->back() << "]";
    rows = shapeOfRows;
    return success();
  };
  auto tokensGiven = [&]() -> LogicalResult {
    if (!op.getPositions() && type.getDimSize(1) != 1)
      return op.emitOpError() << what << " holds " << type.getDimSize(1)
                              << " tokens a sequence: give the rows' positions";
    return success();
  };
  bool isVector = (type.getRank() == 1 && shape[0] == width) ||
                  (type.getRank() == 2 && shape[0] == 1 && shape[1] == width);
  switch (access) {
  case Access::row:
  case Access::token:
    if (type.getRank() != 3 || shape.back() != width || !isRowElement(element))
      return refuse(Twine("f32 or bf16 [B, ") +
                    (access == Access::row ? "rows" : "T") + ", " +
                    Twine(width) + "]");
    return access == Access::row ? sameRows(shape.drop_back()) : tokensGiven();
  case Access::row_value:
  case Access::token_value: {
    bool classes = index < op.getInputs().size() && element.isInteger(32);
    if (type.getRank() != 2 || (!isRowElement(element) && !classes))
      return refuse(Twine("f32 or bf16 [B, ") +
                    (access == Access::row_value ? "rows" : "T") +
                    "] (or i32 classes, as an input)");
    return access == Access::row_value ? sameRows(shape) : tokensGiven();
  }
  case Access::column:
  case Access::column_sum:
    if (!isVector ||
        !(access == Access::column ? isRowElement(element) : element.isF32()))
      return refuse(Twine(access == Access::column ? "f32 or bf16" : "f32") +
                    " [" + Twine(width) + "] or [1, " + Twine(width) + "]");
    return success();
  case Access::scalar:
  case Access::row_sum:
    if (type.getRank() != 1 || shape[0] != 1 ||
        !(access == Access::scalar ? isRowElement(element) : element.isF32()))
      return refuse(access == Access::scalar ? "f32 or bf16 [1]" : "f32 [1]");
    return success();
  case Access::table:
  case Access::scatter:
    if (type.getRank() != 2 || ShapedType::isDynamic(shape[0]) ||
        shape[0] < 2 || shape[1] != width ||
        !(access == Access::table ? isRowElement(element) : element.isF32()))
      return refuse(Twine(access == Access::table ? "f32 or bf16" : "f32") +
                    " [V, " + Twine(width) + "] with V > 1");
    return success();
  case Access::ids:
    if (type.getRank() != 2 || !element.isInteger(32))
      return refuse("i32 [B, rows]");
    return sameRows(shape);
  }
  llvm_unreachable("unknown access");
}

LogicalResult RowsOp::verify() {
  if (getOutputs().empty())
    return emitOpError("needs at least one output");
  if (failed(verifyCausalOnly(*this, getCausalOnly())))
    return failure();
  unsigned nIn = getInputs().size(), nOut = getOutputs().size();
  if (getInputAccess().size() != nIn || getOutputAccess().size() != nOut)
    return emitOpError() << "declares " << getInputAccess().size()
                         << " input and " << getOutputAccess().size()
                         << " output accesses for " << nIn << " inputs and "
                         << nOut << " outputs";
  for (unsigned j = 0; j < nIn; ++j)
    if (!isInputAccess(getInputAccessAt(j)))
      return emitOpError() << "input " << j << " cannot be read at '"
                           << stringifyAccess(getInputAccessAt(j))
                           << "': an output's access";
  for (unsigned k = 0; k < nOut; ++k)
    if (!isOutputAccess(getOutputAccessAt(k)))
      return emitOpError() << "output " << k << " cannot be written at '"
                           << stringifyAccess(getOutputAccessAt(k))
                           << "': an input's access";
  int64_t width = getWidth();
  std::optional<ArrayRef<int64_t>> rows;
  for (unsigned i = 0; i < nIn + nOut; ++i) {
    std::string what = i < nIn ? "input " + std::to_string(i)
                               : "output " + std::to_string(i - nIn);
    if (failed(verifyAccess(*this, i, what, width, rows)))
      return failure();
  }
  // The lookups: one ids input where a table or a scatter reads it.
  unsigned ids = 0, tables = 0, scatters = 0;
  for (unsigned i = 0; i < nIn + nOut; ++i) {
    Access access = getAccess(i);
    ids += access == Access::ids;
    tables += access == Access::table;
    scatters += access == Access::scatter;
  }
  if (ids > 1)
    return emitOpError() << "has " << ids << " ids inputs; a kernel has one";
  if ((ids == 1) != (tables + scatters > 0))
    return emitOpError(ids ? "has an ids input but no table or scatter"
                           : "reads a table or scatters without an ids input");
  if (scatters) {
    // Rows with equal ids add into one table row, which the kernels order
    // by owning columns (CPU) or table rows (CUDA).
    if (nOut != 1 || getNumReductions() != 0 || getNumMaxima() != 0 ||
        hasTokenOperands() || getHeadDim() ||
        llvm::is_contained(getInputs(), getOutputs().front()))
      return emitOpError("scatters into output 0: it must be its one output "
                         "and not an input, of a kernel that maps elements "
                         "(no sums, maxima, token accesses or head_dim)");
  }
  // An output that is also an input is written where it is read.
  for (unsigned k = 0; k < nOut; ++k)
    for (unsigned j = 0; j < nIn; ++j)
      if (getInputs()[j] == getOutputs()[k] &&
          getInputAccessAt(j) != getOutputAccessAt(k))
        return emitOpError()
               << "output " << k << " is input " << j << " but written at '"
               << stringifyAccess(getOutputAccessAt(k)) << "', read at '"
               << stringifyAccess(getInputAccessAt(j)) << "'";
  if (size_t sums = getRowSumOutputs().size(); sums > kMaxColumnSums)
    return emitOpError() << "has " << sums
                         << " column and row sums; a kernel adds at most "
                         << kMaxColumnSums;
  if (Value pos = getPositions()) {
    auto type = cast<MemRefType>(pos.getType());
    if (!type.getElementType().isInteger(32) || type.getRank() != 2)
      return emitOpError("positions must be [B, rows] of i32");
    if (!hasTokenOperands() && !getHeadDim())
      return emitOpError("has positions but no token access");
    if (getHeadDim() && rows && type.getShape() != *rows)
      return emitOpError("positions must be [B, rows] of the row buffers");
  }
  if (std::optional<int64_t> hd = getHeadDim()) {
    if (*hd <= 0 || *hd % 2 != 0 || width % *hd != 0)
      return emitOpError() << "head_dim " << *hd
                           << " must be even and divide the row width "
                           << width;
    for (unsigned i = 0; i < nIn + nOut; ++i) {
      Access access = getAccess(i);
      if (access != Access::row && access != Access::column &&
          access != Access::scalar)
        return emitOpError()
               << "with head_dim only maps elements: operand " << i
               << " is read or written at '" << stringifyAccess(access) << "'";
    }
  }
  return success();
}

/// Checks that `block` takes `args` f32 arguments and yields `results`
/// f32 values, and holds only arith and math ops.
static LogicalResult verifyRowsBlock(Operation *op, Block &block,
                                     StringRef what, unsigned args,
                                     std::optional<unsigned> results,
                                     bool f64 = false) {
  if (block.getNumArguments() != args)
    return op->emitOpError()
           << "'" << what << "' takes " << args << " f32 arguments, has "
           << block.getNumArguments();
  for (BlockArgument arg : block.getArguments())
    if (!arg.getType().isF32())
      return op->emitOpError() << "'" << what << "' arguments must be f32";
  if (results && block.getTerminator()->getNumOperands() != *results)
    return op->emitOpError() << "'" << what << "' must yield " << *results
                             << " values, one per output";
  for (Operation &inner : block.without_terminator()) {
    StringRef ns = inner.getDialect() ? inner.getDialect()->getNamespace() : "";
    // modk.column and modk.row_count verify their parent themselves.
    if (ns != "arith" && ns != "math" &&
        !isa<ColumnOp, RowCountOp, RopeAngleOp, RotateHalfOp>(inner))
      return inner.emitOpError("is not allowed in a kernel region: only "
                               "arith and math ops are");
    // bf16 only as a rounding: arith.truncf to bf16 read back by
    // arith.extf, so every value the code holds is an f32 (or a condition).
    if (auto narrow = dyn_cast<arith::TruncFOp>(inner);
        narrow && narrow.getType().isBF16()) {
      if (!llvm::all_of(narrow->getUsers(),
                        [](Operation *u) { return isa<arith::ExtFOp>(u); }))
        return inner.emitOpError("rounds to bf16 in a kernel region: only "
                                 "arith.extf back to f32 may read it");
      continue;
    }
    for (Type t : inner.getResultTypes())
      if (!t.isF32() && !t.isInteger(1) && !(f64 && t.isF64()))
        return inner.emitOpError() << "in a kernel region must compute f32 "
                                   << (f64 ? "or f64 " : "") << "(or i1)";
  }
  if (!f64)
    for (Value v : block.getTerminator()->getOperands())
      if (!v.getType().isF32())
        return op->emitOpError() << "'" << what << "' must yield f32 values";
  return success();
}

LogicalResult RowsOp::verifyRegions() {
  unsigned n = getInputs().size(), maxima = getNumMaxima();
  if (!getMaxima().empty()) {
    if (failed(verifyRowsBlock(*this, getMaxima().front(), "maxima", n,
                               std::nullopt)))
      return failure();
    if (maxima == 0)
      return emitOpError("'maxima' must yield at least one value");
  }
  if (failed(verifyRowsBlock(*this, getReduce().front(), "reduce", n + maxima,
                             std::nullopt)) ||
      failed(verifyRowsBlock(*this, getBody().front(), "body",
                             n + maxima + getNumReductions(),
                             getOutputs().size())))
    return failure();
  // A lookup's ids address the table; they are not an element.
  for (Region *region : {&getMaxima(), &getReduce(), &getBody()})
    for (Block &block : *region)
      for (unsigned j = 0; j < n; ++j)
        if (getInputAccessAt(j) == Access::ids &&
            !block.getArgument(j).use_empty())
          return emitOpError() << "input " << j
                               << " holds a lookup's ids: the regions cannot "
                                  "read it";
  // A value a row depends on no element: only on the row's sums, its
  // token's scalars and constants.
  Block &body = getBody().front();
  auto perRowArg = [&](BlockArgument arg) {
    return isRowInvariantArgument(arg);
  };
  llvm::SmallPtrSet<Operation *, 16> perRow = invariantOps(body, perRowArg);
  auto isPerRow = [&](Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return perRowArg(arg);
    return perRow.contains(v.getDefiningOp());
  };
  for (unsigned k = 0, e = getOutputs().size(); k < e; ++k) {
    bool rowSum = getOutputAccessAt(k) == Access::row_sum;
    if ((isStoredOnceARow(k) || rowSum) &&
        !isPerRow(body.getTerminator()->getOperand(k)))
      return emitOpError() << "output " << k
                           << (rowSum ? " sums one value a row"
                                      : " holds one value a row")
                           << ", but 'body' yields an element's value for it";
  }
  // A column window of a stacked product is read a row at a time by its
  // row stride: only as an element input of a kernel that maps elements.
  for (auto [j, in] : llvm::enumerate(getInputs()))
    if (in.getDefiningOp<ColumnWindowOp>() && !readsWindowAt(j))
      return emitOpError() << "input " << j
                           << " is a column window, which only a kernel "
                              "that maps elements at its rows may read";
  for (OpOperand &out : getOutputsMutable())
    if (out.get().getDefiningOp<ColumnWindowOp>() &&
        !readsWindowOperand(out.getOperandNumber()))
      return emitOpError("writes a column window other than in place (an "
                         "input it reads as a window)");
  return success();
}

/// The modk.rows with a head_dim whose `body` holds `op`, or an error.
static FailureOr<RowsOp> headedRowsBody(Operation *op) {
  auto rows = cast<RowsOp>(op->getParentOp());
  if (op->getParentRegion() != &rows.getBody())
    return op->emitOpError("may be read only in a modk.rows's 'body'"),
           failure();
  if (!rows.getHeadDim())
    return op->emitOpError("needs a modk.rows with head_dim"), failure();
  return rows;
}

LogicalResult RopeAngleOp::verify() {
  FailureOr<RowsOp> rows = headedRowsBody(*this);
  if (failed(rows))
    return failure();
  if (!rows->getPositions())
    return emitOpError("needs the rows' positions (the modk.rows's tokens)");
  if (!(getTheta().convertToDouble() > 0))
    return emitOpError("theta must be positive");
  // The generated kernels form one angle an element.
  auto angles = rows->getBody().front().getOps<RopeAngleOp>();
  if (std::next(angles.begin()) != angles.end())
    return emitOpError("is read once a body: an element has one angle");
  return success();
}

LogicalResult RotateHalfOp::verify() {
  FailureOr<RowsOp> rows = headedRowsBody(*this);
  if (failed(rows))
    return failure();
  auto arg = dyn_cast<BlockArgument>(getElement());
  unsigned nIn = rows->getInputs().size();
  if (!arg || arg.getOwner() != &rows->getBody().front() ||
      arg.getArgNumber() >= nIn)
    return emitOpError("must read an input's element: an argument of the "
                       "body for an input");
  unsigned j = arg.getArgNumber();
  if (rows->getInputAccessAt(j) != Access::row)
    return emitOpError() << "reads input " << j
                         << ", which is not a row buffer";
  return success();
}

LogicalResult OptimizerOp::verify() {
  if (getParams().empty())
    return emitOpError("updates no parameter: params is empty");
  if (std::optional<ArrayRef<bool>> copies = getBf16Copies())
    if (copies->size() != getParams().size())
      return emitOpError("has ")
             << copies->size() << " bf16_copies flags for "
             << getParams().size() << " parameters";
  return success();
}

void OptimizerOp::getAsmBlockArgumentNames(Region &region,
                                           OpAsmSetValueNameFn setName) {
  if (&region == &getNorm()) {
    for (BlockArgument arg : region.getArguments())
      setName(arg, "g");
    return;
  }
  auto names = getArgumentNames();
  for (BlockArgument arg : region.getArguments())
    if (arg.getArgNumber() < names.size())
      setName(arg, names[arg.getArgNumber()]);
}

LogicalResult OptimizerOp::verifyRegions() {
  if (failed(verifyRowsBlock(*this, getBody().front(), "body",
                             getArgumentNames().size(), kResults)))
    return failure();
  if (getNorm().empty())
    return emitOpError("needs a 'norm' region: an element's term of the "
                       "squared gradient norm");
  Block &norm = getNorm().front();
  if (failed(verifyRowsBlock(*this, norm, "norm", 1, 1, /*f64=*/true)))
    return failure();
  if (!norm.getTerminator()->getOperand(0).getType().isF64())
    return emitOpError("'norm' must yield an f64 term (the sum is in f64)");
  return success();
}

llvm::SmallPtrSet<Operation *, 16>
modc::modk::invariantOps(Block &block,
                         function_ref<bool(BlockArgument)> invariant) {
  llvm::SmallPtrSet<Operation *, 16> ops;
  auto isInvariant = [&](Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return invariant(arg);
    return ops.contains(v.getDefiningOp());
  };
  // modk.column and modk.rope_angle take no operand but differ from
  // element to element (and modk.rotate_half reads another element).
  for (Operation &o : block.without_terminator())
    if (!isa<ColumnOp, RopeAngleOp, RotateHalfOp>(o) &&
        llvm::all_of(o.getOperands(), isInvariant))
      ops.insert(&o);
  return ops;
}

#define GET_OP_CLASSES
#include "modc/Dialect/Modk/ModkOps.cpp.inc"
