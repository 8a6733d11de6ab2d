// Backend-independent executor: walks one rank's materialized program (graph::materialize) and issues every
// op on the stream the graph names, in issue order, making streams wait on events where an op depends on an
// op of another stream. Same-stream dependencies are implied by stream order. Recomputation and the pipeline
// schedule need nothing special: they are ops (and an order) of the graph.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/backend.h"
#include "exec/bootstrap.h"
#include "exec/memory_ledger.h"
#include "graph/graph.h"

namespace calo::exec {

/// Executor settings.
struct ExecutorOptions {
  bool trace_ops = false;  ///< time every op with a pair of timing events (--trace-ops)
};

/// Timing of one op in one step.
struct OpTiming {
  std::int32_t op_index = 0;  ///< index in the materialized program
  std::int64_t begin_ns = 0;  ///< host CLOCK_MONOTONIC ns when the op started (from device events)
  std::int64_t end_ns = 0;    ///< host CLOCK_MONOTONIC ns when the op finished
};

/// What one step took on this rank.
struct StepTiming {
  std::int64_t begin_ns = 0;  ///< host CLOCK_MONOTONIC ns after the start barrier
  std::int64_t end_ns = 0;    ///< host CLOCK_MONOTONIC ns when every stream had finished
  std::vector<OpTiming> ops;  ///< per op (only with ExecutorOptions::trace_ops), issue order
  /// Step duration in ns.
  std::int64_t duration_ns() const { return end_ns - begin_ns; }
};

/// Executes one rank's program of `graph` on `backend` (both must outlive the executor).
class Executor {
 public:
  /// Materializes the program of `rank`; creates the streams and events it needs.
  Executor(Backend& backend, const graph::Graph& graph, int rank, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// Prepares every op on the backend (allocations, random operands); call after Backend::connect(). With a
  /// memory ledger, also holds its state (Backend::hold) until the backend goes.
  void prepare();
  /// `calo bench --memory real`: every step performs `ledger`'s allocations and frees around its ops (call
  /// before prepare()).
  void use_memory_ledger(MemoryLedger ledger);
  /// The ledger in use (empty actions and state without one).
  const MemoryLedger& memory_ledger() const { return ledger_; }
  /// Bytes of the ledger's state that the backend already allocated as the optimizer ops' operands (fp32
  /// parameters, gradients and Adam moments of the shard); prepare() holds only the rest.
  std::int64_t state_in_operands_bytes() const { return state_in_operands_bytes_; }
  /// Bytes of the backend's other operand buffers standing in for held bytes because the ledger would not fit
  /// beside them (operands_to_carve; 0 where it fits): the held peak is the backend's plus this and
  /// state_in_operands_bytes().
  std::int64_t operands_carved_bytes() const { return operands_carved_bytes_; }
  /// Runs one training step: host barrier over `bootstrap`, every op launched, all streams synchronized.
  StepTiming run_step(Bootstrap& bootstrap);

  /// The materialized program being executed.
  const std::vector<graph::RankOp>& ops() const { return ops_; }
  /// Ops per kind in one step of the program (what the backend must report executed per step).
  OpCounts ops_per_step() const;
  /// Number of ops that wait on another stream's event (cross-stream dependencies) per step.
  std::int64_t cross_stream_waits() const { return cross_stream_waits_; }

 private:
  Backend& backend_;
  const graph::Graph& graph_;
  int rank_ = 0;
  ExecutorOptions options_;
  std::vector<graph::RankOp> ops_;
  std::vector<std::unique_ptr<PreparedOp>> prepared_;
  std::vector<std::unique_ptr<Stream>> streams_;      // indexed by graph::Stream (null if unused)
  std::vector<std::unique_ptr<Event>> done_events_;   // per op: recorded after it when others wait on it
  std::vector<std::unique_ptr<Event>> begin_events_;  // per op, trace_ops only
  std::vector<std::unique_ptr<Event>> end_events_;    // per op, trace_ops only
  std::vector<std::unique_ptr<Event>> stream_start_events_;  // per stream: step start reference
  std::int64_t cross_stream_waits_ = 0;
  MemoryLedger ledger_;       // --memory real; empty otherwise
  MemoryLedger held_ledger_;  // ledger_ less what the operands stand in for (carve_ledger): what is held
  std::int64_t state_in_operands_bytes_ = 0;
  std::int64_t operands_carved_bytes_ = 0;

  // Enqueues the ledger's actions of op `op_index` (before or after its launch) on `stream`, from `cursor`.
  void apply_ledger(size_t op_index, bool before_op, Stream& stream, size_t& cursor);
};

/// Per-kind op counts of a materialized program.
OpCounts count_ops(const std::vector<graph::RankOp>& ops);

}  // namespace calo::exec
