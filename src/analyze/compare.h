// Side-by-side comparison of runs: each figure's value per run, its ratio to the first run, and for a
// simulated run against the measured run of the same layout, the relative error (docs/METRICS.md "Analysis").
#pragma once

#include <string>
#include <vector>

#include "analyze/calibration_sample.h"
#include "analyze/metrics.h"

namespace calo::analyze {

/// One figure across runs.
struct ComparisonRow {
  std::string key;                ///< figure name, e.g. "tokens_per_s"
  std::string unit;               ///< its unit
  bool higher_is_better = true;   ///< direction of "better"
  std::vector<double> values;     ///< value per run (NaN if the run lacks it)
  std::vector<double> ratio;      ///< value / value of run 0 (NaN if either is missing or run 0 is 0)
  std::vector<double> sim_error;  ///< sim runs: (sim - measured) / measured vs the reference run; else NaN
  /// Sim runs on a calibrated cluster: the max |error| its leave-one-out achieved for this figure (relative;
  /// degrees C for temperatures); else NaN.
  std::vector<double> tolerance;
};

/// Result of compare_runs.
struct Comparison {
  std::vector<std::string> run_labels;  ///< run_label() per run
  int32_t measured_reference = -1;      ///< first measured run some sim run is compared with, -1 if none
  std::vector<int32_t> sim_reference;   ///< per run: the measured run of the same graph (sim runs), else -1
  /// Per run: a sim run's error in- or out-of-sample of its cluster's calibration (kind kNone for the rest).
  std::vector<CalibrationSample> samples;
  std::vector<ComparisonRow> rows;  ///< tokens/s, MFU and J/token first, then the rest in run_figures order
};

/// How comparisons name a run: its model, layout, sequence length and kind ("llama3-8b TP2-PP1-DP4 mbs1 gbs32
/// 1f1b zero1 seq4096 (sim on h100-hgx)"), or its name and kind when it stores no layout (a `calo record`).
std::string run_label(const RunAnalysis& analysis);

/// True when both runs ran the same graph: equal "model" objects and equal layouts in their config_json (read
/// with parallel::layout_from_json, so a layout key added after a run was stored takes its default).
bool same_graph(const RunAnalysis& a, const RunAnalysis& b);

/// Compares `runs` (at least one). A sim run is compared (sim_error) with the first non-sim run of the same
/// graph (same_graph); a sim run without one has no error, it is a projection.
Comparison compare_runs(const std::vector<RunAnalysis>& runs);

/// The largest |error| leave-one-out validation of a sim run's calibrated cluster reached on compare figure
/// `key` (relative; degrees C for a temperature), stored with the run's cluster; NaN for a measured run, an
/// uncalibrated cluster or a figure calibration does not rate. Tokens/s takes step time's t as t / (1 − t).
double calibrated_tolerance(const RunAnalysis& run, const std::string& key);

/// Sim run `run_index`'s error on `row` as calibration states it: simulated − measured in degrees C for a
/// temperature row (unit "C"), the relative error otherwise; NaN where there is none.
double stated_sim_error(const Comparison& comparison, const ComparisonRow& row, std::size_t run_index);

/// A figure as people read it: a fraction (unit "fraction": MFU, a throttled share of time) as a percentage
/// (unit "%"); anything else as it is. JSON and the store keep the fraction.
struct ShownFigure {
  double value = 0;  ///< the value in `unit`
  std::string unit;  ///< "%" for a fraction, else the figure's own unit
};

/// How tables and reports show `value` of `unit` (ShownFigure).
ShownFigure shown_figure(double value, const std::string& unit);

/// Mean absolute relative error over the rows that have a sim error for run `run_index` (NaN if none).
double mean_abs_sim_error(const Comparison& comparison, std::size_t run_index);

}  // namespace calo::analyze
