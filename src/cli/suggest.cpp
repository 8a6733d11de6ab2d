// Nearest flags and subcommands for parser errors (edit distance over the names the parser knows).
#include "cli/suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace calo::cli {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> nearest_names(const std::string& given, const std::vector<std::string>& known) {
  const std::size_t limit = std::max<std::size_t>(2, given.size() / 3);
  std::vector<std::pair<std::size_t, std::string>> near;
  for (const std::string& name : known) {
    const std::size_t distance = name.starts_with(given) ? 1 : edit_distance(given, name);
    if (distance <= limit && name != given) near.emplace_back(distance, name);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> names;
  for (std::size_t at = 0; at < near.size() && at < 3 && near[at].first == near[0].first; ++at)
    names.push_back(near[at].second);  // the nearest only: --gpu suggests --gpus, not also --tp
  return names;
}

std::vector<std::string> parse_suggestions(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> lines;
  if (args.empty() || args[0].starts_with("-")) return lines;
  const CLI::App* command = nullptr;
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands({})) {
    commands.push_back(sub->get_name());
    if (sub->get_name() == args[0]) command = sub;
  }
  if (command == nullptr) {
    const auto near = nearest_names(args[0], commands);
    if (!near.empty())
      lines.push_back(
          fmt::format("did you mean calo {}? ('{}' is no command)", fmt::join(near, " or calo "), args[0]));
    return lines;
  }
  std::vector<std::string> flags;
  for (const CLI::Option* option : command->get_options())
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
  for (std::size_t at = 1; at < args.size() && args[at] != "--"; ++at) {
    if (!args[at].starts_with("--")) continue;
    const std::string flag = args[at].substr(0, args[at].find('='));
    if (std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
    const auto near = nearest_names(flag, flags);
    lines.push_back(
        near.empty()
            ? fmt::format("calo {} has no {} (calo {} --help lists its flags)", args[0], flag, args[0])
            : fmt::format("did you mean {}? (calo {} has no {})", fmt::join(near, " or "), args[0], flag));
  }
  return lines;
}

}  // namespace calo::cli
