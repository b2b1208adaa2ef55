//===- ReferenceModel.h - Naive fp64 reference of the MoD forward -*- C++
//-*-===//
//
// An independent oracle for SPEC.md: the forward pass of a Mixture-of-Depths
// transformer written with straight loops in double precision. It shares no
// code with the compiler, the runtime or the CPU kernels; every numerics test
// compares a compiled package against it.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_REFERENCE_REFERENCEMODEL_H
#define MODC_TEST_REFERENCE_REFERENCEMODEL_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace modref {

/// Selection rule of routed layers (SPEC.md sections 3 and 4).
enum class RouteMode { TopK, Causal };

/// Gate applied to the router logit of a selected token. `One` (g = 1) is an
/// ablation gate the compiler accepts; capacity 1.0 with it equals dense.
enum class Gate { Linear, Sigmoid, One };

/// How the causal (sampling) decision is made (SPEC.md section 4).
enum class CausalRouter { AuxLoss, Predictor, None };

/// Activation of the MLP.
enum class Mlp { SwiGLU, GELU };

/// Thrown for a model description the reference cannot interpret or for a
/// request SPEC.md forbids (such as causal mode without a causal router).
class ReferenceError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The model description of SPEC.md section 1, with every default applied.
struct ModelConfig {
  std::string name;
  int64_t vocabSize = 0;
  int64_t dModel = 0;
  int64_t nLayers = 0;
  int64_t nHeads = 0;
  int64_t dFF = 0;
  int64_t seqLen = 0;
  Mlp mlp = Mlp::SwiGLU;
  double normEps = 1e-5;
  double ropeTheta = 10000.0;
  bool tieEmbeddings = true;
  /// True when the description has a `mod` object.
  bool hasMod = false;
  /// k = clamp(ceil(capacity * seq_len), 1, seq_len), or capacity_tokens.
  int64_t capacity = 0;
  Gate gate = Gate::Linear;
  CausalRouter causalRouter = CausalRouter::None;
  int64_t predictorHidden = 0;
  /// routed[l] is true when layer l is a routed (MoD) layer.
  std::vector<bool> routed;

  int64_t headDim() const { return dModel / nHeads; }
  int64_t numRoutedLayers() const;

  /// Parses the JSON of SPEC.md section 1. Throws ReferenceError naming the
  /// offending key for anything the reference does not understand.
  static ModelConfig fromJson(const nlohmann::json &j);
};

/// Weights keyed by the SPEC.md section 2 names, row-major, in double.
using Weights = std::map<std::string, std::vector<double>>;

/// Every parameter the model needs, in a fixed order, with its shape
/// (SPEC.md section 2). Tied models have no `lm_head.weight`.
std::vector<std::pair<std::string, std::vector<int64_t>>>
parameterShapes(const ModelConfig &config);

/// Output of the reference forward pass.
struct ReferenceOutput {
  /// [B, S, V] logits.
  std::vector<double> logits;
  /// One [B, S] mask per routed layer, in ascending layer index; 1 = routed.
  std::vector<std::vector<int32_t>> routed;
  /// One [B, S] router logit r per routed layer (for diagnosing near-ties).
  std::vector<std::vector<double>> routerLogits;
  /// One [B, S] predictor logit p per routed layer in causal mode with the
  /// predictor router; empty otherwise.
  std::vector<std::vector<double>> predictorLogits;
};

/// Runs the forward pass of SPEC.md section 3 on `tokens` ([batch, seq_len])
/// in double precision. Throws ReferenceError on a missing weight, a wrong
/// weight size, an out-of-range token, or causal mode without a causal
/// router.
ReferenceOutput forward(const ModelConfig &config, const Weights &weights,
                        const std::vector<int32_t> &tokens, int64_t batch,
                        RouteMode mode);

} // namespace modref

#endif // MODC_TEST_REFERENCE_REFERENCEMODEL_H
