// `calo report RUN... [--out FILE.html]`: one self-contained HTML report over one or more runs.
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "analyze/metrics.h"
#include "cli/command.h"
#include "core/error.h"
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

int run_report(const ReportFlags& flags) {
  auto started = std::chrono::steady_clock::now();
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
  std::filesystem::path out = flags.out.empty() ? std::filesystem::path(flags.runs.front()) / "report.html"
                                                : std::filesystem::path(flags.out);
  {
    std::ofstream file(out, std::ios::binary);
    if (!file)
      throw InputError(fmt::format("--out {}: cannot write here; pass a writable file path", out.string()));
    file << html;
    if (!file) throw RuntimeFailure(fmt::format("{}: write failed", out.string()));
  }
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
  }
  return 0;
}

const CommandRegistration kReport(
    "report",
    "render one self-contained HTML report (verdict, simulated vs measured, runs side by side, time series, "
    "per-GPU figures, kernels, projections)",
    80, [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<ReportFlags>();
      app.add_option(
             "RUN", flags->runs,
             "run directories (a sim run is compared with a measured run of the same model and layout)")
          ->required()
          ->check(CLI::ExistingDirectory);
      app.add_option("--out", flags->out, "HTML file to write (default: <first run>/report.html)");
      app.add_option("--title", flags->title, "page title")->capture_default_str();
      app.add_option("--threads", flags->threads, "reader threads (default: one per core)");
      app.add_flag("--json", flags->json, "print the result as JSON");
      return [flags] { return run_report(*flags); };
    });

}  // namespace
}  // namespace calo::cli
