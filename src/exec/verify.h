// --check: what both backends (CPU, CUDA) share when they verify an op's result: the input pattern of
// collectives and send/recv, the values a collective must produce from it, and the tally of checked values.
// The CUDA kernels fill buffers with the same pattern (device_check_value in cuda/common.cuh).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

#include "exec/backend.h"
#include "graph/graph.h"

namespace calo::exec {

/// --check input of collectives and send/recv: element `index` of rank `rank`'s buffer (exact in fp32 and
/// bf16 when summed over a group).
inline float check_value(int rank, std::int64_t index) {
  return static_cast<float>(rank + 1) + 0.5f * static_cast<float>(index % 13);
}

/// The verification of one op: values compared, wrong ones, and the first failure's text.
struct OpCheck {
  std::int64_t values = 0;  ///< values compared
  std::int64_t wrong = 0;   ///< values that differ from the expected ones
  std::string failure;      ///< text of the first wrong value, empty if none
  /// Counts one compared value; `describe()` (a callable returning std::string) runs for the first wrong one.
  template <class Describe>
  void count(bool correct, Describe&& describe) {
    ++values;
    if (correct) return;
    ++wrong;
    if (failure.empty()) failure = describe();
  }
};

/// The CheckReport of a backend: ops and values checked, #wrong, the first 10 failures. Thread-safe.
class CheckTally {
 public:
  /// Adds one op's verification of `values` values, `wrong` of them wrong (`failure` describes the first).
  void add(std::int64_t values, std::int64_t wrong, const std::string& failure) {
    std::lock_guard lock(mutex_);
    ++report_.ops_checked;
    report_.values_checked += values;
    report_.wrong += wrong;
    if (wrong > 0 && report_.first_failures.size() < 10) report_.first_failures.push_back(failure);
  }
  /// Adds one op's verification.
  void add(const OpCheck& check) { add(check.values, check.wrong, check.failure); }
  /// The totals so far.
  CheckReport report() const {
    std::lock_guard lock(mutex_);
    return report_;
  }

 private:
  mutable std::mutex mutex_;
  CheckReport report_;
};

/// Calls `visit(output_index, expected_value)` for the checked output values of a collective whose members'
/// inputs hold check_value(member, index): the whole output, or the first `max_per_block` values of each
/// member's block. The order is the order both backends read them in (the CUDA backend snapshots them so).
/// `recv_offsets`, `recv_counts`, `peer_send_offset_to_me` (per member) matter for all-to-all only.
template <class Offsets, class Visit>
void for_each_expected_collective_value(graph::CollectiveKind kind, std::span<const std::int32_t> members,
                                        std::int64_t elements, std::int64_t group_index,
                                        const Offsets& recv_offsets, const Offsets& recv_counts,
                                        std::span<const std::int64_t> peer_send_offset_to_me,
                                        std::int64_t max_per_block, Visit&& visit) {
  const std::int64_t block = std::min(elements, max_per_block);
  switch (kind) {
    case graph::CollectiveKind::kAllReduce:
      for (std::int64_t at = 0; at < block; ++at) {
        double want = 0;
        for (int member : members) want += check_value(member, at);
        visit(at, want);
      }
      break;
    case graph::CollectiveKind::kReduceScatter:
      for (std::int64_t at = 0; at < block; ++at) {
        double want = 0;
        for (int member : members) want += check_value(member, group_index * elements + at);
        visit(at, want);
      }
      break;
    case graph::CollectiveKind::kAllGather:
      for (std::size_t member = 0; member < members.size(); ++member)
        for (std::int64_t at = 0; at < block; ++at)
          visit(static_cast<std::int64_t>(member) * elements + at, check_value(members[member], at));
      break;
    case graph::CollectiveKind::kAllToAll:
      for (std::size_t peer = 0; peer < members.size(); ++peer) {
        const std::int64_t count = std::min<std::int64_t>(recv_counts[peer], max_per_block);
        for (std::int64_t at = 0; at < count; ++at)
          visit(recv_offsets[peer] + at, check_value(members[peer], peer_send_offset_to_me[peer] + at));
      }
      break;
  }
}

}  // namespace calo::exec
