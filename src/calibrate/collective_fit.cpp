#include "calibrate/collective_fit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>

#include "sim/cost_model.h"

namespace calo::calibrate {

namespace {

std::string sample_key(const CollectiveSample& sample) {
  // Groups of one size on different ranks are different samples; name the ranks (a long list by its ends).
  const auto& ranks = sample.ranks;
  const std::string members = ranks.size() <= 8 ? fmt::format("{}", fmt::join(ranks, ","))
                                                : fmt::format("{},...,{}", ranks.front(), ranks.back());
  return fmt::format("{} n={} ranks {} {:.0f} B", collective_name(sample), sample.group_size, members,
                     sample.bytes);
}

/// One sample under a line of its kind, relative to its measured time: modeled / measured = transfer · x +
/// latency · y, where x = 1 / bandwidth_scale and y = latency_scale (the link's figures at scale 1).
struct LineTerms {
  double bytes = 0;     ///< the sample's size
  double transfer = 0;  ///< transfer time at scale 1 / measured
  double latency = 0;   ///< latency terms at scale 1 / measured
};

/// A line as the least squares solve it: x = 1 / bandwidth_scale, y = latency_scale.
struct SolvedLine {
  double inverse_bandwidth_scale = 1;  ///< x
  double latency_scale = 1;            ///< y
  bool at_bound = false;               ///< the free solve put y below 0 (or had one size class): y = 0
};

/// The line of least squared relative error over `terms` (normal equations of sum (a x + b y - 1)^2); y = 0
/// and x alone where the free solve puts y below 0 or cannot tell x from y.
SolvedLine solve_line(std::span<const LineTerms> terms) {
  double aa = 0, ab = 0, bb = 0, a1 = 0, b1 = 0;
  for (const LineTerms& term : terms) {
    aa += term.transfer * term.transfer;
    ab += term.transfer * term.latency;
    bb += term.latency * term.latency;
    a1 += term.transfer;
    b1 += term.latency;
  }
  const double determinant = aa * bb - ab * ab;
  SolvedLine line{(bb * a1 - ab * b1) / determinant, (aa * b1 - ab * a1) / determinant, false};
  if (!(std::isfinite(line.latency_scale) && line.latency_scale >= 0 && line.inverse_bandwidth_scale > 0)) {
    line = {a1 / aa, 0, true};
  }
  return line;
}

/// Least squares of relative error over the within-node samples for NVLink bandwidth and latency, using the
/// simulator's collective time (linear in 1/bandwidth and latency for a given algorithm; re-linearized until
/// the algorithm choice settles). Returns false when the latency hit its bound 0.
bool fit_nvlink(const std::vector<const CollectiveSample*>& samples, sim::ClusterSpec& cluster) {
  double bandwidth = cluster.node.nvlink_bandwidth_bytes_per_s;
  double latency = cluster.node.nvlink_latency_s;
  bool bounded = false;
  sim::ClusterSpec trial = cluster;
  for (int iteration = 0; iteration < 8; ++iteration) {
    trial.node.nvlink_bandwidth_bytes_per_s = bandwidth;
    std::vector<LineTerms> terms;  // here x = 1 / bandwidth and y = latency, both absolute
    for (const CollectiveSample* sample : samples) {
      constexpr double kStep_s = 1e-6;
      trial.node.nvlink_latency_s = 0;
      const double transfer_s = modeled_collective_s(trial, *sample);
      trial.node.nvlink_latency_s = latency;
      const double at_latency_s = modeled_collective_s(trial, *sample);
      trial.node.nvlink_latency_s = latency + kStep_s;
      const double latency_terms = (modeled_collective_s(trial, *sample) - at_latency_s) / kStep_s;
      terms.push_back(
          {sample->bytes, transfer_s * bandwidth / sample->measured_s, latency_terms / sample->measured_s});
    }
    const SolvedLine solved = solve_line(terms);
    bandwidth = 1 / solved.inverse_bandwidth_scale;
    latency = solved.latency_scale;
    bounded = solved.at_bound;
  }
  cluster.node.nvlink_bandwidth_bytes_per_s = bandwidth;
  cluster.node.nvlink_latency_s = latency;
  return bounded;
}

/// modeled / measured - 1 of `term` under the fastest of `lines`.
double envelope_error(const LineTerms& term, std::span<const SolvedLine> lines) {
  double fastest = INFINITY;
  for (const SolvedLine& line : lines) {
    fastest =
        std::min(fastest, term.transfer * line.inverse_bandwidth_scale + term.latency * line.latency_scale);
  }
  return fastest - 1;
}

/// Two lines split at a size: the small line fitted below it, the large one from it on.
struct SplitFit {
  std::vector<SolvedLine> lines;  ///< small, large
  double split_bytes = 0;         ///< the smallest size of the large line
};

/// Of every split leaving at least 3 distinct sizes on each side, the one whose envelope has the least summed
/// squared relative error over `terms` (sorted by size).
SplitFit best_split(std::span<const LineTerms> terms) {
  SplitFit best;
  double best_loss = INFINITY;
  const auto sizes_in = [](std::span<const LineTerms> part) {
    int distinct = 0;
    for (std::size_t index = 0; index < part.size(); ++index)
      distinct += index == 0 || part[index].bytes != part[index - 1].bytes;
    return distinct;
  };
  for (std::size_t split = 1; split < terms.size(); ++split) {
    if (terms[split].bytes == terms[split - 1].bytes) continue;
    const auto small = terms.first(split), large = terms.subspan(split);
    if (sizes_in(small) < 3 || sizes_in(large) < 3) continue;
    const std::vector<SolvedLine> lines{solve_line(small), solve_line(large)};
    double loss = 0;
    for (const LineTerms& term : terms) loss += std::pow(envelope_error(term, lines), 2);
    if (loss < best_loss) best_loss = loss, best = {lines, terms[split].bytes};
  }
  return best;
}

/// The lines `cluster` gives the family of `sample` (its kind's, or the p2p lines).
std::vector<sim::CollectiveLine>& lines_for(sim::ClusterSpec& cluster, const CollectiveSample& sample) {
  return sample.p2p ? cluster.collective.p2p_lines : cluster.collective.lines[sample.kind];
}

/// Fits the lines of the family of `sweep` (within-node samples of one kind, or all p2p) to it, holds every
/// size out once, and writes the lines into `cluster`.
CollectiveLineFit fit_family_lines(std::vector<const CollectiveSample*> sweep, sim::ClusterSpec& cluster) {
  std::sort(sweep.begin(), sweep.end(),
            [](const CollectiveSample* a, const CollectiveSample* b) { return a->bytes < b->bytes; });
  const CollectiveSample& first = *sweep.front();
  sim::ClusterSpec one_line = cluster;  // the link's own model: this family without lines
  lines_for(one_line, first).clear();
  sim::ClusterSpec unit_line = cluster;  // one line at scale 1 (lines replace the efficiency curve)
  lines_for(unit_line, first) = {{"unit", 1, 1}};
  CollectiveLineFit result;
  result.kind = first.kind;
  result.p2p = first.p2p;
  result.name = collective_name(first);
  std::vector<LineTerms> terms;
  for (const CollectiveSample* sample : sweep) {
    unit_line.node.nvlink_latency_s = 0;
    const double transfer_s = modeled_collective_s(unit_line, *sample);
    unit_line.node.nvlink_latency_s = cluster.node.nvlink_latency_s;
    const double total_s = modeled_collective_s(unit_line, *sample);
    terms.push_back(
        {sample->bytes, transfer_s / sample->measured_s, (total_s - transfer_s) / sample->measured_s});
    result.single_line_max_error =
        std::max(result.single_line_max_error,
                 std::fabs(modeled_collective_s(one_line, *sample) / sample->measured_s - 1));
    result.sizes += terms.size() == 1 || terms.back().bytes != terms[terms.size() - 2].bytes;
  }
  const SplitFit fit = best_split(terms);
  for (const LineTerms& term : terms) {
    const double error = envelope_error(term, fit.lines);
    result.max_error = std::max(result.max_error, std::fabs(error));
    result.rms_error += error * error / static_cast<double>(terms.size());
  }
  result.rms_error = std::sqrt(result.rms_error);
  for (const LineTerms& held : terms) {  // each size held out: lines fitted to the others predict it
    std::vector<LineTerms> others;
    for (const LineTerms& term : terms)
      if (term.bytes != held.bytes) others.push_back(term);
    const double error = std::fabs(envelope_error(held, best_split(others).lines));
    result.rms_held_out_error += error * error / static_cast<double>(terms.size());
    if (error > result.max_held_out_error) {
      result.max_held_out_error = error, result.held_out_worst_bytes = held.bytes;
    }
  }
  result.rms_held_out_error = std::sqrt(result.rms_held_out_error);
  result.smallest_bytes = terms.front().bytes;
  result.largest_bytes = terms.back().bytes;
  result.split_bytes = fit.split_bytes;
  const char* names[] = {"small", "large"};
  for (std::size_t index = 0; index < fit.lines.size(); ++index) {
    result.lines.push_back(
        {names[index], 1 / fit.lines[index].inverse_bandwidth_scale, fit.lines[index].latency_scale});
  }
  lines_for(cluster, first) = result.lines;
  return result;
}

/// Lines for every family (a collective kind, or p2p) whose within-node samples form a sweep; their
/// parameters go into `stage`.
std::vector<CollectiveLineFit> fit_lines(const std::vector<const CollectiveSample*>& within_node,
                                         sim::ClusterSpec& cluster, StageFit& stage) {
  std::map<std::string, std::vector<const CollectiveSample*>> by_family;
  for (const CollectiveSample* sample : within_node) by_family[collective_name(*sample)].push_back(sample);
  std::vector<CollectiveLineFit> fits;
  for (const auto& [family, sweep] : by_family) {
    std::vector<double> sizes;
    for (const CollectiveSample* sample : sweep) sizes.push_back(sample->bytes);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    if (static_cast<int>(sizes.size()) < kMinLineSweepSizes ||
        sizes.back() < kMinLineSweepSpan * sizes.front()) {
      continue;
    }
    fits.push_back(fit_family_lines(sweep, cluster));
    for (const sim::CollectiveLine& line : fits.back().lines) {
      const std::string key = fmt::format("collective.lines.{}.{}", family, line.name);
      stage.parameters.push_back({key + ".bandwidth_scale", 1, line.bandwidth_scale, "x", "collective"});
      stage.parameters.push_back({key + ".latency_scale", 1, line.latency_scale, "x", "collective"});
    }
  }
  return fits;
}

}  // namespace

std::string collective_name(const CollectiveSample& sample) {
  return sample.p2p ? "p2p" : graph::to_string(sample.kind);
}

double modeled_collective_s(const sim::ClusterSpec& cluster, const CollectiveSample& sample) {
  if (sample.p2p) return sim::p2p_time_s(cluster, sample.bytes, sample.ranks.front(), sample.ranks.back());
  return sim::collective_time_s(cluster, sample.kind, sample.bytes, sim::place_group(cluster, sample.ranks));
}

StageFit fit_collective_stage(std::vector<CollectiveSample>& samples, sim::ClusterSpec& cluster,
                              const std::string& label, std::vector<CollectiveLineFit>& line_fits) {
  StageFit stage{"collective", {}, {}, ""};
  std::vector<const CollectiveSample*> within_node;
  for (const CollectiveSample& sample : samples) {
    if (sample.fitted) within_node.push_back(&sample);
  }
  if (within_node.empty()) {
    stage.note = "no NCCL kernel with collective metadata inside one node";
    for (CollectiveSample& sample : samples) sample.modeled_s = modeled_collective_s(cluster, sample);
    return stage;
  }
  const sim::NodeSpec base = cluster.node;
  const bool bounded = fit_nvlink(within_node, cluster);
  stage.parameters.push_back({"node.nvlink_bandwidth_gb_s", base.nvlink_bandwidth_bytes_per_s / 1e9,
                              cluster.node.nvlink_bandwidth_bytes_per_s / 1e9, "GB/s", "collective"});
  stage.parameters.push_back({"node.nvlink_latency_us", base.nvlink_latency_s * 1e6,
                              cluster.node.nvlink_latency_s * 1e6, "us", "collective"});
  if (bounded) {
    stage.note =
        "latency at its bound 0: the measured small-size times are carried by the kept efficiency "
        "curve (collective.bw_half_bytes)";
  }
  line_fits = fit_lines(within_node, cluster, stage);
  nlohmann::json residuals = nlohmann::json::object();
  for (CollectiveSample& sample : samples) {
    sample.modeled_s = modeled_collective_s(cluster, sample);
    residuals[sample_key(sample)] = (sample.modeled_s - sample.measured_s) / sample.measured_s;
  }
  stage.residuals.emplace_back(label, residuals);
  return stage;
}

}  // namespace calo::calibrate
