#include "sim/trace_events.h"

#include <nlohmann/json.hpp>
#include <string>

#include "core/output_file.h"

namespace calo::sim {

void write_trace_events(const std::string& path, const graph::Graph& graph, const SimResult& result) {
  // Chrome/Perfetto trace-event JSON: one process per rank, one thread per stream, times in microseconds.
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < static_cast<int>(result.timeline.size()); ++rank) {
    const auto& program = graph.program(rank);
    for (int stream = 0; stream < graph::kNumStreams; ++stream) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", stream},
                        {"args", {{"name", graph::to_string(graph::Stream(stream))}}}});
    }
    for (const OpSpan& span : result.timeline[rank]) {
      const graph::Op& op = program.ops[span.op];
      events.push_back(
          {{"ph", "X"},
           {"name", graph::describe(op)},
           {"cat", graph::to_string(op.kind)},
           {"pid", rank},
           {"tid", static_cast<int>(op.stream)},
           {"ts", span.begin_s * 1e6},
           {"dur", (span.end_s - span.begin_s) * 1e6},
           {"args",
            {{"microbatch", op.microbatch}, {"layer", op.layer}, {"phase", graph::to_string(op.phase)}}}});
    }
  }
  core::write_file_atomically(
      path, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n", "--timeline");
}

}  // namespace calo::sim
