// Merging per-node runs (one `calo record` per node) into one run with devices renumbered and clocks aligned.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace calo::store {

/// What a merge produced.
struct MergeResult {
  std::filesystem::path out_dir;      ///< the merged run directory
  int32_t nodes = 0;                  ///< input runs (node index = position in the input list)
  int32_t devices = 0;                ///< devices in the merged run
  int64_t samples = 0;                ///< samples copied
  int64_t spans = 0;                  ///< spans copied
  std::vector<int64_t> shift_ns;      ///< per input: added to its t_ns (its wall_offset_ns - earliest one)
  std::vector<int32_t> first_device;  ///< per input: merged idx of its first device
};

/// Joins `inputs` into a new run at `out_dir`. Input k becomes node k: its devices get consecutive new
/// indexes (node = k, slot = old slot) and its times are shifted by wall_offset_ns[k] - min(wall_offset_ns)
/// so all share the earliest run's time base. Metrics are unified by name; summary scopes are prefixed
/// "node<k>/"; events are prefixed with the node and host. InputError for missing inputs, runs without a
/// wall-clock offset, a run given twice or a copy of one (same run uuid), a shift or shifted time that
/// overflows int64 (naming the input), or an out_dir that already holds a run.
MergeResult merge_runs(const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out_dir,
                       const std::string& command = "calo merge");

}  // namespace calo::store
