// Energy plan: per-pipeline-stage SM clock locks that take out the energy stages spend racing to wait for the
// critical stage (imbalanced pipelines), found through the simulator (docs/PLANNER.md, "Power"). Clocks, not
// power caps: a waiting stage's mean power sits below any cap, so a cap never slows it (the simulator shows
// 0.8 % saved with caps where clocks save 10+ %). Advice only: Calorimeter never changes a GPU's settings;
// the plan prints what `nvidia-smi -lgc` would set.
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "sim/cluster.h"
#include "sim/simulate.h"

namespace calo::plan {

/// The job whose stage caps are planned; `options` carries steps and any slow or hot GPUs.
struct PowerPlanRequest {
  model::ModelSpec model;             ///< the model
  parallel::Layout layout;            ///< resolved layout (its layers_per_stage included)
  sim::ClusterSpec cluster;           ///< the modeled cluster
  sim::SimOptions options;            ///< steps, slow / hot GPUs (as `calo sim` takes them)
  double max_slowdown = 0.01;         ///< step time may grow by at most this fraction
  double clock_step_fraction = 0.05;  ///< clocks are tried in steps of this fraction of the GPU's max clock
};

/// Energy and time of one set of stage clock locks.
struct ClockFigures {
  std::vector<double> stage_clock_mhz;  ///< highest SM clock per pipeline stage, stage 0 first
  double iteration_s = 0;               ///< simulated mean step time
  double energy_per_step_j = 0;         ///< all GPUs
};

/// The outcome.
struct PowerPlanResult {
  ClockFigures baseline;    ///< every GPU free to reach its max clock
  ClockFigures planned;     ///< the clock locks found
  double energy_saved = 0;  ///< 1 - planned energy / baseline energy
  double slowdown = 0;      ///< planned step time / baseline - 1
  /// Ceiling of any clock plan (per stage or per op) that leaves the busiest stage alone, as a fraction of
  /// the baseline energy: every other GPU's ops at the lowest clock whose busy time still fits the allowed
  /// step (waits on other stages ignored, so it is an upper bound). Waiting power is idle power, the same at
  /// any clock, so waiting saves nothing.
  double saving_ceiling = 0;
  int simulated = 0;    ///< clock sets simulated
  std::string verdict;  ///< one sentence: what was saved, or why nothing can be
};

/// Greedy descent: from every stage free, repeatedly lowers the one stage's clock lock (by
/// clock_step_fraction of the max clock) that saves the most energy while the step stays within max_slowdown
/// of the baseline; stops when no lower lock qualifies. Throws InputError when the layout has one stage or
/// max_slowdown < 0.
PowerPlanResult plan_power(const PowerPlanRequest& request);

/// Simulates `request` with per-stage clock locks (every GPU of a stage gets its stage's lock).
ClockFigures simulate_clocks(const PowerPlanRequest& request, const std::vector<double>& stage_clock_mhz);

/// PowerPlanResult::saving_ceiling of `request` with every stage free (baseline figures from the simulator).
double saving_ceiling(const PowerPlanRequest& request);

}  // namespace calo::plan
