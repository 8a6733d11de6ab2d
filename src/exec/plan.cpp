// Memory plan and model slices for bench runs.
#include "exec/plan.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "core/table.h"
#include "parallel/validate.h"

namespace calo::exec {

MemoryPlan plan_memory(const model::ModelSpec& model, const parallel::Layout& layout,
                       const DeviceDescription& device) {
  MemoryPlan plan;
  plan.breakdown = parallel::memory_per_gpu(model, layout);
  plan.device_bytes = device.memory_bytes;
  plan.usable_bytes = device.memory_bytes * kUsableMemoryFraction;
  return plan;
}

namespace {

/// Accounted total of a layout variant, or a negative value when the variant is not a valid layout.
double variant_total(const model::ModelSpec& model, parallel::Layout variant) {
  try {
    const parallel::Layout resolved = parallel::resolve_layout(model, variant);
    return parallel::memory_per_gpu(model, resolved).total_bytes();
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

void require_fits(const MemoryPlan& plan, const model::ModelSpec& model, const parallel::Layout& layout,
                  const DeviceDescription& device) {
  if (plan.fits()) return;
  const auto& memory = plan.breakdown;
  std::string message = fmt::format(
      "model {} with layout {} needs {} per {} (stage {}), more than the {} usable of its {} ({:.0f} % of "
      "{}):\n"
      "  {} ({} micro-batches in flight)\n",
      model.name, parallel::describe(layout), core::format_bytes(memory.total_bytes()),
      device.backend == "cpu" ? "rank" : "GPU", memory.stage, core::format_bytes(plan.usable_bytes),
      device.name, kUsableMemoryFraction * 100, core::format_bytes(plan.device_bytes),
      parallel::describe_terms(memory), memory.inflight_microbatches);
  std::vector<std::string> fixes;
  auto consider = [&](const std::string& label, const parallel::Layout& variant) {
    const double total = variant_total(model, variant);
    if (total >= 0 && total <= plan.usable_bytes)
      fixes.push_back(fmt::format("{} ({} per rank)", label, core::format_bytes(total)));
  };
  if (layout.recompute != parallel::Recompute::kFull) {
    parallel::Layout variant = layout;
    variant.recompute = parallel::Recompute::kFull;
    consider("--recompute full", variant);
  }
  for (int factor : {2, 4, 8}) {
    parallel::Layout variant = layout;
    variant.tp = layout.tp * factor;
    consider(fmt::format("--tp {} (--nproc {})", variant.tp, variant.world_size()), variant);
    variant = layout;
    variant.pp = layout.pp * factor;
    consider(fmt::format("--pp {} (--nproc {})", variant.pp, variant.world_size()), variant);
    variant = layout;
    variant.cp = layout.cp * factor;  // long sequences: split them (activations / cp)
    consider(fmt::format("--cp {} (--nproc {})", variant.cp, variant.world_size()), variant);
  }
  // Sharding more state over dp: the next ZeRO stages (hybrid sharding's shard group kept as given).
  for (int stage = layout.zero_stage + 1; stage <= 3 && layout.dp > 1; ++stage) {
    parallel::Layout variant = layout;
    variant.zero_stage = stage;
    consider(fmt::format("--zero {}", stage), variant);
  }
  for (int layers = model.num_layers - 1; layers >= 1; --layers) {
    if (layers % (layout.pp * layout.virtual_stages) != 0) continue;
    parallel::Layout variant = layout;
    variant.layers_per_stage.clear();
    const double total = variant_total(slice_model(model, layers), variant);
    if (total >= 0 && total <= plan.usable_bytes) {
      fixes.push_back(
          fmt::format("run a slice: --layers {} ({} per rank)", layers, core::format_bytes(total)));
      break;
    }
  }
  if (fixes.empty()) {
    message += "  no nearby layout fits; use more devices or a smaller model";
  } else {
    message += "  layouts that fit: " + fmt::format("{}", fmt::join(fixes, "; "));
  }
  throw InputError(message);
}

std::pair<std::string, bool> parse_slice_name(const std::string& model_name) {
  const std::string suffix = "-slice";
  if (model_name.size() > suffix.size() &&
      model_name.compare(model_name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return {model_name.substr(0, model_name.size() - suffix.size()), true};
  }
  return {model_name, false};
}

}  // namespace calo::exec
