// Linux host source (procfs/sysfs): see procfs_source.h.
#include "telemetry/procfs_source.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/time.h"

namespace calo::telemetry {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMs = 1'000'000;

bool read_first_line(const fs::path& path, std::string& line) {
  std::ifstream file(path);
  return static_cast<bool>(std::getline(file, line));
}

bool read_u64(const fs::path& path, uint64_t& value) {
  std::string line;
  if (!read_first_line(path, line)) return false;
  try {
    value = std::stoull(line);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

Reading ok_reading(double value) {
  Reading reading;
  reading.status = ReadStatus::kOk;
  reading.value = value;
  return reading;
}

Reading error_reading(ReadStatus status, std::string message) {
  Reading reading;
  reading.status = status;
  reading.error = std::move(message);
  return reading;
}

}  // namespace

ProcfsSource::ProcfsSource(fs::path proc_root, fs::path sys_root)
    : proc_root_(std::move(proc_root)), sys_root_(std::move(sys_root)) {
  DeviceInfo host;
  host.index = 0;
  host.kind = "cpu";
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  host.name = fmt::format("host {}", hostname);
  if (!fs::exists(proc_root_ / "stat")) {
    unavailable_reason_ = fmt::format("{} not found (not Linux?)", (proc_root_ / "stat").string());
    return;
  }
  available_ = true;
  // A procfs read (open, read, parse) costs ~100 µs (overhead benchmark here): the "slow" class, so
  // --fast-period does not pull host metrics to 10 ms.
  host.metrics.push_back({"cpu_util_pct", "pct", MetricKind::kGauge, "procfs", 100 * kMs, 100'000});
  which_.push_back(Which::kCpuUtil);
  host.metrics.push_back({"host_mem_used_bytes", "bytes", MetricKind::kGauge, "procfs", 100 * kMs, 100'000});
  which_.push_back(Which::kHostMem);

  // powercap: top-level intel-rapl:N zones are CPU packages (sub-zones intel-rapl:N:M are parts of them).
  std::string rapl_reason = fmt::format("no {}/class/powercap/intel-rapl:N/energy_uj", sys_root_.string());
  const fs::path powercap = sys_root_ / "class" / "powercap";
  std::error_code error;
  if (fs::is_directory(powercap, error)) {
    std::vector<fs::path> zones;
    for (const auto& entry : fs::directory_iterator(powercap, error)) {
      const std::string zone = entry.path().filename().string();
      if (zone.rfind("intel-rapl:", 0) == 0 && zone.find(':', 11) == std::string::npos)
        zones.push_back(entry.path());
    }
    std::sort(zones.begin(), zones.end());
    for (const auto& zone : zones) {
      uint64_t energy_uj = 0;
      uint64_t range_uj = 0;
      if (!read_u64(zone / "energy_uj", energy_uj)) {
        rapl_reason =
            fmt::format("{} is not readable (root-only on most kernels)", (zone / "energy_uj").string());
        continue;
      }
      RaplZone rapl;
      rapl.energy_file = zone / "energy_uj";
      rapl.range_uj = read_u64(zone / "max_energy_range_uj", range_uj) ? range_uj + 1 : 0;
      rapl_zones_.push_back(std::move(rapl));
    }
  }
  if (!rapl_zones_.empty()) {
    host.metrics.push_back({"cpu_energy_j", "J", MetricKind::kCounter, "procfs", 100 * kMs, 100'000});
    which_.push_back(Which::kCpuEnergy);
  } else {
    host.unsupported.push_back("cpu_energy_j: not available (" + rapl_reason + ")");
  }

  // hwmon: CPU package temperature from coretemp ("Package id N" labels), k10temp/zenpower (Tctl/Tdie).
  const fs::path hwmon = sys_root_ / "class" / "hwmon";
  if (fs::is_directory(hwmon, error)) {
    std::vector<fs::path> chips;
    for (const auto& entry : fs::directory_iterator(hwmon, error)) chips.push_back(entry.path());
    std::sort(chips.begin(), chips.end());
    for (const auto& chip : chips) {
      std::string chip_name;
      if (!read_first_line(chip / "name", chip_name)) continue;
      chip_name = trimmed(chip_name);
      if (chip_name != "coretemp" && chip_name != "k10temp" && chip_name != "zenpower") continue;
      for (int input = 1; input <= 64; ++input) {
        const fs::path value_file = chip / fmt::format("temp{}_input", input);
        if (!fs::exists(value_file)) continue;
        std::string label;
        read_first_line(chip / fmt::format("temp{}_label", input), label);
        label = trimmed(label);
        const bool package = chip_name == "coretemp" ? label.rfind("Package id", 0) == 0
                                                     : (label.empty() || label == "Tctl" || label == "Tdie");
        if (package) temp_files_.push_back(value_file);
      }
    }
  }
  if (!temp_files_.empty()) {
    host.metrics.push_back({"temp_cpu_c", "C", MetricKind::kGauge, "procfs", 100 * kMs, 100'000});
    which_.push_back(Which::kCpuTemp);
  } else {
    host.unsupported.push_back(fmt::format(
        "temp_cpu_c: not available (no coretemp/k10temp package sensor under {})", hwmon.string()));
  }
  devices_.push_back(std::move(host));
  read_cpu_util();  // baseline for the first delta
}

Reading ProcfsSource::read(size_t device_position, size_t metric_index) {
  if (device_position != 0 || metric_index >= which_.size()) {
    return error_reading(ReadStatus::kUnsupported, "no such procfs metric");
  }
  switch (which_[metric_index]) {
    case Which::kCpuUtil:
      return read_cpu_util();
    case Which::kHostMem:
      return read_host_mem();
    case Which::kCpuEnergy:
      return read_cpu_energy();
    case Which::kCpuTemp:
      return read_cpu_temp();
  }
  return error_reading(ReadStatus::kUnsupported, "no such procfs metric");
}

Reading ProcfsSource::read_cpu_util() {
  std::string line;
  if (!read_first_line(proc_root_ / "stat", line))
    return error_reading(ReadStatus::kError, "cannot read /proc/stat");
  std::istringstream fields(line);
  std::string label;
  fields >> label;
  uint64_t total_ticks = 0;
  uint64_t idle_ticks = 0;
  uint64_t value = 0;
  for (int column = 0; column < 8 && fields >> value; ++column) {
    total_ticks += value;  // user nice system idle iowait irq softirq steal (guest is inside user)
    if (column == 3 || column == 4) idle_ticks += value;
  }
  const uint64_t busy_ticks = total_ticks - idle_ticks;
  const uint64_t delta_total = total_ticks - last_total_ticks_;
  const uint64_t delta_busy = busy_ticks - last_busy_ticks_;
  const bool first = last_total_ticks_ == 0;
  last_total_ticks_ = total_ticks;
  last_busy_ticks_ = busy_ticks;
  if (first) return error_reading(ReadStatus::kError, "first /proc/stat read is the baseline");
  // /proc/stat ticks at USER_HZ (100 Hz): between two reads less than a tick apart nothing was counted, so
  // the utilization is still the last one computed (this was an error before: 90 % of `calo probe`'s
  // back-to-back reads failed on the GPU host).
  if (delta_total == 0) {
    if (!has_last_util_) return error_reading(ReadStatus::kError, "");  // no tick since the baseline yet
    return ok_reading(last_util_pct_);
  }
  last_util_pct_ = 100.0 * static_cast<double>(delta_busy) / static_cast<double>(delta_total);
  has_last_util_ = true;
  return ok_reading(last_util_pct_);
}

Reading ProcfsSource::read_host_mem() const {
  std::ifstream meminfo(proc_root_ / "meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  uint64_t total_kib = 0;
  uint64_t available_kib = 0;
  bool has_total = false;
  bool has_available = false;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemTotal:") has_total = true, total_kib = kib;
    if (key == "MemAvailable:") has_available = true, available_kib = kib;
  }
  if (!has_total || !has_available) return error_reading(ReadStatus::kError, "cannot parse /proc/meminfo");
  return ok_reading(static_cast<double>(total_kib - available_kib) * 1024.0);
}

Reading ProcfsSource::read_cpu_energy() {
  double total_j = 0;
  for (auto& zone : rapl_zones_) {
    uint64_t raw_uj = 0;
    if (!read_u64(zone.energy_file, raw_uj)) {
      return error_reading(ReadStatus::kError, "cannot read " + zone.energy_file.string());
    }
    if (zone.has_last) {
      // energy_uj wraps at max_energy_range_uj; a smaller reading means one wrap.
      const uint64_t delta =
          raw_uj >= zone.last_raw_uj
              ? raw_uj - zone.last_raw_uj
              : (zone.range_uj > zone.last_raw_uj ? zone.range_uj - zone.last_raw_uj : 0) + raw_uj;
      zone.total_uj += delta;
    } else {
      zone.total_uj = raw_uj;
    }
    zone.has_last = true;
    zone.last_raw_uj = raw_uj;
    total_j += static_cast<double>(zone.total_uj) * 1e-6;
  }
  return ok_reading(total_j);
}

Reading ProcfsSource::read_cpu_temp() const {
  double hottest_c = -1e9;
  for (const auto& file : temp_files_) {
    uint64_t millidegrees = 0;
    if (read_u64(file, millidegrees))
      hottest_c = std::max(hottest_c, static_cast<double>(millidegrees) / 1000.0);
  }
  if (hottest_c < -1e8) return error_reading(ReadStatus::kError, "no CPU temperature input readable");
  return ok_reading(hottest_c);
}

}  // namespace calo::telemetry
