//===- Commands.h - The commands of modrun and what they share ---*- C++
//-*-===//
//
// Each command (docs/cli.md, "modrun") is a Command: its usage text, the
// options it declares on its CommandLine, and its run function. The helpers
// below guard outputs and read inputs for several commands.
//
//===----------------------------------------------------------------------===//
#ifndef MODRUN_COMMANDS_H
#define MODRUN_COMMANDS_H

#include "CommandLine.h"

#include "modrt/Comm.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"
#include "modrt/Tokenizer.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace modrun {

/// @name The commands, in the order `modrun --help` lists them
/// @{
extern const Command kInitCommand;     // ModelCommands.cpp
extern const Command kForwardCommand;  // ModelCommands.cpp
extern const Command kGradCommand;     // ModelCommands.cpp
extern const Command kTrainCommand;    // TrainCommand.cpp
extern const Command kSampleCommand;   // SampleCommand.cpp
extern const Command kEvalCommand;     // ModelCommands.cpp
extern const Command kInfoCommand;     // ModelCommands.cpp
extern const Command kTokenizeCommand; // FileCommands.cpp
extern const Command kShowCommand;     // FileCommands.cpp
/// @}

/// The data-parallel job of `modrun train` (docs/distributed.md), set up by
/// train, so that main can report an error the way a job needs and end
/// every rank when one fails.
struct Job {
  /// The communicator; null outside train.
  std::unique_ptr<modrt::Communicator> comm;
  /// Where a rank other than 0 writes its progress and errors (--rank-log);
  /// null: nowhere (its errors still go to stderr).
  std::FILE *rankLog = nullptr;
};
extern Job gJob;

/// Declares PKG, the package directory that the model commands take first,
/// on `line`, and returns it (Files.cpp).
CommandLine &packageArgument(CommandLine &line);

/// @name Outputs (Files.cpp)
/// @{
/// Refuses an output that would overwrite an input: `out` (given as
/// `outFlag`) against each (flag, path) of `inputs`, by path, another
/// spelling of it or a link. Checked before any work, so the input is never
/// touched.
void refuseOverwritingInput(
    const std::string &outFlag, const std::string &out,
    const std::vector<std::pair<std::string, std::string>> &inputs);
/// Refuses an output file whose directory does not exist, before any work
/// (a training run would otherwise fail only at its first save).
void requireOutputDirectory(const std::string &outFlag, const std::string &out);
/// Removes the temporary files `OUT.tmp.PID` that a process writing `out`
/// left behind when it was killed (a file system without O_TMPFILE names
/// them while writing), when PID no longer runs; says so for each.
void removeStaleTemporaries(const std::string &out);
/// @}

/// @name Inputs (Files.cpp)
/// @{
/// Loads weights (or a checkpoint's) and checks them against the package,
/// naming the file in errors.
modrt::TensorMap loadCheckedWeights(const modrt::Package &pkg,
                                    const std::string &path);
/// Refuses a package without the training entry points (grad, train).
void requireTraining(const modrt::Package &pkg, const std::string &dir);
/// Refuses a model that cannot read byte-level text (tokens 0..255), for
/// `command` (train, eval).
void requireByteVocabulary(const modrt::Package &pkg, const std::string &dir,
                           const char *command);
/// Declares --tokenizer PATH on `line` (tokenize, train, eval, sample);
/// `packages`: whether the command takes a package, whose tokenizer is the
/// default.
CommandLine &tokenizerOption(CommandLine &line, bool packages = true);
/// The tokenizer of a command (docs/cli.md, "Tokenizers"): --tokenizer
/// when given, else the package's own (the manifest's "tokenizer"), else
/// the byte tokenizer. A BPE must fit the model's vocabulary
/// (Tokenizer::checkFits); the byte tokenizer must too when `wholeBytes`
/// (requireByteVocabulary for `command`; sample names a byte outside a
/// smaller vocabulary instead). `pkg` may be null (tokenize).
modrt::Tokenizer commandTokenizer(const CommandLine &line,
                                  const modrt::Package *pkg,
                                  const std::string &dir, const char *command,
                                  bool wholeBytes);
/// @}

/// The largest --batch of train and eval: B x (seq_len + 1) bytes per batch
/// stay far from overflow for any seq_len a model may have (at most 2^20).
constexpr uint64_t kMaxBatch = uint64_t(1) << 20;

/// "1h02m", "3m07s", "12s".
std::string formatDuration(double seconds);

} // namespace modrun

#endif // MODRUN_COMMANDS_H
