#include "sim/store_run.h"

#include <algorithm>
#include <cmath>

#include "core/time.h"
#include "store/run_store.h"

namespace calo::sim {

namespace {

std::int64_t to_ns(double seconds) {
  return static_cast<std::int64_t>(std::llround(seconds * 1e9));
}

/// The run's header: names, the config with the workload figures, the simulated host and the start time.
store::RunInfo sim_run_info(const std::string& name, const std::string& command, const nlohmann::json& config,
                            const ClusterSpec& cluster, const SimResult& result) {
  store::RunInfo info;
  info.kind = store::RunKind::kSim;
  info.name = name;
  info.command = command;
  // The workload figures the analysis reads (analyze::read_workload): tokens/s, MFU and J/token of a sim run
  // come from the same numbers as a measured run's.
  nlohmann::json stored_config = config;
  stored_config["workload"] = {{"tokens_per_step", result.tokens_per_step},
                               {"model_flops_per_step", result.model_flops_per_step},
                               {"hardware_flops_per_step", result.hardware_flops_per_step},
                               {"peak_flops_per_gpu", result.peak_flops_per_gpu}};
  info.config_json = stored_config.dump();
  info.host = "simulated:" + cluster.name;
  const core::TimeOrigin origin = core::time_origin_now();
  info.started_ns = origin.monotonic_ns;
  info.wall_offset_ns = origin.wall_ns;
  return info;
}

/// Adds one simulated device per rank, placed on the cluster's nodes.
void add_devices(store::RunWriter& writer, const ClusterSpec& cluster, const SimResult& result) {
  for (int rank = 0; rank < result.world; ++rank) {
    store::DeviceInfo device;
    device.idx = rank;
    device.node = rank / cluster.node.gpus;
    device.slot = rank % cluster.node.gpus;
    device.name = cluster.gpu.name + " (simulated)";
    device.power_limit_w = result.gpus[rank].power_limit_w;
    device.max_sm_mhz = cluster.gpu.max_sm_mhz;
    writer.add_device(device);
  }
}

/// Power-trace samples a stored run keeps at most (~20 MB of run.db): beyond, each trace's windows are merged
/// k at a time (the k-window mean, so the stored power still integrates to the stored energy). Llama3-70B on
/// 64 GPUs keeps its 235 k windows of one step; GPT3-175B on 8,192 GPUs for ten steps keeps 1 in 40.
constexpr std::size_t kMaxStoredTraceSamples = 500'000;

/// Which samples fit in the budget: per-GPU samples when world * steps <= max_gpu_samples, and then the power
/// traces' samples, k windows merged into one (trace_stride) to keep kMaxStoredTraceSamples.
struct SampleChoice {
  bool per_gpu = false;          ///< one sample per GPU, metric and step
  bool power_traces = false;     ///< the power traces' samples (power_sampled_w)
  std::size_t trace_stride = 1;  ///< windows merged into one stored sample
};

/// Chooses the samples to store for `result` under `max_gpu_samples`.
SampleChoice choose_samples(const SimResult& result, long long max_gpu_samples) {
  SampleChoice choice;
  choice.per_gpu = static_cast<long long>(result.world) * result.steps <= max_gpu_samples;
  std::size_t trace_samples = 0;
  for (std::size_t index = 0; index < result.trace_of.size(); ++index) {
    trace_samples += result.power_traces[result.trace_of[index]]->sample_w.size();
  }
  choice.power_traces = choice.per_gpu;
  choice.trace_stride =
      std::max<std::size_t>(1, (trace_samples + kMaxStoredTraceSamples - 1) / kMaxStoredTraceSamples);
  return choice;
}

/// Appends `trace`'s windows of a step starting at `start_s`, `stride` merged into one sample at the last
/// one's end: their time-weighted mean power, rounded to the traces' float precision (a mean computed in
/// double carries noise in its last bits, x · L / L is not always x, which GPUs drawing the same power read
/// as a swing of ~6e-14 W; one window alone is stored as its sample). The step's tail after its last window
/// is stored at the wrap's power (the wrap stands for head and tail, PowerTrace), so each step's samples
/// tile the step and integrate to its energy whatever the stride (a wrap that is all tail, head_s = 0, was
/// merged into the first sample with no length and its energy lost).
void append_trace_samples(std::vector<store::Sample>& samples, const PowerTrace& trace, std::int32_t rank,
                          std::int32_t metric, double start_s, std::size_t stride) {
  double begin_s = 0;
  for (std::size_t first = 0; first < trace.sample_w.size(); first += stride) {
    const std::size_t last = std::min(trace.sample_w.size(), first + stride) - 1;
    double energy_j = 0;
    double window_begin_s = begin_s;
    for (std::size_t window = first; window <= last; ++window) {
      const double end_s = window_end_s(trace, window);
      energy_j += trace.sample_w[window] * (end_s - window_begin_s);
      window_begin_s = end_s;
    }
    const double length_s = window_begin_s - begin_s;
    if (length_s <= 1e-12) continue;  // a wrap that is all tail: stored with the tail, below
    const float mean_w = first == last ? trace.sample_w[last] : static_cast<float>(energy_j / length_s);
    samples.push_back({rank, metric, to_ns(start_s + window_begin_s), mean_w, store::kNoSensorTime});
    begin_s = window_begin_s;
  }
  if (begin_s < trace.duration_s - 1e-9) {
    samples.push_back(
        {rank, metric, to_ns(start_s + trace.duration_s), trace.sample_w.front(), store::kNoSensorTime});
  }
}

/// Ids of the per-GPU metrics of a sim run.
struct MetricIds {
  std::int32_t power = 0;    ///< power_avg_w: mean power over the step
  std::int32_t sampled = 0;  ///< power_sampled_w: the power trace's samples
  std::int32_t temp = 0;     ///< temp_gpu_c: die temperature at the step's end
  std::int32_t clock = 0;    ///< clock_sm_mhz: SM clock of the step
  std::int32_t energy = 0;   ///< energy_j: energy counter from 0 at t = 0
};

/// Registers the per-GPU metrics, in the order of MetricIds.
MetricIds register_metrics(store::RunWriter& writer) {
  MetricIds ids;
  ids.power = writer.metric_id("power_avg_w", "W", store::MetricKind::kGauge);
  ids.sampled = writer.metric_id("power_sampled_w", "W", store::MetricKind::kGauge);
  ids.temp = writer.metric_id("temp_gpu_c", "C", store::MetricKind::kGauge);
  ids.clock = writer.metric_id("clock_sm_mhz", "MHz", store::MetricKind::kGauge);
  ids.energy = writer.metric_id("energy_j", "J", store::MetricKind::kCounter);
  return ids;
}

/// Appends the span of step `step`, from `start_s` for `iteration_s`.
void append_step_span(store::RunWriter& writer, const SimResult& result, int step, double start_s,
                      double iteration_s) {
  store::Span span;
  span.kind = store::SpanKind::kStep;
  span.name = step < result.warmup_steps ? "warmup" : "step";
  span.t_begin_ns = to_ns(start_s);
  span.t_end_ns = to_ns(start_s + iteration_s);
  span.step = step;
  writer.append_span(span);
}

/// Appends GPU `rank`'s samples of step `step` (from `start_s` to `end_s`) to `samples`: the power trace's
/// samples when chosen (merged by choice.trace_stride), then mean power, die temperature, clock and the
/// energy counter at the step's end
/// (`energy_so_far_j` grows by the step's energy).
void append_gpu_step_samples(std::vector<store::Sample>& samples, const SimResult& result,
                             const MetricIds& ids, const SampleChoice& choice, int step, int rank,
                             double start_s, double end_s, double& energy_so_far_j) {
  const std::size_t index = static_cast<std::size_t>(step) * result.world + rank;
  const PowerTrace& trace = *result.power_traces[result.trace_of[index]];
  energy_so_far_j += trace.energy_j;
  if (choice.power_traces)
    append_trace_samples(samples, trace, rank, ids.sampled, start_s, choice.trace_stride);
  const std::int64_t t_ns = to_ns(end_s);
  samples.push_back({rank, ids.power, t_ns, result.power_w[index], store::kNoSensorTime});
  samples.push_back({rank, ids.temp, t_ns, result.die_c[index], store::kNoSensorTime});
  samples.push_back({rank, ids.clock, t_ns, result.clock_mhz[index], store::kNoSensorTime});
  samples.push_back({rank, ids.energy, t_ns, energy_so_far_j, store::kNoSensorTime});
}

/// Step spans and, per step, one sample per GPU at the step's end (mean power, die temperature, clock), the
/// energy counter from 0 at t = 0, and the power trace's samples (power_sampled_w) that tile each step, so
/// the stored energy is exactly the integral of the stored power. Returns the last step's end (s).
double write_steps(store::RunWriter& writer, const SimResult& result, long long max_gpu_samples) {
  const int world = result.world;
  const SampleChoice choice = choose_samples(result, max_gpu_samples);
  const MetricIds ids = register_metrics(writer);
  std::vector<double> energy_so_far_j(world, 0.0);
  std::vector<store::Sample> samples;
  if (choice.per_gpu) {
    for (int rank = 0; rank < world; ++rank)
      samples.push_back({rank, ids.energy, 0, 0.0, store::kNoSensorTime});
    writer.append(samples);
  }
  double t_s = 0;
  for (int step = 0; step < result.steps; ++step) {
    const double iteration_s = result.step_results[step].iteration_s;
    append_step_span(writer, result, step, t_s, iteration_s);
    const double step_start_s = t_s;
    t_s += iteration_s;
    if (!choice.per_gpu) continue;
    samples.clear();
    for (int rank = 0; rank < world; ++rank) {
      append_gpu_step_samples(samples, result, ids, choice, step, rank, step_start_s, t_s,
                              energy_so_far_j[rank]);
    }
    writer.append(samples);
  }
  return t_s;
}

/// Op spans of the last step (the result's timeline), offset to that step's start `last_start_s`.
void append_op_spans(store::RunWriter& writer, const graph::Graph& graph, const SimResult& result,
                     double last_start_s) {
  for (int rank = 0; rank < result.world && rank < static_cast<int>(result.timeline.size()); ++rank) {
    const auto& program = graph.program(rank);
    for (const OpSpan& op_span : result.timeline[rank]) {
      const graph::Op& op = program.ops[op_span.op];
      store::Span span;
      span.rank = rank;
      span.device_idx = rank;
      span.kind = store::SpanKind::kOp;
      span.name = graph::describe(op);
      span.category = graph::to_string(op.stream);
      span.t_begin_ns = to_ns(last_start_s + op_span.begin_s);
      span.t_end_ns = to_ns(last_start_s + op_span.end_s);
      span.step = result.steps - 1;
      span.microbatch = op.microbatch >= 0 ? op.microbatch : store::kNone;
      span.stage = program.stage;
      writer.append_span(span);
    }
  }
}

/// Adds one summary figure.
void add_figure(store::RunWriter& writer, const std::string& scope, const std::string& key, double value,
                const std::string& unit) {
  writer.add_summary({scope, key, value, unit});
}

/// Summary figures of scope "run".
void add_run_summary(store::RunWriter& writer, const SimResult& result) {
  const nlohmann::json summary = to_json(result, false);
  add_figure(writer, "run", "iteration_s", result.iteration_s, "s");
  add_figure(writer, "run", "tokens_per_s", tokens_per_s(result), "tokens/s");
  add_figure(writer, "run", "model_tflops_per_gpu", model_flops_per_gpu(result) / 1e12, "TFLOP/s");
  add_figure(writer, "run", "mfu", mfu(result), "fraction");
  add_figure(writer, "run", "energy_per_step_j", summary["energy_per_step_j"].get<double>(), "J");
  add_figure(writer, "run", "mean_power_w", summary["mean_power_w"].get<double>(), "W");
  add_figure(writer, "run", "peak_power_w", summary["peak_power_w"].get<double>(), "W");
  add_figure(writer, "run", "power_swing_100ms_w", summary["power_swing_100ms_w"].get<double>(), "W");
  add_figure(writer, "run", "max_die_c", summary["max_die_c"].get<double>(), "C");
  add_figure(writer, "run", "throttle_power_cap_s", summary["throttle_power_cap_s"].get<double>(), "s");
  add_figure(writer, "run", "throttle_sw_thermal_s", summary["throttle_thermal_s"].get<double>(), "s");
  add_figure(writer, "run", "compute_busy_s", result.compute_busy_s, "s");
  add_figure(writer, "run", "wait_s", result.wait_s, "s");
  for (int klass = 0; klass < kNumCommClasses; ++klass) {
    add_figure(writer, "run", std::string("exposed_comm_") + comm_class_name(klass) + "_s",
               result.exposed_comm_s[klass], "s");
  }
}

/// Summary figures of scope "gpuN", one set per GPU.
void add_gpu_summaries(store::RunWriter& writer, const SimResult& result) {
  for (const GpuResult& gpu : result.gpus) {
    const std::string scope = "gpu" + std::to_string(gpu.rank);
    add_figure(writer, scope, "mean_power_w", gpu.mean_power_w, "W");
    add_figure(writer, scope, "peak_power_w", gpu.peak_power_w, "W");
    add_figure(writer, scope, "max_die_c", gpu.max_die_c, "C");
    add_figure(writer, scope, "throttle_power_cap_s", gpu.throttle_power_cap_s, "s");
    add_figure(writer, scope, "throttle_sw_thermal_s", gpu.throttle_thermal_s, "s");
    add_figure(writer, scope, "energy_j", gpu.energy_j, "J");
  }
}

}  // namespace

void store_sim_run(const std::filesystem::path& run_dir, const std::string& name, const std::string& command,
                   const nlohmann::json& config, const graph::Graph& graph, const ClusterSpec& cluster,
                   const SimResult& result, long long max_gpu_samples) {
  const store::RunInfo info = sim_run_info(name, command, config, cluster, result);
  store::RunWriter writer(run_dir, info);
  add_devices(writer, cluster, result);
  const double end_s = write_steps(writer, result, max_gpu_samples);
  if (!result.timeline.empty()) {
    append_op_spans(writer, graph, result, end_s - result.step_results.back().iteration_s);
  }
  // Summary figures (per GPU only up to 4096 GPUs).
  add_run_summary(writer, result);
  if (result.world <= 4096) add_gpu_summaries(writer, result);
  writer.finish(info.started_ns + to_ns(end_s));
}

}  // namespace calo::sim
