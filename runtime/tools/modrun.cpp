//===- modrun.cpp - Command-line front end of the modc runtime -----------===//
//
// modrun init | forward | info: thin wrappers over modrt::Package so that a
// compiled package can be used from the shell; modrun tokenize | show: the
// byte-level tokenizer of SPEC.md section 6 and a safetensors summary. Usage
// errors exit 2, runtime errors (modrt::Error) print "modrun: error: <msg>"
// and exit 1. Outputs are written atomically, so a failed run leaves no file
// behind.
//
//===----------------------------------------------------------------------===//
#include "modrt/Error.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace modrt;

namespace {

const char *kMainUsage =
    "usage: modrun <command> [options]\n"
    "\n"
    "commands:\n"
    "  init     write freshly initialised weights for a package\n"
    "  forward  run the forward pass on a batch of tokens\n"
    "  info     print a summary of a package\n"
    "  tokenize turn text files into a batch of byte-level tokens\n"
    "  show     list the tensors of a safetensors file\n"
    "\n"
    "Run 'modrun <command> --help' for the options of a command.\n";

const char *kInitUsage =
    "usage: modrun init PKG --seed N --out W.safetensors\n"
    "\n"
    "Writes the package's parameters initialised from its manifest (normal,\n"
    "ones, zeros); the values depend on the seed alone.\n";

const char *kForwardUsage =
    "usage: modrun forward PKG --weights W.safetensors --tokens T.safetensors\n"
    "                          --out OUT.safetensors [--mode topk|causal]\n"
    "\n"
    "T holds one I32 tensor 'tokens' of shape [B, seq_len]. OUT gets 'logits'\n"
    "(F32 [B, seq_len, vocab]) and 'routed.<l>' (I32 [B, seq_len], 1 = the\n"
    "token went through the block) for each routed layer l. Default mode:\n"
    "topk.\n";

const char *kInfoUsage = "usage: modrun info PKG\n"
                         "\n"
                         "Prints the package's layers, parameters and "
                         "workspace size.\n";

const char *kTokenizeUsage =
    "usage: modrun tokenize FILE... --seq-len S [--batch B] [--offset N]\n"
    "                       --out T.safetensors\n"
    "\n"
    "Byte-level tokenizer (token = byte value, vocab 256): reads the FILEs'\n"
    "bytes concatenated in the order given and writes one I32 tensor 'tokens'\n"
    "of shape [B, S]: B consecutive windows of S bytes starting at byte\n"
    "offset N. Defaults: B = 1, N = 0. The corpus must hold N + B*S bytes.\n";

const char *kShowUsage =
    "usage: modrun show FILE.safetensors\n"
    "\n"
    "Lists the file's metadata and, one line per tensor: name, dtype, shape\n"
    "and the mean of its values (with min and max for I32 tensors; the mean\n"
    "of a 'routed.<l>' mask is the fraction of tokens routed).\n";

/// A mistake in the command line: exit 2 with the command's usage.
struct UsageError {
  std::string message;
  const char *usage;
};

/// Positional arguments plus --key value options of one subcommand.
struct Args {
  std::string pkg; ///< the first positional argument
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  bool help = false;

  std::string require(const std::string &key, const char *usage) const {
    auto it = options.find(key);
    if (it == options.end())
      throw UsageError{fmt::format("missing --{}", key), usage};
    return it->second;
  }
};

/// Parses `argv`. `maxPositional` bounds the positional arguments (0: any
/// number); `missing` is the message when there is none.
Args parseArgs(int argc, char **argv, const std::vector<std::string> &known,
               const char *usage, size_t maxPositional = 1,
               const char *missing = "missing package directory PKG") {
  Args args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      args.help = true;
      return args;
    }
    if (a.rfind("--", 0) == 0) {
      std::string key = a.substr(2), value;
      size_t eq = key.find('=');
      if (eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else {
        if (i + 1 >= argc)
          throw UsageError{fmt::format("option --{} needs a value", key),
                           usage};
        value = argv[++i];
      }
      if (std::find(known.begin(), known.end(), key) == known.end())
        throw UsageError{fmt::format("unknown option --{}", key), usage};
      if (args.options.count(key))
        throw UsageError{fmt::format("option --{} given twice", key), usage};
      args.options[key] = value;
      continue;
    }
    if (maxPositional && args.positional.size() >= maxPositional)
      throw UsageError{fmt::format("unexpected argument '{}'", a), usage};
    args.positional.push_back(a);
  }
  if (args.positional.empty())
    throw UsageError{missing, usage};
  args.pkg = args.positional.front();
  return args;
}

/// Parses the value of option --`key` as a decimal integer >= `minimum`.
uint64_t parseUnsigned(const std::string &key, const std::string &text,
                       const char *usage, uint64_t minimum = 0) {
  const char *what =
      minimum == 0 ? "a non-negative integer" : "a positive integer";
  if (text.empty() || text[0] == '-' || text[0] == '+')
    throw UsageError{fmt::format("--{} must be {}, got '{}'", key, what, text),
                     usage};
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    throw UsageError{
        fmt::format("--{} must be {} below 2^64, got '{}'", key, what, text),
        usage};
  if (v < minimum)
    throw UsageError{fmt::format("--{} must be {}, got '{}'", key, what, text),
                     usage};
  return v;
}

uint64_t parseSeed(const std::string &text) {
  return parseUnsigned("seed", text, kInitUsage);
}

int runInit(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"seed", "out"}, kInitUsage);
  if (args.help) {
    std::fputs(kInitUsage, stdout);
    return 0;
  }
  uint64_t seed = parseSeed(args.require("seed", kInitUsage));
  std::string out = args.require("out", kInitUsage);
  Package pkg = Package::open(args.pkg);
  TensorMap weights = pkg.initWeights(seed);
  weights.metadata["modrun.seed"] = std::to_string(seed);
  weights.save(out);
  return 0;
}

int runForward(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"weights", "tokens", "out", "mode"},
                        kForwardUsage);
  if (args.help) {
    std::fputs(kForwardUsage, stdout);
    return 0;
  }
  std::string weightsPath = args.require("weights", kForwardUsage);
  std::string tokensPath = args.require("tokens", kForwardUsage);
  std::string out = args.require("out", kForwardUsage);
  RouteMode mode = RouteMode::TopK;
  if (args.options.count("mode")) {
    const std::string &m = args.options["mode"];
    if (m == "topk")
      mode = RouteMode::TopK;
    else if (m == "causal")
      mode = RouteMode::Causal;
    else
      throw UsageError{
          fmt::format("--mode must be topk or causal, got '{}'", m),
          kForwardUsage};
  }

  Package pkg = Package::open(args.pkg);
  const Manifest &man = pkg.manifest();
  TensorMap weights = TensorMap::load(weightsPath);
  try {
    pkg.checkWeights(weights);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", weightsPath, e.what()));
  }
  TensorMap tokenFile = TensorMap::load(tokensPath);
  const Tensor *tok = tokenFile.find("tokens");
  if (!tok)
    throw Error(fmt::format("{}: no tensor 'tokens' (expected I32 [B, {}])",
                            tokensPath, man.seqLen));
  if (tok->dtype != DType::I32 || tok->shape.size() != 2 ||
      tok->shape[1] != man.seqLen || tok->shape[0] < 1)
    throw Error(fmt::format("{}: tensor 'tokens' must be I32 [B, seq_len] = "
                            "[B, {}] with B >= 1, got {} {}",
                            tokensPath, man.seqLen, dtypeName(tok->dtype),
                            shapeString(tok->shape)));
  int64_t batch = tok->shape[0];
  std::vector<int32_t> tokens(tok->i32(), tok->i32() + tok->numel());
  ForwardResult r;
  try {
    r = pkg.forward(weights, tokens, batch, mode);
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", tokensPath, e.what()));
  }

  TensorMap outMap;
  outMap.metadata["modrun.mode"] =
      mode == RouteMode::Causal ? "causal" : "topk";
  Tensor logits = Tensor::zeros(DType::F32, {r.batch, r.seqLen, r.vocab});
  std::memcpy(logits.data.data(), r.logits.data(), logits.byteSize());
  outMap.insert("logits", std::move(logits));
  for (size_t i = 0; i < man.routedLayers.size(); ++i) {
    Tensor mask = Tensor::zeros(DType::I32, {r.batch, r.seqLen});
    std::memcpy(mask.data.data(), r.routed[i].data(), mask.byteSize());
    outMap.insert(fmt::format("routed.{}", man.routedLayers[i]),
                  std::move(mask));
  }
  outMap.save(out);
  return 0;
}

int runInfo(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {}, kInfoUsage);
  if (args.help) {
    std::fputs(kInfoUsage, stdout);
    return 0;
  }
  Package pkg = Package::open(args.pkg);
  const Manifest &m = pkg.manifest();
  std::string name = m.model.value("name", std::string("(unnamed)"));
  fmt::print("package:   {}\n", pkg.directory());
  fmt::print("model:     {}\n", name);
  fmt::print("target:    {} (abi {}, compiled by modc {})\n", m.target,
             m.abiVersion, m.compilerVersion);
  fmt::print("shape:     seq_len {}, vocab {}, d_model {}\n", m.seqLen,
             m.vocabSize, m.dModel);
  fmt::print("layers:    {} ({} routed)\n", m.layers.size(),
             m.routedLayers.size());
  for (const LayerInfo &l : m.layers)
    fmt::print("  layer {:>3}  {:<6}  capacity {}/{}\n", l.index,
               l.routed ? "routed" : "dense", l.capacity, m.seqLen);
  uint64_t elems = 0;
  for (const ParamInfo &p : m.params) {
    uint64_t n = 1;
    for (int64_t d : p.shape)
      n *= static_cast<uint64_t>(d);
    elems += n;
  }
  fmt::print("params:    {} tensors, {} values, {} bytes (F32)\n",
             m.params.size(), elems, elems * 4);
  fmt::print("workspace: {} bytes per sequence\n", m.workspaceBytesPerSequence);
  fmt::print("modes:     topk{}\n", m.supportsCausal ? ", causal" : "");
  return 0;
}

/// Appends up to `limit - corpus.size()` bytes of `path` to `corpus` and
/// returns the file's size in bytes. Throws Error naming the file when it
/// cannot be read or is empty.
uint64_t readCorpusFile(const std::string &path, std::string &corpus,
                        uint64_t limit) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: is a directory, not a text file", path));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  uint64_t size = 0;
  std::vector<char> buffer(1 << 16);
  while (true) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    std::streamsize got = in.gcount();
    if (got > 0) {
      uint64_t room = limit > corpus.size() ? limit - corpus.size() : 0;
      corpus.append(buffer.data(), static_cast<size_t>(std::min<uint64_t>(
                                       room, static_cast<uint64_t>(got))));
      size += static_cast<uint64_t>(got);
    }
    if (in.eof())
      break;
    if (!in)
      throw Error(fmt::format("{}: read failed after {} bytes: {}", path, size,
                              errno ? std::strerror(errno) : "I/O error"));
  }
  if (size == 0)
    throw Error(fmt::format("{}: file is empty (no bytes to tokenize)", path));
  return size;
}

int runTokenize(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {"seq-len", "batch", "offset", "out"},
                        kTokenizeUsage, /*maxPositional=*/0,
                        "missing input FILE (one or more text files)");
  if (args.help) {
    std::fputs(kTokenizeUsage, stdout);
    return 0;
  }
  uint64_t seqLen = parseUnsigned(
      "seq-len", args.require("seq-len", kTokenizeUsage), kTokenizeUsage, 1);
  uint64_t batch = 1, offset = 0;
  if (args.options.count("batch"))
    batch = parseUnsigned("batch", args.options["batch"], kTokenizeUsage, 1);
  if (args.options.count("offset"))
    offset = parseUnsigned("offset", args.options["offset"], kTokenizeUsage);
  std::string out = args.require("out", kTokenizeUsage);

  uint64_t windowBytes = 0, needed = 0;
  if (__builtin_mul_overflow(batch, seqLen, &windowBytes) ||
      __builtin_add_overflow(offset, windowBytes, &needed) ||
      windowBytes > (uint64_t(1) << 40))
    throw UsageError{fmt::format("--batch {} times --seq-len {} is too large",
                                 batch, seqLen),
                     kTokenizeUsage};

  std::string corpus;
  uint64_t total = 0;
  for (const std::string &file : args.positional)
    total += readCorpusFile(file, corpus, needed);
  if (total < needed) {
    std::string files =
        args.positional.size() == 1
            ? args.positional.front()
            : fmt::format("the {} input files", args.positional.size());
    throw Error(fmt::format(
        "{} hold{} {} bytes; --batch {} x --seq-len {}{} needs {} bytes", files,
        args.positional.size() == 1 ? "s" : "", total, batch, seqLen,
        offset ? fmt::format(" from --offset {}", offset) : std::string(),
        needed));
  }

  Tensor tok = Tensor::zeros(
      DType::I32, {static_cast<int64_t>(batch), static_cast<int64_t>(seqLen)});
  int32_t *dst = tok.i32();
  for (uint64_t i = 0; i < windowBytes; ++i)
    dst[i] = static_cast<unsigned char>(corpus[offset + i]);
  TensorMap map;
  map.insert("tokens", std::move(tok));
  map.metadata["modrun.tokenizer"] = "bytes";
  map.metadata["modrun.offset"] = std::to_string(offset);
  std::string sources;
  for (const std::string &file : args.positional)
    sources += (sources.empty() ? "" : " ") + file;
  map.metadata["modrun.sources"] = sources;
  map.save(out);
  return 0;
}

int runShow(int argc, char **argv) {
  Args args = parseArgs(argc, argv, {}, kShowUsage, /*maxPositional=*/1,
                        "missing safetensors FILE");
  if (args.help) {
    std::fputs(kShowUsage, stdout);
    return 0;
  }
  TensorMap map = TensorMap::load(args.pkg);
  fmt::print("{}: {} tensor{}\n", args.pkg, map.size(),
             map.size() == 1 ? "" : "s");
  for (const auto &[key, value] : map.metadata)
    fmt::print("  metadata {} = {}\n", key, value);
  size_t nameWidth = 0, shapeWidth = 0;
  for (const auto &[name, t] : map) {
    nameWidth = std::max(nameWidth, name.size());
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
    fmt::print("  {:<{}}  {}  {:<{}}  {}\n", name, nameWidth,
               dtypeName(t.dtype), shapeString(t.shape), shapeWidth, stats);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fputs(kMainUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kMainUsage, stdout);
    return 0;
  }
  try {
    if (cmd == "init")
      return runInit(argc - 2, argv + 2);
    if (cmd == "forward")
      return runForward(argc - 2, argv + 2);
    if (cmd == "info")
      return runInfo(argc - 2, argv + 2);
    if (cmd == "tokenize")
      return runTokenize(argc - 2, argv + 2);
    if (cmd == "show")
      return runShow(argc - 2, argv + 2);
    fmt::print(stderr, "modrun: unknown command '{}'\n\n{}", cmd, kMainUsage);
    return 2;
  } catch (const UsageError &e) {
    fmt::print(stderr, "modrun: {}\n\n{}", e.message, e.usage);
    return 2;
  } catch (const Error &e) {
    fmt::print(stderr, "modrun: error: {}\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    // Not expected (bad_alloc and the like), but never a crash.
    fmt::print(stderr, "modrun: error: {}\n", e.what());
    return 1;
  }
}
