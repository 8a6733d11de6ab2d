// The measured runs of tests/fixtures (real H100 and H200 data), unpacked once per test binary, for the
// suites that fit or simulate them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "../common/run_calo.h"
#include "../common/scratch.h"

namespace calo::testing {

/// tests/fixtures/<fixture>/runs.tgz (or runs.txz, xz-compressed) unpacked into a directory of this test
/// binary; returns its runs/.
inline std::filesystem::path unpack_fixture(const std::string& fixture) {
  const std::filesystem::path target = scratch_path("fixture-" + fixture);
  std::filesystem::create_directories(target);
  const std::filesystem::path dir = std::filesystem::path(CALO_SOURCE_DIR) / "tests" / "fixtures" / fixture;
  const bool xz = !std::filesystem::exists(dir / "runs.tgz") && std::filesystem::exists(dir / "runs.txz");
  const std::string command = std::string(xz ? "tar -xJf " : "tar -xzf ") +
                              (dir / (xz ? "runs.txz" : "runs.tgz")).string() + " -C " + target.string();
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

/// The six runs of tests/fixtures/h100-runs (tests/fixtures/h100-runs) and their stock simulations.
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

/// One figure of `calo compare --json MEASURED SIM`: both values and the sim's relative error.
struct Compared {
  double measured = NAN, simulated = NAN, error = NAN;
};

/// `calo compare --json measured simulated`: the figures that have both values, by key (empty on failure).
inline std::map<std::string, Compared> compare_figures(const std::filesystem::path& measured,
                                                       const std::filesystem::path& simulated) {
  std::map<std::string, Compared> figures;
  const Outcome compared = run_calo("compare --json " + measured.string() + " " + simulated.string());
  EXPECT_EQ(compared.exit_code, 0) << compared.output;
  if (compared.exit_code != 0) return figures;
  const nlohmann::json comparison = nlohmann::json::parse(compared.output);  // the rows refer into it
  for (const auto& row : comparison["rows"]) {
    if (!row["values"][0].is_number() || !row["values"][1].is_number()) continue;
    Compared& figure = figures[row["key"].get<std::string>()];
    figure.measured = row["values"][0].get<double>();
    figure.simulated = row["values"][1].get<double>();
    if (row["sim_error"][1].is_number()) figure.error = row["sim_error"][1].get<double>();
  }
  return figures;
}

/// Simulates `run`'s twin on `cluster` into `twin` (`calo sim --from`) and rates it with `calo compare
/// --json`: the figures with both values, by key. `sim_output` receives what the sim printed.
inline std::map<std::string, Compared> twin_on(const std::string& cluster, const std::filesystem::path& run,
                                               const std::filesystem::path& twin,
                                               std::string* sim_output = nullptr) {
  const Outcome simulated =
      run_calo("sim --from " + run.string() + " --cluster " + cluster + " --out " + twin.string());
  EXPECT_EQ(simulated.exit_code, 0) << simulated.output;
  if (sim_output) *sim_output = simulated.output;
  if (simulated.exit_code != 0) return {};
  return compare_figures(run, twin);
}

}  // namespace calo::testing
