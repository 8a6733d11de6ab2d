// Socket bootstrap between real forked processes (all_gather, barrier, one blob per group from its first
// rank), launch detection from the environment, memory plan refusals with their breakdown, and model slices.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "exec/bootstrap.h"
#include "exec/launch.h"
#include "exec/plan.h"
#include "model/model_spec.h"
#include "parallel/memory.h"
#include "parallel/validate.h"

namespace calo::exec {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::string text_of(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

/// Body of one forked rank; returns its exit code (0 = every expectation held).
int socket_rank(int rank, int world, const std::string& path) {
  LaunchInfo launch;
  launch.rank = rank;
  launch.world_size = world;
  launch.launcher = "nproc";
  launch.bootstrap_path = path;
  auto bootstrap = make_bootstrap(launch, 20.0);
  if (bootstrap->kind() != "socket") return 10;
  const auto gathered =
      bootstrap->all_gather(bytes_of(std::string(static_cast<size_t>(rank + 1), 'a' + rank)));
  for (int peer = 0; peer < world; ++peer) {
    if (text_of(gathered[static_cast<size_t>(peer)]) !=
        std::string(static_cast<size_t>(peer + 1), 'a' + peer))
      return 11;
  }
  bootstrap->barrier();
  // Groups {0,1}, {2,3}, {1,3}: the first rank of each makes the blob.
  const std::vector<graph::CommGroup> groups = {
      {graph::GroupKind::kTp, {0, 1}}, {graph::GroupKind::kTp, {2, 3}}, {graph::GroupKind::kDp, {1, 3}}};
  const auto blobs = share_group_blobs(*bootstrap, groups, [&](int group_id) {
    return bytes_of("id" + std::to_string(group_id) + "from" + std::to_string(rank));
  });
  for (size_t group_id = 0; group_id < groups.size(); ++group_id) {
    const auto& members = groups[group_id].ranks;
    const bool member = std::find(members.begin(), members.end(), rank) != members.end();
    const std::string want =
        member ? "id" + std::to_string(group_id) + "from" + std::to_string(members[0]) : "";
    if (text_of(blobs[group_id]) != want) return 12;
  }
  return 0;
}

TEST(SocketBootstrap, FourProcessesExchangeBlobsAndGroupIds) {
  const std::string path = "/tmp/calo-exec-test-" + std::to_string(getpid()) + ".sock";
  constexpr int kWorld = 4;
  std::vector<pid_t> children;
  for (int rank = 0; rank < kWorld; ++rank) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int code = 20;
      try {
        code = socket_rank(rank, kWorld, path);
      } catch (const std::exception& error) {
        std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
      }
      std::_Exit(code);
    }
    children.push_back(child);
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    int status = 0;
    ASSERT_EQ(waitpid(children[static_cast<size_t>(rank)], &status, 0), children[static_cast<size_t>(rank)]);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "rank " << rank;
  }
}

TEST(Launch, ReadsSpawnedRankEnvironment) {
  ::setenv(kEnvRank, "2", 1);
  ::setenv(kEnvWorldSize, "4", 1);
  ::setenv(kEnvBootstrap, "/tmp/x.sock", 1);
  const LaunchInfo launch = detect_launch();
  ::unsetenv(kEnvRank);
  ::unsetenv(kEnvWorldSize);
  ::unsetenv(kEnvBootstrap);
  EXPECT_EQ(launch.launcher, "nproc");
  EXPECT_EQ(launch.rank, 2);
  EXPECT_EQ(launch.world_size, 4);
  EXPECT_EQ(launch.local_rank, 2);
  EXPECT_EQ(launch.bootstrap_path, "/tmp/x.sock");
}

TEST(Launch, ReadsOpenMpiEnvironment) {
  ::setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  const LaunchInfo launch = detect_launch();
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE"})
    ::unsetenv(name);
  EXPECT_EQ(launch.launcher, "mpi");
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 8);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_world_size, 2);
}

DeviceDescription gpu_with(double memory_bytes) {
  DeviceDescription device;
  device.backend = "cuda";
  device.name = "test GPU";
  device.memory_bytes = memory_bytes;
  return device;
}

TEST(MemoryPlan, RefusesALayoutThatDoesNotFitWithBreakdownAndFixes) {
  const model::ModelSpec spec = model::load_model("llama3-70b");
  parallel::Layout layout;
  layout.tp = 4;
  layout = parallel::resolve_layout(spec, layout);
  const DeviceDescription device = gpu_with(141e9);
  const MemoryPlan plan = plan_memory(spec, layout, device);
  EXPECT_FALSE(plan.fits());
  try {
    require_fits(plan, spec, layout, device);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("weights"), std::string::npos) << message;
    EXPECT_NE(message.find("optimizer"), std::string::npos) << message;
    EXPECT_NE(message.find("activations"), std::string::npos) << message;
    EXPECT_NE(message.find("--layers"), std::string::npos) << message;
  }
}

TEST(MemoryPlan, SuggestsEachHigherZeroStageThatFits) {
  // Llama3-8B over dp 8 on an 80 GB GPU without ZeRO: 16 bytes per parameter do not fit; each of --zero 1, 2,
  // 3 is suggested exactly when its accounted total fits.
  const model::ModelSpec spec = model::load_model("llama3-8b");
  parallel::Layout layout;
  layout.dp = 8;
  layout = parallel::resolve_layout(spec, layout);
  const DeviceDescription device = gpu_with(80e9);
  const MemoryPlan plan = plan_memory(spec, layout, device);
  ASSERT_FALSE(plan.fits());
  std::string message;
  try {
    require_fits(plan, spec, layout, device);
  } catch (const InputError& error) {
    message = error.what();
  }
  int suggested = 0;
  for (int stage : {1, 2, 3}) {
    parallel::Layout variant = layout;
    variant.zero_stage = stage;
    const bool fits = parallel::memory_per_gpu(spec, variant).total_bytes() <= plan.usable_bytes;
    const bool listed = message.find("--zero " + std::to_string(stage) + " (") != std::string::npos;
    EXPECT_EQ(listed, fits) << "zero " << stage << ": " << message;
    suggested += listed;
  }
  EXPECT_GE(suggested, 1) << message;
}

TEST(MemoryPlan, ASliceOfTheSameShapesFits) {
  const model::ModelSpec full = model::load_model("llama3-70b");
  const model::ModelSpec slice = model::slice_model(full, 2);
  EXPECT_EQ(slice.num_layers, 2);
  EXPECT_EQ(slice.hidden_size, full.hidden_size);
  EXPECT_EQ(slice.ffn_hidden_size, full.ffn_hidden_size);
  EXPECT_EQ(slice.name, "llama3-70b-slice2");
  parallel::Layout layout;
  layout.tp = 4;
  layout = parallel::resolve_layout(slice, layout);
  const MemoryPlan plan = plan_memory(slice, layout, gpu_with(141e9));
  EXPECT_TRUE(plan.fits()) << plan.breakdown.total_bytes();
  EXPECT_NO_THROW(require_fits(plan, slice, layout, gpu_with(141e9)));
}

TEST(MemoryPlan, LongSequencesAreOfferedContextParallel) {
  // Llama3-8B slice of 4 layers at 64K tokens on an 80 GB GPU: activations do not fit one rank; splitting the
  // sequence over cp ranks is among the suggested fixes (with the rank count it needs).
  const model::ModelSpec slice = model::slice_model(model::load_model("llama3-8b"), 4);
  parallel::Layout layout;
  layout.seq_length = 65536;
  layout = parallel::resolve_layout(slice, layout);
  const MemoryPlan plan = plan_memory(slice, layout, gpu_with(80e9));
  ASSERT_FALSE(plan.fits()) << plan.breakdown.total_bytes();
  try {
    require_fits(plan, slice, layout, gpu_with(80e9));
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("--cp 4 (--nproc 4)"), std::string::npos) << message;
  }
}

TEST(Slice, NamesAndBounds) {
  EXPECT_EQ(parse_slice_name("llama3-70b-slice"), std::make_pair(std::string("llama3-70b"), true));
  EXPECT_EQ(parse_slice_name("llama3-70b"), std::make_pair(std::string("llama3-70b"), false));
  const model::ModelSpec full = model::load_model("tiny-dense");
  EXPECT_THROW(model::slice_model(full, 0), InputError);
  EXPECT_THROW(model::slice_model(full, full.num_layers + 1), InputError);
  EXPECT_EQ(model::slice_model(full, full.num_layers).name, "tiny-dense");
}

}  // namespace
}  // namespace calo::exec
