// Error messages of CUDA/cuBLASLt/NCCL failures with file:line and rank.
#include "exec/cuda/cuda_check.h"

#include <fmt/format.h>

#include <atomic>

#include "core/error.h"

namespace calo::exec::cuda {
namespace {
std::atomic<int> g_rank{-1};
}  // namespace

void set_cuda_error_rank(int rank) {
  g_rank.store(rank);
}

void throw_cuda_error(cudaError_t status, const char* what, const char* file, int line) {
  throw RuntimeFailure(fmt::format("rank {}: {} failed at {}:{}: {} ({})", g_rank.load(), what, file, line,
                                   cudaGetErrorString(status), cudaGetErrorName(status)));
}

void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line) {
  throw RuntimeFailure(fmt::format("rank {}: {} failed at {}:{}: cuBLAS status {} ({})", g_rank.load(), what,
                                   file, line, static_cast<int>(status), cublasLtGetStatusString(status)));
}

void throw_nccl_error(ncclResult_t status, const char* what, const char* file, int line) {
  throw RuntimeFailure(fmt::format("rank {}: {} failed at {}:{}: {} ({})", g_rank.load(), what, file, line,
                                   ncclGetErrorString(status), ncclGetLastError(nullptr)));
}

}  // namespace calo::exec::cuda
