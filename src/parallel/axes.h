// The named settings of a layout (schedule, recompute, precision, ...): one table entry each, which parse,
// to_string, the flags' help, the campaign keys' words and the planner's axes all read. Adding a value is
// adding a name to its entry; adding an axis is adding an entry here and a member to Layout.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"

namespace calo::parallel {

/// One named setting: its flag, its campaign key, what one value is called, and the values' names in the
/// enumerators' declaration order (the enumerators run 0, 1, 2, ...).
template <typename Enum, std::size_t N>
struct Axis {
  const char* flag;                  ///< the command-line flag, e.g. "--schedule"
  const char* key;                   ///< the campaign key, e.g. "schedule"
  const char* noun;                  ///< what one value is, with its article: "a schedule"
  std::array<const char*, N> names;  ///< value names, one per enumerator in declaration order

  /// The enumerator named `text`; InputError "WHAT: 'TEXT' is not NOUN; use a, b or c" otherwise, WHAT the
  /// flag unless `what` names another input (a campaign point, a run's stored config).
  Enum parse(const std::string& text, const std::string& what = "") const {
    if (const auto value = core::enum_value<Enum>(text, names)) return *value;
    throw InputError((what.empty() ? std::string(flag) : what) + ": '" + text + "' is not " + noun +
                     "; use " + choices(" or "));
  }
  /// The name of `value`.
  const char* name(Enum value) const { return core::enum_name(value, names); }
  /// The names joined by ", " with `last` before the final one: "gpipe, 1f1b or interleaved".
  std::string choices(const char* last = ", ") const {
    std::string text;
    for (std::size_t index = 0; index < N; ++index) {
      if (index > 0) text += index + 1 == N ? last : ", ";
      text += names[index];
    }
    return text;
  }
  /// The names as strings (a campaign key's words, a plan axis's default values).
  std::vector<std::string> words() const { return std::vector<std::string>(names.begin(), names.end()); }
};

}  // namespace calo::parallel
