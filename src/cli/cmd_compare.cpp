// `calo compare RUN_A RUN_B [...]`: figures side by side, ratios to the first run, which run wins on
// throughput, energy per token and cost (against the simulator's error), and for a simulated run against a
// measured one the relative error per figure.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "analyze/compare.h"
#include "analyze/winner.h"
#include "cli/command.h"
#include "core/config.h"
#include "core/table.h"

namespace calo::cli {
namespace {

struct CompareFlags {
  std::vector<std::string> runs;
  bool json = false;
};

std::string cell(double value) {
  if (std::isnan(value)) return "-";
  double magnitude = std::fabs(value);
  if (magnitude >= 1e5) return fmt::format("{:.4g}", value);
  if (magnitude >= 100) return fmt::format("{:.1f}", value);
  return fmt::format("{:.4g}", value);
}

/// Per run: its directory, kind, whether its power and heat are placeholders, and for a sim run compared
/// with a measured one whether the error is in-sample of its cluster's calibration.
nlohmann::json run_info_json(const std::vector<analyze::RunAnalysis>& runs,
                             const analyze::Comparison& comparison) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t index = 0; index < runs.size(); ++index) {
    const analyze::CalibrationSample& sample = comparison.samples[index];
    nlohmann::json info = {{"run_dir", runs[index].run_dir.string()},
                           {"kind", store::to_string(runs[index].run.kind)},
                           {"placeholder_power", analyze::has_placeholder_power(runs[index])}};
    if (sample.kind != analyze::SampleKind::kNone) {
      info["sample"] = analyze::to_string(sample.kind);
      info["cluster"] = sample.cluster;
      info["calibrated_on"] = sample.calibrated_on;
      info["sample_text"] = analyze::describe_sample(sample);
    }
    out.push_back(info);
  }
  return out;
}

/// The winners as JSON: per figure the best and next-best run (1-based, as the text names them), the margin,
/// the simulator's stated error and whether the margin is within it, and the line the text prints.
nlohmann::json winners_json(const std::vector<analyze::Winner>& winners) {
  nlohmann::json out = nlohmann::json::array();
  for (const analyze::Winner& winner : winners) {
    out.push_back({{"key", winner.key},
                   {"figure", winner.figure},
                   {"unit", winner.unit},
                   {"best_run", winner.best + 1},
                   {"runner_up_run", winner.runner_up + 1},
                   {"best_value", winner.best_value},
                   {"runner_up_value", winner.runner_up_value},
                   {"margin", winner.margin},
                   {"tolerance", core::json_number(winner.tolerance)},
                   {"within_error", analyze::within_error(winner)},
                   {"unrated", winner.unrated},
                   {"text", analyze::describe_winner(winner)}});
  }
  return out;
}

/// The comparison as JSON: runs, rows (values, ratios, errors, tolerances) and winners.
void print_compare_json(const std::vector<analyze::RunAnalysis>& runs, const analyze::Comparison& comparison,
                        const std::vector<analyze::Winner>& winners) {
  nlohmann::json rows = nlohmann::json::array();
  auto nullable = [](const std::vector<double>& values) {
    nlohmann::json out = nlohmann::json::array();
    for (double value : values) out.push_back(core::json_number(value));
    return out;
  };
  for (const auto& row : comparison.rows) {
    rows.push_back({{"key", row.key},
                    {"unit", row.unit},
                    {"values", nullable(row.values)},
                    {"ratio", nullable(row.ratio)},
                    {"sim_error", nullable(row.sim_error)},
                    {"tolerance", nullable(row.tolerance)}});
  }
  print_json({{"runs", comparison.run_labels},
              {"measured_reference", comparison.measured_reference},
              {"sim_reference", comparison.sim_reference},
              {"run_info", run_info_json(runs, comparison)},
              {"winners", winners_json(winners)},
              {"rows", rows}});
}

/// The table: each figure per run, its ratio to run 1, and for the sims of a measured run (`sim_runs`) their
/// error and calibrated tolerance.
core::TextTable compare_table(const std::vector<analyze::RunAnalysis>& runs,
                              const analyze::Comparison& comparison,
                              const std::vector<std::size_t>& sim_runs) {
  std::vector<std::string> headers = {"figure", "unit"};
  for (std::size_t index = 0; index < runs.size(); ++index)
    headers.push_back(fmt::format("run{}", index + 1));
  for (std::size_t index = 1; index < runs.size(); ++index)
    headers.push_back(fmt::format("run{}/run1", index + 1));
  for (std::size_t index : sim_runs) {
    headers.push_back(fmt::format("run{} err", index + 1));
    headers.push_back(fmt::format("run{} tol", index + 1));
  }
  core::TextTable table(headers);
  for (const auto& row : comparison.rows) {
    bool any = false;
    for (double value : row.values) any = any || !std::isnan(value);
    if (!any) continue;
    std::vector<std::string> cells = {row.key, analyze::shown_figure(0, row.unit).unit};
    for (double value : row.values) cells.push_back(cell(analyze::shown_figure(value, row.unit).value));
    for (std::size_t index = 1; index < runs.size(); ++index) {
      cells.push_back(std::isnan(row.ratio[index]) ? "-" : fmt::format("{:.3f}", row.ratio[index]));
    }
    const bool degrees = row.unit == "C";
    for (std::size_t index : sim_runs) {
      const double error = analyze::stated_sim_error(comparison, row, index);
      cells.push_back(std::isnan(error) ? "-"
                      : degrees         ? fmt::format("{:+.1f} C", error)
                                        : fmt::format("{:+.1f}%", error * 100));
      const double tolerance = row.tolerance[index];
      cells.push_back(std::isnan(tolerance) ? "-"
                      : degrees             ? fmt::format("±{:.1f} C", tolerance)
                                            : fmt::format("±{:.1f}%", tolerance * 100));
    }
    table.add_row(cells);
  }
  return table;
}

/// The comparison as text: the runs, the table, each sim's mean error, which run is better, and notes.
void print_compare_text(const std::vector<analyze::RunAnalysis>& runs, const analyze::Comparison& comparison,
                        const std::vector<analyze::Winner>& winners) {
  std::vector<std::size_t> sim_runs;  // the sims of a measured run's graph
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (comparison.measured_reference >= 0 && comparison.sim_reference[index] >= 0) sim_runs.push_back(index);
  }
  for (std::size_t index = 0; index < runs.size(); ++index) {
    fmt::print("# run{}: {} — {}\n", index + 1, comparison.run_labels[index], runs[index].run_dir.string());
  }
  fmt::print("{}", compare_table(runs, comparison, sim_runs).render());
  for (std::size_t index : sim_runs) {
    fmt::print("run{} (sim) vs run{} (measured): mean |error| {:.1f}%, {}\n", index + 1,
               comparison.sim_reference[index] + 1, analyze::mean_abs_sim_error(comparison, index) * 100,
               analyze::describe_sample(comparison.samples[index]));
  }
  const bool any_measured = std::any_of(runs.begin(), runs.end(), [](const analyze::RunAnalysis& run) {
    return run.run.kind != store::RunKind::kSim;
  });
  for (std::size_t index = 0; index < runs.size() && any_measured; ++index) {
    if (runs[index].run.kind != store::RunKind::kSim || comparison.sim_reference[index] >= 0) continue;
    fmt::print(
        "run{} (sim) simulated another model or layout than every measured run here, so it has no error "
        "column; `calo sim --from RUN --cluster ...` simulates a measured run's own job\n",
        index + 1);
  }
  for (const analyze::Winner& winner : winners)
    fmt::print("which is better? {}\n", analyze::describe_winner(winner));
  if (!sim_runs.empty()) {
    fmt::print(
        "tol: the largest error leave-one-out validation of the sim run's calibrated cluster reached "
        "(calo calibrate); '-' = uncalibrated cluster or figure not rated\n");
  }
}

int run_compare(const CompareFlags& flags) {
  std::vector<analyze::RunAnalysis> runs;
  for (const auto& run : flags.runs) runs.push_back(analyze::analyze_run(run));
  const analyze::Comparison comparison = analyze::compare_runs(runs);
  const std::vector<analyze::Winner> winners = analyze::pick_winners(runs, comparison);
  if (flags.json) {
    print_compare_json(runs, comparison, winners);
  } else {
    print_compare_text(runs, comparison, winners);
  }
  return 0;
}

const CommandRegistration kCompare(
    "compare",
    "compare runs side by side: ratios, which is better on throughput, energy per token and cost (against "
    "the "
    "simulator's error), and the error of a simulated run against a measured one",
    85, [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<CompareFlags>();
      app.add_option("RUN", flags->runs, "two or more run directories; the first is the reference")
          ->required()
          ->expected(2, -1)
          ->check(CLI::ExistingDirectory);
      app.add_flag("--json", flags->json, "print the comparison as JSON");
      app.footer(
          "'which is better?' lines: for throughput, energy per token and (runs of `calo sim --tokens "
          "--price-per-kwh` priced alike) cost, the best run and its margin over the next best, said to be "
          "within the simulator's error when the margin is inside a simulated run's calibrated tolerance "
          "(the tol column; docs/METRICS.md). A simulation of a measured run here is its error, not a "
          "contender.");
      return [flags] { return run_compare(*flags); };
    });

}  // namespace
}  // namespace calo::cli
