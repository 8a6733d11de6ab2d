// The graph's checkers, kept on purpose as an oracle independent of the builder: a second reading of the
// built ops (collective order, p2p matching, a rendezvous deadlock simulation of its own, separate from
// sim::Engine) and closed forms of what the ops must add up to (FLOPs from model/accounting.h, each
// parallelism's communication volume written out here, not taken from the emitters). What is not the point of
// the oracle is shared rather than written twice: the model's per-token accounting (model/accounting.h) and
// the pipeline's slot order (parallel::stage_schedule, which the ZeRO-3 gather count replays). It holds no
// activation-lifetime model: parallel/memory.cpp replays the slot order for the model's peak and
// exec/memory_ledger.cpp derives lifetimes from the built ops, and calo bench --memory real compares the two.
#include "graph/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "graph/check_internal.h"
#include "model/accounting.h"
#include "parallel/schedule.h"

namespace calo::graph {

using detail::add_problem;

std::string to_text(const std::vector<Problem>& problems) {
  std::string text;
  for (const auto& problem : problems) text += problem.check + ": " + problem.message + "\n";
  return text;
}

namespace {

constexpr double kRelativeTolerance = 1e-9;

bool close(double actual, double expected) {
  return std::abs(actual - expected) <=
         kRelativeTolerance * std::max({1.0, std::abs(actual), std::abs(expected)});
}

/// Number of ranks running each program.
std::vector<double> ranks_per_program(const Graph& graph) {
  std::vector<double> counts(graph.programs.size(), 0.0);
  for (int program : graph.program_of_rank) counts[program] += 1.0;
  return counts;
}

// Calls visit(op, ranks) for every op of every program, `ranks` the number of ranks that run the program.
template <typename Visit>
void for_each_op_with_ranks(const Graph& graph, Visit visit) {
  const std::vector<double> counts = ranks_per_program(graph);
  for (std::size_t program = 0; program < graph.programs.size(); ++program) {
    for (const Op& op : graph.programs[program].ops) visit(op, counts[program]);
  }
}

}  // namespace

// ---- collectives
// ------------------------------------------------------------------------------------------------

std::vector<Problem> check_collectives(const Graph& graph) {
  std::vector<Problem> problems;
  // Signature of a program for one group kind: its collectives of that kind in issue order.
  std::map<std::pair<int, int>, std::vector<const Op*>> signatures;
  auto signature = [&](int program_index, GroupKind kind) -> const std::vector<const Op*>& {
    auto key = std::make_pair(program_index, static_cast<int>(kind));
    auto found = signatures.find(key);
    if (found != signatures.end()) return found->second;
    std::vector<const Op*> ops;
    for (const Op& op : graph.programs[program_index].ops)
      if (op.kind == OpKind::kCollective && op.group == kind) ops.push_back(&op);
    return signatures.emplace(key, std::move(ops)).first->second;
  };
  // Every collective a program issues must have a group on each of its ranks.
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    for (int kind = 0; kind < kNumGroupKinds; ++kind) {
      const auto group_kind = static_cast<GroupKind>(kind);
      if (graph.group_id(rank, group_kind) < 0 && !signature(graph.program_of_rank[rank], group_kind).empty())
        add_problem(
            problems, "collectives",
            fmt::format("rank {} issues {} collectives but belongs to no {} group", rank,
                        signature(graph.program_of_rank[rank], group_kind).size(), to_string(group_kind)));
    }
  }
  std::map<std::tuple<int, int, int>, bool> compared;  // (program a, program b, kind) -> equal
  for (std::size_t group_id = 0; group_id < graph.groups.size(); ++group_id) {
    const CommGroup& group = graph.groups[group_id];
    if (group.ranks.empty()) continue;
    const int first_rank = group.ranks.front();
    const int first_program = graph.program_of_rank[first_rank];
    for (int member : group.ranks) {
      if (graph.group_id(member, group.kind) != static_cast<int>(group_id)) {
        add_problem(problems, "collectives",
                    fmt::format("rank {} is listed in {} group {} but maps to group {}", member,
                                to_string(group.kind), group_id, graph.group_id(member, group.kind)));
        continue;
      }
      const int program = graph.program_of_rank[member];
      if (program == first_program) continue;
      auto key = std::make_tuple(first_program, program, static_cast<int>(group.kind));
      if (compared.count(key)) continue;
      const auto& expected = signature(first_program, group.kind);
      const auto& actual = signature(program, group.kind);
      bool equal = true;
      const std::size_t common = std::min(expected.size(), actual.size());
      for (std::size_t position = 0; position < common; ++position) {
        const Op& a = *expected[position];
        const Op& b = *actual[position];
        if (a.collective != b.collective || !close(a.bytes, b.bytes)) {
          add_problem(
              problems, "collectives",
              fmt::format("{} group {}: collective #{} is {} {:.0f} B on rank {} but {} {:.0f} B on rank {}",
                          to_string(group.kind), group_id, position, to_string(a.collective), a.bytes,
                          first_rank, to_string(b.collective), b.bytes, member));
          equal = false;
          break;
        }
      }
      if (equal && expected.size() != actual.size()) {
        add_problem(
            problems, "collectives",
            fmt::format("{} group {}: rank {} issues {} collectives, rank {} issues {}",
                        to_string(group.kind), group_id, first_rank, expected.size(), member, actual.size()));
        equal = false;
      }
      compared[key] = equal;
    }
  }
  return problems;
}

// ---- point to point
// ---------------------------------------------------------------------------------------------

std::vector<Problem> check_point_to_point(const Graph& graph) {
  std::vector<Problem> problems;
  // (source, destination, tag, bytes): sends and receives must form equal multisets.
  using Message = std::tuple<int, int, int, double>;
  std::vector<Message> sends, receives;
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    for (const Op& op : graph.program(rank).ops) {
      if (!is_point_to_point(op.kind)) continue;
      const int peer = graph.peer_rank(rank, op);
      if (peer < 0 || peer >= graph.world_size()) {
        add_problem(problems, "p2p", fmt::format("rank {}: {} has no valid peer", rank, describe(op)));
        continue;
      }
      if (op.kind == OpKind::kSend) {
        sends.emplace_back(rank, peer, op.tag, op.bytes);
      } else {
        receives.emplace_back(peer, rank, op.tag, op.bytes);
      }
    }
  }
  std::sort(sends.begin(), sends.end());
  std::sort(receives.begin(), receives.end());
  std::vector<Message> unmatched_sends, unmatched_receives;
  std::set_difference(sends.begin(), sends.end(), receives.begin(), receives.end(),
                      std::back_inserter(unmatched_sends));
  std::set_difference(receives.begin(), receives.end(), sends.begin(), sends.end(),
                      std::back_inserter(unmatched_receives));
  for (const auto& [source, destination, tag, bytes] : unmatched_sends)
    add_problem(problems, "p2p",
                fmt::format("send {} -> {} tag {} ({:.0f} B) has no matching receive", source, destination,
                            tag, bytes));
  for (const auto& [source, destination, tag, bytes] : unmatched_receives)
    add_problem(problems, "p2p",
                fmt::format("receive {} <- {} tag {} ({:.0f} B) has no matching send", destination, source,
                            tag, bytes));
  return problems;
}

// ---- FLOPs
// ------------------------------------------------------------------------------------------------------

FlopTotals flop_totals(const Graph& graph) {
  FlopTotals totals;
  for_each_op_with_ranks(graph, [&](const Op& op, double ranks) {
    if (op.kind == OpKind::kGemm && !is_attention_gemm(op)) totals.gemm += op.flops * ranks;
    if (op.kind == OpKind::kAttention || is_attention_gemm(op)) totals.attention += op.flops * ranks;
  });
  const auto& layout = graph.layout;
  const double tokens = static_cast<double>(layout.global_batch) * layout.seq_length;
  const auto per_token = model::flops_per_token(graph.model, layout.seq_length);
  const double recompute = model::recompute_flops_per_token(graph.model, layout.seq_length, layout.recompute);
  double recompute_attention = 0;
  if (layout.recompute == model::Recompute::kSelective) recompute_attention = recompute;
  if (layout.recompute == model::Recompute::kFull) recompute_attention = per_token.attention_forward;
  const double gemm_forward = per_token.forward - per_token.attention_forward;
  totals.expected_gemm = tokens * (3.0 * gemm_forward + (recompute - recompute_attention));
  // The unfused core multiplies the full s x s scores (the causal mask is applied in its softmax).
  const double attention_forward =
      layout.attention == parallel::AttentionImpl::kUnfused
          ? model::attention_flops_per_token(graph.model, layout.seq_length, /*causal=*/false)
          : per_token.attention_forward;
  // Selective and full recompute run the attention core again; op-level checkpointing saves its output.
  const bool attention_again =
      layout.recompute == model::Recompute::kSelective || layout.recompute == model::Recompute::kFull;
  const double recomputed = attention_again ? attention_forward : 0.0;
  totals.expected_attention = tokens * (3.0 * attention_forward + recomputed);
  return totals;
}

std::vector<Problem> check_flops(const Graph& graph) {
  std::vector<Problem> problems;
  const FlopTotals totals = flop_totals(graph);
  if (!close(totals.gemm, totals.expected_gemm))
    add_problem(problems, "flops",
                fmt::format("GEMM FLOPs over all ranks {:.6e} != model {:.6e} (ratio {:.9f})", totals.gemm,
                            totals.expected_gemm, totals.gemm / totals.expected_gemm));
  if (!close(totals.attention, totals.expected_attention))
    add_problem(
        problems, "flops",
        fmt::format("attention FLOPs over all ranks {:.6e} != model {:.6e} (ratio {:.9f})", totals.attention,
                    totals.expected_attention, totals.attention / totals.expected_attention));
  return problems;
}

// ---- communication volumes
// ----------------------------------------------------------------------------------

CommVolumes comm_volumes(const Graph& graph) {
  CommVolumes volumes;
  for_each_op_with_ranks(graph, [&](const Op& op, double ranks) {
    const double bytes = op.bytes * ranks;
    if (op.kind == OpKind::kSend) (op.group == GroupKind::kCp ? volumes.cp_bytes : volumes.pp_bytes) += bytes;
    if (op.kind != OpKind::kCollective) return;
    switch (op.group) {
      case GroupKind::kTp:
        volumes.tp_bytes += bytes;
        break;
      case GroupKind::kDp:
      case GroupKind::kDpCp:
      case GroupKind::kExpertDp:
      case GroupKind::kEmbedding:
      case GroupKind::kDpShard:
        volumes.dp_bytes += bytes;
        break;
      case GroupKind::kDpReplicate:
        volumes.dp_bytes += bytes;
        volumes.dp_replicate_bytes += bytes;
        break;
      case GroupKind::kCp:
        volumes.cp_bytes += bytes;
        break;
      case GroupKind::kPp:
        volumes.pp_bytes += bytes;
        break;
      case GroupKind::kEp:
        volumes.ep_bytes += bytes;
        break;
    }
  });
  return volumes;
}

double expected_cp_attention_flops_per_rank(const model::ModelSpec& model, const parallel::Layout& layout,
                                            bool backward) {
  // Each rank runs cp steps of 2 c^2 query-key pairs (c = s / 2cp): b s^2 / (2 cp) pairs, the causal
  // s^2 / 2 pairs of cp = 1 divided by cp; 4 FLOPs per pair and head dimension (QK^T and PV), x2 backward.
  const double s = layout.seq_length, b = layout.micro_batch;
  const double heads = static_cast<double>(model.num_attention_heads / layout.tp);
  const double forward = 4.0 * b * heads * model.head_dim * s * s / (2.0 * layout.cp);
  return backward ? 2.0 * forward : forward;
}

double expected_cp_bytes_per_layer(const model::ModelSpec& model, const parallel::Layout& layout) {
  if (layout.cp == 1) return 0.0;
  // K and V of the rank's T = b s / cp tokens, kv heads split over tp, bf16: the ring sends them cp-1 times
  // forward and (with dK, dV) 2 (cp-1) times backward; recomputation (selective or full) runs it again.
  const double tokens = static_cast<double>(layout.micro_batch) * layout.seq_length / layout.cp;
  const double kv = 2.0 * tokens * static_cast<double>(model.kv_size() / layout.tp) * 2.0;
  const bool attention_again =
      layout.recompute == model::Recompute::kSelective || layout.recompute == model::Recompute::kFull;
  const double passes = 3.0 + (attention_again ? 1.0 : 0.0);
  // All-gather variant, bytes as the collectives count them (all-gather output, reduce-scatter input): a
  // gather of cp K/V forward, a gather and a reduce-scatter backward, a gather again when recomputed.
  if (layout.cp_comm == parallel::CpComm::kAllGather) return layout.cp * kv * passes;
  if (layout.cp_comm == parallel::CpComm::kTorch) {
    // torch's context parallel: K/V at the query heads (bf16), gathered forward, backward and when
    // recomputed; backward also sends the accumulated dK/dV (fp32, query heads) cp times.
    const double values = tokens * static_cast<double>(model.q_size() / layout.tp);
    const double gathers = 2.0 + (attention_again ? 1.0 : 0.0);
    return layout.cp * (2.0 * 2.0 * values * gathers + 2.0 * 4.0 * values);
  }
  return (layout.cp - 1) * kv * passes;
}

namespace {

/// Symbols of docs/METRICS.md's closed forms, from model and layout.
struct VolumeSymbols {
  double t = 0, c = 0, d = 0, e = 0, m = 0;  // tp, cp, dp, ep sizes and micro-batches
  double h = 0;                              // hidden size
  double tokens = 0;                         // T = b s / c tokens per micro-batch on a rank
  bool sp = false;                           // sequence parallel in effect
  double tokens_local = 0;                   // T_l = T/t under sequence parallel, else T
  double ranks_per_stage = 0;                // C = t c d
  double full = 0;                           // R = 1 with full recompute else 0
  double act_bytes = 0;                      // bf16 activation of one micro-batch, T x h
  double k = 0;                              // experts per token (0 for dense models)
  std::vector<parallel::LayerRange> partition;
  int virtual_stages = 0;
  model::ParameterCounts counts;
  double word = 0;  // word-embedding parameters
};

/// Computes the closed forms' symbols.
VolumeSymbols volume_symbols(const model::ModelSpec& model, const parallel::Layout& layout) {
  VolumeSymbols sym;
  sym.t = layout.tp;
  sym.c = layout.cp;
  sym.d = layout.dp;
  sym.e = layout.ep;
  sym.m = layout.num_microbatches();
  sym.h = model.hidden_size;
  sym.tokens = static_cast<double>(layout.micro_batch) * layout.seq_length / sym.c;
  sym.sp = layout.sequence_parallel && layout.tp > 1;
  sym.tokens_local = sym.sp ? sym.tokens / sym.t : sym.tokens;
  sym.ranks_per_stage = sym.t * sym.c * sym.d;
  sym.full = layout.recompute == model::Recompute::kFull ? 1.0 : 0.0;
  sym.act_bytes = 2.0 * sym.tokens * sym.h;
  sym.k = model.is_moe() ? model.moe_top_k : 0;
  sym.partition = parallel::layer_partition(layout, model.num_layers);
  sym.virtual_stages = static_cast<int>(sym.partition.size());
  sym.counts = model::count_parameters(model);
  sym.word = sym.counts.embedding - sym.counts.positions;
  return sym;
}

/// Tensor-parallel bytes over all ranks (per rank per micro-batch, times C m); 0 without tp.
double expected_tp_bytes(const model::ModelSpec& model, const parallel::Layout& layout,
                         const VolumeSymbols& sym) {
  if (layout.tp <= 1) return 0.0;
  const double act = sym.act_bytes, full = sym.full;
  // g: an all-gather feeding an FP8 linear moves FP8 under the recipes that cast before they gather.
  const double g = layout.fp8_sequence_gathers() ? 0.5 : 1.0;
  // Sequence parallel: forward gathers 2 (QKV, FC1 inputs) and reduce-scatters 2; backward gathers the output
  // gradients 2 and re-gathers the inputs 2, and reduce-scatters 2; full recompute runs the forward again.
  double dense_layer =
      sym.sp ? ((6.0 * g + 4.0) + (2.0 * g + 2.0) * full) * act : (2.0 + 2.0 + 2.0 * full) * act;
  if (model.is_moe()) {
    // Attention half of the dense layer plus TP gather/scatter of the routed tokens: 2 (fwd) + 2 (bwd).
    const double attention = sym.sp ? (3.0 * g + 2.0) + (g + 1.0) * full : 2.0 + 3.0 + 2.0 * full;
    dense_layer = attention * act + (2.0 + 2.0 + 2.0 * full) * 2.0 * sym.tokens * sym.k * sym.h;
  }
  const double embedding = sym.sp ? 2.0 * act : act;
  const double output = (sym.sp ? 3.0 * act : act) + 12.0 * sym.tokens;
  double per_rank = 0;
  for (int virtual_stage = 0; virtual_stage < sym.virtual_stages; ++virtual_stage) {
    per_rank += sym.partition[virtual_stage].count * dense_layer;
    if (virtual_stage == 0) per_rank += embedding;
    if (virtual_stage == sym.virtual_stages - 1) per_rank += output;
  }
  return sym.ranks_per_stage * sym.m * per_rank;
}

/// Per rank of one virtual stage: the dense FP8 linears' matrices (attention, dense FFN) and their modules
/// (QKV, projection, and the dense FFN's two), which --fp8-all-gather gathers in FP8; {0, 0} in bf16.
std::pair<double, double> stage_fp8_dense(const model::ModelSpec& model, const parallel::Layout& layout,
                                          const VolumeSymbols& sym, int virtual_stage) {
  if (!layout.fp8()) return {0.0, 0.0};
  const double layers = sym.partition[virtual_stage].count;
  const double ffn = model.is_moe() ? 0.0 : sym.counts.per_ffn_matrices;
  return {layers * (sym.counts.per_layer_attention_matrices + ffn) / sym.t,
          layers * (model.is_moe() ? 2 : 4)};
}

/// Per-rank dense and expert parameters of one virtual stage.
std::pair<double, double> stage_parameters(const model::ModelSpec& model, const parallel::Layout& layout,
                                           const VolumeSymbols& sym, int virtual_stage) {
  const auto& counts = sym.counts;
  const double t = sym.t;
  double dense = 0, expert = 0;
  const double layers = sym.partition[virtual_stage].count;
  if (model.is_moe()) {
    dense += layers * (counts.per_layer_attention / t + counts.per_layer_norm + counts.per_layer_router);
    expert += layers * counts.per_expert * (model.num_experts / sym.e) / t;
  } else {
    dense += layers * ((counts.per_layer_attention + counts.per_layer_mlp) / t + counts.per_layer_norm);
  }
  if (virtual_stage == 0) dense += sym.word / t + counts.positions;
  if (virtual_stage == sym.virtual_stages - 1) {
    const double output = model.tied_embeddings ? (layout.pp > 1 ? sym.word : 0.0) : counts.output;
    dense += output / t + counts.final_norm;
  }
  return {dense, expert};
}

/// Collectives each parameter of a chunk takes part in per iteration, by ZeRO stage: gathers of its bf16
/// value and reductions of its gradient.
struct DpPasses {
  double gathers = 0;
  double reduces = 0;
};

DpPasses dp_passes(const parallel::Layout& layout, const std::vector<parallel::PipelineSlot>& schedule,
                   int chunk, double m) {
  double gathers = 2.0 * m;
  if (layout.zero_stage == 3 && !layout.reshard_after_forward) {
    gathers = 0;
    bool previous_forward = false;
    for (const auto& slot : schedule) {
      if (slot.chunk != chunk) continue;
      if (!previous_forward) ++gathers;
      previous_forward = slot.pass == parallel::PassKind::kForward;
    }
  }
  return layout.zero_stage == 3   ? DpPasses{gathers, m}
         : layout.zero_stage == 2 ? DpPasses{1.0, m}
         : layout.zero_stage == 1 ? DpPasses{1.0, 1.0}
                                  : DpPasses{0.0, 1.0};
}

/// Adds the data-parallel bytes (and their replicate-group part) of every virtual stage to `volumes`.
void add_expected_dp_bytes(const model::ModelSpec& model, const parallel::Layout& layout,
                           const VolumeSymbols& sym, CommVolumes& volumes) {
  // Data parallel: per-rank dense and expert parameters of each virtual stage, times the collectives each
  // parameter byte takes part in per iteration (buffer bytes: all-reduce, all-gather output, reduce-scatter
  // input): all-reduce 1; ZeRO-1 reduce-scatter + all-gather 2; ZeRO-2 a reduce-scatter per micro-batch +
  // one all-gather, m + 1; FSDP a reduce-scatter per micro-batch plus its gathers G (2m when resharding after
  // forward, else the passes that find the chunk freed: FSDP2 frees after every backward). Hybrid sharding
  // runs the dense ones over the shard group of S ranks and all-reduces each reduce-scattered shard (1/S of
  // the bytes) over the replicate group. A gather moves 2 bytes per parameter (bf16; 1 for the dense FP8
  // linears' matrices under --fp8-all-gather, whose fp32 amax values are all-reduced once after the step), a
  // reduction 2, or 4 under the torchtitan trainer (fp32 gradients).
  const int pp = layout.pp;
  const double m = sym.m, shard = layout.shard_size();
  const double reduce_bytes = parallel::gradient_reduce_bytes_per_param(layout.trainer);
  for (int stage = 0; stage < pp; ++stage) {
    const auto schedule = parallel::stage_schedule(layout, stage);
    for (int chunk = 0; chunk < sym.virtual_stages / pp; ++chunk) {
      const int virtual_stage = parallel::virtual_stage(layout, stage, chunk);
      const auto [dense, expert] = stage_parameters(model, layout, sym, virtual_stage);
      const auto [fp8_dense, fp8_linears] = stage_fp8_dense(model, layout, sym, virtual_stage);
      const DpPasses passes = dp_passes(layout, schedule, chunk, m);
      const double bytes_per_param = passes.gathers * 2.0 + passes.reduces * reduce_bytes;
      // What --fp8-all-gather saves on each gather, and its amax all-reduce (4 bytes a weight).
      const double fp8_gather = layout.fp8_all_gather ? 4.0 * fp8_linears - passes.gathers * fp8_dense : 0.0;
      double per_rank = fp8_gather;
      if (layout.hybrid_sharding()) {
        if (shard > 1) per_rank += bytes_per_param * dense;
        per_rank += m * reduce_bytes * dense / shard;
        volumes.dp_replicate_bytes += sym.ranks_per_stage * m * reduce_bytes * dense / shard;
      } else if (layout.grad_reduce_size() > 1) {  // dp * cp ranks hold the dense parameters
        per_rank += bytes_per_param * dense;
      }
      if (layout.expert_dp_size() > 1) per_rank += bytes_per_param * expert;
      volumes.dp_bytes += sym.ranks_per_stage * per_rank;
    }
  }
  if (model.tied_embeddings && pp > 1) volumes.dp_bytes += 2.0 * sym.ranks_per_stage * 2.0 * sym.word / sym.t;
}

}  // namespace

CommVolumes expected_comm_volumes(const model::ModelSpec& model, const parallel::Layout& layout) {
  // Symbols as in docs/METRICS.md: T = b s / c tokens per micro-batch on a rank (c = cp), T_l = T/t under
  // sequence parallel, m micro-batches, C = t c d ranks per stage, R = 1 with full recompute else 0. All
  // volumes in bytes.
  CommVolumes volumes;
  const VolumeSymbols sym = volume_symbols(model, layout);
  const double t = sym.t, m = sym.m, h = sym.h, ranks_per_stage = sym.ranks_per_stage;

  volumes.tp_bytes = expected_tp_bytes(model, layout, sym);
  add_expected_dp_bytes(model, layout, sym, volumes);

  // Pipeline: every virtual-stage boundary between two stages carries one activation forward and one gradient
  // backward (a boundary whose two virtual stages run on one stage carries nothing).
  int crossings = 0;
  for (int boundary = 0; boundary + 1 < sym.virtual_stages; ++boundary)
    if (parallel::stage_of_virtual(layout, boundary) != parallel::stage_of_virtual(layout, boundary + 1))
      ++crossings;
  if (layout.pp > 1) volumes.pp_bytes = ranks_per_stage * m * 2.0 * crossings * 2.0 * sym.tokens_local * h;
  // Scatter/gather: each rank sends 1/t of it, and every receiving rank all-gathers the whole activation.
  if (layout.scatter_gather_in_effect()) {
    volumes.tp_bytes += volumes.pp_bytes;
    volumes.pp_bytes /= t;
  }

  volumes.cp_bytes = expected_cp_bytes_per_layer(model, layout) * ranks_per_stage * m * model.num_layers;

  // Expert parallel: dispatch + combine all-to-all in forward, both again in backward (and in recompute).
  if (model.is_moe() && layout.ep > 1)
    volumes.ep_bytes =
        ranks_per_stage * m * model.num_layers * (4.0 + 2.0 * sym.full) * 2.0 * sym.tokens_local * sym.k * h;
  return volumes;
}

std::vector<Problem> check_comm_volumes(const Graph& graph) {
  std::vector<Problem> problems;
  const CommVolumes actual = comm_volumes(graph);
  const CommVolumes expected = expected_comm_volumes(graph.model, graph.layout);
  const std::tuple<const char*, double, double> rows[] = {
      {"tp", actual.tp_bytes, expected.tp_bytes},
      {"dp", actual.dp_bytes, expected.dp_bytes},
      {"pp", actual.pp_bytes, expected.pp_bytes},
      {"ep", actual.ep_bytes, expected.ep_bytes},
      {"dp_replicate", actual.dp_replicate_bytes, expected.dp_replicate_bytes},
      {"cp", actual.cp_bytes, expected.cp_bytes},
  };
  for (const auto& [name, got, want] : rows) {
    if (!close(got, want))
      add_problem(problems, "comm-volume",
                  fmt::format("{} bytes over all ranks {:.6e} != closed form {:.6e}", name, got, want));
  }
  return problems;
}

std::vector<Problem> check_graph(const Graph& graph, DeadlockScope scope) {
  std::vector<Problem> problems;
  for (auto&& found : {check_collectives(graph), check_point_to_point(graph), check_deadlock(graph, scope),
                       check_flops(graph), check_comm_volumes(graph)})
    problems.insert(problems.end(), found.begin(), found.end());
  return problems;
}

Graph expand_programs(const Graph& graph) {
  Graph expanded = graph;
  expanded.programs.clear();
  for (int rank = 0; rank < graph.world_size(); ++rank) {
    expanded.programs.push_back(graph.program(rank));
    expanded.program_of_rank[rank] = rank;
  }
  return expanded;
}

}  // namespace calo::graph
