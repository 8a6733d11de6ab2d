// `calo record`: runs a command as a child, tees its output, records every local device into a run store,
// assembles step/phase spans from markers, and summarizes per GPU at the end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/progress.h"
#include "store/run_store.h"
#include "telemetry/gpu_scope.h"
#include "telemetry/sampler.h"

namespace calo::telemetry {

/// Settings of one recording.
struct RecordOptions {
  std::vector<std::string> command;  ///< program and arguments (command[0] searched on PATH)
  std::filesystem::path out_dir;     ///< run directory; empty = runs/<date>-<name>
  std::string name;                  ///< run name; empty = basename of command[0]
  PeriodPlan periods;                ///< sampling periods
  std::vector<std::string> markers;  ///< output-line patterns: "megatron", "torchtitan", "regex:..."
  bool echo_output = true;           ///< copy the child's output to our stdout/stderr
  std::vector<std::string> sources;  ///< restrict to these sources ("nvml", "amdsmi", "procfs"); empty = all
  GpuScope gpus;                     ///< the job's GPUs (--gpus, else CUDA_VISIBLE_DEVICES, else every GPU)
  /// Called with the run directory once run.db exists, before sampling starts (e.g. `--serve` follows it).
  std::function<void(const std::filesystem::path&)> on_store_open;
  /// Called when sampling and markers have stopped, before the store is summarized and closed.
  std::function<void()> on_store_closing;
  /// Lines "calo: ..." as the recording starts (each note, then "recording N device(s) into DIR") and for
  /// each sampler warning or error (from the sampler's thread, one at a time); unset = silent.
  core::NoticeFn notice;
};

/// Step-time statistics of one rank (or of the output-line markers, rank -1).
struct StepStats {
  int32_t rank = -1;         ///< rank, -1 when unknown
  int64_t steps = 0;         ///< steps counted (sum of steps covered by step spans, less warm-up)
  int64_t warmup_steps = 0;  ///< leading steps set apart as warm-up (core::leading_warmup_steps)
  double mean_ms = 0;        ///< mean step time
  double median_ms = 0;      ///< median step time
  double p90_ms = 0;         ///< 90th percentile step time
  double min_ms = 0;         ///< fastest step
  double max_ms = 0;         ///< slowest step
};

/// Per-device end-of-run figures (from the run store's interval summary).
struct DeviceSummary {
  int32_t device_idx = 0;            ///< run device index
  std::string label;                 ///< "gpu0", "cpu"
  std::string name;                  ///< product name
  double energy_j = 0;               ///< energy counter delta over the run (NaN if no counter)
  double mean_power_w = 0;           ///< energy_j / duration
  double peak_power_w = 0;           ///< max power_instant_w sample
  double peak_power_sampled_w = 0;   ///< max of the driver's own power samples (power_sampled_w; NaN if none)
  double peak_temp_c = 0;            ///< max temp_gpu_c sample
  double throttle_power_cap_s = 0;   ///< seconds clocks were held back by the power cap
  double throttle_sw_thermal_s = 0;  ///< seconds of software thermal slowdown
  double throttle_hw_thermal_s = 0;  ///< seconds of hardware thermal slowdown
  double throttle_power_brake_s = 0;  ///< seconds of hardware power brake
  int64_t samples = 0;                ///< samples of this device
};

/// What a recording produced.
struct RecordResult {
  int exit_code = 0;                   ///< the child's exit code (128+N if it died of signal N)
  std::filesystem::path run_dir;       ///< where run.db and the logs are
  double duration_s = 0;               ///< child run time
  std::vector<DeviceSummary> devices;  ///< per device
  std::vector<StepStats> steps;        ///< per rank
  std::vector<LoopStats> loops;        ///< sampler statistics
  JitterSummary jitter;                ///< jitter pooled over all wake-ups, and the worst loop's p99
  uint64_t samples_dropped = 0;        ///< samples the store refused (target 0)
  std::vector<std::string> notes;      ///< "GPUs: not available (...)" and similar
  std::string summary_text;            ///< the printed summary
};

/// Runs options.command under recording. Throws InputError for a missing command, an unknown executable or an
/// unwritable output directory (before starting anything); RuntimeFailure if the child cannot be started.
RecordResult record(const RecordOptions& options);

/// A recording's result as `calo record --json` prints it: every field of its devices, steps, sampler loops
/// and jitter (the summary text aside).
nlohmann::json to_json(const RecordResult& result);

/// Parses "20ms", "1s", "500us", "0.05s", "2m" into ns; throws InputError naming `what` otherwise.
int64_t parse_duration_ns(const std::string& text, const std::string& what);

/// Computes step statistics from step durations (ms) weighted by steps covered; exposed for tests.
StepStats step_stats(int32_t rank, const std::vector<std::pair<double, int64_t>>& duration_ms_and_steps);

/// The run store's spelling of a metric kind (inline: replay.cpp is also compiled alone into store tests).
inline store::MetricKind to_store_kind(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter:
      return store::MetricKind::kCounter;
    case MetricKind::kBitmask:
      return store::MetricKind::kBitmask;
    case MetricKind::kGauge:
      break;
  }
  return store::MetricKind::kGauge;
}

/// A metric kind read back from the run store.
inline MetricKind from_store_kind(store::MetricKind kind) {
  switch (kind) {
    case store::MetricKind::kCounter:
      return MetricKind::kCounter;
    case store::MetricKind::kBitmask:
      return MetricKind::kBitmask;
    case store::MetricKind::kGauge:
      break;
  }
  return MetricKind::kGauge;
}

/// The run-store row of a telemetry device, numbered `device_idx` within the run (inline: the replay source
/// is also built without the recorder, into the store tests and bench_store_ingest).
inline store::DeviceInfo to_store_device(const DeviceInfo& device, int device_idx) {
  store::DeviceInfo row;
  row.idx = device_idx;
  row.slot = device.index;
  row.kind = device.kind == "gpu" ? store::DeviceKind::kGpu : store::DeviceKind::kCpu;
  row.name = device.name;
  row.uuid = device.uuid;
  row.pci_bus = device.pci_bus;
  row.power_limit_w = device.power_limit_w;
  row.max_sm_mhz = device.max_sm_mhz;
  row.driver = device.driver;
  return row;
}

}  // namespace calo::telemetry
