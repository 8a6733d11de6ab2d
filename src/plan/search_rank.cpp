// Ranking a layout search's evaluations: the objective's score, the Pareto front and its corners, the
// verdicts' counts, the names of objectives and verdicts (search_internal.h; search.cpp runs the search).
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/enum_names.h"
#include "core/error.h"
#include "plan/search_internal.h"

namespace calo::plan {
namespace {

/// One of the Pareto front's four figures: its corner's name and its value signed so that higher is better.
struct FrontFigure {
  const char* corner;
  double (*goodness)(const Evaluation&);
};

/// The four figures of the front: tokens/s, tokens/J, peak power, die temperature.
constexpr FrontFigure kFrontFigures[] = {
    {"fastest", [](const Evaluation& e) { return e.tokens_per_s; }},
    {"most tokens/J", [](const Evaluation& e) { return e.tokens_per_j; }},
    {"lowest peak", [](const Evaluation& e) { return -e.peak_power_w; }},
    {"coolest", [](const Evaluation& e) { return -e.max_die_c; }}};

/// True when `a` is at least as good as `b` on all four Pareto figures and better on one.
bool dominates(const Evaluation& a, const Evaluation& b) {
  bool better = false;
  for (const FrontFigure& figure : kFrontFigures) {
    const double mine = figure.goodness(a), theirs = figure.goodness(b);
    if (!(mine >= theirs)) return false;
    better = better || mine > theirs;
  }
  return better;
}

}  // namespace

namespace detail {

/// Objective score, lower is better (step time, or energy per step: tokens per step are fixed by the job).
double score(const Evaluation& evaluation, Objective objective) {
  return objective == Objective::kEnergy ? evaluation.energy_per_step_j : evaluation.iteration_s;
}

/// Whether `a` ranks before `b`: ranked before anything else, then by the objective's score.
bool ranks_before(const Evaluation& a, const Evaluation& b, Objective objective) {
  if ((a.verdict == Verdict::kRanked) != (b.verdict == Verdict::kRanked))
    return a.verdict == Verdict::kRanked;
  return score(a, objective) < score(b, objective);
}

/// Counts the pruned and simulated evaluations into `result`; returns the indices of the ranked ones.
std::vector<std::size_t> count_verdicts(SearchResult& result) {
  std::vector<std::size_t> ranked;
  for (std::size_t index = 0; index < result.evaluations.size(); ++index) {
    const Verdict verdict = result.evaluations[index].verdict;
    if (verdict == Verdict::kPruned) ++result.pruned;
    if (verdict == Verdict::kStopped) ++result.stopped;
    if (verdict == Verdict::kRanked || verdict == Verdict::kOverBudget || verdict == Verdict::kFailed)
      ++result.simulated;
    if (verdict == Verdict::kRanked) ranked.push_back(index);
  }
  return ranked;
}

/// Chapter 3: marks the Pareto front of the `ranked` evaluations (result.pareto, fastest first) and sorts
/// them into result.ranking (best first; under the Pareto objective the front first).
void rank_and_mark_front(const SearchRequest& request, std::vector<std::size_t> ranked,
                         SearchResult& result) {
  for (std::size_t index : ranked) {
    Evaluation& evaluation = result.evaluations[index];
    evaluation.pareto = std::none_of(ranked.begin(), ranked.end(), [&](std::size_t other) {
      return dominates(result.evaluations[other], evaluation);
    });
    if (evaluation.pareto) result.pareto.push_back(index);
  }
  auto by_throughput = [&](std::size_t a, std::size_t b) {
    return result.evaluations[a].iteration_s < result.evaluations[b].iteration_s;
  };
  std::stable_sort(result.pareto.begin(), result.pareto.end(), by_throughput);
  std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
    const Evaluation& first = result.evaluations[a];
    const Evaluation& second = result.evaluations[b];
    if (request.objective == Objective::kPareto && first.pareto != second.pareto) return first.pareto;
    return score(first, request.objective) < score(second, request.objective);
  });
  result.ranking = std::move(ranked);
}

}  // namespace detail

Objective parse_objective(const std::string& text) {
  if (text == "throughput") return Objective::kThroughput;
  if (text == "energy") return Objective::kEnergy;
  if (text == "pareto") return Objective::kPareto;
  throw InputError(fmt::format("--objective '{}': give throughput, energy or pareto", text));
}

constexpr std::array kObjectiveNames{"throughput", "energy", "pareto"};

std::string to_string(Objective objective) {
  return core::enum_name(objective, kObjectiveNames);
}

constexpr std::array kVerdictNames{"ranked", "oom",       "pruned", "over-budget",
                                   "failed", "too-large", "stopped"};

const char* to_string(Verdict verdict) {
  return core::enum_name(verdict, kVerdictNames);
}

int equivalent_to_first(const SearchResult& result, Objective objective) {
  if (result.ranking.empty()) return 0;
  const double first = detail::score(result.evaluations[result.ranking.front()], objective);
  int rows = 0;
  for (std::size_t index : result.ranking) {
    if (detail::score(result.evaluations[index], objective) > first * (1 + kEquivalentFraction)) break;
    ++rows;
  }
  return rows;
}

std::vector<FrontCorner> front_corners(const SearchResult& result) {
  std::vector<FrontCorner> corners;
  if (result.pareto.empty()) return corners;
  for (const FrontFigure& figure : kFrontFigures) {
    std::size_t best = result.pareto.front();
    for (std::size_t index : result.pareto) {
      if (figure.goodness(result.evaluations[index]) > figure.goodness(result.evaluations[best]))
        best = index;
    }
    const bool listed = std::any_of(corners.begin(), corners.end(),
                                    [best](const FrontCorner& corner) { return corner.index == best; });
    if (!listed) corners.push_back({figure.corner, best});
  }
  return corners;
}

}  // namespace calo::plan
