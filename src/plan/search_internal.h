// Between a layout search's halves: search.cpp runs the search, search_rank.cpp ranks what it simulated
// (scores, the Pareto front, verdict counts), search_refusals.cpp says why a request cannot be searched or
// ranked.
#pragma once

#include <cstddef>
#include <vector>

#include "plan/layout_space.h"
#include "plan/search.h"

namespace calo::plan::detail {

/// Objective score, lower is better (step time, or energy per step: tokens per step are fixed by the job).
double score(const Evaluation& evaluation, Objective objective);
/// Whether `a` ranks before `b`: ranked before anything else, then by the objective's score.
bool ranks_before(const Evaluation& a, const Evaluation& b, Objective objective);
/// Counts the pruned and simulated evaluations into `result`; returns the indices of the ranked ones.
std::vector<std::size_t> count_verdicts(SearchResult& result);
/// Chapter 3: marks the Pareto front of the `ranked` evaluations (result.pareto, fastest first) and sorts
/// them into result.ranking (best first; under the Pareto objective the front first).
void rank_and_mark_front(const SearchRequest& request, std::vector<std::size_t> ranked, SearchResult& result);

/// Refuses (InputError) a request no layout can meet: a power budget or peak below idle power, a refused
/// power cap, --top or --steps below 1.
void check_constraints(const SearchRequest& request);
/// Explains an empty space (nothing valid, or nothing fits) with the nearest feasible alternative.
[[noreturn]] void refuse_empty(const SearchRequest& request, const SpaceRequest& space_request,
                               const LayoutSpace& space);
/// Every simulated layout broke a power constraint: name the one closest to meeting it.
[[noreturn]] void refuse_over_budget(const SearchRequest& request, const SearchResult& result);

}  // namespace calo::plan::detail
