//===- FuzzUtil.h - Helpers shared by the fuzz targets ----------*- C++ -*-===//
//
// The runtime reads files by path, so each target writes its input into a
// scratch directory of its own (removed at exit) and hands over the path.
// docs/testing.md describes the targets and how to run them.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_FUZZ_FUZZUTIL_H
#define MODC_TEST_FUZZ_FUZZUTIL_H

#include <cstdint>
#include <cstdio>
#include <dlfcn.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace fuzz {

/// A fresh directory for this process: under $TMPDIR when set, else
/// /dev/shm (memory, so the many small writes cost no disk I/O), else /tmp.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    std::string base = "/tmp";
    if (const char *t = std::getenv("TMPDIR"); t && *t)
      base = t;
    else if (::access("/dev/shm", W_OK) == 0)
      base = "/dev/shm";
    std::string pattern = base + "/modc-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::perror("modc fuzz: mkdtemp");
      std::abort();
    }
    static std::string made = pattern;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(made, ec);
    });
    return pattern;
  }();
  return dir;
}

/// Writes `size` bytes to `path`, aborting on failure: a harness failure,
/// not a finding.
inline void writeFile(const std::string &path, const void *data,
                      size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char *>(data),
            static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "modc fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

/// Aborts with `what` when `ok` is false: a property that must hold for
/// every input a target accepts (libFuzzer reports the abort as a crash).
inline void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "modc fuzz: property violated: %s\n", what);
    std::abort();
  }
}

/// A package directory `dir` made of the fake library `lib` (built from
/// test/runtime/FakeModel.cpp) and the manifest it embeds.
inline std::string makeFakePackage(const std::string &dir,
                                   const std::string &lib) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(lib, dir + "/libmodel.so",
                             std::filesystem::copy_options::overwrite_existing);
  void *h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  auto manifest = h ? reinterpret_cast<const char *(*)()>(
                          ::dlsym(h, "modc_manifest_json"))
                    : nullptr;
  if (!manifest) {
    std::fprintf(stderr, "modc fuzz: cannot load %s\n", lib.c_str());
    std::abort();
  }
  std::string text = manifest();
  writeFile(dir + "/manifest.json", text.data(), text.size());
  ::dlclose(h);
  return dir;
}

} // namespace fuzz

#endif // MODC_TEST_FUZZ_FUZZUTIL_H
