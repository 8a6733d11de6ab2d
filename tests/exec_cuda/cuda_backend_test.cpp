// CUDA backend on one GPU: cuBLASLt GEMMs (every pass's transposes) against a host fp32 reference, the
// executor running a tiny model's full step with --check (zero wrong), op counts, injected faults caught, and
// CALO_ATTENTION choosing the attention implementation (cuDNN SDPA or the cuBLASLt fallback).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/bootstrap.h"
#include "exec/cuda/cudnn_attention.h"
#include "exec/cuda/gemm.h"
#include "exec/executor.h"
#include "exec/memory_ledger.h"
#include "gpu_test.h"
#include "graph/graph.h"
#include "model/model_spec.h"
#include "parallel/validate.h"

namespace calo::exec {
namespace {

using testing::from_bf16;
using testing::to_bf16;
using testing::visible_gpus;

/// This binary's registry with the CUDA backend it links (calo loads it from libcalo_exec_cuda.so).
BackendRegistry& registry_with_cuda() {
  static const bool registered = (register_cuda_backend(BackendRegistry::instance()), true);
  (void)registered;
  return BackendRegistry::instance();
}

TEST(CudaBackend, IsRegistered) {
  const BackendFactory* factory = registry_with_cuda().find("cuda");
  ASSERT_NE(factory, nullptr);
  const std::string reason = factory->unavailable_reason();
  if (visible_gpus() == 0) {
    EXPECT_FALSE(reason.empty());
  } else {
    EXPECT_TRUE(reason.empty()) << reason;
  }
}

/// Runs one row-major GEMM pass (of `batch` packed products) through GemmRunner and compares every output
/// with a host reference.
void check_gemm_pass(graph::GemmPass pass, std::int64_t m, std::int64_t n, std::int64_t k,
                     graph::GemmWeight weight = graph::GemmWeight::kQkv, std::int64_t batch = 1) {
  graph::GemmShape shape;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  shape.pass = pass;
  shape.weight = weight;
  shape.batch = batch;
  const cuda::GemmCall call = cuda::gemm_call_for(shape);
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::uint16_t> a(static_cast<size_t>(batch * m * k));
  std::vector<std::uint16_t> b(static_cast<size_t>(batch * k * n));
  for (auto& value : a) value = to_bf16(uniform(random));
  for (auto& value : b) value = to_bf16(uniform(random));
  void* device_a = nullptr;
  void* device_b = nullptr;
  void* device_c = nullptr;
  ASSERT_EQ(cudaMalloc(&device_a, a.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device_b, b.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device_c, static_cast<size_t>(batch * m * n) * 2), cudaSuccess);
  cudaMemcpy(device_a, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(device_b, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  {
    cuda::GemmRunner runner;
    runner.run(call, device_a, device_b, device_c, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<std::uint16_t> c(static_cast<size_t>(batch * m * n));
  cudaMemcpy(c.data(), device_c, c.size() * 2, cudaMemcpyDeviceToHost);
  std::int64_t wrong = 0;
  for (std::int64_t product = 0; product < batch; ++product) {
    const std::uint16_t* a_product = a.data() + product * m * k;
    const std::uint16_t* b_product = b.data() + product * k * n;
    for (std::int64_t row = 0; row < m; ++row) {
      for (std::int64_t col = 0; col < n; ++col) {
        double want = 0;
        for (std::int64_t inner = 0; inner < k; ++inner) {
          const float left = call.transpose_a ? from_bf16(a_product[inner * m + row])
                                              : from_bf16(a_product[row * k + inner]);
          const float right = call.transpose_b ? from_bf16(b_product[col * k + inner])
                                               : from_bf16(b_product[inner * n + col]);
          want += static_cast<double>(left) * right;
        }
        const double got = from_bf16(c[static_cast<size_t>(product * m * n + row * n + col)]);
        if (std::abs(got - want) > 1e-2 * std::abs(want) + 2e-2) ++wrong;
      }
    }
  }
  EXPECT_EQ(wrong, 0) << graph::to_string(weight) << " " << graph::to_string(pass) << " batch " << batch;
  cudaFree(device_a);
  cudaFree(device_b);
  cudaFree(device_c);
}

TEST(CudaGemm, ForwardDgradWgradMatchHostReference) {
  CALO_REQUIRE_GPU();
  for (const auto pass : {graph::GemmPass::kForward, graph::GemmPass::kDgrad, graph::GemmPass::kWgrad})
    check_gemm_pass(pass, 96, 160, 64);
}

TEST(CudaGemm, UnfusedAttentionBatchedProductsMatchHostReference) {
  CALO_REQUIRE_GPU();
  // The unfused core's strided-batched GEMMs over 3 (sequence, head) products, s = 96, d = 64, with the
  // shapes the graph gives them (docs/METRICS.md, "Attention implementation").
  const std::int64_t s = 96, d = 64;
  check_gemm_pass(graph::GemmPass::kForward, s, s, d, graph::GemmWeight::kAttnScore, 3);    // S = Q K^T
  check_gemm_pass(graph::GemmPass::kDgrad, s, d, s, graph::GemmWeight::kAttnScore, 3);      // dQ = dS K
  check_gemm_pass(graph::GemmPass::kWgrad, s, d, s, graph::GemmWeight::kAttnScore, 3);      // dK = dS^T Q
  check_gemm_pass(graph::GemmPass::kForward, s, d, s, graph::GemmWeight::kAttnContext, 3);  // O = P V
  check_gemm_pass(graph::GemmPass::kDgrad, s, s, d, graph::GemmWeight::kAttnContext, 3);    // dP = dO V^T
  check_gemm_pass(graph::GemmPass::kWgrad, s, d, s, graph::GemmWeight::kAttnContext, 3);    // dV = P^T dO
}

struct StepRun {
  OpCounts executed{};
  OpCounts per_step{};
  CheckReport check;
  std::string attention_impl;
  std::int64_t allocated_bytes = 0;  ///< the backend's operand buffers
};

StepRun run_single(const std::string& model_name, bool check, int steps,
                   const parallel::Layout& wanted = {}) {
  const model::ModelSpec spec = model::load_model(model_name);
  const parallel::Layout layout = parallel::resolve_layout(spec, wanted);
  const graph::Graph graph = graph::build_graph(spec, layout);
  BackendConfig config;
  config.check = check;
  auto backend = registry_with_cuda().select("cuda").create(config);
  LaunchInfo launch;
  auto bootstrap = make_bootstrap(launch);
  backend->connect(graph, 0, *bootstrap);
  StepRun run;
  {
    Executor executor(*backend, graph, 0);
    executor.prepare();
    for (int step = 0; step < steps; ++step) executor.run_step(*bootstrap);
    run.per_step = executor.ops_per_step();
  }
  run.executed = backend->executed_op_counts();
  run.check = backend->check_report();
  run.attention_impl = backend->device().attention_impl;
  run.allocated_bytes = backend->allocated_bytes();
  return run;
}

/// tiny-dense under `wanted` on one GPU, connected, with an executor for rank 0 (--memory real tests).
struct OneGpuRank {
  model::ModelSpec spec = model::load_model("tiny-dense");
  parallel::Layout layout;
  graph::Graph graph;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Executor> executor;

  explicit OneGpuRank(const parallel::Layout& wanted)
      : layout(parallel::resolve_layout(spec, wanted)), graph(graph::build_graph(spec, layout)) {
    backend = registry_with_cuda().select("cuda").create(BackendConfig{});
    bootstrap = make_bootstrap(LaunchInfo{});
    backend->connect(graph, 0, *bootstrap);
    executor = std::make_unique<Executor>(*backend, graph, 0);
  }
};

TEST(CudaBackend, HoldsAMemoryLedgerOnItsPoolAndReachesTheReplayedPeak) {
  // --memory real on one GPU: every op runs on the compute stream, so the pool's high-water mark plus the
  // state in the optimizer's operands is the ledger's replayed peak, and the device holds at least that much
  // more than before the holds.
  CALO_REQUIRE_GPU();
  parallel::Layout wanted;
  wanted.global_batch = 2;
  wanted.recompute = model::Recompute::kFull;
  OneGpuRank rank(wanted);
  Executor& executor = *rank.executor;
  executor.use_memory_ledger(build_memory_ledger(executor.ops(), rank.spec, rank.layout, 0));
  executor.prepare();
  for (int step = 0; step < 2; ++step) executor.run_step(*rank.bootstrap);
  const HeldMemory held = rank.backend->held_memory();
  const std::int64_t replayed = executor.memory_ledger().serial_peak_bytes;
  const std::int64_t measured = held.held_peak_bytes + executor.state_in_operands_bytes();
  // The pool rounds each allocation up (at most 2 MiB granularity per live block).
  EXPECT_GE(measured, replayed);
  EXPECT_LE(measured, replayed + executor.memory_ledger().slots * std::int64_t{2 << 20});
  EXPECT_GT(held.device_used_bytes, measured);
}

TEST(CudaBackend, ALedgerNearTheGpusLimitCarvesTheOperandsAndRunsToItsReplayedPeak) {
  // --memory real where training's holdings fit the GPU but not beside the bench's operand buffers: the
  // operands stand in for held bytes (carve_ledger), the steps run without running out of memory, and the
  // held peak (the pool's high-water mark plus what the operands stand in for) is still the replayed peak.
  CALO_REQUIRE_GPU();
  parallel::Layout wanted;
  wanted.seq_length = 8192;  // operand buffers of hundreds of MiB, far above the pool's granularity
  wanted.micro_batch = 4;
  wanted.global_batch = 8;
  MemoryLedger ledger;
  std::int64_t in_use = 0, in_operands = 0, operands = 0;
  {
    OneGpuRank probe(wanted);
    ledger = build_memory_ledger(probe.executor->ops(), probe.spec, probe.layout, 0);
    probe.executor->use_memory_ledger(ledger);
    probe.executor->prepare();
    EXPECT_EQ(probe.executor->operands_carved_bytes(), 0);
    in_use = probe.backend->held_memory().device_used_bytes;
    in_operands = probe.executor->state_in_operands_bytes();
    operands = probe.backend->allocated_bytes() - in_operands;
  }
  ASSERT_GT(operands, std::int64_t{256} << 20);
  OneGpuRank rank(wanted);
  const double device_bytes = rank.backend->device().memory_bytes;
  // State enough that the ledger falls half the operands short of the device's headroom.
  const std::int64_t extra = static_cast<std::int64_t>(device_bytes) - kLedgerHeadroomBytes - in_use -
                             (ledger.serial_peak_bytes - in_operands) + operands / 2;
  ledger.state_bytes += extra;
  ledger.serial_peak_bytes += extra;
  rank.executor->use_memory_ledger(ledger);
  rank.executor->prepare();
  for (int step = 0; step < 2; ++step) rank.executor->run_step(*rank.bootstrap);
  const std::int64_t carved = rank.executor->operands_carved_bytes();
  EXPECT_GT(carved, operands / 4);
  EXPECT_LT(carved, operands);
  const HeldMemory held = rank.backend->held_memory();
  const std::int64_t measured = held.held_peak_bytes + rank.executor->state_in_operands_bytes() + carved;
  EXPECT_GE(measured, ledger.serial_peak_bytes);
  EXPECT_LE(measured, ledger.serial_peak_bytes + ledger.slots * std::int64_t{2 << 20});
  // The device is full to within the headroom, and no further.
  EXPECT_GT(static_cast<double>(held.device_used_bytes), device_bytes - 2.0 * kLedgerHeadroomBytes);
}

TEST(CudaBackend, ALedgerBeyondTheGpuIsRefusedBeforeAnythingIsHeld) {
  CALO_REQUIRE_GPU();
  OneGpuRank rank(parallel::Layout{});
  MemoryLedger ledger;
  ledger.state_bytes = 1;
  ledger.serial_peak_bytes = static_cast<std::int64_t>(rank.backend->device().memory_bytes);
  rank.executor->use_memory_ledger(ledger);
  EXPECT_THROW(rank.executor->prepare(), InputError);
  EXPECT_EQ(rank.backend->held_memory().held_peak_bytes, 0);
}

TEST(CudaBackend, AcceptsContextParallelLayouts) {
  // The NCCL K/V ring (and the all-gather variant) runs on the cuda backend: `calo bench` no longer refuses
  // cp > 1 for it. The ring itself needs two GPUs (multigpu_test.cpp, CudaMultiGpu.ContextParallel*).
  const BackendFactory* cuda = registry_with_cuda().find("cuda");
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(cuda->context_parallel);
}

TEST(CudaBackend, RunsEveryOpOfTinyDenseAndChecksClean) {
  CALO_REQUIRE_GPU();
  const StepRun run = run_single("tiny-dense", true, 2);
  for (int kind = 0; kind < graph::kNumOpKinds; ++kind)
    EXPECT_EQ(run.executed[static_cast<size_t>(kind)], 2 * run.per_step[static_cast<size_t>(kind)])
        << op_count_name(kind);
  EXPECT_EQ(run.check.wrong, 0) << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
  EXPECT_GE(run.check.ops_checked, 2 * run.per_step[static_cast<size_t>(graph::OpKind::kGemm)]);
  EXPECT_GT(run.check.values_checked, run.check.ops_checked);
}

TEST(CudaBackend, AShardBeyondOneChunkRunsAdamWChunkByChunkAndChecksClean) {
  // The optimizer's fp32 arrays are 1 GiB at most: Llama3-8B's 4-layer slice (1.92 B parameters, 28.7 GiB of
  // fp32 parameters, gradients and moments) runs AdamW over 4 GiB of buffers, chunk after chunk, and its last
  // chunk is verified against AdamW on the host.
  CALO_REQUIRE_GPU();
  parallel::Layout wanted;
  wanted.seq_length = 1024;
  const StepRun run = run_single("llama3-8b-4layers", true, 1, wanted);
  EXPECT_EQ(run.check.wrong, 0) << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
  EXPECT_EQ(run.executed[static_cast<size_t>(graph::OpKind::kOptimizer)],
            run.per_step[static_cast<size_t>(graph::OpKind::kOptimizer)]);
  EXPECT_LT(run.allocated_bytes, std::int64_t{20} << 30) << "the optimizer kept the whole fp32 state";
}

TEST(CudaBackend, CaloAdamwChunkValuesSetsTheChunkAndABadValueIsRefused) {
  // 1000 values per launch: tiny-dense's shard runs in thousands of launches with a remainder, and the last
  // is checked clean; 0 is one launch over the whole shard (the A/B setting); a word is refused naming the
  // variable.
  CALO_REQUIRE_GPU();
  for (const char* chunk : {"1000", "0"}) {
    ::setenv("CALO_ADAMW_CHUNK_VALUES", chunk, 1);
    const StepRun run = run_single("tiny-dense", true, 1);
    EXPECT_EQ(run.check.wrong, 0) << chunk << ": "
                                  << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
  }
  ::setenv("CALO_ADAMW_CHUNK_VALUES", "lots", 1);
  try {
    registry_with_cuda().select("cuda").create(BackendConfig{});
    ADD_FAILURE() << "CALO_ADAMW_CHUNK_VALUES=lots was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("CALO_ADAMW_CHUNK_VALUES=lots"), std::string::npos)
        << error.what();
  }
  ::unsetenv("CALO_ADAMW_CHUNK_VALUES");
}

TEST(CudaBackend, RunsUnfusedAttentionAndChecksClean) {
  CALO_REQUIRE_GPU();
  parallel::Layout layout;
  layout.attention = parallel::AttentionImpl::kUnfused;
  const StepRun run = run_single("tiny-dense", true, 2, layout);
  EXPECT_EQ(run.per_step[static_cast<size_t>(graph::OpKind::kAttention)], 0);
  EXPECT_EQ(run.attention_impl, cuda::kAttentionImplUnfused);
  EXPECT_EQ(run.check.wrong, 0) << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
  const StepRun fused = run_single("tiny-dense", false, 1);
  // Per layer (tiny-dense has 4) 2 forward + 4 backward attention GEMMs replace the fused ops.
  EXPECT_EQ(run.per_step[static_cast<size_t>(graph::OpKind::kGemm)],
            fused.per_step[static_cast<size_t>(graph::OpKind::kGemm)] + 6 * 4);
}

TEST(CudaBackend, RunsTinyMoeWithRoutingAndChecksClean) {
  CALO_REQUIRE_GPU();
  const StepRun run = run_single("tiny-moe", true, 1);
  EXPECT_EQ(run.check.wrong, 0) << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
  EXPECT_GT(run.executed[static_cast<size_t>(graph::OpKind::kGemm)], 0);
}

TEST(CudaBackend, CheckCatchesInjectedFaults) {
  CALO_REQUIRE_GPU();
  for (const char* fault : {"gemm", "attention", "elementwise", "optimizer"}) {
    setenv("CALO_CUDA_INJECT_FAULT", fault, 1);
    const StepRun run = run_single("tiny-dense", true, 1);
    unsetenv("CALO_CUDA_INJECT_FAULT");
    EXPECT_GT(run.check.wrong, 0) << fault;
    EXPECT_FALSE(run.check.first_failures.empty()) << fault;
  }
}

TEST(CudaBackend, RunsFp8LinearsUnderEachTensorwiseRecipeAndChecksClean) {
  // e4m3 GEMMs (cuBLASLt, a scale per tensor) and the amax + cast kernels: every FP8 GEMM within the bf16
  // output's rounding of the exact product of its quantised operands, every cast within half an e4m3 step.
  CALO_REQUIRE_GPU();
  for (const auto precision : {parallel::Precision::kFp8Tensorwise, parallel::Precision::kFp8Delayed}) {
    parallel::Layout wanted;
    wanted.precision = precision;
    const StepRun run = run_single("tiny-dense", true, 2, wanted);
    EXPECT_EQ(run.check.wrong, 0) << (run.check.first_failures.empty() ? "" : run.check.first_failures[0]);
    EXPECT_GT(run.executed[static_cast<size_t>(graph::OpKind::kGemm)], 0);
    EXPECT_GE(run.check.ops_checked, 2 * run.per_step[static_cast<size_t>(graph::OpKind::kGemm)]);
  }
}

TEST(CudaBackend, AnFp8GemmWithAWrongScaleFailsTheCheck) {
  // The GEMM reads B's dequantisation scale 1.25x too large: every FP8 GEMM's output is off by 25 %, far
  // beyond the 2^-8 the check allows.
  CALO_REQUIRE_GPU();
  parallel::Layout wanted;
  wanted.precision = parallel::Precision::kFp8Tensorwise;
  setenv("CALO_CUDA_INJECT_FAULT", "fp8_scale", 1);
  const StepRun run = run_single("tiny-dense", true, 1, wanted);
  unsetenv("CALO_CUDA_INJECT_FAULT");
  EXPECT_GT(run.check.wrong, 0);
  ASSERT_FALSE(run.check.first_failures.empty());
  EXPECT_NE(run.check.first_failures[0].find("host reference"), std::string::npos)
      << run.check.first_failures[0];
}

TEST(CudaBackend, AttentionImplementationFollowsCaloAttention) {
  CALO_REQUIRE_GPU();
  setenv("CALO_ATTENTION", "fallback", 1);
  const StepRun forced = run_single("tiny-dense", true, 1);
  unsetenv("CALO_ATTENTION");
  EXPECT_EQ(forced.attention_impl, cuda::kAttentionImplFallback);
  EXPECT_EQ(forced.check.wrong, 0) << (forced.check.first_failures.empty() ? ""
                                                                           : forced.check.first_failures[0]);
  const StepRun automatic = run_single("tiny-dense", true, 1);
  EXPECT_EQ(automatic.attention_impl,
            cuda::cudnn_attention_built() ? cuda::kAttentionImplCudnn : cuda::kAttentionImplFallback);
  EXPECT_EQ(automatic.check.wrong, 0)
      << (automatic.check.first_failures.empty() ? "" : automatic.check.first_failures[0]);
  setenv("CALO_ATTENTION", "flash", 1);
  EXPECT_THROW(run_single("tiny-dense", false, 1), InputError);
  unsetenv("CALO_ATTENTION");
}

}  // namespace
}  // namespace calo::exec
