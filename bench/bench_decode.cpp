//===- bench_decode.cpp - Decode throughput of MoD vs dense packages ------===//
//
// Compiles bench/models/model_dense.json and model_mod.json (same shape;
// MoD routes every other layer at 12.5 % with a predictor) with the real
// `modc` binary, prefills a prompt of real text and times decode steps
// through the runtime's DecodeSession, for batch 1 and batch 8, side by side:
// tokens/s, and the KV-cache bytes each model holds afterwards.
//
// Weights are random, so an untrained predictor would route about half of the
// tokens. A trained one routes about the capacity (bench/RESULTS.md has
// the demo's trained tiny-mod), so before timing, each routed layer's
// predictor bias (fc2.bias) is set by bisection so that greedy decoding
// after the first prompt routes 12.5 % of the generated tokens there. The
// routed fraction actually seen in the timed runs is printed beside them.
//
// Usage: bench_decode [--models DIR] [--work DIR] [--prompt N] [--new N]
//                     [--repeats N] [--corpus FILE] [--weights DIR]
//
// --weights DIR: a model runs on DIR/model_dense.safetensors or
// DIR/model_mod.safetensors where that file exists, else on fresh weights.
//
//===----------------------------------------------------------------------===//

#include "modrt/Generate.h"

#include "BenchCommon.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string models = BENCH_MODELS_DIR;
  std::string work = "bench-packages";
  std::string corpus = "/usr/share/games/fortunes/fortunes";
  std::string weights; ///< --weights DIR: bench::modelWeights
  int64_t prompt = 256;
  int64_t newTokens = 64;
  int repeats = 3;
};

/// Compiles model `name` into work/name; returns that folder.
std::string compile(const Options &opts, const std::string &name) {
  std::string dir = opts.work + "/" + name;
  bench::fs::create_directories(opts.work);
  if (auto err = bench::compile(opts.models + "/" + name + ".json", dir))
    throw modrt::Error(name + ": " + *err);
  return dir;
}

/// Fraction of decode steps that route through routed layer `index`
/// (Manifest::routedLayers order) while greedily generating `steps` tokens
/// after `prompt`, batch 1.
double decodeRoutedFraction(const modrt::Package &pkg,
                            const modrt::TensorMap &w,
                            const std::vector<int32_t> &prompt, int64_t steps,
                            size_t index) {
  modrt::DecodeSession session(pkg, w, 1);
  session.prefill({prompt});
  int64_t routed = 0;
  std::vector<uint8_t> active{1};
  for (int64_t s = 0; s < steps; ++s) {
    const std::vector<float> &logits = session.logits();
    int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) -
                           logits.begin());
    routed += session.step({next}, active).routed.at(index)[0];
  }
  return double(routed) / double(steps);
}

/// Sets each routed layer's predictor output bias so that greedy decoding
/// routes `target` of the generated tokens there, layer by layer (a layer's
/// routing changes the stream the next one sees). Random weights route about
/// half; a trained predictor routes about the capacity.
void calibrate(const modrt::Package &pkg, modrt::TensorMap &w,
               const std::vector<int32_t> &prompt, int64_t steps,
               double target) {
  const modrt::Manifest &m = pkg.manifest();
  for (size_t i = 0; i < m.routedLayers.size(); ++i) {
    std::string bias = "blocks." + std::to_string(m.routedLayers[i]) +
                       ".predictor.fc2.bias";
    float *b = w.get(bias).f32();
    double lo = -20, hi = 20;
    for (int iter = 0; iter < 24; ++iter) {
      b[0] = float((lo + hi) / 2);
      (decodeRoutedFraction(pkg, w, prompt, steps, i) > target ? hi : lo) =
          b[0];
    }
    b[0] = float(lo);
  }
}

struct Timing {
  double tokensPerSecond = 0;
  double routedFraction = 0; ///< over routed layers and decode steps
  uint64_t kvUsed = 0, kvReserved = 0;
};

/// Prefills `batch` copies of windows of the corpus and times `newTokens`
/// greedy decode steps (the median of `repeats` runs).
Timing timeDecode(const modrt::Package &pkg, const modrt::TensorMap &w,
                  const std::string &text, int64_t batch,
                  const Options &opts) {
  std::vector<double> rates;
  Timing t;
  for (int rep = 0; rep < opts.repeats; ++rep) {
    modrt::DecodeSession session(pkg, w, batch);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t b = 0; b < batch; ++b) {
      size_t start = size_t(b * 977) % (text.size() - opts.prompt);
      prompts.emplace_back(text.begin() + start,
                           text.begin() + start + opts.prompt);
      for (int32_t &tok : prompts.back())
        tok = uint8_t(tok);
    }
    session.prefill(prompts);
    std::vector<uint8_t> active(batch, 1);
    std::vector<int32_t> next(batch);
    int64_t routed = 0, decisions = 0;
    auto start = bench::Clock::now();
    for (int64_t s = 0; s < opts.newTokens; ++s) {
      const std::vector<float> &logits = session.logits();
      for (int64_t b = 0; b < batch; ++b) {
        const float *row = logits.data() + b * session.vocab();
        next[b] = int32_t(std::max_element(row, row + session.vocab()) - row);
      }
      modrt::StepResult r = session.step(next, active);
      for (const std::vector<int32_t> &layer : r.routed) {
        routed += std::count(layer.begin(), layer.end(), 1);
        decisions += int64_t(layer.size());
      }
    }
    double seconds = bench::msSince(start) * 1e-3;
    rates.push_back(double(batch * opts.newTokens) / seconds);
    t.routedFraction = decisions ? double(routed) / decisions : 0;
    t.kvUsed = session.kvBytesUsed();
    t.kvReserved = session.kvBytesReserved();
  }
  t.tokensPerSecond = bench::median(rates);
  return t;
}

int run(const Options &opts) {
  std::ifstream in(opts.corpus, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (text.size() < size_t(opts.prompt) * 16)
    throw modrt::Error("corpus " + opts.corpus + " is too short");

  std::printf("bench_decode: prompt %lld tokens, %lld new tokens, median of %d\n",
              (long long)opts.prompt, (long long)opts.newTokens, opts.repeats);
  struct Row {
    std::string name;
    int64_t batch;
    Timing t;
  };
  std::vector<Row> rows;
  for (const std::string name : {"model_dense", "model_mod"}) {
    modrt::Package pkg = modrt::Package::open(compile(opts, name));
    modrt::TensorMap w = bench::modelWeights(opts.weights, pkg, name);
    if (!pkg.manifest().routedLayers.empty()) {
      std::vector<int32_t> prompt(text.begin(), text.begin() + opts.prompt);
      for (int32_t &tok : prompt)
        tok = uint8_t(tok);
      calibrate(pkg, w, prompt, opts.newTokens, 0.125);
    }
    for (int64_t batch : {1, 8})
      rows.push_back({name, batch, timeDecode(pkg, w, text, batch, opts)});
  }

  std::printf("\n%-12s %6s %12s %14s %16s %16s\n", "model", "batch",
              "tokens/s", "routed frac", "KV used (MB)", "KV reserved (MB)");
  for (const Row &r : rows)
    std::printf("%-12s %6lld %12.1f %14.3f %16.2f %16.2f\n", r.name.c_str(),
                (long long)r.batch, r.t.tokensPerSecond, r.t.routedFraction,
                r.t.kvUsed / 1e6, r.t.kvReserved / 1e6);
  std::printf("\n");
  for (int64_t batch : {1, 8}) {
    const Row *dense = nullptr, *mod = nullptr;
    for (const Row &r : rows)
      if (r.batch == batch)
        (r.name == "model_dense" ? dense : mod) = &r;
    double speedup = mod->t.tokensPerSecond / dense->t.tokensPerSecond;
    std::printf("batch %lld: MoD / dense decode throughput %.2fx   target >= "
                "1.5x: %s;  KV used MoD / dense %.3f\n",
                (long long)batch, speedup, speedup >= 1.5 ? "MET" : "NOT MET",
                double(mod->t.kvUsed) / double(dense->t.kvUsed));
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options opts;
  bench::parseOptions(argc, argv, "bench_decode",
                      "[--models DIR] [--work DIR] [--prompt N] [--new N] "
                      "[--repeats N] [--corpus FILE] [--weights DIR]",
                      [&](const std::string &a, auto &value) {
                        if (a == "--models")
                          opts.models = value();
                        else if (a == "--work")
                          opts.work = value();
                        else if (a == "--corpus")
                          opts.corpus = value();
                        else if (a == "--weights")
                          opts.weights = value();
                        else if (a == "--prompt")
                          opts.prompt = std::stoll(value());
                        else if (a == "--new")
                          opts.newTokens = std::stoll(value());
                        else if (a == "--repeats")
                          opts.repeats = std::stoi(value());
                        else
                          return false;
                        return true;
                      });
  try {
    return run(opts);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bench_decode: error: %s\n", e.what());
    return 1;
  }
}
