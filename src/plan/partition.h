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
  double iteration_s = 0;             ///< simulated mean step time
  double max_die_c = 0;               ///< hottest die at any step end
  bool fits = true;                   ///< fits GPU memory (the rule of `calo bench`)
};

/// The outcome: the reference partitions and the one found.
struct PartitionResult {
  PartitionFigures uniform;  ///< equal layers per stage (the remainder on the middle stages, as resolve does)
  PartitionFigures even_odd;  ///< the study's static split: even stages +1 layer, odd stages -1 (pp even)
  PartitionFigures best;      ///< the partition found (never slower than uniform, never hotter)
  int simulated = 0;          ///< partitions simulated
};

/// Simulates `request` with `layers_per_stage`.
PartitionFigures simulate_partition(const PartitionRequest& request,
                                    const std::vector<int>& layers_per_stage);

/// Local search from the uniform partition: repeatedly takes the best move of 1 or 2 layers between any two
/// stages that lowers the step time and keeps the hottest die at or below the uniform partition's; stops when
/// no move improves. Throws InputError when pp < 2 or vpp > 1.
PartitionResult plan_partition(const PartitionRequest& request);

/// Every partition (each stage >= 1 layer) within `max_deviation` layers of uniform on each stage, best first
/// by step time among those not hotter than uniform (for tests and small cases).
PartitionFigures exhaustive_partition(const PartitionRequest& request, int max_deviation);

/// Per-GPU speed and heat read from a recorded, bench or sim run, in the form SimOptions takes them.
struct GpuConditions {
  std::vector<double> speed_factors;   ///< median SM clock / the fastest GPU's median SM clock
  std::vector<double> inlet_offset_c;  ///< hottest temperature - the coolest GPU's hottest temperature
};

#ifdef CALO_SIM_HAS_STORE
/// Reads every GPU of the run at `run_dir` over the whole run (device idx = global rank). InputError when the
/// run has not `world` GPUs or lacks clock_sm_mhz / temp_gpu_c samples.
GpuConditions conditions_from_run(const std::string& run_dir, int world);
#endif

}  // namespace calo::plan
