// Divisors of a whole number: the sizes a layout may split a count into (validation and the planner).
#pragma once

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

}  // namespace calo::core
