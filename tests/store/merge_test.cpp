// Merging two node runs: devices renumbered by node, clocks aligned by wall-clock offset, metrics unified.
#include "store/merge.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "../common/damage.h"
#include "core/error.h"
#include "store/run_store.h"
#include "store/sqlite_db.h"
#include "temp_dir.h"

namespace calo::store {
namespace {

using testing::TempDir;

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kWall0 = 1'795'353'851'000'000'000;

// A node run with `gpus` GPUs whose clock starts `wall_delay_ns` after kWall0; sample value = node*100 + gpu.
void write_node_run(const std::filesystem::path& dir, int node, int gpus, int64_t wall_delay_ns,
                    const std::vector<std::string>& metric_names) {
  RunInfo info;
  info.kind = RunKind::kRecord;
  info.host = "node" + std::to_string(node);
  info.started_ns = 5'000 * kSecond + node;  // unrelated monotonic clocks per host
  info.wall_offset_ns = kWall0 + wall_delay_ns;
  RunWriter writer(dir, info);
  std::vector<int32_t> ids;
  for (const auto& name : metric_names) ids.push_back(writer.metric_id(name, "W", MetricKind::kGauge));
  for (int gpu = 0; gpu < gpus; ++gpu) {
    writer.add_device(DeviceInfo{gpu, 0, gpu, DeviceKind::kGpu, "H200", "", "", 700, 1980, ""});
    for (int tick = 0; tick < 10; ++tick) {
      for (int32_t id : ids) {
        writer.append(Sample{gpu, id, tick * kSecond / 10, node * 100.0 + gpu, tick * kSecond / 10 - 5});
      }
    }
  }
  writer.append_span(Span{node, 0, SpanKind::kStep, "step", "", kSecond / 10, kSecond / 5, 1, kNone, kNone});
  writer.add_summary(SummaryRow{"gpu0", "energy_j", 1.0 + node, "J"});
  writer.log_event(Event{kSecond / 2, EventLevel::kError, gpus - 1, "nvml", "GPU fell off the bus"});
  writer.finish(info.started_ns + kSecond);
}

TEST(Merge, RenumbersDevicesAndAlignsClocks) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 2, 250'000'000, {"power_instant_w"});  // started 0.25 s later
  write_node_run(temp.path() / "n1", 1, 3, 0, {"temp_gpu_c", "power_instant_w"});
  MergeResult result = merge_runs({temp.path() / "n0", temp.path() / "n1"}, temp.path() / "merged");
  EXPECT_EQ(result.nodes, 2);
  EXPECT_EQ(result.devices, 5);
  EXPECT_EQ(result.samples, 2 * 10 + 3 * 10 * 2);
  ASSERT_EQ(result.shift_ns.size(), 2u);
  EXPECT_EQ(result.shift_ns[0], 250'000'000);
  EXPECT_EQ(result.shift_ns[1], 0);

  RunReader reader(temp.path() / "merged");
  RunInfo info = reader.run();
  EXPECT_EQ(info.wall_offset_ns, kWall0);  // the earliest node is the time base
  EXPECT_EQ(info.host, "node0,node1");
  EXPECT_EQ(info.ended_ns - info.started_ns, kSecond + 250'000'000);
  std::vector<DeviceInfo> devices = reader.devices();
  ASSERT_EQ(devices.size(), 5u);
  EXPECT_EQ(devices[1].node, 0);
  EXPECT_EQ(devices[1].slot, 1);
  EXPECT_EQ(devices[2].node, 1);
  EXPECT_EQ(devices[2].slot, 0);
  EXPECT_EQ(devices[4].slot, 2);
  EXPECT_EQ(reader.metrics().size(), 2u);  // unified by name

  MetricInfo power = *reader.find_metric("power_instant_w");
  // Node 0's first sample was taken at wall kWall0 + 0.25 s: it sits at t = 0.25 s in the merged run.
  std::vector<Sample> node0_gpu1 = reader.samples(1, power.id);
  ASSERT_EQ(node0_gpu1.size(), 10u);
  EXPECT_EQ(node0_gpu1[0].t_ns, 250'000'000);
  EXPECT_EQ(node0_gpu1[0].sensor_t_ns, 250'000'000 - 5);
  EXPECT_DOUBLE_EQ(node0_gpu1[0].value, 1.0);
  std::vector<Sample> node1_gpu2 = reader.samples(4, power.id);
  ASSERT_EQ(node1_gpu2.size(), 10u);
  EXPECT_EQ(node1_gpu2[0].t_ns, 0);
  EXPECT_DOUBLE_EQ(node1_gpu2[0].value, 102.0);
  EXPECT_EQ(reader.samples(0, reader.find_metric("temp_gpu_c")->id).size(), 0u);

  std::vector<Span> spans = reader.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].rank, 1);  // node 1 (no shift) first
  EXPECT_EQ(spans[0].device_idx, 2);
  EXPECT_EQ(spans[1].t_begin_ns, kSecond / 10 + 250'000'000);
  EXPECT_EQ(reader.summaries("node1/gpu0").at(0).value, 2.0);
  std::vector<Event> events = reader.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device_idx, 4);  // node 1's last GPU
  EXPECT_NE(events[0].message.find("node 1 (node1)"), std::string::npos);
}

// Two hosts that booted 89 000 s apart (unrelated CLOCK_MONOTONIC) record runs started 4 s apart (wall
// clock). `schema` 1 writes wall_offset_ns as calo record did before schema 2: wall-clock time at monotonic
// zero.
void write_host_run(const std::filesystem::path& dir, int64_t uptime_ns, int64_t wall_start_ns, int schema) {
  RunInfo info;
  info.kind = RunKind::kRecord;
  info.host = "uptime" + std::to_string(uptime_ns / kSecond);
  info.started_ns = uptime_ns;
  info.wall_offset_ns = wall_start_ns;
  {
    RunWriter writer(dir, info);
    writer.add_device(DeviceInfo{0, 0, 0, DeviceKind::kGpu, "H100", "", "", 700, 1980, ""});
    const int32_t power = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
    writer.append(Sample{0, power, kSecond, 100.0, kNoSensorTime});
    writer.finish(info.started_ns + 2 * kSecond);
  }
  if (schema == 1) {
    detail::Database db(dir / kRunDbName, SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET wall_offset_ns = wall_offset_ns - started_ns");
    db.exec("PRAGMA user_version=1");
  }
}

TEST(Merge, AlignsRunsOfHostsThatBootedAtDifferentTimesByWallClockAtStart) {
  TempDir temp;
  write_host_run(temp.path() / "a", 1'000 * kSecond, kWall0, 2);
  write_host_run(temp.path() / "b", 90'000 * kSecond, kWall0 + 4 * kSecond, 2);
  const MergeResult result = merge_runs({temp.path() / "a", temp.path() / "b"}, temp.path() / "merged");
  ASSERT_EQ(result.shift_ns.size(), 2u);
  EXPECT_EQ(result.shift_ns[0], 0);
  EXPECT_EQ(result.shift_ns[1], 4 * kSecond);
  RunReader merged(temp.path() / "merged");
  EXPECT_EQ(merged.run().wall_offset_ns, kWall0);
  EXPECT_EQ(merged.samples(1, merged.find_metric("power_instant_w")->id).at(0).t_ns, 5 * kSecond);
}

TEST(Merge, SchemaOneRunsAreReadWithTheWallClockAtStart) {
  TempDir temp;
  write_host_run(temp.path() / "a", 1'000 * kSecond, kWall0, 1);
  write_host_run(temp.path() / "b", 90'000 * kSecond, kWall0 + 4 * kSecond, 1);
  EXPECT_EQ(RunReader(temp.path() / "b").run().wall_offset_ns, kWall0 + 4 * kSecond);
  const MergeResult result = merge_runs({temp.path() / "a", temp.path() / "b"}, temp.path() / "merged");
  ASSERT_EQ(result.shift_ns.size(), 2u);
  EXPECT_EQ(result.shift_ns[0], 0);
  EXPECT_EQ(result.shift_ns[1], 4 * kSecond);
  // Other kinds of schema 1 already held the time at t_ns = 0.
  RunInfo sim;
  sim.kind = RunKind::kSim;
  sim.started_ns = 7 * kSecond;
  sim.wall_offset_ns = kWall0;
  EXPECT_EQ(migrate_run_info(sim, 1).wall_offset_ns, kWall0);
  EXPECT_EQ(migrate_run_info(RunInfo{RunKind::kBench, "", "", "{}", "", 7 * kSecond, 0, kWall0, "", ""}, 1)
                .wall_offset_ns,
            kWall0 + 7 * kSecond);
}

TEST(Merge, RejectsUnalignableRunsAndExistingOutput) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 1, 0, {"power_instant_w"});
  {
    RunInfo no_wall;
    RunWriter writer(temp.path() / "nowall", no_wall);
  }
  EXPECT_THROW(merge_runs({temp.path() / "n0", temp.path() / "nowall"}, temp.path() / "m1"), InputError);
  EXPECT_THROW(merge_runs({temp.path() / "n0"}, temp.path() / "n0"), InputError);
  EXPECT_THROW(merge_runs({}, temp.path() / "m2"), InputError);
  EXPECT_THROW(merge_runs({temp.path() / "missing"}, temp.path() / "m3"), InputError);
}

TEST(Merge, TheSameRunGivenTwiceInAnySpellingIsRefused) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 1, 0, {"power_instant_w"});
  std::filesystem::create_directory_symlink(temp.path() / "n0", temp.path() / "link");
  for (const std::filesystem::path& again :
       {temp.path() / "n0", temp.path() / "." / "n0" / "", temp.path() / "link"}) {
    EXPECT_THROW(merge_runs({temp.path() / "n0", again}, temp.path() / "m"), InputError) << again;
    EXPECT_FALSE(std::filesystem::exists(temp.path() / "m"));
  }
}

TEST(Merge, ADamagedInputLeavesNoPartialRun) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 2, 0, {"power_instant_w"});
  {
    RunInfo info;
    info.kind = RunKind::kRecord;
    info.started_ns = 1;
    info.wall_offset_ns = kWall0;
    RunWriter writer(temp.path() / "big", info);
    const int32_t id = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
    writer.add_device(DeviceInfo{0, 0, 0, DeviceKind::kGpu, "H200", "", "", 700, 1980, ""});
    std::vector<Sample> samples;
    for (int64_t tick = 0; tick < 200'000; ++tick)
      samples.push_back(Sample{0, id, tick * 1000, 1.0 * tick, 0});
    writer.append(samples);
    writer.finish(2);
  }
  calo::testing::damage_second_half(temp.path() / "big");
  EXPECT_ANY_THROW(merge_runs({temp.path() / "n0", temp.path() / "big"}, temp.path() / "merged"));
  EXPECT_FALSE(std::filesystem::exists(temp.path() / "merged"));
  std::filesystem::create_directory(temp.path() / "kept");  // a folder the user made stays, empty
  EXPECT_ANY_THROW(merge_runs({temp.path() / "n0", temp.path() / "big"}, temp.path() / "kept"));
  EXPECT_TRUE(std::filesystem::is_empty(temp.path() / "kept"));
}

// A byte-identical copy of a run (`cp -r R R2`) is the same run: merging both would double its data. Each
// store's run uuid, made when the store is created, tells them apart from a second node's run.
TEST(Merge, ACopiedRunIsRefusedByItsRunId) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 1, 0, {"power_instant_w"});
  write_node_run(temp.path() / "n1", 1, 1, 0, {"power_instant_w"});
  std::filesystem::copy(temp.path() / "n0", temp.path() / "copy", std::filesystem::copy_options::recursive);
  const std::string uuid = RunReader(temp.path() / "n0").run().uuid;
  EXPECT_EQ(RunReader(temp.path() / "copy").run().uuid, uuid);
  EXPECT_NE(RunReader(temp.path() / "n1").run().uuid, uuid);
  try {
    merge_runs({temp.path() / "n0", temp.path() / "n1", temp.path() / "copy"}, temp.path() / "merged");
    ADD_FAILURE() << "a copy of a run was merged with it";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()), (temp.path() / "copy").string() + " is a copy of " +
                                             (temp.path() / "n0").string() + " (same run id " + uuid +
                                             "); merge each run once");
  }
  EXPECT_FALSE(std::filesystem::exists(temp.path() / "merged"));
  const MergeResult result = merge_runs({temp.path() / "n0", temp.path() / "n1"}, temp.path() / "merged");
  EXPECT_NE(RunReader(temp.path() / "merged").run().uuid, uuid);  // a merged run is a run of its own
  EXPECT_EQ(result.nodes, 2);
}

// Stores written before run.uuid existed: their id is derived from the run row, so two nodes' runs still
// merge and a copy of one is still refused.
TEST(Merge, StoresWithoutARunIdGetOneDerivedFromTheirRunRow) {
  TempDir temp;
  for (const char* name : {"n0", "n1"}) {
    write_node_run(temp.path() / name, name[1] - '0', 1, 0, {"power_instant_w"});
    detail::Database db(temp.path() / name / kRunDbName, SQLITE_OPEN_READWRITE);
    db.exec("ALTER TABLE run DROP COLUMN uuid");
  }
  std::filesystem::copy(temp.path() / "n0", temp.path() / "copy", std::filesystem::copy_options::recursive);
  const std::string uuid = RunReader(temp.path() / "n0").run().uuid;
  EXPECT_EQ(uuid.rfind("derived-", 0), 0u) << uuid;
  EXPECT_NE(RunReader(temp.path() / "n1").run().uuid, uuid);
  EXPECT_THROW(merge_runs({temp.path() / "n0", temp.path() / "copy"}, temp.path() / "m"), InputError);
  EXPECT_EQ(merge_runs({temp.path() / "n0", temp.path() / "n1"}, temp.path() / "merged").nodes, 2);
}

// wall_offset_ns values far apart once wrapped the shift (`shift_ns: -1`) and every time shifted by it: the
// merge refuses, naming the input.
TEST(Merge, AShiftThatOverflowsIsRefusedNamingTheInput) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 1, 0, {"power_instant_w"});
  write_node_run(temp.path() / "n1", 1, 1, 0, {"power_instant_w"});
  {
    detail::Database db(temp.path() / "n0" / kRunDbName, SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET wall_offset_ns = -9223372036854775000");
  }
  try {
    merge_runs({temp.path() / "n0", temp.path() / "n1"}, temp.path() / "merged");
    ADD_FAILURE() << "the merge wrapped the shift";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).rfind((temp.path() / "n1").string() + ": wall_offset_ns", 0), 0u)
        << error.what();
  }
  // A shift that fits, but a sample time it would carry past int64's end.
  {
    detail::Database db(temp.path() / "n0" / kRunDbName, SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET wall_offset_ns = " + std::to_string(kWall0 + kSecond));
    db.exec("UPDATE sample SET t_ns = 9223372036854775000 WHERE rowid = 1");
  }
  try {
    merge_runs({temp.path() / "n0", temp.path() / "n1"}, temp.path() / "merged");
    ADD_FAILURE() << "the merge wrapped a sample time";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).rfind((temp.path() / "n0").string() + ": sample time", 0), 0u)
        << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(temp.path() / "merged"));
}

TEST(RunReaderChecks, DamagedRunTimesAreBadInputNotACrash) {
  TempDir temp;
  write_node_run(temp.path() / "n0", 0, 1, 0, {"power_instant_w"});
  {
    detail::Database db(temp.path() / "n0" / "run.db", SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET started_ns = -9223372036854775000");
  }
  EXPECT_THROW(RunReader(temp.path() / "n0").run(), InputError);
  {
    detail::Database db(temp.path() / "n0" / "run.db", SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET started_ns = 10, ended_ns = 9223372036854775000");
  }
  EXPECT_THROW(RunReader(temp.path() / "n0").run(), InputError);
}

TEST(RunReaderChecks, ARunDatabaseThatIsAPipeIsRefusedWithoutOpeningIt) {
  TempDir temp;
  std::filesystem::create_directory(temp.path() / "fifo");
  ASSERT_EQ(mkfifo((temp.path() / "fifo" / "run.db").c_str(), 0600), 0);
  EXPECT_THROW(RunReader reader(temp.path() / "fifo"), InputError);  // used to block in open() forever
}

}  // namespace
}  // namespace calo::store
