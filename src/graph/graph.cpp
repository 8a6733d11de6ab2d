#include "graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <span>
#include <utility>

#include "core/error.h"
#include "model/accounting.h"
#include "parallel/rank_map.h"
#include "parallel/schedule.h"

namespace calo::graph {

namespace {

/// The graph's group kinds that are RankMap groups (every kind but the tied-embedding group); their names are
/// parallel::to_string's.

/// Bytes per bf16 element.
constexpr double kBf16Bytes = 2.0;
/// Bytes per fp32 element.
constexpr double kFp32Bytes = 4.0;
/// AdamW bytes moved per parameter: read fp32 grad, master, m, v (16); write master, m, v (12), bf16 param
/// (2).
constexpr double kAdamBytesPerParam = 30.0;
/// AdamW FLOPs per parameter (moments, bias correction, sqrt, division, decay, update).
constexpr double kAdamFlopsPerParam = 12.0;
/// Unfused softmax FLOPs per score: scale, mask, max, subtract, exp, sum, divide.
constexpr double kSoftmaxFlopsPerScore = 7.0;
/// Softmax backward FLOPs per score: dS = P (dP - rowsum(dP o P)).
constexpr double kSoftmaxBackwardFlopsPerScore = 4.0;

/// Shapes of one micro-batch on one rank.
struct Dims {
  std::int64_t batch = 0;         // sequences per micro-batch
  std::int64_t seq = 0;           // tokens per sequence on this rank (seq_length / cp)
  std::int64_t tokens = 0;        // T = batch * seq (tokens inside the tensor-parallel region)
  std::int64_t cp = 1;            // context-parallel size
  std::int64_t tokens_local = 0;  // T / tp under sequence parallel, else T
  std::int64_t hidden = 0;
  std::int64_t q_size = 0;
  std::int64_t kv_size = 0;
  std::int64_t ffn = 0;
  std::int64_t fc1_out = 0;  // ffn (GELU) or 2 ffn (SwiGLU)
  std::int64_t vocab = 0;
  std::int64_t tp = 1;
  bool sp = false;
};

/// Parameter counts of the units a stage holds, per rank (bf16 gradient/param collectives use these).
struct UnitParams {
  double dense = 0;   // reduced over the dp group
  double expert = 0;  // reduced over the expert-dp group
};

/// Identifies a parameter unit: a layer (>= 0), the embedding (-1) or the output head (-2).
constexpr int kEmbeddingUnit = -1;
constexpr int kOutputUnit = -2;

class ProgramBuilder {
 public:
  ProgramBuilder(const model::ModelSpec& model, const parallel::Layout& layout, const GraphOptions& options,
                 int stage, int ep_index, RankProgram& program)
      : model_(model),
        layout_(layout),
        options_(options),
        stage_(stage),
        ep_index_(ep_index),
        program_(program) {
    counts_ = model::count_parameters(model);
    dims_.batch = layout.micro_batch;
    dims_.cp = layout.cp;
    dims_.seq = layout.seq_length / layout.cp;
    dims_.tokens = dims_.batch * dims_.seq;
    dims_.tp = layout.tp;
    dims_.sp = layout.sequence_parallel && layout.tp > 1;
    dims_.tokens_local = dims_.sp ? dims_.tokens / dims_.tp : dims_.tokens;
    dims_.hidden = model.hidden_size;
    dims_.q_size = model.q_size();
    dims_.kv_size = model.kv_size();
    dims_.ffn = model.ffn_hidden_size;
    dims_.fc1_out = model.activation == model::Activation::kSwiGlu ? 2 * dims_.ffn : dims_.ffn;
    dims_.vocab = model.vocab_size;
    partition_ = parallel::layer_partition(layout, model.num_layers);
    num_virtual_ = layout.pp * layout.virtual_stages;
    // Parameters are replicated over the cp ranks of a replica: gradients are reduced (and ZeRO shards
    // spread) over the dp*cp ranks, Megatron-LM's data-parallel group with context parallel.
    dp_group_ = layout.cp > 1 ? GroupKind::kDpCp : GroupKind::kDp;
    dp_reduce_ = layout.grad_reduce_size() > 1;
    edp_reduce_ = layout.dp / layout.ep > 1;
    hybrid_ = layout.hybrid_sharding();
    chunk_gathered_.assign(layout.virtual_stages, false);
    expert_tokens_ = expert_token_counts();
  }

  void build() {
    const auto schedule = parallel::stage_schedule(layout_, stage_);
    const ChunkSlots chunk_slots = chunk_slots_of(schedule);
    // ZeRO-1/2 gather the updated parameters after the optimizer step (FSDP gathers per unit before use).
    const bool gather_after_step = layout_.zero_stage == 1 || layout_.zero_stage == 2;
    if (gather_after_step && layout_.overlap_param_gather) emit_overlapped_param_gathers();
    run_schedule(schedule, chunk_slots);
    emit_step_grad_reductions();
    const int optimizer_index = emit_optimizer_step();
    // ZeRO-1/2 without overlap: gather the updated parameters right after the step.
    if (gather_after_step && !layout_.overlap_param_gather) {
      for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
        for (int unit : forward_units(chunk))
          emit_param_collectives(CollectiveKind::kAllGather, chunk, unit, -1, Phase::kOptimizer,
                                 {optimizer_index});
    }
  }

 private:
  // ---- build() steps
  // --------------------------------------------------------------------------------------------

  /// Per chunk, the slot of its first forward and of its last backward (-1: none).
  struct ChunkSlots {
    std::vector<int> first_forward;
    std::vector<int> last_backward;  ///< gradients of the chunk are final after this slot
  };

  /// The first-forward and last-backward slot of each chunk in `schedule`.
  ChunkSlots chunk_slots_of(const std::vector<parallel::PipelineSlot>& schedule) const {
    ChunkSlots chunk_slots;
    chunk_slots.last_backward.assign(layout_.virtual_stages, -1);
    chunk_slots.first_forward.assign(layout_.virtual_stages, -1);
    for (int slot_index = 0; slot_index < static_cast<int>(schedule.size()); ++slot_index) {
      const auto& slot = schedule[slot_index];
      if (slot.pass == parallel::PassKind::kBackward) chunk_slots.last_backward[slot.chunk] = slot_index;
      if (slot.pass == parallel::PassKind::kForward && chunk_slots.first_forward[slot.chunk] < 0)
        chunk_slots.first_forward[slot.chunk] = slot_index;
    }
    return chunk_slots;
  }

  /// ZeRO-1 overlapped parameter gather: the previous step's all-gathers run at the start of this one.
  void emit_overlapped_param_gathers() {
    for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
      for (int unit : forward_units(chunk))
        param_gather_op_[{chunk, unit}] =
            emit_param_collectives(CollectiveKind::kAllGather, chunk, unit, -1, Phase::kForward, {});
  }

  /// Steps between pipeline exchanges, each [first slot, end slot): one slot, or under the interleaved
  /// schedule a forward followed by a backward (Megatron-LM's steady state exchanges once per
  /// forward/backward pair).
  std::vector<std::pair<int, int>> exchange_steps(const std::vector<parallel::PipelineSlot>& schedule) const {
    // Only steady-state forwards pair with a backward: when m == pp every forward is a warm-up one, and
    // pairing the last with the first backward made its input wait on a gradient that needs its own output
    // (deadlock).
    std::vector<std::pair<int, int>> steps;  // [first slot, end slot)
    const int slots = static_cast<int>(schedule.size());
    const int warmup = parallel::warmup_slots(layout_, stage_);
    for (int slot_index = 0; slot_index < slots;) {
      const bool pair = layout_.schedule == parallel::Schedule::kInterleaved && slot_index >= warmup &&
                        slot_index + 1 < slots && schedule[slot_index].pass == parallel::PassKind::kForward &&
                        schedule[slot_index + 1].pass == parallel::PassKind::kBackward;
      const int end = slot_index + (pair ? 2 : 1);
      steps.emplace_back(slot_index, end);
      slot_index = end;
    }
    return steps;
  }

  /// Emits the forward and backward passes of `schedule`, step by step, with the pipeline exchanges between.
  void run_schedule(const std::vector<parallel::PipelineSlot>& schedule, const ChunkSlots& chunk_slots) {
    const std::vector<std::pair<int, int>> steps = exchange_steps(schedule);
    auto slots_of = [&](std::size_t step) {
      std::vector<parallel::PipelineSlot> result;
      if (step < steps.size())
        for (int slot_index = steps[step].first; slot_index < steps[step].second; ++slot_index)
          result.push_back(schedule[slot_index]);
      return result;
    };
    emit_exchange({}, slots_of(0));
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
      emit_exchange(slots_of(step), slots_of(step + 1));
    }
  }

  /// The gradient collectives after the last backward: every bucket's reduction when not overlapped with
  /// backward, and the tied embedding's all-reduce.
  void emit_step_grad_reductions() {
    // Gradient reduction when not overlapped with backward: all buckets after the last backward (ZeRO-2/3
    // reduce every micro-batch's gradients in its backward instead).
    if (layout_.zero_stage < 2 && !layout_.overlap_grad_reduce) {
      for (const auto& [chunk, unit] : grad_units_in_order_) {
        auto ids = emit_param_collectives(
            layout_.zero_stage == 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce, chunk,
            unit, -1, Phase::kBackward, {last_compute_});
        grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
      }
    }
    // Tied input/output embedding split over the first and last stage: all-reduce its gradient.
    if (model_.tied_embeddings && layout_.pp > 1 && (holds_unit(kEmbeddingUnit) || holds_unit(kOutputUnit))) {
      Op op =
          collective_op(CollectiveKind::kAllReduce, GroupKind::kEmbedding,
                        (counts_.embedding - counts_.positions) / static_cast<double>(dims_.tp) * kBf16Bytes,
                        Stream::kDpComm, Phase::kBackward);
      op.parameters = (counts_.embedding - counts_.positions) / static_cast<double>(dims_.tp);
      grad_ops_.push_back(add(op, {last_compute_}));
    }
  }

  /// Parameters this rank's optimizer step updates (its shard under ZeRO >= 1).
  double optimizer_params() const {
    UnitParams total;
    for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk)
      for (int unit : forward_units(chunk)) {
        UnitParams params = unit_params(unit);
        total.dense += params.dense;
        total.expert += params.expert;
      }
    double shard = total.dense + total.expert;
    if (layout_.zero_stage >= 1) {
      // Dense state is sharded over the shard group under hybrid sharding, else over dp * cp ranks.
      const double dense_shards =
          layout_.hybrid_sharding() ? layout_.shard_size() : layout_.grad_reduce_size();
      shard = total.dense / dense_shards + total.expert / (layout_.dp / layout_.ep);
    }
    return shard;
  }

  /// Optimizer step over this rank's (sharded) parameters, after every wait and gradient op; returns its
  /// index (also the new last compute op).
  int emit_optimizer_step() {
    const double shard = optimizer_params();
    Op optimizer;
    optimizer.kind = OpKind::kOptimizer;
    optimizer.phase = Phase::kOptimizer;
    optimizer.parameters = shard;
    optimizer.bytes = shard * kAdamBytesPerParam;
    optimizer.flops = shard * kAdamFlopsPerParam;
    std::vector<std::int32_t> deps = std::move(waits_);
    waits_.clear();
    deps.insert(deps.end(), grad_ops_.begin(), grad_ops_.end());
    deps.push_back(last_compute_);
    const int optimizer_index = add(optimizer, deps);
    last_compute_ = optimizer_index;
    return optimizer_index;
  }
  // ---- bookkeeping
  // --------------------------------------------------------------------------------------------

  int add(Op op, std::initializer_list<std::int32_t> deps) {
    return add(op, std::span<const std::int32_t>(deps.begin(), deps.size()));
  }

  /// Appends `op` waiting on `deps` (negative entries: no dependency); returns its index.
  int add(Op op, std::span<const std::int32_t> deps) {
    op.dep_begin = static_cast<std::uint32_t>(program_.deps.size());
    for (std::int32_t dep : deps)
      if (dep >= 0) program_.deps.push_back(dep);
    op.dep_count = static_cast<std::uint32_t>(program_.deps.size() - op.dep_begin);
    op.layer = current_layer_;
    op.microbatch = op.phase == Phase::kOptimizer ? -1 : current_microbatch_;
    op.chunk = static_cast<std::int16_t>(current_chunk_);
    program_.ops.push_back(op);
    return static_cast<int>(program_.ops.size() - 1);
  }

  /// Adds a compute-stream op that waits for the previous compute op and every pending blocking comm.
  int compute(Op op) {
    op.stream = Stream::kCompute;
    op.phase = phase_;
    // waits_ keeps its capacity from op to op: no allocation per compute op.
    waits_.push_back(last_compute_);
    last_compute_ = add(op, waits_);
    waits_.clear();
    return last_compute_;
  }

  static Op collective_op(CollectiveKind kind, GroupKind group, double bytes, Stream stream, Phase phase) {
    Op op;
    op.kind = OpKind::kCollective;
    op.collective = kind;
    op.group = group;
    op.bytes = bytes;
    op.stream = stream;
    op.phase = phase;
    return op;
  }

  /// A communication op the next compute op must wait for.
  /// `after`: an earlier comm op on another stream whose result this one sends (-1 for none).
  int blocking(Op op, int after = -1) {
    op.phase = phase_;
    const int index = add(op, {last_compute_, after});
    waits_.push_back(index);
    return index;
  }

  // ---- op constructors
  // ----------------------------------------------------------------------------------------

  int gemm(GemmWeight weight, GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k, int expert = -1,
           std::int64_t batch = 1) {
    Op op;
    op.kind = OpKind::kGemm;
    op.gemm = GemmShape{m, n, k, DType::kBf16, weight, pass, expert, batch};
    const auto products = static_cast<double>(batch);
    op.flops = products * 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    op.bytes = products * kBf16Bytes * static_cast<double>(m * k + k * n + m * n);
    return compute(op);
  }

  int elementwise(ElementwiseKind kind, double bytes, double flops) {
    Op op;
    op.kind = OpKind::kElementwise;
    op.elementwise = kind;
    op.bytes = bytes;
    op.flops = flops;
    return compute(op);
  }

  /// Unfused attention (Megatron-LM's CoreAttention with FusedScaleMaskSoftmax): full s x s products per
  /// (sequence, head) — the causal mask is applied in the softmax, so nothing is skipped — K and V expanded
  /// to every query head, and the softmax output kept for backward (the s^2 activations).
  void unfused_attention(bool backward) {
    const std::int64_t s = dims_.seq;
    const std::int64_t d = model_.head_dim;
    const std::int64_t products = dims_.batch * (model_.num_attention_heads / dims_.tp);
    const double scores = static_cast<double>(products) * static_cast<double>(s) * static_cast<double>(s);
    const bool dropout = model_.dropout > 0.0;
    // The softmax carries the attention shape so executors know its rows (s keys per query position).
    AttentionShape shape;
    shape.batch = static_cast<std::int32_t>(dims_.batch);
    shape.heads = static_cast<std::int32_t>(products / dims_.batch);
    shape.kv_heads = shape.heads;  // expanded to every query head
    shape.seq = static_cast<std::int32_t>(s);
    shape.head_dim = static_cast<std::int32_t>(d);
    shape.causal = true;
    shape.backward = backward;
    if (!backward) {
      gemm(GemmWeight::kAttnScore, GemmPass::kForward, s, s, d, -1, products);
      // Read S, write P (bf16); with dropout also the mask (1 byte) and the dropped-out P.
      const int softmax = elementwise(ElementwiseKind::kSoftmax,
                                      scores * (2.0 * kBf16Bytes + (dropout ? 1.0 + kBf16Bytes : 0.0)),
                                      kSoftmaxFlopsPerScore * scores);
      program_.ops[softmax].attention = shape;
      gemm(GemmWeight::kAttnContext, GemmPass::kForward, s, d, s, -1, products);
      return;
    }
    gemm(GemmWeight::kAttnContext, GemmPass::kDgrad, s, s, d, -1, products);
    gemm(GemmWeight::kAttnContext, GemmPass::kWgrad, s, d, s, -1, products);
    // Read P and dP, write dS (bf16); with dropout also read the mask.
    const int softmax =
        elementwise(ElementwiseKind::kSoftmax, scores * (3.0 * kBf16Bytes + (dropout ? 1.0 : 0.0)),
                    kSoftmaxBackwardFlopsPerScore * scores);
    program_.ops[softmax].attention = shape;
    gemm(GemmWeight::kAttnScore, GemmPass::kDgrad, s, d, s, -1, products);
    gemm(GemmWeight::kAttnScore, GemmPass::kWgrad, s, d, s, -1, products);
  }

  /// One attention-core op: `queries` rows against `keys` rows; the causal mask is bottom-right aligned when
  /// there are more keys than queries. cp_step / cp_gathered mark context-parallel ops (AttentionShape).
  int attention_op(bool backward, std::int64_t queries, std::int64_t keys, bool causal, int cp_step,
                   int cp_gathered = 0) {
    Op op;
    op.kind = OpKind::kAttention;
    AttentionShape& shape = op.attention;
    shape.batch = static_cast<std::int32_t>(dims_.batch);
    shape.heads = static_cast<std::int32_t>(model_.num_attention_heads / dims_.tp);
    shape.kv_heads = static_cast<std::int32_t>(std::max<std::int64_t>(1, model_.num_kv_heads / dims_.tp));
    shape.seq = static_cast<std::int32_t>(queries);
    shape.kv_seq = cp_step >= 0 || cp_gathered > 0 ? static_cast<std::int32_t>(keys) : 0;
    shape.cp_gathered = static_cast<std::int8_t>(cp_gathered);
    shape.head_dim = model_.head_dim;
    shape.causal = causal;
    shape.backward = backward;
    shape.cp_step = cp_step;
    AttentionShape counted = shape;  // the FLOPs of these rows (kv_seq is 0 outside cp)
    counted.kv_seq = static_cast<std::int32_t>(keys);
    op.flops = attention_flops(counted);
    op.bytes = attention_bytes(counted);
    return compute(op);
  }

  /// The attention core as the layout runs it: batched GEMM + softmax + batched GEMM (unfused; validation
  /// keeps it to cp = 1), the context-parallel all-gather or ring, or one fused op.
  int attention(bool backward) {
    if (layout_.attention == parallel::AttentionImpl::kUnfused) {
      unfused_attention(backward);
      return last_compute_;
    }
    if (dims_.cp > 1 && layout_.cp_comm == parallel::CpComm::kAllGather) return gathered_attention(backward);
    if (dims_.cp > 1) return ring_attention(backward);
    return attention_op(backward, dims_.seq, dims_.seq, true, -1);
  }

  /// All-gather context parallel (TransformerEngine's AttnFuncWithCPAndKVAllGather, Megatron-LM
  /// --cp-comm-type all_gather): gather every rank's K/V over the cp group (again in backward: only the
  /// local K/V is kept), run the early query chunk i against keys of chunks 0..i and the late chunk 2cp-1-i
  /// against chunks 0..2cp-1-i (bottom-right causal; 2cp c^2 pairs per rank, as the ring), and in backward
  /// reduce-scatter the gathered dK/dV back to their owners. The collectives block the attention they feed.
  int gathered_attention(bool backward) {
    const std::int64_t chunk = dims_.seq / 2;
    const double gathered = static_cast<double>(dims_.cp) * kv_bytes();
    blocking(collective_op(CollectiveKind::kAllGather, GroupKind::kCp, gathered, Stream::kCpComm, phase_));
    // cp index 0's key ranges: the early chunk sees 1 chunk, the late one all 2cp.
    attention_op(backward, chunk, chunk, true, -1, 1);
    const int last = attention_op(backward, chunk, 2 * chunk * dims_.cp, true, -1, 2);
    if (backward)
      blocking(
          collective_op(CollectiveKind::kReduceScatter, GroupKind::kCp, gathered, Stream::kCpComm, phase_));
    return last;
  }

  /// Bytes of this rank's K and V for one micro-batch (bf16, heads split over tp, the rank's seq/cp tokens).
  double kv_bytes() const {
    return 2.0 * kBf16Bytes * static_cast<double>(dims_.tokens) *
           static_cast<double>(dims_.kv_size / dims_.tp);
  }

  /// One ring exchange on the cp stream: send to the next ring neighbour, receive from the previous one
  /// (forward: cp index +1 / -1; backward runs the ring the other way, as TransformerEngine does). The send
  /// waits for `after_compute` (what it carries was produced by then). Returns the receive's index.
  int ring_exchange(double bytes, bool backward, int after_compute) {
    const int tag = cp_tag_++;
    Op send;
    send.kind = OpKind::kSend;
    send.stream = Stream::kCpComm;
    send.phase = phase_;
    send.group = GroupKind::kCp;
    send.peer_offset = backward ? -1 : 1;
    send.bytes = bytes;
    send.tag = tag;
    send.p2p_batch = p2p_batch_;
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.peer_offset = -send.peer_offset;
    add(send, {after_compute});
    const int received = add(recv, {});
    ++p2p_batch_;
    return received;
  }

  /// Context-parallel attention as Megatron-LM / TransformerEngine run it (p2p ring, causal load balance):
  /// the sequence is cut into 2cp chunks of c tokens and rank i holds chunks i and 2cp-1-i. Step 0 is the
  /// local causal block (2c x 2c, causal); each later step attends to the K/V of another rank: c queries x
  /// 2c keys or 2c queries x c keys, 2c^2 pairs either way, so every step costs the same. While a step
  /// computes, the K/V of the next step travels over the cp group (forward: cp-1 exchanges of K,V; backward:
  /// cp exchanges carrying K,V (all but the last) and the accumulated dK,dV (all but the first)).
  int ring_attention(bool backward) {
    const std::int64_t chunk = dims_.seq / 2;  // c = seq_length / (2 cp) tokens
    const int steps = static_cast<int>(dims_.cp);
    int last = -1;
    int received = -1;
    for (int step = 0; step < steps; ++step) {
      double bytes = 0;
      if (!backward) {
        if (step + 1 < steps) bytes = kv_bytes();
      } else {
        bytes = (step + 1 < steps ? kv_bytes() : 0.0) + (step > 0 ? kv_bytes() : 0.0);
      }
      // This step's K/V came with the previous exchange.
      if (received >= 0) waits_.push_back(received);
      received = bytes > 0 ? ring_exchange(bytes, backward, last_compute_) : -1;
      if (step == 0) {
        last = attention_op(backward, 2 * chunk, 2 * chunk, true, 0);
      } else {
        last = attention_op(backward, chunk, 2 * chunk, false, step);
      }
    }
    // Backward: the last exchange brings this rank's own dK, dV home; what follows needs it.
    if (received >= 0) waits_.push_back(received);
    return last;
  }

  // ---- tensor-parallel linears (Megatron-LM ColumnParallelLinear / RowParallelLinear)
  // ----------------------

  double activation_bytes() const { return kBf16Bytes * static_cast<double>(dims_.tokens * dims_.hidden); }

  /// Forward of a column-parallel linear: all-gather the sequence-parallel input first.
  void column_forward(GemmWeight weight, std::int64_t out_per_rank) {
    if (dims_.sp)
      blocking(collective_op(CollectiveKind::kAllGather, GroupKind::kTp, activation_bytes(), Stream::kTpComm,
                             phase_));
    gemm(weight, GemmPass::kForward, dims_.tokens, out_per_rank, dims_.hidden);
  }

  /// Forward of a row-parallel linear: reduce-scatter (sequence parallel) or all-reduce the output.
  void row_forward(GemmWeight weight, std::int64_t in_per_rank) {
    gemm(weight, GemmPass::kForward, dims_.tokens, dims_.hidden, in_per_rank);
    if (dims_.tp > 1)
      blocking(collective_op(dims_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                             GroupKind::kTp, activation_bytes(), Stream::kTpComm, phase_));
  }

  /// Backward of a row-parallel linear: all-gather the sequence-parallel output gradient, then dgrad and
  /// wgrad.
  void row_backward(GemmWeight weight, std::int64_t in_per_rank) {
    if (dims_.sp)
      blocking(collective_op(CollectiveKind::kAllGather, GroupKind::kTp, activation_bytes(), Stream::kTpComm,
                             phase_));
    gemm(weight, GemmPass::kDgrad, dims_.tokens, in_per_rank, dims_.hidden);
    gemm(weight, GemmPass::kWgrad, in_per_rank, dims_.hidden, dims_.tokens);
  }

  /// Backward of a column-parallel linear. Sequence parallel re-gathers the input for wgrad; the input
  /// gradient is reduce-scattered (SP) or all-reduced. With TP overlap the gather runs beside dgrad and the
  /// reduction beside wgrad (Megatron-LM's asynchronous backward communication); without, each blocks.
  void column_backward(GemmWeight weight, std::int64_t out_per_rank) {
    const bool overlap = layout_.overlap_tp_comm;
    const CollectiveKind reduce = dims_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
    if (!overlap) {
      if (dims_.sp)
        blocking(collective_op(CollectiveKind::kAllGather, GroupKind::kTp, activation_bytes(),
                               Stream::kTpComm, phase_));
      gemm(weight, GemmPass::kDgrad, dims_.tokens, dims_.hidden, out_per_rank);
      gemm(weight, GemmPass::kWgrad, dims_.hidden, out_per_rank, dims_.tokens);
      if (dims_.tp > 1)
        blocking(collective_op(reduce, GroupKind::kTp, activation_bytes(), Stream::kTpComm, phase_));
      return;
    }
    int gather = -1;
    if (dims_.sp) {
      Op op = collective_op(CollectiveKind::kAllGather, GroupKind::kTp, activation_bytes(), Stream::kTpComm,
                            phase_);
      gather = add(op, {last_compute_});
    }
    const int dgrad = gemm(weight, GemmPass::kDgrad, dims_.tokens, dims_.hidden, out_per_rank);
    int reduction = -1;
    if (dims_.tp > 1)
      reduction =
          add(collective_op(reduce, GroupKind::kTp, activation_bytes(), Stream::kTpComm, phase_), {dgrad});
    if (gather >= 0) waits_.push_back(gather);
    gemm(weight, GemmPass::kWgrad, dims_.hidden, out_per_rank, dims_.tokens);
    if (reduction >= 0) waits_.push_back(reduction);
  }

  // ---- elementwise helpers
  // ------------------------------------------------------------------------------------

  double local_activation_elements() const { return static_cast<double>(dims_.tokens_local * dims_.hidden); }

  void norm(bool backward) {
    const double elements = local_activation_elements();
    const double per_element = model_.norm == model::NormKind::kLayerNorm ? 5.0 : 4.0;
    elementwise(ElementwiseKind::kNorm, (backward ? 3.0 : 2.0) * elements * kBf16Bytes,
                (backward ? 2.0 : 1.0) * per_element * elements);
  }

  void residual(bool backward) {
    (void)backward;
    const double elements = local_activation_elements();
    elementwise(ElementwiseKind::kResidualAdd, 3.0 * elements * kBf16Bytes, elements);
  }

  void rope(bool backward) {
    (void)backward;
    if (model_.position_embedding != model::PositionEmbedding::kRope) return;
    const double elements = static_cast<double>(dims_.tokens * (dims_.q_size + dims_.kv_size) / dims_.tp);
    elementwise(ElementwiseKind::kRope, 2.0 * elements * kBf16Bytes, 3.0 * elements);
  }

  void activation(double tokens, std::int64_t ffn_per_rank, bool backward) {
    const bool swiglu = model_.activation == model::Activation::kSwiGlu;
    const double out = tokens * static_cast<double>(ffn_per_rank);
    const double in = swiglu ? 2.0 * out : out;
    const double bytes = backward ? (2.0 * in + out) * kBf16Bytes : (in + out) * kBf16Bytes;
    elementwise(ElementwiseKind::kActivation, bytes, (backward ? 2.0 : 1.0) * (swiglu ? 6.0 : 8.0) * out);
  }

  // ---- a transformer layer
  // ------------------------------------------------------------------------------------

  /// Tokens each expert processes per micro-batch after the TP gather: integers summing to ep * T * top_k
  /// (the tokens routed within one EP group), mean ep T k / E; expert 0 gets imbalance x mean, the rest share
  /// the remainder evenly (remainders to the lowest indices).
  std::vector<std::int64_t> expert_token_counts() const {
    std::vector<std::int64_t> tokens;
    if (!model_.is_moe()) return tokens;
    const std::int64_t experts = model_.num_experts;
    const std::int64_t total = static_cast<std::int64_t>(layout_.ep) * dims_.tokens * model_.moe_top_k;
    std::int64_t hot = experts == 1 ? total
                                    : static_cast<std::int64_t>(std::llround(options_.expert_load_imbalance *
                                                                             static_cast<double>(total) /
                                                                             static_cast<double>(experts)));
    if (options_.expert_load_imbalance == 1.0) hot = total / experts + (total % experts > 0 ? 1 : 0);
    tokens.push_back(hot);
    if (experts > 1) {
      const std::int64_t rest = total - hot;
      for (std::int64_t expert = 1; expert < experts; ++expert)
        tokens.push_back(rest / (experts - 1) + (expert - 1 < rest % (experts - 1) ? 1 : 0));
    }
    return tokens;
  }

  /// Experts held by this program's ranks: [first, first + count).
  std::pair<int, int> local_experts() const {
    const int count = model_.num_experts / layout_.ep;
    return {(ep_index_ < 0 ? 0 : ep_index_) * count, count};
  }

  /// Tokens this rank's experts process per micro-batch (after the TP gather).
  double local_expert_tokens() const {
    auto [first, count] = local_experts();
    double total = 0;
    for (int expert = first; expert < first + count; ++expert)
      total += static_cast<double>(expert_tokens_[expert]);
    return total;
  }

  void moe_forward() {
    const double top_k = model_.moe_top_k;
    const double routed = static_cast<double>(dims_.tokens_local) * top_k;
    gemm(GemmWeight::kRouter, GemmPass::kForward, dims_.tokens_local, model_.num_experts, dims_.hidden);
    elementwise(ElementwiseKind::kRouting, (local_activation_elements() + routed * dims_.hidden) * kBf16Bytes,
                routed);
    moe_exchange(/*backward=*/false);
    elementwise(ElementwiseKind::kRouting, (routed * dims_.hidden + local_activation_elements()) * kBf16Bytes,
                2.0 * routed * dims_.hidden);
  }

  void moe_backward() {
    const double top_k = model_.moe_top_k;
    const double routed = static_cast<double>(dims_.tokens_local) * top_k;
    elementwise(ElementwiseKind::kRouting, (routed * dims_.hidden + local_activation_elements()) * kBf16Bytes,
                2.0 * routed * dims_.hidden);
    moe_exchange(/*backward=*/true);
    elementwise(ElementwiseKind::kRouting, (local_activation_elements() + routed * dims_.hidden) * kBf16Bytes,
                routed);
    gemm(GemmWeight::kRouter, GemmPass::kDgrad, dims_.tokens_local, dims_.hidden, model_.num_experts);
    gemm(GemmWeight::kRouter, GemmPass::kWgrad, dims_.hidden, model_.num_experts, dims_.tokens_local);
  }

  /// All-to-all dispatch, TP gather, expert FFNs, TP reduce-scatter, all-to-all combine (or their backward).
  void moe_exchange(bool backward) {
    const double routed_bytes =
        static_cast<double>(dims_.tokens_local) * model_.moe_top_k * dims_.hidden * kBf16Bytes;
    const double gathered_bytes = local_expert_tokens() * static_cast<double>(dims_.hidden) * kBf16Bytes;
    // The TP gather forwards what the dispatch received; the combine sends what the TP scatter reduced.
    int dispatch = -1;
    if (layout_.ep > 1)
      dispatch = blocking(
          collective_op(CollectiveKind::kAllToAll, GroupKind::kEp, routed_bytes, Stream::kEpComm, phase_));
    if (dims_.tp > 1)
      blocking(
          collective_op(CollectiveKind::kAllGather, GroupKind::kTp, gathered_bytes, Stream::kTpComm, phase_),
          dispatch);
    auto [first, count] = local_experts();
    const std::int64_t ffn_per_rank = dims_.ffn / dims_.tp;
    const std::int64_t fc1_per_rank = dims_.fc1_out / dims_.tp;
    for (int expert = first; expert < first + count; ++expert) {
      const std::int64_t tokens = expert_tokens_[expert];
      if (!backward) {
        gemm(GemmWeight::kExpertFc1, GemmPass::kForward, tokens, fc1_per_rank, dims_.hidden, expert);
        activation(static_cast<double>(tokens), ffn_per_rank, false);
        gemm(GemmWeight::kExpertFc2, GemmPass::kForward, tokens, dims_.hidden, ffn_per_rank, expert);
      } else {
        gemm(GemmWeight::kExpertFc2, GemmPass::kDgrad, tokens, ffn_per_rank, dims_.hidden, expert);
        gemm(GemmWeight::kExpertFc2, GemmPass::kWgrad, ffn_per_rank, dims_.hidden, tokens, expert);
        activation(static_cast<double>(tokens), ffn_per_rank, true);
        gemm(GemmWeight::kExpertFc1, GemmPass::kDgrad, tokens, dims_.hidden, fc1_per_rank, expert);
        gemm(GemmWeight::kExpertFc1, GemmPass::kWgrad, dims_.hidden, fc1_per_rank, tokens, expert);
      }
    }
    int scatter = -1;
    if (dims_.tp > 1)
      scatter = blocking(collective_op(CollectiveKind::kReduceScatter, GroupKind::kTp, gathered_bytes,
                                       Stream::kTpComm, phase_));
    if (layout_.ep > 1)
      blocking(
          collective_op(CollectiveKind::kAllToAll, GroupKind::kEp, routed_bytes, Stream::kEpComm, phase_),
          scatter);
  }

  void layer_forward() {
    const std::int64_t tp = dims_.tp;
    norm(false);
    column_forward(GemmWeight::kQkv, (dims_.q_size + 2 * dims_.kv_size) / tp);
    rope(false);
    attention(false);
    row_forward(GemmWeight::kProj, dims_.q_size / tp);
    residual(false);
    norm(false);
    if (model_.is_moe()) {
      moe_forward();
    } else {
      column_forward(GemmWeight::kFc1, dims_.fc1_out / tp);
      activation(static_cast<double>(dims_.tokens), dims_.ffn / tp, false);
      row_forward(GemmWeight::kFc2, dims_.ffn / tp);
    }
    residual(false);
  }

  void layer_backward() {
    const std::int64_t tp = dims_.tp;
    if (layout_.recompute == model::Recompute::kFull) {
      phase_ = Phase::kRecompute;
      layer_forward();
      phase_ = Phase::kBackward;
    }
    residual(true);
    if (model_.is_moe()) {
      moe_backward();
    } else {
      row_backward(GemmWeight::kFc2, dims_.ffn / tp);
      activation(static_cast<double>(dims_.tokens), dims_.ffn / tp, true);
      column_backward(GemmWeight::kFc1, dims_.fc1_out / tp);
    }
    norm(true);
    residual(true);
    row_backward(GemmWeight::kProj, dims_.q_size / tp);
    if (layout_.recompute == model::Recompute::kSelective) {
      phase_ = Phase::kRecompute;
      attention(false);
      phase_ = Phase::kBackward;
    }
    attention(true);
    rope(true);
    column_backward(GemmWeight::kQkv, (dims_.q_size + 2 * dims_.kv_size) / tp);
    norm(true);
  }

  // ---- embedding and output head
  // ------------------------------------------------------------------------------

  void embedding_forward() {
    const double elements = static_cast<double>(dims_.tokens * dims_.hidden);
    const bool learned = model_.position_embedding == model::PositionEmbedding::kLearned;
    elementwise(ElementwiseKind::kEmbedding, (learned ? 4.0 : 2.0) * elements * kBf16Bytes,
                learned ? elements : 0.0);
    if (dims_.tp > 1)
      blocking(collective_op(dims_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                             GroupKind::kTp, activation_bytes(), Stream::kTpComm, phase_));
  }

  void embedding_backward() {
    if (dims_.sp)
      blocking(collective_op(CollectiveKind::kAllGather, GroupKind::kTp, activation_bytes(), Stream::kTpComm,
                             phase_));
    const double elements = static_cast<double>(dims_.tokens * dims_.hidden);
    elementwise(ElementwiseKind::kEmbedding, 3.0 * elements * kBf16Bytes, elements);
  }

  double cross_entropy_elements() const {
    return static_cast<double>(dims_.tokens * (dims_.vocab / dims_.tp));
  }

  void output_forward() {
    norm(false);
    column_forward(GemmWeight::kLogits, dims_.vocab / dims_.tp);
    const double elements = cross_entropy_elements();
    elementwise(ElementwiseKind::kCrossEntropy, elements * (kBf16Bytes + kFp32Bytes), 5.0 * elements);
    if (dims_.tp > 1) {
      // Vocabulary-parallel cross entropy: all-reduce the max logit, then the target logit and sum of exps.
      const double tokens = static_cast<double>(dims_.tokens);
      blocking(collective_op(CollectiveKind::kAllReduce, GroupKind::kTp, tokens * kFp32Bytes, Stream::kTpComm,
                             phase_));
      blocking(collective_op(CollectiveKind::kAllReduce, GroupKind::kTp, 2.0 * tokens * kFp32Bytes,
                             Stream::kTpComm, phase_));
    }
  }

  void output_backward() {
    const double elements = cross_entropy_elements();
    elementwise(ElementwiseKind::kCrossEntropy, elements * (kBf16Bytes + kFp32Bytes), 2.0 * elements);
    column_backward(GemmWeight::kLogits, dims_.vocab / dims_.tp);
    norm(true);
  }

  // ---- parameter units and data-parallel collectives
  // -----------------------------------------------------------

  bool holds_unit(int unit) const {
    for (int chunk = 0; chunk < layout_.virtual_stages; ++chunk) {
      auto units = forward_units(chunk);
      if (std::find(units.begin(), units.end(), unit) != units.end()) return true;
    }
    return false;
  }

  /// Parameter units of one chunk of this stage in forward order.
  std::vector<int> forward_units(int chunk) const {
    std::vector<int> units;
    const int virtual_stage = chunk * layout_.pp + stage_;
    if (virtual_stage == 0) units.push_back(kEmbeddingUnit);
    const auto range = partition_[virtual_stage];
    for (int layer = range.first_layer; layer < range.first_layer + range.count; ++layer)
      units.push_back(layer);
    if (virtual_stage == num_virtual_ - 1) units.push_back(kOutputUnit);
    return units;
  }

  /// Parameters of a unit held by one rank (tensor-parallel shard; norms, router and positions replicated).
  UnitParams unit_params(int unit) const {
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
    } else {
      params.dense = (counts_.per_layer_attention + counts_.per_layer_mlp) / tp + counts_.per_layer_norm;
    }
    return params;
  }

  /// Emits the dp (dense) and expert-dp (expert) collectives of one unit; returns their indices. Under hybrid
  /// sharding the dense collective runs over the shard group, and a gradient reduce-scatter is followed by
  /// an all-reduce of the resulting shard over the replicate group.
  std::vector<std::int32_t> emit_param_collectives(CollectiveKind kind, int chunk, int unit, int microbatch,
                                                   Phase phase, const std::vector<std::int32_t>& deps) {
    const int saved_layer = current_layer_, saved_microbatch = current_microbatch_,
              saved_chunk = current_chunk_;
    current_layer_ = unit >= 0 ? unit : -1;
    current_microbatch_ = microbatch;
    current_chunk_ = chunk;
    std::vector<std::int32_t> ids;
    const UnitParams params = unit_params(unit);
    if (hybrid_ && params.dense > 0) {
      std::vector<std::int32_t> after = deps;
      if (layout_.shard_size() > 1) {
        Op op = collective_op(kind, GroupKind::kDpShard, params.dense * kBf16Bytes, Stream::kDpComm, phase);
        op.parameters = params.dense;
        ids.push_back(add(op, deps));
        after = {ids.back()};
      }
      if (kind == CollectiveKind::kReduceScatter) {
        const double shard = params.dense / layout_.shard_size();
        Op op = collective_op(CollectiveKind::kAllReduce, GroupKind::kDpReplicate, shard * kBf16Bytes,
                              Stream::kDpComm, phase);
        op.parameters = shard;
        ids.push_back(add(op, after));
      }
    } else if (dp_reduce_ && params.dense > 0) {
      Op op = collective_op(kind, dp_group_, params.dense * kBf16Bytes, Stream::kDpComm, phase);
      op.parameters = params.dense;
      ids.push_back(add(op, deps));
    }
    if (edp_reduce_ && params.expert > 0) {
      Op op = collective_op(kind, GroupKind::kExpertDp, params.expert * kBf16Bytes, Stream::kDpComm, phase);
      op.parameters = params.expert;
      ids.push_back(add(op, deps));
    }
    current_layer_ = saved_layer;
    current_microbatch_ = saved_microbatch;
    current_chunk_ = saved_chunk;
    return ids;
  }

  /// FSDP: gather a unit's parameters before its forward/backward when the pass needs it (gather_now_).
  /// Overlapped: the gather of the next unit is issued while this one computes (one unit of prefetch); else
  /// each gather blocks compute.
  void fsdp_gather(int chunk, int unit, int next_unit, bool has_next) {
    if (layout_.zero_stage != 3 || !gather_now_) return;
    const bool overlap = layout_.overlap_param_gather;
    auto gather = [&](int which) {
      return emit_param_collectives(CollectiveKind::kAllGather, chunk, which, current_microbatch_, phase_,
                                    {overlap ? -1 : last_compute_});
    };
    if (!overlap || !fsdp_prefetched_.count(unit)) fsdp_prefetched_[unit] = gather(unit);
    auto waits = fsdp_prefetched_[unit];
    waits_.insert(waits_.end(), waits.begin(), waits.end());
    fsdp_prefetched_.erase(unit);
    if (overlap && has_next) fsdp_prefetched_[next_unit] = gather(next_unit);
  }

  // ---- passes
  // -------------------------------------------------------------------------------------------------

  void run_unit_forward(int unit) {
    current_layer_ = unit >= 0 ? unit : -1;
    if (unit == kEmbeddingUnit) {
      embedding_forward();
    } else if (unit == kOutputUnit) {
      output_forward();
    } else {
      layer_forward();
    }
  }

  void run_unit_backward(int unit) {
    current_layer_ = unit >= 0 ? unit : -1;
    if (unit == kEmbeddingUnit) {
      embedding_backward();
    } else if (unit == kOutputUnit) {
      output_backward();
    } else {
      layer_backward();
    }
  }

  void run_forward(int microbatch, int chunk, bool first_of_chunk) {
    current_microbatch_ = microbatch;
    current_chunk_ = chunk;
    phase_ = Phase::kForward;
    // FSDP (PyTorch FSDP2 semantics): a pass gathers its chunk's units unless they are still held; forward
    // frees them after use when resharding after forward, backward always frees them.
    gather_now_ = !chunk_gathered_[chunk];
    chunk_gathered_[chunk] = !layout_.reshard_after_forward;
    const auto units = forward_units(chunk);
    for (std::size_t position = 0; position < units.size(); ++position) {
      const int unit = units[position];
      fsdp_gather(chunk, unit, position + 1 < units.size() ? units[position + 1] : 0,
                  position + 1 < units.size());
      if (first_of_chunk) {
        auto found = param_gather_op_.find({chunk, unit});
        if (found != param_gather_op_.end())
          waits_.insert(waits_.end(), found->second.begin(), found->second.end());
      }
      run_unit_forward(unit);
    }
    current_layer_ = -1;
  }

  void run_backward(int microbatch, int chunk, bool last_of_chunk) {
    current_microbatch_ = microbatch;
    current_chunk_ = chunk;
    phase_ = Phase::kBackward;
    auto units = forward_units(chunk);
    std::reverse(units.begin(), units.end());
    gather_now_ = !chunk_gathered_[chunk];
    chunk_gathered_[chunk] = false;
    // ZeRO-2 and FSDP reduce-scatter every micro-batch's gradients (they keep no full gradient buffer).
    const bool reduce_per_microbatch = layout_.zero_stage >= 2;
    for (std::size_t position = 0; position < units.size(); ++position) {
      const int unit = units[position];
      fsdp_gather(chunk, unit, position + 1 < units.size() ? units[position + 1] : 0,
                  position + 1 < units.size());
      run_unit_backward(unit);
      phase_ = Phase::kBackward;
      if (reduce_per_microbatch) {
        // Each micro-batch's gradients of the unit are reduce-scattered (one bucket per unit).
        auto ids = emit_param_collectives(CollectiveKind::kReduceScatter, chunk, unit, microbatch,
                                          Phase::kBackward, {last_compute_});
        if (layout_.overlap_grad_reduce) {
          grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
        } else {
          waits_.insert(waits_.end(), ids.begin(), ids.end());
          grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
        }
      } else if (last_of_chunk) {
        if (layout_.overlap_grad_reduce) {
          auto ids = emit_param_collectives(
              layout_.zero_stage == 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce, chunk,
              unit, -1, Phase::kBackward, {last_compute_});
          grad_ops_.insert(grad_ops_.end(), ids.begin(), ids.end());
        } else {
          grad_units_in_order_.push_back({chunk, unit});
        }
      }
    }
    current_layer_ = -1;
  }

  // ---- pipeline point-to-point
  // ---------------------------------------------------------------------------------

  /// Bytes of one stage-boundary activation (or its gradient) on one rank.
  double p2p_bytes() const { return kBf16Bytes * static_cast<double>(dims_.tokens_local * dims_.hidden); }

  /// Bytes each rank sends across a stage boundary: 1/tp of the activation under pipeline scatter/gather.
  double p2p_sent_bytes() const {
    return layout_.scatter_gather_in_effect() ? p2p_bytes() / static_cast<double>(dims_.tp) : p2p_bytes();
  }

  /// Tag of the message crossing boundary (v, v+1) for `microbatch`; direction 0 forward, 1 backward.
  int tag(int microbatch, int boundary, int direction) const {
    return (microbatch * num_virtual_ + boundary) * 2 + direction;
  }

  struct P2p {
    bool send = false;
    bool toward_next = false;  // peer is the next virtual stage
    int peer_stage = 0;
    int tag = 0;
    int microbatch = 0;
    int chunk = 0;
  };

  /// The receive a slot needs before it can run (none on the first/last virtual stage).
  bool slot_receive(const parallel::PipelineSlot& slot, int virtual_stage, P2p& p2p) const {
    p2p.send = false;
    p2p.microbatch = slot.microbatch;
    p2p.chunk = slot.chunk;
    if (slot.pass == parallel::PassKind::kForward) {
      if (virtual_stage == 0) return false;
      p2p.toward_next = false;
      p2p.peer_stage = (virtual_stage - 1) % layout_.pp;
      p2p.tag = tag(slot.microbatch, virtual_stage - 1, 0);
    } else {
      if (virtual_stage == num_virtual_ - 1) return false;
      p2p.toward_next = true;
      p2p.peer_stage = (virtual_stage + 1) % layout_.pp;
      p2p.tag = tag(slot.microbatch, virtual_stage, 1);
    }
    return true;
  }

  /// The send a slot makes after it ran (none on the last/first virtual stage).
  bool slot_send(const parallel::PipelineSlot& slot, int virtual_stage, P2p& p2p) const {
    p2p.send = true;
    p2p.microbatch = slot.microbatch;
    p2p.chunk = slot.chunk;
    if (slot.pass == parallel::PassKind::kForward) {
      if (virtual_stage == num_virtual_ - 1) return false;
      p2p.toward_next = true;
      p2p.peer_stage = (virtual_stage + 1) % layout_.pp;
      p2p.tag = tag(slot.microbatch, virtual_stage, 0);
    } else {
      if (virtual_stage == 0) return false;
      p2p.toward_next = false;
      p2p.peer_stage = (virtual_stage - 1) % layout_.pp;
      p2p.tag = tag(slot.microbatch, virtual_stage - 1, 1);
    }
    return true;
  }

  void emit_p2p(const P2p& p2p) {
    Op op;
    op.kind = p2p.send ? OpKind::kSend : OpKind::kRecv;
    op.stream = Stream::kPpComm;
    op.group = GroupKind::kPp;
    op.bytes = p2p_sent_bytes();
    op.peer_stage = p2p.peer_stage;
    op.tag = p2p.tag;
    op.p2p_batch = p2p_batch_;
    const int saved_microbatch = current_microbatch_, saved_chunk = current_chunk_;
    current_microbatch_ = p2p.microbatch;
    current_chunk_ = p2p.chunk;
    const Phase saved_phase = phase_;
    // Tag parity is the direction: 0 forward activations, 1 backward gradients.
    op.phase = (p2p.tag % 2 == 0) ? Phase::kForward : Phase::kBackward;
    if (p2p.send) {
      add(op, {last_compute_});
    } else if (layout_.scatter_gather_in_effect()) {
      // Megatron-LM's gather_split_1d_tensor: the received 1/tp slices are all-gathered over the TP group
      // before the stage uses them.
      const int receive = add(op, {});
      waits_.push_back(add(
          collective_op(CollectiveKind::kAllGather, GroupKind::kTp, p2p_bytes(), Stream::kTpComm, op.phase),
          {receive}));
    } else {
      waits_.push_back(add(op, {}));
    }
    current_microbatch_ = saved_microbatch;
    current_chunk_ = saved_chunk;
    phase_ = saved_phase;
  }

  /// Sends the outputs of `done` and receives the inputs of `next` as one batch (Megatron-LM's batched
  /// isend/irecv), listed in its _p2p_ops order: even stages send-next, recv-prev, send-prev, recv-next; odd
  /// stages recv-prev, send-next, recv-next, send-prev.
  void emit_exchange(const std::vector<parallel::PipelineSlot>& done,
                     const std::vector<parallel::PipelineSlot>& next) {
    std::vector<P2p> ops;
    P2p p2p;
    for (const auto& slot : done)
      if (slot_send(slot, slot.chunk * layout_.pp + stage_, p2p)) ops.push_back(p2p);
    for (const auto& slot : next)
      if (slot_receive(slot, slot.chunk * layout_.pp + stage_, p2p)) ops.push_back(p2p);
    auto rank_of = [&](const P2p& op) {
      const bool even = stage_ % 2 == 0;
      if (even) {
        if (op.send && op.toward_next) return 0;
        if (!op.send && !op.toward_next) return 1;
        if (op.send && !op.toward_next) return 2;
        return 3;
      }
      if (!op.send && !op.toward_next) return 0;
      if (op.send && op.toward_next) return 1;
      if (!op.send && op.toward_next) return 2;
      return 3;
    };
    std::stable_sort(ops.begin(), ops.end(),
                     [&](const P2p& a, const P2p& b) { return rank_of(a) < rank_of(b); });
    for (const auto& op : ops) emit_p2p(op);
    ++p2p_batch_;
  }

  const model::ModelSpec& model_;
  const parallel::Layout& layout_;
  const GraphOptions& options_;
  int stage_;
  int ep_index_;
  RankProgram& program_;
  model::ParameterCounts counts_;
  Dims dims_;
  std::vector<parallel::LayerRange> partition_;
  int num_virtual_ = 1;
  GroupKind dp_group_ = GroupKind::kDp;
  bool dp_reduce_ = false;
  bool edp_reduce_ = false;
  bool hybrid_ = false;               // hybrid sharding: dense collectives over the shard/replicate groups
  std::vector<bool> chunk_gathered_;  // FSDP: the chunk's units are gathered (held from an earlier pass)
  bool gather_now_ = true;            // FSDP: the current pass gathers its units
  int cp_tag_ = 0;                    // next tag of a context-parallel ring message (one per exchange)
  std::vector<std::int64_t> expert_tokens_;

  Phase phase_ = Phase::kForward;
  int current_layer_ = -1;
  int current_microbatch_ = -1;
  int current_chunk_ = 0;
  int last_compute_ = -1;
  int p2p_batch_ = 0;
  std::vector<std::int32_t> waits_;
  std::vector<std::int32_t> grad_ops_;
  std::vector<std::pair<int, int>> grad_units_in_order_;
  std::map<std::pair<int, int>, std::vector<std::int32_t>> param_gather_op_;
  std::map<int, std::vector<std::int32_t>> fsdp_prefetched_;
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
  // Programs of a graph are about the same length: each reserves the first one's size (+1/8), so the op
  // vectors of all but the first grow without copies (the planner builds thousands of graphs).
  std::size_t first_ops = 0, first_deps = 0;
  for (int stage = 0; stage < layout.pp; ++stage) {
    for (int role = 0; role < roles_per_stage; ++role) {
      RankProgram& program = graph.programs[stage * roles_per_stage + role];
      program.stage = stage;
      program.ep_index = by_ep ? role : -1;
      program.ops.reserve(first_ops + first_ops / 8);
      program.deps.reserve(first_deps + first_deps / 8);
      ProgramBuilder(graph.model, graph.layout, graph.options, stage, program.ep_index, program).build();
      if (first_ops == 0) {
        first_ops = program.ops.size();
        first_deps = program.deps.size();
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
    if (rank_op.op.kind == OpKind::kSend || rank_op.op.kind == OpKind::kRecv)
      rank_op.peer_rank = graph.peer_rank(rank, rank_op.op);
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

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kCollective:
      return "collective";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

const char* to_string(Stream stream) {
  switch (stream) {
    case Stream::kCompute:
      return "compute";
    case Stream::kTpComm:
      return "tp-comm";
    case Stream::kDpComm:
      return "dp-comm";
    case Stream::kPpComm:
      return "pp-comm";
    case Stream::kEpComm:
      return "ep-comm";
    case Stream::kCpComm:
      return "cp-comm";
  }
  return "?";
}

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "?";
}

const char* to_string(DType dtype) {
  return dtype == DType::kBf16 ? "bf16" : "fp32";
}

const char* to_string(GemmWeight weight) {
  switch (weight) {
    case GemmWeight::kQkv:
      return "qkv";
    case GemmWeight::kProj:
      return "proj";
    case GemmWeight::kFc1:
      return "fc1";
    case GemmWeight::kFc2:
      return "fc2";
    case GemmWeight::kLogits:
      return "logits";
    case GemmWeight::kRouter:
      return "router";
    case GemmWeight::kExpertFc1:
      return "expert_fc1";
    case GemmWeight::kExpertFc2:
      return "expert_fc2";
    case GemmWeight::kAttnScore:
      return "attn_score";
    case GemmWeight::kAttnContext:
      return "attn_context";
  }
  return "?";
}

const char* to_string(GemmPass pass) {
  switch (pass) {
    case GemmPass::kForward:
      return "fwd";
    case GemmPass::kDgrad:
      return "dgrad";
    case GemmPass::kWgrad:
      return "wgrad";
  }
  return "?";
}

const char* to_string(ElementwiseKind kind) {
  switch (kind) {
    case ElementwiseKind::kNorm:
      return "norm";
    case ElementwiseKind::kActivation:
      return "activation";
    case ElementwiseKind::kRope:
      return "rope";
    case ElementwiseKind::kResidualAdd:
      return "residual_add";
    case ElementwiseKind::kEmbedding:
      return "embedding";
    case ElementwiseKind::kCrossEntropy:
      return "cross_entropy";
    case ElementwiseKind::kRouting:
      return "routing";
    case ElementwiseKind::kSoftmax:
      return "softmax";
  }
  return "?";
}

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

std::string span_name(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm:
      return fmt::format("gemm.{}.{}", to_string(op.gemm.weight), to_string(op.gemm.pass));
    case OpKind::kAttention:
      return op.attention.backward ? "attention.bwd" : "attention.fwd";
    case OpKind::kElementwise:
      return fmt::format("elementwise.{}", to_string(op.elementwise));
    case OpKind::kCollective:
      return fmt::format("{}.{}", to_string(op.collective), to_string(op.group));
    default:
      return to_string(op.kind);
  }
}

std::string describe(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm: {
      std::string text = fmt::format("gemm {} {} m={} n={} k={}", to_string(op.gemm.weight),
                                     to_string(op.gemm.pass), op.gemm.m, op.gemm.n, op.gemm.k);
      if (op.gemm.batch > 1) text += fmt::format(" batch={}", op.gemm.batch);
      if (op.gemm.expert >= 0) text += fmt::format(" expert={}", op.gemm.expert);
      return text;
    }
    case OpKind::kAttention: {
      std::string text =
          fmt::format("attention {} b={} heads={} kv={} s={} d={}{}", op.attention.backward ? "bwd" : "fwd",
                      op.attention.batch, op.attention.heads, op.attention.kv_heads, op.attention.seq,
                      op.attention.head_dim, op.attention.causal ? " causal" : "");
      if (op.attention.cp_step >= 0)
        text += fmt::format(" keys={} cp-step={}", op.attention.keys(), op.attention.cp_step);
      if (op.attention.cp_gathered > 0)
        text += fmt::format(" keys={} cp-{}-chunk", op.attention.keys(),
                            op.attention.cp_gathered == 1 ? "early" : "late");
      return text;
    }
    case OpKind::kElementwise:
      return fmt::format("elementwise {} bytes={:.0f}", to_string(op.elementwise), op.bytes);
    case OpKind::kCollective:
      return fmt::format("{} {} bytes={:.0f}", to_string(op.collective), to_string(op.group), op.bytes);
    case OpKind::kSend:
      if (op.group == GroupKind::kCp)
        return fmt::format("send to cp {:+d} tag={} bytes={:.0f}", op.peer_offset, op.tag, op.bytes);
      return fmt::format("send to stage {} tag={} bytes={:.0f}", op.peer_stage, op.tag, op.bytes);
    case OpKind::kRecv:
      if (op.group == GroupKind::kCp)
        return fmt::format("recv from cp {:+d} tag={} bytes={:.0f}", op.peer_offset, op.tag, op.bytes);
      return fmt::format("recv from stage {} tag={} bytes={:.0f}", op.peer_stage, op.tag, op.bytes);
    case OpKind::kOptimizer:
      return fmt::format("optimizer adamw params={:.0f}", op.parameters);
  }
  return "?";
}

}  // namespace calo::graph
