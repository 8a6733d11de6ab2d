// Layout validation: fills defaults and rejects invalid layouts with a message naming the rule and a fix.
#pragma once

#include "model/model_spec.h"
#include "parallel/layout.h"

namespace calo::parallel {

/// Returns `layout` with defaults filled (global_batch = micro_batch*dp when 0, seq_length from the model,
/// sequence_parallel on when tp > 1 unless explicitly set, layers_per_stage filled uniformly when empty)
/// after checking every rule: sizes >= 1; zero_stage in {0,1,3}; tp divides attention heads, kv heads
/// (Megatron-LM splits query groups over tp, no replication) and the FFN width; context parallel needs
/// seq_length % (2 cp) == 0 (causal load-balanced ring) and a dense model; sequence parallel needs
/// (seq_length / cp) % tp == 0 (with tp = 1 it is a no-op and turned off, as in Megatron-LM); pp*vpp <=
/// layers and divides them (or the explicit partition has pp*vpp entries >= 1 summing to num_layers);
/// interleaved needs pp > 1, vpp > 1 and micro-batches a multiple of pp, and vpp > 1 needs interleaved; ep >
/// 1 only for MoE, dividing dp and num_experts; global batch a multiple of micro_batch*dp;
/// overlap_param_gather needs zero_stage >= 1. Throws InputError naming the rule and a nearby valid value,
/// e.g. "tp=5 does not divide 64 attention heads; try 4 or 8". Rules: docs/METRICS.md.
/// `sequence_parallel_explicit` tells whether the user set sequence parallel (else it follows tp > 1).
Layout resolve_layout(const model::ModelSpec& model, Layout layout, bool sequence_parallel_explicit = false);

/// A rule a layout's pipeline schedule sets on the rest of the layout (read from its `ScheduleEntry`), in the
/// order resolve_layout checks them.
enum class ScheduleRule {
  kNone,                ///< the layout keeps every rule of its schedule
  kMicrobatchMultiple,  ///< a chunked schedule: micro-batches per step a multiple of pp
  kUnshardedGradients,  ///< a split backward: ZeRO 0 or 1 (ZeRO-2/3 reduce-scatter before the deferred W)
  kReductionAfterW,     ///< a split backward: no gradient reduction overlapped with the backward
  kFixedChunks,         ///< a schedule of fixed_chunks (a V: 2): exactly that vpp
  kUntiedEmbeddings,    ///< a V: a model whose output layer is not tied to its embedding
};

/// The first rule of its schedule that `layout` breaks on `model` (kNone: none), the one home of these rules:
/// resolve_layout refuses a layout that breaks one, with the rule's message, and `calo plan`'s enumeration
/// skips such a layout without resolving it. Reads the sizes, vpp, micro-batch, global batch (as given: a
/// global batch of 0 breaks nothing), ZeRO stage and gradient-reduction overlap; resolve_layout fills none
/// of them before it asks.
ScheduleRule broken_schedule_rule(const model::ModelSpec& model, const Layout& layout);

}  // namespace calo::parallel
