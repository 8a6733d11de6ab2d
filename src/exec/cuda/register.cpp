// register_cuda_backend() for binaries that link the CUDA backend statically (exec_cuda_tests,
// exec_gpu_bench): a file of its own so that the module (module_entry.cpp), which never touches the registry,
// links without it.
#include "exec/backend.h"
#include "exec/cuda/cuda_backend.h"

namespace calo::exec {

void register_cuda_backend(BackendRegistry& registry) {
  registry.add(cuda_backend_factory());
}

}  // namespace calo::exec
