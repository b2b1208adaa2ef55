//===- Package.h - Loading and running modc packages ------------*- C++ -*-===//
//
// A package is a directory written by `modc compile` (docs/internals.md):
// libmodel.so exporting the C ABI of modrt/abi.h, plus manifest.json. The
// runtime verifies the package before trusting it (ABI version, embedded
// manifest, target) and then only moves bytes: it holds no model math.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_PACKAGE_H
#define MODRT_PACKAGE_H

#include "modrt/Tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace modrt {

/// One entry of the manifest's ordered "params" list.
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string init; ///< "normal", "ones" or "zeros"
  double std = 0.0; ///< standard deviation for "normal" (0 otherwise)
};

/// One entry of the manifest's "layers" list.
struct LayerInfo {
  int index = 0;
  bool routed = false;
  /// Tokens per sequence the layer processes: k for routed layers, seq_len
  /// for dense ones.
  int64_t capacity = 0;
};

/// The validated contents of a package's manifest.json.
struct Manifest {
  nlohmann::json model; ///< the normalised model description
  std::string target;
  uint32_t abiVersion = 0;
  std::string compilerVersion;
  int64_t seqLen = 0, vocabSize = 0, dModel = 0;
  std::vector<LayerInfo> layers;
  std::vector<ParamInfo> params;
  std::vector<int> routedLayers; ///< indices of routed layers, ascending
  uint64_t workspaceBytesPerSequence = 0;
  bool supportsCausal = false;

  /// Parses and validates manifest text key by key. `where` names the source
  /// (a file path) in error messages, which also name the offending key.
  static Manifest parse(const std::string &jsonText, const std::string &where);
};

/// Selection rule of routed layers (SPEC.md sections 3 and 4).
enum class RouteMode { TopK, Causal };

/// Outputs of Package::forward.
struct ForwardResult {
  int64_t batch = 0, seqLen = 0, vocab = 0;
  std::vector<float> logits; ///< [batch, seqLen, vocab]
  /// One [batch * seqLen] mask (1 = routed) per routed layer, in ascending
  /// layer index (Manifest::routedLayers order).
  std::vector<std::vector<int32_t>> routed;
};

/// A loaded, verified package. Move-only: it owns the dlopen handle.
class Package {
public:
  /// Opens the package directory `dir`: reads manifest.json, loads
  /// libmodel.so, and checks the ABI version, the embedded manifest and the
  /// target. Throws Error saying what is wrong.
  static Package open(const std::string &dir);

  Package(Package &&) noexcept;
  Package &operator=(Package &&) noexcept;
  Package(const Package &) = delete;
  Package &operator=(const Package &) = delete;
  ~Package();

  /// The package's validated manifest.
  const Manifest &manifest() const;
  /// The directory the package was opened from.
  const std::string &directory() const;

  /// Fresh weights following each param's "init", determined by `seed` alone.
  TensorMap initWeights(uint64_t seed) const;

  /// Throws Error unless `weights` holds exactly the manifest's params, each
  /// F32 with the manifest's shape.
  void checkWeights(const TensorMap &weights) const;

  /// Runs the full-sequence forward pass on `tokens` ([batch, seqLen],
  /// row-major). Validates weights and tokens first.
  ForwardResult forward(const TensorMap &weights,
                        const std::vector<int32_t> &tokens, int64_t batch,
                        RouteMode mode) const;

private:
  struct Impl;
  explicit Package(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

/// Deterministic initial values for `param` from `seed` (what initWeights
/// does for one tensor). Each param's stream depends on `seed` and its name
/// only, so adding a param does not change the others.
Tensor initParam(const ParamInfo &param, uint64_t seed);

} // namespace modrt

#endif // MODRT_PACKAGE_H
