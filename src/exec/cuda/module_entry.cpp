// Entry point of libcalo_exec_cuda.so, the CUDA backend as a module calo opens with dlopen on first use
// (exec/cuda_module.h). The only symbol the module exports; everything else it links is hidden.
#include <cstddef>
#include <type_traits>

#include "exec/cuda/cuda_backend.h"
#include "exec/cuda_module.h"

/// Fills `factory` with the CUDA backend's factory; 1 (and `factory` untouched) when the caller was built
/// against another ABI version or other struct sizes.
extern "C" __attribute__((visibility("default"))) int calo_exec_cuda_module_factory(
    int abi_version, std::size_t factory_bytes, std::size_t config_bytes,
    calo::exec::BackendFactory* factory) {
  if (abi_version != calo::exec::kCudaModuleAbiVersion ||
      factory_bytes != sizeof(calo::exec::BackendFactory) ||
      config_bytes != sizeof(calo::exec::BackendConfig) || factory == nullptr) {
    return 1;
  }
  *factory = calo::exec::cuda_backend_factory();
  return 0;
}

static_assert(std::is_same_v<decltype(&calo_exec_cuda_module_factory), calo::exec::CudaModuleEntry>,
              "the module's entry point must have the type calo looks it up as");
