#include "core/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace calo::core {
namespace {

/// A NULL-terminated array of pointers into `strings` (which must outlive it).
std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& text : strings) pointers.push_back(text.data());
  pointers.push_back(nullptr);
  return pointers;
}

/// In the child, before exec: only async-signal-safe calls. Returns false when an output cannot be opened.
bool set_up_child(const ChildSpec& spec, pid_t parent) {
  if (spec.dies_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
  }
  int out = spec.stdout_fd;
  int err = spec.stderr_fd;
  if (out < 0 && !spec.stdout_path.empty())
    out = open(spec.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err < 0 && !spec.stderr_path.empty())
    err = open(spec.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if ((out < 0 && !spec.stdout_path.empty()) || (err < 0 && !spec.stderr_path.empty())) return false;
  if (out >= 0) dup2(out, STDOUT_FILENO);
  if (err >= 0) dup2(err, STDERR_FILENO);
  if (spec.reset_signals) {
    signal(SIGPIPE, SIG_DFL);  // ignored dispositions survive exec; handled ones are reset by it
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, nullptr);
  }
  return true;
}

}  // namespace

pid_t spawn_child(const ChildSpec& spec) {
  // Everything the child needs is built before fork: after it only async-signal-safe calls run.
  std::vector<std::string> arguments = spec.argv;
  std::vector<char*> argv = c_strings(arguments);
  std::vector<std::string> environment = spec.environment.value_or(std::vector<std::string>{});
  std::vector<char*> envp = c_strings(environment);
  char** child_environment = spec.environment ? envp.data() : environ;
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    throw RuntimeFailure(fmt::format(
        "{}: {}{}", spec.failure_context.empty() ? "cannot start a process" : spec.failure_context,
        std::strerror(errno), spec.failure_hint));
  }
  if (child == 0) {
    if (set_up_child(spec, parent)) execve(spec.executable.c_str(), argv.data(), child_environment);
    const char message[] = "calo: exec failed\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, message, sizeof(message) - 1);
    _exit(127);
  }
  return child;
}

}  // namespace calo::core
