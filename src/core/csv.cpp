// The one CSV writer: see csv.h.
#include "core/csv.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

namespace calo::core {

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  quoted.reserve(text.size() + 2);
  for (const char character : text) {
    if (character == '"') quoted += '"';
    quoted += character;
  }
  return quoted + "\"";
}

void CsvWriter::header(std::initializer_list<std::string_view> names) {
  for (const std::string_view name : names) text(name);
  end_row();
}

void CsvWriter::separate() {
  if (row_open_) row_.push_back(',');
  row_open_ = true;
}

CsvWriter& CsvWriter::text(std::string_view value) {
  separate();
  if (value.find_first_of(",\"\r\n") == std::string_view::npos) {
    row_.append(value.data(), value.data() + value.size());
  } else {
    const std::string field = csv_field(value);
    row_.append(field.data(), field.data() + field.size());
  }
  return *this;
}

CsvWriter& CsvWriter::integer(int64_t value) {
  separate();
  fmt::format_to(std::back_inserter(row_), "{}", value);
  return *this;
}

CsvWriter& CsvWriter::number(double value) {
  separate();
  if (std::isfinite(value)) fmt::format_to(std::back_inserter(row_), "{}", value);
  return *this;
}

CsvWriter& CsvWriter::blank() {
  separate();
  return *this;
}

void CsvWriter::end_row() {
  row_.push_back('\n');
  std::fwrite(row_.data(), 1, row_.size(), out_);
  row_.clear();
  row_open_ = false;
}

}  // namespace calo::core
