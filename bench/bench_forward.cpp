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
//
//===----------------------------------------------------------------------===//

#include "modrt/Error.h"
#include "modrt/Package.h"

#include "BenchCommon.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// One benchmarked model.
struct Result {
  std::string name;
  std::optional<double> ms; ///< median forward time
  double gflop = 0.0;       ///< useful FLOPs per forward, 1e9
  std::string note;         ///< why there is no time
  std::optional<double> torchEager, torchCompiled;
};

using bench::compile;
using bench::Options;
using bench::parseArgs;
using bench::forwardFlops;
using bench::median;


Result benchOne(const Options &opt, const std::string &name) {
  Result r;
  r.name = name;
  std::string jsonPath = opt.models + "/" + name + ".json";
  std::string dir = opt.work + "/" + name;
  auto t0 = std::chrono::steady_clock::now();
  if (auto err = compile(jsonPath, dir)) {
    r.note = *err;
    for (char &c : r.note)
      if (c == '\n')
        c = ' ';
    return r;
  }
  double compileS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  try {
    modrt::Package pkg = modrt::Package::open(dir);
    const modrt::Manifest &m = pkg.manifest();
    r.gflop = forwardFlops(m, opt.batch) / 1e9;
    modrt::TensorMap weights = pkg.initWeights(1);
    std::mt19937 gen(7);
    std::vector<int32_t> tokens(opt.batch * m.seqLen);
    for (int32_t &t : tokens)
      t = static_cast<int32_t>(gen() % m.vocabSize);
    for (int i = 0; i < opt.warmup; ++i)
      pkg.forward(weights, tokens, opt.batch, modrt::RouteMode::TopK);
    std::vector<double> times;
    for (int i = 0; i < opt.iters; ++i) {
      auto s = std::chrono::steady_clock::now();
      pkg.forward(weights, tokens, opt.batch, modrt::RouteMode::TopK);
      times.push_back(std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - s)
                          .count());
    }
    r.ms = median(times);
    std::fprintf(stderr, "  %-14s compiled in %.1f s, median %.2f ms\n",
                 name.c_str(), compileS, *r.ms);
  } catch (const modrt::Error &e) {
    r.note = std::string("runtime: ") + e.what();
  }
  return r;
}

/// Reads torch_mod.py --json lines into the results, matched by model name.
void readTorch(const std::string &path, std::vector<Result> &results) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "warning: cannot read %s\n", path.c_str());
    return;
  }
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{')
      continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded())
      continue;
    for (Result &r : results)
      if (r.name == j.value("model", std::string())) {
        if (j.contains("eager_ms"))
          r.torchEager = j["eager_ms"].get<double>();
        if (j.contains("compiled_ms"))
          r.torchCompiled = j["compiled_ms"].get<double>();
      }
  }
}

std::string fmtMs(const std::optional<double> &v) {
  if (!v)
    return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", *v);
  return buf;
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  opt.work = "bench-packages";
  parseArgs(argc, argv, "bench_forward", opt);
  fs::create_directories(opt.work);
  std::vector<std::string> names = {"layer_dense", "layer_routed", "layer_none",
                                    "model_dense", "model_mod"};
  if (!opt.only.empty())
    names = opt.only;

  std::fprintf(stderr, "bench_forward: batch %lld, %d warm-up, %d timed\n",
               static_cast<long long>(opt.batch), opt.warmup, opt.iters);
  std::vector<Result> results;
  for (const std::string &n : names)
    results.push_back(benchOne(opt, n));
  if (!opt.torch.empty())
    readTorch(opt.torch, results);

  std::printf("\n%-14s %10s %9s %12s %12s %12s %9s %9s\n", "model", "ms",
              "GFLOP/s", "GFLOP", "torch eager", "torch comp", "x eager",
              "x comp");
  std::map<std::string, const Result *> byName;
  for (const Result &r : results) {
    byName[r.name] = &r;
    std::string gflops = r.ms ? fmtMs(r.gflop / (*r.ms * 1e-3)) : "n/a";
    std::string vsEager =
        r.ms && r.torchEager ? fmtMs(*r.torchEager / *r.ms) : "n/a";
    std::string vsComp =
        r.ms && r.torchCompiled ? fmtMs(*r.torchCompiled / *r.ms) : "n/a";
    std::printf("%-14s %10s %9s %12.2f %12s %12s %9s %9s\n", r.name.c_str(),
                fmtMs(r.ms).c_str(), gflops.c_str(), r.gflop,
                fmtMs(r.torchEager).c_str(), fmtMs(r.torchCompiled).c_str(),
                vsEager.c_str(), vsComp.c_str());
    if (!r.note.empty())
      std::printf("  %s: %s\n", r.name.c_str(), r.note.c_str());
  }
  std::printf("(x eager / x comp: PyTorch time divided by ours; > 1 means "
              "we are faster)\n\n");

  auto ms = [&](const char *n) -> std::optional<double> {
    auto it = byName.find(n);
    return it == byName.end() ? std::nullopt : it->second->ms;
  };
  auto torchMs = [&](const char *n) -> std::optional<double> {
    auto it = byName.find(n);
    return it == byName.end() ? std::nullopt : it->second->torchEager;
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
  if (auto it = byName.find("model_mod");
      it != byName.end() && it->second->ms && it->second->torchEager) {
    double speedup = *it->second->torchEager / *it->second->ms;
    std::printf("whole MoD model, ours vs PyTorch eager: %.2fx faster   "
                "target >= 1.5x: %s\n",
                speedup, speedup >= 1.5 ? "MET" : "NOT MET");
    if (it->second->torchCompiled)
      std::printf("whole MoD model, ours vs torch.compile: %.2fx faster\n",
                  *it->second->torchCompiled / *it->second->ms);
  }
  return 0;
}
