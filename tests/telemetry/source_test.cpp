// Sources on real files: counter unwrapping, the procfs/sysfs source on this host's /proc and on a file tree
// laid out like /sys (powercap energy_uj with a wrap, hwmon package temperatures).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../common/scratch.h"
#include "telemetry/nvml_source.h"
#include "telemetry/procfs_source.h"

namespace calo::telemetry {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A fresh fake /proc + /sys tree for this test (removed first), with a /proc/stat of 1000 ticks, 200 busy.
fs::path fake_host_root() {
  const fs::path root = calo::testing::scratch_path(
      std::string("procfs-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(root);
  write_file(root / "proc" / "stat", "cpu  100 0 100 800 0 0 0 0 0 0\n");
  return root;
}

const MetricInfo* find_metric(const DeviceInfo& device, const std::string& name, size_t* index) {
  for (size_t position = 0; position < device.metrics.size(); ++position) {
    if (device.metrics[position].name == name) {
      *index = position;
      return &device.metrics[position];
    }
  }
  return nullptr;
}

TEST(CounterUnwrapper, ThirtyTwoBitWrapContinuesTheCount) {
  CounterUnwrapper counter(32);
  EXPECT_EQ(counter.unwrap(4'294'967'000ULL), 4'294'967'000ULL);
  EXPECT_EQ(counter.unwrap(100), 4'294'967'296ULL + 100);  // wrapped once
  EXPECT_EQ(counter.unwrap(5000), 4'294'967'296ULL + 5000);
  EXPECT_EQ(counter.wraps(), 1);
}

TEST(CounterUnwrapper, SixtyFourBitDecreaseIsAResetNotAWrap) {
  CounterUnwrapper counter(64);
  EXPECT_EQ(counter.unwrap(1'000'000), 1'000'000u);
  EXPECT_EQ(counter.unwrap(10), 1'000'010u);  // continues from the last total
  EXPECT_EQ(counter.unwrap(20), 1'000'020u);
}

TEST(ProcfsSource, ReadsThisHostsCpuAndMemory) {
  ProcfsSource source;
  ASSERT_TRUE(source.available()) << source.unavailable_reason();
  ASSERT_EQ(source.devices().size(), 1u);
  const DeviceInfo& host = source.devices()[0];
  size_t util_index = 0;
  size_t mem_index = 0;
  ASSERT_NE(find_metric(host, "cpu_util_pct", &util_index), nullptr);
  ASSERT_NE(find_metric(host, "host_mem_used_bytes", &mem_index), nullptr);
  const Reading memory = source.read(0, mem_index);
  ASSERT_EQ(memory.status, ReadStatus::kOk) << memory.error;
  EXPECT_GT(memory.value, 1e6);
  usleep(50'000);  // /proc/stat ticks at 100 Hz
  const Reading util = source.read(0, util_index);
  ASSERT_EQ(util.status, ReadStatus::kOk) << util.error;
  EXPECT_GE(util.value, 0.0);
  EXPECT_LE(util.value, 100.0);
}

TEST(ProcfsSource, CpuUtilizationBetweenTicksIsTheLastValueNotAnError) {
  const fs::path root = fake_host_root();
  write_file(root / "proc" / "meminfo", "MemTotal: 1000 kB\nMemAvailable: 400 kB\n");
  fs::create_directories(root / "sys");
  ProcfsSource source(root / "proc", root / "sys");  // reads the baseline
  size_t index = 0;
  ASSERT_NE(find_metric(source.devices()[0], "cpu_util_pct", &index), nullptr);
  EXPECT_EQ(source.read(0, index).status, ReadStatus::kError);  // no tick since the baseline: nothing to say
  write_file(root / "proc" / "stat", "cpu  130 0 100 870 0 0 0 0 0 0\n");  // 30 busy of 100 ticks
  const Reading first = source.read(0, index);
  ASSERT_EQ(first.status, ReadStatus::kOk) << first.error;
  EXPECT_DOUBLE_EQ(first.value, 30.0);
  const Reading same_tick = source.read(0, index);  // read again within the same tick
  ASSERT_EQ(same_tick.status, ReadStatus::kOk) << same_tick.error;
  EXPECT_DOUBLE_EQ(same_tick.value, 30.0);
  write_file(root / "proc" / "stat", "cpu  140 0 100 960 0 0 0 0 0 0\n");  // 10 busy of 100 ticks
  EXPECT_DOUBLE_EQ(source.read(0, index).value, 10.0);
  fs::remove_all(root);
}

TEST(ProcfsSource, SaysWhatIsNotAvailable) {
  const fs::path root = fake_host_root();
  write_file(root / "proc" / "meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n");
  fs::create_directories(root / "sys");
  ProcfsSource source(root / "proc", root / "sys");
  ASSERT_TRUE(source.available());
  const DeviceInfo& host = source.devices()[0];
  size_t index = 0;
  EXPECT_EQ(find_metric(host, "cpu_energy_j", &index), nullptr);
  ASSERT_EQ(host.unsupported.size(), 2u);
  EXPECT_NE(host.unsupported[0].find("cpu_energy_j: not available"), std::string::npos);
  EXPECT_NE(host.unsupported[1].find("temp_cpu_c: not available"), std::string::npos);
  ASSERT_NE(find_metric(host, "host_mem_used_bytes", &index), nullptr);
  EXPECT_DOUBLE_EQ(source.read(0, index).value, 600.0 * 1024);
  fs::remove_all(root);
}

TEST(ProcfsSource, PowercapEnergyUnwrapsAndHwmonGivesHottestPackage) {
  const fs::path root = fake_host_root();
  write_file(root / "proc" / "meminfo", "MemTotal: 1000 kB\nMemAvailable: 400 kB\n");
  const fs::path zone0 = root / "sys" / "class" / "powercap" / "intel-rapl:0";
  const fs::path zone1 = root / "sys" / "class" / "powercap" / "intel-rapl:1";
  write_file(zone0 / "energy_uj", "999000000\n");
  write_file(zone0 / "max_energy_range_uj", "999999999\n");
  write_file(zone1 / "energy_uj", "5000000\n");
  write_file(zone1 / "max_energy_range_uj", "999999999\n");
  write_file(root / "sys" / "class" / "powercap" / "intel-rapl:0:0" / "energy_uj",
             "1\n");  // a sub-zone: ignored
  const fs::path chip = root / "sys" / "class" / "hwmon" / "hwmon3";
  write_file(chip / "name", "coretemp\n");
  write_file(chip / "temp1_label", "Package id 0\n");
  write_file(chip / "temp1_input", "45000\n");
  write_file(chip / "temp2_label", "Core 0\n");
  write_file(chip / "temp2_input", "80000\n");  // a core, not a package: ignored
  write_file(chip / "temp3_label", "Package id 1\n");
  write_file(chip / "temp3_input", "52500\n");
  ProcfsSource source(root / "proc", root / "sys");
  const DeviceInfo& host = source.devices()[0];
  size_t energy_index = 0;
  size_t temp_index = 0;
  ASSERT_NE(find_metric(host, "cpu_energy_j", &energy_index), nullptr);
  ASSERT_NE(find_metric(host, "temp_cpu_c", &temp_index), nullptr);
  EXPECT_DOUBLE_EQ(source.read(0, energy_index).value, 999.0 + 5.0);
  write_file(zone0 / "energy_uj", "1000000\n");  // wrapped past 999999999
  write_file(zone1 / "energy_uj", "6000000\n");
  // zone0: 999 J + (1e9 - 999e6) µJ + 1e6 µJ = 1001 J; zone1: 6 J.
  EXPECT_NEAR(source.read(0, energy_index).value, 1001.0 + 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(source.read(0, temp_index).value, 52.5);
  fs::remove_all(root);
}

TEST(NvmlSource, WithoutADriverSaysWhy) {
  NvmlSource source("libnvidia-ml-does-not-exist.so.1");
  EXPECT_FALSE(source.available());
  // "could not be loaded" when built with nvml.h, "built without nvml.h" otherwise: never silent.
  EXPECT_FALSE(source.unavailable_reason().empty());
  EXPECT_TRUE(source.devices().empty());
}

}  // namespace
}  // namespace calo::telemetry
