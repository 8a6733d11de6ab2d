// Telemetry source interface: a source (NVML, AMD SMI, procfs/sysfs, replay) enumerates its devices and the
// metrics each can read, and reads one metric at a time (or a batch of one device's metrics) on demand.
// Values are already in the metric's unit (W, J, °C, MHz, %, bytes, s); counters are unwrapped 64-bit totals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/gpu_scope.h"

namespace calo::telemetry {

/// How a metric's values combine over time.
enum class MetricKind {
  kGauge,    ///< an instantaneous level (power, temperature, clock)
  kCounter,  ///< a monotonically growing total (energy, bytes, throttled seconds); deltas are meaningful
  kBitmask,  ///< a set of flags (clock-event reasons)
};

/// "gauge" | "counter" | "bitmask" (the spelling used in the run store's metric table).
std::string_view metric_kind_name(MetricKind kind);

/// Writes a metric kind into JSON as its name (so structs holding one serialise with CALO_JSON_FIELDS).
void to_json(nlohmann::json& json, MetricKind kind);

/// One metric a device can read.
struct MetricInfo {
  std::string name;                      ///< e.g. "power_instant_w" (docs/METRICS.md, DESIGN.md metric names)
  std::string unit;                      ///< e.g. "W", "J", "C", "MHz", "%", "bytes", "s", "mask"
  MetricKind kind = MetricKind::kGauge;  ///< gauge | counter | bitmask
  std::string group;              ///< metrics of one group are read together; groups never share a thread
  int64_t default_period_ns = 0;  ///< recommended sampling period (follows the measured sensor refresh)
  int64_t expected_cost_ns = 0;   ///< typical cost of one read, as measured on H200 (0 = unknown)
  bool buffered = false;  ///< the source keeps the history: a read returns every sample since the last one
};

/// One device of a source.
struct DeviceInfo {
  int index = 0;                         ///< index within its source (NVML index, CPU package number, ...)
  std::string kind;                      ///< "gpu" | "cpu"
  std::string name;                      ///< marketing name ("NVIDIA H200") or "host"
  std::string uuid;                      ///< stable identifier where the source has one, else ""
  std::string pci_bus;                   ///< PCI bus id ("00000000:18:00.0") or ""
  std::string driver;                    ///< driver version string or ""
  double power_limit_w = 0;              ///< enforced power limit in W (0 = unknown)
  double max_sm_mhz = 0;                 ///< maximum SM clock in MHz (0 = unknown)
  double max_mem_mhz = 0;                ///< maximum memory clock in MHz (0 = unknown)
  std::vector<MetricInfo> metrics;       ///< what this device can read (unsupported ones are left out)
  std::vector<std::string> unsupported;  ///< "metric: reason" for each metric this device cannot read
};

/// Outcome of one read.
enum class ReadStatus {
  kOk,           ///< value and sensor_t_ns are valid
  kUnsupported,  ///< this device cannot read this metric (report once, stop reading it)
  kError,        ///< transient failure (try again next period)
  kDeviceLost,   ///< the device fell off the bus (stop reading the whole device)
};

/// Sentinel for Reading::sensor_t_ns when the source attaches no timestamp of its own.
inline constexpr int64_t kNoSensorTime = -1;

/// One sample of a buffered metric, dated by the source.
struct TimedValue {
  int64_t sensor_t_ns = 0;  ///< when the source took it, on CLOCK_MONOTONIC
  double value = 0;         ///< in the metric's unit
};

/// The result of reading one metric.
struct Reading {
  ReadStatus status = ReadStatus::kError;  ///< kOk when value is valid
  double value = 0;                        ///< in the metric's unit; counters unwrapped
  int64_t sensor_t_ns = kNoSensorTime;     ///< sensor's own timestamp on CLOCK_MONOTONIC (core::monotonic_ns)
  std::string error;                       ///< what went wrong when status != kOk
  std::vector<TimedValue> series;  ///< buffered metrics: the samples since the previous read, oldest first
};

/// A telemetry source. read()/read_batch() may be called concurrently from several sampler threads for
/// different (device, metric) pairs, never concurrently for the same pair (wrap state is per pair).
class Source {
 public:
  virtual ~Source() = default;
  /// Short name: "nvml", "amdsmi", "procfs", "replay".
  virtual std::string name() const = 0;
  /// True when the source's library/files were found and at least one device can be read.
  virtual bool available() const = 0;
  /// Why the source is not available ("libnvidia-ml.so.1 not found"), or "" when it is.
  virtual std::string unavailable_reason() const = 0;
  /// The devices of this source and their metrics; stable for the source's lifetime.
  virtual const std::vector<DeviceInfo>& devices() const = 0;
  /// Which devices the job's scope left out and what else the user should know about it ("" = nothing).
  virtual std::string scope_note() const { return ""; }
  /// Reads metric `metric_index` (into devices()[device_position].metrics) of device `device_position`.
  virtual Reading read(size_t device_position, size_t metric_index) = 0;
  /// Reads several metrics of one device at once (one driver call where possible);
  /// out.size()==metrics.size().
  virtual void read_batch(size_t device_position, std::span<const size_t> metric_indices,
                          std::span<Reading> out) {
    for (size_t position = 0; position < metric_indices.size(); ++position) {
      out[position] = read(device_position, metric_indices[position]);
    }
  }
};

/// Opens every local source that can run here (NVML, AMD SMI, procfs); unavailable ones are still returned
/// so callers can say why they cannot read (check available()). NVML reads only the GPUs `gpu_scope` admits.
std::vector<std::unique_ptr<Source>> open_local_sources(const GpuScope& gpu_scope = {});

/// The sources of `sources` that can be read and that `only_names` names (empty: all), GPUs first (in source
/// order), then the host (procfs). Appends to `notes` why a source cannot be read and each one's scope note;
/// with no GPU source, "<no_gpu_subject>: not available (<reasons>); recording host metrics only".
std::vector<Source*> usable_sources(const std::vector<std::unique_ptr<Source>>& sources,
                                    const std::vector<std::string>& only_names,
                                    std::string_view no_gpu_subject, std::vector<std::string>& notes);

/// Unwraps a counter read as an unsigned integer of `width_bits` (32 or 64) into a growing 64-bit total.
class CounterUnwrapper {
 public:
  /// Width of the raw counter in bits (values wrap at 2^width_bits).
  explicit CounterUnwrapper(int width_bits = 64) : width_bits_(width_bits) {}
  /// Feeds a raw reading and returns the unwrapped total (the first reading is returned as is).
  uint64_t unwrap(uint64_t raw);
  /// Number of wraps detected so far.
  int wraps() const { return wraps_; }

 private:
  int width_bits_;
  bool has_last_ = false;
  uint64_t last_raw_ = 0;
  uint64_t offset_ = 0;
  int wraps_ = 0;
};

}  // namespace calo::telemetry
