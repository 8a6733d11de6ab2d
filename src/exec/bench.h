// `calo bench` engine: runs one rank of a training step's graph for warm-up + measured steps on a backend,
// records telemetry and spans into a run store (rank 0), verifies op counts and --check results, and builds
// the summary (docs/METRICS.md, Execution).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/progress.h"
#include "exec/launch.h"
#include "model/model_spec.h"
#include "parallel/layout.h"

namespace calo::exec {

/// One finished step, for a progress line (BenchOptions::on_step).
struct BenchStepProgress {
  int step = 0;           ///< 0-based index over warm-up and measured steps
  int total_steps = 0;    ///< warm-up + measured steps
  bool warmup = false;    ///< a warm-up step
  double duration_s = 0;  ///< the step's duration
};

/// Settings of one bench run (identical on every rank).
struct BenchOptions {
  model::ModelSpec model;        ///< the model as executed (a slice when layers were cut)
  int full_model_layers = 0;     ///< layers of the unsliced model (== model.num_layers when not sliced)
  parallel::Layout layout;       ///< resolved layout
  int steps = 10;                ///< measured steps
  int warmup = 2;                ///< warm-up steps (run, recorded, excluded from the summary)
  std::string backend = "auto";  ///< "auto" | "cpu" | "cuda"
  bool check = false;            ///< verify results (--check)
  bool trace_ops = false;        ///< per-op spans (--trace-ops)
  /// --memory real: hold training's allocations around the ops (exec/memory_ledger.h) and report their peak.
  bool memory_real = false;
  std::filesystem::path out_dir;  ///< run directory; empty = runs/<date>-bench-<model>
  std::string command_line;       ///< the command, for the run record
  std::uint64_t seed = 1234;      ///< operand data seed
  /// Start more local CPU ranks than the host's cores and memory bound (exec/bench_bounds.h;
  /// --oversubscribe).
  bool oversubscribe = false;
  /// Called on rank 0 after each step, warm-up included (the CLI's progress line); unset = silent.
  std::function<void(const BenchStepProgress&)> on_step;
  /// The backend's lines "calo: ..." (rank 0, BackendConfig::notice); unset = silent.
  core::NoticeFn notice;
};

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
