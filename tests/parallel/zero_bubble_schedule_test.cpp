// ZB-H1 and ZB-V (zero bubble, Qi et al. 2024): the slot order per stage, completion without deadlock, the
// bubble (p - 1)(T_F + T_B - T_W) of the paper (half of it in ZB-V's V), and activations held until W no
// longer than 1F1B's deepest stage; ZB-V's chunks run the stages down and back up.
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

/// ZB-V's layout: pp stages, two chunks each.
Layout v_pipeline(int pp, int microbatches) {
  Layout layout = pipeline(Schedule::kZbV, pp, microbatches);
  layout.virtual_stages = 2;
  return layout;
}

/// "F0 B0 W0 ...": the passes of `slots` with their micro-batches, a chunk-1 pass marked '.
std::string render(const std::vector<PipelineSlot>& slots) {
  std::string text;
  for (const PipelineSlot& slot : slots) {
    if (!text.empty()) text += ' ';
    text += slot.pass == PassKind::kForward ? 'F' : slot.pass == PassKind::kBackward ? 'B' : 'W';
    text += std::to_string(slot.microbatch);
    if (slot.chunk == 1) text += '\'';
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

TEST(ZeroBubbleSchedule, ZbH1IsOneTableEntrySearchedAtEveryPipeline) {
  EXPECT_EQ(kScheduleAxis.parse("zb-h1"), Schedule::kZbH1);
  EXPECT_EQ(to_string(Schedule::kZbH1), "zb-h1");
  EXPECT_TRUE(schedule_entry(Schedule::kZbH1).splits_backward);
  EXPECT_EQ(schedule_entry(Schedule::kZbH1).plan, PlanAxis::kPipelined);
  EXPECT_EQ(chunks_per_stage(pipeline(Schedule::kZbH1, 4, 8)), 1);
}

TEST(ZeroBubbleSchedule, ZbVRunsTheChunksDownAndBackUpTheStages) {
  const Layout layout = v_pipeline(4, 8);
  EXPECT_EQ(chunks_per_stage(layout), 2);
  for (int stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(virtual_stage(layout, stage, 0), stage);
    EXPECT_EQ(virtual_stage(layout, stage, 1), 7 - stage);  // stage 0 holds the first and the last
    for (int chunk = 0; chunk < 2; ++chunk) {
      EXPECT_EQ(stage_of_virtual(layout, virtual_stage(layout, stage, chunk)), stage);
      EXPECT_EQ(chunk_of_virtual(layout, virtual_stage(layout, stage, chunk)), chunk);
    }
  }
  const Layout interleaved = [] {
    Layout chunked = pipeline(Schedule::kInterleaved, 4, 8);
    chunked.virtual_stages = 2;
    return chunked;
  }();
  EXPECT_EQ(virtual_stage(interleaved, 0, 1), 4);  // Megatron's assignment unchanged
  EXPECT_EQ(stage_of_virtual(interleaved, 7), 3);
}

TEST(ZeroBubbleSchedule, ZbVOrdersEachStagesPassesAsTorchsZbv) {
  // Stage 0 runs 2pp - 1 = 3 chunk-0 forwards down the V, then the last virtual stage's F B W as each
  // micro-batch comes back; stage 1 (the V's turn) alternates the chunks from its second forward on.
  const Layout layout = v_pipeline(2, 4);
  EXPECT_EQ(render(stage_schedule(layout, 0)),
            "F0 F1 F2 F0' B0' W0' F1' B1' W1' F3 B0 W0 F2' B2' W2' B1 W1 F3' B3' W3' B2 W2 B3 W3");
  EXPECT_EQ(render(stage_schedule(layout, 1)),
            "F0 F0' F1 F1' B0' W0' F2 B0 W0 F2' B1' W1' F3 B1 W1 F3' B2' W2' B2 B3' B3 W2 W3' W3");
  EXPECT_EQ(warmup_slots(layout, 0), 4);
}

TEST(ZeroBubbleSchedule, ZbVRunsEveryPassOnceWithHalfZbH1sBubble) {
  for (int pp : {2, 4, 8}) {
    for (int microbatches : {pp, 2 * pp, 4 * pp}) {
      SCOPED_TRACE(testing::Message() << "pp" << pp << " m" << microbatches);
      const Layout zb = v_pipeline(pp, microbatches);
      // T_F = T_B = T_W = 1 per chunk: a stage's whole forward takes 2, as 1F1B's and ZB-H1's below.
      const PipelineRun run = run_pipeline(zb, 1.0, 2.0);
      ASSERT_TRUE(run.completed) << run.stuck;
      EXPECT_EQ(run.passes_run, 6 * pp * microbatches);
      const PipelineRun h1 = run_pipeline(pipeline(Schedule::kZbH1, pp, microbatches), 2.0, 4.0);
      const PipelineRun one_f_one_b = run_pipeline(pipeline(Schedule::k1F1B, pp, microbatches), 2.0, 4.0);
      EXPECT_LE(run.makespan, one_f_one_b.makespan);
      if (microbatches >= 2 * pp) {  // the V filled: (p - 1) chunk passes of bubble, ZB-H1's halved
        EXPECT_DOUBLE_EQ(run.makespan, 6.0 * microbatches + (pp - 1));
        EXPECT_DOUBLE_EQ(h1.makespan - 6.0 * microbatches, 2.0 * (pp - 1));
        EXPECT_NEAR(run.bubble_fraction, bubble_fraction(zb), 1e-12);
      }
      // Activations: at most 2pp chunk passes (pp micro-batches of a whole stage, 1F1B's first stage).
      for (int stage = 0; stage < pp; ++stage) EXPECT_LE(peak_inflight_passes(zb, stage), 2 * pp);
    }
  }
}

TEST(ZeroBubbleSchedule, ZbVIsOneTableEntry) {
  EXPECT_EQ(kScheduleAxis.parse("zb-v"), Schedule::kZbV);
  EXPECT_EQ(to_string(Schedule::kZbV), "zb-v");
  const ScheduleEntry& entry = schedule_entry(Schedule::kZbV);
  EXPECT_TRUE(entry.splits_backward && entry.v_shape && entry.chunked);
  EXPECT_FALSE(entry.pairs_exchanges);
  EXPECT_EQ(entry.plan, PlanAxis::kChunked);
  EXPECT_EQ(entry.fixed_chunks, 2);
}

}  // namespace
}  // namespace calo::parallel
