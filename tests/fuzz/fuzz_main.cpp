// libFuzzer entry point of one target: CALO_FUZZ_TARGET names the function from targets.h (set per binary).
#include "targets.h"

/// libFuzzer calls this with each generated input.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return calo::fuzz::CALO_FUZZ_TARGET(data, size);
}
