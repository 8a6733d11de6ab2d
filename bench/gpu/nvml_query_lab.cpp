// NVML query lab (issue 3, docs/benchmarks/telemetry.md): on one GPU, measures what the sampler cannot
// learn from its own schedule.
//   costs:    wall and thread-CPU time of alternative ways to read the expensive counters (energy through the
//             API and fields 83/191, NVLink aggregate / per link / NVLink5 byte counters, PCIe and
//             HW-throttle counters, all of them in one nvmlDeviceGetFieldValues call), and of the fast group
//             read the way the sampler reads it (after a 10 ms sleep, "cold") vs back to back ("hot").
//   samples:  which nvmlDeviceGetSamples buffers this driver keeps, how many samples a second, their spacing.
//   flicker:  the values a back-to-back reader holds for under 10 ms: a reversion (A B A) or a step through
//   an
//             intermediate value (A B C), with examples.
//   wakeup:   the fast group read 10 ms apart (as the sampler reads it) on every GPU in one wake-up, with the
//             thread free to move between CPUs vs pinned to one; how often a wake-up lands on another CPU.
//   nvml_query_lab [--device N] [--flicker-seconds S] [--samples-seconds S]
//                  [--parts costs,samples,flicker,wakeup]
#include <dlfcn.h>
#include <nvml.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t now_ns(clockid_t clock = CLOCK_MONOTONIC) {
  timespec time{};
  clock_gettime(clock, &time);
  return time.tv_sec * 1'000'000'000LL + time.tv_nsec;
}

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1))];
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

struct Nvml {
  void* library = nullptr;
  decltype(&nvmlInit_v2) init = nullptr;
  decltype(&nvmlErrorString) error_string = nullptr;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle_by_index = nullptr;
  decltype(&nvmlDeviceGetFieldValues) field_values = nullptr;
  decltype(&nvmlDeviceGetTotalEnergyConsumption) energy = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo) memory = nullptr;
  decltype(&nvmlDeviceGetMemoryInfo_v2) memory_v2 = nullptr;
  decltype(&nvmlDeviceGetSamples) samples = nullptr;
  decltype(&nvmlDeviceGetTemperatureV) temperature_v = nullptr;
  decltype(&nvmlDeviceGetClockInfo) clock = nullptr;
  decltype(&nvmlDeviceGetCurrentClocksEventReasons) reasons = nullptr;
  decltype(&nvmlDeviceGetUtilizationRates) utilization = nullptr;
  decltype(&nvmlDeviceGetCount_v2) device_count = nullptr;

  template <typename F>
  void load(F& target, const char* symbol) {
    target = reinterpret_cast<F>(dlsym(library, symbol));
  }
  bool open() {
    library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return false;
    load(init, "nvmlInit_v2");
    load(error_string, "nvmlErrorString");
    load(handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
    load(field_values, "nvmlDeviceGetFieldValues");
    load(energy, "nvmlDeviceGetTotalEnergyConsumption");
    load(memory, "nvmlDeviceGetMemoryInfo");
    load(memory_v2, "nvmlDeviceGetMemoryInfo_v2");
    load(samples, "nvmlDeviceGetSamples");
    load(temperature_v, "nvmlDeviceGetTemperatureV");
    load(clock, "nvmlDeviceGetClockInfo");
    load(reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    load(utilization, "nvmlDeviceGetUtilizationRates");
    load(device_count, "nvmlDeviceGetCount_v2");
    return init && field_values && energy && memory && clock && reasons && utilization && temperature_v &&
           init() == NVML_SUCCESS;
  }
  const char* text(nvmlReturn_t result) const { return error_string ? error_string(result) : "?"; }
  // "" on success, else NVML's words for the error (a cost row's status).
  std::string check(nvmlReturn_t result) const {
    return result == NVML_SUCCESS ? std::string() : text(result);
  }
  // GPU die temperature in °C (0 if the read fails).
  unsigned int gpu_temperature_c(nvmlDevice_t device, nvmlReturn_t* result = nullptr) const {
    nvmlTemperature_t temperature{};
    temperature.version = nvmlTemperature_v1;
    temperature.sensorType = NVML_TEMPERATURE_GPU;
    const nvmlReturn_t status = temperature_v(device, &temperature);
    if (result != nullptr) *result = status;
    return static_cast<unsigned int>(temperature.temperature);
  }
};

// Reads `fields` (id, scope) in one call; returns "" or why it failed.
std::string read_fields(Nvml& nvml, nvmlDevice_t device, std::vector<nvmlFieldValue_t>& values) {
  for (auto& value : values) value.nvmlReturn = NVML_SUCCESS;
  const nvmlReturn_t result = nvml.field_values(device, static_cast<int>(values.size()), values.data());
  if (result != NVML_SUCCESS) return nvml.text(result);
  for (const auto& value : values) {
    if (value.nvmlReturn != NVML_SUCCESS)
      return std::string("field ") + std::to_string(value.fieldId) + ": " + nvml.text(value.nvmlReturn);
  }
  return "";
}

std::vector<nvmlFieldValue_t> fields(std::initializer_list<std::pair<unsigned, unsigned>> ids) {
  std::vector<nvmlFieldValue_t> values;
  for (auto [id, scope] : ids) {
    nvmlFieldValue_t value{};
    value.fieldId = id;
    value.scopeId = scope;
    values.push_back(value);
  }
  return values;
}

// The fields of the sampler's fast group read in its one field call: power instant/average, memory
// temperature, three cheap throttle counters.
std::vector<nvmlFieldValue_t> fast_fields() {
  return fields({{NVML_FI_DEV_POWER_INSTANT, 0},
                 {NVML_FI_DEV_POWER_AVERAGE, 0},
                 {NVML_FI_DEV_MEMORY_TEMP, 0},
                 {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 0},
                 {NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0},
                 {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0}});
}

// The sampler's fast group of one GPU: the field call, then temperature, SM and memory clocks, reasons,
// utilization and (unless `with_memory` is false) memory info; returns "" or why the field call failed.
std::string read_fast_group(Nvml& nvml, nvmlDevice_t device, std::vector<nvmlFieldValue_t>& values,
                            bool with_memory = true) {
  std::string error = read_fields(nvml, device, values);
  nvml.gpu_temperature_c(device);
  unsigned int mhz = 0;
  nvml.clock(device, NVML_CLOCK_SM, &mhz);
  nvml.clock(device, NVML_CLOCK_MEM, &mhz);
  unsigned long long mask = 0;
  nvml.reasons(device, &mask);
  nvmlUtilization_t utilization{};
  nvml.utilization(device, &utilization);
  if (with_memory) {
    nvmlMemory_t memory{};
    nvml.memory(device, &memory);
  }
  return error;
}

// Times `reads` calls of `read` with `gap_ms` of sleep between them; prints wall p50/mean and CPU mean.
void cost_row(const char* name, int reads, double gap_ms, const std::function<std::string()>& read) {
  std::vector<double> wall_us;
  std::vector<double> cpu_us;
  std::string error;
  for (int index = 0; index < reads; ++index) {
    if (gap_ms > 0) sleep_ms(gap_ms);
    const int64_t cpu_before = now_ns(CLOCK_THREAD_CPUTIME_ID);
    const int64_t wall_before = now_ns();
    error = read();
    wall_us.push_back(static_cast<double>(now_ns() - wall_before) / 1e3);
    cpu_us.push_back(static_cast<double>(now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_before) / 1e3);
    if (!error.empty()) break;
  }
  std::printf("cost  %-44s %5zu %9.1f %9.1f %9.1f %9.1f  %s\n", name, wall_us.size(), quantile(wall_us, 0.5),
              mean(wall_us), quantile(cpu_us, 0.5), mean(cpu_us), error.empty() ? "ok" : error.c_str());
}

void run_costs(Nvml& nvml, nvmlDevice_t device) {
  std::printf("# costs: reads, wall p50 us, wall mean us, cpu p50 us, cpu mean us (thread CPU), status\n");
  const int slow_reads = 30;
  const double slow_gap_ms = 20;
  auto field_reader = [&](std::vector<nvmlFieldValue_t> values) {
    return [&nvml, device, values]() mutable { return read_fields(nvml, device, values); };
  };
  cost_row("energy nvmlDeviceGetTotalEnergyConsumption", slow_reads, slow_gap_ms, [&] {
    unsigned long long mj = 0;
    return nvml.check(nvml.energy(device, &mj));
  });
  cost_row("energy field 83 TOTAL_ENERGY_CONSUMPTION", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0}})));
  cost_row("energy field 191 ENERGY", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_ENERGY, 0}})));
  cost_row("nvlink tx, all links (138, UINT_MAX)", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX}})));
  cost_row("nvlink tx+rx, all links, one call", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX},
                                {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX}})));
  cost_row("nvlink tx, link 0 (138, 0)", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0}})));
  cost_row("nvlink5 xmit bytes, all links (202, UINT_MAX)", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES, UINT_MAX}})));
  cost_row(
      "pcie tx+rx bytes, one call", slow_reads, slow_gap_ms,
      field_reader(fields({{NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0}, {NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0}})));
  cost_row("throttle hw thermal + power brake, one call", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0},
                                {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0}})));
  cost_row("all slow counters in one call (83,138,139,197,198,hw,brake)", slow_reads, slow_gap_ms,
           field_reader(fields({{NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0},
                                {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, UINT_MAX},
                                {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, UINT_MAX},
                                {NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0},
                                {NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0},
                                {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0},
                                {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0}})));
  cost_row("memory info v1", 200, 2, [&] {
    nvmlMemory_t memory{};
    return nvml.check(nvml.memory(device, &memory));
  });
  if (nvml.memory_v2) {
    cost_row("memory info v2", 200, 2, [&] {
      nvmlMemory_v2_t memory{};
      memory.version = nvmlMemory_v2;
      return nvml.check(nvml.memory_v2(device, &memory));
    });
  }
  auto fast_group = [&, values = fast_fields()]() mutable { return read_fast_group(nvml, device, values); };
  cost_row("fast group of one GPU, back to back (hot)", 2000, 0, fast_group);
  // Each call of the group alone after a 10 ms sleep: which one pays when values are not fresh.
  auto power_fields =
      fields({{NVML_FI_DEV_POWER_INSTANT, 0}, {NVML_FI_DEV_POWER_AVERAGE, 0}, {NVML_FI_DEV_MEMORY_TEMP, 0}});
  cost_row("cold: fields power instant+avg, memory temp", 200, 10, field_reader(power_fields));
  cost_row("cold: field power instant alone", 200, 10,
           field_reader(fields({{NVML_FI_DEV_POWER_INSTANT, 0}})));
  cost_row("cold: fields 3 cheap throttle counters", 200, 10,
           field_reader(fields({{NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 0},
                                {NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0},
                                {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0}})));
  cost_row("cold: temperature V", 200, 10, [&] {
    nvmlReturn_t result = NVML_SUCCESS;
    nvml.gpu_temperature_c(device, &result);
    return nvml.check(result);
  });
  cost_row("cold: clock SM", 200, 10, [&] {
    unsigned int mhz = 0;
    return nvml.check(nvml.clock(device, NVML_CLOCK_SM, &mhz));
  });
  cost_row("cold: clock event reasons", 200, 10, [&] {
    unsigned long long mask = 0;
    return nvml.check(nvml.reasons(device, &mask));
  });
  cost_row("cold: utilization", 200, 10, [&] {
    nvmlUtilization_t utilization{};
    return nvml.check(nvml.utilization(device, &utilization));
  });
  cost_row("cold: memory info", 200, 10, [&] {
    nvmlMemory_t memory{};
    return nvml.check(nvml.memory(device, &memory));
  });
  // How fresh must a read be to be cheap: the group after sleeps of growing length.
  for (double gap_ms : {0.05, 0.2, 0.5, 1.0, 2.0, 5.0}) {
    char name[64];
    std::snprintf(name, sizeof(name), "fast group after a %.2f ms sleep", gap_ms);
    cost_row(name, 300, gap_ms, fast_group);
  }
  cost_row("fast group of one GPU, after a 10 ms sleep (cold)", 300, 10, fast_group);
  cost_row("nothing, after a 10 ms sleep (the wake-up alone)", 300, 10, [] { return std::string(); });
}

// The fast group read on every GPU of `devices` in one wake-up, `reads` times 10 ms apart, with the thread
// pinned to CPU `pin_cpu` (or free to move when < 0): thread CPU per GPU, the first GPU's and the others'
// share, and how many wake-ups landed on another CPU than the one before.
void wakeup_row(Nvml& nvml, const std::vector<nvmlDevice_t>& devices, const char* name, int pin_cpu,
                bool with_memory, int reads = 300) {
  cpu_set_t original;
  sched_getaffinity(0, sizeof(original), &original);
  if (pin_cpu >= 0) {
    cpu_set_t pinned;
    CPU_ZERO(&pinned);
    CPU_SET(pin_cpu, &pinned);
    sched_setaffinity(0, sizeof(pinned), &pinned);
  }
  std::vector<std::vector<nvmlFieldValue_t>> values(devices.size(), fast_fields());
  std::vector<double> per_gpu_us;
  std::vector<double> first_us;
  std::vector<double> others_us;
  int moved = 0;
  int last_cpu = sched_getcpu();
  std::string error;
  for (int index = 0; index < reads && error.empty(); ++index) {
    sleep_ms(10);
    const int cpu = sched_getcpu();
    moved += cpu != last_cpu ? 1 : 0;
    last_cpu = cpu;
    const int64_t before_ns = now_ns(CLOCK_THREAD_CPUTIME_ID);
    int64_t first_end_ns = before_ns;
    for (size_t position = 0; position < devices.size(); ++position) {
      error = read_fast_group(nvml, devices[position], values[position], with_memory);
      if (position == 0) first_end_ns = now_ns(CLOCK_THREAD_CPUTIME_ID);
    }
    const int64_t end_ns = now_ns(CLOCK_THREAD_CPUTIME_ID);
    per_gpu_us.push_back(static_cast<double>(end_ns - before_ns) / 1e3 / static_cast<double>(devices.size()));
    first_us.push_back(static_cast<double>(first_end_ns - before_ns) / 1e3);
    if (devices.size() > 1)
      others_us.push_back(static_cast<double>(end_ns - first_end_ns) / 1e3 /
                          static_cast<double>(devices.size() - 1));
  }
  sched_setaffinity(0, sizeof(original), &original);
  std::printf(
      "wakeup %-40s gpus %zu reads %4zu  cpu/gpu p50 %6.1f mean %6.1f us  first gpu %6.1f  others %6.1f"
      "  moved %5.1f %%  %s\n",
      name, devices.size(), per_gpu_us.size(), quantile(per_gpu_us, 0.5), mean(per_gpu_us), mean(first_us),
      mean(others_us), per_gpu_us.empty() ? 0.0 : 100.0 * moved / static_cast<double>(per_gpu_us.size()),
      error.empty() ? "ok" : error.c_str());
}

// The CPU of waking every 10 ms and doing nothing, by how the thread sleeps (a condition-variable wait with
// an absolute deadline, as the sampler's loops sleep, or clock_nanosleep to an absolute time) and its policy
// (SCHED_OTHER, or SCHED_FIFO 1 as the sampler's loops run where allowed).
void bare_wakeup_row(const char* name, bool condition_variable, bool fifo, int wakeups = 300) {
  std::string status = "ok";
  std::thread thread([&] {
    if (fifo) {
      sched_param priority{};
      priority.sched_priority = 1;
      if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &priority) != 0) status = "SCHED_FIFO refused";
    }
    std::mutex mutex;
    std::condition_variable wake;
    int64_t deadline_ns = now_ns();
    const int64_t cpu_before_ns = now_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int index = 0; index < wakeups; ++index) {
      deadline_ns += 10'000'000;
      if (condition_variable) {
        std::unique_lock lock(mutex);
        wake.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_ns)),
                        [] { return false; });
      } else {
        timespec until{deadline_ns / 1'000'000'000, deadline_ns % 1'000'000'000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr);
      }
    }
    const double cpu_us = static_cast<double>(now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_before_ns) / 1e3;
    std::printf("wakeup %-40s gpus 0 reads %4d  cpu per wake-up %6.1f us  %s\n", name, wakeups,
                cpu_us / wakeups, status.c_str());
  });
  thread.join();
}

// Wake-up strategies for the fast group (10 ms apart): one GPU vs all in one wake-up, free vs pinned, with
// and without memory info (the dearest call of the group).
void run_wakeup(Nvml& nvml, nvmlDevice_t device) {
  unsigned int count = 0;
  std::vector<nvmlDevice_t> all;
  if (nvml.device_count != nullptr && nvml.device_count(&count) == NVML_SUCCESS) {
    for (unsigned int index = 0; index < count; ++index) {
      nvmlDevice_t handle = nullptr;
      if (nvml.handle_by_index(index, &handle) == NVML_SUCCESS) all.push_back(handle);
    }
  }
  if (all.empty()) all.push_back(device);
  const std::vector<nvmlDevice_t> one{device};
  const int cpu = sched_getcpu();
  std::printf("# wakeup: fast group every 10 ms; thread CPU per GPU; pinned runs stay on CPU %d\n", cpu);
  wakeup_row(nvml, one, "free, one GPU", -1, true);
  wakeup_row(nvml, one, "pinned, one GPU", cpu, true);
  wakeup_row(nvml, all, "free, all GPUs", -1, true);
  wakeup_row(nvml, all, "pinned, all GPUs", cpu, true);
  wakeup_row(nvml, all, "free, all GPUs, no memory info", -1, false);
  wakeup_row(nvml, all, "pinned, all GPUs, no memory info", cpu, false);
  bare_wakeup_row("bare: condition variable, SCHED_OTHER", true, false);
  bare_wakeup_row("bare: clock_nanosleep, SCHED_OTHER", false, false);
  bare_wakeup_row("bare: condition variable, SCHED_FIFO", true, true);
  bare_wakeup_row("bare: clock_nanosleep, SCHED_FIFO", false, true);
}

const char* sampling_name(int type) {
  static const char* names[] = {"total_power", "gpu_util", "mem_util",  "enc_util",
                                "dec_util",    "sm_clock", "mem_clock", "module_power"};
  return type >= 0 && type < 8 ? names[type] : "?";
}

double sample_value(nvmlValueType_t type, const nvmlValue_t& value) {
  switch (type) {
    case NVML_VALUE_TYPE_DOUBLE:
      return value.dVal;
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      return static_cast<double>(value.ulVal);
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return static_cast<double>(value.ullVal);
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return static_cast<double>(value.sllVal);
    default:
      return value.uiVal;
  }
}

void run_samples(Nvml& nvml, nvmlDevice_t device, double seconds) {
  std::printf(
      "# samples: nvmlDeviceGetSamples per type, read once a second with lastSeenTimeStamp: buffer size, "
      "samples/s, "
      "spacing p50/p99 ms, value changes/s, cost per call us (wall, cpu)\n");
  if (nvml.samples == nullptr) {
    std::printf("samples: nvmlDeviceGetSamples not exported\n");
    return;
  }
  for (int type = 0; type < 8; ++type) {
    nvmlValueType_t value_type{};
    unsigned int capacity = 0;
    nvmlReturn_t result =
        nvml.samples(device, static_cast<nvmlSamplingType_t>(type), 0, &value_type, &capacity, nullptr);
    if (result != NVML_SUCCESS) {
      std::printf("samples %-13s %s\n", sampling_name(type), nvml.text(result));
      continue;
    }
    std::vector<nvmlSample_t> buffer(std::max(capacity, 1u));
    unsigned long long last_seen = 0;
    std::vector<double> spacing_ms;
    std::vector<double> wall_us;
    std::vector<double> cpu_us;
    size_t total = 0;
    size_t changes = 0;
    double last_value = -1;
    bool first_call = true;
    const int64_t begin = now_ns();
    std::string error;
    while (now_ns() - begin < static_cast<int64_t>(seconds * 1e9)) {
      unsigned int count = static_cast<unsigned int>(buffer.size());
      const int64_t cpu_before = now_ns(CLOCK_THREAD_CPUTIME_ID);
      const int64_t wall_before = now_ns();
      result = nvml.samples(device, static_cast<nvmlSamplingType_t>(type), last_seen, &value_type, &count,
                            buffer.data());
      wall_us.push_back(static_cast<double>(now_ns() - wall_before) / 1e3);
      cpu_us.push_back(static_cast<double>(now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_before) / 1e3);
      if (result == NVML_SUCCESS) {
        for (unsigned int index = 0; index < count; ++index) {
          const nvmlSample_t& sample = buffer[index];
          if (sample.timeStamp <= last_seen) continue;
          if (!first_call) {
            ++total;
            if (last_seen > 0) spacing_ms.push_back(static_cast<double>(sample.timeStamp - last_seen) / 1e3);
            const double value = sample_value(value_type, sample.sampleValue);
            if (value != last_value) ++changes;
            last_value = value;
          }
          last_seen = sample.timeStamp;
        }
      } else if (result != NVML_ERROR_NOT_FOUND) {
        error = nvml.text(result);
      }
      first_call = false;
      sleep_ms(1000);
    }
    const double elapsed_s = static_cast<double>(now_ns() - begin) / 1e9 - 1.0;  // first call only primes
    std::printf(
        "samples %-13s cap %5u %8.1f/s spacing %7.2f %7.2f ms  changes %7.1f/s  cost %8.1f %8.1f us  %s\n",
        sampling_name(type), capacity, static_cast<double>(total) / std::max(elapsed_s, 1e-9),
        quantile(spacing_ms, 0.5), quantile(spacing_ms, 0.99),
        static_cast<double>(changes) / std::max(elapsed_s, 1e-9), quantile(wall_us, 0.5),
        quantile(cpu_us, 0.5), error.empty() ? "ok" : error.c_str());
  }
}

struct Change {
  int64_t t_ns;  // start of the read that first saw the value
  double value;
  int64_t sensor_us;  // NVML's timestamp of the value where it has one, else 0
};

void run_flicker(Nvml& nvml, nvmlDevice_t device, double seconds) {
  const char* names[] = {"power_instant_w", "power_avg_w",  "temp_gpu_c",
                         "temp_mem_c",      "clock_sm_mhz", "util_gpu_pct"};
  constexpr int kMetrics = 6;
  std::vector<Change> changes[kMetrics];
  auto values =
      fields({{NVML_FI_DEV_POWER_INSTANT, 0}, {NVML_FI_DEV_POWER_AVERAGE, 0}, {NVML_FI_DEV_MEMORY_TEMP, 0}});
  const int64_t begin = now_ns();
  int64_t reads = 0;
  while (now_ns() - begin < static_cast<int64_t>(seconds * 1e9)) {
    const int64_t t_ns = now_ns();
    read_fields(nvml, device, values);
    const unsigned int temperature_c = nvml.gpu_temperature_c(device);
    unsigned int mhz = 0;
    nvml.clock(device, NVML_CLOCK_SM, &mhz);
    nvmlUtilization_t utilization{};
    nvml.utilization(device, &utilization);
    const double now_values[kMetrics] = {static_cast<double>(values[0].value.uiVal),
                                         static_cast<double>(values[1].value.uiVal),
                                         static_cast<double>(values[2].value.uiVal),
                                         static_cast<double>(temperature_c),
                                         static_cast<double>(mhz),
                                         static_cast<double>(utilization.gpu)};
    const int64_t stamps[kMetrics] = {values[0].timestamp, values[1].timestamp, values[2].timestamp, 0, 0, 0};
    // temp_mem is field 82 (index 2 of the field call); temp_gpu comes from nvmlDeviceGetTemperatureV.
    const int order[kMetrics] = {0, 1, 3, 2, 4, 5};
    for (int metric = 0; metric < kMetrics; ++metric) {
      const double value = now_values[order[metric]];
      auto& list = changes[metric];
      if (list.empty() || list.back().value != value) list.push_back({t_ns, value, stamps[order[metric]]});
    }
    ++reads;
  }
  const double elapsed_s = static_cast<double>(now_ns() - begin) / 1e9;
  // Update instants: a change after >= 20 ms without any change opens an update; its first read dates it
  // (to within one read). Fit t = t0 + n * R and print the residuals: how exactly periodic the updates are.
  std::vector<std::pair<int64_t, int>> all;  // (t, metric)
  for (int metric = 0; metric < kMetrics; ++metric) {
    for (size_t index = 1; index < changes[metric].size(); ++index)
      all.emplace_back(changes[metric][index].t_ns, metric);
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> ticks;
  for (size_t index = 0; index < all.size(); ++index) {
    if (index == 0 || all[index].first - all[index - 1].first > 20'000'000) ticks.push_back(all[index].first);
  }
  if (ticks.size() >= 3) {
    constexpr double kNominalNs = 100e6;
    std::vector<double> n_values;
    for (int64_t tick : ticks)
      n_values.push_back(std::round(static_cast<double>(tick - ticks[0]) / kNominalNs));
    double sum_n = 0, sum_t = 0, sum_nn = 0, sum_nt = 0;
    for (size_t index = 0; index < ticks.size(); ++index) {
      const double n = n_values[index];
      const double t = static_cast<double>(ticks[index] - ticks[0]);
      sum_n += n;
      sum_t += t;
      sum_nn += n * n;
      sum_nt += n * t;
    }
    const double count = static_cast<double>(ticks.size());
    const double period_ns = (count * sum_nt - sum_n * sum_t) / (count * sum_nn - sum_n * sum_n);
    const double offset_ns = (sum_t - period_ns * sum_n) / count;
    std::vector<double> residual_us;
    for (size_t index = 0; index < ticks.size(); ++index) {
      residual_us.push_back(
          std::fabs(static_cast<double>(ticks[index] - ticks[0]) - offset_ns - period_ns * n_values[index]) /
          1e3);
    }
    const double phase_us = std::fmod(static_cast<double>(ticks[0]) + offset_ns, period_ns) / 1e3;
    std::printf(
        "ticks %zu updates in %.1f s: period %.3f us, |residual| p50 %.1f us p99 %.1f us max %.1f us, "
        "phase (CLOCK_MONOTONIC mod period) %.1f us\n",
        ticks.size(), elapsed_s, period_ns / 1e3, quantile(residual_us, 0.5), quantile(residual_us, 0.99),
        quantile(residual_us, 1.0), phase_us);
  }
  std::printf("# flicker: %lld back-to-back reads in %.1f s (%.1f us each); values held < 10 ms, by shape\n",
              static_cast<long long>(reads), elapsed_s, elapsed_s * 1e6 / static_cast<double>(reads));
  for (int metric = 0; metric < kMetrics; ++metric) {
    const auto& list = changes[metric];
    int reversions = 0;
    int intermediates = 0;
    std::vector<std::string> examples;
    for (size_t index = 1; index + 1 < list.size(); ++index) {
      const double held_ms = static_cast<double>(list[index + 1].t_ns - list[index].t_ns) / 1e6;
      if (held_ms >= 10) continue;
      const bool reversion = list[index - 1].value == list[index + 1].value;
      (reversion ? reversions : intermediates)++;
      if (examples.size() < 6) {
        char line[256];
        std::snprintf(
            line, sizeof(line),
            "    t=%.3f s: %g (held %.1f ms) -> %g (held %.2f ms, sensor ts %+lld us) -> %g",
            static_cast<double>(list[index].t_ns - begin) / 1e9, list[index - 1].value,
            static_cast<double>(list[index].t_ns - list[index - 1].t_ns) / 1e6, list[index].value, held_ms,
            static_cast<long long>(list[index].sensor_us ? list[index].sensor_us - list[index - 1].sensor_us
                                                         : 0),
            list[index + 1].value);
        examples.push_back(line);
      }
    }
    std::printf("flicker %-16s changes %5zu  short %4d  reversion A-B-A %4d  intermediate A-B-C %4d\n",
                names[metric], list.size() > 0 ? list.size() - 1 : 0, reversions + intermediates, reversions,
                intermediates);
    for (const auto& line : examples) std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  unsigned int device_index = 0;
  double flicker_seconds = 5;
  double samples_seconds = 4;
  std::string parts = "costs,samples,flicker,wakeup";
  for (int index = 1; index < argc; ++index) {
    const std::string arg = argv[index];
    if (index + 1 >= argc) {
      std::fprintf(stderr,
                   "%s needs a value; usage: nvml_query_lab [--device N] [--flicker-seconds S] "
                   "[--samples-seconds S] [--parts costs,samples,flicker,wakeup]\n",
                   arg.c_str());
      return 2;
    }
    const char* value = argv[++index];
    if (arg == "--device") {
      device_index = static_cast<unsigned int>(std::atoi(value));
    } else if (arg == "--flicker-seconds") {
      flicker_seconds = std::atof(value);
    } else if (arg == "--parts") {
      parts = value;
    } else if (arg == "--samples-seconds") {
      samples_seconds = std::atof(value);
    } else {
      std::fprintf(stderr,
                   "unknown flag %s; usage: nvml_query_lab [--device N] [--flicker-seconds S] "
                   "[--samples-seconds S] [--parts costs,samples,flicker,wakeup]\n",
                   arg.c_str());
      return 2;
    }
  }
  Nvml nvml;
  if (!nvml.open()) {
    std::fprintf(stderr, "nvml_query_lab: NVML could not be opened (no NVIDIA driver here?)\n");
    return 1;
  }
  nvmlDevice_t device = nullptr;
  if (nvml.handle_by_index(device_index, &device) != NVML_SUCCESS) {
    std::fprintf(stderr, "nvml_query_lab: no GPU %u\n", device_index);
    return 1;
  }
  std::printf("# nvml_query_lab: GPU %u\n", device_index);
  if (parts.find("costs") != std::string::npos) run_costs(nvml, device);
  if (parts.find("samples") != std::string::npos) run_samples(nvml, device, samples_seconds);
  if (parts.find("flicker") != std::string::npos) run_flicker(nvml, device, flicker_seconds);
  if (parts.find("wakeup") != std::string::npos) run_wakeup(nvml, device);
  return 0;
}
