// Pipeline schedules: exact Megatron orders, completeness, forward-before-backward, and a message-passing
// execution of all stages together that must never deadlock; layer partition and bubble fraction.
#include "parallel/schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace calo::parallel {
namespace {

Layout pipeline(Schedule schedule, int pp, int microbatches, int chunks = 1) {
  Layout layout;
  layout.pp = pp;
  layout.schedule = schedule;
  layout.virtual_stages = chunks;
  layout.global_batch = microbatches;  // micro_batch = dp = 1
  return layout;
}

/// "F0.1" = forward of micro-batch 0 on chunk 1; chunk omitted when `with_chunk` is false.
std::string render(const std::vector<PipelineSlot>& slots, bool with_chunk) {
  std::string text;
  for (const PipelineSlot& slot : slots) {
    if (!text.empty()) text += ' ';
    text += slot.pass == PassKind::kForward ? 'F' : 'B';
    text += std::to_string(slot.microbatch);
    if (with_chunk) text += "." + std::to_string(slot.chunk);
  }
  return text;
}

/// Executes the stages' schedules together as processes exchanging messages: a forward of virtual stage v
/// waits for the activation sent by virtual stage v-1, a backward waits for the gradient sent by v+1 (the
/// last virtual stage for its own forward). Sends never block. Returns the number of passes left when nothing
/// can move.
int passes_left_after_greedy_run(const std::vector<std::vector<PipelineSlot>>& schedules, int chunks,
                                 int microbatches) {
  const int stages = static_cast<int>(schedules.size());
  const int last_virtual = stages * chunks - 1;
  std::vector<std::vector<bool>> activation_sent(stages * chunks, std::vector<bool>(microbatches, false));
  std::vector<std::vector<bool>> gradient_sent(stages * chunks, std::vector<bool>(microbatches, false));
  std::vector<size_t> position(stages, 0);
  bool moved = true;
  while (moved) {
    moved = false;
    for (int stage = 0; stage < stages; ++stage) {
      if (position[stage] == schedules[stage].size()) continue;
      const PipelineSlot& slot = schedules[stage][position[stage]];
      const int virt = slot.chunk * stages + stage;
      bool ready = false;
      if (slot.pass == PassKind::kForward) {
        ready = virt == 0 || activation_sent[virt - 1][slot.microbatch];
      } else {
        ready = activation_sent[virt][slot.microbatch] &&
                (virt == last_virtual || gradient_sent[virt + 1][slot.microbatch]);
      }
      if (!ready) continue;
      (slot.pass == PassKind::kForward ? activation_sent : gradient_sent)[virt][slot.microbatch] = true;
      ++position[stage];
      moved = true;
    }
  }
  int left = 0;
  for (int stage = 0; stage < stages; ++stage)
    left += static_cast<int>(schedules[stage].size() - position[stage]);
  return left;
}

struct Combo {
  Schedule schedule;
  int pp;
  int microbatches;
  int chunks;
};

/// Many (schedule, pp, m, vpp) combinations, including m < pp and Megatron's m == pp special case.
std::vector<Combo> combos() {
  std::vector<Combo> result;
  for (int pp : {1, 2, 3, 4, 5, 8, 16}) {
    for (int microbatches : {1, 2, 3, 4, 7, 8, 16, 33, 64}) {
      result.push_back({Schedule::kGpipe, pp, microbatches, 1});
      result.push_back({Schedule::k1F1B, pp, microbatches, 1});
      if (pp < 2) continue;
      for (int chunks : {2, 3, 4}) {
        for (int multiple : {1, 2, 3, 5})
          result.push_back({Schedule::kInterleaved, pp, pp * multiple, chunks});
      }
    }
  }
  return result;
}

TEST(Schedule, OneF1BMatchesMegatronOrder) {
  Layout layout = pipeline(Schedule::k1F1B, 4, 8);
  EXPECT_EQ(render(stage_schedule(layout, 0), false), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(render(stage_schedule(layout, 2), false), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(render(stage_schedule(layout, 3), false), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer micro-batches than stages: warm-up is capped at m.
  EXPECT_EQ(render(stage_schedule(pipeline(Schedule::k1F1B, 4, 2), 0), false), "F0 F1 B0 B1");
}

TEST(Schedule, GpipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(render(stage_schedule(pipeline(Schedule::kGpipe, 4, 3), 1), false), "F0 F1 F2 B0 B1 B2");
}

TEST(Schedule, InterleavedMatchesMegatronOrder) {
  // pp 2, vpp 2, m 4: warm-up (pp - stage - 1) * 2 + (vpp - 1) * pp = 4 on stage 0 and 2 on stage 1;
  // micro-batches go through each chunk in groups of pp; backward visits chunks in reverse.
  Layout layout = pipeline(Schedule::kInterleaved, 2, 4, 2);
  EXPECT_EQ(render(stage_schedule(layout, 0), true),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(render(stage_schedule(layout, 1), true),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m == pp: Megatron runs every forward first.
  EXPECT_EQ(render(stage_schedule(pipeline(Schedule::kInterleaved, 2, 2, 2), 1), true),
            "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

TEST(Schedule, EveryMicrobatchRunsOnceForwardAndOnceBackwardPerChunkForwardFirst) {
  for (const Combo& combo : combos()) {
    Layout layout = pipeline(combo.schedule, combo.pp, combo.microbatches, combo.chunks);
    for (int stage = 0; stage < combo.pp; ++stage) {
      SCOPED_TRACE(testing::Message() << to_string(combo.schedule) << " pp" << combo.pp << " m"
                                      << combo.microbatches << " vpp" << combo.chunks << " stage " << stage);
      std::vector<std::vector<int>> forward_at(combo.chunks, std::vector<int>(combo.microbatches, -1));
      std::vector<std::vector<int>> backward_at(combo.chunks, std::vector<int>(combo.microbatches, -1));
      std::vector<PipelineSlot> slots = stage_schedule(layout, stage);
      ASSERT_EQ(slots.size(), 2u * combo.chunks * combo.microbatches);
      for (size_t position = 0; position < slots.size(); ++position) {
        const PipelineSlot& slot = slots[position];
        ASSERT_GE(slot.chunk, 0);
        ASSERT_LT(slot.chunk, combo.chunks);
        ASSERT_GE(slot.microbatch, 0);
        ASSERT_LT(slot.microbatch, combo.microbatches);
        int& seen = (slot.pass == PassKind::kForward ? forward_at : backward_at)[slot.chunk][slot.microbatch];
        EXPECT_EQ(seen, -1) << "pass repeated";
        seen = static_cast<int>(position);
      }
      for (int chunk = 0; chunk < combo.chunks; ++chunk) {
        for (int mb = 0; mb < combo.microbatches; ++mb) {
          EXPECT_GE(forward_at[chunk][mb], 0);
          EXPECT_GT(backward_at[chunk][mb], forward_at[chunk][mb]) << "backward before forward, mb " << mb;
        }
      }
    }
  }
}

TEST(Schedule, AllStagesTogetherNeverDeadlock) {
  for (const Combo& combo : combos()) {
    SCOPED_TRACE(testing::Message() << to_string(combo.schedule) << " pp" << combo.pp << " m"
                                    << combo.microbatches << " vpp" << combo.chunks);
    Layout layout = pipeline(combo.schedule, combo.pp, combo.microbatches, combo.chunks);
    std::vector<std::vector<PipelineSlot>> schedules;
    for (int stage = 0; stage < combo.pp; ++stage) schedules.push_back(stage_schedule(layout, stage));
    EXPECT_EQ(passes_left_after_greedy_run(schedules, combo.chunks, combo.microbatches), 0);
    PipelineRun run = run_pipeline(layout, 1.0, 2.0);
    EXPECT_TRUE(run.completed) << run.stuck;
    EXPECT_EQ(run.passes_run, 2 * combo.pp * combo.chunks * combo.microbatches);
  }
}

TEST(Schedule, DeadlockCheckerCatchesABrokenSchedule) {
  // Control: stage 0 starting with a backward that needs stage 1's gradient, which needs stage 0's forward.
  Layout layout = pipeline(Schedule::k1F1B, 2, 2);
  std::vector<std::vector<PipelineSlot>> schedules = {stage_schedule(layout, 0), stage_schedule(layout, 1)};
  ASSERT_EQ(passes_left_after_greedy_run(schedules, 1, 2), 0);
  std::swap(schedules[0][0], schedules[0][2]);  // F0 F1 B0 B1 -> B0 F1 F0 B1
  EXPECT_EQ(passes_left_after_greedy_run(schedules, 1, 2), 8);
}

TEST(Schedule, PeakInflightPasses) {
  EXPECT_EQ(peak_inflight_passes(pipeline(Schedule::k1F1B, 4, 8), 0), 4);
  EXPECT_EQ(peak_inflight_passes(pipeline(Schedule::k1F1B, 4, 8), 3), 1);
  EXPECT_EQ(peak_inflight_passes(pipeline(Schedule::k1F1B, 8, 3), 0), 3);
  EXPECT_EQ(peak_inflight_passes(pipeline(Schedule::kGpipe, 4, 8), 2), 8);
  // Interleaved stage 0: warm-up (pp-1)*2 + (vpp-1)*pp forwards, plus the first steady forward.
  EXPECT_EQ(peak_inflight_passes(pipeline(Schedule::kInterleaved, 4, 8, 2), 0), 6 + 4 + 1);
}

TEST(Schedule, LayerPartitionFollowsMegatronVirtualStages) {
  // Megatron's docstring: 16 layers, pp 4, vpp 2 -> GPU 0 holds layers [1, 2] and [9, 10] (1-based).
  Layout layout = pipeline(Schedule::kInterleaved, 4, 8, 2);
  std::vector<LayerRange> ranges = layer_partition(layout, 16);
  ASSERT_EQ(ranges.size(), 8u);
  EXPECT_EQ(ranges[virtual_stage(layout, 0, 0)].first_layer, 0);
  EXPECT_EQ(ranges[virtual_stage(layout, 0, 1)].first_layer, 8);
  EXPECT_EQ(ranges[virtual_stage(layout, 3, 1)].first_layer, 14);
  EXPECT_EQ(ranges[virtual_stage(layout, 3, 1)].count, 2);
  Layout explicit_layout = pipeline(Schedule::k1F1B, 3, 4);
  explicit_layout.layers_per_stage = {5, 6, 5};
  std::vector<LayerRange> uneven = layer_partition(explicit_layout, 16);
  EXPECT_EQ(uneven[1].first_layer, 5);
  EXPECT_EQ(uneven[1].count, 6);
  EXPECT_EQ(uneven[2].first_layer, 11);
  EXPECT_THROW(layer_partition(explicit_layout, 17), InputError);
}

TEST(Schedule, BubbleFractionClosedForm) {
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(Schedule::k1F1B, 4, 8)), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(Schedule::kGpipe, 4, 8)), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(Schedule::kInterleaved, 4, 8, 2)), 3.0 / 19.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(pipeline(Schedule::k1F1B, 1, 8)), 0.0);
}

TEST(Schedule, SimulatedBubbleEqualsClosedFormForGpipeAnd1F1B) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::k1F1B}) {
    for (int pp : {2, 4, 8}) {
      for (int microbatches : {1, 4, 8, 32}) {
        Layout layout = pipeline(schedule, pp, microbatches);
        PipelineRun run = run_pipeline(layout, 1.0, 2.0);
        ASSERT_TRUE(run.completed);
        EXPECT_DOUBLE_EQ(run.makespan, (microbatches + pp - 1) * 3.0);
        EXPECT_NEAR(run.bubble_fraction, bubble_fraction(layout), 1e-12)
            << to_string(schedule) << " pp" << pp << " m" << microbatches;
      }
    }
  }
}

TEST(Schedule, SimulatedBubbleEqualsClosedFormForInterleaved) {
  // Each chunk holds 1/vpp of the stage's layers, so a chunk pass takes 1/vpp of a full-stage pass;
  // Megatron's order then reaches makespan (m + (pp-1)/vpp) * (tf + tb), i.e. bubble (pp-1)/(vpp*m + pp-1).
  for (int pp : {2, 4, 8}) {
    for (int chunks : {2, 3, 4}) {
      for (int multiple : {1, 2, 4, 8}) {
        Layout layout = pipeline(Schedule::kInterleaved, pp, pp * multiple, chunks);
        PipelineRun run = run_pipeline(layout, 1.0 / chunks, 2.0 / chunks);
        ASSERT_TRUE(run.completed);
        EXPECT_NEAR(run.makespan, (pp * multiple + (pp - 1.0) / chunks) * 3.0, 1e-9);
        EXPECT_NEAR(run.bubble_fraction, bubble_fraction(layout), 1e-12)
            << "pp" << pp << " vpp" << chunks << " m" << pp * multiple;
      }
    }
  }
}

}  // namespace
}  // namespace calo::parallel
