//===- TrainIntegrationTest.cpp - modrun train on a real compiled package -===//
//
// Compiles a small MoD model (d_model 32, 2 layers, seq_len 32, a routed
// layer with a predictor) with the real modc, then trains it with the real
// modrun on test/data/tiny-corpus.txt:
//   - the loss falls: after 60 steps the training loss (mean of the last 5
//     steps) and the held-out cross-entropy are at least 1 nat below the
//     step-1 loss (about ln 256 = 5.5 nats; a working run reaches about 2.9);
//   - 20 steps, then --resume for 20 more, gives the same per-step losses,
//     learning rates and gradient norms as 40 uninterrupted steps, and a
//     byte-identical final checkpoint.
// and the same model with MoE MLPs on both layers (staged MoDE,
// docs/model-format.md section 7):
//   - modrun forward writes moe.<layer> decisions in the encoding of
//     docs/cli.md, -1 exactly where a routed layer skips the token;
//   - modrun train prints each MoE layer's kept / no-op / dropped shares
//     (summing to 100 %) and logs a finite, positive balance loss.
// Built only when the compiler is part of the build.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "ModcPackages.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace modrt_test;

namespace {

const nlohmann::json kModel = {{"name", "train-tiny"},
                               {"vocab_size", 256},
                               {"d_model", 32},
                               {"n_layers", 2},
                               {"n_heads", 2},
                               {"d_ff", 64},
                               {"seq_len", 32},
                               {"mlp", "swiglu"},
                               {"norm_eps", 1e-5},
                               {"rope_theta", 10000.0},
                               {"tie_embeddings", true},
                               {"dtype", "f32"},
                               {"mod",
                                {{"capacity", 0.5},
                                 {"schedule", "every_other"},
                                 {"gate", "linear"},
                                 {"causal_router", "predictor"},
                                 {"aux_loss_weight", 0.01},
                                 {"predictor_hidden", 16}}}};

/// kModel with E = 2 real and N = 2 no-op experts on both layers; capacity
/// factor 1 makes C = n / 4, so some tokens are dropped.
nlohmann::json moeModel() {
  nlohmann::json m = kModel;
  m["name"] = "train-tiny-moe";
  m["moe"] = {{"n_experts", 2},
              {"noop_experts", 2},
              {"d_expert", 32},
              {"capacity_factor", 1.0},
              {"balance_loss_weight", 0.01},
              {"schedule", "all"}};
  return m;
}

const std::string kCorpus = std::string(TEST_DATA_DIR) + "/tiny-corpus.txt";

/// Runs a shell command, returning its exit code; its output goes to `log`.
int shell(const std::string &cmd, const std::string &log) {
  int status = std::system((cmd + " >'" + log + "' 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Compiles kModel once per modc binary (cached on disk across the test
/// processes ctest starts) and returns the package directory, or "" after
/// recording a failure.
std::string packageDir() {
  return modtest::compiledPackageDir(kModel, TRAIN_CACHE_DIR);
}

/// One row of the CSV log of modrun train.
struct Row {
  int64_t step = 0;
  double loss = 0, ce = 0, aux = 0, lr = 0, gradNorm = 0, balance = 0;
  std::string evalLoss;
  std::string exact; ///< every column except tokens_per_s, verbatim
  std::string commSeconds, commBytes; ///< "0.000000" and "0" in one process
};

std::vector<Row> readLog(const std::string &path) {
  std::vector<Row> rows;
  std::istringstream in(readFile(path));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "step,loss,ce,aux,lr,grad_norm,tokens_per_s,eval_loss,"
                  "comm_s,comm_bytes,balance");
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');)
      f.push_back(x);
    EXPECT_EQ(f.size(), 11u) << line;
    if (f.size() != 11)
      break;
    Row r;
    r.step = std::stoll(f[0]);
    r.loss = std::stod(f[1]);
    r.ce = std::stod(f[2]);
    r.aux = std::stod(f[3]);
    r.lr = std::stod(f[4]);
    r.gradNorm = std::stod(f[5]);
    r.evalLoss = f[7];
    r.exact = f[0] + "," + f[1] + "," + f[2] + "," + f[3] + "," + f[4] + "," +
              f[5] + "," + f[7];
    r.commSeconds = f[8];
    r.commBytes = f[9];
    r.balance = std::stod(f[10]);
    r.exact += "," + f[10];
    rows.push_back(r);
  }
  return rows;
}

class TrainIntegrationTest : public ::testing::Test {
protected:
  TempDir tmp;
  std::string pkg;

  void SetUp() override {
    pkg = packageDir();
    ASSERT_FALSE(pkg.empty());
  }

  /// Runs `modrun train PKG --data CORPUS <args>`; fails the test on error.
  /// Returns what it printed.
  std::string train(const std::string &args) {
    std::string log = tmp.path("modrun.log");
    int rc = shell(std::string("'") + MODRUN_PATH + "' train '" + pkg +
                       "' --data '" + kCorpus + "' " + args,
                   log);
    EXPECT_EQ(rc, 0) << readFile(log);
    return readFile(log);
  }
  /// Runs `modrun <args>`; fails the test on error. Returns what it printed.
  std::string modrun(const std::string &args) {
    std::string log = tmp.path("modrun.log");
    int rc = shell(std::string("'") + MODRUN_PATH + "' " + args, log);
    EXPECT_EQ(rc, 0) << args << "\n" << readFile(log);
    return readFile(log);
  }
};

class MoeIntegrationTest : public TrainIntegrationTest {
protected:
  void SetUp() override {
    pkg = modtest::compiledPackageDir(moeModel(), TRAIN_CACHE_DIR);
    ASSERT_FALSE(pkg.empty());
  }
};

} // namespace

TEST_F(TrainIntegrationTest, LossFallsOnShippedText) {
  std::string csv = tmp.path("run.csv");
  train("--steps 60 --batch 8 --lr 1e-2 --seed 1 --eval-every 30 --out '" +
        tmp.path("ck.safetensors") + "' --log '" + csv + "'");
  std::vector<Row> rows = readLog(csv);
  ASSERT_EQ(rows.size(), 60u);
  const double first = rows.front().loss;
  // Small random init: the first loss is close to uniform over 256 bytes.
  EXPECT_NEAR(first, std::log(256.0), 0.3);
  double lastFive = 0;
  for (size_t i = 55; i < 60; ++i)
    lastFive += rows[i].loss / 5;
  EXPECT_LE(lastFive, first - 1.0) << "training loss did not fall";
  ASSERT_FALSE(rows.back().evalLoss.empty());
  EXPECT_LE(std::stod(rows.back().evalLoss), first - 1.0)
      << "held-out loss did not fall";
  for (const Row &r : rows) {
    EXPECT_TRUE(std::isfinite(r.gradNorm)) << r.step;
    EXPECT_NEAR(r.loss, r.ce + 0.01 * r.aux, 1e-4 * r.loss) << r.step;
    // One process: no collectives.
    EXPECT_EQ(r.commSeconds, "0.000000") << r.step;
    EXPECT_EQ(r.commBytes, "0") << r.step;
  }
}

TEST_F(TrainIntegrationTest, ResumeEqualsUninterrupted) {
  std::string common = "--steps 40 --batch 8 --lr 1e-2 --seed 7 ";
  train(common + "--out '" + tmp.path("full.safetensors") + "' --log '" +
        tmp.path("full.csv") + "'");
  train(common + "--stop-after 20 --out '" + tmp.path("part.safetensors") +
        "' --log '" + tmp.path("part.csv") + "'");
  train("--resume '" + tmp.path("part.safetensors") + "' --out '" +
        tmp.path("part.safetensors") + "' --log '" + tmp.path("part.csv") +
        "'");
  std::vector<Row> full = readLog(tmp.path("full.csv")),
                   part = readLog(tmp.path("part.csv"));
  ASSERT_EQ(full.size(), 40u);
  ASSERT_EQ(part.size(), 40u);
  for (size_t i = 0; i < 40; ++i)
    EXPECT_EQ(part[i].exact, full[i].exact) << "step " << i + 1;
  EXPECT_TRUE(readFile(tmp.path("part.safetensors")) ==
              readFile(tmp.path("full.safetensors")))
      << "final checkpoints differ";
}

TEST_F(MoeIntegrationTest, ForwardWritesDecisions) {
  modrt::Manifest m = modrt::Package::open(pkg).manifest();
  ASSERT_EQ(m.moeLayers, (std::vector<int>{0, 1}));
  ASSERT_EQ(m.routedLayers, (std::vector<int>{1}));
  const int64_t E = m.moeExperts, N = m.moeNoopExperts;
  ASSERT_EQ(E, 2);
  ASSERT_EQ(N, 2);
  std::string info = modrun("info '" + pkg + "'");
  EXPECT_NE(info.find("moe:       2 real + 2 no-op experts (E + N), "
                      "d_expert 32"),
            std::string::npos)
      << info;
  EXPECT_NE(info.find("layers 0 1"), std::string::npos) << info;

  std::string w = tmp.path("w.safetensors"), t = tmp.path("t.safetensors"),
              out = tmp.path("out.safetensors");
  modrun("init '" + pkg + "' --seed 3 --out '" + w + "'");
  modrun("tokenize '" + kCorpus + "' --seq-len 32 --batch 4 --out '" + t + "'");
  modrun("forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
         "' --out '" + out + "'");
  modrt::TensorMap f = modrt::TensorMap::load(out);
  const modrt::Tensor &routed = f.get("routed.1");
  int64_t kept = 0, noop = 0, dropped = 0;
  for (int layer : m.moeLayers) {
    const modrt::Tensor &d = f.get("moe." + std::to_string(layer));
    ASSERT_EQ(d.dtype, modrt::DType::I32);
    ASSERT_EQ(d.shape, (std::vector<int64_t>{4, 32}));
    for (int64_t i = 0; i < d.numel(); ++i) {
      int32_t v = d.i32()[i];
      // -1 exactly where the routed layer skips the token; the dense
      // layer's MLP sees every token.
      bool reaches = layer == 0 || routed.i32()[i] != 0;
      EXPECT_EQ(v == -1, !reaches) << "layer " << layer << " token " << i;
      EXPECT_TRUE(v >= -1 && v < 2 * E + N) << v;
      kept += v >= 0 && v < E;
      noop += v >= E && v < E + N;
      dropped += v >= E + N;
    }
  }
  // 128 + 64 tokens reached an MLP; untrained routers pick every kind.
  EXPECT_EQ(kept + noop + dropped, 128 + 64);
  EXPECT_GT(kept, 0);
  EXPECT_GT(noop, 0);
}

TEST_F(MoeIntegrationTest, TrainReportsSharesAndBalance) {
  std::string csv = tmp.path("run.csv");
  std::string out =
      train("--steps 6 --batch 4 --lr 1e-2 --seed 1 --eval-every 3 --out '" +
            tmp.path("ck.safetensors") + "' --log '" + csv + "'");
  EXPECT_NE(out.find("  balance "), std::string::npos) << out;
  // One report per MoE layer at steps 3 and 6 (evaluations; 6 is the last).
  std::istringstream lines(out);
  int reports = 0;
  for (std::string line; std::getline(lines, line);) {
    int layer = -1;
    double kept = -1, noop = -1, dropped = -1;
    if (std::sscanf(line.c_str(),
                    "moe layer %d: kept %lf %%, no-op %lf %%, dropped %lf %%",
                    &layer, &kept, &noop, &dropped) != 4)
      continue;
    ++reports;
    EXPECT_EQ(layer, reports % 2 == 1 ? 0 : 1) << line;
    for (double share : {kept, noop, dropped}) {
      EXPECT_GE(share, 0.0) << line;
      EXPECT_LE(share, 100.0) << line;
    }
    // Rounded to 0.1 each.
    EXPECT_NEAR(kept + noop + dropped, 100.0, 0.151) << line;
    // The routed layer's skipped tokens are not counted, and it says so.
    EXPECT_EQ(line.find("not counted") != std::string::npos, layer == 1)
        << line;
  }
  EXPECT_EQ(reports, 4) << out;
  std::vector<Row> rows = readLog(csv);
  ASSERT_EQ(rows.size(), 6u);
  for (const Row &r : rows) {
    EXPECT_TRUE(std::isfinite(r.balance)) << r.step;
    EXPECT_GT(r.balance, 0.0) << r.step;
    EXPECT_NEAR(r.loss, r.ce + 0.01 * r.aux + 0.01 * r.balance, 1e-4 * r.loss)
        << r.step;
  }
}
