// Run metrics: steps, time ranges, stragglers, thermal groups, run totals and figures; the per-series pass
// (parallel over devices) is in metrics_series.cpp.
#include "analyze/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "analyze/metrics_internal.h"
#include "core/error.h"
#include "core/statistics.h"
#include "core/step_warmup.h"

namespace calo::analyze {
namespace {

using metrics_detail::kNan;

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
  out.p50 = core::nearest_rank_percentile(values, 0.5);
  out.p99 = core::nearest_rank_percentile(values, 0.99);
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

// The node of each rank of a merged run: calo merge prefixes each node's summary scopes with "node<N>/", and
// a recorder names a rank's rows "rank<R>".
std::map<int32_t, int32_t> rank_nodes(const store::RunReader& reader) {
  std::map<int32_t, int32_t> nodes;
  for (const store::SummaryRow& row : reader.summaries()) {
    int node = -1, rank = -1, used = 0;
    if (std::sscanf(row.scope.c_str(), "node%d/rank%d%n", &node, &rank, &used) == 2 &&
        used == static_cast<int>(row.scope.size()) && node >= 0 && rank >= 0)
      nodes[rank] = node;
  }
  return nodes;
}

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
  metrics_detail::SeriesFigures series = metrics_detail::reduce_series(run_dir, metrics, options, analysis);
  std::vector<DeviceMetrics>& device_metrics = series.device_metrics;
  find_stragglers(steps, device_metrics, analysis);
  analysis.rank_node = rank_nodes(reader);
  analysis.nodes = thermal_groups(device_metrics, true);
  analysis.slots = thermal_groups(device_metrics, false);
  run_totals(device_metrics, series.window_s, analysis);
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
