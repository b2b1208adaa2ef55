//===- ModrunTest.cpp - The modrun command line --------------------------===//
//
// Runs the real modrun binary on a fake package: exit codes, messages, and
// that a failed run leaves no output file behind.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "modrt/Package.h"
#include "modrt/Tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <random>
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
  for (const char *cmd :
       {"init", "forward", "grad", "train", "sample", "eval", "info", "tokenize",
        "show"}) {
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

/// An output that names an input (by the same path, another spelling of it
/// or a link) is refused before any work, and the input keeps its bytes.
TEST_F(ModrunTest, OutputsNeverOverwriteInputs) {
  std::string w = tmp.path("w.safetensors"), t = tmp.path("t.safetensors");
  ASSERT_EQ(run("init '" + pkg + "' --seed 1 --out '" + w + "'").code, 0);
  writeTokens(t, {1, 4}, {1, 2, 3, 4});
  std::filesystem::create_symlink(w, tmp.path("w-link.safetensors"));
  std::string text = tmp.path("a.txt");
  writeFile(text, std::string(400, 'a'));
  const std::string wBytes = readFile(w), tBytes = readFile(t),
                    manifest = readFile(pkg + "/manifest.json");

  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
           "' --out '" + t + "'",
       "--out " + t + " is the same file as --tokens " + t},
      {"forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
           "' --out '" + tmp.path("w-link.safetensors") + "'",
       "is the same file as --weights"},
      {"grad '" + pkg + "' --weights '" + w + "' --tokens '" + t +
           "' --out '" + tmp.str() + "/./w.safetensors'",
       "is the same file as --weights"},
      {"tokenize '" + text + "' --seq-len 4 --out '" + text + "'",
       "is the same file as FILE"},
      {"init '" + pkg + "' --seed 1 --out '" + pkg + "/manifest.json'",
       "is the same file as PKG/manifest.json"},
      {"train '" + pkg + "' --data '" + text + "' --out '" + text +
           "' --steps 1 --batch 1 --lr 1 --seed 1",
       "is the same file as --data"},
      {"train '" + pkg + "' --data '" + text + "' --out '" +
           tmp.path("ck.st") + "' --log '" + tmp.str() +
           "/./ck.st' --steps 1 --batch 1 --lr 1 --seed 1",
       "--log " + tmp.str() + "/./ck.st is the same file as --out"},
      {"train '" + pkg + "' --data '" + text + "' --out '" +
           tmp.path("nodir/ck.st") + "' --steps 1 --batch 1 --lr 1 --seed 1",
       "--out " + tmp.path("nodir/ck.st") + ": directory " +
           tmp.path("nodir") + " does not exist"},
  };
  for (const Case &c : cases) {
    RunResult r = run(c.args);
    EXPECT_EQ(r.code, 1) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.back(), '\n') << r.err;
  }
  EXPECT_EQ(readFile(w), wBytes);
  EXPECT_EQ(readFile(t), tBytes);
  EXPECT_EQ(readFile(text), std::string(400, 'a'));
  EXPECT_EQ(readFile(pkg + "/manifest.json"), manifest);
  EXPECT_FALSE(std::filesystem::exists(tmp.path("ck.st")));
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

TEST_F(ModrunTest, TokenizeBytes) {
  // Two files, read concatenated; bytes above 127 stay non-negative tokens.
  std::string a = tmp.path("a.txt"), b = tmp.path("b.txt"),
              t = tmp.path("t.safetensors");
  std::string bytesA = "Hello, world!\n";
  std::string bytesB = std::string("caf\xc3\xa9 \x01\xff end\n");
  writeFile(a, bytesA);
  writeFile(b, bytesB);
  std::string corpus = bytesA + bytesB; // 14 + 11 = 25 bytes
  RunResult r = run("tokenize '" + a + "' '" + b +
                    "' --seq-len 6 --batch 3 --offset 5 --out '" + t + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  TensorMap m = TensorMap::load(t);
  ASSERT_EQ(m.size(), 1u);
  const Tensor &tok = m.get("tokens");
  EXPECT_EQ(tok.dtype, DType::I32);
  EXPECT_EQ(tok.shape, (std::vector<int64_t>{3, 6}));
  for (int i = 0; i < 18; ++i)
    EXPECT_EQ(tok.i32()[i], static_cast<unsigned char>(corpus[5 + i])) << i;
  EXPECT_EQ(m.metadata["modrun.tokenizer"], "bytes");

  // Defaults: one window from byte 0; the whole corpus exactly.
  r = run("tokenize '" + a + "' '" + b + "' --seq-len 25 --out '" + t + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  m = TensorMap::load(t);
  EXPECT_EQ(m.get("tokens").shape, (std::vector<int64_t>{1, 25}));
  for (int i = 0; i < 25; ++i)
    EXPECT_EQ(m.get("tokens").i32()[i], static_cast<unsigned char>(corpus[i]));

  // The file feeds modrun forward (vocab 8 in the fake package: bytes 0..7).
  writeFile(a, std::string("\x01\x02\x03\x04\x05\x06\x07\x00", 8));
  std::string w = tmp.path("w.safetensors"), o = tmp.path("o.safetensors");
  ASSERT_EQ(run("init '" + pkg + "' --seed 3 --out '" + w + "'").code, 0);
  r = run("tokenize '" + a + "' --seq-len 4 --batch 2 --out '" + t + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run("forward '" + pkg + "' --weights '" + w + "' --tokens '" + t +
          "' --out '" + o + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(TensorMap::load(o).get("logits").shape,
            (std::vector<int64_t>{2, 4, 8}));
}

TEST_F(ModrunTest, TokenizeErrors) {
  std::string a = tmp.path("a.txt"), e = tmp.path("empty.txt"),
              t = tmp.path("t.safetensors");
  writeFile(a, "0123456789");
  writeFile(e, "");

  RunResult r = run("tokenize '" + tmp.path("nope.txt") +
                    "' --seq-len 4 --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("modrun: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("nope.txt: cannot open: No such file"),
            std::string::npos)
      << r.err;

  r = run("tokenize '" + tmp.str() + "' --seq-len 4 --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(tmp.str() + ": is a directory"), std::string::npos)
      << r.err;

  // A device or a pipe may never end (/dev/zero read 2.8 GB in 4 s): it is
  // refused before anything is read, and no output is written.
  std::string fifo = tmp.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string &endless : {std::string("/dev/zero"), fifo}) {
    r = run("tokenize '" + endless + "' --seq-len 4 --out '" + t + "'");
    EXPECT_EQ(r.code, 1) << endless;
    EXPECT_NE(r.err.find(endless + ": not a regular file (a device or a pipe, "
                                   "which may never end); give a text file\n"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(t));
  }
  std::filesystem::remove(fifo);

  if (::geteuid() != 0) { // root reads anything
    std::string locked = tmp.path("locked.txt");
    writeFile(locked, "abcd");
    std::filesystem::permissions(locked, std::filesystem::perms::none);
    r = run("tokenize '" + locked + "' --seq-len 4 --out '" + t + "'");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("locked.txt: cannot open: Permission denied"),
              std::string::npos)
        << r.err;
    std::filesystem::remove(locked);
  }

  r = run("tokenize '" + a + "' '" + e + "' --seq-len 4 --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("empty.txt: file is empty"), std::string::npos) << r.err;

  r = run("tokenize '" + a + "' --seq-len 4 --batch 3 --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("a.txt holds 10 bytes; --batch 3 x --seq-len 4 needs "
                       "12 bytes"),
            std::string::npos)
      << r.err;
  r = run("tokenize '" + a + "' '" + a +
          "' --seq-len 4 --batch 4 --offset 5 --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the 2 input files hold 20 bytes; --batch 4 x "
                       "--seq-len 4 from --offset 5 needs 21 bytes"),
            std::string::npos)
      << r.err;

  // Usage errors exit 2.
  r = run("tokenize --seq-len 4 --out '" + t + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing input FILE"), std::string::npos) << r.err;
  r = run("tokenize '" + a + "' --out '" + t + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing --seq-len"), std::string::npos) << r.err;
  r = run("tokenize '" + a + "' --seq-len 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing --out"), std::string::npos) << r.err;
  r = run("tokenize '" + a + "' --seq-len 0 --out '" + t + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--seq-len must be a positive integer, got '0'"),
            std::string::npos)
      << r.err;
  r = run("tokenize '" + a + "' --seq-len 4 --batch -1 --out '" + t + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--batch must be a positive integer"), std::string::npos)
      << r.err;
  r = run("tokenize '" + a + "' --seq-len 4 --offset x --out '" + t + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--offset must be a non-negative integer"),
            std::string::npos)
      << r.err;
  r = run("tokenize '" + a +
          "' --seq-len 4294967296 --batch 4294967296 "
          "--out '" +
          t + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is too large"), std::string::npos) << r.err;

  // No output and no temporary file after any of these.
  EXPECT_EQ(tmp.list(),
            (std::vector<std::string>{"a.txt", "empty.txt", "pkg"}));
}

TEST_F(ModrunTest, Show) {
  std::string f = tmp.path("f.safetensors");
  TensorMap m;
  Tensor mask = Tensor::zeros(DType::I32, {2, 4});
  for (int i : {0, 5, 6})
    mask.i32()[i] = 1;
  m.insert("routed.1", std::move(mask));
  Tensor x = Tensor::zeros(DType::F32, {3});
  x.f32()[0] = 1.5f;
  x.f32()[1] = -0.5f;
  x.f32()[2] = 2.0f;
  m.insert("x", std::move(x));
  m.metadata["modrun.mode"] = "topk";
  m.save(f);

  RunResult r = run("show '" + f + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metadata modrun.mode = topk"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("routed.1  I32  [2, 4]  mean 0.375  min 0  max 1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("x         F32  [3]     mean 1"), std::string::npos)
      << r.out;

  writeFile(tmp.path("bad"), "xy");
  r = run("show '" + tmp.path("bad") + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not a safetensors file"), std::string::npos) << r.err;
  r = run("show");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing safetensors FILE"), std::string::npos) << r.err;
  r = run("show '" + f + "' '" + f + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unexpected argument"), std::string::npos) << r.err;
}

TEST_F(ModrunTest, ShowBF16AndF16) {
  // A file as PyTorch writes half-precision weights: show names the stored
  // dtype and the mean of the exactly widened values.
  std::string f = tmp.path("h.safetensors");
  std::string header =
      R"({"wb":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
      R"("wh":{"dtype":"F16","shape":[3],"data_offsets":[4,10]}})";
  // BF16 1.5 (0x3fc0) and -0.5 (0xbf00); F16 2 (0x4000), 0.25 (0x3400) and
  // the smallest subnormal 2^-24 (0x0001).
  const uint16_t values[] = {0x3fc0, 0xbf00, 0x4000, 0x3400, 0x0001};
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes.append(reinterpret_cast<const char *>(values), sizeof values);
  writeFile(f, bytes);
  RunResult r = run("show '" + f + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wb  BF16  [2]  mean 0.5\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wh  F16   [3]  mean 0.75\n"), std::string::npos)
      << r.out;
}

TEST_F(ModrunTest, Grad) {
  std::string w = tmp.path("w.safetensors"), t = tmp.path("t.safetensors"),
              g = tmp.path("g.safetensors");
  ASSERT_EQ(run("init '" + pkg + "' --seed 2 --out '" + w + "'").code, 0);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 0, 1, 2};
  writeTokens(t, {2, 5}, tok);
  RunResult r = run("grad '" + pkg + "' --weights '" + w + "' --tokens '" + t +
                    "' --out '" + g + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  Package p = Package::open(pkg);
  GradResult e = p.grad(TensorMap::load(w), tok, 2);
  TensorMap out = TensorMap::load(g);
  EXPECT_EQ(out.size(), 4u + p.manifest().params.size());
  EXPECT_EQ(out.get("loss.total").shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(out.get("loss.total").f32()[0], static_cast<float>(e.losses.total));
  EXPECT_EQ(out.get("loss.ce").f32()[0], static_cast<float>(e.losses.ce));
  EXPECT_EQ(out.get("loss.aux").f32()[0], static_cast<float>(e.losses.aux));
  EXPECT_EQ(out.get("loss.balance").f32()[0],
            static_cast<float>(e.losses.balance));
  for (const auto &[name, grad] : e.grads)
    EXPECT_EQ(out.get("grad." + name).data, grad.data) << name;

  // Tokens must be [B, seq_len + 1].
  writeTokens(t, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 0});
  std::filesystem::remove(g);
  r = run("grad '" + pkg + "' --weights '" + w + "' --tokens '" + t +
          "' --out '" + g + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("[B, seq_len + 1] = [B, 5]"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(g));
}

TEST_F(ModrunTest, TrainUsageAndRefusals) {
  writeFile(tmp.path("a.txt"), std::string(400, 'a'));
  std::string data = " --data '" + tmp.path("a.txt") + "'";
  std::string ck = " --out '" + tmp.path("ck.safetensors") + "'";
  RunResult r = run("train --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("usage: modrun train"), std::string::npos);
  r = run("train '" + pkg + "'" + ck + " --steps 2 --batch 1 --lr 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing --data"), std::string::npos) << r.err;
  r = run("train '" + pkg + "'" + data + ck + " --batch 1 --lr 1 --seed 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing --steps"), std::string::npos) << r.err;
  r = run("train '" + pkg + "'" + data + ck + " --steps 2 --batch 1 --lr 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing --seed"), std::string::npos) << r.err;
  r = run("train '" + pkg + "'" + data + ck +
          " --steps 2 --batch 1 --lr -1 --seed 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--lr must be a number > 0"), std::string::npos)
      << r.err;
  r = run("train '" + pkg + "'" + data + ck +
          " --steps 2 --batch 1 --lr 1 --seed 1 --resume x --weights y");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("exclude each other"), std::string::npos) << r.err;

  // The default fake package has vocab 8: byte-level text does not fit.
  r = run("train '" + pkg + "'" + data + ck +
          " --steps 2 --batch 1 --lr 1 --seed 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("vocab_size is 8"), std::string::npos) << r.err;
  // An inference-only package.
  std::string v5 = makeFakePackage(tmp.path("v5"), FAKE_MODEL_V5);
  r = run("train '" + v5 + "'" + data + ck +
          " --steps 2 --batch 1 --lr 1 --seed 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no training entry points"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path("ck.safetensors")));
}

// Huge counts are refused with the flag and its range, never capped to
// another value (docs/errors.md, "modrun: the command line").
TEST_F(ModrunTest, OutOfRangeCountsAreRefused) {
  writeFile(tmp.path("a.txt"), std::string(400, 'a'));
  std::string train = "train '" + pkg + "' --data '" + tmp.path("a.txt") +
                      "' --out '" + tmp.path("ck.safetensors") +
                      "' --lr 1 --seed 1";
  struct Case {
    std::string args, message;
  };
  const std::string big = "99999999999999999999"; // > 2^64
  for (const Case &c : std::vector<Case>{
           {train + " --steps 4611686018427387905 --batch 1",
            "--steps must be an integer in [1, 4611686018427387904], got "
            "'4611686018427387905'"},
           {train + " --steps 2 --batch 1048577",
            "--batch must be an integer in [1, 1048576], got '1048577'"},
           {train + " --steps 2 --batch 1 --warmup 4611686018427387905",
            "--warmup must be an integer in [0, 4611686018427387904]"},
           {train + " --steps 2 --batch 1 --stop-after " + big,
            "--stop-after must be an integer in [1, 4611686018427387904], "
            "got '" + big + "'"},
           {"eval '" + pkg + "' --weights w --data a --batch 1048577",
            "--batch must be an integer in [1, 1048576], got '1048577'"},
           {"sample '" + pkg + "' --weights w --prompt a --max-new 2147483648",
            "--max-new must be an integer in [0, 2147483647], got "
            "'2147483648'"},
           {"sample '" + pkg + "' --weights w --prompt a --max-new 1 "
            "--top-k 2147483648",
            "--top-k must be an integer in [0, 2147483647], got "
            "'2147483648'"},
       }) {
    RunResult r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("modrun: " + c.message), std::string::npos)
        << c.args << "\n" << r.err;
  }
  // The largest values in range still pass the parser (they fail later,
  // and not with a range error).
  RunResult r = run("sample '" + pkg + "' --weights w --prompt a "
                    "--max-new 2147483647");
  EXPECT_EQ(r.err.find("must be an integer in"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path("ck.safetensors")));
}

TEST_F(ModrunTest, TrainAndResume) {
  std::string v6 = makeFakePackage(tmp.path("v6"), FAKE_MODEL_V6);
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += static_cast<char>('a' + i * 7 % 26);
  writeFile(tmp.path("a.txt"), text.substr(0, 120));
  writeFile(tmp.path("b.txt"), text.substr(120));
  std::string common = " --data '" + tmp.path("a.txt") + "' '" +
                       tmp.path("b.txt") +
                       "' --steps 12 --batch 2 --lr 0.05 --seed 3 "
                       "--eval-every 4";
  // Endless training data (a device; /dev/zero read 2.8 GB in 4 s) is
  // refused before training starts, and nothing is written.
  RunResult r = run("train '" + v6 + "' --data /dev/zero --steps 2 --batch 1 "
                    "--lr 0.05 --seed 3 --out '" + tmp.path("zero.st") + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/dev/zero: not a regular file (a device or a pipe, "
                       "which may never end); give a text file\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path("zero.st")));
  r = run("train '" + v6 + "'" + common + " --out '" + tmp.path("full.st") +
          "' --log '" + tmp.path("full.csv") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  // Not a terminal: plain lines, with the eval results.
  EXPECT_NE(r.err.find("step 12/12"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("eval "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  r = run("train '" + v6 + "'" + common + " --stop-after 5 --out '" +
          tmp.path("part.st") + "' --log '" + tmp.path("part.csv") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(TensorMap::load(tmp.path("part.st")).metadata.at("step"), "5");
  // Settings come from the checkpoint.
  r = run("train '" + v6 + "' --data '" + tmp.path("a.txt") + "' '" +
          tmp.path("b.txt") + "' --resume '" + tmp.path("part.st") +
          "' --eval-every 4 --out '" + tmp.path("part.st") + "' --log '" +
          tmp.path("part.csv") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("note:"), std::string::npos) << r.err;
  EXPECT_EQ(readFile(tmp.path("full.st")), readFile(tmp.path("part.st")));
  std::string log = readFile(tmp.path("part.csv"));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 13); // header + 12

  // Changed settings are allowed, with a note; other data too.
  r = run("train '" + v6 + "' --data '" + tmp.path("a.txt") + "' '" +
          tmp.path("a.txt") + "' --resume '" + tmp.path("full.st") +
          "' --steps 14 --lr 0.01 --out '" + tmp.path("more.st") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: resuming with --lr 0.01 (checkpoint: 0.05)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("note: resuming with the data (240 bytes; checkpoint: "
                       "300 bytes)"),
            std::string::npos)
      << r.err;
  // Nothing left to do.
  r = run("train '" + v6 + "' --data '" + tmp.path("a.txt") + "' --resume '" +
          tmp.path("full.st") + "' --out '" + tmp.path("x.st") + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("at step 12, so --steps 12 leaves nothing to do"),
            std::string::npos)
      << r.err;
  // A checkpoint of another model.
  r = run("train '" + pkg + "' --data '" + tmp.path("a.txt") + "' --resume '" +
          tmp.path("full.st") + "' --out '" + tmp.path("x.st") + "'");
  EXPECT_EQ(r.code, 1);
  // (pkg has vocab 8, refused before the checkpoint is read.)
  EXPECT_NE(r.err.find("vocab_size is 8"), std::string::npos) << r.err;
  // A checkpoint serves as weights for forward.
  writeTokens(tmp.path("t.st"), {1, 4}, {97, 98, 99, 100});
  r = run("forward '" + v6 + "' --weights '" + tmp.path("full.st") +
          "' --tokens '" + tmp.path("t.st") + "' --out '" + tmp.path("o.st") +
          "'");
  EXPECT_EQ(r.code, 0) << r.err;
}

/// kill -9 at random moments of a training run that saves at every step:
/// each time, no temporary file remains, the checkpoint on disk (if one was
/// saved) loads, and --resume from it ends with the bytes of an
/// uninterrupted run. A stale temporary of a dead process is removed, and
/// said so, when training starts.
TEST_F(ModrunTest, KilledTrainingLeavesWholeCheckpoints) {
  std::string v6 = makeFakePackage(tmp.path("v6"), FAKE_MODEL_V6);
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += static_cast<char>('a' + i * 7 % 26);
  writeFile(tmp.path("a.txt"), text);
  const std::vector<std::string> common = {
      "train", v6, "--data", tmp.path("a.txt"), "--steps", "60", "--batch",
      "2",     "--lr", "0.05", "--seed", "3", "--save-every", "1"};
  auto argsWith = [&](const std::string &out) {
    std::string a;
    for (const std::string &c : common)
      a += "'" + c + "' ";
    return a + "--out '" + out + "'";
  };
  auto start = std::chrono::steady_clock::now();
  RunResult full = run(argsWith(tmp.path("full.st")));
  ASSERT_EQ(full.code, 0) << full.err;
  const double runUs = std::chrono::duration<double, std::micro>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  const std::string fullBytes = readFile(tmp.path("full.st"));

  std::random_device seedSource;
  const unsigned seed = seedSource();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> when(0.0, 1.2 * runUs);
  SCOPED_TRACE("kill schedule seed " + std::to_string(seed));
  const std::string out = tmp.path("killed.st");
  int resumed = 0;
  for (int kill = 0; kill < 20; ++kill) {
    SCOPED_TRACE("kill " + std::to_string(kill));
    std::filesystem::remove(out);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::vector<std::string> argv = {"modrun"};
      argv.insert(argv.end(), common.begin(), common.end());
      argv.insert(argv.end(), {"--out", out});
      std::vector<char *> cargv;
      for (std::string &a : argv)
        cargv.push_back(a.data());
      cargv.push_back(nullptr);
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      ::execv(MODRUN_PATH, cargv.data());
      ::_exit(127);
    }
    ::usleep(static_cast<useconds_t>(when(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Then train on: resume from the checkpoint when one was saved (it
    // must load), else start again. A kill in the instant between naming a
    // finished temporary and renaming it leaves that file; the next run
    // removes it, so none remains once it has started.
    if (std::filesystem::exists(out)) {
      TensorMap saved;
      ASSERT_NO_THROW(saved = TensorMap::load(out));
      RunResult r = saved.metadata.at("step") == "60" // it had finished
                        ? run(argsWith(tmp.path("again.st")))
                        : run("train '" + v6 + "' --data '" +
                              tmp.path("a.txt") + "' --resume '" + out +
                              "' --save-every 1 --out '" + out + "'");
      ASSERT_EQ(r.code, 0) << r.err;
      resumed += saved.metadata.at("step") != "60";
    } else {
      RunResult r = run(argsWith(out));
      ASSERT_EQ(r.code, 0) << r.err;
    }
    EXPECT_EQ(readFile(out), fullBytes);
    for (const std::string &name : tmp.list())
      EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
  }
  RecordProperty("resumed_after_kill", resumed);
  std::printf("kill -9 schedule seed %u: 20 kills, %d resumed exactly from "
              "a mid-run checkpoint\n",
              seed, resumed);

  // A temporary left by a process that no longer runs is removed at start.
  const pid_t dead = ::fork();
  if (dead == 0)
    ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  std::string stale = out + ".tmp." + std::to_string(dead);
  writeFile(stale, "partial");
  RunResult r = run(argsWith(out));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("modrun: removed " + stale +
                       ", a temporary checkpoint of process " +
                       std::to_string(dead) + ", which no longer runs\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(stale));
}

//===----------------------------------------------------------------------===//
// --tokenizer
//===----------------------------------------------------------------------===//

TEST_F(ModrunTest, TokenizeWithTokenizer) {
  // The windows are the tokens the BPE gives for the whole text.
  const std::string tj = TEST_DATA_DIR "/tokenizer/tokenizer.json";
  const std::string text =
      "Grüße aus 日本, 12345 <|endoftext|> the lazy dog.\n";
  std::string a = tmp.path("a.txt"), t = tmp.path("t.st");
  writeFile(a, text);
  std::vector<int32_t> ids = Tokenizer::fromFile(tj).encode(text);
  ASSERT_GE(ids.size(), 7u);
  RunResult r = run("tokenize '" + a + "' --seq-len 3 --batch 2 --offset 1 " +
                    "--tokenizer '" + tj + "' --out '" + t + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  TensorMap m = TensorMap::load(t);
  const Tensor &tok = m.get("tokens");
  ASSERT_EQ(tok.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::vector<int32_t>(tok.i32(), tok.i32() + 6),
            std::vector<int32_t>(ids.begin() + 1, ids.begin() + 7));
  EXPECT_EQ(m.metadata.at("modrun.tokenizer"), tj);

  // Counts are in tokens.
  size_t n = ids.size();
  r = run("tokenize '" + a + "' --seq-len " + std::to_string(n) +
          " --offset 1 --tokenizer '" + tj + "' --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(fmt::format("holds {} tokens; --batch 1 x --seq-len "
                                   "{} from --offset 1 needs {} tokens",
                                   n, n, n + 1)),
            std::string::npos)
      << r.err;
  // A tokenizer modrun cannot read is named with its key.
  nlohmann::json j = nlohmann::json::parse(readFile(tj));
  j["model"]["type"] = "WordPiece";
  writeFile(tmp.path("wp.json"), j.dump());
  r = run("tokenize '" + a + "' --seq-len 2 --tokenizer '" +
          tmp.path("wp.json") + "' --out '" + t + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(tmp.path("wp.json") +
                       ": model.type: 'WordPiece' is not supported"),
            std::string::npos)
      << r.err;
  // The tokenizer is an input: --out may not overwrite it.
  r = run("tokenize '" + a + "' --seq-len 2 --tokenizer '" +
          tmp.path("wp.json") + "' --out '" + tmp.path("wp.json") + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is the same file as --tokenizer"), std::string::npos)
      << r.err;
}

TEST_F(ModrunTest, TokenizerMustFitTheModel) {
  // pkg has vocab_size 8; the fixture BPE has 300 tokens. train, eval and
  // sample refuse before reading anything else.
  const std::string tj = TEST_DATA_DIR "/tokenizer/tokenizer.json";
  writeFile(tmp.path("a.txt"), "some text");
  const std::string want =
      pkg + ": the tokenizer " + tj +
      " has 300 tokens (ids up to 299), more than the model's vocab_size 8\n";
  for (std::string cmd :
       {"train '" + pkg + "' --data '" + tmp.path("a.txt") +
            "' --steps 1 --batch 1 --lr 0.1 --seed 1 --out '" +
            tmp.path("o.st") + "'",
        "eval '" + pkg + "' --weights '" + tmp.path("none.st") + "' --data '" +
            tmp.path("a.txt") + "'",
        "sample '" + pkg + "' --weights '" + tmp.path("none.st") +
            "' --prompt x --max-new 1"}) {
    RunResult r = run(cmd + " --tokenizer '" + tj + "'");
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.err.find(want), std::string::npos) << cmd << "\n" << r.err;
  }
}

TEST_F(ModrunTest, TrainAndEvalWithTokenizer) {
  // The small BPE (98 tokens) on the byte-level fake package: training and
  // eval count tokens, and the checkpoint records the token corpus.
  std::string v6 = makeFakePackage(tmp.path("v6"), FAKE_MODEL_V6);
  std::string tj = tmp.path("tok.json");
  writeSmallTokenizer(tj);
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += i % 5 == 0 ? " ab"
                       : std::string(1, static_cast<char>('a' + i * 7 % 26));
  writeFile(tmp.path("a.txt"), text);
  size_t n = Tokenizer::fromFile(tj).encode(text).size();
  ASSERT_LT(n, text.size());
  RunResult r =
      run("train '" + v6 + "' --data '" + tmp.path("a.txt") +
          "' --steps 3 --batch 2 --lr 0.05 --seed 3 --eval-every 3 " +
          "--tokenizer '" + tj + "' --out '" + tmp.path("c.st") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(fmt::format("on {} tokens (", n)), std::string::npos)
      << r.err;
  EXPECT_EQ(TensorMap::load(tmp.path("c.st")).metadata.at("data_bytes"),
            std::to_string(n));
  r = run("eval '" + v6 + "' --weights '" + tmp.path("c.st") + "' --data '" +
          tmp.path("a.txt") + "' --batch 2 --tokenizer '" + tj + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("held-out tokens"), std::string::npos) << r.out;
  // Resuming with bytes instead is other data: noted.
  r = run("train '" + v6 + "' --data '" + tmp.path("a.txt") + "' --resume '" +
          tmp.path("c.st") + "' --steps 4 --out '" + tmp.path("d.st") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(fmt::format("note: resuming with the data ({} bytes; "
                                   "checkpoint: {} bytes)",
                                   text.size(), n)),
            std::string::npos)
      << r.err;
}
