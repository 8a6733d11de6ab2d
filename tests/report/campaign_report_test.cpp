// Campaign report: a real campaign (`calo sweep` of simulated runs: layout x micro-batch x recompute, one
// point that does not fit) rendered by `calo report CAMPAIGN_DIR`; every done point's figures must reach the
// page (heatmap cells, micro-batch lines, recompute deltas, per-GPU temperature), skipped points must show
// their reason, and headless Chromium must find no empty chart and paint coloured data pixels.
#include "report/campaign_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "report/html_report.h"
#include "store/run_store.h"

namespace calo::report {
namespace {

namespace fs = std::filesystem;

std::string shell(const std::string& command, int& status) {
  const testing::Outcome outcome = testing::run_shell(command + " 2>&1");
  status = outcome.exit_code;
  return outcome.output;
}

std::string calo() {
  return std::string(CALO_BINARY_DIR) + "/calo";
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

int count_of(const std::string& text, const std::string& needle) {
  int count = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

/// data-points of every <figure class="chart" data-chart=KIND>.
std::vector<int> chart_points(const std::string& html, const std::string& kind) {
  std::vector<int> points;
  const std::regex pattern("<figure class=\"chart\" data-chart=\"" + kind + "\" data-points=\"(\\d+)\"");
  for (std::sregex_iterator it(html.begin(), html.end(), pattern), end; it != end; ++it)
    points.push_back(std::stoi((*it)[1].str()));
  return points;
}

/// One simulated campaign, swept once for the whole suite.
class CampaignReport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::scratch_path("campaign-report");
    fs::remove_all(dir_);
    fs::create_directories(dir_.string() + "-spec");
    spec_ = dir_.string() + "-spec/spec.yaml";
    // 2 layouts x 2 micro-batches x 2 recompute modes on 8 H100 (nodes of 8: one node, 8 slots), one step (no
    // temperature sample inside the analysis window: the simulator's per-GPU hottest die is used), plus a
    // layout that is not valid for 8 GPUs (skipped with its reason).
    std::ofstream(spec_) << "name: report-test\nmodel: tiny-dense\ncluster: h100-hgx\ngpus: 8\nsteps: 1\n"
                            "fixed: {gbs: 16}\n"
                            "axes:\n  layout: [{tp: 2, pp: 2}, {tp: 4, pp: 1}, {tp: 3, pp: 1}]\n"
                            "  mbs: [1, 2]\n  recompute: [none, full]\n";
    int status = 0;
    sweep_output_ =
        shell(calo() + " sweep " + spec_.string() + " --out " + dir_.string() + " --jobs 2", status);
    sweep_status_ = status;
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    fs::remove_all(dir_.string() + "-spec");
  }
  static nlohmann::json index() {
    std::ifstream file(dir_ / "campaign.json");
    return nlohmann::json::parse(file);
  }
  static fs::path dir_;
  static fs::path spec_;
  static std::string sweep_output_;
  static int sweep_status_;
};
fs::path CampaignReport::dir_;
fs::path CampaignReport::spec_;
std::string CampaignReport::sweep_output_;
int CampaignReport::sweep_status_ = -1;

TEST_F(CampaignReport, LoadsEveryPointWithTheFiguresOfItsRun) {
  ASSERT_EQ(sweep_status_, 0) << sweep_output_;
  const Campaign campaign = load_campaign(dir_);
  const nlohmann::json stored = index();
  ASSERT_EQ(campaign.points.size(), stored["points"].size());
  EXPECT_EQ(campaign.axes, (std::vector<std::string>{"layout", "mbs", "recompute"}));
  int done = 0;
  for (std::size_t at = 0; at < campaign.points.size(); ++at) {
    const CampaignPoint& point = campaign.points[at];
    const auto& entry = stored["points"][at];
    EXPECT_EQ(point.name, entry["name"]);
    EXPECT_EQ(point.status, entry["status"]);
    if (point.status != "done") {
      EXPECT_NE(point.reason.find("is not the 8 GPUs"), std::string::npos) << point.reason;
      continue;
    }
    ++done;
    EXPECT_TRUE(point.simulated);
    // The report reads the stored run; the sweep's headline comes from the child's JSON: they must agree.
    EXPECT_NEAR(point.tokens_per_s, entry["figures"]["tokens_per_s"].get<double>(), 1e-3 * point.tokens_per_s)
        << point.name;
    EXPECT_NEAR(point.peak_power_w, entry["figures"]["peak_power_w"].get<double>(),
                1e-3 * point.peak_power_w);
    EXPECT_GT(point.mfu, 0);
    EXPECT_GT(point.energy_per_token_j, 0);
    EXPECT_GE(point.power_swing_w, 0);
    EXPECT_GT(point.samples_per_s_mj, 0);
    EXPECT_GE(point.throttle_power_cap_s, 0);
    EXPECT_GT(point.max_temp_c, 20);
    ASSERT_EQ(point.temp_peak_c.size(), 1u) << "8 GPUs of h100-hgx are one node";
    EXPECT_EQ(point.temp_peak_c[0].size(), 8u);
  }
  EXPECT_EQ(done, 8);
}

TEST_F(CampaignReport, PageHoldsEveryDonePointInEveryFigure) {
  ASSERT_EQ(sweep_status_, 0) << sweep_output_;
  const fs::path html_path = dir_ / "report.html";
  int status = 0;
  const std::string output = shell(calo() + " report " + dir_.string() + " --json", status);
  ASSERT_EQ(status, 0) << output;
  const std::string html = read_text(html_path);
  const Campaign campaign = load_campaign(dir_);
  // 4 headline + 5 power figures: a heatmap each with one cell per done point, dark = better, the two blank
  // rows of the invalid layout left out; or, where a figure is the same at every done point (nothing
  // throttled), one sentence instead of a chart of one colour.
  const std::vector<int> heatmaps = chart_points(html, "campaign-heatmap");
  for (int points : heatmaps) EXPECT_EQ(points, 8);
  const auto note_at = html.find("<p class=\"note constant-figures\">");
  const std::string constant_note =
      note_at == std::string::npos ? "" : html.substr(note_at, html.find("</p>", note_at) - note_at);
  int constant = 0;
  for (const char* title : {"Throughput", "MFU", "Energy per token", "Energy efficiency",
                            "Peak power (hottest GPU)", "Power swing within 100 ms",
                            "Power-cap throttle time", "Thermal throttle time", "Hottest GPU temperature"})
    constant += contains(constant_note, std::string(title) + " ") ? 1 : 0;
  EXPECT_EQ(heatmaps.size() + static_cast<std::size_t>(constant), 9u) << constant_note;
  EXPECT_GE(heatmaps.size(), 6u) << "throughput, MFU, energy, efficiency, peak power and heat vary";
  double largest_throttle_s = 0;
  for (const CampaignPoint& point : campaign.points) {
    if (point.status == "done") largest_throttle_s = std::max(largest_throttle_s, point.throttle_thermal_s);
  }
  EXPECT_EQ(contains(constant_note, "Thermal throttle time 0 s"), largest_throttle_s == 0) << constant_note;
  EXPECT_EQ(count_of(html, "dark = better"), static_cast<int>(heatmaps.size()));
  EXPECT_EQ(count_of(html, "2 rows without a finished point left out"),  // caption and aria-label
            2 * static_cast<int>(heatmaps.size()));
  EXPECT_NE(html.find("Energy per token, J/token (lower is better"), std::string::npos);
  // The points that ran lead the table; the four skipped ones are folded below it, counted by reason.
  const auto table_at = html.find("<table class=\"points\">");
  const std::string ran = html.substr(table_at, html.find("</table>", table_at) - table_at);
  EXPECT_EQ(count_of(ran, "<tr data-point="), 8);
  EXPECT_NE(html.find("<details class=\"skipped-points\"><summary>4 point(s) skipped or not run: 4 × "),
            std::string::npos);
  // Micro-batch charts: throughput + 5 power figures, one (x, y) per done point.
  const std::vector<int> lines = chart_points(html, "xy");
  ASSERT_EQ(lines.size(), 6u);
  for (int points : lines) EXPECT_EQ(points, 8);
  // Recompute deltas: one per (layout, mbs) pair.
  EXPECT_EQ(count_of(html, ": recompute full</td>"), 4);
  // Per-GPU temperature: one node x slot heatmap per done point, 8 GPUs each.
  const std::vector<int> temperatures = chart_points(html, "node-slot");
  ASSERT_EQ(temperatures.size(), 8u);
  for (int points : temperatures) EXPECT_EQ(points, 8);
  // Every done point's throughput and hottest temperature as the table shows them; the skipped ones' reason.
  for (const CampaignPoint& point : campaign.points) {
    if (point.status != "done") {
      EXPECT_NE(html.find("is not the 8 GPUs"), std::string::npos);
      continue;
    }
    EXPECT_NE(html.find("<td>" + format_number(point.tokens_per_s) + "</td>"), std::string::npos)
        << point.name;
    EXPECT_NE(html.find("<td>" + format_number(point.max_temp_c) + "</td>"), std::string::npos) << point.name;
  }
  // Per-axis summary: one row per (axis, value): 3 layouts + 2 mbs + 2 recompute.
  const auto summary_at = html.find("<table class=\"axis-summary\">");
  ASSERT_NE(summary_at, std::string::npos);
  const std::string summary = html.substr(summary_at, html.find("</table>", summary_at) - summary_at);
  EXPECT_EQ(count_of(summary, "<tr>") - 1, 7);
  EXPECT_NE(summary.find("<td>0 / 4</td>"), std::string::npos) << "the invalid layout: 0 of 4 done";
  // Units on every heatmap title.
  EXPECT_NE(html.find("Throughput, tokens/s"), std::string::npos);
  EXPECT_NE(html.find("Energy per token, J/token"), std::string::npos);
  EXPECT_NE(html.find("Peak power (hottest GPU), W"), std::string::npos);
  EXPECT_NE(html.find("No point was both simulated and measured"), std::string::npos);
}

TEST_F(CampaignReport, ChromiumDrawsEveryChart) {
  ASSERT_EQ(sweep_status_, 0) << sweep_output_;
  std::string chromium;
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (fs::exists(candidate)) chromium = candidate;
  }
  if (chromium.empty()) GTEST_SKIP() << "no headless Chromium on this machine (chromium not installed)";
  const fs::path html_path = dir_ / "chromium.html";
  int status = 0;
  const std::string rendered =
      shell(calo() + " report " + dir_.string() + " --out " + html_path.string(), status);
  ASSERT_EQ(status, 0) << rendered;
  const std::string dom = shell(
      chromium + " --headless --no-sandbox --disable-gpu --dump-dom file://" + html_path.string(), status);
  ASSERT_NE(dom.find("data-ready=\"1\""), std::string::npos) << dom.substr(0, 2000);
  const std::regex charts("data-charts=\"(\\d+)\"");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(dom, match, charts));
  EXPECT_EQ(std::stoi(match[1].str()), count_of(read_text(html_path), "<figure class=\"chart\""));
  EXPECT_NE(dom.find("data-empty-charts=\"0\""), std::string::npos) << "a chart drew nothing";
  EXPECT_NE(dom.find("data-js-errors=\"0\""), std::string::npos);
}

// The same grid run for real (the CPU backend: tiny-dense, real ranks) and simulated: the page opens with
// both figures of every point and the error between them.
TEST(CampaignReportInput, SimulatedAndMeasuredCampaignsAreCompared) {
  const fs::path dir = testing::scratch_path("campaign-pair");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "spec.yaml") << "name: pair\nmodel: tiny-dense\ncluster: cpu-host\ngpus: 1\nsteps: 2\n"
                                      "fixed: {gbs: 4}\naxes:\n  mbs: [1, 2]\n";
  int status = 0;
  std::string output = shell(calo() + " sweep " + (dir / "spec.yaml").string() + " --backend cpu --out " +
                                 (dir / "measured").string(),
                             status);
  ASSERT_EQ(status, 0) << output;
  output =
      shell(calo() + " sweep " + (dir / "spec.yaml").string() + " --out " + (dir / "sim").string(), status);
  ASSERT_EQ(status, 0) << output;
  const Campaign measured = load_campaign(dir / "measured");
  const Campaign simulated = load_campaign(dir / "sim");
  const std::string html = render_campaign_report({simulated, measured});
  const auto table_at = html.find("<table class=\"sim-vs-measured\">");
  ASSERT_NE(table_at, std::string::npos);
  EXPECT_LT(table_at, html.find("<h2 id=\"campaign1\">")) << "the comparison comes first";
  const std::string table = html.substr(table_at, html.find("</table>", table_at) - table_at);
  for (std::size_t at = 0; at < 2; ++at) {
    const CampaignPoint& real = measured.points[at];
    const CampaignPoint& sim = simulated.points[at];
    ASSERT_EQ(real.status, "done");
    ASSERT_FALSE(real.simulated);
    ASSERT_GT(real.tokens_per_s, 0) << "the measured run's throughput did not reach the report";
    EXPECT_NE(table.find(fmt::format("<td>{}</td><td>{}</td><td>{:+.1f}</td>",
                                     format_number(real.tokens_per_s), format_number(sim.tokens_per_s),
                                     (sim.tokens_per_s - real.tokens_per_s) / real.tokens_per_s * 100)),
              std::string::npos)
        << real.name << "\n"
        << table;
  }
  EXPECT_EQ(chart_points(html, "columns").size(), 3u);
  // One swept axis: bars over its values, not one-row strips of colour.
  EXPECT_TRUE(chart_points(html, "campaign-heatmap").empty());
  const std::vector<int> bars = chart_points(html, "campaign-bars");
  EXPECT_GE(bars.size(), 4u);  // at least throughput and MFU of each campaign
  for (int points : bars) EXPECT_EQ(points, 2);
  fs::remove_all(dir);
}

TEST(CampaignReportInput, AboveSixtyFourGpusTheHottestDieStillReachesThePoint) {
  // A simulation of more than 64 GPUs stores no per-GPU rows; the run's own hottest die is the point's (it
  // showed "-" in the 8192-GPU campaign).
  const fs::path dir = testing::scratch_path("campaign-128");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "spec.yaml")
      << "name: wide\nmodel: tiny-dense\ncluster: h100-hgx\ngpus: 128\nsteps: 1\n"
         "fixed: {gbs: 256}\naxes:\n  tp: [1, 2]\n";
  // And 8192 GPUs, where the stored samples miss the hottest die (2 s).
  std::ofstream(dir / "wider.yaml")
      << "name: wider\nmodel: gpt3-175b\ncluster: h200-hgx\ngpus: 8192\nsteps: 2\n"
         "fixed: {gbs: 1536}\naxes:\n  layout:\n    - {tp: 8, pp: 16, dp: 64}\n";
  int status = 0;
  const std::string output =
      shell(calo() + " sweep " + (dir / "spec.yaml").string() + " --out " + (dir / "sim").string(), status);
  ASSERT_EQ(status, 0) << output;
  const Campaign campaign = load_campaign(dir / "sim");
  ASSERT_EQ(campaign.points.size(), 2u);
  for (const CampaignPoint& point : campaign.points) {
    ASSERT_EQ(point.status, "done") << point.reason;
    EXPECT_GT(point.max_temp_c, 20) << point.name;
    // The run row's hottest die over all GPUs, not the hottest of the GPUs whose samples were stored (those
    // peaked 0.7 C lower in the 8192-GPU campaign).
    double run_max_die_c = NAN;
    for (const auto& row : store::RunReader(dir / "sim" / point.name).summaries("run"))
      if (row.key == "max_die_c") run_max_die_c = row.value;
    EXPECT_DOUBLE_EQ(point.max_temp_c, run_max_die_c) << point.name;
  }
  const std::string html = render_campaign_report({campaign});
  EXPECT_EQ(html.find("Hottest GPU temperature (no value"), std::string::npos);
  const std::string wider = shell(
      calo() + " sweep " + (dir / "wider.yaml").string() + " --out " + (dir / "wider").string(), status);
  ASSERT_EQ(status, 0) << wider;
  const Campaign widest = load_campaign(dir / "wider");
  ASSERT_EQ(widest.points.size(), 1u);
  double run_max_die_c = NAN;
  for (const auto& row : store::RunReader(dir / "wider" / widest.points[0].name).summaries("run"))
    if (row.key == "max_die_c") run_max_die_c = row.value;
  EXPECT_DOUBLE_EQ(widest.points[0].max_temp_c, run_max_die_c);
  fs::remove_all(dir);
}

TEST(CampaignReportInput, OnePointIsChartedAndOnlyItsZerosAreSentences) {
  // One finished point: its values are values, not a sameness across points; its zero throttle times and the
  // temperature it lacks are the sentence.
  Campaign campaign;
  campaign.name = "one";
  campaign.axes = {"mbs"};
  CampaignPoint point;
  point.name = "mbs1";
  point.status = "done";
  point.axis_values = {{"mbs", "1"}};
  point.tokens_per_s = 1000;
  point.mfu = 0.4;
  point.energy_per_token_j = 0.5;
  point.samples_per_s_mj = 12;
  point.peak_power_w = 650;
  point.power_swing_w = 120;
  point.throttle_power_cap_s = 0;
  point.throttle_thermal_s = 0;
  campaign.points = {point};
  const std::string html = render_campaign_report({campaign});
  EXPECT_EQ(chart_points(html, "campaign-bars").size(), 6u);
  const auto note_at = html.find("<p class=\"note constant-figures\">");
  ASSERT_NE(note_at, std::string::npos);
  const std::string note = html.substr(note_at, html.find("</p>", note_at) - note_at);
  EXPECT_TRUE(contains(note, "Zero or missing at the one finished point")) << note;
  EXPECT_TRUE(contains(note, "Power-cap throttle time 0 s")) << note;
  EXPECT_TRUE(contains(note, "Thermal throttle time 0 s")) << note;
  EXPECT_TRUE(contains(note, "Hottest GPU temperature (no value")) << note;
  EXPECT_FALSE(contains(note, "Throughput")) << note;
}

TEST(CampaignReportInput, NotACampaignNamesTheFileAndTheFix) {
  const fs::path dir = testing::scratch_path("not-campaign");
  fs::create_directories(dir);
  std::ofstream(dir / "campaign.json") << "{\"campaign\": \"x\"}";
  try {
    load_campaign(dir);
    ADD_FAILURE() << "accepted an index without points";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("campaign.json"), std::string::npos) << error.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace calo::report
