#include "core/median.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace calo::core {

double upper_median(std::vector<double> values) {
  if (values.empty()) return NAN;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace calo::core
