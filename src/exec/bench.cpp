// `calo bench` engine: per-rank execution, gathering to rank 0, run store, summary.
#include "exec/bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "core/config.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "core/statistics.h"
#include "core/table.h"
#include "core/time.h"
#include "exec/backend.h"
#include "exec/bench_bounds.h"
#include "exec/bench_memory.h"
#include "exec/bench_stages.h"
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

CALO_JSON_FIELDS(CheckReport, ops_checked, values_checked, wrong, first_failures)
CALO_JSON_FIELDS(DeviceDescription, backend, name, uuid, pci_bus, local_index, memory_bytes, peak_flops,
                 peak_flops_source, gemm_dtype, attention_impl)

namespace {

using core::json_number;

/// Refuses a layout the backend cannot run (context parallel on a backend without the ring; FP8 linears on a
/// backend without FP8 GEMMs, and rowwise scaling, which no backend runs yet: calo sim models it).
void require_backend_supports(const BackendFactory& factory, const parallel::Layout& layout) {
  require_input(layout.cp == 1 || factory.context_parallel,
                fmt::format("--cp {}: the {} backend does not run context parallelism (its K/V ring is not "
                            "built); use --backend cpu, or model the layout with calo sim",
                            layout.cp, factory.name));
  require_input(
      !layout.fp8() || factory.fp8_linears,
      fmt::format("--precision {}: the {} backend runs the linears in bf16 only; use --backend cuda on "
                  "an H100/H200, --precision bf16, or model FP8 with calo sim",
                  parallel::to_string(layout.precision), factory.name));
  require_input(
      layout.precision != parallel::Precision::kFp8Rowwise,
      fmt::format("--precision fp8-rowwise: the {} backend runs tensorwise-scaled FP8 GEMMs only (fp8, "
                  "fp8-delayed); model rowwise scaling with calo sim",
                  factory.name));
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string host_name() {
  char buffer[256] = {};
  gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return kNaN;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

std::string format_or_na(double value, const std::string& pattern) {
  return std::isfinite(value) ? fmt::format(fmt::runtime(pattern), value) : std::string("n/a");
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
  data["check"] = backend.check_report();
  data["device"] = backend.device();
  data["allocated_bytes"] = backend.allocated_bytes();
  return data;
}

/// Where each rank ran under a stage -> GPU order, as the ranks reported it: "# stage -> GPU order: rank 0 on
/// device 1 (PCI 0000:19:00.0), ...".
std::string placement_line(const std::vector<nlohmann::json>& ranks) {
  std::vector<std::string> placed;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const nlohmann::json& device = ranks[rank]["device"];
    const std::string bus = device.value("pci_bus", std::string());
    placed.push_back(fmt::format("rank {} on device {}{}", rank, device.value("local_index", -1),
                                 bus.empty() ? "" : " (PCI " + bus + ")"));
  }
  return fmt::format("# stage -> GPU order: {}\n", fmt::join(placed, ", "));
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

// ---- Stages of run_bench_rank(), in the order it calls them. ----

void validate_job(const BenchOptions& options, const LaunchInfo& launch) {
  const int world = options.layout.world_size();
  if (launch.world_size != world) {
    throw InputError(
        fmt::format("layout {} needs {} ranks but the job has {}; give --nproc {} (or matching "
                    "--tp/--pp/--dp)",
                    parallel::describe(options.layout), world, launch.world_size, world));
  }
  check_bench_steps(options);
}

// This rank's backend (memory plan checked), graph, bootstrap and prepared executor.
struct RankSetup {
  std::unique_ptr<Backend> backend;
  DeviceDescription device;
  std::unique_ptr<const graph::Graph> graph;  // on the heap: backend and executor keep references to it
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Executor> executor;
};

// The local device slot this rank runs on: its own local rank, or under a stage -> GPU order the slot of the
// GPU its stage moved to, which must be on this host.
int device_slot(const parallel::Layout& layout, const LaunchInfo& launch) {
  const int slot = launch.local_rank + layout.gpu_of_rank(launch.rank) - launch.rank;
  require_input(slot >= 0 && slot < launch.local_world_size,
                fmt::format("--stage-gpus {}: rank {} would run on the GPU of rank {}, which is not on this "
                            "host ({} ranks here); move stages only among the GPUs of one host",
                            fmt::join(layout.stage_gpus, ","), launch.rank, layout.gpu_of_rank(launch.rank),
                            launch.local_world_size));
  return slot;
}

RankSetup set_up_rank(const BenchOptions& options, const LaunchInfo& launch) {
  const BackendFactory& factory = BackendRegistry::instance().select(options.backend);
  require_backend_supports(factory, options.layout);
  BackendConfig config;
  config.rank = launch.rank;
  config.world_size = launch.world_size;
  config.local_rank = device_slot(options.layout, launch);
  config.local_world_size = launch.local_world_size;
  config.check = options.check;
  config.seed = options.seed;
  config.notice = options.notice;
  RankSetup setup;
  setup.backend = factory.create(config);
  setup.device = setup.backend->device();
  require_fits(plan_memory(options.model, options.layout, setup.device), options.model, options.layout,
               setup.device);
  setup.graph = std::make_unique<const graph::Graph>(graph::build_graph(options.model, options.layout));
  check_operands_fit(factory, *setup.graph, {launch.rank}, setup.device);  // before prepare allocates them
  setup.bootstrap = make_bootstrap(launch);
  setup.backend->connect(*setup.graph, launch.rank, *setup.bootstrap);
  ExecutorOptions executor_options;
  executor_options.trace_ops = options.trace_ops;
  setup.executor = std::make_unique<Executor>(*setup.backend, *setup.graph, launch.rank, executor_options);
  if (options.memory_real) {
    setup.executor->use_memory_ledger(build_memory_ledger(
        setup.executor->ops(), options.model, options.layout, setup.graph->program(launch.rank).stage));
  }
  setup.executor->prepare();
  return setup;
}

// The GPUs the job's ranks on this host run on (CUDA: each local rank's device, by UUID, so CUDA's numbering
// and CUDA_VISIBLE_DEVICES need no translation); none for a backend that uses no GPU.
telemetry::GpuScope job_gpus(const BenchOptions& options, const LaunchInfo& launch, const RankSetup& setup) {
  telemetry::GpuScope scope;
  scope.every_gpu = false;
  scope.origin = fmt::format("the {} backend's ranks", setup.device.backend);
  const BackendFactory& factory = BackendRegistry::instance().select(options.backend);
  if (setup.device.backend != "cuda" || !factory.describe) return scope;
  const int own_slot = device_slot(options.layout, launch);
  for (int local_rank = 0; local_rank < launch.local_world_size; ++local_rank) {
    const std::string uuid = local_rank == own_slot
                                 ? setup.device.uuid
                                 : factory.describe(local_rank, launch.local_world_size).uuid;
    if (!uuid.empty() && std::find(scope.entries.begin(), scope.entries.end(), uuid) == scope.entries.end())
      scope.entries.push_back(uuid);
  }
  if (scope.entries.empty()) return telemetry::GpuScope{};  // the devices have no UUID: record every GPU
  return scope;
}

// Rank 0's run store and telemetry, started before the first step so warm-up is recorded too.
struct BenchStore {
  std::filesystem::path run_dir;
  store::RunInfo info;
  std::unique_ptr<store::RunWriter> writer;
  std::unique_ptr<BenchTelemetry> telemetry;
};

BenchStore open_bench_store(const BenchOptions& options, const LaunchInfo& launch, const RankSetup& setup) {
  BenchStore bench_store;
  const std::string run_name = fmt::format("bench-{}", options.model.name);
  bench_store.run_dir = options.out_dir.empty() ? store::make_run_dir("runs", run_name) : options.out_dir;
  store::RunInfo& info = bench_store.info;
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
  config_json["backend"] = setup.device.backend;
  config_json["steps"] = options.steps;
  config_json["warmup"] = options.warmup;
  config_json["check"] = options.check;
  config_json["trace_ops"] = options.trace_ops;
  config_json["memory"] = options.memory_real ? "real" : "model";
  config_json["launcher"] = launch.launcher;
  config_json["bootstrap"] = setup.bootstrap->kind();
  info.config_json = config_json.dump();
  bench_store.writer = std::make_unique<store::RunWriter>(bench_store.run_dir, info);
  bench_store.telemetry = std::make_unique<BenchTelemetry>(*bench_store.writer, info.started_ns,
                                                           job_gpus(options, launch, setup));
  bench_store.telemetry->start();
  return bench_store;
}

// Warm-up + measured steps; rank 0 reports each finished step to options.on_step.
std::vector<StepTiming> run_steps(const BenchOptions& options, RankSetup& setup, bool leader) {
  const int total_steps = options.warmup + options.steps;
  std::vector<StepTiming> steps;
  steps.reserve(static_cast<size_t>(total_steps));
  const bool report_steps = leader && options.on_step;
  for (int step = 0; step < total_steps; ++step) {
    steps.push_back(setup.executor->run_step(*setup.bootstrap));
    if (report_steps) {
      options.on_step(
          {step, total_steps, step < options.warmup, static_cast<double>(steps.back().duration_ns()) / 1e9});
    }
  }
  return steps;
}

// Everyone gets everyone's timings, counts and checks (so every rank decides the same exit code).
std::vector<nlohmann::json> gather_ranks(const BenchOptions& options, int rank,
                                         const std::vector<StepTiming>& steps, RankSetup& setup) {
  nlohmann::json mine =
      rank_json(rank, steps, *setup.executor, *setup.backend, core::wall_ns() - core::monotonic_ns());
  if (options.memory_real) {
    mine["memory_real"] = rank_memory_json(*setup.backend, *setup.executor, options.model, options.layout,
                                           setup.graph->program(rank).stage);
  }
  const std::vector<std::uint8_t> packed = nlohmann::json::to_msgpack(mine);
  const auto gathered = setup.bootstrap->all_gather(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(packed.data()), packed.size()));
  std::vector<nlohmann::json> ranks;
  for (const auto& blob : gathered) {
    ranks.push_back(nlohmann::json::from_msgpack(
        std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(blob.data()),
                                  reinterpret_cast<const std::uint8_t*>(blob.data()) + blob.size())));
  }
  return ranks;
}

}  // namespace

std::string format_step_time(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  if (seconds < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  if (seconds < 1.0) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.3f} s", seconds);
}

Verification verify_ranks(const std::vector<nlohmann::json>& ranks, const graph::Graph& graph,
                          int total_steps) {
  Verification verification;
  for (const auto& data : ranks) {
    const auto executed = data["executed"].get<std::vector<std::int64_t>>();
    const auto expected = data["expected_per_step"].get<std::vector<std::int64_t>>();
    const auto program_counts = count_ops(graph::materialize(graph, data["rank"].get<int>()));
    for (size_t kind = 0; kind < executed.size(); ++kind) {
      const std::int64_t want = program_counts[kind] * total_steps;
      if (executed[kind] != want || expected[kind] != program_counts[kind]) {
        verification.count_problems.push_back(fmt::format(
            "rank {}: {} {} ops executed, the graph has {} x {} steps = {}", data["rank"].get<int>(),
            executed[kind], op_count_name(static_cast<int>(kind)), program_counts[kind], total_steps, want));
      }
    }
  }
  for (const auto& data : ranks) {
    verification.wrong += data["check"]["wrong"].get<std::int64_t>();
    verification.values_checked += data["check"]["values_checked"].get<std::int64_t>();
    verification.ops_checked += data["check"]["ops_checked"].get<std::int64_t>();
    for (const auto& failure : data["check"]["first_failures"]) {
      if (verification.failures.size() < 10) {
        verification.failures.push_back(
            fmt::format("rank {}: {}", data["rank"].get<int>(), failure.get<std::string>()));
      }
    }
  }
  return verification;
}

JobSteps job_steps(const std::vector<nlohmann::json>& ranks, const LeaderClock& to_leader_clock, int warmup,
                   int total_steps) {
  JobSteps job;
  job.begin_ns.assign(static_cast<size_t>(total_steps), std::numeric_limits<std::int64_t>::max());
  job.end_ns.assign(static_cast<size_t>(total_steps), std::numeric_limits<std::int64_t>::min());
  for (const auto& data : ranks) {
    for (int step = 0; step < total_steps; ++step) {
      const auto& pair = data["steps"][static_cast<size_t>(step)];
      job.begin_ns[static_cast<size_t>(step)] = std::min(job.begin_ns[static_cast<size_t>(step)],
                                                         to_leader_clock(data, pair[0].get<std::int64_t>()));
      job.end_ns[static_cast<size_t>(step)] =
          std::max(job.end_ns[static_cast<size_t>(step)], to_leader_clock(data, pair[1].get<std::int64_t>()));
    }
  }
  for (int step = 0; step < total_steps; ++step) {
    const double seconds =
        static_cast<double>(job.end_ns[static_cast<size_t>(step)] - job.begin_ns[static_cast<size_t>(step)]) /
        1e9;
    (step < warmup ? job.warmup_s : job.measured_s).push_back(seconds);
  }
  return job;
}

namespace {

// Tokens, FLOPs and MFU of the measured steps (docs/METRICS.md, Execution).
struct Throughput {
  double tokens_per_step = 0;
  double samples_per_step = 0;  // the global batch
  double ranks = 0;             // the ranks the FLOPs are shared by
  double model_flops_per_step = 0;
  double graph_flops_per_step = 0;
  double peak_flops = 0;  // mean over ranks
  double step_mean_s = 0;
  double tflops_per_device = 0;
  double mfu = 0;
};

Throughput throughput_of(const BenchOptions& options, const graph::Graph& graph,
                         const std::vector<nlohmann::json>& ranks, const JobSteps& job) {
  const int world = options.layout.world_size();
  const int seq = options.layout.seq_length;
  Throughput figures;
  figures.tokens_per_step = static_cast<double>(options.layout.global_batch) * seq;
  figures.samples_per_step = options.layout.global_batch;
  figures.ranks = world;
  figures.model_flops_per_step = model::flops_per_token(options.model, seq).total() * figures.tokens_per_step;
  for (int each = 0; each < world; ++each) {
    for (const graph::Op& op : graph.program(each).ops) figures.graph_flops_per_step += op.flops;
  }
  double peak_flops_sum = 0;
  for (const auto& data : ranks) peak_flops_sum += data["device"]["peak_flops"].get<double>();
  figures.peak_flops = peak_flops_sum / static_cast<double>(ranks.size());
  figures.step_mean_s = mean(job.measured_s);
  figures.tflops_per_device = figures.model_flops_per_step / world / figures.step_mean_s / 1e12;
  figures.mfu = figures.peak_flops > 0
                    ? figures.model_flops_per_step / world / figures.step_mean_s / figures.peak_flops
                    : kNaN;
  return figures;
}

// The JSON report every rank returns (telemetry added on rank 0).
nlohmann::json bench_report(const BenchOptions& options, const LaunchInfo& launch, const RankSetup& setup,
                            const std::vector<nlohmann::json>& ranks, const Verification& verification,
                            const JobSteps& job, const Throughput& figures) {
  const std::vector<double>& measured_s = job.measured_s;
  nlohmann::json report;
  report["model"] = options.model.name;
  report["model_layers"] = options.model.num_layers;
  report["full_model_layers"] = options.full_model_layers;
  report["slice"] = options.model.num_layers != options.full_model_layers;
  report["layout"] = parallel::describe(options.layout);
  report["ranks"] = options.layout.world_size();
  report["launcher"] = launch.launcher;
  report["bootstrap"] = setup.bootstrap->kind();
  report["backend"] = setup.device.backend;
  report["device"] = ranks[0]["device"];
  report["rank_devices"] =
      nlohmann::json::array();  // the local device each rank ran on (--stage-gpus moves them)
  for (const auto& data : ranks) report["rank_devices"].push_back(data["device"].value("local_index", -1));
  report["steps"] = options.steps;
  report["warmup_steps"] = options.warmup;
  report["step_time_s"] = {
      {"mean", json_number(figures.step_mean_s)},
      {"p50", json_number(core::percentile(measured_s, 0.5))},
      {"p99", json_number(core::percentile(measured_s, 0.99))},
      {"min",
       json_number(measured_s.empty() ? kNaN : *std::min_element(measured_s.begin(), measured_s.end()))},
      {"max",
       json_number(measured_s.empty() ? kNaN : *std::max_element(measured_s.begin(), measured_s.end()))},
      {"all", measured_s}};
  report["warmup_step_time_s"] = {{"mean", json_number(mean(job.warmup_s))}, {"all", job.warmup_s}};
  report["tokens_per_step"] = figures.tokens_per_step;
  report["tokens_per_s"] = json_number(figures.tokens_per_step / figures.step_mean_s);
  report["model_flops_per_step"] = figures.model_flops_per_step;
  report["executed_flops_per_step"] = figures.graph_flops_per_step;
  report["tflops_per_device"] = json_number(figures.tflops_per_device);
  report["peak_flops_per_device"] = json_number(figures.peak_flops);
  report["mfu"] = json_number(figures.mfu);
  report["op_counts_match"] = verification.count_problems.empty();
  report["op_count_problems"] = verification.count_problems;
  report["ops_per_step_rank0"] = ranks[0]["expected_per_step"];
  report["cross_stream_waits_rank0"] = ranks[0]["cross_stream_waits"];
  report["check"] = {{"enabled", options.check},
                     {"ops_checked", verification.ops_checked},
                     {"values_checked", verification.values_checked},
                     {"wrong", verification.wrong},
                     {"failures", verification.failures}};
  return report;
}

// Spans: a job step span per step, per-rank step spans, per-op spans (--trace-ops).
void write_step_spans(store::RunWriter& writer, const BenchOptions& options, const graph::Graph& graph,
                      const std::vector<nlohmann::json>& ranks, const LeaderClock& to_leader_clock,
                      const JobSteps& job, std::int64_t zero_ns) {
  const int total_steps = options.warmup + options.steps;
  for (int step = 0; step < total_steps; ++step) {
    store::Span span;
    span.kind = store::SpanKind::kStep;
    span.name = step < options.warmup ? "warmup" : "step";
    span.category = "bench";
    span.t_begin_ns = job.begin_ns[static_cast<size_t>(step)] - zero_ns;
    span.t_end_ns = job.end_ns[static_cast<size_t>(step)] - zero_ns;
    span.step = step;
    writer.append_span(span);
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
      span.t_begin_ns = to_leader_clock(data, pair[0].get<std::int64_t>()) - zero_ns;
      span.t_end_ns = to_leader_clock(data, pair[1].get<std::int64_t>()) - zero_ns;
      span.step = step;
      span.stage = stage;
      writer.append_span(span);
      if (!options.trace_ops) continue;
      for (const auto& op_timing : data["ops"][static_cast<size_t>(step)]) {
        const auto& op = program[op_timing[0].get<size_t>()].op;
        store::Span op_span;
        op_span.rank = span_rank;
        op_span.kind = store::SpanKind::kOp;
        op_span.name = graph::span_name(op);
        op_span.category = graph::to_string(op.stream);
        op_span.t_begin_ns = to_leader_clock(data, op_timing[1].get<std::int64_t>()) - zero_ns;
        op_span.t_end_ns =
            std::max(op_span.t_begin_ns, to_leader_clock(data, op_timing[2].get<std::int64_t>()) - zero_ns);
        op_span.step = step;
        op_span.microbatch = op.microbatch;
        op_span.stage = stage;
        writer.append_span(op_span);
      }
    }
  }
  writer.flush();
}

// Telemetry over the measured steps, summed over the devices this node's ranks ran on.
struct TelemetryFigures {
  double energy_total_j = kNaN;
  double energy_per_step_j = kNaN;
  double energy_per_token_j = kNaN;
  double mean_power_w = kNaN;
  double peak_power_w = kNaN;
  double peak_temp_c = kNaN;
  double throttle_s[4] = {0, 0, 0, 0};  // power cap, sw thermal, hw thermal, power brake
  nlohmann::json device_rows = nlohmann::json::array();
};

TelemetryFigures summarize_telemetry(const BenchOptions& options, const BenchStore& bench_store,
                                     const std::string& backend_name, const JobSteps& job,
                                     double tokens_per_step) {
  const std::int64_t zero = bench_store.info.started_ns;
  const std::int64_t measured_begin = job.begin_ns[static_cast<size_t>(options.warmup)] - zero;
  const std::int64_t measured_end = job.end_ns.back() - zero;
  TelemetryFigures figures;
  double energy_j = 0;
  bool energy_known = false;
  double mean_power_sum_w = 0;
  int power_devices = 0;
  store::RunReader reader(bench_store.run_dir);
  // The telemetry records only the GPUs of this host's ranks (job_gpus, by UUID): each is used. Matching
  // CUDA's device index against NVML's instead left a job under CUDA_VISIBLE_DEVICES=1 with no GPU (issue 40
  // item 6).
  for (const RecordedDevice& recorded : bench_store.telemetry->devices()) {
    const bool used = backend_name == "cpu" ? recorded.kind == "cpu" : recorded.kind == "gpu";
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
      figures.peak_power_w =
          std::isfinite(figures.peak_power_w) ? std::max(figures.peak_power_w, device_peak_w) : device_peak_w;
    if (std::isfinite(interval.temp_gpu_max_c) && interval.temp_gpu_max_c > 0)
      figures.peak_temp_c = std::isfinite(figures.peak_temp_c)
                                ? std::max(figures.peak_temp_c, interval.temp_gpu_max_c)
                                : interval.temp_gpu_max_c;
    const double reasons[4] = {interval.throttle_power_cap_s, interval.throttle_sw_thermal_s,
                               interval.throttle_hw_thermal_s, interval.throttle_power_brake_s};
    for (int reason = 0; reason < 4; ++reason)
      if (std::isfinite(reasons[reason])) figures.throttle_s[reason] += reasons[reason];
    figures.device_rows.push_back({{"device_idx", recorded.device_idx},
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
  figures.energy_total_j = energy_known ? energy_j : kNaN;
  figures.energy_per_step_j = figures.energy_total_j / options.steps;
  figures.energy_per_token_j = figures.energy_per_step_j / tokens_per_step;
  figures.mean_power_w = power_devices > 0 ? mean_power_sum_w / power_devices : kNaN;
  return figures;
}

nlohmann::json telemetry_json(const TelemetryFigures& figures, const BenchTelemetry& telemetry) {
  return {{"devices", figures.device_rows},
          {"notes", telemetry.notes()},
          {"energy_j", json_number(figures.energy_total_j)},
          {"energy_per_step_j", json_number(figures.energy_per_step_j)},
          {"energy_per_token_j", json_number(figures.energy_per_token_j)},
          {"mean_power_per_device_w", json_number(figures.mean_power_w)},
          {"peak_power_w", json_number(figures.peak_power_w)},
          {"peak_temp_c", json_number(figures.peak_temp_c)},
          {"throttle_power_cap_s", figures.throttle_s[0]},
          {"throttle_sw_thermal_s", figures.throttle_s[1]},
          {"throttle_hw_thermal_s", figures.throttle_s[2]},
          {"throttle_power_brake_s", figures.throttle_s[3]}};
}

// Summary rows of scope "bench" (finite figures only).
void write_bench_summary(store::RunWriter& writer, const JobSteps& job, const Throughput& throughput,
                         const TelemetryFigures& telemetry, const Verification& verification) {
  auto summary = [&](const std::string& key, double value, const std::string& unit) {
    if (std::isfinite(value)) writer.add_summary({"bench", key, value, unit});
  };
  summary("step_time_mean_s", throughput.step_mean_s, "s");
  summary("step_time_p50_s", core::percentile(job.measured_s, 0.5), "s");
  summary("step_time_p99_s", core::percentile(job.measured_s, 0.99), "s");
  summary("warmup_step_time_mean_s", mean(job.warmup_s), "s");
  summary("tokens_per_s", throughput.tokens_per_step / throughput.step_mean_s, "tokens/s");
  summary("tflops_per_device", throughput.tflops_per_device, "TFLOP/s");
  summary("mfu", throughput.mfu, "fraction");
  summary("energy_per_step_j", telemetry.energy_per_step_j, "J");
  // The workload, as scope "run" rows analysis reads (analyze::read_workload): without them a bench run's
  // report and `calo compare` showed no tokens/s, MFU or energy per token.
  auto workload = [&](const std::string& key, double value, const std::string& unit) {
    if (std::isfinite(value) && value > 0) writer.add_summary({"run", key, value, unit});
  };
  workload("tokens_per_step", throughput.tokens_per_step, "tokens");
  workload("samples_per_step", throughput.samples_per_step, "samples");
  workload("model_flops_per_step", throughput.model_flops_per_step, "FLOP");
  workload("hardware_flops_per_step", throughput.graph_flops_per_step, "FLOP");
  workload("peak_flops_per_gpu", throughput.peak_flops, "FLOP/s");
  workload("ranks", throughput.ranks, "ranks");
  summary("energy_per_token_j", telemetry.energy_per_token_j, "J");
  summary("mean_power_per_device_w", telemetry.mean_power_w, "W");
  summary("peak_power_w", telemetry.peak_power_w, "W");
  summary("peak_temp_c", telemetry.peak_temp_c, "C");
  summary("throttle_power_cap_s", telemetry.throttle_s[0], "s");
  summary("throttle_sw_thermal_s", telemetry.throttle_s[1], "s");
  summary("throttle_hw_thermal_s", telemetry.throttle_s[2], "s");
  summary("throttle_power_brake_s", telemetry.throttle_s[3], "s");
  summary("wrong", static_cast<double>(verification.wrong), "count");
  summary("op_counts_match", verification.count_problems.empty() ? 1.0 : 0.0, "bool");
}

// The human summary (nccl-tests style: # header, table, op counts, #wrong footer).
std::string format_bench_text(const BenchOptions& options, const LaunchInfo& launch, const RankSetup& setup,
                              const std::vector<nlohmann::json>& ranks, const BenchStore& bench_store,
                              const JobSteps& job, const Throughput& throughput,
                              const TelemetryFigures& telemetry, const Verification& verification,
                              int exit_code, const std::string& memory_lines) {
  const DeviceDescription& device = setup.device;
  const int world = options.layout.world_size();
  const int total_steps = options.warmup + options.steps;
  const double step_mean_s = throughput.step_mean_s;
  const double* throttle = telemetry.throttle_s;
  std::string text;
  text += fmt::format("# calo bench: model {}{}\n", options.model.name,
                      options.model.num_layers != options.full_model_layers
                          ? fmt::format(" (SLICE: {} of {} layers, same layer shapes)",
                                        options.model.num_layers, options.full_model_layers)
                          : std::string());
  text += fmt::format("# layout {}, {} ranks ({}, bootstrap {}), {} tokens/step\n",
                      parallel::describe(options.layout), world, launch.launcher, setup.bootstrap->kind(),
                      throughput.tokens_per_step);
  text += fmt::format("# backend {}: {} ({} GEMMs, peak {:.3f} TFLOP/s per device: {})\n", device.backend,
                      device.name, device.gemm_dtype, throughput.peak_flops / 1e12, device.peak_flops_source);
  if (!options.layout.stage_gpus.empty()) text += placement_line(ranks);
  const std::string attention_impl = ranks[0]["device"].value("attention_impl", std::string());
  if (!attention_impl.empty()) text += fmt::format("# attention: {} (rank 0)\n", attention_impl);
  text += fmt::format("# steps: {} measured after {} warm-up; run store {}\n", options.steps, options.warmup,
                      bench_store.run_dir.string());
  for (const auto& note : bench_store.telemetry->notes()) text += fmt::format("# note: {}\n", note);
  core::TextTable table({"metric", "value"});
  table.add_row({"step time mean", format_step_time(step_mean_s)});
  table.add_row({"step time p50", format_step_time(core::percentile(job.measured_s, 0.5))});
  table.add_row({"step time p99", format_step_time(core::percentile(job.measured_s, 0.99))});
  table.add_row({"warm-up step time mean", format_step_time(mean(job.warmup_s))});
  table.add_row({"tokens/s", format_or_na(throughput.tokens_per_step / step_mean_s, "{:.1f}")});
  table.add_row({"TFLOP/s per device (model)", format_or_na(throughput.tflops_per_device, "{:.4f}")});
  table.add_row({"MFU", format_or_na(throughput.mfu * 100, "{:.2f} %")});
  table.add_row({"energy per step", format_or_na(telemetry.energy_per_step_j, "{:.3f} J")});
  table.add_row({"energy per token", format_or_na(telemetry.energy_per_token_j * 1e3, "{:.4f} mJ")});
  table.add_row({"mean power per device", format_or_na(telemetry.mean_power_w, "{:.1f} W")});
  table.add_row({"peak power", format_or_na(telemetry.peak_power_w, "{:.1f} W")});
  table.add_row({"peak temperature", format_or_na(telemetry.peak_temp_c, "{:.1f} C")});
  table.add_row(
      {"throttle power cap / sw thermal", fmt::format("{:.3f} s / {:.3f} s", throttle[0], throttle[1])});
  table.add_row(
      {"throttle hw thermal / power brake", fmt::format("{:.3f} s / {:.3f} s", throttle[2], throttle[3])});
  text += table.render();
  text += memory_lines;
  std::string per_kind;
  for (int kind = 0; kind < graph::kNumOpKinds; ++kind) {
    per_kind += fmt::format("{}{} {}", kind == 0 ? "" : ", ",
                            ranks[0]["expected_per_step"][static_cast<size_t>(kind)].get<std::int64_t>(),
                            op_count_name(kind));
  }
  text += fmt::format("ops per step on rank 0: {}\n", per_kind);
  text += verification.count_problems.empty()
              ? fmt::format("op counts: every rank executed exactly its graph's ops ({} steps x {} ranks)\n",
                            total_steps, world)
              : fmt::format("op counts WRONG: {}\n", fmt::join(verification.count_problems, "; "));
  if (options.check) {
    text += fmt::format("check: {} ops, {} values verified\n", verification.ops_checked,
                        verification.values_checked);
    for (const auto& failure : verification.failures) text += fmt::format("  wrong: {}\n", failure);
  }
  text +=
      fmt::format("#wrong: {}{}\n",
                  options.check ? std::to_string(verification.wrong) : std::string("n/a (run with --check)"),
                  exit_code != 0 ? "  FAILED" : "");
  return text;
}

}  // namespace

void plan_before_launch(const BenchOptions& options, int nproc) {
  check_bench_steps(options);
  if (!options.out_dir.empty()) store::require_no_run(options.out_dir);
  const BackendFactory& factory = BackendRegistry::instance().select(options.backend);
  require_backend_supports(factory, options.layout);
  if (factory.name == "cpu") check_cpu_ranks(options, nproc, options.oversubscribe);
  if (factory.device_count) {
    const int devices = factory.device_count();
    if (devices > 0 && nproc > devices) {
      throw InputError(
          fmt::format("--nproc {}: this host has {} {} device(s); use --nproc {} or fewer (and a layout "
                      "of that many ranks)",
                      nproc, devices, factory.name, devices));
    }
  }
  if (options.memory_real) parallel::holdings_for_stage(options.model, options.layout, 0);  // refusals first
  if (!factory.describe) return;
  const DeviceDescription device = factory.describe(0, nproc);
  require_fits(plan_memory(options.model, options.layout, device), options.model, options.layout, device);
  check_launch_operands(factory, options, nproc);
}

// Stages: validate job -> set up rank (backend, graph, bootstrap, executor) -> open store + telemetry (rank
// 0)
// -> run steps -> gather ranks -> verify -> job step times -> throughput -> report; rank 0 then writes spans,
// summarizes telemetry, writes summary rows and formats the text.
BenchOutcome run_bench_rank(const BenchOptions& options, LaunchInfo launch) {
  mpi_init_if_launched(launch);
  validate_job(options, launch);
  const bool leader = launch.rank == 0;
  RankSetup setup = set_up_rank(options, launch);
  std::optional<BenchStore> bench_store;
  if (leader) bench_store = open_bench_store(options, launch, setup);
  setup.bootstrap->barrier();

  const std::vector<StepTiming> steps = run_steps(options, setup, leader);
  if (bench_store) bench_store->telemetry->stop();
  const std::vector<nlohmann::json> ranks = gather_ranks(options, launch.rank, steps, setup);
  const int total_steps = options.warmup + options.steps;
  const Verification verification = verify_ranks(ranks, *setup.graph, total_steps);
  const LeaderClock to_leader_clock(ranks);
  const JobSteps job = job_steps(ranks, to_leader_clock, options.warmup, total_steps);
  const Throughput throughput = throughput_of(options, *setup.graph, ranks, job);

  BenchOutcome outcome;
  outcome.report = bench_report(options, launch, setup, ranks, verification, job, throughput);
  if (options.memory_real) outcome.report["memory_real"] = memory_real_report(ranks);
  outcome.exit_code = (verification.wrong > 0 || !verification.count_problems.empty()) ? 1 : 0;
  if (!leader) return outcome;

  store::RunWriter& writer = *bench_store->writer;
  write_step_spans(writer, options, *setup.graph, ranks, to_leader_clock, job, bench_store->info.started_ns);
  const TelemetryFigures telemetry =
      summarize_telemetry(options, *bench_store, setup.device.backend, job, throughput.tokens_per_step);
  outcome.report["run_dir"] = bench_store->run_dir.string();
  outcome.report["telemetry"] = telemetry_json(telemetry, *bench_store->telemetry);
  write_bench_summary(writer, job, throughput, telemetry, verification);
  const std::string memory_lines =
      options.memory_real ? memory_real_text(outcome.report["memory_real"]) : std::string();
  if (options.memory_real) write_memory_summary(writer, outcome.report["memory_real"]);
  writer.finish(core::monotonic_ns());
  outcome.text = format_bench_text(options, launch, setup, ranks, *bench_store, job, throughput, telemetry,
                                   verification, outcome.exit_code, memory_lines);
  outcome.run_dir = bench_store->run_dir;
  return outcome;
}

}  // namespace calo::exec
