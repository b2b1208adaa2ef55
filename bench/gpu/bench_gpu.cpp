//===- bench_gpu.cpp - Times a CUDA modc package on the GPU ---------------===//
//
// Loads one CUDA package (PKG/libmodel.so, compiled beforehand by
// bench/gpu/prepare.sh), uploads random weights once, and times with CUDA
// events recorded on the package's own stream (modc_cuda_stream()):
//
//   forward  modc_forward, top-k mode, tokens [B, S] -> logits [B, S, V]
//   fwd_bwd  modc_grad: top-k forward, cross-entropy, the causal-router
//            loss and the gradient of every parameter
//   train    one modc_train_step: modc_grad, then AdamW over every
//            parameter (lr 1e-4, clipping at 1), replayed as the package's
//            CUDA graph of the step; the line carries tokens_per_s (B S
//            over the median) for the whole-model training target. The
//            weights it updates are a copy: the other measures keep theirs
//   decode   one modc_decode step for B sequences, after a prefill of
//            --prefill tokens per sequence through the forward's KV-cache
//            prefill (causal mode for MoD models, top-k for dense ones);
//            each step's position (and token) advances, so the cache grows
//            by one token per step in dense layers and per routed token in
//            routed layers
//
// Each measurement is the median (and min, mean) over --iters iterations,
// one event pair per iteration, after --warmup untimed ones (the first
// decode step also captures the package's CUDA graph). One JSON line per
// measurement goes to stdout; progress and errors go to stderr. Each line's
// "dtype" is the package's (manifest.json's model: "f32", or "bf16" for a
// package whose products run in bf16; its parameters and buffers are f32
// either way, so the weights uploaded here are f32 in both cases). "impl"
// is "modc" unless --impl names another (below).
//
// Weights: norms 1 + 0.1 N(0,1), biases 0, matrices uniform with std
// 1/sqrt(fan_in), the embedding std 1. So that the causal router (aux_loss:
// routed iff r = router . x > 0) routes about the capacity (12.5 %) of the
// decoded tokens, as a trained router would rather than the ~50 % of a random
// one, column 0 of the embedding is +2 for tokens t % 8 == 0 and -2 otherwise,
// and the router weight is 1 on column 0 plus small noise on the others. This
// changes no cost in top-k mode (exactly k tokens per sequence are routed).
//
// Usage: bench_gpu PKG_DIR [--batch 8] [--iters 20] [--warmup 3]
//                  [--decode-iters 100] [--decode-warmup 10] [--prefill N]
//                  [--only forward,fwd_bwd,train,decode] [--device N]
//                  [--max-seconds 10] [--impl modc] [--kind KIND]
//
// --impl names the lines' implementation: run.sh times the packages that
// prepare.sh compiled with --cuda-gemms='path=mma' as "modc_mma" and with
// 'tma=false' as "modc_notma" (report.py's comparisons). --kind names the
// lines' kind, else none, dense, mod, or for MoE models (docs/model-format.md
// section 7) mode (with no-op experts) or moe; their lines also carry how
// the MoE layers decided the batch (moe_kept, moe_noop, moe_dropped: shares
// of the tokens, from one untimed forward), and their FLOPs count the
// experts' products on the kept tokens. An MoE router gets the matrices'
// initialisation, not the MoD router's.
//
// --max-seconds caps each measurement: when the warm-up runs say that
// --iters iterations would take longer, fewer are timed (at least 3); the
// JSON line's "iters" is the number timed.
// Built with -DBENCH_GPU_HOST_TIMER (no CUDA runtime), it times with the host
// clock around each call plus modc_cuda_sync instead: only for checking the
// driver here against packages built with modc's CPU emulation of CUDA
// (README.md), never for numbers.
//
//===----------------------------------------------------------------------===//

#include "modrt/abi.h"

#ifndef BENCH_GPU_HOST_TIMER
#include <cuda_runtime.h>
#endif
#include <dlfcn.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

struct Options {
  std::string package;
  int64_t batch = 8;
  int iters = 20, warmup = 3;
  int decodeIters = 100, decodeWarmup = 10;
  int64_t prefill = -1; // default: seq_len / 2
  double maxSeconds = 10; // per measurement: fewer iterations when slower
  std::set<std::string> only = {"forward", "fwd_bwd", "train", "decode"};
  int device = 0;
  std::string impl = "modc";
  std::string kind; ///< --kind: the lines' kind, else from the manifest
};

[[noreturn]] void usage(int rc) {
  std::fprintf(
      rc ? stderr : stdout,
      "usage: bench_gpu PKG_DIR [--batch N] [--iters N] [--warmup N]\n"
      "                 [--decode-iters N] [--decode-warmup N] "
      "[--prefill N]\n"
      "                 [--only forward,fwd_bwd,train,decode] [--device N]\n"
      "                 [--max-seconds S] [--impl NAME] [--kind KIND]\n"
      "Times a CUDA modc package with CUDA events; one JSON line per "
      "measurement.\n");
  std::exit(rc);
}

Options parseArgs(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h")
      usage(0);
    else if (a == "--batch")
      o.batch = std::stoll(next());
    else if (a == "--iters")
      o.iters = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--decode-iters")
      o.decodeIters = std::stoi(next());
    else if (a == "--decode-warmup")
      o.decodeWarmup = std::stoi(next());
    else if (a == "--prefill")
      o.prefill = std::stoll(next());
    else if (a == "--max-seconds")
      o.maxSeconds = std::stod(next());
    else if (a == "--device")
      o.device = std::stoi(next());
    else if (a == "--impl")
      o.impl = next();
    else if (a == "--kind")
      o.kind = next();
    else if (a == "--only") {
      o.only.clear();
      std::stringstream ss(next());
      std::string w;
      while (std::getline(ss, w, ','))
        o.only.insert(w);
    } else if (!a.empty() && a[0] == '-')
      usage(2);
    else if (o.package.empty())
      o.package = a;
    else
      usage(2);
  }
  if (o.package.empty())
    usage(2);
  if (o.batch < 1 || o.iters < 1 || o.warmup < 0 || o.decodeIters < 1 ||
      o.decodeWarmup < 0) {
    std::fprintf(stderr, "bench_gpu: counts must be positive\n");
    std::exit(2);
  }
  return o;
}

/// The package's exported functions.
struct Api {
  uint32_t (*abiVersion)();
  const char *(*manifest)();
  const char *(*lastError)();
  uint64_t (*forwardWorkspace)(int64_t);
  int32_t (*forward)(const modc_forward_args *);
  uint64_t (*gradWorkspace)(int64_t);
  int32_t (*grad)(const modc_grad_args *);
  uint64_t (*kvCacheBytes)(int64_t);
  uint64_t (*decodeWorkspace)(int64_t);
  int32_t (*decode)(const modc_decode_args *);
  int32_t (*init)(int32_t);
  const char *(*arch)();
  void *(*stream)();
  int32_t (*alloc)(uint64_t, void **);
  int32_t (*free)(void *);
  int32_t (*copy)(void *, const void *, uint64_t, int32_t);
  int32_t (*memset)(void *, int32_t, uint64_t);
  int32_t (*sync)();
  int32_t (*paramsVersion)(uint64_t); ///< optional: null in older packages
  int32_t (*trainStep)(const modc_train_step_args *); ///< optional, too
};

Api *gApi = nullptr;
double gMaxSeconds = 10;
std::string gPackage;
/// Host clock around each call plus a wait, instead of CUDA events: always
/// in a BENCH_GPU_HOST_TIMER build, and as a fallback when an event cannot be
/// recorded on the package's stream (reported as "timer": "host").
bool gHostTimer = false;

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "bench_gpu: %s: %s\n", gPackage.c_str(), msg.c_str());
  std::exit(1);
}

/// Exits with the package's message when a modc_* call fails.
void check(int32_t status, const char *what) {
  if (status == MODC_OK)
    return;
  const char *msg = gApi && gApi->lastError ? gApi->lastError() : "";
  die(std::string(what) + " failed (status " + std::to_string(status) +
      "): " + (msg && *msg ? msg : "no message"));
}

#ifndef BENCH_GPU_HOST_TIMER
/// Exits when one of our own CUDA runtime calls fails.
void checkCuda(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    die(std::string(what) + ": " + cudaGetErrorString(e));
}
using Stream = cudaStream_t;
#else
using Stream = void *;
#endif

template <typename T> void resolve(void *h, T &slot, const char *name) {
  void *sym = dlsym(h, name);
  if (!sym)
    die(std::string("libmodel.so does not export ") + name +
        " (not a CUDA modc package?)");
  slot = reinterpret_cast<T>(sym);
}

/// Device buffer of at least 64 bytes (entries want non-null pointers).
void *deviceAlloc(uint64_t bytes) {
  void *p = nullptr;
  check(gApi->alloc(std::max<uint64_t>(bytes, 64), &p), "modc_cuda_alloc");
  return p;
}

void upload(void *dst, const void *src, uint64_t bytes) {
  check(gApi->copy(dst, src, bytes, 0), "modc_cuda_copy (to the GPU)");
}

/// xorshift64*: fast, reproducible host random numbers.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  /// Uniform in [-1, 1).
  float sym() { return float((next() >> 40) * (1.0 / 8388608.0) - 1.0); }
  /// Uniform with standard deviation `std`.
  float uniformStd(float std) { return sym() * std * 1.7320508f; }
};

struct Stats {
  double median, min, mean;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {med, v.front(), std::accumulate(v.begin(), v.end(), 0.0) / n};
}

/// Times `body` `iters` times after `warmup` untimed runs; `before(i)` runs
/// outside the timed region of iteration i (i counts warm-up runs too).
template <typename Before, typename Body>
Stats timeEvents(Stream s, int warmup, int &iters, Before before, Body body) {
  check(gApi->sync(), "before the warm-up");
  auto w0 = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup; ++i) {
    before(i);
    body();
  }
  check(gApi->sync(), "warm-up");
  if (warmup > 1) {
    // The first warm-up run pays one-time costs; the rest say how long an
    // iteration takes, so that the measurement fits in --max-seconds.
    double each = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - w0)
                      .count() /
                  warmup;
    if (each * iters > gMaxSeconds)
      iters = std::max(3, static_cast<int>(gMaxSeconds / each));
  }
  std::vector<double> ms(iters);
  if (gHostTimer) {
    (void)s;
    for (int i = 0; i < iters; ++i) {
      before(warmup + i);
      check(gApi->sync(), "timed iterations");
      auto t0 = std::chrono::steady_clock::now();
      body();
      check(gApi->sync(), "timed iterations");
      ms[i] = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
    }
    return stats(ms);
  }
#ifndef BENCH_GPU_HOST_TIMER
  // One event pair per iteration, all enqueued back to back: no host wait
  // between iterations.
  std::vector<cudaEvent_t> start(iters), stop(iters);
  for (int i = 0; i < iters; ++i) {
    checkCuda(cudaEventCreate(&start[i]), "cudaEventCreate");
    checkCuda(cudaEventCreate(&stop[i]), "cudaEventCreate");
  }
  for (int i = 0; i < iters; ++i) {
    before(warmup + i);
    checkCuda(cudaEventRecord(start[i], s), "cudaEventRecord");
    body();
    checkCuda(cudaEventRecord(stop[i], s), "cudaEventRecord");
  }
  check(gApi->sync(), "timed iterations");
  for (int i = 0; i < iters; ++i) {
    float t = 0;
    checkCuda(cudaEventElapsedTime(&t, start[i], stop[i]),
              "cudaEventElapsedTime");
    ms[i] = t;
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
#endif
  return stats(ms);
}

bool allFinite(const std::vector<float> &v) {
  return std::all_of(v.begin(), v.end(),
                     [](float x) { return std::isfinite(x); });
}

} // namespace

int main(int argc, char **argv) {
  Options opt = parseArgs(argc, argv);
  gPackage = opt.package;
  gMaxSeconds = opt.maxSeconds;
  std::string lib = opt.package + "/libmodel.so";
  void *h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h)
    die(std::string("cannot load ") + lib + ": " + dlerror());
  Api api{};
  gApi = &api;
  resolve(h, api.abiVersion, "modc_abi_version");
  resolve(h, api.manifest, "modc_manifest_json");
  resolve(h, api.lastError, "modc_last_error");
  resolve(h, api.forwardWorkspace, "modc_forward_workspace_bytes");
  resolve(h, api.forward, "modc_forward");
  resolve(h, api.init, "modc_cuda_init");
  resolve(h, api.arch, "modc_cuda_arch");
  resolve(h, api.stream, "modc_cuda_stream");
  resolve(h, api.alloc, "modc_cuda_alloc");
  resolve(h, api.free, "modc_cuda_free");
  resolve(h, api.copy, "modc_cuda_copy");
  resolve(h, api.memset, "modc_cuda_memset");
  resolve(h, api.sync, "modc_cuda_sync");
  api.paramsVersion = reinterpret_cast<decltype(api.paramsVersion)>(
      dlsym(h, "modc_cuda_params_version"));
  api.trainStep = reinterpret_cast<decltype(api.trainStep)>(
      dlsym(h, "modc_train_step"));
  if (api.abiVersion() != MODC_ABI_VERSION)
    die("package ABI " + std::to_string(api.abiVersion()) +
        ", bench_gpu was built for " + std::to_string(MODC_ABI_VERSION) +
        ": recompile the packages (prepare.sh) and bench_gpu");
  // Optional entries: resolved only where the manifest lists them.
  json manifest = json::parse(api.manifest());
  const json &entries = manifest.at("entries");
  const json &model = manifest.at("model");
  if (entries.contains("grad")) {
    resolve(h, api.gradWorkspace, "modc_grad_workspace_bytes");
    resolve(h, api.grad, "modc_grad");
  }
  if (entries.contains("decode")) {
    resolve(h, api.kvCacheBytes, "modc_kv_cache_bytes");
    resolve(h, api.decodeWorkspace, "modc_decode_workspace_bytes");
    resolve(h, api.decode, "modc_decode");
  }

  const int64_t B = opt.batch;
  const int64_t S = model.at("seq_len").get<int64_t>();
  const int64_t V = model.at("vocab_size").get<int64_t>();
  const int64_t d = model.at("d_model").get<int64_t>();
  const int64_t ff = model.at("d_ff").get<int64_t>();
  const int64_t L = model.at("n_layers").get<int64_t>();
  const std::string name = model.value("name", std::string("model"));
  // The model's dtype ("f32" or "bf16": bf16 products with f32 accumulation,
  // f32 parameters and buffers), as the package describes it.
  const std::string dtype = model.value("dtype", std::string("f32"));
  int64_t nRouted = 0, k = S;
  for (const json &l : manifest.at("layers"))
    if (l.value("routed", false)) {
      ++nRouted;
      k = l.at("capacity").get<int64_t>();
    }
  // MoE MLPs (docs/model-format.md section 7): E real experts and N no-op
  // ones, the layers that have them, and each one's capacity a sequence.
  const json moe = model.value("moe", json());
  const int64_t moeE = moe.is_object() ? moe.at("n_experts").get<int64_t>() : 0;
  const int64_t moeN =
      moe.is_object() ? moe.value("noop_experts", int64_t(0)) : 0;
  const int64_t moeLayers =
      moe.is_object() ? static_cast<int64_t>(moe.at("layers").size()) : 0;
  const std::string kind = !opt.kind.empty() ? opt.kind
                           : moeLayers       ? (moeN ? "mode" : "moe")
                           : L == 0          ? "none"
                           : nRouted         ? "mod"
                                             : "dense";
  bool causalMode = false;
  for (const json &m : entries.at("forward").value("modes", json::array()))
    causalMode |= m == "causal";

  // Opening the GPU: the package's own check (no device, wrong architecture).
  check(api.init(opt.device), "modc_cuda_init");
  auto stream = static_cast<Stream>(api.stream());
#ifndef BENCH_GPU_HOST_TIMER
  // Our statically linked CUDA runtime shares the device's primary context
  // with the package's; events recorded here land on the package's stream.
  checkCuda(cudaSetDevice(opt.device), "cudaSetDevice");
  cudaDeviceProp prop;
  checkCuda(cudaGetDeviceProperties(&prop, opt.device), "cudaGetDeviceProperties");
  const std::string deviceName = prop.name;
  {
    // Probe: an event recorded by our CUDA runtime on the package's stream.
    cudaEvent_t probe;
    cudaError_t e = cudaEventCreate(&probe);
    if (e == cudaSuccess)
      e = cudaEventRecord(probe, stream);
    if (e == cudaSuccess)
      e = cudaEventSynchronize(probe);
    if (e != cudaSuccess) {
      std::fprintf(stderr,
                   "bench_gpu: warning: cannot record a CUDA event on the "
                   "package's stream (%s); timing with the host clock and a "
                   "wait per iteration instead\n",
                   cudaGetErrorString(e));
      cudaGetLastError();
      gHostTimer = true;
    } else {
      cudaEventDestroy(probe);
    }
  }
#else
  gHostTimer = true;
  const std::string deviceName = "host timer (emulation check, not a GPU)";
#endif
  std::fprintf(stderr, "bench_gpu: %s (%s, %s, d_model %lld, B %lld) on %s\n",
               name.c_str(), kind.c_str(), dtype.c_str(), (long long)d,
               (long long)B, deviceName.c_str());

  // Weights, random on the host, uploaded once.
  Rng rng(1234);
  std::vector<void *> params;
  std::vector<int64_t> paramElements; // each parameter's, as the manifest says
  for (const json &p : manifest.at("params")) {
    std::string pname = p.at("name").get<std::string>();
    std::vector<int64_t> shape = p.at("shape").get<std::vector<int64_t>>();
    int64_t n = 1;
    for (int64_t s : shape)
      n *= s;
    paramElements.push_back(n);
    std::vector<float> w(static_cast<size_t>(n));
    int64_t fanIn = shape.back();
    auto endsWith = [&](const char *suffix) {
      size_t m = std::strlen(suffix);
      return pname.size() >= m && pname.compare(pname.size() - m, m, suffix) == 0;
    };
    if (endsWith("norm.weight"))
      for (float &x : w)
        x = 1.0f + 0.1f * rng.uniformStd(1.0f);
    else if (endsWith(".bias"))
      std::fill(w.begin(), w.end(), 0.0f);
    else if (pname == "embed.weight") {
      for (float &x : w)
        x = rng.uniformStd(1.0f);
      for (int64_t t = 0; t < shape[0]; ++t)
        w[t * fanIn] = t % 8 == 0 ? 2.0f : -2.0f;
    } else if (endsWith("router.weight") &&
               pname.find("moe") == std::string::npos) {
      for (float &x : w)
        x = rng.uniformStd(0.01f);
      w[0] = 1.0f;
    } else
      for (float &x : w)
        x = rng.uniformStd(1.0f / std::sqrt(float(fanIn)));
    void *dp = deviceAlloc(n * sizeof(float));
    upload(dp, w.data(), n * sizeof(float));
    params.push_back(dp);
  }
  // The weights stay as uploaded (inference): the forward products on TMA
  // reuse the bf16 copies of them made by the first call.
  if (api.paramsVersion)
    check(api.paramsVersion(1), "modc_cuda_params_version");
  std::vector<const float *> paramTable(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    paramTable[i] = static_cast<const float *>(params[i]);

  // Tokens [B, S + 1]: the forward reads the first S of each row through a
  // separate [B, S] copy; the gradient reads all S + 1.
  std::vector<int32_t> tokGrad(B * (S + 1)), tokFwd(B * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i <= S; ++i) {
      int32_t t = static_cast<int32_t>(rng.next() % V);
      tokGrad[b * (S + 1) + i] = t;
      if (i < S)
        tokFwd[b * S + i] = t;
    }
  auto *dTokFwd = static_cast<int32_t *>(deviceAlloc(tokFwd.size() * 4));
  auto *dTokGrad = static_cast<int32_t *>(deviceAlloc(tokGrad.size() * 4));
  upload(dTokFwd, tokFwd.data(), tokFwd.size() * 4);
  upload(dTokGrad, tokGrad.data(), tokGrad.size() * 4);

  // The arguments of a top-k forward over the timed tokens.
  auto forwardArgs = [&](void *ws, float *logits, int32_t *routed) {
    modc_forward_args a{};
    a.batch = B;
    a.seq_len = S;
    a.mode = MODC_MODE_TOPK;
    a.tokens = dTokFwd;
    a.params = paramTable.data();
    a.logits = logits;
    a.routed = routed;
    a.workspace = ws;
    return a;
  };

  // How the MoE layers decide this batch (kept, no-op, dropped), from one
  // untimed forward: the operating point the times hold for, since an
  // expert's products run on the tokens it keeps.
  std::vector<int64_t> moeKept(moeLayers, 0);
  int64_t moeNoop = 0, moeDropped = 0, moeReached = 0;
  if (moeLayers) {
    void *ws = deviceAlloc(api.forwardWorkspace(B));
    auto *logits = static_cast<float *>(deviceAlloc(B * S * V * 4));
    auto *decisions =
        static_cast<int32_t *>(deviceAlloc(moeLayers * B * S * 4));
    modc_forward_args a = forwardArgs(ws, logits, nullptr);
    a.moe_decisions = decisions;
    check(api.forward(&a), "modc_forward (MoE decisions)");
    std::vector<int32_t> host(moeLayers * B * S);
    check(api.copy(host.data(), decisions, host.size() * 4, 1),
          "modc_cuda_copy");
    // The encoding of modc_forward_args::moe_decisions (docs/runtime.md).
    for (int64_t l = 0; l < moeLayers; ++l)
      for (int64_t i = 0; i < B * S; ++i) {
        int32_t e = host[l * B * S + i];
        moeReached += e >= 0;
        moeKept[l] += e >= 0 && e < moeE;
        moeNoop += e >= moeE && e < moeE + moeN;
        moeDropped += e >= moeE + moeN;
      }
    check(api.free(ws), "modc_cuda_free");
    check(api.free(logits), "modc_cuda_free");
    check(api.free(decisions), "modc_cuda_free");
  }

  // Useful FLOPs of one top-k forward (bench/BenchCommon.h's formula); an
  // MoE layer's MLP counts its router over every token and its experts'
  // SwiGLU over the tokens they kept.
  double flops = 0;
  int64_t moeIndex = 0;
  for (const json &l : manifest.at("layers")) {
    double n = l.value("routed", false) ? double(k) : double(S);
    double mlp = 2 * 3 * n * d * ff;
    if (moeLayers && moe.at("layers").contains(l.at("index"))) {
      const int64_t dExpert = moe.at("d_expert").get<int64_t>();
      mlp = 2.0 * S * d * (moeE + moeN) +
            2.0 * 3 * double(moeKept[moeIndex++]) * d * dExpert / double(B);
    }
    flops += 2 * 4 * n * d * d + 2 * 2 * (n * (n + 1) / 2) * d + mlp +
             (l.value("routed", false) ? 2.0 * S * d : 0);
  }
  flops = (flops + 2.0 * S * d * V) * B;
  json moeShares;
  if (moeLayers) {
    int64_t kept = 0;
    for (int64_t c : moeKept)
      kept += c;
    auto share = [&](int64_t c) {
      return moeReached ? double(c) / double(moeReached) : 0.0;
    };
    moeShares = {{"moe_kept", share(kept)},
                 {"moe_noop", share(moeNoop)},
                 {"moe_dropped", share(moeDropped)}};
    std::fprintf(stderr,
                 "bench_gpu: %s: MoE layers kept %.1f %%, no-op %.1f %%, "
                 "dropped %.1f %% of %lld tokens\n",
                 name.c_str(), 100 * share(kept), 100 * share(moeNoop),
                 100 * share(moeDropped), (long long)moeReached);
  }

  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const std::string impl = opt.impl;
  auto emit = [&](const std::string &what, const Stats &st, int iters,
                  json extra) {
    json j = {{"impl", impl},        {"dtype", dtype}, {"scope", "model"},
              {"model", name},       {"kind", kind},
              {"d_model", d},        {"n_heads", model.at("n_heads")},
              {"d_ff", ff},          {"seq_len", S},
              {"batch", B},          {"capacity_tokens", k},
              {"what", what},        {"median_ms", st.median},
              {"min_ms", st.min},    {"mean_ms", st.mean},
              {"iters", iters},      {"device", deviceName},
              {"arch", api.arch()},  {"date", date},
              {"package", opt.package},
              {"timer", gHostTimer ? "host" : "cuda_events"}};
    for (auto &[key, v] : extra.items())
      j[key] = v;
    if (moeShares.is_object())
      for (auto &[key, v] : moeShares.items())
        j[key] = v;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  };

  const int64_t nRoutedRows = std::max<int64_t>(nRouted, 1);
  if (opt.only.count("forward")) {
    void *ws = deviceAlloc(api.forwardWorkspace(B));
    auto *logits = static_cast<float *>(deviceAlloc(B * S * V * 4));
    auto *routed = static_cast<int32_t *>(deviceAlloc(nRoutedRows * B * S * 4));
    modc_forward_args a = forwardArgs(ws, logits, routed);
    int n = opt.iters;
    Stats st = timeEvents(stream, opt.warmup, n, [](int) {},
                          [&] { check(api.forward(&a), "modc_forward"); });
    std::vector<float> host(B * S * V);
    check(api.copy(host.data(), logits, host.size() * 4, 1), "modc_cuda_copy");
    emit("forward", st, n,
         {{"gflop", flops / 1e9},
          {"tflops", flops / (st.median * 1e-3) / 1e12},
          {"finite", allFinite(host)}});
    check(api.free(ws), "modc_cuda_free");
    check(api.free(logits), "modc_cuda_free");
    check(api.free(routed), "modc_cuda_free");
  }

  if (opt.only.count("fwd_bwd")) {
    if (!api.grad) {
      std::fprintf(stderr, "bench_gpu: %s has no grad entry; fwd_bwd skipped\n",
                   name.c_str());
    } else {
      void *ws = deviceAlloc(api.gradWorkspace(B));
      std::vector<float *> grads;
      for (int64_t n : paramElements)
        grads.push_back(static_cast<float *>(deviceAlloc(n * 4)));
      auto *losses = static_cast<float *>(deviceAlloc(4 * 4));
      modc_grad_args a{};
      a.batch = B;
      a.seq_len = S;
      a.tokens = dTokGrad;
      a.params = paramTable.data();
      a.grads = grads.data();
      a.losses = losses;
      a.workspace = ws;
      int n = opt.iters;
      Stats st = timeEvents(stream, opt.warmup, n, [](int) {},
                            [&] { check(api.grad(&a), "modc_grad"); });
      std::vector<float> host(3);
      check(api.copy(host.data(), losses, 12, 1), "modc_cuda_copy");
      emit("fwd_bwd", st, n,
           {{"gflop", 3 * flops / 1e9},
            {"tflops", 3 * flops / (st.median * 1e-3) / 1e12},
            {"loss", host[0]}, {"ce", host[1]}, {"aux", host[2]},
            {"finite", allFinite(host)}});
      check(api.free(ws), "modc_cuda_free");
      for (float *g : grads)
        check(api.free(g), "modc_cuda_free");
      check(api.free(losses), "modc_cuda_free");
    }
  }

  if (opt.only.count("train")) {
    if (!api.grad || !api.trainStep) {
      std::fprintf(stderr,
                   "bench_gpu: %s has no modc_train_step; train skipped\n",
                   name.c_str());
    } else {
      // A copy of the weights for AdamW to update, zeroed moments and the
      // gradients it reads, one table each.
      const size_t nParams = paramTable.size();
      std::vector<float *> weights, grads, m, v;
      for (size_t i = 0; i < nParams; ++i) {
        const int64_t n = paramElements[i];
        for (auto *table : {&weights, &grads, &m, &v}) {
          table->push_back(static_cast<float *>(deviceAlloc(n * 4)));
          check(api.memset(table->back(), 0, n * 4), "modc_cuda_memset");
        }
        check(api.copy(weights.back(), paramTable[i], n * 4, 2),
              "modc_cuda_copy");
      }
      std::vector<const float *> readTable(weights.begin(), weights.end());
      void *ws = deviceAlloc(api.gradWorkspace(B));
      auto *losses = static_cast<float *>(deviceAlloc(4 * 4));
      auto *gradNorm = static_cast<float *>(deviceAlloc(4));
      modc_train_step_args a{};
      a.grad.batch = B;
      a.grad.seq_len = S;
      a.grad.tokens = dTokGrad;
      a.grad.params = readTable.data();
      a.grad.grads = grads.data();
      a.grad.losses = losses;
      a.grad.workspace = ws;
      a.adamw.params = weights.data();
      a.adamw.grads = grads.data();
      a.adamw.m = m.data();
      a.adamw.v = v.data();
      a.adamw.lr = 1e-4f;
      a.adamw.beta1 = 0.9f;
      a.adamw.beta2 = 0.95f;
      a.adamw.eps = 1e-8f;
      a.adamw.weight_decay = 0.1f;
      a.adamw.clip_norm = 1.0f;
      a.adamw.grad_norm = gradNorm;
      int n = opt.iters;
      int64_t step = 0;
      Stats st = timeEvents(
          stream, opt.warmup, n, [&](int) { a.adamw.step = ++step; },
          [&] { check(api.trainStep(&a), "modc_train_step"); });
      std::vector<float> host(4);
      check(api.copy(host.data(), losses, 12, 1), "modc_cuda_copy");
      check(api.copy(host.data() + 3, gradNorm, 4, 1), "modc_cuda_copy");
      emit("train", st, n,
           {{"gflop", 3 * flops / 1e9},
            {"tflops", 3 * flops / (st.median * 1e-3) / 1e12},
            {"tokens_per_s", double(B * S) / (st.median * 1e-3)},
            {"steps", step},
            {"loss", host[0]},
            {"grad_norm", host[3]},
            {"finite", allFinite(host)}});
      check(api.free(ws), "modc_cuda_free");
      check(api.free(losses), "modc_cuda_free");
      check(api.free(gradNorm), "modc_cuda_free");
      for (auto *table : {&weights, &grads, &m, &v})
        for (float *t : *table)
          check(api.free(t), "modc_cuda_free");
    }
  }

  if (opt.only.count("decode")) {
    int64_t P = opt.prefill >= 0 ? opt.prefill : S / 2;
    int steps = opt.decodeWarmup + opt.decodeIters;
    if (!api.decode) {
      std::fprintf(stderr, "bench_gpu: %s has no decode entry; decode skipped\n",
                   name.c_str());
    } else if (P < 1 || P + steps > S) {
      die("--prefill " + std::to_string(P) + " plus " + std::to_string(steps) +
          " decode steps must fit in seq_len " + std::to_string(S));
    } else {
      uint64_t kvBytes = api.kvCacheBytes(B);
      auto *kv = static_cast<float *>(deviceAlloc(kvBytes));
      auto *kvCounts =
          static_cast<int32_t *>(deviceAlloc(std::max<int64_t>(L, 1) * B * 4));
      check(api.memset(kvCounts, 0, std::max<int64_t>(L, 1) * B * 4),
            "modc_cuda_memset");
      // Prefill: the first P tokens of each sequence fill the cache.
      {
        void *ws = deviceAlloc(api.forwardWorkspace(B));
        auto *logits = static_cast<float *>(deviceAlloc(B * S * V * 4));
        auto *routed =
            static_cast<int32_t *>(deviceAlloc(nRoutedRows * B * S * 4));
        std::vector<int32_t> lengths(B, static_cast<int32_t>(P));
        auto *dLengths = static_cast<int32_t *>(deviceAlloc(B * 4));
        upload(dLengths, lengths.data(), B * 4);
        modc_forward_args a = forwardArgs(ws, logits, routed);
        a.mode = causalMode ? MODC_MODE_CAUSAL : MODC_MODE_TOPK;
        a.prefill_lengths = dLengths;
        a.kv_cache = kv;
        a.kv_counts = kvCounts;
        check(api.forward(&a), "modc_forward (prefill)");
        check(api.sync(), "modc_forward (prefill)");
        check(api.free(ws), "modc_cuda_free");
        check(api.free(logits), "modc_cuda_free");
        check(api.free(routed), "modc_cuda_free");
        check(api.free(dLengths), "modc_cuda_free");
      }
      std::vector<int32_t> countsBefore(std::max<int64_t>(L, 1) * B, 0);
      if (L)
        check(api.copy(countsBefore.data(), kvCounts, L * B * 4, 1),
              "modc_cuda_copy");
      // Per-step tokens and positions, copied into the fixed argument
      // buffers outside the timed region (the package replays its graph
      // only while the argument pointers repeat).
      std::vector<int32_t> tokTable(steps * B), posTable(steps * B);
      for (int i = 0; i < steps; ++i)
        for (int64_t b = 0; b < B; ++b) {
          tokTable[i * B + b] = static_cast<int32_t>(rng.next() % V);
          posTable[i * B + b] = static_cast<int32_t>(P + i);
        }
      auto *dTokTable = static_cast<int32_t *>(deviceAlloc(steps * B * 4));
      auto *dPosTable = static_cast<int32_t *>(deviceAlloc(steps * B * 4));
      upload(dTokTable, tokTable.data(), steps * B * 4);
      upload(dPosTable, posTable.data(), steps * B * 4);
      auto *dTok = static_cast<int32_t *>(deviceAlloc(B * 4));
      auto *dPos = static_cast<int32_t *>(deviceAlloc(B * 4));
      std::vector<uint8_t> active(B, 1);
      auto *dActive = static_cast<uint8_t *>(deviceAlloc(B));
      upload(dActive, active.data(), B);
      auto *logits = static_cast<float *>(deviceAlloc(B * V * 4));
      auto *routed = static_cast<int32_t *>(deviceAlloc(nRoutedRows * B * 4));
      void *ws = deviceAlloc(api.decodeWorkspace(B));
      modc_decode_args a{};
      a.batch = B;
      a.tokens = dTok;
      a.positions = dPos;
      a.active = dActive;
      a.params = paramTable.data();
      a.logits = logits;
      a.routed = routed;
      a.kv_cache = kv;
      a.kv_counts = kvCounts;
      a.workspace = ws;
      auto before = [&](int i) {
#ifndef BENCH_GPU_HOST_TIMER
        if (!gHostTimer) {
          // Asynchronous, so that no host wait sits before the timed step.
          checkCuda(cudaMemcpyAsync(dTok, dTokTable + i * B, B * 4,
                                    cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpyAsync");
          checkCuda(cudaMemcpyAsync(dPos, dPosTable + i * B, B * 4,
                                    cudaMemcpyDeviceToDevice, stream),
                    "cudaMemcpyAsync");
          return;
        }
#endif
        check(api.copy(dTok, dTokTable + i * B, B * 4, 2), "modc_cuda_copy");
        check(api.copy(dPos, dPosTable + i * B, B * 4, 2), "modc_cuda_copy");
      };
      int n = opt.decodeIters;
      Stats st = timeEvents(stream, opt.decodeWarmup, n, before,
                            [&] { check(api.decode(&a), "modc_decode"); });
      std::vector<int32_t> countsAfter(std::max<int64_t>(L, 1) * B, 0);
      if (L)
        check(api.copy(countsAfter.data(), kvCounts, L * B * 4, 1),
              "modc_cuda_copy");
      std::vector<float> host(B * V);
      check(api.copy(host.data(), logits, host.size() * 4, 1), "modc_cuda_copy");
      // Tokens the layers cached: after the prefill, and per decode step.
      double prefillMean = 0, stepFrac = 0;
      for (int64_t i = 0; i < L * B; ++i) {
        prefillMean += countsBefore[i];
        stepFrac += countsAfter[i] - countsBefore[i];
      }
      if (L) {
        prefillMean /= double(L * B);
        stepFrac /= double(L * B) * (opt.decodeWarmup + n);
      }
      emit("decode", st, n,
           {{"prefill", P},
            {"cached_after_prefill_mean", prefillMean},
            {"cached_per_step_fraction", stepFrac},
            {"kv_cache_bytes", kvBytes},
            {"finite", allFinite(host)}});
    }
  }
  check(api.sync(), "modc_cuda_sync");
  return 0;
}
