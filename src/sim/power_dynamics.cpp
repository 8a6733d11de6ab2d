#include "sim/power_dynamics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>

namespace calo::sim {

namespace {

/// Controller ticks per step are bounded so a long step (tens of seconds at scale) stays cheap.
constexpr double kMaxTicksPerStep = 20000;
/// Finest controller tick.
constexpr double kFinestTickS = 1e-3;
/// The pattern of a GPU that waits only after its compute.
const WaitPattern kNoWaits;

/// One compute op as the trace walks it.
struct TraceOp {
  const ComputeCost* cost = nullptr;
  double active_w = 0;       ///< class active power at max clock and full use
  double wait_before_s = 0;  ///< the GPU waits this long before the op begins (WaitPattern)
};

/// Duration and power of one op at one (binned) clock on a GPU of speed `speed`.
struct OpAtClock {
  double duration_s = 0;
  double power_w = 0;          ///< idle excluded: active power only
  bool compute_bound = false;  ///< its FLOP-bound part dominates (the clock sets its time)
};

/// `power_factor` is clock_power_factor at `clock_mhz`, computed once per controller tick by the caller.
OpAtClock op_at_clock(const GpuSpec& gpu, const TraceOp& op, double clock_mhz, double power_factor,
                      double speed) {
  const ComputeCost& cost = *op.cost;
  const double stretch = gpu.max_sm_mhz / clock_mhz;
  const double nominal_s = cost.duration_s(stretch, 1.0);
  OpAtClock result;
  result.duration_s = nominal_s / speed;
  result.compute_bound = cost.compute_s * stretch >= cost.memory_s;
  const double ideal_s = std::max(cost.ideal_compute_s * stretch, cost.ideal_memory_s);
  const double utilization = nominal_s > 0 ? std::min(1.0, ideal_s / nominal_s) : 0.0;
  result.power_w = op.active_w * power_factor * utilization * speed;
  return result;
}

/// Walks the ops once over the step while the controller moves the clock; fills `trace` when `record`.
class ControllerPass {
 public:
  ControllerPass(const GpuSpec& gpu, const std::vector<TraceOp>& ops, const StepPowerRequest& request,
                 double tick_s, double window_s)
      : gpu_(gpu),
        ops_(ops),
        request_(request),
        tick_s_(tick_s),
        window_s_(window_s),
        controller_(gpu.power_control, gpu,
                    request.power_limit_w > 0 ? request.power_limit_w : gpu.power_limit_w,
                    request.clock_limit_mhz, request.clock_limit_mhz) {}

  /// Runs from `clock_mhz`; returns the end clock. With `trace`, records the windows and figures.
  double run(double clock_mhz, PowerTrace* trace) {
    controller_.set_clock_mhz(clock_mhz);
    std::size_t op_index = 0;
    double remaining = 1.0;  // fraction of the current op still to run
    double t_s = 0;
    double compute_work_s = 0, compute_time_s = 0;
    const double base_w = gpu_.idle_power_w + request_.leakage_w + request_.comm_power_w;
    ticks_.clear();
    slices_.clear();
    const bool placing = trace && has_waits_;
    while (op_index < ops_.size() || t_s < request_.iteration_s - 1e-12) {
      const double tick_end_s = t_s + tick_s_;
      const double applied_mhz = clock_bin_mhz(gpu_, controller_.clock_mhz());
      const double power_factor = clock_power_factor(gpu_, applied_mhz / gpu_.max_sm_mhz);
      double tick_energy_j = 0;
      double tick_t_s = t_s;
      while (tick_t_s < tick_end_s - 1e-15) {
        double slice_s = tick_end_s - tick_t_s;
        double power_w = base_w;
        const auto slice_op = static_cast<std::int32_t>(op_index < ops_.size() ? op_index : -1);
        if (op_index < ops_.size()) {
          const OpAtClock now = op_at_clock(gpu_, ops_[op_index], applied_mhz, power_factor, request_.speed);
          const double left_s = remaining * now.duration_s;
          slice_s = std::min(slice_s, left_s);
          power_w += now.power_w;
          if (trace) {
            trace->busy_s += slice_s;
            if (applied_mhz < request_.clock_limit_mhz) trace->capped_busy_s += slice_s;
            if (now.compute_bound && now.duration_s > 0) {
              // FLOP-bound part only (overheads do not stretch with the clock).
              const double fraction = slice_s / now.duration_s;
              const double compute_s = ops_[op_index].cost->compute_s / request_.speed;
              compute_work_s += fraction * compute_s;
              compute_time_s += fraction * compute_s * gpu_.max_sm_mhz / applied_mhz;
            }
          }
          remaining -= now.duration_s > 0 ? slice_s / now.duration_s : remaining;
          if (remaining <= 1e-12 || left_s <= slice_s) {
            op_index += 1;
            remaining = 1.0;
          }
        } else if (tick_t_s >= request_.iteration_s) {
          break;
        } else {
          // The step's rest after its compute: the GPU waits (bubble, late peer, exposed collective).
          slice_s = std::min(slice_s, request_.iteration_s - tick_t_s);
          power_w += request_.wait_power_w;
        }
        tick_energy_j += power_w * slice_s;
        tick_t_s += slice_s;
        if (placing) slices_.push_back({slice_op, power_w, slice_s});
      }
      const double tick_len_s = tick_t_s - t_s;
      if (tick_len_s <= 0) break;
      t_s = tick_t_s;
      if (trace) ticks_.push_back({tick_energy_j, tick_len_s});
      if (request_.power_cap) controller_.observe(tick_energy_j / tick_len_s, tick_len_s);
    }
    if (trace) {
      if (placing) place_waits(base_w);
      tile_samples(*trace);
      trace->duration_s = t_s;
      trace->effective_clock_mhz = compute_time_s > 0 ? gpu_.max_sm_mhz * compute_work_s / compute_time_s
                                                      : clock_bin_mhz(gpu_, clock_mhz);
    }
    return controller_.clock_mhz();
  }

 private:
  /// Rebuilds the recorded pass's ticks with each wait of the pattern moved before its op, out of the step's
  /// rest after the compute where the controller's pass kept it (the rest bounds what is moved): every op
  /// runs at the clock it ran at there, so the step time, the effective clock and the energy are the pass's
  /// (up to rounding); only when the GPU draws what moves. Each wait, and the rest left at the step's end,
  /// draws `base_w` plus a level and a part that decays as the wait stage has it (WaitShape).
  void place_waits(double base_w) {
    const double decay_s = gpu_.wait_power_decay_s;
    const WaitShape shape = wait_shape();
    const double amplitude_w = shape.amplitude_w;
    base_w += shape.level_w;
    double rest_s = 0;  // the step's rest after the compute, what the waits are taken from
    for (const Slice& slice : slices_)
      if (slice.op < 0) rest_s += slice.length_s;
    const double tail_s = rest_s - placed_wait_s(rest_s);
    ticks_.clear();
    double tick_energy_j = 0, tick_length_s = 0;
    // Adds `length_s` at `base_w` plus the wait's decaying part from `offset_s` into its wait.
    const auto add = [&](double power_w, double length_s, double wait_amplitude_w, double offset_s) {
      while (length_s > 0) {  // split at the tick grid
        const double part_s = std::min(length_s, tick_s_ - tick_length_s);
        tick_energy_j += power_w * part_s + wait_amplitude_w * decayed_s(offset_s, part_s, decay_s);
        tick_length_s += part_s;
        length_s -= part_s;
        offset_s += part_s;
        if (tick_length_s >= tick_s_ * (1 - 1e-9)) {
          ticks_.push_back({tick_energy_j, tick_length_s});
          tick_energy_j = tick_length_s = 0;
        }
      }
    };
    std::int32_t previous_op = -1;
    double moved_s = 0;      // moved out of the rest and not yet skipped there
    double tail_into_s = 0;  // how far into the step's rest (its own wait) the pass has come
    for (const Slice& slice : slices_) {
      if (slice.op >= 0 && slice.op != previous_op) {
        previous_op = slice.op;
        const double wait_s = std::min(ops_[slice.op].wait_before_s, rest_s);
        rest_s -= wait_s;
        moved_s += wait_s;
        // A wait before the first op continues the rest it follows (steps repeat).
        add(base_w, wait_s, amplitude_w, slice.op == 0 ? tail_s : 0.0);
      }
      double length_s = slice.length_s;
      if (slice.op >= 0) {
        add(slice.power_w, length_s, 0, 0);
        continue;
      }
      const double skipped_s = std::min(moved_s, length_s);
      moved_s -= skipped_s;
      length_s -= skipped_s;
      add(base_w, length_s, amplitude_w, tail_into_s);
      tail_into_s += length_s;
    }
    if (tick_length_s > 0) ticks_.push_back({tick_energy_j, tick_length_s});
  }

  /// The waits the pattern places before their ops out of a rest of `rest_s` (each bounded by what is left).
  double placed_wait_s(double rest_s) const {
    double placed_s = 0;
    for (const TraceOp& op : ops_) placed_s += std::min(op.wait_before_s, rest_s - placed_s);
    return placed_s;
  }

  /// Power above base while waiting: a level held through every wait, and an amplitude that decays from
  /// each wait's start.
  struct WaitShape {
    double level_w = 0;
    double amplitude_w = 0;
  };

  /// Each wait (the placed ones, and the rest left at the step's end joined with a wait before the first op)
  /// decays as the wait stage's W·e^(−t/τ) (W = gpu.wait_power_w, τ = gpu.wait_power_decay_s; flat when τ is
  /// 0), and together they draw what the pass's flat wait_power_w over the whole rest drew (the energy does
  /// not depend on where the waits fall). That flat power is the stage's mean over waits of the mean length
  /// (mean_wait_power_w), more than the decays of waits of unequal length draw: the difference is a level
  /// over all of them; where the decays would draw more, their amplitude is scaled down instead.
  WaitShape wait_shape() const {
    const double decay_s = gpu_.wait_power_decay_s;
    double rest_s = 0;
    for (const Slice& slice : slices_)
      if (slice.op < 0) rest_s += slice.length_s;
    double left_s = rest_s, shape_s = 0, first_wait_s = 0;
    for (std::size_t op = 0; op < ops_.size(); ++op) {
      const double wait_s = std::min(ops_[op].wait_before_s, left_s);
      left_s -= wait_s;
      if (op == 0)
        first_wait_s = wait_s;
      else
        shape_s += decayed_s(0, wait_s, decay_s);
    }
    shape_s += decayed_s(0, left_s + first_wait_s, decay_s);
    const double energy_j = request_.wait_power_w * rest_s;  // what the flat wait power drew
    if (rest_s <= 0 || shape_s <= 0) return {};
    const double decays_j = gpu_.wait_power_w * shape_s;
    if (decays_j >= energy_j) return {0.0, energy_j / shape_s};
    return {(energy_j - decays_j) / rest_s, gpu_.wait_power_w};
  }

  /// ∫ e^(−t/τ) dt over [offset_s, offset_s + length_s) (τ = decay_s; the length where τ is 0: no decay), s.
  static double decayed_s(double offset_s, double length_s, double decay_s) {
    if (decay_s <= 0) return length_s;
    return decay_s * std::exp(-offset_s / decay_s) * -std::expm1(-length_s / decay_s);
  }

  /// The samples of the recorded pass: whole windows at the phase where the step's heaviest window falls (a
  /// driver's samples do not start with the step), so one sample is the peak, and the wrap (the tail after
  /// the last whole window with the head before the first, PowerTrace). A wrap shorter than half a window
  /// takes in a whole window next to it (not the heaviest), so no sample is a short spike a driver would
  /// not report. Energy is the exact sum over ticks.
  void tile_samples(PowerTrace& trace) const {
    const auto per_window = static_cast<std::size_t>(std::max(1LL, std::llround(window_s_ / tick_s_)));
    SlidingWindowPeak peak(per_window);
    for (const auto& [energy_j, length_s] : ticks_) peak.add(energy_j, length_s);
    const std::size_t count = ticks_.size();
    std::size_t head = 0, whole = 0;  // ticks before the first whole window; whole windows
    if (peak.peak_w() > 0) {
      head = peak.peak_start_tick() % per_window;
      whole = (count - head) / per_window;
      // The step's last tick may be cut short: a window holding it is not whole.
      if (whole > 0 && head + whole * per_window == count && ticks_.back().second < 0.999 * tick_s_)
        whole -= 1;
      const std::size_t tail = count - head - whole * per_window;
      if (head + tail > 0 && 2 * (head + tail) < per_window && whole >= 2) {
        // Take in the last whole window, or the first when the last is the heaviest.
        const bool last_is_peak = head + (whole - 1) * per_window == peak.peak_start_tick();
        if (last_is_peak) head += per_window;
        whole -= 1;
      }
    }
    const auto sum = [this](std::size_t begin, std::size_t end) {
      std::pair<double, double> total{0, 0};
      for (std::size_t tick = begin; tick < end; ++tick) {
        total.first += ticks_[tick].first;
        total.second += ticks_[tick].second;
      }
      return total;
    };
    const auto add_sample = [&trace](std::pair<double, double> window) {
      trace.sample_w.push_back(static_cast<float>(window.first / std::max(window.second, 1e-12)));
      trace.energy_j += window.first;
      trace.peak_w = std::max(trace.peak_w, static_cast<double>(trace.sample_w.back()));
    };
    const std::size_t tail_begin = head + whole * per_window;
    if (head > 0 || tail_begin < count) {  // the wrap: this step's tail, then its head
      const auto tail = sum(tail_begin, count), lead = sum(0, head);
      trace.head_s = lead.second;
      trace.wrap_s = lead.second + tail.second;
      add_sample({lead.first + tail.first, trace.wrap_s});
      if (whole == 0) trace.head_s = trace.wrap_s;  // a step shorter than a window: one sample, the step
    }
    for (std::size_t window = 0; window < whole; ++window)
      add_sample(sum(head + window * per_window, head + (window + 1) * per_window));
    if (trace.sample_w.empty()) trace.sample_w.push_back(0);  // an empty step still has one (zero) sample
  }

  const GpuSpec& gpu_;
  const std::vector<TraceOp>& ops_;
  const StepPowerRequest& request_;
  double tick_s_;
  double window_s_;
  PowerController controller_;  ///< its seen power carries from pass to pass (starts at the cap)
  std::vector<std::pair<double, double>> ticks_;  ///< (energy J, length s) of each tick of the recorded pass
  /// One stretch of the recorded pass at one power: op `op` (-1: the step's rest after the compute).
  struct Slice {
    std::int32_t op = -1;
    double power_w = 0;
    double length_s = 0;
  };
  std::vector<Slice> slices_;  ///< the recorded pass's slices, when it places waits
  bool has_waits_ =
      std::any_of(ops_.begin(), ops_.end(), [](const TraceOp& op) { return op.wait_before_s > 0; });
};

/// Rescales the trace's time axis to exactly `duration_s` (energy kept); the controlled ops may end a little
/// after the engine's step time because the engine runs them at the trace's effective constant clock.
void fit_to_duration(PowerTrace& trace, double duration_s) {
  if (trace.duration_s <= 0 || duration_s <= 0) return;
  const double scale = duration_s / trace.duration_s;
  if (std::fabs(scale - 1.0) < 1e-12) return;
  trace.window_s *= scale;
  trace.head_s *= scale;
  trace.wrap_s *= scale;
  trace.duration_s = duration_s;
  for (float& sample : trace.sample_w) sample = static_cast<float>(sample / scale);
  trace.peak_w /= scale;
}

}  // namespace

PowerController::PowerController(const PowerControlSpec& control, const GpuSpec& gpu, double limit_w,
                                 double clock_limit_mhz, double clock_mhz)
    : control_(control),
      max_mhz_(gpu.max_sm_mhz),
      min_mhz_(gpu.min_sm_mhz),
      clock_limit_mhz_(clock_limit_mhz),
      limit_w_(limit_w),
      raise_response_s_(raise_response_ms(control) * 1e-3),
      clock_mhz_(clock_mhz),
      seen_w_(limit_w) {}

void PowerController::observe(double power_w, double length_s) {
  const double average_s = control_.average_s;
  seen_w_ = average_s > 0 ? seen_w_ + (power_w - seen_w_) * -std::expm1(-length_s / average_s) : power_w;
  // Under the cap the clock rises with the raise response; over it, it falls with response_s.
  const double response_s = seen_w_ < limit_w_ ? raise_response_s_ : control_.response_s;
  clock_mhz_ += (limit_w_ - seen_w_) / limit_w_ * max_mhz_ * length_s / response_s;
  clock_mhz_ = std::clamp(clock_mhz_, min_mhz_, clock_limit_mhz_);
}

double window_length_s(const PowerTrace& trace, std::size_t index) {
  return index == 0 && trace.wrap_s > 0 ? trace.wrap_s : trace.window_s;
}

double window_end_s(const PowerTrace& trace, std::size_t index) {
  if (trace.wrap_s <= 0) return static_cast<double>(index + 1) * trace.window_s;
  return trace.head_s + static_cast<double>(index) * trace.window_s;
}

SlidingWindowPeak::SlidingWindowPeak(std::size_t ticks_per_window)
    : ring_(std::max<std::size_t>(1, ticks_per_window)) {}

void SlidingWindowPeak::add(double energy_j, double length_s) {
  // A ring of the window's ticks: the oldest leaves as the newest enters.
  std::pair<double, double>& slot = ring_[next_];
  if (added_ >= ring_.size()) {
    energy_j_ -= slot.first;
    length_s_ -= slot.second;
  }
  slot = {energy_j, length_s};
  energy_j_ += energy_j;
  length_s_ += length_s;
  next_ = next_ + 1 == ring_.size() ? 0 : next_ + 1;
  added_ += 1;
  if (added_ >= ring_.size() && length_s_ > 0 && energy_j_ / length_s_ > peak_w_) {
    peak_w_ = energy_j_ / length_s_;
    peak_start_tick_ = added_ - ring_.size();
  }
}

double largest_swing_w(const std::vector<float>& sample_w, double window_s, double span_s) {
  // Sliding window of `span_s` over equally spaced samples: monotonic deques of the max and min.
  const std::size_t span =
      std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(span_s / window_s + 1e-9)));
  std::deque<std::size_t> maxima, minima;
  double swing_w = 0;
  for (std::size_t index = 0; index < sample_w.size(); ++index) {
    while (!maxima.empty() && sample_w[maxima.back()] <= sample_w[index]) maxima.pop_back();
    while (!minima.empty() && sample_w[minima.back()] >= sample_w[index]) minima.pop_back();
    maxima.push_back(index);
    minima.push_back(index);
    while (maxima.front() + span <= index) maxima.pop_front();
    while (minima.front() + span <= index) minima.pop_front();
    swing_w = std::max(swing_w, static_cast<double>(sample_w[maxima.front()] - sample_w[minima.front()]));
  }
  return swing_w;
}

double trace_tick_s(const GpuSpec& gpu, double iteration_s) {
  const double window_s = gpu.power_control.sample_window_s;
  const double horizon_s = std::max(iteration_s, window_s);
  double ticks_per_window = std::max(1.0, std::round(window_s / kFinestTickS));
  ticks_per_window =
      std::min(ticks_per_window, std::max(1.0, std::floor(kMaxTicksPerStep * window_s / horizon_s)));
  return window_s / ticks_per_window;
}

PowerTrace trace_step_power(const GpuSpec& gpu, const ProgramPower& program, const StepPowerRequest& request,
                            const WaitPattern& waits) {
  std::vector<TraceOp> ops;
  std::size_t next_wait = 0;
  double wait_s = 0;  // waits before the next op the trace keeps (a skipped op passes its wait on)
  for (std::size_t index = 0; index < program.size(); ++index) {
    for (; next_wait < waits.size() && static_cast<std::size_t>(waits[next_wait].op) <= index; ++next_wait)
      wait_s += waits[next_wait].length_s;
    const ComputeCost& cost = program.cost(index);
    if (cost.power_class == PowerClass::kCommunication) continue;
    if (cost.duration_s(1.0, 1.0) <= 0) continue;
    ops.push_back({&cost, gpu.active_power_w[static_cast<int>(cost.power_class)], wait_s});
    wait_s = 0;
  }
  const double window_s = gpu.power_control.sample_window_s;
  const double tick_s = trace_tick_s(gpu, request.iteration_s);
  const double limit_mhz = std::min(request.clock_limit_mhz, gpu.max_sm_mhz);
  StepPowerRequest bounded = request;
  bounded.clock_limit_mhz = limit_mhz;
  const double start_mhz =
      request.power_cap ? std::clamp(request.start_clock_mhz, gpu.min_sm_mhz, limit_mhz) : limit_mhz;
  ControllerPass pass(gpu, ops, bounded, tick_s, window_s);
  PowerTrace trace;
  trace.window_s = window_s;
  const double settled_mhz = request.power_cap ? pass.run(start_mhz, nullptr) : start_mhz;
  trace.end_clock_mhz = pass.run(settled_mhz, &trace);
  if (request.iteration_s > 0) fit_to_duration(trace, request.iteration_s);
  trace.swing_w = largest_swing_w(trace.sample_w, trace.window_s, 0.1);
  return trace;
}

std::size_t PowerTraceCache::KeyHash::operator()(const Key& key) const {
  std::size_t hash = static_cast<std::size_t>(key.program) * 0x9E3779B97F4A7C15ULL;
  for (long long part : {key.iteration, key.start_clock, key.clock_limit, key.speed, key.comm_power,
                         key.wait_power, key.power_limit, key.leakage, static_cast<long long>(key.power_cap),
                         static_cast<long long>(reinterpret_cast<std::uintptr_t>(key.waits.get()))}) {
    hash ^= static_cast<std::size_t>(part) + 0x9E3779B97F4A7C15ULL + (hash << 6) + (hash >> 2);
  }
  return hash;
}

std::shared_ptr<const WaitPattern> PowerTraceCache::waits(const std::vector<WaitGap>& waits,
                                                          double iteration_s, bool intern_new) {
  const double tick_s = trace_tick_s(gpu_, iteration_s);
  std::vector<long long> key;
  key.reserve(2 * waits.size());
  double summed_s = 0;
  long long previous_ticks = 0;
  for (const WaitGap& wait : waits) {
    summed_s += wait.length_s;
    const auto ticks = static_cast<long long>(std::floor(summed_s / tick_s + 1e-9));
    if (ticks == previous_ticks) continue;  // within the tick of the waits before it
    key.push_back(wait.op);
    key.push_back(ticks - previous_ticks);
    previous_ticks = ticks;
  }
  auto found = patterns_.find(key);
  if (found != patterns_.end()) return found->second;
  if (!intern_new) return nullptr;
  if (patterns_.size() > 4096) patterns_.clear();  // those in use stay alive where they are held
  auto pattern = std::make_shared<WaitPattern>();
  for (std::size_t index = 0; index < key.size(); index += 2)
    pattern->push_back({static_cast<std::int32_t>(key[index]), static_cast<double>(key[index + 1]) * tick_s});
  return patterns_.emplace(std::move(key), std::move(pattern)).first->second;
}

std::shared_ptr<const PowerTrace> PowerTraceCache::get(int program, const StepPowerRequest& request,
                                                       const std::shared_ptr<const WaitPattern>& waits) {
  // Representative request: step time on a 0.1 % log grid, speed on a 0.5 % grid, clocks on 0.25 MHz, comm
  // power on 1 W. Heterogeneous GPUs and steps whose time drifts with heat share a few traces this way.
  const Key key{program,
                std::llround(std::log(std::max(request.iteration_s, 1e-9)) * 1000.0),
                std::llround(request.start_clock_mhz * 4),
                std::llround(request.clock_limit_mhz * 4),
                std::llround(request.speed * 200.0),
                std::llround(request.comm_power_w),
                std::llround(request.wait_power_w),
                std::llround(request.power_limit_w),
                std::llround(request.leakage_w * 10.0),
                request.power_cap,
                waits};
  auto found = representatives_.find(key);
  if (found == representatives_.end()) {
    // A key holds its pattern, so no pattern interned later takes the address of one a trace was keyed on;
    // a pattern interned again after the clear is a new key (its trace is computed again).
    if (representatives_.size() > 4096) representatives_.clear(), exact_.clear(), patterns_.clear();
    StepPowerRequest representative = request;
    representative.iteration_s = std::exp(static_cast<double>(key.iteration) / 1000.0);
    representative.speed = static_cast<double>(key.speed) / 200.0;
    representative.leakage_w = static_cast<double>(key.leakage) / 10.0;
    computed_ += 1;
    found = representatives_
                .emplace(key, std::make_shared<const PowerTrace>(trace_step_power(
                                  gpu_, powers_[program], representative, waits ? *waits : kNoWaits)))
                .first;
  }
  // The same trace stretched to tile this exact step time (energy kept).
  const auto exact_key = std::make_pair(found->second.get(), std::llround(request.iteration_s * 1e9));
  auto exact = exact_.find(exact_key);
  if (exact != exact_.end()) return exact->second;
  PowerTrace copy = *found->second;
  fit_to_duration(copy, request.iteration_s);
  copy.swing_w = largest_swing_w(copy.sample_w, copy.window_s, 0.1);
  auto shared = std::make_shared<const PowerTrace>(std::move(copy));
  exact_.emplace(exact_key, shared);
  return shared;
}

}  // namespace calo::sim
