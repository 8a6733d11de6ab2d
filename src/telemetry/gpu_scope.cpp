// GPU scope of a job: parsing CUDA_VISIBLE_DEVICES-style lists and matching NVML devices against them.
#include "telemetry/gpu_scope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace calo::telemetry {
namespace {

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

bool is_index(const std::string& entry) {
  return !entry.empty() && entry.size() <= 4 &&
         std::all_of(entry.begin(), entry.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

bool is_gpu_uuid(const std::string& entry) {
  return entry.size() > 4 && entry.starts_with("GPU-");
}

}  // namespace

bool GpuScope::admits(int nvml_index, const std::string& uuid) const {
  if (every_gpu) return true;
  return std::any_of(entries.begin(), entries.end(), [&](const std::string& entry) {
    return is_index(entry) ? std::stoi(entry) == nvml_index : uuid.starts_with(entry);
  });
}

bool GpuScope::lists_indices() const {
  return std::any_of(entries.begin(), entries.end(), is_index);
}

std::string GpuScope::describe() const {
  if (every_gpu) return "every GPU";
  if (entries.empty()) return fmt::format("no GPU ({})", origin);
  std::vector<std::string>
      shown;  // UUIDs cut to their first 8 hex digits, as nvidia-smi -L reads at a glance
  for (const std::string& entry : entries) shown.push_back(is_gpu_uuid(entry) ? entry.substr(0, 12) : entry);
  if (!lists_indices()) return fmt::format("{} ({})", fmt::join(shown, ", "), origin);  // UUIDs say "GPU-"
  return fmt::format("GPU{} {} ({})", entries.size() == 1 ? "" : "s", fmt::join(shown, ", "), origin);
}

GpuScope parse_gpu_scope(const std::string& list, const std::string& origin) {
  GpuScope scope;
  scope.origin = origin;
  if (trimmed(list) == "all") return scope;
  scope.every_gpu = false;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t comma = std::min(list.find(',', begin), list.size());
    const std::string entry = trimmed(list.substr(begin, comma - begin));
    begin = comma + 1;
    if (entry.starts_with("MIG-")) {
      scope = GpuScope{};
      scope.origin = origin;
      scope.note = fmt::format(
          "{} names a MIG instance ({}); NVML here reads whole GPUs, so every GPU is "
          "recorded: pass --gpus with the parent GPU's index to narrow it",
          origin, entry);
      return scope;
    }
    if (!is_index(entry) && !is_gpu_uuid(entry)) {
      if (!entry.empty() || comma < list.size())
        scope.note = fmt::format(
            "{}: '{}' is neither a GPU index nor a GPU UUID; as CUDA does, the list "
            "ends before it",
            origin, entry);
      break;
    }
    if (std::find(scope.entries.begin(), scope.entries.end(), entry) == scope.entries.end())
      scope.entries.push_back(entry);
  }
  return scope;
}

GpuScope job_gpu_scope(const std::optional<std::string>& flag, const char* cuda_visible_devices,
                       const char* cuda_device_order) {
  GpuScope scope;
  if (flag) {
    scope = parse_gpu_scope(*flag, "--gpus");
    require_input(scope.every_gpu || (scope.note.empty() && !scope.entries.empty()),
                  fmt::format("--gpus '{}': give GPU indices or UUIDs, comma-separated (nvidia-smi -L lists "
                              "them: --gpus 0,1 or --gpus GPU-8f2c...), or --gpus all",
                              *flag));
  } else if (cuda_visible_devices != nullptr)
    scope = parse_gpu_scope(cuda_visible_devices, "CUDA_VISIBLE_DEVICES");
  scope.cuda_order_is_pci_bus =
      flag.has_value() || (cuda_device_order != nullptr && std::string(cuda_device_order) == "PCI_BUS_ID");
  return scope;
}

std::string index_order_warning(const GpuScope& scope, const std::vector<std::string>& gpu_names) {
  if (scope.cuda_order_is_pci_bus || !scope.lists_indices()) return "";
  if (std::all_of(gpu_names.begin(), gpu_names.end(),
                  [&gpu_names](const std::string& name) { return name == gpu_names.front(); }))
    return "";
  return fmt::format(
      "{} lists indices and this host's GPUs differ ({}): CUDA numbers them fastest first unless "
      "CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML by PCI bus, so an index may name another GPU; set "
      "CUDA_DEVICE_ORDER=PCI_BUS_ID or list UUIDs (nvidia-smi -L)",
      scope.origin, fmt::join(gpu_names, ", "));
}

std::string scope_summary(const GpuScope& scope, const std::vector<std::string>& left_out,
                          const std::vector<std::string>& gpu_names) {
  std::vector<std::string> lines;
  if (!left_out.empty()) {
    lines.push_back(fmt::format("GPU{} {} of {} left out: the job's are {}; --gpus all records every GPU",
                                left_out.size() == 1 ? "" : "s", fmt::join(left_out, ", "), gpu_names.size(),
                                scope.describe()));
  }
  if (!scope.note.empty()) lines.push_back(scope.note);
  if (std::string warning = index_order_warning(scope, gpu_names); !warning.empty())
    lines.push_back(std::move(warning));
  return fmt::format("{}", fmt::join(lines, "; "));
}

GpuScope job_gpu_scope_from_environment(const std::optional<std::string>& flag) {
  return job_gpu_scope(flag, std::getenv("CUDA_VISIBLE_DEVICES"), std::getenv("CUDA_DEVICE_ORDER"));
}

}  // namespace calo::telemetry
