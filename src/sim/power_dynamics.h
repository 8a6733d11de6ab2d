// Millisecond power dynamics of one GPU over one step: the compute ops of its program run in order while
// the power-cap controller moves the SM clock toward the limit with a finite response time, so a heavy op
// that follows a light phase (the clock rose meanwhile) draws more than the limit until the controller pulls
// the clock back; the GPU then idles where the engine's op timeline has it wait (a bubble, a late peer, an
// exposed transfer). The result is a trace of power samples (the driver's sample window) that tiles the step
// at the phase where its heaviest window falls (a driver's samples do not start with the step): its integral
// is the step's energy, its largest sample the peak power, its spread the swing. docs/SIMULATOR.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/power_thermal.h"

namespace calo::sim {

/// What one GPU does during one step, as the power-dynamics model needs it.
struct StepPowerRequest {
  double iteration_s = 0;      ///< the step time the trace must tile
  double start_clock_mhz = 0;  ///< controller clock at the step's start (its operating point)
  double clock_limit_mhz = 0;  ///< highest clock allowed (max clock, or the thermal limit)
  double speed = 1;            ///< GPU speed factor (a slow GPU spends the same energy over longer)
  double comm_power_w = 0;     ///< mean communication power over the step (spread evenly)
  double wait_power_w = 0;     ///< power above idle while it waits, at its waits and after its compute
                               ///< to the step's end (mean_wait_power_w: the same over every wait)
  double leakage_w = 0;        ///< static power above idle from a hot die (sim::leakage_power_w)
  bool power_cap = true;       ///< false: the clock stays at clock_limit_mhz
  double power_limit_w = 0;    ///< the cap the controller holds (<= 0: the GPU's power_limit_w)
};

/// Power over one step of one GPU, in samples of the driver's window at the phase where the step's heaviest
/// window falls (so one sample is the peak). Steps repeat, so the piece after the last whole window and the
/// piece before the first one make one sample that straddles the step boundary, the "wrap" (its own step's
/// tail standing for the previous step's): every sample is then a window a driver could report, at least
/// half of window_s long, and the samples of consecutive steps tile time without a gap.
struct PowerTrace {
  double duration_s = 0;           ///< the step time
  double window_s = 0;             ///< sample window (all samples but the wrap)
  double head_s = 0;               ///< step start to the end of the wrap, sample 0 (0: the wrap is all tail)
  double wrap_s = 0;               ///< length of the wrap: head_s plus the step's tail (0: no wrap)
  std::vector<float> sample_w;     ///< mean power in each window
  double energy_j = 0;             ///< sum of sample_w[i] * length_i: exactly the integral of the trace
  double peak_w = 0;               ///< highest sample: the step's heaviest window_s, or the wrap
  double swing_w = 0;              ///< largest (max - min) of the samples within any 100 ms
  double busy_s = 0;               ///< time the compute ops took (at the controlled clock)
  double effective_clock_mhz = 0;  ///< constant clock that would take the same FLOP-bound time
  double capped_busy_s = 0;        ///< busy time spent below the clock limit (the controller held it)
  double end_clock_mhz = 0;        ///< controller clock at the step's end
};

/// The power-cap controller alone: the power it sees is the drawn power averaged with time constant
/// average_s (0: each tick's own), and it moves the clock by (limit - seen) / limit * f_max per response_s
/// while it cuts (seen >= limit) and per raise_response_ms() while it raises, between the GPU's min clock and
/// `clock_limit_mhz`. The one definition of the law: the step traces and the
/// controller probe's replay (calibrate/controller_probe.h) both run it.
class PowerController {
 public:
  /// Holds `limit_w` on `gpu`; the clock starts at `clock_mhz` and the seen power at the limit.
  PowerController(const PowerControlSpec& control, const GpuSpec& gpu, double limit_w, double clock_limit_mhz,
                  double clock_mhz);
  /// The clock it sets now, MHz (not binned).
  double clock_mhz() const { return clock_mhz_; }
  /// Starts from `clock_mhz` again (the seen power carries on).
  void set_clock_mhz(double clock_mhz) { clock_mhz_ = clock_mhz; }
  /// The GPU drew `power_w` over the last `length_s`: average it in and move the clock.
  void observe(double power_w, double length_s);

 private:
  PowerControlSpec control_;
  double max_mhz_, min_mhz_, clock_limit_mhz_, limit_w_;
  double raise_response_s_;  ///< the time constant while it raises the clock (response_s when none is set)
  double clock_mhz_;
  double seen_w_;  ///< the averaged power the controller acts on
};

/// Length of the window `index` of `trace` (window_s, or wrap_s for the wrap).
double window_length_s(const PowerTrace& trace, std::size_t index);

/// When window `index` of `trace` ends, from the step's start (the wrap ends at head_s).
double window_end_s(const PowerTrace& trace, std::size_t index);

/// Largest mean power over any `ticks_per_window` consecutive controller ticks: the peak a driver sample
/// window reports at whatever phase it falls in the step. Windows that tile the step from its start would
/// alias it: a burst split between two windows reads low in both.
class SlidingWindowPeak {
 public:
  /// A window is `ticks_per_window` ticks (at least 1).
  explicit SlidingWindowPeak(std::size_t ticks_per_window);
  /// Adds the next tick, `length_s` long, that drew `energy_j`.
  void add(double energy_j, double length_s);
  /// Largest window mean so far (0 before the first whole window).
  double peak_w() const { return peak_w_; }
  /// Index (from 0) of the first tick of that window.
  std::size_t peak_start_tick() const { return peak_start_tick_; }

 private:
  std::vector<std::pair<double, double>> ring_;  ///< (energy J, length s) of the window's ticks
  std::size_t next_ = 0, added_ = 0;             ///< the slot the next tick takes; ticks added
  double energy_j_ = 0, length_s_ = 0;           ///< sums over the window
  double peak_w_ = 0;
  std::size_t peak_start_tick_ = 0;
};

/// Largest (max - min) over the samples of `sample_w` (one per `window_s`) inside any `span_s` window.
double largest_swing_w(const std::vector<float>& sample_w, double window_s, double span_s);

/// Where one GPU waits inside a step, as its power trace places the waits: (op, length) in program order;
/// empty = every wait after the last compute op (the step's rest).
using WaitPattern = std::vector<WaitGap>;

/// Most new wait patterns one engine result interns (StepRunner takes pp x ep, at least 16, at most this):
/// heterogeneous replicas (each its own speed, so its own waits and trace) past the bound keep their waits at
/// the step's end (energy is the same either way).
inline constexpr std::size_t kMaxWaitPatternsPerResult = 64;

/// The trace's controller tick for a step of `iteration_s` on `gpu` (1 ms, coarser for long steps so a step
/// stays within a bounded number of ticks): the finest time a trace resolves.
double trace_tick_s(const GpuSpec& gpu, double iteration_s);

/// Simulates the controller over the compute ops of `program` (program order), then the step's rest, for
/// one step: two passes, the second starting from the first's end clock (the periodic steady state of
/// repeated steps). The second pass's power is then laid out with each wait of `waits` before its op, taken
/// from the rest: the ops keep the clocks the controller gave them, so the step time, the effective clock and
/// the energy do not depend on where the waits fall (a controller raising the clock inside a wait is not
/// modelled); only when the power is drawn does. Placed waits (and the rest) draw the wait stage's W·e^(−t/τ)
/// above idle over a level that gives them the energy of the flat wait_power_w (docs/SIMULATOR.md).
PowerTrace trace_step_power(const GpuSpec& gpu, const ProgramPower& program, const StepPowerRequest& request,
                            const WaitPattern& waits = WaitPattern{});

/// Memoizes trace_step_power per (program, quantized request, wait pattern) so symmetric GPUs, GPUs of
/// nearly equal speed and steps of nearly equal time share one trace; each use gets it stretched to tile its
/// exact step time. Wait patterns are interned (waits()): GPUs whose waits fall alike share one.
class PowerTraceCache {
 public:
  /// `powers[p]` are the costed programs; `gpu` and `powers` must outlive the cache.
  PowerTraceCache(const GpuSpec& gpu, const std::vector<ProgramPower>& powers) : gpu_(gpu), powers_(powers) {}
  /// The interned pattern of `waits` in a step of `iteration_s`: each wait's end, counted from the first
  /// wait's start over the waits alone, floored onto the trace's tick grid (trace_tick_s), so the placed
  /// waits never add up to more than the measured ones and waits that differ within a tick share a pattern.
  /// A pattern not interned yet is nullptr (waits at the step's end) unless `intern_new`: the caller bounds
  /// how many distinct patterns, and so traces, one engine result costs (kMaxWaitPatternsPerResult).
  std::shared_ptr<const WaitPattern> waits(const std::vector<WaitGap>& waits, double iteration_s,
                                           bool intern_new = true);
  /// The trace of program `program` for `request` with the waits of `waits` (interned by waits(); nullptr:
  /// every wait at the step's end); shared, immutable.
  std::shared_ptr<const PowerTrace> get(int program, const StepPowerRequest& request,
                                        const std::shared_ptr<const WaitPattern>& waits = nullptr);
  /// Distinct traces computed so far.
  std::size_t computed() const { return computed_; }

 private:
  /// Quantized request (see get()).
  struct Key {
    int program = 0;
    long long iteration = 0, start_clock = 0, clock_limit = 0, speed = 0, comm_power = 0, wait_power = 0,
              power_limit = 0, leakage = 0;
    bool power_cap = true;
    std::shared_ptr<const WaitPattern> waits;  ///< interned (patterns_), compared by identity
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const;
  };
  struct ExactHash {
    std::size_t operator()(const std::pair<const PowerTrace*, long long>& key) const {
      return std::hash<const void*>()(key.first) ^ std::hash<long long>()(key.second);
    }
  };
  const GpuSpec& gpu_;
  const std::vector<ProgramPower>& powers_;
  std::unordered_map<Key, std::shared_ptr<const PowerTrace>, KeyHash> representatives_;
  std::unordered_map<std::pair<const PowerTrace*, long long>, std::shared_ptr<const PowerTrace>, ExactHash>
      exact_;
  std::map<std::vector<long long>, std::shared_ptr<const WaitPattern>> patterns_;  ///< (op, tick) pairs
  std::size_t computed_ = 0;
};

}  // namespace calo::sim
