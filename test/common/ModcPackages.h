//===- ModcPackages.h - Compiling test packages with modc --------*- C++
//-*-===//
//
// Shared by every test that needs a real package: the model description is
// compiled by running the `modc` binary (MODC_BINARY) and the package is
// cached on disk, keyed on the description and the modc binary's size and
// modification time, so each model is compiled once even though ctest runs
// every test in its own process: a lock file makes a second process that
// wants the same package wait for the first rather than compile it too.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_COMMON_MODCPACKAGES_H
#define MODC_TEST_COMMON_MODCPACKAGES_H

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/file.h>
#include <system_error>
#include <unistd.h>

namespace modtest {

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

/// Compiles `desc` with modc (or reuses the package cached in `cacheDir`)
/// for `target` ("--target cpu", "--target cuda --arch sm_80", ...) and
/// returns the package directory. Fails the current test with modc's output
/// on error and returns "". `extraStamp` joins the cache key (the contents of
/// an input modc does not embed, such as the CUDA emulation header).
inline std::string compiledPackageDir(const nlohmann::json &desc,
                                      const std::string &cacheDir,
                                      const std::string &target = "--target cpu",
                                      const std::string &extraStamp = "") {
  std::error_code ec;
  std::filesystem::path modc(MODC_BINARY);
  std::string stamp = desc.dump() + "|" + target + "|" + extraStamp + "|" +
                      std::to_string(std::filesystem::file_size(modc, ec)) +
                      "|" +
                      std::to_string(std::filesystem::last_write_time(modc, ec)
                                         .time_since_epoch()
                                         .count());
  char key[32];
  std::snprintf(key, sizeof(key), "%016llx",
                static_cast<unsigned long long>(fnv1a(stamp)));
  std::filesystem::path cache(cacheDir);
  std::filesystem::create_directories(cache, ec);
  std::filesystem::path dir = cache / (desc.value("name", "model") + "-" + key);
  auto cached = [&] {
    return std::filesystem::exists(dir / "manifest.json") &&
           std::filesystem::exists(dir / "libmodel.so");
  };
  if (cached())
    return dir.string();
  // Held until this function returns (the descriptor closes). Without the
  // lock (it could not be opened) the tests still pass, compiling twice.
  struct Lock {
    int fd;
    ~Lock() {
      if (fd >= 0)
        ::close(fd);
    }
  } lock{::open((dir.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC,
                0644)};
  if (lock.fd >= 0)
    while (::flock(lock.fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  if (cached())
    return dir.string();

  // Compile into a private directory, then move it into place, so that an
  // interrupted compile never leaves a package that looks whole.
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
                    jsonPath.string() + "' " + target + " -o '" + tmp.string() +
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

} // namespace modtest

#endif // MODC_TEST_COMMON_MODCPACKAGES_H
