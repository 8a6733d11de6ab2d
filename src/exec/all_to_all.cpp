#include "exec/all_to_all.h"

#include <cmath>

namespace calo::exec {

AllToAllSplit split_all_to_all(std::int64_t rows_total, std::int64_t members, bool ep_group, int experts,
                               const std::map<int, std::int64_t>& expert_tokens) {
  AllToAllSplit split;
  split.rows.assign(static_cast<size_t>(members), rows_total / members);
  std::vector<std::int64_t>& rows = split.rows;
  split.expert_parallel =
      ep_group && experts > 0 && static_cast<int>(expert_tokens.size()) == experts && experts % members == 0;
  if (split.expert_parallel) {
    std::vector<double> tokens(static_cast<size_t>(members), 0.0);
    double all_tokens = 0;
    for (const auto& [expert, count] : expert_tokens) {
      tokens[static_cast<size_t>(expert / (experts / members))] += static_cast<double>(count);
      all_tokens += static_cast<double>(count);
    }
    std::int64_t assigned = 0;
    for (std::int64_t peer = 0; peer < members; ++peer) {
      rows[static_cast<size_t>(peer)] = static_cast<std::int64_t>(
          std::floor(static_cast<double>(rows_total) * tokens[static_cast<size_t>(peer)] / all_tokens));
      assigned += rows[static_cast<size_t>(peer)];
    }
    for (std::int64_t peer = 0; assigned < rows_total; peer = (peer + 1) % members, ++assigned)
      ++rows[static_cast<size_t>(peer)];
  } else {
    for (std::int64_t peer = 0; peer < rows_total % members; ++peer) ++rows[static_cast<size_t>(peer)];
  }
  return split;
}

}  // namespace calo::exec
