// One way to start a child process, and one policy for the processes it starts in turn: fork, set up its
// output and signals, exec. Used by calo bench's local ranks, calo sweep's points and calo record's job,
// which differ only in what the child inherits. With dies_with_parent no process of the child's tree outlives
// calo, whether calo exits, crashes or is killed with SIGKILL (see spawn_child).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace calo::core {

/// How long a process tree that is being ended gets between SIGTERM and SIGKILL, in milliseconds.
inline constexpr int kTreeGraceMs = 3000;

/// What the child runs and inherits.
struct ChildSpec {
  std::string executable;         ///< path passed to exec (no PATH search)
  std::vector<std::string> argv;  ///< arguments, argv[0] included
  /// The child's whole environment ("KEY=value"); nullopt = the parent's.
  std::optional<std::vector<std::string>> environment;
  int stdout_fd = -1;  ///< >= 0: becomes the child's stdout
  int stderr_fd = -1;  ///< >= 0: becomes the child's stderr
  /// Non-empty (and stdout_fd < 0): created or truncated and made the child's stdout; only a regular file
  /// or nothing may be there (core::open_log_file: a symlink is refused, not followed).
  std::string stdout_path;
  std::string stderr_path;            ///< as stdout_path, for the child's stderr
  std::string output_flag = "--out";  ///< the option that named the folder of stdout_path / stderr_path
  /// The child and every process it starts end with calo and with the child itself: it runs under a keeper.
  bool dies_with_parent = false;
  /// >= 0 (with dies_with_parent): kept open by the keeper until the whole tree has ended (e.g. a flock'd
  /// lock, which is then held exactly as long as a process of the tree lives); not passed to the child.
  int keeper_holds_fd = -1;
  bool reset_signals = false;   ///< SIGPIPE to its default and an empty signal mask before exec
  std::string failure_context;  ///< what a failed fork names, e.g. "cannot fork a rank"
  std::string failure_hint;     ///< appended to a failed fork's message, e.g. "; fewer --jobs may help"
};

/// Forks and execs `spec`; returns the pid to wait for and to signal. The child exits 127 when exec fails,
/// after writing "calo: exec failed" to its stderr. Throws InputError naming the path and output_flag, before
/// anything starts, when an output path holds anything but a regular file or cannot be opened; RuntimeFailure
/// "<context>: <errno text><hint>" when fork fails.
///
/// With dies_with_parent the pid is a keeper's: a fork of calo (no exec, named "calo-keeper") that is a child
/// subreaper (the tree's orphans become its children, not init's) and runs the command as its only child. It
/// forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT sent with kill() to the command (a terminal's signals reach
/// the command's process group directly). It ends the tree, SIGTERM to every descendant and SIGKILL
/// kTreeGraceMs later to those left, when the command has exited or when calo has gone (exit, crash or
/// SIGKILL: a pipe only calo holds the write end of reports end-of-file), then exits as the command did (its
/// code, or its signal).
pid_t spawn_child(const ChildSpec& spec);

}  // namespace calo::core
