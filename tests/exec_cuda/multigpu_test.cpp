// `calo bench --backend cuda` with several local ranks: NCCL collectives, pipeline p2p batches (1F1B and
// interleaved, which deadlock unless a batch is posted as one NCCL group), expert all-to-all, ZeRO-2, hybrid
// sharding, FSDP keeping parameters after forward, and context parallelism (the NCCL K/V ring batched like
// an NCCL group, and the all-gather variant), all with --check (zero wrong, exit 0). Skips with a reason when
// fewer GPUs than ranks are visible. Also: the telemetry of bench and record covers the job's GPUs only.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu_test.h"

namespace {

using calo::exec::testing::visible_gpus;

struct Result {
  int exit_code = -1;
  std::string output;
};

/// The calo binary: $CALO_EXECUTABLE (a carried build on the GPU host) or the one built with this test.
std::string calo_executable() {
  const char* from_env = std::getenv("CALO_EXECUTABLE");
  return from_env != nullptr && *from_env != 0 ? from_env : CALO_EXECUTABLE;
}

Result run_shell(const std::string& command);

Result run_calo(const std::string& arguments) {
  return run_shell(calo_executable() +
                   " bench --backend cuda --check --no-progress --steps 2 "
                   "--warmup 1 --out " +
                   ::testing::TempDir() + "/calo-cuda-bench-$$ " + arguments + " 2>&1");
}

Result run_shell(const std::string& command) {
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) result.output += buffer;
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// How often `text` occurs in `output`.
int occurrences(const std::string& output, const std::string& text) {
  int count = 0;
  for (auto at = output.find(text); at != std::string::npos; at = output.find(text, at + text.size()))
    ++count;
  return count;
}

void expect_clean(int ranks, const std::string& arguments) {
  if (visible_gpus() < ranks) GTEST_SKIP() << "needs " << ranks << " GPUs, " << visible_gpus() << " visible";
  const Result result = run_calo(arguments);
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(CudaMultiGpu, TensorParallelAllReduce) {
  expect_clean(2, "--model tiny-dense --tp 2 --nproc 2");
}

TEST(CudaMultiGpu, PipelineOneFOneB) {
  expect_clean(2, "--model tiny-dense --pp 2 --gbs 8 --nproc 2");
}

TEST(CudaMultiGpu, PipelineInterleavedFourStages) {
  // 4 stages x 2 virtual stages need 8 layers: tiny-dense's shapes with 8 layers, from a model file (the
  // presets' tiny-dense has 4, and --layers only slices a model down).
  const std::string model_path = ::testing::TempDir() + "/calo-tiny-dense-8-layers.yaml";
  if (FILE* file = std::fopen(model_path.c_str(), "w")) {
    std::fputs(
        "name: tiny-dense-8\nnum_layers: 8\nhidden_size: 256\nffn_hidden_size: 688\nnum_attention_heads: 8\n"
        "num_kv_heads: 4\nvocab_size: 1024\nseq_length: 128\nactivation: swiglu\nnorm: rmsnorm\n"
        "position_embedding: rope\n",
        file);
    std::fclose(file);
  }
  expect_clean(4, "--model " + model_path + " --pp 4 --vpp 2 --schedule interleaved --gbs 16 --nproc 4");
}

TEST(CudaMultiGpu, StageGpuOrderPutsEachRankOnItsStagesGpu) {
  // The order `calo plan partition` prints: stage 0 on GPU 1, stage 1 on GPU 0, as the ranks report it.
  if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << visible_gpus() << " visible";
  const Result result = run_calo("--model tiny-dense --pp 2 --gbs 8 --nproc 2 --stage-gpus 1,0");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(occurrences(result.output, "rank 0 on device 1 (PCI"), 1) << result.output;
  EXPECT_EQ(occurrences(result.output, "rank 1 on device 0 (PCI"), 1) << result.output;
}

TEST(CudaMultiGpu, TpPpDpMixed) {
  expect_clean(4, "--model tiny-dense --tp 2 --dp 2 --gbs 4 --nproc 4");
}

TEST(CudaMultiGpu, ExpertParallelAllToAll) {
  expect_clean(4, "--model tiny-moe --dp 4 --ep 4 --gbs 4 --nproc 4");
}

TEST(CudaMultiGpu, ZeroTwoReduceScatterPerMicrobatch) {
  expect_clean(2, "--model tiny-dense --dp 2 --zero 2 --gbs 4 --overlap --nproc 2");
}

TEST(CudaMultiGpu, HybridShardingShardGroupOfTwo) {
  // Shard groups {0,1} {2,3} (NCCL communicators split from the graph's dp_shard groups), replicate {0,2}
  // {1,3}.
  expect_clean(4, "--model tiny-dense --dp 4 --zero 3 --fsdp-shard-group 2 --gbs 8 --nproc 4");
}

TEST(CudaMultiGpu, FsdpKeepingParametersPipelined) {
  expect_clean(
      4, "--model tiny-dense --pp 2 --dp 2 --zero 3 --fsdp-reshard-after-forward off --gbs 8 --nproc 4");
}

TEST(CudaMultiGpu, ContextParallelRing) {
  // Load-balanced causal ring: each rank sends its K/V to cp+1 and receives from cp-1 every step, in one
  // NCCL group per step (otherwise the two sends deadlock past NCCL's eager size).
  expect_clean(2, "--model tiny-dense --seq 256 --cp 2 --gbs 2 --nproc 2");
}

TEST(CudaMultiGpu, ContextParallelAllGather) {
  expect_clean(2, "--model tiny-dense --seq 256 --cp 2 --cp-comm allgather --gbs 2 --nproc 2");
}

TEST(CudaMultiGpu, ContextParallelWithTensorParallel) {
  // Rank order tp-cp-...: tp pairs {0,1} {2,3}, cp rings {0,2} {1,3}.
  expect_clean(4, "--model tiny-dense --seq 256 --tp 2 --cp 2 --gbs 2 --nproc 4");
}

// Telemetry is the job's (issue 40 item 6): a bench of one rank on a host of several GPUs records the GPU its
// rank runs on, and `calo record` under CUDA_VISIBLE_DEVICES=1 records NVML's GPU 1 alone, labelled gpu1.
TEST(CudaMultiGpu, TelemetryRecordsTheJobsGpusNotTheHosts) {
  if (visible_gpus() < 2)
    GTEST_SKIP() << "needs 2 GPUs (one the job's, one not), " << visible_gpus() << " visible";
  const std::string out = ::testing::TempDir() + "/calo-scope-$$";
  const Result bench =
      run_shell("CUDA_VISIBLE_DEVICES=1 " + calo_executable() +
                " bench --backend cuda --model tiny-dense --steps 2 --warmup 1 --no-progress "
                "--json --out " +
                out + "-bench 2>&1");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_EQ(occurrences(bench.output, "\"kind\": \"gpu\""), 1) << bench.output;
  EXPECT_EQ(occurrences(bench.output, "\"slot\": 1"), 1) << bench.output;  // NVML GPU 1, not CUDA index 0
  EXPECT_EQ(occurrences(bench.output, "\"slot\": 0"), 0) << bench.output;
  EXPECT_NE(bench.output.find("left out: the job's are GPU-"), std::string::npos) << bench.output;
  const Result record = run_shell("CUDA_VISIBLE_DEVICES=1 " + calo_executable() +
                                  " record --quiet --json --out " + out + "-record -- sleep 1 2>&1");
  ASSERT_EQ(record.exit_code, 0) << record.output;
  EXPECT_EQ(occurrences(record.output, "\"label\": \"gpu"), 1) << record.output;
  EXPECT_EQ(occurrences(record.output, "\"label\": \"gpu1\""), 1) << record.output;
  const Result every = run_shell(calo_executable() + " record --gpus all --quiet --json --out " + out +
                                 "-all -- sleep 1 2>&1");
  ASSERT_EQ(every.exit_code, 0) << every.output;
  EXPECT_EQ(occurrences(every.output, "\"label\": \"gpu"), visible_gpus()) << every.output;
}

}  // namespace
