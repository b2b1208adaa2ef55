//===- FakeModel.cpp - A hand-written stand-in for a compiled package ----===//
//
// Implements the C ABI of modrt/abi.h for the tiny model described in
// FakeManifest.h. It checks what the runtime hands it (seq_len, workspace
// alignment and size) so marshalling mistakes show up as test failures.
//
//===----------------------------------------------------------------------===//
#include "FakeManifest.h"
#include "modrt/abi.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace {
thread_local std::string lastError;
constexpr int64_t S = 4, D = 4, V = 8, K = 2;

int32_t fail(const char *msg) {
  lastError = msg;
  return MODC_ERR_INVALID_ARGUMENT;
}
} // namespace

extern "C" {

uint32_t modc_abi_version(void) { return FAKE_VARIANT == 1 ? 2u : 1u; }

const char *modc_manifest_json(void) { return kFakeManifest; }

uint64_t modc_forward_workspace_bytes(int64_t batch) {
  return 256u * static_cast<uint64_t>(batch);
}

#if FAKE_VARIANT != 2
int32_t modc_forward(const modc_forward_args *a) {
  lastError.clear();
  if (a->seq_len != S)
    return fail("fake: wrong seq_len");
  if (reinterpret_cast<uintptr_t>(a->workspace) % 64 != 0)
    return fail("fake: workspace not 64-byte aligned");
  // Touch the whole workspace: an undersized one is caught by sanitizers.
  std::memset(a->workspace, 0xab, modc_forward_workspace_bytes(a->batch));
  if (a->tokens[0] == 7)
    return fail("fake: token 7 at [0, 0] is refused");
  const float *E = a->params[0], *R = a->params[1], *N = a->params[2];
  for (int64_t b = 0; b < a->batch; ++b) {
    float r[S];
    for (int64_t i = 0; i < S; ++i) {
      const float *e = E + a->tokens[b * S + i] * D;
      r[i] = 0;
      for (int64_t j = 0; j < D; ++j)
        r[i] += R[j] * e[j];
      for (int64_t v = 0; v < V; ++v) {
        float acc = 0;
        for (int64_t j = 0; j < D; ++j)
          acc += e[j] * N[j] * E[v * D + j];
        a->logits[(b * S + i) * V + v] = acc;
      }
    }
    for (int64_t i = 0; i < S; ++i) {
      int32_t sel;
      if (a->mode == MODC_MODE_CAUSAL) {
        sel = r[i] > 0;
      } else {
        // Rank of i: tokens with a larger score, or equal and earlier.
        int64_t rank = 0;
        for (int64_t j = 0; j < S; ++j)
          rank += r[j] > r[i] || (r[j] == r[i] && j < i);
        sel = rank < K;
      }
      a->routed[b * S + i] = sel;
    }
  }
  return MODC_OK;
}
#endif

const char *modc_last_error(void) { return lastError.c_str(); }
}
