// Power model (idle + per-class active power scaled with clock, power-cap DVFS) and the per-GPU two-node
// thermal RC model with thermal slowdown. Equations in docs/SIMULATOR.md.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"

namespace calo::sim {

/// Active power of an op of `power_class` at clock ratio `clock_ratio` (f / f_max) and utilization
/// `utilization` of its bound resource: active_power_w[class] * clock_ratio^exponent * utilization.
double active_power_w(const GpuSpec& gpu, PowerClass power_class, double clock_ratio, double utilization);

/// clock_ratio^clock_power_exponent: the factor active power scales by at clock ratio f / f_max.
double clock_power_factor(const GpuSpec& gpu, double clock_ratio);

/// active_power_w with the clock's factor already taken (`power_factor` = clock_power_factor): for loops over
/// many ops at one clock.
double active_power_at_factor_w(const GpuSpec& gpu, PowerClass power_class, double power_factor,
                                double utilization);

/// Mean power above idle of a GPU over `wait_s` of waiting in `episodes` waits of equal length L: each decays
/// from wait_power_w with time constant τ = wait_power_decay_s, W·(τ/L)·(1 − e^(−L/τ)); W where τ = 0.
double mean_wait_power_w(const GpuSpec& gpu, int episodes, double wait_s);

/// Compute-side summary of one program at one SM clock (for one GPU at speed 1).
struct ProgramAtClock {
  double busy_s = 0;             ///< sum of compute-op durations
  double active_energy_j = 0;    ///< energy above idle drawn by compute ops
  double peak_power_w = 0;       ///< highest single-op power (idle + active) in the program
  double mean_busy_power_w = 0;  ///< idle + active_energy / busy (what the power-cap controller holds)
};

/// Per-op compute costs of one graph::RankProgram and its power at any clock (memoized per clock bin).
class ProgramPower {
 public:
  /// Costs every compute op of `program` on `gpu`.
  ProgramPower(const GpuSpec& gpu, const graph::RankProgram& program);
  /// Cost of op `op_index` (zeros for communication ops).
  const ComputeCost& cost(std::size_t op_index) const { return costs_[op_index]; }
  /// Costs of all ops, in program order.
  const std::vector<ComputeCost>& costs() const { return costs_; }
  /// Number of ops (the program's, communication included).
  std::size_t size() const { return costs_.size(); }
  /// Summary at SM clock `clock_mhz` (memoized).
  const ProgramAtClock& at_clock(double clock_mhz);
  /// Highest clock bin (<= max_sm_mhz) whose mean busy power fits under the power limit; min_sm_mhz if none.
  double power_cap_clock_mhz();
  /// Same, counting `extra_energy_j` (communication) in the busy window and a GPU running at `speed`
  /// (busy window = busy_s / speed): highest bin with idle + speed * (active + extra) / busy <= limit;
  /// `limit_w` <= 0 means the GPU's power_limit_w (a lower per-GPU cap otherwise).
  double power_cap_clock_mhz(double extra_energy_j, double speed, double limit_w = -1);

 private:
  const GpuSpec& gpu_;
  std::vector<ComputeCost> costs_;
  std::unordered_map<long long, ProgramAtClock> memo_;
  double cap_clock_mhz_ = -1;
};

/// Highest clock of `gpu` (max_sm_mhz, else a bin min_sm_mhz + k * clock_step_mhz) at which `fits` holds
/// (`fits` must hold at every clock below one where it holds); min_sm_mhz when it holds at none. Searches
/// outward from `guess_mhz` (doubling steps, then bisection) when given, else bisects all bins: the same
/// answer, in fewer calls of `fits` when the guess is near.
double highest_fitting_clock_mhz(const GpuSpec& gpu, const std::function<bool(double)>& fits,
                                 double guess_mhz = -1);

/// The clock at which mean busy power `idle + active_w * (f / f_max)^clock_power_exponent` equals `limit_w`,
/// from the active power `active_w` at f_max: where the power cap puts a compute-bound program (a guess for
/// highest_fitting_clock_mhz; memory-bound ops lose less power with the clock).
double power_law_cap_clock_mhz(const GpuSpec& gpu, double active_w, double limit_w);

/// Rounds a clock down to the GPU's DVFS bin and clamps it to [min_sm_mhz, max_sm_mhz].
double clock_bin_mhz(const GpuSpec& gpu, double clock_mhz);

/// Highest clock the thermal controller allows at die temperature `die_c`: `operating_mhz` (the clock the
/// power cap allows; max_sm_mhz when < 0) below slowdown_c, minus slowdown_mhz_per_c per degree above it (the
/// slowdown takes clocks off whatever the power controller allows), min_sm_mhz at or above hw_slowdown_c.
double thermal_clock_limit_mhz(const GpuSpec& gpu, double die_c, double operating_mhz = -1);

/// Static power above idle at die temperature `die_c`: leakage_w_per_c per degree above leakage_ref_c
/// (leakage grows with temperature; below the reference the fitted idle and active figures already hold).
double leakage_power_w(const GpuSpec& gpu, double die_c);

/// Temperatures of one GPU's two thermal nodes, and how far its cooling has answered.
struct ThermalState {
  double sink_c = 0;   ///< heat sink
  double die_c = 0;    ///< GPU die (what NVML reports as GPU temperature)
  double cooling = 0;  ///< cooling response, 0 (none) to 1 (full: R_sink cut by cooling_cut_max)
};

/// The cooling response the die temperature `die_c` asks for: (die - cooling_start_c) / cooling_span_c in [0,
/// 1].
double cooling_target(const ThermalSpec& thermal, double die_c);

/// Steady state at constant `power_w`: sink = inlet + P R_sink (1 - cut c) r_scale, die = sink + P R_die
/// r_scale, with the cooling response c at the value its own die temperature asks for.
ThermalState thermal_steady_state(const ThermalSpec& thermal, double inlet_c, double r_scale, double power_w);

/// A GPU resting at die temperature `die_c` under `power_w`: its sink P R_die r_scale below the die, its
/// cooling at the response that temperature asks for.
ThermalState thermal_state_at(const ThermalSpec& thermal, double r_scale, double power_w, double die_c);

/// Advances `state` by `dt_s` at constant `power_w`: exact exponential relaxation of each node toward its
/// target, in steps of at most 0.5 s while the cooling responds (it moves toward cooling_target of the die).
void thermal_advance(const ThermalSpec& thermal, double inlet_c, double r_scale, double power_w, double dt_s,
                     ThermalState& state);

}  // namespace calo::sim
