// Which of the runs compared is better on the figures a user picks a layout by (throughput, energy per token,
// cost), by how much, and whether that margin is beyond the simulator's stated error (docs/METRICS.md
// "Winner margin"). `calo compare` prints it under its table, `calo report` in its verdict.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "analyze/compare.h"

namespace calo::analyze {

/// The best run on one figure and the next best, with the margin between them.
struct Winner {
  std::string key;        ///< "tokens_per_s", "energy_per_token_j" or "cost"
  std::string figure;     ///< as people say it: "throughput", "energy per token", "cost of 1e+12 tokens"
  std::string unit;       ///< the values' unit: "tokens/s", "J", or the cost's currency ("USD")
  std::string advantage;  ///< what the margin is of: "more tokens/s", "less energy per token", ...
  bool higher_is_better = true;  ///< tokens/s: more wins; energy and cost: less
  std::size_t best = 0;          ///< run index of the best value
  std::size_t runner_up = 0;     ///< run index of the next best
  double best_value = NAN;       ///< the figure of run `best`
  double runner_up_value = NAN;  ///< the figure of run `runner_up`
  double margin = NAN;  ///< >= 0: best / runner-up − 1 (higher is better), 1 − best / runner-up (lower)
  double tolerance = NAN;  ///< the simulator's stated error on the figure (calibrated_tolerance), the
                           ///< larger of the two runs'; NaN when neither is a rated simulation
  bool unrated = false;    ///< one of the two is a simulation whose cluster no calibration rated
  bool simulated = false;  ///< one of the two is a simulation
};

/// True when the margin is inside the simulator's stated error: the model cannot tell the two apart.
bool within_error(const Winner& winner);

/// The winners on throughput, energy per token and, where the two runs stored the cost of the same tokens at
/// the same price (`calo sim --tokens --price-per-kwh`), cost; among the runs that are not a simulation of
/// another run here (those are errors, not contenders). Empty for fewer than two contenders; a figure is left
/// out where fewer than two have it, energy and cost where a run's power is a placeholder (cpu-host); empty
/// when the contenders train different models (their config names two).
std::vector<Winner> pick_winners(const std::vector<RunAnalysis>& runs, const Comparison& comparison);

/// One line for a person: "throughput: run 2 wins, 4.3 % more tokens/s than run 1 (4120 vs 3950), beyond the
/// simulator's error (±3.1 %)", or "no clear winner" when the margin is within it.
std::string describe_winner(const Winner& winner);

}  // namespace calo::analyze
