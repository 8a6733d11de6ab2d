// `calo validate RUN... --cluster C [--plan PLAN.json] [--json]`: the simulator's prediction beside each
// measured run (step time, energy per step, mean and peak power per GPU), Spearman rho of the rankings and
// the first pick's regret, each against its target.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>

#include "calibrate/validate.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/table.h"

namespace calo::cli {
namespace {

struct ValidateFlags {
  std::vector<std::string> runs;
  std::string cluster;
  std::string plan;
  bool json = false;
};

/// "measured / predicted error" for one figure, `scale` turning its unit into the column's.
std::string pair_cell(double measured, double predicted, double scale, int digits) {
  if (!std::isfinite(measured)) return "-";
  if (!std::isfinite(predicted)) return fmt::format("{:.{}f} / -", measured * scale, digits);
  return fmt::format("{:.{}f} / {:.{}f} {:+.1f}%", measured * scale, digits, predicted * scale, digits,
                     (predicted / measured - 1) * 100);
}

std::string verdict(bool met) {
  return met ? "met" : "MISSED";
}

void print_rows(const calibrate::Validation& validation) {
  core::TextTable table({"run", "layout", "plan #", "step", "energy/step", "mean power", "peak power"});
  table.set_units({"", "", "", "ms: measured / predicted err", "J per GPU", "W per GPU", "W, any GPU"});
  for (const auto& row : validation.rows) {
    table.add_row({row.label, row.layout, row.plan_rank > 0 ? std::to_string(row.plan_rank) : "-",
                   pair_cell(row.measured.step_time_s, row.predicted.step_time_s, 1e3, 1),
                   pair_cell(row.measured.energy_per_step_j, row.predicted.energy_per_step_j, 1, 0),
                   pair_cell(row.measured.mean_power_w, row.predicted.mean_power_w, 1, 0),
                   pair_cell(row.measured.peak_power_w, row.predicted.peak_power_w, 1, 0)});
  }
  fmt::print("# predicted on {} beside measured, fastest measured first\n{}", validation.cluster,
             table.render());
}

void print_summary(const calibrate::Validation& validation) {
  const auto& targets = validation.targets;
  const auto rho = [&](double value) {
    if (!std::isfinite(value)) return std::string("- (needs 3 runs that differ)");
    // Two digits, or three where two would print a miss as the target itself (0.9487 as "0.95 (MISSED").
    const bool met = value >= targets.min_rho;
    const int digits = !met && std::round(value * 100) >= std::round(targets.min_rho * 100) ? 3 : 2;
    return fmt::format("{:.{}f} ({} >= {:.2f})", value, digits, verdict(met), targets.min_rho);
  };
  fmt::print("Spearman rho, step time: {}\n", rho(validation.step_rho));
  fmt::print("Spearman rho, energy per step: {}\n", rho(validation.energy_rho));
  const auto family_rho = [](double value) {
    return std::isfinite(value) ? fmt::format("{:.2f}", value) : std::string("-");
  };
  fmt::print("Spearman rho over layout families (fastest measured of each): step {}, energy {}\n",
             family_rho(validation.family_step_rho), family_rho(validation.family_energy_rho));
  fmt::print("largest step-time error: {:.1f}% ({} <= {:.0f}%)\n", validation.max_step_error * 100,
             verdict(validation.max_step_error <= targets.step_error), targets.step_error * 100);
  if (std::isfinite(validation.max_energy_error))
    fmt::print("largest energy-per-step error: {:.1f}% ({} <= {:.0f}%)\n", validation.max_energy_error * 100,
               verdict(validation.max_energy_error <= targets.energy_error), targets.energy_error * 100);
  fmt::print("first pick {}, measured best {}: regret {:+.1f}% ({} <= {:.0f}%)\n", validation.first_pick,
             validation.measured_best, validation.regret_fraction * 100,
             verdict(validation.regret_fraction <= targets.max_regret), targets.max_regret * 100);
  for (const auto& skipped : validation.skipped)
    fmt::print("skipped {}: {}\n", skipped.label, skipped.reason);
}

int run_validate(const ValidateFlags& flags) {
  std::map<std::string, calibrate::PlanEntry> plan;
  if (!flags.plan.empty()) {
    std::ifstream file(flags.plan);
    require_input(file.good(), "--plan " + flags.plan + ": cannot be read");
    const nlohmann::json document = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
    require_input(!document.is_discarded(),
                  "--plan " + flags.plan + ": not JSON; write it with calo plan ... --json");
    plan = calibrate::plan_entries(document, "--plan " + flags.plan);
  }
  std::vector<std::filesystem::path> runs(flags.runs.begin(), flags.runs.end());
  const calibrate::Validation validation = calibrate::validate_runs(runs, flags.cluster, plan);
  if (flags.json) {
    print_json(calibrate::to_json(validation));
    return 0;
  }
  print_rows(validation);
  print_summary(validation);
  return 0;
}

const CommandRegistration kValidate(
    "validate",
    "the simulator's prediction beside measured runs: step, energy, power errors, rank agreement and the "
    "first pick's regret",
    74, [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<ValidateFlags>();
      app.add_option("RUN", flags->runs,
                     "measured run directories (calo bench; e.g. the planner's candidates)")
          ->required()
          ->check(CLI::ExistingDirectory);
      app.add_option("--cluster", flags->cluster, "cluster (preset name or YAML file) to predict them on")
          ->required();
      app.add_option(
             "--plan", flags->plan,
             "the `calo plan --json` these runs came from: its ranks, and its rank 1 as the first pick")
          ->check(CLI::ExistingFile);
      app.add_flag("--json", flags->json, "print the validation as JSON");
      return [flags] { return run_validate(*flags); };
    });

}  // namespace
}  // namespace calo::cli
