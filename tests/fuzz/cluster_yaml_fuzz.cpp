// Fuzz target: the cluster YAML loader (see targets.h).
#include <cstdlib>

#include "core/config.h"
#include "core/error.h"
#include "sim/cluster.h"
#include "targets.h"

namespace calo::fuzz {
int cluster_yaml(const uint8_t* data, std::size_t size) {
  try {
    const sim::ClusterSpec cluster =
        sim::parse_cluster(core::parse_yaml(text_of(data, size), "fuzz.yaml"), "fuzz.yaml");
    const sim::ClusterSpec again = sim::parse_cluster(sim::to_json(cluster), "round trip");
    if (sim::to_json(again) != sim::to_json(cluster)) std::abort();
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace calo::fuzz
