#include "plan/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "graph/graph.h"
#include "parallel/validate.h"
#include "plan/layout_space.h"
#include "sim/placement.h"

namespace calo::plan {
namespace {

constexpr double kTemperatureSlackC = 1e-6;

std::vector<int> uniform_layers(int layers, int stages) {
  std::vector<int> result(stages, layers / stages);
  // The remainder goes to the middle stages (the first holds the embedding, the last the output layer).
  for (int extra = 0; extra < layers % stages; ++extra) result[1 + extra % std::max(1, stages - 2)] += 1;
  return result;
}

std::vector<int> identity_order(int stages) {
  std::vector<int> order(stages);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

/// True when `candidate` is admissible (fits, not hotter than `reference`) and faster than `incumbent`.
bool better(const PartitionFigures& candidate, const PartitionFigures& incumbent,
            const PartitionFigures& reference) {
  return candidate.fits && candidate.max_die_c <= reference.max_die_c + kTemperatureSlackC &&
         candidate.iteration_s < incumbent.iteration_s;
}

}  // namespace

bool can_swap_positions(const PartitionRequest& request, int a, int b) {
  return sim::stage_move_keeps_network(request.layout, request.cluster.node.gpus, a, b);
}

PartitionFigures simulate_partition(const PartitionRequest& request, const std::vector<int>& layers_per_stage,
                                    const std::vector<int>& gpu_of_stage) {
  parallel::Layout layout = request.layout;
  layout.layers_per_stage = layers_per_stage;
  layout.stage_gpus = gpu_of_stage;
  layout = parallel::resolve_layout(request.model, layout, true);
  PartitionFigures figures;
  figures.layers_per_stage = layers_per_stage;
  figures.gpu_of_stage = gpu_of_stage.empty() ? identity_order(layout.pp) : gpu_of_stage;
  figures.fits =
      fits_memory(parallel::memory_per_gpu(request.model, layout), request.cluster.gpu.memory_bytes);
  const sim::SimResult result =
      sim::simulate(graph::build_graph(request.model, layout), request.cluster, request.options);
  figures.iteration_s = result.iteration_s;
  for (const sim::GpuResult& gpu : result.gpus)
    figures.max_die_c = std::max(figures.max_die_c, gpu.max_die_c);
  return figures;
}

namespace {

/// Every neighbour of `current` one search step away: moves of 1 or 2 layers, swaps of two stages' GPUs
/// (alone or with up to 3 layers moved between the two).
std::vector<std::pair<std::vector<int>, std::vector<int>>> neighbours(const PartitionRequest& request,
                                                                      const PartitionFigures& current) {
  const int stages = request.layout.pp;
  std::vector<std::pair<std::vector<int>, std::vector<int>>> result;
  for (int amount : {1, 2}) {
    for (int from = 0; from < stages; ++from) {
      if (current.layers_per_stage[from] - amount < 1) continue;
      for (int to = 0; to < stages; ++to) {
        if (to == from) continue;
        std::vector<int> moved = current.layers_per_stage;
        moved[from] -= amount;
        moved[to] += amount;
        result.emplace_back(moved, current.gpu_of_stage);
      }
    }
  }
  // A swap alone often lands the heavy stage on the hot GPU; a swap with up to 3 layers moved between the
  // two stages reaches what two separate steps (each worse on its own) would.
  for (int a = 0; a < stages; ++a) {
    for (int b = a + 1; b < stages; ++b) {
      if (!can_swap_positions(request, current.gpu_of_stage[a], current.gpu_of_stage[b])) continue;
      std::vector<int> order = current.gpu_of_stage;
      std::swap(order[a], order[b]);
      result.emplace_back(current.layers_per_stage, order);
      for (int amount = -3; amount <= 3; ++amount) {
        std::vector<int> moved = current.layers_per_stage;
        moved[a] -= amount;
        moved[b] += amount;
        if (amount != 0 && moved[a] >= 1 && moved[b] >= 1) result.emplace_back(moved, order);
      }
    }
  }
  return result;
}

/// Takes the best neighbour (admissible against `reference`) while it improves; counts simulations.
PartitionFigures descend(const PartitionRequest& request, PartitionFigures current,
                         const PartitionFigures& reference, int& simulated) {
  while (true) {
    PartitionFigures step_best = current;
    for (const auto& [layers_per_stage, order] : neighbours(request, current)) {
      const PartitionFigures figures = simulate_partition(request, layers_per_stage, order);
      ++simulated;
      if (better(figures, step_best, reference)) step_best = figures;
    }
    if (step_best.layers_per_stage == current.layers_per_stage &&
        step_best.gpu_of_stage == current.gpu_of_stage)
      return current;
    current = step_best;
  }
}

}  // namespace

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
  // Local search from uniform and from the even/odd split: the two starts reach different local optima (a hot
  // GPU on stage 1 of 4: from uniform 10,10,5,7 at -4 %, while even/odd alone is -8 %).
  result.best = descend(request, result.uniform, result.uniform, result.simulated);
  if (!result.even_odd.layers_per_stage.empty() && better(result.even_odd, result.uniform, result.uniform)) {
    const PartitionFigures from_even_odd =
        descend(request, result.even_odd, result.uniform, result.simulated);
    if (better(from_even_odd, result.best, result.uniform)) result.best = from_even_odd;
  }
  return result;
}

PartitionFigures exhaustive_partition(const PartitionRequest& request, int max_deviation, bool search_order) {
  const int stages = request.layout.pp;
  const int layers = request.model.num_layers;
  const std::vector<int> uniform = uniform_layers(layers, stages);
  const PartitionFigures reference = simulate_partition(request, uniform);
  PartitionFigures best = reference;
  std::vector<int> order = identity_order(stages);
  std::vector<int> current(stages, 0);
  std::function<void(int, int)> place = [&](int stage, int remaining) {
    if (stage == stages - 1) {
      if (remaining < 1 || std::abs(remaining - uniform[stage]) > max_deviation) return;
      current[stage] = remaining;
      const PartitionFigures figures = simulate_partition(request, current, order);
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
  do {
    bool allowed = true;
    for (int stage = 0; stage < stages; ++stage) allowed &= can_swap_positions(request, stage, order[stage]);
    if (allowed) place(0, layers);
  } while (search_order && std::next_permutation(order.begin(), order.end()));
  return best;
}

}  // namespace calo::plan
