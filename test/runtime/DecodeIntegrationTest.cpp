//===- DecodeIntegrationTest.cpp - Decoding real compiled packages -------===//
//
// Compiles small models with the real modc (predictor and aux_loss routers,
// schedules every_other and all, and a dense model) and checks
// docs/model-format.md section 4 through the runtime:
//   - decoding token by token (DecodeSession, a batch of 3 prompts of
//     lengths 5, 17 and 32 stepped in lockstep) gives the logits of the
//     full-sequence causal forward at every prompt position (relative error
//     <= 1e-5 per row) with identical routing decisions, and the cache
//     counts say what was routed; pausing a sequence (inactive for some
//     steps) leaves it as it was;
//   - greedy generation is deterministic and each greedy byte is the argmax
//     of the causal forward's logits over the generated text;
//   - seeded sampling is reproducible, and modrun sample prints what
//     modrt::generate returns;
//   - with a 300-token BPE (test/data/tokenizer) on a model of vocab_size
//     300, generate samples and decodes ids above the bytes exactly as a
//     hand-driven DecodeSession does, and modrun sample prints the same.
// Built only when the compiler is part of the build.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "modrt/Generate.h"
#include "modrt/Package.h"
#include "modrt/Tokenizer.h"

#include "ModcPackages.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace modrt;
using namespace modrt_test;
using nlohmann::json;

namespace {

constexpr int64_t kSeqLen = 32;

json model(const std::string &name, int nLayers, const json &mod) {
  json m = {{"name", name},         {"vocab_size", 256},
            {"d_model", 32},        {"n_layers", nLayers},
            {"n_heads", 2},         {"d_ff", 64},
            {"seq_len", kSeqLen},   {"mlp", "swiglu"},
            {"norm_eps", 1e-5},     {"rope_theta", 10000.0},
            {"tie_embeddings", true}, {"dtype", "f32"}};
  if (!mod.is_null())
    m["mod"] = mod;
  return m;
}

json mod(const char *router, const char *schedule, double capacity = 0.5,
         const char *gate = "linear") {
  json m = {{"capacity", capacity},
            {"schedule", schedule},
            {"gate", gate},
            {"causal_router", router},
            {"aux_loss_weight", 0.01}};
  if (std::string(router) == "predictor")
    m["predictor_hidden"] = 16;
  return m;
}

/// The models under test, by name.
json modelFor(const std::string &name) {
  if (name == "predictor-every-other")
    return model(name, 4, mod("predictor", "every_other"));
  if (name == "predictor-all")
    return model(name, 2, mod("predictor", "all", 0.25, "sigmoid"));
  if (name == "aux-every-other")
    return model(name, 4, mod("aux_loss", "every_other", 0.25));
  if (name == "aux-all") {
    json m = model(name, 3, mod("aux_loss", "all"));
    m["mlp"] = "gelu";
    return m;
  }
  if (name == "dense")
    return model(name, 2, json());
  if (name == "predictor-every-other-bf16") {
    // bf16 products, q/k/v and a bf16 KV cache (half the bytes).
    json m = model(name, 4, mod("predictor", "every_other"));
    m["dtype"] = "bf16";
    return m;
  }
  if (name == "gqa-predictor-every-other") {
    // Grouped-query attention: 2 key/value heads of 4, a smaller cache.
    json m = model(name, 2, mod("predictor", "every_other"));
    m["n_heads"] = 4;
    m["n_kv_heads"] = 2;
    return m;
  }
  if (name == "mqa-aux-all") {
    // Multi-query attention: one key/value head of 4.
    json m = model(name, 2, mod("aux_loss", "all", 0.25));
    m["n_heads"] = 4;
    m["n_kv_heads"] = 1;
    return m;
  }
  throw std::runtime_error("unknown model " + name);
}

/// Compiles `m` once per modc binary (cached on disk across test processes)
/// and returns the package directory, or "" after recording a failure.
std::string packageDir(const json &m) {
  return modtest::compiledPackageDir(m, DECODE_CACHE_DIR);
}

/// max |a - b| / max |b| over one row of `n` values.
double relErr(const float *a, const float *b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

class DecodeIntegrationTest : public ::testing::TestWithParam<std::string> {
protected:
  bool bf16() const { return pkg->manifest().dtype == "bf16"; }
  /// Decode against the forward pass: the same arithmetic in another order,
  /// within f32 rounding; in a bf16 model an f32 sum on either side of a
  /// bf16 rounding boundary moves a value by a bf16 step, so within 1e-2.
  double tolerance() const { return bf16() ? 1e-2 : 1e-5; }
  std::string dir;
  std::unique_ptr<Package> pkg;
  TensorMap weights;

  void SetUp() override {
    dir = packageDir(modelFor(GetParam()));
    ASSERT_FALSE(dir.empty());
    pkg = std::make_unique<Package>(Package::open(dir));
    ASSERT_TRUE(pkg->manifest().supportsDecode) << dir;
    weights = pkg->initWeights(17);
  }

  /// Causal mode, or top-k for a dense model (the same model without
  /// routed layers; a dense package lists only topk).
  RouteMode causalMode() const {
    return pkg->manifest().routedLayers.empty() ? RouteMode::TopK
                                                : RouteMode::Causal;
  }
};

} // namespace

TEST_P(DecodeIntegrationTest, DecodeEqualsCausalForward) {
  const Manifest &m = pkg->manifest();
  const int64_t B = 3, S = m.seqLen, V = m.vocabSize;
  const size_t nRouted = m.routedLayers.size();
  const std::vector<int64_t> lengths = {5, 17, S};
  // Prompts of random bytes, padded to seq_len with other random bytes for
  // the full forward (positions past a prompt's end are not compared).
  std::mt19937_64 gen(4242);
  std::vector<int32_t> tokens(B * S);
  for (int32_t &t : tokens)
    t = static_cast<int32_t>(gen() % 256);
  ForwardResult f = pkg->forward(weights, tokens, B, causalMode());

  DecodeSession s(*pkg, weights, B);
  EXPECT_EQ(s.kvBytesReserved(), pkg->kvCacheBytes(B));
  std::vector<int64_t> routedCount(nRouted * B, 0);
  double worst = 0;
  for (int64_t t = 0; t < S; ++t) {
    std::vector<int32_t> step(B);
    std::vector<uint8_t> active(B);
    for (int64_t b = 0; b < B; ++b) {
      active[b] = t < lengths[b];
      step[b] = active[b] ? tokens[b * S + t] : 0;
    }
    StepResult r = s.step(step, active);
    for (int64_t b = 0; b < B; ++b) {
      if (!active[b])
        continue;
      double e = relErr(r.logits.data() + b * V,
                        f.logits.data() + (b * S + t) * V, V);
      worst = std::max(worst, e);
      EXPECT_LE(e, tolerance()) << "sequence " << b << ", position " << t;
      for (size_t l = 0; l < nRouted; ++l) {
        EXPECT_EQ(r.routed[l][b], f.routed[l][b * S + t])
            << "layer " << m.routedLayers[l] << ", sequence " << b
            << ", position " << t;
        routedCount[l * B + b] += r.routed[l][b];
      }
    }
    if (HasFailure())
      break;
  }
  std::printf("[ info ] %s: max relative error decode vs forward %.3g\n",
              GetParam().c_str(), worst);
  // The cache holds every token in a dense layer, the routed ones in a
  // routed layer; routing was exercised both ways.
  uint64_t cached = 0;
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(s.position(b), lengths[b]);
    for (const LayerInfo &layer : m.layers) {
      int64_t want = lengths[b];
      if (layer.routed) {
        size_t l = std::find(m.routedLayers.begin(), m.routedLayers.end(),
                             layer.index) -
                   m.routedLayers.begin();
        want = routedCount[l * B + b];
      }
      EXPECT_EQ(s.kvCount(layer.index, b), want)
          << "layer " << layer.index << ", sequence " << b;
      cached += static_cast<uint64_t>(want);
    }
  }
  // A cached token's K and V rows: n_kv_heads heads of d_model / n_heads.
  const int64_t heads = m.model["n_heads"];
  const int64_t kvWidth =
      m.model.value("n_kv_heads", heads) * (m.dModel / heads);
  EXPECT_EQ(s.kvBytesUsed(), cached * 2 * kvWidth * (bf16() ? 2 : 4));
  for (size_t l = 0; l < nRouted; ++l) {
    int64_t total = 0;
    for (int64_t b = 0; b < B; ++b)
      total += routedCount[l * B + b];
    EXPECT_GT(total, 0) << "layer " << m.routedLayers[l] << " routed nothing";
    EXPECT_LT(total, 5 + 17 + S)
        << "layer " << m.routedLayers[l] << " routed everything";
  }

  // reset and prefill: the same logits again at each prompt's end.
  s.reset();
  std::vector<std::vector<int32_t>> prompts(B);
  for (int64_t b = 0; b < B; ++b)
    prompts[b].assign(tokens.begin() + b * S,
                      tokens.begin() + b * S + lengths[b]);
  s.prefill(prompts);
  for (int64_t b = 0; b < B; ++b)
    EXPECT_LE(relErr(s.logits().data() + b * V,
                     f.logits.data() + (b * S + lengths[b] - 1) * V, V),
              tolerance())
        << "sequence " << b;
  // Sequence 2 is full.
  EXPECT_TRUE(throwsError([&] { s.step({1, 1, 1}, {0, 0, 1}); },
                          {"sequence 2 is full"}));

  // Pauses do not disturb a sequence: sequence 1 goes first to position 9,
  // then waits while sequence 0 runs its whole prompt, then finishes with
  // sequence 2 (inactive rows' cache and logits must stay as they were).
  s.reset();
  auto run = [&](int64_t b, int64_t from, int64_t to) {
    for (int64_t t = from; t < to; ++t) {
      std::vector<int32_t> step(B, 0);
      std::vector<uint8_t> active(B, 0);
      step[b] = tokens[b * S + t];
      active[b] = 1;
      s.step(step, active);
    }
  };
  run(1, 0, 9);
  run(0, 0, lengths[0]);
  run(2, 0, 20);
  run(1, 9, lengths[1]);
  run(2, 20, lengths[2]);
  for (int64_t b = 0; b < B; ++b)
    EXPECT_LE(relErr(s.logits().data() + b * V,
                     f.logits.data() + (b * S + lengths[b] - 1) * V, V),
              tolerance())
        << "sequence " << b << " after pauses";
}

TEST_P(DecodeIntegrationTest, GreedyIsDeterministicAndFollowsForward) {
  const Manifest &m = pkg->manifest();
  SamplingConfig greedy;
  greedy.temperature = 0;
  std::vector<std::string> prompts = {"The ", "Mixture-of-Depths "};
  std::vector<std::string> a = generate(*pkg, weights, prompts, 12, greedy);
  EXPECT_EQ(a, generate(*pkg, weights, prompts, 12, greedy));
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(a[i].size(), 12u);
    std::string text = prompts[i] + a[i];
    std::vector<int32_t> tokens(m.seqLen, 0);
    for (size_t j = 0; j < text.size(); ++j)
      tokens[j] = static_cast<unsigned char>(text[j]);
    ForwardResult f = pkg->forward(weights, tokens, 1, causalMode());
    for (size_t j = prompts[i].size(); j < text.size(); ++j) {
      const float *row = f.logits.data() + (j - 1) * m.vocabSize;
      int64_t best = 0;
      for (int64_t v = 1; v < 256; ++v)
        if (row[v] > row[best])
          best = v;
      // Skip a near-tie, where float noise may pick either.
      float second = -INFINITY;
      for (int64_t v = 0; v < 256; ++v)
        if (v != best)
          second = std::max(second, row[v]);
      if (row[best] - second < 1e-4f * std::max(1.0f, std::fabs(row[best])))
        continue;
      EXPECT_EQ(static_cast<unsigned char>(text[j]), best)
          << "prompt " << i << ", byte " << j;
    }
  }
}

TEST_P(DecodeIntegrationTest, SeededSamplingIsReproducible) {
  SamplingConfig c;
  c.temperature = 0.9;
  c.topK = 100;
  c.topP = 0.95;
  c.seed = 5;
  std::vector<std::string> prompts = {"a", "hello there", "xyz"};
  std::vector<std::string> a = generate(*pkg, weights, prompts, 16, c);
  EXPECT_EQ(a, generate(*pkg, weights, prompts, 16, c));
  c.seed = 6;
  EXPECT_NE(a, generate(*pkg, weights, prompts, 16, c));
  // A prompt near the end of the context is clamped there.
  std::string longPrompt(kSeqLen - 3, 'q');
  EXPECT_EQ(generate(*pkg, weights, {longPrompt}, 16, c)[0].size(), 3u);

  // modrun sample prints the same text.
  TempDir tmp;
  std::string w = tmp.path("w.safetensors");
  weights.save(w);
  std::string log = tmp.path("out");
  std::string cmd = std::string("'") + MODRUN_PATH + "' sample '" + dir +
                    "' --weights '" + w +
                    "' --prompt 'hello there' --max-new 16 --temperature 0.9 "
                    "--top-k 100 --top-p 0.95 --seed 5 2>/dev/null";
  int status = std::system((cmd + " >'" + log + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  c.seed = 5;
  EXPECT_EQ(readFile(log),
            generate(*pkg, weights, {"hello there"}, 16, c)[0] + "\n");
}

/// The cache holds K and V of n_kv_heads heads a layer (docs/model-format.md
/// section 4): the manifest's size, and what the runtime reserves.
TEST_P(DecodeIntegrationTest, KvCacheHoldsKeyValueHeads) {
  const Manifest &m = pkg->manifest();
  const json desc = modelFor(GetParam());
  const int64_t heads = desc["n_heads"], dModel = desc["d_model"];
  const int64_t kvHeads = desc.value("n_kv_heads", heads);
  const int64_t elem = bf16() ? 2 : 4;
  EXPECT_EQ(m.model.value("n_kv_heads", int64_t(0)), kvHeads);
  const uint64_t expected = uint64_t(desc["n_layers"].get<int64_t>()) * 2 *
                            uint64_t(m.seqLen) * uint64_t(kvHeads) *
                            uint64_t(dModel / heads) * uint64_t(elem);
  EXPECT_EQ(m.kvCacheBytesPerSequence, expected);
  EXPECT_EQ(pkg->kvCacheBytes(3), 3 * expected);
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeIntegrationTest,
                         ::testing::Values("predictor-every-other",
                                           "predictor-all", "aux-every-other",
                                           "aux-all", "dense",
                                           "predictor-every-other-bf16",
                                           "gqa-predictor-every-other",
                                           "mqa-aux-all"),
                         [](const auto &info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(DecodeBpeTest, TokensBeyondTheBytes) {
  json m = model("bpe-dense", 2, json());
  m["vocab_size"] = 300;
  std::string dir = packageDir(m);
  ASSERT_FALSE(dir.empty());
  Package pkg = Package::open(dir);
  TensorMap weights = pkg.initWeights(23);
  const std::string tj = TEST_DATA_DIR "/tokenizer/tokenizer.json";
  Tokenizer tok = Tokenizer::fromFile(tj);
  ASSERT_EQ(tok.vocabSize(), 300);
  const std::string prompt = "The quick brown fox";
  const int maxNew = 12;
  SamplingConfig c;
  c.seed = 5;
  // By hand: the prompt's tokens, then sampled ids fed back one at a time.
  std::vector<int32_t> ids = tok.encode(prompt);
  ASSERT_LE(ids.size() + maxNew, static_cast<size_t>(kSeqLen));
  DecodeSession s(pkg, weights, 1);
  s.prefill({ids});
  std::mt19937_64 rng = samplingStream(c.seed, 0);
  std::vector<int32_t> out;
  for (int n = 0; n < maxNew; ++n) {
    out.push_back(sampleToken(s.logits().data(), 300, c, rng));
    if (n + 1 < maxNew)
      s.step({out.back()}, {1});
  }
  EXPECT_TRUE(std::any_of(out.begin(), out.end(),
                          [](int32_t t) { return t >= 256; }))
      << "no merged token sampled: a weak test";
  std::string text = generate(pkg, weights, tok, {prompt}, maxNew, c)[0];
  EXPECT_EQ(text, tok.decode(out));

  // modrun sample prints the same text (whole characters, then a newline).
  TempDir tmp;
  std::string w = tmp.path("w.safetensors");
  weights.save(w);
  std::string log = tmp.path("out");
  std::string cmd = std::string("'") + MODRUN_PATH + "' sample '" + dir +
                    "' --weights '" + w + "' --prompt '" + prompt +
                    "' --max-new 12 --seed 5 --tokenizer '" + tj +
                    "' 2>/dev/null";
  int status = std::system((cmd + " >'" + log + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(readFile(log), text + "\n");
}
