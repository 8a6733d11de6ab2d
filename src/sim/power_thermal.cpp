#include "sim/power_thermal.h"

#include <algorithm>
#include <cmath>

namespace calo::sim {

double clock_power_factor(const GpuSpec& gpu, double clock_ratio) {
  return std::pow(clock_ratio, gpu.clock_power_exponent);
}

double active_power_at_factor_w(const GpuSpec& gpu, PowerClass power_class, double power_factor,
                                double utilization) {
  return gpu.active_power_w[static_cast<int>(power_class)] * power_factor * utilization;
}

double active_power_w(const GpuSpec& gpu, PowerClass power_class, double clock_ratio, double utilization) {
  return active_power_at_factor_w(gpu, power_class, clock_power_factor(gpu, clock_ratio), utilization);
}

double mean_wait_power_w(const GpuSpec& gpu, int episodes, double wait_s) {
  const double decay_s = gpu.wait_power_decay_s;
  if (decay_s <= 0 || episodes <= 0 || wait_s <= 0) return gpu.wait_power_w;
  const double length_s = wait_s / episodes;
  return gpu.wait_power_w * decay_s / length_s * -std::expm1(-length_s / decay_s);
}

ProgramPower::ProgramPower(const GpuSpec& gpu, const graph::RankProgram& program) : gpu_(gpu) {
  costs_.reserve(program.ops.size());
  for (const graph::Op& op : program.ops) costs_.push_back(compute_cost(gpu, op));
}

const ProgramAtClock& ProgramPower::at_clock(double clock_mhz) {
  const long long key = std::llround(clock_mhz * 16.0);
  auto found = memo_.find(key);
  if (found != memo_.end()) return found->second;
  const double ratio = clock_mhz / gpu_.max_sm_mhz;
  const double stretch = 1.0 / ratio;
  const double power_factor = clock_power_factor(gpu_, ratio);
  ProgramAtClock summary;
  double peak_active_w = 0;
  for (const ComputeCost& cost : costs_) {
    if (cost.power_class == PowerClass::kCommunication) continue;
    const double duration_s = cost.duration_s(stretch, 1.0);
    if (duration_s <= 0) continue;
    // Utilization of the bound resource: ideal time at this clock over the actual time.
    const double ideal_s = std::max(cost.ideal_compute_s * stretch, cost.ideal_memory_s);
    const double utilization = std::min(1.0, ideal_s / duration_s);
    const double power_w = active_power_at_factor_w(gpu_, cost.power_class, power_factor, utilization);
    summary.busy_s += duration_s;
    summary.active_energy_j += power_w * duration_s;
    peak_active_w = std::max(peak_active_w, power_w);
  }
  summary.peak_power_w = gpu_.idle_power_w + peak_active_w;
  summary.mean_busy_power_w =
      gpu_.idle_power_w + (summary.busy_s > 0 ? summary.active_energy_j / summary.busy_s : 0.0);
  return memo_.emplace(key, summary).first->second;
}

double ProgramPower::power_cap_clock_mhz() {
  if (cap_clock_mhz_ < 0) cap_clock_mhz_ = power_cap_clock_mhz(0.0, 1.0);
  return cap_clock_mhz_;
}

double ProgramPower::power_cap_clock_mhz(double extra_energy_j, double speed, double limit_w) {
  if (limit_w <= 0) limit_w = gpu_.power_limit_w;
  auto busy_power_w = [&](const ProgramAtClock& summary) {
    return gpu_.idle_power_w + speed * (summary.active_energy_j + extra_energy_j) / summary.busy_s;
  };
  // Mean busy power rises with the clock.
  auto fits = [&](double clock_mhz) {
    const ProgramAtClock& summary = at_clock(clock_mhz);
    return summary.busy_s <= 0 || busy_power_w(summary) <= limit_w;
  };
  const ProgramAtClock& at_max = at_clock(gpu_.max_sm_mhz);
  if (at_max.busy_s <= 0) return gpu_.max_sm_mhz;
  return highest_fitting_clock_mhz(
      gpu_, fits, power_law_cap_clock_mhz(gpu_, busy_power_w(at_max) - gpu_.idle_power_w, limit_w));
}

double power_law_cap_clock_mhz(const GpuSpec& gpu, double active_w, double limit_w) {
  if (!(active_w > 0) || limit_w - gpu.idle_power_w >= active_w) return gpu.max_sm_mhz;
  const double headroom_w = std::max(0.0, limit_w - gpu.idle_power_w);
  return gpu.max_sm_mhz * std::pow(headroom_w / active_w, 1.0 / gpu.clock_power_exponent);
}

double highest_fitting_clock_mhz(const GpuSpec& gpu, const std::function<bool(double)>& fits,
                                 double guess_mhz) {
  if (fits(gpu.max_sm_mhz)) return gpu.max_sm_mhz;
  const double step = gpu.clock_step_mhz;
  const long long top_bin = static_cast<long long>(std::floor((gpu.max_sm_mhz - gpu.min_sm_mhz) / step));
  auto fits_bin = [&](long long bin) { return fits(gpu.min_sm_mhz + static_cast<double>(bin) * step); };
  // Invariant: bin `low` fits (or low = -1: none known to), bin `high` does not (top_bin + 1 is max_sm_mhz).
  long long low = -1;
  long long high = top_bin + 1;
  if (guess_mhz > 0) {
    const long long guess =
        std::clamp(static_cast<long long>(std::floor((guess_mhz - gpu.min_sm_mhz) / step)), 0LL, top_bin);
    long long stride = 1;
    if (fits_bin(guess)) {
      low = guess;
      while (low + stride < high && fits_bin(low + stride)) low += stride, stride *= 2;
      high = std::min(high, low + stride);
    } else {
      high = guess;
      while (high - stride >= 0 && !fits_bin(high - stride)) high -= stride, stride *= 2;
      low = high - stride >= 0 ? high - stride : -1;
    }
  } else if (fits_bin(top_bin)) {
    return gpu.min_sm_mhz + static_cast<double>(top_bin) * step;
  }
  if (low < 0) {
    if (!fits_bin(0)) return gpu.min_sm_mhz;
    low = 0;
  }
  while (high - low > 1) {
    const long long middle = (low + high) / 2;
    (fits_bin(middle) ? low : high) = middle;
  }
  return gpu.min_sm_mhz + static_cast<double>(low) * step;
}

double clock_bin_mhz(const GpuSpec& gpu, double clock_mhz) {
  if (clock_mhz >= gpu.max_sm_mhz) return gpu.max_sm_mhz;
  if (clock_mhz <= gpu.min_sm_mhz) return gpu.min_sm_mhz;
  const double bins = std::floor((clock_mhz - gpu.min_sm_mhz) / gpu.clock_step_mhz + 1e-9);
  return gpu.min_sm_mhz + bins * gpu.clock_step_mhz;
}

double thermal_clock_limit_mhz(const GpuSpec& gpu, double die_c, double operating_mhz) {
  const ThermalSpec& thermal = gpu.thermal;
  if (die_c >= thermal.hw_slowdown_c) return gpu.min_sm_mhz;
  if (die_c <= thermal.slowdown_c) return gpu.max_sm_mhz;
  const double from_mhz = operating_mhz < 0 ? gpu.max_sm_mhz : std::min(operating_mhz, gpu.max_sm_mhz);
  return std::max(gpu.min_sm_mhz, from_mhz - (die_c - thermal.slowdown_c) * thermal.slowdown_mhz_per_c);
}

double leakage_power_w(const GpuSpec& gpu, double die_c) {
  return gpu.thermal.leakage_w_per_c * std::max(0.0, die_c - gpu.thermal.leakage_ref_c);
}

double cooling_target(const ThermalSpec& thermal, double die_c) {
  if (thermal.cooling_cut_max <= 0) return 0;
  return std::clamp((die_c - thermal.cooling_start_c) / thermal.cooling_span_c, 0.0, 1.0);
}

namespace {

/// Sink-to-air resistance (K/W, card scale applied) with the cooling responding at `cooling`.
double sink_resistance_k_per_w(const ThermalSpec& thermal, double r_scale, double cooling) {
  return thermal.r_sink_k_per_w * r_scale * (1.0 - thermal.cooling_cut_max * cooling);
}

/// Both nodes at rest under `power_w` with the cooling held at `cooling`.
ThermalState rest_at(const ThermalSpec& thermal, double inlet_c, double r_scale, double power_w,
                     double cooling) {
  ThermalState state;
  state.cooling = cooling;
  state.sink_c = inlet_c + power_w * sink_resistance_k_per_w(thermal, r_scale, cooling);
  state.die_c = state.sink_c + power_w * thermal.r_die_k_per_w * r_scale;
  return state;
}

}  // namespace

ThermalState thermal_steady_state(const ThermalSpec& thermal, double inlet_c, double r_scale,
                                  double power_w) {
  // The response c the rest temperature asks for falls as c rises: bisect c = target(die(c)).
  double low = 0, high = 1;
  if (cooling_target(thermal, rest_at(thermal, inlet_c, r_scale, power_w, 0).die_c) <= 0) high = 0;
  for (int iteration = 0; iteration < 50 && high - low > 1e-9; ++iteration) {
    const double middle = 0.5 * (low + high);
    if (cooling_target(thermal, rest_at(thermal, inlet_c, r_scale, power_w, middle).die_c) > middle) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return rest_at(thermal, inlet_c, r_scale, power_w, 0.5 * (low + high));
}

ThermalState thermal_state_at(const ThermalSpec& thermal, double r_scale, double power_w, double die_c) {
  ThermalState state;
  state.die_c = die_c;
  state.sink_c = die_c - power_w * thermal.r_die_k_per_w * r_scale;
  state.cooling = cooling_target(thermal, die_c);
  return state;
}

void thermal_advance(const ThermalSpec& thermal, double inlet_c, double r_scale, double power_w, double dt_s,
                     ThermalState& state) {
  const bool responds = thermal.cooling_cut_max > 0;
  const int pieces = responds ? std::max(1, static_cast<int>(std::ceil(dt_s / 0.5))) : 1;
  const double piece_s = dt_s / pieces;
  for (int piece = 0; piece < pieces; ++piece) {
    const ThermalState target = rest_at(thermal, inlet_c, r_scale, power_w, state.cooling);
    state.sink_c += (target.sink_c - state.sink_c) * (1.0 - std::exp(-piece_s / thermal.tau_sink_s));
    // The die relaxes toward (current sink + P R_die); with tau_die << tau_sink this tracks the sink closely.
    const double die_target = state.sink_c + power_w * thermal.r_die_k_per_w * r_scale;
    state.die_c += (die_target - state.die_c) * (1.0 - std::exp(-piece_s / thermal.tau_die_s));
    if (responds) {
      state.cooling += (cooling_target(thermal, state.die_c) - state.cooling) *
                       (1.0 - std::exp(-piece_s / thermal.cooling_tau_s));
    }
  }
}

}  // namespace calo::sim
