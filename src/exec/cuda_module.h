// The CUDA backend as a module loaded at run time: `calo` links no CUDA library (cudart, cuBLASLt, cuDNN,
// NVRTC, NCCL); the backend (exec/cuda/) is built as libcalo_exec_cuda.so beside the binary and opened with
// dlopen the first time the "cuda" backend is asked for, so a command that takes no CUDA path (`calo
// --version`, `sim`, `plan`, `report`, a CPU bench) starts without them (docs/EXECUTION.md "CUDA libraries").
#pragma once

#include <cstddef>
#include <string>

#include "exec/backend.h"

namespace calo::exec {

/// Version of the module's entry point and of the types it fills; bumped when BackendFactory changes meaning.
inline constexpr int kCudaModuleAbiVersion = 1;
/// The module's file name, looked up beside the running executable.
inline constexpr const char* kCudaModuleFileName = "libcalo_exec_cuda.so";
/// Environment variable naming the module's path instead (tests, relocated installs).
inline constexpr const char* kCudaModulePathEnv = "CALO_CUDA_MODULE";
/// The module's exported entry point (extern "C"), resolved with dlsym.
inline constexpr const char* kCudaModuleEntryName = "calo_exec_cuda_module_factory";

/// `--backend auto` priority of the CUDA backend (above the CPU backend's).
inline constexpr int kCudaAutoPriority = 10;
/// The CUDA backend runs the context-parallel K/V ring (NCCL p2p on the cp group, cuDNN per ring step).
inline constexpr bool kCudaContextParallel = true;
/// The CUDA backend runs FP8 linears (cuBLASLt e4m3 GEMMs and the cast kernels).
inline constexpr bool kCudaFp8Linears = true;

/// The entry point's type: fills `factory` with the CUDA backend's factory and returns 0, or returns non-zero
/// when `abi_version` or the struct sizes differ from the module's own (a module of another build).
using CudaModuleEntry = int (*)(int abi_version, std::size_t factory_bytes, std::size_t config_bytes,
                                BackendFactory* factory);

/// The factory of the CUDA backend as a lazily loaded module: its name, priority and capability flags are
/// known without loading anything; unavailable_reason() first looks for an NVIDIA driver (libcuda.so.1) and
/// then loads the module, and create/describe/device_count load it and forward to the module's factory.
BackendFactory cuda_module_factory();

/// Path the module is loaded from: $CALO_CUDA_MODULE when set, else libcalo_exec_cuda.so in the directory of
/// /proc/self/exe.
std::string cuda_module_path();

/// Why the CUDA module cannot be loaded here ("" once it is loaded): the missing library named (e.g. "the
/// CUDA backend needs libcublasLt.so.13: install the CUDA toolkit ..."). Loads it on the first call; later
/// calls return the first answer.
std::string cuda_module_load_error();

/// The message for a dlopen of the module at `path` that failed with `dlerror_message`: the module missing,
/// a library it needs missing (named, with the toolkit as the fix), or the loader's own words. Callers add
/// the way out (BackendRegistry::select: "choose --backend cpu").
std::string cuda_module_failure_message(const std::string& path, const std::string& dlerror_message);

}  // namespace calo::exec
