//===- ManifestTest.cpp - Manifest::parse validation ---------------------===//
//
// Starts from a valid manifest and breaks one key at a time; each error must
// name the key.
//
//===----------------------------------------------------------------------===//
#include "FakeManifest.h"
#include "TestUtil.h"
#include "modrt/Package.h"
#include "modrt/abi.h"

#include <gtest/gtest.h>

using namespace modrt;
using namespace modrt_test;
using nlohmann::json;

namespace {
json base() { return json::parse(kFakeManifest); }

::testing::AssertionResult parseFails(const json &j,
                                      std::vector<std::string> pieces) {
  pieces.push_back("m.json");
  return throwsError([&] { Manifest::parse(j.dump(), "m.json"); }, pieces);
}
} // namespace

TEST(ManifestTest, ParsesValidManifest) {
  Manifest m = Manifest::parse(kFakeManifest, "m.json");
  EXPECT_EQ(m.target, "cpu");
  EXPECT_EQ(m.abiVersion, MODC_ABI_VERSION);
  EXPECT_EQ(m.compilerVersion, "0.1.0");
  EXPECT_EQ(m.seqLen, 4);
  EXPECT_EQ(m.vocabSize, 8);
  EXPECT_EQ(m.dModel, 4);
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_FALSE(m.layers[0].routed);
  EXPECT_EQ(m.layers[0].capacity, 4); // dense: every token
  EXPECT_TRUE(m.layers[1].routed);
  EXPECT_EQ(m.layers[1].capacity, 2);
  EXPECT_EQ(m.routedLayers, std::vector<int>{1});
  ASSERT_EQ(m.params.size(), 3u);
  EXPECT_EQ(m.params[0].name, "embed.weight");
  EXPECT_EQ(m.params[0].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(m.params[0].init, "normal");
  EXPECT_DOUBLE_EQ(m.params[0].std, 0.5);
  EXPECT_EQ(m.params[2].init, "ones");
  EXPECT_EQ(m.workspaceBytesPerSequence, 256u);
  EXPECT_TRUE(m.supportsCausal);
  EXPECT_EQ(m.model["name"], "fake");
  // Training additions.
  EXPECT_TRUE(m.params[0].decay);
  EXPECT_TRUE(m.params[1].decay); // "decay" absent: true
  EXPECT_FALSE(m.params[2].decay);
  EXPECT_TRUE(m.supportsTraining);
  EXPECT_EQ(m.gradWorkspaceBytesPerSequence, 128u);
  EXPECT_DOUBLE_EQ(m.auxLossWeight, 0.01);
  EXPECT_NE(m.modelHash, 0u);
  // Decode additions.
  EXPECT_EQ(m.causalRouter, "aux_loss");
  EXPECT_TRUE(m.supportsDecode);
  EXPECT_EQ(m.decodeWorkspaceBytesPerSequence, 64u);
  EXPECT_EQ(m.kvCacheBytesPerSequence, 256u);
}

TEST(ManifestTest, DecodeEntry) {
  json j = base();
  j["entries"].erase("decode");
  Manifest m = Manifest::parse(j.dump(), "m.json");
  EXPECT_FALSE(m.supportsDecode);
  EXPECT_EQ(m.kvCacheBytesPerSequence, 0u);

  for (const char *key :
       {"workspace_bytes_per_sequence", "kv_cache_bytes_per_sequence"}) {
    json missing = base();
    missing["entries"]["decode"].erase(key);
    EXPECT_TRUE(parseFails(missing, {std::string("'entries.decode.") + key +
                                         "'",
                                     "missing"}));
    json negative = base();
    negative["entries"]["decode"][key] = -1;
    EXPECT_TRUE(parseFails(negative, {std::string("'entries.decode.") + key +
                                          "'",
                                      "non-negative integer"}));
  }
  json notObject = base();
  notObject["entries"]["decode"] = 3;
  EXPECT_TRUE(parseFails(notObject, {"'entries.decode'", "object"}));

  // A routed model with causal_router none cannot have a decode entry.
  json none = base();
  none["model"]["mod"]["causal_router"] = "none";
  none["entries"]["forward"]["modes"] = {"topk"};
  EXPECT_TRUE(parseFails(none, {"'entries.decode'", "causal_router"}));
  none["entries"].erase("decode");
  Manifest n = Manifest::parse(none.dump(), "m.json");
  EXPECT_EQ(n.causalRouter, "none");
  EXPECT_FALSE(n.supportsDecode);
}

TEST(ManifestTest, InferenceOnlyPackage) {
  json j = base();
  j["entries"].erase("grad");
  j["entries"].erase("adamw");
  Manifest m = Manifest::parse(j.dump(), "m.json");
  EXPECT_FALSE(m.supportsTraining);
  EXPECT_EQ(m.gradWorkspaceBytesPerSequence, 0u);
}

TEST(ManifestTest, ModelHashIdentifiesWeights) {
  uint64_t h = Manifest::parse(base().dump(), "m.json").modelHash;
  // Formatting, compiler version and workspace sizes do not matter.
  json j = base();
  j["compiler_version"] = "9.9.9";
  j["entries"]["forward"]["workspace_bytes_per_sequence"] = 1u << 20;
  EXPECT_EQ(Manifest::parse(j.dump(4), "m.json").modelHash, h);
  // The model and the params' shapes do.
  j = base();
  j["model"]["name"] = "other";
  EXPECT_NE(Manifest::parse(j.dump(), "m.json").modelHash, h);
  j = base();
  j["params"][2]["shape"] = {5};
  EXPECT_NE(Manifest::parse(j.dump(), "m.json").modelHash, h);
}

TEST(ManifestTest, NotJson) {
  EXPECT_TRUE(throwsError([] { Manifest::parse("{\"format\":", "m.json"); },
                          {"m.json", "not valid JSON"}));
  EXPECT_TRUE(throwsError([] { Manifest::parse("[]", "m.json"); },
                          {"m.json", "object"}));
}

TEST(ManifestTest, MissingKeysAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/format", "format"},
      {"/abi_version", "abi_version"},
      {"/compiler_version", "compiler_version"},
      {"/target", "target"},
      {"/model", "model"},
      {"/model/seq_len", "model.seq_len"},
      {"/model/vocab_size", "model.vocab_size"},
      {"/model/d_model", "model.d_model"},
      {"/model/mod/causal_router", "model.mod.causal_router"},
      {"/layers", "layers"},
      {"/layers/1/routed", "layers[1].routed"},
      {"/layers/1/capacity", "layers[1].capacity"},
      {"/layers/0/index", "layers[0].index"},
      {"/params", "params"},
      {"/params/1/name", "params[1].name"},
      {"/params/1/shape", "params[1].shape"},
      {"/params/2/init", "params[2].init"},
      {"/params/0/std", "params[0].std"},
      {"/entries", "entries"},
      {"/entries/forward", "entries.forward"},
      {"/entries/forward/workspace_bytes_per_sequence",
       "entries.forward.workspace_bytes_per_sequence"},
      {"/entries/forward/modes", "entries.forward.modes"},
      {"/entries/grad/workspace_bytes_per_sequence",
       "entries.grad.workspace_bytes_per_sequence"},
      // The training entries come as a pair; the missing one is named.
      {"/entries/grad", "entries.grad"},
      {"/entries/adamw", "entries.adamw"},
      // A cpu package says which ISA it was compiled for.
      {"/cpu", "cpu"},
      {"/cpu/march", "cpu.march"},
      {"/cpu/features", "cpu.features"},
  };
  for (const auto &[pointer, key] : cases) {
    json j = base();
    json::json_pointer p(pointer);
    j[p.parent_pointer()].erase(p.back());
    EXPECT_TRUE(parseFails(j, {"'" + key + "'", "missing"})) << pointer;
  }
}

TEST(ManifestTest, WrongTypesAreNamed) {
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"/format", "other", "format"},
      {"/format", 3, "format"},
      {"/abi_version", "1", "abi_version"},
      {"/abi_version", -1, "abi_version"},
      {"/compiler_version", 1, "compiler_version"},
      {"/target", json::array(), "target"},
      {"/model", "tiny", "model"},
      {"/model/seq_len", 0, "model.seq_len"},
      {"/model/seq_len", 2.5, "model.seq_len"},
      {"/model/vocab_size", "8", "model.vocab_size"},
      {"/model/d_model", -4, "model.d_model"},
      {"/model/mod", 1, "model.mod"},
      {"/model/mod/causal_router", "sometimes", "model.mod.causal_router"},
      {"/model/dtype", "f16", "model.dtype"},
      {"/model/dtype", 16, "model.dtype"},
      {"/layers", json::object(), "layers"},
      {"/layers/0", 0, "layers[0]"},
      {"/layers/0/index", 5, "layers[0].index"},
      {"/layers/1/routed", "yes", "layers[1].routed"},
      {"/layers/1/capacity", 5, "layers[1].capacity"},
      {"/layers/1/capacity", 0, "layers[1].capacity"},
      {"/params/0/name", "", "params[0].name"},
      {"/params/1/name", "embed.weight", "params[1].name"},
      {"/params/0/shape", json::array({8, -4}), "params[0].shape[1]"},
      {"/params/0/shape", 8, "params[0].shape"},
      {"/params/0/dtype", "BF16", "params[0].dtype"},
      {"/params/0/init", 1, "params[0].init"},
      {"/params/0/std", -0.1, "params[0].std"},
      {"/params/0/std", "0.02", "params[0].std"},
      {"/entries/forward/workspace_bytes_per_sequence", -1,
       "entries.forward.workspace_bytes_per_sequence"},
      {"/entries/forward/modes", json::array({"topk", "beam"}),
       "entries.forward.modes[1]"},
      {"/entries/forward/modes", json::array({"causal"}),
       "entries.forward.modes"},
      {"/params/2/decay", "no", "params[2].decay"},
      {"/model/mod/aux_loss_weight", "0.01", "model.mod.aux_loss_weight"},
      {"/model/mod/aux_loss_weight", -1, "model.mod.aux_loss_weight"},
      {"/entries/grad", 5, "entries.grad"},
      {"/entries/adamw", json::array(), "entries.adamw"},
      {"/entries/grad/workspace_bytes_per_sequence", 1.5,
       "entries.grad.workspace_bytes_per_sequence"},
      {"/cpu", "native", "cpu"},
      {"/cpu/march", 3, "cpu.march"},
      {"/cpu/features", "avx2", "cpu.features"},
      {"/cpu/features", json::array({"avx2", 2}), "cpu.features[1]"},
      // causal listed although the model has no causal router.
      {"/model/mod/causal_router", "none", "entries.forward.modes"},
  };
  for (const auto &[pointer, value, key] : cases) {
    json j = base();
    j[json::json_pointer(pointer)] = value;
    EXPECT_TRUE(parseFails(j, {"'" + key + "'"}))
        << pointer << " = " << value.dump();
  }
}

TEST(ManifestTest, CpuIsa) {
  json j = base();
  j["cpu"] = {{"march", "x86-64-v3"}, {"features", {"avx", "avx2", "fma"}}};
  Manifest m = Manifest::parse(j.dump(), "m.json");
  EXPECT_EQ(m.cpuMarch, "x86-64-v3");
  EXPECT_EQ(m.cpuFeatures, (std::vector<std::string>{"avx", "avx2", "fma"}));
  // A name outside the table cannot be checked, so it is refused.
  j["cpu"]["features"].push_back("avx1024");
  EXPECT_TRUE(parseFails(j, {"'cpu.features[3]'", "unknown CPU feature",
                             "\"avx1024\""}));
  // A cuda package needs no cpu object.
  j = base();
  j["target"] = "cuda";
  j["arch"] = "sm_90a";
  j.erase("cpu");
  EXPECT_TRUE(Manifest::parse(j.dump(), "m.json").cpuFeatures.empty());
}

TEST(ManifestTest, DenseModelWithoutMod) {
  json j = base();
  j["model"].erase("mod");
  j["layers"][1] = {{"index", 1}, {"routed", false}};
  j["params"].erase(1);
  j["entries"]["forward"]["modes"] = {"topk"};
  Manifest m = Manifest::parse(j.dump(), "m.json");
  EXPECT_TRUE(m.routedLayers.empty());
  EXPECT_FALSE(m.supportsCausal);
  EXPECT_EQ(m.params.size(), 2u);
}

TEST(ManifestTest, UnknownInitIsAcceptedUntilInit) {
  // A package whose init the runtime does not know still runs with loaded
  // weights; only initParam refuses it.
  json j = base();
  j["params"][2]["init"] = "orthogonal";
  Manifest m = Manifest::parse(j.dump(), "m.json");
  EXPECT_TRUE(throwsError([&] { initParam(m.params[2], 1); },
                          {"final_norm.weight", "orthogonal"}));
}

TEST(ManifestTest, Tokenizer) {
  // Optional; a file name inside the package directory.
  EXPECT_EQ(Manifest::parse(kFakeManifest, "m.json").tokenizer, "");
  json j = base();
  j["tokenizer"] = "tokenizer.json";
  EXPECT_EQ(Manifest::parse(j.dump(), "m.json").tokenizer, "tokenizer.json");
  j["tokenizer"] = "tok/bpe.json";
  EXPECT_EQ(Manifest::parse(j.dump(), "m.json").tokenizer, "tok/bpe.json");
  for (const char *bad :
       {"", "/etc/tokenizer.json", "../tokenizer.json", "a/../../t.json"}) {
    j["tokenizer"] = bad;
    EXPECT_TRUE(parseFails(j, {"manifest key 'tokenizer'",
                               "must be a file name relative to the package "
                               "directory, inside it"}))
        << bad;
  }
  j["tokenizer"] = 3;
  EXPECT_TRUE(parseFails(j, {"manifest key 'tokenizer'", "expected a string"}));
}

// model.moe (docs/model-format.md section 7): E, N and the MoE layers, which
// must index `layers` in ascending order; each error names the key.
TEST(ManifestTest, MixtureOfExperts) {
  json j = base();
  j["model"]["moe"] = {{"n_experts", 2},   {"noop_experts", 1},
                       {"d_expert", 8},    {"capacity_factor", 1.0},
                       {"layers", {0, 1}}, {"capacities", {2, 1}}};
  Manifest m = Manifest::parse(j.dump(), "m.json");
  EXPECT_EQ(m.moeExperts, 2);
  EXPECT_EQ(m.moeNoopExperts, 1);
  EXPECT_EQ(m.moeLayers, (std::vector<int>{0, 1}));
  EXPECT_TRUE(Manifest::parse(kFakeManifest, "m.json").moeLayers.empty());

  const std::vector<std::tuple<std::string, json, std::vector<std::string>>>
      cases = {
          {"/model/moe", 1, {"'model.moe'", "expected an object"}},
          {"/model/moe/layers",
           json::array({1, 0}),
           {"'model.moe.layers[1]'", "layer index 0 after 1",
            "must be ascending"}},
          {"/model/moe/layers",
           json::array({1, 1}),
           {"'model.moe.layers[1]'", "layer index 1 after 1"}},
          {"/model/moe/layers",
           json::array({0, 2}),
           {"'model.moe.layers[1]'",
            "layer index 2 is out of range [0, n_layers = 2)"}},
          {"/model/moe/layers",
           json::array({-1}),
           {"'model.moe.layers[0]'", "out of range"}},
          {"/model/moe/layers",
           json::array({"0"}),
           {"'model.moe.layers[0]'", "expected an integer"}},
          {"/model/moe/layers", 0, {"'model.moe.layers'", "expected an array"}},
          {"/model/moe/n_experts",
           0,
           {"'model.moe.n_experts'", "out of range"}},
          {"/model/moe/n_experts",
           1 << 21,
           {"'model.moe.n_experts'", "out of range [1, 1048576]"}},
          {"/model/moe/n_experts",
           2.5,
           {"'model.moe.n_experts'", "expected an integer"}},
          {"/model/moe/noop_experts",
           -1,
           {"'model.moe.noop_experts'", "out of range"}},
      };
  for (const auto &[pointer, value, pieces] : cases) {
    json bad = j;
    bad[json::json_pointer(pointer)] = value;
    EXPECT_TRUE(parseFails(bad, pieces)) << pointer << " = " << value.dump();
  }
  for (const char *key : {"n_experts", "noop_experts", "layers"}) {
    json bad = j;
    bad["model"]["moe"].erase(key);
    EXPECT_TRUE(
        parseFails(bad, {"'model.moe." + std::string(key) + "'", "missing"}))
        << key;
  }
}
