// MPI initialization, finalization and the process-wide MPI lock.
#include "exec/mpi_env.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

#ifdef CALO_EXEC_HAVE_MPI
#include <mpi.h>
#endif

namespace calo::exec {
namespace {
bool g_initialized_here = false;
}  // namespace

bool mpi_built() {
#ifdef CALO_EXEC_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

bool mpi_active() {
#ifdef CALO_EXEC_HAVE_MPI
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
#else
  return false;
#endif
}

void mpi_init_if_launched(LaunchInfo& launch) {
  if (launch.launcher != "mpi" && launch.launcher != "slurm") return;
#ifdef CALO_EXEC_HAVE_MPI
  if (!mpi_active()) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      throw RuntimeFailure("MPI_Init_thread failed; check the mpirun/srun environment");
    }
    g_initialized_here = true;
    std::atexit(mpi_finalize);
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != launch.rank || size != launch.world_size) {
    throw RuntimeFailure(fmt::format(
        "MPI says rank {} of {}, the {} environment says rank {} of {}; under srun use --mpi=pmix (or "
        "mpirun), or launch with calo bench --nproc N",
        rank, size, launch.launcher, launch.rank, launch.world_size));
  }
  launch.uses_mpi = true;
#else
  if (launch.world_size > 1 && launch.launcher == "mpi") {
    throw RuntimeFailure(
        "this calo was built without MPI but runs under mpirun; rebuild with libopenmpi-dev, or use "
        "calo bench --nproc N (socket bootstrap)");
  }
#endif
}

void mpi_finalize() {
#ifdef CALO_EXEC_HAVE_MPI
  if (g_initialized_here && mpi_active()) {
    std::lock_guard lock(mpi_mutex());
    MPI_Finalize();
  }
#endif
}

}  // namespace calo::exec
