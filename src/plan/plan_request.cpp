#include "plan/plan_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_fields.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/schedule.h"
#include "sim/cluster_trust.h"
#include "sim/cost_model.h"

namespace calo::plan {

namespace {

/// The layout constraints the request gives (InputError naming the flag for an unknown schedule/recompute).
LayoutConstraints constraints_of(const PlanRequest& request) {
  require_input(!(request.overlap && request.no_overlap), "--overlap and --no-overlap: give one of them");
  LayoutConstraints constraints = request.constraints;
  for (const std::string& name : request.schedule)
    constraints.schedule.push_back(parallel::parse_schedule(name));
  for (const std::string& name : request.recompute)
    constraints.recompute.push_back(parallel::parse_recompute(name));
  if (request.overlap || request.no_overlap) constraints.overlap = request.overlap;
  return constraints;
}

/// The precisions `names` asks for that the cluster's card runs; those it cannot are skipped with the reason
/// to `notice`, and none left is an InputError (sim::require_precision's).
std::vector<parallel::Precision> searched_precisions(const std::vector<std::string>& names,
                                                     const sim::ClusterSpec& cluster,
                                                     const core::NoticeFn& notice) {
  std::vector<parallel::Precision> precisions;
  for (const std::string& name : names) {
    const parallel::Precision precision = parallel::kPrecisionAxis.parse(name);
    if (sim::supports_precision(cluster.gpu, precision)) {
      precisions.push_back(precision);
    } else if (names.size() > 1 && notice) {
      notice(fmt::format("calo plan: skipping --precision {}: the {} of cluster {} has no FP8 tensor cores",
                         name, cluster.gpu.name, cluster.name));
    }
  }
  if (precisions.empty())
    sim::require_precision(cluster.gpu, cluster.name, parallel::kPrecisionAxis.parse(names.front()));
  return precisions;
}

/// The request's job checked: --model, --cluster, --gpus, --gbs and --max-cp.
void check_job(const PlanRequest& request) {
  require_input(!request.model.empty(), "--model is required (see `calo model --list`)");
  require_input(!request.cluster.empty(), "--cluster is required (see `calo sim --list`)");
  require_input(request.gpus >= 1, fmt::format("--gpus {}: give the number of GPUs (>= 1)", request.gpus));
  require_input(request.global_batch >= 1,
                fmt::format("--gbs {}: give the global batch in sequences (>= 1)", request.global_batch));
}

}  // namespace

SearchRequest resolve_plan_request(const PlanRequest& asked, const core::NoticeFn& notice) {
  check_job(asked);
  SearchRequest request = asked.search;
  request.space.model = model::load_model(asked.model);
  request.space.gpus = asked.gpus;
  request.space.global_batch = asked.global_batch;
  request.space.seq_length = asked.seq_length;
  const int seq_length = asked.seq_length > 0 ? asked.seq_length : request.space.model.seq_length;
  require_input(asked.max_cp >= 0 && (asked.max_cp & (asked.max_cp - 1)) == 0,
                fmt::format("--max-cp {}: give a power of two (1 = no context parallelism), or leave it out "
                            "for {} at sequences of {} tokens or more and 1 below",
                            asked.max_cp, default_max_cp(kLongSequenceTokens), kLongSequenceTokens));
  request.space.max_cp = asked.max_cp > 0 ? asked.max_cp : default_max_cp(seq_length);
  request.space.trainer = parallel::parse_trainer(asked.trainer);
  request.cluster = sim::load_cluster(asked.cluster);
  request.space.precisions = searched_precisions(asked.precisions, request.cluster, notice);
  request.space.fp8_all_gather = asked.fp8_all_gather;
  require_input(
      !asked.fp8_all_gather ||
          std::ranges::find(request.space.precisions, parallel::Precision::kFp8Tensorwise) !=
              request.space.precisions.end(),
      "--fp8-all-gather gathers the weights of torchao's tensorwise FP8 linears: add fp8 to --precision "
      "(e.g. --precision bf16,fp8) or drop --fp8-all-gather");
  request.space.memory_limit = parse_memory_limit(asked.memory_limit);
  request.space.constraints = constraints_of(asked);
  // A --cp constraint asks for context parallelism even at sequences that do not get it by default.
  for (int cp : asked.constraints.cp) request.space.max_cp = std::max(request.space.max_cp, cp);
  request.objective = parse_objective(asked.objective);
  return request;
}

std::string sim_flags(const Evaluation& evaluation) {
  // calo sim holds a layout to the usable share unless told the card, as the planner was.
  const std::string flags =
      calo_flags(evaluation.candidate.layout) + (evaluation.candidate.tight ? " --memory-limit card" : "");
  return evaluation.power_cap_w > 0 ? fmt::format("{} --power-cap {:g}", flags, evaluation.power_cap_w)
                                    : flags;
}

nlohmann::json to_json(const Evaluation& evaluation) {
  const auto& layout = evaluation.candidate.layout;
  nlohmann::json json = {{"layout", parallel::describe(layout)},
                         {"layout_json", parallel::to_json(layout)},
                         {"verdict", to_string(evaluation.verdict)},
                         {"memory_bytes", evaluation.candidate.memory.total_bytes()},
                         {"fits", evaluation.candidate.fits},
                         {"tight", evaluation.candidate.tight},
                         {"calo_flags", sim_flags(evaluation)},
                         {"power_cap_w", evaluation.power_cap_w > 0 ? nlohmann::json(evaluation.power_cap_w)
                                                                    : nlohmann::json(nullptr)},
                         {"megatron_flags", megatron_flags(layout)}};
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

std::vector<std::string> best_layout_warnings(const SearchRequest& request, const SearchResult& result) {
  if (result.ranking.empty() || request.cluster.collective.lines.empty()) return {};
  const parallel::Layout& best = result.evaluations[result.ranking.front()].candidate.layout;
  return sim::collective_line_warnings(graph::build_graph(request.space.model, best), request.cluster);
}

namespace {

/// The search's counts and times, under their own names.
CALO_JSON_WRITER(write_search_work, SearchResult, excluded, excluded_by, invalid, invalid_by_construction,
                 out_of_memory, tight, pruned, too_large, stopped, graph_ops, probe_ops, built_ops,
                 bound_wall_s, estimated_s, simulated, wall_s)

}  // namespace

nlohmann::json search_json(const PlanRequest& asked, const SearchRequest& request, const SearchResult& result,
                           bool show_all) {
  nlohmann::json json = {{"model", request.space.model.name},
                         {"cluster", request.cluster.name},
                         {"gpus", request.space.gpus},
                         {"global_batch", request.space.global_batch},
                         {"objective", asked.objective},
                         {"constraints", request.space.constraints.describe()},
                         {"memory_limit", to_string(request.space.memory_limit)},
                         {"cluster_trust", sim::cluster_trust(request.cluster).summary},
                         {"equivalent_to_first", equivalent_to_first(result, request.objective)}};
  write_search_work(json, result);
  nlohmann::json ranking = nlohmann::json::array();
  for (std::size_t row = 0; row < result.ranking.size() && static_cast<int>(row) < request.top; ++row)
    ranking.push_back(to_json(result.evaluations[result.ranking[row]]));
  nlohmann::json front = nlohmann::json::array();
  for (std::size_t index : result.pareto) front.push_back(to_json(result.evaluations[index]));
  json["ranking"] = ranking;
  json["pareto"] = front;
  if (auto warnings = best_layout_warnings(request, result); !warnings.empty()) json["warnings"] = warnings;
  if (show_all) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& evaluation : result.evaluations) all.push_back(to_json(evaluation));
    json["candidates"] = all;
  }
  return json;
}

namespace {

nlohmann::json figures_json(const PartitionFigures& figures) {
  return {{"layers_per_stage", figures.layers_per_stage},
          {"gpu_of_stage", figures.gpu_of_stage},
          {"iteration_s", figures.iteration_s},
          {"max_die_c", figures.max_die_c},
          {"fits", figures.fits}};
}

}  // namespace

nlohmann::json partition_json(const PartitionRequest& request, const GpuConditions& conditions,
                              const PartitionResult& result) {
  return {{"uniform", figures_json(result.uniform)},
          {"even_odd", figures_json(result.even_odd)},
          {"best", figures_json(result.best)},
          {"speed_factors", request.options.speed_factors},
          {"inlet_offset_c", request.options.inlet_offset_c},
          {"work_ratio", conditions.work_ratio},
          {"speed_source", conditions.speed_source},
          {"heat_source", conditions.heat_source},
          {"simulated", result.simulated}};
}

}  // namespace calo::plan
