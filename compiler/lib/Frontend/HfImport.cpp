//===- HfImport.cpp - Hugging Face Llama checkpoints to modc models -------===//
//
// The mapping of docs/huggingface.md: a LlamaForCausalLM checkpoint's
// config.json becomes a model description (docs/model-format.md section 1)
// and its tensors the parameters of section 2 under our names. Hugging Face's
// Llama applies RoPE with rotate_half (pairs j and j + hd/2), which is
// exactly section 3's convention, so q and k rows are copied unpermuted.
// Safetensors are read with the runtime's reader (modrt::TensorMap::load),
// which widens BF16 and F16 to F32 exactly.
//
//===----------------------------------------------------------------------===//

#include "modc/Frontend/HfImport.h"

#include "modrt/Error.h"
#include "modrt/Package.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

using namespace modc;
namespace json = llvm::json;

namespace {
llvm::Error fail(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string describe(const json::Value &v) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << v;
  return text;
}

/// Typed reads of config.json's keys; every error names the file and key.
struct Config {
  const json::Object &object;
  std::string file;

  llvm::Error error(llvm::StringRef key, const std::string &problem) const {
    return fail(fmt::format("{}: key '{}': {}", file, key.str(), problem));
  }
  /// Whether `key` is present and not null.
  bool has(llvm::StringRef key) const {
    const json::Value *v = object.get(key);
    return v && v->kind() != json::Value::Null;
  }
  llvm::Expected<int64_t> integer(llvm::StringRef key,
                                  std::optional<int64_t> fallback,
                                  int64_t min = 1) const {
    const json::Value *v = object.get(key);
    if (!v || v->kind() == json::Value::Null) {
      if (fallback)
        return *fallback;
      return error(key, "missing (an integer is required)");
    }
    std::optional<int64_t> i = v->getAsInteger();
    if (!i)
      return error(key, "expected an integer, got " + describe(*v));
    if (*i < min)
      return error(key, fmt::format("must be >= {}, got {}", min, *i));
    return *i;
  }
  llvm::Expected<double> number(llvm::StringRef key, double fallback) const {
    const json::Value *v = object.get(key);
    if (!v || v->kind() == json::Value::Null)
      return fallback;
    std::optional<double> d = v->getAsNumber();
    if (!d || !std::isfinite(*d))
      return error(key, "expected a finite number, got " + describe(*v));
    if (*d <= 0)
      return error(key, "must be > 0, got " + describe(*v));
    return *d;
  }
  llvm::Expected<bool> boolean(llvm::StringRef key, bool fallback) const {
    const json::Value *v = object.get(key);
    if (!v || v->kind() == json::Value::Null)
      return fallback;
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return error(key, "expected true or false, got " + describe(*v));
    return *b;
  }
  llvm::Expected<std::optional<std::string>> string(llvm::StringRef key) const {
    const json::Value *v = object.get(key);
    if (!v || v->kind() == json::Value::Null)
      return std::nullopt;
    std::optional<llvm::StringRef> s = v->getAsString();
    if (!s)
      return error(key, "expected a string, got " + describe(*v));
    return std::optional<std::string>(s->str());
  }
  /// Refuses `key` with the value it has: "X is not supported (why)".
  llvm::Error unsupported(llvm::StringRef key, const std::string &why) const {
    const json::Value *v = object.get(key);
    return error(key, fmt::format("{} is not supported ({})",
                                  v ? describe(*v) : "absent", why));
  }
};

#define ASSIGN_OR_RETURN(lhs, expr)                                            \
  {                                                                            \
    auto valueOrError = (expr);                                                \
    if (!valueOrError)                                                         \
      return valueOrError.takeError();                                         \
    lhs = std::move(*valueOrError);                                            \
  }

/// The Llama hyperparameters that matter to the model's math.
struct LlamaConfig {
  int64_t vocab, d, layers, heads, kvHeads, dff, maxPositions;
  double normEps, ropeTheta;
  bool tied;
};

/// The JSON value in `file`; an error names the file and what is wrong.
llvm::Expected<json::Value> readJsonFile(const std::string &file) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer)
    return fail(
        fmt::format("cannot read {}: {}", file, buffer.getError().message()));
  llvm::Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    return fail(fmt::format("{}: invalid JSON: {}", file,
                            llvm::toString(parsed.takeError())));
  return parsed;
}

/// config.json's keys that change the math and that import-hf does not
/// implement are refused by name; keys that do not (token ids, dtype
/// hints, dropout, which only training in transformers uses) are ignored.
llvm::Expected<LlamaConfig> readConfig(const std::string &file) {
  llvm::Expected<json::Value> parsed = readJsonFile(file);
  if (!parsed)
    return parsed.takeError();
  const json::Object *object = parsed->getAsObject();
  if (!object)
    return fail(file + ": the configuration must be a JSON object");
  Config c{*object, file};

  std::optional<std::string> modelType;
  ASSIGN_OR_RETURN(modelType, c.string("model_type"));
  if (modelType != "llama")
    return c.unsupported("model_type",
                         "import-hf reads Llama checkpoints: model_type "
                         "\"llama\"");
  if (c.has("architectures")) {
    const json::Array *list = object->get("architectures")->getAsArray();
    if (!list || list->size() != 1 ||
        list->front().getAsString() !=
            std::optional<llvm::StringRef>("LlamaForCausalLM"))
      return c.unsupported("architectures",
                           "import-hf reads [\"LlamaForCausalLM\"]");
  }
  std::optional<std::string> act;
  ASSIGN_OR_RETURN(act, c.string("hidden_act"));
  if (act && *act != "silu")
    return c.unsupported("hidden_act",
                         "import-hf maps silu to mlp \"swiglu\"; no other "
                         "activation");
  for (llvm::StringRef key : {"attention_bias", "mlp_bias"}) {
    bool bias;
    ASSIGN_OR_RETURN(bias, c.boolean(key, false));
    if (bias)
      return c.unsupported(key, "modc's projections have no biases");
  }
  if (c.has("rope_scaling")) {
    // transformers writes {"rope_type": "default"} for plain RoPE too.
    const json::Object *scaling = object->get("rope_scaling")->getAsObject();
    std::optional<llvm::StringRef> type =
        scaling ? scaling->getString("rope_type") : std::nullopt;
    if (!type)
      type = scaling ? scaling->getString("type") : std::nullopt;
    if (!scaling || type != std::optional<llvm::StringRef>("default"))
      return c.unsupported("rope_scaling",
                           "modc's RoPE is unscaled: rope_scaling must be "
                           "null");
  }
  if (c.has("quantization_config"))
    return c.unsupported("quantization_config",
                         "import-hf reads unquantised weights: dequantise "
                         "and save them as BF16, F16 or F32 first");
  if (c.has("sliding_window"))
    return c.unsupported("sliding_window",
                         "modc's attention sees every earlier token");
  int64_t pretrainingTp;
  ASSIGN_OR_RETURN(pretrainingTp, c.integer("pretraining_tp", 1));
  (void)pretrainingTp; // a slicing of the same products: same math

  LlamaConfig m;
  ASSIGN_OR_RETURN(m.vocab, c.integer("vocab_size", std::nullopt));
  ASSIGN_OR_RETURN(m.d, c.integer("hidden_size", std::nullopt));
  ASSIGN_OR_RETURN(m.layers, c.integer("num_hidden_layers", std::nullopt, 0));
  ASSIGN_OR_RETURN(m.heads, c.integer("num_attention_heads", std::nullopt));
  ASSIGN_OR_RETURN(m.kvHeads, c.integer("num_key_value_heads", m.heads));
  ASSIGN_OR_RETURN(m.dff, c.integer("intermediate_size", std::nullopt));
  ASSIGN_OR_RETURN(m.maxPositions, c.integer("max_position_embeddings", 2048));
  // LlamaConfig's own defaults: rms_norm_eps 1e-6, no tying.
  ASSIGN_OR_RETURN(m.normEps, c.number("rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(m.tied, c.boolean("tie_word_embeddings", false));
  if (m.d % m.heads != 0 || (m.d / m.heads) % 2 != 0)
    return c.unsupported("hidden_size",
                         fmt::format("it must be num_attention_heads ({}) "
                                     "times an even head dimension",
                                     m.heads));
  if (m.heads % m.kvHeads != 0)
    return c.unsupported("num_key_value_heads",
                         fmt::format("it must divide num_attention_heads "
                                     "({})",
                                     m.heads));
  if (c.has("head_dim")) {
    int64_t headDim;
    ASSIGN_OR_RETURN(headDim, c.integer("head_dim", std::nullopt));
    if (headDim != m.d / m.heads)
      return c.unsupported("head_dim",
                           fmt::format("modc's head dimension is hidden_size "
                                       "/ num_attention_heads = {}",
                                       m.d / m.heads));
  }
  // rope_theta, or transformers' newer rope_parameters object.
  ASSIGN_OR_RETURN(m.ropeTheta, c.number("rope_theta", 10000.0));
  if (c.has("rope_parameters")) {
    const json::Object *params = object->get("rope_parameters")->getAsObject();
    if (!params)
      return c.error("rope_parameters",
                     "expected an object, got " +
                         describe(*object->get("rope_parameters")));
    Config p{*params, file};
    std::optional<std::string> type;
    ASSIGN_OR_RETURN(type, p.string("rope_type"));
    if (type && *type != "default")
      return c.error("rope_parameters.rope_type",
                     fmt::format("\"{}\" is not supported (modc's RoPE is "
                                 "the unscaled \"default\")",
                                 *type));
    if (p.has("rope_theta")) {
      double theta;
      ASSIGN_OR_RETURN(theta, p.number("rope_theta", 0));
      if (c.has("rope_theta") && theta != m.ropeTheta)
        return c.error("rope_parameters.rope_theta",
                       "differs from the key 'rope_theta'");
      m.ropeTheta = theta;
    }
  }
  return m;
}

/// Every tensor of the checkpoint, widened to F32, with the file it came
/// from (for messages).
struct Checkpoint {
  std::map<std::string, std::pair<modrt::Tensor, std::string>> tensors;
};

llvm::Expected<Checkpoint> readTensors(const std::string &dir,
                                       llvm::raw_ostream *progress) {
  std::vector<std::string> files;
  llvm::SmallString<256> single(dir), index(dir);
  llvm::sys::path::append(single, "model.safetensors");
  llvm::sys::path::append(index, "model.safetensors.index.json");
  if (llvm::sys::fs::exists(single)) {
    files.push_back(single.str().str());
  } else if (llvm::sys::fs::exists(index)) {
    std::string file = index.str().str();
    llvm::Expected<json::Value> parsed = readJsonFile(file);
    if (!parsed)
      return parsed.takeError();
    const json::Object *top = parsed->getAsObject();
    const json::Object *map = top ? top->getObject("weight_map") : nullptr;
    if (!map)
      return fail(fmt::format("{}: key 'weight_map': missing (an object "
                              "from tensor names to shard files is "
                              "required)",
                              file));
    std::set<std::string> shards;
    for (const auto &entry : *map) {
      std::optional<llvm::StringRef> shard = entry.second.getAsString();
      if (!shard || shard->contains('/') || shard->empty())
        return fail(fmt::format("{}: key 'weight_map.{}': expected a file "
                                "name in the directory, got {}",
                                file, entry.first.str(),
                                describe(entry.second)));
      shards.insert(shard->str());
    }
    for (const std::string &shard : shards) {
      llvm::SmallString<256> path(dir);
      llvm::sys::path::append(path, shard);
      files.push_back(path.str().str());
    }
  } else {
    return fail(fmt::format("{}: no model.safetensors or "
                            "model.safetensors.index.json",
                            dir));
  }
  Checkpoint ckpt;
  for (const std::string &file : files) {
    modrt::TensorMap map;
    try {
      map = modrt::TensorMap::load(file);
    } catch (const modrt::Error &e) {
      return fail(e.what());
    }
    size_t converted = 0;
    for (auto &[name, tensor] : map) {
      if (tensor.dtype != modrt::DType::F32)
        return fail(fmt::format("{}: tensor '{}' is {}, expected F32, BF16 "
                                "or F16",
                                file, name, modrt::dtypeName(tensor.dtype)));
      if (tensor.fileDType != modrt::DType::F32)
        ++converted;
      auto [it, inserted] =
          ckpt.tensors.emplace(name, std::make_pair(std::move(tensor), file));
      if (!inserted)
        return fail(fmt::format("{}: tensor '{}' is in two shards: {} and {}",
                                dir, name, it->second.second, file));
    }
    if (progress)
      *progress << fmt::format("modc: read {} tensors from {} ({} widened "
                               "to F32)\n",
                               map.size(), file, converted);
  }
  return ckpt;
}

/// The layers `schedule` routes, or an error naming the flag.
llvm::Expected<std::vector<int64_t>> routedLayers(const std::string &schedule,
                                                  int64_t layers) {
  std::vector<int64_t> routed;
  if (schedule == "every_other") {
    for (int64_t l = 1; l < layers; l += 2)
      routed.push_back(l);
    return routed;
  }
  if (schedule == "all") {
    for (int64_t l = 0; l < layers; ++l)
      routed.push_back(l);
    return routed;
  }
  if (schedule == "none")
    return routed;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(schedule).split(parts, ',');
  for (llvm::StringRef part : parts) {
    int64_t l;
    if (part.trim().getAsInteger(10, l))
      return fail(fmt::format("--schedule takes every_other, all, none or "
                              "layer indices such as 1,3, got '{}'",
                              schedule));
    if (l < 0 || l >= layers)
      return fail(fmt::format("--schedule: layer {} is out of range [0, {})", l,
                              layers));
    if (llvm::is_contained(routed, l))
      return fail(fmt::format("--schedule: layer {} is listed twice", l));
    routed.push_back(l);
  }
  llvm::sort(routed);
  return routed;
}

std::string modelName(const HfImportOptions &opts) {
  if (!opts.name.empty())
    return opts.name;
  // The directory's own name, also for "." or "ckpt/".
  llvm::SmallString<256> dir;
  if (llvm::sys::fs::real_path(opts.checkpointDir, dir))
    dir = opts.checkpointDir;
  llvm::sys::path::remove_dots(dir, /*remove_dot_dot=*/true);
  std::string name = llvm::sys::path::filename(dir).str();
  if (name.empty() || name == "." || name == "/")
    return "model";
  for (char &ch : name)
    if (!llvm::isAlnum(ch) && ch != '-' && ch != '_' && ch != '.')
      ch = '-';
  return name;
}
} // namespace

llvm::Expected<HfImportResult>
modc::importHfCheckpoint(const HfImportOptions &opts) {
  const std::string &dir = opts.checkpointDir;
  if (!llvm::sys::fs::is_directory(dir))
    return fail(fmt::format("{}: not a directory (import-hf reads a "
                            "checkpoint directory: config.json and "
                            "model.safetensors)",
                            dir));
  llvm::SmallString<256> configPath(dir);
  llvm::sys::path::append(configPath, "config.json");
  LlamaConfig m;
  ASSIGN_OR_RETURN(m, readConfig(configPath.str().str()));

  // Flags, checked against the configuration.
  bool mixtureOfDepths = opts.capacity || opts.capacityTokens;
  int64_t seqLen =
      opts.seqLen ? *opts.seqLen : std::min(m.maxPositions, kDefaultMaxSeqLen);
  if (seqLen < 1 || seqLen > m.maxPositions)
    return fail(fmt::format("--seq-len must be in [1, {}] "
                            "(max_position_embeddings), got {}",
                            m.maxPositions, seqLen));
  std::vector<int64_t> routed;
  if (mixtureOfDepths) {
    if (opts.capacity && opts.capacityTokens)
      return fail("give --capacity or --capacity-tokens, not both");
    if (opts.capacity && !(*opts.capacity > 0 && *opts.capacity <= 1))
      return fail(
          fmt::format("--capacity must be in (0, 1], got {}", *opts.capacity));
    if (opts.capacityTokens &&
        (*opts.capacityTokens < 1 || *opts.capacityTokens > seqLen))
      return fail(fmt::format("--capacity-tokens must be in [1, {}] "
                              "(seq_len), got {}",
                              seqLen, *opts.capacityTokens));
    ASSIGN_OR_RETURN(routed, routedLayers(opts.schedule, m.layers));
  }

  Checkpoint ckpt;
  ASSIGN_OR_RETURN(ckpt, readTensors(dir, opts.progress));

  HfImportResult result;
  int64_t hd = m.d / m.heads;
  std::set<std::string> used;
  // Moves the checkpoint's `hf` tensor to `ours`, checking its shape.
  auto take = [&](const std::string &hf, const std::string &ours,
                  std::vector<int64_t> shape) -> llvm::Error {
    auto it = ckpt.tensors.find(hf);
    if (it == ckpt.tensors.end())
      return fail(fmt::format("{}: missing tensor '{}' (shape {})", dir, hf,
                              modrt::shapeString(shape)));
    modrt::Tensor &t = it->second.first;
    if (t.shape != shape)
      return fail(fmt::format(
          "{}: tensor '{}' has shape {}, expected {}", it->second.second, hf,
          modrt::shapeString(t.shape), modrt::shapeString(shape)));
    used.insert(hf);
    result.weights.insert(ours, std::move(t));
    return llvm::Error::success();
  };
  // The routers and predictors: modrun init's streams for the predictor
  // (normal 0.02, zero biases), and a zero router (docs/huggingface.md:
  // g(0) = 1/2 with the sigmoid gate).
  int64_t predictorHidden = opts.predictorHidden.value_or(m.d);
  auto init = [&](const std::string &name, std::vector<int64_t> shape,
                  const char *kind, double std) {
    modrt::ParamInfo param;
    param.name = name;
    param.shape = std::move(shape);
    param.init = kind;
    param.std = std;
    result.weights.insert(name, modrt::initParam(param, opts.seed));
  };

  // Tied checkpoints may still carry lm_head.weight: it must be the
  // embedding, else tying would change the model.
  if (m.tied) {
    auto head = ckpt.tensors.find("lm_head.weight");
    auto embed = ckpt.tensors.find("model.embed_tokens.weight");
    if (head != ckpt.tensors.end()) {
      if (embed == ckpt.tensors.end() ||
          head->second.first.data != embed->second.first.data)
        return fail(fmt::format("{}: tensor 'lm_head.weight' differs from "
                                "'model.embed_tokens.weight', but "
                                "tie_word_embeddings is true",
                                head->second.second));
      used.insert("lm_head.weight");
    }
  }
  if (llvm::Error e =
          take("model.embed_tokens.weight", "embed.weight", {m.vocab, m.d}))
    return std::move(e);
  size_t total = ckpt.tensors.size();
  for (int64_t l = 0; l < m.layers; ++l) {
    std::string hf = fmt::format("model.layers.{}.", l);
    std::string ours = fmt::format("blocks.{}.", l);
    if (llvm::is_contained(routed, l)) {
      if (opts.causalRouter == "predictor") {
        init(ours + "predictor.fc1.weight", {predictorHidden, m.d}, "normal",
             0.02);
        init(ours + "predictor.fc1.bias", {predictorHidden}, "zeros", 0);
        init(ours + "predictor.fc2.weight", {1, predictorHidden}, "normal",
             0.02);
        init(ours + "predictor.fc2.bias", {1}, "zeros", 0);
      }
      init(ours + "router.weight", {1, m.d}, "zeros", 0);
    }
    const std::pair<const char *, const char *> names[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn.wq.weight"},
        {"self_attn.k_proj.weight", "attn.wk.weight"},
        {"self_attn.v_proj.weight", "attn.wv.weight"},
        {"self_attn.o_proj.weight", "attn.wo.weight"},
        {"post_attention_layernorm.weight", "mlp_norm.weight"},
        {"mlp.gate_proj.weight", "mlp.w_gate.weight"},
        {"mlp.up_proj.weight", "mlp.w_up.weight"},
        {"mlp.down_proj.weight", "mlp.w_down.weight"}};
    const std::vector<int64_t> shapes[] = {
        {m.d},       {m.d, m.d}, {m.kvHeads * hd, m.d}, {m.kvHeads * hd, m.d},
        {m.d, m.d},  {m.d},      {m.dff, m.d},          {m.dff, m.d},
        {m.d, m.dff}};
    for (size_t i = 0; i < std::size(names); ++i)
      if (llvm::Error e =
              take(hf + names[i].first, ours + names[i].second, shapes[i]))
        return std::move(e);
    // An older transformers saved RoPE's frequencies as a buffer: they
    // follow from rope_theta, which the description carries.
    std::string invFreq = hf + "self_attn.rotary_emb.inv_freq";
    if (ckpt.tensors.count(invFreq))
      used.insert(invFreq);
    if (opts.progress)
      *opts.progress << fmt::format("modc: converted layer {}/{} ({}/{} "
                                    "tensors)\n",
                                    l + 1, m.layers, used.size(), total);
  }
  if (llvm::Error e = take("model.norm.weight", "final_norm.weight", {m.d}))
    return std::move(e);
  if (!m.tied)
    if (llvm::Error e =
            take("lm_head.weight", "lm_head.weight", {m.vocab, m.d}))
      return std::move(e);
  for (const auto &[name, entry] : ckpt.tensors)
    if (!used.count(name))
      return fail(fmt::format("{}: unexpected tensor '{}' (not a parameter "
                              "of the Llama model that config.json "
                              "describes)",
                              entry.second, name));

  // The description, in docs/model-format.md section 1's key order.
  std::string j = "{\n";
  j += fmt::format("  \"name\": \"{}\",\n", modelName(opts));
  j += fmt::format("  \"vocab_size\": {},\n", m.vocab);
  j += fmt::format("  \"d_model\": {},\n", m.d);
  j += fmt::format("  \"n_layers\": {},\n", m.layers);
  j += fmt::format("  \"n_heads\": {},\n", m.heads);
  // Only grouped-query models carry the key (its default is n_heads).
  if (m.kvHeads != m.heads)
    j += fmt::format("  \"n_kv_heads\": {},\n", m.kvHeads);
  j += fmt::format("  \"d_ff\": {},\n", m.dff);
  j += fmt::format("  \"seq_len\": {},\n", seqLen);
  j += "  \"mlp\": \"swiglu\",\n";
  j += fmt::format("  \"norm_eps\": {},\n", m.normEps);
  j += fmt::format("  \"rope_theta\": {},\n", m.ropeTheta);
  j += fmt::format("  \"tie_embeddings\": {},\n", m.tied ? "true" : "false");
  j += fmt::format("  \"dtype\": \"{}\"", opts.dtype);
  if (mixtureOfDepths) {
    j += ",\n  \"mod\": {\n";
    if (opts.capacity)
      j += fmt::format("    \"capacity\": {},\n", *opts.capacity);
    else
      j += fmt::format("    \"capacity_tokens\": {},\n", *opts.capacityTokens);
    if (opts.schedule == "every_other" || opts.schedule == "all" ||
        opts.schedule == "none")
      j += fmt::format("    \"schedule\": \"{}\",\n", opts.schedule);
    else
      j += fmt::format("    \"schedule\": [{}],\n", fmt::join(routed, ", "));
    j += fmt::format("    \"gate\": \"{}\",\n", opts.gate);
    j += fmt::format("    \"causal_router\": \"{}\"", opts.causalRouter);
    if (opts.auxLossWeight)
      j += fmt::format(",\n    \"aux_loss_weight\": {}", *opts.auxLossWeight);
    if (opts.causalRouter == "predictor")
      j += fmt::format(",\n    \"predictor_hidden\": {}", predictorHidden);
    j += "\n  }";
  }
  j += "\n}\n";
  result.modelJson = std::move(j);
  return result;
}

llvm::Error modc::writeHfImport(const HfImportResult &result,
                                const std::string &modelPath,
                                const std::string &weightsPath) {
  // The description goes to a temporary file first; the weights are saved
  // atomically by TensorMap::save; then the description is renamed into
  // place. On any failure the temporary file is removed.
  std::string tmp =
      fmt::format("{}.tmp.{}", modelPath, llvm::sys::Process::getProcessId());
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec)
      return fail(fmt::format("cannot write {}: {}", modelPath, ec.message()));
    os << result.modelJson;
    os.close();
    if (os.has_error()) {
      std::string message = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return fail(fmt::format("cannot write {}: {}", modelPath, message));
    }
  }
  try {
    result.weights.save(weightsPath);
  } catch (const modrt::Error &e) {
    llvm::sys::fs::remove(tmp);
    return fail(e.what());
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, modelPath)) {
    llvm::sys::fs::remove(tmp);
    llvm::sys::fs::remove(weightsPath);
    return fail(fmt::format("cannot write {}: {}", modelPath, ec.message()));
  }
  return llvm::Error::success();
}
