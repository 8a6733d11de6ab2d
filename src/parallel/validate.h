// Layout validation: fills defaults and rejects invalid layouts with a message naming the rule and a fix.
#pragma once

#include "model/model_spec.h"
#include "parallel/layout.h"

namespace calo::parallel {

/// Returns `layout` with defaults filled (global_batch = micro_batch*dp when 0, seq_length from the model,
/// sequence_parallel on when tp > 1 unless explicitly set, uniform layers_per_stage) after checking every rule:
/// sizes >= 1; tp divides heads, kv heads, ffn and vocab-friendly sizes; pp*virtual divides into layers (or the
/// explicit partition sums to num_layers with no empty stage); ep divides dp and num_experts (MoE only, ep=1 for
/// dense); global batch is a multiple of micro_batch*dp; interleaved needs virtual_stages>1 and microbatches a
/// multiple of pp; zero_stage in {0,1,3}. Throws InputError, e.g. "tp=5 does not divide 64 attention heads; try 4 or 8".
/// `sequence_parallel_explicit` tells whether the user set sequence parallel (else it follows tp > 1).
Layout resolve_layout(const model::ModelSpec& model, Layout layout, bool sequence_parallel_explicit = false);

}  // namespace calo::parallel
