//===- fuzz_checkpoint.cpp - Fuzz target: checkpoint resume --------------===//
//
// Input: the bytes of a checkpoint. Runs `modrun train --resume` on it with
// the byte-level fake package of test/runtime and a small corpus: every
// damaged or foreign checkpoint (metadata, tensors, moments, step, data
// position) must end in modrt::Error or a usage error, never a crash
// (docs/errors.md, "checkpoints"). A checkpoint that resumes trains at most
// one step (--stop-after). The target links modrun's command sources
// (ModrunCommand.h) so that the resume path under test is modrun's own.
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
  std::string pkg, data, ckpt, out;
  std::optional<Package> keep;
};

Fixture &fixture() {
  static Fixture f = [] {
    Fixture f;
    f.pkg = fuzz::makeFakePackage(fuzz::scratchDir() + "/pkg", FAKE_MODEL_V6);
    f.keep.emplace(Package::open(f.pkg));
    f.data = fuzz::scratchDir() + "/data.txt";
    f.ckpt = fuzz::scratchDir() + "/in.ckpt";
    f.out = fuzz::scratchDir() + "/out.ckpt";
    std::string text;
    for (int i = 0; i < 64; ++i)
      text += "the quick brown fox ";
    fuzz::writeFile(f.data, text.data(), text.size());
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
  fuzz::writeFile(f.ckpt, data, size);
  // Train at most one step past the checkpoint's own.
  uint64_t stopAfter = 1;
  try {
    TensorMap file = TensorMap::load(f.ckpt);
    auto step = file.metadata.find("step");
    if (step != file.metadata.end()) {
      unsigned long long s = std::strtoull(step->second.c_str(), nullptr, 10);
      if (s < (1ull << 62))
        stopAfter = s + 1;
    }
  } catch (const Error &) {
  }
  std::vector<std::string> args = {
      f.pkg,   "--resume", f.ckpt,       "--data", f.data,
      "--out", f.out,      "--stop-after", std::to_string(stopAfter)};
  fuzz::runModrun(modrun::kTrainCommand, std::move(args));
  return 0;
}
