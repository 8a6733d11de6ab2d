#include "sim/placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace calo::sim {

SimOptions options_per_rank(const SimOptions& options, const parallel::Layout& layout, int node_gpus) {
  if (layout.stage_gpus.empty()) return options;
  SimOptions placed = options;
  const int world = layout.world_size();
  auto place = [&](auto& values) {
    if (values.empty()) return;
    auto by_gpu = values;
    for (int rank = 0; rank < world; ++rank) values[rank] = by_gpu[layout.gpu_of_rank(rank)];
  };
  place(placed.speed_factors);
  place(placed.inlet_offset_c);
  place(placed.power_limit_w);
  place(placed.max_clock_mhz);
  if (placed.slot_of_rank.empty()) {
    for (int rank = 0; rank < world; ++rank) placed.slot_of_rank.push_back(rank % node_gpus);
  }
  place(placed.slot_of_rank);
  return placed;
}

bool stage_move_keeps_network(const parallel::Layout& layout, int node_gpus, int a, int b) {
  const int stage_size = layout.world_size() / layout.pp;
  if (stage_size % node_gpus == 0) return true;
  return stage_size <= node_gpus && a * stage_size / node_gpus == b * stage_size / node_gpus;
}

void check_stage_moves(const parallel::Layout& layout, int node_gpus) {
  for (int stage = 0; stage < static_cast<int>(layout.stage_gpus.size()); ++stage) {
    const int position = layout.stage_gpus[stage];
    require_input(
        stage_move_keeps_network(layout, node_gpus, stage, position),
        fmt::format("stage -> GPU order {}: stage {} would move to the GPUs of pipeline position {} in "
                    "another node of {} GPUs, which changes the network the simulator keeps; move stages "
                    "only within their node (or use stages that fill whole nodes)",
                    fmt::join(layout.stage_gpus, ","), stage, position, node_gpus));
  }
}

}  // namespace calo::sim
