// Where each rank runs: a pipeline stage -> GPU order (parallel::Layout::stage_gpus) moves stages onto other
// GPUs of their node, which changes the speed, inlet, power cap, clock lock and airflow slot each rank sees.
#pragma once

#include "parallel/layout.h"
#include "sim/sim_options.h"

namespace calo::sim {

/// `options` with its per-GPU vectors (indexed by GPU: the rank Megatron's order puts there) turned per rank:
/// each rank takes the speed, inlet offset, power cap, clock lock and node slot of the GPU `layout`'s
/// stage_gpus puts it on. Unchanged without a stage -> GPU order.
SimOptions options_per_rank(const SimOptions& options, const parallel::Layout& layout, int node_gpus);

/// Whether the GPUs of pipeline positions `a` and `b` may trade stages without changing the network: both in
/// one node, or each stage filling whole nodes.
bool stage_move_keeps_network(const parallel::Layout& layout, int node_gpus, int a, int b);

/// Throws InputError naming the stage when layout.stage_gpus moves a stage across nodes in a way that would
/// change the network (the simulator keeps each rank's place in it).
void check_stage_moves(const parallel::Layout& layout, int node_gpus);

}  // namespace calo::sim
