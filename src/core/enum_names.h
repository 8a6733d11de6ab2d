// Names of enums from one table per enum (the to_string of many modules): the table lists a name per
// enumerator in declaration order, the enumerators running 0, 1, 2, ...
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace calo::core {

/// The name of `value` in `names` (one per enumerator, in declaration order from 0), or `fallback` when
/// `value` lies outside the table.
template <typename Enum, std::size_t N>
constexpr const char* enum_name(Enum value, const std::array<const char*, N>& names,
                                const char* fallback = "?") {
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : fallback;
}

/// The enumerator whose name in `names` is `text`; nullopt when none is (the caller names the input and the
/// choices).
template <typename Enum, std::size_t N>
constexpr std::optional<Enum> enum_value(std::string_view text, const std::array<const char*, N>& names) {
  for (std::size_t index = 0; index < N; ++index) {
    if (text == names[index]) return static_cast<Enum>(index);
  }
  return std::nullopt;
}

}  // namespace calo::core
