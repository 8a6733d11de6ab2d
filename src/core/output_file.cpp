// Whole-or-nothing outputs: see output_file.h.
#include "core/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.h"

namespace calo::core {

namespace {

// What a file of mode `mode` is, in words for a refusal ("a character device").
std::string file_kind_words(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace

void require_file_target(const std::filesystem::path& path, const std::string& flag) {
  struct stat info {};
  // lstat: a symlink is refused as itself, never followed (renaming over it would replace the link, and
  // writing through it would write wherever it points).
  if (::lstat(path.c_str(), &info) != 0) return;  // absent, or unreadable: opening the file says why
  if (S_ISREG(info.st_mode)) return;
  throw InputError(fmt::format("{} {} is {}, not a regular file; name a new file", flag, path.string(),
                               file_kind_words(info.st_mode)));
}

int open_log_file(const std::filesystem::path& path, const std::string& flag) {
  require_file_target(path, flag);
  // O_NONBLOCK: a FIFO put there since the check fails (no reader) or opens without waiting for one; fstat
  // then refuses it, and any other non-regular file, before a byte is written or the file truncated.
  const int descriptor = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (descriptor < 0) {
    const int open_errno = errno;
    if (open_errno == ELOOP) require_file_target(path, flag);  // a symlink planted since: refused as such
    throw InputError(fmt::format("{} {}: cannot write here ({}); give a writable path", flag, path.string(),
                                 std::strerror(open_errno)));
  }
  struct stat info {};
  if (::fstat(descriptor, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(descriptor);
    throw InputError(fmt::format("{} {} is {}, not a regular file; name a new file", flag, path.string(),
                                 file_kind_words(info.st_mode)));
  }
  const int status_flags = ::fcntl(descriptor, F_GETFL);
  if (::ftruncate(descriptor, 0) != 0 || status_flags < 0 ||
      ::fcntl(descriptor, F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
    const int failed_errno = errno;
    ::close(descriptor);
    throw InputError(fmt::format("{} {}: cannot write here ({}); give a writable path", flag, path.string(),
                                 std::strerror(failed_errno)));
  }
  return descriptor;
}

StagedFile::StagedFile(std::filesystem::path target, const std::string& flag)
    : target_(std::move(target)), flag_(flag) {
  require_file_target(target_, flag_);
  std::error_code error;
  if (target_.has_parent_path()) {
    std::filesystem::create_directories(target_.parent_path(), error);
    if (error) {
      throw InputError(fmt::format("{} {}: cannot create its folder ({}); give a writable path", flag,
                                   target_.string(), error.message()));
    }
  }
  temporary_ = target_;
  temporary_ += fmt::format(".partial-{}", getpid());
  // A stale temporary of an earlier process with this pid is removed (a link as itself), then the file is
  // made new (O_EXCL): nothing already there is written through.
  std::filesystem::remove(temporary_, error);
  const int descriptor = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  const int open_errno = errno;
  if (descriptor >= 0) stream_ = ::fdopen(descriptor, "wb");
  if (stream_ == nullptr) {
    if (descriptor >= 0) ::close(descriptor);
    throw InputError(fmt::format("{} {}: cannot write here ({}); give a writable path", flag,
                                 target_.string(), std::strerror(descriptor >= 0 ? errno : open_errno)));
  }
  std::setvbuf(stream_, nullptr, _IOFBF, 1 << 20);
}

StagedFile::~StagedFile() {
  if (stream_ != nullptr) std::fclose(stream_);
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove(temporary_, ignored);
  }
}

void StagedFile::write(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stream_);
}

int64_t StagedFile::close() {
  if (stream_ == nullptr) return static_cast<int64_t>(std::filesystem::file_size(temporary_));
  const bool failed = std::fflush(stream_) != 0 || std::ferror(stream_) != 0;
  const auto bytes = static_cast<int64_t>(std::ftell(stream_));
  const bool close_failed = std::fclose(stream_) != 0;
  stream_ = nullptr;
  if (failed || close_failed) {
    throw RuntimeFailure(fmt::format("{}: write failed (disk full?); nothing was written", target_.string()));
  }
  return bytes;
}

void StagedFile::commit() {
  close();
  require_file_target(target_, flag_);  // something else may have been put there while the file was written
  std::error_code error;
  std::filesystem::rename(temporary_, target_, error);
  if (error) {
    throw RuntimeFailure(
        fmt::format("{}: cannot move the finished file into place ({})", target_.string(), error.message()));
  }
  committed_ = true;
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text,
                           const std::string& flag) {
  StagedFile file(path, flag);
  file.write(text);
  file.commit();
}

void require_directory_target(const std::filesystem::path& path, const std::string& flag) {
  struct stat info {};
  // stat, not lstat: a symlink to a directory is a directory to write into (its files are checked one by
  // one by StagedFile); anything else in its place is refused.
  if (::stat(path.c_str(), &info) != 0 || S_ISDIR(info.st_mode)) return;
  const std::string kind = S_ISREG(info.st_mode) ? "a file" : file_kind_words(info.st_mode);
  throw InputError(fmt::format("{} {}: is {}; this output is a directory of files, give a directory path",
                               flag, path.string(), kind));
}

std::string provenance_path(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::weakly_canonical(path, error);
  const std::filesystem::path here = std::filesystem::current_path(error);
  if (error || absolute.empty() || here.empty()) return path.string();
  const std::filesystem::path relative = absolute.lexically_relative(here);
  if (relative.empty() || *relative.begin() == "..") return path.string();
  return relative.string();
}

}  // namespace calo::core
