// Between the graph checkers' halves: check.cpp (collectives, point to point, FLOPs, volumes) and
// check_deadlock.cpp (the rendezvous deadlock simulation).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "graph/check.h"

namespace calo::graph::detail {

/// Problems reported per checker before the rest are summarized.
inline constexpr std::size_t kMaxProblems = 20;

/// Adds `message` as a problem of `check`, or once kMaxProblems are listed, one "further problems not
/// listed".
inline void add_problem(std::vector<Problem>& problems, const char* check, std::string message) {
  if (problems.size() < kMaxProblems) {
    problems.push_back({check, std::move(message)});
  } else if (problems.size() == kMaxProblems) {
    problems.push_back({check, "further problems not listed"});
  }
}

}  // namespace calo::graph::detail
