//===- Generate.h - Token-by-token decoding, sampling, generation -*- C++ -*-===//
//
// The sampling side of the runtime. Every FLOP of the model runs in the
// package (modc_decode, one token per sequence per step, with a KV cache the
// runtime owns); this file keeps the bookkeeping (positions, cache counts),
// turns the logits the package returns into tokens (decoding policy:
// temperature, top-k, top-p), and drives byte-level generation.
//
// Decoding follows docs/model-format.md section 4: routed layers decide
// causally (router r > 0 with aux_loss, predictor p > 0 with predictor), and a
// token skipped by a routed layer writes nothing to that layer's cache, so
// decoding a sequence token by token gives the logits of the full-sequence
// forward pass in causal mode.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_GENERATE_H
#define MODRT_GENERATE_H

#include "modrt/Package.h"
#include "modrt/Tensor.h"
#include "modrt/Tokenizer.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace modrt {

/// Outputs of one DecodeSession::step.
struct StepResult {
  int64_t batch = 0, vocab = 0;
  /// [batch, vocab]: row b is the next-token logits of sequence b after this
  /// step when it was active; an inactive sequence's row is its last logits
  /// (from the last step it took part in; zeros before any).
  std::vector<float> logits;
  /// One [batch] vector per routed layer (Manifest::routedLayers order):
  /// 1 when this step's token of sequence b went through the layer, 0 when
  /// it skipped it or the sequence was inactive.
  std::vector<std::vector<int32_t>> routed;
};

/// A batch of sequences being decoded one token at a time with modc_decode.
///
/// The session owns the KV cache (modc_kv_cache_bytes(batch) bytes, 64-byte
/// aligned, allocated once), the cache counts (tokens cached per layer and
/// sequence), the position of each sequence and the decode workspace. It
/// keeps pointers to the package and the weights: both must outlive it and
/// the weights must not be resized or replaced while it is used. Not
/// thread-safe; sessions are independent of each other.
class DecodeSession {
public:
  /// Checks that the package decodes (Package::requireDecode) and that the
  /// weights fit it, then allocates the cache for `batch` sequences (every
  /// sequence empty). Throws Error naming the problem.
  DecodeSession(const Package &package, const TensorMap &weights,
                int64_t batch);

  /// Empties every sequence: positions and cache counts back to zero, last
  /// logits to zero. The cache memory is kept.
  void reset();

  /// Appends one token to each active sequence (active[b] != 0) and returns
  /// the logits that follow it. tokens[b] of an inactive sequence is
  /// ignored, and nothing of that sequence changes. Throws Error on a wrong
  /// size, a token outside [0, vocab) in an active sequence, or when an
  /// active sequence already holds seq_len tokens ("sequence b is full: the
  /// model's context is seq_len tokens"); nothing changes then. Also throws
  /// when the package's error status or cache counts say it misbehaved.
  StepResult step(const std::vector<int32_t> &tokens,
                  const std::vector<uint8_t> &active);

  /// Appends prompts[b] to sequence b for every b, so that each sequence
  /// ends with the logits after its last prompt token (logits()). A fresh
  /// session whose package can prefill (Manifest::supportsPrefill) runs one
  /// causal forward pass over the padded prompts (where one is longer than
  /// a token); otherwise all sequences step in lockstep (sequence b is
  /// active at step t while t < prompts[b].size()). prompts.size() must
  /// equal batch(); an empty prompt leaves its sequence as it is. Throws
  /// Error (before any step) when a token is out of range or a prompt does
  /// not fit in what is left of the context.
  void prefill(const std::vector<std::vector<int32_t>> &prompts);

  int64_t batch() const { return batch_; }
  int64_t vocab() const { return vocab_; }
  /// The model's context, seq_len: the most tokens a sequence can hold.
  int64_t contextLength() const { return seqLen_; }
  /// Tokens sequence b holds (the position its next token takes).
  int64_t position(int64_t b) const;
  const std::vector<int32_t> &positions() const { return positions_; }
  /// The last logits of every sequence, [batch, vocab] (as StepResult).
  const std::vector<float> &logits() const { return logits_; }
  /// Tokens of sequence b cached in layer `layer` (every token the sequence
  /// holds in a dense layer; the routed ones in a routed layer).
  int32_t kvCount(int layer, int64_t b) const;
  /// All cache counts, [n_layers, batch] row-major (what modc_decode sees).
  const std::vector<int32_t> &kvCounts() const { return kvCounts_; }
  /// Each MoE layer's running expert counts, [n_moe_layers, B, E]: the
  /// tokens of each sequence that each real expert kept so far.
  const std::vector<int32_t> &moeCounts() const { return moeCounts_; }
  /// Bytes of cache in use: sum over layers and sequences of count * 2 *
  /// d_model * the element size (K and V; 4 bytes, or 2 in a bf16 model).
  uint64_t kvBytesUsed() const;
  /// Bytes of cache allocated (modc_kv_cache_bytes(batch)).
  uint64_t kvBytesReserved() const { return kvCache_.size(); }

private:
  /// The prefill of a fresh session through the forward entry's causal
  /// prefill (modc_forward_args::prefill_lengths).
  void prefillForward(const std::vector<std::vector<int32_t>> &prompts);

  const Package *package_;
  const Manifest *manifest_;
  std::vector<const float *> params_;
  /// CUDA packages: the weights stay on the GPU between steps.
  ResidentTensors residentWeights_;
  int64_t batch_, vocab_, seqLen_, nLayers_, dModel_;
  AlignedBytes kvCache_, workspace_;
  std::vector<int32_t> kvCounts_, moeCounts_, positions_;
  std::vector<float> logits_, stepLogits_;
};

/// Decoding policy of sampleToken and generate.
struct SamplingConfig {
  /// Softmax temperature, >= 0; 0 is greedy (argmax, ties to the lowest id).
  double temperature = 1.0;
  /// Keep only the topK most likely tokens; 0 keeps all.
  int topK = 0;
  /// Nucleus sampling: keep the most likely tokens whose probabilities
  /// (after top-k) first sum to at least topP; in (0, 1], 1 keeps all.
  double topP = 1.0;
  /// Seed of the random stream (generate: one stream per sequence).
  uint64_t seed = 0;
};

/// Throws Error unless `config` is valid (temperature finite and >= 0, topK
/// >= 0, topP in (0, 1]), naming the setting.
void checkSamplingConfig(const SamplingConfig &config);

/// Picks the next token from `vocab` logits. Temperature 0: the argmax, ties
/// to the lowest id, with no random draw. Otherwise the tokens are ranked by
/// logit (ties to the lower id), cut to the top k, their probabilities
/// softmax(logits / T) cut to the smallest prefix reaching top-p, and one
/// token is drawn from what is left with one 64-bit output of `rng` (turned
/// into a uniform double in [0, 1) by hand, so the result does not depend on
/// the standard library). Logits must be finite or -inf, with at least one
/// finite; otherwise, or on an invalid config, throws Error.
int32_t sampleToken(const float *logits, int64_t vocab,
                    const SamplingConfig &config, std::mt19937_64 &rng);

/// The random stream generate() uses for sequence `index` under `seed`:
/// each sequence's stream depends on the seed and its index only, so a
/// prompt gives the same text alone or at the same index of a batch.
std::mt19937_64 samplingStream(uint64_t seed, uint64_t index);

/// Byte-level tokens of `text` (docs/model-format.md section 6:
/// token = byte value).
/// Throws Error for an empty text, one longer than the model's context
/// (saying both lengths), or a byte outside the model's vocabulary (naming
/// the byte and its position). `what` names the text in messages ("prompt
/// 2").
std::vector<int32_t> tokenizePrompt(const Manifest &manifest,
                                    const std::string &text,
                                    const std::string &what = "prompt");

/// Tokens of `text` through `tokenizer` (the byte tokenizer gives the
/// function above, messages included). A BPE throws Error for an empty
/// text, for one of more tokens than the model's context (saying both
/// counts), or when its vocabulary does not fit the model's
/// (Tokenizer::checkFits).
std::vector<int32_t> tokenizePrompt(const Manifest &manifest,
                                    const Tokenizer &tokenizer,
                                    const std::string &text,
                                    const std::string &what = "prompt");

/// Generates up to `maxNew` bytes after each prompt (byte tokenizer) with a
/// DecodeSession over all prompts at once, and returns the generated bytes
/// of each (without the prompt). A sequence stops early when prompt plus
/// generated text fills the model's context (seq_len tokens), so it gets
/// min(maxNew, seq_len - prompt length) bytes. Every new byte is passed to
/// `onToken(sequence index, piece)` as soon as it is chosen. Sampling as
/// sampleToken with samplingStream(config.seed, index). Throws Error for
/// invalid prompts (tokenizePrompt), maxNew < 0, an invalid config, or a
/// package that cannot decode.
std::vector<std::string>
generate(const Package &package, const TensorMap &weights,
         const std::vector<std::string> &prompts, int maxNew,
         const SamplingConfig &config,
         std::function<void(size_t seq, const std::string &piece)> onToken =
             nullptr);

/// The same through `tokenizer`: prompts are encoded with it, maxNew counts
/// its tokens, sampling draws among ids below min(vocab_size,
/// tokenizer.vocabSize()), and each piece passed to onToken and appended to
/// the result is Tokenizer::tokenBytes of the new token (a special token
/// gives its text). A piece may end inside a UTF-8 sequence: print pieces
/// through a Utf8Stream.
std::vector<std::string>
generate(const Package &package, const TensorMap &weights,
         const Tokenizer &tokenizer, const std::vector<std::string> &prompts,
         int maxNew, const SamplingConfig &config,
         std::function<void(size_t seq, const std::string &piece)> onToken =
             nullptr);

} // namespace modrt

#endif // MODRT_GENERATE_H
