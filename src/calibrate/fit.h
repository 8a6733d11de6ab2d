// Fitting a cluster file to measured runs, one stage per part of the model so that each part is right on its
// own (docs/SIMULATOR.md "Calibration"): idle power; compute efficiency at the clock the GPU actually ran
// (cap off); active power and the power-cap controller (cap on); the thermal RC model from temperature
// curves.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/fit_stage.h"
#include "calibrate/measurement.h"
#include "sim/cluster.h"

namespace calo::calibrate {

/// Everything a fit produced.
struct FitResult {
  sim::ClusterSpec cluster;       ///< base with the fitted parameters
  std::vector<StageFit> stages;   ///< idle, compute, power, thermal
  std::vector<std::string> kept;  ///< parameters no run determined (base values kept)
  /// Per card (device UUID): its thermal resistances / the fitted typical card's (geometric mean 1).
  std::map<std::string, double> card_r_scale;
};

/// The compute efficiency curves (GEMM, attention, memory, kernel overhead) and per-kernel-kind time scales
/// fitted to measured op timings: least squares of log(modeled / measured), weighted by measured time. Curve
/// fields named in `fixed` ("gemm_max", "attention_half_seq", ..., "kernel_overhead_us") keep gpu's value.
sim::ComputeEfficiency fit_op_curves(const std::vector<OpTiming>& ops, const sim::GpuSpec& gpu,
                                     const std::vector<std::string>& fixed = {});

/// Efficiency curves fitted to several runs' op spans, with the clock level each run's ops ran at.
struct OpCurveFit {
  sim::ComputeEfficiency efficiency;  ///< the curves and per-kind time scales
  std::vector<double> clock_levels;   ///< per run: the clock that fits its ops / its NVML clock mean
};

/// fit_op_curves() over `runs` (each run's ops), with one free clock level per run: the NVML clock mean is
/// not the clock each op ran at (the same command on the same card read 1611 and 1756 MHz), so only the ratio
/// of compute-bound to memory-bound op times within a run sets its level. The levels' time-weighted geometric
/// mean is held at 1 (the clock means are right on average, not run by run).
OpCurveFit fit_op_curves_with_clock_levels(const std::vector<std::vector<OpTiming>>& runs,
                                           const sim::GpuSpec& gpu, const std::vector<std::string>& fixed);

/// Curve fields (fit_op_curves keys) `ops` cannot determine: a ceiling without an op of its class, a half
/// point without two distinct sizes of it, attention's grid rows without two of them at one sequence length,
/// the attention backward's fraction without both passes.
std::vector<std::string> undetermined_fields(const std::vector<OpTiming>& ops);

/// The fitted efficiency parameters as ParameterFit rows of `stage` (kernel overhead in us), less `fixed`.
std::vector<ParameterFit> efficiency_parameters(const sim::ComputeEfficiency& base,
                                                const sim::ComputeEfficiency& fitted,
                                                const std::string& stage,
                                                const std::vector<std::string>& fixed = {});

/// What fit_cluster() takes as given.
struct FitSettings {
  /// The power-cap controller's response and averaging times, fitted elsewhere (a controller probe): the
  /// power stage keeps base's and this stage leads the result's stages. Empty stage name: the power stage
  /// fits them.
  StageFit controller;
  /// Runs only the thermal stage fits, besides the fitted runs (load_thermal_run: long soaks, records).
  std::vector<MeasuredRun> thermal_runs;
  /// The stages that fit ("idle", "compute", "power", "wait", "thermal", and "collectives": the Kineto
  /// traces' lines, calibrate()); empty: all. A stage left out keeps the base's parameters (refitting one
  /// part of a calibrated cluster without touching the rest).
  std::vector<std::string> stages;
};

/// The stage names FitSettings::stages takes, in the order they run.
const std::vector<std::string>& stage_names();

/// The sustained peak (hottest 500 ms mean) of the die temperature the RC model replays for `run` from its
/// load start, driven by its measured power, at its temperature samples; NaN without both series.
double replayed_peak_temp_c(const MeasuredRun& run, const sim::ClusterSpec& cluster);

/// Fits `base` to `runs` (every run loaded against base's GPU); stages no run informs say so in their note.
FitResult fit_cluster(const std::vector<MeasuredRun>& runs, const sim::ClusterSpec& base,
                      const FitSettings& settings = {});

/// `fit.cluster` with `run`'s card's thermal scale on every slot; as is for a card no fitted run measured.
sim::ClusterSpec cluster_for_run(const FitResult& fit, const MeasuredRun& run);

}  // namespace calo::calibrate
