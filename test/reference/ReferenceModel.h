//===- ReferenceModel.h - Naive fp64 reference of the MoD forward -*- C++
//-*-===//
//
// An independent oracle for docs/model-format.md: the forward pass of a
// Mixture-of-Depths transformer written with straight loops in double
// precision. It shares no code with the compiler, the runtime or the CPU
// kernels; every numerics test compares a compiled package against it.
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

/// Selection rule of routed layers (docs/model-format.md sections 3 and 4).
enum class RouteMode { TopK, Causal };

/// Gate applied to the router logit of a selected token. `One` (g = 1) is an
/// ablation gate the compiler accepts; capacity 1.0 with it equals dense.
enum class Gate { Linear, Sigmoid, One };

/// How the causal (sampling) decision is made
/// (docs/model-format.md section 4).
enum class CausalRouter { AuxLoss, Predictor, None };

/// Activation of the MLP.
enum class Mlp { SwiGLU, GELU };

/// Thrown for a model description the reference cannot interpret or for a
/// request docs/model-format.md forbids (such as causal mode without a causal
/// router).
class ReferenceError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The model description of docs/model-format.md section 1, with every
/// default applied.
struct ModelConfig {
  std::string name;
  int64_t vocabSize = 0;
  int64_t dModel = 0;
  int64_t nLayers = 0;
  int64_t nHeads = 0;
  /// n_kv_heads (default n_heads): key/value heads of grouped-query
  /// attention.
  int64_t nKvHeads = 0;
  int64_t dFF = 0;
  int64_t seqLen = 0;
  Mlp mlp = Mlp::SwiGLU;
  double normEps = 1e-5;
  double ropeTheta = 10000.0;
  bool tieEmbeddings = true;
  /// dtype bf16: every product's operands (the block's projections and the
  /// LM head) and the attention's q, k, v are rounded to bf16.
  bool bf16 = false;
  /// True when the description has a `mod` object.
  bool hasMod = false;
  /// k = clamp(ceil(capacity * seq_len), 1, seq_len), or capacity_tokens.
  int64_t capacity = 0;
  Gate gate = Gate::Linear;
  CausalRouter causalRouter = CausalRouter::None;
  int64_t predictorHidden = 0;
  /// mod.aux_loss_weight: total loss = ce + auxLossWeight * L_aux.
  double auxLossWeight = 0.01;
  /// routed[l] is true when layer l is a routed (MoD) layer.
  std::vector<bool> routed;

  /// Mixture-of-Experts MLPs (docs/model-format.md section 7): the `moe`
  /// object. E real experts of hidden width dExpert, N no-op experts.
  bool hasMoe = false;
  int64_t nExperts = 0;
  int64_t noopExperts = 0;
  int64_t dExpert = 0;
  double capacityFactor = 1.0;
  /// moe.balance_loss_weight: total loss += weight * mean over MoE layers of
  /// L_bal.
  double balanceLossWeight = 0.01;
  /// moe[l] is true when layer l's MLP is an MoE MLP.
  std::vector<bool> moe;

  int64_t headDim() const { return dModel / nHeads; }
  int64_t numRoutedLayers() const;
  int64_t numMoeLayers() const;
  /// The per-sequence, per-expert capacity of an MoE MLP that n tokens of a
  /// sequence reach (n = seq_len on a dense layer, k on a routed one):
  /// C = clamp(ceil(capacity_factor * n / (E + N)), 1, n).
  int64_t expertCapacity(int64_t n) const;
  /// The expert capacity C of layer l (0 for a layer without MoE).
  int64_t expertCapacityOfLayer(int64_t layer) const;

  /// Parses the JSON of docs/model-format.md section 1. Throws ReferenceError
  /// naming the offending key for anything the reference does not understand.
  static ModelConfig fromJson(const nlohmann::json &j);
};

/// Weights keyed by the docs/model-format.md section 2 names, row-major, in
/// double.
using Weights = std::map<std::string, std::vector<double>>;

/// Every parameter the model needs, in a fixed order, with its shape
/// (docs/model-format.md section 2). Tied models have no `lm_head.weight`.
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
  /// One [B, S] predictor logit p per routed layer with the predictor
  /// router (either mode; in top-k mode p does not affect the forward);
  /// empty otherwise.
  std::vector<std::vector<double>> predictorLogits;
  /// Per MoE layer, in ascending layer index (docs/model-format.md
  /// section 7): the chosen expert e_i of each token as [B, S] (-1 for a
  /// token that does not reach the MLP: skipped by a routed layer), whether
  /// it was kept ([B, S], 1 = kept), the router probabilities p_i
  /// ([B, S, E+N], zero rows for tokens that do not reach the MLP), the
  /// normalised rows n_i the MoE MLP saw ([B, S, d], likewise) and the
  /// balance loss L_bal of the layer.
  std::vector<std::vector<int32_t>> moeExpert;
  std::vector<std::vector<int32_t>> moeKept;
  std::vector<std::vector<double>> moeProbs;
  std::vector<std::vector<double>> moeInputs;
  std::vector<double> moeBalance;
};

/// Runs the forward pass of docs/model-format.md section 3 on `tokens`
/// ([batch, seq_len]) in double precision. Throws ReferenceError on a missing
/// weight, a wrong weight size, an out-of-range token, or causal mode without
/// a causal router.
ReferenceOutput forward(const ModelConfig &config, const Weights &weights,
                        const std::vector<int32_t> &tokens, int64_t batch,
                        RouteMode mode);

/// Token-by-token decoding in `causal` mode (docs/model-format.md sections 4
/// and 7), one position at a time with explicit state: per layer a KV cache
/// of the tokens the layer ran on, and per sequence, MoE layer and expert the
/// count kept so far. Returns the logits of every position and the routing
/// and MoE decisions (routed, moeExpert, moeKept; the other fields empty).
/// A model with routed layers needs a causal router, as forward() does.
ReferenceOutput decode(const ModelConfig &config, const Weights &weights,
                       const std::vector<int32_t> &tokens, int64_t batch);

//===----------------------------------------------------------------------===//
// Training loss and gradients (docs/model-format.md sections 4 and 5)
//===----------------------------------------------------------------------===//

/// A top-k selection: one [B, S] mask (1 = selected) per routed layer, in
/// ascending layer index, as in ReferenceOutput::routed.
using Selection = std::vector<std::vector<int32_t>>;

/// The MoE decisions of docs/model-format.md section 7, per MoE layer in
/// ascending layer index, as ReferenceOutput::moeExpert and moeKept. Section
/// 7 differentiates with them held constant.
struct MoeDecisions {
  std::vector<std::vector<int32_t>> expert;
  std::vector<std::vector<int32_t>> kept;
  bool operator==(const MoeDecisions &o) const {
    return expert == o.expert && kept == o.kept;
  }
};

/// The training loss of docs/model-format.md section 4 and its parts.
struct LossBreakdown {
  /// ce + auxLossWeight * aux + balanceLossWeight * balance.
  double total = 0.0;
  /// Mean over B * S of -log softmax(logits)[target].
  double ce = 0.0;
  /// L_aux of the model's causal router: routerBce (aux_loss), predictorBce
  /// (predictor), 0 (none, or no routed layer).
  double aux = 0.0;
  /// Mean over routed layers of mean over (b, i) of BCEWithLogits(r_i,
  /// 1[i in I]), computed whatever the causal router (0 without routed
  /// layers).
  double routerBce = 0.0;
  /// The same with the predictor logits p_i (0 unless causal_router is
  /// predictor).
  double predictorBce = 0.0;
  /// Mean over MoE layers of L_bal (docs/model-format.md section 7; 0
  /// without MoE layers). Reported as `loss.balance`.
  double balance = 0.0;
  /// The MoE decisions the forward used.
  MoeDecisions moe;
  /// With fixed MoE decisions: whether the decisions of these weights differ
  /// from them.
  bool moeDiffersFromFixed = false;
  /// The selection the forward used (the top-k at these weights unless a
  /// fixed one was given).
  Selection selection;
  /// With a fixed selection: whether the top-k of these weights differs
  /// from it in any routed layer and sequence.
  bool topkDiffersFromFixed = false;
};

/// The training loss of docs/model-format.md section 4 on `tokens`
/// ([batch, seq_len + 1]): the forward in top-k mode on tokens[:, :S],
/// cross-entropy against tokens[:, 1:S+1], and the causal-router BCE. With
/// `fixed`, routed layers use that selection instead of their own top-k (top-k
/// as a constant, the way section 5 differentiates). Throws ReferenceError like
/// forward().
/// With `fixedMoe`, MoE layers use those expert choices and capacity
/// decisions (and the balance loss's frac_e) instead of their own, the
/// constants of docs/model-format.md section 7's gradients.
LossBreakdown referenceLoss(const ModelConfig &config, const Weights &weights,
                            const std::vector<int32_t> &tokens, int64_t batch,
                            const Selection *fixed = nullptr,
                            const MoeDecisions *fixedMoe = nullptr);

/// Whether `name` is a predictor parameter (blocks.{l}.predictor.*).
bool isPredictorParameter(const std::string &name);

/// The scalar whose gradient a parameter receives under the stop-gradient
/// semantics of docs/model-format.md sections 4 and 5: predictor parameters see
/// only auxLossWeight * predictorBce (the predictor does not affect the
/// forward); every other parameter sees ce + auxLossWeight * routerBce with the
/// aux_loss router, and ce alone otherwise (the predictor's loss stops at
/// stopgrad(x)), plus balanceLossWeight * balance (section 7). Both sum to
/// the total loss's gradient.
double gradientObjective(const ModelConfig &config, const LossBreakdown &loss,
                         const std::string &name);

/// Options of the finite-difference gradient.
struct FdOptions {
  /// Step for coordinate theta of tensor T: h = relStep * scale, scale =
  /// max(|theta|, rms(T)), or 1 when both are zero.
  double relStep = 1e-6;
  /// 0: every coordinate. Otherwise this many distinct random coordinates
  /// per tensor (every coordinate of a smaller tensor).
  int64_t coordsPerTensor = 0;
  /// Seed of the coordinate subset.
  uint64_t seed = 1;
  /// Worker threads (0: hardware concurrency).
  int threads = 0;
};

/// Central finite differences, in double, of gradientObjective() for every
/// parameter, with top-k and the MoE decisions held at those of the
/// unperturbed weights.
struct FdGradient {
  /// Full-size tensors keyed like the weights; NaN where not evaluated.
  Weights grad;
  /// The evaluated coordinates of each tensor, ascending.
  std::map<std::string, std::vector<int64_t>> coords;
  /// The loss at the unperturbed weights (its selection is the one held).
  LossBreakdown base;
  /// Evaluations at theta +- h whose own top-k or MoE decisions differed
  /// from the held ones: a routing margin within the perturbation; redraw
  /// the instance when nonzero.
  int64_t selectionChanges = 0;
  /// The first such evaluation, "tensor[index]", for messages.
  std::string firstSelectionChange;
};

FdGradient referenceGradient(const ModelConfig &config, const Weights &weights,
                             const std::vector<int32_t> &tokens, int64_t batch,
                             const FdOptions &options = {});

} // namespace modref

#endif // MODC_TEST_REFERENCE_REFERENCEMODEL_H
