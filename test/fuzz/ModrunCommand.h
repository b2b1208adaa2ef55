//===- ModrunCommand.h - Run one modrun command in a fuzz target -*- C++ -*-===//
//
// The runtime fuzz targets that drive modrun (tokens, checkpoint) link its
// command sources (runtime/tools, but not modrun.cpp's main) and run a
// command as `modrun NAME ARGS...` would, parsed by modrun's own command
// line. Errors end the run quietly: the fuzzer looks for crashes, and the
// messages are docs/errors.md's, checked elsewhere.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_TEST_FUZZ_MODRUNCOMMAND_H
#define MODC_TEST_FUZZ_MODRUNCOMMAND_H

#include "../../runtime/tools/CommandLine.h"
#include "../../runtime/tools/Commands.h"
#include "modrt/Error.h"

#include <string>
#include <vector>

namespace fuzz {

/// Runs `command` on `args` (its arguments, without "modrun NAME").
inline void runModrun(const modrun::Command &command,
                      std::vector<std::string> args) {
  args.insert(args.begin(), {"modrun", command.name});
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  try {
    modrun::Program program({command});
    modrun::Program::Parsed parsed =
        program.parse(static_cast<int>(argv.size()), argv.data());
    if (parsed.command)
      parsed.command->run(*parsed.line);
  } catch (const modrt::Error &) {
  } catch (const modrun::UsageError &) {
  }
}

} // namespace fuzz

#endif // MODC_TEST_FUZZ_MODRUNCOMMAND_H
