// The report of real H100 runs (tests/fixtures/h100-runs/runs.tgz) looked at as a person would: rendered by
// headless Chromium to PNG, decoded with libpng, and every time-series chart must show coloured data pixels
// in its plot area; the page's DOM (after Chromium ran it) must hold the verdict, line segments in the sparse
// power chart, the error column only for the sim run whose graph matches a measured run, and the projection
// section.
#include <gtest/gtest.h>
#include <png.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>

#include "../common/run_calo.h"
#include "analyze/metrics.h"
#include "report/html_report.h"
#include "synthetic_run.h"

namespace calo::report {
namespace {

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

// An RGB image decoded by libpng.
struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<uint8_t> rgb;
  // Pixels in [x0, x1) x [y0, y1) whose colour is saturated (max - min channel > 60): the palette colours of
  // data, never the white background, the grey grid, frame, ticks or step markers.
  int coloured(uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1) const {
    int count = 0;
    for (uint32_t y = y0; y < y1 && y < height; ++y) {
      for (uint32_t x = x0; x < x1 && x < width; ++x) {
        const uint8_t* p = &rgb[(static_cast<std::size_t>(y) * width + x) * 3];
        int hi = std::max({p[0], p[1], p[2]});
        int lo = std::min({p[0], p[1], p[2]});
        if (hi - lo > 60) ++count;
      }
    }
    return count;
  }
};

Image read_png(const std::filesystem::path& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  Image out;
  if (png_image_begin_read_from_file(&image, path.c_str()) == 0) return out;
  image.format = PNG_FORMAT_RGB;
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr) == 0) return Image{};
  out.width = image.width;
  out.height = image.height;
  return out;
}

class FixtureReport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new calo::testing::TempDir("fixture-report");
    auto tgz = std::filesystem::path(CALO_SOURCE_DIR) / "tests/fixtures/h100-runs/runs.tgz";
    int status = 0;
    run_command("tar -xzf " + tgz.string() + " -C " + dir_->path.string(), status);
    ASSERT_EQ(status, 0) << "cannot unpack " << tgz;
    // bench8b and sim8b: one graph (simulated vs measured); mbs8: measured, another layout; simmbs4: a sim of
    // a layout with no measured run given here (projection).
    for (const char* name : {"bench8b", "sim8b", "mbs8", "simmbs4"})
      runs_.push_back(analyze::analyze_run(dir_->path / "runs" / name));
    html_ = render_html_report(runs_, {"H100 fixture runs"});
    page_ = dir_->path / "report.html";
    std::ofstream(page_) << html_;
    std::ofstream(std::filesystem::path(CALO_BINARY_DIR) / "fixture_report.html") << html_;
  }
  static void TearDownTestSuite() {
    runs_.clear();
    delete dir_;
  }
  std::string flags() const {
    return " --headless=new --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 "
           "--user-data-dir=" +
           (dir_->path / "chromium-profile").string();
  }
  static calo::testing::TempDir* dir_;
  static std::vector<analyze::RunAnalysis> runs_;
  static std::string html_;
  static std::filesystem::path page_;
};
calo::testing::TempDir* FixtureReport::dir_ = nullptr;
std::vector<analyze::RunAnalysis> FixtureReport::runs_;
std::string FixtureReport::html_;
std::filesystem::path FixtureReport::page_;

// Every time-series chart, alone in a 900 x 300 cell of one page, screenshotted: its plot area (inside the
// axes: x 70..730, y 34..254 of the chart) must hold coloured pixels, i.e. a drawn line, band or dots. Before
// the fix the 20 ms power samples of bench8b drew nothing (an `M`-only path, zero-length band segments).
TEST_F(FixtureReport, EveryTimeSeriesChartDrawsDataInItsPlotArea) {
  std::string chromium = chromium_binary();
  if (chromium.empty()) GTEST_SKIP() << "no Chromium: scripts/install_deps.sh installs the Debian package";
  constexpr int kCell = 320;
  std::vector<std::string> captions;
  std::string cells;
  std::regex figure(
      "<figure class=\"chart\" data-chart=\"timeseries\"[^>]*><figcaption>([^<]*)</figcaption>");
  for (std::sregex_iterator it(html_.begin(), html_.end(), figure), end; it != end; ++it) {
    auto svg_begin = html_.find("<svg", static_cast<std::size_t>(it->position()));
    auto svg_end = html_.find("</svg>", svg_begin) + 6;
    captions.push_back((*it)[1].str());
    cells += "<div style=\"height:" + std::to_string(kCell) + "px\">" +
             html_.substr(svg_begin, svg_end - svg_begin) + "</div>\n";
  }
  // bench8b: power, temperature, SM clock, utilization, host CPU, host memory; sim8b, simmbs4: power,
  // temperature, SM clock; mbs8: the same six as bench8b.
  ASSERT_GE(captions.size(), 12u);
  auto page = dir_->path / "charts.html";
  std::ofstream(page) << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{margin:0}"
                         "svg{display:block;font-family:sans-serif;font-size:11px}"
                         ".line{fill:none;stroke-width:1.4}.band{stroke:none;fill-opacity:.22}"
                         ".dots{fill:none;stroke-width:5;stroke-linecap:round}.grid{stroke:#eee}"
                         ".axis{stroke:#888}.frame{fill:none;stroke:#888}.step-mark{stroke:#bbb}"
                         "</style></head><body>"
                      << cells << "</body></html>";
  auto png = dir_->path / "charts.png";
  int status = 0;
  run_command(chromium + flags() + " --window-size=900," + std::to_string(kCell * captions.size()) +
                  " --screenshot=" + png.string() + " file://" + page.string() + " 2>/dev/null",
              status);
  ASSERT_EQ(status, 0);
  std::filesystem::copy_file(png, std::filesystem::path(CALO_BINARY_DIR) / "fixture_charts.png",
                             std::filesystem::copy_options::overwrite_existing);
  Image image = read_png(png);
  ASSERT_EQ(image.width, 900u);
  ASSERT_EQ(image.height, kCell * captions.size());
  for (std::size_t index = 0; index < captions.size(); ++index) {
    auto top = static_cast<uint32_t>(index * kCell);
    int inside = image.coloured(72, top + 36, 728, top + 252);
    // A 1.4 px line across even a tenth of the 660 px plot is > 100 coloured pixels; an empty plot has 0.
    EXPECT_GT(inside, 100) << "chart " << index << " draws no data: " << captions[index];
  }
  // The empty margin below the axes holds no data colour (the count above is not the legend or background).
  EXPECT_EQ(image.coloured(72, 262, 728, 300), 0);
}

// The memory section of mbs8 (run 3, a calo bench run of 4 Llama3-8B layers, micro-batch 8, on one H100):
// the model's terms, its total and the NVML peak in the table, and in the screenshot the model's bar drawn at
// its share of the measured one (45.24 of 67.49 GiB) — the bars show the numbers, not just an <svg>.
TEST_F(FixtureReport, MemorySectionShowsTheModelsTermsBesideTheMeasuredPeak) {
  const auto section = html_.find("<div id=\"run3-memory\">");
  ASSERT_NE(section, std::string::npos);
  const std::string table = html_.substr(section, html_.find("</table>", section) - section);
  for (const char* expected : {"<td>3.58</td>", "<td>21.49</td>", "<td>16.59</td>", "<td>45.24</td>",
                               "<td>67.49</td>", "model / measured -33.0 %", "not a training"}) {
    EXPECT_NE(table.find(expected), std::string::npos) << expected << " in " << table;
  }
  std::string chromium = chromium_binary();
  if (chromium.empty()) GTEST_SKIP() << "no Chromium: scripts/install_deps.sh installs the Debian package";
  const auto svg_begin = html_.find("<svg", section);
  const std::string svg = html_.substr(svg_begin, html_.find("</svg>", svg_begin) + 6 - svg_begin);
  const auto page = dir_->path / "memory.html";
  std::ofstream(page) << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{margin:0}"
                         "svg{display:block;font-family:sans-serif;font-size:11px}</style></head><body>"
                      << svg << "</body></html>";
  const auto png = dir_->path / "memory.png";
  int status = 0;
  run_command(chromium + flags() + " --window-size=900,300 --screenshot=" + png.string() + " file://" +
                  page.string() + " 2>/dev/null",
              status);
  ASSERT_EQ(status, 0);
  const Image image = read_png(png);
  // Each bar: a band of rows with data colour left of the legend (x < 740); its width is its right edge less
  // the axis at the left of the plot.
  std::vector<std::pair<uint32_t, uint32_t>> bars;  // (first x, last x) per band of rows
  bool in_bar = false;
  for (uint32_t y = 0; y < image.height; ++y) {
    uint32_t first = image.width, last = 0;
    for (uint32_t x = 0; x < 740 && x < image.width; ++x) {
      if (image.coloured(x, y, x + 1, y + 1) == 0) continue;
      first = std::min(first, x);
      last = x;
    }
    if (last == 0) {
      in_bar = false;
      continue;
    }
    if (!in_bar) bars.push_back({first, last});
    bars.back() = {std::min(bars.back().first, first), std::max(bars.back().second, last)};
    in_bar = true;
  }
  ASSERT_EQ(bars.size(), 2u) << "a model bar and a measured bar";
  const double model_px = bars[0].second - bars[0].first;
  const double measured_px = bars[1].second - bars[1].first;
  EXPECT_NEAR(model_px / measured_px, 45.24 / 67.49, 0.02) << model_px << " px vs " << measured_px << " px";
}

// The DOM after Chromium loaded the page: the page's own check finds no empty chart and no script error; the
// sparse power series of bench8b is a line (L segments between its 20 ms samples), the verdict leads, the
// error column is given for sim8b (same graph as bench8b) only, and simmbs4 is a projection.
TEST_F(FixtureReport, DomHoldsVerdictLinesAndErrorColumnOnlyForMatchingGraphs) {
  std::string chromium = chromium_binary();
  if (chromium.empty()) GTEST_SKIP() << "no Chromium: scripts/install_deps.sh installs the Debian package";
  int status = 0;
  std::string dom = run_command(
      chromium + flags() + " --virtual-time-budget=5000 --dump-dom file://" + page_.string() + " 2>/dev/null",
      status);
  ASSERT_EQ(status, 0);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(dom, match, std::regex("<body[^>]*data-empty-charts=\"([0-9]+)\"")));
  EXPECT_EQ(match[1].str(), "0");
  ASSERT_TRUE(std::regex_search(dom, match, std::regex("<body[^>]*data-js-errors=\"([0-9]+)\"")));
  EXPECT_EQ(match[1].str(), "0");
  // The power chart of run 1: its mean line joins the samples (bench8b: ~60 samples of 20 ms in 1.2 s of a
  // longer run, more pixel columns than samples).
  auto power = dom.find("<div id=\"run1-power\">");
  ASSERT_NE(power, std::string::npos);
  auto line = dom.find("<path class=\"line\" d=\"", power);
  ASSERT_NE(line, std::string::npos);
  std::string path = dom.substr(line, dom.find('"', line + 22) - line);
  EXPECT_GT(count_of(path, "L"), 50) << path.substr(0, 200);
  EXPECT_LT(count_of(path, "M"), 5) << "the line is broken where no real gap is";
  // The verdict comes first, three findings per run, each a link to a chart that exists.
  auto verdict = dom.find("id=\"verdict\"");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_LT(verdict, dom.find("<h2", dom.find("</ol>", verdict)));
  std::string verdict_html = dom.substr(verdict, dom.find("<h2", verdict + 10) - verdict);
  EXPECT_EQ(count_of(verdict_html, "<li>"), 3 * 4) << verdict_html;
  std::regex link("<a href=\"#([^\"]+)\">");
  for (std::sregex_iterator it(verdict_html.begin(), verdict_html.end(), link), end; it != end; ++it) {
    EXPECT_NE(dom.find("id=\"" + (*it)[1].str() + "\""), std::string::npos) << (*it)[1].str();
  }
  EXPECT_NE(verdict_html.find("simulated step time"), std::string::npos) << verdict_html;
  EXPECT_NE(verdict_html.find("throttled by the power cap"), std::string::npos) << verdict_html;
  EXPECT_NE(verdict_html.find("projection"), std::string::npos) << verdict_html;
  // Error column: one simulated-vs-measured section (run 1 with run 2), one error column in it; the side by
  // side table has none.
  EXPECT_EQ(count_of(dom, "<h2 id=\"run1-sim\">"), 1);
  EXPECT_EQ(count_of(dom, "-sim\">Simulated vs measured"), 1);
  EXPECT_EQ(count_of(dom, "<th class=\"error\">"), 1);
  auto side = dom.find("<table class=\"summary\">");
  ASSERT_NE(side, std::string::npos);
  std::string side_table = dom.substr(side, dom.find("</table>", side) - side);
  EXPECT_EQ(side_table.find("error"), std::string::npos) << "an error column in the side-by-side table";
  // simmbs4 (run 4) is under Projection, after the measured runs.
  auto projection = dom.find("<h2 id=\"projection\">");
  ASSERT_NE(projection, std::string::npos);
  EXPECT_GT(dom.find("<div id=\"run4-header\">"), projection);
  EXPECT_LT(dom.find("<div id=\"run3-header\">"), projection);
}

// `calo compare` on the same runs: an error column for sim8b (run 2, the graph of bench8b) only; simmbs4
// (run 4, a layout no measured run given has) is shown side by side without one.
TEST_F(FixtureReport, CompareGivesErrorsOnlyForTheSameGraph) {
  auto calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  if (!std::filesystem::exists(calo)) GTEST_SKIP() << "calo binary not built in " << CALO_BINARY_DIR;
  int status = 0;
  std::string command = calo.string() + " compare";
  for (const char* name : {"bench8b", "sim8b", "mbs8", "simmbs4"})
    command += " " + (dir_->path / "runs" / name).string();
  std::string out = run_command(command, status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("run2 err"), std::string::npos) << out;
  EXPECT_EQ(out.find("run4 err"), std::string::npos) << out;
  EXPECT_NE(out.find("run2 (sim) vs run1 (measured)"), std::string::npos) << out;
  EXPECT_EQ(out.find("run4 (sim) vs"), std::string::npos) << out;
  EXPECT_EQ(out.find("nan"), std::string::npos) << out;
}

}  // namespace
}  // namespace calo::report
