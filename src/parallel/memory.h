// Memory per GPU of a model under a layout: weights, gradients, optimizer state, activations.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/accounting.h"
#include "model/model_spec.h"
#include "parallel/layout.h"

namespace calo::parallel {

/// Share of device memory calo's own executor (`calo bench`) lets the accounted state use; the rest is left
/// for its runtime and the transients the accounting leaves out (measured on H100: docs/METRICS.md,
/// Execution).
inline constexpr double kUsableMemoryFraction = 0.90;

/// Memory a training framework's runtime keeps outside the accounted state whatever the device: CUDA context,
/// library workspaces, NCCL buffers (docs/METRICS.md, "Fits memory").
inline constexpr double kRuntimeReserveBytes = 4.0 * 1024 * 1024 * 1024;

/// Share of the device lost to allocator fragmentation, on top of kRuntimeReserveBytes.
inline constexpr double kFragmentationFraction = 0.03;

/// Bytes of a GPU of `device_bytes` that the accounted training state may use when planning a layout:
/// device_bytes * (1 - kFragmentationFraction) - kRuntimeReserveBytes, at least 0.
double usable_memory_bytes(double device_bytes);

/// True when `total_bytes` is beyond the usable share of a GPU of `device_bytes` but within the card: a
/// tight layout (docs/METRICS.md "Planner").
bool is_tight(double total_bytes, double device_bytes);

/// What a layout of `total_bytes` leaves on a card of `device_bytes`: "the card itself would leave 1.56 GiB
/// for the CUDA context, NCCL and the allocator".
std::string card_headroom_text(double total_bytes, double device_bytes);

/// Bytes per GPU by category, for the most loaded pipeline stage (mixed precision: bf16 weights and
/// gradients, fp32 master weights + Adam moments = 12 bytes/param; ZeRO-1 shards the optimizer state, ZeRO-2
/// also the gradients, ZeRO-3 (FSDP) also the weights, over dp or the hybrid-sharding shard group).
struct MemoryBreakdown {
  double weights_bytes = 0;      ///< bf16 parameters held by the rank (ZeRO-3: shard + gathered units)
  double gradients_bytes = 0;    ///< bf16 gradient buffers (ZeRO-2/3: shard + the units awaiting reduction)
  double optimizer_bytes = 0;    ///< fp32 master weights + Adam m and v, after sharding
  double activations_bytes = 0;  ///< activations of all in-flight micro-batches (pipeline depth included)
  /// Transformer Engine's delayed scaling (fp8-delayed): each FP8 linear's e4m3 weight and transpose kept
  /// for the step (not under ZeRO-3) and its amax history; 0 otherwise (docs/METRICS.md "FP8 training").
  double fp8_weights_bytes = 0;
  /// Transients on top of them at the peak: the pytorch trainer's cross-entropy backward (two fp32 tensors of
  /// the logits' size, on the last stage at the loss); 0 under the default accounting.
  double temporaries_bytes = 0;
  /// Everything above: the stage's peak.
  double total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes + temporaries_bytes +
           fp8_weights_bytes;
  }
  /// The caching allocator's reserved peak (torchtitan's max_reserved) under the torchtitan trainers: the
  /// compute stream's peak (the end of forward) plus what FSDP2's all-gather and reduce-scatter streams keep
  /// cached beside it, at least total_bytes(); 0 under the other trainers (docs/METRICS.md "Reserved
  /// memory").
  double reserved_bytes = 0;
  int stage = 0;                  ///< the pipeline stage these numbers describe (the most loaded one)
  int inflight_microbatches = 0;  ///< micro-batches whose activations are alive at once on that stage
  int layer_microbatches = 0;     ///< (layer, micro-batch) activation sets alive at that peak
  /// activations_bytes by kind: each per-layer term (model::layer_activation_terms) × layer_microbatches,
  /// then the embedding's and the output's (docs/METRICS.md "Activations by kind"); empty where activations
  /// are 0.
  std::vector<model::ActivationTerm> activations_by_kind;
  Trainer trainer = Trainer::kDefault;  ///< whose accounting the terms follow (what each term holds)
  /// The peak is at the end of backward (torchtitan's FSDP2 with small activations: every gradient shard
  /// complete, activations freed), not at the end of forward.
  bool at_backward_end = false;
  /// The temporaries are recomputation's rebuilt layer during its backward (else the loss backward).
  bool temporaries_from_recompute = false;
};

/// What a breakdown's temporaries are: "recomputed layer" or "loss backward".
std::string temporaries_label(const MemoryBreakdown& memory);

/// Memory per GPU for `model` under resolved `layout` (most loaded stage; stage 0 under 1F1B).
MemoryBreakdown memory_per_gpu(const model::ModelSpec& model, const Layout& layout);

/// Memory of one specific pipeline stage.
MemoryBreakdown memory_for_stage(const model::ModelSpec& model, const Layout& layout, int stage);

/// What a rank of one stage allocates for training, by lifetime (the sizes `calo bench --memory real` holds;
/// the default and pytorch trainers' accounting, docs/METRICS.md "Memory per GPU").
struct StageHoldings {
  /// Weights, gradients and optimizer state kept between steps (ZeRO shards only), and fp8-delayed's FP8
  /// weight copies and amax history.
  double state_bytes = 0;
  /// Per model chunk on the stage: what one micro-batch keeps outside the transformer layers (the embedding's
  /// activations on the first virtual stage, the output's on the last), from its forward to its backward.
  std::vector<double> chunk_edge_activation_bytes;
  /// What one transformer layer keeps for one micro-batch, from its forward to its backward.
  double layer_activation_bytes = 0;
  /// Per layer and micro-batch under recomputation: what the layer's recompute rebuilds for its backward.
  double recompute_transient_bytes = 0;
  double loss_transient_bytes = 0;      ///< the pytorch trainer's loss backward on the last stage, else 0
  double gradient_bytes_per_param = 0;  ///< a gradient's bytes while it awaits its reduce-scatter
};

/// The holdings of one stage of `model` under resolved `layout`; throws InputError for the torchtitan trainer
/// (its autocast cache and gradient lifetimes are not replayed).
StageHoldings holdings_for_stage(const model::ModelSpec& model, const Layout& layout, int stage);

/// "weights W, gradients G, optimizer O, activations A" (and ", loss backward T" where there are
/// temporaries, ", at the end of backward" where the peak is there), each in core::format_bytes's units: the
/// one wording of the terms in every message and table line.
std::string describe_terms(const MemoryBreakdown& memory);

/// The breakdown as JSON: each category, the total, the stage and its in-flight micro-batches, the trainer
/// and the moment of the peak (`calo model --json`'s stages).
nlohmann::json to_json(const MemoryBreakdown& memory);
/// The breakdown as JSON for a GPU of `device_bytes`: each category, the total, the usable bytes with what
/// the rule keeps back (fragmentation, runtime reserve), whether it fits, the stage and its in-flight
/// micro-batches, the trainer and the moment of the peak (`calo sim --json`'s "memory"; docs/METRICS.md
/// "Memory per GPU").
nlohmann::json to_json(const MemoryBreakdown& memory, double device_bytes);

}  // namespace calo::parallel
