// `calo bench --model M [layout flags] [--layers N] [--steps K] [--warmup W] [--nproc N] [--backend B]
// [--check] [--trace-ops] [--memory model|real] [--json] [--out DIR]`: executes a training step's graph on
// real devices and summarizes throughput, MFU, energy, power and temperature (docs/EXECUTION.md).
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/layout_flags.h"
#include "core/error.h"
#include "exec/backend.h"
#include "exec/bench.h"
#include "exec/launch.h"
#include "exec/mpi_env.h"
#include "exec/plan.h"

namespace calo::cli {
namespace {

struct BenchFlags {
  LayoutFlags layout;
  std::optional<int> nproc;
  int steps = 10;
  int warmup = 2;
  std::string backend = "auto";
  bool check = false;
  bool trace_ops = false;
  std::string memory = "model";
  bool json = false;
  bool no_progress = false;
  std::string out;
  std::uint64_t seed = 1234;
  bool oversubscribe = false;
};

/// This process's arguments after argv[0] (the spawned ranks get exactly the same).
std::vector<std::string> own_arguments() {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  std::string word;
  while (std::getline(cmdline, word, '\0')) words.push_back(word);
  if (!words.empty()) words.erase(words.begin());
  return words;
}

/// Resolves model and layout; "NAME-slice" without --layers is NAME sliced to 2 layers per pipeline stage.
std::pair<model::ModelSpec, parallel::Layout> resolve_with_slice(const BenchFlags& flags, int& full_layers) {
  const auto [base_name, named_slice] = exec::parse_slice_name(flags.layout.model);
  LayoutFlags sliced = flags.layout;
  sliced.model = base_name;
  full_layers = model::load_model(base_name).num_layers;
  if (named_slice && !sliced.layers) {
    sliced.layers =
        std::min(full_layers, 2 * flags.layout.layout.pp * std::max(1, flags.layout.layout.virtual_stages));
  }
  return resolve(sliced);
}

int run_bench(const BenchFlags& flags) {
  exec::BenchOptions options;
  auto [spec, layout] = resolve_with_slice(flags, options.full_model_layers);
  options.model = spec;
  options.layout = layout;
  options.steps = flags.steps;
  options.warmup = flags.warmup;
  options.backend = flags.backend;
  options.check = flags.check;
  options.trace_ops = flags.trace_ops;
  options.memory_real = flags.memory == "real";
  if (!flags.no_progress && !flags.json && isatty(STDERR_FILENO) != 0) {
    // One line on the terminal, rewritten after each step and ended after the last.
    options.on_step = [](const exec::BenchStepProgress& step) {
      fmt::print(stderr, "\rcalo bench: step {}/{}{} {}   ", step.step + 1, step.total_steps,
                 step.warmup ? " (warm-up)" : "", exec::format_step_time(step.duration_s));
      if (step.step + 1 == step.total_steps) fmt::print(stderr, "\n");
    };
  }
  options.out_dir = flags.out;
  options.seed = flags.seed;
  options.oversubscribe = flags.oversubscribe;
  options.notice = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
  std::string command = "calo";
  for (const auto& word : own_arguments()) command += " " + word;
  options.command_line = command;
  const int nproc = flags.nproc.value_or(layout.world_size());
  if (nproc != layout.world_size()) {
    throw InputError(
        fmt::format("--nproc {}: layout {} has {} ranks; give --nproc {} or change --tp/--cp/--pp/--dp",
                    nproc, parallel::describe(layout), layout.world_size(), layout.world_size()));
  }

  if (!exec::is_child_rank()) {
    exec::plan_before_launch(options, nproc);  // exit 2 before any rank starts
    if (nproc > 1) {
      const std::string backend = exec::BackendRegistry::instance().select(flags.backend).name;
      const exec::SpawnResult spawned = backend == "cpu" && exec::mpi_built()
                                            ? exec::spawn_mpirun(nproc, own_arguments())
                                            : exec::spawn_local_ranks(nproc, own_arguments());
      return spawned.exit_code;
    }
  }
  const exec::BenchOutcome outcome = exec::run_bench_rank(options, exec::detect_launch());
  if (exec::detect_launch().rank == 0) {
    if (flags.json) {
      print_json(outcome.report);
    } else {
      fmt::print("{}", outcome.text);
    }
  }
  return outcome.exit_code;
}

const CommandRegistration kBench(
    "bench",
    "execute a training step's graph on GPUs (CUDA+NCCL) or CPUs (BLAS+MPI): time, MFU, energy, heat", 40,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<BenchFlags>();
      add_layout_flags(app, flags->layout, /*model_positional=*/false);
      app.add_option("--steps", flags->steps, "Measured steps")->capture_default_str();
      app.add_option("--warmup", flags->warmup, "Warm-up steps (excluded from the summary)")
          ->capture_default_str();
      app.add_option("--nproc", flags->nproc, "Local ranks to spawn (default: the layout's world size)");
      app.add_option("--backend", flags->backend, "Execution backend: auto, cuda or cpu")
          ->capture_default_str();
      app.add_flag("--check", flags->check,
                   "Verify collectives and spot-check GEMMs; wrong results fail the run");
      app.add_flag("--trace-ops", flags->trace_ops, "Write one span per op and step into the run store");
      app.add_option("--memory", flags->memory,
                     "model: operand buffers only, the layout admitted by the memory model; real: also hold "
                     "what training allocates (state, each micro-batch's activations until its backward, "
                     "FSDP gathers, gradient buckets) around the ops and report the peak against the model")
          ->check(CLI::IsMember({"model", "real"}))
          ->capture_default_str();
      app.add_flag("--json", flags->json, "Print the summary as JSON");
      app.add_flag("--no-progress", flags->no_progress, "No progress line on the terminal");
      app.add_option("--out", flags->out, "Run directory (default runs/<date>-bench-<model>)");
      app.add_option("--seed", flags->seed, "Seed of the random operand data")->capture_default_str();
      app.add_flag("--oversubscribe", flags->oversubscribe,
                   "Start CPU ranks beyond 4 per core or beyond the host's available memory");
      return [flags, &app] {
        require_model_flag(app, "calo bench");
        return run_bench(*flags);
      };
    });

}  // namespace
}  // namespace calo::cli
