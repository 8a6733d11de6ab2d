#include "sim/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/error.h"

namespace calo::sim {

namespace {

/// Where a rank sits in the layout (Megatron order tp-cp-ep-dp-pp: rank = tp + tp_size*(dp + dp_size*pp)).
struct Coordinates {
  int tp_group = 0;  ///< rank / tp: index of its tensor-parallel group
  int unit = 0;      ///< replica group: dp_index / ep (the ep replicas that exchange tokens)
  int ep_index = 0;  ///< dp_index % ep
  int stage = 0;     ///< pipeline stage
};

Coordinates coordinates(const parallel::Layout& layout, int rank) {
  Coordinates result;
  result.tp_group = rank / layout.tp;
  const int dp_index = result.tp_group % layout.dp;
  result.stage = result.tp_group / layout.dp;
  result.ep_index = dp_index % layout.ep;
  result.unit = dp_index / layout.ep;
  return result;
}

bool counts_as_model_flops(const graph::Op& op) {
  return (op.kind == graph::OpKind::kGemm || op.kind == graph::OpKind::kAttention) &&
         op.phase != graph::Phase::kRecompute;
}

bool is_comm(graph::OpKind kind) {
  return kind == graph::OpKind::kCollective || kind == graph::OpKind::kSend || kind == graph::OpKind::kRecv;
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

SimResult simulate(const graph::Graph& graph, const ClusterSpec& cluster, const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const parallel::Layout& layout = graph.layout;
  const GpuSpec& gpu = cluster.gpu;
  const int world = graph.world_size();
  require_input(world >= 1, "the graph has no ranks; give a layout with at least one GPU");
  require_input(options.steps >= 1, fmt::format("--steps {} must be >= 1", options.steps));
  require_input(options.speed_factors.empty() || static_cast<int>(options.speed_factors.size()) == world,
                fmt::format("{} speed factors given for {} GPUs; give one per GPU or none",
                            options.speed_factors.size(), world));
  for (double speed : options.speed_factors) {
    require_input(speed > 0 && speed <= 10,
                  fmt::format("speed factor {} is out of range; use (0, 10]", speed));
  }
  require_input(options.inlet_offset_c.empty() || static_cast<int>(options.inlet_offset_c.size()) == world,
                fmt::format("{} inlet offsets given for {} GPUs; give one per GPU or none",
                            options.inlet_offset_c.size(), world));

  SimResult result;
  result.cluster = cluster.name;
  result.layout = parallel::describe(layout);
  result.model = graph.model.name;
  result.world = world;
  result.steps = options.steps;
  result.tokens_per_step = static_cast<double>(layout.global_batch) * layout.seq_length;
  result.peak_flops_per_gpu = gpu.peak_bf16_flops;
  result.power_limit_w = gpu.power_limit_w;

  // Compute costs per program, and FLOP totals (each program counted once per rank running it).
  std::vector<ProgramPower> powers;
  powers.reserve(graph.programs.size());
  for (const auto& program : graph.programs) powers.emplace_back(gpu, program);
  std::vector<int> ranks_per_program(graph.programs.size(), 0);
  for (int rank = 0; rank < world; ++rank) ranks_per_program[graph.program_of_rank[rank]] += 1;
  for (std::size_t index = 0; index < graph.programs.size(); ++index) {
    for (const auto& op : graph.programs[index].ops) {
      if (counts_as_model_flops(op)) result.model_flops_per_step += op.flops * ranks_per_program[index];
      if (!is_comm(op.kind)) result.hardware_flops_per_step += op.flops * ranks_per_program[index];
    }
  }

  // Per-GPU static state.
  std::vector<Coordinates> coords(world);
  std::vector<double> speed(world, 1.0), inlet_c(world), r_scale(world), cap_mhz(world), clock(world),
      thermal_limit(world);
  std::vector<ThermalState> thermal(world);
  result.gpus.resize(world);
  const double active_comm_w = gpu.active_power_w[static_cast<int>(PowerClass::kCommunication)];
  for (int rank = 0; rank < world; ++rank) {
    coords[rank] = coordinates(layout, rank);
    if (!options.speed_factors.empty()) speed[rank] = options.speed_factors[rank];
    const int slot = rank % cluster.node.gpus;
    inlet_c[rank] =
        cluster.slot_inlet_c(slot) + (options.inlet_offset_c.empty() ? 0.0 : options.inlet_offset_c[rank]);
    r_scale[rank] = cluster.slot_r_scale(slot);
    const int program = graph.program_of_rank[rank];
    cap_mhz[rank] = options.power_cap ? powers[program].power_cap_clock_mhz() : gpu.max_sm_mhz;
    thermal[rank] = thermal_steady_state(gpu.thermal, inlet_c[rank], r_scale[rank], gpu.idle_power_w);
    if (options.initial_die_c >= 0) thermal[rank] = {options.initial_die_c, options.initial_die_c};
    GpuResult& out = result.gpus[rank];
    out.rank = rank;
    out.node = rank / cluster.node.gpus;
    out.slot = slot;
    out.stage = coords[rank].stage;
    out.min_clock_mhz = gpu.max_sm_mhz;
  }

  Engine engine(graph, cluster, powers);
  const int units = layout.dp / layout.ep;
  const int ep = layout.ep;
  const int pp = layout.pp;
  const int tp_groups = world / layout.tp;
  std::vector<double> compute_stretch(tp_groups), memory_stretch(tp_groups);
  std::vector<std::int32_t> entity_of_rank(world);
  std::map<std::string, EngineResult> engine_cache;
  std::map<std::tuple<int, long long, long long>, double> cap_cache;
  result.die_c.reserve(static_cast<std::size_t>(world) * options.steps);
  result.clock_mhz.reserve(static_cast<std::size_t>(world) * options.steps);
  result.power_w.reserve(static_cast<std::size_t>(world) * options.steps);
  double total_time_s = 0;

  for (int step = 0; step < options.steps; ++step) {
    for (int rank = 0; rank < world; ++rank) {
      thermal_limit[rank] =
          options.thermal ? thermal_clock_limit_mhz(gpu, thermal[rank].die_c) : gpu.max_sm_mhz;
      clock[rank] = clock_bin_mhz(gpu, std::min(cap_mhz[rank], thermal_limit[rank]));
    }
    const EngineResult* engine_result = nullptr;
    StepResult step_result;
    // DVFS fixed point: clocks -> engine -> communication energy -> power-cap clocks (usually 1-2 rounds).
    for (int round = 0; round < 6; ++round) {
      std::fill(compute_stretch.begin(), compute_stretch.end(), 0.0);
      std::fill(memory_stretch.begin(), memory_stretch.end(), 0.0);
      for (int rank = 0; rank < world; ++rank) {
        const int group = coords[rank].tp_group;
        compute_stretch[group] = std::max(compute_stretch[group], gpu.max_sm_mhz / clock[rank] / speed[rank]);
        memory_stretch[group] = std::max(memory_stretch[group], 1.0 / speed[rank]);
      }
      // Replica classes: units with identical stretches at every (ep index, stage) are simulated once.
      std::map<std::string, int> class_of_key;
      std::vector<int> class_of_unit(units);
      std::vector<int> first_unit_of_class;
      std::string full_key;
      for (int unit = 0; unit < units; ++unit) {
        std::string key;
        for (int stage = 0; stage < pp; ++stage) {
          for (int ep_index = 0; ep_index < ep; ++ep_index) {
            const int group = (unit * ep + ep_index) + layout.dp * stage;
            key += fmt::format("{},{};", std::llround(compute_stretch[group] * 1e4),
                               std::llround(memory_stretch[group] * 1e4));
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
      std::vector<EngineEntity> entities(static_cast<std::size_t>(classes) * ep * pp);
      for (int klass = 0; klass < classes; ++klass) {
        for (int ep_index = 0; ep_index < ep; ++ep_index) {
          for (int stage = 0; stage < pp; ++stage) {
            const int dp_index = first_unit_of_class[klass] * ep + ep_index;
            const int group = dp_index + layout.dp * stage;
            EngineEntity& entity = entities[(klass * ep + ep_index) * pp + stage];
            entity.representative = group * layout.tp;
            entity.program = graph.program_of_rank[entity.representative];
            entity.compute_stretch = compute_stretch[group];
            entity.memory_stretch = memory_stretch[group];
          }
        }
      }
      for (int rank = 0; rank < world; ++rank) {
        const Coordinates& where = coords[rank];
        entity_of_rank[rank] = (class_of_unit[where.unit] * ep + where.ep_index) * pp + where.stage;
      }
      step_result.replica_classes = classes;
      step_result.entities = static_cast<int>(entities.size());
      const bool last_step = step + 1 == options.steps;
      const bool timeline = options.record_timeline && last_step;
      auto cached = engine_cache.find(full_key);
      if (cached != engine_cache.end() && !timeline) {
        engine_result = &cached->second;
        step_result.reused = true;
      } else {
        EngineResult fresh = engine.run(entities, entity_of_rank, timeline);
        result.op_events += fresh.op_events;
        if (engine_cache.size() > 64) engine_cache.clear();
        engine_result = &(engine_cache[full_key] = std::move(fresh));
        step_result.reused = false;
      }
      if (!options.power_cap) break;
      bool changed = false;
      for (int rank = 0; rank < world; ++rank) {
        const int program = graph.program_of_rank[rank];
        const double comm_energy_j =
            active_comm_w * engine_result->entities[entity_of_rank[rank]].comm_busy_s;
        const auto key =
            std::make_tuple(program, std::llround(comm_energy_j * 1e3), std::llround(speed[rank] * 1e6));
        auto found = cap_cache.find(key);
        if (found == cap_cache.end()) {
          found =
              cap_cache.emplace(key, powers[program].power_cap_clock_mhz(comm_energy_j, speed[rank])).first;
        }
        cap_mhz[rank] = found->second;
        const double next_clock = clock_bin_mhz(gpu, std::min(cap_mhz[rank], thermal_limit[rank]));
        if (next_clock != clock[rank]) {
          clock[rank] = next_clock;
          changed = true;
        }
      }
      if (!changed) break;
    }

    // Energy, power, throttling and heat per GPU.
    const double iteration_s = engine_result->iteration_s;
    step_result.iteration_s = iteration_s;
    step_result.min_die_c = 1e9;
    step_result.min_clock_mhz = gpu.max_sm_mhz;
    double die_sum = 0;
    double clock_sum = 0;
    double power_sum = 0;
    for (int rank = 0; rank < world; ++rank) {
      const int program = graph.program_of_rank[rank];
      const ProgramAtClock& summary = powers[program].at_clock(clock[rank]);
      const EntityResult& entity = engine_result->entities[entity_of_rank[rank]];
      const double busy_s = summary.busy_s / speed[rank];
      const double energy_j =
          gpu.idle_power_w * iteration_s + summary.active_energy_j + active_comm_w * entity.comm_busy_s;
      const double power_w = iteration_s > 0 ? energy_j / iteration_s : gpu.idle_power_w;
      GpuResult& out = result.gpus[rank];
      out.energy_j += energy_j;
      out.peak_power_w = std::max(out.peak_power_w, summary.peak_power_w);
      out.min_clock_mhz = std::min(out.min_clock_mhz, clock[rank]);
      out.busy_s += busy_s;
      if (clock[rank] < gpu.max_sm_mhz) {
        if (cap_mhz[rank] <= thermal_limit[rank]) {
          out.throttle_power_cap_s += busy_s;
        } else {
          out.throttle_thermal_s += busy_s;
        }
        step_result.throttled_gpus += 1;
      }
      if (options.thermal) {
        thermal_advance(gpu.thermal, inlet_c[rank], r_scale[rank], power_w, iteration_s, thermal[rank]);
      }
      out.max_die_c = std::max(out.max_die_c, thermal[rank].die_c);
      out.final_die_c = thermal[rank].die_c;
      result.die_c.push_back(static_cast<float>(thermal[rank].die_c));
      result.clock_mhz.push_back(static_cast<float>(clock[rank]));
      result.power_w.push_back(static_cast<float>(power_w));
      step_result.energy_j += energy_j;
      step_result.max_power_w = std::max(step_result.max_power_w, power_w);
      step_result.min_die_c = std::min(step_result.min_die_c, thermal[rank].die_c);
      step_result.max_die_c = std::max(step_result.max_die_c, thermal[rank].die_c);
      step_result.min_clock_mhz = std::min(step_result.min_clock_mhz, clock[rank]);
      die_sum += thermal[rank].die_c;
      clock_sum += clock[rank];
      power_sum += power_w;
    }
    step_result.mean_die_c = die_sum / world;
    step_result.mean_clock_mhz = clock_sum / world;
    step_result.mean_power_w = power_sum / world;
    result.step_results.push_back(step_result);
    total_time_s += iteration_s;

    if (step + 1 == options.steps) {
      result.last_iteration_s = iteration_s;
      double exposed_total = 0;
      for (int rank = 0; rank < world; ++rank) {
        const EntityResult& entity = engine_result->entities[entity_of_rank[rank]];
        result.compute_busy_s += entity.compute_busy_s / world;
        for (int klass = 0; klass < kNumCommClasses; ++klass) {
          result.exposed_comm_s[klass] += entity.exposed_comm_s[klass] / world;
          result.comm_transfer_s[klass] += entity.comm_transfer_s[klass] / world;
          exposed_total += entity.exposed_comm_s[klass] / world;
        }
      }
      result.wait_s = std::max(0.0, iteration_s - result.compute_busy_s - exposed_total);
      if (options.record_timeline) {
        result.timeline.resize(world);
        for (int rank = 0; rank < world; ++rank) {
          result.timeline[rank] = engine_result->entities[entity_of_rank[rank]].timeline;
        }
      }
    }
    if (options.progress) options.progress(step, options.steps);
  }
  result.iteration_s = total_time_s / options.steps;
  for (GpuResult& out : result.gpus) out.mean_power_w = out.energy_j / total_time_s;
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

nlohmann::json to_json(const SimResult& result, bool per_gpu) {
  nlohmann::json exposed = nlohmann::json::object();
  nlohmann::json transfer = nlohmann::json::object();
  for (int klass = 0; klass < kNumCommClasses; ++klass) {
    exposed[comm_class_name(klass)] = result.exposed_comm_s[klass];
    transfer[comm_class_name(klass)] = result.comm_transfer_s[klass];
  }
  double energy_j = 0, mean_power = 0, peak_power = 0, max_die = 0, throttle_cap = 0, throttle_thermal = 0;
  for (const GpuResult& out : result.gpus) {
    energy_j += out.energy_j;
    mean_power += out.mean_power_w / result.world;
    peak_power = std::max(peak_power, out.peak_power_w);
    max_die = std::max(max_die, out.max_die_c);
    throttle_cap += out.throttle_power_cap_s / result.world;
    throttle_thermal += out.throttle_thermal_s / result.world;
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const StepResult& step : result.step_results) {
    steps.push_back({{"iteration_s", step.iteration_s},
                     {"energy_j", step.energy_j},
                     {"mean_power_w", step.mean_power_w},
                     {"max_power_w", step.max_power_w},
                     {"min_die_c", step.min_die_c},
                     {"mean_die_c", step.mean_die_c},
                     {"max_die_c", step.max_die_c},
                     {"min_clock_mhz", step.min_clock_mhz},
                     {"mean_clock_mhz", step.mean_clock_mhz},
                     {"throttled_gpus", step.throttled_gpus},
                     {"replica_classes", step.replica_classes},
                     {"entities", step.entities},
                     {"reused", step.reused}});
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
      {"power_limit_w", result.power_limit_w},
      {"max_die_c", max_die},
      {"throttle_power_cap_s", throttle_cap},
      {"throttle_thermal_s", throttle_thermal},
      {"compute_busy_s", result.compute_busy_s},
      {"exposed_comm_s", exposed},
      {"comm_transfer_s", transfer},
      {"wait_s", result.wait_s},
      {"per_step", steps},
      {"engine", {{"op_events", result.op_events}, {"wall_s", result.wall_s}}},
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
      gpus.push_back({{"rank", out.rank},
                      {"node", out.node},
                      {"slot", out.slot},
                      {"stage", out.stage},
                      {"energy_j", out.energy_j},
                      {"mean_power_w", out.mean_power_w},
                      {"peak_power_w", out.peak_power_w},
                      {"max_die_c", out.max_die_c},
                      {"final_die_c", out.final_die_c},
                      {"min_clock_mhz", out.min_clock_mhz},
                      {"throttle_power_cap_s", out.throttle_power_cap_s},
                      {"throttle_thermal_s", out.throttle_thermal_s},
                      {"busy_s", out.busy_s},
                      {"die_c", die},
                      {"clock_mhz", clock},
                      {"power_w", power}});
    }
    json["per_gpu"] = gpus;
  }
  return json;
}

}  // namespace calo::sim
