#include "core/config.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/embedded_data.h"
#include "core/error.h"

namespace calo::core {
namespace {

// Offset of the first byte of `text` that is not well-formed UTF-8 (RFC 3629: no overlong forms, surrogates
// or code points above U+10FFFF) or, with `printable_only`, not a character YAML allows in a file (tab, line
// breaks and printable characters: no other C0/C1 control, DEL, U+FFFE/U+FFFF); npos if none. JSON strings
// must be UTF-8: one bad byte in a name would surface later as a json::type_error while printing it; and
// yaml-cpp turns a NUL byte in a plain scalar into a lone 0xA0 byte.
size_t invalid_text_offset(const std::string& text, bool printable_only) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  for (size_t at = 0; at < size;) {
    const unsigned char lead = bytes[at];
    if (lead < 0x80) {
      if (printable_only && ((lead < 0x20 && lead != '\t' && lead != '\n' && lead != '\r') || lead == 0x7F))
        return at;
      ++at;
      continue;
    }
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // overlong
      if (lead == 0xED) high = 0x9F;  // UTF-16 surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;   // overlong
      if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
    } else {
      return at;
    }
    if (at + length > size || bytes[at + 1] < low || bytes[at + 1] > high) return at;
    for (size_t next = 2; next < length; ++next)
      if ((bytes[at + next] & 0xC0) != 0x80) return at;
    if (printable_only) {
      const bool c1_control = lead == 0xC2 && bytes[at + 1] <= 0x9F && bytes[at + 1] != 0x85;
      const bool non_character = lead == 0xEF && bytes[at + 1] == 0xBF && bytes[at + 2] >= 0xBE;
      if (c1_control || non_character) return at;
    }
    at += length;
  }
  return std::string::npos;
}

// A scalar or key's text; InputError if yaml-cpp's unescaping made it invalid UTF-8: yaml-cpp 0.7 writes the
// escapes "\_" (no-break space) and "\N" (next line) as the single Latin-1 bytes 0xA0 and 0x85.
const std::string& checked_scalar(const YAML::Node& node) {
  if (invalid_text_offset(node.Scalar(), false) != std::string::npos) {
    throw InputError("not valid UTF-8 after unescaping (line " + std::to_string(node.Mark().line + 1) +
                     "); write the character itself instead of a \\_ or \\N escape");
  }
  return node.Scalar();
}

// Values one document may expand to. yaml-cpp keeps an alias as a shared node, so a few hundred bytes of
// nested anchors stand for billions of values; the copy into JSON stops here instead (a 1 MB file written out
// value by value holds at most ~500 000).
// Largest configuration file read (the biggest calibrated preset, with its provenance, is ~120 KB).
constexpr uintmax_t kMaxConfigBytes = uintmax_t{16} << 20;
constexpr size_t kMaxDocumentValues = 2'000'000;
// Nesting depth of lists and mappings (no configuration nests beyond a handful).
constexpr size_t kMaxDocumentDepth = 128;
// Longest preset name or file path taken (PATH_MAX; a longer one fails in the file system as "File name too
// long").
constexpr size_t kMaxNameOrPathChars = 4096;

// Copies a yaml-cpp tree into JSON within the budgets above; a duplicate key is an error, not a silent
// overwrite.
class JsonFromYaml {
 public:
  nlohmann::json convert(const YAML::Node& node, size_t depth = 0) {
    if (++values_ > kMaxDocumentValues) {
      throw InputError(
          fmt::format("expands to more than {} values (anchors and aliases nested inside each other?); write "
                      "the values out",
                      kMaxDocumentValues));
    }
    if (depth > kMaxDocumentDepth) {
      throw InputError(
          fmt::format("nested deeper than {} levels (line {})", kMaxDocumentDepth, node.Mark().line + 1));
    }
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar:
        return scalar(node);
      case YAML::NodeType::Sequence: {
        nlohmann::json array = nlohmann::json::array();
        for (const auto& element : node) array.push_back(convert(element, depth + 1));
        return array;
      }
      case YAML::NodeType::Map:
        return mapping(node, depth);
    }
    return nullptr;
  }

 private:
  static nlohmann::json scalar(const YAML::Node& node) {
    const std::string& text = checked_scalar(node);
    if (node.Tag() == "!") return text;  // quoted scalar: keep as string
    if (text == "true" || text == "True") return true;
    if (text == "false" || text == "False") return false;
    if (text == "null" || text == "~") return nullptr;
    // What std::stoll and std::stod could read begins with a digit, a sign, a point, white space or inf/nan
    // (not finite: text). Anything else is text without trying them: two exceptions per word cost seconds on
    // a document of a million words.
    const unsigned char first = text.empty() ? 0 : static_cast<unsigned char>(text[0]);
    if (!std::isdigit(first) && !std::isspace(first) && first != '+' && first != '-' && first != '.')
      return text;
    try {
      size_t used = 0;
      long long as_int = std::stoll(text, &used, 10);
      if (used == text.size()) return as_int;
    } catch (const std::exception&) {
    }
    // "inf" and "nan" stay text: no setting takes a non-finite number, and JSON has none.
    if (const std::optional<double> as_double = parse_finite_number(text)) return *as_double;
    return text;
  }

  nlohmann::json mapping(const YAML::Node& node, size_t depth) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& entry : node) {
      if (!entry.first.IsScalar())
        throw InputError("a key must be a plain value, not a list or mapping (line " +
                         std::to_string(entry.first.Mark().line + 1) + ")");
      const std::string& key = checked_scalar(entry.first);
      if (object.contains(key)) {
        throw InputError(fmt::format("key '{}' appears twice in one mapping (line {}); keep one of them", key,
                                     entry.first.Mark().line + 1));
      }
      object[key] = convert(entry.second, depth + 1);
    }
    return object;
  }

  size_t values_ = 0;
};

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t index = 0; index < items.size(); ++index) out += (index ? separator : "") + items[index];
  return out;
}

bool looks_like_path(const std::string& text) {
  auto ends_with = [&](const std::string& suffix) {
    return text.size() >= suffix.size() &&
           text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".yaml") || ends_with(".yml") || ends_with(".json") || text.find('/') != std::string::npos;
}

}  // namespace

nlohmann::json parse_yaml(const std::string& text, const std::string& origin) {
  if (const size_t bad = invalid_text_offset(text, true); bad != std::string::npos) {
    const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n') + 1;
    throw InputError(origin + ": not valid UTF-8 YAML text (line " + std::to_string(line) + ", byte " +
                     std::to_string(bad) +
                     ": a control character or broken UTF-8); save the file as UTF-8 text");
  }
  try {
    return JsonFromYaml().convert(YAML::Load(text));
  } catch (const InputError& error) {  // from JsonFromYaml, which does not know the origin
    throw InputError(origin + ": " + error.what());
  } catch (const YAML::DeepRecursion& error) {  // yaml-cpp's own guard, which calls it "bad file"
    throw InputError(
        fmt::format("{}: nested deeper than {} levels (line {}); no configuration nests beyond a "
                    "handful",
                    origin, kMaxDocumentDepth, error.mark.line + 1));
  } catch (const YAML::Exception& error) {
    throw InputError(origin + ": not valid YAML/JSON (line " + std::to_string(error.mark.line + 1) +
                     "): " + error.msg);
  }
}

namespace {

void emit_yaml(YAML::Emitter& out, const nlohmann::json& value) {
  if (value.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [key, item] : value.items()) {
      out << YAML::Key << key << YAML::Value;
      emit_yaml(out, item);
    }
    out << YAML::EndMap;
  } else if (value.is_array()) {
    const bool flat =
        std::all_of(value.begin(), value.end(), [](const auto& item) { return item.is_primitive(); });
    out << (flat ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
    for (const auto& item : value) emit_yaml(out, item);
    out << YAML::EndSeq;
  } else if (value.is_string()) {
    out << YAML::DoubleQuoted << value.get<std::string>();
  } else if (value.is_boolean()) {
    out << value.get<bool>();
  } else if (value.is_number_integer()) {
    out << value.get<long long>();
  } else if (value.is_number()) {
    out << YAML::Precision(10) << value.get<double>();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

std::optional<double> parse_finite_number(const std::string& text) {
  try {
    std::size_t used = 0;
    const double number = std::stod(text, &used);
    if (used == text.size() && std::isfinite(number)) return number;
  } catch (const std::exception&) {  // no number, or beyond a double
  }
  return std::nullopt;
}

nlohmann::json json_number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
}

std::string to_yaml(const nlohmann::json& value) {
  YAML::Emitter out;
  emit_yaml(out, value);
  return std::string(out.c_str()) + "\n";
}

nlohmann::json load_config_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status)) {
    throw InputError(fmt::format("'{}' is a directory; give a YAML file (e.g. {}/NAME.yaml)", path, path));
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw InputError(fmt::format("'{}' is not a regular file (a pipe or device); give a YAML file", path));
  }
  if (std::filesystem::is_regular_file(status) && std::filesystem::file_size(path, error) > kMaxConfigBytes) {
    throw InputError(fmt::format("'{}' is larger than {} MiB; a model, cluster or sweep file is a few KB",
                                 path, kMaxConfigBytes >> 20));
  }
  std::ifstream stream(path);
  if (!stream) throw InputError("cannot read '" + path + "': no such file or not readable");
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return parse_yaml(buffer.str(), path);
}

std::vector<std::string> preset_names(const std::string& category) {
  std::vector<std::string> names;
  const std::string prefix = category + "/";
  for (const auto& file : embedded_files()) {
    if (file.key.substr(0, prefix.size()) == prefix) names.emplace_back(file.key.substr(prefix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json load_preset_or_file(const std::string& category, const std::string& name_or_path) {
  require_input(
      name_or_path.size() <= kMaxNameOrPathChars,
      fmt::format("a {} name or path of {} characters ('{}...'): presets are short names and paths at "
                  "most {} characters; presets: {}",
                  category.substr(0, category.size() - (category.back() == 's')), name_or_path.size(),
                  name_or_path.substr(0, 40), kMaxNameOrPathChars, join(preset_names(category), ", ")));
  if (std::filesystem::is_regular_file(name_or_path)) return load_config_file(name_or_path);
  const std::string key = category + "/" + name_or_path;
  for (const auto& file : embedded_files()) {
    if (file.key == key) return parse_yaml(std::string(file.content), "preset '" + name_or_path + "'");
  }
  if (std::filesystem::exists(name_or_path))
    return load_config_file(name_or_path);  // says what it is instead
  if (looks_like_path(name_or_path)) {
    throw InputError("cannot read '" + name_or_path + "': no such file");
  }
  throw InputError("unknown " + category.substr(0, category.size() - (category.back() == 's')) + " '" +
                   name_or_path + "'; presets: " + join(preset_names(category), ", ") +
                   " (or give a path to a .yaml file)");
}

ConfigReader::ConfigReader(const nlohmann::json& object, std::string origin)
    : object_(object), origin_(std::move(origin)) {
  require_input(object_.is_object(), origin_ + ": expected a mapping of keys to values");
}

const nlohmann::json& ConfigReader::at(const std::string& key) const {
  auto found = object_.find(key);
  if (found == object_.end()) {
    // An unclosed quote swallows the lines after it into one string: "name: \"x" then "num_layers: 4" reads
    // as one name holding "num_layers: 4", and the key looks missing.
    for (const auto& [other, value] : object_.items()) {
      if (value.is_string() && value.get<std::string>().find(key + ":") != std::string::npos) {
        throw InputError(
            fmt::format("{}: missing required key '{}', but the text of '{}' holds '{}:'; close the "
                        "quote that opens the value of '{}'",
                        origin_, key, other, key, other));
      }
    }
    throw InputError(origin_ + ": missing required key '" + key + "'");
  }
  return *found;
}

bool ConfigReader::has(const std::string& key) const {
  return object_.contains(key) && !object_[key].is_null();
}

long long ConfigReader::get_int(const std::string& key) const {
  const auto& value = at(key);
  require_input(value.is_number_integer(),
                origin_ + ": '" + key + "' must be an integer, got " + value.dump());
  return value.get<long long>();
}

long long ConfigReader::get_int(const std::string& key, long long fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double ConfigReader::get_double(const std::string& key) const {
  const auto& value = at(key);
  require_input(value.is_number(), origin_ + ": '" + key + "' must be a number, got " + value.dump());
  return value.get<double>();
}

double ConfigReader::get_double(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

std::string ConfigReader::get_string(const std::string& key) const {
  const auto& value = at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_primitive()) return value.dump();
  throw InputError(origin_ + ": '" + key + "' must be a string, got " + value.dump());
}

std::string ConfigReader::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

bool ConfigReader::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& value = at(key);
  require_input(value.is_boolean(), origin_ + ": '" + key + "' must be true or false, got " + value.dump());
  return value.get<bool>();
}

void ConfigReader::reject_unknown_keys(const std::vector<std::string>& known_keys) const {
  for (const auto& [key, value] : object_.items()) {
    if (std::find(known_keys.begin(), known_keys.end(), key) == known_keys.end()) {
      throw InputError(origin_ + ": unknown key '" + key + "'; known keys: " + join(known_keys, ", "));
    }
  }
}

}  // namespace calo::core
