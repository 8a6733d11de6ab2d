// The settings of one `calo bench` run, identical on every rank: what exec/bench.h runs and
// exec/bench_bounds.h checks before anything starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "core/progress.h"
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

}  // namespace calo::exec
