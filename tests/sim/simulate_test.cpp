// The engine and the multi-step driver on real graphs: closed forms (pipeline bubble, data-parallel step),
// power cap and heat invariants, and the study's qualitative findings (hot GPU stragglers, micro-batch
// bursts).
#include "sim/simulate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <regex>

#include "core/error.h"
#include "sim/cost_model.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

/// A compute-bound dense model whose stages are uniform (tiny vocabulary: embedding and logits are
/// negligible).
constexpr const char* kUniformModel =
    "name: uniform-test\n"
    "num_layers: 8\n"
    "hidden_size: 1024\n"
    "ffn_hidden_size: 4096\n"
    "num_attention_heads: 16\n"
    "num_kv_heads: 16\n"
    "vocab_size: 128\n"
    "seq_length: 2048\n"
    "activation: gelu\n"
    "norm: layernorm\n"
    "position_embedding: rope\n";

class SimulateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    model_path_ = testing::write_file(dir_ / "uniform.yaml", kUniformModel);
    ideal_ = load_cluster(testing::write_file(dir_ / "ideal.yaml", testing::ideal_cluster_yaml(8)));
  }
  parallel::Layout layout(int tp, int pp, int dp, int micro_batch, int global_batch) const {
    parallel::Layout result;
    result.tp = tp;
    result.pp = pp;
    result.dp = dp;
    result.micro_batch = micro_batch;
    result.global_batch = global_batch;
    return result;
  }
  ClusterSpec fast_thermal_cluster() const;
  std::filesystem::path dir_;
  std::string model_path_;
  ClusterSpec ideal_;
};

TEST_F(SimulateTest, PipelineBubbleMatchesTheClosedForm) {
  for (int microbatches : {4, 8, 16}) {
    const int pp = 4;
    const graph::Graph graph = testing::make_graph(model_path_, layout(1, pp, 1, 2, 2 * microbatches));
    SimOptions options;
    options.power_cap = false;
    options.thermal = false;
    const SimResult result = simulate(graph, ideal_, options);
    const double bubble = 1.0 - result.compute_busy_s / result.iteration_s;
    const double expected = (pp - 1.0) / (microbatches + pp - 1.0);
    EXPECT_NEAR(bubble, expected, 0.02) << "m=" << microbatches;
    EXPECT_EQ(result.step_results[0].replica_classes, 1);
  }
}

TEST_F(SimulateTest, DataParallelStepIsComputePlusExposedAllReduce) {
  const ClusterSpec cluster = load_cluster("h200-hgx");
  const graph::Graph graph = testing::make_graph(model_path_, layout(1, 1, 8, 1, 8));
  SimOptions options;
  options.power_cap = false;
  options.thermal = false;
  const SimResult result = simulate(graph, cluster, options);
  // Closed form: every gradient all-reduce of the DP group, back to back after the backward pass.
  double all_reduce_s = 0;
  const auto& program = graph.program(0);
  const auto& group = graph.groups[graph.group_id(0, graph::GroupKind::kDp)];
  const GroupPlacement placement = place_group(cluster, group.ranks);
  for (const auto& op : program.ops) {
    if (op.kind == graph::OpKind::kCollective && op.group == graph::GroupKind::kDp) {
      all_reduce_s += collective_time_s(cluster, op.collective, op.bytes, placement);
    }
  }
  ASSERT_GT(all_reduce_s, 0);
  const double dp = static_cast<int>(graph::GroupKind::kDp);
  EXPECT_NEAR(result.iteration_s, result.compute_busy_s + all_reduce_s, 1e-9 + 1e-6 * result.iteration_s);
  EXPECT_NEAR(result.exposed_comm_s[static_cast<int>(dp)], all_reduce_s, 1e-6 * result.iteration_s);
  // Overlapping the gradient reduction with backward hides part of it.
  parallel::Layout overlapped = layout(1, 1, 8, 1, 8);
  overlapped.overlap_grad_reduce = true;
  const SimResult hidden = simulate(testing::make_graph(model_path_, overlapped), cluster, options);
  EXPECT_LT(hidden.iteration_s, result.iteration_s);
}

TEST_F(SimulateTest, PowerNeverExceedsTheCapInSteadyState) {
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  const graph::Graph graph = testing::make_graph(model_path_, layout(2, 1, 2, 4, 16));
  SimOptions options;
  options.steps = 5;
  const SimResult result = simulate(graph, cluster, options);
  int throttled = 0;
  for (int step = 0; step < options.steps; ++step) {
    for (int rank = 0; rank < result.world; ++rank) {
      const std::size_t index = static_cast<std::size_t>(step) * result.world + rank;
      EXPECT_LE(result.power_w[index], cluster.gpu.power_limit_w + 1e-9)
          << "step " << step << " rank " << rank;
      throttled += result.clock_mhz[index] < cluster.gpu.max_sm_mhz;
    }
  }
  EXPECT_GT(throttled, 0) << "the cap must bind for this test to mean anything";
  // Without the cap the same job draws more than the limit while busy, and its power samples peak higher.
  options.power_cap = false;
  const SimResult uncapped = simulate(graph, cluster, options);
  EXPECT_LT(uncapped.iteration_s, result.iteration_s);
  EXPECT_GT(uncapped.gpus[0].mean_power_w, result.gpus[0].mean_power_w);
  EXPECT_GT(uncapped.gpus[0].peak_power_w, result.gpus[0].peak_power_w);
}

/// Four GPUs whose die settles within a microsecond: inlet 30 C + slot offsets 0..3, 0.05 K/W die to air.
ClusterSpec SimulateTest::fast_thermal_cluster() const {
  std::string text = testing::ideal_cluster_yaml(4);
  text.replace(
      text.find("  efficiency:"), 0,
      "  thermal: {r_die_k_per_w: 0.03, r_sink_k_per_w: 0.02, tau_die_s: 1.0e-6, tau_sink_s: 1.0e-6}\n");
  text.replace(text.find("  nvlink_latency_us: 0\n"), 0,
               "  inlet_c: 30\n  slot_inlet_offset_c: [0, 1, 2, 3]\n");
  return load_cluster(testing::write_file(dir_ / "fast-thermal.yaml", text));
}

TEST_F(SimulateTest, SteadyStateTemperatureIsInletPlusPowerTimesResistance) {
  const ClusterSpec cluster = fast_thermal_cluster();
  const graph::Graph graph = testing::make_graph(model_path_, layout(1, 2, 2, 2, 8));
  SimOptions options;
  options.steps = 3;
  const SimResult result = simulate(graph, cluster, options);
  for (int rank = 0; rank < result.world; ++rank) {
    const std::size_t index = static_cast<std::size_t>(options.steps - 1) * result.world + rank;
    const double expected = 30 + (rank % 4) + result.power_w[index] * 0.05;
    EXPECT_NEAR(result.die_c[index], expected, 1e-4) << "rank " << rank;
  }
}

TEST_F(SimulateTest, SlotOfRankMovesAGpuIntoAnotherSlotsAir) {
  const ClusterSpec cluster = fast_thermal_cluster();
  const graph::Graph graph = testing::make_graph(model_path_, layout(1, 2, 2, 2, 8));
  SimOptions options;
  options.steps = 2;
  options.slot_of_rank = {3, 2, 1, 0};
  const SimResult result = simulate(graph, cluster, options);
  for (int rank = 0; rank < result.world; ++rank) {
    const std::size_t index = static_cast<std::size_t>(options.steps - 1) * result.world + rank;
    EXPECT_NEAR(result.die_c[index], 30 + (3 - rank) + result.power_w[index] * 0.05, 1e-4) << "rank " << rank;
    EXPECT_EQ(result.gpus[rank].slot, 3 - rank);
  }
  options.slot_of_rank = {0, 1, 2, 4};
  EXPECT_THROW(simulate(graph, cluster, options), InputError);
}

TEST_F(SimulateTest, AHotterGpuLeaksMoreAndHoldsTheCapAtALowerClock) {
  // h200-hgx: 0.7 W more static power per degree above 58 C (fitted to the 4 x H200 fixture). Two
  // data-parallel GPUs under the cap; one breathes 15 C hotter air. Without leakage heat below the slowdown
  // costs nothing.
  ClusterSpec cluster = load_cluster("h200-hgx");
  parallel::Layout heavy = layout(1, 1, 2, 4, 16);
  heavy.seq_length = 4096;
  const graph::Graph graph = testing::make_graph("llama3-8b", heavy);
  SimOptions options;
  options.steps = 12;
  options.inlet_offset_c = {0, 15};
  const SimResult leaky = simulate(graph, cluster, options);
  cluster.gpu.thermal.leakage_w_per_c = 0;
  const SimResult ideal = simulate(graph, cluster, options);
  const std::size_t last = static_cast<std::size_t>(options.steps - 1) * 2;
  EXPECT_GT(leaky.die_c[last + 1], cluster.gpu.thermal.leakage_ref_c + 5);
  EXPECT_EQ(ideal.clock_mhz[last + 1], ideal.clock_mhz[last]) << "no leakage: heat below slowdown is free";
  EXPECT_LT(leaky.clock_mhz[last + 1], leaky.clock_mhz[last])
      << "the hot GPU leaks more: lower clock at the cap";
  EXPECT_GT(leaky.iteration_s, ideal.iteration_s);
  EXPECT_EQ(leaky.gpus[1].throttle_thermal_s, 0) << "below the thermal slowdown";
}

TEST_F(SimulateTest, HotGpuStragglesItsPipelineAndItsDataParallelGroup) {
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  const graph::Graph graph = testing::make_graph(model_path_, layout(1, 2, 2, 4, 32));
  SimOptions options;
  options.steps = 200;  // ~6 s: several die time constants, enough for the hot die to reach its slowdown
  const SimResult cool = simulate(graph, cluster, options);
  options.inlet_offset_c = {0, 0, 0, 50};  // rank 3 (stage 1, replica 1) breathes 50 C hotter air
  const SimResult hot = simulate(graph, cluster, options);
  const int last = options.steps - 1;
  auto clock_of = [&](const SimResult& result, int rank) {
    return result.clock_mhz[last * result.world + rank];
  };
  EXPECT_LT(clock_of(hot, 3), clock_of(cool, 3) - 100) << "the hot GPU must throttle thermally";
  EXPECT_GT(hot.gpus[3].throttle_thermal_s, 0);
  for (int rank : {0, 1, 2}) EXPECT_EQ(clock_of(hot, rank), clock_of(cool, rank)) << rank;
  EXPECT_GT(hot.iteration_s, cool.iteration_s * 1.05);  // everyone's step is longer
  // Rank 2 (its pipeline peer) and rank 1 (its data-parallel peer) wait: they draw less power on average.
  for (int rank : {1, 2}) EXPECT_LT(hot.gpus[rank].mean_power_w, cool.gpus[rank].mean_power_w) << rank;
  EXPECT_EQ(hot.step_results[last].replica_classes, 2);
}

TEST_F(SimulateTest, SlowGpuAnywhereInTheGroupCostsTheSame) {
  const ClusterSpec cluster = load_cluster("h200-hgx");
  const graph::Graph graph = testing::make_graph(model_path_, layout(2, 2, 4, 1, 16));
  SimOptions options;
  const SimResult nominal = simulate(graph, cluster, options);
  EXPECT_EQ(nominal.step_results[0].replica_classes, 1);
  std::vector<double> speed(16, 1.0);
  speed[0] = 0.8;
  options.speed_factors = speed;
  const SimResult first = simulate(graph, cluster, options);
  speed[0] = 1.0;
  speed[6] = 0.8;  // same stage (0), another replica (3)
  options.speed_factors = speed;
  const SimResult last = simulate(graph, cluster, options);
  EXPECT_EQ(first.step_results[0].replica_classes, 2);
  EXPECT_GT(first.iteration_s, nominal.iteration_s * 1.1);
  EXPECT_NEAR(first.iteration_s, last.iteration_s, 1e-3 * nominal.iteration_s);
  options.speed_factors.assign(16, 0.9);  // everyone slow: one class again
  EXPECT_EQ(simulate(graph, cluster, options).step_results[0].replica_classes, 1);
}

TEST_F(SimulateTest, LargerMicroBatchesRaisePeakPower) {
  const ClusterSpec cluster = load_cluster("h200x4-nvswitch");
  double previous_peak = 0;
  for (int micro_batch : {1, 4}) {
    // Short sequences make small micro-batches run skinny, inefficient GEMMs.
    parallel::Layout small = layout(1, 1, 4, micro_batch, 16);
    small.seq_length = 256;
    const SimResult result = simulate(testing::make_graph(model_path_, small), cluster, {});
    double peak = 0;
    for (const auto& gpu : result.gpus) peak = std::max(peak, gpu.peak_power_w);
    EXPECT_GT(peak, previous_peak + 10) << "mbs " << micro_batch;
    previous_peak = peak;
  }
}

TEST_F(SimulateTest, RejectsOptionsThatDoNotFitTheGraph) {
  const graph::Graph graph = testing::make_graph(model_path_, layout(1, 1, 2, 1, 2));
  SimOptions options;
  options.speed_factors = {1.0, 1.0, 1.0};
  EXPECT_THROW(simulate(graph, ideal_, options), InputError);
  options.speed_factors = {1.0, -1.0};
  EXPECT_THROW(simulate(graph, ideal_, options), InputError);
  options.speed_factors.clear();
  options.steps = 0;
  EXPECT_THROW(simulate(graph, ideal_, options), InputError);
}

}  // namespace
}  // namespace calo::sim

namespace calo::sim {
namespace {

struct LayoutCase {
  const char* model;
  int tp, pp, dp, ep, micro_batch, global_batch, zero, virtual_stages;
  parallel::Schedule schedule;
  parallel::Recompute recompute;
  bool overlap;
};

TEST(SimulateLayouts, EveryLayoutKindRunsWithoutDeadlock) {
  using parallel::Recompute;
  using parallel::Schedule;
  const ClusterSpec cluster = load_cluster("h200-hgx");
  const std::vector<LayoutCase> cases = {
      {"tiny-dense", 2, 2, 2, 1, 1, 8, 0, 1, Schedule::k1F1B, Recompute::kNone, false},
      {"tiny-dense", 1, 2, 2, 1, 1, 8, 0, 2, Schedule::kInterleaved, Recompute::kNone, false},
      {"tiny-dense", 1, 4, 1, 1, 1, 8, 0, 1, Schedule::kGpipe, Recompute::kFull, false},
      {"tiny-dense", 2, 1, 4, 1, 2, 16, 1, 1, Schedule::k1F1B, Recompute::kSelective, true},
      {"tiny-dense", 1, 1, 8, 1, 1, 8, 3, 1, Schedule::k1F1B, Recompute::kNone, true},
      {"tiny-moe", 1, 2, 4, 2, 1, 8, 0, 1, Schedule::k1F1B, Recompute::kNone, false},
      {"tiny-moe", 2, 1, 4, 4, 1, 8, 1, 1, Schedule::k1F1B, Recompute::kNone, true},
  };
  for (const auto& item : cases) {
    parallel::Layout layout;
    layout.tp = item.tp;
    layout.pp = item.pp;
    layout.dp = item.dp;
    layout.ep = item.ep;
    layout.micro_batch = item.micro_batch;
    layout.global_batch = item.global_batch;
    layout.zero_stage = item.zero;
    layout.virtual_stages = item.virtual_stages;
    layout.schedule = item.schedule;
    layout.recompute = item.recompute;
    layout.overlap_tp_comm = layout.overlap_grad_reduce = item.overlap;
    layout.overlap_param_gather = item.overlap && item.zero >= 1;
    const graph::Graph graph = testing::make_graph(item.model, layout);
    SimOptions options;
    options.steps = 2;
    options.record_timeline = true;
    const SimResult result = simulate(graph, cluster, options);
    const std::string label = parallel::describe(graph.layout);
    EXPECT_GT(result.iteration_s, 0) << label;
    EXPECT_GE(result.iteration_s + 1e-12, result.compute_busy_s) << label;
    EXPECT_EQ(result.step_results.back().replica_classes, 1) << label;
    // Every op of every rank ran, inside the step, and no op ends before it begins.
    for (int rank = 0; rank < result.world; ++rank) {
      ASSERT_EQ(result.timeline[rank].size(), graph.program(rank).ops.size()) << label;
      for (const auto& span : result.timeline[rank]) {
        EXPECT_LE(span.begin_s, span.end_s + 1e-15) << label;
        EXPECT_LE(span.end_s, result.last_iteration_s + 1e-12) << label;
      }
    }
  }
}

}  // namespace
}  // namespace calo::sim

namespace calo::sim {
namespace {

/// A GPT-style 39B model (Narayanan et al. 2021, Table 1: 48 layers, hidden 8192, 64 heads), from the GPT-3
/// preset.
std::string gpt_39b_path() {
  const auto dir = testing::temp_dir("gpt39b");
  std::ifstream preset(std::string(CALO_SOURCE_DIR) + "/data/models/gpt3-175b.yaml");
  std::string text((std::istreambuf_iterator<char>(preset)), std::istreambuf_iterator<char>());
  for (const auto& [pattern, value] : std::vector<std::pair<std::string, std::string>>{
           {"name: *\\S+", "name: gpt-39b"},
           {"num_layers: *[0-9]+", "num_layers: 48"},
           {"hidden_size: *[0-9]+", "hidden_size: 8192"},
           {"ffn_hidden_size: *[0-9]+", "ffn_hidden_size: 32768"},
           {"num_attention_heads: *[0-9]+", "num_attention_heads: 64"},
           {"num_kv_heads: *[0-9]+", "num_kv_heads: 64"}}) {
    text = std::regex_replace(text, std::regex(pattern), value);
  }
  return testing::write_file(dir / "gpt-39b.yaml", text);
}

void expect_exposed_within_transferred(const SimResult& result, const std::string& label) {
  for (int klass = 0; klass < kNumCommClasses; ++klass) {
    EXPECT_LE(result.exposed_comm_s[klass], result.comm_transfer_s[klass] + 1e-9)
        << label << ": class " << comm_class_name(klass);
  }
}

TEST(ExposedCommunication, EachIntervalCountsForTheTransferThatRanThen) {
  // Issue 13 item 8: a DP reduce-scatter run that ends in the small tied-embedding all-reduce was all counted
  // as embedding time (0.2405 s exposed of 0.0050 s transferred; DP 0.0000 of 0.4694 s).
  parallel::Layout layout;
  layout.tp = 8;
  layout.pp = 2;
  layout.dp = 32;
  layout.global_batch = 1536;
  layout.recompute = parallel::Recompute::kFull;
  const SimResult result =
      simulate(testing::make_graph(gpt_39b_path(), layout), load_cluster("a100-dgx"), SimOptions{});
  expect_exposed_within_transferred(result, "gpt-39b tp8 pp2 dp32");
  const auto index_of = [](const char* name) {
    for (int klass = 0; klass < kNumCommClasses; ++klass) {
      if (std::string(comm_class_name(klass)) == name) return klass;
    }
    return -1;
  };
  EXPECT_GT(result.exposed_comm_s[index_of("dp")], 0.1);
}

TEST(ExposedCommunication, NeverExceedsWhatWasTransferredOnAnyLayout) {
  for (const char* model : {"tiny-dense", "tiny-moe"}) {
    for (int tp : {1, 2}) {
      for (int pp : {1, 2}) {
        for (bool overlap : {false, true}) {
          parallel::Layout layout;
          layout.tp = tp;
          layout.pp = pp;
          layout.dp = 8 / (tp * pp);
          layout.ep = std::string(model) == "tiny-moe" ? 2 : 1;
          layout.global_batch = 4 * layout.dp;
          layout.overlap_tp_comm = layout.overlap_grad_reduce = overlap;
          const SimResult result =
              simulate(testing::make_graph(model, layout), load_cluster("h200-hgx"), SimOptions{});
          expect_exposed_within_transferred(
              result, fmt::format("{} tp{} pp{} overlap {}", model, tp, pp, overlap ? "on" : "off"));
        }
      }
    }
  }
}

}  // namespace
}  // namespace calo::sim
