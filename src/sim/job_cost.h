// What training a number of tokens takes, from one step's figures: time, the GPUs' energy, the facility's
// energy (hosts and PUE added) and its price. `calo sim --tokens N --price-per-kwh P --pue X --host-power-w
// W` prints it; formulas in docs/METRICS.md ("Cost of a training run").
#pragma once

#include <string>

namespace calo::sim {

/// Most tokens --tokens takes (Llama 3 trained on 1.5e13; beyond 1e18 the printed figures overflow a double).
inline constexpr double kMaxCostTokens = 1e18;
/// Highest --price-per-kwh and --host-power-w taken (far above any tariff or node; larger ones print inf).
inline constexpr double kMaxPricePerKwh = 1e6;
/// Highest --host-power-w taken, W per node.
inline constexpr double kMaxHostPowerW = 1e6;

/// The questions a user brings: how many tokens, at what electricity price, in what facility.
struct CostInputs {
  double tokens = 0;         ///< tokens to train (> 0)
  double price_per_kwh = 0;  ///< electricity price per kWh, in `currency` (0 = no money figure)
  std::string currency =
      "USD";         ///< what price_per_kwh and the cost are in: a label printed with them (--currency)
  double pue = 1.0;  ///< facility power usage effectiveness (cooling, conversion): >= 1
  double host_power_w = 0;  ///< mean power of each node beyond its GPUs (CPUs, memory, NICs, fans), W
};

/// The estimate for CostInputs::tokens.
struct CostEstimate {
  double wall_s = 0;             ///< tokens / tokens_per_s
  double gpu_energy_j = 0;       ///< tokens x GPU energy per token (all GPUs)
  double host_energy_j = 0;      ///< host_power_w x nodes x wall_s
  double facility_energy_j = 0;  ///< (gpu_energy_j + host_energy_j) x pue
  double cost = 0;               ///< facility_energy_j in kWh x price_per_kwh, in CostInputs::currency
};

/// Throws InputError naming the flag (--tokens, --price-per-kwh, --pue, --host-power-w) for a value outside
/// its range.
void check_cost_inputs(const CostInputs& inputs);

/// The estimate from the job's throughput and the energy all its GPUs draw per token, on `nodes` nodes.
CostEstimate estimate_cost(double tokens_per_s, double gpu_energy_per_token_j, int nodes,
                           const CostInputs& inputs);

/// Lines for a person: time, GPU energy (saying it is the GPUs' alone), facility energy with what was added,
/// and the price when one was given, in its currency with thousands separated ("12,345 USD").
std::string describe_cost(const CostEstimate& estimate, const CostInputs& inputs, int gpus, int nodes);

}  // namespace calo::sim
