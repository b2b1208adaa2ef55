//===- ReferenceSelfTest.cpp - Checks of the fp64 reference itself --------===//
//
// The oracle must be right before it can judge anything: these tests check
// properties docs/model-format.md implies (softmax normalisation, causality,
// capacity 1.0 with g = 1 equals dense, top-k counts and tie-breaking,
// untouched skipped tokens, description defaults) using the reference alone.
//
//===----------------------------------------------------------------------===//

#include "ReferenceModel.h"
#include "TestModels.h"

#include <gtest/gtest.h>

#include <cmath>

using modref::ModelConfig;
using modref::RouteMode;
using modtest::denseModel;
using modtest::withMod;
using nlohmann::json;

namespace {

/// Max |a - b| over two equally sized vectors.
double maxAbsDiff(const std::vector<double> &a, const std::vector<double> &b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(ReferenceConfig, DefaultsAndCapacity) {
  ModelConfig dense =
      ModelConfig::fromJson(denseModel("d", 32, 2, 3, 20, "swiglu", true));
  EXPECT_FALSE(dense.hasMod);
  EXPECT_EQ(dense.numRoutedLayers(), 0);

  ModelConfig m = ModelConfig::fromJson(
      withMod(denseModel("m", 32, 2, 5, 20, "gelu", false),
              {{"capacity", 0.125}, {"schedule", "every_other"}}));
  EXPECT_EQ(m.capacity, 3); // ceil(0.125 * 20) = ceil(2.5)
  EXPECT_EQ(m.routed, (std::vector<bool>{false, true, false, true, false}));

  ModelConfig one = ModelConfig::fromJson(
      withMod(denseModel("m", 32, 2, 3, 20, "gelu", false),
              {{"capacity", 0.001}, {"schedule", "all"}}));
  EXPECT_EQ(one.capacity, 1); // clamped up to one token
  EXPECT_EQ(one.numRoutedLayers(), 3);

  ModelConfig list = ModelConfig::fromJson(
      withMod(denseModel("m", 32, 2, 4, 20, "gelu", false),
              {{"capacity_tokens", 7}, {"schedule", json::array({0, 3})}}));
  EXPECT_EQ(list.capacity, 7);
  EXPECT_EQ(list.routed, (std::vector<bool>{true, false, false, true}));

  ModelConfig none = ModelConfig::fromJson(
      withMod(denseModel("m", 32, 2, 2, 20, "gelu", false),
              {{"capacity", 0.5}, {"schedule", "none"}}));
  EXPECT_EQ(none.numRoutedLayers(), 0);
}

TEST(ReferenceConfig, RejectsBadDescriptions) {
  json base = denseModel("m", 32, 2, 2, 16, "gelu", false);
  json unknown = base;
  unknown["d_modle"] = 3;
  EXPECT_THROW(ModelConfig::fromJson(unknown), modref::ReferenceError);
  json heads = base;
  heads["n_heads"] = 3;
  EXPECT_THROW(ModelConfig::fromJson(heads), modref::ReferenceError);
  EXPECT_THROW(ModelConfig::fromJson(withMod(base, {{"capacity", 1.5}})),
               modref::ReferenceError);
  EXPECT_THROW(
      ModelConfig::fromJson(withMod(base, {{"schedule", json::array({0, 2})}})),
      modref::ReferenceError);
  try {
    ModelConfig::fromJson(withMod(base, {{"gate", "relu"}}));
    FAIL() << "expected an error";
  } catch (const modref::ReferenceError &e) {
    EXPECT_NE(std::string(e.what()).find("mod.gate"), std::string::npos);
  }
}

TEST(ReferenceConfig, ParameterShapes) {
  ModelConfig tied = ModelConfig::fromJson(
      withMod(denseModel("m", 32, 2, 2, 16, "swiglu", true),
              {{"schedule", "every_other"},
               {"causal_router", "predictor"},
               {"predictor_hidden", 8}}));
  auto shapes = modref::parameterShapes(tied);
  std::map<std::string, std::vector<int64_t>> byName(shapes.begin(),
                                                     shapes.end());
  EXPECT_EQ(byName.count("lm_head.weight"), 0u);
  EXPECT_EQ(byName.count("blocks.0.router.weight"), 0u);
  EXPECT_EQ(byName.at("blocks.1.router.weight"), (std::vector<int64_t>{1, 32}));
  EXPECT_EQ(byName.at("blocks.1.predictor.fc1.weight"),
            (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(byName.at("blocks.1.predictor.fc2.bias"),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(byName.at("blocks.0.mlp.w_gate.weight"),
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(byName.at("blocks.0.mlp.w_down.weight"),
            (std::vector<int64_t>{32, 64}));

  ModelConfig untied =
      ModelConfig::fromJson(denseModel("m", 32, 2, 1, 16, "gelu", false));
  auto u = modref::parameterShapes(untied);
  std::map<std::string, std::vector<int64_t>> uByName(u.begin(), u.end());
  EXPECT_EQ(uByName.at("lm_head.weight"), (std::vector<int64_t>{256, 32}));
  EXPECT_EQ(uByName.count("blocks.0.mlp.w_gate.weight"), 0u);
}

/// With every token identical, every value vector is identical, so attention
/// returns that vector whatever the (RoPE-dependent) scores are, provided
/// softmax rows sum to one: every position must give position 0's logits.
TEST(ReferenceForward, SoftmaxRowsSumToOne) {
  for (const char *mlp : {"swiglu", "gelu"}) {
    ModelConfig c =
        ModelConfig::fromJson(denseModel("m", 32, 4, 1, 24, mlp, false));
    auto w = modtest::randomWeights(c, 1);
    std::vector<int32_t> tokens(24, 42);
    auto out = modref::forward(c, w, tokens, 1, RouteMode::TopK);
    const int64_t V = c.vocabSize;
    for (int64_t i = 1; i < 24; ++i)
      for (int64_t v = 0; v < V; ++v)
        ASSERT_NEAR(out.logits[i * V + v], out.logits[v], 1e-12)
            << mlp << " position " << i;
  }
}

/// Logits at position i depend on tokens at positions <= i only (dense, and
/// causal routing mode, which decides per token).
TEST(ReferenceForward, CausalInTokens) {
  json desc = withMod(denseModel("m", 32, 2, 3, 16, "swiglu", true),
                      {{"capacity", 0.5},
                       {"schedule", "every_other"},
                       {"gate", "sigmoid"},
                       {"causal_router", "predictor"},
                       {"predictor_hidden", 16}});
  ModelConfig c = ModelConfig::fromJson(desc);
  auto w = modtest::randomWeights(c, 2);
  auto t1 = modtest::randomTokens(1, 16, 256, 3);
  auto t2 = t1;
  t2[15] = (t2[15] + 1) % 256;
  auto a = modref::forward(c, w, t1, 1, RouteMode::Causal);
  auto b = modref::forward(c, w, t2, 1, RouteMode::Causal);
  const int64_t V = 256;
  for (int64_t i = 0; i < 15 * V; ++i)
    ASSERT_EQ(a.logits[i], b.logits[i]) << "index " << i;
  double diff = 0.0;
  for (int64_t i = 15 * V; i < 16 * V; ++i)
    diff = std::max(diff, std::abs(a.logits[i] - b.logits[i]));
  EXPECT_GT(diff, 0.0);
}

/// docs/model-format.md section 3: capacity 1.0 with g = 1 is exactly the
/// dense layer.
TEST(ReferenceForward, FullCapacityGateOneEqualsDense) {
  json dense = denseModel("m", 32, 2, 2, 16, "gelu", false);
  json routed = withMod(dense, {{"capacity", 1.0},
                                {"schedule", "all"},
                                {"gate", "one"},
                                {"causal_router", "none"}});
  ModelConfig cd = ModelConfig::fromJson(dense);
  ModelConfig cr = ModelConfig::fromJson(routed);
  auto w = modtest::randomWeights(cr, 4);
  auto tokens = modtest::randomTokens(2, 16, 256, 5);
  auto od = modref::forward(cd, w, tokens, 2, RouteMode::TopK);
  auto orr = modref::forward(cr, w, tokens, 2, RouteMode::TopK);
  ASSERT_EQ(orr.routed.size(), 2u);
  for (const auto &mask : orr.routed)
    for (int32_t m : mask)
      EXPECT_EQ(m, 1);
  // y = x + (a + m) vs (x + a) + m: equal up to double rounding.
  EXPECT_LT(maxAbsDiff(od.logits, orr.logits), 1e-10);
}

/// Top-k routes exactly k tokens per sequence and layer; with a zero router
/// every r ties and the lowest k positions win.
TEST(ReferenceForward, TopKCountAndTies) {
  json desc = withMod(denseModel("m", 32, 2, 4, 32, "swiglu", true),
                      {{"capacity", 0.125},
                       {"schedule", "all"},
                       {"gate", "sigmoid"},
                       {"causal_router", "aux_loss"}});
  ModelConfig c = ModelConfig::fromJson(desc);
  ASSERT_EQ(c.capacity, 4);
  auto w = modtest::randomWeights(c, 6);
  auto tokens = modtest::randomTokens(3, 32, 256, 7);
  auto out = modref::forward(c, w, tokens, 3, RouteMode::TopK);
  ASSERT_EQ(out.routed.size(), 4u);
  for (size_t l = 0; l < out.routed.size(); ++l)
    for (int64_t b = 0; b < 3; ++b) {
      int64_t count = 0;
      double minIn = INFINITY, maxOut = -INFINITY;
      for (int64_t i = 0; i < 32; ++i) {
        double r = out.routerLogits[l][b * 32 + i];
        if (out.routed[l][b * 32 + i]) {
          ++count;
          minIn = std::min(minIn, r);
        } else {
          maxOut = std::max(maxOut, r);
        }
      }
      EXPECT_EQ(count, 4);
      // Repeated tokens give exactly equal r in the first layer: a tie at
      // the boundary must go to the lower positions.
      EXPECT_GE(minIn, maxOut);
      for (int64_t i = 0; i < 32; ++i)
        for (int64_t j = i + 1; j < 32; ++j)
          if (out.routerLogits[l][b * 32 + i] ==
              out.routerLogits[l][b * 32 + j])
            EXPECT_GE(out.routed[l][b * 32 + i], out.routed[l][b * 32 + j]);
    }

  for (int64_t l = 0; l < 4; ++l) {
    auto &r = w["blocks." + std::to_string(l) + ".router.weight"];
    std::fill(r.begin(), r.end(), 0.0);
  }
  auto tied = modref::forward(c, w, tokens, 3, RouteMode::TopK);
  for (const auto &mask : tied.routed)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < 32; ++i)
        EXPECT_EQ(mask[b * 32 + i], i < 4 ? 1 : 0);
}

/// A token no layer routes is carried unchanged: its logits equal those of a
/// zero-layer model.
TEST(ReferenceForward, SkippedTokensAreUntouched) {
  json desc = withMod(denseModel("m", 32, 2, 3, 16, "gelu", false),
                      {{"capacity_tokens", 2},
                       {"schedule", "all"},
                       {"gate", "linear"},
                       {"causal_router", "none"}});
  ModelConfig c = ModelConfig::fromJson(desc);
  ModelConfig c0 =
      ModelConfig::fromJson(denseModel("m", 32, 2, 0, 16, "gelu", false));
  auto w = modtest::randomWeights(c, 8);
  for (int64_t l = 0; l < 3; ++l) {
    auto &r = w["blocks." + std::to_string(l) + ".router.weight"];
    std::fill(r.begin(), r.end(), 0.0);
  }
  auto tokens = modtest::randomTokens(1, 16, 256, 9);
  auto out = modref::forward(c, w, tokens, 1, RouteMode::TopK);
  auto out0 = modref::forward(c0, w, tokens, 1, RouteMode::TopK);
  // Gate linear with r = 0 leaves even the routed tokens unchanged.
  for (size_t i = 0; i < out.logits.size(); ++i)
    ASSERT_EQ(out.logits[i], out0.logits[i]);
}

/// Causal mode: aux_loss routes iff r > 0, the predictor iff p > 0; the
/// test weights make some but not all tokens route. Without a causal router
/// the mode is refused.
TEST(ReferenceForward, CausalDecisions) {
  for (const char *router : {"aux_loss", "predictor"}) {
    json desc = withMod(denseModel("m", 32, 2, 2, 32, "swiglu", true),
                        {{"capacity", 0.25},
                         {"schedule", "all"},
                         {"gate", "linear"},
                         {"causal_router", router},
                         {"predictor_hidden", 16}});
    ModelConfig c = ModelConfig::fromJson(desc);
    auto w = modtest::randomWeights(c, 10);
    auto tokens = modtest::randomTokens(3, 32, 256, 11);
    auto out = modref::forward(c, w, tokens, 3, RouteMode::Causal);
    bool predictor = std::string(router) == "predictor";
    ASSERT_EQ(out.predictorLogits.size(), predictor ? 2u : 0u);
    for (size_t l = 0; l < 2; ++l) {
      int64_t count = 0;
      for (int64_t i = 0; i < 3 * 32; ++i) {
        double s =
            predictor ? out.predictorLogits[l][i] : out.routerLogits[l][i];
        EXPECT_EQ(out.routed[l][i], s > 0.0 ? 1 : 0);
        count += out.routed[l][i];
      }
      EXPECT_GT(count, 0) << router;
      EXPECT_LT(count, 3 * 32) << router;
    }
  }
  ModelConfig none = ModelConfig::fromJson(
      withMod(denseModel("m", 32, 2, 2, 16, "gelu", true),
              {{"schedule", "all"}, {"causal_router", "none"}}));
  auto w = modtest::randomWeights(none, 12);
  EXPECT_THROW(modref::forward(none, w, modtest::randomTokens(1, 16, 256, 1), 1,
                               RouteMode::Causal),
               modref::ReferenceError);
}

/// A hand-computed case: one layer, one head of dimension 2, two tokens.
/// Checks RoPE, the attention scale and the residual path against numbers
/// worked out independently of the loops above.
TEST(ReferenceForward, HandComputedAttention) {
  json desc = denseModel("h", 2, 1, 1, 2, "gelu", false, 2, 1);
  desc["norm_eps"] = 0.0;
  ModelConfig c = ModelConfig::fromJson(desc);
  modref::Weights w;
  w["embed.weight"] = {1.0, 0.0, 0.0, 1.0};
  w["blocks.0.attn_norm.weight"] = {1.0, 1.0};
  w["blocks.0.attn.wq.weight"] = {1.0, 0.0, 0.0, 1.0};
  w["blocks.0.attn.wk.weight"] = {1.0, 0.0, 0.0, 1.0};
  w["blocks.0.attn.wv.weight"] = {1.0, 0.0, 0.0, 1.0};
  w["blocks.0.attn.wo.weight"] = {1.0, 0.0, 0.0, 1.0};
  w["blocks.0.mlp_norm.weight"] = {1.0, 1.0};
  w["blocks.0.mlp.w_up.weight"] = {0.0, 0.0};
  w["blocks.0.mlp.w_down.weight"] = {0.0, 0.0};
  w["final_norm.weight"] = {1.0, 1.0};
  w["lm_head.weight"] = {1.0, 0.0, 0.0, 1.0};
  // Tokens 0 then 1: x = e0 at p = 0, e1 at p = 1. RMS of a unit vector in
  // 2-d is 1/sqrt(2), so the normalised rows are sqrt(2) e0, sqrt(2) e1.
  auto out = modref::forward(c, w, {0, 1}, 1, RouteMode::TopK);
  const double s2 = std::sqrt(2.0);
  // Position 0 attends to itself: a0 = v0 = sqrt(2) e0; h0 = (1 + s2) e0.
  // Final norm of h0 = sqrt(2) e0.
  EXPECT_NEAR(out.logits[0], s2, 1e-12);
  EXPECT_NEAR(out.logits[1], 0.0, 1e-12);
  // Position 1: q1 = rot(sqrt(2) e1, angle 1) = sqrt(2)(-sin 1, cos 1);
  // k0 = sqrt(2) e0 (angle 0), k1 = q1. Scores / sqrt(2):
  // s0 = 2(-sin 1)/sqrt(2), s1 = 2/sqrt(2).
  double sc0 = -2.0 * std::sin(1.0) / s2, sc1 = 2.0 / s2;
  double p0 = std::exp(sc0) / (std::exp(sc0) + std::exp(sc1));
  double p1 = 1.0 - p0;
  double h0 = p0 * s2, h1 = 1.0 + p1 * s2; // h = e1 + p0 v0 + p1 v1
  double rms = std::sqrt((h0 * h0 + h1 * h1) / 2.0);
  EXPECT_NEAR(out.logits[2], h0 / rms, 1e-12);
  EXPECT_NEAR(out.logits[3], h1 / rms, 1e-12);
}

} // namespace
