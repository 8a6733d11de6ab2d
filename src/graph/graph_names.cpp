// Names of the graph's enums and ops: to_string, span_name, describe (graph.h).
#include <fmt/format.h>

#include "graph/graph.h"

namespace calo::graph {

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
