// Shell quoting: a real /bin/sh splits every joined command line back into the words it was made of.
#include "core/shell.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace calo::core {
namespace {

/// The words /bin/sh makes of `command_line`, one per line (printf '%s\n').
std::vector<std::string> shell_words(const std::string& command_line) {
  const std::string command = "printf '%s\\n' " + command_line;
  FILE* pipe = popen(command.c_str(), "r");
  std::vector<std::string> words;
  if (pipe == nullptr) return words;
  char buffer[512];
  std::string line;
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) {
    line += buffer;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      words.push_back(line);
      line.clear();
    }
  }
  pclose(pipe);
  return words;
}

TEST(Shell, PlainWordsStayAsTheyAre) {
  EXPECT_EQ(shell_quote("--model"), "--model");
  EXPECT_EQ(shell_quote("runs/tp4-pp4.json"), "runs/tp4-pp4.json");
  EXPECT_EQ(shell_quote("a=b,c:d+e"), "a=b,c:d+e");
}

TEST(Shell, ASplitOfTheJoinedLineGivesBackEveryWord) {
  // The recorder's own joiner wrapped "it's" as 'it's', which a shell does not split back (issue 42 item 4).
  const std::vector<std::string> words = {"python3", "-c",        "print('it''s')", "it's",
                                          "",        "two words", "$HOME",          "`x`",
                                          "a;b|c&d", "\"q\"",     "back\\slash",    "*"};
  EXPECT_EQ(shell_words(shell_join(words)), words);
  for (const std::string& word : words)
    EXPECT_EQ(shell_words(shell_quote(word)), std::vector<std::string>{word});
}

}  // namespace
}  // namespace calo::core
