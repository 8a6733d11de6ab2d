#include "plan/gpu_conditions.h"

#ifdef CALO_SIM_HAS_STORE
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "analyze/breakdown.h"
#include "analyze/kernel_category.h"
#include "core/error.h"
#include "graph/graph.h"
#include "parallel/validate.h"
#include "store/run_store.h"
#include "store/summary.h"

namespace calo::plan {
namespace {

/// Most steps the reference simulation runs (a long recorded job's temperatures settle well before).
constexpr int kMaxReferenceSteps = 200;

/// Each GPU of the run over the whole run, by device idx (empty figures for `world` GPUs when the run has
/// none); InputError when it has another number.
std::vector<store::IntervalSummary> gpu_summaries(const store::RunReader& reader, const std::string& run_dir,
                                                  int world) {
  const store::RunInfo run = reader.run();
  const std::int64_t end_ns = run.ended_ns > run.started_ns ? run.ended_ns - run.started_ns : INT64_MAX / 2;
  std::vector<store::IntervalSummary> gpus;
  for (const store::DeviceInfo& device : reader.devices()) {
    if (device.kind != store::DeviceKind::kGpu) continue;
    gpus.push_back(store::summarize_interval(reader, device.idx, 0, end_ns, "run"));
  }
  if (gpus.empty()) {  // a run on CPU ranks: its op spans may still say each rank's speed
    for (int gpu = 0; gpu < world; ++gpu) gpus.push_back({.label = "run", .device_idx = gpu});
    return gpus;
  }
  require_input(
      static_cast<int>(gpus.size()) == world,
      fmt::format("--from {}: the run has {} GPUs but the layout has {}; give the layout the run used",
                  run_dir, gpus.size(), world));
  return gpus;
}

/// The request's layout with the stage -> GPU order the run ran under (a bench run keeps it in its config).
parallel::Layout layout_as_run(const store::RunReader& reader, const PartitionRequest& request) {
  parallel::Layout layout = request.layout;
  const auto config = nlohmann::json::parse(reader.run().config_json, nullptr, false);
  if (config.is_object() && config.contains("layout") && config["layout"].is_object()) {
    const std::vector<int> order = config["layout"].value("stage_gpus", std::vector<int>{});
    if (static_cast<int>(order.size()) == layout.pp) layout.stage_gpus = order;
  }
  return parallel::resolve_layout(request.model, layout, true);
}

/// Whether a span is compute work: an op on the compute stream (calo bench --trace-ops, calo sim) or a
/// compute kernel (an ingested trace).
bool is_compute(const store::Span& span) {
  if (span.kind == store::SpanKind::kOp) return span.category == "compute";
  const auto category = analyze::parse_kernel_category(span.category);
  return category.has_value() && !analyze::is_comm(*category);
}

/// Per rank the time its compute spans cover outside the warm-up steps `steps` names (the run's step spans),
/// as a union so overlapping kernels count once; from op spans or, without them, kernel spans (`kind` says
/// which). A rank without spans is left 0.
std::vector<double> compute_time_per_rank_s(const store::RunReader& reader,
                                            const std::vector<store::Span>& steps, int world,
                                            std::string& kind) {
  std::set<std::int64_t> warmup_steps;
  for (const store::Span& span : steps)
    if (span.name == "warmup") warmup_steps.insert(span.step);
  std::vector<store::Span> spans = reader.spans(store::SpanKind::kOp);
  kind = "op";
  if (spans.empty()) spans = reader.spans(store::SpanKind::kKernel), kind = "kernel";
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> intervals(world);
  for (const store::Span& span : spans) {
    if (span.rank < 0 || span.rank >= world || !is_compute(span) || warmup_steps.count(span.step) > 0)
      continue;
    intervals[span.rank].emplace_back(span.t_begin_ns, span.t_end_ns);
  }
  std::vector<double> seconds(world, 0.0);
  for (int rank = 0; rank < world; ++rank) {
    for (const auto& [begin, end] : analyze::interval_union(std::move(intervals[rank])))
      seconds[rank] += static_cast<double>(end - begin) * 1e-9;
  }
  return seconds;
}

/// Steps the run measured, warm-up included (step spans), within [1, kMaxReferenceSteps]; else the request's.
int run_steps(const std::vector<store::Span>& step_spans, int fallback) {
  int steps = 0;
  for (const store::Span& span : step_spans)
    steps += span.rank == store::kNone && (span.name == "step" || span.name == "warmup");
  return std::clamp(steps > 0 ? steps : fallback, 1, kMaxReferenceSteps);
}

/// The job as the run ran it at nominal speed with `inlet_offset_c` (by GPU): what the simulator expects.
sim::SimResult reference(const PartitionRequest& request, const parallel::Layout& layout, int steps,
                         const std::vector<double>& inlet_offset_c) {
  sim::SimOptions options;
  options.steps = steps;
  options.inlet_offset_c = inlet_offset_c;
  options.power_limit_w = request.options.power_limit_w;
  options.max_clock_mhz = request.options.max_clock_mhz;
  return sim::simulate(graph::build_graph(request.model, layout), request.cluster, options);
}

/// Extra inlet per GPU: its hottest temperature less what the simulator predicts at its load, the coolest
/// such residual 0 (a GPU that runs the heavy stage is hot from its work, not from its air).
std::vector<double> heat_from_temperatures(const std::vector<store::IntervalSummary>& gpus,
                                           const parallel::Layout& layout, const sim::SimResult& predicted) {
  const int world = static_cast<int>(gpus.size());
  std::vector<double> residual(world, 0.0);
  for (int rank = 0; rank < world; ++rank) {
    const int gpu = layout.gpu_of_rank(rank);
    residual[gpu] = gpus[gpu].temp_gpu_max_c - predicted.gpus[rank].max_die_c;
  }
  const double coolest = *std::min_element(residual.begin(), residual.end());
  for (double& value : residual) value -= coolest;
  return residual;
}

/// Mean SM clock of each rank over the simulated steps.
std::vector<double> mean_clock_per_rank_mhz(const sim::SimResult& result) {
  std::vector<double> mean_mhz(result.world, 0.0);
  for (int step = 0; step < result.steps; ++step) {
    for (int rank = 0; rank < result.world; ++rank)
      mean_mhz[rank] += result.clock_mhz[static_cast<std::size_t>(step) * result.world + rank] / result.steps;
  }
  return mean_mhz;
}

/// Speed per GPU from the compute time each rank took against the simulator's prediction for its ops, both
/// in clock cycles where the run has clocks: a GPU held at a lower clock by power or heat is not slower per
/// cycle, and the simulator lowers its clock again from the power and heat it models.
void speed_from_work(const std::vector<double>& measured_s, const std::vector<store::IntervalSummary>& gpus,
                     const parallel::Layout& layout, const sim::SimResult& predicted,
                     GpuConditions& conditions) {
  const int world = static_cast<int>(measured_s.size());
  const std::vector<double> predicted_mhz = mean_clock_per_rank_mhz(predicted);
  conditions.work_ratio.assign(world, 1.0);
  for (int rank = 0; rank < world; ++rank) {
    const int gpu = layout.gpu_of_rank(rank);
    const double measured_mhz = gpus[gpu].median_sm_mhz;
    const double clocks = std::isfinite(measured_mhz) && measured_mhz > 0 && predicted_mhz[rank] > 0
                              ? measured_mhz / predicted_mhz[rank]
                              : 1.0;
    conditions.work_ratio[gpu] = measured_s[rank] * clocks / predicted.gpus[rank].busy_s;
  }
  const double fastest = *std::min_element(conditions.work_ratio.begin(), conditions.work_ratio.end());
  conditions.speed_factors.clear();
  for (double ratio : conditions.work_ratio) conditions.speed_factors.push_back(fastest / ratio);
}

/// Speed per GPU from its median SM clock against the fastest GPU's (clocks mix a GPU's load with its speed).
void speed_from_clocks(const std::vector<store::IntervalSummary>& gpus, const std::string& run_dir,
                       GpuConditions& conditions) {
  double fastest_mhz = 0;
  for (const auto& gpu : gpus) {
    require_input(
        gpu.median_sm_mhz > 0,
        fmt::format("--from {}: GPU {} has neither op spans nor clock_sm_mhz samples; bench it with "
                    "--trace-ops, or give --slow-gpu instead",
                    run_dir, gpu.device_idx));
    fastest_mhz = std::max(fastest_mhz, gpu.median_sm_mhz);
  }
  for (const auto& gpu : gpus) conditions.speed_factors.push_back(gpu.median_sm_mhz / fastest_mhz);
}

}  // namespace

GpuConditions conditions_from_run(const std::string& run_dir, const PartitionRequest& request) {
  const int world = request.layout.world_size();
  const store::RunReader reader(run_dir);
  const std::vector<store::IntervalSummary> gpus = gpu_summaries(reader, run_dir, world);
  const parallel::Layout layout = layout_as_run(reader, request);
  const std::vector<store::Span> step_spans = reader.spans(store::SpanKind::kStep);  // read once, used twice
  const int steps = run_steps(step_spans, request.options.steps);
  GpuConditions conditions;
  conditions.inlet_offset_c.assign(world, 0.0);
  sim::SimResult predicted = reference(request, layout, steps, conditions.inlet_offset_c);
  const bool have_temperatures =
      std::all_of(gpus.begin(), gpus.end(), [](const auto& gpu) { return gpu.temp_gpu_max_c > 0; });
  if (have_temperatures) {
    conditions.inlet_offset_c = heat_from_temperatures(gpus, layout, predicted);
    predicted = reference(request, layout, steps, conditions.inlet_offset_c);
    conditions.heat_source = fmt::format(
        "each GPU's hottest temperature less the simulator's prediction at its load over {} steps", steps);
  } else {
    conditions.heat_source = "none: the run has no temp_gpu_c samples (no extra heat assumed)";
  }
  std::string kind;
  const std::vector<double> measured_s = compute_time_per_rank_s(reader, step_spans, world, kind);
  const int ranks_with_work = static_cast<int>(
      std::count_if(measured_s.begin(), measured_s.end(), [](double seconds) { return seconds > 0; }));
  if (ranks_with_work == world) {
    speed_from_work(measured_s, gpus, layout, predicted, conditions);
    conditions.speed_source = fmt::format(
        "the compute time of each rank's {} spans against the simulator's prediction for its ops, in SM "
        "clock cycles where the run has clocks: a heavy stage is not a slow GPU",
        kind);
  } else {
    speed_from_clocks(gpus, run_dir, conditions);
    conditions.speed_source =
        ranks_with_work == 0
            ? "median SM clock / the fastest GPU's (the run has no op spans: bench with --trace-ops to tell "
              "a "
              "slow GPU from a heavy stage)"
            : fmt::format(
                  "median SM clock / the fastest GPU's (op spans cover {} of {} ranks: calo sim "
                  "stores all with --op-spans all)",
                  ranks_with_work, world);
  }
  return conditions;
}

}  // namespace calo::plan
#endif
