//===- ModelImporter.cpp - Model description (JSON) to mod IR ---*- C++ -*-===//

#include "modc/Frontend/ModelImporter.h"
#include "modc/Dialect/Mod/ModDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <fmt/format.h>

#include <cmath>

using namespace mlir;
using namespace modc;
namespace json = llvm::json;

namespace {
/// Reads typed fields out of one JSON object, prefixing every error with the
/// file and the full key path.
class FieldReader {
public:
  FieldReader(const json::Object &object, std::string prefix,
              std::string filename)
      : object(object), prefix(std::move(prefix)),
        filename(std::move(filename)) {}

  llvm::Error error(llvm::StringRef key, const llvm::Twine &message) const {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("{0}: key '{1}{2}': {3}", filename, prefix, key,
                      message.str()));
  }

  /// Rejects keys outside `allowed`: a misspelt key must not be ignored.
  llvm::Error checkKeys(llvm::ArrayRef<llvm::StringRef> allowed) const {
    for (const auto &entry : object)
      if (!llvm::is_contained(allowed, entry.first.str()))
        return error(entry.first.str(), "unknown key");
    return llvm::Error::success();
  }

  bool has(llvm::StringRef key) const { return object.get(key) != nullptr; }

  llvm::Expected<int64_t> integer(llvm::StringRef key,
                                  std::optional<int64_t> fallback) const {
    const json::Value *v = object.get(key);
    if (!v) {
      if (fallback)
        return *fallback;
      return error(key, "missing (an integer is required)");
    }
    std::optional<int64_t> i = v->getAsInteger();
    if (!i)
      return error(key, "expected an integer, got " + describe(*v));
    return *i;
  }

  llvm::Expected<double> number(llvm::StringRef key,
                                std::optional<double> fallback) const {
    const json::Value *v = object.get(key);
    if (!v) {
      if (fallback)
        return *fallback;
      return error(key, "missing (a number is required)");
    }
    std::optional<double> d = v->getAsNumber();
    if (!d)
      return error(key, "expected a number, got " + describe(*v));
    // A literal too large for a double (1e999) parses as inf, which passes
    // "> 0" and would reach the manifest as invalid JSON.
    if (!std::isfinite(*d))
      return error(key, "expected a finite number, got " + describe(*v));
    // -0 is 0: the normalised description would print "-0", which reads
    // back as the integer 0 and normalises differently (found by fuzzing).
    return *d + 0.0;
  }

  llvm::Expected<bool> boolean(llvm::StringRef key, bool fallback) const {
    const json::Value *v = object.get(key);
    if (!v)
      return fallback;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return error(key, "expected true or false, got " + describe(*v));
    return *b;
  }

  /// The model choice (ModelChoices.td) spelt at `key`, one of `allowed`:
  /// the format's spellings, in docs/model-format.md's order.
  template <typename Enum>
  llvm::Expected<Enum> choice(llvm::StringRef key,
                              llvm::ArrayRef<llvm::StringRef> allowed,
                              Enum fallback) const {
    const json::Value *v = object.get(key);
    if (!v)
      return fallback;
    std::optional<llvm::StringRef> s = v->getAsString();
    std::string options = llvm::join(allowed, ", ");
    if (!s)
      return error(key, "expected one of " + options + ", got " + describe(*v));
    std::optional<Enum> value = symbolizeEnum<Enum>(*s);
    if (!value || !llvm::is_contained(allowed, *s))
      return error(key, "expected one of " + options + ", got '" + *s + "'");
    return *value;
  }

  static std::string describe(const json::Value &v) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << v;
    return text;
  }

  const json::Object &object;
  std::string prefix;
  std::string filename;
};

/// Everything docs/model-format.md section 1 allows, validated and with
/// defaults filled in.
struct ModelDescription {
  std::string name = "model";
  int64_t vocabSize, dModel, nLayers, nHeads, nKvHeads, dFf, seqLen;
  Activation mlp;
  DType dtype;
  double normEps, ropeTheta;
  bool tieEmbeddings;
  bool mixtureOfDepths = false;
  std::optional<double> capacity;
  std::optional<int64_t> capacityTokens;
  Schedule schedule = Schedule::every_other;
  std::vector<int64_t> scheduleList; // the routed layers when `layers`
  Gate gate;
  CausalRouter causalRouter;
  double auxLossWeight = 0;
  int64_t predictorHidden = 0;
  // Mixture-of-Experts MLPs (docs/model-format.md section 7).
  bool mixtureOfExperts = false;
  int64_t nExperts = 0, noopExperts = 0, dExpert = 0;
  double capacityFactor = 1.0, balanceLossWeight = 0.01;
  Schedule moeSchedule = Schedule::all;
  std::vector<int64_t> moeScheduleList; // the MoE layers when `layers`
};
} // namespace

#define ASSIGN_OR_RETURN(lhs, expr)                                            \
  {                                                                            \
    auto valueOrError = (expr);                                                \
    if (!valueOrError)                                                         \
      return valueOrError.takeError();                                         \
    lhs = *valueOrError;                                                       \
  }

namespace {
/// llvm::json keeps one of two equal keys silently, so a description that
/// says two different things would compile. This scans the already parsed
/// (hence well-formed) text for an object with a repeated key.
class DuplicateKeyFinder {
public:
  explicit DuplicateKeyFinder(llvm::StringRef text) : text(text) {}

  /// The dotted path of the first repeated key, if any.
  std::optional<std::string> find() { return value(""); }

private:
  void skipSpace() {
    while (pos < text.size() && std::isspace((unsigned char)text[pos]))
      ++pos;
  }
  std::string string() {
    size_t start = ++pos; // past the opening quote
    while (pos < text.size() && text[pos] != '"')
      pos += text[pos] == '\\' ? 2 : 1;
    return text.slice(start, pos++).str();
  }
  std::optional<std::string> value(const std::string &path) {
    skipSpace();
    if (pos >= text.size())
      return std::nullopt;
    char c = text[pos];
    if (c == '"') {
      string();
      return std::nullopt;
    }
    if (c == '{' || c == '[') {
      bool object = c == '{';
      llvm::StringSet<> keys;
      ++pos;
      while (true) {
        skipSpace();
        if (pos >= text.size())
          return std::nullopt;
        if (text[pos] == (object ? '}' : ']')) {
          ++pos;
          return std::nullopt;
        }
        if (text[pos] == ',') {
          ++pos;
          continue;
        }
        std::string child = path;
        if (object) {
          std::string key = string();
          child = path.empty() ? key : path + "." + key;
          if (!keys.insert(key).second)
            return child;
          skipSpace();
          ++pos; // the colon
        }
        if (std::optional<std::string> dup = value(child))
          return dup;
      }
    }
    while (pos < text.size() && !llvm::StringRef(",]} \t\r\n").contains(text[pos]))
      ++pos;
    return std::nullopt;
  }

  llvm::StringRef text;
  size_t pos = 0;
};
} // namespace

/// Deepest nesting of arrays and objects a description may have: a model
/// needs 2 (the "mod" object); the limit leaves room and keeps the
/// recursive parsers (LLVM's and DuplicateKeyFinder) far from the stack's
/// end on hostile input.
constexpr int kMaxJsonDepth = 64;

/// Refuses text nested deeper than kMaxJsonDepth, naming where, before any
/// recursive parser sees it. Brackets inside strings do not count.
static llvm::Error checkNestingDepth(llvm::StringRef text,
                                     llvm::StringRef file) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        llvm::StringRef before = text.take_front(i);
        size_t line = before.count('\n') + 1;
        size_t column = i - (before.rfind('\n') + 1) + 1;
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::formatv("{0}:{1}:{2}: JSON nested deeper than {3} levels "
                          "(a model description needs 2)",
                          file, line, column, kMaxJsonDepth));
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return llvm::Error::success();
}

/// The `schedule` key of `reader`'s object (`mod.schedule`, `moe.schedule`):
/// a choice, or a list of distinct layer indices in [0, nLayers), sorted.
static llvm::Error parseSchedule(const FieldReader &reader, int64_t nLayers,
                                 Schedule fallback, Schedule &schedule,
                                 std::vector<int64_t> &list) {
  schedule = fallback;
  const json::Value *value = reader.object.get("schedule");
  if (!value)
    return llvm::Error::success();
  if (const json::Array *layers = value->getAsArray()) {
    llvm::SmallSet<int64_t, 8> seen;
    for (const json::Value &v : *layers) {
      std::optional<int64_t> i = v.getAsInteger();
      if (!i)
        return reader.error("schedule", "layer indices must be integers, got " +
                                            FieldReader::describe(v));
      if (*i < 0 || *i >= nLayers)
        return reader.error("schedule",
                            llvm::formatv("layer index {0} is out of range "
                                          "[0, n_layers = {1})",
                                          *i, nLayers)
                                .str());
      if (!seen.insert(*i).second)
        return reader.error(
            "schedule",
            llvm::formatv("layer index {0} is listed twice", *i).str());
      list.push_back(*i);
    }
    llvm::sort(list);
    schedule = Schedule::layers;
    return llvm::Error::success();
  }
  ASSIGN_OR_RETURN(
      schedule,
      reader.choice("schedule", {"every_other", "all", "none"}, fallback));
  return llvm::Error::success();
}

/// The `moe` object of docs/model-format.md section 7.
static llvm::Error parseMoe(const FieldReader &top, const json::Object &object,
                            llvm::StringRef file, ModelDescription &m) {
  const json::Value *value = object.get("moe");
  if (!value)
    return llvm::Error::success();
  const json::Object *moeObject = value->getAsObject();
  if (!moeObject)
    return top.error("moe", "expected an object");
  FieldReader moe(*moeObject, "moe.", file.str());
  if (llvm::Error e =
          moe.checkKeys({"n_experts", "noop_experts", "d_expert",
                         "capacity_factor", "balance_loss_weight", "schedule"}))
    return e;
  m.mixtureOfExperts = true;
  const int64_t maximum = int64_t(1) << 20;
  ASSIGN_OR_RETURN(m.nExperts, moe.integer("n_experts", std::nullopt));
  if (m.nExperts < 1 || m.nExperts > maximum)
    return moe.error("n_experts", fmt::format("must be in [1, {}], got {}",
                                              maximum, m.nExperts));
  ASSIGN_OR_RETURN(m.noopExperts, moe.integer("noop_experts", 0));
  if (m.noopExperts < 0 || m.noopExperts > maximum)
    return moe.error("noop_experts", fmt::format("must be in [0, {}], got {}",
                                                 maximum, m.noopExperts));
  ASSIGN_OR_RETURN(m.dExpert, moe.integer("d_expert", std::nullopt));
  if (m.dExpert < 1 || m.dExpert > maximum)
    return moe.error("d_expert", fmt::format("must be in [1, {}], got {}",
                                             maximum, m.dExpert));
  ASSIGN_OR_RETURN(m.capacityFactor, moe.number("capacity_factor", 1.0));
  if (!(m.capacityFactor > 0))
    return moe.error("capacity_factor",
                     fmt::format("must be > 0, got {}", m.capacityFactor));
  ASSIGN_OR_RETURN(m.balanceLossWeight,
                   moe.number("balance_loss_weight", 0.01));
  if (!(m.balanceLossWeight >= 0))
    return moe.error("balance_loss_weight",
                     fmt::format("must be >= 0, got {}", m.balanceLossWeight));
  return parseSchedule(moe, m.nLayers, Schedule::all, m.moeSchedule,
                       m.moeScheduleList);
}

static llvm::Expected<ModelDescription> parseDescription(llvm::StringRef text,
                                                         llvm::StringRef file) {
  if (llvm::Error e = checkNestingDepth(text, file))
    return std::move(e);
  llvm::Expected<json::Value> root = json::parse(text);
  if (!root)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("{0}: invalid JSON: {1}", file,
                      llvm::toString(root.takeError())));
  if (std::optional<std::string> key = DuplicateKeyFinder(text).find())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("{0}: key '{1}': given twice (duplicate key)", file,
                      *key));
  const json::Object *object = root->getAsObject();
  if (!object)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   file + ": the model must be a JSON object");
  FieldReader top(*object, "", file.str());
  if (llvm::Error e = top.checkKeys(
          {"name", "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads",
           "d_ff", "seq_len", "mlp", "norm_eps", "rope_theta", "tie_embeddings",
           "dtype", "mod", "moe"}))
    return std::move(e);

  ModelDescription m;
  if (const json::Value *name = object->get("name")) {
    std::optional<llvm::StringRef> s = name->getAsString();
    if (!s || s->empty())
      return top.error("name", "expected a non-empty string");
    for (char c : *s)
      if (!(std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'))
        return top.error("name", "may hold only letters, digits, '-', '_' "
                                 "and '.', got '" + *s + "'");
    m.name = s->str();
  }
  // Upper bounds keep every buffer size far from int64 overflow; they are
  // well above any model a CPU or a single GPU can hold.
  auto positive = [&](llvm::StringRef key, std::optional<int64_t> fallback,
                      int64_t &out, int64_t minimum = 1,
                      int64_t maximum = int64_t(1) << 20) -> llvm::Error {
    ASSIGN_OR_RETURN(out, top.integer(key, fallback));
    if (out < minimum)
      return top.error(key, fmt::format("must be >= {}, got {}", minimum, out));
    if (out > maximum)
      return top.error(key, fmt::format("must be <= {}, got {}", maximum, out));
    return llvm::Error::success();
  };
  if (llvm::Error e =
          positive("vocab_size", 256, m.vocabSize, 1, int64_t(1) << 24))
    return std::move(e);
  if (llvm::Error e = positive("d_model", std::nullopt, m.dModel))
    return std::move(e);
  if (llvm::Error e = positive("n_layers", std::nullopt, m.nLayers, 0, 4096))
    return std::move(e);
  if (llvm::Error e = positive("n_heads", std::nullopt, m.nHeads))
    return std::move(e);
  // Grouped-query attention (docs/model-format.md section 3): key/value
  // heads shared by n_heads / n_kv_heads query heads each.
  if (llvm::Error e = positive("n_kv_heads", m.nHeads, m.nKvHeads))
    return std::move(e);
  if (m.nHeads % m.nKvHeads != 0)
    return top.error("n_kv_heads",
                     fmt::format("n_heads ({}) is not divisible by n_kv_heads "
                                 "({})",
                                 m.nHeads, m.nKvHeads));
  if (llvm::Error e = positive("d_ff", std::nullopt, m.dFf))
    return std::move(e);
  if (llvm::Error e = positive("seq_len", std::nullopt, m.seqLen))
    return std::move(e);
  if (m.dModel % m.nHeads != 0)
    return top.error("n_heads", llvm::formatv("d_model ({0}) is not divisible "
                                              "by n_heads ({1})",
                                              m.dModel, m.nHeads)
                                    .str());
  if ((m.dModel / m.nHeads) % 2 != 0)
    return top.error("n_heads",
                     llvm::formatv("head_dim = d_model / n_heads = {0} is odd; "
                                   "RoPE needs an even head_dim",
                                   m.dModel / m.nHeads)
                         .str());
  ASSIGN_OR_RETURN(m.mlp,
                   top.choice("mlp", {"swiglu", "gelu"}, Activation::swiglu));
  ASSIGN_OR_RETURN(m.dtype, top.choice("dtype", {"f32", "bf16"}, DType::f32));
  ASSIGN_OR_RETURN(m.normEps, top.number("norm_eps", 1e-5));
  if (!(m.normEps > 0))
    return top.error("norm_eps", "must be positive");
  ASSIGN_OR_RETURN(m.ropeTheta, top.number("rope_theta", 10000.0));
  if (!(m.ropeTheta > 0))
    return top.error("rope_theta", "must be positive");
  ASSIGN_OR_RETURN(m.tieEmbeddings, top.boolean("tie_embeddings", true));
  if (llvm::Error e = parseMoe(top, *object, file, m))
    return std::move(e);

  const json::Value *modValue = object->get("mod");
  if (!modValue)
    return m;
  const json::Object *modObject = modValue->getAsObject();
  if (!modObject)
    return top.error("mod", "expected an object");
  FieldReader mod(*modObject, "mod.", file.str());
  if (llvm::Error e = mod.checkKeys({"capacity", "capacity_tokens", "schedule",
                                     "gate", "causal_router", "aux_loss_weight",
                                     "predictor_hidden"}))
    return std::move(e);
  m.mixtureOfDepths = true;
  if (mod.has("capacity") && mod.has("capacity_tokens"))
    return mod.error("capacity_tokens",
                     "give either capacity or capacity_tokens, not both");
  if (mod.has("capacity")) {
    double c;
    ASSIGN_OR_RETURN(c, mod.number("capacity", std::nullopt));
    if (!(c > 0 && c <= 1))
      return mod.error("capacity",
                       fmt::format("must be in (0, 1], got {}", c));
    m.capacity = c;
  } else if (mod.has("capacity_tokens")) {
    int64_t k;
    ASSIGN_OR_RETURN(k, mod.integer("capacity_tokens", std::nullopt));
    if (k < 1 || k > m.seqLen)
      return mod.error("capacity_tokens",
                       llvm::formatv("must be in [1, seq_len = {0}], got {1}",
                                     m.seqLen, k)
                           .str());
    m.capacityTokens = k;
  } else {
    return mod.error("capacity",
                     "missing (give capacity in (0, 1] or capacity_tokens)");
  }
  if (llvm::Error e = parseSchedule(mod, m.nLayers, Schedule::every_other,
                                    m.schedule, m.scheduleList))
    return std::move(e);
  ASSIGN_OR_RETURN(
      m.gate, mod.choice("gate", {"linear", "sigmoid", "one"}, Gate::linear));
  ASSIGN_OR_RETURN(m.causalRouter, mod.choice("causal_router",
                                              {"aux_loss", "predictor", "none"},
                                              CausalRouter::predictor));
  ASSIGN_OR_RETURN(m.auxLossWeight, mod.number("aux_loss_weight", 0.01));
  if (!(m.auxLossWeight >= 0))
    return mod.error("aux_loss_weight", "must be >= 0");
  ASSIGN_OR_RETURN(m.predictorHidden,
                   mod.integer("predictor_hidden", m.dModel));
  if (m.predictorHidden < 1)
    return mod.error("predictor_hidden",
                     fmt::format("must be >= 1, got {}", m.predictorHidden));
  if (m.predictorHidden > (int64_t(1) << 20))
    return mod.error("predictor_hidden",
                     fmt::format("must be <= {}, got {}", int64_t(1) << 20,
                                 m.predictorHidden));
  return m;
}

llvm::Expected<OwningOpRef<ModuleOp>>
modc::importModelJson(llvm::StringRef text, llvm::StringRef filename,
                      MLIRContext *context) {
  llvm::Expected<ModelDescription> parsed = parseDescription(text, filename);
  if (!parsed)
    return parsed.takeError();
  const ModelDescription &m = *parsed;

  context->loadDialect<mod::ModDialect>();
  OpBuilder b(context);
  Location loc = FileLineColLoc::get(b.getStringAttr(filename), 1, 1);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  auto model = mod::ModelOp::create(
      b, loc, b.getStringAttr(m.name), b.getI64IntegerAttr(m.vocabSize),
      b.getI64IntegerAttr(m.dModel), b.getI64IntegerAttr(m.nLayers),
      b.getI64IntegerAttr(m.nHeads), b.getI64IntegerAttr(m.dFf),
      b.getI64IntegerAttr(m.seqLen), mod::ActivationAttr::get(context, m.mlp),
      b.getF64FloatAttr(m.normEps), b.getF64FloatAttr(m.ropeTheta),
      b.getBoolAttr(m.tieEmbeddings), mod::DTypeAttr::get(context, m.dtype),
      /*capacity=*/nullptr, /*capacity_tokens=*/nullptr, /*schedule=*/nullptr,
      /*routed_layers=*/nullptr,
      /*gate=*/nullptr, /*causal_router=*/nullptr,
      /*aux_loss_weight=*/nullptr, /*predictor_hidden=*/nullptr,
      /*n_kv_heads=*/nullptr, /*moe_experts=*/nullptr,
      /*moe_noop_experts=*/nullptr, /*moe_d_expert=*/nullptr,
      /*moe_capacity_factor=*/nullptr, /*moe_balance_loss_weight=*/nullptr,
      /*moe_schedule=*/nullptr, /*moe_layers=*/nullptr);
  // Absent means n_heads: a model without grouped-query attention reads as
  // before.
  if (m.nKvHeads != m.nHeads)
    model.setNKvHeadsAttr(b.getI64IntegerAttr(m.nKvHeads));
  if (m.mixtureOfDepths) {
    if (m.capacity)
      model.setCapacityAttr(b.getF64FloatAttr(*m.capacity));
    else
      model.setCapacityTokensAttr(b.getI64IntegerAttr(*m.capacityTokens));
    model.setScheduleAttr(mod::ScheduleAttr::get(context, m.schedule));
    if (m.schedule == Schedule::layers)
      model.setRoutedLayers(m.scheduleList);
    model.setGateAttr(mod::GateAttr::get(context, m.gate));
    model.setCausalRouterAttr(
        mod::CausalRouterAttr::get(context, m.causalRouter));
    model.setAuxLossWeightAttr(b.getF64FloatAttr(m.auxLossWeight));
    model.setPredictorHiddenAttr(b.getI64IntegerAttr(m.predictorHidden));
  }
  if (m.mixtureOfExperts) {
    model.setMoeExpertsAttr(b.getI64IntegerAttr(m.nExperts));
    model.setMoeNoopExpertsAttr(b.getI64IntegerAttr(m.noopExperts));
    model.setMoeDExpertAttr(b.getI64IntegerAttr(m.dExpert));
    model.setMoeCapacityFactorAttr(b.getF64FloatAttr(m.capacityFactor));
    model.setMoeBalanceLossWeightAttr(b.getF64FloatAttr(m.balanceLossWeight));
    model.setMoeScheduleAttr(mod::ScheduleAttr::get(context, m.moeSchedule));
    if (m.moeSchedule == Schedule::layers)
      model.setMoeLayers(m.moeScheduleList);
  }

  Block *body = new Block();
  model.getBody().push_back(body);
  b.setInsertionPointToEnd(body);
  Type f32 = b.getF32Type();
  int64_t dyn = ShapedType::kDynamic;
  auto tokensType = RankedTensorType::get({dyn, m.seqLen}, b.getI32Type());
  auto streamType = RankedTensorType::get({dyn, m.seqLen, m.dModel}, f32);
  auto logitsType = RankedTensorType::get({dyn, m.seqLen, m.vocabSize}, f32);

  Value tokens = mod::TokensOp::create(b, loc, tokensType);
  Value x = mod::EmbedOp::create(b, loc, streamType, tokens);
  for (int64_t layer = 0; layer < m.nLayers; ++layer) {
    // An MoE layer's expert capacity C is a compile-time constant
    // (docs/model-format.md section 7).
    IntegerAttr moeCapacity;
    if (model.isMoeLayer(layer))
      moeCapacity = b.getI64IntegerAttr(model.getExpertCapacity(layer));
    x = mod::BlockOp::create(b, loc, x, b.getI64IntegerAttr(layer),
                             /*capacity=*/nullptr, /*gate=*/nullptr,
                             /*causal_router=*/nullptr, moeCapacity);
  }
  x = mod::RMSNormOp::create(b, loc, x, b.getStringAttr("final_norm.weight"),
                             b.getF64FloatAttr(m.normEps));
  Value logits = mod::LMHeadOp::create(
      b, loc, logitsType, x,
      b.getStringAttr(m.tieEmbeddings ? "embed.weight" : "lm_head.weight"));
  mod::ReturnOp::create(b, loc, logits);

  if (failed(mlir::verify(*module)))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   filename + ": the model does not verify");
  return std::move(module);
}
