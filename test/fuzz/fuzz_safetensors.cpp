//===- fuzz_safetensors.cpp - Fuzz target: the safetensors reader --------===//
//
// Input: the bytes of a safetensors file (docs/model-format.md section 6).
// TensorMap::load must refuse anything malformed with modrt::Error and never
// crash or allocate more than the file holds. A file it accepts must survive
// a save and load unchanged, and loadWeights must accept it too.
//
//===----------------------------------------------------------------------===//
#include "FuzzUtil.h"
#include "modrt/Error.h"
#include "modrt/Tensor.h"
#include "modrt/Training.h"

#include <cstring>

using namespace modrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = fuzz::scratchDir() + "/in.safetensors";
  const std::string copy = fuzz::scratchDir() + "/copy.safetensors";
  fuzz::writeFile(path, data, size);
  TensorMap map;
  try {
    map = TensorMap::load(path);
  } catch (const Error &) {
    return 0;
  }
  loadWeights(path); // accepts whatever load accepts
  map.save(copy);
  TensorMap back = TensorMap::load(copy);
  fuzz::require(back.size() == map.size(), "round trip keeps the tensors");
  fuzz::require(back.metadata == map.metadata, "round trip keeps metadata");
  auto a = map.begin();
  for (auto b = back.begin(); b != back.end(); ++a, ++b) {
    fuzz::require(a->first == b->first, "round trip keeps names and order");
    fuzz::require(a->second.dtype == b->second.dtype &&
                      a->second.shape == b->second.shape &&
                      a->second.byteSize() == b->second.byteSize(),
                  "round trip keeps dtypes and shapes");
    fuzz::require(a->second.byteSize() == 0 ||
                      std::memcmp(a->second.data.data(), b->second.data.data(),
                                  a->second.byteSize()) == 0,
                  "round trip keeps the data");
  }
  return 0;
}
