// Context-parallel attention on one GPU: every attention shape that the ranks of a cp layout run (ring steps,
// or all-gathered chunks), timed through cuDNN SDPA forward and backward like executor ops (gpu_timing.h:
// each call queued behind a memset, idle after it; a backward after one forward of its shape, whose softmax
// statistics it reads), with the mean SM clock (NVML) during its calls, next to the simulator's cost of the
// same op at that clock (sim::compute_cost, compute part stretched by f_max / f) and next to the cp = 1
// layout's full causal attention. The ring splits the causal attention into equal-FLOP steps (load-balanced
// chunks); the headline says what that costs on a real GPU: a rank's ring attention against the full
// sequence's attention / cp, measured and simulated. The NCCL side of the ring needs several GPUs
// (tests/exec_cuda/multigpu_test.cpp).
//
// Usage: cp_attention_bench [--model llama3-8b] [--seq 32768] [--cp 4] [--cp-comm p2p|allgather]
//                           [--cluster h100-hgx-calibrated] [--iters 10]
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attention_operands.h"
#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cudnn_attention.h"
#include "flags.h"
#include "gpu_timing.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/validate.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"

namespace {

namespace cuda = calo::exec::cuda;
namespace graph = calo::graph;

struct Options {
  std::string model = "llama3-8b";
  std::string cluster = "h100-hgx-calibrated";
  std::string cp_comm = "p2p";
  int seq = 32768;
  int cp = 4;
  int iters = 10;
};

Options parse(int argc, char** argv) {
  Options options;
  auto apply = [&](const std::string& key, const std::string& value) {
    if (key == "--model")
      options.model = value;
    else if (key == "--cluster")
      options.cluster = value;
    else if (key == "--cp-comm")
      options.cp_comm = value;
    else if (key == "--seq")
      options.seq = std::stoi(value);
    else if (key == "--cp")
      options.cp = std::stoi(value);
    else if (key == "--iters")
      options.iters = std::stoi(value);
    else
      return false;
    return true;
  };
  calo::bench::for_each_flag(argc, argv, "cp_attention_bench.cpp", apply);
  return options;
}

/// One distinct attention op (forward or backward) of a rank's step, with how often the rank runs it.
struct ShapeUse {
  graph::Op op;
  int count = 0;
};

/// The attention ops of global rank `rank` of `layout`, grouped by shape (description as key).
std::map<std::string, ShapeUse> attention_uses(const calo::model::ModelSpec& spec,
                                               const calo::parallel::Layout& layout, int rank) {
  const graph::Graph graph = graph::build_graph(spec, calo::parallel::resolve_layout(spec, layout));
  std::map<std::string, ShapeUse> uses;
  for (const graph::RankOp& rank_op : graph::materialize(graph, rank)) {
    if (rank_op.op.kind != graph::OpKind::kAttention) continue;
    ShapeUse& use = uses[cuda::describe_attention_shape(rank_op.op.attention)];
    use.op = rank_op.op;
    ++use.count;
  }
  return uses;
}

/// One shape's measurement: mean call time and the mean SM clock during the calls.
struct ShapeTiming {
  double duration_s = 0;
  double sm_mhz = 0;
};

/// Times `iters` cuDNN SDPA calls of `shape` after two warm-up calls, spaced like executor ops.
ShapeTiming time_cudnn(cuda::CudnnAttention& cudnn, calo::bench::ClockSampler& clocks, void* spacer,
                       const graph::AttentionShape& shape, int iters) {
  graph::AttentionShape forward = shape;
  forward.backward = false;
  for (const graph::AttentionShape& pass : {forward, shape}) {
    const std::string why = cudnn.prepare(pass);
    if (!why.empty())
      throw calo::RuntimeFailure("cuDNN SDPA cannot run " + cuda::describe_attention_shape(pass) + ": " +
                                 why);
  }
  calo::bench::AttentionOperands operands(shape, 1, nullptr);
  void* workspace = operands.allocate(std::max(cudnn.workspace_bytes(shape), cudnn.workspace_bytes(forward)));
  cudnn.run(forward, operands.buffers, workspace, nullptr);  // a backward reads the forward's statistics
  calo::bench::Windows windows;
  ShapeTiming timing;
  timing.duration_s = 1e-9 * calo::bench::time_spaced(nullptr, spacer, 2, iters, windows, [&] {
                        cudnn.run(shape, operands.buffers, workspace, nullptr);
                      });
  timing.sm_mhz = clocks.mean(windows).sm_mhz;
  return timing;
}

/// Measured and simulated attention time of one rank's step.
struct RankAttention {
  double measured_s = 0;
  double simulated_s = 0;
};

/// Times every shape of one rank's step; prints a row per shape (simulated at the measured clock, or at the
/// max clock without NVML).
RankAttention time_rank(cuda::CudnnAttention& cudnn, calo::bench::ClockSampler& clocks, void* spacer,
                        const calo::sim::GpuSpec& gpu, const std::map<std::string, ShapeUse>& uses, int iters,
                        const std::string& label) {
  RankAttention total;
  for (const auto& [description, use] : uses) {
    const ShapeTiming measured = time_cudnn(cudnn, clocks, spacer, use.op.attention, iters);
    const double clock_mhz = std::isfinite(measured.sm_mhz) ? measured.sm_mhz : gpu.max_sm_mhz;
    const double simulated_s =
        calo::sim::compute_cost(gpu, use.op).duration_s(gpu.max_sm_mhz / clock_mhz, 1.0);
    total.measured_s += use.count * measured.duration_s;
    total.simulated_s += use.count * simulated_s;
    fmt::print("{:<10} {:<52} {:>5} {:>10.3f} {:>7.0f} {:>9.1f} {:>10.3f} {:>+8.1f}\n", label, description,
               use.count, measured.duration_s * 1e3, clock_mhz, use.op.flops / measured.duration_s / 1e12,
               simulated_s * 1e3, 100 * (simulated_s / measured.duration_s - 1));
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse(argc, argv);
    calo::require_input(options.cp >= 2, "--cp must be at least 2 (the bench compares against cp = 1)");
    calo::model::ModelSpec spec = calo::model::load_model(options.model);
    spec.num_layers = 1;  // attention shapes do not depend on the layer; one layer's ops per step
    const calo::sim::ClusterSpec cluster = calo::sim::load_cluster(options.cluster);
    calo::parallel::Layout ring;
    ring.seq_length = options.seq;
    ring.cp = options.cp;
    ring.cp_comm = calo::parallel::parse_cp_comm(options.cp_comm);
    calo::parallel::Layout whole;
    whole.seq_length = options.seq;
    cudaDeviceProp properties{};
    CALO_CUDA(cudaGetDeviceProperties(&properties, 0));
    fmt::print(
        "# cp_attention_bench: {} seq {} cp {} ({}), 1 layer, 1 micro-batch; cuDNN SDPA {} spaced calls "
        "per shape; sim: {} (max {} MHz) at each shape's measured SM clock\n",
        spec.name, options.seq, options.cp, options.cp_comm, options.iters, cluster.name,
        cluster.gpu.max_sm_mhz);
    fmt::print("# device: {}\n", properties.name);
    char pci_bus[32] = {};
    CALO_CUDA(cudaDeviceGetPCIBusId(pci_bus, sizeof(pci_bus), 0));
    calo::bench::ClockSampler clocks(pci_bus);
    if (!clocks.available()) fmt::print("# note: NVML not available: simulated at the max clock\n");
    void* spacer = nullptr;
    CALO_CUDA(cudaMalloc(&spacer, calo::bench::kSpacerBytes));
    fmt::print("{:<10} {:<52} {:>5} {:>10} {:>7} {:>9} {:>10} {:>8}\n", "# rank", "shape", "count", "meas ms",
               "SM MHz", "TFLOP/s", "sim ms", "sim err%");
    cuda::CudnnAttention cudnn;
    const RankAttention full =
        time_rank(cudnn, clocks, spacer, cluster.gpu, attention_uses(spec, whole, 0), options.iters, "cp=1");
    RankAttention slowest;
    for (int cp_index = 0; cp_index < options.cp; ++cp_index) {
      const RankAttention rank =
          time_rank(cudnn, clocks, spacer, cluster.gpu, attention_uses(spec, ring, cp_index), options.iters,
                    fmt::format("cp rank {}", cp_index));
      fmt::print("# cp rank {}: attention per step {:.3f} ms measured, {:.3f} ms simulated\n", cp_index,
                 rank.measured_s * 1e3, rank.simulated_s * 1e3);
      slowest.measured_s = std::max(slowest.measured_s, rank.measured_s);
      slowest.simulated_s = std::max(slowest.simulated_s, rank.simulated_s);
    }
    const double ideal_measured_s = full.measured_s / options.cp;
    const double ideal_simulated_s = full.simulated_s / options.cp;
    fmt::print("# cp=1 attention per step {:.3f} ms measured, {:.3f} ms simulated\n", full.measured_s * 1e3,
               full.simulated_s * 1e3);
    fmt::print(
        "slowest cp rank's attention vs cp=1 / cp: {:.3f} vs {:.3f} ms measured ({:+.1f} %), {:.3f} vs "
        "{:.3f} ms simulated ({:+.1f} %)\n",
        slowest.measured_s * 1e3, ideal_measured_s * 1e3, 100 * (slowest.measured_s / ideal_measured_s - 1),
        slowest.simulated_s * 1e3, ideal_simulated_s * 1e3,
        100 * (slowest.simulated_s / ideal_simulated_s - 1));
    cudaFree(spacer);
    return 0;
  } catch (const calo::InputError& error) {
    fmt::print(stderr, "cp_attention_bench: {}\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    fmt::print(stderr, "cp_attention_bench: {}\n", error.what());
    return 1;
  }
}
