#include "core/owner_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace calo::core {
namespace {

/// What /proc/<pid>/stat says of a process: its state letter and start time (0 and 0 when it is gone).
struct ProcessStat {
  char state = 0;            ///< R, S, D, Z, ...
  uint64_t start_ticks = 0;  ///< field 22
};

ProcessStat stat_of(pid_t pid) {
  std::ifstream file(fmt::format("/proc/{}/stat", pid));
  const std::string stat((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto name_end = stat.rfind(')');  // the name may hold spaces and ')'; it ends at the last one
  if (name_end == std::string::npos) return {};
  std::istringstream fields(stat.substr(name_end + 1));
  ProcessStat result;
  std::string field;
  for (int number = 3; number <= 22 && fields >> field; ++number) {
    if (number == 3) result.state = field[0];
    if (number == 22) result.start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  }
  return result;
}

/// The identity written in the lock file; pid 0 when it holds none.
ProcessIdentity read_holder(int fd) {
  char text[64] = {};
  if (pread(fd, text, sizeof(text) - 1, 0) <= 0) return {};
  ProcessIdentity holder;
  std::istringstream fields(text);
  if (!(fields >> holder.pid >> holder.start_ticks)) return {};
  return holder;
}

/// Replaces the lock file's text with `identity`.
void write_holder(int fd, const std::filesystem::path& path, const ProcessIdentity& identity) {
  const std::string text = fmt::format("{} {}\n", identity.pid, identity.start_ticks);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw RuntimeFailure(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
}

/// Opens (creating) the lock file, refusing anything but a regular file.
int open_lock_file(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) throw RuntimeFailure(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    throw InputError(
        fmt::format("{} is not a regular file; remove it or give another directory", path.string()));
  }
  return fd;
}

}  // namespace

ProcessIdentity this_process() {
  return {getpid(), stat_of(getpid()).start_ticks};
}

bool is_running(const ProcessIdentity& identity) {
  if (identity.pid <= 0 || (kill(identity.pid, 0) != 0 && errno != EPERM)) return false;
  const ProcessStat stat = stat_of(identity.pid);
  if (stat.state == 0 || stat.state == 'Z') return false;  // gone, or ended and not yet reaped
  return identity.start_ticks == 0 || stat.start_ticks == identity.start_ticks;
}

OwnerLock::OwnerLock(const std::filesystem::path& path, const std::string& what, int wait_ms,
                     const WaitNotice& notice)
    : fd_(open_lock_file(path)) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  bool told = false;
  while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int lock_errno = errno;
    if (lock_errno == EINTR) continue;
    if (lock_errno != EWOULDBLOCK) {
      close(fd_);
      throw RuntimeFailure(fmt::format("cannot lock {}: {}", path.string(), std::strerror(lock_errno)));
    }
    const ProcessIdentity holder = read_holder(fd_);
    std::string refusal;
    if (is_running(holder)) {
      refusal = fmt::format(
          "{} is in use by process {}, which is still running; wait for it to end or stop it "
          "(kill {})",
          what, holder.pid, holder.pid);
    } else if (std::chrono::steady_clock::now() >= deadline) {
      refusal = fmt::format(
          "{} is still locked by processes that process {} (gone) started, {} s after it went; "
          "`fuser {}` lists them",
          what, holder.pid, wait_ms / 1000, path.string());
    }
    if (!refusal.empty()) {
      close(fd_);
      throw InputError(refusal);
    }
    if (!told && notice) notice(holder);
    told = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  previous_ = read_holder(fd_);
  write_holder(fd_, path, this_process());
}

OwnerLock::~OwnerLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace calo::core
