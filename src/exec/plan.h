// Memory plan of a bench run (from the model's accounting, before anything runs) and model slices.
#pragma once

#include <string>

#include "exec/backend.h"
#include "model/model_spec.h"
#include "parallel/layout.h"
#include "parallel/memory.h"

namespace calo::exec {

/// Share of device memory the accounted training state may use (defined with the memory model, shared with
/// `calo sim` and `calo plan`).
using parallel::kUsableMemoryFraction;

/// Memory plan of the most loaded rank against one device.
struct MemoryPlan {
  parallel::MemoryBreakdown breakdown;  ///< accounted bytes per category (most loaded stage)
  double device_bytes = 0;              ///< device memory of the rank
  double usable_bytes = 0;              ///< device_bytes * kUsableMemoryFraction
  /// True when the accounted total fits in usable_bytes.
  bool fits() const { return breakdown.total_bytes() <= usable_bytes; }
};

/// Plans memory for `model` under resolved `layout` on `device`.
MemoryPlan plan_memory(const model::ModelSpec& model, const parallel::Layout& layout,
                       const DeviceDescription& device);

/// Throws InputError (exit 2) when `plan` does not fit: a per-category breakdown and layouts that would fit
/// (recompute, more tp/pp, a slice with --layers N).
void require_fits(const MemoryPlan& plan, const model::ModelSpec& model, const parallel::Layout& layout,
                  const DeviceDescription& device);

/// Splits "NAME-slice" into ("NAME", true); other names come back unchanged with false.
std::pair<std::string, bool> parse_slice_name(const std::string& model_name);

}  // namespace calo::exec
