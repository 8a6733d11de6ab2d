// NVLink topology of a node: through NVSwitch every group reaches all of a GPU's links; on a direct full mesh
// (HGX H100 4-GPU: 18 NVLink4 links a GPU, 6 to each of its 3 peers) a group reaches the links to its fellow
// members only, so a pair is slower per byte than four GPUs (docs/SIMULATOR.md "NVLink topology").
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "core/error.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"

namespace calo::sim {
namespace {

/// A node of four GPUs as `topology` joins them, with no collective lines (the link as it is) and ring
/// all-reduce, so times are the closed form.
ClusterSpec four_gpu_node(const char* topology) {
  nlohmann::json described = to_json(load_cluster("h100-hgx"));
  described["node"]["gpus"] = 4;
  described["node"]["slot_inlet_offset_c"] = {0, 0, 0, 0};
  described["node"]["slot_r_scale"] = {1, 1, 1, 1};
  described["node"]["nvlink_bandwidth_gb_s"] = 450;  // 18 links x 25 GB/s a direction
  described["node"]["nvlink_topology"] = topology;
  described["collective"].erase("lines");
  described["collective"]["algorithm"] = "ring";
  return parse_cluster(described, topology);
}

/// Seconds of an all-reduce of `bytes` over ranks 0 .. members-1 of `cluster`.
double all_reduce_s(const ClusterSpec& cluster, int members, double bytes) {
  std::array<std::int32_t, 4> ranks = {0, 1, 2, 3};
  return collective_time_s(cluster, graph::CollectiveKind::kAllReduce, bytes,
                           place_group(cluster, std::span<const std::int32_t>(ranks.data(), members)));
}

TEST(NvlinkTopology, ADirectMeshGivesAGroupTheLinksToItsFellowMembers) {
  const ClusterSpec direct = four_gpu_node("direct");
  const ClusterSpec switched = four_gpu_node("switch");
  EXPECT_EQ(direct.node.nvlink_topology, NvlinkTopology::kDirect);
  EXPECT_EQ(switched.node.nvlink_topology, NvlinkTopology::kSwitch);
  EXPECT_DOUBLE_EQ(nvlink_group_bandwidth(direct.node, 2), 150e9);  // one pair's 6 links
  EXPECT_DOUBLE_EQ(nvlink_group_bandwidth(direct.node, 3), 300e9);
  EXPECT_DOUBLE_EQ(nvlink_group_bandwidth(direct.node, 4), 450e9);
  for (int members : {2, 3, 4}) EXPECT_DOUBLE_EQ(nvlink_group_bandwidth(switched.node, members), 450e9);
  // A pipeline's message between two GPUs of the mesh crosses one pair's links.
  const double bytes = 64.0 * 1024 * 1024;
  const double efficiency = bandwidth_efficiency(direct.collective, bytes);
  EXPECT_DOUBLE_EQ(p2p_time_s(direct, bytes, 0, 3),
                   direct.node.nvlink_latency_s + bytes / (150e9 * efficiency));
}

TEST(NvlinkTopology, OnADirectMeshFourMembersAreFasterPerByteThanTwoAndThroughASwitchSlower) {
  const double bytes = 256.0 * 1024 * 1024;
  const ClusterSpec direct = four_gpu_node("direct");
  const ClusterSpec switched = four_gpu_node("switch");
  // Ring: 2 (n-1)/n S / B. A pair moves S over 150 GB/s; four move 1.5 S over 450 GB/s: half the time.
  const double pair_s = all_reduce_s(direct, 2, bytes), four_s = all_reduce_s(direct, 4, bytes);
  EXPECT_LT(four_s, pair_s);
  EXPECT_NEAR(four_s / pair_s, 0.5, 0.01);  // latency terms aside
  // Through a switch each GPU has its 450 GB/s whatever the group: four move more bytes at the same speed.
  EXPECT_GT(all_reduce_s(switched, 4, bytes), all_reduce_s(switched, 2, bytes));
  EXPECT_DOUBLE_EQ(all_reduce_s(switched, 4, bytes), four_s);  // the whole mesh is the switch's bandwidth
  // With collective lines (the H200 host's, fitted at 2 and 4 ranks) the mesh keeps the order.
  ClusterSpec lined = load_cluster("h100x4-nvlink-calibrated");
  lined.node.nvlink_topology = NvlinkTopology::kDirect;
  EXPECT_LT(all_reduce_s(lined, 4, bytes), all_reduce_s(lined, 2, bytes));
  const ClusterSpec shipped = load_cluster("h100x4-nvlink-calibrated");  // a switch: its steps fit one
  EXPECT_EQ(shipped.node.nvlink_topology, NvlinkTopology::kSwitch);
  EXPECT_GT(all_reduce_s(shipped, 4, bytes), all_reduce_s(shipped, 2, bytes));
}

TEST(NvlinkTopology, TheFileNamesItOnlyWhenDirectAndRefusesOthers) {
  const ClusterSpec direct = four_gpu_node("direct");
  EXPECT_EQ(to_json(direct)["node"]["nvlink_topology"], "direct");
  EXPECT_EQ(parse_cluster(to_json(direct), "again").node.nvlink_topology, NvlinkTopology::kDirect);
  EXPECT_FALSE(to_json(load_cluster("h100-hgx"))["node"].contains("nvlink_topology"));  // switch: unchanged
  nlohmann::json described = to_json(direct);
  described["node"]["nvlink_topology"] = "torus";
  EXPECT_THROW(parse_cluster(described, "torus"), InputError);
}

}  // namespace
}  // namespace calo::sim
