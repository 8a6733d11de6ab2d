// core::spawn_child with real processes (/bin/sh): output to files or descriptors, a given or inherited
// environment, exec failure as exit 127, and a child that dies with its parent.
#include "core/spawn.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/scratch.h"

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

TEST(Spawn, AnOutputFileThatCannotBeOpenedIsAFailedStart) {
  ChildSpec spec;
  spec.executable = "/bin/true";
  spec.argv = {"true"};
  spec.stdout_path = "/nonexistent-dir/out.txt";
  EXPECT_EQ(wait_exit_code(spawn_child(spec)), 127);
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

}  // namespace
}  // namespace calo::core
