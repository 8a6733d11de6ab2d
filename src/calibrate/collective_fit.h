// The collective model fitted to measured NCCL kernels (stage "collective"): NVLink bandwidth and per-hop
// latency by least squares of relative error, and, for a kind measured over a size sweep, its two lines (the
// small-message and the large-message regime of NCCL's protocols) with every size's error also held out; a
// sweep over two group sizes or more also fits how each line's time moves with the members.
// docs/SIMULATOR.md "Collective lines".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "calibrate/fit_stage.h"
#include "graph/graph.h"
#include "sim/cluster.h"

namespace calo::calibrate {

/// One measured collective shape: its time on the member that arrived last (the k-th such kernel's minimum
/// over ranks, i.e. the transfer without waiting for peers), median over the job's instances.
struct CollectiveSample {
  graph::CollectiveKind kind = graph::CollectiveKind::kAllReduce;  ///< collective
  int group_size = 0;                                              ///< members
  /// Global ranks of the group, sorted ("Process Group Ranks"; 0 .. size-1 where the trace does not record
  /// them).
  std::vector<std::int32_t> ranks;
  int nodes =
      1;  ///< nodes the group spans (rank r on node r / base's GPUs per node, as torchrun places them)
  double bytes = 0;        ///< message size as graph::Op::bytes defines it (nccl-tests "size")
  int instances = 0;       ///< kernels of this shape per rank
  double measured_s = 0;   ///< median over instances of the minimum over ranks (p2p: of the send kernel)
  double modeled_s = NAN;  ///< sim::collective_time_s with the fitted cluster
  bool fitted = false;     ///< within one node (the NVLink link class the fit determines)
  /// A point-to-point message (NCCL send/recv of a 2-rank group: ranks = sender and receiver); `kind` unused.
  bool p2p = false;
};

/// "p2p" for a point-to-point sample, else its collective kind ("all_reduce", ...).
std::string collective_name(const CollectiveSample& sample);

/// The simulator's time of `sample` on `cluster`: its collective with its ranks placed as sim::place_group
/// does, or sim::p2p_time_s between its two ranks.
double modeled_collective_s(const sim::ClusterSpec& cluster, const CollectiveSample& sample);

/// A kind's sweep needs this many distinct sizes inside one node before it gets lines of its own.
inline constexpr int kMinLineSweepSizes = 8;
/// ... spanning at least this ratio of largest to smallest size.
inline constexpr double kMinLineSweepSpan = 256;

/// The lines fitted to one collective kind's size sweep, and how well they hold.
struct CollectiveLineFit {
  graph::CollectiveKind kind = graph::CollectiveKind::kAllReduce;  ///< collective (unless p2p)
  bool p2p = false;                                                ///< point-to-point messages' lines
  std::string name;                                                ///< "p2p" or the kind's name
  std::vector<sim::CollectiveLine> lines;                          ///< "small", then "large"
  /// The group sizes swept, ascending: two or more fit each line's per-call latency and members term too.
  std::vector<int> group_sizes;
  int sizes = 0;                     ///< distinct sizes of the sweep (all fitted)
  double smallest_bytes = 0;         ///< the sweep's smallest size
  double largest_bytes = 0;          ///< ... and largest
  double split_bytes = 0;            ///< the smallest size fitted to the large line
  double max_error = 0;              ///< largest |modeled / measured - 1| over the sweep, lines fitted to all
  double max_held_out_error = 0;     ///< largest |error| of a size predicted by lines fitted without it
  double held_out_worst_bytes = 0;   ///< the size of that largest held-out error
  double rms_error = 0;              ///< root mean square of the errors over the sweep, lines fitted to all
  double rms_held_out_error = 0;     ///< root mean square of the held-out errors
  double single_line_max_error = 0;  ///< largest |error| over the sweep at the link's one line (no lines)
};

/// Fits NVLink bandwidth and latency to the within-node samples of `samples` (their `fitted`), then lines
/// for every kind whose within-node sizes form a sweep (kMinLineSweepSizes, kMinLineSweepSpan), into
/// `cluster`; sets every sample's modeled_s. Returns the stage (parameters, residuals labelled `label`) and
/// fills `line_fits`.
StageFit fit_collective_stage(std::vector<CollectiveSample>& samples, sim::ClusterSpec& cluster,
                              const std::string& label, std::vector<CollectiveLineFit>& line_fits);

}  // namespace calo::calibrate
