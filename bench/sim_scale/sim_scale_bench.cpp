// Simulator scale benchmark: wall time and peak RSS of `calo sim`'s library path (graph build + simulate) for
// GPT3-175B, tp=8, 24 micro-batches per pipeline, from 8 to 8192 H200s, each in a forked child so its peak
// RSS is its own; then every 4-GPU layout of Llama3-8B. Results are checked (positive step time, 0 < MFU < 1,
// power under the cap, heterogeneous >= homogeneous step time). Usage: bench_sim_scale [--quick] [--cluster
// NAME|FILE]
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "../common/run_in_child.h"
#include "core/table.h"
#include "graph/graph.h"
#include "parallel/validate.h"
#include "sim/simulate.h"

namespace {

using calo::sim::SimOptions;
using calo::sim::SimResult;

struct ScaleConfig {
  int tp, pp, dp;
};

/// What a child reports through its pipe.
struct ScaleResult {
  double graph_s = 0;       // build_graph
  double one_step_s = 0;    // simulate, 1 step, power cap + thermal
  double hundred_s = 0;     // simulate, 100 steps, power cap + thermal, homogeneous cluster
  double hetero_s = 0;      // simulate, 100 steps, every GPU its own random speed factor
  double peak_rss_mib = 0;  // high-water mark of the child
  double iteration_s = 0;   // simulated step time (1 step)
  double hetero_iteration_s = 0;
  double mfu = 0;
  double max_power_w = 0;
  long long op_events_one = 0;  // engine op events of the 1-step run
  int classes_hetero = 0;       // replica classes in the heterogeneous run
  int ok = 0;
};

/// CPU seconds of this process (the simulator is single-threaded; CPU time is robust on a shared machine).
double cpu_now_s() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

double seconds_since(double start_cpu_s) {
  return cpu_now_s() - start_cpu_s;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

calo::graph::Graph build(const std::string& model_name, calo::parallel::Layout layout) {
  const auto spec = calo::model::load_model(model_name);
  return calo::graph::build_graph(spec, calo::parallel::resolve_layout(spec, layout));
}

/// The cluster of the scale runs: h200-hgx, or the file given with --cluster (e.g. a calibrated one).
std::string g_cluster = "h200-hgx";

ScaleResult measure_scale(const ScaleConfig& config, bool quick) {
  ScaleResult result;
  const auto cluster = calo::sim::load_cluster(g_cluster);
  calo::parallel::Layout layout;
  layout.tp = config.tp;
  layout.pp = config.pp;
  layout.dp = config.dp;
  layout.micro_batch = 1;
  layout.global_batch = 24 * config.dp;  // 24 micro-batches per pipeline; 1536 at dp = 64
  double start = cpu_now_s();
  const auto graph = build("gpt3-175b", layout);
  result.graph_s = seconds_since(start);
  SimOptions options;
  start = cpu_now_s();
  const SimResult one = calo::sim::simulate(graph, cluster, options);
  result.one_step_s = seconds_since(start);
  result.iteration_s = one.iteration_s;
  result.mfu = calo::sim::mfu(one);
  result.op_events_one = static_cast<long long>(one.op_events);
  options.steps = quick ? 10 : 100;
  start = cpu_now_s();
  const SimResult hundred = calo::sim::simulate(graph, cluster, options);
  result.hundred_s = seconds_since(start);
  for (float power : hundred.power_w)
    result.max_power_w = std::max(result.max_power_w, static_cast<double>(power));
  std::mt19937 random(42);
  std::uniform_real_distribution<double> speed(0.9, 1.0);
  options.speed_factors.resize(graph.world_size());
  for (double& factor : options.speed_factors) factor = speed(random);
  start = cpu_now_s();
  const SimResult hetero = calo::sim::simulate(graph, cluster, options);
  result.hetero_s = seconds_since(start);
  result.hetero_iteration_s = hetero.iteration_s;
  result.classes_hetero = hetero.step_results.back().replica_classes;
  result.peak_rss_mib = peak_rss_mib();
  result.ok = result.iteration_s > 0 && result.mfu > 0 && result.mfu < 1 &&
              result.max_power_w <= cluster.gpu.power_limit_w + 1e-6 &&
              result.hetero_iteration_s >= hundred.iteration_s;
  return result;
}

ScaleResult measure_in_child(const ScaleConfig& config, bool quick) {
  const std::string label = "tp" + std::to_string(config.tp) + " pp" + std::to_string(config.pp) + " dp" +
                            std::to_string(config.dp);
  return calo::bench::run_in_child(label.c_str(), [&] { return measure_scale(config, quick); })
      .value_or(ScaleResult{});  // ok = 0
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int index = 1; index < argc; ++index) {
    const std::string argument = argv[index];
    if (argument == "--quick") quick = true;
    if (argument == "--cluster" && index + 1 < argc) g_cluster = argv[++index];
  }
  const int steps = quick ? 10 : 100;
  fmt::print("# bench_sim_scale: calo::sim::simulate CPU time (one thread) and peak RSS\n");
  fmt::print(
      "# model gpt3-175b, cluster {} (8 GPUs/node), tp=8, mbs 1, 24 micro-batches per pipeline (gbs = 24 "
      "dp), "
      "1f1b\n",
      g_cluster);
  fmt::print(
      "# columns: graph = build_graph; 1 step = simulate with power cap + thermal; {} steps = same, "
      "homogeneous; hetero = {} steps with a random speed factor in [0.9, 1] per GPU\n",
      steps, steps);
  const std::vector<ScaleConfig> configs = {{8, 1, 1}, {8, 16, 1}, {8, 16, 4}, {8, 16, 16}, {8, 16, 64}};
  calo::core::TextTable table({"gpus", "tp-pp-dp", "graph", "1 step", fmt::format("{} steps", steps),
                               "hetero", "classes", "op events", "peak RSS", "iteration", "MFU", "ok"});
  table.set_units({"", "", "s", "s", "s", "s", "", "(1 step)", "MiB", "s (sim)", "%", ""});
  int failures = 0;
  ScaleResult headline;
  for (const auto& config : configs) {
    const ScaleResult result = measure_in_child(config, quick);
    failures += result.ok ? 0 : 1;
    const int gpus = config.tp * config.pp * config.dp;
    table.add_row({std::to_string(gpus), fmt::format("{}-{}-{}", config.tp, config.pp, config.dp),
                   fmt::format("{:.3f}", result.graph_s), fmt::format("{:.4f}", result.one_step_s),
                   fmt::format("{:.3f}", result.hundred_s), fmt::format("{:.3f}", result.hetero_s),
                   std::to_string(result.classes_hetero), std::to_string(result.op_events_one),
                   fmt::format("{:.0f}", result.peak_rss_mib), fmt::format("{:.3f}", result.iteration_s),
                   fmt::format("{:.1f}", 100 * result.mfu), result.ok ? "yes" : "NO"});
    if (gpus == 8192) headline = result;
  }
  fmt::print("{}", table.render());

  // Every 4-GPU layout of Llama3-8B (mbs 1, gbs 16), with and without overlap and full recompute.
  calo::core::TextTable small({"layout", "graph", "simulate", "iteration", "MFU"});
  small.set_units({"", "ms", "ms", "s (sim)", "%"});
  const auto cluster4 = calo::sim::load_cluster("h200x4-nvswitch");
  double worst_sim_ms = 0;
  for (int tp : {1, 2, 4}) {
    for (int pp : {1, 2, 4}) {
      if (tp * pp > 4) continue;
      for (int variant = 0; variant < 2; ++variant) {
        calo::parallel::Layout layout;
        layout.tp = tp;
        layout.pp = pp;
        layout.dp = 4 / (tp * pp);
        layout.micro_batch = 1;
        layout.global_batch = 16;
        if (variant == 1) {
          layout.overlap_tp_comm = layout.overlap_grad_reduce = true;
          layout.recompute = calo::parallel::Recompute::kFull;
        }
        double start = cpu_now_s();
        const auto graph = build("llama3-8b", layout);
        const double graph_ms = seconds_since(start) * 1e3;
        std::vector<double> times;
        SimResult result;
        for (int repeat = 0; repeat < 5; ++repeat) {
          start = cpu_now_s();
          result = calo::sim::simulate(graph, cluster4, {});
          times.push_back(seconds_since(start) * 1e3);
        }
        std::sort(times.begin(), times.end());
        worst_sim_ms = std::max(worst_sim_ms, times[2]);
        if (!(result.iteration_s > 0 && calo::sim::mfu(result) < 1)) failures += 1;
        small.add_row(
            {fmt::format("tp{} pp{} dp{}{}", tp, pp, layout.dp, variant ? " overlap+recompute" : ""),
             fmt::format("{:.2f}", graph_ms), fmt::format("{:.2f}", times[2]),
             fmt::format("{:.3f}", result.iteration_s), fmt::format("{:.1f}", 100 * calo::sim::mfu(result))});
      }
    }
  }
  fmt::print("# every 4-GPU layout of llama3-8b on h200x4-nvswitch (median of 5 simulate calls, 1 step)\n{}",
             small.render());
  fmt::print("# failures: {}\n", failures);
  fmt::print(
      "headline: 8192 GPUs: 1 step {:.3f} s, {} steps with thermal {:.3f} s, peak RSS {:.0f} MiB; worst "
      "4-GPU layout {:.2f} ms\n",
      headline.one_step_s, steps, headline.hundred_s, headline.peak_rss_mib, worst_sim_ms);
  return failures == 0 ? 0 : 1;
}
