// Benchmark: report rendering time over a long recording. Generates (once; reused if present) a run of
// `--gpus` GPUs x `--seconds` s with 10 fast metrics at `--hz` plus the energy counter at 10 Hz and throttle
// counters at 1 Hz, 2 s steps, through store::RunWriter; then times analyze_run + render + write, which is
// exactly what `calo report` does. Checks the sample count and that every chart has data.
// Usage: bench_report_render [--gpus 8] [--seconds 3600] [--hz 100] [--dir /tmp/calo_bench_report_run]
//        [--threads 0] [--regenerate] [--compare-series (also time the per-series query path)]
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <thread>

#include "analyze/metrics.h"
#include "report/html_report.h"
#include "store/run_store.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t generate(const std::filesystem::path& dir, int gpus, int seconds, int hz) {
  calo::store::RunInfo info;
  info.kind = calo::store::RunKind::kRecord;
  info.name = "bench-1h-8gpu";
  info.command = "bench_report_render (synthetic)";
  info.host = "bench";
  info.config_json = R"({"tokens_per_step": 65536, "samples_per_step": 16, "model_flops_per_step": 3.1e15})";
  calo::store::RunWriter writer(dir, info);
  for (int gpu = 0; gpu < gpus; ++gpu) {
    calo::store::DeviceInfo device;
    device.idx = gpu;
    device.slot = gpu;
    device.name = "NVIDIA H100 80GB HBM3";
    device.power_limit_w = 700;
    writer.add_device(device);
  }
  using calo::store::MetricKind;
  const char* gauges[][2] = {{"power_instant_w", "W"}, {"power_avg_w", "W"},    {"temp_gpu_c", "C"},
                             {"temp_mem_c", "C"},      {"clock_sm_mhz", "MHz"}, {"clock_mem_mhz", "MHz"},
                             {"util_gpu_pct", "pct"},  {"util_mem_pct", "pct"}, {"mem_used_bytes", "bytes"}};
  std::vector<int32_t> gauge_ids;
  for (const auto& gauge : gauges)
    gauge_ids.push_back(writer.metric_id(gauge[0], gauge[1], MetricKind::kGauge));
  int32_t reasons = writer.metric_id("clock_event_reasons", "mask", MetricKind::kBitmask);
  int32_t energy = writer.metric_id("energy_j", "J", MetricKind::kCounter);
  int32_t throttle = writer.metric_id("throttle_power_cap_s", "s", MetricKind::kCounter);
  int64_t samples = 0;
  int64_t period_ns = 1'000'000'000LL / hz;
  std::vector<calo::store::Sample> batch;
  double energy_j[64] = {};
  for (int64_t tick = 0; tick < static_cast<int64_t>(seconds) * hz; ++tick) {
    int64_t t_ns = tick * period_ns;
    double t_s = static_cast<double>(t_ns) * 1e-9;
    double phase = std::fmod(t_s, 2.0);  // 2 s steps: compute burst then communication
    batch.clear();
    for (int gpu = 0; gpu < gpus; ++gpu) {
      double busy = phase < 1.6 ? 1.0 : 0.3;
      double power = 180 + 480 * busy + 15 * std::sin(t_s * 7 + gpu) + gpu * 4;
      double temp = 45 + 20 * (1 - std::exp(-t_s / 600)) + gpu * 1.5 + 2 * busy;
      double values[] = {power, power * 0.98, temp,      temp + 8, busy > 0.5 ? 1755.0 - gpu * 10 : 1980.0,
                         2619,  busy * 100,   busy * 60, 6.4e10};
      for (std::size_t metric = 0; metric < gauge_ids.size(); ++metric) {
        batch.push_back({gpu, gauge_ids[metric], t_ns, values[metric]});
      }
      batch.push_back({gpu, reasons, t_ns, busy > 0.5 && gpu >= 6 ? 4.0 : 0.0});
      energy_j[gpu] += power / hz;
      if (tick % (hz / 10) == 0) batch.push_back({gpu, energy, t_ns, energy_j[gpu]});
      if (tick % hz == 0) batch.push_back({gpu, throttle, t_ns, gpu >= 6 ? t_s * 0.1 : 0.0});
    }
    writer.append(batch);
    samples += static_cast<int64_t>(batch.size());
  }
  for (int step = 0; step < seconds / 2; ++step) {
    for (int gpu = 0; gpu < gpus; ++gpu) {
      calo::store::Span span;
      span.rank = gpu;
      span.device_idx = gpu;
      span.kind = calo::store::SpanKind::kStep;
      span.name = "step";
      span.step = step;
      span.t_begin_ns = step * 2'000'000'000LL;
      span.t_end_ns = span.t_begin_ns + 1'990'000'000LL + (gpu == 7 ? 8'000'000 : gpu * 100'000);
      writer.append_span(span);
    }
  }
  writer.finish(static_cast<int64_t>(seconds) * 1'000'000'000LL);
  auto stats = writer.stats();
  if (stats.samples_dropped > 0) fmt::print("# WARNING: writer dropped {} samples\n", stats.samples_dropped);
  return samples;
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = 8;
  int seconds = 3600;
  int hz = 100;
  int threads = 0;
  bool regenerate = false;
  bool compare_series = false;
  std::filesystem::path dir = "/tmp/calo_bench_report_run";
  for (int arg = 1; arg < argc; ++arg) {
    std::string flag = argv[arg];
    auto next = [&] { return std::string(arg + 1 < argc ? argv[++arg] : "0"); };
    if (flag == "--gpus") gpus = std::stoi(next());
    if (flag == "--seconds") seconds = std::stoi(next());
    if (flag == "--hz") hz = std::stoi(next());
    if (flag == "--threads") threads = std::stoi(next());
    if (flag == "--dir") dir = next();
    if (flag == "--regenerate") regenerate = true;
    if (flag == "--compare-series") compare_series = true;
  }
  std::string tag = fmt::format("{}gpu-{}s-{}hz", gpus, seconds, hz);
  std::filesystem::path run_dir = dir / tag;
  double generate_s = 0;
  if (regenerate || !std::filesystem::exists(run_dir / "run.db")) {
    std::filesystem::remove_all(run_dir);
    auto start = std::chrono::steady_clock::now();
    int64_t written = generate(run_dir, gpus, seconds, hz);
    generate_s = seconds_since(start);
    fmt::print("# generated {} samples in {:.1f} s ({:.2f} M samples/s through RunWriter)\n", written,
               generate_s, static_cast<double>(written) / generate_s / 1e6);
  }
  fmt::print("# bench_report_render: analyze_run + render_html_report + write, as `calo report` does\n");
  fmt::print("# run: {} ({} GPUs, {} s, 10 metrics at {} Hz + energy 10 Hz + throttle 1 Hz); cores: {}\n",
             run_dir.string(), gpus, seconds, hz, std::thread::hardware_concurrency());
  int errors = 0;
  fmt::print("{:>8} {:>12} {:>10} {:>10} {:>10} {:>10} {:>8} {:>6}\n", "threads", "samples", "analyze_s",
             "render_s", "total_s", "cpu_s", "charts", "scan");
  double headline = 0;
  int64_t samples = 0;
  std::vector<std::pair<int, bool>> configurations = {{threads, true}};
  if (compare_series) configurations.push_back({threads, false});
  for (auto [thread_count, scan] : configurations) {
    auto start = std::chrono::steady_clock::now();
    double cpu_start = static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
    calo::analyze::AnalyzeOptions options;
    options.threads = thread_count;
    options.storage_order_scan = scan;
    auto analysis = calo::analyze::analyze_run(run_dir, options);
    double analyze_s = seconds_since(start);
    auto render_start = std::chrono::steady_clock::now();
    std::string html = calo::report::render_html_report({analysis}, {"bench"});
    std::ofstream(run_dir / "report.html") << html;
    double render_s = seconds_since(render_start);
    double total_s = seconds_since(start);
    double cpu_s = static_cast<double>(std::clock()) / CLOCKS_PER_SEC - cpu_start;
    int charts = calo::report::count_charts(html);
    samples = analysis.sample_count;
    if (html.find("data-points=\"0\"") != std::string::npos || charts < 5) ++errors;
    int64_t expected = static_cast<int64_t>(gpus) * seconds * (hz * 10 + 10 + 1);
    if (samples != expected) ++errors;
    fmt::print("{:>8} {:>12} {:>10.2f} {:>10.3f} {:>10.2f} {:>10.2f} {:>8} {:>6}\n",
               thread_count == 0 ? "auto" : std::to_string(thread_count), samples, analyze_s, render_s,
               total_s, cpu_s, charts, analysis.storage_order_scan ? "yes" : "no");
    if (headline == 0) headline = total_s;
  }
  fmt::print("# errors: {}\n", errors);
  fmt::print("report_total_s={:.2f} for {} samples (target <= 10 s)\n", headline, samples);
  return errors == 0 ? 0 : 1;
}
