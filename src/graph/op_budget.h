#pragma once
// How many ops a graph would hold, known before it is built, and the limit one graph may reach.

#include <cstdint>

#include "graph/graph.h"

namespace calo::graph {

/// Most ops one graph may hold, all programs together: `calo sim` keeps ~0.23 KB per op (the graph and the
/// engine) and ~0.3 KB storing the run with its op spans, so ~1.75 GB at the limit
/// (docs/benchmarks/op-budget.md).
inline constexpr std::int64_t kMaxGraphOps = 5'000'000;

/// Bytes per op a refusal quotes for a graph's memory: the measured ~0.3 KB of a stored run, rounded up.
inline constexpr double kStoredBytesPerOp = 400.0;

/// The ops build_graph would emit for `model` under the resolved `layout`, from four small graphs (a 1- and
/// 2-layer slice at 1 and 2 micro-batches, without pipeline) scaled to the layout's layers and micro-batches,
/// plus the pipeline's sends and receives; within a few per cent, never far below (tests/graph).
std::int64_t estimated_op_count(const model::ModelSpec& model, const parallel::Layout& layout,
                                const GraphOptions& options = {});

/// The estimated_op_count of the layout's graph; throws InputError naming the layout's layers and
/// micro-batches, and how to shrink them, when it exceeds kMaxGraphOps.
std::int64_t check_op_budget(const model::ModelSpec& model, const parallel::Layout& layout,
                             const GraphOptions& options = {});

}  // namespace calo::graph
