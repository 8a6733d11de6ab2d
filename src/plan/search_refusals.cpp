// What a layout search says when it cannot rank: a request no layout can meet, an empty or over-constrained
// space, every layout over the power limits, and the nearest GPU counts that fit (search_internal.h;
// search.cpp runs the search).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/table.h"
#include "parallel/memory.h"
#include "plan/search_internal.h"
#include "sim/cost_model.h"
#include "sim/simulate.h"

namespace calo::plan {
namespace {

/// Constraints that left nothing to search: name them and, per constrained setting, the values that fitting
/// layouts of the unconstrained space have.
[[noreturn]] void refuse_constrained(const SearchRequest& request, const SpaceRequest& space_request,
                                     const LayoutSpace& space) {
  SpaceRequest free_request = space_request;
  free_request.constraints = {};
  const LayoutSpace free_space = enumerate_layouts(free_request);
  const LayoutConstraints& constraints = space_request.constraints;
  std::vector<std::string> hints;
  auto values_of = [&](const char* flag, bool constrained, auto setting) {
    if (!constrained) return;
    std::vector<std::string> values;
    for (const Candidate& candidate : free_space.candidates) {
      if (!candidate.fits) continue;
      const std::string value = fmt::format("{}", setting(candidate.layout));
      if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
    }
    hints.push_back(
        fmt::format("{} {}", flag, values.empty() ? "(none)" : fmt::format("{}", fmt::join(values, ","))));
  };
  values_of("--tp", !constraints.tp.empty(), [](const parallel::Layout& l) { return l.tp; });
  values_of("--cp", !constraints.cp.empty(), [](const parallel::Layout& l) { return l.cp; });
  values_of("--pp", !constraints.pp.empty(), [](const parallel::Layout& l) { return l.pp; });
  values_of("--dp", !constraints.dp.empty(), [](const parallel::Layout& l) { return l.dp; });
  values_of("--ep", !constraints.ep.empty(), [](const parallel::Layout& l) { return l.ep; });
  values_of("--vpp", !constraints.vpp.empty(), [](const parallel::Layout& l) { return l.virtual_stages; });
  values_of("--mbs", !constraints.micro_batch.empty(),
            [](const parallel::Layout& l) { return l.micro_batch; });
  values_of("--zero", !constraints.zero_stage.empty(),
            [](const parallel::Layout& l) { return l.zero_stage; });
  values_of("--schedule", !constraints.schedule.empty(),
            [](const parallel::Layout& l) { return parallel::to_string(l.schedule); });
  values_of("--recompute", !constraints.recompute.empty(),
            [](const parallel::Layout& l) { return parallel::to_string(l.recompute); });
  // Under the card limit tight layouts fit, so a refusal has none to name.
  const bool card = space_request.memory_limit == MemoryLimit::kCard;
  const std::string tight = space.tight() == 0 ? std::string() : " (" + tight_count_text(space.tight()) + ")";
  throw InputError(fmt::format(
      "no layout of {} on --gpus {} with --gbs {} and {} {}{}; {} of the unconstrained space's {} layouts "
      "fit, "
      "with these values: {}; change or drop a constraint",
      request.space.model.name, request.space.gpus, request.space.global_batch, constraints.describe(),
      space.candidates.empty() ? "is valid" : (card ? "fits the card" : "fits memory"), tight,
      free_space.fitting(), free_space.candidates.size(), fmt::join(hints, "; ")));
}

}  // namespace

namespace detail {

void check_constraints(const SearchRequest& request) {
  const double idle_w = request.cluster.gpu.idle_power_w * request.space.gpus;
  require_input(
      request.power_budget_w <= 0 || request.power_budget_w > idle_w,
      fmt::format("--power-budget-w {:.0f} is below the idle power of {} GPUs ({:.0f} W at {:.0f} W each): "
                  "no layout can meet it; give more than {:.0f} W or fewer --gpus (at most {})",
                  request.power_budget_w, request.space.gpus, idle_w, request.cluster.gpu.idle_power_w,
                  idle_w, static_cast<int>(request.power_budget_w / request.cluster.gpu.idle_power_w)));
  require_input(
      request.max_peak_power_w <= 0 || request.max_peak_power_w > request.cluster.gpu.idle_power_w,
      fmt::format("--max-peak-power-w {:.0f} is below a GPU's idle power ({:.0f} W): no layout can meet "
                  "it; give more than {:.0f} W (the power limit is {:.0f} W)",
                  request.max_peak_power_w, request.cluster.gpu.idle_power_w,
                  request.cluster.gpu.idle_power_w, request.cluster.gpu.power_limit_w));
  require_input(request.top >= 1, fmt::format("--top {}: give 1 or more rows", request.top));
  for (double cap_w : request.power_caps_w) {
    const std::string refusal = sim::power_cap_refusal(request.cluster.gpu, cap_w);
    require_input(refusal.empty(), fmt::format("--power-cap {:g}: {}", cap_w, refusal));
  }
  require_input(request.steps >= 1, fmt::format("--steps {}: give 1 or more steps", request.steps));
}

/// Explains an empty space (nothing valid, or nothing fits) with the nearest feasible alternative.
[[noreturn]] void refuse_empty(const SearchRequest& request, const SpaceRequest& space_request,
                               const LayoutSpace& space) {
  if (!space_request.constraints.empty()) refuse_constrained(request, space_request, space);
  const std::vector<int> gpus = nearest_feasible_gpus(space_request, 2);
  const std::string alternative =
      gpus.empty()
          ? std::string(
                "no GPU count within a factor 2 has one either; give a larger --gpus or a smaller model")
          : fmt::format("nearest GPU counts that have one: --gpus {}", fmt::join(gpus, " or --gpus "));
  if (space.candidates.empty()) {
    throw InputError(fmt::format(
        "no valid layout of {} on --gpus {} with --gbs {}: tp*pp*dp must equal the GPU count with tp "
        "dividing "
        "the {} heads (<= {} per node), pp dividing the {} layers and dp dividing the global batch; {}",
        request.space.model.name, request.space.gpus, request.space.global_batch,
        request.space.model.num_attention_heads, request.space.gpus_per_node, request.space.model.num_layers,
        alternative));
  }
  const Candidate* smallest = &space.candidates.front();
  for (const Candidate& candidate : space.candidates) {
    if (candidate.memory.total_bytes() < smallest->memory.total_bytes()) smallest = &candidate;
  }
  const bool card = space_request.memory_limit == MemoryLimit::kCard;
  const std::string tight = space.tight() == 0 ? std::string() : tight_count_text(space.tight()) + "; ";
  throw InputError(fmt::format(
      "no layout of {} fits {} on --gpus {}: the smallest ({}) needs {} per GPU of {} {}; {}{}",
      request.space.model.name, request.cluster.gpu.name, request.space.gpus,
      parallel::describe(smallest->layout), describe_memory(smallest->memory),
      core::format_bytes(memory_limit_bytes(request.cluster.gpu.memory_bytes, space_request.memory_limit)),
      card ? "on the card" : "usable", tight, alternative));
}

/// Every simulated layout broke a power constraint: name the one closest to meeting it.
[[noreturn]] void refuse_over_budget(const SearchRequest& request, const SearchResult& result) {
  const Evaluation* nearest = nullptr;
  double nearest_excess = INFINITY;
  for (const Evaluation& evaluation : result.evaluations) {
    if (evaluation.verdict != Verdict::kOverBudget) continue;
    double excess = 0;
    if (request.power_budget_w > 0)
      excess += std::max(0.0, evaluation.cluster_power_w / request.power_budget_w - 1);
    if (request.max_peak_power_w > 0)
      excess += std::max(0.0, evaluation.peak_power_w / request.max_peak_power_w - 1);
    if (excess < nearest_excess) {
      nearest_excess = excess;
      nearest = &evaluation;
    }
  }
  if (nearest == nullptr) {
    const auto failed =
        std::find_if(result.evaluations.begin(), result.evaluations.end(),
                     [](const auto& each) { return each.verdict == Verdict::kFailed && !each.note.empty(); });
    throw InputError(fmt::format("no layout of {} on --gpus {} could be simulated; the first failure: {}",
                                 request.space.model.name, request.space.gpus,
                                 failed == result.evaluations.end() ? "none" : failed->note));
  }
  throw InputError(fmt::format(
      "no layout meets the power constraints (--power-budget-w {:.0f}, --max-peak-power-w {:.0f}); the "
      "nearest is "
      "{} at {:.0f} W cluster power and {:.0f} W peak per GPU: raise the limits to these or use fewer --gpus",
      request.power_budget_w, request.max_peak_power_w, parallel::describe(nearest->candidate.layout),
      nearest->cluster_power_w, nearest->peak_power_w));
}

}  // namespace detail

std::vector<int> nearest_feasible_gpus(const SpaceRequest& request, int limit) {
  std::vector<int> found;
  const int step = request.gpus > request.gpus_per_node ? request.gpus_per_node : 1;
  constexpr int kMaxTries = 256;
  for (int offset = 1; offset <= kMaxTries && static_cast<int>(found.size()) < limit; ++offset) {
    for (int sign : {-1, 1}) {
      const int gpus = (request.gpus / step + sign * offset) * step;
      if (gpus < 1 || gpus < request.gpus / 2 || gpus > request.gpus * 2) continue;
      SpaceRequest other = request;
      other.gpus = gpus;
      if (enumerate_layouts(other).fitting() > 0 && static_cast<int>(found.size()) < limit)
        found.push_back(gpus);
    }
  }
  return found;
}

}  // namespace calo::plan
