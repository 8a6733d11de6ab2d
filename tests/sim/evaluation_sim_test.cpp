// The evaluation step simulated: the engine runs a training graph's forward passes alone without deadlock,
// and `calo sim --eval` prints and stores it as an evaluation step.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../common/pipeline_slice_graph.h"
#include "../common/run_calo.h"
#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/simulate.h"

namespace calo::sim {
namespace {

using calo::testing::run_calo_text_and_json;

TEST(EvaluationSim, TheForwardPassesAloneRunInATenthToAHalfOfTheTrainingStep) {
  const graph::Graph training = calo::testing::pipeline_slice_graph(1);
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
