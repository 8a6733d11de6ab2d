// Layout validation: fills defaults and rejects invalid layouts with a message naming the rule and a fix.
#pragma once

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/schedule.h"  // the rules a schedule sets on a layout (broken_schedule_rule) live there

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

}  // namespace calo::parallel
