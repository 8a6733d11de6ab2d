// MPI lifetime for this process (only when built with MPI, CALO_EXEC_HAVE_MPI): initialized once when the
// launch says the process runs under mpirun/srun, finalized at exit. All MPI calls are serialized through
// mpi_mutex() so stream threads of the CPU backend and the bootstrap never call MPI concurrently.
#pragma once

#include <mutex>

#include "exec/launch.h"

namespace calo::exec {

/// True when this binary was built with MPI.
bool mpi_built();

/// Initializes MPI if `launch.launcher` is "mpi" or "slurm" and MPI is built in; fills launch.uses_mpi and
/// checks the MPI world matches the launch (RuntimeFailure otherwise). Idempotent.
void mpi_init_if_launched(LaunchInfo& launch);

/// True after a successful MPI initialization (and before finalization).
bool mpi_active();

/// Finalizes MPI if it was initialized here (registered with atexit by mpi_init_if_launched).
void mpi_finalize();

/// The lock every MPI call of this process holds.
std::mutex& mpi_mutex();

}  // namespace calo::exec
