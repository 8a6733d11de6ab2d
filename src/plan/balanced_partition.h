// Layers per pipeline stage that balance the stages' compute: the stage with the embedding and the one with
// the output layer and loss carry work no other stage has (a 128 K vocabulary weighs ~2.4 Llama3-8B layers),
// so equal layer counts leave one stage the bottleneck. `calo plan` ranks pipeline layouts at this partition
// when it simulates faster than the uniform one (docs/PLANNER.md, "Partitions in the layout search").
#pragma once

#include <vector>

#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"

namespace calo::plan {

/// Per pipeline stage of `graph`: the compute-stream time at the maximum clock of its ops inside transformer
/// layers (`layers_s`) and of the rest (`extra_s`: embedding, output layer, loss, optimizer).
struct StageCompute {
  std::vector<double> layers_s;  ///< by stage
  std::vector<double> extra_s;   ///< by stage
};

/// Least relief of the busiest stage's compute for which a balanced partition is tried (below it the layout's
/// uniform partition is as good within the model's error, and the search saves two graphs and a simulation).
inline constexpr double kMinBalanceGain = 0.01;

/// Whether `layout` has stages whose layers could be rebalanced: a pipeline (pp > 1) without model chunks.
inline bool balanceable(const parallel::Layout& layout) {
  return layout.pp > 1 && layout.virtual_stages == 1;
}

/// The compute of each stage of `graph` on `cluster`'s GPU (cost model, no engine).
StageCompute stage_compute(const graph::Graph& graph, const sim::ClusterSpec& cluster);

/// The same from the ops' costs already computed: `costs[i]` holds those of graph.programs[i].
StageCompute stage_compute(const graph::Graph& graph,
                           const std::vector<const std::vector<sim::ComputeCost>*>& costs);

/// Layers per stage minimising the busiest stage's compute (layers cost their mean per-layer time, each stage
/// keeps its extra work, at least one layer each); empty when that relieves the busiest stage by less than
/// kMinBalanceGain (the graph's own partition, nearly), or for layouts without pipeline (pp 1) or with model
/// chunks (vpp > 1).
std::vector<int> balanced_layers(const graph::Graph& graph, const sim::ClusterSpec& cluster);

/// The same from `layout`'s stage compute (a LayoutProbe's, without the layout's whole graph).
std::vector<int> balanced_layers(const parallel::Layout& layout, const StageCompute& compute);

}  // namespace calo::plan
