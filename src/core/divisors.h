// Divisors of a whole number: the sizes a layout may split a count into (validation and the planner), and
// the multiples of a step near a value (what a refusal offers instead).
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

namespace calo::core {

/// Positive divisors of `value` in increasing order.
inline std::vector<int> divisors(int value) {
  std::vector<int> result;
  for (int candidate = 1; candidate <= value; ++candidate) {
    if (value % candidate == 0) result.push_back(candidate);
  }
  return result;
}

/// Nearest multiples of `step` around `value` (positive ones only), e.g. "try 96 or 104".
inline std::string nearby_multiples(int value, int step, const std::string& prefix = "") {
  int below = value / step * step;
  int above = below + step;
  if (below > 0) return fmt::format("try {}{} or {}{}", prefix, below, prefix, above);
  return fmt::format("try {}{}", prefix, above);
}

}  // namespace calo::core
