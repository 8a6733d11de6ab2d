#include "store/run_interval_stream.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace calo::store {

namespace {

constexpr double kNsPerSecond = 1e9;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// The median of the values a histogram counts, as core::midpoint_median takes it (the middle value, or the
/// mean of the two middles); NaN when empty.
double histogram_median(const std::map<double, int64_t>& histogram) {
  int64_t count = 0;
  for (const auto& entry : histogram) count += entry.second;
  if (count == 0) return kNaN;
  auto value_at = [&](int64_t rank) {
    for (const auto& [value, times] : histogram) {
      if (rank < times) return value;
      rank -= times;
    }
    return kNaN;
  };
  const int64_t middle = count / 2;
  return count % 2 == 1 ? value_at(middle) : 0.5 * (value_at(middle - 1) + value_at(middle));
}

}  // namespace

RunIntervalStream::RunIntervalStream(const std::vector<MetricInfo>& metrics) {
  for (const MetricInfo& metric : metrics) metric_names_[metric.id] = metric.name;
}

void RunIntervalStream::add(std::span<const Sample> samples) {
  std::lock_guard lock(mutex_);
  for (const Sample& sample : samples) add_one(sample);
}

void RunIntervalStream::add_one(const Sample& sample) {
  if (std::isnan(sample.value)) return;  // the writer stores no NaN
  Device& device = devices_[sample.device_idx];
  device.latest_t_ns = std::max(device.latest_t_ns, sample.t_ns);
  Series& series = series_[{sample.device_idx, sample.metric_id}];
  if (series.added > 0 && sample.t_ns < series.last.t_ns) series.in_order = false;
  if (series.added++ == 0) {
    series.first = sample;
    const auto name = metric_names_.find(sample.metric_id);
    series.clock = name != metric_names_.end() && name->second == "clock_sm_mhz";
    series.driver_power = name != metric_names_.end() && name->second == "power_sampled_w";
  }
  if (sample.t_ns < 0) {
    series.before_zero = sample;
  } else if (!series.from_zero) {
    series.from_zero = sample;
  }
  series.last = sample;
  if (sample.t_ns >= 0) {
    ++device.window_samples;
    if (!series.has_window) {
      series.has_window = true;
      series.window_first = series.window_max = sample.value;
    } else {
      series.window_max = std::max(series.window_max, sample.value);
      const double step_s = static_cast<double>(sample.t_ns - series.previous_in_window.t_ns) / kNsPerSecond;
      series.window_integral += 0.5 * (sample.value + series.previous_in_window.value) * step_s;
    }
    series.window_last = sample.value;
    series.previous_in_window = sample;
    if (series.clock) ++series.histogram[sample.value];
  }
  if (series.driver_power) add_power_sample(series, sample);
}

void RunIntervalStream::add_power_sample(Series& series, const Sample& sample) {
  if (sample.t_ns < -kEnergyEdgeNs) return;  // summarize_interval reads them from -kEnergyEdgeNs on
  if (!series.whole) series.whole.emplace(0, std::numeric_limits<int64_t>::max());
  series.whole->add(sample.t_ns, sample.value);
  if (sample.t_ns <= kEnergyEdgeNs) {
    series.head.push_back(sample);
  } else {
    series.beyond_head = true;
  }
  series.tail.push_back(sample);
  while (series.tail.size() >= 2 && series.tail[1].t_ns < sample.t_ns - kEnergyEdgeNs) {
    series.tail.pop_front();
    series.tail_trimmed = true;
  }
}

std::vector<Sample> RunIntervalStream::skeleton(const Series& series) {
  // Every sample counter_value_at and energy_value_at look at for t = 0 and for a t after the last sample.
  std::vector<Sample> samples;
  if (series.added == 0) return samples;
  samples.push_back(series.first);
  auto same = [](const Sample& a, const Sample& b) { return a.t_ns == b.t_ns && a.value == b.value; };
  for (const std::optional<Sample>& sample :
       {series.before_zero, series.from_zero, std::optional(series.last)}) {
    if (sample && !same(*sample, samples.back())) samples.push_back(*sample);
  }
  return samples;
}

const RunIntervalStream::Series* RunIntervalStream::find(int32_t device_idx, const std::string& name) const {
  for (const auto& [id, metric] : metric_names_) {
    if (metric != name) continue;
    const auto found = series_.find({device_idx, id});
    return found == series_.end() ? nullptr : &found->second;
  }
  return nullptr;
}

std::optional<double> RunIntervalStream::energy_j(int32_t device_idx, int64_t t_end_ns) const {
  const Series* sampled = find(device_idx, "power_sampled_w");
  const bool has_sampled = sampled != nullptr && sampled->whole.has_value();
  const std::optional<double> sampled_j = has_sampled ? sampled->whole->joules_until(t_end_ns) : std::nullopt;
  if (sampled_j) return *sampled_j;
  const Series* energy = find(device_idx, "energy_j");
  if (energy == nullptr) return kNaN;
  const std::vector<Sample> counter = skeleton(*energy);
  if (!has_sampled) return energy_value_at(counter, {}, t_end_ns) - energy_value_at(counter, {}, 0);
  // The counter's ends placed with the power samples near them: the end's anchor is the last read, the
  // start's lies at or before the first read from 0 on; the kept samples must reach past both.
  const int64_t start_reach_ns = std::max<int64_t>(0, energy->from_zero ? energy->from_zero->t_ns : 0);
  const bool head_reaches =
      !sampled->beyond_head || (!sampled->head.empty() && sampled->head.back().t_ns >= start_reach_ns);
  const bool tail_reaches = !sampled->tail_trimmed || sampled->tail.front().t_ns <= energy->last.t_ns;
  if (!head_reaches || !tail_reaches) return std::nullopt;
  const std::vector<Sample> tail(sampled->tail.begin(), sampled->tail.end());
  return energy_value_at(counter, tail, t_end_ns) - energy_value_at(counter, sampled->head, 0);
}

std::optional<IntervalSummary> RunIntervalStream::summary(int32_t device_idx, int64_t t_end_ns) const {
  std::lock_guard lock(mutex_);
  const auto device = devices_.find(device_idx);
  if (device != devices_.end() && device->second.latest_t_ns >= t_end_ns) return std::nullopt;
  for (const auto& [key, series] : series_) {
    if (key.first == device_idx && !series.in_order) return std::nullopt;
  }
  const std::optional<double> energy = energy_j(device_idx, t_end_ns);
  if (!energy) return std::nullopt;
  IntervalSummary summary;
  summary.label = "run";
  summary.device_idx = device_idx;
  summary.t_end_ns = t_end_ns;
  summary.duration_s = static_cast<double>(t_end_ns) / kNsPerSecond;
  summary.energy_j = *energy;
  summary.mean_power_w = summary.duration_s > 0 ? summary.energy_j / summary.duration_s : kNaN;
  auto counter = [&](const std::string& name) {
    const Series* series = find(device_idx, name);
    if (series == nullptr) return kNaN;
    const std::vector<Sample> samples = skeleton(*series);
    return counter_value_at(samples, t_end_ns) - counter_value_at(samples, 0);
  };
  summary.throttle_power_cap_s = counter("throttle_power_cap_s");
  summary.throttle_sw_thermal_s = counter("throttle_sw_thermal_s");
  summary.throttle_hw_thermal_s = counter("throttle_hw_thermal_s");
  summary.throttle_power_brake_s = counter("throttle_power_brake_s");
  auto in_window = [&](const std::string& name, double Series::*field) {
    const Series* series = find(device_idx, name);
    return series != nullptr && series->has_window ? series->*field : kNaN;
  };
  summary.power_integral_j = in_window("power_instant_w", &Series::window_integral);
  summary.peak_power_instant_w = in_window("power_instant_w", &Series::window_max);
  summary.peak_power_sampled_w = in_window("power_sampled_w", &Series::window_max);
  const Series* clock = find(device_idx, "clock_sm_mhz");
  summary.median_sm_mhz = clock == nullptr ? kNaN : histogram_median(clock->histogram);
  summary.temp_gpu_start_c = in_window("temp_gpu_c", &Series::window_first);
  summary.temp_gpu_end_c = in_window("temp_gpu_c", &Series::window_last);
  summary.temp_gpu_max_c = in_window("temp_gpu_c", &Series::window_max);
  summary.sample_count = device == devices_.end() ? 0 : device->second.window_samples;
  return summary;
}

}  // namespace calo::store
