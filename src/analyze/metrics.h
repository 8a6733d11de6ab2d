// Derived metrics of one run (recorded, benched, simulated or ingested), computed from the run store in one
// pass per (device, metric) series. Every formula is defined in docs/METRICS.md "Analysis".
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analyze/breakdown.h"
#include "store/run_store.h"

namespace calo::analyze {

/// Summary statistics of a set of values. NaN fields when count == 0.
struct Distribution {
  int64_t count = 0;  ///< number of values
  double mean = 0;    ///< arithmetic mean
  double p50 = 0;     ///< median (nearest-rank)
  double p99 = 0;     ///< 99th percentile (nearest-rank)
  double min = 0;     ///< smallest value
  double max = 0;     ///< largest value
};

/// Nearest-rank statistics of `values` (reordered in place).
Distribution distribution_of(std::vector<double>& values);

/// One pixel column of a downsampled time series.
struct Bucket {
  double min = 0;     ///< smallest sample in the bucket
  double max = 0;     ///< largest sample in the bucket
  double mean = 0;    ///< mean of the samples in the bucket
  int32_t count = 0;  ///< samples in the bucket (0: empty, other fields meaningless)
};

/// One (device, metric) series reduced to statistics and chart buckets in a single pass.
struct SeriesDigest {
  std::string metric;           ///< metric name, e.g. "power_instant_w"
  std::string unit;             ///< its unit
  int64_t count = 0;            ///< samples
  double first_value = 0;       ///< value of the first sample
  double last_value = 0;        ///< value of the last sample
  int64_t first_t_ns = 0;       ///< time of the first sample
  int64_t last_t_ns = 0;        ///< time of the last sample
  double time_mean = 0;         ///< time-weighted mean (step interpolation), sample mean if one sample
  Distribution values;          ///< statistics of the sample values (p50/p99 only for power)
  double max_swing_100ms = 0;   ///< largest max-min within any 100 ms window (power only)
  double max_mean_500ms = NAN;  ///< largest time-weighted mean within any 500 ms window (temperature only)
  std::vector<Bucket> buckets;  ///< chart buckets over [RunAnalysis::t_begin_ns, t_end_ns)
  std::array<double, 9> bit_fraction{};  ///< bitmask metrics: time fraction with bit k set
};

/// Figures of one device.
struct DeviceMetrics {
  store::DeviceInfo device;  ///< the device row
  double energy_j = NAN;     ///< energy over the window (store::window_energy_j: power samples, else counter)
  double power_integral_j = NAN;  ///< trapezoid integral of the power series over the window (cross-check)
  double power_mean_w = NAN;      ///< energy_j / window; without energy the time-weighted mean of power
  double power_time_mean_w =
      NAN;                    ///< time-weighted mean of the power samples (the figure presets were fitted to)
  double power_p50_w = NAN;   ///< median power sample
  double power_p99_w = NAN;   ///< 99th percentile power sample
  double power_peak_w = NAN;  ///< largest power sample
  double power_peak_to_mean = NAN;   ///< power_peak_w / power_mean_w
  double power_swing_100ms_w = NAN;  ///< largest max-min of power within any 100 ms window
  double temp_mean_c = NAN;          ///< time-weighted mean GPU temperature
  double temp_peak_c = NAN;          ///< largest GPU temperature sample
  double temp_peak_500ms_c = NAN;    ///< sustained peak: hottest 500 ms mean of the GPU temperature
  double sm_clock_mean_mhz = NAN;    ///< effective SM clock: time-weighted mean of clock_sm_mhz
  double util_mean_pct = NAN;        ///< time-weighted mean GPU utilization
  std::array<double, 4> throttle_fraction{NAN, NAN, NAN,
                                          NAN};  ///< power cap, SW thermal, HW thermal, power brake
  double straggler_fraction = NAN;  ///< share of steps this device's step span ended last (multi-rank runs)
  double straggler_lag_ms = NAN;    ///< mean (own step end - median step end of all ranks), ms
};

/// Names of the throttle reasons in DeviceMetrics::throttle_fraction order.
inline constexpr std::array<const char*, 4> kThrottleReasons = {"power_cap", "sw_thermal", "hw_thermal",
                                                                "power_brake"};

/// Thermal imbalance of one group of GPUs (a node, or one slot across nodes).
struct ThermalGroup {
  std::string label;         ///< "node 0" or "slot 3"
  double temp_mean_c = 0;    ///< mean of the member GPUs' mean temperatures
  double temp_spread_c = 0;  ///< max - min of the member GPUs' mean temperatures
  double temp_peak_c = 0;    ///< hottest member's peak temperature
  double imbalance_pct = 0;  ///< (hottest mean - coolest mean) / coolest mean * 100
};

/// Workload figures read from the run (config_json or "run" summary rows); 0 when unknown.
struct Workload {
  double tokens_per_step = 0;          ///< tokens processed per optimizer step (global batch x seq)
  double samples_per_step = 0;         ///< sequences per step (global batch)
  double model_flops_per_step = 0;     ///< model FLOPs per step (no recompute), all GPUs
  double hardware_flops_per_step = 0;  ///< FLOPs actually executed per step (incl. recompute), all GPUs
  double peak_flops_per_gpu = 0;       ///< dense bf16 peak FLOP/s of one GPU (config, else by device name)
  /// Devices the FLOPs are shared by where the run records no GPU (the CPU backend's MPI ranks); 0 = unknown.
  double ranks = 0;
};

/// Everything the report, compare and export commands need from one run.
struct RunAnalysis {
  std::filesystem::path run_dir;           ///< where the run lives
  store::RunInfo run;                      ///< run row
  std::vector<store::DeviceInfo> devices;  ///< devices by idx
  int64_t t_begin_ns = 0;                  ///< analysis window begin (first step begin, else first sample)
  int64_t t_end_ns = 0;                    ///< analysis window end (last step end, else last sample)
  int64_t chart_begin_ns = 0;              ///< chart time range begin (whole run)
  int64_t chart_end_ns = 0;                ///< chart time range end
  Workload workload;                       ///< tokens / FLOPs per step
  Distribution step_time_s;                ///< per step number: latest end - earliest begin over ranks, s
  std::vector<std::pair<int64_t, int64_t>> step_marks_ns;  ///< [begin, end] of each step (chart markers)
  std::vector<std::pair<int64_t, int64_t>>
      measured_steps_ns;              ///< [begin, end] of each step, warm-up excluded
  int64_t steps = 0;                  ///< steps in the window
  int64_t steps_taken_as_warmup = 0;  ///< unmarked leading steps > 2x the median, set apart as warm-up
  double tokens_per_s = NAN;          ///< tokens_per_step / step_time mean
  double tflops_per_gpu = NAN;        ///< model FLOPs per step / step time / GPUs / 1e12
  double mfu = NAN;                   ///< model FLOP/s per GPU / peak FLOP/s per GPU
  double hfu = NAN;                   ///< hardware FLOP/s per GPU / peak FLOP/s per GPU
  double energy_j = NAN;              ///< sum over GPUs of energy over the window
  double energy_per_step_j = NAN;     ///< energy_j / steps
  double energy_per_token_j = NAN;    ///< energy_j / (steps x tokens_per_step)
  double tokens_per_j = NAN;          ///< 1 / energy_per_token_j
  double samples_per_s_mj = NAN;      ///< (samples / s) / (energy_j / 1e6) over the window
  double power_mean_w = NAN;          ///< sum over GPUs of mean power
  double power_peak_w = NAN;          ///< largest single-GPU power sample
  std::vector<DeviceMetrics> device_metrics;  ///< per device
  std::vector<ThermalGroup> nodes;            ///< thermal imbalance per node
  std::vector<ThermalGroup> slots;            ///< temperature per slot across nodes
  std::vector<int32_t> stragglers;            ///< device idx that ended last in > 2/n of the steps
  /// rank -> node of a merged run's ranks (its summary scopes "node<N>/rank<R>"); empty otherwise.
  std::map<int32_t, int32_t> rank_node;
  std::vector<LaneBreakdown> kernels;  ///< kernel breakdown per device (from kernel spans), may be empty
  std::map<std::string, std::vector<SeriesDigest>> series;  ///< metric name -> digest per device (by idx)
  int64_t sample_count = 0;                                 ///< samples read
  bool storage_order_scan = false;  ///< true if the fast sequential scan of the sample table was used
};

/// Options of analyze_run.
struct AnalyzeOptions {
  int32_t chart_buckets = 720;  ///< pixel columns of the time-series charts
  int32_t threads = 0;  ///< reader threads of the per-series path (0: one per core, <= one per device)
  bool storage_order_scan = true;  ///< try the single sequential scan first (falls back when unordered)
};

/// Analyzes the run at `run_dir` (reads every sample once; spans; summaries).
RunAnalysis analyze_run(const std::filesystem::path& run_dir, const AnalyzeOptions& options = {});

/// Dense bf16 peak FLOP/s of a GPU by product name ("H100" -> 989e12); 0 if unknown.
double peak_bf16_flops(const std::string& device_name);

/// One named figure of a run, for tables and comparisons.
struct Figure {
  std::string key;               ///< e.g. "step_time_mean_s"
  double value = 0;              ///< NaN if the run lacks it
  std::string unit;              ///< e.g. "s"
  bool higher_is_better = true;  ///< direction of "better" for comparisons
};

/// The run-level figures in a fixed order (the summary table of reports and `calo compare`).
std::vector<Figure> run_figures(const RunAnalysis& analysis);

}  // namespace calo::analyze
