#include "calibrate/fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "sim/power_thermal.h"

namespace calo::calibrate {

namespace {

/// A simulatable run with its graph built once.
struct Prepared {
  const MeasuredRun* run = nullptr;
  graph::Graph graph;
};

/// Minimizes `objective` over [low, high] (log-spaced when `log_scale`): a grid scan, then golden-section
/// refinement between the best grid point's neighbours (robust to the few local minima these fits have).
double minimize_1d(const std::function<double(double)>& objective, double low, double high, bool log_scale,
                   int grid_points = 13, int refinements = 16) {
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

double squared(double value) {
  return std::isfinite(value) ? value * value : 0.0;
}

nlohmann::json errors_json(const RunFigures& measured, const RunFigures& simulated,
                           std::initializer_list<int> which) {
  nlohmann::json out = nlohmann::json::object();
  for (int index : which) {
    const double error = figure_error(index, figure_value(measured, index), figure_value(simulated, index));
    if (std::isfinite(error)) out[figure_names()[index].first] = error;
  }
  return out;
}

/// Stage 1: idle power is what the GPU draws idle with clocks up (median over runs).
StageFit fit_idle(const std::vector<MeasuredRun>& runs, sim::ClusterSpec& cluster) {
  StageFit stage{"idle", {}, {}, ""};
  std::vector<double> values;
  for (const MeasuredRun& run : runs) {
    if (std::isfinite(run.idle_power_w)) {
      values.push_back(run.idle_power_w);
      stage.residuals.emplace_back(run.label, nlohmann::json{{"idle_power_w", run.idle_power_w}});
    }
  }
  if (values.empty()) {
    stage.note = "no run recorded power while idle with clocks up";
    return stage;
  }
  std::sort(values.begin(), values.end());
  const double idle_w = std::min(values[values.size() / 2], cluster.gpu.power_limit_w * 0.9);
  stage.parameters.push_back({"gpu.idle_power_w", cluster.gpu.idle_power_w, idle_w, "W", "idle"});
  cluster.gpu.idle_power_w = idle_w;
  return stage;
}

/// Simulated figures of `item` at its measured clock with the power cap and heat off (compute alone).
RunFigures at_measured_clock(const Prepared& item, const sim::ClusterSpec& cluster) {
  sim::SimOptions options;
  options.power_cap = false;
  options.thermal = false;
  if (std::isfinite(item.run->figures.sm_clock_mhz)) options.fixed_clock_mhz = item.run->figures.sm_clock_mhz;
  return simulate_run(*item.run, item.graph, cluster, options);
}

/// Stage 2: compute efficiency at the clock each run actually ran (power cap and heat off): scales on the
/// GEMM and the attention efficiency ceilings, fitted to step times (runs of different sequence lengths and
/// micro-batches weigh attention and GEMMs differently, which separates the two).
StageFit fit_compute(const std::vector<Prepared>& prepared, sim::ClusterSpec& cluster) {
  StageFit stage{"compute", {}, {}, ""};
  const sim::ComputeEfficiency base = cluster.gpu.efficiency;
  double gemm_scale = 1, attention_scale = 1;
  auto apply = [&](sim::ClusterSpec& target, double gemm, double attention) {
    target.gpu.efficiency.gemm_max = std::min(0.99, base.gemm_max * gemm);
    target.gpu.efficiency.attention_max = std::min(0.99, base.attention_max * attention);
  };
  sim::ClusterSpec trial = cluster;
  auto loss = [&](double gemm, double attention) {
    apply(trial, gemm, attention);
    double sum = 0;
    for (const Prepared& item : prepared) {
      sum += squared(std::log(at_measured_clock(item, trial).step_time_s / item.run->figures.step_time_s));
    }
    return sum;
  };
  for (int sweep = 0; sweep < 3; ++sweep) {
    gemm_scale = minimize_1d([&](double x) { return loss(x, attention_scale); }, 0.3, 2.0, true);
    attention_scale = minimize_1d([&](double x) { return loss(gemm_scale, x); }, 0.3, 2.0, true);
  }
  apply(cluster, gemm_scale, attention_scale);
  stage.parameters.push_back(
      {"gpu.efficiency.gemm_max", base.gemm_max, cluster.gpu.efficiency.gemm_max, "", "compute"});
  stage.parameters.push_back({"gpu.efficiency.attention_max", base.attention_max,
                              cluster.gpu.efficiency.attention_max, "", "compute"});
  for (const Prepared& item : prepared) {
    stage.residuals.emplace_back(item.run->label,
                                 errors_json(item.run->figures, at_measured_clock(item, cluster), {0}));
  }
  return stage;
}

/// Stage 3: active power of heavy (GEMM, attention) and light (elementwise, optimizer) ops and the power-cap
/// controller's response time, with the cap and heat on: step time, mean and peak power, swing and clock.
StageFit fit_power(const std::vector<Prepared>& prepared, sim::ClusterSpec& cluster) {
  StageFit stage{"power", {}, {}, ""};
  const sim::GpuSpec base = cluster.gpu;
  struct Knobs {
    double heavy = 1, light = 1, response_s = 0.05, window_s = 0.02;
  } knobs;
  knobs.response_s = base.power_control.response_s;
  knobs.window_s = base.power_control.sample_window_s;
  auto apply = [&](sim::ClusterSpec& target, const Knobs& value) {
    using sim::PowerClass;
    auto set = [&](PowerClass power_class, double scale) {
      const int index = static_cast<int>(power_class);
      target.gpu.active_power_w[index] = base.active_power_w[index] * scale;
    };
    set(PowerClass::kGemm, value.heavy);
    set(PowerClass::kAttention, value.heavy);
    set(PowerClass::kElementwise, value.light);
    set(PowerClass::kOptimizer, value.light);
    target.gpu.power_control.response_s = value.response_s;
    target.gpu.power_control.sample_window_s = value.window_s;
  };
  sim::ClusterSpec trial = cluster;
  auto loss = [&](const Knobs& value) {
    apply(trial, value);
    double sum = 0;
    for (const Prepared& item : prepared) {
      const RunFigures simulated = simulate_run(*item.run, item.graph, trial);
      const RunFigures& measured = item.run->figures;
      sum += squared(figure_error(0, measured.step_time_s, simulated.step_time_s)) +
             squared(figure_error(1, measured.energy_per_step_j, simulated.energy_per_step_j)) +
             squared(figure_error(2, measured.mean_power_w, simulated.mean_power_w)) +
             squared(figure_error(3, measured.peak_power_w, simulated.peak_power_w)) +
             0.25 * squared(figure_error(4, measured.swing_w, simulated.swing_w)) +
             0.5 * squared(figure_error(6, measured.sm_clock_mhz, simulated.sm_clock_mhz));
    }
    return sum;
  };
  for (int sweep = 0; sweep < 3; ++sweep) {
    knobs.heavy = minimize_1d(
        [&](double x) {
          Knobs k = knobs;
          k.heavy = x;
          return loss(k);
        },
        0.5, 2.0, true);
    knobs.light = minimize_1d(
        [&](double x) {
          Knobs k = knobs;
          k.light = x;
          return loss(k);
        },
        0.25, 3.0, true);
    knobs.response_s = minimize_1d(
        [&](double x) {
          Knobs k = knobs;
          k.response_s = x;
          return loss(k);
        },
        0.001, 1.0, true);
    // The driver's samples average over a window no longer than their 20 ms period; shorter windows keep
    // more of each burst.
    knobs.window_s = minimize_1d(
        [&](double x) {
          Knobs k = knobs;
          k.window_s = x;
          return loss(k);
        },
        0.001, base.power_control.sample_window_s, true, 9, 8);
  }
  apply(cluster, knobs);
  for (const char* name : {"gemm", "attention", "elementwise", "optimizer"}) {
    for (int index = 0; index < sim::kNumPowerClasses; ++index) {
      if (std::string(sim::to_string(sim::PowerClass(index))) != name) continue;
      stage.parameters.push_back({std::string("gpu.active_power_w.") + name, base.active_power_w[index],
                                  cluster.gpu.active_power_w[index], "W", "power"});
    }
  }
  stage.parameters.push_back({"gpu.power_control.response_ms", base.power_control.response_s * 1e3,
                              cluster.gpu.power_control.response_s * 1e3, "ms", "power"});
  stage.parameters.push_back({"gpu.power_control.sample_window_ms", base.power_control.sample_window_s * 1e3,
                              cluster.gpu.power_control.sample_window_s * 1e3, "ms", "power"});
  for (const Prepared& item : prepared) {
    stage.residuals.emplace_back(
        item.run->label,
        errors_json(item.run->figures, simulate_run(*item.run, item.graph, cluster), {0, 1, 2, 3, 4, 6}));
  }
  return stage;
}

/// RMS difference (degrees) between `run`'s temperature samples and the RC model driven by its power samples.
double thermal_rms_c(const MeasuredRun& run, const sim::ThermalSpec& thermal, double inlet_c) {
  if (run.power_w.size() < 2 || run.temp_c.size() < 3) return NAN;
  sim::ThermalState state;
  state.die_c = run.temp_c.front().second;
  const double first_power_w = run.power_w.front().second;
  state.sink_c = state.die_c - first_power_w * thermal.r_die_k_per_w;
  double t_s = run.temp_c.front().first;
  std::size_t power_index = 0;
  double sum = 0;
  int count = 0;
  for (const auto& [sample_t_s, measured_c] : run.temp_c) {
    // Advance through the power samples (piecewise constant, each held until the next) up to this sample.
    while (t_s < sample_t_s) {
      while (power_index + 1 < run.power_w.size() && run.power_w[power_index + 1].first <= t_s)
        power_index += 1;
      const double next_change_s =
          power_index + 1 < run.power_w.size() ? run.power_w[power_index + 1].first : INFINITY;
      const double until_s = std::min(sample_t_s, std::max(next_change_s, t_s + 1e-6));
      sim::thermal_advance(thermal, inlet_c, 1.0, run.power_w[power_index].second, until_s - t_s, state);
      t_s = until_s;
    }
    sum += squared(state.die_c - measured_c);
    count += 1;
  }
  return std::sqrt(sum / count);
}

/// Stage 4: thermal RC constants and inlet temperature from the runs' temperature curves, driven by their
/// measured power (least squares over every temperature sample).
StageFit fit_thermal(const std::vector<MeasuredRun>& runs, sim::ClusterSpec& cluster) {
  StageFit stage{"thermal", {}, {}, ""};
  std::vector<const MeasuredRun*> usable;
  for (const MeasuredRun& run : runs) {
    if (std::isfinite(thermal_rms_c(run, cluster.gpu.thermal, cluster.node.inlet_c))) usable.push_back(&run);
  }
  if (usable.empty()) {
    stage.note = "no run has power and temperature series";
    return stage;
  }
  const sim::ThermalSpec base = cluster.gpu.thermal;
  const double base_inlet_c = cluster.node.inlet_c;
  sim::ThermalSpec thermal = base;
  double inlet_c = base_inlet_c;
  auto loss = [&](const sim::ThermalSpec& trial, double trial_inlet_c) {
    double sum = 0;
    for (const MeasuredRun* run : usable) sum += squared(thermal_rms_c(*run, trial, trial_inlet_c));
    return sum;
  };
  for (int sweep = 0; sweep < 3; ++sweep) {
    auto fit_field = [&](double sim::ThermalSpec::*field, double low, double high) {
      thermal.*field = minimize_1d(
          [&](double x) {
            sim::ThermalSpec t = thermal;
            t.*field = x;
            return loss(t, inlet_c);
          },
          low, high, true);
    };
    fit_field(&sim::ThermalSpec::r_die_k_per_w, 0.002, 0.1);
    fit_field(&sim::ThermalSpec::r_sink_k_per_w, 0.002, 0.1);
    fit_field(&sim::ThermalSpec::tau_die_s, 0.02, 5.0);
    fit_field(&sim::ThermalSpec::tau_sink_s, 0.5, 120.0);
    inlet_c = minimize_1d([&](double x) { return loss(thermal, x); }, 10.0, 50.0, false);
  }
  cluster.gpu.thermal = thermal;
  cluster.node.inlet_c = inlet_c;
  stage.parameters = {
      {"gpu.thermal.r_die_k_per_w", base.r_die_k_per_w, thermal.r_die_k_per_w, "K/W", "thermal"},
      {"gpu.thermal.r_sink_k_per_w", base.r_sink_k_per_w, thermal.r_sink_k_per_w, "K/W", "thermal"},
      {"gpu.thermal.tau_die_s", base.tau_die_s, thermal.tau_die_s, "s", "thermal"},
      {"gpu.thermal.tau_sink_s", base.tau_sink_s, thermal.tau_sink_s, "s", "thermal"},
      {"node.inlet_c", base_inlet_c, inlet_c, "C", "thermal"}};
  for (const MeasuredRun* run : usable) {
    stage.residuals.emplace_back(run->label,
                                 nlohmann::json{{"temp_rms_c", thermal_rms_c(*run, thermal, inlet_c)}});
  }
  return stage;
}

}  // namespace

FitResult fit_cluster(const std::vector<MeasuredRun>& runs, const sim::ClusterSpec& base) {
  require_input(!runs.empty(), "no runs to fit; give at least one measured run");
  FitResult result;
  result.cluster = base;
  std::vector<Prepared> prepared;
  for (const MeasuredRun& run : runs) {
    if (run.simulatable() && std::isfinite(run.figures.step_time_s))
      prepared.push_back({&run, run_graph(run)});
  }
  result.stages.push_back(fit_idle(runs, result.cluster));
  if (prepared.empty()) {
    result.stages.push_back(
        {"compute", {}, {}, "no run carries a workload to simulate (calo bench runs do)"});
    result.stages.push_back({"power", {}, {}, "no run carries a workload to simulate (calo bench runs do)"});
  } else {
    result.stages.push_back(fit_compute(prepared, result.cluster));
    result.stages.push_back(fit_power(prepared, result.cluster));
  }
  result.stages.push_back(fit_thermal(runs, result.cluster));
  result.kept = {"gpu.clock_power_exponent",
                 "gpu.efficiency.gemm_half_dim",
                 "gpu.efficiency.attention_half_seq",
                 "gpu.efficiency.memory_max",
                 "gpu.efficiency.memory_half_bytes",
                 "gpu.efficiency.kernel_overhead_us",
                 "gpu.active_power_w.communication",
                 "gpu.thermal.slowdown_c",
                 "gpu.thermal.slowdown_mhz_per_c",
                 "gpu.thermal.hw_slowdown_c",
                 "node (NVLink, slots)",
                 "network",
                 "collective"};
  return result;
}

}  // namespace calo::calibrate
