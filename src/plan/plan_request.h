// What `calo plan` asks and answers, below the CLI: the request as its flags give it (names unparsed),
// checked and resolved into a SearchRequest here; the figures a ranked layout reports; the JSON of a search
// and of a partition. The CLI parses the flags into a PlanRequest and prints (cli/plan_text.h).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_fields.h"
#include "core/progress.h"
#include "plan/gpu_conditions.h"
#include "plan/partition.h"
#include "plan/power_plan.h"
#include "plan/search.h"

namespace calo::plan {

/// A clock set's figures as `calo plan power --json` prints them.
CALO_JSON_FIELDS(ClockFigures, stage_clock_mhz, iteration_s, energy_per_step_j)
/// `calo plan power --json`: every field of the result.
CALO_JSON_FIELDS(PowerPlanResult, baseline, planned, energy_saved, slowdown, saving_ceiling, simulated,
                 verdict)

/// A search's settings as `calo plan` starts them: the defaults, with a search estimated past 5 minutes
/// refused.
inline SearchRequest search_defaults() {
  SearchRequest request;
  request.max_minutes = 5;
  return request;
}

/// `calo plan`'s request as the flags give it: names and counts unchecked, resolved by resolve_plan_request.
struct PlanRequest {
  std::string model;                            ///< --model: preset name or YAML file
  std::string cluster;                          ///< --cluster: preset name or YAML file
  int gpus = 0;                                 ///< --gpus: every layout uses all of them
  int global_batch = 0;                         ///< --gbs: sequences per step (fixed)
  int seq_length = 0;                           ///< --seq: tokens per sequence; 0 = the model's
  int max_cp = 0;                               ///< --max-cp; 0 = default_max_cp of the sequence length
  std::string trainer = "default";              ///< --trainer: memory accounting of every layout
  std::vector<std::string> precisions{"bf16"};  ///< --precision: the precisions searched
  bool fp8_all_gather = false;                  ///< --fp8-all-gather: on every FP8 layout it applies to
  std::string memory_limit = "usable";          ///< --memory-limit: what each layout's memory must fit
  std::string objective = "throughput";         ///< --objective
  /// The search's own settings as the flags set them (--power-budget-w, --max-peak-power-w, --power-cap,
  /// --top, --steps, --jobs, --max-minutes, --no-prune, --uniform-partitions); its job, cluster and
  /// objective are resolved from the other fields.
  SearchRequest search = search_defaults();
  LayoutConstraints constraints;  ///< the sizes; schedules, recomputation and overlap from the fields below
  std::vector<std::string> schedule;   ///< --schedule: the schedules allowed
  std::vector<std::string> recompute;  ///< --recompute: the recomputation modes allowed
  bool overlap = false;                ///< --overlap: overlapped layouts only
  bool no_overlap = false;             ///< --no-overlap: layouts without overlap only
};

/// The search `request` asks for: InputError naming the flag of anything invalid; a precision the cluster's
/// card cannot run is skipped with a line to `notice` when others remain (InputError when none does).
SearchRequest resolve_plan_request(const PlanRequest& request, const core::NoticeFn& notice);

/// How a figure's cells read: fixed decimals, significant digits (tokens/J: 1.889 and 1.887 read apart), or
/// with an SI prefix per cell (energy per step 2.23 MJ, cluster power 3.11 MW).
enum class Shown { kFixed, kSignificant, kSi };

/// A simulated figure of a layout: its key in `--json` and its column in the text tables, shown as value *
/// scale with `digits` decimals (kFixed), `digits` significant digits (kSignificant) or `digits` significant
/// digits with core::format_si's prefix of `unit` in each cell (kSi).
struct FigureColumn {
  const char* key;            ///< the --json key
  const char* header;         ///< the text column's header
  const char* unit;           ///< the unit (kSi: the unit each cell's prefix goes before)
  double scale;               ///< shown value = scale * value
  int digits;                 ///< decimals or significant digits
  double Evaluation::*value;  ///< the figure
  Shown shown;                ///< how a cell reads
};

/// The figures every ranked layout reports, in column order.
inline constexpr std::array<FigureColumn, 8> kFigureColumns{{
    {"iteration_s", "step", "s", 1, 3, &Evaluation::iteration_s, Shown::kFixed},
    {"tokens_per_s", "tokens/s", "", 1, 0, &Evaluation::tokens_per_s, Shown::kFixed},
    {"tokens_per_j", "tokens/J", "", 1, 4, &Evaluation::tokens_per_j, Shown::kSignificant},
    {"energy_per_step_j", "energy per step", "J", 1, 4, &Evaluation::energy_per_step_j, Shown::kSi},
    {"cluster_power_w", "cluster power", "W", 1, 3, &Evaluation::cluster_power_w, Shown::kSi},
    {"peak_power_w", "peak power", "W per GPU", 1, 0, &Evaluation::peak_power_w, Shown::kFixed},
    {"max_die_c", "hottest die", "C", 1, 1, &Evaluation::max_die_c, Shown::kFixed},
    {"mfu", "MFU", "%", 100, 1, &Evaluation::mfu, Shown::kFixed},
}};

/// Flags that reproduce `evaluation` with calo sim (the layout's, --memory-limit card when tight, and its
/// --power-cap).
std::string sim_flags(const Evaluation& evaluation);

/// One evaluation as `calo plan --json` lists it.
nlohmann::json to_json(const Evaluation& evaluation);

/// The first-ranked layout's collectives whose group size is outside the range their lines were fitted over
/// (sim::collective_line_warnings); empty without lines or a ranking.
std::vector<std::string> best_layout_warnings(const SearchRequest& request, const SearchResult& result);

/// `calo plan --json`: the job, the search's counts, the first `asked.top` of the ranking, the front, and
/// with `show_all` every candidate.
nlohmann::json search_json(const PlanRequest& asked, const SearchRequest& request, const SearchResult& result,
                           bool show_all);

/// `calo plan partition --json`: the three partitions, the GPUs' conditions and where they came from.
nlohmann::json partition_json(const PartitionRequest& request, const GpuConditions& conditions,
                              const PartitionResult& result);

}  // namespace calo::plan
