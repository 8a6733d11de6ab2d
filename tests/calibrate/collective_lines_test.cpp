// Collective lines on real data: a size sweep (4 KiB .. 1 GiB, doubling) of all-reduce, all-gather,
// reduce-scatter, all-to-all and one-way send/recv (p2p) on 2 x NVIDIA H200 over NVLink (NCCL 2.28.9, PyTorch
// 2.11 profiler traces, tests/fixtures/kineto-h200x2-collectives, made by bench/gpu/collective_sweep.sh). The
// link's one line misses the sweep by tens of percent; each kind's two fitted lines follow it, also for sizes
// held out and on two other hosts' pairs, the lines are NCCL's own protocols (checked against the sweeps run
// with NCCL_PROTO forced), and `calo calibrate` writes them into a file `calo sim` loads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/run_calo.h"
#include "../common/scratch.h"
#include "analyze/trace_ingest.h"
#include "calibrate/calibrate.h"
#include "calibrate/kineto_input.h"
#include "sim/cluster.h"

namespace calo::calibrate {
namespace {

namespace fs = std::filesystem;
using calo::testing::Outcome;
using calo::testing::run_calo;
using graph::CollectiveKind;

const fs::path kSweep = fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x2-collectives";

std::vector<fs::path> ranks_of(const std::string& protocol) {
  return {kSweep / protocol / "rank0.json.gz", kSweep / protocol / "rank1.json.gz"};
}

const Calibration& sweep_calibration() {
  static const Calibration calibration = calibrate(ranks_of("auto"), "h200-hgx", {false, {}, {}, {}, {}});
  return calibration;
}

const CollectiveLineFit* lines_of(CollectiveKind kind) {
  for (const CollectiveLineFit& fit : sweep_calibration().kineto.lines) {
    if (!fit.p2p && fit.kind == kind) return &fit;
  }
  return nullptr;
}

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                     CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll};

// Stated tolerances, measured on this sweep (docs/SIMULATOR.md "Collective lines from a size sweep" has the
// table). Collectives: every size within 20 % fitted (RMS 10 %) and 30 % held out (RMS 10 %): the worst
// held-out size is all-reduce's 2 MiB, where NCCL still runs LL past the point where Simple would be as fast.
// p2p (one way, the sender's kernel): 10 % fitted, 15 % held out. The link's one line misses them by 32-53 %.
double fitted_tolerance(const CollectiveLineFit& fit) {
  return fit.p2p ? 0.10 : 0.20;
}
double held_out_tolerance(const CollectiveLineFit& fit) {
  return fit.p2p ? 0.15 : 0.30;
}
constexpr double kRmsTolerance = 0.10;

TEST(CollectiveLines, EachKindsTwoLinesFollowTheSweepWhereOneLineCannot) {
  const Calibration& calibration = sweep_calibration();
  ASSERT_EQ(calibration.kineto.lines.size(), 5u) << "four kinds and p2p swept over 19 sizes";
  for (CollectiveKind kind : kKinds) EXPECT_NE(lines_of(kind), nullptr) << graph::to_string(kind);
  for (const CollectiveLineFit& fit : calibration.kineto.lines) {
    SCOPED_TRACE(fit.name);
    EXPECT_EQ(fit.sizes, 19);
    EXPECT_EQ(fit.smallest_bytes, 4096);
    EXPECT_EQ(fit.largest_bytes, 1073741824);
    EXPECT_LE(fit.max_error, fitted_tolerance(fit));
    EXPECT_LE(fit.rms_error, kRmsTolerance);
    EXPECT_LE(fit.max_held_out_error, held_out_tolerance(fit))
        << "worst at " << fit.held_out_worst_bytes << " B";
    EXPECT_LE(fit.rms_held_out_error, kRmsTolerance);
    EXPECT_GT(fit.single_line_max_error, 2 * fit.max_error) << "the lines must buy something";
    ASSERT_EQ(fit.lines.size(), 2u);
    EXPECT_EQ(fit.lines[0].name, "small");
    // The small-message regime starts sooner and moves less: lower latency, lower bandwidth.
    EXPECT_LT(fit.lines[0].bandwidth_scale, fit.lines[1].bandwidth_scale);
    EXPECT_LE(fit.lines[0].latency_scale, fit.lines[1].latency_scale);
  }
  // Every sample is modeled with the fitted cluster's lines: the per-sample table agrees with the fit.
  ASSERT_EQ(calibration.kineto.collectives.size(), 5u * 19u) << "the batched send/recv carries no sizes";
  for (const CollectiveSample& sample : calibration.kineto.collectives) {
    EXPECT_TRUE(sample.fitted);
    EXPECT_LE(std::fabs(sample.modeled_s / sample.measured_s - 1), 0.20)
        << collective_name(sample) << " " << sample.bytes << " B";
  }
}

/// Max |error| of `kind`'s samples in `protocol`'s sweep between `from` and `to` bytes under one line alone.
double one_line_error(const std::string& protocol, CollectiveKind kind, const sim::CollectiveLine& line,
                      double from_bytes, double to_bytes) {
  sim::ClusterSpec cluster = sweep_calibration().fit.cluster;
  cluster.collective.lines[kind] = {line};
  const analyze::TraceData data = analyze::ingest_traces(ranks_of(protocol));
  double worst = 0;
  int compared = 0;
  for (const CollectiveSample& sample : collective_samples(data, cluster)) {
    if (sample.kind != kind || sample.bytes < from_bytes || sample.bytes > to_bytes) continue;
    worst = std::max(worst, std::fabs(modeled_collective_s(cluster, sample) / sample.measured_s - 1));
    ++compared;
  }
  EXPECT_GE(compared, 3) << protocol << " " << graph::to_string(kind);
  return worst;
}

TEST(CollectiveLines, TheTwoLinesAreNcclsLlAndSimpleProtocols) {
  // NCCL's log (nccl.log.gz of the sweep, NCCL_DEBUG_SUBSYS=TUNING) shows Ring/LL for the small sizes and
  // Ring/Simple from 2 MiB per rank on. The sweeps run again with NCCL_PROTO=LL and =Simple measure each
  // protocol on its own: the small line predicts the LL sweep, the large line the Simple sweep, over the
  // range the fit gave each (all-to-all is point-to-point in NCCL, and NCCL_PROTO does not move it).
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter}) {
    SCOPED_TRACE(graph::to_string(kind));
    const CollectiveLineFit* fit = lines_of(kind);
    ASSERT_NE(fit, nullptr);
    const double small_to = fit->split_bytes / 2, large_from = fit->split_bytes;
    // Each line predicts its protocol's sweep within 15 % (measured 7-11 % LL, 9-14 % Simple) ...
    EXPECT_LE(one_line_error("ll", kind, fit->lines[0], fit->smallest_bytes, small_to), 0.15);
    EXPECT_LE(one_line_error("simple", kind, fit->lines[1], large_from, fit->largest_bytes), 0.15);
    // ... and the other protocol's not at all (measured 129-361 % off).
    EXPECT_GT(one_line_error("ll", kind, fit->lines[1], fit->smallest_bytes, small_to), 1.0);
    EXPECT_GT(one_line_error("simple", kind, fit->lines[0], large_from, fit->largest_bytes), 1.0);
  }
}

TEST(CollectiveLines, TheLinesOfOneHostPredictTwoOtherHostsPairs) {
  // host-a/, host-b/: the four collectives swept on two other H200 pairs of other hosts, lent earlier the
  // same day (host-b also ran a batched send/recv, whose kernels carry no sizes: no sample). The lines fitted
  // to this pair predict them out of sample.
  const sim::ClusterSpec& fitted = sweep_calibration().fit.cluster;
  const sim::ClusterSpec base = sim::load_cluster("h200-hgx");
  for (const std::string host : {"host-a", "host-b"}) {
    SCOPED_TRACE(host);
    const analyze::TraceData data =
        analyze::ingest_traces({kSweep / host / "rank0.json.gz", kSweep / host / "rank1.json.gz"});
    const auto samples = collective_samples(data, fitted);
    ASSERT_EQ(samples.size(), 4u * 19u);
    double worst = 0, squares = 0, base_worst = 0;
    for (const CollectiveSample& sample : samples) {
      const double error = modeled_collective_s(fitted, sample) / sample.measured_s - 1;
      worst = std::max(worst, std::fabs(error));
      squares += error * error;
      base_worst =
          std::max(base_worst, std::fabs(modeled_collective_s(base, sample) / sample.measured_s - 1));
    }
    const double rms = std::sqrt(squares / static_cast<double>(samples.size()));
    // Measured: host-a 20.8 % worst (RMS 6.3 %), host-b 16.8 % (5.4 %); BASE 76 % and 72 %.
    EXPECT_LE(worst, 0.25);
    EXPECT_LE(rms, 0.08);
    EXPECT_GT(base_worst, 0.5) << "BASE, uncalibrated";
  }
}

/// Max |modeled / measured - 1| over the collectives of `files` (one job's traces) on `cluster`, per kind.
std::map<std::string, double> worst_by_kind(const std::vector<fs::path>& files,
                                            const sim::ClusterSpec& cluster) {
  std::map<std::string, double> worst;
  for (const CollectiveSample& sample : collective_samples(analyze::ingest_traces(files), cluster)) {
    double& kind_worst = worst[collective_name(sample)];
    kind_worst =
        std::max(kind_worst, std::fabs(modeled_collective_s(cluster, sample) / sample.measured_s - 1));
  }
  return worst;
}

TEST(CollectiveLines, LinesHoldAtTheGroupSizeTheyWereFittedAtAndNotAtAnother) {
  // tests/fixtures/kineto-h200x4-collectives: the four collectives swept over 4 ranks (n4/) and then 2 ranks
  // (n2/) of a 4 x H200 host (all pairs NV18). Fitted to its own group size, each sweep meets the tolerances,
  // and the 2-rank lines of another host predict this host's 2-rank groups (10-16 %). Across group sizes they
  // do not: the simulator scales a line's latency by hops and its bandwidth term by (n-1)/n, and on NVSwitch
  // NCCL pays neither (a 4 KiB all-gather takes 4.9 us over 4 ranks, 3.9 us over 2; a 1 GiB
  // reduce-scatter 1.22x the 2-rank time, not 1.5x). The 2-rank lines miss the 4-rank sweep by 69-235 %, the
  // 4-rank lines the 2-rank sweep by 53-69 % (docs/SIMULATOR.md "What one group size cannot tell").
  const fs::path host = fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x4-collectives";
  const std::vector<fs::path> four = {host / "n4/rank0.json.gz", host / "n4/rank1.json.gz",
                                      host / "n4/rank2.json.gz", host / "n4/rank3.json.gz"};
  const std::vector<fs::path> two = {host / "n2/rank0.json.gz", host / "n2/rank1.json.gz"};
  const Calibration four_fit = calibrate(four, "h200-hgx", {false, {}, {}, {}, {}});
  ASSERT_EQ(four_fit.kineto.lines.size(), 4u);
  for (const CollectiveLineFit& fit : four_fit.kineto.lines) {
    SCOPED_TRACE(fit.name);
    EXPECT_EQ(fit.sizes, 19);
    EXPECT_LE(fit.max_error, 0.22);           // measured 12.6-20.0 % (all-gather's 4 KiB at 20.0 %)
    EXPECT_LE(fit.rms_error, kRmsTolerance);  // 5.0-8.1 %
    EXPECT_LE(fit.max_held_out_error, held_out_tolerance(fit));  // 15.4-27.8 %
  }
  for (const auto& [kind, worst] : worst_by_kind(two, sweep_calibration().fit.cluster)) {
    EXPECT_LE(worst, 0.20) << kind << ": the 2-rank lines on this host's 2-rank groups";
  }
}

TEST(CollectiveLines, LinesFittedOverTwoGroupSizesHoldAtBoth) {
  // The same host's two sweeps given together (one directory per job): over two group sizes each line also
  // fits a latency paid once per call and a bandwidth that grows with the members (n / (n + members_half)).
  // Measured: 15.3-22.8 % fitted (RMS 5.5-7.4 %; all-reduce's 2-rank 2 MiB the worst, as on the pair), held
  // out 22.7-27.9 %, where lines of one group size miss the other by 53-235 %. The third pair's 2-rank sweep,
  // another host, is predicted within 11-16 %, all-reduce's 2 MiB (NCCL's LL past its crossover) at -23 %.
  const fs::path host = fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x4-collectives";
  const Calibration both =
      calibrate({host / "n4/rank0.json.gz", host / "n4/rank1.json.gz", host / "n4/rank2.json.gz",
                 host / "n4/rank3.json.gz", host / "n2/rank0.json.gz", host / "n2/rank1.json.gz"},
                "h200-hgx", {false, {}, {}, {}, {}});
  EXPECT_EQ(both.kineto.labels, (std::vector<std::string>{"n4", "n2"})) << "two jobs, named by directory";
  ASSERT_EQ(both.kineto.lines.size(), 4u);
  for (const CollectiveLineFit& fit : both.kineto.lines) {
    SCOPED_TRACE(fit.name);
    EXPECT_EQ(fit.group_sizes, (std::vector<int>{2, 4}));
    EXPECT_EQ(fit.sizes, 19);
    for (const sim::CollectiveLine& line : fit.lines) {
      EXPECT_EQ(line.fitted_members_min, 2);
      EXPECT_EQ(line.fitted_members_max, 4);
    }
    EXPECT_LE(fit.max_error, 0.25);
    EXPECT_LE(fit.rms_error, kRmsTolerance);
    EXPECT_LE(fit.max_held_out_error, held_out_tolerance(fit));
    // Simple's fixed cost: the large line pays several link latencies per call, more than the small one.
    ASSERT_EQ(fit.lines.size(), 2u);
    EXPECT_GT(fit.lines[1].call_latency_scale, fit.lines[0].call_latency_scale);
  }
  const sim::ClusterSpec& fitted = both.fit.cluster;
  // The 1 GiB reduce-scatter over 4 ranks takes 1.22 x its 2-rank time (measured), not (3/4)/(1/2) = 1.5 x:
  // the members term carries it.
  std::map<int, const CollectiveSample*> gigabyte_reduce_scatter;
  for (const CollectiveSample& sample : both.kineto.collectives) {
    if (!sample.p2p && sample.kind == CollectiveKind::kReduceScatter && sample.bytes == 1073741824.0)
      gigabyte_reduce_scatter[sample.group_size] = &sample;
  }
  ASSERT_EQ(gigabyte_reduce_scatter.size(), 2u);
  const double measured_ratio =
      gigabyte_reduce_scatter[4]->measured_s / gigabyte_reduce_scatter[2]->measured_s;
  EXPECT_NEAR(measured_ratio, 1.22, 0.02);
  EXPECT_NEAR(modeled_collective_s(fitted, *gigabyte_reduce_scatter[4]) /
                  modeled_collective_s(fitted, *gigabyte_reduce_scatter[2]),
              measured_ratio, 0.1);
  for (const auto& [kind, worst] : worst_by_kind(ranks_of("auto"), fitted)) {
    if (kind == "p2p") continue;  // the 4-rank host swept no point-to-point messages: the link's one line
    EXPECT_LE(worst, 0.25) << kind << ": the 4-rank host's lines on the third pair";
  }
}

/// The traces of tests/fixtures/kineto-h200x4-group-sizes/n<members>: one sweep over `members` ranks.
std::vector<fs::path> group_size_sweep(int members) {
  const fs::path dir = fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto-h200x4-group-sizes" /
                       ("n" + std::to_string(members));
  std::vector<fs::path> files;
  for (int rank = 0; rank < members; ++rank)
    files.push_back(dir / ("rank" + std::to_string(rank) + ".json.gz"));
  return files;
}

/// The cluster calibrated on the sweeps over each of `group_sizes` (one directory per job).
Calibration fitted_on_group_sizes(std::initializer_list<int> group_sizes) {
  std::vector<fs::path> files;
  for (int members : group_sizes) {
    const auto sweep = group_size_sweep(members);
    files.insert(files.end(), sweep.begin(), sweep.end());
  }
  return calibrate(files, "h200-hgx", {false, {}, {}, {}, {}});
}

TEST(CollectiveLines, TwoGroupSizesPredictAGroupSizeBetweenThemButNotBeyond) {
  // tests/fixtures/kineto-h200x4-group-sizes: a third 4 x H200 host swept at 4, 3 and 2 ranks in one call.
  // Fitted at 4 and 2 ranks, the lines predict the 3-rank sweep they never saw within 13-25 % per kind,
  // where the lines of 4 ranks alone miss it by 30-42 % and of 2 ranks by 53-125 %. Beyond the fitted sizes
  // they do not hold: fitted at 3 and 2, the 4-rank all-gather is missed by 59 % (docs/SIMULATOR.md
  // "Collective time by group size": sweep the group sizes you will run).
  const Calibration between = fitted_on_group_sizes({4, 2});
  const Calibration four_alone = fitted_on_group_sizes({4});
  const auto held_out = worst_by_kind(group_size_sweep(3), between.fit.cluster);
  const auto four_alone_on_three = worst_by_kind(group_size_sweep(3), four_alone.fit.cluster);
  ASSERT_EQ(held_out.size(), 4u);
  for (const auto& [kind, worst] : held_out) {
    EXPECT_LE(worst, 0.27) << kind << ": 3 ranks, predicted from 4 and 2";
    EXPECT_LT(worst, four_alone_on_three.at(kind) - 0.1) << kind << ": the 4-rank lines alone";
  }
  double worst_beyond = 0;
  for (const auto& [kind, worst] :
       worst_by_kind(group_size_sweep(4), fitted_on_group_sizes({3, 2}).fit.cluster))
    worst_beyond = std::max(worst_beyond, worst);
  EXPECT_GT(worst_beyond, 0.4) << "extrapolating past the fitted group sizes";
  // All three sizes fitted together: 16-25 % fitted, held out (by size) 22-30 %.
  const Calibration all_three = fitted_on_group_sizes({4, 3, 2});
  ASSERT_EQ(all_three.kineto.lines.size(), 4u);
  for (const CollectiveLineFit& fit : all_three.kineto.lines) {
    SCOPED_TRACE(fit.name);
    EXPECT_EQ(fit.group_sizes, (std::vector<int>{2, 3, 4}));
    EXPECT_LE(fit.max_error, 0.27);
    EXPECT_LE(fit.max_held_out_error, 0.32);
  }
}

TEST(CollectiveLines, TheTwoH200TraceWithFourSizesGetsNoLines) {
  // tests/fixtures/kineto_real: all-reduce at 4 sizes, the other kinds at one: no sweep, the link's one line.
  const Calibration calibration =
      calibrate({fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto_real/rank0.json",
                 fs::path(CALO_SOURCE_DIR) / "tests/fixtures/kineto_real/rank1.json"},
                "h200-hgx", {false, {}, {}, {}, {}});
  EXPECT_TRUE(calibration.kineto.lines.empty());
  EXPECT_TRUE(calibration.fit.cluster.collective.lines.empty());
}

TEST(CollectiveLines, CalibrateTakesOneDirectoryPerJobFromTheCommandLine) {
  // Two group sizes' sweeps given as files of two directories: two jobs, each line with its four figures,
  // the file with the fitted range, and a 4-rank simulation without a warning.
  std::string files;
  for (int members : {4, 2})
    for (const fs::path& file : group_size_sweep(members)) files += " " + file.string();
  const fs::path out = calo::testing::scratch_path("h200x4-group-sizes.yaml");
  const Outcome calibrated =
      run_calo("calibrate" + files + " --cluster h200-hgx --no-loo --out " + out.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_NE(calibrated.output.find("# collectives of n4, n2"), std::string::npos) << calibrated.output;
  EXPECT_NE(calibrated.output.find("small line (bw x, lat x[, call x, half])"), std::string::npos);
  EXPECT_NE(calibrated.output.find("collective.lines.all_gather.large.members_half"), std::string::npos);
  const sim::ClusterSpec loaded = sim::load_cluster(out.string());
  EXPECT_EQ(loaded.collective.lines.at(CollectiveKind::kReduceScatter)[1].fitted_members_max, 4);
  const Outcome four = run_calo("sim --model llama3-8b --cluster " + out.string() +
                                " --gpus 4 --tp 4 --gbs 4 --steps 1 --no-store");
  EXPECT_EQ(four.exit_code, 0) << four.output;
  EXPECT_EQ(four.output.find("WARNING"), std::string::npos) << "4 ranks are inside 2-4: " << four.output;
}

TEST(CollectiveLines, CalibrateWritesThemAndCaloSimLoadsTheFile) {
  const fs::path out = calo::testing::scratch_path("h200x2-collectives.yaml");
  const auto sweep = ranks_of("auto");
  const Outcome calibrated = run_calo("calibrate " + sweep[0].string() + " " + sweep[1].string() +
                                      " --cluster h200-hgx --out " + out.string());
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_NE(calibrated.output.find("# collective lines"), std::string::npos) << calibrated.output;
  EXPECT_NE(calibrated.output.find("held out"), std::string::npos);
  const sim::ClusterSpec loaded = sim::load_cluster(out.string());
  ASSERT_EQ(loaded.collective.lines.size(), 4u);
  const auto& fitted = sweep_calibration().fit.cluster.collective.lines.at(CollectiveKind::kAllReduce);
  EXPECT_NEAR(loaded.collective.lines.at(CollectiveKind::kAllReduce)[1].bandwidth_scale,
              fitted[1].bandwidth_scale, 1e-6);
  const Outcome simulated =
      run_calo("sim --model llama3-8b --cluster " + out.string() + " --gpus 8 --tp 8 --gbs 8 --steps 2");
  EXPECT_EQ(simulated.exit_code, 0) << simulated.output;
  // Lines fitted over 2 ranks, TP groups of 8: the simulation says its collective times extrapolate.
  EXPECT_NE(
      simulated.output.find("run over 8 GPUs of a node, outside the 2 ranks their collective lines were "
                            "fitted over"),
      std::string::npos)
      << simulated.output;
}

}  // namespace
}  // namespace calo::calibrate
