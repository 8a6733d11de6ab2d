// Parameter sweeps ("campaigns"): a YAML spec names a model, a cluster, fixed layout flags and axes of
// values; the grid is expanded, points that cannot run are dropped with the reason, and each remaining point
// runs as a normal run under DIR/<point-name>/, indexed in DIR/campaign.json (rewritten atomically after
// every point).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/progress.h"

namespace calo::campaign {

/// One sweep as read from its YAML file.
struct Spec {
  std::string name;     ///< campaign name (file stem unless given)
  std::string model;    ///< model preset or YAML path
  std::string cluster;  ///< cluster preset or YAML path
  int gpus = 0;         ///< world size (0 = tp*pp*dp of each point)
  int steps = 1;        ///< iterations per point
  int layers = 0;       ///< the model sliced to this many layers of its shapes (0 = all of them; --layers)
  std::vector<std::pair<std::string, std::string>> fixed;  ///< layout flags held fixed (key, value)
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;  ///< swept keys, in spec order
  nlohmann::json source;  ///< the spec as parsed (stored in the index)
};

/// One grid point: its name and every flag (fixed and swept) as key/value.
struct Point {
  std::string name;                                              ///< e.g. "tp4-pp4" (swept keys only)
  std::vector<std::pair<std::string, std::string>> flags;        ///< fixed flags then axis values, plus gpus
  std::string skip_reason;                                       ///< empty when the point can run
  std::vector<std::pair<std::string, std::string>> axis_values;  ///< (axis key, value label), axis order
};

/// The swept keys of `spec` in axis order (the index's "axes").
std::vector<std::string> axis_keys(const Spec& spec);

/// Most points a spec's grid may have (each is a run).
inline constexpr int kMaxGridPoints = 10000;

/// Keys an axis or a fixed flag may name (layout flags of `calo sim`, and gpus).
const std::vector<std::string>& known_keys();

/// Parses a spec object; InputError naming the key and the fix on a bad spec. `origin` names the source.
Spec parse_spec(const nlohmann::json& object, const std::string& origin);

/// Reads and parses a spec file (YAML).
Spec load_spec(const std::filesystem::path& path);

/// The full grid (cartesian product of the axes, first axis slowest), no validation.
std::vector<Point> expand_grid(const Spec& spec);

/// Fills `skip_reason` of each point that parallel::resolve_layout rejects or that does not fit the cluster's
/// GPU memory (parallel::memory_per_gpu against plan::usable_memory_bytes).
void validate_points(const Spec& spec, std::vector<Point>& points);

/// InputError (exit 2) listing the skip reasons when no point of `points` can run.
void require_runnable(const Spec& spec, const std::vector<Point>& points);

/// The `calo` command-line arguments that run `point` (after the program name), for backend "sim", "cpu" or
/// "cuda", writing the run to `run_dir`.
std::vector<std::string> point_arguments(const Spec& spec, const Point& point, const std::string& backend,
                                         const std::filesystem::path& run_dir);

/// Options of one campaign execution.
struct RunOptions {
  std::string backend = "sim";     ///< "sim", "cpu" or "cuda" (the last two run calo bench)
  std::filesystem::path out_dir;   ///< campaign directory
  std::filesystem::path calo_bin;  ///< the calo executable that runs each point
  bool resume = false;             ///< skip points already done in out_dir/campaign.json
  int jobs = 1;                    ///< points run at once
  bool adopt =
      false;  ///< points whose DIR/<point>.json and run dir exist (made by point_commands) count as done
  /// Progress lines: the plan ("calo sweep NAME: N point(s), ...") once, then "[finished/pending] name
  /// status (elapsed, ETA)" after each point; unset = silent.
  core::NoticeFn notice;
};

/// One shell command per runnable point (the child `calo ...` run_campaign would start, stdout to
/// DIR/<point>.json, stderr to DIR/<point>.log) for running the points elsewhere, e.g. one per Slurm job;
/// index their results with run_campaign and RunOptions::adopt. InputError as run_campaign when no point can
/// run.
std::vector<std::string> point_commands(const Spec& spec, const std::string& backend,
                                        const std::filesystem::path& out_dir, const std::string& calo);

/// Runs every valid point (children of `calo_bin`), writes the index after each, reports progress with ETA to
/// options.notice. Returns the final index. InputError if out_dir holds a campaign and `resume` is false.
nlohmann::json run_campaign(const Spec& spec, const RunOptions& options);

/// The summary table of an index: one row per point (status, tokens/s, MFU, energy/token, peak power, max
/// temp).
std::string summary_table(const nlohmann::json& index);

}  // namespace calo::campaign
