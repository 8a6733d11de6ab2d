// Campaign module: spec parsing, grid expansion, invalid points, and `calo sweep` run as a real child
// process.
#include "campaign/campaign.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "../common/processes.h"
#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "core/config.h"
#include "core/error.h"

namespace calo::campaign {
namespace {

namespace fs = std::filesystem;

Spec spec_from(const std::string& yaml) {
  return parse_spec(core::parse_yaml(yaml, "test.yaml"), "test.yaml");
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = calo::testing::scratch_path("campaign-" + name);
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

/// Starts `calo sweep` in its own process group (so a kill reaches its simulation children too), its stdout
/// and stderr to `log` (default: a scratch file of its own).
pid_t start_sweep(const std::vector<std::string>& args, fs::path log = {}) {
  // The child's log is named here: the forked child only redirects and execs.
  static int sweeps = 0;
  if (log.empty()) log = calo::testing::scratch_path(fmt::format("sweep-child-{}.log", sweeps++));
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    std::vector<std::string> copy = {CALO_BINARY, "sweep"};
    copy.insert(copy.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : copy) argv.push_back(arg.data());
    argv.push_back(nullptr);
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), fileno(stderr));  // one file offset: neither overwrites the other's lines
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
  // GPUs; TP2 (dp 4) needs 78.87 GiB: beyond the usable 73.26, within the card, so tight.
  const Spec spec = spec_from(
      "model: llama3-8b\ncluster: h100-hgx\ngpus: 8\nfixed: {gbs: 64}\n"
      "axes:\n  layout: [{tp: 8, pp: 1}, {tp: 1, pp: 1}, {tp: 3, pp: 1}, {tp: 2, pp: 2, dp: 1}, {tp: 2, pp: "
      "1}]\n");
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 5u);
  EXPECT_EQ(points[0].skip_reason, "");
  EXPECT_NE(points[1].skip_reason.find("does not fit memory"), std::string::npos) << points[1].skip_reason;
  EXPECT_EQ(points[1].skip_reason.find("tight"), std::string::npos) << points[1].skip_reason;
  EXPECT_FALSE(points[2].skip_reason.empty());
  EXPECT_NE(points[3].skip_reason.find("is not the 8 GPUs"), std::string::npos) << points[3].skip_reason;
  EXPECT_NE(
      points[4].skip_reason.find("does not fit memory: needs 78.9 GiB per GPU, 73.3 GiB usable of a NVIDIA "
                                 "H100 SXM (tight: the card itself would leave 801.54 MiB for"),
      std::string::npos)
      << points[4].skip_reason;
  // memory-limit card admits the tight point, not the one beyond the card; calo sim gets the flag.
  const Spec card = spec_from(
      "model: llama3-8b\ncluster: h100-hgx\ngpus: 8\nfixed: {gbs: 64, memory-limit: card}\n"
      "axes:\n  layout: [{tp: 1, pp: 1}, {tp: 2, pp: 1}]\n");
  points = expand_grid(card);
  validate_points(card, points);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_NE(points[0].skip_reason.find("does not fit memory"), std::string::npos) << points[0].skip_reason;
  EXPECT_EQ(points[1].skip_reason, "");
  const std::vector<std::string> args = point_arguments(card, points[1], "sim", "run");
  const auto flag = std::find(args.begin(), args.end(), "--memory-limit");
  ASSERT_NE(flag, args.end());
  EXPECT_EQ(*(flag + 1), "card");
  EXPECT_THROW(spec_from("model: llama3-8b\ncluster: h100-hgx\ngpus: 8\nfixed: {memory-limit: cards}\n"
                         "axes: {tp: [2]}\n"),
               InputError);
  // calo bench runs what fits and measures it: memory-limit on a real backend is refused, nothing written.
  RunOptions options;
  options.backend = "cuda";
  options.out_dir = fresh_dir("memory-limit-bench");
  try {
    run_campaign(card, options);
    ADD_FAILURE() << "a memory-limit sweep on calo bench was accepted";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("memory-limit is simulated only"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(fs::exists(options.out_dir));
}

TEST(CampaignSpec, ContextParallelIsALayoutKey) {
  // Llama3-8B at 32K tokens on 8 H100: cp 2 x tp 4 fits and derives dp 1; a 1002-token cp 2 point breaks the
  // sequence rule (4 chunks); the point's arguments carry --cp and --cp-comm through to calo sim.
  const Spec spec = spec_from(
      "model: llama3-8b\ncluster: h100-hgx\ngpus: 8\nfixed: {gbs: 4, seq: 32768, recompute: full}\n"
      "axes:\n  layout: [{tp: 4, cp: 2, cp-comm: allgather}, {tp: 4, cp: 2, seq: 1002}]\n");
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].skip_reason, "");
  EXPECT_NE(points[1].skip_reason.find("multiple of 2*cp"), std::string::npos) << points[1].skip_reason;
  std::string arguments;
  for (const std::string& word : point_arguments(spec, points[0], "sim", "")) arguments += word + " ";
  EXPECT_NE(arguments.find("--cp 2"), std::string::npos) << arguments;
  EXPECT_NE(arguments.find("--cp-comm allgather"), std::string::npos) << arguments;
}

TEST(CampaignSpec, LayersSlicesTheModelForEveryPoint) {
  // Issue 40 item 10: `layers` as `--layers` of every command. Llama3-8B sliced to 4 layers on one GPU: every
  // micro-batch fits and each point's command carries --layers 4; pp 5 stages exceed the 4 layers (and do not
  // divide the 6 of Megatron-LM's split with the embedding and the loss counted; pp 3 does: 1, 2, 1 layers).
  const Spec spec = spec_from(
      "model: llama3-8b\nlayers: 4\ncluster: h200-hgx\ngpus: 1\nfixed: {gbs: 8}\naxes:\n  mbs: [1, 8]\n");
  EXPECT_EQ(spec.layers, 4);
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 2u);
  for (const Point& point : points) {
    EXPECT_EQ(point.skip_reason, "") << point.name;
    std::string arguments;
    for (const std::string& word : point_arguments(spec, point, "sim", "")) arguments += word + " ";
    EXPECT_NE(arguments.find("--layers 4 "), std::string::npos) << arguments;
  }
  const Spec uneven =
      spec_from("model: llama3-8b\nlayers: 4\ncluster: h200-hgx\ngpus: 15\naxes:\n  pp: [3, 5]\n");
  std::vector<Point> uneven_points = expand_grid(uneven);
  validate_points(uneven, uneven_points);
  ASSERT_EQ(uneven_points.size(), 2u);
  EXPECT_EQ(uneven_points[0].skip_reason, "");
  EXPECT_NE(uneven_points[1].skip_reason.find("try pp=4"), std::string::npos) << uneven_points[1].skip_reason;
  EXPECT_THROW(spec_from("model: llama3-8b\nlayers: 0\ncluster: h200-hgx\naxes:\n  mbs: [1]\n"), InputError);
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

// A sweep killed with SIGKILL takes its point's whole process tree with it (its keeper, calo bench, mpirun
// and the ranks); while it ran, a second sweep of the campaign was refused naming it; an immediate --resume
// waits for the tree to end, removes the cut-off point's partial run (saying so) and runs the point again.
TEST(CampaignSweep, SigkillOfTheSweepEndsItsPointsTreeAndAnImmediateResumeRunsItAgain) {
  const fs::path dir = fresh_dir("sigkill");
  const fs::path spec = write_spec(dir.string() + "-spec",
                                   "model: tiny-dense\ncluster: h100-hgx\ngpus: 2\nsteps: 80\n"
                                   "fixed: {gbs: 2, tp: 2}\naxes:\n  mbs: [1]\n");
  const std::vector<std::string> args = {spec.string(), "--out", dir.string(), "--backend", "cpu"};
  const pid_t sweep = start_sweep(args);
  std::vector<pid_t> tree;  // calo bench, mpirun and the two ranks (and keepers, named calo-keeper)
  const auto calo_processes = [&tree] {
    return std::count_if(tree.begin(), tree.end(),
                         [](pid_t pid) { return calo::testing::process_name(pid) == "calo"; });
  };
  const fs::path partial_run = dir / "mbs1" / "run.db";
  for (int attempt = 0; attempt < 1500 && (calo_processes() < 3 || !fs::exists(partial_run)); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    tree = calo::testing::descendants(sweep);
  }
  if (calo_processes() < 3 || !fs::exists(partial_run)) kill(sweep, SIGKILL);
  ASSERT_GE(calo_processes(), 3) << "the point's ranks did not start";
  ASSERT_TRUE(fs::exists(partial_run)) << "the point stored nothing yet";
  const testing::Outcome second =
      testing::run_calo("sweep " + spec.string() + " --out " + dir.string() + " --backend cpu --resume");
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_NE(second.output.find("in use by process " + std::to_string(sweep)), std::string::npos)
      << second.output;
  tree = calo::testing::descendants(sweep);
  kill(sweep, SIGKILL);
  wait_exit(sweep);
  const fs::path resume_log = calo::testing::scratch_path("sweep-sigkill-resume.log");
  std::vector<std::string> resume_args = args;
  resume_args.push_back("--resume");
  const pid_t resume = start_sweep(resume_args, resume_log);
  const std::vector<pid_t> left = calo::testing::wait_gone(tree, 5.0);
  EXPECT_TRUE(left.empty()) << left.size() << " process(es) of the point outlived the killed sweep";
  calo::testing::kill_all(left);
  EXPECT_EQ(wait_exit(resume), 0) << std::ifstream(resume_log).rdbuf();
  std::stringstream log;
  log << std::ifstream(resume_log).rdbuf();
  EXPECT_NE(log.str().find("removed " + (dir / "mbs1").string() + ", the partial run"), std::string::npos)
      << log.str();
  EXPECT_EQ(count_status(read_index(dir), "done"), 1);
  fs::remove_all(dir);
}

// The study's Llama3-70B layouts on 32 H200 with its optimizer (distributed, zero 1) and no recomputation:
// the three that hold activations of at most 10 layers per stage fit the H200 preset (the GPU the driver
// reports as 143771 MiB); TP1-PP16 (no tensor split) does not, whatever the reserve.
TEST(CampaignSpec, StudyLayoutsOfLlama70bOnH200FitExceptTp1) {
  std::vector<Point> points =
      expand_grid(load_spec(fs::path(CALO_SOURCE_DIR) / "data/campaigns/parallelism-llama3-70b-h200.yaml"));
  const Spec spec = load_spec(fs::path(CALO_SOURCE_DIR) / "data/campaigns/parallelism-llama3-70b-h200.yaml");
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 4u);
  for (const Point& point : points) {
    if (point.name == "tp1-pp16")
      EXPECT_NE(point.skip_reason.find("does not fit memory"), std::string::npos) << point.skip_reason;
    else
      EXPECT_EQ(point.skip_reason, "") << point.name;
  }
}

TEST(CampaignSpec, AxisValueNoModelAcceptsNamesTheKeyAndTheValidValues) {
  const std::string head = "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\naxes:\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  recompute: [none, sometimes]\n", "none, selective, full"},
      {"  schedule: [zigzag]\n", "gpipe, 1f1b, interleaved, zb-h1, zb-v"},
      {"  overlap: [maybe]\n", "on or off"},
      {"  tp: [0, 2]\n", "whole number >= 1"},
      {"  mbs: [two]\n", "whole number >= 1"},
      {"  zero: [4]\n", "0, 1, 2, 3"},
      {"  layout: [{tp: 2, pp: -1}]\n", "whole number >= 1"}};
  for (const auto& [axis, valid] : cases) {
    try {
      spec_from(head + axis);
      ADD_FAILURE() << "accepted " << axis;
    } catch (const InputError& error) {
      const std::string message = error.what();
      const std::string key = axis.substr(2, axis.find(':') - 2);
      EXPECT_NE(message.find(key), std::string::npos) << message;
      EXPECT_NE(message.find(valid), std::string::npos) << message;
    }
  }
  EXPECT_THROW(spec_from("model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {recompute: most}\n"
                         "axes:\n  mbs: [1]\n"),
               InputError);
}

TEST(CampaignSpec, ShardingKeysSweepZeroTwoAndHybridSharding) {
  const Spec spec = spec_from(
      "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 8}\n"
      "axes:\n  zero: [2, 3]\n  fsdp-shard-group: [2]\n  fsdp-reshard-after-forward: [on, off]\n");
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 4u);
  int runnable = 0;
  for (const Point& point : points) {
    bool zero3 = false;
    for (const auto& [key, value] : point.flags) zero3 = zero3 || (key == "zero" && value == "3");
    if (zero3) {
      EXPECT_EQ(point.skip_reason, "") << point.name;
      ++runnable;
    } else {
      EXPECT_NE(point.skip_reason.find("needs --zero 3"), std::string::npos) << point.skip_reason;
    }
  }
  EXPECT_EQ(runnable, 2);
  try {
    spec_from(
        "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\naxes:\n  fsdp-reshard-after-forward: [maybe]\n");
    ADD_FAILURE() << "accepted fsdp-reshard-after-forward: maybe";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("use one of on, off"), std::string::npos) << error.what();
  }
}

TEST(CampaignSpec, PowerCapIsASimulatedAxisCheckedAgainstTheCard) {
  const Spec spec = spec_from(
      "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 8}\naxes:\n  power-cap: [50, 400, 700]\n");
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_NE(points[0].skip_reason.find("above its idle power"), std::string::npos) << points[0].skip_reason;
  EXPECT_EQ(points[1].skip_reason, "");
  std::string arguments;
  for (const std::string& word : point_arguments(spec, points[1], "sim", "")) arguments += word + " ";
  EXPECT_NE(arguments.find("--power-cap 400 "), std::string::npos) << arguments;
  // calo bench measures the card as it is: a power-cap sweep on a real backend is refused.
  RunOptions options;
  options.backend = "cpu";
  options.out_dir = fresh_dir("cap-bench");
  EXPECT_THROW(run_campaign(spec, options), InputError);
  EXPECT_FALSE(fs::exists(options.out_dir));
}

TEST(CampaignSpec, Fp8PointsOnACardWithoutFp8TensorCoresAreSkippedWithTheReason) {
  // The A100 has no FP8 tensor cores: its FP8 points are dropped naming the precision and the card; bf16
  // runs.
  const Spec a100 = spec_from(
      "model: tiny-dense\ncluster: a100-dgx\ngpus: 2\nfixed: {gbs: 4, zero: 3}\naxes:\n"
      "  precision: [bf16, fp8, fp8-delayed]\n");
  std::vector<Point> points = expand_grid(a100);
  validate_points(a100, points);
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].skip_reason, "");
  for (const int index : {1, 2}) {
    EXPECT_NE(points[index].skip_reason.find("has no FP8 tensor cores"), std::string::npos)
        << points[index].skip_reason;
    EXPECT_NE(points[index].skip_reason.find("A100"), std::string::npos) << points[index].skip_reason;
  }
  // On an H100 every point runs, and fp8-all-gather is a key carried to the command.
  const Spec h100 = spec_from(
      "model: tiny-dense\ncluster: h100-hgx\ngpus: 2\nfixed: {gbs: 4, zero: 3, precision: fp8}\naxes:\n"
      "  fp8-all-gather: [off, on]\n");
  std::vector<Point> h100_points = expand_grid(h100);
  validate_points(h100, h100_points);
  ASSERT_EQ(h100_points.size(), 2u);
  EXPECT_EQ(h100_points[0].skip_reason, "");
  EXPECT_EQ(h100_points[1].skip_reason, "");
  std::string arguments;
  for (const std::string& word : point_arguments(h100, h100_points[1], "sim", "")) arguments += word + " ";
  EXPECT_NE(arguments.find("--fp8-all-gather "), std::string::npos) << arguments;
}

TEST(CampaignSweep, SpecWithNoRunnablePointExits2AndWritesNothing) {
  const fs::path dir = fresh_dir("none");
  const fs::path spec = write_spec(dir.string() + "-spec",
                                   "model: llama3-70b\ncluster: h100-hgx\ngpus: 8\nfixed: {gbs: 8}\n"
                                   "axes:\n  layout: [{tp: 1, pp: 1}, {tp: 3, pp: 1}]\n");
  const testing::Outcome outcome = testing::run_calo("sweep " + spec.string() + " --out " + dir.string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("none can run"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("does not fit memory"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("is not the 8 GPUs"), std::string::npos) << outcome.output;
  EXPECT_FALSE(fs::exists(dir)) << "a refused sweep wrote " << dir;
}

TEST(CampaignSweep, ASymlinkPlantedAsAPointsLogIsRefusedBeforeAnythingRuns) {
  // A point's <name>.log and <name>.json were opened by its child with O_TRUNC, through a link planted there.
  const fs::path dir = fresh_dir("log-symlink");
  const std::string yaml =
      "model: tiny-dense\ncluster: h100-hgx\ngpus: 1\nfixed: {gbs: 4}\naxes:\n  mbs: [1, 2]\n";
  const fs::path spec = write_spec(dir.string() + "-spec", yaml);
  const std::vector<Point> points = expand_grid(spec_from(yaml));
  ASSERT_EQ(points.size(), 2u);
  fs::create_directories(dir);
  const fs::path victim = dir.string() + "-victim";
  std::ofstream(victim) << "keep\n";
  const fs::path link = dir / (points.back().name + ".log");
  fs::create_symlink(victim, link);
  const testing::Outcome outcome = testing::run_calo("sweep " + spec.string() + " --out " + dir.string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--out " + link.string() + " is a symbolic link"), std::string::npos)
      << outcome.output;
  std::ifstream kept(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "keep\n");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_FALSE(fs::exists(dir / "campaign.json"));  // refused before anything was written or run
  fs::remove_all(dir);
}

TEST(CampaignSweep, BadAxisValueExits2NamingTheKey) {
  const fs::path dir = fresh_dir("badvalue");
  const fs::path spec = write_spec(dir.string() + "-spec",
                                   "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\naxes:\n"
                                   "  recompute: [none, partial]\n");
  const testing::Outcome outcome = testing::run_calo("sweep " + spec.string() + " --out " + dir.string());
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("axes.recompute"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("none, selective, full"), std::string::npos) << outcome.output;
  EXPECT_FALSE(fs::exists(dir));
}

// A point whose child fails is recorded as failed with the child's error and the sweep goes on: the child
// here is /bin/sh, which fails on every point's arguments ("sim ...": no such script) with its own message.
TEST(CampaignSpec, NameIsAFolderNameAndStepsAreBounded) {
  const std::string body = "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\naxes: {mbs: [1]}\n";
  for (const char* name : {"../../x", "/tmp/x", "a/b", ".hidden", "..", "a b"}) {
    EXPECT_THROW(spec_from(std::string("name: \"") + name + "\"\n" + body), InputError) << name;
  }
  EXPECT_EQ(spec_from("name: study-1_v2.0\n" + body).name, "study-1_v2.0");
  EXPECT_THROW(spec_from("steps: 1000000000\n" + body), InputError);
  EXPECT_EQ(spec_from("steps: 100000\n" + body).steps, 100000);
}

TEST(CampaignSweep, ADamagedIndexIsNotSilentlyRerunOnResume) {
  const fs::path dir = fresh_dir("damaged-index");
  const Spec spec = spec_from("model: tiny-dense\ncluster: h100-hgx\ngpus: 4\naxes:\n  mbs: [1, 2]\n");
  RunOptions options;
  options.out_dir = dir;
  options.calo_bin = "/bin/sh";
  run_campaign(spec, options);
  std::string text;
  {
    std::ifstream in(dir / "campaign.json");
    std::stringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  std::ofstream(dir / "campaign.json") << text.substr(0, text.size() / 2);  // cut, as by a full disk
  options.resume = true;
  try {
    run_campaign(spec, options);
    FAIL() << "a damaged index was resumed";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("--adopt"), std::string::npos) << error.what();
  }
  options.adopt = true;  // with --adopt the points' own files say what is done
  EXPECT_EQ(run_campaign(spec, options)["points"].size(), 2u);
  fs::remove_all(dir);
}

TEST(CampaignSweep, FailedPointRecordsItsErrorAndTheSweepGoesOn) {
  const fs::path dir = fresh_dir("failed");
  const Spec spec =
      spec_from("model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 16}\naxes:\n  mbs: [1, 2, 4]\n");
  RunOptions options;
  options.out_dir = dir;
  options.calo_bin = "/bin/sh";
  const nlohmann::json index = run_campaign(spec, options);
  ASSERT_EQ(index["points"].size(), 3u);
  for (const auto& entry : index["points"]) {
    EXPECT_EQ(entry["status"], "failed") << entry.dump();
    const std::string reason = entry["reason"];
    EXPECT_NE(reason.find("exit status"), std::string::npos) << reason;
    EXPECT_NE(reason.find("sim"), std::string::npos) << "the child's error is missing: " << reason;
    EXPECT_NE(reason.find(entry["name"].get<std::string>() + ".log"), std::string::npos) << reason;
  }
  const nlohmann::json stored = read_index(dir);
  EXPECT_EQ(count_status(stored, "failed"), 3) << stored.dump(1);
  fs::remove_all(dir);
}

// Points run elsewhere by the printed commands (here: by sh) are indexed by --adopt without running again.
TEST(CampaignSweep, PrintedCommandsRunElsewhereAreAdopted) {
  const fs::path dir = fresh_dir("adopt");
  const fs::path spec = write_spec(dir.string() + "-spec",
                                   "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 16}\n"
                                   "axes:\n  mbs: [1, 2, 3]\n");
  const testing::Outcome printed =
      testing::run_calo("sweep " + spec.string() + " --out " + dir.string() + " --print-commands");
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  EXPECT_FALSE(fs::exists(dir)) << "--print-commands wrote something";
  std::stringstream lines(printed.output);
  int commands = 0;
  for (std::string line; std::getline(lines, line);) {
    ASSERT_NE(line.find(" sim "), std::string::npos) << line;
    ASSERT_EQ(std::system(line.c_str()), 0) << line;
    ++commands;
  }
  EXPECT_EQ(commands, 2) << "mbs 3 does not divide 16 / 4: skipped, no command";
  const auto stamp = fs::last_write_time(dir / "mbs1.json");
  const testing::Outcome adopted =
      testing::run_calo("sweep " + spec.string() + " --out " + dir.string() + " --adopt");
  ASSERT_EQ(adopted.exit_code, 0) << adopted.output;
  const nlohmann::json index = read_index(dir);
  EXPECT_EQ(count_status(index, "done"), 2);
  EXPECT_EQ(count_status(index, "skipped"), 1);
  for (const auto& entry : index["points"]) {
    if (entry["status"] != "done") continue;
    EXPECT_TRUE(entry.value("adopted", false));
    EXPECT_GT(entry["figures"]["tokens_per_s"].get<double>(), 0);
  }
  EXPECT_EQ(fs::last_write_time(dir / "mbs1.json"), stamp) << "an adopted point ran again";
  fs::remove_all(dir);
}

TEST(CampaignSweep, IndexRecordsAxesAndAxisValuesOfEveryPoint) {
  const Spec spec = spec_from(
      "model: tiny-dense\ncluster: h100-hgx\ngpus: 4\nfixed: {gbs: 8}\naxes:\n  mbs: [1, 2]\n"
      "  layout: [{tp: 2, pp: 2}, {tp: 4, pp: 1}]\n");
  EXPECT_EQ(axis_keys(spec), (std::vector<std::string>{"layout", "mbs"}));
  const std::vector<Point> points = expand_grid(spec);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[1].axis_values,
            (std::vector<std::pair<std::string, std::string>>{{"layout", "tp2-pp2"}, {"mbs", "2"}}));
}

}  // namespace
}  // namespace calo::campaign
