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

TEST(PowerPlan, SavesNoMoreThanItsCeilingWhichTheClockPowerCurveSets) {
  // With the fitted curve (active power ~ f^1.2: an op's energy ~ f^0.2) even a perfect per-op frequency plan
  // stays below 10 % on this layout; the ceiling is computed, not assumed, so a steeper curve (active power ~
  // f^3, strong voltage scaling) raises both the ceiling and what the plan finds.
  PowerPlanRequest request = request_for({14, 6, 6, 6});
  const PowerPlanResult fitted = plan_power(request);
  EXPECT_LE(fitted.energy_saved, fitted.saving_ceiling);
  EXPECT_LT(fitted.saving_ceiling, 0.10) << fitted.verdict;
  EXPECT_NE(fitted.verdict.find("can save more than"), std::string::npos) << fitted.verdict;
  request.cluster.gpu.clock_power_exponent = 3.0;
  const PowerPlanResult steep = plan_power(request);
  EXPECT_GT(steep.saving_ceiling, fitted.saving_ceiling * 2) << steep.verdict;
  EXPECT_GT(steep.energy_saved, fitted.energy_saved) << steep.verdict;
  EXPECT_LE(steep.slowdown, 0.01 + 1e-9);
}

TEST(PowerPlan, OneStageIsRefused) {
  EXPECT_THROW(plan_power(request_for({32})), InputError);
}

}  // namespace
}  // namespace calo::plan
