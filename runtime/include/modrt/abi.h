//===- abi.h - The C ABI between a modc package and the runtime -*- C -*-===//
//
// Every package that `modc compile` writes is a shared library exporting the
// functions below. The runtime never trusts a package before checking
// modc_abi_version() and comparing modc_manifest_json() with manifest.json.
// modc pastes this header verbatim into every generated source (it is
// embedded when modc is built), so packages and runtime share one
// declaration; bump MODC_ABI_VERSION on any change here.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_ABI_H
#define MODRT_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MODC_ABI_VERSION 7u

/// Selection rule of routed layers (docs/model-format.md sections 3 and 4).
enum modc_route_mode { MODC_MODE_TOPK = 0, MODC_MODE_CAUSAL = 1 };

/// Status codes returned by entry points; modc_last_error() has the text.
enum modc_status {
  MODC_OK = 0,
  MODC_ERR_INVALID_ARGUMENT = 1,
  MODC_ERR_UNSUPPORTED = 2,
  /// CUDA packages: no usable GPU, a GPU of another architecture, or a CUDA
  /// error (out of device memory, a kernel fault).
  MODC_ERR_DEVICE = 3,
};

/// Arguments of the full-sequence forward pass.
typedef struct modc_forward_args {
  int64_t batch;               ///< number of sequences B (>= 1)
  int64_t seq_len;             ///< must equal the compiled seq_len S
  int32_t mode;                ///< modc_route_mode
  const int32_t *tokens;       ///< [B, S], each in [0, vocab_size)
  const float *const *params;  ///< one pointer per manifest "params" entry
  float *logits;               ///< out: [B, S, vocab_size]
  int32_t *routed;             ///< out: [n_routed_layers, B, S], 1 = routed
  void *workspace;             ///< modc_forward_workspace_bytes(B), 64-aligned
  /// Optional out (may be null): [n_routed_layers, B, S], the causal decision
  /// (router r > 0 for aux_loss, predictor p > 0 for predictor) of every token
  /// on this pass's own residual stream; with mode topk it measures how well
  /// the causal router agrees with top-k membership. Null without a causal
  /// router.
  int32_t *causal_decisions;
  /// Optional causal prefill of the decode KV cache (packages with a decode
  /// entry, mode causal): when kv_cache is not null, every layer appends K and
  /// V of the tokens of sequence b at positions < prefill_lengths[b] that go
  /// through it, and kv_counts ([n_layers, B], zero on entry) ends with the
  /// number each layer holds; decoding then continues at position
  /// prefill_lengths[b]. Tokens past a prompt are padding.
  const int32_t *prefill_lengths;
  float *kv_cache;
  int32_t *kv_counts;
  /// Optional out (may be null): [n_moe_layers, B, S], each MoE layer's
  /// expert decision of every token (docs/model-format.md section 7): the
  /// chosen expert e of a kept token or a no-op choice, e + E + N for a
  /// token over capacity, -1 for a token that does not reach the MLP.
  int32_t *moe_decisions;
  /// Optional, with kv_cache (the causal prefill of a package with MoE
  /// layers): [n_moe_layers, B, E], zero on entry; ends with the tokens of
  /// each sequence's prompt that each real expert kept, the decode state of
  /// docs/model-format.md section 7.
  int32_t *moe_counts;
} modc_forward_args;

/// Arguments of one decode step: one new token for each active sequence.
/// Sequence b's token sits at position positions[b] (the number of tokens
/// the sequence already holds); each layer appends K and V of the token to
/// its cache only where the token goes through the layer (always in dense
/// layers; by the causal decision in routed layers).
typedef struct modc_decode_args {
  int64_t batch;               ///< sequences B held by the cache
  const int32_t *tokens;       ///< [B]
  const int32_t *positions;    ///< [B], each in [0, seq_len)
  const uint8_t *active;       ///< [B], 0 = leave sequence b untouched
  const float *const *params;  ///< one pointer per manifest "params" entry
  float *logits;               ///< out: [B, vocab_size]; rows of inactive
                               ///< sequences hold unspecified values
  int32_t *routed;             ///< out: [n_routed_layers, B], 1 = routed
  float *kv_cache;             ///< modc_kv_cache_bytes(B) bytes, 64-aligned;
                               ///< the package's layout (bf16 in a bf16
                               ///< model despite the pointer type)
  int32_t *kv_counts;          ///< [n_layers, B] tokens cached; zero to reset
  void *workspace;             ///< modc_decode_workspace_bytes(B), 64-aligned
  /// [n_moe_layers, B, E] the tokens each real expert of each MoE layer has
  /// kept so far in each sequence (docs/model-format.md section 7); zero to
  /// reset, with kv_counts. Required when the package has MoE layers.
  int32_t *moe_counts;
} modc_decode_args;

/// Arguments of the training gradient: forward in top-k mode on
/// tokens[:, :S], cross-entropy against tokens[:, 1:], the causal-router loss
/// (docs/model-format.md section 4), and the gradient of the total loss for
/// every parameter.
typedef struct modc_grad_args {
  int64_t batch;               ///< number of sequences B (>= 1)
  int64_t seq_len;             ///< must equal the compiled seq_len S
  const int32_t *tokens;       ///< [B, S + 1], each in [0, vocab_size)
  const float *const *params;  ///< one pointer per manifest "params" entry
  float *const *grads;         ///< out: same shapes as params (overwritten)
  float *losses;               ///< out: [4] = total, cross-entropy, aux,
                               ///< balance (0 without MoE layers)
  void *workspace;             ///< modc_grad_workspace_bytes(B), 64-aligned
} modc_grad_args;

/// Arguments of the loss-only entries. modc_eval: modc_grad's forward pass
/// and losses (the same kernels: the same losses bit for bit) without the
/// backward pass, for held-out evaluation. modc_eval_causal: modc_forward's
/// pass in causal mode on tokens[:, :S] and its cross-entropy against
/// tokens[:, 1:] (losses = [ce, ce, 0, 0]), the loss of causal routing.
typedef struct modc_eval_args {
  int64_t batch;               ///< number of sequences B (>= 1)
  int64_t seq_len;             ///< must equal the compiled seq_len S
  const int32_t *tokens;       ///< [B, S + 1], each in [0, vocab_size)
  const float *const *params;  ///< one pointer per manifest "params" entry
  float *losses;               ///< out: [4] = total, cross-entropy, aux,
                               ///< balance
  void *workspace;             ///< modc_eval_workspace_bytes(B) (or
                               ///< modc_eval_causal_...), 64-aligned
} modc_eval_args;

/// Arguments of one AdamW step over every parameter, in place.
typedef struct modc_adamw_args {
  float *const *params;        ///< updated in place
  const float *const *grads;   ///< gradients (read only)
  float *const *m;             ///< first moments, same shapes (updated)
  float *const *v;             ///< second moments, same shapes (updated)
  int64_t step;                ///< 1 for the first update
  float lr, beta1, beta2, eps, weight_decay;
  float clip_norm;             ///< global-norm clipping; <= 0 disables it
  float *grad_norm;            ///< out: global gradient norm before clipping
} modc_adamw_args;

/// Arguments of one training step (CUDA packages: modc_train_step): the
/// gradient of `grad`, then the AdamW step of `adamw` (whose grads are
/// normally grad.grads).
typedef struct modc_train_step_args {
  modc_grad_args grad;
  modc_adamw_args adamw;
} modc_train_step_args;

/// MODC_ABI_VERSION of the compiler that wrote the package.
uint32_t modc_abi_version(void);
/// The manifest JSON embedded at compile time (same text as manifest.json).
const char *modc_manifest_json(void);
/// Workspace bytes the forward pass needs for `batch` sequences.
uint64_t modc_forward_workspace_bytes(int64_t batch);
/// Runs the forward pass. Returns a modc_status.
int32_t modc_forward(const modc_forward_args *args);
/// Workspace bytes the gradient needs for `batch` sequences.
uint64_t modc_grad_workspace_bytes(int64_t batch);
/// Computes losses and gradients. Returns a modc_status.
int32_t modc_grad(const modc_grad_args *args);
/// Workspace bytes the loss-only entry needs for `batch` sequences.
uint64_t modc_eval_workspace_bytes(int64_t batch);
/// Computes the losses of modc_grad, no gradients. Returns a modc_status.
int32_t modc_eval(const modc_eval_args *args);
/// Packages with a causal mode (manifest entries.eval lists
/// causal_workspace_bytes_per_sequence): the workspace and the loss of
/// causal routing.
uint64_t modc_eval_causal_workspace_bytes(int64_t batch);
int32_t modc_eval_causal(const modc_eval_args *args);
/// One AdamW update (weight decay skipped for norm weights and biases, as the
/// manifest's "decay" flags say). Returns a modc_status.
int32_t modc_adamw(const modc_adamw_args *args);
/// Bytes of the KV cache for `batch` sequences: per layer, K and V for up to
/// seq_len tokens of each sequence.
uint64_t modc_kv_cache_bytes(int64_t batch);
/// Workspace bytes of one decode step for `batch` sequences.
uint64_t modc_decode_workspace_bytes(int64_t batch);
/// One decode step. Refused (MODC_ERR_UNSUPPORTED) when routed layers have no
/// causal router (mod.causal_router none); dense models decode.
int32_t modc_decode(const modc_decode_args *args);
/// Text of the last error on this thread ("" if none).
const char *modc_last_error(void);

/// CUDA packages (manifest "target": "cuda", "arch": "sm_90a" or "sm_80")
/// export the entry points above with the same structs, where every tensor
/// pointer is a device pointer; the pointer tables (params, grads, m, v) stay
/// in host memory and hold device pointers. Entry points check their host-
/// visible arguments, enqueue the plan on the package's stream and return
/// without waiting. modc_adamw writes the gradient norm into *grad_norm (a
/// device float) and updates nothing on the device when it is not finite;
/// the caller reads it back to learn whether the step happened. Row counts stay
/// on the device, and modc_decode replays a CUDA graph of the step while its
/// arguments repeat. They also export the device API below, so that a
/// runtime drives a package without linking CUDA itself.
///
/// Selects `device`, checks its architecture against the package's and
/// creates the stream; MODC_ERR_DEVICE with a message naming both when no
/// GPU answers or the architecture differs. Idempotent.
int32_t modc_cuda_init(int32_t device);
/// The architecture the package was compiled for ("sm_90a").
const char *modc_cuda_arch(void);
/// The package's cudaStream_t (null before modc_cuda_init): tools that time
/// the entries record CUDA events on it.
void *modc_cuda_stream(void);
int32_t modc_cuda_alloc(uint64_t bytes, void **out);
int32_t modc_cuda_free(void *device_pointer);
/// kind: 0 host to device, 1 device to host, 2 device to device; ordered
/// after the enqueued work and complete on return.
int32_t modc_cuda_copy(void *dst, const void *src, uint64_t bytes,
                       int32_t kind);
int32_t modc_cuda_memset(void *device_pointer, int32_t value, uint64_t bytes);
/// Declares the version of the parameters the following calls read: a
/// caller that writes a parameter (other than through modc_adamw, which
/// counts its own writes) declares a new number before its next call. While
/// the number stays the same and nonzero, the entries (all but modc_decode,
/// which makes none) reuse the bf16 copies of the weights they made (sm_90a
/// TMA products) instead of rounding them again. 0, the default, means
/// unknown: every call rounds them.
/// Optional: packages before it lack the symbol.
int32_t modc_cuda_params_version(uint64_t version);
/// One training step: modc_grad(&args->grad), then modc_adamw(&args->adamw),
/// whose update is also skipped (nothing changes on the device) where one
/// of the four losses is not finite. Captured once into a CUDA graph and
/// replayed while the arguments repeat (the pointers, the pointer tables'
/// contents, the batch, clip_norm); the step, learning rate and other AdamW
/// scalars may change from call to call. The losses and *grad_norm are read
/// after it, as after the two calls. MODC_TRAIN_GRAPH=0 in the environment
/// runs it uncaptured. Optional: packages before it lack the symbol.
int32_t modc_train_step(const modc_train_step_args *args);
/// Waits for the enqueued work. Reports a kernel fault, or a token outside
/// the vocabulary or a decode position outside the context that the last
/// entry found on the device (its outputs are then invalid).
int32_t modc_cuda_sync(void);

#ifdef __cplusplus
}
#endif

#endif // MODRT_ABI_H
