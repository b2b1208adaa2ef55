//===- CommandLine.h - modrun's command line on CLI11 ------------*- C++
//-*-===//
//
// CLI11 splits modrun's words into a command, its options with their values
// and its positional arguments ("--key value", "--key=value", "--data a b"),
// and writes the help. The values are taken as text and checked here, in
// the order each command asks for them, so that every mistake is reported
// with the message docs/errors.md lists ("modrun: the command line"); CLI11's
// own messages differ from those. This header does not include CLI11, so
// that only CommandLine.cpp compiles it.
//
//===----------------------------------------------------------------------===//
#ifndef MODRUN_COMMANDLINE_H
#define MODRUN_COMMANDLINE_H

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace modrun {

/// A mistake on the command line: modrun prints "modrun: <message>" and
/// then the command's usage, and exits 2 (docs/cli.md).
struct UsageError {
  std::string message;
  std::string usage;
};

/// The command line of one modrun command: what it declares, and after the
/// parse, the checked values of what was given.
class CommandLine {
public:
  CommandLine(CLI::App &app, const char *usage) : app_(&app), usage_(usage) {}

  /// @name Declaring
  /// @{
  /// The positional argument `name` (exactly one); `missing` is the message
  /// when it is absent.
  CommandLine &argument(const char *name, const char *help,
                        const char *missing);
  /// Positional arguments `name`... (one or more), anywhere on the line.
  CommandLine &arguments(const char *name, const char *help,
                         const char *missing);
  /// --`key` `value`, given at most once.
  CommandLine &option(const char *key, const char *value, const char *help);
  /// --`key` `value`..., which takes every following word up to the next
  /// option and may be repeated ("--data a.txt b.txt").
  CommandLine &listOption(const char *key, const char *value, const char *help);
  /// @}

  /// Refuses what CLI11 accepts but modrun does not: an unknown option, an
  /// extra positional argument, an option given twice, no positional
  /// argument. Run once after the parse, before any value is read.
  void checkShape() const;

  /// @name Reading (after checkShape)
  /// @{
  /// The first positional argument (PKG, FILE).
  const std::string &argument() const;
  /// Every positional argument, in order.
  const std::vector<std::string> &arguments() const;
  bool has(const std::string &key) const;
  /// The value of --`key` as written; `key` must have been given.
  const std::string &text(const std::string &key) const;
  /// The value of --`key` as written; "missing --key" when absent.
  const std::string &require(const std::string &key) const;
  /// The values of list option --`key` in order; "missing --key VALUE..."
  /// when absent.
  const std::vector<std::string> &requireList(const std::string &key) const;
  /// --`key` as a decimal integer in [`minimum`, `maximum`]; nullopt when
  /// absent. A value past `maximum` is refused, never capped: a capped value
  /// would run another job than the one asked for (docs/errors.md).
  std::optional<uint64_t> integer(const std::string &key, uint64_t minimum = 0,
                                  uint64_t maximum = UINT64_MAX) const;
  /// --`key` as a finite number >= `minimum` (> with `strict`); nullopt
  /// when absent.
  std::optional<double> number(const std::string &key, double minimum,
                               bool strict = false) const;
  /// @}

  /// A mistake on this command's line, to throw.
  UsageError mistake(std::string message) const {
    return {std::move(message), usage_};
  }
  const char *usage() const { return usage_; }

private:
  CLI::Option &declared(const std::string &key) const;

  CLI::App *app_;
  const char *usage_;
  CLI::Option *positional_ = nullptr;
  std::string missingPositional_;
  std::map<std::string, CLI::Option *> options_;      ///< by key, without "--"
  std::map<std::string, std::string> listValueNames_; ///< key -> "FILE..."
};

/// A modrun command: its name and one-line summary (modrun --help), its
/// usage (printed by --help and after a mistake), the options it declares
/// and what it does. `run` returns the exit status; it throws UsageError
/// for a mistake on the line and modrt::Error for any other failure.
struct Command {
  const char *name;
  const char *summary;
  const char *usage;
  void (*declare)(CommandLine &);
  int (*run)(const CommandLine &);
};

/// modrun's commands on one CLI11 application (docs/cli.md, "modrun").
class Program {
public:
  /// Declares `commands` (in the order `modrun --help` lists them).
  explicit Program(const std::vector<Command> &commands);
  ~Program();

  /// What parse found: the command to run with its line, or none, with the
  /// exit status to end with (help printed: 0; no command or an unknown
  /// one, reported with the list of commands: 2).
  struct Parsed {
    const Command *command = nullptr;
    const CommandLine *line = nullptr;
    int status = 0;
  };
  /// Parses `argv`. Prints the help it asks for. Throws UsageError for a
  /// mistake on a command's line.
  Parsed parse(int argc, char **argv);

  /// `modrun --help`: the commands and their summaries.
  const std::string &mainUsage() const { return mainUsage_; }

private:
  std::unique_ptr<CLI::App> root_;
  std::vector<Command> commands_;
  /// One each per command, in the order of `commands_`.
  std::vector<CLI::App *> apps_;
  std::vector<std::unique_ptr<CommandLine>> lines_;
  std::string mainUsage_;
};

} // namespace modrun

#endif // MODRUN_COMMANDLINE_H
