//===- Manifest.cpp - Parsing and validating manifest.json ---------------===//
//
// Validation is key by key so that a wrong manifest yields a message naming
// the exact key path ("layers[1].capacity") and what was expected.
//
//===----------------------------------------------------------------------===//
#include "modrt/CpuFeatures.h"
#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/abi.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <set>

using namespace modrt;
using nlohmann::json;

namespace {
/// Typed access to JSON fields with errors that name the key path.
class Reader {
public:
  explicit Reader(const std::string &where) : where(where) {}

  [[noreturn]] void fail(const std::string &key,
                         const std::string &what) const {
    throw Error(fmt::format("{}: manifest key '{}': {}", where, key, what));
  }

  const json &field(const json &obj, const std::string &objPath,
                    const std::string &name) const {
    std::string key = join(objPath, name);
    auto it = obj.find(name);
    if (it == obj.end())
      fail(key, "missing");
    return *it;
  }

  const json &object(const json &obj, const std::string &objPath,
                     const std::string &name) const {
    const json &v = field(obj, objPath, name);
    if (!v.is_object())
      fail(join(objPath, name),
           fmt::format("expected an object, got {}", v.type_name()));
    return v;
  }

  const json &array(const json &obj, const std::string &objPath,
                    const std::string &name) const {
    const json &v = field(obj, objPath, name);
    if (!v.is_array())
      fail(join(objPath, name),
           fmt::format("expected an array, got {}", v.type_name()));
    return v;
  }

  std::string string(const json &obj, const std::string &objPath,
                     const std::string &name) const {
    const json &v = field(obj, objPath, name);
    if (!v.is_string())
      fail(join(objPath, name),
           fmt::format("expected a string, got {}", v.type_name()));
    return v.get<std::string>();
  }

  bool boolean(const json &obj, const std::string &objPath,
               const std::string &name) const {
    const json &v = field(obj, objPath, name);
    if (!v.is_boolean())
      fail(join(objPath, name),
           fmt::format("expected true or false, got {}", v.type_name()));
    return v.get<bool>();
  }

  /// An integer in [lo, hi].
  int64_t integer(const json &v, const std::string &key, int64_t lo,
                  int64_t hi) const {
    if (!v.is_number_integer())
      fail(key, fmt::format("expected an integer, got {}", describe(v)));
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(key, fmt::format("{} is out of range [{}, {}]", v.dump(), lo, hi));
    int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      fail(key, fmt::format("{} is out of range [{}, {}]", x, lo, hi));
    return x;
  }

  int64_t integer(const json &obj, const std::string &objPath,
                  const std::string &name, int64_t lo, int64_t hi) const {
    return integer(field(obj, objPath, name), join(objPath, name), lo, hi);
  }

  static std::string join(const std::string &objPath, const std::string &name) {
    return objPath.empty() ? name : objPath + "." + name;
  }

  static std::string describe(const json &v) {
    return v.is_number() ? fmt::format("{} {}", v.type_name(), v.dump())
                         : std::string(v.type_name());
  }

private:
  std::string where;
};
} // namespace

Manifest Manifest::parse(const std::string &jsonText,
                         const std::string &where) {
  json root;
  try {
    root = json::parse(jsonText);
  } catch (const json::exception &e) {
    throw Error(
        fmt::format("{}: manifest is not valid JSON: {}", where, e.what()));
  }
  if (!root.is_object())
    throw Error(fmt::format("{}: manifest must be a JSON object, got {}", where,
                            root.type_name()));
  Reader r(where);
  Manifest m;

  std::string format = r.string(root, "", "format");
  if (format != "modc-package")
    r.fail("format",
           fmt::format("expected \"modc-package\", got \"{}\"", format));
  m.abiVersion =
      static_cast<uint32_t>(r.integer(root, "", "abi_version", 0, UINT32_MAX));
  m.compilerVersion = r.string(root, "", "compiler_version");
  m.target = r.string(root, "", "target");
  if (m.target == "cuda")
    m.arch = r.string(root, "", "arch");
  if (m.target == "cpu") {
    const json &cpu = r.object(root, "", "cpu");
    m.cpuMarch = r.string(cpu, "cpu", "march");
    const json &features = r.array(cpu, "cpu", "features");
    for (size_t i = 0; i < features.size(); ++i) {
      std::string key = fmt::format("cpu.features[{}]", i);
      if (!features[i].is_string())
        r.fail(key, fmt::format("expected a string, got {}",
                                features[i].type_name()));
      std::string name = features[i].get<std::string>();
      bool known = false;
      for (const CpuFeature &f : knownCpuFeatures())
        known = known || name == f.name;
      if (!known)
        r.fail(key, fmt::format("unknown CPU feature \"{}\" (a package from "
                                "a newer modc? recompile it with this one)",
                                name));
      m.cpuFeatures.push_back(std::move(name));
    }
  }

  // model: only the keys the runtime needs are checked; the rest is the
  // compiler's business and is kept verbatim.
  m.model = r.object(root, "", "model");
  constexpr int64_t kBig = int64_t(1) << 40;
  m.seqLen = r.integer(m.model, "model", "seq_len", 1, kBig);
  m.vocabSize = r.integer(m.model, "model", "vocab_size", 1, INT32_MAX);
  m.dModel = r.integer(m.model, "model", "d_model", 1, kBig);
  if (m.model.contains("dtype")) {
    m.dtype = r.string(m.model, "model", "dtype");
    if (m.dtype != "f32" && m.dtype != "bf16")
      r.fail("model.dtype",
             fmt::format("expected 'f32' or 'bf16', got '{}'", m.dtype));
  }
  std::string causalRouter = "none";
  if (m.model.contains("mod")) {
    const json &mod = r.object(m.model, "model", "mod");
    causalRouter = r.string(mod, "model.mod", "causal_router");
    if (mod.contains("aux_loss_weight")) {
      const json &w = mod["aux_loss_weight"];
      if (!w.is_number() || !std::isfinite(w.get<double>()) ||
          w.get<double>() < 0)
        r.fail("model.mod.aux_loss_weight",
               fmt::format("expected a finite number >= 0, got {}",
                           Reader::describe(w)));
      m.auxLossWeight = w.get<double>();
    }
    if (causalRouter != "aux_loss" && causalRouter != "predictor" &&
        causalRouter != "none")
      r.fail("model.mod.causal_router",
             fmt::format("expected \"aux_loss\", \"predictor\" or \"none\", "
                         "got \"{}\"",
                         causalRouter));
  }

  const json &layers = r.array(root, "", "layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string path = fmt::format("layers[{}]", i);
    const json &l = layers[i];
    if (!l.is_object())
      r.fail(path, fmt::format("expected an object, got {}", l.type_name()));
    LayerInfo info;
    info.index = static_cast<int>(r.integer(l, path, "index", 0, INT32_MAX));
    if (info.index != static_cast<int>(i))
      r.fail(path + ".index", fmt::format("expected {} (layers are listed in "
                                          "order), got {}",
                                          i, info.index));
    info.routed = r.boolean(l, path, "routed");
    if (info.routed || l.contains("capacity"))
      info.capacity = r.integer(l, path, "capacity", 1, m.seqLen);
    else
      info.capacity = m.seqLen;
    if (info.routed)
      m.routedLayers.push_back(info.index);
    m.layers.push_back(info);
  }

  // Mixture-of-Experts MLPs (docs/model-format.md section 7): E, N and the
  // MoE layers, which index `layers`; decisions are encoded up to 2E + N in
  // an int32 (docs/runtime.md), and the compiler allows at most 2^20 each.
  if (m.model.contains("moe")) {
    const json &moe = r.object(m.model, "model", "moe");
    constexpr int64_t kExperts = int64_t(1) << 20;
    m.moeExperts = r.integer(moe, "model.moe", "n_experts", 1, kExperts);
    m.moeNoopExperts = r.integer(moe, "model.moe", "noop_experts", 0, kExperts);
    const json &moeLayers = r.array(moe, "model.moe", "layers");
    const int64_t nLayers = static_cast<int64_t>(m.layers.size());
    for (size_t i = 0; i < moeLayers.size(); ++i) {
      std::string key = fmt::format("model.moe.layers[{}]", i);
      int64_t l = r.integer(moeLayers[i], key, 0, INT32_MAX);
      if (l >= nLayers)
        r.fail(key, fmt::format("layer index {} is out of range [0, n_layers "
                                "= {})",
                                l, nLayers));
      if (!m.moeLayers.empty() && l <= m.moeLayers.back())
        r.fail(key, fmt::format("layer index {} after {}: the MoE layers "
                                "must be ascending, each once",
                                l, m.moeLayers.back()));
      m.moeLayers.push_back(static_cast<int>(l));
    }
  }

  const json &params = r.array(root, "", "params");
  std::set<std::string> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    std::string path = fmt::format("params[{}]", i);
    const json &p = params[i];
    if (!p.is_object())
      r.fail(path, fmt::format("expected an object, got {}", p.type_name()));
    ParamInfo info;
    info.name = r.string(p, path, "name");
    if (info.name.empty() || info.name == "__metadata__")
      r.fail(path + ".name", fmt::format("invalid name \"{}\"", info.name));
    if (!seen.insert(info.name).second)
      r.fail(path + ".name", fmt::format("duplicate param \"{}\"", info.name));
    const json &shape = r.array(p, path, "shape");
    for (size_t d = 0; d < shape.size(); ++d)
      info.shape.push_back(
          r.integer(shape[d], fmt::format("{}.shape[{}]", path, d), 0, kBig));
    if (p.contains("dtype")) {
      std::string dtype = r.string(p, path, "dtype");
      if (dtype != "F32")
        r.fail(path + ".dtype",
               fmt::format("expected \"F32\", got \"{}\"", dtype));
    }
    // Unknown init names are accepted here and refused by initWeights, so a
    // package stays usable with weights loaded from a checkpoint.
    info.init = r.string(p, path, "init");
    if (info.init == "normal" || p.contains("std")) {
      const json &s = r.field(p, path, "std");
      if (!s.is_number() || !std::isfinite(s.get<double>()) ||
          s.get<double>() < 0)
        r.fail(path + ".std",
               fmt::format("expected a finite number >= 0, got {}",
                           Reader::describe(s)));
      info.std = s.get<double>();
    }
    if (p.contains("decay"))
      info.decay = r.boolean(p, path, "decay");
    m.params.push_back(std::move(info));
  }

  const json &entries = r.object(root, "", "entries");
  const json &fwd = r.object(entries, "entries", "forward");
  const json &ws =
      r.field(fwd, "entries.forward", "workspace_bytes_per_sequence");
  if (!ws.is_number_unsigned())
    r.fail("entries.forward.workspace_bytes_per_sequence",
           fmt::format("expected a non-negative integer, got {}",
                       Reader::describe(ws)));
  m.workspaceBytesPerSequence = ws.get<uint64_t>();
  const json &modes = r.array(fwd, "entries.forward", "modes");
  bool topk = false;
  for (size_t i = 0; i < modes.size(); ++i) {
    std::string key = fmt::format("entries.forward.modes[{}]", i);
    if (!modes[i].is_string())
      r.fail(key,
             fmt::format("expected a string, got {}", modes[i].type_name()));
    std::string mode = modes[i].get<std::string>();
    if (mode == "topk")
      topk = true;
    else if (mode == "causal")
      m.supportsCausal = true;
    else
      r.fail(key,
             fmt::format("expected \"topk\" or \"causal\", got \"{}\"", mode));
  }
  if (!topk)
    r.fail("entries.forward.modes", "must list \"topk\"");
  // entries.forward.prefill: the forward entry of a decoding package can
  // fill the KV cache (modc_forward_args::prefill_lengths).
  if (fwd.contains("prefill")) {
    if (!fwd["prefill"].is_boolean())
      r.fail("entries.forward.prefill",
             fmt::format("expected true or false, got {}",
                         Reader::describe(fwd["prefill"])));
    m.supportsPrefill = fwd["prefill"].get<bool>();
  }

  // Training entry points come as a pair: modc_grad without modc_adamw (or
  // the reverse) is a broken package, not an inference-only one.
  bool hasGrad = entries.contains("grad"), hasAdamw = entries.contains("adamw");
  if (hasGrad != hasAdamw)
    r.fail(hasGrad ? "entries.adamw" : "entries.grad",
           fmt::format("missing, but entries.{} is present (training needs "
                       "both)",
                       hasGrad ? "grad" : "adamw"));
  if (hasGrad) {
    const json &grad = r.object(entries, "entries", "grad");
    r.object(entries, "entries", "adamw");
    const json &gws =
        r.field(grad, "entries.grad", "workspace_bytes_per_sequence");
    if (!gws.is_number_unsigned())
      r.fail("entries.grad.workspace_bytes_per_sequence",
             fmt::format("expected a non-negative integer, got {}",
                         Reader::describe(gws)));
    m.gradWorkspaceBytesPerSequence = gws.get<uint64_t>();
    m.supportsTraining = true;
  }
  if (entries.contains("eval")) {
    const json &eval = r.object(entries, "entries", "eval");
    const json &ews =
        r.field(eval, "entries.eval", "workspace_bytes_per_sequence");
    if (!ews.is_number_unsigned())
      r.fail("entries.eval.workspace_bytes_per_sequence",
             fmt::format("expected a non-negative integer, got {}",
                         Reader::describe(ews)));
    m.evalWorkspaceBytesPerSequence = ews.get<uint64_t>();
    m.supportsEval = true;
    if (eval.contains("causal_workspace_bytes_per_sequence")) {
      const json &cws = eval["causal_workspace_bytes_per_sequence"];
      if (!cws.is_number_unsigned())
        r.fail("entries.eval.causal_workspace_bytes_per_sequence",
               fmt::format("expected a non-negative integer, got {}",
                           Reader::describe(cws)));
      m.evalCausalWorkspaceBytesPerSequence = cws.get<uint64_t>();
      m.supportsEvalCausal = true;
    }
  }
  m.causalRouter = causalRouter;
  if (entries.contains("decode")) {
    const json &dec = r.object(entries, "entries", "decode");
    auto size = [&](const char *name) {
      const json &v = r.field(dec, "entries.decode", name);
      if (!v.is_number_unsigned())
        r.fail(std::string("entries.decode.") + name,
               fmt::format("expected a non-negative integer, got {}",
                           Reader::describe(v)));
      return v.get<uint64_t>();
    };
    m.decodeWorkspaceBytesPerSequence = size("workspace_bytes_per_sequence");
    m.kvCacheBytesPerSequence = size("kv_cache_bytes_per_sequence");
    m.supportsDecode = true;
  }

  // The model description and the params' names and shapes say which
  // weights fit and what they mean; compiler version, workspace sizes and
  // init hints do not. nlohmann::json keeps object keys sorted, so dump() is
  // canonical.
  json shapes = json::array();
  for (const ParamInfo &p : m.params)
    shapes.push_back(json{{"name", p.name}, {"shape", p.shape}});
  std::string identity = json{{"model", m.model}, {"params", shapes}}.dump();
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : identity) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  m.modelHash = h;
  if (m.supportsCausal != (causalRouter != "none"))
    r.fail("entries.forward.modes",
           fmt::format("lists causal = {} but model.mod.causal_router is "
                       "\"{}\"",
                       m.supportsCausal, causalRouter));
  if (m.supportsDecode && !m.routedLayers.empty() && causalRouter == "none")
    r.fail("entries.decode",
           "present, but routed layers with causal_router \"none\" cannot "
           "decode");
  // The package's own tokenizer (docs/model-format.md section 6): a file in
  // the package directory, named relative to it.
  if (root.contains("tokenizer")) {
    m.tokenizer = r.string(root, "", "tokenizer");
    std::filesystem::path tp(m.tokenizer);
    bool inside = !m.tokenizer.empty() && tp.is_relative();
    for (const auto &part : tp)
      inside &= part != "..";
    if (!inside)
      r.fail("tokenizer",
             fmt::format("\"{}\" must be a file name relative to the package "
                         "directory, inside it",
                         m.tokenizer));
  }
  return m;
}
