#include "plan/suggest.h"

#include <algorithm>

#include "plan/search.h"

namespace calo::plan {

FittingSuggestion suggest_fitting_layouts(const model::ModelSpec& model, const parallel::Layout& layout,
                                          int gpus_per_node, double device_memory_bytes) {
  SpaceRequest request;
  request.model = model;
  request.gpus = layout.world_size();
  request.global_batch = layout.global_batch;
  request.seq_length = layout.seq_length;
  request.gpus_per_node = gpus_per_node;
  request.attention = layout.attention;
  request.trainer = layout.trainer;
  request.precisions = {layout.precision};
  request.fp8_all_gather = layout.fp8_all_gather;
  request.device_memory_bytes = device_memory_bytes;
  // Long sequences: suggest context-parallel layouts too (cp up to 16, or the layout's own).
  request.max_cp = std::max(layout.cp, default_max_cp(layout.seq_length));
  const LayoutSpace space = enumerate_layouts(request);
  const std::vector<Candidate> nearest =
      nearest_fitting(space, layout, static_cast<int>(space.candidates.size()));
  FittingSuggestion suggestion;
  std::vector<Candidate>& fitting = suggestion.fitting;
  fitting.assign(nearest.begin(), nearest.begin() + std::min<std::size_t>(5, nearest.size()));
  // At long sequences keep the nearest context-parallel layout in view even when five others are nearer.
  const auto has_cp = [](const Candidate& candidate) { return candidate.layout.cp > 1; };
  if (request.max_cp > 1 && std::none_of(fitting.begin(), fitting.end(), has_cp)) {
    const auto nearest_cp = std::find_if(nearest.begin(), nearest.end(), has_cp);
    if (nearest_cp != nearest.end()) fitting.push_back(*nearest_cp);
  }
  if (fitting.empty()) suggestion.nearest_gpus = nearest_feasible_gpus(request, 2);
  return suggestion;
}

}  // namespace calo::plan
