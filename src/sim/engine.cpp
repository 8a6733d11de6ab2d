#include "sim/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "core/error.h"

namespace calo::sim {

/// Per program: op indices of each stream in issue order.
struct Engine::ProgramStreams {
  std::vector<std::int32_t> ops[graph::kNumStreams];
};

namespace {

constexpr double kNotDone = -1.0;

bool is_comm(graph::OpKind kind) {
  return kind == graph::OpKind::kCollective || kind == graph::OpKind::kSend || kind == graph::OpKind::kRecv;
}

int comm_class(const graph::Op& op) {
  if (op.kind == graph::OpKind::kCollective) return static_cast<int>(op.group);
  // Messages: the context-parallel ring's are cp time, the pipeline's pp time.
  return static_cast<int>(op.group == graph::GroupKind::kCp ? graph::GroupKind::kCp : graph::GroupKind::kPp);
}

/// Which peer a message goes to, relative to the sender: (group, pipeline stage, ring offset).
std::tuple<int, int, int> peer_key(const graph::Op& op) {
  return {static_cast<int>(op.group), op.peer_stage, op.peer_offset};
}

/// A collective instance (one call of one group) or a point-to-point message.
struct Instance {
  int expected = 0;                   ///< arrivals needed (collective members; 1 for a message: its send)
  int arrived = 0;                    ///< arrivals so far
  double last_arrival_s = 0;          ///< latest arrival
  double cost_s = 0;                  ///< transfer time (max over members)
  double completion_s = kNotDone;     ///< set when complete (collective) or when the send is issued (message)
  std::vector<std::int32_t> waiters;  ///< entities blocked on it
};

/// Mutable state of one entity during a run.
struct EntityState {
  std::int32_t cursor[graph::kNumStreams] = {};
  double stream_free_s[graph::kNumStreams] = {};
  double compute_free_s = 0;  ///< end of the entity's latest compute op (its GPU waits after it)
  std::int32_t pending[graph::kNumStreams];
  double pending_ready_s[graph::kNumStreams] = {};  ///< arrival time of the pending op of each stream
  std::int64_t collective_count[graph::kNumGroupKinds] = {};
  std::int32_t sync_set[graph::kNumGroupKinds] = {};  ///< set id per group kind (set for kinds the rank has)
  std::int32_t sync_size[graph::kNumGroupKinds] = {};
  std::vector<double> finish_s;
  std::vector<double> begin_s;
  std::vector<double> chain_start_s;  ///< start of the back-to-back run of transfers an op ends (comm ops)
  std::vector<double> comm_begin_s;   ///< transfer start of each comm op
  std::vector<std::int32_t>
      chain_previous;  ///< the transfer before it in its back-to-back run, -1 at a run's start
  const std::vector<double>* comm_cost = nullptr;
  bool queued = false;
  std::uint64_t done_ops = 0;
  EntityState() {
    std::fill(std::begin(pending), std::end(pending), -1);
    std::fill(std::begin(sync_set), std::end(sync_set), -1);
  }
};

/// Key of the `sequence`-th collective of group kind `group_kind` over sync set `sync_set` (sets < 2^24,
/// kinds < 32, sequences < 2^35).
std::uint64_t collective_key(std::int32_t sync_set, int group_kind, std::int64_t sequence) {
  static_assert(graph::kNumGroupKinds <= 32, "collective_key holds 5 bits of group kind");
  return (static_cast<std::uint64_t>(sync_set) << 40) | (static_cast<std::uint64_t>(group_kind) << 35) |
         static_cast<std::uint64_t>(sequence);
}

/// Key of a message: sender entity, receiver entity, tag.
using MessageKey = std::tuple<std::int32_t, std::int32_t, std::int32_t>;

}  // namespace

Engine::Engine(const graph::Graph& graph, const ClusterSpec& cluster, const std::vector<ProgramPower>& powers)
    : graph_(graph), cluster_(cluster), powers_(powers) {
  streams_.resize(graph.programs.size());
  for (std::size_t index = 0; index < graph.programs.size(); ++index) {
    auto streams = std::make_shared<ProgramStreams>();
    const auto& ops = graph.programs[index].ops;
    for (std::size_t op_index = 0; op_index < ops.size(); ++op_index) {
      streams->ops[static_cast<int>(ops[op_index].stream)].push_back(static_cast<std::int32_t>(op_index));
    }
    streams_[index] = std::move(streams);
  }
}

const std::vector<double>& Engine::comm_costs(int program, int representative) {
  // The cost of every communication op depends only on the program and where the representative's groups and
  // peers sit; key the cache by that placement so ranks placed alike share one vector.
  std::string key = std::to_string(program);
  const auto placements = rank_group_placements(graph_, cluster_, representative);
  for (const GroupPlacement& placement : placements) {
    key += fmt::format("|{},{},{},{}", placement.size, placement.nodes, placement.per_node,
                       placement.cross_leaf);
  }
  const auto& ops = graph_.programs[program].ops;
  // Peer (pipeline stage or cp ring neighbour) -> peer rank, for the node placement of messages.
  std::map<std::tuple<int, int, int>, int> peer_of;
  for (const auto& op : ops) {
    if ((op.kind == graph::OpKind::kSend || op.kind == graph::OpKind::kRecv) &&
        !peer_of.contains(peer_key(op))) {
      const int peer = graph_.peer_rank(representative, op);
      peer_of[peer_key(op)] = peer;
      const int node_gpus = cluster_.node.gpus;
      const int leaf_nodes = cluster_.network.nodes_per_leaf;
      key += fmt::format("|p{},{},{}:{},{}", static_cast<int>(op.group), op.peer_stage, op.peer_offset,
                         representative / node_gpus == peer / node_gpus,
                         representative / node_gpus / leaf_nodes == peer / node_gpus / leaf_nodes);
    }
  }
  auto found = comm_cost_cache_.find(key);
  if (found != comm_cost_cache_.end()) return *found->second;
  auto costs = std::make_shared<std::vector<double>>(ops.size(), 0.0);
  for (std::size_t index = 0; index < ops.size(); ++index) {
    const auto& op = ops[index];
    if (op.kind == graph::OpKind::kCollective) {
      (*costs)[index] =
          collective_time_s(cluster_, op.collective, op.bytes, placements[static_cast<int>(op.group)]);
    } else if (op.kind == graph::OpKind::kSend || op.kind == graph::OpKind::kRecv) {
      (*costs)[index] = p2p_time_s(cluster_, op.bytes, representative, peer_of[peer_key(op)]);
    }
  }
  return *comm_cost_cache_.emplace(key, std::move(costs)).first->second;
}

EngineResult Engine::run(const std::vector<EngineEntity>& entities,
                         const std::vector<std::int32_t>& entity_of_rank, bool record_timeline) {
  const int entity_count = static_cast<int>(entities.size());
  std::vector<EntityState> states(entity_count);
  // Sync sets: for each entity and group kind, the set of entities covering its representative's group.
  std::map<std::vector<std::int32_t>, std::int32_t> sync_set_ids;
  std::vector<std::int32_t> members;
  for (int entity = 0; entity < entity_count; ++entity) {
    const EngineEntity& spec = entities[entity];
    EntityState& state = states[entity];
    const auto& program = graph_.programs[spec.program];
    state.finish_s.assign(program.ops.size(), kNotDone);
    state.chain_start_s.assign(program.ops.size(), 0.0);
    state.comm_begin_s.assign(program.ops.size(), 0.0);
    state.chain_previous.assign(program.ops.size(), -1);
    if (record_timeline) state.begin_s.assign(program.ops.size(), 0.0);
    state.comm_cost = &comm_costs(spec.program, spec.representative);
    for (int kind = 0; kind < graph::kNumGroupKinds; ++kind) {
      const int group_id = graph_.group_id(spec.representative, graph::GroupKind(kind));
      if (group_id < 0) continue;
      members.clear();
      for (std::int32_t rank : graph_.groups[group_id].ranks) members.push_back(entity_of_rank[rank]);
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      state.sync_size[kind] = static_cast<std::int32_t>(members.size());
      auto [position, inserted] =
          sync_set_ids.emplace(members, static_cast<std::int32_t>(sync_set_ids.size()));
      state.sync_set[kind] = position->second;
    }
  }

  EngineResult result;
  result.entities.resize(entity_count);
  std::vector<Instance> instances;
  std::unordered_map<std::uint64_t, std::int32_t> open_instances;
  std::map<MessageKey, std::int32_t> open_messages;
  std::deque<std::int32_t> queue;
  for (int entity = 0; entity < entity_count; ++entity) {
    queue.push_back(entity);
    states[entity].queued = true;
  }
  auto wake = [&](Instance& instance) {
    for (std::int32_t waiter : instance.waiters) {
      if (!states[waiter].queued) {
        states[waiter].queued = true;
        queue.push_back(waiter);
      }
    }
    instance.waiters.clear();
  };
  auto instance_for = [&](auto& open, const auto& key, int expected) -> std::int32_t {
    auto [position, inserted] = open.emplace(key, static_cast<std::int32_t>(instances.size()));
    if (inserted) {
      instances.emplace_back();
      instances.back().expected = expected;
    }
    return position->second;
  };

  while (!queue.empty()) {
    const std::int32_t entity = queue.front();
    queue.pop_front();
    EntityState& state = states[entity];
    state.queued = false;
    const EngineEntity& spec = entities[entity];
    const auto& program = graph_.programs[spec.program];
    const auto& streams = *streams_[spec.program];
    const ProgramPower& power = powers_[spec.program];
    EntityResult& out = result.entities[entity];
    bool progress = true;
    while (progress) {
      progress = false;
      for (int stream = 0; stream < graph::kNumStreams; ++stream) {
        const auto& stream_ops = streams.ops[stream];
        while (state.cursor[stream] < static_cast<std::int32_t>(stream_ops.size())) {
          const std::int32_t op_index = stream_ops[state.cursor[stream]];
          const graph::Op& op = program.ops[op_index];
          double finish = kNotDone;
          double begin = 0;
          if (state.pending[stream] >= 0) {
            Instance& instance = instances[state.pending[stream]];
            if (op.kind == graph::OpKind::kRecv) {
              if (instance.completion_s == kNotDone) break;
              const double ready = state.pending_ready_s[stream];
              begin = std::max(ready, instance.last_arrival_s);
              finish = begin + instance.cost_s;
            } else {
              if (instance.completion_s == kNotDone) break;
              finish = instance.completion_s;
              begin = finish - instance.cost_s;
            }
            state.pending[stream] = -1;
          } else {
            double ready = state.stream_free_s[stream];
            // A context-parallel ring exchange is one batched isend/irecv over a full-duplex link: its
            // receive starts with its send, not after it (pipeline batches keep the serialized model).
            if (op.group == graph::GroupKind::kCp && is_comm(op.kind) && op.p2p_batch >= 0 &&
                state.cursor[stream] > 0) {
              const std::int32_t previous = stream_ops[state.cursor[stream] - 1];
              const graph::Op& before = program.ops[previous];
              if (before.p2p_batch == op.p2p_batch && before.group == graph::GroupKind::kCp)
                ready = state.comm_begin_s[previous];
            }
            std::int32_t binding = -1;
            bool blocked = false;
            for (std::int32_t dep : program.deps_of(op_index)) {
              const double dep_finish = state.finish_s[dep];
              if (dep_finish == kNotDone) {
                blocked = true;
                break;
              }
              if (dep_finish > ready) {
                ready = dep_finish;
                binding = dep;
              }
            }
            if (blocked) break;
            if (!is_comm(op.kind)) {
              const double duration =
                  power.cost(op_index).duration_s(spec.compute_stretch, spec.memory_stretch);
              begin = ready;
              finish = ready + duration;
              out.compute_busy_s += duration;
              if (begin > state.compute_free_s + kWaitGapS) {
                if (out.compute_busy_s == duration) out.starts_waiting = true;
                out.wait_gaps += 1;
                out.wait_gap_s += begin - state.compute_free_s;
              }
              state.compute_free_s = std::max(state.compute_free_s, finish);
              if (binding >= 0 && stream == static_cast<int>(graph::Stream::kCompute)) {
                const graph::Op& binding_op = program.ops[binding];
                if (is_comm(binding_op.kind)) {
                  // Exposed: the part of the idle gap covered by the back-to-back transfers that ended with
                  // the binding op (waiting for slower members or for the peer's compute is not), each piece
                  // counted for the class of the transfer that ran then (a DP reduce-scatter chain that ends
                  // in a small embedding all-reduce is DP time, not embedding time).
                  const double idle_from =
                      std::max(state.stream_free_s[stream], state.chain_start_s[binding]);
                  for (std::int32_t link = binding; link >= 0 && ready > idle_from;
                       link = state.chain_previous[link]) {
                    const double from = std::max(state.comm_begin_s[link], idle_from);
                    const double to = std::min(state.finish_s[link], ready);
                    if (to > from) out.exposed_comm_s[comm_class(program.ops[link])] += to - from;
                    if (state.comm_begin_s[link] <= idle_from) break;
                  }
                }
              }
            } else {
              const double cost = (*state.comm_cost)[op_index];
              const int klass = comm_class(op);
              out.comm_busy_s += cost;
              out.comm_transfer_s[klass] += cost;
              if (op.kind == graph::OpKind::kCollective) {
                const int kind = static_cast<int>(op.group);
                const std::int64_t sequence = state.collective_count[kind]++;
                if (state.sync_size[kind] <= 1) {
                  begin = ready;
                  finish = ready + cost;
                } else {
                  const std::int32_t id =
                      instance_for(open_instances, collective_key(state.sync_set[kind], kind, sequence),
                                   state.sync_size[kind]);
                  Instance& instance = instances[id];
                  instance.arrived += 1;
                  instance.last_arrival_s = std::max(instance.last_arrival_s, ready);
                  instance.cost_s = std::max(instance.cost_s, cost);
                  if (instance.arrived == instance.expected) {
                    instance.completion_s = instance.last_arrival_s + instance.cost_s;
                    open_instances.erase(collective_key(state.sync_set[kind], kind, sequence));
                    wake(instance);
                    finish = instance.completion_s;
                    begin = finish - instance.cost_s;
                  } else {
                    instance.waiters.push_back(entity);
                    state.pending[stream] = id;
                    state.pending_ready_s[stream] = ready;
                    break;
                  }
                }
              } else {
                // Messages are eager: the sender finishes after its transfer; the receiver waits for the
                // send.
                const int peer_rank = graph_.peer_rank(spec.representative, op);
                const std::int32_t peer = entity_of_rank[peer_rank];
                if (op.kind == graph::OpKind::kSend) {
                  const MessageKey key{entity, peer, op.tag};
                  Instance& instance = instances[instance_for(open_messages, key, 1)];
                  instance.last_arrival_s = ready;
                  instance.cost_s = cost;
                  instance.completion_s = ready + cost;
                  wake(instance);
                  begin = ready;
                  finish = ready + cost;
                } else {
                  const MessageKey key{peer, entity, op.tag};
                  const std::int32_t id = instance_for(open_messages, key, 1);
                  Instance& instance = instances[id];
                  if (instance.completion_s == kNotDone) {
                    instance.waiters.push_back(entity);
                    state.pending[stream] = id;
                    state.pending_ready_s[stream] = ready;
                    break;
                  }
                  begin = std::max(ready, instance.last_arrival_s);
                  finish = begin + instance.cost_s;
                  open_messages.erase(key);
                }
              }
            }
          }
          state.finish_s[op_index] = finish;
          if (record_timeline) state.begin_s[op_index] = begin;
          if (is_comm(op.kind)) {
            // A transfer that starts when the previous one on its stream ended continues that run.
            const std::int32_t cursor = state.cursor[stream];
            const bool continues = cursor > 0 && begin <= state.stream_free_s[stream] + 1e-12 &&
                                   is_comm(program.ops[stream_ops[cursor - 1]].kind);
            state.chain_start_s[op_index] = continues ? state.chain_start_s[stream_ops[cursor - 1]] : begin;
            state.chain_previous[op_index] = continues ? stream_ops[cursor - 1] : -1;
            state.comm_begin_s[op_index] = begin;
          }
          state.stream_free_s[stream] = finish;
          state.cursor[stream] += 1;
          state.done_ops += 1;
          out.end_s = std::max(out.end_s, finish);
          progress = true;
        }
      }
    }
  }

  for (int entity = 0; entity < entity_count; ++entity) {
    const EntityState& state = states[entity];
    const auto& program = graph_.programs[entities[entity].program];
    if (state.done_ops != program.ops.size()) {
      for (int stream = 0; stream < graph::kNumStreams; ++stream) {
        const auto& stream_ops = streams_[entities[entity].program]->ops[stream];
        if (state.cursor[stream] < static_cast<std::int32_t>(stream_ops.size())) {
          const auto& op = program.ops[stream_ops[state.cursor[stream]]];
          throw RuntimeFailure(fmt::format(
              "simulation deadlocked: rank {} (stage {}) waits forever on op {} '{}' of stream {}; the "
              "graph's "
              "collectives or send/recv pairs do not match (run the graph checkers: calo graph --check)",
              entities[entity].representative, program.stage, stream_ops[state.cursor[stream]],
              graph::describe(op), graph::to_string(graph::Stream(stream))));
        }
      }
    }
    result.op_events += state.done_ops;
    result.iteration_s = std::max(result.iteration_s, result.entities[entity].end_s);
    result.entities[entity].last_compute_end_s = state.compute_free_s;
    if (record_timeline) {
      auto& timeline = result.entities[entity].timeline;
      timeline.reserve(program.ops.size());
      for (std::size_t op_index = 0; op_index < program.ops.size(); ++op_index) {
        timeline.push_back(
            {static_cast<std::int32_t>(op_index), state.begin_s[op_index], state.finish_s[op_index]});
      }
    }
  }
  return result;
}

}  // namespace calo::sim
