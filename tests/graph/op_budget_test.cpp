// The op count a graph would have, known before it is built (graph::estimated_op_count), against the ops the
// builder emits, over schedules, recomputation, sharding, overlap, context and expert parallel; and the
// refusal of a graph beyond kMaxGraphOps before any of it is built.
#include "graph/op_budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "graph/graph.h"
#include "model/accounting.h"
#include "parallel/validate.h"

namespace calo::graph {
namespace {

struct Case {
  std::string model;
  parallel::Layout layout;
  bool sequence_parallel_explicit = false;  ///< keep layout.sequence_parallel (else on when tp > 1)
};

parallel::Layout layout_of(int tp, int pp, int dp, int microbatches) {
  parallel::Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.global_batch = dp * microbatches;
  return layout;
}

std::int64_t built_ops(const Graph& graph) {
  std::int64_t ops = 0;
  for (const RankProgram& program : graph.programs) ops += static_cast<std::int64_t>(program.ops.size());
  return ops;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int microbatches : {1, 3, 16}) {
    all.push_back({"llama3-8b", layout_of(1, 1, 1, microbatches)});
    all.push_back({"llama3-8b", layout_of(4, 4, 2, microbatches)});
    parallel::Layout gpipe = layout_of(2, 8, 1, microbatches);
    gpipe.schedule = parallel::Schedule::kGpipe;
    gpipe.recompute = parallel::Recompute::kFull;
    all.push_back({"llama3-8b", gpipe});
    parallel::Layout sharded = layout_of(2, 1, 8, microbatches);
    sharded.zero_stage = 3;
    sharded.overlap_param_gather = true;
    sharded.overlap_grad_reduce = true;
    all.push_back({"llama3-8b", sharded});
    parallel::Layout unfused = layout_of(4, 2, 2, microbatches);
    unfused.attention = parallel::AttentionImpl::kUnfused;
    unfused.recompute = parallel::Recompute::kSelective;
    unfused.sequence_parallel = false;
    all.push_back({"llama3-8b", unfused, true});
  }
  parallel::Layout interleaved = layout_of(2, 4, 1, 8);
  interleaved.schedule = parallel::Schedule::kInterleaved;
  interleaved.virtual_stages = 2;
  all.push_back({"llama3-8b", interleaved});
  parallel::Layout context = layout_of(2, 2, 2, 4);
  context.cp = 2;
  context.overlap_tp_comm = true;
  all.push_back({"llama3-8b", context});
  parallel::Layout experts = layout_of(1, 2, 4, 6);
  experts.ep = 4;
  all.push_back({"mixtral-8x7b", experts});
  all.push_back({"tiny-dense", layout_of(1, 4, 1, 5)});
  return all;
}

TEST(OpBudget, TheEstimateIsWithinTenPerCentOfTheOpsTheBuilderEmits) {
  for (const Case& item : cases()) {
    const model::ModelSpec model = model::load_model(item.model);
    const parallel::Layout layout =
        parallel::resolve_layout(model, item.layout, item.sequence_parallel_explicit);
    const std::int64_t built = built_ops(build_graph(model, layout));
    const std::int64_t estimated = estimated_op_count(model, layout);
    SCOPED_TRACE(parallel::describe(layout) + " of " + item.model);
    EXPECT_GE(estimated, built * 0.9) << "built " << built;
    EXPECT_LE(estimated, built * 1.1) << "built " << built;
  }
}

TEST(OpBudget, AGraphBeyondTheBudgetIsRefusedBeforeItIsBuiltNamingTheMicroBatchesAndTheFix) {
  // tiny-dense with 1024 layers at 16384 micro-batches: ~10^9 ops (over 100 GB) if built.
  model::ModelSpec model = model::load_model("tiny-dense");
  model.num_layers = 1024;
  parallel::Layout layout = layout_of(1, 1, 1, 16384);
  layout = parallel::resolve_layout(model, layout);
  const auto started = std::chrono::steady_clock::now();
  try {
    build_graph(model, layout);
    FAIL() << "a graph beyond the op budget was built";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("16384 micro-batches"), std::string::npos) << message;
    EXPECT_NE(message.find("raise --mbs or lower --gbs"), std::string::npos) << message;
    EXPECT_NE(message.find("1024 layers"), std::string::npos) << message;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 5.0) << "the refusal must come before the graph is built";
  // The largest layout under the budget is still built.
  layout = parallel::resolve_layout(model, layout_of(1, 1, 1, 8));
  EXPECT_LE(estimated_op_count(model, layout), kMaxGraphOps);
  EXPECT_GT(built_ops(build_graph(model, layout)), 0);
}

}  // namespace
}  // namespace calo::graph
