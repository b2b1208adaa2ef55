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
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

/// Argument blocks of modc_decode and modc_forward (modrt/abi.h), for
/// Package::decodeRaw and Package::forwardRaw.
struct modc_decode_args;
struct modc_forward_args;

namespace modrt {

/// One entry of the manifest's ordered "params" list.
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  std::string init; ///< "normal", "ones" or "zeros"
  double std = 0.0; ///< standard deviation for "normal" (0 otherwise)
  /// Whether AdamW applies weight decay to it ("decay"; false for norm
  /// weights and biases). Informational: modc_adamw reads its own copy.
  bool decay = true;
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
  std::string target; ///< "cpu" or "cuda"
  /// CUDA architecture of a cuda package ("sm_90a", "sm_80"); "" for cpu.
  std::string arch;
  /// A cpu package's `-march` value ("native", "x86-64-v3") and the CPU
  /// features it implies (modrt/CpuFeatures.h names); empty for cuda.
  std::string cpuMarch;
  std::vector<std::string> cpuFeatures;
  uint32_t abiVersion = 0;
  std::string compilerVersion;
  int64_t seqLen = 0, vocabSize = 0, dModel = 0;
  /// model.dtype: "f32", or "bf16" (bf16 products and KV cache; the
  /// parameters and every tensor the runtime passes stay f32).
  std::string dtype = "f32";
  std::vector<LayerInfo> layers;
  std::vector<ParamInfo> params;
  std::vector<int> routedLayers; ///< indices of routed layers, ascending
  /// Mixture-of-Experts MLPs (model.moe, docs/model-format.md section 7):
  /// the MoE layers, ascending, and E real and N no-op experts.
  std::vector<int> moeLayers;
  int64_t moeExperts = 0, moeNoopExperts = 0;
  uint64_t workspaceBytesPerSequence = 0;
  bool supportsCausal = false;
  /// The forward entry can prefill the decode KV cache in one causal pass
  /// (manifest entries.forward.prefill).
  bool supportsPrefill = false;
  /// Whether the package exports modc_grad and modc_adamw (the manifest has
  /// both entries.grad and entries.adamw).
  bool supportsTraining = false;
  /// entries.grad.workspace_bytes_per_sequence (0 without training).
  uint64_t gradWorkspaceBytesPerSequence = 0;
  /// Whether the package exports the loss-only entry modc_eval (the
  /// manifest has entries.eval).
  bool supportsEval = false;
  /// entries.eval.workspace_bytes_per_sequence (0 without it).
  uint64_t evalWorkspaceBytesPerSequence = 0;
  /// Whether it also exports modc_eval_causal, the loss of causal routing
  /// (entries.eval.causal_workspace_bytes_per_sequence, then its value).
  bool supportsEvalCausal = false;
  uint64_t evalCausalWorkspaceBytesPerSequence = 0;
  /// model.mod.causal_router: "aux_loss", "predictor" or "none" (also
  /// "none" for a dense model).
  std::string causalRouter = "none";
  /// Whether the package exports the decode entry points (modc_decode,
  /// modc_kv_cache_bytes, modc_decode_workspace_bytes): the manifest has
  /// entries.decode. Routed models with causal_router none have none.
  bool supportsDecode = false;
  /// entries.decode.workspace_bytes_per_sequence (0 without decode).
  uint64_t decodeWorkspaceBytesPerSequence = 0;
  /// entries.decode.kv_cache_bytes_per_sequence (0 without decode).
  uint64_t kvCacheBytesPerSequence = 0;
  /// model.mod.aux_loss_weight when present (informational: the compiler
  /// bakes it into modc_grad), else 0.
  double auxLossWeight = 0.0;
  /// FNV-1a 64 of the canonical JSON of "model" and the params' names and
  /// shapes: equal exactly when two packages take the same weights with the
  /// same meaning (a recompile with another modc keeps it). Stored in
  /// checkpoints to refuse one written for another model.
  uint64_t modelHash = 0;
  /// The optional top-level "tokenizer": a Hugging Face tokenizer.json in
  /// the package directory, relative to it (docs/model-format.md section
  /// 6); "" when the package has none (the byte tokenizer).
  std::string tokenizer;

  /// Parses and validates manifest text key by key. `where` names the source
  /// (a file path) in error messages, which also name the offending key.
  static Manifest parse(const std::string &jsonText, const std::string &where);
};

/// Selection rule of routed layers (docs/model-format.md sections 3 and 4).
enum class RouteMode { TopK, Causal };

/// Outputs of Package::forward.
struct ForwardResult {
  int64_t batch = 0, seqLen = 0, vocab = 0;
  std::vector<float> logits; ///< [batch, seqLen, vocab]
  /// One [batch * seqLen] mask (1 = routed) per routed layer, in ascending
  /// layer index (Manifest::routedLayers order).
  std::vector<std::vector<int32_t>> routed;
  /// One [batch * seqLen] decision per MoE layer (Manifest::moeLayers
  /// order): the chosen expert e of a kept token or a no-op choice,
  /// e + E + N for a token over capacity, -1 for a token that does not
  /// reach the MLP (modc_forward_args::moe_decisions).
  std::vector<std::vector<int32_t>> moe;
};

/// The losses of docs/model-format.md sections 4 and 7 for one batch:
/// total = ce + aux_loss_weight * aux + balance_loss_weight * balance
/// (`loss.balance`: the mean over MoE layers of L_bal; 0 without them).
struct Losses {
  double total = 0, ce = 0, aux = 0, balance = 0;
};

/// Outputs of Package::grad.
struct GradResult {
  Losses losses;
  /// d total / d param, under the params' names and shapes.
  TensorMap grads;
};

/// Hyperparameters of Package::adamwStep besides the learning rate.
struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weightDecay = 0.1;
  /// Global gradient-norm clipping threshold; <= 0 disables clipping.
  double clipNorm = 1.0;
};

/// Outputs of Package::trainStep.
struct TrainStepResult {
  Losses losses;
  /// The global gradient norm before clipping (NaN where no AdamW step ran).
  double gradNorm = std::numeric_limits<double>::quiet_NaN();
  /// Whether the weights, moments and step were updated: false where a loss
  /// or the norm is not finite.
  bool updated = false;
};

/// AdamW moments, one tensor per param under the param's name, and the
/// number of updates done so far.
struct OptimizerState {
  TensorMap m, v;
  int64_t step = 0;
  /// Zero moments shaped like the manifest's params, at step 0.
  static OptimizerState zeros(const Manifest &manifest);
};

/// Returned by Package::keepOnDevice: while it lives, a CUDA package keeps the
/// device copy of those tensors. Move-only; does nothing for CPU packages.
class ResidentTensors {
public:
  ResidentTensors() = default;
  ResidentTensors(ResidentTensors &&other) noexcept
      : release_(std::move(other.release_)) {
    other.release_ = nullptr;
  }
  ResidentTensors &operator=(ResidentTensors &&other) noexcept {
    if (this != &other) {
      reset();
      release_ = std::move(other.release_);
      other.release_ = nullptr;
    }
    return *this;
  }
  ResidentTensors(const ResidentTensors &) = delete;
  ResidentTensors &operator=(const ResidentTensors &) = delete;
  ~ResidentTensors() { reset(); }
  void reset() {
    if (release_)
      release_();
    release_ = nullptr;
  }

private:
  friend class Package;
  std::function<void()> release_;
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
  ///
  /// With `causalDecisions`, it also receives the causal decision of every
  /// token in every routed layer (router r > 0 for aux_loss, predictor
  /// p > 0 for predictor) on this pass's own residual stream: one
  /// [batch * seqLen] mask per routed layer, in Manifest::routedLayers
  /// order. In topk mode, comparing it with ForwardResult::routed measures
  /// how well the causal router agrees with top-k membership. It is left
  /// empty when the model has no causal router (dense, or causal_router
  /// none).
  ForwardResult
  forward(const TensorMap &weights, const std::vector<int32_t> &tokens,
          int64_t batch, RouteMode mode,
          std::vector<std::vector<int32_t>> *causalDecisions = nullptr) const;

  /// Bytes of KV cache for `batch` decoding sequences: the larger of the
  /// library's modc_kv_cache_bytes and the manifest's per-sequence size
  /// times `batch`. Throws Error without decode entry points (see
  /// requireDecode) or when the size overflows.
  uint64_t kvCacheBytes(int64_t batch) const;
  /// Workspace bytes of one decode step for `batch` sequences (likewise).
  uint64_t decodeWorkspaceBytes(int64_t batch) const;
  /// Throws Error unless the package can decode: for a routed model with
  /// causal_router none, "routed layers with causal_router none cannot
  /// decode; compile with aux_loss or predictor".
  void requireDecode() const;
  /// One raw modc_decode call on caller-owned buffers; throws Error with the
  /// package's message on a non-OK status. Checks nothing else: use
  /// DecodeSession (modrt/Generate.h), which validates and keeps the
  /// bookkeeping.
  void decodeRaw(const modc_decode_args &args) const;
  /// Workspace bytes of the forward pass for `batch` sequences (the larger of
  /// the library's and the manifest's figure).
  uint64_t forwardWorkspaceBytes(int64_t batch) const;
  /// One raw modc_forward call on caller-owned buffers (DecodeSession's
  /// causal prefill); throws Error with the package's message on failure.
  void forwardRaw(const modc_forward_args &args) const;

  /// Losses and gradients of the total loss for one batch (modc_grad):
  /// `tokens` is [batch, seqLen + 1] row-major; inputs are tokens[:, :S],
  /// targets tokens[:, 1:]. Throws Error naming the problem for a wrong
  /// shape, a token out of range, wrong weights, or a package without
  /// training entry points.
  GradResult grad(const TensorMap &weights, const std::vector<int32_t> &tokens,
                  int64_t batch) const;
  /// As above, writing the gradients into `grads`, which is reused when it
  /// already holds the params' names and shapes (else rebuilt): a training
  /// loop allocates them once.
  Losses grad(const TensorMap &weights, const std::vector<int32_t> &tokens,
              int64_t batch, TensorMap &grads) const;

  /// The losses of one batch without gradients. TopK (modc_eval): what grad
  /// returns for the same weights and tokens, bit for bit, from the same
  /// compiled forward pass and loss kernels, with no backward pass. Causal
  /// (modc_eval_causal): the cross-entropy of the forward pass in causal
  /// mode, as sampling routes (total = ce, aux = 0). `tokens` is [batch,
  /// seqLen + 1] as for grad. Throws Error as grad does, or for a package
  /// without the entry (causal: a model without a causal router).
  Losses eval(const TensorMap &weights, const std::vector<int32_t> &tokens,
              int64_t batch, RouteMode mode = RouteMode::TopK) const;

  /// For CUDA packages: the device copy of `tensors` (one tensor per manifest
  /// param, such as the weights, gradients or AdamW moments) is copied once
  /// and then reused by every call given these same tensors, for as long as
  /// the returned guard lives, instead of being copied to the GPU on each
  /// call. What grad (into gradients) and adamwStep (into weights and
  /// moments) write to them stays on the GPU too: their host values are
  /// brought up to date by syncFromDevice, and when the guard is released.
  /// The caller promises not to change the values on the host meanwhile.
  /// Does nothing for CPU packages. The package must outlive the guard.
  ResidentTensors keepOnDevice(const TensorMap &tensors) const;
  /// Brings the host values of tensors kept on the device (keepOnDevice) up
  /// to date with what grad and adamwStep wrote; a no-op otherwise.
  void syncFromDevice(TensorMap &tensors) const;

  /// Bytes copied between host and GPU so far (CUDA packages; zero for CPU
  /// packages): what keepOnDevice saves is seen here.
  struct DeviceTraffic {
    uint64_t toDevice = 0, toHost = 0;
  };
  DeviceTraffic deviceTraffic() const;

  /// One AdamW update of `weights` in place (modc_adamw): increments
  /// state.step, updates the moments, and returns the global gradient norm
  /// before clipping. The caller checks that norm: when it is not finite the
  /// package refused the update (weights, moments and state.step are as
  /// they were), and the caller should stop.
  double adamwStep(TensorMap &weights, const TensorMap &grads,
                   OptimizerState &state, double lr,
                   const AdamWConfig &config) const;

  /// One training step: grad, then, where its losses are finite, adamwStep
  /// (modrt::train's step without a split batch). A CUDA package that
  /// exports modc_train_step runs both as one CUDA graph, replayed while the
  /// tensors and batch repeat, with the same results bit for bit
  /// (docs/cuda.md); the losses and norm are read after it. Throws Error as
  /// grad and adamwStep do; a non-finite loss or norm is reported in the
  /// result (updated false: weights, moments and state.step unchanged).
  TrainStepResult trainStep(TensorMap &weights,
                            const std::vector<int32_t> &tokens, int64_t batch,
                            TensorMap &grads, OptimizerState &state, double lr,
                            const AdamWConfig &config) const;

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
