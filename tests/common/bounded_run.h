// Runs a program (the `calo` under test) as a real child process under the bounds a suite sets: a deadline,
// an address-space limit (RLIMIT_AS, as `prlimit --as` or `ulimit -v` set) and environment variables added to
// the inherited ones; returns its exit code, stdout + stderr, wall time and peak resident set (wait4's
// ru_maxrss). Shared by the suites that measure what a command costs (hostile inputs, startup footprint).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace calo::testing {

/// The bounds and setting of one run_bounded call.
struct RunBounds {
  double deadline_s = 60;        ///< killed (SIGKILL) after this many seconds of wall time
  long address_space_bytes = 0;  ///< > 0: RLIMIT_AS of the child, in bytes
  std::filesystem::path cwd;     ///< the child's working directory; empty: this process's
  /// Variables (NAME, value) set in the child's environment over the inherited ones.
  std::vector<std::pair<std::string, std::string>> environment;
};

/// How one bounded run ended.
struct BoundedOutcome {
  int exit_code = -1;         ///< -1 when killed (by the deadline or a signal)
  std::string output;         ///< stdout + stderr
  double seconds = 0;         ///< wall time
  long max_resident_kib = 0;  ///< peak resident set (ru_maxrss), in KiB
};

/// This process's environment with `overrides` set (NAME=value strings; a name given replaces its entry).
inline std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    bool replaced = false;
    for (const auto& [name, value] : overrides) replaced = replaced || text.rfind(name + "=", 0) == 0;
    if (!replaced) entries.push_back(text);
  }
  for (const auto& [name, value] : overrides) entries.push_back(name + "=" + value);
  return entries;
}

/// Runs `executable` with `args` under `bounds`; its output goes through a file of its own in the temporary
/// folder, read back and removed. Everything the child uses is built before fork.
inline BoundedOutcome run_bounded(const std::string& executable, const std::vector<std::string>& args,
                                  const RunBounds& bounds) {
  static int run_count = 0;
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() /
      ("calo-bounded-" + std::to_string(getpid()) + "-" + std::to_string(++run_count) + ".txt");
  std::vector<std::string> argv_text = {executable};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& text : argv_text) argv.push_back(text.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment_text = environment_with(bounds.environment);
  std::vector<char*> envp;
  for (auto& text : environment_text) envp.push_back(text.data());
  envp.push_back(nullptr);
  const rlimit limit{static_cast<rlim_t>(bounds.address_space_bytes),
                     static_cast<rlim_t>(bounds.address_space_bytes)};
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    if (!bounds.cwd.empty() && chdir(bounds.cwd.c_str()) != 0) _exit(127);
    if (bounds.address_space_bytes > 0 && setrlimit(RLIMIT_AS, &limit) != 0) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execve(executable.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  BoundedOutcome outcome;
  int status = 0;
  rusage usage{};
  while (wait4(child, &status, WNOHANG, &usage) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(bounds.deadline_s)) {
      kill(child, SIGKILL);
      wait4(child, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.max_resident_kib = usage.ru_maxrss;
  std::ifstream text(log);
  std::stringstream buffer;
  buffer << text.rdbuf();
  outcome.output = buffer.str();
  std::filesystem::remove(log);
  return outcome;
}

}  // namespace calo::testing
