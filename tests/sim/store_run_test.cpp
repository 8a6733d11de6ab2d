// A simulation stored as a run of kind "sim" reads back through the real run store.
#include "sim/store_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

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

// Issue 66 item 5: a 64-GPU run stays small. Three steps of Llama3-70B TP8-PP8 hold ~700 k power-trace
// windows; the store keeps at most 500 k by merging windows (time-weighted means), so each GPU's stored power
// still integrates to its stored energy counter, and no op span is kept unless asked.
TEST(StoreRun, ALargeRunMergesTraceWindowsAndItsPowerStillIntegratesToItsEnergy) {
  const auto dir = calo::sim::testing::temp_dir("store-large");
  parallel::Layout layout;
  layout.tp = 8;
  layout.pp = 8;
  layout.dp = 1;
  layout.micro_batch = 1;
  layout.global_batch = 512;
  const graph::Graph graph = calo::sim::testing::make_graph("llama3-70b", layout);
  const ClusterSpec cluster = load_cluster("h100-hgx-calibrated");
  SimOptions options;
  options.steps = 3;
  const SimResult result = simulate(graph, cluster, options);
  std::size_t windows = 0;
  for (std::size_t index = 0; index < result.trace_of.size(); ++index)
    windows += result.power_traces[result.trace_of[index]]->sample_w.size();
  ASSERT_GT(windows, 500'000u) << "the case must exceed the store's budget to test the merge";
  store_sim_run(dir / "run", "sim-large", "calo sim test", {{"steps", 3}}, graph, cluster, result);
  store::RunReader reader(dir / "run");
  EXPECT_TRUE(reader.spans(store::SpanKind::kOp).empty());
  const auto sampled = reader.find_metric("power_sampled_w");
  const auto energy = reader.find_metric("energy_j");
  ASSERT_TRUE(sampled.has_value() && energy.has_value());
  std::size_t stored = 0;
  for (int rank : {0, 17, 63}) {
    const auto power = reader.samples(rank, sampled->id);
    const auto counter = reader.samples(rank, energy->id);
    ASSERT_FALSE(power.empty());
    stored += power.size();
    double integral_j = 0;
    std::int64_t begin_ns = 0;
    for (const auto& sample : power) {  // each sample: the mean power since the previous one's time
      integral_j += sample.value * static_cast<double>(sample.t_ns - begin_ns) * 1e-9;
      begin_ns = sample.t_ns;
      // Stored at the traces' float precision: no last-bit noise for a swing to read (issue 64).
      ASSERT_EQ(sample.value, static_cast<double>(static_cast<float>(sample.value))) << "rank " << rank;
    }
    // A 100 ms swing is a difference of two samples within 100 ms: none is float noise (it read 5.7e-14 W
    // on 8192 GPUs whose merged samples were equal but for their last bits).
    for (std::size_t first = 0; first < power.size(); ++first) {
      for (std::size_t second = first + 1;
           second < power.size() && power[second].t_ns - power[first].t_ns <= 100'000'000; ++second) {
        const double swing_w = std::fabs(power[second].value - power[first].value);
        EXPECT_TRUE(swing_w == 0 || swing_w > 1e-4) << "rank " << rank << ": " << swing_w << " W";
      }
    }
    EXPECT_NEAR(integral_j, counter.back().value, 1e-4 * counter.back().value) << "rank " << rank;
  }
  EXPECT_LE(stored / 3 * 64, 500'000u);  // three of 64 alike GPUs
  EXPECT_LT(std::filesystem::file_size(dir / "run" / "run.db"), 20u << 20);
}

}  // namespace
}  // namespace calo::sim
