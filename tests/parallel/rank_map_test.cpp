// Rank <-> group mapping: Megatron-LM examples, partition properties, and agreement with an independent port
// of Megatron's generic masked-orthogonal group generator (RankGenerator, order tp-cp-ep-dp-pp).
#include "parallel/rank_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <vector>

#include "core/error.h"

namespace calo::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

Layout make_layout(int tp, int pp, int dp, int ep = 1) {
  Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.ep = ep;
  return layout;
}

/// Megatron's generate_masked_orthogonal_rank_groups written out: dimensions in `sizes` (fastest first); the
/// masked dimensions vary inside a group, the others select the group.
Groups masked_orthogonal_groups(const std::vector<int>& sizes, const std::vector<bool>& mask) {
  std::vector<int> strides(sizes.size());
  int world = 1;
  for (size_t dim = 0; dim < sizes.size(); ++dim) {
    strides[dim] = world;
    world *= sizes[dim];
  }
  std::vector<size_t> inside;
  std::vector<size_t> outside;
  for (size_t dim = 0; dim < sizes.size(); ++dim) (mask[dim] ? inside : outside).push_back(dim);
  auto product = [&](const std::vector<size_t>& dims) {
    int total = 1;
    for (size_t dim : dims) total *= sizes[dim];
    return total;
  };
  // Offset of the index'th combination of `dims` (the first dim varying fastest).
  auto offset = [&](const std::vector<size_t>& dims, int index) {
    int result = 0;
    for (size_t dim : dims) {
      result += (index % sizes[dim]) * strides[dim];
      index /= sizes[dim];
    }
    return result;
  };
  Groups groups;
  for (int group_index = 0; group_index < product(outside); ++group_index) {
    std::vector<int> members;
    for (int member = 0; member < product(inside); ++member) {
      members.push_back(offset(inside, member) + offset(outside, group_index));
    }
    groups.push_back(members);
  }
  return groups;
}

/// Groups as a sorted set of sorted member lists, so generators with different group orders compare equal.
std::set<std::vector<int>> as_set(Groups groups) {
  std::set<std::vector<int>> result;
  for (auto& members : groups) {
    std::sort(members.begin(), members.end());
    result.insert(members);
  }
  return result;
}

TEST(RankMap, MegatronExampleTp2Pp2Dp4) {
  RankMap map(make_layout(2, 2, 4));
  ASSERT_EQ(map.world_size(), 16);
  EXPECT_EQ(map.all_groups(GroupKind::kTp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(map.all_groups(GroupKind::kPp),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(map.all_groups(GroupKind::kDp),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
}

TEST(RankMap, MegatronDocstringExampleTp2Pp4) {
  // initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4 -> dp 2.
  RankMap map(make_layout(2, 4, 2));
  EXPECT_EQ(map.all_groups(GroupKind::kDp),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(map.all_groups(GroupKind::kPp),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(map.group(GroupKind::kTp, 7), (std::vector<int>{6, 7}));
}

// The tied-embedding group (first and last stage of one (tp, dp) position), enumerated here for graph::.
TEST(RankMap, EmbeddingGroupsJoinFirstAndLastStage) {
  RankMap map(make_layout(2, 3, 2));  // rank = tp + 2 * (dp + 2 * pp)
  EXPECT_EQ(map.all_groups(GroupKind::kEmbedding), (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}}));
  EXPECT_EQ(map.group(GroupKind::kEmbedding, 9), (std::vector<int>{1, 9}));
  EXPECT_TRUE(map.group(GroupKind::kEmbedding, 5).empty());  // a middle stage has none
  EXPECT_EQ(map.index_in_group(GroupKind::kEmbedding, 9), 1);
  EXPECT_EQ(map.index_in_group(GroupKind::kEmbedding, 5), -1);
  EXPECT_EQ(map.group_size(GroupKind::kEmbedding), 2);
  EXPECT_TRUE(RankMap(make_layout(2, 1, 2)).all_groups(GroupKind::kEmbedding).empty());
  EXPECT_STREQ(to_string(GroupKind::kEmbedding), "embedding");
}

TEST(RankMap, ExpertGroupsCarveEpOutOfDp) {
  RankMap map(make_layout(2, 1, 4, 2));  // rank = tp + 2 * dp; dp = ep + 2 * edp
  EXPECT_EQ(map.all_groups(GroupKind::kEp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(map.all_groups(GroupKind::kExpertDp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  RankMap wide(make_layout(1, 1, 8, 4));
  EXPECT_EQ(wide.all_groups(GroupKind::kEp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(wide.all_groups(GroupKind::kExpertDp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  RankCoord coord = wide.coord(6);
  EXPECT_EQ(coord.dp, 6);
  EXPECT_EQ(coord.ep, 2);
  EXPECT_EQ(coord.edp, 1);
}

TEST(RankMap, EveryGroupKindPartitionsTheWorld) {
  const GroupKind kinds[] = {GroupKind::kTp, GroupKind::kDp, GroupKind::kPp, GroupKind::kEp,
                             GroupKind::kExpertDp};
  for (int tp : {1, 2, 4}) {
    for (int pp : {1, 3, 4}) {
      for (int dp : {1, 2, 6, 8}) {
        for (int ep : {1, 2, 4}) {
          if (dp % ep != 0) continue;
          RankMap map(make_layout(tp, pp, dp, ep));
          for (GroupKind kind : kinds) {
            SCOPED_TRACE(testing::Message() << "tp" << tp << " pp" << pp << " dp" << dp << " ep" << ep << " "
                                            << to_string(kind));
            std::vector<int> seen(map.world_size(), 0);
            Groups groups = map.all_groups(kind);
            EXPECT_EQ(static_cast<int>(groups.size()) * map.group_size(kind), map.world_size());
            for (const auto& members : groups) {
              ASSERT_EQ(static_cast<int>(members.size()), map.group_size(kind));
              EXPECT_TRUE(std::is_sorted(members.begin(), members.end()));
              for (size_t position = 0; position < members.size(); ++position) {
                int rank = members[position];
                ++seen[rank];
                EXPECT_EQ(map.group(kind, rank), members);
                EXPECT_EQ(map.index_in_group(kind, rank), static_cast<int>(position));
              }
            }
            for (int count : seen) EXPECT_EQ(count, 1);
          }
        }
      }
    }
  }
}

TEST(RankMap, CoordinatesRoundTrip) {
  RankMap map(make_layout(4, 3, 6, 3));
  for (int rank = 0; rank < map.world_size(); ++rank) {
    RankCoord at = map.coord(rank);
    EXPECT_EQ(map.rank_of(at.tp, at.dp, at.pp), rank);
    EXPECT_EQ(at.dp, at.ep + 3 * at.edp);
  }
  EXPECT_THROW(map.coord(map.world_size()), std::out_of_range);
  EXPECT_THROW(map.rank_of(4, 0, 0), std::out_of_range);
}

TEST(RankMap, MatchesMegatronRankGenerator) {
  for (int tp : {1, 2, 8}) {
    for (int pp : {1, 2, 4}) {
      for (int dp : {1, 4, 8}) {
        for (int ep : {1, 2, 4}) {
          if (dp % ep != 0) continue;
          SCOPED_TRACE(testing::Message() << "tp" << tp << " pp" << pp << " dp" << dp << " ep" << ep);
          RankMap map(make_layout(tp, pp, dp, ep));
          // Dense generator: order tp-cp-ep-dp-pp with cp = ep = 1.
          const std::vector<int> dense = {tp, 1, 1, dp, pp};
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kTp)),
                    as_set(masked_orthogonal_groups(dense, {true, false, false, false, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kDp)),
                    as_set(masked_orthogonal_groups(dense, {false, false, false, true, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kPp)),
                    as_set(masked_orthogonal_groups(dense, {false, false, false, false, true})));
          // Expert generator: expert tp = tp, ep, expert dp = dp / ep, same order.
          const std::vector<int> expert = {tp, 1, ep, dp / ep, pp};
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kEp)),
                    as_set(masked_orthogonal_groups(expert, {false, false, true, false, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kExpertDp)),
                    as_set(masked_orthogonal_groups(expert, {false, false, false, true, false})));
        }
      }
    }
  }
}

TEST(RankMap, HybridShardGroupsAreNeighbouringDpRanks) {
  Layout layout = make_layout(2, 2, 4);  // rank = tp + 2 * (dp + 4 * pp); dp = shard + 2 * replicate
  layout.zero_stage = 3;
  layout.fsdp_shard_size = 2;
  RankMap map(layout);
  EXPECT_EQ(map.group_size(GroupKind::kDpShard), 2);
  EXPECT_EQ(map.group_size(GroupKind::kDpReplicate), 2);
  EXPECT_EQ(map.all_groups(GroupKind::kDpShard),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(map.all_groups(GroupKind::kDpReplicate),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  const RankCoord at = map.coord(6);  // tp 0, dp 3, pp 0
  EXPECT_EQ(at.shard, 1);
  EXPECT_EQ(at.replicate, 1);
  EXPECT_STREQ(to_string(GroupKind::kDpShard), "dp_shard");
  EXPECT_STREQ(to_string(GroupKind::kDpReplicate), "dp_replicate");
  // Megatron's generator with dp split into (shard fastest, replicate): the same groups.
  const std::vector<int> sizes = {2, 1, 1, 2, 2, 2};  // tp, cp, ep, shard, replicate, pp
  EXPECT_EQ(as_set(map.all_groups(GroupKind::kDpShard)),
            as_set(masked_orthogonal_groups(sizes, {false, false, false, true, false, false})));
  EXPECT_EQ(as_set(map.all_groups(GroupKind::kDpReplicate)),
            as_set(masked_orthogonal_groups(sizes, {false, false, false, false, true, false})));
  // Without hybrid sharding the shard group is the dp group and replicate groups are single ranks.
  RankMap full(make_layout(2, 1, 4));
  EXPECT_EQ(full.all_groups(GroupKind::kDpShard), full.all_groups(GroupKind::kDp));
  EXPECT_EQ(full.group_size(GroupKind::kDpReplicate), 1);
}

TEST(RankMap, ShardGroupsPartitionTheWorld) {
  for (int dp : {2, 4, 8, 12}) {
    for (int shard = 1; shard <= dp; ++shard) {
      if (dp % shard != 0) continue;
      Layout layout = make_layout(2, 3, dp);
      layout.zero_stage = 3;
      layout.fsdp_shard_size = shard;
      RankMap map(layout);
      for (GroupKind kind : {GroupKind::kDpShard, GroupKind::kDpReplicate}) {
        SCOPED_TRACE(testing::Message() << "dp" << dp << " S" << shard << " " << to_string(kind));
        std::vector<int> seen(map.world_size(), 0);
        for (const auto& members : map.all_groups(kind)) {
          ASSERT_EQ(static_cast<int>(members.size()), map.group_size(kind));
          for (size_t position = 0; position < members.size(); ++position) {
            ++seen[members[position]];
            EXPECT_EQ(map.group(kind, members[position]), members);
            EXPECT_EQ(map.index_in_group(kind, members[position]), static_cast<int>(position));
          }
        }
        for (int count : seen) EXPECT_EQ(count, 1);
      }
      // A shard group and a replicate group of one rank meet in that rank only; together they span dp.
      for (int rank = 0; rank < map.world_size(); ++rank) {
        std::vector<int> both;
        const auto shard_members = map.group(GroupKind::kDpShard, rank);
        const auto replicate_members = map.group(GroupKind::kDpReplicate, rank);
        std::set_intersection(shard_members.begin(), shard_members.end(), replicate_members.begin(),
                              replicate_members.end(), std::back_inserter(both));
        EXPECT_EQ(both, std::vector<int>{rank});
      }
    }
  }
}

TEST(RankMap, RejectsEpNotDividingDp) {
  EXPECT_THROW(RankMap(make_layout(1, 1, 6, 4)), InputError);
}

Layout make_cp_layout(int tp, int cp, int pp, int dp) {
  Layout layout = make_layout(tp, pp, dp);
  layout.cp = cp;
  return layout;
}

}  // namespace
TEST(RankMap, ContextParallelMatchesMegatronRankGenerator) {
  // Megatron-LM's dense generator with cp: order tp-cp-ep-dp-pp; "dp-cp" is the data-parallel group with
  // context parallel (gradient reduction), "cp" the ring.
  for (int tp : {1, 2, 4}) {
    for (int cp : {2, 3, 4}) {
      for (int pp : {1, 2}) {
        for (int dp : {1, 2, 3}) {
          SCOPED_TRACE(testing::Message() << "tp" << tp << " cp" << cp << " pp" << pp << " dp" << dp);
          RankMap map(make_cp_layout(tp, cp, pp, dp));
          EXPECT_EQ(map.world_size(), tp * cp * pp * dp);
          const std::vector<int> dense = {tp, cp, 1, dp, pp};
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kTp)),
                    as_set(masked_orthogonal_groups(dense, {true, false, false, false, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kCp)),
                    as_set(masked_orthogonal_groups(dense, {false, true, false, false, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kDp)),
                    as_set(masked_orthogonal_groups(dense, {false, false, false, true, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kDpCp)),
                    as_set(masked_orthogonal_groups(dense, {false, true, false, true, false})));
          EXPECT_EQ(as_set(map.all_groups(GroupKind::kPp)),
                    as_set(masked_orthogonal_groups(dense, {false, false, false, false, true})));
          for (GroupKind kind : {GroupKind::kCp, GroupKind::kDpCp}) {
            std::vector<int> seen(map.world_size(), 0);
            for (const auto& members : map.all_groups(kind)) {
              ASSERT_EQ(static_cast<int>(members.size()), map.group_size(kind));
              EXPECT_TRUE(std::is_sorted(members.begin(), members.end()));
              for (size_t position = 0; position < members.size(); ++position) {
                ++seen[members[position]];
                EXPECT_EQ(map.index_in_group(kind, members[position]), static_cast<int>(position));
                EXPECT_EQ(map.group(kind, members[position]), members);
              }
            }
            for (int count : seen) EXPECT_EQ(count, 1);
          }
          for (int rank = 0; rank < map.world_size(); ++rank) {
            const RankCoord at = map.coord(rank);
            EXPECT_EQ(map.rank_of(at.tp, at.cp, at.dp, at.pp), rank);
          }
        }
      }
    }
  }
}

TEST(RankMap, ExpertGroupsSpanContextParallelAsMegatronCoresExpertGenerator) {
  // Megatron-Core's expert rank generator (0.10+, expert tensor parallel = tp): order tp-cp-ep-dp-pp with cp
  // folded into the expert dims, sizes {tp, 1, ep, dp * cp / ep, pp}: ep is carved out of the dp * cp
  // replicas.
  for (int tp : {1, 2}) {
    for (int cp : {2, 4}) {
      for (int pp : {1, 2}) {
        for (int dp : {1, 2, 4}) {
          for (int ep : {1, 2, 4, 8}) {
            if ((dp * cp) % ep != 0) continue;
            SCOPED_TRACE(testing::Message()
                         << "tp" << tp << " cp" << cp << " pp" << pp << " dp" << dp << " ep" << ep);
            Layout layout = make_cp_layout(tp, cp, pp, dp);
            layout.ep = ep;
            RankMap map(layout);
            const std::vector<int> expert = {tp, 1, ep, dp * cp / ep, pp};
            EXPECT_EQ(as_set(map.all_groups(GroupKind::kEp)),
                      as_set(masked_orthogonal_groups(expert, {false, false, true, false, false})));
            EXPECT_EQ(as_set(map.all_groups(GroupKind::kExpertDp)),
                      as_set(masked_orthogonal_groups(expert, {false, false, false, true, false})));
            for (int rank = 0; rank < map.world_size(); ++rank) {
              EXPECT_EQ(map.coord(rank).ep, layout.ep_index(rank));
              EXPECT_EQ(map.index_in_group(GroupKind::kEp, rank), layout.ep_index(rank));
            }
          }
        }
      }
    }
  }
  // tp1 cp2 dp2 ep4: the four replicas (cp 0, dp 0), (1, 0), (0, 1), (1, 1) are one expert group.
  Layout layout = make_cp_layout(1, 2, 1, 2);
  layout.ep = 4;
  EXPECT_EQ(RankMap(layout).group(GroupKind::kEp, 3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(RankMap(layout).group_size(GroupKind::kExpertDp), 1);
  layout.ep = 8;
  EXPECT_THROW(RankMap{layout}, InputError);
}

TEST(RankMap, ContextParallelRankOrderByHand) {
  // tp2 cp2 dp2 pp1: rank = tp + 2 (cp + 2 dp): the cp ring of rank 1 is {1, 3}; its dp-cp group {1, 3, 5,
  // 7}.
  RankMap map(make_cp_layout(2, 2, 1, 2));
  EXPECT_EQ(map.group(GroupKind::kCp, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(map.group(GroupKind::kDp, 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(map.group(GroupKind::kDpCp, 1), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(map.group(GroupKind::kTp, 6), (std::vector<int>{6, 7}));
  EXPECT_STREQ(to_string(GroupKind::kCp), "cp");
  EXPECT_STREQ(to_string(GroupKind::kDpCp), "dp-cp");
}

}  // namespace calo::parallel
