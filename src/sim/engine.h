// Event engine: runs the execution graph's per-rank programs on a modeled cluster for one iteration.
//
// Ranks are folded into "entities": one entity stands for a tensor-parallel group (its members run one
// program in lock step, so the group advances at its slowest member: compute stretch = max over members of
// f_max / (f * speed), memory stretch = max of 1 / speed) of one replica class (replica groups with identical
// stretches over all their stages). Collectives complete when every member entity has arrived; send/recv
// rendezvous. Times are max-plus propagated over dependencies, so no global event queue is needed.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "sim/cluster.h"
#include "sim/power_thermal.h"

namespace calo::sim {

/// Exposed-communication classes: graph::GroupKind of a collective; send/recv count as kPp.
inline constexpr int kNumCommClasses = graph::kNumGroupKinds;

/// One simulated entity: a tensor-parallel group of one replica class at one pipeline stage (and EP index).
struct EngineEntity {
  int program = 0;             ///< index into Graph::programs
  int representative = 0;      ///< a global rank it stands for (groups and peers are taken from it)
  double compute_stretch = 1;  ///< multiplier on FLOP-bound time (f_max / f / speed of the slowest member)
  double memory_stretch =
      1;  ///< multiplier on byte-bound time and overheads (1 / speed of the slowest member)
};

/// Begin and end of one op on one entity (for timelines).
struct OpSpan {
  std::int32_t op = 0;  ///< index into the program's ops
  double begin_s = 0;   ///< start (for communication: start of the transfer, after all members arrived)
  double end_s = 0;     ///< completion
};

/// A gap between two compute ops of one GPU shorter than this is not a wait (EntityResult::wait_gaps).
inline constexpr double kWaitGapS = 1e-6;

/// A wait of one GPU inside a step: the compute stream idled `length_s` before compute op `op` began.
struct WaitGap {
  std::int32_t op = 0;  ///< index into the program's ops of the compute op that ended the wait
  double length_s = 0;  ///< how long the compute stream idled before it, s
};

/// What one entity did during the iteration.
struct EntityResult {
  double end_s = 0;           ///< completion of its last op
  double compute_busy_s = 0;  ///< sum of compute-op durations
  double comm_busy_s = 0;     ///< sum of communication transfer times (all streams)
  /// Gaps between its compute ops longer than kWaitGapS (a bubble, a late peer, an exposed transfer), from
  /// the step's start; the wait after its last compute op is the step's end less that op's end.
  int wait_gaps = 0;
  bool starts_waiting = false;    ///< its first compute op began after a gap (a wait from the step's start)
  double wait_gap_s = 0;          ///< the gaps' summed length
  double last_compute_end_s = 0;  ///< end of its last compute op
  std::vector<WaitGap> waits;     ///< the wait_gaps in time order: where the GPU idles (its power trace)
  double exposed_comm_s[kNumCommClasses] = {};   ///< compute-stream idle time spent on transfers, per class
  double comm_transfer_s[kNumCommClasses] = {};  ///< transfer time per class (overlapped or not)
  std::vector<OpSpan> timeline;                  ///< every op, when a timeline was requested
};

/// One iteration's outcome.
struct EngineResult {
  double iteration_s = 0;              ///< latest completion over all entities
  std::vector<EntityResult> entities;  ///< parallel to the entities given to run()
  std::uint64_t op_events = 0;         ///< ops executed (over entities, not ranks)
};

/// Runs iterations of one graph on one cluster; caches communication costs between runs.
class Engine {
 public:
  /// `powers[p]` holds the compute costs of graph.programs[p]; both must outlive the engine.
  Engine(const graph::Graph& graph, const ClusterSpec& cluster, const std::vector<ProgramPower>& powers);
  /// Simulates one iteration. `entity_of_rank[r]` is the entity index standing for rank r (every rank must
  /// map). Throws RuntimeFailure if the graph deadlocks (a collective or receive never completes).
  EngineResult run(const std::vector<EngineEntity>& entities, const std::vector<std::int32_t>& entity_of_rank,
                   bool record_timeline);

 private:
  struct ProgramStreams;
  class Iteration;  ///< one call of run(): its state and steps (engine.cpp)
  const std::vector<double>& comm_costs(int program, int representative);
  const graph::Graph& graph_;
  const ClusterSpec& cluster_;
  const std::vector<ProgramPower>& powers_;
  std::vector<std::shared_ptr<ProgramStreams>> streams_;
  std::unordered_map<std::string, std::shared_ptr<std::vector<double>>> comm_cost_cache_;
};

}  // namespace calo::sim
