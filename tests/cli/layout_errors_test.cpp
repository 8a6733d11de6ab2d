// Invalid layouts given to `calo model` and `calo graph` end with exit code 2 and a message that names the
// rule and a valid choice. Each case runs the real binary as a child process.
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

/// Exit status and output of one run of `calo`.
struct Outcome {
  int exit_code = -1;  ///< exit status; -1 when killed by a signal
  std::string stdout_text;
  std::string stderr_text;
};

/// Runs CALO_EXECUTABLE with `args` and collects its exit code, stdout and stderr.
Outcome run_calo(const std::vector<std::string>& args) {
  std::array<int, 2> out_pipe{};
  std::array<int, 2> err_pipe{};
  if (pipe(out_pipe.data()) != 0 || pipe(err_pipe.data()) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::vector<std::string> argv_text = {CALO_EXECUTABLE};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& text : argv_text) argv.push_back(text.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  int spawned = posix_spawn(&child, CALO_EXECUTABLE, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw std::runtime_error(std::string("cannot start ") + CALO_EXECUTABLE);
  }
  Outcome outcome;
  std::array<pollfd, 2> fds = {pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<std::string*, 2> sinks = {&outcome.stdout_text, &outcome.stderr_text};
  int open_streams = 2;
  std::array<char, 4096> buffer{};
  while (open_streams > 0) {
    if (poll(fds.data(), fds.size(), 30000) <= 0) break;  // 30 s without output: give up, the test fails
    for (size_t stream = 0; stream < fds.size(); ++stream) {
      if (fds[stream].fd < 0 || fds[stream].revents == 0) continue;
      ssize_t count = read(fds[stream].fd, buffer.data(), buffer.size());
      if (count > 0) {
        sinks[stream]->append(buffer.data(), static_cast<size_t>(count));
      } else {
        close(fds[stream].fd);
        fds[stream].fd = -1;
        --open_streams;
      }
    }
  }
  for (const pollfd& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  int status = 0;
  waitpid(child, &status, 0);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

/// One invalid invocation and the text its error must contain.
struct BadLayout {
  std::vector<std::string> args;
  std::string message;
};

void PrintTo(const BadLayout& bad, std::ostream* out) {
  for (const auto& arg : bad.args) *out << arg << ' ';
}

class LayoutErrors : public testing::TestWithParam<BadLayout> {};

TEST_P(LayoutErrors, ExitTwoWithRuleAndFix) {
  const BadLayout& bad = GetParam();
  Outcome outcome = run_calo(bad.args);
  EXPECT_EQ(outcome.exit_code, 2) << "stderr: " << outcome.stderr_text;
  EXPECT_EQ(outcome.stderr_text.rfind("calo: error: ", 0), 0u) << outcome.stderr_text;
  EXPECT_NE(outcome.stderr_text.find(bad.message), std::string::npos)
      << "expected: " << bad.message << "\nstderr: " << outcome.stderr_text;
  EXPECT_EQ(outcome.stdout_text, "");
}

const BadLayout kBadLayouts[] = {
    {{"model", "llama3-70b", "--tp", "5"}, "tp=5 does not divide 64 attention heads; try 4 or 8"},
    {{"model", "tiny-dense", "--tp", "3"}, "tp=3 does not divide 8 attention heads; try 2 or 4"},
    {{"model", "llama3-70b", "--tp", "16"}, "tp=16 does not divide 8 key/value heads"},
    {{"model", "llama3-70b", "--dp", "8", "--gbs", "100"},
     "global batch 100 is not a multiple of micro-batch × dp = 1 × 8 = 8; try 96 or 104"},
    {{"model", "tiny-dense", "--tp", "0"},
     "tp=0 is not a valid tensor-parallel size: sizes must be >= 1; try tp=1"},
    {{"model", "tiny-dense", "--zero", "4"}, "zero stage 4 is not supported"},
    {{"model", "tiny-dense", "--dp", "4", "--zero", "3", "--fsdp-shard-group", "3"},
     "--fsdp-shard-group 3 does not divide dp=4 (the shard groups tile the data-parallel ranks); try "
     "--fsdp-shard-group 2 or --fsdp-shard-group 4"},
    {{"model", "tiny-dense", "--dp", "4", "--zero", "2", "--fsdp-shard-group", "2"},
     "hybrid sharding (--fsdp-shard-group 2) shards parameters, which needs --zero 3 (zero stage is 2)"},
    {{"model", "tiny-dense", "--dp", "4", "--fsdp-reshard-after-forward", "off"},
     "--fsdp-reshard-after-forward off keeps gathered parameters, which needs --zero 3 (zero stage is 0)"},
    {{"model", "tiny-dense", "--dp", "4", "--zero", "3", "--fsdp-reshard-after-forward", "maybe"},
     "--fsdp-reshard-after-forward: 'maybe' is not on/off; write on or off"},
    {{"model", "tiny-dense", "--dp", "4", "--zero", "3", "--fp8-all-gather"},
     "--fp8-all-gather gathers the weights of torchao's tensorwise FP8 linears; precision bf16 has no FP8 "
     "weights: add --precision fp8 or drop --fp8-all-gather"},
    {{"model", "tiny-dense", "--dp", "4", "--zero", "3", "--precision", "fp8-delayed", "--fp8-all-gather"},
     "precision fp8-delayed is not that recipe (torchao gathers tensorwise-scaled weights only)"},
    {{"model", "tiny-dense", "--dp", "4", "--precision", "fp8", "--fp8-all-gather"},
     "--fp8-all-gather changes FSDP's parameter all-gather, which needs --zero 3 over more than one rank "
     "(zero stage 0, shard group 4)"},
    {{"model", "tiny-dense", "--pp", "8"},
     "pp=8 × vpp=1 = 8 stages exceed the 4 layers of tiny-dense; try pp=4"},
    {{"model", "llama3-8b", "--pp", "5"},
     "pp=5 × vpp=1 = 5 stages divide neither the 32 layers of llama3-8b nor 34"},
    {{"model", "tiny-dense", "--pp", "2", "--vpp", "2"},
     "vpp=2 model chunks per stage need --schedule interleaved"},
    {{"model", "tiny-dense", "--pp", "2", "--schedule", "interleaved"},
     "interleaved schedule needs vpp >= 2 model chunks per stage"},
    {{"model", "tiny-dense", "--pp", "2", "--vpp", "2", "--schedule", "interleaved", "--gbs", "3"},
     "interleaved schedule needs the number of micro-batches (3"},
    {{"model", "tiny-dense", "--recompute", "partial"},
     "--recompute: 'partial' is not a mode; use none, selective, full or op"},
    {{"model", "tiny-dense", "--schedule", "zb-2p"},
     "--schedule: 'zb-2p' is not a schedule; use gpipe, 1f1b, interleaved, zb-h1 or zb-v"},
    {{"model", "tiny-dense", "--pp", "2", "--vpp", "3", "--schedule", "zb-v", "--gbs", "2"},
     "--schedule zb-v runs two model chunks per stage in a V; give --vpp 2 (vpp=3)"},
    {{"model", "tiny-dense", "--trainer", "deepspeed"},
     "--trainer: 'deepspeed' is not a trainer; use default (bf16 gradients), pytorch"},
    {{"model", "tiny-dense", "--trainer", "torchtitan", "--dp", "2", "--zero", "1"},
     "--trainer torchtitan shards with FSDP2 (--zero 3) or replicates (--zero 0); torchtitan has no ZeRO "
     "stage 1"},
    {{"model", "tiny-dense", "--trainer", "torchtitan", "--tp", "2"},
     "--trainer torchtitan without FSDP2 (--zero 0) trains TP2"},
    {{"model", "tiny-dense", "--trainer", "torchtitan", "--zero", "3"},
     "--trainer torchtitan --zero 3 shards over dp*cp ranks, which is 1 here; raise --dp or --cp"},
    {{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "2,x"},
     "--layers-per-stage: 'x' in '2,x' is not a layer count"},
    {{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "2,2,"},
     "--layers-per-stage: '' in '2,2,' is not a layer count"},
    {{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "4"},
     "layers per stage lists 1 entries but pp=2 × vpp=1 needs 2"},
    {{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "1,2"},
     "layers per stage sum to 3 but tiny-dense has 4 layers"},
    {{"model", "tiny-dense", "--pp", "3", "--layers-per-stage", "2,0,2"}, "layers per stage entry 1 is 0"},
    {{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "2x"},
     "--layers-per-stage: '2x' in '2x' is not a layer count; give comma-separated integers like 10,12,12,10 "
     "or "
     "0,1x126,0 (COUNTxREPEAT repeats one)"},
    {{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "2x0"},
     "'2x0' in '2x0' is not a layer count"},
    {{"model", "tiny-dense", "--dp", "2", "--ep", "2"},
     "ep=2 needs a mixture-of-experts model, but tiny-dense is dense; use ep=1"},
    {{"model", "mixtral-8x7b", "--dp", "8", "--ep", "3"}, "ep=3 does not divide dp x cp = 8 x 1"},
    {{"model", "mixtral-8x7b", "--dp", "16", "--ep", "16"},
     "ep=16 does not divide the 8 experts of mixtral-8x7b"},
    {{"model", "tiny-dense", "--overlap-param"}, "overlapping the parameter all-gather needs sharded state"},
    {{"model", "tiny-dense", "--tp", "2", "--seq", "127"},
     "sequence parallel splits each sequence of 127 tokens"},
    {{"graph", "--model", "tiny-dense", "--tp", "3"}, "tp=3 does not divide 8 attention heads; try 2 or 4"},
    {{"graph", "--model", "tiny-dense", "--cp", "3"},
     "cp=3 needs the sequence length 128 to be a multiple of 2*cp = 6"},
    {{"graph", "--model", "tiny-dense", "--cp", "0"}, "cp=0 is not a valid context-parallel size"},
    {{"graph", "--model", "tiny-dense", "--cp", "2", "--cp-comm", "ring"},
     "--cp-comm: 'ring' is not a context-parallel communication; use p2p, allgather or torch"},
    {{"model", "mixtral-8x7b", "--cp", "2", "--ep", "4"}, "ep=4 does not divide dp x cp = 1 x 2"},
    {{"sim", "--model", "tiny-dense", "--cluster", "h200-hgx", "--gpus", "6", "--cp", "4", "--no-store"},
     "--gpus 6 is not a multiple of tp*cp*pp = 4"},
    {{"bench", "--backend", "cpu", "--model", "tiny-dense", "--cp", "2", "--nproc", "1"},
     "--nproc 1: layout TP1-CP2-PP1-DP1 mbs1 gbs1 1f1b has 2 ranks; give --nproc 2 or change "
     "--tp/--cp/--pp/--dp"},
    {{"graph", "--model", "tiny-dense", "--dp", "4", "--gbs", "6"},
     "global batch 6 is not a multiple of micro-batch × dp = 1 × 4 = 4; try 4 or 8"},
    {{"graph", "--model", "tiny-dense", "--recompute", "some"}, "--recompute: 'some' is not a mode"},
    {{"graph", "--model", "tiny-dense", "--pp", "2", "--layers-per-stage", "3;1"},
     "--layers-per-stage: '3;1' in '3;1' is not a layer count"},
};

INSTANTIATE_TEST_SUITE_P(Cli, LayoutErrors, testing::ValuesIn(kBadLayouts));

TEST(CliLayout, FlagParseErrorsExitTwo) {
  Outcome outcome = run_calo({"model", "tiny-dense", "--tp", "four"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.stderr_text;
  EXPECT_NE(outcome.stderr_text.find("--tp"), std::string::npos) << outcome.stderr_text;
}

TEST(CliLayout, AZeroSequenceOrBatchIsRefusedNotReadAsTheDefault) {
  // --seq 0 used to mean the model's default and --gbs 0 mbs x dp, silently (issue 67 item 13).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"model", "tiny-dense", "--seq", "0"},
        std::vector<std::string>{"model", "tiny-dense", "--gbs", "0"},
        std::vector<std::string>{"graph", "--model", "tiny-dense", "--mbs", "-1"}}) {
    const Outcome outcome = run_calo(args);
    const std::string& flag = args[args.size() - 2];
    EXPECT_EQ(outcome.exit_code, 2) << flag << ": " << outcome.stderr_text;
    EXPECT_NE(outcome.stderr_text.find(flag + ": "), std::string::npos) << outcome.stderr_text;
    EXPECT_NE(outcome.stderr_text.find("give 1 or more"), std::string::npos) << outcome.stderr_text;
  }
}

TEST(CliLayout, ValidLayoutsExitZero) {
  // Controls for the cases above: the same commands with a valid choice succeed.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"model", "tiny-dense", "--tp", "2"},
        std::vector<std::string>{"model", "tiny-dense", "--pp", "2", "--layers-per-stage", "1,3"},
        std::vector<std::string>{"model", "tiny-dense", "--pp", "2", "--vpp", "3", "--schedule",
                                 "interleaved", "--gbs", "4", "--layers-per-stage", "0,1x4,0"},
        std::vector<std::string>{"model", "tiny-dense", "--overlap"},
        std::vector<std::string>{"model", "tiny-dense", "--pp", "2", "--vpp", "2", "--schedule",
                                 "interleaved", "--gbs", "4"},
        std::vector<std::string>{"graph", "--model", "tiny-dense", "--dp", "4", "--gbs", "8"},
        std::vector<std::string>{"model", "tiny-dense", "--dp", "4", "--zero", "2"},
        std::vector<std::string>{"model", "tiny-dense", "--dp", "4", "--zero", "3", "--fsdp-shard-group", "2",
                                 "--fsdp-reshard-after-forward", "off"}}) {
    Outcome outcome = run_calo(args);
    EXPECT_EQ(outcome.exit_code, 0) << args[0] << " " << args[1] << ": " << outcome.stderr_text;
  }
}

}  // namespace
