// Driver of train-graph-emulated.test: runs a scripted training run on a
// CUDA package through its C ABI, either as modc_grad then modc_adamw
// ("calls", the reference) or as modc_train_step ("step"), and prints every
// step's losses, gradient norm and a hash of the parameters and moments
// (floats in hex: the bits). The script changes what a training graph bakes
// in: the clip norm, the batch, the buffers, the weights (a new parameters'
// version), and a NaN weight that no update may pass on.
//
//   driver PACKAGE_DIR SIZES_FILE calls|step
#include "modrt/abi.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

namespace {
#define SYM(name) decltype(&::name) name = nullptr
struct Package {
  SYM(modc_cuda_init);
  SYM(modc_cuda_alloc);
  SYM(modc_cuda_copy);
  SYM(modc_cuda_memset);
  SYM(modc_cuda_sync);
  SYM(modc_cuda_params_version);
  SYM(modc_grad);
  SYM(modc_grad_workspace_bytes);
  SYM(modc_adamw);
  SYM(modc_train_step);
  SYM(modc_last_error);
};
#undef SYM

Package pkg;

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "driver: %s\n", what.c_str());
  std::exit(1);
}

void check(int32_t status, const char *what) {
  if (status != 0)
    die(std::string(what) + ": " + pkg.modc_last_error());
}

void *load(void *lib, const char *name) {
  void *sym = dlsym(lib, name);
  if (!sym)
    die(std::string("the package does not export ") + name);
  return sym;
}

/// A deterministic stream of uniform floats in [-1, 1).
struct Random {
  uint64_t state;
  float next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int32_t(state >> 33) % 65536) / 65536.0f;
  }
};

void *deviceAlloc(uint64_t bytes) {
  void *p = nullptr;
  check(pkg.modc_cuda_alloc(bytes, &p), "modc_cuda_alloc");
  return p;
}

void toDevice(void *dst, const void *src, uint64_t bytes) {
  check(pkg.modc_cuda_copy(dst, src, bytes, 0), "modc_cuda_copy");
}

std::vector<float> fromDevice(const float *src, int64_t n) {
  std::vector<float> out(n);
  check(pkg.modc_cuda_copy(out.data(), src, n * sizeof(float), 1),
        "modc_cuda_copy");
  return out;
}

/// One set of device buffers of a training run.
struct Buffers {
  std::vector<float *> p, g, m, v;
  float *losses = nullptr, *norm = nullptr;
  int32_t *tokens = nullptr;
  void *workspace = nullptr;
};

Buffers allocate(const std::vector<int64_t> &sizes, int64_t maxBatch,
                 int64_t seqLen) {
  Buffers b;
  for (int64_t n : sizes) {
    const uint64_t bytes = std::max<int64_t>(n, 1) * sizeof(float);
    b.p.push_back(static_cast<float *>(deviceAlloc(bytes)));
    b.g.push_back(static_cast<float *>(deviceAlloc(bytes)));
    b.m.push_back(static_cast<float *>(deviceAlloc(bytes)));
    b.v.push_back(static_cast<float *>(deviceAlloc(bytes)));
  }
  b.losses = static_cast<float *>(deviceAlloc(4 * sizeof(float)));
  b.norm = static_cast<float *>(deviceAlloc(sizeof(float)));
  b.tokens = static_cast<int32_t *>(
      deviceAlloc(maxBatch * (seqLen + 1) * sizeof(int32_t)));
  b.workspace = deviceAlloc(pkg.modc_grad_workspace_bytes(maxBatch));
  return b;
}

/// FNV-1a over the bytes of every tensor of a table.
uint64_t hashTable(const std::vector<float *> &table,
                   const std::vector<int64_t> &sizes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < table.size(); ++i) {
    std::vector<float> host = fromDevice(table[i], sizes[i]);
    const unsigned char *bytes =
        reinterpret_cast<const unsigned char *>(host.data());
    for (size_t k = 0; k < host.size() * sizeof(float); ++k) {
      h ^= bytes[k];
      h *= 0x100000001b3ull;
    }
  }
  return h;
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5)
    die("usage: driver PACKAGE_DIR SIZES_FILE calls|step [STEPS]");
  const std::string mode = argv[3];
  if (mode != "calls" && mode != "step")
    die("mode must be calls or step");
  // The first STEPS of the 16 (default all): a shorter run checks what the
  // first steps already show (capture, then replay).
  const int steps = argc == 5 ? std::atoi(argv[4]) : 16;
  if (steps < 1 || steps > 16)
    die("STEPS must be 1 to 16");
  void *lib = dlopen((std::string(argv[1]) + "/libmodel.so").c_str(),
                     RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    die(dlerror());
#define LOAD(name)                                                             \
  pkg.name = reinterpret_cast<decltype(pkg.name)>(load(lib, #name))
  LOAD(modc_cuda_init);
  LOAD(modc_cuda_alloc);
  LOAD(modc_cuda_copy);
  LOAD(modc_cuda_memset);
  LOAD(modc_cuda_sync);
  LOAD(modc_cuda_params_version);
  LOAD(modc_grad);
  LOAD(modc_grad_workspace_bytes);
  LOAD(modc_adamw);
  LOAD(modc_train_step);
  LOAD(modc_last_error);
#undef LOAD
  // The sizes file: seq_len, vocab_size, then each parameter's elements.
  FILE *f = std::fopen(argv[2], "r");
  if (!f)
    die(std::string("cannot read ") + argv[2]);
  int64_t seqLen = 0, vocab = 0, n = 0;
  if (std::fscanf(f, "%ld %ld", &seqLen, &vocab) != 2)
    die("bad sizes file");
  std::vector<int64_t> sizes;
  while (std::fscanf(f, "%ld", &n) == 1)
    sizes.push_back(n);
  std::fclose(f);
  check(pkg.modc_cuda_init(0), "modc_cuda_init");

  const int64_t maxBatch = 2;
  Buffers b = allocate(sizes, maxBatch, seqLen);
  // Fresh random weights (never zeros), zero moments.
  Random rng{12345};
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<float> w(sizes[i]);
    for (float &x : w)
      x = 0.08f * rng.next();
    toDevice(b.p[i], w.data(), w.size() * sizeof(float));
    check(pkg.modc_cuda_memset(b.m[i], 0, sizes[i] * sizeof(float)), "memset");
    check(pkg.modc_cuda_memset(b.v[i], 0, sizes[i] * sizeof(float)), "memset");
  }
  uint64_t version = 1;
  check(pkg.modc_cuda_params_version(version), "modc_cuda_params_version");

  float clip = 1.0f;
  int64_t batch = 2;
  int64_t adamStep = 0;
  uint64_t lastHash = 0;
  float saved = 0.0f;
  for (int step = 1; step <= steps; ++step) {
    // What changes before this step (the graph's re-captures and replays
    // are in the .test file).
    if (step == 4)
      clip = 0.5f;
    if (step == 6)
      batch = 1;
    if (step == 8)
      batch = 2;
    if (step == 10) {
      // New buffers holding the same state.
      Buffers next = allocate(sizes, maxBatch, seqLen);
      for (size_t i = 0; i < sizes.size(); ++i)
        for (auto [to, from] :
             {std::pair{next.p[i], b.p[i]}, std::pair{next.m[i], b.m[i]},
              std::pair{next.v[i], b.v[i]}})
          check(pkg.modc_cuda_copy(to, from, sizes[i] * sizeof(float), 2),
                "modc_cuda_copy");
      b = next;
    }
    if (step == 12) {
      // The caller writes new weights into the same buffers.
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<float> w = fromDevice(b.p[i], sizes[i]);
        for (float &x : w)
          x += 0.01f * rng.next();
        toDevice(b.p[i], w.data(), w.size() * sizeof(float));
      }
      check(pkg.modc_cuda_params_version(++version), "params version");
    }
    if (step == 14 || step == 15) {
      // A NaN in the last parameter (the final norm's weight) at step 14,
      // taken out again before step 15.
      float *last = b.p.back() + sizes.back() - 1;
      float value = std::nanf("");
      if (step == 14)
        saved = fromDevice(last, 1)[0];
      else
        value = saved;
      toDevice(last, &value, sizeof(float));
      check(pkg.modc_cuda_params_version(++version), "params version");
    }
    std::vector<int32_t> tokens(batch * (seqLen + 1));
    for (int32_t &t : tokens)
      t = int32_t(uint32_t(rng.next() * 32768.0f + 32768.0f) % vocab);
    toDevice(b.tokens, tokens.data(), tokens.size() * sizeof(int32_t));

    modc_grad_args g{};
    g.batch = batch;
    g.seq_len = seqLen;
    g.tokens = b.tokens;
    std::vector<const float *> params(b.p.begin(), b.p.end());
    g.params = params.data();
    g.grads = b.g.data();
    g.losses = b.losses;
    g.workspace = b.workspace;
    modc_adamw_args a{};
    a.params = b.p.data();
    std::vector<const float *> grads(b.g.begin(), b.g.end());
    a.grads = grads.data();
    a.m = b.m.data();
    a.v = b.v.data();
    a.step = adamStep + 1;
    // A new learning rate at every step: replays must not bake it in.
    a.lr = 0.01f * (1.0f - float(step) / 20.0f);
    a.beta1 = 0.9f;
    a.beta2 = 0.95f;
    a.eps = 1e-8f;
    a.weight_decay = 0.1f;
    a.clip_norm = clip;
    a.grad_norm = b.norm;
    if (mode == "calls") {
      // The reference: two calls, the update only after finite losses (as
      // modrt::train).
      check(pkg.modc_grad(&g), "modc_grad");
      check(pkg.modc_cuda_sync(), "modc_grad");
      std::vector<float> l = fromDevice(b.losses, 4);
      bool finite = true;
      for (float x : l)
        finite = finite && std::isfinite(x);
      if (finite)
        check(pkg.modc_adamw(&a), "modc_adamw");
      else
        check(pkg.modc_cuda_memset(b.norm, 0xff, sizeof(float)), "memset");
    } else {
      modc_train_step_args t{g, a};
      check(pkg.modc_train_step(&t), "modc_train_step");
    }
    check(pkg.modc_cuda_sync(), "sync");
    std::vector<float> l = fromDevice(b.losses, 4);
    const float norm = fromDevice(b.norm, 1)[0];
    const bool updated = std::isfinite(l[0]) && std::isfinite(norm);
    if (updated)
      ++adamStep;
    const uint64_t hp = hashTable(b.p, sizes), hm = hashTable(b.m, sizes),
                   hv = hashTable(b.v, sizes);
    // The norm of a refused step is left out: the reference computes none.
    std::printf("step %d batch %ld losses %a %a %a %a norm %a params %016lx "
                "m %016lx v %016lx\n",
                step, batch, l[0], l[1], l[2], l[3], updated ? norm : 0.0f, hp,
                hm, hv);
    // The moments change at every step that updates, and at none other
    // (this test must see the steps happen).
    if ((hm == lastHash) == updated)
      die("step " + std::to_string(step) +
          (updated ? ": the moments did not change"
                   : ": a refused step changed the moments"));
    lastHash = hm;
    if ((step == 14) == updated)
      die("step " + std::to_string(step) + " should " +
          (updated ? "not " : "") + "have updated");
  }
  return 0;
}
