//===- BenchCommon.h - Helpers shared by the modc benchmarks ------*- C++ -*-===//
//
// The FLOP formula (also torch_mod.py's), medians, compiling a model with the
// real `modc` binary (MODC_BINARY) into a package directory, option parsing,
// and the loop of bench_forward and bench_train: compile and time every
// model, then add PyTorch's times from torch_mod.py --json lines.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_BENCH_BENCHCOMMON_H
#define MODC_BENCH_BENCHCOMMON_H

#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Training.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
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
/// MODC_BENCH_MARCH (default native) is passed as modc's --march, so one ISA
/// can be timed against another (bench/run_isa.sh); MODC_BENCH_FLAGS holds
/// further modc options, such as --no-fuse=... (bench/run_fusion.sh).
inline std::optional<std::string> compile(const std::string &jsonPath,
                                          const std::string &out) {
  fs::remove_all(out);
  std::string log = out + ".log";
  const char *march = std::getenv("MODC_BENCH_MARCH");
  const char *flags = std::getenv("MODC_BENCH_FLAGS");
  std::string cmd = std::string("'") + MODC_BINARY + "' compile '" + jsonPath +
                    "' --target cpu --march='" +
                    (march && *march ? march : "native") + "' " +
                    (flags ? flags : "") + " -o '" + out + "' > '" + log +
                    "' 2>&1";
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

/// Walks the options of `program`: `take(a, value)` handles option `a`,
/// calling value() for its argument, and returns false for one it does not
/// know, which prints "usage: PROGRAM `usage`" and exits (0 for --help).
template <class Take>
void parseOptions(int argc, char **argv, const char *program, const char *usage,
                  Take take) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", program, a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (!take(a, value)) {
      std::fprintf(stderr, "usage: %s %s\n", program, usage);
      std::exit(a == "--help" ? 0 : 2);
    }
  }
}

/// Options shared by bench_forward and bench_train.
struct Options {
  std::string models = BENCH_MODELS_DIR;
  std::string work;
  std::string torch;
  std::vector<std::string> only;
  /// --weights DIR: each model runs on DIR/NAME.safetensors where that file
  /// exists (a `modrun train` checkpoint), else on fresh weights of seed 1.
  std::string weights;
  /// --text FILE: the timed batch is FILE's bytes (byte-level models),
  /// else random tokens.
  std::string text;
  int64_t batch = 4;
  int iters = 5;
  int warmup = 2;
  /// --interleave: every model is loaded first, and each timed round runs
  /// every model (the first model of a round rotating) for an untimed
  /// call and then a timed one, so that a drift of the machine's speed
  /// falls on all models alike, while each timed call finds the caches as
  /// a run of its own model leaves them.
  bool interleave = false;
};

/// Parses the options of `program` (bench_forward or bench_train), with
/// `work` as the default package folder; exits on a usage error.
inline Options parseArgs(int argc, char **argv, const char *program,
                         const std::string &work) {
  Options opt;
  opt.work = work;
  parseOptions(argc, argv, program,
               "[--models DIR] [--work DIR] [--batch N] [--iters N] "
               "[--warmup N] [--torch FILE] [--only NAME,...] "
               "[--weights DIR] [--text FILE] [--interleave]",
               [&](const std::string &a, auto &value) {
                 if (a == "--models")
                   opt.models = value();
                 else if (a == "--work")
                   opt.work = value();
                 else if (a == "--torch")
                   opt.torch = value();
                 else if (a == "--weights")
                   opt.weights = value();
                 else if (a == "--text")
                   opt.text = value();
                 else if (a == "--batch")
                   opt.batch = std::stoll(value());
                 else if (a == "--iters")
                   opt.iters = std::stoi(value());
                 else if (a == "--warmup")
                   opt.warmup = std::stoi(value());
                 else if (a == "--interleave")
                   opt.interleave = true;
                 else if (a == "--only") {
                   std::stringstream ss(value());
                   std::string n;
                   while (std::getline(ss, n, ','))
                     opt.only.push_back(n);
                 } else
                   return false;
                 return true;
               });
  return opt;
}

using Clock = std::chrono::steady_clock;
/// Milliseconds since `t`.
inline double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// `n` random tokens below `vocab` (fixed seed).
inline std::vector<int32_t> randomTokens(size_t n, int64_t vocab) {
  std::mt19937 gen(7);
  std::vector<int32_t> tokens(n);
  for (int32_t &t : tokens)
    t = static_cast<int32_t>(gen() % vocab);
  return tokens;
}

/// The tokens of a timed batch: `n` bytes of opt.text from its last tenth
/// on (the part `modrun train` holds out), wrapping around, as byte-level
/// tokens; random tokens without --text. Throws Error for a vocabulary
/// that does not hold bytes or an empty file.
inline std::vector<int32_t> batchTokens(const Options &opt, size_t n,
                                        int64_t vocab) {
  if (opt.text.empty())
    return randomTokens(n, vocab);
  if (vocab < 256)
    throw modrt::Error("--text needs a byte-level vocabulary (256 or more), "
                       "the model has " +
                       std::to_string(vocab));
  std::ifstream in(opt.text, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (!in.eof() && in.fail())
    throw modrt::Error(opt.text + ": cannot read");
  if (bytes.empty())
    throw modrt::Error(opt.text + ": empty, no tokens to time");
  std::vector<int32_t> tokens(n);
  const size_t start = bytes.size() - bytes.size() / 10;
  for (size_t i = 0; i < n; ++i)
    tokens[i] = static_cast<unsigned char>(bytes[(start + i) % bytes.size()]);
  return tokens;
}

/// The weights model `name` runs on: DIR/NAME.safetensors where `dir`
/// (--weights) names a folder holding it, checked against the package; else
/// fresh weights of seed 1. Says which on stderr.
inline modrt::TensorMap modelWeights(const std::string &dir,
                                     const modrt::Package &pkg,
                                     const std::string &name) {
  const std::string path = dir + "/" + name + ".safetensors";
  if (dir.empty() || !fs::exists(path))
    return pkg.initWeights(1);
  modrt::TensorMap weights = modrt::loadWeights(path);
  try {
    pkg.checkWeights(weights);
  } catch (const modrt::Error &e) {
    throw modrt::Error(path + ": " + e.what());
  }
  weights.metadata.clear();
  std::fprintf(stderr, "  %-14s weights from %s\n", name.c_str(), path.c_str());
  return weights;
}

/// Prints how each MoE layer of model `name` decided a timed batch's
/// tokens: the operating point its times hold for (docs/model-format.md
/// section 7).
inline void printMoeShares(const std::string &name,
                           const std::vector<modrt::MoeShares> &shares) {
  for (const modrt::MoeShares &s : shares) {
    std::string perExpert;
    for (int64_t rows : s.keptByExpert)
      perExpert += (perExpert.empty() ? "" : " ") + std::to_string(rows);
    std::fprintf(stderr,
                 "  %-14s moe layer %d: kept %.1f %%, no-op %.1f %%, dropped "
                 "%.1f %% of %lld tokens (rows by expert: %s)\n",
                 name.c_str(), s.layer, s.percent(s.kept), s.percent(s.noop),
                 s.percent(s.dropped), static_cast<long long>(s.reached()),
                 perExpert.c_str());
  }
}

/// "%.2f" (or `f`) of `v`, "n/a" without one.
inline std::string fmt(const std::optional<double> &v, const char *f = "%.2f") {
  if (!v)
    return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), f, *v);
  return buf;
}

/// What every row of bench_forward and bench_train has; each adds its times.
struct ModelResult {
  std::string name;
  double gflop = 0.0; ///< useful FLOPs per forward or step, 1e9
  std::string note;   ///< why there is no time
  std::optional<double> torchEager, torchCompiled;
};

/// The row of model `name` in `results`, or null.
template <class R>
const R *find(const std::vector<R> &results, const std::string &name) {
  for (const R &r : results)
    if (r.name == name)
      return &r;
  return nullptr;
}

/// Reads the lines of `torch_mod.py --json` in `path` into the rows of
/// `results` of the same model: `prefix`eager_ms and `prefix`compiled_ms
/// ("train_" ones for `torch_mod.py --train`).
template <class R>
void readTorch(const std::string &path, const std::string &prefix,
               std::vector<R> &results) {
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
    for (R &r : results)
      if (r.name == j.value("model", std::string())) {
        if (j.contains(prefix + "eager_ms"))
          r.torchEager = j[prefix + "eager_ms"].get<double>();
        if (j.contains(prefix + "compiled_ms"))
          r.torchCompiled = j[prefix + "compiled_ms"].get<double>();
      }
  }
}

/// One model's timed work, from a benchmark's `prepare`: call(timed) runs
/// one call (a forward, a training step), recording its times when `timed`;
/// finish() turns the recorded times into the model's row.
struct Timer {
  std::function<void(bool timed)> call;
  std::function<void()> finish;
};

/// Compiles every model of `opt` (opt.only, else the five of bench/models)
/// into opt.work and times it with the Timer of `prepare(opt, pkg, result,
/// compileSeconds)`: opt.warmup untimed calls, then opt.iters timed ones,
/// model after model, or with --interleave in opt.warmup rounds of an
/// untimed call of each model and opt.iters rounds of an untimed and a
/// timed call of each (under MODC_PROFILE=1, each call is then preceded on
/// stderr by "bench call NAME", a timed one by "bench call NAME timed", so
/// that the package's kernel profile can be told apart). A
/// model that modc or the runtime fails on keeps why in its note. Then adds
/// PyTorch's times from opt.torch (readTorch with `torchPrefix`).
template <class R, class Prepare>
std::vector<R> runModels(const Options &opt, const std::string &torchPrefix,
                         Prepare prepare) {
  fs::create_directories(opt.work);
  std::vector<std::string> names = {"layer_dense", "layer_routed", "layer_none",
                                    "model_dense", "model_mod"};
  if (!opt.only.empty())
    names = opt.only;
  std::vector<R> results(names.size());
  // Packages outlive their Timers, which call into them.
  std::vector<std::optional<modrt::Package>> packages(names.size());
  std::vector<std::pair<size_t, Timer>> timers;
  // Runs `f` for model i, keeping a runtime error as its note.
  auto guarded = [&](size_t i, auto &&f) {
    try {
      f();
      return true;
    } catch (const modrt::Error &e) {
      results[i].note = std::string("runtime: ") + e.what();
      return false;
    }
  };
  auto measure = [&](size_t i, Timer &t) {
    return guarded(i, [&] {
      for (int w = 0; w < opt.warmup; ++w)
        t.call(false);
      for (int k = 0; k < opt.iters; ++k)
        t.call(true);
      t.finish();
    });
  };
  for (size_t i = 0; i < names.size(); ++i) {
    R &r = results[i];
    r.name = names[i];
    std::string dir = opt.work + "/" + r.name;
    auto t0 = Clock::now();
    if (auto err = compile(opt.models + "/" + r.name + ".json", dir)) {
      r.note = *err;
      std::replace(r.note.begin(), r.note.end(), '\n', ' ');
      continue;
    }
    double compileS = msSince(t0) * 1e-3;
    Timer t;
    if (!guarded(i, [&] {
          packages[i].emplace(modrt::Package::open(dir));
          t = prepare(opt, *packages[i], r, compileS);
        }))
      continue;
    if (!opt.interleave) {
      measure(i, t);
      packages[i].reset();
    } else {
      timers.emplace_back(i, std::move(t));
    }
  }
  const bool marked = std::getenv("MODC_PROFILE") != nullptr;
  std::vector<bool> failed(timers.size(), false);
  for (int k = 0; k < opt.warmup + opt.iters; ++k) {
    for (size_t j = 0; j < timers.size(); ++j) {
      size_t at = (j + size_t(k)) % timers.size();
      auto &[i, t] = timers[at];
      if (failed[at])
        continue;
      const bool timed = k >= opt.warmup;
      for (int c = 0; c < (timed ? 2 : 1) && !failed[at]; ++c) {
        if (marked)
          std::fprintf(stderr, "bench call %s%s\n", results[i].name.c_str(),
                       timed && c == 1 ? " timed" : "");
        failed[at] = !guarded(i, [&] { t.call(timed && c == 1); });
      }
    }
  }
  for (size_t j = 0; j < timers.size(); ++j)
    if (!failed[j])
      guarded(timers[j].first, [&] { timers[j].second.finish(); });
  if (!opt.torch.empty())
    readTorch(opt.torch, torchPrefix, results);
  return results;
}

} // namespace bench

#endif // MODC_BENCH_BENCHCOMMON_H
