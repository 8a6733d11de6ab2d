// Replays every committed fuzz input (tests/fuzz/corpus/<target>/ and the findings in
// tests/fuzz/regressions/<target>/) through its target in the normal and the sanitizer builds: an input that
// once crashed a parser, or any exception other than InputError, fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "targets.h"

namespace calo::fuzz {
namespace {

std::vector<std::filesystem::path> inputs_of(const std::string& target) {
  std::vector<std::filesystem::path> files;
  for (const char* kind : {"corpus", "regressions"}) {
    const std::filesystem::path dir = std::filesystem::path(CALO_SOURCE_DIR) / "tests/fuzz" / kind / target;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

struct NamedTarget {
  std::string name;  // the folder of its inputs under tests/fuzz/corpus/ and tests/fuzz/regressions/
  Target run;
};

void PrintTo(const NamedTarget& target, std::ostream* out) {
  *out << target.name;
}

const std::vector<NamedTarget> kTargets = {{"model_yaml", model_yaml},
                                           {"cluster_yaml", cluster_yaml},
                                           {"kineto_trace", kineto_trace},
                                           {"marker_lines", marker_lines},
                                           {"campaign_spec", campaign_spec}};

class FuzzReplay : public testing::TestWithParam<NamedTarget> {};

TEST_P(FuzzReplay, EveryCommittedInputParsesOrIsRejectedAsBadInput) {
  const auto files = inputs_of(GetParam().name);
  ASSERT_GE(files.size(), 3u) << "seed corpus of " << GetParam().name << " is missing";
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    std::ifstream stream(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
    EXPECT_NO_THROW(GetParam().run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, testing::ValuesIn(kTargets),
                         [](const testing::TestParamInfo<NamedTarget>& target_info) {
                           return target_info.param.name;
                         });

}  // namespace
}  // namespace calo::fuzz
