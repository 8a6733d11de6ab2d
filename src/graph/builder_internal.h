// graph builder internal header: how build_graph makes one RankProgram. BuilderCore holds what every part of
// the build shares (the program being appended, the micro-batch shapes, the walk's position and the primitive
// appenders); one emitter per parallelism appends its ops through it:
//   TensorEmitter    (emit_tensor.cpp)    layers, embedding and output head as tensor-parallel linears
//   ContextEmitter   (emit_context.cpp)   the context-parallel ring and all-gather attention
//   ExpertEmitter    (emit_expert.cpp)    MoE routing, all-to-all dispatch/combine and the experts' FFNs
//   PipelineEmitter  (emit_pipeline.cpp)  the pipeline's p2p exchanges between schedule steps
//   DataEmitter      (emit_data.cpp)      data-parallel gradient reductions, ZeRO/FSDP gathers, the optimizer
// graph.cpp's ProgramBuilder walks the stage's pipeline schedule and calls them; a new layout is a new
// emitter and a call in the walk. Not part of the graph interface.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "model/accounting.h"
#include "parallel/schedule.h"

namespace calo::graph::detail {

/// build_graph without the op budget check (check_op_budget's own small graphs); `expected_ops` (the
/// estimate, 0 = unknown) sizes the first program's op vector.
Graph build_graph_unchecked(const model::ModelSpec& model, const parallel::Layout& layout,
                            const GraphOptions& options, std::int64_t expected_ops = 0);

/// Bytes per bf16 element.
inline constexpr double kBf16Bytes = 2.0;
/// Bytes per fp32 element.
inline constexpr double kFp32Bytes = 4.0;
/// Bytes per FP8 (e4m3 / e5m2) value.
inline constexpr double kFp8Bytes = 1.0;

/// What casting a GEMM pass's operands to FP8 moves, per value of A (m x k) and of B (k x n), and the share
/// of each that is a fresh cast from bf16 (an amax and a scale: FLOPs) rather than a copy of an earlier cast.
struct Fp8CastBytes {
  double a_per_value = 0;  ///< bytes moved per value of A
  double b_per_value = 0;  ///< bytes moved per value of B
  double a_fresh = 0;      ///< fraction of A's values cast fresh from bf16
  double b_fresh = 0;      ///< fraction of B's values cast fresh from bf16
};
/// The cast work of one GEMM pass under `precision` with `microbatches` per step (docs/METRICS.md "FP8
/// training"): tensorwise casts in two passes (amax, then scale and cast: 5 B per value) and reuses a
/// transposed copy backward (2 B); rowwise casts in one pass (3 B) and casts again along the other axis
/// backward; delayed scaling writes the FP8 copy and its transpose from the producing kernel (2 B), casts
/// dY with one cast-transpose (4 B) and each weight once per step (4 B over the step's micro-batches).
Fp8CastBytes fp8_cast_bytes(parallel::Precision precision, GemmPass pass, int microbatches);

/// Parameter unit of the embedding (a unit is a layer (>= 0), the embedding or the output head).
inline constexpr int kEmbeddingUnit = -1;
/// Parameter unit of the output head.
inline constexpr int kOutputUnit = -2;

/// Shapes of one micro-batch on one rank.
struct Dims {
  std::int64_t batch = 0;         ///< sequences per micro-batch
  std::int64_t seq = 0;           ///< tokens per sequence on this rank (seq_length / cp)
  std::int64_t tokens = 0;        ///< T = batch * seq (tokens inside the tensor-parallel region)
  std::int64_t cp = 1;            ///< context-parallel size
  std::int64_t tokens_local = 0;  ///< T / tp under sequence parallel, else T
  std::int64_t hidden = 0;        ///< model width
  std::int64_t q_size = 0;        ///< query projection width (all heads)
  std::int64_t kv_size = 0;       ///< key (or value) projection width (all kv heads)
  std::int64_t ffn = 0;           ///< FFN hidden width
  std::int64_t fc1_out = 0;       ///< ffn (GELU) or 2 ffn (gated: SwiGLU, GeGLU)
  std::int64_t vocab = 0;         ///< vocabulary size
  std::int64_t tp = 1;            ///< tensor-parallel size
  bool sp = false;                ///< sequence parallel in effect (tp > 1)
};

/// A weight-gradient GEMM held back from a split backward's B pass until its W pass (zero-bubble schedules).
struct DeferredGemm {
  GemmWeight weight;       ///< the linear
  std::int64_t m = 0;      ///< rows of the product
  std::int64_t n = 0;      ///< columns of the product
  std::int64_t k = 0;      ///< inner dimension
  int expert = -1;         ///< the expert, -1 for a dense linear
  std::int64_t batch = 1;  ///< independent products
  int layer = -1;          ///< the layer it belongs to
};

/// What the emitters of one program share: its inputs, the program being appended, the walk's position (which
/// fills each op's layer, micro-batch and chunk) and the primitive appenders.
struct BuilderCore {
  /// Binds the core to `program` (of pipeline stage `stage_index`, expert-parallel index `ep_role` or -1).
  BuilderCore(const model::ModelSpec& model_spec, const parallel::Layout& resolved_layout,
              const GraphOptions& graph_options, int stage_index, int ep_role, RankProgram& rank_program);

  const model::ModelSpec& model;                ///< the model
  const parallel::Layout& layout;               ///< the resolved layout
  const GraphOptions& options;                  ///< build options
  const int stage;                              ///< pipeline stage of the program
  const int ep_index;                           ///< expert-parallel index of the program, -1 when shared
  RankProgram& program;                         ///< the program being appended
  Dims dims;                                    ///< micro-batch shapes on this rank
  std::vector<parallel::LayerRange> partition;  ///< layers of each virtual stage
  int num_virtual = 1;                          ///< virtual stages (pp * virtual_stages)

  Phase phase = Phase::kForward;    ///< phase of the ops being emitted
  int current_layer = -1;           ///< layer of the ops being emitted, -1 outside layers
  int current_microbatch = -1;      ///< micro-batch of the ops being emitted
  int current_chunk = 0;            ///< model chunk of the ops being emitted
  int last_compute = -1;            ///< index of the last compute-stream op, -1 before the first
  int p2p_batch = 0;                ///< batch of the next p2p ops (pipeline and cp ring share the count)
  std::vector<std::int32_t> waits;  ///< comm ops the next compute op waits for
  /// True while a split backward's B pass is emitted: weight-gradient GEMMs go to `deferred_wgrads`.
  bool defer_wgrads = false;
  /// The weight-gradient GEMMs of each (micro-batch, chunk) whose W pass has not run yet, in B's order.
  std::map<std::pair<int, int>, std::vector<DeferredGemm>> deferred_wgrads;

  /// Appends `op` waiting on `deps` (negative entries: no dependency); returns its index.
  int add(const Op& op, std::initializer_list<std::int32_t> deps) {
    return add(op, std::span<const std::int32_t>(deps.begin(), deps.size()));
  }

  /// Appends `op` waiting on `deps` (negative entries: no dependency); returns its index.
  int add(const Op& op, std::span<const std::int32_t> deps) {
    const std::uint32_t dep_begin = append_deps(deps);
    stamp(program.ops.emplace_back(op), dep_begin);
    return static_cast<int>(program.ops.size() - 1);
  }

  /// Appends a compute-stream op of `kind` that waits for the previous compute op and every pending blocking
  /// comm, built in place (an Op is 144 bytes; copied through the stack it cost the builder a third of its
  /// time in store-forwarding stalls); the caller fills its kind's fields before the next append.
  Op& compute_op(OpKind kind) {
    waits.push_back(last_compute);  // waits keeps its capacity from op to op: no allocation per compute op
    const std::uint32_t dep_begin = append_deps(waits);
    waits.clear();
    Op& op = program.ops.emplace_back();
    op.kind = kind;
    op.stream = Stream::kCompute;
    op.phase = phase;
    stamp(op, dep_begin);
    last_compute = static_cast<int>(program.ops.size() - 1);
    return op;
  }

  /// Appends the non-negative entries of `deps` to the program's dependency lists; returns where they start.
  std::uint32_t append_deps(std::span<const std::int32_t> deps) {
    const auto dep_begin = static_cast<std::uint32_t>(program.deps.size());
    for (std::int32_t dep : deps)
      if (dep >= 0) program.deps.push_back(dep);
    return dep_begin;
  }

  /// Gives a just-appended `op` its dependencies (from `dep_begin` to the end of the lists) and the walk's
  /// layer, micro-batch (none for the optimizer) and chunk.
  void stamp(Op& op, std::uint32_t dep_begin) {
    op.dep_begin = dep_begin;
    op.dep_count = static_cast<std::uint32_t>(program.deps.size() - dep_begin);
    op.layer = current_layer;
    op.microbatch = op.phase == Phase::kOptimizer ? -1 : current_microbatch;
    op.chunk = static_cast<std::int16_t>(current_chunk);
  }

  /// A collective op of `kind` over `group` moving `bytes` on `stream`.
  static Op collective_op(CollectiveKind kind, GroupKind group, double bytes, Stream stream, Phase op_phase) {
    Op op;
    op.kind = OpKind::kCollective;
    op.collective = kind;
    op.group = group;
    op.bytes = bytes;
    op.stream = stream;
    op.phase = op_phase;
    return op;
  }

  /// A communication op the next compute op must wait for.
  /// `after`: an earlier comm op on another stream whose result this one sends (-1 for none).
  int blocking(Op op, int after = -1) {
    op.phase = phase;
    const int index = add(op, {last_compute, after});
    waits.push_back(index);
    return index;
  }

  /// A GEMM C[m,n] = A[m,k] B[k,n] (`batch` independent products) on the compute stream; returns its index.
  int gemm(GemmWeight weight, GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k, int expert = -1,
           std::int64_t batch = 1);
  /// FP8: the amax, scale and cast work a GEMM pass's operands need (docs/METRICS.md "FP8 training"), as one
  /// cast op before it; A is m x k, B is k x n, `products` independent products; `weight_gathered_fp8`: B is
  /// a weight FSDP gathered in FP8 (--fp8-all-gather), so forward casts only this rank's shard of it.
  void fp8_casts(GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k, double products,
                 bool weight_gathered_fp8);
  /// A memory-bound op moving `bytes` and doing `flops` on the compute stream; returns its index.
  int elementwise(ElementwiseKind kind, double bytes, double flops);
  /// One attention-core op: `queries` rows against `keys` rows; the causal mask is bottom-right aligned when
  /// there are more keys than queries. cp_step / cp_gathered mark context-parallel ops (AttentionShape).
  int attention_op(bool backward, std::int64_t queries, std::int64_t keys, bool causal, int cp_step,
                   int cp_gathered = 0);
  /// The FFN activation (its FLOPs per element from model::kActivations) over `tokens` rows of `ffn_per_rank`
  /// outputs (dense and expert FFNs).
  void activation(double tokens, std::int64_t ffn_per_rank, bool backward);

  /// Bytes of one micro-batch's activation inside the tensor-parallel region (bf16, T x hidden).
  double activation_bytes() const { return kBf16Bytes * static_cast<double>(dims.tokens * dims.hidden); }
  /// Bytes of the sequence-parallel all-gather of an operand of `weight`'s GEMM: FP8 (half the bf16 bytes)
  /// where the recipe casts before it gathers (docs/METRICS.md "FP8 training"), else activation_bytes().
  double tp_gather_bytes(GemmWeight weight) const;
  /// Activation elements on this rank outside the tensor-parallel region (tokens_local x hidden).
  double local_activation_elements() const { return static_cast<double>(dims.tokens_local * dims.hidden); }

  /// Parameter units of one chunk of this stage in forward order.
  std::vector<int> forward_units(int chunk) const;
  /// Whether any chunk of this stage holds `unit`.
  bool holds_unit(int unit) const;
};

/// Base of the emitters: the core they append through, and its fixed inputs under short names.
class Emitter {
 protected:
  /// Binds the emitter to `core`.
  explicit Emitter(BuilderCore& core)
      : core_(core), model_(core.model), layout_(core.layout), dims_(core.dims) {}

  BuilderCore& core_;               ///< the program being built and the walk's position
  const model::ModelSpec& model_;   ///< core_.model
  const parallel::Layout& layout_;  ///< core_.layout
  const Dims& dims_;                ///< core_.dims
};

/// Context parallelism: attention over the cp group's sequence shards (docs/METRICS.md, "Context parallel").
class ContextEmitter : public Emitter {
 public:
  /// An emitter appending through `core`.
  explicit ContextEmitter(BuilderCore& core) : Emitter(core) {}

  /// All-gather context parallel attention; returns the index of its last attention op.
  int gathered_attention(bool backward);
  /// Ring (p2p) context parallel attention with causal load balance; returns the index of its last step.
  int ring_attention(bool backward);
  /// PyTorch's experimental context parallel (torchtitan); returns the index of its last attention step.
  int torch_ring_attention(bool backward);

 private:
  double kv_bytes() const;
  double query_head_values() const;
  double torch_merge_bytes(bool backward, int step) const;
  int ring_exchange(double bytes, bool backward, int after_compute);

  int cp_tag_ = 0;  // next tag of a context-parallel ring message (one per exchange)
};

/// Expert parallelism: the MoE block (router, routing, all-to-all dispatch and combine, local experts' FFNs).
class ExpertEmitter : public Emitter {
 public:
  /// An emitter appending through `core`; splits the routed tokens over the experts (GraphOptions).
  explicit ExpertEmitter(BuilderCore& core);

  /// Forward of one layer's MoE block.
  void moe_forward();
  /// Backward of one layer's MoE block.
  void moe_backward();

 private:
  std::vector<std::int64_t> expert_token_counts() const;
  std::pair<int, int> local_experts() const;
  double local_expert_tokens() const;
  void moe_exchange(bool backward);

  std::vector<std::int64_t> expert_tokens_;  // tokens of each expert per micro-batch
};

/// Tensor (and sequence) parallelism: a parameter unit's compute with its tp collectives (Megatron-LM's
/// column/row-parallel linears); attention goes to the context emitter under cp, the FFN to the expert
/// emitter for MoE.
class TensorEmitter : public Emitter {
 public:
  /// An emitter appending through `core`, delegating cp attention and MoE blocks.
  TensorEmitter(BuilderCore& core, ContextEmitter& context, ExpertEmitter& expert)
      : Emitter(core), context_(context), expert_(expert) {}

  /// Forward of a unit: the embedding, a transformer layer or the output head.
  void unit_forward(int unit);
  /// Backward of a unit (a layer's with its recompute).
  void unit_backward(int unit);

 private:
  void layer_forward();
  void layer_backward();
  void op_recompute();
  void embedding_forward();
  void embedding_backward();
  double cross_entropy_elements() const;
  void output_forward();
  void output_backward();
  int attention(bool backward);
  void unfused_attention(bool backward);
  void column_forward(GemmWeight weight, std::int64_t out_per_rank);
  void row_forward(GemmWeight weight, std::int64_t in_per_rank);
  void row_backward(GemmWeight weight, std::int64_t in_per_rank);
  void column_backward(GemmWeight weight, std::int64_t out_per_rank);
  void norm(bool backward);
  void residual(bool backward);
  void rope(bool backward);

  ContextEmitter& context_;
  ExpertEmitter& expert_;
};

/// Per chunk, the slot of its first forward and of its last backward (-1: none).
struct ChunkSlots {
  std::vector<int> first_forward;  ///< slot of the chunk's first forward
  std::vector<int> last_backward;  ///< gradients of the chunk are final after this slot
};

/// Pipeline parallelism: the schedule's exchange steps and the batched p2p sends/receives between them.
class PipelineEmitter : public Emitter {
 public:
  /// An emitter appending through `core`.
  explicit PipelineEmitter(BuilderCore& core) : Emitter(core) {}

  /// The first-forward and last-backward slot of each chunk in `schedule`.
  ChunkSlots chunk_slots_of(const std::vector<parallel::PipelineSlot>& schedule) const;
  /// Steps between pipeline exchanges, each [first slot, end slot): one slot, or under the interleaved
  /// schedule a forward followed by a backward (Megatron-LM's steady state); under a V-shaped schedule one
  /// slot each, its exchanges timed here (time_exchanges).
  std::vector<std::pair<int, int>> exchange_steps(const std::vector<parallel::PipelineSlot>& schedule);
  /// Sends the outputs of `done` and receives the inputs of `next` as one batch.
  void emit_exchange(const std::vector<parallel::PipelineSlot>& done,
                     const std::vector<parallel::PipelineSlot>& next);

 private:
  struct P2p {
    bool send = false;
    bool toward_next = false;  // peer is the next virtual stage
    int peer_stage = 0;
    int tag = 0;
    int microbatch = 0;
    int chunk = 0;
    int consumer_slot = -1;  // a V's receive: the slot that needs it (it waits for it, not the next slot)
  };

  double p2p_bytes() const;
  double p2p_sent_bytes() const;
  int tag(int microbatch, int boundary, int direction) const;
  bool slot_receive(const parallel::PipelineSlot& slot, int virtual_stage, P2p& p2p) const;
  bool slot_send(const parallel::PipelineSlot& slot, int virtual_stage, P2p& p2p) const;
  void emit_p2p(const P2p& p2p);
  void time_exchanges(const std::vector<parallel::PipelineSlot>& schedule);

  /// A V-shaped schedule's exchanges, one per gap between its slots (before the first, after each): the
  /// stage's messages in the order their passes end in run_pipeline, an order both ends of every message
  /// share.
  std::vector<std::vector<P2p>> timed_exchanges_;
  std::size_t next_timed_exchange_ = 0;  ///< the gap emit_exchange fills next
  /// A V's receives posted before the gap of the slot that needs them: that slot's first op waits for them.
  std::map<int, std::vector<std::int32_t>> deferred_waits_;
};

/// Data parallelism with ZeRO / FSDP: gradient reductions (per micro-batch, per chunk or after the last
/// backward), parameter gathers (FSDP per unit, ZeRO-1/2 after the step) and the optimizer step.
class DataEmitter : public Emitter {
 public:
  /// An emitter appending through `core`.
  explicit DataEmitter(BuilderCore& core);

  /// ZeRO-1/2 overlapped parameter gather: the previous step's all-gathers, at the start of this one.
  void emit_overlapped_param_gathers();
  /// Starts a forward pass of `chunk`: whether its units are gathered (FSDP).
  void begin_forward(int chunk);
  /// Starts a backward pass of `chunk`: whether its units are gathered (FSDP).
  void begin_backward(int chunk);
  /// Before a unit's forward: its FSDP gather, and on the chunk's first forward the wait for its ZeRO gather.
  void before_unit_forward(int chunk, int unit, int next_unit, bool has_next, bool first_of_chunk);
  /// FSDP: gathers a unit's parameters before its pass when needed (prefetching `next_unit` when overlapped).
  void fsdp_gather(int chunk, int unit, int next_unit, bool has_next);
  /// After a unit's backward: its gradient reduction (per micro-batch under ZeRO-2/3, else on the chunk's
  /// last backward when overlapped; otherwise queued for after the last backward).
  void after_unit_backward(int chunk, int unit, int microbatch, bool last_of_chunk);
  /// The gradient collectives after the last backward (non-overlapped buckets, the tied embedding's).
  void emit_step_grad_reductions();
  /// Optimizer step over this rank's (sharded) parameters; returns its index (the new last compute op).
  int emit_optimizer_step();
  /// ZeRO-1/2 without overlap: the parameter all-gathers right after the step (op `optimizer_index`).
  void emit_param_gathers_after_step(int optimizer_index);
  /// --fp8-all-gather: after the step (op `optimizer_index`), one all-reduce of the FP8-gathered weights'
  /// fp32 amax values over the shard group (torchao's precompute_float8_dynamic_scale_for_fsdp).
  void emit_fp8_scale_all_reduce(int optimizer_index);

 private:
  /// Parameter counts of the units a stage holds, per rank (bf16 gradient/param collectives use these).
  struct UnitParams {
    double dense = 0;      // reduced over the dp group
    double expert = 0;     // reduced over the expert-dp group
    double fp8_dense = 0;  // of `dense`: the FP8 linears' matrices (gathered in FP8 under --fp8-all-gather)
    int fp8_linears = 0;   // FP8 linear modules among them (QKV, projection, dense FFN's two)
  };

  UnitParams unit_params(int unit) const;
  /// Bytes per parameter a reduction moves: gradients reduced in bf16, or fp32 under the torchtitan trainer
  /// (its FSDP2 / DDP reduce dtype).
  double reduce_bytes_per_param() const;
  /// Bytes a collective of `kind` moves for `params` parameters of which `fp8_params` are dense FP8 linears'
  /// weights: a gather's parallel::Layout::gather_bytes, a reduction's reduce_bytes_per_param each.
  double collective_bytes(CollectiveKind kind, double params, double fp8_params) const;
  double optimizer_params() const;
  std::vector<std::int32_t> emit_param_collectives(CollectiveKind kind, int chunk, int unit, int microbatch,
                                                   Phase phase, const std::vector<std::int32_t>& deps);

  model::ParameterCounts counts_;
  GroupKind dp_group_ = GroupKind::kDp;
  bool dp_reduce_ = false;
  bool edp_reduce_ = false;
  bool hybrid_ = false;               // hybrid sharding: dense collectives over the shard/replicate groups
  std::vector<bool> chunk_gathered_;  // FSDP: the chunk's units are gathered (held from an earlier pass)
  bool gather_now_ = true;            // FSDP: the current pass gathers its units
  std::vector<std::int32_t> grad_ops_;
  std::vector<std::pair<int, int>> grad_units_in_order_;
  std::map<std::pair<int, int>, std::vector<std::int32_t>> param_gather_op_;
  std::map<int, std::vector<std::int32_t>> fsdp_prefetched_;
};

}  // namespace calo::graph::detail
