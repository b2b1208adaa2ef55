//===- bench_train.cpp - Training-step benchmark of modc packages ---------===//
//
// Compiles the benchmark models of bench/models with the real `modc` binary
// and times one training step through the runtime: Package::grad (forward in
// top-k mode, cross-entropy, aux/predictor loss, backward) followed by
// Package::adamwStep (clipping + AdamW), with the gradient buffers allocated
// once, as `modrun train` does. Prints medians side by side:
//
//   layer_dense   1 dense layer      (d 512, 8 heads, d_ff 2048, S 1024)
//   layer_routed  1 routed layer at 12.5 % (schedule all)
//   layer_none    0 layers (embedding + LM head only, subtracted from both)
//   model_dense   4 dense layers
//   model_mod     4 layers, every other one routed at 12.5 % (predictor)
//
// Ratios: routed layer / dense layer (each minus the 0-layer model), whole
// MoD model / dense model (target <= 0.6), and ours against the PyTorch
// train step of `torch_mod.py --train --json` when given with --torch FILE
// (target >= 1.5x against eager for the whole MoD model).
//
// Training FLOPs are 3x the useful forward FLOPs of bench_forward (forward +
// backward of every matmul, the backward costing two matmuls per forward
// one); torch_mod.py --train uses the same formula.
//
// Usage: bench_train [--models DIR] [--work DIR] [--batch N] [--iters N]
//                    [--warmup N] [--torch FILE] [--only NAME,...]
//                    [--weights DIR] [--text FILE] [--interleave]
//
//===----------------------------------------------------------------------===//

#include "BenchCommon.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

/// One benchmarked model.
struct Result : bench::ModelResult {
  std::optional<double> stepMs;  ///< median grad + adamw
  std::optional<double> gradMs;  ///< median grad alone (same steps)
  std::optional<double> adamwMs; ///< median adamw alone (same steps)
  double loss = 0.0;             ///< total loss of the last timed step
};

using bench::Clock;
using bench::fmt;
using bench::median;
using bench::msSince;

/// The timed training step of `pkg` (grad + adamw), into `r`.
bench::Timer prepareStep(const bench::Options &opt, const modrt::Package &pkg,
                         Result &r, double compileS) {
  const modrt::Manifest &m = pkg.manifest();
  if (!m.supportsTraining) {
    r.note = "package has no training entry points";
    return {[](bool) {}, [] {}};
  }
  r.gflop = 3.0 * bench::forwardFlops(m, opt.batch) / 1e9;
  // The state a step reads and writes, shared by the Timer's two calls.
  struct State {
    modrt::TensorMap weights, grads;
    modrt::OptimizerState optimizer;
    std::vector<int32_t> tokens;
    std::vector<double> steps, gradMs, adamwMs;
  };
  auto st = std::make_shared<State>(
      State{bench::modelWeights(opt.weights, pkg, r.name),
            {},
            modrt::OptimizerState::zeros(m),
            bench::batchTokens(opt, opt.batch * (m.seqLen + 1), m.vocabSize)});
  bench::printMoeShares(
      r.name, modrt::measureMoeShares(pkg, st->weights, st->tokens, opt.batch));
  modrt::AdamWConfig cfg; // beta 0.9/0.95, wd 0.1, clip 1.0 (modrun train)
  // A small learning rate keeps the weights near their initial values
  // over the timed steps, so every step does the same work.
  const double lr = 1e-4;
  auto call = [&pkg, &r, st, cfg, lr, batch = opt.batch](bool timed) {
    auto s = Clock::now();
    modrt::Losses loss = pkg.grad(st->weights, st->tokens, batch, st->grads);
    double g = msSince(s);
    auto a = Clock::now();
    pkg.adamwStep(st->weights, st->grads, st->optimizer, lr, cfg);
    double w = msSince(a);
    r.loss = loss.total;
    if (timed) {
      st->steps.push_back(msSince(s));
      st->gradMs.push_back(g);
      st->adamwMs.push_back(w);
    }
  };
  auto finish = [&r, st, compileS] {
    r.stepMs = median(st->steps);
    r.gradMs = median(st->gradMs);
    r.adamwMs = median(st->adamwMs);
    std::fprintf(stderr,
                 "  %-14s compiled in %.1f s, median step %.2f ms "
                 "(grad %.2f, adamw %.2f), loss %.4f\n",
                 r.name.c_str(), compileS, *r.stepMs, *r.gradMs, *r.adamwMs,
                 r.loss);
  };
  return {call, finish};
}

} // namespace

int main(int argc, char **argv) {
  bench::Options opt =
      bench::parseArgs(argc, argv, "bench_train", "bench-train-packages");
  std::fprintf(stderr,
               "bench_train: batch %lld, %d warm-up, %d timed steps "
               "(grad + adamw)\n",
               static_cast<long long>(opt.batch), opt.warmup, opt.iters);
  std::vector<Result> results =
      bench::runModels<Result>(opt, "train_", prepareStep);

  std::printf("\n%-14s %10s %9s %9s %9s %9s %12s %12s %8s %8s\n", "model",
              "step ms", "grad ms", "adamw ms", "GFLOP", "GFLOP/s",
              "torch eager", "torch comp", "x eager", "x comp");
  for (const Result &r : results) {
    std::optional<double> rate, vsE, vsC;
    if (r.stepMs) {
      rate = r.gflop / (*r.stepMs * 1e-3);
      if (r.torchEager)
        vsE = *r.torchEager / *r.stepMs;
      if (r.torchCompiled)
        vsC = *r.torchCompiled / *r.stepMs;
    }
    std::printf("%-14s %10s %9s %9s %9.2f %9s %12s %12s %8s %8s\n",
                r.name.c_str(), fmt(r.stepMs).c_str(), fmt(r.gradMs).c_str(),
                fmt(r.adamwMs).c_str(), r.gflop, fmt(rate, "%.1f").c_str(),
                fmt(r.torchEager).c_str(), fmt(r.torchCompiled).c_str(),
                fmt(vsE).c_str(), fmt(vsC).c_str());
    if (!r.note.empty())
      std::printf("  %s: %s\n", r.name.c_str(), r.note.c_str());
  }
  std::printf("(step = grad + adamw; GFLOP = 3 x useful forward FLOPs; "
              "x eager / x comp: PyTorch step time divided by ours, > 1 means "
              "we are faster)\n\n");

  auto get = [&](const char *n, bool torch,
                 bool compiled = false) -> std::optional<double> {
    const Result *r = bench::find(results, n);
    if (!r)
      return std::nullopt;
    if (!torch)
      return r->stepMs;
    return compiled ? r->torchCompiled : r->torchEager;
  };
  auto layerRatio = [&](bool torch, bool compiled, const char *who) {
    auto d = get("layer_dense", torch, compiled),
         r = get("layer_routed", torch, compiled),
         z = get("layer_none", torch, compiled);
    if (!d || !r)
      return;
    double base = z ? *z : 0.0;
    std::printf("%-14s routed layer / dense layer%s: %.3f\n", who,
                z ? " (minus 0-layer model)" : " (whole 1-layer models)",
                (*r - base) / (*d - base));
  };
  layerRatio(false, false, "ours");
  layerRatio(true, false, "torch eager");
  layerRatio(true, true, "torch.compile");
  auto modelRatio = [&](bool torch, bool compiled, const char *who,
                        bool target) {
    auto d = get("model_dense", torch, compiled),
         mo = get("model_mod", torch, compiled);
    if (!d || !mo)
      return;
    double ratio = *mo / *d;
    std::printf("%-14s MoD model step / dense model step: %.3f", who, ratio);
    if (target)
      std::printf("   target <= 0.6: %s", ratio <= 0.6 ? "MET" : "NOT MET");
    std::printf("\n");
  };
  modelRatio(false, false, "ours", true);
  modelRatio(true, false, "torch eager", false);
  modelRatio(true, true, "torch.compile", false);
  for (const char *n : {"model_mod", "model_dense"}) {
    auto ours = get(n, false), eager = get(n, true), comp = get(n, true, true);
    if (ours && eager) {
      double s = *eager / *ours;
      std::printf("%-11s step, ours vs PyTorch eager: %.2fx faster", n, s);
      if (std::string(n) == "model_mod")
        std::printf("   target >= 1.5x: %s", s >= 1.5 ? "MET" : "NOT MET");
      std::printf("\n");
    }
    if (ours && comp)
      std::printf("%-11s step, ours vs torch.compile: %.2fx faster\n", n,
                  *comp / *ours);
  }
  return 0;
}
