// `calo bench` with real MPI ranks (mpirun, up to 4) on tiny models: TP x PP x DP and EP layouts run, --check
// passes with #wrong 0, every rank executed exactly its graph's ops, spans land in the run store; bad layouts
// and layouts that do not fit exit 2 with a message; wrong results exit 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../common/scratch.h"
#include "store/run_store.h"

namespace {

namespace fs = std::filesystem;
namespace store = calo::store;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Outcome run_calo(const std::vector<std::string>& args, const std::string& env = "") {
  std::string command = env + (env.empty() ? "" : " ") + CALO_EXECUTABLE;
  for (const auto& arg : args) command += " '" + arg + "'";
  command += " 2>&1";
  Outcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return outcome;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) outcome.output += buffer.data();
  const int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = calo::testing::scratch_path("bench-" + name);
  fs::remove_all(dir);
  return dir;
}

/// Runs calo bench --json --check with `layout` and returns the parsed report (test fails on a bad exit).
nlohmann::json bench_json(const std::string& name, std::vector<std::string> layout,
                          const std::string& env = "") {
  const fs::path out = fresh_dir(name);
  std::vector<std::string> args = {"bench", "--backend", "cpu",    "--steps",     "2",     "--warmup",
                                   "1",     "--check",   "--json", "--trace-ops", "--out", out.string()};
  args.insert(args.end(), layout.begin(), layout.end());
  const Outcome outcome = run_calo(args, env);
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto brace = outcome.output.find('{');
  if (brace == std::string::npos) {
    ADD_FAILURE() << "no JSON in output: " << outcome.output;
    return {};
  }
  // The JSON report is the last top-level object of the output (MPI may print notices before it).
  const auto last = outcome.output.rfind("\n{");
  return nlohmann::json::parse(outcome.output.substr(last == std::string::npos ? brace : last + 1));
}

void expect_clean(const nlohmann::json& report, int ranks) {
  ASSERT_FALSE(report.is_null());
  EXPECT_EQ(report["ranks"].get<int>(), ranks);
  EXPECT_TRUE(report["op_counts_match"].get<bool>()) << report["op_count_problems"].dump();
  EXPECT_EQ(report["check"]["wrong"].get<std::int64_t>(), 0) << report["check"]["failures"].dump();
  EXPECT_GT(report["check"]["ops_checked"].get<std::int64_t>(), 0);
  EXPECT_GT(report["step_time_s"]["mean"].get<double>(), 0.0);
  EXPECT_GT(report["tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(report["step_time_s"]["all"].size(), 2u);
  EXPECT_EQ(report["warmup_step_time_s"]["all"].size(), 1u);
}

#if CALO_HAVE_MPI_TESTS
TEST(BenchCpu, TensorTimesPipelineParallelDense) {
  const auto report = bench_json("tp2pp2", {"--model", "tiny-dense", "--tp", "2", "--pp", "2", "--gbs", "4"});
  expect_clean(report, 4);
  // The run store holds one job step span per step (warm-up included) and op spans of every rank.
  store::RunReader reader(report["run_dir"].get<std::string>());
  EXPECT_EQ(reader.run().kind, store::RunKind::kBench);
  int job_steps = 0;
  std::set<int> op_ranks;
  for (const auto& span : reader.spans()) {
    if (span.kind == store::SpanKind::kStep && span.rank == store::kNone) ++job_steps;
    if (span.kind == store::SpanKind::kOp) op_ranks.insert(span.rank);
  }
  EXPECT_EQ(job_steps, 3);
  EXPECT_EQ(op_ranks.size(), 4u);
}

TEST(BenchCpu, AStageGpuOrderPutsEachRankOnItsStagesDevice) {
  // pp 2 with the stages swapped: rank 0 (stage 0) runs on local device 1, rank 1 on device 0, and the run
  // keeps the order so `calo sim --from` re-simulates it as run.
  const auto report =
      bench_json("stage-gpus", {"--model", "tiny-dense", "--pp", "2", "--gbs", "4", "--stage-gpus", "1,0"});
  expect_clean(report, 2);
  EXPECT_EQ(report["rank_devices"], nlohmann::json::array({1, 0}));
  EXPECT_NE(report["layout"].get<std::string>().find("stages-on-1,0"), std::string::npos) << report["layout"];
  store::RunReader reader(report["run_dir"].get<std::string>());
  const auto config = nlohmann::json::parse(reader.run().config_json);
  EXPECT_EQ(config["layout"]["stage_gpus"], nlohmann::json::array({1, 0}));
  const Outcome refused =
      run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--pp", "2", "--gbs", "4",
                "--stage-gpus", "1,1", "--out", fresh_dir("stage-gpus-bad").string()});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("1,1 is not an order of the 2 pipeline positions 0..1"), std::string::npos)
      << refused.output;
}

TEST(BenchCpu, AChunkOfTheEmbeddingAloneAndOneOfTheOutputAloneRunAndHoldWhatTheModelSays) {
  // Llama 3's pipeline (and Megatron-LM's split with the embedding and the loss counted as a layer each): 4
  // layers over pp 2 × vpp 3 = 6 virtual stages resolve to 0,1,1,1,1,0, so stage 0's first chunk runs the
  // embedding alone and stage 1's last chunk the output alone. Every op runs and checks, and under
  // --memory real each rank holds the model's bytes.
  const auto report =
      bench_json("edge-chunks", {"--model", "tiny-dense", "--pp", "2", "--schedule", "interleaved", "--vpp",
                                 "3", "--gbs", "4", "--memory", "real"});
  expect_clean(report, 2);
  EXPECT_NE(report["layout"].get<std::string>().find("layers-0,1x4,0"), std::string::npos)
      << report["layout"];
  ASSERT_EQ(report["memory_real"]["ranks"].size(), 2u) << report.dump();
  for (const auto& rank : report["memory_real"]["ranks"]) {
    EXPECT_GT(rank["held_peak_bytes"].get<double>(), 0.0) << rank.dump();
    EXPECT_NEAR(rank["model_error"].get<double>(), 0.0, 1e-9) << rank.dump();
  }
}

/// tiny-dense with 8 layers (written beside the test's runs): one layer a virtual stage at pp 4 × vpp 2.
std::string tiny_dense_8_layers() {
  const fs::path path = calo::testing::scratch_path("tiny-dense-8.yaml");
  std::ofstream(path) << "name: tiny-dense-8\nnum_layers: 8\nhidden_size: 256\nffn_hidden_size: 688\n"
                         "num_attention_heads: 8\nnum_kv_heads: 4\nvocab_size: 1024\nseq_length: 128\n"
                         "activation: swiglu\nnorm: rmsnorm\nposition_embedding: rope\n";
  return path.string();
}

// Zero-bubble schedules (issue 68) on real MPI ranks: the CPU backend completes each pipeline message before
// the next, so a p2p order the simulator and the graph checker accept can still hang here (ZB-H1's first
// order did). ZB-H1 keeps 1F1B's p2p order; ZB-V posts every message in the order its pass ends.
TEST(BenchCpu, ZeroBubbleH1RunsAndChecksAtPp2AndPp4) {
  expect_clean(
      bench_json("zb-h1-pp2", {"--model", "tiny-dense", "--pp", "2", "--gbs", "8", "--schedule", "zb-h1"}),
      2);
  expect_clean(
      bench_json("zb-h1-pp4", {"--model", "tiny-dense", "--pp", "4", "--gbs", "8", "--schedule", "zb-h1"}),
      4);
}

TEST(BenchCpu, ZeroBubbleVRunsAndChecksAtPp2AndPp4) {
  const std::string model = tiny_dense_8_layers();
  expect_clean(bench_json("zb-v-pp2",
                          {"--model", model, "--pp", "2", "--vpp", "2", "--gbs", "8", "--schedule", "zb-v"}),
               2);
  const auto report = bench_json(
      "zb-v-pp4", {"--model", model, "--pp", "4", "--vpp", "2", "--gbs", "8", "--schedule", "zb-v"});
  expect_clean(report, 4);
  EXPECT_NE(report["layout"].get<std::string>().find("zb-v"), std::string::npos) << report["layout"];
}

TEST(BenchCpu, TensorAndDataParallelWithOverlapAndZero1) {
  expect_clean(
      bench_json("tp2dp2", {"--model", "tiny-dense", "--tp", "2", "--dp", "2", "--zero", "1", "--overlap"}),
      4);
}

TEST(BenchCpu, PipelineAndDataParallelWithRecompute) {
  expect_clean(bench_json("pp2dp2", {"--model", "tiny-dense", "--pp", "2", "--dp", "2", "--gbs", "8",
                                     "--recompute", "full"}),
               4);
}

TEST(BenchCpu, ExpertParallelMoe) {
  expect_clean(bench_json("ep4", {"--model", "tiny-moe", "--dp", "4", "--ep", "4"}), 4);
}

// Megatron-Core carves expert parallelism out of the dp x cp replicas: ep 4 over cp 2 x dp 2 (one expert
// group of all four ranks, no expert-dp reduction), and ep 2 inside each cp ring (expert-dp 2 across the dp
// ranks).
TEST(BenchCpu, ExpertParallelAcrossContextParallelReplicas) {
  expect_clean(bench_json("cp2ep4", {"--model", "tiny-moe", "--cp", "2", "--dp", "2", "--ep", "4"}), 4);
  expect_clean(bench_json("cp2ep2", {"--model", "tiny-moe", "--cp", "2", "--dp", "2", "--ep", "2", "--zero",
                                     "1", "--overlap"}),
               4);
}

TEST(BenchCpu, ExpertAndTensorParallelMoe) {
  expect_clean(bench_json("ep2tp2", {"--model", "tiny-moe", "--tp", "2", "--dp", "2", "--ep", "2"}), 4);
}

TEST(BenchCpu, UnfusedAttentionAndPipelineScatterGatherRunAndCheck) {
  // Without sequence parallel, TP2 x PP2 sends 1/2 of each activation and all-gathers it on arrival; the
  // unfused core runs batched GEMMs and a real causal softmax whose rows --check recomputes.
  const auto report = bench_json("unfused-sg", {"--model", "tiny-dense", "--tp", "2", "--pp", "2", "--gbs",
                                                "4", "--no-sequence-parallel", "--attention", "unfused"});
  expect_clean(report, 4);
  store::RunReader reader(report["run_dir"].get<std::string>());
  std::set<std::string> names;
  for (const auto& span : reader.spans())
    if (span.kind == store::SpanKind::kOp) names.insert(span.name);
  for (const char* name : {"gemm.attn_score.fwd", "gemm.attn_context.wgrad", "elementwise.softmax"})
    EXPECT_TRUE(names.count(name)) << name;
  EXPECT_FALSE(names.count("attention.fwd"));
  EXPECT_TRUE(names.count("all_gather.tp"));
}

TEST(BenchCpu, AWrongSoftmaxFailsTheRun) {
  const fs::path out = fresh_dir("softmax-fault");
  const Outcome outcome =
      run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--attention", "unfused", "--steps",
                "1", "--warmup", "0", "--check", "--out", out.string()},
               "CALO_CPU_INJECT_FAULT=softmax");
  EXPECT_EQ(outcome.exit_code, 1) << outcome.output;
  EXPECT_NE(outcome.output.find("softmax"), std::string::npos) << outcome.output;
}

// ZeRO-2: a reduce-scatter per micro-batch (m = 2) and the all-gather after the step, overlapped.
TEST(BenchCpu, ZeroTwoWithOverlap) {
  expect_clean(
      bench_json("zero2", {"--model", "tiny-dense", "--dp", "4", "--zero", "2", "--gbs", "8", "--overlap"}),
      4);
}

// Hybrid sharding: shard groups {0,1} {2,3} gather and reduce-scatter, replicate groups {0,2} {1,3}
// all-reduce the shard; --check verifies every collective's result.
TEST(BenchCpu, HybridShardingDp4ShardGroup2) {
  const auto report = bench_json(
      "hsdp", {"--model", "tiny-dense", "--dp", "4", "--zero", "3", "--fsdp-shard-group", "2", "--gbs", "8"});
  expect_clean(report, 4);
  // Collectives per step on rank 0: 6 units x 2 micro-batches x (forward gather, backward gather,
  // reduce-scatter, replicate all-reduce).
  EXPECT_EQ(report["ops_per_step_rank0"][3].get<int>(), 6 * 2 * 4);
  EXPECT_EQ(report["layout"].get<std::string>(), "TP1-PP1-DP4 mbs1 gbs8 1f1b fsdp shard2");
}

// Hybrid sharding of a MoE model: dense parameters over the shard group, experts over expert-dp.
TEST(BenchCpu, HybridShardingMoeWithExpertParallel) {
  expect_clean(bench_json("hsdp-moe", {"--model", "tiny-moe", "--dp", "4", "--ep", "2", "--zero", "3",
                                       "--fsdp-shard-group", "2", "--overlap"}),
               4);
}

// FSDP keeping parameters after forward, pipelined: backward gathers only where a backward freed the units.
TEST(BenchCpu, FsdpWithoutReshardAfterForwardPipelined) {
  expect_clean(bench_json("noreshard", {"--model", "tiny-dense", "--pp", "2", "--dp", "2", "--zero", "3",
                                        "--fsdp-reshard-after-forward", "off", "--gbs", "8"}),
               4);
}

TEST(BenchCpu, ContextParallelRingWithTensorParallel) {
  // tp 2 x cp 2: the K/V ring runs as real MPI sends between the cp ranks (batched like an NCCL group), every
  // ring step's attention (the causal diagonal, the rectangular c x 2c / 2c x c steps) is checked against a
  // double-precision reference, and every received K/V buffer against what its peer sent.
  const auto report = bench_json("tp2cp2", {"--model", "tiny-dense", "--tp", "2", "--cp", "2", "--recompute",
                                            "selective", "--seq", "256"});
  expect_clean(report, 4);
  // Per layer 2 forward + 2 recomputed + 2 backward ring steps; 1 + 1 + 2 sends (counts indexed by OpKind:
  // gemm, attention, elementwise, collective, send, recv, optimizer).
  const auto& per_step = report["ops_per_step_rank0"];
  ASSERT_TRUE(per_step.is_array()) << per_step.dump();
  EXPECT_EQ(per_step[1].get<int>(), 4 * 6);
  EXPECT_EQ(per_step[4].get<int>(), 4 * 4);
  EXPECT_EQ(per_step[5].get<int>(), 4 * 4);
}

TEST(BenchCpu, ContextParallelFourRankRing) {
  expect_clean(bench_json("cp4", {"--model", "tiny-dense", "--cp", "4", "--zero", "1", "--overlap"}), 4);
}

TEST(BenchCpu, ContextParallelAllGatherVariant) {
  // K/V all-gathered over the cp group (MPI_Iallgather), bottom-right causal chunk attention, dK/dV
  // reduce-scattered: every op checked.
  const auto report = bench_json("cp2ag", {"--model", "tiny-dense", "--cp", "2", "--dp", "2", "--cp-comm",
                                           "allgather", "--recompute", "full"});
  expect_clean(report, 4);
}

TEST(BenchCpu, ContextParallelTorchVariant) {
  // torch's context parallel on 4 cp ranks: K/V at the query heads all-gathered behind step 0, the fp32
  // merges after every step, the accumulated dK/dV passed on to cp index + 1 as real MPI messages: every op
  // checked.
  const auto report = bench_json(
      "cp4torch", {"--model", "tiny-dense", "--cp", "4", "--cp-comm", "torch", "--recompute", "selective"});
  expect_clean(report, 4);
  // Per layer 3 gathers (forward, recomputed, backward) and 4 backward sends (counts indexed by OpKind:
  // gemm, attention, elementwise, collective, send, recv, optimizer).
  const auto& per_step = report["ops_per_step_rank0"];
  ASSERT_TRUE(per_step.is_array()) << per_step.dump();
  EXPECT_EQ(per_step[4].get<int>(), 4 * 4);
  EXPECT_EQ(per_step[5].get<int>(), 4 * 4);
}

TEST(BenchCpu, ContextParallelWrongRingDataFailsTheRun) {
  for (const char* fault : {"p2p", "attention"}) {
    const fs::path out = fresh_dir(std::string("cp-fault-") + fault);
    const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--cp", "2",
                                      "--steps", "1", "--warmup", "0", "--check", "--out", out.string()},
                                     std::string("CALO_CPU_INJECT_FAULT=") + fault);
    EXPECT_EQ(outcome.exit_code, 1) << fault << "\n" << outcome.output;
    EXPECT_EQ(outcome.output.find("#wrong: 0"), std::string::npos) << fault << "\n" << outcome.output;
  }
}

TEST(BenchCpu, AnOutDirectoryHoldingARunExitsTwoBeforeAnyRankStarts) {
  // Rank 0 alone used to find the old run after its peers had started: they waited for it forever.
  const fs::path out = fresh_dir("taken");
  const std::vector<std::string> args = {"bench", "--backend", "cpu", "--model", "tiny-dense", "--steps",
                                         "1",     "--warmup",  "0",   "--out",   out.string()};
  ASSERT_EQ(run_calo(args).exit_code, 0);
  std::vector<std::string> two_ranks = args;
  two_ranks.insert(two_ranks.end(), {"--tp", "2"});
  const Outcome outcome = run_calo(two_ranks, "timeout 60");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("already holds a run"), std::string::npos) << outcome.output;
}

TEST(BenchCpu, MemoryRealHoldsTrainingsAllocationsOnEveryRankAndReportsThemBesideTheModel) {
  // Pipeline 1F1B with full recompute: each stage's held peak is its in-flight micro-batches plus one layer's
  // recomputed activations, as the model counts them; the device holds the bench's operands on top.
  const auto report = bench_json("memory-real", {"--model", "tiny-dense", "--pp", "2", "--gbs", "8",
                                                 "--recompute", "full", "--memory", "real"});
  expect_clean(report, 2);
  ASSERT_TRUE(report.contains("memory_real")) << report.dump();
  const auto& ranks = report["memory_real"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& rank : ranks) {
    const double held = rank["held_peak_bytes"].get<double>();
    EXPECT_GT(held, 1e6) << rank.dump();
    EXPECT_NEAR(rank["model_error"].get<double>(), 0.0, 1e-6) << rank.dump();
    EXPECT_EQ(rank["ledger_serial_peak_bytes"].get<double>(), held) << rank.dump();
    EXPECT_GT(rank["device_used_bytes"].get<double>(), held) << rank.dump();
  }
  EXPECT_EQ(ranks[1]["stage"].get<int>(), 1);
  store::RunReader reader(report["run_dir"].get<std::string>());
  std::map<std::string, double> summary;
  for (const auto& row : reader.summaries()) summary[row.key] = row.value;
  EXPECT_EQ(summary.count("memory_held_peak_bytes"), 1u);
  EXPECT_EQ(summary.count("memory_model_error"), 1u);
}

TEST(BenchCpu, MemoryRealShowsFsdpsGatheredUnitsAndTheTextSaysWhatWasHeld) {
  const fs::path out = fresh_dir("memory-real-fsdp");
  const Outcome outcome =
      run_calo({"bench",    "--backend", "cpu",       "--model", "tiny-dense", "--dp",      "2",
                "--zero",   "3",         "--overlap", "--gbs",   "4",          "--steps",   "1",
                "--warmup", "0",         "--memory",  "real",    "--out",      out.string()});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  for (const char* needle : {"memory (--memory real", "rank 0 (stage 0): held ", "rank 1 (stage 0): held ",
                             "the model ", "device in use"}) {
    EXPECT_NE(outcome.output.find(needle), std::string::npos) << needle << "\n" << outcome.output;
  }
}

TEST(BenchCpu, MemoryRealRefusesTheTorchtitanTrainerBeforeAnyRankStarts) {
  const Outcome outcome =
      run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--dp", "2", "--zero", "3", "--trainer",
                "torchtitan", "--memory", "real", "--steps", "1"},
               "timeout 60");
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--trainer default or pytorch"), std::string::npos) << outcome.output;
}

TEST(BenchCpu, WrongCollectiveResultsFailTheRun) {
  const fs::path out = fresh_dir("fault");
  const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--tp", "2",
                                    "--steps", "1", "--warmup", "0", "--check", "--out", out.string()},
                                   "CALO_CPU_INJECT_FAULT=collective");
  EXPECT_EQ(outcome.exit_code, 1) << outcome.output;
  EXPECT_NE(outcome.output.find("#wrong:"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("#wrong: 0"), std::string::npos) << outcome.output;
}
#endif

TEST(BenchCpu, SingleRankSummaryTable) {
  const fs::path out = fresh_dir("single");
  const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--model", "tiny-moe", "--steps", "2",
                                    "--warmup", "1", "--check", "--out", out.string()});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  for (const char* needle : {"step time mean", "tokens/s", "MFU", "energy per step", "peak temperature",
                             "#wrong: 0", "every rank executed exactly its graph's ops"}) {
    EXPECT_NE(outcome.output.find(needle), std::string::npos) << needle << "\n" << outcome.output;
  }
}

TEST(BenchCpu, SliceIsExplicitInTheOutput) {
  const fs::path out = fresh_dir("slice");
  const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense-slice", "--layers",
                                    "2", "--steps", "1", "--warmup", "0", "--out", out.string()});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("SLICE: 2 of 4 layers"), std::string::npos) << outcome.output;
}

TEST(BenchCpu, LayoutThatDoesNotFitExitsTwoWithBreakdown) {
  const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--model", "llama3-405b", "--steps", "1"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("optimizer"), std::string::npos) << outcome.output;
  // Either nearby layouts that fit are suggested, or it says that none does (depends on this host's memory).
  const bool suggests = outcome.output.find("layouts that fit") != std::string::npos ||
                        outcome.output.find("no nearby layout fits") != std::string::npos;
  EXPECT_TRUE(suggests) << outcome.output;
}

TEST(BenchCpu, InvalidLayoutExitsTwo) {
  const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--tp", "3"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
}

TEST(BenchCpu, NprocThatDoesNotMatchTheLayoutExitsTwo) {
  const Outcome outcome =
      run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--tp", "2", "--nproc", "3"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("--nproc 2"), std::string::npos) << outcome.output;
}

TEST(BenchCpu, ItsRunCarriesTheWorkloadSoCompareShowsThroughputAndMfu) {
  // A bench run's report and `calo compare` showed "-" for tokens/s and MFU: the store had no workload rows
  // for analysis (issue 40 item 4). They must equal what the bench itself printed.
  const fs::path out = fresh_dir("workload");
  const Outcome outcome =
      run_calo({"bench", "--backend", "cpu", "--model", "tiny-dense", "--gbs", "4", "--seq", "128", "--steps",
                "2", "--warmup", "1", "--json", "--out", out.string()});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const auto bench = nlohmann::json::parse(outcome.output.substr(outcome.output.rfind("\n{") + 1));
  const Outcome compare = run_calo({"compare", out.string(), out.string(), "--json"});
  ASSERT_EQ(compare.exit_code, 0) << compare.output;
  const auto rows = nlohmann::json::parse(compare.output.substr(compare.output.find('{')))["rows"];
  std::map<std::string, double> first;
  for (const auto& row : rows) {
    if (row["values"][0].is_number()) first[row["key"].get<std::string>()] = row["values"][0].get<double>();
  }
  ASSERT_TRUE(first.count("tokens_per_s")) << rows.dump();
  ASSERT_TRUE(first.count("mfu")) << rows.dump();
  EXPECT_NEAR(first["tokens_per_s"], bench["tokens_per_s"].get<double>(), 1e-6 * first["tokens_per_s"]);
  EXPECT_NEAR(first["mfu"], bench["mfu"].get<double>(), 1e-6);
}

TEST(BenchCpu, WithoutAModelExitsTwoInsteadOfBenchingTheTestModel) {
  // Issue 40 item 10: a missing --model was a silent tiny-dense, a 3.4 M-parameter model at 5.5 M tokens/s.
  const Outcome outcome = run_calo({"bench", "--backend", "cpu", "--steps", "1"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("calo bench: give --model"), std::string::npos) << outcome.output;
}

TEST(BenchCpu, UnknownBackendExitsTwo) {
  const Outcome outcome = run_calo({"bench", "--backend", "tpu", "--model", "tiny-dense"});
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("cpu"), std::string::npos) << outcome.output;
}

}  // namespace
