// Hostile inputs (tests/fuzz/regressions/, tests/fixtures/hostile/): each small file once made a command run
// without end, take gigabytes or write where it should not. Each case runs the real binary under the issue's
// bounds — 60 s and 2 GB of resident memory, measured by wait4 — and must end with exit 2 and a message
// naming the input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "../common/bounded_run.h"

namespace {

using calo::testing::BoundedOutcome;

constexpr double kMaxSeconds = 60;
constexpr long kMaxResidentKib = 2L * 1024 * 1024;

const std::filesystem::path kTests = std::filesystem::path(CALO_SOURCE_DIR) / "tests";

/// Runs CALO_EXECUTABLE `args` in `cwd`, killed at kMaxSeconds; under an address-space limit of
/// `address_space_bytes` when > 0 (as `prlimit --as` or `ulimit -v` would set).
BoundedOutcome run_bounded(const std::vector<std::string>& args, const std::filesystem::path& cwd,
                           long address_space_bytes) {
  calo::testing::RunBounds bounds;
  bounds.deadline_s = kMaxSeconds;
  bounds.address_space_bytes = address_space_bytes;
  bounds.cwd = cwd;
  return calo::testing::run_bounded(CALO_EXECUTABLE, args, bounds);
}

/// One hostile invocation ({} in an argument is the tests folder) and the text its error must contain.
struct Hostile {
  std::vector<std::string> args;
  std::string message;
  long address_space_bytes = 0;             ///< > 0: run under this address-space limit (RLIMIT_AS)
  long max_resident_kib = kMaxResidentKib;  ///< the peak resident set it must stay below
};

void PrintTo(const Hostile& hostile, std::ostream* out) {
  for (const auto& arg : hostile.args) *out << arg << ' ';
}

class HostileInputs : public testing::TestWithParam<Hostile> {};

TEST_P(HostileInputs, EndWithExit2WithinTheWorkBounds) {
  const std::filesystem::path cwd =
      std::filesystem::temp_directory_path() / ("calo-hostile-" + std::to_string(getpid()));
  std::filesystem::remove_all(cwd);
  std::filesystem::create_directories(cwd / "a" / "b");
  std::vector<std::string> args;
  for (std::string arg : GetParam().args) {
    if (const auto at = arg.find("{}"); at != std::string::npos) arg.replace(at, 2, kTests.string());
    args.push_back(arg);
  }
  const BoundedOutcome outcome = run_bounded(args, cwd / "a" / "b", GetParam().address_space_bytes);
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find(GetParam().message), std::string::npos) << outcome.output;
  EXPECT_LT(outcome.seconds, kMaxSeconds);
  EXPECT_LT(outcome.max_resident_kib, GetParam().max_resident_kib);
  // Nothing written outside the working folder (a campaign named ../../x used to land two levels up).
  EXPECT_FALSE(std::filesystem::exists(cwd / "x"));
  EXPECT_FALSE(std::filesystem::exists(cwd / "a" / "b" / "campaigns"));
  EXPECT_FALSE(std::filesystem::exists(cwd / "a" / "b" / "runs"));  // refused before a run is written
  std::filesystem::remove_all(cwd);
}

const std::vector<std::string> kSim = {"sim", "--cluster", "h100-hgx", "--gpus", "1", "--no-store"};

std::vector<std::string> sim_with(std::vector<std::string> extra) {
  std::vector<std::string> args = kSim;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

INSTANTIATE_TEST_SUITE_P(
    Files, HostileInputs,
    testing::Values(
        Hostile{sim_with({"--model", "{}/fuzz/regressions/model_yaml/model-nested-aliases.yaml"}),
                "expands to more than"},
        Hostile{sim_with({"--model", "{}/fuzz/regressions/model_yaml/model-ten-million-layers.yaml"}),
                "'num_layers' = 10000000 is beyond"},
        Hostile{sim_with({"--model", "{}/fuzz/regressions/model_yaml/model-duplicate-key.yaml"}),
                "key 'num_layers' appears twice"},
        Hostile{sim_with({"--model", "{}/fuzz/regressions/model_yaml/model-unclosed-quote.yaml"}),
                "close the quote"},
        Hostile{sim_with({"--model", "{}/fixtures/hostile"}), "is a directory"},
        Hostile{{"sim", "--model", "tiny-dense", "--cluster",
                 "{}/fuzz/regressions/cluster_yaml/cluster-tiny-tflops.yaml", "--gpus", "1", "--no-store"},
                "'peak_bf16_tflops' = 1e-12 is outside"},
        Hostile{sim_with({"--model", "tiny-dense", "--steps", "1000000000"}),
                "--steps 1000000000 must be in"},
        Hostile{{"sim", "--model", "tiny-dense", "--cluster", "h100-hgx", "--gpus", "4096", "--steps",
                 "50000", "--no-store"},
                "GPU-steps"},
        Hostile{
            {"sim", "--model", "tiny-dense", "--cluster", "h100-hgx", "--gpus", "100000000", "--no-store"},
            "GPUs is beyond the 1048576"},
        Hostile{{"sim", "--model", "tiny-dense", "--cluster", "h100-hgx", "--gpus", "8", "--gbs", "100000000",
                 "--no-store"},
                "micro-batches per step, beyond the 16384"},
        Hostile{sim_with({"--model", "{}/fixtures/hostile/model-1024-layers.yaml", "--gbs", "16384"}),
                "is a graph of about 436 M ops, beyond the 5 M one simulation may build"},
        Hostile{{"sim", "--model", "{}/fixtures/hostile/model-1024-layers.yaml", "--cluster", "h100-hgx",
                 "--gpus", "64", "--gbs", "1024", "--op-spans", "all"},
                "27 M spans for this layout, beyond the 16 M one simulation keeps"},
        Hostile{{"plan", "--model", "{}/fixtures/hostile/model-1024-layers.yaml", "--cluster", "h100-hgx",
                 "--gpus", "64", "--gbs", "512", "--quiet"},
                "beyond --max-minutes 5; narrow it"},
        Hostile{{"sweep", "{}/fuzz/regressions/campaign_spec/sweep-billion-steps.yaml"},
                "'steps' = 1000000000 is beyond"},
        Hostile{{"sweep", "{}/fuzz/regressions/campaign_spec/sweep-name-is-a-path.yaml"},
                "must be a plain name"},
        Hostile{{"ingest", "{}/fixtures/hostile/trace-gzip-bomb.json.gz", "--out", "bomb"},
                "inflates to more than 1024 MiB"},
        Hostile{{"ingest", "{}/fuzz/regressions/kineto_trace/trace-rank-x.json", "--out", "x"},
                "distributedInfo.rank is 'x'"},
        Hostile{{"ingest", "{}/fuzz/regressions/kineto_trace/trace-rank-negative.json", "--out", "x"},
                "distributedInfo.rank is '-1'"},
        Hostile{{"ingest", "{}/fuzz/regressions/kineto_trace/trace-rank-huge.json", "--out", "x"},
                "distributedInfo.rank is '1e30'"}));

// Issue 67 items 3-5, 12 and 13: work bounded up front (simulated power samples, bench steps and ranks), and
// inputs that ended in "internal error" or a misleading message.
INSTANTIATE_TEST_SUITE_P(
    BoundedWork, HostileInputs,
    testing::Values(
        Hostile{{"sim", "--model", "llama3-70b", "--cluster",
                 "{}/fuzz/regressions/cluster_yaml/cluster-slow-card.yaml", "--tp", "8", "--pp", "8",
                 "--gpus", "64", "--no-store"},
                "lift the limit with --max-power-samples"},
        Hostile{{"sim", "--model", "{}/fuzz/regressions/model_yaml/model-seq-1e8.yaml", "--cluster",
                 "h100-hgx", "--tp", "8", "--gpus", "8", "--allow-oom", "--no-store"},
                "lift the limit with --max-power-samples"},
        Hostile{{"sim", "--model", "{}/fuzz/regressions/model_yaml/model-hidden-1e8.yaml", "--cluster",
                 "h100-hgx", "--tp", "8", "--gpus", "8", "--allow-oom", "--no-store"},
                "lift the limit with --max-power-samples"},
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--steps", "1000000000"},
                "is 1000000002 steps, beyond the 100000 one bench runs"},
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--gbs", "64", "--steps", "5000",
                 "--trace-ops"},
                "op spans"},
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--dp", "1024"},
                "or --oversubscribe to start them anyway"},
        // Under a 2 GB address space: the memory plan counts the limit (it took the host's 23 GB), and
        // operand buffers beyond it end as bad input, not "internal error: std::bad_alloc".
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--memory", "real", "--mbs", "64",
                 "--seq", "1024", "--steps", "1"},
                "layouts that fit: --recompute full",
                2'000'000'000L},
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--memory", "real", "--mbs", "32",
                 "--seq", "1024", "--steps", "1"},
                "give a smaller --mbs or --seq",
                2'000'000'000L},
        // Under a 4 GiB address space the CPU backend's operand buffers (~6 GiB at --mbs 64) were allocated
        // and filled to 3.65 GB resident before one failed: they are counted first and refused before any is
        // allocated, on the rank itself and, for several local ranks, on the parent before they start.
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--mbs", "64", "--seq", "1024",
                 "--steps", "1"},
                "--mbs 64 --seq 1024: rank 0's operand buffers on the cpu backend come to",
                4L << 30,
                512L * 1024},
        Hostile{{"bench", "--model", "tiny-dense", "--backend", "cpu", "--dp", "2", "--mbs", "64", "--seq",
                 "1024", "--steps", "1"},
                "give a smaller --mbs or --seq, or more --tp",
                4L << 30,
                512L * 1024},
        Hostile{sim_with({"--model", std::string(5000, 'a')}), "a model name or path of 5000 characters"},
        Hostile{sim_with({"--model", "{}/fuzz/regressions/model_yaml/model-nested-200000-deep.yaml"}),
                "nested deeper than 128 levels"},
        Hostile{sim_with({"--model", "tiny-dense", "--tokens", "1e308"}), "--tokens 1e+308"}));

}  // namespace
