#include "calibrate/collective_fit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
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

/// The terms of a line's model, each linear in one parameter: modeled / measured = transfer · x + transfer
/// per member · w + hop latency · y + call latency · z, where x = 1 / bandwidth_scale, w = members_half /
/// bandwidth_scale, y = latency_scale and z = call_latency_scale (the link's figures at scale 1).
enum LineTerm : std::size_t { kTransfer, kTransferPerMember, kHopLatency, kCallLatency, kLineTerms };

/// Which terms a solve may give a non-zero parameter.
using TermSet = std::array<bool, kLineTerms>;

/// Transfer and hop latency: what one group size can tell apart.
constexpr TermSet kOneGroupSize = {true, false, true, false};
/// ... and, over two group sizes or more, the per-member and per-call terms too.
constexpr TermSet kGroupSizes = {true, true, true, true};

/// One sample under a line of its kind, relative to its measured time.
struct LineTerms {
  double bytes = 0;                                  ///< the sample's size
  std::array<double, kLineTerms> coefficients = {};  ///< each term at parameter 1 / measured
};

/// A line as the least squares solve it: x, w, y, z (LineTerm).
struct SolvedLine {
  std::array<double, kLineTerms> parameters = {1, 0, 1, 0};  ///< x, w, y, z
  bool at_bound = false;  ///< an allowed term's parameter was held at 0 (its free solve went below 0)
};

/// The time of `term` relative to its measurement under `line` (1 = exact).
double relative_time(const LineTerms& term, const SolvedLine& line) {
  double sum = 0;
  for (std::size_t index = 0; index < kLineTerms; ++index)
    sum += term.coefficients[index] * line.parameters[index];
  return sum;
}

/// Least squares over `terms` with only the terms in `used`: the normal equations solved by Gaussian
/// elimination. False where they are singular (terms the samples cannot tell apart).
bool solve_subset(std::span<const LineTerms> terms, const TermSet& used, SolvedLine& line) {
  std::vector<std::size_t> columns;
  for (std::size_t index = 0; index < kLineTerms; ++index)
    if (used[index]) columns.push_back(index);
  const std::size_t count = columns.size();
  std::vector<std::vector<double>> system(count, std::vector<double>(count + 1, 0.0));
  for (const LineTerms& term : terms) {
    for (std::size_t row = 0; row < count; ++row) {
      for (std::size_t column = 0; column < count; ++column)
        system[row][column] += term.coefficients[columns[row]] * term.coefficients[columns[column]];
      system[row][count] += term.coefficients[columns[row]];
    }
  }
  std::vector<double> column_norm(count);  // each column's squared norm: the scale of "singular"
  for (std::size_t column = 0; column < count; ++column) column_norm[column] = system[column][column];
  for (std::size_t pivot = 0; pivot < count; ++pivot) {
    std::size_t best = pivot;
    for (std::size_t row = pivot + 1; row < count; ++row)
      if (std::fabs(system[row][pivot]) > std::fabs(system[best][pivot])) best = row;
    std::swap(system[pivot], system[best]);
    if (!(std::fabs(system[pivot][pivot]) > 1e-9 * column_norm[pivot])) return false;
    for (std::size_t row = 0; row < count; ++row) {
      if (row == pivot) continue;
      const double factor = system[row][pivot] / system[pivot][pivot];
      for (std::size_t column = pivot; column <= count; ++column)
        system[row][column] -= factor * system[pivot][column];
    }
  }
  line.parameters = {};
  for (std::size_t row = 0; row < count; ++row)
    line.parameters[columns[row]] = system[row][count] / system[row][row];
  return std::all_of(line.parameters.begin(), line.parameters.end(),
                     [](double parameter) { return std::isfinite(parameter); });
}

/// The line of least squared relative error over `terms` with every parameter >= 0 and x > 0, using only
/// the terms in `allowed` (x always): every subset of them solved free, the best feasible one kept (fewer
/// terms first on a tie). With transfer and hop latency alone: the free solve, or x alone where it puts y
/// below 0 or cannot tell x from y.
SolvedLine solve_line(std::span<const LineTerms> terms, const TermSet& allowed) {
  static const std::vector<unsigned> subsets = [] {  // every subset of the terms, fewest terms first
    std::vector<unsigned> masks;
    for (unsigned mask = 0; mask < (1u << kLineTerms); ++mask) masks.push_back(mask);
    std::stable_sort(masks.begin(), masks.end(),
                     [](unsigned a, unsigned b) { return std::popcount(a) < std::popcount(b); });
    return masks;
  }();
  SolvedLine best;
  double best_loss = INFINITY;
  for (unsigned mask : subsets) {
    TermSet used = {};
    bool permitted = (mask & 1u) != 0;  // the transfer term is in every line
    for (std::size_t index = 0; index < kLineTerms; ++index) {
      used[index] = ((mask >> index) & 1u) != 0;
      permitted = permitted && (!used[index] || allowed[index]);
    }
    SolvedLine line;
    if (!permitted || !solve_subset(terms, used, line)) continue;
    const bool feasible =
        line.parameters[kTransfer] > 0 && std::all_of(line.parameters.begin(), line.parameters.end(),
                                                      [](double parameter) { return parameter >= 0; });
    if (!feasible) continue;
    double loss = 0;
    for (const LineTerms& term : terms) loss += std::pow(relative_time(term, line) - 1, 2);
    if (loss < best_loss * (1 - 1e-12)) {
      best_loss = loss;
      best = line;
      best.at_bound = false;
      for (std::size_t index = 0; index < kLineTerms; ++index)
        best.at_bound = best.at_bound || (allowed[index] && !used[index]);
    }
  }
  return best;
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
      LineTerms term{sample->bytes, {}};
      term.coefficients[kTransfer] = transfer_s * bandwidth / sample->measured_s;
      term.coefficients[kHopLatency] = latency_terms / sample->measured_s;
      terms.push_back(term);
    }
    const SolvedLine solved = solve_line(terms, kOneGroupSize);
    bandwidth = 1 / solved.parameters[kTransfer];
    latency = solved.parameters[kHopLatency];
    bounded = solved.at_bound;
  }
  cluster.node.nvlink_bandwidth_bytes_per_s = bandwidth;
  cluster.node.nvlink_latency_s = latency;
  return bounded;
}

/// modeled / measured - 1 of `term` under the fastest of `lines`.
double envelope_error(const LineTerms& term, std::span<const SolvedLine> lines) {
  double fastest = INFINITY;
  for (const SolvedLine& line : lines) fastest = std::min(fastest, relative_time(term, line));
  return fastest - 1;
}

/// Two lines split at a size: the small line fitted below it, the large one from it on.
struct SplitFit {
  std::vector<SolvedLine> lines;  ///< small, large
  double split_bytes = 0;         ///< the smallest size of the large line
};

/// Of every split leaving at least 3 distinct sizes on each side, the one whose envelope has the least summed
/// squared relative error over `terms` (sorted by size), each line solved with the terms in `allowed`.
SplitFit best_split(std::span<const LineTerms> terms, const TermSet& allowed) {
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
    const std::vector<SolvedLine> lines{solve_line(small, allowed), solve_line(large, allowed)};
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

/// `sample`'s terms (LineTerm) relative to its measured time on `scratch` (a copy of the cluster; its lines
/// of the sample's family are overwritten): the family's time under lines that each switch one term on.
LineTerms line_terms(sim::ClusterSpec& scratch, const CollectiveSample& sample) {
  std::vector<sim::CollectiveLine>& lines = lines_for(scratch, sample);
  const auto time_under = [&](double latency_scale, double call_latency_scale, double members_half) {
    lines = {{"unit", 1, latency_scale, call_latency_scale, members_half}};
    return modeled_collective_s(scratch, sample);
  };
  const double transfer_s = time_under(0, 0, 0);
  LineTerms term{sample.bytes, {}};
  term.coefficients[kTransfer] = transfer_s;
  term.coefficients[kTransferPerMember] = time_under(0, 0, 1) - transfer_s;  // transfer · (n + 1)/n
  term.coefficients[kHopLatency] = time_under(1, 0, 0) - transfer_s;
  term.coefficients[kCallLatency] = time_under(0, 1, 0) - transfer_s;
  for (double& coefficient : term.coefficients) coefficient /= sample.measured_s;
  return term;
}

/// The distinct values of `field` over `sweep`, ascending (group sizes, message sizes).
template <typename Value>
std::vector<Value> distinct_of(const std::vector<const CollectiveSample*>& sweep,
                               Value CollectiveSample::*field) {
  std::vector<Value> values;
  for (const CollectiveSample* sample : sweep) values.push_back(sample->*field);
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

/// Largest and root-mean-square |error| of `terms` under `lines` into `max_error` and `rms_error`.
void envelope_errors(std::span<const LineTerms> terms, std::span<const SolvedLine> lines, double& max_error,
                     double& rms_error) {
  max_error = rms_error = 0;
  for (const LineTerms& term : terms) {
    const double error = envelope_error(term, lines);
    max_error = std::max(max_error, std::fabs(error));
    rms_error += error * error / static_cast<double>(terms.size());
  }
  rms_error = std::sqrt(rms_error);
}

/// Fits the lines of the family of `sweep` (within-node samples of one kind, or all p2p) to it, holds every
/// size out once, and writes the lines into `cluster`. Over two group sizes or more, each line also gets a
/// per-call latency and a members term (kGroupSizes); at one, only what one size can tell (kOneGroupSize).
CollectiveLineFit fit_family_lines(std::vector<const CollectiveSample*> sweep, sim::ClusterSpec& cluster) {
  std::sort(sweep.begin(), sweep.end(),
            [](const CollectiveSample* a, const CollectiveSample* b) { return a->bytes < b->bytes; });
  const CollectiveSample& first = *sweep.front();
  sim::ClusterSpec one_line = cluster;  // the link's own model: this family without lines
  lines_for(one_line, first).clear();
  CollectiveLineFit result;
  result.kind = first.kind;
  result.p2p = first.p2p;
  result.name = collective_name(first);
  result.group_sizes = distinct_of(sweep, &CollectiveSample::group_size);
  const TermSet allowed = result.group_sizes.size() >= 2 ? kGroupSizes : kOneGroupSize;
  sim::ClusterSpec scratch = cluster;  // line_terms switches this family's lines term by term
  std::vector<LineTerms> terms;
  for (const CollectiveSample* sample : sweep) {
    terms.push_back(line_terms(scratch, *sample));
    result.single_line_max_error =
        std::max(result.single_line_max_error,
                 std::fabs(modeled_collective_s(one_line, *sample) / sample->measured_s - 1));
    result.sizes += terms.size() == 1 || terms.back().bytes != terms[terms.size() - 2].bytes;
  }
  const SplitFit fit = best_split(terms, allowed);
  envelope_errors(terms, fit.lines, result.max_error, result.rms_error);
  for (const LineTerms& held : terms) {  // each size held out: lines fitted to the others predict it
    std::vector<LineTerms> others;
    for (const LineTerms& term : terms)
      if (term.bytes != held.bytes) others.push_back(term);
    const double error = std::fabs(envelope_error(held, best_split(others, allowed).lines));
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
    const auto& [x, w, y, z] = fit.lines[index].parameters;
    result.lines.push_back({names[index], 1 / x, y, z, w / x});
    if (!result.p2p) {  // a p2p message has two ends whatever the group
      result.lines.back().fitted_members_min = result.group_sizes.front();
      result.lines.back().fitted_members_max = result.group_sizes.back();
    }
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
    const std::vector<double> sizes = distinct_of(sweep, &CollectiveSample::bytes);
    if (static_cast<int>(sizes.size()) < kMinLineSweepSizes ||
        sizes.back() < kMinLineSweepSpan * sizes.front()) {
      continue;
    }
    fits.push_back(fit_family_lines(sweep, cluster));
    const bool group_terms = fits.back().group_sizes.size() >= 2;
    for (const sim::CollectiveLine& line : fits.back().lines) {
      const std::string key = fmt::format("collective.lines.{}.{}", family, line.name);
      stage.parameters.push_back({key + ".bandwidth_scale", 1, line.bandwidth_scale, "x", "collective"});
      stage.parameters.push_back({key + ".latency_scale", 1, line.latency_scale, "x", "collective"});
      if (!group_terms) continue;
      stage.parameters.push_back(
          {key + ".call_latency_scale", 0, line.call_latency_scale, "x", "collective"});
      stage.parameters.push_back({key + ".members_half", 0, line.members_half, "members", "collective"});
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
