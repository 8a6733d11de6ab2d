#include "sim/job_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/table.h"

namespace calo::sim {
namespace {

constexpr double kJoulesPerKwh = 3.6e6;

/// A duration in the largest unit that keeps it readable.
std::string readable_duration(double seconds) {
  if (seconds >= 2 * 86400) return fmt::format("{:.1f} days", seconds / 86400);
  if (seconds >= 2 * 3600) return fmt::format("{:.1f} hours", seconds / 3600);
  return fmt::format("{:.0f} s", seconds);
}

/// Energy in kWh, MWh or GWh.
std::string readable_energy(double joules) {
  const double kwh = joules / kJoulesPerKwh;
  if (kwh >= 1e6) return fmt::format("{:.2f} GWh", kwh / 1e6);
  if (kwh >= 1e3) return fmt::format("{:.2f} MWh", kwh / 1e3);
  return fmt::format("{:.2f} kWh", kwh);
}

}  // namespace

void check_cost_inputs(const CostInputs& inputs) {
  // 0 is the unset default: a cost flag without --tokens names the missing flag, not a value never given.
  require_input(inputs.tokens != 0,
                "the cost of training needs --tokens (the tokens to train, e.g. --tokens 1e12); "
                "--price-per-kwh, --currency, --pue and --host-power-w only apply with it");
  require_input(std::isfinite(inputs.tokens) && inputs.tokens > 0 && inputs.tokens <= kMaxCostTokens,
                fmt::format("--tokens {:g}: give the tokens to train, at most {:g}, e.g. --tokens 1e12",
                            inputs.tokens, kMaxCostTokens));
  require_input(std::isfinite(inputs.price_per_kwh) && inputs.price_per_kwh >= 0 &&
                    inputs.price_per_kwh <= kMaxPricePerKwh,
                fmt::format("--price-per-kwh {:g}: give a price in [0, {:g}], e.g. 0.10",
                            inputs.price_per_kwh, kMaxPricePerKwh));
  require_input(
      !inputs.currency.empty() && inputs.currency.size() <= 16 &&
          std::none_of(inputs.currency.begin(), inputs.currency.end(),
                       [](unsigned char letter) { return std::isspace(letter) || std::iscntrl(letter); }),
      fmt::format("--currency '{}': give the currency of --price-per-kwh as one short word, e.g. "
                  "USD or EUR",
                  inputs.currency));
  require_input(std::isfinite(inputs.pue) && inputs.pue >= 1 && inputs.pue <= 5,
                fmt::format("--pue {}: power usage effectiveness lies in [1, 5] (1.1-1.5 for most data "
                            "centres); 1 adds nothing for cooling",
                            inputs.pue));
  require_input(
      std::isfinite(inputs.host_power_w) && inputs.host_power_w >= 0 && inputs.host_power_w <= kMaxHostPowerW,
      fmt::format("--host-power-w {:g}: give each node's power beyond its GPUs in W, in [0, {:g}]",
                  inputs.host_power_w, kMaxHostPowerW));
}

CostEstimate estimate_cost(double tokens_per_s, double gpu_energy_per_token_j, int nodes,
                           const CostInputs& inputs) {
  check_cost_inputs(inputs);
  CostEstimate estimate;
  estimate.wall_s = tokens_per_s > 0 ? inputs.tokens / tokens_per_s : INFINITY;
  estimate.gpu_energy_j = inputs.tokens * gpu_energy_per_token_j;
  estimate.host_energy_j = inputs.host_power_w * nodes * estimate.wall_s;
  estimate.facility_energy_j = (estimate.gpu_energy_j + estimate.host_energy_j) * inputs.pue;
  estimate.cost = estimate.facility_energy_j / kJoulesPerKwh * inputs.price_per_kwh;
  return estimate;
}

std::string describe_cost(const CostEstimate& estimate, const CostInputs& inputs, int gpus, int nodes) {
  std::string text =
      fmt::format("# {:.3g} tokens: {} on {} GPUs; GPU energy {} (the GPUs alone)\n", inputs.tokens,
                  readable_duration(estimate.wall_s), gpus, readable_energy(estimate.gpu_energy_j));
  const bool added = inputs.host_power_w > 0 || inputs.pue > 1;
  text +=
      added ? fmt::format("# facility energy {}: + hosts {:.0f} W x {} node(s) ({}), x PUE {:.2f}\n",
                          readable_energy(estimate.facility_energy_j), inputs.host_power_w, nodes,
                          readable_energy(estimate.host_energy_j), inputs.pue)
            : std::string("# no host power or cooling added (give --host-power-w W per node and --pue X)\n");
  if (inputs.price_per_kwh > 0) {
    text += fmt::format("# electricity at {:g} {} per kWh: cost {} {}\n", inputs.price_per_kwh,
                        inputs.currency, core::format_thousands(estimate.cost), inputs.currency);
  }
  return text;
}

}  // namespace calo::sim
