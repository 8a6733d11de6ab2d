// Inputs that ended in "internal error" or meant something else than they said (issue 67 items 12 and 13),
// each run as a user would: the command, its exit code and the message naming the input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../common/run_calo.h"

namespace {

using calo::testing::Outcome;
using calo::testing::run_calo;

/// A fresh folder of this process under the system's temporary folder, removed by the destructor.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  /// Writes `text` to the file `name` inside it and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

TEST(InputErrors, ACampaignPowerCapTakesTheNumbersCaloSimTakes) {
  const ScratchDir dir("calo-power-cap");
  const std::string spec = dir.write("caps.yaml",
                                     "name: caps\nmodel: tiny-dense\ncluster: h100-hgx\ngpus: 1\nsteps: 1\n"
                                     "axes:\n  power-cap: [500, 10.5, 550.5]\n");
  const Outcome sweep = run_calo("sweep " + spec + " --backend sim --out " + (dir.path / "out").string());
  EXPECT_EQ(sweep.exit_code, 0) << sweep.output;
  EXPECT_NE(sweep.output.find("power-cap 10.5: a cap on NVIDIA H100 SXM must lie above"), std::string::npos)
      << sweep.output;
  EXPECT_EQ(sweep.output.find("expected a number"), std::string::npos) << sweep.output;
  const Outcome sim =
      run_calo("sim --model tiny-dense --cluster h100-hgx --gpus 1 --no-store --power-cap 10.5");
  EXPECT_EQ(sim.exit_code, 2) << sim.output;
  EXPECT_NE(sim.output.find("a cap on NVIDIA H100 SXM must lie above"), std::string::npos) << sim.output;
}

TEST(InputErrors, ACampaignIndexOfTheWrongShapeIsDamagedNotAnInternalError) {
  const ScratchDir dir("calo-index");
  const std::string spec = dir.write("caps.yaml",
                                     "name: caps\nmodel: tiny-dense\ncluster: h100-hgx\ngpus: 1\nsteps: 1\n"
                                     "axes:\n  power-cap: [500, 600]\n");
  std::filesystem::create_directories(dir.path / "out");
  for (const char* index : {R"({"points":"x"})", R"({"points":[1]})", R"({"points":[{"name":3}]})",
                            R"({"points":[{"name":"a","status":5}]})"}) {
    std::ofstream(dir.path / "out" / "campaign.json") << index;
    const Outcome outcome =
        run_calo("sweep " + spec + " --backend sim --resume --out " + (dir.path / "out").string());
    EXPECT_EQ(outcome.exit_code, 2) << index << ": " << outcome.output;
    EXPECT_NE(outcome.output.find("campaign.json is damaged (not a campaign index)"), std::string::npos)
        << index << ": " << outcome.output;
    const Outcome report =
        run_calo("report " + (dir.path / "out").string() + " --out " + (dir.path / "report.html").string());
    EXPECT_EQ(report.exit_code, 2) << index << ": " << report.output;
    EXPECT_NE(report.output.find("not a campaign index"), std::string::npos)
        << index << ": " << report.output;
  }
}

TEST(InputErrors, APlanFileWithTextForSecondsNamesTheField) {
  const ScratchDir dir("calo-plan-file");
  std::filesystem::create_directories(dir.path / "run");
  const std::string plan =
      dir.write("plan.json", R"({"ranking":[{"layout":"TP1-PP1-DP1 mbs1 gbs1 1f1b","iteration_s":"NaN"}]})");
  const Outcome outcome =
      run_calo("validate " + (dir.path / "run").string() + " --cluster h100-hgx --plan " + plan);
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("ranking[0].iteration_s: expected seconds"), std::string::npos)
      << outcome.output;
  const std::string layout = dir.write("layout.json", R"({"ranking":[{"layout":7,"iteration_s":1.5}]})");
  const Outcome bad_layout =
      run_calo("validate " + (dir.path / "run").string() + " --cluster h100-hgx --plan " + layout);
  EXPECT_EQ(bad_layout.exit_code, 2) << bad_layout.output;
  EXPECT_NE(bad_layout.output.find("ranking[0].layout: expected a layout text"), std::string::npos)
      << bad_layout.output;
}

TEST(InputErrors, RecordPeriodIsRepeatableAsDocumented) {
  const ScratchDir dir("calo-record-periods");
  const Outcome outcome = run_calo("record --out " + (dir.path / "run").string() +
                                   " --sources procfs --period procfs.cpu=100ms --period procfs.memory=1s "
                                   "--markers megatron --markers torchtitan --quiet -- true");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_EQ(outcome.output.find("At Most 1"), std::string::npos) << outcome.output;
}

}  // namespace
