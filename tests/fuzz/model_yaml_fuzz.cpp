// Fuzz target: the model YAML loader (see targets.h).
#include <cstdlib>

#include "core/config.h"
#include "core/error.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"
#include "targets.h"

namespace calo::fuzz {
int model_yaml(const uint8_t* data, std::size_t size) {
  try {
    const model::ModelSpec spec =
        model::parse_model_spec(core::parse_yaml(text_of(data, size), "fuzz.yaml"), "fuzz.yaml");
    const model::ModelSpec again = model::parse_model_spec(model::to_json(spec), "round trip");
    if (model::to_json(again) != model::to_json(spec)) std::abort();  // the JSON form must round-trip
    // The graph of one GPU is built too, so a model whose graph is slow or huge to build is a finding
    // (libFuzzer's -timeout and -rss_limit_mb), as num_layers: 10000000 once was.
    graph::build_graph(spec, parallel::resolve_layout(spec, parallel::Layout{}));
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace calo::fuzz
