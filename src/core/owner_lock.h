// A lock file that names its holder: flock'd while held, holding "<pid> <start ticks>" of the process that
// took it, so a refusal names a live holder, and a holder that has gone is told apart from a later process
// given the same pid (its start time differs). Used by calo sweep, one lock per campaign directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace calo::core {

/// A process as a lock file names it.
struct ProcessIdentity {
  pid_t pid = 0;             ///< process id; 0: none
  uint64_t start_ticks = 0;  ///< start time in clock ticks after boot (/proc/<pid>/stat field 22)
};

/// This process's identity.
ProcessIdentity this_process();

/// True when the process `identity` names still runs (the same pid with the same start time).
bool is_running(const ProcessIdentity& identity);

/// An exclusive flock on a file, held while this object lives and while any process that inherited its
/// descriptor (see ChildSpec::keeper_holds_fd) keeps it open.
class OwnerLock {
 public:
  /// Called once when the holder named in the file has gone but its lock is still held (processes it left are
  /// still ending); the lock is then waited for.
  using WaitNotice = std::function<void(const ProcessIdentity& gone_holder)>;

  /// Takes the lock on `path` (created if missing) and writes this process's identity into it. InputError
  /// "<what> is in use by process N ..." while the holder the file names runs; when that holder has gone but
  /// the lock is still held, waits up to `wait_ms` (telling `notice`), then InputError naming it.
  OwnerLock(const std::filesystem::path& path, const std::string& what, int wait_ms,
            const WaitNotice& notice);
  ~OwnerLock();
  OwnerLock(const OwnerLock&) = delete;
  OwnerLock& operator=(const OwnerLock&) = delete;

  /// The locked file's descriptor (close-on-exec); owned by this object.
  int descriptor() const { return fd_; }
  /// The process the file named before this one took it (pid 0: none; it may have ended normally).
  const ProcessIdentity& previous_holder() const { return previous_; }

 private:
  int fd_ = -1;
  ProcessIdentity previous_;
};

}  // namespace calo::core
