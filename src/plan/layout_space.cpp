#include "plan/layout_space.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "core/divisors.h"
#include "core/error.h"
#include "core/table.h"
#include "parallel/schedule.h"
#include "parallel/validate.h"

namespace calo::plan {
namespace {

/// The sizes (tp, pp, dp, ep, vpp + schedule) of the space before the per-rank options.
struct Sizes {
  int tp = 1, pp = 1, dp = 1, ep = 1, vpp = 1, cp = 1;
  parallel::Schedule schedule = parallel::Schedule::k1F1B;
};

/// `sizes` under each schedule's plan axis (parallel/schedule.h): those searched at every pp first, then at
/// pp > 1 the others in table order, a chunked one at each vpp of parallel::searched_chunks whose chunks
/// split the layers evenly or as Megatron-LM's split with the embedding and the loss counted as a layer each.
void add_schedules(const model::ModelSpec& model, const Sizes& sizes, std::vector<Sizes>& result) {
  auto add = [&](int vpp, parallel::Schedule schedule) {
    Sizes with_schedule = sizes;
    with_schedule.vpp = vpp;
    with_schedule.schedule = schedule;
    result.push_back(with_schedule);
  };
  for (const parallel::ScheduleEntry& entry : parallel::kSchedules) {
    if (entry.plan == parallel::PlanAxis::kEveryPp) add(1, entry.schedule);
  }
  if (sizes.pp == 1) return;
  for (const parallel::ScheduleEntry& entry : parallel::kSchedules) {
    if (entry.plan == parallel::PlanAxis::kPipelined) add(1, entry.schedule);
    if (entry.plan != parallel::PlanAxis::kChunked) continue;
    const auto [least_vpp, most_vpp] = parallel::searched_chunks(entry, model.num_layers);
    for (int vpp = least_vpp; vpp <= most_vpp && sizes.pp * vpp <= model.num_layers + 2; ++vpp) {
      if (model.num_layers % (sizes.pp * vpp) != 0 &&
          parallel::edge_accounted_partition(model.num_layers, sizes.pp * vpp).empty())
        continue;
      add(vpp, entry.schedule);
    }
  }
}

std::vector<Sizes> enumerate_sizes(const SpaceRequest& request) {
  const model::ModelSpec& model = request.model;
  std::vector<Sizes> result;
  for (int tp : core::divisors(request.gpus)) {
    if (tp > request.gpus_per_node || model.num_attention_heads % tp != 0) continue;
    for (int cp = 1; cp <= request.max_cp && (request.gpus / tp) % cp == 0; cp *= 2) {
      for (int pp : core::divisors(request.gpus / (tp * cp))) {
        if (pp > model.num_layers + 2) continue;  // + the embedding and the loss as a stage each
        const int dp = request.gpus / (tp * cp * pp);
        std::vector<int> eps{1};
        if (model.is_moe()) {
          eps.clear();
          for (int ep : core::divisors(dp * cp)) {  // Megatron-Core: ep out of the dp x cp ranks
            if (model.num_experts % ep == 0) eps.push_back(ep);
          }
        }
        for (int ep : eps) add_schedules(model, {tp, pp, dp, ep, 1, cp}, result);
      }
    }
  }
  return result;
}

/// A ZeRO stage with its shard group size (0: dp).
struct Sharding {
  int zero_stage = 0;
  int shard_size = 0;
};

/// ZeRO 0, and with dp > 1 ZeRO 1, 2, 3 and hybrid sharding (ZeRO-3 sharded within the dp ranks of one node,
/// S = gpus_per_node / tp, replicated across nodes) when that S lies strictly between 1 and dp and divides
/// it. With dp * cp = 1 every stage shards nothing: ZeRO 0 only, or the stages `--zero` holds the search to
/// (as `calo sim --zero 1` at dp 1 is accepted, `--zero 1` does not drop the dp = 1 layouts).
std::vector<Sharding> shardings(const Sizes& sizes, int gpus_per_node, const std::vector<int>& held_zero) {
  std::vector<Sharding> result = {{0, 0}};
  if (sizes.dp * sizes.cp == 1) {  // nothing to shard over (ZeRO shards over dp * cp ranks)
    if (held_zero.empty()) return result;
    result.clear();
    for (int zero_stage : held_zero) result.push_back({zero_stage, 0});
    return result;
  }
  for (int zero_stage : {1, 2, 3}) result.push_back({zero_stage, 0});
  if (sizes.cp > 1) return result;  // hybrid sharding with context parallel is not modelled
  const int node_shard = gpus_per_node / sizes.tp;
  if (node_shard > 1 && node_shard < sizes.dp && sizes.dp % node_shard == 0)
    result.push_back({3, node_shard});
  return result;
}

}  // namespace

bool LayoutConstraints::admits(const parallel::Layout& layout) const {
  return refusing_flag(layout).empty();
}

std::string LayoutConstraints::refusing_flag(const parallel::Layout& layout) const {
  auto allowed = [](const auto& values, auto value) {
    return values.empty() || std::find(values.begin(), values.end(), value) != values.end();
  };
  const bool overlapped = layout.overlap_tp_comm || layout.overlap_grad_reduce || layout.overlap_param_gather;
  if (!allowed(tp, layout.tp)) return "--tp";
  if (!allowed(cp, layout.cp)) return "--cp";
  if (!allowed(pp, layout.pp)) return "--pp";
  if (!allowed(dp, layout.dp)) return "--dp";
  if (!allowed(ep, layout.ep)) return "--ep";
  if (!allowed(vpp, layout.virtual_stages)) return "--vpp";
  if (!allowed(schedule, layout.schedule)) return "--schedule";
  if (!allowed(micro_batch, layout.micro_batch)) return "--mbs";
  if (!allowed(recompute, layout.recompute)) return "--recompute";
  if (!allowed(zero_stage, layout.zero_stage)) return "--zero";
  if (overlap && *overlap != overlapped) return *overlap ? "--overlap" : "--no-overlap";
  return {};
}

bool LayoutConstraints::empty() const {
  return tp.empty() && cp.empty() && pp.empty() && dp.empty() && ep.empty() && vpp.empty() &&
         micro_batch.empty() && zero_stage.empty() && schedule.empty() && recompute.empty() && !overlap;
}

std::string LayoutConstraints::describe() const {
  std::vector<std::string> parts;
  auto sizes = [&parts](const char* flag, const std::vector<int>& values) {
    if (!values.empty()) parts.push_back(fmt::format("{} {}", flag, fmt::join(values, ",")));
  };
  auto names = [&parts](const char* flag, const auto& values) {
    std::vector<std::string> texts;
    for (auto value : values) texts.push_back(parallel::to_string(value));
    if (!texts.empty()) parts.push_back(fmt::format("{} {}", flag, fmt::join(texts, ",")));
  };
  sizes("--tp", tp);
  sizes("--cp", cp);
  sizes("--pp", pp);
  sizes("--dp", dp);
  sizes("--ep", ep);
  sizes("--vpp", vpp);
  sizes("--mbs", micro_batch);
  sizes("--zero", zero_stage);
  names("--schedule", schedule);
  names("--recompute", recompute);
  if (overlap) parts.push_back(*overlap ? "--overlap" : "--no-overlap");
  return fmt::format("{}", fmt::join(parts, " "));
}

int default_max_cp(int seq_length) {
  return seq_length >= kLongSequenceTokens ? 16 : 1;
}

MemoryLimit parse_memory_limit(const std::string& text, const std::string& what) {
  if (text == "usable") return MemoryLimit::kUsable;
  if (text == "card") return MemoryLimit::kCard;
  throw InputError(fmt::format(
      "{} {}: give usable (the card less 3 % fragmentation and a 4 GiB runtime reserve; the default) or card "
      "(the whole card: rank layouts that leave the runtime less, marked tight)",
      what, text));
}

const char* to_string(MemoryLimit limit) {
  return limit == MemoryLimit::kCard ? "card" : "usable";
}

int LayoutSpace::fitting() const {
  return static_cast<int>(
      std::count_if(candidates.begin(), candidates.end(), [](const Candidate& item) { return item.fits; }));
}

int LayoutSpace::tight() const {
  return static_cast<int>(
      std::count_if(candidates.begin(), candidates.end(), [](const Candidate& item) { return item.tight; }));
}

double usable_memory_bytes(double device_bytes) {
  return parallel::usable_memory_bytes(device_bytes);
}

double memory_limit_bytes(double device_bytes, MemoryLimit limit) {
  return limit == MemoryLimit::kCard ? device_bytes : usable_memory_bytes(device_bytes);
}

bool fits_memory(const parallel::MemoryBreakdown& memory, double device_bytes, MemoryLimit limit) {
  return memory.total_bytes() <= memory_limit_bytes(device_bytes, limit);
}

namespace {

/// The recomputation modes a space holds: none, selective and full, and torchtitan's op-level checkpointing
/// where the job is torchtitan's (--trainer torchtitan) or --recompute names it, for a dense model (MoE has
/// no op-level mode: parallel/validate.cpp).
std::vector<parallel::Recompute> searched_recomputes(const SpaceRequest& request) {
  std::vector<parallel::Recompute> modes = {parallel::Recompute::kNone, parallel::Recompute::kSelective,
                                            parallel::Recompute::kFull};
  const auto& held = request.constraints.recompute;
  const bool asked = std::find(held.begin(), held.end(), parallel::Recompute::kOp) != held.end();
  if (!request.model.is_moe() && (asked || parallel::is_torchtitan(request.trainer)))
    modes.push_back(parallel::Recompute::kOp);
  return modes;
}

/// Counts one layout excluded by `flag` in `space`.
void count_exclusion(const std::string& flag, LayoutSpace& space) {
  ++space.excluded;
  auto found = std::find_if(space.excluded_by.begin(), space.excluded_by.end(),
                            [&flag](const auto& entry) { return entry.first == flag; });
  if (found == space.excluded_by.end()) {
    space.excluded_by.emplace_back(flag, 1);
  } else {
    ++found->second;
  }
}

/// The layouts of `request` at one precision, appended to `space`.
void enumerate_at(const SpaceRequest& request, parallel::Precision precision, LayoutSpace& space) {
  for (const Sizes& sizes : enumerate_sizes(request)) {
    if (request.global_batch % sizes.dp != 0) {
      ++space.invalid;
      continue;
    }
    for (int micro_batch : core::divisors(request.global_batch / sizes.dp)) {
      for (parallel::Recompute recompute : searched_recomputes(request)) {
        for (const Sharding& sharding :
             shardings(sizes, request.gpus_per_node, request.constraints.zero_stage)) {
          const int zero_stage = sharding.zero_stage;
          for (bool overlap : {false, true}) {
            parallel::Layout layout;
            layout.tp = sizes.tp;
            layout.cp = sizes.cp;
            layout.pp = sizes.pp;
            layout.dp = sizes.dp;
            layout.ep = sizes.ep;
            layout.virtual_stages = sizes.vpp;
            layout.schedule = sizes.schedule;
            layout.micro_batch = micro_batch;
            layout.global_batch = request.global_batch;
            layout.seq_length = request.seq_length;
            layout.recompute = recompute;
            layout.zero_stage = zero_stage;
            layout.attention = request.attention;
            layout.trainer = request.trainer;
            layout.precision = precision;
            layout.fsdp_shard_size = sharding.shard_size;
            layout.overlap_tp_comm = overlap && sizes.tp > 1;
            layout.overlap_grad_reduce = overlap && sizes.dp * sizes.cp > 1;
            layout.overlap_param_gather = overlap && zero_stage >= 1;
            if (overlap && !layout.overlap_tp_comm && !layout.overlap_grad_reduce) continue;  // same as off
            layout.fp8_all_gather = request.fp8_all_gather && layout.fp8_all_gather_applies();
            if (const std::string flag = request.constraints.refusing_flag(layout); !flag.empty()) {
              count_exclusion(flag, space);
              continue;
            }
            if (parallel::broken_schedule_rule(request.model, layout) != parallel::ScheduleRule::kNone) {
              ++space.invalid;  // resolve_layout would refuse it with that rule's message
              ++space.invalid_by_construction;
              continue;
            }
            try {
              Candidate candidate;
              candidate.layout = parallel::resolve_layout(request.model, layout);
              candidate.memory = parallel::memory_per_gpu(request.model, candidate.layout);
              candidate.fits =
                  fits_memory(candidate.memory, request.device_memory_bytes, request.memory_limit);
              candidate.tight =
                  parallel::is_tight(candidate.memory.total_bytes(), request.device_memory_bytes);
              space.candidates.push_back(std::move(candidate));
            } catch (const InputError&) {
              ++space.invalid;
            }
          }
        }
      }
    }
  }
}

}  // namespace

LayoutSpace enumerate_layouts(const SpaceRequest& request) {
  require_input(request.gpus >= 1, fmt::format("--gpus {}: need at least 1 GPU", request.gpus));
  require_input(request.global_batch >= 1,
                fmt::format("--gbs {}: the global batch must be >= 1 sequence", request.global_batch));
  LayoutSpace space;
  for (parallel::Precision precision : request.precisions) enumerate_at(request, precision, space);
  return space;
}

std::string tight_count_text(int tight) {
  if (tight <= 0) return {};
  return fmt::format("{} {} the card but not its usable margin: --memory-limit card ranks {}", tight,
                     tight == 1 ? "fits" : "fit", tight == 1 ? "it" : "them");
}

int layout_distance(const parallel::Layout& a, const parallel::Layout& b) {
  const bool overlap_a = a.overlap_tp_comm || a.overlap_grad_reduce || a.overlap_param_gather;
  const bool overlap_b = b.overlap_tp_comm || b.overlap_grad_reduce || b.overlap_param_gather;
  return (a.tp != b.tp) + (a.cp != b.cp) + (a.pp != b.pp) + (a.dp != b.dp) + (a.ep != b.ep) +
         (a.virtual_stages != b.virtual_stages) + (a.schedule != b.schedule) +
         (a.micro_batch != b.micro_batch) + (a.recompute != b.recompute) + (a.zero_stage != b.zero_stage) +
         (a.shard_size() != b.shard_size()) + (a.reshard_after_forward != b.reshard_after_forward) +
         (overlap_a != overlap_b);
}

std::vector<Candidate> nearest_fitting(const LayoutSpace& space, const parallel::Layout& layout, int limit) {
  std::vector<Candidate> fitting;
  for (const Candidate& candidate : space.candidates) {
    if (candidate.fits) fitting.push_back(candidate);
  }
  std::stable_sort(fitting.begin(), fitting.end(), [&layout](const Candidate& a, const Candidate& b) {
    const int distance_a = layout_distance(a.layout, layout);
    const int distance_b = layout_distance(b.layout, layout);
    if (distance_a != distance_b) return distance_a < distance_b;
    return a.memory.total_bytes() < b.memory.total_bytes();
  });
  if (static_cast<int>(fitting.size()) > limit) fitting.resize(limit);
  return fitting;
}

std::string calo_flags(const parallel::Layout& layout) {
  std::string text = fmt::format("--tp {} --pp {} --dp {}", layout.tp, layout.pp, layout.dp);
  if (layout.cp > 1) text += fmt::format(" --cp {}", layout.cp);
  if (layout.cp > 1 && layout.cp_comm != parallel::CpComm::kP2p)
    text += " --cp-comm " + parallel::to_string(layout.cp_comm);
  if (layout.ep > 1) text += fmt::format(" --ep {}", layout.ep);
  if (layout.virtual_stages > 1) text += fmt::format(" --vpp {}", layout.virtual_stages);
  text += fmt::format(" --schedule {} --mbs {} --gbs {}", parallel::to_string(layout.schedule),
                      layout.micro_batch, layout.global_batch);
  if (layout.seq_length > 0) text += fmt::format(" --seq {}", layout.seq_length);
  text += fmt::format(" --recompute {}", parallel::to_string(layout.recompute));
  if (layout.zero_stage > 0) text += fmt::format(" --zero {}", layout.zero_stage);
  if (layout.hybrid_sharding()) text += fmt::format(" --fsdp-shard-group {}", layout.shard_size());
  if (layout.zero_stage == 3 && !layout.reshard_after_forward) text += " --fsdp-reshard-after-forward off";
  if (layout.overlap_tp_comm) text += " --overlap-tp";
  if (layout.overlap_grad_reduce) text += " --overlap-grad";
  if (layout.overlap_param_gather) text += " --overlap-param";
  if (layout.tp > 1 && !layout.sequence_parallel) text += " --no-sequence-parallel";
  if (layout.attention == parallel::AttentionImpl::kUnfused) text += " --attention unfused";
  if (layout.attention == parallel::AttentionImpl::kFlash2) text += " --attention flash2";
  if (!layout.pipeline_scatter_gather) text += " --no-pp-scatter-gather";
  if (layout.trainer != parallel::Trainer::kDefault)
    text += " --trainer " + parallel::to_string(layout.trainer);
  if (layout.fp8()) text += " --precision " + parallel::to_string(layout.precision);
  if (layout.fp8_all_gather) text += " --fp8-all-gather";
  if (layout.uneven_partition())
    text += " --layers-per-stage " + parallel::partition_text(layout.layers_per_stage);
  if (!layout.stage_gpus.empty()) text += fmt::format(" --stage-gpus {}", fmt::join(layout.stage_gpus, ","));
  return text;
}

namespace {

/// Megatron-LM's uneven split: the embedding and the loss counted as layers, or the first and last stages'
/// layer counts with the rest even among the middle stages; a partition of neither form is said so with the
/// counts to set by hand.
std::string megatron_partition_flags(const std::vector<int>& layers) {
  if (parallel::is_edge_accounted(layers))
    return " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split";
  const bool middle_even = layers.size() <= 3 || std::all_of(layers.begin() + 1, layers.end() - 1,
                                                             [&](int count) { return count == layers[1]; });
  if (!middle_even)
    return fmt::format(" (uneven layers per stage {}: Megatron-LM splits only the first and last stage off)",
                       fmt::join(layers, ","));
  return fmt::format(" --decoder-first-pipeline-num-layers {} --decoder-last-pipeline-num-layers {}",
                     layers.front(), layers.back());
}

}  // namespace

std::string megatron_flags(const parallel::Layout& layout) {
  std::string text =
      fmt::format("--tensor-model-parallel-size {} --pipeline-model-parallel-size {}", layout.tp, layout.pp);
  if (layout.cp > 1)
    text += fmt::format(" --context-parallel-size {} --cp-comm-type {}", layout.cp,
                        layout.cp_comm == parallel::CpComm::kAllGather ? "all_gather" : "p2p");
  if (layout.ep > 1) text += fmt::format(" --expert-model-parallel-size {}", layout.ep);
  if (layout.virtual_stages > 1) {
    // A model chunk's layers (the middle chunks' under the edge-accounted split, whose edges are one short).
    const int chunk_layers = layout.layers_per_stage.empty() ? 0
                             : parallel::is_edge_accounted(layout.layers_per_stage)
                                 ? layout.layers_per_stage.front() + 1
                                 : layout.layers_per_stage.front();
    text += fmt::format(" --num-layers-per-virtual-pipeline-stage {}", chunk_layers);
  }
  text +=
      fmt::format(" --micro-batch-size {} --global-batch-size {}", layout.micro_batch, layout.global_batch);
  if (layout.seq_length > 0) text += fmt::format(" --seq-length {}", layout.seq_length);
  if (layout.sequence_parallel) text += " --sequence-parallel";
  if (layout.recompute == parallel::Recompute::kSelective) text += " --recompute-activations";
  if (layout.recompute == parallel::Recompute::kFull)
    text += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (layout.zero_stage == 1) text += " --use-distributed-optimizer";
  // ZeRO-2 and hybrid sharding are Megatron-FSDP's strategies (optim_grads; optim_grads_params within each of
  // dp / S distributed-optimizer instances, replicated across them).
  if (layout.zero_stage == 2)
    text += " --use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads";
  if (layout.zero_stage == 3 && !layout.hybrid_sharding()) text += " --use-torch-fsdp2";
  if (layout.hybrid_sharding())
    text += fmt::format(
        " --use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy "
        "optim_grads_params"
        " --num-distributed-optimizer-instances {} --outer-dp-sharding-strategy no_shard",
        layout.dp / layout.shard_size());
  if (layout.overlap_tp_comm) text += " --tp-comm-overlap";
  if (layout.overlap_grad_reduce) text += " --overlap-grad-reduce";
  if (layout.overlap_param_gather) text += " --overlap-param-gather";
  if (parallel::is_fused(layout.attention)) text += " --use-flash-attn";
  // Megatron-LM's FP8 through Transformer Engine: delayed scaling (hybrid: e4m3 forward, e5m2 gradients) or
  // current (per-tensor) scaling; it has no rowwise recipe of torchao's kind.
  if (layout.precision == parallel::Precision::kFp8Delayed)
    text += " --fp8-format hybrid --fp8-recipe delayed";
  if (layout.precision == parallel::Precision::kFp8Tensorwise)
    text += " --fp8-format e4m3 --fp8-recipe tensorwise";
  if (!layout.pipeline_scatter_gather) text += " --no-scatter-gather-tensors-in-pipeline";
  if (layout.uneven_partition()) text += megatron_partition_flags(layout.layers_per_stage);
  return text;
}

std::string describe_memory(const parallel::MemoryBreakdown& memory) {
  return fmt::format("{} ({})", core::format_bytes(memory.total_bytes()), parallel::describe_terms(memory));
}

}  // namespace calo::plan
