// `calo export`: Perfetto-loadable Chrome JSON trace (a counter track per GPU metric, slices for steps,
// phases, ops and kernels) and CSV files of samples, spans and summaries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace calo::report {

/// What an export wrote.
struct ExportStats {
  int64_t samples = 0;  ///< sample rows / counter events written
  int64_t spans = 0;    ///< span rows / slices written
  int64_t bytes = 0;    ///< bytes of output
};

/// `time_ns` in µs as a JSON number with three decimals ("-9223372036854775.808"), valid for every int64.
std::string microseconds_text(int64_t time_ns);

/// Writes run `run_dir` as a Chrome JSON trace to `out_file`: one process per device ("GPU k (node n, slot
/// s)"), counter events ("ph":"C") per metric, complete events ("ph":"X") per span on a thread per span kind.
/// A NaN or ±Inf sample value is written as null.
ExportStats export_perfetto(const std::filesystem::path& run_dir, const std::filesystem::path& out_file);

/// Writes samples.csv (t_ns,device_idx,metric,unit,value,sensor_t_ns), spans.csv and summaries.csv into
/// `out_dir` through core::CsvWriter (RFC 4180 quoting); a NaN or ±Inf value is an empty field.
ExportStats export_csv(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir);

}  // namespace calo::report
