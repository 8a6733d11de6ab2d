// Names of the graph's enums and ops: to_string, span_name, describe (graph.h).
#include <fmt/format.h>

#include "core/enum_names.h"
#include "graph/graph.h"

namespace calo::graph {

constexpr std::array kOpKindNames{"gemm", "attention", "elementwise", "collective",
                                  "send", "recv",      "optimizer"};
static_assert(kOpKindNames.size() == kNumOpKinds);

const char* to_string(OpKind kind) {
  return core::enum_name(kind, kOpKindNames);
}

constexpr std::array kStreamNames{"compute", "tp-comm", "dp-comm", "pp-comm", "ep-comm", "cp-comm"};
static_assert(kStreamNames.size() == kNumStreams);

const char* to_string(Stream stream) {
  return core::enum_name(stream, kStreamNames);
}

constexpr std::array kPhaseNames{"fwd", "bwd", "recompute", "optimizer"};

const char* to_string(Phase phase) {
  return core::enum_name(phase, kPhaseNames);
}

const char* to_string(DType dtype) {
  constexpr std::array kDTypeNames{"bf16", "fp32", "fp8", "fp8-rowwise"};
  return core::enum_name(dtype, kDTypeNames);
}

constexpr std::array kGemmWeightNames{"qkv",    "proj",       "fc1",        "fc2",        "logits",
                                      "router", "expert_fc1", "expert_fc2", "attn_score", "attn_context"};

const char* to_string(GemmWeight weight) {
  return core::enum_name(weight, kGemmWeightNames);
}

constexpr std::array kGemmPassNames{"fwd", "dgrad", "wgrad"};

const char* to_string(GemmPass pass) {
  return core::enum_name(pass, kGemmPassNames);
}

constexpr std::array kElementwiseKindNames{"norm",      "activation",    "rope",    "residual_add",
                                           "embedding", "cross_entropy", "routing", "softmax",
                                           "cast",      "cp_merge"};

const char* to_string(ElementwiseKind kind) {
  return core::enum_name(kind, kElementwiseKindNames);
}

constexpr std::array kCollectiveKindNames{"all_reduce", "all_gather", "reduce_scatter", "all_to_all"};

const char* to_string(CollectiveKind kind) {
  return core::enum_name(kind, kCollectiveKindNames);
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
