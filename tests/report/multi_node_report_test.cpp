// Issue 66 item 6: the documented Slurm flow (one `calo record` per node, `calo merge`, `calo report`) with
// two real recorder processes as two nodes. The merged report must read like one job on two nodes: every
// series and verdict names its node, and a table lists the nodes with their hosts, runs, ranks and clock
// shifts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MultiNodeReport, TwoRecordedNodesMergeIntoAReportThatNamesEachNode) {
  const std::filesystem::path calo = std::filesystem::path(CALO_BINARY_DIR) / "calo";
  ASSERT_TRUE(std::filesystem::exists(calo)) << calo;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "calo-multi-node-report";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Each "node" runs rank RANK of a Python job that marks 8 steps; node 1's rank is 40 % slower per step.
  {
    std::ofstream train(dir / "train.py");
    train << "import os, sys, time\nsys.path.insert(0, '" << CALO_SOURCE_DIR << "/python')\nimport calo\n"
          << "slow = float(os.environ.get('SLOW', '1'))\nfor i in range(8):\n    with calo.step(i):\n"
          << "        t = time.time()\n        while time.time() - t < 0.1 * slow: pass\n";
  }
  auto record = [&](int node, const char* slow) {
    return "RANK=" + std::to_string(node) + " SLOW=" + slow + " " + calo.string() + " record --quiet --out " +
           (dir / ("node" + std::to_string(node))).string() + " -- python3 " + (dir / "train.py").string() +
           " > " + (dir / ("node" + std::to_string(node) + ".log")).string() + " 2>&1";
  };
  // The two recorders run at once, as srun starts them on two nodes.
  const std::string both = "(" + record(0, "1") + ") & (" + record(1, "1.4") + "); wait";
  ASSERT_EQ(std::system(("bash -c '" + both + "'").c_str()), 0) << read_text(dir / "node1.log");
  const std::string merge = calo.string() + " merge " + (dir / "node0").string() + " " +
                            (dir / "node1").string() + " --out " + (dir / "all").string() + " > " +
                            (dir / "merge.log").string() + " 2>&1";
  ASSERT_EQ(std::system(merge.c_str()), 0) << read_text(dir / "merge.log");
  const std::string report = calo.string() + " report " + (dir / "all").string() + " --out " +
                             (dir / "report.html").string() + " > " + (dir / "report.log").string() + " 2>&1";
  ASSERT_EQ(std::system(report.c_str()), 0) << read_text(dir / "report.log");
  const std::string html = read_text(dir / "report.html");
  // The series legend tells the nodes apart (it said "host vm" twice).
  EXPECT_NE(html.find("node 0: "), std::string::npos);
  EXPECT_NE(html.find("node 1: "), std::string::npos);
  // The nodes table: one row per node, with the run it was recorded in and its rank.
  EXPECT_NE(html.find("one job on 2 nodes"), std::string::npos);
  EXPECT_NE(html.find((dir / "node1").string()), std::string::npos);
  // The slower node's rank is the straggler, named with its node.
  EXPECT_NE(html.find("rank 1 (node 1"), std::string::npos) << html.substr(0, 4000);
  EXPECT_EQ(html.find("rank 1 is a straggler"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
