//===- GradTest.cpp - Compiled training gradients against the fp64 oracle -===//
//
// Every configuration is compiled with the real `modc` (CompiledPackages.h),
// given random weights and random tokens [B, S + 1], and its gradient entry
// (modrt::Package::grad) is compared with the reference of docs/model-format.md
// sections 4 and 5: the losses with the fp64 reference loss (relative error
// <= 1e-5 each), every gradient tensor with central finite differences of that
// loss in double under the stop-gradient semantics (max|ours - ref| / max|ref|
// <= 1e-3 per tensor, the worst coordinate named on failure).
//
// Top-k is a constant of the gradient: instances whose routing margin is
// within float rounding, or within the finite-difference step, are redrawn.
//
// Every package must carry the training entries (entries.grad, adamw).
//
//===----------------------------------------------------------------------===//

#include "CompiledPackages.h"
#include "ReferenceModel.h"
#include "TestModels.h"

#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <utility>

using modref::RouteMode;
using modtest::package;
using modtest::tinyModel;
using modtest::toTensorMap;
using modtest::withMod;
using nlohmann::json;

namespace {

constexpr double kLossTolerance = 1e-5;
constexpr double kGradTolerance = 1e-3;


//===----------------------------------------------------------------------===//
// The configuration matrix
//===----------------------------------------------------------------------===//

json modObject(json capacity, json schedule, const std::string &gate,
               const std::string &router, double auxWeight) {
  json m = {{"schedule", std::move(schedule)},
            {"gate", gate},
            {"causal_router", router},
            {"aux_loss_weight", auxWeight}};
  if (capacity.is_number_integer())
    m["capacity_tokens"] = capacity;
  else
    m["capacity"] = capacity;
  if (router == "predictor")
    m["predictor_hidden"] = 16;
  return m;
}

struct Case {
  std::string name;
  json desc;
  uint64_t seed;
  /// 0: finite differences over every coordinate; otherwise this many random
  /// coordinates per tensor (every one of a smaller tensor).
  int64_t coordsPerTensor = 0;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

std::vector<Case> gradCases() {
  std::vector<Case> cases;
  uint64_t seed = 500;
  auto add = [&](const std::string &name, json desc, int64_t coords = 0) {
    desc["name"] = "grad_" + name;
    cases.push_back({name, std::move(desc), seed++, coords});
  };
  // Tiny models (d_model 16, 2 heads, d_ff 32, vocab 32): full FD.
  add("DenseSwigluUntied", tinyModel("", 2, 8, "swiglu", false));
  add("EveryOtherSwigluTiedC125LinearAux",
      withMod(tinyModel("", 2, 12, "swiglu", true),
              modObject(0.125, "every_other", "linear", "aux_loss", 0.01)));
  add("AllGeluUntiedC125SigmoidAux",
      withMod(tinyModel("", 3, 12, "gelu", false),
              modObject(0.125, "all", "sigmoid", "aux_loss", 0.5)));
  add("EveryOtherGeluTiedC100LinearAux",
      withMod(tinyModel("", 2, 8, "gelu", true),
              modObject(1.0, "every_other", "linear", "aux_loss", 0.5)));
  add("AllGeluUntiedOneTokenSigmoidPredictor",
      withMod(tinyModel("", 2, 8, "gelu", false),
              modObject(1, "all", "sigmoid", "predictor", 0.01)));
  add("EveryOtherSwigluTiedC125LinearPredictor",
      withMod(tinyModel("", 3, 10, "swiglu", true),
              modObject(0.125, "every_other", "linear", "predictor", 0.5)));
  add("AllSwigluUntiedC100SigmoidPredictor",
      withMod(tinyModel("", 2, 8, "swiglu", false),
              modObject(1.0, "all", "sigmoid", "predictor", 0.5)));
  add("AllSwigluUntiedC100SigmoidNone",
      withMod(tinyModel("", 2, 8, "swiglu", false),
              modObject(1.0, "all", "sigmoid", "none", 0.01)));
  add("EveryOtherGeluTiedOneTokenLinearNone",
      withMod(tinyModel("", 2, 8, "gelu", true),
              modObject(1, "every_other", "linear", "none", 0.01)));
  // Grouped-query attention (4 heads of 4 in d_model 16): 2 key/value
  // heads, and one (multi-query), each with routed layers; full FD.
  add("GqaKv2EveryOtherSwigluTiedC25LinearPredictor",
      modtest::withKvHeads(
          withMod(modtest::denseModel("", 16, 4, 2, 8, "swiglu", true, 32, 32),
                  modObject(0.25, "every_other", "linear", "predictor", 0.5)),
          2));
  add("MqaKv1AllGeluUntiedC50SigmoidAux",
      modtest::withKvHeads(
          withMod(modtest::denseModel("", 16, 4, 2, 8, "gelu", false, 32, 32),
                  modObject(0.5, "all", "sigmoid", "aux_loss", 0.5)),
          1));
  // A larger model, FD on 64 random coordinates per tensor.
  add("Larger_AllSwigluUntiedC125LinearAux",
      withMod(modtest::denseModel("", 32, 4, 2, 16, "swiglu", false, 64, 64),
              modObject(0.125, "all", "linear", "aux_loss", 0.1)),
      64);
  return cases;
}

//===----------------------------------------------------------------------===//
// Instances and the test
//===----------------------------------------------------------------------===//

/// Random weights and tokens [B, S + 1] whose top-k is well separated both
/// for float rounding (the compiled forward must pick the same tokens) and
/// for the finite-difference steps (no evaluation may change it).
struct Instance {
  modref::Weights weights;
  std::vector<int32_t> tokens;
  modref::FdGradient ref;
  bool ok = false;
};

Instance makeInstance(const modref::ModelConfig &config, int64_t batch,
                      uint64_t seed, int64_t coordsPerTensor) {
  Instance inst;
  const int64_t S = config.seqLen;
  for (int attempt = 0; attempt < 20; ++attempt) {
    uint64_t s = seed + 7919ull * attempt;
    inst.weights = modtest::randomWeights(config, s);
    inst.tokens =
        modtest::randomTrainingTokens(batch, S, config.vocabSize, s + 1);
    std::vector<int32_t> inputs;
    for (int64_t b = 0; b < batch; ++b)
      inputs.insert(inputs.end(), inst.tokens.begin() + b * (S + 1),
                    inst.tokens.begin() + b * (S + 1) + S);
    modref::ReferenceOutput fwd =
        modref::forward(config, inst.weights, inputs, batch, RouteMode::TopK);
    if (modtest::routingMargin(config, fwd, batch, RouteMode::TopK) <= 1e-4)
      continue;
    modref::FdOptions opt;
    opt.coordsPerTensor = coordsPerTensor;
    opt.seed = s;
    inst.ref = modref::referenceGradient(config, inst.weights, inst.tokens,
                                         batch, opt);
    if (inst.ref.selectionChanges != 0)
      continue;
    inst.ok = true;
    return inst;
  }
  return inst;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// "[i, j]" of a flat index.
std::string indexString(int64_t flat, const std::vector<int64_t> &shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return shapeString(idx);
}

class CompiledGradVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(CompiledGradVsReference, LossesAndGradients) {
  const Case &c = GetParam();
  const int64_t batch = 2;
  modref::ModelConfig config = modref::ModelConfig::fromJson(c.desc);
  const modrt::Package *pkg = package(c.desc);
  ASSERT_NE(pkg, nullptr);
  // modc always emits the training entries: their absence is a regression.
  ASSERT_TRUE(pkg->manifest().supportsTraining)
      << "the package has no training entries (manifest entries.grad and "
         "entries.adamw absent)";

  Instance inst = makeInstance(config, batch, c.seed, c.coordsPerTensor);
  ASSERT_TRUE(inst.ok) << "no instance with a well-separated top-k found";
  modrt::TensorMap weights = toTensorMap(inst.weights, config, pkg->manifest());
  ASSERT_FALSE(HasFailure());

  EXPECT_EQ(pkg->manifest().auxLossWeight,
            config.hasMod ? config.auxLossWeight : 0.0);

  modrt::GradResult got;
  try {
    got = pkg->grad(weights, inst.tokens, batch);
  } catch (const modrt::Error &e) {
    FAIL() << "grad failed: " << e.what();
  }

  // Losses.
  const modref::LossBreakdown &ref = inst.ref.base;
  auto lossOk = [](double ours, double theirs) {
    return std::isfinite(ours) &&
           std::abs(ours - theirs) <= kLossTolerance * std::abs(theirs) + 1e-9;
  };
  EXPECT_PRED2(lossOk, got.losses.ce, ref.ce) << "cross-entropy";
  EXPECT_PRED2(lossOk, got.losses.aux, ref.aux)
      << "L_aux (unweighted; router BCE " << ref.routerBce << ", predictor BCE "
      << ref.predictorBce << ")";
  EXPECT_PRED2(lossOk, got.losses.total, ref.total)
      << "total = ce + " << config.auxLossWeight << " * L_aux";

  // Gradients: exactly the manifest's parameters, each with its shape.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, shape] : modref::parameterShapes(config))
    shapes[name] = shape;
  for (const auto &entry : got.grads)
    EXPECT_TRUE(shapes.count(entry.first))
        << "gradient '" << entry.first << "' is not a parameter";
  double worstRel = 0.0;
  for (const auto &[name, shape] : shapes) {
    const modrt::Tensor *t = got.grads.find(name);
    if (!t) {
      ADD_FAILURE() << "no gradient for '" << name << "'";
      continue;
    }
    if (t->dtype != modrt::DType::F32 || t->shape != shape) {
      ADD_FAILURE() << "gradient '" << name << "' has shape "
                    << shapeString(t->shape) << ", expected F32 "
                    << shapeString(shape);
      continue;
    }
    modtest::TensorGradError e = modtest::compareGradient(
        t->f32(), inst.ref.grad.at(name), inst.ref.coords.at(name));
    worstRel = std::max(worstRel, e.relative);
    EXPECT_LE(e.relative, kGradTolerance)
        << name << ": max|ours - ref| / max|ref| = " << e.relative
        << " (max|ref| = " << e.maxRef << "), worst at "
        << indexString(e.worstIndex, shape) << ": ours " << e.worstOurs
        << ", reference " << e.worstRef << " ("
        << inst.ref.coords.at(name).size() << " coordinates checked)";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", worstRel);
  RecordProperty("worst_tensor_relative_error", buf);
}

INSTANTIATE_TEST_SUITE_P(Matrix, CompiledGradVsReference,
                         ::testing::ValuesIn(gradCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

} // namespace
