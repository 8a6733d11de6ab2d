// Which of a host's GPUs a job runs on: every GPU, or those a CUDA_VISIBLE_DEVICES-style list names (NVML
// indices or UUIDs), so telemetry records the job's GPUs and not its neighbours'.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace calo::telemetry {

/// The GPUs of a job, as `calo record --gpus` or CUDA_VISIBLE_DEVICES name them.
struct GpuScope {
  bool every_gpu = true;              ///< no list: every GPU of the host is the job's
  std::vector<std::string> entries;   ///< in order: NVML indices ("2") or UUID prefixes ("GPU-8f2c")
  std::string origin;                 ///< where the list came from: "--gpus", "CUDA_VISIBLE_DEVICES" or ""
  std::string note;                   ///< what the user should know about the list ("" if nothing)
  bool cuda_order_is_pci_bus = true;  ///< CUDA numbers GPUs as NVML does (CUDA_DEVICE_ORDER=PCI_BUS_ID)

  /// Whether any entry is an index (which depends on the numbering, unlike a UUID).
  bool lists_indices() const;

  /// Whether the GPU of NVML index `nvml_index` and UUID `uuid` is one of the job's.
  bool admits(int nvml_index, const std::string& uuid) const;
  /// One line for a summary: "GPUs 0, 2 (CUDA_VISIBLE_DEVICES)" or "every GPU".
  std::string describe() const;
};

/// Parses a list of GPUs as CUDA does (comma-separated indices or UUIDs, read up to the first entry that is
/// neither; "" = no GPU). `origin` names the input for messages. "all" = every GPU. A MIG instance
/// ("MIG-...") cannot be told apart from its neighbours by NVML here: the scope is widened to every GPU and
/// `note` says so.
GpuScope parse_gpu_scope(const std::string& list, const std::string& origin);

/// The job's GPUs: `--gpus` when given (`flag` set), else CUDA_VISIBLE_DEVICES (`cuda_visible_devices`,
/// nullptr = unset), else every GPU. `cuda_device_order` (CUDA_DEVICE_ORDER) says whether CUDA's indices are
/// NVML's (PCI_BUS_ID) or may differ on a host of mixed GPUs (FASTEST_FIRST, CUDA's default).
GpuScope job_gpu_scope(const std::optional<std::string>& flag, const char* cuda_visible_devices,
                       const char* cuda_device_order);

/// For a scope that lists indices while CUDA may number GPUs otherwise, on a host whose GPUs are not all the
/// model `gpu_names` (every GPU's name, NVML order): a warning that the indices may name other GPUs; else "".
std::string index_order_warning(const GpuScope& scope, const std::vector<std::string>& gpu_names);

/// What a source's scope did, for the user: "GPUs 1, 2, 3 of 4 left out: the job's are GPU 0
/// (CUDA_VISIBLE_DEVICES); --gpus all records every GPU", then the scope's note and index_order_warning; ""
/// when the scope left nothing out and has nothing to say. `left_out`: NVML indices outside it; `gpu_names`:
/// every GPU's.
std::string scope_summary(const GpuScope& scope, const std::vector<std::string>& left_out,
                          const std::vector<std::string>& gpu_names);

/// The scope of this process's environment (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), `flag` first.
GpuScope job_gpu_scope_from_environment(const std::optional<std::string>& flag = std::nullopt);

}  // namespace calo::telemetry
