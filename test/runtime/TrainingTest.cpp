//===- TrainingTest.cpp - Gradients, AdamW, data, schedule, checkpoints --===//
//
// The training side of the runtime against the fake packages: their
// modc_grad and modc_adamw are test doubles with closed forms (FakeManifest.h)
// so the tests can check what the runtime hands over and does with the
// results. Real packages are exercised in TrainIntegrationTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "modrt/Training.h"
#include "FakeManifest.h"
#include "TestUtil.h"
#include "modrt/Package.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

using namespace modrt;
using namespace modrt_test;

namespace {

class TrainingTest : public ::testing::Test {
protected:
  TempDir tmp;

  Package open(const char *lib, const std::string &name = "pkg") {
    return Package::open(makeFakePackage(tmp.path(name), lib));
  }
};

/// Bytes 'a', 'b', ... cycling through 26 letters.
std::string letters(size_t n) {
  std::string s(n, 'a');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>('a' + i % 26);
  return s;
}

std::vector<std::string> lines(const std::string &text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// Learning-rate schedule
//===----------------------------------------------------------------------===//

TEST(LearningRateTest, WarmupPeakAndCosineEnd) {
  const double peak = 3e-3;
  // Linear warmup: peak/warmup at step 1, peak at step `warmup`.
  EXPECT_DOUBLE_EQ(learningRate(1, 100, peak, 10), peak / 10);
  EXPECT_DOUBLE_EQ(learningRate(5, 100, peak, 10), peak / 2);
  EXPECT_DOUBLE_EQ(learningRate(10, 100, peak, 10), peak);
  // Cosine: halfway between peak and the floor halfway through the decay.
  EXPECT_NEAR(learningRate(55, 100, peak, 10), (peak + peak * 0.1) / 2, 1e-15);
  // Ends at peak * minRatio, and stays there.
  EXPECT_DOUBLE_EQ(learningRate(100, 100, peak, 10), peak * 0.1);
  EXPECT_DOUBLE_EQ(learningRate(150, 100, peak, 10), peak * 0.1);
  EXPECT_DOUBLE_EQ(learningRate(100, 100, peak, 10, 0.0), 0.0);
  // Strictly decreasing after the warmup.
  for (int64_t s = 11; s < 100; ++s)
    EXPECT_LT(learningRate(s + 1, 100, peak, 10),
              learningRate(s, 100, peak, 10))
        << s;
  // No warmup: the cosine starts at once, just below the peak.
  EXPECT_LT(learningRate(1, 100, peak, 0), peak);
  EXPECT_GT(learningRate(1, 100, peak, 0), 0.99 * peak);
  // Warmup longer than the run: warmup only.
  EXPECT_DOUBLE_EQ(learningRate(5, 5, peak, 10), peak / 2);
}

TEST(LearningRateTest, RefusesBadArguments) {
  EXPECT_TRUE(throwsError([] { learningRate(0, 10, 1e-3, 1); }, {"step"}));
  EXPECT_TRUE(
      throwsError([] { learningRate(1, 0, 1e-3, 1); }, {"total steps"}));
  EXPECT_TRUE(throwsError([] { learningRate(1, 10, 1e-3, -1); }, {"warmup"}));
  EXPECT_TRUE(throwsError([] { learningRate(1, 10, NAN, 1); }, {"peak"}));
  EXPECT_TRUE(
      throwsError([] { learningRate(1, 10, 1e-3, 1, 1.5); }, {"ratio"}));
}

//===----------------------------------------------------------------------===//
// Corpus
//===----------------------------------------------------------------------===//

TEST_F(TrainingTest, CorpusFileErrors) {
  writeFile(tmp.path("a.txt"), letters(500));
  writeFile(tmp.path("empty.txt"), "");
  EXPECT_TRUE(throwsError(
      [&] {
        Corpus::load({tmp.path("a.txt"), tmp.path("none.txt")}, 4, 2);
      },
      {tmp.path("none.txt"), "no such file"}));
  EXPECT_TRUE(throwsError(
      [&] {
        Corpus::load({tmp.path("empty.txt"), tmp.path("a.txt")}, 4, 2);
      },
      {tmp.path("empty.txt"), "empty"}));
  EXPECT_TRUE(throwsError([&] { Corpus::load({tmp.str()}, 4, 2); },
                          {tmp.str(), "directory"}));
  EXPECT_TRUE(throwsError([&] { Corpus::load({}, 4, 2); }, {"no training"}));
  // Concatenation in the order given.
  writeFile(tmp.path("b.txt"), letters(300));
  Corpus c = Corpus::load({tmp.path("a.txt"), tmp.path("b.txt")}, 4, 2);
  EXPECT_EQ(c.size(), 800u);
  std::string both = letters(500) + letters(300);
  EXPECT_EQ(c.hash(), fnv1a64(both.data(), both.size()));
}

TEST_F(TrainingTest, CorpusTooShortSaysSizes) {
  // One batch is 2 x (4 + 1) = 10 bytes.
  EXPECT_TRUE(throwsError([] { Corpus::fromBytes(letters(9), 4, 2, "t"); },
                          {"t: 9 bytes", "held-out",
                           "2 x (seq_len 4 + 1) = 10 "
                           "bytes"}));
  EXPECT_TRUE(
      throwsError([] { Corpus::fromBytes(letters(19), 4, 2, "t"); },
                  {"t: 19 bytes", "last 10 bytes", "training split has 9 bytes",
                   "= 10 bytes", "at least 20 bytes"}));
  EXPECT_NO_THROW(Corpus::fromBytes(letters(20), 4, 2, "t"));
  // The message's minimum is right when 10% exceeds one batch, too.
  EXPECT_TRUE(throwsError([] { Corpus::fromBytes(letters(9), 8, 1, "t"); },
                          {"9 bytes"}));
}

TEST(CorpusTest, SplitSizes) {
  // 10% rounded up, at least one batch (10 bytes).
  Corpus c = Corpus::fromBytes(letters(1000), 4, 2);
  EXPECT_EQ(c.batchBytes(), 10u);
  EXPECT_EQ(c.heldOutBytes(), 100u);
  EXPECT_EQ(c.trainBytes(), 900u);
  c = Corpus::fromBytes(letters(1001), 4, 2);
  EXPECT_EQ(c.heldOutBytes(), 101u);
  c = Corpus::fromBytes(letters(25), 4, 2);
  EXPECT_EQ(c.heldOutBytes(), 10u); // 10% would be 3 bytes
  EXPECT_EQ(c.trainBytes(), 15u);
}

TEST(CorpusTest, WindowsAreConsecutiveAndWrapAround) {
  std::string bytes(30, '\0');
  std::iota(bytes.begin(), bytes.end(), 0);  // byte i has value i
  Corpus c = Corpus::fromBytes(bytes, 4, 2); // held out: the last 10 bytes
  ASSERT_EQ(c.trainBytes(), 20u);
  std::vector<int32_t> tok;
  uint64_t next = c.trainBatch(0, tok);
  EXPECT_EQ(next, 10u);
  EXPECT_EQ(tok, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  next = c.trainBatch(next, tok);
  EXPECT_EQ(next, 0u);
  EXPECT_EQ(tok,
            (std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  // A batch that passes the end continues at the start of the split, never
  // in the held-out bytes.
  next = c.trainBatch(15, tok);
  EXPECT_EQ(next, 5u);
  EXPECT_EQ(tok, (std::vector<int32_t>{15, 16, 17, 18, 19, 0, 1, 2, 3, 4}));
  EXPECT_TRUE(throwsError([&] { c.trainBatch(20, tok); },
                          {"data position 20", "20 bytes"}));
}

TEST(CorpusTest, HeldOutBatchesAreFixed) {
  std::string bytes(300, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i % 256);
  Corpus c = Corpus::fromBytes(bytes, 4, 1); // 5-byte batches, 30 held out
  ASSERT_EQ(c.trainBytes(), 270u);
  auto batches = c.heldOutBatches();
  ASSERT_EQ(batches.size(), 6u); // 30 / 5, below the cap of 8
  EXPECT_EQ(batches[0], (std::vector<int32_t>{14, 15, 16, 17, 18})); // 270
  EXPECT_EQ(batches[5][0], 39);                                      // 295
  EXPECT_EQ(c.heldOutBatches(2).size(), 2u);
  Corpus big = Corpus::fromBytes(std::string(1000, 'x'), 4, 1);
  EXPECT_EQ(big.heldOutBatches().size(), 8u);
}

//===----------------------------------------------------------------------===//
// Package::grad and Package::adamwStep
//===----------------------------------------------------------------------===//

TEST_F(TrainingTest, GradMarshalsTokensAndGradients) {
  Package p = open(FAKE_MODEL_V0);
  TensorMap w = p.initWeights(3);
  // [2, 5]: targets are columns 1..4.
  std::vector<int32_t> tok = {7, 1, 2, 3, 4, 0, 5, 6, 7, 0};
  GradResult r = p.grad(w, tok, 2);
  double aux = 0;
  for (const auto &[name, t] : w)
    for (int64_t i = 0; i < t.numel(); ++i)
      aux += 0.5 * double(t.f32()[i]) * t.f32()[i];
  EXPECT_DOUBLE_EQ(r.losses.ce, (1 + 2 + 3 + 4 + 5 + 6 + 7 + 0) / 8.0);
  EXPECT_NEAR(r.losses.aux, aux, 1e-6 * aux);
  EXPECT_FLOAT_EQ(r.losses.total, static_cast<float>(r.losses.ce + aux));
  ASSERT_EQ(r.grads.size(), w.size());
  for (const auto &[name, t] : w) {
    EXPECT_EQ(r.grads.get(name).shape, t.shape) << name;
    EXPECT_EQ(r.grads.get(name).data, t.data) << name; // fake: grad = w
  }
  // A second call through the reusing overload gives the same.
  TensorMap grads;
  Losses again = p.grad(w, tok, 2, grads);
  EXPECT_EQ(again.total, r.losses.total);
  const float *before = grads.get("embed.weight").f32();
  p.grad(w, tok, 2, grads);
  EXPECT_EQ(grads.get("embed.weight").f32(), before); // no reallocation
}

TEST_F(TrainingTest, GradValidatesArguments) {
  Package p = open(FAKE_MODEL_V0);
  TensorMap w = p.initWeights(3);
  std::vector<int32_t> tok(10, 1);
  EXPECT_TRUE(throwsError([&] { p.grad(w, std::vector<int32_t>(8, 1), 2); },
                          {"[B, seq_len + 1] = [2, 5]", "got 8 values"}));
  EXPECT_TRUE(throwsError([&] { p.grad(w, tok, 0); }, {"batch"}));
  tok[7] = 8;
  EXPECT_TRUE(throwsError([&] { p.grad(w, tok, 2); },
                          {"token 8", "batch row 1", "position 2", "[0, 8)"}));
  tok[7] = -1;
  EXPECT_TRUE(throwsError([&] { p.grad(w, tok, 2); }, {"token -1"}));
  tok[7] = 1;
  TensorMap bad = w;
  bad.get("final_norm.weight") = Tensor::zeros(DType::F32, {5});
  EXPECT_TRUE(throwsError([&] { p.grad(bad, tok, 2); },
                          {"final_norm.weight", "[5]", "expected [4]"}));
}

TEST_F(TrainingTest, InferenceOnlyPackageRefusesTraining) {
  Package p = open(FAKE_MODEL_V5);
  EXPECT_FALSE(p.manifest().supportsTraining);
  TensorMap w = p.initWeights(1);
  std::vector<int32_t> tok(5, 1);
  EXPECT_TRUE(throwsError([&] { p.grad(w, tok, 1); },
                          {"no training entry points", "recompile"}));
  OptimizerState s = OptimizerState::zeros(p.manifest());
  EXPECT_TRUE(throwsError([&] { p.adamwStep(w, w, s, 1e-3, {}); },
                          {"no training entry points"}));
}

TEST_F(TrainingTest, TrainingPackageMustExportTheEntries) {
  // A manifest that lists training over a library without modc_grad.
  std::string dir = makeFakePackage(tmp.path("pkg"), FAKE_MODEL_V5);
  EXPECT_NO_THROW(Package::open(dir));
  // (The embedded manifest must match, so the mismatch is caught first when
  // only manifest.json claims training.)
  std::string text = readFile(dir + "/manifest.json");
  size_t at = text.find("\"modes\"");
  ASSERT_NE(at, std::string::npos);
  writeFile(dir + "/manifest.json",
            text.substr(0, at) +
                "\"grad\": {\"workspace_bytes_per_sequence\": 1}, " +
                text.substr(at));
  EXPECT_TRUE(throwsError([&] { Package::open(dir); }, {"does not match"}));
}

TEST_F(TrainingTest, AdamwStepPassesEverything) {
  Package p = open(FAKE_MODEL_V0);
  TensorMap w = p.initWeights(5);
  TensorMap g = p.initWeights(6);
  OptimizerState s = OptimizerState::zeros(p.manifest());
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.m.size(), 3u);
  AdamWConfig cfg;
  cfg.beta1 = 0.5;
  cfg.weightDecay = 0.25;
  cfg.clipNorm = 0; // no clipping
  TensorMap w0 = w;
  double sq = 0;
  for (const auto &[name, t] : g)
    for (int64_t i = 0; i < t.numel(); ++i)
      sq += double(t.f32()[i]) * t.f32()[i];
  double norm = p.adamwStep(w, g, s, 0.125, cfg);
  EXPECT_NEAR(norm, std::sqrt(sq), 1e-5 * std::sqrt(sq));
  EXPECT_EQ(s.step, 1);
  // Fake update: m = beta1 m + g; v = step; w -= lr wd w (decay params);
  // w -= lr m.
  for (const ParamInfo &param : p.manifest().params) {
    const float *x0 = w0.get(param.name).f32(), *x = w.get(param.name).f32();
    const float *gg = g.get(param.name).f32();
    for (int64_t i = 0; i < w.get(param.name).numel(); ++i) {
      float e = x0[i];
      if (param.decay)
        e -= 0.125f * 0.25f * e;
      e -= 0.125f * gg[i];
      EXPECT_FLOAT_EQ(x[i], e) << param.name << "[" << i << "]";
      EXPECT_EQ(s.m.get(param.name).f32()[i], gg[i]);
      EXPECT_EQ(s.v.get(param.name).f32()[i], 1.0f);
    }
  }
  p.adamwStep(w, g, s, 0.125, cfg);
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.v.get("embed.weight").f32()[0], 2.0f);
  // Clipping: the fake scales the gradient to the clip norm.
  OptimizerState s2 = OptimizerState::zeros(p.manifest());
  cfg.clipNorm = 1e-3;
  TensorMap w2 = w0;
  p.adamwStep(w2, g, s2, 0.125, cfg);
  EXPECT_NEAR(s2.m.get("embed.weight").f32()[0],
              g.get("embed.weight").f32()[0] * 1e-3 / std::sqrt(sq), 1e-7);
}

TEST_F(TrainingTest, AdamwStepValidates) {
  Package p = open(FAKE_MODEL_V0);
  TensorMap w = p.initWeights(5);
  OptimizerState s = OptimizerState::zeros(p.manifest());
  AdamWConfig cfg;
  EXPECT_TRUE(throwsError([&] { p.adamwStep(w, w, s, -1, cfg); },
                          {"learning rate", "-1"}));
  EXPECT_TRUE(
      throwsError([&] { p.adamwStep(w, w, s, NAN, cfg); }, {"learning rate"}));
  cfg.beta2 = 1.0;
  EXPECT_TRUE(throwsError([&] { p.adamwStep(w, w, s, 1e-3, cfg); },
                          {"beta2", "[0, 1)"}));
  cfg = AdamWConfig();
  TensorMap g = w;
  g.get("embed.weight") = Tensor::zeros(DType::F32, {8, 5});
  EXPECT_TRUE(throwsError([&] { p.adamwStep(w, g, s, 1e-3, cfg); },
                          {"grads", "embed.weight", "[8, 5]"}));
  OptimizerState bad;
  EXPECT_TRUE(throwsError([&] { p.adamwStep(w, w, bad, 1e-3, cfg); },
                          {"optimizer state m", "missing"}));
  EXPECT_EQ(s.step, 0); // nothing happened
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

TEST_F(TrainingTest, CheckpointRoundTrip) {
  Package p = open(FAKE_MODEL_V0);
  TensorMap w = p.initWeights(1);
  OptimizerState s = OptimizerState::zeros(p.manifest());
  s.m = p.initWeights(2);
  s.v = p.initWeights(3);
  s.step = 17;
  CheckpointInfo info;
  info.step = 17;
  info.dataPosition = 12345678901ull;
  info.seed = 18446744073709551615ull;
  info.totalSteps = 100;
  info.batch = 3;
  info.lr = 3e-4 / 7; // not a short decimal
  info.warmup = 9;
  info.adamw.beta1 = 0.8;
  info.adamw.weightDecay = 0.05;
  info.adamw.clipNorm = 0;
  info.model = "fake";
  info.modelHash = p.manifest().modelHash;
  info.dataBytes = 999;
  info.dataHash = 0xfedcba9876543210ull;
  std::string path = tmp.path("ck.safetensors");
  saveCheckpoint(path, w, s, info);
  EXPECT_EQ(tmp.list(), (std::vector<std::string>{"ck.safetensors", "pkg"}));

  TensorMap raw = TensorMap::load(path);
  EXPECT_EQ(raw.metadata.at("format"), "modc-checkpoint");
  EXPECT_EQ(raw.metadata.at("step"), "17");
  EXPECT_EQ(raw.metadata.at("model"), "fake");
  EXPECT_TRUE(raw.contains("adam.m.embed.weight"));
  EXPECT_TRUE(raw.contains("adam.v.final_norm.weight"));
  EXPECT_EQ(raw.size(), 9u);

  Checkpoint c = loadCheckpoint(path, p);
  EXPECT_EQ(c.info.step, 17);
  EXPECT_EQ(c.info.dataPosition, info.dataPosition);
  EXPECT_EQ(c.info.seed, info.seed);
  EXPECT_EQ(c.info.totalSteps, 100);
  EXPECT_EQ(c.info.batch, 3);
  EXPECT_EQ(c.info.lr, info.lr); // bit for bit
  EXPECT_EQ(c.info.warmup, 9);
  EXPECT_EQ(c.info.adamw.beta1, 0.8);
  EXPECT_EQ(c.info.adamw.beta2, info.adamw.beta2);
  EXPECT_EQ(c.info.adamw.eps, info.adamw.eps);
  EXPECT_EQ(c.info.adamw.weightDecay, 0.05);
  EXPECT_EQ(c.info.adamw.clipNorm, 0.0);
  EXPECT_EQ(c.info.modelHash, info.modelHash);
  EXPECT_EQ(c.info.dataBytes, 999u);
  EXPECT_EQ(c.info.dataHash, info.dataHash);
  EXPECT_EQ(c.optimizer.step, 17);
  for (const ParamInfo &param : p.manifest().params) {
    EXPECT_EQ(c.weights.get(param.name).data, w.get(param.name).data);
    EXPECT_EQ(c.optimizer.m.get(param.name).data, s.m.get(param.name).data);
    EXPECT_EQ(c.optimizer.v.get(param.name).data, s.v.get(param.name).data);
  }
  // loadWeights drops the moments, so a checkpoint serves as --weights.
  TensorMap only = loadWeights(path);
  EXPECT_EQ(only.size(), 3u);
  EXPECT_NO_THROW(p.checkWeights(only));
}

TEST_F(TrainingTest, CheckpointOfAnotherModelIsRefused) {
  Package p0 = open(FAKE_MODEL_V0, "p0");
  Package p6 = open(FAKE_MODEL_V6, "p6"); // vocab 256: other weights
  ASSERT_NE(p0.manifest().modelHash, p6.manifest().modelHash);
  CheckpointInfo info;
  info.model = "fake";
  info.modelHash = p0.manifest().modelHash;
  std::string path = tmp.path("ck.safetensors");
  saveCheckpoint(path, p0.initWeights(1), OptimizerState::zeros(p0.manifest()),
                 info);
  EXPECT_NO_THROW(loadCheckpoint(path, p0));
  EXPECT_TRUE(throwsError([&] { loadCheckpoint(path, p6); },
                          {path, "manifest hash",
                           fmt::format("{:016x}", p0.manifest().modelHash),
                           fmt::format("{:016x}", p6.manifest().modelHash)}));
}

TEST_F(TrainingTest, CheckpointDamageIsNamed) {
  Package p = open(FAKE_MODEL_V0);
  std::string path = tmp.path("w.safetensors");
  p.initWeights(1).save(path);
  EXPECT_TRUE(throwsError([&] { loadCheckpoint(path, p); },
                          {path, "not a modc checkpoint"}));

  CheckpointInfo info;
  info.modelHash = p.manifest().modelHash;
  OptimizerState s = OptimizerState::zeros(p.manifest());
  saveCheckpoint(path, p.initWeights(1), s, info);
  TensorMap file = TensorMap::load(path);
  TensorMap lacking;
  lacking.metadata = file.metadata;
  for (const auto &[name, t] : file)
    if (name != "adam.v.final_norm.weight")
      lacking.insert(name, t);
  lacking.save(path);
  EXPECT_TRUE(throwsError([&] { loadCheckpoint(path, p); },
                          {"adam.v.final_norm.weight", "missing"}));

  file.metadata["step"] = "-3";
  file.save(path);
  EXPECT_TRUE(
      throwsError([&] { loadCheckpoint(path, p); }, {"'step'", "\"-3\""}));
  file.metadata.erase("step");
  file.save(path);
  EXPECT_TRUE(throwsError([&] { loadCheckpoint(path, p); }, {"lacks 'step'"}));
}

//===----------------------------------------------------------------------===//
// The training loop
//===----------------------------------------------------------------------===//

namespace {
TrainConfig config(const TempDir &tmp, int64_t steps) {
  TrainConfig c;
  c.steps = steps;
  c.lr = 0.05;
  c.warmup = 2;
  c.outPath = tmp.path("ck.safetensors");
  c.logPath = tmp.path("log.csv");
  return c;
}

TrainState fresh(const Package &p, uint64_t seed) {
  TrainState s;
  s.weights = p.initWeights(seed);
  s.optimizer = OptimizerState::zeros(p.manifest());
  return s;
}
} // namespace

TEST_F(TrainingTest, TrainLogsSavesAndAdvancesData) {
  Package p = open(FAKE_MODEL_V6);
  Corpus corpus = Corpus::fromBytes(letters(200), 4, 2); // train: 180 bytes
  TrainConfig cfg = config(tmp, 20);
  cfg.evalEvery = 5;
  TrainState s = fresh(p, 1);
  std::vector<StepRecord> recs;
  train(p, corpus, cfg, s, [&](const StepRecord &r) { recs.push_back(r); });
  ASSERT_EQ(recs.size(), 20u);
  EXPECT_EQ(s.optimizer.step, 20);
  EXPECT_EQ(s.dataPosition, 200u % 180u); // 20 batches of 10 bytes, wrapped
  // The fake's ce is the mean target byte, so it shows which batch was fed.
  std::vector<int32_t> tok;
  uint64_t pos = 0;
  for (const StepRecord &r : recs) {
    pos = corpus.trainBatch(pos, tok);
    double sum = 0;
    for (int b = 0; b < 2; ++b)
      for (int i = 1; i <= 4; ++i)
        sum += tok[b * 5 + i];
    EXPECT_DOUBLE_EQ(r.losses.ce, sum / 8) << r.step;
    EXPECT_DOUBLE_EQ(r.lr, learningRate(r.step, 20, 0.05, 2)) << r.step;
    EXPECT_EQ(r.evalLoss.has_value(), r.step % 5 == 0) << r.step;
    EXPECT_EQ(r.saved, r.step % 5 == 0) << r.step; // saves follow evals
    EXPECT_EQ(r.commSeconds, 0.0) << r.step;         // one process
    EXPECT_EQ(r.commBytes, 0u) << r.step;
    EXPECT_TRUE(r.moe.empty()) << r.step; // no MoE layers, no shares
  }
  // The fake's aux (half the squared weights) shrinks under weight decay.
  EXPECT_LT(recs.back().losses.aux, recs.front().losses.aux);

  std::vector<std::string> log = lines(readFile(cfg.logPath));
  ASSERT_EQ(log.size(), 21u);
  EXPECT_EQ(log[0], "step,loss,ce,aux,lr,grad_norm,tokens_per_s,eval_loss,"
                    "comm_s,comm_bytes,balance");
  EXPECT_EQ(log[1].rfind("1,", 0), 0u);
  // No eval at step 1; one process: no collectives, so comm_s and
  // comm_bytes are 0; no MoE layers, so balance is 0.
  EXPECT_EQ(log[1].substr(log[1].size() - 14), ",,0.000000,0,0") << log[1];
  EXPECT_EQ(log[5].find(",,"), std::string::npos) << log[5];
  EXPECT_EQ(std::count(log[5].begin(), log[5].end(), ','), 10);
  EXPECT_EQ(log[5].substr(log[5].size() - 13), ",0.000000,0,0") << log[5];

  Checkpoint c = loadCheckpoint(cfg.outPath, p);
  EXPECT_EQ(c.info.step, 20);
  EXPECT_EQ(c.info.dataPosition, s.dataPosition);
  EXPECT_EQ(c.info.totalSteps, 20);
  EXPECT_EQ(c.info.batch, 2);
  EXPECT_EQ(c.info.dataHash, corpus.hash());
  EXPECT_EQ(c.weights.get("embed.weight").data,
            s.weights.get("embed.weight").data);
}

TEST_F(TrainingTest, ResumeRepeatsTheUninterruptedRun) {
  Package p = open(FAKE_MODEL_V6);
  Corpus corpus = Corpus::fromBytes(letters(200), 4, 2);
  TrainConfig full = config(tmp, 30);
  full.outPath = tmp.path("full.safetensors");
  full.logPath = tmp.path("full.csv");
  TrainState a = fresh(p, 4);
  train(p, corpus, full, a);

  TrainConfig part = config(tmp, 30);
  part.stopAfter = 13;
  part.logPath = tmp.path("part.csv");
  TrainState b = fresh(p, 4);
  train(p, corpus, part, b);
  EXPECT_EQ(b.optimizer.step, 13);
  Checkpoint c = loadCheckpoint(part.outPath, p);
  TrainState resumed{std::move(c.weights), std::move(c.optimizer),
                     c.info.dataPosition};
  part.stopAfter = 0;
  train(p, corpus, part, resumed);

  // Same losses, lr and norms per step (the tokens/s column differs), and
  // byte-identical final checkpoints.
  auto columns = [](const std::string &path) {
    std::vector<std::string> out;
    for (const std::string &l : lines(readFile(path))) {
      std::vector<std::string> fields;
      std::istringstream in(l);
      for (std::string f; std::getline(in, f, ',');)
        fields.push_back(f);
      fields.erase(fields.begin() + 6); // tokens_per_s
      out.push_back(fmt::format("{}", fmt::join(fields, ",")));
    }
    return out;
  };
  std::vector<std::string> x = columns(full.logPath), y = columns(part.logPath);
  ASSERT_EQ(x.size(), 31u);
  EXPECT_EQ(x, y);
  EXPECT_EQ(readFile(full.outPath), readFile(part.outPath));
}

TEST_F(TrainingTest, NonFiniteLossStopsAndKeepsLastCheckpoint) {
  Package p = open(FAKE_MODEL_V6);
  std::string bytes = letters(200);
  bytes[5 * 10 + 2] = '\xFE'; // a target of the 6th batch: NaN losses
  Corpus corpus = Corpus::fromBytes(bytes, 4, 2);
  TrainConfig cfg = config(tmp, 20);
  cfg.saveEvery = 4;
  TrainState s = fresh(p, 1);
  EXPECT_TRUE(throwsError([&] { train(p, corpus, cfg, s); },
                          {"step 6", "loss is not finite", "nan",
                           "last good checkpoint", cfg.outPath, "step 4"}));
  Checkpoint c = loadCheckpoint(cfg.outPath, p);
  EXPECT_EQ(c.info.step, 4);
  EXPECT_EQ(lines(readFile(cfg.logPath)).size(), 6u); // header + steps 1-5
}

TEST_F(TrainingTest, NonFiniteGradientStopsBeforeAnyCheckpoint) {
  Package p = open(FAKE_MODEL_V6);
  std::string bytes = letters(200);
  bytes[2 * 10 + 3] = '\xFD'; // 3rd batch: infinite gradients
  Corpus corpus = Corpus::fromBytes(bytes, 4, 2);
  TrainConfig cfg = config(tmp, 20);
  writeFile(cfg.outPath, "previous"); // must survive
  TrainState s = fresh(p, 1);
  EXPECT_TRUE(throwsError([&] { train(p, corpus, cfg, s); },
                          {"step 3", "gradient norm is not finite",
                           "no checkpoint was written",
                           "first was due at step 20", "unchanged"}));
  EXPECT_EQ(readFile(cfg.outPath), "previous");
}

TEST_F(TrainingTest, TrainRefusesNothingToDo) {
  Package p = open(FAKE_MODEL_V6);
  Corpus corpus = Corpus::fromBytes(letters(200), 4, 2);
  TrainConfig cfg = config(tmp, 5);
  TrainState s = fresh(p, 1);
  s.optimizer.step = 5;
  EXPECT_TRUE(
      throwsError([&] { train(p, corpus, cfg, s); }, {"already at step 5"}));
  Corpus other = Corpus::fromBytes(letters(200), 8, 2);
  s.optimizer.step = 0;
  EXPECT_TRUE(throwsError([&] { train(p, other, cfg, s); },
                          {"seq_len 8", "seq_len is 4"}));
}

TEST(CorpusTest, TokensOfATokenizer) {
  // Ids beyond a byte, split and windowed as bytes are.
  std::mt19937 gen(11);
  std::vector<int32_t> ids(30);
  for (int32_t &id : ids)
    id = static_cast<int32_t>(gen() % 50000);
  Corpus c = Corpus::fromTokens(ids, 4, 2, "t");
  EXPECT_STREQ(c.unit(), "tokens");
  EXPECT_EQ(c.size(), 30u);
  ASSERT_EQ(c.trainBytes(), 20u);
  EXPECT_EQ(c.hash(), fnv1a64(ids.data(), ids.size() * 4));
  std::vector<int32_t> tok;
  EXPECT_EQ(c.trainBatch(15, tok), 5u);
  std::vector<int32_t> want(ids.begin() + 15, ids.begin() + 20);
  want.insert(want.end(), ids.begin(), ids.begin() + 5);
  EXPECT_EQ(tok, want);
  std::vector<std::vector<int32_t>> held = c.heldOutBatches(8);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0], std::vector<int32_t>(ids.begin() + 20, ids.end()));
  EXPECT_TRUE(throwsError([&] { c.trainBatch(20, tok); },
                          {"data position 20", "20 tokens"}));
  EXPECT_TRUE(throwsError(
      [&] { Corpus::fromTokens(std::vector<int32_t>(19, 1), 4, 2, "t"); },
      {"t: 19 tokens", "training split has 9 tokens", "= 10 tokens"}));
  EXPECT_TRUE(throwsError(
      [&] { Corpus::fromTokens(std::vector<int32_t>(20, -1), 4, 2, "t"); },
      {"t: token 0 is negative (-1)"}));
  EXPECT_STREQ(Corpus::fromBytes(letters(20), 4, 2).unit(), "bytes");
}

TEST_F(TrainingTest, CorpusThroughATokenizer) {
  // load() encodes the concatenated files; the byte tokenizer keeps bytes.
  Tokenizer bpe =
      Tokenizer::fromFile(TEST_DATA_DIR "/tokenizer/tokenizer.json");
  std::string a = "The quick brown fox jumps over the lazy dog. ";
  std::string b = "日本語のテキストです。12345 and 3.14159\n";
  std::string text;
  for (int i = 0; i < 6; ++i)
    text += a + b;
  writeFile(tmp.path("a.txt"), text.substr(0, 100));
  writeFile(tmp.path("b.txt"), text.substr(100));
  Corpus c = Corpus::load({tmp.path("a.txt"), tmp.path("b.txt")}, 4, 2, bpe);
  std::vector<int32_t> ids = bpe.encode(text);
  EXPECT_EQ(c.size(), ids.size());
  EXPECT_EQ(c.hash(), fnv1a64(ids.data(), ids.size() * 4));
  Corpus bytes =
      Corpus::load({tmp.path("a.txt"), tmp.path("b.txt")}, 4, 2, Tokenizer());
  EXPECT_EQ(bytes.size(), text.size());
  EXPECT_EQ(bytes.hash(), fnv1a64(text.data(), text.size()));
}

// The encoding of ForwardResult::moe (docs/runtime.md) with E = 2, N = 1:
// 0..1 kept, 2 no-op, 3..4 dropped, -1 not counted; anything else is an
// error naming the layer.
TEST(MoeSharesTest, CountsTheEncoding) {
  nlohmann::json j = nlohmann::json::parse(kFakeManifest);
  j["model"]["moe"] = {{"n_experts", 2}, {"noop_experts", 1}, {"layers", {1}}};
  Manifest m = Manifest::parse(j.dump(), "m.json");
  ForwardResult r;
  r.moe = {{0, 1, 1, 2, 3, 4, -1, -1}};
  std::vector<MoeShares> s = countMoeShares(m, r);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].layer, 1);
  EXPECT_EQ(s[0].kept, 3);
  EXPECT_EQ(s[0].noop, 1);
  EXPECT_EQ(s[0].dropped, 2);
  EXPECT_EQ(s[0].skipped, 2);
  EXPECT_EQ(s[0].keptByExpert, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s[0].reached(), 6);
  EXPECT_DOUBLE_EQ(s[0].percent(s[0].kept), 50.0);
  EXPECT_DOUBLE_EQ(MoeShares{}.percent(0), 0.0); // nothing reached the MLP
  for (int32_t bad : {5, -2}) {
    r.moe = {{0, bad}};
    EXPECT_TRUE(throwsError([&] { countMoeShares(m, r); },
                            {"MoE layer 1", fmt::format("decision {}", bad),
                             "outside [-1, 2E + N = 5)"}))
        << bad;
  }
  r.moe.clear();
  EXPECT_TRUE(throwsError([&] { countMoeShares(m, r); },
                          {"decisions for 0 MoE layers", "lists 1"}));
}
