// Quoting for a POSIX shell: the one helper every command line calo prints or runs goes through (recorded
// job commands, campaign point commands, decompression pipes).
#pragma once

#include <string>
#include <vector>

namespace calo::core {

/// `word` as one POSIX shell word: unchanged when it holds only characters no shell treats specially
/// (letters, digits, _ - . / = : , +), else in single quotes with each ' written as '\''.
std::string shell_quote(const std::string& word);

/// `words` quoted with shell_quote and joined by spaces: a command line that a shell splits back into them.
std::string shell_join(const std::vector<std::string>& words);

}  // namespace calo::core
