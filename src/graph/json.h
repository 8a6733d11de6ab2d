// JSON export of an execution graph for tools (shared programs, groups) and of one rank's op list.
#pragma once

#include <nlohmann/json.hpp>

#include "graph/graph.h"

namespace calo::graph {

/// One op as JSON: kind, stream, phase, chunk, layer, microbatch, flops, bytes, deps and its kind's fields
/// (gemm m/n/k/dtype/weight/pass/expert; attention shape; elementwise op; collective/group;
/// peer_stage/tag/p2p_batch).
nlohmann::json to_json(const Op& op, std::span<const std::int32_t> deps);

/// The whole graph: model, layout, options, programs (ops with deps), program_of_rank, groups.
nlohmann::json to_json(const Graph& graph);

/// One rank's materialized op list: rank, stage, program, ops with group ranks and peer ranks resolved.
nlohmann::json to_json(const Graph& graph, int rank);

}  // namespace calo::graph
