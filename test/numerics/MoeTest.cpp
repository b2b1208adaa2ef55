//===- MoeTest.cpp - Compiled MoE MLPs against the fp64 reference ---------===//
//
// Mixture-of-Experts MLPs and MoDE (docs/model-format.md section 7), compiled
// with the real `modc` and checked against the independent fp64 reference
// on fresh random weights and tokens:
// - the forward pass: logits, and every MoE decision (the chosen expert,
//   kept, no-op or over capacity), in top-k and causal mode;
// - the training losses, the balance loss `loss.balance` included, and
//   every gradient against central finite differences with the decisions
//   held (section 7's constants);
// - the identity of section 7: E = 1, N = 0 and capacity_factor >= 1 give
//   the dense model's logits.
// The configurations drop tokens over capacity, have no-op experts and
// none, and tie router logits on purpose. Instances whose top-1 router
// margin is within float rounding are redrawn (exact ties are kept: they
// are well defined, to the lower index).
//
//===----------------------------------------------------------------------===//

#include "CompiledPackages.h"
#include "ReferenceModel.h"
#include "TestModels.h"

#include "modrt/Error.h"
#include "modrt/Generate.h"
#include "modrt/Package.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

using modref::RouteMode;
using modtest::denseModel;
using modtest::package;
using modtest::toTensorMap;
using modtest::withMod;
using nlohmann::json;

namespace {

constexpr double kLogitsTolerance = 1e-5;
constexpr double kLossTolerance = 1e-5;
constexpr double kGradTolerance = 1e-3;

json moeObject(int64_t experts, int64_t noop, int64_t dExpert, double factor,
               json schedule = "all", double balanceWeight = 0.05) {
  return {{"n_experts", experts},
          {"noop_experts", noop},
          {"d_expert", dExpert},
          {"capacity_factor", factor},
          {"balance_loss_weight", balanceWeight},
          {"schedule", std::move(schedule)}};
}

json withMoe(json base, json moe) {
  base["moe"] = std::move(moe);
  return base;
}

/// Integrated MoDE: 2 real and 2 no-op experts at a capacity factor that
/// drops tokens (C = 4 of 16 tokens for each expert).
json integrated() {
  return withMoe(denseModel("moe_integrated_e2n2_swiglu", 16, 2, 2, 16,
                            "swiglu", true, 32, 32),
                 moeObject(2, 2, 24, 1.0));
}
/// MoE without no-op experts on layer 1 only, GELU, untied, C = 2 of 12.
json plainMoe() {
  return withMoe(
      denseModel("moe_e3n0_gelu_layer1", 16, 2, 2, 12, "gelu", false, 32, 32),
      moeObject(3, 0, 20, 0.5, json::array({1})));
}
/// Staged MoDE: every layer routed at 50 % with the aux-loss router, and
/// an MoE MLP of 2 real and 1 no-op expert on the k = 8 routed tokens
/// (C = 3).
json staged() {
  json mod = {{"capacity", 0.5},
              {"schedule", "all"},
              {"gate", "sigmoid"},
              {"causal_router", "aux_loss"},
              {"aux_loss_weight", 0.01}};
  return withMoe(withMod(denseModel("mode_staged_e2n1_swiglu", 16, 2, 2, 16,
                                    "swiglu", true, 32, 32),
                         mod),
                 moeObject(2, 1, 24, 1.0));
}

struct Case {
  std::string name;
  json desc;
  uint64_t seed;
};
void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

std::vector<Case> cases() {
  return {{"integrated", integrated(), 11},
          {"plain", plainMoe(), 23},
          {"staged", staged(), 37}};
}

/// The smallest gap between the top two router logits of a token that
/// reaches an MoE MLP (log p1 - log p2), over the MoE layers; exact ties
/// do not count.
double moeMargin(const modref::ReferenceOutput &out, int64_t width) {
  double margin = std::numeric_limits<double>::infinity();
  for (size_t l = 0; l < out.moeProbs.size(); ++l)
    for (size_t t = 0; t < out.moeExpert[l].size(); ++t) {
      if (out.moeExpert[l][t] < 0)
        continue;
      std::vector<double> p(out.moeProbs[l].begin() + t * width,
                            out.moeProbs[l].begin() + (t + 1) * width);
      std::sort(p.begin(), p.end(), std::greater<double>());
      double gap = std::log(p[0]) - std::log(p[1]);
      if (gap != 0.0)
        margin = std::min(margin, gap);
    }
  return margin;
}

/// The package's code of a reference decision (modc_forward_args::
/// moe_decisions).
int32_t expectedDecision(int32_t expert, int32_t kept, int64_t experts,
                         int64_t width) {
  if (expert < 0)
    return -1;
  bool dropped = expert < experts && !kept;
  return dropped ? expert + static_cast<int32_t>(width) : expert;
}

double maxAbs(const std::vector<double> &v) {
  double m = 0.0;
  for (double x : v)
    m = std::max(m, std::abs(x));
  return m;
}

/// Forward weights and tokens whose MoE and top-k decisions are not
/// within float rounding of flipping in `mode`.
struct ForwardInstance {
  modref::Weights weights;
  std::vector<int32_t> tokens;
  modref::ReferenceOutput ref;
  bool ok = false;
};

ForwardInstance forwardInstance(const modref::ModelConfig &config,
                                int64_t batch, uint64_t seed, RouteMode mode) {
  ForwardInstance inst;
  int64_t width = config.nExperts + config.noopExperts;
  for (int attempt = 0; attempt < 20; ++attempt) {
    uint64_t s = seed + 7919ull * attempt;
    inst.weights = modtest::randomWeights(config, s);
    inst.tokens =
        modtest::randomTokens(batch, config.seqLen, config.vocabSize, s + 1);
    inst.ref = modref::forward(config, inst.weights, inst.tokens, batch, mode);
    if (moeMargin(inst.ref, width) <= 1e-4 ||
        modtest::routingMargin(config, inst.ref, batch, mode) <= 1e-4)
      continue;
    inst.ok = true;
    return inst;
  }
  return inst;
}

/// The forward pass of case `c` in `mode` on three sequences against the
/// reference: logits, and every MoE decision.
void expectForwardMatches(const Case &c, RouteMode mode) {
  const int64_t batch = 3;
  modref::ModelConfig config = modref::ModelConfig::fromJson(c.desc);
  const modrt::Package *found = package(c.desc);
  ASSERT_NE(found, nullptr);
  const modrt::Package &pkg = *found;
  ForwardInstance inst = forwardInstance(config, batch, c.seed, mode);
  ASSERT_TRUE(inst.ok) << "no instance with well-separated decisions";
  modrt::ForwardResult got;
  try {
    got = pkg.forward(toTensorMap(inst.weights, config, pkg.manifest()),
                      inst.tokens, batch,
                      mode == RouteMode::TopK ? modrt::RouteMode::TopK
                                              : modrt::RouteMode::Causal);
  } catch (const modrt::Error &e) {
    FAIL() << c.name << ": forward failed: " << e.what();
  }
  double worst = 0.0, scale = maxAbs(inst.ref.logits);
  ASSERT_EQ(got.logits.size(), inst.ref.logits.size());
  for (size_t i = 0; i < got.logits.size(); ++i)
    worst = std::max(worst, std::abs(got.logits[i] - inst.ref.logits[i]));
  EXPECT_LE(worst, kLogitsTolerance * scale)
      << c.name << ": logits differ by " << worst << " (max |logit| " << scale
      << ")";
  int64_t width = config.nExperts + config.noopExperts;
  ASSERT_EQ(got.moe.size(), inst.ref.moeExpert.size()) << "MoE layers";
  int64_t kept = 0, noop = 0, dropped = 0;
  for (size_t l = 0; l < got.moe.size(); ++l)
    for (size_t t = 0; t < got.moe[l].size(); ++t) {
      int32_t want =
          expectedDecision(inst.ref.moeExpert[l][t], inst.ref.moeKept[l][t],
                           config.nExperts, width);
      ASSERT_EQ(got.moe[l][t], want)
          << c.name << ": MoE layer #" << l << ", token " << t;
      kept += want >= 0 && want < config.nExperts;
      noop += want >= config.nExperts && want < width;
      dropped += want >= width;
    }
  // Every configuration keeps tokens, drops some over capacity and, with
  // no-op experts, sends some to them: each path is exercised.
  EXPECT_GT(kept, 0);
  EXPECT_GT(dropped, 0) << "no token over capacity";
  EXPECT_EQ(noop > 0, config.noopExperts > 0);
  ::testing::Test::RecordProperty(
      "kept_noop_dropped", std::to_string(kept) + "/" + std::to_string(noop) +
                               "/" + std::to_string(dropped));
}

class MoeForward : public ::testing::TestWithParam<Case> {};

TEST_P(MoeForward, LogitsAndDecisionsTopK) {
  expectForwardMatches(GetParam(), RouteMode::TopK);
}

TEST_P(MoeForward, LogitsAndDecisionsCausal) {
  if (modref::ModelConfig::fromJson(GetParam().desc).causalRouter ==
      modref::CausalRouter::None)
    GTEST_SKIP() << "no causal mode without a causal router";
  expectForwardMatches(GetParam(), RouteMode::Causal);
}

TEST_P(MoeForward, LossesAndGradients) {
  const Case &c = GetParam();
  const int64_t batch = 2;
  modref::ModelConfig config = modref::ModelConfig::fromJson(c.desc);
  const modrt::Package *pkg = package(c.desc);
  ASSERT_NE(pkg, nullptr);
  int64_t width = config.nExperts + config.noopExperts;
  modref::Weights weights;
  std::vector<int32_t> tokens;
  modref::FdGradient ref;
  bool ok = false;
  for (int attempt = 0; attempt < 20 && !ok; ++attempt) {
    uint64_t s = c.seed + 104729ull * attempt;
    weights = modtest::randomWeights(config, s);
    tokens = modtest::randomTrainingTokens(batch, config.seqLen,
                                           config.vocabSize, s + 1);
    std::vector<int32_t> inputs;
    for (int64_t b = 0; b < batch; ++b)
      inputs.insert(inputs.end(), tokens.begin() + b * (config.seqLen + 1),
                    tokens.begin() + b * (config.seqLen + 1) + config.seqLen);
    modref::ReferenceOutput fwd =
        modref::forward(config, weights, inputs, batch, RouteMode::TopK);
    if (moeMargin(fwd, width) <= 1e-4 ||
        modtest::routingMargin(config, fwd, batch, RouteMode::TopK) <= 1e-4)
      continue;
    modref::FdOptions opt;
    opt.coordsPerTensor = 24;
    opt.seed = s;
    ref = modref::referenceGradient(config, weights, tokens, batch, opt);
    ok = ref.selectionChanges == 0;
  }
  ASSERT_TRUE(ok) << "no instance whose decisions hold under the FD step";
  modrt::TensorMap w = toTensorMap(weights, config, pkg->manifest());
  modrt::GradResult got;
  try {
    got = pkg->grad(w, tokens, batch);
  } catch (const modrt::Error &e) {
    FAIL() << "grad failed: " << e.what();
  }
  auto close = [](double ours, double theirs) {
    return std::isfinite(ours) &&
           std::abs(ours - theirs) <= kLossTolerance * std::abs(theirs) + 1e-9;
  };
  EXPECT_PRED2(close, got.losses.ce, ref.base.ce) << "cross-entropy";
  EXPECT_PRED2(close, got.losses.aux, ref.base.aux) << "L_aux";
  EXPECT_PRED2(close, got.losses.balance, ref.base.balance) << "loss.balance";
  EXPECT_PRED2(close, got.losses.total, ref.base.total) << "total";
  EXPECT_GT(ref.base.balance, 0.0) << "the balance loss is positive";

  // Eval: the same losses, bit for bit (the same kernels in @eval).
  modrt::Losses eval = pkg->eval(w, tokens, batch);
  EXPECT_EQ(eval.total, got.losses.total);
  EXPECT_EQ(eval.balance, got.losses.balance);

  for (const auto &[name, shape] : modref::parameterShapes(config)) {
    const modrt::Tensor *t = got.grads.find(name);
    if (!t) {
      ADD_FAILURE() << "no gradient for '" << name << "'";
      continue;
    }
    modtest::TensorGradError e = modtest::compareGradient(
        t->f32(), ref.grad.at(name), ref.coords.at(name));
    EXPECT_LE(e.relative, kGradTolerance)
        << name << ": max|ours - ref| / max|ref| = " << e.relative
        << " (max|ref| = " << e.maxRef << "), worst at flat index "
        << e.worstIndex << ": ours " << e.worstOurs << ", reference "
        << e.worstRef;
  }
}

/// Token-by-token decoding with each sequence's running expert counts
/// equals the reference's decode and the package's own causal forward; the
/// prefill (one causal pass over a prompt) leaves the same counts as
/// stepping through it.
TEST_P(MoeForward, DecodeEqualsCausalForward) {
  const Case &c = GetParam();
  modref::ModelConfig config = modref::ModelConfig::fromJson(c.desc);
  const modrt::Package *pkg = package(c.desc);
  ASSERT_NE(pkg, nullptr);
  if (!pkg->manifest().supportsDecode)
    GTEST_SKIP() << "top-k routing without a causal router cannot decode";
  const int64_t batch = 2, S = config.seqLen, V = config.vocabSize;
  RouteMode mode =
      config.hasMod ? RouteMode::Causal : RouteMode::TopK; // dense: one mode
  ForwardInstance inst = forwardInstance(config, batch, c.seed + 3, mode);
  ASSERT_TRUE(inst.ok) << "no instance with well-separated decisions";
  modref::ReferenceOutput ref =
      modref::decode(config, inst.weights, inst.tokens, batch);
  modrt::TensorMap w = toTensorMap(inst.weights, config, pkg->manifest());
  modrt::ForwardResult causal =
      pkg->forward(w, inst.tokens, batch,
                   mode == RouteMode::TopK ? modrt::RouteMode::TopK
                                           : modrt::RouteMode::Causal);
  modrt::DecodeSession session(*pkg, w, batch);
  double worstRef = 0.0, worstForward = 0.0, scale = maxAbs(ref.logits);
  std::vector<uint8_t> active(batch, 1);
  for (int64_t i = 0; i < S; ++i) {
    std::vector<int32_t> step(batch);
    for (int64_t b = 0; b < batch; ++b)
      step[b] = inst.tokens[b * S + i];
    modrt::StepResult got = session.step(step, active);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t v = 0; v < V; ++v) {
        double ours = got.logits[b * V + v];
        worstRef = std::max(worstRef,
                            std::abs(ours - ref.logits[(b * S + i) * V + v]));
        worstForward = std::max(
            worstForward, std::abs(ours - causal.logits[(b * S + i) * V + v]));
      }
  }
  EXPECT_LE(worstRef, kLogitsTolerance * scale)
      << "decode against the reference's decode";
  EXPECT_LE(worstForward, kLogitsTolerance * scale)
      << "decode against the causal forward";
  // The counts the steps kept: each expert's kept tokens of each sequence,
  // as the reference decided them.
  int64_t width = config.nExperts + config.noopExperts;
  std::vector<int32_t> want(pkg->manifest().moeLayers.size() * batch *
                            config.nExperts);
  for (size_t l = 0; l < ref.moeExpert.size(); ++l)
    for (int64_t t = 0; t < batch * S; ++t)
      if (ref.moeKept[l][t])
        ++want[(l * batch + t / S) * config.nExperts + ref.moeExpert[l][t]];
  EXPECT_EQ(session.moeCounts(), want) << "running expert counts";
  (void)width;

  // The prefill: a causal pass over prompts of 5 and 9 tokens leaves the
  // counts that stepping through them leaves.
  if (!pkg->manifest().supportsPrefill)
    return;
  std::vector<std::vector<int32_t>> prompts = {
      {inst.tokens.begin(), inst.tokens.begin() + 5},
      {inst.tokens.begin() + S, inst.tokens.begin() + S + 9}};
  modrt::DecodeSession prefilled(*pkg, w, batch), stepped(*pkg, w, batch);
  prefilled.prefill(prompts);
  for (size_t t = 0; t < 9; ++t) {
    std::vector<int32_t> step(batch, 0);
    std::vector<uint8_t> on(batch, 0);
    for (int64_t b = 0; b < batch; ++b)
      if (t < prompts[b].size()) {
        step[b] = prompts[b][t];
        on[b] = 1;
      }
    stepped.step(step, on);
  }
  EXPECT_EQ(prefilled.moeCounts(), stepped.moeCounts())
      << "the prefill's counts";
}

INSTANTIATE_TEST_SUITE_P(Matrix, MoeForward, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

/// Every router row the same: every token ties across all experts and
/// chooses expert 0 (the lower index) with p = 1 / (E + N); expert 0 keeps
/// the first C tokens of each sequence and drops the rest.
TEST(MoeTies, TiedRouterLogitsGoToTheLowerIndex) {
  json desc = integrated();
  modref::ModelConfig config = modref::ModelConfig::fromJson(desc);
  const modrt::Package *pkg = package(desc);
  ASSERT_NE(pkg, nullptr);
  modref::Weights weights = modtest::randomWeights(config, 5);
  int64_t d = config.dModel, width = config.nExperts + config.noopExperts;
  for (int64_t l = 0; l < config.nLayers; ++l) {
    std::vector<double> &router =
        weights.at("blocks." + std::to_string(l) + ".moe.router.weight");
    for (int64_t e = 1; e < width; ++e)
      std::copy(router.begin(), router.begin() + d, router.begin() + e * d);
  }
  const int64_t batch = 2;
  std::vector<int32_t> tokens =
      modtest::randomTokens(batch, config.seqLen, config.vocabSize, 6);
  modref::ReferenceOutput ref =
      modref::forward(config, weights, tokens, batch, RouteMode::TopK);
  modrt::ForwardResult got =
      pkg->forward(toTensorMap(weights, config, pkg->manifest()), tokens, batch,
                   modrt::RouteMode::TopK);
  int64_t capacity = config.expertCapacity(config.seqLen);
  for (size_t l = 0; l < got.moe.size(); ++l)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < config.seqLen; ++i) {
        int32_t want = i < capacity ? 0 : static_cast<int32_t>(width);
        ASSERT_EQ(got.moe[l][b * config.seqLen + i], want)
            << "layer #" << l << ", sequence " << b << ", token " << i;
        ASSERT_EQ(ref.moeExpert[l][b * config.seqLen + i], 0);
      }
  double worst = 0.0;
  for (size_t i = 0; i < got.logits.size(); ++i)
    worst = std::max(worst, std::abs(got.logits[i] - ref.logits[i]));
  EXPECT_LE(worst, kLogitsTolerance * maxAbs(ref.logits));
}

/// docs/model-format.md section 7: E = 1, N = 0 and capacity_factor >= 1
/// keep every token with p = 1, exactly the dense model with the expert's
/// weights as its MLP.
TEST(MoeIdentity, OneExpertIsTheDenseModel) {
  // The dense model of NumericsTest's matrix: its package is compiled once
  // for both tests (the package cache is keyed on the description).
  json dense = denseModel("dense_swiglu_tied", 32, 2, 2, 16, "swiglu", true);
  json moe = withMoe(dense, moeObject(1, 0, 64, 1.0));
  moe["name"] = "moe_identity_e1";
  modref::ModelConfig denseConfig = modref::ModelConfig::fromJson(dense);
  modref::ModelConfig moeConfig = modref::ModelConfig::fromJson(moe);
  const modrt::Package *densePkg = package(dense);
  const modrt::Package *moePkg = package(moe);
  ASSERT_NE(densePkg, nullptr);
  ASSERT_NE(moePkg, nullptr);
  modref::Weights denseWeights = modtest::randomWeights(denseConfig, 77);
  modref::Weights moeWeights = modtest::randomWeights(moeConfig, 78);
  for (auto &[name, values] : moeWeights) {
    std::string mapped = name;
    size_t at = mapped.find(".moe.experts.0.");
    if (at != std::string::npos)
      mapped.replace(at, std::string(".moe.experts.0.").size(), ".mlp.");
    if (denseWeights.count(mapped))
      values = denseWeights.at(mapped);
  }
  const int64_t batch = 2;
  std::vector<int32_t> tokens = modtest::randomTokens(batch, 16, 256, 79);
  modrt::ForwardResult d = densePkg->forward(
      toTensorMap(denseWeights, denseConfig, densePkg->manifest()), tokens,
      batch, modrt::RouteMode::TopK);
  modrt::ForwardResult m =
      moePkg->forward(toTensorMap(moeWeights, moeConfig, moePkg->manifest()),
                      tokens, batch, modrt::RouteMode::TopK);
  ASSERT_EQ(d.logits.size(), m.logits.size());
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < d.logits.size(); ++i) {
    worst = std::max(worst, double(std::abs(d.logits[i] - m.logits[i])));
    scale = std::max(scale, double(std::abs(d.logits[i])));
  }
  EXPECT_LE(worst, 1e-6 * scale) << "the one-expert MoE differs from dense";
  for (const std::vector<int32_t> &layer : m.moe)
    for (int32_t v : layer)
      ASSERT_EQ(v, 0) << "every token kept by expert 0";
}

} // namespace

namespace {

/// A bf16 model (docs/model-format.md): the experts' products round their
/// operands to bf16, the router stays f32. One layer, so that rounding
/// flips cannot cascade: logits within the bf16 tolerance of the bf16
/// reference, and the same decisions where the top-1 margin exceeds what an
/// f32 and an fp64 sum can disagree on.
TEST(MoeBf16, OneLayerMatchesTheBf16Reference) {
  json desc = withMoe(
      denseModel("moe_bf16_one_layer", 32, 2, 1, 16, "swiglu", true, 32, 32),
      moeObject(2, 2, 24, 1.0));
  desc["dtype"] = "bf16";
  modref::ModelConfig config = modref::ModelConfig::fromJson(desc);
  const modrt::Package *pkg = package(desc);
  ASSERT_NE(pkg, nullptr);
  const int64_t batch = 2, width = config.nExperts + config.noopExperts;
  modref::Weights weights;
  std::vector<int32_t> tokens;
  modref::ReferenceOutput ref;
  bool ok = false;
  for (int attempt = 0; attempt < 20 && !ok; ++attempt) {
    weights = modtest::randomWeights(config, 501 + attempt);
    tokens = modtest::randomTokens(batch, config.seqLen, config.vocabSize,
                                   601 + attempt);
    ref = modref::forward(config, weights, tokens, batch, RouteMode::TopK);
    ok = moeMargin(ref, width) > 1e-2;
  }
  ASSERT_TRUE(ok) << "no instance with well-separated decisions";
  modrt::ForwardResult got =
      pkg->forward(toTensorMap(weights, config, pkg->manifest()), tokens, batch,
                   modrt::RouteMode::TopK);
  double worst = 0.0;
  for (size_t i = 0; i < got.logits.size(); ++i)
    worst = std::max(worst, std::abs(got.logits[i] - ref.logits[i]));
  EXPECT_LE(worst, 1e-2 * maxAbs(ref.logits)) << "logits";
  for (size_t t = 0; t < got.moe[0].size(); ++t)
    ASSERT_EQ(got.moe[0][t],
              expectedDecision(ref.moeExpert[0][t], ref.moeKept[0][t],
                               config.nExperts, width))
        << "token " << t;
}

} // namespace
