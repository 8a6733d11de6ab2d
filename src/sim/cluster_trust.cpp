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

/// Adds `fit`'s leave-one-out entries to `held_out` and its worst step and energy errors.
void add_held_out(const nlohmann::json& fit, int& held_out, double& worst_step, double& worst_energy) {
  const auto entries = fit.value("leave_one_out", nlohmann::json::array());
  for (const nlohmann::json& entry : entries) {
    if (!entry.is_object()) continue;
    held_out += 1;
    worst_step = std::max(worst_step, relative_error(entry, "step_time_s"));
    worst_energy = std::max(worst_energy, relative_error(entry, "energy_per_step_j"));
  }
}

/// The refits' part of the summary ("" without refits that held runs out).
std::string refit_summary(const ClusterTrust& trust) {
  if (trust.refit_held_out == 0) return "";
  return fmt::format("; refitted on {} multi-GPU runs, held out within {:.1f} % step and {:.1f} % energy",
                     trust.refit_runs, 100 * trust.refit_worst_step_error,
                     100 * trust.refit_worst_energy_error);
}

/// "10 runs + 2 thermal + 14 refit": the runs, thermal runs and refits' runs of a fitted cluster.
std::string runs_text(const ClusterTrust& trust) {
  std::string text = fmt::format("{} runs", trust.runs);
  if (trust.thermal_runs > 0) text += fmt::format(" + {} thermal", trust.thermal_runs);
  if (trust.refit_runs > 0) text += fmt::format(" + {} refit", trust.refit_runs);
  return text;
}

}  // namespace

ClusterTrust cluster_trust(const ClusterSpec& cluster) {
  ClusterTrust trust;
  const nlohmann::json& calibration = cluster.calibration;
  trust.calibrated = calibration.is_object();
  if (trust.calibrated) {
    // Thermal runs (calo calibrate --thermal-run) fit the heat model alone: counted apart from the runs.
    for (const nlohmann::json& run : calibration.value("runs", nlohmann::json::array())) {
      const bool thermal = run.is_object() && run.value("role", std::string()) == "thermal";
      (thermal ? trust.thermal_runs : trust.runs) += 1;
    }
    add_held_out(calibration, trust.held_out, trust.worst_step_error, trust.worst_energy_error);
    for (const nlohmann::json& refit : calibration.value("refits", nlohmann::json::array())) {
      if (!refit.is_object()) continue;
      const auto refit_runs = refit.value("runs", nlohmann::json::array());
      trust.refit_runs += refit_runs.is_array() ? static_cast<int>(refit_runs.size()) : 0;
      add_held_out(refit, trust.refit_held_out, trust.refit_worst_step_error, trust.refit_worst_energy_error);
    }
    trust.runs_text = runs_text(trust);
    trust.summary = fmt::format(
        "{}: fitted to {} measured runs{} by calo calibrate; on {} runs held out of the fit, step time "
        "within "
        "{:.1f} % and energy within {:.1f} %{} (multi-GPU layouts: docs/benchmarks/plan-vs-measured.md)",
        cluster.name, trust.runs,
        trust.thermal_runs > 0 ? fmt::format(" and {} thermal runs (heat only)", trust.thermal_runs) : "",
        trust.held_out, 100 * trust.worst_step_error, 100 * trust.worst_energy_error, refit_summary(trust));
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

std::string power_cap_trust(const ClusterSpec& cluster, double cap_w) {
  if (cap_w <= 0 || cap_w >= cluster.gpu.power_limit_w) return "";
  // `calo calibrate` lists what it kept from the base preset; a datasheet preset fitted nothing.
  const nlohmann::json kept = cluster.calibration.is_object()
                                  ? cluster.calibration.value("kept_from_base", nlohmann::json::array())
                                  : nlohmann::json::array();
  const bool fitted = cluster.calibration.is_object() &&
                      std::find(kept.begin(), kept.end(), "gpu.clock_power_exponent") == kept.end();
  return fmt::format(
      "under a {:g} W cap (the card's limit is {:g} W) the controller lowers the clock until the ~1 s power "
      "average meets the cap, and step time and energy follow active power ∝ (clock / max)^{:g} "
      "(gpu.clock_power_exponent, {}): capped figures extrapolate beyond the held-out errors; single 20 ms "
      "samples still rise above the cap when ops start, so the peak sample is not bounded by it",
      cap_w, cluster.gpu.power_limit_w, cluster.gpu.clock_power_exponent,
      fitted ? "fitted by calo calibrate" : "a datasheet estimate no run has fitted");
}

}  // namespace calo::sim
