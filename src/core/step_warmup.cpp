#include "core/step_warmup.h"

#include <vector>

#include "core/statistics.h"

namespace calo::core {

std::size_t leading_warmup_steps(std::span<const double> durations) {
  if (durations.size() < kMinStepsForWarmup) return 0;
  const double median = upper_median(std::vector<double>(durations.begin(), durations.end()));
  const std::size_t most = durations.size() / 4;
  std::size_t leading = 0;
  while (leading < most && durations[leading] > kWarmupFactor * median) ++leading;
  return leading;
}

}  // namespace calo::core
