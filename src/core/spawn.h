// One way to start a child process: fork, set up its output and signals, exec. Used by calo bench's local
// ranks, calo sweep's points and calo record's job, which differ only in what the child inherits.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace calo::core {

/// What the child runs and inherits.
struct ChildSpec {
  std::string executable;         ///< path passed to exec (no PATH search)
  std::vector<std::string> argv;  ///< arguments, argv[0] included
  /// The child's whole environment ("KEY=value"); nullopt = the parent's.
  std::optional<std::vector<std::string>> environment;
  int stdout_fd = -1;             ///< >= 0: becomes the child's stdout
  int stderr_fd = -1;             ///< >= 0: becomes the child's stderr
  std::string stdout_path;        ///< non-empty (and stdout_fd < 0): truncated and made the child's stdout
  std::string stderr_path;        ///< non-empty (and stderr_fd < 0): truncated and made the child's stderr
  bool dies_with_parent = false;  ///< SIGTERM to the child when the parent dies (PR_SET_PDEATHSIG)
  bool reset_signals = false;     ///< SIGPIPE to its default and an empty signal mask before exec
  std::string failure_context;    ///< what a failed fork names, e.g. "cannot fork a rank"
  std::string failure_hint;       ///< appended to a failed fork's message, e.g. "; fewer --jobs may help"
};

/// Forks and execs `spec`; returns the child's pid. The child exits 127 when exec (or opening an output file)
/// fails, after writing "calo: exec failed" to its stderr. Throws RuntimeFailure "<context>: <errno
/// text><hint>" when fork fails.
pid_t spawn_child(const ChildSpec& spec);

}  // namespace calo::core
