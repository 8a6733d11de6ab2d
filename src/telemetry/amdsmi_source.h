// AMD GPUs through AMD SMI, loaded at run time with dlopen("libamd_smi.so"). Written against the public
// amdsmi.h API of ROCm 6.x with calo's own declarations; NOT YET VERIFIED ON AMD HARDWARE
// (docs/TELEMETRY.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "telemetry/source.h"

namespace calo::telemetry {

/// AMD SMI source: energy counter, socket power, edge/hotspot/memory temperature, GFX and memory clocks,
/// GFX/UMC activity, VRAM used. Query groups: amdsmi.fast, amdsmi.energy.
class AmdSmiSource : public Source {
 public:
  /// Loads the library (path "" = libamd_smi.so, then /opt/rocm/lib/libamd_smi.so) and initializes it.
  explicit AmdSmiSource(const std::string& library_path = "");
  /// Shuts AMD SMI down and unloads the library.
  ~AmdSmiSource() override;
  std::string name() const override { return "amdsmi"; }
  bool available() const override;
  std::string unavailable_reason() const override;
  const std::vector<DeviceInfo>& devices() const override;
  Reading read(size_t device_position, size_t metric_index) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace calo::telemetry
