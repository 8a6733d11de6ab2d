// The power-cap controller fitted to a controller probe: a `calo record` run of bench/gpu/controller_probe.py
// (GEMM bursts of known length between idle gaps). The probe's timeline is replayed through the simulator's
// controller law (sim::PowerController) at 1 ms, the simulated driver samples are compared with the measured
// ones, and the controller's response and averaging times that fit them best are kept. Training runs cannot
// pin these two (their leave-one-out fits put the response anywhere in 4-80 ms); bursts of known length do.
// docs/SIMULATOR.md "The controller probe".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/cluster.h"
#include "store/run_store.h"

namespace calo::calibrate {

/// One burst as the probe printed it, on the run's time base.
struct ProbeBurst {
  std::string phase;     ///< "isolated" (after a long idle gap) or "train" (short gaps)
  double target_ms = 0;  ///< the burst length asked for
  double gap_ms = 0;     ///< idle after it
  int64_t begin_ns = 0;  ///< GPU work began, ns since the run's start
  int64_t end_ns = 0;    ///< GPU work ended (synchronized), ns since the run's start
};

/// A recorded controller probe: its bursts, its driver power samples and the two power levels it moves
/// between.
struct ProbeRun {
  std::filesystem::path run_dir;       ///< the run directory
  std::string label;                   ///< its name (the directory's)
  std::string gpu_name;                ///< device 0's product name
  std::vector<ProbeBurst> bursts;      ///< in time order
  std::vector<store::Sample> samples;  ///< device 0's power_sampled_w (the driver's 20 ms samples)
  double idle_w = 0;                   ///< median sample well inside the isolated bursts' gaps
  double full_w = 0;                   ///< busy power before the controller acts: median first-100 ms peak
};

/// Reads `run_dir` (burst lines from stdout.log, samples from run.db); InputError (exit 2) naming the fix
/// for a run without burst lines or driver samples, or of another GPU model than `base_gpu`.
ProbeRun load_probe_run(const std::filesystem::path& run_dir, const sim::GpuSpec& base_gpu);

/// The probe replayed on one GPU's controller: how far its simulated driver samples are from the measured.
struct ProbeReplay {
  double rms_w = 0;           ///< RMS error over every sample during or just after a burst
  double isolated_rms_w = 0;  ///< the same over the isolated bursts only
  double train_rms_w = 0;     ///< the same over the burst trains only
  std::size_t samples = 0;    ///< samples compared
  /// Per measured sample (ProbeRun::samples), the simulated one (over the same window).
  std::vector<double> simulated_w;
};

/// Replays `probe` on `gpu`'s controller (power_control, power_limit_w, clock range, clock_power_exponent):
/// busy ticks draw idle_w + (full_w - idle_w) * (clock / max)^exponent, idle ones idle_w, and each simulated
/// sample is the mean over the sample window ending at the measured sample's time (GPU work starting
/// `lag_ms` after the probe's stamp).
ProbeReplay replay_probe(const ProbeRun& probe, const sim::GpuSpec& gpu, double lag_ms);

/// The controller fitted to a probe.
struct ControllerFit {
  double response_s = 0;       ///< fitted gpu.power_control.response_s
  double average_s = 0;        ///< fitted gpu.power_control.average_s
  double response_low_s = 0;   ///< smallest response within 2 % of the best RMS (any averaging)
  double response_high_s = 0;  ///< largest such response
  double lag_ms = 0;           ///< fitted delay of the GPU work after the probe's stamps
  ProbeReplay fitted;          ///< the replay at the fit
  ProbeReplay base;            ///< the replay with the base GPU's controller
};

/// Fits the response and averaging times to `probe`, every other parameter from `base_gpu`: a log grid of
/// responses (2 ms - 2 s) for each averaging time (0 - 100 ms), then a golden-section refinement.
ControllerFit fit_controller(const ProbeRun& probe, const sim::GpuSpec& base_gpu);

}  // namespace calo::calibrate
