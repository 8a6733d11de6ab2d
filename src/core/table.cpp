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

/// `value` divided by `base` until below it (at most count - 1 times); `index` = the times divided.
struct Scaled {
  double value = 0;
  int index = 0;
};

Scaled scale_down(double value, int count, double base) {
  Scaled out{value, 0};
  while (out.index + 1 < count && std::fabs(out.value) >= base) {
    out.value /= base;
    ++out.index;
  }
  return out;
}

std::string scaled(double value, const char* const* suffixes, int count, double base,
                   const std::string& unit) {
  const Scaled shown = scale_down(value, count, base);
  return fmt::format("{:.2f} {}{}", shown.value, suffixes[shown.index], unit);
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

std::string format_significant(double value, int digits) {
  if (std::isnan(value)) return "–";
  if (value == 0 || !std::isfinite(value)) return fmt::format("{}", value);
  // The whole digits after rounding: 0.9997 to 3 digits is "1.00", not "1.000".
  const double rounded = std::stod(fmt::format("{:.{}e}", value, std::max(0, digits - 1)));
  const int whole_digits = static_cast<int>(std::floor(std::log10(std::fabs(rounded)))) + 1;
  return fmt::format("{:.{}f}", value, std::max(0, digits - whole_digits));
}

std::string format_si(double value, const std::string& unit, int digits) {
  if (std::isnan(value)) return "–";
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P"};
  Scaled shown = scale_down(value, 6, 1000.0);
  // What rounds up to 1000 takes the next prefix: 999.7 W to 3 digits is "1.00 kW", not "1000 W".
  if (std::fabs(shown.value) >= 1000 - 0.5 * std::pow(10.0, 3 - digits) && shown.index + 1 < 6)
    shown = {shown.value / 1000, shown.index + 1};
  return format_significant(shown.value, digits) + " " + kPrefixes[shown.index] + unit;
}

std::string format_thousands(double amount) {
  if (!std::isfinite(amount)) return std::isnan(amount) ? "–" : fmt::format("{}", amount);
  std::string digits = fmt::format("{:.0f}", std::fabs(amount));
  for (auto at = static_cast<std::ptrdiff_t>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ",");
  return (amount <= -0.5 ? "-" : "") + digits;
}

std::string format_duration(double seconds) {
  if (std::isnan(seconds)) return "–";
  if (std::fabs(seconds) < 1) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (std::fabs(seconds) < 3600) return fmt::format("{:.3f} s", seconds);
  return fmt::format("{:.2f} h", seconds / 3600);
}

}  // namespace calo::core
