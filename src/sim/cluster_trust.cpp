#include "sim/cluster_trust.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/config.h"

namespace calo::sim {
namespace {

/// |predicted / measured - 1| of `figure` in one leave-one-out entry; 0 when either is missing.
double relative_error(const nlohmann::json& entry, const char* figure) {
  const auto measured = entry.value("measured", nlohmann::json::object()).value(figure, 0.0);
  const auto predicted = entry.value("predicted", nlohmann::json::object()).value(figure, 0.0);
  return measured > 0 && predicted > 0 ? std::abs(predicted / measured - 1) : 0.0;
}

}  // namespace

ClusterTrust cluster_trust(const ClusterSpec& cluster) {
  ClusterTrust trust;
  const nlohmann::json& calibration = cluster.calibration;
  trust.calibrated = calibration.is_object();
  if (trust.calibrated) {
    const auto runs = calibration.value("runs", nlohmann::json::array());
    trust.runs = runs.is_array() ? static_cast<int>(runs.size()) : 0;
    const auto held_out = calibration.value("leave_one_out", nlohmann::json::array());
    for (const nlohmann::json& entry : held_out) {
      if (!entry.is_object()) continue;
      trust.held_out += 1;
      trust.worst_step_error = std::max(trust.worst_step_error, relative_error(entry, "step_time_s"));
      trust.worst_energy_error =
          std::max(trust.worst_energy_error, relative_error(entry, "energy_per_step_j"));
    }
    trust.summary = fmt::format(
        "{}: fitted to {} measured runs by calo calibrate; on {} runs held out of the fit, step time within "
        "{:.1f} % and energy within {:.1f} % (one GPU; multi-GPU layouts: docs/BENCHMARKS.md \"Plan against "
        "measurement\")",
        cluster.name, trust.runs, trust.held_out, 100 * trust.worst_step_error,
        100 * trust.worst_energy_error);
    return trust;
  }
  const auto presets = core::preset_names("clusters");
  const std::string sibling = cluster.name + "-calibrated";
  if (std::find(presets.begin(), presets.end(), sibling) != presets.end()) trust.calibrated_sibling = sibling;
  trust.summary = trust.calibrated_sibling.empty()
                      ? fmt::format(
                            "{}: datasheet figures, not fitted to measurements (absolute times and "
                            "energies are estimates; `calo calibrate` fits a cluster to your runs)",
                            cluster.name)
                      : fmt::format(
                            "{}: datasheet figures, not fitted to measurements; --cluster {} is fitted to "
                            "measured runs: prefer it for absolute times and energies",
                            cluster.name, trust.calibrated_sibling);
  return trust;
}

}  // namespace calo::sim
