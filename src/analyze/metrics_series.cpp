// Run metrics, the series part: every (device, metric) series reduced to its digest and the per-device
// figures in one pass, by a sequential scan of the sample table or per-series queries parallel over devices.
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "analyze/metrics.h"
#include "analyze/metrics_internal.h"
#include "analyze/window_mean.h"
#include "core/threads.h"
#include "store/summary.h"

namespace calo::analyze {
namespace {

using metrics_detail::kNan;

constexpr int64_t kSwingWindowNs = 100'000'000;

// Accumulates one series; fed samples in time order.
class SeriesAccumulator {
 public:
  SeriesAccumulator(const store::MetricInfo& metric, int64_t window_begin_ns, int64_t window_end_ns,
                    int64_t chart_begin_ns, int64_t chart_end_ns, int32_t buckets, bool keep_values)
      : metric_(metric),
        window_begin_ns_(window_begin_ns),
        window_end_ns_(window_end_ns),
        chart_begin_ns_(chart_begin_ns),
        chart_span_ns_(std::max<int64_t>(1, chart_end_ns - chart_begin_ns)),
        keep_values_(keep_values),
        keep_samples_(metric.kind == store::MetricKind::kCounter),
        keep_edge_samples_(metric.name == "power_sampled_w"),
        track_window_mean_(metric.name == "temp_gpu_c") {
    if (metric.name == "power_sampled_w") window_integral_.emplace(window_begin_ns, window_end_ns);
    digest_.metric = metric.name;
    digest_.unit = metric.unit;
    if (metric.kind != store::MetricKind::kCounter) digest_.buckets.resize(static_cast<std::size_t>(buckets));
  }

  void add(const store::Sample& sample) {
    double value = sample.value;
    int64_t t_ns = sample.t_ns;
    if (digest_.count == 0) {
      digest_.first_value = value;
      digest_.first_t_ns = t_ns;
    }
    ++digest_.count;
    digest_.last_value = value;
    digest_.last_t_ns = t_ns;
    if (!digest_.buckets.empty()) {
      auto bucket_count = static_cast<int64_t>(digest_.buckets.size());
      int64_t index = (t_ns - chart_begin_ns_) * bucket_count / chart_span_ns_;
      index = std::clamp<int64_t>(index, 0, bucket_count - 1);
      auto& bucket = digest_.buckets[static_cast<std::size_t>(index)];
      if (bucket.count == 0) {
        bucket.min = bucket.max = value;
        bucket.mean = 0;
      }
      bucket.min = std::min(bucket.min, value);
      bucket.max = std::max(bucket.max, value);
      bucket.mean += value;  // divided by count in finish()
      ++bucket.count;
    }
    if (window_integral_) window_integral_->add(t_ns, value);
    if (keep_samples_ ||
        (keep_edge_samples_ && store::near_window_edge(t_ns, window_begin_ns_, window_end_ns_)))
      samples_.push_back(sample);
    if (t_ns < window_begin_ns_ || t_ns >= window_end_ns_) return;
    // Window statistics.
    ++window_count_;
    sum_ += value;
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
    if (has_previous_) {
      double dt = static_cast<double>(t_ns - previous_t_ns_);
      if (track_window_mean_) window_mean_.add_segment(previous_t_ns_, t_ns, previous_value_);
      weighted_sum_ += previous_value_ * dt;
      weighted_time_ += dt;
      trapezoid_ += 0.5 * (previous_value_ + value) * dt * 1e-9;
      if (metric_.kind == store::MetricKind::kBitmask) {
        auto mask = static_cast<uint64_t>(previous_value_);
        for (std::size_t bit = 0; bit < digest_.bit_fraction.size(); ++bit) {
          if ((mask >> bit) & 1u) digest_.bit_fraction[bit] += dt;
        }
      }
    }
    has_previous_ = true;
    previous_value_ = value;
    previous_t_ns_ = t_ns;
    if (keep_values_) {
      values_.push_back(static_cast<float>(value));
      track_swing(t_ns, value);
    }
  }

  SeriesDigest finish() {
    for (auto& bucket : digest_.buckets) {
      if (bucket.count > 0) bucket.mean /= bucket.count;
    }
    if (window_count_ > 0) {
      digest_.time_mean =
          weighted_time_ > 0 ? weighted_sum_ / weighted_time_ : sum_ / static_cast<double>(window_count_);
      if (keep_values_) {
        std::vector<double> values(values_.begin(), values_.end());
        values_.clear();
        values_.shrink_to_fit();
        digest_.values = distribution_of(values);
      } else {
        digest_.values.count = window_count_;
        digest_.values.mean = sum_ / static_cast<double>(window_count_);
        digest_.values.min = min_;
        digest_.values.max = max_;
        digest_.values.p50 = digest_.values.p99 = kNan;
      }
      for (auto& fraction : digest_.bit_fraction)
        fraction = weighted_time_ > 0 ? fraction / weighted_time_ : 0.0;
    } else {
      digest_.time_mean = kNan;
      digest_.values.mean = digest_.values.p50 = digest_.values.p99 = digest_.values.min =
          digest_.values.max = kNan;
    }
    digest_.max_swing_100ms = max_swing_;
    if (track_window_mean_) digest_.max_mean_500ms = window_mean_.peak_or_mean();
    return std::move(digest_);
  }

  double trapezoid_j() const { return trapezoid_; }
  // power_sampled_w: the integral over the window, edges included; nullopt where the samples do not cover it.
  std::optional<double> window_integral_j() const {
    return window_integral_ ? window_integral_->joules() : std::nullopt;
  }
  int64_t last_t_ns() const {
    return digest_.count > 0 ? digest_.last_t_ns : std::numeric_limits<int64_t>::min();
  }
  const std::vector<store::Sample>& samples() const { return samples_; }

 private:
  // Sliding 100 ms window max-min with monotonic deques.
  void track_swing(int64_t t_ns, double value) {
    while (!max_deque_.empty() && max_deque_.back().second <= value) max_deque_.pop_back();
    max_deque_.emplace_back(t_ns, value);
    while (!min_deque_.empty() && min_deque_.back().second >= value) min_deque_.pop_back();
    min_deque_.emplace_back(t_ns, value);
    while (max_deque_.front().first < t_ns - kSwingWindowNs) max_deque_.pop_front();
    while (min_deque_.front().first < t_ns - kSwingWindowNs) min_deque_.pop_front();
    max_swing_ = std::max(max_swing_, max_deque_.front().second - min_deque_.front().second);
  }

  store::MetricInfo metric_;
  int64_t window_begin_ns_;
  int64_t window_end_ns_;
  int64_t chart_begin_ns_;
  int64_t chart_span_ns_;
  bool keep_values_;
  bool keep_samples_;       // counters: every sample (deltas at the window edges)
  bool keep_edge_samples_;  // power_sampled_w: the samples near the window edges (energy_value_at)
  SeriesDigest digest_;
  int64_t window_count_ = 0;
  double sum_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  double weighted_sum_ = 0;
  double weighted_time_ = 0;
  double trapezoid_ = 0;
  bool has_previous_ = false;
  double previous_value_ = 0;
  int64_t previous_t_ns_ = 0;
  std::vector<float> values_;  // float halves memory for hours of 100 Hz power; quantiles need no more
  std::vector<store::Sample> samples_;
  std::deque<std::pair<int64_t, double>> max_deque_;
  std::deque<std::pair<int64_t, double>> min_deque_;
  double max_swing_ = 0;
  bool track_window_mean_;                                // temp_gpu_c: the hottest 500 ms mean
  std::optional<store::WindowIntegral> window_integral_;  // power_sampled_w: the window's energy
  WindowMeanPeak window_mean_{kSustainedTempWindowNs};
};

// Feeds every sample to its series in SQLite storage order. Returns false (and the caller re-reads per
// series) when a series is not in time order in storage, or a row names an unknown device or metric.
bool scan_in_storage_order(const std::filesystem::path& run_dir,
                           const std::vector<store::DeviceInfo>& devices,
                           const std::vector<store::MetricInfo>& metrics,
                           std::vector<std::vector<SeriesAccumulator>>& series) {
  std::filesystem::path db_path =
      std::filesystem::is_directory(run_dir) ? run_dir / store::kRunDbName : run_dir;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    sqlite3_close(db);
    return false;
  }
  std::unique_ptr<sqlite3, decltype(&sqlite3_close)> db_guard(db, &sqlite3_close);
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT device_idx, metric_id, t_ns, value FROM sample", -1, &raw, nullptr) !=
      SQLITE_OK) {
    return false;
  }
  std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)> statement(raw, &sqlite3_finalize);
  std::unordered_map<int64_t, std::size_t> slot_of;
  for (std::size_t slot = 0; slot < devices.size(); ++slot) slot_of[devices[slot].idx] = slot;
  std::unordered_map<int64_t, std::size_t> metric_of;
  for (std::size_t index = 0; index < metrics.size(); ++index) metric_of[metrics[index].id] = index;
  store::Sample sample;
  int64_t cached_device = std::numeric_limits<int64_t>::min();
  int64_t cached_metric = std::numeric_limits<int64_t>::min();
  SeriesAccumulator* accumulator = nullptr;
  int step = SQLITE_ROW;
  while ((step = sqlite3_step(raw)) == SQLITE_ROW) {
    int64_t device_idx = sqlite3_column_int64(raw, 0);
    int64_t metric_id = sqlite3_column_int64(raw, 1);
    if (device_idx != cached_device || metric_id != cached_metric) {
      auto found_slot = slot_of.find(device_idx);
      auto found_metric = metric_of.find(metric_id);
      if (found_slot == slot_of.end() || found_metric == metric_of.end()) return false;
      accumulator = &series[found_slot->second][found_metric->second];
      cached_device = device_idx;
      cached_metric = metric_id;
    }
    sample.device_idx = static_cast<int32_t>(device_idx);
    sample.metric_id = static_cast<int32_t>(metric_id);
    sample.t_ns = sqlite3_column_int64(raw, 2);
    sample.value = sqlite3_column_double(raw, 3);
    if (sample.t_ns < accumulator->last_t_ns()) return false;
    accumulator->add(sample);
  }
  return step == SQLITE_DONE;
}

// Reduces every series of every device to its digest and the per-device figures (power, temperature, clocks,
// energy, throttling). Fast path: one sequential scan of the sample table in storage order (SQLite's rowid
// order, about 5x cheaper per row than the per-series index walk); valid when every series was appended in
// time order, which the scan verifies. Otherwise: per-series queries, parallel over devices, one reader per
// thread.
class SeriesReduction {
 public:
  SeriesReduction(const std::filesystem::path& run_dir, const std::vector<store::MetricInfo>& metrics,
                  const RunAnalysis& analysis, const AnalyzeOptions& options)
      : run_dir_(run_dir),
        metrics_(metrics),
        analysis_(analysis),
        options_(options),
        device_count_(analysis.devices.size()),
        digests_(device_count_),
        device_metrics_(device_count_),
        samples_read_(device_count_, 0),
        window_s_(static_cast<double>(analysis.t_end_ns - analysis.t_begin_ns) * 1e-9) {
    // The power figures come from one series: the driver's own 20 ms samples where recorded (every sample,
    // none missed), else the polled instantaneous power, else the 1 s average.
    for (const char* candidate : {"power_sampled_w", "power_instant_w", "power_avg_w"}) {
      if (index_of(candidate)) {
        power_metric_ = candidate;
        break;
      }
    }
    energy_index_ = index_of("energy_j");
    power_samples_index_ = index_of("power_sampled_w");
  }

  // Reads and reduces every series; returns whether the storage-order scan served.
  bool run() {
    std::vector<std::vector<SeriesAccumulator>> all_series(device_count_);
    for (auto& accumulators : all_series) accumulators = make_accumulators();
    const bool scanned = options_.storage_order_scan &&
                         scan_in_storage_order(run_dir_, analysis_.devices, metrics_, all_series);
    if (scanned) {
      for (std::size_t slot = 0; slot < device_count_; ++slot) summarize(slot, all_series[slot]);
    } else {
      all_series.clear();
      read_per_series_in_parallel();
    }
    return scanned;
  }

  // Moves the digests into analysis.series and counts the samples read.
  void collect_series(RunAnalysis& analysis) {
    for (std::size_t slot = 0; slot < device_count_; ++slot) {
      analysis.sample_count += samples_read_[slot];
      for (auto& digest : digests_[slot]) {
        auto& per_device = analysis.series[digest.metric];
        per_device.resize(device_count_);
        per_device[slot] = std::move(digest);
      }
    }
  }

  std::vector<DeviceMetrics>& device_metrics() { return device_metrics_; }
  double window_s() const { return window_s_; }

 private:
  std::optional<std::size_t> index_of(std::string_view name) const {
    for (std::size_t index = 0; index < metrics_.size(); ++index) {
      if (metrics_[index].name == name) return index;
    }
    return std::nullopt;
  }

  std::vector<SeriesAccumulator> make_accumulators() const {
    std::vector<SeriesAccumulator> accumulators;
    accumulators.reserve(metrics_.size());
    for (const auto& metric : metrics_) {
      bool keep_values = metric.name == power_metric_;
      accumulators.emplace_back(metric, analysis_.t_begin_ns, analysis_.t_end_ns, analysis_.chart_begin_ns,
                                analysis_.chart_end_ns, options_.chart_buckets, keep_values);
    }
    return accumulators;
  }

  void summarize(std::size_t slot, std::vector<SeriesAccumulator>& accumulators) {
    DeviceMetrics out;
    out.device = analysis_.devices[slot];
    std::map<std::string, double> counter_delta;
    for (std::size_t index = 0; index < metrics_.size(); ++index) {
      const auto& metric = metrics_[index];
      auto& accumulator = accumulators[index];
      double trapezoid = accumulator.trapezoid_j();
      if (metric.kind == store::MetricKind::kCounter && !accumulator.samples().empty()) {
        counter_delta[metric.name] = store::counter_value_at(accumulator.samples(), analysis_.t_end_ns) -
                                     store::counter_value_at(accumulator.samples(), analysis_.t_begin_ns);
      }
      SeriesDigest digest = accumulator.finish();
      samples_read_[slot] += digest.count;
      if (digest.count == 0) continue;
      if (metric.name == power_metric_) {
        out.power_mean_w = out.power_time_mean_w = digest.time_mean;
        out.power_p50_w = digest.values.p50;
        out.power_p99_w = digest.values.p99;
        out.power_peak_w = digest.values.max;
        out.power_peak_to_mean = digest.values.max / digest.time_mean;
        out.power_swing_100ms_w = digest.max_swing_100ms;
        out.power_integral_j = trapezoid;
      } else if (metric.name == "temp_gpu_c") {
        out.temp_mean_c = digest.time_mean;
        out.temp_peak_c = digest.values.max;
        out.temp_peak_500ms_c = digest.max_mean_500ms;
      } else if (metric.name == "clock_sm_mhz") {
        out.sm_clock_mean_mhz = digest.time_mean;
      } else if (metric.name == "util_gpu_pct") {
        out.util_mean_pct = digest.time_mean;
      } else if (metric.name == "clock_event_reasons" && std::isnan(out.throttle_fraction[0])) {
        // NVML clock-event bits: 0x4 SW power cap, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake.
        out.throttle_fraction = {digest.bit_fraction[2], digest.bit_fraction[5], digest.bit_fraction[6],
                                 digest.bit_fraction[7]};
      }
      digests_[slot].push_back(std::move(digest));
    }
    window_energy(accumulators, out);
    const char* counters[] = {"throttle_power_cap_s", "throttle_sw_thermal_s", "throttle_hw_thermal_s",
                              "throttle_power_brake_s"};
    for (std::size_t reason = 0; reason < 4; ++reason) {
      if (counter_delta.contains(counters[reason]) && window_s_ > 0) {
        // A share of time is at most 1: the driver advances the counter in steps (docs/METRICS.md).
        out.throttle_fraction[reason] = std::min(1.0, counter_delta[counters[reason]] / window_s_);
      }
    }
    device_metrics_[slot] = std::move(out);
  }

  // The device's energy over the window (store::window_energy_j: the power samples' integral, else the
  // counter) and its mean power, that energy over the window, so both figures are one (docs/METRICS.md).
  void window_energy(const std::vector<SeriesAccumulator>& accumulators, DeviceMetrics& out) const {
    static const std::vector<store::Sample> kNone;
    const auto& energy = energy_index_ ? accumulators[*energy_index_].samples() : kNone;
    const auto& power = power_samples_index_ ? accumulators[*power_samples_index_].samples() : kNone;
    const std::optional<double> sampled_j =
        power_samples_index_ ? accumulators[*power_samples_index_].window_integral_j() : std::nullopt;
    out.energy_j = store::window_energy_j(sampled_j, energy, power, analysis_.t_begin_ns, analysis_.t_end_ns);
    if (std::isfinite(out.energy_j) && window_s_ > 0) {
      out.power_mean_w = out.energy_j / window_s_;
      out.power_peak_to_mean = out.power_peak_w / out.power_mean_w;
    }
  }

  void read_per_series_in_parallel() {
    int32_t threads =
        options_.threads > 0 ? options_.threads : static_cast<int32_t>(std::thread::hardware_concurrency());
    threads = std::clamp<int32_t>(threads, 1, static_cast<int32_t>(std::max<std::size_t>(device_count_, 1)));
    core::FirstException failure;
    std::atomic<std::size_t> next_device{0};
    auto work = [&] {
      try {
        store::RunReader thread_reader(run_dir_);
        for (std::size_t slot = next_device++; slot < device_count_; slot = next_device++) {
          auto accumulators = make_accumulators();
          for (std::size_t index = 0; index < metrics_.size(); ++index) {
            thread_reader.for_each_sample(
                analysis_.devices[slot].idx, metrics_[index].id,
                [&](const store::Sample& sample) { accumulators[index].add(sample); });
          }
          summarize(slot, accumulators);
        }
      } catch (...) {
        failure.capture();
      }
    };
    core::run_on_threads(threads, work);
    failure.rethrow();
  }

  const std::filesystem::path& run_dir_;
  const std::vector<store::MetricInfo>& metrics_;
  const RunAnalysis& analysis_;
  const AnalyzeOptions& options_;
  std::size_t device_count_;
  std::vector<std::vector<SeriesDigest>> digests_;
  std::vector<DeviceMetrics> device_metrics_;
  std::vector<int64_t> samples_read_;
  double window_s_;
  std::string power_metric_;
  std::optional<std::size_t> energy_index_;
  std::optional<std::size_t> power_samples_index_;
};

}  // namespace

namespace metrics_detail {

SeriesFigures reduce_series(const std::filesystem::path& run_dir,
                            const std::vector<store::MetricInfo>& metrics, const AnalyzeOptions& options,
                            RunAnalysis& analysis) {
  SeriesReduction series(run_dir, metrics, analysis, options);
  analysis.storage_order_scan = series.run();
  series.collect_series(analysis);
  return {std::move(series.device_metrics()), series.window_s()};
}

}  // namespace metrics_detail

}  // namespace calo::analyze
