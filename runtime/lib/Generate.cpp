//===- Generate.cpp - Decode sessions, sampling and generation -----------===//
//
// No model math here: modc_decode computes the logits. The runtime validates
// what it hands the package, keeps positions and cache counts, and applies
// the decoding policy (temperature, top-k, top-p) to the logits it gets.
//
//===----------------------------------------------------------------------===//
#include "modrt/Generate.h"
#include "modrt/Error.h"
#include "modrt/abi.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

using namespace modrt;

//===----------------------------------------------------------------------===//
// DecodeSession
//===----------------------------------------------------------------------===//

DecodeSession::DecodeSession(const Package &package, const TensorMap &weights,
                             int64_t batch)
    : package_(&package), manifest_(&package.manifest()) {
  const Manifest &m = *manifest_;
  package.requireDecode();
  if (batch < 1)
    throw Error(fmt::format("decode: batch must be >= 1, got {}", batch));
  package.checkWeights(weights);
  for (const ParamInfo &param : m.params)
    params_.push_back(weights.get(param.name).f32());
  residentWeights_ = package.keepOnDevice(weights);
  batch_ = batch;
  vocab_ = m.vocabSize;
  seqLen_ = m.seqLen;
  nLayers_ = static_cast<int64_t>(m.layers.size());
  dModel_ = m.dModel;
  uint64_t cacheBytes = package.kvCacheBytes(batch);
  uint64_t wsBytes = package.decodeWorkspaceBytes(batch);
  uint64_t logitsCount;
  if (__builtin_mul_overflow(static_cast<uint64_t>(batch),
                             static_cast<uint64_t>(vocab_), &logitsCount))
    throw Error(fmt::format("decode: batch {} is too large", batch));
  try {
    kvCache_.resize(std::max<uint64_t>(cacheBytes, 64));
    workspace_.resize(std::max<uint64_t>(wsBytes, 64));
    logits_.assign(logitsCount, 0.0f);
  } catch (const std::bad_alloc &) {
    throw Error(fmt::format("decode: out of memory for batch {} ({} bytes of "
                            "KV cache, {} bytes of workspace)",
                            batch, cacheBytes, wsBytes));
  } catch (const std::length_error &) {
    throw Error(fmt::format("decode: out of memory for batch {} ({} bytes of "
                            "KV cache, {} bytes of workspace)",
                            batch, cacheBytes, wsBytes));
  }
  kvCounts_.assign(static_cast<size_t>(nLayers_ * batch), 0);
  // Each MoE layer's running expert counts (docs/model-format.md section 7),
  // [n_moe_layers, B, E]; at least one element, so the pointer is never null.
  moeCounts_.assign(std::max<size_t>(m.moeLayers.size() * batch *
                                         static_cast<size_t>(m.moeExperts),
                                     1),
                    0);
  positions_.assign(static_cast<size_t>(batch), 0);
}

void DecodeSession::reset() {
  std::fill(kvCounts_.begin(), kvCounts_.end(), 0);
  std::fill(moeCounts_.begin(), moeCounts_.end(), 0);
  std::fill(positions_.begin(), positions_.end(), 0);
  std::fill(logits_.begin(), logits_.end(), 0.0f);
}

int64_t DecodeSession::position(int64_t b) const {
  if (b < 0 || b >= batch_)
    throw Error(fmt::format("decode: sequence {} is out of range [0, {})", b,
                            batch_));
  return positions_[static_cast<size_t>(b)];
}

int32_t DecodeSession::kvCount(int layer, int64_t b) const {
  if (layer < 0 || layer >= nLayers_)
    throw Error(fmt::format("decode: layer {} is out of range [0, {})", layer,
                            nLayers_));
  if (b < 0 || b >= batch_)
    throw Error(fmt::format("decode: sequence {} is out of range [0, {})", b,
                            batch_));
  return kvCounts_[static_cast<size_t>(layer * batch_ + b)];
}

uint64_t DecodeSession::kvBytesUsed() const {
  uint64_t tokens = 0;
  for (int32_t c : kvCounts_)
    tokens += static_cast<uint64_t>(c);
  // Bytes a cached token takes in one layer (K and V): the package's
  // per-sequence size over its layers and positions (4-byte elements, or 2
  // in a bf16 model).
  const uint64_t perToken =
      nLayers_ > 0 && seqLen_ > 0
          ? manifest_->kvCacheBytesPerSequence /
                static_cast<uint64_t>(nLayers_ * seqLen_)
          : 0;
  return tokens * perToken;
}

StepResult DecodeSession::step(const std::vector<int32_t> &tokens,
                               const std::vector<uint8_t> &active) {
  const size_t B = static_cast<size_t>(batch_);
  if (tokens.size() != B)
    throw Error(fmt::format("decode: expected one token per sequence ({}), "
                            "got {}",
                            B, tokens.size()));
  if (active.size() != B)
    throw Error(fmt::format("decode: expected one active flag per sequence "
                            "({}), got {}",
                            B, active.size()));
  std::vector<int32_t> stepTokens(B, 0);
  bool any = false;
  for (size_t b = 0; b < B; ++b) {
    if (!active[b])
      continue;
    if (positions_[b] >= seqLen_)
      throw Error(fmt::format("sequence {} is full: the model's context is {} "
                              "tokens",
                              b, seqLen_));
    if (tokens[b] < 0 || tokens[b] >= vocab_)
      throw Error(fmt::format("decode: token {} of sequence {} is out of "
                              "range [0, {})",
                              tokens[b], b, vocab_));
    stepTokens[b] = tokens[b];
    any = true;
  }

  const size_t nRouted = manifest_->routedLayers.size();
  std::vector<int32_t> routed(std::max<size_t>(nRouted * B, 1), 0);
  if (any) {
    // The package's logits go to a scratch buffer and only active rows are
    // kept: whatever it does with inactive rows, logits_ keeps each
    // sequence's last logits. A failed call leaves positions unchanged.
    std::vector<int32_t> countsBefore = kvCounts_;
    stepLogits_.resize(logits_.size());
    modc_decode_args args{}; // fields a newer ABI adds stay null
    args.batch = batch_;
    args.tokens = stepTokens.data();
    args.positions = positions_.data();
    args.active = active.data();
    args.params = params_.data();
    args.logits = stepLogits_.data();
    args.routed = routed.data();
    args.kv_cache = reinterpret_cast<float *>(kvCache_.data());
    args.kv_counts = kvCounts_.data();
    args.moe_counts = moeCounts_.data();
    args.workspace = workspace_.data();
    package_->decodeRaw(args);
    const size_t V = static_cast<size_t>(vocab_);
    for (size_t b = 0; b < B; ++b) {
      if (active[b]) {
        ++positions_[b];
        std::copy(stepLogits_.begin() + b * V, stepLogits_.begin() + (b + 1) * V,
                  logits_.begin() + b * V);
      }
      // Each layer's count grows by one in a dense layer, by zero or one in
      // a routed one, and not at all for an inactive sequence.
      for (int64_t l = 0; l < nLayers_; ++l) {
        size_t i = static_cast<size_t>(l) * B + b;
        int32_t grew = kvCounts_[i] - countsBefore[i];
        bool routedLayer = manifest_->layers[static_cast<size_t>(l)].routed;
        bool ok = !active[b] ? grew == 0
                  : routedLayer ? (grew == 0 || grew == 1)
                                : grew == 1;
        if (!ok)
          throw Error(fmt::format("decode: the package changed layer {}'s "
                                  "cache count of sequence {} from {} to {} "
                                  "({}); the package is broken",
                                  l, b, countsBefore[i], kvCounts_[i],
                                  active[b] ? "active" : "inactive"));
      }
    }
  }

  StepResult result;
  result.batch = batch_;
  result.vocab = vocab_;
  result.logits = logits_;
  for (size_t l = 0; l < nRouted; ++l) {
    std::vector<int32_t> row(routed.begin() + l * B,
                             routed.begin() + (l + 1) * B);
    for (size_t b = 0; b < B; ++b)
      if (!active[b])
        row[b] = 0;
    result.routed.push_back(std::move(row));
  }
  return result;
}

void DecodeSession::prefill(const std::vector<std::vector<int32_t>> &prompts) {
  const size_t B = static_cast<size_t>(batch_);
  if (prompts.size() != B)
    throw Error(fmt::format("prefill: expected one prompt per sequence ({}), "
                            "got {}",
                            B, prompts.size()));
  size_t longest = 0;
  for (size_t b = 0; b < B; ++b) {
    const std::vector<int32_t> &p = prompts[b];
    int64_t room = seqLen_ - positions_[b];
    if (static_cast<int64_t>(p.size()) > room)
      throw Error(fmt::format("prefill: prompt {} has {} tokens, but sequence "
                              "{} has room for {} (the model's context is {} "
                              "tokens)",
                              b, p.size(), b, room, seqLen_));
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] < 0 || p[i] >= vocab_)
        throw Error(fmt::format("prefill: token {} at position {} of prompt "
                                "{} is out of range [0, {})",
                                p[i], i, b, vocab_));
    longest = std::max(longest, p.size());
  }
  // A fresh session prefills in one causal forward pass over the padded
  // prompts, which fills every layer's cache (modc_forward's prefill); a
  // session that already holds tokens appends them step by step.
  bool fresh = std::all_of(positions_.begin(), positions_.end(),
                           [](int32_t p) { return p == 0; });
  if (fresh && longest > 1 && manifest_->supportsPrefill) {
    prefillForward(prompts);
    return;
  }
  std::vector<int32_t> tokens(B, 0);
  std::vector<uint8_t> active(B, 0);
  for (size_t t = 0; t < longest; ++t) {
    for (size_t b = 0; b < B; ++b) {
      active[b] = t < prompts[b].size();
      tokens[b] = active[b] ? prompts[b][t] : 0;
    }
    step(tokens, active);
  }
}

void DecodeSession::prefillForward(
    const std::vector<std::vector<int32_t>> &prompts) {
  const int64_t B = batch_, S = seqLen_, V = vocab_;
  const Manifest &m = *manifest_;
  std::vector<int32_t> tokens(static_cast<size_t>(B * S), 0), lengths(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(prompts[b].begin(), prompts[b].end(), tokens.begin() + b * S);
    lengths[b] = static_cast<int32_t>(prompts[b].size());
  }
  std::vector<float> logits(static_cast<size_t>(B * S * V));
  std::vector<int32_t> routed(
      static_cast<size_t>(std::max<size_t>(m.routedLayers.size(), 1) * B * S));
  AlignedBytes workspace(
      std::max<uint64_t>(package_->forwardWorkspaceBytes(B), 64));
  modc_forward_args args{};
  args.batch = B;
  args.seq_len = S;
  // Causal routing, as decoding does; a dense model has only top-k mode.
  args.mode = m.supportsCausal ? MODC_MODE_CAUSAL : MODC_MODE_TOPK;
  args.tokens = tokens.data();
  args.params = params_.data();
  args.logits = logits.data();
  args.routed = routed.data();
  args.workspace = workspace.data();
  args.prefill_lengths = lengths.data();
  args.kv_cache = reinterpret_cast<float *>(kvCache_.data());
  args.kv_counts = kvCounts_.data();
  args.moe_counts = moeCounts_.data();
  package_->forwardRaw(args);
  for (int64_t b = 0; b < B; ++b) {
    if (lengths[b] == 0)
      continue;
    positions_[b] = lengths[b];
    std::copy_n(logits.begin() + (b * S + lengths[b] - 1) * V, V,
                logits_.begin() + b * V);
  }
  // Dense layers hold every prompt token; routed ones at most that many.
  for (int64_t l = 0; l < nLayers_; ++l)
    for (int64_t b = 0; b < B; ++b) {
      int32_t count = kvCounts_[l * B + b];
      bool routedLayer = m.layers[l].routed;
      if (routedLayer ? (count < 0 || count > lengths[b]) : count != lengths[b])
        throw Error(fmt::format("prefill: the package left layer {} of "
                                "sequence {} with {} cached tokens for a "
                                "prompt of {}",
                                l, b, count, lengths[b]));
    }
}

//===----------------------------------------------------------------------===//
// Sampling
//===----------------------------------------------------------------------===//

void modrt::checkSamplingConfig(const SamplingConfig &c) {
  if (!std::isfinite(c.temperature) || c.temperature < 0)
    throw Error(fmt::format("sampling: temperature must be a finite number "
                            ">= 0 (0 is greedy), got {}",
                            c.temperature));
  if (c.topK < 0)
    throw Error(
        fmt::format("sampling: top-k must be >= 0 (0 keeps every token), "
                    "got {}",
                    c.topK));
  if (!(c.topP > 0 && c.topP <= 1))
    throw Error(fmt::format("sampling: top-p must be in (0, 1] (1 keeps "
                            "every token), got {}",
                            c.topP));
}

int32_t modrt::sampleToken(const float *logits, int64_t vocab,
                           const SamplingConfig &config,
                           std::mt19937_64 &rng) {
  checkSamplingConfig(config);
  if (vocab < 1)
    throw Error(fmt::format("sampling: vocab must be >= 1, got {}", vocab));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  int64_t best = -1;
  for (int64_t v = 0; v < vocab; ++v) {
    float x = logits[v];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      throw Error(fmt::format("sampling: logit of token {} is {}; the model "
                              "produced a non-finite value",
                              v, x));
    if (x != kNegInf && (best < 0 || x > logits[best]))
      best = v;
  }
  if (best < 0)
    throw Error("sampling: every logit is -inf; no token can be chosen");
  if (config.temperature == 0)
    return static_cast<int32_t>(best);

  // Rank the candidates: larger logit first, ties to the lower id. -inf
  // logits have probability 0 and never enter.
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v)
    if (logits[v] != kNegInf)
      order.push_back(static_cast<int32_t>(v));
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t keep = order.size();
  if (config.topK > 0 && static_cast<size_t>(config.topK) < keep) {
    keep = static_cast<size_t>(config.topK);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                      before);
    order.resize(keep);
  } else {
    std::sort(order.begin(), order.end(), before);
  }

  // softmax(logits / T) over the kept tokens, in double.
  const double top = logits[order[0]], invT = 1.0 / config.temperature;
  std::vector<double> prob(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    prob[i] = std::exp((static_cast<double>(logits[order[i]]) - top) * invT);
    total += prob[i];
  }
  // Nucleus: the shortest prefix whose probability reaches topP.
  if (config.topP < 1) {
    double cum = 0, target = config.topP * total;
    size_t n = 0;
    while (n < keep) {
      cum += prob[n++];
      if (cum >= target)
        break;
    }
    keep = n;
    total = cum;
  }

  // One 64-bit draw -> uniform double in [0, 1) from the top 53 bits.
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  double threshold = u * total, cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (threshold < cum)
      return order[i];
  }
  // Rounding can leave threshold == cum at the very end: the last kept
  // token with nonzero probability.
  for (size_t i = keep; i-- > 0;)
    if (prob[i] > 0)
      return order[i];
  return order[0];
}

std::mt19937_64 modrt::samplingStream(uint64_t seed, uint64_t index) {
  // splitmix64 of (seed, index): decorrelated streams for nearby seeds and
  // indices.
  uint64_t x = seed ^ (index * 0xd1b54a32d192ed03ull);
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return std::mt19937_64(x ^ (x >> 31));
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

std::vector<int32_t> modrt::tokenizePrompt(const Manifest &m,
                                           const std::string &text,
                                           const std::string &what) {
  if (text.empty())
    throw Error(fmt::format("{} is empty; generation needs at least one byte "
                            "to start from",
                            what));
  if (static_cast<int64_t>(text.size()) > m.seqLen)
    throw Error(fmt::format("{} is {} bytes, longer than the model's context "
                            "of {} tokens (seq_len)",
                            what, text.size(), m.seqLen));
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t t = static_cast<unsigned char>(text[i]);
    if (t >= m.vocabSize)
      throw Error(fmt::format("{}: byte 0x{:02X} at position {} is outside "
                              "the model's vocabulary (vocab_size {}, so "
                              "bytes 0x00..0x{:02X})",
                              what, t, i, m.vocabSize, m.vocabSize - 1));
    tokens[i] = t;
  }
  return tokens;
}

std::vector<int32_t> modrt::tokenizePrompt(const Manifest &m,
                                           const Tokenizer &tokenizer,
                                           const std::string &text,
                                           const std::string &what) {
  if (tokenizer.isBytes())
    return tokenizePrompt(m, text, what);
  tokenizer.checkFits(m.vocabSize, "the model");
  if (text.empty())
    throw Error(fmt::format("{} is empty; generation needs at least one "
                            "token to start from",
                            what));
  std::vector<int32_t> tokens = tokenizer.encode(text);
  if (static_cast<int64_t>(tokens.size()) > m.seqLen)
    throw Error(fmt::format("{} is {} tokens, longer than the model's "
                            "context of {} tokens (seq_len)",
                            what, tokens.size(), m.seqLen));
  return tokens;
}

std::vector<std::string>
modrt::generate(const Package &package, const TensorMap &weights,
                const std::vector<std::string> &prompts, int maxNew,
                const SamplingConfig &config,
                std::function<void(size_t, const std::string &)> onToken) {
  return generate(package, weights, Tokenizer(), prompts, maxNew, config,
                  std::move(onToken));
}

std::vector<std::string>
modrt::generate(const Package &package, const TensorMap &weights,
                const Tokenizer &tokenizer,
                const std::vector<std::string> &prompts, int maxNew,
                const SamplingConfig &config,
                std::function<void(size_t, const std::string &)> onToken) {
  const Manifest &m = package.manifest();
  checkSamplingConfig(config);
  if (maxNew < 0)
    throw Error(fmt::format("generate: max new bytes must be >= 0, got {}",
                            maxNew));
  if (prompts.empty())
    throw Error("generate: no prompts");
  package.requireDecode();
  const size_t B = prompts.size();
  std::vector<std::vector<int32_t>> tokens(B);
  for (size_t b = 0; b < B; ++b)
    tokens[b] = tokenizePrompt(m, tokenizer, prompts[b],
                               B == 1 ? "prompt" : fmt::format("prompt {}", b));

  std::vector<std::string> out(B);
  std::vector<int64_t> budget(B);
  for (size_t b = 0; b < B; ++b)
    budget[b] = std::min<int64_t>(
        maxNew, m.seqLen - static_cast<int64_t>(tokens[b].size()));
  if (std::all_of(budget.begin(), budget.end(),
                  [](int64_t n) { return n <= 0; }))
    return out;

  DecodeSession session(package, weights, static_cast<int64_t>(B));
  session.prefill(tokens);
  std::vector<std::mt19937_64> rngs;
  for (size_t b = 0; b < B; ++b)
    rngs.push_back(samplingStream(config.seed, b));
  // Only ids the tokenizer has (0..255 for the byte tokenizer).
  const int64_t choices = std::min<int64_t>(m.vocabSize, tokenizer.vocabSize());
  std::vector<int32_t> next(B, 0);
  std::vector<uint8_t> active(B, 0);
  for (int64_t n = 0;; ++n) {
    bool any = false;
    for (size_t b = 0; b < B; ++b) {
      active[b] = 0;
      if (n >= budget[b])
        continue;
      const float *row = session.logits().data() + b * m.vocabSize;
      int32_t t = sampleToken(row, choices, config, rngs[b]);
      std::string piece = tokenizer.tokenBytes(t);
      out[b] += piece;
      if (onToken)
        onToken(b, piece);
      // Feed the token only when another one follows it.
      if (n + 1 < budget[b]) {
        next[b] = t;
        active[b] = 1;
        any = true;
      }
    }
    if (!any)
      break;
    session.step(next, active);
  }
  return out;
}
