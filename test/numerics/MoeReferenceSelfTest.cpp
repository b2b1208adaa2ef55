//===- MoeReferenceSelfTest.cpp - Checks of the fp64 reference's MoE ------===//
//
// The Mixture-of-Experts MLPs of docs/model-format.md section 7 in the fp64
// reference, checked on their own before they judge any compiled package:
// the identity with the dense model (E = 1, N = 0, capacity_factor >= 1),
// the router's argmax with ties to the lower index, the per-sequence expert
// capacity walked in position order, no-op and over-capacity tokens left
// untouched, integrated and staged (inside a routed layer) MoE, the balance
// loss, token-by-token decoding against the causal forward, and the
// finite-difference gradients against closed forms and against themselves.
//
//===----------------------------------------------------------------------===//

#include "ReferenceModel.h"
#include "TestModels.h"

#include <gtest/gtest.h>

#include <cmath>

using modref::FdGradient;
using modref::FdOptions;
using modref::LossBreakdown;
using modref::ModelConfig;
using modref::ReferenceOutput;
using modref::RouteMode;
using modtest::tinyModel;
using modtest::withMod;
using nlohmann::json;

namespace {

json moeObject(int64_t E, int64_t N, int64_t F, double factor,
               json schedule = "all", double balance = 0.01) {
  return {{"n_experts", E},
          {"noop_experts", N},
          {"d_expert", F},
          {"capacity_factor", factor},
          {"balance_loss_weight", balance},
          {"schedule", std::move(schedule)}};
}

json withMoe(json base, json moe) {
  base["moe"] = std::move(moe);
  return base;
}

json modObject(double capacity, json schedule, const std::string &gate,
               const std::string &router) {
  json m = {{"capacity", capacity},
            {"schedule", std::move(schedule)},
            {"gate", gate},
            {"causal_router", router},
            {"aux_loss_weight", 0.01}};
  if (router == "predictor")
    m["predictor_hidden"] = 8;
  return m;
}

/// The weights of `dense` taken from an MoE model's, expert 0 standing in for
/// every layer's MLP, its w_down scaled by `downScale`.
modref::Weights denseFromExpert0(const ModelConfig &dense,
                                 const modref::Weights &moe,
                                 double downScale = 1.0) {
  modref::Weights w;
  for (const auto &[name, shape] : modref::parameterShapes(dense)) {
    size_t at = name.find(".mlp.");
    if (at == std::string::npos) {
      w[name] = moe.at(name);
      continue;
    }
    std::string from =
        name.substr(0, at) + ".moe.experts.0." + name.substr(at + 5);
    w[name] = moe.at(from);
    if (name.find("w_down") != std::string::npos)
      for (double &e : w[name])
        e *= downScale;
  }
  return w;
}

/// The decisions section 7 prescribes, recomputed from the probabilities the
/// reference reports: argmax with ties to the lower index, then kept iff a
/// real expert with fewer than C earlier kept tokens of the sequence.
void expectDecisionsFollowTheRule(const ModelConfig &c,
                                  const ReferenceOutput &out, int64_t batch,
                                  int64_t *dropped, int64_t *noop) {
  const int64_t S = c.seqLen, E = c.nExperts, K = E + c.noopExperts;
  size_t mi = 0;
  for (int64_t l = 0; l < c.nLayers; ++l) {
    if (!c.moe[l])
      continue;
    SCOPED_TRACE("layer " + std::to_string(l));
    const int64_t C = c.expertCapacityOfLayer(l);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int64_t> count(E, 0);
      for (int64_t i = 0; i < S; ++i) {
        const int64_t t = b * S + i;
        const int32_t e = out.moeExpert[mi][t];
        if (e < 0) {
          EXPECT_EQ(out.moeKept[mi][t], 0);
          continue;
        }
        const double *p = &out.moeProbs[mi][t * K];
        int32_t best = 0;
        double sum = 0.0;
        for (int64_t j = 0; j < K; ++j) {
          sum += p[j];
          if (p[j] > p[best])
            best = static_cast<int32_t>(j);
        }
        EXPECT_NEAR(sum, 1.0, 1e-14);
        EXPECT_EQ(e, best) << "token " << t;
        bool keep = e < E && count[e] < C;
        EXPECT_EQ(out.moeKept[mi][t], keep ? 1 : 0) << "token " << t;
        if (keep)
          ++count[e];
        else if (e < E)
          ++*dropped;
        else
          ++*noop;
      }
    }
    ++mi;
  }
  EXPECT_EQ(mi, out.moeExpert.size());
}

TEST(MoeReferenceConfig, KeysCapacityAndParameters) {
  json base = tinyModel("m", 3, 12, "swiglu", true);
  ModelConfig c = ModelConfig::fromJson(
      withMoe(base, moeObject(2, 3, 24, 1.25, json::array({0, 2}), 0.5)));
  EXPECT_TRUE(c.hasMoe);
  EXPECT_EQ(c.moe, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(c.balanceLossWeight, 0.5);
  EXPECT_EQ(c.expertCapacity(12), 3); // ceil(1.25 * 12 / 5)
  EXPECT_EQ(c.expertCapacity(1), 1);
  EXPECT_EQ(c.expertCapacityOfLayer(1), 0);
  auto shapes = modref::parameterShapes(c);
  std::map<std::string, std::vector<int64_t>> byName(shapes.begin(),
                                                     shapes.end());
  EXPECT_EQ(byName.at("blocks.0.moe.router.weight"),
            (std::vector<int64_t>{5, 16}));
  EXPECT_EQ(byName.at("blocks.2.moe.experts.1.w_gate.weight"),
            (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(byName.at("blocks.2.moe.experts.1.w_down.weight"),
            (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(byName.count("blocks.0.mlp.w_up.weight"), 0u);
  EXPECT_EQ(byName.count("blocks.1.mlp.w_up.weight"), 1u);
  EXPECT_EQ(byName.count("blocks.0.moe.experts.2.w_up.weight"), 0u);

  // Defaults: N = 0, schedule all; and k of a routed layer sets C.
  ModelConfig d = ModelConfig::fromJson(withMod(
      withMoe(base,
              {{"n_experts", 4}, {"d_expert", 8}, {"capacity_factor", 2.0}}),
      modObject(0.5, "every_other", "linear", "aux_loss")));
  EXPECT_EQ(d.noopExperts, 0);
  EXPECT_EQ(d.moe, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(d.expertCapacityOfLayer(0), 6); // ceil(2 * 12 / 4)
  EXPECT_EQ(d.expertCapacityOfLayer(1), 3); // k = 6: ceil(2 * 6 / 4)

  for (const json &bad :
       {json{{"n_experts", 0}, {"d_expert", 8}},
        json{{"n_experts", 2}, {"d_expert", 8}, {"noop_experts", -1}},
        json{{"n_experts", 2}, {"d_expert", 0}},
        json{{"n_experts", 2}, {"d_expert", 8}, {"capacity_factor", 0.0}},
        json{{"n_experts", 2}, {"d_expert", 8}, {"balance_loss_weight", -1}},
        json{{"n_experts", 2}, {"d_expert", 8}, {"schedule", json::array({3})}},
        json{{"n_experts", 2}, {"d_expert", 8}, {"experts", 2}}}) {
    SCOPED_TRACE(bad.dump());
    EXPECT_THROW(ModelConfig::fromJson(withMoe(base, bad)),
                 modref::ReferenceError);
  }
}

/// Section 7's identity: E = 1, N = 0 and capacity_factor >= 1 keep every
/// token with p = 1 (wherever no token is over capacity: always in top-k
/// mode), so the logits are exactly the dense model's, integrated and staged.
TEST(MoeReferenceForward, OneExpertIsExactlyTheDenseModel) {
  const int64_t batch = 2, S = 10;
  for (const char *mlp : {"swiglu", "gelu"})
    for (double factor : {1.0, 2.5})
      for (bool staged : {false, true}) {
        SCOPED_TRACE(std::string(mlp) + " factor " + std::to_string(factor) +
                     (staged ? " staged" : " integrated"));
        json plain = tinyModel("d", 2, S, mlp, false);
        if (staged)
          plain = withMod(plain, modObject(1.0, "all", "sigmoid", "aux_loss"));
        ModelConfig dense = ModelConfig::fromJson(plain);
        ModelConfig moe =
            ModelConfig::fromJson(withMoe(plain, moeObject(1, 0, 32, factor)));
        modref::Weights w = modtest::randomWeights(moe, 3);
        modref::Weights wd = denseFromExpert0(dense, w);
        auto tokens = modtest::randomTokens(batch, S, moe.vocabSize, 4);
        for (RouteMode mode : {RouteMode::TopK, RouteMode::Causal}) {
          if (!staged && mode == RouteMode::Causal)
            continue; // needs a causal router; top-k = causal without MoD
          ReferenceOutput a = modref::forward(moe, w, tokens, batch, mode);
          ReferenceOutput b = modref::forward(dense, wd, tokens, batch, mode);
          EXPECT_EQ(a.logits, b.logits);
          EXPECT_EQ(a.routed, b.routed);
          ASSERT_EQ(a.moeKept.size(), 2u);
          for (size_t l = 0; l < 2; ++l)
            for (int64_t t = 0; t < batch * S; ++t)
              EXPECT_EQ(a.moeKept[l][t], a.moeExpert[l][t] == 0 ? 1 : 0);
        }
        auto train = modtest::randomTrainingTokens(batch, S, moe.vocabSize, 5);
        LossBreakdown la = modref::referenceLoss(moe, w, train, batch);
        LossBreakdown lb = modref::referenceLoss(dense, wd, train, batch);
        EXPECT_EQ(la.ce, lb.ce);
        EXPECT_EQ(la.balance, 1.0); // (E+N) frac p = 1 * 1 * 1
        EXPECT_EQ(la.total, lb.total + 0.01 * 1.0);
      }
}

/// Capacity that drops tokens, N = 0 and N > 0: every decision follows the
/// rule of section 7 recomputed from the reported probabilities, and both
/// drops and no-op choices occur.
TEST(MoeReferenceForward, CapacityWalksPositionOrder) {
  const int64_t batch = 2, S = 12;
  for (int64_t N : {0, 2}) {
    SCOPED_TRACE("N = " + std::to_string(N));
    ModelConfig c = ModelConfig::fromJson(withMoe(
        tinyModel("m", 2, S, "swiglu", true), moeObject(3, N, 16, 0.5)));
    // ceil(0.5 * 12 / 3) = 2 and ceil(0.5 * 12 / 5) = ceil(1.2) = 2.
    EXPECT_EQ(c.expertCapacityOfLayer(0), 2);
    modref::Weights w = modtest::randomWeights(c, 10 + N);
    // A larger router spreads the choices over the experts.
    for (int l = 0; l < 2; ++l)
      for (double &e :
           w.at("blocks." + std::to_string(l) + ".moe.router.weight"))
        e *= 3.0;
    auto tokens = modtest::randomTokens(batch, S, c.vocabSize, 20 + N);
    ReferenceOutput out = modref::forward(c, w, tokens, batch, RouteMode::TopK);
    int64_t dropped = 0, noop = 0;
    expectDecisionsFollowTheRule(c, out, batch, &dropped, &noop);
    EXPECT_GT(dropped, 0);
    if (N > 0)
      EXPECT_GT(noop, 0);
    else
      EXPECT_EQ(noop, 0);
  }
}

/// A token that is not kept (no-op or over capacity) gets m = 0: in a
/// one-layer model its logits do not depend on any expert weight, while a
/// kept token's do.
TEST(MoeReferenceForward, TokensNotKeptAreUntouched) {
  const int64_t batch = 2, S = 12;
  ModelConfig c = ModelConfig::fromJson(
      withMoe(tinyModel("m", 1, S, "gelu", false), moeObject(2, 2, 16, 0.75)));
  modref::Weights w = modtest::randomWeights(c, 30);
  for (double &e : w.at("blocks.0.moe.router.weight"))
    e *= 3.0;
  auto tokens = modtest::randomTokens(batch, S, c.vocabSize, 31);
  ReferenceOutput a = modref::forward(c, w, tokens, batch, RouteMode::TopK);
  modref::Weights w2 = w;
  modtest::Normal rng(32);
  for (auto &[name, t] : w2)
    if (name.find(".experts.") != std::string::npos)
      for (double &e : t)
        e += 0.1 * rng();
  ReferenceOutput b = modref::forward(c, w2, tokens, batch, RouteMode::TopK);
  ASSERT_EQ(a.moeKept, b.moeKept);
  const int64_t V = c.vocabSize;
  int64_t kept = 0, notKept = 0;
  for (int64_t t = 0; t < batch * S; ++t) {
    std::vector<double> ra(a.logits.begin() + t * V,
                           a.logits.begin() + (t + 1) * V);
    std::vector<double> rb(b.logits.begin() + t * V,
                           b.logits.begin() + (t + 1) * V);
    if (a.moeKept[0][t]) {
      ++kept;
      EXPECT_NE(ra, rb) << "token " << t;
    } else {
      ++notKept;
      EXPECT_EQ(ra, rb) << "token " << t;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(notKept, 0);
}

/// Ties in the router logits go to the lower expert index. A zero router
/// makes every p uniform: every token picks expert 0, the first C tokens
/// are kept, and with C = S the layer is the dense MLP scaled by 1/(E+N)
/// (exactly: 1/4 is a power of two). A router whose row 2 repeats row 0
/// never picks expert 2.
TEST(MoeReferenceForward, RouterTiesGoToTheLowerIndex) {
  const int64_t batch = 2, S = 8;
  json plain = tinyModel("d", 2, S, "swiglu", true);
  ModelConfig moe =
      ModelConfig::fromJson(withMoe(plain, moeObject(2, 2, 32, 4.0)));
  ModelConfig dense = ModelConfig::fromJson(plain);
  EXPECT_EQ(moe.expertCapacityOfLayer(0), S);
  modref::Weights w = modtest::randomWeights(moe, 40);
  for (int l = 0; l < 2; ++l)
    std::fill(
        w.at("blocks." + std::to_string(l) + ".moe.router.weight").begin(),
        w.at("blocks." + std::to_string(l) + ".moe.router.weight").end(), 0.0);
  auto tokens = modtest::randomTokens(batch, S, moe.vocabSize, 41);
  ReferenceOutput a = modref::forward(moe, w, tokens, batch, RouteMode::TopK);
  for (size_t l = 0; l < 2; ++l)
    for (int64_t t = 0; t < batch * S; ++t) {
      EXPECT_EQ(a.moeExpert[l][t], 0);
      EXPECT_EQ(a.moeKept[l][t], 1);
    }
  ReferenceOutput b = modref::forward(dense, denseFromExpert0(dense, w, 0.25),
                                      tokens, batch, RouteMode::TopK);
  EXPECT_EQ(a.logits, b.logits);

  // Capacity 1 per sequence: only position 0 is kept.
  ModelConfig small =
      ModelConfig::fromJson(withMoe(plain, moeObject(2, 2, 32, 0.25)));
  ASSERT_EQ(small.expertCapacityOfLayer(0), 1);
  ReferenceOutput s = modref::forward(small, w, tokens, batch, RouteMode::TopK);
  for (int64_t t = 0; t < batch * S; ++t)
    EXPECT_EQ(s.moeKept[0][t], t % S == 0 ? 1 : 0);

  // Row 2 = row 0: a token whose largest logit is at 0 and 2 picks 0.
  modref::Weights r = modtest::randomWeights(moe, 42);
  int64_t picked0 = 0;
  for (int l = 0; l < 2; ++l) {
    auto &router = r.at("blocks." + std::to_string(l) + ".moe.router.weight");
    for (double &e : router)
      e *= 3.0;
    std::copy(router.begin(), router.begin() + 16, router.begin() + 2 * 16);
  }
  ReferenceOutput t = modref::forward(moe, r, tokens, batch, RouteMode::TopK);
  for (size_t l = 0; l < 2; ++l)
    for (int64_t i = 0; i < batch * S; ++i) {
      EXPECT_NE(t.moeExpert[l][i], 2);
      EXPECT_EQ(t.moeProbs[l][i * 4 + 0], t.moeProbs[l][i * 4 + 2]);
      picked0 += t.moeExpert[l][i] == 0;
    }
  EXPECT_GT(picked0, 0) << "the tie was never exercised";
}

/// Staged MoDE: the MoE MLP of a routed layer sees only the selected tokens,
/// with C from k; dense layers' MoE MLPs see every token.
TEST(MoeReferenceForward, StagedSeesOnlyTheRoutedTokens) {
  const int64_t batch = 2, S = 12;
  ModelConfig c = ModelConfig::fromJson(
      withMoe(withMod(tinyModel("s", 2, S, "swiglu", true),
                      modObject(0.5, "every_other", "linear", "aux_loss")),
              moeObject(2, 1, 16, 1.0)));
  EXPECT_EQ(c.expertCapacityOfLayer(0), 4); // ceil(12 / 3)
  EXPECT_EQ(c.expertCapacityOfLayer(1), 2); // k = 6: ceil(6 / 3)
  modref::Weights w = modtest::randomWeights(c, 50);
  for (int l = 0; l < 2; ++l)
    for (double &e : w.at("blocks." + std::to_string(l) + ".moe.router.weight"))
      e *= 3.0;
  auto tokens = modtest::randomTokens(batch, S, c.vocabSize, 51);
  for (RouteMode mode : {RouteMode::TopK, RouteMode::Causal}) {
    ReferenceOutput out = modref::forward(c, w, tokens, batch, mode);
    ASSERT_EQ(out.routed.size(), 1u);
    for (int64_t t = 0; t < batch * S; ++t) {
      EXPECT_GE(out.moeExpert[0][t], 0);
      EXPECT_EQ(out.moeExpert[1][t] >= 0, out.routed[0][t] == 1);
    }
    int64_t dropped = 0, noop = 0;
    expectDecisionsFollowTheRule(c, out, batch, &dropped, &noop);
    EXPECT_GT(dropped + noop, 0);
  }
}

/// The balance loss of section 7 recomputed from the reported decisions and
/// probabilities, and its place in the total loss.
TEST(MoeReferenceLoss, BalanceTermAndTotal) {
  const int64_t batch = 2, S = 10;
  ModelConfig c = ModelConfig::fromJson(
      withMoe(withMod(tinyModel("b", 3, S, "gelu", true),
                      modObject(0.5, json::array({1}), "sigmoid", "aux_loss")),
              moeObject(2, 2, 16, 1.0, "all", 0.3)));
  modref::Weights w = modtest::randomWeights(c, 60);
  auto train = modtest::randomTrainingTokens(batch, S, c.vocabSize, 61);
  LossBreakdown loss = modref::referenceLoss(c, w, train, batch);
  std::vector<int32_t> inputs;
  for (int64_t b = 0; b < batch; ++b)
    inputs.insert(inputs.end(), train.begin() + b * (S + 1),
                  train.begin() + b * (S + 1) + S);
  ReferenceOutput out = modref::forward(c, w, inputs, batch, RouteMode::TopK);
  ASSERT_EQ(out.moeExpert.size(), 3u);
  double mean = 0.0;
  for (size_t l = 0; l < 3; ++l) {
    double tokens = 0.0, sum = 0.0;
    std::vector<double> frac(4, 0.0), meanP(4, 0.0);
    for (int64_t t = 0; t < batch * S; ++t) {
      if (out.moeExpert[l][t] < 0)
        continue;
      tokens += 1.0;
      frac[out.moeExpert[l][t]] += 1.0;
      for (int e = 0; e < 4; ++e)
        meanP[e] += out.moeProbs[l][t * 4 + e];
    }
    EXPECT_EQ(tokens, l == 1 ? batch * 5 : batch * S);
    for (int e = 0; e < 4; ++e)
      sum += frac[e] / tokens * meanP[e] / tokens;
    EXPECT_NEAR(out.moeBalance[l], 4.0 * sum, 1e-14);
    EXPECT_GT(out.moeBalance[l], 0.0);
    mean += 4.0 * sum / 3.0;
  }
  EXPECT_NEAR(loss.balance, mean, 1e-14);
  EXPECT_NEAR(loss.total, loss.ce + 0.01 * loss.aux + 0.3 * loss.balance,
              1e-13);
  EXPECT_EQ(loss.moe.expert, out.moeExpert);
  EXPECT_EQ(loss.moe.kept, out.moeKept);
}

/// Token-by-token decoding with running per-expert counts equals the causal
/// full forward (the top-k forward without routed layers), decisions too,
/// with capacities that drop tokens.
TEST(MoeReferenceDecode, EqualsTheCausalForward) {
  const int64_t batch = 2, S = 12;
  struct Case {
    const char *name;
    json desc;
  };
  json base = tinyModel("c", 2, S, "swiglu", true);
  std::vector<Case> cases = {
      {"integrated N > 0", withMoe(base, moeObject(2, 2, 16, 0.75))},
      {"integrated N = 0, gqa",
       withMoe(modtest::withKvHeads(base, 1), moeObject(3, 0, 16, 0.5))},
      {"staged aux_loss",
       withMoe(withMod(base, modObject(0.5, "all", "linear", "aux_loss")),
               moeObject(2, 1, 16, 0.5))},
      {"staged predictor",
       withMoe(
           withMod(base, modObject(0.5, "every_other", "sigmoid", "predictor")),
           moeObject(2, 1, 16, 0.5, json::array({1})))},
      {"dense MoD without MoE",
       withMod(base, modObject(0.25, "all", "one", "aux_loss"))}};
  int64_t droppedAll = 0;
  for (const Case &k : cases) {
    SCOPED_TRACE(k.name);
    ModelConfig c = ModelConfig::fromJson(k.desc);
    modref::Weights w = modtest::randomWeights(c, 70);
    for (auto &[name, t] : w)
      if (name.find("moe.router") != std::string::npos)
        for (double &e : t)
          e *= 3.0;
    auto tokens = modtest::randomTokens(batch, S, c.vocabSize, 71);
    RouteMode mode = c.numRoutedLayers() ? RouteMode::Causal : RouteMode::TopK;
    ReferenceOutput full = modref::forward(c, w, tokens, batch, mode);
    ReferenceOutput step = modref::decode(c, w, tokens, batch);
    double scale = 0.0, diff = 0.0;
    for (size_t i = 0; i < full.logits.size(); ++i) {
      scale = std::max(scale, std::abs(full.logits[i]));
      diff = std::max(diff, std::abs(full.logits[i] - step.logits[i]));
    }
    EXPECT_LE(diff, 1e-13 * scale);
    EXPECT_EQ(step.routed, full.routed);
    EXPECT_EQ(step.moeExpert, full.moeExpert);
    EXPECT_EQ(step.moeKept, full.moeKept);
    int64_t noop = 0;
    if (c.hasMoe)
      expectDecisionsFollowTheRule(c, full, batch, &droppedAll, &noop);
  }
  EXPECT_GT(droppedAll, 0);
}

/// Max over tensors of max|a - b| / max|a| at a's evaluated coordinates.
double maxRelDiff(const FdGradient &a, const FdGradient &b,
                  std::string *worst) {
  double m = 0.0;
  for (const auto &[name, coords] : a.coords) {
    modtest::TensorGradError e = modtest::compareGradient(
        b.grad.at(name).data(), a.grad.at(name), coords);
    if (e.relative > m) {
      m = e.relative;
      *worst = name;
    }
  }
  return m;
}

/// The finite differences of the reference's MoE loss, decisions held, at
/// two step sizes on fresh random weights, integrated (N > 0, drops) and
/// staged: they agree, no decision moves, the router gets gradient through
/// p[e] alone (balance weight 0), and an expert that keeps no token gets
/// none.
TEST(MoeReferenceGradient, StepSizesAgreeAndRouterLearns) {
  const int64_t batch = 2, S = 8;
  json base = tinyModel("g", 2, S, "swiglu", true);
  for (bool staged : {false, true}) {
    SCOPED_TRACE(staged ? "staged" : "integrated");
    json desc = withMoe(base, moeObject(3, 2, 8, 1.0, "all", 0.0));
    if (staged)
      desc =
          withMod(desc, modObject(0.5, "every_other", "sigmoid", "aux_loss"));
    ModelConfig c = ModelConfig::fromJson(desc);
    modref::Weights w = modtest::randomWeights(c, 80);
    for (auto &[name, t] : w)
      if (name.find("moe.router") != std::string::npos)
        for (double &e : t)
          e *= 3.0;
    auto train = modtest::randomTrainingTokens(batch, S, c.vocabSize, 81);
    FdOptions h;
    h.coordsPerTensor = 12;
    FdOptions half = h;
    half.relStep = h.relStep / 2.0;
    FdGradient a = modref::referenceGradient(c, w, train, batch, h);
    FdGradient b = modref::referenceGradient(c, w, train, batch, half);
    EXPECT_EQ(a.selectionChanges + b.selectionChanges, 0)
        << a.firstSelectionChange;
    // Rounding in the loss (about 1e-16 / h relative to the gradient) is
    // the only difference; these tensors' gradients reach down to 1e-4.
    std::string worst;
    EXPECT_LE(maxRelDiff(a, b, &worst), 1e-5) << worst;
    for (int l = 0; l < 2; ++l) {
      double m = 0.0;
      for (int64_t i :
           a.coords.at("blocks." + std::to_string(l) + ".moe.router.weight"))
        m = std::max(m, std::abs(a.grad.at("blocks." + std::to_string(l) +
                                           ".moe.router.weight")[i]));
      EXPECT_GT(m, 1e-6) << "layer " << l;
      for (int e = 0; e < 3; ++e) {
        bool used = false;
        for (int64_t t = 0; t < batch * S; ++t)
          used |= a.base.moe.kept[l][t] && a.base.moe.expert[l][t] == e;
        const std::string name = "blocks." + std::to_string(l) +
                                 ".moe.experts." + std::to_string(e) +
                                 ".w_up.weight";
        double g = 0.0;
        for (int64_t i : a.coords.at(name))
          g = std::max(g, std::abs(a.grad.at(name)[i]));
        if (used)
          EXPECT_GT(g, 0.0) << name;
        else
          EXPECT_EQ(g, 0.0) << name;
      }
    }
  }
}

/// The balance loss's share of the router gradient has a closed form: with
/// the choices (and frac_e) constant, dL_bal/dz_i[j] = (E+N)/T sum_e frac_e
/// p_i[e] (delta_ej - p_i[j]) and dW[j] = sum_i dz_i[j] n_i. It is the
/// difference of the gradients at balance weight w and 0 over w.
TEST(MoeReferenceGradient, BalanceLossClosedForm) {
  const int64_t batch = 2, S = 8, K = 4, d = 16;
  const double weight = 0.7;
  json base = tinyModel("c", 1, S, "gelu", true);
  ModelConfig cw = ModelConfig::fromJson(
      withMoe(base, moeObject(2, 2, 8, 0.5, "all", weight)));
  ModelConfig c0 =
      ModelConfig::fromJson(withMoe(base, moeObject(2, 2, 8, 0.5, "all", 0.0)));
  modref::Weights w = modtest::randomWeights(cw, 90);
  auto train = modtest::randomTrainingTokens(batch, S, cw.vocabSize, 91);
  std::vector<int32_t> inputs;
  for (int64_t b = 0; b < batch; ++b)
    inputs.insert(inputs.end(), train.begin() + b * (S + 1),
                  train.begin() + b * (S + 1) + S);
  ReferenceOutput out = modref::forward(cw, w, inputs, batch, RouteMode::TopK);
  const double T = static_cast<double>(batch * S);
  std::vector<double> frac(K, 0.0);
  for (int64_t t = 0; t < batch * S; ++t)
    frac[out.moeExpert[0][t]] += 1.0 / T;
  std::vector<double> expected(K * d, 0.0);
  for (int64_t t = 0; t < batch * S; ++t) {
    const double *p = &out.moeProbs[0][t * K];
    const double *n = &out.moeInputs[0][t * d];
    for (int64_t j = 0; j < K; ++j) {
      double dz = 0.0;
      for (int64_t e = 0; e < K; ++e)
        dz += frac[e] * p[e] * ((e == j ? 1.0 : 0.0) - p[j]);
      dz *= static_cast<double>(K) / T;
      for (int64_t k = 0; k < d; ++k)
        expected[j * d + k] += dz * n[k];
    }
  }
  FdGradient rw = modref::referenceGradient(cw, w, train, batch);
  FdGradient r0 = modref::referenceGradient(c0, w, train, batch);
  ASSERT_EQ(rw.selectionChanges + r0.selectionChanges, 0);
  const auto &a = rw.grad.at("blocks.0.moe.router.weight");
  const auto &b = r0.grad.at("blocks.0.moe.router.weight");
  std::vector<double> diff(K * d);
  for (int64_t i = 0; i < K * d; ++i)
    diff[i] = (a[i] - b[i]) / weight;
  EXPECT_LE(modtest::compareGradient(diff.data(), expected, {}).relative, 1e-6);
}

/// E = 1, N = 0, capacity_factor >= 1: the gradients are the dense model's
/// (expert 0 for the MLP), and the router, which changes nothing, gets
/// exactly zero.
TEST(MoeReferenceGradient, OneExpertGradientsAreTheDenseModels) {
  const int64_t batch = 2, S = 8;
  json plain = withMod(tinyModel("d", 2, S, "swiglu", false),
                       modObject(0.5, "every_other", "linear", "aux_loss"));
  ModelConfig dense = ModelConfig::fromJson(plain);
  ModelConfig moe =
      ModelConfig::fromJson(withMoe(plain, moeObject(1, 0, 32, 1.0)));
  modref::Weights w = modtest::randomWeights(moe, 100);
  modref::Weights wd = denseFromExpert0(dense, w);
  auto train = modtest::randomTrainingTokens(batch, S, moe.vocabSize, 101);
  FdGradient gm = modref::referenceGradient(moe, w, train, batch);
  FdGradient gd = modref::referenceGradient(dense, wd, train, batch);
  ASSERT_EQ(gm.selectionChanges + gd.selectionChanges, 0);
  for (const auto &[name, coords] : gm.coords) {
    if (name.find("moe.router") != std::string::npos) {
      for (int64_t i : coords)
        EXPECT_EQ(gm.grad.at(name)[i], 0.0) << name;
      continue;
    }
    std::string denseName = name;
    size_t at = name.find(".moe.experts.0.");
    if (at != std::string::npos)
      denseName = name.substr(0, at) + ".mlp." + name.substr(at + 15);
    ASSERT_EQ(coords.size(), gd.grad.at(denseName).size()) << name;
    EXPECT_LE(modtest::compareGradient(gm.grad.at(name).data(),
                                       gd.grad.at(denseName), {})
                  .relative,
              1e-6)
        << name;
  }
}

} // namespace
