// Memory per GPU of a model under a layout: weights, gradients, optimizer state, activations.
#pragma once

#include "model/model_spec.h"
#include "parallel/layout.h"

namespace calo::parallel {

/// Share of device memory the accounted training state may use; the rest is left for the runtime (CUDA
/// context, library workspaces, communication buffers, allocator fragmentation). docs/METRICS.md, Execution.
inline constexpr double kUsableMemoryFraction = 0.90;

/// Bytes per GPU by category, for the most loaded pipeline stage (mixed precision: bf16 weights and
/// gradients, fp32 master weights + Adam moments = 12 bytes/param, sharded under ZeRO-1 / FSDP).
struct MemoryBreakdown {
  double weights_bytes = 0;      ///< bf16 parameters held by the rank
  double gradients_bytes = 0;    ///< gradient buffers (bf16; fp32 under distributed optimizer if configured)
  double optimizer_bytes = 0;    ///< fp32 master weights + Adam m and v, after sharding
  double activations_bytes = 0;  ///< activations of all in-flight micro-batches (pipeline depth included)
  double total_bytes() const { return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes; }
  int stage = 0;                  ///< the pipeline stage these numbers describe (the most loaded one)
  int inflight_microbatches = 0;  ///< micro-batches whose activations are alive at once on that stage
};

/// Memory per GPU for `model` under resolved `layout` (most loaded stage; stage 0 under 1F1B).
MemoryBreakdown memory_per_gpu(const model::ModelSpec& model, const Layout& layout);

/// Memory of one specific pipeline stage.
MemoryBreakdown memory_for_stage(const model::ModelSpec& model, const Layout& layout, int stage);

}  // namespace calo::parallel
