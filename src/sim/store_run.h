// Stores a simulation as a run of kind "sim" in the run store, so reports and comparisons treat it like a
// measured run: one device per simulated GPU, per-step samples, step spans, per-op spans, summary figures.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/simulate.h"

namespace calo::sim {

/// Writes `result` into a fresh run directory `run_dir` (created; InputError if it already holds a run).
/// `command` is the command line, `config` the settings (model, layout, cluster, options). Per-GPU samples
/// are written when world * steps <= `max_gpu_samples`, else only per-step aggregates (device -1 is not used:
/// aggregates go to the summary table). Op spans are written when the result holds a timeline.
void store_sim_run(const std::filesystem::path& run_dir, const std::string& name, const std::string& command,
                   const nlohmann::json& config, const graph::Graph& graph, const ClusterSpec& cluster,
                   const SimResult& result, long long max_gpu_samples = 2'000'000);

}  // namespace calo::sim
