//===- bench_forward.cpp - Forward-pass benchmark of modc packages --------===//
//
// Compiles the benchmark models with the real `modc` binary, runs the forward
// pass with the runtime and prints medians side by side:
//
//   layer_dense   1 dense layer      (d 512, 8 heads, d_ff 2048, S 1024)
//   layer_routed  1 routed layer at 12.5 % (schedule all)
//   layer_none    0 layers (embedding + LM head only, subtracted from both)
//   model_dense   the whole model, dense
//   model_mod     the whole model, every other layer routed at 12.5 %
//
// Ratios: routed layer / dense layer (each minus the 0-layer model when modc
// accepts n_layers 0), whole MoD model / dense model, and ours against the
// PyTorch numbers of torch_mod.py when given with --torch FILE (one JSON
// object per line, as `torch_mod.py --json` prints).
//
// Usage: bench_forward [--models DIR] [--work DIR] [--batch N] [--iters N]
//                      [--warmup N] [--torch FILE] [--only NAME,...]
//                      [--weights DIR] [--text FILE] [--interleave]
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
  std::optional<double> ms; ///< median forward time
};

using bench::fmt;

/// The timed forward pass of `pkg` in top-k mode, into `r`.
bench::Timer prepareForward(const bench::Options &opt,
                            const modrt::Package &pkg, Result &r,
                            double compileS) {
  const modrt::Manifest &m = pkg.manifest();
  r.gflop = bench::forwardFlops(m, opt.batch) / 1e9;
  auto weights = std::make_shared<modrt::TensorMap>(
      bench::modelWeights(opt.weights, pkg, r.name));
  auto tokens = std::make_shared<std::vector<int32_t>>(
      bench::batchTokens(opt, opt.batch * m.seqLen, m.vocabSize));
  bench::printMoeShares(
      r.name, modrt::countMoeShares(m, pkg.forward(*weights, *tokens, opt.batch,
                                                   modrt::RouteMode::TopK)));
  auto times = std::make_shared<std::vector<double>>();
  auto call = [&pkg, weights, tokens, times, batch = opt.batch](bool timed) {
    auto s = bench::Clock::now();
    pkg.forward(*weights, *tokens, batch, modrt::RouteMode::TopK);
    if (timed)
      times->push_back(bench::msSince(s));
  };
  auto finish = [&r, times, compileS] {
    r.ms = bench::median(*times);
    std::fprintf(stderr, "  %-14s compiled in %.1f s, median %.2f ms\n",
                 r.name.c_str(), compileS, *r.ms);
  };
  return {call, finish};
}

} // namespace

int main(int argc, char **argv) {
  bench::Options opt =
      bench::parseArgs(argc, argv, "bench_forward", "bench-packages");
  std::fprintf(stderr, "bench_forward: batch %lld, %d warm-up, %d timed\n",
               static_cast<long long>(opt.batch), opt.warmup, opt.iters);
  std::vector<Result> results =
      bench::runModels<Result>(opt, "", prepareForward);

  std::printf("\n%-14s %10s %9s %12s %12s %12s %9s %9s\n", "model", "ms",
              "GFLOP/s", "GFLOP", "torch eager", "torch comp", "x eager",
              "x comp");
  for (const Result &r : results) {
    std::string gflops = r.ms ? fmt(r.gflop / (*r.ms * 1e-3)) : "n/a";
    std::string vsEager =
        r.ms && r.torchEager ? fmt(*r.torchEager / *r.ms) : "n/a";
    std::string vsComp =
        r.ms && r.torchCompiled ? fmt(*r.torchCompiled / *r.ms) : "n/a";
    std::printf("%-14s %10s %9s %12.2f %12s %12s %9s %9s\n", r.name.c_str(),
                fmt(r.ms).c_str(), gflops.c_str(), r.gflop,
                fmt(r.torchEager).c_str(), fmt(r.torchCompiled).c_str(),
                vsEager.c_str(), vsComp.c_str());
    if (!r.note.empty())
      std::printf("  %s: %s\n", r.name.c_str(), r.note.c_str());
  }
  std::printf("(x eager / x comp: PyTorch time divided by ours; > 1 means "
              "we are faster)\n\n");

  auto ms = [&](const char *n) -> std::optional<double> {
    const Result *r = bench::find(results, n);
    return r ? r->ms : std::nullopt;
  };
  auto torchMs = [&](const char *n) -> std::optional<double> {
    const Result *r = bench::find(results, n);
    return r ? r->torchEager : std::nullopt;
  };
  auto layerRatio = [&](auto get, const char *who) {
    auto d = get("layer_dense"), r = get("layer_routed"), z = get("layer_none");
    if (!d || !r)
      return;
    double base = z ? *z : 0.0;
    double ratio = (*r - base) / (*d - base);
    std::printf("%-8s routed layer / dense layer%s: %.3f", who,
                z ? " (minus 0-layer model)" : " (whole 1-layer models)",
                ratio);
    if (std::string(who) == "ours")
      std::printf("   target <= 0.13: %s", ratio <= 0.13 ? "MET" : "NOT MET");
    std::printf("\n");
  };
  layerRatio(ms, "ours");
  layerRatio(torchMs, "torch");
  if (ms("model_mod") && ms("model_dense"))
    std::printf("ours     MoD model / dense model: %.3f\n",
                *ms("model_mod") / *ms("model_dense"));
  if (const Result *mod = bench::find(results, "model_mod");
      mod && mod->ms && mod->torchEager) {
    double speedup = *mod->torchEager / *mod->ms;
    std::printf("whole MoD model, ours vs PyTorch eager: %.2fx faster   "
                "target >= 1.5x: %s\n",
                speedup, speedup >= 1.5 ? "MET" : "NOT MET");
    if (mod->torchCompiled)
      std::printf("whole MoD model, ours vs torch.compile: %.2fx faster\n",
                  *mod->torchCompiled / *mod->ms);
  }
  return 0;
}
