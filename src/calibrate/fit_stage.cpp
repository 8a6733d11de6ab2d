// The pieces every calibration stage shares (calibrate/fit_stage.h).
#include "calibrate/fit_stage.h"

#include <algorithm>
#include <cmath>

#include "sim/cost_model.h"

namespace calo::calibrate {

nlohmann::json errors_json(const RunFigures& measured, const RunFigures& simulated,
                           std::initializer_list<int> which) {
  nlohmann::json out = nlohmann::json::object();
  for (int index : which) {
    const double error = figure_error(index, figure_value(measured, index), figure_value(simulated, index));
    if (std::isfinite(error)) out[figure_names()[index].first] = error;
  }
  return out;
}

double modeled_op_s(const sim::GpuSpec& gpu, const OpTiming& timing) {
  const sim::ComputeCost cost = sim::compute_cost(gpu, timing.op);
  const double clock_mhz =
      std::isfinite(timing.clock_mhz) ? std::min(timing.clock_mhz, gpu.max_sm_mhz) : gpu.max_sm_mhz;
  return cost.duration_s(gpu.max_sm_mhz / clock_mhz, 1.0);
}

double minimize_1d(const std::function<double(double)>& objective, double low, double high, bool log_scale,
                   int grid_points, int refinements) {
  auto to_x = [&](double u) { return log_scale ? low * std::pow(high / low, u) : low + (high - low) * u; };
  int best = 0;
  double best_value = INFINITY;
  for (int point = 0; point < grid_points; ++point) {
    const double value = objective(to_x(static_cast<double>(point) / (grid_points - 1)));
    if (value < best_value) {
      best_value = value;
      best = point;
    }
  }
  double a = std::max(0, best - 1) / static_cast<double>(grid_points - 1);
  double b = std::min(grid_points - 1, best + 1) / static_cast<double>(grid_points - 1);
  const double ratio = (std::sqrt(5.0) - 1) / 2;
  double c = b - ratio * (b - a), d = a + ratio * (b - a);
  double fc = objective(to_x(c)), fd = objective(to_x(d));
  for (int iteration = 0; iteration < refinements; ++iteration) {
    if (fc < fd) {
      b = d, d = c, fd = fc;
      c = b - ratio * (b - a);
      fc = objective(to_x(c));
    } else {
      a = c, c = d, fc = fd;
      d = a + ratio * (b - a);
      fd = objective(to_x(d));
    }
  }
  const double refined = fc < fd ? c : d;
  const double refined_value = std::min(fc, fd);
  return refined_value <= best_value ? to_x(refined) : to_x(static_cast<double>(best) / (grid_points - 1));
}

}  // namespace calo::calibrate
