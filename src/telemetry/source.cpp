// Source helpers shared by every telemetry source: kind names, counter unwrapping, opening local sources.
#include "telemetry/source.h"

#include "telemetry/amdsmi_source.h"
#include "telemetry/nvml_source.h"
#include "telemetry/procfs_source.h"

namespace calo::telemetry {

std::string_view metric_kind_name(MetricKind kind) {
  switch (kind) {
    case MetricKind::kGauge:
      return "gauge";
    case MetricKind::kCounter:
      return "counter";
    case MetricKind::kBitmask:
      return "bitmask";
  }
  return "gauge";
}

uint64_t CounterUnwrapper::unwrap(uint64_t raw) {
  if (has_last_ && raw < last_raw_) {
    if (width_bits_ < 64) {
      const uint64_t range = uint64_t{1} << width_bits_;
      const bool looks_like_wrap = last_raw_ >= range / 2 && raw < range / 2;
      // A wrap continues the count from 2^width; a reset (driver reload) continues from the last total.
      offset_ += looks_like_wrap ? range : last_raw_;
    } else {
      offset_ += last_raw_;  // a 64-bit counter cannot wrap in practice: this is a reset
    }
    ++wraps_;
  }
  has_last_ = true;
  last_raw_ = raw;
  return offset_ + raw;
}

std::vector<std::unique_ptr<Source>> open_local_sources(const GpuScope& gpu_scope) {
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<NvmlSource>("", gpu_scope));
  sources.push_back(std::make_unique<AmdSmiSource>());
  sources.push_back(std::make_unique<ProcfsSource>());
  return sources;
}

}  // namespace calo::telemetry
