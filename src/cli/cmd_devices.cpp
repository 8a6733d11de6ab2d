// `calo devices [--json]`: every local device, what each telemetry source can read, power limit and clocks.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "core/json_fields.h"
#include "core/table.h"
#include "telemetry/source.h"

namespace calo::telemetry {

CALO_JSON_FIELDS(MetricInfo, name, unit, kind, group, default_period_ns, expected_cost_ns, buffered)
CALO_JSON_FIELDS(DeviceInfo, index, kind, name, uuid, pci_bus, driver, power_limit_w, max_sm_mhz, max_mem_mhz,
                 metrics, unsupported)

}  // namespace calo::telemetry

namespace calo::cli {
namespace {

int show_devices(bool json) {
  auto sources = telemetry::open_local_sources();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& source : sources) {
    nlohmann::json source_json = {{"source", source->name()}, {"available", source->available()}};
    if (!source->available()) {
      source_json["reason"] = source->unavailable_reason();
      if (!json) fmt::print("{}: not available ({})\n", source->name(), source->unavailable_reason());
      out.push_back(source_json);
      continue;
    }
    for (const auto& device : source->devices()) {
      core::TextTable table({"metric", "unit", "kind", "query group", "default period", "cost"});
      table.set_units({"", "", "", "", "ms", "us"});
      for (const auto& metric : device.metrics) {
        table.add_row({metric.name, metric.unit, std::string(telemetry::metric_kind_name(metric.kind)),
                       metric.group, fmt::format("{:g}", static_cast<double>(metric.default_period_ns) / 1e6),
                       fmt::format("{:g}", static_cast<double>(metric.expected_cost_ns) / 1e3)});
      }
      source_json["devices"].push_back(device);
      if (json) continue;
      fmt::print("{} {} {}: {}{}\n", source->name(), device.kind, device.index, device.name,
                 device.pci_bus.empty() ? "" : fmt::format(" (PCI {})", device.pci_bus));
      if (!device.uuid.empty() || !device.driver.empty()) {
        fmt::print("  uuid {}  driver {}\n", device.uuid.empty() ? "-" : device.uuid,
                   device.driver.empty() ? "-" : device.driver);
      }
      if (device.power_limit_w > 0 || device.max_sm_mhz > 0) {
        fmt::print("  power limit {:.0f} W, max SM clock {:.0f} MHz, max memory clock {:.0f} MHz\n",
                   device.power_limit_w, device.max_sm_mhz, device.max_mem_mhz);
      }
      fmt::print("{}", table.render());
      for (const auto& reason : device.unsupported) fmt::print("  not readable: {}\n", reason);
    }
    out.push_back(source_json);
  }
  if (json) print_json(out);
  return 0;
}

const CommandRegistration kDevices("devices", "list local GPUs/CPUs and what each telemetry source can read",
                                   60, [](CLI::App& app) -> std::function<int()> {
                                     auto json = std::make_shared<bool>(false);
                                     app.add_flag("--json", *json, "Print as JSON");
                                     return [json] { return show_devices(*json); };
                                   });

}  // namespace
}  // namespace calo::cli
