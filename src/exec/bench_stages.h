// Stages of `calo bench` (exec::run_bench_rank, bench.cpp) with logic of their own, declared here for their
// tests: checking every rank's op counts and --check results, and putting the job's steps on rank 0's clock.
// Input: one JSON object per rank as the ranks all-gather it ("rank", "host", "wall_at_monotonic_zero_ns",
// "steps": [[begin_ns, end_ns], ...] in the rank's CLOCK_MONOTONIC, "executed", "expected_per_step",
// "check").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace calo::exec {

/// Op counts (each rank executed exactly its graph's ops, total_steps times) and --check results of all
/// ranks.
struct Verification {
  std::vector<std::string> count_problems;  ///< one line per (rank, op kind) whose count is off
  std::int64_t wrong = 0;                   ///< wrong values over all ranks (#wrong)
  std::int64_t values_checked = 0;          ///< values compared over all ranks
  std::int64_t ops_checked = 0;             ///< ops verified over all ranks
  std::vector<std::string> failures;        ///< the first 10 failure texts, "rank R: ..."
};

/// Checks every rank's executed op counts against `graph` (`total_steps` steps) and sums their --check
/// reports.
Verification verify_ranks(const std::vector<nlohmann::json>& ranks, const graph::Graph& graph,
                          int total_steps);

/// Moves a rank's raw CLOCK_MONOTONIC times onto rank 0's clock: unchanged on rank 0's host, on another host
/// shifted by the difference of the hosts' wall - monotonic relations.
class LeaderClock {
 public:
  /// Takes rank 0's host and clock relation from ranks[0].
  explicit LeaderClock(const std::vector<nlohmann::json>& ranks)
      : leader_host_(ranks[0]["host"].get<std::string>()),
        leader_offset_ns_(ranks[0]["wall_at_monotonic_zero_ns"].get<std::int64_t>()) {}
  /// `t_ns` of the rank described by `data`, on rank 0's clock.
  std::int64_t operator()(const nlohmann::json& data, std::int64_t t_ns) const {
    return data["host"].get<std::string>() == leader_host_
               ? t_ns
               : t_ns + data["wall_at_monotonic_zero_ns"].get<std::int64_t>() - leader_offset_ns_;
  }
  /// Rank 0's host name.
  const std::string& leader_host() const { return leader_host_; }

 private:
  std::string leader_host_;
  std::int64_t leader_offset_ns_;
};

/// The job's steps on rank 0's clock, and their durations split into warm-up and measured.
struct JobSteps {
  std::vector<std::int64_t> begin_ns;  ///< per step: earliest begin over ranks
  std::vector<std::int64_t> end_ns;    ///< per step: latest end over ranks
  std::vector<double> measured_s;      ///< durations of the measured steps
  std::vector<double> warmup_s;        ///< durations of the first `warmup` steps
};

/// Job step = earliest begin to latest end over ranks (rank 0's clock); the first `warmup` are warm-up.
JobSteps job_steps(const std::vector<nlohmann::json>& ranks, const LeaderClock& to_leader_clock, int warmup,
                   int total_steps);

}  // namespace calo::exec
