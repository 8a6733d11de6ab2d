// `calo calibrate`: loads measured runs, fits a cluster file to them (fit.h), validates the fit by
// leave-one-out, and writes the calibrated cluster with its provenance (runs, fitted and kept parameters,
// residuals, errors).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/controller_probe.h"
#include "calibrate/fit.h"
#include "calibrate/kineto_input.h"
#include "calibrate/measurement.h"

namespace calo::calibrate {

/// Leave-one-out outcome for one run: measured figures and those predicted by a fit made without the run.
struct HeldOutRun {
  std::string label;      ///< the run
  int micro_batch = 0;    ///< its micro-batch (for the direction check across a micro-batch sweep)
  std::string sweep_key;  ///< model and layout without the batch sizes (runs of one sweep share it)
  RunFigures measured;    ///< measured
  RunFigures predicted;   ///< simulated with the fit that excluded it
  std::vector<ParameterFit> parameters;  ///< what the fit that excluded it fitted (every stage)
  bool thermal_only =
      false;  ///< a --thermal-run: only its peak temperature, replayed from its measured power
};

/// Tolerance figure of the thermal-only runs' held-out peak temperature (kept apart from the fitted runs').
inline constexpr const char* kThermalRunsFigure = "peak_temp_c_thermal_runs";

/// How firmly the runs pin one fitted parameter: its value fitted on all runs against the leave-one-out
/// fits'.
struct ParameterSpread {
  std::string key;        ///< cluster-file path (ParameterFit::key)
  std::string unit;       ///< unit of the values
  double fitted = NAN;    ///< fitted on all runs
  double low = NAN;       ///< smallest value over the leave-one-out fits
  double high = NAN;      ///< largest value over the leave-one-out fits
  std::string pinned_by;  ///< the run whose leave-out moves it most; empty when no leave-out moves it
  double without = NAN;   ///< its value in the fit made without pinned_by (NaN when none)
  double shift = 0;       ///< (without - fitted) / |fitted|: the parameter's leave-one-out shift
};

/// One step of a micro-batch sweep in the peak-power direction check: two held-out runs at adjacent sizes.
struct DirectionStep {
  std::string low;           ///< the run at the smaller micro-batch
  std::string high;          ///< the run at the next larger one
  double measured_w = NAN;   ///< measured peak power of high - low
  double predicted_w = NAN;  ///< held-out predicted peak power of high - low
  bool right = false;        ///< both move the same way
};

/// Target of one figure and what leave-one-out achieved.
struct Tolerance {
  std::string figure;     ///< figure name (figure_names())
  std::string unit;       ///< "relative" or "C"
  double target = NAN;    ///< the issue's target (NaN: none)
  double achieved = NAN;  ///< max |error| over held-out runs
  bool met = false;       ///< achieved <= target
};

/// The whole calibration.
struct Calibration {
  std::vector<MeasuredRun> runs;          ///< as loaded
  std::vector<MeasuredRun> thermal_runs;  ///< runs the thermal stage alone fits (--thermal-run), as loaded
  std::vector<KinetoInput> traces;        ///< Kineto traces (given as files, or runs made by calo ingest)
  KinetoFit kineto;                       ///< what the traces fitted (collectives, kernels)
  FitResult fit;                          ///< fit on all runs
  /// Leave-one-out rows: simulatable runs (when >= 2 of them), then thermal runs (peak temperature only)
  std::vector<HeldOutRun> held_out;
  std::vector<Tolerance> tolerances;           ///< per figure
  int direction_pairs = 0;                     ///< consecutive micro-batch pairs of one sweep
  int direction_right = 0;                     ///< of which the predicted peak power moves the measured way
  std::vector<DirectionStep> direction_steps;  ///< every pair counted, in sweep order
  std::vector<ParameterSpread> parameter_spread;  ///< per parameter the fit on all runs fitted
  ProbeRun controller_probe;        ///< the probe run the controller was fitted to (empty label: none)
  ControllerFit controller;         ///< that fit (when a probe was given)
  std::vector<std::string> stages;  ///< the stages fitted (CalibrateOptions::stages; empty: all)
  nlohmann::json base_calibration;  ///< the base cluster's own `calibration` section (null if none)
};

/// Options of calibrate().
struct CalibrateOptions {
  bool leave_one_out = true;                         ///< validate by leave-one-out
  std::function<void(const std::string&)> progress;  ///< one line per stage (may be empty)
  /// A controller probe run (controller_probe.h): fits the controller's response and averaging to it and
  /// holds them in every fit; empty: the power stage fits them to the runs.
  std::filesystem::path controller_probe;
  /// Runs for the thermal stage alone (load_thermal_run): long soaks or records of any job on that GPU.
  std::vector<std::filesystem::path> thermal_runs;
  /// Only these stages fit (FitSettings::stages); empty: all. With a calibrated base, its provenance is kept
  /// and this fit is appended to it under `calibration.refits`.
  std::vector<std::string> stages;
};

/// Loads `run_dirs` (run directories; Kineto trace files, those of one directory forming one job's traces;
/// runs made by calo ingest), fits `base_cluster` (preset or file) and validates. Throws InputError (exit 2)
/// for bad input, before anything is written.
Calibration calibrate(const std::vector<std::filesystem::path>& run_dirs, const std::string& base_cluster,
                      const CalibrateOptions& options = {});

/// The calibrated cluster file: the cluster plus a `calibration` section (provenance, residuals, tolerances).
nlohmann::json calibrated_cluster_json(const Calibration& calibration, const std::string& base_cluster);

/// Writes `json` as YAML to `path` atomically (temp file + rename); InputError if not writable.
void write_cluster_file(const std::filesystem::path& path, const nlohmann::json& json);

}  // namespace calo::calibrate
