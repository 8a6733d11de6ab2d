// Hybrid sharding in the simulator: the shard group of S <= GPUs per node lands on one node's NVLink (the
// rank map's groups, placed by place_group), so inter-node traffic and data-parallel transfer time drop
// against full sharding at the same dp.
#include <gtest/gtest.h>

#include "graph/check.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"
#include "sim_test_util.h"

namespace calo::sim {
namespace {

/// Bytes of the data-parallel collectives (any dp-like group) of all ranks whose group spans several nodes.
double inter_node_dp_bytes(const graph::Graph& graph, const ClusterSpec& cluster) {
  double bytes = 0;
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    for (const graph::Op& op : graph.program(rank).ops) {
      if (op.kind != graph::OpKind::kCollective || op.group == graph::GroupKind::kTp) continue;
      const int group_id = graph.group_id(rank, op.group);
      if (place_group(cluster, graph.groups[group_id].ranks).nodes > 1) bytes += op.bytes;
    }
  }
  return bytes;
}

double dp_transfer_s(const SimResult& result) {
  double total = 0;
  for (graph::GroupKind kind :
       {graph::GroupKind::kDp, graph::GroupKind::kDpShard, graph::GroupKind::kDpReplicate})
    total += result.comm_transfer_s[static_cast<int>(kind)];
  return total;
}

TEST(SimulateSharding, HybridShardGroupStaysInANodeAndCutsInterNodeTraffic) {
  const ClusterSpec cluster = load_cluster("h100-hgx");  // 8 GPUs per node
  ASSERT_EQ(cluster.node.gpus, 8);
  parallel::Layout layout;
  layout.dp = 32;  // 4 nodes
  layout.zero_stage = 3;
  layout.global_batch = 32;
  layout.seq_length = 2048;
  const graph::Graph full = testing::make_graph("llama3-8b", layout);
  layout.fsdp_shard_size = 8;
  const graph::Graph hybrid = testing::make_graph("llama3-8b", layout);

  // Every shard group is one node; every replicate group has one member on each of the 4 nodes.
  for (const graph::CommGroup& group : hybrid.groups) {
    const GroupPlacement placement = place_group(cluster, group.ranks);
    if (group.kind == graph::GroupKind::kDpShard) {
      EXPECT_EQ(placement.nodes, 1);
    }
    if (group.kind == graph::GroupKind::kDpReplicate) {
      EXPECT_EQ(placement.nodes, 4);
      EXPECT_EQ(placement.per_node, 1);
    }
  }
  // Inter-node bytes: full sharding moves 3 passes of every parameter over the 4-node dp group; hybrid only
  // the all-reduce of a 1/8 shard, 1/24 of it (m = 1).
  const double full_bytes = inter_node_dp_bytes(full, cluster);
  const double hybrid_bytes = inter_node_dp_bytes(hybrid, cluster);
  EXPECT_DOUBLE_EQ(full_bytes, graph::comm_volumes(full).dp_bytes);
  EXPECT_DOUBLE_EQ(hybrid_bytes, graph::comm_volumes(hybrid).dp_replicate_bytes);
  EXPECT_NEAR(hybrid_bytes / full_bytes, 1.0 / 24.0, 1e-9);

  SimOptions options;
  options.steps = 1;
  const SimResult full_result = simulate(full, cluster, options);
  const SimResult hybrid_result = simulate(hybrid, cluster, options);
  EXPECT_GT(full_result.comm_transfer_s[static_cast<int>(graph::GroupKind::kDp)], 0);
  EXPECT_GT(hybrid_result.comm_transfer_s[static_cast<int>(graph::GroupKind::kDpShard)], 0);
  EXPECT_GT(hybrid_result.comm_transfer_s[static_cast<int>(graph::GroupKind::kDpReplicate)], 0);
  EXPECT_LT(dp_transfer_s(hybrid_result), dp_transfer_s(full_result));
  EXPECT_LT(hybrid_result.iteration_s, full_result.iteration_s);
  EXPECT_STREQ(comm_class_name(static_cast<int>(graph::GroupKind::kDpShard)), "dp_shard");
}

TEST(SimulateSharding, KeepingParametersAfterForwardSavesTheBackwardGathers) {
  const ClusterSpec cluster = load_cluster("h100-hgx");
  parallel::Layout layout;
  layout.dp = 16;
  layout.zero_stage = 3;
  layout.global_batch = 32;  // m = 2
  layout.seq_length = 2048;
  const graph::Graph resharding = testing::make_graph("llama3-8b", layout);
  layout.reshard_after_forward = false;
  const graph::Graph keeping = testing::make_graph("llama3-8b", layout);
  SimOptions options;
  options.steps = 1;
  const SimResult resharding_result = simulate(resharding, cluster, options);
  const SimResult keeping_result = simulate(keeping, cluster, options);
  // 2 of 3 passes per micro-batch remain (gather, reduce-scatter).
  const int dp = static_cast<int>(graph::GroupKind::kDp);
  EXPECT_NEAR(keeping_result.comm_transfer_s[dp] / resharding_result.comm_transfer_s[dp], 2.0 / 3.0, 0.05);
  EXPECT_LT(keeping_result.iteration_s, resharding_result.iteration_s);
}

}  // namespace
}  // namespace calo::sim
