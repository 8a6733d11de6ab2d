// How far a cluster's figures can be trusted: a datasheet preset or one fitted to measured runs, the fit's
// own held-out error, and the calibrated sibling of an uncalibrated preset. `calo plan`, `calo sim` and
// `calo cluster show` print it so a user knows which preset to believe (docs/SIMULATOR.md "Calibration").
#pragma once

#include <string>

#include "sim/cluster.h"

namespace calo::sim {

/// Where a cluster's parameters come from and how well they held on runs they were not fitted to.
struct ClusterTrust {
  bool calibrated = false;        ///< fitted by `calo calibrate` (the cluster carries `calibration`)
  int runs = 0;                   ///< measured training runs the fit used (step time, power, energy, heat)
  int thermal_runs = 0;           ///< long records the fit used for the heat model only (`role: thermal`)
  int held_out = 0;               ///< runs of its leave-one-out check
  double worst_step_error = 0;    ///< largest |predicted / measured - 1| of step time over the held-out runs
  double worst_energy_error = 0;  ///< the same for energy per step
  int refit_runs = 0;      ///< measured runs of its refits (`calibration.refits`, e.g. a host's layouts)
  int refit_held_out = 0;  ///< runs of the refits' leave-one-out checks
  double refit_worst_step_error = 0;    ///< largest step-time error over the refits' held-out runs
  double refit_worst_energy_error = 0;  ///< the same for energy per step
  std::string
      calibrated_sibling;  ///< for an uncalibrated preset: "<name>-calibrated" when that preset exists
  std::string summary;     ///< one line for a person
  std::string runs_text;   ///< what the fit used, in few words: "10 runs + 2 thermal"; empty when not fitted
};

/// Reads the provenance of `cluster` (its `calibration` block; the presets for a sibling).
ClusterTrust cluster_trust(const ClusterSpec& cluster);

/// One line on figures under a power cap of `cap_w` below the card's limit: the clock–power exponent they
/// rest on, whether any fit set it, and what the cap does to the highest 20 ms power sample; "" at the card's
/// limit.
std::string power_cap_trust(const ClusterSpec& cluster, double cap_w);

}  // namespace calo::sim
