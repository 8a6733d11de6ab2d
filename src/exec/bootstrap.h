// Backend-neutral out-of-band exchange between the ranks of one job: small blobs (ncclUniqueId, host names)
// and host barriers. Over MPI when the job runs under mpirun/srun with MPI, else over a Unix socket that
// rank 0 serves (local ranks spawned by `calo bench --nproc N`).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exec/launch.h"
#include "graph/graph.h"

namespace calo::exec {

/// Exchanges host bytes between all ranks of the job. Every call is collective over all ranks.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  /// This process's global rank.
  virtual int rank() const = 0;
  /// Ranks in the job.
  virtual int world_size() const = 0;
  /// Every rank contributes `mine` (sizes may differ); returns all contributions indexed by rank.
  virtual std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) = 0;
  /// Returns when every rank has entered the barrier.
  virtual void barrier() = 0;
  /// "mpi" or "socket".
  virtual std::string kind() const = 0;
};

/// Shares one blob per group from the group's first (lowest) rank to every member, e.g. an ncclUniqueId per
/// communicator. Collective over all ranks. `make_blob(group_id)` runs only on a group's first rank. Returns
/// one entry per group id of `groups`: the blob for groups this rank belongs to, empty for the others.
std::vector<std::vector<std::byte>> share_group_blobs(
    Bootstrap& bootstrap, const std::vector<graph::CommGroup>& groups,
    const std::function<std::vector<std::byte>(int group_id)>& make_blob);

/// Bootstrap for `launch`: MPI when launch.uses_mpi, a Unix socket at launch.bootstrap_path otherwise, and a
/// trivial one for a single rank. Throws RuntimeFailure when ranks cannot connect within `timeout_s`.
std::unique_ptr<Bootstrap> make_bootstrap(const LaunchInfo& launch, double timeout_s = 60.0);

}  // namespace calo::exec
