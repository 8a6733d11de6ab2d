// The measured runs of tests/fixtures (real H100 and H200 data), unpacked once per test binary, for the
// suites that fit or simulate them.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "../common/scratch.h"

namespace calo::testing {

/// tests/fixtures/<fixture>/runs.tgz unpacked into a directory of this test binary; returns its runs/.
inline std::filesystem::path unpack_fixture(const std::string& fixture) {
  const std::filesystem::path target = scratch_path("fixture-" + fixture);
  std::filesystem::create_directories(target);
  const std::string command = "tar -xzf " + std::string(CALO_SOURCE_DIR) + "/tests/fixtures/" + fixture +
                              "/runs.tgz -C " + target.string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return target / "runs";
}

/// unpack_fixture(`fixture`) once per test binary: later calls return the same runs/ directory.
inline const std::filesystem::path& unpacked_fixture(const std::string& fixture) {
  static std::map<std::string, std::filesystem::path> unpacked;
  auto found = unpacked.find(fixture);
  if (found == unpacked.end()) found = unpacked.emplace(fixture, unpack_fixture(fixture)).first;
  return found->second;
}

/// The six runs of tests/fixtures/h100-runs (../shared/fixtures/h100-runs) and their stock simulations.
inline const std::filesystem::path& fixture_runs() {
  static const std::filesystem::path dir = unpack_fixture("h100-runs");
  return dir;
}

/// The H100 trace-ops runs (tests/fixtures/h100-traceops).
inline const std::filesystem::path& traceops_runs() {
  static const std::filesystem::path dir = unpack_fixture("h100-traceops");
  return dir;
}

/// The H200 trace-ops runs (tests/fixtures/h200-traceops).
inline const std::filesystem::path& h200_runs() {
  static const std::filesystem::path dir = unpack_fixture("h200-traceops");
  return dir;
}

/// The H100 controller probe (tests/fixtures/h100-controller-probe): runs/probe.
inline const std::filesystem::path& h100_probe_runs() {
  static const std::filesystem::path dir = unpack_fixture("h100-controller-probe");
  return dir;
}

/// The H200 controller probe (tests/fixtures/h200-controller-probe): runs/probe.
inline const std::filesystem::path& h200_probe_runs() {
  static const std::filesystem::path dir = unpack_fixture("h200-controller-probe");
  return dir;
}

}  // namespace calo::testing
