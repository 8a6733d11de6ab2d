// Whether a simulation's error against a measured run is in-sample (its cluster was calibrated on that run)
// or out-of-sample, read from the calibration provenance the sim run stores with its cluster, and which of a
// run's figures stand on a CPU host's placeholder power and heat.
#pragma once

#include <string>
#include <vector>

#include "analyze/metrics.h"

namespace calo::analyze {

/// How a sim run's comparison with a measured run stands to the runs its cluster was calibrated on.
enum class SampleKind {
  kNone,          ///< not a sim run compared with a measured run
  kUncalibrated,  ///< the cluster carries no `calibration` (a stock preset): not fitted to any run
  kInSample,      ///< the measured run is one of the runs the cluster was calibrated on
  kOutOfSample,   ///< the cluster was calibrated on other runs only
};

/// A sim run's SampleKind with the cluster's name and the runs its calibration fitted.
struct CalibrationSample {
  SampleKind kind = SampleKind::kNone;     ///< in- or out-of-sample, uncalibrated, or no comparison
  std::string cluster;                     ///< the sim's cluster name, e.g. "cpu-host-calibrated"
  std::vector<std::string> calibrated_on;  ///< the fitted runs' paths as `calo calibrate` recorded them
};

/// Where `measured` stands to the runs `sim`'s cluster was calibrated on (`calibration.runs`, refits
/// included). A recorded run is `measured` when its `started_unix_ns` and `host` are the run's (written since
/// issue 65); a record without them matches by path (as given or resolved here) or, failing that, by a
/// measured median step time equal to 1e-8.
CalibrationSample calibration_sample(const RunAnalysis& sim, const RunAnalysis& measured);

/// The sample as the verdict says it: "in-sample (the cluster was calibrated on this run)", "out-of-sample
/// (calibrated on runs/a)", "uncalibrated cluster cpu-host (stock figures)"; "" for kNone.
std::string describe_sample(const CalibrationSample& sample);

/// "in-sample", "out-of-sample", "uncalibrated" or "" (kNone): the word JSON outputs carry.
std::string to_string(SampleKind kind);

/// True for a simulation on the cpu-host cluster (core::is_cpu_host_device): its power, energy and heat are
/// the preset's placeholder per-core figures, not a prediction of anything measurable.
bool has_placeholder_power(const RunAnalysis& run);

/// True for a figure (run_figures key) derived from power, energy or temperature: tokens/J, energy per
/// step, power, temperature, SM clock.
bool is_power_or_heat_figure(const std::string& key);

}  // namespace calo::analyze
