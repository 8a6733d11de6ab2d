// NVML source: see nvml_source.h. nvml.h (PyPI nvidia-nvml-dev) supplies types and field ids, resolved by
// name at build time; at run time every field is read once per GPU and kept only if the driver answers it
// with the value type we expect (field ids differ between driver versions).
#include "telemetry/nvml_source.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/time.h"

#if defined(CALO_HAVE_NVML_H)
#include <nvml.h>
#endif

namespace calo::telemetry {

#if !defined(CALO_HAVE_NVML_H)

struct NvmlSource::Impl : VendorLibrary {
  Impl() { reason = "calo was built without nvml.h (run scripts/install_deps.sh and rebuild)"; }
};

NvmlSource::NvmlSource(const std::string&, const GpuScope&)
    : VendorLibrarySource(std::make_unique<Impl>()), impl_(library_as<Impl>()) {}
std::string NvmlSource::scope_note() const {
  return "";
}
Reading NvmlSource::read(size_t, size_t) {
  return {ReadStatus::kUnsupported, 0, kNoSensorTime, "no NVML", {}};
}
void NvmlSource::read_batch(size_t, std::span<const size_t>, std::span<Reading> out) {
  for (auto& reading : out) reading = {ReadStatus::kUnsupported, 0, kNoSensorTime, "no NVML", {}};
}

#else

namespace {

constexpr int64_t kMs = 1'000'000;  // sampling periods and query costs below are in ns
constexpr int64_t kUs = 1'000;

enum class Query {
  kField,
  kEnergy,
  kTempGpu,
  kClockSm,
  kClockMem,
  kReasons,
  kUtilGpu,
  kUtilMem,
  kMemUsed,
  kPowerSamples
};

// One metric NVML can provide. `scale` converts the raw value into the metric's unit.
struct Spec {
  const char* name;
  const char* unit;
  MetricKind kind;
  const char* group;
  int64_t period_ns;
  int64_t cost_ns;
  Query query;
  unsigned field_id;
  unsigned scope;
  double scale;
};

// Cost figures: fixture h200x4-nvml-phases README (4×H200, driver 580); the sampler re-measures them at start
// and moves a query that is slow on this host out of the fast group. Periods: power refreshes ~10 Hz there
// but gauges also change between refreshes (temperature and clock flicker: 2×H200 capture run,
// docs/measurements/telemetry-log.md), so cheap gauges are read at 10 ms; counters lose nothing between reads
// and are read at 100 ms (the energy counter's refresh), stretched by the sampler where a read costs much CPU
// (kSlowMetricCpuShare); each expensive query in its own group.
const Spec kSpecs[] = {
    {"power_instant_w", "W", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_POWER_INSTANT, 0, 1e-3},
    {"power_avg_w", "W", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_POWER_AVERAGE, 0, 1e-3},
    {"temp_gpu_c", "C", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kTempGpu, 0, 0, 1},
    {"temp_mem_c", "C", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_MEMORY_TEMP, 0, 1},
    {"clock_sm_mhz", "MHz", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kClockSm, 0, 0, 1},
    {"clock_mem_mhz", "MHz", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kClockMem, 0, 0, 1},
    {"clock_event_reasons", "mask", MetricKind::kBitmask, "nvml.fast", 10 * kMs, 2 * kUs, Query::kReasons, 0,
     0, 1},
    {"util_gpu_pct", "pct", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kUtilGpu, 0, 0, 1},
    {"util_mem_pct", "pct", MetricKind::kGauge, "nvml.fast", 10 * kMs, 2 * kUs, Query::kUtilMem, 0, 0, 1},
    {"throttle_power_cap_s", "s", MetricKind::kCounter, "nvml.fast", 100 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 0, 1e-9},
    {"throttle_sync_boost_s", "s", MetricKind::kCounter, "nvml.fast", 100 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0, 1e-9},
    {"throttle_sw_thermal_s", "s", MetricKind::kCounter, "nvml.fast", 100 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0, 1e-9},
    {"throttle_hw_thermal_s", "s", MetricKind::kCounter, "nvml.fast", 100 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0, 1e-9},
    {"throttle_power_brake_s", "s", MetricKind::kCounter, "nvml.fast", 100 * kMs, 2 * kUs, Query::kField,
     NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0, 1e-9},
    // Memory info costs 45 us of CPU read 10 ms apart (5-9x any gauge; fixture: 4-50 us): its own loop, at
    // 100 ms. It changes when the program allocates, not on a sensor tick.
    {"mem_used_bytes", "bytes", MetricKind::kGauge, "nvml.memory", 100 * kMs, 45 * kUs, Query::kMemUsed, 0, 0,
     1},
    {"energy_j", "J", MetricKind::kCounter, "nvml.energy", 100 * kMs, 4 * kMs, Query::kEnergy, 0, 0, 1e-3},
    {"nvlink_tx_bytes", "bytes", MetricKind::kCounter, "nvml.nvlink", 100 * kMs, 1200 * kUs, Query::kField,
     NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX, 1024},
    {"nvlink_rx_bytes", "bytes", MetricKind::kCounter, "nvml.nvlink", 100 * kMs, 1200 * kUs, Query::kField,
     NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX, 1024},
    {"pcie_tx_bytes", "bytes", MetricKind::kCounter, "nvml.pcie", 100 * kMs, 120 * kUs, Query::kField,
     NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0, 1},
    {"pcie_rx_bytes", "bytes", MetricKind::kCounter, "nvml.pcie", 100 * kMs, 120 * kUs, Query::kField,
     NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0, 1},
    // The driver's own power samples (nvmlDeviceGetSamples, NVML_TOTAL_POWER_SAMPLES): every 20 ms on H200,
    // each dated by the driver, kept in a ring of ~120; one read (~0.5 ms) returns all since the last read,
    // so once a second sees every one (polling power_instant_w sees a new value ~10 times a second).
    {"power_sampled_w", "W", MetricKind::kGauge, "nvml.power_samples", 1000 * kMs, 500 * kUs,
     Query::kPowerSamples, 0, 0, 1e-3},
};

// Symbols used, resolved with dlsym. nvmlDeviceGetTemperature is gone from nvml.h 13 but still exported by
// drivers; it is the fallback when nvmlDeviceGetTemperatureV is missing.
using LegacyGetTemperature = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);

struct Api {
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlShutdown) shutdown = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlSystemGetDriverVersion) driver_version = nullptr;
  decltype(&nvmlDeviceGetCount_v2) device_count = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle_by_index = nullptr;
  decltype(&nvmlDeviceGetName) device_name = nullptr;
  decltype(&nvmlDeviceGetUUID) device_uuid = nullptr;
  decltype(&nvmlDeviceGetPciInfo_v3) pci_info = nullptr;
  decltype(&nvmlDeviceGetEnforcedPowerLimit) power_limit = nullptr;
  decltype(&nvmlDeviceGetMaxClockInfo) max_clock = nullptr;
  decltype(&nvmlDeviceGetClockInfo) clock = nullptr;
  decltype(&nvmlDeviceGetFieldValues) field_values = nullptr;
  decltype(&nvmlDeviceGetTotalEnergyConsumption) energy = nullptr;
  decltype(&nvmlDeviceGetTemperatureV) temperature_v = nullptr;
  LegacyGetTemperature temperature_legacy = nullptr;
  decltype(&nvmlDeviceGetCurrentClocksEventReasons) reasons = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlDeviceGetSamples) samples = nullptr;  // optional: power_sampled_w is unsupported without it
};

bool is_integer_type(nvmlValueType_t type) {
  return type != NVML_VALUE_TYPE_DOUBLE;
}

int width_bits(nvmlValueType_t type) {
  switch (type) {
    case NVML_VALUE_TYPE_UNSIGNED_INT:
    case NVML_VALUE_TYPE_SIGNED_INT:
      return 32;
    case NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return 16;
    default:
      return 64;
  }
}

uint64_t raw_integer(const nvmlFieldValue_t& field) {
  switch (field.valueType) {
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return field.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      return field.value.ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return field.value.ullVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return static_cast<uint64_t>(field.value.sllVal);
    case NVML_VALUE_TYPE_SIGNED_INT:
      return static_cast<uint64_t>(static_cast<int64_t>(field.value.siVal));
    case NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return field.value.usVal;
    default:
      return static_cast<uint64_t>(field.value.dVal);
  }
}

double raw_double(const nvmlFieldValue_t& field) {
  if (field.valueType == NVML_VALUE_TYPE_DOUBLE) return field.value.dVal;
  if (field.valueType == NVML_VALUE_TYPE_SIGNED_LONG_LONG) return static_cast<double>(field.value.sllVal);
  if (field.valueType == NVML_VALUE_TYPE_SIGNED_INT) return field.value.siVal;
  return static_cast<double>(raw_integer(field));
}

// A field-values request for `spec`'s field id and scope.
nvmlFieldValue_t field_request(const Spec& spec) {
  nvmlFieldValue_t field{};
  field.fieldId = spec.field_id;
  field.scopeId = spec.scope;
  return field;
}

}  // namespace

struct NvmlSource::Impl : VendorLibrary {
  struct Gpu {
    nvmlDevice_t handle = nullptr;
    std::vector<const Spec*> specs;                // parallel to DeviceInfo::metrics
    std::vector<CounterUnwrapper> unwrappers;      // parallel to DeviceInfo::metrics
    unsigned long long power_samples_seen_us = 0;  // NVML timestamp of the newest power sample returned
    bool power_samples_primed = false;             // the first read only learns where the ring stands
    std::vector<nvmlSample_t> power_samples;       // the ring's capacity, reused by every read
  };
  Api api;
  std::vector<Gpu> gpus;
  std::string scope_note;               // which GPUs the job's scope left out, and why
  int64_t wall_minus_monotonic_ns = 0;  // converts NVML's wall-clock µs timestamps to CLOCK_MONOTONIC

  /// Shuts NVML down when it initialized; ~VendorLibrary then unloads it.
  ~Impl() override {
    if (initialized) api.shutdown();
  }

  std::string error_text(nvmlReturn_t result) const {
    return api.error_string ? std::string(api.error_string(result))
                            : fmt::format("NVML error {}", static_cast<int>(result));
  }

  Reading failure(nvmlReturn_t result) const {
    Reading reading;
    reading.status = result == NVML_ERROR_GPU_IS_LOST ? ReadStatus::kDeviceLost
                     : (result == NVML_ERROR_NOT_SUPPORTED || result == NVML_ERROR_FUNCTION_NOT_FOUND)
                         ? ReadStatus::kUnsupported
                         : ReadStatus::kError;
    reading.error = error_text(result);
    return reading;
  }

  Reading from_field(Gpu& gpu, size_t metric_index, const nvmlFieldValue_t& field) {
    if (field.nvmlReturn != NVML_SUCCESS) return failure(field.nvmlReturn);
    const Spec& spec = *gpu.specs[metric_index];
    Reading reading;
    reading.status = ReadStatus::kOk;
    if (spec.kind == MetricKind::kCounter) {
      // 64-bit unwrapped total of the raw counter, then scaled (KiB -> bytes, ns -> s).
      reading.value =
          static_cast<double>(gpu.unwrappers[metric_index].unwrap(raw_integer(field))) * spec.scale;
    } else {
      reading.value = raw_double(field) * spec.scale;
    }
    reading.sensor_t_ns =
        field.timestamp > 0 ? field.timestamp * 1000 - wall_minus_monotonic_ns : kNoSensorTime;
    return reading;
  }

  // Every power sample the driver took since the previous read, oldest first. The first read returns none: it
  // only notes the newest sample, so a recording holds no samples from before it started.
  Reading read_power_samples(Gpu& gpu, const Spec& spec) {
    if (api.samples == nullptr) return failure(NVML_ERROR_FUNCTION_NOT_FOUND);
    nvmlValueType_t type{};
    if (gpu.power_samples.empty()) {
      unsigned int capacity = 0;
      const nvmlReturn_t result =
          api.samples(gpu.handle, NVML_TOTAL_POWER_SAMPLES, 0, &type, &capacity, nullptr);
      if (result != NVML_SUCCESS) return failure(result);
      gpu.power_samples.resize(std::max(capacity, 1u));
    }
    unsigned int count = static_cast<unsigned int>(gpu.power_samples.size());
    const nvmlReturn_t result = api.samples(gpu.handle, NVML_TOTAL_POWER_SAMPLES, gpu.power_samples_seen_us,
                                            &type, &count, gpu.power_samples.data());
    Reading reading;
    reading.status = ReadStatus::kOk;
    if (result == NVML_ERROR_NOT_FOUND) return reading;  // no sample since the last read
    if (result != NVML_SUCCESS) return failure(result);
    for (unsigned int index = 0; index < count; ++index) {
      const nvmlSample_t& sample = gpu.power_samples[index];
      if (sample.timeStamp <= gpu.power_samples_seen_us) continue;
      gpu.power_samples_seen_us = sample.timeStamp;
      if (!gpu.power_samples_primed) continue;
      nvmlFieldValue_t as_field{};  // reuse the field decoder for the sample's value type
      as_field.valueType = type;
      as_field.value = sample.sampleValue;
      const double value = raw_double(as_field) * spec.scale;
      reading.series.push_back(
          {static_cast<int64_t>(sample.timeStamp) * 1000 - wall_minus_monotonic_ns, value});
    }
    gpu.power_samples_primed = true;
    if (!reading.series.empty()) {
      reading.value = reading.series.back().value;
      reading.sensor_t_ns = reading.series.back().sensor_t_ns;
    }
    return reading;
  }

  Reading read_one(Gpu& gpu, size_t metric_index, nvmlUtilization_t* utilization_cache,
                   bool* utilization_done) {
    const Spec& spec = *gpu.specs[metric_index];
    Reading reading;
    reading.status = ReadStatus::kOk;
    nvmlReturn_t result = NVML_SUCCESS;
    switch (spec.query) {
      case Query::kField: {
        nvmlFieldValue_t field = field_request(spec);
        result = api.field_values(gpu.handle, 1, &field);
        if (result != NVML_SUCCESS) return failure(result);
        return from_field(gpu, metric_index, field);
      }
      case Query::kEnergy: {
        unsigned long long energy_mj = 0;
        result = api.energy(gpu.handle, &energy_mj);
        if (result == NVML_SUCCESS) {
          reading.value = static_cast<double>(gpu.unwrappers[metric_index].unwrap(energy_mj)) * spec.scale;
        }
        break;
      }
      case Query::kTempGpu: {
        if (api.temperature_v) {
          nvmlTemperature_t temperature{};
          temperature.version = nvmlTemperature_v1;
          temperature.sensorType = NVML_TEMPERATURE_GPU;
          result = api.temperature_v(gpu.handle, &temperature);
          reading.value = temperature.temperature;
        } else {
          unsigned int celsius = 0;
          result = api.temperature_legacy(gpu.handle, 0 /* NVML_TEMPERATURE_GPU */, &celsius);
          reading.value = celsius;
        }
        break;
      }
      case Query::kClockSm:
      case Query::kClockMem: {
        unsigned int mhz = 0;
        result = api.clock(gpu.handle, spec.query == Query::kClockSm ? NVML_CLOCK_SM : NVML_CLOCK_MEM, &mhz);
        reading.value = mhz;
        break;
      }
      case Query::kReasons: {
        unsigned long long mask = 0;
        result = api.reasons(gpu.handle, &mask);
        reading.value = static_cast<double>(mask);
        break;
      }
      case Query::kUtilGpu:
      case Query::kUtilMem: {
        if (!*utilization_done) {
          result = api.utilization(gpu.handle, utilization_cache);
          if (result != NVML_SUCCESS) return failure(result);
          *utilization_done = true;
        }
        reading.value = spec.query == Query::kUtilGpu ? utilization_cache->gpu : utilization_cache->memory;
        break;
      }
      case Query::kMemUsed: {
        nvmlMemory_t memory{};
        result = api.memory(gpu.handle, &memory);
        reading.value = static_cast<double>(memory.used);
        break;
      }
      case Query::kPowerSamples:
        return read_power_samples(gpu, spec);
    }
    if (result != NVML_SUCCESS) return failure(result);
    return reading;
  }

  // dlopens `path`; on failure notes why in `reason` and returns false.
  bool open_library(const std::string& path) {
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) return true;
    const char* error = dlerror();
    reason = fmt::format("{} could not be loaded ({}): no NVIDIA driver on this host", path,
                         error ? error : "unknown error");
    return false;
  }

  // Resolves every NVML function into `api` (nvmlDeviceGetSamples optional, the legacy temperature call as
  // fallback); on a missing one notes why in `reason` and returns false.
  bool load_api(const std::string& path) {
    bool ok = load_symbol(library, "nvmlInit_v2", api.init) &&
              load_symbol(library, "nvmlShutdown", api.shutdown) &&
              load_symbol(library, "nvmlErrorString", api.error_string) &&
              load_symbol(library, "nvmlSystemGetDriverVersion", api.driver_version) &&
              load_symbol(library, "nvmlDeviceGetCount_v2", api.device_count) &&
              load_symbol(library, "nvmlDeviceGetHandleByIndex_v2", api.handle_by_index) &&
              load_symbol(library, "nvmlDeviceGetName", api.device_name) &&
              load_symbol(library, "nvmlDeviceGetUUID", api.device_uuid) &&
              load_symbol(library, "nvmlDeviceGetPciInfo_v3", api.pci_info) &&
              load_symbol(library, "nvmlDeviceGetEnforcedPowerLimit", api.power_limit) &&
              load_symbol(library, "nvmlDeviceGetMaxClockInfo", api.max_clock) &&
              load_symbol(library, "nvmlDeviceGetClockInfo", api.clock) &&
              load_symbol(library, "nvmlDeviceGetFieldValues", api.field_values) &&
              load_symbol(library, "nvmlDeviceGetTotalEnergyConsumption", api.energy) &&
              load_symbol(library, "nvmlDeviceGetCurrentClocksEventReasons", api.reasons) &&
              load_symbol(library, "nvmlDeviceGetUtilizationRates", api.utilization) &&
              load_symbol(library, "nvmlDeviceGetMemoryInfo", api.memory);
    load_symbol(library, "nvmlDeviceGetSamples", api.samples);
    if (!load_symbol(library, "nvmlDeviceGetTemperatureV", api.temperature_v)) {
      ok = ok && load_symbol(library, "nvmlDeviceGetTemperature", api.temperature_legacy);
    }
    if (!ok) {
      reason =
          fmt::format("{} lacks NVML functions calo needs (driver older than R535?): {}", path, dlerror());
    }
    return ok;
  }

  // nvmlInit, then the wall-to-monotonic offset for sensor timestamps; on failure notes why and returns
  // false.
  bool initialize() {
    const nvmlReturn_t result = api.init();
    if (result != NVML_SUCCESS) {
      reason = fmt::format("nvmlInit failed: {}", error_text(result));
      return false;
    }
    initialized = true;
    wall_minus_monotonic_ns = core::wall_ns() - core::monotonic_ns();
    return true;
  }

  // GPUs NVML sees on the host into `count`; on failure notes why and returns false.
  bool count_gpus(unsigned int& count) {
    const nvmlReturn_t result = api.device_count(&count);
    if (result == NVML_SUCCESS) return true;
    reason = fmt::format("nvmlDeviceGetCount failed: {}", error_text(result));
    return false;
  }

  // Index, kind, driver, name and UUID of GPU `index` (name and UUID left empty where NVML declines).
  DeviceInfo identify(const Gpu& gpu, unsigned int index, const char* driver) const {
    DeviceInfo device;
    device.index = static_cast<int>(index);
    device.kind = "gpu";
    device.driver = driver;
    char text[256] = {};
    if (api.device_name(gpu.handle, text, sizeof(text)) == NVML_SUCCESS) device.name = text;
    if (api.device_uuid(gpu.handle, text, sizeof(text)) == NVML_SUCCESS) device.uuid = text;
    return device;
  }

  // PCI bus, enforced power limit (W) and maximum SM / memory clocks (MHz) of `device`, each where NVML
  // answers.
  void read_limits(const Gpu& gpu, DeviceInfo& device) const {
    nvmlPciInfo_t pci{};
    if (api.pci_info(gpu.handle, &pci) == NVML_SUCCESS) device.pci_bus = pci.busId;
    unsigned int value = 0;
    if (api.power_limit(gpu.handle, &value) == NVML_SUCCESS) device.power_limit_w = value / 1000.0;
    if (api.max_clock(gpu.handle, NVML_CLOCK_SM, &value) == NVML_SUCCESS) device.max_sm_mhz = value;
    if (api.max_clock(gpu.handle, NVML_CLOCK_MEM, &value) == NVML_SUCCESS) device.max_mem_mhz = value;
  }

  // Reads non-field metric `spec` once on `gpu` (as a temporary last metric); its error text, "" when it
  // reads.
  std::string probe_query(Gpu& gpu, const Spec& spec) {
    gpu.specs.push_back(&spec);
    gpu.unwrappers.emplace_back(64);
    nvmlUtilization_t utilization{};
    bool utilization_done = false;
    Reading reading = read_one(gpu, gpu.specs.size() - 1, &utilization, &utilization_done);
    gpu.specs.pop_back();
    gpu.unwrappers.pop_back();
    return reading.status != ReadStatus::kOk ? reading.error : std::string();
  }

  // Why `spec` cannot be read on `gpu`, "" when it can: an NVML error, or a counter field the driver answers
  // with a floating-point value (its field ids differ from our nvml.h).
  std::string probe_failure(Gpu& gpu, const Spec& spec, const char* driver) {
    if (spec.query != Query::kField) return probe_query(gpu, spec);
    nvmlFieldValue_t field = field_request(spec);
    nvmlReturn_t probe_result = api.field_values(gpu.handle, 1, &field);
    if (probe_result == NVML_SUCCESS) probe_result = field.nvmlReturn;
    if (probe_result != NVML_SUCCESS) return error_text(probe_result);
    if (spec.kind == MetricKind::kCounter && !is_integer_type(field.valueType)) {
      return fmt::format(
          "field id {} answers a floating-point value on driver {}, not a counter: this "
          "driver numbers fields differently from the nvml.h calo was built with",
          spec.field_id, driver);
    }
    return "";
  }

  // Bits at which `spec`'s raw value wraps: its field's value type, 64 for the other queries.
  int counter_width_bits(const Gpu& gpu, const Spec& spec) const {
    if (spec.query != Query::kField) return 64;
    nvmlFieldValue_t field = field_request(spec);
    if (api.field_values(gpu.handle, 1, &field) != NVML_SUCCESS) return 64;
    return width_bits(field.valueType);
  }

  // Probes every metric once: keeps those the driver answers with the value type we expect, lists the others
  // with the reason in device.unsupported.
  void probe_metrics(Gpu& gpu, DeviceInfo& device, const char* driver) {
    for (const Spec& spec : kSpecs) {
      const std::string why = probe_failure(gpu, spec, driver);
      if (!why.empty()) {
        device.unsupported.push_back(fmt::format("{}: {}", spec.name, why));
        continue;
      }
      const int bits = counter_width_bits(gpu, spec);
      gpu.specs.push_back(&spec);
      gpu.unwrappers.emplace_back(bits);
      device.metrics.push_back({spec.name, spec.unit, spec.kind, spec.group, spec.period_ns, spec.cost_ns,
                                spec.query == Query::kPowerSamples});
    }
  }

  // Adds GPU `index` to devices / gpus when NVML opens it and `scope` admits it; records its name in
  // `every_name` and, when out of scope, its index in `left_out`.
  void open_gpu(unsigned int index, const char* driver, const GpuScope& scope,
                std::vector<std::string>& left_out, std::vector<std::string>& every_name) {
    Gpu gpu;
    if (api.handle_by_index(index, &gpu.handle) != NVML_SUCCESS) {
      return;  // e.g. no permission on this GPU; the others are still read
    }
    DeviceInfo device = identify(gpu, index, driver);
    every_name.push_back(device.name);
    if (!scope.admits(device.index, device.uuid)) {
      left_out.push_back(std::to_string(index));
      return;
    }
    read_limits(gpu, device);
    probe_metrics(gpu, device, driver);
    devices.push_back(std::move(device));
    gpus.push_back(std::move(gpu));
  }

  // Why no device was opened out of the host's `count` GPUs.
  std::string no_device_reason(unsigned int count, const std::vector<std::string>& left_out) const {
    return count == 0 ? "NVML found no GPU"
           : !left_out.empty()
               ? fmt::format("none of this host's {} GPUs is the job's: {}", count, scope_note)
               : "NVML could open none of the GPUs";
  }
};

NvmlSource::NvmlSource(const std::string& library_path, const GpuScope& scope)
    : VendorLibrarySource(std::make_unique<Impl>()), impl_(library_as<Impl>()) {
  Impl& impl = *impl_;
  const std::string path = library_path.empty() ? "libnvidia-ml.so.1" : library_path;
  if (!impl.open_library(path) || !impl.load_api(path) || !impl.initialize()) return;
  char driver[96] = {};
  impl.api.driver_version(driver, sizeof(driver));
  unsigned int count = 0;
  if (!impl.count_gpus(count)) return;
  std::vector<std::string> left_out;    // NVML indices of GPUs outside the job's scope
  std::vector<std::string> every_name;  // every GPU's name, NVML order
  for (unsigned int index = 0; index < count; ++index)
    impl.open_gpu(index, driver, scope, left_out, every_name);
  impl.scope_note = scope_summary(scope, left_out, every_name);
  if (impl.devices.empty()) impl.reason = impl.no_device_reason(count, left_out);
}

std::string NvmlSource::scope_note() const {
  return impl_->scope_note;
}

Reading NvmlSource::read(size_t device_position, size_t metric_index) {
  nvmlUtilization_t utilization{};
  bool utilization_done = false;
  return impl_->read_one(impl_->gpus[device_position], metric_index, &utilization, &utilization_done);
}

void NvmlSource::read_batch(size_t device_position, std::span<const size_t> metric_indices,
                            std::span<Reading> out) {
  Impl::Gpu& gpu = impl_->gpus[device_position];
  // All field metrics of the batch in one nvmlDeviceGetFieldValues call; the others one call each
  // (utilization once for both of its metrics).
  nvmlFieldValue_t fields[std::size(kSpecs)];
  size_t field_positions[std::size(kSpecs)];
  int field_count = 0;
  nvmlUtilization_t utilization{};
  bool utilization_done = false;
  for (size_t position = 0; position < metric_indices.size(); ++position) {
    const size_t metric_index = metric_indices[position];
    const Spec& spec = *gpu.specs[metric_index];
    if (spec.query == Query::kField && field_count < static_cast<int>(std::size(kSpecs))) {
      fields[field_count] = nvmlFieldValue_t{};
      fields[field_count].fieldId = spec.field_id;
      fields[field_count].scopeId = spec.scope;
      field_positions[field_count] = position;
      ++field_count;
    } else {
      out[position] = impl_->read_one(gpu, metric_index, &utilization, &utilization_done);
    }
  }
  if (field_count == 0) return;
  const nvmlReturn_t result = impl_->api.field_values(gpu.handle, field_count, fields);
  for (int field_index = 0; field_index < field_count; ++field_index) {
    const size_t position = field_positions[field_index];
    out[position] = result != NVML_SUCCESS
                        ? impl_->failure(result)
                        : impl_->from_field(gpu, metric_indices[position], fields[field_index]);
  }
}

#endif  // CALO_HAVE_NVML_H

}  // namespace calo::telemetry
