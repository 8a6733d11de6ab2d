#include "plan/partition.h"

#include <fmt/format.h>

#include <functional>

#include "core/error.h"
#include "graph/graph.h"
#include "parallel/validate.h"
#include "plan/layout_space.h"
#ifdef CALO_SIM_HAS_STORE
#include "store/run_store.h"
#include "store/summary.h"
#endif

namespace calo::plan {
namespace {

constexpr double kTemperatureSlackC = 1e-6;

std::vector<int> uniform_layers(int layers, int stages) {
  std::vector<int> result(stages, layers / stages);
  // The remainder goes to the middle stages (the first holds the embedding, the last the output layer).
  for (int extra = 0; extra < layers % stages; ++extra) result[1 + extra % std::max(1, stages - 2)] += 1;
  return result;
}

/// True when `candidate` is admissible (fits, not hotter than `reference`) and faster than `incumbent`.
bool better(const PartitionFigures& candidate, const PartitionFigures& incumbent,
            const PartitionFigures& reference) {
  return candidate.fits && candidate.max_die_c <= reference.max_die_c + kTemperatureSlackC &&
         candidate.iteration_s < incumbent.iteration_s;
}

}  // namespace

PartitionFigures simulate_partition(const PartitionRequest& request,
                                    const std::vector<int>& layers_per_stage) {
  parallel::Layout layout = request.layout;
  layout.layers_per_stage = layers_per_stage;
  layout = parallel::resolve_layout(request.model, layout, true);
  PartitionFigures figures;
  figures.layers_per_stage = layers_per_stage;
  figures.fits =
      fits_memory(parallel::memory_per_gpu(request.model, layout), request.cluster.gpu.memory_bytes);
  const sim::SimResult result =
      sim::simulate(graph::build_graph(request.model, layout), request.cluster, request.options);
  figures.iteration_s = result.iteration_s;
  for (const sim::GpuResult& gpu : result.gpus)
    figures.max_die_c = std::max(figures.max_die_c, gpu.max_die_c);
  return figures;
}

PartitionResult plan_partition(const PartitionRequest& request) {
  const int stages = request.layout.pp;
  require_input(stages >= 2, fmt::format("--pp {}: a pipeline partition needs pp >= 2", stages));
  require_input(
      request.layout.virtual_stages == 1,
      "--vpp: the partition search covers one chunk per stage; drop --vpp / --schedule interleaved");
  const int layers = request.model.num_layers;
  PartitionResult result;
  result.uniform = simulate_partition(request, uniform_layers(layers, stages));
  ++result.simulated;
  if (stages % 2 == 0 && layers / stages >= 2) {
    std::vector<int> even_odd = uniform_layers(layers, stages);
    for (int stage = 0; stage < stages; ++stage) even_odd[stage] += stage % 2 == 0 ? 1 : -1;
    result.even_odd = simulate_partition(request, even_odd);
    ++result.simulated;
  }
  result.best = result.uniform;
  while (true) {
    PartitionFigures step_best = result.best;
    for (int amount : {1, 2}) {
      for (int from = 0; from < stages; ++from) {
        if (result.best.layers_per_stage[from] - amount < 1) continue;
        for (int to = 0; to < stages; ++to) {
          if (to == from) continue;
          std::vector<int> moved = result.best.layers_per_stage;
          moved[from] -= amount;
          moved[to] += amount;
          const PartitionFigures figures = simulate_partition(request, moved);
          ++result.simulated;
          if (better(figures, step_best, result.uniform)) step_best = figures;
        }
      }
    }
    if (step_best.layers_per_stage == result.best.layers_per_stage) break;
    result.best = step_best;
  }
  return result;
}

PartitionFigures exhaustive_partition(const PartitionRequest& request, int max_deviation) {
  const int stages = request.layout.pp;
  const int layers = request.model.num_layers;
  const std::vector<int> uniform = uniform_layers(layers, stages);
  const PartitionFigures reference = simulate_partition(request, uniform);
  PartitionFigures best = reference;
  std::vector<int> current(stages, 0);
  std::function<void(int, int)> place = [&](int stage, int remaining) {
    if (stage == stages - 1) {
      if (remaining < 1 || std::abs(remaining - uniform[stage]) > max_deviation) return;
      current[stage] = remaining;
      const PartitionFigures figures = simulate_partition(request, current);
      if (better(figures, best, reference)) best = figures;
      return;
    }
    for (int count = std::max(1, uniform[stage] - max_deviation); count <= uniform[stage] + max_deviation;
         ++count) {
      if (count > remaining - (stages - 1 - stage)) break;
      current[stage] = count;
      place(stage + 1, remaining - count);
    }
  };
  place(0, layers);
  return best;
}

#ifdef CALO_SIM_HAS_STORE
GpuConditions conditions_from_run(const std::string& run_dir, int world) {
  const store::RunReader reader(run_dir);
  const store::RunInfo run = reader.run();
  const std::int64_t end_ns = run.ended_ns > run.started_ns ? run.ended_ns - run.started_ns : INT64_MAX / 2;
  std::vector<store::IntervalSummary> gpus;
  for (const store::DeviceInfo& device : reader.devices()) {
    if (device.kind != store::DeviceKind::kGpu) continue;
    gpus.push_back(store::summarize_interval(reader, device.idx, 0, end_ns, "run"));
  }
  require_input(
      static_cast<int>(gpus.size()) == world,
      fmt::format("--from {}: the run has {} GPUs but the layout has {}; give the layout the run used",
                  run_dir, gpus.size(), world));
  double fastest_mhz = 0;
  double coolest_c = INFINITY;
  for (const auto& gpu : gpus) {
    require_input(gpu.median_sm_mhz > 0 && gpu.temp_gpu_max_c > 0,
                  fmt::format("--from {}: GPU {} has no clock_sm_mhz / temp_gpu_c samples; give --slow-gpu / "
                              "--hot-gpu instead",
                              run_dir, gpu.device_idx));
    fastest_mhz = std::max(fastest_mhz, gpu.median_sm_mhz);
    coolest_c = std::min(coolest_c, gpu.temp_gpu_max_c);
  }
  GpuConditions conditions;
  for (const auto& gpu : gpus) {
    conditions.speed_factors.push_back(gpu.median_sm_mhz / fastest_mhz);
    conditions.inlet_offset_c.push_back(gpu.temp_gpu_max_c - coolest_c);
  }
  return conditions;
}
#endif

}  // namespace calo::plan
