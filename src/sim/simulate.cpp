#include "sim/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/json_fields.h"
#include "sim/placement.h"
#include "sim/power_dynamics.h"

namespace calo::sim {

namespace {

/// Where a rank sits in the layout (Megatron order tp-cp-ep-dp-pp: rank = tp + tp_size*(cp + cp_size*(dp +
/// dp_size*pp))).
struct Coordinates {
  int tp_group = 0;  ///< rank / tp: index of its tensor-parallel group
  int unit = 0;      ///< replica unit: replica_index / ep (the ep replicas of a unit exchange tokens)
  int ep_index = 0;  ///< replica_index % ep
  int stage = 0;     ///< pipeline stage
};

Coordinates coordinates(const parallel::Layout& layout, int rank) {
  Coordinates result;
  result.tp_group = rank / layout.tp;
  result.stage = result.tp_group / (layout.cp * layout.dp);
  result.ep_index = layout.ep_index(rank);
  result.unit = layout.replica_index(rank) / layout.ep;
  return result;
}

/// Index of the tensor-parallel group of replica unit `unit` (Coordinates::unit) at (ep_index, stage).
int tp_group_of(const parallel::Layout& layout, int unit, int ep_index, int stage) {
  const int replica = unit * layout.ep + ep_index;
  const int cp_index = replica % layout.cp;
  const int dp_index = replica / layout.cp;
  return cp_index + layout.cp * (dp_index + layout.dp * stage);
}

}  // namespace

const char* comm_class_name(int comm_class) {
  return graph::to_string(graph::GroupKind(comm_class));
}

double tokens_per_s(const SimResult& result) {
  return result.iteration_s > 0 ? result.tokens_per_step / result.iteration_s : 0.0;
}

double model_flops_per_gpu(const SimResult& result) {
  return result.iteration_s > 0 ? result.model_flops_per_step / result.iteration_s / result.world : 0.0;
}

double mfu(const SimResult& result) {
  return result.peak_flops_per_gpu > 0 ? model_flops_per_gpu(result) / result.peak_flops_per_gpu : 0.0;
}

namespace {

/// Mean power above idle over `entity`'s waits in a step of `iteration_s`: its gaps, and the wait after its
/// last compute op, which joins a wait it began the step with (steps repeat).
double wait_power_w(const GpuSpec& gpu, const EntityResult& entity, double iteration_s) {
  if (gpu.wait_power_w <= 0) return 0;
  const double tail_s = std::max(0.0, iteration_s - entity.last_compute_end_s);
  const bool tail = tail_s > kWaitGapS;
  const int episodes = entity.wait_gaps + (tail ? 1 : 0) - (tail && entity.starts_waiting ? 1 : 0);
  return mean_wait_power_w(gpu, episodes, entity.wait_gap_s + tail_s);
}

/// Per-GPU state the steps carry: where it sits, its speed and air, its clocks and temperatures.
struct GpuState {
  Coordinates where;             ///< layout coordinates
  int program = 0;               ///< index into Graph::programs
  double speed = 1;              ///< speed factor
  double power_limit_w = 0;      ///< its power cap
  double max_clock_mhz = 0;      ///< its clock lock (max_sm_mhz when none)
  double inlet_c = 0;            ///< inlet air temperature
  double r_scale = 1;            ///< thermal resistance multiplier of its slot
  double cap_mhz = 0;            ///< power-cap operating clock (busy-window mean power at the limit)
  double thermal_limit_mhz = 0;  ///< clock limit of thermal slowdown at this step's start
  double clock_mhz = 0;          ///< effective clock of this step (what the engine stretches compute by)
  double leakage_w = 0;          ///< static power above idle from its die temperature at this step's start
  ThermalState thermal;          ///< die and sink temperatures
};

/// Throws InputError unless `values` (`what`, e.g. "speed factors") is empty or holds one value per GPU of
/// `world`.
template <typename Value>
void require_per_gpu(const std::vector<Value>& values, int world, std::string_view what) {
  require_input(values.empty() || static_cast<int>(values.size()) == world,
                fmt::format("{} {} given for {} GPUs; give one per GPU or none", values.size(), what, world));
}

/// Stage 1: options that cannot apply to this graph end the simulation before any work.
void validate_options(const graph::Graph& graph, const SimOptions& options) {
  const int world = graph.world_size();
  require_input(world >= 1, "the graph has no ranks; give a layout with at least one GPU");
  require_input(options.steps >= 1 && options.steps <= kMaxSimSteps,
                fmt::format("--steps {} must be in [1, {}]", options.steps, kMaxSimSteps));
  const int64_t gpu_steps = int64_t{world} * options.steps;
  require_input(
      gpu_steps <= kMaxSimGpuSteps,
      fmt::format("--steps {} on {} GPUs is {} GPU-steps, beyond the {} one simulation keeps; simulate "
                  "fewer steps (temperatures settle within a few hundred)",
                  options.steps, world, gpu_steps, kMaxSimGpuSteps));
  require_input(options.warmup_steps >= 0 && options.warmup_steps < options.steps,
                fmt::format("--warmup {} must be in [0, --steps {}): warm-up steps are part of --steps",
                            options.warmup_steps, options.steps));
  require_per_gpu(options.speed_factors, world, "speed factors");
  for (double speed : options.speed_factors) {
    require_input(speed > 0 && speed <= 10,
                  fmt::format("speed factor {} is out of range; use (0, 10]", speed));
  }
  require_per_gpu(options.inlet_offset_c, world, "inlet offsets");
  require_per_gpu(options.slot_of_rank, world, "slots");
  require_per_gpu(options.power_limit_w, world, "power caps");
  require_per_gpu(options.max_clock_mhz, world, "clock locks");
  require_input(options.fixed_clock_mhz < 0 || options.fixed_clock_mhz > 0,
                fmt::format("--fixed-clock-mhz {} must be > 0", options.fixed_clock_mhz));
  if (options.record_timeline && !options.timeline_distinct_ranks) {
    std::int64_t spans = 0;
    for (int rank = 0; rank < world; ++rank)
      spans += static_cast<std::int64_t>(graph.program(rank).ops.size());
    require_input(
        spans <= kMaxTimelineSpans,
        fmt::format(
            "every GPU's op spans of the last step (--op-spans all, --timeline) are {:.0f} M spans for "
            "this layout, beyond the {:.0f} M one simulation keeps (~24 B each in memory, ~90 B stored); "
            "use --op-spans distinct (one GPU per distinct timeline, the default) or fewer micro-batches",
            spans / 1e6, kMaxTimelineSpans / 1e6));
  }
}

/// Stage 2: what is simulated (names, sizes, peaks) before any step runs.
SimResult describe_run(const graph::Graph& graph, const ClusterSpec& cluster, const SimOptions& options) {
  SimResult result;
  result.cluster = cluster.name;
  result.layout = parallel::describe(graph.layout);
  result.model = graph.model.name;
  result.world = graph.world_size();
  result.steps = options.steps;
  result.warmup_steps = options.warmup_steps;
  result.tokens_per_step = static_cast<double>(graph.layout.global_batch) * graph.layout.seq_length;
  result.peak_flops_per_gpu = cluster.gpu.peak_bf16_flops;
  result.power_limit_w =
      options.power_limit_w.empty()
          ? cluster.gpu.power_limit_w
          : std::min(cluster.gpu.power_limit_w,
                     *std::max_element(options.power_limit_w.begin(), options.power_limit_w.end()));
  return result;
}

/// Stage 3: compute costs per program, and the step's FLOP totals (each program counted once per rank).
std::vector<ProgramPower> cost_programs(const graph::Graph& graph, const GpuSpec& gpu, SimResult& result) {
  std::vector<ProgramPower> powers;
  powers.reserve(graph.programs.size());
  for (const auto& program : graph.programs) powers.emplace_back(gpu, program);
  std::vector<int> ranks_per_program(graph.programs.size(), 0);
  for (int rank = 0; rank < graph.world_size(); ++rank) ranks_per_program[graph.program_of_rank[rank]] += 1;
  for (std::size_t index = 0; index < graph.programs.size(); ++index) {
    for (const auto& op : graph.programs[index].ops) {
      result.model_flops_per_step += graph::model_flops(op) * ranks_per_program[index];
      if (!graph::is_communication(op.kind))
        result.hardware_flops_per_step += op.flops * ranks_per_program[index];
    }
  }
  return powers;
}

/// GPUs whose power traces may differ: ranks of one program in one node slot with the same speed, inlet
/// offset, power cap and clock lock start alike and heat alike, so they share every step's trace.
std::int64_t distinct_gpu_classes(const graph::Graph& graph, const ClusterSpec& cluster,
                                  const SimOptions& options) {
  const auto per_gpu = [](const std::vector<double>& values, int rank) {
    return values.empty() ? 0.0 : values[rank];
  };
  std::set<std::tuple<int, int, double, double, double, double>> classes;
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    const int slot = options.slot_of_rank.empty() ? rank % cluster.node.gpus : options.slot_of_rank[rank];
    classes.emplace(graph.program_of_rank[rank], slot, per_gpu(options.speed_factors, rank),
                    per_gpu(options.inlet_offset_c, rank), per_gpu(options.power_limit_w, rank),
                    per_gpu(options.max_clock_mhz, rank));
  }
  return static_cast<std::int64_t>(classes.size());
}

/// The power-sample work of `powers` (graph's costed programs) under `options`.
PowerSampleWork power_sample_work(const graph::Graph& graph, const ClusterSpec& cluster,
                                  const SimOptions& options, std::vector<ProgramPower>& powers) {
  PowerSampleWork work;
  double fastest_speed = 1;
  for (double speed : options.speed_factors) fastest_speed = std::max(fastest_speed, speed);
  for (ProgramPower& program : powers)
    work.step_floor_s = std::max(work.step_floor_s, program.at_clock(cluster.gpu.max_sm_mhz).busy_s);
  work.step_floor_s /= fastest_speed;
  work.samples_per_gpu_step = std::max(1.0, work.step_floor_s / cluster.gpu.power_control.sample_window_s);
  work.gpu_classes = distinct_gpu_classes(graph, cluster, options);
  work.power_samples = work.samples_per_gpu_step * static_cast<double>(work.gpu_classes) * options.steps;
  return work;
}

/// Stage 3b: refuses, before any step, a simulation whose power traces would exceed
/// options.max_power_samples (a step of days on a card of a few GFLOP/s, a sequence of millions of tokens).
void check_power_samples(const graph::Graph& graph, const ClusterSpec& cluster, const SimOptions& options,
                         std::vector<ProgramPower>& powers) {
  if (options.max_power_samples <= 0) return;
  const PowerSampleWork work = power_sample_work(graph, cluster, options, powers);
  require_input(
      work.power_samples <= options.max_power_samples,
      fmt::format("this simulation would compute {:.3g} power samples ({} GPUs of distinct heat x {} steps x "
                  "{:.3g} per step: "
                  "a step of at least {:.3g} s of compute on {} at {:.3g} TFLOP/s, sampled every {:g} ms), "
                  "beyond the {:.3g} allowed (~{} bytes and ~{} ns each); check the cluster's "
                  "peak_bf16_tflops and the model's sizes, simulate fewer steps or GPUs, or lift the "
                  "limit with --max-power-samples N (calo sim; 0 = no limit)",
                  work.power_samples, work.gpu_classes, options.steps, work.samples_per_gpu_step,
                  work.step_floor_s, cluster.gpu.name, cluster.gpu.peak_bf16_flops / 1e12,
                  cluster.gpu.power_control.sample_window_s * 1e3, options.max_power_samples,
                  kPowerSampleBytes, kPowerSampleNs));
}

/// The clock a GPU runs at when nothing but heat limits it (a fixed clock replaces the maximum).
double unthrottled_clock_mhz(const GpuSpec& gpu, const SimOptions& options) {
  return options.fixed_clock_mhz > 0 ? std::min(options.fixed_clock_mhz, gpu.max_sm_mhz) : gpu.max_sm_mhz;
}

/// Stage 4: every GPU's static state (slot air, speed, power-cap operating clock, idle temperatures).
std::vector<GpuState> init_gpu_states(const graph::Graph& graph, const ClusterSpec& cluster,
                                      const SimOptions& options, std::vector<ProgramPower>& powers,
                                      SimResult& result) {
  const GpuSpec& gpu = cluster.gpu;
  const int world = graph.world_size();
  std::vector<GpuState> states(world);
  result.gpus.resize(world);
  for (int rank = 0; rank < world; ++rank) {
    GpuState& state = states[rank];
    state.where = coordinates(graph.layout, rank);
    state.program = graph.program_of_rank[rank];
    if (!options.speed_factors.empty()) state.speed = options.speed_factors[rank];
    state.power_limit_w = options.power_limit_w.empty()
                              ? gpu.power_limit_w
                              : std::min(gpu.power_limit_w, options.power_limit_w[rank]);
    state.max_clock_mhz = options.max_clock_mhz.empty()
                              ? gpu.max_sm_mhz
                              : std::clamp(options.max_clock_mhz[rank], gpu.min_sm_mhz, gpu.max_sm_mhz);
    if (const std::string refusal = power_cap_refusal(gpu, state.power_limit_w); !refusal.empty())
      throw InputError(fmt::format("power cap {} W of GPU {}: {}", state.power_limit_w, rank, refusal));
    const int slot = options.slot_of_rank.empty() ? rank % cluster.node.gpus : options.slot_of_rank[rank];
    require_input(
        slot >= 0 && slot < cluster.node.gpus,
        fmt::format("slot {} of GPU {} is outside the node's {} slots", slot, rank, cluster.node.gpus));
    state.inlet_c =
        cluster.slot_inlet_c(slot) + (options.inlet_offset_c.empty() ? 0.0 : options.inlet_offset_c[rank]);
    state.r_scale = cluster.slot_r_scale(slot);
    state.cap_mhz = options.power_cap
                        ? powers[state.program].power_cap_clock_mhz(0.0, 1.0, state.power_limit_w)
                        : gpu.max_sm_mhz;
    state.thermal = thermal_steady_state(gpu.thermal, state.inlet_c, state.r_scale, gpu.idle_power_w);
    if (options.initial_die_c >= 0) {
      // A GPU idling at this die temperature.
      state.thermal = thermal_state_at(gpu.thermal, state.r_scale, gpu.idle_power_w, options.initial_die_c);
    }
    GpuResult& out = result.gpus[rank];
    out.rank = rank;
    out.node = rank / cluster.node.gpus;
    out.slot = slot;
    out.stage = state.where.stage;
    out.power_limit_w = state.power_limit_w;
    out.min_clock_mhz = gpu.max_sm_mhz;
  }
  return states;
}

/// What one step produced: the engine's iteration and every GPU's power trace over it.
struct StepOutcome {
  const EngineResult* engine = nullptr;  ///< owned by the runner's cache
  /// Per entity of `engine`, its interned wait pattern (nullptr: its waits at the step's end); the cache's.
  const std::vector<std::shared_ptr<const WaitPattern>>* waits = nullptr;
  std::vector<std::int32_t> entity_of_rank;               ///< entity standing for each rank
  std::vector<std::shared_ptr<const PowerTrace>> traces;  ///< per rank
  StepResult step;                                        ///< classes, entities, reuse
};

/// Stage 5 (per step): folds GPUs into engine entities, runs the engine, and closes the DVFS loop through
/// each GPU's power trace (clocks -> engine -> idle and communication -> controller -> effective clocks).
class StepRunner {
 public:
  StepRunner(const graph::Graph& graph, const ClusterSpec& cluster, const SimOptions& options,
             std::vector<ProgramPower>& powers)
      : graph_(graph),
        cluster_(cluster),
        options_(options),
        powers_(powers),
        engine_(graph, cluster, powers),
        traces_(cluster.gpu, powers) {}

  /// Runs step `step` to its DVFS fixed point; updates each GPU's clock. `op_events` accumulates engine work.
  StepOutcome run(std::vector<GpuState>& gpus, int step, std::uint64_t& op_events) {
    const GpuSpec& gpu = cluster_.gpu;
    const double top_mhz = unthrottled_clock_mhz(gpu, options_);
    for (GpuState& state : gpus) {
      const double locked_mhz = std::min(top_mhz, state.max_clock_mhz);
      // Thermal slowdown takes clocks off what the power cap (and any lock) allows this GPU.
      state.thermal_limit_mhz =
          options_.thermal
              ? std::min(locked_mhz, thermal_clock_limit_mhz(gpu, state.thermal.die_c,
                                                             std::min(locked_mhz, state.cap_mhz)))
              : locked_mhz;
      state.clock_mhz = clock_bin_mhz(gpu, std::min(state.cap_mhz, state.thermal_limit_mhz));
      state.leakage_w = options_.thermal ? leakage_power_w(gpu, state.thermal.die_c) : 0.0;
    }
    StepOutcome outcome;
    const bool timeline = options_.record_timeline && step + 1 == options_.steps;
    for (int round = 0; round < 8; ++round) {
      const std::string key = fold_replicas(gpus, outcome);
      const EngineRun& engine = run_engine(key, outcome, timeline, op_events);
      outcome.engine = &engine.result;
      outcome.waits = &engine.waits;
      if (!update_clocks(gpus, outcome)) break;
    }
    return outcome;
  }

  /// Distinct power traces computed so far.
  std::size_t traces_computed() const { return traces_.computed(); }

 private:
  /// Replica classes: units with identical stretches at every (ep index, stage) are simulated once.
  std::string fold_replicas(const std::vector<GpuState>& gpus, StepOutcome& outcome) {
    const parallel::Layout& layout = graph_.layout;
    const int world = graph_.world_size();
    const int units = layout.expert_dp_size(), ep = layout.ep, pp = layout.pp;
    compute_stretch_.assign(world / layout.tp, 0.0);
    memory_stretch_.assign(world / layout.tp, 0.0);
    for (const GpuState& state : gpus) {
      const int group = state.where.tp_group;
      compute_stretch_[group] =
          std::max(compute_stretch_[group], cluster_.gpu.max_sm_mhz / state.clock_mhz / state.speed);
      memory_stretch_[group] = std::max(memory_stretch_[group], 1.0 / state.speed);
    }
    std::map<std::string, int> class_of_key;
    std::vector<int> class_of_unit(units);
    std::vector<int> first_unit_of_class;
    std::string full_key;
    for (int unit = 0; unit < units; ++unit) {
      std::string key;
      for (int stage = 0; stage < pp; ++stage) {
        for (int ep_index = 0; ep_index < ep; ++ep_index) {
          const int group = tp_group_of(layout, unit, ep_index, stage);
          key += fmt::format("{},{};", std::llround(compute_stretch_[group] * 1e4),
                             std::llround(memory_stretch_[group] * 1e4));
        }
      }
      auto [position, inserted] = class_of_key.emplace(key, static_cast<int>(first_unit_of_class.size()));
      if (inserted) {
        first_unit_of_class.push_back(unit);
        full_key += key + "|";
      }
      class_of_unit[unit] = position->second;
    }
    const int classes = static_cast<int>(first_unit_of_class.size());
    entities_.assign(static_cast<std::size_t>(classes) * ep * pp, EngineEntity{});
    for (int klass = 0; klass < classes; ++klass) {
      for (int ep_index = 0; ep_index < ep; ++ep_index) {
        for (int stage = 0; stage < pp; ++stage) {
          const int group = tp_group_of(layout, first_unit_of_class[klass], ep_index, stage);
          EngineEntity& entity = entities_[(klass * ep + ep_index) * pp + stage];
          entity.representative = group * layout.tp;
          entity.program = graph_.program_of_rank[entity.representative];
          entity.compute_stretch = compute_stretch_[group];
          entity.memory_stretch = memory_stretch_[group];
        }
      }
    }
    outcome.entity_of_rank.resize(world);
    for (int rank = 0; rank < world; ++rank) {
      const Coordinates& where = gpus[rank].where;
      outcome.entity_of_rank[rank] = (class_of_unit[where.unit] * ep + where.ep_index) * pp + where.stage;
    }
    outcome.step.replica_classes = classes;
    outcome.step.entities = static_cast<int>(entities_.size());
    return full_key;
  }

  /// An engine result with its entities' wait patterns, interned once per result (not per clock round).
  struct EngineRun {
    EngineResult result;
    std::vector<std::shared_ptr<const WaitPattern>> waits;  ///< per entity (nullptr: waits at the end)
  };

  /// The engine's iteration for these entities, reused from an identical earlier fold where possible.
  const EngineRun& run_engine(const std::string& key, StepOutcome& outcome, bool timeline,
                              std::uint64_t& op_events) {
    auto cached = engine_cache_.find(key);
    if (cached != engine_cache_.end() && !timeline) {
      outcome.step.reused = true;
      return cached->second;
    }
    EngineRun fresh{engine_.run(entities_, outcome.entity_of_rank, timeline), {}};
    op_events += fresh.result.op_events;
    fresh.waits.resize(fresh.result.entities.size());
    if (options_.waits_in_place) {
      // At most one replica class's worth of new patterns (pp x ep, at least 16, at most
      // kMaxWaitPatternsPerResult): entities run class by class, so the first class's every stage is placed.
      const auto bound = std::clamp<std::size_t>(
          static_cast<std::size_t>(graph_.layout.pp * graph_.layout.ep), 16, kMaxWaitPatternsPerResult);
      std::unordered_set<const WaitPattern*> distinct;
      for (std::size_t entity = 0; entity < fresh.waits.size(); ++entity) {
        auto& pattern = fresh.waits[entity];
        pattern = traces_.waits(fresh.result.entities[entity].waits, fresh.result.iteration_s,
                                distinct.size() < bound);
        if (pattern) distinct.insert(pattern.get());
      }
    }
    if (engine_cache_.size() > 64) engine_cache_.clear();
    outcome.step.reused = false;
    return engine_cache_[key] = std::move(fresh);
  }

  /// Each GPU's power trace over this iteration; returns whether any effective clock moved (another round).
  bool update_clocks(std::vector<GpuState>& gpus, StepOutcome& outcome) {
    const GpuSpec& gpu = cluster_.gpu;
    const double active_comm_w = gpu.active_power_w[static_cast<int>(PowerClass::kCommunication)];
    const double iteration_s = outcome.engine->iteration_s;
    outcome.traces.resize(gpus.size());
    bool changed = false;
    for (std::size_t rank = 0; rank < gpus.size(); ++rank) {
      GpuState& state = gpus[rank];
      const std::int32_t entity_index = outcome.entity_of_rank[rank];
      const EntityResult& entity = outcome.engine->entities[entity_index];
      const double comm_busy_s = entity.comm_busy_s;
      if (options_.power_cap) state.cap_mhz = cap_clock_mhz(state, active_comm_w * comm_busy_s);
      StepPowerRequest request;
      request.iteration_s = iteration_s;
      request.start_clock_mhz = std::min(state.cap_mhz, state.thermal_limit_mhz);
      request.clock_limit_mhz = state.thermal_limit_mhz;
      request.speed = state.speed;
      request.comm_power_w = iteration_s > 0 ? active_comm_w * comm_busy_s / iteration_s : 0.0;
      request.wait_power_w = wait_power_w(gpu, entity, iteration_s);
      request.power_cap = options_.power_cap;
      request.power_limit_w = state.power_limit_w;
      request.leakage_w = state.leakage_w;
      // An entity's ranks share its pattern (and so, at equal speed, the trace).
      outcome.traces[rank] = traces_.get(state.program, request, (*outcome.waits)[entity_index]);
      const double next_mhz = std::min(outcome.traces[rank]->effective_clock_mhz, state.thermal_limit_mhz);
      if (std::fabs(next_mhz - state.clock_mhz) > 0.5) {
        state.clock_mhz = next_mhz;
        changed = true;
      }
    }
    return changed;
  }

  /// Static power-cap operating point with `comm_energy_j` in the busy window (memoized); leakage takes its
  /// share of the cap first.
  double cap_clock_mhz(const GpuState& state, double comm_energy_j) {
    const double limit_w = state.power_limit_w - state.leakage_w;
    const auto key = std::make_tuple(state.program, std::llround(comm_energy_j * 1e3),
                                     std::llround(state.speed * 1e6), std::llround(limit_w * 10));
    auto found = cap_cache_.find(key);
    if (found == cap_cache_.end()) {
      found =
          cap_cache_
              .emplace(key, powers_[state.program].power_cap_clock_mhz(comm_energy_j, state.speed, limit_w))
              .first;
    }
    return found->second;
  }

  const graph::Graph& graph_;
  const ClusterSpec& cluster_;
  const SimOptions& options_;
  std::vector<ProgramPower>& powers_;
  Engine engine_;
  PowerTraceCache traces_;
  std::vector<double> compute_stretch_, memory_stretch_;
  std::vector<EngineEntity> entities_;
  std::map<std::string, EngineRun> engine_cache_;
  std::map<std::tuple<int, long long, long long, long long>, double> cap_cache_;
};

/// Index of `trace` in result.power_traces, adding it the first time it is seen.
std::int32_t trace_index(SimResult& result, std::unordered_map<const PowerTrace*, std::int32_t>& seen,
                         const std::shared_ptr<const PowerTrace>& trace) {
  auto [position, inserted] =
      seen.emplace(trace.get(), static_cast<std::int32_t>(result.power_traces.size()));
  if (inserted) result.power_traces.push_back(trace);
  return position->second;
}

/// Stage 6 (per step): energy (the integral of each GPU's power trace), throttling and heat per GPU.
void account_step(const ClusterSpec& cluster, const SimOptions& options, const StepOutcome& outcome,
                  std::vector<GpuState>& gpus, SimResult& result,
                  std::unordered_map<const PowerTrace*, std::int32_t>& seen) {
  const GpuSpec& gpu = cluster.gpu;
  StepResult step_result = outcome.step;
  const double iteration_s = outcome.engine->iteration_s;
  step_result.iteration_s = iteration_s;
  step_result.min_die_c = 1e9;
  step_result.min_clock_mhz = gpu.max_sm_mhz;
  double die_sum = 0, clock_sum = 0, power_sum = 0;
  const int world = static_cast<int>(gpus.size());
  for (int rank = 0; rank < world; ++rank) {
    GpuState& state = gpus[rank];
    const PowerTrace& trace = *outcome.traces[rank];
    const double energy_j = trace.energy_j;
    const double power_w = iteration_s > 0 ? energy_j / iteration_s : gpu.idle_power_w;
    GpuResult& out = result.gpus[rank];
    out.energy_j += energy_j;
    out.peak_power_w = std::max(out.peak_power_w, trace.peak_w);
    out.power_swing_100ms_w = std::max(out.power_swing_100ms_w, trace.swing_w);
    out.min_clock_mhz = std::min(out.min_clock_mhz, state.clock_mhz);
    out.busy_s += trace.busy_s;
    const bool thermal_bound = state.thermal_limit_mhz < std::min(gpu.max_sm_mhz, state.max_clock_mhz) &&
                               state.cap_mhz > state.thermal_limit_mhz;
    if (thermal_bound) {
      out.throttle_thermal_s += trace.busy_s;
    } else {
      out.throttle_power_cap_s += trace.capped_busy_s;
    }
    if (state.clock_mhz < gpu.max_sm_mhz) step_result.throttled_gpus += 1;
    if (options.thermal) {
      thermal_advance(gpu.thermal, state.inlet_c, state.r_scale, power_w, iteration_s, state.thermal);
    }
    out.max_die_c = std::max(out.max_die_c, state.thermal.die_c);
    out.final_die_c = state.thermal.die_c;
    result.die_c.push_back(static_cast<float>(state.thermal.die_c));
    result.clock_mhz.push_back(static_cast<float>(state.clock_mhz));
    result.power_w.push_back(static_cast<float>(power_w));
    result.trace_of.push_back(trace_index(result, seen, outcome.traces[rank]));
    step_result.energy_j += energy_j;
    step_result.max_power_w = std::max(step_result.max_power_w, power_w);
    step_result.peak_power_w = std::max(step_result.peak_power_w, trace.peak_w);
    step_result.min_die_c = std::min(step_result.min_die_c, state.thermal.die_c);
    step_result.max_die_c = std::max(step_result.max_die_c, state.thermal.die_c);
    step_result.min_clock_mhz = std::min(step_result.min_clock_mhz, state.clock_mhz);
    die_sum += state.thermal.die_c;
    clock_sum += state.clock_mhz;
    power_sum += power_w;
  }
  step_result.mean_die_c = die_sum / world;
  step_result.mean_clock_mhz = clock_sum / world;
  step_result.mean_power_w = power_sum / world;
  result.step_results.push_back(step_result);
}

/// Stage 7 (last step): where the step's time went (compute, exposed communication per class, waiting), and
/// the op timeline when asked.
void record_breakdown(const SimOptions& options, const StepOutcome& outcome, SimResult& result) {
  const int world = result.world;
  const EngineResult& engine = *outcome.engine;
  result.last_iteration_s = engine.iteration_s;
  double exposed_total = 0;
  for (int rank = 0; rank < world; ++rank) {
    const EntityResult& entity = engine.entities[outcome.entity_of_rank[rank]];
    result.compute_busy_s += entity.compute_busy_s / world;
    for (int klass = 0; klass < kNumCommClasses; ++klass) {
      result.exposed_comm_s[klass] += entity.exposed_comm_s[klass] / world;
      result.comm_transfer_s[klass] += entity.comm_transfer_s[klass] / world;
      exposed_total += entity.exposed_comm_s[klass] / world;
    }
  }
  result.wait_s = std::max(0.0, engine.iteration_s - result.compute_busy_s - exposed_total);
  if (options.record_timeline) {
    result.timeline.resize(world);
    std::vector<bool> entity_kept(engine.entities.size(), false);
    for (int rank = 0; rank < world; ++rank) {
      const auto entity = static_cast<std::size_t>(outcome.entity_of_rank[rank]);
      if (options.timeline_distinct_ranks && entity_kept[entity]) continue;
      entity_kept[entity] = true;
      result.timeline[rank] = engine.entities[entity].timeline;
    }
  }
}

}  // namespace

SimResult simulate(const graph::Graph& graph, const ClusterSpec& cluster, const SimOptions& options_by_gpu) {
  const auto wall_start = std::chrono::steady_clock::now();
  validate_options(graph, options_by_gpu);
  require_precision(cluster.gpu, cluster.name, graph.layout.precision);
  check_stage_moves(graph.layout, cluster.node.gpus);
  // Without a stage -> GPU order ranks are GPUs: no copy of the options on the planner's hot path.
  std::optional<SimOptions> placed;
  if (!graph.layout.stage_gpus.empty())
    placed = options_per_rank(options_by_gpu, graph.layout, cluster.node.gpus);
  const SimOptions& options = placed ? *placed : options_by_gpu;
  SimResult result = describe_run(graph, cluster, options);
  std::vector<ProgramPower> powers = cost_programs(graph, cluster.gpu, result);
  check_power_samples(graph, cluster, options, powers);
  std::vector<GpuState> gpus = init_gpu_states(graph, cluster, options, powers, result);
  StepRunner runner(graph, cluster, options, powers);
  const std::size_t samples = static_cast<std::size_t>(result.world) * options.steps;
  result.die_c.reserve(samples);
  result.clock_mhz.reserve(samples);
  result.power_w.reserve(samples);
  result.trace_of.reserve(samples);
  std::unordered_map<const PowerTrace*, std::int32_t> seen_traces;
  double total_time_s = 0;
  for (int step = 0; step < options.steps; ++step) {
    const StepOutcome outcome = runner.run(gpus, step, result.op_events);
    account_step(cluster, options, outcome, gpus, result, seen_traces);
    total_time_s += outcome.engine->iteration_s;
    if (step + 1 == options.steps) record_breakdown(options, outcome, result);
    if (options.progress) options.progress(step, options.steps);
  }
  result.iteration_s = total_time_s / options.steps;
  for (GpuResult& out : result.gpus) out.mean_power_w = out.energy_j / total_time_s;
  result.power_traces_computed = runner.traces_computed();
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

CALO_JSON_FIELDS(StepResult, iteration_s, energy_j, mean_power_w, max_power_w, peak_power_w, min_die_c,
                 mean_die_c, max_die_c, min_clock_mhz, mean_clock_mhz, throttled_gpus, replica_classes,
                 entities, reused)
CALO_JSON_FIELDS(GpuResult, rank, node, slot, stage, power_limit_w, energy_j, mean_power_w, peak_power_w,
                 power_swing_100ms_w, max_die_c, final_die_c, min_clock_mhz, throttle_power_cap_s,
                 throttle_thermal_s, busy_s)

PowerSampleWork estimated_power_samples(const graph::Graph& graph, const ClusterSpec& cluster,
                                        const SimOptions& options) {
  SimResult ignored;
  std::vector<ProgramPower> powers = cost_programs(graph, cluster.gpu, ignored);
  return power_sample_work(graph, cluster, options, powers);
}

nlohmann::json to_json(const SimResult& result, bool per_gpu) {
  nlohmann::json exposed = nlohmann::json::object();
  nlohmann::json transfer = nlohmann::json::object();
  for (int klass = 0; klass < kNumCommClasses; ++klass) {
    exposed[comm_class_name(klass)] = result.exposed_comm_s[klass];
    transfer[comm_class_name(klass)] = result.comm_transfer_s[klass];
  }
  double energy_j = 0, mean_power = 0, peak_power = 0, max_die = 0, throttle_cap = 0, throttle_thermal = 0;
  double swing = 0;
  for (const GpuResult& out : result.gpus) {
    energy_j += out.energy_j;
    swing = std::max(swing, out.power_swing_100ms_w);
    mean_power += out.mean_power_w / result.world;
    peak_power = std::max(peak_power, out.peak_power_w);
    max_die = std::max(max_die, out.max_die_c);
    throttle_cap += out.throttle_power_cap_s / result.world;
    throttle_thermal += out.throttle_thermal_s / result.world;
  }
  nlohmann::json json = {
      {"cluster", result.cluster},
      {"model", result.model},
      {"layout", result.layout},
      {"gpus", result.world},
      {"steps", result.steps},
      {"iteration_s", result.iteration_s},
      {"tokens_per_s", tokens_per_s(result)},
      {"model_tflops_per_gpu", model_flops_per_gpu(result) / 1e12},
      {"hardware_tflops_per_gpu",
       result.iteration_s > 0 ? result.hardware_flops_per_step / result.iteration_s / result.world / 1e12
                              : 0.0},
      {"mfu", mfu(result)},
      {"energy_per_step_j", energy_j / result.steps},
      {"mean_power_w", mean_power},
      {"peak_power_w", peak_power},
      {"power_swing_100ms_w", swing},
      {"power_limit_w", result.power_limit_w},
      {"max_die_c", max_die},
      {"throttle_power_cap_s", throttle_cap},
      {"throttle_thermal_s", throttle_thermal},
      {"compute_busy_s", result.compute_busy_s},
      {"exposed_comm_s", exposed},
      {"comm_transfer_s", transfer},
      {"wait_s", result.wait_s},
      {"per_step", result.step_results},
      {"engine",
       {{"op_events", result.op_events},
        {"power_traces", result.power_traces_computed},
        {"wall_s", result.wall_s}}},
  };
  if (per_gpu) {
    nlohmann::json gpus = nlohmann::json::array();
    const std::size_t world = static_cast<std::size_t>(result.world);
    for (const GpuResult& out : result.gpus) {
      std::vector<float> die, clock, power;
      for (int step = 0; step < result.steps; ++step) {
        const std::size_t index = static_cast<std::size_t>(step) * world + static_cast<std::size_t>(out.rank);
        die.push_back(result.die_c[index]);
        clock.push_back(result.clock_mhz[index]);
        power.push_back(result.power_w[index]);
      }
      nlohmann::json gpu = out;
      gpu.update({{"die_c", die}, {"clock_mhz", clock}, {"power_w", power}});
      gpus.push_back(std::move(gpu));
    }
    json["per_gpu"] = gpus;
  }
  return json;
}

}  // namespace calo::sim
