// Shared flags that describe a model and a parallel layout (used by model, graph, sim, bench, plan).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "sim/cluster.h"

namespace calo::cli {

/// Raw flag values as typed by the user; `resolve()` turns them into a validated model + layout.
struct LayoutFlags {
  std::string model = "tiny-dense";          ///< preset name or YAML path
  parallel::Layout layout;                   ///< sizes and options as given
  std::string recompute = "none";            ///< --recompute
  std::string schedule = "1f1b";             ///< --schedule
  std::string cp_comm = "p2p";               ///< --cp-comm
  std::optional<int> layers;                 ///< --layers N: a slice of the model, N layers of its shapes
  std::string layers_per_stage;              ///< --layers-per-stage "10,12,12,10"
  std::string stage_gpus;                    ///< --stage-gpus "0,1,3,2" (stage -> pipeline position's GPUs)
  std::optional<bool> sequence_parallel;     ///< --sequence-parallel / --no-sequence-parallel
  bool overlap_all = false;                  ///< --overlap: all three overlap flags
  std::string reshard_after_forward = "on";  ///< --fsdp-reshard-after-forward on|off
  /// --attention fused|unfused; empty = the default (or, for calo sim, the cluster's)
  std::string attention;
  std::string trainer = "default";  ///< --trainer default|pytorch (memory accounting)
  std::string precision = "bf16";   ///< --precision bf16|fp8|fp8-rowwise (the transformer linears)
};

/// Adds --model (unless `model_positional`, then a positional MODEL) and all layout flags to `app`.
void add_layout_flags(CLI::App& app, LayoutFlags& flags, bool model_positional);

/// Loads the model (sliced to --layers when given) and returns the validated layout (throws InputError naming
/// the flag on bad input).
std::pair<model::ModelSpec, parallel::Layout> resolve(const LayoutFlags& flags);

/// --gpus N on the flags' layout: dp = N / (tp*cp*pp) unless --dp was given, then N must equal tp*cp*pp*dp
/// (InputError naming both otherwise); nothing when --gpus was not given. The layout's checks against the
/// model (tp against the heads, ...) come first, so a --gpus it suggests is one those checks pass.
void apply_gpus(int gpus, bool gpus_given, bool dp_given, LayoutFlags& flags);

/// The refusal of a command that simulates or builds a model's graph without --model: tiny-dense, the old
/// default, is a 3.4 M-parameter test model whose figures mislead (issue 40 item 10).
void require_model_flag(const CLI::App& app, const std::string& command);

/// Help text of --power-cap (sim, plan partition/power).
inline constexpr const char* kPowerCapHelp =
    "W: cap every GPU's power at W watts (what `nvidia-smi -pl W` sets), or RANK=W for one GPU; repeatable "
    "(e.g. --power-cap 500 --power-cap 3=400). Simulated only: calo never changes a GPU's settings";

}  // namespace calo::cli
