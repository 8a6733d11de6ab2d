#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "../common/damage.h"
#include "../common/run_calo.h"
#include "core/error.h"
#include "report/export.h"
#include "report/html_report.h"
#include "report/svg_chart.h"
#include "store/sqlite_db.h"
#include "synthetic_run.h"

namespace calo::report {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Runs `command`, returns its stdout and sets `status` to the exit code.
std::string run_command(const std::string& command, int& status) {
  const testing::Outcome outcome = testing::run_shell(command);
  status = outcome.exit_code;
  return outcome.output;
}

std::string chromium_binary() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return "";
}

int count_of(const std::string& text, const std::string& needle) {
  int count = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

std::string attribute(const std::string& dom, const std::string& name) {
  std::smatch match;
  std::regex pattern("<body[^>]*\\s" + name + "=\"([^\"]*)\"");
  return std::regex_search(dom, match, pattern) ? match[1].str() : "";
}

TEST(Svg, NiceTicksAndEscaping) {
  auto ticks = nice_ticks(0, 97, 5);
  ASSERT_FALSE(ticks.empty());
  EXPECT_DOUBLE_EQ(ticks.front(), 0);
  EXPECT_DOUBLE_EQ(ticks[1], 20);
  EXPECT_EQ(escape_html("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
  std::vector<analyze::Bucket> buckets = {{1, 3, 2, 4}, {0, 0, 0, 0}, {2, 5, 3, 2}};
  std::string svg = time_series_chart("t", "power", "W", 10, {{"GPU 0", buckets}}, {1.0, 5.0});
  EXPECT_NE(svg.find("data-points=\"6\""), std::string::npos);
  EXPECT_NE(svg.find("power (W)"), std::string::npos);
  EXPECT_NE(svg.find("GPU 0"), std::string::npos);
}

// Sparse series: more pixel columns than samples. The mean line joins consecutive samples (one `L` per
// sample after the first), breaks only at a gap of >= 3 sampling periods, and a lone sample is a dot.
TEST(Svg, TimeSeriesJoinsSparseSamplesBreaksAtRealGapsAndDotsLoneSamples) {
  std::vector<analyze::Bucket> buckets(720);
  // Samples every 10 columns in [0, 200], then a gap of 100 columns (10 periods), samples every 10 in
  // [300, 400], then one lone sample at 700 (30 periods after the last).
  int samples = 0;
  for (int column = 0; column <= 400; column += 10) {
    if (column > 200 && column < 300) continue;
    buckets[static_cast<std::size_t>(column)] = {100.0 + column, 100.0 + column, 100.0 + column, 1};
    ++samples;
  }
  buckets[700] = {50, 50, 50, 1};
  std::string svg = time_series_chart("sparse", "power", "W", 1.2, {{"GPU 0", buckets}}, {});
  std::smatch match;
  ASSERT_TRUE(std::regex_search(svg, match, std::regex("<path class=\"line\" d=\"([^\"]*)\"")));
  std::string line = match[1].str();
  EXPECT_EQ(std::count(line.begin(), line.end(), 'M'), 2) << line;  // two stretches
  EXPECT_EQ(std::count(line.begin(), line.end(), 'L'), samples - 2) << line;
  ASSERT_TRUE(std::regex_search(svg, match, std::regex("<path class=\"dots\" d=\"([^\"]*)\"")));
  // x = 70 + (700 + 0.5) * 660 / 720 = 712.1; y range 50..500 W padded by 5 % (27.5..522.5):
  // y = 34 + 220 - (50 - 27.5) / 495 * 220 = 244.0.
  EXPECT_EQ(match[1].str(), "M712.1 244.0h0");
  EXPECT_NE(svg.find("<path class=\"band\""), std::string::npos);
  EXPECT_NE(svg.find("data-points=\"" + std::to_string(samples + 1) + "\""), std::string::npos);
}

// A flat series at 1440 MHz: tick labels are distinct (never 1440, 1440, 1440) and the value is inside.
TEST(Svg, FlatSeriesGetsDistinctReadableTicks) {
  std::vector<analyze::Bucket> buckets(720);
  for (std::size_t column = 0; column < 720; column += 3) buckets[column] = {1440, 1440, 1440, 1};
  std::string svg = time_series_chart("clock", "SM clock", "MHz", 10, {{"GPU 0", buckets}}, {});
  std::regex tick("<text class=\"tick y-tick\"[^>]*>([^<]*)</text>");
  std::vector<std::string> labels;
  for (std::sregex_iterator it(svg.begin(), svg.end(), tick), end; it != end; ++it)
    labels.push_back((*it)[1]);
  ASSERT_GE(labels.size(), 3u);
  EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), labels.size());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "1440"), labels.end());
  // A narrow range: 1439.5 .. 1440.5 needs one decimal.
  for (std::size_t column = 0; column < 720; column += 6) buckets[column] = {1439.5, 1440.5, 1440, 1};
  svg = time_series_chart("clock", "SM clock", "MHz", 10, {{"GPU 0", buckets}}, {});
  labels.clear();
  for (std::sregex_iterator it(svg.begin(), svg.end(), tick), end; it != end; ++it)
    labels.push_back((*it)[1]);
  EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), labels.size());
}

// Per-GPU bars: one rect per (run, GPU) with a value, none for NaN; labels every k-th GPU when crowded.
TEST(Svg, ColumnChartDrawsOneBarPerRunAndGpu) {
  std::vector<std::string> gpus;
  for (int gpu = 0; gpu < 64; ++gpu) gpus.push_back("GPU " + std::to_string(gpu));
  std::vector<std::vector<double>> values(2, std::vector<double>(64, 500));
  values[1][5] = std::nan("");
  std::string svg = column_chart("power", "mean power", "W", gpus, {"measured", "simulated"}, values);
  EXPECT_EQ(count_of(svg, "<rect class=\"bar\""), 127);
  EXPECT_NE(svg.find("data-points=\"127\""), std::string::npos);
  EXPECT_LT(count_of(svg, ">GPU "), 64);  // 64 labels do not fit 660 px: every k-th
  EXPECT_NE(svg.find(">GPU 0<"), std::string::npos);
}

// Renders a measured run (with kernels) and a simulated run, checks the HTML, then loads it in headless
// Chromium: the page's own check script must report every chart non-empty and no JS error; a screenshot is
// kept in the build tree (report_test.png) for a person to look at.
TEST(HtmlReport, RendersInHeadlessChromiumWithEveryChartFilled) {
  calo::testing::TempDir dir("report");
  calo::testing::write_synthetic_run(dir.path / "measured", store::RunKind::kRecord, 1.0, true);
  calo::testing::write_synthetic_run(dir.path / "sim", store::RunKind::kSim, 1.1);
  std::vector<analyze::RunAnalysis> runs = {analyze::analyze_run(dir.path / "measured"),
                                            analyze::analyze_run(dir.path / "sim")};
  std::string html = render_html_report(runs, {"Synthetic report"});
  int charts = count_charts(html);
  // Simulated vs measured (the synthetic runs share a graph): per-GPU bars of mean and peak power, mean
  // temperature and SM clock, and step time per step; comparison bars; per run: 3 time series + heatmap;
  // measured run: 2 kernel charts.
  EXPECT_EQ(charts, 5 + 1 + 2 * 4 + 2);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no network references
  EXPECT_EQ(html.find("https://"), std::string::npos);
  std::regex empty_chart("data-points=\"0\"");
  EXPECT_FALSE(std::regex_search(html, empty_chart));
  for (const char* expected : {"tokens_per_s", "mfu", "samples_per_s_mj", "error vs measured", "node 0",
                               "Stragglers", "all_reduce exposed", "step time"}) {
    EXPECT_NE(html.find(expected), std::string::npos) << expected;
  }
  // A temperature's error is in degrees, as calibration states its tolerance, not a percentage of °C.
  EXPECT_TRUE(
      std::regex_search(html, std::regex("temp_gpu_mean_c</td>[^\n]*class=\"error\">[+-][0-9.]+ °C</td>")))
      << "the simulated-vs-measured row of a temperature";
  auto page = std::filesystem::path(CALO_BINARY_DIR) / "report_test.html";
  std::ofstream(page) << html;

  std::string chromium = chromium_binary();
  if (chromium.empty()) {
    GTEST_SKIP() << "no Chromium: install the Debian package `chromium` (scripts/install_deps.sh) for the "
                    "browser check";
  }
  std::string flags = " --headless=new --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" +
                      (dir.path / "chromium-profile").string();
  int status = 0;
  std::string dom = run_command(
      chromium + flags + " --virtual-time-budget=5000 --dump-dom file://" + page.string() + " 2>/dev/null",
      status);
  ASSERT_EQ(status, 0) << "chromium --dump-dom failed";
  EXPECT_EQ(attribute(dom, "data-ready"), "1") << "the page's check script did not run";
  EXPECT_EQ(attribute(dom, "data-charts"), std::to_string(charts));
  EXPECT_EQ(attribute(dom, "data-empty-charts"), "0");
  EXPECT_EQ(attribute(dom, "data-js-errors"), "0");
  auto screenshot = std::filesystem::path(CALO_BINARY_DIR) / "report_test.png";
  std::filesystem::remove(screenshot);
  run_command(chromium + flags + " --window-size=1280,6000 --screenshot=" + screenshot.string() + " file://" +
                  page.string() + " 2>/dev/null",
              status);
  ASSERT_EQ(status, 0);
  ASSERT_TRUE(std::filesystem::exists(screenshot));
  EXPECT_GT(std::filesystem::file_size(screenshot), 50'000u);  // a blank page compresses to a few KiB
}

TEST(Export, PerfettoAndCsvHoldEverySampleAndSpan) {
  calo::testing::TempDir dir("export");
  calo::testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord, 1.0, true);
  auto stats = export_perfetto(dir.path / "run", dir.path / "trace.json");
  EXPECT_EQ(stats.samples, 10000);
  EXPECT_EQ(stats.spans, 8 + 14);
  auto trace = nlohmann::json::parse(read_file(dir.path / "trace.json"));
  int counters = 0;
  int slices = 0;
  std::set<std::string> tracks;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "C") {
      ++counters;
      tracks.insert(std::to_string(event["pid"].get<int>()) + event["name"].get<std::string>());
    }
    if (event["ph"] == "X") ++slices;
  }
  EXPECT_EQ(counters, 10000);
  EXPECT_EQ(tracks.size(), 10u);  // 5 metrics x 2 GPUs
  EXPECT_EQ(slices, 22);
  auto csv_stats = export_csv(dir.path / "run", dir.path / "csv");
  EXPECT_EQ(csv_stats.samples, 10000);
  std::string samples = read_file(dir.path / "csv" / "samples.csv");
  EXPECT_EQ(std::count(samples.begin(), samples.end(), '\n'), 10001);
  EXPECT_NE(samples.find("0,0,power_instant_w,W,300,"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir.path / "csv" / "summaries.csv"));
  std::string spans = read_file(dir.path / "csv" / "spans.csv");
  EXPECT_NE(spans.find("kernel,0,0,ncclDevKernel_AllReduce,all_reduce,"), std::string::npos);
}

TEST(Svg, TicksOfARangeFarFromZeroAreFewOrNone) {
  // A damaged run's time axis once spanned 1e19 ns: stepping tick += step never moved, and labels overran.
  EXPECT_LE(nice_ticks(-9.2e18, 1.4e13, 8).size(), 40u);
  EXPECT_LE(nice_ticks(1e18, 1e18 + 1, 8).size(), 40u);
  EXPECT_TRUE(nice_ticks(0, std::numeric_limits<double>::infinity(), 8).empty());
}

TEST(HtmlReport, AKilledRunIsSaidToBeInterrupted) {
  calo::testing::TempDir dir("interrupted");
  calo::testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord, 1.0, true);
  std::string html = render_html_report({analyze::analyze_run(dir.path / "run")});
  EXPECT_EQ(html.find("interrupted: the run never finished"), std::string::npos);
  {
    store::detail::Database db(dir.path / "run" / "run.db", SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET ended_ns = 0");  // what a SIGKILLed recorder leaves
  }
  html = render_html_report({analyze::analyze_run(dir.path / "run")});
  const auto verdict = html.find("id=\"verdict\"");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_NE(html.find("interrupted: the run never finished", verdict), std::string::npos);
}

TEST(Export, ADamagedStoreLeavesNoPartialOutput) {
  calo::testing::TempDir dir("export-damaged");
  calo::testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord, 1.0, true);
  calo::testing::damage_second_half(dir.path / "run");
  EXPECT_ANY_THROW(export_perfetto(dir.path / "run", dir.path / "trace.json"));
  EXPECT_ANY_THROW(export_csv(dir.path / "run", dir.path / "csv"));
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    if (entry.path().filename() != "run") left.push_back(entry.path().filename().string());
  }
  EXPECT_TRUE(left.empty()) << left.front();
}

TEST(Export, AFileWhereTheCsvFolderShouldBeIsBadInput) {
  calo::testing::TempDir dir("export-file");
  calo::testing::write_synthetic_run(dir.path / "run", store::RunKind::kRecord, 1.0, true);
  std::ofstream(dir.path / "taken") << "mine\n";
  EXPECT_THROW(export_csv(dir.path / "run", dir.path / "taken"), InputError);
  EXPECT_THROW(export_perfetto(dir.path / "run", dir.path), InputError);  // a folder where the file goes
  EXPECT_EQ(read_file(dir.path / "taken"), "mine\n");
}

// The commands end to end on the hand-made trace fixtures: ingest -> report -> export -> compare.
// A simulation under torchtitan's accounting whose peak is at the end of backward (FSDP2 over 2 GPUs, full
// recompute: 17.26 GiB against 17.33 measured, docs/benchmarks/memory.md): the report's memory table names
// what each term holds under that trainer and says the activations are freed at the peak.
TEST(Commands, TheMemoryTableOfATorchtitanRunSaysWhereItsPeakIs) {
  auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("torchtitan-memory");
  int status = 0;
  const std::string out = run_command(
      calo.string() +
          " sim --model llama3-8b --layers 4 --seq 8192 --dp 2 --zero 3 --recompute full --gbs 2 " +
          "--trainer torchtitan --cluster h200-hgx --gpus 2 --steps 1 --out " + (dir.path / "sim").string(),
      status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("17.26 GiB"), std::string::npos) << out;
  EXPECT_NE(out.find("at the end of backward"), std::string::npos) << out;
  const std::string html = render_html_report({analyze::analyze_run(dir.path / "sim")});
  const auto section = html.find("<div id=\"run1-memory\">");
  ASSERT_NE(section, std::string::npos);
  const std::string table = html.substr(section, html.find("</table>", section) - section);
  for (const char* expected :
       {"fp32 parameters; the bf16 compute copies are freed (torchtitan trainer)", "Adam m, v (fp32)",
        "freed: the peak is at the end of backward", "<td>17.26</td>"}) {
    EXPECT_NE(table.find(expected), std::string::npos) << expected << " in " << table;
  }
  // 17 GiB of a 140 GiB card: the chart draws no limit lines (they would squash the bars).
  EXPECT_EQ(table.find("class=\"marker\""), std::string::npos) << table;
  // At the end of backward no activation is alive: no rows by kind. The usable rule's deductions are rows.
  EXPECT_EQ(table.find("% of the activations"), std::string::npos) << table;
  EXPECT_NE(table.find("allocator fragmentation"), std::string::npos) << table;
  EXPECT_NE(table.find("runtime reserve</td><td>4.00</td>"), std::string::npos) << table;
}

// A simulation run with --allow-oom: the verdict says first that the job does not fit its GPU, linked to the
// memory section, so nobody reads its step time as a layout they could run. A layout that fits says nothing.
TEST(Commands, TheVerdictOfASimulationThatDoesNotFitMemorySaysSoFirst) {
  auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("allow-oom-verdict");
  const std::string job =
      " sim --model llama3-8b --cluster h100-hgx --gpus 1 --seq 8192 --gbs 4 --steps 1 --out ";
  const auto verdict_of = [&](const std::string& name, const std::string& flags) {
    int status = 0;
    const std::string out = run_command(calo.string() + job + (dir.path / name).string() + flags, status);
    EXPECT_EQ(status, 0) << out;
    const std::string html = render_html_report({analyze::analyze_run(dir.path / name)});
    return html.substr(0, html.find("Runs side by side"));
  };
  const std::string oom = verdict_of("oom", " --layers 24 --allow-oom");
  // Its memory chart draws the usable limit and the card beside the bar that crosses the first.
  const std::string oom_html = render_html_report({analyze::analyze_run(dir.path / "oom")});
  const auto chart = oom_html.find("<div id=\"run1-memory\">");
  ASSERT_NE(chart, std::string::npos);
  const std::string memory_chart = oom_html.substr(chart, oom_html.find("</svg>", chart) - chart);
  EXPECT_NE(memory_chart.find(">usable 73.26</text>"), std::string::npos) << memory_chart;
  EXPECT_NE(memory_chart.find(">card 79.65</text>"), std::string::npos) << memory_chart;
  const auto line = oom.find("<li><a href=\"#run1-memory\">does not fit memory: the model needs ");
  ASSERT_NE(line, std::string::npos) << oom;
  EXPECT_EQ(line, oom.find("<li>")) << "the first finding: " << oom;
  EXPECT_NE(oom.find("GiB usable of the 79.65 GiB card; simulated anyway (--allow-oom)"), std::string::npos)
      << oom;
  EXPECT_EQ(oom.find("tight:"), std::string::npos) << "123 GiB is beyond the card: " << oom;
  // 13 layers need 75.77 GiB: beyond the usable 73.26, within the 79.65 card: tight, with what it leaves.
  const std::string tight = verdict_of("tight", " --layers 13 --memory-limit card");
  const auto tight_line = tight.find(
      "<li><a href=\"#run1-memory\">tight: the model needs 75.77 GiB per GPU (stage 0), beyond the 73.26 GiB "
      "usable of the 79.65 GiB card; the card itself would leave 3.88 GiB for the CUDA context, NCCL and the "
      "allocator");
  ASSERT_NE(tight_line, std::string::npos) << tight;
  EXPECT_EQ(tight_line, tight.find("<li>")) << "the first finding: " << tight;
  const std::string fits = verdict_of("fits", " --layers 4");
  EXPECT_EQ(fits.find("does not fit memory"), std::string::npos) << fits;
  // Its memory table lists the activations by kind (issue 39 item 5): 4 layers of one micro-batch.
  const std::string html = render_html_report({analyze::analyze_run(dir.path / "fits")});
  const auto section = html.find("<div id=\"run1-memory\">");
  ASSERT_NE(section, std::string::npos);
  const std::string table = html.substr(section, html.find("</table>", section) - section);
  for (const char* expected : {"4 layer-micro-batches", "· FFN inner (gate, up, SwiGLU output)</td><td>2.6",
                               "· output (final norm and projection inputs, fp32 cross-entropy)"}) {
    EXPECT_NE(table.find(expected), std::string::npos) << expected << " in " << table;
  }
}

// A bench run with --memory real: the memory section shows what training's allocations held beside the
// model's terms (a "held" bar and row, the model's error for that rank's stage), and its measured-peak note
// stops saying the bench keeps no activations.
TEST(Commands, TheMemoryTableOfABenchWithMemoryRealShowsWhatWasHeld) {
  auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("memory-real-report");
  int status = 0;
  const std::string out = run_command(calo.string() +
                                          " bench --model tiny-dense --backend cpu --gbs 2 --recompute full "
                                          "--memory real --steps 1 --warmup 0 --no-progress --out " +
                                          (dir.path / "bench").string(),
                                      status);
  ASSERT_EQ(status, 0) << out;
  const std::string html = render_html_report({analyze::analyze_run(dir.path / "bench")});
  const auto section = html.find("<div id=\"run1-memory\">");
  ASSERT_NE(section, std::string::npos);
  const std::string memory = html.substr(section, html.find("</table>", section) - section);
  for (const char* expected : {"held (--memory real)", "held as training holds it", "model / held +0.0 %",
                               "the model&#39;s terms and what was measured"}) {
    EXPECT_NE(memory.find(expected), std::string::npos) << expected << " in " << memory;
  }
  EXPECT_EQ(memory.find("keeps no activations between passes"), std::string::npos) << memory;
}

// A run whose stored layout no longer resolves (here a schedule this calo does not know, as a run stored by
// another version may name): its memory section says why the model's terms are missing, with the
// InputError's message, instead of leaving the section out without a word.
TEST(Commands, TheMemorySectionOfARunWhoseLayoutNoLongerResolvesSaysWhy) {
  auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("unresolved-layout");
  int status = 0;
  const std::string out =
      run_command(calo.string() + " sim --model tiny-dense --cluster h100-hgx --gpus 1 --steps 1 --out " +
                      (dir.path / "sim").string(),
                  status);
  ASSERT_EQ(status, 0) << out;
  const auto memory_of = [&] {
    const std::string html = render_html_report({analyze::analyze_run(dir.path / "sim")});
    const auto section = html.find("<h3>Memory per GPU</h3>");
    return section == std::string::npos ? std::string()
                                        : html.substr(section, html.find("<h3>", section + 4) - section);
  };
  EXPECT_NE(memory_of().find("<td class=\"key\"><b>model total</b></td>"), std::string::npos) << memory_of();
  {
    store::detail::Database db(dir.path / "sim" / "run.db", SQLITE_OPEN_READWRITE);
    db.exec("UPDATE run SET config_json = json_set(config_json, '$.layout.schedule', 'zb-q')");
  }
  const std::string memory = memory_of();
  EXPECT_NE(memory.find("No model terms: the run's stored model and layout no longer resolve: "),
            std::string::npos)
      << memory;
  EXPECT_NE(memory.find("zb-q"), std::string::npos) << "the InputError's message names the value: " << memory;
  EXPECT_EQ(memory.find("model total"), std::string::npos) << memory;
}

TEST(Commands, IngestReportExportCompare) {
  auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  calo::testing::TempDir dir("commands");
  auto fixtures = std::filesystem::path(CALO_SOURCE_DIR) / "tests" / "fixtures";
  int status = 0;
  std::string out = run_command(calo.string() + " ingest " + (fixtures / "kineto_rank0.json").string() + " " +
                                    (fixtures / "kineto_rank1.json").string() + " --out " +
                                    (dir.path / "ingest").string() + " --json",
                                status);
  ASSERT_EQ(status, 0) << out;
  auto result = nlohmann::json::parse(out);
  EXPECT_EQ(result["kernels"], 19);
  EXPECT_NEAR(result["lanes"][0]["categories"]["all_reduce"]["exposed_s"].get<double>(), 4.5e-6, 1e-12);
  out = run_command(calo.string() + " report " + (dir.path / "ingest").string() + " --out " +
                        (dir.path / "r.html").string() + " --json",
                    status);
  ASSERT_EQ(status, 0) << out;
  // Kernel categories + exposed/overlapped comm + the per-GPU heatmap (step-end lag of the two ranks); the
  // command must draw exactly what the library draws for the same run.
  int expected_charts = count_charts(render_html_report({analyze::analyze_run(dir.path / "ingest")}));
  EXPECT_EQ(expected_charts, 3);
  EXPECT_EQ(nlohmann::json::parse(out)["charts"], expected_charts);
  out = run_command(calo.string() + " export " + (dir.path / "ingest").string() +
                        " --format perfetto --out " + (dir.path / "t.json").string() + " --json",
                    status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["spans"], 19 + 2);
  calo::testing::write_synthetic_run(dir.path / "measured", store::RunKind::kRecord);
  calo::testing::write_synthetic_run(dir.path / "sim", store::RunKind::kSim, 1.1);
  out = run_command(
      calo.string() + " compare " + (dir.path / "measured").string() + " " + (dir.path / "sim").string(),
      status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("+10.0%"), std::string::npos) << out;  // energy of the sim run is 1.1x
  run_command(calo.string() + " ingest " + (dir.path / "missing.json").string() + " 2>&1", status);
  EXPECT_EQ(status, 2);
  run_command(calo.string() + " export " + (dir.path / "measured").string() + " --format xml 2>&1", status);
  EXPECT_EQ(status, 2);
}

}  // namespace
}  // namespace calo::report
