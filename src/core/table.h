// Plain-text tables for terminal output: aligned columns, a units row, '#'-comment header lines.
#pragma once

#include <string>
#include <vector>

namespace calo::core {

/// A text table: add a header, optional units, then rows of already-formatted cells.
class TextTable {
 public:
  /// Column titles; the number of columns is fixed by this call.
  explicit TextTable(std::vector<std::string> headers);
  /// Optional second header row with the unit of each column (e.g. "W", "GB").
  void set_units(std::vector<std::string> units);
  /// Appends one row; must have as many cells as there are headers.
  void add_row(std::vector<std::string> cells);
  /// Renders with columns padded; numeric-looking cells are right-aligned.
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::string> units_;
  std::vector<std::vector<std::string>> rows_;
};

/// Formats a count with an SI suffix: 70553706496 -> "70.55 B" (k, M, B, T; 2 decimals).
std::string format_count(double count);
/// Formats bytes in binary units: 1536 -> "1.50 KiB".
std::string format_bytes(double bytes);
/// Formats FLOPs with SI prefixes: 1.2e15 -> "1.20 PFLOP".
std::string format_flops(double flops);
/// Formats `value` to `digits` significant digits in fixed notation, so that close values read apart:
/// (1.88912, 4) -> "1.889", (0.0123456, 3) -> "0.0123", (23456, 3) -> "23456" (no digit of a whole number is
/// dropped); NaN -> "–".
std::string format_significant(double value, int digits);
/// Formats a quantity of `unit` (W, J) with the SI prefix that keeps it below 1000, to `digits` significant
/// digits: (3.11e6, "W") -> "3.11 MW", (2.23e6, "J") -> "2.23 MJ", (379.8, "W") -> "380 W"; NaN -> "–".
std::string format_si(double value, const std::string& unit, int digits = 3);
/// Formats a whole amount with its thousands separated by commas: 12345.6 -> "12,346"; NaN -> "–".
std::string format_thousands(double amount);
/// Formats a duration as people read a step time: 0.1517 -> "151.7 ms", 60.8622 -> "60.862 s" (seconds from
/// 1 s up, as the tables' unit s shows them), 5400 -> "1.50 h"; NaN -> "–".
std::string format_duration(double seconds);

}  // namespace calo::core
