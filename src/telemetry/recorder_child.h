// Internal to `calo record` (recorder.cpp, recorder_child.cpp): the recorded command as a child process.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "telemetry/markers.h"
#include "telemetry/recorder.h"

namespace calo::telemetry {

/// The command to run: its words and the executable found on PATH.
struct ResolvedCommand {
  std::vector<std::string> words;  ///< program and arguments, as given
  std::string executable;          ///< path of the program (words[0] searched on PATH)
};

/// Checks that options.command names a program and finds it on PATH; throws InputError if it does not.
ResolvedCommand resolve_command(const RecordOptions& options);

/// How the child ended.
struct ChildOutcome {
  int exit_code = 0;      ///< the child's exit code (128+N if it died of signal N)
  double duration_s = 0;  ///< from start to exit
};

/// Starts the command with its output on pipes, tees both (to the terminal if options.echo_output, and to
/// stdout.log/stderr.log in `run_dir`; step lines matching `patterns` go to `assembler`), and waits for it.
/// Signals sent to calo meanwhile are forwarded to the child.
ChildOutcome run_child(const ResolvedCommand& command, const RecordOptions& options,
                       const std::filesystem::path& run_dir, const std::filesystem::path& socket_path,
                       const std::vector<LinePattern>& patterns, SpanAssembler& assembler);

/// The last signal forwarded to the child (0 if none).
int forwarded_signal();

}  // namespace calo::telemetry
