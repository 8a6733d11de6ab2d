// Interval summaries over a run store: energy from counter deltas, throttle seconds, median clock,
// temperatures. Formulas: docs/METRICS.md "Run store". Used by `calo record` end-of-run tables, analysis and
// reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "store/run_store.h"

namespace calo::store {

/// Figures of one device over one time interval [t_begin_ns, t_end_ns). NaN where the run lacks the metric.
struct IntervalSummary {
  std::string label;              ///< phase / step name, or "run"
  int32_t device_idx = 0;         ///< DeviceInfo::idx
  int64_t t_begin_ns = 0;         ///< interval begin, ns since run start
  int64_t t_end_ns = 0;           ///< interval end, ns since run start
  double duration_s = 0.0;        ///< (t_end_ns - t_begin_ns) / 1e9
  double energy_j = 0.0;          ///< energy over the interval (window_energy_j: power samples, else counter)
  double mean_power_w = 0.0;      ///< energy_j / duration_s
  double power_integral_j = 0.0;  ///< trapezoid integral of power_instant_w (cross-check of energy_j)
  double peak_power_instant_w = 0.0;  ///< max power_instant_w sample inside the interval
  double peak_power_sampled_w =
      0.0;  ///< max power_sampled_w (the driver's 20 ms samples) inside the interval
  double throttle_power_cap_s = 0.0;    ///< throttle_power_cap_s counter delta
  double throttle_sw_thermal_s = 0.0;   ///< throttle_sw_thermal_s counter delta
  double throttle_hw_thermal_s = 0.0;   ///< throttle_hw_thermal_s counter delta
  double throttle_power_brake_s = 0.0;  ///< throttle_power_brake_s counter delta
  double median_sm_mhz = 0.0;           ///< median of clock_sm_mhz samples inside the interval
  double temp_gpu_start_c = 0.0;        ///< first temp_gpu_c sample at or after t_begin_ns
  double temp_gpu_end_c = 0.0;          ///< last temp_gpu_c sample before t_end_ns
  double temp_gpu_max_c = 0.0;          ///< max temp_gpu_c inside the interval
  int64_t sample_count = 0;             ///< samples of all metrics of this device inside the interval
  /// Peak power from the best series recorded: the driver's 20 ms samples where there are any, else polled
  /// power_instant_w (the preference analysis uses for every power figure).
  double peak_power_w() const {
    return peak_power_sampled_w > 0 ? peak_power_sampled_w : peak_power_instant_w;
  }
};

/// Value of a counter metric at time t_ns, linearly interpolated between the samples around it (clamped to
/// the first/last sample outside the recorded range). `samples` must be in time order. NaN when empty.
double counter_value_at(const std::vector<Sample>& samples, int64_t t_ns);

/// How far from a window edge the power samples energy_value_at needs are kept (counter reads at calo
/// record's defaults are at most ~8 s apart, so the read nearest an edge is within ~4 s of it).
inline constexpr int64_t kEnergyEdgeNs = 10'000'000'000;

/// Largest gap between power samples energy_value_at integrates across (the driver samples every 20 ms; the
/// widest gaps seen were 35-46 ms).
inline constexpr int64_t kMaxPowerGapNs = 100'000'000;

/// Energy counter value at t_ns: the counter read nearest to t_ns plus (or minus) the trapezoid integral of
/// the power samples `power` (W, the driver's 20 ms samples) between that read and t_ns, where they cover
/// that span with gaps <= kMaxPowerGapNs; otherwise counter_value_at(energy, t_ns). A counter read every few
/// seconds interpolated linearly misplaces the energy of a power change near a window edge; the samples do
/// not.
double energy_value_at(const std::vector<Sample>& energy, const std::vector<Sample>& power, int64_t t_ns);

/// Trapezoid integral (J) of a piecewise-linear power series (W) over [from_ns, to_ns], fed its samples in
/// time order (any before, inside and after the window): the segments across the edges count their share.
/// Valid only where no two samples between the edges are over kMaxPowerGapNs apart and a sample lies at or
/// before from_ns (else the first one within kMaxPowerGapNs after it, its value held back to the edge) and at
/// or after to_ns (else the last one within kMaxPowerGapNs before it, held forward): a run's last sample is
/// read a few ms before the run ends.
class WindowIntegral {
 public:
  /// Integrates over [from_ns, to_ns].
  WindowIntegral(int64_t from_ns, int64_t to_ns) : from_ns_(from_ns), to_ns_(to_ns) {}
  /// Feeds the next sample (t_ns not before the previous one's).
  void add(int64_t t_ns, double value_w);
  /// The integral, or nullopt where the samples do not cover the window.
  std::optional<double> joules() const;
  /// joules() of the window ending at `to_ns` instead, for a window made open-ended (to_ns = int64 max) while
  /// its end was not yet known: the same figure where every sample fed lies before `to_ns`.
  std::optional<double> joules_until(int64_t to_ns) const {
    WindowIntegral closed = *this;
    closed.to_ns_ = to_ns;
    return closed.joules();
  }

 private:
  int64_t from_ns_;
  int64_t to_ns_;
  bool has_previous_ = false;
  int64_t first_t_ns_ = 0;
  double first_w_ = 0;
  int64_t previous_t_ns_ = 0;
  double previous_w_ = 0;
  bool covers_begin_ = false;
  bool covers_end_ = false;
  bool gap_too_wide_ = false;
  double joules_ = 0;
};

/// Energy of one device over [t_begin_ns, t_end_ns] (J, docs/METRICS.md "Run store"): `sampled_j`, the
/// integral of the driver's 20 ms power samples, where they cover the window; else the energy counter,
/// E(t_end_ns) - E(t_begin_ns) (energy_value_at with `edge_power`); NaN with neither. The counter advances in
/// uneven jumps (two identical 0.27 s H200 benches read 39.9 and 27.5 J per step), the samples do not.
double window_energy_j(std::optional<double> sampled_j, const std::vector<Sample>& energy,
                       const std::vector<Sample>& edge_power, int64_t t_begin_ns, int64_t t_end_ns);

/// True when t_ns is within kEnergyEdgeNs of t_begin_ns or t_end_ns: the power samples energy_value_at needs.
inline bool near_window_edge(int64_t t_ns, int64_t t_begin_ns, int64_t t_end_ns) {
  return (t_ns >= t_begin_ns - kEnergyEdgeNs && t_ns <= t_begin_ns + kEnergyEdgeNs) ||
         (t_ns >= t_end_ns - kEnergyEdgeNs && t_ns <= t_end_ns + kEnergyEdgeNs);
}

/// Summarizes device `device_idx` over [t_begin_ns, t_end_ns).
IntervalSummary summarize_interval(const RunReader& reader, int32_t device_idx, int64_t t_begin_ns,
                                   int64_t t_end_ns, std::string label);

/// One IntervalSummary per (phase span, device), phases in time order, devices by idx. Phase spans with
/// device_idx == kNone apply to every device.
std::vector<IntervalSummary> summarize_phases(const RunReader& reader);

/// Writes `summaries` as summary rows (scope "phase:<label>/dev<idx>") through `writer`.
void write_summaries(RunWriter& writer, const std::vector<IntervalSummary>& summaries);

}  // namespace calo::store
