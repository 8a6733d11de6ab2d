// AMD GPUs through AMD SMI, loaded at run time with dlopen("libamd_smi.so"). Written against the public
// amdsmi.h API of ROCm 6.x with calo's own declarations; NOT YET VERIFIED ON AMD HARDWARE
// (docs/TELEMETRY.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "telemetry/vendor_library.h"

namespace calo::telemetry {

/// AMD SMI source: energy counter, socket power, edge/hotspot/memory temperature, GFX and memory clocks,
/// GFX/UMC activity, VRAM used. Query groups: amdsmi.fast, amdsmi.energy.
class AmdSmiSource : public VendorLibrarySource {
 public:
  /// Loads the library (path "" = libamd_smi.so, then /opt/rocm/lib/libamd_smi.so) and initializes it.
  explicit AmdSmiSource(const std::string& library_path = "");
  std::string name() const override { return "amdsmi"; }
  Reading read(size_t device_position, size_t metric_index) override;

 private:
  struct Impl;
  Impl* impl_;  // owned by VendorLibrarySource, which unloads the library after Impl shut it down
};

}  // namespace calo::telemetry
