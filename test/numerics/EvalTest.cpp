//===- EvalTest.cpp - The loss-only entry against grad and the fp64 oracle ===//
//
// modc_eval (modrt::Package::eval) is the training entry's forward pass and
// losses without the backward pass (docs/runtime.md, docs/compiler.md stage
// 5a'): on the same weights and tokens its losses must be modc_grad's bit for
// bit, and the fp64 reference loss of docs/model-format.md section 4 within
// GradTest's tolerance. Weights and tokens are random (never zeros), so a
// loss term that went missing or was summed in another order shows.
// modc_eval_causal (Package::eval in causal mode) is the cross-entropy of the
// forward pass in causal mode: it must match that of Package::forward's
// causal logits and the fp64 reference's.
//
//===----------------------------------------------------------------------===//

#include "CompiledPackages.h"
#include "ReferenceModel.h"
#include "TestModels.h"

#include "modrt/Error.h"
#include "modrt/Package.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

using modref::RouteMode;
using modtest::package;
using modtest::tinyModel;
using modtest::toTensorMap;
using modtest::withMod;
using nlohmann::json;

namespace {

constexpr double kLossTolerance = 1e-5; // GradTest's

json modObject(const std::string &router, double auxWeight) {
  json m = {{"schedule", "every_other"},
            {"gate", "sigmoid"},
            {"causal_router", router},
            {"aux_loss_weight", auxWeight},
            {"capacity", 0.25}};
  if (router == "predictor")
    m["predictor_hidden"] = 16;
  return m;
}

struct Case {
  std::string name;
  json desc;
  uint64_t seed;
  /// bf16 models have no fp64 reference here (Bf16Test covers them): eval
  /// is compared with grad only.
  bool reference = true;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

std::vector<Case> evalCases() {
  std::vector<Case> cases;
  auto add = [&](const std::string &name, json desc, uint64_t seed,
                 bool reference = true) {
    desc["name"] = "eval_" + name;
    cases.push_back({name, std::move(desc), seed, reference});
  };
  add("DenseSwiglu", tinyModel("", 2, 8, "swiglu", false), 900);
  // Products over more than one of OpenBLAS's K blocks (d_ff 1024): a GEMM
  // that accumulated into the residual stream (an epilogue) would round
  // differently from grad's GEMM-then-add.
  add("DenseWideMlp",
      modtest::denseModel("", 64, 2, 2, 8, "swiglu", false, 32, 1024), 904);
  add("ModPredictor",
      withMod(tinyModel("", 2, 12, "gelu", true), modObject("predictor", 0.5)),
      901);
  add("ModAuxLoss",
      withMod(tinyModel("", 3, 12, "swiglu", false),
              modObject("aux_loss", 0.1)),
      902);
  json bf16 =
      withMod(tinyModel("", 2, 12, "swiglu", false), modObject("aux_loss", 0.1));
  bf16["dtype"] = "bf16";
  add("ModAuxLossBf16", bf16, 903, /*reference=*/false);
  return cases;
}

/// Mean over [B, S] of -log softmax(logits)[target] in double, targets
/// tokens[:, 1:] of `tokens` [B, S + 1].
template <typename T>
double crossEntropy(const std::vector<T> &logits,
                    const std::vector<int32_t> &tokens, int64_t batch,
                    int64_t S, int64_t V) {
  double sum = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < S; ++i) {
      const T *row = logits.data() + (b * S + i) * V;
      double top = *std::max_element(row, row + V), z = 0;
      for (int64_t v = 0; v < V; ++v)
        z += std::exp(static_cast<double>(row[v]) - top);
      sum += std::log(z) + top - row[tokens[b * (S + 1) + i + 1]];
    }
  return sum / static_cast<double>(batch * S);
}

/// The float the package wrote: Losses holds it widened to double.
uint32_t bits(double widened) {
  float f = static_cast<float>(widened);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

class CompiledEval : public ::testing::TestWithParam<Case> {};

TEST_P(CompiledEval, LossesAreGradsBitForBitAndMatchTheReference) {
  const Case &c = GetParam();
  modref::ModelConfig config = modref::ModelConfig::fromJson(c.desc);
  const modrt::Package *pkg = package(c.desc);
  ASSERT_NE(pkg, nullptr);
  const modrt::Manifest &m = pkg->manifest();
  ASSERT_TRUE(m.supportsEval) << "the package has no entries.eval";
  // No gradient buffers: eval needs less workspace than grad.
  EXPECT_GT(m.evalWorkspaceBytesPerSequence, 0u);
  EXPECT_LT(m.evalWorkspaceBytesPerSequence, m.gradWorkspaceBytesPerSequence);
  RecordProperty("eval_workspace_bytes",
                 std::to_string(m.evalWorkspaceBytesPerSequence));
  RecordProperty("grad_workspace_bytes",
                 std::to_string(m.gradWorkspaceBytesPerSequence));

  int causalChecked = 0; // batches whose causal loss was compared
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    // A well-separated top-k, so that the compiled pass and the fp64 one
    // select the same tokens.
    modref::Weights weights;
    std::vector<int32_t> tokens;
    const int64_t S = config.seqLen;
    bool found = false;
    for (int attempt = 0; attempt < 20 && !found; ++attempt) {
      uint64_t s = c.seed + 7919ull * attempt + 31ull * batch;
      weights = modtest::randomWeights(config, s);
      tokens = modtest::randomTrainingTokens(batch, S, config.vocabSize, s + 1);
      std::vector<int32_t> inputs;
      for (int64_t b = 0; b < batch; ++b)
        inputs.insert(inputs.end(), tokens.begin() + b * (S + 1),
                      tokens.begin() + b * (S + 1) + S);
      modref::ReferenceOutput fwd =
          modref::forward(config, weights, inputs, batch, RouteMode::TopK);
      found = modtest::routingMargin(config, fwd, batch, RouteMode::TopK) > 1e-4;
    }
    ASSERT_TRUE(found) << "no instance with a well-separated top-k found";
    modrt::TensorMap w = toTensorMap(weights, config, m);
    ASSERT_FALSE(HasFailure());

    modrt::Losses eval, grad;
    try {
      eval = pkg->eval(w, tokens, batch);
      grad = pkg->grad(w, tokens, batch).losses;
    } catch (const modrt::Error &e) {
      FAIL() << e.what();
    }
    EXPECT_EQ(bits(eval.total), bits(grad.total))
        << "total: eval " << eval.total << ", grad " << grad.total;
    EXPECT_EQ(bits(eval.ce), bits(grad.ce))
        << "ce: eval " << eval.ce << ", grad " << grad.ce;
    EXPECT_EQ(bits(eval.aux), bits(grad.aux))
        << "aux: eval " << eval.aux << ", grad " << grad.aux;
    // Random weights give every term a value: a term eval dropped shows.
    EXPECT_GT(eval.ce, 0.0);
    if (config.hasMod && config.causalRouter != modref::CausalRouter::None)
      EXPECT_GT(eval.aux, 0.0);

    if (!c.reference)
      continue;
    modref::LossBreakdown ref =
        modref::referenceLoss(config, weights, tokens, batch);
    auto lossOk = [](double ours, double theirs) {
      return std::isfinite(ours) &&
             std::abs(ours - theirs) <= kLossTolerance * std::abs(theirs) + 1e-9;
    };
    EXPECT_PRED2(lossOk, eval.ce, ref.ce) << "cross-entropy";
    EXPECT_PRED2(lossOk, eval.aux, ref.aux) << "L_aux";
    EXPECT_PRED2(lossOk, eval.total, ref.total) << "total";

    // Causal mode, where the model has one.
    if (!m.supportsCausal) {
      EXPECT_FALSE(m.supportsEvalCausal);
      continue;
    }
    ASSERT_TRUE(m.supportsEvalCausal) << "no causal_workspace in entries.eval";
    std::vector<int32_t> inputs;
    for (int64_t b = 0; b < batch; ++b)
      inputs.insert(inputs.end(), tokens.begin() + b * (S + 1),
                    tokens.begin() + b * (S + 1) + S);
    modref::ReferenceOutput causalRef =
        modref::forward(config, weights, inputs, batch, RouteMode::Causal);
    if (modtest::routingMargin(config, causalRef, batch, RouteMode::Causal) <=
        1e-4)
      continue; // a causal decision within rounding of its threshold
    modrt::Losses causal;
    modrt::ForwardResult fwd;
    try {
      causal = pkg->eval(w, tokens, batch, modrt::RouteMode::Causal);
      fwd = pkg->forward(w, inputs, batch, modrt::RouteMode::Causal);
    } catch (const modrt::Error &e) {
      FAIL() << e.what();
    }
    EXPECT_EQ(causal.total, causal.ce);
    EXPECT_EQ(causal.aux, 0.0);
    const int64_t V = config.vocabSize;
    double fromLogits = crossEntropy(fwd.logits, tokens, batch, S, V);
    EXPECT_NEAR(causal.ce, fromLogits, 1e-6 * fromLogits)
        << "cross-entropy of the causal forward's logits";
    EXPECT_PRED2(lossOk, causal.ce,
                 crossEntropy(causalRef.logits, tokens, batch, S, V))
        << "causal cross-entropy against the reference";
    ++causalChecked;
  }
  RecordProperty("causal_batches_checked", causalChecked);
}

INSTANTIATE_TEST_SUITE_P(Models, CompiledEval, ::testing::ValuesIn(evalCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

} // namespace
