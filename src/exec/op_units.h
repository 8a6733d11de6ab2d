// The registry both backends keep: one unit (prepare / run / verify) per graph::OpKind.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "graph/graph.h"

namespace calo::exec {

/// A backend's op units indexed by graph::OpKind (send and receive share the point-to-point unit).
template <typename Unit>
class OpUnits {
 public:
  /// Takes one unit per kind family; the kinds' order lives here alone.
  constexpr OpUnits(const Unit& gemm, const Unit& attention, const Unit& elementwise, const Unit& collective,
                    const Unit& point_to_point, const Unit& optimizer)
      : by_kind_{&gemm, &attention, &elementwise, &collective, &point_to_point, &point_to_point, &optimizer} {
    using graph::OpKind;
    static_assert(static_cast<int>(OpKind::kGemm) == 0 && static_cast<int>(OpKind::kAttention) == 1 &&
                      static_cast<int>(OpKind::kElementwise) == 2 &&
                      static_cast<int>(OpKind::kCollective) == 3 && static_cast<int>(OpKind::kSend) == 4 &&
                      static_cast<int>(OpKind::kRecv) == 5 && static_cast<int>(OpKind::kOptimizer) == 6 &&
                      graph::kNumOpKinds == 7,
                  "OpUnits lists the units in graph::OpKind's order: update it with the enum");
  }
  /// The unit that prepares, runs and verifies ops of `kind`.
  constexpr const Unit& operator[](graph::OpKind kind) const {
    return *by_kind_[static_cast<std::size_t>(kind)];
  }

  /// The rank's `op_index`-th op prepared by its kind's unit, its inputs seeded by the run's seed, the rank
  /// and the index (Context: config.seed and rank; Op: rank_op, index and unit).
  template <typename Op, typename Context>
  std::unique_ptr<Op> prepare(Context& context, const graph::RankOp& rank_op, int op_index) const {
    auto prepared = std::make_unique<Op>();
    prepared->rank_op = rank_op;
    prepared->index = op_index;
    prepared->unit = &(*this)[rank_op.op.kind];
    const std::uint64_t seed = context.config.seed ^ (static_cast<std::uint64_t>(context.rank) << 40) ^
                               static_cast<std::uint64_t>(op_index);
    prepared->unit->prepare(context, *prepared, seed);
    return prepared;
  }

 private:
  std::array<const Unit*, graph::kNumOpKinds> by_kind_;
};

}  // namespace calo::exec
