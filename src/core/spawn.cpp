// Starting a child, and the keeper that ends its whole process tree with calo (see spawn.h). Everything after
// fork, in the keeper and in the child before exec, makes only async-signal-safe calls: calo has threads, and
// a lock one of them held at fork would never be released in the copy.
#include "core/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <mutex>

#include "core/error.h"
#include "core/output_file.h"

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

/// What a child needs after fork, built before it.
struct ExecArguments {
  char* const* argv;         ///< the command's arguments
  char* const* environment;  ///< the command's environment
  sigset_t mask;             ///< calo's signal mask before spawn_child blocked any signal
};

/// In the child, before exec: only async-signal-safe calls. Its output files were opened by spawn_child.
void set_up_child(const ChildSpec& spec, pid_t parent, const sigset_t& mask) {
  if (parent > 0) {  // under a keeper, which only a SIGKILL ends before its command: the command goes with it
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
  }
  if (spec.stdout_fd >= 0) dup2(spec.stdout_fd, STDOUT_FILENO);
  if (spec.stderr_fd >= 0) dup2(spec.stderr_fd, STDERR_FILENO);
  sigset_t child_mask = mask;
  if (spec.reset_signals) {
    signal(SIGPIPE, SIG_DFL);  // ignored dispositions survive exec; handled ones are reset by it
    sigemptyset(&child_mask);
  }
  sigprocmask(SIG_SETMASK, &child_mask, nullptr);
}

/// In a fresh child: sets it up and execs the command; never returns (exit 127 when that fails).
[[noreturn]] void exec_command(const ChildSpec& spec, const ExecArguments& exec, pid_t parent) {
  set_up_child(spec, parent, exec.mask);
  execve(spec.executable.c_str(), exec.argv, exec.environment);
  const char message[] = "calo: exec failed\n";
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, message, sizeof(message) - 1);
  _exit(127);
}

// ---- calo's side: the lifeline, a pipe whose write end only calo holds ----

/// Both ends of this process's lifeline (close-on-exec) and the process that made it.
struct Lifeline {
  int read_fd = -1;
  int write_fd = -1;
  pid_t owner = 0;
};

std::mutex g_lifeline_mutex;
Lifeline g_lifeline;

/// This process's lifeline, made on first use (and again in a forked copy, which must not share its
/// parent's).
Lifeline lifeline() {
  std::lock_guard<std::mutex> lock(g_lifeline_mutex);
  if (g_lifeline.owner == getpid()) return g_lifeline;
  if (g_lifeline.owner != 0) {
    close(g_lifeline.read_fd);
    close(g_lifeline.write_fd);
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw RuntimeFailure(
        fmt::format("cannot create a pipe to watch child processes: {}", std::strerror(errno)));
  g_lifeline = {fds[0], fds[1], getpid()};
  return g_lifeline;
}

// ---- the keeper: a forked copy of calo, async-signal-safe calls only ----

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr int kMaxProcesses = 1 << 15;  // processes the keeper looks at in /proc; more are not seen

volatile sig_atomic_t g_keeper_command_pid = 0;  // in the keeper: the command, target of forwarded signals

/// In the keeper: forwards a signal sent with kill() to the command; a terminal's (si_code > 0) reached it.
void keeper_forward_signal(int signal_number, siginfo_t* info, void*) {
  const pid_t command = g_keeper_command_pid;
  if (info != nullptr && info->si_code <= 0 && command > 0) kill(command, signal_number);
}

/// In the keeper: SIGCHLD only interrupts the wait.
void keeper_wake(int) {}

/// A pid written in decimal at the start of `text`; 0 when it does not start with a digit.
pid_t parse_pid(const char* text) {
  pid_t value = 0;
  for (; *text >= '0' && *text <= '9'; ++text) value = value * 10 + (*text - '0');
  return value;
}

/// Calls `visit(name)` for every entry of the directory `path` (getdents64: no allocation); false when it
/// cannot be opened.
template <typename Visit>
bool for_each_entry(const char* path, Visit visit) {
  const int directory = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory < 0) return false;
  alignas(dirent64) char buffer[8192];
  ssize_t size = 0;
  while ((size = getdents64(directory, buffer, sizeof(buffer))) > 0) {
    for (ssize_t offset = 0; offset < size;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + offset);
      visit(entry->d_name, directory);
      offset += entry->d_reclen;
    }
  }
  close(directory);
  return true;
}

/// The parent of process `pid_text` (its /proc/<pid>/stat), 0 when it is gone.
pid_t parent_of(const char* pid_text) {
  char path[64] = "/proc/";
  std::size_t length = std::strlen(path);
  for (const char* digit = pid_text; *digit != '\0' && length < 40; ++digit) path[length++] = *digit;
  std::memcpy(path + length, "/stat", 6);
  const int file = open(path, O_RDONLY | O_CLOEXEC);
  if (file < 0) return 0;
  char stat[512];
  const ssize_t size = read(file, stat, sizeof(stat) - 1);
  close(file);
  if (size <= 0) return 0;
  stat[size] = '\0';
  const char* close_paren = std::strrchr(stat, ')');  // the name may hold ')' and spaces; it ends at the last
  if (close_paren == nullptr || close_paren + 4 >= stat + size) return 0;
  return parse_pid(close_paren + 4);  // ") S 1234 ..."
}

/// Sends `signal_number` to every process descended from this one, as /proc shows them now; returns how many.
int signal_descendants(int signal_number) {
  static pid_t pids[kMaxProcesses], parents[kMaxProcesses], descendants[kMaxProcesses];
  int count = 0;
  const bool listed = for_each_entry("/proc", [&](const char* name, int) {
    const pid_t pid = parse_pid(name);
    if (pid <= 0 || count >= kMaxProcesses) return;
    pids[count] = pid;
    parents[count++] = parent_of(name);
  });
  if (!listed) return 0;
  int found = 0;
  descendants[found++] = getpid();
  for (int searched = 0; searched < found; ++searched) {  // breadth first: children of descendants[searched]
    for (int index = 0; index < count; ++index) {
      if (parents[index] == descendants[searched] && found < kMaxProcesses)
        descendants[found++] = pids[index];
    }
  }
  for (int index = 1; index < found; ++index) kill(descendants[index], signal_number);
  return found - 1;
}

/// Closes what calo opened close-on-exec (the command would not get it either) but the descriptors in `keep`:
/// a keeper holding a copy of, say, another child's pipe would keep that pipe from reporting end-of-file.
void close_exec_only_descriptors(const int (&keep)[4]) {
  for_each_entry("/proc/self/fd", [&keep](const char* name, int directory) {
    const int fd = parse_pid(name);
    if (fd <= STDERR_FILENO || fd == directory) return;  // "." and ".." parse as 0
    for (const int kept : keep)
      if (fd == kept) return;
    const int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) != 0) close(fd);
  });
}

/// Monotonic time in milliseconds.
int64_t now_ms() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

/// What the keeper knows of its command.
struct KeeperState {
  pid_t command = 0;    ///< the command's pid
  bool ended = false;   ///< it has been reaped
  int wait_status = 0;  ///< how it ended (a waitpid status)
};

/// Reaps every ended child (the command, or an orphan of its tree) without waiting; false when none is left.
bool reap_children(KeeperState& state) {
  while (true) {
    int wait_status = 0;
    const pid_t done = waitpid(-1, &wait_status, WNOHANG);
    if (done > 0 && done == state.command) {
      state.ended = true;
      state.wait_status = wait_status;
    }
    if (done > 0) continue;
    return !(done < 0 && errno == ECHILD);
  }
}

/// Ends every process below the keeper: SIGTERM, then SIGKILL after kTreeGraceMs; returns once none is left,
/// or kTreeGraceMs after the SIGKILL (a process stuck in the kernel, or one /proc does not show).
void end_tree(KeeperState& state) {
  signal_descendants(SIGTERM);
  const int64_t kill_at_ms = now_ms() + kTreeGraceMs;
  while (reap_children(state)) {
    const int64_t time_ms = now_ms();
    if (time_ms >= kill_at_ms + kTreeGraceMs) return;
    if (time_ms >= kill_at_ms) signal_descendants(SIGKILL);
    const timespec pause{0, 10'000'000};
    nanosleep(&pause, nullptr);
  }
}

/// Exits as a command that ended with `wait_status` did: the same code, or the same signal (without a core).
[[noreturn]] void exit_as(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int signal_number = WTERMSIG(wait_status);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigaction(signal_number, &default_action, nullptr);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal_number);
    sigprocmask(SIG_UNBLOCK, &only, nullptr);
    kill(getpid(), signal_number);
    _exit(128 + signal_number);
  }
  _exit(WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1);
}

/// Installs the keeper's handlers: forwarding, and SIGCHLD to wake its wait.
void install_keeper_handlers() {
  struct sigaction forward {};
  forward.sa_sigaction = keeper_forward_signal;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&forward.sa_mask);
  for (const int signal_number : kForwardedSignals) sigaction(signal_number, &forward, nullptr);
  struct sigaction wake {};
  wake.sa_handler = keeper_wake;
  sigemptyset(&wake.sa_mask);
  sigaction(SIGCHLD, &wake, nullptr);
}

/// The keeper (see spawn_child), started with SIGCHLD and the forwarded signals blocked; never returns.
[[noreturn]] void run_keeper(const ChildSpec& spec, const ExecArguments& exec, int lifeline_read) {
  close_exec_only_descriptors({lifeline_read, spec.stdout_fd, spec.stderr_fd, spec.keeper_holds_fd});
  prctl(PR_SET_NAME, "calo-keeper");
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  install_keeper_handlers();
  pollfd lifeline_watch{lifeline_read, POLLIN, 0};
  if (poll(&lifeline_watch, 1, 0) != 0) _exit(126);  // calo has gone already
  KeeperState state;
  const pid_t keeper = getpid();
  state.command = fork();
  if (state.command == 0) {
    close(lifeline_read);
    if (spec.keeper_holds_fd >= 0) close(spec.keeper_holds_fd);
    exec_command(spec, exec, keeper);
  }
  if (state.command < 0) {
    const char message[] = "calo: cannot start the command: its keeper could not fork\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, message, sizeof(message) - 1);
    _exit(127);
  }
  g_keeper_command_pid = state.command;
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (const int signal_number : kForwardedSignals) sigaddset(&forwarded, signal_number);
  sigprocmask(SIG_UNBLOCK, &forwarded, nullptr);
  sigset_t wait_mask;  // while waiting: everything as now, but SIGCHLD may interrupt
  sigprocmask(SIG_BLOCK, nullptr, &wait_mask);
  sigdelset(&wait_mask, SIGCHLD);
  while (reap_children(state) && !state.ended) {
    lifeline_watch.revents = 0;
    if (ppoll(&lifeline_watch, 1, nullptr, &wait_mask) > 0) break;  // end-of-file: calo has gone
  }
  end_tree(state);
  exit_as(state.ended ? state.wait_status : 1);
}

/// The output files a ChildSpec names by path, opened by calo (the one output-file policy,
/// core::open_log_file) before fork; closed here once the child has its copies.
class OpenedOutputs {
 public:
  /// Opens `spec`'s stdout_path / stderr_path (where no descriptor is given) into `opened`'s descriptors.
  OpenedOutputs(const ChildSpec& spec, ChildSpec& opened) {
    if (spec.stdout_fd < 0 && !spec.stdout_path.empty())
      opened.stdout_fd = out_ = open_log_file(spec.stdout_path, spec.output_flag);
    if (spec.stderr_fd < 0 && !spec.stderr_path.empty())
      opened.stderr_fd = err_ = open_log_file(spec.stderr_path, spec.output_flag);
  }
  ~OpenedOutputs() {
    if (out_ >= 0) close(out_);
    if (err_ >= 0) close(err_);
  }
  OpenedOutputs(const OpenedOutputs&) = delete;
  OpenedOutputs& operator=(const OpenedOutputs&) = delete;

 private:
  int out_ = -1;
  int err_ = -1;
};

}  // namespace

pid_t spawn_child(const ChildSpec& given) {
  ChildSpec spec = given;
  const OpenedOutputs outputs(given, spec);  // refused (InputError) before anything starts
  // Everything the child needs is built before fork: after it only async-signal-safe calls run.
  std::vector<std::string> arguments = spec.argv;
  std::vector<char*> argv = c_strings(arguments);
  std::vector<std::string> environment = spec.environment.value_or(std::vector<std::string>{});
  std::vector<char*> envp = c_strings(environment);
  ExecArguments exec{argv.data(), spec.environment ? envp.data() : environ, {}};
  const int lifeline_read = spec.dies_with_parent ? lifeline().read_fd : -1;
  // The keeper starts with its signals blocked until its own handlers are in place.
  sigset_t blocked;
  sigemptyset(&blocked);
  if (spec.dies_with_parent) {
    for (const int signal_number : kForwardedSignals) sigaddset(&blocked, signal_number);
    sigaddset(&blocked, SIGCHLD);
  }
  pthread_sigmask(SIG_BLOCK, &blocked, &exec.mask);
  const pid_t child = fork();
  const int fork_errno = errno;
  if (child == 0) {
    if (spec.dies_with_parent) run_keeper(spec, exec, lifeline_read);
    exec_command(spec, exec, 0);
  }
  pthread_sigmask(SIG_SETMASK, &exec.mask, nullptr);
  if (child < 0) {
    throw RuntimeFailure(fmt::format(
        "{}: {}{}", spec.failure_context.empty() ? "cannot start a process" : spec.failure_context,
        std::strerror(fork_errno), spec.failure_hint));
  }
  return child;
}

}  // namespace calo::core
