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

AllToAllCounts all_to_all_counts(const std::vector<std::int64_t>& rows, std::int64_t me,
                                 std::int64_t row_elements, bool combine) {
  const auto members = static_cast<std::int64_t>(rows.size());
  AllToAllCounts counts;
  counts.send_counts.assign(static_cast<size_t>(members), 0);
  counts.recv_counts.assign(static_cast<size_t>(members), 0);
  counts.send_offsets.assign(static_cast<size_t>(members), 0);
  counts.recv_offsets.assign(static_cast<size_t>(members), 0);
  counts.peer_send_offset_to_me.assign(static_cast<size_t>(members), 0);
  for (std::int64_t peer = 0; peer < members; ++peer) {
    const auto index = static_cast<size_t>(peer);
    const std::int64_t send_rows = combine ? rows[static_cast<size_t>(me)] : rows[index];
    const std::int64_t recv_rows = combine ? rows[index] : rows[static_cast<size_t>(me)];
    counts.send_counts[index] = send_rows * row_elements;
    counts.recv_counts[index] = recv_rows * row_elements;
    counts.send_offsets[index] = counts.send_elements;
    counts.recv_offsets[index] = counts.recv_elements;
    counts.send_elements += counts.send_counts[index];
    counts.recv_elements += counts.recv_counts[index];
    // Where my block starts in peer's send buffer.
    std::int64_t offset_rows = 0;
    if (combine) {
      offset_rows = me * rows[index];
    } else {
      for (std::int64_t before = 0; before < me; ++before) offset_rows += rows[static_cast<size_t>(before)];
    }
    counts.peer_send_offset_to_me[index] = offset_rows * row_elements;
  }
  return counts;
}

}  // namespace calo::exec
