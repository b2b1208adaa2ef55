//===- TrainingReferenceSelfTest.cpp - Checks of the fp64 training oracle -===//
//
// The reference loss (docs/model-format.md section 4) and its finite-difference
// gradients (section 5) judge the compiled gradient entry, so they are checked
// first on their own: the loss against quantities recomputed here from the
// forward pass, the finite differences against closed forms where one exists,
// against themselves at two step sizes, and against the stop-gradient
// semantics.
//
//===----------------------------------------------------------------------===//

#include "ReferenceModel.h"
#include "TestModels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using modref::CausalRouter;
using modref::FdGradient;
using modref::FdOptions;
using modref::LossBreakdown;
using modref::ModelConfig;
using modref::RouteMode;
using modtest::tinyModel;
using modtest::withMod;
using nlohmann::json;

namespace {

json modObject(json capacity, json schedule, const std::string &gate,
               const std::string &router, double weight = 0.01) {
  json m = {{"schedule", std::move(schedule)},
            {"gate", gate},
            {"causal_router", router},
            {"aux_loss_weight", weight}};
  if (capacity.is_number_integer())
    m["capacity_tokens"] = capacity;
  else
    m["capacity"] = capacity;
  if (router == "predictor")
    m["predictor_hidden"] = 8;
  return m;
}

/// tokens[:, :S] of a [B, S + 1] batch.
std::vector<int32_t> inputsOf(const std::vector<int32_t> &t, int64_t batch,
                              int64_t S) {
  std::vector<int32_t> in;
  for (int64_t b = 0; b < batch; ++b)
    in.insert(in.end(), t.begin() + b * (S + 1), t.begin() + b * (S + 1) + S);
  return in;
}

double bce(double z, double y) {
  // The naive form, fine for the O(1) logits of these tests.
  double s = 1.0 / (1.0 + std::exp(-z));
  return -(y * std::log(s) + (1.0 - y) * std::log(1.0 - s));
}

/// Max over tensors of max|a - b| / max|a|, over a's evaluated coordinates.
double maxTensorRelDiff(const FdGradient &a, const FdGradient &b,
                        std::string *worst = nullptr) {
  double m = 0.0;
  for (const auto &[name, coords] : a.coords) {
    modtest::TensorGradError e = modtest::compareGradient(
        b.grad.at(name).data(), a.grad.at(name), coords);
    if (e.relative > m) {
      m = e.relative;
      if (worst)
        *worst = name + "[" + std::to_string(e.worstIndex) + "]";
    }
  }
  return m;
}

TEST(ReferenceLoss, MatchesForwardOfEveryRouter) {
  const int64_t batch = 2, S = 12;
  for (const char *router : {"aux_loss", "predictor", "none"}) {
    SCOPED_TRACE(router);
    json desc = withMod(tinyModel("m", 3, S, "swiglu", false),
                        modObject(0.25, "all", "sigmoid", router, 0.3));
    ModelConfig c = ModelConfig::fromJson(desc);
    EXPECT_EQ(c.auxLossWeight, 0.3);
    modref::Weights w = modtest::randomWeights(c, 5);
    auto tokens = modtest::randomTrainingTokens(batch, S, c.vocabSize, 6);
    LossBreakdown loss = modref::referenceLoss(c, w, tokens, batch);

    // Recompute every part from the forward pass on tokens[:, :S].
    modref::ReferenceOutput out = modref::forward(
        c, w, inputsOf(tokens, batch, S), batch, RouteMode::TopK);
    const int64_t V = c.vocabSize;
    double ce = 0.0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < S; ++i) {
        const double *z = &out.logits[(b * S + i) * V];
        double sum = 0.0;
        for (int64_t v = 0; v < V; ++v)
          sum += std::exp(z[v]);
        ce += -std::log(std::exp(z[tokens[b * (S + 1) + i + 1]]) / sum);
      }
    ce /= static_cast<double>(batch * S);
    EXPECT_NEAR(loss.ce, ce, 1e-12 * ce);

    ASSERT_EQ(out.routed.size(), 3u);
    EXPECT_EQ(loss.selection, out.routed);
    double router = 0.0, pred = 0.0;
    for (size_t l = 0; l < out.routed.size(); ++l) {
      double rl = 0.0, pl = 0.0;
      for (int64_t i = 0; i < batch * S; ++i) {
        rl += bce(out.routerLogits[l][i], out.routed[l][i]);
        if (!out.predictorLogits.empty())
          pl += bce(out.predictorLogits[l][i], out.routed[l][i]);
      }
      router += rl / (batch * S);
      pred += pl / (batch * S);
    }
    router /= 3.0;
    pred /= 3.0;
    EXPECT_NEAR(loss.routerBce, router, 1e-12);
    EXPECT_NEAR(loss.predictorBce, pred, 1e-12);
    double aux = c.causalRouter == CausalRouter::AuxLoss     ? router
                 : c.causalRouter == CausalRouter::Predictor ? pred
                                                             : 0.0;
    EXPECT_NEAR(loss.aux, aux, 1e-12);
    if (c.causalRouter == CausalRouter::None)
      EXPECT_EQ(loss.aux, 0.0);
    EXPECT_NEAR(loss.total, ce + 0.3 * aux, 1e-12 * loss.total);
    EXPECT_GT(loss.routerBce, 0.0);
  }
}

TEST(ReferenceLoss, DenseHasNoAuxAndRejectsBadTokens) {
  ModelConfig c = ModelConfig::fromJson(tinyModel("d", 1, 8, "gelu", true));
  modref::Weights w = modtest::randomWeights(c, 1);
  auto tokens = modtest::randomTrainingTokens(2, 8, c.vocabSize, 2);
  LossBreakdown loss = modref::referenceLoss(c, w, tokens, 2);
  EXPECT_EQ(loss.aux, 0.0);
  EXPECT_EQ(loss.routerBce, 0.0);
  EXPECT_EQ(loss.total, loss.ce);
  EXPECT_TRUE(loss.selection.empty());
  EXPECT_TRUE(std::isfinite(loss.ce));
  EXPECT_GT(loss.ce, 0.0);

  std::vector<int32_t> shortBatch(tokens.begin(), tokens.end() - 1);
  EXPECT_THROW(modref::referenceLoss(c, w, shortBatch, 2),
               modref::ReferenceError);
  auto badTarget = tokens;
  badTarget[8] = 32; // the last target of sequence 0
  EXPECT_THROW(modref::referenceLoss(c, w, badTarget, 2),
               modref::ReferenceError);
}

TEST(ReferenceLoss, FixedSelection) {
  const int64_t batch = 2, S = 12;
  json desc = withMod(tinyModel("m", 2, S, "gelu", true),
                      modObject(0.25, "all", "linear", "aux_loss"));
  ModelConfig c = ModelConfig::fromJson(desc);
  modref::Weights w = modtest::randomWeights(c, 11);
  auto tokens = modtest::randomTrainingTokens(batch, S, c.vocabSize, 12);
  LossBreakdown natural = modref::referenceLoss(c, w, tokens, batch);
  EXPECT_FALSE(natural.topkDiffersFromFixed);

  // Its own selection, held: the same numbers.
  LossBreakdown held =
      modref::referenceLoss(c, w, tokens, batch, &natural.selection);
  EXPECT_FALSE(held.topkDiffersFromFixed);
  EXPECT_EQ(held.total, natural.total);
  EXPECT_EQ(held.selection, natural.selection);

  // Another selection of the same size: flagged, and a different loss.
  modref::Selection other = natural.selection;
  for (auto &mask : other)
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int32_t> seq(mask.begin() + b * S,
                               mask.begin() + (b + 1) * S);
      std::rotate(seq.begin(), seq.begin() + 1, seq.end());
      std::copy(seq.begin(), seq.end(), mask.begin() + b * S);
    }
  ASSERT_NE(other, natural.selection);
  LossBreakdown moved = modref::referenceLoss(c, w, tokens, batch, &other);
  EXPECT_TRUE(moved.topkDiffersFromFixed);
  EXPECT_EQ(moved.selection, other);
  EXPECT_NE(moved.total, natural.total);
}

/// The FD machinery at two step sizes, h and h/2, on a dense 1-layer model:
/// both are far inside the regime where the central difference is exact to
/// rounding, so they agree to 1e-6 relative per tensor.
TEST(ReferenceGradient, StepSizesAgreeOnDenseModel) {
  for (const char *mlp : {"swiglu", "gelu"}) {
    SCOPED_TRACE(mlp);
    ModelConfig c = ModelConfig::fromJson(
        tinyModel("d", 1, 8, mlp, std::string(mlp) == "gelu"));
    modref::Weights w = modtest::randomWeights(c, 21);
    auto tokens = modtest::randomTrainingTokens(2, 8, c.vocabSize, 22);
    FdOptions h;
    FdOptions half = h;
    half.relStep = h.relStep / 2.0;
    FdGradient a = modref::referenceGradient(c, w, tokens, 2, h);
    FdGradient b = modref::referenceGradient(c, w, tokens, 2, half);
    std::string worst;
    double d = maxTensorRelDiff(a, b, &worst);
    EXPECT_LE(d, 1e-6) << "worst at " << worst;
    {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3e", d);
      RecordProperty("max_relative_difference", buf);
    }
    // Every coordinate was evaluated and is finite.
    for (const auto &[name, g] : a.grad) {
      EXPECT_EQ(a.coords.at(name).size(), g.size()) << name;
      for (double e : g)
        ASSERT_TRUE(std::isfinite(e)) << name;
    }
  }
}

/// With no layers, logits = RMSNorm(embed[t]; final_norm) lm_head^T, and the
/// cross-entropy gradient has a closed form for lm_head and final_norm.
TEST(ReferenceGradient, MatchesClosedFormWithoutLayers) {
  const int64_t batch = 2, S = 6;
  ModelConfig c = ModelConfig::fromJson(tinyModel("z", 0, S, "gelu", false));
  modref::Weights w = modtest::randomWeights(c, 31);
  auto tokens = modtest::randomTrainingTokens(batch, S, c.vocabSize, 32);
  FdGradient fd = modref::referenceGradient(c, w, tokens, batch);
  EXPECT_EQ(fd.selectionChanges, 0);

  const int64_t d = c.dModel, V = c.vocabSize, N = batch * S;
  const auto &E = w.at("embed.weight"), &H = w.at("lm_head.weight"),
             &g = w.at("final_norm.weight");
  std::vector<double> gH(V * d, 0.0), gG(d, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < S; ++i) {
      int32_t t = tokens[b * (S + 1) + i], y = tokens[b * (S + 1) + i + 1];
      const double *x = &E[t * d];
      double ss = 0.0;
      for (int64_t e = 0; e < d; ++e)
        ss += x[e] * x[e];
      double inv = 1.0 / std::sqrt(ss / d + c.normEps);
      std::vector<double> nf(d), z(V, 0.0);
      for (int64_t e = 0; e < d; ++e)
        nf[e] = x[e] * inv * g[e];
      double mx = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        for (int64_t e = 0; e < d; ++e)
          z[v] += nf[e] * H[v * d + e];
        mx = std::max(mx, z[v]);
      }
      double sum = 0.0;
      for (double &e : z)
        sum += (e = std::exp(e - mx));
      for (int64_t v = 0; v < V; ++v) {
        double dz = (z[v] / sum - (v == y ? 1.0 : 0.0)) / N;
        for (int64_t e = 0; e < d; ++e) {
          gH[v * d + e] += dz * nf[e];
          gG[e] += dz * H[v * d + e] * x[e] * inv;
        }
      }
    }
  EXPECT_LE(
      modtest::compareGradient(fd.grad.at("lm_head.weight").data(), gH, {})
          .relative,
      1e-7);
  EXPECT_LE(
      modtest::compareGradient(fd.grad.at("final_norm.weight").data(), gG, {})
          .relative,
      1e-7);
}

/// The predictor's loss has a closed-form gradient for fc2.bias:
/// w * mean over layers of mean over (b, i) of (sigmoid(p) - 1[i in I]); and
/// no other loss reaches the predictor.
TEST(ReferenceGradient, PredictorBiasClosedForm) {
  const int64_t batch = 2, S = 10;
  json desc = withMod(tinyModel("p", 2, S, "gelu", true),
                      modObject(0.3, "all", "linear", "predictor", 0.5));
  ModelConfig c = ModelConfig::fromJson(desc);
  modref::Weights w = modtest::randomWeights(c, 41);
  auto tokens = modtest::randomTrainingTokens(batch, S, c.vocabSize, 42);
  FdOptions opt;
  opt.coordsPerTensor = 8;
  FdGradient fd = modref::referenceGradient(c, w, tokens, batch, opt);
  EXPECT_EQ(fd.selectionChanges, 0);
  modref::ReferenceOutput out =
      modref::forward(c, w, inputsOf(tokens, batch, S), batch, RouteMode::TopK);
  ASSERT_EQ(out.predictorLogits.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    double expected = 0.0;
    for (int64_t i = 0; i < batch * S; ++i)
      expected +=
          1.0 / (1.0 + std::exp(-out.predictorLogits[l][i])) - out.routed[l][i];
    expected *= 0.5 / (batch * S) / 2.0;
    std::string name = "blocks." + std::to_string(l) + ".predictor.fc2.bias";
    EXPECT_NEAR(fd.grad.at(name)[0], expected,
                1e-8 * std::abs(expected) + 1e-12)
        << name;
  }
}

/// Stop-gradient semantics: with the predictor, every non-predictor
/// parameter gets exactly the gradient it gets without a causal router (the
/// predictor's loss stops at stopgrad(x)); with aux_loss the router gets
/// more (the BCE flows into it).
TEST(ReferenceGradient, PredictorLossStopsAtItsInput) {
  const int64_t batch = 2, S = 8;
  auto make = [&](const std::string &router) {
    return ModelConfig::fromJson(
        withMod(tinyModel("s", 2, S, "swiglu", true),
                modObject(0.25, "every_other", "sigmoid", router, 0.5)));
  };
  ModelConfig pred = make("predictor"), none = make("none"),
              aux = make("aux_loss");
  modref::Weights w = modtest::randomWeights(pred, 51);
  auto tokens = modtest::randomTrainingTokens(batch, S, pred.vocabSize, 52);
  FdGradient gp = modref::referenceGradient(pred, w, tokens, batch);
  modref::Weights wNone;
  for (const auto &[name, shape] : modref::parameterShapes(none))
    wNone[name] = w.at(name);
  FdGradient gn = modref::referenceGradient(none, wNone, tokens, batch);
  FdGradient ga = modref::referenceGradient(aux, wNone, tokens, batch);
  ASSERT_EQ(gp.selectionChanges + gn.selectionChanges + ga.selectionChanges, 0);
  EXPECT_GT(gp.base.predictorBce, 0.0);
  for (const auto &[name, g] : gn.grad) {
    EXPECT_EQ(g, gp.grad.at(name)) << name;
    if (name == "blocks.1.router.weight")
      EXPECT_GT(
          modtest::compareGradient(ga.grad.at(name).data(), g, {}).relative,
          1e-3)
          << "the aux_loss BCE should reach the router";
  }
  // The predictor's own gradient is nonzero.
  double m = 0.0;
  for (double e : gp.grad.at("blocks.1.predictor.fc1.weight"))
    m = std::max(m, std::abs(e));
  EXPECT_GT(m, 0.0);
}

/// Capacity 1.0 with g = 1 is the dense layer
/// (docs/model-format.md section 3), so their gradients are the same, and the
/// router, which then affects nothing, gets none.
TEST(ReferenceGradient, FullCapacityGateOneEqualsDense) {
  const int64_t batch = 2, S = 8;
  json denseDesc = tinyModel("d", 2, S, "gelu", false);
  ModelConfig dense = ModelConfig::fromJson(denseDesc);
  ModelConfig routed = ModelConfig::fromJson(
      withMod(denseDesc, modObject(1.0, "all", "one", "none")));
  modref::Weights w = modtest::randomWeights(routed, 61);
  modref::Weights wDense;
  for (const auto &[name, shape] : modref::parameterShapes(dense))
    wDense[name] = w.at(name);
  auto tokens = modtest::randomTrainingTokens(batch, S, dense.vocabSize, 62);
  FdOptions opt;
  opt.coordsPerTensor = 64;
  FdGradient gr = modref::referenceGradient(routed, w, tokens, batch, opt);
  FdGradient gd = modref::referenceGradient(dense, wDense, tokens, batch, opt);
  for (const auto &[name, coords] : gr.coords) {
    if (name.find("router") != std::string::npos) {
      for (double e : gr.grad.at(name))
        EXPECT_EQ(e, 0.0) << name;
      continue;
    }
    // The subsets differ (the router tensors draw from the stream too), so
    // compare at the coordinates both evaluated.
    std::set<int64_t> theirs(gd.coords.at(name).begin(),
                             gd.coords.at(name).end());
    std::vector<int64_t> common;
    for (int64_t i : coords)
      if (theirs.count(i))
        common.push_back(i);
    if (common.empty())
      continue;
    EXPECT_LE(modtest::compareGradient(gr.grad.at(name).data(),
                                       gd.grad.at(name), common)
                  .relative,
              1e-6)
        << name;
  }
}

/// Untied: an embedding row of a token that is never an input gets no
/// gradient at all; a random subset covers min(n, count) distinct
/// coordinates and agrees with the full evaluation there.
TEST(ReferenceGradient, UnusedEmbeddingRowsAndSubsets) {
  const int64_t batch = 2, S = 8;
  ModelConfig c = ModelConfig::fromJson(tinyModel("u", 1, S, "gelu", false));
  modref::Weights w = modtest::randomWeights(c, 71);
  auto tokens = modtest::randomTrainingTokens(batch, S, c.vocabSize, 72);
  FdGradient full = modref::referenceGradient(c, w, tokens, batch);
  std::set<int32_t> inputs;
  for (int32_t t : inputsOf(tokens, batch, S))
    inputs.insert(t);
  ASSERT_LT(inputs.size(), 32u);
  const auto &ge = full.grad.at("embed.weight");
  for (int64_t v = 0; v < c.vocabSize; ++v) {
    double m = 0.0;
    for (int64_t e = 0; e < c.dModel; ++e)
      m = std::max(m, std::abs(ge[v * c.dModel + e]));
    if (inputs.count(static_cast<int32_t>(v)))
      EXPECT_GT(m, 0.0) << "token " << v;
    else
      EXPECT_EQ(m, 0.0) << "token " << v;
  }

  FdOptions opt;
  opt.coordsPerTensor = 64;
  opt.threads = 3;
  FdGradient sub = modref::referenceGradient(c, w, tokens, batch, opt);
  for (const auto &[name, coords] : sub.coords) {
    size_t n = sub.grad.at(name).size();
    EXPECT_EQ(coords.size(), std::min<size_t>(n, 64)) << name;
    EXPECT_EQ(std::set<int64_t>(coords.begin(), coords.end()).size(),
              coords.size())
        << name;
    for (size_t i = 0; i < n; ++i) {
      bool evaluated = std::binary_search(coords.begin(), coords.end(),
                                          static_cast<int64_t>(i));
      if (evaluated)
        EXPECT_EQ(sub.grad.at(name)[i], full.grad.at(name)[i]) << name;
      else
        EXPECT_TRUE(std::isnan(sub.grad.at(name)[i])) << name;
    }
  }
}

} // namespace
