// A simulated step's per-op timeline as Chrome/Perfetto trace-event JSON (`calo sim --timeline FILE`).
#pragma once

#include <string>

#include "graph/graph.h"
#include "sim/simulate.h"

namespace calo::sim {

/// Writes `result`'s timeline of `graph` to `path` (whole or absent): one process per rank, one thread per
/// stream, times in microseconds; InputError naming --timeline when it cannot be written.
void write_trace_events(const std::string& path, const graph::Graph& graph, const SimResult& result);

}  // namespace calo::sim
