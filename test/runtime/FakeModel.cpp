//===- FakeModel.cpp - A hand-written stand-in for a compiled package ----===//
//
// Implements the C ABI of modrt/abi.h for the tiny model described in
// FakeManifest.h. It checks what the runtime hands it (seq_len, workspace
// alignment and size) so marshalling mistakes show up as test failures.
//
// modc_grad and modc_adamw are test doubles of the ABI, not real model math:
// simple closed forms a test can recompute (FakeManifest.h says which), plus
// triggers for the runtime's failure paths: a target token 0xFE makes the
// losses NaN, a target token 0xFD makes the gradients infinite (variant 6
// only; smaller vocabularies cannot hold these tokens).
//
// modc_decode is a test double too (FakeManifest.h has its closed form): it
// checks the runtime's bookkeeping (positions equal the dense layer's cache
// count, counts within seq_len, alignment), writes (token, position) into
// the cache and reads the cache back, so a lost or clobbered cache shows.
// Inactive sequences keep their cache and counts; their logits rows are
// overwritten with NaN (compiled packages write those rows too, so the
// runtime must keep each sequence's last logits itself). A token 6 at
// position 0 is refused, to test the error path.
//
//===----------------------------------------------------------------------===//
#include "FakeManifest.h"
#include "modrt/abi.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

static_assert(MODC_ABI_VERSION == 7u,
              "FakeManifest.h writes abi_version 7; update it with abi.h");

namespace {
thread_local std::string lastError;
constexpr int64_t S = 4, D = 4, V = FAKE_VOCAB, K = 2, L = 2;
/// Element counts of the params, in manifest order, and their "decay" flags.
constexpr int64_t kParamSize[3] = {V * D, D, D};
constexpr bool kDecay[3] = {true, true, false};

int32_t fail(const char *msg) {
  lastError = msg;
  return MODC_ERR_INVALID_ARGUMENT;
}
} // namespace

extern "C" {

uint32_t modc_abi_version(void) {
  return FAKE_VARIANT == 1 ? MODC_ABI_VERSION + 1 : MODC_ABI_VERSION;
}

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
      if (a->causal_decisions)
        a->causal_decisions[b * S + i] = r[i] > 0;
    }
  }
  return MODC_OK;
}
#endif

#if FAKE_TRAINING
uint64_t modc_grad_workspace_bytes(int64_t batch) {
  return 128u * static_cast<uint64_t>(batch);
}

int32_t modc_grad(const modc_grad_args *a) {
  lastError.clear();
  if (a->seq_len != S)
    return fail("fake: wrong seq_len");
  if (a->batch < 1)
    return fail("fake: batch < 1");
  if (reinterpret_cast<uintptr_t>(a->workspace) % 64 != 0)
    return fail("fake: workspace not 64-byte aligned");
  std::memset(a->workspace, 0xab, modc_grad_workspace_bytes(a->batch));
  double ce = 0;
  bool nanLoss = false, infGrad = false;
  for (int64_t b = 0; b < a->batch; ++b)
    for (int64_t i = 1; i <= S; ++i) {
      int32_t t = a->tokens[b * (S + 1) + i];
      if (t < 0 || t >= V)
        return fail("fake: token out of range");
      nanLoss |= t == 0xFE;
      infGrad |= t == 0xFD;
      ce += t;
    }
  ce /= static_cast<double>(a->batch * S);
  double aux = 0;
  for (int p = 0; p < 3; ++p)
    for (int64_t j = 0; j < kParamSize[p]; ++j) {
      float w = a->params[p][j];
      aux += 0.5 * static_cast<double>(w) * w;
      a->grads[p][j] = infGrad ? std::numeric_limits<float>::infinity() : w;
    }
  float nan = std::numeric_limits<float>::quiet_NaN();
  a->losses[0] = nanLoss ? nan : static_cast<float>(ce + aux);
  a->losses[1] = nanLoss ? nan : static_cast<float>(ce);
  a->losses[2] = static_cast<float>(aux);
  a->losses[3] = 0.0f;
  return MODC_OK;
}

uint64_t modc_eval_workspace_bytes(int64_t batch) {
  return 64u * static_cast<uint64_t>(batch);
}

/// modc_grad's losses (the same closed form), no gradients.
int32_t modc_eval(const modc_eval_args *a) {
  lastError.clear();
  if (a->seq_len != S)
    return fail("fake: wrong seq_len");
  if (a->batch < 1)
    return fail("fake: batch < 1");
  if (reinterpret_cast<uintptr_t>(a->workspace) % 64 != 0)
    return fail("fake: workspace not 64-byte aligned");
  std::memset(a->workspace, 0xab, modc_eval_workspace_bytes(a->batch));
  double ce = 0;
  bool nanLoss = false;
  for (int64_t b = 0; b < a->batch; ++b)
    for (int64_t i = 1; i <= S; ++i) {
      int32_t t = a->tokens[b * (S + 1) + i];
      if (t < 0 || t >= V)
        return fail("fake: token out of range");
      nanLoss |= t == 0xFE;
      ce += t;
    }
  ce /= static_cast<double>(a->batch * S);
  double aux = 0;
  for (int p = 0; p < 3; ++p)
    for (int64_t j = 0; j < kParamSize[p]; ++j) {
      float w = a->params[p][j];
      aux += 0.5 * static_cast<double>(w) * w;
    }
  float nan = std::numeric_limits<float>::quiet_NaN();
  a->losses[0] = nanLoss ? nan : static_cast<float>(ce + aux);
  a->losses[1] = nanLoss ? nan : static_cast<float>(ce);
  a->losses[2] = static_cast<float>(aux);
  a->losses[3] = 0.0f;
  return MODC_OK;
}

#if FAKE_VARIANT != 4
uint64_t modc_eval_causal_workspace_bytes(int64_t batch) {
  return 64u * static_cast<uint64_t>(batch);
}

/// The mean cross-entropy of modc_forward's logits against tokens[:, 1:].
int32_t modc_eval_causal(const modc_eval_args *a) {
  lastError.clear();
  if (a->seq_len != S)
    return fail("fake: wrong seq_len");
  if (a->batch < 1)
    return fail("fake: batch < 1");
  if (reinterpret_cast<uintptr_t>(a->workspace) % 64 != 0)
    return fail("fake: workspace not 64-byte aligned");
  std::memset(a->workspace, 0xab, modc_eval_causal_workspace_bytes(a->batch));
  const float *E = a->params[0], *N = a->params[2];
  double ce = 0;
  for (int64_t b = 0; b < a->batch; ++b)
    for (int64_t i = 0; i < S; ++i) {
      const int32_t t = a->tokens[b * (S + 1) + i];
      const int32_t target = a->tokens[b * (S + 1) + i + 1];
      if (t < 0 || t >= V || target < 0 || target >= V)
        return fail("fake: token out of range");
      const float *e = E + t * D;
      double z = 0, zt = 0;
      for (int64_t v = 0; v < V; ++v) {
        float acc = 0;
        for (int64_t j = 0; j < D; ++j)
          acc += e[j] * N[j] * E[v * D + j];
        z += std::exp(static_cast<double>(acc));
        if (v == target)
          zt = acc;
      }
      ce += std::log(z) - zt;
    }
  ce /= static_cast<double>(a->batch * S);
  a->losses[0] = a->losses[1] = static_cast<float>(ce);
  a->losses[2] = 0.0f;
  return MODC_OK;
}
#endif

int32_t modc_adamw(const modc_adamw_args *a) {
  lastError.clear();
  if (a->step < 1)
    return fail("fake: adamw step must be >= 1");
  double sq = 0;
  for (int p = 0; p < 3; ++p)
    for (int64_t j = 0; j < kParamSize[p]; ++j)
      sq += static_cast<double>(a->grads[p][j]) * a->grads[p][j];
  float norm = static_cast<float>(std::sqrt(sq));
  *a->grad_norm = norm;
  float scale =
      a->clip_norm > 0 && norm > a->clip_norm ? a->clip_norm / norm : 1.0f;
  // m: momentum of the clipped gradient; v counts the steps (checkable).
  for (int p = 0; p < 3; ++p)
    for (int64_t j = 0; j < kParamSize[p]; ++j) {
      float g = a->grads[p][j] * scale;
      float &w = a->params[p][j];
      a->m[p][j] = a->beta1 * a->m[p][j] + g;
      a->v[p][j] = static_cast<float>(a->step);
      if (kDecay[p])
        w -= a->lr * a->weight_decay * w;
      w -= a->lr * a->m[p][j];
    }
  return MODC_OK;
}
#endif

uint64_t modc_kv_cache_bytes(int64_t batch) {
  return static_cast<uint64_t>(L * batch * S * 2 * D) * sizeof(float);
}

uint64_t modc_decode_workspace_bytes(int64_t batch) {
  return 64u * static_cast<uint64_t>(batch);
}

int32_t modc_decode(const modc_decode_args *a) {
  lastError.clear();
  if (!FAKE_DECODE) {
    lastError = "fake: causal_router none cannot decode";
    return MODC_ERR_UNSUPPORTED;
  }
  if (a->batch < 1)
    return fail("fake: batch < 1");
  if (reinterpret_cast<uintptr_t>(a->workspace) % 64 != 0 ||
      reinterpret_cast<uintptr_t>(a->kv_cache) % 64 != 0)
    return fail("fake: workspace or cache not 64-byte aligned");
  std::memset(a->workspace, 0xab, modc_decode_workspace_bytes(a->batch));
  const int64_t B = a->batch;
  const float *E = a->params[0], *R = a->params[1], *N = a->params[2];
  // Validate everything before touching any state.
  for (int64_t b = 0; b < B; ++b) {
    if (!a->active[b])
      continue;
    int32_t t = a->tokens[b], p = a->positions[b];
    if (t < 0 || t >= V)
      return fail("fake: token out of range");
    if (p < 0 || p >= S)
      return fail("fake: position out of range");
    if (p != a->kv_counts[0 * B + b])
      return fail("fake: position differs from the dense layer's count");
    if (a->kv_counts[1 * B + b] < 0 || a->kv_counts[1 * B + b] > p)
      return fail("fake: routed layer's count out of range");
    if (t == 6 && p == 0)
      return fail("fake: token 6 at position 0 is refused");
  }
  // Cache slot (layer l, sequence b, entry i): 2 * D floats; K[0] = token,
  // K[1] = position.
  auto slot = [&](int64_t l, int64_t b, int64_t i) {
    return a->kv_cache + ((l * B + b) * S + i) * 2 * D;
  };
  for (int64_t b = 0; b < B; ++b) {
    if (!a->active[b]) {
      // Compiled packages write logits rows of inactive sequences too; the
      // runtime must not read them. Scribble NaN over them to make sure.
      for (int64_t v = 0; v < V; ++v)
        a->logits[b * V + v] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    int32_t t = a->tokens[b], p = a->positions[b];
    const float *e = E + t * D;
    float r = 0;
    for (int64_t j = 0; j < D; ++j)
      r += R[j] * e[j];
    int32_t routed = r > 0;
    float *s0 = slot(0, b, a->kv_counts[b]);
    s0[0] = static_cast<float>(t);
    s0[1] = static_cast<float>(p);
    ++a->kv_counts[b];
    if (routed) {
      float *s1 = slot(1, b, a->kv_counts[B + b]);
      s1[0] = static_cast<float>(t);
      s1[1] = static_cast<float>(p);
      ++a->kv_counts[B + b];
    }
    a->routed[b] = routed;
    float history = 0;
    for (int64_t i = 0; i < a->kv_counts[b]; ++i)
      history += slot(0, b, i)[0];
    for (int64_t v = 0; v < V; ++v) {
      float acc = 0;
      for (int64_t j = 0; j < D; ++j)
        acc += e[j] * N[j] * E[v * D + j];
      a->logits[b * V + v] = acc + 100.0f * p + (v == 0 ? history : 0.0f);
    }
  }
  return MODC_OK;
}

const char *modc_last_error(void) { return lastError.c_str(); }
}
