// `calo plan --model M --cluster C --gpus N --gbs B [--seq S] [--objective throughput|energy|pareto]
// [--power-budget-w W] [--max-peak-power-w W] [--top K] [--json] [layout constraints: --tp 4 --mbs 1,2 ...]`:
// searches the layout space through the simulator and prints the ranking, the Pareto front and the flags to
// paste (docs/PLANNER.md).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/layout_flags.h"
#include "cli/plan_text.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/table.h"
#include "core/threads.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/schedule.h"
#include "plan/gpu_conditions.h"
#include "plan/partition.h"
#include "plan/power_plan.h"
#include "plan/search.h"
#include "sim/cluster_trust.h"
#include "sim/cost_model.h"
#include "sim/placement.h"

namespace calo::plan {

CALO_JSON_FIELDS(ClockFigures, stage_clock_mhz, iteration_s, energy_per_step_j)
CALO_JSON_FIELDS(PowerPlanResult, baseline, planned, energy_saved, slowdown, saving_ceiling, simulated,
                 verdict)

}  // namespace calo::plan

namespace calo::cli {
namespace {

struct PlanFlags {
  std::string model;
  std::string cluster;
  int gpus = 0;
  int global_batch = 0;
  int seq_length = 0;
  int max_cp = 0;                               // 0 = plan::default_max_cp of the sequence length
  std::string trainer = "default";              // --trainer: memory accounting of every layout
  std::vector<std::string> precisions{"bf16"};  // --precision: the precisions searched
  std::string memory_limit = "usable";          // --memory-limit: what each layout's memory must fit
  std::vector<double> power_caps_w;             // --power-cap 400,500,700: a searched axis
  std::string objective = "throughput";
  double power_budget_w = 0;
  double max_peak_power_w = 0;
  int top = 10;
  int steps = 1;
  int threads = 0;
  double max_minutes = 5;  // --max-minutes: refuse a space estimated to take longer (0 = no limit)
  bool json = false;
  bool show_all = false;
  bool no_prune = false;
  bool uniform_partitions = false;  ///< --uniform-partitions: rank pipeline layouts at equal layers per stage
  bool progress = false;
  bool quiet = false;
  // Layout constraints: the same flags as calo sim's, each taking one value or a comma-separated list.
  plan::LayoutConstraints
      constraints;  // the sizes; schedules, recomputation and overlap from the strings below
  std::vector<std::string> schedule, recompute;
  bool overlap = false;
  bool no_overlap = false;
};

/// The layout constraints the flags give (InputError naming the flag for an unknown schedule/recompute).
plan::LayoutConstraints constraints_of(const PlanFlags& flags) {
  require_input(!(flags.overlap && flags.no_overlap), "--overlap and --no-overlap: give one of them");
  plan::LayoutConstraints constraints = flags.constraints;
  for (const std::string& name : flags.schedule)
    constraints.schedule.push_back(parallel::parse_schedule(name));
  for (const std::string& name : flags.recompute)
    constraints.recompute.push_back(parallel::parse_recompute(name));
  if (flags.overlap || flags.no_overlap) constraints.overlap = flags.overlap;
  return constraints;
}

/// The precisions `names` asks for that the cluster's card runs; those it cannot are skipped with the reason
/// on stderr, and none left is an InputError (sim::require_precision's).
std::vector<parallel::Precision> searched_precisions(const std::vector<std::string>& names,
                                                     const sim::ClusterSpec& cluster) {
  std::vector<parallel::Precision> precisions;
  for (const std::string& name : names) {
    const parallel::Precision precision = parallel::kPrecisionAxis.parse(name);
    if (sim::supports_precision(cluster.gpu, precision)) {
      precisions.push_back(precision);
    } else if (names.size() > 1) {
      fmt::print(stderr, "calo plan: skipping --precision {}: the {} of cluster {} has no FP8 tensor cores\n",
                 name, cluster.gpu.name, cluster.name);
    }
  }
  if (precisions.empty())
    sim::require_precision(cluster.gpu, cluster.name, parallel::kPrecisionAxis.parse(names.front()));
  return precisions;
}

/// Flags `calo plan partition` and `calo plan power` share: the job they simulate and its GPUs' conditions.
struct SimJobFlags {
  /// Flags with `default_steps` simulated steps.
  explicit SimJobFlags(int default_steps) : steps(default_steps) {}
  LayoutFlags layout;
  int gpus = 0;  ///< --gpus N (as calo sim: dp derived unless --dp)
  bool gpus_given = false;
  bool dp_given = false;
  std::string cluster;
  int steps = 0;
  std::vector<std::string> slow_gpus;
  std::vector<std::string> hot_gpus;
  bool json = false;
};

/// Flags of `calo plan partition`.
struct PartitionFlags : SimJobFlags {
  PartitionFlags() : SimJobFlags(20) {}
  std::string from_run;
};

/// Fills the job part of a partition or power request from `flags`: model, layout (--gpus applied),
/// cluster, steps, slow and hot GPUs; returns the model and layout.
template <typename Request>
std::pair<model::ModelSpec, parallel::Layout> set_up_job(const SimJobFlags& flags, Request& request) {
  LayoutFlags layout_flags = flags.layout;
  apply_gpus(flags.gpus, flags.gpus_given, flags.dp_given, layout_flags);
  auto [model, layout] = resolve(layout_flags);
  request.model = model;
  request.layout = layout;
  request.cluster = sim::load_cluster(flags.cluster);
  request.options.steps = flags.steps;
  const int world = layout.world_size();
  request.options.speed_factors = per_gpu_values(flags.slow_gpus, world, 1.0, "--slow-gpu");
  request.options.inlet_offset_c = per_gpu_values(flags.hot_gpus, world, 0.0, "--hot-gpu");
  return {model, layout};
}

/// Flags of `calo plan power`.
struct PowerFlags : SimJobFlags {
  PowerFlags() : SimJobFlags(5) {}
  double max_slowdown_pct = 1.0;
};

int run_power(const PowerFlags& flags) {
  require_input(!flags.cluster.empty(), "--cluster is required (see `calo sim --list`)");
  plan::PowerPlanRequest request;
  auto [model, layout] = set_up_job(flags, request);
  request.max_slowdown = flags.max_slowdown_pct / 100.0;
  const int world = layout.world_size();
  const plan::PowerPlanResult result = plan::plan_power(request);
  if (flags.json) {
    print_json(result);
    return 0;
  }
  fmt::print("# calo plan power: {} {} on {} x {}, step time may grow {:.1f} %, {} clock sets simulated\n",
             model.name, parallel::describe(layout), world, request.cluster.name, flags.max_slowdown_pct,
             result.simulated);
  core::TextTable table({"clocks", "highest SM clock per stage", "step", "energy per step"});
  table.set_units({"", "MHz", "s", "J"});
  auto row = [&](const std::string& name, const plan::ClockFigures& clocks) {
    std::vector<std::string> mhz;
    for (double clock : clocks.stage_clock_mhz) mhz.push_back(fmt::format("{:.0f}", clock));
    table.add_row({name, fmt::format("{}", fmt::join(mhz, ",")), fmt::format("{:.4f}", clocks.iteration_s),
                   fmt::format("{:.1f}", clocks.energy_per_step_j)});
  };
  row("free (today)", result.baseline);
  row("planned", result.planned);
  fmt::print("{}", table.render());
  fmt::print("{}\n", result.verdict);
  if (result.energy_saved >= 0.005) {
    fmt::print(
        "# advice only (calo changes no GPU setting): on each GPU of stage s, `nvidia-smi -i <gpu> -lgc "
        "0,<clock of s>` (or the framework's per-rank frequency setting)\n");
  }
  return 0;
}

nlohmann::json to_json(const plan::PartitionFigures& figures) {
  return {{"layers_per_stage", figures.layers_per_stage},
          {"gpu_of_stage", figures.gpu_of_stage},
          {"iteration_s", figures.iteration_s},
          {"max_die_c", figures.max_die_c},
          {"fits", figures.fits}};
}

/// The flags that run the partition found, and for other trainers how to put each stage on its GPUs.
void print_use(const plan::PartitionRequest& request, const plan::PartitionFigures& best) {
  // The order is a permutation of the stages: in order, it is Megatron's.
  if (std::is_sorted(best.gpu_of_stage.begin(), best.gpu_of_stage.end())) {
    fmt::print("# use: --layers-per-stage {} (stage s stays on the GPUs of pipeline position s)\n",
               parallel::partition_text(best.layers_per_stage));
    return;
  }
  fmt::print("# use: --layers-per-stage {} --stage-gpus {} (calo sim and calo bench take both)\n",
             parallel::partition_text(best.layers_per_stage), fmt::join(best.gpu_of_stage, ","));
  parallel::Layout placed = request.layout;
  placed.stage_gpus = best.gpu_of_stage;
  const std::vector<int> slots =
      sim::options_per_rank(request.options, placed, request.cluster.node.gpus).slot_of_rank;
  if (static_cast<int>(slots.size()) <= request.cluster.node.gpus) {
    fmt::print(
        "#   other trainers, on one node: CUDA_VISIBLE_DEVICES={} (local rank r uses the r-th listed GPU)\n",
        fmt::join(slots, ","));
  } else {
    fmt::print(
        "#   other trainers: per node, list each local rank's GPU in CUDA_VISIBLE_DEVICES; whole-node "
        "stages: "
        "reorder the hosts\n");
  }
}

/// What --from read: each GPU's speed and extra heat, and where they came from.
void print_conditions(const std::string& run_dir, const plan::GpuConditions& conditions) {
  std::vector<std::string> speeds;
  std::vector<std::string> heat;
  for (double speed : conditions.speed_factors) speeds.push_back(fmt::format("{:.3f}", speed));
  for (double offset : conditions.inlet_offset_c) heat.push_back(fmt::format("{:+.1f}", offset));
  fmt::print("# from {}: speed per GPU {}, from {}\n", run_dir, fmt::join(speeds, ", "),
             conditions.speed_source);
  fmt::print("# from {}: extra inlet per GPU {} C, from {}\n", run_dir, fmt::join(heat, ", "),
             conditions.heat_source);
}

int run_partition(const PartitionFlags& flags) {
  require_input(!flags.cluster.empty(), "--cluster is required (see `calo sim --list`)");
  require_input(
      flags.layout.stage_gpus.empty(),
      "calo plan partition searches the stage -> GPU order itself; drop --stage-gpus (give it to calo "
      "sim or calo bench to run an order)");
  plan::PartitionRequest request;
  auto [model, layout] = set_up_job(flags, request);
  const int world = layout.world_size();
  plan::GpuConditions conditions;
  if (!flags.from_run.empty()) {
    require_input(flags.slow_gpus.empty() && flags.hot_gpus.empty(),
                  "--from RUN reads every GPU's speed and heat; drop --slow-gpu / --hot-gpu or --from");
#ifdef CALO_SIM_HAS_STORE
    conditions = plan::conditions_from_run(flags.from_run, request);
    request.options.speed_factors = conditions.speed_factors;
    request.options.inlet_offset_c = conditions.inlet_offset_c;
#else
    throw InputError("--from RUN needs the run store (this calo was built without it)");
#endif
  }
  const plan::PartitionResult result = plan::plan_partition(request);
  auto joined = [](const std::vector<int>& layers) { return fmt::format("{}", fmt::join(layers, ",")); };
  if (flags.json) {
    print_json({{"uniform", to_json(result.uniform)},
                {"even_odd", to_json(result.even_odd)},
                {"best", to_json(result.best)},
                {"speed_factors", request.options.speed_factors},
                {"inlet_offset_c", request.options.inlet_offset_c},
                {"work_ratio", conditions.work_ratio},
                {"speed_source", conditions.speed_source},
                {"heat_source", conditions.heat_source},
                {"simulated", result.simulated}});
    return 0;
  }
  fmt::print("# calo plan partition: {} {} on {} x {}, {} step(s) per partition, {} simulated\n", model.name,
             parallel::describe(layout), world, request.cluster.name, flags.steps, result.simulated);
  if (!flags.from_run.empty()) print_conditions(flags.from_run, conditions);
  // The search's start: uniform, or where the layers do not split evenly the remainder in the middle stages.
  const std::vector<int>& base = result.uniform.layers_per_stage;
  const bool even = std::adjacent_find(base.begin(), base.end(), std::not_equal_to<>()) == base.end();
  const std::string base_name = even ? "uniform" : "near-uniform";
  core::TextTable table({"partition", "layers per stage", "GPUs of stage (pipeline position)", "step",
                         "vs " + base_name, "hottest die"});
  table.set_units({"", "", "", "s", "%", "C"});
  auto row = [&](const std::string& name, const plan::PartitionFigures& figures) {
    if (figures.layers_per_stage.empty()) return;
    table.add_row({name, joined(figures.layers_per_stage), joined(figures.gpu_of_stage),
                   fmt::format("{:.4f}", figures.iteration_s),
                   fmt::format("{:+.2f}", 100 * (figures.iteration_s / result.uniform.iteration_s - 1)),
                   fmt::format("{:.1f}", figures.max_die_c)});
  };
  row(base_name, result.uniform);
  row("even/odd (static)", result.even_odd);
  row("found", result.best);
  fmt::print("{}", table.render());
  print_use(request, result.best);
  return 0;
}

/// The layout as the tables name it, with its power cap when one was searched ("..., cap 500 W").
std::string layout_label(const plan::Evaluation& evaluation) {
  const std::string layout = parallel::describe(evaluation.candidate.layout);
  return evaluation.power_cap_w > 0 ? fmt::format("{}, cap {:g} W", layout, evaluation.power_cap_w) : layout;
}

/// Flags that reproduce the evaluation with calo sim (the layout's, and its --power-cap).
std::string sim_flags(const plan::Evaluation& evaluation) {
  // calo sim holds a layout to the usable share unless told the card, as the planner was.
  const std::string flags = plan::calo_flags(evaluation.candidate.layout) +
                            (evaluation.candidate.tight ? " --memory-limit card" : "");
  return evaluation.power_cap_w > 0 ? fmt::format("{} --power-cap {:g}", flags, evaluation.power_cap_w)
                                    : flags;
}

/// The search's counts and times, under their own names.
CALO_JSON_WRITER(write_search_work, plan::SearchResult, excluded, excluded_by, invalid, out_of_memory, tight,
                 pruned, too_large, stopped, graph_ops, probe_ops, built_ops, bound_wall_s, estimated_s,
                 simulated, wall_s)

/// How a figure's cells read: fixed decimals, significant digits (tokens/J: 1.889 and 1.887 read apart), or
/// with an SI prefix per cell (energy per step 2.23 MJ, cluster power 3.11 MW).
enum class Shown { kFixed, kSignificant, kSi };

/// A simulated figure of a layout: its key in `--json` and its column in the text tables (none for a null
/// header), shown as value * scale with `digits` decimals (kFixed), `digits` significant digits
/// (kSignificant) or `digits` significant digits with core::format_si's prefix of `unit` in each cell (kSi).
struct FigureColumn {
  const char* key;
  const char* header;
  const char* unit;
  double scale;
  int digits;
  double plan::Evaluation::*value;
  Shown shown;
};

constexpr std::array<FigureColumn, 8> kFigureColumns{{
    {"iteration_s", "step", "s", 1, 3, &plan::Evaluation::iteration_s, Shown::kFixed},
    {"tokens_per_s", "tokens/s", "", 1, 0, &plan::Evaluation::tokens_per_s, Shown::kFixed},
    {"tokens_per_j", "tokens/J", "", 1, 4, &plan::Evaluation::tokens_per_j, Shown::kSignificant},
    {"energy_per_step_j", "energy per step", "J", 1, 4, &plan::Evaluation::energy_per_step_j, Shown::kSi},
    {"cluster_power_w", "cluster power", "W", 1, 3, &plan::Evaluation::cluster_power_w, Shown::kSi},
    {"peak_power_w", "peak power", "W per GPU", 1, 0, &plan::Evaluation::peak_power_w, Shown::kFixed},
    {"max_die_c", "hottest die", "C", 1, 1, &plan::Evaluation::max_die_c, Shown::kFixed},
    {"mfu", "MFU", "%", 100, 1, &plan::Evaluation::mfu, Shown::kFixed},
}};

/// The text cell of `figure` for its raw value.
std::string figure_cell(const FigureColumn& figure, double value) {
  switch (figure.shown) {
    case Shown::kSignificant:
      return core::format_significant(figure.scale * value, figure.digits);
    case Shown::kSi:
      return core::format_si(figure.scale * value, figure.unit, figure.digits);
    case Shown::kFixed:
      break;
  }
  return fmt::format("{:.{}f}", figure.scale * value, figure.digits);
}

nlohmann::json to_json(const plan::Evaluation& evaluation) {
  const auto& layout = evaluation.candidate.layout;
  nlohmann::json json = {{"layout", parallel::describe(layout)},
                         {"layout_json", parallel::to_json(layout)},
                         {"verdict", plan::to_string(evaluation.verdict)},
                         {"memory_bytes", evaluation.candidate.memory.total_bytes()},
                         {"fits", evaluation.candidate.fits},
                         {"tight", evaluation.candidate.tight},
                         {"calo_flags", sim_flags(evaluation)},
                         {"power_cap_w", evaluation.power_cap_w > 0 ? nlohmann::json(evaluation.power_cap_w)
                                                                    : nlohmann::json(nullptr)},
                         {"megatron_flags", plan::megatron_flags(layout)}};
  if (evaluation.lower_bound_s > 0) json["lower_bound_s"] = evaluation.lower_bound_s;
  if (evaluation.uniform_iteration_s > 0)
    json["uniform_partition_iteration_s"] = evaluation.uniform_iteration_s;
  if (evaluation.iteration_s > 0) {
    for (const FigureColumn& figure : kFigureColumns) json[figure.key] = evaluation.*figure.value;
    json["pareto"] = evaluation.pareto;
  }
  if (!evaluation.note.empty()) json["note"] = evaluation.note;
  return json;
}

void add_row(core::TextTable& table, const std::string& rank, const plan::Evaluation& evaluation) {
  const bool simulated = evaluation.iteration_s > 0;
  const std::string memory = core::format_bytes(evaluation.candidate.memory.total_bytes());
  std::vector<std::string> row{rank, layout_label(evaluation),
                               evaluation.candidate.tight ? memory + " tight" : memory};
  for (const FigureColumn& figure : kFigureColumns) {
    if (figure.header == nullptr) continue;
    row.push_back(simulated ? figure_cell(figure, evaluation.*figure.value) : std::string("-"));
  }
  row.push_back(evaluation.pareto ? "*" : std::string(plan::to_string(evaluation.verdict)));
  table.add_row(row);
}

core::TextTable make_table() {
  std::vector<std::string> headers{"#", "layout", "memory"}, units{"", "", "per GPU"};
  for (const FigureColumn& figure : kFigureColumns) {
    if (figure.header == nullptr) continue;
    headers.emplace_back(figure.header);
    units.emplace_back(figure.shown == Shown::kSi ? "" : figure.unit);  // kSi: each cell names its unit
  }
  headers.emplace_back("front");
  units.emplace_back("");
  core::TextTable table(headers);
  table.set_units(units);
  return table;
}

/// The Pareto front (fastest first). Four figures leave most layouts undominated (125 of the 8-GPU llama3-8b
/// plan's), and a table that long buries the ranking: past `--top` rows it shows the front's corners (the
/// best layout on each figure) and says how to see the rest, unless the objective is the front itself or
/// `--all` asks for everything.
void print_front(const plan::SearchRequest& request, const plan::SearchResult& result,
                 const PlanFlags& flags) {
  core::TextTable front = make_table();
  const bool whole = flags.show_all || request.objective == plan::Objective::kPareto ||
                     result.pareto.size() <= static_cast<std::size_t>(std::max(flags.top, 0));
  if (whole) {
    for (std::size_t index : result.pareto) add_row(front, "", result.evaluations[index]);
    fmt::print("# Pareto front ({} layouts)\n{}", result.pareto.size(), front.render());
    return;
  }
  for (const plan::FrontCorner& corner : plan::front_corners(result))
    add_row(front, corner.figure, result.evaluations[corner.index]);
  fmt::print(
      "# Pareto front ({} layouts), its corners: the best layout on each figure (--objective pareto ranks "
      "the front; --all or --json lists all of it)\n{}",
      result.pareto.size(), front.render());
}

/// The first-ranked layout's collectives whose group size is outside the range their lines were fitted over
/// (sim::collective_line_warnings); empty without lines or a ranking.
std::vector<std::string> best_layout_warnings(const plan::SearchRequest& request,
                                              const plan::SearchResult& result) {
  if (result.ranking.empty() || request.cluster.collective.lines.empty()) return {};
  const parallel::Layout& best = result.evaluations[result.ranking.front()].candidate.layout;
  return sim::collective_line_warnings(graph::build_graph(request.space.model, best), request.cluster);
}

/// The line under the ranking that says which rows the model cannot tell apart (empty when only the first).
std::string equivalence_line(const plan::SearchRequest& request, const plan::SearchResult& result, int rows) {
  const int equivalent = std::min(rows, plan::equivalent_to_first(result, request.objective));
  if (equivalent < 2) return {};
  return fmt::format(
      "# rows 1-{} are within {:.0f} % of row 1 on {}: equivalent within the model's error (the planner's "
      "first "
      "pick ran up to 3.0 % behind the measured best on H200 hosts); choose among them by memory headroom, "
      "energy or simplicity\n",
      equivalent, 100 * plan::kEquivalentFraction,
      request.objective == plan::Objective::kEnergy ? "energy per step" : "step time");
}

/// Why a ranked pipeline layout has uneven layers per stage, with the uniform partition's step beside it.
std::string partition_line(const plan::Evaluation& evaluation) {
  const auto& layers = evaluation.candidate.layout.layers_per_stage;
  if (evaluation.uniform_iteration_s <= 0 && parallel::is_edge_accounted(layers))
    return fmt::format(
        "partition {}: {} layers do not split evenly over {} (virtual) stages; Megatron-LM's "
        "split with the embedding and the loss counted as a layer each does",
        parallel::partition_text(layers), std::accumulate(layers.begin(), layers.end(), 0), layers.size());
  std::string line = fmt::format("partition {}: balances the stages' compute (embedding, output layer)",
                                 parallel::partition_text(layers));
  if (evaluation.uniform_iteration_s > 0)
    line += fmt::format("; uniform partition {:.3f} s, {:+.1f} %", evaluation.uniform_iteration_s,
                        100 * (evaluation.uniform_iteration_s / evaluation.iteration_s - 1));
  return line + " (--uniform-partitions ranks uniform ones only)";
}

/// The header's memory counts: how many do not fit, and how many fit the card but not its usable share.
std::string memory_counts(const plan::SearchRequest& request, const plan::SearchResult& result) {
  if (request.space.memory_limit == plan::MemoryLimit::kCard)
    return fmt::format("{} do not fit the card, {} fit only into its usable margin (ranked, marked tight)",
                       result.out_of_memory, result.tight);
  if (result.tight == 0) return fmt::format("{} do not fit memory", result.out_of_memory);
  return fmt::format("{} do not fit memory ({})", result.out_of_memory, plan::tight_count_text(result.tight));
}

/// A warning when the first pick is tight: what it leaves on the card for the runtime (empty otherwise).
std::string tight_pick_warning(const plan::SearchRequest& request, const plan::SearchResult& result) {
  if (result.ranking.empty()) return {};
  const plan::Candidate& best = result.evaluations[result.ranking.front()].candidate;
  if (!best.tight) return {};
  const double card_bytes = request.cluster.gpu.memory_bytes;
  return fmt::format(
      "tight: needs {} per GPU, beyond the {} usable of the {} card ({:.0f} % fragmentation, {} runtime); "
      "{}. Before you trust it, measure your trainer's runtime share: the GPU's memory used (`calo record`, "
      "mem_used_bytes) less its allocator's reserved peak",
      core::format_bytes(best.memory.total_bytes()),
      core::format_bytes(plan::usable_memory_bytes(card_bytes)), core::format_bytes(card_bytes),
      parallel::kFragmentationFraction * 100, core::format_bytes(parallel::kRuntimeReserveBytes),
      parallel::card_headroom_text(best.memory.total_bytes(), card_bytes));
}

void print_text(const plan::SearchRequest& request, const plan::SearchResult& result,
                const PlanFlags& flags) {
  const std::string constraints = request.space.constraints.describe();
  fmt::print("# calo plan: {} on {} x {}, gbs {}, objective {}{}\n", request.space.model.name,
             request.space.gpus, request.cluster.name, request.space.global_batch,
             plan::to_string(request.objective), constraints.empty() ? "" : ", only " + constraints);
  fmt::print("# cluster {}\n", sim::cluster_trust(request.cluster).summary);
  fmt::print(
      "# {} {}: {}{} invalid combinations skipped, {}, {} pruned by the lower bound, "
      "{}{} simulated; {:.2f} s (estimated {:.0f} s)\n",
      result.evaluations.size(),
      request.power_caps_w.empty()
          ? "layouts"
          : fmt::format("(layout, power cap) pairs over {} caps", request.power_caps_w.size()),
      result.excluded > 0 ? fmt::format("{} outside the constraints ({}), ", result.excluded,
                                        excluded_text(result.excluded_by))
                          : std::string(),
      result.invalid, memory_counts(request, result), result.pruned,
      result.too_large > 0 ? fmt::format("{} too large to simulate, ", result.too_large) : std::string(),
      result.simulated, result.wall_s, result.estimated_s);
  if (result.stopped > 0) fmt::print("# STOPPED: {}\n", stopped_text(request, result));
  core::TextTable table = make_table();
  const int rows = std::min<int>(flags.top, static_cast<int>(result.ranking.size()));
  for (int row = 0; row < rows; ++row)
    add_row(table, std::to_string(row + 1), result.evaluations[result.ranking[row]]);
  fmt::print("{}", table.render());
  fmt::print("{}", equivalence_line(request, result, rows));
  fmt::print(
      "# front: * = on the Pareto front over tokens/s, tokens/J (higher), peak power, hottest die (lower)\n");
  if (request.space.precisions != std::vector<parallel::Precision>{parallel::Precision::kBf16})
    fmt::print(
        "# MFU: model FLOPs over the bf16 peak for FP8 layouts too (docs/METRICS.md \"FP8 training\")\n");
  for (int row = 0; row < rows; ++row) {
    const plan::Evaluation& evaluation = result.evaluations[result.ranking[row]];
    const auto& layout = evaluation.candidate.layout;
    fmt::print("{:>3}. calo sim --model {} --cluster {} --gpus {} {}\n", row + 1, request.space.model.name,
               request.cluster.name, request.space.gpus, sim_flags(evaluation));
    fmt::print("     megatron: {}\n", plan::megatron_flags(layout));
    if (layout.uneven_partition()) fmt::print("     {}\n", partition_line(evaluation));
  }
  std::vector<std::string> warnings = best_layout_warnings(request, result);
  if (std::string tight = tight_pick_warning(request, result); !tight.empty()) warnings.push_back(tight);
  for (const std::string& warning : warnings) fmt::print("# WARNING (layout 1): {}\n", warning);
  print_front(request, result, flags);
  if (flags.show_all) {
    core::TextTable all = make_table();
    for (const auto& evaluation : result.evaluations) add_row(all, "", evaluation);
    fmt::print("# every candidate (front column: verdict)\n{}", all.render());
  }
}

int run_plan(const PlanFlags& flags) {
  require_input(!flags.model.empty(), "--model is required (see `calo model --list`)");
  require_input(!flags.cluster.empty(), "--cluster is required (see `calo sim --list`)");
  require_input(flags.gpus >= 1, fmt::format("--gpus {}: give the number of GPUs (>= 1)", flags.gpus));
  require_input(flags.global_batch >= 1,
                fmt::format("--gbs {}: give the global batch in sequences (>= 1)", flags.global_batch));
  plan::SearchRequest request;
  request.space.model = model::load_model(flags.model);
  request.space.gpus = flags.gpus;
  request.space.global_batch = flags.global_batch;
  request.space.seq_length = flags.seq_length;
  const int seq_length = flags.seq_length > 0 ? flags.seq_length : request.space.model.seq_length;
  require_input(
      flags.max_cp >= 0 && (flags.max_cp & (flags.max_cp - 1)) == 0,
      fmt::format("--max-cp {}: give a power of two (1 = no context parallelism), or leave it out "
                  "for {} at sequences of {} tokens or more and 1 below",
                  flags.max_cp, plan::default_max_cp(plan::kLongSequenceTokens), plan::kLongSequenceTokens));
  request.space.max_cp = flags.max_cp > 0 ? flags.max_cp : plan::default_max_cp(seq_length);
  request.space.trainer = parallel::parse_trainer(flags.trainer);
  request.cluster = sim::load_cluster(flags.cluster);
  request.space.precisions = searched_precisions(flags.precisions, request.cluster);
  request.space.memory_limit = plan::parse_memory_limit(flags.memory_limit);
  request.space.constraints = constraints_of(flags);
  // A --cp constraint asks for context parallelism even at sequences that do not get it by default.
  for (int cp : flags.constraints.cp) request.space.max_cp = std::max(request.space.max_cp, cp);
  request.objective = plan::parse_objective(flags.objective);
  request.power_budget_w = flags.power_budget_w;
  request.max_peak_power_w = flags.max_peak_power_w;
  request.top = flags.top;
  request.steps = flags.steps;
  request.power_caps_w = flags.power_caps_w;
  request.threads = flags.threads;
  request.max_minutes = flags.max_minutes;
  request.prune = !flags.no_prune;
  request.balance_partitions = !flags.uniform_partitions;
  if (!flags.quiet) request.progress = search_progress_printer(flags.progress || isatty(STDERR_FILENO) != 0);
  const plan::SearchResult result = plan::search_layouts(request);
  if (flags.json) {
    nlohmann::json json = {{"model", request.space.model.name},
                           {"cluster", request.cluster.name},
                           {"gpus", request.space.gpus},
                           {"global_batch", request.space.global_batch},
                           {"objective", flags.objective},
                           {"constraints", request.space.constraints.describe()},
                           {"memory_limit", plan::to_string(request.space.memory_limit)},
                           {"cluster_trust", sim::cluster_trust(request.cluster).summary},
                           {"equivalent_to_first", plan::equivalent_to_first(result, request.objective)}};
    write_search_work(json, result);
    nlohmann::json ranking = nlohmann::json::array();
    for (std::size_t row = 0; row < result.ranking.size() && static_cast<int>(row) < flags.top; ++row)
      ranking.push_back(to_json(result.evaluations[result.ranking[row]]));
    nlohmann::json front = nlohmann::json::array();
    for (std::size_t index : result.pareto) front.push_back(to_json(result.evaluations[index]));
    json["ranking"] = ranking;
    json["pareto"] = front;
    if (auto warnings = best_layout_warnings(request, result); !warnings.empty()) json["warnings"] = warnings;
    if (flags.show_all) {
      nlohmann::json all = nlohmann::json::array();
      for (const auto& evaluation : result.evaluations) all.push_back(to_json(evaluation));
      json["candidates"] = all;
    }
    print_json(json);
  } else {
    print_text(request, result, flags);
  }
  if (result.stopped == 0) return 0;
  fmt::print(stderr, "calo plan: {}\n", stopped_text(request, result));
  return static_cast<int>(ExitCode::kFailure);  // a partial ranking is no answer a script should take
}

/// The job and the space searched: --model, --cluster, --gpus, --gbs, --seq, --trainer, --max-cp.
void add_job_flags(CLI::App& app, PlanFlags& flags) {
  app.add_option("--model,-m", flags.model, "Model preset name or YAML file");
  app.add_option("--cluster,-c", flags.cluster, "Cluster preset or YAML file");
  app.add_option("--gpus,-n", flags.gpus, "GPUs (every layout uses all of them)");
  app.add_option("--gbs,--global-batch", flags.global_batch, "Global batch in sequences (fixed)");
  app.add_option("--seq", flags.seq_length, "Sequence length; default the model's");
  app.add_option(parallel::kPrecisionAxis.flag, flags.precisions,
                 "Precisions of the linears searched, one or a comma-separated list (" +
                     parallel::kPrecisionAxis.choices() + "), e.g. bf16,fp8; as calo sim's --precision")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--trainer", flags.trainer,
                 "Memory accounting of every layout: default (bf16 gradients), pytorch (fp32 master "
                 "gradient, plain cross-entropy's fp32 backward at the loss) or torchtitan (FSDP2 or DDP "
                 "mixed precision), as calo sim's --trainer")
      ->capture_default_str();
  app.add_option("--memory-limit", flags.memory_limit,
                 "What each layout's accounted memory must fit: usable (the card less 3 % allocator "
                 "fragmentation and 4 GiB for the CUDA context, libraries and NCCL) or card (the whole card: "
                 "also rank layouts that leave the runtime less, marked tight)")
      ->capture_default_str();
  app.add_option("--max-cp", flags.max_cp,
                 "Largest context-parallel size searched (powers of two; default 16 at sequences of 32K "
                 "tokens or more, else 1)");
}

/// The ranking and its power limits: --objective, --power-budget-w, --max-peak-power-w, --power-cap, --top,
/// --steps, --jobs.
void add_ranking_flags(CLI::App& app, PlanFlags& flags) {
  app.add_option("--objective", flags.objective, "Ranking: throughput, energy (tokens/J) or pareto")
      ->capture_default_str();
  app.add_option("--power-budget-w", flags.power_budget_w, "Most mean power of all GPUs together (W)");
  app.add_option("--max-peak-power-w", flags.max_peak_power_w, "Most peak power of any one GPU (W)");
  app.add_option("--power-cap", flags.power_caps_w,
                 "Power caps per GPU to search as an axis, e.g. 400,550,700 (W; each layout is simulated "
                 "under each; `nvidia-smi -pl` sets one)")
      ->delimiter(',');
  app.add_option("--top", flags.top,
                 "Rows of the ranking (the same as --no-prune's on every search measured; docs/PLANNER.md)")
      ->capture_default_str();
  app.add_option("--steps", flags.steps, "Simulated steps per layout")->capture_default_str();
  app.add_option("--jobs,-j,--threads", flags.threads,
                 "Candidates simulated at once, one thread each (default: one per core); the same "
                 "flag as calo sweep's and calo report's --jobs")
      ->check(CLI::Range(0, core::kMaxJobs));
  app.add_option("--max-minutes", flags.max_minutes,
                 "Refuse (exit 2, before any simulation) a space whose search is estimated to take longer on "
                 "these threads, naming the flags that narrow it; 0 = no limit")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

/// What is printed and how the search runs: --json, --all, --no-prune, --uniform-partitions, --progress,
/// --quiet.
void add_output_flags(CLI::App& app, PlanFlags& flags) {
  app.add_flag("--json", flags.json, "Print the result as JSON");
  app.add_flag("--all", flags.show_all, "Also list every candidate with its verdict (oom, pruned, ...)");
  app.add_flag("--no-prune", flags.no_prune,
               "Simulate every fitting layout (no pruning by the step-time bound: exhaustive, slower)");
  app.add_flag("--uniform-partitions", flags.uniform_partitions,
               "Rank pipeline layouts at equal layers per stage only (default: also at the layers per stage "
               "that balance the stages' compute, whichever simulates better)");
  app.add_flag("--progress", flags.progress,
               "Progress bar on stderr even when it is not a terminal (otherwise a line every 10 s)");
  app.add_flag("--quiet,-q", flags.quiet, "No progress on stderr");
}

/// The layout constraints: --tp, --cp, --pp, --dp, --ep, --vpp, --mbs, --zero, --schedule, --recompute,
/// --overlap, --no-overlap (each a value or a comma-separated list).
void add_constraint_flags(CLI::App& app, PlanFlags& flags) {
  plan::LayoutConstraints& constraints = flags.constraints;
  app.add_option("--tp", constraints.tp, "Only these tensor-parallel sizes (e.g. 4 or 2,4)")->delimiter(',');
  app.add_option("--cp", constraints.cp, "Only these context-parallel sizes")->delimiter(',');
  app.add_option("--pp", constraints.pp, "Only these pipeline-parallel sizes")->delimiter(',');
  app.add_option("--dp", constraints.dp, "Only these data-parallel sizes")->delimiter(',');
  app.add_option("--ep", constraints.ep, "Only these expert-parallel sizes (MoE)")->delimiter(',');
  app.add_option("--vpp,--virtual-stages", constraints.vpp, "Only these model chunks per pipeline rank")
      ->delimiter(',');
  app.add_option("--mbs,--micro-batch", constraints.micro_batch, "Only these micro-batch sizes")
      ->delimiter(',');
  app.add_option("--zero", constraints.zero_stage, "Only these ZeRO stages (0-3)")->delimiter(',');
  app.add_option(parallel::kScheduleAxis.flag, flags.schedule,
                 "Only these pipeline schedules (" + parallel::kScheduleAxis.choices() + ")")
      ->delimiter(',');
  app.add_option(parallel::kRecomputeAxis.flag, flags.recompute,
                 "Only these recomputation modes (" + parallel::kRecomputeAxis.choices() + ")")
      ->delimiter(',');
  app.add_flag("--overlap", flags.overlap, "Only layouts that overlap communication with compute");
  app.add_flag("--no-overlap", flags.no_overlap, "Only layouts without overlap");
}

/// The examples and notes under `calo plan --help`.
void add_plan_footer(CLI::App& app) {
  app.footer(
      "Examples:\n"
      "  calo plan --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --top 5\n"
      "  calo plan --model llama3-70b --cluster h100-hgx-calibrated --gpus 64 --gbs 512 --tp 4,8 --mbs 1 "
      "--recompute none,selective   # only these settings\n"
      "Rows within 3 % of the first are equivalent within the model's error (the header says so). The "
      "header "
      "also says whether the cluster is fitted to measurements (prefer a -calibrated preset). "
      "docs/PLANNER.md");
}

/// The job flags of a partition or power subcommand `sub`: layout, cluster, --gpus and --steps
/// (`steps_help`).
void add_sim_job_flags(CLI::App& sub, SimJobFlags& job, const char* steps_help) {
  add_layout_flags(sub, job.layout, false);
  sub.add_option("--cluster,-c", job.cluster, "Cluster preset or YAML file");
  sub.add_option("--gpus,-n", job.gpus, "GPUs; dp = gpus / (tp*cp*pp) unless --dp is given");
  sub.add_option("--steps", job.steps, steps_help)->capture_default_str();
}

/// --slow-gpu and --hot-gpu of a partition or power subcommand `sub`.
void add_gpu_condition_flags(CLI::App& sub, SimJobFlags& job) {
  sub.add_option("--slow-gpu", job.slow_gpus, "RANK=SPEED: a GPU at SPEED x nominal; repeatable");
  sub.add_option("--hot-gpu", job.hot_gpus, "RANK=DEGREES: extra inlet temperature; repeatable");
}

/// Notes which of --gpus and --dp the user gave to subcommand `sub`.
void note_given_flags(const CLI::App& sub, SimJobFlags& job) {
  job.gpus_given = sub.count("--gpus") > 0;
  job.dp_given = sub.count("--dp") > 0;
}

/// The `calo plan partition` subcommand and its flags.
CLI::App* add_partition_subcommand(CLI::App& app, PartitionFlags& partition) {
  CLI::App* sub = app.add_subcommand(
      "partition", "uneven --layers-per-stage for slow or hot GPUs, found by simulation (never hotter)");
  add_sim_job_flags(*sub, partition, "Simulated steps per partition (heat builds up)");
  add_gpu_condition_flags(*sub, partition);
  sub->add_option(
      "--from", partition.from_run,
      "Run (record, bench or sim) whose GPUs' median clock and hottest temperature set speed and heat");
  sub->add_flag("--json", partition.json, "Print the result as JSON");
  return sub;
}

/// The `calo plan power` subcommand and its flags.
CLI::App* add_power_subcommand(CLI::App& app, PowerFlags& power) {
  CLI::App* power_sub = app.add_subcommand(
      "power", "per-stage clock locks that save the energy of stages waiting on the critical one (advice)");
  add_sim_job_flags(*power_sub, power, "Simulated steps per cap set");
  power_sub->add_option("--max-slowdown-pct", power.max_slowdown_pct, "Most step-time growth allowed (%)")
      ->capture_default_str();
  add_gpu_condition_flags(*power_sub, power);
  power_sub->add_flag("--json", power.json, "Print the result as JSON");
  return power_sub;
}

const CommandRegistration kPlan(
    "plan", "find the layout to run: search the layout space through the simulator (ranking, Pareto front)",
    45, [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<PlanFlags>();
      add_job_flags(app, *flags);
      add_ranking_flags(app, *flags);
      add_output_flags(app, *flags);
      add_constraint_flags(app, *flags);
      add_plan_footer(app);
      auto partition = std::make_shared<PartitionFlags>();
      CLI::App* sub = add_partition_subcommand(app, *partition);
      auto power = std::make_shared<PowerFlags>();
      CLI::App* power_sub = add_power_subcommand(app, *power);
      return [flags, partition, sub, power, power_sub] {
        note_given_flags(*sub, *partition);
        note_given_flags(*power_sub, *power);
        if (sub->parsed()) {
          require_model_flag(*sub, "calo plan partition");
          return run_partition(*partition);
        }
        if (power_sub->parsed()) {
          require_model_flag(*power_sub, "calo plan power");
          return run_power(*power);
        }
        return run_plan(*flags);
      };
    });

}  // namespace
}  // namespace calo::cli
