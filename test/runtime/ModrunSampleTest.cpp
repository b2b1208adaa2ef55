//===- ModrunSampleTest.cpp - modrun sample and modrun eval on fakes -----===//
//
// Runs the real modrun binary on fake packages (FakeModel.cpp): sample
// streams what modrt::generate produces, clamps --max-new with a note,
// labels batch outputs, and refuses bad prompts and packages that cannot
// decode; eval prints the held-out losses and the router agreement table.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "modrt/Generate.h"
#include "modrt/Package.h"
#include "modrt/Tokenizer.h"
#include "modrt/Training.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sys/wait.h>

using namespace modrt;
using namespace modrt_test;

namespace {

struct RunResult {
  int code;
  std::string out, err;
};

class ModrunSampleTest : public ::testing::Test {
protected:
  TempDir tmp;
  std::string pkg, weights;

  void SetUp() override {
    // Variant 6: byte-level vocabulary (256), seq_len 4.
    pkg = makeFakePackage(tmp.path("pkg"), FAKE_MODEL_V6);
    weights = tmp.path("w.safetensors");
    ASSERT_EQ(run("init '" + pkg + "' --seed 5 --out '" + weights + "'").code,
              0);
  }

  RunResult run(const std::string &args) {
    std::string cmd = std::string("'") + MODRUN_PATH + "' " + args + " >'" +
                      tmp.path("stdout") + "' 2>'" + tmp.path("stderr") + "'";
    int status = std::system(cmd.c_str());
    RunResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = readFile(tmp.path("stdout"));
    r.err = readFile(tmp.path("stderr"));
    return r;
  }

  std::string sample(const std::string &args) {
    return "sample '" + pkg + "' --weights '" + weights + "' " + args;
  }
};

bool contains(const std::string &s, const std::string &piece) {
  return s.find(piece) != std::string::npos;
}

} // namespace

TEST_F(ModrunSampleTest, StreamsWhatGenerateProduces) {
  Package p = Package::open(pkg);
  TensorMap w = TensorMap::load(weights);
  SamplingConfig c;
  c.temperature = 0.7;
  c.topK = 50;
  c.topP = 0.9;
  c.seed = 9;
  std::string expected = generate(p, w, {"x"}, 3, c)[0];
  RunResult r = run(sample("--prompt x --max-new 3 --temperature 0.7 "
                           "--top-k 50 --top-p 0.9 --seed 9"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n");
  EXPECT_TRUE(contains(r.err, "3 bytes generated")) << r.err;
  // Reproducible.
  EXPECT_EQ(run(sample("--prompt x --max-new 3 --temperature 0.7 --top-k 50 "
                       "--top-p 0.9 --seed 9"))
                .out,
            r.out);
  // Greedy, from a prompt file taken byte for byte; --max-new clamped.
  writeFile(tmp.path("p.txt"), "ab");
  c = SamplingConfig();
  c.temperature = 0;
  r = run(sample("--prompt-file '" + tmp.path("p.txt") +
                 "' --max-new 9 --temperature 0"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, generate(p, w, {"ab"}, 2, c)[0] + "\n");
  EXPECT_TRUE(contains(r.err, "--max-new 9 clamped to 2")) << r.err;
  EXPECT_TRUE(contains(r.err, "seq_len 4")) << r.err;
}

TEST_F(ModrunSampleTest, BatchFileIsLabelled) {
  writeFile(tmp.path("batch.txt"), "a\r\nbc\nd\n");
  RunResult r = run(sample("--batch-file '" + tmp.path("batch.txt") +
                           "' --max-new 2 --seed 4"));
  ASSERT_EQ(r.code, 0) << r.err;
  Package p = Package::open(pkg);
  SamplingConfig c;
  c.seed = 4;
  std::vector<std::string> out =
      generate(p, TensorMap::load(weights), {"a", "bc", "d"}, 2, c);
  std::string f = tmp.path("batch.txt");
  EXPECT_EQ(r.out, "=== " + f + " line 1 ===\n" + out[0] + "\n=== " + f +
                       " line 2 ===\n" + out[1] + "\n=== " + f +
                       " line 3 ===\n" + out[2] + "\n");
  writeFile(tmp.path("gap.txt"), "a\n\nb\n");
  r = run(sample("--batch-file '" + tmp.path("gap.txt") + "' --max-new 1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "gap.txt line 2 is empty")) << r.err;
}

TEST_F(ModrunSampleTest, SampleErrors) {
  RunResult r = run(sample("--prompt '' --max-new 1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "--prompt is empty")) << r.err;
  r = run(sample("--prompt hello --max-new 1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "--prompt is 5 bytes, longer than the model's "
                              "context of 4 tokens"))
      << r.err;
  r = run(sample("--prompt abcd --max-new 1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "fills the model's context")) << r.err;
  EXPECT_TRUE(contains(r.err, "at most 3 bytes")) << r.err;
  r = run(sample("--prompt a --prompt-file x --max-new 1"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "give one of")) << r.err;
  r = run(sample("--max-new 1"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "missing --prompt")) << r.err;
  r = run(sample("--prompt a"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "missing --max-new")) << r.err;
  r = run(sample("--prompt a --max-new 1 --top-p 0"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "--top-p")) << r.err;
  r = run(sample("--prompt a --max-new 1 --top-p 1.5"));
  EXPECT_EQ(r.code, 2);
  r = run(sample("--prompt a --max-new 1 --temperature -1"));
  EXPECT_EQ(r.code, 2);
  r = run(sample("--prompt-file '" + tmp.path("nope.txt") + "' --max-new 1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "nope.txt: cannot open")) << r.err;

  // Vocabulary 8: bytes above 0x07 are not tokens.
  std::string small = makeFakePackage(tmp.path("small"), FAKE_MODEL_V0);
  ASSERT_EQ(run("init '" + small + "' --seed 1 --out '" +
                tmp.path("ws.safetensors") + "'")
                .code,
            0);
  r = run("sample '" + small + "' --weights '" + tmp.path("ws.safetensors") +
          "' --prompt \"$(printf '\\001z')\" --max-new 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "byte 0x7A at position 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "vocab_size 8")) << r.err;

  // causal_router none: no decode entry.
  std::string none = makeFakePackage(tmp.path("none"), FAKE_MODEL_V4);
  r = run("sample '" + none + "' --weights '" + tmp.path("ws.safetensors") +
          "' --prompt a --max-new 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "routed layers with causal_router none cannot "
                              "decode; compile with aux_loss or predictor"))
      << r.err;
  r = run("info '" + none + "'");
  EXPECT_TRUE(contains(r.out, "decode:    no (routed layers with "
                              "causal_router none)"))
      << r.out;
  r = run("info '" + pkg + "'");
  EXPECT_TRUE(contains(r.out, "decode:    yes, 256 bytes of KV cache"))
      << r.out;
}

TEST_F(ModrunSampleTest, EvalPrintsLossesAndAgreement) {
  std::string data;
  for (int i = 0; i < 600; ++i)
    data += static_cast<char>("the quick brown fox "[i % 20]);
  writeFile(tmp.path("data.txt"), data);
  RunResult r = run("eval '" + pkg + "' --weights '" + weights +
                    "' --data '" + tmp.path("data.txt") +
                    "' --batch 4 --batches 3");
  ASSERT_EQ(r.code, 0) << r.err;

  // The same numbers computed here: the top-k loss is the loss-only entry's
  // (the fake's: the mean target byte), the causal one the causal entry's
  // (the fake's: the cross-entropy of Package::forward's logits), the
  // agreement from the forward's masks.
  Package p = Package::open(pkg);
  TensorMap w = TensorMap::load(weights);
  Corpus corpus = Corpus::fromBytes(data, 4, 4);
  auto batches = corpus.heldOutBatches(3);
  double ceTopk = 0, ceCausal = 0, n = 0, agree = 0;
  for (const auto &tokens : batches) {
    std::vector<int32_t> in;
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < 4; ++i)
        in.push_back(tokens[b * 5 + i]);
    std::vector<std::vector<int32_t>> dec;
    ForwardResult t = p.forward(w, in, 4, RouteMode::TopK, &dec);
    ForwardResult c = p.forward(w, in, 4, RouteMode::Causal);
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < 4; ++i) {
        int target = tokens[b * 5 + i + 1];
        ceTopk += target;
        const float *row = c.logits.data() + (b * 4 + i) * 256;
        double z = 0;
        for (int v = 0; v < 256; ++v)
          z += std::exp(static_cast<double>(row[v]));
        ceCausal += std::log(z) - row[target];
        agree += dec[0][b * 4 + i] == t.routed[0][b * 4 + i];
        n += 1;
      }
  }
  char line[128];
  std::snprintf(line, sizeof(line), "loss topk:   %.4f", ceTopk / n);
  EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  std::snprintf(line, sizeof(line), "loss causal: %.4f", ceCausal / n);
  EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  std::snprintf(line, sizeof(line), "%.4f", agree / n);
  EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, "agreement")) << r.out;
  EXPECT_TRUE(contains(r.out, "3 batches x 4 x 4 tokens")) << r.out;

  // Errors: byte-level text needs vocab 256; missing --data.
  std::string small = makeFakePackage(tmp.path("small"), FAKE_MODEL_V0);
  r = run("eval '" + small + "' --weights '" + weights + "' --data '" +
          tmp.path("data.txt") + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "vocab_size is 8")) << r.err;
  r = run("eval '" + pkg + "' --weights '" + weights + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(contains(r.err, "missing --data")) << r.err;
}

TEST_F(ModrunSampleTest, BpeTokenizer) {
  // Tokens of the small BPE: "ab" is one token, so the 4-token context
  // leaves 3 new tokens (2 bytes with the byte tokenizer).
  std::string tj = tmp.path("tok.json");
  writeSmallTokenizer(tj);
  Tokenizer tok = Tokenizer::fromFile(tj);
  ASSERT_EQ(tok.encode("ab"), std::vector<int32_t>{95});
  Package p = Package::open(pkg);
  TensorMap w = TensorMap::load(weights);
  SamplingConfig c;
  c.temperature = 0;
  RunResult r = run(sample("--prompt ab --max-new 9 --temperature 0 "
                           "--tokenizer '" +
                           tj + "'"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, generate(p, w, tok, {"ab"}, 3, c)[0] + "\n");
  EXPECT_TRUE(contains(r.err, "--max-new 9 clamped to 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "3 tokens generated")) << r.err;
  // Sampled: every piece is a token of the tokenizer (ids < 98 though the
  // model has 256).
  c.temperature = 1;
  c.seed = 4;
  std::string text = generate(p, w, tok, {"ab"}, 3, c)[0];
  r = run(sample("--prompt ab --max-new 3 --seed 4 --tokenizer '" + tj + "'"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, text + "\n");
  for (unsigned char ch : text)
    EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << text;
}

TEST_F(ModrunSampleTest, PackageNamesItsTokenizer) {
  // manifest.json's "tokenizer" (a file in the package) is used without
  // --tokenizer; --tokenizer overrides it; the library's embedded manifest
  // need not name it.
  writeSmallTokenizer(pkg + "/tokenizer.json");
  nlohmann::json man = nlohmann::json::parse(readFile(pkg + "/manifest.json"));
  man["tokenizer"] = "tokenizer.json";
  writeFile(pkg + "/manifest.json", man.dump());
  EXPECT_EQ(Package::open(pkg).manifest().tokenizer, "tokenizer.json");
  RunResult r = run(sample("--prompt ab --max-new 9 --temperature 0"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "--max-new 9 clamped to 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "3 tokens generated")) << r.err;
  // A tokenizer that does not fit is refused, naming the package's file.
  std::string big = TEST_DATA_DIR "/tokenizer/tokenizer.json";
  r = run(sample("--prompt ab --max-new 1 --tokenizer '" + big + "'"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "has 300 tokens")) << r.err;
  // A missing file is named.
  std::filesystem::remove(pkg + "/tokenizer.json");
  r = run(sample("--prompt ab --max-new 1"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, pkg + "/tokenizer.json: cannot open")) << r.err;
}
