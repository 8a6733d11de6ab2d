// Energy plan on real simulations: an imbalanced pipeline's waiting stages get lower clock locks within the
// slowdown bound; a single stage is refused; the savings the clock-power exponent allows are reported as
// found.
#include "plan/power_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::plan {
namespace {

PowerPlanRequest request_for(std::vector<int> layers_per_stage) {
  PowerPlanRequest request;
  request.model = model::load_model("llama3-8b");
  request.layout.pp = static_cast<int>(layers_per_stage.size());
  request.layout.global_batch = 8;
  request.layout.seq_length = 2048;
  request.layout.layers_per_stage = std::move(layers_per_stage);
  request.layout = parallel::resolve_layout(request.model, request.layout);
  request.cluster = sim::load_cluster("h200x4-nvswitch");
  request.options.steps = 2;
  return request;
}

TEST(PowerPlan, AnImbalancedPipelineSlowsItsWaitingStagesWithinTheBound) {
  const PowerPlanResult result = plan_power(request_for({20, 4, 4, 4}));
  EXPECT_LE(result.slowdown, 0.01 + 1e-9);
  EXPECT_GT(result.energy_saved, 0.0) << result.verdict;
  EXPECT_LT(result.planned.energy_per_step_j, result.baseline.energy_per_step_j);
  // The critical stage (20 layers) keeps the highest clock of all.
  const auto& clocks = result.planned.stage_clock_mhz;
  for (std::size_t stage = 1; stage < clocks.size(); ++stage) EXPECT_GE(clocks[0], clocks[stage]);
  EXPECT_LT(*std::min_element(clocks.begin(), clocks.end()), result.baseline.stage_clock_mhz[0]);
  // Re-simulating the planned locks gives the figures reported.
  const ClockFigures again = simulate_clocks(request_for({20, 4, 4, 4}), clocks);
  EXPECT_NEAR(again.energy_per_step_j, result.planned.energy_per_step_j, 1e-6 * again.energy_per_step_j);
}

TEST(PowerPlan, ATighterBoundNeverSavesMore) {
  PowerPlanRequest request = request_for({20, 4, 4, 4});
  request.max_slowdown = 0.0;
  const PowerPlanResult strict = plan_power(request);
  request.max_slowdown = 0.05;
  const PowerPlanResult loose = plan_power(request);
  EXPECT_LE(strict.slowdown, 1e-9);
  EXPECT_LE(strict.energy_saved, loose.energy_saved + 1e-12);
}

TEST(PowerPlan, OneStageIsRefused) {
  EXPECT_THROW(plan_power(request_for({32})), InputError);
}

}  // namespace
}  // namespace calo::plan
