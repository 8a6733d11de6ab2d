// The job's GPUs: CUDA_VISIBLE_DEVICES and --gpus read as CUDA reads them, matched against NVML's index and
// UUID.
#include "telemetry/gpu_scope.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace calo::telemetry {
namespace {

const std::string kUuid0 = "GPU-8f2c1a3b-0000-1111-2222-333344445555";
const std::string kUuid1 = "GPU-1d9e77aa-6666-7777-8888-9999aaaabbbb";

TEST(GpuScope, UnsetMeansEveryGpu) {
  const GpuScope scope = job_gpu_scope(std::nullopt, nullptr, nullptr);
  EXPECT_TRUE(scope.every_gpu);
  EXPECT_TRUE(scope.admits(3, kUuid1));
  EXPECT_EQ(scope.describe(), "every GPU");
  EXPECT_EQ(scope_summary(scope, {}, {"NVIDIA H100", "NVIDIA H100"}), "");
}

TEST(GpuScope, IndicesAndUuidPrefixesAdmitOnlyTheirGpus) {
  const GpuScope scope = job_gpu_scope(std::nullopt, "0, GPU-1d9e", "PCI_BUS_ID");
  ASSERT_EQ(scope.entries, (std::vector<std::string>{"0", "GPU-1d9e"}));
  EXPECT_TRUE(scope.admits(0, kUuid0));
  EXPECT_TRUE(scope.admits(1, kUuid1));  // by UUID prefix
  EXPECT_FALSE(scope.admits(2, "GPU-aaaaaaaa-0000-0000-0000-000000000000"));
  EXPECT_EQ(scope.describe(), "GPUs 0, GPU-1d9e (CUDA_VISIBLE_DEVICES)");
  EXPECT_EQ(scope_summary(scope, {"2", "3"}, std::vector<std::string>(4, "NVIDIA H200")),
            "GPUs 2, 3 of 4 left out: the job's are GPUs 0, GPU-1d9e (CUDA_VISIBLE_DEVICES); --gpus all "
            "records every GPU");
}

TEST(GpuScope, TheListEndsAtTheFirstEntryCudaWouldNotRead) {
  // CUDA reads CUDA_VISIBLE_DEVICES up to the first invalid entry; "-1" is the usual way to hide every GPU.
  const GpuScope cut = job_gpu_scope(std::nullopt, "1,x,2", "PCI_BUS_ID");
  EXPECT_EQ(cut.entries, std::vector<std::string>{"1"});
  EXPECT_NE(cut.note.find("'x' is neither a GPU index nor a GPU UUID"), std::string::npos) << cut.note;
  const GpuScope hidden = job_gpu_scope(std::nullopt, "-1", nullptr);
  EXPECT_FALSE(hidden.every_gpu);
  EXPECT_TRUE(hidden.entries.empty());
  EXPECT_FALSE(hidden.admits(0, kUuid0));
  const GpuScope empty = job_gpu_scope(std::nullopt, "", nullptr);
  EXPECT_FALSE(empty.admits(0, kUuid0));
  EXPECT_EQ(empty.note, "");
  EXPECT_EQ(empty.describe(), "no GPU (CUDA_VISIBLE_DEVICES)");
}

TEST(GpuScope, TheFlagWinsOverTheEnvironmentAndABadFlagIsRefused) {
  const GpuScope flag = job_gpu_scope(std::string("2,3"), "0", nullptr);
  EXPECT_EQ(flag.origin, "--gpus");
  EXPECT_EQ(flag.entries, (std::vector<std::string>{"2", "3"}));
  EXPECT_TRUE(job_gpu_scope(std::string("all"), "0", nullptr).every_gpu);
  try {
    job_gpu_scope(std::string("O"), nullptr, nullptr);
    FAIL() << "--gpus O was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--gpus 'O'"), std::string::npos) << error.what();
  }
  EXPECT_THROW(job_gpu_scope(std::string(""), nullptr, nullptr), InputError);
}

TEST(GpuScope, AMigInstanceWidensToEveryGpuAndSaysSo) {
  const GpuScope scope = job_gpu_scope(std::nullopt, "MIG-4a5b6c7d-0000-1111-2222-333344445555", nullptr);
  EXPECT_TRUE(scope.every_gpu);
  EXPECT_NE(scope.note.find("MIG instance"), std::string::npos) << scope.note;
  EXPECT_NE(scope_summary(scope, {}, {"NVIDIA H100"}).find("MIG instance"), std::string::npos);
}

TEST(GpuScope, IndicesOnAHostOfMixedGpusWarnUnlessCudaCountsByPciBus) {
  const std::vector<std::string> mixed = {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"};
  const GpuScope fastest_first = job_gpu_scope(std::nullopt, "1", nullptr);
  EXPECT_NE(index_order_warning(fastest_first, mixed).find("CUDA_DEVICE_ORDER=PCI_BUS_ID"),
            std::string::npos);
  EXPECT_EQ(index_order_warning(fastest_first, {"NVIDIA H100", "NVIDIA H100"}), "");  // identical: same order
  EXPECT_EQ(index_order_warning(job_gpu_scope(std::nullopt, "1", "PCI_BUS_ID"), mixed), "");
  EXPECT_EQ(index_order_warning(job_gpu_scope(std::nullopt, "GPU-1d9e", nullptr), mixed), "");   // UUIDs
  EXPECT_EQ(index_order_warning(job_gpu_scope(std::string("1"), nullptr, nullptr), mixed), "");  // NVML's own
}

}  // namespace
}  // namespace calo::telemetry
