// Scratch files of the test suites: one directory per test process, <tmp>/calo-test-<pid>/, removed when the
// process exits (gtest_discover_tests runs every test case as its own process). CALO_KEEP_TEST_DIRS=1 keeps
// it and prints where it is, to look at what a failing test wrote.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace calo::testing {

namespace detail {

/// The per-process scratch root: created fresh, removed recursively at exit by the process that created it.
class ScratchRoot {
 public:
  /// Creates <tmp>/calo-test-<pid> (a leftover of an earlier process with this pid is emptied first).
  ScratchRoot()
      : owner_(::getpid()),
        path_(std::filesystem::temp_directory_path() / ("calo-test-" + std::to_string(owner_))) {
    const char* keep = std::getenv("CALO_KEEP_TEST_DIRS");
    keep_ = keep != nullptr && *keep != '\0';
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    std::filesystem::create_directories(path_);
    if (keep_) std::fprintf(stderr, "CALO_KEEP_TEST_DIRS: test scratch kept in %s\n", path_.c_str());
  }
  /// Removes the root unless kept, and only in the creating process (a forked child's exit() leaves it).
  ~ScratchRoot() {
    if (keep_ || ::getpid() != owner_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchRoot(const ScratchRoot&) = delete;
  ScratchRoot& operator=(const ScratchRoot&) = delete;
  /// <tmp>/calo-test-<pid of the creating process>.
  const std::filesystem::path& path() const { return path_; }

 private:
  pid_t owner_;
  std::filesystem::path path_;
  bool keep_ = false;
};

}  // namespace detail

/// <tmp>/calo-test-<pid>/NAME for a test's scratch file or directory: the root exists, NAME is not created.
inline std::filesystem::path scratch_path(const std::string& name) {
  static const detail::ScratchRoot root;
  std::filesystem::create_directories(root.path());
  return root.path() / name;
}

}  // namespace calo::testing
