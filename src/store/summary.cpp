#include "store/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/statistics.h"

namespace calo::store {

namespace {

constexpr double kNsPerSecond = 1e9;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Samples of metric `name` on `device_idx`, all of them (counters need the neighbours outside the interval).
std::vector<Sample> series(const RunReader& reader, int32_t device_idx,
                           const std::vector<MetricInfo>& metrics, std::string_view name, int64_t t_begin_ns,
                           int64_t t_end_ns) {
  for (const MetricInfo& metric : metrics) {
    if (metric.name == name) return reader.samples(device_idx, metric.id, t_begin_ns, t_end_ns);
  }
  return {};
}

// Delta of a counter over [t_begin_ns, t_end_ns): interpolated value at the end minus at the begin.
double counter_delta(const std::vector<Sample>& samples, int64_t t_begin_ns, int64_t t_end_ns) {
  if (samples.empty()) return kNaN;
  return counter_value_at(samples, t_end_ns) - counter_value_at(samples, t_begin_ns);
}

// Largest sample value; NaN when there are none.
double max_value(std::span<const Sample> samples) {
  double largest = samples.empty() ? kNaN : samples.front().value;
  for (const Sample& sample : samples) largest = std::max(largest, sample.value);
  return largest;
}

}  // namespace

double counter_value_at(const std::vector<Sample>& samples, int64_t t_ns) {
  if (samples.empty()) return kNaN;
  auto after = std::lower_bound(samples.begin(), samples.end(), t_ns,
                                [](const Sample& sample, int64_t time_ns) { return sample.t_ns < time_ns; });
  if (after == samples.begin()) return samples.front().value;
  if (after == samples.end()) return samples.back().value;
  const Sample& before = *(after - 1);
  if (after->t_ns == before.t_ns) return after->value;
  double fraction = static_cast<double>(t_ns - before.t_ns) / static_cast<double>(after->t_ns - before.t_ns);
  return before.value + fraction * (after->value - before.value);
}

namespace {

// Trapezoid integral (J) of the power samples over [from_ns, to_ns]; nullopt where they do not cover it.
std::optional<double> power_integral_j(const std::vector<Sample>& power, int64_t from_ns, int64_t to_ns) {
  WindowIntegral integral(from_ns, to_ns);
  for (const Sample& sample : power) integral.add(sample.t_ns, sample.value);
  return integral.joules();
}

}  // namespace

void WindowIntegral::add(int64_t t_ns, double value_w) {
  if (!has_previous_) {
    first_t_ns_ = t_ns;
    first_w_ = value_w;
  }
  if (t_ns <= from_ns_) covers_begin_ = true;
  if (t_ns >= to_ns_) covers_end_ = true;
  const bool overlaps = has_previous_ && previous_t_ns_ < to_ns_ && t_ns > from_ns_ && t_ns > previous_t_ns_;
  if (overlaps) {
    if (t_ns - previous_t_ns_ > kMaxPowerGapNs) gap_too_wide_ = true;
    const double span_ns = static_cast<double>(t_ns - previous_t_ns_);
    auto at = [&](int64_t time_ns) {
      return previous_w_ + (value_w - previous_w_) * static_cast<double>(time_ns - previous_t_ns_) / span_ns;
    };
    const int64_t begin_ns = std::max(previous_t_ns_, from_ns_);
    const int64_t end_ns = std::min(t_ns, to_ns_);
    joules_ += (at(begin_ns) + at(end_ns)) / 2 * static_cast<double>(end_ns - begin_ns) / kNsPerSecond;
  }
  has_previous_ = true;
  previous_t_ns_ = t_ns;
  previous_w_ = value_w;
}

std::optional<double> WindowIntegral::joules() const {
  if (!has_previous_ || gap_too_wide_) return std::nullopt;
  double joules = joules_;
  if (!covers_begin_) {  // the first sample a little after the window begins: its value held back to the edge
    if (first_t_ns_ - from_ns_ > kMaxPowerGapNs) return std::nullopt;
    joules += first_w_ * static_cast<double>(std::min(first_t_ns_, to_ns_) - from_ns_) / kNsPerSecond;
  }
  if (!covers_end_) {  // the last sample a little before the window ends: its value held to the edge
    if (to_ns_ - previous_t_ns_ > kMaxPowerGapNs) return std::nullopt;
    joules += previous_w_ * static_cast<double>(to_ns_ - std::max(previous_t_ns_, from_ns_)) / kNsPerSecond;
  }
  return joules;
}

double window_energy_j(std::optional<double> sampled_j, const std::vector<Sample>& energy,
                       const std::vector<Sample>& edge_power, int64_t t_begin_ns, int64_t t_end_ns) {
  if (sampled_j) return *sampled_j;
  if (energy.empty()) return kNaN;
  return energy_value_at(energy, edge_power, t_end_ns) - energy_value_at(energy, edge_power, t_begin_ns);
}

double energy_value_at(const std::vector<Sample>& energy, const std::vector<Sample>& power, int64_t t_ns) {
  if (energy.empty()) return kNaN;
  auto after = std::lower_bound(energy.begin(), energy.end(), t_ns,
                                [](const Sample& sample, int64_t time_ns) { return sample.t_ns < time_ns; });
  const Sample* anchor = nullptr;
  if (after == energy.end()) {
    anchor = &energy.back();
  } else if (after == energy.begin() || after->t_ns - t_ns < t_ns - (after - 1)->t_ns) {
    anchor = &*after;
  } else {
    anchor = &*(after - 1);
  }
  if (anchor->t_ns == t_ns) return anchor->value;
  const auto joules = power_integral_j(power, std::min(anchor->t_ns, t_ns), std::max(anchor->t_ns, t_ns));
  if (!joules) return counter_value_at(energy, t_ns);
  return anchor->t_ns < t_ns ? anchor->value + *joules : anchor->value - *joules;
}

IntervalSummary summarize_interval(const RunReader& reader, int32_t device_idx, int64_t t_begin_ns,
                                   int64_t t_end_ns, std::string label) {
  std::vector<MetricInfo> metrics = reader.metrics();
  IntervalSummary summary;
  summary.label = std::move(label);
  summary.device_idx = device_idx;
  summary.t_begin_ns = t_begin_ns;
  summary.t_end_ns = t_end_ns;
  summary.duration_s = static_cast<double>(t_end_ns - t_begin_ns) / kNsPerSecond;
  constexpr int64_t kAll = std::numeric_limits<int64_t>::max();
  constexpr int64_t kFromStart = std::numeric_limits<int64_t>::min();
  auto counter = [&](std::string_view name) {
    return counter_delta(series(reader, device_idx, metrics, name, kFromStart, kAll), t_begin_ns, t_end_ns);
  };
  // The driver's power samples over the interval and kEnergyEdgeNs around it: the peak inside, the energy
  // (their integral, else the counter's ends placed with them). One read serves all three.
  const std::vector<Sample> sampled = series(reader, device_idx, metrics, "power_sampled_w",
                                             t_begin_ns - kEnergyEdgeNs, t_end_ns + kEnergyEdgeNs + 1);
  const std::vector<Sample> energy = series(reader, device_idx, metrics, "energy_j", kFromStart, kAll);
  summary.energy_j =
      window_energy_j(power_integral_j(sampled, t_begin_ns, t_end_ns), energy, sampled, t_begin_ns, t_end_ns);
  summary.mean_power_w = summary.duration_s > 0 ? summary.energy_j / summary.duration_s : kNaN;
  summary.throttle_power_cap_s = counter("throttle_power_cap_s");
  summary.throttle_sw_thermal_s = counter("throttle_sw_thermal_s");
  summary.throttle_hw_thermal_s = counter("throttle_hw_thermal_s");
  summary.throttle_power_brake_s = counter("throttle_power_brake_s");

  std::vector<Sample> power = series(reader, device_idx, metrics, "power_instant_w", t_begin_ns, t_end_ns);
  summary.power_integral_j = power.empty() ? kNaN : 0.0;
  summary.peak_power_instant_w = max_value(power);
  for (std::size_t index = 1; index < power.size(); ++index) {
    double step_s = static_cast<double>(power[index].t_ns - power[index - 1].t_ns) / kNsPerSecond;
    summary.power_integral_j += 0.5 * (power[index].value + power[index - 1].value) * step_s;
  }
  const auto before = [](const Sample& sample, int64_t t_ns) { return sample.t_ns < t_ns; };
  summary.peak_power_sampled_w =
      max_value({std::lower_bound(sampled.begin(), sampled.end(), t_begin_ns, before),
                 std::lower_bound(sampled.begin(), sampled.end(), t_end_ns, before)});

  std::vector<Sample> clock = series(reader, device_idx, metrics, "clock_sm_mhz", t_begin_ns, t_end_ns);
  if (clock.empty()) {
    summary.median_sm_mhz = kNaN;
  } else {
    std::vector<double> values;
    values.reserve(clock.size());
    for (const Sample& sample : clock) values.push_back(sample.value);
    summary.median_sm_mhz = core::midpoint_median(std::move(values));
  }

  std::vector<Sample> temperature = series(reader, device_idx, metrics, "temp_gpu_c", t_begin_ns, t_end_ns);
  if (temperature.empty()) {
    summary.temp_gpu_start_c = summary.temp_gpu_end_c = summary.temp_gpu_max_c = kNaN;
  } else {
    summary.temp_gpu_start_c = temperature.front().value;
    summary.temp_gpu_end_c = temperature.back().value;
    summary.temp_gpu_max_c = max_value(temperature);
  }
  for (const MetricInfo& metric : metrics) {
    reader.for_each_sample(
        device_idx, metric.id, [&](const Sample&) { ++summary.sample_count; }, t_begin_ns, t_end_ns);
  }
  return summary;
}

std::vector<IntervalSummary> summarize_phases(const RunReader& reader) {
  std::vector<DeviceInfo> devices = reader.devices();
  std::vector<IntervalSummary> summaries;
  for (const Span& phase : reader.spans(SpanKind::kPhase)) {
    for (const DeviceInfo& device : devices) {
      if (phase.device_idx != kNone && phase.device_idx != device.idx) continue;
      summaries.push_back(
          summarize_interval(reader, device.idx, phase.t_begin_ns, phase.t_end_ns, phase.name));
    }
  }
  return summaries;
}

void write_summaries(RunWriter& writer, const std::vector<IntervalSummary>& summaries) {
  for (const IntervalSummary& summary : summaries) {
    std::string scope = fmt::format("phase:{}/dev{}", summary.label, summary.device_idx);
    auto add = [&](std::string key, double value, std::string unit) {
      if (!std::isnan(value)) writer.add_summary(SummaryRow{scope, std::move(key), value, std::move(unit)});
    };
    add("duration_s", summary.duration_s, "s");
    add("energy_j", summary.energy_j, "J");
    add("mean_power_w", summary.mean_power_w, "W");
    add("power_integral_j", summary.power_integral_j, "J");
    add("peak_power_instant_w", summary.peak_power_instant_w, "W");
    add("peak_power_sampled_w", summary.peak_power_sampled_w, "W");
    add("throttle_power_cap_s", summary.throttle_power_cap_s, "s");
    add("throttle_sw_thermal_s", summary.throttle_sw_thermal_s, "s");
    add("throttle_hw_thermal_s", summary.throttle_hw_thermal_s, "s");
    add("throttle_power_brake_s", summary.throttle_power_brake_s, "s");
    add("median_sm_mhz", summary.median_sm_mhz, "MHz");
    add("temp_gpu_start_c", summary.temp_gpu_start_c, "C");
    add("temp_gpu_end_c", summary.temp_gpu_end_c, "C");
    add("temp_gpu_max_c", summary.temp_gpu_max_c, "C");
  }
}

}  // namespace calo::store
