// Does the simulated power follow the measured power over time? Each GPU's power over a run's measured steps
// in 100 ms bins, measured against simulated, the simulated steps laid on the measured steps' times
// (docs/METRICS.md, "Power trace correlation").
#pragma once

#include <cmath>
#include <filesystem>
#include <vector>

#include "sim/cluster.h"
#include "sim/sim_options.h"

namespace calo::calibrate {

/// Width of the bins the power trace correlation compares, s.
inline constexpr double kTraceCorrelationBinS = 0.1;

/// One GPU's measured and simulated power in bins over a run's measured steps.
struct BinnedPower {
  int device = 0;                   ///< measured device index, and the simulated rank it is compared with
  std::vector<double> measured_w;   ///< mean measured power per bin
  std::vector<double> simulated_w;  ///< mean simulated power per bin
  double correlation = NAN;         ///< Pearson r of the two series (NaN: fewer than 3 bins or one constant)
};

/// Simulates the bench run in `run_dir` on `cluster` (as calibrate::simulate_run does, with `options`) and
/// compares each GPU's power over its measured steps in bins of `bin_s`: the measured driver samples (each
/// standing for the time since the one before) against the simulated step traces, each stretched onto its
/// measured step's span, so the comparison is of where power falls inside the steps, not of the step time.
/// Device d is compared with rank d (a run without a stage -> GPU order). InputError for a run calibration
/// cannot simulate or one without power samples.
std::vector<BinnedPower> power_trace_correlation(const std::filesystem::path& run_dir,
                                                 const sim::ClusterSpec& cluster,
                                                 sim::SimOptions options = {},
                                                 double bin_s = kTraceCorrelationBinS);

}  // namespace calo::calibrate
