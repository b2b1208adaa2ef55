//===- CudaVsCpuTest.cpp - CUDA packages against CPU packages -------------===//
//
// The same model compiled for the CPU and for CUDA, run on the same weights
// and tokens through the runtime: forward logits in both modes (relative
// error <= 1e-4 in f32 models, 1e-2 in bf16 ones) with identical routing, every
// gradient and the losses, one AdamW step, four steps of modrt::train, and
// token-by-token decoding after a causal prefill. The raw device API is checked
// too: a token outside the vocabulary is reported by modc_cuda_sync.
//
// Two kinds of CUDA package run these tests:
//  - nvcc-built (sm_90a, sm_80): each test skips, saying why, when no GPU
//    answers (CI machines have none) or the GPU is of another architecture;
//  - emulated: the same generated model.cu built with the host compiler
//    against test/cuda_emu/CudaEmulation.h (modc --cuda-emulation), which
//    runs every kernel on CPU threads. These run everywhere, so the emitter,
//    the kernels, the device API, the decode graph and the runtime's CUDA
//    executor are checked end to end on every CI run.
//
//===----------------------------------------------------------------------===//
#include "modrt/Generate.h"
#include "modrt/Training.h"
#include "modrt/Package.h"
#include "modrt/abi.h"
#include "modrt/Error.h"

#include "ModcPackages.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <unistd.h>
#include <filesystem>
#include <random>

using namespace modrt;
using nlohmann::json;

namespace {

constexpr int64_t kSeqLen = 32;
/// The test models' vocabulary: tokens are drawn below it.
constexpr int64_t kVocab = 96;

json model(const std::string &name, const char *router, const char *mlp,
           int heads) {
  return {{"name", name},         {"vocab_size", kVocab},
          {"d_model", 64},        {"n_layers", 4},
          {"n_heads", heads},     {"d_ff", 160},
          {"seq_len", kSeqLen},   {"mlp", mlp},
          {"norm_eps", 1e-5},     {"rope_theta", 10000.0},
          {"tie_embeddings", false}, {"dtype", "f32"},
          {"mod",
           {{"capacity", 0.25},
            {"schedule", "every_other"},
            {"gate", "sigmoid"},
            {"causal_router", router},
            {"aux_loss_weight", 0.01},
            {"predictor_hidden", 32}}}};
}

/// ||a - b|| / ||b||.
double relError(const float *a, const float *b, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(ref, 1e-300));
}

std::vector<int32_t> randomTokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(vocab - 1));
  std::vector<int32_t> t(n);
  for (int32_t &v : t)
    v = dist(gen);
  return t;
}

/// Weights with non-trivial norms and biases (init gives ones and zeros).
TensorMap randomWeights(const Package &p, uint64_t seed) {
  TensorMap w = p.initWeights(seed);
  std::mt19937 gen(uint32_t(seed * 7 + 1));
  std::uniform_real_distribution<float> jitter(-0.2f, 0.2f);
  for (const ParamInfo &param : p.manifest().params)
    if (param.init != "normal") {
      Tensor &t = w.get(param.name);
      for (int64_t i = 0; i < t.numel(); ++i)
        t.f32()[i] += jitter(gen);
    }
  return w;
}

struct Variant {
  const char *router, *mlp;
  const char *arch; ///< "emulated": built against the CPU emulation
  bool bf16 = false; ///< "dtype": "bf16" (both packages)
  /// Blocks a sequence of the fused select + gather (--cuda-gemms
  /// gather-blocks; 0: the compiler's choice, 1 for these small k).
  int gatherBlocks = 0;
  /// More of --cuda-gemms (e.g. "cutlass cutlass-from=1": the products on
  /// CUTLASS at every row count), or null.
  const char *gemms = nullptr;
  /// Attention heads of d_model 64 (1: head dim 64, which sm_90a's wgmma
  /// attention takes).
  int heads = 4;
  /// MoE MLPs (docs/model-format.md section 7) on every layer: the
  /// experts' products run grouped (docs/cuda.md, "Grouped products").
  bool moe = false;
  bool emulated() const { return std::string(arch) == "emulated"; }
  /// `gemms` as a name: its words joined by '-', '=' dropped.
  std::string gemmsName() const {
    std::string name;
    for (const char *c = gemms; c && *c; ++c)
      if (*c != '=')
        name += *c == ' ' ? '-' : *c;
    return name;
  }
  /// The CUDA package's name in a prebuilt directory.
  std::string cudaName() const {
    return std::string(arch) +
           (gatherBlocks ? "-gather" + std::to_string(gatherBlocks) : "") +
           (gemms ? "-" + gemmsName() : "");
  }
};

/// `name` with '-' as '_' (a test's name).
std::string testName(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

/// A GPU machine may have no MLIR to run modc: MODC_GPU_TEST_PACKAGES=DIR
/// makes the tests open packages compiled beforehand into DIR, and with
/// MODC_GPU_TEST_PREPARE=1 too they compile them into DIR (on any machine)
/// instead of running (test/gpu/prepare.sh).
const char *prebuiltDir() { return std::getenv("MODC_GPU_TEST_PACKAGES"); }
bool preparing() {
  const char *p = std::getenv("MODC_GPU_TEST_PREPARE");
  return prebuiltDir() && p && std::string(p) == "1";
}

/// The package directory of `desc` for `target` (`what` names it in DIR).
std::string packageFor(const json &desc, const std::string &target,
                       const std::string &what, const std::string &stamp = "") {
  std::filesystem::path prebuilt =
      prebuiltDir() ? std::filesystem::path(prebuiltDir()) /
                          (desc["name"].get<std::string>() + "-" + what)
                    : std::filesystem::path();
  if (prebuiltDir() && !preparing()) {
    if (!std::filesystem::exists(prebuilt / "manifest.json"))
      ADD_FAILURE() << prebuilt.string()
                    << " is missing: run test/gpu/prepare.sh where modc runs";
    return prebuilt.string();
  }
  std::string dir =
      modtest::compiledPackageDir(desc, GPU_CACHE_DIR, target, stamp);
  if (preparing() && !dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(prebuilt, ec);
    std::filesystem::create_directories(prebuilt.parent_path(), ec);
    std::filesystem::copy(dir, prebuilt,
                          std::filesystem::copy_options::recursive, ec);
    if (ec)
      ADD_FAILURE() << "cannot copy " << dir << " to " << prebuilt << ": "
                    << ec.message();
  }
  return dir;
}

class CudaVsCpu : public ::testing::TestWithParam<Variant> {
protected:
  void SetUp() override {
    Variant v = GetParam();
    // nvcc builds take a while: not on machines without a GPU.
    if (!v.emulated() && !preparing() && !prebuiltDir() &&
        !std::filesystem::exists("/dev/nvidiactl"))
      GTEST_SKIP() << "no NVIDIA GPU on this machine (no /dev/nvidiactl)";
    json desc = model(std::string("gpu-") + v.router + "-" + v.mlp +
                          (v.bf16 ? "-bf16" : "") +
                          (v.heads != 4 ? "-h" + std::to_string(v.heads) : "") +
                          (v.moe ? "-moe" : ""),
                      v.router, v.mlp, v.heads);
    if (v.bf16)
      desc["dtype"] = "bf16";
    if (v.moe)
      desc["moe"] = {{"n_experts", 3},
                     {"noop_experts", 1},
                     {"d_expert", 128},
                     {"capacity_factor", 1.25},
                     {"balance_loss_weight", 0.01}};
    // Prepared CPU packages must run on another x86-64 machine.
    std::string cpuDir = packageFor(
        desc, prebuiltDir() ? "--target cpu --march=x86-64-v3" : "--target cpu",
        "cpu");
    // On the emulation, products of up to 8 rows (these tests' decode
    // steps) take the few-row kernel and larger ones the tiles: its 128
    // fibers a CTA, meeting at every shuffle, made the default bound of 64
    // rows four times these tests' time. CudaKernels.LinearFewRows checks
    // it up to 64 rows against fp64, and GPU runs use the default.
    // The library word, where `gemms` names one, leads.
    std::vector<std::string> options;
    if (v.gemms)
      options.push_back(v.gemms);
    if (v.emulated())
      options.push_back("stream-rows=8");
    if (v.gatherBlocks)
      options.push_back("gather-blocks=" + std::to_string(v.gatherBlocks));
    std::string gemms; // through the shell (compiledPackageDir): quoted
    for (const std::string &o : options)
      gemms += (gemms.empty() ? " --cuda-gemms='" : " ") + o;
    if (!gemms.empty())
      gemms += "'";
    std::string cudaDir = packageFor(
        desc,
        // The emulated packages train for several steps: built at -O1,
        // which runs them faster than the default -Og (docs/testing.md,
        // "Time").
        (v.emulated() ? std::string("--target cuda --cuda-emulation-opt=1 "
                                    "--cuda-emulation=") +
                            CUDA_EMULATION_DIR
                      : std::string("--target cuda --arch ") + v.arch) +
            gemms,
        v.cudaName(),
        v.emulated() ? modtest::readFile(std::string(CUDA_EMULATION_DIR) +
                                         "/CudaEmulation.h")
                     : "");
    ASSERT_FALSE(cpuDir.empty());
    ASSERT_FALSE(cudaDir.empty());
    if (preparing())
      GTEST_SKIP() << "prepared " << cpuDir << " and " << cudaDir;
    cpu = std::make_unique<Package>(Package::open(cpuDir));
    cuda = std::make_unique<Package>(Package::open(cudaDir));
    weights = randomWeights(*cpu, 11);
    // The first call opens the GPU: skip when there is none or it does not
    // run this architecture; any other failure is a failure.
    try {
      cuda->forward(weights, randomTokens(kSeqLen, kVocab, 1), 1, RouteMode::TopK);
    } catch (const Error &e) {
      std::string what = e.what();
      if (what.find("no usable CUDA device") != std::string::npos ||
          what.find("this package was compiled for") != std::string::npos)
        GTEST_SKIP() << what;
      FAIL() << what;
    }
  }
  /// The tolerance of a comparison that holds within `f32` for f32 models.
  /// bf16 models round the same operands on both targets, but a value that
  /// lands within its f32 summation error of a bf16 rounding boundary rounds
  /// one way on the CPU and the other on the GPU (a 2^-8 step), so their
  /// comparisons hold within 100 times more (1e-4 becomes the 1e-2).
  double tol(double f32) const { return GetParam().bf16 ? 100 * f32 : f32; }
  std::unique_ptr<Package> cpu, cuda;
  TensorMap weights;
};

TEST_P(CudaVsCpu, ForwardMatchesInBothModes) {
  const int64_t B = 3;
  std::vector<int32_t> tokens = randomTokens(B * kSeqLen, kVocab, 5);
  for (RouteMode mode : {RouteMode::TopK, RouteMode::Causal}) {
    std::vector<std::vector<int32_t>> decCpu, decCuda;
    ForwardResult a = cuda->forward(weights, tokens, B, mode, &decCuda);
    ForwardResult b = cpu->forward(weights, tokens, B, mode, &decCpu);
    ASSERT_EQ(a.routed, b.routed) << "routing differs";
    EXPECT_EQ(decCuda, decCpu) << "causal decisions differ";
    const double err =
        relError(a.logits.data(), b.logits.data(), b.logits.size());
    EXPECT_LE(err, tol(1e-4));
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", err);
    RecordProperty(mode == RouteMode::TopK ? "topk_relative_error"
                                           : "causal_relative_error",
                   text);
  }
}

TEST_P(CudaVsCpu, ForwardSeesChangedWeights) {
  // The executor uploads the weights at every call and declares a new
  // parameters' version each time (modc_cuda_params_version), so a bf16
  // sm_90a package rounds its TMA weight copies again: a forward after the
  // weights changed in place matches the CPU on the new weights.
  const int64_t B = 2;
  const std::vector<int32_t> tokens = randomTokens(B * kSeqLen, kVocab, 6);
  TensorMap changing = weights;
  for (int round = 0; round < 2; ++round) {
    ForwardResult a = cuda->forward(changing, tokens, B, RouteMode::TopK);
    ForwardResult b = cpu->forward(changing, tokens, B, RouteMode::TopK);
    ASSERT_EQ(a.routed, b.routed) << "round " << round;
    EXPECT_LE(relError(a.logits.data(), b.logits.data(), b.logits.size()),
              tol(1e-4))
        << "round " << round;
    // New values in the same host tensors (and the same device slots).
    for (const ParamInfo &p : cpu->manifest().params) {
      Tensor &t = changing.get(p.name);
      float *v = t.f32();
      for (int64_t i = 0; i < t.numel(); ++i)
        v[i] = -0.75f * v[i];
    }
  }
}

TEST_P(CudaVsCpu, GradientsAndAdamWMatch) {
  const int64_t B = 2;
  std::vector<int32_t> tokens = randomTokens(B * (kSeqLen + 1), kVocab, 9);
  GradResult a = cuda->grad(weights, tokens, B);
  GradResult b = cpu->grad(weights, tokens, B);
  EXPECT_NEAR(a.losses.total, b.losses.total,
              tol(1e-4) * std::fabs(b.losses.total));
  EXPECT_NEAR(a.losses.ce, b.losses.ce, tol(1e-4) * std::fabs(b.losses.ce));
  EXPECT_NEAR(a.losses.aux, b.losses.aux,
              tol(1e-4) * std::fabs(b.losses.aux) + 1e-7);
  for (const ParamInfo &p : cpu->manifest().params) {
    const Tensor &ga = a.grads.get(p.name), &gb = b.grads.get(p.name);
    EXPECT_LE(relError(ga.f32(), gb.f32(), size_t(gb.numel())), tol(1e-4))
        << p.name;
  }
  TensorMap wa = weights, wb = weights;
  OptimizerState sa = OptimizerState::zeros(cpu->manifest()), sb = sa;
  AdamWConfig config;
  config.clipNorm = 0.5; // active: the norm of these gradients is larger
  double na = cuda->adamwStep(wa, b.grads, sa, 1e-2, config);
  double nb = cpu->adamwStep(wb, b.grads, sb, 1e-2, config);
  EXPECT_NEAR(na, nb, 1e-5 * nb);
  for (const ParamInfo &p : cpu->manifest().params)
    EXPECT_LE(relError(wa.get(p.name).f32(), wb.get(p.name).f32(),
                       size_t(wb.get(p.name).numel())),
              1e-6)
        << p.name;
}

// The loss-only entry (modc_eval) runs grad's forward kernels and loss
// kernels: on each target its losses are grad's bit for bit.
TEST_P(CudaVsCpu, EvalLossesAreGradLosses) {
  const int64_t B = 2;
  std::vector<int32_t> tokens = randomTokens(B * (kSeqLen + 1), kVocab, 13);
  for (const Package *p : {cuda.get(), cpu.get()}) {
    SCOPED_TRACE(p->manifest().target);
    ASSERT_TRUE(p->manifest().supportsEval);
    Losses e = p->eval(weights, tokens, B);
    Losses g = p->grad(weights, tokens, B).losses;
    // Both are floats widened to double: equal doubles, equal bits.
    EXPECT_EQ(e.total, g.total);
    EXPECT_EQ(e.ce, g.ce);
    EXPECT_EQ(e.aux, g.aux);
    EXPECT_GT(e.aux, 0.0); // every variant has a causal router
  }
  // The loss of causal routing (modc_eval_causal) agrees across targets.
  Losses a = cuda->eval(weights, tokens, B, RouteMode::Causal);
  Losses b = cpu->eval(weights, tokens, B, RouteMode::Causal);
  EXPECT_NEAR(a.ce, b.ce, tol(1e-4) * std::fabs(b.ce));
  EXPECT_EQ(a.total, a.ce);
}

TEST_P(CudaVsCpu, TrainingRunMatches) {
  // Four steps of modrt::train (batch, grad, clip, AdamW with the schedule)
  // on each package from the same weights: the CUDA executor is driven the
  // way `modrun train` drives it, call after call on the same buffers.
  std::string text;
  std::mt19937 gen(4);
  for (int i = 0; i < 4000; ++i)
    text += char(32 + gen() % 60); // bytes below the vocabulary (kVocab)
  Corpus corpus = Corpus::fromBytes(text, kSeqLen, 2, "random text");
  // Test processes run in parallel: each variant writes its own files.
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '_');
  const std::string stem = ::testing::TempDir() + "modc-gpu-test-" +
                           std::to_string(::getpid()) + "-" + name + "-";
  auto configFor = [&](const std::string &out) {
    TrainConfig config;
    config.steps = 4;
    config.lr = 3e-3;
    config.warmup = 2;
    config.outPath = stem + out;
    return config;
  };
  auto initialState = [&](const Package &p) {
    TrainState state;
    state.weights = weights;
    state.optimizer = OptimizerState::zeros(p.manifest());
    return state;
  };
  auto run = [&](const Package &p, const std::string &out) {
    TrainState state = initialState(p);
    std::vector<StepRecord> records;
    train(p, corpus, configFor(out), state,
          [&](const StepRecord &r) { records.push_back(r); });
    return std::make_pair(records, state);
  };
  const Package::DeviceTraffic before = cuda->deviceTraffic();
  auto [onCuda, cudaState] = run(*cuda, "cuda-train.ckpt");
  // Weights, gradients and moments go up once and come down for the one
  // checkpoint and at the end, not every step (4 steps would move 16x).
  uint64_t weightBytes = 0;
  for (const ParamInfo &p : cpu->manifest().params)
    weightBytes += uint64_t(weights.get(p.name).numel()) * sizeof(float);
  EXPECT_LT(cuda->deviceTraffic().toDevice - before.toDevice, 5 * weightBytes);
  EXPECT_LT(cuda->deviceTraffic().toHost - before.toHost, 5 * weightBytes);
  auto [onCpu, cpuState] = run(*cpu, "cpu-train.ckpt");
  ASSERT_EQ(onCuda.size(), 4u);
  ASSERT_EQ(onCpu.size(), 4u);
  for (size_t i = 0; i < onCpu.size(); ++i) {
    EXPECT_NEAR(onCuda[i].losses.total, onCpu[i].losses.total,
                tol(1e-4) * onCpu[i].losses.total)
        << "step " << i + 1;
    EXPECT_NEAR(onCuda[i].gradNorm, onCpu[i].gradNorm,
                tol(1e-4) * onCpu[i].gradNorm)
        << "step " << i + 1;
  }
  // The state handed back and the checkpoint written hold the device's
  // final values.
  Checkpoint saved = loadCheckpoint(stem + "cuda-train.ckpt", *cuda);
  std::remove((stem + "cuda-train.ckpt").c_str());
  std::remove((stem + "cpu-train.ckpt").c_str());
  // The weights are compared by what training changed in them. AdamW
  // divides by sqrt(v), so an element whose gradients are near zero moves by
  // about lr whatever their size, and 1e-5 differences in such gradients
  // grow in those updates (measured: at most 2.5e-4 relative on the
  // emulated package; the losses and gradient norms above hold at 1e-4).
  auto update = [&](const TensorMap &w, const std::string &name) {
    const Tensor &t = w.get(name), &w0 = weights.get(name);
    std::vector<float> d(size_t(t.numel()));
    for (size_t i = 0; i < d.size(); ++i)
      d[i] = t.f32()[i] - w0.f32()[i];
    return d;
  };
  for (const ParamInfo &p : cpu->manifest().params) {
    size_t n = size_t(cpuState.weights.get(p.name).numel());
    std::vector<float> want = update(cpuState.weights, p.name);
    EXPECT_LE(
        relError(update(cudaState.weights, p.name).data(), want.data(), n),
        tol(2e-3))
        << p.name;
    // The checkpoint holds the same values as the state handed back.
    EXPECT_EQ(std::memcmp(saved.weights.get(p.name).f32(),
                          cudaState.weights.get(p.name).f32(),
                          n * sizeof(float)),
              0)
        << "checkpoint " << p.name;
    EXPECT_LE(relError(cudaState.optimizer.v.get(p.name).f32(),
                       cpuState.optimizer.v.get(p.name).f32(), n),
              tol(1e-3))
        << "second moment " << p.name;
  }
  if (!HasFailure())
    return;
  // Say whether the runs routed the same tokens. A bf16 value within its
  // summation error of a rounding boundary rounds one way on each target
  // (see tol); where that breaks a near-tie at a top-k boundary, a routed
  // layer's gradients differ from then on by a token's share. The runs are
  // replayed a step at a time, and before each step both targets route the
  // step's batch with their own weights (forward's top-k, which grad's
  // forward kernels share).
  TrainState a = initialState(*cuda), b = initialState(*cpu);
  std::vector<int32_t> tokens;
  for (int64_t step = 1; step <= 4; ++step) {
    corpus.trainBatch(b.dataPosition, tokens);
    const int64_t rows = int64_t(tokens.size()) / (kSeqLen + 1);
    std::vector<int32_t> inputs;
    for (int64_t r = 0; r < rows; ++r)
      inputs.insert(inputs.end(), tokens.begin() + r * (kSeqLen + 1),
                    tokens.begin() + r * (kSeqLen + 1) + kSeqLen);
    ForwardResult fa = cuda->forward(a.weights, inputs, rows, RouteMode::TopK);
    ForwardResult fb = cpu->forward(b.weights, inputs, rows, RouteMode::TopK);
    for (size_t l = 0; l < fb.routed.size(); ++l) {
      std::string differ;
      for (size_t t = 0; t < fb.routed[l].size(); ++t)
        if (fa.routed[l][t] != fb.routed[l][t])
          differ += "; sequence " + std::to_string(t / kSeqLen) +
                    " position " + std::to_string(t % kSeqLen) +
                    (fb.routed[l][t] ? " routed on the CPU only"
                                     : " routed on CUDA only");
      std::printf("step %lld, routed layer %d: %s\n", (long long)step,
                  cpu->manifest().routedLayers[l],
                  differ.empty() ? "the same tokens"
                                 : ("differs" + differ).c_str());
    }
    TrainConfig ca = configFor("cuda-replay.ckpt"),
                cb = configFor("cpu-replay.ckpt");
    ca.stopAfter = cb.stopAfter = step;
    train(*cuda, corpus, ca, a, [](const StepRecord &) {});
    train(*cpu, corpus, cb, b, [](const StepRecord &) {});
  }
  std::remove((stem + "cuda-replay.ckpt").c_str());
  std::remove((stem + "cpu-replay.ckpt").c_str());
}

TEST_P(CudaVsCpu, DecodeAfterPrefillMatches) {
  const int64_t B = 3;
  std::vector<std::vector<int32_t>> prompts = {
      randomTokens(5, kVocab, 21), randomTokens(12, kVocab, 22), randomTokens(1, kVocab, 23)};
  DecodeSession a(*cuda, weights, B), b(*cpu, weights, B);
  a.prefill(prompts);
  b.prefill(prompts);
  EXPECT_LE(relError(a.logits().data(), b.logits().data(), b.logits().size()),
            tol(1e-4));
  std::vector<uint8_t> active = {1, 1, 0};
  uint64_t weightBytes = 0;
  for (const ParamInfo &p : cpu->manifest().params)
    weightBytes += uint64_t(weights.get(p.name).numel()) * sizeof(float);
  const uint64_t before = cuda->deviceTraffic().toDevice;
  for (int step = 0; step < 10; ++step) {
    std::vector<int32_t> next = randomTokens(B, kVocab, 100 + step);
    StepResult ra = a.step(next, active), rb = b.step(next, active);
    ASSERT_EQ(ra.routed, rb.routed) << "step " << step;
    EXPECT_LE(relError(ra.logits.data(), rb.logits.data(), rb.logits.size()),
              tol(1e-4))
        << "step " << step;
    active[2] = step % 2; // a sequence that pauses and resumes
  }
  // The session keeps the weights on the GPU: a step copies its tokens and
  // counts, not the weights.
  EXPECT_LT(cuda->deviceTraffic().toDevice - before, weightBytes / 10);
}

/// A CUDA package opened through its raw ABI (the runtime's own checks would
/// refuse bad input before the package sees it), with the weights on the
/// device.
struct RawCudaPackage {
  void *lib = nullptr;
  decltype(&modc_cuda_alloc) alloc = nullptr;
  decltype(&modc_cuda_copy) copy = nullptr;
  decltype(&modc_cuda_sync) sync = nullptr;
  decltype(&modc_last_error) lastError = nullptr;
  std::vector<const float *> params;

  void open(const Package &pkg, const TensorMap &weights) {
    lib = ::dlopen((pkg.directory() + "/libmodel.so").c_str(),
                   RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr);
    alloc = symbol<decltype(alloc)>("modc_cuda_alloc");
    copy = symbol<decltype(copy)>("modc_cuda_copy");
    sync = symbol<decltype(sync)>("modc_cuda_sync");
    lastError = symbol<decltype(lastError)>("modc_last_error");
    ASSERT_EQ(symbol<decltype(&modc_cuda_init)>("modc_cuda_init")(0), 0)
        << lastError();
    for (const ParamInfo &p : pkg.manifest().params) {
      const Tensor &t = weights.get(p.name);
      params.push_back(static_cast<const float *>(
          upload(t.f32(), uint64_t(t.numel()) * 4)));
    }
  }
  template <typename F> F symbol(const char *name) {
    return reinterpret_cast<F>(::dlsym(lib, name));
  }
  /// A device copy of `bytes` bytes at host (zeros where host is null).
  void *upload(const void *host, uint64_t bytes) {
    void *d = nullptr;
    EXPECT_EQ(alloc(bytes, &d), 0) << lastError();
    std::vector<char> zeros(host ? 0 : bytes, 0);
    EXPECT_EQ(copy(d, host ? host : zeros.data(), bytes, 0), 0) << lastError();
    return d;
  }
};

TEST_P(CudaVsCpu, DeviceReportsATokenOutsideTheVocabulary) {
  RawCudaPackage raw;
  ASSERT_NO_FATAL_FAILURE(raw.open(*cuda, weights));
  auto forward = raw.symbol<decltype(&modc_forward)>("modc_forward");
  auto wsBytes = raw.symbol<decltype(&modc_forward_workspace_bytes)>(
      "modc_forward_workspace_bytes");
  const Manifest &m = cuda->manifest();
  std::vector<int32_t> tokens = randomTokens(kSeqLen, kVocab, 3);
  tokens[7] = int32_t(kVocab); // one past the vocabulary
  modc_forward_args args{};
  args.batch = 1;
  args.seq_len = kSeqLen;
  args.mode = MODC_MODE_TOPK;
  args.tokens = static_cast<const int32_t *>(
      raw.upload(tokens.data(), tokens.size() * 4));
  args.params = raw.params.data();
  args.logits = static_cast<float *>(raw.upload(nullptr, kSeqLen * kVocab * 4));
  args.routed = static_cast<int32_t *>(
      raw.upload(nullptr, m.routedLayers.size() * kSeqLen * 4));
  args.workspace = raw.upload(nullptr, wsBytes(1));
  ASSERT_EQ(forward(&args), 0) << raw.lastError();
  EXPECT_EQ(raw.sync(), MODC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(raw.lastError()).find("sequence 0 position 7"),
            std::string::npos)
      << raw.lastError();
  EXPECT_EQ(raw.sync(), 0) << "the error is reported once";
}

TEST_P(CudaVsCpu, DeviceReportsAPositionOutsideTheContext) {
  RawCudaPackage raw;
  ASSERT_NO_FATAL_FAILURE(raw.open(*cuda, weights));
  auto decode = raw.symbol<decltype(&modc_decode)>("modc_decode");
  auto wsBytes = raw.symbol<decltype(&modc_decode_workspace_bytes)>(
      "modc_decode_workspace_bytes");
  auto cacheBytes =
      raw.symbol<decltype(&modc_kv_cache_bytes)>("modc_kv_cache_bytes");
  const Manifest &m = cuda->manifest();
  const int64_t B = 3, layers = int64_t(m.params.size()); // counts: ample
  const std::vector<int32_t> tokens = randomTokens(B, kVocab, 4);
  // Sequence 1 one past the context (active), sequence 2 far past it but
  // inactive (ignored).
  const std::vector<int32_t> positions = {3, int32_t(kSeqLen), 1000};
  const std::vector<uint8_t> active = {1, 1, 0};
  modc_decode_args args{};
  args.batch = B;
  args.tokens = static_cast<const int32_t *>(raw.upload(tokens.data(), B * 4));
  args.positions =
      static_cast<const int32_t *>(raw.upload(positions.data(), B * 4));
  args.active = static_cast<const uint8_t *>(raw.upload(active.data(), B));
  args.params = raw.params.data();
  args.logits = static_cast<float *>(raw.upload(nullptr, B * kVocab * 4));
  args.routed = static_cast<int32_t *>(
      raw.upload(nullptr, m.routedLayers.size() * B * 4));
  args.kv_cache = static_cast<float *>(raw.upload(nullptr, cacheBytes(B)));
  args.kv_counts =
      static_cast<int32_t *>(raw.upload(nullptr, layers * B * 4));
  // An MoE model's running expert counts ([n_moe_layers, B, E]).
  if (!m.moeLayers.empty())
    args.moe_counts = static_cast<int32_t *>(raw.upload(
        nullptr, int64_t(m.moeLayers.size()) * B * m.moeExperts * 4));
  args.workspace = raw.upload(nullptr, wsBytes(B));
  ASSERT_EQ(decode(&args), 0) << raw.lastError();
  EXPECT_EQ(raw.sync(), MODC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(raw.lastError())
                .find("position of sequence 1 is outside the context [0, " +
                      std::to_string(kSeqLen) + ")"),
            std::string::npos)
      << raw.lastError();
  EXPECT_EQ(raw.sync(), 0) << "the error is reported once";
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaVsCpu,
    ::testing::Values(Variant{"predictor", "swiglu", "emulated"},
                      Variant{"aux_loss", "gelu", "emulated"},
                      Variant{"predictor", "swiglu", "emulated", true},
                      Variant{"predictor", "swiglu", "sm_90a"},
                      Variant{"aux_loss", "gelu", "sm_90a"},
                      Variant{"predictor", "swiglu", "sm_90a", true},
                      Variant{"predictor", "swiglu", "sm_80"},
                      Variant{"aux_loss", "gelu", "sm_80", true},
                      // The selection and its gather split over blocks
                      // (emulated: CudaKernels.SelectGatherFused).
                      Variant{"aux_loss", "gelu", "sm_90a", true, 3},
                      // Every bf16 product that CUTLASS takes on CUTLASS,
                      // at every row count (the emulation cannot run its
                      // kernels: docs/cuda.md, "CUTLASS"): forward products
                      // and their epilogue trees (SwiGLU, GELU, residual
                      // adds, bf16 stores, the gated scatter in topk mode),
                      // the input gradients and the weight gradients: on
                      // sm_90a on a part of one SM (no split), on sm_80 on
                      // the whole part (its small weight gradients split,
                      // serial split-K). One SM also keeps to the smaller
                      // tiles, which these few rows take, so that
                      // prepare.sh compiles fewer kernels.
                      Variant{"predictor", "swiglu", "sm_90a", true, 0,
                              "cutlass cutlass-from=1 sm-count=1"},
                      Variant{"aux_loss", "gelu", "sm_90a", true, 0,
                              "cutlass cutlass-from=1 sm-count=1"},
                      Variant{"predictor", "swiglu", "sm_80", true, 0,
                              "cutlass cutlass-from=1"},
                      // An f32 model's products on CUTLASS 2.x's tf32x3
                      // kernels (sm_80's, run on sm_90a: three TF32
                      // products each), held to the f32 bounds.
                      Variant{"predictor", "swiglu", "sm_90a", false, 0,
                              "cutlass cutlass-from=1 sm-count=1"},
                      // MoE experts on CUTLASS: each group of their
                      // forward products as one grouped launch (on the
                      // emulation the tiles' grouped launch runs instead:
                      // cutlass-emulated.test).
                      Variant{"aux_loss", "swiglu", "sm_90a", true, 0,
                              "cutlass cutlass-from=1 sm-count=1", 4, true},
                      // The same on the whole part (the device's SM
                      // count): these small weight gradients do not fill
                      // it, so CUTLASS splits their reduction (split_k:
                      // stream-K's deterministic split for the attention's
                      // and routers' products, row chunks of the experts'
                      // groups and their sum).
                      Variant{"aux_loss", "swiglu", "sm_90a", true, 0,
                              "cutlass cutlass-from=1", 4, true},
                      // sm_80's gradient groups on CUTLASS 2.x's grouped
                      // GEMM (one SM: the weight gradients' groups fill
                      // it, so none keeps the tiles' split); its forward
                      // groups launch their members one by one.
                      Variant{"aux_loss", "swiglu", "sm_80", true, 0,
                              "cutlass cutlass-from=1 sm-count=1", 4, true},
                      // The same on the whole part: the weight gradients'
                      // groups split their members' rows into chunks,
                      // extra problems of that grouped GEMM, summed in
                      // chunk order (Sm80WgradGroupSplit).
                      Variant{"aux_loss", "swiglu", "sm_80", true, 0,
                              "cutlass cutlass-from=1", 4, true},
                      // sm_90a's TMA and wgmma attention forward, at head
                      // dim 64 (one head of d_model 64).
                      Variant{"predictor", "swiglu", "sm_90a", true, 0,
                              "tiles attention=wgmma", 1}),
    [](const ::testing::TestParamInfo<Variant> &info) {
      return std::string(info.param.router) + "_" + info.param.mlp + "_" +
             info.param.arch + (info.param.bf16 ? "_bf16" : "") +
             (info.param.gatherBlocks
                  ? "_gather" + std::to_string(info.param.gatherBlocks)
                  : "") +
             (info.param.gemms ? "_" + testName(info.param.gemmsName()) : "") +
             (info.param.heads != 4 ? "_h" + std::to_string(info.param.heads)
                                    : "") +
             (info.param.moe ? "_moe" : "");
    });

} // namespace
