// `calo plan --model M --cluster C --gpus N --gbs B [--seq S] [--objective throughput|energy|pareto]
// [--power-budget-w W] [--max-peak-power-w W] [--top K] [--json] [layout constraints: --tp 4 --mbs 1,2 ...]`:
// searches the layout space through the simulator and prints the ranking, the Pareto front and the flags to
// paste (docs/PLANNER.md).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.h"
#include "cli/layout_flags.h"
#include "cli/plan_text.h"
#include "core/error.h"
#include "core/threads.h"
#include "parallel/schedule.h"
#include "plan/gpu_conditions.h"
#include "plan/partition.h"
#include "plan/plan_request.h"
#include "plan/power_plan.h"
#include "plan/search.h"
#include "sim/gpu_settings.h"

namespace calo::cli {
namespace {

/// `calo plan`'s flags: the request the library resolves, and what is printed and how.
struct PlanFlags {
  plan::PlanRequest request;
  bool json = false;
  bool show_all = false;
  bool no_prune = false;
  bool uniform_partitions = false;  ///< --uniform-partitions: rank pipeline layouts at equal layers per stage
  bool progress = false;
  bool quiet = false;
};

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
/// cluster, steps, slow and hot GPUs.
template <typename Request>
void set_up_job(const SimJobFlags& flags, Request& request) {
  LayoutFlags layout_flags = flags.layout;
  apply_gpus(flags.gpus, flags.gpus_given, flags.dp_given, layout_flags);
  auto [model, layout] = resolve(layout_flags);
  request.model = model;
  request.layout = layout;
  request.cluster = sim::load_cluster(flags.cluster);
  request.options.steps = flags.steps;
  const int world = layout.world_size();
  request.options.speed_factors = sim::per_gpu_values(flags.slow_gpus, world, 1.0, "--slow-gpu");
  request.options.inlet_offset_c = sim::per_gpu_values(flags.hot_gpus, world, 0.0, "--hot-gpu");
}

/// Flags of `calo plan power`.
struct PowerFlags : SimJobFlags {
  PowerFlags() : SimJobFlags(5) {}
  double max_slowdown_pct = 1.0;
};

int run_power(const PowerFlags& flags) {
  require_input(!flags.cluster.empty(), "--cluster is required (see `calo sim --list`)");
  plan::PowerPlanRequest request;
  set_up_job(flags, request);
  request.max_slowdown = flags.max_slowdown_pct / 100.0;
  const plan::PowerPlanResult result = plan::plan_power(request);
  if (flags.json) {
    print_json(result);
  } else {
    print_power_text(request, result, flags.max_slowdown_pct);
  }
  return 0;
}

int run_partition(const PartitionFlags& flags) {
  require_input(!flags.cluster.empty(), "--cluster is required (see `calo sim --list`)");
  require_input(
      flags.layout.stage_gpus.empty(),
      "calo plan partition searches the stage -> GPU order itself; drop --stage-gpus (give it to calo "
      "sim or calo bench to run an order)");
  plan::PartitionRequest request;
  set_up_job(flags, request);
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
  if (flags.json) {
    print_json(plan::partition_json(request, conditions, result));
  } else {
    print_partition_text(request, result, flags.from_run, conditions, flags.steps);
  }
  return 0;
}

int run_plan(PlanFlags& flags) {
  flags.request.search.prune = !flags.no_prune;
  flags.request.search.balance_partitions = !flags.uniform_partitions;
  plan::SearchRequest request = plan::resolve_plan_request(
      flags.request, [](std::string_view line) { fmt::print(stderr, "{}\n", line); });
  if (!flags.quiet) request.progress = search_progress_printer(flags.progress || isatty(STDERR_FILENO) != 0);
  const plan::SearchResult result = plan::search_layouts(request);
  if (flags.json) {
    print_json(plan::search_json(flags.request, request, result, flags.show_all));
  } else {
    print_search_text(request, result, request.top, flags.show_all);
  }
  if (result.stopped == 0) return 0;
  fmt::print(stderr, "calo plan: {}\n", stopped_text(request, result));
  return static_cast<int>(ExitCode::kFailure);  // a partial ranking is no answer a script should take
}

/// The job and the space searched: --model, --cluster, --gpus, --gbs, --seq, --trainer, --max-cp.
void add_job_flags(CLI::App& app, plan::PlanRequest& flags) {
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
  app.add_flag("--fp8-all-gather", flags.fp8_all_gather,
               "FSDP gathers the FP8 linears' weights in FP8 on every --precision fp8 layout under --zero 3 "
               "(torchtitan's enable_fsdp_float8_all_gather), as calo sim's --fp8-all-gather");
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
void add_ranking_flags(CLI::App& app, plan::PlanRequest& flags) {
  app.add_option("--objective", flags.objective, "Ranking: throughput, energy (tokens/J) or pareto")
      ->capture_default_str();
  app.add_option("--power-budget-w", flags.search.power_budget_w, "Most mean power of all GPUs together (W)");
  app.add_option("--max-peak-power-w", flags.search.max_peak_power_w, "Most peak power of any one GPU (W)");
  app.add_option("--power-cap", flags.search.power_caps_w,
                 "Power caps per GPU to search as an axis, e.g. 400,550,700 (W; each layout is simulated "
                 "under each; `nvidia-smi -pl` sets one)")
      ->delimiter(',');
  app.add_option("--top", flags.search.top,
                 "Rows of the ranking (the same as --no-prune's on every search measured; docs/PLANNER.md)")
      ->capture_default_str();
  app.add_option("--steps", flags.search.steps, "Simulated steps per layout")->capture_default_str();
  app.add_option("--jobs,-j,--threads", flags.search.threads,
                 "Candidates simulated at once, one thread each (default: one per core); the same "
                 "flag as calo sweep's and calo report's --jobs")
      ->check(CLI::Range(0, core::kMaxJobs));
  app.add_option("--max-minutes", flags.search.max_minutes,
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
void add_constraint_flags(CLI::App& app, plan::PlanRequest& flags) {
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
      add_job_flags(app, flags->request);
      add_ranking_flags(app, flags->request);
      add_output_flags(app, *flags);
      add_constraint_flags(app, flags->request);
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
