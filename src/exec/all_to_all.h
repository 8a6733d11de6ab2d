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

}  // namespace calo::exec
