// Where the collective lines meet real training steps: Llama3-8B (4 layers, seq 4096, mbs 1, gbs 8) measured
// with TP2, PP2 and DP2 on 2 x NVIDIA H200 by `calo bench --backend cuda --trace-ops` (tests/fixtures/
// h200x2-parallel-steps, bench/calibrate/two_gpu_runs.sh; a fourth H200 pair, none of the sweep's). The H200
// preset's compute and power with and without the lines fitted to the collective sweep
// (tests/fixtures/kineto-h200x2-collectives): the TP step's 32 MiB reduce-scatters and all-gathers, and the
// steps themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "analyze/trace_ingest.h"
#include "calibrate/calibrate.h"
#include "calibrate/kineto_input.h"
#include "calibrate/measurement.h"
#include "core/statistics.h"
#include "fixture_runs.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::unpack_fixture;

/// h200-hgx-calibrated as fitted to one GPU, before its multi-GPU refit (datasheet NVLink, no collective
/// lines, no wait power): what these tests measure the lines against.
const std::string kSingleGpuPreset =
    std::string(CALO_SOURCE_DIR) + "/tests/fixtures/clusters/h200-hgx-calibrated-1gpu.yaml";

sim::ClusterSpec single_gpu_preset() {
  return sim::load_cluster(kSingleGpuPreset);
}

const fs::path& step_runs() {
  static const fs::path dir = unpack_fixture("h200x2-parallel-steps");
  return dir;
}

/// One sweep's traces: `ranks` files rank<R>.json.gz of one directory (one job).
struct Sweep {
  fs::path dir;   ///< the sweep's directory
  int ranks = 0;  ///< its ranks
};

/// h200-hgx-calibrated with NVLink and the lines fitted to `sweeps` together (the preset's compute, power and
/// heat kept: the traces carry only NCCL kernels).
sim::ClusterSpec preset_with_sweeps(const std::vector<Sweep>& sweeps) {
  std::vector<fs::path> files;
  for (const Sweep& sweep : sweeps) {
    for (int rank = 0; rank < sweep.ranks; ++rank)
      files.push_back(sweep.dir / ("rank" + std::to_string(rank) + ".json.gz"));
  }
  return calibrate(files, kSingleGpuPreset, {false, {}, {}, {}, {}}).fit.cluster;
}

/// ... fitted to the one sweep of `ranks` traces in `sweep_dir`.
sim::ClusterSpec preset_with_lines_of(const fs::path& sweep_dir, int ranks) {
  return preset_with_sweeps({{sweep_dir, ranks}});
}

/// ... with the 2-rank lines of the third H200 pair.
const sim::ClusterSpec& preset_with_lines() {
  static const sim::ClusterSpec cluster =
      preset_with_lines_of(fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x2-collectives/auto", 2);
  return cluster;
}

/// Median duration of rank 0's op spans named `name` over the run's measured steps.
double measured_op_s(const MeasuredRun& run, const std::string& name) {
  std::vector<double> durations;
  for (const store::Span& span : run.op_spans) {
    if (span.name == name) durations.push_back(static_cast<double>(span.t_end_ns - span.t_begin_ns) * 1e-9);
  }
  EXPECT_FALSE(durations.empty()) << name;
  return core::upper_median(durations);
}

TEST(ParallelSteps, TheSweepsLinesPredictATensorParallelStepsCollectives) {
  const sim::ClusterSpec preset = single_gpu_preset();
  const MeasuredRun run = load_measured_run(step_runs() / "tp2", preset.gpu);
  const sim::GroupPlacement pair = sim::place_group(preset, std::vector<std::int32_t>{0, 1});
  constexpr double kActivationBytes = 4096.0 * 4096 * 2;  // seq x hidden, bf16: sequence parallel's 32 MiB
  using graph::CollectiveKind;
  for (const auto& [name, kind] :
       std::map<std::string, CollectiveKind>{{"reduce_scatter.tp", CollectiveKind::kReduceScatter},
                                             {"all_gather.tp", CollectiveKind::kAllGather}}) {
    SCOPED_TRACE(name);
    const double measured_s = measured_op_s(run, name);
    const double preset_error = sim::collective_time_s(preset, kind, kActivationBytes, pair) / measured_s - 1;
    const double lines_error =
        sim::collective_time_s(preset_with_lines(), kind, kActivationBytes, pair) / measured_s - 1;
    // Measured 101-102 us inside the step (the sweep alone: 87-90 us); the preset's datasheet NVLink says
    // 48 us (-52 %), the lines 81-83 us (-17 %, -20 %).
    EXPECT_LT(preset_error, -0.40);
    EXPECT_LE(std::fabs(lines_error), 0.25);
  }
}

TEST(ParallelSteps, TheLinesBringTheTensorParallelStepCloserAndKeepTheOthers) {
  const sim::ClusterSpec preset = single_gpu_preset();
  // Step-time error (median measured step) on the preset and with the lines. Measured: tp2 -6.1 % -> -2.8 %;
  // pp2 -1.6 % -> -1.6 % (its send/recv is a small share of the step); dp2 +0.8 % -> +1.5 % (its gradient
  // all-reduce overlaps the backward pass). All within the 3 % with the lines.
  for (const std::string name : {"tp2", "pp2", "dp2"}) {
    SCOPED_TRACE(name);
    const MeasuredRun run = load_measured_run(step_runs() / name, preset.gpu);
    const graph::Graph graph = run_graph(run);
    const double on_preset = simulate_run(run, graph, preset).step_time_s / run.figures.step_time_s - 1;
    const double with_lines =
        simulate_run(run, graph, preset_with_lines()).step_time_s / run.figures.step_time_s - 1;
    EXPECT_LE(std::fabs(with_lines), 0.03);
    if (name == "tp2") {
      EXPECT_LT(on_preset, -0.05) << "the datasheet NVLink makes TP's collectives twice as fast";
      EXPECT_LT(std::fabs(with_lines), std::fabs(on_preset) - 0.02);
    }
  }
}

TEST(ParallelSteps, FourRankStepsWantTheLinesOfTheirOwnGroupSize) {
  // tests/fixtures/h200x4-parallel-steps: the same model with TP4, PP4, DP4 (gbs 16) on a 4 x H200 host
  // (another than the 4-rank sweep's). Step-time error against the median step, measured: TP4 -9.6 % on the
  // preset, +5.8 % with the 2-rank lines (their per-hop latency and (n-1)/n bandwidth scaling overshoot at 4
  // ranks), -4.9 % with the lines of the 4-rank sweep (tests/fixtures/kineto-h200x4-collectives/n4); PP4 -2.7
  // % and DP4 +0.5 % on the preset, within 1 % of that with either lines.
  const sim::ClusterSpec preset = single_gpu_preset();
  const sim::ClusterSpec four_rank_lines =
      preset_with_lines_of(fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x4-collectives/n4", 4);
  const fs::path runs = unpack_fixture("h200x4-parallel-steps");
  const auto error_on = [](const MeasuredRun& run, const graph::Graph& graph,
                           const sim::ClusterSpec& cluster) {
    return simulate_run(run, graph, cluster).step_time_s / run.figures.step_time_s - 1;
  };
  const MeasuredRun tp4 = load_measured_run(runs / "tp4", preset.gpu);
  const graph::Graph tp4_graph = run_graph(tp4);
  const double on_preset = error_on(tp4, tp4_graph, preset);
  const double own_lines = error_on(tp4, tp4_graph, four_rank_lines);
  EXPECT_LT(on_preset, -0.08);
  EXPECT_LT(std::fabs(own_lines), std::fabs(on_preset) - 0.03);
  EXPECT_LE(std::fabs(own_lines), 0.06);
  for (const std::string name : {"pp4", "dp4"}) {
    SCOPED_TRACE(name);
    const MeasuredRun run = load_measured_run(runs / name, preset.gpu);
    const graph::Graph graph = run_graph(run);
    EXPECT_LE(std::fabs(error_on(run, graph, preset)), 0.03);
    EXPECT_LE(std::fabs(error_on(run, graph, four_rank_lines)), 0.03);
  }
}

/// The sweeps at 4 and 2 ranks in tests/fixtures/`fixture`/n4 and n2.
std::vector<Sweep> four_and_two_ranks(const std::string& fixture) {
  const fs::path dir = fs::path(CALO_SOURCE_DIR) / "tests/fixtures" / fixture;
  return {{dir / "n4", 4}, {dir / "n2", 2}};
}

TEST(ParallelSteps, LinesOverTwoGroupSizesServeTheStepsOfBoth) {
  // The 4 x H200 host's sweeps at 4 and 2 ranks fitted together (per-call latency and members term, docs/
  // SIMULATOR.md "Collective time by group size"): one cluster file for both group sizes, checked on steps
  // measured on two other hosts. Step-time error against the median step, measured (preset -> these lines):
  // TP4 -9.6 % -> -4.9 %, TP2 -6.1 % -> -2.8 %: each what the lines of its own group size gave, from one
  // file; PP4 -2.7 -> -2.6 %, DP4 +0.5 -> +0.9 %, PP2 -1.6 -> -1.6 %, DP2 +0.8 -> +1.4 %.
  const sim::ClusterSpec preset = single_gpu_preset();
  const sim::ClusterSpec both_sizes = preset_with_sweeps(four_and_two_ranks("kineto-h200x4-collectives"));
  const fs::path four_rank_runs = unpack_fixture("h200x4-parallel-steps");
  for (const auto& [name, dir] :
       std::vector<std::pair<std::string, fs::path>>{{"tp4", four_rank_runs / "tp4"},
                                                     {"pp4", four_rank_runs / "pp4"},
                                                     {"dp4", four_rank_runs / "dp4"},
                                                     {"tp2", step_runs() / "tp2"},
                                                     {"pp2", step_runs() / "pp2"},
                                                     {"dp2", step_runs() / "dp2"}}) {
    SCOPED_TRACE(name);
    const MeasuredRun run = load_measured_run(dir, preset.gpu);
    const graph::Graph graph = run_graph(run);
    const double on_preset = simulate_run(run, graph, preset).step_time_s / run.figures.step_time_s - 1;
    const double with_lines = simulate_run(run, graph, both_sizes).step_time_s / run.figures.step_time_s - 1;
    if (name == "tp4") {
      EXPECT_LE(std::fabs(with_lines), 0.06);
      EXPECT_LT(std::fabs(with_lines), std::fabs(on_preset) - 0.03);
    } else if (name == "tp2") {
      EXPECT_LE(std::fabs(with_lines), 0.03);
      EXPECT_LT(std::fabs(with_lines), std::fabs(on_preset) - 0.02);
    } else {
      EXPECT_LE(std::fabs(with_lines), 0.03);
    }
  }
}

TEST(ParallelSteps, AStepsOwnHostsSweepPredictsItNoBetterThanAnotherHosts) {
  // tests/fixtures/h200x4-same-host: a fourth 4 x H200 host ran TP4 and TP2 steps, then the 4- and 2-rank
  // sweeps, in one call. Lines fitted to its own sweeps and to another host's (kineto-h200x4-collectives)
  // give the same step error, measured TP4 -4.8 % and TP2 -3.6 % (preset: -9.5 %, -6.8 %): the sweeps agree
  // across hosts, and what is left is the step itself. Its sequence-parallel 32 MiB all-gathers and
  // reduce-scatters take 8-14 % longer than the same host's sweep (rank 0's op spans 112 us against 101-104
  // us over 4 ranks, 101 us against 88-89 us over 2). Not waiting for peers: the last-arriving rank's span is
  // 107-111 us. NCCL's kernel after a GEMM takes what the sweep says
  // (bench/gpu/collective_beside_compute.py): the gap is the op around the kernel (launch, events, stream
  // hand-off), which the model does not carry.
  const sim::ClusterSpec preset = single_gpu_preset();
  const sim::ClusterSpec own = preset_with_sweeps(four_and_two_ranks("h200x4-same-host"));
  const sim::ClusterSpec other = preset_with_sweeps(four_and_two_ranks("kineto-h200x4-collectives"));
  const fs::path runs = unpack_fixture("h200x4-same-host");
  const fs::path sweeps = fs::path(CALO_SOURCE_DIR) / "tests/fixtures/h200x4-same-host";
  for (const auto& [name, members] : std::vector<std::pair<std::string, int>>{{"tp4", 4}, {"tp2", 2}}) {
    SCOPED_TRACE(name);
    const MeasuredRun run = load_measured_run(runs / name, preset.gpu);
    const graph::Graph graph = run_graph(run);
    const auto error_on = [&](const sim::ClusterSpec& cluster) {
      return simulate_run(run, graph, cluster).step_time_s / run.figures.step_time_s - 1;
    };
    const double on_preset = error_on(preset), with_own = error_on(own), with_other = error_on(other);
    EXPECT_NEAR(with_own, with_other, 0.005)
        << "own host's lines " << with_own << ", another's " << with_other;
    EXPECT_LE(std::fabs(with_own), 0.06);
    EXPECT_LT(std::fabs(with_own), std::fabs(on_preset) - 0.02) << "preset " << on_preset;
    std::vector<fs::path> files;
    for (int rank = 0; rank < members; ++rank)
      files.push_back(sweeps / ("n" + std::to_string(members)) /
                      ("rank" + std::to_string(rank) + ".json.gz"));
    for (const auto& [op, kind] : std::map<std::string, graph::CollectiveKind>{
             {"all_gather.tp", graph::CollectiveKind::kAllGather},
             {"reduce_scatter.tp", graph::CollectiveKind::kReduceScatter}}) {
      double swept_s = 0;
      for (const CollectiveSample& sample : collective_samples(analyze::ingest_traces(files), preset))
        if (!sample.p2p && sample.kind == kind && sample.bytes == 4096.0 * 4096 * 2)
          swept_s = sample.measured_s;
      ASSERT_GT(swept_s, 0) << op << ": the sweep's 32 MiB";
      const double in_step = measured_op_s(run, op) / swept_s;
      EXPECT_GT(in_step, 1.05) << op;
      EXPECT_LT(in_step, 1.25) << op;
    }
  }
}

}  // namespace
}  // namespace calo::calibrate
