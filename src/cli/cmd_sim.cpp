// `calo sim [--model M] [layout flags] --cluster NAME|FILE --gpus N [--steps K] [--json] [--timeline FILE]`:
// simulates the execution graph of one training job on a modeled cluster (time, power, heat, throttling).
// `calo sim --from RUN --cluster NAME|FILE` simulates the twin of a measured run (its job, steps and start).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#ifdef CALO_SIM_HAS_STORE
#include "calibrate/twin.h"
#endif
#include "cli/command.h"
#include "cli/layout_flags.h"
#include "cli/sim_text.h"
#include "core/config.h"
#include "core/error.h"
#include "plan/layout_space.h"
#include "plan/sim_request.h"
#include "sim/cluster.h"

namespace calo::cli {
namespace {

/// `calo sim`'s flags: the job's (resolved here), the cluster's, and the request's settings as given.
struct SimFlags {
  LayoutFlags layout;
  std::string cluster;
  int gpus = 0;
  bool json = false;
  bool list = false;
  bool dp_given = false, gpus_given = false, steps_given = false, warmup_given = false;  ///< flags given
  std::string memory_limit = "usable";        ///< --memory-limit: usable or card (tight layouts accepted)
  std::vector<const CLI::Option*> job_flags;  ///< the model and layout flags (which --from replaces)
  plan::SimRequest request;                   ///< the simulation's settings; the job is filled in by run_sim
};

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
                    flags.request.from));
    return job_from_flags(flags, cluster);
  }
  for (const CLI::Option* option : flags.job_flags) {
    require_input(option->count() == 0,
                  fmt::format("--from takes the model and layout from {}; drop {} (or drop --from to "
                              "simulate a job of your own)",
                              flags.request.from, option->get_name()));
  }
  require_input(!flags.gpus_given && !flags.dp_given,
                fmt::format("--from takes the layout, and so the GPU count, from {}; drop --gpus/--dp",
                            flags.request.from));
  return {run.model, run.layout};
}

#endif

/// The job of the measured run --from names (twin_job), its warm-up and measured steps and start
/// temperature unless --steps / --warmup / --initial-temp are given, and its card's fitted thermal scale when
/// the cluster's calibration lists the card (applied to `cluster`; `twin` says what was taken).
std::pair<model::ModelSpec, parallel::Layout> job_from_run(SimFlags& flags, sim::ClusterSpec& cluster,
                                                           plan::TwinNote& twin) {
#ifdef CALO_SIM_HAS_STORE
  const calibrate::RunTwin run = calibrate::twin_of_run(flags.request.from, cluster);
  auto job = twin_job(flags, cluster, run);
  if (!flags.steps_given) flags.request.steps = run.measured_steps;
  if (!flags.warmup_given) flags.request.warmup = run.warmup_steps;
  twin.run_dir = flags.request.from;
  twin.card = run.card_uuid;
  if (flags.request.initial_die_c < 0) twin.initial_die_c = run.initial_die_c;
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
                  flags.request.from));
#endif
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
  require_input(flags.request.steps >= 1,
                fmt::format("--steps {}: give 1 or more measured steps", flags.request.steps));
  require_input(flags.request.warmup >= 0,
                fmt::format("--warmup {}: give 0 or more warm-up steps", flags.request.warmup));
}

int run_sim(SimFlags& flags) {
  if (flags.list) {
    list_clusters();
    return 0;
  }
  check_sim_flags(flags);
  plan::SimRequest& request = flags.request;
  request.memory_limit = plan::parse_memory_limit(flags.memory_limit);  // refused before anything is built
  request.cluster = sim::load_cluster(flags.cluster);
  std::tie(request.model, request.layout) = request.from.empty()
                                                ? job_from_flags(flags, request.cluster)
                                                : job_from_run(flags, request.cluster, request.twin);
  request.model_arg = flags.layout.model;
  request.layers = flags.layout.layers;
  request.cluster_arg = flags.cluster;
  if (request.steps + request.warmup > 1 && isatty(STDERR_FILENO) != 0) {
    request.progress = [](int step, int steps) {
      fmt::print(stderr, "\rsimulating step {}/{}", step + 1, steps);
      if (step + 1 == steps) fmt::print(stderr, "\n");
    };
  }
  const plan::SimRun run = plan::run_simulation(
      request, [](std::string_view warning) { fmt::print(stderr, "warning: {}\n", warning); });
  if (flags.json) {
    print_json(run.json);
  } else {
    print_sim_text(request, run);
  }
  return 0;
}

/// --eval's help.
constexpr const char* kEvalHelp =
    "Simulate an evaluation step: the forward passes of the global batch in the schedule's order, without "
    "backward, recompute, optimizer or gradient communication (FSDP still gathers its parameters); the "
    "memory "
    "shown stays the training step's";

/// The flags that price the training of --tokens: --tokens, --price-per-kwh, --currency, --pue,
/// --host-power-w (any of them given sets cost_given).
void add_cost_flags(CLI::App& app, const std::shared_ptr<SimFlags>& flags) {
  auto cost_flag = [&app, flags](const char* name, double& value, const char* help) {
    app.add_option_function<double>(
        name,
        [flags, &value](double given) {
          value = given;
          flags->request.cost_given = true;
        },
        help);
  };
  cost_flag("--tokens", flags->request.cost.tokens,
            "Tokens to train (e.g. 1e12): prints the time, the GPUs' energy, the facility's energy and the "
            "price of training them at the simulated rate");
  cost_flag("--price-per-kwh", flags->request.cost.price_per_kwh,
            "Electricity price per kWh, in --currency (with --tokens)");
  app.add_option_function<std::string>(
      "--currency",
      [flags](const std::string& given) {
        flags->request.cost.currency = given;
        flags->request.cost_given = true;
      },
      "Currency of --price-per-kwh, printed with the cost (a label, nothing is converted; with --tokens; "
      "default USD)");
  cost_flag("--pue", flags->request.cost.pue,
            "Facility power usage effectiveness, >= 1 (with --tokens; default 1)");
  cost_flag("--host-power-w", flags->request.cost.host_power_w,
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
             "--from", flags->request.from,
             "Simulate the twin of this measured run: its model, layout, warm-up and measured steps, "
             "start temperature and (in a calibrated cluster) its card's heat; then `calo compare RUN "
             "SIM` shows the error of every figure. A `calo record` run stores no model: give --model and "
             "the layout flags with it")
          ->check(CLI::ExistingDirectory);
      app.add_option("--cluster,-c", flags->cluster, "Cluster preset (see --list) or YAML file");
      app.add_flag("--eval", flags->request.eval, kEvalHelp);
      app.add_option("--gpus,-n", flags->gpus, "GPUs; dp = gpus / (tp*pp) unless --dp is given");
      app.add_option("--steps", flags->request.steps,
                     "Measured iterations to simulate, after the warm-up (temperatures evolve across them)")
          ->capture_default_str();
      app.add_option(
             "--warmup", flags->request.warmup,
             "Warm-up iterations before --steps: simulated (heat builds up) and stored as warm-up steps, "
             "which comparisons skip (as for calo bench)")
          ->capture_default_str();
      app.add_flag("--json", flags->json, "Print the result as JSON");
      app.add_flag("--per-gpu", flags->request.per_gpu, "Include per-GPU figures and trajectories in --json");
      app.add_flag("--list", flags->list, "List the cluster presets");
      app.add_option("--timeline", flags->request.timeline,
                     "Write the last step's per-op timeline (trace-event JSON)");
      app.add_option("--out", flags->request.out, "Run directory (default runs/<date>-sim-<model>-<N>gpu)");
      app.add_flag("--no-store", flags->request.no_store, "Do not store the simulation as a run");
      app.add_option(
             "--op-spans", flags->request.op_spans,
             "Which GPUs' per-op spans of the last step the stored run keeps: distinct (one GPU for "
             "each distinct timeline: ranks of one pipeline stage, expert slice and speed run the "
             "same ops at the same times), all (every GPU, at most 64: 1.1 GB for Llama3-70B TP8-PP4 on 64 "
             "GPUs) or none (default; `calo plan partition --from` and report's kernel breakdown need them)")
          ->check(CLI::IsMember({"distinct", "all", "none"}))
          ->capture_default_str();
      app.add_flag_callback(
          "--no-op-spans", [flags] { flags->request.op_spans = "none"; }, "Same as --op-spans none");
      app.add_flag("--no-power-cap", flags->request.no_power_cap, "Disable the power-cap controller");
      app.add_flag("--no-thermal", flags->request.no_thermal,
                   "Disable the thermal model (constant temperatures)");
      app.add_option("--power-cap", flags->request.power_caps, kPowerCapHelp);
      add_cost_flags(app, flags);
      app.add_option("--slow-gpu", flags->request.slow_gpus,
                     "RANK=SPEED: a GPU running at SPEED x nominal; repeatable");
      app.add_option("--hot-gpu", flags->request.hot_gpus,
                     "RANK=DEGREES: extra inlet temperature of a GPU; repeatable");
      app.add_flag(
          "--allow-oom", flags->request.allow_oom,
          "Simulate a layout that does not fit GPU memory (warned in the output and the stored run)");
      app.add_option(
             "--memory-limit", flags->memory_limit,
             "What the layout's accounted memory must fit: usable (the card less 3 % fragmentation and "
             "4 GiB for the CUDA context, libraries and NCCL) or card (also tight layouts, warned), as "
             "calo plan's --memory-limit")
          ->capture_default_str();
      app.add_option("--max-power-samples", flags->request.max_power_samples,
                     "Refuse, before simulating, a job whose power traces hold more samples than this "
                     "(distinct GPUs x "
                     "steps x step time / the card's sample window; ~18 bytes each); 0 = no limit")
          ->capture_default_str();
      app.add_option("--initial-temp", flags->request.initial_die_c,
                     "Start die temperature in C (default: idle)");
      return [flags, &app] {
        flags->dp_given = app.count("--dp") > 0;
        flags->gpus_given = app.count("--gpus") > 0;
        flags->steps_given = app.count("--steps") > 0;
        flags->warmup_given = app.count("--warmup") > 0;
        if (flags->request.from.empty() && !flags->list) require_model_flag(app, "calo sim");
        return run_sim(*flags);
      };
    });

}  // namespace
}  // namespace calo::cli
