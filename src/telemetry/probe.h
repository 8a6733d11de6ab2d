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
  double refresh_ms = 0;                 ///< median time between changes (0 = never changed)
  double recommended_period_ms = 0;      ///< see docs/METRICS.md "Telemetry"
  double default_period_ms = 0;          ///< the metric's default period in calo record
  int errors = 0;                        ///< failed reads
};

/// Probes every device of `sources`: query costs one device at a time (NVML serializes queries across GPUs,
/// so parallel reads would measure contention), then the refresh of each query group, devices in parallel,
/// each group for `seconds_per_group` of back-to-back reads.
std::vector<ProbeRow> probe_sources(const std::vector<Source*>& sources, double seconds_per_group);

/// Recommended period from measured refresh and cost: gauges/bitmasks at half the refresh period (so every
/// sensor update is seen), counters at the refresh period; never below 20× the read cost or 1 ms; rounded
/// down to 1-2-5 steps. Falls back to `default_ms` when the value never changed.
double recommend_period_ms(MetricKind kind, double refresh_ms, double cost_us, double default_ms);

}  // namespace calo::telemetry
