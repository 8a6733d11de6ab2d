// `calo validate`: the simulator's prediction beside the measurement for a set of runs of one workload (the
// planner's candidates, benched): per run the figures simulated on a cluster as the run was measured, and for
// the set the agreement of the rankings (Spearman rho) and the regret of the prediction's first pick
// (docs/METRICS.md "Prediction error").
#pragma once

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/measurement.h"
#include "parallel/layout.h"

namespace calo::calibrate {

/// One run, predicted and measured.
struct ValidationRow {
  std::string label;         ///< the run directory's name
  std::string layout;        ///< parallel::describe of its layout
  std::string family;        ///< its parallel sizes alone (layout_family)
  int plan_rank = 0;         ///< rank in the planner's ranking (1 = its first pick); 0 without a plan
  double plan_step_s = NAN;  ///< the planner's own step time for the layout (NaN without a plan)
  RunFigures measured;       ///< over the run's measured steps
  RunFigures predicted;      ///< simulate_run on the cluster
};

/// A run that could not be validated, and why (a failed bench, another GPU model, no workload).
struct SkippedRun {
  std::string label;   ///< the run directory's name
  std::string reason;  ///< the loader's message
};

/// The targets a validation is held to (issue 37): per-run errors, rank agreement, first pick's regret.
struct ValidationTargets {
  double step_error = 0.05;    ///< largest |step-time error| of any run
  double energy_error = 0.08;  ///< largest |energy-per-step error| of any run
  double min_rho = 0.95;       ///< least Spearman rho, step time and energy alike
  double max_regret = 0.02;    ///< largest regret of the first pick
};

/// Predictions beside measurements for a set of runs.
struct Validation {
  std::string cluster;              ///< the cluster the predictions ran on
  std::vector<ValidationRow> rows;  ///< fastest measured first
  std::vector<SkippedRun> skipped;  ///< runs left out, with the reason
  double step_rho = NAN;            ///< Spearman rho of predicted and measured step time (NaN below 3 runs)
  double energy_rho = NAN;          ///< ... of energy per step
  /// The same over one run per layout family (its fastest measured): variants within a family (ZeRO stage,
  /// micro-batch) often differ by less than a step's noise, which moves the rank of every run.
  double family_step_rho = NAN;
  double family_energy_rho = NAN;  ///< ... of energy per step, one run per family
  std::string first_pick;          ///< the prediction's first choice: plan rank 1 (else least predicted)
  std::string measured_best;       ///< the run of the least measured step time
  double regret_fraction = NAN;    ///< first pick's measured step / measured_best's - 1
  double max_step_error = NAN;     ///< largest |relative step-time error| over rows
  double max_energy_error = NAN;   ///< largest |relative energy-per-step error| over rows
  ValidationTargets targets;       ///< what the figures are held to
};

/// A layout's parallel sizes alone, the layout family the planner's candidates vary within: "tp2-pp2",
/// "dp4-ep4", "single" for one GPU (micro-batch, ZeRO, recompute, overlap and schedule left out).
std::string layout_family(const parallel::Layout& layout);

/// Pearson correlation of two equally long, non-empty series; NaN when either is constant.
double pearson_r(const std::vector<double>& first, const std::vector<double>& second);

/// Spearman's rank correlation of two equally long series (ties take their mean rank); NaN below 3 values
/// or when either series is constant.
double spearman_rho(const std::vector<double>& first, const std::vector<double>& second);

/// What the planner said of each layout: rank (1 = first) and step time, by parallel::describe of the
/// layout, from a `calo plan --json` document (its "candidates" when present, else its "ranking").
struct PlanEntry {
  int rank = 0;              ///< 1-based among the simulated candidates, by step time
  double iteration_s = NAN;  ///< the planner's step time
};
/// Reads a `calo plan --json` document into layout description -> PlanEntry; InputError naming `source` when
/// it holds no simulated candidate.
std::map<std::string, PlanEntry> plan_entries(const nlohmann::json& plan, const std::string& source);

/// Loads every run of `run_dirs`, simulates each on `cluster` (a preset or file) and sets the two side by
/// side. Runs that cannot be loaded are skipped with their reason; InputError when none is left.
Validation validate_runs(const std::vector<std::filesystem::path>& run_dirs, const std::string& cluster,
                         const std::map<std::string, PlanEntry>& plan = {});

/// The validation as JSON (rows with measured, predicted and error per figure; the set's figures; targets).
nlohmann::json to_json(const Validation& validation);

}  // namespace calo::calibrate
