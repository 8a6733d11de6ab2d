#include "core/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"

namespace calo::core {
namespace {

bool is_numeric(const std::string& cell) {
  if (cell.empty()) return false;
  char first = cell[0];
  return std::isdigit(static_cast<unsigned char>(first)) ||
         ((first == '-' || first == '+' || first == '.') && cell.size() > 1);
}

std::string scaled(double value, const char* const* suffixes, int count, double base,
                   const std::string& unit) {
  int index = 0;
  double magnitude = std::fabs(value);
  while (index + 1 < count && magnitude >= base) {
    magnitude /= base;
    value /= base;
    ++index;
  }
  return fmt::format("{:.2f} {}{}", value, suffixes[index], unit);
}

}  // namespace

TextTable::TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void TextTable::set_units(std::vector<std::string> units) {
  if (units.size() != headers_.size()) throw std::logic_error("TextTable: units/header size mismatch");
  units_ = std::move(units);
}

void TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != headers_.size()) throw std::logic_error("TextTable: row/header size mismatch");
  rows_.push_back(std::move(cells));
}

std::string TextTable::render() const {
  std::vector<size_t> widths(headers_.size());
  auto widen = [&](const std::vector<std::string>& cells) {
    for (size_t column = 0; column < cells.size(); ++column)
      widths[column] = std::max(widths[column], cells[column].size());
  };
  widen(headers_);
  if (!units_.empty()) widen(units_);
  for (const auto& row : rows_) widen(row);
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells, bool align_numbers) {
    std::string line;
    for (size_t column = 0; column < cells.size(); ++column) {
      bool right = align_numbers ? is_numeric(cells[column]) : column > 0;
      line += column ? "  " : "";
      line += right ? fmt::format("{:>{}}", cells[column], widths[column])
                    : fmt::format("{:<{}}", cells[column], widths[column]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(headers_, false);
  if (!units_.empty()) emit(units_, false);
  for (const auto& row : rows_) emit(row, true);
  return out;
}

std::string format_count(double count) {
  static const char* const kSuffixes[] = {"", "k", "M", "B", "T"};
  return scaled(count, kSuffixes, 5, 1000.0, "");
}

std::string format_bytes(double bytes) {
  static const char* const kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi"};
  return scaled(bytes, kSuffixes, 6, 1024.0, "B");
}

std::string format_flops(double flops) {
  static const char* const kSuffixes[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
  return scaled(flops, kSuffixes, 8, 1000.0, "FLOP");
}

std::string format_duration(double seconds) {
  if (std::isnan(seconds)) return "–";
  if (std::fabs(seconds) < 1) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (std::fabs(seconds) < 3600) return fmt::format("{:.3f} s", seconds);
  return fmt::format("{:.2f} h", seconds / 3600);
}

}  // namespace calo::core
