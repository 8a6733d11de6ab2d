// What `calo plan` prints: the layout search's ranking, front and flags to paste, its progress on stderr (a
// bar on a terminal, a line every 10 s otherwise, its fraction and time left weighted by the search's
// estimated work, not its step count), what the constraints excluded and what a stop at --max-minutes left
// out; and the tables of `calo plan partition` and `calo plan power`. Presentation only: the requests and
// their JSON live in plan/plan_request.h.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "plan/gpu_conditions.h"
#include "plan/partition.h"
#include "plan/power_plan.h"
#include "plan/search.h"

namespace calo::cli {

/// A progress callback for plan::SearchRequest::progress: a bar when `terminal`, else a line at most every
/// 10 s with the steps done, the share of the work done, the time so far and the time left.
std::function<void(const plan::SearchProgress&)> search_progress_printer(bool terminal);

/// What a search stopped at --max-minutes left out, and how to get the whole ranking.
std::string stopped_text(const plan::SearchRequest& request, const plan::SearchResult& result);

/// "1200 by --tp, 300 by --zero": what each constraint excluded (plan::SearchResult::excluded_by).
std::string excluded_text(const std::vector<std::pair<std::string, int>>& excluded_by);

/// The ranking (`top` rows), the flags to paste, the warnings on the first pick and the Pareto front; with
/// `show_all` every candidate too.
void print_search_text(const plan::SearchRequest& request, const plan::SearchResult& result, int top,
                       bool show_all);

/// `calo plan power`'s table: the free and the planned clocks, the verdict and the advice.
void print_power_text(const plan::PowerPlanRequest& request, const plan::PowerPlanResult& result,
                      double max_slowdown_pct);

/// `calo plan partition`'s table: the uniform, even/odd and found partitions and the flags that run the
/// found one; `from_run` and `conditions` say what --from read (empty: no --from).
void print_partition_text(const plan::PartitionRequest& request, const plan::PartitionResult& result,
                          const std::string& from_run, const plan::GpuConditions& conditions, int steps);

}  // namespace calo::cli
