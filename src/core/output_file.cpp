// Whole-or-nothing outputs: see output_file.h.
#include "core/output_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.h"

namespace calo::core {

StagedFile::StagedFile(std::filesystem::path target, const std::string& flag) : target_(std::move(target)) {
  std::error_code error;
  if (std::filesystem::is_directory(target_, error)) {
    throw InputError(fmt::format("{} {}: is a directory; give a file path", flag, target_.string()));
  }
  if (target_.has_parent_path()) {
    std::filesystem::create_directories(target_.parent_path(), error);
    if (error) {
      throw InputError(fmt::format("{} {}: cannot create its folder ({}); give a writable path", flag,
                                   target_.string(), error.message()));
    }
  }
  temporary_ = target_;
  temporary_ += fmt::format(".partial-{}", getpid());
  stream_ = std::fopen(temporary_.c_str(), "wb");
  if (stream_ == nullptr) {
    throw InputError(fmt::format("{} {}: cannot write here ({}); give a writable path", flag,
                                 target_.string(), std::strerror(errno)));
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
  std::error_code error;
  if (std::filesystem::exists(path, error) && !std::filesystem::is_directory(path, error)) {
    throw InputError(fmt::format(
        "{} {}: is a file; this output is a directory of files, give a directory path", flag, path.string()));
  }
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
