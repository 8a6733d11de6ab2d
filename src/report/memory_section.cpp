#include "report/memory_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"
#include "parallel/validate.h"
#include "report/html_report_internal.h"
#include "report/svg_chart.h"
#include "store/run_store.h"

namespace calo::report {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// The model's breakdown of a run's stored job, or why there is none: `reason` is empty for a run that stores
/// no job (calo record) and holds the `InputError`'s message for a stored job that no longer resolves (a
/// model or layout this calo refuses).
struct StoredJobMemory {
  std::optional<parallel::MemoryBreakdown> memory;
  std::string reason;
};

StoredJobMemory predicted_memory(const nlohmann::json& config, const std::string& origin) {
  if (!config.is_object() || !config.contains("model") || !config["model"].is_object() ||
      !config.contains("layout") || !config["layout"].is_object())
    return {};
  try {
    const model::ModelSpec model = model::parse_model_spec(config["model"], origin + " (config model)");
    const parallel::Layout layout =
        parallel::resolve_layout(model, parallel::layout_from_json(config["layout"]));
    return {parallel::memory_per_gpu(model, layout), ""};
  } catch (const InputError& error) {
    return {std::nullopt, error.what()};
  }
}

/// HBM capacity of the simulated cluster's GPU (sim runs store their cluster: gpu.memory_gib); NaN when not
/// stored.
double device_bytes(const nlohmann::json& config) {
  const nlohmann::json::json_pointer pointer("/cluster/gpu/memory_gib");
  if (!config.is_object() || !config.contains(pointer) || !config[pointer].is_number()) return NAN;
  return config[pointer].get<double>() * kGiB;
}

/// What a run's stored job says of its memory: the model's breakdown (nullopt when the run stores no job or
/// its job no longer resolves, `missing_reason` then saying why) and its cluster's GPU capacity (NaN when not
/// stored).
struct PredictedMemory {
  std::optional<parallel::MemoryBreakdown> memory;
  double capacity_bytes = NAN;
  std::string missing_reason;
};

PredictedMemory predicted_memory(const analyze::RunAnalysis& run) {
  const nlohmann::json config = nlohmann::json::parse(run.run.config_json, nullptr, false);
  StoredJobMemory job = predicted_memory(config, run.run_dir.string());
  return {std::move(job.memory), device_bytes(config), std::move(job.reason)};
}

/// The note that says why the model's terms are missing from the section ("" when they are there or the run
/// stores no job).
std::string missing_model_note(const std::string& reason) {
  if (reason.empty()) return "";
  return "<p class=\"note\">No model terms: the run's stored model and layout no longer resolve: " +
         escape_html(reason) + "</p>\n";
}

/// The largest `mem_used_bytes` sample of any GPU and that GPU's index (-1 when the run measured none).
std::pair<double, int> measured_peak_bytes(const analyze::RunAnalysis& run) {
  const auto found = run.series.find("mem_used_bytes");
  std::pair<double, int> peak{NAN, -1};
  if (found == run.series.end()) return peak;
  for (std::size_t device = 0; device < found->second.size(); ++device) {
    const analyze::SeriesDigest& digest = found->second[device];
    if (digest.count == 0) continue;
    if (peak.second < 0 || digest.values.max > peak.first)
      peak = {digest.values.max, static_cast<int>(device)};
  }
  return peak;
}

/// What a `calo bench --memory real` run held, the rank that held the most (the summary rows of
/// exec/bench_memory.h).
struct HeldPeak {
  double held_bytes = NAN;   ///< training's allocations held at once
  double model_bytes = NAN;  ///< the model's total for that rank's stage
};

/// The run's held peak; NaN fields for a run without one (or whose store cannot be read again).
HeldPeak held_peak(const analyze::RunAnalysis& run) {
  HeldPeak held;
  if (run.run.kind != store::RunKind::kBench) return held;
  try {
    for (const store::SummaryRow& row : store::RunReader(run.run_dir).summaries("bench")) {
      if (row.key == "memory_held_peak_bytes") held.held_bytes = row.value;
      if (row.key == "memory_model_bytes") held.model_bytes = row.value;
    }
  } catch (const InputError&) {
    return HeldPeak{};
  }
  return held;
}

std::string gib(double bytes) {
  return std::isnan(bytes) ? "–" : fmt::format("{:.2f}", bytes / kGiB);
}

/// The usable limit and the card as chart markers, where the largest of `bars` (GiB) reaches half the usable
/// memory; for a small job they would squash its bars to nothing, and the table says them anyway.
std::vector<ChartMarker> limit_markers(const std::vector<std::vector<double>>& bars, double capacity_bytes) {
  if (std::isnan(capacity_bytes)) return {};
  const double usable_bytes = parallel::usable_memory_bytes(capacity_bytes);
  double largest_gib = 0;
  for (const auto& bar : bars)
    largest_gib = std::max(largest_gib, std::accumulate(bar.begin(), bar.end(), 0.0));
  if (largest_gib < 0.5 * usable_bytes / kGiB) return {};
  return {{fmt::format("usable {}", gib(usable_bytes)), usable_bytes / kGiB},
          {fmt::format("card {}", gib(capacity_bytes)), capacity_bytes / kGiB}};
}

/// The table: each term of the model, its total, the usable memory where known, the measured peak and the
/// model's error against it.
std::string breakdown_table(const std::optional<parallel::MemoryBreakdown>& memory, double capacity_bytes,
                            std::pair<double, int> measured, store::RunKind kind, const HeldPeak& held) {
  std::string rows;
  auto row = [&](const std::string& term, double bytes, const std::string& note) {
    rows += fmt::format("<tr><td class=\"key\">{}</td><td>{}</td><td class=\"key\">{}</td></tr>\n", term,
                        gib(bytes), note);
  };
  if (memory) {
    const bool torchtitan = parallel::is_torchtitan(memory->trainer);
    const char* torchtitan_weights =
        memory->at_backward_end ? "fp32 parameters; the bf16 compute copies are freed (torchtitan trainer)"
                                : "fp32 parameters + bf16 compute copies (torchtitan trainer)";
    row("weights", memory->weights_bytes, torchtitan ? torchtitan_weights : "bf16");
    row("gradients", memory->gradients_bytes,
        torchtitan ? "fp32, alive only in backward (torchtitan trainer)"
                   : "bf16; fp32 master gradients under the pytorch trainer");
    row("optimizer", memory->optimizer_bytes,
        torchtitan ? "Adam m, v (fp32)" : "fp32 master weights + Adam m, v");
    row("activations", memory->activations_bytes,
        memory->at_backward_end
            ? "freed: the peak is at the end of backward"
            : fmt::format("{} micro-batch(es) in flight on stage {}, {} layer-micro-batches",
                          memory->inflight_microbatches, memory->stage, memory->layer_microbatches));
    for (const model::ActivationTerm& term : memory->activations_by_kind)
      row("&nbsp;&nbsp;· " + escape_html(term.kind), term.bytes,
          fmt::format("{:.1f} % of the activations", 100 * term.bytes / memory->activations_bytes));
    if (memory->fp8_weights_bytes > 0)
      row("FP8 weights", memory->fp8_weights_bytes,
          "each FP8 linear's e4m3 weight and transpose kept for the step, amax history (fp8-delayed)");
    if (memory->temporaries_bytes > 0)
      row(parallel::temporaries_label(*memory), memory->temporaries_bytes,
          memory->temporaries_from_recompute
              ? "one layer's activations rebuilt by recomputation for its backward"
              : "fp32 cross-entropy gradients at the loss (pytorch trainer)");
    row("<b>model total</b>", memory->total_bytes(),
        "the most loaded stage (docs/METRICS.md, \"Memory per GPU\")");
  }
  if (!std::isnan(capacity_bytes)) {
    row("allocator fragmentation", capacity_bytes * parallel::kFragmentationFraction,
        fmt::format("{:.0f} % of the GPU's {} GiB, kept back by the usable rule",
                    parallel::kFragmentationFraction * 100, gib(capacity_bytes)));
    row("runtime reserve", parallel::kRuntimeReserveBytes,
        "CUDA context, library workspaces, NCCL buffers, kept back by the usable rule");
    row("usable of the GPU", parallel::usable_memory_bytes(capacity_bytes),
        fmt::format("{} GiB less the two rows above (docs/METRICS.md \"Planner\")", gib(capacity_bytes)));
  }
  if (measured.second >= 0) {
    std::string note = fmt::format(
        "largest sample, GPU {}: every allocation on the device, CUDA context and "
        "allocator cache included",
        measured.second);
    if (memory)
      note += fmt::format("; model / measured {:+.1f} %", (memory->total_bytes() / measured.first - 1) * 100);
    if (kind == store::RunKind::kBench && std::isnan(held.held_bytes)) {
      note +=
          "; calo bench shares operand buffers and keeps no activations between passes (docs/EXECUTION.md), "
          "so this is the bench's footprint, not a training's";
    } else if (kind == store::RunKind::kBench) {
      note += "; the held allocations below plus the bench's own operand buffers and the runtime";
    }
    row("measured peak", measured.first, note);
  }
  if (!std::isnan(held.held_bytes)) {
    row("held as training holds it", held.held_bytes,
        fmt::format(
            "--memory real, the rank that held the most: training's allocations held around "
            "the ops as the step ran; its stage's model {} GiB, model / held {:+.1f} % (docs/METRICS.md, "
            "\"Held as training holds it\")",
            gib(held.model_bytes), (held.model_bytes / held.held_bytes - 1) * 100));
  }
  return "<table><thead><tr><th class=\"key\">term</th><th>GiB per GPU</th><th "
         "class=\"key\">note</th></tr></thead>"
         "<tbody>\n" +
         rows + "</tbody></table>\n";
}

}  // namespace

std::string memory_section(const analyze::RunAnalysis& run, const std::string& prefix) {
  const auto [memory, capacity_bytes, missing_reason] = predicted_memory(run);
  const auto measured = measured_peak_bytes(run);
  const HeldPeak held = held_peak(run);
  if (!memory && measured.second < 0) {
    if (missing_reason.empty()) return "";
    return "<h3>Memory per GPU</h3>\n" + anchored(prefix + "memory", missing_model_note(missing_reason));
  }
  std::vector<std::string> bars;
  std::vector<std::vector<double>> values;
  std::vector<std::string> segments;
  if (memory) {
    segments = {"weights", "gradients", "optimizer", "activations"};
    bars.push_back("model");
    values.push_back({memory->weights_bytes / kGiB, memory->gradients_bytes / kGiB,
                      memory->optimizer_bytes / kGiB, memory->activations_bytes / kGiB});
    if (memory->fp8_weights_bytes > 0) {
      segments.push_back("FP8 weights");
      values.back().push_back(memory->fp8_weights_bytes / kGiB);
    }
    if (memory->temporaries_bytes > 0) {
      segments.push_back(parallel::temporaries_label(*memory));
      values.back().push_back(memory->temporaries_bytes / kGiB);
    }
  }
  // Measured bars, each its own segment: the device's peak and, under --memory real, what training held.
  auto measured_bar = [&](const std::string& bar, const std::string& segment, double bytes) {
    segments.push_back(segment);
    for (auto& row : values) row.push_back(0.0);
    bars.push_back(bar);
    values.emplace_back(segments.size() - 1, 0.0);
    values.back().push_back(bytes / kGiB);
  };
  if (measured.second >= 0) measured_bar("measured", "measured peak", measured.first);
  if (!std::isnan(held.held_bytes)) measured_bar("held", "held (--memory real)", held.held_bytes);
  const bool any_measured = measured.second >= 0 || !std::isnan(held.held_bytes);
  const std::string title = !memory         ? "Memory per GPU: the measured peak"
                            : !any_measured ? "Memory per GPU: the model's terms"
                                            : "Memory per GPU: the model's terms and what was measured";
  const std::string chart =
      stacked_bar_chart(title, "GiB", bars, segments, values, limit_markers(values, capacity_bytes));
  return "<h3>Memory per GPU</h3>\n" + anchored(prefix + "memory", chart) +
         missing_model_note(missing_reason) +
         breakdown_table(memory, capacity_bytes, measured, run.run.kind, held);
}

std::string memory_verdict(const analyze::RunAnalysis& run) {
  if (run.run.kind != store::RunKind::kSim) return "";
  const auto [memory, capacity_bytes, missing_reason] = predicted_memory(run);
  if (!memory || std::isnan(capacity_bytes)) return "";
  const double usable_bytes = parallel::usable_memory_bytes(capacity_bytes);
  if (memory->total_bytes() <= usable_bytes) return "";
  // A tight layout (beyond usable, within the card; `--memory-limit card` or `--allow-oom`) says what the
  // card would leave; beyond the card only --allow-oom simulates it.
  if (parallel::is_tight(memory->total_bytes(), capacity_bytes))
    return fmt::format(
        "tight: the model needs {} GiB per GPU (stage {}), beyond the {} GiB usable of the {} GiB card; {}",
        gib(memory->total_bytes()), memory->stage, gib(usable_bytes), gib(capacity_bytes),
        parallel::card_headroom_text(memory->total_bytes(), capacity_bytes));
  return fmt::format(
      "does not fit memory: the model needs {} GiB per GPU (stage {}), more than the {} GiB usable of the {} "
      "GiB card; simulated anyway (--allow-oom)",
      gib(memory->total_bytes()), memory->stage, gib(usable_bytes), gib(capacity_bytes));
}

}  // namespace calo::report
