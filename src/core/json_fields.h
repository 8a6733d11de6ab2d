#pragma once
// Serialisation generated from a struct's fields, so that a JSON object cannot drift from the struct it
// prints.

#include <nlohmann/json.hpp>

/// Defines `void name(nlohmann::json&, const Type&)` writing each named member under its own name (nlohmann's
/// NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE without its from_json, which would ask every member to be readable
/// back; the _ONLY_SERIALIZE form came after Debian's 3.11.2).
#define CALO_JSON_WRITER(name, Type, ...)                                          \
  inline void name(nlohmann::json& nlohmann_json_j, const Type& nlohmann_json_t) { \
    NLOHMANN_JSON_EXPAND(NLOHMANN_JSON_PASTE(NLOHMANN_JSON_TO, __VA_ARGS__))       \
  }

/// Makes Type convertible to JSON (nlohmann's to_json hook) with every member listed; place it in Type's
/// namespace and list every member. A struct whose JSON adds derived or renamed values uses CALO_JSON_WRITER
/// under another name for its plain members instead, so that `nlohmann::json json = value` never yields a
/// part.
#define CALO_JSON_FIELDS(Type, ...) CALO_JSON_WRITER(to_json, Type, __VA_ARGS__)
