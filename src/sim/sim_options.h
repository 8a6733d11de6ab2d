// The options of a simulation (steps, power cap and heat, per-GPU speed, inlet, cap, clock and slot, the
// timeline kept, the power-sample limit): what sim::simulate takes and sim/placement.h moves per rank.
#pragma once

#include <functional>
#include <vector>

namespace calo::sim {

/// Resident bytes one estimated power sample costs a simulation (its trace window, the controller's ticks,
/// the cache's stretched copy): Llama3-70B TP8-PP8 on 64 GPUs of 0.03 and 0.01 TFLOP/s, 9.1 M and 27 M
/// samples, 263 and 584 MB (docs/SIMULATOR.md, "Bounds").
inline constexpr int kPowerSampleBytes = 18;
/// Host nanoseconds per estimated power sample on the 2-core VM (same runs: 2.7 and 7.8 s).
inline constexpr int kPowerSampleNs = 280;
/// Default of SimOptions::max_power_samples, for every command that simulates (~0.9 GB and ~14 s at the
/// limit): sim, plan and campaign points alike.
inline constexpr double kMaxSimPowerSamples = 5e7;

/// Options of a simulation.
struct SimOptions {
  int steps = 1;          ///< training iterations to simulate
  int warmup_steps = 0;   ///< the first of them are warm-up (stored as such; comparisons skip them)
  bool power_cap = true;  ///< the power-cap controller lowers clocks to hold power_limit_w
  bool thermal = true;    ///< temperatures evolve and thermal slowdown applies
  /// A GPU's waits sit in its power trace where the op timeline puts them; false: all after its compute, at
  /// the step's end (the trace before issue 64, kept to compare against). Energy is the same either way.
  bool waits_in_place = true;
  std::vector<double> speed_factors;   ///< per GPU (global rank) speed, 1 = nominal; empty = all 1
  std::vector<double> inlet_offset_c;  ///< per GPU extra inlet temperature (hot spots); empty = none
  /// Per GPU the node slot (airflow position) it sits in; empty = rank % GPUs per node. A pipeline stage->GPU
  /// order moves stages between the slots of a node.
  std::vector<int> slot_of_rank;
  /// Per GPU power cap in W (what `nvidia-smi -pl` would set), <= the GPU's power_limit_w; empty = the limit.
  std::vector<double> power_limit_w;
  /// Per GPU highest SM clock in MHz (what `nvidia-smi -lgc` would lock); empty = the GPU's max_sm_mhz.
  std::vector<double> max_clock_mhz;
  double initial_die_c =
      -1;  ///< start die temperature (sink at idle steady state below it); < 0 = idle steady state
  bool record_timeline = false;  ///< keep every op's begin/end (last step) for small runs
  /// With record_timeline: keep one rank's timeline per distinct one (the first rank of each engine entity:
  /// ranks of one program, expert slice and speed class run identical timelines), not every rank's.
  bool timeline_distinct_ranks = false;
  double fixed_clock_mhz = -1;  ///< > 0: no GPU runs above this SM clock (a measured clock replayed)
  /// Called after each step with (step index, steps); for progress display.
  std::function<void(int, int)> progress;
  /// Most power samples (estimated_power_samples) the simulation may compute; 0 = no limit
  /// (`calo sim --max-power-samples`).
  double max_power_samples = kMaxSimPowerSamples;
};

}  // namespace calo::sim
