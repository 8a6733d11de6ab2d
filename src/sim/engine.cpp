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

/// Begin and end of an op being started (begin is only read for transfers and timelines).
struct OpTimes {
  double begin_s = 0;
  double finish_s = kNotDone;
};

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
    if (graph::is_point_to_point(op.kind) && !peer_of.contains(peer_key(op))) {
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
    } else if (graph::is_point_to_point(op.kind)) {
      (*costs)[index] = p2p_time_s(cluster_, op.bytes, representative, peer_of[peer_key(op)]);
    }
  }
  return *comm_cost_cache_.emplace(key, std::move(costs)).first->second;
}

/// One call of Engine::run: the entities' states, the open collective and message instances, and the queue
/// of entities that may advance. Every step is defined in the class so the hot loop inlines into run().
class Engine::Iteration {
 public:
  Iteration(Engine& engine, const std::vector<EngineEntity>& entities,
            const std::vector<std::int32_t>& entity_of_rank, bool record_timeline)
      : engine_(engine),
        graph_(engine.graph_),
        streams_(engine.streams_),
        powers_(engine.powers_),
        entities_(entities),
        entity_of_rank_(entity_of_rank),
        record_timeline_(record_timeline),
        entity_count_(static_cast<int>(entities.size())),
        states_(entity_count_) {}

  /// Sets up the entities, advances them until none can, checks that every op ran and gathers the result.
  EngineResult run() {
    set_up_entities();
    result_.entities.resize(entity_count_);
    queue_all_entities();
    while (!queue_.empty()) {
      const std::int32_t entity = queue_.front();
      queue_.pop_front();
      advance(entity);
    }
    for (int entity = 0; entity < entity_count_; ++entity) {
      throw_if_deadlocked(entity);
      gather_entity(entity);
    }
    return std::move(result_);
  }

 private:
  /// What advancing one entity reads and writes.
  struct EntityView {
    std::int32_t entity;                ///< its index
    EntityState& state;                 ///< its mutable state
    const EngineEntity& spec;           ///< its program, representative and stretches
    const graph::RankProgram& program;  ///< its ops
    const ProgramStreams& streams;      ///< its ops per stream
    const ProgramPower& power;          ///< its compute costs
    EntityResult& out;                  ///< its result
  };

  /// Sizes each entity's per-op arrays, points it at its communication costs and sets up its sync sets.
  void set_up_entities() {
    std::map<std::vector<std::int32_t>, std::int32_t> sync_set_ids;
    std::vector<std::int32_t> members;
    for (int entity = 0; entity < entity_count_; ++entity) {
      const EngineEntity& spec = entities_[entity];
      EntityState& state = states_[entity];
      const auto& program = graph_.programs[spec.program];
      state.finish_s.assign(program.ops.size(), kNotDone);
      state.chain_start_s.assign(program.ops.size(), 0.0);
      state.comm_begin_s.assign(program.ops.size(), 0.0);
      state.chain_previous.assign(program.ops.size(), -1);
      if (record_timeline_) state.begin_s.assign(program.ops.size(), 0.0);
      state.comm_cost = &engine_.comm_costs(spec.program, spec.representative);
      set_up_sync_sets(spec, state, sync_set_ids, members);
    }
  }

  /// Sync sets: for each group kind, the id (in `sync_set_ids`) and size of the set of entities covering the
  /// representative's group. `members` is scratch space.
  void set_up_sync_sets(const EngineEntity& spec, EntityState& state,
                        std::map<std::vector<std::int32_t>, std::int32_t>& sync_set_ids,
                        std::vector<std::int32_t>& members) {
    for (int kind = 0; kind < graph::kNumGroupKinds; ++kind) {
      const int group_id = graph_.group_id(spec.representative, graph::GroupKind(kind));
      if (group_id < 0) continue;
      members.clear();
      for (std::int32_t rank : graph_.groups[group_id].ranks) members.push_back(entity_of_rank_[rank]);
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      state.sync_size[kind] = static_cast<std::int32_t>(members.size());
      auto [position, inserted] =
          sync_set_ids.emplace(members, static_cast<std::int32_t>(sync_set_ids.size()));
      state.sync_set[kind] = position->second;
    }
  }

  /// Queues every entity, in index order.
  void queue_all_entities() {
    for (int entity = 0; entity < entity_count_; ++entity) {
      queue_.push_back(entity);
      states_[entity].queued = true;
    }
  }

  /// Queues the entities blocked on `instance` (those not queued already) and forgets them.
  void wake(Instance& instance) {
    for (std::int32_t waiter : instance.waiters) {
      if (!states_[waiter].queued) {
        states_[waiter].queued = true;
        queue_.push_back(waiter);
      }
    }
    instance.waiters.clear();
  }

  /// Index of the open instance under `key` in `open`, created with `expected` arrivals if there is none.
  template <typename OpenInstances, typename Key>
  std::int32_t instance_for(OpenInstances& open, const Key& key, int expected) {
    auto [position, inserted] = open.emplace(key, static_cast<std::int32_t>(instances_.size()));
    if (inserted) {
      instances_.emplace_back();
      instances_.back().expected = expected;
    }
    return position->second;
  }

  /// Runs the ops of `entity` stream by stream, as far as each can go, until no stream moves.
  void advance(std::int32_t entity) {
    EntityState& state = states_[entity];
    state.queued = false;
    const EngineEntity& spec = entities_[entity];
    const EntityView view{entity,
                          state,
                          spec,
                          graph_.programs[spec.program],
                          *streams_[spec.program],
                          powers_[spec.program],
                          result_.entities[entity]};
    bool progress = true;
    while (progress) {
      progress = false;
      for (int stream = 0; stream < graph::kNumStreams; ++stream) {
        const auto& stream_ops = view.streams.ops[stream];
        while (state.cursor[stream] < static_cast<std::int32_t>(stream_ops.size())) {
          const std::int32_t op_index = stream_ops[state.cursor[stream]];
          OpTimes times;
          if (!start_op(view, stream, op_index, times)) break;
          end_op(view, stream, op_index, times);
          progress = true;
        }
      }
    }
  }

  /// Starts op `op_index`, the next of `stream`: sets `times` and returns true, or returns false while it
  /// waits (on a dependency, a collective's other members or a message's send).
  bool start_op(const EntityView& view, int stream, std::int32_t op_index, OpTimes& times) {
    const graph::Op& op = view.program.ops[op_index];
    if (view.state.pending[stream] >= 0) return resume_pending(view, stream, op, times);
    double ready_s = 0;
    std::int32_t binding = -1;
    if (!ready_time(view, stream, op_index, ready_s, binding)) return false;
    if (!graph::is_communication(op.kind)) {
      run_compute(view, stream, op_index, ready_s, binding, times);
      return true;
    }
    return start_comm(view, stream, op_index, ready_s, times);
  }

  /// Finishes the op `stream` left pending on an instance, once the instance is complete (else false): a
  /// receive transfers after both sides arrived, a collective member ends with the collective.
  bool resume_pending(const EntityView& view, int stream, const graph::Op& op, OpTimes& times) {
    EntityState& state = view.state;
    const Instance& instance = instances_[state.pending[stream]];
    if (instance.completion_s == kNotDone) return false;
    if (op.kind == graph::OpKind::kRecv) {
      times.begin_s = std::max(state.pending_ready_s[stream], instance.last_arrival_s);
      times.finish_s = times.begin_s + instance.cost_s;
    } else {
      times.finish_s = instance.completion_s;
      times.begin_s = times.finish_s - instance.cost_s;
    }
    state.pending[stream] = -1;
    return true;
  }

  /// Earliest start of op `op_index` of `stream` (`ready_s`) and the dependency that set it (`binding`, -1 if
  /// none); false while a dependency is not done.
  bool ready_time(const EntityView& view, int stream, std::int32_t op_index, double& ready_s,
                  std::int32_t& binding) const {
    const EntityState& state = view.state;
    const graph::Op& op = view.program.ops[op_index];
    ready_s = state.stream_free_s[stream];
    // A context-parallel ring exchange is one batched isend/irecv over a full-duplex link: its receive
    // starts with its send, not after it (pipeline batches keep the serialized model).
    if (op.group == graph::GroupKind::kCp && graph::is_communication(op.kind) && op.p2p_batch >= 0 &&
        state.cursor[stream] > 0) {
      const std::int32_t previous = view.streams.ops[stream][state.cursor[stream] - 1];
      const graph::Op& before = view.program.ops[previous];
      if (before.p2p_batch == op.p2p_batch && before.group == graph::GroupKind::kCp)
        ready_s = state.comm_begin_s[previous];
    }
    binding = -1;
    for (std::int32_t dep : view.program.deps_of(op_index)) {
      const double dep_finish = state.finish_s[dep];
      if (dep_finish == kNotDone) return false;
      if (dep_finish > ready_s) {
        ready_s = dep_finish;
        binding = dep;
      }
    }
    return true;
  }

  /// Runs compute op `op_index` from `ready_s`: its busy time, the wait gap before it and, when a transfer
  /// held it back (`binding`), the exposed communication.
  void run_compute(const EntityView& view, int stream, std::int32_t op_index, double ready_s,
                   std::int32_t binding, OpTimes& times) {
    EntityState& state = view.state;
    EntityResult& out = view.out;
    const double duration_s =
        view.power.cost(op_index).duration_s(view.spec.compute_stretch, view.spec.memory_stretch);
    times.begin_s = ready_s;
    times.finish_s = ready_s + duration_s;
    out.compute_busy_s += duration_s;
    if (times.begin_s > state.compute_free_s + kWaitGapS) {
      if (out.compute_busy_s == duration_s) out.starts_waiting = true;
      out.wait_gaps += 1;
      out.wait_gap_s += times.begin_s - state.compute_free_s;
      out.waits.push_back({op_index, times.begin_s - state.compute_free_s});
    }
    state.compute_free_s = std::max(state.compute_free_s, times.finish_s);
    if (binding >= 0 && stream == static_cast<int>(graph::Stream::kCompute) &&
        graph::is_communication(view.program.ops[binding].kind)) {
      count_exposed_comm(view, stream, binding, ready_s);
    }
  }

  /// Exposed: the part of the idle gap before `ready_s` covered by the back-to-back transfers that ended with
  /// the binding op (waiting for slower members or for the peer's compute is not), each piece counted for the
  /// class of the transfer that ran then (a DP reduce-scatter chain that ends in a small embedding all-reduce
  /// is DP time, not embedding time).
  void count_exposed_comm(const EntityView& view, int stream, std::int32_t binding, double ready_s) {
    const EntityState& state = view.state;
    const double idle_from = std::max(state.stream_free_s[stream], state.chain_start_s[binding]);
    for (std::int32_t link = binding; link >= 0 && ready_s > idle_from; link = state.chain_previous[link]) {
      const double from = std::max(state.comm_begin_s[link], idle_from);
      const double to = std::min(state.finish_s[link], ready_s);
      if (to > from) view.out.exposed_comm_s[comm_class(view.program.ops[link])] += to - from;
      if (state.comm_begin_s[link] <= idle_from) break;
    }
  }

  /// Starts transfer op `op_index` from `ready_s`: counts its cost, then joins its collective or passes its
  /// message; false while it waits.
  bool start_comm(const EntityView& view, int stream, std::int32_t op_index, double ready_s, OpTimes& times) {
    const graph::Op& op = view.program.ops[op_index];
    const double cost_s = (*view.state.comm_cost)[op_index];
    const int klass = comm_class(op);
    view.out.comm_busy_s += cost_s;
    view.out.comm_transfer_s[klass] += cost_s;
    if (op.kind == graph::OpKind::kCollective)
      return join_collective(view, stream, op, ready_s, cost_s, times);
    // Messages are eager: the sender finishes after its transfer; the receiver waits for the send.
    const int peer_rank = graph_.peer_rank(view.spec.representative, op);
    const std::int32_t peer = entity_of_rank_[peer_rank];
    if (op.kind == graph::OpKind::kSend) {
      send_message(view.entity, peer, op, ready_s, cost_s, times);
      return true;
    }
    return receive_message(view, stream, peer, op, ready_s, times);
  }

  /// Arrives at collective `op`: it runs alone when its sync set is just this entity, completes when this is
  /// the last member to arrive, and otherwise waits (false).
  bool join_collective(const EntityView& view, int stream, const graph::Op& op, double ready_s, double cost_s,
                       OpTimes& times) {
    EntityState& state = view.state;
    const int kind = static_cast<int>(op.group);
    const std::int64_t sequence = state.collective_count[kind]++;
    if (state.sync_size[kind] <= 1) {
      times.begin_s = ready_s;
      times.finish_s = ready_s + cost_s;
      return true;
    }
    const std::uint64_t key = collective_key(state.sync_set[kind], kind, sequence);
    const std::int32_t id = instance_for(open_instances_, key, state.sync_size[kind]);
    Instance& instance = instances_[id];
    instance.arrived += 1;
    instance.last_arrival_s = std::max(instance.last_arrival_s, ready_s);
    instance.cost_s = std::max(instance.cost_s, cost_s);
    if (instance.arrived != instance.expected) {
      wait_on(view, stream, id, ready_s);
      return false;
    }
    complete_instance(instance, key);
    times.finish_s = instance.completion_s;
    times.begin_s = times.finish_s - instance.cost_s;
    return true;
  }

  /// Completes a collective whose members all arrived (one transfer after the last arrival), closes it under
  /// `key` and wakes the members waiting on it.
  void complete_instance(Instance& instance, std::uint64_t key) {
    instance.completion_s = instance.last_arrival_s + instance.cost_s;
    open_instances_.erase(key);
    wake(instance);
  }

  /// Blocks `stream` of the entity on instance `id`, having arrived at `ready_s`.
  void wait_on(const EntityView& view, int stream, std::int32_t id, double ready_s) {
    instances_[id].waiters.push_back(view.entity);
    view.state.pending[stream] = id;
    view.state.pending_ready_s[stream] = ready_s;
  }

  /// Sends message `op` from `entity` to `peer` at `ready_s`: it is complete after its transfer, which wakes
  /// a receiver already waiting.
  void send_message(std::int32_t entity, std::int32_t peer, const graph::Op& op, double ready_s,
                    double cost_s, OpTimes& times) {
    const MessageKey key{entity, peer, op.tag};
    Instance& instance = instances_[instance_for(open_messages_, key, 1)];
    instance.last_arrival_s = ready_s;
    instance.cost_s = cost_s;
    instance.completion_s = ready_s + cost_s;
    wake(instance);
    times.begin_s = ready_s;
    times.finish_s = ready_s + cost_s;
  }

  /// Receives message `op` from `peer`: its transfer starts once both sides arrived; false (waiting) until
  /// the send was issued.
  bool receive_message(const EntityView& view, int stream, std::int32_t peer, const graph::Op& op,
                       double ready_s, OpTimes& times) {
    const MessageKey key{peer, view.entity, op.tag};
    const std::int32_t id = instance_for(open_messages_, key, 1);
    const Instance& instance = instances_[id];
    if (instance.completion_s == kNotDone) {
      wait_on(view, stream, id, ready_s);
      return false;
    }
    times.begin_s = std::max(ready_s, instance.last_arrival_s);
    times.finish_s = times.begin_s + instance.cost_s;
    open_messages_.erase(key);
    return true;
  }

  /// Records op `op_index` as done at `times` and moves `stream` past it.
  void end_op(const EntityView& view, int stream, std::int32_t op_index, const OpTimes& times) {
    EntityState& state = view.state;
    state.finish_s[op_index] = times.finish_s;
    if (record_timeline_) state.begin_s[op_index] = times.begin_s;
    if (graph::is_communication(view.program.ops[op_index].kind))
      chain_transfer(view, stream, op_index, times.begin_s);
    state.stream_free_s[stream] = times.finish_s;
    state.cursor[stream] += 1;
    state.done_ops += 1;
    view.out.end_s = std::max(view.out.end_s, times.finish_s);
  }

  /// Links transfer `op_index`, begun at `begin_s`, into its stream's back-to-back run: a transfer that
  /// starts when the previous one on its stream ended continues that run.
  void chain_transfer(const EntityView& view, int stream, std::int32_t op_index, double begin_s) {
    EntityState& state = view.state;
    const auto& stream_ops = view.streams.ops[stream];
    const std::int32_t cursor = state.cursor[stream];
    const bool continues = cursor > 0 && begin_s <= state.stream_free_s[stream] + 1e-12 &&
                           graph::is_communication(view.program.ops[stream_ops[cursor - 1]].kind);
    state.chain_start_s[op_index] = continues ? state.chain_start_s[stream_ops[cursor - 1]] : begin_s;
    state.chain_previous[op_index] = continues ? stream_ops[cursor - 1] : -1;
    state.comm_begin_s[op_index] = begin_s;
  }

  /// Throws RuntimeFailure naming the first stream of `entity` stuck before its end, if any op did not run.
  void throw_if_deadlocked(int entity) const {
    const EntityState& state = states_[entity];
    const auto& program = graph_.programs[entities_[entity].program];
    if (state.done_ops == program.ops.size()) return;
    for (int stream = 0; stream < graph::kNumStreams; ++stream) {
      const auto& stream_ops = streams_[entities_[entity].program]->ops[stream];
      if (state.cursor[stream] < static_cast<std::int32_t>(stream_ops.size())) {
        const auto& op = program.ops[stream_ops[state.cursor[stream]]];
        throw RuntimeFailure(fmt::format(
            "simulation deadlocked: rank {} (stage {}) waits forever on op {} '{}' of stream {}; the "
            "graph's "
            "collectives or send/recv pairs do not match (run the graph checkers: calo graph --check)",
            entities_[entity].representative, program.stage, stream_ops[state.cursor[stream]],
            graph::describe(op), graph::to_string(graph::Stream(stream))));
      }
    }
  }

  /// Adds `entity` to the totals and fills its last compute end and, when requested, its timeline.
  void gather_entity(int entity) {
    const EntityState& state = states_[entity];
    const auto& program = graph_.programs[entities_[entity].program];
    EntityResult& out = result_.entities[entity];
    result_.op_events += state.done_ops;
    result_.iteration_s = std::max(result_.iteration_s, out.end_s);
    out.last_compute_end_s = state.compute_free_s;
    if (!record_timeline_) return;
    out.timeline.reserve(program.ops.size());
    for (std::size_t op_index = 0; op_index < program.ops.size(); ++op_index) {
      out.timeline.push_back(
          {static_cast<std::int32_t>(op_index), state.begin_s[op_index], state.finish_s[op_index]});
    }
  }

  Engine& engine_;                                                  ///< for its communication-cost cache
  const graph::Graph& graph_;                                       ///< the engine's graph
  const std::vector<std::shared_ptr<ProgramStreams>>& streams_;     ///< the engine's ops per stream
  const std::vector<ProgramPower>& powers_;                         ///< the engine's compute costs
  const std::vector<EngineEntity>& entities_;                       ///< run()'s entities
  const std::vector<std::int32_t>& entity_of_rank_;                 ///< run()'s rank -> entity
  const bool record_timeline_;                                      ///< whether op spans are kept
  const int entity_count_;                                          ///< entities_.size()
  std::vector<EntityState> states_;                                 ///< per entity
  EngineResult result_;                                             ///< what run() returns
  std::vector<Instance> instances_;                                 ///< every collective instance and message
  std::unordered_map<std::uint64_t, std::int32_t> open_instances_;  ///< collective_key -> incomplete instance
  std::map<MessageKey, std::int32_t> open_messages_;                ///< message -> instance not yet received
  std::deque<std::int32_t> queue_;                                  ///< entities that may advance
};

EngineResult Engine::run(const std::vector<EngineEntity>& entities,
                         const std::vector<std::int32_t>& entity_of_rank, bool record_timeline) {
  return Iteration(*this, entities, entity_of_rank, record_timeline).run();
}

}  // namespace calo::sim
