// Warm-up a run did not mark: the leading steps that compilation, autotuning and allocator growth make
// several times longer than the rest. One rule for `calo record`'s summary and the analysis (docs/METRICS.md
// "Steps").
#pragma once

#include <cstddef>
#include <span>

namespace calo::core {

/// Fewest steps for which leading warm-up is looked for.
inline constexpr std::size_t kMinStepsForWarmup = 5;
/// A leading step longer than this many times the median step is warm-up.
inline constexpr double kWarmupFactor = 2.0;

/// How many leading steps of `durations` (in run order, any unit) are warm-up: with at least
/// kMinStepsForWarmup steps, each leading step longer than kWarmupFactor x the median of all of them, at most
/// a quarter of the steps; 0 otherwise.
std::size_t leading_warmup_steps(std::span<const double> durations);

}  // namespace calo::core
