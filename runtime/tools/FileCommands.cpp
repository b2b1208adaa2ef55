//===- FileCommands.cpp - modrun tokenize and show ------------------------===//
//
// The commands that need no package: the byte-level tokenizer of
// docs/model-format.md section 6, and a summary of a safetensors file.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "modrt/Error.h"
#include "modrt/Training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace modrt;

namespace modrun {
namespace {

//===----------------------------------------------------------------------===//
// tokenize
//===----------------------------------------------------------------------===//

const char kTokenizeUsage[] =
    "usage: modrun tokenize FILE... --seq-len S [--batch B] [--offset N]\n"
    "                       --out T.safetensors [--tokenizer PATH]\n"
    "\n"
    "Byte-level tokenizer (token = byte value, vocab 256): reads the FILEs'\n"
    "bytes concatenated in the order given and writes one I32 tensor 'tokens'\n"
    "of shape [B, S]: B consecutive windows of S bytes starting at byte\n"
    "offset N. Defaults: B = 1, N = 0. The corpus must hold N + B*S bytes.\n"
    "With --tokenizer (a Hugging Face tokenizer.json, byte-level BPE) the\n"
    "concatenated text is encoded with it and S, N and the count are in its\n"
    "tokens.\n";

void declareTokenize(CommandLine &line) {
  line.arguments("FILE", "text files, read one after another",
                 "missing input FILE (one or more text files)")
      .option("seq-len", "S", "required; window length, an integer >= 1")
      .option("batch", "B", "number of windows (default 1)")
      .option("offset", "N", "first byte, or token (default 0)")
      .option("out", "T.safetensors", "required; the file to write");
  tokenizerOption(line, /*packages=*/false);
}

/// Appends up to `limit - corpus.size()` bytes of `path` to `corpus` (it
/// reads no further) and returns the file's size in bytes. Throws Error
/// naming the file when it is not a regular file (a device such as
/// /dev/zero or a pipe could be endless), cannot be read or is empty.
uint64_t readCorpusFile(const std::string &path, std::string &corpus,
                        uint64_t limit) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(
        fmt::format("{}: cannot open: {}", path, std::strerror(ENOENT)));
  requireRegularTextFile(path);
  uint64_t size = std::filesystem::file_size(path, ec);
  if (ec)
    throw Error(
        fmt::format("{}: cannot read its size: {}", path, ec.message()));
  if (size == 0)
    throw Error(fmt::format("{}: file is empty (no bytes to tokenize)", path));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  uint64_t room = limit > corpus.size() ? limit - corpus.size() : 0;
  uint64_t want = std::min(room, size);
  size_t start = corpus.size();
  corpus.resize(start + want);
  in.read(corpus.data() + start, static_cast<std::streamsize>(want));
  if (static_cast<uint64_t>(in.gcount()) != want)
    throw Error(fmt::format("{}: read failed after {} of {} bytes: {}", path,
                            in.gcount(), want,
                            errno ? std::strerror(errno) : "I/O error"));
  return size;
}

int runTokenize(const CommandLine &line) {
  line.require("seq-len");
  uint64_t seqLen = *line.integer("seq-len", 1);
  uint64_t batch = line.integer("batch", 1).value_or(1);
  uint64_t offset = line.integer("offset").value_or(0);
  const std::string &out = line.require("out");
  const std::vector<std::string> &files = line.arguments();
  {
    std::vector<std::pair<std::string, std::string>> inputs;
    for (const std::string &file : files)
      inputs.push_back({"FILE", file});
    if (line.has("tokenizer"))
      inputs.push_back({"--tokenizer", line.text("tokenizer")});
    refuseOverwritingInput("--out", out, inputs);
  }

  uint64_t windowBytes = 0, needed = 0;
  if (__builtin_mul_overflow(batch, seqLen, &windowBytes) ||
      __builtin_add_overflow(offset, windowBytes, &needed) ||
      windowBytes > (uint64_t(1) << 40))
    throw line.mistake(fmt::format("--batch {} times --seq-len {} is too large",
                                   batch, seqLen));

  Tokenizer tokenizer = commandTokenizer(line, nullptr, "", "tokenize", false);
  std::string corpus;
  uint64_t total = 0;
  // A BPE needs the whole text: how many bytes make N + B*S tokens is
  // known only after encoding.
  for (const std::string &file : files)
    total += readCorpusFile(file, corpus,
                            tokenizer.isBytes() ? needed : Corpus::kMaxBytes);
  std::vector<int32_t> ids;
  if (!tokenizer.isBytes()) {
    ids = tokenizer.encode(corpus);
    corpus = std::string();
    total = ids.size();
  }
  const char *unit = tokenizer.isBytes() ? "bytes" : "tokens";
  if (total < needed) {
    std::string what = files.size() == 1
                           ? files.front()
                           : fmt::format("the {} input files", files.size());
    throw Error(fmt::format(
        "{} hold{} {} {}; --batch {} x --seq-len {}{} needs {} {}", what,
        files.size() == 1 ? "s" : "", total, unit, batch, seqLen,
        offset ? fmt::format(" from --offset {}", offset) : std::string(),
        needed, unit));
  }

  Tensor tok = Tensor::zeros(
      DType::I32, {static_cast<int64_t>(batch), static_cast<int64_t>(seqLen)});
  int32_t *dst = tok.i32();
  for (uint64_t i = 0; i < windowBytes; ++i)
    dst[i] = tokenizer.isBytes()
                 ? static_cast<unsigned char>(corpus[offset + i])
                 : ids[offset + i];
  TensorMap map;
  map.insert("tokens", std::move(tok));
  map.metadata["modrun.tokenizer"] = tokenizer.name();
  map.metadata["modrun.offset"] = std::to_string(offset);
  std::string sources;
  for (const std::string &file : files)
    sources += (sources.empty() ? "" : " ") + file;
  map.metadata["modrun.sources"] = sources;
  map.save(out);
  return 0;
}

//===----------------------------------------------------------------------===//
// show
//===----------------------------------------------------------------------===//

const char kShowUsage[] =
    "usage: modrun show FILE.safetensors\n"
    "\n"
    "Lists the file's metadata and, one line per tensor: name, dtype, shape\n"
    "and the mean of its values (with min and max for I32 tensors; the mean\n"
    "of a 'routed.<l>' mask is the fraction of tokens routed). BF16 and F16\n"
    "tensors show the dtype stored in the file; their values are read\n"
    "widened to F32 exactly, as everywhere weights are read.\n";

void declareShow(CommandLine &line) {
  line.argument("FILE.safetensors", "the file to list",
                "missing safetensors FILE");
}

int runShow(const CommandLine &line) {
  const std::string &path = line.argument();
  TensorMap map = TensorMap::load(path);
  fmt::print("{}: {} tensor{}\n", path, map.size(), map.size() == 1 ? "" : "s");
  for (const auto &[key, value] : map.metadata)
    fmt::print("  metadata {} = {}\n", key, value);
  // BF16 and F16 tensors show the file's dtype (their data are F32 now).
  auto shownDType = [](const Tensor &t) {
    bool widened = t.fileDType == DType::BF16 || t.fileDType == DType::F16;
    return std::string(dtypeName(widened ? t.fileDType : t.dtype));
  };
  size_t nameWidth = 0, shapeWidth = 0, dtypeWidth = 0;
  for (const auto &[name, t] : map) {
    nameWidth = std::max(nameWidth, name.size());
    dtypeWidth = std::max(dtypeWidth, shownDType(t).size());
    shapeWidth = std::max(shapeWidth, shapeString(t.shape).size());
  }
  for (const auto &[name, t] : map) {
    int64_t n = t.numel();
    std::string stats;
    if (n == 0) {
      stats = "(empty)";
    } else if (t.dtype == DType::I32) {
      const int32_t *v = t.i32();
      double sum = 0;
      int32_t lo = v[0], hi = v[0];
      for (int64_t i = 0; i < n; ++i) {
        sum += v[i];
        lo = std::min(lo, v[i]);
        hi = std::max(hi, v[i]);
      }
      stats = fmt::format("mean {:.6g}  min {}  max {}", sum / n, lo, hi);
    } else {
      const float *v = t.f32();
      double sum = 0;
      for (int64_t i = 0; i < n; ++i)
        sum += v[i];
      stats = fmt::format("mean {:.6g}", sum / n);
    }
    fmt::print("  {:<{}}  {:<{}}  {:<{}}  {}\n", name, nameWidth, shownDType(t),
               dtypeWidth, shapeString(t.shape), shapeWidth, stats);
  }
  return 0;
}

} // namespace

const Command kTokenizeCommand = {
    "tokenize", "turn text files into a batch of byte-level tokens",
    kTokenizeUsage, declareTokenize, runTokenize};
const Command kShowCommand = {"show", "list the tensors of a safetensors file",
                              kShowUsage, declareShow, runShow};

} // namespace modrun
