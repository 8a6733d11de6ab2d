// Cost models: compute ops (roofline with shape-dependent efficiency) and communication (ring/tree
// collectives and point-to-point over NVLink inside a node and a rail-optimized fat tree across nodes).
// docs/SIMULATOR.md.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "sim/cluster.h"

namespace calo::sim {

/// Cost of one compute op at the GPU's max clock and speed 1, split so clock and speed can stretch it.
struct ComputeCost {
  double compute_s = 0;   ///< FLOP-bound time at max clock with the op's efficiency (stretches with 1/clock)
  double memory_s = 0;    ///< byte-bound time with the op's bandwidth efficiency (clock-independent)
  double overhead_s = 0;  ///< launch + tail cost
  double ideal_compute_s = 0;  ///< FLOP-bound time at 100 % of peak (for power: utilization = ideal / actual)
  double ideal_memory_s = 0;   ///< byte-bound time at 100 % of HBM bandwidth
  PowerClass power_class = PowerClass::kGemm;  ///< which active-power class the op draws
  /// Duration with the compute part stretched by `compute_stretch` and the rest by `memory_stretch`.
  double duration_s(double compute_stretch, double memory_stretch) const {
    double compute = compute_s * compute_stretch;
    double memory = memory_s * memory_stretch;
    return overhead_s * memory_stretch + (compute > memory ? compute : memory);
  }
};

/// GEMM efficiency: gemm_max * prod over m, n, k of d / (d + gemm_half_dim).
double gemm_efficiency(const ComputeEfficiency& efficiency, double m, double n, double k);
/// Best fraction of the FP8 peak for an FP8 GEMM of `dtype` (kFp8 or kFp8Rowwise): gemm_fp8_max, or for
/// rowwise gemm_fp8_rowwise_max when given; each falls back to the coarser figure (gemm_max last).
double fp8_gemm_max(const ComputeEfficiency& efficiency, graph::DType dtype);
/// Query rows over an attention kernel's whole grid: batch x heads x seq (what sets how many tiles it
/// launches).
double attention_grid_rows(const graph::AttentionShape& shape);
/// Memory-bound efficiency: memory_max * bytes / (bytes + memory_half_bytes).
double memory_efficiency(const ComputeEfficiency& efficiency, double bytes);

/// FlashAttention-2's speed as a fraction of cuDNN's fused attention on H100, which the presets' attention
/// fits measured (calo's CUDA executor runs cuDNN SDPA): PyTorch's SDPA (FlashAttention-2) 329.483 against
/// cuDNN's 631.338 TFLOP/s at batch 1, 24 heads, seq 4608, head dim 128, forward (pytorch/pytorch#142132,
/// nightly 2.6.0.dev20241204, Tritonbench). Applied to forward and backward alike (the backward's ratio is
/// not in that measurement). Not fitted to any run of calo's or any published row.
inline constexpr double kFlashAttention2SpeedOfCudnn = 329.483 / 631.338;

/// Cost of a compute op (GEMM, attention, elementwise, optimizer) on `gpu`. Communication ops get zeros.
ComputeCost compute_cost(const GpuSpec& gpu, const graph::Op& op);

/// Where a communication group sits on the cluster (ranks fill nodes in order: rank / gpus_per_node).
struct GroupPlacement {
  int size = 1;             ///< members
  int nodes = 1;            ///< distinct nodes spanned
  int per_node = 1;         ///< members per node (largest count on one node)
  bool cross_leaf = false;  ///< spans more than one leaf switch (pays oversubscription and extra hops)
};

/// Placement of the sorted global `ranks` of one group.
GroupPlacement place_group(const ClusterSpec& cluster, std::span<const std::int32_t> ranks);

/// Placement of each kind's group that global `rank` of `graph` belongs to, indexed by graph::GroupKind
/// (a kind the rank has no group of keeps the default: one member on one node).
std::array<GroupPlacement, graph::kNumGroupKinds> rank_group_placements(const graph::Graph& graph,
                                                                        const ClusterSpec& cluster, int rank);

/// Bandwidth efficiency of a transfer of `bytes`: bw_efficiency_max * bytes / (bytes + bw_half_bytes).
double bandwidth_efficiency(const CollectiveSpec& collective, double bytes);

/// Ring all-reduce over one flat link class: 2(n-1)/n * S/(B*eff(S)) + 2(n-1)*latency.
double ring_all_reduce_s(const CollectiveSpec& collective, int members, double bytes, double link_bytes_per_s,
                         double latency_s);
/// Double binary tree all-reduce over one flat link class: 2*S/(B*eff(S)) + 2*ceil(log2 n)*latency.
double tree_all_reduce_s(const CollectiveSpec& collective, int members, double bytes, double link_bytes_per_s,
                         double latency_s);

/// Time of a collective of `kind` over a group with `placement`; `bytes` as graph::Op::bytes defines it
/// (all-reduce buffer, all-gather output, reduce-scatter input, per-rank all-to-all send buffer). The kind's
/// collective lines shape its NVLink phases only; network phases keep the network's figures.
double collective_time_s(const ClusterSpec& cluster, graph::CollectiveKind kind, double bytes,
                         const GroupPlacement& placement);

/// One line per (collective kind, GPUs of a node) of `graph` whose NVLink phase runs at a group size outside
/// the range its collective lines were fitted over (CollectiveLine::fitted_members_min/max): that time
/// extrapolates the fit. Empty where every group is inside, or lines record no range.
std::vector<std::string> collective_line_warnings(const graph::Graph& graph, const ClusterSpec& cluster);

/// Time of a point-to-point transfer of `bytes` between global ranks `rank_a` and `rank_b` (the p2p lines
/// inside a node, the network's figures across nodes).
double p2p_time_s(const ClusterSpec& cluster, double bytes, int rank_a, int rank_b);

}  // namespace calo::sim
