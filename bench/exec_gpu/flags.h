// Command-line flags of the CUDA benchmarks of bench/exec_gpu: "--key value" pairs, each handed to the
// benchmark's own parser; a key it does not know is an InputError that says where the usage is written.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string>

#include "core/error.h"

namespace calo::bench {

/// Calls `apply(key, value)` for each "--key value" pair of argv; `apply` returns false for a key it does not
/// know, which throws InputError naming the key and `usage_file` (the source whose header holds the usage).
inline void for_each_flag(int argc, char** argv, const char* usage_file,
                          const std::function<bool(const std::string&, const std::string&)>& apply) {
  for (int at = 1; at + 1 < argc; at += 2) {
    if (!apply(argv[at], argv[at + 1]))
      throw InputError(
          fmt::format("unknown option {} (see the usage at the top of {})", argv[at], usage_file));
  }
}

}  // namespace calo::bench
