// Outputs that appear whole or not at all: written under a temporary name beside the target and renamed over
// it only when complete, so a failure (bad input found half-way, a damaged store, disk full, a kill) never
// leaves a truncated file that looks like a result. The one output-file policy of every writer: the rename
// replaces a regular file or nothing — never a symlink, FIFO, device, socket or directory
// (require_file_target).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

namespace calo::core {

/// A file being written to `<target>.partial-<pid>`; commit() renames it to the target, the destructor
/// removes it when commit() was never reached.
class StagedFile {
 public:
  /// Creates the target's folder and opens the temporary file; InputError naming `target` (and `flag`, the
  /// option that named it) if the target exists and is not a regular file (require_file_target) or cannot
  /// be written.
  explicit StagedFile(std::filesystem::path target, const std::string& flag = "--out");
  /// Removes the temporary file unless committed.
  ~StagedFile();
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;
  /// The open temporary file (buffered, 1 MiB).
  std::FILE* stream() const { return stream_; }
  /// Appends `text`.
  void write(const std::string& text);
  /// Flushes and closes; RuntimeFailure if a write failed (disk full). Returns the bytes written.
  int64_t close();
  /// Closes (if still open), checks the target again and renames the temporary file over it.
  void commit();
  /// The path the file will have once committed.
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temporary_;
  std::string flag_;  ///< the option that named the target, for refusals
  std::FILE* stream_ = nullptr;
  bool committed_ = false;
};

/// Writes `text` to `path` whole or not at all (StagedFile); InputError naming `flag` if it cannot be
/// written.
void write_file_atomically(const std::filesystem::path& path, const std::string& text,
                           const std::string& flag = "--out");

/// InputError naming `path`, `flag` and what the path is ("a character device", "a symbolic link", ...)
/// unless `path` is absent or a regular file (not followed through a symlink): what a writer may replace.
/// Commands that work long before writing call it up front; StagedFile calls it on open and before the
/// rename.
void require_file_target(const std::filesystem::path& path, const std::string& flag);

/// Opens `path` for a log that is written while a process runs, and so cannot be staged (a child's stdout
/// and stderr): created, or truncated when it is a regular file; anything else is refused by the rule of
/// require_file_target, a symlink never followed (O_NOFOLLOW, so one planted after the check is refused too)
/// and a FIFO, device or socket never written. Returns the descriptor (close-on-exec, blocking); InputError
/// naming `path` and `flag` when it is not a regular file or cannot be opened.
int open_log_file(const std::filesystem::path& path, const std::string& flag);

/// InputError naming `flag` unless `path` is a directory or can become one (absent): a file in its place is
/// refused before any work.
void require_directory_target(const std::filesystem::path& path, const std::string& flag);

/// `path` as provenance records it: relative to the working directory when it lies under it (a fitted preset
/// written in a checkout cites tests/fixtures/..., not one machine's absolute path), otherwise as given.
std::string provenance_path(const std::filesystem::path& path);

}  // namespace calo::core
