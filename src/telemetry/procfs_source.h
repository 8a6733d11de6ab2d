// Linux host source: CPU utilization and host memory from /proc, CPU package energy from powercap
// (intel-rapl energy_uj) and CPU temperature from hwmon where those exist ("not available" otherwise).
#pragma once

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "telemetry/source.h"

namespace calo::telemetry {

/// Reads the host as one "cpu" device. `proc_root`/`sys_root` default to "/proc" and "/sys" (tests point them
/// at a directory tree of real files with the same layout).
class ProcfsSource : public Source {
 public:
  /// Scans proc_root and sys_root for what this host exposes.
  explicit ProcfsSource(std::filesystem::path proc_root = "/proc", std::filesystem::path sys_root = "/sys");
  std::string name() const override { return "procfs"; }
  bool available() const override { return available_; }
  std::string unavailable_reason() const override { return unavailable_reason_; }
  const std::vector<DeviceInfo>& devices() const override { return devices_; }
  Reading read(size_t device_position, size_t metric_index) override;

 private:
  enum class Which { kCpuUtil, kHostMem, kCpuEnergy, kCpuTemp };
  struct RaplZone {
    std::filesystem::path energy_file;  // .../intel-rapl:N/energy_uj
    uint64_t range_uj = 0;              // max_energy_range_uj + 1
    uint64_t last_raw_uj = 0;           // previous raw reading
    uint64_t total_uj = 0;              // unwrapped total
    bool has_last = false;              // whether last_raw_uj is set
  };
  Reading read_cpu_util();
  Reading read_host_mem() const;
  Reading read_cpu_energy();
  Reading read_cpu_temp() const;

  std::filesystem::path proc_root_;
  std::filesystem::path sys_root_;
  bool available_ = false;
  std::string unavailable_reason_;
  std::vector<DeviceInfo> devices_;
  std::vector<Which> which_;  // parallel to devices_[0].metrics
  std::vector<RaplZone> rapl_zones_;
  std::vector<std::filesystem::path> temp_files_;  // package temperature inputs (millidegrees C)
  uint64_t last_busy_ticks_ = 0;
  uint64_t last_total_ticks_ = 0;
  double last_util_pct_ = 0;    // utilization over the last interval that had ticks
  bool has_last_util_ = false;  // whether last_util_pct_ holds a value
};

}  // namespace calo::telemetry
