// Fuzz target: the cluster YAML loader (see targets.h).
#include <cstdlib>

#include "core/config.h"
#include "core/error.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "sim/cluster.h"
#include "sim/simulate.h"
#include "targets.h"

namespace calo::fuzz {
int cluster_yaml(const uint8_t* data, std::size_t size) {
  try {
    const sim::ClusterSpec cluster =
        sim::parse_cluster(core::parse_yaml(text_of(data, size), "fuzz.yaml"), "fuzz.yaml");
    const sim::ClusterSpec again = sim::parse_cluster(sim::to_json(cluster), "round trip");
    if (sim::to_json(again) != sim::to_json(cluster)) std::abort();
    // The work the cluster causes is bounded too: one step of the tiny model on two of its GPUs (libFuzzer's
    // -timeout and -rss_limit_mb make a slow or hungry cluster a finding, as 1e-12 TFLOPS once was).
    static const model::ModelSpec tiny = model::load_model("tiny-dense");
    parallel::Layout layout;
    layout.dp = 2;
    const graph::Graph graph = graph::build_graph(tiny, parallel::resolve_layout(tiny, layout));
    sim::SimOptions options;
    options.steps = 1;
    sim::simulate(graph, cluster, options);
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace calo::fuzz
