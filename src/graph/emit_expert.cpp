// ExpertEmitter: the MoE block under expert parallelism (builder_internal.h).
#include <cmath>

#include "graph/builder_internal.h"

namespace calo::graph::detail {

namespace {

/// Adds a blocking `kind` collective of `bytes` over `group` on `stream`, after op `after`, when the group
/// has more than one member (`members`); its index, or -1 when there is none.
int group_collective(BuilderCore& core, std::int64_t members, CollectiveKind kind, GroupKind group,
                     double bytes, Stream stream, int after) {
  if (members <= 1) return -1;
  return core.blocking(BuilderCore::collective_op(kind, group, bytes, stream, core.phase), after);
}

}  // namespace

ExpertEmitter::ExpertEmitter(BuilderCore& core) : Emitter(core) {
  expert_tokens_ = expert_token_counts();
}

/// Tokens each expert processes per micro-batch after the TP gather: integers summing to ep * T * top_k
/// (the tokens routed within one EP group), mean ep T k / E; expert 0 gets imbalance x mean, the rest share
/// the remainder evenly (remainders to the lowest indices).
std::vector<std::int64_t> ExpertEmitter::expert_token_counts() const {
  const GraphOptions& options = core_.options;
  std::vector<std::int64_t> tokens;
  if (!model_.is_moe()) return tokens;
  const std::int64_t experts = model_.num_experts;
  const std::int64_t total = static_cast<std::int64_t>(layout_.ep) * dims_.tokens * model_.moe_top_k;
  std::int64_t hot =
      experts == 1
          ? total
          : static_cast<std::int64_t>(std::llround(
                options.expert_load_imbalance * static_cast<double>(total) / static_cast<double>(experts)));
  if (options.expert_load_imbalance == 1.0) hot = total / experts + (total % experts > 0 ? 1 : 0);
  tokens.push_back(hot);
  if (experts > 1) {
    const std::int64_t rest = total - hot;
    for (std::int64_t expert = 1; expert < experts; ++expert)
      tokens.push_back(rest / (experts - 1) + (expert - 1 < rest % (experts - 1) ? 1 : 0));
  }
  return tokens;
}

/// Experts held by this program's ranks: [first, first + count).
std::pair<int, int> ExpertEmitter::local_experts() const {
  const int count = model_.num_experts / layout_.ep;
  return {(core_.ep_index < 0 ? 0 : core_.ep_index) * count, count};
}

/// Tokens this rank's experts process per micro-batch (after the TP gather).
double ExpertEmitter::local_expert_tokens() const {
  auto [first, count] = local_experts();
  double total = 0;
  for (int expert = first; expert < first + count; ++expert)
    total += static_cast<double>(expert_tokens_[expert]);
  return total;
}

void ExpertEmitter::moe_forward() {
  const double top_k = model_.moe_top_k;
  const double routed = static_cast<double>(dims_.tokens_local) * top_k;
  core_.gemm(GemmWeight::kRouter, GemmPass::kForward, dims_.tokens_local, model_.num_experts, dims_.hidden);
  core_.elementwise(ElementwiseKind::kRouting,
                    (core_.local_activation_elements() + routed * dims_.hidden) * kBf16Bytes, routed);
  moe_exchange(/*backward=*/false);
  core_.elementwise(ElementwiseKind::kRouting,
                    (routed * dims_.hidden + core_.local_activation_elements()) * kBf16Bytes,
                    2.0 * routed * dims_.hidden);
}

void ExpertEmitter::moe_backward() {
  const double top_k = model_.moe_top_k;
  const double routed = static_cast<double>(dims_.tokens_local) * top_k;
  core_.elementwise(ElementwiseKind::kRouting,
                    (routed * dims_.hidden + core_.local_activation_elements()) * kBf16Bytes,
                    2.0 * routed * dims_.hidden);
  moe_exchange(/*backward=*/true);
  core_.elementwise(ElementwiseKind::kRouting,
                    (core_.local_activation_elements() + routed * dims_.hidden) * kBf16Bytes, routed);
  core_.gemm(GemmWeight::kRouter, GemmPass::kDgrad, dims_.tokens_local, dims_.hidden, model_.num_experts);
  core_.gemm(GemmWeight::kRouter, GemmPass::kWgrad, dims_.hidden, model_.num_experts, dims_.tokens_local);
}

/// All-to-all dispatch, TP gather, expert FFNs, TP reduce-scatter, all-to-all combine (or their backward).
void ExpertEmitter::moe_exchange(bool backward) {
  const double routed_bytes =
      static_cast<double>(dims_.tokens_local) * model_.moe_top_k * dims_.hidden * kBf16Bytes;
  const double gathered_bytes = local_expert_tokens() * static_cast<double>(dims_.hidden) * kBf16Bytes;
  // The TP gather forwards what the dispatch received; the combine sends what the TP scatter reduced.
  const int dispatch = group_collective(core_, layout_.ep, CollectiveKind::kAllToAll, GroupKind::kEp,
                                        routed_bytes, Stream::kEpComm, -1);
  group_collective(core_, dims_.tp, CollectiveKind::kAllGather, GroupKind::kTp, gathered_bytes,
                   Stream::kTpComm, dispatch);
  auto [first, count] = local_experts();
  const std::int64_t ffn_per_rank = dims_.ffn / dims_.tp;
  const std::int64_t fc1_per_rank = dims_.fc1_out / dims_.tp;
  for (int expert = first; expert < first + count; ++expert) {
    const std::int64_t tokens = expert_tokens_[expert];
    if (!backward) {
      core_.gemm(GemmWeight::kExpertFc1, GemmPass::kForward, tokens, fc1_per_rank, dims_.hidden, expert);
      core_.activation(static_cast<double>(tokens), ffn_per_rank, false);
      core_.gemm(GemmWeight::kExpertFc2, GemmPass::kForward, tokens, dims_.hidden, ffn_per_rank, expert);
    } else {
      core_.gemm(GemmWeight::kExpertFc2, GemmPass::kDgrad, tokens, ffn_per_rank, dims_.hidden, expert);
      core_.gemm(GemmWeight::kExpertFc2, GemmPass::kWgrad, ffn_per_rank, dims_.hidden, tokens, expert);
      core_.activation(static_cast<double>(tokens), ffn_per_rank, true);
      core_.gemm(GemmWeight::kExpertFc1, GemmPass::kDgrad, tokens, dims_.hidden, fc1_per_rank, expert);
      core_.gemm(GemmWeight::kExpertFc1, GemmPass::kWgrad, dims_.hidden, fc1_per_rank, tokens, expert);
    }
  }
  const int scatter = group_collective(core_, dims_.tp, CollectiveKind::kReduceScatter, GroupKind::kTp,
                                       gathered_bytes, Stream::kTpComm, -1);
  group_collective(core_, layout_.ep, CollectiveKind::kAllToAll, GroupKind::kEp, routed_bytes,
                   Stream::kEpComm, scatter);
}

}  // namespace calo::graph::detail
