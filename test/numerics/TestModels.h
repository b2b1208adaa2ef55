//===- TestModels.h - Model descriptions and random inputs for tests -*- C++
//-*-===//
//
// Helpers shared by the reference self-tests and the compiled-vs-reference
// tests: a builder for model descriptions (docs/model-format.md),
// deterministic random weights (generated in float so the reference sees
// exactly the values the package sees), random tokens, and error measures.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_NUMERICS_TESTMODELS_H
#define MODC_TEST_NUMERICS_TESTMODELS_H

#include "ReferenceModel.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace modtest {

/// A model description (docs/model-format.md section 1) with every key
/// spelled out.
inline nlohmann::json denseModel(const std::string &name, int64_t dModel,
                                 int64_t nHeads, int64_t nLayers,
                                 int64_t seqLen, const std::string &mlp,
                                 bool tied, int64_t vocab = 256,
                                 int64_t dFF = 0) {
  return {{"name", name},           {"vocab_size", vocab},
          {"d_model", dModel},      {"n_layers", nLayers},
          {"n_heads", nHeads},      {"d_ff", dFF ? dFF : 2 * dModel},
          {"seq_len", seqLen},      {"mlp", mlp},
          {"norm_eps", 1e-5},       {"rope_theta", 10000.0},
          {"tie_embeddings", tied}, {"dtype", "f32"}};
}

/// `base` with grouped-query attention: `kvHeads` key/value heads
/// (docs/model-format.md section 3).
inline nlohmann::json withKvHeads(nlohmann::json base, int64_t kvHeads) {
  base["n_kv_heads"] = kvHeads;
  return base;
}

/// `base` with a `mod` object added.
inline nlohmann::json withMod(nlohmann::json base, nlohmann::json mod) {
  base["mod"] = std::move(mod);
  return base;
}

/// A deterministic standard normal stream (Box-Muller on mt19937_64, so the
/// values do not depend on the standard library's distribution code).
class Normal {
public:
  explicit Normal(uint64_t seed) : gen(seed) {}
  double operator()() {
    if (hasSpare) {
      hasSpare = false;
      return spare;
    }
    double u1, u2;
    do {
      u1 = uniform();
    } while (u1 <= 1e-300);
    u2 = uniform();
    double rad = std::sqrt(-2.0 * std::log(u1));
    spare = rad * std::sin(2.0 * M_PI * u2);
    hasSpare = true;
    return rad * std::cos(2.0 * M_PI * u2);
  }
  double uniform() { return (gen() >> 11) * (1.0 / 9007199254740992.0); }
  uint64_t next() { return gen(); }

private:
  std::mt19937_64 gen;
  bool hasSpare = false;
  double spare = 0.0;
};

/// Random weights for every parameter of `config`, rounded to float:
/// - embeddings N(0, 1), so the residual stream has RMS about 1;
/// - norm weights 1 + N(0, 0.1);
/// - projections N(0, 1/fan_in), so activations stay O(1);
/// - routers N(0, 1/d): router logits are O(1) and spread out, so top-k is
///   neither trivial nor tie-prone;
/// - predictors: N(0, 1/fan_in) weights with small random biases, so that in
///   causal mode some tokens but not all route.
inline modref::Weights randomWeights(const modref::ModelConfig &config,
                                     uint64_t seed) {
  Normal rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  modref::Weights w;
  for (const auto &[name, shape] : modref::parameterShapes(config)) {
    int64_t n = 1;
    for (int64_t s : shape)
      n *= s;
    int64_t fanIn = shape.back();
    auto endsWith = [&](const std::string &suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
                 0;
    };
    double mean = 0.0, std = 1.0 / std::sqrt(static_cast<double>(fanIn));
    if (name == "embed.weight") {
      std = 1.0;
    } else if (endsWith("norm.weight")) {
      mean = 1.0;
      std = 0.1;
    } else if (endsWith(".bias")) {
      std = 0.2;
    }
    std::vector<double> v(n);
    for (double &e : v)
      e = static_cast<double>(static_cast<float>(mean + std * rng()));
    w[name] = std::move(v);
  }
  return w;
}

/// Uniform random tokens in [0, vocab), [batch, seqLen].
inline std::vector<int32_t> randomTokens(int64_t batch, int64_t seqLen,
                                         int64_t vocab, uint64_t seed) {
  Normal rng(seed * 0xD1B54A32D192ED03ull + 777);
  std::vector<int32_t> t(batch * seqLen);
  for (int32_t &e : t)
    e = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));
  return t;
}

/// max|a - b| / max|b|.
template <typename A>
double relativeError(const std::vector<A> &ours,
                     const std::vector<double> &ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double o = static_cast<double>(ours[i]);
    if (!std::isfinite(o))
      return std::numeric_limits<double>::infinity();
    num = std::max(num, std::abs(o - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return den > 0.0 ? num / den : num;
}

/// The smallest distance, over all routed layers and sequences, of a routing
/// decision from its threshold, relative to the spread of the scores: the
/// gap between the k-th and (k+1)-th router logit in top-k mode, |r| or |p|
/// in causal mode. A tiny margin means float rounding may legitimately flip
/// a decision, so tests reseed rather than compare such an instance.
inline double routingMargin(const modref::ModelConfig &config,
                            const modref::ReferenceOutput &out, int64_t batch,
                            modref::RouteMode mode) {
  const int64_t S = config.seqLen;
  double margin = std::numeric_limits<double>::infinity();
  for (size_t l = 0; l < out.routerLogits.size(); ++l) {
    const std::vector<double> &scores =
        mode == modref::RouteMode::Causal &&
                config.causalRouter == modref::CausalRouter::Predictor
            ? out.predictorLogits[l]
            : out.routerLogits[l];
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> s(scores.begin() + b * S,
                            scores.begin() + (b + 1) * S);
      double scale = 1e-30;
      for (double e : s)
        scale = std::max(scale, std::abs(e));
      if (mode == modref::RouteMode::TopK) {
        if (config.capacity >= S)
          continue;
        std::sort(s.begin(), s.end(), std::greater<double>());
        double gap = s[config.capacity - 1] - s[config.capacity];
        // An exact tie (repeated tokens before any layer changed them) is
        // well defined, ties go to the lower position, and worth testing.
        if (gap != 0.0)
          margin = std::min(margin, gap / scale);
      } else {
        for (double e : s)
          margin = std::min(margin, std::abs(e) / scale);
      }
    }
  }
  return margin;
}

/// A tiny model for finite-difference gradients (a few thousand
/// parameters): d_model 16, 2 heads, d_ff 32, vocab 32.
inline nlohmann::json tinyModel(const std::string &name, int64_t nLayers,
                                int64_t seqLen, const std::string &mlp,
                                bool tied) {
  return denseModel(name, 16, 2, nLayers, seqLen, mlp, tied, 32, 32);
}

/// Training tokens: uniform in [0, vocab), [batch, seqLen + 1] (inputs
/// t[:, :S], targets t[:, 1:]).
inline std::vector<int32_t> randomTrainingTokens(int64_t batch, int64_t seqLen,
                                                 int64_t vocab, uint64_t seed) {
  return randomTokens(batch, seqLen + 1, vocab, seed);
}

/// One tensor of a gradient comparison: max|ours - ref| / max|ref| over the
/// evaluated coordinates, and the worst coordinate.
struct TensorGradError {
  double relative = 0.0;
  double maxRef = 0.0;
  int64_t worstIndex = -1;
  double worstOurs = 0.0, worstRef = 0.0;
};

/// Compares `ours` with the reference `ref` at `coords` (every coordinate
/// when empty). A non-finite value of ours counts as an infinite error.
template <typename A>
TensorGradError compareGradient(const A *ours, const std::vector<double> &ref,
                                const std::vector<int64_t> &coords) {
  TensorGradError e;
  double worstAbs = -1.0;
  auto visit = [&](int64_t i) {
    double o = static_cast<double>(ours[i]);
    double diff = std::isfinite(o) ? std::abs(o - ref[i])
                                   : std::numeric_limits<double>::infinity();
    e.maxRef = std::max(e.maxRef, std::abs(ref[i]));
    if (diff > worstAbs) {
      worstAbs = diff;
      e.worstIndex = i;
      e.worstOurs = o;
      e.worstRef = ref[i];
    }
  };
  if (coords.empty())
    for (size_t i = 0; i < ref.size(); ++i)
      visit(static_cast<int64_t>(i));
  else
    for (int64_t i : coords)
      visit(i);
  if (worstAbs < 0.0)
    return e;
  e.relative = e.maxRef > 0.0 ? worstAbs / e.maxRef : worstAbs;
  return e;
}

} // namespace modtest

#endif // MODC_TEST_NUMERICS_TESTMODELS_H
