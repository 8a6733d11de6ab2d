// Layouts to suggest when one does not fit: the nearest layouts of the same job (GPUs, batch, sequence) that
// fit GPU memory, or, when none does, the nearest GPU counts that have one. `calo sim` quotes them when it
// refuses a layout (cmd_sim.cpp formats the message).
#pragma once

#include <vector>

#include "model/model_spec.h"
#include "parallel/layout.h"
#include "plan/layout_space.h"

namespace calo::plan {

/// What to suggest instead of a layout that does not fit.
struct FittingSuggestion {
  /// The five nearest fitting layouts of the same GPUs and batch (nearest first), plus the nearest
  /// context-parallel one at long sequences when none of the five has cp; empty when nothing fits.
  std::vector<Candidate> fitting;
  /// Only when `fitting` is empty: up to two nearest GPU counts with a fitting layout (may be empty too).
  std::vector<int> nearest_gpus;
};

/// Searches the layout space of `model` on layout.world_size() GPUs at the layout's global batch, sequence
/// and attention (cp up to 16 at long sequences, or the layout's own cp), on nodes of `gpus_per_node` GPUs of
/// `device_memory_bytes` each, for layouts near `layout` that fit.
FittingSuggestion suggest_fitting_layouts(const model::ModelSpec& model, const parallel::Layout& layout,
                                          int gpus_per_node, double device_memory_bytes);

}  // namespace calo::plan
