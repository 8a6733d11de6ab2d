#include "sim/store_run.h"

#include <cmath>

#include "core/time.h"
#include "store/run_store.h"

namespace calo::sim {

namespace {

std::int64_t to_ns(double seconds) {
  return static_cast<std::int64_t>(std::llround(seconds * 1e9));
}

}  // namespace

void store_sim_run(const std::filesystem::path& run_dir, const std::string& name, const std::string& command,
                   const nlohmann::json& config, const graph::Graph& graph, const ClusterSpec& cluster,
                   const SimResult& result, long long max_gpu_samples) {
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
  store::RunWriter writer(run_dir, info);
  const int world = result.world;
  for (int rank = 0; rank < world; ++rank) {
    store::DeviceInfo device;
    device.idx = rank;
    device.node = rank / cluster.node.gpus;
    device.slot = rank % cluster.node.gpus;
    device.name = cluster.gpu.name + " (simulated)";
    device.power_limit_w = result.gpus[rank].power_limit_w;
    device.max_sm_mhz = cluster.gpu.max_sm_mhz;
    writer.add_device(device);
  }
  // Step spans and, per step, one sample per GPU at the step's end (mean power, die temperature, clock), the
  // energy counter from 0 at t = 0, and the power trace's samples (power_sampled_w) that tile each step, so
  // the stored energy is exactly the integral of the stored power.
  const bool per_gpu_samples = static_cast<long long>(world) * result.steps <= max_gpu_samples;
  std::size_t trace_samples = 0;
  for (std::size_t index = 0; index < result.trace_of.size(); ++index) {
    trace_samples += result.power_traces[result.trace_of[index]]->sample_w.size();
  }
  const bool power_samples = per_gpu_samples && static_cast<long long>(trace_samples) <= 8 * max_gpu_samples;
  const std::int32_t power_id = writer.metric_id("power_avg_w", "W", store::MetricKind::kGauge);
  const std::int32_t sampled_id = writer.metric_id("power_sampled_w", "W", store::MetricKind::kGauge);
  const std::int32_t temp_id = writer.metric_id("temp_gpu_c", "C", store::MetricKind::kGauge);
  const std::int32_t clock_id = writer.metric_id("clock_sm_mhz", "MHz", store::MetricKind::kGauge);
  const std::int32_t energy_id = writer.metric_id("energy_j", "J", store::MetricKind::kCounter);
  std::vector<double> energy_so_far(world, 0.0);
  std::vector<store::Sample> samples;
  if (per_gpu_samples) {
    for (int rank = 0; rank < world; ++rank)
      samples.push_back({rank, energy_id, 0, 0.0, store::kNoSensorTime});
    writer.append(samples);
  }
  double t_s = 0;
  for (int step = 0; step < result.steps; ++step) {
    const StepResult& step_result = result.step_results[step];
    store::Span span;
    span.kind = store::SpanKind::kStep;
    span.name = step < result.warmup_steps ? "warmup" : "step";
    span.t_begin_ns = to_ns(t_s);
    span.t_end_ns = to_ns(t_s + step_result.iteration_s);
    span.step = step;
    writer.append_span(span);
    const double step_start_s = t_s;
    t_s += step_result.iteration_s;
    if (!per_gpu_samples) continue;
    samples.clear();
    for (int rank = 0; rank < world; ++rank) {
      const std::size_t index = static_cast<std::size_t>(step) * world + rank;
      const PowerTrace& trace = *result.power_traces[result.trace_of[index]];
      energy_so_far[rank] += trace.energy_j;
      if (power_samples) {
        for (std::size_t window = 0; window < trace.sample_w.size(); ++window) {
          samples.push_back({rank, sampled_id, to_ns(step_start_s + window_end_s(trace, window)),
                             trace.sample_w[window], store::kNoSensorTime});
        }
      }
      const std::int64_t t_ns = to_ns(t_s);
      samples.push_back({rank, power_id, t_ns, result.power_w[index], store::kNoSensorTime});
      samples.push_back({rank, temp_id, t_ns, result.die_c[index], store::kNoSensorTime});
      samples.push_back({rank, clock_id, t_ns, result.clock_mhz[index], store::kNoSensorTime});
      samples.push_back({rank, energy_id, t_ns, energy_so_far[rank], store::kNoSensorTime});
    }
    writer.append(samples);
  }
  // Op spans of the last step (timeline), offset to that step's start.
  if (!result.timeline.empty()) {
    const double last_start_s = t_s - result.step_results.back().iteration_s;
    for (int rank = 0; rank < world && rank < static_cast<int>(result.timeline.size()); ++rank) {
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
  // Summary figures (scope "run" and per GPU).
  const nlohmann::json summary = to_json(result, false);
  auto add = [&](const std::string& scope, const std::string& key, double value, const std::string& unit) {
    writer.add_summary({scope, key, value, unit});
  };
  add("run", "iteration_s", result.iteration_s, "s");
  add("run", "tokens_per_s", tokens_per_s(result), "tokens/s");
  add("run", "model_tflops_per_gpu", model_flops_per_gpu(result) / 1e12, "TFLOP/s");
  add("run", "mfu", mfu(result), "fraction");
  add("run", "energy_per_step_j", summary["energy_per_step_j"].get<double>(), "J");
  add("run", "mean_power_w", summary["mean_power_w"].get<double>(), "W");
  add("run", "peak_power_w", summary["peak_power_w"].get<double>(), "W");
  add("run", "power_swing_100ms_w", summary["power_swing_100ms_w"].get<double>(), "W");
  add("run", "max_die_c", summary["max_die_c"].get<double>(), "C");
  add("run", "throttle_power_cap_s", summary["throttle_power_cap_s"].get<double>(), "s");
  add("run", "throttle_sw_thermal_s", summary["throttle_thermal_s"].get<double>(), "s");
  add("run", "compute_busy_s", result.compute_busy_s, "s");
  add("run", "wait_s", result.wait_s, "s");
  for (int klass = 0; klass < kNumCommClasses; ++klass) {
    add("run", std::string("exposed_comm_") + comm_class_name(klass) + "_s", result.exposed_comm_s[klass],
        "s");
  }
  if (world <= 4096) {
    for (const GpuResult& gpu : result.gpus) {
      const std::string scope = "gpu" + std::to_string(gpu.rank);
      add(scope, "mean_power_w", gpu.mean_power_w, "W");
      add(scope, "peak_power_w", gpu.peak_power_w, "W");
      add(scope, "max_die_c", gpu.max_die_c, "C");
      add(scope, "throttle_power_cap_s", gpu.throttle_power_cap_s, "s");
      add(scope, "throttle_sw_thermal_s", gpu.throttle_thermal_s, "s");
      add(scope, "energy_j", gpu.energy_j, "J");
    }
  }
  writer.finish(info.started_ns + to_ns(t_s));
}

}  // namespace calo::sim
