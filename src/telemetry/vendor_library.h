// What the GPU sources that load their vendor's library at run time (NVML, AMD SMI) share: the dlopen
// handle and its unloading, symbol lookup, and when such a source can be read.
#pragma once

#include <dlfcn.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "telemetry/source.h"

namespace calo::telemetry {

/// A vendor library opened with dlopen and the devices opened through it. A source's Impl derives from it and
/// shuts the library down in its own destructor, which runs before this one unloads the library.
struct VendorLibrary {
  void* library = nullptr;          ///< dlopen handle; nullptr until loaded
  bool initialized = false;         ///< the library's init call succeeded (its shutdown is owed)
  std::string reason;               ///< why the source cannot be read, set where opening stopped
  std::vector<DeviceInfo> devices;  ///< the devices opened, in the source's order

  /// Nothing loaded yet; not copyable, since the handle is closed once.
  VendorLibrary() = default;
  VendorLibrary(const VendorLibrary&) = delete;
  VendorLibrary& operator=(const VendorLibrary&) = delete;
  /// Unloads the library (after the derived Impl shut it down).
  virtual ~VendorLibrary() {
    if (library != nullptr) dlclose(library);
  }
};

/// Resolves `symbol` in `library` into `target`; false when the library lacks it.
template <typename Function>
bool load_symbol(void* library, const char* symbol, Function& target) {
  target = reinterpret_cast<Function>(dlsym(library, symbol));
  return target != nullptr;
}

/// A GPU source read through a VendorLibrary it owns: available once the library initialized and opened a
/// device; otherwise the library's reason says why.
class VendorLibrarySource : public Source {
 public:
  /// True once the library initialized and opened at least one device.
  bool available() const override { return library_->initialized && !library_->devices.empty(); }
  /// The reason opening stopped, or "" when the source can be read.
  std::string unavailable_reason() const override { return available() ? "" : library_->reason; }
  /// The devices the library opened.
  const std::vector<DeviceInfo>& devices() const override { return library_->devices; }

 protected:
  /// Takes `library`, the derived source's Impl, for the source's lifetime.
  explicit VendorLibrarySource(std::unique_ptr<VendorLibrary> library) : library_(std::move(library)) {}
  /// The derived source's Impl, as it was handed to the constructor.
  template <typename Impl>
  Impl* library_as() const {
    return static_cast<Impl*>(library_.get());
  }

 private:
  std::unique_ptr<VendorLibrary> library_;
};

}  // namespace calo::telemetry
