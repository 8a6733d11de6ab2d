// The CUDA backend loaded with dlopen on first use (exec/cuda_module.h).
#include "exec/cuda_module.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace calo::exec {

std::string cuda_module_failure_message(const std::string& path, const std::string& message) {
  std::error_code ignored;
  if (!std::filesystem::exists(path, ignored)) {
    return fmt::format(
        "the CUDA backend module {} is missing: keep {} beside calo (built with it) or set {} to its path",
        path, kCudaModuleFileName, kCudaModulePathEnv);
  }
  constexpr std::string_view kCannotOpen = ": cannot open shared object file";  // dlerror's words
  const std::size_t not_found = message.find(kCannotOpen);
  if (not_found != std::string::npos && message.compare(0, not_found, path) != 0) {
    return fmt::format(
        "the CUDA backend needs {}: install the CUDA toolkit (or add its lib directory to LD_LIBRARY_PATH)",
        message.substr(0, not_found));
  }
  return fmt::format("cannot load the CUDA backend {}: {}", path, message);
}

namespace {

/// The module once the first load was tried: its factory, or why it could not be loaded.
struct LoadedModule {
  std::string error;       ///< "" when the module loaded and accepted this build's ABI
  BackendFactory factory;  ///< the module's own factory (valid when error is empty)
};

/// Opens the module (RTLD_NOW | RTLD_LOCAL: every library it needs resolved now, none of its symbols
/// visible to later loads) and takes its factory. Never unloaded: its code backs the factory's functions.
LoadedModule load_module() {
  const std::string path = cuda_module_path();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* message = dlerror();
    return {cuda_module_failure_message(path, message != nullptr ? message : "unknown dlopen error"), {}};
  }
  auto entry = reinterpret_cast<CudaModuleEntry>(dlsym(handle, kCudaModuleEntryName));
  if (entry == nullptr) {
    return {fmt::format("{} is not calo's CUDA backend module (it lacks {})", path, kCudaModuleEntryName),
            {}};
  }
  LoadedModule module;
  if (entry(kCudaModuleAbiVersion, sizeof(BackendFactory), sizeof(BackendConfig), &module.factory) != 0) {
    return {fmt::format("{} belongs to another build of calo: use the {} built with this calo", path,
                        kCudaModuleFileName),
            {}};
  }
  return module;
}

/// The module, loaded on the first call (thread-safe: a function-local static).
const LoadedModule& loaded_module() {
  static const LoadedModule module = load_module();
  return module;
}

/// The module's factory; throws RuntimeFailure with the load error when it cannot be loaded.
const BackendFactory& module_factory() {
  const LoadedModule& module = loaded_module();
  if (!module.error.empty()) throw RuntimeFailure(module.error + "; use --backend cpu");
  return module.factory;
}

/// Why no NVIDIA driver can be used ("" when libcuda.so.1 opens): answered without loading the CUDA
/// libraries, so `--backend auto` on a host without a driver stays as small as a CPU run.
std::string missing_driver_reason() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return "no NVIDIA driver (libcuda.so.1 not found)";
  dlclose(driver);
  return "";
}

}  // namespace

std::string cuda_module_path() {
  if (const char* configured = std::getenv(kCudaModulePathEnv);
      configured != nullptr && *configured != '\0') {
    return configured;
  }
  std::error_code error;
  const std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return kCudaModuleFileName;  // no /proc: the loader's own search path
  return (executable.parent_path() / kCudaModuleFileName).string();
}

std::string cuda_module_load_error() {
  return loaded_module().error;
}

BackendFactory cuda_module_factory() {
  BackendFactory factory;
  factory.name = "cuda";
  factory.auto_priority = kCudaAutoPriority;
  factory.context_parallel = kCudaContextParallel;
  factory.fp8_linears = kCudaFp8Linears;
  factory.unavailable_reason = [] {
    if (std::string reason = missing_driver_reason(); !reason.empty()) return reason;
    const LoadedModule& module = loaded_module();
    if (!module.error.empty()) return module.error;
    return module.factory.unavailable_reason ? module.factory.unavailable_reason() : std::string();
  };
  factory.create = [](const BackendConfig& config) { return module_factory().create(config); };
  factory.describe = [](int local_index, int local_world_size) {
    return module_factory().describe(local_index, local_world_size);
  };
  factory.device_count = [] { return module_factory().device_count(); };
  return factory;
}

}  // namespace calo::exec
