// The wait stage of a calibration: the power a GPU draws above idle while it waits inside a step (a pipeline
// bubble, a late peer, an exposed collective), fitted to the energy of multi-GPU runs (docs/SIMULATOR.md
// "Power while waiting").
#pragma once

#include <vector>

#include "calibrate/fit_stage.h"
#include "graph/graph.h"

namespace calo::calibrate {

/// A multi-GPU run and its execution graph, as the wait stage fits it.
struct WaitRun {
  const MeasuredRun* run = nullptr;     ///< measured (its energy per step and mean power)
  const graph::Graph* graph = nullptr;  ///< its workload's graph
};

/// Fits `cluster.gpu.wait_power_w` in [0, power limit - idle] to `runs` (least squares of the relative
/// energy-per-step error over runs whose GPUs measured energy) and sets it; the stage lists per run the
/// step, energy and mean-power errors after the fit. Fits nothing, with a note, when no run has a GPU that
/// waits (one GPU, or no energy measured).
StageFit fit_wait_power(const std::vector<WaitRun>& runs, sim::ClusterSpec& cluster);

}  // namespace calo::calibrate
