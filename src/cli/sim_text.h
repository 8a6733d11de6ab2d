// What `calo sim` prints as text: the summary table of a simulation, its steps, its memory per GPU, the cost,
// the warnings and where the run was stored. Presentation only: the request and the run live in
// plan/sim_request.h.
#pragma once

#include "plan/sim_request.h"

namespace calo::cli {

/// Prints `run` as text: the --from line, the summary, the memory per GPU, cost, warnings and where things
/// were written.
void print_sim_text(const plan::SimRequest& request, const plan::SimRun& run);

}  // namespace calo::cli
