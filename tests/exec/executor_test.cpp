// Executor + CPU backend in one process (world size 1): every op runs, counts match the graph, --check
// verifies, injected wrong results are caught, streams and events order cross-stream dependencies.
#include "exec/executor.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "exec/backend.h"
#include "exec/bootstrap.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::exec {
namespace {

struct SingleRun {
  OpCounts executed{};
  OpCounts per_step{};
  CheckReport check;
  std::vector<StepTiming> steps;
  std::int64_t cross_waits = 0;
};

SingleRun run_single(const std::string& model_name, parallel::Layout layout, bool check, int steps,
                     bool trace = false) {
  const model::ModelSpec spec = model::load_model(model_name);
  layout = parallel::resolve_layout(spec, layout);
  const graph::Graph graph = graph::build_graph(spec, layout);
  BackendConfig config;
  config.check = check;
  auto backend = BackendRegistry::instance().select("cpu").create(config);
  LaunchInfo launch;
  auto bootstrap = make_bootstrap(launch);
  backend->connect(graph, 0, *bootstrap);
  SingleRun run;
  {
    ExecutorOptions options;
    options.trace_ops = trace;
    Executor executor(*backend, graph, 0, options);
    executor.prepare();
    for (int step = 0; step < steps; ++step) run.steps.push_back(executor.run_step(*bootstrap));
    run.per_step = executor.ops_per_step();
    run.cross_waits = executor.cross_stream_waits();
  }
  run.executed = backend->executed_op_counts();
  run.check = backend->check_report();
  return run;
}

TEST(Executor, RunsEveryOpOfTheGraphEachStep) {
  const SingleRun run = run_single("tiny-dense", parallel::Layout{}, false, 3);
  for (int kind = 0; kind < graph::kNumOpKinds; ++kind) {
    EXPECT_EQ(run.executed[static_cast<size_t>(kind)], 3 * run.per_step[static_cast<size_t>(kind)])
        << op_count_name(kind);
  }
  EXPECT_GT(run.per_step[static_cast<size_t>(graph::OpKind::kGemm)], 0);
  EXPECT_GT(run.per_step[static_cast<size_t>(graph::OpKind::kAttention)], 0);
  EXPECT_EQ(run.per_step[static_cast<size_t>(graph::OpKind::kOptimizer)], 1);
  for (const auto& step : run.steps) EXPECT_GT(step.duration_ns(), 0);
}

TEST(Executor, CheckVerifiesGemmsAttentionElementwiseAndOptimizer) {
  const SingleRun run = run_single("tiny-dense", parallel::Layout{}, true, 1);
  EXPECT_EQ(run.check.wrong, 0) << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
  const auto per_step = run.per_step;
  const std::int64_t verifiable = per_step[static_cast<size_t>(graph::OpKind::kGemm)] +
                                  per_step[static_cast<size_t>(graph::OpKind::kAttention)] +
                                  per_step[static_cast<size_t>(graph::OpKind::kElementwise)] +
                                  per_step[static_cast<size_t>(graph::OpKind::kOptimizer)];
  EXPECT_EQ(run.check.ops_checked, verifiable);
  EXPECT_GT(run.check.values_checked, verifiable);
}

TEST(Executor, RecomputationReexecutesForwardOps) {
  parallel::Layout full;
  full.recompute = parallel::Recompute::kFull;
  const SingleRun plain = run_single("tiny-dense", parallel::Layout{}, false, 1);
  const SingleRun recomputed = run_single("tiny-dense", full, false, 1);
  EXPECT_GT(recomputed.executed[static_cast<size_t>(graph::OpKind::kGemm)],
            plain.executed[static_cast<size_t>(graph::OpKind::kGemm)]);
  EXPECT_GT(recomputed.executed[static_cast<size_t>(graph::OpKind::kAttention)],
            plain.executed[static_cast<size_t>(graph::OpKind::kAttention)]);
}

TEST(Executor, TraceOpsTimesEveryOpInsideItsStep) {
  const SingleRun run = run_single("tiny-moe", parallel::Layout{}, false, 2, /*trace=*/true);
  for (const auto& step : run.steps) {
    std::int64_t total_ops = 0;
    for (auto count : run.per_step) total_ops += count;
    ASSERT_EQ(static_cast<std::int64_t>(step.ops.size()), total_ops);
    for (const auto& op : step.ops) {
      EXPECT_LE(op.begin_ns, op.end_ns);
      EXPECT_GE(op.begin_ns, step.begin_ns);
      EXPECT_LE(op.end_ns, step.end_ns);
    }
  }
}

class InjectedFault : public ::testing::TestWithParam<const char*> {};

TEST_P(InjectedFault, CheckCountsWrongResults) {
  ::setenv("CALO_CPU_INJECT_FAULT", GetParam(), 1);
  const SingleRun run = run_single("tiny-dense", parallel::Layout{}, true, 1);
  ::unsetenv("CALO_CPU_INJECT_FAULT");
  EXPECT_GT(run.check.wrong, 0) << GetParam();
  ASSERT_FALSE(run.check.first_failures.empty());
}

INSTANTIATE_TEST_SUITE_P(Kinds, InjectedFault,
                         ::testing::Values("gemm", "attention", "elementwise", "optimizer"));

}  // namespace
}  // namespace calo::exec
