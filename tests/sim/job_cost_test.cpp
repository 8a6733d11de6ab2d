// The cost of a training run from one step's figures (docs/METRICS.md "Cost of a training run"), and the CLI
// that prints it.
#include "sim/job_cost.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/run_calo.h"
#include "core/error.h"
#include "core/table.h"

namespace calo::sim {
namespace {

TEST(JobCost, TimeEnergyFacilityAndPriceFollowTheFormulas) {
  CostInputs inputs;
  inputs.tokens = 1e9;
  inputs.price_per_kwh = 0.2;
  inputs.pue = 1.25;
  inputs.host_power_w = 1000;
  // 1e6 tokens/s and 0.36 J/token on 2 nodes: 1000 s, 3.6e8 J of GPUs, 2e6 J of hosts.
  const CostEstimate estimate = estimate_cost(1e6, 0.36, 2, inputs);
  EXPECT_DOUBLE_EQ(estimate.wall_s, 1000);
  EXPECT_DOUBLE_EQ(estimate.gpu_energy_j, 3.6e8);
  EXPECT_DOUBLE_EQ(estimate.host_energy_j, 2e6);
  EXPECT_DOUBLE_EQ(estimate.facility_energy_j, (3.6e8 + 2e6) * 1.25);
  EXPECT_NEAR(estimate.cost, (3.6e8 + 2e6) * 1.25 / 3.6e6 * 0.2, 1e-9);
  const std::string text = describe_cost(estimate, inputs, 16, 2);
  EXPECT_NE(text.find("the GPUs alone"), std::string::npos) << text;
  EXPECT_NE(text.find("PUE 1.25"), std::string::npos) << text;
  inputs.pue = 0.9;
  EXPECT_THROW(check_cost_inputs(inputs), InputError);
  inputs.pue = 1;
  inputs.tokens = 0;
  EXPECT_THROW(check_cost_inputs(inputs), InputError);
}

TEST(JobCost, CaloSimPrintsTheCostLineAndItsJson) {
  const std::string job =
      "sim --model llama3-8b --cluster h100-hgx --gpus 8 --tp 2 --gbs 32 --seq 4096 --zero 1 --no-store ";
  const testing::Outcome text = testing::run_calo(job + "--tokens 1e10 --price-per-kwh 0.1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("1e+10 tokens"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("no host power or cooling added"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("GPUs only"), std::string::npos) << text.output;
  const testing::Outcome json = testing::run_calo(job + "--json --tokens 1e10 --pue 1.2 --host-power-w 800");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json figures = nlohmann::json::parse(json.output.substr(json.output.find('{')));
  const nlohmann::json& cost = figures["cost"];
  EXPECT_NEAR(cost["wall_s"].get<double>(), 1e10 / figures["tokens_per_s"].get<double>(), 1e-6);
  EXPECT_NEAR(cost["facility_energy_j"].get<double>(),
              (cost["gpu_energy_j"].get<double>() + 800 * cost["wall_s"].get<double>()) * 1.2, 1);
  const testing::Outcome bad = testing::run_calo(job + "--tokens 1e10 --pue 0.7");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--pue 0.7"), std::string::npos) << bad.output;
  // A cost flag without --tokens names the missing flag, not "--tokens 0", a value the user never gave.
  const testing::Outcome missing = testing::run_calo(job + "--price-per-kwh 0.1");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("needs --tokens"), std::string::npos) << missing.output;
  EXPECT_EQ(missing.output.find("--tokens 0"), std::string::npos) << missing.output;
}

TEST(JobCost, TheCostLineSaysItsCurrency) {
  // Issue 66 item 1: "electricity at 0.1 per kWh: 12345" said no currency. USD unless --currency says.
  const std::string job =
      "sim --model llama3-8b --cluster h100-hgx --gpus 8 --tp 2 --gbs 32 --seq 4096 --zero 1 --no-store "
      "--tokens 1e12 --price-per-kwh 0.1 ";
  const testing::Outcome usd = testing::run_calo(job);
  ASSERT_EQ(usd.exit_code, 0) << usd.output;
  EXPECT_NE(usd.output.find("# electricity at 0.1 USD per kWh: cost "), std::string::npos) << usd.output;
  const testing::Outcome json = testing::run_calo(job + "--currency EUR --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json cost = nlohmann::json::parse(json.output.substr(json.output.find('{')))["cost"];
  EXPECT_EQ(cost["currency"], "EUR");
  // The amount with its thousands separated, then the currency: "cost 12,345 EUR".
  const testing::Outcome eur = testing::run_calo(job + "--currency EUR");
  ASSERT_EQ(eur.exit_code, 0) << eur.output;
  const std::string amount = core::format_thousands(cost["cost"].get<double>());
  EXPECT_GT(cost["cost"].get<double>(), 1000);
  EXPECT_NE(amount.find(','), std::string::npos) << amount;
  EXPECT_NE(eur.output.find("0.1 EUR per kWh: cost " + amount + " EUR\n"), std::string::npos) << eur.output;
  const testing::Outcome bad = testing::run_calo(job + "--currency 'E U R'");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--currency"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace calo::sim
