#include "cli/plan_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

namespace calo::cli {

std::function<void(const plan::SearchProgress&)> search_progress_printer(bool terminal) {
  const auto started = std::chrono::steady_clock::now();
  auto elapsed_s = [started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  // Time left: the time so far times the work left over the work done (the total adapts as the bound prunes).
  auto left_s = [](const plan::SearchProgress& progress, double so_far_s) {
    const double done = progress.fraction();
    return done > 0 ? so_far_s * (1 - done) / done : 0.0;
  };
  if (terminal) {
    return [elapsed_s, left_s](const plan::SearchProgress& progress) {
      constexpr int kWidth = 40;
      const bool finished = progress.steps_done == progress.steps_total;
      const int filled = finished ? kWidth : static_cast<int>(kWidth * progress.fraction());
      const double so_far_s = elapsed_s();
      fmt::print(stderr, "\r[{:=<{}}{: <{}}] {:3.0f} %, {:.0f} s{}   ", "", filled, "", kWidth - filled,
                 finished ? 100.0 : 100 * progress.fraction(), so_far_s,
                 finished ? std::string() : fmt::format(", about {:.0f} s left", left_s(progress, so_far_s)));
      if (finished) fmt::print(stderr, "\n");
    };
  }
  auto last_s = std::make_shared<double>(0.0);
  return [elapsed_s, left_s, last_s](const plan::SearchProgress& progress) {
    constexpr double kEveryS = 10;
    const double so_far_s = elapsed_s();
    const bool finished = progress.steps_done == progress.steps_total;
    if (!finished && so_far_s - *last_s < kEveryS) return;
    *last_s = so_far_s;
    fmt::print(
        stderr, "calo plan: {}/{} layout steps ({:.0f} % of the work), {:.0f} s{}\n", progress.steps_done,
        progress.steps_total, finished ? 100.0 : 100 * progress.fraction(), so_far_s,
        finished ? std::string(", done") : fmt::format(", about {:.0f} s left", left_s(progress, so_far_s)));
  };
}

std::string stopped_text(const plan::SearchRequest& request, const plan::SearchResult& result) {
  return fmt::format(
      "stopped at --max-minutes {:g} after {:.0f} s: {} of the {} evaluations that fit memory were not "
      "started, so the ranking covers only the {} simulated; for the whole space give --max-minutes {:.0f} "
      "(estimated {:.1f} min) or narrow it",
      request.max_minutes, result.wall_s, result.stopped, result.stopped + result.simulated + result.pruned,
      result.simulated, std::ceil(std::max(result.estimated_s, result.wall_s) * 2 / 60),
      result.estimated_s / 60);
}

std::string excluded_text(const std::vector<std::pair<std::string, int>>& excluded_by) {
  std::vector<std::string> parts;
  for (const auto& [flag, count] : excluded_by) parts.push_back(fmt::format("{} by {}", count, flag));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace calo::cli
