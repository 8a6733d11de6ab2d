// A simulation stored as a run of kind "sim" reads back through the real run store.
#include "sim/store_run.h"

#include <gtest/gtest.h>

#include "sim/simulate.h"
#include "sim_test_util.h"
#include "store/run_store.h"

namespace calo::sim {
namespace {

TEST(StoreRun, SimulationIsARunOfKindSim) {
  const auto dir = calo::sim::testing::temp_dir("store");
  parallel::Layout layout;
  layout.tp = 2;
  layout.dp = 2;
  layout.micro_batch = 1;
  layout.global_batch = 4;
  const graph::Graph graph = calo::sim::testing::make_graph("tiny-dense", layout);
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  SimOptions options;
  options.steps = 3;
  options.record_timeline = true;
  const SimResult result = simulate(graph, cluster, options);
  store_sim_run(dir / "run", "sim-test", "calo sim test", {{"steps", 3}}, graph, cluster, result);
  store::RunReader reader(dir / "run");
  EXPECT_EQ(reader.run().kind, store::RunKind::kSim);
  EXPECT_EQ(reader.devices().size(), 4u);
  EXPECT_EQ(reader.spans(store::SpanKind::kStep).size(), 3u);
  EXPECT_EQ(reader.spans(store::SpanKind::kOp).size(), 4u * graph.program(0).ops.size());
  const auto temp = reader.find_metric("temp_gpu_c");
  ASSERT_TRUE(temp.has_value());
  EXPECT_EQ(reader.samples(1, temp->id).size(), 3u);
  bool found_iteration = false;
  for (const auto& row : reader.summaries("run")) {
    if (row.key == "iteration_s") {
      EXPECT_DOUBLE_EQ(row.value, result.iteration_s);
      found_iteration = true;
    }
  }
  EXPECT_TRUE(found_iteration);
}

}  // namespace
}  // namespace calo::sim
