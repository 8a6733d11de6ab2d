#include "sim/cost_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace calo::sim {

namespace {

double dimension_factor(double dimension, double half) {
  return dimension / (dimension + half);
}

/// Seconds to move `bytes` over `link_bytes_per_s` at the collective efficiency for a message of
/// `message_bytes`.
double transfer_s(const CollectiveSpec& collective, double bytes, double message_bytes,
                  double link_bytes_per_s) {
  if (bytes <= 0) return 0;
  return bytes / (link_bytes_per_s * bandwidth_efficiency(collective, message_bytes));
}

/// The fastest over `lines` of `time_s(curve, line)`. No lines: one line at scale 1 (no per-call latency, no
/// members term) on the cluster's efficiency curve; with lines, each runs at the curve's best efficiency
/// (bw_half_bytes 0): the lines are the measured size dependence and replace the curve's.
template <typename TimeOfLine>
double fastest_line_s(const CollectiveSpec& collective, const std::vector<CollectiveLine>& lines,
                      TimeOfLine time_s) {
  if (lines.empty()) return time_s(collective, CollectiveLine{});
  CollectiveSpec flat_curve;  // the lines' curve: not a copy of `collective`, whose lines would be copied too
  flat_curve.algorithm = collective.algorithm;
  flat_curve.bw_efficiency_max = collective.bw_efficiency_max;
  flat_curve.bw_half_bytes = 0;
  double fastest_s = INFINITY;
  for (const CollectiveLine& line : lines) {
    fastest_s = std::min(fastest_s, time_s(flat_curve, line));
  }
  return fastest_s;
}

/// No lines: the link as it is (one line at scale 1 on the efficiency curve).
const std::vector<CollectiveLine> kNoLines;

/// `kind`'s lines (CollectiveSpec::lines); kNoLines where it has none.
const std::vector<CollectiveLine>& lines_of(const CollectiveSpec& collective, graph::CollectiveKind kind) {
  auto found = collective.lines.find(kind);
  return found == collective.lines.end() ? kNoLines : found->second;
}

/// `line`'s share of a link of `link_bytes_per_s` for a group of `members`: bandwidth_scale · n / (n +
/// members_half).
double line_bandwidth(const CollectiveLine& line, double link_bytes_per_s, int members) {
  return link_bytes_per_s * line.bandwidth_scale * members / (members + line.members_half);
}

/// Flat (one link class) collective time under `line` on a link of `link_bytes_per_s` and `latency_s` per hop
/// with the efficiency curve `collective`: ring or tree per the algorithm choice for all-reduce, plus the
/// line's per-call latency.
double flat_line_s(const CollectiveSpec& collective, const CollectiveLine& line, graph::CollectiveKind kind,
                   int members, double bytes, double link_bytes_per_s, double latency_s) {
  const double bandwidth = line_bandwidth(line, link_bytes_per_s, members);
  const double hop_latency_s = latency_s * line.latency_scale;
  const double call_s = latency_s * line.call_latency_scale;
  switch (kind) {
    case graph::CollectiveKind::kAllReduce: {
      double ring = ring_all_reduce_s(collective, members, bytes, bandwidth, hop_latency_s);
      double tree = tree_all_reduce_s(collective, members, bytes, bandwidth, hop_latency_s);
      if (collective.algorithm == "ring") return ring + call_s;
      if (collective.algorithm == "tree") return tree + call_s;
      return std::min(ring, tree) + call_s;
    }
    case graph::CollectiveKind::kAllGather:
    case graph::CollectiveKind::kReduceScatter:
    case graph::CollectiveKind::kAllToAll: {
      const double fraction = static_cast<double>(members - 1) / members;
      return fraction * transfer_s(collective, bytes, bytes, bandwidth) + (members - 1) * hop_latency_s +
             call_s;
    }
  }
  return 0;
}

/// The two link classes: NVLink inside a node, where collective lines are measured, and the network, which
/// keeps its own figures and efficiency curve (no sweep across nodes has fitted lines to it).
enum class Link { kNvlink, kNetwork };

/// Lines `link` takes for `kind`: on NVLink the kind's lines, on the network none.
const std::vector<CollectiveLine>& lines_on(const CollectiveSpec& collective, Link link,
                                            graph::CollectiveKind kind) {
  return link == Link::kNvlink ? lines_of(collective, kind) : kNoLines;
}

/// Flat (one link class) collective time: the fastest of the kind's lines on `link`.
double flat_collective_s(const ClusterSpec& cluster, Link link, graph::CollectiveKind kind, int members,
                         double bytes, double link_bytes_per_s, double latency_s) {
  if (members <= 1) return 0;
  return fastest_line_s(cluster.collective, lines_on(cluster.collective, link, kind),
                        [&](const CollectiveSpec& curve, const CollectiveLine& line) {
                          return flat_line_s(curve, line, kind, members, bytes, link_bytes_per_s, latency_s);
                        });
}

int node_of(const ClusterSpec& cluster, int rank) {
  return rank / cluster.node.gpus;
}

}  // namespace

double gemm_efficiency(const ComputeEfficiency& efficiency, double m, double n, double k) {
  double half = efficiency.gemm_half_dim;
  return efficiency.gemm_max * dimension_factor(m, half) * dimension_factor(n, half) *
         dimension_factor(k, half);
}

double fp8_gemm_max(const ComputeEfficiency& efficiency, graph::DType dtype) {
  const double tensorwise = efficiency.gemm_fp8_max > 0 ? efficiency.gemm_fp8_max : efficiency.gemm_max;
  if (dtype == graph::DType::kFp8Rowwise && efficiency.gemm_fp8_rowwise_max > 0)
    return efficiency.gemm_fp8_rowwise_max;
  return tensorwise;
}

double attention_grid_rows(const graph::AttentionShape& shape) {
  return static_cast<double>(shape.batch) * shape.heads * shape.seq;
}

double memory_efficiency(const ComputeEfficiency& efficiency, double bytes) {
  return efficiency.memory_max * dimension_factor(bytes, efficiency.memory_half_bytes);
}

ComputeCost compute_cost(const GpuSpec& gpu, const graph::Op& op) {
  ComputeCost cost;
  const ComputeEfficiency& efficiency = gpu.efficiency;
  double bytes = op.bytes;
  double peak_flops = gpu.peak_bf16_flops;
  double flop_efficiency = 1.0;
  switch (op.kind) {
    case graph::OpKind::kGemm: {
      const auto& shape = op.gemm;
      const double m = static_cast<double>(shape.m);
      const double n = static_cast<double>(shape.n);
      const double k = static_cast<double>(shape.k);
      if (bytes <= 0) bytes = 2.0 * static_cast<double>(shape.batch) * (m * k + k * n + m * n);
      if (shape.dtype == graph::DType::kFp32) peak_flops = gpu.peak_fp32_flops;
      flop_efficiency = gemm_efficiency(efficiency, m, n, k);
      cost.power_class = PowerClass::kGemm;
      if (shape.dtype == graph::DType::kFp8 || shape.dtype == graph::DType::kFp8Rowwise) {
        // FP8 tensor cores: their peak, and their best fraction of it by scaling granularity.
        peak_flops = gpu.peak_fp8_flops;
        flop_efficiency *= fp8_gemm_max(efficiency, shape.dtype) / efficiency.gemm_max;
        cost.power_class = PowerClass::kGemmFp8;
      }
      break;
    }
    case graph::OpKind::kAttention: {
      const double seq = op.attention.seq;
      flop_efficiency = efficiency.attention_max * dimension_factor(seq, efficiency.attention_half_seq);
      if (efficiency.attention_half_rows > 0)
        flop_efficiency *=
            dimension_factor(attention_grid_rows(op.attention), efficiency.attention_half_rows);
      if (op.attention.backward) flop_efficiency *= efficiency.attention_backward_fraction;
      if (op.attention.flash2) flop_efficiency *= kFlashAttention2SpeedOfCudnn;
      cost.power_class = PowerClass::kAttention;
      break;
    }
    case graph::OpKind::kElementwise:
      peak_flops = gpu.peak_fp32_flops;
      cost.power_class = PowerClass::kElementwise;
      break;
    case graph::OpKind::kOptimizer:
      peak_flops = gpu.peak_fp32_flops;
      cost.power_class = PowerClass::kOptimizer;
      break;
    case graph::OpKind::kCollective:
    case graph::OpKind::kSend:
    case graph::OpKind::kRecv:
      cost.power_class = PowerClass::kCommunication;
      return cost;
  }
  cost.ideal_compute_s = op.flops / peak_flops;
  cost.compute_s = cost.ideal_compute_s / flop_efficiency;
  cost.ideal_memory_s = bytes / gpu.hbm_bandwidth_bytes_per_s;
  cost.memory_s = bytes > 0 ? cost.ideal_memory_s / memory_efficiency(efficiency, bytes) : 0.0;
  cost.overhead_s = efficiency.kernel_overhead_s;
  if (!efficiency.op_time_scale.empty() && op.kind != graph::OpKind::kGemm) {
    // A kernel measured slower (or faster) than the curves predict: its whole duration scales, so its
    // utilization, and with it its power, scales inversely.
    auto found = efficiency.op_time_scale.find(graph::span_name(op));
    if (found != efficiency.op_time_scale.end()) {
      cost.compute_s *= found->second;
      cost.memory_s *= found->second;
      cost.overhead_s *= found->second;
    }
  }
  return cost;
}

GroupPlacement place_group(const ClusterSpec& cluster, std::span<const std::int32_t> ranks) {
  GroupPlacement placement;
  placement.size = static_cast<int>(ranks.size());
  if (ranks.empty()) return placement;
  int nodes = 0;
  int current_count = 0;
  int previous_node = -1;
  int first_leaf = -1;
  for (std::int32_t rank : ranks) {  // ranks are sorted, so members of one node are adjacent
    int node = node_of(cluster, rank);
    if (node != previous_node) {
      ++nodes;
      current_count = 0;
      previous_node = node;
    }
    ++current_count;
    placement.per_node = std::max(placement.per_node, current_count);
    int leaf = node / cluster.network.nodes_per_leaf;
    if (first_leaf < 0) first_leaf = leaf;
    if (leaf != first_leaf) placement.cross_leaf = true;
  }
  placement.nodes = nodes;
  return placement;
}

std::array<GroupPlacement, graph::kNumGroupKinds> rank_group_placements(const graph::Graph& graph,
                                                                        const ClusterSpec& cluster,
                                                                        int rank) {
  std::array<GroupPlacement, graph::kNumGroupKinds> placements;
  for (int kind = 0; kind < graph::kNumGroupKinds; ++kind) {
    const int group_id = graph.group_id(rank, graph::GroupKind(kind));
    if (group_id >= 0) placements[kind] = place_group(cluster, graph.groups[group_id].ranks);
  }
  return placements;
}

double bandwidth_efficiency(const CollectiveSpec& collective, double bytes) {
  return collective.bw_efficiency_max * bytes / (bytes + collective.bw_half_bytes);
}

double ring_all_reduce_s(const CollectiveSpec& collective, int members, double bytes, double link_bytes_per_s,
                         double latency_s) {
  if (members <= 1) return 0;
  const double fraction = 2.0 * (members - 1) / members;
  return fraction * transfer_s(collective, bytes, bytes, link_bytes_per_s) + 2.0 * (members - 1) * latency_s;
}

double tree_all_reduce_s(const CollectiveSpec& collective, int members, double bytes, double link_bytes_per_s,
                         double latency_s) {
  if (members <= 1) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(members)));
  return 2.0 * transfer_s(collective, bytes, bytes, link_bytes_per_s) + 2.0 * depth * latency_s;
}

double collective_time_s(const ClusterSpec& cluster, graph::CollectiveKind kind, double bytes,
                         const GroupPlacement& placement) {
  if (placement.size <= 1 || bytes <= 0) return 0;
  const double nvlink_latency = cluster.node.nvlink_latency_s;
  const double oversubscription = placement.cross_leaf ? cluster.network.oversubscription : 1.0;
  const double net_latency = cluster.network.latency_s * (placement.cross_leaf ? 2.0 : 1.0);
  if (placement.nodes <= 1) {
    return flat_collective_s(cluster, Link::kNvlink, kind, placement.size, bytes,
                             nvlink_group_bandwidth(cluster.node, placement.size), nvlink_latency);
  }
  // Each GPU drives its own rail; per_node GPUs of one node share the node's NICs.
  const int per_node = placement.per_node;
  const double nvlink_bw = nvlink_group_bandwidth(cluster.node, per_node);
  const double nic_bw_per_gpu = cluster.nic_bandwidth_per_gpu() / oversubscription;
  if (per_node <= 1) {
    return flat_collective_s(cluster, Link::kNetwork, kind, placement.nodes, bytes, nic_bw_per_gpu,
                             net_latency);
  }
  if (kind == graph::CollectiveKind::kAllToAll) {
    // Of each rank's send buffer, (n - per_node)/n leaves the node, (per_node - 1)/n stays on NVLink.
    const double members = placement.size;
    const double off_node = (members - per_node) / members * bytes;
    const double on_node = (per_node - 1) / members * bytes;
    return fastest_line_s(cluster.collective, lines_of(cluster.collective, kind),
                          [&](const CollectiveSpec& curve, const CollectiveLine& line) {
                            // The line (measured inside a node) shapes the NVLink part; the network part
                            // keeps the cluster's efficiency curve and the network's figures.
                            const double network_s =
                                transfer_s(cluster.collective, off_node, bytes / members, nic_bw_per_gpu);
                            const double nvlink_s = transfer_s(curve, on_node, bytes / members,
                                                               line_bandwidth(line, nvlink_bw, per_node));
                            return std::max(network_s, nvlink_s) + (placement.nodes - 1) * net_latency +
                                   (per_node - 1) * nvlink_latency * line.latency_scale +
                                   nvlink_latency * line.call_latency_scale;
                          });
  }
  // Hierarchical: intra-node reduce-scatter/all-gather over NVLink, the 1/per_node shard across nodes.
  using graph::CollectiveKind;
  const double shard = bytes / per_node;
  const double inter =
      flat_collective_s(cluster, Link::kNetwork, kind, placement.nodes, shard, nic_bw_per_gpu, net_latency);
  if (kind == CollectiveKind::kAllReduce) {
    const double intra_rs = flat_collective_s(cluster, Link::kNvlink, CollectiveKind::kReduceScatter,
                                              per_node, bytes, nvlink_bw, nvlink_latency);
    const double intra_ag = flat_collective_s(cluster, Link::kNvlink, CollectiveKind::kAllGather, per_node,
                                              bytes, nvlink_bw, nvlink_latency);
    return intra_rs + inter + intra_ag;
  }
  const double intra =
      flat_collective_s(cluster, Link::kNvlink, kind, per_node, bytes, nvlink_bw, nvlink_latency);
  return intra + inter;
}

double p2p_time_s(const ClusterSpec& cluster, double bytes, int rank_a, int rank_b) {
  if (bytes <= 0) return 0;
  const int node_a = node_of(cluster, rank_a);
  const int node_b = node_of(cluster, rank_b);
  double bandwidth = nvlink_group_bandwidth(cluster.node, 2);
  double latency_s = cluster.node.nvlink_latency_s;
  if (node_a != node_b) {
    const bool cross_leaf =
        node_a / cluster.network.nodes_per_leaf != node_b / cluster.network.nodes_per_leaf;
    bandwidth =
        cluster.network.nic_bandwidth_bytes_per_s / (cross_leaf ? cluster.network.oversubscription : 1);
    latency_s = cluster.network.latency_s * (cross_leaf ? 2.0 : 1.0);
  }
  // Across nodes the network as it is (see Link).
  return fastest_line_s(cluster.collective, node_a == node_b ? cluster.collective.p2p_lines : kNoLines,
                        [&](const CollectiveSpec& curve, const CollectiveLine& line) {
                          return latency_s * (line.latency_scale + line.call_latency_scale) +
                                 transfer_s(curve, bytes, bytes, bandwidth * line.bandwidth_scale);
                        });
}

std::vector<std::string> collective_line_warnings(const graph::Graph& graph, const ClusterSpec& cluster) {
  if (cluster.collective.lines.empty()) return {};
  std::set<std::pair<graph::GroupKind, graph::CollectiveKind>>
      used;  // which collectives each group kind runs
  for (const graph::RankProgram& program : graph.programs) {
    for (const graph::Op& op : program.ops)
      if (op.kind == graph::OpKind::kCollective) used.insert({op.group, op.collective});
  }
  // (GPUs of one node in the group, fitted range) -> the kinds whose lines are outside that range there
  std::map<std::tuple<int, int, int>, std::set<graph::CollectiveKind>> outside;
  for (const graph::CommGroup& group : graph.groups) {
    const GroupPlacement placement = place_group(cluster, group.ranks);
    const int nvlink_members = placement.nodes <= 1 ? placement.size : placement.per_node;
    if (nvlink_members < 2) continue;  // no NVLink phase
    for (const auto& [group_kind, kind] : used) {
      if (group_kind != group.kind) continue;
      for (const CollectiveLine& line : lines_of(cluster.collective, kind)) {
        if (line.fitted_members_max > 0 &&
            (nvlink_members < line.fitted_members_min || nvlink_members > line.fitted_members_max))
          outside[{nvlink_members, line.fitted_members_min, line.fitted_members_max}].insert(kind);
      }
    }
  }
  std::vector<std::string> warnings;
  for (const auto& [where, kinds] : outside) {
    const auto& [members, fitted_min, fitted_max] = where;
    std::vector<std::string> names;
    for (graph::CollectiveKind kind : kinds) names.push_back(graph::to_string(kind));
    warnings.push_back(fmt::format(
        "{} run over {} GPUs of a node, outside the {} ranks their collective lines were fitted over: "
        "those times extrapolate the fit (docs/SIMULATOR.md \"Collective time by group size\": up to 61 % "
        "off held out); sweep that group size too (bench/gpu/group_size_sweep.sh) and calibrate again",
        fmt::join(names, ", "), members,
        fitted_min == fitted_max ? fmt::format("{}", fitted_min)
                                 : fmt::format("{}-{}", fitted_min, fitted_max)));
  }
  return warnings;
}

}  // namespace calo::sim
