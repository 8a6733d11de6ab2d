// What a `calo` process costs before it does anything (issue 67 item 6): `calo --version` stays under 30 MiB
// resident, and neither it nor a command that takes no CUDA path (`sim`) loads a CUDA library; the CUDA
// backend lives in libcalo_exec_cuda.so, opened only when the "cuda" backend is asked for
// (src/exec/cuda_module.h). Libraries are seen through the loader itself (LD_DEBUG=files), resident memory
// through wait4's ru_maxrss.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr long kMaxVersionResidentKib = 30L * 1024;  // the target for `calo --version`
constexpr double kDeadlineSeconds = 60;

/// Libraries of the CUDA toolkit calo must not load unless the CUDA backend is used.
const std::vector<std::string> kCudaLibraries = {"libcudart", "libcublas", "libcudnn", "libnvrtc", "libnccl"};

/// How one run of `calo` ended.
struct Outcome {
  int exit_code = -1;         ///< -1 when killed (by the deadline or a signal)
  std::string output;         ///< stdout + stderr (with LD_DEBUG, the loader's lines too)
  long max_resident_kib = 0;  ///< peak resident set of the process (ru_maxrss)
};

/// Runs CALO_EXECUTABLE `args` with `environment` (NAME, value) added, killed after kDeadlineSeconds.
Outcome run_calo(const std::vector<std::string>& args,
                 const std::vector<std::pair<std::string, std::string>>& environment = {}) {
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() / ("calo-startup-" + std::to_string(getpid()) + ".txt");
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<std::string> argv_text = {CALO_EXECUTABLE};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& text : argv_text) argv.push_back(text.data());
    argv.push_back(nullptr);
    execv(CALO_EXECUTABLE, argv.data());
    _exit(127);
  }
  Outcome outcome;
  int status = 0;
  rusage usage{};
  while (wait4(child, &status, WNOHANG, &usage) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(kDeadlineSeconds)) {
      kill(child, SIGKILL);
      wait4(child, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.max_resident_kib = usage.ru_maxrss;
  std::ifstream text(log);
  std::stringstream buffer;
  buffer << text.rdbuf();
  outcome.output = buffer.str();
  std::filesystem::remove(log);
  return outcome;
}

/// The CUDA libraries named in the loader's "file=" lines of `output` (LD_DEBUG=files).
std::vector<std::string> cuda_libraries_loaded(const std::string& output) {
  std::vector<std::string> loaded;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("file=") == std::string::npos) continue;
    for (const std::string& library : kCudaLibraries) {
      if (line.find("file=" + library) != std::string::npos) loaded.push_back(line);
    }
  }
  return loaded;
}

TEST(CaloStartup, VersionStaysUnder30MiBResident) {
  if (CALO_SANITIZED_BUILD) GTEST_SKIP() << "sanitized build: ASan's shadow memory is not calo's footprint";
  const Outcome outcome = run_calo({"--version"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_LT(outcome.max_resident_kib, kMaxVersionResidentKib)
      << "calo --version peaked at " << outcome.max_resident_kib << " KiB resident";
}

TEST(CaloStartup, VersionLoadsNoCudaLibrary) {
  const Outcome outcome = run_calo({"--version"}, {{"LD_DEBUG", "files"}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  // The loader did report: libc is always loaded, so its line proves LD_DEBUG took effect.
  ASSERT_NE(outcome.output.find("file=libc.so.6"), std::string::npos) << outcome.output;
  EXPECT_EQ(cuda_libraries_loaded(outcome.output), std::vector<std::string>());
}

TEST(CaloStartup, ASimulationLoadsNoCudaLibrary) {
  const Outcome outcome = run_calo(
      {"sim", "--model", "tiny-dense", "--cluster", "h100-hgx", "--gpus", "1", "--steps", "2", "--no-store"},
      {{"LD_DEBUG", "files"}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  ASSERT_NE(outcome.output.find("file=libc.so.6"), std::string::npos) << outcome.output;
  EXPECT_EQ(cuda_libraries_loaded(outcome.output), std::vector<std::string>());
}

TEST(CaloStartup, TheCudaBackendWithoutItsModuleSaysWhatToDo) {
  const std::filesystem::path run =
      std::filesystem::temp_directory_path() / ("calo-startup-run-" + std::to_string(getpid()));
  const Outcome outcome =
      run_calo({"bench", "--backend", "cuda", "--model", "tiny-dense", "--steps", "1", "--out", run.string()},
               {{"CALO_CUDA_MODULE", "/nonexistent/libcalo_exec_cuda.so"}});
  std::filesystem::remove_all(run);
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  // Without a driver: "no NVIDIA driver"; with one: the missing module named. Either way the CPU backend is
  // offered (a build without the CUDA backend lists the backends it has, cpu among them).
  EXPECT_NE(outcome.output.find("--backend cuda"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("cpu"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("internal error"), std::string::npos) << outcome.output;
}

#ifdef CALO_CUDA_DRIVER_STUB
TEST(CaloStartup, TheCudaBackendLoadsItsModuleWhenAskedFor) {
  // The toolkit's driver stub as libcuda.so.1: calo finds "a driver", opens the module, and the module (its
  // CUDA libraries loaded) answers that the driver is a stub.
  const std::filesystem::path driver =
      std::filesystem::temp_directory_path() / ("calo-startup-driver-" + std::to_string(getpid()));
  std::filesystem::create_directories(driver);
  std::filesystem::create_symlink(CALO_CUDA_DRIVER_STUB, driver / "libcuda.so.1");
  const std::filesystem::path run = driver / "run";
  const Outcome outcome =
      run_calo({"bench", "--backend", "cuda", "--model", "tiny-dense", "--steps", "1", "--out", run.string()},
               {{"LD_LIBRARY_PATH", driver.string()}, {"LD_DEBUG", "files"}});
  std::filesystem::remove_all(driver);
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("file=libcublasLt"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("no usable CUDA device"), std::string::npos) << outcome.output;
}
#endif

}  // namespace
