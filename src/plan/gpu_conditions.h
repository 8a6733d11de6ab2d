// Per-GPU speed and heat read from a measured run, for `calo plan partition --from RUN`: speed from the time
// each rank's compute took against the simulator's prediction for the same ops (a heavy stage is not a slow
// GPU), heat from each GPU's hottest temperature against the simulator's prediction at its load; SM clocks
// and raw temperatures only where the run has no op spans (docs/PLANNER.md, "Partition").
#pragma once

#include <string>
#include <vector>

#include "plan/partition.h"

namespace calo::plan {

/// Per-GPU speed and heat in the form SimOptions takes them (indexed by GPU), and where each came from.
struct GpuConditions {
  std::vector<double> speed_factors;   ///< fastest GPU 1; the others their speed relative to it
  std::vector<double> inlet_offset_c;  ///< extra inlet temperature; the coolest GPU 0
  /// Measured compute time / predicted compute time per GPU (op spans only; empty otherwise), before the
  /// fastest is scaled to 1.
  std::vector<double> work_ratio;
  std::string speed_source;  ///< one line: "op spans of 4 ranks against ..." or "median SM clock (...)"
  std::string heat_source;   ///< one line: what the inlet offsets were read from
};

#ifdef CALO_SIM_HAS_STORE
/// Reads every GPU of the run at `run_dir` (device idx = GPU; a bench run's stage -> GPU order maps its ranks
/// onto them) for `request`'s job. InputError when the run has not the request's GPU count, or has neither op
/// spans nor clock_sm_mhz / temp_gpu_c samples.
GpuConditions conditions_from_run(const std::string& run_dir, const PartitionRequest& request);
#endif

}  // namespace calo::plan
