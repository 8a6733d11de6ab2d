// Telemetry of a `calo bench` run: the same sources and Sampler as `calo record`, streamed into the run store
// of the bench run while the steps execute (rank 0 of the job records its node).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "store/run_store.h"
#include "telemetry/gpu_scope.h"
#include "telemetry/sampler.h"
#include "telemetry/source.h"

namespace calo::exec {

/// A device the telemetry session records, with its run-store index.
struct RecordedDevice {
  std::int32_t device_idx = 0;  ///< store::DeviceInfo::idx
  std::string kind;             ///< "gpu" | "cpu"
  int slot = 0;                 ///< index within its source (NVML index for GPUs)
  std::string name;             ///< product name
};

/// Samples every local source into `writer` from start() to stop().
class BenchTelemetry {
 public:
  /// Opens the local sources and registers their devices and metrics with `writer`; `started_ns` is the run's
  /// time zero (store::RunInfo::started_ns); only the GPUs `job_gpus` admits are recorded.
  BenchTelemetry(store::RunWriter& writer, std::int64_t started_ns, const telemetry::GpuScope& job_gpus);
  ~BenchTelemetry();
  BenchTelemetry(const BenchTelemetry&) = delete;
  BenchTelemetry& operator=(const BenchTelemetry&) = delete;

  /// Starts the sampler threads.
  void start();
  /// Stops them (idempotent).
  void stop();
  /// Recorded devices (GPUs first, then the host).
  const std::vector<RecordedDevice>& devices() const { return devices_; }
  /// Notes about what cannot be recorded here ("GPUs: not available (...)").
  const std::vector<std::string>& notes() const { return notes_; }
  /// Sampler loop statistics (after stop()).
  std::vector<telemetry::LoopStats> loop_stats() const;

 private:
  struct Target {
    std::int32_t device_idx;
    std::int32_t metric_id;
  };
  store::RunWriter& writer_;
  std::int64_t started_ns_;
  std::vector<std::unique_ptr<telemetry::Source>> all_sources_;
  std::vector<telemetry::Source*> sources_;
  std::vector<std::vector<std::vector<Target>>> targets_;
  std::vector<RecordedDevice> devices_;
  std::vector<std::string> notes_;
  std::unique_ptr<telemetry::Sampler> sampler_;
  bool running_ = false;
};

}  // namespace calo::exec
