// What `calo plan`'s layout search says beside its ranking: progress on stderr (a bar on a terminal, a line
// every 10 s otherwise, its fraction and time left weighted by the search's estimated work, not its step
// count), what the constraints excluded and what a stop at --max-minutes left out.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "plan/search.h"

namespace calo::cli {

/// A progress callback for plan::SearchRequest::progress: a bar when `terminal`, else a line at most every
/// 10 s with the steps done, the share of the work done, the time so far and the time left.
std::function<void(const plan::SearchProgress&)> search_progress_printer(bool terminal);

/// What a search stopped at --max-minutes left out, and how to get the whole ranking.
std::string stopped_text(const plan::SearchRequest& request, const plan::SearchResult& result);

/// "1200 by --tp, 300 by --zero": what each constraint excluded (plan::SearchResult::excluded_by).
std::string excluded_text(const std::vector<std::pair<std::string, int>>& excluded_by);

}  // namespace calo::cli
