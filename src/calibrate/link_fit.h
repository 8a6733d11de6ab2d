// Stage "link" of `calo calibrate`: a host's NVLink bandwidth fitted to the whole steps of its multi-GPU runs
// (`calo bench` without op spans or Kineto traces), the compute fitted elsewhere held: the collectives take
// what the steps leave after their compute (docs/SIMULATOR.md, "The 4 x H100 host").
#pragma once

#include <vector>

#include "calibrate/fit_stage.h"
#include "calibrate/measurement.h"
#include "calibrate/wait_fit.h"

namespace calo::calibrate {

/// One multi-GPU run of one node with its graph (the wait stage's pair of measurement and graph).
using LinkRun = WaitRun;

/// Stage "link": node.nvlink_bandwidth_gb_s by least squares of log(simulated / measured) step time over
/// `runs` (each simulated as it was measured, power cap and heat on), written into `cluster`; the collective
/// lines' shapes (cluster.collective) are kept, so the fit scales every collective of the node alike.
/// Residuals per run: step time, energy per step, mean power. A stage with a note and no parameter where
/// `runs` is empty.
StageFit fit_link_from_steps(const std::vector<LinkRun>& runs, sim::ClusterSpec& cluster);

}  // namespace calo::calibrate
