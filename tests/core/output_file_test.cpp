// The one output-file policy (core::StagedFile, issue 67 item 1): a writer replaces a regular file or
// nothing. A symlink, FIFO, device node or directory in the target's place is refused naming the flag, the
// path and what it is, and is left as it was; the temporary file beside the target is never written through a
// link.
#include "core/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../common/scratch.h"
#include "core/error.h"

namespace calo::core {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The message of the InputError `write` throws, or "" when it throws none.
template <typename Write>
std::string refusal_of(Write write) {
  try {
    write();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(OutputFile, ARegularFileIsReplacedAndAnAbsentOneCreated) {
  const std::filesystem::path dir = testing::scratch_path("output-regular");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "old.txt") << "old\n";
  write_file_atomically(dir / "old.txt", "new\n");
  write_file_atomically(dir / "sub" / "fresh.txt", "fresh\n");
  EXPECT_EQ(read_text(dir / "old.txt"), "new\n");
  EXPECT_EQ(read_text(dir / "sub" / "fresh.txt"), "fresh\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 2);  // no temporary left
}

TEST(OutputFile, ASymlinkIsRefusedAndLeftPointingWhereItPointed) {
  const std::filesystem::path dir = testing::scratch_path("output-symlink");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "victim.txt") << "keep\n";
  std::filesystem::create_symlink(dir / "victim.txt", dir / "link.txt");
  std::filesystem::create_symlink(dir / "nowhere.txt", dir / "dangling.txt");
  const std::string message = refusal_of([&] { write_file_atomically(dir / "link.txt", "x", "--out"); });
  EXPECT_EQ(message, "--out " + (dir / "link.txt").string() +
                         " is a symbolic link, not a regular file; name a new file");
  EXPECT_NE(refusal_of([&] { write_file_atomically(dir / "dangling.txt", "x"); }).find("symbolic link"),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.txt"));
  EXPECT_FALSE(std::filesystem::exists(dir / "nowhere.txt"));
  EXPECT_EQ(read_text(dir / "victim.txt"), "keep\n");
}

TEST(OutputFile, AFifoADeviceAndADirectoryAreRefusedNamingWhatTheyAre) {
  const std::filesystem::path dir = testing::scratch_path("output-special");
  std::filesystem::create_directories(dir / "folder");
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_NE(refusal_of([&] {
              write_file_atomically(dir / "fifo", "x", "--out");
            }).find("is a FIFO (named pipe), not a regular file"),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::is_fifo(dir / "fifo"));
  // Only checked, never written: as root, a writer once turned /dev/full into a 4 KB regular file.
  EXPECT_EQ(refusal_of([] { require_file_target("/dev/null", "--out"); }),
            "--out /dev/null is a character device, not a regular file; name a new file");
  EXPECT_NE(refusal_of([&] {
              StagedFile file(dir / "folder", "--timeline");
            }).find("--timeline " + (dir / "folder").string() + " is a directory"),
            std::string::npos);
  EXPECT_NE(refusal_of([&] { require_directory_target(dir / "fifo", "--out"); }).find("is a FIFO"),
            std::string::npos);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 2);  // nothing staged beside them
}

TEST(OutputFile, ALinkWhereTheTemporaryGoesIsNotWrittenThrough) {
  const std::filesystem::path dir = testing::scratch_path("output-temporary-link");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "victim.txt") << "keep\n";
  std::filesystem::path temporary = dir / "out.txt";
  temporary += ".partial-" + std::to_string(::getpid());
  std::filesystem::create_symlink(dir / "victim.txt", temporary);
  write_file_atomically(dir / "out.txt", "result\n");
  EXPECT_EQ(read_text(dir / "victim.txt"), "keep\n");
  EXPECT_EQ(read_text(dir / "out.txt"), "result\n");
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / "out.txt")));
}

TEST(OutputFile, ALogIsTruncatedInPlaceButASymlinkFifoOrDeviceIsRefused) {
  // A log a process writes as it runs (core::open_log_file) is not staged, but follows the same rule.
  const std::filesystem::path dir = testing::scratch_path("output-log");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "old.log") << "an earlier run's lines\n";
  const int descriptor = open_log_file(dir / "old.log", "--out");
  ASSERT_GE(descriptor, 0);
  ASSERT_EQ(::write(descriptor, "new\n", 4), 4);
  ::close(descriptor);
  EXPECT_EQ(read_text(dir / "old.log"), "new\n");
  std::ofstream(dir / "victim.txt") << "keep\n";
  std::filesystem::create_symlink(dir / "victim.txt", dir / "link.log");
  EXPECT_EQ(
      refusal_of([&] { open_log_file(dir / "link.log", "--out"); }),
      "--out " + (dir / "link.log").string() + " is a symbolic link, not a regular file; name a new file");
  EXPECT_EQ(read_text(dir / "victim.txt"), "keep\n");
  ASSERT_EQ(mkfifo((dir / "fifo.log").c_str(), 0600), 0);
  EXPECT_NE(refusal_of([&] { open_log_file(dir / "fifo.log", "--out"); }).find("is a FIFO"),
            std::string::npos);
  EXPECT_NE(refusal_of([] { open_log_file("/dev/null", "--out"); }).find("is a character device"),
            std::string::npos);
  EXPECT_NE(
      refusal_of([&] { open_log_file(dir / "no-such-folder" / "x.log", "--out"); }).find("cannot write here"),
      std::string::npos);
}

}  // namespace
}  // namespace calo::core
