// `calo export`: Perfetto-loadable Chrome JSON trace (a counter track per GPU metric, slices for steps,
// phases, ops and kernels) and CSV files of samples, spans and summaries.
#pragma once

#include <cstdint>
#include <filesystem>

namespace calo::report {

/// What an export wrote.
struct ExportStats {
  int64_t samples = 0;  ///< sample rows / counter events written
  int64_t spans = 0;    ///< span rows / slices written
  int64_t bytes = 0;    ///< bytes of output
};

/// Writes run `run_dir` as a Chrome JSON trace to `out_file`: one process per device ("GPU k (node n, slot
/// s)"), counter events ("ph":"C") per metric, complete events ("ph":"X") per span on a thread per span kind.
ExportStats export_perfetto(const std::filesystem::path& run_dir, const std::filesystem::path& out_file);

/// Writes samples.csv (t_ns,device_idx,metric,unit,value), spans.csv and summaries.csv into `out_dir`.
ExportStats export_csv(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir);

}  // namespace calo::report
