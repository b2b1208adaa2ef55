//===- fuzz_manifest.cpp - Fuzz target: the package manifest parser ------===//
//
// Input: the text of a package's manifest.json (docs/internals.md).
// Manifest::parse must refuse anything malformed with modrt::Error; what it
// accepts must hold together: routed layers ascending and listed in
// "layers", params with non-negative shapes.
//
//===----------------------------------------------------------------------===//
#include "FuzzUtil.h"
#include "modrt/Error.h"
#include "modrt/Package.h"

#include <algorithm>

using namespace modrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  Manifest m;
  try {
    m = Manifest::parse(text, "fuzz/manifest.json");
  } catch (const Error &) {
    return 0;
  }
  fuzz::require(std::is_sorted(m.routedLayers.begin(), m.routedLayers.end()),
                "routed layers ascend");
  for (int l : m.routedLayers)
    fuzz::require(std::any_of(m.layers.begin(), m.layers.end(),
                              [&](const LayerInfo &i) {
                                return i.index == l && i.routed;
                              }),
                  "each routed layer is a routed entry of \"layers\"");
  for (const ParamInfo &p : m.params)
    fuzz::require(std::all_of(p.shape.begin(), p.shape.end(),
                              [](int64_t d) { return d >= 0; }),
                  "param shapes are non-negative");
  return 0;
}
