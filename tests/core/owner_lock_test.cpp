// core::OwnerLock with real processes: a running holder is refused by its pid, a free lock names the holder
// before, and a lock whose holder was killed while the process tree it started still holds the lock (through
// ChildSpec::keeper_holds_fd) is waited for until that tree has ended, or refused after the wait.
#include "core/owner_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "../common/processes.h"
#include "../common/scratch.h"
#include "core/error.h"
#include "core/spawn.h"

namespace calo::core {
namespace {

namespace fs = std::filesystem;

TEST(OwnerLock, ARunningHolderIsRefusedByItsPidAndAFreeLockNamesThePreviousOne) {
  const fs::path path = calo::testing::scratch_path("owner-lock-live");
  fs::remove(path);
  {
    const OwnerLock first(path, "the campaign", 1000, nullptr);
    EXPECT_EQ(first.previous_holder().pid, 0);
    try {
      const OwnerLock second(path, "the campaign", 1000, nullptr);
      FAIL() << "a lock held by a running process was taken again";
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("the campaign is in use by process " + std::to_string(getpid())),
                std::string::npos)
          << message;
    }
  }
  const OwnerLock again(path, "the campaign", 1000, nullptr);
  EXPECT_EQ(again.previous_holder().pid, getpid());
  EXPECT_TRUE(is_running(this_process()));
  EXPECT_FALSE(is_running({getpid(), this_process().start_ticks + 1})) << "a reused pid counts as running";
}

/// Forks a holder that takes the lock at `path`, starts `script` under a keeper holding the lock, writes
/// "started" to `ready` and waits; returns its pid once `ready` exists.
pid_t start_holder(const fs::path& path, const std::string& script, const fs::path& ready) {
  fs::remove(path);
  fs::remove(ready);
  const pid_t holder = fork();
  if (holder == 0) {
    try {
      const OwnerLock lock(path, "the campaign", 0, nullptr);
      ChildSpec spec;
      spec.executable = "/bin/sh";
      spec.argv = {"sh", "-c", script + " > " + ready.string() + "; exec sleep 300"};
      spec.dies_with_parent = true;
      spec.keeper_holds_fd = lock.descriptor();
      spawn_child(spec);
      while (true) pause();
    } catch (...) {
      _exit(1);  // never back into the test runner from a forked copy
    }
  }
  for (int attempt = 0; attempt < 500 && !fs::exists(ready); ++attempt) usleep(20'000);
  usleep(50'000);
  return holder;
}

TEST(OwnerLock, AKilledHoldersTreeIsWaitedForThenTheLockIsTaken) {
  const fs::path path = calo::testing::scratch_path("owner-lock-gone");
  const fs::path ready = calo::testing::scratch_path("owner-lock-gone-ready");
  const pid_t holder = start_holder(path, "echo $$", ready);
  const std::vector<pid_t> tree = calo::testing::read_pids(ready);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  ASSERT_EQ(tree.size(), 1u);
  const OwnerLock lock(path, "the campaign", 3 * kTreeGraceMs, nullptr);
  EXPECT_EQ(lock.previous_holder().pid, holder);
  EXPECT_TRUE(calo::testing::process_gone(tree[0])) << "the lock was taken while the holder's tree lived";
  calo::testing::kill_all(calo::testing::wait_gone(tree, 0));
}

TEST(OwnerLock, ATreeThatOutlastsTheWaitIsRefusedNamingTheGoneHolder) {
  const fs::path path = calo::testing::scratch_path("owner-lock-slow");
  const fs::path ready = calo::testing::scratch_path("owner-lock-slow-ready");
  // The tree ignores SIGTERM: the keeper ends it with SIGKILL kTreeGraceMs after the holder went.
  const pid_t holder = start_holder(path, "trap '' TERM; echo $$", ready);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  try {
    const OwnerLock lock(path, "the campaign", 200, nullptr);
    FAIL() << "the lock was taken while the holder's tree held it";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("still locked by processes that process " + std::to_string(holder) + " (gone)"),
              std::string::npos)
        << message;
  }
  const auto before = std::chrono::steady_clock::now();
  const OwnerLock lock(path, "the campaign", 3 * kTreeGraceMs, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(2 * kTreeGraceMs));
}

}  // namespace
}  // namespace calo::core
