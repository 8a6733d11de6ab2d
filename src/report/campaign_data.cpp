// Campaign reports, data side: reads a campaign index and turns every done point's run into CampaignPoint
// figures (analyze::analyze_run, with the simulator's own summary rows where it wrote them).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "analyze/metrics.h"
#include "core/campaign_index.h"
#include "core/error.h"
#include "report/campaign_report.h"
#include "store/run_store.h"

namespace calo::report {
namespace {

nlohmann::json read_index(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "campaign.json";
  std::ifstream file(path);
  if (!file)
    throw InputError(
        fmt::format("{}: no campaign index; give a directory written by `calo sweep`", path.string()));
  try {
    nlohmann::json index = nlohmann::json::parse(file);
    if (core::is_campaign_index(index)) return index;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format(
      "{}: not a campaign index (JSON with \"points\"); rerun `calo sweep ... --resume`", path.string()));
}

/// Axis keys of an index: "axes" when written, else the spec's axis keys (older indexes).
std::vector<std::string> index_axes(const nlohmann::json& index) {
  std::vector<std::string> axes;
  if (index.contains("axes") && index["axes"].is_array()) {
    for (const auto& key : index["axes"]) axes.push_back(key.get<std::string>());
  } else if (index.contains("spec") && index["spec"].contains("axes")) {
    for (const auto& [key, unused] : index["spec"]["axes"].items()) axes.push_back(key);
  }
  return axes;
}

/// Axis values of a point: "axis_values" when written, else the point's flag of each axis.
std::vector<std::pair<std::string, std::string>> point_axis_values(const nlohmann::json& entry,
                                                                   const std::vector<std::string>& axes) {
  std::vector<std::pair<std::string, std::string>> values;
  if (entry.contains("axis_values") && entry["axis_values"].is_array()) {
    for (const auto& pair : entry["axis_values"])
      values.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
    return values;
  }
  const nlohmann::json flags = entry.value("flags", nlohmann::json::object());
  for (const std::string& key : axes) {
    values.emplace_back(key, flags.contains(key) ? flags[key].get<std::string>() : entry.value("name", ""));
  }
  return values;
}

/// The summary rows a run wrote about itself: scope "run" (calo sim: throughput, swing, throttle) and "bench"
/// (calo bench: throughput, MFU, energy per token); "run" wins where both hold a key.
std::map<std::string, double> run_summary(const std::filesystem::path& run_dir) {
  std::map<std::string, double> rows;
  store::RunReader reader(run_dir);
  for (const char* scope : {"bench", "run"}) {
    for (const store::SummaryRow& row : reader.summaries(std::string_view(scope))) rows[row.key] = row.value;
  }
  return rows;
}

double max_over_devices(const analyze::RunAnalysis& run, double (*value_of)(const analyze::DeviceMetrics&)) {
  double best = NAN;
  for (const auto& device : run.device_metrics) {
    const double value = value_of(device);
    if (!std::isnan(value) && (std::isnan(best) || value > best)) best = value;
  }
  return best;
}

/// Hottest die per GPU as the simulator wrote it (summary scope "gpu<idx>", key max_die_c): a one-step
/// simulation has no temperature sample inside its analysis window. Empty for measured runs.
std::map<int, double> simulated_die_c(const std::filesystem::path& run_dir) {
  std::map<int, double> die_c;
  store::RunReader reader(run_dir);
  for (const store::SummaryRow& row : reader.summaries()) {
    if (row.key == "max_die_c" && row.scope.rfind("gpu", 0) == 0 && row.scope.size() > 3 &&
        row.scope.find_first_not_of("0123456789", 3) == std::string::npos)
      die_c[std::stoi(row.scope.substr(3))] = row.value;
  }
  return die_c;
}

/// Peak temperature per [node][slot] (NaN where no GPU sits); a GPU without samples takes `fallback_c[idx]`.
std::vector<std::vector<double>> temperature_grid(const analyze::RunAnalysis& run,
                                                  const std::map<int, double>& fallback_c) {
  std::vector<std::vector<double>> grid;
  for (const auto& metrics : run.device_metrics) {
    analyze::DeviceMetrics device = metrics;
    const auto fallback = fallback_c.find(device.device.idx);
    if (std::isnan(device.temp_peak_c) && fallback != fallback_c.end()) device.temp_peak_c = fallback->second;
    if (std::isnan(device.temp_peak_c) || device.device.node < 0 || device.device.slot < 0) continue;
    const auto node = static_cast<std::size_t>(device.device.node);
    const auto slot = static_cast<std::size_t>(device.device.slot);
    if (grid.size() <= node) grid.resize(node + 1);
    for (auto& row : grid) {
      if (row.size() <= slot) row.resize(slot + 1, NAN);
    }
    grid[node][slot] = device.temp_peak_c;
  }
  std::size_t slots = 0;
  for (const auto& row : grid) slots = std::max(slots, row.size());
  for (auto& row : grid) row.resize(slots, NAN);
  return grid;
}

/// Fills the figures of a done point from its run (docs/METRICS.md, "Campaigns").
void fill_figures(const std::filesystem::path& run_dir, CampaignPoint& point) {
  const analyze::RunAnalysis run = analyze::analyze_run(run_dir);
  const std::map<std::string, double> summary = run_summary(run_dir);
  auto from_summary = [&summary](const char* key, double fallback) {
    const auto found = summary.find(key);
    return found != summary.end() && std::isfinite(found->second) ? found->second : fallback;
  };
  const double window_s = static_cast<double>(run.t_end_ns - run.t_begin_ns) / 1e9;
  point.simulated = run.run.kind == store::RunKind::kSim;
  // The simulator stores its own throughput figures as run summary rows; a measured run's come from analyze.
  point.tokens_per_s = from_summary("tokens_per_s", run.tokens_per_s);
  point.mfu = from_summary("mfu", run.mfu);
  point.step_time_s = from_summary("iteration_s", run.step_time_s.count > 0 ? run.step_time_s.mean : NAN);
  const double energy_per_step_j = from_summary("energy_per_step_j", run.energy_per_step_j);
  point.energy_per_token_j =
      from_summary("energy_per_token_j", std::isnan(run.energy_per_token_j)
                                             ? energy_per_step_j / (point.tokens_per_s * point.step_time_s)
                                             : run.energy_per_token_j);
  // samples/(s*MJ) = (global batch / step time) / (energy per step / step time / 1e6).
  const auto gbs = point.flags.find("gbs");
  point.samples_per_s_mj = std::isnan(run.samples_per_s_mj) && gbs != point.flags.end()
                               ? std::stod(gbs->second) * 1e6 / energy_per_step_j
                               : run.samples_per_s_mj;
  point.peak_power_w = from_summary("peak_power_w", run.power_peak_w);
  point.power_swing_w = from_summary(
      "power_swing_100ms_w",
      max_over_devices(run, [](const analyze::DeviceMetrics& d) { return d.power_swing_100ms_w; }));
  const double cap_fraction =
      max_over_devices(run, [](const analyze::DeviceMetrics& d) { return d.throttle_fraction[0]; });
  const double thermal_fraction = max_over_devices(run, [](const analyze::DeviceMetrics& d) {
    return std::isnan(d.throttle_fraction[1])
               ? d.throttle_fraction[2]
               : d.throttle_fraction[1] + (std::isnan(d.throttle_fraction[2]) ? 0.0 : d.throttle_fraction[2]);
  });
  point.throttle_power_cap_s = from_summary("throttle_power_cap_s", cap_fraction * window_s);
  point.throttle_thermal_s = from_summary("throttle_sw_thermal_s", thermal_fraction * window_s);
  point.temp_peak_c = temperature_grid(run, simulated_die_c(run_dir));
  for (const auto& row : point.temp_peak_c) {
    for (double temp_c : row) {
      if (!std::isnan(temp_c) && (std::isnan(point.max_temp_c) || temp_c > point.max_temp_c))
        point.max_temp_c = temp_c;
    }
  }
  // Above 64 GPUs a simulation stores no per-GPU rows and samples of some GPUs only (docs/REPORTS.md): its
  // run row holds the hottest die of all of them (46.3 C where the stored samples peaked at 45.6 C, 8192
  // GPUs).
  const double run_max_die_c = from_summary("max_die_c", NAN);
  if (std::isnan(point.max_temp_c) || run_max_die_c > point.max_temp_c) point.max_temp_c = run_max_die_c;
}

}  // namespace

bool is_campaign_dir(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / "campaign.json");
}

Campaign load_campaign(const std::filesystem::path& dir) {
  const nlohmann::json index = read_index(dir);
  Campaign campaign;
  campaign.dir = dir;
  campaign.name = index.value("campaign", dir.filename().string());
  campaign.backend = index.value("backend", "");
  if (index.contains("spec") && index["spec"].is_object()) {
    campaign.model = index["spec"].value("model", "");
    const auto layers = index["spec"].find("layers");
    if (layers != index["spec"].end() && layers->is_number_integer())
      campaign.model += fmt::format(" sliced to {} layers", layers->get<int>());
    campaign.cluster = index["spec"].value("cluster", "");
  }
  campaign.axes = index_axes(index);
  for (const auto& entry : index["points"]) {
    CampaignPoint point;
    point.name = entry.value("name", "");
    point.status = entry.value("status", "");
    point.reason = entry.value("reason", "");
    point.axis_values = point_axis_values(entry, campaign.axes);
    const nlohmann::json flags = entry.value("flags", nlohmann::json::object());
    for (const auto& [key, value] : flags.items())
      point.flags[key] = value.is_string() ? value.get<std::string>() : value.dump();
    if (point.status == "done") {
      try {
        fill_figures(dir / entry.value("run_dir", point.name), point);
      } catch (const std::exception& error) {
        point.status = "failed";
        point.reason = fmt::format("run not readable: {}", error.what());
      }
    }
    campaign.points.push_back(std::move(point));
  }
  return campaign;
}

}  // namespace calo::report
