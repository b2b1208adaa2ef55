//===- ModrunTest.cpp - The modrun command line --------------------------===//
//
// Runs the real modrun binary on a fake package: exit codes, messages, and
// that a failed run leaves no output file behind.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "modrt/Package.h"

#include <gtest/gtest.h>

#include <cstring>
#include <dlfcn.h>
#include <sys/wait.h>

using namespace modrt;
using namespace modrt_test;

namespace {

struct RunResult {
  int code;
  std::string out, err;
};

class ModrunTest : public ::testing::Test {
protected:
  TempDir tmp;
  std::string pkg;

  void SetUp() override {
    pkg = tmp.path("pkg");
    std::filesystem::create_directory(pkg);
    std::filesystem::copy_file(FAKE_MODEL_V0, pkg + "/libmodel.so");
    void *h = ::dlopen(FAKE_MODEL_V0, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr);
    auto fn =
        reinterpret_cast<const char *(*)()>(::dlsym(h, "modc_manifest_json"));
    writeFile(pkg + "/manifest.json", fn());
    ::dlclose(h);
  }

  /// Runs modrun with `args` (already shell-quoted where needed).
  RunResult run(const std::string &args) {
    std::string cmd = std::string("'") + MODRUN_PATH + "' " + args + " >'" +
                      tmp.path("stdout") + "' 2>'" + tmp.path("stderr") + "'";
    int status = std::system(cmd.c_str());
    RunResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = readFile(tmp.path("stdout"));
    r.err = readFile(tmp.path("stderr"));
    std::filesystem::remove(tmp.path("stdout"));
    std::filesystem::remove(tmp.path("stderr"));
    return r;
  }

  void writeTokens(const std::string &path, std::vector<int64_t> shape,
                   const std::vector<int32_t> &values) {
    TensorMap t;
    Tensor tok = Tensor::zeros(DType::I32, shape);
    std::copy(values.begin(), values.end(), tok.i32());
    t.insert("tokens", std::move(tok));
    t.save(path);
  }
};

} // namespace

TEST_F(ModrunTest, HelpAndUsageErrors) {
  RunResult r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("forward"), std::string::npos);
  for (const char *cmd : {"init", "forward", "info"}) {
    r = run(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: modrun ") + cmd),
              std::string::npos)
        << cmd;
  }
  EXPECT_EQ(run("").code, 2);
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
  r = run("init '" + pkg + "' --out w.st");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing --seed"), std::string::npos);
  r = run("init '" + pkg + "' --seed x1 --out w.st");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--seed"), std::string::npos);
  r = run("forward '" + pkg + "' --weights a --tokens b --out c --mode beam");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--mode must be topk or causal"), std::string::npos);
  r = run("info '" + pkg + "' --bogus 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option --bogus"), std::string::npos);
}

TEST_F(ModrunTest, InitForwardInfo) {
  std::string w = tmp.path("w.safetensors"), t = tmp.path("t.safetensors"),
              o = tmp.path("o.safetensors");
  RunResult r = run("init '" + pkg + "' --seed 11 --out '" + w + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  Package p = Package::open(pkg);
  TensorMap weights = TensorMap::load(w);
  TensorMap direct = p.initWeights(11);
  ASSERT_EQ(weights.size(), direct.size());
  for (const auto &[name, tensor] : direct)
    EXPECT_EQ(weights.get(name).data, tensor.data) << name;

  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 0};
  writeTokens(t, {2, 4}, tok);
  r = run("forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
          "' --out '" + o + "' --mode causal");
  ASSERT_EQ(r.code, 0) << r.err;
  TensorMap out = TensorMap::load(o);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out.get("logits").shape, (std::vector<int64_t>{2, 4, 8}));
  EXPECT_EQ(out.get("routed.1").shape, (std::vector<int64_t>{2, 4}));
  ForwardResult e = p.forward(direct, tok, 2, RouteMode::Causal);
  EXPECT_EQ(0, std::memcmp(out.get("logits").f32(), e.logits.data(),
                           e.logits.size() * 4));
  EXPECT_EQ(std::vector<int32_t>(out.get("routed.1").i32(),
                                 out.get("routed.1").i32() + 8),
            e.routed[0]);

  r = run("info '" + pkg + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("layers:    2 (1 routed)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("capacity 2/4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 tensors, 40 values, 160 bytes"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("256 bytes per sequence"), std::string::npos) << r.out;
}

TEST_F(ModrunTest, ErrorsLeaveNoOutput) {
  std::string w = tmp.path("w.safetensors"), t = tmp.path("t.safetensors"),
              o = tmp.path("o.safetensors");
  ASSERT_EQ(run("init '" + pkg + "' --seed 1 --out '" + w + "'").code, 0);

  writeTokens(t, {1, 4}, {1, 2, 9, 4});
  RunResult r = run("forward '" + pkg + "' --weights '" + w + "' --tokens '" +
                    t + "' --out '" + o + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("modrun: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("token 9 at batch row 0, position 2"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(o));

  writeTokens(t, {2, 3}, {1, 2, 3, 4, 5, 6});
  r = run("forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
          "' --out '" + o + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("[B, seq_len] = [B, 4]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[2, 3]"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(o));

  // Error raised inside the package.
  writeTokens(t, {1, 4}, {7, 2, 3, 4});
  r = run("forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
          "' --out '" + o + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("fake: token 7"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(o));

  r = run("init '" + tmp.path("nopkg") + "' --seed 1 --out '" + o + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(o));
  // Only the files this test wrote itself remain: no temp files.
  auto after = tmp.list();
  EXPECT_EQ(after, (std::vector<std::string>{"pkg", "t.safetensors",
                                             "w.safetensors"}));
}
