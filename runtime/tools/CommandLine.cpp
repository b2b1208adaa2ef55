//===- CommandLine.cpp - modrun's command line on CLI11 -------------------===//
//
// CLI11 (Debian's libcli11-dev) parses; the checks and messages here are
// those of docs/errors.md, "modrun: the command line".
//
//===----------------------------------------------------------------------===//
#include "CommandLine.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>

namespace modrun {
namespace {

const char *kHelpFlag = "-h,--help";
const char *kHelpText = "print this help and exit";

/// The help of a command: its usage (synopsis and description), then its
/// arguments and options as CLI11 lists them, each with its value name
/// ("--seed N") and one line on what it is.
class HelpFormatter : public CLI::Formatter {
public:
  HelpFormatter() {
    label("Positionals", "arguments");
    column_width(28);
  }
  /// The usage text of each command's CLI11 application.
  std::map<const CLI::App *, const char *> usages;

  std::string make_help(const CLI::App *app, std::string,
                        CLI::AppFormatMode mode) const override {
    auto it = usages.find(app);
    std::string out = it == usages.end() ? "" : it->second;
    return out + make_positionals(app) + make_groups(app, mode);
  }
  std::string make_option(const CLI::Option *opt,
                          bool positional) const override {
    // "PKG", "FILE...", "--seed N", "--data FILE...", "-h,--help".
    std::string name =
        positional ? opt->get_name(true, false) : opt->get_name(false, true);
    const std::string &value = opt->get_option_text();
    if (!value.empty())
      name += (positional ? "" : " ") + value;
    std::stringstream out;
    CLI::detail::format_help(out, name, opt->get_description(),
                             get_column_width());
    return out.str();
  }
};

/// Whether CLI11 took `word` for an option ("--key", "--key=value", "-k"),
/// rather than for a positional argument ("-1" is one).
bool looksLikeOption(const std::string &word) {
  return word.size() > 1 && word[0] == '-' &&
         !std::isdigit(static_cast<unsigned char>(word[1]));
}

/// "--seed" of "--seed=4".
std::string optionName(const std::string &word) {
  return word.substr(0, word.find('='));
}

/// `argv` with each "--key=" written as "--key" "". CLI11 reads "--key=" as
/// "--key" and takes the next word for its value; modrun reads an empty
/// value there, as from "--key ''" (docs/cli.md: "--key value" or
/// "--key=value"). A word that is the value of the option before it is left
/// as it is.
std::vector<std::string> splitEmptyValues(int argc, char **argv) {
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) {
    std::string word = argv[i];
    bool isValue =
        i > 0 && looksLikeOption(argv[i - 1]) && !std::strchr(argv[i - 1], '=');
    if (!isValue && word.size() > 3 && word.rfind("--", 0) == 0 &&
        word.find('=') == word.size() - 1) {
      words.push_back(word.substr(0, word.size() - 1));
      words.push_back("");
    } else {
      words.push_back(word);
    }
  }
  return words;
}

} // namespace

CommandLine &CommandLine::argument(const char *name, const char *help,
                                   const char *missing) {
  positional_ = app_->add_option(name)->description(help);
  missingPositional_ = missing;
  return *this;
}

CommandLine &CommandLine::arguments(const char *name, const char *help,
                                    const char *missing) {
  argument(name, help, missing);
  positional_->expected(1, -1)->allow_extra_args()->option_text("...");
  return *this;
}

CommandLine &CommandLine::option(const char *key, const char *value,
                                 const char *help) {
  // Every occurrence is kept, so that checkShape can refuse a second one
  // with modrun's message rather than CLI11's.
  options_[key] = app_->add_option(std::string("--") + key)
                      ->description(help)
                      ->option_text(value)
                      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return *this;
}

CommandLine &CommandLine::listOption(const char *key, const char *value,
                                     const char *help) {
  option(key, value, help);
  // At least one value; then every word up to the next option.
  options_[key]->expected(1, -1)->allow_extra_args();
  listValueNames_[key] = value;
  return *this;
}

void CommandLine::checkShape() const {
  // Words CLI11 could not place, in the order given: options this command
  // does not declare, and positional arguments past the last it takes.
  for (const std::string &word : app_->remaining()) {
    if (looksLikeOption(word))
      throw mistake(fmt::format("unknown option {}", optionName(word)));
    throw mistake(fmt::format("unexpected argument '{}'", word));
  }
  // A list option's first value is taken whatever it is; an option there
  // means the list was left empty ("--data --out c").
  for (const auto &[key, valueName] : listValueNames_)
    for (const std::string &value : options_.at(key)->results())
      if (looksLikeOption(value))
        throw mistake(fmt::format("option --{} needs a value", key));
  std::set<const CLI::Option *> seen;
  for (const CLI::Option *opt : app_->parse_order())
    if (!seen.insert(opt).second)
      for (const auto &[key, declaredOpt] : options_)
        if (declaredOpt == opt && !listValueNames_.count(key))
          throw mistake(fmt::format("option --{} given twice", key));
  if (positional_ && positional_->count() == 0)
    throw mistake(missingPositional_);
}

const std::string &CommandLine::argument() const {
  return positional_->results().front();
}

const std::vector<std::string> &CommandLine::arguments() const {
  return positional_->results();
}

CLI::Option &CommandLine::declared(const std::string &key) const {
  auto it = options_.find(key);
  if (it == options_.end())
    throw std::logic_error("modrun: option --" + key + " is not declared");
  return *it->second;
}

bool CommandLine::has(const std::string &key) const {
  return declared(key).count() > 0;
}

const std::string &CommandLine::text(const std::string &key) const {
  return declared(key).results().front();
}

const std::string &CommandLine::require(const std::string &key) const {
  if (!has(key))
    throw mistake(fmt::format("missing --{}", key));
  return text(key);
}

const std::vector<std::string> &
CommandLine::requireList(const std::string &key) const {
  if (!has(key))
    throw mistake(fmt::format("missing --{} {}", key, listValueNames_.at(key)));
  return declared(key).results();
}

std::optional<uint64_t> CommandLine::integer(const std::string &key,
                                             uint64_t minimum,
                                             uint64_t maximum) const {
  if (!has(key))
    return std::nullopt;
  const std::string &value = text(key);
  const char *what =
      minimum == 0 ? "a non-negative integer" : "a positive integer";
  if (value.empty() || value[0] == '-' || value[0] == '+')
    throw mistake(fmt::format("--{} must be {}, got '{}'", key, what, value));
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  bool tooLarge = errno == ERANGE || v > maximum;
  if (*end != '\0' || (errno != 0 && errno != ERANGE) ||
      (tooLarge && maximum == UINT64_MAX))
    throw mistake(
        fmt::format("--{} must be {} below 2^64, got '{}'", key, what, value));
  if (tooLarge)
    throw mistake(fmt::format("--{} must be an integer in [{}, {}], got '{}'",
                              key, minimum, maximum, value));
  if (v < minimum)
    throw mistake(fmt::format("--{} must be {}, got '{}'", key, what, value));
  return v;
}

std::optional<double> CommandLine::number(const std::string &key,
                                          double minimum, bool strict) const {
  if (!has(key))
    return std::nullopt;
  const std::string &value = text(key);
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || errno || *end || !std::isfinite(v) || v < minimum ||
      (strict && v == minimum))
    throw mistake(fmt::format("--{} must be a number {} {}, got '{}'", key,
                              strict ? ">" : ">=", minimum, value));
  return v;
}

Program::Program(const std::vector<Command> &commands) : commands_(commands) {
  root_ = std::make_unique<CLI::App>("", "modrun");
  auto formatter = std::make_shared<HelpFormatter>();
  // Inherited by the commands, so set before they are added: the help
  // layout; words CLI11 cannot place are kept for checkShape to name; and
  // one command at most, so that a command's positional argument spelt like
  // another command (a file named "show") stays an argument.
  root_->formatter(formatter);
  root_->allow_extras();
  root_->require_subcommand(0, 1);
  root_->option_defaults()->group("options");
  root_->set_help_flag(kHelpFlag, kHelpText);
  for (const Command &c : commands_) {
    CLI::App *app = root_->add_subcommand(c.name, c.summary);
    // Again, now in the "options" group the command inherited.
    app->set_help_flag(kHelpFlag, kHelpText);
    formatter->usages[app] = c.usage;
    apps_.push_back(app);
    lines_.push_back(std::make_unique<CommandLine>(*app, c.usage));
    c.declare(*lines_.back());
  }
  // "modrun help", as "modrun --help"; not listed.
  root_->add_subcommand("help", "")->group("");

  mainUsage_ = "usage: modrun <command> [options]\n\ncommands:\n";
  for (const Command &c : commands_)
    mainUsage_ += fmt::format("  {:<8} {}\n", c.name, c.summary);
  mainUsage_ += "\nRun 'modrun <command> --help' for the options of a "
                "command.\n";
}

Program::~Program() = default;

Program::Parsed Program::parse(int argc, char **argv) {
  bool help = false;
  auto chosen = [&]() -> const CLI::App * {
    std::vector<CLI::App *> apps = root_->get_subcommands();
    return apps.empty() ? nullptr : apps.front();
  };
  auto indexOf = [&](const CLI::App *app) -> size_t {
    return std::find(apps_.begin(), apps_.end(), app) - apps_.begin();
  };
  auto usageOf = [&](const CLI::App *app) {
    size_t i = indexOf(app);
    return i < lines_.size() ? std::string(lines_[i]->usage()) : mainUsage_;
  };
  std::vector<std::string> words = splitEmptyValues(argc, argv);
  std::vector<const char *> wordPointers;
  for (const std::string &word : words)
    wordPointers.push_back(word.c_str());
  try {
    root_->parse(static_cast<int>(wordPointers.size()), wordPointers.data());
  } catch (const CLI::CallForHelp &) {
    help = true; // thrown once every word is parsed
  } catch (const CLI::ArgumentMismatch &) {
    // Every option takes one value (a list at least one), and CLI11 takes
    // the next word as that value whatever it is: only an option that is
    // the last word lacks one.
    throw UsageError{
        fmt::format("option {} needs a value", optionName(words.back())),
        usageOf(chosen())};
  } catch (const CLI::ParseError &e) {
    // Not raised with the settings above; still a mistake on the line.
    throw UsageError{e.what(), usageOf(chosen())};
  }

  // Words CLI11 gave back to modrun itself: in place of the command or
  // before it, or after a command's "--" that ended its line.
  std::vector<std::string> stray = root_->remaining();
  const CLI::App *app = chosen();
  if (!stray.empty() && (!app || stray.front() == words[1])) {
    fmt::print(stderr, "modrun: unknown command '{}'\n\n{}", stray.front(),
               mainUsage_);
    return {nullptr, nullptr, 2};
  }
  if (!stray.empty())
    throw UsageError{fmt::format("unexpected argument '{}'", stray.front()),
                     usageOf(app)};
  if (!app || app->get_name() == "help") {
    // No command: the list of commands, on stderr as a mistake unless asked.
    bool asked = help || app;
    std::fputs(mainUsage_.c_str(), asked ? stdout : stderr);
    return {nullptr, nullptr, asked ? 0 : 2};
  }
  if (help) {
    std::fputs(app->help().c_str(), stdout);
    return {nullptr, nullptr, 0};
  }
  size_t i = indexOf(app);
  lines_[i]->checkShape();
  return {&commands_[i], lines_[i].get(), 0};
}

} // namespace modrun
