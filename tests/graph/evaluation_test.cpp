// The evaluation step (calo sim --eval): a training graph's forward passes alone, and what that leaves out.
#include <gtest/gtest.h>

#include "../common/pipeline_slice_graph.h"
#include "graph/graph.h"

namespace calo::graph {
namespace {

double total_model_flops(const Graph& graph) {
  double flops = 0;
  for (const RankProgram& program : graph.programs)
    for (const Op& op : program.ops) flops += model_flops(op);
  return flops;
}

TEST(EvaluationGraph, KeepsTheForwardPassesAndATrainingStepsThirdOfTheModelFlops) {
  const Graph training = calo::testing::pipeline_slice_graph(1);
  const Graph evaluation = evaluation_graph(training);
  std::size_t kept = 0, forward = 0;
  for (std::size_t index = 0; index < training.programs.size(); ++index) {
    for (const Op& op : training.programs[index].ops) forward += op.phase == Phase::kForward;
    for (const Op& op : evaluation.programs[index].ops) {
      EXPECT_EQ(op.phase, Phase::kForward) << describe(op);
      // ZeRO-1's parameter gathers belong to the optimizer step, not to an evaluation.
      EXPECT_NE(op.stream, Stream::kDpComm) << describe(op);
      ++kept;
    }
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, forward);  // the overlapped ZeRO-1 gathers of the next forward are gone
  // Backward runs each GEMM twice (dgrad, wgrad) and the attention core at twice its forward FLOPs: a
  // forward pass is a third of a training step's model FLOPs.
  EXPECT_NEAR(total_model_flops(evaluation), total_model_flops(training) / 3,
              1e-9 * total_model_flops(training));
}

TEST(EvaluationGraph, KeepsFsdpGathersAndEveryDependencyPointsAtAKeptEarlierOp) {
  const Graph evaluation = evaluation_graph(calo::testing::pipeline_slice_graph(3));
  int gathers = 0;
  for (const RankProgram& program : evaluation.programs) {
    for (std::size_t index = 0; index < program.ops.size(); ++index) {
      const Op& op = program.ops[index];
      gathers += op.stream == Stream::kDpComm && op.collective == CollectiveKind::kAllGather;
      for (std::int32_t dep : program.deps_of(index)) {
        EXPECT_GE(dep, 0);
        EXPECT_LT(static_cast<std::size_t>(dep), index) << describe(op);
      }
    }
  }
  EXPECT_GT(gathers, 0) << "FSDP gathers a unit's parameters for every forward, evaluation included";
}

}  // namespace
}  // namespace calo::graph
