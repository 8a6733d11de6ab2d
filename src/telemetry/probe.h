// `calo probe`: per device and metric, the query cost and how often the value really changes (sensor
// refresh), and a recommended sampling period.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "telemetry/source.h"

namespace calo::telemetry {

/// Probe result of one (device, metric).
struct ProbeRow {
  std::string source;                    ///< source name
  int device_index = 0;                  ///< device index within the source
  std::string device_kind;               ///< "gpu" | "cpu"
  std::string metric;                    ///< metric name
  std::string group;                     ///< query group
  MetricKind kind = MetricKind::kGauge;  ///< gauge | counter | bitmask
  double cost_median_us = 0;             ///< median wall time of one read
  double cost_p99_us = 0;                ///< 99th percentile wall time of one read
  double cpu_per_read_us = 0;            ///< CPU time of the reading thread per read
  int64_t reads = 0;                     ///< reads in the change-detection loop
  int64_t changes = 0;                   ///< times the value differed from the previous read
  double changes_per_s = 0;              ///< changes / loop seconds
  int64_t transients = 0;                ///< changes to a value held < kTransientNs (a driver update's step)
  double refresh_ms = 0;  ///< median time between changes to values held >= kTransientNs (0 = none)
  double recommended_period_ms = 0;  ///< see docs/METRICS.md "Telemetry"
  double default_period_ms = 0;      ///< the metric's default period in calo record
  bool buffered = false;             ///< a read returns every sample since the previous read
  int errors = 0;                    ///< failed reads
};

/// A value held for less than this between two changes is a transient: at each ~100 ms driver update NVML
/// gauges pass through intermediate values for ~0.2-2 ms (docs/measurements/telemetry-log.md). Transients are
/// counted apart and do not set the refresh period.
inline constexpr int64_t kTransientNs = 2'000'000;

/// Probes every device of `sources`: query costs one device at a time (NVML serializes queries across GPUs,
/// so parallel reads would measure contention), then the refresh of each query group, devices in parallel,
/// each group for `seconds_per_group` of back-to-back reads.
std::vector<ProbeRow> probe_sources(const std::vector<Source*>& sources, double seconds_per_group);

/// Recommended period of `row` (costs and refresh filled in): a gauge or bitmask at half its refresh period
/// (so every sensor update is seen), never below 20x its read cost or 1 ms, rounded down to 1-2-5 steps, its
/// default when it never settled on a new value; a counter loses nothing between reads and a buffered metric
/// returns every sample, so for them the period calo record uses by default (an expensive one stretched to
/// 0.1 % of a core by its CPU per read).
double recommend_period_ms(const ProbeRow& row);

}  // namespace calo::telemetry
