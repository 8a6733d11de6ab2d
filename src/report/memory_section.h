// The report's memory section: the memory model's per-GPU breakdown of a run that names its job (calo bench,
// calo sim), beside the peak the run's GPUs measured (NVML/AMD SMI `mem_used_bytes`) where it recorded one.
#pragma once

#include <string>

#include "analyze/metrics.h"

namespace calo::report {

/// The run's "Memory per GPU" section (a stacked bar and a table, predicted vs measured with the error, and a
/// note with the `InputError`'s message where the run's stored model and layout no longer resolve); "" when
/// the run names no model and layout and measured no GPU memory.
std::string memory_section(const analyze::RunAnalysis& run, const std::string& prefix);

/// The verdict's line for a simulated run whose job the memory model does not fit on its cluster's GPU (as
/// `calo sim --allow-oom` runs it): the total against the usable memory and the card; "" when it fits or the
/// run stores no job or cluster.
std::string memory_verdict(const analyze::RunAnalysis& run);

}  // namespace calo::report
