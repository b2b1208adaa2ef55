//===- ModelCommands.cpp - modrun init, forward, grad, eval, info ---------===//
//
// The commands that open a package and run it once (docs/cli.md): thin
// wrappers over modrt::Package that check their inputs first, so that each
// error names the file at fault.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "modrt/Error.h"
#include "modrt/Training.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace modrt;

namespace modrun {
namespace {

//===----------------------------------------------------------------------===//
// init
//===----------------------------------------------------------------------===//

const char kInitUsage[] =
    "usage: modrun init PKG --seed N --out W.safetensors\n"
    "\n"
    "Writes the package's parameters initialised from its manifest (normal,\n"
    "ones, zeros); the values depend on the seed alone.\n";

void declareInit(CommandLine &line) {
  packageArgument(line)
      .option("seed", "N", "required; an integer in [0, 2^64)")
      .option("out", "W.safetensors", "required; the file to write");
}

int runInit(const CommandLine &line) {
  line.require("seed");
  uint64_t seed = *line.integer("seed");
  const std::string &out = line.require("out");
  const std::string &dir = line.argument();
  refuseOverwritingInput("--out", out,
                         {{"PKG/manifest.json", dir + "/manifest.json"},
                          {"PKG/libmodel.so", dir + "/libmodel.so"}});
  Package pkg = Package::open(dir);
  TensorMap weights = pkg.initWeights(seed);
  weights.metadata["modrun.seed"] = std::to_string(seed);
  weights.save(out);
  return 0;
}

//===----------------------------------------------------------------------===//
// forward
//===----------------------------------------------------------------------===//

const char kForwardUsage[] =
    "usage: modrun forward PKG --weights W.safetensors --tokens T.safetensors\n"
    "                          --out OUT.safetensors [--mode topk|causal]\n"
    "\n"
    "T holds one I32 tensor 'tokens' of shape [B, seq_len]. OUT gets 'logits'\n"
    "(F32 [B, seq_len, vocab]), 'routed.<l>' (I32 [B, seq_len], 1 = the\n"
    "token went through the block) for each routed layer l, and 'moe.<l>'\n"
    "(I32 [B, seq_len]: the expert e, e + E + N when over capacity, -1 when\n"
    "the token skips the MLP) for each MoE layer l. Default mode: topk.\n";

void declareForward(CommandLine &line) {
  packageArgument(line)
      .option("weights", "W.safetensors",
              "required; weights or a checkpoint of modrun train")
      .option("tokens", "T.safetensors", "required; I32 'tokens' [B, seq_len]")
      .option("out", "OUT.safetensors", "required; the file to write")
      .option("mode", "topk|causal",
              "selection rule of routed layers (default topk)");
}

int runForward(const CommandLine &line) {
  const std::string &weightsPath = line.require("weights");
  const std::string &tokensPath = line.require("tokens");
  const std::string &out = line.require("out");
  refuseOverwritingInput(
      "--out", out, {{"--weights", weightsPath}, {"--tokens", tokensPath}});
  RouteMode mode = RouteMode::TopK;
  if (line.has("mode")) {
    const std::string &m = line.text("mode");
    if (m == "causal")
      mode = RouteMode::Causal;
    else if (m != "topk")
      throw line.mistake(
          fmt::format("--mode must be topk or causal, got '{}'", m));
  }

  Package pkg = Package::open(line.argument());
  const Manifest &man = pkg.manifest();
  TensorMap weights = loadCheckedWeights(pkg, weightsPath);
  TensorMap tokenFile = TensorMap::load(tokensPath);
  const Tensor *tok = tokenFile.find("tokens");
  if (!tok)
    throw Error(fmt::format("{}: no tensor 'tokens' (expected I32 [B, {}])",
                            tokensPath, man.seqLen));
  if (tok->dtype != DType::I32 || tok->shape.size() != 2 ||
      tok->shape[1] != man.seqLen || tok->shape[0] < 1)
    throw Error(fmt::format("{}: tensor 'tokens' must be I32 [B, seq_len] = "
                            "[B, {}] with B >= 1, got {} {}",
                            tokensPath, man.seqLen, dtypeName(tok->dtype),
                            shapeString(tok->shape)));
  int64_t batch = tok->shape[0];
  std::vector<int32_t> tokens(tok->i32(), tok->i32() + tok->numel());
  ForwardResult r;
  try {
    r = pkg.forward(weights, tokens, batch, mode);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", tokensPath, e.what()));
  }

  TensorMap outMap;
  outMap.metadata["modrun.mode"] =
      mode == RouteMode::Causal ? "causal" : "topk";
  Tensor logits = Tensor::zeros(DType::F32, {r.batch, r.seqLen, r.vocab});
  std::memcpy(logits.data.data(), r.logits.data(), logits.byteSize());
  outMap.insert("logits", std::move(logits));
  for (size_t i = 0; i < man.routedLayers.size(); ++i) {
    Tensor mask = Tensor::zeros(DType::I32, {r.batch, r.seqLen});
    std::memcpy(mask.data.data(), r.routed[i].data(), mask.byteSize());
    outMap.insert(fmt::format("routed.{}", man.routedLayers[i]),
                  std::move(mask));
  }
  // Each MoE layer's decisions (docs/cli.md, "modrun forward"), checked
  // against the encoding before anything is written.
  countMoeShares(man, r);
  for (size_t i = 0; i < man.moeLayers.size(); ++i) {
    Tensor d = Tensor::zeros(DType::I32, {r.batch, r.seqLen});
    std::memcpy(d.data.data(), r.moe[i].data(), d.byteSize());
    outMap.insert(fmt::format("moe.{}", man.moeLayers[i]), std::move(d));
  }
  outMap.save(out);
  return 0;
}

//===----------------------------------------------------------------------===//
// grad
//===----------------------------------------------------------------------===//

const char kGradUsage[] =
    "usage: modrun grad PKG --weights W.safetensors --tokens T.safetensors\n"
    "                       --out G.safetensors\n"
    "\n"
    "T holds one I32 tensor 'tokens' of shape [B, seq_len + 1]: inputs\n"
    "t[:, :seq_len], targets t[:, 1:]. G gets 'loss.total', 'loss.ce',\n"
    "'loss.aux' and 'loss.balance' (F32 [1]) and 'grad.<name>' for every\n"
    "parameter. W may be a checkpoint of modrun train.\n";

void declareGrad(CommandLine &line) {
  packageArgument(line)
      .option("weights", "W.safetensors",
              "required; weights or a checkpoint of modrun train")
      .option("tokens", "T.safetensors",
              "required; I32 'tokens' [B, seq_len + 1]")
      .option("out", "G.safetensors", "required; the file to write");
}

int runGrad(const CommandLine &line) {
  const std::string &weightsPath = line.require("weights");
  const std::string &tokensPath = line.require("tokens");
  const std::string &out = line.require("out");
  refuseOverwritingInput(
      "--out", out, {{"--weights", weightsPath}, {"--tokens", tokensPath}});

  Package pkg = Package::open(line.argument());
  const Manifest &man = pkg.manifest();
  requireTraining(pkg, line.argument());
  TensorMap weights = loadCheckedWeights(pkg, weightsPath);
  TensorMap tokenFile = TensorMap::load(tokensPath);
  const Tensor *tok = tokenFile.find("tokens");
  int64_t row = man.seqLen + 1;
  if (!tok)
    throw Error(fmt::format("{}: no tensor 'tokens' (expected I32 [B, "
                            "seq_len + 1] = [B, {}])",
                            tokensPath, row));
  if (tok->dtype != DType::I32 || tok->shape.size() != 2 ||
      tok->shape[1] != row || tok->shape[0] < 1)
    throw Error(fmt::format("{}: tensor 'tokens' must be I32 [B, seq_len + "
                            "1] = [B, {}] with B >= 1 (inputs t[:, :{}], "
                            "targets t[:, 1:]), got {} {}",
                            tokensPath, row, man.seqLen, dtypeName(tok->dtype),
                            shapeString(tok->shape)));
  std::vector<int32_t> tokens(tok->i32(), tok->i32() + tok->numel());
  GradResult r;
  try {
    r = pkg.grad(weights, tokens, tok->shape[0]);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", tokensPath, e.what()));
  }
  TensorMap outMap;
  auto scalar = [&](const char *name, double value) {
    Tensor t = Tensor::zeros(DType::F32, {1});
    t.f32()[0] = static_cast<float>(value);
    outMap.insert(name, std::move(t));
  };
  scalar("loss.total", r.losses.total);
  scalar("loss.ce", r.losses.ce);
  scalar("loss.aux", r.losses.aux);
  scalar("loss.balance", r.losses.balance);
  for (auto &[name, g] : r.grads)
    outMap.insert("grad." + name, std::move(g));
  outMap.save(out);
  return 0;
}

//===----------------------------------------------------------------------===//
// eval
//===----------------------------------------------------------------------===//

const char kEvalUsage[] =
    "usage: modrun eval PKG --weights W --data FILE... [--batch B]\n"
    "                   [--batches N] [--tokenizer PATH]\n"
    "\n"
    "Evaluates on the held-out part of the FILEs, split as modrun train\n"
    "splits it with the same --batch (last 10%, at least one batch): up to N\n"
    "batches of B windows of seq_len + 1 tokens. Prints the mean next-token\n"
    "cross-entropy with top-k routing (training) and with causal routing\n"
    "(sampling), and for each routed layer how often the causal router's\n"
    "decision agrees with top-k membership on the top-k pass; with MoE\n"
    "MLPs, the balance loss and each MoE layer's kept, no-op and dropped\n"
    "shares. Defaults: --batch 8, --batches 8. W may be a checkpoint of\n"
    "modrun train. Tokens are bytes unless --tokenizer or the package names\n"
    "a tokenizer.json.\n";

void declareEval(CommandLine &line) {
  packageArgument(line)
      .option("weights", "W", "required; weights or a checkpoint")
      .listOption("data", "FILE...", "required; text files, one corpus")
      .option("batch", "B", "sequences per batch, 1 to 2^20 (default 8)")
      .option("batches", "N", "held-out batches at most (default 8)");
  tokenizerOption(line);
}

int runEval(const CommandLine &line) {
  const std::string &weightsPath = line.require("weights");
  const std::vector<std::string> &dataFiles = line.requireList("data");
  int64_t batch =
      static_cast<int64_t>(line.integer("batch", 1, kMaxBatch).value_or(8));
  uint64_t maxBatches = line.integer("batches", 1).value_or(8);

  Package pkg = Package::open(line.argument());
  const Manifest &man = pkg.manifest();
  Tokenizer tokenizer =
      commandTokenizer(line, &pkg, line.argument(), "eval", true);
  TensorMap weights = loadCheckedWeights(pkg, weightsPath);
  Corpus corpus = Corpus::load(dataFiles, man.seqLen, batch, tokenizer);
  std::vector<std::vector<int32_t>> batches =
      corpus.heldOutBatches(static_cast<size_t>(maxBatches));

  const int64_t S = man.seqLen;
  const size_t nRouted = man.routedLayers.size();
  const bool dense = nRouted == 0;
  const bool hasMoe = !man.moeLayers.empty();
  double ceTopk = 0, ceCausal = 0, balance = 0;
  std::vector<MoeShares> moe(man.moeLayers.size());
  std::vector<uint64_t> agree(nRouted, 0), decided(nRouted, 0),
      topkRouted(nRouted, 0), causalRouted(nRouted, 0);
  std::vector<int32_t> inputs(static_cast<size_t>(batch * S));
  for (const std::vector<int32_t> &tokens : batches) {
    for (int64_t b = 0; b < batch; ++b)
      std::copy(tokens.begin() + b * (S + 1), tokens.begin() + b * (S + 1) + S,
                inputs.begin() + b * S);
    // The top-k loss is the training loss: the compiled loss-only entry
    // (modc_eval), mean over the batch's B * S predictions.
    Losses losses = pkg.eval(weights, tokens, batch);
    ceTopk += losses.ce * static_cast<double>(batch * S);
    balance += losses.balance;
    if (dense && !hasMoe) // no routing to report; causal mode is top-k mode
      continue;
    std::vector<std::vector<int32_t>> decisions;
    ForwardResult topk =
        pkg.forward(weights, inputs, batch, RouteMode::TopK, &decisions);
    std::vector<MoeShares> shares = countMoeShares(man, topk);
    for (size_t l = 0; l < shares.size(); ++l) {
      moe[l].layer = shares[l].layer;
      moe[l].kept += shares[l].kept;
      moe[l].noop += shares[l].noop;
      moe[l].dropped += shares[l].dropped;
      moe[l].skipped += shares[l].skipped;
    }
    if (dense)
      continue;
    for (size_t l = 0; l < nRouted; ++l)
      for (size_t i = 0; i < topk.routed[l].size(); ++i) {
        topkRouted[l] += topk.routed[l][i] != 0;
        if (!decisions.empty()) {
          decided[l] += decisions[l][i] != 0;
          agree[l] += (decisions[l][i] != 0) == (topk.routed[l][i] != 0);
        }
      }
    if (man.supportsCausal) {
      // The loss of causal routing: modc_eval_causal.
      ceCausal += pkg.eval(weights, tokens, batch, RouteMode::Causal).ce *
                  static_cast<double>(batch * S);
      ForwardResult causal =
          pkg.forward(weights, inputs, batch, RouteMode::Causal);
      for (size_t l = 0; l < nRouted; ++l)
        for (int32_t r : causal.routed[l])
          causalRouted[l] += r != 0;
    }
  }
  const double n = static_cast<double>(batches.size()) *
                   static_cast<double>(batch) * static_cast<double>(S);
  fmt::print("model:     {} (seq_len {}, {} routed layer{}, causal router "
             "{})\n",
             man.model.value("name", std::string("?")), S, nRouted,
             nRouted == 1 ? "" : "s", dense ? "-" : man.causalRouter);
  fmt::print("held out:  {} batch{} x {} x {} tokens ({:.0f} predictions) "
             "from {} held-out {}\n",
             batches.size(), batches.size() == 1 ? "" : "es", batch, S, n,
             corpus.heldOutBytes(), corpus.unit());
  fmt::print("loss topk:   {:.4f}  (perplexity {:.3f})\n", ceTopk / n,
             std::exp(ceTopk / n));
  if (man.supportsCausal)
    fmt::print("loss causal: {:.4f}  (perplexity {:.3f})\n", ceCausal / n,
               std::exp(ceCausal / n));
  else if (dense)
    fmt::print("loss causal: {:.4f}  (dense model: same as topk)\n",
               ceTopk / n);
  else
    fmt::print("loss causal: n/a (causal_router none: no causal mode)\n");
  if (hasMoe) {
    // loss.balance of modc_eval (docs/model-format.md section 7), and how
    // the top-k pass's MoE layers decided the tokens that reached them.
    fmt::print("loss balance: {:.4f}  (mean over MoE layers of L_bal)\n",
               balance / static_cast<double>(batches.size()));
    fmt::print("\n");
    for (const MoeShares &m : moe)
      fmt::print("moe layer {}: kept {:.1f} %, no-op {:.1f} %, dropped {:.1f} "
                 "% of {} tokens{}\n",
                 m.layer, m.percent(m.kept), m.percent(m.noop),
                 m.percent(m.dropped), m.reached(),
                 m.skipped ? fmt::format(" ({} skipped the block, not "
                                         "counted)",
                                         m.skipped)
                           : "");
  }
  if (!dense) {
    fmt::print("\n{:>5}  {:>8}  {:>12}  {:>12}  {:>9}  {:>13}\n", "layer",
               "capacity", "topk routed", "causal says", "agreement",
               "causal routed");
    for (size_t l = 0; l < nRouted; ++l) {
      const LayerInfo &info = man.layers[man.routedLayers[l]];
      auto frac = [&](uint64_t c) { return static_cast<double>(c) / n; };
      std::string says = "n/a", agreement = "n/a", causal = "n/a";
      if (man.supportsCausal) {
        says = fmt::format("{:.4f}", frac(decided[l]));
        agreement = fmt::format("{:.4f}", frac(agree[l]));
        causal = fmt::format("{:.4f}", frac(causalRouted[l]));
      }
      fmt::print("{:>5}  {:>8.4f}  {:>12.4f}  {:>12}  {:>9}  {:>13}\n",
                 info.index,
                 static_cast<double>(info.capacity) / static_cast<double>(S),
                 frac(topkRouted[l]), says, agreement, causal);
    }
    fmt::print("\ntopk routed: fraction of tokens in the top-k; causal says: "
               "fraction the causal\nrouter would route, on the topk pass; "
               "agreement: fraction where the two agree;\ncausal routed: "
               "fraction routed in causal mode (its own residual stream).\n");
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// info
//===----------------------------------------------------------------------===//

const char kInfoUsage[] = "usage: modrun info PKG\n"
                          "\n"
                          "Prints the package's layers, parameters and "
                          "workspace size.\n";

void declareInfo(CommandLine &line) { packageArgument(line); }

int runInfo(const CommandLine &line) {
  Package pkg = Package::open(line.argument());
  const Manifest &m = pkg.manifest();
  std::string name = m.model.value("name", std::string("(unnamed)"));
  fmt::print("package:   {}\n", pkg.directory());
  fmt::print("model:     {}\n", name);
  fmt::print("target:    {}{} (abi {}, compiled by modc {})\n", m.target,
             m.arch.empty() ? "" : " " + m.arch, m.abiVersion,
             m.compilerVersion);
  if (m.target == "cpu") {
    std::string features = fmt::format("{}", fmt::join(m.cpuFeatures, " "));
    fmt::print("cpu:       --march={} ({})\n", m.cpuMarch,
               features.empty() ? "baseline ISA" : features);
  }
  // Heads, where the manifest names them: n_kv_heads < n_heads is
  // grouped-query attention, whose KV cache holds n_kv_heads heads a layer.
  std::string heads;
  const auto nHeads = m.model.find("n_heads");
  if (nHeads != m.model.end() && nHeads->is_number_integer()) {
    const auto nKv = m.model.find("n_kv_heads");
    heads = fmt::format(", n_heads {}, n_kv_heads {}", nHeads->get<int64_t>(),
                        nKv != m.model.end() && nKv->is_number_integer()
                            ? nKv->get<int64_t>()
                            : nHeads->get<int64_t>());
  }
  fmt::print("shape:     seq_len {}, vocab {}, d_model {}, dtype {}{}\n",
             m.seqLen, m.vocabSize, m.dModel, m.dtype, heads);
  fmt::print("layers:    {} ({} routed{})\n", m.layers.size(),
             m.routedLayers.size(),
             m.moeLayers.empty()
                 ? ""
                 : fmt::format(", {} with MoE MLPs", m.moeLayers.size()));
  for (const LayerInfo &l : m.layers) {
    bool moe = std::find(m.moeLayers.begin(), m.moeLayers.end(), l.index) !=
               m.moeLayers.end();
    fmt::print("  layer {:>3}  {:<6}  capacity {}/{}{}\n", l.index,
               l.routed ? "routed" : "dense", l.capacity, m.seqLen,
               moe ? "  moe" : "");
  }
  if (!m.moeLayers.empty()) {
    // The manifest's model.moe (docs/model-format.md section 7); the
    // runtime checked n_experts, noop_experts and layers, the rest is
    // printed as the compiler wrote it.
    const nlohmann::json &moe = m.model["moe"];
    auto key = [&](const char *k) {
      auto it = moe.find(k);
      return it == moe.end() ? std::string("?") : it->dump();
    };
    fmt::print("moe:       {} real + {} no-op experts (E + N), d_expert {}, "
               "capacity_factor {}, balance_loss_weight {}, layers {}\n",
               m.moeExperts, m.moeNoopExperts, key("d_expert"),
               key("capacity_factor"), key("balance_loss_weight"),
               fmt::join(m.moeLayers, " "));
  }
  uint64_t elems = 0;
  for (const ParamInfo &p : m.params) {
    uint64_t n = 1;
    for (int64_t d : p.shape)
      n *= static_cast<uint64_t>(d);
    elems += n;
  }
  fmt::print("params:    {} tensors, {} values, {} bytes (F32)\n",
             m.params.size(), elems, elems * 4);
  fmt::print("workspace: {} bytes per sequence\n", m.workspaceBytesPerSequence);
  fmt::print("modes:     topk{}\n", m.supportsCausal ? ", causal" : "");
  if (m.supportsTraining)
    fmt::print("training:  grad + adamw, {} bytes of workspace per sequence\n",
               m.gradWorkspaceBytesPerSequence);
  if (m.supportsEval)
    fmt::print("eval:      losses only, {} bytes of workspace per sequence{}\n",
               m.evalWorkspaceBytesPerSequence,
               m.supportsEvalCausal
                   ? fmt::format(" ({} in causal mode)",
                                 m.evalCausalWorkspaceBytesPerSequence)
                   : "");
  else
    fmt::print("training:  no (inference-only package)\n");
  if (m.supportsDecode)
    fmt::print("decode:    yes, {} bytes of KV cache and {} bytes of "
               "workspace per sequence\n",
               m.kvCacheBytesPerSequence, m.decodeWorkspaceBytesPerSequence);
  else if (!m.routedLayers.empty() && m.causalRouter == "none")
    fmt::print("decode:    no (routed layers with causal_router none)\n");
  else
    fmt::print("decode:    no (compiled without a decode entry)\n");
  return 0;
}

} // namespace

const Command kInitCommand = {"init",
                              "write freshly initialised weights for a package",
                              kInitUsage, declareInit, runInit};
const Command kForwardCommand = {"forward",
                                 "run the forward pass on a batch of tokens",
                                 kForwardUsage, declareForward, runForward};
const Command kGradCommand = {"grad",
                              "losses and gradients of one batch of tokens",
                              kGradUsage, declareGrad, runGrad};
const Command kEvalCommand = {
    "eval", "held-out loss in topk and causal mode, router agreement",
    kEvalUsage, declareEval, runEval};
const Command kInfoCommand = {"info", "print a summary of a package",
                              kInfoUsage, declareInfo, runInfo};

} // namespace modrun
