// `calo bench` engine: runs one rank of a training step's graph for warm-up + measured steps on a backend,
// records telemetry and spans into a run store (rank 0), verifies op counts and --check results, and builds
// the summary (docs/METRICS.md, Execution).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "exec/bench_options.h"
#include "exec/launch.h"

namespace calo::exec {

/// What one rank reports back.
struct BenchOutcome {
  int exit_code = 0;              ///< 0 ok, 1 wrong results / op counts mismatch
  nlohmann::json report;          ///< full summary (rank 0; other ranks get the same)
  std::string text;               ///< the human summary table (rank 0)
  std::filesystem::path run_dir;  ///< where the run store is (rank 0)
};

/// Runs this process's rank (MPI is initialized here when the launch needs it). Throws InputError for a
/// layout that does not match the job or does not fit the device, RuntimeFailure for execution failures.
BenchOutcome run_bench_rank(const BenchOptions& options, LaunchInfo launch);

/// A step time as the bench summary writes it: "42.0 us", "151.700 ms", "1.234 s"; "n/a" when not finite.
std::string format_step_time(double seconds);

/// Plans memory on the parent before spawning ranks (when the backend can describe its device without
/// starting) and checks the bounds of exec/bench_bounds.h; throws InputError when the layout does not fit or
/// a bound is exceeded, before anything is written.
void plan_before_launch(const BenchOptions& options, int nproc);

}  // namespace calo::exec
