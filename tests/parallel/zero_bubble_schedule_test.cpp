// ZB-H1 (zero bubble, Qi et al. 2024): the slot order per stage, completion without deadlock, the bubble
// (p - 1)(T_F + T_B - T_W) of the paper, and activations held until W no longer than 1F1B's deepest stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/schedule.h"

namespace calo::parallel {
namespace {

Layout pipeline(Schedule schedule, int pp, int microbatches) {
  Layout layout;
  layout.pp = pp;
  layout.schedule = schedule;
  layout.global_batch = microbatches;  // micro_batch = dp = 1
  return layout;
}

/// "F0 B0 W0 ...": the passes of `slots` with their micro-batches.
std::string render(const std::vector<PipelineSlot>& slots) {
  std::string text;
  for (const PipelineSlot& slot : slots) {
    if (!text.empty()) text += ' ';
    text += slot.pass == PassKind::kForward ? 'F' : slot.pass == PassKind::kBackward ? 'B' : 'W';
    text += std::to_string(slot.microbatch);
  }
  return text;
}

TEST(ZeroBubbleSchedule, ZbH1KeepsOneFOneBOrderAndDefersStageSWeightGradients) {
  const Layout layout = pipeline(Schedule::kZbH1, 4, 6);
  EXPECT_EQ(render(stage_schedule(layout, 0)), "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5");
  EXPECT_EQ(render(stage_schedule(layout, 1)), "F0 F1 F2 B0 F3 B1 W1 F4 B2 W2 F5 B3 W3 B4 W0 B5 W4 W5");
  EXPECT_EQ(render(stage_schedule(layout, 2)), "F0 F1 B0 F2 B1 F3 B2 W2 F4 B3 W3 F5 B4 W4 B5 W0 W1 W5");
  EXPECT_EQ(render(stage_schedule(layout, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 W3 F4 B4 W4 F5 B5 W5 W0 W1 W2");
}

TEST(ZeroBubbleSchedule, ZbH1RunsEveryPassOnceAndReachesThePapersBubble) {
  for (int pp : {2, 4, 8}) {
    for (int microbatches : {1, 2, pp, 2 * pp, 4 * pp}) {
      SCOPED_TRACE(testing::Message() << "pp" << pp << " m" << microbatches);
      const Layout zb = pipeline(Schedule::kZbH1, pp, microbatches);
      const PipelineRun run = run_pipeline(zb, 1.0, 2.0);  // T_F = T_B = T_W = 1
      ASSERT_TRUE(run.completed) << run.stuck;
      EXPECT_EQ(run.passes_run, 3 * pp * microbatches);
      const PipelineRun one_f_one_b = run_pipeline(pipeline(Schedule::k1F1B, pp, microbatches), 1.0, 2.0);
      EXPECT_LE(run.makespan, one_f_one_b.makespan + 1e-9);
      if (microbatches >= pp) {  // the paper's (p - 1)(T_F + T_B - T_W) bubble, here p - 1
        EXPECT_DOUBLE_EQ(run.makespan, 3.0 * microbatches + (pp - 1));
        EXPECT_NEAR(run.bubble_fraction, bubble_fraction(zb), 1e-12);
      }
      int deepest_one_f_one_b = 0;
      for (int stage = 0; stage < pp; ++stage) {
        deepest_one_f_one_b = std::max(
            deepest_one_f_one_b, peak_inflight_passes(pipeline(Schedule::k1F1B, pp, microbatches), stage));
      }
      for (int stage = 0; stage < pp; ++stage)
        EXPECT_LE(peak_inflight_passes(zb, stage), deepest_one_f_one_b);
    }
  }
}

TEST(ZeroBubbleSchedule, ZbH1IsOneTableEntryNotSearchedByThePlanner) {
  EXPECT_EQ(kScheduleAxis.parse("zb-h1"), Schedule::kZbH1);
  EXPECT_EQ(to_string(Schedule::kZbH1), "zb-h1");
  EXPECT_TRUE(schedule_entry(Schedule::kZbH1).splits_backward);
  EXPECT_EQ(schedule_entry(Schedule::kZbH1).plan, PlanAxis::kNotSearched);
  EXPECT_EQ(chunks_per_stage(pipeline(Schedule::kZbH1, 4, 8)), 1);
}

}  // namespace
}  // namespace calo::parallel
