// `calo probe [--seconds N] [--json]`: query cost and sensor refresh of every metric on this host, with
// recommended sampling periods.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/table.h"
#include "telemetry/probe.h"

namespace calo::telemetry {

CALO_JSON_FIELDS(ProbeRow, source, device_index, device_kind, metric, group, kind, cost_median_us,
                 cost_p99_us, cpu_per_read_us, reads, changes, changes_per_s, transients, refresh_ms,
                 recommended_period_ms, default_period_ms, buffered, errors)

}  // namespace calo::telemetry

namespace calo::cli {
namespace {

struct ProbeFlags {
  double seconds = 2.0;
  bool json = false;
};

int run_probe(const ProbeFlags& flags) {
  require_input(flags.seconds > 0 && flags.seconds <= 600,
                fmt::format("--seconds {} is out of range; give 0 < N <= 600", flags.seconds));
  auto sources = telemetry::open_local_sources();
  std::vector<telemetry::Source*> usable;
  for (auto& source : sources) {
    if (source->available()) {
      usable.push_back(source.get());
    } else if (!flags.json) {
      fmt::print("# {}: not available ({})\n", source->name(), source->unavailable_reason());
    }
  }
  if (!flags.json) {
    fmt::print(
        "# probing {} source(s): query costs one device at a time, then each query group read back to back "
        "for {:g} s per device (devices in parallel)\n",
        usable.size(), flags.seconds);
  }
  const auto rows = telemetry::probe_sources(usable, flags.seconds);
  if (flags.json) {
    print_json(rows);
    return 0;
  }
  core::TextTable table({"source", "dev", "metric", "group", "cost p50", "cost p99", "cpu/read", "reads",
                         "changes/s", "transient", "refresh", "recommended", "default", "errors"});
  table.set_units({"", "", "", "", "us", "us", "us", "", "1/s", "", "ms", "ms", "ms", ""});
  for (const auto& row : rows) {
    table.add_row({row.source, std::to_string(row.device_index), row.metric, row.group,
                   fmt::format("{:.1f}", row.cost_median_us), fmt::format("{:.1f}", row.cost_p99_us),
                   fmt::format("{:.1f}", row.cpu_per_read_us), std::to_string(row.reads),
                   fmt::format("{:.2f}", row.changes_per_s), std::to_string(row.transients),
                   row.refresh_ms > 0 ? fmt::format("{:.1f}", row.refresh_ms) : "-",
                   fmt::format("{:g}", row.recommended_period_ms), fmt::format("{:g}", row.default_period_ms),
                   std::to_string(row.errors)});
  }
  fmt::print("{}", table.render());
  double slowest_us = 0;
  std::string slowest;
  for (const auto& row : rows) {
    if (row.cost_median_us > slowest_us) slowest_us = row.cost_median_us, slowest = row.metric;
  }
  fmt::print("probe: {} metrics on {} source(s); most expensive query {} at {:.1f} us\n", rows.size(),
             usable.size(), slowest.empty() ? "-" : slowest, slowest_us);
  return 0;
}

const CommandRegistration kProbe("probe",
                                 "measure query cost and sensor refresh of every telemetry metric here", 61,
                                 [](CLI::App& app) -> std::function<int()> {
                                   auto flags = std::make_shared<ProbeFlags>();
                                   app.add_option("--seconds", flags->seconds,
                                                  "Seconds of back-to-back reads per query group and device")
                                       ->capture_default_str();
                                   app.add_flag("--json", flags->json, "Print as JSON");
                                   return [flags] { return run_probe(*flags); };
                                 });

}  // namespace
}  // namespace calo::cli
