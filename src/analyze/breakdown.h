// Per-rank kernel breakdown: time per kernel category, and communication split into exposed and overlapped
// time by interval union against compute kernels (formulas: docs/METRICS.md "Kernel breakdown").
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "analyze/kernel_category.h"

namespace calo::analyze {

/// One GPU kernel interval, whatever produced it (ingested trace, executor spans).
struct KernelInterval {
  int32_t lane = 0;                                  ///< rank/device index the kernel ran on
  KernelCategory category = KernelCategory::kOther;  ///< its category
  int64_t t_begin_ns = 0;                            ///< begin
  int64_t t_end_ns = 0;                              ///< end (>= begin)
  double message_bytes = 0;  ///< collective message size (nccl-tests convention), 0 unknown
  int32_t group_size = 0;    ///< collective group size, 0 unknown
};

/// Breakdown of one lane (one rank's GPU).
struct LaneBreakdown {
  int32_t lane = 0;                                      ///< lane index
  std::array<double, kKernelCategoryCount> busy_s{};     ///< sum of kernel durations per category, s
  std::array<int64_t, kKernelCategoryCount> count{};     ///< kernels per category
  std::array<double, kKernelCategoryCount> exposed_s{};  ///< comm: time not covered by any compute kernel, s
  std::array<double, kKernelCategoryCount> overlapped_s{};  ///< comm: time covered by compute kernels, s
  std::array<double, kKernelCategoryCount>
      algbw_gbps{};  ///< comm: sum bytes / sum duration of sized kernels, GB/s
  std::array<double, kKernelCategoryCount> busbw_gbps{};  ///< comm: algbw scaled by the bus factor, GB/s
  double compute_union_s = 0;       ///< measure of the union of compute kernel intervals, s
  double comm_union_s = 0;          ///< measure of the union of comm kernel intervals, s
  double comm_exposed_union_s = 0;  ///< measure of (comm union minus compute union), s
  double gpu_busy_union_s = 0;      ///< measure of the union of all kernels, s
  double window_s = 0;              ///< last kernel end minus first kernel begin, s
};

/// nccl-tests bus-bandwidth factor: AllReduce 2(n-1)/n, AllGather/ReduceScatter/AllToAll (n-1)/n, else 1.
double bus_bandwidth_factor(KernelCategory category, int32_t group_size);

/// Sorted, disjoint union of [begin, end) intervals.
std::vector<std::pair<int64_t, int64_t>> interval_union(std::vector<std::pair<int64_t, int64_t>> intervals);

/// Length of the overlap of [begin, end) with a sorted disjoint union (binary search), ns.
int64_t overlap_with_union(const std::vector<std::pair<int64_t, int64_t>>& merged, int64_t begin,
                           int64_t end);

/// Breakdown per lane 0..lane_count-1 of `kernels` (any order).
std::vector<LaneBreakdown> kernel_breakdown(std::span<const KernelInterval> kernels, int32_t lane_count);

}  // namespace calo::analyze
