//===- Files.cpp - Guards on modrun's outputs and checked inputs ----------===//
//
// Every output is written atomically by modrt (docs/cli.md, "modrun"); the
// checks here come first, so that a mistake never touches an input.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "modrt/Error.h"
#include "modrt/Training.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <signal.h>
#include <string>

using namespace modrt;

namespace modrun {

Job gJob;

CommandLine &packageArgument(CommandLine &line) {
  return line.argument("PKG", "the package directory (modc compile -o PKG)",
                       "missing package directory PKG");
}

namespace {

/// Whether paths `a` and `b` name one file: the same existing file by any
/// path (links included), or the same path once normalised.
bool sameFile(const std::string &a, const std::string &b) {
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec))
    return std::filesystem::equivalent(a, b, ec);
  auto normal = [&](const std::string &p) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec),
                                             ec);
  };
  return normal(a) == normal(b);
}

} // namespace

void refuseOverwritingInput(
    const std::string &outFlag, const std::string &out,
    const std::vector<std::pair<std::string, std::string>> &inputs) {
  for (const auto &[flag, path] : inputs)
    if (sameFile(out, path))
      throw Error(fmt::format("{} {} is the same file as {} {}: writing it "
                              "would destroy that file; choose another {}",
                              outFlag, out, flag, path, outFlag));
}

void requireOutputDirectory(const std::string &outFlag,
                            const std::string &out) {
  std::filesystem::path parent = std::filesystem::path(out).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw Error(fmt::format("{} {}: directory {} does not exist", outFlag, out,
                            parent.string()));
}

void removeStaleTemporaries(const std::string &out) {
  namespace fs = std::filesystem;
  fs::path outPath(out);
  fs::path dir =
      outPath.parent_path().empty() ? fs::path(".") : outPath.parent_path();
  const std::string prefix = outPath.filename().string() + ".tmp.";
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size())
      continue;
    std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos ||
        digits.size() > 9)
      continue;
    pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH)
      continue; // that process still runs (or is not ours to judge)
    if (fs::remove(e.path(), ec))
      fmt::print(stderr,
                 "modrun: removed {}, a temporary checkpoint of process {}, "
                 "which no longer runs\n",
                 e.path().string(), pid);
  }
}

TensorMap loadCheckedWeights(const Package &pkg, const std::string &path) {
  TensorMap weights = loadWeights(path);
  try {
    pkg.checkWeights(weights);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  return weights;
}

void requireTraining(const Package &pkg, const std::string &dir) {
  if (!pkg.manifest().supportsTraining)
    throw Error(fmt::format("{}: this package has no training entry points "
                            "(modc_grad, modc_adamw); recompile with this "
                            "modc",
                            dir));
}

void requireByteVocabulary(const Package &pkg, const std::string &dir,
                           const char *command) {
  if (pkg.manifest().vocabSize < 256)
    throw Error(fmt::format("{}: modrun {} reads byte-level text (tokens "
                            "0..255), but the model's vocab_size is {}",
                            dir, command, pkg.manifest().vocabSize));
}

CommandLine &tokenizerOption(CommandLine &line, bool packages) {
  return line.option("tokenizer", "PATH",
                     packages ? "a Hugging Face tokenizer.json (byte-level "
                                "BPE); default: the package's, else bytes"
                              : "a Hugging Face tokenizer.json (byte-level "
                                "BPE); default: bytes");
}

Tokenizer commandTokenizer(const CommandLine &line, const Package *pkg,
                           const std::string &dir, const char *command,
                           bool wholeBytes) {
  Tokenizer tok;
  if (line.has("tokenizer"))
    tok = Tokenizer::fromFile(line.text("tokenizer"));
  else if (pkg && !pkg->manifest().tokenizer.empty())
    tok = Tokenizer::fromFile(
        (std::filesystem::path(pkg->directory()) / pkg->manifest().tokenizer)
            .string());
  if (pkg) {
    if (!tok.isBytes())
      tok.checkFits(pkg->manifest().vocabSize, dir);
    else if (wholeBytes)
      requireByteVocabulary(*pkg, dir, command);
  }
  return tok;
}

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600)
    return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60)
    return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

} // namespace modrun
