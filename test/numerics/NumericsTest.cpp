//===- NumericsTest.cpp - Compiled packages against the fp64 reference ----===//
//
// Every configuration is compiled by running the real `modc` binary, loaded
// with the runtime, given random weights and tokens generated here, and
// compared with the naive fp64 reference: relative logits error
// max|ours - ref| / max|ref| <= 1e-5 and identical routing masks.
//
// Compiling and caching packages: CompiledPackages.h.
//
//===----------------------------------------------------------------------===//

#include "CompiledPackages.h"
#include "ReferenceModel.h"
#include "TestModels.h"

#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"

#include <gtest/gtest.h>

#include <map>
using modref::RouteMode;
using modtest::denseModel;
using modtest::package;
using modtest::toTensorMap;
using modtest::withMod;
using nlohmann::json;

namespace {

constexpr double kLogitsTolerance = 1e-5;

modrt::RouteMode toRuntime(RouteMode m) {
  return m == RouteMode::TopK ? modrt::RouteMode::TopK
                              : modrt::RouteMode::Causal;
}

//===----------------------------------------------------------------------===//
// The configuration matrix
//===----------------------------------------------------------------------===//

json modDesc(double capacity, json schedule, const std::string &gate,
             const std::string &causalRouter, int64_t predictorHidden = 16) {
  json m = {{"capacity", capacity},
            {"schedule", std::move(schedule)},
            {"gate", gate},
            {"causal_router", causalRouter},
            {"aux_loss_weight", 0.01}};
  if (causalRouter == "predictor")
    m["predictor_hidden"] = predictorHidden;
  return m;
}

/// Dense, 2 layers, SwiGLU, tied embeddings.
json denseSwigluTied() {
  return denseModel("dense_swiglu_tied", 32, 2, 2, 16, "swiglu", true);
}
/// Dense, 2 layers, GELU, untied; also the dense twin of capacityOneGateOne.
json denseGeluUntied() {
  return denseModel("dense_gelu_untied", 48, 4, 2, 24, "gelu", false);
}
/// The paper's setting: every other layer at 12.5 %, linear gate, aux loss.
json everyOtherSwigluTied() {
  return withMod(denseModel("eo_swiglu_tied_c125_linear_aux", 64, 4, 4, 64,
                            "swiglu", true),
                 modDesc(0.125, "every_other", "linear", "aux_loss"));
}
/// Every layer routed with a capacity of one token, sigmoid gate, predictor.
json allOneToken() {
  json m = withMod(denseModel("all_gelu_untied_k1_sigmoid_pred", 32, 2, 2, 32,
                              "gelu", false),
                   modDesc(0.0, "all", "sigmoid", "predictor", 16));
  m["mod"].erase("capacity");
  m["mod"]["capacity_tokens"] = 1;
  return m;
}
/// An explicit schedule at full capacity (routing is the identity
/// selection), sigmoid gate, no causal router.
json listFullCapacity() {
  return withMod(denseModel("list_swiglu_untied_c100_sigmoid_none", 48, 2, 3,
                            16, "swiglu", false),
                 modDesc(1.0, json::array({0, 2}), "sigmoid", "none"));
}
/// A `mod` object that routes nothing.
json scheduleNone() {
  return withMod(denseModel("none_gelu_tied", 32, 4, 2, 16, "gelu", true),
                 modDesc(0.5, "none", "linear", "none"));
}
/// All layers at 12.5 % of a length that does not divide (k = 5 of 40),
/// linear gate, predictor.
json allGeluUntiedPredictor() {
  return withMod(denseModel("all_gelu_untied_c125_linear_pred", 64, 4, 3, 40,
                            "gelu", false),
                 modDesc(0.125, "all", "linear", "predictor", 32));
}
/// Every other layer at 12.5 %, sigmoid gate, aux loss, SwiGLU untied.
json everyOtherSigmoidAux() {
  return withMod(denseModel("eo_swiglu_untied_c125_sigmoid_aux", 32, 2, 2, 48,
                            "swiglu", false),
                 modDesc(0.125, "every_other", "sigmoid", "aux_loss"));
}
/// denseGeluUntied with every layer routed at capacity 1.0 and g = 1.
json capacityOneGateOne() {
  json m = withMod(denseGeluUntied(), modDesc(1.0, "all", "one", "none"));
  m["name"] = "all_gelu_untied_c100_one";
  return m;
}

/// Grouped-query attention, 2 key/value heads of 4, every other layer
/// routed at 25 %, linear gate, predictor.
json gqaEveryOtherPredictor() {
  return modtest::withKvHeads(
      withMod(denseModel("gqa_kv2_swiglu_tied_c25_linear_pred", 32, 4, 2, 24,
                         "swiglu", true),
              modDesc(0.25, "every_other", "linear", "predictor", 16)),
      2);
}
/// Multi-query attention (one key/value head of 4), every layer routed at
/// 50 %, sigmoid gate, aux loss, GELU untied.
json mqaAllAux() {
  return modtest::withKvHeads(
      withMod(denseModel("mqa_kv1_gelu_untied_c50_sigmoid_aux", 32, 4, 2, 16,
                         "gelu", false),
              modDesc(0.5, "all", "sigmoid", "aux_loss")),
      1);
}

struct Case {
  std::string name;
  json desc;
  int64_t batch;
  RouteMode mode;
  uint64_t seed;
};

/// Prints a case by name in gtest messages (instead of its bytes).
void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

std::vector<Case> allCases() {
  std::vector<Case> cases;
  uint64_t seed = 100;
  auto add = [&](const std::string &name, const json &desc, bool causal) {
    for (int64_t b : {1, 3}) {
      cases.push_back({name + "_B" + std::to_string(b) + "_topk", desc, b,
                       RouteMode::TopK, seed++});
      if (causal)
        cases.push_back({name + "_B" + std::to_string(b) + "_causal", desc, b,
                         RouteMode::Causal, seed++});
    }
  };
  add("DenseSwigluTied", denseSwigluTied(), false);
  add("DenseGeluUntied", denseGeluUntied(), false);
  add("EveryOtherSwigluTiedC125LinearAux", everyOtherSwigluTied(), true);
  add("AllGeluUntiedOneTokenSigmoidPredictor", allOneToken(), true);
  add("ListSwigluUntiedC100SigmoidNone", listFullCapacity(), false);
  add("ScheduleNoneGeluTied", scheduleNone(), false);
  add("AllGeluUntiedC125LinearPredictor", allGeluUntiedPredictor(), true);
  add("EveryOtherSwigluUntiedC125SigmoidAux", everyOtherSigmoidAux(), true);
  add("AllGeluUntiedC100GateOne", capacityOneGateOne(), false);
  add("GqaKv2EveryOtherSwigluTiedC25LinearPredictor", gqaEveryOtherPredictor(),
      true);
  add("MqaKv1AllGeluUntiedC50SigmoidAux", mqaAllAux(), true);
  return cases;
}

/// Random weights and tokens for which no routing decision sits within
/// float rounding of its threshold (reseeding otherwise).
struct Instance {
  modref::Weights weights;
  std::vector<int32_t> tokens;
  modref::ReferenceOutput ref;
};

Instance makeInstance(const modref::ModelConfig &config, int64_t batch,
                      RouteMode mode, uint64_t seed) {
  Instance inst;
  for (int attempt = 0; attempt < 50; ++attempt) {
    uint64_t s = seed + 7919ull * attempt;
    inst.weights = modtest::randomWeights(config, s);
    inst.tokens =
        modtest::randomTokens(batch, config.seqLen, config.vocabSize, s);
    inst.ref = modref::forward(config, inst.weights, inst.tokens, batch, mode);
    if (modtest::routingMargin(config, inst.ref, batch, mode) > 1e-4)
      return inst;
  }
  ADD_FAILURE() << "no well-conditioned random instance found";
  return inst;
}

//===----------------------------------------------------------------------===//
// Tests
//===----------------------------------------------------------------------===//

class CompiledVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CompiledVsReference, LogitsAndRouting) {
  const Case &c = GetParam();
  modref::ModelConfig config = modref::ModelConfig::fromJson(c.desc);
  const modrt::Package *pkg = package(c.desc);
  ASSERT_NE(pkg, nullptr);
  Instance inst = makeInstance(config, c.batch, c.mode, c.seed);
  modrt::TensorMap weights = toTensorMap(inst.weights, config, pkg->manifest());
  ASSERT_FALSE(HasFailure());

  modrt::ForwardResult got;
  try {
    got = pkg->forward(weights, inst.tokens, c.batch, toRuntime(c.mode));
  } catch (const modrt::Error &e) {
    FAIL() << "forward failed: " << e.what();
  }
  ASSERT_EQ(got.logits.size(), inst.ref.logits.size());
  ASSERT_EQ(got.routed.size(), inst.ref.routed.size());

  // Routing first: a wrong mask explains a wrong logit.
  const int64_t S = config.seqLen;
  for (size_t l = 0; l < got.routed.size(); ++l) {
    ASSERT_EQ(got.routed[l].size(), inst.ref.routed[l].size());
    for (int64_t i = 0; i < c.batch * S; ++i)
      ASSERT_EQ(got.routed[l][i], inst.ref.routed[l][i])
          << "routed layer #" << l << ", sequence " << i / S << ", position "
          << i % S << ", reference r = " << inst.ref.routerLogits[l][i]
          << (inst.ref.predictorLogits.empty()
                  ? std::string()
                  : ", reference p = " +
                        std::to_string(inst.ref.predictorLogits[l][i]));
  }
  if (c.mode == RouteMode::TopK)
    for (size_t l = 0; l < got.routed.size(); ++l)
      for (int64_t b = 0; b < c.batch; ++b) {
        int64_t count = 0;
        for (int64_t i = 0; i < S; ++i)
          count += got.routed[l][b * S + i];
        EXPECT_EQ(count, config.capacity) << "layer #" << l << " seq " << b;
      }

  double err = modtest::relativeError(got.logits, inst.ref.logits);
  EXPECT_LE(err, kLogitsTolerance) << c.name;
  RecordProperty("relative_error", std::to_string(err));
}

INSTANTIATE_TEST_SUITE_P(Matrix, CompiledVsReference,
                         ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

/// The manifest describes exactly the model of the description:
/// docs/model-format.md section 2 names and shapes, routed layers and their
/// capacity k.
class ManifestMatchesSpec : public ::testing::TestWithParam<json> {};

TEST_P(ManifestMatchesSpec, ParamsAndLayers) {
  const json &desc = GetParam();
  modref::ModelConfig config = modref::ModelConfig::fromJson(desc);
  const modrt::Package *pkg = package(desc);
  ASSERT_NE(pkg, nullptr);
  const modrt::Manifest &m = pkg->manifest();

  std::map<std::string, std::vector<int64_t>> expected, got;
  for (auto &[name, shape] : modref::parameterShapes(config))
    expected[name] = shape;
  for (const modrt::ParamInfo &p : m.params)
    got[p.name] = p.shape;
  EXPECT_EQ(got, expected);

  ASSERT_EQ(static_cast<int64_t>(m.layers.size()), config.nLayers);
  std::vector<int> routed;
  for (int64_t l = 0; l < config.nLayers; ++l) {
    EXPECT_EQ(m.layers[l].routed, static_cast<bool>(config.routed[l]))
        << "layer " << l;
    if (config.routed[l]) {
      EXPECT_EQ(m.layers[l].capacity, config.capacity) << "layer " << l;
      routed.push_back(static_cast<int>(l));
    }
  }
  EXPECT_EQ(m.routedLayers, routed);
  EXPECT_EQ(m.supportsCausal,
            config.causalRouter != modref::CausalRouter::None);
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, ManifestMatchesSpec,
    ::testing::Values(denseSwigluTied(), everyOtherSwigluTied(), allOneToken(),
                      listFullCapacity(), allGeluUntiedPredictor()),
    [](const ::testing::TestParamInfo<json> &info) {
      std::string n = info.param.at("name").get<std::string>();
      for (char &ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch)))
          ch = '_';
      return n;
    });

/// docs/model-format.md section 3: capacity 1.0 with g = 1 is the dense
/// layer. Both packages are compiled and run on the same weights.
TEST(CompiledEquivalence, FullCapacityGateOneEqualsDense) {
  json routedDesc = capacityOneGateOne();
  json denseDesc = denseGeluUntied();
  modref::ModelConfig routedCfg = modref::ModelConfig::fromJson(routedDesc);
  modref::ModelConfig denseCfg = modref::ModelConfig::fromJson(denseDesc);
  const modrt::Package *routed = package(routedDesc);
  const modrt::Package *dense = package(denseDesc);
  ASSERT_NE(routed, nullptr);
  ASSERT_NE(dense, nullptr);

  const int64_t batch = 3;
  modref::Weights w = modtest::randomWeights(routedCfg, 31);
  auto tokens =
      modtest::randomTokens(batch, denseCfg.seqLen, denseCfg.vocabSize, 32);
  modrt::ForwardResult r =
      routed->forward(toTensorMap(w, routedCfg, routed->manifest()), tokens,
                      batch, modrt::RouteMode::TopK);
  modrt::ForwardResult d =
      dense->forward(toTensorMap(w, denseCfg, dense->manifest()), tokens, batch,
                     modrt::RouteMode::TopK);
  ASSERT_EQ(r.routed.size(), static_cast<size_t>(denseCfg.nLayers));
  for (const auto &mask : r.routed)
    for (int32_t m : mask)
      ASSERT_EQ(m, 1);
  std::vector<double> dense64(d.logits.begin(), d.logits.end());
  // y = x + (a + m) against (x + a) + m: equal up to float rounding.
  EXPECT_LE(modtest::relativeError(r.logits, dense64), 2e-6);
}

/// docs/model-format.md section 4: mode `causal` is refused when
/// causal_router is none.
TEST(CompiledErrors, CausalModeRefusedWithoutCausalRouter) {
  json desc = listFullCapacity();
  modref::ModelConfig config = modref::ModelConfig::fromJson(desc);
  const modrt::Package *pkg = package(desc);
  ASSERT_NE(pkg, nullptr);
  EXPECT_FALSE(pkg->manifest().supportsCausal);
  modref::Weights w = modtest::randomWeights(config, 41);
  auto tokens = modtest::randomTokens(1, config.seqLen, config.vocabSize, 42);
  modrt::TensorMap weights = toTensorMap(w, config, pkg->manifest());
  try {
    pkg->forward(weights, tokens, 1, modrt::RouteMode::Causal);
    FAIL() << "causal mode ran on a package without a causal router";
  } catch (const modrt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("causal"), std::string::npos)
        << e.what();
  }
  // The reference refuses it too.
  EXPECT_THROW(modref::forward(config, w, tokens, 1, RouteMode::Causal),
               modref::ReferenceError);
}

} // namespace
