// Test helper: writes small runs with hand-computable figures through the real run store writer.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "../common/scratch.h"
#include "store/run_store.h"

namespace calo::testing {

/// A fresh empty directory in the test process's scratch (tests/common/scratch.h), removed by the destructor.
struct TempDir {
  std::filesystem::path path;
  /// Creates <tmp>/calo-test-<pid>/<tag>-<counter>.
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = scratch_path(tag + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

/// Two GPUs on node 0, 10 s at 100 Hz. GPU 0: 300 W (one 500 W sample at t = 5 s), 60 °C, 1980 MHz,
/// energy 300 J/s. GPU 1: 400 W, 70 °C, 1800 MHz, energy 400 J/s, power-cap throttle 0.5 s/s.
/// Steps k = 0..3: GPU 0 [1+2k, 3+2k] s, GPU 1 ends 10 ms later. Config: 1000 tokens, 4 samples,
/// 2e15 model FLOPs (2.4e15 hardware) per step, peak 1e15 FLOP/s per GPU. `scale` multiplies power/energy
/// (sim runs use it to differ from the measured run). With `kernels`, adds kernel spans of every category.
/// With `warmup`, adds a warm-up step span (named "warmup", as `calo bench` writes them) over [0.1, 0.9] s.
inline void write_synthetic_run(const std::filesystem::path& run_dir, store::RunKind kind, double scale = 1.0,
                                bool kernels = false, bool warmup = false) {
  store::RunInfo info;
  info.kind = kind;
  info.name = kind == store::RunKind::kSim ? "synthetic-sim" : "synthetic";
  info.command = "synthetic test run";
  info.host = "testhost";
  info.config_json = R"({"tokens_per_step": 1000, "samples_per_step": 4, "model_flops_per_step": 2e15,)"
                     R"( "hardware_flops_per_step": 2.4e15, "peak_flops_per_gpu": 1e15, "tp": 2,)"
                     R"( "model": {"name": "synthetic"}, "layout": {"tp": 2}})";
  info.started_ns = 0;
  store::RunWriter writer(run_dir, info);
  for (int gpu = 0; gpu < 2; ++gpu) {
    store::DeviceInfo device;
    device.idx = gpu;
    device.node = 0;
    device.slot = gpu;
    device.name = "Test GPU";
    writer.add_device(device);
  }
  int32_t power = writer.metric_id("power_instant_w", "W", store::MetricKind::kGauge);
  int32_t energy = writer.metric_id("energy_j", "J", store::MetricKind::kCounter);
  int32_t temp = writer.metric_id("temp_gpu_c", "C", store::MetricKind::kGauge);
  int32_t clock = writer.metric_id("clock_sm_mhz", "MHz", store::MetricKind::kGauge);
  int32_t throttle = writer.metric_id("throttle_power_cap_s", "s", store::MetricKind::kCounter);
  for (int64_t tick = 0; tick < 1000; ++tick) {
    int64_t t_ns = tick * 10'000'000;
    double t_s = static_cast<double>(tick) / 100.0;
    double power0 = tick == 500 ? 500.0 : 300.0;
    writer.append({0, power, t_ns, power0 * scale});
    writer.append({1, power, t_ns, 400.0 * scale});
    writer.append({0, energy, t_ns, 300.0 * scale * t_s});
    writer.append({1, energy, t_ns, 400.0 * scale * t_s});
    writer.append({0, temp, t_ns, 60.0});
    writer.append({1, temp, t_ns, 70.0});
    writer.append({0, clock, t_ns, 1980.0});
    writer.append({1, clock, t_ns, 1800.0});
    writer.append({0, throttle, t_ns, 0.0});
    writer.append({1, throttle, t_ns, 0.5 * t_s});
  }
  if (warmup) {
    store::Span span;
    span.kind = store::SpanKind::kStep;
    span.name = "warmup";
    span.step = 100;
    span.t_begin_ns = 100'000'000;
    span.t_end_ns = 900'000'000;
    writer.append_span(span);
  }
  for (int step = 0; step < 4; ++step) {
    for (int gpu = 0; gpu < 2; ++gpu) {
      store::Span span;
      span.rank = gpu;
      span.device_idx = gpu;
      span.kind = store::SpanKind::kStep;
      span.name = "step";
      span.step = step;
      span.t_begin_ns = (1 + 2 * step) * 1'000'000'000LL;
      span.t_end_ns = (3 + 2 * step) * 1'000'000'000LL + gpu * 10'000'000LL;
      writer.append_span(span);
    }
  }
  if (kernels) {
    const char* names[][2] = {{"sm90_xmma_gemm_bf16", "gemm"},
                              {"flash_fwd_kernel", "attention"},
                              {"layer_norm_kernel", "norm"},
                              {"elementwise_kernel", "elementwise"},
                              {"cub_sort", "other"},
                              {"ncclDevKernel_AllReduce", "all_reduce"},
                              {"ncclDevKernel_AllGather", "all_gather"}};
    for (int gpu = 0; gpu < 2; ++gpu) {
      int64_t t_ns = 1'000'000'000;
      for (const auto& entry : names) {
        store::Span span;
        span.rank = gpu;
        span.device_idx = gpu;
        span.kind = store::SpanKind::kKernel;
        span.name = entry[0];
        span.category = entry[1];
        span.t_begin_ns = t_ns;
        span.t_end_ns = t_ns + 1'000'000;
        writer.append_span(span);
        t_ns += 800'000;  // each kernel overlaps the next one by 0.2 ms
      }
    }
  }
  writer.finish(10'000'000'000);
}

}  // namespace calo::testing
