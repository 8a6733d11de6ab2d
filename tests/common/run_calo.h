// Runs the `calo` binary under test (CALO_BINARY, set by the suite's CMakeLists) as a real process: its exit
// code and its stdout + stderr. Shared by the suites that test commands end to end.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace calo::testing {

/// What a finished command left behind.
struct Outcome {
  int exit_code = -1;  ///< exit status, -1 if it did not exit normally
  std::string output;  ///< stdout + stderr
};

/// Runs `command` through the shell and waits for it (the output is what the command sends to stdout).
inline Outcome run_shell(const std::string& command) {
  Outcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[65536];
  std::size_t got = 0;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) outcome.output.append(buffer, got);
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

#ifdef CALO_BINARY
/// Runs `calo ARGUMENTS` through the shell and waits for it.
inline Outcome run_calo(const std::string& arguments) {
  return run_shell(std::string(CALO_BINARY) + " " + arguments + " 2>&1");
}

/// One command's text output and its `--json` output, parsed.
struct TextAndJson {
  Outcome text;         ///< `calo ARGUMENTS`
  nlohmann::json json;  ///< `calo ARGUMENTS --json`, parsed; null when either run failed
};

/// Runs `calo ARGUMENTS` and `calo ARGUMENTS --json` (a text figure checked against the JSON's); a failed run
/// leaves `json` null, the caller asserts on it.
inline TextAndJson run_calo_text_and_json(const std::string& arguments) {
  TextAndJson both{run_calo(arguments), nullptr};
  const Outcome json_text = run_calo(arguments + " --json");
  if (both.text.exit_code == 0 && json_text.exit_code == 0)
    both.json = nlohmann::json::parse(json_text.output, nullptr, /*allow_exceptions=*/false);
  if (both.json.is_discarded()) both.json = nullptr;
  if (both.json.is_null()) both.text.output += "\n--json: " + json_text.output;
  return both;
}
#endif

}  // namespace calo::testing
