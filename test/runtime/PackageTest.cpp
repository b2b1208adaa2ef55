//===- PackageTest.cpp - Package loading, weights and forward marshalling -===//
//
// Uses the hand-written fake packages (FakeModel.cpp) to test what the
// runtime checks before trusting a package and how it calls modc_forward.
//
//===----------------------------------------------------------------------===//
#include "modrt/Package.h"
#include "modrt/CpuFeatures.h"
#include "TestUtil.h"
#include "modrt/abi.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <cmath>
#include <dlfcn.h>
#include <functional>
#include <numeric>

using namespace modrt;
using namespace modrt_test;
using nlohmann::json;

namespace {

/// The manifest text a fake library embeds, read straight from it.
std::string embeddedManifest(const std::string &lib) {
  void *h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw std::runtime_error(::dlerror());
  auto fn =
      reinterpret_cast<const char *(*)()>(::dlsym(h, "modc_manifest_json"));
  std::string text = fn();
  ::dlclose(h);
  return text;
}

/// Builds a package directory from fake library `lib`; `edit` may change
/// the manifest.json written beside it.
std::string makePackage(const TempDir &tmp, const std::string &lib,
                        const std::function<void(json &)> &edit = nullptr) {
  std::string dir = tmp.path("pkg");
  std::filesystem::create_directory(dir);
  std::filesystem::copy_file(lib, dir + "/libmodel.so",
                             std::filesystem::copy_options::overwrite_existing);
  json m = json::parse(embeddedManifest(lib));
  if (edit)
    edit(m);
  writeFile(dir + "/manifest.json", m.dump(2));
  return dir;
}

/// What the fake model computes (see FakeManifest.h), for checking results.
ForwardResult expected(const TensorMap &w, const std::vector<int32_t> &tok,
                       int64_t batch, RouteMode mode) {
  const int64_t S = 4, D = 4, V = 8, K = 2;
  const float *E = w.get("embed.weight").f32();
  const float *R = w.get("blocks.1.router.weight").f32();
  const float *N = w.get("final_norm.weight").f32();
  ForwardResult r;
  r.logits.assign(batch * S * V, 0);
  r.routed.assign(1, std::vector<int32_t>(batch * S, 0));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> score(S, 0);
    for (int64_t i = 0; i < S; ++i) {
      const float *e = E + tok[b * S + i] * D;
      for (int64_t j = 0; j < D; ++j)
        score[i] += R[j] * e[j];
      for (int64_t v = 0; v < V; ++v) {
        float acc = 0;
        for (int64_t j = 0; j < D; ++j)
          acc += e[j] * N[j] * E[v * D + j];
        r.logits[(b * S + i) * V + v] = acc;
      }
    }
    // Top-k by sorting indices: largest score first, ties to lower index.
    std::vector<int64_t> order(S);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return score[x] > score[y]; });
    for (int64_t i = 0; i < S; ++i) {
      if (mode == RouteMode::Causal)
        r.routed[0][b * S + i] = score[i] > 0;
    }
    if (mode == RouteMode::TopK)
      for (int64_t n = 0; n < K; ++n)
        r.routed[0][b * S + order[n]] = 1;
  }
  return r;
}

class PackageTest : public ::testing::Test {
protected:
  TempDir tmp;
};

} // namespace

TEST_F(PackageTest, MissingDirectory) {
  EXPECT_TRUE(throwsError([&] { Package::open(tmp.path("none")); },
                          {tmp.path("none"), "does not exist"}));
}

TEST_F(PackageTest, FileInsteadOfDirectory) {
  writeFile(tmp.path("file"), "x");
  EXPECT_TRUE(throwsError([&] { Package::open(tmp.path("file")); },
                          {"not a modc package", "not a directory"}));
}

TEST_F(PackageTest, NoManifest) {
  std::filesystem::copy_file(FAKE_MODEL_V0, tmp.path("libmodel.so"));
  EXPECT_TRUE(throwsError([&] { Package::open(tmp.str()); },
                          {tmp.str(), "not a modc package", "manifest.json"}));
}

TEST_F(PackageTest, NoLibrary) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V0);
  std::filesystem::remove(dir + "/libmodel.so");
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {dir, "not a modc package", "libmodel.so"}));
}

TEST_F(PackageTest, LibraryIsNotASharedObject) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V0);
  writeFile(dir + "/libmodel.so", "this is not ELF");
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {dir, "cannot load libmodel.so"}));
}

/// A library cut short (an interrupted copy) is refused with a clean error
/// before dlopen, which would map its missing pages and die with SIGBUS.
TEST_F(PackageTest, TruncatedLibrary) {
  const uint64_t full = std::filesystem::file_size(FAKE_MODEL_V0);
  for (uint64_t cut : {uint64_t(16), uint64_t(64), uint64_t(1024),
                       uint64_t(4096), full / 2, full - 1}) {
    SCOPED_TRACE(cut);
    std::string dir = makePackage(tmp, FAKE_MODEL_V0);
    std::filesystem::resize_file(dir + "/libmodel.so", cut);
    EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                            {dir, "cannot load libmodel.so",
                             "the file is truncated (" + std::to_string(cut) +
                                 " bytes",
                             "Copy or compile the package again"}));
  }
}

TEST_F(PackageTest, ManifestNotJson) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V0);
  writeFile(dir + "/manifest.json", "{oops");
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {"manifest.json", "not valid JSON"}));
}

TEST_F(PackageTest, MissingSymbol) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V2);
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {"not a modc package", "modc_forward"}));
}

TEST_F(PackageTest, LibraryAbiMismatch) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V1);
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {fmt::format("package ABI {}", MODC_ABI_VERSION + 1),
                           fmt::format("runtime expects {}", MODC_ABI_VERSION),
                           "recompile"}));
}

TEST_F(PackageTest, ManifestAbiMismatch) {
  // The version before this runtime's, whatever that is.
  std::string dir = makePackage(tmp, FAKE_MODEL_V0, [](json &m) {
    m["abi_version"] = MODC_ABI_VERSION - 1;
  });
  EXPECT_TRUE(
      throwsError([&] { Package::open(dir); },
                  {fmt::format("package ABI {}", MODC_ABI_VERSION - 1),
                   fmt::format("runtime expects {}", MODC_ABI_VERSION)}));
}

TEST_F(PackageTest, ManifestDoesNotMatchLibrary) {
  std::string dir = makePackage(
      tmp, FAKE_MODEL_V0, [](json &m) { m["layers"][1]["capacity"] = 3; });
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {dir, "manifest.json does not match the library"}));
}

TEST_F(PackageTest, WrongTarget) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V3);
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {"package target is \"tpu\"",
                           "runs \"cpu\" and \"cuda\" packages"}));
}

/// A package compiled for a CPU feature this CPU lacks is refused before its
/// library is loaded (the manifest names the feature; the fake library has
/// none of it, so loading it would have worked).
TEST_F(PackageTest, RefusesMissingCpuFeature) {
  std::string lacking;
  for (const CpuFeature &f : knownCpuFeatures())
    if (!cpuHasFeature(f.name)) {
      lacking = f.name;
      break;
    }
  if (lacking.empty())
    GTEST_SKIP() << "this CPU has every feature a manifest can name";
  std::string dir = makePackage(tmp, FAKE_MODEL_V0, [&](json &m) {
    m["cpu"] = {{"march", "x86-64-v4"}, {"features", {"sse3", lacking}}};
  });
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {dir, "--march=x86-64-v4",
                           "needs CPU features this CPU lacks: " + lacking +
                               ";",
                           "x86-64-v3"}));
}

/// The features of an x86-64-v3 package, which every machine this suite
/// runs on has, pass the check (and the manifest mismatch is then found).
TEST_F(PackageTest, AcceptsCpuFeaturesPresent) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V0, [&](json &m) {
    m["cpu"]["features"] = {"avx", "avx2", "fma"};
  });
  EXPECT_TRUE(throwsError([&] { Package::open(dir); },
                          {dir, "manifest.json does not match the library"}));
}

TEST_F(PackageTest, OpensGoodPackage) {
  std::string dir = makePackage(tmp, FAKE_MODEL_V0);
  Package pkg = Package::open(dir);
  EXPECT_EQ(pkg.manifest().params.size(), 3u);
  EXPECT_EQ(pkg.manifest().routedLayers, std::vector<int>{1});
  EXPECT_EQ(pkg.directory(), dir);
  // Moving keeps the library loaded and usable.
  Package moved = std::move(pkg);
  TensorMap w = moved.initWeights(1);
  ForwardResult r = moved.forward(w, {0, 1, 2, 3}, 1, RouteMode::TopK);
  EXPECT_EQ(r.logits.size(), 32u);
}

TEST_F(PackageTest, InitWeightsDeterministicPerSeed) {
  Package pkg = Package::open(makePackage(tmp, FAKE_MODEL_V0));
  TensorMap a = pkg.initWeights(42), b = pkg.initWeights(42),
            c = pkg.initWeights(43);
  ASSERT_EQ(a.size(), 3u);
  size_t i = 0;
  for (const auto &[name, t] : a) {
    // Manifest order, manifest shapes, identical bytes for the same seed.
    EXPECT_EQ(name, pkg.manifest().params[i].name);
    EXPECT_EQ(t.shape, pkg.manifest().params[i].shape) << name;
    EXPECT_EQ(t.data, b.get(name).data) << name;
    ++i;
  }
  EXPECT_NE(a.get("embed.weight").data, c.get("embed.weight").data);
  EXPECT_NE(a.get("blocks.1.router.weight").data,
            c.get("blocks.1.router.weight").data);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(a.get("final_norm.weight").f32()[i], 1.0f);
  EXPECT_NO_THROW(pkg.checkWeights(a));
}

TEST(InitTest, NormalStatistics) {
  ParamInfo p{"big", {1000, 1000}, "normal", 0.02};
  Tensor t = initParam(p, 9);
  const float *x = t.f32();
  int64_t n = t.numel();
  double sum = 0, sq = 0;
  int64_t within = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i];
    sq += double(x[i]) * x[i];
    within += std::fabs(x[i]) < 0.02;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_LT(std::fabs(mean), 1e-4); // 5 standard errors
  EXPECT_NEAR(sd, 0.02, 0.02 * 0.01);
  // Share within one std of a normal: 0.6827 (binomial s.e. ~0.0005).
  EXPECT_NEAR(double(within) / n, 0.6827, 0.005);
}

TEST(InitTest, StreamsDependOnSeedAndName) {
  ParamInfo a{"a", {64}, "normal", 1.0}, b{"b", {64}, "normal", 1.0};
  EXPECT_EQ(initParam(a, 5).data, initParam(a, 5).data);
  EXPECT_NE(initParam(a, 5).data, initParam(b, 5).data);
  EXPECT_NE(initParam(a, 5).data, initParam(a, 6).data);
  // Odd element count: the last Box-Muller pair is half used.
  ParamInfo odd{"odd", {3}, "normal", 1.0};
  Tensor t = initParam(odd, 0);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(std::isfinite(t.f32()[i]) && t.f32()[i] != 0.0f);
  ParamInfo z{"z", {5}, "zeros", 0}, o{"o", {5}, "ones", 0};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(initParam(z, 1).f32()[i], 0.0f);
    EXPECT_EQ(initParam(o, 1).f32()[i], 1.0f);
  }
  ParamInfo bad{"w", {2}, "xavier", 0};
  EXPECT_TRUE(throwsError([&] { initParam(bad, 1); }, {"'w'", "xavier"}));
}

TEST_F(PackageTest, CheckWeights) {
  Package pkg = Package::open(makePackage(tmp, FAKE_MODEL_V0));
  {
    TensorMap w = pkg.initWeights(1);
    w.insert("blocks.9.extra", Tensor::zeros(DType::F32, {1}));
    EXPECT_TRUE(throwsError([&] { pkg.checkWeights(w); },
                            {"'blocks.9.extra'", "not a parameter"}));
  }
  {
    TensorMap w;
    for (auto &[name, t] : pkg.initWeights(1))
      if (name != "final_norm.weight")
        w.insert(name, t);
    EXPECT_TRUE(throwsError([&] { pkg.checkWeights(w); },
                            {"missing", "'final_norm.weight'"}));
  }
  {
    TensorMap w;
    for (auto &[name, t] : pkg.initWeights(1))
      w.insert(name,
               name == "embed.weight" ? Tensor::zeros(DType::F32, {4, 8}) : t);
    EXPECT_TRUE(throwsError([&] { pkg.checkWeights(w); },
                            {"'embed.weight'", "[4, 8]", "expected [8, 4]"}));
  }
  {
    TensorMap w;
    for (auto &[name, t] : pkg.initWeights(1))
      w.insert(name, name == "final_norm.weight"
                         ? Tensor::zeros(DType::I32, {4})
                         : t);
    EXPECT_TRUE(throwsError([&] { pkg.checkWeights(w); },
                            {"'final_norm.weight'", "I32", "F32"}));
  }
}

TEST_F(PackageTest, ForwardMarshalsParamsAndOutputs) {
  Package pkg = Package::open(makePackage(tmp, FAKE_MODEL_V0));
  TensorMap w = pkg.initWeights(3);
  // Make final_norm distinguishable from ones so a swapped pointer shows.
  for (int i = 0; i < 4; ++i)
    w.get("final_norm.weight").f32()[i] = 0.5f + i;
  std::vector<int32_t> tok = {1, 5, 5, 0, 7, 2, 3, 6, 4, 4, 4, 4};
  for (RouteMode mode : {RouteMode::TopK, RouteMode::Causal}) {
    ForwardResult r = pkg.forward(w, tok, 3, mode);
    ForwardResult e = expected(w, tok, 3, mode);
    EXPECT_EQ(r.batch, 3);
    EXPECT_EQ(r.seqLen, 4);
    EXPECT_EQ(r.vocab, 8);
    ASSERT_EQ(r.logits.size(), e.logits.size());
    for (size_t i = 0; i < r.logits.size(); ++i)
      EXPECT_FLOAT_EQ(r.logits[i], e.logits[i]) << i;
    ASSERT_EQ(r.routed.size(), 1u);
    EXPECT_EQ(r.routed[0], e.routed[0]);
  }
  // Top-k routes exactly k = 2 tokens of each row; the equal-score row
  // {4,4,4,4} keeps the two lowest positions.
  ForwardResult r = pkg.forward(w, tok, 3, RouteMode::TopK);
  for (int b = 0; b < 3; ++b)
    EXPECT_EQ(std::accumulate(r.routed[0].begin() + 4 * b,
                              r.routed[0].begin() + 4 * b + 4, 0),
              2);
  EXPECT_EQ(std::vector<int32_t>(r.routed[0].begin() + 8, r.routed[0].end()),
            (std::vector<int32_t>{1, 1, 0, 0}));
}

TEST_F(PackageTest, ForwardValidatesTokens) {
  Package pkg = Package::open(makePackage(tmp, FAKE_MODEL_V0));
  TensorMap w = pkg.initWeights(3);
  EXPECT_TRUE(throwsError(
      [&] {
        pkg.forward(w, {1, 2, 3, 4, 5}, 2, RouteMode::TopK);
      },
      {"[B, seq_len] = [2, 4]", "8 values", "got 5"}));
  EXPECT_TRUE(throwsError(
      [&] {
        pkg.forward(w, {1, 2, 3, 4, 5, 6, 8, 0}, 2, RouteMode::TopK);
      },
      {"token 8", "batch row 1", "position 2", "[0, 8)"}));
  EXPECT_TRUE(throwsError(
      [&] {
        pkg.forward(w, {-1, 2, 3, 4}, 1, RouteMode::TopK);
      },
      {"token -1", "batch row 0", "position 0"}));
  EXPECT_TRUE(throwsError([&] { pkg.forward(w, {}, 0, RouteMode::TopK); },
                          {"batch must be >= 1"}));
  TensorMap bad;
  EXPECT_TRUE(throwsError(
      [&] {
        pkg.forward(bad, {1, 2, 3, 4}, 1, RouteMode::TopK);
      },
      {"missing", "'embed.weight'"}));
}

TEST_F(PackageTest, ForwardReportsLibraryError) {
  Package pkg = Package::open(makePackage(tmp, FAKE_MODEL_V0));
  TensorMap w = pkg.initWeights(3);
  EXPECT_TRUE(throwsError(
      [&] {
        pkg.forward(w, {7, 1, 1, 1}, 1, RouteMode::TopK);
      },
      {"forward failed (status 1)", "fake: token 7 at [0, 0] is refused"}));
  // The package still works after an error.
  EXPECT_NO_THROW(pkg.forward(w, {1, 7, 1, 1}, 1, RouteMode::TopK));
}

TEST_F(PackageTest, CausalRefusedWithoutCausalRouter) {
  Package pkg = Package::open(makePackage(tmp, FAKE_MODEL_V4));
  EXPECT_FALSE(pkg.manifest().supportsCausal);
  TensorMap w = pkg.initWeights(3);
  EXPECT_TRUE(throwsError(
      [&] {
        pkg.forward(w, {1, 2, 3, 4}, 1, RouteMode::Causal);
      },
      {"causal mode needs mod.causal_router aux_loss or predictor; this "
       "model has none"}));
  EXPECT_NO_THROW(pkg.forward(w, {1, 2, 3, 4}, 1, RouteMode::TopK));
}
