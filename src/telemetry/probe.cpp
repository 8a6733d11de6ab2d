// `calo probe` engine: see probe.h.
#include "telemetry/probe.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <thread>

#include "core/time.h"
#include "telemetry/sampler.h"

namespace calo::telemetry {

namespace {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1))];
}

// The 1-2-5 step at or below `value_ms`, allowing 2 % of measurement noise: a refresh measured at 99.9 ms is
// the driver's 100 ms tick, and half of it should round to 50 ms, not 20 ms.
double round_down_125(double value_ms) {
  if (value_ms <= 0) return 0;
  const double slack_ms = value_ms * 1.02;
  const double decade = std::pow(10.0, std::floor(std::log10(slack_ms)));
  for (double step : {5.0, 2.0, 1.0}) {
    if (step * decade <= slack_ms) return step * decade;
  }
  return decade;
}

// Groups of a device's metrics by query group (the sampler reads a group together).
std::map<std::string, std::vector<size_t>> groups_of(const DeviceInfo& device) {
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t metric_index = 0; metric_index < device.metrics.size(); ++metric_index) {
    groups[device.metrics[metric_index].group].push_back(metric_index);
  }
  return groups;
}

// The groups the sampler reads on this host (as_measured), so that a 0.5 ms throttle counter does not slow
// the back-to-back reads that find the cheap gauges' refresh. `rows` are measure_costs' rows.
std::map<std::string, std::vector<size_t>> sampler_groups_of(const DeviceInfo& device,
                                                             const std::vector<ProbeRow>& rows) {
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t metric_index = 0; metric_index < device.metrics.size(); ++metric_index) {
    const MetricInfo& metric = device.metrics[metric_index];
    const auto row = std::find_if(rows.begin(), rows.end(), [&](const ProbeRow& candidate) {
      return candidate.metric == metric.name && candidate.device_index == device.index;
    });
    const auto cost_ns = row != rows.end() ? static_cast<int64_t>(row->cost_median_us * 1e3) : 0;
    groups[as_measured(metric, cost_ns).group].push_back(metric_index);
  }
  return groups;
}

// Cost of each metric alone (up to 200 reads or 0.3 s): one row per metric in group order. Called for one
// device at a time: NVML serializes queries across GPUs, so costs measured in parallel would be contention.
void measure_costs(Source& source, size_t device_position, std::vector<ProbeRow>& rows) {
  const DeviceInfo& device = source.devices()[device_position];
  for (const auto& [group, metric_indices] : groups_of(device)) {
    for (size_t metric_index : metric_indices) {
      const MetricInfo& metric = device.metrics[metric_index];
      ProbeRow row;
      row.source = source.name();
      row.device_index = device.index;
      row.device_kind = device.kind;
      row.metric = metric.name;
      row.group = group;
      row.kind = metric.kind;
      row.default_period_ms = static_cast<double>(metric.default_period_ns) / 1e6;
      row.buffered = metric.buffered;
      std::vector<double> costs_us;
      const int64_t cost_begin_ns = core::monotonic_ns();
      const int64_t cpu_begin_ns = core::thread_cpu_ns();
      while (costs_us.size() < 200 && core::monotonic_ns() - cost_begin_ns < 300'000'000) {
        const int64_t before_ns = core::monotonic_ns();
        const Reading reading = source.read(device_position, metric_index);
        costs_us.push_back(static_cast<double>(core::monotonic_ns() - before_ns) / 1e3);
        if (reading.status != ReadStatus::kOk) ++row.errors;
      }
      row.cpu_per_read_us = static_cast<double>(core::thread_cpu_ns() - cpu_begin_ns) / 1e3 /
                            static_cast<double>(costs_us.size());
      row.cost_median_us = quantile(costs_us, 0.5);
      row.cost_p99_us = quantile(costs_us, 0.99);
      rows.push_back(row);
    }
  }
}

// Refresh of each metric: its group (as the sampler groups it on this host) read back to back for
// seconds_per_group, noting when each value changes; fills the rows measure_costs made.
void measure_refresh(Source& source, size_t device_position, double seconds_per_group,
                     std::vector<ProbeRow>& rows) {
  const DeviceInfo& device = source.devices()[device_position];
  for (const auto& [group, metric_indices] : sampler_groups_of(device, rows)) {
    std::vector<ProbeRow*> group_rows;
    for (size_t metric_index : metric_indices) {
      for (ProbeRow& row : rows) {
        if (row.metric == device.metrics[metric_index].name) group_rows.push_back(&row);
      }
    }
    if (group_rows.size() != metric_indices.size()) continue;  // not measured (cannot happen)
    std::vector<Reading> readings(metric_indices.size());
    std::vector<double> last(metric_indices.size(), std::nan(""));
    std::vector<std::vector<int64_t>> change_times(metric_indices.size());
    const int64_t loop_begin_ns = core::monotonic_ns();
    const auto loop_ns = static_cast<int64_t>(seconds_per_group * 1e9);
    int64_t reads = 0;
    while (core::monotonic_ns() - loop_begin_ns < loop_ns) {
      source.read_batch(device_position, metric_indices, readings);
      const int64_t now_ns = core::monotonic_ns();
      ++reads;
      for (size_t position = 0; position < metric_indices.size(); ++position) {
        if (readings[position].status != ReadStatus::kOk) {
          ++group_rows[position]->errors;
          continue;
        }
        const double value = readings[position].value;
        if (!std::isnan(last[position]) && value != last[position]) change_times[position].push_back(now_ns);
        last[position] = value;
      }
    }
    const int64_t loop_end_ns = core::monotonic_ns();
    const double loop_s = static_cast<double>(loop_end_ns - loop_begin_ns) / 1e9;
    for (size_t position = 0; position < metric_indices.size(); ++position) {
      ProbeRow& row = *group_rows[position];
      const auto& times = change_times[position];
      row.group = group;
      row.reads = reads;
      row.changes = static_cast<int64_t>(times.size());
      row.changes_per_s = static_cast<double>(times.size()) / loop_s;
      // A change whose value is gone again within kTransientNs is a transient; the refresh is the median
      // interval between the others (the sensor's own updates).
      std::vector<int64_t> settled;
      for (size_t index = 0; index < times.size(); ++index) {
        const int64_t held_until_ns = index + 1 < times.size() ? times[index + 1] : loop_end_ns;
        if (held_until_ns - times[index] < kTransientNs) {
          ++row.transients;
        } else {
          settled.push_back(times[index]);
        }
      }
      std::vector<double> intervals_ms;
      for (size_t index = 1; index < settled.size(); ++index) {
        intervals_ms.push_back(static_cast<double>(settled[index] - settled[index - 1]) / 1e6);
      }
      row.refresh_ms = quantile(intervals_ms, 0.5);
      row.recommended_period_ms = recommend_period_ms(row);
    }
  }
}

}  // namespace

double recommend_period_ms(const ProbeRow& row) {
  if (row.kind == MetricKind::kCounter || row.buffered) {
    const auto default_ns = static_cast<int64_t>(row.default_period_ms * 1e6);
    if (row.buffered || row.cost_median_us * 1e3 < static_cast<double>(kSlowQueryNs))
      return row.default_period_ms;
    return static_cast<double>(
               cpu_budget_period_ns(default_ns, static_cast<int64_t>(row.cpu_per_read_us * 1e3))) /
           1e6;
  }
  if (row.refresh_ms <= 0) return row.default_period_ms;
  const double floor_ms = std::max(1.0, 20 * row.cost_median_us / 1e3);
  return round_down_125(std::max(row.refresh_ms / 2, floor_ms));
}

std::vector<ProbeRow> probe_sources(const std::vector<Source*>& sources, double seconds_per_group) {
  struct Job {
    Source* source;
    size_t device_position;
    std::vector<ProbeRow> rows;
  };
  std::vector<Job> jobs;
  for (Source* source : sources) {
    if (!source->available()) continue;
    for (size_t device_position = 0; device_position < source->devices().size(); ++device_position) {
      jobs.push_back({source, device_position, {}});
    }
  }
  for (auto& job : jobs) measure_costs(*job.source, job.device_position, job.rows);  // one device at a time
  std::vector<std::thread> threads;
  for (auto& job : jobs) {
    threads.emplace_back([&job, seconds_per_group] {
      measure_refresh(*job.source, job.device_position, seconds_per_group, job.rows);
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<ProbeRow> rows;
  for (auto& job : jobs) rows.insert(rows.end(), job.rows.begin(), job.rows.end());
  return rows;
}

}  // namespace calo::telemetry
