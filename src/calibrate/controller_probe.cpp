#include "calibrate/controller_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>

#include "calibrate/fit_stage.h"
#include "calibrate/measurement.h"
#include "core/error.h"
#include "core/statistics.h"
#include "sim/power_dynamics.h"
#include "sim/power_thermal.h"

namespace calo::calibrate {

namespace {

/// Replay tick: the controller sees each millisecond (the simulator's finest tick).
constexpr double kTickS = 1e-3;
/// Idle before the first burst and after the last that the replay covers.
constexpr int64_t kLeadNs = 1'000'000'000, kTailNs = 500'000'000;
/// A gap sample counts toward the idle level only this long after a burst (the tail has decayed).
constexpr int64_t kSettledNs = 100'000'000;
/// Responses within this fraction of the best RMS make the reported interval.
constexpr double kIntervalTolerance = 0.02;

std::vector<ProbeBurst> read_bursts(const std::filesystem::path& run_dir, int64_t wall_offset_ns) {
  std::ifstream log(run_dir / "stdout.log");
  const std::regex line_re(
      R"(burst \d+ phase (\w+) target_ms (\S+) gap_ms (\S+) begin_ns (\d+) end_ns (\d+) gemms \d+)");
  std::vector<ProbeBurst> bursts;
  std::string line;
  std::smatch match;
  while (std::getline(log, line)) {
    if (!std::regex_search(line, match, line_re)) continue;
    bursts.push_back({match[1], std::stod(match[2]), std::stod(match[3]),
                      std::stoll(match[4]) - wall_offset_ns, std::stoll(match[5]) - wall_offset_ns});
  }
  return bursts;
}

/// Idle: samples more than kSettledNs after an isolated burst and before the next one. Full: per isolated
/// burst of 160 ms or more, its largest sample in the first 100 ms (the controller has not acted yet).
void measure_levels(ProbeRun& probe) {
  std::vector<double> idle, full;
  for (std::size_t index = 0; index < probe.bursts.size(); ++index) {
    const ProbeBurst& burst = probe.bursts[index];
    if (burst.phase != "isolated") continue;
    const int64_t next_ns =
        index + 1 < probe.bursts.size() ? probe.bursts[index + 1].begin_ns : burst.end_ns + kSettledNs * 3;
    double first_peak_w = NAN;
    for (const store::Sample& sample : probe.samples) {
      if (sample.t_ns > burst.end_ns + kSettledNs && sample.t_ns < next_ns) idle.push_back(sample.value);
      if (burst.target_ms >= 160 && sample.t_ns > burst.begin_ns &&
          sample.t_ns <= burst.begin_ns + 100'000'000)
        first_peak_w = std::isnan(first_peak_w) ? sample.value : std::max(first_peak_w, sample.value);
    }
    if (std::isfinite(first_peak_w)) full.push_back(first_peak_w);
  }
  probe.idle_w = core::upper_median(std::move(idle));
  probe.full_w = core::upper_median(std::move(full));
}

/// The phase of the burst whose window [begin, end + window] holds `t_ns` (empty when none); `cursor` walks
/// the bursts forward as the samples do.
const ProbeBurst* burst_at(const std::vector<ProbeBurst>& bursts, int64_t t_ns, int64_t window_ns,
                           std::size_t& cursor) {
  while (cursor < bursts.size() && bursts[cursor].end_ns + window_ns < t_ns) ++cursor;
  if (cursor < bursts.size() && bursts[cursor].begin_ns < t_ns) return &bursts[cursor];
  return nullptr;
}

}  // namespace

ProbeRun load_probe_run(const std::filesystem::path& run_dir, const sim::GpuSpec& base_gpu) {
  store::RunReader reader(run_dir);
  ProbeRun probe;
  probe.run_dir = run_dir;
  probe.label =
      run_dir.filename().empty() ? run_dir.parent_path().filename().string() : run_dir.filename().string();
  const std::vector<store::DeviceInfo> devices = reader.devices();
  const auto gpu = std::find_if(devices.begin(), devices.end(), [](const store::DeviceInfo& device) {
    return device.kind == store::DeviceKind::kGpu;
  });
  require_input(gpu != devices.end(),
                fmt::format("--controller-probe {} recorded no GPU; give a `calo record` run of "
                            "bench/gpu/controller_probe.py on the GPU the cluster models",
                            run_dir.string()));
  probe.gpu_name = gpu->name;
  const std::string run_token = gpu_model_token(gpu->name), base_token = gpu_model_token(base_gpu.name);
  require_input(run_token == base_token,
                fmt::format("--controller-probe {} ran on {} but the --cluster GPU is {}; probe a {} or give "
                            "a --cluster whose GPU is a {}",
                            run_dir.string(), gpu->name, base_gpu.name, base_gpu.name, run_token));
  const auto metric = reader.find_metric("power_sampled_w");
  require_input(metric.has_value(),
                fmt::format("--controller-probe {} has no power_sampled_w (the driver's 20 ms samples); "
                            "record it with calo record on a driver that reports them",
                            run_dir.string()));
  probe.samples = reader.samples(gpu->idx, metric->id);
  probe.bursts = read_bursts(run_dir, reader.run().wall_offset_ns);
  require_input(!probe.bursts.empty(),
                fmt::format("--controller-probe {}: stdout.log has no burst lines; give a run of `calo "
                            "record -- python3 bench/gpu/controller_probe.py`",
                            run_dir.string()));
  measure_levels(probe);
  require_input(std::isfinite(probe.idle_w) && std::isfinite(probe.full_w) && probe.full_w > probe.idle_w,
                fmt::format("--controller-probe {} has no isolated burst of 160 ms or more with samples "
                            "around it; run the probe's default phases (bench/gpu/controller_probe.py)",
                            run_dir.string()));
  return probe;
}

ProbeReplay replay_probe(const ProbeRun& probe, const sim::GpuSpec& gpu, double lag_ms) {
  const int64_t tick_ns = static_cast<int64_t>(kTickS * 1e9);
  const int64_t lag_ns = static_cast<int64_t>(lag_ms * 1e6);
  const int64_t start_ns = probe.bursts.front().begin_ns - kLeadNs;
  const int64_t end_ns = probe.bursts.back().end_ns + kTailNs;
  const auto ticks = static_cast<std::size_t>((end_ns - start_ns) / tick_ns);
  std::vector<double> busy(ticks, 0.0);  // fraction of each tick the GPU worked
  for (const ProbeBurst& burst : probe.bursts) {
    const double begin =
        static_cast<double>(burst.begin_ns + lag_ns - start_ns) / static_cast<double>(tick_ns);
    const double end = static_cast<double>(burst.end_ns + lag_ns - start_ns) / static_cast<double>(tick_ns);
    for (auto tick = static_cast<std::size_t>(std::max(0.0, begin)); tick < ticks && tick < end; ++tick) {
      const double t = static_cast<double>(tick);
      busy[tick] += std::min(end, t + 1) - std::max(begin, t);
    }
  }
  // Energy up to each tick boundary, with the controller acting on every tick.
  sim::PowerController controller(gpu.power_control, gpu, gpu.power_limit_w, gpu.max_sm_mhz, gpu.max_sm_mhz);
  std::vector<double> energy_j(ticks + 1, 0.0);
  for (std::size_t tick = 0; tick < ticks; ++tick) {
    const double clock_mhz = sim::clock_bin_mhz(gpu, controller.clock_mhz());
    const double power_w = probe.idle_w + busy[tick] * (probe.full_w - probe.idle_w) *
                                              std::pow(clock_mhz / gpu.max_sm_mhz, gpu.clock_power_exponent);
    energy_j[tick + 1] = energy_j[tick] + power_w * kTickS;
    controller.observe(power_w, kTickS);
  }
  const auto energy_at = [&](double t_ticks) {
    const double clamped = std::clamp(t_ticks, 0.0, static_cast<double>(ticks));
    const auto whole = std::min(static_cast<std::size_t>(clamped), ticks - 1);
    return energy_j[whole] + (energy_j[whole + 1] - energy_j[whole]) * (clamped - static_cast<double>(whole));
  };
  ProbeReplay replay;
  replay.simulated_w.assign(probe.samples.size(), NAN);
  const double window_ticks = gpu.power_control.sample_window_s / kTickS;
  const auto window_ns = static_cast<int64_t>(gpu.power_control.sample_window_s * 1e9);
  double sum_all = 0, sum_isolated = 0, sum_train = 0;
  std::size_t isolated = 0, train = 0, cursor = 0;
  for (std::size_t index = 0; index < probe.samples.size(); ++index) {
    const store::Sample& sample = probe.samples[index];
    const double end_tick = static_cast<double>(sample.t_ns - start_ns) / static_cast<double>(tick_ns);
    if (end_tick - window_ticks < 0 || end_tick > static_cast<double>(ticks)) continue;
    const double simulated_w =
        (energy_at(end_tick) - energy_at(end_tick - window_ticks)) / (window_ticks * kTickS);
    replay.simulated_w[index] = simulated_w;
    const ProbeBurst* burst = burst_at(probe.bursts, sample.t_ns, window_ns, cursor);
    if (burst == nullptr) continue;
    const double squared_w2 = (simulated_w - sample.value) * (simulated_w - sample.value);
    sum_all += squared_w2;
    (burst->phase == "isolated" ? sum_isolated : sum_train) += squared_w2;
    (burst->phase == "isolated" ? isolated : train) += 1;
  }
  replay.samples = isolated + train;
  const auto rms = [](double sum, std::size_t count) { return count > 0 ? std::sqrt(sum / count) : NAN; };
  replay.rms_w = rms(sum_all, replay.samples);
  replay.isolated_rms_w = rms(sum_isolated, isolated);
  replay.train_rms_w = rms(sum_train, train);
  return replay;
}

ControllerFit fit_controller(const ProbeRun& probe, const sim::GpuSpec& base_gpu) {
  sim::GpuSpec gpu = base_gpu;
  gpu.power_control.raise_response_s = 0;  // one response, cutting and raising (SIMULATOR.md says why)
  const auto rms_at = [&](double response_s, double average_s, double lag_ms) {
    gpu.power_control.response_s = response_s;
    gpu.power_control.average_s = average_s;
    return replay_probe(probe, gpu, lag_ms).rms_w;
  };
  // Coarse: every (lag, averaging) with the best response on a log grid; then refine the best cell.
  static const double kAveragesS[] = {0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1};
  static const double kLagsMs[] = {0, 2, 4, 6};
  constexpr double kResponseLowS = 0.002, kResponseHighS = 2.0;
  ControllerFit fit;
  double best_rms = INFINITY;
  for (double lag_ms : kLagsMs) {
    for (double average_s : kAveragesS) {
      const double response_s = minimize_1d([&](double x) { return rms_at(x, average_s, lag_ms); },
                                            kResponseLowS, kResponseHighS, true, 13, 10);
      const double value = rms_at(response_s, average_s, lag_ms);
      if (value < best_rms) {
        best_rms = value;
        fit.response_s = response_s, fit.average_s = average_s, fit.lag_ms = lag_ms;
      }
    }
  }
  // The interval: responses on a fine log grid, at the fitted averaging and lag, within kIntervalTolerance.
  fit.response_low_s = fit.response_high_s = fit.response_s;
  constexpr int kIntervalPoints = 61;
  for (int point = 0; point < kIntervalPoints; ++point) {
    const double response_s =
        kResponseLowS * std::pow(kResponseHighS / kResponseLowS, point / (kIntervalPoints - 1.0));
    if (rms_at(response_s, fit.average_s, fit.lag_ms) > best_rms * (1 + kIntervalTolerance)) continue;
    fit.response_low_s = std::min(fit.response_low_s, response_s);
    fit.response_high_s = std::max(fit.response_high_s, response_s);
  }
  gpu.power_control.response_s = fit.response_s;
  gpu.power_control.average_s = fit.average_s;
  fit.fitted = replay_probe(probe, gpu, fit.lag_ms);
  fit.base = replay_probe(probe, base_gpu, fit.lag_ms);
  return fit;
}

}  // namespace calo::calibrate
