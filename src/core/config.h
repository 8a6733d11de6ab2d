// Loading YAML/JSON configuration: presets by name (embedded data/) or files by path.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace calo::core {

/// Parses YAML (a superset of JSON) text into JSON; `origin` names the source in error messages.
nlohmann::json parse_yaml(const std::string& text, const std::string& origin);

/// Renders JSON as block-style YAML (keys in the object's order; numbers with full precision).
std::string to_yaml(const nlohmann::json& value);

/// `text` read whole as a finite number ("500", "10.5", "5e2"); nullopt for empty text, trailing characters,
/// inf, nan and values beyond a double. The one number parser of flags, campaign values and YAML scalars.
std::optional<double> parse_finite_number(const std::string& text);

/// `value` as a JSON number, or null when it is NaN or infinite (JSON has no such numbers).
nlohmann::json json_number(double value);

/// Reads and parses a YAML or JSON file; throws InputError naming the path if it is missing or malformed.
nlohmann::json load_config_file(const std::string& path);

/// Loads `name_or_path` from data/`category`/ by preset name, or from a file if it names an existing file or
/// ends in .yaml/.yml/.json. Throws InputError listing the available presets when neither exists.
nlohmann::json load_preset_or_file(const std::string& category, const std::string& name_or_path);

/// Names of the presets embedded under data/`category`/, sorted.
std::vector<std::string> preset_names(const std::string& category);

/// A small typed reader over one JSON object: every getter names the key and the source on error.
class ConfigReader {
 public:
  /// Wraps `object` (must be a JSON object) read from `origin` (a file or preset name, for messages).
  ConfigReader(const nlohmann::json& object, std::string origin);

  /// Required integer at `key`.
  long long get_int(const std::string& key) const;
  /// Integer at `key`, or `fallback` when absent.
  long long get_int(const std::string& key, long long fallback) const;
  /// Required number at `key`.
  double get_double(const std::string& key) const;
  /// Number at `key`, or `fallback` when absent.
  double get_double(const std::string& key, double fallback) const;
  /// Required string at `key`.
  std::string get_string(const std::string& key) const;
  /// String at `key`, or `fallback` when absent.
  std::string get_string(const std::string& key, const std::string& fallback) const;
  /// Boolean at `key`, or `fallback` when absent.
  bool get_bool(const std::string& key, bool fallback) const;
  /// True when `key` is present.
  bool has(const std::string& key) const;
  /// Throws InputError if the object has a key outside `known_keys` (catches typos in config files).
  void reject_unknown_keys(const std::vector<std::string>& known_keys) const;

 private:
  const nlohmann::json& at(const std::string& key) const;
  const nlohmann::json& object_;
  std::string origin_;
};

}  // namespace calo::core
