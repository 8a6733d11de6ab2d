// Timing helpers shared by the CUDA benchmarks of bench/exec_gpu: an NVML SM-clock sampler (1 ms) and calls
// timed like executor ops (queued behind a memset, an event pair around each call, idle time after it).
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/time.h"
#include "exec/cuda/cuda_check.h"

namespace calo::bench {

/// Host windows [begin, end) in core::monotonic_ns() time.
using Windows = std::vector<std::pair<std::int64_t, std::int64_t>>;

/// SM clock (MHz) of one GPU, sampled every millisecond from NVML on a thread (NVML is loaded with dlopen;
/// without it available() is false and means are NaN). NVML's power reading is a ~1 s average on Hopper, too
/// slow for millisecond windows, so only the clock is sampled.
class ClockSampler {
 public:
  /// Mean clock over some windows.
  struct Mean {
    double sm_mhz = NAN;      ///< mean SM clock, MHz
    std::size_t samples = 0;  ///< samples inside the windows
  };

  /// Samples the GPU at PCI bus `pci_bus` (CUDA's format).
  explicit ClockSampler(const std::string& pci_bus) {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (library_ == nullptr) return;
    using Init = int (*)();
    using ByBus = int (*)(const char*, void**);
    const auto init = reinterpret_cast<Init>(dlsym(library_, "nvmlInit_v2"));
    const auto by_bus = reinterpret_cast<ByBus>(dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<GetClock>(dlsym(library_, "nvmlDeviceGetClockInfo"));
    if (init == nullptr || by_bus == nullptr || clock_ == nullptr || init() != 0 ||
        by_bus(pci_bus.c_str(), &device_) != 0)
      return;
    running_ = true;
    thread_ = std::thread([this] { sample(); });
  }
  ~ClockSampler() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
    if (library_ != nullptr) {
      using Shutdown = int (*)();
      if (const auto shutdown = reinterpret_cast<Shutdown>(dlsym(library_, "nvmlShutdown"));
          shutdown != nullptr)
        shutdown();
      dlclose(library_);
    }
  }
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  /// True when NVML answered for this GPU.
  bool available() const { return thread_.joinable(); }

  /// Mean of the samples taken inside `windows`.
  Mean mean(const Windows& windows) const {
    std::lock_guard<std::mutex> lock(mutex_);
    Mean result;
    double clock_sum = 0;
    for (const auto& [at_ns, sm_mhz] : samples_) {
      for (const auto& [begin, end] : windows) {
        if (at_ns < begin || at_ns >= end) continue;
        clock_sum += sm_mhz;
        ++result.samples;
        break;
      }
    }
    if (result.samples > 0) result.sm_mhz = clock_sum / static_cast<double>(result.samples);
    return result;
  }

 private:
  using GetClock = int (*)(void*, int, unsigned*);
  void sample() {
    constexpr int kClockSm = 1;  // NVML_CLOCK_SM
    while (running_) {
      unsigned mhz = 0;
      if (clock_(device_, kClockSm, &mhz) == 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        samples_.emplace_back(core::monotonic_ns(), static_cast<double>(mhz));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void* library_ = nullptr;
  void* device_ = nullptr;
  GetClock clock_ = nullptr;
  std::atomic<bool> running_{false};
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::int64_t, double>> samples_;  // (monotonic ns, SM MHz)
};

/// Device memory the GPU clears before each "alone" call (memory-bound, low power): while it runs the host
/// enqueues the call, so the call starts from a full queue as ops inside a step do and its time excludes
/// the host's launch latency.
constexpr std::size_t kSpacerBytes = 256ull << 20;

/// Mean time (ns) of `run` timed like an executor op (an event pair around each call), one call at a time:
/// each call is queued behind a memset of `spacer` (kSpacerBytes) and after it the GPU stays idle for as long
/// as the call ran (at least 1 ms), so no call runs in the power-capped state of a back-to-back loop. Each
/// call's host window is added to `windows`.
template <typename Run>
double time_spaced(cudaStream_t stream, void* spacer, int warmup, int iterations, Windows& windows,
                   Run&& run) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CALO_CUDA(cudaEventCreate(&start));
  CALO_CUDA(cudaEventCreate(&stop));
  double total_ns = 0;
  for (int at = 0; at < warmup + iterations; ++at) {
    const std::int64_t begin_ns = core::monotonic_ns();
    CALO_CUDA(cudaMemsetAsync(spacer, at & 0xff, kSpacerBytes, stream));
    CALO_CUDA(cudaEventRecord(start, stream));
    run();
    CALO_CUDA(cudaEventRecord(stop, stream));
    CALO_CUDA(cudaEventSynchronize(stop));
    const std::int64_t end_ns = core::monotonic_ns();
    float milliseconds = 0;
    CALO_CUDA(cudaEventElapsedTime(&milliseconds, start, stop));
    if (at >= warmup) {
      total_ns += static_cast<double>(milliseconds) * 1e6;
      windows.emplace_back(begin_ns, end_ns);
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::max<std::int64_t>(1000, std::llround(milliseconds * 1e3))));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return total_ns / iterations;
}

/// "NNNN MHz (N samples)" of a clock mean, or "n/a".
std::string describe_clock(const ClockSampler::Mean& mean) {
  if (mean.samples == 0) return "n/a";
  return fmt::format("{:.0f} MHz ({} samples)", mean.sm_mhz, mean.samples);
}

}  // namespace calo::bench
