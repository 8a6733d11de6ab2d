#include "graph/json.h"

namespace calo::graph {

nlohmann::json to_json(const Op& op, std::span<const std::int32_t> deps) {
  nlohmann::json json = {
      {"kind", to_string(op.kind)},
      {"stream", to_string(op.stream)},
      {"phase", to_string(op.phase)},
      {"chunk", op.chunk},
      {"layer", op.layer},
      {"microbatch", op.microbatch},
      {"flops", op.flops},
      {"bytes", op.bytes},
      {"deps", std::vector<std::int32_t>(deps.begin(), deps.end())},
  };
  switch (op.kind) {
    case OpKind::kGemm:
      json["m"] = op.gemm.m;
      json["n"] = op.gemm.n;
      json["k"] = op.gemm.k;
      json["dtype"] = to_string(op.gemm.dtype);
      json["weight"] = to_string(op.gemm.weight);
      json["pass"] = to_string(op.gemm.pass);
      if (op.gemm.expert >= 0) json["expert"] = op.gemm.expert;
      if (op.gemm.batch > 1) json["batch"] = op.gemm.batch;
      if (op.gemm.grad_e5m2) json["grad_dtype"] = "e5m2";
      break;
    case OpKind::kAttention:
      json["batch"] = op.attention.batch;
      json["heads"] = op.attention.heads;
      json["kv_heads"] = op.attention.kv_heads;
      json["seq"] = op.attention.seq;
      json["head_dim"] = op.attention.head_dim;
      json["causal"] = op.attention.causal;
      json["backward"] = op.attention.backward;
      if (op.attention.cp_step >= 0) {
        json["kv_seq"] = op.attention.keys();
        json["cp_step"] = op.attention.cp_step;
      }
      if (op.attention.cp_gathered > 0) {
        json["kv_seq"] = op.attention.keys();
        json["cp_chunk"] = op.attention.cp_gathered == 1 ? "early" : "late";
      }
      break;
    case OpKind::kElementwise:
      json["op"] = to_string(op.elementwise);
      break;
    case OpKind::kCollective:
      json["collective"] = to_string(op.collective);
      json["group"] = to_string(op.group);
      if (op.parameters > 0) json["parameters"] = op.parameters;
      break;
    case OpKind::kSend:
    case OpKind::kRecv:
      if (op.group == GroupKind::kCp) {
        json["group"] = to_string(op.group);
        json["peer_offset"] = op.peer_offset;
      } else {
        json["peer_stage"] = op.peer_stage;
      }
      json["tag"] = op.tag;
      json["p2p_batch"] = op.p2p_batch;
      break;
    case OpKind::kOptimizer:
      json["parameters"] = op.parameters;
      break;
  }
  return json;
}

nlohmann::json to_json(const Graph& graph) {
  nlohmann::json programs = nlohmann::json::array();
  for (const RankProgram& program : graph.programs) {
    nlohmann::json ops = nlohmann::json::array();
    for (std::size_t index = 0; index < program.ops.size(); ++index)
      ops.push_back(to_json(program.ops[index], program.deps_of(index)));
    programs.push_back({{"stage", program.stage}, {"ep_index", program.ep_index}, {"ops", std::move(ops)}});
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const CommGroup& group : graph.groups)
    groups.push_back({{"kind", to_string(group.kind)}, {"ranks", group.ranks}});
  return {
      {"model", model::to_json(graph.model)},
      {"layout", parallel::to_json(graph.layout)},
      {"options", {{"expert_load_imbalance", graph.options.expert_load_imbalance}}},
      {"world_size", graph.world_size()},
      {"programs", std::move(programs)},
      {"program_of_rank", graph.program_of_rank},
      {"groups", std::move(groups)},
  };
}

nlohmann::json to_json(const Graph& graph, int rank) {
  nlohmann::json ops = nlohmann::json::array();
  for (const RankOp& rank_op : materialize(graph, rank)) {
    nlohmann::json json = to_json(rank_op.op, rank_op.deps);
    if (rank_op.group_id >= 0) {
      json["group_id"] = rank_op.group_id;
      json["group_ranks"] = graph.groups[rank_op.group_id].ranks;
    }
    if (rank_op.peer_rank >= 0) json["peer_rank"] = rank_op.peer_rank;
    ops.push_back(std::move(json));
  }
  return {{"rank", rank},
          {"stage", graph.program(rank).stage},
          {"program", graph.program_of_rank[rank]},
          {"ops", std::move(ops)}};
}

}  // namespace calo::graph
