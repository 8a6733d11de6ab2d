// --check's shared pieces (exec/verify.h): the values a collective must produce from the check pattern, in
// the order both backends read them, and the tally of checked values.
#include "exec/verify.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace calo::exec {
namespace {

using Expected = std::vector<std::pair<std::int64_t, double>>;
constexpr std::int64_t kAll = std::numeric_limits<std::int64_t>::max();

Expected expected(graph::CollectiveKind kind, const std::vector<std::int32_t>& members, std::int64_t elements,
                  std::int64_t group_index, std::int64_t max_per_block,
                  const std::vector<std::int64_t>& recv_offsets = {},
                  const std::vector<std::int64_t>& recv_counts = {},
                  const std::vector<std::int64_t>& send_offsets = {}) {
  Expected out;
  for_each_expected_collective_value(kind, members, elements, group_index, recv_offsets, recv_counts,
                                     send_offsets, max_per_block,
                                     [&](std::int64_t at, double want) { out.emplace_back(at, want); });
  return out;
}

TEST(Verify, CheckPatternIsExactAndRepeatsEvery13) {
  EXPECT_EQ(check_value(0, 0), 1.0f);
  EXPECT_EQ(check_value(2, 3), 4.5f);
  EXPECT_EQ(check_value(2, 16), check_value(2, 3));
}

TEST(Verify, ReductionsSumTheMembersPatterns) {
  // Members 1 and 3: all-reduce element 2 = (2 + 1) + (4 + 1) = 8.
  const Expected all_reduce = expected(graph::CollectiveKind::kAllReduce, {1, 3}, 4, 0, kAll);
  ASSERT_EQ(all_reduce.size(), 4u);
  EXPECT_EQ(all_reduce[2], (std::pair<std::int64_t, double>{2, 8.0}));
  // Reduce-scatter: member at group index 1 gets input elements 4..7 summed: element 0 = index 4.
  const Expected scatter = expected(graph::CollectiveKind::kReduceScatter, {1, 3}, 4, 1, kAll);
  EXPECT_EQ(scatter[0].second, check_value(1, 4) + check_value(3, 4));
  // At most 2 values per block (the CUDA backend's snapshot size).
  EXPECT_EQ(expected(graph::CollectiveKind::kAllReduce, {1, 3}, 4, 0, 2).size(), 2u);
}

TEST(Verify, AllGatherAndAllToAllVisitEachMembersBlockInOrder) {
  const Expected gather = expected(graph::CollectiveKind::kAllGather, {0, 5}, 3, 0, 2);
  EXPECT_EQ(
      gather,
      (Expected{
          {0, check_value(0, 0)}, {1, check_value(0, 1)}, {3, check_value(5, 0)}, {4, check_value(5, 1)}}));
  // All-to-all: from member 0, 2 values landing at 10 (its block for me starts at its element 6); from
  // member 1, 1 value at 12 (its block for me starts at 0).
  const Expected exchange =
      expected(graph::CollectiveKind::kAllToAll, {0, 1}, 0, 0, kAll, {10, 12}, {2, 1}, {6, 0});
  EXPECT_EQ(exchange, (Expected{{10, check_value(0, 6)}, {11, check_value(0, 7)}, {12, check_value(1, 0)}}));
}

TEST(Verify, TallyKeepsTheFirstFailurePerOpAndTenOverall) {
  CheckTally tally;
  for (int op = 0; op < 12; ++op) {
    OpCheck check;
    check.count(true, [] { return std::string("never"); });
    check.count(false, [op] { return "op " + std::to_string(op) + " first"; });
    check.count(false, [] { return std::string("second"); });
    EXPECT_EQ(check.failure, "op " + std::to_string(op) + " first");
    tally.add(check);
  }
  tally.add(5, 0, "");
  const CheckReport report = tally.report();
  EXPECT_EQ(report.ops_checked, 13);
  EXPECT_EQ(report.values_checked, 12 * 3 + 5);
  EXPECT_EQ(report.wrong, 24);
  ASSERT_EQ(report.first_failures.size(), 10u);
  EXPECT_EQ(report.first_failures[9], "op 9 first");
}

}  // namespace
}  // namespace calo::exec
