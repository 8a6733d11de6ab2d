#include "analyze/winner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "analyze/calibration_sample.h"
#include "core/table.h"

namespace calo::analyze {
namespace {

/// A figure a winner is picked on: each run's value (NaN where it lacks one or does not contend) and stated
/// error.
struct Contest {
  std::string key;
  std::string figure;
  std::string unit;
  std::string advantage;
  bool higher_is_better = true;
  std::vector<double> values;
  std::vector<double> tolerances;
};

/// A run contends unless it simulates another run here (its difference from that run is an error).
bool contends(const Comparison& comparison, std::size_t index) {
  return comparison.sim_reference[index] < 0;
}

/// The contest on compare row `key` (nullopt without one); `power` figures skip placeholder power.
std::optional<Contest> row_contest(const std::vector<RunAnalysis>& runs, const Comparison& comparison,
                                   const std::string& key, const std::string& figure,
                                   const std::string& advantage) {
  for (const ComparisonRow& row : comparison.rows) {
    if (row.key != key) continue;
    Contest contest{key, figure, row.unit, advantage, row.higher_is_better, row.values, row.tolerance};
    for (std::size_t index = 0; index < runs.size(); ++index) {
      const bool placeholder = is_power_or_heat_figure(key) && has_placeholder_power(runs[index]);
      if (!contends(comparison, index) || placeholder) contest.values[index] = NAN;
    }
    return contest;
  }
  return std::nullopt;
}

/// The model a run trains, as its config names it ("" when it names none: a record of any job).
std::string model_name(const RunAnalysis& run) {
  const nlohmann::json config = nlohmann::json::parse(run.run.config_json, nullptr, false);
  if (!config.is_object() || !config.contains("model")) return "";
  const nlohmann::json& model = config["model"];
  if (model.is_object()) return model.value("name", std::string());
  return model.is_string() ? model.get<std::string>() : std::string();
}

/// True when the contenders name two models: a token of one is no token of the other, so none wins.
bool contenders_train_different_models(const std::vector<RunAnalysis>& runs, const Comparison& comparison) {
  std::string first;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (!contends(comparison, index)) continue;
    const std::string name = model_name(runs[index]);
    if (name.empty()) continue;
    if (first.empty()) first = name;
    if (name != first) return true;
  }
  return false;
}

/// The terms of the cost a run stored (`calo sim --tokens --price-per-kwh`): tokens, price, currency, PUE,
/// host power; null when it stored none or no price.
nlohmann::json cost_terms(const nlohmann::json& cost) {
  if (!cost.is_object() || cost.value("price_per_kwh", 0.0) <= 0 || !cost.contains("cost")) return nullptr;
  nlohmann::json terms = nlohmann::json::object();
  for (const char* key : {"tokens", "price_per_kwh", "currency", "pue", "host_power_w"})
    terms[key] = cost.contains(key) ? cost[key] : nlohmann::json(nullptr);
  return terms;
}

/// The contest on the stored cost, when the contenders that stored one priced the same tokens alike.
std::optional<Contest> cost_contest(const std::vector<RunAnalysis>& runs, const Comparison& comparison) {
  Contest contest{"cost",
                  "",
                  "",
                  "lower cost",
                  false,
                  std::vector<double>(runs.size(), NAN),
                  std::vector<double>(runs.size(), NAN)};
  nlohmann::json shared;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    if (!contends(comparison, index) || has_placeholder_power(runs[index])) continue;
    const auto config = nlohmann::json::parse(runs[index].run.config_json, nullptr, false);
    if (!config.is_object() || !config.contains("cost")) continue;
    const nlohmann::json terms = cost_terms(config["cost"]);
    if (terms.is_null()) continue;
    if (!shared.is_null() && terms != shared) return std::nullopt;  // priced differently: not comparable
    shared = terms;
    contest.values[index] = config["cost"]["cost"].get<double>();
    // Cost = (GPU energy + host power x time) x PUE x price: within the larger of the two errors.
    contest.tolerances[index] = std::fmax(calibrated_tolerance(runs[index], "energy_per_step_j"),
                                          calibrated_tolerance(runs[index], "step_time_p50_s"));
  }
  if (shared.is_null()) return std::nullopt;
  contest.figure = fmt::format("cost of {:.3g} tokens", shared["tokens"].get<double>());
  contest.unit = shared["currency"].is_string() ? shared["currency"].get<std::string>() : std::string();
  return contest;
}

/// The best and next-best contender of `contest` and the margin between them; nullopt for fewer than two.
std::optional<Winner> judge(const Contest& contest, const std::vector<RunAnalysis>& runs) {
  std::vector<std::size_t> ranked;
  for (std::size_t index = 0; index < contest.values.size(); ++index)
    if (std::isfinite(contest.values[index])) ranked.push_back(index);
  if (ranked.size() < 2) return std::nullopt;
  std::stable_sort(ranked.begin(), ranked.end(), [&contest](std::size_t a, std::size_t b) {
    return contest.higher_is_better ? contest.values[a] > contest.values[b]
                                    : contest.values[a] < contest.values[b];
  });
  Winner winner{.key = contest.key,
                .figure = contest.figure,
                .unit = contest.unit,
                .advantage = contest.advantage,
                .higher_is_better = contest.higher_is_better,
                .best = ranked[0],
                .runner_up = ranked[1],
                .best_value = contest.values[ranked[0]],
                .runner_up_value = contest.values[ranked[1]]};
  const double ratio = winner.runner_up_value != 0 ? winner.best_value / winner.runner_up_value : 1.0;
  winner.margin = contest.higher_is_better ? ratio - 1 : 1 - ratio;
  for (std::size_t index : {winner.best, winner.runner_up}) {
    if (runs[index].run.kind != store::RunKind::kSim) continue;
    winner.simulated = true;
    if (std::isnan(contest.tolerances[index])) winner.unrated = true;
    winner.tolerance = std::fmax(winner.tolerance, contest.tolerances[index]);
  }
  return winner;
}

/// A figure's value as the line shows it: a cost with its thousands separated, else 4 significant digits.
std::string shown_value(const Winner& winner, double value) {
  return winner.key == "cost" ? core::format_thousands(value) : core::format_significant(value, 4);
}

/// What the line says of the margin against the simulator's error.
std::string error_clause(const Winner& winner) {
  std::string clause;
  if (!std::isnan(winner.tolerance))
    clause = fmt::format("{} the simulator's error (±{:.1f} %)", within_error(winner) ? "within" : "beyond",
                         100 * winner.tolerance);
  if (winner.unrated)
    clause += fmt::format(
        "{}the simulator's error is not rated on an uncalibrated cluster (calo calibrate "
        "fits one)",
        clause.empty() ? "" : "; ");
  if (!winner.simulated) clause = "both measured";
  return clause;
}

}  // namespace

bool within_error(const Winner& winner) {
  return !std::isnan(winner.tolerance) && winner.margin <= winner.tolerance;
}

std::vector<Winner> pick_winners(const std::vector<RunAnalysis>& runs, const Comparison& comparison) {
  if (contenders_train_different_models(runs, comparison)) return {};
  std::vector<std::optional<Contest>> contests = {
      row_contest(runs, comparison, "tokens_per_s", "throughput", "more tokens/s"),
      row_contest(runs, comparison, "energy_per_token_j", "energy per token", "less energy per token"),
      cost_contest(runs, comparison)};
  std::vector<Winner> winners;
  for (const std::optional<Contest>& contest : contests) {
    if (!contest) continue;
    if (std::optional<Winner> winner = judge(*contest, runs)) winners.push_back(*winner);
  }
  return winners;
}

std::string describe_winner(const Winner& winner) {
  const std::string values = fmt::format("{} vs {} {}", shown_value(winner, winner.best_value),
                                         shown_value(winner, winner.runner_up_value), winner.unit);
  if (winner.margin < 0.0005)
    return fmt::format("{}: run {} and run {} tie ({})", winner.figure, winner.best + 1, winner.runner_up + 1,
                       values);
  const std::string lead =
      within_error(winner) ? fmt::format("{}: no clear winner, run {} has", winner.figure, winner.best + 1)
                           : fmt::format("{}: run {} wins,", winner.figure, winner.best + 1);
  return fmt::format("{} {:.1f} % {} than run {} ({}), {}", lead, 100 * winner.margin, winner.advantage,
                     winner.runner_up + 1, values, error_clause(winner));
}

}  // namespace calo::analyze
