// `calo bench --memory real` figures (exec/bench_memory.h).
#include "exec/bench_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/table.h"
#include "parallel/memory.h"

namespace calo::exec {

nlohmann::json rank_memory_json(Backend& backend, const Executor& executor, const model::ModelSpec& model,
                                const parallel::Layout& layout, int stage) {
  const HeldMemory held = backend.held_memory();
  const std::int64_t in_operands = executor.state_in_operands_bytes();
  const std::int64_t carved = executor.operands_carved_bytes();
  return {{"stage", stage},
          {"held_peak_bytes", held.held_peak_bytes + in_operands + carved},
          {"state_in_optimizer_operands_bytes", in_operands},
          {"operands_carved_bytes", carved},
          {"device_used_bytes", held.device_used_bytes},
          {"ledger_serial_peak_bytes", executor.memory_ledger().serial_peak_bytes},
          {"backend_buffers_bytes", backend.allocated_bytes() - in_operands},
          {"model_bytes", parallel::memory_for_stage(model, layout, stage).total_bytes()}};
}

nlohmann::json memory_real_report(const std::vector<nlohmann::json>& ranks) {
  nlohmann::json report;
  report["ranks"] = nlohmann::json::array();
  int worst = -1;
  double worst_error = 0;
  for (const nlohmann::json& data : ranks) {
    nlohmann::json row = data.at("memory_real");
    row["rank"] = data.at("rank");
    const double model_bytes = row.at("model_bytes").get<double>();
    const double error =
        model_bytes > 0 ? (model_bytes / row.at("held_peak_bytes").get<double>() - 1.0) : 0.0;
    row["model_error"] = error;  // (model - held) / held: negative = the model says less than training held
    if (worst < 0 || std::abs(error) > std::abs(worst_error)) {
      worst = static_cast<int>(report["ranks"].size());
      worst_error = error;
    }
    report["ranks"].push_back(std::move(row));
  }
  report["worst"] = worst < 0 ? nlohmann::json() : report["ranks"][static_cast<size_t>(worst)];
  // The rank that held the most: what decides whether the layout fits, and the summary rows' rank.
  nlohmann::json most_loaded;
  for (const nlohmann::json& row : report["ranks"]) {
    if (most_loaded.is_null() ||
        row.at("held_peak_bytes").get<double>() > most_loaded.at("held_peak_bytes").get<double>())
      most_loaded = row;
  }
  report["most_loaded"] = most_loaded;
  return report;
}

namespace {

std::string rank_line(const nlohmann::json& row) {
  const double held = row.at("held_peak_bytes").get<double>();
  const double used = row.at("device_used_bytes").get<double>();
  const double carved = row.value("operands_carved_bytes", 0.0);
  const std::string carve_note =
      carved > 0 ? fmt::format(
                       "; {} of the bench's operand buffers counted as held, the device could not hold "
                       "both",
                       core::format_bytes(carved))
                 : std::string();
  return fmt::format(
      "  rank {} (stage {}): held {} at peak, the model {} ({:+.1f} %); device in use {} "
      "({} beyond what was held: runtime, libraries and the bench's other operand buffers{})\n",
      row.at("rank").get<int>(), row.at("stage").get<int>(), core::format_bytes(held),
      core::format_bytes(row.at("model_bytes").get<double>()), row.at("model_error").get<double>() * 100.0,
      core::format_bytes(used), core::format_bytes(std::max(0.0, used - held)), carve_note);
}

}  // namespace

std::string memory_real_text(const nlohmann::json& report) {
  const nlohmann::json& ranks = report.at("ranks");
  if (ranks.empty()) return {};
  std::string text = "memory (--memory real: training's allocations held around the ops as the step ran):\n";
  if (ranks.size() <= 8) {
    for (const nlohmann::json& row : ranks) text += rank_line(row);
  } else {
    text += rank_line(report.at("worst"));
    text += fmt::format("  (the rank whose model error is largest of {}; every rank in the JSON report)\n",
                        ranks.size());
  }
  return text;
}

void write_memory_summary(store::RunWriter& writer, const nlohmann::json& report) {
  const nlohmann::json& rank = report.at("most_loaded");
  if (rank.is_null()) return;
  writer.add_summary({"bench", "memory_held_peak_bytes", rank.at("held_peak_bytes").get<double>(), "B"});
  writer.add_summary({"bench", "memory_device_used_bytes", rank.at("device_used_bytes").get<double>(), "B"});
  writer.add_summary({"bench", "memory_model_bytes", rank.at("model_bytes").get<double>(), "B"});
  writer.add_summary({"bench", "memory_model_error", rank.at("model_error").get<double>(), "fraction"});
}

}  // namespace calo::exec
