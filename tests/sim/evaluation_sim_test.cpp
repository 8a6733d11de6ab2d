// The evaluation step simulated: the engine runs a training graph's forward passes alone without deadlock,
// and `calo sim --eval` prints and stores it as an evaluation step.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../common/run_calo.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "sim/cluster.h"
#include "sim/simulate.h"

namespace calo::sim {
namespace {

using calo::testing::run_calo_text_and_json;

/// Llama3-8B, 4 layers, seq 1024 on 8 ranks: TP2, interleaved PP2 (2 chunks), DP2 with ZeRO-1, overlapped.
graph::Graph training_graph() {
  const model::ModelSpec model = model::slice_model(model::load_model("llama3-8b"), 4);
  parallel::Layout layout;
  layout.tp = layout.pp = layout.dp = 2;
  layout.virtual_stages = 2;
  layout.schedule = parallel::Schedule::kInterleaved;
  layout.zero_stage = 1;
  layout.micro_batch = 1;
  layout.global_batch = 8;
  layout.seq_length = 1024;
  layout.overlap_tp_comm = layout.overlap_grad_reduce = layout.overlap_param_gather = true;
  return graph::build_graph(model, parallel::resolve_layout(model, layout));
}

TEST(EvaluationSim, TheForwardPassesAloneRunInATenthToAHalfOfTheTrainingStep) {
  const graph::Graph training = training_graph();
  const ClusterSpec cluster = load_cluster("h100-hgx");
  const SimResult train = simulate(training, cluster, {});
  const SimResult eval = simulate(graph::evaluation_graph(training), cluster, {});
  // A forward pass is a third of the model FLOPs (tests/graph/evaluation_test.cpp); the logits, bubbles and
  // the wait for the pipeline's first stage keep an evaluation step between these bounds on this small slice.
  EXPECT_GT(eval.iteration_s, 0.1 * train.iteration_s);
  EXPECT_LT(eval.iteration_s, 0.5 * train.iteration_s);
  ASSERT_FALSE(eval.step_results.empty());
  EXPECT_GT(eval.step_results.back().energy_j, 0);
}

TEST(EvaluationSim, CaloSimEvalSaysItIsAnEvaluationStepInTextAndJson) {
  const std::string job =
      "sim --model llama3-8b --layers 4 --cluster h100-hgx --gpus 8 --tp 2 --pp 2 --seq 1024 --gbs 8 "
      "--no-store";
  const auto eval = run_calo_text_and_json(job + " --eval");
  ASSERT_FALSE(eval.json.is_null()) << eval.text.output;
  EXPECT_EQ(eval.json["step"], "evaluation");
  EXPECT_NE(eval.text.output.find("# evaluation step: the forward passes of the global batch"),
            std::string::npos)
      << eval.text.output;
  const auto train = run_calo_text_and_json(job);
  ASSERT_FALSE(train.json.is_null()) << train.text.output;
  EXPECT_EQ(train.json["step"], "training");
  EXPECT_LT(eval.json["iteration_s"].get<double>(), train.json["iteration_s"].get<double>());
}

}  // namespace
}  // namespace calo::sim
