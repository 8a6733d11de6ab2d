// Memory per GPU: weights, gradients, optimizer state and in-flight activations of one pipeline stage
// (formulas in docs/METRICS.md, "Model accounting").
#include "parallel/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/table.h"
#include "model/accounting.h"
#include "parallel/schedule.h"

namespace calo::parallel {
namespace {

constexpr double kWeightBytesPerParam = 2.0;      // bf16 weights
constexpr double kOptimizerBytesPerParam = 12.0;  // fp32 master weights + Adam m + Adam v
constexpr double kFp32BytesPerParam = 4.0;        // an fp32 parameter or gradient (torchtitan's)
constexpr double kMomentBytesPerParam = 8.0;      // Adam m + Adam v, fp32
// Transformer Engine's DelayedScaling amax_history_len default (NeMo's FP8 configs keep it; Megatron-LM's
// --fp8-amax-history-len defaults to 1).
constexpr double kAmaxHistoryLength = 1024;
// fp32 amax history of an FP8 linear's five scaled tensors.
constexpr double kAmaxHistoryBytesPerLinear = 5 * kAmaxHistoryLength * 4.0;
// The pytorch trainer's cross-entropy backward: the fp32 gradients of its log-softmax and of the fp32 logits,
// alive together at the loss, per token and vocabulary entry (on top of the saved fp32 logits).
constexpr double kLossBackwardBytesPerLogit = 8.0;

// Gradient bytes per parameter: bf16 (default); the pytorch trainer's fp32 master gradient, which outlives
// the bf16 gradients (freed once the optimizer copied them, before the next forward).
double gradient_bytes_per_param(Trainer trainer) {
  return trainer == Trainer::kPytorch ? 4.0 : 2.0;
}

// Layer counts per virtual stage (index parallel::virtual_stage), from the layout's partition (explicit or
// uniform).
std::vector<int> virtual_stage_layers(const Layout& layout, int num_layers) {
  std::vector<int> counts;
  for (const LayerRange& range : layer_partition(layout, num_layers)) counts.push_back(range.count);
  return counts;
}

// Parameters one rank of `stage` holds before data-parallel sharding, split into the dense part (replicated
// over dp) and the expert part (replicated over dp / ep).
struct StageParameters {
  double dense = 0;
  double expert = 0;
  double largest_unit = 0;  // largest gather/reduce unit on this rank: a layer, the embedding or the head
  double embedding = 0;     // the embedding lookup's parameters on this rank (first virtual stage), else 0
  double head_matrix = 0;   // the output projection's parameters on this rank (last virtual stage), else 0
  double fp8_dense = 0;     // of `dense`: the FP8 linears' matrices (attention, dense FFN)
  double fp8_expert = 0;    // of `expert`: the experts' matrices (FP8 linears too)
  // FP8 linear modules on the rank: QKV, projection, the FFN's two or each local expert's two.
  int fp8_linears = 0;
  // The most bytes one unit's FSDP all-gather gathers (Layout::gather_bytes).
  double largest_gather_bytes = 0;
};

StageParameters stage_parameters(const model::ModelSpec& model, const Layout& layout, int stage,
                                 const std::vector<int>& layers) {
  const model::ParameterCounts counts = model::count_parameters(model);
  const double tp = layout.tp;
  // Attention and FFN matrices (with their biases) are split over tp; norms and the router are replicated.
  const double dense_per_layer = counts.per_layer_attention / tp + counts.per_layer_router +
                                 counts.per_layer_norm + (model.is_moe() ? 0.0 : counts.per_layer_mlp / tp);
  const double local_experts = static_cast<double>(model.num_experts) / layout.ep;
  const double expert_per_layer = model.is_moe() ? counts.per_expert * local_experts / tp : 0.0;
  // The FP8 linears' matrices: attention and the dense FFN (dense part), the experts' (expert part).
  const double fp8_dense_per_layer =
      layout.fp8()
          ? (counts.per_layer_attention_matrices + (model.is_moe() ? 0.0 : counts.per_ffn_matrices)) / tp
          : 0.0;
  const double fp8_expert_per_layer =
      layout.fp8() && model.is_moe() ? counts.per_ffn_matrices * local_experts / tp : 0.0;
  const int fp8_linears_per_layer = !layout.fp8()    ? 0
                                    : model.is_moe() ? 2 + 2 * static_cast<int>(local_experts)
                                                     : 4;
  StageParameters params;
  const int virtual_count = layout.pp * layout.virtual_stages;
  for (int chunk = 0; chunk < layout.virtual_stages; ++chunk) {
    const int virtual_stage = parallel::virtual_stage(layout, stage, chunk);
    const int layer_count = layers[virtual_stage];
    params.dense += layer_count * dense_per_layer;
    params.expert += layer_count * expert_per_layer;
    params.fp8_dense += layer_count * fp8_dense_per_layer;
    params.fp8_expert += layer_count * fp8_expert_per_layer;
    params.fp8_linears += layer_count * fp8_linears_per_layer;
    if (layer_count > 0) {
      params.largest_unit = std::max(params.largest_unit, dense_per_layer + expert_per_layer);
      params.largest_gather_bytes =
          std::max(params.largest_gather_bytes,
                   layout.gather_bytes(dense_per_layer + expert_per_layer, fp8_dense_per_layer));
    }
    if (virtual_stage == 0) {
      // Word embedding is vocabulary-parallel over tp; learned positions are replicated.
      const double embedding = (counts.embedding - counts.positions) / tp + counts.positions;
      params.dense += embedding;
      params.embedding += embedding;
      params.largest_unit = std::max(params.largest_unit, embedding);
      params.largest_gather_bytes =
          std::max(params.largest_gather_bytes, layout.gather_bytes(embedding, 0.0));
    }
    if (virtual_stage == virtual_count - 1) {
      double head = counts.final_norm;
      const double vocab_matrix = static_cast<double>(model.vocab_size) * model.hidden_size / tp;
      if (!model.tied_embeddings || layout.pp > 1) {
        head += vocab_matrix;  // tied: Megatron keeps a copy of the tied embedding on the last stage
        params.head_matrix += vocab_matrix;
      }
      params.dense += head;
      params.largest_unit = std::max(params.largest_unit, head);
      params.largest_gather_bytes = std::max(params.largest_gather_bytes, layout.gather_bytes(head, 0.0));
    }
  }
  return params;
}

// Tokens of a sequence on one rank. Context parallel splits every sequence over cp ranks: each keeps the
// activations of seq / cp tokens (attention is flash-style, linear in the tokens; the ring's K/V receive
// buffers are transient).
int rank_seq_length(const model::ModelSpec& model, const Layout& layout) {
  return (layout.seq_length > 0 ? layout.seq_length : model.seq_length) / layout.cp;
}

// What eager PyTorch's autograd saves for backward beyond the fused kernels' tensors (the pytorch trainer;
// measured on one H200 by kind, tests/fixtures/memory-truth-h200, docs/METRICS.md "Activations by kind"):
// rotary embedding's inputs (Q and K before rotation), the attention output's reshaped copy that the output
// projection saves beside the attention kernel's own output (not under selective recompute, where the
// kernel's output is not saved), and SwiGLU's silu(gate) beside the product. Per micro-batch on one tp rank;
// none under full recompute (the layer input alone) or op-level checkpointing (its policy names what is
// kept).
std::vector<model::ActivationTerm> eager_extra_terms(const model::ModelSpec& model, const Layout& layout,
                                                     Recompute recompute) {
  if (layout.trainer != Trainer::kPytorch || recompute == Recompute::kFull || recompute == Recompute::kOp)
    return {};
  const double split_tokens =
      static_cast<double>(rank_seq_length(model, layout)) * layout.micro_batch / layout.tp;
  constexpr double kBf16Bytes = 2.0;
  std::vector<model::ActivationTerm> terms;
  if (model.position_embedding == model::PositionEmbedding::kRope)
    terms.push_back({"RoPE inputs (eager: Q, K before rotation)",
                     split_tokens * kBf16Bytes * (static_cast<double>(model.q_size()) + model.kv_size())});
  if (recompute == Recompute::kNone)
    terms.push_back({"attention output copy (eager: reshaped for the projection)",
                     split_tokens * kBf16Bytes * static_cast<double>(model.q_size())});
  if (model::is_gated(model.activation)) {
    const double copies = model.is_moe() ? model.moe_top_k : 1.0;
    const bool silu = model.activation == model::Activation::kSwiGlu;
    terms.push_back({silu ? "SiLU output (eager: silu(gate) beside the product)"
                          : "GELU output (eager: gelu(gate) beside the product)",
                     split_tokens * kBf16Bytes * copies * static_cast<double>(model.ffn_hidden_size)});
  }
  return terms;
}

// One layer's activation terms under the layout's trainer: the fused kernels'
// (model::layer_activation_terms), then eager PyTorch's extras under the pytorch trainer.
std::vector<model::ActivationTerm> layer_terms(const model::ModelSpec& model, const Layout& layout,
                                               Recompute recompute) {
  std::vector<model::ActivationTerm> terms = model::layer_activation_terms(
      model, rank_seq_length(model, layout), layout.micro_batch, layout.tp, layout.sequence_parallel,
      recompute, is_fused(layout.attention), layout.precision == Precision::kFp8Delayed);
  for (model::ActivationTerm& extra : eager_extra_terms(model, layout, recompute))
    terms.push_back(std::move(extra));
  return terms;
}

// Activation bytes one layer keeps for backward per micro-batch on one rank, under `recompute`.
double layer_activation_bytes(const model::ModelSpec& model, const Layout& layout, Recompute recompute) {
  double bytes = 0;
  for (const model::ActivationTerm& term : layer_terms(model, layout, recompute)) bytes += term.bytes;
  return bytes;
}

// What one micro-batch keeps in one model chunk: its transformer layers' activations and, outside them, the
// embedding's (first virtual stage) and the output's (last virtual stage).
struct ChunkActivations {
  int layers = 0;              // transformer layers of the chunk
  double layer_bytes = 0;      // layers × one layer's activations
  double embedding_bytes = 0;  // the embedding's activations (first virtual stage), else 0
  double output_bytes = 0;     // the output's activations (last virtual stage), else 0
  double bytes() const { return layer_bytes + embedding_bytes + output_bytes; }
};

// Per-micro-batch activations of each model chunk on `stage`.
std::vector<ChunkActivations> chunk_activations(const model::ModelSpec& model, const Layout& layout,
                                                int stage, const std::vector<int>& layers) {
  const int seq_length = rank_seq_length(model, layout);
  const int virtual_count = layout.pp * layout.virtual_stages;
  const double per_layer = layer_activation_bytes(model, layout, layout.recompute);
  std::vector<ChunkActivations> chunks(layout.virtual_stages);
  for (int chunk = 0; chunk < layout.virtual_stages; ++chunk) {
    const int virtual_stage = parallel::virtual_stage(layout, stage, chunk);
    chunks[chunk].layers = layers[virtual_stage];
    chunks[chunk].layer_bytes = layers[virtual_stage] * per_layer;
    if (virtual_stage == 0) {
      chunks[chunk].embedding_bytes = model::embedding_activation_bytes(model, seq_length, layout.micro_batch,
                                                                        layout.tp, layout.sequence_parallel);
    }
    if (virtual_stage == virtual_count - 1) {
      chunks[chunk].output_bytes = model::output_activation_bytes(model, seq_length, layout.micro_batch,
                                                                  layout.tp, layout.sequence_parallel);
    }
  }
  return chunks;
}

struct ActivationPeak {
  double bytes = 0;              // activations alive at the peak
  int layer_microbatches = 0;    // (layer, micro-batch) sets among them
  double embedding_bytes = 0;    // the embedding's among them
  double output_bytes = 0;       // the output's among them
  double temporaries_bytes = 0;  // the loss backward's or a recomputed layer's transient at the peak
  bool temporaries_from_recompute = false;  // the transient is a recomputed layer's
  int microbatches = 0;                     // distinct micro-batches with activations alive at the peak
};

// The transient of the loss's backward on `stage` (an uncompiled cross-entropy's: the pytorch and
// torchtitan-eager-loss trainers', on the stage that holds the last virtual stage) and the chunk it belongs
// to; {0, -1} elsewhere.
std::pair<double, int> loss_transient(const model::ModelSpec& model, const Layout& layout, int stage) {
  const int last_virtual = layout.pp * layout.virtual_stages - 1;
  const bool eager_loss =
      layout.trainer == Trainer::kPytorch || layout.trainer == Trainer::kTorchtitanEagerLoss;
  if (!eager_loss || stage_of_virtual(layout, last_virtual) != stage) return {0.0, -1};
  const double logits =
      static_cast<double>(rank_seq_length(model, layout)) * layout.micro_batch * model.vocab_size / layout.tp;
  return {kLossBackwardBytesPerLogit * logits, chunk_of_virtual(layout, last_virtual)};
}

// What recomputation rebuilds for one layer's backward (per micro-batch): the layer's activations without
// recompute less what the forward kept. Megatron's and PyTorch's checkpointing recompute a whole layer with
// autograd saving its tensors, so they are alive beside the stage's stack while that layer's backward runs
// (Korthikanti et al. 2022, section 4: full recompute needs one layer's activations on top of the inputs).
// Compiled torchtitan's recompute frees as it goes (its measured peaks show no such term): 0 there.
double recompute_transient_bytes(const model::ModelSpec& model, const Layout& layout) {
  if (layout.recompute == Recompute::kNone || is_torchtitan(layout.trainer)) return 0.0;
  return layer_activation_bytes(model, layout, Recompute::kNone) -
         layer_activation_bytes(model, layout, layout.recompute);
}

// Replays the stage's pipeline schedule (parallel/schedule.h: GPipe, 1F1B, Megatron's interleaved 1F1B) and
// returns the peak of activation bytes alive between a chunk's forward pass and its backward pass, with
// `transient` = {bytes, chunk} on top of them at the end of that chunk's forward (the loss), and
// `backward_transient[chunk]` on top of them while that chunk's backward runs (recomputation's layer).
ActivationPeak peak_activations(const Layout& layout, int stage, const std::vector<ChunkActivations>& chunks,
                                std::pair<double, int> transient,
                                const std::vector<double>& backward_transient) {
  ActivationPeak alive;             // what is alive now (temporaries aside)
  std::map<int, int> alive_chunks;  // micro-batch -> chunks whose activations are alive
  ActivationPeak peak;
  const auto add = [&alive](const ChunkActivations& chunk, int sign) {
    alive.bytes += sign * chunk.bytes();
    alive.layer_microbatches += sign * chunk.layers;
    alive.embedding_bytes += sign * chunk.embedding_bytes;
    alive.output_bytes += sign * chunk.output_bytes;
  };
  const auto consider = [&](double temporaries, bool from_recompute) {
    if (alive.bytes + temporaries <= peak.bytes + peak.temporaries_bytes) return;
    peak = alive;
    peak.temporaries_bytes = temporaries;
    peak.temporaries_from_recompute = from_recompute;
    peak.microbatches = static_cast<int>(alive_chunks.size());
  };
  // The pass that ends a micro-batch's activations on its chunk: the schedule's lifetime rule.
  const PassKind frees = activations_freed_by(layout);
  for (const PipelineSlot& slot : stage_schedule(layout, stage)) {
    const ChunkActivations& chunk = chunks.at(slot.chunk);
    if (slot.pass == PassKind::kForward) {
      add(chunk, +1);
      ++alive_chunks[slot.microbatch];
      consider(slot.chunk == transient.second ? transient.first : 0.0, false);
    } else {
      if (slot.pass == PassKind::kBackward) consider(backward_transient.at(slot.chunk), true);
      if (slot.pass != frees) continue;
      add(chunk, -1);
      auto found = alive_chunks.find(slot.microbatch);
      if (found != alive_chunks.end() && --found->second == 0) alive_chunks.erase(found);
    }
  }
  return peak;
}

// activations_bytes of `peak` by kind: each term of one layer × the layer-micro-batches alive, then the
// embedding's and the output's (docs/METRICS.md "Activations by kind").
std::vector<model::ActivationTerm> activations_by_kind(const model::ModelSpec& model, const Layout& layout,
                                                       const ActivationPeak& peak) {
  std::vector<model::ActivationTerm> terms = layer_terms(model, layout, layout.recompute);
  for (model::ActivationTerm& term : terms) term.bytes *= peak.layer_microbatches;
  if (peak.embedding_bytes > 0) terms.push_back({"embedding (dropout mask)", peak.embedding_bytes});
  if (peak.output_bytes > 0)
    terms.push_back({"output (final norm and projection inputs, fp32 cross-entropy)", peak.output_bytes});
  std::erase_if(terms, [](const model::ActivationTerm& term) { return term.bytes <= 0; });
  return terms;
}

// The bytes of the compute copies compiled torchtitan holds at the end of forward: under FSDP2 the gathered
// unit (bf16, its FP8 linears' weights in FP8 under --fp8-all-gather); otherwise the bf16 copies its
// compiled blocks save for backward (every weight but the embedding lookup, measured on one H200:
// docs/benchmarks/memory.md "Memory model against PyTorch"), and under full recompute, whose blocks save
// only their input, the output projection's alone (it runs outside the checkpointed blocks).
double compute_copy_bytes(const Layout& layout, const StageParameters& params) {
  if (layout.zero_stage >= 3) return params.largest_gather_bytes;
  if (layout.recompute == Recompute::kFull) return kWeightBytesPerParam * params.head_matrix;
  return kWeightBytesPerParam * (params.dense + params.expert - params.embedding);
}

// What FSDP2's side streams keep cached beside the compute stream's peak (the caching allocator reuses a
// freed block only on the stream that allocated it, so each stream's pool keeps its own peak): the
// reduce-scatter stream's every fp32 gradient shard (views of its outputs, alive until the next step's
// zero_grad) and the largest unit's fp32 reduce-scatter input, and the all-gather stream's largest gathered
// unit with its input shard. 0 without FSDP2 (docs/METRICS.md "Reserved memory").
double fsdp_stream_pool_bytes(const Layout& layout, const StageParameters& params, double state_params) {
  if (layout.zero_stage < 3) return 0.0;
  const double shard_ranks = layout.hybrid_sharding() ? layout.shard_size() : layout.grad_reduce_size();
  const double reduce_scatter = kFp32BytesPerParam * (state_params + params.largest_unit);
  const double all_gather = params.largest_gather_bytes * (1.0 + 1.0 / shard_ranks);
  return reduce_scatter + all_gather;
}

// torchtitan's accounting (Trainer::kTorchtitan, kTorchtitanEagerLoss) of one stage, whose parameters are
// `params` and whose sharded state is `state_params` (the dense and expert parts over their shard groups
// under FSDP2, all of them otherwise), with `activations` alive at the end of forward. The peak is the larger
// of two moments:
// - the end of forward: fp32 parameters (4 B/param) and Adam moments (8), gradients set to None at the step's
//   start, the bf16 compute copies (bf16_compute_params), DDP's fp32 gradient buckets (4 B/param, kept
//   between steps), the activations and the uncompiled loss's transient (torchtitan-eager-loss);
// - the end of backward: beside parameters and moments, under FSDP2 the fp32 gradient shards (4 B/param) and
//   the largest unit's bf16 gradient with its fp32 copy for the reduce-scatter (torchtitan reduces in fp32);
//   otherwise every fp32 gradient (and DDP's buckets).
// Under FSDP2 with pipeline parallel torchtitan does not reshard after forward (every unit of the stage stays
// gathered through the step) and PyTorch's pipeline schedule defers the reduce-scatter to the last
// micro-batch, accumulating each unsharded gradient in fp32 (the reduce dtype) from the first micro-batch's
// backward: both moments hold them, and the activations' peak is taken beside them.
MemoryBreakdown torchtitan_peak(const Layout& layout, const StageParameters& params, double state_params,
                                const ActivationPeak& activations) {
  const bool fsdp = layout.zero_stage >= 3;
  const bool fsdp_pipeline = fsdp && layout.pp > 1;
  const double all_params = params.dense + params.expert;
  const double ddp_buckets = !fsdp && layout.dp > 1 ? kFp32BytesPerParam * all_params : 0.0;
  const double gathered_stage =
      fsdp_pipeline ? layout.gather_bytes(all_params, params.fp8_dense + params.fp8_expert) : 0.0;
  const double accumulated_gradients = fsdp_pipeline ? kFp32BytesPerParam * all_params : 0.0;
  MemoryBreakdown forward_end;
  forward_end.weights_bytes = kFp32BytesPerParam * state_params +
                              (fsdp_pipeline ? gathered_stage : compute_copy_bytes(layout, params));
  forward_end.gradients_bytes = ddp_buckets + accumulated_gradients;
  forward_end.optimizer_bytes = kMomentBytesPerParam * state_params;
  forward_end.activations_bytes = activations.bytes;
  forward_end.temporaries_bytes = activations.temporaries_bytes;
  forward_end.inflight_microbatches = activations.microbatches;
  MemoryBreakdown backward_end;
  backward_end.at_backward_end = true;
  backward_end.weights_bytes = kFp32BytesPerParam * state_params + gathered_stage;
  // FSDP2: the fp32 gradient shards and the largest unit's bf16 gradient with its fp32 reduce copy; without
  // it every fp32 gradient (and DDP's buckets).
  backward_end.gradients_bytes = fsdp ? kFp32BytesPerParam * state_params + accumulated_gradients +
                                            (kWeightBytesPerParam + kFp32BytesPerParam) * params.largest_unit
                                      : kFp32BytesPerParam * all_params + ddp_buckets;
  backward_end.optimizer_bytes = kMomentBytesPerParam * state_params;
  MemoryBreakdown peak = backward_end.total_bytes() > forward_end.total_bytes() ? backward_end : forward_end;
  peak.reserved_bytes = forward_end.total_bytes() + fsdp_stream_pool_bytes(layout, params, state_params);
  peak.reserved_bytes = std::max(peak.reserved_bytes, peak.total_bytes());
  return peak;
}

// Parameters a rank holds of `params` (sharded: its shard). Dense state is sharded over the dp group, or over
// the shard group of S ranks under hybrid sharding (the dp / S shard groups replicate it); with context
// parallel over dp * cp ranks (cp ranks of a replica hold the same weights), as Megatron-LM's distributed
// optimizer does over its dp-cp group. Expert state over the expert-dp group.
double held_params(const Layout& layout, const StageParameters& params, bool sharded) {
  if (!sharded) return params.dense + params.expert;
  const double dense_shards = layout.hybrid_sharding() ? layout.shard_size() : layout.grad_reduce_size();
  const double expert_shards = layout.expert_dp_size();
  return params.dense / dense_shards + params.expert / expert_shards;
}

// What the default and pytorch trainers keep between steps: bf16 weights, gradients and the optimizer state,
// each sharded by the ZeRO stage (no gathered unit, no gradient awaiting its reduce-scatter).
struct HeldState {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
};

HeldState held_state(const Layout& layout, const StageParameters& params) {
  HeldState state;
  state.weights_bytes = kWeightBytesPerParam * held_params(layout, params, layout.zero_stage >= 3);
  state.gradients_bytes =
      gradient_bytes_per_param(layout.trainer) * held_params(layout, params, layout.zero_stage >= 2);
  state.optimizer_bytes = kOptimizerBytesPerParam * held_params(layout, params, layout.zero_stage >= 1);
  return state;
}

// recompute_transient_bytes for each model chunk of `stage` that has layers.
std::vector<double> chunk_recompute_bytes(const model::ModelSpec& model, const Layout& layout, int stage,
                                          const std::vector<int>& layers) {
  const double per_layer = recompute_transient_bytes(model, layout);
  std::vector<double> bytes(layout.virtual_stages, 0.0);
  for (int chunk = 0; chunk < layout.virtual_stages; ++chunk)
    bytes[chunk] = layers[virtual_stage(layout, stage, chunk)] > 0 ? per_layer : 0.0;
  return bytes;
}

// Transformer Engine's delayed scaling (fp8-delayed) keeps, for the step, each FP8 linear's e4m3 weight and
// its transpose (1 byte a parameter each: Hopper's FP8 GEMMs take only the TN layout, so dgrad needs W^T in
// FP8), cast once on the first micro-batch; under FSDP (--zero 3) it recasts from each gathered unit instead
// and keeps none. Each FP8 linear also keeps an fp32 amax history of kAmaxHistoryLength entries for its five
// scaled tensors (input, weight, output forward; output gradient, input gradient backward). The torchao
// recipes cast the weights afresh in forward and again in backward: nothing kept.
double fp8_weight_copy_bytes(const Layout& layout, const StageParameters& params) {
  if (layout.precision != Precision::kFp8Delayed) return 0.0;
  const double copies = layout.zero_stage >= 3 ? 0.0 : 2.0 * (params.fp8_dense + params.fp8_expert);
  return copies + kAmaxHistoryBytesPerLinear * params.fp8_linears;
}

void require_resolved(const Layout& layout, int stage) {
  require_input(stage >= 0 && stage < layout.pp,
                "stage " + std::to_string(stage) + " is outside 0.." + std::to_string(layout.pp - 1));
  require_input(layout.tp >= 1 && layout.cp >= 1 && layout.pp >= 1 && layout.dp >= 1 && layout.ep >= 1 &&
                    layout.virtual_stages >= 1 && layout.ep_divides_replicas(),
                "memory needs a resolved layout (sizes >= 1, ep divides dp x cp); got " + describe(layout));
  require_input(layout.global_batch > 0,
                "memory needs a resolved layout (global batch set); got " + describe(layout));
}

}  // namespace

MemoryBreakdown memory_for_stage(const model::ModelSpec& model, const Layout& layout, int stage) {
  require_resolved(layout, stage);
  const std::vector<int> layers = virtual_stage_layers(layout, model.num_layers);
  const StageParameters params = stage_parameters(model, layout, stage, layers);
  const bool shard_weights = layout.zero_stage >= 3;
  const bool shard_gradients = layout.zero_stage >= 2;

  const ActivationPeak peak = peak_activations(layout, stage, chunk_activations(model, layout, stage, layers),
                                               loss_transient(model, layout, stage),
                                               chunk_recompute_bytes(model, layout, stage, layers));
  MemoryBreakdown memory;
  if (is_torchtitan(layout.trainer))
    memory = torchtitan_peak(layout, params, held_params(layout, params, shard_weights), peak);
  memory.stage = stage;
  memory.trainer = layout.trainer;
  if (!memory.at_backward_end) {  // at the end of backward no activation is alive
    memory.layer_microbatches = peak.layer_microbatches;
    memory.activations_by_kind = activations_by_kind(model, layout, peak);
  }
  memory.fp8_weights_bytes = fp8_weight_copy_bytes(layout, params);
  if (is_torchtitan(layout.trainer)) return memory;

  const HeldState state = held_state(layout, params);
  memory.weights_bytes = state.weights_bytes;
  if (shard_weights) {
    // FSDP gathers one unit's parameters before use (two with prefetch when the gather overlaps); without
    // resharding after forward every gathered unit of the stage stays until its backward, so the peak holds
    // them all.
    const double gathered_layers = layout.overlap_param_gather ? 2.0 : 1.0;
    memory.weights_bytes += layout.reshard_after_forward
                                ? gathered_layers * params.largest_gather_bytes
                                : layout.gather_bytes(params.dense + params.expert, params.fp8_dense);
  }
  memory.gradients_bytes = state.gradients_bytes;
  if (shard_gradients) {
    // ZeRO-2/3 keep only their gradient shard; a unit's full gradient lives from its backward until its
    // reduce-scatter (two units when the reduce-scatter overlaps the next unit's backward).
    const double buckets = layout.overlap_grad_reduce ? 2.0 : 1.0;
    memory.gradients_bytes += gradient_bytes_per_param(layout.trainer) * buckets * params.largest_unit;
  }
  memory.optimizer_bytes = state.optimizer_bytes;
  memory.activations_bytes = peak.bytes;
  memory.temporaries_bytes = peak.temporaries_bytes;
  memory.temporaries_from_recompute = peak.temporaries_from_recompute;
  memory.inflight_microbatches = peak.microbatches;
  return memory;
}

StageHoldings holdings_for_stage(const model::ModelSpec& model, const Layout& layout, int stage) {
  require_resolved(layout, stage);
  require_input(!is_torchtitan(layout.trainer),
                "--memory real replays the default and pytorch trainers' allocations; the torchtitan "
                "trainer's are measured by bench/torchtitan (give --trainer default or pytorch)");
  const std::vector<int> layers = virtual_stage_layers(layout, model.num_layers);
  const StageParameters params = stage_parameters(model, layout, stage, layers);
  const HeldState state = held_state(layout, params);
  StageHoldings holdings;
  holdings.state_bytes = state.weights_bytes + state.gradients_bytes + state.optimizer_bytes +
                         fp8_weight_copy_bytes(layout, params);
  for (const ChunkActivations& chunk : chunk_activations(model, layout, stage, layers))
    holdings.chunk_edge_activation_bytes.push_back(chunk.embedding_bytes + chunk.output_bytes);
  holdings.layer_activation_bytes = layer_activation_bytes(model, layout, layout.recompute);
  holdings.recompute_transient_bytes = recompute_transient_bytes(model, layout);
  holdings.loss_transient_bytes = loss_transient(model, layout, stage).first;
  holdings.gradient_bytes_per_param = gradient_bytes_per_param(layout.trainer);
  return holdings;
}

double usable_memory_bytes(double device_bytes) {
  return std::max(0.0, device_bytes * (1.0 - kFragmentationFraction) - kRuntimeReserveBytes);
}

bool is_tight(double total_bytes, double device_bytes) {
  return total_bytes > usable_memory_bytes(device_bytes) && total_bytes <= device_bytes;
}

std::string card_headroom_text(double total_bytes, double device_bytes) {
  return fmt::format("the card itself would leave {} for the CUDA context, NCCL and the allocator",
                     core::format_bytes(device_bytes - total_bytes));
}

MemoryBreakdown memory_per_gpu(const model::ModelSpec& model, const Layout& layout) {
  MemoryBreakdown most_loaded = memory_for_stage(model, layout, 0);
  for (int stage = 1; stage < layout.pp; ++stage) {
    MemoryBreakdown candidate = memory_for_stage(model, layout, stage);
    if (candidate.total_bytes() > most_loaded.total_bytes()) most_loaded = candidate;
  }
  return most_loaded;
}

std::string temporaries_label(const MemoryBreakdown& memory) {
  return memory.temporaries_from_recompute ? "recomputed layer" : "loss backward";
}

std::string describe_terms(const MemoryBreakdown& memory) {
  std::string text =
      fmt::format("weights {}, gradients {}, optimizer {}, activations {}",
                  core::format_bytes(memory.weights_bytes), core::format_bytes(memory.gradients_bytes),
                  core::format_bytes(memory.optimizer_bytes), core::format_bytes(memory.activations_bytes));
  if (memory.fp8_weights_bytes > 0)
    text += ", FP8 weight copies " + core::format_bytes(memory.fp8_weights_bytes);
  if (memory.temporaries_bytes > 0)
    text += ", " + temporaries_label(memory) + " " + core::format_bytes(memory.temporaries_bytes);
  if (memory.at_backward_end) text += ", at the end of backward";
  return text;
}

namespace {

/// The members written as they are; to_json adds the derived and named ones.
CALO_JSON_WRITER(write_plain_fields, MemoryBreakdown, weights_bytes, gradients_bytes, optimizer_bytes,
                 activations_bytes, temporaries_bytes, stage, inflight_microbatches, layer_microbatches)

}  // namespace

nlohmann::json to_json(const MemoryBreakdown& memory) {
  nlohmann::json json;
  write_plain_fields(json, memory);
  // Written only under fp8-delayed, so bf16 and torchao layouts print as they did before the term existed.
  if (memory.fp8_weights_bytes > 0) json["fp8_weights_bytes"] = memory.fp8_weights_bytes;
  if (memory.reserved_bytes > 0) json["reserved_bytes"] = memory.reserved_bytes;
  json.update({{"total_bytes", memory.total_bytes()},
               {"trainer", to_string(memory.trainer)},
               {"peak_at", memory.at_backward_end ? "backward_end" : "forward_end"}});
  nlohmann::json kinds = nlohmann::json::array();
  for (const model::ActivationTerm& term : memory.activations_by_kind)
    kinds.push_back({{"kind", term.kind}, {"bytes", term.bytes}});
  json["activations_by_kind"] = std::move(kinds);
  return json;
}

nlohmann::json to_json(const MemoryBreakdown& memory, double device_bytes) {
  const double usable_bytes = usable_memory_bytes(device_bytes);
  nlohmann::json json = to_json(memory);
  json["usable_bytes"] = usable_bytes;
  json["device_bytes"] = device_bytes;
  json["fragmentation_bytes"] = device_bytes * kFragmentationFraction;  // what the usable rule keeps back
  json["runtime_reserve_bytes"] = kRuntimeReserveBytes;
  json["fits"] = memory.total_bytes() <= usable_bytes;
  return json;
}

}  // namespace calo::parallel
