// Pipeline schedules and per-stage layer partitions.
#pragma once

#include <string>
#include <vector>

#include "parallel/layout.h"

namespace calo::parallel {

/// Forward or backward pass of one micro-batch through one model chunk on one stage.
enum class PassKind { kForward, kBackward };

/// One entry of a stage's pipeline schedule, in execution order.
struct PipelineSlot {
  PassKind pass;   ///< forward or backward
  int microbatch;  ///< 0 .. num_microbatches-1
  int chunk;       ///< model chunk on this stage (0 unless interleaved)
};

/// Virtual stage of model chunk `chunk` on pipeline stage `stage`: chunk * pp + stage (Megatron's
/// assignment).
int virtual_stage(const Layout& layout, int stage, int chunk);

/// The ordered forward/backward passes that pipeline stage `stage` runs in one iteration under the layout's
/// schedule (GPipe, 1F1B with warm-up pp-stage-1, or Megatron's interleaved 1F1B).
std::vector<PipelineSlot> stage_schedule(const Layout& layout, int stage);

/// Warm-up forward slots of `stage` (before the steady state's forward/backward pairs) under the layout's
/// schedule: 1F1B min(pp - stage - 1, m); interleaved (pp - stage - 1) * 2 + (v - 1) * pp, or all m * v when
/// m == pp; GPipe all m.
int warmup_slots(const Layout& layout, int stage);

/// Layer ranges per virtual stage: result[v] = {first_layer, layer_count} for virtual stage v, where virtual
/// stage v = chunk * pp + stage (Megatron's interleaved assignment). Uses layers_per_stage if given, else
/// uniform.
struct LayerRange {
  int first_layer;  ///< global index of the first layer
  int count;        ///< number of layers
};
/// See LayerRange; size pp * virtual_stages.
std::vector<LayerRange> layer_partition(const Layout& layout, int num_layers);

/// Megatron-LM's split that counts the embedding and the loss as one layer each
/// (--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split; Llama 3's pipeline, whose
/// first chunk holds the embedding alone at one layer per chunk): with k = (num_layers + 2) /
/// virtual_stage_count, the first and last virtual stages get k - 1 layers and the rest k. Empty unless
/// virtual_stage_count >= 2 divides num_layers + 2 with k >= 1.
std::vector<int> edge_accounted_partition(int num_layers, int virtual_stage_count);

/// True when `layers_per_stage` is edge_accounted_partition of its own total and size.
bool is_edge_accounted(const std::vector<int>& layers_per_stage);

/// Closed-form bubble fraction of a uniform pipeline: (p-1)/(m+p-1) for GPipe/1F1B, (p-1)/(v*m+p-1)
/// interleaved.
double bubble_fraction(const Layout& layout);

/// Peak number of forward passes (micro-batch × chunk) on `stage` whose backward has not run yet: the
/// activation sets alive at once (1F1B stage 0: min(pp, m); GPipe: m; interleaved: counted in chunks).
int peak_inflight_passes(const Layout& layout, int stage);

/// Outcome of running every stage's schedule together, each pass waiting for its pipeline dependencies:
/// forward of virtual stage v needs forward of v-1 for the same micro-batch; backward of v needs backward of
/// v+1 (the last virtual stage: its own forward). Communication takes no time.
struct PipelineRun {
  bool completed = false;      ///< false: some stage waits forever (the schedules deadlock)
  double makespan = 0;         ///< time at which the last pass ends (unit: that of the given pass times)
  double bubble_fraction = 0;  ///< idle share of all stages: 1 - busy time / (pp * makespan)
  int passes_run = 0;          ///< passes executed over all stages
  std::string stuck;           ///< when not completed: the first stage that waits and the pass it waits on
};

/// Executes all stages' schedules with a forward pass of one chunk taking `forward_time` and a backward pass
/// `backward_time` (any time unit); detects deadlock and measures the bubble.
PipelineRun run_pipeline(const Layout& layout, double forward_time, double backward_time);

}  // namespace calo::parallel
