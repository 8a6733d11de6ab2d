// Launch detection (CALO_*, Open MPI, PMI, Slurm environment) and spawning of local ranks.
#include "exec/launch.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/spawn.h"

extern char** environ;

namespace calo::exec {
namespace {

/// Integer value of environment variable `name`, or `fallback` when unset or not a number.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return (end != nullptr && *end == '\0') ? static_cast<int>(value) : fallback;
}

bool env_set(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0';
}

/// Environment of this process minus variables starting with any of `drop_prefixes`, plus `extra`.
std::vector<std::string> child_environment(const std::vector<std::string>& drop_prefixes,
                                           const std::vector<std::string>& extra) {
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string variable = *entry;
    bool drop = false;
    for (const auto& prefix : drop_prefixes) drop = drop || variable.rfind(prefix, 0) == 0;
    if (!drop) result.push_back(variable);
  }
  result.insert(result.end(), extra.begin(), extra.end());
  return result;
}

/// Exit code of a waited child (128+N for signal N).
int decode_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Ranks the worst of two exit codes: usage (2) beats failure (anything else non-zero) beats success.
int worse(int current, int candidate) {
  if (current == 2 || candidate == 2) return 2;
  if (current != 0) return current;
  return candidate;
}

/// Forks and execs `path` with `arguments` and `environment`; the child dies with its parent.
pid_t start_child(const std::string& path, const std::vector<std::string>& arguments,
                  const std::vector<std::string>& environment) {
  core::ChildSpec spec;
  spec.executable = path;
  spec.argv = arguments;
  spec.environment = environment;
  spec.dies_with_parent = true;
  spec.failure_context = "cannot fork a rank";
  return core::spawn_child(spec);
}

/// Waits for all `children`; when one fails, gives the others `grace` to finish, then kills them.
SpawnResult wait_children(const std::vector<pid_t>& children) {
  SpawnResult result;
  result.rank_exit_codes.assign(children.size(), -1);
  size_t remaining = children.size();
  bool failed = false;
  auto failed_at = std::chrono::steady_clock::now();
  while (remaining > 0) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, failed ? WNOHANG : 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (done == 0) {
      if (std::chrono::steady_clock::now() - failed_at > std::chrono::seconds(5)) {
        for (size_t index = 0; index < children.size(); ++index) {
          if (result.rank_exit_codes[index] < 0) kill(children[index], SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t index = 0; index < children.size(); ++index) {
      if (children[index] != done) continue;
      result.rank_exit_codes[index] = decode_status(status);
      --remaining;
      if (result.rank_exit_codes[index] != 0 && !failed) {
        failed = true;
        failed_at = std::chrono::steady_clock::now();
      }
    }
  }
  for (int code : result.rank_exit_codes) result.exit_code = worse(result.exit_code, code);
  return result;
}

std::string self_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw RuntimeFailure("cannot find this executable (/proc/self/exe): " + error.message());
  return path.string();
}

/// The environment variables through which an MPI launcher tells a process where it stands.
struct MpiEnv {
  const char* rank;              ///< global rank
  const char* world_size;        ///< ranks in all
  const char* local_rank;        ///< rank on this node
  const char* local_world_size;  ///< ranks on this node
};

/// Open MPI's, then MPICH / Intel MPI's (PMI).
constexpr std::array<MpiEnv, 2> kMpiEnvs{{
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
}};

/// The first MPI launcher whose rank variable is set, or nullptr.
const MpiEnv* mpi_env() {
  for (const MpiEnv& mpi : kMpiEnvs) {
    if (env_set(mpi.rank)) return &mpi;
  }
  return nullptr;
}

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info;
  if (env_set(kEnvRank)) {
    info.launcher = "nproc";
    info.rank = env_int(kEnvRank, 0);
    info.world_size = env_int(kEnvWorldSize, 1);
    info.local_rank = info.rank;
    info.local_world_size = info.world_size;
    const char* socket = std::getenv(kEnvBootstrap);
    info.bootstrap_path = socket != nullptr ? socket : "";
  } else if (const MpiEnv* mpi = mpi_env(); mpi != nullptr) {
    info.launcher = "mpi";
    info.rank = env_int(mpi->rank, 0);
    info.world_size = env_int(mpi->world_size, 1);
    info.local_rank = env_int(mpi->local_rank, info.rank);
    info.local_world_size = env_int(mpi->local_world_size, info.world_size);
  } else if (env_set("SLURM_PROCID") && env_int("SLURM_NTASKS", 1) > 1) {
    info.launcher = "slurm";
    info.rank = env_int("SLURM_PROCID", 0);
    info.world_size = env_int("SLURM_NTASKS", 1);
    info.local_rank = env_int("SLURM_LOCALID", 0);
    const int nodes = std::max(1, env_int("SLURM_NNODES", 1));
    info.local_world_size = std::max(1, info.world_size / nodes);
  } else {
    info.launcher = "single";
  }
  return info;
}

bool is_child_rank() {
  return detect_launch().launcher != "single";
}

SpawnResult spawn_local_ranks(int nproc, const std::vector<std::string>& args) {
  const std::string self = self_executable();
  std::random_device random;
  const std::string socket_path = fmt::format("/tmp/calo-bootstrap-{}-{:08x}.sock", getpid(), random());
  std::vector<std::string> arguments{self};
  arguments.insert(arguments.end(), args.begin(), args.end());
  std::vector<pid_t> children;
  for (int rank = 0; rank < nproc; ++rank) {
    const auto environment = child_environment(
        {std::string(kEnvRank) + "=", std::string(kEnvWorldSize) + "=", std::string(kEnvBootstrap) + "="},
        {fmt::format("{}={}", kEnvRank, rank), fmt::format("{}={}", kEnvWorldSize, nproc),
         fmt::format("{}={}", kEnvBootstrap, socket_path)});
    children.push_back(start_child(self, arguments, environment));
  }
  SpawnResult result = wait_children(children);
  std::error_code ignored;
  std::filesystem::remove(socket_path, ignored);
  return result;
}

SpawnResult spawn_mpirun(int nproc, const std::vector<std::string>& args) {
  std::string mpirun;
  const char* path_env = std::getenv("PATH");
  const std::string path_list = path_env != nullptr ? path_env : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= path_list.size()) {
    const size_t colon = path_list.find(':', start);
    const std::string directory = path_list.substr(start, colon == std::string::npos ? colon : colon - start);
    const std::string candidate = (directory.empty() ? "." : directory) + "/mpirun";
    if (access(candidate.c_str(), X_OK) == 0) {
      mpirun = candidate;
      break;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (mpirun.empty()) {
    throw RuntimeFailure(
        "--nproc with the cpu backend runs mpirun, which is not on PATH; install openmpi-bin or launch "
        "with mpirun yourself");
  }
  std::vector<std::string> arguments{mpirun,
                                     "-np",
                                     std::to_string(nproc),
                                     "--oversubscribe",
                                     "--bind-to",
                                     "none",
                                     "--mca",
                                     "btl_vader_single_copy_mechanism",
                                     "none",
                                     self_executable()};
  arguments.insert(arguments.end(), args.begin(), args.end());
  const auto environment =
      child_environment({std::string(kEnvRank) + "=", std::string(kEnvWorldSize) + "="},
                        {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"});
  const pid_t child = start_child(mpirun, arguments, environment);
  SpawnResult result = wait_children({child});
  return result;
}

}  // namespace calo::exec
