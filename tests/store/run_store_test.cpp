// Run store writer/reader: round trip of every table, concurrent appends, commit cadence, drops, bad
// directories.
#include "store/run_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <thread>

#include "core/error.h"
#include "core/time.h"
#include "temp_dir.h"

namespace calo::store {
namespace {

using testing::TempDir;

RunInfo test_run_info() {
  RunInfo info;
  info.kind = RunKind::kBench;
  info.name = "unit";
  info.command = "calo bench --steps 3";
  info.config_json = R"({"steps":3})";
  info.host = "node-a";
  info.started_ns = 1000;
  info.wall_offset_ns = 1'700'000'000'000'000'000;
  return info;
}

// Every store gets a run identity when it is created: a version-4 UUID, different for every store, read back
// as stored; a uuid given to the writer is not taken (a RunInfo copied from another run must not clone it).
TEST(RunStore, EveryStoreHasARunIdOfItsOwn) {
  TempDir temp;
  RunInfo info = test_run_info();
  info.uuid = "00000000-0000-4000-8000-000000000000";
  { RunWriter(temp.path() / "a", info).finish(2000); }
  { RunWriter(temp.path() / "b", info).finish(2000); }
  const std::string first = RunReader(temp.path() / "a").run().uuid;
  const std::string second = RunReader(temp.path() / "b").run().uuid;
  ASSERT_EQ(first.size(), 36u) << first;
  EXPECT_EQ(first[14], '4') << first;                                          // version 4 (random)
  EXPECT_NE(std::string("89ab").find(first[19]), std::string::npos) << first;  // RFC 4122 variant
  EXPECT_NE(first, second);
  EXPECT_NE(first, info.uuid);
}

// A NaN sample (a sensor with no reading) once failed the whole commit: SQLite binds NaN as NULL and the
// NOT NULL value column refused it, so every sample of that second was lost and finish() threw. It is left
// out, counted and told in an event; ±Inf is kept.
TEST(RunStore, ANanSampleIsLeftOutAndCountedNotAFailedCommit) {
  TempDir temp;
  {
    RunWriter writer(temp.path() / "run", test_run_info());
    writer.add_device(DeviceInfo{0, 0, 0, DeviceKind::kGpu, "GPU", "", "", 700, 1980, ""});
    const int32_t power = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
    writer.append(Sample{0, power, 10, 1.0, kNoSensorTime});
    writer.append(Sample{0, power, 20, std::nan(""), kNoSensorTime});
    writer.append(Sample{0, power, 30, std::numeric_limits<double>::infinity(), kNoSensorTime});
    writer.add_summary(SummaryRow{"gpu0", "mean_power_w", std::nan(""), "W"});
    writer.finish(5000);
    EXPECT_EQ(writer.stats().samples_committed, 2u);
    EXPECT_EQ(writer.stats().samples_not_a_number, 1u);
  }
  RunReader reader(temp.path() / "run");
  const std::vector<Sample> samples = reader.samples(0, reader.find_metric("power_instant_w")->id);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].t_ns, 30);
  EXPECT_TRUE(std::isinf(samples[1].value));
  EXPECT_TRUE(reader.summaries().empty());
  ASSERT_EQ(reader.events().size(), 1u);
  EXPECT_EQ(reader.events()[0].message, "1 samples had no value (NaN) and were not stored");
}

TEST(RunStore, RoundTripOfEveryTable) {
  TempDir temp;
  std::filesystem::path run_dir = temp.path() / "run";
  {
    RunWriter writer(run_dir, test_run_info());
    writer.add_device(DeviceInfo{0, 0, 0, DeviceKind::kGpu, "NVIDIA H200", "GPU-1", "0000:18:00.0", 700, 1980,
                                 "580.159.04"});
    writer.add_device(DeviceInfo{1, 0, 1, DeviceKind::kCpu, "host", "", "", 0, 0, ""});
    int32_t power = writer.metric_id("power_instant_w", "W", MetricKind::kGauge);
    int32_t energy = writer.metric_id("energy_j", "J", MetricKind::kCounter);
    EXPECT_EQ(writer.metric_id("power_instant_w", "W", MetricKind::kGauge), power);
    EXPECT_NE(power, energy);
    writer.append(Sample{0, power, 20, 150.5, 15});
    writer.append(Sample{0, power, 10, 100.25, kNoSensorTime});
    writer.append(Sample{0, energy, 10, 5.0, kNoSensorTime});
    writer.append_span(Span{3, 0, SpanKind::kStep, "step", "train", 5, 25, 7, 2, 1});
    writer.append_span(Span{kNone, kNone, SpanKind::kPhase, "gemm", "", 0, 30, kNone, kNone, kNone});
    writer.add_summary(SummaryRow{"gpu0", "energy_j", 12.5, "J"});
    writer.log_event(Event{12, EventLevel::kWarning, 1, "nvml", "metric temp_mem_c unsupported on GPU 1"});
    writer.finish(5000);
    EXPECT_EQ(writer.stats().samples_committed, 3u);
    EXPECT_EQ(writer.stats().samples_dropped, 0u);
  }
  RunReader reader(run_dir);
  RunInfo info = reader.run();
  EXPECT_EQ(info.kind, RunKind::kBench);
  EXPECT_EQ(info.name, "unit");
  EXPECT_EQ(info.command, "calo bench --steps 3");
  EXPECT_EQ(info.config_json, R"({"steps":3})");
  EXPECT_EQ(info.host, "node-a");
  EXPECT_EQ(info.started_ns, 1000);
  EXPECT_EQ(info.ended_ns, 5000);
  EXPECT_EQ(info.wall_offset_ns, 1'700'000'000'000'000'000);
  EXPECT_EQ(info.version, CALO_VERSION);

  std::vector<DeviceInfo> devices = reader.devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].name, "NVIDIA H200");
  EXPECT_EQ(devices[0].pci_bus, "0000:18:00.0");
  EXPECT_DOUBLE_EQ(devices[0].power_limit_w, 700);
  EXPECT_EQ(devices[1].kind, DeviceKind::kCpu);

  std::vector<MetricInfo> metrics = reader.metrics();
  ASSERT_EQ(metrics.size(), 2u);
  std::optional<MetricInfo> power = reader.find_metric("power_instant_w");
  ASSERT_TRUE(power.has_value());
  EXPECT_EQ(power->unit, "W");
  EXPECT_EQ(reader.find_metric("energy_j")->kind, MetricKind::kCounter);
  EXPECT_FALSE(reader.find_metric("nope").has_value());

  std::vector<Sample> samples = reader.samples(0, power->id);
  ASSERT_EQ(samples.size(), 2u);  // time order although appended out of order
  EXPECT_EQ(samples[0].t_ns, 10);
  EXPECT_DOUBLE_EQ(samples[0].value, 100.25);
  EXPECT_EQ(samples[0].sensor_t_ns, kNoSensorTime);
  EXPECT_EQ(samples[1].sensor_t_ns, 15);
  EXPECT_EQ(reader.samples(0, power->id, 11, 100).size(), 1u);
  EXPECT_EQ(reader.sample_count(), 3);

  std::vector<Span> steps = reader.spans(SpanKind::kStep);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].rank, 3);
  EXPECT_EQ(steps[0].step, 7);
  EXPECT_EQ(steps[0].microbatch, 2);
  EXPECT_EQ(steps[0].stage, 1);
  EXPECT_EQ(steps[0].category, "train");
  std::vector<Span> phases = reader.spans(SpanKind::kPhase);
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_EQ(phases[0].device_idx, kNone);
  EXPECT_EQ(phases[0].step, kNone);
  EXPECT_EQ(reader.spans().size(), 2u);

  ASSERT_EQ(reader.summaries().size(), 1u);
  EXPECT_DOUBLE_EQ(reader.summaries("gpu0")[0].value, 12.5);
  EXPECT_TRUE(reader.summaries("gpu1").empty());
  std::vector<Event> events = reader.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].level, EventLevel::kWarning);
  EXPECT_EQ(events[0].device_idx, 1);
  EXPECT_EQ(events[0].message, "metric temp_mem_c unsupported on GPU 1");
}

TEST(RunStore, ConcurrentAppendsFromSeveralThreadsAllArrive) {
  TempDir temp;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50'000;
  RunWriter writer(temp.path() / "run", test_run_info(), WriterOptions{50'000'000, 64u << 20, true});
  int32_t metric = writer.metric_id("util_gpu_pct", "%", MetricKind::kGauge);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread] {
      for (int sequence = 0; sequence < kPerThread; ++sequence) {
        writer.append(Sample{thread, metric, sequence, static_cast<double>(sequence), kNoSensorTime});
      }
    });
  }
  for (auto& thread : threads) thread.join();
  writer.finish(core::monotonic_ns());
  EXPECT_GE(writer.stats().commits, 1u);
  RunReader reader(temp.path() / "run");
  EXPECT_EQ(reader.sample_count(), kThreads * kPerThread);
  for (int thread = 0; thread < kThreads; ++thread) {
    std::vector<Sample> samples = reader.samples(thread, metric);
    ASSERT_EQ(samples.size(), static_cast<std::size_t>(kPerThread));
    for (int sequence = 0; sequence < kPerThread; ++sequence) {
      ASSERT_EQ(samples[static_cast<std::size_t>(sequence)].t_ns, sequence);
    }
  }
}

TEST(RunStore, SamplesBecomeVisibleWithinTheCommitInterval) {
  TempDir temp;
  WriterOptions options;
  options.commit_interval_ns = 100'000'000;  // 100 ms
  RunWriter writer(temp.path() / "run", test_run_info(), options);
  int32_t metric = writer.metric_id("temp_gpu_c", "C", MetricKind::kGauge);
  writer.append(Sample{0, metric, 1, 40.0, kNoSensorTime});
  RunReader reader(temp.path() / "run");  // a concurrent reader, as `calo report` on a live run
  int64_t deadline_ns = core::monotonic_ns() + 2'000'000'000;
  while (reader.sample_count() == 0 && core::monotonic_ns() < deadline_ns) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(reader.sample_count(), 1);
  // flush() commits at once even with a long interval.
  writer.append(Sample{0, metric, 2, 41.0, kNoSensorTime});
  writer.flush();
  EXPECT_EQ(reader.sample_count(), 2);
  EXPECT_EQ(reader.run().ended_ns, 0);  // still open
  writer.finish(77);
  EXPECT_EQ(reader.run().ended_ns, 77);
}

TEST(RunStore, QueueOverflowIsCountedAndLogged) {
  TempDir temp;
  WriterOptions options;
  options.commit_interval_ns = 60'000'000'000;  // no timed commit during the test
  options.max_queued_samples = 10;
  RunWriter writer(temp.path() / "run", test_run_info(), options);
  int32_t metric = writer.metric_id("power_avg_w", "W", MetricKind::kGauge);
  for (int sequence = 0; sequence < 25; ++sequence) {
    writer.append(Sample{0, metric, sequence, 1.0, kNoSensorTime});
  }
  EXPECT_EQ(writer.stats().samples_appended, 10u);
  EXPECT_EQ(writer.stats().samples_dropped, 15u);
  writer.finish(100);
  RunReader reader(temp.path() / "run");
  EXPECT_EQ(reader.sample_count(), 10);
  std::vector<Event> events = reader.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].source, "store");
  EXPECT_NE(events[0].message.find("dropped 15 samples"), std::string::npos) << events[0].message;
}

TEST(RunStore, ManySpansWaitForTheWriterInsteadOfQueueingWholeAndAllAreCommitted) {
  // A simulated run appends millions of op spans at once: the queue is bounded by max_queued_misc (the
  // appender waits for the writer thread to take it), and nothing is lost.
  TempDir temp;
  WriterOptions options;
  options.commit_interval_ns = 60'000'000'000;  // only a full queue wakes the writer during the test
  options.max_queued_misc = 100;
  RunWriter writer(temp.path() / "run", test_run_info(), options);
  constexpr int kSpans = 20'000;
  for (int index = 0; index < kSpans; ++index) {
    Span span;
    span.kind = SpanKind::kOp;
    span.name = "op";
    span.t_begin_ns = index;
    span.t_end_ns = index + 1;
    writer.append_span(span);
  }
  EXPECT_LE(writer.stats().max_queued_misc, 100u);
  EXPECT_GE(writer.stats().commits, kSpans / 100u - 1);
  writer.finish(kSpans);
  RunReader reader(temp.path() / "run");
  EXPECT_EQ(reader.spans(SpanKind::kOp).size(), static_cast<std::size_t>(kSpans));
}

TEST(RunStore, RefusesExistingRunAndUnwritableDirectories) {
  TempDir temp;
  { RunWriter writer(temp.path() / "run", test_run_info()); }
  EXPECT_THROW(RunWriter(temp.path() / "run", test_run_info()), InputError);
  // A regular file where a directory must go: create_directories fails for every user, root included.
  std::ofstream(temp.path() / "file") << "x";
  try {
    RunWriter writer(temp.path() / "file" / "run", test_run_info());
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--out"), std::string::npos) << error.what();
  }
  EXPECT_THROW(make_run_dir(temp.path() / "file", "x"), InputError);
  if (geteuid() != 0) {  // permission bits do not stop root; the case above covers root
    std::filesystem::create_directory(temp.path() / "locked");
    chmod((temp.path() / "locked").c_str(), 0500);
    EXPECT_THROW(RunWriter(temp.path() / "locked", test_run_info()), InputError);
  }
}

TEST(RunStore, ReaderRejectsNonRuns) {
  TempDir temp;
  EXPECT_THROW(RunReader(temp.path()), InputError);  // no run.db
  std::ofstream(temp.path() / "run.db") << "not a database at all, just text that is long enough";
  EXPECT_THROW(RunReader(temp.path()), InputError);
}

TEST(RunStore, MakeRunDirUsesDateAndNameAndNeverReuses) {
  TempDir temp;
  std::filesystem::path first = make_run_dir(temp.path() / "runs", "llama 8b/tp2");
  std::filesystem::path second = make_run_dir(temp.path() / "runs", "llama 8b/tp2");
  EXPECT_TRUE(std::filesystem::is_directory(first));
  EXPECT_NE(first, second);
  std::string name = first.filename().string();
  ASSERT_GE(name.size(), 11u);
  EXPECT_EQ(name[4], '-');
  EXPECT_EQ(name[7], '-');
  EXPECT_EQ(name.substr(11), "llama-8b-tp2");
  EXPECT_EQ(second.filename().string(), name + "-2");
}

TEST(RunStore, KindNamesRoundTripAndBadNamesNameTheChoices) {
  for (auto kind : {SpanKind::kStep, SpanKind::kPhase, SpanKind::kOp, SpanKind::kKernel}) {
    EXPECT_EQ(parse_span_kind(to_string(kind)), kind);
  }
  for (auto kind : {RunKind::kRecord, RunKind::kBench, RunKind::kSim, RunKind::kIngest}) {
    EXPECT_EQ(parse_run_kind(to_string(kind)), kind);
  }
  try {
    parse_metric_kind("gauges");
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("gauge, counter, bitmask"), std::string::npos);
  }
}

}  // namespace
}  // namespace calo::store
