// Backend registry: built-in backends register here; `--backend auto` picks the best available one.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "exec/backend.h"
#include "exec/cpu_backend.h"
#include "exec/cuda_module.h"

namespace calo::exec {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry registry;
  static std::once_flag registered;
  std::call_once(registered, [] {
    register_cpu_backend(registry);
#ifdef CALO_EXEC_HAVE_CUDA
    // Loaded from libcalo_exec_cuda.so when first asked for (exec/cuda_module.h); a binary that links the
    // backend itself replaces this entry through register_cuda_backend().
    registry.add(cuda_module_factory());
#endif
  });
  return registry;
}

void BackendRegistry::add(BackendFactory factory) {
  auto existing = std::find_if(factories_.begin(), factories_.end(),
                               [&](const BackendFactory& entry) { return entry.name == factory.name; });
  if (existing != factories_.end()) {
    *existing = std::move(factory);
  } else {
    factories_.push_back(std::move(factory));
  }
}

const BackendFactory* BackendRegistry::find(const std::string& name) const {
  for (const BackendFactory& factory : factories_) {
    if (factory.name == name) return &factory;
  }
  return nullptr;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> result;
  for (const BackendFactory& factory : factories_) result.push_back(factory.name);
  return result;
}

const BackendFactory& BackendRegistry::select(const std::string& name_or_auto) const {
  if (name_or_auto == "auto") {
    const BackendFactory* best = nullptr;
    std::string reasons;
    for (const BackendFactory& factory : factories_) {
      const std::string reason = factory.unavailable_reason ? factory.unavailable_reason() : std::string();
      if (!reason.empty()) {
        reasons += fmt::format("; {}: {}", factory.name, reason);
        continue;
      }
      if (best == nullptr || factory.auto_priority > best->auto_priority) best = &factory;
    }
    if (best == nullptr) throw InputError("--backend auto: no backend can run here" + reasons);
    return *best;
  }
  const BackendFactory* factory = find(name_or_auto);
  if (factory == nullptr) {
    throw InputError(fmt::format("--backend {}: unknown backend; built into this binary: {}, or auto",
                                 name_or_auto, fmt::join(names(), ", ")));
  }
  const std::string reason = factory->unavailable_reason ? factory->unavailable_reason() : std::string();
  if (!reason.empty()) {
    throw InputError(fmt::format("--backend {}: not available here: {}; choose --backend {}", name_or_auto,
                                 reason, name_or_auto == "cpu" ? "auto" : "cpu"));
  }
  return *factory;
}

const char* op_count_name(int kind_index) {
  return graph::to_string(static_cast<graph::OpKind>(kind_index));
}

}  // namespace calo::exec
