// Thermal-aware pipeline partition on real simulations: a 10 % slower GPU, a hot GPU, no straggler, and the
// local search against the exhaustive best on small cases.
#include "plan/partition.h"

#include <gtest/gtest.h>

#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::plan {
namespace {

/// Llama3-8B shapes with `layers` layers on `pp` stages (tp 1, dp 1), 8 micro-batches of 1 sequence of 2048.
PartitionRequest request_for(int layers, int pp) {
  PartitionRequest request;
  request.model = model::load_model("llama3-8b");
  request.model.num_layers = layers;
  request.layout.pp = pp;
  request.layout.global_batch = 8;
  request.layout.seq_length = 2048;
  request.layout = parallel::resolve_layout(request.model, request.layout);
  request.cluster = sim::load_cluster("h200-hgx");
  request.options.steps = 1;
  return request;
}

std::string show(const PartitionFigures& figures) {
  std::string text;
  for (int layers : figures.layers_per_stage) text += std::to_string(layers) + " ";
  text += "on";
  for (int position : figures.gpu_of_stage) text += " " + std::to_string(position);
  return text + ": " + std::to_string(figures.iteration_s) + " s, " + std::to_string(figures.max_die_c) +
         " C";
}

double gain(const PartitionFigures& reference, const PartitionFigures& found) {
  return 1.0 - found.iteration_s / reference.iteration_s;
}

TEST(Partition, TenPercentSlowerGpuBeatsUniformAndEvenOddAndMatchesExhaustive) {
  // pp 4, 64 layers: the straggler on stage 2, which the study's static even/odd split loads more.
  PartitionRequest request = request_for(64, 4);
  request.options.speed_factors = {1.0, 1.0, 0.9, 1.0};
  const PartitionResult result = plan_partition(request);
  const std::string shown = "uniform " + show(result.uniform) + ", even/odd " + show(result.even_odd) +
                            ", found " + show(result.best);
  EXPECT_GE(gain(result.uniform, result.best), 0.03) << shown;
  EXPECT_GE(gain(result.even_odd, result.best), 0.03) << shown;
  EXPECT_LE(result.best.max_die_c, result.uniform.max_die_c + 1e-6);
  const PartitionFigures exhaustive = exhaustive_partition(request, 3);
  EXPECT_LE(result.best.iteration_s, exhaustive.iteration_s * 1.01)
      << shown << ", exhaustive " << show(exhaustive);
}

TEST(Partition, SlowFirstStageOnTwoStagesMatchesTheExhaustiveBest) {
  // pp 2, 32 layers: the output layer (128 K vocabulary) makes the last stage the heavier one even with a 10
  // % slower first stage, so the even/odd split (17, 15) is already the best here; the search must find it.
  PartitionRequest request = request_for(32, 2);
  request.options.speed_factors = {0.9, 1.0};
  const PartitionResult result = plan_partition(request);
  const PartitionFigures exhaustive = exhaustive_partition(request, 15);
  EXPECT_GE(gain(result.uniform, result.best), 0.03) << show(result.uniform) << " -> " << show(result.best);
  EXPECT_LE(result.best.iteration_s, exhaustive.iteration_s * 1.01) << show(exhaustive);
  EXPECT_LE(result.best.iteration_s, result.even_odd.iteration_s);
}

TEST(Partition, WithoutAStragglerNeverSlowerThanUniformNorHotter) {
  for (int pp : {2, 4}) {
    const PartitionRequest request = request_for(32, pp);
    const PartitionResult result = plan_partition(request);
    EXPECT_LE(result.best.iteration_s, result.uniform.iteration_s);
    EXPECT_LE(result.best.max_die_c, result.uniform.max_die_c + 1e-6);
  }
}

TEST(Partition, HotGpuNeverSlowerNorHotterThanUniform) {
  // At the preset's 27 C inlet a GPU 15 C hotter stays below the 87 C slowdown; it only leaks more (0.7 W/C
  // above 58 C) and holds the cap ~1-2 % lower: too little for 3 %, but the search must not lose.
  PartitionRequest request = request_for(32, 2);
  request.options.steps = 20;
  request.options.inlet_offset_c = {15.0, 0.0};
  const PartitionResult result = plan_partition(request);
  EXPECT_LE(result.best.iteration_s, result.uniform.iteration_s);
  EXPECT_LE(result.best.max_die_c, result.uniform.max_die_c + 1e-6);
}

/// A warm room (every inlet +27 C: the downstream GPUs of an air-cooled chassis) with GPU `hot` 15 C hotter
/// still, 16 micro-batches: the hot die passes the 87 C slowdown once the heat sinks warm up (12 steps of ~1
/// s, tau_sink 4 s) while the others stay 10-17 C cooler.
PartitionRequest warm_room(int layers, int pp, int hot) {
  PartitionRequest request = request_for(layers, pp);
  request.layout.global_batch = 16;
  request.layout = parallel::resolve_layout(request.model, request.layout);
  request.options.steps = 12;
  request.options.inlet_offset_c.assign(pp, 27.0);
  request.options.inlet_offset_c[hot] += 15.0;
  return request;
}

TEST(Partition, FifteenDegreesHotterGpuBeatsUniformAndEvenOdd) {
  // The hot GPU runs the last stage (output layer + loss: the critical one). Uniform leaves it hot and
  // throttling; even/odd gives it one layer less; the search moves more off it and reorders the rest.
  const PartitionRequest request = warm_room(32, 4, 3);
  const PartitionResult result = plan_partition(request);
  const std::string shown = "uniform " + show(result.uniform) + ", even/odd " + show(result.even_odd) +
                            ", found " + show(result.best);
  EXPECT_GE(result.uniform.max_die_c, 87.0) << "the hot GPU must reach its thermal slowdown: " << shown;
  EXPECT_GE(gain(result.uniform, result.best), 0.03) << shown;
  EXPECT_GE(gain(result.even_odd, result.best), 0.03) << shown;
  EXPECT_LE(result.best.max_die_c, result.uniform.max_die_c + 1e-6) << shown;
}

TEST(Partition, NeverWorseThanTheEvenOddSplitWhereThatIsAdmissible) {
  // Hot GPU on stage 1: even/odd (one layer less there, one less on the output stage) is a local optimum the
  // descent from uniform does not reach; the search starts from it too.
  const PartitionRequest request = warm_room(32, 4, 1);
  const PartitionResult result = plan_partition(request);
  ASSERT_LE(result.even_odd.max_die_c, result.uniform.max_die_c);
  EXPECT_LE(result.best.iteration_s, result.even_odd.iteration_s)
      << show(result.best) << " vs even/odd " << show(result.even_odd);
}

TEST(Partition, HotGpuOnThreeStagesMatchesTheExhaustiveBestOverOrdersAndPartitions) {
  const PartitionRequest request = warm_room(24, 3, 1);
  const PartitionResult result = plan_partition(request);
  const PartitionFigures exhaustive = exhaustive_partition(request, 3, true);
  EXPECT_LE(result.best.iteration_s, exhaustive.iteration_s * 1.01)
      << show(result.best) << " vs exhaustive " << show(exhaustive);
  EXPECT_LT(result.best.iteration_s, result.uniform.iteration_s);
}

TEST(Partition, StagesTradeGpusOnlyWithinANodeOrAsWholeNodes) {
  // Stages of 2 GPUs on 8-GPU nodes: all four positions share node 0. With tp 4 and pp 4 the positions
  // 0, 1 sit in node 0 and 2, 3 in node 1: swapping across nodes would change the network, so it is not
  // tried.
  PartitionRequest request = request_for(32, 4);
  request.layout.tp = 2;
  request.layout = parallel::resolve_layout(request.model, request.layout);
  EXPECT_TRUE(can_swap_positions(request, 0, 3));
  request.layout.tp = 4;
  request.layout = parallel::resolve_layout(request.model, request.layout);
  EXPECT_TRUE(can_swap_positions(request, 0, 1));
  EXPECT_FALSE(can_swap_positions(request, 1, 2));
  request.layout.tp = 8;  // each stage fills a node: any order keeps the network
  request.layout = parallel::resolve_layout(request.model, request.layout);
  EXPECT_TRUE(can_swap_positions(request, 0, 3));
}

TEST(Partition, TheOrderFoundSimulatesTheSameThroughTheLayoutsStageGpus) {
  // What `calo sim --layers-per-stage ... --stage-gpus ...` runs is what the planner simulated.
  PartitionRequest request = request_for(32, 4);
  request.options.speed_factors = {1.0, 1.0, 0.85, 1.0};
  const PartitionFigures planned = simulate_partition(request, {9, 9, 9, 5}, {2, 0, 1, 3});
  parallel::Layout layout = request.layout;
  layout.layers_per_stage = {9, 9, 9, 5};
  layout.stage_gpus = {2, 0, 1, 3};
  layout = parallel::resolve_layout(request.model, layout, true);
  const sim::SimResult result =
      sim::simulate(graph::build_graph(request.model, layout), request.cluster, request.options);
  EXPECT_DOUBLE_EQ(result.iteration_s, planned.iteration_s);
  // Stage 0 runs on the slow GPU of position 2 now; in Megatron's order stage 2 would.
  const PartitionFigures megatron = simulate_partition(request, {9, 9, 9, 5});
  EXPECT_NE(megatron.iteration_s, planned.iteration_s);
}

}  // namespace
}  // namespace calo::plan
