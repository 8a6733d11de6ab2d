// What `calo sim` asks and gets, below the CLI: the job resolved, the simulation's settings as values; the
// library checks the job against memory (with the fitting layouts when it refuses one), builds the graph,
// simulates it, writes the timeline, prices the tokens and stores the run. The CLI parses the flags into a
// SimRequest and prints the SimRun (cli/sim_text.h).
#pragma once

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/progress.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"
#include "plan/layout_space.h"
#include "sim/cluster.h"
#include "sim/job_cost.h"
#include "sim/simulate.h"

namespace calo::plan {

/// Most GPUs `--op-spans all` stores every GPU's spans for (Llama3-70B TP8-PP4-DP2 on 64 GPUs: 1.1 GB,
/// docs/benchmarks/analysis.md).
inline constexpr int kMaxAllOpSpansGpus = 64;
/// Most GPUs `--timeline` writes every rank's ops for.
inline constexpr int kMaxTimelineGpus = 64;

/// What a simulation of a measured run (--from) took from the run, for the output and the stored run.
struct TwinNote {
  std::string run_dir;         ///< the run; empty without --from
  double card_r_scale = NAN;   ///< the card's thermal R scale applied; NaN = the typical card's
  std::string card;            ///< the card's UUID
  double initial_die_c = NAN;  ///< start temperature taken from the run (C); NaN = not taken
};

/// One line on what --from took from the run, with the warm-up and measured steps simulated.
std::string describe_twin(const TwinNote& twin, int warmup_steps, int measured_steps);

/// `calo sim`'s request with its job resolved: what to simulate, store and write.
struct SimRequest {
  model::ModelSpec model;               ///< the model (sliced to --layers when given)
  parallel::Layout layout;              ///< the resolved layout
  sim::ClusterSpec cluster;             ///< the cluster (a --from card's thermal scale applied)
  std::string model_arg;                ///< --model as given (the command line that reproduces the run)
  std::optional<int> layers;            ///< --layers as given
  std::string cluster_arg;              ///< --cluster as given
  std::string from;                     ///< --from RUN; empty without
  TwinNote twin;                        ///< what --from took from the run
  int steps = 1;                        ///< measured steps
  int warmup = 0;                       ///< warm-up steps before them
  bool eval = false;                    ///< --eval: an evaluation step (graph::evaluation_graph)
  bool per_gpu = false;                 ///< per-GPU figures in the JSON
  std::string timeline;                 ///< --timeline FILE; empty = none
  std::string out;                      ///< --out DIR; empty = runs/<date>-sim-<model>-<N>gpu
  bool no_store = false;                ///< --no-store
  std::string op_spans = "none";        ///< --op-spans distinct|all|none
  bool no_power_cap = false;            ///< --no-power-cap
  bool no_thermal = false;              ///< --no-thermal
  std::vector<std::string> slow_gpus;   ///< --slow-gpu RANK=SPEED entries
  std::vector<std::string> hot_gpus;    ///< --hot-gpu RANK=DEGREES entries
  std::vector<std::string> power_caps;  ///< --power-cap W | RANK=W entries
  sim::CostInputs cost;                 ///< --tokens, --price-per-kwh, --currency, --pue, --host-power-w
  bool cost_given = false;              ///< any of the cost flags was given
  double initial_die_c = -1;            ///< --initial-temp (C); < 0 = idle, or the --from run's
  bool allow_oom = false;               ///< --allow-oom
  double max_power_samples = sim::kMaxSimPowerSamples;  ///< --max-power-samples (0 = no limit)
  MemoryLimit memory_limit = MemoryLimit::kUsable;      ///< --memory-limit
  std::function<void(int step, int steps)> progress;    ///< per simulated step; unset = silent
};

/// What a simulation produced, for printing it.
struct SimRun {
  graph::Graph graph;                 ///< the job's graph
  sim::SimResult result;              ///< the simulation
  parallel::MemoryBreakdown memory;   ///< the model's memory per GPU (most loaded stage)
  std::vector<std::string> warnings;  ///< memory and collective warnings
  nlohmann::json json;                ///< `calo sim --json`
  std::string cost_text;              ///< the cost lines (empty without the cost flags)
  std::string stored;                 ///< where the run was stored and its size; empty = not stored
};

/// The memory verdict of the layout (the model `calo bench` applies): empty when it fits; a tight layout
/// under MemoryLimit::kCard: the warning to print and store; else, without `allow_oom`, an InputError with
/// the breakdown and the nearest layouts of the same job that fit, and with `allow_oom` the warning.
std::string check_memory(const model::ModelSpec& model, const parallel::Layout& layout,
                         const sim::ClusterSpec& cluster, bool allow_oom, MemoryLimit limit);

/// Simulates `request`: each warning goes to `warn` as soon as it is known (before the simulation runs);
/// InputError naming the flag of anything invalid.
SimRun run_simulation(const SimRequest& request, const core::NoticeFn& warn);

}  // namespace calo::plan
