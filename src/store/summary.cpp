#include "store/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>

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

// Trapezoid integral (J) of the piecewise-linear power series over [from_ns, to_ns]; nullopt unless samples
// lie at or before from_ns and at or after to_ns with no gap over kMaxPowerGapNs between them.
std::optional<double> power_integral_j(const std::vector<Sample>& power, int64_t from_ns, int64_t to_ns) {
  auto first = std::upper_bound(power.begin(), power.end(), from_ns,
                                [](int64_t time_ns, const Sample& sample) { return time_ns < sample.t_ns; });
  if (first == power.begin()) return std::nullopt;
  --first;  // the last sample at or before from_ns
  double joules = 0;
  for (auto left = first; left + 1 != power.end() && left->t_ns < to_ns; ++left) {
    const Sample& a = *left;
    const Sample& b = *(left + 1);
    if (b.t_ns - a.t_ns > kMaxPowerGapNs) return std::nullopt;
    if (b.t_ns == a.t_ns) continue;
    const int64_t begin_ns = std::max(a.t_ns, from_ns);
    const int64_t end_ns = std::min(b.t_ns, to_ns);
    if (end_ns <= begin_ns) continue;
    auto at = [&](int64_t t_ns) {
      return a.value +
             (b.value - a.value) * static_cast<double>(t_ns - a.t_ns) / static_cast<double>(b.t_ns - a.t_ns);
    };
    joules += (at(begin_ns) + at(end_ns)) / 2 * static_cast<double>(end_ns - begin_ns) / kNsPerSecond;
    if (b.t_ns >= to_ns) return joules;
  }
  return std::nullopt;  // the samples end before to_ns
}

}  // namespace

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
  // The driver's power samples over the interval and kEnergyEdgeNs around it: the peak inside, and the
  // energy counter's ends placed with them (energy_value_at). One read serves both.
  const std::vector<Sample> sampled = series(reader, device_idx, metrics, "power_sampled_w",
                                             t_begin_ns - kEnergyEdgeNs, t_end_ns + kEnergyEdgeNs + 1);
  const std::vector<Sample> energy = series(reader, device_idx, metrics, "energy_j", kFromStart, kAll);
  summary.energy_j = energy.empty() ? kNaN
                                    : energy_value_at(energy, sampled, t_end_ns) -
                                          energy_value_at(energy, sampled, t_begin_ns);
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
    std::sort(values.begin(), values.end());
    std::size_t middle = values.size() / 2;
    summary.median_sm_mhz =
        values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
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
