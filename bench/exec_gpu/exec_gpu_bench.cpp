// The CUDA executor's ops against the same work run alone:
//  - every distinct GEMM shape of the rank's program: mean op time inside the executor (--trace-ops events)
//    vs the same cuBLASLt call (same GemmRunner, heuristic algorithm) in a back-to-back loop;
//  - every distinct collective (kind, group, bytes): mean op time and bus bandwidth inside the executor vs an
//    NCCL loop of the same collective and size on a fresh communicator of the same group (nccl-tests busbw);
//  - the step's forward+backward time (step minus the optimizer op) for the PyTorch eager comparison.
// Usage: exec_gpu_bench --model llama3-8b --layers 4 [--tp N --pp N --dp N --ep N --gbs N --seq N]
//        [--nproc N] [--steps N]
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/bootstrap.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/init.cuh"
#include "exec/executor.h"
#include "exec/launch.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace {

using namespace calo;

struct Options {
  std::string model = "llama3-8b";
  int layers = 4;
  parallel::Layout layout;
  int nproc = 1;
  int steps = 3;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int at = 1; at + 1 < argc; at += 2) {
    const std::string key = argv[at];
    const std::string value = argv[at + 1];
    if (key == "--model")
      options.model = value;
    else if (key == "--layers")
      options.layers = std::stoi(value);
    else if (key == "--tp")
      options.layout.tp = std::stoi(value);
    else if (key == "--pp")
      options.layout.pp = std::stoi(value);
    else if (key == "--dp")
      options.layout.dp = std::stoi(value);
    else if (key == "--ep")
      options.layout.ep = std::stoi(value);
    else if (key == "--gbs")
      options.layout.global_batch = std::stoi(value);
    else if (key == "--mbs")
      options.layout.micro_batch = std::stoi(value);
    else if (key == "--seq")
      options.layout.seq_length = std::stoi(value);
    else if (key == "--nproc")
      options.nproc = std::stoi(value);
    else if (key == "--steps")
      options.steps = std::stoi(value);
    else
      throw InputError(
          fmt::format("exec_gpu_bench: unknown option {} (see the header of exec_gpu_bench.cpp)", key));
  }
  return options;
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double value : values) sum += value;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

/// nccl-tests bus bandwidth factor for `members` ranks.
double bus_factor(graph::CollectiveKind kind, double members) {
  if (members <= 1) return 1.0;
  return kind == graph::CollectiveKind::kAllReduce ? 2.0 * (members - 1) / members : (members - 1) / members;
}

/// Mean time (ns) of `run` over `iterations` after `warmup`, with events on `stream`.
template <typename Run>
double time_loop(cudaStream_t stream, int warmup, int iterations, Run&& run) {
  for (int at = 0; at < warmup; ++at) run();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CALO_CUDA(cudaEventCreate(&start));
  CALO_CUDA(cudaEventCreate(&stop));
  CALO_CUDA(cudaEventRecord(start, stream));
  for (int at = 0; at < iterations; ++at) run();
  CALO_CUDA(cudaEventRecord(stop, stream));
  CALO_CUDA(cudaEventSynchronize(stop));
  float milliseconds = 0;
  CALO_CUDA(cudaEventElapsedTime(&milliseconds, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(milliseconds) * 1e6 / iterations;
}

int run_rank(const Options& options, const exec::LaunchInfo& launch) {
  model::ModelSpec spec = model::load_model(options.model);
  const int full_layers = spec.num_layers;
  if (options.layers > 0) spec.num_layers = std::min(options.layers, spec.num_layers);
  const parallel::Layout layout = parallel::resolve_layout(spec, options.layout);
  const graph::Graph graph = graph::build_graph(spec, layout);
  auto bootstrap = exec::make_bootstrap(launch);
  exec::BackendConfig config;
  config.rank = launch.rank;
  config.world_size = launch.world_size;
  config.local_rank = launch.local_rank;
  config.local_world_size = launch.local_world_size;
  auto backend = exec::BackendRegistry::instance().select("cuda").create(config);
  backend->connect(graph, launch.rank, *bootstrap);
  exec::ExecutorOptions executor_options;
  executor_options.trace_ops = true;
  exec::Executor executor(*backend, graph, launch.rank, executor_options);
  executor.prepare();
  executor.run_step(*bootstrap);  // warm-up (algorithm selection, NCCL connections)
  const auto& ops = executor.ops();
  std::vector<double> step_ns;
  std::vector<double> optimizer_ns;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>, std::vector<double>> gemm_ns;
  std::map<std::tuple<int, int, double>, std::vector<double>> collective_ns;
  for (int step = 0; step < options.steps; ++step) {
    const exec::StepTiming timing = executor.run_step(*bootstrap);
    step_ns.push_back(static_cast<double>(timing.duration_ns()));
    double optimizer = 0;
    for (const exec::OpTiming& op_timing : timing.ops) {
      const graph::Op& op = ops[static_cast<size_t>(op_timing.op_index)].op;
      const auto duration = static_cast<double>(op_timing.end_ns - op_timing.begin_ns);
      if (op.kind == graph::OpKind::kGemm)
        gemm_ns[{op.gemm.m, op.gemm.n, op.gemm.k, static_cast<int>(op.gemm.pass)}].push_back(duration);
      if (op.kind == graph::OpKind::kCollective)
        collective_ns[{static_cast<int>(op.collective), static_cast<int>(op.group), op.bytes}].push_back(
            duration);
      if (op.kind == graph::OpKind::kOptimizer) optimizer += duration;
    }
    optimizer_ns.push_back(optimizer);
  }
  const bool print = launch.rank == 0;
  if (print) {
    fmt::print(
        "# exec_gpu_bench: model {} ({} of {} layers), layout tp{} pp{} dp{} ep{}, gbs {}, mbs {}, seq {}\n",
        spec.name, spec.num_layers, full_layers, layout.tp, layout.pp, layout.dp, layout.ep,
        layout.global_batch, layout.micro_batch, layout.seq_length);
    fmt::print("# device: {} ({}), ranks {}, measured steps {}\n", backend->device().name,
               backend->device().peak_flops_source, launch.world_size, options.steps);
    fmt::print("step_ms {:.3f} optimizer_ms {:.3f} fwd_bwd_ms {:.3f}\n", mean(step_ns) / 1e6,
               mean(optimizer_ns) / 1e6, (mean(step_ns) - mean(optimizer_ns)) / 1e6);
  }

  // GEMMs: the same call alone (own GemmRunner and buffers, same heuristic algorithm).
  cudaStream_t stream = nullptr;
  CALO_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double exec_total = 0;
  double alone_total = 0;
  if (print)
    fmt::print("{:>6} {:>6} {:>6} {:>6} {:>5} {:>10} {:>10} {:>9} {:>9} {:>7}\n", "m", "n", "k", "pass",
               "count", "exec_us", "alone_us", "exec_TF", "alone_TF", "ratio%");
  {
    exec::cuda::GemmRunner runner;
    for (const auto& [key, durations] : gemm_ns) {
      const auto [m, n, k, pass] = key;
      graph::GemmShape shape;
      shape.m = m;
      shape.n = n;
      shape.k = k;
      shape.pass = static_cast<graph::GemmPass>(pass);
      void* a = nullptr;
      void* b = nullptr;
      void* c = nullptr;
      CALO_CUDA(cudaMalloc(&a, static_cast<size_t>(m * k) * 2));
      CALO_CUDA(cudaMalloc(&b, static_cast<size_t>(k * n) * 2));
      CALO_CUDA(cudaMalloc(&c, static_cast<size_t>(m * n) * 2));
      exec::cuda::fill_random_bf16(static_cast<exec::cuda::bf16*>(a), m * k, 11, 1.0f, stream);
      exec::cuda::fill_random_bf16(static_cast<exec::cuda::bf16*>(b), k * n, 12, 1.0f, stream);
      const exec::cuda::GemmCall call = exec::cuda::gemm_call_for(shape);
      const double alone = time_loop(stream, 3, 20, [&] { runner.run(call, a, b, c, stream); });
      cudaFree(a);
      cudaFree(b);
      cudaFree(c);
      const double inside = mean(durations);
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      exec_total += inside * static_cast<double>(durations.size());
      alone_total += alone * static_cast<double>(durations.size());
      if (print)
        fmt::print("{:>6} {:>6} {:>6} {:>6} {:>5} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f} {:>7.1f}\n", m, n, k,
                   graph::to_string(shape.pass), durations.size(), inside / 1e3, alone / 1e3,
                   flops / inside / 1e3, flops / alone / 1e3, 100.0 * alone / inside);
    }
  }
  if (print && exec_total > 0)
    fmt::print("gemm_throughput_vs_alone_pct {:.1f}  (time-weighted over all GEMM ops of one step)\n",
               100.0 * alone_total / exec_total);

  // Collectives: a fresh communicator per group kind (split of a fresh world), NCCL loop of the same size.
  if (!collective_ns.empty() || launch.world_size > 1) {
    std::vector<std::byte> mine;
    if (launch.rank == 0) {
      ncclUniqueId id{};
      CALO_NCCL(ncclGetUniqueId(&id));
      mine.resize(sizeof(id));
      std::memcpy(mine.data(), &id, sizeof(id));
    }
    const auto blobs = bootstrap->all_gather(mine);
    ncclUniqueId id{};
    std::memcpy(&id, blobs[0].data(), sizeof(id));
    ncclComm_t world = nullptr;
    CALO_NCCL(ncclCommInitRank(&world, launch.world_size, id, launch.rank));
    std::map<int, ncclComm_t> comms;
    for (int kind = 0; kind < graph::kNumGroupKinds; ++kind) {
      const int group_id = graph.group_id(launch.rank, static_cast<graph::GroupKind>(kind));
      ncclComm_t comm = nullptr;
      CALO_NCCL(
          ncclCommSplit(world, group_id >= 0 ? group_id : NCCL_SPLIT_NOCOLOR, launch.rank, &comm, nullptr));
      if (group_id >= 0) comms[kind] = comm;
    }
    if (print)
      fmt::print("{:>14} {:>9} {:>12} {:>5} {:>10} {:>10} {:>10} {:>10} {:>7}\n", "collective", "group",
                 "bytes", "count", "exec_us", "alone_us", "exec_busGB", "alone_busGB", "ratio%");
    double exec_comm = 0;
    double alone_comm = 0;
    // Every member of a group runs the same program here (pp peers differ, but groups lie within a stage).
    for (const auto& [key, durations] : collective_ns) {
      const auto [kind_index, group_index, bytes] = key;
      const auto kind = static_cast<graph::CollectiveKind>(kind_index);
      ncclComm_t comm = comms.at(group_index);
      int members = 1;
      CALO_NCCL(ncclCommCount(comm, &members));
      const auto total = static_cast<std::size_t>(std::ceil(bytes / 2.0));
      const std::size_t per_rank =
          (total + static_cast<std::size_t>(members) - 1) / static_cast<std::size_t>(members);
      void* send = nullptr;
      void* recv = nullptr;
      CALO_CUDA(cudaMalloc(&send, (per_rank * static_cast<std::size_t>(members) + 64) * 2));
      CALO_CUDA(cudaMalloc(&recv, (per_rank * static_cast<std::size_t>(members) + 64) * 2));
      const double alone = time_loop(stream, 3, 20, [&] {
        switch (kind) {
          case graph::CollectiveKind::kAllReduce:
            CALO_NCCL(ncclAllReduce(send, recv, total, ncclBfloat16, ncclSum, comm, stream));
            break;
          case graph::CollectiveKind::kAllGather:
            CALO_NCCL(ncclAllGather(send, recv, per_rank, ncclBfloat16, comm, stream));
            break;
          case graph::CollectiveKind::kReduceScatter:
            CALO_NCCL(ncclReduceScatter(send, recv, per_rank, ncclBfloat16, ncclSum, comm, stream));
            break;
          case graph::CollectiveKind::kAllToAll:
            CALO_NCCL(ncclGroupStart());
            for (int peer = 0; peer < members; ++peer) {
              CALO_NCCL(ncclSend(static_cast<char*>(send) + static_cast<std::size_t>(peer) * per_rank * 2,
                                 per_rank, ncclBfloat16, peer, comm, stream));
              CALO_NCCL(ncclRecv(static_cast<char*>(recv) + static_cast<std::size_t>(peer) * per_rank * 2,
                                 per_rank, ncclBfloat16, peer, comm, stream));
            }
            CALO_NCCL(ncclGroupEnd());
            break;
        }
      });
      cudaFree(send);
      cudaFree(recv);
      const double inside = mean(durations);
      const double factor = bus_factor(kind, members);
      exec_comm += inside * static_cast<double>(durations.size());
      alone_comm += alone * static_cast<double>(durations.size());
      if (print)
        fmt::print("{:>14} {:>9} {:>12.0f} {:>5} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>7.1f}\n",
                   graph::to_string(kind), graph::to_string(static_cast<graph::GroupKind>(group_index)),
                   bytes, durations.size(), inside / 1e3, alone / 1e3, bytes * factor / inside,
                   bytes * factor / alone, 100.0 * alone / inside);
    }
    if (print && exec_comm > 0)
      fmt::print(
          "collective_busbw_vs_alone_pct {:.1f}  (time-weighted over all collective ops of one step)\n",
          100.0 * alone_comm / exec_comm);
    for (auto& [kind, comm] : comms) ncclCommDestroy(comm);
    ncclCommDestroy(world);
  }
  cudaStreamDestroy(stream);
  if (print)
    fmt::print("headline: exec_gpu_bench {} {} layers tp{} pp{} ep{}: step {:.1f} ms, fwd+bwd {:.1f} ms\n",
               spec.name, spec.num_layers, layout.tp, layout.pp, layout.ep, mean(step_ns) / 1e6,
               (mean(step_ns) - mean(optimizer_ns)) / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    if (options.nproc > 1 && !exec::is_child_rank()) {
      std::vector<std::string> arguments(argv + 1, argv + argc);
      return exec::spawn_local_ranks(options.nproc, arguments).exit_code;
    }
    return run_rank(options, exec::detect_launch());
  } catch (const InputError& error) {
    fmt::print(stderr, "exec_gpu_bench: {}\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    fmt::print(stderr, "exec_gpu_bench: {}\n", error.what());
    return 1;
  }
}
