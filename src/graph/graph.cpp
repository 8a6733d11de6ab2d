#include "graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "graph/builder_internal.h"
#include "graph/op_budget.h"
#include "parallel/rank_map.h"
#include "parallel/schedule.h"

namespace calo::graph {

namespace {

using detail::kBf16Bytes;

/// Builds one RankProgram: walks the stage's pipeline schedule and has each parallelism's emitter append its
/// ops (builder_internal.h): the pipeline exchanges between steps, per unit the data-parallel gathers and
/// reductions around the tensor-parallel compute (which hands cp attention and MoE blocks on), then the
/// gradient reductions and the optimizer step.
class ProgramBuilder {
 public:
  ProgramBuilder(const model::ModelSpec& model, const parallel::Layout& layout, const GraphOptions& options,
                 int stage, int ep_index, RankProgram& program)
      : core_(model, layout, options, stage, ep_index, program),
        context_(core_),
        expert_(core_),
        tensor_(core_, context_, expert_),
        pipeline_(core_),
        data_(core_) {}

  void build() {
    const parallel::Layout& layout = core_.layout;
    const auto schedule = parallel::stage_schedule(layout, core_.stage);
    const detail::ChunkSlots chunk_slots = pipeline_.chunk_slots_of(schedule);
    // ZeRO-1/2 gather the updated parameters after the optimizer step (FSDP gathers per unit before use).
    const bool gather_after_step = layout.zero_stage == 1 || layout.zero_stage == 2;
    if (gather_after_step && layout.overlap_param_gather) data_.emit_overlapped_param_gathers();
    run_schedule(schedule, chunk_slots);
    data_.emit_step_grad_reductions();
    const int optimizer_index = data_.emit_optimizer_step();
    // ZeRO-1/2 without overlap: gather the updated parameters right after the step.
    if (gather_after_step && !layout.overlap_param_gather)
      data_.emit_param_gathers_after_step(optimizer_index);
  }

 private:
  /// Emits the forward and backward passes of `schedule`, step by step, with the pipeline exchanges between.
  void run_schedule(const std::vector<parallel::PipelineSlot>& schedule,
                    const detail::ChunkSlots& chunk_slots) {
    const std::vector<std::pair<int, int>> steps = pipeline_.exchange_steps(schedule);
    auto slots_of = [&](std::size_t step) {
      std::vector<parallel::PipelineSlot> result;
      if (step < steps.size())
        for (int slot_index = steps[step].first; slot_index < steps[step].second; ++slot_index)
          result.push_back(schedule[slot_index]);
      return result;
    };
    pipeline_.emit_exchange({}, slots_of(0));
    for (std::size_t step = 0; step < steps.size(); ++step) {
      for (int slot_index = steps[step].first; slot_index < steps[step].second; ++slot_index) {
        const auto& slot = schedule[slot_index];
        if (slot.pass == parallel::PassKind::kForward) {
          run_forward(slot.microbatch, slot.chunk, slot_index == chunk_slots.first_forward[slot.chunk]);
        } else {
          run_backward(slot.microbatch, slot.chunk, slot_index == chunk_slots.last_backward[slot.chunk]);
        }
      }
      // Exchange with the neighbours: this step's outputs, the next step's inputs.
      pipeline_.emit_exchange(slots_of(step), slots_of(step + 1));
    }
  }

  /// One forward slot: the chunk's units in order, each after its parameter gathers.
  void run_forward(int microbatch, int chunk, bool first_of_chunk) {
    core_.current_microbatch = microbatch;
    core_.current_chunk = chunk;
    core_.phase = Phase::kForward;
    data_.begin_forward(chunk);
    const auto units = core_.forward_units(chunk);
    for (std::size_t position = 0; position < units.size(); ++position) {
      const int unit = units[position];
      data_.before_unit_forward(chunk, unit, position + 1 < units.size() ? units[position + 1] : 0,
                                position + 1 < units.size(), first_of_chunk);
      core_.current_layer = unit >= 0 ? unit : -1;
      tensor_.unit_forward(unit);
    }
    core_.current_layer = -1;
  }

  /// One backward slot: the chunk's units in reverse, each after its FSDP gather and before its gradient
  /// reduction.
  void run_backward(int microbatch, int chunk, bool last_of_chunk) {
    core_.current_microbatch = microbatch;
    core_.current_chunk = chunk;
    core_.phase = Phase::kBackward;
    auto units = core_.forward_units(chunk);
    std::reverse(units.begin(), units.end());
    data_.begin_backward(chunk);
    for (std::size_t position = 0; position < units.size(); ++position) {
      const int unit = units[position];
      data_.fsdp_gather(chunk, unit, position + 1 < units.size() ? units[position + 1] : 0,
                        position + 1 < units.size());
      core_.current_layer = unit >= 0 ? unit : -1;
      tensor_.unit_backward(unit);
      core_.phase = Phase::kBackward;
      data_.after_unit_backward(chunk, unit, microbatch, last_of_chunk);
    }
    core_.current_layer = -1;
  }

  detail::BuilderCore core_;
  detail::ContextEmitter context_;
  detail::ExpertEmitter expert_;
  detail::TensorEmitter tensor_;
  detail::PipelineEmitter pipeline_;
  detail::DataEmitter data_;
};
void build_groups(Graph& graph) {
  const parallel::Layout& layout = graph.layout;
  const int world = layout.world_size();
  std::array<std::int32_t, kNumGroupKinds> none;
  none.fill(-1);
  graph.group_of_rank.assign(world, none);
  const parallel::RankMap rank_map(layout);
  for (int slot = 0; slot < kNumGroupKinds; ++slot) {
    const auto kind = static_cast<GroupKind>(slot);
    if ((kind == GroupKind::kEp || kind == GroupKind::kExpertDp) && !graph.model.is_moe()) continue;
    if (kind == GroupKind::kEmbedding && !graph.model.tied_embeddings) continue;
    if ((kind == GroupKind::kDpShard || kind == GroupKind::kDpReplicate) && !layout.hybrid_sharding())
      continue;
    // Without context parallel the cp groups are single ranks and dp-cp is dp: not built.
    if ((kind == GroupKind::kCp || kind == GroupKind::kDpCp) && layout.cp == 1) continue;
    // The rank map enumerates the groups (one home for the tp-cp-ep-dp-pp order).
    for (std::vector<int>& ranks : rank_map.all_groups(kind)) {
      CommGroup group;
      group.kind = kind;
      group.ranks.assign(ranks.begin(), ranks.end());
      const int id = static_cast<int>(graph.groups.size());
      for (int member : group.ranks) graph.group_of_rank[member][slot] = id;
      graph.groups.push_back(std::move(group));
    }
  }
}

}  // namespace

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

Graph build_graph(const model::ModelSpec& model, const parallel::Layout& layout,
                  const GraphOptions& options) {
  const std::int64_t expected_ops = check_op_budget(model, layout, options);
  return detail::build_graph_unchecked(model, layout, options, expected_ops);
}

Graph detail::build_graph_unchecked(const model::ModelSpec& model, const parallel::Layout& layout,
                                    const GraphOptions& options, std::int64_t expected_ops) {
  if (model.is_moe()) {
    require_input(
        options.expert_load_imbalance >= 1.0 && options.expert_load_imbalance <= model.num_experts,
        fmt::format("expert load imbalance {} is outside [1, {}] (max/mean tokens per expert); try 1.0",
                    options.expert_load_imbalance, model.num_experts));
    require_input(layout.tp == 1 || layout.sequence_parallel,
                  fmt::format("MoE with tp={} needs sequence parallel (as Megatron-LM); drop "
                              "--no-sequence-parallel or use --tp 1",
                              layout.tp));
  }
  require_input(
      layout.seq_length > 0 && layout.global_batch > 0,
      "graph: layout is not resolved (seq_length/global_batch 0); call parallel::resolve_layout first");
  Graph graph;
  graph.model = model;
  graph.layout = layout;
  graph.options = options;
  // Programs differ by expert-parallel index when experts get unequal token counts.
  const std::int64_t routed = model.is_moe() ? static_cast<std::int64_t>(layout.ep) * layout.micro_batch *
                                                   layout.seq_length * model.moe_top_k
                                             : 0;
  const bool by_ep = model.is_moe() && layout.ep > 1 &&
                     (options.expert_load_imbalance != 1.0 || routed % model.num_experts != 0);
  const int roles_per_stage = by_ep ? layout.ep : 1;
  graph.programs.resize(static_cast<std::size_t>(layout.pp) * roles_per_stage);
  // Programs of a graph are about the same length: the first reserves its share of the expected ops (+1/16,
  // the estimate is 0-3.2 % above), each other one the first one's size (+1/8), so op vectors grow without
  // copies (the planner builds thousands of graphs).
  const auto share_ops = static_cast<std::size_t>(expected_ops) / graph.programs.size();
  std::size_t reserve_ops = share_ops + share_ops / 16, reserve_deps = 0;
  for (int stage = 0; stage < layout.pp; ++stage) {
    for (int role = 0; role < roles_per_stage; ++role) {
      RankProgram& program = graph.programs[stage * roles_per_stage + role];
      program.stage = stage;
      program.ep_index = by_ep ? role : -1;
      program.ops.reserve(reserve_ops);
      program.deps.reserve(reserve_deps);
      ProgramBuilder(graph.model, graph.layout, graph.options, stage, program.ep_index, program).build();
      if (&program == &graph.programs.front()) {
        reserve_ops = program.ops.size() + program.ops.size() / 8;
        reserve_deps = program.deps.size() + program.deps.size() / 8;
      }
    }
  }
  const int world = layout.world_size();
  graph.program_of_rank.resize(world);
  for (int rank = 0; rank < world; ++rank) {
    const int stage = rank / (layout.tp * layout.cp * layout.dp);
    const int dp_index = (rank / (layout.tp * layout.cp)) % layout.dp;
    const int role = by_ep ? dp_index % layout.ep : 0;
    graph.program_of_rank[rank] = stage * roles_per_stage + role;
  }
  build_groups(graph);
  return graph;
}

std::vector<RankOp> materialize(const Graph& graph, int rank) {
  require_input(rank >= 0 && rank < graph.world_size(),
                fmt::format("--rank {} is outside 0..{}", rank, graph.world_size() - 1));
  const RankProgram& program = graph.program(rank);
  const auto& layout = graph.layout;
  const int ep_index = ((rank / (layout.tp * layout.cp)) % layout.dp) % layout.ep;
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

bool is_attention_gemm(const Op& op) {
  return op.kind == OpKind::kGemm &&
         (op.gemm.weight == GemmWeight::kAttnScore || op.gemm.weight == GemmWeight::kAttnContext);
}

double model_flops(const Op& op) {
  if (op.phase == Phase::kRecompute) return 0.0;
  if (is_attention_gemm(op)) return 0.5 * op.flops;  // every core in the zoo is causal
  return op.kind == OpKind::kGemm || op.kind == OpKind::kAttention ? op.flops : 0.0;
}

}  // namespace calo::graph
