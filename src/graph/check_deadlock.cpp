// The graph checkers' deadlock simulation (check.h's check_deadlock), part of the oracle check.cpp's top
// describes: it executes the built ops with blocking (rendezvous) sends, receives and collectives of its own,
// separate from sim::Engine.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "graph/check_internal.h"

namespace calo::graph {

using detail::add_problem;

namespace {

struct SimRank {
  int rank = 0;
  const RankProgram* program = nullptr;
  std::vector<std::uint8_t> done;
  std::array<std::vector<std::int32_t>, kNumStreams> queue;
  std::array<std::size_t, kNumStreams> head{};
  std::array<bool, kNumStreams> arrived{};               // head collective counted in its group
  std::array<std::int64_t, kNumGroupKinds> completed{};  // collectives completed per group kind
  std::size_t remaining = 0;
};

struct SimGroup {
  int needed = 0;              // simulated members
  int arrived = 0;             // members waiting at the current collective
  std::int64_t completed = 0;  // collectives completed
};

/// Ranks the deadlock check executes: all of them, or one per distinct program role of every stage.
std::vector<int> simulated_ranks(const Graph& graph, DeadlockScope scope) {
  const parallel::Layout& layout = graph.layout;
  const int world = graph.world_size();
  if (scope == DeadlockScope::kAuto)
    scope = world <= 512 ? DeadlockScope::kAllRanks : DeadlockScope::kRepresentative;
  std::vector<int> ranks;
  if (scope == DeadlockScope::kAllRanks) {
    for (int rank = 0; rank < world; ++rank) ranks.push_back(rank);
    return ranks;
  }
  // One rank per distinct program role of every stage: tp index 0, dp indices covering every role.
  bool by_ep = false;
  for (const auto& program : graph.programs) by_ep = by_ep || program.ep_index >= 0;
  // Every cp index of the representative replica: the ring needs all its members.
  const int dp_indices = by_ep ? layout.ep : 1;
  for (int stage = 0; stage < layout.pp; ++stage)
    for (int dp_index = 0; dp_index < dp_indices; ++dp_index)
      for (int cp_index = 0; cp_index < layout.cp; ++cp_index)
        ranks.push_back(layout.tp * (cp_index + layout.cp * (dp_index + layout.dp * stage)));
  return ranks;
}

/// Whether every dependency of op `index` has finished.
bool deps_done(const SimRank& sim, std::size_t index) {
  for (std::int32_t dep : sim.program->deps_of(index))
    if (!sim.done[dep]) return false;
  return true;
}

/// Marks op `index` finished.
void mark(SimRank& sim, std::size_t index) {
  sim.done[index] = 1;
  --sim.remaining;
}

/// Finishes the op at the stream's head and moves the head past it.
void finish(SimRank& sim, int stream) {
  mark(sim, sim.queue[stream][sim.head[stream]]);
  ++sim.head[stream];
}

/// Moves a stream's head past finished ops (batched point-to-point ops finish out of order).
void advance(SimRank& sim, int stream) {
  while (sim.head[stream] < sim.queue[stream].size() && sim.done[sim.queue[stream][sim.head[stream]]])
    ++sim.head[stream];
}

/// A batch is launched once every op in it has its dependencies.
bool batch_ready(const SimRank& sim, int stream, std::size_t end) {
  for (std::size_t position = sim.head[stream]; position < end; ++position)
    if (!deps_done(sim, sim.queue[stream][position])) return false;
  return true;
}

/// End of the batch that starts at the stream's head: one op, or the run of ops sharing its p2p_batch.
std::size_t head_batch_end(const SimRank& sim, int stream) {
  const auto& queue = sim.queue[stream];
  std::size_t end = sim.head[stream];
  if (end >= queue.size()) return end;
  const Op& first = sim.program->ops[queue[end]];
  ++end;
  if (!is_point_to_point(first.kind) || first.p2p_batch < 0) return end;
  while (end < queue.size()) {
    const Op& op = sim.program->ops[queue[end]];
    if (!is_point_to_point(op.kind) || op.p2p_batch != first.p2p_batch) break;
    ++end;
  }
  return end;
}

/// Blocking execution of the simulated ranks' programs until no stream can move.
class DeadlockSimulation {
 public:
  /// Sets up every simulated rank's stream queues and each group's simulated member count.
  DeadlockSimulation(const Graph& graph, const std::vector<int>& ranks)
      : graph_(graph),
        slot_of_rank_(graph.world_size(), -1),
        sims_(ranks.size()),
        groups_(graph.groups.size()) {
    for (std::size_t slot = 0; slot < ranks.size(); ++slot) {
      SimRank& sim = sims_[slot];
      sim.rank = ranks[slot];
      slot_of_rank_[sim.rank] = static_cast<int>(slot);
      sim.program = &graph.program(sim.rank);
      sim.done.assign(sim.program->ops.size(), 0);
      sim.remaining = sim.program->ops.size();
      for (std::size_t index = 0; index < sim.program->ops.size(); ++index)
        sim.queue[static_cast<int>(sim.program->ops[index].stream)].push_back(
            static_cast<std::int32_t>(index));
    }
    for (std::size_t group_id = 0; group_id < graph.groups.size(); ++group_id)
      for (int member : graph.groups[group_id].ranks)
        if (slot_of_rank_[member] >= 0) ++groups_[group_id].needed;
  }

  /// Sweeps all ranks and streams until a full sweep finishes nothing.
  void run() {
    progress_ = true;
    while (progress_) {
      progress_ = false;
      for (SimRank& sim : sims_)
        for (int stream = 0; stream < kNumStreams; ++stream) run_stream(sim, stream);
    }
  }

  /// Adds one "deadlock" problem per stream of a rank that did not finish.
  void report_stuck(std::vector<Problem>& problems) const {
    for (const SimRank& sim : sims_) {
      if (sim.remaining == 0) continue;
      for (int stream = 0; stream < kNumStreams; ++stream) {
        if (sim.head[stream] >= sim.queue[stream].size()) continue;
        const std::size_t index = sim.queue[stream][sim.head[stream]];
        const Op& op = sim.program->ops[index];
        add_problem(problems, "deadlock",
                    fmt::format("rank {} {} stream stuck at op {} ({}; microbatch {}, layer {}), {} ops left",
                                sim.rank, to_string(op.stream), index, describe(op), op.microbatch, op.layer,
                                sim.remaining));
      }
    }
  }

 private:
  /// Executes a stream's ops from its head until one blocks.
  void run_stream(SimRank& sim, int stream) {
    while (sim.head[stream] < sim.queue[stream].size()) {
      const std::size_t index = sim.queue[stream][sim.head[stream]];
      const Op& op = sim.program->ops[index];
      if (!deps_done(sim, index)) break;
      if (op.kind == OpKind::kCollective) {
        if (!try_collective(sim, stream, op)) break;
      } else if (is_point_to_point(op.kind)) {
        if (!try_p2p_batch(sim, stream)) break;
      } else {
        finish(sim, stream);
        progress_ = true;
      }
    }
  }

  /// Arrives at the head collective and finishes it once the whole group has; false while it waits.
  bool try_collective(SimRank& sim, int stream, const Op& op) {
    const int group_id = graph_.group_id(sim.rank, op.group);
    if (group_id < 0) return false;  // reported by check_collectives
    SimGroup& group = groups_[group_id];
    const int kind = static_cast<int>(op.group);
    if (!sim.arrived[stream]) {
      sim.arrived[stream] = true;
      if (++group.arrived == group.needed) {
        group.arrived = 0;
        ++group.completed;
      }
    }
    if (group.completed <= sim.completed[kind]) return false;
    ++sim.completed[kind];
    sim.arrived[stream] = false;
    finish(sim, stream);
    progress_ = true;
    return true;
  }

  /// Matches the head batch's ops against their peers' head batches; false while part of it is left.
  bool try_p2p_batch(SimRank& sim, int stream) {
    // The head batch: consecutive ops of one batched isend/irecv; each matches its peer's op in the peer's
    // head batch, in any order.
    const std::size_t batch_end = head_batch_end(sim, stream);
    if (!batch_ready(sim, stream, batch_end)) return false;
    for (std::size_t position = sim.head[stream]; position < batch_end; ++position) {
      const std::size_t mine = sim.queue[stream][position];
      if (!sim.done[mine]) match_with_peer(sim, mine);
    }
    advance(sim, stream);
    return sim.head[stream] >= batch_end;
  }

  /// Finishes op `mine` together with the complementary op in its peer's launched head batch, if any.
  void match_with_peer(SimRank& sim, std::size_t mine) {
    const Op& this_op = sim.program->ops[mine];
    const int peer = graph_.peer_rank(sim.rank, this_op);
    const int peer_slot = peer >= 0 && peer < graph_.world_size() ? slot_of_rank_[peer] : -1;
    if (peer_slot < 0) return;
    SimRank& other = sims_[peer_slot];
    const int other_stream = static_cast<int>(this_op.stream);
    const std::size_t other_end = head_batch_end(other, other_stream);
    if (!batch_ready(other, other_stream, other_end)) return;
    for (std::size_t other_position = other.head[other_stream]; other_position < other_end;
         ++other_position) {
      const std::size_t theirs = other.queue[other_stream][other_position];
      const Op& match = other.program->ops[theirs];
      const bool complementary = (this_op.kind == OpKind::kSend && match.kind == OpKind::kRecv) ||
                                 (this_op.kind == OpKind::kRecv && match.kind == OpKind::kSend);
      if (other.done[theirs] || !complementary || match.tag != this_op.tag ||
          graph_.peer_rank(peer, match) != sim.rank)
        continue;
      mark(other, theirs);
      mark(sim, mine);
      progress_ = true;
      advance(other, other_stream);
      return;
    }
  }

  const Graph& graph_;
  std::vector<int> slot_of_rank_;
  std::vector<SimRank> sims_;
  std::vector<SimGroup> groups_;
  bool progress_ = false;  // some op finished in the current sweep
};

}  // namespace

std::vector<Problem> check_deadlock(const Graph& graph, DeadlockScope scope) {
  std::vector<Problem> problems;
  DeadlockSimulation simulation(graph, simulated_ranks(graph, scope));
  simulation.run();
  simulation.report_stuck(problems);
  return problems;
}

}  // namespace calo::graph
