// The CUDA executor's ops against the same work run alone:
//  - every distinct GEMM shape of the rank's program: mean op time inside the executor (--trace-ops events)
//    vs the same cuBLASLt call (same GemmRunner, heuristic algorithm) timed the same way, one call at a time
//    ("alone": queued behind a memory-bound memset, then the GPU idle for as long as the call ran), and in a
//    back-to-back loop ("loop", the comparison used until 2026-11-22, which gave 111 %). The loop is unfair
//    twice: a long loop of one large GEMM runs at full GEMM power, so the power cap lowers its clocks below a
//    training step's (which mixes in memory-bound ops), and timing around a call on an idle queue adds the
//    host's launch latency that executor ops, queued behind other ops, do not pay. The mean SM clock (NVML,
//    1 ms samples) of the steps, the alone calls and the loop is printed;
//  - every distinct attention shape: mean op time inside the executor vs cuDNN SDPA and the cuBLASLt fallback
//    alone (timed like "alone" above), and the attention time per step of each;
//  - every distinct collective (kind, group, bytes): mean op time and bus bandwidth inside the executor vs an
//    NCCL loop of the same collective and size on a fresh communicator of the same group (nccl-tests busbw);
//  - the step's forward+backward time (step minus the optimizer op) for the PyTorch eager comparison.
// Usage: exec_gpu_bench --model llama3-8b --layers 4 [--tp N --pp N --dp N --ep N --gbs N --seq N]
//        [--nproc N] [--steps N]
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_operands.h"
#include "core/error.h"
#include "core/time.h"
#include "exec/backend.h"
#include "exec/bootstrap.h"
#include "exec/cuda/attention.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.h"
#include "exec/cuda/gemm.h"
#include "exec/cuda/init.cuh"
#include "exec/executor.h"
#include "exec/launch.h"
#include "flags.h"
#include "gpu_timing.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace {

using namespace calo;
using bench::ClockSampler;
using bench::describe_clock;
using bench::kSpacerBytes;
using bench::time_spaced;
using bench::Windows;

struct Options {
  std::string model = "llama3-8b";
  int layers = 4;
  parallel::Layout layout;
  int nproc = 1;
  int steps = 3;
};

Options parse(int argc, char** argv) {
  Options options;
  auto apply = [&](const std::string& key, const std::string& value) {
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
      return false;
    return true;
  };
  bench::for_each_flag(argc, argv, "exec_gpu_bench.cpp", apply);
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

/// Attention ops of one shape: (batch, heads, kv heads, seq, head_dim, causal, backward).
using AttentionKey = std::tuple<int, int, int, int, int, bool, bool>;

using CollectiveTimes = std::map<std::tuple<int, int, double>, std::vector<double>>;

/// Per (collective, group, bytes) and op instance, the smallest duration over the ranks that ran the same
/// instances (every rank's own values where no other rank has that key with the same count).
CollectiveTimes min_over_ranks(const CollectiveTimes& mine, exec::Bootstrap& bootstrap) {
  std::vector<std::byte> blob;
  auto put = [&blob](const void* data, std::size_t size) {
    const auto* bytes = static_cast<const std::byte*>(data);
    blob.insert(blob.end(), bytes, bytes + size);
  };
  for (const auto& [key, durations] : mine) {
    const auto [kind, group, bytes] = key;
    const auto count = static_cast<std::int64_t>(durations.size());
    put(&kind, sizeof(kind));
    put(&group, sizeof(group));
    put(&bytes, sizeof(bytes));
    put(&count, sizeof(count));
    put(durations.data(), durations.size() * sizeof(double));
  }
  CollectiveTimes result = mine;
  for (const auto& other : bootstrap.all_gather(blob)) {
    std::size_t at = 0;
    auto get = [&other, &at](void* data, std::size_t size) {
      std::memcpy(data, other.data() + at, size);
      at += size;
    };
    while (at < other.size()) {
      int kind = 0;
      int group = 0;
      double bytes = 0;
      std::int64_t count = 0;
      get(&kind, sizeof(kind));
      get(&group, sizeof(group));
      get(&bytes, sizeof(bytes));
      get(&count, sizeof(count));
      std::vector<double> durations(static_cast<std::size_t>(count));
      get(durations.data(), durations.size() * sizeof(double));
      auto found = result.find({kind, group, bytes});
      if (found == result.end() || found->second.size() != durations.size()) continue;
      for (std::size_t index = 0; index < durations.size(); ++index)
        found->second[index] = std::min(found->second[index], durations[index]);
    }
  }
  return result;
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
  exec::register_cuda_backend(exec::BackendRegistry::instance());  // linked in: no module to load
  auto backend = exec::BackendRegistry::instance().select("cuda").create(config);
  backend->connect(graph, launch.rank, *bootstrap);
  exec::ExecutorOptions executor_options;
  executor_options.trace_ops = true;
  exec::Executor executor(*backend, graph, launch.rank, executor_options);
  executor.prepare();
  ClockSampler clocks(backend->device().pci_bus);
  executor.run_step(*bootstrap);  // warm-up (algorithm selection, NCCL connections)
  const auto& ops = executor.ops();
  std::vector<double> step_ns;
  std::vector<double> optimizer_ns;
  Windows step_windows;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int>, std::vector<double>> gemm_ns;
  CollectiveTimes collective_ns;
  std::map<AttentionKey, std::vector<double>> attention_ns;
  std::map<AttentionKey, double> attention_flops;
  for (int step = 0; step < options.steps; ++step) {
    const exec::StepTiming timing = executor.run_step(*bootstrap);
    step_ns.push_back(static_cast<double>(timing.duration_ns()));
    step_windows.emplace_back(timing.begin_ns, timing.end_ns);
    double optimizer = 0;
    for (const exec::OpTiming& op_timing : timing.ops) {
      const graph::Op& op = ops[static_cast<size_t>(op_timing.op_index)].op;
      const auto duration = static_cast<double>(op_timing.end_ns - op_timing.begin_ns);
      if (op.kind == graph::OpKind::kGemm)
        gemm_ns[{op.gemm.m, op.gemm.n, op.gemm.k, static_cast<int>(op.gemm.pass)}].push_back(duration);
      if (op.kind == graph::OpKind::kCollective)
        collective_ns[{static_cast<int>(op.collective), static_cast<int>(op.group), op.bytes}].push_back(
            duration);
      if (op.kind == graph::OpKind::kAttention) {
        const auto& shape = op.attention;
        const AttentionKey key{shape.batch,    shape.heads,  shape.kv_heads, shape.seq,
                               shape.head_dim, shape.causal, shape.backward};
        attention_ns[key].push_back(duration);
        attention_flops[key] = op.flops;
      }
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
    fmt::print("# device: {} ({}), ranks {}, measured steps {}, attention {}\n", backend->device().name,
               backend->device().peak_flops_source, launch.world_size, options.steps,
               backend->device().attention_impl.empty() ? "none" : backend->device().attention_impl);
    fmt::print("step_ms {:.3f} optimizer_ms {:.3f} fwd_bwd_ms {:.3f}\n", mean(step_ns) / 1e6,
               mean(optimizer_ns) / 1e6, (mean(step_ns) - mean(optimizer_ns)) / 1e6);
  }

  // GEMMs: the same call alone (own GemmRunner and buffers, same heuristic algorithm), spaced and looped.
  cudaStream_t stream = nullptr;
  CALO_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* spacer = nullptr;
  CALO_CUDA(cudaMalloc(&spacer, kSpacerBytes));
  double exec_total = 0;
  double alone_total = 0;
  double loop_total = 0;
  Windows alone_windows;
  Windows loop_windows;
  if (print)
    fmt::print("{:>6} {:>6} {:>6} {:>6} {:>5} {:>10} {:>10} {:>10} {:>9} {:>9} {:>7} {:>7}\n", "m", "n", "k",
               "pass", "/step", "exec_us", "alone_us", "loop_us", "exec_TF", "alone_TF", "ratio%", "loop%");
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
      const double alone =
          time_spaced(stream, spacer, 2, 10, alone_windows, [&] { runner.run(call, a, b, c, stream); });
      const std::int64_t loop_begin = core::monotonic_ns();
      const double loop = time_loop(stream, 3, 20, [&] { runner.run(call, a, b, c, stream); });
      loop_windows.emplace_back(loop_begin, core::monotonic_ns());
      cudaFree(a);
      cudaFree(b);
      cudaFree(c);
      const double inside = mean(durations);
      const double per_step = static_cast<double>(durations.size()) / options.steps;
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      exec_total += inside * per_step;
      alone_total += alone * per_step;
      loop_total += loop * per_step;
      if (print)
        fmt::print(
            "{:>6} {:>6} {:>6} {:>6} {:>5.0f} {:>10.1f} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f} {:>7.1f} "
            "{:>7.1f}\n",
            m, n, k, graph::to_string(shape.pass), per_step, inside / 1e3, alone / 1e3, loop / 1e3,
            flops / inside / 1e3, flops / alone / 1e3, 100.0 * alone / inside, 100.0 * loop / inside);
    }
  }
  if (print && exec_total > 0) {
    fmt::print(
        "gemm_throughput_vs_alone_pct {:.1f}  (time-weighted over all GEMM ops of one step; alone = one "
        "call at a time, GPU idle as long in between)\n",
        100.0 * alone_total / exec_total);
    fmt::print(
        "gemm_throughput_vs_loop_pct {:.1f}  (same against a back-to-back loop of each call: power-capped "
        "clocks)\n",
        100.0 * loop_total / exec_total);
    fmt::print("# sm clock (NVML mean): steps {}, alone {}, loop {}\n",
               describe_clock(clocks.mean(step_windows)), describe_clock(clocks.mean(alone_windows)),
               describe_clock(clocks.mean(loop_windows)));
  }

  // Attention: every shape of the step through cuDNN SDPA and the cuBLASLt fallback, timed like "alone".
  double attention_exec_ms = 0;
  double attention_cudnn_ms = 0;
  double attention_fallback_ms = 0;
  bool cudnn_complete = true;
  if (!attention_ns.empty()) {
    if (print)
      fmt::print("{:>36} {:>5} {:>10} {:>10} {:>11} {:>9} {:>11} {:>9}\n", "attention", "/step", "exec_us",
                 "cudnn_us", "fallback_us", "cudnn_TF", "fallback_TF", "speedup");
    exec::cuda::GemmRunner runner;
    exec::cuda::CudnnAttention cudnn;
    Windows attention_windows;
    for (const auto& [key, durations] : attention_ns) {
      graph::AttentionShape shape;
      std::tie(shape.batch, shape.heads, shape.kv_heads, shape.seq, shape.head_dim, shape.causal,
               shape.backward) = key;
      bench::AttentionOperands operands(shape, 21, stream);
      const exec::cuda::AttentionBuffers& buffers = operands.buffers;
      double cudnn_ns = NAN;
      std::string why;
      graph::AttentionShape forward = shape;
      forward.backward = false;
      why = cudnn.prepare(forward);  // the backward reads the forward's stats: run the forward once first
      if (why.empty()) why = cudnn.prepare(shape);
      if (why.empty()) {
        void* workspace =
            operands.allocate(std::max(cudnn.workspace_bytes(shape), cudnn.workspace_bytes(forward)));
        cudnn.run(forward, buffers, workspace, stream);
        cudnn_ns = time_spaced(stream, spacer, 2, 10, attention_windows,
                               [&] { cudnn.run(shape, buffers, workspace, stream); });
      } else {
        cudnn_complete = false;
        if (print)
          fmt::print("# attention {}: cuDNN SDPA unavailable: {}\n",
                     exec::cuda::describe_attention_shape(shape), why);
      }
      const double fallback_ns = time_spaced(stream, spacer, 2, 10, attention_windows, [&] {
        exec::cuda::run_attention(runner, shape, buffers, stream);
      });
      CALO_CUDA(cudaStreamSynchronize(stream));
      const double inside = mean(durations);
      const double per_step = static_cast<double>(durations.size()) / options.steps;
      const double flops = attention_flops[key];
      attention_exec_ms += inside * per_step / 1e6;
      attention_cudnn_ms += cudnn_ns * per_step / 1e6;
      attention_fallback_ms += fallback_ns * per_step / 1e6;
      if (print)
        fmt::print("{:>36} {:>5.0f} {:>10.1f} {:>10.1f} {:>11.1f} {:>9.1f} {:>11.1f} {:>8.2f}x\n",
                   exec::cuda::describe_attention_shape(shape), per_step, inside / 1e3, cudnn_ns / 1e3,
                   fallback_ns / 1e3, flops / cudnn_ns / 1e3, flops / fallback_ns / 1e3,
                   fallback_ns / cudnn_ns);
    }
    if (print) {
      fmt::print(
          "attention_ms_per_step exec {:.2f} ({}) cudnn {:.2f} fallback {:.2f}  (cuDNN {:.2f}x faster)\n",
          attention_exec_ms, backend->device().attention_impl, cudnn_complete ? attention_cudnn_ms : NAN,
          attention_fallback_ms, cudnn_complete ? attention_fallback_ms / attention_cudnn_ms : NAN);
      fmt::print("# sm clock during the attention calls (NVML mean): {}\n",
                 describe_clock(clocks.mean(attention_windows)));
    }
  }
  if (print && !clocks.available())
    fmt::print("# note: NVML (libnvidia-ml.so.1) not available: no clock figures\n");

  // Collectives: a fresh communicator per group kind (split of a fresh world), NCCL loop of the same size.
  // A collective's time on one rank includes waiting for the group's last member to arrive; the member that
  // arrived last waits for nobody, so the minimum over ranks of each instance is the transfer alone.
  const auto last_arrival_ns = min_over_ranks(collective_ns, *bootstrap);
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
      fmt::print("{:>14} {:>9} {:>12} {:>5} {:>10} {:>10} {:>10} {:>10} {:>7} {:>10} {:>7}\n", "collective",
                 "group", "bytes", "count", "exec_us", "alone_us", "exec_busGB", "alone_busGB", "ratio%",
                 "last_us", "last%");
    double exec_comm = 0;
    double last_comm = 0;
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
      const double last = mean(last_arrival_ns.at(key));
      const double factor = bus_factor(kind, members);
      exec_comm += inside * static_cast<double>(durations.size());
      last_comm += last * static_cast<double>(durations.size());
      alone_comm += alone * static_cast<double>(durations.size());
      if (print)
        fmt::print(
            "{:>14} {:>9} {:>12.0f} {:>5} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>7.1f} {:>10.1f} "
            "{:>7.1f}\n",
            graph::to_string(kind), graph::to_string(static_cast<graph::GroupKind>(group_index)), bytes,
            durations.size(), inside / 1e3, alone / 1e3, bytes * factor / inside, bytes * factor / alone,
            100.0 * alone / inside, last / 1e3, 100.0 * alone / last);
    }
    if (print && exec_comm > 0) {
      fmt::print(
          "collective_busbw_vs_alone_pct {:.1f}  (time-weighted over all collective ops of one step; rank "
          "0's "
          "op time, including waiting for the group's last member)\n",
          100.0 * alone_comm / exec_comm);
      fmt::print(
          "collective_busbw_vs_alone_last_arrival_pct {:.1f}  (the same with each op instance timed on the "
          "member "
          "that arrived last: the transfer without arrival skew)\n",
          100.0 * alone_comm / last_comm);
    }
    for (auto& [kind, comm] : comms) ncclCommDestroy(comm);
    ncclCommDestroy(world);
  }
  cudaStreamDestroy(stream);
  if (print)
    fmt::print(
        "headline: exec_gpu_bench {} {} layers tp{} pp{} ep{}: step {:.1f} ms, fwd+bwd {:.1f} ms, attention "
        "{} {:.1f} ms/step\n",
        spec.name, spec.num_layers, layout.tp, layout.pp, layout.ep, mean(step_ns) / 1e6,
        (mean(step_ns) - mean(optimizer_ns)) / 1e6,
        backend->device().attention_impl.empty() ? "none" : backend->device().attention_impl,
        attention_exec_ms);
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
