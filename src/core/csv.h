// The one CSV writer (RFC 4180): every CSV file calo writes (`calo export --format csv`: samples, spans,
// summaries) goes through it, so a name with a comma, quote or line break stays one field.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>

namespace calo::core {

/// `text` as one CSV field: as is, or in double quotes (each " doubled) when it holds , " CR or LF.
std::string csv_field(std::string_view text);

/// Writes CSV rows to a stream it does not own, one field at a time.
class CsvWriter {
 public:
  /// Writes to `out` (e.g. StagedFile::stream()), which must outlive the writer.
  explicit CsvWriter(std::FILE* out) : out_(out) {}
  /// Writes a header row of `names` (quoted like any field).
  void header(std::initializer_list<std::string_view> names);
  /// Appends a text field, quoted when needed.
  CsvWriter& text(std::string_view value);
  /// Appends an integer field.
  CsvWriter& integer(int64_t value);
  /// Appends a number (shortest text that reads back the same double); NaN and ±Inf as an empty field.
  CsvWriter& number(double value);
  /// Appends an empty field (no value).
  CsvWriter& blank();
  /// Ends the current row ("\n") and writes it to the stream (one write per row).
  void end_row();

 private:
  void separate();
  std::FILE* out_;
  fmt::memory_buffer row_;  ///< the row being built
  bool row_open_ = false;
};

}  // namespace calo::core
