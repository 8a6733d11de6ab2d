// Token split of an all-to-all between the ranks of a group, shared by every backend.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace calo::exec {

/// How many rows (tokens) each member of an all-to-all group receives in the dispatch direction.
struct AllToAllSplit {
  bool expert_parallel = false;    ///< rows follow the tokens of the experts each member hosts
  std::vector<std::int64_t> rows;  ///< rows per member, summing to the total
};

/// Splits `rows_total` rows over `members`: proportional to the tokens of the experts each member hosts when
/// `ep_group` and `expert_tokens` covers all `experts` (a multiple of members), else evenly (remainder
/// first).
AllToAllSplit split_all_to_all(std::int64_t rows_total, std::int64_t members, bool ep_group, int experts,
                               const std::map<int, std::int64_t>& expert_tokens);

/// Per-peer element counts and offsets of one member's all-to-all.
struct AllToAllCounts {
  std::vector<std::int64_t> send_counts;             ///< elements sent to each peer
  std::vector<std::int64_t> recv_counts;             ///< elements received from each peer
  std::vector<std::int64_t> send_offsets;            ///< where each peer's send block starts
  std::vector<std::int64_t> recv_offsets;            ///< where each peer's block lands
  std::vector<std::int64_t> peer_send_offset_to_me;  ///< where my block sits in each sender's send buffer
  std::int64_t send_elements = 0;                    ///< elements sent in all
  std::int64_t recv_elements = 0;                    ///< elements received in all
};

/// Counts of member `me` moving rows of `row_elements` elements: dispatch sends rows[d] to each member d
/// and receives rows[me] from each; `combine` is the way back (sends rows[me], receives rows[d]).
AllToAllCounts all_to_all_counts(const std::vector<std::int64_t>& rows, std::int64_t me,
                                 std::int64_t row_elements, bool combine);

}  // namespace calo::exec
