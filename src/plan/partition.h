// Thermal-aware pipeline partition: uneven layers per stage that minimise the simulated step time when some
// GPUs are slower or hotter, without raising the hottest GPU's temperature (docs/PLANNER.md, "Partition").
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "sim/cluster.h"
#include "sim/simulate.h"

namespace calo::plan {

/// The job whose partition is searched; `options` carries the per-GPU speed factors and inlet offsets.
struct PartitionRequest {
  model::ModelSpec model;    ///< the model
  parallel::Layout layout;   ///< resolved layout (pp > 1, vpp = 1); its layers_per_stage is ignored
  sim::ClusterSpec cluster;  ///< the modeled cluster
  sim::SimOptions options;   ///< steps, slow / hot GPUs (as `calo sim` takes them)
};

/// One simulated partition.
struct PartitionFigures {
  std::vector<int> layers_per_stage;  ///< layers of each stage, stage 0 first
  /// Pipeline position whose GPUs run each stage (stage s on the GPUs that rank order gives stage
  /// gpu_of_stage[s]); identity = Megatron's order.
  std::vector<int> gpu_of_stage;
  double iteration_s = 0;  ///< simulated mean step time
  double max_die_c = 0;    ///< hottest die at any step end
  bool fits = true;        ///< fits GPU memory (the rule of `calo bench`)
};

/// The outcome: the reference partitions and the one found.
struct PartitionResult {
  PartitionFigures uniform;  ///< equal layers per stage (the remainder on the middle stages, as resolve does)
  PartitionFigures even_odd;  ///< the study's static split: even stages +1 layer, odd stages -1 (pp even)
  PartitionFigures best;      ///< the partition found (never slower than uniform, never hotter)
  int simulated = 0;          ///< partitions simulated
};

/// Whether the GPUs of pipeline positions `a` and `b` may trade stages without changing the network
/// (sim::stage_move_keeps_network for the request's layout and node).
bool can_swap_positions(const PartitionRequest& request, int a, int b);

/// Simulates `request` with `layers_per_stage` and the stage->GPU order `gpu_of_stage` (empty = identity).
PartitionFigures simulate_partition(const PartitionRequest& request, const std::vector<int>& layers_per_stage,
                                    const std::vector<int>& gpu_of_stage = {});

/// Local search in Megatron's order from the uniform partition and again from the even/odd split (when that
/// is admissible and faster than uniform): each round simulates every move of 1 or 2 layers between two
/// stages and every swap of two stages' GPUs (can_swap_positions), and takes the fastest that keeps the
/// hottest die at or below the uniform partition's; stops when nothing improves. Throws InputError when pp <
/// 2 or vpp > 1.
PartitionResult plan_partition(const PartitionRequest& request);

/// Every partition (each stage >= 1 layer) within `max_deviation` layers of uniform on each stage, with every
/// allowed stage->GPU order when `search_order`, best by step time among those not hotter than uniform (for
/// tests and small cases).
PartitionFigures exhaustive_partition(const PartitionRequest& request, int max_deviation,
                                      bool search_order = false);

}  // namespace calo::plan
