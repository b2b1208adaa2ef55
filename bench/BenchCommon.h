//===- BenchCommon.h - Helpers shared by the modc benchmarks ------*- C++ -*-===//
//
// The FLOP formula (also torch_mod.py's), medians, and compiling a model with
// the real `modc` binary (MODC_BINARY) into a package directory.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_BENCH_BENCHCOMMON_H
#define MODC_BENCH_BENCHCOMMON_H

#include "modrt/Package.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace bench {
namespace fs = std::filesystem;
using nlohmann::json;

/// Useful FLOPs of one top-k forward from the manifest (2 per multiply-add):
/// projections, causal attention (half the score matrix), MLP, routers, LM
/// head. torch_mod.py uses the same formula.
inline double forwardFlops(const modrt::Manifest &m, int64_t batch) {
  const json &model = m.model;
  double d = static_cast<double>(m.dModel), S = static_cast<double>(m.seqLen),
         V = static_cast<double>(m.vocabSize);
  double ff = model.at("d_ff").get<double>();
  bool swiglu = model.value("mlp", std::string("swiglu")) == "swiglu";
  double total = 0.0;
  for (const modrt::LayerInfo &l : m.layers) {
    double n = l.routed ? static_cast<double>(l.capacity) : S;
    total += 2 * 4 * n * d * d;
    total += 2 * 2 * (n * (n + 1) / 2) * d;
    total += 2 * (swiglu ? 3 : 2) * n * d * ff;
    if (l.routed)
      total += 2 * S * d;
  }
  total += 2 * S * d * V;
  return total * static_cast<double>(batch);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Compiles `jsonPath` into `out` with modc; returns modc's output on failure.
inline std::optional<std::string> compile(const std::string &jsonPath,
                                   const std::string &out) {
  fs::remove_all(out);
  std::string log = out + ".log";
  std::string cmd = std::string("'") + MODC_BINARY + "' compile '" + jsonPath +
                    "' --target cpu -o '" + out + "' > '" + log + "' 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc == 0)
    return std::nullopt;
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 400)
    text = text.substr(0, 400) + "...";
  return "modc failed: " + text;
}

/// Options shared by bench_forward and bench_train.
struct Options {
  std::string models = BENCH_MODELS_DIR;
  std::string work;
  std::string torch;
  std::vector<std::string> only;
  int64_t batch = 4;
  int iters = 5;
  int warmup = 2;
};

/// Parses the options of `program` into `opt`; exits on a usage error.
inline void parseArgs(int argc, char **argv, const char *program,
                      Options &opt) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--models")
      opt.models = next();
    else if (a == "--work")
      opt.work = next();
    else if (a == "--torch")
      opt.torch = next();
    else if (a == "--batch")
      opt.batch = std::stoll(next());
    else if (a == "--iters")
      opt.iters = std::stoi(next());
    else if (a == "--warmup")
      opt.warmup = std::stoi(next());
    else if (a == "--only") {
      std::stringstream ss(next());
      std::string n;
      while (std::getline(ss, n, ','))
        opt.only.push_back(n);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--models DIR] [--work DIR] [--batch N] "
                   "[--iters N] [--warmup N] [--torch FILE] "
                   "[--only NAME,...]\n",
                   program);
      std::exit(a == "--help" ? 0 : 2);
    }
  }
}

} // namespace bench

#endif // MODC_BENCH_BENCHCOMMON_H
