//===- Comm.cpp - The single-process communicator and plugin loading -----===//
//
// The MPI and NCCL backends are plugins (CommMpi.cpp, CommNccl.cpp) that are
// loaded here by dlopen only when a job asks for them, so that modrt needs
// no MPI at run time (docs/distributed.md). The reduction of data-parallel
// training is written once, here, on top of the Communicator interface, so
// every backend sums the gradients in the same order.
//
//===----------------------------------------------------------------------===//
#include "modrt/Comm.h"
#include "modrt/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>

using namespace modrt;

//===----------------------------------------------------------------------===//
// The launcher's environment
//===----------------------------------------------------------------------===//

namespace {
/// Reads a non-negative int from environment variable `name`; empty when it
/// is unset, throws Error when it is set to something else.
std::optional<int> envInt(const char *name) {
  const char *v = std::getenv(name);
  if (!v)
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (!*v || *end || errno || x < 0 || x > (1 << 24))
    throw Error(fmt::format("environment variable {}=\"{}\" is not a rank or "
                            "process count",
                            name, v));
  return static_cast<int>(x);
}
} // namespace

std::optional<LaunchInfo> modrt::launchInfoFromEnvironment() {
  static const char *const pairs[][2] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"PMIX_RANK", "PMIX_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (const auto &pair : pairs) {
    std::optional<int> rank = envInt(pair[0]), size = envInt(pair[1]);
    if (!rank || !size)
      continue;
    if (*size < 1 || *rank >= *size)
      throw Error(fmt::format("environment variables {}={} and {}={} do not "
                              "describe a rank of the job",
                              pair[0], *rank, pair[1], *size));
    return LaunchInfo{*rank, *size, fmt::format("{}/{}", pair[0], pair[1])};
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// One process
//===----------------------------------------------------------------------===//

namespace {
class SingleComm final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char *backend() const override { return "single"; }
  void allGather(const void *in, size_t bytes, void *out,
                 const char *) override {
    if (bytes)
      std::memmove(out, in, bytes);
  }
  void allGatherV(const void *in, const std::vector<size_t> &counts, void *out,
                  const char *) override {
    if (counts.at(0))
      std::memmove(out, in, counts[0]);
  }
  void allToAllV(const void *in, const std::vector<size_t> &sendCounts,
                 const std::vector<size_t> &sendOffsets, void *out,
                 const std::vector<size_t> &,
                 const std::vector<size_t> &recvOffsets,
                 const char *) override {
    if (sendCounts.at(0))
      std::memmove(static_cast<char *>(out) + recvOffsets.at(0),
                   static_cast<const char *>(in) + sendOffsets.at(0),
                   sendCounts[0]);
  }
  [[noreturn]] void abort(int code) noexcept override { std::_Exit(code); }
};

/// The directory holding the code of modrt (the executable that links it
/// statically, or libmodrt.so).
std::string selfDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&launchInfoFromEnvironment), &info) &&
      info.dli_fname && *info.dli_fname) {
    std::error_code ec;
    std::filesystem::path p =
        std::filesystem::weakly_canonical(info.dli_fname, ec);
    if (ec)
      p = info.dli_fname;
    // An executable's own entry may name it by argv[0]; /proc is exact.
    if (p.filename() != "" && !p.has_parent_path())
      p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return p.parent_path().string();
  }
  return {};
}
} // namespace

std::unique_ptr<Communicator> Communicator::single() {
  return std::make_unique<SingleComm>();
}

std::vector<std::string>
modrt::commPluginCandidates(const std::string &backend) {
  std::string file = fmt::format("libmodrt_{}.so", backend);
  std::vector<std::string> out;
  if (const char *dir = std::getenv("MODRT_PLUGIN_DIR"); dir && *dir)
    out.push_back((std::filesystem::path(dir) / file).string());
  std::string self = selfDirectory();
  if (!self.empty()) {
    out.push_back((std::filesystem::path(self) / file).string());
    out.push_back((std::filesystem::path(self) / ".." / "lib" / file).string());
  }
  out.push_back(file); // the loader's search path
  return out;
}

std::unique_ptr<Communicator>
Communicator::connect(const CommOptions &options) {
  if (!(options.timeoutSeconds > 0))
    throw Error(fmt::format("communicator: the timeout must be > 0 seconds, "
                            "got {}",
                            options.timeoutSeconds));
  std::string backend = options.backend;
  std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
  if (backend == "auto")
    backend = launch && launch->size > 1 ? "mpi" : "single";
  if (backend == "single") {
    if (launch && launch->size > 1)
      throw Error(fmt::format(
          "this process is rank {} of {} ({}), but the single-process "
          "communicator was asked for; use --comm mpi (or auto), or launch "
          "one process",
          launch->rank, launch->size, launch->source));
    return single();
  }
  if (backend != "mpi" && backend != "nccl")
    throw Error(fmt::format("communicator backend must be auto, single, mpi "
                            "or nccl, got '{}'",
                            backend));
  std::vector<std::string> candidates = commPluginCandidates(backend);
  void *handle = nullptr;
  std::string tried, lastError;
  for (const std::string &path : candidates) {
    bool bare = path.find('/') == std::string::npos;
    std::error_code ec;
    if (!bare && !std::filesystem::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // RTLD_GLOBAL: MPI loads components of its own that resolve symbols
    // of libmpi, which must therefore be global.
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle)
      break;
    const char *e = ::dlerror();
    lastError = e ? e : "unknown error";
    if (!bare)
      throw Error(fmt::format("{}: cannot load the {} backend: {}", path,
                              backend, lastError));
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (!handle)
    throw Error(fmt::format(
        "the {} backend is not available: its plugin {} is not built or not "
        "found (looked for {}); build modrt where {} is installed "
        "(docs/distributed.md), or set MODRT_PLUGIN_DIR",
        backend, fmt::format("libmodrt_{}.so", backend), tried,
        backend == "mpi" ? "MPI (libopenmpi-dev)" : "NCCL and MPI"));
  auto create = reinterpret_cast<CommPluginCreate>(
      ::dlsym(handle, kCommPluginSymbol));
  if (!create)
    throw Error(fmt::format("the {} backend's plugin lacks {}; it is damaged "
                            "or from another build",
                            backend, kCommPluginSymbol));
  // The plugin stays loaded for the life of the process: MPI cannot be
  // initialised twice, and its atexit handlers point into it.
  char message[1024] = {0};
  Communicator *comm = create(&options, message, sizeof message);
  if (!comm)
    throw Error(message[0] ? std::string(message)
                           : fmt::format("the {} backend failed to start",
                                         backend));
  std::unique_ptr<Communicator> owned(comm);
  // A launcher whose ranks MPI does not see (srun without the PMI that MPI
  // was built with) would start N independent runs of one process each.
  if (launch && launch->size != owned->size())
    throw Error(fmt::format(
        "the launcher reports {} ranks ({}), but {} sees {}: MPI does not "
        "know this launcher (with srun, try --mpi=pmix or --mpi=pmi2)",
        launch->size, launch->source, backend, owned->size()));
  return owned;
}

//===----------------------------------------------------------------------===//
// The reduction
//===----------------------------------------------------------------------===//

BatchSplit BatchSplit::of(int64_t batch, int64_t parts) {
  if (parts < 1 || batch < parts)
    throw Error(fmt::format("a batch of {} sequences cannot be split into {} "
                            "parts of at least one sequence each; give "
                            "--batch >= {}",
                            batch, parts, parts));
  BatchSplit s;
  int64_t first = 0;
  for (int64_t r = 0; r < parts; ++r) {
    int64_t n = batch / parts + (r < batch % parts ? 1 : 0);
    s.counts.push_back(n);
    s.first.push_back(first);
    first += n;
  }
  return s;
}

void modrt::accumulatePart(const float *part, int64_t sequences, double *acc,
                           size_t count) {
  const double n = static_cast<double>(sequences);
  for (size_t i = 0; i < count; ++i)
    acc[i] += static_cast<double>(part[i]) * n;
}

void modrt::finishAccumulation(const double *acc, int64_t batch, float *out,
                               size_t count) {
  const double n = static_cast<double>(batch);
  for (size_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(acc[i] / n);
}

void modrt::reduceGradients(Communicator &comm, const BatchSplit &split,
                            std::vector<float> &flat) {
  const size_t ranks = static_cast<size_t>(comm.size());
  if (split.counts.size() != ranks)
    throw Error(fmt::format("reduceGradients: the batch is split into {} "
                            "parts for {} ranks",
                            split.counts.size(), ranks));
  const size_t n = flat.size(), me = static_cast<size_t>(comm.rank());
  int64_t batch = 0;
  for (int64_t c : split.counts)
    batch += c;
  // Slice r of the elements is reduced by rank r.
  std::vector<size_t> sliceFirst(ranks), sliceSize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    sliceFirst[r] = n * r / ranks;
    sliceSize[r] = n * (r + 1) / ranks - sliceFirst[r];
  }
  const size_t mine = sliceSize[me];
  std::vector<size_t> sendCounts(ranks), sendOffsets(ranks), recvCounts(ranks),
      recvOffsets(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    sendCounts[r] = sliceSize[r] * sizeof(float);
    sendOffsets[r] = sliceFirst[r] * sizeof(float);
    recvCounts[r] = mine * sizeof(float);
    recvOffsets[r] = r * mine * sizeof(float);
  }
  std::vector<float> blocks(ranks * mine);
  comm.allToAllV(flat.data(), sendCounts, sendOffsets, blocks.data(),
                 recvCounts, recvOffsets, "the gradient reduction");
  std::vector<double> acc(mine, 0.0);
  for (size_t r = 0; r < ranks; ++r)
    accumulatePart(blocks.data() + r * mine, split.counts[r], acc.data(),
                   mine);
  std::vector<float> reduced(mine);
  finishAccumulation(acc.data(), batch, reduced.data(), mine);
  std::vector<size_t> gatherCounts(ranks);
  for (size_t r = 0; r < ranks; ++r)
    gatherCounts[r] = sliceSize[r] * sizeof(float);
  comm.allGatherV(reduced.data(), gatherCounts, flat.data(),
                  "the gradient all-gather");
}
