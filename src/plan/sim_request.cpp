#include "plan/sim_request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/table.h"
#include "plan/suggest.h"
#include "sim/cost_model.h"
#include "sim/gpu_settings.h"
#include "sim/trace_events.h"
#ifdef CALO_SIM_HAS_STORE
#include "sim/store_run.h"
#include "store/run_store.h"
#endif

namespace calo::plan {

std::string describe_twin(const TwinNote& twin, int warmup_steps, int measured_steps) {
  std::string text =
      fmt::format("twin of {}: {} warm-up + {} measured steps", twin.run_dir, warmup_steps, measured_steps);
  if (std::isfinite(twin.initial_die_c))
    text += fmt::format(", from {:.1f} C (the run's reading before its GPU loaded)", twin.initial_die_c);
  if (std::isfinite(twin.card_r_scale)) {
    text += fmt::format(", card {}: thermal R x {:.3f} (fitted by the cluster's calibration)", twin.card,
                        twin.card_r_scale);
  } else if (!twin.card.empty()) {
    text += fmt::format(", card {}: not in the cluster's calibration, so the typical card's heat", twin.card);
  }
  return text;
}

std::string check_memory(const model::ModelSpec& model, const parallel::Layout& layout,
                         const sim::ClusterSpec& cluster, bool allow_oom, MemoryLimit limit) {
  const parallel::MemoryBreakdown memory = parallel::memory_per_gpu(model, layout);
  if (fits_memory(memory, cluster.gpu.memory_bytes)) return "";
  std::string message = fmt::format(
      "{} with {} needs {} per GPU (stage {}, {} micro-batches in flight), more than the {} usable of a {} "
      "({} less {:.0f} % fragmentation and {} runtime)",
      model.name, parallel::describe(layout), describe_memory(memory), memory.stage,
      memory.inflight_microbatches, core::format_bytes(usable_memory_bytes(cluster.gpu.memory_bytes)),
      cluster.gpu.name, core::format_bytes(cluster.gpu.memory_bytes), parallel::kFragmentationFraction * 100,
      core::format_bytes(parallel::kRuntimeReserveBytes));
  const bool tight = parallel::is_tight(memory.total_bytes(), cluster.gpu.memory_bytes);
  if (tight) message += "; " + parallel::card_headroom_text(memory.total_bytes(), cluster.gpu.memory_bytes);
  if (tight && limit == MemoryLimit::kCard) return "tight (--memory-limit card): " + message;
  if (allow_oom) return "does not fit memory (simulated anyway, --allow-oom): " + message;
  const FittingSuggestion suggestion =
      suggest_fitting_layouts(model, layout, cluster.node.gpus, cluster.gpu.memory_bytes);
  const std::vector<Candidate>& fitting = suggestion.fitting;
  message += ".\n";
  if (fitting.empty()) {
    const std::vector<int>& gpus = suggestion.nearest_gpus;
    message += fmt::format(
        "No layout of {} GPUs fits this model at --gbs {}; {}, or --allow-oom to simulate anyway.",
        layout.world_size(), layout.global_batch,
        gpus.empty()
            ? std::string("use more GPUs (`calo plan` lists what fits)")
            : fmt::format("nearest GPU counts with a fitting layout: --gpus {} (`calo plan` ranks them)",
                          fmt::join(gpus, " or --gpus ")));
  } else {
    message +=
        fmt::format("Layouts of the same {} GPUs and batch that fit (or --allow-oom to simulate anyway):",
                    layout.world_size());
    for (const Candidate& candidate : fitting) {
      message += fmt::format("\n  {}  ({} per GPU)", calo_flags(candidate.layout),
                             core::format_bytes(candidate.memory.total_bytes()));
    }
  }
  throw InputError(message);
}

namespace {

/// The command line that reproduces this simulation (from the resolved values; CLI11 does not keep argv).
[[maybe_unused]] std::string command_line(const SimRequest& request, int world) {
  const parallel::Layout& layout = request.layout;
  std::string text =
      request.from.empty()
          ? fmt::format("calo sim --model {} --cluster {} --gpus {} {} --steps {}", request.model_arg,
                        request.cluster_arg, world, calo_flags(layout), request.steps)
          : fmt::format("calo sim --from {} --cluster {} --steps {}", request.from, request.cluster_arg,
                        request.steps);
  if (request.warmup > 0) text += fmt::format(" --warmup {}", request.warmup);
  if (request.eval) text += " --eval";
  if (request.from.empty() && request.layers) text += fmt::format(" --layers {}", *request.layers);
  // calo_flags names only unfused attention; a cluster file may make unfused the default, so say fused too.
  if (request.from.empty() && layout.attention == parallel::AttentionImpl::kFused)
    text += " --attention fused";
  if (request.initial_die_c >= 0) text += fmt::format(" --initial-temp {:.1f}", request.initial_die_c);
  for (const auto& entry : request.slow_gpus) text += " --slow-gpu " + entry;
  for (const auto& entry : request.hot_gpus) text += " --hot-gpu " + entry;
  for (const auto& entry : request.power_caps) text += " --power-cap " + entry;
  if (request.no_power_cap) text += " --no-power-cap";
  if (request.no_thermal) text += " --no-thermal";
  if (request.memory_limit != MemoryLimit::kUsable)
    text += std::string(" --memory-limit ") + to_string(request.memory_limit);
  if (request.allow_oom) text += " --allow-oom";
  if (request.cost_given)
    text += fmt::format(" --tokens {:g} --price-per-kwh {:g} --currency {} --pue {:g} --host-power-w {:g}",
                        request.cost.tokens, request.cost.price_per_kwh, request.cost.currency,
                        request.cost.pue, request.cost.host_power_w);
  return text;
}

/// The simulation options of the flags for `world` GPUs (checking the cost flags and --op-spans first).
sim::SimOptions sim_options(const SimRequest& request, int world) {
  const sim::ClusterSpec& cluster = request.cluster;
  const TwinNote& twin = request.twin;
  sim::SimOptions options;
  options.steps = request.steps + request.warmup;  // as for calo bench: warm-up steps come before --steps
  options.warmup_steps = request.warmup;
  options.power_cap = !request.no_power_cap;
  options.thermal = !request.no_thermal;
  options.speed_factors = sim::per_gpu_values(request.slow_gpus, world, 1.0, "--slow-gpu");
  options.inlet_offset_c = sim::per_gpu_values(request.hot_gpus, world, 0.0, "--hot-gpu");
  options.power_limit_w = sim::power_caps_w(request.power_caps, world, cluster.gpu);
  if (request.cost_given) sim::check_cost_inputs(request.cost);  // before the simulation, not after
  options.initial_die_c = request.initial_die_c >= 0 ? request.initial_die_c : twin.initial_die_c;
  require_input(
      std::isfinite(request.max_power_samples) && request.max_power_samples >= 0,
      fmt::format("--max-power-samples {}: give a count >= 0 (0 = no limit)", request.max_power_samples));
  options.max_power_samples = request.max_power_samples;
  require_input(
      request.op_spans != "all" || world <= kMaxAllOpSpansGpus,
      fmt::format("--op-spans all keeps every GPU's spans, for at most {} GPUs (Llama3-70B TP8-PP4-DP2 on 64 "
                  "GPUs: 1.1 GB); this layout has {} GPUs: use --op-spans distinct (one GPU per distinct "
                  "timeline, the default)",
                  kMaxAllOpSpansGpus, world));
  const bool store_op_spans = !request.no_store && request.op_spans != "none";
  options.record_timeline = !request.timeline.empty() || store_op_spans;
  options.timeline_distinct_ranks = request.timeline.empty() && request.op_spans == "distinct";
  options.progress = request.progress;
  return options;
}

/// The "from" JSON object of a --from simulation (null without --from).
nlohmann::json twin_json(const TwinNote& twin) {
  nlohmann::json from = nullptr;
  if (!twin.run_dir.empty()) {
    from = {{"run", twin.run_dir}, {"card", twin.card}};
    from["initial_die_c"] = core::json_number(twin.initial_die_c);
    from["card_r_scale"] = core::json_number(twin.card_r_scale);
  }
  return from;
}

/// Bytes of the regular files in `dir` (a run directory: run.db and its journal).
[[maybe_unused]] std::uintmax_t directory_bytes(const std::filesystem::path& dir) {
  std::uintmax_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  return bytes;
}

/// Stores the simulation as a run (unless --no-store), with `json`'s "cost" when there is one; returns where
/// ("" = not stored) and adds run_dir to `json`.
std::string store_sim(const SimRequest& request, const SimRun& outcome, const sim::SimOptions& options,
                      const nlohmann::json& from, nlohmann::json& json) {
  std::string stored;
#ifdef CALO_SIM_HAS_STORE
  if (!request.no_store) {
    const int world = outcome.graph.world_size();
    const std::string name = fmt::format("sim-{}-{}gpu", request.model.name, world);
    const std::filesystem::path run_dir =
        request.out.empty() ? store::make_run_dir("runs", name) : std::filesystem::path(request.out);
    nlohmann::json config = {
        {"model", model::to_json(request.model)},   {"layout", parallel::to_json(request.layout)},
        {"cluster", sim::to_json(request.cluster)}, {"steps", request.steps},
        {"power_cap", options.power_cap},           {"thermal", options.thermal}};
    config["warmup"] = request.warmup;
    config["step"] = request.eval ? "evaluation" : "training";
    config["op_spans"] =
        options.record_timeline ? (options.timeline_distinct_ranks ? "distinct" : "all") : "none";
    if (!from.is_null()) config["from"] = from;
    if (!outcome.warnings.empty()) config["warnings"] = outcome.warnings;
    if (json.contains("cost")) config["cost"] = json["cost"];
    sim::store_sim_run(run_dir, name, command_line(request, world), config, outcome.graph, request.cluster,
                       outcome.result);
    const std::uintmax_t bytes = directory_bytes(run_dir);
    json["run_dir"] = run_dir.string();
    json["run_bytes"] = bytes;
    stored =
        fmt::format("{}, {}{}", run_dir.string(), core::format_bytes(static_cast<double>(bytes)),
                    config["op_spans"] == "none"
                        ? "; no op spans (--op-spans distinct stores one GPU's ops per distinct timeline)"
                        : fmt::format("; op spans of {} GPUs", config["op_spans"].get<std::string>()));
    const std::string file = run_dir.filename().string();
    const std::size_t dash = file.rfind('-');
    if (request.out.empty() && dash != std::string::npos && dash + 1 < file.size() &&
        file.find_first_not_of("0123456789", dash + 1) == std::string::npos)
      stored += fmt::format("; {} held an earlier run (give --out DIR to choose)", file.substr(0, dash));
  }
#else
  (void)options;
  (void)from;
  (void)json;
  if (!request.no_store && !request.out.empty()) {
    core::write_file_atomically(request.out, sim::to_json(outcome.result, true).dump(2) + "\n", "--out");
    stored = request.out;
  }
#endif
  return stored;
}

/// The cost of training --tokens at the simulated rate: adds "cost" to `json`, returns the text lines.
std::string add_cost(const SimRequest& request, const SimRun& outcome, nlohmann::json& json) {
  const sim::SimResult& result = outcome.result;
  const int world = outcome.graph.world_size();
  const int gpus_per_node = request.cluster.node.gpus;
  const double energy_per_token_j = json["energy_per_step_j"].get<double>() / result.tokens_per_step;
  const int nodes = (world + gpus_per_node - 1) / gpus_per_node;
  const sim::CostEstimate cost =
      sim::estimate_cost(sim::tokens_per_s(result), energy_per_token_j, nodes, request.cost);
  json["cost"] = {{"tokens", request.cost.tokens},
                  {"wall_s", cost.wall_s},
                  {"gpu_energy_j", cost.gpu_energy_j},
                  {"host_energy_j", cost.host_energy_j},
                  {"facility_energy_j", cost.facility_energy_j},
                  {"pue", request.cost.pue},
                  {"host_power_w", request.cost.host_power_w},
                  {"price_per_kwh", request.cost.price_per_kwh},
                  {"currency", request.cost.currency},
                  {"cost", cost.cost}};
  return sim::describe_cost(cost, request.cost, world, nodes);
}

/// The job's graph; appends the memory and collective warnings to `warnings`, each handed to `warn`.
graph::Graph build_sim_graph(const SimRequest& request, std::vector<std::string>& warnings,
                             const core::NoticeFn& warn) {
  sim::require_precision(request.cluster.gpu, request.cluster.name,
                         request.layout.precision);  // before memory: the card cannot run it
  if (std::string memory = check_memory(request.model, request.layout, request.cluster, request.allow_oom,
                                        request.memory_limit);
      !memory.empty())
    warnings.push_back(std::move(memory));
  graph::Graph graph = graph::build_graph(request.model, request.layout);
  if (request.eval) graph = graph::evaluation_graph(std::move(graph));
  for (std::string& line : sim::collective_line_warnings(graph, request.cluster))
    warnings.push_back(std::move(line));
  if (warn) {
    for (const std::string& warning : warnings) warn(warning);
  }
  return graph;
}

}  // namespace

SimRun run_simulation(const SimRequest& request, const core::NoticeFn& warn) {
  std::vector<std::string> warnings;
  graph::Graph graph = build_sim_graph(request, warnings, warn);
  const int world = graph.world_size();
  require_input(request.timeline.empty() || world <= kMaxTimelineGpus,
                fmt::format("--timeline is for small cases (<= {} GPUs); this layout has {} GPUs",
                            kMaxTimelineGpus, world));
  const sim::SimOptions options = sim_options(request, world);
  sim::SimResult result = sim::simulate(graph, request.cluster, options);
  if (!request.timeline.empty()) sim::write_trace_events(request.timeline, graph, result);
  nlohmann::json json = sim::to_json(result, request.per_gpu);
  const parallel::MemoryBreakdown memory = parallel::memory_per_gpu(request.model, request.layout);
  json["memory"] = parallel::to_json(memory, request.cluster.gpu.memory_bytes);
  json["step"] = request.eval ? "evaluation" : "training";
  if (!warnings.empty()) json["warnings"] = warnings;
  const nlohmann::json from = twin_json(request.twin);
  if (!from.is_null()) json["from"] = from;
  SimRun run{std::move(graph), std::move(result), memory, std::move(warnings), nlohmann::json(), "", ""};
  // The cost first: the stored run keeps it, so that `calo compare` can say which layout costs less.
  if (request.cost_given) run.cost_text = add_cost(request, run, json);
  run.stored = store_sim(request, run, options, from, json);
  run.json = std::move(json);
  return run;
}

}  // namespace calo::plan
