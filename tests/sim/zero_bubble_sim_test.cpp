// ZB-H1 and ZB-V end to end in the simulator (issue 68): on the same model and stages as 1F1B at PP4, every
// rank's program checks clean, the step is no slower and the bubble smaller; the deferred weight gradients
// hold activations longer; ZB-V's V puts the output layer on stage 0.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "graph/check.h"
#include "parallel/memory.h"
#include "parallel/schedule.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

/// Llama3-8B: 32 layers, 8 per stage at PP4 (the graphs are simulated, never checked against memory here).
constexpr const char* kModel = "llama3-8b";

parallel::Layout pp4(parallel::Schedule schedule, int microbatches, int tp = 1) {
  parallel::Layout layout;
  layout.tp = tp;
  layout.pp = 4;
  layout.micro_batch = 1;
  layout.global_batch = microbatches;
  layout.schedule = schedule;
  if (parallel::schedule_entry(schedule).chunked) layout.virtual_stages = 2;
  return layout;
}

class ZeroBubbleSim : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    model_path_ = kModel;
  }
  /// The simulated step of `layout` on `cluster` (no power cap, no heat).
  SimResult simulate_step(const parallel::Layout& layout, const ClusterSpec& cluster) const {
    const graph::Graph graph = testing::make_graph(model_path_, layout);
    EXPECT_EQ(graph::to_text(graph::check_graph(graph)), "") << parallel::describe(layout);
    SimOptions options;
    options.power_cap = false;
    options.thermal = false;
    return simulate(graph, cluster, options);
  }
  std::filesystem::path dir_;
  std::string model_path_;
};

TEST_F(ZeroBubbleSim, ZeroBubbleSchedulesAreNoSlowerThanOneFOneBAndTheirBubbleIsSmaller) {
  const ClusterSpec ideal =
      load_cluster(testing::write_file(dir_ / "ideal.yaml", testing::ideal_cluster_yaml(8)));
  const ClusterSpec h100 = load_cluster("h100-hgx");
  for (const ClusterSpec* cluster : {&ideal, &h100}) {
    for (int microbatches : {8, 16}) {
      SCOPED_TRACE(::testing::Message() << cluster->name << " m" << microbatches);
      const SimResult one_f_one_b = simulate_step(pp4(parallel::Schedule::k1F1B, microbatches), *cluster);
      const SimResult h1 = simulate_step(pp4(parallel::Schedule::kZbH1, microbatches), *cluster);
      const SimResult v = simulate_step(pp4(parallel::Schedule::kZbV, microbatches), *cluster);
      EXPECT_LE(h1.iteration_s, one_f_one_b.iteration_s * (1 + 1e-9));
      EXPECT_LE(v.iteration_s, h1.iteration_s * (1 + 1e-9));  // ZB-V's V halves ZB-H1's bubble
      for (const SimResult* zb : {&h1, &v}) {
        EXPECT_LT(zb->wait_s, one_f_one_b.wait_s);
        EXPECT_NEAR(zb->compute_busy_s, one_f_one_b.compute_busy_s, 1e-6 * one_f_one_b.compute_busy_s);
      }
    }
  }
}

TEST_F(ZeroBubbleSim, ZbVWithTensorAndDataParallelChecksClean) {
  const ClusterSpec h100 = load_cluster("h100-hgx");
  parallel::Layout layout = pp4(parallel::Schedule::kZbV, 8, 2);
  EXPECT_GT(simulate_step(layout, h100).iteration_s, 0);
  layout.dp = 2;
  layout.global_batch = 16;
  layout.zero_stage = 1;
  EXPECT_GT(simulate_step(layout, h100).iteration_s, 0);
}

TEST_F(ZeroBubbleSim, ZbVHoldsTheOutputOnStageZeroAndNoMoreMicroBatchesThanOneFOneB) {
  const model::ModelSpec model = model::load_model(model_path_);
  const parallel::Layout one_f_one_b = parallel::resolve_layout(model, pp4(parallel::Schedule::k1F1B, 8));
  const parallel::Layout zb = parallel::resolve_layout(model, pp4(parallel::Schedule::kZbV, 8));
  // Stage 0 holds chunk 0 (the embedding) and chunk 1 (the output layer, the loss's activations).
  const std::vector<double> stage0 = parallel::holdings_for_stage(model, zb, 0).chunk_edge_activation_bytes;
  const std::vector<double> stage3 = parallel::holdings_for_stage(model, zb, 3).chunk_edge_activation_bytes;
  ASSERT_EQ(stage0.size(), 2u);
  EXPECT_GT(stage0[1], 0.0);  // the output's (the final norm's and the projection's inputs, the logits)
  EXPECT_EQ(stage3, std::vector<double>(2, 0.0));
  // Every stage holds at most 2pp chunk passes (pp micro-batches of a whole stage), 1F1B's first stage's.
  for (int stage = 0; stage < 4; ++stage) {
    EXPECT_LE(parallel::peak_inflight_passes(zb, stage), 8);
    EXPECT_LE(parallel::memory_for_stage(model, zb, stage).layer_microbatches,
              parallel::memory_for_stage(model, one_f_one_b, 0).layer_microbatches);
  }
}

TEST_F(ZeroBubbleSim, ZbVRefusesOtherChunkCountsAndTiedEmbeddings) {
  const model::ModelSpec model = model::load_model(model_path_);
  parallel::Layout layout = pp4(parallel::Schedule::kZbV, 8);
  layout.virtual_stages = 4;  // 16 virtual stages of 2 layers: the partition holds, the V does not
  EXPECT_THROW(parallel::resolve_layout(model, layout), InputError);
  layout.virtual_stages = 1;
  EXPECT_THROW(parallel::resolve_layout(model, layout), InputError);
  EXPECT_THROW(parallel::resolve_layout(model::load_model("gpt3-175b"), pp4(parallel::Schedule::kZbV, 8)),
               InputError);
}

TEST_F(ZeroBubbleSim, ZbH1WithTensorParallelChecksClean) {
  const ClusterSpec h100 = load_cluster("h100-hgx");
  const SimResult zb = simulate_step(pp4(parallel::Schedule::kZbH1, 8, 2), h100);
  EXPECT_GT(zb.iteration_s, 0);
}

TEST_F(ZeroBubbleSim, DeferredWeightGradientsHoldActivationsUntilW) {
  const model::ModelSpec model = model::load_model(model_path_);
  for (int microbatches : {8, 16}) {
    const parallel::Layout one_f_one_b =
        parallel::resolve_layout(model, pp4(parallel::Schedule::k1F1B, microbatches));
    const parallel::Layout zb = parallel::resolve_layout(model, pp4(parallel::Schedule::kZbH1, microbatches));
    // Every stage now holds pp micro-batches at its peak, as 1F1B's first stage does; the peak is no higher.
    for (int stage = 0; stage < 4; ++stage) EXPECT_EQ(parallel::peak_inflight_passes(zb, stage), 4);
    EXPECT_EQ(parallel::memory_per_gpu(model, zb).inflight_microbatches,
              parallel::memory_per_gpu(model, one_f_one_b).inflight_microbatches);
  }
}

TEST_F(ZeroBubbleSim, ZbH1RefusesGradientReductionsBeforeItsWeightGradients) {
  const model::ModelSpec model = model::load_model(model_path_);
  parallel::Layout layout = pp4(parallel::Schedule::kZbH1, 8);
  layout.dp = 2;
  layout.global_batch = 16;
  layout.zero_stage = 2;
  EXPECT_THROW(parallel::resolve_layout(model, layout), InputError);
  layout.zero_stage = 1;
  layout.overlap_grad_reduce = true;
  EXPECT_THROW(parallel::resolve_layout(model, layout), InputError);
  layout.overlap_grad_reduce = false;
  EXPECT_NO_THROW(parallel::resolve_layout(model, layout));
}

}  // namespace
}  // namespace calo::sim
