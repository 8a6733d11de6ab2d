// The report's verdict over real CPU-backend runs (issue 65): a bench the cluster is calibrated on, a bench
// of another sequence length held out of the calibration, and both benches' twins (`calo sim --from`) on the
// calibrated cluster. The held-out twin's error leads the verdict and says out-of-sample, the fitted twin's
// says in-sample, every run's findings open with step time, tokens/s and energy per token, run headings
// name the model, and the tables mark the CPU host's placeholder power as such.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "../common/run_calo.h"
#include "core/output_file.h"
#include "report/html_report.h"
#include "synthetic_run.h"

namespace calo::report {
namespace {

namespace fs = std::filesystem;

// Runs `calo ARGUMENTS` (the binary of this build), stdout and stderr together.
testing::Outcome calo(const std::string& arguments) {
  return testing::run_shell((fs::path(CALO_BINARY_DIR) / "calo").string() + " " + arguments + " 2>&1");
}

// The verdict's blocks in page order: each "Run N: label" heading with its findings, one string per <li>.
struct VerdictBlock {
  std::string heading;
  std::vector<std::string> findings;
};

std::vector<VerdictBlock> verdict_blocks(const std::string& html) {
  const auto begin = html.find("id=\"verdict\"");
  const std::string verdict = html.substr(begin, html.find("<h2", begin + 10) - begin);
  std::vector<VerdictBlock> blocks;
  const std::regex item("<div class=\"verdict-run\">([^<]*)</div>|<li>(?:<a [^>]*>)?([^<]*)");
  for (std::sregex_iterator it(verdict.begin(), verdict.end(), item), end; it != end; ++it) {
    if ((*it)[1].matched)
      blocks.push_back({(*it)[1].str(), {}});
    else if (!blocks.empty())
      blocks.back().findings.push_back((*it)[2].str());
  }
  return blocks;
}

// The report's text of `runs` (render_html_report, HTML-escaped as the page has it).
std::string report_of(const std::vector<fs::path>& runs) {
  std::vector<analyze::RunAnalysis> analyses;
  for (const fs::path& run : runs) analyses.push_back(analyze::analyze_run(run));
  return render_html_report(analyses, {"sample verdict"});
}

class SampleVerdict : public ::testing::Test {
 protected:
  // Two tiny-dense benches (seq 64, the calibration run; seq 128, held out), cpu-host calibrated on the
  // first, and a twin of each on that cluster.
  static void SetUpTestSuite() {
    dir_ = new calo::testing::TempDir("sample-verdict");
    for (const auto& [name, seq] : {std::pair{"fitted", 64}, std::pair{"held-out", 128}}) {
      const testing::Outcome bench =
          calo("bench --model tiny-dense --backend cpu --gbs 2 --seq " + std::to_string(seq) +
               " --steps 3 --warmup 1 --trace-ops --no-progress --out " + (dir_->path / name).string());
      ASSERT_EQ(bench.exit_code, 0) << bench.output;
    }
    const testing::Outcome fit =
        calo("calibrate " + path("fitted") + " --cluster cpu-host --no-loo --out " + path("cal.yaml"));
    ASSERT_EQ(fit.exit_code, 0) << fit.output;
    for (const char* name : {"fitted", "held-out"}) {
      const testing::Outcome twin = calo("sim --from " + path(name) + " --cluster " + path("cal.yaml") +
                                         " --out " + path(std::string("twin-") + name));
      ASSERT_EQ(twin.exit_code, 0) << twin.output;
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string path(const std::string& name) { return (dir_->path / name).string(); }
  static calo::testing::TempDir* dir_;
};
calo::testing::TempDir* SampleVerdict::dir_ = nullptr;

TEST_F(SampleVerdict, TheOutOfSampleErrorLeadsAndEachRunOpensWithItsHeadline) {
  const std::string html =
      report_of({path("fitted"), path("held-out"), path("twin-fitted"), path("twin-held-out")});
  const std::vector<VerdictBlock> blocks = verdict_blocks(html);
  ASSERT_EQ(blocks.size(), 4u) << html.substr(0, 4000);
  // The held-out twin first, its error out-of-sample, naming the run the cluster was fitted to.
  EXPECT_EQ(blocks[0].heading.rfind("Run 4: tiny-dense ", 0), 0u) << blocks[0].heading;
  EXPECT_NE(blocks[0].heading.find("seq128"), std::string::npos) << blocks[0].heading;
  ASSERT_FALSE(blocks[0].findings.empty());
  EXPECT_EQ(blocks[0].findings[0].rfind("simulated step time (median) ", 0), 0u) << blocks[0].findings[0];
  EXPECT_NE(blocks[0].findings[0].find("out-of-sample (calibrated on " +
                                       core::provenance_path(path("fitted")) + ")"),
            std::string::npos)
      << blocks[0].findings[0];
  // Then the twin of the calibration run itself, in-sample.
  EXPECT_EQ(blocks[1].heading.rfind("Run 3: tiny-dense ", 0), 0u) << blocks[1].heading;
  ASSERT_FALSE(blocks[1].findings.empty());
  EXPECT_NE(blocks[1].findings[0].find("in-sample (the cluster was calibrated on this run)"),
            std::string::npos)
      << blocks[1].findings[0];
  // Every run's headline (step time, tokens/s, energy per token) comes before any host finding; the measured
  // runs open with it, the twins right after their error.
  for (const VerdictBlock& block : blocks) {
    const bool twin = block.findings.size() > 1 && block.findings[0].starts_with("simulated");
    ASSERT_GT(block.findings.size(), twin ? 1u : 0u) << block.heading;
    const std::string& headline = block.findings[twin ? 1 : 0];
    EXPECT_EQ(headline.rfind("step time ", 0), 0u) << block.heading << ": " << headline;
    EXPECT_NE(headline.find(" tokens/s, energy per token "), std::string::npos) << headline;
  }
  EXPECT_NE(blocks[1].findings[1].find("(placeholder: cpu-host power, not a measurement)"), std::string::npos)
      << blocks[1].findings[1];
  EXPECT_NE(blocks[2].findings[0].find("energy per token not measured"), std::string::npos)
      << blocks[2].findings[0];
  // The calibration run says which twin's cluster was fitted to it; host CPU use is in no run's top three.
  EXPECT_EQ(blocks[2].heading.rfind("Run 1: tiny-dense ", 0), 0u) << blocks[2].heading;
  ASSERT_GT(blocks[2].findings.size(), 1u);
  EXPECT_EQ(blocks[2].findings[1].rfind("calibration run: cluster cal (run 3, run 4) was fitted", 0), 0u)
      << blocks[2].findings[1];
  // The verdict's first three lines (the held-out twin's) hold no host CPU or memory finding.
  for (const std::string& finding : blocks[0].findings) {
    EXPECT_EQ(finding.find("host CPU utilization"), std::string::npos) << finding;
    EXPECT_EQ(finding.find("host memory"), std::string::npos) << finding;
  }
  // Two measured runs of other layouts: the verdict says which is better, each a measurement (issue 66 item
  // 2).
  const std::string verdict = html.substr(html.find("id=\"verdict\""));
  EXPECT_NE(verdict.find("<div class=\"verdict-which\">Which is better?</div>"), std::string::npos)
      << verdict.substr(0, 3000);
  EXPECT_NE(verdict.find("throughput: run "), std::string::npos) << verdict.substr(0, 3000);
  EXPECT_NE(verdict.find("both measured"), std::string::npos) << verdict.substr(0, 3000);
  // Every run's section heading names its model.
  const std::regex heading("<h2>Run [0-9]+: ([^<]*)");
  int headings = 0;
  for (std::sregex_iterator it(html.begin(), html.end(), heading), end; it != end; ++it, ++headings)
    EXPECT_EQ((*it)[1].str().rfind("tiny-dense ", 0), 0u) << (*it)[1].str();
  EXPECT_EQ(headings, 4);
}

TEST_F(SampleVerdict, CompareJsonSaysWhichErrorIsInSample) {
  const testing::Outcome compared = calo("compare --json " + path("fitted") + " " + path("held-out") + " " +
                                         path("twin-fitted") + " " + path("twin-held-out"));
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  const nlohmann::json json = nlohmann::json::parse(compared.output);
  const nlohmann::json& info = json["run_info"];
  ASSERT_EQ(info.size(), 4u);
  EXPECT_FALSE(info[0].contains("sample"));
  EXPECT_EQ(info[2]["sample"], "in-sample");
  EXPECT_EQ(info[3]["sample"], "out-of-sample");
  EXPECT_EQ(info[3]["calibrated_on"], nlohmann::json::array({core::provenance_path(path("fitted"))}));
  EXPECT_TRUE(info[3]["placeholder_power"].get<bool>());
  EXPECT_FALSE(info[1]["placeholder_power"].get<bool>());
  EXPECT_EQ(json["runs"][1].get<std::string>().rfind("tiny-dense TP1-PP1-DP1 mbs1 gbs2", 0), 0u)
      << json["runs"];
}

TEST_F(SampleVerdict, TablesMarkTheCpuHostsPlaceholderPower) {
  const std::string html = report_of({path("held-out"), path("twin-held-out")});
  const auto side = html.find("<table class=\"summary\">");
  ASSERT_NE(side, std::string::npos);
  const std::string table = html.substr(side, html.find("</table>", side) - side);
  for (const char* key : {"tokens_per_j", "energy_per_token_j", "power_gpu_mean_w", "temp_gpu_peak_c"}) {
    // The bench measured no power ("–"), the twin's value is cpu-host's placeholder and says so.
    const std::regex row(
        std::string("<td class=\"key\">") + key +
        "</td><td>[^<]*</td><td>–</td><td>[0-9.e+]+ <span class=\"placeholder\">placeholder</span>");
    EXPECT_TRUE(std::regex_search(table, row)) << key << " in " << table;
  }
  EXPECT_FALSE(std::regex_search(table, std::regex("tokens_per_s</td>[^\n]*placeholder")))
      << "tokens/s is no power";
  EXPECT_NE(html.find("heat (placeholder energy, power and heat: run 2, on the cpu-host cluster)"),
            std::string::npos)
      << "the bar chart's title";
  // The simulated-vs-measured table shows no placeholder (the bench has no power to set one beside), so no
  // note; the side-by-side table does.
  const auto versus = html.find("<table class=\"sim-vs-measured\">");
  ASSERT_NE(versus, std::string::npos);
  EXPECT_EQ(html.substr(versus, html.find("</table>", versus) + 80 - versus).find("placeholder"),
            std::string::npos);
  EXPECT_NE(
      html.find("</table>\n<p class=\"note\"><span class=\"placeholder\">placeholder</span>: power", side),
      std::string::npos);
  EXPECT_NE(html.find("placeholder (cpu-host preset): GPU power per GPU"), std::string::npos);
  EXPECT_NE(html.find("<h3>Per-GPU figures (power and heat: cpu-host placeholders)</h3>"), std::string::npos);
}

TEST_F(SampleVerdict, AMovedRunOrAnOlderCalibrationFileStillKnowsItsRun) {
  // Moved: the run's identity (host and start) recorded by calo calibrate still names it.
  fs::copy(path("fitted"), path("moved"), fs::copy_options::recursive);
  std::vector<VerdictBlock> blocks = verdict_blocks(report_of({path("moved"), path("twin-fitted")}));
  ASSERT_FALSE(blocks.empty());
  ASSERT_FALSE(blocks[0].findings.empty());
  EXPECT_NE(blocks[0].findings[0].find(", in-sample ("), std::string::npos) << blocks[0].findings[0];
  // A calibration file written before runs carried their identity: the path names the run, or, moved, its
  // measured median step; the held-out run is neither.
  std::ifstream in(path("cal.yaml"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string old = std::regex_replace(text.str(), std::regex(" *started_unix_ns: [0-9]+\n"), "");
  ASSERT_NE(old, text.str());
  std::ofstream(path("old.yaml")) << old;
  for (const char* name : {"fitted", "held-out"}) {
    const testing::Outcome twin = calo("sim --from " + path(name) + " --cluster " + path("old.yaml") +
                                       " --out " + path(std::string("old-twin-") + name));
    ASSERT_EQ(twin.exit_code, 0) << twin.output;
  }
  for (const char* measured : {"fitted", "moved"}) {
    blocks = verdict_blocks(report_of({path(measured), path("old-twin-fitted")}));
    ASSERT_FALSE(blocks.empty() || blocks[0].findings.empty()) << measured;
    EXPECT_NE(blocks[0].findings[0].find(", in-sample ("), std::string::npos)
        << measured << ": " << blocks[0].findings[0];
  }
  blocks = verdict_blocks(report_of({path("held-out"), path("old-twin-held-out")}));
  ASSERT_FALSE(blocks.empty() || blocks[0].findings.empty());
  EXPECT_NE(blocks[0].findings[0].find(", out-of-sample (calibrated on "), std::string::npos)
      << blocks[0].findings[0];
}

}  // namespace
}  // namespace calo::report
