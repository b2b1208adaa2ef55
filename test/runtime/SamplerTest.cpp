//===- SamplerTest.cpp - sampleToken: greedy, temperature, top-k, top-p ---===//
//
// The decoding policy on fixed logits vectors: the greedy tie rule, top-k 1
// and a tiny top-p equal greedy, frequencies over many draws match the
// softmax (with temperature, top-k and top-p), a seed reproduces its draws,
// and bad settings or logits are refused with a message.
//
//===----------------------------------------------------------------------===//
#include "modrt/Generate.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

using namespace modrt;
using namespace modrt_test;

namespace {

SamplingConfig config(double temperature, int topK = 0, double topP = 1.0) {
  SamplingConfig c;
  c.temperature = temperature;
  c.topK = topK;
  c.topP = topP;
  return c;
}

/// Frequencies of each token over `n` draws.
std::vector<double> frequencies(const std::vector<float> &logits,
                                const SamplingConfig &c, int n,
                                uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i)
    f[sampleToken(logits.data(), static_cast<int64_t>(logits.size()), c,
                  rng)] += 1.0 / n;
  return f;
}

/// softmax(logits / T) restricted to `keep` (others 0), renormalised.
std::vector<double> softmax(const std::vector<float> &logits, double T,
                            const std::vector<bool> &keep) {
  std::vector<double> p(logits.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep[i])
      total += p[i] = std::exp(logits[i] / T);
  for (double &x : p)
    x /= total;
  return p;
}

// Logits with distinct values; ranks: 2 > 0 > 4 > 1 > 3.
const std::vector<float> kLogits = {1.0f, -0.5f, 2.0f, -1.5f, 0.25f};

} // namespace

TEST(SamplerTest, GreedyTakesArgmaxWithTiesToLowestId) {
  std::mt19937_64 rng(1);
  uint64_t before = std::mt19937_64(1)();
  EXPECT_EQ(sampleToken(kLogits.data(), 5, config(0), rng), 2);
  std::vector<float> ties = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f};
  EXPECT_EQ(sampleToken(ties.data(), 5, config(0), rng), 1);
  // -inf is allowed (a masked token) and never wins.
  float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> masked = {ninf, ninf, -7.0f, ninf};
  EXPECT_EQ(sampleToken(masked.data(), 4, config(0), rng), 2);
  // Greedy draws nothing from the stream.
  EXPECT_EQ(rng(), before);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  std::vector<float> ties = {0.5f, 3.0f, -1.0f, 3.0f, 3.0f};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(sampleToken(kLogits.data(), 5, config(1.0, 1), rng), 2);
    EXPECT_EQ(sampleToken(kLogits.data(), 5, config(5.0, 0, 1e-9), rng), 2);
    EXPECT_EQ(sampleToken(ties.data(), 5, config(1.0, 1), rng), 1);
    EXPECT_EQ(sampleToken(ties.data(), 5, config(1.0, 0, 1e-9), rng), 1);
  }
}

TEST(SamplerTest, FrequenciesFollowSoftmax) {
  const int n = 200000;
  // 4 sigma of a binomial proportion with p <= 0.5 over n draws: ~0.0045.
  const double tol = 0.005;
  std::vector<bool> all(5, true);
  for (double T : {1.0, 0.5, 2.0}) {
    std::vector<double> f = frequencies(kLogits, config(T), n);
    std::vector<double> p = softmax(kLogits, T, all);
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(f[i], p[i], tol) << "T " << T << " token " << i;
  }
  // Top-k 3 keeps tokens 2, 0, 4.
  {
    std::vector<double> f = frequencies(kLogits, config(1.0, 3), n);
    std::vector<double> p =
        softmax(kLogits, 1.0, {true, false, true, false, true});
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(f[i], p[i], tol) << "top-k 3, token " << i;
  }
  // Top-p: at T = 1 the probabilities are, in rank order, 2: 0.605,
  // 0: 0.222, 4: 0.105, 1: 0.050, 3: 0.018. Top-p 0.7 keeps 2 and 0
  // (0.605 < 0.7 <= 0.827); just above 0.827 adds 4.
  {
    std::vector<double> full = softmax(kLogits, 1.0, all);
    double twoAndZero = full[2] + full[0];
    std::vector<double> f = frequencies(kLogits, config(1.0, 0, 0.7), n);
    std::vector<double> p =
        softmax(kLogits, 1.0, {true, false, true, false, false});
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(f[i], p[i], tol) << "top-p 0.7, token " << i;
    f = frequencies(kLogits, config(1.0, 0, twoAndZero + 1e-3), n);
    p = softmax(kLogits, 1.0, {true, false, true, false, true});
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(f[i], p[i], tol) << "top-p just above, token " << i;
  }
  // Top-k and top-p together: top-k 2 then top-p 0.5 (within the two, token
  // 2 has 0.731 >= 0.5): greedy.
  EXPECT_NEAR(frequencies(kLogits, config(1.0, 2, 0.5), 1000)[2], 1.0, 1e-9);
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const int n = 50000;
  double cold = frequencies(kLogits, config(0.1), n)[2];
  double warm = frequencies(kLogits, config(1.0), n)[2];
  double hot = frequencies(kLogits, config(100.0), n)[2];
  EXPECT_GT(cold, 0.99);
  EXPECT_GT(cold, warm);
  EXPECT_GT(warm, hot);
  EXPECT_NEAR(hot, 0.2, 0.02); // nearly uniform over 5
}

TEST(SamplerTest, SameSeedSameDraws) {
  std::vector<float> logits(256);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  auto draws = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> out;
    SamplingConfig c = config(0.8, 40, 0.9);
    for (int i = 0; i < 100; ++i)
      out.push_back(sampleToken(logits.data(), 256, c, rng));
    return out;
  };
  EXPECT_EQ(draws(5), draws(5));
  EXPECT_NE(draws(5), draws(6));
  // Pinned values: the draw uses the raw 64-bit output only, so this holds
  // across standard libraries.
  std::mt19937_64 rng(123);
  std::vector<float> two = {0.0f, 0.0f};
  // u = (first output >> 11) * 2^-53 decides between two equal tokens.
  uint64_t first = std::mt19937_64(123)();
  double u = static_cast<double>(first >> 11) * 0x1.0p-53;
  EXPECT_EQ(sampleToken(two.data(), 2, config(1.0), rng), u < 0.5 ? 0 : 1);
}

TEST(SamplerTest, SamplingStreamsAreIndependentOfBatch) {
  std::mt19937_64 a = samplingStream(9, 0), b = samplingStream(9, 0),
                  c = samplingStream(9, 1), d = samplingStream(10, 0);
  uint64_t x = a();
  EXPECT_EQ(x, b());
  EXPECT_NE(x, c());
  EXPECT_NE(x, d());
}

TEST(SamplerTest, BadSettingsAndLogitsAreRefused) {
  std::mt19937_64 rng(1);
  const float *l = kLogits.data();
  EXPECT_TRUE(throwsError([&] { sampleToken(l, 5, config(-1), rng); },
                          {"temperature", ">= 0", "-1"}));
  EXPECT_TRUE(throwsError(
      [&] { sampleToken(l, 5, config(std::nan("")), rng); }, {"temperature"}));
  EXPECT_TRUE(throwsError([&] { sampleToken(l, 5, config(1, -2), rng); },
                          {"top-k", ">= 0", "-2"}));
  EXPECT_TRUE(throwsError([&] { sampleToken(l, 5, config(1, 0, 0), rng); },
                          {"top-p", "(0, 1]"}));
  EXPECT_TRUE(throwsError([&] { sampleToken(l, 5, config(1, 0, 1.5), rng); },
                          {"top-p", "1.5"}));
  EXPECT_TRUE(
      throwsError([&] { sampleToken(l, 0, config(1), rng); }, {"vocab"}));
  std::vector<float> bad = {0.0f, std::nanf(""), 1.0f};
  EXPECT_TRUE(throwsError([&] { sampleToken(bad.data(), 3, config(1), rng); },
                          {"token 1", "non-finite"}));
  float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> none = {ninf, ninf};
  EXPECT_TRUE(throwsError([&] { sampleToken(none.data(), 2, config(0), rng); },
                          {"-inf"}));
}
