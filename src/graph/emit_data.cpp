// DataEmitter: data-parallel gradient reductions, ZeRO/FSDP parameter gathers and the optimizer step
// (builder_internal.h).
#include "graph/builder_internal.h"

namespace calo::graph::detail {

namespace {

/// AdamW bytes moved per parameter: read fp32 grad, master, m, v (16); write master, m, v (12), bf16 param
/// (2).
constexpr double kAdamBytesPerParam = 30.0;
/// AdamW FLOPs per parameter (moments, bias correction, sqrt, division, decay, update).
constexpr double kAdamFlopsPerParam = 12.0;

}  // namespace

DataEmitter::DataEmitter(BuilderCore& core) : Emitter(core) {
  counts_ = model::count_parameters(model_);
  // Parameters are replicated over the cp ranks of a replica: gradients are reduced (and ZeRO shards
  // spread) over the dp*cp ranks, Megatron-LM's data-parallel group with context parallel.
  dp_group_ = layout_.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp;
  dp_reduce_ = layout_.grad_reduce_size() > 1;
  edp_reduce_ = layout_.expert_dp_size() > 1;
  hybrid_ = layout_.hybrid_sharding();
  chunk_gathered_.assign(layout_.virtual_stages, false);
}

// ---- parameter units
// ----------------------------------------------------------------------------------------

/// Parameters of a unit held by one rank (tensor-parallel shard; norms, router and positions replicated).
DataEmitter::UnitParams DataEmitter::unit_params(int unit) const {
  const double tp = static_cast<double>(dims_.tp);
  UnitParams params;
  if (unit == kEmbeddingUnit) {
    params.dense = (counts_.embedding - counts_.positions) / tp + counts_.positions;
  } else if (unit == kOutputUnit) {
    // Tied: the last stage holds its own copy of the word embedding when pp > 1 (synchronized by
    // kEmbedding).
    const double output = model_.tied_embeddings
                              ? (layout_.pp > 1 ? counts_.embedding - counts_.positions : 0.0)
                              : counts_.output;
    params.dense = output / tp + counts_.final_norm;
  } else if (model_.is_moe()) {
    params.dense = counts_.per_layer_attention / tp + counts_.per_layer_norm + counts_.per_layer_router;
    params.expert = counts_.per_expert * (model_.num_experts / layout_.ep) / tp;
    if (layout_.fp8()) params.fp8_dense = counts_.per_layer_attention_matrices / tp;
    if (layout_.fp8()) params.fp8_linears = 2;
  } else {
    params.dense = (counts_.per_layer_attention + counts_.per_layer_mlp) / tp + counts_.per_layer_norm;
    if (layout_.fp8())
      params.fp8_dense = (counts_.per_layer_attention_matrices + counts_.per_ffn_matrices) / tp;
    if (layout_.fp8()) params.fp8_linears = 4;
  }
  return params;
}

double DataEmitter::reduce_bytes_per_param() const {
  return parallel::gradient_reduce_bytes_per_param(layout_.trainer);
}

double DataEmitter::collective_bytes(CollectiveKind kind, double params, double fp8_params) const {
  return kind == CollectiveKind::kAllGather ? layout_.gather_bytes(params, fp8_params)
                                            : params * reduce_bytes_per_param();
}

/// Emits the dp (dense) and expert-dp (expert) collectives of one unit; returns their indices. Under hybrid
/// sharding the dense collective runs over the shard group, and a gradient reduce-scatter is followed by
/// an all-reduce of the resulting shard over the replicate group.
std::vector<std::int32_t> DataEmitter::emit_param_collectives(CollectiveKind kind, int chunk, int unit,
                                                              int microbatch, Phase phase,
                                                              const std::vector<std::int32_t>& deps) {
  const int saved_layer = core_.current_layer, saved_microbatch = core_.current_microbatch,
            saved_chunk = core_.current_chunk;
  core_.current_layer = unit >= 0 ? unit : -1;
  core_.current_microbatch = microbatch;
  core_.current_chunk = chunk;
  std::vector<std::int32_t> ids;
  const UnitParams params = unit_params(unit);
  if (hybrid_ && params.dense > 0) {
    std::vector<std::int32_t> after = deps;
    if (layout_.shard_size() > 1) {
      Op op = BuilderCore::collective_op(kind, GroupKind::kDpShard,
                                         collective_bytes(kind, params.dense, params.fp8_dense),
                                         Stream::kDpComm, phase);
      op.parameters = params.dense;
      ids.push_back(core_.add(op, deps));
      after = {ids.back()};
    }
    if (kind == CollectiveKind::kReduceScatter) {
      const double shard = params.dense / layout_.shard_size();
      Op op = BuilderCore::collective_op(CollectiveKind::kAllReduce, GroupKind::kDpReplicate,
                                         shard * reduce_bytes_per_param(), Stream::kDpComm, phase);
      op.parameters = shard;
      ids.push_back(core_.add(op, after));
    }
  } else if (dp_reduce_ && params.dense > 0) {
    Op op = BuilderCore::collective_op(
        kind, dp_group_, collective_bytes(kind, params.dense, params.fp8_dense), Stream::kDpComm, phase);
    op.parameters = params.dense;
    ids.push_back(core_.add(op, deps));
  }
  if (edp_reduce_ && params.expert > 0) {
    Op op = BuilderCore::collective_op(kind, GroupKind::kExpertDp, collective_bytes(kind, params.expert, 0.0),
                                       Stream::kDpComm, phase);
    op.parameters = params.expert;
    ids.push_back(core_.add(op, deps));
  }
  core_.current_layer = saved_layer;
  core_.current_microbatch = saved_microbatch;
  core_.current_chunk = saved_chunk;
  return ids;
}

// ---- parameter gathers (ZeRO-1/2 after the step, FSDP per unit)
// ---------------------------------------------

void DataEmitter::emit_overlapped_param_gathers() {
  for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
    for (int unit : core_.forward_units(chunk))
      param_gather_op_[{chunk, unit}] =
          emit_param_collectives(CollectiveKind::kAllGather, chunk, unit, -1, Phase::kForward, {});
}

void DataEmitter::emit_param_gathers_after_step(int optimizer_index) {
  for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
    for (int unit : core_.forward_units(chunk))
      emit_param_collectives(CollectiveKind::kAllGather, chunk, unit, -1, Phase::kOptimizer,
                             {optimizer_index});
}

// FSDP (PyTorch FSDP2 semantics): a pass gathers its chunk's units unless they are still held; forward frees
// them after use when resharding after forward, backward always frees them.
void DataEmitter::begin_forward(int chunk) {
  gather_now_ = !chunk_gathered_[chunk];
  chunk_gathered_[chunk] = !layout_.reshard_after_forward;
}

void DataEmitter::begin_backward(int chunk) {
  gather_now_ = !chunk_gathered_[chunk];
  chunk_gathered_[chunk] = false;
}

void DataEmitter::before_unit_forward(int chunk, int unit, int next_unit, bool has_next,
                                      bool first_of_chunk) {
  fsdp_gather(chunk, unit, next_unit, has_next);
  if (first_of_chunk) {
    auto found = param_gather_op_.find({chunk, unit});
    if (found != param_gather_op_.end())
      core_.waits.insert(core_.waits.end(), found->second.begin(), found->second.end());
  }
}

/// Overlapped: the gather of the next unit is issued while this one computes (one unit of prefetch); else
/// each gather blocks compute.
void DataEmitter::fsdp_gather(int chunk, int unit, int next_unit, bool has_next) {
  if (layout_.zero_stage != 3 || !gather_now_) return;
  const bool overlap = layout_.overlap_param_gather;
  auto gather = [&](int which) {
    return emit_param_collectives(CollectiveKind::kAllGather, chunk, which, core_.current_microbatch,
                                  core_.phase, {overlap ? -1 : core_.last_compute});
  };
  if (!overlap || !fsdp_prefetched_.count(unit)) fsdp_prefetched_[unit] = gather(unit);
  auto waits = fsdp_prefetched_[unit];
  core_.waits.insert(core_.waits.end(), waits.begin(), waits.end());
  fsdp_prefetched_.erase(unit);
  if (overlap && has_next) fsdp_prefetched_[next_unit] = gather(next_unit);
}

// ---- gradient reductions and the optimizer step
// -------------------------------------------------------------

void DataEmitter::after_unit_backward(int chunk, int unit, int microbatch, bool last_of_chunk) {
  // ZeRO-2 and FSDP reduce-scatter every micro-batch's gradients (they keep no full gradient buffer).
  const bool reduce_per_microbatch = layout_.zero_stage >= 2;
  if (reduce_per_microbatch) {
    // Each micro-batch's gradients of the unit are reduce-scattered (one bucket per unit).
    auto ids = emit_param_collectives(CollectiveKind::kReduceScatter, chunk, unit, microbatch,
                                      Phase::kBackward, {core_.last_compute});
    if (layout_.overlap_grad_reduce) {
      grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
    } else {
      core_.waits.insert(core_.waits.end(), ids.begin(), ids.end());
      grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
    }
  } else if (last_of_chunk) {
    if (layout_.overlap_grad_reduce) {
      auto ids = emit_param_collectives(
          layout_.zero_stage == 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce, chunk, unit,
          -1, Phase::kBackward, {core_.last_compute});
      grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
    } else {
      grad_units_in_order_.push_back({chunk, unit});
    }
  }
}

void DataEmitter::emit_step_grad_reductions() {
  // Gradient reduction when not overlapped with backward: all buckets after the last backward (ZeRO-2/3
  // reduce every micro-batch's gradients in its backward instead).
  if (layout_.zero_stage < 2 && !layout_.overlap_grad_reduce) {
    for (const auto& [chunk, unit] : grad_units_in_order_) {
      auto ids = emit_param_collectives(
          layout_.zero_stage == 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce, chunk, unit,
          -1, Phase::kBackward, {core_.last_compute});
      grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
    }
  }
  // Tied input/output embedding split over the first and last stage: all-reduce its gradient.
  if (model_.tied_embeddings && layout_.pp > 1 &&
      (core_.holds_unit(kEmbeddingUnit) || core_.holds_unit(kOutputUnit))) {
    Op op = BuilderCore::collective_op(
        CollectiveKind::kAllReduce, GroupKind::kEmbedding,
        (counts_.embedding - counts_.positions) / static_cast<double>(dims_.tp) * kBf16Bytes, Stream::kDpComm,
        Phase::kBackward);
    op.parameters = (counts_.embedding - counts_.positions) / static_cast<double>(dims_.tp);
    grad_ops_.push_back(core_.add(op, {core_.last_compute}));
  }
}

/// Parameters this rank's optimizer step updates (its shard under ZeRO >= 1).
double DataEmitter::optimizer_params() const {
  UnitParams total;
  for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
    for (int unit : core_.forward_units(chunk)) {
      UnitParams params = unit_params(unit);
      total.dense += params.dense;
      total.expert += params.expert;
    }
  double shard = total.dense + total.expert;
  if (layout_.zero_stage >= 1) {
    // Dense state is sharded over the shard group under hybrid sharding, else over dp * cp ranks.
    const double dense_shards = layout_.hybrid_sharding() ? layout_.shard_size() : layout_.grad_reduce_size();
    shard = total.dense / dense_shards + total.expert / layout_.expert_dp_size();
  }
  return shard;
}

/// After every wait and gradient op.
int DataEmitter::emit_optimizer_step() {
  const double shard = optimizer_params();
  Op optimizer;
  optimizer.kind = OpKind::kOptimizer;
  optimizer.phase = Phase::kOptimizer;
  optimizer.parameters = shard;
  optimizer.bytes = shard * kAdamBytesPerParam;
  optimizer.flops = shard * kAdamFlopsPerParam;
  std::vector<std::int32_t> deps = std::move(core_.waits);
  core_.waits.clear();
  deps.insert(deps.end(), grad_ops_.begin(), grad_ops_.end());
  deps.push_back(core_.last_compute);
  const int optimizer_index = core_.add(optimizer, deps);
  core_.last_compute = optimizer_index;
  return optimizer_index;
}

void DataEmitter::emit_fp8_scale_all_reduce(int optimizer_index) {
  if (!layout_.fp8_all_gather) return;
  int linears = 0;
  for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
    for (int unit : core_.forward_units(chunk)) linears += unit_params(unit).fp8_linears;
  if (linears == 0) return;
  // One fp32 amax per FP8-gathered weight, reduced over the ranks that hold its shards.
  Op op = BuilderCore::collective_op(CollectiveKind::kAllReduce, hybrid_ ? GroupKind::kDpShard : dp_group_,
                                     kFp32Bytes * linears, Stream::kDpComm, Phase::kOptimizer);
  core_.add(op, {optimizer_index});
}

}  // namespace calo::graph::detail
