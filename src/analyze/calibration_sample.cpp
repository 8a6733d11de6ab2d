// In-sample or out-of-sample: a sim run's stored cluster provenance against the measured run it is compared
// with.
#include "analyze/calibration_sample.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/device_names.h"
#include "core/enum_names.h"

namespace calo::analyze {
namespace {

/// Every fitted run of a `calibration` block: its own `runs`, then each refit's.
std::vector<nlohmann::json> calibration_runs(const nlohmann::json& calibration) {
  std::vector<nlohmann::json> runs;
  const auto add = [&runs](const nlohmann::json& block) {
    if (!block.is_object() || !block.contains("runs") || !block["runs"].is_array()) return;
    for (const auto& run : block["runs"]) {
      if (run.is_object() && run.value("role", "") != "thermal") runs.push_back(run);
    }
  };
  add(calibration);
  if (calibration.contains("refits") && calibration["refits"].is_array()) {
    for (const auto& refit : calibration["refits"]) add(refit);
  }
  return runs;
}

/// True when `recorded` (a path `calo calibrate` wrote, relative to where it ran or absolute) names
/// `run_dir`: the same text, or the same directory resolved from here.
bool same_path(const std::string& recorded, const std::filesystem::path& run_dir) {
  if (recorded.empty()) return false;
  if (std::filesystem::path(recorded).lexically_normal() == run_dir.lexically_normal()) return true;
  std::error_code error;
  if (!std::filesystem::exists(recorded, error)) return false;
  return std::filesystem::equivalent(recorded, run_dir, error) && !error;
}

/// True when the calibration's record of a fitted run (`calibration.runs[i]`) is `measured`.
bool is_fitted_run(const nlohmann::json& record, const RunAnalysis& measured) {
  const auto started = record.find("started_unix_ns");
  if (started != record.end() && started->is_number_integer() && started->get<int64_t>() != 0) {
    // The run's identity (its wall-clock start and host): decisive either way, wherever the run now lives.
    return started->get<int64_t>() == measured.run.wall_offset_ns &&
           record.value("host", measured.run.host) == measured.run.host;
  }
  if (same_path(record.value("path", ""), measured.run_dir)) return true;
  // A calibration written before runs carried their identity: the same measured median step time (to 1e-8,
  // nanoseconds of a measured step) is the same run.
  const auto figures = record.find("measured");
  if (figures == record.end() || !figures->is_object() || !figures->contains("step_time_s")) return false;
  const double recorded_s = (*figures)["step_time_s"].get<double>();
  const double measured_s = measured.step_time_s.p50;
  return std::isfinite(measured_s) && measured_s > 0 &&
         std::fabs(recorded_s - measured_s) <= 1e-8 * measured_s;
}

}  // namespace

CalibrationSample calibration_sample(const RunAnalysis& sim, const RunAnalysis& measured) {
  CalibrationSample sample;
  if (sim.run.kind != store::RunKind::kSim || measured.run.kind == store::RunKind::kSim) return sample;
  const auto config = nlohmann::json::parse(sim.run.config_json, nullptr, false);
  const bool has_cluster = config.is_object() && config.contains("cluster") && config["cluster"].is_object();
  const nlohmann::json cluster = has_cluster ? config["cluster"] : nlohmann::json::object();
  sample.cluster = cluster.value("name", "");
  const auto calibration = cluster.find("calibration");
  if (calibration == cluster.end() || !calibration->is_object()) {
    sample.kind = SampleKind::kUncalibrated;
    return sample;
  }
  sample.kind = SampleKind::kOutOfSample;
  for (const nlohmann::json& record : calibration_runs(*calibration)) {
    sample.calibrated_on.push_back(record.value("path", "?"));
    if (is_fitted_run(record, measured)) sample.kind = SampleKind::kInSample;
  }
  return sample;
}

std::string describe_sample(const CalibrationSample& sample) {
  switch (sample.kind) {
    case SampleKind::kInSample:
      return "in-sample (the cluster was calibrated on this run)";
    case SampleKind::kOutOfSample:
      return sample.calibrated_on.empty()
                 ? "out-of-sample (the cluster's calibration lists no run)"
                 : fmt::format("out-of-sample (calibrated on {})", fmt::join(sample.calibrated_on, ", "));
    case SampleKind::kUncalibrated:
      return fmt::format("uncalibrated cluster {} (stock figures, fitted to no run)",
                         sample.cluster.empty() ? std::string("?") : sample.cluster);
    case SampleKind::kNone:
      break;
  }
  return "";
}

std::string to_string(SampleKind kind) {
  static constexpr std::array<const char*, 4> kNames{"", "uncalibrated", "in-sample", "out-of-sample"};
  return core::enum_name(kind, kNames, "");
}

bool has_placeholder_power(const RunAnalysis& run) {
  return run.run.kind == store::RunKind::kSim && !run.devices.empty() &&
         core::is_cpu_host_device(run.devices.front().name);
}

bool is_power_or_heat_figure(const std::string& key) {
  for (const char* prefix : {"energy_", "tokens_per_j", "samples_per_s_mj", "power_", "temp_", "sm_clock_"}) {
    if (key.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace calo::analyze
