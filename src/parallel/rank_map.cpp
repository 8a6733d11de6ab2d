#include "parallel/rank_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "core/enum_names.h"
#include "core/error.h"

namespace calo::parallel {

RankMap::RankMap(const Layout& layout) : layout_(layout), shard_(layout.shard_size()) {
  require_input(layout_.tp >= 1 && layout_.cp >= 1 && layout_.dp >= 1 && layout_.pp >= 1 && layout_.ep >= 1,
                fmt::format("rank map: sizes must be >= 1 (tp={}, cp={}, dp={}, pp={}, ep={})", layout_.tp,
                            layout_.cp, layout_.dp, layout_.pp, layout_.ep));
  require_input(layout.ep_divides_replicas(), fmt::format("rank map: ep={} does not divide dp x cp = {} x {}",
                                                          layout_.ep, layout_.dp, layout_.cp));
  require_input(shard_ >= 1 && layout_.dp % shard_ == 0,
                fmt::format("rank map: shard group {} does not divide dp={}", shard_, layout_.dp));
}

RankCoord RankMap::coord(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw std::out_of_range(fmt::format("rank {} outside world of {}", rank, world_size()));
  }
  RankCoord result;
  result.tp = rank % layout_.tp;
  result.cp = (rank / layout_.tp) % layout_.cp;
  result.dp = (rank / (layout_.tp * layout_.cp)) % layout_.dp;
  result.pp = rank / (layout_.tp * layout_.cp * layout_.dp);
  result.ep = layout_.ep_index(rank);  // ep is carved out of the dp * cp replicas
  result.edp = layout_.replica_index(rank) / layout_.ep;
  result.shard = result.dp % shard_;
  result.replicate = result.dp / shard_;
  return result;
}

int RankMap::rank_of(int tp_index, int cp_index, int dp_index, int pp_index) const {
  if (tp_index < 0 || tp_index >= layout_.tp || cp_index < 0 || cp_index >= layout_.cp || dp_index < 0 ||
      dp_index >= layout_.dp || pp_index < 0 || pp_index >= layout_.pp) {
    throw std::out_of_range(fmt::format("coordinates tp={} cp={} dp={} pp={} outside tp{} cp{} dp{} pp{}",
                                        tp_index, cp_index, dp_index, pp_index, layout_.tp, layout_.cp,
                                        layout_.dp, layout_.pp));
  }
  return tp_index + layout_.tp * (cp_index + layout_.cp * (dp_index + layout_.dp * pp_index));
}

RankMap::Place RankMap::place(GroupKind kind, const RankCoord& at) const {
  switch (kind) {
    case GroupKind::kTp:
      return {at.tp, layout_.tp};
    case GroupKind::kDp:
      return {at.dp, layout_.dp};
    case GroupKind::kPp:
      return {at.pp, layout_.pp};
    case GroupKind::kEp:
      return {at.ep, layout_.ep};
    case GroupKind::kExpertDp:
      return {at.edp, layout_.dp * layout_.cp / layout_.ep};
    case GroupKind::kEmbedding:
      return {at.pp == 0 ? 0 : (at.pp == layout_.pp - 1 ? 1 : -1), layout_.pp > 1 ? 2 : 1};
    case GroupKind::kDpShard:
      return {at.shard, shard_};
    case GroupKind::kDpReplicate:
      return {at.replicate, layout_.dp / shard_};
    case GroupKind::kCp:
      return {at.cp, layout_.cp};
    case GroupKind::kDpCp:
      return {at.cp + layout_.cp * at.dp, layout_.dp * layout_.cp};
  }
  throw std::logic_error("unknown group kind");
}

int RankMap::group_size(GroupKind kind) const {
  return place(kind, RankCoord{}).size;
}

std::vector<int> RankMap::group(GroupKind kind, int rank) const {
  const RankCoord at = coord(rank);
  std::vector<int> members;
  members.reserve(group_size(kind));
  // The ranks at dp indices first, first + stride, ... (count of them), the other coordinates as `rank`'s.
  const auto dp_slice = [&](int first, int stride, int count) {
    for (int index = 0; index < count; ++index)
      members.push_back(rank_of(at.tp, at.cp, first + stride * index, at.pp));
  };
  // The ranks at replica indices first, first + stride, ... (replica = cp_index + cp * dp_index).
  const auto replica_slice = [&](int first, int stride, int count) {
    for (int index = 0; index < count; ++index) {
      const int replica = first + stride * index;
      members.push_back(rank_of(at.tp, replica % layout_.cp, replica / layout_.cp, at.pp));
    }
  };
  switch (kind) {
    case GroupKind::kTp:
      for (int index = 0; index < layout_.tp; ++index) members.push_back(rank_of(index, at.cp, at.dp, at.pp));
      break;
    case GroupKind::kDp:
      dp_slice(0, 1, layout_.dp);
      break;
    case GroupKind::kPp:
      for (int index = 0; index < layout_.pp; ++index) members.push_back(rank_of(at.tp, at.cp, at.dp, index));
      break;
    case GroupKind::kEp:
      // Same expert-data-parallel index: replicas edp*ep .. edp*ep + ep-1 (consecutive).
      replica_slice(at.edp * layout_.ep, 1, layout_.ep);
      break;
    case GroupKind::kExpertDp:
      // Same expert-parallel index: replicas ep_index + ep*k (strided by ep).
      replica_slice(at.ep, layout_.ep, layout_.dp * layout_.cp / layout_.ep);
      break;
    case GroupKind::kEmbedding:
      if (at.pp == 0 || at.pp == layout_.pp - 1) {
        members.push_back(rank_of(at.tp, at.cp, at.dp, 0));
        if (layout_.pp > 1) members.push_back(rank_of(at.tp, at.cp, at.dp, layout_.pp - 1));
      }
      break;
    case GroupKind::kDpShard:
      // Same replicate index: dp indices replicate*S .. replicate*S + S-1 (consecutive).
      dp_slice(at.replicate * shard_, 1, shard_);
      break;
    case GroupKind::kDpReplicate:
      // Same shard index: dp indices shard + S*k (strided by S).
      dp_slice(at.shard, shard_, layout_.dp / shard_);
      break;
    case GroupKind::kCp:
      for (int index = 0; index < layout_.cp; ++index) members.push_back(rank_of(at.tp, index, at.dp, at.pp));
      break;
    case GroupKind::kDpCp:
      // cp varies faster than dp in the rank order, so (dp, cp) in this nesting is ascending.
      for (int dp_index = 0; dp_index < layout_.dp; ++dp_index)
        for (int index = 0; index < layout_.cp; ++index)
          members.push_back(rank_of(at.tp, index, dp_index, at.pp));
      break;
  }
  return members;  // ascending by construction: the varying index is the only one that changes
}

int RankMap::index_in_group(GroupKind kind, int rank) const {
  return place(kind, coord(rank)).index;
}

std::vector<std::vector<int>> RankMap::all_groups(GroupKind kind) const {
  std::vector<std::vector<int>> groups;
  if (kind == GroupKind::kEmbedding && layout_.pp == 1) return groups;
  groups.reserve(world_size() / group_size(kind));
  for (int rank = 0; rank < world_size(); ++rank) {
    if (index_in_group(kind, rank) == 0) groups.push_back(group(kind, rank));
  }
  return groups;  // ordered by smallest member, since each group's first member is its smallest
}

constexpr std::array kGroupKindNames{"tp",        "dp",       "pp",           "ep", "edp",
                                     "embedding", "dp_shard", "dp_replicate", "cp", "dp-cp"};
static_assert(kGroupKindNames.size() == kNumGroupKinds);

const char* to_string(GroupKind kind) {
  return core::enum_name(kind, kGroupKindNames);
}

}  // namespace calo::parallel
