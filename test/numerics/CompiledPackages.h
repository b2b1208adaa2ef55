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

#include "ModcPackages.h"
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

/// Compiles `desc` into the numerics tests' package cache.
inline std::string compiledPackageDir(const nlohmann::json &desc) {
  return compiledPackageDir(desc, NUMERICS_CACHE_DIR);
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
/// the test if the manifest names a parameter docs/model-format.md does not,
/// or a shape differs.
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
                    << "' is not a parameter of this model (docs/model-format.md section 2)";
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
