// Parallel layout of one training job: how ranks split the model and the batch, and which optimizations run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/accounting.h"
#include "parallel/axes.h"

namespace calo::parallel {

/// Activation recomputation mode (defined with the accounting that uses it).
using model::Recompute;
/// Pipeline schedule; each has one entry in parallel/schedule.h's kSchedules (name, help, plan axis, slots).
enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1, kZbV };
/// Attention core implementation: fused flash-style kernel (causal half of s^2, no s^2 activations; priced
/// as the cluster's attention fit, calo's own runs of cuDNN's), unfused batched GEMM + softmax + batched GEMM
/// (full s^2 products, softmax output kept for backward), or `flash2`: fused, but FlashAttention-2's kernel,
/// which PyTorch's SDPA ran on Hopper until cuDNN became its default (2.9), at its measured fraction of
/// cuDNN's speed (sim/cost_model.h kFlashAttention2SpeedOfCudnn).
enum class AttentionImpl { kFused, kUnfused, kFlash2 };
/// True for the fused attention cores (fused, flash2): no s^2 activations.
bool is_fused(AttentionImpl attention);
/// How context-parallel attention moves K/V (Megatron-LM --cp-comm-type): a p2p ring overlapped with the
/// attention steps (TransformerEngine's default), or one all-gather of K/V before attention and a
/// reduce-scatter of dK/dV after its backward (as Llama 3 trained), or PyTorch's experimental context
/// parallel as torchtitan ran it (K/V at query heads all-gathered behind the first step, dK/dV passed on in
/// fp32).
enum class CpComm { kP2p, kAllGather, kTorch };
/// Whose memory accounting the job follows (it changes what memory holds and, for torchtitan, which reduces
/// gradients in fp32, the gradient collectives' bytes; no other op; docs/METRICS.md
/// "Memory per GPU"): `default`, bf16 gradients and the loss's saved fp32 logits; `pytorch`, a plain PyTorch
/// mixed-precision trainer (bf16 weights, an fp32 master gradient that outlives the bf16 one, plain
/// cross-entropy, whose backward holds two fp32 tensors of the logits' size at the step's peak);
/// `torchtitan`, torchtitan's FSDP2 (--zero 3) or DDP/one-GPU (--zero 0) mixed precision: fp32 parameters,
/// bf16 compute copies, gradients freed at each step's start, its loss compiled (fused cross-entropy);
/// `torchtitan-eager-loss`, the same with its cross-entropy uncompiled (eager mode, or torchtitan before it
/// compiled the loss, e.g. 9dec370 of its Dec 2024 tables): the fp32 upcast's backward holds two fp32
/// tensors of the logits' size at the loss, as the pytorch trainer's.
enum class Trainer { kDefault, kPytorch, kTorchtitan, kTorchtitanEagerLoss };
/// Precision of the transformer linears (QKV, projection, FFN and expert matrices; attention, norms,
/// embedding and the output layer stay bf16): bf16, or FP8 e4m3 operands with fp32 accumulation and bf16
/// output under one of three recipes: torchao's dynamic scaling, one scale per tensor ("tensorwise", its
/// default) or one per row ("rowwise"), each cast in kernels of its own; or Transformer Engine's delayed
/// scaling (NeMo, Megatron-LM, MLPerf), its casts fused into the kernels that produce the operands and the
/// weights cast once per step. The cast work runs as ops of its own (docs/METRICS.md "FP8 training").
enum class Precision { kBf16, kFp8Tensorwise, kFp8Rowwise, kFp8Delayed };

/// Most GPUs one layout may span: a limit on the work an input can ask for (--gpus 1e8 took 9 GB and
/// minutes).
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;
/// Most micro-batches per step (the graph holds a run of ops for each; --gbs 1e8 on 8 GPUs took 10 GB).
inline constexpr int kMaxMicrobatches = 1 << 14;

/// A parallel layout. world = tp * cp * pp * dp; ep divides dp (expert parallel is carved out of data
/// parallel, as in Megatron-LM); ranks are ordered tp-cp-ep-dp-pp (tp fastest). Context parallel (cp) splits
/// each sequence over cp ranks that hold the same parameters; gradients are reduced over dp*cp ranks.
struct Layout {
  int tp = 1;                      ///< tensor-parallel size
  int cp = 1;                      ///< context-parallel size (sequence split, ring attention)
  CpComm cp_comm = CpComm::kP2p;   ///< K/V exchange of context-parallel attention
  int pp = 1;                      ///< pipeline-parallel size (stages)
  int dp = 1;                      ///< data-parallel size (replicas of the dense part)
  int ep = 1;                      ///< expert-parallel size (MoE only); divides dp * cp
  bool sequence_parallel = false;  ///< split norm/dropout activations over tp (default on when tp > 1)
  int zero_stage = 0;  ///< 0 none, 1 optimizer state sharded, 2 + gradients sharded, 3 fully sharded (FSDP)
  /// ZeRO-3 shard group size S (hybrid sharding, HSDP): parameters are sharded over S consecutive dp ranks
  /// and replicated over dp / S such groups; 0 = dp (full sharding).
  int fsdp_shard_size = 0;
  /// ZeRO-3: free gathered parameters after each unit's forward and gather them again for its backward
  /// (PyTorch FSDP reshard_after_forward=True); false keeps them until the unit's backward (ZeRO-2-like
  /// FSDP).
  bool reshard_after_forward = true;
  int micro_batch = 1;   ///< sequences per micro-batch per data-parallel rank
  int global_batch = 0;  ///< sequences per iteration; 0 = micro_batch * dp (one micro-batch)
  int seq_length = 0;    ///< tokens per sequence; 0 = the model's default
  Recompute recompute = Recompute::kNone;
  bool overlap_tp_comm = false;       ///< TP collectives overlap with GEMMs (comm on its own stream)
  bool overlap_grad_reduce = false;   ///< DP gradient reduction overlaps with backward
  bool overlap_param_gather = false;  ///< parameter all-gather (ZeRO/FSDP) overlaps with forward
  Schedule schedule = Schedule::k1F1B;
  int virtual_stages = 1;             ///< model chunks per pipeline rank (interleaved schedule)
  std::vector<int> layers_per_stage;  ///< explicit partition (size pp * virtual_stages); empty = uniform
  /// Stage -> GPU order (size pp): pipeline stage s runs on the GPUs that Megatron's rank order gives stage
  /// stage_gpus[s] (`calo plan partition`'s order); empty = that order itself.
  std::vector<int> stage_gpus;
  AttentionImpl attention = AttentionImpl::kFused;  ///< attention core implementation
  /// Megatron-LM's pipeline scatter/gather: without sequence parallel and with tp > 1, each TP rank sends
  /// 1/tp of the stage boundary activation and the receivers all-gather it over the TP group.
  bool pipeline_scatter_gather = true;
  Trainer trainer = Trainer::kDefault;     ///< memory accounting convention (no effect on the graph)
  Precision precision = Precision::kBf16;  ///< precision of the transformer linears
  /// FSDP (--zero 3) all-gathers the dense FP8 linears' weights as FP8, 1 byte a parameter, with one
  /// all-reduce of their scales after the optimizer step (torchtitan's enable_fsdp_float8_all_gather and
  /// precompute_float8_dynamic_scale_for_fsdp; tensorwise `fp8` only).
  bool fp8_all_gather = false;
  /// Whether the transformer linears run in FP8.
  bool fp8() const { return precision != Precision::kBf16; }
  /// Whether the recipe casts an FP8 linear's sequence-parallel operand before its tensor-parallel all-gather
  /// (Transformer Engine's delayed scaling, torchao's tensorwise float8; rowwise gathers bf16).
  bool fp8_sequence_gathers() const {
    return precision == Precision::kFp8Delayed || precision == Precision::kFp8Tensorwise;
  }
  /// Whether fp8_all_gather can apply: tensorwise FP8 under ZeRO-3 over a shard group of more than one rank.
  bool fp8_all_gather_applies() const {
    const int shard_ranks = hybrid_sharding() ? shard_size() : grad_reduce_size();
    return precision == Precision::kFp8Tensorwise && zero_stage == 3 && shard_ranks > 1;
  }
  /// Bytes an FSDP all-gather moves (and the gathered buffer holds) for `params` parameters of which
  /// `fp8_params` are dense FP8 linears' weights: 2 each (bf16), 1 for those under fp8_all_gather.
  double gather_bytes(double params, double fp8_params) const {
    return 2.0 * params - (fp8_all_gather ? fp8_params : 0.0);
  }

  /// Total ranks: tp * cp * pp * dp.
  int world_size() const { return tp * cp * pp * dp; }
  /// Ranks that hold the same parameter shard (gradient-reduction and ZeRO group size): dp * cp.
  int grad_reduce_size() const { return dp * cp; }
  /// Whether ep divides the dp * cp replicas it is carved out of (Megatron-Core's rule; the one home of it:
  /// validation, the rank map and the memory model ask here).
  bool ep_divides_replicas() const { return ep >= 1 && (dp * cp) % ep == 0; }
  /// Expert-data-parallel group size: dp * cp / ep (Megatron-Core carves ep out of the dp * cp ranks).
  int expert_dp_size() const { return dp * cp / ep; }
  /// `rank`'s index among its stage's dp * cp replicas, cp_index + cp * dp_index (rank order tp-cp-dp-pp).
  int replica_index(int rank) const { return (rank / tp) % (cp * dp); }
  /// `rank`'s expert-parallel index: replica_index mod ep (its experts are [index, index + 1) * E / ep).
  int ep_index(int rank) const { return replica_index(rank) % ep; }
  /// Micro-batches per iteration per pipeline: global_batch / (micro_batch * dp).
  int num_microbatches() const { return global_batch / (micro_batch * dp); }
  /// Whether pipeline scatter/gather is in effect: asked for, pp > 1, tp > 1 and sequence parallel off.
  bool scatter_gather_in_effect() const {
    return pipeline_scatter_gather && pp > 1 && tp > 1 && !sequence_parallel;
  }
  /// The rank position whose GPU runs `rank` under stage_gpus (rank itself without one): rank order is
  /// tp-cp-ep-dp-pp, so stage s holds ranks [s * world / pp, (s + 1) * world / pp).
  int gpu_of_rank(int rank) const {
    if (stage_gpus.empty()) return rank;
    const int stage_size = world_size() / pp;
    return stage_gpus[rank / stage_size] * stage_size + rank % stage_size;
  }
  /// Whether the stages hold different numbers of layers (an explicit, uneven --layers-per-stage).
  bool uneven_partition() const {
    return std::adjacent_find(layers_per_stage.begin(), layers_per_stage.end(), std::not_equal_to<>()) !=
           layers_per_stage.end();
  }
  /// ZeRO-3 shard group size: fsdp_shard_size, or dp when 0.
  int shard_size() const { return fsdp_shard_size > 0 ? fsdp_shard_size : dp; }
  /// True under hybrid sharding: ZeRO-3 with a shard group smaller than dp.
  bool hybrid_sharding() const { return zero_stage == 3 && shard_size() < dp; }
};

/// Layout as JSON (for --json output and the run store's config).
nlohmann::json to_json(const Layout& layout);
/// Layout from the JSON to_json writes (a run's config_json "layout"); absent keys keep their defaults.
Layout layout_from_json(const nlohmann::json& object);
/// Short human label, e.g. "TP4-PP2-DP1 mbs1 gbs8 1f1b".
std::string describe(const Layout& layout);
/// Layers per (virtual) stage as --layers-per-stage takes them: comma-separated, a run of three or more equal
/// counts written COUNTxREPEAT, e.g. "0,1x126,0" for Llama 3 405B's 128 chunks.
std::string partition_text(const std::vector<int>& layers_per_stage);
/// The recomputation axis: --recompute, campaign key recompute.
inline constexpr Axis<Recompute, 4> kRecomputeAxis{
    "--recompute", "recompute", "a mode", {"none", "selective", "full", "op"}};
/// The context-parallel communication axis: --cp-comm, campaign key cp-comm.
inline constexpr Axis<CpComm, 3> kCpCommAxis{
    "--cp-comm", "cp-comm", "a context-parallel communication", {"p2p", "allgather", "torch"}};
/// The precision axis: --precision, campaign key precision ("fp8" is tensorwise scaling, torchao's default).
inline constexpr Axis<Precision, 4> kPrecisionAxis{
    "--precision", "precision", "a precision", {"bf16", "fp8", "fp8-rowwise", "fp8-delayed"}};
/// Name of a precision ("bf16", "fp8", "fp8-rowwise", "fp8-delayed").
std::string to_string(Precision precision);
/// Parses "none|selective|full"; throws InputError naming the flag on anything else.
Recompute parse_recompute(const std::string& text);
/// Parses a schedule's name (parallel/schedule.h's kSchedules); throws InputError naming the flag otherwise.
Schedule parse_schedule(const std::string& text);
/// Parses "p2p|allgather|torch"; throws InputError naming --cp-comm on anything else.
CpComm parse_cp_comm(const std::string& text);
/// Name of a cp communication kind ("p2p", "allgather", "torch").
std::string to_string(CpComm comm);
/// Name of a recompute mode ("none", "selective", "full", "op").
std::string to_string(Recompute recompute);
/// Name of a schedule (its kSchedules entry's).
std::string to_string(Schedule schedule);
/// Parses "fused|unfused"; throws InputError naming `what` (the flag or key) on anything else.
AttentionImpl parse_attention(const std::string& text, const std::string& what = "--attention");
/// Name of an attention implementation ("fused", "unfused").
std::string to_string(AttentionImpl attention);
/// True for either torchtitan accounting (torchtitan, torchtitan-eager-loss).
bool is_torchtitan(Trainer trainer);
/// Parses "default|pytorch|torchtitan|torchtitan-eager-loss"; throws InputError naming `what` (the flag or
/// key) on anything else.
Trainer parse_trainer(const std::string& text, const std::string& what = "--trainer");
/// Name of a trainer's memory accounting ("default", "pytorch", "torchtitan").
std::string to_string(Trainer trainer);
/// Bytes per parameter a gradient reduction moves under `trainer`: bf16 (2), or fp32 (4) for torchtitan,
/// whose FSDP2 / DDP reduce in fp32.
double gradient_reduce_bytes_per_param(Trainer trainer);

}  // namespace calo::parallel
