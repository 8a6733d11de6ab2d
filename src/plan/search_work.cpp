#include <algorithm>

#include "plan/search.h"

namespace calo::plan {

PrunedFractions pruned_fractions(const SearchWork& work) {
  if (work.prune && work.objective == Objective::kThroughput)
    return {kPrunedBuiltFraction, kPrunedSimulatedFraction, kPrunedSimulatedOpFraction};
  if (work.prune && work.objective == Objective::kEnergy)
    return {kEnergyPrunedBuiltFraction, kEnergyPrunedSimulatedFraction, kEnergyPrunedSimulatedFraction};
  return {kBalancedGraphsFactor, 1.0, 1.0};
}

double estimated_search_s(const SearchWork& work, int threads) {
  const auto [built, simulated, simulated_ops] = pruned_fractions(work);
  return (work.probe_ops * kSearchSecondsPerProbeOp + work.graph_ops * built * kSearchSecondsPerBuiltOp +
          work.steps *
              (simulated * work.evaluations * kSearchSecondsPerSimulatedStep +
               simulated_ops * work.evaluated_ops * kBalancedGraphsFactor * kSearchSecondsPerSimulatedOp)) /
         std::max(1, threads);
}

double expected_evaluation_s(const SearchWork& work, double ops, std::size_t caps) {
  auto fractions = pruned_fractions(work);
  const double built_s = ops * fractions.built * kSearchSecondsPerBuiltOp / static_cast<double>(caps);
  return built_s +
         work.steps * (fractions.simulated * kSearchSecondsPerSimulatedStep +
                       fractions.simulated_ops * ops * kBalancedGraphsFactor * kSearchSecondsPerSimulatedOp);
}

double simulated_evaluation_s(double ops, int steps) {
  return steps *
         (kSearchSecondsPerSimulatedStep + ops * kBalancedGraphsFactor * kSearchSecondsPerSimulatedOp);
}

}  // namespace calo::plan
