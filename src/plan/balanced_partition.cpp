#include "plan/balanced_partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/cost_model.h"

namespace calo::plan {

StageCompute stage_compute(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  const int stages = graph.layout.pp;
  StageCompute compute{std::vector<double>(stages, 0.0), std::vector<double>(stages, 0.0)};
  std::vector<bool> seen(stages, false);
  for (const graph::RankProgram& program : graph.programs) {
    if (seen[program.stage]) continue;  // the programs of one stage differ by expert slice at most
    seen[program.stage] = true;
    for (const graph::Op& op : program.ops) {
      if (op.stream != graph::Stream::kCompute || op.kind == graph::OpKind::kCollective ||
          op.kind == graph::OpKind::kSend || op.kind == graph::OpKind::kRecv)
        continue;
      const double duration_s = sim::compute_cost(cluster.gpu, op).duration_s(1.0, 1.0);
      (op.layer >= 0 ? compute.layers_s : compute.extra_s)[program.stage] += duration_s;
    }
  }
  return compute;
}

std::vector<int> balanced_layers(const graph::Graph& graph, const sim::ClusterSpec& cluster) {
  const parallel::Layout& layout = graph.layout;
  if (layout.pp < 2 || layout.virtual_stages > 1) return {};
  const StageCompute compute = stage_compute(graph, cluster);
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
