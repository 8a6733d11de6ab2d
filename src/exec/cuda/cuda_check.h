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

/// Checks a call returning a status of type `Status`: anything but `ok` goes to `thrower` with the call's
/// text.
#define CALO_CHECK_STATUS(call, Status, ok, thrower)                                                \
  do {                                                                                              \
    const Status calo_status_ = (call);                                                             \
    if (calo_status_ != (ok)) ::calo::exec::cuda::thrower(calo_status_, #call, __FILE__, __LINE__); \
  } while (false)
/// Checks a CUDA runtime call.
#define CALO_CUDA(call) CALO_CHECK_STATUS(call, cudaError_t, cudaSuccess, throw_cuda_error)
/// Checks a cuBLAS / cuBLASLt call.
#define CALO_CUBLAS(call) CALO_CHECK_STATUS(call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, throw_cublas_error)
/// Checks an NCCL call.
#define CALO_NCCL(call) CALO_CHECK_STATUS(call, ncclResult_t, ncclSuccess, throw_nccl_error)
/// Checks the last kernel launch.
#define CALO_CUDA_LAUNCH() CALO_CUDA(cudaGetLastError())
