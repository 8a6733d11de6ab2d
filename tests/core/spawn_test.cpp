// core::spawn_child with real processes (/bin/sh): output to files or descriptors, a given or inherited
// environment, exec failure as exit 127, and a child whose whole process tree dies with its parent (exit or
// SIGKILL) and with the child itself, under a keeper that exits as the child did and forwards signals.
#include "core/spawn.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/processes.h"
#include "../common/scratch.h"
#include "core/error.h"

namespace calo::core {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

int wait_exit_code(pid_t child) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(Spawn, OutputGoesToItsFilesAndTheGivenEnvironmentIsTheWholeOne) {
  const auto dir = calo::testing::scratch_path("spawn-files");
  std::filesystem::create_directories(dir);
  ChildSpec spec;
  spec.executable = "/bin/sh";
  spec.argv = {"sh", "-c", "echo \"$FOO|$HOME\"; echo to-stderr >&2; exit 3"};
  spec.environment = std::vector<std::string>{"FOO=bar"};
  spec.stdout_path = (dir / "out.txt").string();
  spec.stderr_path = (dir / "err.txt").string();
  EXPECT_EQ(wait_exit_code(spawn_child(spec)), 3);
  EXPECT_EQ(read_file(dir / "out.txt"), "bar|\n") << "HOME is the parent's, not given";
  EXPECT_EQ(read_file(dir / "err.txt"), "to-stderr\n");
}

TEST(Spawn, WithoutAnEnvironmentTheChildInheritsTheParents) {
  const auto dir = calo::testing::scratch_path("spawn-inherit");
  std::filesystem::create_directories(dir);
  setenv("CALO_SPAWN_TEST", "inherited", 1);
  ChildSpec spec;
  spec.executable = "/bin/sh";
  spec.argv = {"sh", "-c", "echo $CALO_SPAWN_TEST"};
  spec.stdout_path = (dir / "out.txt").string();
  EXPECT_EQ(wait_exit_code(spawn_child(spec)), 0);
  EXPECT_EQ(read_file(dir / "out.txt"), "inherited\n");
}

TEST(Spawn, OutputToAPipeAndAMissingExecutableExits127SayingSo) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ChildSpec spec;
  spec.executable = "/nonexistent/calo-spawn-test";
  spec.argv = {"calo-spawn-test"};
  spec.stderr_fd = pipe_fds[1];
  spec.reset_signals = true;
  const pid_t child = spawn_child(spec);
  close(pipe_fds[1]);
  char buffer[128] = {};
  const ssize_t read_bytes = read(pipe_fds[0], buffer, sizeof(buffer) - 1);
  close(pipe_fds[0]);
  EXPECT_EQ(wait_exit_code(child), 127);
  ASSERT_GT(read_bytes, 0);
  EXPECT_EQ(std::string(buffer), "calo: exec failed\n");
}

TEST(Spawn, AnOutputFileThatCannotBeOpenedIsRefusedBeforeAnythingStarts) {
  ChildSpec spec;
  spec.executable = "/bin/true";
  spec.argv = {"true"};
  spec.stdout_path = "/nonexistent-dir/out.txt";
  EXPECT_THROW(spawn_child(spec), InputError);
}

TEST(Spawn, ASymlinkAtAnOutputPathIsRefusedNotFollowed) {
  // A link planted where a point's log goes (calo sweep's <point>.log) once had the child's output truncate
  // and overwrite whatever it pointed at.
  const auto dir = calo::testing::scratch_path("spawn-symlink");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "victim.txt") << "keep\n";
  std::filesystem::create_symlink(dir / "victim.txt", dir / "out.txt");
  for (const bool keeper : {false, true}) {
    ChildSpec spec;
    spec.executable = "/bin/sh";
    spec.argv = {"sh", "-c", "echo overwritten; echo overwritten >&2"};
    spec.dies_with_parent = keeper;
    (keeper ? spec.stderr_path : spec.stdout_path) = (dir / "out.txt").string();
    spec.output_flag = "--out";
    std::string message;
    try {
      wait_exit_code(spawn_child(spec));
    } catch (const InputError& error) {
      message = error.what();
    }
    EXPECT_NE(message.find("--out " + (dir / "out.txt").string() + " is a symbolic link"), std::string::npos)
        << message;
    EXPECT_EQ(read_file(dir / "victim.txt"), "keep\n");
    EXPECT_TRUE(std::filesystem::is_symlink(dir / "out.txt"));
  }
}

TEST(Spawn, AChildThatDiesWithItsParentIsTerminatedWhenTheParentExits) {
  // A middle process starts the child (dies_with_parent) and exits; the child, a long sleep, must be gone.
  const auto dir = calo::testing::scratch_path("spawn-orphan");
  std::filesystem::create_directories(dir);
  const pid_t middle = fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    ChildSpec spec;
    spec.executable = "/bin/sh";
    spec.argv = {"sh", "-c", "echo $$ > " + (dir / "pid").string() + "; exec sleep 30"};
    spec.dies_with_parent = true;
    spawn_child(spec);
    usleep(300'000);  // the child has written its pid
    _exit(0);
  }
  EXPECT_EQ(wait_exit_code(middle), 0);
  const pid_t child = std::atoi(read_file(dir / "pid").c_str());
  ASSERT_GT(child, 0);
  // Gone: no such process, or a zombie nobody reaps yet (a container's init may not).
  auto gone_now = [&] {
    const std::string stat = read_file("/proc/" + std::to_string(child) + "/stat");
    const auto state_at = stat.rfind(") ");
    return stat.empty() || (state_at != std::string::npos && stat[state_at + 2] == 'Z');
  };
  bool gone = false;
  for (int attempt = 0; attempt < 50 && !gone; ++attempt) {
    gone = gone_now();
    if (!gone) usleep(20'000);
  }
  EXPECT_TRUE(gone) << "pid " << child << " outlived its parent";
}

/// A shell tree three deep that writes its pids, one per line, to `pids`: two sleeps (one in a subshell), the
/// subshell and the shell itself. `prefix` runs first (e.g. a trap).
ChildSpec tree_spec(const std::filesystem::path& pids, const std::string& prefix = "") {
  const std::string file = pids.string();
  ChildSpec spec;
  spec.executable = "/bin/sh";
  spec.argv = {"sh", "-c",
               prefix + "sleep 300 & echo $! >> " + file + "; (sleep 300 & echo $! >> " + file +
                   "; wait) & echo $! >> " + file + "; echo $$ >> " + file + "; wait"};
  spec.dies_with_parent = true;
  return spec;
}

/// Waits up to 10 s for `count` pids in `path`.
std::vector<pid_t> wait_for_pids(const std::filesystem::path& path, std::size_t count) {
  std::vector<pid_t> pids;
  for (int attempt = 0; attempt < 500 && pids.size() < count; ++attempt) {
    usleep(20'000);
    pids = calo::testing::read_pids(path);
  }
  return pids;
}

TEST(Spawn, EveryProcessOfTheTreeEndsWhenItsParentIsKilled) {
  // A middle process (calo) starts the tree and is killed with SIGKILL: no process of the tree may be left.
  const auto dir = calo::testing::scratch_path("spawn-tree-sigkill");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const pid_t middle = fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    try {
      spawn_child(tree_spec(dir / "pids"));
    } catch (...) {
      _exit(1);  // never back into the test runner from a forked copy
    }
    while (true) pause();
  }
  const std::vector<pid_t> pids = wait_for_pids(dir / "pids", 4);
  kill(middle, SIGKILL);  // before any assertion can return
  EXPECT_EQ(wait_exit_code(middle), 128 + SIGKILL);
  ASSERT_EQ(pids.size(), 4u);
  const std::vector<pid_t> left = calo::testing::wait_gone(pids, 5.0);
  EXPECT_TRUE(left.empty()) << left.size()
                            << " process(es) of the tree outlived their killed parent, e.g. pid "
                            << (left.empty() ? 0 : left[0]);
  calo::testing::kill_all(left);
}

TEST(Spawn, ProcessesTheChildLeftEndWhenItExitsAndTheKeeperExitsAsItDid) {
  const auto dir = calo::testing::scratch_path("spawn-leftovers");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ChildSpec spec;
  spec.executable = "/bin/sh";
  spec.argv = {"sh", "-c", "sleep 300 & echo $! > " + (dir / "pid").string() + "; exit 3"};
  spec.dies_with_parent = true;
  EXPECT_EQ(wait_exit_code(spawn_child(spec)), 3);
  const std::vector<pid_t> pids = calo::testing::read_pids(dir / "pid");
  ASSERT_EQ(pids.size(), 1u);
  const std::vector<pid_t> left = calo::testing::wait_gone(pids, 0.5);
  EXPECT_TRUE(left.empty()) << "the sleep the child left in the background outlived it";
  calo::testing::kill_all(left);
  spec.argv = {"sh", "-c", "kill -9 $$"};
  int status = 0;
  ASSERT_GT(waitpid(spawn_child(spec), &status, 0), 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  spec.argv = {"sh", "-c", "kill -TERM $$"};
  ASSERT_GT(waitpid(spawn_child(spec), &status, 0), 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
}

TEST(Spawn, ASignalSentToTheKeeperReachesTheChildAndTheRestOfTheTreeEnds) {
  const auto dir = calo::testing::scratch_path("spawn-forward");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const pid_t keeper = spawn_child(tree_spec(dir / "pids", "trap 'exit 42' TERM; "));
  const std::vector<pid_t> pids = wait_for_pids(dir / "pids", 4);
  if (pids.size() != 4u) kill(keeper, SIGKILL);
  ASSERT_EQ(pids.size(), 4u);
  kill(keeper, SIGTERM);
  EXPECT_EQ(wait_exit_code(keeper), 42);
  const std::vector<pid_t> left = calo::testing::wait_gone(pids, 0.5);
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) outlived the child";
  calo::testing::kill_all(left);
}

}  // namespace
}  // namespace calo::core
