// Exported files parse (issue 67 items 9 and 10): a run holding hostile values — a metric name with a comma,
// quote and line break, an INT64_MIN sample time, ±Inf samples, a span spanning all of int64 — is
// exported and read back through real parsers (nlohmann::json for the Perfetto trace, python3's csv module
// for the CSV files). Also: export refuses the damaged run times report refuses, and neither command
// replaces a symlink or FIFO named by --out.
#include "report/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/run_calo.h"
#include "analyze/metrics.h"
#include "core/error.h"
#include "store/sqlite_db.h"
#include "synthetic_run.h"

namespace calo::report {
namespace {

constexpr int64_t kMinNs = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max();
const char* const kHostileMetric = "power, \"odd\"\nname_w";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A one-GPU run whose samples and spans hold the values that once made invalid JSON or broken CSV rows.
void write_hostile_run(const std::filesystem::path& run_dir) {
  store::RunInfo info;
  info.name = "hostile";
  info.started_ns = 1'000;
  info.wall_offset_ns = 1'800'000'000'000'000'000;
  store::RunWriter writer(run_dir, info);
  writer.add_device(store::DeviceInfo{0, 0, 0, store::DeviceKind::kGpu, "GPU", "", "", 700, 1980, ""});
  const int32_t hostile = writer.metric_id(kHostileMetric, "W,\"", store::MetricKind::kGauge);
  // SQLite stores a NaN as NULL (refused by the NOT NULL column): ±Inf is what a store can hold.
  writer.append(store::Sample{0, hostile, kMinNs, 1.5, store::kNoSensorTime});
  writer.append(store::Sample{0, hostile, -1'500, std::numeric_limits<double>::infinity(), 7});
  writer.append(
      store::Sample{0, hostile, 2'001, -std::numeric_limits<double>::infinity(), store::kNoSensorTime});
  writer.append(store::Sample{0, hostile, kMaxNs, 2.5, kMaxNs});
  writer.append_span(store::Span{0, 0, store::SpanKind::kKernel, "gemm,\"x\"\r\ny", "comm,\n", kMinNs, kMaxNs,
                                 1, store::kNone, store::kNone});
  writer.add_summary(store::SummaryRow{"gpu0,\n", "mean_w", std::numeric_limits<double>::infinity(), "W"});
  writer.finish(info.started_ns + 10'000);
}

// `csv_path` parsed by python3's csv module, as JSON: a list of rows, each a list of strings.
nlohmann::json parse_csv_with_python(const std::filesystem::path& csv_path) {
  const testing::Outcome parsed = testing::run_shell(
      "python3 -c 'import csv, json, sys; print(json.dumps(list(csv.reader(open(sys.argv[1], "
      "newline=\"\")))))' " +
      csv_path.string());
  EXPECT_EQ(parsed.exit_code, 0) << parsed.output;
  return nlohmann::json::parse(parsed.output);
}

TEST(ExportRoundTrip, APerfettoTraceOfHostileValuesParsesAndKeepsThem) {
  calo::testing::TempDir dir("export-hostile-json");
  write_hostile_run(dir.path / "run");
  const ExportStats stats = export_perfetto(dir.path / "run", dir.path / "trace.json");
  EXPECT_EQ(stats.samples, 4);
  const nlohmann::json trace =
      nlohmann::json::parse(read_text(dir.path / "trace.json"));  // throws if invalid
  std::vector<nlohmann::json> counters;
  std::vector<nlohmann::json> slices;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "C") counters.push_back(event);
    if (event["ph"] == "X") slices.push_back(event);
  }
  ASSERT_EQ(counters.size(), 4u);
  EXPECT_EQ(counters[0]["name"], std::string(kHostileMetric) + " [W,\"]");
  EXPECT_DOUBLE_EQ(counters[0]["ts"].get<double>(), -9223372036854775.808);
  EXPECT_DOUBLE_EQ(counters[0]["args"]["value"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(counters[1]["ts"].get<double>(), -1.5);
  EXPECT_TRUE(counters[1]["args"]["value"].is_null());  // +Inf: no number, not 0
  EXPECT_TRUE(counters[2]["args"]["value"].is_null());  // -Inf
  EXPECT_DOUBLE_EQ(counters[3]["ts"].get<double>(), 9223372036854775.807);
  EXPECT_DOUBLE_EQ(counters[3]["args"]["value"].get<double>(), 2.5);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0]["name"], "gemm,\"x\"\r\ny");
  EXPECT_GT(slices[0]["dur"].get<double>(), 0);  // the overflowing duration saturates, never negative
}

TEST(ExportRoundTrip, MicrosecondsOfEveryInt64AreAJsonNumber) {
  EXPECT_EQ(microseconds_text(0), "0.000");
  EXPECT_EQ(microseconds_text(1'234'567), "1234.567");
  EXPECT_EQ(microseconds_text(-1), "-0.001");
  EXPECT_EQ(microseconds_text(-1'500), "-1.500");
  EXPECT_EQ(microseconds_text(kMinNs), "-9223372036854775.808");
  EXPECT_EQ(microseconds_text(kMaxNs), "9223372036854775.807");
}

TEST(ExportRoundTrip, CsvFilesOfHostileValuesParseRowForRow) {
  calo::testing::TempDir dir("export-hostile-csv");
  write_hostile_run(dir.path / "run");
  export_csv(dir.path / "run", dir.path / "csv");
  const nlohmann::json samples = parse_csv_with_python(dir.path / "csv" / "samples.csv");
  ASSERT_EQ(samples.size(), 5u) << samples.dump();
  EXPECT_EQ(samples[0], nlohmann::json({"t_ns", "device_idx", "metric", "unit", "value", "sensor_t_ns"}));
  EXPECT_EQ(samples[1], nlohmann::json({"-9223372036854775808", "0", kHostileMetric, "W,\"", "1.5", ""}));
  EXPECT_EQ(samples[2], nlohmann::json({"-1500", "0", kHostileMetric, "W,\"", "", "7"}));  // +Inf: empty
  EXPECT_EQ(samples[3], nlohmann::json({"2001", "0", kHostileMetric, "W,\"", "", ""}));    // -Inf: empty
  EXPECT_EQ(samples[4], nlohmann::json({"9223372036854775807", "0", kHostileMetric, "W,\"", "2.5",
                                        "9223372036854775807"}));
  const nlohmann::json spans = parse_csv_with_python(dir.path / "csv" / "spans.csv");
  ASSERT_EQ(spans.size(), 2u) << spans.dump();
  EXPECT_EQ(spans[1][3], "gemm,\"x\"\r\ny");
  EXPECT_EQ(spans[1][4], "comm,\n");
  const nlohmann::json summaries = parse_csv_with_python(dir.path / "csv" / "summaries.csv");
  ASSERT_EQ(summaries.size(), 2u) << summaries.dump();
  EXPECT_EQ(summaries[1], nlohmann::json({"gpu0,\n", "mean_w", "", "W"}));
}

TEST(ExportRoundTrip, CsvExportRefusesTheRunTimesReportRefuses) {
  calo::testing::TempDir dir("export-damaged-times");
  calo::testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord);
  {
    store::detail::Database db(dir.path / "run" / "run.db", SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET started_ns = -9223372036854775000");
  }
  EXPECT_THROW(analyze::analyze_run(dir.path / "run"), InputError);
  EXPECT_THROW(export_csv(dir.path / "run", dir.path / "csv"), InputError);
  EXPECT_THROW(export_perfetto(dir.path / "run", dir.path / "trace.json"), InputError);
  EXPECT_FALSE(std::filesystem::exists(dir.path / "csv"));
}

// `calo export` and `calo report` with --out naming a symlink or a FIFO: exit 2, the message names the flag,
// the path and what it is, and the link and FIFO are left as they were.
TEST(ExportRoundTrip, ExportAndReportRefuseToReplaceASymlinkOrAFifo) {
  const auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("export-special-out");
  calo::testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord);
  std::ofstream(dir.path / "victim.txt") << "keep\n";
  std::filesystem::create_symlink(dir.path / "victim.txt", dir.path / "link");
  ASSERT_EQ(mkfifo((dir.path / "fifo").c_str(), 0600), 0);
  const std::string run = (dir.path / "run").string();
  for (const std::string& command :
       {" export " + run + " --format perfetto --out ", " report " + run + " --out "}) {
    for (const char* target : {"link", "fifo"}) {
      const std::string out = (dir.path / target).string();
      const testing::Outcome outcome = testing::run_shell(calo.string() + command + out + " 2>&1");
      EXPECT_EQ(outcome.exit_code, 2) << command << target << ": " << outcome.output;
      const std::string what = std::string(target) == "link" ? "a symbolic link" : "a FIFO (named pipe)";
      EXPECT_NE(outcome.output.find("--out " + out + " is " + what + ", not a regular file"),
                std::string::npos)
          << outcome.output;
    }
  }
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path / "link"));
  EXPECT_TRUE(std::filesystem::is_fifo(dir.path / "fifo"));
  EXPECT_EQ(read_text(dir.path / "victim.txt"), "keep\n");
}

// A Kineto trace whose kernel names hold commas, quotes and line breaks (tests/fuzz/corpus/kineto_trace),
// ingested and exported by the real binary: both exports parse back to the same names.
TEST(ExportRoundTrip, AnIngestedTraceWithHostileNamesExportsToFilesThatParse) {
  const auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("export-ingested-hostile");
  const auto trace = std::filesystem::path(CALO_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "kineto_trace" /
                     "names-with-commas-quotes-newlines.json";
  const std::string run = (dir.path / "run").string();
  testing::Outcome outcome =
      testing::run_shell(calo.string() + " ingest " + trace.string() + " --out " + run + " 2>&1");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = testing::run_shell(calo.string() + " export " + run + " --format perfetto --out " +
                               (dir.path / "t.json").string() + " 2>&1");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  outcome = testing::run_shell(calo.string() + " export " + run + " --format csv --out " +
                               (dir.path / "csv").string() + " 2>&1");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  std::set<std::string> json_names;
  const nlohmann::json exported = nlohmann::json::parse(read_text(dir.path / "t.json"));
  for (const auto& event : exported["traceEvents"])
    if (event["ph"] == "X") json_names.insert(event["name"].get<std::string>());
  std::set<std::string> csv_names;
  const nlohmann::json spans = parse_csv_with_python(dir.path / "csv" / "spans.csv");
  for (std::size_t row = 1; row < spans.size(); ++row) csv_names.insert(spans[row][3].get<std::string>());
  EXPECT_EQ(json_names, csv_names);
  EXPECT_EQ(json_names.count("gemm, \"odd\"\nname\r"), 1u) << nlohmann::json(json_names).dump();
}

}  // namespace
}  // namespace calo::report
