// bf16 GEMM load for one GPU: back-to-back n×n×n cublasGemmEx (bf16 in/out, fp32 accumulate) for --seconds;
// prints the achieved TFLOP/s. Used by run_all.sh to compare throughput with `calo record` on and off.
// With --burst-ms B --idle-ms I it alternates B ms of GEMMs and I ms of sleep in one process (the fixture's
// "burst" phase: power swings without processes starting and stopping).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#define CHECK_CUDA(call)                                                           \
  do {                                                                             \
    cudaError_t status_ = (call);                                                  \
    if (status_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "gemm_load: %s:%d %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(status_));                                   \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)
#define CHECK_CUBLAS(call)                                                                       \
  do {                                                                                           \
    cublasStatus_t status_ = (call);                                                             \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "gemm_load: %s:%d %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, \
                   static_cast<int>(status_));                                                   \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Fills with pseudo-random values in [-1, 1) (never zeros: zeros draw less power).
__global__ void fill_random(__nv_bfloat16* data, size_t count, unsigned seed) {
  for (size_t index = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; index < count;
       index += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned hash = static_cast<unsigned>(index) * 2654435761u ^ seed;
    hash ^= hash >> 16;
    hash *= 2246822519u;
    hash ^= hash >> 13;
    data[index] = __float2bfloat16(static_cast<float>(hash & 0xffff) / 32768.0f - 1.0f);
  }
}

int main(int argc, char** argv) {
  int device = 0;
  int size = 8192;
  double seconds = 10;
  double burst_ms = 0;
  double idle_ms = 0;
  for (int index = 1; index + 1 < argc; index += 2) {
    const std::string flag = argv[index];
    if (flag == "--device")
      device = std::atoi(argv[index + 1]);
    else if (flag == "--size")
      size = std::atoi(argv[index + 1]);
    else if (flag == "--seconds")
      seconds = std::atof(argv[index + 1]);
    else if (flag == "--burst-ms")
      burst_ms = std::atof(argv[index + 1]);
    else if (flag == "--idle-ms")
      idle_ms = std::atof(argv[index + 1]);
    else {
      std::fprintf(stderr,
                   "usage: gemm_load [--device D] [--size N] [--seconds S] [--burst-ms B --idle-ms I]\n");
      return 2;
    }
  }
  CHECK_CUDA(cudaSetDevice(device));
  const size_t elements = static_cast<size_t>(size) * size;
  __nv_bfloat16* matrices[3];
  for (int which = 0; which < 3; ++which) {
    CHECK_CUDA(cudaMalloc(&matrices[which], elements * sizeof(__nv_bfloat16)));
    fill_random<<<1024, 256>>>(matrices[which], elements, 1234u + which);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  const float alpha = 1.0f;
  const float beta = 0.0f;
  auto gemm = [&] {
    CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha, matrices[0],
                              CUDA_R_16BF, size, matrices[1], CUDA_R_16BF, size, &beta, matrices[2],
                              CUDA_R_16BF, size, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int warmup = 0; warmup < 20; ++warmup) gemm();
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto begin = std::chrono::steady_clock::now();
  long long gemms = 0;
  double elapsed_s = 0;
  const bool bursty = burst_ms > 0 && idle_ms > 0;
  auto burst_begin = begin;
  while (elapsed_s < seconds) {
    const int batch_size = bursty ? 2 : 10;
    for (int batch = 0; batch < batch_size; ++batch) gemm();
    CHECK_CUDA(cudaDeviceSynchronize());
    gemms += batch_size;
    const auto now = std::chrono::steady_clock::now();
    if (bursty && std::chrono::duration<double, std::milli>(now - burst_begin).count() >= burst_ms) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(idle_ms));
      burst_begin = std::chrono::steady_clock::now();
    }
    elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  const double tflops =
      2.0 * size * static_cast<double>(size) * size * static_cast<double>(gemms) / elapsed_s / 1e12;
  std::printf("gemm_load device %d size %d: %lld gemms in %.3f s = %.2f TFLOP/s\n", device, size, gemms,
              elapsed_s, tflops);
  cublasDestroy(handle);
  for (auto* matrix : matrices) cudaFree(matrix);
  return 0;
}
