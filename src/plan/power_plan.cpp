#include "plan/power_plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "graph/graph.h"

namespace calo::plan {

ClockFigures simulate_clocks(const PowerPlanRequest& request, const std::vector<double>& stage_clock_mhz) {
  const graph::Graph graph = graph::build_graph(request.model, request.layout);
  sim::SimOptions options = request.options;
  options.max_clock_mhz.resize(graph.world_size());
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    options.max_clock_mhz[rank] = stage_clock_mhz[graph.program(rank).stage];
  }
  const sim::SimResult result = sim::simulate(graph, request.cluster, options);
  ClockFigures figures;
  figures.stage_clock_mhz = stage_clock_mhz;
  figures.iteration_s = result.iteration_s;
  for (const sim::GpuResult& gpu : result.gpus) figures.energy_per_step_j += gpu.energy_j / result.steps;
  return figures;
}

PowerPlanResult plan_power(const PowerPlanRequest& request) {
  const int stages = request.layout.pp;
  require_input(stages >= 2,
                "an energy plan slows pipeline stages against each other; give a layout with --pp >= 2");
  require_input(request.max_slowdown >= 0,
                fmt::format("--max-slowdown-pct {} must be >= 0", 100 * request.max_slowdown));
  const sim::GpuSpec& gpu = request.cluster.gpu;
  PowerPlanResult result;
  result.baseline = simulate_clocks(request, std::vector<double>(stages, gpu.max_sm_mhz));
  result.simulated = 1;
  const double allowed_s = result.baseline.iteration_s * (1 + request.max_slowdown);
  const double step_mhz = request.clock_step_fraction * gpu.max_sm_mhz;
  ClockFigures current = result.baseline;
  while (true) {
    ClockFigures best;
    for (int stage = 0; stage < stages; ++stage) {
      std::vector<double> clocks = current.stage_clock_mhz;
      clocks[stage] -= step_mhz;
      if (clocks[stage] < gpu.min_sm_mhz) continue;
      const ClockFigures trial = simulate_clocks(request, clocks);
      result.simulated += 1;
      if (trial.iteration_s > allowed_s || trial.energy_per_step_j >= current.energy_per_step_j) continue;
      if (best.stage_clock_mhz.empty() || trial.energy_per_step_j < best.energy_per_step_j) best = trial;
    }
    if (best.stage_clock_mhz.empty()) break;
    current = best;
  }
  result.planned = current;
  result.energy_saved = 1 - current.energy_per_step_j / result.baseline.energy_per_step_j;
  result.slowdown = current.iteration_s / result.baseline.iteration_s - 1;
  if (result.energy_saved < 0.005) {
    result.verdict = fmt::format(
        "nothing to save: no stage can run {:.0f} MHz slower without slowing the step by more than {:.1f} % "
        "(every "
        "stage is on the critical path)",
        step_mhz, 100 * request.max_slowdown);
  } else {
    result.verdict = fmt::format("{:.1f} % less energy per step for {:+.2f} % step time",
                                 100 * result.energy_saved, 100 * result.slowdown);
  }
  return result;
}

}  // namespace calo::plan
