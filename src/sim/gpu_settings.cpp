#include "sim/gpu_settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace calo::sim {

std::vector<double> power_caps_w(const std::vector<std::string>& entries, int world, const GpuSpec& gpu) {
  std::vector<double> caps;
  if (entries.empty()) return caps;
  caps.assign(world, gpu.power_limit_w);
  for (const std::string& entry : entries) {
    const auto equals = entry.find('=');
    const std::string value_text = equals == std::string::npos ? entry : entry.substr(equals + 1);
    const std::optional<double> parsed_w = core::parse_finite_number(value_text);
    require_input(parsed_w.has_value(),
                  fmt::format("--power-cap '{}': expected W or RANK=W in watts, e.g. --power-cap 500 or "
                              "--power-cap 3=400",
                              entry));
    const double cap_w = *parsed_w;
    const std::string refusal = power_cap_refusal(gpu, cap_w);
    require_input(refusal.empty(), fmt::format("--power-cap '{}': {}", entry, refusal));
    if (equals == std::string::npos) {
      std::fill(caps.begin(), caps.end(), cap_w);
      continue;
    }
    const std::vector<double> one = per_gpu_values({entry}, world, -1, "--power-cap");
    for (int rank = 0; rank < world; ++rank)
      if (one[rank] >= 0) caps[rank] = cap_w;
  }
  return caps;
}

std::vector<double> per_gpu_values(const std::vector<std::string>& entries, int world, double fallback,
                                   const std::string& flag) {
  std::vector<double> values;
  if (entries.empty()) return values;
  values.assign(world, fallback);
  for (const std::string& entry : entries) {
    const auto equals = entry.find('=');
    const std::optional<double> rank_number =
        core::parse_finite_number(equals == std::string::npos ? std::string() : entry.substr(0, equals));
    const std::optional<double> value =
        core::parse_finite_number(equals == std::string::npos ? std::string() : entry.substr(equals + 1));
    require_input(rank_number && value && *rank_number == std::floor(*rank_number) && *rank_number < 1e9,
                  fmt::format("{} '{}': expected RANK=VALUE, e.g. {} 3=0.9", flag, entry, flag));
    const int rank = static_cast<int>(std::max(-1.0, *rank_number));
    require_input(rank >= 0 && rank < world,
                  fmt::format("{} '{}': rank {} is outside 0..{}", flag, entry, rank, world - 1));
    values[rank] = *value;
  }
  return values;
}

}  // namespace calo::sim
