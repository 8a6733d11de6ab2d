// `calo report RUN... [--out FILE.html]`: one self-contained HTML report over one or more runs, or, when the
// first directory is a campaign (campaign.json from `calo sweep`), the campaign report over the campaigns
// given.
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "analyze/metrics.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/threads.h"
#include "report/campaign_report.h"
#include "report/html_report.h"

namespace calo::cli {
namespace {

struct ReportFlags {
  std::vector<std::string> runs;
  std::string out;
  std::string title = "Calorimeter report";
  int threads = 0;
  bool json = false;
};

/// Writes `html` to `out` whole or not at all (InputError when the path is not writable).
void write_html(const std::filesystem::path& out, const std::string& html) {
  core::write_file_atomically(out, html, "--out");
}

/// The HTML file to write (--out, default <first run>/report.html), refused before any work unless it is
/// absent or a regular file.
std::filesystem::path report_path(const ReportFlags& flags) {
  std::filesystem::path out = flags.out.empty() ? std::filesystem::path(flags.runs.front()) / "report.html"
                                                : std::filesystem::path(flags.out);
  core::require_file_target(out, "--out");
  return out;
}

/// `calo report CAMPAIGN_DIR...`: the campaign report over every given campaign directory.
int run_campaign_report(const ReportFlags& flags) {
  auto started = std::chrono::steady_clock::now();
  const std::filesystem::path out = report_path(flags);
  std::vector<report::Campaign> campaigns;
  int points_done = 0;
  for (const auto& dir : flags.runs) {
    if (!report::is_campaign_dir(dir))
      throw InputError(
          fmt::format("{}: not a campaign directory (no campaign.json) while {} is one; report campaigns and "
                      "runs separately",
                      dir, flags.runs.front()));
    campaigns.push_back(report::load_campaign(dir));
    for (const auto& point : campaigns.back().points) points_done += point.status == "done" ? 1 : 0;
  }
  report::ReportOptions options{flags.title == "Calorimeter report" ? "Calorimeter campaign report"
                                                                    : flags.title};
  const std::string html = report::render_campaign_report(campaigns, options);
  write_html(out, html);
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const int charts = report::count_charts(html);
  if (flags.json) {
    print_json({{"out", out.string()},
                {"campaigns", campaigns.size()},
                {"points_done", points_done},
                {"charts", charts},
                {"bytes", html.size()},
                {"total_s", total_s}});
  } else {
    fmt::print("campaign report: {} ({} campaign(s), {} point(s) done, {} charts, {:.1f} KiB) in {:.2f} s\n",
               out.string(), campaigns.size(), points_done, charts, static_cast<double>(html.size()) / 1024.0,
               total_s);
  }
  return 0;
}

int run_report(const ReportFlags& flags) {
  if (report::is_campaign_dir(flags.runs.front())) return run_campaign_report(flags);
  auto started = std::chrono::steady_clock::now();
  const std::filesystem::path out = report_path(flags);
  std::vector<analyze::RunAnalysis> analyses;
  analyze::AnalyzeOptions options;
  options.threads = flags.threads;
  int64_t samples = 0;
  for (const auto& run : flags.runs) {
    analyses.push_back(analyze::analyze_run(run, options));
    samples += analyses.back().sample_count;
  }
  double analyze_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::string html = report::render_html_report(analyses, {flags.title});
  write_html(out, html);
  double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int charts = report::count_charts(html);
  if (flags.json) {
    print_json({{"out", out.string()},
                {"runs", flags.runs.size()},
                {"samples", samples},
                {"charts", charts},
                {"bytes", html.size()},
                {"analyze_s", analyze_s},
                {"total_s", total_s}});
  } else {
    fmt::print("report: {} ({} run(s), {} samples, {} charts, {:.1f} KiB) in {:.2f} s\n", out.string(),
               flags.runs.size(), samples, charts, static_cast<double>(html.size()) / 1024.0, total_s);
    for (const std::string& line : report::verdict_lines(analyses)) fmt::print("{}\n", line);
  }
  return 0;
}

const CommandRegistration kReport(
    "report",
    "render one self-contained HTML report (verdict, simulated vs measured, runs side by side, time series, "
    "per-GPU figures, kernels, projections)",
    80, [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<ReportFlags>();
      app.add_option("RUN", flags->runs,
                     "run directories (a sim run is compared with a measured run of the same model and "
                     "layout), or campaign "
                     "directories (calo sweep --out DIR)")
          ->required()
          ->check(CLI::ExistingDirectory);
      app.add_option("--out", flags->out, "HTML file to write (default: <first run>/report.html)");
      app.add_option("--title", flags->title, "page title")->capture_default_str();
      app.add_option("--jobs,-j,--threads", flags->threads,
                     "runs' series read at once, one thread each (default: one per core)")
          ->check(CLI::Range(0, core::kMaxJobs));
      app.add_flag("--json", flags->json, "print the result as JSON");
      return [flags] { return run_report(*flags); };
    });

}  // namespace
}  // namespace calo::cli
