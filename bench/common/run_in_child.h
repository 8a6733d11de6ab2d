// Runs a measurement in a forked child so its peak RSS (getrusage in the child) belongs to that case alone,
// and hands the trivially copyable result back through a pipe.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <type_traits>

namespace calo::bench {

/// `measure()` in a child process; nullopt when it threw (its message goes to stderr, prefixed by `label`) or
/// the child did not hand back a whole result.
template <typename Measure>
auto run_in_child(const char* label, Measure measure) -> std::optional<decltype(measure())> {
  using Result = decltype(measure());
  static_assert(std::is_trivially_copyable_v<Result>, "the result crosses a pipe as bytes");
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    close(fds[0]);
    try {
      const Result result = measure();
      const ssize_t written = write(fds[1], &result, sizeof(result));
      _exit(written == static_cast<ssize_t>(sizeof(result)) ? 0 : 1);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s: %s\n", label, error.what());
      _exit(1);
    }
  }
  close(fds[1]);
  Result result{};
  const ssize_t got = read(fds[0], &result, sizeof(result));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (got != static_cast<ssize_t>(sizeof(result)) || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::nullopt;
  return result;
}

}  // namespace calo::bench
