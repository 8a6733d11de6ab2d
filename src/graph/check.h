// Checkers of an execution graph: collective consistency, point-to-point matching, deadlock freedom, FLOP
// totals against the model's accounting, and communication volumes against closed forms (docs/METRICS.md).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace calo::graph {

/// One problem a checker found.
struct Problem {
  std::string check;    ///< checker name: "collectives", "p2p", "deadlock", "flops", "comm-volume"
  std::string message;  ///< what is wrong, naming ranks/groups/ops
};

/// The problems one per line as "check: message" (for errors and test failure messages).
std::string to_text(const std::vector<Problem>& problems);

/// Every collective is issued by all members of its group, in the same order, with the same kind and size.
std::vector<Problem> check_collectives(const Graph& graph);

/// Every send has exactly one matching receive (peer, tag, bytes) and vice versa.
std::vector<Problem> check_point_to_point(const Graph& graph);

/// Which ranks the deadlock check executes.
enum class DeadlockScope {
  kAuto,            ///< all ranks up to 512, else representatives
  kAllRanks,        ///< every rank
  kRepresentative,  ///< one pipeline of each program role (tp index 0); peers of a shared program are
                    ///< symmetric
};

/// Executes the graph with blocking (rendezvous) send/recv and collectives, every stream in order and every
/// op after its dependencies; reports the stuck ops if execution cannot finish.
std::vector<Problem> check_deadlock(const Graph& graph, DeadlockScope scope = DeadlockScope::kAuto);

/// FLOPs of one iteration summed over all ranks, and what the model's accounting says they must be.
struct FlopTotals {
  double gemm = 0;                ///< sum of GEMM FLOPs in the graph
  double attention = 0;           ///< sum of attention-core FLOPs in the graph
  double expected_gemm = 0;       ///< tokens x (3 (forward - attention forward) + recompute GEMM FLOPs)
  double expected_attention = 0;  ///< tokens x (3 attention forward + recompute attention FLOPs)
};

/// Sums FLOPs of the graph and computes the expected totals from model/accounting.h.
FlopTotals flop_totals(const Graph& graph);

/// GEMM and attention FLOPs equal the accounting's (relative tolerance 1e-9).
std::vector<Problem> check_flops(const Graph& graph);

/// Communication bytes of one iteration summed over all ranks, per class (collective bytes as in
/// CollectiveKind; point-to-point counts sent bytes).
struct CommVolumes {
  double tp_bytes = 0;            ///< tensor-parallel collectives
  double dp_bytes = 0;            ///< data-parallel, expert-data-parallel and tied-embedding collectives
  double pp_bytes = 0;            ///< pipeline sends
  double ep_bytes = 0;            ///< expert-parallel all-to-all
  double dp_replicate_bytes = 0;  ///< part of dp_bytes over hybrid sharding's replicate groups (all-reduce)
  double cp_bytes = 0;            ///< context-parallel ring sends (K/V forward; K/V and dK/dV backward)
};

/// Sums the graph's communication bytes per class.
CommVolumes comm_volumes(const Graph& graph);

/// Attention-core FLOPs of one rank for one layer and micro-batch under context parallelism (all ring steps):
/// the cp = 1 causal attention FLOPs divided by cp (docs/METRICS.md, "Context parallel").
double expected_cp_attention_flops_per_rank(const model::ModelSpec& model, const parallel::Layout& layout,
                                            bool backward);

/// Context-parallel bytes of one rank per layer and micro-batch, forward + backward (+ the recomputed
/// forward): ring (p2p) (cp-1) (3 + R) x K sent, all-gather cp (3 + R) x K (collective buffers), with
/// K = 2 T kv_size/tp x 2 B, T = b s / cp, R = 1 with any recompute; torch cp (2 + R) x 4E gathered + cp x 8E
/// sent, E = T q_size/tp.
double expected_cp_bytes_per_layer(const model::ModelSpec& model, const parallel::Layout& layout);

/// Closed-form volumes (docs/METRICS.md, "Execution graph"), computed from model and layout alone.
CommVolumes expected_comm_volumes(const model::ModelSpec& model, const parallel::Layout& layout);

/// Graph volumes equal the closed forms (relative tolerance 1e-9).
std::vector<Problem> check_comm_volumes(const Graph& graph);

/// All checkers above.
std::vector<Problem> check_graph(const Graph& graph, DeadlockScope scope = DeadlockScope::kAuto);

/// A copy of `graph` with one program per rank (so tests can change a single rank's ops).
Graph expand_programs(const Graph& graph);

}  // namespace calo::graph
