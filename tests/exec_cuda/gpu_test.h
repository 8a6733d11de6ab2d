// GPU tests: how many CUDA devices this process sees, and the skip-with-a-reason guard every GPU test starts
// with.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

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

/// bf16 bits of `value`, rounded to nearest even.
inline std::uint16_t to_bf16(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

/// The float a bf16 bit pattern stands for.
inline float from_bf16(std::uint16_t bits) {
  const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
  float value = 0;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

}  // namespace calo::exec::testing

/// Skips the current test, saying why, when no CUDA device is visible.
#define CALO_REQUIRE_GPU()                                        \
  do {                                                            \
    if (::calo::exec::testing::visible_gpus() < 1)                \
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (false)
