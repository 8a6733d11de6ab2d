// Telemetry overhead/capture benchmark (docs/benchmarks/telemetry.md).
//   overhead: records every local device into a real run store for --seconds with fast metrics at
//             --fast-period and slow ones at --slow-period (or at calo record's defaults with
//             --default-periods); reports the process CPU share per GPU (getrusage) and the sampler's
//             scheduling jitter. Target on 4×H200: ≤ 1 % of one core per GPU, p99 ≤ 1 ms.
//   capture:  one "truth" thread per device reads the cheap gauges back to back (as `calo probe` does) while
//   the
//             sampler records at its default periods; a sensor change (a new value held over [t0, t1)) counts
//             as captured when the sampler read that value in that window. Target: ≥ 99 %.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "core/time.h"
#include "store/run_store.h"
#include "telemetry/recorder.h"
#include "telemetry/sampler.h"
#include "telemetry/source.h"

namespace {

using namespace calo;
using namespace calo::telemetry;

struct Options {
  std::string mode = "overhead";
  double seconds = 10;
  int64_t fast_period_ns = 10'000'000;
  bool fast_period_given = false;  // capture mode uses the default periods unless --fast-period is given
  bool default_periods = false;    // overhead mode: --default-periods records at calo record's defaults
  int64_t slow_period_ns = 1'000'000'000;
  std::vector<std::string> sources;  // empty = all available
};

double process_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// `--sources synthetic`: 4 "GPUs" with NVML's 13 cheap metrics in one fast group, answered at once from
// memory, so the overhead mode measures the sampler's own cost (scheduling, batching, the store) without a
// driver.
class SyntheticSource : public Source {
 public:
  SyntheticSource() {
    const char* names[] = {"power_instant_w",      "power_avg_w",           "temp_gpu_c",
                           "temp_mem_c",           "clock_sm_mhz",          "clock_mem_mhz",
                           "clock_event_reasons",  "util_gpu_pct",          "util_mem_pct",
                           "throttle_power_cap_s", "throttle_sync_boost_s", "throttle_sw_thermal_s",
                           "mem_used_bytes"};
    for (int index = 0; index < 4; ++index) {
      DeviceInfo device;
      device.index = index;
      device.kind = "gpu";
      device.name = "synthetic";
      for (const char* name : names)
        device.metrics.push_back({name, "", MetricKind::kGauge, "synthetic.fast", 10'000'000, 1000});
      devices_.push_back(std::move(device));
    }
  }
  std::string name() const override { return "synthetic"; }
  bool available() const override { return true; }
  std::string unavailable_reason() const override { return ""; }
  const std::vector<DeviceInfo>& devices() const override { return devices_; }
  Reading read(size_t device_position, size_t metric_index) override {
    return {
        ReadStatus::kOk, static_cast<double>(device_position * 100 + metric_index), kNoSensorTime, "", {}};
  }

 private:
  std::vector<DeviceInfo> devices_;
};

// The local sources, plus the synthetic one when asked for by name.
std::vector<std::unique_ptr<Source>> open_sources(const Options& options) {
  auto all = open_local_sources();
  if (std::find(options.sources.begin(), options.sources.end(), "synthetic") != options.sources.end())
    all.push_back(std::make_unique<SyntheticSource>());
  return all;
}

std::vector<Source*> pick(std::vector<std::unique_ptr<Source>>& all, const Options& options, int* gpus) {
  std::vector<Source*> picked;
  *gpus = 0;
  for (auto& source : all) {
    const bool wanted = options.sources.empty() || std::find(options.sources.begin(), options.sources.end(),
                                                             source->name()) != options.sources.end();
    fmt::print("# source {}: {}\n", source->name(),
               source->available() ? fmt::format("{} device(s)", source->devices().size())
                                   : source->unavailable_reason());
    if (!wanted || !source->available()) continue;
    picked.push_back(source.get());
    for (const auto& device : source->devices()) *gpus += device.kind == "gpu" ? 1 : 0;
  }
  return picked;
}

// What the sampler will read, how often, and what each query cost on this host (first device).
void print_schedule(const Sampler& sampler) {
  fmt::print("# schedule: {:<8} {:<20} {:<24} {:>10} {:>10} {:>10} {:>4}\n", "source", "group", "metric",
             "period ms", "wall us", "cpu us", "devs");
  for (const auto& entry : sampler.schedule()) {
    fmt::print("# schedule: {:<8} {:<20} {:<24} {:>10g} {:>10.1f} {:>10.1f} {:>4}{}\n", entry.source,
               entry.group, entry.metric, static_cast<double>(entry.period_ns) / 1e6,
               static_cast<double>(entry.cost.wall_ns) / 1e3, static_cast<double>(entry.cost.cpu_ns) / 1e3,
               entry.devices, entry.reclassified ? "  (declared cheap, measured slow: own loop)" : "");
  }
}

int run_overhead(const Options& options) {
  auto all = open_sources(options);
  int gpus = 0;
  auto sources = pick(all, options, &gpus);
  const std::filesystem::path run_dir =
      std::filesystem::temp_directory_path() / fmt::format("calo-overhead-{}", getpid());
  std::filesystem::remove_all(run_dir);
  store::RunInfo info;
  info.started_ns = core::monotonic_ns();
  store::RunWriter writer(run_dir, info);
  std::vector<std::vector<std::vector<int32_t>>> metric_ids(sources.size());
  int32_t device_idx = 0;
  std::vector<std::vector<int32_t>> device_ids(sources.size());
  for (size_t source_position = 0; source_position < sources.size(); ++source_position) {
    for (const auto& device : sources[source_position]->devices()) {
      device_ids[source_position].push_back(device_idx);
      writer.add_device(to_store_device(device, device_idx));
      ++device_idx;
      std::vector<int32_t> ids;
      for (const auto& metric : device.metrics) {
        ids.push_back(writer.metric_id(metric.name, metric.unit, to_store_kind(metric.kind)));
      }
      metric_ids[source_position].push_back(ids);
    }
  }
  PeriodPlan plan;
  if (!options.default_periods) {
    plan.fast_override_ns = options.fast_period_ns;
    plan.slow_override_ns = options.slow_period_ns;
  }
  SamplerSink sink;
  sink.on_samples =
      [&](std::span<const SampleRecord> records) {  // one append per wake-up, as calo record does
        thread_local std::vector<store::Sample> converted;
        converted.clear();
        for (const auto& record : records) {
          converted.push_back(
              {device_ids[record.source_position][record.device_position],
               metric_ids[record.source_position][record.device_position][record.metric_index],
               record.t_ns - info.started_ns, record.value, store::kNoSensorTime});
        }
        writer.append(std::span<const store::Sample>(converted));
      };
  Sampler sampler(sources, plan, sink);
  fmt::print("# mode overhead: {:g} s, {}, {} GPU(s), store {}\n", options.seconds,
             options.default_periods ? std::string("default periods (as calo record)")
                                     : fmt::format("fast metrics every {:g} ms, slow every {:g} ms",
                                                   static_cast<double>(options.fast_period_ns) / 1e6,
                                                   static_cast<double>(options.slow_period_ns) / 1e6),
             gpus, run_dir.string());
  print_schedule(sampler);
  const double cpu_before_s = process_cpu_s();
  const int64_t wall_before_ns = core::monotonic_ns();
  sampler.start();
  std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds));
  sampler.stop();
  writer.finish(core::monotonic_ns());
  const double wall_s = static_cast<double>(core::monotonic_ns() - wall_before_ns) / 1e9;
  const double cpu_s = process_cpu_s() - cpu_before_s;
  fmt::print("{:<10} {:<18} {:>9} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "source", "group",
             "samples", "late", "missed", "jit p50", "jit p99", "jit max", "read", "cpu", "cpu");
  fmt::print("{:<10} {:<18} {:>9} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "", "", "", "", "",
             "us", "us", "us", "ms", "ms", "% core");
  int64_t worst_p99_ns = 0;
  uint64_t samples = 0;
  uint64_t missed = 0;
  for (const auto& loop : sampler.stats()) {
    fmt::print("{:<10} {:<18} {:>9} {:>7} {:>7} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.2f} {:>10.2f} {:>9.3f}\n",
               loop.source, loop.group, loop.samples, loop.late, loop.missed,
               static_cast<double>(loop.jitter_p50_ns) / 1e3, static_cast<double>(loop.jitter_p99_ns) / 1e3,
               static_cast<double>(loop.jitter_max_ns) / 1e3, static_cast<double>(loop.read_ns_total) / 1e6,
               static_cast<double>(loop.cpu_ns) / 1e6,
               100.0 * static_cast<double>(loop.cpu_ns) / 1e9 / options.seconds);
    worst_p99_ns = std::max(worst_p99_ns, loop.jitter_p99_ns);
    samples += loop.samples;
    missed += loop.missed;
  }
  const auto stats = writer.stats();
  const double core_pct = 100.0 * cpu_s / wall_s;
  const double per_gpu_pct = core_pct / std::max(gpus, 1);
  fmt::print(
      "# process CPU {:.3f} s over {:.2f} s = {:.3f} % of one core; {} samples ({:.0f}/s), {} committed, {} "
      "dropped, {} deadlines missed\n",
      cpu_s, wall_s, core_pct, samples, static_cast<double>(samples) / wall_s, stats.samples_committed,
      stats.samples_dropped, missed);
  const JitterSummary jitter = sampler.jitter_summary();
  fmt::print(
      "# jitter over all {} wake-ups: p50 {:.3f} ms, p99 {:.3f} ms, max {:.3f} ms; worst loop {} p99 {:.3f} "
      "ms "
      "over its {} wake-ups\n",
      jitter.wakeups, static_cast<double>(jitter.p50_ns) / 1e6, static_cast<double>(jitter.p99_ns) / 1e6,
      static_cast<double>(jitter.max_ns) / 1e6, jitter.worst_loop, static_cast<double>(worst_p99_ns) / 1e6,
      jitter.worst_loop_wakeups);
  fmt::print(
      "overhead: {:.3f} % of one core per {} (target <= 1 %), p99 jitter {:.3f} ms (target <= 1 ms; worst "
      "loop "
      "{:.3f} ms), dropped {}\n",
      per_gpu_pct, gpus > 0 ? "GPU" : "host (no GPU)", static_cast<double>(jitter.p99_ns) / 1e6,
      static_cast<double>(worst_p99_ns) / 1e6, stats.samples_dropped);
  std::filesystem::remove_all(run_dir);
  return 0;
}

// The q-quantile of `values` (nearest rank), 0 when empty.
double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1) + 0.5)];
}

int run_capture(const Options& options) {
  auto all = open_sources(options);
  int gpus = 0;
  auto sources = pick(all, options, &gpus);
  // Eligible: cheap gauges/bitmasks whose value is the sensor's own (cpu_util_pct is computed from deltas of
  // the reader's previous read, so a second reader would change it).
  struct Key {
    size_t source;
    size_t device;
    size_t metric;
    bool operator<(const Key& other) const {
      return std::tie(source, device, metric) < std::tie(other.source, other.device, other.metric);
    }
  };
  std::map<Key, std::vector<std::pair<int64_t, double>>> sampled;  // sampler: (t, value)
  std::mutex sampled_mutex;
  SamplerSink sink;
  sink.on_samples = [&](std::span<const SampleRecord> records) {
    std::lock_guard lock(sampled_mutex);
    for (const auto& record : records) {
      sampled[{record.source_position, record.device_position, record.metric_index}].emplace_back(
          record.t_ns, record.value);
    }
  };
  // A value the truth reader saw: first seen by the read that began at t_begin_ns, last seen by the read
  // before the one that began at t_end_ns. When it really appeared is only known to lie after the start of
  // the last read that still saw the previous value (t_earliest_ns); when it went, before the end of the
  // first read that saw the next one (t_latest_ns). Under NVML's cross-GPU serialization one truth read of a
  // device can take milliseconds, so that uncertainty is wider than the reads themselves.
  struct Change {
    double value;
    int64_t t_begin_ns;
    int64_t t_end_ns;
    int64_t t_earliest_ns;
    int64_t t_latest_ns;
  };
  std::map<Key, std::vector<Change>> truth;
  std::vector<int64_t> truth_read_ns;  // duration of every truth read of a device (all its metrics)
  std::mutex truth_mutex;
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (size_t source_position = 0; source_position < sources.size(); ++source_position) {
    Source* source = sources[source_position];
    for (size_t device_position = 0; device_position < source->devices().size(); ++device_position) {
      std::vector<size_t> metrics;
      const auto& device = source->devices()[device_position];
      for (size_t metric_index = 0; metric_index < device.metrics.size(); ++metric_index) {
        const auto& metric = device.metrics[metric_index];
        if (metric.kind != MetricKind::kCounter && metric.expected_cost_ns < kSlowQueryNs &&
            metric.name != "cpu_util_pct") {
          metrics.push_back(metric_index);
        }
      }
      if (metrics.empty()) continue;
      readers.emplace_back([&, source, source_position, device_position, metrics] {
        std::vector<Reading> readings(metrics.size());
        std::vector<std::vector<Change>> changes(metrics.size());
        std::vector<int64_t> last_read_begin_ns(metrics.size(), 0);  // last read that saw the current value
        std::vector<int64_t> read_ns;
        while (!stop.load()) {
          const int64_t before_ns = core::monotonic_ns();
          source->read_batch(device_position, metrics, readings);
          const int64_t after_ns = core::monotonic_ns();
          read_ns.push_back(after_ns - before_ns);
          for (size_t position = 0; position < metrics.size(); ++position) {
            if (readings[position].status != ReadStatus::kOk) continue;
            auto& list = changes[position];
            if (list.empty() || list.back().value != readings[position].value) {
              if (!list.empty()) {
                list.back().t_end_ns = before_ns;
                list.back().t_latest_ns = after_ns;
              }
              const int64_t earliest_ns = list.empty() ? before_ns : last_read_begin_ns[position];
              list.push_back({readings[position].value, before_ns, 0, earliest_ns, 0});
            }
            last_read_begin_ns[position] = before_ns;
          }
        }
        std::lock_guard lock(truth_mutex);
        truth_read_ns.insert(truth_read_ns.end(), read_ns.begin(), read_ns.end());
        for (size_t position = 0; position < metrics.size(); ++position) {
          truth[{source_position, device_position, metrics[position]}] = std::move(changes[position]);
        }
      });
    }
  }
  PeriodPlan plan;
  if (options.fast_period_given) plan.fast_override_ns = options.fast_period_ns;
  fmt::print("# mode capture: {:g} s, sampler at {} periods, {} truth reader thread(s)\n", options.seconds,
             options.fast_period_given
                 ? fmt::format("fast {:g} ms", static_cast<double>(options.fast_period_ns) / 1e6)
                 : std::string("default"),
             readers.size());
  Sampler sampler(sources, plan, sink);
  print_schedule(sampler);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // truth readers warm up first
  sampler.start();
  std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds));
  sampler.stop();
  const int64_t sampler_end_ns = core::monotonic_ns();
  stop = true;
  for (auto& reader : readers) reader.join();
  fmt::print("{:<10} {:>4} {:<22} {:>9} {:>9} {:>9} {:>12} {:>12} {:>12} {:>10}\n", "source", "dev", "metric",
             "changes", "captured", "ratio", "hold p10 ms", "hold p50 ms", "missed p50", "miss A-B-A");
  uint64_t total = 0;
  uint64_t captured_total = 0;
  uint64_t long_total = 0;     // changes held at least two sampling periods
  uint64_t long_captured = 0;  // ... of which the sampler read the value
  // Values held >= 2 ms: at each ~100 ms sensor update NVML shows an intermediate value for ~1 ms before the
  // new one (nvml_query_lab "flicker": A -> B (1 ms) -> C); this figure leaves those transitional values out.
  constexpr int64_t kTransitionalNs = 2'000'000;
  uint64_t settled_total = 0;
  uint64_t settled_captured = 0;
  std::map<std::string, int64_t> period_of;
  for (const auto& entry : sampler.schedule()) period_of[entry.metric] = entry.period_ns;
  for (const auto& [key, changes] : truth) {
    const auto& samples = sampled[key];
    uint64_t counted = 0;
    uint64_t captured = 0;
    uint64_t missed_reversions = 0;  // missed values whose neighbours are equal (A B A): a blip, not a step
    std::vector<double> hold_ms;     // how long each counted value was held (truth)
    std::vector<double> missed_hold_ms;  // the same, for the values the sampler never read
    const int64_t first_sample_ns = samples.empty() ? INT64_MAX : samples.front().first;
    for (size_t index = 1; index + 1 < changes.size(); ++index) {  // first/last values have unknown extent
      const Change& change = changes[index];
      if (change.t_begin_ns < first_sample_ns || change.t_end_ns > sampler_end_ns) continue;
      ++counted;
      const double held_ms = static_cast<double>(change.t_end_ns - change.t_begin_ns) / 1e6;
      hold_ms.push_back(held_ms);
      bool seen = false;
      // The value can only have been present within [t_earliest, t_latest] (see Change); the sampler's t is
      // the middle of its read, so allow that read's own duration (100 µs) on either side. Its neighbours are
      // other values, so a sampler read of this value inside the window can only be this occurrence.
      const auto lower =
          std::lower_bound(samples.begin(), samples.end(),
                           std::pair<int64_t, double>(change.t_earliest_ns - 100'000, -INFINITY));
      for (auto sample = lower; sample != samples.end() && sample->first <= change.t_latest_ns + 100'000;
           ++sample) {
        if (sample->second == change.value) {
          seen = true;
          break;
        }
      }
      const auto& name = sources[key.source]->devices()[key.device].metrics[key.metric].name;
      if (change.t_end_ns - change.t_begin_ns >= 2 * period_of[name]) {
        ++long_total;
        long_captured += seen ? 1 : 0;
      }
      if (change.t_end_ns - change.t_begin_ns >= kTransitionalNs) {
        ++settled_total;
        settled_captured += seen ? 1 : 0;
      }
      if (seen) {
        ++captured;
      } else {
        missed_hold_ms.push_back(held_ms);
        if (changes[index - 1].value == changes[index + 1].value) ++missed_reversions;
      }
    }
    const auto& metric = sources[key.source]->devices()[key.device].metrics[key.metric];
    fmt::print(
        "{:<10} {:>4} {:<22} {:>9} {:>9} {:>8.2f}% {:>12.2f} {:>12.2f} {:>12.2f} {:>10}\n",
        sources[key.source]->name(), sources[key.source]->devices()[key.device].index, metric.name, counted,
        captured, counted ? 100.0 * static_cast<double>(captured) / static_cast<double>(counted) : 100.0,
        quantile(hold_ms, 0.1), quantile(hold_ms, 0.5), quantile(missed_hold_ms, 0.5), missed_reversions);
    total += counted;
    captured_total += captured;
  }
  std::vector<double> read_us;
  for (int64_t value : truth_read_ns) read_us.push_back(static_cast<double>(value) / 1e3);
  fmt::print(
      "# truth reads of one device: {} reads, p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us (each change's "
      "timing "
      "uncertainty)\n",
      read_us.size(), quantile(read_us, 0.5), quantile(read_us, 0.99), quantile(read_us, 1.0));
  fmt::print("# values held >= 2 ms (not transitional): {:.2f} % of {} captured\n",
             settled_total
                 ? 100.0 * static_cast<double>(settled_captured) / static_cast<double>(settled_total)
                 : 100.0,
             settled_total);
  fmt::print(
      "# values held >= 2 sampling periods: {:.2f} % of {} captured (the rest are shorter-lived: see "
      "'missed p50')\n",
      long_total ? 100.0 * static_cast<double>(long_captured) / static_cast<double>(long_total) : 100.0,
      long_total);
  fmt::print("capture: {:.2f} % of {} sensor value changes captured at {} periods (target >= 99 %)\n",
             total ? 100.0 * static_cast<double>(captured_total) / static_cast<double>(total) : 0.0, total,
             options.fast_period_given ? "the given" : "default");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int index = 1; index < argc; ++index) {
    const std::string arg = argv[index];
    auto value = [&]() -> std::string {
      if (index + 1 >= argc) {
        fmt::print(stderr, "{} needs a value\n", arg);
        std::exit(2);
      }
      return argv[++index];
    };
    try {
      if (arg == "--mode") {
        options.mode = value();
      } else if (arg == "--seconds") {
        options.seconds = std::stod(value());
      } else if (arg == "--fast-period") {
        options.fast_period_ns = parse_duration_ns(value(), "--fast-period");
        options.fast_period_given = true;
      } else if (arg == "--slow-period") {
        options.slow_period_ns = parse_duration_ns(value(), "--slow-period");
      } else if (arg == "--default-periods") {
        options.default_periods = true;
      } else if (arg == "--sources") {
        std::string list = value();
        for (size_t begin = 0; begin <= list.size();) {
          size_t end = list.find(',', begin);
          if (end == std::string::npos) end = list.size();
          options.sources.push_back(list.substr(begin, end - begin));
          begin = end + 1;
        }
      } else {
        fmt::print(
            stderr,
            "usage: telemetry_overhead_bench [--mode overhead|capture] [--seconds N] [--fast-period 10ms] "
            "[--slow-period 1s] [--default-periods] [--sources nvml,procfs,synthetic]\n");
        return 2;
      }
    } catch (const std::exception& error) {
      fmt::print(stderr, "{}\n", error.what());
      return 2;
    }
  }
  if (options.mode == "overhead") return run_overhead(options);
  if (options.mode == "capture") return run_capture(options);
  fmt::print(stderr, "--mode {}: valid modes are overhead, capture\n", options.mode);
  return 2;
}
