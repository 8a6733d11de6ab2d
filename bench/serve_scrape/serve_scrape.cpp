// Scrape cost of the live-metrics endpoint: a run store is written as `calo record` writes it (G GPUs, the 13
// fast/slow metrics at their periods) while LiveMetrics::render() is called once per scrape interval; reports
// wall and CPU time per scrape and per new row. Checked: the last scrape shows the last value written.
#include <fmt/format.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <filesystem>

#include "core/table.h"
#include "core/time.h"
#include "serve/openmetrics.h"
#include "store/run_store.h"

namespace {

namespace store = calo::store;

int64_t thread_cpu_ns() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_serve_scrape: cost of one OpenMetrics scrape of a run store being written"};
  int gpus = 8;
  int scrapes = 10;
  double interval_s = 15;
  double rate_hz = 100;
  app.add_option("--gpus", gpus, "GPUs in the run");
  app.add_option("--scrapes", scrapes, "scrapes to time");
  app.add_option("--interval-s", interval_s, "simulated seconds of samples between scrapes");
  app.add_option("--rate-hz", rate_hz, "samples per second of each fast metric (10 ms default period)");
  CLI11_PARSE(app, argc, argv);

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("calo-serve-bench-{}", calo::core::monotonic_ns());
  store::RunInfo info;
  info.kind = store::RunKind::kRecord;
  info.name = "scrape-bench";
  info.host = "bench";
  store::RunWriter writer(dir, info);
  // calo record's GPU metrics: 10 gauges at 10 ms, 3 counters at 100 ms (energy, two throttle counters).
  const char* gauges[] = {"power_instant_w",     "power_avg_w",   "temp_gpu_c",   "temp_mem_c",
                          "clock_sm_mhz",        "clock_mem_mhz", "util_gpu_pct", "util_mem_pct",
                          "clock_event_reasons", "mem_used_bytes"};
  const char* counters[] = {"energy_j", "throttle_power_cap_s", "throttle_sw_thermal_s"};
  std::vector<int32_t> gauge_ids, counter_ids;
  for (const char* name : gauges) gauge_ids.push_back(writer.metric_id(name, "x", store::MetricKind::kGauge));
  for (const char* name : counters)
    counter_ids.push_back(writer.metric_id(name, "x", store::MetricKind::kCounter));
  for (int gpu = 0; gpu < gpus; ++gpu) {
    store::DeviceInfo device;
    device.idx = gpu;
    device.slot = gpu;
    device.name = "NVIDIA H100 80GB HBM3";
    device.uuid = fmt::format("GPU-{:08x}", gpu);
    writer.add_device(device);
  }
  calo::serve::LiveMetrics live(dir);
  live.render();
  const auto period_ns = static_cast<int64_t>(1e9 / rate_hz);
  const auto steps_per_interval = static_cast<int64_t>(interval_s * rate_hz);
  int64_t t_ns = 0;
  double last_value = 0;
  calo::core::TextTable table({"scrape", "new rows", "wall", "CPU", "CPU per row", "page"});
  table.set_units({"", "", "ms", "ms", "ns", "bytes"});
  double total_cpu_ms = 0;
  int64_t total_rows = 0;
  for (int scrape = 0; scrape < scrapes; ++scrape) {
    int64_t rows = 0;
    std::vector<store::Sample> batch;
    for (int64_t tick = 0; tick < steps_per_interval; ++tick, t_ns += period_ns) {
      batch.clear();
      for (int gpu = 0; gpu < gpus; ++gpu) {
        last_value = static_cast<double>(tick % 700);
        for (const int32_t id : gauge_ids) batch.push_back({gpu, id, t_ns, last_value, store::kNoSensorTime});
        if (tick % 10 == 0) {
          for (const int32_t id : counter_ids)
            batch.push_back({gpu, id, t_ns, last_value, store::kNoSensorTime});
        }
      }
      writer.append(batch);
      rows += static_cast<int64_t>(batch.size());
    }
    writer.flush();
    const int64_t wall_begin = calo::core::monotonic_ns();
    const int64_t cpu_begin = thread_cpu_ns();
    const std::string page = live.render();
    const double cpu_ms = static_cast<double>(thread_cpu_ns() - cpu_begin) / 1e6;
    const double wall_ms = static_cast<double>(calo::core::monotonic_ns() - wall_begin) / 1e6;
    if (page.find(fmt::format("calo_power_instant_w{{gpu=\"{}\"", gpus - 1)) == std::string::npos ||
        page.find(fmt::format("}} {}\n", last_value)) == std::string::npos) {
      fmt::print(stderr, "scrape {} does not show the last value written\n", scrape);
      return 1;
    }
    total_cpu_ms += cpu_ms;
    total_rows += rows;
    table.add_row({std::to_string(scrape), std::to_string(rows), fmt::format("{:.1f}", wall_ms),
                   fmt::format("{:.1f}", cpu_ms),
                   fmt::format("{:.0f}", cpu_ms * 1e6 / static_cast<double>(rows)),
                   std::to_string(page.size())});
  }
  writer.finish(t_ns);
  std::filesystem::remove_all(dir);
  fmt::print("# gpus {} | fast metrics at {} Hz | scrape every {} s of samples | {} scrapes\n", gpus, rate_hz,
             interval_s, scrapes);
  fmt::print("{}", table.render());
  const double mean_cpu_ms = total_cpu_ms / scrapes;
  fmt::print(
      "headline: {:.1f} ms CPU per scrape ({:.0f} ns per new row) = {:.3f} % of one core at one scrape per "
      "{} s\n",
      mean_cpu_ms, total_cpu_ms * 1e6 / static_cast<double>(total_rows),
      mean_cpu_ms / (interval_s * 1e3) * 100, interval_s);
  return 0;
}
