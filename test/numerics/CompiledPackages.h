//===- CompiledPackages.h - Compiling and opening test packages -*- C++ -*-===//
//
// Shared by the numerics tests: every configuration is compiled by running
// the real `modc` binary and opened with the runtime. Packages are cached on
// disk under NUMERICS_CACHE_DIR, keyed on the model description and the modc
// binary's size and modification time, so each configuration is compiled
// once even though ctest runs every test in its own process.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_NUMERICS_COMPILEDPACKAGES_H
#define MODC_TEST_NUMERICS_COMPILEDPACKAGES_H

#include "ReferenceModel.h"

#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace modtest {

//===----------------------------------------------------------------------===//
// Compiling and caching packages
//===----------------------------------------------------------------------===//

/// FNV-1a, enough to name cache entries.
inline uint64_t fnv1a(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

inline std::string readFile(const std::filesystem::path &p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Compiles `desc` with modc (or reuses the cached package) and returns the
/// package directory. Fails the current test with modc's output on error.
inline std::string compiledPackageDir(const nlohmann::json &desc) {
  std::error_code ec;
  std::filesystem::path modc(MODC_BINARY);
  std::string stamp = desc.dump() + "|" +
                      std::to_string(std::filesystem::file_size(modc, ec)) +
                      "|" +
                      std::to_string(std::filesystem::last_write_time(modc, ec)
                                         .time_since_epoch()
                                         .count());
  char key[32];
  std::snprintf(key, sizeof(key), "%016llx",
                static_cast<unsigned long long>(fnv1a(stamp)));
  std::filesystem::path cache(NUMERICS_CACHE_DIR);
  std::filesystem::create_directories(cache, ec);
  std::filesystem::path dir = cache / (desc.value("name", "model") + "-" + key);
  if (std::filesystem::exists(dir / "manifest.json") &&
      std::filesystem::exists(dir / "libmodel.so"))
    return dir.string();

  // Compile into a private directory, then move it into place; a concurrent
  // test process that wins the race leaves us its identical result.
  std::string tmpName =
      dir.filename().string() + ".tmp." + std::to_string(::getpid());
  std::filesystem::path tmp = cache / tmpName;
  std::filesystem::remove_all(tmp, ec);
  std::filesystem::path jsonPath = cache / (tmpName + ".json");
  std::filesystem::path logPath = cache / (tmpName + ".log");
  {
    std::ofstream out(jsonPath);
    out << desc.dump(2) << "\n";
  }
  std::string cmd = std::string("'") + MODC_BINARY + "' compile '" +
                    jsonPath.string() + "' --target cpu -o '" + tmp.string() +
                    "' > '" + logPath.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::string log = readFile(logPath);
  std::filesystem::remove(jsonPath, ec);
  std::filesystem::remove(logPath, ec);
  if (rc != 0) {
    std::filesystem::remove_all(tmp, ec);
    ADD_FAILURE() << "modc failed (" << rc << ") on\n"
                  << desc.dump(2) << "\n"
                  << log;
    return "";
  }
  std::filesystem::rename(tmp, dir, ec);
  if (ec)
    std::filesystem::remove_all(tmp, ec);
  return dir.string();
}

/// Opened packages of this process, keyed on the description.
inline const modrt::Package *package(const nlohmann::json &desc) {
  static std::map<std::string, std::unique_ptr<modrt::Package>> cache;
  std::string key = desc.dump();
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second.get();
  std::string dir = compiledPackageDir(desc);
  if (dir.empty())
    return nullptr;
  try {
    auto pkg = std::make_unique<modrt::Package>(modrt::Package::open(dir));
    return cache.emplace(key, std::move(pkg)).first->second.get();
  } catch (const modrt::Error &e) {
    ADD_FAILURE() << "cannot open package " << dir << ": " << e.what();
    return nullptr;
  }
}

/// The reference weights as runtime tensors, in the manifest's order. Fails
/// the test if the manifest names a parameter SPEC.md does not, or a shape
/// differs.
inline modrt::TensorMap toTensorMap(const modref::Weights &weights,
                                    const modref::ModelConfig &config,
                                    const modrt::Manifest &manifest) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto &[name, shape] : modref::parameterShapes(config))
    shapes[name] = shape;
  modrt::TensorMap map;
  for (const modrt::ParamInfo &p : manifest.params) {
    auto it = weights.find(p.name);
    if (it == weights.end()) {
      ADD_FAILURE() << "manifest parameter '" << p.name
                    << "' is not a SPEC.md parameter of this model";
      continue;
    }
    EXPECT_EQ(p.shape, shapes[p.name]) << p.name;
    modrt::Tensor t = modrt::Tensor::zeros(modrt::DType::F32, p.shape);
    if (static_cast<size_t>(t.numel()) != it->second.size()) {
      ADD_FAILURE() << "size mismatch for " << p.name;
      continue;
    }
    float *dst = t.f32();
    for (size_t i = 0; i < it->second.size(); ++i)
      dst[i] = static_cast<float>(it->second[i]);
    map.insert(p.name, std::move(t));
  }
  return map;
}

} // namespace modtest

#endif // MODC_TEST_NUMERICS_COMPILEDPACKAGES_H
