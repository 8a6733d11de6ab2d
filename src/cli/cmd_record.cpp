// `calo record [--out DIR] [period flags] [--markers SPEC]... -- CMD ARGS...`: runs CMD, records every local
// device into a run store, prints a per-GPU summary, returns CMD's exit code.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "cli/command.h"
#include "core/error.h"
#include "serve/openmetrics.h"
#include "telemetry/recorder.h"

namespace calo::cli {
namespace {

struct RecordFlags {
  std::string out;
  std::string name;
  std::vector<std::string> periods;
  std::string fast_period;
  std::string slow_period;
  std::vector<std::string> markers;
  std::vector<std::string> sources;
  std::vector<std::string> command;
  std::string serve;
  std::optional<std::string> gpus;  ///< --gpus LIST | all (default: CUDA_VISIBLE_DEVICES, else every GPU)
  bool quiet = false;
  bool json = false;
};

int run_record(const RecordFlags& flags) {
  telemetry::RecordOptions options;
  options.command = flags.command;
  options.out_dir = flags.out;
  options.name = flags.name;
  options.markers = flags.markers;
  options.sources = flags.sources;
  options.gpus = telemetry::job_gpu_scope_from_environment(flags.gpus);
  options.echo_output = !flags.quiet;
  options.notice = [](std::string_view line) { fmt::print(stderr, "{}\n", line); };
  for (const auto& source : flags.sources) {
    require_input(source == "nvml" || source == "amdsmi" || source == "procfs",
                  fmt::format("--sources {}: unknown source; valid: nvml, amdsmi, procfs", source));
  }
  if (!flags.fast_period.empty()) {
    options.periods.fast_override_ns = telemetry::parse_duration_ns(flags.fast_period, "--fast-period");
  }
  if (!flags.slow_period.empty()) {
    options.periods.slow_override_ns = telemetry::parse_duration_ns(flags.slow_period, "--slow-period");
  }
  for (const auto& entry : flags.periods) {
    const size_t equals = entry.find('=');
    require_input(equals != std::string::npos && equals > 0,
                  fmt::format("--period {}: write NAME=DURATION, e.g. --period power_instant_w=10ms or "
                              "--period nvml.energy=1s (DURATION 0 turns the metric off)",
                              entry));
    const std::string name = entry.substr(0, equals);
    const std::string duration = entry.substr(equals + 1);
    const int64_t period_ns =
        duration == "off" ? 0 : telemetry::parse_duration_ns(duration, "--period " + name);
    // Metric names and query-group names never collide: the name is tried as both.
    options.periods.by_group_ns[name] = period_ns;
    options.periods.by_metric_ns[name] = period_ns;
  }
  // --serve: OpenMetrics of the growing run store while it records (docs/TELEMETRY.md "Live metrics").
  // Bound before anything is recorded, so a port in use fails with nothing written.
  std::unique_ptr<serve::MetricsEndpoint> endpoint;
  if (!flags.serve.empty()) {
    endpoint = std::make_unique<serve::MetricsEndpoint>(serve::parse_listen_address(flags.serve, "--serve"));
    fmt::print(stderr, "calo: serving live metrics at {}\n", endpoint->url());
    options.on_store_open = [&endpoint](const std::filesystem::path& run_dir) { endpoint->follow(run_dir); };
    options.on_store_closing = [&endpoint] { endpoint->stop(); };
  }
  const telemetry::RecordResult result = telemetry::record(options);
  fmt::print(stderr, "{}", result.summary_text);
  if (flags.json) print_json(telemetry::to_json(result));
  return result.exit_code;
}

const CommandRegistration kRecord(
    "record",
    "run a command and record power, heat, clocks and throttling of its GPUs and host, aligned to steps", 62,
    [](CLI::App& app) -> std::function<int()> {
      auto flags = std::make_shared<RecordFlags>();
      app.add_option("--out", flags->out, "Run directory (default runs/<date>-<name>)");
      app.add_option("--name", flags->name, "Run name (default: the command's basename)");
      app.add_option("--period", flags->periods,
                     "NAME=DURATION for one metric (power_instant_w=10ms) or query group (nvml.energy=1s); "
                     "repeatable")
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
          ->allow_extra_args(false);
      app.add_option("--fast-period", flags->fast_period,
                     "Period of every cheap (< 20 µs) metric: sensor gauges, e.g. 10ms");
      app.add_option("--slow-period", flags->slow_period,
                     "Period of every expensive (energy, NVLink, PCIe, memory used) metric, e.g. 1s");
      app.add_option("--markers", flags->markers,
                     "Step patterns on output lines: megatron | torchtitan | regex:PATTERN; repeatable")
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
          ->allow_extra_args(false);
      app.add_option("--sources", flags->sources, "Only these sources: nvml, amdsmi, procfs")
          ->delimiter(',')
          ->expected(1)
          ->allow_extra_args(false);
      app.add_option("--gpus", flags->gpus,
                     "The job's GPUs, recorded as its own: NVML indices or UUIDs, comma-separated "
                     "(nvidia-smi -L), or all; default: the GPUs CUDA_VISIBLE_DEVICES lists, else every GPU");
      app.add_option("--serve", flags->serve,
                     "Serve live metrics (OpenMetrics, for Prometheus) at [ADDRESS:]PORT/metrics while "
                     "recording; loopback unless an ADDRESS is given (0.0.0.0:9400 = every interface)");
      app.add_flag("--quiet", flags->quiet,
                   "Do not echo the command's output (it is still written to the run dir)");
      app.add_flag("--json", flags->json, "Also print the summary as JSON on stdout");
      app.add_option("command", flags->command, "The command to run, after --");
      return [flags] { return run_record(*flags); };
    });

}  // namespace
}  // namespace calo::cli
