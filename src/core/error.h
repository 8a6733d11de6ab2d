// Error policy (docs/ARCHITECTURE.md): exceptions end a command and are printed once by the CLI;
// expected failures are returned as values; assertions are for programmer errors only.
#pragma once

#include <stdexcept>
#include <string>

namespace calo {

/// Exit status of the `calo` binary: 0 ok, 1 failure, 2 bad usage or input.
enum class ExitCode : int { kOk = 0, kFailure = 1, kUsage = 2 };

/// Bad user input (flag, file, layout, model): the message names the input and a fix; exits with 2.
class InputError : public std::runtime_error {
 public:
  /// `message` must name the offending input and, where one exists, a valid choice.
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

/// A failure while doing valid work (I/O, driver, child process); exits with 1.
class RuntimeFailure : public std::runtime_error {
 public:
  /// `message` says what failed and, where known, what to do about it.
  explicit RuntimeFailure(const std::string& message) : std::runtime_error(message) {}
};

/// Throws InputError(message) when `condition` is false; used by validators.
inline void require_input(bool condition, const std::string& message) {
  if (!condition) throw InputError(message);
}

}  // namespace calo
