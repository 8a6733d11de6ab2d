// Names the project gives devices, where a module must recognise them without depending on the one that
// named them.
#pragma once

#include <string_view>

namespace calo::core {

/// Whether a device name is the cpu-host cluster preset's ("CPU host (calo bench --backend cpu)",
/// data/clusters/cpu-host.yaml): a simulated or calibrated "GPU" that stands for CPU ranks, with placeholder
/// power and heat.
inline bool is_cpu_host_device(std::string_view name) {
  return name.starts_with("CPU");
}

}  // namespace calo::core
