// A mistyped flag or command gets "did you mean": the real binary, run as a child process.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

/// stderr and exit code of `calo ARGS`.
std::pair<int, std::string> run_calo(const std::string& args) {
  const std::string command = std::string(CALO_EXECUTABLE) + " " + args + " 2>&1 >/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string text;
  std::array<char, 4096> buffer{};
  while (pipe != nullptr && fgets(buffer.data(), buffer.size(), pipe) != nullptr) text += buffer.data();
  const int status = pipe != nullptr ? pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST(ParserSuggestions, AMistypedFlagNamesTheNearestFlagsOfThatCommand) {
  const auto [code, text] = run_calo("sim --model llama3-8b --cluster h100-hgx --tpp 2");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("did you mean --tp or --pp or --vpp? (calo sim has no --tpp)"), std::string::npos)
      << text;
  const auto [prefix_code, prefix] = run_calo("sim --gpu 8 --model llama3-8b");
  EXPECT_EQ(prefix_code, 2);
  EXPECT_NE(prefix.find("did you mean --gpus? (calo sim has no --gpu)"), std::string::npos) << prefix;
  const auto [plan_code, plan] = run_calo("plan --modle llama3-8b --gbs 8");
  EXPECT_NE(plan.find("did you mean --model?"), std::string::npos) << plan;
}

TEST(ParserSuggestions, AMistypedCommandNamesTheNearestCommand) {
  const auto [code, text] = run_calo("smi --model llama3-8b");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("did you mean calo sim? ('smi' is no command)"), std::string::npos) << text;
}

TEST(ParserSuggestions, AFlagFarFromEveryFlagPointsToHelp) {
  const auto [code, text] = run_calo("sim --model llama3-8b --cluster h100-hgx --zzzzzzzzzzzz 1");
  EXPECT_EQ(code, 2);
  EXPECT_NE(text.find("calo sim has no --zzzzzzzzzzzz (calo sim --help lists its flags)"), std::string::npos)
      << text;
}

}  // namespace
