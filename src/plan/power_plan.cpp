#include "plan/power_plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "graph/graph.h"
#include "sim/power_thermal.h"

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

namespace {

/// Lowest clock bin at which `power`'s ops (at `speed`) still fit in `window_s`; min_sm_mhz if all do.
double slowest_fitting_clock_mhz(const sim::GpuSpec& gpu, sim::ProgramPower& power, double speed,
                                 double window_s) {
  double clock_mhz = gpu.min_sm_mhz;
  while (clock_mhz < gpu.max_sm_mhz && power.at_clock(clock_mhz).busy_s / speed > window_s)
    clock_mhz += gpu.clock_step_mhz;
  return std::min(clock_mhz, gpu.max_sm_mhz);
}

}  // namespace

double saving_ceiling(const PowerPlanRequest& request) {
  const graph::Graph graph = graph::build_graph(request.model, request.layout);
  const sim::SimResult result = sim::simulate(graph, request.cluster, request.options);
  const sim::GpuSpec& gpu = request.cluster.gpu;
  std::vector<sim::ProgramPower> powers;
  for (const graph::RankProgram& program : graph.programs) powers.emplace_back(gpu, program);
  auto speed_of = [&](int rank) {
    return request.options.speed_factors.empty() ? 1.0 : request.options.speed_factors[rank];
  };
  // The busiest stage (most compute time at the max clock and the GPU's speed) sets the pace; it keeps it.
  int critical_stage = 0;
  double busiest_s = -1;
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    const double busy_s =
        powers[graph.program_of_rank[rank]].at_clock(gpu.max_sm_mhz).busy_s / speed_of(rank);
    if (busy_s > busiest_s) busiest_s = busy_s, critical_stage = graph.program(rank).stage;
  }
  double saved_j = 0, energy_j = 0;
  const std::size_t world = static_cast<std::size_t>(result.world);
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    energy_j += result.gpus[rank].energy_j;
    if (graph.program(rank).stage == critical_stage) continue;
    sim::ProgramPower& power = powers[graph.program_of_rank[rank]];
    for (int step = 0; step < result.steps; ++step) {
      // The step's effective clock stands for the controller's clocks within it. At best every op runs at the
      // lowest clock whose busy time still fits the (allowed) step, ignoring waits on other stages: an op's
      // active energy only falls with its clock (compute-bound ~ f^(gamma-1), memory-bound ~ f^gamma).
      const double clock_mhz = result.clock_mhz[static_cast<std::size_t>(step) * world + rank];
      const double window_s = result.step_results[step].iteration_s * (1 + request.max_slowdown);
      const double lowest_mhz = slowest_fitting_clock_mhz(gpu, power, speed_of(rank), window_s);
      const double now_mhz = sim::clock_bin_mhz(gpu, clock_mhz);
      if (lowest_mhz < now_mhz)
        saved_j += power.at_clock(now_mhz).active_energy_j - power.at_clock(lowest_mhz).active_energy_j;
    }
  }
  return energy_j > 0 ? saved_j / energy_j : 0.0;
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
  result.saving_ceiling = saving_ceiling(request);
  const std::string ceiling = fmt::format(
      "; no clock plan that keeps the busiest stage's pace can save more than {:.1f} % here (the other "
      "stages' "
      "ops at the lowest clock that still fits their busy time in the step, waits ignored; waiting GPUs draw "
      "idle power at any clock)",
      100 * result.saving_ceiling);
  if (result.energy_saved < 0.005) {
    result.verdict = fmt::format(
        "nothing to save: no stage can run {:.0f} MHz slower without slowing the step by more than {:.1f} % "
        "(every stage is on the critical path){}",
        step_mhz, 100 * request.max_slowdown, ceiling);
  } else {
    result.verdict = fmt::format("{:.1f} % less energy per step for {:+.2f} % step time{}",
                                 100 * result.energy_saved, 100 * result.slowdown, ceiling);
  }
  return result;
}

}  // namespace calo::plan
