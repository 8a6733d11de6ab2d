// Execution graph of one training iteration: per-rank ordered ops on streams with dependencies.
//
// Ranks that run the same op sequence (usually all ranks of one pipeline stage: tp/dp peers differ only in
// which group members they talk to) share one RankProgram; `Graph::program_of_rank` maps a rank to its
// program and `Graph::group_of_rank` to its concrete communication groups. Semantics follow Megatron-LM (see
// docs/METRICS.md, "Execution graph", for the op sequence and the closed-form volumes).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/rank_map.h"

namespace calo::graph {

/// What an op does.
enum class OpKind : std::uint8_t {
  kGemm,         ///< matrix multiply C[m,n] = A[m,k] B[k,n]; FLOPs = 2 m n k
  kAttention,    ///< fused attention core (QK^T, softmax, AV), forward or backward
  kElementwise,  ///< norm / activation / rope / residual / loss: memory-bound, carries bytes and FLOPs
  kCollective,   ///< all-reduce, all-gather, reduce-scatter or all-to-all over a group
  kSend,         ///< point-to-point send to a pipeline peer or a context-parallel ring neighbour
  kRecv,         ///< point-to-point receive from a pipeline peer or a context-parallel ring neighbour
  kOptimizer,    ///< AdamW step over the rank's parameter shard
};
/// Number of OpKind values.
inline constexpr int kNumOpKinds = 7;

/// Whether ops of `kind` are point-to-point messages (a send or a receive).
constexpr bool is_point_to_point(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kRecv;
}
/// Whether ops of `kind` communicate (collectives and point-to-point messages) rather than compute.
constexpr bool is_communication(OpKind kind) {
  return kind == OpKind::kCollective || is_point_to_point(kind);
}

/// Execution stream of an op; ops of one stream run in order, streams of a rank run concurrently. kCpComm
/// carries the context-parallel ring's K/V (and dK/dV) exchanges, overlapped with the attention chunks.
enum class Stream : std::uint8_t { kCompute, kTpComm, kDpComm, kPpComm, kEpComm, kCpComm };
/// Number of Stream values.
inline constexpr int kNumStreams = 6;

/// Part of the iteration an op belongs to.
enum class Phase : std::uint8_t { kForward, kBackward, kRecompute, kOptimizer };

/// Element type of a GEMM's operands. kFp8: e4m3 with one scale per tensor; kFp8Rowwise: e4m3 with a scale
/// per row of A and per column of B (slower GEMM kernels); both accumulate in fp32 and write bf16.
enum class DType : std::uint8_t { kBf16, kFp32, kFp8, kFp8Rowwise };

/// Which weight a GEMM multiplies with (or, for the unfused attention core, which product it is).
enum class GemmWeight : std::uint8_t {
  kQkv,          ///< fused query/key/value projection (column parallel)
  kProj,         ///< attention output projection (row parallel)
  kFc1,          ///< dense FFN first matrix (GELU: up; gated: fused gate+up), column parallel
  kFc2,          ///< dense FFN second matrix (down), row parallel
  kLogits,       ///< output projection to the vocabulary (column parallel over the vocabulary)
  kRouter,       ///< MoE router (hidden -> experts), replicated
  kExpertFc1,    ///< one expert's first matrix (gate+up when gated)
  kExpertFc2,    ///< one expert's second matrix
  kAttnScore,    ///< unfused attention S = Q K^T (batched over sequences x heads); dgrad dQ, wgrad dK
  kAttnContext,  ///< unfused attention O = P V (batched); dgrad dP = dO V^T, wgrad dV = P^T dO
};

/// Forward product, or one of the two backward products.
enum class GemmPass : std::uint8_t {
  kForward,  ///< Y = X W
  kDgrad,    ///< dX = dY W^T
  kWgrad,    ///< dW = X^T dY
};

/// Shape of a GEMM op: C[m,n] = A[m,k] B[k,n].
struct GemmShape {
  std::int64_t m = 0;                    ///< rows of the output
  std::int64_t n = 0;                    ///< columns of the output
  std::int64_t k = 0;                    ///< reduction length
  DType dtype = DType::kBf16;            ///< operand type (accumulation is fp32)
  GemmWeight weight = GemmWeight::kQkv;  ///< which weight
  GemmPass pass = GemmPass::kForward;    ///< forward, dgrad or wgrad
  /// Global expert index for expert GEMMs, else -1. In a program shared by all EP indices
  /// (RankProgram::ep_index = -1) it is the index for EP index 0; materialize() gives each rank its own.
  std::int32_t expert = -1;
  std::int64_t batch = 1;  ///< independent products of this shape (batched GEMM: the unfused attention core)
  /// FP8 backward GEMMs: the gradient operand (dY: A of dgrad, B of wgrad) is e5m2 (torchao's tensorwise
  /// default, Transformer Engine's HYBRID format), else e4m3 like the others (rowwise; every forward GEMM).
  /// Same bytes and, on Hopper, the same rate: a label of the recipe (docs/METRICS.md "FP8 training").
  bool grad_e5m2 = false;
};

/// Shape of an attention-core op (per rank: heads are already divided by tp). Under context parallelism one
/// op is one ring step: `seq` query rows against `kv_seq` keys (see docs/METRICS.md, "Context parallel").
struct AttentionShape {
  std::int32_t batch = 0;     ///< sequences (micro-batch size)
  std::int32_t heads = 0;     ///< query heads on this rank
  std::int32_t kv_heads = 0;  ///< key/value heads on this rank
  std::int32_t seq = 0;       ///< query rows (sequence length; the rank's query tokens under cp)
  std::int32_t head_dim = 0;  ///< per-head width
  /// Causal mask; with more keys than queries it is bottom-right aligned (query row r sees keys up to
  /// kv_seq - seq + r: the queries are the last rows of the key range), as flash attention defines it.
  bool causal = true;
  bool backward = false;    ///< backward pass (2x the forward FLOPs)
  std::int32_t kv_seq = 0;  ///< key/value rows; 0 = seq (no context parallel)
  /// Context-parallel ring step (0 = the diagonal, causal step; -1 = no cp). In a program shared by the cp
  /// ranks, steps > 0 have the shape of cp index 0 (seq/2cp queries against 2 chunks of keys);
  /// materialize() gives ranks whose K/V source precedes them theirs (2 chunks of queries against one).
  std::int32_t cp_step = -1;
  /// All-gather context parallel: 1 = the rank's early query chunk, 2 = its late one (0 = not all-gather).
  /// In a shared program the key range is cp index 0's (early: 1 chunk, late: all 2cp chunks); materialize()
  /// gives rank i its own ((i+1) and (2cp-i) chunks).
  std::int8_t cp_gathered = 0;
  /// FlashAttention-2's kernel (--attention flash2), priced at its measured fraction of the fused kernel's
  /// speed (sim/cost_model.h kFlashAttention2SpeedOfCudnn).
  bool flash2 = false;
  /// Key rows of this op (kv_seq, or seq when 0).
  std::int32_t keys() const { return kv_seq > 0 ? kv_seq : seq; }
};

/// What a memory-bound op computes.
enum class ElementwiseKind : std::uint8_t {
  kNorm,          ///< LayerNorm / RMSNorm (and its backward)
  kActivation,    ///< the FFN activation: GELU, squared ReLU, SwiGLU or GeGLU (and its backward)
  kRope,          ///< rotary position embedding on q and k
  kResidualAdd,   ///< residual add (bias-dropout-add when the model has bias/dropout)
  kEmbedding,     ///< embedding lookup (+ learned positions) or its gradient scatter-add
  kCrossEntropy,  ///< vocabulary-parallel softmax cross entropy (and its gradient)
  kRouting,       ///< MoE top-k selection, permutation and weighted combine
  kSoftmax,       ///< unfused attention: scale, causal mask, softmax (+ dropout) over the s x s scores
  kCast,          ///< FP8: amax, scale and cast of a GEMM's operands (or the transposed copy backward needs)
  kCpMerge,  ///< torch context parallel: a ring step's fp32 merge of out/lse or accumulation of dQ, dK, dV
};

/// Collective operation. `Op::bytes` is the full buffer: all-reduce buffer, all-gather output, reduce-scatter
/// input, all-to-all send buffer of one rank (nccl-tests "size").
enum class CollectiveKind : std::uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll };

/// Communication group kinds of the graph: parallel::GroupKind (defined once, in parallel/rank_map.h).
using parallel::GroupKind;
using parallel::kNumGroupKinds;
using parallel::to_string;

/// One op. Fields that do not apply to its kind keep their defaults.
struct Op {
  OpKind kind = OpKind::kGemm;
  Stream stream = Stream::kCompute;
  Phase phase = Phase::kForward;
  std::int16_t chunk = 0;        ///< model chunk on this stage (interleaved schedule), else 0
  std::int32_t layer = -1;       ///< global transformer layer, -1 for embedding/output/optimizer/grad reduce
  std::int32_t microbatch = -1;  ///< micro-batch index, -1 for per-iteration ops (grad reduce, optimizer)
  double flops = 0;              ///< floating-point operations of this op on this rank
  double bytes = 0;  ///< compute ops: bytes read+written; comm ops: message bytes (see CollectiveKind)

  GemmShape gemm;                                          ///< kGemm
  AttentionShape attention;                                ///< kAttention, and kElementwise kSoftmax
  ElementwiseKind elementwise = ElementwiseKind::kNorm;    ///< kElementwise
  CollectiveKind collective = CollectiveKind::kAllReduce;  ///< kCollective
  /// kCollective: group kind (the instance comes from Graph::group_id); kSend/kRecv: kPp for pipeline
  /// messages, kCp for the context-parallel ring.
  GroupKind group = GroupKind::kTp;
  std::int32_t peer_stage = -1;  ///< kSend/kRecv (pipeline): stage of the peer (same tp, cp and dp index)
  /// kSend/kRecv over the context-parallel ring (`group` = kCp): the peer's cp index is this rank's plus
  /// peer_offset (mod cp), same tp, dp and stage; 0 for pipeline messages.
  std::int32_t peer_offset = 0;
  std::int32_t tag = -1;  ///< kSend/kRecv: matches a send to its receive (microbatch, chunk, direction)
  /// kSend/kRecv: ops of one rank with equal batch form one batched isend/irecv (NCCL group): they are issued
  /// together and complete in any order; batches run in stream order.
  std::int32_t p2p_batch = -1;
  double parameters = 0;  ///< kOptimizer: parameters updated; grad/param collectives: parameters covered

  std::uint32_t dep_begin = 0;  ///< first index into RankProgram::deps
  std::uint32_t dep_count = 0;  ///< number of dependencies
};

/// The op sequence shared by ranks of one role (pipeline stage, and expert-parallel index under imbalance).
struct RankProgram {
  std::int32_t stage = 0;          ///< pipeline stage of its ranks
  std::int32_t ep_index = -1;      ///< expert-parallel index of its ranks when programs differ by it, else -1
  std::vector<Op> ops;             ///< ops in issue order (each stream executes its ops in this order)
  std::vector<std::int32_t> deps;  ///< dependency lists of all ops, concatenated (indices of earlier ops)

  /// Indices of earlier ops (any stream of this rank) that op `op_index` waits for.
  std::span<const std::int32_t> deps_of(std::size_t op_index) const {
    return {deps.data() + ops[op_index].dep_begin, ops[op_index].dep_count};
  }
};

/// One concrete communication group.
struct CommGroup {
  GroupKind kind = GroupKind::kTp;  ///< group kind
  std::vector<std::int32_t> ranks;  ///< sorted global ranks
};

/// Options of graph building beyond the layout.
struct GraphOptions {
  /// MoE: tokens of the most loaded expert divided by the mean (1 = uniform expected top-k load). Expert 0
  /// gets imbalance x mean, the others share the rest equally; programs then differ by expert-parallel index.
  double expert_load_imbalance = 1.0;
};

/// The execution graph of one training iteration on every rank.
struct Graph {
  model::ModelSpec model;                     ///< the model
  parallel::Layout layout;                    ///< the resolved layout
  GraphOptions options;                       ///< build options
  std::vector<RankProgram> programs;          ///< distinct op programs
  std::vector<std::int32_t> program_of_rank;  ///< rank -> index into `programs`
  std::vector<CommGroup> groups;              ///< all concrete groups
  /// rank -> group id per GroupKind (index into `groups`), -1 where the rank has no such group.
  std::vector<std::array<std::int32_t, kNumGroupKinds>> group_of_rank;

  /// Number of ranks.
  int world_size() const { return static_cast<int>(program_of_rank.size()); }
  /// The program rank `rank` runs.
  const RankProgram& program(int rank) const { return programs[program_of_rank[rank]]; }
  /// Id of the `kind` group of `rank` (-1 if none).
  int group_id(int rank, GroupKind kind) const { return group_of_rank[rank][static_cast<int>(kind)]; }
  /// Global rank of the peer of a kSend/kRecv op issued by `rank`.
  int peer_rank(int rank, const Op& op) const;
};

/// Builds the graph of one iteration for `model` under a resolved layout (parallel::resolve_layout).
/// Throws InputError for option values out of range.
Graph build_graph(const model::ModelSpec& model, const parallel::Layout& layout,
                  const GraphOptions& options = {});

/// The evaluation step of `training` (calo sim --eval): its forward ops in issue order, without backward,
/// recompute, optimizer, gradient collectives or ZeRO-1/2 parameter gathers (src/graph/evaluation.cpp).
Graph evaluation_graph(Graph training);

/// Gives a context-parallel attention op of a shared program the shape rank `cp_index` runs: a ring step
/// (cp_step > 0: c x 2c or 2c x c) or an all-gather chunk (cp_gathered: its key range); docs/METRICS.md,
/// "Context parallel". Other ops are left as they are.
void resolve_ring_step(AttentionShape& shape, int cp_index, int cp);

/// FLOPs of an attention-core op of `shape` on one rank: 4 b h d per query-key pair forward, twice that
/// backward; pairs = seq keys(), or seq (keys() - seq) + seq^2 / 2 under the bottom-right causal mask.
double attention_flops(const AttentionShape& shape);

/// Bytes an attention-core op of `shape` reads and writes (flash attention: q, o per query row and k, v per
/// key row in bf16; backward twice that with the gradients).
double attention_bytes(const AttentionShape& shape);

/// One op of a materialized rank with its concrete group or peer.
struct RankOp {
  Op op;                           ///< the op (dep indices refer to `deps`)
  std::vector<std::int32_t> deps;  ///< indices of earlier ops of the same rank
  std::int32_t group_id = -1;      ///< kCollective: index into Graph::groups
  std::int32_t peer_rank = -1;     ///< kSend/kRecv: global rank of the peer
};

/// The full op list of one rank, with groups and peers resolved (for printing, executors and tests).
std::vector<RankOp> materialize(const Graph& graph, int rank);

/// Whether a GEMM is part of the unfused attention core (kAttnScore / kAttnContext).
bool is_attention_gemm(const Op& op);
/// The op's share of the model FLOPs (MFU's numerator): GEMMs and the attention core outside recompute; the
/// unfused core multiplies the masked half of causal scores too, which the model does not count.
double model_flops(const Op& op);

/// Names: "gemm", "attention", "elementwise", "collective", "send", "recv", "optimizer".
const char* to_string(OpKind kind);
/// Names: "compute", "tp-comm", "dp-comm", "pp-comm", "ep-comm", "cp-comm".
const char* to_string(Stream stream);
/// Names: "fwd", "bwd", "recompute", "optimizer".
const char* to_string(Phase phase);
/// Names: "bf16", "fp32".
const char* to_string(DType dtype);
/// Names: "qkv", "proj", "fc1", "fc2", "logits", "router", "expert_fc1", "expert_fc2", "attn_score",
/// "attn_context".
const char* to_string(GemmWeight weight);
/// Names: "fwd", "dgrad", "wgrad".
const char* to_string(GemmPass pass);
/// Names: "norm", "activation", "rope", "residual_add", "embedding", "cross_entropy", "routing", "softmax".
const char* to_string(ElementwiseKind kind);
/// Names: "all_reduce", "all_gather", "reduce_scatter", "all_to_all".
const char* to_string(CollectiveKind kind);
/// Names: "tp", "dp", "pp", "ep", "edp", "embedding".
/// Short human description of an op, e.g. "gemm qkv fwd m=4096 n=1536 k=4096".
std::string describe(const Op& op);
/// Short name of an op as executed-op spans carry it ("gemm.fc1.fwd", "attention.bwd", "elementwise.norm",
/// ...).
std::string span_name(const Op& op);

}  // namespace calo::graph
