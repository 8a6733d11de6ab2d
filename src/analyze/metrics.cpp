// Run metrics: one pass per (device, metric) series, parallel over devices (one reader per thread).
#include "analyze/metrics.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "analyze/window_mean.h"
#include "core/error.h"
#include "core/step_warmup.h"
#include "store/summary.h"

namespace calo::analyze {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
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

double json_number(const nlohmann::json& config, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto found = config.find(key);
    if (found != config.end() && found->is_number()) return found->get<double>();
  }
  return 0;
}

Workload read_workload(const store::RunInfo& run, const std::vector<store::SummaryRow>& run_rows,
                       const std::vector<store::DeviceInfo>& devices) {
  nlohmann::json config = nlohmann::json::parse(run.config_json, nullptr, false);
  if (!config.is_object()) config = nlohmann::json::object();
  // Flatten one level of nesting ({"workload": {...}}) so producers may group their keys.
  for (const auto& [key, value] : config.items()) {
    if (!value.is_object()) continue;
    for (const auto& [inner_key, inner_value] : value.items()) {
      if (!config.contains(inner_key)) config[inner_key] = inner_value;
    }
  }
  for (const auto& row : run_rows) config[row.key] = row.value;
  Workload workload;
  workload.samples_per_step = json_number(config, {"samples_per_step", "global_batch_size", "gbs"});
  double seq = json_number(config, {"seq_length", "seq", "sequence_length"});
  workload.tokens_per_step = json_number(config, {"tokens_per_step"});
  if (workload.tokens_per_step == 0 && workload.samples_per_step > 0 && seq > 0) {
    workload.tokens_per_step = workload.samples_per_step * seq;
  }
  if (workload.samples_per_step == 0 && workload.tokens_per_step > 0 && seq > 0) {
    workload.samples_per_step = workload.tokens_per_step / seq;
  }
  workload.model_flops_per_step = json_number(config, {"model_flops_per_step", "flops_per_step"});
  workload.hardware_flops_per_step = json_number(config, {"hardware_flops_per_step"});
  if (workload.hardware_flops_per_step == 0) workload.hardware_flops_per_step = workload.model_flops_per_step;
  workload.peak_flops_per_gpu = json_number(config, {"peak_flops_per_gpu"});
  workload.ranks = json_number(config, {"ranks"});
  if (workload.peak_flops_per_gpu == 0) {
    for (const auto& device : devices) {
      if (device.kind == store::DeviceKind::kGpu) {
        workload.peak_flops_per_gpu = peak_bf16_flops(device.name);
        break;
      }
    }
  }
  return workload;
}

int32_t lane_of(const store::Span& span) {
  return span.device_idx >= 0 ? span.device_idx : span.rank;
}

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

}  // namespace

Distribution distribution_of(std::vector<double>& values) {
  Distribution out;
  out.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    out.mean = out.p50 = out.p99 = out.min = out.max = kNan;
    return out;
  }
  double sum = 0;
  for (double value : values) sum += value;
  out.mean = sum / static_cast<double>(values.size());
  auto rank_value = [&](double quantile) {
    auto rank = static_cast<std::size_t>(std::ceil(quantile * static_cast<double>(values.size())));
    rank = std::clamp<std::size_t>(rank, 1, values.size()) - 1;
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank), values.end());
    return values[rank];
  };
  out.p50 = rank_value(0.5);
  out.p99 = rank_value(0.99);
  auto [min_it, max_it] = std::minmax_element(values.begin(), values.end());
  out.min = *min_it;
  out.max = *max_it;
  return out;
}

double peak_bf16_flops(const std::string& device_name) {
  struct Entry {
    const char* token;
    double flops;
  };
  // Dense bf16 tensor-core peaks from the vendors' data sheets (no sparsity).
  static const Entry kTable[] = {{"GB200", 2.5e15},     {"B200", 2.25e15},  {"H200", 989e12},
                                 {"H100 PCIe", 756e12}, {"H100", 989e12},   {"H800", 989e12},
                                 {"A100", 312e12},      {"A800", 312e12},   {"L40S", 362e12},
                                 {"MI300X", 1307e12},   {"MI250", 191.5e12}};
  for (const auto& entry : kTable) {
    if (device_name.find(entry.token) != std::string::npos) return entry.flops;
  }
  return 0;
}

namespace {

// ---- Stages of analyze_run(), in the order it calls them. ----

// Step spans grouped by step number. Warm-up steps (spans named "warmup", as `calo bench` writes them) are
// kept apart: marked on the charts, out of the step statistics and the window.
struct StepTable {
  std::map<int64_t, std::pair<int64_t, int64_t>> range;              // step -> (earliest begin, latest end)
  std::map<int64_t, std::vector<std::pair<int32_t, int64_t>>> ends;  // step -> (lane, end)
  std::vector<std::pair<int64_t, int64_t>> warmup_marks;
  int64_t taken_as_warmup = 0;  // leading steps set apart by take_unmarked_warmup
};

/// A run that marks no warm-up (a `calo record` of a plain loop) still has one: its leading steps that
/// core::leading_warmup_steps finds are set apart as warm-up.
void take_unmarked_warmup(StepTable& table) {
  if (!table.warmup_marks.empty()) return;
  std::vector<double> durations;
  for (const auto& [step, range] : table.range)
    durations.push_back(static_cast<double>(range.second - range.first));
  for (std::size_t taken = core::leading_warmup_steps(durations); taken > 0; --taken) {
    const auto first = table.range.begin();
    table.warmup_marks.push_back(first->second);
    table.ends.erase(first->first);
    table.range.erase(first);
    ++table.taken_as_warmup;
  }
}

StepTable read_steps(const store::RunReader& reader) {
  StepTable table;
  auto step_spans = reader.spans(store::SpanKind::kStep);
  for (std::size_t index = 0; index < step_spans.size(); ++index) {
    const auto& span = step_spans[index];
    if (span.name == "warmup") {
      table.warmup_marks.emplace_back(span.t_begin_ns, span.t_end_ns);
      continue;
    }
    int64_t step = span.step != store::kNone ? span.step : static_cast<int64_t>(index);
    auto [it, inserted] = table.range.try_emplace(step, span.t_begin_ns, span.t_end_ns);
    if (!inserted) {
      it->second.first = std::min(it->second.first, span.t_begin_ns);
      it->second.second = std::max(it->second.second, span.t_end_ns);
    }
    if (lane_of(span) >= 0) table.ends[step].emplace_back(lane_of(span), span.t_end_ns);
  }
  take_unmarked_warmup(table);
  return table;
}

// Step statistics: per step number, latest end minus earliest begin over ranks.
void apply_steps(const StepTable& steps, RunAnalysis& analysis) {
  std::vector<double> step_seconds;
  analysis.step_marks_ns = steps.warmup_marks;
  for (const auto& [step, range] : steps.range) {
    step_seconds.push_back(static_cast<double>(range.second - range.first) * 1e-9);
    analysis.step_marks_ns.push_back(range);
    analysis.measured_steps_ns.push_back(range);
  }
  analysis.steps = static_cast<int64_t>(step_seconds.size());
  analysis.steps_taken_as_warmup = steps.taken_as_warmup;
  analysis.step_time_s = distribution_of(step_seconds);
}

// Time ranges: the chart covers the whole run; the analysis window covers the steps if any.
void set_time_ranges(const store::RunReader& reader, const std::vector<store::MetricInfo>& metrics,
                     const StepTable& steps, RunAnalysis& analysis) {
  int64_t run_end_ns =
      analysis.run.ended_ns > analysis.run.started_ns ? analysis.run.ended_ns - analysis.run.started_ns : 0;
  analysis.chart_begin_ns = 0;
  analysis.chart_end_ns = run_end_ns;
  if (!steps.range.empty())
    analysis.chart_end_ns = std::max(analysis.chart_end_ns, steps.range.rbegin()->second.second);
  if (analysis.chart_end_ns <= 0 && !metrics.empty() && !analysis.devices.empty()) {
    reader.for_each_sample(analysis.devices.front().idx, metrics.front().id,
                           [&](const store::Sample& sample) { analysis.chart_end_ns = sample.t_ns + 1; });
  }
  analysis.chart_end_ns = std::max<int64_t>(analysis.chart_end_ns, 1);
  if (!steps.range.empty()) {
    analysis.t_begin_ns = steps.range.begin()->second.first;
    analysis.t_end_ns = 0;
    for (const auto& [step, range] : steps.range)
      analysis.t_end_ns = std::max(analysis.t_end_ns, range.second);
  } else {
    analysis.t_begin_ns = analysis.chart_begin_ns;
    analysis.t_end_ns = analysis.chart_end_ns;
  }
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
    std::mutex error_mutex;
    std::exception_ptr first_error;
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
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    };
    std::vector<std::thread> pool;
    for (int32_t worker = 1; worker < threads; ++worker) pool.emplace_back(work);
    work();
    for (auto& thread : pool) thread.join();
    if (first_error) std::rethrow_exception(first_error);
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

// Stragglers: which device's step span ends last, and by how much past the median end.
void find_stragglers(const StepTable& steps, std::vector<DeviceMetrics>& device_metrics,
                     RunAnalysis& analysis) {
  const std::size_t device_count = analysis.devices.size();
  std::map<int32_t, std::size_t> slot_of_device;
  for (std::size_t slot = 0; slot < device_count; ++slot) slot_of_device[analysis.devices[slot].idx] = slot;
  std::vector<int64_t> last_count(device_count, 0);
  std::vector<double> lag_sum_ms(device_count, 0);
  std::vector<int64_t> lag_n(device_count, 0);
  int64_t multi_steps = 0;
  std::set<int32_t> step_lanes;
  for (const auto& [step, ends] : steps.ends) {
    if (ends.size() < 2) continue;
    ++multi_steps;
    std::vector<int64_t> times;
    for (const auto& [lane, end] : ends) {
      times.push_back(end);
      step_lanes.insert(lane);
    }
    std::size_t middle = (times.size() - 1) / 2;  // lower median: with two ranks, the earlier end
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(middle), times.end());
    int64_t median = times[middle];
    auto last = std::max_element(ends.begin(), ends.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    for (const auto& [lane, end] : ends) {
      auto found = slot_of_device.find(lane);
      if (found == slot_of_device.end()) continue;
      lag_sum_ms[found->second] += static_cast<double>(end - median) * 1e-6;
      ++lag_n[found->second];
      if (lane == last->first) ++last_count[found->second];
    }
  }
  if (multi_steps == 0) return;
  double n = static_cast<double>(step_lanes.size());
  double threshold = n >= 3 ? 2.0 / n : 0.75;
  double step_ms = std::isnan(analysis.step_time_s.mean) ? 0 : analysis.step_time_s.mean * 1e3;
  for (std::size_t slot = 0; slot < device_count; ++slot) {
    if (lag_n[slot] == 0) continue;
    auto& out = device_metrics[slot];
    out.straggler_fraction = static_cast<double>(last_count[slot]) / static_cast<double>(multi_steps);
    out.straggler_lag_ms = lag_sum_ms[slot] / static_cast<double>(lag_n[slot]);
    if (out.straggler_fraction > threshold && out.straggler_lag_ms > 0.002 * step_ms) {
      analysis.stragglers.push_back(out.device.idx);
    }
  }
}

// Thermal groups per node (by_node) or per slot.
std::vector<ThermalGroup> thermal_groups(const std::vector<DeviceMetrics>& device_metrics, bool by_node) {
  std::map<int32_t, std::vector<const DeviceMetrics*>> members;
  for (const auto& metrics_of : device_metrics) {
    if (metrics_of.device.kind != store::DeviceKind::kGpu || std::isnan(metrics_of.temp_mean_c)) continue;
    members[by_node ? metrics_of.device.node : metrics_of.device.slot].push_back(&metrics_of);
  }
  std::vector<ThermalGroup> groups;
  for (const auto& [key, list] : members) {
    ThermalGroup thermal;
    thermal.label = fmt::format("{} {}", by_node ? "node" : "slot", key);
    double sum = 0;
    double hottest = -1e300;
    double coolest = 1e300;
    for (const auto* member : list) {
      sum += member->temp_mean_c;
      hottest = std::max(hottest, member->temp_mean_c);
      coolest = std::min(coolest, member->temp_mean_c);
      thermal.temp_peak_c = std::max(thermal.temp_peak_c, member->temp_peak_c);
    }
    thermal.temp_mean_c = sum / static_cast<double>(list.size());
    thermal.temp_spread_c = hottest - coolest;
    thermal.imbalance_pct = coolest > 0 ? (hottest - coolest) / coolest * 100.0 : 0.0;
    groups.push_back(thermal);
  }
  return groups;
}

// Run totals: energy and power over devices, throughput and efficiency per step (docs/METRICS.md).
void run_totals(const std::vector<DeviceMetrics>& device_metrics, double window_s, RunAnalysis& analysis) {
  double energy = 0;
  bool has_energy = false;
  double power_sum = 0;
  bool has_power = false;
  int64_t gpus = 0;
  for (const auto& out : device_metrics) {
    if (out.device.kind == store::DeviceKind::kGpu) ++gpus;
    if (!std::isnan(out.energy_j)) {
      energy += out.energy_j;
      has_energy = true;
    }
    if (!std::isnan(out.power_mean_w)) {
      power_sum += out.power_mean_w;
      has_power = true;
      analysis.power_peak_w = std::isnan(analysis.power_peak_w)
                                  ? out.power_peak_w
                                  : std::max(analysis.power_peak_w, out.power_peak_w);
    }
  }
  if (has_power) analysis.power_mean_w = power_sum;
  if (has_energy) analysis.energy_j = energy;
  const auto& workload = analysis.workload;
  double step_s = analysis.step_time_s.mean;
  if (analysis.steps <= 0 || !(step_s > 0)) return;
  if (workload.tokens_per_step > 0) analysis.tokens_per_s = workload.tokens_per_step / step_s;
  // FLOPs per GPU; a run without GPUs (the CPU backend) shares them among its ranks.
  const double devices = gpus > 0 ? static_cast<double>(gpus) : workload.ranks;
  if (workload.model_flops_per_step > 0 && devices > 0) {
    analysis.tflops_per_gpu = workload.model_flops_per_step / step_s / devices / 1e12;
    if (workload.peak_flops_per_gpu > 0) {
      analysis.mfu = analysis.tflops_per_gpu * 1e12 / workload.peak_flops_per_gpu;
      analysis.hfu = workload.hardware_flops_per_step / step_s / devices / workload.peak_flops_per_gpu;
    }
  }
  if (has_energy) {
    analysis.energy_per_step_j = energy / static_cast<double>(analysis.steps);
    if (workload.tokens_per_step > 0) {
      analysis.energy_per_token_j = analysis.energy_per_step_j / workload.tokens_per_step;
      analysis.tokens_per_j = 1.0 / analysis.energy_per_token_j;
    }
    if (workload.samples_per_step > 0 && window_s > 0 && energy > 0) {
      double samples = workload.samples_per_step * static_cast<double>(analysis.steps);
      analysis.samples_per_s_mj = (samples / window_s) / (energy / 1e6);
    }
  }
}

// Kernel breakdown from kernel spans (ingested traces, executor timing); empty without kernel spans.
std::vector<LaneBreakdown> kernels_of(const store::RunReader& reader) {
  auto kernel_spans = reader.spans(store::SpanKind::kKernel);
  if (kernel_spans.empty()) return {};
  KernelClassifier classifier;
  std::vector<KernelInterval> intervals;
  intervals.reserve(kernel_spans.size());
  int32_t lanes = 0;
  for (const auto& span : kernel_spans) {
    int32_t lane = lane_of(span);
    if (lane < 0) continue;
    auto category = parse_kernel_category(span.category);
    intervals.push_back({lane, category ? *category : classifier.classify(span.name, false, span.category),
                         span.t_begin_ns, span.t_end_ns, 0, 0});
    lanes = std::max(lanes, lane + 1);
  }
  return kernel_breakdown(intervals, lanes);
}

}  // namespace

// Stages: read run -> steps -> time ranges -> series (per-device figures) -> stragglers -> thermal groups ->
// run totals -> kernel breakdown.
RunAnalysis analyze_run(const std::filesystem::path& run_dir, const AnalyzeOptions& options) {
  store::RunReader reader(run_dir);
  RunAnalysis analysis;
  analysis.run_dir = run_dir;
  analysis.run = reader.run();
  analysis.devices = reader.devices();
  const auto metrics = reader.metrics();
  analysis.workload =
      read_workload(analysis.run, reader.summaries(std::string_view("run")), analysis.devices);

  const StepTable steps = read_steps(reader);
  apply_steps(steps, analysis);
  set_time_ranges(reader, metrics, steps, analysis);
  SeriesReduction series(run_dir, metrics, analysis, options);
  analysis.storage_order_scan = series.run();
  series.collect_series(analysis);
  std::vector<DeviceMetrics>& device_metrics = series.device_metrics();
  find_stragglers(steps, device_metrics, analysis);
  analysis.nodes = thermal_groups(device_metrics, true);
  analysis.slots = thermal_groups(device_metrics, false);
  run_totals(device_metrics, series.window_s(), analysis);
  analysis.kernels = kernels_of(reader);
  analysis.device_metrics = std::move(device_metrics);
  return analysis;
}

std::vector<Figure> run_figures(const RunAnalysis& analysis) {
  std::vector<Figure> figures = {
      {"step_time_mean_s", analysis.step_time_s.mean, "s", false},
      {"step_time_p50_s", analysis.step_time_s.p50, "s", false},
      {"step_time_p99_s", analysis.step_time_s.p99, "s", false},
      {"tokens_per_s", analysis.tokens_per_s, "tokens/s", true},
      {"tflops_per_gpu", analysis.tflops_per_gpu, "TFLOP/s", true},
      {"mfu", analysis.mfu, "fraction", true},
      {"hfu", analysis.hfu, "fraction", true},
      {"energy_j", analysis.energy_j, "J", false},
      {"energy_per_step_j", analysis.energy_per_step_j, "J", false},
      {"energy_per_token_j", analysis.energy_per_token_j, "J", false},
      {"tokens_per_j", analysis.tokens_per_j, "tokens/J", true},
      {"samples_per_s_mj", analysis.samples_per_s_mj, "samples/(s*MJ)", true},
      {"power_total_mean_w", analysis.power_mean_w, "W", false},
      {"power_gpu_peak_w", analysis.power_peak_w, "W", false},
  };
  auto device_stat = [&](auto member, bool use_max) {
    double result = kNan;
    for (const auto& out : analysis.device_metrics) {
      double value = out.*member;
      if (std::isnan(value)) continue;
      result = std::isnan(result) ? value : (use_max ? std::max(result, value) : result + value);
    }
    if (!use_max && !std::isnan(result)) {
      int64_t n = 0;
      for (const auto& out : analysis.device_metrics) n += std::isnan(out.*member) ? 0 : 1;
      result /= static_cast<double>(n);
    }
    return result;
  };
  figures.push_back({"power_gpu_mean_w", device_stat(&DeviceMetrics::power_mean_w, false), "W", false});
  figures.push_back({"power_gpu_p99_w", device_stat(&DeviceMetrics::power_p99_w, true), "W", false});
  figures.push_back(
      {"power_peak_to_mean", device_stat(&DeviceMetrics::power_peak_to_mean, true), "ratio", false});
  figures.push_back(
      {"power_swing_100ms_w", device_stat(&DeviceMetrics::power_swing_100ms_w, true), "W", false});
  figures.push_back({"temp_gpu_mean_c", device_stat(&DeviceMetrics::temp_mean_c, false), "C", false});
  figures.push_back({"temp_gpu_peak_c", device_stat(&DeviceMetrics::temp_peak_c, true), "C", false});
  figures.push_back(
      {"temp_gpu_peak_500ms_c", device_stat(&DeviceMetrics::temp_peak_500ms_c, true), "C", false});
  double spread = kNan;
  for (const auto& node : analysis.nodes)
    spread = std::isnan(spread) ? node.temp_spread_c : std::max(spread, node.temp_spread_c);
  figures.push_back({"temp_node_spread_c", spread, "C", false});
  figures.push_back(
      {"sm_clock_mean_mhz", device_stat(&DeviceMetrics::sm_clock_mean_mhz, false), "MHz", true});
  for (std::size_t reason = 0; reason < kThrottleReasons.size(); ++reason) {
    double worst = kNan;
    for (const auto& out : analysis.device_metrics) {
      double value = out.throttle_fraction[reason];
      if (!std::isnan(value)) worst = std::isnan(worst) ? value : std::max(worst, value);
    }
    figures.push_back(
        {fmt::format("throttle_{}_fraction_max", kThrottleReasons[reason]), worst, "fraction", false});
  }
  if (!analysis.kernels.empty()) {
    double exposed = 0;
    double comm = 0;
    for (const auto& lane : analysis.kernels) {
      for (auto category : kAllKernelCategories) {
        if (!is_comm(category)) continue;
        exposed += lane.exposed_s[static_cast<std::size_t>(category)];
        comm += lane.busy_s[static_cast<std::size_t>(category)];
      }
    }
    auto lanes = static_cast<double>(analysis.kernels.size());
    figures.push_back({"comm_time_per_gpu_s", comm / lanes, "s", false});
    figures.push_back({"comm_exposed_per_gpu_s", exposed / lanes, "s", false});
  }
  return figures;
}

}  // namespace calo::analyze
