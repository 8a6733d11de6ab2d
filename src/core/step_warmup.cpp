#include "core/step_warmup.h"

#include <algorithm>
#include <vector>

namespace calo::core {

std::size_t leading_warmup_steps(std::span<const double> durations) {
  if (durations.size() < kMinStepsForWarmup) return 0;
  std::vector<double> sorted(durations.begin(), durations.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  const double median = sorted[sorted.size() / 2];
  const std::size_t most = durations.size() / 4;
  std::size_t leading = 0;
  while (leading < most && durations[leading] > kWarmupFactor * median) ++leading;
  return leading;
}

}  // namespace calo::core
