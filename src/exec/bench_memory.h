// The figures of `calo bench --memory real`: what each rank held (exec/memory_ledger.h) against the memory
// model's figure for its stage, in the bench's report, summary text and run store (docs/METRICS.md, "Memory
// per GPU", measured).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "exec/executor.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "store/run_store.h"

namespace calo::exec {

/// One rank's figures for the ranks' exchange (after its last step): held peak (what the backend held plus
/// the state its optimizer operands already are and the operands carved out of the holds), device memory in
/// use, the ledger's serial peak, the backend's own buffers and the model's total for `stage`.
nlohmann::json rank_memory_json(Backend& backend, const Executor& executor, const model::ModelSpec& model,
                                const parallel::Layout& layout, int stage);

/// The job's report from every rank's rank_memory_json (`ranks[i]["memory_real"]`): per rank with its error
/// against the model, the rank whose error is largest (`worst`) and the rank that held the most
/// (`most_loaded`).
nlohmann::json memory_real_report(const std::vector<nlohmann::json>& ranks);

/// The summary text's lines for `report` (every rank up to 8, else the worst one).
std::string memory_real_text(const nlohmann::json& report);

/// Summary rows (scope "bench") of the rank that held the most: held peak, device in use, the model's bytes
/// for its stage, the error.
void write_memory_summary(store::RunWriter& writer, const nlohmann::json& report);

}  // namespace calo::exec
