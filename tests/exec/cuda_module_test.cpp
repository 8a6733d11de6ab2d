// The CUDA backend as a module (exec/cuda_module.h): what calo says when it cannot be loaded, and, where this
// build made libcalo_exec_cuda.so, that it loads on a host without a GPU and answers through calo's factory,
// its errors caught as calo's own types.
#include "exec/cuda_module.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace calo::exec {
namespace {

TEST(CudaModule, AMissingModuleIsNamedWithTheFix) {
  const std::string message =
      cuda_module_failure_message("/nonexistent/libcalo_exec_cuda.so",
                                  "/nonexistent/libcalo_exec_cuda.so: cannot open shared object file");
  EXPECT_NE(message.find("/nonexistent/libcalo_exec_cuda.so is missing"), std::string::npos) << message;
  EXPECT_NE(message.find("CALO_CUDA_MODULE"), std::string::npos) << message;
}

TEST(CudaModule, AMissingCudaLibraryIsNamedWithTheToolkitAsTheFix) {
  const std::filesystem::path module =
      std::filesystem::temp_directory_path() / ("calo_cuda_module_test_" + std::to_string(getpid()) + ".so");
  std::ofstream(module) << "not a library";
  const std::string message = cuda_module_failure_message(
      module.string(), "libcublasLt.so.13: cannot open shared object file: No such file or directory");
  std::filesystem::remove(module);
  EXPECT_NE(message.find("the CUDA backend needs libcublasLt.so.13: install the CUDA toolkit"),
            std::string::npos)
      << message;
}

TEST(CudaModule, TheRegistryKnowsItsFlagsWithoutLoadingIt) {
  const BackendFactory factory = cuda_module_factory();
  EXPECT_EQ(factory.name, "cuda");
  EXPECT_EQ(factory.auto_priority, kCudaAutoPriority);
  EXPECT_TRUE(factory.context_parallel);
  EXPECT_TRUE(factory.fp8_linears);
}

#ifdef CALO_CUDA_MODULE_FILE
TEST(CudaModule, LoadsAndAnswersOnAnyHost) {
  ASSERT_TRUE(std::filesystem::exists(CALO_CUDA_MODULE_FILE)) << CALO_CUDA_MODULE_FILE << " was not built";
  setenv(kCudaModulePathEnv, CALO_CUDA_MODULE_FILE, 1);
  ASSERT_EQ(cuda_module_load_error(), "");
  const BackendFactory factory = cuda_module_factory();
  const int gpus = factory.device_count();
  EXPECT_GE(gpus, 0);
  if (gpus == 0) {
    // An error thrown inside the module reaches calo as calo::RuntimeFailure.
    EXPECT_THROW(factory.describe(0, 1), RuntimeFailure);
  } else {
    EXPECT_EQ(factory.describe(0, 1).backend, "cuda");
  }
}
#endif

}  // namespace
}  // namespace calo::exec
