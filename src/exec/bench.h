// `calo bench` engine: runs one rank of a training step's graph for warm-up + measured steps on a backend,
// records telemetry and spans into a run store (rank 0), verifies op counts and --check results, and builds
// the summary (docs/METRICS.md, Execution).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "exec/launch.h"
#include "model/model_spec.h"
#include "parallel/layout.h"

namespace calo::exec {

/// Settings of one bench run (identical on every rank).
struct BenchOptions {
  model::ModelSpec model;         ///< the model as executed (a slice when layers were cut)
  int full_model_layers = 0;      ///< layers of the unsliced model (== model.num_layers when not sliced)
  parallel::Layout layout;        ///< resolved layout
  int steps = 10;                 ///< measured steps
  int warmup = 2;                 ///< warm-up steps (run, recorded, excluded from the summary)
  std::string backend = "auto";   ///< "auto" | "cpu" | "cuda"
  bool check = false;             ///< verify results (--check)
  bool trace_ops = false;         ///< per-op spans (--trace-ops)
  bool progress = true;           ///< progress line on a terminal (rank 0)
  std::filesystem::path out_dir;  ///< run directory; empty = runs/<date>-bench-<model>
  std::string command_line;       ///< the command, for the run record
  std::uint64_t seed = 1234;      ///< operand data seed
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

/// Plans memory on the parent before spawning ranks (when the backend can describe its device without
/// starting); throws InputError when the layout does not fit.
void plan_before_launch(const BenchOptions& options, int nproc);

}  // namespace calo::exec
