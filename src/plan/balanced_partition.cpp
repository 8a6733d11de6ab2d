#include "plan/balanced_partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/cost_model.h"

namespace calo::plan {

namespace {

/// stage_compute with op `op_index` of program `program` costing `cost(program, op_index)` at the maximum
/// clock.
template <typename CostOf>
StageCompute sum_stage_compute(const graph::Graph& graph, CostOf cost) {
  const int stages = graph.layout.pp;
  StageCompute compute{std::vector<double>(stages, 0.0), std::vector<double>(stages, 0.0)};
  std::vector<bool> seen(stages, false);
  for (std::size_t index = 0; index < graph.programs.size(); ++index) {
    const graph::RankProgram& program = graph.programs[index];
    if (seen[program.stage]) continue;  // the programs of one stage differ by expert slice at most
    seen[program.stage] = true;
    for (std::size_t op_index = 0; op_index < program.ops.size(); ++op_index) {
      const graph::Op& op = program.ops[op_index];
      if (op.stream != graph::Stream::kCompute || graph::is_communication(op.kind)) continue;
      const double duration_s = cost(index, op_index).duration_s(1.0, 1.0);
      (op.layer >= 0 ? compute.layers_s : compute.extra_s)[program.stage] += duration_s;
    }
  }
  return compute;
}

}  // namespace

StageCompute stage_compute(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  return sum_stage_compute(graph, [&](std::size_t program, std::size_t op) {
    return sim::compute_cost(cluster.gpu, graph.programs[program].ops[op]);
  });
}

StageCompute stage_compute(const graph::Graph& graph,
                           const std::vector<const std::vector<sim::ComputeCost>*>& costs) {
  return sum_stage_compute(graph, [&](std::size_t program, std::size_t op) -> const sim::ComputeCost& {
    return (*costs[program])[op];
  });
}

std::vector<int> balanced_layers(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  if (!balanceable(graph.layout)) return {};
  return balanced_layers(graph.layout, stage_compute(graph, cluster));
}

std::vector<int> balanced_layers(const parallel::Layout& layout, const StageCompute& compute) {
  if (!balanceable(layout)) return {};
  const int layers = std::accumulate(layout.layers_per_stage.begin(), layout.layers_per_stage.end(), 0);
  const double per_layer_s =
      std::accumulate(compute.layers_s.begin(), compute.layers_s.end(), 0.0) / std::max(1, layers);
  if (!(per_layer_s > 0)) return {};
  // One layer each, then every further layer to the stage that stays least busy with it (for equal items
  // this minimises the busiest stage); ties go to the earlier stage.
  std::vector<int> counts(layout.pp, 1);
  for (int layer = layout.pp; layer < layers; ++layer) {
    int lightest = 0;
    double lightest_s = INFINITY;
    for (int stage = 0; stage < layout.pp; ++stage) {
      const double with_one_more_s = (counts[stage] + 1) * per_layer_s + compute.extra_s[stage];
      if (with_one_more_s < lightest_s - 1e-12) lightest = stage, lightest_s = with_one_more_s;
    }
    ++counts[lightest];
  }
  auto busiest_s = [&](const std::vector<int>& per_stage) {
    double busiest = 0;
    for (int stage = 0; stage < layout.pp; ++stage)
      busiest = std::max(busiest, per_stage[stage] * per_layer_s + compute.extra_s[stage]);
    return busiest;
  };
  if (busiest_s(counts) > (1.0 - kMinBalanceGain) * busiest_s(layout.layers_per_stage)) return {};
  return counts;
}

}  // namespace calo::plan
