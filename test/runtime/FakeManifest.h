//===- FakeManifest.h - Manifest of the fake test package -------*- C++ -*-===//
//
// The fake package (FakeModel.cpp) stands in for a compiled one so the
// runtime's loading, checking and marshalling can be tested without the
// compiler. FAKE_VARIANT selects a defect:
//   0 good, 1 library reports a foreign ABI (MODC_ABI_VERSION + 1),
//   2 no modc_forward symbol, 3 target "tpu", 4 causal_router "none" (no
//   causal mode), 5 no training entry points (no entries.grad/adamw, no
//   modc_grad/modc_adamw symbols), 6 byte-level vocabulary (256) for the
//   trainer tests.
// Every variant but 4 has a decode entry (entries.decode, modc_decode and
// friends: a test double, see FakeModel.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_TEST_FAKEMANIFEST_H
#define MODRT_TEST_FAKEMANIFEST_H

#ifndef FAKE_VARIANT
#define FAKE_VARIANT 0
#endif

#if FAKE_VARIANT == 3
#define FAKE_TARGET "tpu"
#else
#define FAKE_TARGET "cpu"
#endif

#if FAKE_VARIANT == 6
#define FAKE_VOCAB 256
#define FAKE_VOCAB_STR "256"
#else
#define FAKE_VOCAB 8
#define FAKE_VOCAB_STR "8"
#endif

#if FAKE_VARIANT == 5
#define FAKE_TRAINING 0
#define FAKE_TRAINING_ENTRIES ""
#else
#define FAKE_TRAINING 1
#define FAKE_TRAINING_ENTRIES                                                  \
  ",\n  \"grad\": {\"workspace_bytes_per_sequence\": 128}, \"adamw\": {},"  \
  "\n  \"eval\": {\"workspace_bytes_per_sequence\": 64" FAKE_EVAL_CAUSAL "}"
#endif

#if FAKE_VARIANT == 4
#define FAKE_ROUTER "none"
#define FAKE_MODES "[\"topk\"]"
#define FAKE_EVAL_CAUSAL ""
#define FAKE_DECODE 0
#define FAKE_DECODE_ENTRY ""
#else
#define FAKE_ROUTER "aux_loss"
#define FAKE_MODES "[\"topk\", \"causal\"]"
#define FAKE_EVAL_CAUSAL ", \"causal_workspace_bytes_per_sequence\": 64"
#define FAKE_DECODE 1
/// kv_cache_bytes_per_sequence = n_layers * seq_len * 2 * d_model * 4 = 256.
#define FAKE_DECODE_ENTRY                                                      \
  ",\n  \"decode\": {\"workspace_bytes_per_sequence\": 64, "                  \
  "\"kv_cache_bytes_per_sequence\": 256}"
#endif

/// Fake model: vocab 8 (256 in variant 6), d_model 4, seq_len 4; layer 1
/// routed with k = 2.
/// logits[b,i,v] = sum_j E[t][j] * final_norm[j] * E[v][j];
/// router score r_i = router . E[t_i]; topk picks 2 per row (ties to the
/// lower position), causal routes iff r_i > 0.
/// Training test doubles (not a real gradient; see FakeModel.cpp):
/// ce = mean of the target tokens t[:, 1:], aux = 0.5 * sum of every weight
/// squared, total = ce + aux, grads = the weights (d aux / d w); adamw is
/// momentum SGD with decoupled weight decay on the "decay" params. eval
/// returns grad's losses; eval_causal the cross-entropy of the forward's
/// logits (which do not depend on the routing) as total and ce, aux 0.
/// Decode test double (not a transformer; see FakeModel.cpp): a step of
/// token t at position p in sequence b caches (t, p) in layer 0 (dense) and,
/// when r_t = router . E[t] > 0, in layer 1 (routed); its logits are
/// logits[v] = (the forward's logits of t)[v] + 100 * p, plus, for v == 0
/// only, the sum of the tokens read back from sequence b's layer-0 cache
/// (this one included). routed = [r_t > 0].
static const char kFakeManifest[] =
    R"({
  "format": "modc-package",
  "abi_version": 7,
  "compiler_version": "0.1.0",
  "target": ")" FAKE_TARGET R"(",
  "cpu": {"march": "x86-64", "features": []},
  "model": {"name": "fake", "vocab_size": )" FAKE_VOCAB_STR
    R"(, "d_model": 4, "n_layers": 2,
            "seq_len": 4,
            "mod": {"capacity": 0.5, "causal_router": ")" FAKE_ROUTER R"(",
                    "aux_loss_weight": 0.01}},
  "layers": [{"index": 0, "routed": false},
             {"index": 1, "routed": true, "capacity": 2}],
  "params": [
    {"name": "embed.weight", "shape": [)" FAKE_VOCAB_STR
    R"(, 4], "dtype": "F32",
     "init": "normal", "std": 0.5, "decay": true},
    {"name": "blocks.1.router.weight", "shape": [1, 4], "dtype": "F32",
     "init": "normal", "std": 1.0},
    {"name": "final_norm.weight", "shape": [4], "dtype": "F32",
     "init": "ones", "decay": false}
  ],
  "entries": {"forward": {"workspace_bytes_per_sequence": 256,
                          "modes": )" FAKE_MODES
    R"(})" FAKE_TRAINING_ENTRIES FAKE_DECODE_ENTRY R"(}
})";

#endif // MODRT_TEST_FAKEMANIFEST_H
