// Error checking for CUDA runtime, cuBLASLt and NCCL calls: every failure throws RuntimeFailure naming the
// call, file:line and the rank (set once per process with set_cuda_error_rank()).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

namespace calo::exec::cuda {

/// Sets the rank printed in CUDA/cuBLAS/NCCL error messages of this process.
void set_cuda_error_rank(int rank);

/// Throws RuntimeFailure for a failed CUDA runtime call (`what` is the call's text).
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line);
/// Throws RuntimeFailure for a failed cuBLAS(Lt) call.
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line);
/// Throws RuntimeFailure for a failed NCCL call.
[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* what, const char* file, int line);

}  // namespace calo::exec::cuda

/// Checks a CUDA runtime call.
#define CALO_CUDA(call)                                                              \
  do {                                                                               \
    const cudaError_t calo_status_ = (call);                                         \
    if (calo_status_ != cudaSuccess)                                                 \
      ::calo::exec::cuda::throw_cuda_error(calo_status_, #call, __FILE__, __LINE__); \
  } while (false)
/// Checks a cuBLAS / cuBLASLt call.
#define CALO_CUBLAS(call)                                                              \
  do {                                                                                 \
    const cublasStatus_t calo_status_ = (call);                                        \
    if (calo_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::calo::exec::cuda::throw_cublas_error(calo_status_, #call, __FILE__, __LINE__); \
  } while (false)
/// Checks an NCCL call.
#define CALO_NCCL(call)                                                              \
  do {                                                                               \
    const ncclResult_t calo_status_ = (call);                                        \
    if (calo_status_ != ncclSuccess)                                                 \
      ::calo::exec::cuda::throw_nccl_error(calo_status_, #call, __FILE__, __LINE__); \
  } while (false)
/// Checks the last kernel launch.
#define CALO_CUDA_LAUNCH() CALO_CUDA(cudaGetLastError())
