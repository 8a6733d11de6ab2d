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

#include "calibrate/calibrate.h"
#include "calibrate/measurement.h"
#include "fixture_runs.h"
#include "sim/cluster.h"
#include "sim/cost_model.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::unpack_fixture;

const fs::path& step_runs() {
  static const fs::path dir = unpack_fixture("h200x2-parallel-steps");
  return dir;
}

/// h200-hgx-calibrated with NVLink and the lines fitted to the size sweep (the preset's compute, power and
/// heat kept: the traces carry only NCCL kernels).
const sim::ClusterSpec& preset_with_lines() {
  static const sim::ClusterSpec cluster = [] {
    const fs::path sweep = fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x2-collectives/auto";
    return calibrate({sweep / "rank0.json.gz", sweep / "rank1.json.gz"}, "h200-hgx-calibrated",
                     {false, {}, {}, {}})
        .fit.cluster;
  }();
  return cluster;
}

/// Median duration of rank 0's op spans named `name` over the run's measured steps.
double measured_op_s(const MeasuredRun& run, const std::string& name) {
  std::vector<double> durations;
  for (const store::Span& span : run.op_spans) {
    if (span.name == name) durations.push_back(static_cast<double>(span.t_end_ns - span.t_begin_ns) * 1e-9);
  }
  EXPECT_FALSE(durations.empty()) << name;
  return upper_median(durations);
}

TEST(ParallelSteps, TheSweepsLinesPredictATensorParallelStepsCollectives) {
  const sim::ClusterSpec preset = sim::load_cluster("h200-hgx-calibrated");
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
  const sim::ClusterSpec preset = sim::load_cluster("h200-hgx-calibrated");
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

}  // namespace
}  // namespace calo::calibrate
