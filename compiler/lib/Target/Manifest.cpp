//===- Manifest.cpp - The manifest.json of a package ------------*- C++ -*-===//

#include "Cuda/CutlassGemms.h"
#include "modc/Target/Package.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>

using namespace mlir;
using namespace modc;
namespace json = llvm::json;

json::Object modc::manifestModel(modk::ModelAttr model) {
  json::Object o{
      {"name", model.getName().str()},
      {"vocab_size", model.getVocabSize()},
      {"d_model", model.getDModel()},
      {"n_layers", model.getNLayers()},
      {"n_heads", model.getNHeads()},
      {"n_kv_heads", model.getKvHeads()},
      {"d_ff", model.getDFf()},
      {"seq_len", model.getSeqLen()},
      {"mlp", modc::stringifyActivation(model.getMlp()).str()},
      {"norm_eps", model.getNormEps().getValueAsDouble()},
      {"rope_theta", model.getRopeTheta().getValueAsDouble()},
      {"tie_embeddings", model.getTieEmbeddings().getValue()},
      {"dtype", modc::stringifyDType(model.getDtype()).str()},
  };
  if (modk::MoDConfigAttr mod = model.getMod()) {
    json::Object section{
        {"gate", modc::stringifyGate(mod.getGate()).str()},
        {"causal_router",
         modc::stringifyCausalRouter(mod.getCausalRouter()).str()},
        {"aux_loss_weight", mod.getAuxLossWeight().getValueAsDouble()},
        {"predictor_hidden", mod.getPredictorHidden()},
    };
    if (FloatAttr capacity = mod.getCapacity())
      section["capacity"] = capacity.getValueAsDouble();
    if (std::optional<int64_t> tokens = mod.getCapacityTokens())
      section["capacity_tokens"] = *tokens;
    if (mod.getSchedule() == modc::Schedule::layers)
      section["schedule"] = json::Array(mod.getLayers());
    else
      section["schedule"] = modc::stringifySchedule(mod.getSchedule()).str();
    o["mod"] = std::move(section);
  }
  if (modk::MoEConfigAttr moe = model.getMoe())
    o["moe"] = json::Object{
        {"n_experts", moe.getNExperts()},
        {"noop_experts", moe.getNoopExperts()},
        {"d_expert", moe.getDExpert()},
        {"capacity_factor", moe.getCapacityFactor().getValueAsDouble()},
        {"balance_loss_weight", moe.getBalanceLossWeight().getValueAsDouble()},
        {"layers", json::Array(moe.getLayers())},
        {"capacities", json::Array(moe.getCapacities())},
    };
  return o;
}

modk::EntryOp &modc::PackageEntries::of(modk::EntryKind kind) {
  switch (kind) {
  case modk::EntryKind::forward:
    return forward;
  case modk::EntryKind::grad:
    return grad;
  case modk::EntryKind::decode:
    return decode;
  case modk::EntryKind::eval:
    return eval;
  case modk::EntryKind::eval_causal:
    return evalCausal;
  }
  llvm_unreachable("unknown entry kind");
}

std::string modc::buildManifest(llvm::ArrayRef<modk::EntryOp> entryOps,
                                llvm::StringRef target, llvm::StringRef arch,
                                const CpuIsa *cpuIsa) {
  PackageEntries byKind;
  for (modk::EntryOp e : entryOps)
    byKind.of(e.getKind()) = e;
  auto &[entry, grad, decode, eval, evalCausal] = byKind;
  modk::ModelAttr model = entry.getModel();
  int64_t nLayers = model.getNLayers();

  std::map<int64_t, int64_t> capacities;
  entry.walk([&](modk::RouteSelectOp route) {
    capacities[route.getLayer()] = route.getK();
  });
  json::Array layers;
  for (int64_t i = 0; i < nLayers; ++i) {
    json::Object layer{{"index", i}, {"routed", capacities.count(i) > 0}};
    if (capacities.count(i))
      layer["capacity"] = capacities[i];
    layers.push_back(std::move(layer));
  }

  json::Array params;
  for (auto p : entry.getParams().getAsRange<modk::ParamAttr>()) {
    json::Object param{{"name", p.getName().str()},
                       {"shape", json::Array(p.getShape())},
                       {"dtype", "F32"},
                       {"init", modk::stringifyParamInit(p.getInit()).str()}};
    if (FloatAttr std = p.getStd())
      param["std"] = std.getValueAsDouble();
    param["decay"] = p.getDecay();
    params.push_back(std::move(param));
  }

  json::Array modes;
  for (auto m : entry.getModes().getAsRange<modk::RoutingModeAttr>())
    modes.push_back(modk::stringifyRoutingMode(m.getValue()).str());
  json::Object forward{
      {"workspace_bytes_per_sequence",
       entry.getWorkspaceBytesPerSequence().value_or(0)},
      {"modes", std::move(modes)}};

  json::Object entries{{"forward", std::move(forward)}};
  if (grad) {
    entries["grad"] = json::Object{
        {"workspace_bytes_per_sequence",
         grad.getWorkspaceBytesPerSequence().value_or(0)}};
    entries["adamw"] = json::Object{};
  }
  if (eval) {
    entries["eval"] = json::Object{
        {"workspace_bytes_per_sequence",
         eval.getWorkspaceBytesPerSequence().value_or(0)}};
    // modc_eval_causal: the loss of causal routing.
    if (evalCausal)
      entries.getObject("eval")->try_emplace(
          "causal_workspace_bytes_per_sequence",
          evalCausal.getWorkspaceBytesPerSequence().value_or(0));
  }
  if (decode) {
    // The forward entry fills the decode cache in a causal prefill.
    entries.getObject("forward")->try_emplace("prefill", true);
    entries["decode"] = json::Object{
        {"workspace_bytes_per_sequence",
         decode.getWorkspaceBytesPerSequence().value_or(0)},
        {"kv_cache_bytes_per_sequence",
         kvCacheBytesPerSequence(nLayers, model.getSeqLen(), kvWidth(model),
                                 decode.isBf16())}};
  }
  json::Object manifest{
      {"format", "modc-package"},
      {"abi_version", (int64_t)kPackageAbiVersion},
      {"compiler_version", MODC_VERSION},
      {"target", target.str()},
      {"model", manifestModel(model)},
      {"layers", std::move(layers)},
      {"params", std::move(params)},
      {"entries", std::move(entries)},
  };
  if (!arch.empty())
    manifest["arch"] = arch.str();
  // A package whose products run CUTLASS kernels names the CUTLASS it was
  // compiled against (headers only: the package needs nothing of it).
  if (target == "cuda" && usesCutlass(entryOps))
    manifest["cutlass"] =
        cutlassVersion().empty() ? "unknown" : cutlassVersion().str();
  if (cpuIsa) {
    json::Array features;
    for (const std::string &f : cpuIsa->features)
      features.push_back(f);
    manifest["cpu"] = json::Object{{"march", cpuIsa->march},
                                   {"features", std::move(features)}};
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", json::Value(std::move(manifest))) << "\n";
  return text;
}
