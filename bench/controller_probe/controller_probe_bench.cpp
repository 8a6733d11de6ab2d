// The controller probe's bursts, measured and simulated: reads a `calo record` run of
// bench/gpu/controller_probe.py (its burst lines in stdout.log, its 20 ms driver samples in run.db) and
// simulates each burst length on a cluster's GPU (the probe's 8192^3 bf16 GEMMs back to back, then the gap);
// then replays the whole probe on the cluster's controller and on the one fitted to the probe
// (calibrate/controller_probe.h) and prints both replays' sample error.
// Usage: bench_controller_probe RUN_DIR [CLUSTER (default h100-hgx-calibrated)]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "calibrate/controller_probe.h"
#include "calibrate/fit.h"
#include "core/error.h"
#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"
#include "sim/power_dynamics.h"
#include "sim/power_thermal.h"
#include "store/run_store.h"

namespace {

using namespace calo;

/// The largest 20 ms sample whose window overlaps the burst (a sample is stamped at its window's end).
double burst_peak_w(const std::vector<store::Sample>& samples, const calibrate::ProbeBurst& burst,
                    double window_ns) {
  double peak_w = 0;
  for (const store::Sample& sample : samples) {
    if (sample.t_ns > burst.begin_ns && sample.t_ns <= burst.end_ns + window_ns)
      peak_w = std::max(peak_w, sample.value);
  }
  return peak_w;
}

/// The simulated trace of one burst of `length_s` of back-to-back probe GEMMs followed by `gap_s` idle.
sim::PowerTrace simulate_burst(const sim::GpuSpec& gpu, double length_s, double gap_s) {
  graph::Op gemm;
  gemm.kind = graph::OpKind::kGemm;
  gemm.gemm.m = gemm.gemm.n = gemm.gemm.k = 8192;
  gemm.flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
  gemm.bytes = 3.0 * 8192.0 * 8192.0 * 2;
  const double gemm_s = sim::compute_cost(gpu, gemm).duration_s(1, 1);
  graph::RankProgram program;
  const int count = std::max(1, static_cast<int>(length_s / gemm_s + 0.5));
  program.ops.assign(static_cast<std::size_t>(count), gemm);
  sim::ProgramPower power(gpu, program);
  sim::StepPowerRequest request;
  request.iteration_s = length_s + gap_s;
  request.start_clock_mhz = request.clock_limit_mhz = gpu.max_sm_mhz;
  return sim::trace_step_power(gpu, power, request);
}

/// What the probe alone says of a clock that climbs back more slowly than it is cut: the raise response of
/// least RMS at the fit's cut response, averaging and lag. Not what calibrate holds (SIMULATOR.md says why).
void print_raise_response(const calibrate::ProbeRun& probe, const sim::GpuSpec& gpu,
                          const calibrate::ControllerFit& fit) {
  sim::GpuSpec asymmetric = gpu;
  asymmetric.power_control.response_s = fit.response_s;
  asymmetric.power_control.average_s = fit.average_s;
  const auto rms_at = [&](double raise_s) {
    asymmetric.power_control.raise_response_s = raise_s;
    return calibrate::replay_probe(probe, asymmetric, fit.lag_ms).rms_w;
  };
  const double raise_s = calibrate::minimize_1d(rms_at, 0.002, 2.0, true, 13, 10);
  const double rms_w = rms_at(raise_s);
  fmt::print(
      "  {:<44} {:>7.1f} W\n",
      fmt::format("raising apart: response {:.1f} ms up {:.1f} ms", fit.response_s * 1e3, raise_s * 1e3),
      rms_w);
}

/// The whole probe replayed on the cluster's controller and on the one fitted to it.
void print_replays(const calibrate::ProbeRun& probe, const sim::GpuSpec& gpu) {
  const calibrate::ControllerFit fit = calibrate::fit_controller(probe, gpu);
  fmt::print("replay of all {} burst samples (idle {:.0f} W, full {:.0f} W, lag {:.0f} ms): RMS error\n",
             fit.base.samples, probe.idle_w, probe.full_w, fit.lag_ms);
  fmt::print("  {:<44} {:>7.1f} W (isolated {:.1f}, trains {:.1f})\n",
             fmt::format("cluster: response {:.1f}/{:.1f} ms, averaging {:.1f} ms",
                         gpu.power_control.response_s * 1e3, sim::raise_response_ms(gpu.power_control),
                         gpu.power_control.average_s * 1e3),
             fit.base.rms_w, fit.base.isolated_rms_w, fit.base.train_rms_w);
  fmt::print("  {:<44} {:>7.1f} W (isolated {:.1f}, trains {:.1f})\n",
             fmt::format("fitted:  response {:.1f} ms, averaging {:.1f} ms", fit.response_s * 1e3,
                         fit.average_s * 1e3),
             fit.fitted.rms_w, fit.fitted.isolated_rms_w, fit.fitted.train_rms_w);
  fmt::print("  responses within 2 % of the fit's RMS: {:.1f} .. {:.1f} ms\n", fit.response_low_s * 1e3,
             fit.response_high_s * 1e3);
  print_raise_response(probe, gpu, fit);
  // The first of the longest isolated bursts, measured and replayed sample by sample.
  const calibrate::ProbeBurst* longest = nullptr;
  for (const calibrate::ProbeBurst& burst : probe.bursts) {
    if (burst.phase == "isolated" && (longest == nullptr || burst.target_ms > longest->target_ms))
      longest = &burst;
  }
  if (longest == nullptr) return;
  std::vector<std::string> measured, replayed;
  for (std::size_t index = 0; index < probe.samples.size(); ++index) {
    const store::Sample& sample = probe.samples[index];
    if (sample.t_ns <= longest->begin_ns || sample.t_ns > longest->end_ns) continue;
    measured.push_back(fmt::format("{:.0f}", sample.value));
    replayed.push_back(fmt::format("{:.0f}", fit.fitted.simulated_w[index]));
  }
  fmt::print("first {:.0f} ms burst, measured: {}\n", longest->target_ms, fmt::join(measured, " "));
  fmt::print("first {:.0f} ms burst, replayed: {}\n", longest->target_ms, fmt::join(replayed, " "));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_controller_probe RUN_DIR [CLUSTER]\n");
    return 2;
  }
  const std::filesystem::path run_dir = argv[1];
  const std::string cluster_name = argc > 2 ? argv[2] : "h100-hgx-calibrated";
  const sim::GpuSpec gpu = sim::load_cluster(cluster_name).gpu;
  calibrate::ProbeRun probe;
  try {
    probe = calibrate::load_probe_run(run_dir, gpu);
  } catch (const InputError& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  const std::vector<store::Sample>& samples = probe.samples;
  const std::vector<calibrate::ProbeBurst>& bursts = probe.bursts;
  const double window_ns = gpu.power_control.sample_window_s * 1e9;
  fmt::print(
      "# run {}; cluster {}: response {:.1f} ms (raising {:.1f} ms), averaging {:.1f} ms, limit {:.0f} W\n",
      run_dir.string(), cluster_name, gpu.power_control.response_s * 1e3,
      sim::raise_response_ms(gpu.power_control), gpu.power_control.average_s * 1e3, gpu.power_limit_w);
  std::map<double, std::vector<double>> measured;  // isolated bursts: target ms -> per-burst peak
  double gap_ms = 400;
  for (const calibrate::ProbeBurst& burst : bursts) {
    if (burst.phase != "isolated") continue;
    measured[burst.target_ms].push_back(burst_peak_w(samples, burst, window_ns));
    gap_ms = burst.gap_ms;
  }
  fmt::print("{:>9} {:>6} {:>15} {:>15} {:>15} {:>8}\n", "burst ms", "n", "measured med W", "measured max W",
             "simulated W", "error");
  for (auto& [target_ms, peaks] : measured) {
    std::sort(peaks.begin(), peaks.end());
    const double median_w = peaks[peaks.size() / 2];
    const double simulated_w = simulate_burst(gpu, target_ms / 1e3, gap_ms / 1e3).peak_w;
    fmt::print("{:>9.0f} {:>6} {:>15.0f} {:>15.0f} {:>15.0f} {:>+7.1f}%\n", target_ms, peaks.size(), median_w,
               peaks.back(), simulated_w, (simulated_w / peaks.back() - 1) * 100);
  }
  if (measured.empty()) return 0;
  // The longest isolated burst, sample by sample from its start: how long the GPU runs above the cap and
  // where it settles.
  const double longest_ms = measured.rbegin()->first;
  const auto first = std::find_if(bursts.begin(), bursts.end(), [&](const calibrate::ProbeBurst& burst) {
    return burst.phase == "isolated" && burst.target_ms == longest_ms;
  });
  std::vector<std::string> cells;
  for (const store::Sample& sample : samples) {
    if (sample.t_ns > first->begin_ns && sample.t_ns <= first->end_ns + window_ns)
      cells.push_back(fmt::format("{:.0f}", sample.value));
  }
  fmt::print("measured {:.0f} ms burst, 20 ms samples: {}\n", longest_ms, fmt::join(cells, " "));
  const sim::PowerTrace trace = simulate_burst(gpu, longest_ms / 1e3, gap_ms / 1e3);
  cells.clear();
  for (float sample_w : trace.sample_w) {
    if (sample_w > gpu.idle_power_w + 50) cells.push_back(fmt::format("{:.0f}", sample_w));
  }
  fmt::print("simulated {:.0f} ms burst, 20 ms samples: {}\n", longest_ms, fmt::join(cells, " "));
  print_replays(probe, gpu);
  return 0;
}
