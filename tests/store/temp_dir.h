// Test helper: a fresh directory in the test process's scratch (tests/common/scratch.h), removed with its
// contents at scope exit.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "../common/scratch.h"

namespace calo::store::testing {

/// A unique temporary directory (mkdtemp), deleted recursively by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string pattern = calo::testing::scratch_path("store-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace calo::store::testing
