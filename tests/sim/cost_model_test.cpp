// Cost models against closed forms: ring all-reduce, hierarchical placement, GEMM roofline, messages.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

std::vector<std::int32_t> ranks_range(int first, int count, int stride) {
  std::vector<std::int32_t> ranks(count);
  for (int index = 0; index < count; ++index) ranks[index] = first + index * stride;
  return ranks;
}

TEST(CostModel, RingAllReduceInsideANodeIsTheClosedForm) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  cluster.collective.algorithm = "ring";
  const double bytes = 256.0 * 1024 * 1024;
  const auto ranks = ranks_range(0, 8, 1);
  const GroupPlacement placement = place_group(cluster, ranks);
  EXPECT_EQ(placement.nodes, 1);
  EXPECT_EQ(placement.per_node, 8);
  const double bandwidth = cluster.node.nvlink_bandwidth_bytes_per_s;
  const double efficiency =
      cluster.collective.bw_efficiency_max * bytes / (bytes + cluster.collective.bw_half_bytes);
  const double expected =
      2.0 * 7 / 8 * bytes / (bandwidth * efficiency) + 2.0 * 7 * cluster.node.nvlink_latency_s;
  EXPECT_NEAR(collective_time_s(cluster, graph::CollectiveKind::kAllReduce, bytes, placement), expected,
              expected * 1e-12);
  // All-gather and reduce-scatter move half of it: (n-1)/n S/B + (n-1) latency.
  const double half = 7.0 / 8 * bytes / (bandwidth * efficiency) + 7 * cluster.node.nvlink_latency_s;
  EXPECT_NEAR(collective_time_s(cluster, graph::CollectiveKind::kAllGather, bytes, placement), half,
              half * 1e-12);
}

TEST(CostModel, OneGpuPerNodeUsesItsRailAndOversubscriptionAcrossLeaves) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  cluster.collective.algorithm = "ring";
  cluster.network.nodes_per_leaf = 4;
  const double bytes = 64.0 * 1024 * 1024;
  const auto within_leaf = ranks_range(0, 4, 8);  // ranks 0, 8, 16, 24: one per node, nodes 0..3
  const GroupPlacement placement = place_group(cluster, within_leaf);
  EXPECT_EQ(placement.nodes, 4);
  EXPECT_EQ(placement.per_node, 1);
  EXPECT_FALSE(placement.cross_leaf);
  const double rail = cluster.nic_bandwidth_per_gpu();  // 8 x 400 Gb/s over 8 GPUs = 50 GB/s
  EXPECT_DOUBLE_EQ(rail, 50e9);
  const double expected = ring_all_reduce_s(cluster.collective, 4, bytes, rail, cluster.network.latency_s);
  EXPECT_DOUBLE_EQ(collective_time_s(cluster, graph::CollectiveKind::kAllReduce, bytes, placement), expected);
  cluster.network.oversubscription = 2.0;
  const auto across = ranks_range(0, 8, 8);  // nodes 0..7: two leaves
  const GroupPlacement wide = place_group(cluster, across);
  EXPECT_TRUE(wide.cross_leaf);
  const double slower =
      ring_all_reduce_s(cluster.collective, 8, bytes, rail / 2.0, 2.0 * cluster.network.latency_s);
  EXPECT_DOUBLE_EQ(collective_time_s(cluster, graph::CollectiveKind::kAllReduce, bytes, wide), slower);
}

TEST(CostModel, HierarchicalAllReduceBeatsAFlatRingOverTheNetwork) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  cluster.collective.algorithm = "ring";
  const double bytes = 1024.0 * 1024 * 1024;
  const auto two_nodes = ranks_range(0, 16, 1);
  const GroupPlacement placement = place_group(cluster, two_nodes);
  EXPECT_EQ(placement.nodes, 2);
  EXPECT_EQ(placement.per_node, 8);
  const double hierarchical = collective_time_s(cluster, graph::CollectiveKind::kAllReduce, bytes, placement);
  const double flat_network = ring_all_reduce_s(cluster.collective, 16, bytes,
                                                cluster.nic_bandwidth_per_gpu(), cluster.network.latency_s);
  EXPECT_LT(hierarchical, flat_network);
  const double nvlink_only =
      ring_all_reduce_s(cluster.collective, 16, bytes, cluster.node.nvlink_bandwidth_bytes_per_s,
                        cluster.node.nvlink_latency_s);
  EXPECT_GT(hierarchical, nvlink_only);
}

TEST(CostModel, TreeWinsForSmallMessagesWhenAuto) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  const auto ranks = ranks_range(0, 64, 8);
  const GroupPlacement placement = place_group(cluster, ranks);
  cluster.collective.algorithm = "ring";
  const double ring_small = collective_time_s(cluster, graph::CollectiveKind::kAllReduce, 4096, placement);
  const double ring_large = collective_time_s(cluster, graph::CollectiveKind::kAllReduce, 8e9, placement);
  cluster.collective.algorithm = "tree";
  const double tree_small = collective_time_s(cluster, graph::CollectiveKind::kAllReduce, 4096, placement);
  const double tree_large = collective_time_s(cluster, graph::CollectiveKind::kAllReduce, 8e9, placement);
  EXPECT_LT(tree_small, ring_small);
  EXPECT_GT(tree_large, ring_large);
  cluster.collective.algorithm = "auto";
  EXPECT_DOUBLE_EQ(collective_time_s(cluster, graph::CollectiveKind::kAllReduce, 4096, placement),
                   tree_small);
  EXPECT_DOUBLE_EQ(collective_time_s(cluster, graph::CollectiveKind::kAllReduce, 8e9, placement), ring_large);
}

TEST(CostModel, GemmRooflineWithShapeDependentEfficiency) {
  const ClusterSpec cluster = load_cluster("h200-hgx");
  graph::Op gemm;
  gemm.kind = graph::OpKind::kGemm;
  gemm.gemm.m = gemm.gemm.n = gemm.gemm.k = 8192;
  gemm.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  const ComputeCost big = compute_cost(cluster.gpu, gemm);
  const double efficiency = gemm_efficiency(cluster.gpu.efficiency, 8192, 8192, 8192);
  EXPECT_NEAR(big.compute_s, gemm.flops / (cluster.gpu.peak_bf16_flops * efficiency), 1e-15);
  EXPECT_GT(big.compute_s, big.memory_s);  // compute-bound
  EXPECT_NEAR(big.duration_s(1, 1), big.compute_s + cluster.gpu.efficiency.kernel_overhead_s, 1e-15);
  // At 3/4 clock the FLOP-bound part stretches by 4/3, a memory-bound op does not.
  EXPECT_NEAR(big.duration_s(4.0 / 3, 1) - big.overhead_s, big.compute_s * 4.0 / 3, 1e-15);
  graph::Op skinny = gemm;
  skinny.gemm.m = 16;
  skinny.flops = 2.0 * 16 * 8192.0 * 8192.0;
  const ComputeCost small = compute_cost(cluster.gpu, skinny);
  EXPECT_LT(skinny.flops / small.compute_s, gemm.flops / big.compute_s);  // lower achieved FLOP/s
  EXPECT_GT(small.memory_s, small.compute_s);                             // a skinny GEMM is memory-bound
  EXPECT_NEAR(small.duration_s(1.2, 1), small.duration_s(1, 1), 1e-15);   // so the clock does not matter
}

/// A causal attention op of Llama3-8B's heads (32 query, 8 key/value, width 128) with FLOPs and bytes set.
graph::Op attention_op(int batch, int seq, bool backward) {
  graph::Op op;
  op.kind = graph::OpKind::kAttention;
  op.attention.batch = batch;
  op.attention.heads = 32;
  op.attention.kv_heads = 8;
  op.attention.seq = seq;
  op.attention.head_dim = 128;
  op.attention.backward = backward;
  op.flops = graph::attention_flops(op.attention);
  op.bytes = graph::attention_bytes(op.attention);
  return op;
}

TEST(CostModel, AttentionBackwardRunsAtItsFractionOfTheForwardEfficiency) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  const graph::Op forward = attention_op(1, 8192, false);
  const graph::Op backward = attention_op(1, 8192, true);
  cluster.gpu.efficiency.attention_backward_fraction = 1.0;
  const double same_efficiency = compute_cost(cluster.gpu, backward).compute_s;
  EXPECT_NEAR(same_efficiency, 2 * compute_cost(cluster.gpu, forward).compute_s, 1e-12);  // 2x the FLOPs
  cluster.gpu.efficiency.attention_backward_fraction = 0.5;
  EXPECT_NEAR(compute_cost(cluster.gpu, backward).compute_s, 2 * same_efficiency, 1e-12);
  EXPECT_NEAR(compute_cost(cluster.gpu, forward).compute_s, same_efficiency / 2, 1e-12);  // forward unchanged
}

TEST(CostModel, FlashAttention2RunsAtItsMeasuredShareOfTheFittedKernelsSpeed) {
  // --attention flash2: pytorch/pytorch#142132's 329.483 against cuDNN's 631.338 TFLOP/s on H100, forward and
  // backward alike; memory traffic and the launch overhead are the fused kernel's.
  const ClusterSpec cluster = load_cluster("h100-hgx-calibrated");
  for (const bool backward : {false, true}) {
    graph::Op fused = attention_op(1, 8192, backward);
    graph::Op flash2 = fused;
    flash2.attention.flash2 = true;
    EXPECT_NEAR(compute_cost(cluster.gpu, flash2).compute_s,
                compute_cost(cluster.gpu, fused).compute_s * 631.338 / 329.483, 1e-12);
    EXPECT_DOUBLE_EQ(compute_cost(cluster.gpu, flash2).memory_s, compute_cost(cluster.gpu, fused).memory_s);
  }
}

TEST(CostModel, AttentionOfFewGridRowsRunsBelowItsCeiling) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  const graph::Op one = attention_op(1, 2048, false);
  const graph::Op eight = attention_op(8, 2048, false);
  EXPECT_DOUBLE_EQ(attention_grid_rows(eight.attention), 8.0 * 32 * 2048);
  // Off by default: FLOP rate independent of the batch.
  cluster.gpu.efficiency.attention_half_rows = 0;
  const double rate_one = one.flops / compute_cost(cluster.gpu, one).compute_s;
  EXPECT_NEAR(eight.flops / compute_cost(cluster.gpu, eight).compute_s, rate_one, rate_one * 1e-12);
  // On: each rate falls by rows / (rows + half), so one sequence of 65536 rows loses more than eight.
  const double half_rows = 32.0 * 2048;
  cluster.gpu.efficiency.attention_half_rows = half_rows;
  EXPECT_NEAR(one.flops / compute_cost(cluster.gpu, one).compute_s, rate_one * 0.5, rate_one * 1e-12);
  EXPECT_NEAR(eight.flops / compute_cost(cluster.gpu, eight).compute_s, rate_one * 8 / 9, rate_one * 1e-12);
}

TEST(CostModel, MessagesUseNvlinkInsideANodeAndTheRailAcross) {
  const ClusterSpec cluster = load_cluster("h200-hgx");
  const double bytes = 32.0 * 1024 * 1024;
  const double efficiency = bandwidth_efficiency(cluster.collective, bytes);
  EXPECT_DOUBLE_EQ(
      p2p_time_s(cluster, bytes, 0, 7),
      cluster.node.nvlink_latency_s + bytes / (cluster.node.nvlink_bandwidth_bytes_per_s * efficiency));
  EXPECT_DOUBLE_EQ(p2p_time_s(cluster, bytes, 0, 8),
                   cluster.network.latency_s + bytes / (cluster.nic_bandwidth_per_gpu() * efficiency));
}

TEST(CollectiveLines, AKindTakesItsFastestLineAndOtherKindsKeepTheLink) {
  const ClusterSpec plain = load_cluster("h200-hgx");
  ClusterSpec lined = plain;
  using graph::CollectiveKind;
  lined.collective.lines[CollectiveKind::kAllReduce] = {{"small", 0.4, 0.2}, {"large", 0.9, 2.5}};
  const auto ranks = ranks_range(0, 8, 1);
  const GroupPlacement placement = place_group(plain, ranks);
  // One line is the plain model at the scaled link figures and the efficiency curve's best (lines are the
  // kind's measured size dependence: they replace the curve's half size).
  const auto at_line = [&](double bandwidth_scale, double latency_scale, double bytes) {
    ClusterSpec scaled = plain;
    scaled.collective.bw_half_bytes = 0;
    scaled.node.nvlink_bandwidth_bytes_per_s *= bandwidth_scale;
    scaled.node.nvlink_latency_s *= latency_scale;
    return collective_time_s(scaled, CollectiveKind::kAllReduce, bytes, placement);
  };
  for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0, 1073741824.0}) {
    const double small = at_line(0.4, 0.2, bytes), large = at_line(0.9, 2.5, bytes);
    EXPECT_DOUBLE_EQ(collective_time_s(lined, CollectiveKind::kAllReduce, bytes, placement),
                     std::min(small, large))
        << bytes << " B";
    EXPECT_DOUBLE_EQ(collective_time_s(lined, CollectiveKind::kAllGather, bytes, placement),
                     collective_time_s(plain, CollectiveKind::kAllGather, bytes, placement))
        << "all-gather has no lines: the link as it is";
  }
  // The small line wins small messages (its lower latency), the large one large messages (its bandwidth).
  EXPECT_LT(at_line(0.4, 0.2, 4096), at_line(0.9, 2.5, 4096));
  EXPECT_LT(at_line(0.9, 2.5, 1073741824.0), at_line(0.4, 0.2, 1073741824.0));
  // Lines are measured inside a node: they shape NVLink phases and leave the network's alone. A 2-node
  // all-reduce (hierarchical) is slower with only the small line's 0.4 x bandwidth on its NVLink phases; one
  // GPU per node (all network) takes the same time with and without lines.
  ClusterSpec only_small = plain;
  only_small.collective.lines[CollectiveKind::kAllReduce] = {{"small", 0.4, 0.2}};
  only_small.collective.lines[CollectiveKind::kReduceScatter] = {{"small", 0.4, 0.2}};
  only_small.collective.lines[CollectiveKind::kAllGather] = {{"small", 0.4, 0.2}};
  const GroupPlacement two_nodes = place_group(plain, ranks_range(0, 16, 1));
  EXPECT_GT(collective_time_s(only_small, CollectiveKind::kAllReduce, 1073741824.0, two_nodes),
            collective_time_s(plain, CollectiveKind::kAllReduce, 1073741824.0, two_nodes));
  const GroupPlacement one_per_node = place_group(plain, ranks_range(0, 4, plain.node.gpus));
  ASSERT_EQ(one_per_node.nodes, 4);
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather}) {
    EXPECT_DOUBLE_EQ(collective_time_s(only_small, kind, 1073741824.0, one_per_node),
                     collective_time_s(plain, kind, 1073741824.0, one_per_node));
  }
}

TEST(CollectiveLines, PointToPointMessagesTakeTheFastestP2pLineOnTheirLink) {
  const ClusterSpec plain = load_cluster("h200-hgx");
  ClusterSpec lined = plain;
  lined.collective.p2p_lines = {{"small", 0.6, 2}, {"large", 1.3, 4}};
  const auto at_line = [&](double bandwidth_scale, double latency_scale, double bytes, int peer) {
    ClusterSpec scaled = plain;
    scaled.collective.bw_half_bytes = 0;
    scaled.node.nvlink_bandwidth_bytes_per_s *= bandwidth_scale;
    scaled.node.nvlink_latency_s *= latency_scale;
    return p2p_time_s(scaled, bytes, 0, peer);
  };
  for (double bytes : {4096.0, 1048576.0, 1073741824.0}) {
    EXPECT_DOUBLE_EQ(p2p_time_s(lined, bytes, 0, 1),
                     std::min(at_line(0.6, 2, bytes, 1), at_line(1.3, 4, bytes, 1)))
        << bytes << " B over NVLink";
    EXPECT_DOUBLE_EQ(p2p_time_s(lined, bytes, 0, 8), p2p_time_s(plain, bytes, 0, 8))
        << bytes << " B to the next node: the rail as it is (lines are measured inside a node)";
  }
  EXPECT_LT(at_line(0.6, 2, 4096, 1), at_line(1.3, 4, 4096, 1));
  EXPECT_LT(at_line(1.3, 4, 1073741824.0, 1), at_line(0.6, 2, 1073741824.0, 1));
  // Collectives keep their own (none here): p2p lines do not move them.
  const GroupPlacement eight = place_group(plain, ranks_range(0, 8, 1));
  EXPECT_DOUBLE_EQ(collective_time_s(lined, graph::CollectiveKind::kAllReduce, 1048576.0, eight),
                   collective_time_s(plain, graph::CollectiveKind::kAllReduce, 1048576.0, eight));
}

TEST(CollectiveLines, TheClusterFileCarriesThemAndNamesBadOnes) {
  ClusterSpec cluster = load_cluster("h200-hgx");
  EXPECT_TRUE(cluster.collective.lines.empty()) << "presets have no lines: one line at the link's figures";
  EXPECT_FALSE(to_json(cluster)["collective"].contains("lines"));
  cluster.collective.lines[graph::CollectiveKind::kReduceScatter] = {{"small", 0.45, 0.1}, {"large", 0.8, 3}};
  cluster.collective.p2p_lines = {{"small", 0.6, 2}, {"large", 1.3, 4}};
  const ClusterSpec again = parse_cluster(to_json(cluster), "round trip");
  ASSERT_EQ(again.collective.lines.size(), 1u);
  ASSERT_EQ(again.collective.p2p_lines.size(), 2u);
  EXPECT_DOUBLE_EQ(again.collective.p2p_lines[1].bandwidth_scale, 1.3);
  const auto& lines = again.collective.lines.at(graph::CollectiveKind::kReduceScatter);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].name, "large");
  EXPECT_DOUBLE_EQ(lines[0].bandwidth_scale, 0.45);
  EXPECT_DOUBLE_EQ(lines[1].latency_scale, 3);
  const auto refused = [&](const nlohmann::json& bad_lines) {
    nlohmann::json object = to_json(cluster);
    object["collective"]["lines"] = bad_lines;
    try {
      parse_cluster(object, "bad.yaml");
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused({{"allreduce", {{{"name", "small"}}}}}).find("use all_reduce, all_gather"),
            std::string::npos);
  EXPECT_NE(refused({{"all_reduce", {{{"name", "x"}, {"bandwidth_scale", 0}}}}}).find("bandwidth_scale"),
            std::string::npos);
  EXPECT_NE(refused({{"all_reduce", nlohmann::json::array()}}).find("non-empty list"), std::string::npos);
  EXPECT_NE(refused({{"all_reduce", {{{"name", "x"}, {"latency", 1}}}}}).find("latency"), std::string::npos);
  EXPECT_NE(refused({{"all_reduce", {{{"name", "x"}, {"members_half", -1}}}}}).find("members_half"),
            std::string::npos);
  EXPECT_NE(refused({{"all_reduce", {{{"name", "x"}, {"call_latency_scale", -0.5}}}}}).find("call_latency"),
            std::string::npos);
  cluster.collective.lines[graph::CollectiveKind::kAllGather] = {{"large", 1.5, 2, 14, 1.25}};
  const auto& group_line = parse_cluster(to_json(cluster), "round trip")
                               .collective.lines.at(graph::CollectiveKind::kAllGather)
                               .front();
  EXPECT_DOUBLE_EQ(group_line.call_latency_scale, 14);
  EXPECT_DOUBLE_EQ(group_line.members_half, 1.25);
}

TEST(CollectiveLines, GroupsOutsideTheFittedGroupSizesAreNamed) {
  // Llama3-8B (4 layers) with TP 8 and DP 2 on 8-GPU nodes: TP groups of 8 GPUs in a node (all-gather,
  // reduce-scatter, all-reduce), DP groups of one GPU per node (all network: no NVLink phase).
  parallel::Layout layout;
  layout.tp = 8;
  layout.dp = 2;
  layout.global_batch = 2;
  const graph::Graph graph = testing::make_graph("llama3-8b-4layers", layout);
  ClusterSpec cluster = load_cluster("h200-hgx");
  EXPECT_TRUE(collective_line_warnings(graph, cluster).empty()) << "no lines, nothing to extrapolate";
  CollectiveLine fitted{"large", 1.5, 1, 10, 1.2};
  cluster.collective.lines[graph::CollectiveKind::kAllGather] = {fitted};
  EXPECT_TRUE(collective_line_warnings(graph, cluster).empty()) << "lines without a recorded range";
  fitted.fitted_members_min = 2;
  fitted.fitted_members_max = 4;
  cluster.collective.lines[graph::CollectiveKind::kAllGather] = {fitted};
  cluster.collective.lines[graph::CollectiveKind::kReduceScatter] = {fitted};
  const auto warnings = collective_line_warnings(graph, cluster);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("all_gather, reduce_scatter run over 8 GPUs of a node, outside the 2-4 ranks"),
            std::string::npos)
      << warnings[0];
  fitted.fitted_members_max = 8;
  cluster.collective.lines[graph::CollectiveKind::kAllGather] = {fitted};
  cluster.collective.lines[graph::CollectiveKind::kReduceScatter] = {fitted};
  EXPECT_TRUE(collective_line_warnings(graph, cluster).empty()) << "8 is inside 2-8";
  // The range travels in the cluster file; a bad one is named.
  const ClusterSpec again = parse_cluster(to_json(cluster), "round trip");
  EXPECT_EQ(again.collective.lines.at(graph::CollectiveKind::kAllGather)[0].fitted_members_max, 8);
  nlohmann::json bad = to_json(cluster);
  bad["collective"]["lines"]["all_gather"][0]["fitted_members"] = {4, 2};
  try {
    parse_cluster(bad, "bad.yaml");
    ADD_FAILURE() << "accepted fitted_members [4, 2]";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("fitted_members must be [smallest, largest]"), std::string::npos)
        << error.what();
  }
}

TEST(CollectiveLines, ALinesCallLatencyIsPaidOncePerCallAndItsBandwidthGrowsWithTheMembers) {
  // A line fitted over two group sizes: time = (n-1)/n · bytes / (bandwidth · n/(n + members_half)) +
  // (n-1) · latency · latency_scale + latency · call_latency_scale (all-gather inside one node).
  ClusterSpec cluster = load_cluster("h200-hgx");
  const double bandwidth = cluster.node.nvlink_bandwidth_bytes_per_s * cluster.collective.bw_efficiency_max;
  const double latency_s = cluster.node.nvlink_latency_s;
  using graph::CollectiveKind;
  cluster.collective.lines[CollectiveKind::kAllGather] = {{"large", 1.5, 2, 14, 1.25}};
  for (int members : {2, 4, 8}) {
    for (double bytes : {4096.0, 1073741824.0}) {
      const double expected_s =
          (members - 1.0) / members * bytes / (bandwidth * 1.5 * members / (members + 1.25)) +
          (members - 1) * latency_s * 2 + latency_s * 14;
      EXPECT_NEAR(collective_time_s(cluster, CollectiveKind::kAllGather, bytes,
                                    place_group(cluster, ranks_range(0, members, 1))),
                  expected_s, expected_s * 1e-12)
          << members << " members, " << bytes << " B";
    }
  }
  // A 1 GiB all-gather over 4 members takes 1.5 x the 2-member time at members_half 0 ((n-1)/n), less with a
  // members term: NCCL's larger groups drive more of each GPU's NVLink ports.
  const auto ratio_4_to_2 = [&](double members_half) {
    cluster.collective.lines[CollectiveKind::kAllGather] = {{"large", 1.5, 0, 0, members_half}};
    const auto time_s = [&](int members) {
      return collective_time_s(cluster, CollectiveKind::kAllGather, 1073741824.0,
                               place_group(cluster, ranks_range(0, members, 1)));
    };
    return time_s(4) / time_s(2);
  };
  EXPECT_NEAR(ratio_4_to_2(0), 1.5, 1e-12);
  EXPECT_NEAR(ratio_4_to_2(1.25), 1.5 * (4 + 1.25) / 4 / ((2 + 1.25) / 2), 1e-12);
  EXPECT_LT(ratio_4_to_2(1.25), 1.25);
  // Point-to-point lines pay their call latency with their one hop.
  cluster.collective.p2p_lines = {{"small", 1, 2, 3, 0}};
  EXPECT_NEAR(p2p_time_s(cluster, 1, 0, 1), latency_s * 5 + 1 / bandwidth, 1e-15);
}

}  // namespace
}  // namespace calo::sim
