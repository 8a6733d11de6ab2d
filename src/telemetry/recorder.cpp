// `calo record` engine: see recorder.h. The child process (command lookup, signals, output tee) is in
// recorder_child.cpp.
#include "telemetry/recorder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/output_file.h"
#include "core/shell.h"
#include "core/statistics.h"
#include "core/step_warmup.h"
#include "core/table.h"
#include "core/time.h"
#include "store/run_interval_stream.h"
#include "store/run_store.h"
#include "store/summary.h"
#include "telemetry/markers.h"
#include "telemetry/recorder_child.h"

namespace calo::telemetry {

namespace fs = std::filesystem;

namespace {

// The sampling jitter target (docs/TELEMETRY.md): above it the summary lists every sampler loop.
constexpr int64_t kJitterTargetNs = 1'000'000;

std::string format_number(double value, int decimals) {
  return std::isnan(value) ? "-" : fmt::format("{:.{}f}", value, decimals);
}

}  // namespace

int64_t parse_duration_ns(const std::string& text, const std::string& what) {
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit == "ns") scale = 1;
  if (unit == "us") scale = 1e3;
  if (unit == "ms") scale = 1e6;
  if (unit == "s") scale = 1e9;
  if (unit == "m") scale = 60e9;
  if (used == 0 || scale == 0 || number < 0) {
    throw InputError(
        fmt::format("{} '{}' is not a duration; write a number with a unit: 10ms, 1s, 500us", what, text));
  }
  return static_cast<int64_t>(number * scale + 0.5);
}

StepStats step_stats(int32_t rank, const std::vector<std::pair<double, int64_t>>& duration_ms_and_steps) {
  StepStats stats;
  stats.rank = rank;
  std::vector<double> per_step_ms;
  double total_ms = 0;
  for (const auto& [duration_ms, steps] : duration_ms_and_steps) {
    const int64_t covered = std::max<int64_t>(steps, 1);
    stats.steps += covered;
    total_ms += duration_ms;
    per_step_ms.push_back(duration_ms / static_cast<double>(covered));
  }
  if (per_step_ms.empty()) return stats;
  // Unmarked warm-up (one span per step only): out of the statistics, counted.
  const bool one_per_span = static_cast<std::size_t>(stats.steps) == per_step_ms.size();
  const std::size_t warmup = one_per_span ? core::leading_warmup_steps(per_step_ms) : 0;
  for (std::size_t index = 0; index < warmup; ++index) total_ms -= per_step_ms[index];
  per_step_ms.erase(per_step_ms.begin(), per_step_ms.begin() + static_cast<std::ptrdiff_t>(warmup));
  stats.warmup_steps = static_cast<int64_t>(warmup);
  stats.steps -= stats.warmup_steps;
  stats.mean_ms = total_ms / static_cast<double>(stats.steps);
  stats.median_ms = core::percentile(per_step_ms, 0.5);
  stats.p90_ms = core::percentile(per_step_ms, 0.9);
  stats.min_ms = *std::min_element(per_step_ms.begin(), per_step_ms.end());
  stats.max_ms = *std::max_element(per_step_ms.begin(), per_step_ms.end());
  return stats;
}

namespace {

// ---- Stages of record(), in the order it calls them (resolve_command, run_child: recorder_child.cpp) ----

// The sources recorded: GPUs first (in source order), then the host. Notes say what is missing.
struct OpenSources {
  std::vector<std::unique_ptr<Source>> owned;
  std::vector<Source*> used;
};

OpenSources open_sources(const RecordOptions& options, std::vector<std::string>& notes) {
  OpenSources sources{open_local_sources(options.gpus), {}};
  sources.used = usable_sources(sources.owned, options.sources, "GPUs", notes);
  return sources;
}

std::string run_name(const RecordOptions& options) {
  return options.name.empty() ? fs::path(options.command[0]).filename().string() : options.name;
}

// The run row: name, command, host and the time base (t_ns = 0 now).
store::RunInfo describe_run(const RecordOptions& options) {
  store::RunInfo info;
  info.kind = store::RunKind::kRecord;
  info.name = run_name(options);
  info.command = core::shell_join(options.command);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  info.host = hostname;
  const core::TimeOrigin origin = core::time_origin_now();
  info.started_ns = origin.monotonic_ns;
  info.wall_offset_ns = origin.wall_ns;  // wall-clock time at t_ns = 0 (docs/RUN_STORE.md)
  return info;
}

// Plans the sampler (query costs measured once on this host) and writes the schedule into the run's config.
PeriodPlan plan_sampling(const RecordOptions& options, const std::vector<Source*>& sources,
                         store::RunInfo& info, std::vector<std::string>& notes) {
  PeriodPlan periods = options.periods;
  if (!periods.measured_costs) periods.measured_costs = measure_query_costs(sources);
  const Sampler planned(sources, periods, {});  // planned first so the schedule goes into the run record
  nlohmann::json config;
  config["markers"] = options.markers;
  config["gpus"] = options.gpus.describe();  // which GPUs are the job's (docs/TELEMETRY.md, GPU scope)
  for (const auto& scheduled : planned.schedule()) {
    const std::string key = scheduled.source + "/" + scheduled.metric;
    config["periods_ns"][key] = scheduled.period_ns;
    config["query_cost_ns"][key] = {{"wall", scheduled.cost.wall_ns}, {"cpu", scheduled.cost.cpu_ns}};
    if (scheduled.reclassified) {
      notes.push_back(fmt::format(
          "{} costs {:.0f} µs per read on this host (declared cheap): read in its own loop every {:g} ms",
          key, static_cast<double>(scheduled.cost.wall_ns) / 1e3,
          static_cast<double>(scheduled.period_ns) / 1e6));
    }
    if (scheduled.shortened) {
      notes.push_back(fmt::format(
          "{} is read every {:g} ms, not at the period asked: the driver keeps only a short history of it, "
          "which a longer period would overwrite unread (give at most {:g} ms, or 0 to turn it off)",
          key, static_cast<double>(scheduled.period_ns) / 1e6,
          static_cast<double>(scheduled.period_ns) / 1e6));
    }
  }
  info.config_json = config.dump();
  return periods;
}

// (source, device, metric) -> (run device idx, metric id), and the label of each run device.
class DeviceMap {
 public:
  struct Target {
    int32_t device_idx;
    int32_t metric_id;
  };
  // Registers every device and metric of `sources` with the writer.
  // GPUs are labelled by their index within their source ("gpu1" is nvidia-smi's GPU 1, also when the job's
  // scope leaves GPU 0 out); a second source's GPU whose index is taken is labelled by its run index.
  DeviceMap(const std::vector<Source*>& sources, store::RunWriter& writer) : targets_(sources.size()) {
    for (size_t source_position = 0; source_position < sources.size(); ++source_position) {
      const auto& devices = sources[source_position]->devices();
      targets_[source_position].resize(devices.size());
      for (size_t device_position = 0; device_position < devices.size(); ++device_position) {
        const DeviceInfo& device = devices[device_position];
        const store::DeviceInfo row = to_store_device(device, static_cast<int>(labels_.size()));
        writer.add_device(row);
        labels_.emplace_back(row.idx, device.kind == "gpu" ? gpu_label(device.index, row.idx) : "host");
        names_[row.idx] = row.name;
        for (const auto& unsupported : device.unsupported) {
          writer.log_event({0, store::EventLevel::kInfo, row.idx, sources[source_position]->name(),
                            "not available: " + unsupported});
        }
        for (const auto& metric : device.metrics) {
          const int32_t metric_id = writer.metric_id(metric.name, metric.unit, to_store_kind(metric.kind));
          targets_[source_position][device_position].push_back({row.idx, metric_id});
          metrics_[metric_id] = {metric_id, metric.name, metric.unit, to_store_kind(metric.kind)};
        }
      }
    }
  }
  std::string gpu_label(int source_index, int32_t run_index) const {
    std::string label = fmt::format("gpu{}", source_index);
    for (const auto& taken : labels_)
      if (taken.second == label) return fmt::format("gpu{}", run_index);
    return label;
  }
  const Target& target(size_t source, size_t device, size_t metric) const {
    return targets_[source][device][metric];
  }
  // The device a sampler event is about (kNone if the device has no metrics).
  int32_t device_idx(size_t source, size_t device) const {
    return targets_[source][device].empty() ? store::kNone : targets_[source][device][0].device_idx;
  }
  const std::vector<std::pair<int32_t, std::string>>& labels() const { return labels_; }
  // The product name of run device `device_idx` (its store row's).
  const std::string& name(int32_t device_idx) const { return names_.at(device_idx); }
  // Every metric registered, by id.
  std::vector<store::MetricInfo> metrics() const {
    std::vector<store::MetricInfo> metrics;
    for (const auto& entry : metrics_) metrics.push_back(entry.second);
    return metrics;
  }

 private:
  std::vector<std::vector<std::vector<Target>>> targets_;
  std::vector<std::pair<int32_t, std::string>> labels_;
  std::map<int32_t, std::string> names_;
  std::map<int32_t, store::MetricInfo> metrics_;
};

// Sampler output -> store (times moved onto the run's time base) and the run's summary stream; events also go
// to `notice`, one at a time.
SamplerSink store_sink(store::RunWriter& writer, store::RunIntervalStream& stream, const DeviceMap& devices,
                       const std::vector<Source*>& sources, int64_t started_ns, const core::NoticeFn& notice,
                       std::mutex& notice_mutex) {
  SamplerSink sink;
  sink.on_samples = [&writer, &stream, &devices, started_ns](std::span<const SampleRecord> records) {
    store::Sample converted[64];
    size_t count = 0;
    for (const auto& record : records) {
      const auto& target =
          devices.target(record.source_position, record.device_position, record.metric_index);
      converted[count++] = {
          target.device_idx, target.metric_id, record.t_ns - started_ns, record.value,
          record.sensor_t_ns == kNoSensorTime ? store::kNoSensorTime : record.sensor_t_ns - started_ns};
      if (count == std::size(converted)) {
        writer.append(std::span<const store::Sample>(converted, count));
        stream.add(std::span<const store::Sample>(converted, count));
        count = 0;
      }
    }
    if (count > 0) {
      writer.append(std::span<const store::Sample>(converted, count));
      stream.add(std::span<const store::Sample>(converted, count));
    }
  };
  sink.on_event = [&writer, &devices, &sources, &notice, &notice_mutex,
                   started_ns](const SamplerEvent& event) {
    writer.log_event({event.t_ns - started_ns,
                      event.is_error ? store::EventLevel::kError : store::EventLevel::kWarning,
                      devices.device_idx(event.source_position, event.device_position),
                      sources[event.source_position]->name(), event.message});
    if (!notice) return;
    std::lock_guard lock(notice_mutex);
    notice(fmt::format("calo: {}", event.message));
  };
  return sink;
}

// Marker spans -> one source of steps (StepSourceFilter) -> store; step durations kept for the summary.
class StepRecorder {
 public:
  StepRecorder(store::RunWriter& writer, int64_t started_ns)
      : writer_(writer),
        started_ns_(started_ns),
        filter_([this](const MarkerSpan& span) { write(span); }),
        assembler_([this](const MarkerSpan& span) { filter_.offer(span); }) {}
  SpanAssembler& assembler() { return assembler_; }
  // Closes open phases at `ended_ns`, settles the step source, and logs what was rejected or dropped.
  void finish(int64_t ended_ns) {
    assembler_.close_all(ended_ns);
    filter_.finish();
    const int64_t t_ns = ended_ns - started_ns_;
    if (assembler_.rejected() > 0) {
      writer_.log_event({t_ns, store::EventLevel::kWarning, store::kNone, "markers",
                         fmt::format("{} marker line(s) rejected (unparsable, or an end without a begin)",
                                     assembler_.rejected())});
    }
    if (filter_.dropped() > 0) {
      writer_.log_event(
          {t_ns, store::EventLevel::kInfo, store::kNone, "markers",
           fmt::format("steps from socket markers; {} step(s) from output lines not counted twice",
                       filter_.dropped())});
    }
    if (filter_.written_before_socket() > 0) {
      writer_.log_event(
          {t_ns, store::EventLevel::kWarning, store::kNone, "markers",
           fmt::format("{} step(s) from output lines were stored before the first socket marker came",
                       filter_.written_before_socket())});
    }
  }
  // Step statistics per rank (after finish()).
  std::vector<StepStats> stats() {
    std::lock_guard lock(mutex_);
    std::vector<StepStats> result;
    for (const auto& [rank, durations] : durations_) result.push_back(step_stats(rank, durations));
    return result;
  }
  // Where the steps came from ("socket", "megatron", ...; "" if none), and how many step spans were kept.
  const std::string& source() const { return filter_.source(); }
  uint64_t spans() const { return spans_; }
  // Output-line step spans not counted because socket markers gave the steps.
  uint64_t dropped() const { return filter_.dropped(); }

 private:
  void write(const MarkerSpan& span) {
    store::Span row;
    row.rank = span.rank >= 0 ? span.rank : store::kNone;
    row.kind = span.is_step ? store::SpanKind::kStep : store::SpanKind::kPhase;
    row.name = span.name;
    row.category = span.source;
    row.t_begin_ns = span.t_begin_ns - started_ns_;
    row.t_end_ns = std::max(span.t_end_ns, span.t_begin_ns) - started_ns_;
    row.step = span.step >= 0 ? span.step : store::kNone;
    writer_.append_span(row);
    if (span.is_step) {
      std::lock_guard lock(mutex_);
      ++spans_;
      durations_[span.rank].emplace_back(static_cast<double>(row.t_end_ns - row.t_begin_ns) / 1e6,
                                         span.steps_covered);
    }
  }
  store::RunWriter& writer_;
  int64_t started_ns_;
  std::mutex mutex_;
  std::map<int32_t, std::vector<std::pair<double, int64_t>>> durations_;
  uint64_t spans_ = 0;
  StepSourceFilter filter_;
  SpanAssembler assembler_;
};

fs::path marker_socket_path(const fs::path& run_dir) {
  fs::path socket_path = fs::absolute(run_dir) / "markers.sock";
  if (socket_path.string().size() >= 100) socket_path = fmt::format("/tmp/calo-markers-{}.sock", getpid());
  return socket_path;
}

// Late, missed and CPU time over all sampler loops.
struct SamplerTotals {
  uint64_t late = 0;
  uint64_t missed = 0;
  uint64_t samples = 0;
  int64_t cpu_ns = 0;
};

SamplerTotals sampler_totals(const std::vector<LoopStats>& loops) {
  SamplerTotals totals;
  for (const auto& loop : loops) {
    totals.late += loop.late;
    totals.missed += loop.missed;
    totals.samples += loop.samples;
    totals.cpu_ns += loop.cpu_ns;
  }
  return totals;
}

// Summary rows of the run as a whole and of each rank's steps.
void write_run_summary(store::RunWriter& writer, const RecordResult& result, const StepRecorder& steps) {
  const SamplerTotals totals = sampler_totals(result.loops);
  const JitterSummary& jitter = result.jitter;
  writer.add_summary({"run", "exit_code", static_cast<double>(result.exit_code), ""});
  writer.add_summary({"run", "duration_s", result.duration_s, "s"});
  writer.add_summary({"run", "samples_late", static_cast<double>(totals.late), "count"});
  writer.add_summary({"run", "deadlines_missed", static_cast<double>(totals.missed), "count"});
  writer.add_summary({"run", "jitter_p99_s", static_cast<double>(jitter.p99_ns) / 1e9, "s"});
  writer.add_summary(
      {"run", "jitter_worst_loop_p99_s", static_cast<double>(jitter.worst_loop_p99_ns) / 1e9, "s"});
  writer.add_summary({"run", "sampler_cpu_s", static_cast<double>(totals.cpu_ns) / 1e9, "s"});
  if (!steps.source().empty()) {
    // The key names where the steps came from: steps_from_socket, steps_from_megatron, ...
    writer.add_summary({"run", "steps_from_" + steps.source(), static_cast<double>(steps.spans()), "count"});
    writer.add_summary({"run", "step_lines_not_counted", static_cast<double>(steps.dropped()), "count"});
  }
  for (const auto& stats : result.steps) {
    const std::string scope = stats.rank >= 0 ? fmt::format("rank{}", stats.rank) : "steps";
    writer.add_summary({scope, "steps", static_cast<double>(stats.steps), "count"});
    writer.add_summary({scope, "warmup_steps", static_cast<double>(stats.warmup_steps), "count"});
    writer.add_summary({scope, "step_time_mean_s", stats.mean_ms / 1e3, "s"});
    writer.add_summary({scope, "step_time_median_s", stats.median_ms / 1e3, "s"});
    writer.add_summary({scope, "step_time_p90_s", stats.p90_ms / 1e3, "s"});
  }
}

// Per-device figures over the whole run, from what the stream kept of the samples as they were written;
// read back from the store only where the stream cannot promise the same figures (a series out of time order,
// counter ends placed with power samples it did not keep) or the writer dropped samples the stream saw.
// GPUs also get summary rows.
std::vector<DeviceSummary> summarize_devices(store::RunWriter& writer, const store::RunIntervalStream& stream,
                                             const DeviceMap& devices, int64_t duration_ns) {
  std::vector<DeviceSummary> summaries;
  std::optional<store::RunReader> reader;
  const bool all_stored = writer.stats().samples_dropped == 0;
  for (const auto& [device_idx, label] : devices.labels()) {
    std::optional<store::IntervalSummary> streamed =
        all_stored ? stream.summary(device_idx, duration_ns) : std::nullopt;
    if (!streamed) {
      if (!reader) reader.emplace(writer.run_dir());
      streamed = store::summarize_interval(*reader, device_idx, 0, duration_ns, "run");
    }
    const store::IntervalSummary& interval = *streamed;
    DeviceSummary device;
    device.device_idx = device_idx;
    device.label = label;
    device.energy_j = interval.energy_j;
    device.mean_power_w = interval.mean_power_w;
    device.peak_power_w = interval.peak_power_instant_w;
    device.peak_power_sampled_w = interval.peak_power_sampled_w;
    device.peak_temp_c = interval.temp_gpu_max_c;
    device.throttle_power_cap_s = interval.throttle_power_cap_s;
    device.throttle_sw_thermal_s = interval.throttle_sw_thermal_s;
    device.throttle_hw_thermal_s = interval.throttle_hw_thermal_s;
    device.throttle_power_brake_s = interval.throttle_power_brake_s;
    device.samples = interval.sample_count;
    device.name = devices.name(device_idx);
    summaries.push_back(device);
    if (label == "host") continue;
    writer.add_summary({label, "energy_j", device.energy_j, "J"});
    writer.add_summary({label, "mean_power_w", device.mean_power_w, "W"});
    writer.add_summary({label, "peak_power_w", device.peak_power_w, "W"});
    if (std::isfinite(device.peak_power_sampled_w))
      writer.add_summary({label, "peak_power_sampled_w", device.peak_power_sampled_w, "W"});
    writer.add_summary({label, "peak_temp_c", device.peak_temp_c, "C"});
    writer.add_summary({label, "throttle_power_cap_s", device.throttle_power_cap_s, "s"});
    writer.add_summary({label, "throttle_sw_thermal_s", device.throttle_sw_thermal_s, "s"});
    writer.add_summary({label, "throttle_hw_thermal_s", device.throttle_hw_thermal_s, "s"});
    writer.add_summary({label, "throttle_power_brake_s", device.throttle_power_brake_s, "s"});
  }
  return summaries;
}

// The GPU table of the summary ("" when the run had no GPU).
std::string format_gpu_table(const RecordResult& result) {
  bool printed_gpu_header = false;
  core::TextTable gpus({"device", "name", "energy", "mean power", "peak power", "peak sampled", "peak temp",
                        "power cap", "sw thermal", "hw thermal", "power brake", "samples"});
  gpus.set_units({"", "", "J", "W", "W", "W", "C", "s", "s", "s", "s", ""});
  for (const auto& device : result.devices) {
    if (device.label == "host") continue;
    printed_gpu_header = true;
    gpus.add_row(
        {device.label, device.name, format_number(device.energy_j, 1), format_number(device.mean_power_w, 1),
         format_number(device.peak_power_w, 1), format_number(device.peak_power_sampled_w, 1),
         format_number(device.peak_temp_c, 0), format_number(device.throttle_power_cap_s, 2),
         format_number(device.throttle_sw_thermal_s, 2), format_number(device.throttle_hw_thermal_s, 2),
         format_number(device.throttle_power_brake_s, 2), std::to_string(device.samples)});
  }
  return printed_gpu_header ? gpus.render() : "";
}

// The step table of the summary (per rank), or a hint on marking steps when none was seen.
std::string format_step_table(const RecordResult& result, const std::string& step_source) {
  if (result.steps.empty()) return "  steps seen: 0 (use --markers or $CALO_MARKER_SOCKET to mark steps)\n";
  std::string text = fmt::format("  steps from {} markers\n", step_source);
  core::TextTable steps({"rank", "steps", "warm-up", "mean", "median", "p90", "min", "max"});
  steps.set_units({"", "", "", "ms", "ms", "ms", "ms", "ms"});
  bool any_warmup = false;
  for (const auto& stats : result.steps) {
    any_warmup = any_warmup || stats.warmup_steps > 0;
    steps.add_row({stats.rank >= 0 ? std::to_string(stats.rank) : "-", std::to_string(stats.steps),
                   std::to_string(stats.warmup_steps), format_number(stats.mean_ms, 1),
                   format_number(stats.median_ms, 1), format_number(stats.p90_ms, 1),
                   format_number(stats.min_ms, 1), format_number(stats.max_ms, 1)});
  }
  text += steps.render();
  if (any_warmup)
    text +=
        "  warm-up: leading steps over 2x the median step (compilation, autotuning), left out of the "
        "figures\n";
  return text;
}

// The sampler line of the summary, and a table of every loop when deadlines were missed or jitter was high.
std::string format_sampler_health(const RecordResult& result) {
  const SamplerTotals totals = sampler_totals(result.loops);
  const JitterSummary& jitter = result.jitter;
  std::string text = fmt::format(
      "  sampler: {} samples, {} late, {} deadlines missed, {} dropped, jitter p99 {:.3f} ms over {} "
      "wake-ups "
      "(worst loop {} p99 {:.3f} ms of {}), CPU {:.3f} s\n",
      totals.samples, totals.late, totals.missed, result.samples_dropped,
      static_cast<double>(jitter.p99_ns) / 1e6, jitter.wakeups, jitter.worst_loop,
      static_cast<double>(jitter.worst_loop_p99_ns) / 1e6, jitter.worst_loop_wakeups,
      static_cast<double>(totals.cpu_ns) / 1e9);
  if (totals.missed > 0 || jitter.worst_loop_p99_ns > kJitterTargetNs) {
    // Which loop fell behind (a driver stall hits every loop; one slow query hits its own).
    core::TextTable loops(
        {"loop", "samples", "late", "missed", "jitter p50", "jitter p99", "jitter max", "read", "CPU"});
    loops.set_units({"", "", "", "", "ms", "ms", "ms", "ms", "ms"});
    for (const auto& loop : result.loops) {
      loops.add_row({loop.source + "/" + loop.group, std::to_string(loop.samples), std::to_string(loop.late),
                     std::to_string(loop.missed),
                     format_number(static_cast<double>(loop.jitter_p50_ns) / 1e6, 3),
                     format_number(static_cast<double>(loop.jitter_p99_ns) / 1e6, 3),
                     format_number(static_cast<double>(loop.jitter_max_ns) / 1e6, 3),
                     format_number(static_cast<double>(loop.read_ns_total) / 1e6, 1),
                     format_number(static_cast<double>(loop.cpu_ns) / 1e6, 1)});
    }
    text += loops.render();
  }
  return text;
}

// The summary printed at the end: devices, steps per rank, sampler health.
std::string format_summary(const std::string& command, const RecordResult& result,
                           const std::string& step_source) {
  std::string text = fmt::format("\ncalo record: '{}' exited with {} after {:.1f} s; run in {}\n", command,
                                 result.exit_code, result.duration_s, result.run_dir.string());
  for (const auto& note : result.notes) text += "  " + note + "\n";
  text += format_gpu_table(result);
  text += format_step_table(result, step_source);
  text += format_sampler_health(result);
  if (const int signal_number = forwarded_signal(); signal_number != 0)
    text += fmt::format("  forwarded signal {} to the command\n", signal_number);
  return text;
}

}  // namespace

// Stages: resolve command -> open sources -> plan sampling -> open store -> register devices -> start marker
// socket and sampler -> run child (tee output, match step lines) -> stop sampler, settle steps -> summarize.
RecordResult record(const RecordOptions& options) {
  const ResolvedCommand command = resolve_command(options);
  std::vector<LinePattern> patterns;
  for (const auto& spec : options.markers) patterns.emplace_back(spec);
  RecordResult result;
  result.run_dir = options.out_dir.empty() ? store::make_run_dir("runs", run_name(options)) : options.out_dir;
  for (const char* log : {"stdout.log", "stderr.log"})  // the job's logs: refused before the store is made
    core::require_file_target(result.run_dir / log, "--out");
  OpenSources sources = open_sources(options, result.notes);
  store::RunInfo info = describe_run(options);
  const PeriodPlan periods = plan_sampling(options, sources.used, info, result.notes);
  store::RunWriter writer(result.run_dir, info);  // InputError if the directory is not writable
  const int64_t started_ns = info.started_ns;
  const DeviceMap devices(sources.used, writer);
  store::RunIntervalStream stream(devices.metrics());
  if (options.on_store_open) options.on_store_open(result.run_dir);  // e.g. --serve starts reading the store

  StepRecorder steps(writer, started_ns);
  const fs::path socket_path = marker_socket_path(result.run_dir);
  MarkerSocket marker_socket(socket_path.string(), steps.assembler());
  std::mutex notice_mutex;
  Sampler sampler(
      sources.used, periods,
      store_sink(writer, stream, devices, sources.used, started_ns, options.notice, notice_mutex));
  if (options.notice) {
    for (const auto& note : result.notes) options.notice(fmt::format("calo: {}", note));
    options.notice(fmt::format("calo: recording {} device(s) into {}", devices.labels().size(),
                               result.run_dir.string()));
  }
  sampler.start(started_ns);

  const ChildOutcome child =
      run_child(command, options, result.run_dir, socket_path, patterns, steps.assembler());
  result.exit_code = child.exit_code;
  result.duration_s = child.duration_s;

  sampler.stop();
  marker_socket.stop();
  if (options.on_store_closing) options.on_store_closing();
  const int64_t ended_ns = core::monotonic_ns();
  steps.finish(ended_ns);
  result.loops = sampler.stats();
  result.jitter = sampler.jitter_summary();
  result.steps = steps.stats();
  write_run_summary(writer, result, steps);
  writer.flush();
  result.samples_dropped = writer.stats().samples_dropped;
  writer.add_summary({"run", "samples_dropped", static_cast<double>(result.samples_dropped), "count"});
  result.devices = summarize_devices(writer, stream, devices, ended_ns - started_ns);
  writer.finish(ended_ns);
  result.summary_text = format_summary(info.command, result, steps.source());
  return result;
}

CALO_JSON_FIELDS(StepStats, rank, steps, warmup_steps, mean_ms, median_ms, p90_ms, min_ms, max_ms)
CALO_JSON_FIELDS(DeviceSummary, device_idx, label, name, energy_j, mean_power_w, peak_power_w,
                 peak_power_sampled_w, peak_temp_c, throttle_power_cap_s, throttle_sw_thermal_s,
                 throttle_hw_thermal_s, throttle_power_brake_s, samples)
CALO_JSON_FIELDS(LoopStats, source, group, wakeups, sleeps, samples, read_errors, late, missed, jitter_p50_ns,
                 jitter_p99_ns, jitter_max_ns, read_ns_total, cpu_ns, realtime)
CALO_JSON_FIELDS(JitterSummary, wakeups, p50_ns, p99_ns, max_ns, worst_loop_p99_ns, worst_loop,
                 worst_loop_wakeups)

nlohmann::json to_json(const RecordResult& result) {
  return {{"exit_code", result.exit_code},   {"run_dir", result.run_dir.string()},
          {"duration_s", result.duration_s}, {"samples_dropped", result.samples_dropped},
          {"notes", result.notes},           {"devices", result.devices},
          {"steps", result.steps},           {"sampler", result.loops},
          {"jitter", result.jitter}};
}

}  // namespace calo::telemetry
