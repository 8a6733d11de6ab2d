// Campaign reports: `calo report CAMPAIGN_DIR...` reads a campaign index (DIR/campaign.json, written by
// `calo sweep`), analyzes every finished point's run and renders one HTML page of campaign figures: heatmaps
// of throughput, MFU and energy per token over the swept axes, micro-batch vs peak power / swing / throttle
// time, recompute and overlap deltas, per-GPU temperature heatmaps, simulated vs measured. Sections:
// docs/REPORTS.md.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "report/html_report.h"

namespace calo::report {

/// Whether `dir` holds a campaign index (campaign.json).
bool is_campaign_dir(const std::filesystem::path& dir);

/// Figures of one campaign point; NaN where the run did not give the figure (docs/METRICS.md, "Campaigns").
struct CampaignPoint {
  std::string name;    ///< point name, e.g. "tp4-pp4-mbs2"
  std::string status;  ///< done | failed | skipped | pending | running
  std::string reason;  ///< why failed or skipped
  std::vector<std::pair<std::string, std::string>> axis_values;  ///< (axis key, value label), axis order
  std::map<std::string, std::string> flags;      ///< every flag of the point (fixed and swept)
  bool simulated = false;                        ///< the run is a simulation (kind sim)
  double tokens_per_s = NAN;                     ///< tokens per second
  double mfu = NAN;                              ///< model FLOPs utilization (fraction)
  double energy_per_token_j = NAN;               ///< GPU energy per token, J
  double samples_per_s_mj = NAN;                 ///< samples / (s x MJ), the study's metric
  double step_time_s = NAN;                      ///< mean step time, s
  double peak_power_w = NAN;                     ///< largest single-GPU power, W
  double power_swing_w = NAN;                    ///< largest single-GPU power swing within 100 ms, W
  double throttle_power_cap_s = NAN;             ///< power-cap throttle time of the most throttled GPU, s
  double throttle_thermal_s = NAN;               ///< thermal throttle time of the most throttled GPU, s
  double max_temp_c = NAN;                       ///< hottest GPU temperature, C
  std::vector<std::vector<double>> temp_peak_c;  ///< peak temperature per [node][slot], C (NaN: no GPU)
};

/// One campaign as read from its directory.
struct Campaign {
  std::filesystem::path dir;          ///< campaign directory
  std::string name;                   ///< campaign name
  std::string backend;                ///< sim | cpu | cuda
  std::string model;                  ///< model of the spec
  std::string cluster;                ///< cluster of the spec
  std::vector<std::string> axes;      ///< swept keys in axis order
  std::vector<CampaignPoint> points;  ///< every point of the index, in grid order
};

/// Reads DIR/campaign.json and analyzes the run of every done point. InputError (naming the file and the fix)
/// when the index is missing or malformed; a done point whose run cannot be read becomes failed with the
/// error.
Campaign load_campaign(const std::filesystem::path& dir);

/// Renders the campaign report page for `campaigns` (points of a simulated and a measured campaign with the
/// same name are compared).
std::string render_campaign_report(const std::vector<Campaign>& campaigns, const ReportOptions& options = {});

}  // namespace calo::report
