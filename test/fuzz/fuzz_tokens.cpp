//===- fuzz_tokens.cpp - Fuzz target: token files ------------------------===//
//
// Input: the bytes of a --tokens file. Runs `modrun forward` (topk and
// causal) and `modrun grad` on it with the fake package of test/runtime
// (vocab 8, seq_len 4) and good weights: every malformed file (no 'tokens',
// wrong dtype or shape, ids outside the vocabulary) must end in
// modrt::Error or a usage error, never a crash (docs/errors.md, "tokens"
// and "grad"). The target links modrun's command sources (ModrunCommand.h)
// so that the checks under test are modrun's own.
//
//===----------------------------------------------------------------------===//
#include "FuzzUtil.h"
#include "ModrunCommand.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"

#include <optional>

using namespace modrt;

namespace {
struct Fixture {
  std::string pkg, weights, tokens, out;
  /// Held open so that each run's Package::open finds the library loaded.
  std::optional<Package> keep;
};

Fixture &fixture() {
  static Fixture f = [] {
    Fixture f;
    f.pkg = fuzz::makeFakePackage(fuzz::scratchDir() + "/pkg", FAKE_MODEL_V0);
    f.keep.emplace(Package::open(f.pkg));
    f.weights = fuzz::scratchDir() + "/w.safetensors";
    f.tokens = fuzz::scratchDir() + "/t.safetensors";
    f.out = fuzz::scratchDir() + "/out.safetensors";
    f.keep->initWeights(1).save(f.weights);
    return f;
  }();
  return f;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Fixture &f = fixture();
  fuzz::writeFile(f.tokens, data, size);
  for (const char *mode : {"topk", "causal"})
    fuzz::runModrun(modrun::kForwardCommand,
                    {f.pkg, "--weights", f.weights, "--tokens", f.tokens,
                     "--out", f.out, "--mode", mode});
  fuzz::runModrun(modrun::kGradCommand, {f.pkg, "--weights", f.weights,
                                         "--tokens", f.tokens, "--out", f.out});
  return 0;
}
