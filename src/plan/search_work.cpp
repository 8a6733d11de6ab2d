#include <algorithm>

#include "plan/search.h"

namespace calo::plan {

PrunedFractions pruned_fractions(const SearchWork& work) {
  if (work.prune && work.objective == Objective::kThroughput)
    return {kPrunedBuiltFraction, kPrunedSimulatedFraction};
  if (work.prune && work.objective == Objective::kEnergy)
    return {kEnergyPrunedBuiltFraction, kEnergyPrunedSimulatedFraction};
  return {kBalancedGraphsFactor, 1.0};
}

double estimated_search_s(const SearchWork& work, int threads) {
  const auto [built, simulated] = pruned_fractions(work);
  return (work.probe_ops * kSearchSecondsPerProbeOp + work.graph_ops * built * kSearchSecondsPerBuiltOp +
          work.steps * simulated *
              (work.evaluations * kSearchSecondsPerSimulatedStep +
               work.evaluated_ops * kBalancedGraphsFactor * kSearchSecondsPerSimulatedOp)) /
         std::max(1, threads);
}

double expected_evaluation_s(const SearchWork& work, double ops, std::size_t caps) {
  auto fractions = pruned_fractions(work);
  const double built_s = ops * fractions.built * kSearchSecondsPerBuiltOp / static_cast<double>(caps);
  return built_s + fractions.simulated * simulated_evaluation_s(ops, work.steps);
}

double simulated_evaluation_s(double ops, int steps) {
  return steps *
         (kSearchSecondsPerSimulatedStep + ops * kBalancedGraphsFactor * kSearchSecondsPerSimulatedOp);
}

}  // namespace calo::plan
