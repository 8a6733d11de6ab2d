#include "cli/plan_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/table.h"
#include "parallel/schedule.h"
#include "plan/plan_request.h"
#include "sim/cluster_trust.h"
#include "sim/placement.h"

namespace calo::cli {

std::function<void(const plan::SearchProgress&)> search_progress_printer(bool terminal) {
  const auto started = std::chrono::steady_clock::now();
  auto elapsed_s = [started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  // Time left: the time so far times the work left over the work done (the total adapts as the bound prunes).
  auto left_s = [](const plan::SearchProgress& progress, double so_far_s) {
    const double done = progress.fraction();
    return done > 0 ? so_far_s * (1 - done) / done : 0.0;
  };
  if (terminal) {
    return [elapsed_s, left_s](const plan::SearchProgress& progress) {
      constexpr int kWidth = 40;
      const bool finished = progress.steps_done == progress.steps_total;
      const int filled = finished ? kWidth : static_cast<int>(kWidth * progress.fraction());
      const double so_far_s = elapsed_s();
      fmt::print(stderr, "\r[{:=<{}}{: <{}}] {:3.0f} %, {:.0f} s{}   ", "", filled, "", kWidth - filled,
                 finished ? 100.0 : 100 * progress.fraction(), so_far_s,
                 finished ? std::string() : fmt::format(", about {:.0f} s left", left_s(progress, so_far_s)));
      if (finished) fmt::print(stderr, "\n");
    };
  }
  auto last_s = std::make_shared<double>(0.0);
  return [elapsed_s, left_s, last_s](const plan::SearchProgress& progress) {
    constexpr double kEveryS = 10;
    const double so_far_s = elapsed_s();
    const bool finished = progress.steps_done == progress.steps_total;
    if (!finished && so_far_s - *last_s < kEveryS) return;
    *last_s = so_far_s;
    fmt::print(
        stderr, "calo plan: {}/{} layout steps ({:.0f} % of the work), {:.0f} s{}\n", progress.steps_done,
        progress.steps_total, finished ? 100.0 : 100 * progress.fraction(), so_far_s,
        finished ? std::string(", done") : fmt::format(", about {:.0f} s left", left_s(progress, so_far_s)));
  };
}

std::string stopped_text(const plan::SearchRequest& request, const plan::SearchResult& result) {
  return fmt::format(
      "stopped at --max-minutes {:g} after {:.0f} s: {} of the {} evaluations that fit memory were not "
      "started, so the ranking covers only the {} simulated; for the whole space give --max-minutes {:.0f} "
      "(estimated {:.1f} min) or narrow it",
      request.max_minutes, result.wall_s, result.stopped, result.stopped + result.simulated + result.pruned,
      result.simulated, std::ceil(std::max(result.estimated_s, result.wall_s) * 2 / 60),
      result.estimated_s / 60);
}

std::string excluded_text(const std::vector<std::pair<std::string, int>>& excluded_by) {
  std::vector<std::string> parts;
  for (const auto& [flag, count] : excluded_by) parts.push_back(fmt::format("{} by {}", count, flag));
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

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

/// The layout as the tables name it, with its power cap when one was searched ("..., cap 500 W").
std::string layout_label(const plan::Evaluation& evaluation) {
  const std::string layout = parallel::describe(evaluation.candidate.layout);
  return evaluation.power_cap_w > 0 ? fmt::format("{}, cap {:g} W", layout, evaluation.power_cap_w) : layout;
}

/// The text cell of `figure` for its raw value.
std::string figure_cell(const plan::FigureColumn& figure, double value) {
  switch (figure.shown) {
    case plan::Shown::kSignificant:
      return core::format_significant(figure.scale * value, figure.digits);
    case plan::Shown::kSi:
      return core::format_si(figure.scale * value, figure.unit, figure.digits);
    case plan::Shown::kFixed:
      break;
  }
  return fmt::format("{:.{}f}", figure.scale * value, figure.digits);
}

void add_row(core::TextTable& table, const std::string& rank, const plan::Evaluation& evaluation) {
  const bool simulated = evaluation.iteration_s > 0;
  const std::string memory = core::format_bytes(evaluation.candidate.memory.total_bytes());
  std::vector<std::string> row{rank, layout_label(evaluation),
                               evaluation.candidate.tight ? memory + " tight" : memory};
  for (const plan::FigureColumn& figure : plan::kFigureColumns) {
    if (figure.header == nullptr) continue;
    row.push_back(simulated ? figure_cell(figure, evaluation.*figure.value) : std::string("-"));
  }
  row.push_back(evaluation.pareto ? "*" : std::string(plan::to_string(evaluation.verdict)));
  table.add_row(row);
}

core::TextTable make_table() {
  std::vector<std::string> headers{"#", "layout", "memory"}, units{"", "", "per GPU"};
  for (const plan::FigureColumn& figure : plan::kFigureColumns) {
    if (figure.header == nullptr) continue;
    headers.emplace_back(figure.header);
    units.emplace_back(figure.shown == plan::Shown::kSi ? "" : figure.unit);  // kSi: each cell names its unit
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
void print_front(const plan::SearchRequest& request, const plan::SearchResult& result, int top,
                 bool show_all) {
  core::TextTable front = make_table();
  const bool whole = show_all || request.objective == plan::Objective::kPareto ||
                     result.pareto.size() <= static_cast<std::size_t>(std::max(top, 0));
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

}  // namespace

void print_search_text(const plan::SearchRequest& request, const plan::SearchResult& result, int top,
                       bool show_all) {
  const std::string constraints = request.space.constraints.describe();
  fmt::print("# calo plan: {} on {} x {}, gbs {}, objective {}{}\n", request.space.model.name,
             request.space.gpus, request.cluster.name, request.space.global_batch,
             plan::to_string(request.objective), constraints.empty() ? "" : ", only " + constraints);
  fmt::print("# cluster {}\n", sim::cluster_trust(request.cluster).summary);
  if (!request.power_caps_w.empty()) {
    const double lowest_cap_w = *std::min_element(request.power_caps_w.begin(), request.power_caps_w.end());
    if (const std::string line = sim::power_cap_trust(request.cluster, lowest_cap_w); !line.empty())
      fmt::print("# {}\n", line);
  }
  fmt::print(
      "# {} {}: {}{} invalid combinations skipped{}, {}, {} pruned by the lower bound, "
      "{}{} simulated; {:.2f} s (estimated {:.0f} s)\n",
      result.evaluations.size(),
      request.power_caps_w.empty()
          ? "layouts"
          : fmt::format("(layout, power cap) pairs over {} caps", request.power_caps_w.size()),
      result.excluded > 0 ? fmt::format("{} outside the constraints ({}), ", result.excluded,
                                        excluded_text(result.excluded_by))
                          : std::string(),
      result.invalid,
      result.invalid_by_construction > 0
          ? fmt::format(" ({} by construction: their schedule refuses them)", result.invalid_by_construction)
          : std::string(),
      memory_counts(request, result), result.pruned,
      result.too_large > 0 ? fmt::format("{} too large to simulate, ", result.too_large) : std::string(),
      result.simulated, result.wall_s, result.estimated_s);
  if (result.stopped > 0) fmt::print("# STOPPED: {}\n", stopped_text(request, result));
  core::TextTable table = make_table();
  const int rows = std::min<int>(top, static_cast<int>(result.ranking.size()));
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
               request.cluster.name, request.space.gpus, plan::sim_flags(evaluation));
    fmt::print("     megatron: {}\n", plan::megatron_flags(layout));
    if (layout.uneven_partition()) fmt::print("     {}\n", partition_line(evaluation));
  }
  std::vector<std::string> warnings = plan::best_layout_warnings(request, result);
  if (std::string tight = tight_pick_warning(request, result); !tight.empty()) warnings.push_back(tight);
  for (const std::string& warning : warnings) fmt::print("# WARNING (layout 1): {}\n", warning);
  print_front(request, result, top, show_all);
  if (show_all) {
    core::TextTable all = make_table();
    for (const auto& evaluation : result.evaluations) add_row(all, "", evaluation);
    fmt::print("# every candidate (front column: verdict)\n{}", all.render());
  }
}

void print_power_text(const plan::PowerPlanRequest& request, const plan::PowerPlanResult& result,
                      double max_slowdown_pct) {
  const model::ModelSpec& model = request.model;
  const parallel::Layout& layout = request.layout;
  const int world = layout.world_size();
  fmt::print("# calo plan power: {} {} on {} x {}, step time may grow {:.1f} %, {} clock sets simulated\n",
             model.name, parallel::describe(layout), world, request.cluster.name, max_slowdown_pct,
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
}

void print_partition_text(const plan::PartitionRequest& request, const plan::PartitionResult& result,
                          const std::string& from_run, const plan::GpuConditions& conditions, int steps) {
  const model::ModelSpec& model = request.model;
  const parallel::Layout& layout = request.layout;
  const int world = layout.world_size();
  auto joined = [](const std::vector<int>& layers) { return fmt::format("{}", fmt::join(layers, ",")); };
  fmt::print("# calo plan partition: {} {} on {} x {}, {} step(s) per partition, {} simulated\n", model.name,
             parallel::describe(layout), world, request.cluster.name, steps, result.simulated);
  if (!from_run.empty()) print_conditions(from_run, conditions);
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
}

}  // namespace calo::cli
