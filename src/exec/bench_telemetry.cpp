// Telemetry session of a bench run: sources -> Sampler -> run store (mirrors telemetry/recorder.cpp).
#include "exec/bench_telemetry.h"

#include <fmt/format.h>

#include <algorithm>

#include "telemetry/recorder.h"

namespace calo::exec {
BenchTelemetry::BenchTelemetry(store::RunWriter& writer, std::int64_t started_ns,
                               const telemetry::GpuScope& job_gpus)
    : writer_(writer), started_ns_(started_ns) {
  all_sources_ = telemetry::open_local_sources(job_gpus);
  sources_ = telemetry::usable_sources(all_sources_, {}, "GPU telemetry", notes_);
  std::int32_t next_idx = 0;
  targets_.resize(sources_.size());
  for (size_t source_position = 0; source_position < sources_.size(); ++source_position) {
    const auto& devices = sources_[source_position]->devices();
    targets_[source_position].resize(devices.size());
    for (size_t device_position = 0; device_position < devices.size(); ++device_position) {
      const telemetry::DeviceInfo& device = devices[device_position];
      const store::DeviceInfo row = telemetry::to_store_device(device, next_idx++);
      writer_.add_device(row);
      devices_.push_back({row.idx, device.kind, device.index, device.name});
      for (const auto& unsupported : device.unsupported) {
        writer_.log_event({0, store::EventLevel::kInfo, row.idx, sources_[source_position]->name(),
                           "not available: " + unsupported});
      }
      for (const auto& metric : device.metrics) {
        targets_[source_position][device_position].push_back(
            {row.idx, writer_.metric_id(metric.name, metric.unit, telemetry::to_store_kind(metric.kind))});
      }
    }
  }
  telemetry::SamplerSink sink;
  sink.on_samples = [this](std::span<const telemetry::SampleRecord> records) {
    store::Sample converted[64];
    size_t count = 0;
    for (const auto& record : records) {
      const Target& target = targets_[record.source_position][record.device_position][record.metric_index];
      converted[count++] = {target.device_idx, target.metric_id, record.t_ns - started_ns_, record.value,
                            record.sensor_t_ns == telemetry::kNoSensorTime
                                ? store::kNoSensorTime
                                : record.sensor_t_ns - started_ns_};
      if (count == std::size(converted)) {
        writer_.append(std::span<const store::Sample>(converted, count));
        count = 0;
      }
    }
    if (count > 0) writer_.append(std::span<const store::Sample>(converted, count));
  };
  sink.on_event = [this](const telemetry::SamplerEvent& event) {
    const auto& device_targets = targets_[event.source_position][event.device_position];
    writer_.log_event({event.t_ns - started_ns_,
                       event.is_error ? store::EventLevel::kError : store::EventLevel::kWarning,
                       device_targets.empty() ? store::kNone : device_targets[0].device_idx,
                       sources_[event.source_position]->name(), event.message});
  };
  // Energy per step is a headline of a benchmark, whose measured window can be under a second: the energy
  // counter is read at its 100 ms refresh here (not the CPU-stretched default of `calo record`, ~3 s on
  // H200).
  telemetry::PeriodPlan periods;
  periods.by_metric_ns["energy_j"] = 100'000'000;
  sampler_ = std::make_unique<telemetry::Sampler>(sources_, periods, sink);
}

BenchTelemetry::~BenchTelemetry() {
  stop();
}

void BenchTelemetry::start() {
  if (running_) return;
  sampler_->start(started_ns_);
  running_ = true;
}

void BenchTelemetry::stop() {
  if (!running_) return;
  sampler_->stop();
  running_ = false;
}

std::vector<telemetry::LoopStats> BenchTelemetry::loop_stats() const {
  return sampler_->stats();
}

}  // namespace calo::exec
