//===- DecodeSessionTest.cpp - DecodeSession and generate on the fake ----===//
//
// The fake package's modc_decode is a test double with a closed form
// (FakeManifest.h): logits = forward logits of the token + 100 * position,
// plus on token 0 the sum of the tokens read back from the sequence's
// dense-layer cache. That makes the runtime's bookkeeping checkable: the
// position it passes, the cache it keeps between steps, rows of inactive
// sequences, the full-context error, reset, prefill in lockstep, and the
// byte-level generate loop built on top.
//
//===----------------------------------------------------------------------===//
#include "modrt/Generate.h"
#include "TestUtil.h"
#include "modrt/Package.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace modrt;
using namespace modrt_test;

namespace {

constexpr int64_t D = 4, S = 4;

class DecodeSessionTest : public ::testing::Test {
protected:
  TempDir tmp;

  Package open(const char *lib, const std::string &name = "pkg") {
    return Package::open(makeFakePackage(tmp.path(name), lib));
  }

  /// Weights whose router sends some of tokens 0..7 through layer 1 and not
  /// others (checked).
  static TensorMap weightsFor(const Package &pkg) {
    TensorMap w = pkg.initWeights(3);
    int routed = 0;
    for (int t = 0; t < 8; ++t)
      routed += decision(w, t);
    EXPECT_GT(routed, 0);
    EXPECT_LT(routed, 8);
    return w;
  }

  /// The router's causal decision for token t: router . E[t] > 0.
  static int decision(const TensorMap &w, int32_t t) {
    const float *E = w.get("embed.weight").f32();
    const float *R = w.get("blocks.1.router.weight").f32();
    float r = 0;
    for (int64_t j = 0; j < D; ++j)
      r += R[j] * E[t * D + j];
    return r > 0;
  }

  /// The fake decode's logits for token t at position p when the sequence's
  /// tokens so far (t included) sum to `history`.
  static std::vector<float> stepLogits(const TensorMap &w, int64_t V,
                                       int32_t t, int32_t p, float history) {
    const float *E = w.get("embed.weight").f32();
    const float *N = w.get("final_norm.weight").f32();
    std::vector<float> out(V);
    for (int64_t v = 0; v < V; ++v) {
      float acc = 0;
      for (int64_t j = 0; j < D; ++j)
        acc += E[t * D + j] * N[j] * E[v * D + j];
      out[v] = acc + 100.0f * p + (v == 0 ? history : 0.0f);
    }
    return out;
  }

  static std::vector<float> row(const std::vector<float> &logits, int64_t b,
                                int64_t V) {
    return std::vector<float>(logits.begin() + b * V,
                              logits.begin() + (b + 1) * V);
  }
};

} // namespace

TEST_F(DecodeSessionTest, PositionsAdvanceAndInactiveRowsStayPut) {
  Package pkg = open(FAKE_MODEL_V0);
  TensorMap w = weightsFor(pkg);
  DecodeSession s(pkg, w, 2);
  EXPECT_EQ(s.batch(), 2);
  EXPECT_EQ(s.vocab(), 8);
  EXPECT_EQ(s.contextLength(), 4);
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{0, 0}));
  EXPECT_GE(s.kvBytesReserved(), 2u * 256u);
  EXPECT_EQ(s.kvBytesUsed(), 0u);

  StepResult r = s.step({3, 5}, {1, 1});
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.vocab, 8);
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(row(r.logits, 0, 8), stepLogits(w, 8, 3, 0, 3));
  EXPECT_EQ(row(r.logits, 1, 8), stepLogits(w, 8, 5, 0, 5));
  ASSERT_EQ(r.routed.size(), 1u);
  EXPECT_EQ(r.routed[0], (std::vector<int32_t>{decision(w, 3), decision(w, 5)}));
  EXPECT_EQ(s.kvCount(0, 0), 1);
  EXPECT_EQ(s.kvCount(1, 0), decision(w, 3));
  EXPECT_EQ(s.kvCount(1, 1), decision(w, 5));

  // Only sequence 0 steps: sequence 1 keeps its logits, position, counts;
  // its token (out of range here) is ignored.
  std::vector<float> before1 = row(r.logits, 1, 8);
  StepResult r2 = s.step({2, 99}, {1, 0});
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(row(r2.logits, 0, 8), stepLogits(w, 8, 2, 1, 3 + 2));
  EXPECT_EQ(row(r2.logits, 1, 8), before1);
  EXPECT_EQ(r2.routed[0], (std::vector<int32_t>{decision(w, 2), 0}));
  EXPECT_EQ(s.kvCount(0, 0), 2);
  EXPECT_EQ(s.kvCount(0, 1), 1);
  EXPECT_EQ(s.kvCount(1, 1), decision(w, 5));
  EXPECT_EQ(s.logits(), r2.logits);
  // K and V of d_model floats each, for every cached token.
  uint64_t cached = 2 + 1 + decision(w, 3) + decision(w, 2) + decision(w, 5);
  EXPECT_EQ(s.kvBytesUsed(), cached * 2 * D * 4);
  EXPECT_EQ(s.kvCounts().size(), 4u);

  // No active sequence: nothing happens.
  StepResult r3 = s.step({0, 0}, {0, 0});
  EXPECT_EQ(r3.logits, r2.logits);
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{2, 1}));
}

TEST_F(DecodeSessionTest, FullContextIsAnError) {
  Package pkg = open(FAKE_MODEL_V0);
  TensorMap w = weightsFor(pkg);
  DecodeSession s(pkg, w, 2);
  for (int i = 0; i < S; ++i)
    s.step({1, 0}, {1, 0});
  EXPECT_EQ(s.position(0), 4);
  EXPECT_TRUE(throwsError([&] { s.step({1, 0}, {1, 0}); },
                          {"sequence 0 is full", "context is 4 tokens"}));
  EXPECT_TRUE(throwsError([&] { s.step({1, 1}, {1, 1}); },
                          {"sequence 0 is full"}));
  // Nothing changed, and sequence 1 still decodes.
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{4, 0}));
  s.step({0, 1}, {0, 1});
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{4, 1}));
}

TEST_F(DecodeSessionTest, ResetStartsOver) {
  Package pkg = open(FAKE_MODEL_V0);
  TensorMap w = weightsFor(pkg);
  DecodeSession s(pkg, w, 1);
  StepResult first = s.step({4}, {1});
  s.step({1}, {1});
  s.step({7}, {1});
  s.reset();
  EXPECT_EQ(s.position(0), 0);
  EXPECT_EQ(s.kvBytesUsed(), 0u);
  EXPECT_EQ(s.kvCounts(), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(s.logits(), std::vector<float>(8, 0.0f));
  // The fake checks position == cached count, and the history read back
  // from the cache starts over.
  StepResult again = s.step({4}, {1});
  EXPECT_EQ(again.logits, first.logits);
}

TEST_F(DecodeSessionTest, PrefillStepsInLockstepAndKeepsLastLogits) {
  Package pkg = open(FAKE_MODEL_V0);
  TensorMap w = weightsFor(pkg);
  DecodeSession s(pkg, w, 3);
  s.prefill({{1, 2, 3}, {4}, {}});
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{3, 1, 0}));
  EXPECT_EQ(row(s.logits(), 0, 8), stepLogits(w, 8, 3, 2, 1 + 2 + 3));
  EXPECT_EQ(row(s.logits(), 1, 8), stepLogits(w, 8, 4, 0, 4));
  EXPECT_EQ(row(s.logits(), 2, 8), std::vector<float>(8, 0.0f));
  // Appends to what is there; a prompt that does not fit fails up front.
  EXPECT_TRUE(throwsError([&] { s.prefill({{1, 1}, {}, {}}); },
                          {"prompt 0 has 2 tokens", "room for 1"}));
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{3, 1, 0}));
  EXPECT_TRUE(throwsError([&] { s.prefill({{}, {8}, {}}); },
                          {"token 8", "prompt 1", "[0, 8)"}));
  EXPECT_TRUE(throwsError([&] { s.prefill({{1}}); },
                          {"one prompt per sequence (3)"}));
  s.prefill({{5}, {}, {5, 5}});
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{4, 1, 2}));
}

TEST_F(DecodeSessionTest, DecisionsMatchTheCausalForward) {
  Package pkg = open(FAKE_MODEL_V0);
  TensorMap w = weightsFor(pkg);
  std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 5, 7, 1};
  std::vector<std::vector<int32_t>> decisions;
  ForwardResult f = pkg.forward(w, tokens, 2, RouteMode::Causal, &decisions);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0], f.routed[0]);
  // In topk mode, the causal decisions still say r > 0.
  std::vector<std::vector<int32_t>> topkDecisions;
  pkg.forward(w, tokens, 2, RouteMode::TopK, &topkDecisions);
  EXPECT_EQ(topkDecisions, decisions);

  DecodeSession s(pkg, w, 2);
  for (int64_t t = 0; t < S; ++t) {
    StepResult r = s.step({tokens[t], tokens[S + t]}, {1, 1});
    EXPECT_EQ(r.routed[0][0], f.routed[0][t]) << t;
    EXPECT_EQ(r.routed[0][1], f.routed[0][S + t]) << t;
  }
}

TEST_F(DecodeSessionTest, ErrorsAreNamed) {
  Package pkg = open(FAKE_MODEL_V0);
  TensorMap w = weightsFor(pkg);
  EXPECT_TRUE(throwsError([&] { DecodeSession(pkg, w, 0); },
                          {"batch must be >= 1"}));
  TensorMap wrong = w;
  wrong.get("final_norm.weight") = Tensor::zeros(DType::F32, {5});
  EXPECT_TRUE(throwsError([&] { DecodeSession(pkg, wrong, 1); },
                          {"final_norm.weight", "[5]"}));
  DecodeSession s(pkg, w, 2);
  EXPECT_TRUE(throwsError([&] { s.step({1}, {1, 1}); },
                          {"one token per sequence (2)"}));
  EXPECT_TRUE(throwsError([&] { s.step({1, 1}, {1}); },
                          {"one active flag per sequence (2)"}));
  EXPECT_TRUE(throwsError([&] { s.step({1, 8}, {1, 1}); },
                          {"token 8 of sequence 1", "[0, 8)"}));
  // The package's own refusal comes through with its message; positions
  // stay.
  EXPECT_TRUE(throwsError([&] { s.step({6, 1}, {1, 1}); },
                          {"decode failed", "token 6 at position 0"}));
  EXPECT_EQ(s.positions(), (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(throwsError([&] { s.kvCount(2, 0); }, {"layer 2"}));
  EXPECT_TRUE(throwsError([&] { s.position(2); }, {"sequence 2"}));
}

TEST_F(DecodeSessionTest, RouterNoneCannotDecode) {
  Package pkg = open(FAKE_MODEL_V4);
  EXPECT_FALSE(pkg.manifest().supportsDecode);
  TensorMap w = pkg.initWeights(1);
  const char *msg = "routed layers with causal_router none cannot decode; "
                    "compile with aux_loss or predictor";
  EXPECT_TRUE(throwsError([&] { DecodeSession(pkg, w, 1); }, {msg}));
  EXPECT_TRUE(throwsError(
      [&] { generate(pkg, w, {"\x01"}, 1, SamplingConfig()); }, {msg}));
  // Without a causal router, forward leaves the decisions empty.
  std::vector<std::vector<int32_t>> decisions = {{1}};
  pkg.forward(w, {0, 1, 2, 3}, 1, RouteMode::TopK, &decisions);
  EXPECT_TRUE(decisions.empty());
}

TEST_F(DecodeSessionTest, GenerateIsTheSamplingLoop) {
  // Variant 6 has the byte-level vocabulary (256); seq_len 4.
  Package pkg = open(FAKE_MODEL_V6);
  TensorMap w = pkg.initWeights(11);
  SamplingConfig greedy;
  greedy.temperature = 0;
  std::vector<std::pair<size_t, std::string>> streamed;
  std::vector<std::string> out =
      generate(pkg, w, {"ab", "xyz"}, 5, greedy,
               [&](size_t b, const std::string &piece) {
                 streamed.emplace_back(b, piece);
               });
  ASSERT_EQ(out.size(), 2u);
  // Clamped at the context: 4 - 2 and 4 - 3 bytes.
  EXPECT_EQ(out[0].size(), 2u);
  EXPECT_EQ(out[1].size(), 1u);
  // Streamed byte by byte, in step order.
  ASSERT_EQ(streamed.size(), 3u);
  EXPECT_EQ(streamed[0], std::make_pair(size_t(0), out[0].substr(0, 1)));
  EXPECT_EQ(streamed[1], std::make_pair(size_t(1), out[1].substr(0, 1)));
  EXPECT_EQ(streamed[2], std::make_pair(size_t(0), out[0].substr(1, 1)));

  // The same by hand: prefill, argmax, feed.
  DecodeSession s(pkg, w, 1);
  s.prefill({{'a', 'b'}});
  std::mt19937_64 rng(0);
  int32_t t1 = sampleToken(s.logits().data(), 256, greedy, rng);
  s.step({t1}, {1});
  int32_t t2 = sampleToken(s.logits().data(), 256, greedy, rng);
  EXPECT_EQ(out[0], std::string({static_cast<char>(t1), static_cast<char>(t2)}));

  // Seeded sampling: reproducible, and a prompt gives the same text alone
  // or in a batch.
  SamplingConfig hot;
  hot.temperature = 1000; // nearly uniform over 256 bytes
  hot.seed = 77;
  std::vector<std::string> a = generate(pkg, w, {"a", "b", "c"}, 3, hot);
  EXPECT_EQ(a, generate(pkg, w, {"a", "b", "c"}, 3, hot));
  EXPECT_EQ(a[0], generate(pkg, w, {"a"}, 3, hot)[0]);
  hot.seed = 78;
  EXPECT_NE(a, generate(pkg, w, {"a", "b", "c"}, 3, hot));

  EXPECT_EQ(generate(pkg, w, {"ab"}, 0, greedy), std::vector<std::string>{""});
  EXPECT_EQ(generate(pkg, w, {"abcd"}, 3, greedy),
            std::vector<std::string>{""});
}

TEST_F(DecodeSessionTest, GenerateRefusesBadPrompts) {
  Package pkg6 = open(FAKE_MODEL_V6, "p6");
  TensorMap w6 = pkg6.initWeights(1);
  SamplingConfig c;
  EXPECT_TRUE(throwsError([&] { generate(pkg6, w6, {""}, 1, c); },
                          {"prompt is empty"}));
  EXPECT_TRUE(throwsError([&] { generate(pkg6, w6, {"ok", ""}, 1, c); },
                          {"prompt 1 is empty"}));
  EXPECT_TRUE(throwsError([&] { generate(pkg6, w6, {"hello"}, 1, c); },
                          {"prompt is 5 bytes", "context of 4 tokens"}));
  EXPECT_TRUE(throwsError([&] { generate(pkg6, w6, {"a"}, -1, c); },
                          {"max new bytes", "-1"}));
  EXPECT_TRUE(throwsError([&] { generate(pkg6, w6, {}, 1, c); },
                          {"no prompts"}));
  c.topP = 0;
  EXPECT_TRUE(
      throwsError([&] { generate(pkg6, w6, {"a"}, 1, c); }, {"top-p"}));
  // Vocabulary 8: byte 'a' is outside it.
  Package pkg0 = open(FAKE_MODEL_V0, "p0");
  TensorMap w0 = pkg0.initWeights(1);
  EXPECT_TRUE(throwsError([&] { generate(pkg0, w0, {"\x01\x02" "a"}, 1,
                                         SamplingConfig()); },
                          {"byte 0x61 at position 2", "vocab_size 8"}));
}
