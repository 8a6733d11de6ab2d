// GPU tests: how many CUDA devices this process sees, and the skip-with-a-reason guard every GPU test starts
// with.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace calo::exec::testing {

/// CUDA devices visible to this process (0 without a driver or device; the CUDA error is cleared).
inline int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace calo::exec::testing

/// Skips the current test, saying why, when no CUDA device is visible.
#define CALO_REQUIRE_GPU()                                        \
  do {                                                            \
    if (::calo::exec::testing::visible_gpus() < 1)                \
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (false)
