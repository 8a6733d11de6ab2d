#include "parallel/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "parallel/schedule.h"

namespace calo::parallel {

Recompute parse_recompute(const std::string& text) {
  return kRecomputeAxis.parse(text);
}

Schedule parse_schedule(const std::string& text) {
  return kScheduleAxis.parse(text);
}

namespace {

/// The enumerator named `text` in `names`, else InputError "WHAT: 'TEXT' is not " + `choices`.
template <typename Enum, std::size_t N>
Enum parse_named(const std::string& text, const std::array<const char*, N>& names, const std::string& what,
                 const char* choices) {
  if (const auto value = core::enum_value<Enum>(text, names)) return *value;
  throw InputError(what + ": '" + text + "' is not " + choices);
}

}  // namespace

constexpr std::array kAttentionNames{"fused", "unfused", "flash2"};
constexpr std::array kTrainerNames{"default", "pytorch", "torchtitan", "torchtitan-eager-loss"};

AttentionImpl parse_attention(const std::string& text, const std::string& what) {
  return parse_named<AttentionImpl>(
      text, kAttentionNames, what,
      "an attention implementation; use fused (flash-style kernel), unfused (GEMM + softmax + GEMM) or "
      "flash2 (FlashAttention-2's fused kernel, PyTorch's SDPA default on Hopper before 2.9)");
}

bool is_fused(AttentionImpl attention) {
  return attention != AttentionImpl::kUnfused;
}

std::string to_string(AttentionImpl attention) {
  return core::enum_name(attention, kAttentionNames);
}

Trainer parse_trainer(const std::string& text, const std::string& what) {
  return parse_named<Trainer>(text, kTrainerNames, what,
                              "a trainer; use default (bf16 gradients), pytorch (fp32 master gradient, plain "
                              "cross-entropy), torchtitan (FSDP2 or DDP mixed precision, fp32 parameters) or "
                              "torchtitan-eager-loss (torchtitan with its cross-entropy uncompiled)");
}

std::string to_string(Trainer trainer) {
  return core::enum_name(trainer, kTrainerNames);
}

bool is_torchtitan(Trainer trainer) {
  return trainer == Trainer::kTorchtitan || trainer == Trainer::kTorchtitanEagerLoss;
}

double gradient_reduce_bytes_per_param(Trainer trainer) {
  return is_torchtitan(trainer) ? 4.0 : 2.0;
}

CpComm parse_cp_comm(const std::string& text) {
  return kCpCommAxis.parse(text);
}

std::string to_string(CpComm comm) {
  return kCpCommAxis.name(comm);
}

std::string to_string(Recompute recompute) {
  return kRecomputeAxis.name(recompute);
}

std::string to_string(Schedule schedule) {
  return kScheduleAxis.name(schedule);
}

std::string to_string(Precision precision) {
  return kPrecisionAxis.name(precision);
}

namespace {

/// The members written as they are; to_json adds the derived and named ones.
CALO_JSON_WRITER(write_plain_fields, Layout, tp, cp, pp, dp, ep, sequence_parallel, zero_stage,
                 fsdp_shard_size, reshard_after_forward, micro_batch, global_batch, seq_length,
                 overlap_tp_comm, overlap_grad_reduce, overlap_param_gather, virtual_stages, layers_per_stage,
                 stage_gpus, pipeline_scatter_gather)

}  // namespace

nlohmann::json to_json(const Layout& layout) {
  nlohmann::json json;
  write_plain_fields(json, layout);
  json.update({{"cp_comm", to_string(layout.cp_comm)},
               {"world_size", layout.world_size()},
               {"num_microbatches", layout.global_batch > 0 ? layout.num_microbatches() : 0},
               {"recompute", to_string(layout.recompute)},
               {"schedule", to_string(layout.schedule)},
               {"attention", to_string(layout.attention)}});
  // Written only when not the default, so runs stored before the key existed compare equal to new ones.
  if (layout.trainer != Trainer::kDefault) json["trainer"] = to_string(layout.trainer);
  if (layout.fp8()) json["precision"] = to_string(layout.precision);
  if (layout.fp8_all_gather) json["fp8_all_gather"] = true;
  return json;
}

Layout layout_from_json(const nlohmann::json& object) {
  Layout layout;
  auto number = [&](const char* key, int fallback) { return object.value(key, fallback); };
  layout.tp = number("tp", 1);
  layout.cp = number("cp", 1);
  layout.cp_comm = parse_cp_comm(object.value("cp_comm", std::string("p2p")));
  layout.pp = number("pp", 1);
  layout.dp = number("dp", 1);
  layout.ep = number("ep", 1);
  layout.sequence_parallel = object.value("sequence_parallel", false);
  layout.zero_stage = number("zero_stage", 0);
  layout.fsdp_shard_size = number("fsdp_shard_size", 0);
  layout.reshard_after_forward = object.value("reshard_after_forward", true);
  layout.micro_batch = number("micro_batch", 1);
  layout.global_batch = number("global_batch", 0);
  layout.seq_length = number("seq_length", 0);
  layout.recompute = parse_recompute(object.value("recompute", std::string("none")));
  layout.overlap_tp_comm = object.value("overlap_tp_comm", false);
  layout.overlap_grad_reduce = object.value("overlap_grad_reduce", false);
  layout.overlap_param_gather = object.value("overlap_param_gather", false);
  layout.schedule = parse_schedule(object.value("schedule", std::string("1f1b")));
  layout.virtual_stages = number("virtual_stages", 1);
  layout.layers_per_stage = object.value("layers_per_stage", std::vector<int>{});
  layout.stage_gpus = object.value("stage_gpus", std::vector<int>{});
  layout.attention = parse_attention(object.value("attention", std::string("fused")), "layout.attention");
  layout.pipeline_scatter_gather = object.value("pipeline_scatter_gather", true);
  layout.trainer = parse_trainer(object.value("trainer", std::string("default")), "layout.trainer");
  layout.precision = kPrecisionAxis.parse(object.value("precision", std::string("bf16")), "layout.precision");
  layout.fp8_all_gather = object.value("fp8_all_gather", false);
  return layout;
}

std::string partition_text(const std::vector<int>& layers_per_stage) {
  std::vector<std::string> items;
  for (size_t begin = 0; begin < layers_per_stage.size();) {
    size_t end = begin;
    while (end < layers_per_stage.size() && layers_per_stage[end] == layers_per_stage[begin]) ++end;
    const size_t repeat = end - begin;
    if (repeat >= 3) {
      items.push_back(fmt::format("{}x{}", layers_per_stage[begin], repeat));
    } else {
      for (size_t index = begin; index < end; ++index)
        items.push_back(std::to_string(layers_per_stage[index]));
    }
    begin = end;
  }
  return fmt::format("{}", fmt::join(items, ","));
}

std::string describe(const Layout& layout) {
  std::string text = layout.cp > 1
                         ? fmt::format("TP{}-CP{}-PP{}-DP{}", layout.tp, layout.cp, layout.pp, layout.dp)
                         : fmt::format("TP{}-PP{}-DP{}", layout.tp, layout.pp, layout.dp);
  if (layout.ep > 1) text += fmt::format("-EP{}", layout.ep);
  if (layout.cp > 1 && layout.cp_comm != CpComm::kP2p) text += " cp-" + to_string(layout.cp_comm);
  text += fmt::format(" mbs{} gbs{} {}", layout.micro_batch, layout.global_batch, to_string(layout.schedule));
  if (layout.virtual_stages > 1) text += fmt::format(" vpp{}", layout.virtual_stages);
  if (layout.zero_stage == 3) text += " fsdp";
  if (layout.hybrid_sharding()) text += fmt::format(" shard{}", layout.shard_size());
  if (layout.zero_stage == 3 && !layout.reshard_after_forward) text += " no-reshard";
  if (layout.zero_stage == 1 || layout.zero_stage == 2) text += fmt::format(" zero{}", layout.zero_stage);
  if (layout.recompute != Recompute::kNone) text += " recompute-" + to_string(layout.recompute);
  if (layout.overlap_tp_comm || layout.overlap_grad_reduce || layout.overlap_param_gather) text += " overlap";
  if (layout.attention == AttentionImpl::kUnfused) text += " unfused-attn";
  if (layout.attention == AttentionImpl::kFlash2) text += " flash2-attn";
  if (layout.trainer != Trainer::kDefault) text += " " + to_string(layout.trainer) + "-trainer";
  if (layout.precision == Precision::kFp8Tensorwise) text += " fp8-tensorwise";
  if (layout.precision == Precision::kFp8Rowwise) text += " fp8-rowwise";
  if (layout.precision == Precision::kFp8Delayed) text += " fp8-delayed";
  if (layout.fp8_all_gather) text += " fp8-all-gather";
  if (layout.scatter_gather_in_effect()) text += " pp-scatter-gather";
  if (layout.uneven_partition()) text += " layers-" + partition_text(layout.layers_per_stage);
  if (!layout.stage_gpus.empty()) text += fmt::format(" stages-on-{}", fmt::join(layout.stage_gpus, ","));
  return text;
}

}  // namespace calo::parallel
