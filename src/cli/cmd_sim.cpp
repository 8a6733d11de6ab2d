// `calo sim [--model M] [layout flags] --cluster NAME|FILE --gpus N [--steps K] [--json] [--timeline FILE]`:
// simulates the execution graph of one training job on a modeled cluster (time, power, heat, throttling).
// `calo sim --from RUN --cluster NAME|FILE` simulates the twin of a measured run (its job, steps and start).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#ifdef CALO_SIM_HAS_STORE
#include "calibrate/measurement.h"
#include "calibrate/twin.h"
#include "core/output_file.h"
#endif
#include "cli/command.h"
#include "cli/layout_flags.h"
#include "core/config.h"
#include "core/error.h"
#include "core/table.h"
#include "graph/graph.h"
#include "parallel/memory.h"
#include "plan/layout_space.h"
#include "plan/suggest.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"
#include "sim/job_cost.h"
#include "sim/simulate.h"
#ifdef CALO_SIM_HAS_STORE
#include "sim/store_run.h"
#include "store/run_store.h"
#endif

namespace calo::cli {
namespace {

/// Most GPUs `--op-spans all` stores every GPU's spans for (Llama3-70B TP8-PP4-DP2 on 64 GPUs: 1.1 GB,
/// docs/benchmarks/analysis.md).
constexpr int kMaxAllOpSpansGpus = 64;

struct SimFlags {
  LayoutFlags layout;
  std::string cluster;
  int gpus = 0;
  int steps = 1;
  int warmup = 0;
  bool json = false;
  bool per_gpu = false;
  bool list = false;
  std::string timeline;
  std::string out;
  bool no_store = false;
  std::string op_spans = "none";  ///< --op-spans distinct|all|none (--no-op-spans: none)
  bool no_power_cap = false;
  bool no_thermal = false;
  std::vector<std::string> slow_gpus;
  std::vector<std::string> hot_gpus;
  std::vector<std::string> power_caps;  ///< --power-cap W | RANK=W
  sim::CostInputs cost;                 ///< --tokens, --price-per-kwh, --currency, --pue, --host-power-w
  bool cost_given = false;              ///< any of the cost flags was given
  double initial_die_c = -1;
  bool dp_given = false;
  bool gpus_given = false;
  bool steps_given = false;
  bool warmup_given = false;
  bool allow_oom = false;
  bool eval = false;  ///< --eval: simulate an evaluation step (forward passes only)
  double max_power_samples = sim::kMaxSimPowerSamples;  ///< --max-power-samples (0 = no limit)
  std::string memory_limit = "usable";        ///< --memory-limit: usable or card (tight layouts accepted)
  std::string from;                           ///< --from RUN: the measured run to simulate the twin of
  std::vector<const CLI::Option*> job_flags;  ///< the model and layout flags (which --from replaces)
};

/// What a simulation of a measured run (--from) took from the run, for the output and the stored run.
struct TwinNote {
  std::string run_dir;         ///< the run
  double card_r_scale = NAN;   ///< the card's thermal R scale applied; NaN = the typical card's
  std::string card;            ///< the card's UUID
  double initial_die_c = NAN;  ///< start temperature taken from the run; NaN = not taken
};

/// The command line that reproduces this simulation (from the resolved values; CLI11 does not keep argv).
[[maybe_unused]] std::string command_line(const SimFlags& flags, const parallel::Layout& layout, int world) {
  std::string text =
      flags.from.empty()
          ? fmt::format("calo sim --model {} --cluster {} --gpus {} {} --steps {}", flags.layout.model,
                        flags.cluster, world, plan::calo_flags(layout), flags.steps)
          : fmt::format("calo sim --from {} --cluster {} --steps {}", flags.from, flags.cluster, flags.steps);
  if (flags.warmup > 0) text += fmt::format(" --warmup {}", flags.warmup);
  if (flags.eval) text += " --eval";
  if (flags.from.empty() && flags.layout.layers) text += fmt::format(" --layers {}", *flags.layout.layers);
  // calo_flags names only unfused attention; a cluster file may make unfused the default, so say fused too.
  if (flags.from.empty() && layout.attention == parallel::AttentionImpl::kFused) text += " --attention fused";
  if (flags.initial_die_c >= 0) text += fmt::format(" --initial-temp {:.1f}", flags.initial_die_c);
  for (const auto& entry : flags.slow_gpus) text += " --slow-gpu " + entry;
  for (const auto& entry : flags.hot_gpus) text += " --hot-gpu " + entry;
  for (const auto& entry : flags.power_caps) text += " --power-cap " + entry;
  if (flags.no_power_cap) text += " --no-power-cap";
  if (flags.no_thermal) text += " --no-thermal";
  if (flags.memory_limit != "usable") text += " --memory-limit " + flags.memory_limit;
  if (flags.allow_oom) text += " --allow-oom";
  if (flags.cost_given)
    text += fmt::format(" --tokens {:g} --price-per-kwh {:g} --currency {} --pue {:g} --host-power-w {:g}",
                        flags.cost.tokens, flags.cost.price_per_kwh, flags.cost.currency, flags.cost.pue,
                        flags.cost.host_power_w);
  return text;
}

/// The memory verdict of the layout (the model `calo bench` applies): empty when it fits; a tight layout
/// under --memory-limit card: the warning to print and store; else, without --allow-oom, an InputError with
/// the breakdown and the nearest layouts of the same job that fit, and with --allow-oom the warning.
std::string check_memory(const model::ModelSpec& model, const parallel::Layout& layout,
                         const sim::ClusterSpec& cluster, bool allow_oom, plan::MemoryLimit limit) {
  const parallel::MemoryBreakdown memory = parallel::memory_per_gpu(model, layout);
  if (plan::fits_memory(memory, cluster.gpu.memory_bytes)) return "";
  std::string message = fmt::format(
      "{} with {} needs {} per GPU (stage {}, {} micro-batches in flight), more than the {} usable of a {} "
      "({} less {:.0f} % fragmentation and {} runtime)",
      model.name, parallel::describe(layout), plan::describe_memory(memory), memory.stage,
      memory.inflight_microbatches, core::format_bytes(plan::usable_memory_bytes(cluster.gpu.memory_bytes)),
      cluster.gpu.name, core::format_bytes(cluster.gpu.memory_bytes), parallel::kFragmentationFraction * 100,
      core::format_bytes(parallel::kRuntimeReserveBytes));
  const bool tight = parallel::is_tight(memory.total_bytes(), cluster.gpu.memory_bytes);
  if (tight) message += "; " + parallel::card_headroom_text(memory.total_bytes(), cluster.gpu.memory_bytes);
  if (tight && limit == plan::MemoryLimit::kCard) return "tight (--memory-limit card): " + message;
  if (allow_oom) return "does not fit memory (simulated anyway, --allow-oom): " + message;
  const plan::FittingSuggestion suggestion =
      plan::suggest_fitting_layouts(model, layout, cluster.node.gpus, cluster.gpu.memory_bytes);
  const std::vector<plan::Candidate>& fitting = suggestion.fitting;
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
    for (const plan::Candidate& candidate : fitting) {
      message += fmt::format("\n  {}  ({} per GPU)", plan::calo_flags(candidate.layout),
                             core::format_bytes(candidate.memory.total_bytes()));
    }
  }
  throw InputError(message);
}

void write_timeline(const std::string& path, const graph::Graph& graph, const sim::SimResult& result) {
  // Chrome/Perfetto trace-event JSON: one process per rank, one thread per stream, times in microseconds.
  nlohmann::json events = nlohmann::json::array();
  for (int rank = 0; rank < static_cast<int>(result.timeline.size()); ++rank) {
    const auto& program = graph.program(rank);
    for (int stream = 0; stream < graph::kNumStreams; ++stream) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", stream},
                        {"args", {{"name", graph::to_string(graph::Stream(stream))}}}});
    }
    for (const sim::OpSpan& span : result.timeline[rank]) {
      const graph::Op& op = program.ops[span.op];
      events.push_back(
          {{"ph", "X"},
           {"name", graph::describe(op)},
           {"cat", graph::to_string(op.kind)},
           {"pid", rank},
           {"tid", static_cast<int>(op.stream)},
           {"ts", span.begin_s * 1e6},
           {"dur", (span.end_s - span.begin_s) * 1e6},
           {"args",
            {{"microbatch", op.microbatch}, {"layer", op.layer}, {"phase", graph::to_string(op.phase)}}}});
    }
  }
  core::write_file_atomically(
      path, nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n", "--timeline");
}

/// Every step's figures (ten rows at most, the last step always) of a simulation of more than one step;
/// `gpu` is the device noun ("GPU" or "rank").
void print_steps(const sim::SimResult& result, const std::string& gpu) {
  if (result.steps <= 1) return;
  core::TextTable steps(
      {"step", "iteration", "mean power", "highest " + gpu, "max die", "min clock", "throttled"});
  steps.set_units({"", "s", "W/" + gpu, "mean W", "C", "MHz", gpu + "s"});
  const int stride = std::max(1, result.steps / 10);
  for (int step = 0; step < result.steps; ++step) {
    if (step % stride != 0 && step + 1 != result.steps) continue;
    const auto& item = result.step_results[step];
    steps.add_row({std::to_string(step), fmt::format("{:.4f}", item.iteration_s),
                   fmt::format("{:.1f}", item.mean_power_w), fmt::format("{:.1f}", item.max_power_w),
                   fmt::format("{:.1f}", item.max_die_c), fmt::format("{:.0f}", item.min_clock_mhz),
                   std::to_string(item.throttled_gpus)});
  }
  fmt::print("{}", steps.render());
}

/// The result as a table; `card_limit_w` is the card's own power limit (a lower one is a --power-cap).
/// `cpu_host`: the devices are the CPU backend's MPI ranks, whose power and heat are placeholders; `fp8`: the
/// linears ran in FP8 (MFU then says it is against the bf16 peak).
void print_summary(const sim::SimResult& result, const nlohmann::json& json, double card_limit_w,
                   bool cpu_host, bool fp8) {
  const std::string gpu = cpu_host ? "rank" : "GPU";  // the device noun of every row
  fmt::print("# calo sim: {} on {} x {} ({})\n", result.model, result.world, result.cluster, result.layout);
  fmt::print("# {} step(s), {} engine op events, {:.3f} s simulation wall time\n", result.steps,
             result.op_events, result.wall_s);
  core::TextTable table({"figure", "value", "unit"});
  auto row = [&table](const std::string& figure, double value, const std::string& unit, int digits = 3) {
    table.add_row({figure, fmt::format("{:.{}f}", value, digits), unit});
  };
  row("iteration time", result.iteration_s, "s", 4);
  row("tokens/s", sim::tokens_per_s(result), "tokens/s", 0);
  const double model_tflops = sim::model_flops_per_gpu(result) / 1e12;
  if (model_tflops < 0.1) {  // a CPU core: GFLOP/s, not "0.0 TFLOP/s"
    row(fmt::format("model GFLOP/s per {}", gpu), model_tflops * 1e3, "GFLOP/s", 1);
  } else {
    row(fmt::format("model TFLOP/s per {}", gpu), model_tflops, "TFLOP/s", 1);
  }
  row(fp8 ? "MFU (against the bf16 peak)" : "MFU", 100.0 * sim::mfu(result), "%", 1);
  // Energy and the whole job's power with an SI prefix (2.23 MJ, 3.11 MW): the figures a person plans by.
  auto si_row = [&table](const std::string& figure, double value, const std::string& unit) {
    const std::string shown = core::format_si(value, unit);
    const std::size_t space = shown.find(' ');
    table.add_row({figure, shown.substr(0, space), shown.substr(space + 1)});
  };
  const double energy_per_step_j = json["energy_per_step_j"].get<double>();
  si_row(fmt::format("energy per step (all {0}s; {0}s only)", gpu), energy_per_step_j, "J");
  table.add_row({fmt::format("energy per token (all {}s)", gpu),
                 core::format_significant(energy_per_step_j / result.tokens_per_step, 4), "J"});
  si_row(fmt::format("power of all {} {}s (energy / time)", result.world, gpu),
         json["mean_power_w"].get<double>() * result.world, "W");
  row(fmt::format("mean power per {} (energy / time)", gpu), json["mean_power_w"].get<double>(), "W", 1);
  row(fmt::format("peak power, highest driver sample (any {})", gpu), json["peak_power_w"].get<double>(), "W",
      1);
  const bool uniform = std::all_of(result.gpus.begin(), result.gpus.end(), [&](const sim::GpuResult& item) {
    return item.power_limit_w == result.power_limit_w;
  });
  row(!uniform                              ? fmt::format("power cap, highest {}", gpu)
      : result.power_limit_w < card_limit_w ? std::string("power cap (--power-cap; a ~1 s average)")
      : cpu_host                            ? std::string("power limit (placeholder)")
                                            : std::string("power limit (the card's; a ~1 s average)"),
      result.power_limit_w, "W", 0);
  row("hottest die", json["max_die_c"].get<double>(), "C", 1);
  row(fmt::format("power-cap throttle per {} (all steps)", gpu), json["throttle_power_cap_s"].get<double>(),
      "s", 3);
  row(fmt::format("thermal throttle per {} (all steps)", gpu), json["throttle_thermal_s"].get<double>(), "s",
      3);
  row(fmt::format("compute busy per {} (last step)", gpu), result.compute_busy_s, "s", 4);
  for (int klass = 0; klass < sim::kNumCommClasses; ++klass) {
    if (result.comm_transfer_s[klass] <= 0) continue;
    table.add_row({fmt::format("exposed {} comm (of {:.4f} s)", sim::comm_class_name(klass),
                               result.comm_transfer_s[klass]),
                   fmt::format("{:.4f}", result.exposed_comm_s[klass]), "s"});
  }
  row("bubble + straggler wait (last step)", result.wait_s, "s", 4);
  fmt::print("{}", table.render());
  if (cpu_host) {
    fmt::print(
        "# a CPU host: its ranks' power, heat and throttling above are cpu-host's placeholder per-core "
        "figures "
        "(no CPU power is measured); time and throughput are what calibration fits\n");
  }
  print_steps(result, gpu);
}

/// The job given by --model and the layout flags (and --gpus), the attention core the cluster's by default.
std::pair<model::ModelSpec, parallel::Layout> job_from_flags(SimFlags& flags,
                                                             const sim::ClusterSpec& cluster) {
  apply_gpus(flags.gpus, flags.gpus_given, flags.dp_given, flags.layout);
  // The attention core is the cluster file's unless --attention says otherwise.
  if (flags.layout.attention.empty()) flags.layout.attention = parallel::to_string(cluster.attention);
  return resolve(flags.layout);
}

#ifdef CALO_SIM_HAS_STORE
/// The job of the measured run --from names: the run's stored model and layout (calo bench, or ingest with a
/// model; the job flags are refused), or for a run that stores none (calo record of any job, a torchtitan
/// training for one) the job the flags describe, --model required.
std::pair<model::ModelSpec, parallel::Layout> twin_job(SimFlags& flags, const sim::ClusterSpec& cluster,
                                                       const calibrate::RunTwin& run) {
  if (!run.has_job) {
    const bool model_given = std::any_of(flags.job_flags.begin(), flags.job_flags.end(), [](auto option) {
      return option->get_name() == "--model" && option->count() > 0;
    });
    require_input(
        model_given,
        fmt::format("--from {}: the run stores no model and layout (calo record measures any job); "
                    "say what it trained: add --model (a preset or YAML file) and the layout flags it "
                    "ran with (--tp, --pp, --seq, --mbs, --gbs, ...)",
                    flags.from));
    return job_from_flags(flags, cluster);
  }
  for (const CLI::Option* option : flags.job_flags) {
    require_input(option->count() == 0,
                  fmt::format("--from takes the model and layout from {}; drop {} (or drop --from to "
                              "simulate a job of your own)",
                              flags.from, option->get_name()));
  }
  require_input(
      !flags.gpus_given && !flags.dp_given,
      fmt::format("--from takes the layout, and so the GPU count, from {}; drop --gpus/--dp", flags.from));
  return {run.model, run.layout};
}

#endif

/// The job of the measured run --from names (twin_job), its warm-up and measured steps and start
/// temperature unless --steps / --warmup / --initial-temp are given, and its card's fitted thermal scale when
/// the cluster's calibration lists the card (applied to `cluster`; `twin` says what was taken).
std::pair<model::ModelSpec, parallel::Layout> job_from_run(SimFlags& flags, sim::ClusterSpec& cluster,
                                                           TwinNote& twin) {
#ifdef CALO_SIM_HAS_STORE
  const calibrate::RunTwin run = calibrate::twin_of_run(flags.from, cluster);
  auto job = twin_job(flags, cluster, run);
  if (!flags.steps_given) flags.steps = run.measured_steps;
  if (!flags.warmup_given) flags.warmup = run.warmup_steps;
  twin.run_dir = flags.from;
  twin.card = run.card_uuid;
  if (flags.initial_die_c < 0) twin.initial_die_c = run.initial_die_c;
  if (std::isfinite(run.card_r_scale)) {
    twin.card_r_scale = run.card_r_scale;
    cluster = calibrate::with_card_r_scale(cluster, run.card_r_scale);
  }
  return job;
#else
  (void)cluster;
  (void)twin;
  throw InputError(
      fmt::format("--from {}: this calo was built without the run store; give --model and the "
                  "layout flags",
                  flags.from));
#endif
}

/// One line on what --from took from the run.
std::string describe_twin(const TwinNote& twin, const SimFlags& flags) {
  std::string text =
      fmt::format("twin of {}: {} warm-up + {} measured steps", twin.run_dir, flags.warmup, flags.steps);
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

/// Prints the cluster presets (--list), one line each.
void list_clusters() {
  for (const auto& name : core::preset_names("clusters")) {
    const sim::ClusterSpec cluster = sim::load_cluster(name);
    fmt::print("{:18} {}\n", name, cluster.description);
  }
}

/// Rejects a missing --cluster and step counts below their minimum.
void check_sim_flags(const SimFlags& flags) {
  require_input(!flags.cluster.empty(),
                "--cluster is required; presets: " +
                    fmt::format("{}", fmt::join(core::preset_names("clusters"), ", ")));
  require_input(flags.steps >= 1, fmt::format("--steps {}: give 1 or more measured steps", flags.steps));
  require_input(flags.warmup >= 0, fmt::format("--warmup {}: give 0 or more warm-up steps", flags.warmup));
  plan::parse_memory_limit(flags.memory_limit);  // a bad value is refused before anything is built
}

/// The job's graph; appends the memory and collective warnings to `warnings` and prints them to stderr.
graph::Graph build_sim_graph(const model::ModelSpec& model, const parallel::Layout& layout,
                             const sim::ClusterSpec& cluster, const SimFlags& flags,
                             std::vector<std::string>& warnings) {
  sim::require_precision(cluster.gpu, cluster.name,
                         layout.precision);  // before memory: the card cannot run it
  if (std::string memory =
          check_memory(model, layout, cluster, flags.allow_oom, plan::parse_memory_limit(flags.memory_limit));
      !memory.empty())
    warnings.push_back(std::move(memory));
  graph::Graph graph = graph::build_graph(model, layout);
  if (flags.eval) graph = graph::evaluation_graph(std::move(graph));
  for (std::string& line : sim::collective_line_warnings(graph, cluster)) warnings.push_back(std::move(line));
  for (const std::string& warning : warnings) fmt::print(stderr, "warning: {}\n", warning);
  return graph;
}

/// The simulation options of the flags for `world` GPUs (checking the cost flags and --op-spans first).
sim::SimOptions sim_options(const SimFlags& flags, const sim::ClusterSpec& cluster, const TwinNote& twin,
                            int world) {
  sim::SimOptions options;
  options.steps = flags.steps + flags.warmup;  // as for calo bench: warm-up steps come before --steps
  options.warmup_steps = flags.warmup;
  options.power_cap = !flags.no_power_cap;
  options.thermal = !flags.no_thermal;
  options.speed_factors = per_gpu_values(flags.slow_gpus, world, 1.0, "--slow-gpu");
  options.inlet_offset_c = per_gpu_values(flags.hot_gpus, world, 0.0, "--hot-gpu");
  options.power_limit_w = power_caps_w(flags.power_caps, world, cluster.gpu);
  if (flags.cost_given) sim::check_cost_inputs(flags.cost);  // before the simulation, not after
  options.initial_die_c = flags.initial_die_c >= 0 ? flags.initial_die_c : twin.initial_die_c;
  require_input(
      std::isfinite(flags.max_power_samples) && flags.max_power_samples >= 0,
      fmt::format("--max-power-samples {}: give a count >= 0 (0 = no limit)", flags.max_power_samples));
  options.max_power_samples = flags.max_power_samples;
  require_input(
      flags.op_spans != "all" || world <= kMaxAllOpSpansGpus,
      fmt::format("--op-spans all keeps every GPU's spans, for at most {} GPUs (Llama3-70B TP8-PP4-DP2 on 64 "
                  "GPUs: 1.1 GB); this layout has {} GPUs: use --op-spans distinct (one GPU per distinct "
                  "timeline, the default)",
                  kMaxAllOpSpansGpus, world));
  const bool store_op_spans = !flags.no_store && flags.op_spans != "none";
  options.record_timeline = !flags.timeline.empty() || store_op_spans;
  options.timeline_distinct_ranks = flags.timeline.empty() && flags.op_spans == "distinct";
  const bool show_progress = options.steps > 1 && isatty(STDERR_FILENO) != 0;
  if (show_progress) {
    options.progress = [](int step, int steps) {
      fmt::print(stderr, "\rsimulating step {}/{}", step + 1, steps);
      if (step + 1 == steps) fmt::print(stderr, "\n");
    };
  }
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

/// What a simulation produced, for storing and printing it.
struct SimOutcome {
  const model::ModelSpec& model;
  const parallel::Layout& layout;
  const sim::ClusterSpec& cluster;
  const graph::Graph& graph;
  const sim::SimOptions& options;
  const sim::SimResult& result;
  const std::vector<std::string>& warnings;
  const nlohmann::json& from;               ///< twin_json's object; null without --from
  const parallel::MemoryBreakdown& memory;  ///< the model's memory per GPU of the job (most loaded stage)
};

/// Bytes of the regular files in `dir` (a run directory: run.db and its journal).
std::uintmax_t directory_bytes(const std::filesystem::path& dir) {
  std::uintmax_t bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  return bytes;
}

/// Stores the simulation as a run (unless --no-store), with `json`'s "cost" when there is one; returns where
/// ("" = not stored) and adds run_dir to `json`.
std::string store_sim(const SimFlags& flags, const SimOutcome& outcome, nlohmann::json& json) {
  std::string stored;
#ifdef CALO_SIM_HAS_STORE
  if (!flags.no_store) {
    const int world = outcome.graph.world_size();
    const std::string name = fmt::format("sim-{}-{}gpu", outcome.model.name, world);
    const std::filesystem::path run_dir =
        flags.out.empty() ? store::make_run_dir("runs", name) : std::filesystem::path(flags.out);
    const sim::SimOptions& options = outcome.options;
    nlohmann::json config = {
        {"model", model::to_json(outcome.model)},   {"layout", parallel::to_json(outcome.layout)},
        {"cluster", sim::to_json(outcome.cluster)}, {"steps", flags.steps},
        {"power_cap", options.power_cap},           {"thermal", options.thermal}};
    config["warmup"] = flags.warmup;
    config["step"] = flags.eval ? "evaluation" : "training";
    config["op_spans"] =
        options.record_timeline ? (options.timeline_distinct_ranks ? "distinct" : "all") : "none";
    if (!outcome.from.is_null()) config["from"] = outcome.from;
    if (!outcome.warnings.empty()) config["warnings"] = outcome.warnings;
    if (json.contains("cost")) config["cost"] = json["cost"];
    sim::store_sim_run(run_dir, name, command_line(flags, outcome.layout, world), config, outcome.graph,
                       outcome.cluster, outcome.result);
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
    if (flags.out.empty() && dash != std::string::npos && dash + 1 < file.size() &&
        file.find_first_not_of("0123456789", dash + 1) == std::string::npos)
      stored += fmt::format("; {} held an earlier run (give --out DIR to choose)", file.substr(0, dash));
  }
#else
  (void)json;
  if (!flags.no_store && !flags.out.empty()) {
    core::write_file_atomically(flags.out, to_json(outcome.result, true).dump(2) + "\n", "--out");
    stored = flags.out;
  }
#endif
  return stored;
}

/// The cost of training --tokens at the simulated rate: adds "cost" to `json`, returns the text lines.
std::string add_cost(const SimFlags& flags, const SimOutcome& outcome, nlohmann::json& json) {
  const sim::SimResult& result = outcome.result;
  const int world = outcome.graph.world_size();
  const int gpus_per_node = outcome.cluster.node.gpus;
  const double energy_per_token_j = json["energy_per_step_j"].get<double>() / result.tokens_per_step;
  const int nodes = (world + gpus_per_node - 1) / gpus_per_node;
  const sim::CostEstimate cost =
      sim::estimate_cost(sim::tokens_per_s(result), energy_per_token_j, nodes, flags.cost);
  json["cost"] = {{"tokens", flags.cost.tokens},
                  {"wall_s", cost.wall_s},
                  {"gpu_energy_j", cost.gpu_energy_j},
                  {"host_energy_j", cost.host_energy_j},
                  {"facility_energy_j", cost.facility_energy_j},
                  {"pue", flags.cost.pue},
                  {"host_power_w", flags.cost.host_power_w},
                  {"price_per_kwh", flags.cost.price_per_kwh},
                  {"currency", flags.cost.currency},
                  {"cost", cost.cost}};
  return sim::describe_cost(cost, flags.cost, world, nodes);
}

/// Prints the result as text: the twin line, the summary, cost, warnings and where things were written.
void print_sim_text(const SimFlags& flags, const SimOutcome& outcome, const TwinNote& twin,
                    const nlohmann::json& json, const std::string& cost_text, const std::string& stored) {
  if (!twin.run_dir.empty()) fmt::print("# {}\n", describe_twin(twin, flags));
  if (flags.eval)
    fmt::print(
        "# evaluation step: the forward passes of the global batch; no backward, recompute, optimizer "
        "or gradient communication\n");
  print_summary(outcome.result, json, outcome.cluster.gpu.power_limit_w,
                calibrate::is_cpu_host(outcome.cluster.gpu), outcome.layout.fp8());
  const parallel::MemoryBreakdown& memory = outcome.memory;
  fmt::print("# memory per {} (model, stage {}): {} of {} usable ({}; {} micro-batch(es) in flight)\n",
             calibrate::is_cpu_host(outcome.cluster.gpu) ? "rank" : "GPU", memory.stage,
             core::format_bytes(memory.total_bytes()),
             core::format_bytes(parallel::usable_memory_bytes(outcome.cluster.gpu.memory_bytes)),
             parallel::describe_terms(memory), memory.inflight_microbatches);
  fmt::print("{}", cost_text);
  for (const std::string& warning : outcome.warnings) fmt::print("# WARNING: {}\n", warning);
  if (!stored.empty()) fmt::print("# stored as run (kind sim): {}\n", stored);
  if (!flags.timeline.empty()) fmt::print("# timeline (Perfetto/Chrome trace): {}\n", flags.timeline);
}

int run_sim(SimFlags& flags) {
  if (flags.list) {
    list_clusters();
    return 0;
  }
  check_sim_flags(flags);
  sim::ClusterSpec cluster = sim::load_cluster(flags.cluster);
  TwinNote twin;
  auto [model, resolved] =
      flags.from.empty() ? job_from_flags(flags, cluster) : job_from_run(flags, cluster, twin);
  std::vector<std::string> warnings;
  const graph::Graph graph = build_sim_graph(model, resolved, cluster, flags, warnings);
  const int world = graph.world_size();
  require_input(flags.timeline.empty() || world <= 64,
                fmt::format("--timeline is for small cases (<= 64 GPUs); this layout has {} GPUs", world));

  const sim::SimOptions options = sim_options(flags, cluster, twin, world);
  const sim::SimResult result = sim::simulate(graph, cluster, options);
  if (!flags.timeline.empty()) write_timeline(flags.timeline, graph, result);
  nlohmann::json json = sim::to_json(result, flags.per_gpu);
  const parallel::MemoryBreakdown memory = parallel::memory_per_gpu(model, resolved);
  json["memory"] = parallel::to_json(memory, cluster.gpu.memory_bytes);
  json["step"] = flags.eval ? "evaluation" : "training";
  if (!warnings.empty()) json["warnings"] = warnings;
  const nlohmann::json from = twin_json(twin);
  if (!from.is_null()) json["from"] = from;

  const SimOutcome outcome{model, resolved, cluster, graph, options, result, warnings, from, memory};
  // The cost first: the stored run keeps it, so that `calo compare` can say which layout costs less.
  const std::string cost_text = flags.cost_given ? add_cost(flags, outcome, json) : std::string();
  const std::string stored = store_sim(flags, outcome, json);
  if (flags.json) {
    print_json(json);
  } else {
    print_sim_text(flags, outcome, twin, json, cost_text, stored);
  }
  return 0;
}

/// The job-cost flags (--tokens, --price-per-kwh, --currency, --pue, --host-power-w): any of them marks the
/// cost as asked for.
void add_cost_flags(CLI::App& app, const std::shared_ptr<SimFlags>& flags) {
  auto cost_flag = [&app, flags](const char* name, double& value, const char* help) {
    app.add_option_function<double>(
        name,
        [flags, &value](double given) {
          value = given;
          flags->cost_given = true;
        },
        help);
  };
  cost_flag("--tokens", flags->cost.tokens,
            "Tokens to train (e.g. 1e12): prints the time, the GPUs' energy, the facility's energy and the "
            "price of training them at the simulated rate");
  cost_flag("--price-per-kwh", flags->cost.price_per_kwh,
            "Electricity price per kWh, in --currency (with --tokens)");
  app.add_option_function<std::string>(
      "--currency",
      [flags](const std::string& given) {
        flags->cost.currency = given;
        flags->cost_given = true;
      },
      "Currency of --price-per-kwh, printed with the cost (a label, nothing is converted; with --tokens; "
      "default USD)");
  cost_flag("--pue", flags->cost.pue, "Facility power usage effectiveness, >= 1 (with --tokens; default 1)");
  cost_flag("--host-power-w", flags->cost.host_power_w,
            "Each node's power beyond its GPUs, W (CPUs, memory, NICs, fans; with --tokens; default 0)");
}

const CommandRegistration kSim(
    "sim", "simulate a training job's graph on a modeled cluster: step time, power, heat, throttling", 40,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<SimFlags>();
      const std::size_t before_job_flags = app.get_options().size();
      add_layout_flags(app, flags->layout, false);
      const std::vector<CLI::Option*> options = app.get_options();
      flags->job_flags.assign(options.begin() + static_cast<std::ptrdiff_t>(before_job_flags), options.end());
      app.add_option(
             "--from", flags->from,
             "Simulate the twin of this measured run: its model, layout, warm-up and measured steps, "
             "start temperature and (in a calibrated cluster) its card's heat; then `calo compare RUN "
             "SIM` shows the error of every figure. A `calo record` run stores no model: give --model and "
             "the layout flags with it")
          ->check(CLI::ExistingDirectory);
      app.add_option("--cluster,-c", flags->cluster, "Cluster preset (see --list) or YAML file");
      app.add_flag("--eval", flags->eval,
                   "Simulate an evaluation step: the forward passes of the global batch in the schedule's "
                   "order, without backward, recompute, optimizer or gradient communication (FSDP still "
                   "gathers its parameters); the memory shown stays the training step's");
      app.add_option("--gpus,-n", flags->gpus, "GPUs; dp = gpus / (tp*pp) unless --dp is given");
      app.add_option("--steps", flags->steps,
                     "Measured iterations to simulate, after the warm-up (temperatures evolve across them)")
          ->capture_default_str();
      app.add_option(
             "--warmup", flags->warmup,
             "Warm-up iterations before --steps: simulated (heat builds up) and stored as warm-up steps, "
             "which comparisons skip (as for calo bench)")
          ->capture_default_str();
      app.add_flag("--json", flags->json, "Print the result as JSON");
      app.add_flag("--per-gpu", flags->per_gpu, "Include per-GPU figures and trajectories in --json");
      app.add_flag("--list", flags->list, "List the cluster presets");
      app.add_option("--timeline", flags->timeline,
                     "Write the last step's per-op timeline (trace-event JSON)");
      app.add_option("--out", flags->out, "Run directory (default runs/<date>-sim-<model>-<N>gpu)");
      app.add_flag("--no-store", flags->no_store, "Do not store the simulation as a run");
      app.add_option(
             "--op-spans", flags->op_spans,
             "Which GPUs' per-op spans of the last step the stored run keeps: distinct (one GPU for "
             "each distinct timeline: ranks of one pipeline stage, expert slice and speed run the "
             "same ops at the same times), all (every GPU, at most 64: 1.1 GB for Llama3-70B TP8-PP4 on 64 "
             "GPUs) or none (default; `calo plan partition --from` and report's kernel breakdown need them)")
          ->check(CLI::IsMember({"distinct", "all", "none"}))
          ->capture_default_str();
      app.add_flag_callback(
          "--no-op-spans", [flags] { flags->op_spans = "none"; }, "Same as --op-spans none");
      app.add_flag("--no-power-cap", flags->no_power_cap, "Disable the power-cap controller");
      app.add_flag("--no-thermal", flags->no_thermal, "Disable the thermal model (constant temperatures)");
      app.add_option("--power-cap", flags->power_caps, kPowerCapHelp);
      add_cost_flags(app, flags);
      app.add_option("--slow-gpu", flags->slow_gpus,
                     "RANK=SPEED: a GPU running at SPEED x nominal; repeatable");
      app.add_option("--hot-gpu", flags->hot_gpus,
                     "RANK=DEGREES: extra inlet temperature of a GPU; repeatable");
      app.add_flag(
          "--allow-oom", flags->allow_oom,
          "Simulate a layout that does not fit GPU memory (warned in the output and the stored run)");
      app.add_option(
             "--memory-limit", flags->memory_limit,
             "What the layout's accounted memory must fit: usable (the card less 3 % fragmentation and "
             "4 GiB for the CUDA context, libraries and NCCL) or card (also tight layouts, warned), as "
             "calo plan's --memory-limit")
          ->capture_default_str();
      app.add_option("--max-power-samples", flags->max_power_samples,
                     "Refuse, before simulating, a job whose power traces hold more samples than this "
                     "(distinct GPUs x "
                     "steps x step time / the card's sample window; ~18 bytes each); 0 = no limit")
          ->capture_default_str();
      app.add_option("--initial-temp", flags->initial_die_c, "Start die temperature in C (default: idle)");
      return [flags, &app] {
        flags->dp_given = app.count("--dp") > 0;
        flags->gpus_given = app.count("--gpus") > 0;
        flags->steps_given = app.count("--steps") > 0;
        flags->warmup_given = app.count("--warmup") > 0;
        if (flags->from.empty() && !flags->list) require_model_flag(app, "calo sim");
        return run_sim(*flags);
      };
    });

}  // namespace
}  // namespace calo::cli
