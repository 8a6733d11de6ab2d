// What every stage of a calibration shares: a stage's outcome (its fitted parameters and residuals), the
// residuals' relative errors, the 1-D minimizer the stages search with and the modelled duration of a
// measured op. fit.cpp runs the stages (fit_cluster); the stages in files of their own (wait_fit, link_fit,
// fp8_fit, collective_fit, controller_probe) build on this header, not on fit.h, so the calls go one way.
#pragma once

#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/measurement.h"
#include "sim/cluster.h"

namespace calo::calibrate {

/// One fitted (or kept) parameter.
struct ParameterFit {
  std::string key;    ///< cluster-file path, e.g. "gpu.efficiency.gemm_max"
  double base = 0;    ///< value in the base cluster
  double fitted = 0;  ///< value written (== base when kept)
  std::string unit;   ///< unit of both
  std::string stage;  ///< which stage fitted it ("compute", "power", "thermal", "idle")
};

/// One stage's outcome: what it fitted and how far the fitted model is from each run.
struct StageFit {
  std::string stage;                     ///< "idle", "compute", "power", "thermal"
  std::vector<ParameterFit> parameters;  ///< fitted by this stage
  /// Residuals: per run label, figure -> relative error (degrees for temperatures; RMS for thermal curves).
  std::vector<std::pair<std::string, nlohmann::json>> residuals;
  std::string note;  ///< why a stage fitted nothing, if it did not
};

/// The relative errors (figure_error) of `simulated` against `measured` for the figure_names() indices
/// `which`, by figure name; unknown figures left out.
nlohmann::json errors_json(const RunFigures& measured, const RunFigures& simulated,
                           std::initializer_list<int> which);

/// Minimizes `objective` over [low, high] (log-spaced when `log_scale`): a grid scan, then golden-section
/// refinement between the best grid point's neighbours (robust to the few local minima these fits have).
double minimize_1d(const std::function<double(double)>& objective, double low, double high, bool log_scale,
                   int grid_points = 13, int refinements = 16);

/// Modeled duration of a measured op on `gpu` at the clock it ran (max clock when unknown).
double modeled_op_s(const sim::GpuSpec& gpu, const OpTiming& timing);

}  // namespace calo::calibrate
