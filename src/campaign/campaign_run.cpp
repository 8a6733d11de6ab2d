// Running a campaign: the index of every point and its status, the child runs (at most --jobs at once), the
// headline figures each finished point reports, and the summary table of an index.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include "campaign/campaign.h"
#include "core/campaign_index.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/owner_lock.h"
#include "core/spawn.h"
#include "core/table.h"

namespace calo::campaign {
namespace {

/// The JSON in a file; null when the file is missing or not JSON.
nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) return nullptr;
  std::stringstream text;
  text << file.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const std::exception&) {
    return nullptr;
  }
}

/// Writes `index` to out_dir/campaign.json through a temporary file and a rename (a stop leaves the old or
/// new).
void write_index(const std::filesystem::path& out_dir, const nlohmann::json& index) {
  core::write_file_atomically(out_dir / "campaign.json", index.dump(2) + "\n", "--out");
}

/// Headline figures of a point from the JSON its child printed: `calo sim --json` (top level) or `calo bench
/// --json` (power and heat under "telemetry"). A figure the run did not measure is null, never 0.
nlohmann::json headline(const nlohmann::json& summary) {
  auto number = [&summary](std::initializer_list<const char*> keys) -> nlohmann::json {
    for (const char* key : keys) {
      for (const nlohmann::json* object :
           {&summary, summary.contains("telemetry") ? &summary["telemetry"] : nullptr}) {
        if (object != nullptr && object->is_object() && object->contains(key) && (*object)[key].is_number())
          return (*object)[key];
      }
    }
    return nullptr;
  };
  nlohmann::json energy_per_token_j = number({"energy_per_token_j"});
  const nlohmann::json tokens_per_s = number({"tokens_per_s"}), iteration_s = number({"iteration_s"}),
                       energy_per_step_j = number({"energy_per_step_j"});
  if (energy_per_token_j.is_null() && !tokens_per_s.is_null() && !iteration_s.is_null() &&
      !energy_per_step_j.is_null() && tokens_per_s.get<double>() * iteration_s.get<double>() > 0) {
    energy_per_token_j =
        energy_per_step_j.get<double>() / (tokens_per_s.get<double>() * iteration_s.get<double>());
  }
  return {{"tokens_per_s", tokens_per_s},
          {"mfu", number({"mfu"})},
          {"energy_per_token_j", energy_per_token_j},
          {"peak_power_w", number({"peak_power_w"})},
          {"max_temp_c", number({"max_die_c", "peak_temp_c"})}};
}

/// Starts `calo_bin args...` with stdout to `stdout_path`, stderr to `stderr_path`; returns the child's pid.
/// The point's process tree ends with the sweep, and holds the campaign's lock (`lock_fd`) until it has.
pid_t spawn(const std::filesystem::path& calo_bin, const std::vector<std::string>& args,
            const std::filesystem::path& stdout_path, const std::filesystem::path& stderr_path, int lock_fd) {
  core::ChildSpec spec;
  spec.dies_with_parent = true;
  spec.keeper_holds_fd = lock_fd;
  spec.executable = calo_bin.string();
  spec.argv = {calo_bin.string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.stdout_path = stdout_path.string();
  spec.stderr_path = stderr_path.string();
  spec.failure_context = "calo sweep: fork failed";
  spec.failure_hint = "; fewer --jobs may help";
  return core::spawn_child(spec);
}

/// The last non-empty line of a text file (a failed point's error message), at most 300 characters.
std::string last_line(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::string line, last;
  while (std::getline(file, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  if (last.size() > 300) last = last.substr(0, 297) + "...";
  return last;
}

/// A duration as "1h02m", "3m05s" or "42s" (rounded to whole seconds).
std::string format_duration(double seconds) {
  const long long whole = static_cast<long long>(seconds + 0.5);
  if (whole >= 3600) return fmt::format("{}h{:02}m", whole / 3600, (whole % 3600) / 60);
  if (whole >= 60) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}s", whole);
}

/// The index before anything runs: every point with its status (skipped with the reason; done when `previous`
/// says so and its run exists, or when --adopt finds its output; pending otherwise, its cut-off run removed).
/// `pending` receives the positions of the points to run.
nlohmann::json initial_index(const Spec& spec, const std::vector<Point>& points, const RunOptions& options,
                             const nlohmann::json& previous, std::vector<std::size_t>& pending) {
  nlohmann::json index = {{"campaign", spec.name},
                          {"spec", spec.source},
                          {"backend", options.backend},
                          {"axes", axis_keys(spec)},
                          {"points", nlohmann::json::array()}};
  for (const Point& point : points) {
    nlohmann::json flags = nlohmann::json::object();
    for (const auto& [key, value] : point.flags) flags[key] = value;
    nlohmann::json entry = {
        {"name", point.name}, {"flags", flags}, {"axis_values", point.axis_values}, {"run_dir", point.name}};
    const std::filesystem::path run_dir = options.out_dir / point.name;
    bool done = false;
    if (previous.is_object() && previous.contains("points")) {
      for (const auto& old : previous["points"]) {
        if (old.value("name", "") == point.name && old.value("status", "") == "done" &&
            std::filesystem::exists(run_dir)) {
          entry = old;
          done = true;
        }
      }
    }
    const nlohmann::json made = options.adopt && !done && std::filesystem::exists(run_dir)
                                    ? read_json_file(options.out_dir / (point.name + ".json"))
                                    : nlohmann::json();
    if (!point.skip_reason.empty()) {
      entry["status"] = "skipped";
      entry["reason"] = point.skip_reason;
    } else if (made.is_object()) {
      entry["status"] = "done";  // run by the printed command elsewhere (--adopt)
      entry["figures"] = headline(made);
      entry["adopted"] = true;
    } else if (!done) {
      entry["status"] = "pending";
      if (std::filesystem::exists(run_dir)) {  // a run cut off mid-way: no process of it is left (the lock)
        std::filesystem::remove_all(run_dir);
        if (options.notice)
          options.notice(
              fmt::format("{}: removed {}, the partial run of a sweep that stopped; running it again",
                          point.name, run_dir.string()));
      }
      pending.push_back(index["points"].size());
    }
    index["points"].push_back(entry);
  }
  return index;
}

/// Throws InputError for an unknown backend, a --jobs below 1, or power caps on a measuring backend.
void check_run_options(const Spec& spec, const RunOptions& options) {
  if (options.backend != "sim" && options.backend != "cpu" && options.backend != "cuda")
    throw InputError(fmt::format("--backend '{}': use sim, cpu or cuda", options.backend));
  if (options.jobs < 1) throw InputError("--jobs: give 1 or more");
  const auto uses = [&spec](const std::string& key) {
    const auto named = [&key](const auto& entry) { return entry.first == key; };
    return std::any_of(spec.fixed.begin(), spec.fixed.end(), named) ||
           std::any_of(spec.axes.begin(), spec.axes.end(), named);
  };
  if (options.backend != "sim" && uses("power-cap"))
    throw InputError(fmt::format(
        "campaign {}: power-cap is simulated only (calo bench measures the card as it is and never changes a "
        "GPU's settings); run it with --backend sim",
        spec.name));
  if (options.backend != "sim" && uses("memory-limit"))
    throw InputError(
        fmt::format("campaign {}: memory-limit is simulated only (calo bench runs what fits and measures its "
                    "peak); drop it or run with --backend sim",
                    spec.name));
}

/// The index a previous execution left in out_dir (null when there is none, or a damaged one under --adopt);
/// InputError when there is one and --resume is not given, or it is damaged and --adopt is not given.
nlohmann::json previous_index(const RunOptions& options) {
  const std::filesystem::path index_path = options.out_dir / "campaign.json";
  nlohmann::json previous = nullptr;
  if (!std::filesystem::exists(index_path)) return previous;
  if (!options.resume)
    throw InputError(
        fmt::format("--out {}: holds a campaign already; add --resume to finish it or give a new --out",
                    options.out_dir.string()));
  previous = read_json_file(index_path);
  const bool damaged = !core::is_campaign_index(previous);
  if (damaged && options.adopt) previous = nullptr;  // the results on disk say what is done
  if (damaged && !options.adopt) {
    throw InputError(
        fmt::format("--resume: {} is damaged (not a campaign index), so which points are done is unknown; "
                    "add --adopt to "
                    "index the points whose results are on disk and run the rest",
                    index_path.string()));
  }
  return previous;
}

/// Locks out_dir/campaign.lock for this sweep and its points' process trees: refused (InputError, naming the
/// PID) while another sweep runs the campaign; waited for while the points of a sweep that stopped still end.
core::OwnerLock lock_campaign(const RunOptions& options) {
  const auto waiting = [&options](const core::ProcessIdentity& gone) {
    if (options.notice)
      options.notice(fmt::format(
          "calo sweep: waiting for the points of the stopped sweep (process {}) to end", gone.pid));
  };
  return core::OwnerLock(options.out_dir / "campaign.lock",
                         fmt::format("--out {}: the campaign", options.out_dir.string()),
                         3 * core::kTreeGraceMs, waiting);
}

/// Refuses (InputError) before anything is written when a point's output (`<name>.json`, `<name>.log`) holds
/// anything but a regular file: a symlink planted there is refused, not followed (core::open_log_file checks
/// again as each point starts).
void require_point_outputs(const RunOptions& options, const std::vector<Point>& points) {
  for (const Point& point : points) {
    for (const char* suffix : {".json", ".log"})
      core::require_file_target(options.out_dir / (point.name + suffix), "--out");
  }
}

/// The plan line: points in all, to run, skipped, already done, and how many run at once.
std::string plan_line(const Spec& spec, const std::vector<Point>& points, std::size_t pending_count,
                      int jobs) {
  const auto skipped =
      std::count_if(points.begin(), points.end(), [](const Point& p) { return !p.skip_reason.empty(); });
  return fmt::format("calo sweep {}: {} point(s), {} to run, {} skipped, {} already done ({} at once)",
                     spec.name, points.size(), pending_count, skipped,
                     points.size() - pending_count - skipped, jobs);
}

/// Runs the pending points of an index as children, at most options.jobs at once, updating the index.
class PointRunner {
 public:
  PointRunner(const Spec& spec, const std::vector<Point>& points, const RunOptions& options,
              const std::vector<std::size_t>& pending, nlohmann::json& index, int lock_fd)
      : spec_(spec),
        points_(points),
        options_(options),
        pending_(pending),
        index_(index),
        lock_fd_(lock_fd) {}

  /// Launches and reaps children until every pending point finished (or no child is left to wait for).
  void run() {
    while (finished_ < pending_.size()) {
      while (running_.size() < static_cast<std::size_t>(options_.jobs) && next_ < pending_.size())
        launch(pending_[next_++]);
      int wait_status = 0;
      const pid_t pid = waitpid(-1, &wait_status, 0);
      if (pid < 0) break;
      auto found = running_.find(pid);
      if (found == running_.end()) continue;
      const std::size_t slot = found->second;
      nlohmann::json& entry = index_["points"][slot];
      entry["wall_s"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - launched_[slot]).count();
      running_.erase(found);
      ++finished_;
      record_result(entry, wait_status);
      write_index(options_.out_dir, index_);
      if (options_.notice) options_.notice(progress_line(entry));
    }
  }

 private:
  /// Starts the child of the point at `slot` of the index and marks it running.
  void launch(std::size_t slot) {
    nlohmann::json& entry = index_["points"][slot];
    const std::string name = entry["name"];
    const Point& point = points_[slot];
    const std::filesystem::path run_dir = options_.out_dir / name;
    const pid_t pid =
        spawn(options_.calo_bin, point_arguments(spec_, point, options_.backend, run_dir),
              options_.out_dir / (name + ".json"), options_.out_dir / (name + ".log"), lock_fd_);
    entry["status"] = "running";
    running_[pid] = slot;
    launched_[slot] = std::chrono::steady_clock::now();
  }

  /// Sets a finished point's status: done with its figures, or failed with the exit and its last error line.
  void record_result(nlohmann::json& entry, int wait_status) const {
    const std::string name = entry["name"];
    const nlohmann::json summary = read_json_file(options_.out_dir / (name + ".json"));
    const bool ok = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 && summary.is_object();
    if (ok) {
      entry["status"] = "done";
      entry["figures"] = headline(summary);
    } else {
      entry["status"] = "failed";
      const std::string exit_text = WIFEXITED(wait_status)
                                        ? fmt::format("exit status {}", WEXITSTATUS(wait_status))
                                        : fmt::format("killed by signal {}", WTERMSIG(wait_status));
      const std::string error = last_line(options_.out_dir / (name + ".log"));
      entry["reason"] = fmt::format("{}{}{}; see {}.log", exit_text, error.empty() ? "" : ": ", error, name);
    }
  }

  /// "[finished/pending] name status (elapsed, ETA)".
  std::string progress_line(const nlohmann::json& entry) const {
    const std::string name = entry["name"];
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    const double eta_s = elapsed_s / finished_ * (pending_.size() - finished_);
    return fmt::format("[{}/{}] {} {} ({} elapsed, ETA {})", finished_, pending_.size(), name,
                       entry["status"].get<std::string>(), format_duration(elapsed_s),
                       format_duration(eta_s));
  }

  const Spec& spec_;
  const std::vector<Point>& points_;
  const RunOptions& options_;
  const std::vector<std::size_t>& pending_;  // index positions of the points to run, in launch order
  nlohmann::json& index_;
  const int lock_fd_;  // the campaign's lock, held by every point's keeper
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::map<pid_t, std::size_t> running_;  // child pid -> index position
  std::map<std::size_t, std::chrono::steady_clock::time_point> launched_;
  std::size_t next_ = 0;      // next position in pending_ to launch
  std::size_t finished_ = 0;  // children reaped
};

}  // namespace

nlohmann::json run_campaign(const Spec& spec, const RunOptions& options) {
  check_run_options(spec, options);
  std::vector<Point> points = expand_grid(spec);
  validate_points(spec, points);
  require_runnable(spec, points);
  previous_index(options);  // refused before anything is written
  require_point_outputs(options, points);
  std::filesystem::create_directories(options.out_dir);
  const core::OwnerLock lock = lock_campaign(options);
  const nlohmann::json previous = previous_index(options);  // as the last sweep left it

  std::vector<std::size_t> pending;
  nlohmann::json index = initial_index(spec, points, options, previous, pending);
  write_index(options.out_dir, index);
  if (options.notice) options.notice(plan_line(spec, points, pending.size(), options.jobs));
  PointRunner(spec, points, options, pending, index, lock.descriptor()).run();
  return index;
}

std::string summary_table(const nlohmann::json& index) {
  core::TextTable table(
      {"point", "status", "tokens/s", "MFU %", "energy/token J", "peak power W", "max temp C", "note"});
  auto cell = [](const nlohmann::json& value, double scale, const char* format) {
    return value.is_number() ? fmt::format(fmt::runtime(format), value.get<double>() * scale)
                             : std::string("-");
  };
  for (const auto& entry : index["points"]) {
    const std::string status = entry.value("status", "");
    if (status == "done") {
      const auto& figures = entry["figures"];
      table.add_row({entry["name"].get<std::string>(), status, cell(figures["tokens_per_s"], 1, "{:.0f}"),
                     cell(figures["mfu"], 100, "{:.1f}"), cell(figures["energy_per_token_j"], 1, "{:.3f}"),
                     cell(figures["peak_power_w"], 1, "{:.0f}"), cell(figures["max_temp_c"], 1, "{:.1f}"),
                     ""});
    } else {
      table.add_row(
          {entry["name"].get<std::string>(), status, "", "", "", "", "", entry.value("reason", "")});
    }
  }
  return table.render();
}

}  // namespace calo::campaign
