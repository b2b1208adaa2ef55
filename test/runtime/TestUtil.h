//===- TestUtil.h - Helpers shared by the runtime tests ---------*- C++ -*-===//
//
// A self-deleting temporary directory and an assertion that a call throws
// modrt::Error whose message contains given pieces.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_TEST_TESTUTIL_H
#define MODRT_TEST_TESTUTIL_H

#include "modrt/Error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace modrt_test {

/// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "modrt-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string path(const std::string &name) const { return dir + "/" + name; }
  const std::string &str() const { return dir; }
  /// Names of the entries of the directory, sorted.
  std::vector<std::string> list() const {
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(dir))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

private:
  std::string dir;
};

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

inline std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

/// Runs `fn`, requiring a modrt::Error whose message contains every piece.
template <typename Fn>
::testing::AssertionResult throwsError(Fn &&fn,
                                       const std::vector<std::string> &pieces) {
  try {
    fn();
  } catch (const modrt::Error &e) {
    std::string msg = e.what();
    for (const std::string &p : pieces)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure()
               << "message \"" << msg << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception &e) {
    return ::testing::AssertionFailure()
           << "threw a non-modrt exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// Makes `dir` a package of the fake library `lib` (FakeModel.cpp): the
/// library plus the manifest it embeds.
inline std::string makeFakePackage(const std::string &dir,
                                   const std::string &lib) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(lib, dir + "/libmodel.so",
                             std::filesystem::copy_options::overwrite_existing);
  void *h = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw std::runtime_error(::dlerror());
  auto fn =
      reinterpret_cast<const char *(*)()>(::dlsym(h, "modc_manifest_json"));
  writeFile(dir + "/manifest.json", fn());
  ::dlclose(h);
  return dir;
}

/// Writes a byte-level BPE tokenizer.json small enough for the fake
/// packages (98 tokens): the byte-level symbols of the printable ASCII bytes
/// 0x20..0x7E (ids 0..94; space is U+0120), "ab" (95) and " a" (96) from
/// two merges, and the special token <|end|> (97).
inline void writeSmallTokenizer(const std::string &path) {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["\xc4\xa0"] = 0; // U+0120 stands for the space
  for (int b = 0x21; b <= 0x7e; ++b)
    vocab[std::string(1, static_cast<char>(b))] = b - 0x20;
  vocab["ab"] = 95;
  vocab["\xc4\xa0"
        "a"] = 96;
  nlohmann::json j = {
      {"added_tokens",
       {{{"id", 97}, {"content", "<|end|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "\xc4\xa0 a"}}}}};
  writeFile(path, j.dump());
}

} // namespace modrt_test

#endif // MODRT_TEST_TESTUTIL_H
