//===- SampleCommand.cpp - modrun sample ----------------------------------===//
//
// Generates text after prompts with the package's decode entry (docs/cli.md,
// "modrun sample"): every prompt is checked before the weights are loaded,
// so a mistake in the last line of a batch file costs nothing.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "modrt/Error.h"
#include "modrt/Files.h"
#include "modrt/Generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace modrt;

namespace modrun {
namespace {

const char kSampleUsage[] =
    "usage: modrun sample PKG --weights W (--prompt TEXT | --prompt-file F |\n"
    "                     --batch-file F) --max-new N [--temperature T]\n"
    "                     [--top-k K] [--top-p P] [--seed S]\n"
    "                     [--tokenizer PATH]\n"
    "\n"
    "Generates up to N tokens after the prompt (bytes, or the tokens of\n"
    "--tokenizer or the package's tokenizer.json), one token at a time with\n"
    "the package's KV cache and causal routing, and streams their text to\n"
    "stdout (a UTF-8 character split across tokens is printed once whole;\n"
    "then a newline). --prompt-file takes the file's bytes\n"
    "as they are. --batch-file runs one prompt per line (the line without\n"
    "its newline) as one batch and prints each output at the end under a\n"
    "'=== F line L ===' label. Prompt plus generated text must fit the\n"
    "model's context (seq_len): a larger N is clamped, with a note. Defaults:\n"
    "--temperature 1 (0 = greedy), --top-k 0 (all tokens), --top-p 1 (all),\n"
    "--seed 0. W may be a checkpoint of modrun train.\n";

void declareSample(CommandLine &line) {
  packageArgument(line)
      .option("weights", "W", "required; weights or a checkpoint")
      .option("prompt", "TEXT", "the prompt, as given")
      .option("prompt-file", "F", "the prompt is F's bytes as stored")
      .option("batch-file", "F", "one prompt per line, as one batch")
      .option("max-new", "N", "required; tokens to generate, 0 to 2^31 - 1")
      .option("temperature", "T", ">= 0; 0 is greedy (default 1)")
      .option("top-k", "K", "sample among the K likeliest (default 0: all)")
      .option("top-p", "P", "nucleus sampling, in (0, 1] (default 1)")
      .option("seed", "S", "seed of the random stream (default 0)");
  tokenizerOption(line);
}

/// The prompts to continue and their names in messages ("--prompt", the
/// file, "F line L").
struct Prompts {
  std::vector<std::string> texts, labels;
  bool batchFile = false; ///< outputs printed at the end, labelled
};

/// Reads the one prompt source given (the command line has checked that).
Prompts readPrompts(const CommandLine &line) {
  Prompts p;
  if (line.has("prompt")) {
    p.texts.push_back(line.text("prompt"));
    p.labels.push_back("--prompt");
    return p;
  }
  if (line.has("prompt-file")) {
    p.texts.push_back(readWholeFile(line.text("prompt-file"), "prompt file"));
    p.labels.push_back(line.text("prompt-file"));
    return p;
  }
  p.batchFile = true;
  const std::string &path = line.text("batch-file");
  std::string text = readWholeFile(path, "prompt file");
  size_t start = 0, number = 1;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string prompt = text.substr(
        start, end == std::string::npos ? std::string::npos : end - start);
    if (!prompt.empty() && prompt.back() == '\r')
      prompt.pop_back();
    p.texts.push_back(prompt);
    p.labels.push_back(fmt::format("{} line {}", path, number));
    if (end == std::string::npos)
      break;
    start = end + 1;
    ++number;
  }
  if (p.texts.empty())
    throw Error(fmt::format("{}: file is empty (one prompt per line)", path));
  return p;
}

/// Refuses prompts that leave no room to generate, and notes each prompt
/// for which --max-new is clamped to the model's context.
void checkPrompts(const Manifest &man, const std::string &dir,
                  const Tokenizer &tokenizer, const Prompts &prompts,
                  int maxNew) {
  const char *unit = tokenizer.isBytes() ? "bytes" : "tokens";
  // A prompt has at least one byte, so a one-token context never has room.
  if (maxNew > 0 && man.seqLen < 2)
    throw Error(fmt::format("{}: the model's context is 1 token (seq_len 1), "
                            "which any prompt fills: nothing can be "
                            "generated; compile the model with seq_len 2 or "
                            "more",
                            dir));
  std::vector<int64_t> lengths;
  for (size_t b = 0; b < prompts.texts.size(); ++b) {
    int64_t len = static_cast<int64_t>(
        tokenizePrompt(man, tokenizer, prompts.texts[b], prompts.labels[b])
            .size());
    lengths.push_back(len);
    if (maxNew > 0 && len >= man.seqLen)
      throw Error(fmt::format("{} is {} {} and fills the model's context "
                              "of {} tokens (seq_len): no room to generate; "
                              "use at most {} {}",
                              prompts.labels[b], len, unit, man.seqLen,
                              man.seqLen - 1, unit));
  }
  for (size_t b = 0; b < prompts.texts.size(); ++b) {
    int64_t room = man.seqLen - lengths[b];
    if (maxNew > room)
      fmt::print(stderr,
                 "modrun: note: --max-new {} clamped to {} for {}: prompt "
                 "({} {}) plus generated {} must fit the model's "
                 "context (seq_len {})\n",
                 maxNew, room, prompts.labels[b], lengths[b], unit, unit,
                 man.seqLen);
  }
}

int runSample(const CommandLine &line) {
  const std::string &weightsPath = line.require("weights");
  int sources =
      line.has("prompt") + line.has("prompt-file") + line.has("batch-file");
  if (sources != 1)
    throw line.mistake(sources == 0 ? "missing --prompt, --prompt-file or "
                                      "--batch-file"
                                    : "give one of --prompt, --prompt-file "
                                      "and --batch-file");
  line.require("max-new");
  int maxNew = static_cast<int>(*line.integer("max-new", 0, INT_MAX));
  SamplingConfig config;
  config.temperature =
      line.number("temperature", 0).value_or(config.temperature);
  config.topK =
      static_cast<int>(line.integer("top-k", 0, INT_MAX).value_or(config.topK));
  config.topP = line.number("top-p", 0, /*strict=*/true).value_or(config.topP);
  if (config.topP > 1)
    throw line.mistake(
        fmt::format("--top-p must be in (0, 1], got '{}'", line.text("top-p")));
  config.seed = line.integer("seed").value_or(config.seed);

  Prompts prompts = readPrompts(line);
  Package pkg = Package::open(line.argument());
  pkg.requireDecode();
  Tokenizer tokenizer =
      commandTokenizer(line, &pkg, line.argument(), "sample", false);
  checkPrompts(pkg.manifest(), line.argument(), tokenizer, prompts, maxNew);
  TensorMap weights = loadCheckedWeights(pkg, weightsPath);

  auto start = std::chrono::steady_clock::now();
  uint64_t produced = 0;
  // A token may end inside a UTF-8 character: print whole characters only.
  Utf8Stream stream;
  auto print = [](const std::string &text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  std::vector<std::string> out =
      generate(pkg, weights, tokenizer, prompts.texts, maxNew, config,
               [&](size_t, const std::string &piece) {
                 ++produced;
                 if (!prompts.batchFile)
                   print(stream.push(piece));
               });
  if (!prompts.batchFile)
    print(stream.flush());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (prompts.batchFile) {
    for (size_t b = 0; b < out.size(); ++b) {
      fmt::print("=== {} ===\n", prompts.labels[b]);
      std::fwrite(out[b].data(), 1, out[b].size(), stdout);
      std::fputc('\n', stdout);
    }
  } else {
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  size_t n = prompts.texts.size();
  const char *unit = tokenizer.isBytes() ? "byte" : "token";
  fmt::print(stderr,
             "modrun: {} {}{} generated for {} prompt{} in {:.2f}s "
             "({:.0f} {}s/s)\n",
             produced, unit, produced == 1 ? "" : "s", n, n == 1 ? "" : "s",
             seconds, static_cast<double>(produced) / std::max(seconds, 1e-9),
             unit);
  return 0;
}

} // namespace

const Command kSampleCommand = {
    "sample", "generate text from a prompt (causal routing, KV cache)",
    kSampleUsage, declareSample, runSample};

} // namespace modrun
