// Fuzz target: step-marker lines, socket protocol and output-line patterns (see targets.h).
#include <cstdlib>
#include <sstream>

#include "targets.h"
#include "telemetry/markers.h"

namespace calo::fuzz {
int marker_lines(const uint8_t* data, std::size_t size) {
  static const telemetry::LinePattern megatron("megatron");
  static const telemetry::LinePattern torchtitan("torchtitan");
  std::vector<telemetry::MarkerSpan> spans;
  telemetry::StepSourceFilter filter([&](const telemetry::MarkerSpan& span) { spans.push_back(span); }, 5);
  telemetry::SpanAssembler assembler([&](const telemetry::MarkerSpan& span) { filter.offer(span); });
  std::istringstream stream(text_of(data, size));
  int64_t now_ns = 1'000'000'000'000'000;  // 11 days of uptime
  for (std::string line; std::getline(stream, line); now_ns += 1'000) {
    std::string error;
    if (auto command = telemetry::parse_marker_line(line, &error)) {
      assembler.apply(*command, now_ns, "socket");
    } else if (error.empty()) {
      std::abort();  // a rejected line must say why
    }
    for (const auto* pattern : {&megatron, &torchtitan}) {
      if (auto step = pattern->match(line))
        assembler.log_step(step->first, now_ns, step->second, pattern->kind());
    }
  }
  assembler.close_all(now_ns);
  filter.finish();
  for (const auto& span : spans) {
    if (span.t_end_ns < span.t_begin_ns) std::abort();  // no span may end before it begins
  }
  return 0;
}

}  // namespace calo::fuzz
