// A measured run reduced to what calibration fits and validates against: its workload (model and layout, to
// rebuild the execution graph), its figures over the measured steps, and its power and temperature series.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "sim/cluster.h"
#include "sim/simulate.h"
#include "store/run_store.h"

namespace calo::calibrate {

/// The figures calibration compares, per GPU, over a run's measured steps (warm-up excluded). NaN = unknown.
struct RunFigures {
  double step_time_s = NAN;        ///< median step time (measured); mean step time (simulated: all equal)
  double energy_per_step_j = NAN;  ///< energy per step of one GPU (mean over GPUs)
  double mean_power_w = NAN;       ///< mean power of one GPU (mean over GPUs)
  double peak_power_w = NAN;       ///< largest power sample of any GPU
  double swing_w = NAN;            ///< largest (max - min) of power within 100 ms, any GPU
  double peak_temp_c = NAN;        ///< sustained peak: hottest 500 ms mean GPU temperature
  double sm_clock_mhz = NAN;       ///< mean SM clock (over GPUs)
};

/// Names of RunFigures' fields in order, with their units ("step_time_s", ...).
const std::vector<std::pair<std::string, std::string>>& figure_names();
/// Field `index` of figure_names() order.
double figure_value(const RunFigures& figures, std::size_t index);

/// A time series of one GPU (seconds since run start, value).
using Series = std::vector<std::pair<double, double>>;

/// One measured run as calibration uses it.
struct MeasuredRun {
  std::filesystem::path run_dir;  ///< where it lives
  std::string label;              ///< directory name, for tables
  std::string kind;               ///< bench | record | ingest
  std::string host;               ///< the host the run was taken on (its store's `host`)
  int64_t started_unix_ns = 0;    ///< its start, Unix-epoch ns (with host: which run it is); 0 unknown
  std::string gpu_name;           ///< device 0's product name
  std::string gpu_uuid;           ///< device 0's UUID (which card), empty if unknown
  std::optional<model::ModelSpec> model;  ///< from the run's config (bench runs); absent for record runs
  parallel::Layout layout;                ///< from the run's config (valid when model is set)
  int warmup_steps = 0;                   ///< step spans named "warmup"
  int measured_steps = 0;                 ///< step spans named "step"
  double load_start_s = NAN;              ///< when the GPU began to work (the first step or later)
  double initial_temp_c = NAN;            ///< GPU temperature at load_start_s (last sample before it)
  double idle_power_w = NAN;              ///< median power while idle with clocks up (NaN if < 3 samples)
  RunFigures figures;                     ///< measured over the measured steps
  Series power_w;  ///< device 0: power samples over the run (driver samples, else polled)
  Series temp_c;   ///< device 0: GPU temperature samples over the run
  /// Rank 0's op spans of the measured steps (`calo bench --trace-ops`), time order; empty without them.
  std::vector<store::Span> op_spans;
  double measured_peak_flops = NAN;  ///< the device's peak FLOP/s the bench measured (CPU backend), else NaN

  /// True when the run carries the workload needed to simulate it (model and layout).
  bool simulatable() const { return model.has_value(); }
};

/// The product token of a GPU name ("NVIDIA H100 80GB HBM3" -> "H100"); empty if none.
std::string gpu_model_token(const std::string& name);

/// A cluster-file key as calibration tables show it: on a CPU host (core::is_cpu_host_device) "gpu.X" reads
/// "core.X", the core each MPI rank runs on standing where a GPU would; the YAML keeps "gpu.X". Other keys
/// are unchanged.
std::string shown_parameter_key(const std::string& key, const sim::GpuSpec& gpu);

/// One compute op of a run's graph with its measured duration.
struct OpTiming {
  graph::Op op;            ///< the op (shapes, FLOPs, bytes)
  double duration_s = 0;   ///< median over the measured steps
  double clock_mhz = NAN;  ///< SM clock it ran at (the run's mean clock), NaN if unknown
};

/// Rank 0's compute ops paired with their measured spans (by order and name within each measured step);
/// empty when the run has no op spans or they do not match the graph.
std::vector<OpTiming> op_timings(const MeasuredRun& run, const graph::Graph& graph);

/// Loads `run_dir` as a measurement for a cluster whose GPU is `base_gpu`. Throws InputError (naming the run
/// and the fix) for a simulated run, a run without steps, or a run of another GPU model than `base_gpu`.
MeasuredRun load_measured_run(const std::filesystem::path& run_dir, const sim::GpuSpec& base_gpu);

/// Loads `run_dir` for the thermal stage alone: its power and temperature series from its load start (steps
/// not needed: a `calo record` of any job, a long soak) and its sustained peak temperature. InputError as
/// load_measured_run, or when the run has no power and temperature series.
MeasuredRun load_thermal_run(const std::filesystem::path& run_dir, const sim::GpuSpec& base_gpu);

/// The execution graph of a simulatable run.
graph::Graph run_graph(const MeasuredRun& run);

/// Simulates `run`'s workload on `cluster` as it was measured: its warm-up and measured steps, from its
/// initial temperature (`options` as simulate_run takes them).
sim::SimResult simulate_measured(const MeasuredRun& run, const graph::Graph& graph,
                                 const sim::ClusterSpec& cluster, sim::SimOptions options = {});

/// Simulates `run`'s workload on `cluster` as it was measured (warm-up + measured steps, from its initial
/// temperature) and returns the figures over the measured steps. `options` may fix the clock or disable the
/// cap; its steps and initial temperature are overwritten.
RunFigures simulate_run(const MeasuredRun& run, const graph::Graph& graph, const sim::ClusterSpec& cluster,
                        sim::SimOptions options = {});

/// Relative error (simulated - measured) / measured; for temperatures the difference in degrees.
double figure_error(std::size_t index, double measured, double simulated);

}  // namespace calo::calibrate
