// Run comparison: ratios to the first run and simulated-vs-measured relative errors.
#include "analyze/compare.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "parallel/layout.h"

namespace calo::analyze {

namespace {

/// The name `calo calibrate` gives a compare figure (docs/METRICS.md), or "" if calibration does not rate it.
/// Tokens/s and energy per token are rated by step time and energy per step (a step's tokens are exact).
std::string calibration_figure(const std::string& key) {
  static const std::vector<std::pair<std::string, std::string>> kNames = {
      {"step_time_p50_s", "step_time_s"},       {"energy_per_step_j", "energy_per_step_j"},
      {"tokens_per_s", "step_time_s"},          {"energy_per_token_j", "energy_per_step_j"},
      {"power_gpu_mean_w", "mean_power_w"},     {"power_gpu_peak_w", "peak_power_w"},
      {"power_swing_100ms_w", "swing_100ms_w"}, {"temp_gpu_peak_500ms_c", "peak_temp_c"},
      {"sm_clock_mean_mhz", "sm_clock_mhz"}};
  for (const auto& [compare_key, name] : kNames) {
    if (compare_key == key) return name;
  }
  return "";
}

}  // namespace

double calibrated_tolerance(const RunAnalysis& run, const std::string& key) {
  if (run.run.kind != store::RunKind::kSim) return NAN;
  const std::string name = calibration_figure(key);
  if (name.empty()) return NAN;
  const auto config = nlohmann::json::parse(run.run.config_json, nullptr, false);
  const auto* tolerance = config.is_object() ? &config : nullptr;
  for (const char* step : {"cluster", "calibration", "tolerance"}) {
    if (tolerance == nullptr || !tolerance->is_object() || !tolerance->contains(step)) return NAN;
    tolerance = &(*tolerance)[step];
  }
  if (!tolerance->contains(name) || !(*tolerance)[name].contains("achieved")) return NAN;
  const double achieved = (*tolerance)[name]["achieved"].get<double>();
  // Tokens/s is the reciprocal of step time: a step within ±t puts it within +t/(1−t) … −t/(1+t).
  return key == "tokens_per_s" && achieved < 1 ? achieved / (1 - achieved) : achieved;
}

/// A stored layout with every key a current layout has (keys added later, e.g. "cp", take their defaults),
/// so runs stored before a layout option existed still match runs stored after; unchanged if unparsable.
static nlohmann::json canonical_layout(const nlohmann::json& layout) {
  if (!layout.is_object()) return layout;
  try {
    return parallel::to_json(parallel::layout_from_json(layout));
  } catch (const std::exception&) {
    return layout;
  }
}

std::string run_label(const RunAnalysis& analysis) {
  const auto& run = analysis.run;
  const auto config = nlohmann::json::parse(run.config_json, nullptr, false);
  std::string layout;
  if (config.is_object() && config.contains("layout") && config["layout"].is_object()) {
    try {
      const parallel::Layout parsed = parallel::layout_from_json(canonical_layout(config["layout"]));
      layout = parallel::describe(parsed);
      if (parsed.seq_length > 0) layout += fmt::format(" seq{}", parsed.seq_length);
    } catch (const std::exception&) {
      layout.clear();  // a layout this version cannot read: the run's name alone
    }
  }
  if (!layout.empty() && config.contains("model") && config["model"].is_object()) {
    const std::string model = config["model"].value("name", "");
    if (!model.empty()) layout = model + " " + layout;
  }
  std::string cluster;
  if (run.kind == store::RunKind::kSim && config.is_object() && config.contains("cluster") &&
      config["cluster"].is_object())
    cluster = config["cluster"].value("name", "");
  const std::string kind = cluster.empty() ? std::string(store::to_string(run.kind))
                                           : fmt::format("{} on {}", store::to_string(run.kind), cluster);
  return layout.empty() ? fmt::format("{} ({})", run.name, kind) : fmt::format("{} ({})", layout, kind);
}

bool same_graph(const RunAnalysis& a, const RunAnalysis& b) {
  auto config_a = nlohmann::json::parse(a.run.config_json, nullptr, false);
  auto config_b = nlohmann::json::parse(b.run.config_json, nullptr, false);
  if (config_a.is_object() && config_a.contains("layout"))
    config_a["layout"] = canonical_layout(config_a["layout"]);
  if (config_b.is_object() && config_b.contains("layout"))
    config_b["layout"] = canonical_layout(config_b["layout"]);
  for (const char* key : {"model", "layout"}) {
    if (!config_a.is_object() || !config_b.is_object() || !config_a.contains(key) || !config_b.contains(key))
      return false;
    if (!config_a[key].is_object() || !config_b[key].is_object()) return false;
  }
  if (config_a["model"] != config_b["model"]) return false;
  // Layouts compare by meaning: a run stored before a layout option existed holds that option's default.
  try {
    return parallel::to_json(parallel::layout_from_json(config_a["layout"])) ==
           parallel::to_json(parallel::layout_from_json(config_b["layout"]));
  } catch (const std::exception&) {
    return false;  // a layout this version cannot read is no match
  }
}

Comparison compare_runs(const std::vector<RunAnalysis>& runs) {
  Comparison comparison;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    const auto& run = runs[index].run;
    comparison.run_labels.push_back(run_label(runs[index]));
    int32_t reference = -1;
    for (std::size_t other = 0; other < runs.size() && run.kind == store::RunKind::kSim; ++other) {
      if (runs[other].run.kind != store::RunKind::kSim && same_graph(runs[index], runs[other])) {
        reference = static_cast<int32_t>(other);
        break;
      }
    }
    comparison.sim_reference.push_back(reference);
    comparison.samples.push_back(
        reference >= 0 ? calibration_sample(runs[index], runs[static_cast<std::size_t>(reference)])
                       : CalibrationSample{});
    if (reference >= 0 && (comparison.measured_reference < 0 || reference < comparison.measured_reference))
      comparison.measured_reference = reference;
  }
  std::vector<std::vector<Figure>> figures;
  for (const auto& run : runs) figures.push_back(run_figures(run));
  if (figures.empty()) return comparison;
  for (std::size_t row = 0; row < figures[0].size(); ++row) {
    ComparisonRow out;
    out.key = figures[0][row].key;
    out.unit = figures[0][row].unit;
    out.higher_is_better = figures[0][row].higher_is_better;
    for (const auto& run_figures_of : figures) {
      double value = NAN;
      for (const auto& figure : run_figures_of) {
        if (figure.key == out.key) value = figure.value;
      }
      out.values.push_back(value);
    }
    double base = out.values[0];
    for (std::size_t index = 0; index < runs.size(); ++index) {
      double value = out.values[index];
      out.ratio.push_back(std::isnan(value) || std::isnan(base) || base == 0 ? NAN : value / base);
      double error = NAN;
      if (comparison.sim_reference[index] >= 0) {
        double measured = out.values[static_cast<std::size_t>(comparison.sim_reference[index])];
        if (!std::isnan(value) && !std::isnan(measured) && measured != 0)
          error = (value - measured) / measured;
      }
      out.sim_error.push_back(error);
      out.tolerance.push_back(calibrated_tolerance(runs[index], out.key));
    }
    comparison.rows.push_back(std::move(out));
  }
  // What a user compares two layouts by comes first: throughput, MFU, energy per token.
  const std::vector<std::string> lead = {"tokens_per_s", "mfu", "energy_per_token_j"};
  std::stable_sort(comparison.rows.begin(), comparison.rows.end(), [&lead](const auto& a, const auto& b) {
    const auto rank = [&lead](const std::string& key) {
      return static_cast<std::size_t>(std::find(lead.begin(), lead.end(), key) - lead.begin());
    };
    return rank(a.key) < rank(b.key);
  });
  return comparison;
}

double stated_sim_error(const Comparison& comparison, const ComparisonRow& row, std::size_t run_index) {
  const double error = row.sim_error[run_index];
  if (row.unit != "C" || std::isnan(error)) return error;
  return error * row.values[static_cast<std::size_t>(comparison.sim_reference[run_index])];
}

double mean_abs_sim_error(const Comparison& comparison, std::size_t run_index) {
  double sum = 0;
  int count = 0;
  for (const auto& row : comparison.rows) {
    if (run_index < row.sim_error.size() && !std::isnan(row.sim_error[run_index])) {
      sum += std::fabs(row.sim_error[run_index]);
      ++count;
    }
  }
  return count > 0 ? sum / count : NAN;
}

ShownFigure shown_figure(double value, const std::string& unit) {
  if (unit == "fraction") return {value * 100.0, "%"};
  return {value, unit};
}

}  // namespace calo::analyze
