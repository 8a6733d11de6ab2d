#include "parallel/rank_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "core/enum_names.h"
#include "core/error.h"

namespace calo::parallel {

RankMap::RankMap(const Layout& layout)
    : tp_(layout.tp),
      cp_(layout.cp),
      dp_(layout.dp),
      pp_(layout.pp),
      ep_(layout.ep),
      shard_(layout.shard_size()) {
  require_input(tp_ >= 1 && cp_ >= 1 && dp_ >= 1 && pp_ >= 1 && ep_ >= 1,
                fmt::format("rank map: sizes must be >= 1 (tp={}, cp={}, dp={}, pp={}, ep={})", tp_, cp_, dp_,
                            pp_, ep_));
  require_input((dp_ * cp_) % ep_ == 0,
                fmt::format("rank map: ep={} does not divide dp x cp = {} x {}", ep_, dp_, cp_));
  require_input(shard_ >= 1 && dp_ % shard_ == 0,
                fmt::format("rank map: shard group {} does not divide dp={}", shard_, dp_));
}

RankCoord RankMap::coord(int rank) const {
  if (rank < 0 || rank >= world_size()) {
    throw std::out_of_range(fmt::format("rank {} outside world of {}", rank, world_size()));
  }
  RankCoord result;
  result.tp = rank % tp_;
  result.cp = (rank / tp_) % cp_;
  result.dp = (rank / (tp_ * cp_)) % dp_;
  result.pp = rank / (tp_ * cp_ * dp_);
  const int replica = result.cp + cp_ * result.dp;  // ep is carved out of the dp * cp replicas
  result.ep = replica % ep_;
  result.edp = replica / ep_;
  result.shard = result.dp % shard_;
  result.replicate = result.dp / shard_;
  return result;
}

int RankMap::rank_of(int tp_index, int cp_index, int dp_index, int pp_index) const {
  if (tp_index < 0 || tp_index >= tp_ || cp_index < 0 || cp_index >= cp_ || dp_index < 0 || dp_index >= dp_ ||
      pp_index < 0 || pp_index >= pp_) {
    throw std::out_of_range(fmt::format("coordinates tp={} cp={} dp={} pp={} outside tp{} cp{} dp{} pp{}",
                                        tp_index, cp_index, dp_index, pp_index, tp_, cp_, dp_, pp_));
  }
  return tp_index + tp_ * (cp_index + cp_ * (dp_index + dp_ * pp_index));
}

int RankMap::group_size(GroupKind kind) const {
  switch (kind) {
    case GroupKind::kTp:
      return tp_;
    case GroupKind::kDp:
      return dp_;
    case GroupKind::kPp:
      return pp_;
    case GroupKind::kEp:
      return ep_;
    case GroupKind::kExpertDp:
      return dp_ * cp_ / ep_;
    case GroupKind::kEmbedding:
      return pp_ > 1 ? 2 : 1;
    case GroupKind::kDpShard:
      return shard_;
    case GroupKind::kDpReplicate:
      return dp_ / shard_;
    case GroupKind::kCp:
      return cp_;
    case GroupKind::kDpCp:
      return dp_ * cp_;
  }
  throw std::logic_error("unknown group kind");
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
      members.push_back(rank_of(at.tp, replica % cp_, replica / cp_, at.pp));
    }
  };
  switch (kind) {
    case GroupKind::kTp:
      for (int index = 0; index < tp_; ++index) members.push_back(rank_of(index, at.cp, at.dp, at.pp));
      break;
    case GroupKind::kDp:
      dp_slice(0, 1, dp_);
      break;
    case GroupKind::kPp:
      for (int index = 0; index < pp_; ++index) members.push_back(rank_of(at.tp, at.cp, at.dp, index));
      break;
    case GroupKind::kEp:
      // Same expert-data-parallel index: replicas edp*ep .. edp*ep + ep-1 (consecutive).
      replica_slice(at.edp * ep_, 1, ep_);
      break;
    case GroupKind::kExpertDp:
      // Same expert-parallel index: replicas ep_index + ep*k (strided by ep).
      replica_slice(at.ep, ep_, dp_ * cp_ / ep_);
      break;
    case GroupKind::kEmbedding:
      if (at.pp == 0 || at.pp == pp_ - 1) {
        members.push_back(rank_of(at.tp, at.cp, at.dp, 0));
        if (pp_ > 1) members.push_back(rank_of(at.tp, at.cp, at.dp, pp_ - 1));
      }
      break;
    case GroupKind::kDpShard:
      // Same replicate index: dp indices replicate*S .. replicate*S + S-1 (consecutive).
      dp_slice(at.replicate * shard_, 1, shard_);
      break;
    case GroupKind::kDpReplicate:
      // Same shard index: dp indices shard + S*k (strided by S).
      dp_slice(at.shard, shard_, dp_ / shard_);
      break;
    case GroupKind::kCp:
      for (int index = 0; index < cp_; ++index) members.push_back(rank_of(at.tp, index, at.dp, at.pp));
      break;
    case GroupKind::kDpCp:
      // cp varies faster than dp in the rank order, so (dp, cp) in this nesting is ascending.
      for (int dp_index = 0; dp_index < dp_; ++dp_index)
        for (int index = 0; index < cp_; ++index) members.push_back(rank_of(at.tp, index, dp_index, at.pp));
      break;
  }
  return members;  // ascending by construction: the varying index is the only one that changes
}

int RankMap::index_in_group(GroupKind kind, int rank) const {
  const RankCoord at = coord(rank);
  switch (kind) {
    case GroupKind::kTp:
      return at.tp;
    case GroupKind::kDp:
      return at.dp;
    case GroupKind::kPp:
      return at.pp;
    case GroupKind::kEp:
      return at.ep;
    case GroupKind::kExpertDp:
      return at.edp;
    case GroupKind::kEmbedding:
      return at.pp == 0 ? 0 : (at.pp == pp_ - 1 ? 1 : -1);
    case GroupKind::kDpShard:
      return at.shard;
    case GroupKind::kDpReplicate:
      return at.replicate;
    case GroupKind::kCp:
      return at.cp;
    case GroupKind::kDpCp:
      return at.cp + cp_ * at.dp;
  }
  throw std::logic_error("unknown group kind");
}

std::vector<std::vector<int>> RankMap::all_groups(GroupKind kind) const {
  std::vector<std::vector<int>> groups;
  if (kind == GroupKind::kEmbedding && pp_ == 1) return groups;
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
