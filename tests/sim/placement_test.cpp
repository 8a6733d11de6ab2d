// A stage -> GPU order (Layout::stage_gpus) on the simulator: per-GPU conditions follow the stages that move
// onto them, a move across nodes is refused, and the layout's validation names a bad order.
#include "sim/placement.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

parallel::Layout tp2_pp4() {
  parallel::Layout layout;
  layout.tp = 2;
  layout.pp = 4;
  layout.global_batch = 4;
  layout.seq_length = 1024;
  return layout;
}

TEST(Placement, EachRankTakesTheConditionsOfTheGpuItsStageMovedTo) {
  parallel::Layout layout = tp2_pp4();
  layout.stage_gpus = {2, 0, 1, 3};
  SimOptions options;
  options.speed_factors = {1.0, 0.9, 1.0, 1.0, 0.8, 0.8, 1.0, 1.0};
  options.inlet_offset_c = {0, 0, 0, 0, 5, 5, 0, 0};
  const SimOptions placed = options_per_rank(options, layout, 8);
  // Stage 0 (ranks 0, 1) now runs on the GPUs of position 2 (ranks 4, 5 in Megatron's order, slots 4, 5).
  EXPECT_EQ(placed.speed_factors, (std::vector<double>{0.8, 0.8, 1.0, 0.9, 1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(placed.inlet_offset_c, (std::vector<double>{5, 5, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(placed.slot_of_rank, (std::vector<int>{4, 5, 0, 1, 2, 3, 6, 7}));
  layout.stage_gpus.clear();
  EXPECT_TRUE(options_per_rank(options, layout, 8).slot_of_rank.empty()) << "no order: nothing moves";
}

TEST(Placement, SimulatingAnOrderEqualsGivingEachRankItsGpusConditions) {
  // The slow GPU 2 under stage 3 (order 0,1,3,2) is the same simulation as Megatron's order with stage 3's
  // ranks slow: the order moves conditions, not the graph.
  const model::ModelSpec model = model::load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("h200-hgx");
  parallel::Layout layout;
  layout.pp = 4;
  layout.global_batch = 8;
  layout.seq_length = 1024;
  layout.layers_per_stage = {8, 8, 8, 8};
  parallel::Layout ordered = layout;
  ordered.stage_gpus = {0, 1, 3, 2};
  SimOptions options;
  options.steps = 2;
  options.speed_factors = {1.0, 1.0, 0.8, 1.0};
  const SimResult moved =
      simulate(graph::build_graph(model, parallel::resolve_layout(model, ordered)), cluster, options);
  options.speed_factors = {1.0, 1.0, 1.0, 0.8};
  options.slot_of_rank = {0, 1, 3, 2};
  const SimResult by_rank =
      simulate(graph::build_graph(model, parallel::resolve_layout(model, layout)), cluster, options);
  EXPECT_DOUBLE_EQ(moved.iteration_s, by_rank.iteration_s);
  ASSERT_EQ(moved.gpus.size(), 4u);
  EXPECT_DOUBLE_EQ(moved.gpus[3].busy_s, by_rank.gpus[3].busy_s);
  EXPECT_GT(moved.gpus[3].busy_s, moved.gpus[2].busy_s) << "stage 3 is on the slow GPU";
}

TEST(Placement, AStageMovedToAnotherNodeIsRefusedNamingIt) {
  // tp 4 x pp 4 on 8-GPU nodes: positions 0, 1 in node 0, positions 2, 3 in node 1.
  parallel::Layout layout = tp2_pp4();
  layout.tp = 4;
  layout.stage_gpus = {0, 2, 1, 3};
  EXPECT_FALSE(stage_move_keeps_network(layout, 8, 1, 2));
  try {
    check_stage_moves(layout, 8);
    FAIL() << "a move across nodes was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("stage 1 would move to the GPUs of pipeline position 2"),
              std::string::npos)
        << error.what();
  }
  layout.stage_gpus = {1, 0, 3, 2};  // swaps within each node keep the network
  EXPECT_NO_THROW(check_stage_moves(layout, 8));
}

TEST(Placement, ValidationNamesABadOrderAndDropsTheIdentity) {
  const model::ModelSpec model = model::load_model("llama3-8b");
  parallel::Layout layout = tp2_pp4();
  layout.stage_gpus = {0, 1, 1, 3};
  try {
    (void)parallel::resolve_layout(model, layout);
    FAIL() << "a repeated position was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("0,1,1,3 is not an order of the 4 pipeline positions 0..3"),
              std::string::npos)
        << error.what();
  }
  layout.stage_gpus = {0, 1, 2};
  EXPECT_THROW((void)parallel::resolve_layout(model, layout), InputError);
  layout.stage_gpus = {0, 1, 2, 3};
  EXPECT_TRUE(parallel::resolve_layout(model, layout).stage_gpus.empty()) << "Megatron's own order";
  layout.stage_gpus = {3, 1, 2, 0};
  const parallel::Layout resolved = parallel::resolve_layout(model, layout);
  EXPECT_EQ(resolved.gpu_of_rank(0), 6);
  EXPECT_EQ(resolved.gpu_of_rank(7), 1);
  EXPECT_EQ(parallel::layout_from_json(parallel::to_json(resolved)).stage_gpus, resolved.stage_gpus);
}

}  // namespace
}  // namespace calo::sim
