#include "calibrate/measurement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "analyze/metrics.h"
#include "analyze/window_mean.h"
#include "core/device_names.h"
#include "core/error.h"
#include "core/statistics.h"
#include "parallel/validate.h"
#include "sim/power_dynamics.h"
#include "store/run_store.h"

namespace calo::calibrate {

std::string gpu_model_token(const std::string& name) {
  static const std::regex kToken("\\b(GH|GB|[ABHLV]|MI)[0-9]{2,4}[A-Z]?\\b");
  std::smatch match;
  return std::regex_search(name, match, kToken) ? match.str(0) : std::string();
}

namespace {

/// Distinct step numbers of the step spans called `name`.
int count_steps(const std::vector<store::Span>& spans, const std::string& name) {
  std::set<int64_t> steps;
  for (const store::Span& span : spans) {
    if (span.name == name) steps.insert(span.step);
  }
  return static_cast<int>(steps.size());
}

Series read_series(const store::RunReader& reader, const std::string& metric) {
  Series series;
  const auto info = reader.find_metric(metric);
  if (!info) return series;
  reader.for_each_sample(0, info->id, [&](const store::Sample& sample) {
    series.emplace_back(static_cast<double>(sample.t_ns) * 1e-9, sample.value);
  });
  return series;
}

/// The last sample at or before `t_s` (else the first sample); NaN for an empty series.
double value_at(const Series& series, double t_s) {
  if (series.empty()) return NAN;
  double value = series.front().second;
  for (const auto& [time_s, sample] : series) {
    if (time_s > t_s) break;
    value = sample;
  }
  return value;
}

/// Idle power with clocks up (what the GPU draws while it waits inside a job): the median of the power
/// samples taken before the first step while utilization was 0 and the SM clock at least 90 % of its maximum
/// (later samples can carry a stale utilization of 0 while the GPU works); NaN with fewer than three.
double idle_power_w(const Series& power_w, const Series& util_pct, const Series& clock_mhz, double max_sm_mhz,
                    double first_step_s) {
  std::vector<double> values;
  for (const auto& [t_s, value] : power_w) {
    if (t_s >= first_step_s) break;
    if (value_at(util_pct, t_s) <= 0 && value_at(clock_mhz, t_s) >= 0.9 * max_sm_mhz) values.push_back(value);
  }
  return values.size() < 3 ? NAN : core::upper_median(std::move(values));
}

/// When the GPU starts working: the first power sample after the first step began at twice the run's lowest
/// sample (its idle floor); a bench loads the GPU ~0.2 s into its first step. The first step when none is.
double load_start_s(const Series& power_w, double first_step_s) {
  if (power_w.empty()) return first_step_s;
  const double floor_w = std::min_element(power_w.begin(), power_w.end(), [](const auto& a, const auto& b) {
                           return a.second < b.second;
                         })->second;
  for (const auto& [t_s, value] : power_w) {
    if (t_s >= first_step_s && value >= 2 * floor_w) return t_s - 1e-9;
  }
  return first_step_s;
}

RunFigures measured_figures(const analyze::RunAnalysis& analysis) {
  RunFigures figures;
  // The median: a deterministic model is compared with the typical step, not with host hiccups (mbs1 has one
  // 162 ms step among 140 ms ones).
  figures.step_time_s = analysis.step_time_s.count > 0 ? analysis.step_time_s.p50 : NAN;
  int gpus = 0;
  double power_sum = 0, clock_sum = 0;
  for (const analyze::DeviceMetrics& device : analysis.device_metrics) {
    if (device.device.kind != store::DeviceKind::kGpu) continue;
    gpus += 1;
    power_sum += device.power_time_mean_w;
    clock_sum += device.sm_clock_mean_mhz;
    auto larger = [](double current, double value) {
      return std::isnan(current) ? value : std::max(current, value);
    };
    figures.peak_power_w = larger(figures.peak_power_w, device.power_peak_w);
    figures.swing_w = larger(figures.swing_w, device.power_swing_100ms_w);
    figures.peak_temp_c = larger(figures.peak_temp_c, device.temp_peak_500ms_c);
  }
  if (gpus > 0) {
    figures.mean_power_w = power_sum / gpus;
    figures.sm_clock_mhz = clock_sum / gpus;
    // The run's one energy figure (docs/METRICS.md "Energy"): the window's energy from the power samples with
    // its edges, the counter only where samples do not cover it (it advances in uneven jumps, 7 % off over a
    // window under a second on H100 mbs1).
    figures.energy_per_step_j = analysis.energy_per_step_j / gpus;
  }
  return figures;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& figure_names() {
  static const std::vector<std::pair<std::string, std::string>> kNames = {
      {"step_time_s", "s"},   {"energy_per_step_j", "J"}, {"mean_power_w", "W"},  {"peak_power_w", "W"},
      {"swing_100ms_w", "W"}, {"peak_temp_c", "C"},       {"sm_clock_mhz", "MHz"}};
  return kNames;
}

double figure_value(const RunFigures& figures, std::size_t index) {
  const double values[] = {figures.step_time_s,  figures.energy_per_step_j, figures.mean_power_w,
                           figures.peak_power_w, figures.swing_w,           figures.peak_temp_c,
                           figures.sm_clock_mhz};
  return index < std::size(values) ? values[index] : NAN;
}

double figure_error(std::size_t index, double measured, double simulated) {
  if (figure_names()[index].second == "C") return simulated - measured;
  return measured != 0 ? (simulated - measured) / measured : NAN;
}

namespace {

/// `run_dir`'s identity and its device 0 (checked against `base_gpu`): a measurement of the right device kind
/// and GPU model, or InputError naming the run and the fix.
MeasuredRun open_measured_run(const store::RunReader& reader, const std::filesystem::path& run_dir,
                              const sim::GpuSpec& base_gpu, store::DeviceInfo& device) {
  const store::RunInfo info = reader.run();
  MeasuredRun run;
  run.run_dir = run_dir;
  run.label =
      run_dir.filename().empty() ? run_dir.parent_path().filename().string() : run_dir.filename().string();
  run.kind = std::string(store::to_string(info.kind));
  run.host = info.host;
  run.started_unix_ns = info.wall_offset_ns;
  require_input(
      info.kind != store::RunKind::kSim,
      fmt::format("{} is a simulated run (kind sim); calibration fits the simulator to measurements: give "
                  "runs of calo bench, calo record or calo ingest",
                  run_dir.string()));
  const std::vector<store::DeviceInfo> devices = reader.devices();
  const store::DeviceKind wanted =
      core::is_cpu_host_device(base_gpu.name) ? store::DeviceKind::kCpu : store::DeviceKind::kGpu;
  const auto gpu =
      std::find_if(devices.begin(), devices.end(), [&](const auto& d) { return d.kind == wanted; });
  require_input(
      gpu != devices.end(),
      fmt::format("{} recorded no {} device, and the --cluster GPU is {}; give a --cluster for the "
                  "device the run used (cpu-host for CPU-backend runs)",
                  run_dir.string(), wanted == store::DeviceKind::kCpu ? "CPU" : "GPU", base_gpu.name));
  run.gpu_name = gpu->name;
  run.gpu_uuid = gpu->uuid;
  if (wanted == store::DeviceKind::kGpu) {
    const std::string run_token = gpu_model_token(gpu->name), base_token = gpu_model_token(base_gpu.name);
    require_input(
        run_token == base_token,
        fmt::format("{} ran on {} but the --cluster GPU is {}; give a --cluster whose GPU is a {}",
                    run_dir.string(), gpu->name, base_gpu.name, run_token.empty() ? gpu->name : run_token));
  }
  device = *gpu;
  return run;
}

}  // namespace

MeasuredRun load_thermal_run(const std::filesystem::path& run_dir, const sim::GpuSpec& base_gpu) {
  store::RunReader reader(run_dir);
  store::DeviceInfo device;
  MeasuredRun run = open_measured_run(reader, run_dir, base_gpu, device);
  run.power_w = read_series(reader, "power_sampled_w");
  if (run.power_w.empty()) run.power_w = read_series(reader, "power_instant_w");
  run.temp_c = read_series(reader, "temp_gpu_c");
  require_input(run.power_w.size() >= 2 && run.temp_c.size() >= 3,
                fmt::format("{} has no power and temperature series (--thermal-run needs both); record the "
                            "job with calo record or calo bench on a GPU with NVML",
                            run_dir.string()));
  const std::vector<store::Span> steps = reader.spans(store::SpanKind::kStep);
  const double first_step_s =
      steps.empty() ? run.power_w.front().first : static_cast<double>(steps.front().t_begin_ns) * 1e-9;
  run.load_start_s = load_start_s(run.power_w, first_step_s);
  run.initial_temp_c = value_at(run.temp_c, run.load_start_s);
  run.figures.peak_temp_c = measured_figures(analyze::analyze_run(run_dir)).peak_temp_c;
  return run;
}

MeasuredRun load_measured_run(const std::filesystem::path& run_dir, const sim::GpuSpec& base_gpu) {
  store::RunReader reader(run_dir);
  store::DeviceInfo device;
  MeasuredRun run = open_measured_run(reader, run_dir, base_gpu, device);
  const store::DeviceInfo* gpu = &device;
  const store::DeviceKind wanted = device.kind;
  const store::RunInfo info = reader.run();
  const std::vector<store::Span> steps = reader.spans(store::SpanKind::kStep);
  run.warmup_steps = count_steps(steps, "warmup");
  run.measured_steps = static_cast<int>(steps.size()) > 0 ? count_steps(steps, "step") : 0;
  require_input(
      run.measured_steps > 0,
      fmt::format("{} has no step spans; record the job with step markers (calo record --markers ...) "
                  "or measure it with calo bench",
                  run_dir.string()));
  const nlohmann::json config = nlohmann::json::parse(info.config_json, nullptr, false);
  if (config.is_object() && config.contains("model") && config.contains("layout")) {
    run.model = model::parse_model_spec(config["model"], run_dir.string() + " (config model)");
    run.layout = parallel::layout_from_json(config["layout"]);
  }
  run.power_w = read_series(reader, "power_sampled_w");
  if (run.power_w.empty()) run.power_w = read_series(reader, "power_instant_w");
  run.temp_c = read_series(reader, "temp_gpu_c");
  const double first_step_s = static_cast<double>(steps.front().t_begin_ns) * 1e-9;
  run.idle_power_w =
      idle_power_w(run.power_w, read_series(reader, "util_gpu_pct"), read_series(reader, "clock_sm_mhz"),
                   gpu->max_sm_mhz > 0 ? gpu->max_sm_mhz : base_gpu.max_sm_mhz, first_step_s);
  // The last temperature sample before the GPU loads: the first NVML reading of a process can be stale (tmbs1
  // read 36 C, then 33 C at idle 100 ms later, before its first kernel).
  run.load_start_s = load_start_s(run.power_w, first_step_s);
  run.initial_temp_c = value_at(run.temp_c, run.load_start_s);
  run.figures = measured_figures(analyze::analyze_run(run_dir));
  if (wanted == store::DeviceKind::kCpu) {
    // CPU runs: the figures come from the bench's own step spans; the device row is a CPU, not a GPU.
    std::vector<double> durations;
    for (const store::Span& span : steps) {
      if (span.name == "step" && span.rank == 0)
        durations.push_back(static_cast<double>(span.t_end_ns - span.t_begin_ns) * 1e-9);
    }
    if (!durations.empty()) run.figures.step_time_s = core::upper_median(std::move(durations));
  }
  double tflops = NAN, mfu = NAN;
  for (const store::SummaryRow& row : reader.summaries("bench")) {
    if (row.key == "tflops_per_device") tflops = row.value;
    if (row.key == "mfu") mfu = row.value;
  }
  if (std::isfinite(tflops) && std::isfinite(mfu) && mfu > 0) run.measured_peak_flops = tflops * 1e12 / mfu;
  std::set<int64_t> measured;
  for (const store::Span& span : steps) {
    if (span.name == "step") measured.insert(span.step);
  }
  for (store::Span& span : reader.spans(store::SpanKind::kOp)) {
    if (span.rank == 0 && measured.count(span.step) > 0) run.op_spans.push_back(std::move(span));
  }
  return run;
}

std::string shown_parameter_key(const std::string& key, const sim::GpuSpec& gpu) {
  if (!core::is_cpu_host_device(gpu.name) || !key.starts_with("gpu.")) return key;
  return "core." + key.substr(4);
}

std::vector<OpTiming> op_timings(const MeasuredRun& run, const graph::Graph& graph) {
  std::vector<OpTiming> timings;
  if (run.op_spans.empty()) return timings;
  std::vector<graph::Op> compute;
  for (const graph::RankOp& rank_op : graph::materialize(graph, 0)) {
    if (rank_op.op.stream == graph::Stream::kCompute) compute.push_back(rank_op.op);
  }
  // Spans per step, compute stream only, in time order (one stream executes in issue order).
  std::map<int64_t, std::vector<const store::Span*>> by_step;
  for (const store::Span& span : run.op_spans) {
    if (span.category == graph::to_string(graph::Stream::kCompute)) by_step[span.step].push_back(&span);
  }
  std::vector<std::vector<double>> durations(compute.size());
  for (const auto& [step, spans] : by_step) {
    if (spans.size() != compute.size()) return {};
    for (std::size_t index = 0; index < compute.size(); ++index) {
      if (spans[index]->name != graph::span_name(compute[index])) return {};
      durations[index].push_back(static_cast<double>(spans[index]->t_end_ns - spans[index]->t_begin_ns) *
                                 1e-9);
    }
  }
  for (std::size_t index = 0; index < compute.size(); ++index) {
    if (durations[index].empty()) return {};
    timings.push_back(
        {compute[index], core::upper_median(std::move(durations[index])), run.figures.sm_clock_mhz});
  }
  return timings;
}

graph::Graph run_graph(const MeasuredRun& run) {
  require_input(run.simulatable(), fmt::format("{} carries no model and layout to simulate", run.label));
  return graph::build_graph(*run.model, parallel::resolve_layout(*run.model, run.layout));
}

sim::SimResult simulate_measured(const MeasuredRun& run, const graph::Graph& graph,
                                 const sim::ClusterSpec& cluster, sim::SimOptions options) {
  options.steps = std::max(1, run.warmup_steps + run.measured_steps);
  if (std::isfinite(run.initial_temp_c)) options.initial_die_c = run.initial_temp_c;
  return sim::simulate(graph, cluster, options);
}

RunFigures simulate_run(const MeasuredRun& run, const graph::Graph& graph, const sim::ClusterSpec& cluster,
                        sim::SimOptions options) {
  const sim::SimResult result = simulate_measured(run, graph, cluster, options);
  options.steps = result.steps;
  const int first = std::min(run.warmup_steps, options.steps - 1);
  const std::size_t world = static_cast<std::size_t>(result.world);
  double time_s = 0, energy_j = 0, clock_sum = 0;
  RunFigures figures;
  figures.peak_power_w = 0;
  figures.swing_w = 0;
  figures.peak_temp_c = -1e9;
  for (std::size_t rank = 0; rank < world; ++rank) {
    std::vector<float> samples;
    double window_s = cluster.gpu.power_control.sample_window_s;
    // The sustained peak temperature as analyze measures it: the hottest 500 ms mean of the step
    // temperatures.
    analyze::WindowMeanPeak sustained(analyze::kSustainedTempWindowNs);
    double step_start_s = 0;
    for (int step = first; step < options.steps; ++step) {
      const std::size_t index = static_cast<std::size_t>(step) * world + rank;
      const sim::PowerTrace& trace = *result.power_traces[result.trace_of[index]];
      samples.insert(samples.end(), trace.sample_w.begin(), trace.sample_w.end());
      window_s = trace.window_s;
      energy_j += trace.energy_j;
      clock_sum += result.clock_mhz[index];
      figures.peak_power_w = std::max(figures.peak_power_w, trace.peak_w);
      const double step_end_s = step_start_s + result.step_results[step].iteration_s;
      sustained.add_segment(std::llround(step_start_s * 1e9), std::llround(step_end_s * 1e9),
                            result.die_c[index]);
      step_start_s = step_end_s;
    }
    figures.swing_w = std::max(figures.swing_w, sim::largest_swing_w(samples, window_s, 0.1));
    figures.peak_temp_c = std::max(figures.peak_temp_c, sustained.peak_or_mean());
  }
  for (int step = first; step < options.steps; ++step) time_s += result.step_results[step].iteration_s;
  const double steps = options.steps - first;
  figures.step_time_s = time_s / steps;
  figures.energy_per_step_j = energy_j / world / steps;
  figures.mean_power_w = energy_j / world / time_s;
  figures.sm_clock_mhz = clock_sum / world / steps;
  return figures;
}

}  // namespace calo::calibrate
