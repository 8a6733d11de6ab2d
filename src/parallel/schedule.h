// Pipeline schedules and per-stage layer partitions.
#pragma once

#include <vector>

#include "parallel/layout.h"

namespace calo::parallel {

/// Forward or backward pass of one micro-batch through one model chunk on one stage.
enum class PassKind { kForward, kBackward };

/// One entry of a stage's pipeline schedule, in execution order.
struct PipelineSlot {
  PassKind pass;    ///< forward or backward
  int microbatch;   ///< 0 .. num_microbatches-1
  int chunk;        ///< model chunk on this stage (0 unless interleaved)
};

/// The ordered forward/backward passes that pipeline stage `stage` runs in one iteration under the layout's
/// schedule (GPipe, 1F1B with warm-up pp-stage-1, or Megatron's interleaved 1F1B).
std::vector<PipelineSlot> stage_schedule(const Layout& layout, int stage);

/// Layer ranges per virtual stage: result[v] = {first_layer, layer_count} for virtual stage v, where virtual stage
/// v = chunk * pp + stage (Megatron's interleaved assignment). Uses layers_per_stage if given, else uniform.
struct LayerRange {
  int first_layer;  ///< global index of the first layer
  int count;        ///< number of layers
};
/// See LayerRange; size pp * virtual_stages.
std::vector<LayerRange> layer_partition(const Layout& layout, int num_layers);

/// Closed-form bubble fraction of a uniform pipeline: (p-1)/(m+p-1) for GPipe/1F1B, (p-1)/(v*m+p-1) interleaved.
double bubble_fraction(const Layout& layout);

}  // namespace calo::parallel
