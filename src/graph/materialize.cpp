// A rank's concrete program (materialize) and what it needs: the peer of a point-to-point op, the ring step's
// attention shape and its cost. Kept apart from the graph builder (graph.cpp) so that code which only runs a
// built graph, such as the CUDA backend's module (src/exec/cuda/), links without the builder, the model
// loader and YAML.
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "graph/builder_internal.h"
#include "graph/graph.h"

namespace calo::graph {

using detail::kBf16Bytes;

double attention_flops(const AttentionShape& shape) {
  // Query-key pairs: q k, or under the (bottom-right) causal mask q (k - q) + q^2 / 2.
  const double q = shape.seq, k = shape.keys();
  const double pairs = shape.causal ? q * (k - q) + 0.5 * q * q : q * k;
  const double forward_flops = 4.0 * shape.batch * pairs * shape.heads * shape.head_dim;
  return shape.backward ? 2.0 * forward_flops : forward_flops;
}

double attention_bytes(const AttentionShape& shape) {
  // Flash attention traffic: q, o (+ do, dq) per query row, k, v (+ dk, dv) per key row.
  const double qkvo = kBf16Bytes * shape.batch * shape.head_dim *
                      (2.0 * shape.heads * static_cast<double>(shape.seq) +
                       2.0 * shape.kv_heads * static_cast<double>(shape.keys()));
  return shape.backward ? 2.0 * qkvo : qkvo;
}

void resolve_ring_step(AttentionShape& shape, int cp_index, int cp) {
  if (shape.cp_gathered > 0) {
    const std::int32_t chunk = shape.seq;  // c: one query chunk
    shape.kv_seq = shape.cp_gathered == 1 ? (cp_index + 1) * chunk : (2 * cp - cp_index) * chunk;
    return;
  }
  if (shape.cp_step <= 0) return;
  // Forward: the K/V of step j comes from cp index i - j; backward runs the ring the other way (i + j).
  const int source =
      shape.backward ? (cp_index + shape.cp_step) % cp : ((cp_index - shape.cp_step) % cp + cp) % cp;
  const std::int32_t chunk = std::min(shape.seq, shape.kv_seq);  // c
  if (source < cp_index) {
    // Both of my query chunks come after the source's first chunk and before its second: 2c x c.
    shape.seq = 2 * chunk;
    shape.kv_seq = chunk;
  } else {
    // Only my second (late) query chunk sees the source's two chunks: c x 2c.
    shape.seq = chunk;
    shape.kv_seq = 2 * chunk;
  }
}

int Graph::peer_rank(int rank, const Op& op) const {
  const int tp = layout.tp, cp = layout.cp, dp = layout.dp;
  const int tp_index = rank % tp;
  const int cp_index = (rank / tp) % cp;
  const int dp_index = (rank / (tp * cp)) % dp;
  const int stage = rank / (tp * cp * dp);
  if (op.group == GroupKind::kCp) {
    const int peer_cp = ((cp_index + op.peer_offset) % cp + cp) % cp;
    return tp_index + tp * (peer_cp + cp * (dp_index + dp * stage));
  }
  return tp_index + tp * (cp_index + cp * (dp_index + dp * op.peer_stage));
}

std::vector<RankOp> materialize(const Graph& graph, int rank) {
  require_input(rank >= 0 && rank < graph.world_size(),
                fmt::format("--rank {} is outside 0..{}", rank, graph.world_size() - 1));
  const RankProgram& program = graph.program(rank);
  const auto& layout = graph.layout;
  const int ep_index = layout.ep_index(rank);
  const int cp_index = (rank / layout.tp) % layout.cp;
  const int expert_offset = graph.model.is_moe() ? ep_index * (graph.model.num_experts / layout.ep) : 0;
  std::vector<RankOp> ops;
  ops.reserve(program.ops.size());
  for (std::size_t index = 0; index < program.ops.size(); ++index) {
    RankOp rank_op;
    rank_op.op = program.ops[index];
    auto deps = program.deps_of(index);
    rank_op.deps.assign(deps.begin(), deps.end());
    rank_op.op.dep_begin = 0;
    if (rank_op.op.kind == OpKind::kCollective) rank_op.group_id = graph.group_id(rank, rank_op.op.group);
    // A program shared by all EP indices lists the experts of EP index 0; shift to this rank's experts.
    if (rank_op.op.kind == OpKind::kGemm && rank_op.op.gemm.expert >= 0 && program.ep_index < 0)
      rank_op.op.gemm.expert += expert_offset;
    if (is_point_to_point(rank_op.op.kind)) rank_op.peer_rank = graph.peer_rank(rank, rank_op.op);
    if (rank_op.op.kind == OpKind::kAttention) {  // this rank's ring step or gathered chunk, and its cost
      resolve_ring_step(rank_op.op.attention, cp_index, layout.cp);
      rank_op.op.flops = attention_flops(rank_op.op.attention);
      rank_op.op.bytes = attention_bytes(rank_op.op.attention);
    }
    ops.push_back(std::move(rank_op));
  }
  return ops;
}

}  // namespace calo::graph
