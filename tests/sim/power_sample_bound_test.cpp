// The power-sample bound of a simulation (issue 67 item 3): estimated from the graph before any step, GPUs
// alike counted once, and refused beyond SimOptions::max_power_samples with the figure and the flag.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

/// tiny-dense TP1-PP2-DP4 on 8 GPUs of one node: 2 programs x 8 slots, 8 distinct GPUs.
graph::Graph tiny_pipeline() {
  parallel::Layout layout;
  layout.pp = 2;
  layout.dp = 4;
  layout.global_batch = 8;
  return testing::make_graph("tiny-dense", layout);
}

TEST(PowerSampleBound, GpusAlikeShareTracesAndASlowCardMultipliesTheSamples) {
  const graph::Graph graph = tiny_pipeline();
  ClusterSpec cluster = load_cluster("h100-hgx");
  SimOptions options;
  options.steps = 3;
  const PowerSampleWork fast = estimated_power_samples(graph, cluster, options);
  EXPECT_EQ(fast.gpu_classes, 8);  // each rank its own node slot
  EXPECT_GE(fast.samples_per_gpu_step, 1.0);
  EXPECT_DOUBLE_EQ(fast.power_samples, fast.samples_per_gpu_step * 8 * 3);
  cluster.gpu.peak_bf16_flops /= 1e6;  // 0.001 TFLOP/s: every compute op is FLOP-bound and 1e6 x longer
  const PowerSampleWork slow = estimated_power_samples(graph, cluster, options);
  EXPECT_GT(slow.step_floor_s, 1e4 * fast.step_floor_s);
  // One sample per driver window of the step (20 ms), for each of the 8 distinct GPUs and 3 steps.
  EXPECT_DOUBLE_EQ(slow.samples_per_gpu_step, slow.step_floor_s / cluster.gpu.power_control.sample_window_s);
  EXPECT_GT(slow.power_samples, 100 * fast.power_samples);
}

TEST(PowerSampleBound, BeyondTheLimitTheSimulationIsRefusedBeforeAnyStep) {
  const graph::Graph graph = tiny_pipeline();
  const ClusterSpec cluster = load_cluster("h100-hgx");
  SimOptions options;
  options.max_power_samples = 1;  // below any simulation's samples
  try {
    simulate(graph, cluster, options);
    FAIL() << "simulated beyond --max-power-samples 1";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("8 GPUs of distinct heat x 1 steps"), std::string::npos) << message;
    EXPECT_NE(message.find("--max-power-samples"), std::string::npos) << message;
  }
  options.max_power_samples = 0;  // no limit
  EXPECT_NO_THROW(simulate(graph, cluster, options));
}

}  // namespace
}  // namespace calo::sim
