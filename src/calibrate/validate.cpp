// Predictions beside measurements for a set of runs: load, simulate as measured, compare, rank.
#include "calibrate/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "sim/cluster.h"

namespace calo::calibrate {
namespace fs = std::filesystem;

std::string layout_family(const parallel::Layout& layout) {
  std::string family;
  for (const auto& [name, size] : {std::pair<const char*, int>{"tp", layout.tp},
                                   {"cp", layout.cp},
                                   {"pp", layout.pp},
                                   {"dp", layout.dp},
                                   {"ep", layout.ep}}) {
    if (size <= 1) continue;
    if (!family.empty()) family += "-";
    family += fmt::format("{}{}", name, size);
  }
  return family.empty() ? "single" : family;
}

namespace {

/// 1-based ranks of `values` (smallest first); tied values share their mean rank.
std::vector<double> mean_ranks(const std::vector<double>& values) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (std::size_t begin = 0; begin < order.size();) {
    std::size_t end = begin + 1;
    while (end < order.size() && values[order[end]] == values[order[begin]]) ++end;
    const double rank = (static_cast<double>(begin + end - 1) / 2.0) + 1.0;
    for (std::size_t index = begin; index < end; ++index) ranks[order[index]] = rank;
    begin = end;
  }
  return ranks;
}

}  // namespace

double pearson_r(const std::vector<double>& first, const std::vector<double>& second) {
  const double count = static_cast<double>(first.size());
  const double mean_first = std::accumulate(first.begin(), first.end(), 0.0) / count;
  const double mean_second = std::accumulate(second.begin(), second.end(), 0.0) / count;
  double covariance = 0, var_first = 0, var_second = 0;
  for (std::size_t index = 0; index < first.size(); ++index) {
    covariance += (first[index] - mean_first) * (second[index] - mean_second);
    var_first += (first[index] - mean_first) * (first[index] - mean_first);
    var_second += (second[index] - mean_second) * (second[index] - mean_second);
  }
  if (var_first <= 0 || var_second <= 0) return NAN;
  return covariance / std::sqrt(var_first * var_second);
}

namespace {

/// Largest |figure_error| of figure `index` (figure_names() order) over `rows`; NaN where none is known.
double largest_error(const std::vector<ValidationRow>& rows, std::size_t index) {
  double largest = NAN;
  for (const ValidationRow& row : rows) {
    const double error =
        std::fabs(figure_error(index, figure_value(row.measured, index), figure_value(row.predicted, index)));
    if (std::isfinite(error) && !(largest >= error)) largest = error;
  }
  return largest;
}

/// Rank correlation of figure `index` predicted against measured over `rows`.
double figure_rho(const std::vector<ValidationRow>& rows, std::size_t index) {
  std::vector<double> measured, predicted;
  for (const ValidationRow& row : rows) {
    if (!std::isfinite(figure_value(row.measured, index)) ||
        !std::isfinite(figure_value(row.predicted, index)))
      continue;
    measured.push_back(figure_value(row.measured, index));
    predicted.push_back(figure_value(row.predicted, index));
  }
  return spearman_rho(measured, predicted);
}

/// Indices of the figures validated by rank and error (figure_names() order).
constexpr std::size_t kStepFigure = 0, kEnergyFigure = 1;

/// One run loaded and simulated; fills `row` or returns the reason it cannot be.
std::string validate_one(const fs::path& run_dir, const sim::ClusterSpec& cluster,
                         const std::map<std::string, PlanEntry>& plan, ValidationRow& row) {
  try {
    const MeasuredRun run = load_measured_run(run_dir, cluster.gpu);
    if (!run.simulatable()) return "no workload (a calo record run): bench runs carry their model and layout";
    row.layout = parallel::describe(run.layout);
    row.family = layout_family(run.layout);
    row.measured = run.figures;
    row.predicted = simulate_run(run, run_graph(run), cluster);
    if (const auto found = plan.find(row.layout); found != plan.end()) {
      row.plan_rank = found->second.rank;
      row.plan_step_s = found->second.iteration_s;
    }
    return {};
  } catch (const InputError& error) {
    return error.what();
  }
}

/// The prediction's first pick among `rows`: the least plan rank, else (no row in the plan) the least
/// predicted step time.
const ValidationRow& first_pick(const std::vector<ValidationRow>& rows) {
  const bool planned =
      std::any_of(rows.begin(), rows.end(), [](const auto& row) { return row.plan_rank > 0; });
  return *std::min_element(rows.begin(), rows.end(), [planned](const auto& a, const auto& b) {
    if (!planned) return a.predicted.step_time_s < b.predicted.step_time_s;
    return b.plan_rank == 0 || (a.plan_rank > 0 && a.plan_rank < b.plan_rank);
  });
}

}  // namespace

double spearman_rho(const std::vector<double>& first, const std::vector<double>& second) {
  require_input(first.size() == second.size(), "spearman_rho: series of unequal length");
  if (first.size() < 3) return NAN;
  return pearson_r(mean_ranks(first), mean_ranks(second));
}

std::map<std::string, PlanEntry> plan_entries(const nlohmann::json& plan, const std::string& source) {
  const char* key = plan.contains("candidates") ? "candidates" : "ranking";
  require_input(plan.is_object() && plan.contains(key) && plan[key].is_array(),
                source +
                    ": not a `calo plan --json` document (no \"ranking\"); write one with calo plan ... "
                    "--all --json > plan.json");
  std::vector<std::pair<double, std::string>> simulated;
  for (std::size_t index = 0; index < plan[key].size(); ++index) {
    const nlohmann::json& candidate = plan[key][index];
    const std::string where = fmt::format("{}: {}[{}]", source, key, index);
    require_input(candidate.is_object(),
                  where + ": expected an object, got " + candidate.dump().substr(0, 80));
    const auto iteration = candidate.find("iteration_s");
    const auto layout = candidate.find("layout");
    require_input(
        iteration == candidate.end() || iteration->is_null() || iteration->is_number(),
        fmt::format("{}.iteration_s: expected seconds (a number, or null when not simulated), got {}", where,
                    iteration == candidate.end() ? "" : iteration->dump().substr(0, 80)));
    require_input(
        layout == candidate.end() || layout->is_string(),
        fmt::format("{}.layout: expected a layout text such as \"TP2-PP1-DP4 mbs1 gbs8 1f1b\", got {}", where,
                    layout == candidate.end() ? "" : layout->dump().substr(0, 80)));
    const double iteration_s =
        iteration != candidate.end() && iteration->is_number() ? iteration->get<double>() : 0.0;
    if (iteration_s > 0 && layout != candidate.end())
      simulated.emplace_back(iteration_s, layout->get<std::string>());
  }
  require_input(!simulated.empty(),
                source + ": the plan holds no simulated candidate (every layout refused?)");
  std::stable_sort(simulated.begin(), simulated.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::string, PlanEntry> entries;
  for (std::size_t index = 0; index < simulated.size(); ++index)
    entries.emplace(simulated[index].second, PlanEntry{static_cast<int>(index) + 1, simulated[index].first});
  return entries;
}

Validation validate_runs(const std::vector<fs::path>& run_dirs, const std::string& cluster_name,
                         const std::map<std::string, PlanEntry>& plan) {
  Validation validation;
  validation.cluster = cluster_name;
  const sim::ClusterSpec cluster = sim::load_cluster(cluster_name);
  for (const fs::path& run_dir : run_dirs) {
    ValidationRow row;
    row.label =
        run_dir.filename().empty() ? run_dir.parent_path().filename().string() : run_dir.filename().string();
    if (std::string reason = validate_one(run_dir, cluster, plan, row); !reason.empty())
      validation.skipped.push_back({row.label, std::move(reason)});
    else
      validation.rows.push_back(std::move(row));
  }
  require_input(
      !validation.rows.empty(),
      "calo validate: none of the " + std::to_string(run_dirs.size()) + " runs could be validated (first: " +
          (validation.skipped.empty() ? std::string("none given") : validation.skipped.front().reason) + ")");
  std::stable_sort(validation.rows.begin(), validation.rows.end(), [](const auto& a, const auto& b) {
    return a.measured.step_time_s < b.measured.step_time_s;
  });
  validation.step_rho = figure_rho(validation.rows, kStepFigure);
  validation.energy_rho = figure_rho(validation.rows, kEnergyFigure);
  std::vector<ValidationRow> family_best;  // rows are fastest measured first
  for (const ValidationRow& row : validation.rows) {
    if (std::none_of(family_best.begin(), family_best.end(),
                     [&](const ValidationRow& kept) { return kept.family == row.family; }))
      family_best.push_back(row);
  }
  validation.family_step_rho = figure_rho(family_best, kStepFigure);
  validation.family_energy_rho = figure_rho(family_best, kEnergyFigure);
  validation.max_step_error = largest_error(validation.rows, kStepFigure);
  validation.max_energy_error = largest_error(validation.rows, kEnergyFigure);
  const ValidationRow& best = validation.rows.front();
  const ValidationRow& pick = first_pick(validation.rows);
  validation.measured_best = best.label;
  validation.first_pick = pick.label;
  validation.regret_fraction = pick.measured.step_time_s / best.measured.step_time_s - 1;
  return validation;
}

nlohmann::json to_json(const Validation& validation) {
  const auto number = [](double value) { return std::isfinite(value) ? nlohmann::json(value) : nullptr; };
  nlohmann::json rows = nlohmann::json::array();
  for (const ValidationRow& row : validation.rows) {
    nlohmann::json figures;
    for (std::size_t index = 0; index < figure_names().size(); ++index) {
      const double measured = figure_value(row.measured, index);
      const double predicted = figure_value(row.predicted, index);
      figures[figure_names()[index].first] = {{"measured", number(measured)},
                                              {"predicted", number(predicted)},
                                              {"error", number(figure_error(index, measured, predicted))}};
    }
    rows.push_back({{"run", row.label},
                    {"layout", row.layout},
                    {"family", row.family},
                    {"plan_rank", row.plan_rank > 0 ? nlohmann::json(row.plan_rank) : nullptr},
                    {"plan_step_s", number(row.plan_step_s)},
                    {"figures", figures}});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedRun& run : validation.skipped)
    skipped.push_back({{"run", run.label}, {"reason", run.reason}});
  const ValidationTargets& targets = validation.targets;
  return {{"cluster", validation.cluster},
          {"runs", rows},
          {"skipped", skipped},
          {"step_rho", number(validation.step_rho)},
          {"energy_rho", number(validation.energy_rho)},
          {"family_step_rho", number(validation.family_step_rho)},
          {"family_energy_rho", number(validation.family_energy_rho)},
          {"first_pick", validation.first_pick},
          {"measured_best", validation.measured_best},
          {"regret", number(validation.regret_fraction)},
          {"max_step_error", number(validation.max_step_error)},
          {"max_energy_error", number(validation.max_energy_error)},
          {"targets",
           {{"step_error", targets.step_error},
            {"energy_error", targets.energy_error},
            {"min_rho", targets.min_rho},
            {"max_regret", targets.max_regret}}}};
}

}  // namespace calo::calibrate
