// `calo merge` end to end: the real binary on two real node runs; exit codes 0 / 2 and the merged result.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "store/run_store.h"
#include "temp_dir.h"

namespace calo::store {
namespace {

using testing::TempDir;

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

CommandResult run_calo(const std::string& arguments) {
  std::string command = std::string(CALO_BINARY) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  CommandResult result;
  std::array<char, 4096> buffer{};
  std::size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), got);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

void write_node(const std::filesystem::path& dir, int64_t wall_offset_ns, int gpus) {
  RunInfo info;
  info.host = dir.filename().string();
  info.started_ns = 42;
  info.wall_offset_ns = wall_offset_ns;
  RunWriter writer(dir, info);
  int32_t power = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
  for (int gpu = 0; gpu < gpus; ++gpu) {
    DeviceInfo device;
    device.idx = gpu;
    device.slot = gpu;
    writer.add_device(device);
    writer.append(Sample{gpu, power, 1000, 100.0 * gpu, kNoSensorTime});
  }
  writer.finish(42 + 2000);
}

TEST(CaloMerge, MergesTwoNodeRunsFromTheCommandLine) {
  TempDir temp;
  write_node(temp.path() / "nodeA", 1'800'000'000'000'000'000, 2);
  write_node(temp.path() / "nodeB", 1'800'000'000'000'000'000 - 3'000, 4);  // started 3 µs earlier
  std::string out = (temp.path() / "merged").string();
  CommandResult result = run_calo("merge " + (temp.path() / "nodeA").string() + " " +
                                  (temp.path() / "nodeB").string() + " --out " + out + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  nlohmann::json json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["nodes"], 2);
  EXPECT_EQ(json["devices"], 6);
  EXPECT_EQ(json["samples"], 6);
  EXPECT_EQ(json["shift_ns"][0], 3000);
  EXPECT_EQ(json["shift_ns"][1], 0);
  RunReader reader(out);
  EXPECT_EQ(reader.devices().size(), 6u);
  EXPECT_EQ(reader.samples(1, reader.find_metric("power_instant_w")->id).at(0).t_ns, 4000);
}

TEST(CaloMerge, BadUsageExitsWithTwoAndNamesTheProblem) {
  TempDir temp;
  write_node(temp.path() / "nodeA", 1'800'000'000'000'000'000, 1);
  CommandResult into_itself =
      run_calo("merge " + (temp.path() / "nodeA").string() + " --out " + (temp.path() / "nodeA").string());
  EXPECT_EQ(into_itself.exit_code, 2) << into_itself.output;
  EXPECT_NE(into_itself.output.find("already holds a run"), std::string::npos) << into_itself.output;
  CommandResult no_out = run_calo("merge " + (temp.path() / "nodeA").string());
  EXPECT_EQ(no_out.exit_code, 2) << no_out.output;
  CommandResult missing =
      run_calo("merge " + (temp.path() / "nope").string() + " --out " + (temp.path() / "m").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
}

// `cp -r R R2; calo merge R R2` once merged (exit 0) a run with itself, doubling its data.
TEST(CaloMerge, ACopiedRunDirectoryIsRefusedWithExitTwo) {
  TempDir temp;
  write_node(temp.path() / "nodeA", 1'800'000'000'000'000'000, 1);
  std::filesystem::copy(temp.path() / "nodeA", temp.path() / "nodeA-copy",
                        std::filesystem::copy_options::recursive);
  const std::string uuid = RunReader(temp.path() / "nodeA").run().uuid;
  CommandResult result =
      run_calo("merge " + (temp.path() / "nodeA").string() + " " + (temp.path() / "nodeA-copy").string() +
               " --out " + (temp.path() / "merged").string());
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find((temp.path() / "nodeA-copy").string() + " is a copy of " +
                               (temp.path() / "nodeA").string() + " (same run id " + uuid + ")"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(temp.path() / "merged" / "run.db"));
}

}  // namespace
}  // namespace calo::store
