// Rank <-> group mapping in Megatron-LM's order tp-cp-ep-dp-pp (tp varies fastest, pp slowest).
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/layout.h"

namespace calo::parallel {

/// Communication groups a rank belongs to (the one definition; graph:: uses it for its collectives).
enum class GroupKind : std::uint8_t {
  kTp,         ///< tensor-parallel group (size tp)
  kDp,         ///< data-parallel group of the dense part (size dp)
  kPp,         ///< pipeline group: the ranks holding the pp stages of one model replica (size pp)
  kEp,         ///< expert-parallel group (size ep, out of the dp * cp replicas): all-to-all token dispatch
  kExpertDp,   ///< expert data-parallel group (size dp * cp / ep): gradient reduction of expert weights
  kEmbedding,  ///< first and last pipeline stage of one (tp, dp) position (tied embedding gradient); pp > 1
               ///< only
  kDpShard,    ///< hybrid sharding: S consecutive dp ranks that shard the parameters (size S = shard_size())
  kDpReplicate,  ///< hybrid sharding: the dp / S ranks holding the same shard (gradient all-reduce)
  kCp,           ///< context-parallel group (size cp): the ring that passes K/V chunks
  kDpCp,  ///< data-parallel group with context parallel (size dp * cp; Megatron-LM's "dp-cp"): gradient
          ///< reduction and ZeRO sharding when cp > 1
};
/// Number of GroupKind values.
inline constexpr int kNumGroupKinds = 10;

/// Coordinates of one rank in the layout.
struct RankCoord {
  int tp = 0;         ///< index within the tensor-parallel group
  int cp = 0;         ///< index within the context-parallel group
  int dp = 0;         ///< data-parallel replica index (0 .. dp-1)
  int ep = 0;         ///< expert-parallel index: (cp + cp_size * dp) % ep
  int edp = 0;        ///< expert data-parallel index: (cp + cp_size * dp) / ep
  int pp = 0;         ///< pipeline stage
  int shard = 0;      ///< index within the hybrid-sharding shard group: dp % S
  int replicate = 0;  ///< index of the shard group (within the replicate group): dp / S
};

/// Maps global ranks to coordinates and groups. rank = tp + tp_size*(cp + cp_size*(dp + dp_size*pp)); experts
/// are carved out of the dp * cp replicas r = cp + cp_size*dp, ep the faster-varying part (r = ep +
/// ep_size*edp), as Megatron-Core's tp-cp-ep-dp-pp generator (its expert groups span dp x cp). Under hybrid
/// sharding the shard index varies fastest within dp (dp = shard + S*replicate), as TorchTitan's
/// [dp_replicate, dp_shard] mesh: a shard group is S neighbouring dp ranks (one node when tp * cp * S fits
/// it).
class RankMap {
 public:
  /// Builds the map for a resolved layout.
  explicit RankMap(const Layout& layout);
  /// Coordinates of `rank` (0 <= rank < world).
  RankCoord coord(int rank) const;
  /// Global rank of coordinates (tp, dp, pp) at cp index 0.
  int rank_of(int tp_index, int dp_index, int pp_index) const {
    return rank_of(tp_index, 0, dp_index, pp_index);
  }
  /// Global rank of coordinates (tp, cp, dp, pp).
  int rank_of(int tp_index, int cp_index, int dp_index, int pp_index) const;
  /// Sorted global ranks of the `kind` group that contains `rank` (includes `rank`); empty for kEmbedding
  /// when `rank` is on neither the first nor the last stage.
  std::vector<int> group(GroupKind kind, int rank) const;
  /// Position of `rank` within its `kind` group (-1: kEmbedding on a middle stage).
  int index_in_group(GroupKind kind, int rank) const;
  /// Number of ranks.
  int world_size() const { return layout_.world_size(); }
  /// Size of every `kind` group (tp, dp, pp, ep, dp * cp / ep, 2 for kEmbedding (1 when pp = 1), S, dp / S,
  /// cp, dp * cp).
  int group_size(GroupKind kind) const;
  /// All `kind` groups, each sorted, ordered by their smallest rank; together they partition the world
  /// (except kEmbedding: the first and last stages only, and no group when pp = 1).
  std::vector<std::vector<int>> all_groups(GroupKind kind) const;

 private:
  /// A rank's position within its group of one kind (-1: none) and that group's size.
  struct Place {
    int index;
    int size;
  };
  /// The place of the rank at `at` in its `kind` group: the one switch over the kinds' arithmetic.
  Place place(GroupKind kind, const RankCoord& at) const;

  Layout layout_;  ///< the layout mapped (its replica and ep indices are the rank map's)
  int shard_;      ///< hybrid-sharding shard group size S (dp when not hybrid)
};

/// Name of a group kind ("tp", "dp", "pp", "ep", "edp", "embedding", "dp_shard", "dp_replicate", "cp",
/// "dp-cp").
const char* to_string(GroupKind kind);

}  // namespace calo::parallel
