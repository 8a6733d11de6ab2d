// Fuzz target: Kineto trace ingestion, JSON and gzip (see targets.h).
#include <cstdlib>

#include "analyze/trace_ingest.h"
#include "core/error.h"
#include "targets.h"

namespace calo::fuzz {

int kineto_trace(const uint8_t* data, std::size_t size) {
  try {
    analyze::TraceData trace;
    analyze::parse_kineto_json(reinterpret_cast<const char*>(data), size, "fuzz.json", 0, trace);
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace calo::fuzz
