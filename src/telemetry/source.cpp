// Source helpers shared by every telemetry source: kind names, counter unwrapping, opening local sources.
#include "telemetry/source.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "telemetry/amdsmi_source.h"
#include "telemetry/nvml_source.h"
#include "telemetry/procfs_source.h"

namespace calo::telemetry {

constexpr std::array kMetricKindNames{"gauge", "counter", "bitmask"};

std::string_view metric_kind_name(MetricKind kind) {
  return core::enum_name(kind, kMetricKindNames, "gauge");
}

void to_json(nlohmann::json& json, MetricKind kind) {
  json = std::string(metric_kind_name(kind));
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

std::vector<Source*> usable_sources(const std::vector<std::unique_ptr<Source>>& sources,
                                    const std::vector<std::string>& only_names,
                                    std::string_view no_gpu_subject, std::vector<std::string>& notes) {
  std::vector<Source*> used;
  bool any_gpu = false;
  std::vector<std::string> gpu_reasons;
  for (const auto& source : sources) {
    if (!only_names.empty() &&
        std::find(only_names.begin(), only_names.end(), source->name()) == only_names.end()) {
      continue;
    }
    if (!source->available()) {
      if (source->name() != "procfs")
        gpu_reasons.push_back(source->name() + ": " + source->unavailable_reason());
      else
        notes.push_back("host metrics not available: " + source->unavailable_reason());
      continue;
    }
    if (source->name() != "procfs") any_gpu = true;
    if (std::string scope = source->scope_note(); !scope.empty())
      notes.push_back(source->name() + ": " + scope);
    used.push_back(source.get());
  }
  std::stable_sort(used.begin(), used.end(), [](const Source* left, const Source* right) {
    return left->name() != "procfs" && right->name() == "procfs";
  });
  if (!any_gpu) {
    std::string joined;
    for (const auto& reason : gpu_reasons) joined += (joined.empty() ? "" : "; ") + reason;
    notes.push_back(std::string(no_gpu_subject) + ": not available (" + joined +
                    "); recording host metrics only");
  }
  return used;
}

}  // namespace calo::telemetry
