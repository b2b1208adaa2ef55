//===- abi.h - The C ABI between a modc package and the runtime -*- C -*-===//
//
// Every package that `modc compile` writes is a shared library exporting the
// functions below. The runtime never trusts a package before checking
// modc_abi_version() and comparing modc_manifest_json() with manifest.json.
// The generated source declares the same structs; bump MODC_ABI_VERSION on
// any change here.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_ABI_H
#define MODRT_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MODC_ABI_VERSION 1u

/// Selection rule of routed layers (SPEC.md section 3 and 4).
enum modc_route_mode { MODC_MODE_TOPK = 0, MODC_MODE_CAUSAL = 1 };

/// Status codes returned by entry points; modc_last_error() has the text.
enum modc_status {
  MODC_OK = 0,
  MODC_ERR_INVALID_ARGUMENT = 1,
  MODC_ERR_UNSUPPORTED = 2,
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
} modc_forward_args;

/// MODC_ABI_VERSION of the compiler that wrote the package.
uint32_t modc_abi_version(void);
/// The manifest JSON embedded at compile time (same text as manifest.json).
const char *modc_manifest_json(void);
/// Workspace bytes the forward pass needs for `batch` sequences.
uint64_t modc_forward_workspace_bytes(int64_t batch);
/// Runs the forward pass. Returns a modc_status.
int32_t modc_forward(const modc_forward_args *args);
/// Text of the last error on this thread ("" if none).
const char *modc_last_error(void);

#ifdef __cplusplus
}
#endif

#endif // MODRT_ABI_H
