// NVIDIA GPUs through NVML, loaded at run time with dlopen("libnvidia-ml.so.1") (no link dependency).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "telemetry/gpu_scope.h"
#include "telemetry/vendor_library.h"

namespace calo::telemetry {

/// NVML source: power (instant, average), energy counter, temperatures, clocks, clock-event reasons and their
/// cumulative counters, utilization, memory used, NVLink (all links) and PCIe byte counters of every GPU.
/// Query groups (never share a sampler thread): nvml.fast, nvml.memory, nvml.energy, nvml.nvlink, nvml.pcie.
class NvmlSource : public VendorLibrarySource {
 public:
  /// Loads the library (path "" = libnvidia-ml.so.1) and initializes NVML; failures make it unavailable.
  /// Only the GPUs `scope` admits become devices (the job's GPUs; by default every GPU).
  explicit NvmlSource(const std::string& library_path = "", const GpuScope& scope = {});
  std::string name() const override { return "nvml"; }
  std::string scope_note() const override;
  Reading read(size_t device_position, size_t metric_index) override;
  void read_batch(size_t device_position, std::span<const size_t> metric_indices,
                  std::span<Reading> out) override;

 private:
  struct Impl;
  Impl* impl_;  // owned by VendorLibrarySource, which unloads the library after Impl shut it down
};

}  // namespace calo::telemetry
