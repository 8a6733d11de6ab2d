// A telemetry source answered by a test, shared by the sampler and probe tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "telemetry/source.h"

namespace calo::telemetry {

/// A source answered by the test: subclasses fill devices_ and implement read().
class FakeSource : public Source {
 public:
  /// A source called `name`, available, with no devices until the subclass adds them.
  explicit FakeSource(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  bool available() const override { return true; }
  std::string unavailable_reason() const override { return ""; }
  const std::vector<DeviceInfo>& devices() const override { return devices_; }

 protected:
  std::vector<DeviceInfo> devices_;  ///< filled by the subclass

 private:
  std::string name_;
};

}  // namespace calo::telemetry
