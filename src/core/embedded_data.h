// Data files (data/**/*.yaml) compiled into the binary, so presets work wherever the binary runs.
#pragma once

#include <string_view>
#include <vector>

namespace calo::core {

/// One embedded file: `key` is its path under data/ without ".yaml" (e.g. "models/llama3-8b").
struct EmbeddedFile {
  std::string_view key;      ///< path under data/ without the extension
  std::string_view content;  ///< the file's text
};

/// All embedded data files, sorted by key. Defined in the generated embedded_data.cpp.
const std::vector<EmbeddedFile>& embedded_files();

}  // namespace calo::core
