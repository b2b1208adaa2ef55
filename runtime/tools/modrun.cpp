//===- modrun.cpp - Command-line front end of the modc runtime -----------===//
//
// modrun init | forward | grad | train | sample | eval | info: thin wrappers
// over modrt::Package, modrt::train and modrt::generate so that a compiled
// package can be used, trained and sampled from the shell; modrun
// tokenize | show: the byte-level tokenizer of docs/model-format.md section 6
// and a safetensors summary (docs/cli.md). Usage errors exit 2, runtime
// errors (modrt::Error) print "modrun: error: <msg>" and exit 1
// (docs/errors.md). Outputs are written atomically, so a failed run leaves
// no file behind.
//
// This file parses the line (CommandLine.h, on CLI11), runs the command and
// reports its errors; each command lives in its own file (Commands.h).
//
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "modrt/Error.h"
#include "modrt/Training.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>

using namespace modrt;
using namespace modrun;

namespace {

/// The rank of this process in a job with several ranks, else -1.
int rankOfJob() {
  if (gJob.comm)
    return gJob.comm->size() > 1 ? gJob.comm->rank() : -1;
  try {
    std::optional<LaunchInfo> launch = launchInfoFromEnvironment();
    return launch && launch->size > 1 ? launch->rank : -1;
  } catch (const Error &) {
    return -1;
  }
}

/// Prints "modrun: MESSAGE" and the command's usage. In a job, rank 0
/// does; the others name themselves in one line, since their command line
/// may differ (mpirun A : B).
void reportUsageError(const UsageError &e) {
  int rank = rankOfJob();
  if (rank <= 0)
    fmt::print(stderr, "modrun: {}\n\n{}", e.message, e.usage);
  else
    fmt::print(stderr, "modrun: rank {}: {}\n", rank, e.message);
}

/// Prints "modrun: error: MSG". In a job, an error of this rank alone
/// names the rank (and goes to its --rank-log too); a collective one is
/// printed by rank 0 only.
void reportError(const std::string &message, bool collective) {
  int rank = rankOfJob();
  std::string text;
  if (rank < 0 || (collective && rank == 0))
    text = fmt::format("modrun: error: {}\n", message);
  else if (!collective)
    text = fmt::format(
        "modrun: error: rank {}{}: {}\n", rank,
        gJob.comm ? fmt::format(" of {}", gJob.comm->size()) : "", message);
  if (!text.empty() && (!collective || rank <= 0))
    std::fputs(text.c_str(), stderr);
  if (gJob.rankLog)
    std::fputs(fmt::format("modrun: error: {}\n", message).c_str(),
               gJob.rankLog);
  std::fflush(stderr);
  if (gJob.rankLog)
    std::fflush(gJob.rankLog);
}

/// Ends every rank of a job of several with `status` (this one included).
void abortJob(int status) {
  if (gJob.comm && gJob.comm->size() > 1)
    gJob.comm->abort(status);
}

} // namespace

int main(int argc, char **argv) {
  try {
    Program program({kInitCommand, kForwardCommand, kGradCommand, kTrainCommand,
                     kSampleCommand, kEvalCommand, kInfoCommand,
                     kTokenizeCommand, kShowCommand});
    Program::Parsed parsed = program.parse(argc, argv);
    if (!parsed.command)
      return parsed.status;
    int status = parsed.command->run(*parsed.line);
    gJob.comm.reset(); // MPI_Finalize while the process is whole
    return status;
  } catch (const UsageError &e) {
    reportUsageError(e);
    abortJob(2);
    return 2;
  } catch (const CollectiveError &e) {
    // Every rank raised it together (docs/distributed.md): rank 0 reports,
    // and the ranks end normally.
    reportError(e.what(), /*collective=*/true);
    gJob.comm.reset();
    return 1;
  } catch (const std::exception &e) {
    // Error, or not expected (bad_alloc and the like), but never a crash.
    // On one rank of a job, the rank names itself and ends the job.
    reportError(e.what(), /*collective=*/false);
    abortJob(1);
    return 1;
  }
}
