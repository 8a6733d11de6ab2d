// Campaign module: spec parsing, grid expansion, invalid points, and `calo sweep` run as a real child
// process.
#include "campaign/campaign.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/config.h"
#include "core/error.h"

namespace calo::campaign {
namespace {

namespace fs = std::filesystem;

Spec spec_from(const std::string& yaml) {
  return parse_spec(core::parse_yaml(yaml, "test.yaml"), "test.yaml");
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("calo-campaign-{}-{}", name, getpid());
  fs::remove_all(dir);
  return dir;
}

nlohmann::json read_index(const fs::path& dir) {
  std::ifstream file(dir / "campaign.json");
  return nlohmann::json::parse(file);
}

int count_status(const nlohmann::json& index, const std::string& status) {
  int count = 0;
  for (const auto& entry : index["points"]) count += entry["status"] == status ? 1 : 0;
  return count;
}

/// Starts `calo sweep` in its own process group (so a kill reaches its simulation children too).
pid_t start_sweep(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    std::vector<std::string> copy = {CALO_BINARY, "sweep"};
    copy.insert(copy.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : copy) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const fs::path log = fs::temp_directory_path() / fmt::format("calo-sweep-child-{}.log", getpid());
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    execv(CALO_BINARY, argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

fs::path write_spec(const fs::path& dir, const std::string& yaml) {
  fs::create_directories(dir);
  const fs::path path = dir / "spec.yaml";
  std::ofstream(path) << yaml;
  return path;
}

TEST(CampaignSpec, ExpandsTheCartesianProductWithFixedFlags) {
  const Spec spec = spec_from(
      "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 16}\n"
      "axes:\n  layout: [{tp: 2, pp: 2}, {tp: 4, pp: 1}]\n  mbs: [1, 2, 4]\n  overlap: [off, on]\n");
  const std::vector<Point> points = expand_grid(spec);
  ASSERT_EQ(points.size(), 2u * 3u * 2u);
  EXPECT_EQ(points.front().name, "tp2-pp2-mbs1-overlap-off");
  EXPECT_EQ(points.back().name, "tp4-pp1-mbs4-overlap-on");
  const auto& flags = points.back().flags;
  EXPECT_EQ(flags.front(), (std::pair<std::string, std::string>{"gbs", "16"}));
  EXPECT_NE(std::find(flags.begin(), flags.end(), std::pair<std::string, std::string>{"tp", "4"}),
            flags.end());
}

TEST(CampaignSpec, BadSpecNamesTheKeyAndTheFix) {
  try {
    spec_from("model: tiny-dense\ncluster: h100-hgx\ngpus: 4\naxes: {mbz: [1, 2]}\n");
    FAIL() << "unknown axis accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("mbz"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("mbs"), std::string::npos) << error.what();
  }
  EXPECT_THROW(spec_from("model: tiny-dense\ncluster: h100-hgx\ngpus: 4\n"), InputError);
  EXPECT_THROW(spec_from("cluster: h100-hgx\ngpus: 4\naxes: {mbs: [1]}\n"), InputError);
  EXPECT_THROW(
      spec_from("model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {mbs: 1}\naxes: {mbs: [1]}\n"),
      InputError);
}

// Found while writing the campaign_spec fuzz target: gpus/steps were narrowed to int before the check
// (4294967297 GPUs passed as 1), and a few lines of axes could ask expand_grid for 10^20 points.
TEST(CampaignSpec, HugeCountsAndGridsAreBadInput) {
  const std::string head = "model: tiny-dense\ncluster: h100-hgx\n";
  EXPECT_THROW(spec_from(head + "gpus: 4294967297\naxes: {mbs: [1]}\n"), InputError);
  EXPECT_THROW(spec_from(head + "gpus: 4\nsteps: 4294967297\naxes: {mbs: [1]}\n"), InputError);
  EXPECT_THROW(spec_from(head + "gpus: 18446744073709551615\naxes: {mbs: [1]}\n"), InputError);
  std::string axes = "axes:\n";
  for (const char* key : {"mbs", "gbs", "tp", "pp", "dp"})
    axes += std::string("  ") + key + ": [1, 2, 3, 4, 5, 6, 7]\n";
  try {
    spec_from(head + "gpus: 8\n" + axes);  // 7^5 = 16807 points
    FAIL() << "a 16807-point grid was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("16807 points; at most 10000"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(expand_grid(spec_from(head + "gpus: 8\naxes: {mbs: [1, 2, 4, 8], gbs: [8, 16]}\n")).size(), 8u);
}

TEST(CampaignSpec, InvalidPointsAreDroppedWithTheReason) {
  // Llama3-8B on 8 H100: TP8 fits, TP1 (dp 8) does not fit memory, TP3 does not divide the heads or the
  // GPUs.
  const Spec spec = spec_from(
      "model: llama3-8b\ncluster: h100-hgx\ngpus: 8\nfixed: {gbs: 64}\n"
      "axes:\n  layout: [{tp: 8, pp: 1}, {tp: 1, pp: 1}, {tp: 3, pp: 1}, {tp: 2, pp: 2, dp: 1}]\n");
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].skip_reason, "");
  EXPECT_NE(points[1].skip_reason.find("does not fit memory"), std::string::npos) << points[1].skip_reason;
  EXPECT_FALSE(points[2].skip_reason.empty());
  EXPECT_NE(points[3].skip_reason.find("is not the 8 GPUs"), std::string::npos) << points[3].skip_reason;
}

TEST(CampaignSpec, ShippedSpecsParseAndHaveRunnablePoints) {
  for (const auto& entry : fs::directory_iterator(fs::path(CALO_SOURCE_DIR) / "data" / "campaigns")) {
    const Spec spec = load_spec(entry.path());
    std::vector<Point> points = expand_grid(spec);
    validate_points(spec, points);
    const auto runnable =
        std::count_if(points.begin(), points.end(), [](const Point& p) { return p.skip_reason.empty(); });
    EXPECT_GT(runnable, 0) << entry.path();
  }
}

TEST(CampaignSweep, SmallSimSweepEndToEnd) {
  const fs::path dir = fresh_dir("e2e");
  const fs::path spec =
      write_spec(dir.string() + "-spec",
                 "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 16}\n"
                 "axes:\n  layout: [{tp: 2, pp: 2}, {tp: 4, pp: 1}, {tp: 3, pp: 1}]\n  mbs: [1, 2]\n");
  const pid_t pid = start_sweep({spec.string(), "--out", dir.string(), "--jobs", "2"});
  EXPECT_EQ(wait_exit(pid), 0);
  const nlohmann::json index = read_index(dir);
  ASSERT_EQ(index["points"].size(), 6u);
  EXPECT_EQ(count_status(index, "done"), 4);
  EXPECT_EQ(count_status(index, "skipped"), 2);
  for (const auto& entry : index["points"]) {
    if (entry["status"] != "done") continue;
    EXPECT_TRUE(fs::exists(dir / entry["run_dir"].get<std::string>() / "run.json") ||
                fs::exists(dir / entry["run_dir"].get<std::string>()));
    EXPECT_GT(entry["figures"]["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(entry["figures"]["mfu"].get<double>(), 0);
    EXPECT_GT(entry["figures"]["energy_per_token_j"].get<double>(), 0);
    EXPECT_GT(entry["figures"]["peak_power_w"].get<double>(), 0);
    EXPECT_GT(entry["figures"]["max_temp_c"].get<double>(), 20);
  }
  // Without --resume an existing campaign is refused (exit 2), and nothing is overwritten.
  EXPECT_EQ(wait_exit(start_sweep({spec.string(), "--out", dir.string()})), 2);
  fs::remove_all(dir);
}

TEST(CampaignSweep, ResumeAfterKillRedoesNothing) {
  const fs::path dir = fresh_dir("resume");
  const fs::path spec =
      write_spec(dir.string() + "-spec",
                 "model: llama3-8b\ncluster: h100-hgx\ngpus: 16\nsteps: 3\nfixed: {gbs: 64}\n"
                 "axes:\n  layout: [{tp: 2, pp: 2}, {tp: 4, pp: 2}, {tp: 2, pp: 4}, {tp: 1, pp: 4}]\n");
  const pid_t pid = start_sweep({spec.string(), "--out", dir.string()});
  // Kill the sweep (and its running child) as soon as the first point is done.
  nlohmann::json index;
  for (int attempt = 0; attempt < 6000; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!fs::exists(dir / "campaign.json")) continue;
    index = read_index(dir);
    if (count_status(index, "done") >= 1) break;
  }
  kill(-pid, SIGKILL);
  wait_exit(pid);
  index = read_index(dir);
  const int done_before = count_status(index, "done");
  ASSERT_GE(done_before, 1);
  ASSERT_LT(done_before, 4) << "the sweep finished before it could be killed; the test proves nothing";
  std::map<std::string, fs::file_time_type> stamps;
  for (const auto& entry : index["points"]) {
    if (entry["status"] == "done")
      stamps[entry["name"]] = fs::last_write_time(dir / (entry["name"].get<std::string>() + ".json"));
  }
  EXPECT_EQ(wait_exit(start_sweep({spec.string(), "--out", dir.string(), "--resume"})), 0);
  index = read_index(dir);
  EXPECT_EQ(count_status(index, "done"), 4);
  for (const auto& [name, stamp] : stamps) {
    EXPECT_EQ(fs::last_write_time(dir / (name + ".json")), stamp) << name << " was run again";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace calo::campaign
