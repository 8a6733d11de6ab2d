// The upper median of a list of figures: the one middle value every summary here takes (step times, power
// samples, a column's spread), never an average of two.
#pragma once

#include <vector>

namespace calo::core {

/// The element at size / 2 of `values` in sorted order (the upper middle for an even count); NaN when empty.
double upper_median(std::vector<double> values);

}  // namespace calo::core
