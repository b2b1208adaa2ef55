//===- CudaExecutor.cpp - Running CUDA packages from host buffers ---------===//

#include "CudaExecutor.h"
#include "modrt/Error.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <dlfcn.h>

using namespace modrt;

namespace {
enum CopyKind : int32_t { HostToDevice = 0, DeviceToHost = 1 };

template <typename T> void resolveSymbol(void *handle, const std::string &dir,
                                         T &slot, const char *name) {
  void *sym = ::dlsym(handle, name);
  if (!sym)
    throw Error(fmt::format("{}: not a CUDA modc package: libmodel.so does not "
                            "export {}",
                            dir, name));
  slot = reinterpret_cast<T>(sym);
}
} // namespace

CudaExecutor::CudaExecutor(void *handle, std::string dir,
                           const Manifest &manifest, EntryPoints entries)
    : dir(std::move(dir)), manifest(manifest), entries(entries) {
  resolveSymbol(handle, this->dir, api.init, "modc_cuda_init");
  resolveSymbol(handle, this->dir, api.arch, "modc_cuda_arch");
  resolveSymbol(handle, this->dir, api.alloc, "modc_cuda_alloc");
  resolveSymbol(handle, this->dir, api.free, "modc_cuda_free");
  resolveSymbol(handle, this->dir, api.copy, "modc_cuda_copy");
  resolveSymbol(handle, this->dir, api.memset, "modc_cuda_memset");
  resolveSymbol(handle, this->dir, api.sync, "modc_cuda_sync");
  api.paramsVersion = reinterpret_cast<decltype(api.paramsVersion)>(
      ::dlsym(handle, "modc_cuda_params_version"));
  api.trainStep = reinterpret_cast<decltype(api.trainStep)>(
      ::dlsym(handle, "modc_train_step"));
}

CudaExecutor::~CudaExecutor() {
  if (!initialised)
    return;
  api.sync();
  for (auto &[role, s] : slots)
    if (s.device)
      api.free(s.device);
}

std::string CudaExecutor::arch() const { return api.arch(); }

void CudaExecutor::check(int32_t status, const char *what) {
  if (status == MODC_OK)
    return;
  const char *msg = entries.lastError();
  throw Error(fmt::format("{}: {} failed (status {}): {}", dir, what, status,
                          msg && *msg ? msg : "no message"));
}

void CudaExecutor::ready() {
  if (initialised)
    return;
  // MODC_CUDA_DEVICE picks the GPU (default 0), as CUDA_VISIBLE_DEVICES would.
  int32_t device = 0;
  if (const char *env = std::getenv("MODC_CUDA_DEVICE")) {
    char *end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (!*env || *end || v < 0 || v > 1024)
      throw Error(fmt::format("MODC_CUDA_DEVICE must be a device number, got "
                              "\"{}\"",
                              env));
    device = static_cast<int32_t>(v);
  }
  check(api.init(device), "opening the GPU");
  initialised = true;
}

void *CudaExecutor::slot(const std::string &role, uint64_t bytes) {
  Slot &s = slots[role];
  if (s.capacity < bytes || !s.device) {
    if (s.device)
      check(api.free(s.device), "freeing device memory");
    s = Slot{};
    uint64_t want = std::max<uint64_t>(bytes, 64);
    check(api.alloc(want, &s.device), "allocating device memory");
    s.capacity = want;
  }
  return s.device;
}

void *CudaExecutor::upload(const std::string &role, const void *host,
                           uint64_t bytes) {
  void *device = slot(role, bytes);
  copyToDevice(device, host, bytes);
  return device;
}

void CudaExecutor::copyToDevice(void *device, const void *host,
                                uint64_t bytes) {
  if (host && bytes) {
    check(api.copy(device, host, bytes, HostToDevice), "copying to the GPU");
    copiedToDevice += bytes;
  }
}

void CudaExecutor::download(void *host, const void *device, uint64_t bytes) {
  if (host && bytes) {
    check(api.copy(host, device, bytes, DeviceToHost), "copying from the GPU");
    copiedToHost += bytes;
  }
}

uint64_t CudaExecutor::paramBytes(size_t i) const {
  uint64_t n = sizeof(float);
  for (int64_t d : manifest.params[i].shape)
    n *= static_cast<uint64_t>(d);
  return n;
}

const std::vector<float *> &
CudaExecutor::paramSlots(const std::string &table) {
  std::vector<float *> &out = tables[table];
  // A param's size never changes: its slot, once made, is final.
  if (out.size() == manifest.params.size())
    return out;
  out.resize(manifest.params.size());
  for (size_t i = 0; i < manifest.params.size(); ++i)
    out[i] = static_cast<float *>(
        slot(fmt::format("{}.{}", table, i), paramBytes(i)));
  return out;
}

void CudaExecutor::pin(const std::vector<const float *> &table) {
  ++resident[table];
}

void CudaExecutor::unpin(const std::vector<const float *> &table) {
  auto it = resident.find(table);
  if (it == resident.end() || --it->second > 0)
    return;
  syncHost(table);
  resident.erase(it);
  for (auto &[name, m] : mirrors)
    if (m.host == table)
      m = Mirror{};
}

void CudaExecutor::syncHost(const std::vector<const float *> &table) {
  for (auto &[name, m] : mirrors) {
    if (m.host != table || !m.newer)
      continue;
    const std::vector<float *> &device = tables.at(name);
    // The host tensors were handed to grad/adamwStep as outputs: writable.
    for (size_t i = 0; i < device.size(); ++i)
      download(const_cast<float *>(m.host[i]), device[i], paramBytes(i));
    m.newer = false;
  }
}

void CudaExecutor::flushBefore(const std::string &table,
                               const std::vector<const float *> &next) {
  const Mirror &m = mirrors[table];
  if (m.newer && m.host != next)
    syncHost(m.host);
}

void CudaExecutor::deliver(const std::string &table,
                           const std::vector<float *> &device,
                           float *const *host) {
  std::vector<const float *> k = key(host);
  if (resident.count(k)) {
    mirrors[table] = {std::move(k), /*newer=*/true};
    return;
  }
  for (size_t i = 0; i < device.size(); ++i)
    download(host[i], device[i], paramBytes(i));
  mirrors[table] = Mirror{};
}

const std::vector<float *> &
CudaExecutor::uploadParams(const std::string &table, const float *const *host) {
  const std::vector<float *> &out = paramSlots(table);
  std::vector<const float *> k = key(host);
  bool pinned = !k.empty() && resident.count(k);
  if (pinned && mirrors[table].host == k)
    return out; // pinned and unchanged on the host since it was copied
  flushBefore(table, k);
  mirrors[table] = Mirror{};
  for (size_t i = 0; i < out.size(); ++i)
    copyToDevice(out[i], host[i], paramBytes(i));
  // New values in the device parameters: a new version, so that the
  // package rounds its bf16 copies of them again (it reuses them while the
  // version stays, e.g. for pinned weights).
  if (table == "params" && api.paramsVersion)
    check(api.paramsVersion(++paramsVersion), "declaring the parameters");
  if (pinned)
    mirrors[table].host = std::move(k);
  return out;
}

void CudaExecutor::forward(const modc_forward_args &h, uint64_t workspaceBytes) {
  ready();
  const uint64_t B = static_cast<uint64_t>(h.batch);
  const uint64_t S = static_cast<uint64_t>(manifest.seqLen);
  const uint64_t V = static_cast<uint64_t>(manifest.vocabSize);
  const uint64_t nRouted = manifest.routedLayers.size();
  const uint64_t nLayers = manifest.layers.size();
  const std::vector<float *> &params = uploadParams("params", h.params);
  modc_forward_args d = h;
  d.params = params.data();
  d.tokens = static_cast<const int32_t *>(
      upload("tokens", h.tokens, B * S * sizeof(int32_t)));
  d.logits = static_cast<float *>(slot("logits", B * S * V * sizeof(float)));
  d.routed = static_cast<int32_t *>(
      slot("routed", std::max<uint64_t>(nRouted, 1) * B * S * sizeof(int32_t)));
  d.workspace = slot("workspace", workspaceBytes);
  if (h.causal_decisions)
    d.causal_decisions = static_cast<int32_t *>(
        slot("decisions", nRouted * B * S * sizeof(int32_t)));
  const uint64_t nMoe = manifest.moeLayers.size();
  if (h.moe_decisions)
    d.moe_decisions = static_cast<int32_t *>(
        slot("moe_decisions",
             std::max<uint64_t>(nMoe, 1) * B * S * sizeof(int32_t)));
  if (h.kv_cache) {
    // The prefill fills the cache the decode steps then read on the device.
    d.kv_cache = static_cast<float *>(
        slot(fmt::format("kv@{}", static_cast<const void *>(h.kv_cache)),
             B * manifest.kvCacheBytesPerSequence));
    d.kv_counts = static_cast<int32_t *>(
        upload("kv_counts", h.kv_counts, nLayers * B * sizeof(int32_t)));
    d.prefill_lengths = static_cast<const int32_t *>(
        upload("prefill_lengths", h.prefill_lengths, B * sizeof(int32_t)));
  }
  const uint64_t moeCounts = manifest.moeLayers.size() * B *
                             static_cast<uint64_t>(manifest.moeExperts);
  if (h.kv_cache && h.moe_counts && moeCounts)
    d.moe_counts = static_cast<int32_t *>(
        upload("moe_counts", h.moe_counts, moeCounts * sizeof(int32_t)));
  check(entries.forward(&d), "forward");
  check(api.sync(), "forward");
  download(h.logits, d.logits, B * S * V * sizeof(float));
  if (nRouted)
    download(h.routed, d.routed, nRouted * B * S * sizeof(int32_t));
  if (h.causal_decisions)
    download(h.causal_decisions, d.causal_decisions,
             nRouted * B * S * sizeof(int32_t));
  if (h.moe_decisions && nMoe)
    download(h.moe_decisions, d.moe_decisions, nMoe * B * S * sizeof(int32_t));
  if (h.kv_cache)
    download(h.kv_counts, d.kv_counts, nLayers * B * sizeof(int32_t));
  if (h.kv_cache && h.moe_counts && moeCounts)
    download(h.moe_counts, d.moe_counts, moeCounts * sizeof(int32_t));
}

void CudaExecutor::grad(const modc_grad_args &h, uint64_t workspaceBytes) {
  ready();
  const uint64_t B = static_cast<uint64_t>(h.batch);
  const uint64_t S = static_cast<uint64_t>(manifest.seqLen);
  const std::vector<float *> &params = uploadParams("params", h.params);
  const std::vector<float *> &grads = paramSlots("grads");
  flushBefore("grads", key(h.grads)); // the entry overwrites them
  modc_grad_args d = h;
  d.params = params.data();
  d.grads = grads.data();
  d.tokens = static_cast<const int32_t *>(
      upload("tokens", h.tokens, B * (S + 1) * sizeof(int32_t)));
  d.losses = static_cast<float *>(slot("losses", 4 * sizeof(float)));
  d.workspace = slot("workspace", workspaceBytes);
  check(entries.grad(&d), "grad");
  check(api.sync(), "grad");
  download(h.losses, d.losses, 4 * sizeof(float));
  deliver("grads", grads, h.grads);
}

void CudaExecutor::eval(const modc_eval_args &h, uint64_t workspaceBytes,
                        bool causal) {
  ready();
  const uint64_t B = static_cast<uint64_t>(h.batch);
  const uint64_t S = static_cast<uint64_t>(manifest.seqLen);
  const std::vector<float *> &params = uploadParams("params", h.params);
  modc_eval_args d = h;
  d.params = params.data();
  d.tokens = static_cast<const int32_t *>(
      upload("tokens", h.tokens, B * (S + 1) * sizeof(int32_t)));
  d.losses = static_cast<float *>(slot("losses", 4 * sizeof(float)));
  d.workspace = slot("workspace", workspaceBytes);
  const char *what = causal ? "eval_causal" : "eval";
  check((causal ? entries.evalCausal : entries.eval)(&d), what);
  check(api.sync(), what);
  download(h.losses, d.losses, 4 * sizeof(float));
}

void CudaExecutor::adamw(const modc_adamw_args &h) {
  ready();
  const std::vector<float *> &params = uploadParams("params", h.params);
  const std::vector<float *> &grads = uploadParams("grads", h.grads);
  const std::vector<float *> &m = uploadParams("adam_m", h.m);
  const std::vector<float *> &v = uploadParams("adam_v", h.v);
  modc_adamw_args d = h;
  d.params = params.data();
  d.grads = grads.data();
  d.m = m.data();
  d.v = v.data();
  d.grad_norm = static_cast<float *>(slot("grad_norm", sizeof(float)));
  check(entries.adamw(&d), "adamw");
  // The package enqueues the step without waiting. The norm is reported
  // even when it is not finite; then the device refused the update and
  // every copy keeps its values, which the caller learns from this error.
  download(h.grad_norm, d.grad_norm, sizeof(float));
  check(api.sync(), "adamw");
  if (!std::isfinite(*h.grad_norm))
    throw Error("adamw failed: the gradient norm is not finite");
  deliver("params", params, h.params);
  deliver("adam_m", m, h.m);
  deliver("adam_v", v, h.v);
}

void CudaExecutor::trainStep(const modc_grad_args &hg,
                             const modc_adamw_args &ha,
                             uint64_t workspaceBytes) {
  ready();
  const uint64_t B = static_cast<uint64_t>(hg.batch);
  const uint64_t S = static_cast<uint64_t>(manifest.seqLen);
  // The same device tables and slots as grad and adamw use, so that the
  // pointers repeat from step to step and the package replays its graph.
  const std::vector<float *> &params = uploadParams("params", hg.params);
  const std::vector<float *> &grads = paramSlots("grads");
  flushBefore("grads", key(hg.grads)); // the step overwrites them
  const std::vector<float *> &m = uploadParams("adam_m", ha.m);
  const std::vector<float *> &v = uploadParams("adam_v", ha.v);
  modc_train_step_args d{};
  d.grad = hg;
  d.grad.params = params.data();
  d.grad.grads = grads.data();
  d.grad.tokens = static_cast<const int32_t *>(
      upload("tokens", hg.tokens, B * (S + 1) * sizeof(int32_t)));
  d.grad.losses = static_cast<float *>(slot("losses", 4 * sizeof(float)));
  d.grad.workspace = slot("workspace", workspaceBytes);
  d.adamw = ha;
  d.adamw.params = params.data();
  d.adamw.grads = grads.data();
  d.adamw.m = m.data();
  d.adamw.v = v.data();
  d.adamw.grad_norm = static_cast<float *>(slot("grad_norm", sizeof(float)));
  check(api.trainStep(&d), "train_step");
  // Host reads only after the step: the copies wait for it.
  download(hg.losses, d.grad.losses, 4 * sizeof(float));
  download(ha.grad_norm, d.adamw.grad_norm, sizeof(float));
  check(api.sync(), "train_step");
  deliver("grads", grads, hg.grads);
  deliver("params", params, ha.params);
  deliver("adam_m", m, ha.m);
  deliver("adam_v", v, ha.v);
}

void CudaExecutor::decode(const modc_decode_args &h, uint64_t workspaceBytes,
                          uint64_t kvCacheBytes) {
  ready();
  const uint64_t B = static_cast<uint64_t>(h.batch);
  const uint64_t V = static_cast<uint64_t>(manifest.vocabSize);
  const uint64_t nRouted = manifest.routedLayers.size();
  const uint64_t nLayers = manifest.layers.size();
  const std::vector<float *> &params = uploadParams("params", h.params);
  modc_decode_args d = h;
  d.params = params.data();
  d.tokens = static_cast<const int32_t *>(
      upload("decode.tokens", h.tokens, B * sizeof(int32_t)));
  d.positions = static_cast<const int32_t *>(
      upload("decode.positions", h.positions, B * sizeof(int32_t)));
  d.active = static_cast<const uint8_t *>(
      upload("decode.active", h.active, B * sizeof(uint8_t)));
  d.logits = static_cast<float *>(slot("decode.logits", B * V * sizeof(float)));
  d.routed = static_cast<int32_t *>(
      slot("decode.routed", std::max<uint64_t>(nRouted, 1) * B * sizeof(int32_t)));
  d.kv_cache = static_cast<float *>(slot(
      fmt::format("kv@{}", static_cast<const void *>(h.kv_cache)), kvCacheBytes));
  d.kv_counts = static_cast<int32_t *>(
      upload("kv_counts", h.kv_counts, nLayers * B * sizeof(int32_t)));
  // MoE layers' running expert counts (docs/runtime.md).
  const uint64_t moeCounts = manifest.moeLayers.size() * B *
                             static_cast<uint64_t>(manifest.moeExperts);
  if (h.moe_counts && moeCounts)
    d.moe_counts = static_cast<int32_t *>(
        upload("moe_counts", h.moe_counts, moeCounts * sizeof(int32_t)));
  d.workspace = slot("decode.workspace", workspaceBytes);
  check(entries.decode(&d), "decode");
  check(api.sync(), "decode");
  download(h.logits, d.logits, B * V * sizeof(float));
  if (nRouted)
    download(h.routed, d.routed, nRouted * B * sizeof(int32_t));
  download(h.kv_counts, d.kv_counts, nLayers * B * sizeof(int32_t));
  if (h.moe_counts && moeCounts)
    download(h.moe_counts, d.moe_counts, moeCounts * sizeof(int32_t));
}
