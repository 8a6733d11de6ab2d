// `calo bench` engine: per-rank execution, gathering to rank 0, run store, summary.
#include "exec/bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/table.h"
#include "core/time.h"
#include "exec/backend.h"
#include "exec/bench_telemetry.h"
#include "exec/bootstrap.h"
#include "exec/executor.h"
#include "exec/mpi_env.h"
#include "exec/plan.h"
#include "graph/graph.h"
#include "model/accounting.h"
#include "store/run_store.h"
#include "store/summary.h"

namespace calo::exec {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string host_name() {
  char buffer[256] = {};
  gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

/// Linear-interpolation percentile (q in [0, 1]) of unsorted values; NaN when empty.
double percentile(std::vector<double> values, double q) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto lower = static_cast<size_t>(std::floor(position));
  const size_t upper = std::min(values.size() - 1, lower + 1);
  return values[lower] + (position - static_cast<double>(lower)) * (values[upper] - values[lower]);
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return kNaN;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

nlohmann::json json_number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
}

std::string format_or_na(double value, const std::string& pattern) {
  return std::isfinite(value) ? fmt::format(fmt::runtime(pattern), value) : std::string("n/a");
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  if (seconds < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  if (seconds < 1.0) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.3f} s", seconds);
}

/// What each rank sends to the others at the end (msgpack of JSON).
nlohmann::json rank_json(int rank, const std::vector<StepTiming>& steps, const Executor& executor,
                         const Backend& backend, std::int64_t wall_at_monotonic_zero_ns) {
  nlohmann::json data;
  data["rank"] = rank;
  data["host"] = host_name();
  data["wall_at_monotonic_zero_ns"] = wall_at_monotonic_zero_ns;  // this host's clock relation, not the run's
  nlohmann::json step_list = nlohmann::json::array();
  nlohmann::json op_list = nlohmann::json::array();
  for (const StepTiming& step : steps) {
    step_list.push_back({step.begin_ns, step.end_ns});
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTiming& op : step.ops) ops.push_back({op.op_index, op.begin_ns, op.end_ns});
    op_list.push_back(std::move(ops));
  }
  data["steps"] = std::move(step_list);
  data["ops"] = std::move(op_list);
  const OpCounts executed = backend.executed_op_counts();
  const OpCounts expected = executor.ops_per_step();
  data["executed"] = std::vector<std::int64_t>(executed.begin(), executed.end());
  data["expected_per_step"] = std::vector<std::int64_t>(expected.begin(), expected.end());
  data["cross_stream_waits"] = executor.cross_stream_waits();
  const CheckReport check = backend.check_report();
  data["check"] = {{"ops_checked", check.ops_checked},
                   {"values_checked", check.values_checked},
                   {"wrong", check.wrong},
                   {"first_failures", check.first_failures}};
  const DeviceDescription& device = backend.device();
  data["device"] = {{"backend", device.backend},
                    {"name", device.name},
                    {"local_index", device.local_index},
                    {"memory_bytes", device.memory_bytes},
                    {"peak_flops", device.peak_flops},
                    {"peak_flops_source", device.peak_flops_source},
                    {"gemm_dtype", device.gemm_dtype},
                    {"pci_bus", device.pci_bus},
                    {"attention_impl", device.attention_impl}};
  data["allocated_bytes"] = backend.allocated_bytes();
  return data;
}

/// Short span name of an op: kind plus what distinguishes it.
std::string op_span_name(const graph::Op& op) {
  switch (op.kind) {
    case graph::OpKind::kGemm:
      return fmt::format("gemm.{}.{}", graph::to_string(op.gemm.weight), graph::to_string(op.gemm.pass));
    case graph::OpKind::kAttention:
      return op.attention.backward ? "attention.bwd" : "attention.fwd";
    case graph::OpKind::kElementwise:
      return fmt::format("elementwise.{}", graph::to_string(op.elementwise));
    case graph::OpKind::kCollective:
      return fmt::format("{}.{}", graph::to_string(op.collective), graph::to_string(op.group));
    default:
      return graph::to_string(op.kind);
  }
}

/// Energy counter delta of a device over [begin, end) (run time base); NaN when the device has no counter.
double energy_delta_j(const store::RunReader& reader, std::int32_t device_idx, const std::string& metric,
                      std::int64_t begin_ns, std::int64_t end_ns) {
  const auto info = reader.find_metric(metric);
  if (!info) return kNaN;
  const auto samples = reader.samples(device_idx, info->id);
  if (samples.size() < 2) return kNaN;
  return store::counter_value_at(samples, end_ns) - store::counter_value_at(samples, begin_ns);
}

}  // namespace

void plan_before_launch(const BenchOptions& options, int nproc) {
  const BackendFactory& factory = BackendRegistry::instance().select(options.backend);
  if (factory.device_count) {
    const int devices = factory.device_count();
    if (devices > 0 && nproc > devices) {
      throw InputError(
          fmt::format("--nproc {}: this host has {} {} device(s); use --nproc {} or fewer (and a layout "
                      "of that many ranks)",
                      nproc, devices, factory.name, devices));
    }
  }
  if (!factory.describe) return;
  const DeviceDescription device = factory.describe(0, nproc);
  require_fits(plan_memory(options.model, options.layout, device), options.model, options.layout, device);
}

BenchOutcome run_bench_rank(const BenchOptions& options, LaunchInfo launch) {
  mpi_init_if_launched(launch);
  const int world = options.layout.world_size();
  if (launch.world_size != world) {
    throw InputError(
        fmt::format("layout {} needs {} ranks but the job has {}; give --nproc {} (or matching "
                    "--tp/--pp/--dp)",
                    parallel::describe(options.layout), world, launch.world_size, world));
  }
  const int rank = launch.rank;
  const bool leader = rank == 0;
  require_input(options.steps >= 1, fmt::format("--steps {}: give at least 1 measured step", options.steps));
  require_input(options.warmup >= 0,
                fmt::format("--warmup {}: give 0 or more warm-up steps", options.warmup));

  const BackendFactory& factory = BackendRegistry::instance().select(options.backend);
  BackendConfig config;
  config.rank = rank;
  config.world_size = launch.world_size;
  config.local_rank = launch.local_rank;
  config.local_world_size = launch.local_world_size;
  config.check = options.check;
  config.seed = options.seed;
  std::unique_ptr<Backend> backend = factory.create(config);
  const DeviceDescription device = backend->device();
  require_fits(plan_memory(options.model, options.layout, device), options.model, options.layout, device);

  const graph::Graph graph = graph::build_graph(options.model, options.layout);
  std::unique_ptr<Bootstrap> bootstrap = make_bootstrap(launch);
  backend->connect(graph, rank, *bootstrap);
  ExecutorOptions executor_options;
  executor_options.trace_ops = options.trace_ops;
  Executor executor(*backend, graph, rank, executor_options);
  executor.prepare();

  // Run store and telemetry on rank 0, started before the first step so warm-up is recorded too.
  const std::string run_name = fmt::format("bench-{}", options.model.name);
  std::filesystem::path run_dir;
  std::unique_ptr<store::RunWriter> writer;
  std::unique_ptr<BenchTelemetry> telemetry;
  store::RunInfo info;
  if (leader) {
    run_dir = options.out_dir.empty() ? store::make_run_dir("runs", run_name) : options.out_dir;
    info.kind = store::RunKind::kBench;
    info.name = run_name;
    info.command = options.command_line;
    info.host = host_name();
    const core::TimeOrigin origin = core::time_origin_now();
    info.started_ns = origin.monotonic_ns;
    info.wall_offset_ns = origin.wall_ns;  // wall-clock time at t_ns = 0 (docs/RUN_STORE.md)
    nlohmann::json config_json;
    config_json["model"] = model::to_json(options.model);
    config_json["full_model_layers"] = options.full_model_layers;
    config_json["layout"] = parallel::to_json(options.layout);
    config_json["backend"] = device.backend;
    config_json["steps"] = options.steps;
    config_json["warmup"] = options.warmup;
    config_json["check"] = options.check;
    config_json["trace_ops"] = options.trace_ops;
    config_json["launcher"] = launch.launcher;
    config_json["bootstrap"] = bootstrap->kind();
    info.config_json = config_json.dump();
    writer = std::make_unique<store::RunWriter>(run_dir, info);
    telemetry = std::make_unique<BenchTelemetry>(*writer, info.started_ns);
    telemetry->start();
  }
  bootstrap->barrier();

  const int total_steps = options.warmup + options.steps;
  std::vector<StepTiming> steps;
  steps.reserve(static_cast<size_t>(total_steps));
  const bool show_progress = leader && options.progress && isatty(STDERR_FILENO) != 0;
  for (int step = 0; step < total_steps; ++step) {
    steps.push_back(executor.run_step(*bootstrap));
    if (show_progress) {
      fmt::print(stderr, "\rcalo bench: step {}/{}{} {}   ", step + 1, total_steps,
                 step < options.warmup ? " (warm-up)" : "",
                 format_duration(static_cast<double>(steps.back().duration_ns()) / 1e9));
    }
  }
  if (show_progress) fmt::print(stderr, "\n");
  if (telemetry) telemetry->stop();

  // Everyone gets everyone's timings, counts and checks (so every rank decides the same exit code).
  const nlohmann::json mine =
      rank_json(rank, steps, executor, *backend, core::wall_ns() - core::monotonic_ns());
  const std::vector<std::uint8_t> packed = nlohmann::json::to_msgpack(mine);
  const auto gathered = bootstrap->all_gather(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(packed.data()), packed.size()));
  std::vector<nlohmann::json> ranks;
  for (const auto& blob : gathered) {
    ranks.push_back(nlohmann::json::from_msgpack(
        std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(blob.data()),
                                  reinterpret_cast<const std::uint8_t*>(blob.data()) + blob.size())));
  }

  // Op counts: each rank executed exactly its graph's ops, total_steps times.
  std::vector<std::string> count_problems;
  for (const auto& data : ranks) {
    const auto executed = data["executed"].get<std::vector<std::int64_t>>();
    const auto expected = data["expected_per_step"].get<std::vector<std::int64_t>>();
    const auto program_counts = count_ops(graph::materialize(graph, data["rank"].get<int>()));
    for (size_t kind = 0; kind < executed.size(); ++kind) {
      const std::int64_t want = program_counts[kind] * total_steps;
      if (executed[kind] != want || expected[kind] != program_counts[kind]) {
        count_problems.push_back(fmt::format(
            "rank {}: {} {} ops executed, the graph has {} x {} steps = {}", data["rank"].get<int>(),
            executed[kind], op_count_name(static_cast<int>(kind)), program_counts[kind], total_steps, want));
      }
    }
  }
  std::int64_t wrong = 0;
  std::int64_t values_checked = 0;
  std::int64_t ops_checked = 0;
  std::vector<std::string> failures;
  for (const auto& data : ranks) {
    wrong += data["check"]["wrong"].get<std::int64_t>();
    values_checked += data["check"]["values_checked"].get<std::int64_t>();
    ops_checked += data["check"]["ops_checked"].get<std::int64_t>();
    for (const auto& failure : data["check"]["first_failures"]) {
      if (failures.size() < 10)
        failures.push_back(fmt::format("rank {}: {}", data["rank"].get<int>(), failure.get<std::string>()));
    }
  }

  // Step times on rank 0's clock: job step = earliest begin to latest end over ranks.
  const std::string leader_host = ranks[0]["host"].get<std::string>();
  // Step times are raw CLOCK_MONOTONIC; across hosts they are moved by the difference of wall - monotonic.
  const std::int64_t leader_offset = ranks[0]["wall_at_monotonic_zero_ns"].get<std::int64_t>();
  auto to_leader_clock = [&](const nlohmann::json& data, std::int64_t t_ns) {
    return data["host"].get<std::string>() == leader_host
               ? t_ns
               : t_ns + data["wall_at_monotonic_zero_ns"].get<std::int64_t>() - leader_offset;
  };
  std::vector<std::int64_t> step_begin(static_cast<size_t>(total_steps),
                                       std::numeric_limits<std::int64_t>::max());
  std::vector<std::int64_t> step_end(static_cast<size_t>(total_steps),
                                     std::numeric_limits<std::int64_t>::min());
  for (const auto& data : ranks) {
    for (int step = 0; step < total_steps; ++step) {
      const auto& pair = data["steps"][static_cast<size_t>(step)];
      step_begin[static_cast<size_t>(step)] =
          std::min(step_begin[static_cast<size_t>(step)], to_leader_clock(data, pair[0].get<std::int64_t>()));
      step_end[static_cast<size_t>(step)] =
          std::max(step_end[static_cast<size_t>(step)], to_leader_clock(data, pair[1].get<std::int64_t>()));
    }
  }
  std::vector<double> measured_s;
  std::vector<double> warmup_s;
  for (int step = 0; step < total_steps; ++step) {
    const double seconds =
        static_cast<double>(step_end[static_cast<size_t>(step)] - step_begin[static_cast<size_t>(step)]) /
        1e9;
    (step < options.warmup ? warmup_s : measured_s).push_back(seconds);
  }

  const int seq = options.layout.seq_length;
  const double tokens_per_step = static_cast<double>(options.layout.global_batch) * seq;
  const double model_flops_per_step = model::flops_per_token(options.model, seq).total() * tokens_per_step;
  double graph_flops_per_step = 0;
  for (int each = 0; each < world; ++each) {
    for (const graph::Op& op : graph.program(each).ops) graph_flops_per_step += op.flops;
  }
  double peak_flops_sum = 0;
  for (const auto& data : ranks) peak_flops_sum += data["device"]["peak_flops"].get<double>();
  const double peak_flops = peak_flops_sum / static_cast<double>(ranks.size());
  const double step_mean_s = mean(measured_s);
  const double tflops_per_device = model_flops_per_step / world / step_mean_s / 1e12;
  const double mfu = peak_flops > 0 ? model_flops_per_step / world / step_mean_s / peak_flops : kNaN;

  nlohmann::json report;
  report["model"] = options.model.name;
  report["model_layers"] = options.model.num_layers;
  report["full_model_layers"] = options.full_model_layers;
  report["slice"] = options.model.num_layers != options.full_model_layers;
  report["layout"] = parallel::describe(options.layout);
  report["ranks"] = world;
  report["launcher"] = launch.launcher;
  report["bootstrap"] = bootstrap->kind();
  report["backend"] = device.backend;
  report["device"] = ranks[0]["device"];
  report["steps"] = options.steps;
  report["warmup_steps"] = options.warmup;
  report["step_time_s"] = {
      {"mean", json_number(step_mean_s)},
      {"p50", json_number(percentile(measured_s, 0.5))},
      {"p99", json_number(percentile(measured_s, 0.99))},
      {"min",
       json_number(measured_s.empty() ? kNaN : *std::min_element(measured_s.begin(), measured_s.end()))},
      {"max",
       json_number(measured_s.empty() ? kNaN : *std::max_element(measured_s.begin(), measured_s.end()))},
      {"all", measured_s}};
  report["warmup_step_time_s"] = {{"mean", json_number(mean(warmup_s))}, {"all", warmup_s}};
  report["tokens_per_step"] = tokens_per_step;
  report["tokens_per_s"] = json_number(tokens_per_step / step_mean_s);
  report["model_flops_per_step"] = model_flops_per_step;
  report["executed_flops_per_step"] = graph_flops_per_step;
  report["tflops_per_device"] = json_number(tflops_per_device);
  report["peak_flops_per_device"] = json_number(peak_flops);
  report["mfu"] = json_number(mfu);
  report["op_counts_match"] = count_problems.empty();
  report["op_count_problems"] = count_problems;
  report["ops_per_step_rank0"] = ranks[0]["expected_per_step"];
  report["cross_stream_waits_rank0"] = ranks[0]["cross_stream_waits"];
  report["check"] = {{"enabled", options.check},
                     {"ops_checked", ops_checked},
                     {"values_checked", values_checked},
                     {"wrong", wrong},
                     {"failures", failures}};

  BenchOutcome outcome;
  outcome.exit_code = (wrong > 0 || !count_problems.empty()) ? 1 : 0;
  if (!leader) {
    outcome.report = std::move(report);
    return outcome;
  }

  // Spans: a job step span per step, per-rank step spans, per-op spans (trace).
  const std::int64_t zero = info.started_ns;
  for (int step = 0; step < total_steps; ++step) {
    store::Span span;
    span.kind = store::SpanKind::kStep;
    span.name = step < options.warmup ? "warmup" : "step";
    span.category = "bench";
    span.t_begin_ns = step_begin[static_cast<size_t>(step)] - zero;
    span.t_end_ns = step_end[static_cast<size_t>(step)] - zero;
    span.step = step;
    writer->append_span(span);
  }
  for (const auto& data : ranks) {
    const int span_rank = data["rank"].get<int>();
    const auto program =
        options.trace_ops ? graph::materialize(graph, span_rank) : std::vector<graph::RankOp>{};
    const int stage = graph.program(span_rank).stage;
    for (int step = 0; step < total_steps; ++step) {
      const auto& pair = data["steps"][static_cast<size_t>(step)];
      store::Span span;
      span.rank = span_rank;
      span.kind = store::SpanKind::kStep;
      span.name = step < options.warmup ? "warmup" : "step";
      span.category = "rank";
      span.t_begin_ns = to_leader_clock(data, pair[0].get<std::int64_t>()) - zero;
      span.t_end_ns = to_leader_clock(data, pair[1].get<std::int64_t>()) - zero;
      span.step = step;
      span.stage = stage;
      writer->append_span(span);
      if (!options.trace_ops) continue;
      for (const auto& op_timing : data["ops"][static_cast<size_t>(step)]) {
        const auto& op = program[op_timing[0].get<size_t>()].op;
        store::Span op_span;
        op_span.rank = span_rank;
        op_span.kind = store::SpanKind::kOp;
        op_span.name = op_span_name(op);
        op_span.category = graph::to_string(op.stream);
        op_span.t_begin_ns = to_leader_clock(data, op_timing[1].get<std::int64_t>()) - zero;
        op_span.t_end_ns =
            std::max(op_span.t_begin_ns, to_leader_clock(data, op_timing[2].get<std::int64_t>()) - zero);
        op_span.step = step;
        op_span.microbatch = op.microbatch;
        op_span.stage = stage;
        writer->append_span(op_span);
      }
    }
  }
  writer->flush();

  // Telemetry over the measured steps: devices this node's ranks ran on.
  const std::int64_t measured_begin = step_begin[static_cast<size_t>(options.warmup)] - zero;
  const std::int64_t measured_end = step_end.back() - zero;
  double energy_j = 0;
  bool energy_known = false;
  double mean_power_sum_w = 0;
  int power_devices = 0;
  double peak_power_w = kNaN;
  double peak_temp_c = kNaN;
  double throttle[4] = {0, 0, 0, 0};
  nlohmann::json device_rows = nlohmann::json::array();
  {
    store::RunReader reader(run_dir);
    std::vector<int> local_slots;
    for (const auto& data : ranks) {
      if (data["host"].get<std::string>() == leader_host)
        local_slots.push_back(data["device"]["local_index"].get<int>());
    }
    for (const RecordedDevice& recorded : telemetry->devices()) {
      const bool used = device.backend == "cpu"
                            ? recorded.kind == "cpu"
                            : recorded.kind == "gpu" && std::find(local_slots.begin(), local_slots.end(),
                                                                  recorded.slot) != local_slots.end();
      if (!used) continue;
      const store::IntervalSummary interval =
          store::summarize_interval(reader, recorded.device_idx, measured_begin, measured_end, "measured");
      double device_energy = interval.energy_j;
      if (recorded.kind == "cpu")
        device_energy =
            energy_delta_j(reader, recorded.device_idx, "cpu_energy_j", measured_begin, measured_end);
      const double duration_s = static_cast<double>(measured_end - measured_begin) / 1e9;
      const double device_power = std::isfinite(device_energy) ? device_energy / duration_s : kNaN;
      if (std::isfinite(device_energy)) {
        energy_j += device_energy;
        energy_known = true;
        mean_power_sum_w += device_power;
        ++power_devices;
      }
      const double device_peak_w = interval.peak_power_w();
      if (std::isfinite(device_peak_w) && device_peak_w > 0)
        peak_power_w = std::isfinite(peak_power_w) ? std::max(peak_power_w, device_peak_w) : device_peak_w;
      if (std::isfinite(interval.temp_gpu_max_c) && interval.temp_gpu_max_c > 0)
        peak_temp_c = std::isfinite(peak_temp_c) ? std::max(peak_temp_c, interval.temp_gpu_max_c)
                                                 : interval.temp_gpu_max_c;
      const double reasons[4] = {interval.throttle_power_cap_s, interval.throttle_sw_thermal_s,
                                 interval.throttle_hw_thermal_s, interval.throttle_power_brake_s};
      for (int reason = 0; reason < 4; ++reason)
        if (std::isfinite(reasons[reason])) throttle[reason] += reasons[reason];
      device_rows.push_back({{"device_idx", recorded.device_idx},
                             {"kind", recorded.kind},
                             {"slot", recorded.slot},
                             {"name", recorded.name},
                             {"energy_j", json_number(device_energy)},
                             {"mean_power_w", json_number(device_power)},
                             {"peak_power_w", json_number(interval.peak_power_w())},
                             {"peak_power_instant_w", json_number(interval.peak_power_instant_w)},
                             {"peak_power_sampled_w", json_number(interval.peak_power_sampled_w)},
                             {"peak_temp_c", json_number(interval.temp_gpu_max_c)},
                             {"samples", interval.sample_count}});
    }
  }
  const double energy_total = energy_known ? energy_j : kNaN;
  const double energy_per_step = energy_total / options.steps;
  const double energy_per_token = energy_per_step / tokens_per_step;
  const double mean_power_w = power_devices > 0 ? mean_power_sum_w / power_devices : kNaN;
  report["run_dir"] = run_dir.string();
  report["telemetry"] = {{"devices", device_rows},
                         {"notes", telemetry->notes()},
                         {"energy_j", json_number(energy_total)},
                         {"energy_per_step_j", json_number(energy_per_step)},
                         {"energy_per_token_j", json_number(energy_per_token)},
                         {"mean_power_per_device_w", json_number(mean_power_w)},
                         {"peak_power_w", json_number(peak_power_w)},
                         {"peak_temp_c", json_number(peak_temp_c)},
                         {"throttle_power_cap_s", throttle[0]},
                         {"throttle_sw_thermal_s", throttle[1]},
                         {"throttle_hw_thermal_s", throttle[2]},
                         {"throttle_power_brake_s", throttle[3]}};

  auto summary = [&](const std::string& key, double value, const std::string& unit) {
    if (std::isfinite(value)) writer->add_summary({"bench", key, value, unit});
  };
  summary("step_time_mean_s", step_mean_s, "s");
  summary("step_time_p50_s", percentile(measured_s, 0.5), "s");
  summary("step_time_p99_s", percentile(measured_s, 0.99), "s");
  summary("warmup_step_time_mean_s", mean(warmup_s), "s");
  summary("tokens_per_s", tokens_per_step / step_mean_s, "tokens/s");
  summary("tflops_per_device", tflops_per_device, "TFLOP/s");
  summary("mfu", mfu, "fraction");
  summary("energy_per_step_j", energy_per_step, "J");
  summary("energy_per_token_j", energy_per_token, "J");
  summary("mean_power_per_device_w", mean_power_w, "W");
  summary("peak_power_w", peak_power_w, "W");
  summary("peak_temp_c", peak_temp_c, "C");
  summary("throttle_power_cap_s", throttle[0], "s");
  summary("throttle_sw_thermal_s", throttle[1], "s");
  summary("throttle_hw_thermal_s", throttle[2], "s");
  summary("throttle_power_brake_s", throttle[3], "s");
  summary("wrong", static_cast<double>(wrong), "count");
  summary("op_counts_match", count_problems.empty() ? 1.0 : 0.0, "bool");
  const std::int64_t ended_ns = core::monotonic_ns();
  writer->finish(ended_ns);

  // Text summary.
  std::string text;
  text += fmt::format("# calo bench: model {}{}\n", options.model.name,
                      options.model.num_layers != options.full_model_layers
                          ? fmt::format(" (SLICE: {} of {} layers, same layer shapes)",
                                        options.model.num_layers, options.full_model_layers)
                          : std::string());
  text += fmt::format("# layout {}, {} ranks ({}, bootstrap {}), {} tokens/step\n",
                      parallel::describe(options.layout), world, launch.launcher, bootstrap->kind(),
                      tokens_per_step);
  text += fmt::format("# backend {}: {} ({} GEMMs, peak {:.3f} TFLOP/s per device: {})\n", device.backend,
                      device.name, device.gemm_dtype, peak_flops / 1e12, device.peak_flops_source);
  const std::string attention_impl = ranks[0]["device"].value("attention_impl", std::string());
  if (!attention_impl.empty()) text += fmt::format("# attention: {} (rank 0)\n", attention_impl);
  text += fmt::format("# steps: {} measured after {} warm-up; run store {}\n", options.steps, options.warmup,
                      run_dir.string());
  for (const auto& note : telemetry->notes()) text += fmt::format("# note: {}\n", note);
  core::TextTable table({"metric", "value"});
  table.add_row({"step time mean", format_duration(step_mean_s)});
  table.add_row({"step time p50", format_duration(percentile(measured_s, 0.5))});
  table.add_row({"step time p99", format_duration(percentile(measured_s, 0.99))});
  table.add_row({"warm-up step time mean", format_duration(mean(warmup_s))});
  table.add_row({"tokens/s", format_or_na(tokens_per_step / step_mean_s, "{:.1f}")});
  table.add_row({"TFLOP/s per device (model)", format_or_na(tflops_per_device, "{:.4f}")});
  table.add_row({"MFU", format_or_na(mfu * 100, "{:.2f} %")});
  table.add_row({"energy per step", format_or_na(energy_per_step, "{:.3f} J")});
  table.add_row({"energy per token", format_or_na(energy_per_token * 1e3, "{:.4f} mJ")});
  table.add_row({"mean power per device", format_or_na(mean_power_w, "{:.1f} W")});
  table.add_row({"peak power", format_or_na(peak_power_w, "{:.1f} W")});
  table.add_row({"peak temperature", format_or_na(peak_temp_c, "{:.1f} C")});
  table.add_row(
      {"throttle power cap / sw thermal", fmt::format("{:.3f} s / {:.3f} s", throttle[0], throttle[1])});
  table.add_row(
      {"throttle hw thermal / power brake", fmt::format("{:.3f} s / {:.3f} s", throttle[2], throttle[3])});
  text += table.render();
  std::string per_kind;
  for (int kind = 0; kind < graph::kNumOpKinds; ++kind) {
    per_kind += fmt::format("{}{} {}", kind == 0 ? "" : ", ",
                            ranks[0]["expected_per_step"][static_cast<size_t>(kind)].get<std::int64_t>(),
                            op_count_name(kind));
  }
  text += fmt::format("ops per step on rank 0: {}\n", per_kind);
  text += count_problems.empty()
              ? fmt::format("op counts: every rank executed exactly its graph's ops ({} steps x {} ranks)\n",
                            total_steps, world)
              : fmt::format("op counts WRONG: {}\n", fmt::join(count_problems, "; "));
  if (options.check) {
    text += fmt::format("check: {} ops, {} values verified\n", ops_checked, values_checked);
    for (const auto& failure : failures) text += fmt::format("  wrong: {}\n", failure);
  }
  text += fmt::format("#wrong: {}{}\n",
                      options.check ? std::to_string(wrong) : std::string("n/a (run with --check)"),
                      outcome.exit_code != 0 ? "  FAILED" : "");
  outcome.report = std::move(report);
  outcome.text = std::move(text);
  outcome.run_dir = run_dir;
  return outcome;
}

}  // namespace calo::exec
