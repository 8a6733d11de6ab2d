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
    data_.emit_fp8_scale_all_reduce(optimizer_index);
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
        } else if (slot.pass == parallel::PassKind::kWeightGrad) {
          run_weight_grad(slot.microbatch, slot.chunk);
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
    // A split backward (zero bubble) is its B here; the weight-gradient GEMMs wait for the W slot.
    core_.defer_wgrads = parallel::schedule_entry(core_.layout.schedule).splits_backward;
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
    core_.defer_wgrads = false;
  }

  /// One W slot of a split backward: the weight-gradient GEMMs its B slot held back, in B's order.
  void run_weight_grad(int microbatch, int chunk) {
    core_.current_microbatch = microbatch;
    core_.current_chunk = chunk;
    core_.phase = Phase::kBackward;
    const auto found = core_.deferred_wgrads.find({microbatch, chunk});
    if (found == core_.deferred_wgrads.end()) return;
    // W needs nothing from a neighbour: the receives posted before it (ZB-H1's exchange for the pass after
    // it) are waited for by that pass, so W fills the wait instead of waiting too.
    std::vector<std::int32_t> waits = std::move(core_.waits);
    core_.waits.clear();
    for (const detail::DeferredGemm& gemm : found->second) {
      core_.current_layer = gemm.layer;
      core_.gemm(gemm.weight, GemmPass::kWgrad, gemm.m, gemm.n, gemm.k, gemm.expert, gemm.batch);
    }
    core_.waits.insert(core_.waits.end(), waits.begin(), waits.end());
    core_.deferred_wgrads.erase(found);
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
    const int role = by_ep ? layout.ep_index(rank) : 0;
    graph.program_of_rank[rank] = stage * roles_per_stage + role;
  }
  build_groups(graph);
  return graph;
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
