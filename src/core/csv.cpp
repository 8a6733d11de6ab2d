// The one CSV writer: see csv.h.
#include "core/csv.h"

#include <fmt/format.h>

#include <cmath>

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
  if (row_open_) std::fputc(',', out_);
  row_open_ = true;
}

CsvWriter& CsvWriter::text(std::string_view value) {
  separate();
  const std::string field = csv_field(value);
  std::fwrite(field.data(), 1, field.size(), out_);
  return *this;
}

CsvWriter& CsvWriter::integer(int64_t value) {
  separate();
  fmt::print(out_, "{}", value);
  return *this;
}

CsvWriter& CsvWriter::number(double value) {
  separate();
  if (std::isfinite(value)) fmt::print(out_, "{}", value);
  return *this;
}

CsvWriter& CsvWriter::blank() {
  separate();
  return *this;
}

void CsvWriter::end_row() {
  std::fputc('\n', out_);
  row_open_ = false;
}

}  // namespace calo::core
