#include "cli/layout_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "parallel/schedule.h"
#include "parallel/validate.h"

namespace calo::cli {

namespace {

/// A check refusing a value below 1: "0 is not a count of WHAT (give 1 or more[, or UNSET])", UNSET saying
/// what leaving the flag out means.
CLI::Validator at_least_one(const std::string& what, const std::string& unset = "") {
  return CLI::Validator(
      [what, unset](std::string& text) -> std::string {
        try {
          if (std::stoll(text) >= 1) return {};
        } catch (const std::exception&) {
          return {};  // not a number: the option's own conversion names it
        }
        return text + " is not a count of " + what + " (give 1 or more" +
               (unset.empty() ? "" : ", or " + unset) + ")";
      },
      ">= 1");
}

}  // namespace

void add_layout_flags(CLI::App& app, LayoutFlags& flags, bool model_positional) {
  if (model_positional) {
    app.add_option("model,--model", flags.model, "Model preset name or YAML file (see `calo model --list`)");
  } else {
    app.add_option("--model,-m", flags.model,
                   "Model preset name or YAML file (required; see `calo model --list`), e.g. llama3-70b");
  }
  app.add_option("--layers", flags.layers,
                 "A slice of the model: this many layers of its shapes (the name gets -sliceN), e.g. "
                 "--layers 4 of llama3-8b to bench or simulate what fits one GPU");
  auto& layout = flags.layout;
  app.add_option("--tp", layout.tp, "Tensor-parallel size")->capture_default_str();
  app.add_option("--cp", layout.cp,
                 "Context-parallel size: each sequence split over cp ranks, ring attention (K/V passed "
                 "over the cp group)")
      ->capture_default_str();
  app.add_option("--cp-comm", flags.cp_comm,
                 "Context-parallel K/V exchange: p2p (overlapped ring), allgather, or torch (torchtitan's)")
      ->capture_default_str();
  app.add_option("--pp", layout.pp, "Pipeline-parallel size (stages)")->capture_default_str();
  app.add_option("--dp", layout.dp, "Data-parallel size")->capture_default_str();
  app.add_option("--ep", layout.ep, "Expert-parallel size (MoE; divides dp)")->capture_default_str();
  app.add_option("--mbs,--micro-batch", layout.micro_batch, "Micro-batch size (sequences)")
      ->check(at_least_one("sequences per micro-batch"))
      ->capture_default_str();
  // Absent, these take a default; given, 0 is refused rather than silently read as that default.
  app.add_option("--gbs,--global-batch", layout.global_batch, "Global batch (sequences); default mbs*dp")
      ->check(at_least_one("sequences per step", "leave --gbs out for mbs x dp"));
  app.add_option("--seq", layout.seq_length, "Sequence length; default the model's")
      ->check(at_least_one("tokens per sequence", "leave --seq out for the model's own"));
  app.add_option("--zero", layout.zero_stage,
                 "ZeRO stage: 0, 1 (sharded optimizer), 2 (+ sharded gradients) or 3 (FSDP)")
      ->capture_default_str();
  app.add_option("--fsdp-shard-group", layout.fsdp_shard_size,
                 "Hybrid sharding (HSDP, --zero 3): shard over S neighbouring dp ranks, replicate over dp/S; "
                 "default dp (full sharding)");
  app.add_option("--fsdp-reshard-after-forward", flags.reshard_after_forward,
                 "--zero 3: free gathered parameters after forward (on) or keep them for backward (off)")
      ->capture_default_str();
  app.add_flag(
      "--fsdp", [&layout](int64_t) { layout.zero_stage = 3; }, "Fully sharded data parallel (= --zero 3)");
  app.add_option(parallel::kRecomputeAxis.flag, flags.recompute,
                 "Activation recomputation: " + parallel::kRecomputeAxis.choices() +
                     " (selective: Megatron's attention core; full: whole layers; op: torchtitan's op-level "
                     "selective checkpointing, dense models)")
      ->capture_default_str();
  app.add_option(parallel::kScheduleAxis.flag, flags.schedule,
                 "Pipeline schedule: " + parallel::schedule_help())
      ->capture_default_str();
  app.add_option(parallel::kPrecisionAxis.flag, flags.precision,
                 "Precision of the transformer linears: " + parallel::kPrecisionAxis.choices() +
                     " (fp8: e4m3 operands, tensorwise dynamic scaling as torchao's default; fp8-rowwise: a "
                     "scale per row; attention, norms, embedding and output layer stay bf16)")
      ->capture_default_str();
  app.add_flag("--fp8-all-gather", layout.fp8_all_gather,
               "--precision fp8 with --zero 3: FSDP gathers the FP8 linears' weights in FP8 (1 byte a "
               "parameter, not 2) and all-reduces their scales once a step (torchtitan's "
               "enable_fsdp_float8_all_gather with precompute_float8_dynamic_scale_for_fsdp)");
  app.add_option("--vpp,--virtual-stages", layout.virtual_stages,
                 "Model chunks per pipeline rank (interleaved)")
      ->capture_default_str();
  app.add_option(
      "--layers-per-stage", flags.layers_per_stage,
      "Explicit layer partition, comma-separated (pp*vpp entries, COUNTxREPEAT repeats one), e.g. "
      "10,12,12,10 or 0,1x126,0; unset: even, or where only that divides, Megatron-LM's split with the "
      "embedding and the loss counted as a layer each (first and last stage one layer short)");
  app.add_option("--stage-gpus", flags.stage_gpus,
                 "Stage -> GPU order, comma-separated (pp entries): stage s runs on the GPUs of the pipeline "
                 "position the s-th entry names, as `calo plan partition` prints it, e.g. 0,1,3,2");
  // Callbacks run only for a given flag: without either, the optional stays empty (on when tp > 1).
  app.add_flag_callback(
      "--sequence-parallel", [&flags] { flags.sequence_parallel = true; },
      "Sequence parallel (default: on when tp > 1)");
  app.add_flag_callback(
      "--no-sequence-parallel", [&flags] { flags.sequence_parallel = false; }, "Turn sequence parallel off");
  app.add_flag("--overlap", flags.overlap_all, "Overlap TP comm, grad reduce, param gather (if --zero 1/3)");
  app.add_flag("--overlap-tp", layout.overlap_tp_comm, "Overlap tensor-parallel communication with GEMMs");
  app.add_flag("--overlap-grad", layout.overlap_grad_reduce, "Overlap gradient reduction with backward");
  app.add_flag("--overlap-param", layout.overlap_param_gather, "Overlap parameter all-gather with forward");
  app.add_option(
      "--attention", flags.attention,
      "Attention core: fused (flash-style kernel, the cluster's attention fit), unfused (GEMM + softmax + "
      "GEMM) or flash2 (fused, FlashAttention-2's kernel: PyTorch's SDPA default on Hopper before 2.9, at "
      "its "
      "measured 0.52 of cuDNN's speed); default fused (calo sim: the cluster file's `attention`)");
  app.add_option(
         "--trainer", flags.trainer,
         "Memory accounting: default (bf16 gradients), pytorch (a plain PyTorch mixed-precision "
         "trainer: fp32 master gradient, plain cross-entropy's fp32 backward at the loss) or "
         "torchtitan (FSDP2 with --zero 3, DDP or one GPU with --zero 0: fp32 parameters, bf16 "
         "compute copies, gradients freed each step) or torchtitan-eager-loss (the same, its cross-entropy "
         "uncompiled: eager mode, or torchtitan before it compiled the loss); each measured on H200s, "
         "docs/METRICS.md "
         "\"Memory per GPU\"")
      ->capture_default_str();
  app.add_flag_callback(
      "--no-pp-scatter-gather", [&layout] { layout.pipeline_scatter_gather = false; },
      "Send whole stage activations instead of Megatron-LM's 1/tp scatter + TP all-gather (which applies "
      "when tp > 1 without sequence parallel)");
}

namespace {

/// The integers of a comma-separated flag value, each `noun` ("a layer count"); "10,,12" and "10,12," are
/// errors, not shorter lists.
std::vector<int> parse_counts(const std::string& flag, const std::string& text, const std::string& noun,
                              const std::string& example) {
  std::vector<int> counts;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      // COUNT or COUNTxREPEAT (repeat >= 1), as parallel::partition_text writes runs.
      size_t used = 0;
      const int count = std::stoi(item, &used);
      int repeat = 1;
      if (used < item.size() && item[used] == 'x') {
        const std::string tail = item.substr(used + 1);
        require_input(!tail.empty() && tail.find_first_not_of("0123456789") == std::string::npos, "");
        repeat = std::stoi(tail);
        require_input(repeat >= 1, "");
      } else {
        require_input(used == item.size(), "");
      }
      counts.insert(counts.end(), repeat, count);
    } catch (const std::exception&) {
      throw InputError(flag + ": '" + item + "' in '" + text + "' is not " + noun +
                       "; give comma-separated integers like " + example + " (COUNTxREPEAT repeats one)");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

}  // namespace

std::pair<model::ModelSpec, parallel::Layout> resolve(const LayoutFlags& flags) {
  model::ModelSpec model = model::load_model(flags.model);
  if (flags.layers) model = model::slice_model(model, *flags.layers);
  parallel::Layout layout = flags.layout;
  layout.recompute = parallel::parse_recompute(flags.recompute);
  layout.schedule = parallel::parse_schedule(flags.schedule);
  if (!flags.attention.empty()) layout.attention = parallel::parse_attention(flags.attention);
  layout.trainer = parallel::parse_trainer(flags.trainer);
  layout.precision = parallel::kPrecisionAxis.parse(flags.precision);
  if (flags.reshard_after_forward != "on" && flags.reshard_after_forward != "off")
    throw InputError("--fsdp-reshard-after-forward: '" + flags.reshard_after_forward +
                     "' is not on/off; write on or off");
  layout.reshard_after_forward = flags.reshard_after_forward == "on";
  layout.cp_comm = parallel::parse_cp_comm(flags.cp_comm);
  if (flags.overlap_all) {
    // Parameters are gathered only when sharded (ZeRO-1/2/3); without that --overlap covers the rest.
    layout.overlap_tp_comm = layout.overlap_grad_reduce = true;
    if (layout.zero_stage >= 1) layout.overlap_param_gather = true;
  }
  if (!flags.layers_per_stage.empty())
    layout.layers_per_stage = parse_counts("--layers-per-stage", flags.layers_per_stage, "a layer count",
                                           "10,12,12,10 or 0,1x126,0");
  if (!flags.stage_gpus.empty())
    layout.stage_gpus = parse_counts("--stage-gpus", flags.stage_gpus, "a pipeline position", "0,1,3,2");
  if (flags.sequence_parallel) layout.sequence_parallel = *flags.sequence_parallel;
  return {model, parallel::resolve_layout(model, layout, flags.sequence_parallel.has_value())};
}

namespace {

/// apply_gpus without the model's checks.
void apply_gpus_to(int gpus, bool gpus_given, bool dp_given, parallel::Layout& layout) {
  require_input(!gpus_given || gpus >= 1,
                fmt::format("--gpus {}: give 1 or more GPUs (or leave it out: tp*cp*pp*dp)", gpus));
  if (gpus <= 0) return;
  const int model_parallel = layout.tp * layout.cp * layout.pp;
  require_input(
      model_parallel > 0 && gpus % model_parallel == 0,
      fmt::format("--gpus {} is not a multiple of tp*cp*pp = {}; use a multiple such as {}", gpus,
                  model_parallel, model_parallel * std::max(1, gpus / std::max(1, model_parallel))));
  if (!dp_given) {
    layout.dp = gpus / model_parallel;
    return;
  }
  require_input(layout.world_size() == gpus,
                fmt::format("--gpus {} does not equal tp*cp*pp*dp = {}; drop --dp to derive it ({})", gpus,
                            layout.world_size(), gpus / model_parallel));
}

}  // namespace

void apply_gpus(int gpus, bool gpus_given, bool dp_given, LayoutFlags& flags) {
  try {
    apply_gpus_to(gpus, gpus_given, dp_given, flags.layout);
  } catch (const InputError&) {
    // The model's refusal first (--tp 6 on 64 heads): a --gpus the message below suggests must not fail next.
    LayoutFlags model_check = flags;
    model_check.layout.dp = 1;
    resolve(model_check);
    throw;
  }
}

void require_model_flag(const CLI::App& app, const std::string& command) {
  require_input(
      app.count("--model") > 0,
      fmt::format("{}: give --model (a preset, see `calo model --list`, or a YAML file), e.g. --model "
                  "llama3-8b; tiny-dense is the 3.4 M-parameter test model",
                  command));
}

}  // namespace calo::cli
