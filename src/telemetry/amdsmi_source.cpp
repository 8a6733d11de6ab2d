// AMD SMI source: see amdsmi_source.h. The few declarations below follow amdsmi.h (ROCm 6.x); structures
// whose layout changed between releases are read only through their first, stable member into an oversized
// buffer.
#include "telemetry/amdsmi_source.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>

namespace calo::telemetry {

namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kUs = 1'000;

// --- declarations from amdsmi.h (public API) ---
using AmdStatus = int;  // amdsmi_status_t; 0 = AMDSMI_STATUS_SUCCESS
constexpr AmdStatus kAmdSuccess = 0;
constexpr AmdStatus kAmdNotSupported = 2;   // AMDSMI_STATUS_NOT_SUPPORTED
constexpr uint64_t kInitAmdGpus = 1u << 1;  // AMDSMI_INIT_AMD_GPUS
using AmdHandle = void*;                    // amdsmi_socket_handle / amdsmi_processor_handle
constexpr int kTempEdge = 0;                // AMDSMI_TEMPERATURE_TYPE_EDGE
constexpr int kSensorHotspot = 1;           // AMDSMI_TEMPERATURE_TYPE_HOTSPOT (junction)
constexpr int kTempVram = 2;                // AMDSMI_TEMPERATURE_TYPE_VRAM
constexpr int kTempCurrent = 0;             // AMDSMI_TEMP_CURRENT
constexpr int kClockTypeGfx = 0;            // AMDSMI_CLK_TYPE_SYS (= GFX)
constexpr int kClockTypeMem = 4;            // AMDSMI_CLK_TYPE_MEM
constexpr int kMemVram = 0;                 // AMDSMI_MEM_TYPE_VRAM
struct EngineUsage {                        // amdsmi_engine_usage_t
  uint32_t gfx_activity;
  uint32_t umc_activity;
  uint32_t mm_activity;
  uint32_t reserved[13];
};

struct AmdApi {
  AmdStatus (*init)(uint64_t) = nullptr;
  AmdStatus (*shut_down)() = nullptr;
  AmdStatus (*socket_handles)(uint32_t*, AmdHandle*) = nullptr;
  AmdStatus (*processor_handles)(AmdHandle, uint32_t*, AmdHandle*) = nullptr;
  AmdStatus (*energy_count)(AmdHandle, uint64_t*, float*, uint64_t*) = nullptr;
  AmdStatus (*temp_metric)(AmdHandle, int, int, int64_t*) = nullptr;
  AmdStatus (*clock_info)(AmdHandle, int, void*) = nullptr;
  AmdStatus (*gpu_activity)(AmdHandle, EngineUsage*) = nullptr;
  AmdStatus (*memory_usage)(AmdHandle, int, uint64_t*) = nullptr;
  AmdStatus (*power_info)(AmdHandle, void*) = nullptr;
  AmdStatus (*asic_info)(AmdHandle, void*) = nullptr;
  AmdStatus (*power_cap_info)(AmdHandle, uint32_t, void*) = nullptr;
};

enum class AmdQuery {
  kEnergy,
  kPower,
  kTempGpu,
  kTempHotspot,
  kTempMem,
  kClockGfx,
  kClockMem,
  kUtilGfx,
  kUtilMem,
  kMemUsed
};

struct AmdSpec {
  const char* name;
  const char* unit;
  MetricKind kind;
  const char* group;
  int64_t period_ns;
  AmdQuery query;
};

const AmdSpec kAmdSpecs[] = {
    {"energy_j", "J", MetricKind::kCounter, "amdsmi.energy", 100 * kMs, AmdQuery::kEnergy},
    {"power_instant_w", "W", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kPower},
    {"temp_gpu_c", "C", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kTempGpu},
    {"temp_hotspot_c", "C", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kTempHotspot},
    {"temp_mem_c", "C", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kTempMem},
    {"clock_sm_mhz", "MHz", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kClockGfx},
    {"clock_mem_mhz", "MHz", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kClockMem},
    {"util_gpu_pct", "pct", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kUtilGfx},
    {"util_mem_pct", "pct", MetricKind::kGauge, "amdsmi.fast", 20 * kMs, AmdQuery::kUtilMem},
    {"mem_used_bytes", "bytes", MetricKind::kGauge, "amdsmi.fast", 100 * kMs, AmdQuery::kMemUsed},
};

}  // namespace

struct AmdSmiSource::Impl : VendorLibrary {
  AmdApi api;
  std::vector<AmdHandle> handles;
  std::vector<std::vector<const AmdSpec*>> specs;  // per device, parallel to metrics
  std::vector<std::vector<CounterUnwrapper>> unwrappers;

  /// Shuts AMD SMI down when it initialized; ~VendorLibrary then unloads it.
  ~Impl() override {
    if (initialized) api.shut_down();
  }

  Reading query(size_t device_position, const AmdSpec& spec, CounterUnwrapper* unwrapper) {
    AmdHandle handle = handles[device_position];
    Reading reading;
    AmdStatus status = kAmdSuccess;
    switch (spec.query) {
      case AmdQuery::kEnergy: {
        uint64_t count = 0;
        float resolution_uj = 0;
        uint64_t timestamp_ns = 0;
        status = api.energy_count(handle, &count, &resolution_uj, &timestamp_ns);
        const uint64_t total = unwrapper ? unwrapper->unwrap(count) : count;
        reading.value = static_cast<double>(total) * static_cast<double>(resolution_uj) * 1e-6;
        break;
      }
      case AmdQuery::kPower: {
        uint64_t buffer[64] = {};  // amdsmi_power_info_t: first member current_socket_power (W) in ROCm 6.x
        status = api.power_info(handle, buffer);
        reading.value = static_cast<double>(buffer[0]);
        break;
      }
      case AmdQuery::kTempGpu:
      case AmdQuery::kTempHotspot:
      case AmdQuery::kTempMem: {
        const int sensor = spec.query == AmdQuery::kTempGpu       ? kTempEdge
                           : spec.query == AmdQuery::kTempHotspot ? kSensorHotspot
                                                                  : kTempVram;
        int64_t celsius = 0;
        status = api.temp_metric(handle, sensor, kTempCurrent, &celsius);
        reading.value = static_cast<double>(celsius);
        break;
      }
      case AmdQuery::kClockGfx:
      case AmdQuery::kClockMem: {
        uint32_t buffer[32] = {};  // amdsmi_clk_info_t: first member clk (MHz)
        status =
            api.clock_info(handle, spec.query == AmdQuery::kClockGfx ? kClockTypeGfx : kClockTypeMem, buffer);
        reading.value = buffer[0];
        break;
      }
      case AmdQuery::kUtilGfx:
      case AmdQuery::kUtilMem: {
        EngineUsage usage{};
        status = api.gpu_activity(handle, &usage);
        reading.value = spec.query == AmdQuery::kUtilGfx ? usage.gfx_activity : usage.umc_activity;
        break;
      }
      case AmdQuery::kMemUsed: {
        uint64_t used = 0;
        status = api.memory_usage(handle, kMemVram, &used);
        reading.value = static_cast<double>(used);
        break;
      }
    }
    if (status == kAmdSuccess) {
      reading.status = ReadStatus::kOk;
    } else {
      reading.status = status == kAmdNotSupported ? ReadStatus::kUnsupported : ReadStatus::kError;
      reading.error = fmt::format("amdsmi status {}", status);
    }
    return reading;
  }
};

AmdSmiSource::AmdSmiSource(const std::string& library_path)
    : VendorLibrarySource(std::make_unique<Impl>()), impl_(library_as<Impl>()) {
  Impl& impl = *impl_;
  for (const std::string& path :
       library_path.empty() ? std::vector<std::string>{"libamd_smi.so", "/opt/rocm/lib/libamd_smi.so"}
                            : std::vector<std::string>{library_path}) {
    impl.library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (impl.library) break;
  }
  if (impl.library == nullptr) {
    impl.reason = "libamd_smi.so could not be loaded: no ROCm AMD SMI on this host";
    return;
  }
  AmdApi& api = impl.api;
  const bool ok = load_symbol(impl.library, "amdsmi_init", api.init) &&
                  load_symbol(impl.library, "amdsmi_shut_down", api.shut_down) &&
                  load_symbol(impl.library, "amdsmi_get_socket_handles", api.socket_handles) &&
                  load_symbol(impl.library, "amdsmi_get_processor_handles", api.processor_handles) &&
                  load_symbol(impl.library, "amdsmi_get_energy_count", api.energy_count) &&
                  load_symbol(impl.library, "amdsmi_get_temp_metric", api.temp_metric) &&
                  load_symbol(impl.library, "amdsmi_get_clock_info", api.clock_info) &&
                  load_symbol(impl.library, "amdsmi_get_gpu_activity", api.gpu_activity) &&
                  load_symbol(impl.library, "amdsmi_get_gpu_memory_usage", api.memory_usage) &&
                  load_symbol(impl.library, "amdsmi_get_power_info", api.power_info) &&
                  load_symbol(impl.library, "amdsmi_get_gpu_asic_info", api.asic_info) &&
                  load_symbol(impl.library, "amdsmi_get_power_cap_info", api.power_cap_info);
  if (!ok) {
    impl.reason = "libamd_smi.so lacks functions calo needs (ROCm older than 6.0?)";
    return;
  }
  if (api.init(kInitAmdGpus) != kAmdSuccess) {
    impl.reason = "amdsmi_init failed";
    return;
  }
  impl.initialized = true;
  uint32_t socket_count = 0;
  api.socket_handles(&socket_count, nullptr);
  std::vector<AmdHandle> sockets(socket_count);
  if (socket_count > 0) api.socket_handles(&socket_count, sockets.data());
  for (AmdHandle socket : sockets) {
    uint32_t processor_count = 0;
    api.processor_handles(socket, &processor_count, nullptr);
    std::vector<AmdHandle> processors(processor_count);
    if (processor_count > 0) api.processor_handles(socket, &processor_count, processors.data());
    for (AmdHandle processor : processors) {
      DeviceInfo device;
      device.index = static_cast<int>(impl.devices.size());
      device.kind = "gpu";
      char asic[4096] = {};  // amdsmi_asic_info_t: first member market_name[256]
      if (api.asic_info(processor, asic) == kAmdSuccess) device.name = std::string(asic, strnlen(asic, 256));
      uint64_t cap[16] = {};  // amdsmi_power_cap_info_t: first member power_cap (µW)
      if (api.power_cap_info(processor, 0, cap) == kAmdSuccess)
        device.power_limit_w = static_cast<double>(cap[0]) * 1e-6;
      impl.handles.push_back(processor);
      impl.specs.emplace_back();
      impl.unwrappers.emplace_back();
      const size_t position = impl.handles.size() - 1;
      for (const AmdSpec& spec : kAmdSpecs) {
        CounterUnwrapper probe_unwrapper;
        Reading reading = impl.query(position, spec, &probe_unwrapper);
        if (reading.status != ReadStatus::kOk) {
          device.unsupported.push_back(fmt::format("{}: {}", spec.name, reading.error));
          continue;
        }
        impl.specs[position].push_back(&spec);
        impl.unwrappers[position].emplace_back(64);
        const int64_t cost_ns = spec.query == AmdQuery::kEnergy ? 100 * kUs : 10 * kUs;
        device.metrics.push_back({spec.name, spec.unit, spec.kind, spec.group, spec.period_ns, cost_ns});
      }
      impl.devices.push_back(std::move(device));
    }
  }
  if (impl.devices.empty()) impl.reason = "AMD SMI found no GPU";
}

Reading AmdSmiSource::read(size_t device_position, size_t metric_index) {
  return impl_->query(device_position, *impl_->specs[device_position][metric_index],
                      &impl_->unwrappers[device_position][metric_index]);
}

}  // namespace calo::telemetry
