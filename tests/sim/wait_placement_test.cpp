// Where a GPU waits in its power trace (issue 64): the trace idles where the engine's op timeline has the GPU
// wait (a pipeline's bubble at the last stage's start), the step's energy is the same as with every wait at
// the step's end, and the GPUs of one engine entity share one trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "sim/power_dynamics.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

/// Llama3-8B (32 layers) 1F1B, 8 micro-batches of 2 x 4096 tokens per replica on one H100 node: at PP4,
/// stage s waits s forwards (~45 ms each) before its first op.
graph::Graph pipeline_graph(int tp, int pp, int dp) {
  parallel::Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.micro_batch = 2;
  layout.global_batch = 16 * dp;
  layout.seq_length = 4096;
  return testing::make_graph("llama3-8b", layout);
}

/// Mean power of `trace` over [begin_s, end_s) of its step (windows weighted by their overlap).
double mean_power_w(const PowerTrace& trace, double begin_s, double end_s) {
  double energy_j = 0, covered_s = 0, window_begin_s = 0;
  for (std::size_t window = 0; window < trace.sample_w.size(); ++window) {
    const double window_end = window_end_s(trace, window);
    const double overlap_s = std::min(end_s, window_end) - std::max(begin_s, window_begin_s);
    if (overlap_s > 0) {
      energy_j += trace.sample_w[window] * overlap_s;
      covered_s += overlap_s;
    }
    window_begin_s = window_end;
  }
  return covered_s > 0 ? energy_j / covered_s : NAN;
}

SimOptions options_with(bool waits_in_place, bool power_cap) {
  SimOptions options;
  options.steps = 3;
  options.waits_in_place = waits_in_place;
  options.power_cap = power_cap;
  options.record_timeline = true;
  return options;
}

TEST(WaitPlacement, TheLastStageIdlesThroughItsBubbleAtTheStepsStart) {
  const graph::Graph graph = pipeline_graph(1, 4, 1);
  const ClusterSpec cluster = load_cluster("h100x4-nvlink-calibrated");
  const SimResult placed = simulate(graph, cluster, options_with(true, true));
  const SimResult at_end = simulate(graph, cluster, options_with(false, true));
  const int last_stage = 3;
  // When the last stage's first op began (the bubble it waits at the step's start), from its timeline.
  double first_begin_s = 1e9, busy_end_s = 0;
  for (const OpSpan& span : placed.timeline[last_stage]) {
    if (graph::is_communication(graph.program(last_stage).ops[span.op].kind)) continue;
    first_begin_s = std::min(first_begin_s, span.begin_s);
    busy_end_s = std::max(busy_end_s, span.end_s);
  }
  ASSERT_GT(first_begin_s, 0.1) << "three forwards of eight layers before the last stage's first op";
  const std::size_t last = static_cast<std::size_t>(placed.steps - 1) * placed.world + last_stage;
  const PowerTrace& trace = *placed.power_traces[placed.trace_of[last]];
  const PowerTrace& old_trace = *at_end.power_traces[at_end.trace_of[last]];
  // Placed: idle-and-waiting power through the bubble (20 ms windows: leave one at its edge), busy after it.
  const double waiting_w = mean_power_w(trace, 0.02, first_begin_s - 0.02);
  const double working_w = mean_power_w(trace, first_begin_s + 0.02, busy_end_s - 0.02);
  const double wait_level_w = cluster.gpu.idle_power_w + cluster.gpu.wait_power_w;
  EXPECT_LT(waiting_w, wait_level_w + 30) << "waiting " << waiting_w << " W";
  EXPECT_GT(working_w, waiting_w + 150) << "working " << working_w << " W, waiting " << waiting_w << " W";
  // The waiting power decays (the wait stage's e^(-t/tau), tau = 24 ms on this preset): hot in the step's
  // rest after the last op, back near idle by the bubble's end (the bubble continues that rest: steps
  // repeat).
  ASSERT_GT(cluster.gpu.wait_power_decay_s, 0);
  ASSERT_LT(busy_end_s + 0.04, placed.iteration_s) << "a rest of more than two windows after the last op";
  const double after_last_op_w = mean_power_w(trace, busy_end_s + 0.02, busy_end_s + 0.04);
  const double bubble_end_w = mean_power_w(trace, first_begin_s - 0.04, first_begin_s - 0.02);
  EXPECT_GT(after_last_op_w, bubble_end_w + 20) << after_last_op_w << " W after the last op";
  EXPECT_LT(bubble_end_w, cluster.gpu.idle_power_w + 10);
  // With every wait at the step's end the same span read as working.
  EXPECT_GT(mean_power_w(old_trace, 0.02, first_begin_s - 0.02), waiting_w + 150);
}

TEST(WaitPlacement, EveryGpusEnergyIsTheSameAsWithTheWaitsAtTheStepsEnd) {
  const graph::Graph graph = pipeline_graph(2, 2, 2);
  // Without the cap the clock stays at its limit: only where (and in what shape) the wait power falls moves;
  // h100x4-nvlink-calibrated's waits draw 265 W above idle decaying over 24 ms.
  for (const std::string preset : {"h100-hgx-calibrated", "h100x4-nvlink-calibrated"}) {
    const ClusterSpec cluster = load_cluster(preset);
    const SimResult placed = simulate(graph, cluster, options_with(true, false));
    const SimResult at_end = simulate(graph, cluster, options_with(false, false));
    ASSERT_EQ(placed.world, 8);
    EXPECT_DOUBLE_EQ(placed.iteration_s, at_end.iteration_s);
    for (int rank = 0; rank < placed.world; ++rank) {
      EXPECT_NEAR(placed.gpus[rank].energy_j / at_end.gpus[rank].energy_j, 1, 1e-9) << preset << " " << rank;
    }
  }
  const ClusterSpec cluster = load_cluster("h100-hgx-calibrated");
  // With the cap (the default) the controller sees the waits where they are; the step and its energy stay
  // within 0.1 % here.
  const SimResult capped = simulate(graph, cluster, options_with(true, true));
  const SimResult capped_at_end = simulate(graph, cluster, options_with(false, true));
  EXPECT_NEAR(capped.iteration_s / capped_at_end.iteration_s, 1, 1e-3);
  for (int rank = 0; rank < capped.world; ++rank) {
    EXPECT_NEAR(capped.gpus[rank].energy_j / capped_at_end.gpus[rank].energy_j, 1, 1e-3) << "rank " << rank;
  }
}

TEST(WaitPlacement, EveryPlacedTraceIntegratesToItsEnergyAndTilesItsStep) {
  for (const auto& [tp, pp, dp] : {std::tuple{1, 4, 1}, std::tuple{2, 2, 2}, std::tuple{8, 8, 1}}) {
    const graph::Graph graph = pipeline_graph(tp, pp, dp);
    const SimResult result = simulate(graph, load_cluster("h100-hgx-calibrated"), options_with(true, true));
    for (const auto& trace : result.power_traces) {
      double energy_j = 0;
      for (std::size_t window = 0; window < trace->sample_w.size(); ++window)
        energy_j += trace->sample_w[window] * window_length_s(*trace, window);
      EXPECT_NEAR(energy_j / trace->energy_j, 1, 1e-6) << tp << "-" << pp << "-" << dp;
      EXPECT_LE(window_end_s(*trace, trace->sample_w.size() - 1), trace->duration_s * (1 + 1e-9));
    }
  }
}

TEST(WaitPlacement, TheGpusOfOneEntityShareOneTrace) {
  // TP2: each tensor-parallel pair is one engine entity, so its two GPUs have one wait pattern; DP2 replicas
  // are the same class: 2 stages -> 2 traces per step, as with the waits at the end.
  const graph::Graph graph = pipeline_graph(2, 2, 2);
  const ClusterSpec cluster = load_cluster("h100-hgx-calibrated");
  const SimResult placed = simulate(graph, cluster, options_with(true, true));
  const SimResult at_end = simulate(graph, cluster, options_with(false, true));
  const std::size_t last_step = static_cast<std::size_t>(placed.steps - 1) * placed.world;
  for (int rank = 0; rank < placed.world; rank += 2)
    EXPECT_EQ(placed.trace_of[last_step + rank], placed.trace_of[last_step + rank + 1]) << "rank " << rank;
  // Waits that move a little from step to step (the clock rounds, the heat) may cost a trace more each.
  EXPECT_LE(placed.power_traces_computed, 2 * at_end.power_traces_computed);
}

TEST(WaitPatterns, AreFlooredOntoTheTickGridWithoutDrift) {
  const ClusterSpec cluster = load_cluster("h100-hgx-calibrated");
  const std::vector<ProgramPower> none;
  PowerTraceCache cache(cluster.gpu, none);
  const double tick_s = trace_tick_s(cluster.gpu, 1.0);
  ASSERT_NEAR(tick_s, 1e-3, 1e-12);
  // Three waits of 0.6 ticks: 0.6, 1.2, 1.8 summed -> 0, 1, 1 ticks: one tick placed before op 8.
  const auto pattern = cache.waits({{3, 0.6e-3}, {8, 0.6e-3}, {12, 0.6e-3}}, 1.0);
  ASSERT_EQ(pattern->size(), 1u);
  EXPECT_EQ(pattern->front().op, 8);
  EXPECT_NEAR(pattern->front().length_s, 1e-3, 1e-12);
  // Waits that differ within a tick share one interned pattern; one a tick longer does not.
  EXPECT_EQ(cache.waits({{3, 0.61e-3}, {8, 0.62e-3}, {12, 0.5e-3}}, 1.0), pattern);
  EXPECT_NE(cache.waits({{3, 1.6e-3}, {8, 0.6e-3}, {12, 0.6e-3}}, 1.0), pattern);
  // 100 waits of 1.5 ticks place 150 ticks in all: flooring the running sum, not each wait, keeps the total.
  std::vector<WaitGap> many;
  for (int op = 0; op < 100; ++op) many.push_back({op, 1.5e-3});
  double placed_s = 0;
  for (const WaitGap& wait : *cache.waits(many, 1.0)) placed_s += wait.length_s;
  EXPECT_NEAR(placed_s, 0.150, 1e-9);
}

}  // namespace
}  // namespace calo::sim
