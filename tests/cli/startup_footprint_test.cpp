// What a `calo` process costs before it does anything (issue 67 item 6): `calo --version` stays under 30 MiB
// resident, and neither it nor a command that takes no CUDA path (`sim`) loads a CUDA library; the CUDA
// backend lives in libcalo_exec_cuda.so, opened only when the "cuda" backend is asked for
// (src/exec/cuda_module.h). Libraries are seen through the loader itself (LD_DEBUG=files), resident memory
// through wait4's ru_maxrss.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../common/bounded_run.h"

namespace {

constexpr long kMaxVersionResidentKib = 30L * 1024;  // the target for `calo --version`
constexpr double kDeadlineSeconds = 60;

/// Libraries of the CUDA toolkit calo must not load unless the CUDA backend is used.
const std::vector<std::string> kCudaLibraries = {"libcudart", "libcublas", "libcudnn", "libnvrtc", "libnccl"};

/// Runs CALO_EXECUTABLE `args` with `environment` (NAME, value) added, killed after kDeadlineSeconds.
calo::testing::BoundedOutcome run_calo(
    const std::vector<std::string>& args,
    const std::vector<std::pair<std::string, std::string>>& environment = {}) {
  calo::testing::RunBounds bounds;
  bounds.deadline_s = kDeadlineSeconds;
  bounds.environment = environment;
  return calo::testing::run_bounded(CALO_EXECUTABLE, args, bounds);
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
  const auto outcome = run_calo({"--version"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_LT(outcome.max_resident_kib, kMaxVersionResidentKib)
      << "calo --version peaked at " << outcome.max_resident_kib << " KiB resident";
}

TEST(CaloStartup, VersionLoadsNoCudaLibrary) {
  const auto outcome = run_calo({"--version"}, {{"LD_DEBUG", "files"}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  // The loader did report: libc is always loaded, so its line proves LD_DEBUG took effect.
  ASSERT_NE(outcome.output.find("file=libc.so.6"), std::string::npos) << outcome.output;
  EXPECT_EQ(cuda_libraries_loaded(outcome.output), std::vector<std::string>());
}

TEST(CaloStartup, ASimulationLoadsNoCudaLibrary) {
  const auto outcome = run_calo(
      {"sim", "--model", "tiny-dense", "--cluster", "h100-hgx", "--gpus", "1", "--steps", "2", "--no-store"},
      {{"LD_DEBUG", "files"}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  ASSERT_NE(outcome.output.find("file=libc.so.6"), std::string::npos) << outcome.output;
  EXPECT_EQ(cuda_libraries_loaded(outcome.output), std::vector<std::string>());
}

TEST(CaloStartup, TheCudaBackendWithoutItsModuleSaysWhatToDo) {
  const std::filesystem::path run =
      std::filesystem::temp_directory_path() / ("calo-startup-run-" + std::to_string(getpid()));
  const auto outcome =
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
  const auto outcome =
      run_calo({"bench", "--backend", "cuda", "--model", "tiny-dense", "--steps", "1", "--out", run.string()},
               {{"LD_LIBRARY_PATH", driver.string()}, {"LD_DEBUG", "files"}});
  std::filesystem::remove_all(driver);
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_NE(outcome.output.find("file=libcublasLt"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("no usable CUDA device"), std::string::npos) << outcome.output;
}
#endif

}  // namespace
