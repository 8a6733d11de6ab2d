// How this process was launched: alone, as one of N local ranks spawned by `calo bench --nproc N`, or under
// mpirun/srun (rank from OMPI_COMM_WORLD_RANK / PMI_RANK / SLURM_PROCID). Spawning of local ranks lives here.
#pragma once

#include <string>
#include <vector>

namespace calo::exec {

/// Environment variables set on ranks spawned by `--nproc` (read by detect_launch()).
inline constexpr const char* kEnvRank = "CALO_RANK";                   ///< global rank
inline constexpr const char* kEnvWorldSize = "CALO_WORLD_SIZE";        ///< ranks in the job
inline constexpr const char* kEnvBootstrap = "CALO_BOOTSTRAP_SOCKET";  ///< Unix socket path rank 0 serves

/// Where this process sits in the job.
struct LaunchInfo {
  int rank = 0;                ///< global rank
  int world_size = 1;          ///< ranks in the job
  int local_rank = 0;          ///< rank among processes of this host
  int local_world_size = 1;    ///< processes on this host
  std::string launcher;        ///< "single" | "nproc" (spawned by calo) | "mpi" (mpirun) | "slurm" (srun)
  bool uses_mpi = false;       ///< MPI is initialized in this process (exec/mpi_env.h)
  std::string bootstrap_path;  ///< Unix socket path for the socket bootstrap (launcher "nproc")
};

/// Reads the launch environment (CALO_*, OMPI_COMM_WORLD_*, PMI_*, SLURM_*). Does not initialize MPI.
LaunchInfo detect_launch();

/// True when the environment says this process is one rank of a multi-process job.
bool is_child_rank();

/// Result of running a job's ranks from this (parent) process.
struct SpawnResult {
  int exit_code = 0;                 ///< the worst exit code of the ranks (2 beats 1 beats 0)
  std::vector<int> rank_exit_codes;  ///< per rank (128+N if killed by signal N)
};

/// Runs `nproc` copies of this executable (/proc/self/exe) with `args` (argv[1..]), each with CALO_RANK,
/// CALO_WORLD_SIZE and CALO_BOOTSTRAP_SOCKET set; waits for all and kills the rest when one fails.
SpawnResult spawn_local_ranks(int nproc, const std::vector<std::string>& args);

/// Runs `mpirun -np nproc --oversubscribe` (allowing root) on this executable with `args`; waits for it.
/// Throws RuntimeFailure when mpirun cannot be found.
SpawnResult spawn_mpirun(int nproc, const std::vector<std::string>& args);

}  // namespace calo::exec
