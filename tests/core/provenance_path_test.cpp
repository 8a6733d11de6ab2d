// Provenance paths: a file under the working directory is cited relative to it, so a fitted preset written in
// a checkout names tests/fixtures/..., never one machine's absolute path; a file elsewhere keeps its path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/output_file.h"

namespace calo::core {
namespace {

/// Runs the test inside a fresh temporary directory and restores the working directory afterwards.
class ProvenancePath : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = std::filesystem::current_path();
    root_ = std::filesystem::temp_directory_path() / ("calo-provenance-" + std::to_string(::getpid()));
    std::filesystem::create_directories(root_ / "checkout" / "tests" / "fixtures");
    std::ofstream(root_ / "checkout" / "tests" / "fixtures" / "rank0.json") << "{}";
    std::ofstream(root_ / "outside.json") << "{}";
    std::filesystem::current_path(root_ / "checkout");
  }
  void TearDown() override {
    std::filesystem::current_path(previous_);
    std::filesystem::remove_all(root_);
  }
  std::filesystem::path previous_;
  std::filesystem::path root_;
};

TEST_F(ProvenancePath, AnAbsolutePathUnderTheWorkingDirectoryBecomesRelative) {
  EXPECT_EQ(provenance_path(root_ / "checkout" / "tests" / "fixtures" / "rank0.json"),
            "tests/fixtures/rank0.json");
}

TEST_F(ProvenancePath, ARelativePathStaysRelativeAndNormalised) {
  EXPECT_EQ(provenance_path("tests/./fixtures/rank0.json"), "tests/fixtures/rank0.json");
}

TEST_F(ProvenancePath, APathOutsideTheWorkingDirectoryIsKeptAsGiven) {
  const std::filesystem::path outside = root_ / "outside.json";
  EXPECT_EQ(provenance_path(outside), outside.string());
  EXPECT_EQ(provenance_path("../outside.json"), "../outside.json");
}

}  // namespace
}  // namespace calo::core
