#pragma once
// The shape of a campaign index (DIR/campaign.json, written by `calo sweep`), checked by every reader before
// it reads a field: a hand-edited {"points":"x"} must be refused as a damaged index, not end in a JSON type
// error.

#include <algorithm>
#include <nlohmann/json.hpp>

namespace calo::core {

/// Whether `index` is an object whose "points" is a list of objects, each with a string "name" and, where
/// present, a string "status", "reason" and "run_dir" and an object "flags"; "axes", where present, a list of
/// strings.
inline bool is_campaign_index(const nlohmann::json& index) {
  if (!index.is_object() || !index.contains("points") || !index["points"].is_array()) return false;
  if (index.contains("axes") &&
      (!index["axes"].is_array() || !std::all_of(index["axes"].begin(), index["axes"].end(),
                                                 [](const nlohmann::json& key) { return key.is_string(); })))
    return false;
  const auto optional_string = [](const nlohmann::json& point, const char* key) {
    return !point.contains(key) || point[key].is_string();
  };
  return std::all_of(index["points"].begin(), index["points"].end(), [&](const nlohmann::json& point) {
    return point.is_object() && point.contains("name") && point["name"].is_string() &&
           optional_string(point, "status") && optional_string(point, "reason") &&
           optional_string(point, "run_dir") && (!point.contains("flags") || point["flags"].is_object());
  });
}

}  // namespace calo::core
